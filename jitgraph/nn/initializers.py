"""Weight initializers, as ``jax.nn.initializers``: factories that return ``init(key, shape,
dtype)``, with JAX's names, arguments and defaults, and the same numbers for the same key (the
``*_normal`` variance-scaling ones are truncated normals, as JAX's).

```python
from jitgraph.nn import initializers as init
w = init.glorot_normal()(key, (784, 512))                 # a dense weight, (in, out)
k = init.he_uniform(in_axis=2, out_axis=3)(key, (3, 3, 16, 32))   # a conv kernel, HWIO
```

``zeros`` and ``ones`` are initializers themselves (as JAX's); every other name is a factory.
Fan-in and fan-out are computed as JAX's: the sizes of ``in_axis`` and ``out_axis`` (default
the last two axes) times the receptive field, the product of the axes that are neither those
nor ``batch_axis``. So a dense weight is ``(in, out)`` and a convolution kernel ``(kh, kw, in,
out)``.

Migration: before the factories, ``glorot_normal`` and the other variance-scaling names were
the initializers themselves, called ``glorot_normal(key, shape, dtype)``. That call still
works and gives the same numbers, with a ``DeprecationWarning`` saying to write
``glorot_normal()(key, shape, dtype)``, the form JAX code uses (``Dense(out,
W_init=glorot_normal())``).
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np

from .. import config
from .. import numpy as jnp
from .. import random as jr
from ..arrays import Array

__all__ = ["zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
           "variance_scaling", "glorot_uniform", "glorot_normal", "xavier_uniform",
           "xavier_normal", "he_uniform", "he_normal", "kaiming_uniform", "kaiming_normal",
           "lecun_uniform", "lecun_normal", "orthogonal", "delta_orthogonal", "compute_fans"]

_AXES = "int | Sequence[int]"


def _dtype(dtype, default=None):
    """The init call's dtype, else the factory's, else the default float (``jitgraph.config``:
    float64 unless set to float32), as every other creation function."""
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(default) if default is not None else config.float_dtype()


def _result(x):
    """Eager results as ``Array`` (JAX's array methods); traced values unchanged."""
    return x.view(Array) if type(x) is np.ndarray else x


def zeros(key, shape: Sequence[int], dtype=None):
    """An array of ``shape`` filled with zeros (``key`` unused: the initializer signature)."""
    return np.zeros(shape, _dtype(dtype)).view(Array)


def ones(key, shape: Sequence[int], dtype=None):
    """An array of ``shape`` filled with ones (``key`` unused: the initializer signature)."""
    return np.ones(shape, _dtype(dtype)).view(Array)


def constant(value, dtype=None) -> Callable:
    """An initializer filling ``shape`` with ``value``, as ``jax.nn.initializers.constant``."""
    def init(key, shape, dtype=dtype):
        return np.full(shape, value, _dtype(dtype)).view(Array)
    return init


def normal(stddev: float = 1e-2, dtype=None) -> Callable:
    """An initializer drawing from a normal distribution of standard deviation ``stddev``."""
    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        return _result(jr.normal(key, shape, d) * np.asarray(stddev, d))
    return init


def uniform(scale: float = 1e-2, dtype=None) -> Callable:
    """An initializer drawing uniformly from ``[0, scale)``, as JAX's."""
    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        return _result(jr.uniform(key, shape, d) * np.asarray(scale, d))
    return init


def truncated_normal(stddev: float = 1e-2, dtype=None, lower: float = -2.0,
                     upper: float = 2.0) -> Callable:
    """An initializer drawing from a normal truncated to ``(lower, upper)`` (in standard
    deviations), then scaled by ``stddev``, as JAX's (the result's standard deviation is
    below ``stddev``: the truncation is not corrected for here, unlike ``variance_scaling``)."""
    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        return _result(jr.truncated_normal(key, lower, upper, shape, d) * np.asarray(stddev, d))
    return init


def _size(shape: Sequence[int], axes) -> int:
    if isinstance(axes, (int, np.integer)):
        return int(shape[axes])
    return math.prod(int(shape[a]) for a in axes)


def compute_fans(shape: Sequence[int], in_axis=-2, out_axis=-1,
                 batch_axis=()) -> tuple[float, float]:
    """``(fan_in, fan_out)`` of a weight of ``shape``, as JAX's: the sizes of ``in_axis`` and
    ``out_axis`` (ints or sequences of ints) each times the receptive field, the product of
    the axes in none of ``in_axis``, ``out_axis``, ``batch_axis``. A dense ``(in, out)`` weight
    has fans ``(in, out)``; a ``(3, 3, 16, 32)`` kernel has ``(144, 288)``."""
    shape = tuple(int(s) for s in shape)
    if len(shape) <= 1:
        raise ValueError(f"can't compute input and output sizes of a {len(shape)}-dimensional "
                         f"weights tensor (shape {shape}): fans need at least 2 axes; use "
                         f"normal() or zeros for biases")
    in_size, out_size = _size(shape, in_axis), _size(shape, out_axis)
    batch_size = _size(shape, batch_axis)
    if 0 in (in_size, out_size, batch_size):
        return 0.0, 0.0
    field = math.prod(shape) / in_size / out_size / batch_size
    return in_size * field, out_size * field


_FAN = {"fan_in": lambda i, o: i, "fan_out": lambda i, o: o,
        "fan_avg": lambda i, o: (i + o) / 2, "fan_geo_avg": lambda i, o: (i * o) ** 0.5}
_DISTRIBUTIONS = ("truncated_normal", "normal", "uniform")
# the standard deviation of a standard normal truncated to (-2, 2): dividing by it makes the
# truncated samples' variance the one asked for
_TRUNCATED_STD = .87962566103423978


def variance_scaling(scale: float, mode: str, distribution: str, in_axis=-2, out_axis=-1,
                     batch_axis=(), dtype=None) -> Callable:
    """An initializer with variance ``scale / n``, as ``jax.nn.initializers.variance_scaling``
    (the same numbers for a key).

    :param scale: the variance's numerator.
    :param mode: ``n``: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"`` (their mean) or
        ``"fan_geo_avg"`` (their geometric mean); fans as ``compute_fans``.
    :param distribution: ``"truncated_normal"`` (a normal truncated to two standard
        deviations, rescaled to the variance), ``"normal"`` or ``"uniform"`` (on
        ``[-sqrt(3 scale / n), sqrt(3 scale / n))``).
    :param in_axis: the input axis or axes of the weight (default the second-to-last).
    :param out_axis: the output axis or axes (default the last).
    :param batch_axis: axes that are neither fans nor receptive field (default none).
    :param dtype: the default dtype of the arrays the initializer returns.
    :returns: ``init(key, shape, dtype=dtype)``.
    """
    if mode not in _FAN:
        raise ValueError(f"variance_scaling: mode must be one of {sorted(_FAN)}, got {mode!r}")
    if distribution not in _DISTRIBUTIONS:
        raise ValueError(f"variance_scaling: distribution must be one of {_DISTRIBUTIONS}, "
                         f"got {distribution!r}")

    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        n = _FAN[mode](*compute_fans(shape, in_axis, out_axis, batch_axis))
        if n == 0:                          # an empty weight: nothing to draw
            return np.zeros(shape, d).view(Array)
        var = np.asarray(scale / n, d)
        if distribution == "truncated_normal":
            std = np.sqrt(var) / np.asarray(_TRUNCATED_STD, d)
            return _result(jr.truncated_normal(key, -2, 2, shape, d) * std)
        if distribution == "normal":
            return _result(jr.normal(key, shape, d) * np.sqrt(var))
        return _result(jr.uniform(key, shape, d, -1) * np.sqrt(np.asarray(3, d) * var))
    init.__doc__ = (f"Samples of ``shape`` with variance ``{scale:g} / {mode}`` "
                    f"({distribution.replace('_', ' ')}), drawn with ``key``.")
    return init


def _is_key(x) -> bool:
    """Whether a factory's first argument is a random key: the pre-factory call
    ``glorot_normal(key, shape)`` (an axis is an int or a sequence of ints, a key an array)."""
    return len(getattr(x, "shape", ())) >= 1


def _scaling_factory(name: str, scale: float, mode: str, distribution: str,
                     what: str) -> Callable:
    """``glorot_normal`` and its kin: ``variance_scaling`` with fixed scale, mode and
    distribution; still answering the pre-factory call, with a ``DeprecationWarning``."""
    def factory(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
        if _is_key(in_axis):
            key, shape = in_axis, out_axis
            if not (type(batch_axis) is tuple and not batch_axis):   # (key, shape, dtype)
                dtype = batch_axis
            warnings.warn(
                f"jitgraph.nn.initializers.{name}(key, shape, dtype) is the pre-factory call; "
                f"{name} is now a factory, as jax.nn.initializers.{name}: write "
                f"{name}()(key, shape, dtype) (or pass {name}() where an initializer is "
                f"expected)", DeprecationWarning, stacklevel=2)
            return variance_scaling(scale, mode, distribution)(key, shape, dtype)
        return variance_scaling(scale, mode, distribution, in_axis, out_axis, batch_axis, dtype)
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (
        f"{what}: ``variance_scaling({scale:g}, \"{mode}\", \"{distribution}\", in_axis, "
        f"out_axis, batch_axis, dtype)``, as ``jax.nn.initializers.{name}``.\n\n"
        f"``{name}()`` returns ``init(key, shape, dtype)``; ``in_axis``, ``out_axis`` and "
        f"``batch_axis`` say which axes of the weight are its inputs, outputs and batch (see "
        f"``compute_fans``). The pre-factory call ``{name}(key, shape, dtype)`` still returns "
        f"the array, with a ``DeprecationWarning``.")
    factory.__annotations__ = {"in_axis": _AXES, "out_axis": _AXES, "batch_axis": _AXES,
                               "return": "Callable"}
    return factory


glorot_uniform = _scaling_factory("glorot_uniform", 1.0, "fan_avg", "uniform",
                                  "Glorot (Xavier) uniform")
glorot_normal = _scaling_factory("glorot_normal", 1.0, "fan_avg", "truncated_normal",
                                 "Glorot (Xavier) truncated normal")
he_uniform = _scaling_factory("he_uniform", 2.0, "fan_in", "uniform", "He (Kaiming) uniform")
he_normal = _scaling_factory("he_normal", 2.0, "fan_in", "truncated_normal",
                             "He (Kaiming) truncated normal")
lecun_uniform = _scaling_factory("lecun_uniform", 1.0, "fan_in", "uniform", "LeCun uniform")
lecun_normal = _scaling_factory("lecun_normal", 1.0, "fan_in", "truncated_normal",
                                "LeCun truncated normal")
xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=None) -> Callable:
    """An initializer of (semi-)orthogonal matrices, as ``jax.nn.initializers.orthogonal``:
    the weight, reshaped to ``(rows, shape[column_axis])``, has orthonormal columns (or rows,
    when it is wider than tall), times ``scale``; the Q of a normal matrix's QR
    decomposition, its signs fixed by R's diagonal so that it is uniformly distributed."""
    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal: the initializer needs at least a 2-d shape, got "
                             f"{shape}")
        n_cols = shape[column_axis]
        n_rows = math.prod(shape) // n_cols
        a = jr.normal(key, (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols), d)
        q, r = jnp.linalg.qr(a)
        q = q * jnp.sign(jnp.diagonal(r))
        if n_rows < n_cols:
            q = q.T
        rest = shape[:column_axis % len(shape)] + shape[column_axis % len(shape) + 1:]
        q = jnp.moveaxis(jnp.reshape(q, rest + (n_cols,)), -1, column_axis)
        return _result(q * np.asarray(scale, d))
    return init


def delta_orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=None) -> Callable:
    """An initializer for 1-, 2- and 3-d convolution kernels (``(*spatial, in, out)``, ``in <=
    out``), as JAX's: zero except at the spatial centre, which holds an orthogonal matrix
    (``orthogonal``), so the convolution preserves norms at initialization."""
    def init(key, shape, dtype=dtype):
        d = _dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if len(shape) not in (3, 4, 5):
            raise ValueError(f"delta_orthogonal: the initializer needs a 3-, 4- or 5-d kernel "
                             f"shape, got {shape}")
        if shape[-2] > shape[-1]:
            raise ValueError(f"delta_orthogonal: fan_in (shape[-2] = {shape[-2]}) must be at "
                             f"most fan_out (shape[-1] = {shape[-1]}); got shape {shape}")
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        w = orthogonal(scale, column_axis, d)(key, shape[-2:])
        return _result(jnp.zeros(shape, d).at[centre].set(w))
    return init
