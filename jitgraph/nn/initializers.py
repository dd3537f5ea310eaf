"""Weight initializers: ``init(key, shape, dtype) -> array``, as ``jax.nn.initializers`` (the
same numbers for the same key; the ``*_normal`` ones are truncated normals, as JAX's).

Fan-in and fan-out follow the layers' weight layouts: a dense weight is ``(in, out)``, a
convolution kernel ``(kh, kw, in, out)`` (receptive field times channels).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .. import config
from .. import random as jr


def _fans(shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) < 2:
        n = int(shape[0]) if shape else 1
        return n, n
    field = math.prod(shape[:-2])
    return int(shape[-2]) * field, int(shape[-1]) * field


def _dtype(dtype):
    """The default float dtype (``jitgraph.config``: float64 unless set to float32), as every
    other creation function."""
    return np.dtype(dtype) if dtype is not None else config.float_dtype()


def zeros(key, shape, dtype=None):
    """An array of ``shape`` filled with zeros (``key`` unused; the initializer signature)."""
    return np.zeros(shape, _dtype(dtype))


def ones(key, shape, dtype=None):
    """An array of ``shape`` filled with ones (``key`` unused; the initializer signature)."""
    return np.ones(shape, _dtype(dtype))


def normal(stddev: float = 1e-2) -> Callable:
    """An initializer drawing from a normal distribution of standard deviation ``stddev``."""
    def init(key, shape, dtype=None):
        d = _dtype(dtype)
        return jr.normal(key, shape, d) * np.asarray(stddev, d)
    return init


def uniform(scale: float = 1e-2) -> Callable:
    """Uniform in [0, scale), as JAX: ``uniform(key, shape) * scale``."""
    def init(key, shape, dtype=None):
        d = _dtype(dtype)
        return jr.uniform(key, shape, d) * np.asarray(scale, d)
    return init


_FAN = {"fan_in": lambda i, o: i, "fan_out": lambda i, o: o,
        "fan_avg": lambda i, o: (i + o) / 2, "fan_geo_avg": lambda i, o: (i * o) ** 0.5}
_TRUNCATED_STD = .87962566103423978      # the stddev of a standard normal truncated to (-2, 2)


def variance_scaling(scale: float, mode: str, distribution: str) -> Callable:
    """Samples with variance ``scale / n`` (n: fan_in, fan_out, their mean or geometric mean),
    computed as ``jax.nn.initializers.variance_scaling`` (the same numbers for a key): a
    normal truncated to two standard deviations and rescaled, a normal, or a uniform."""
    if mode not in _FAN:
        raise ValueError(f"variance_scaling: mode must be one of {sorted(_FAN)}, got {mode!r}")
    if distribution not in ("uniform", "normal", "truncated_normal"):
        raise ValueError(f"variance_scaling: distribution must be uniform, normal or "
                         f"truncated_normal, got {distribution!r}")

    def init(key, shape, dtype=None):
        d = _dtype(dtype)
        var = np.asarray(scale / max(_FAN[mode](*_fans(shape)), 1), d)
        if distribution == "truncated_normal":
            std = np.sqrt(var) / np.asarray(_TRUNCATED_STD, d)
            return jr.truncated_normal(key, -2, 2, shape, d) * std
        if distribution == "normal":
            return jr.normal(key, shape, d) * np.sqrt(var)
        return jr.uniform(key, shape, d, -1) * np.sqrt(np.asarray(3, d) * var)
    init.__doc__ = (f"Samples of ``shape`` with variance ``{scale:g} / {mode}`` "
                    f"({distribution.replace('_', ' ')}), drawn with ``key``.")
    return init


glorot_uniform = xavier_uniform = variance_scaling(1.0, "fan_avg", "uniform")
glorot_normal = xavier_normal = variance_scaling(1.0, "fan_avg", "truncated_normal")
he_uniform = kaiming_uniform = variance_scaling(2.0, "fan_in", "uniform")
he_normal = kaiming_normal = variance_scaling(2.0, "fan_in", "truncated_normal")
lecun_normal = variance_scaling(1.0, "fan_in", "truncated_normal")
lecun_uniform = variance_scaling(1.0, "fan_in", "uniform")
