"""Array creation: constants (zeros, ones, full, empty, arange, eye, linspace) and *_like.

Without a dtype, floats are ``jitgraph.config``'s default float (float64, NumPy's, unless set
to float32) and integers from Python ints its default int; ``*_like`` keep their argument's."""
from __future__ import annotations

import builtins

import numpy as np

from .. import config, dtypes
from ..core import Tracer, aval_of
from ._base import _check_device, _operand, astype, _locate_module
from .manipulation import broadcast_to


# ------------------------------------------------------------------ creation (constants)
def _dt(dtype, default=None):
    if dtype is not None:
        return dtypes.requested(dtype)
    return default if default is not None else config.float_dtype()


def _python_numbers(*values) -> bool:
    return all(isinstance(v, (bool, int, float)) and not isinstance(v, np.generic)
               for v in values if v is not None)


def _default_of(r: np.ndarray, *values) -> np.dtype:
    """The dtype of a value NumPy made from ``values``: the default of its kind when they are
    Python numbers (NumPy would say int64/float64), else NumPy's, made supported."""
    if r.dtype.kind in "if" and _python_numbers(*values):
        return dtypes.default_for_kind(r.dtype.kind)
    return dtypes.canonical(r.dtype)


def zeros(shape, dtype=None, *, device=None):
    """An array of ``shape`` filled with zeros (the default float dtype, float64 unless
    ``jitgraph.config`` says float32, when no ``dtype`` is given)."""
    _check_device(device, "zeros")
    return np.zeros(shape, _dt(dtype))


def ones(shape, dtype=None, *, device=None):
    """An array of ``shape`` filled with ones (the default float dtype, float64 unless
    ``jitgraph.config`` says float32, when no ``dtype`` is given)."""
    _check_device(device, "ones")
    return np.ones(shape, _dt(dtype))


def full(shape, fill_value, dtype=None, *, device=None):
    """An array of ``shape`` filled with ``fill_value``."""
    _check_device(device, "full")
    if isinstance(fill_value, Tracer):
        return broadcast_to(astype(fill_value, dtype) if dtype else fill_value, shape)
    d = _dt(dtype, _default_of(np.asarray(fill_value), fill_value))
    return np.full(shape, fill_value, d)


def empty(shape, dtype=None, *, device=None):
    """Zeros (as JAX's ``empty``: a traced program has no uninitialized memory to give)."""
    _check_device(device, "empty")
    return zeros(shape, dtype)


def empty_like(x, dtype=None, *, device=None):
    """An array of ``x``'s shape and dtype (or ``dtype``); here filled with zeros, so never
    uninitialised."""
    _check_device(device, "empty_like")
    return zeros_like(x, dtype)


def zeros_like(x, dtype=None, *, device=None):
    """An array of ``x``'s shape and dtype (or ``dtype``) filled with zeros."""
    _check_device(device, "zeros_like")
    a = aval_of(_operand(x))
    return np.zeros(a.shape, _dt(dtype, a.dtype))


def ones_like(x, dtype=None, *, device=None):
    """An array of ``x``'s shape and dtype (or ``dtype``) filled with ones."""
    _check_device(device, "ones_like")
    a = aval_of(_operand(x))
    return np.ones(a.shape, _dt(dtype, a.dtype))


def full_like(x, fill_value, dtype=None, *, device=None):
    """An array of ``x``'s shape (and dtype unless given) filled with ``fill_value``."""
    _check_device(device, "full_like")
    a = aval_of(_operand(x))
    return full(a.shape, fill_value, _dt(dtype, a.dtype))


def arange(start, stop=None, step=1, dtype=None, *, device=None):
    """NumPy's arange. Traced bounds work where their values are known at trace time (inside
    ``grad``/``jvp`` run eagerly): the length is fixed from them and the values stay
    differentiable (``start + step * i``). Under ``jit`` the bounds must be static."""
    _check_device(device, "arange")
    if any(isinstance(v, Tracer) for v in (start, stop, step)):
        return _traced_arange(start, stop, step, dtype)
    if stop is None:               # arange(n, step=s): [0, n) by s, as NumPy's
        start, stop = 0, start
    r = np.arange(start, stop, step)
    return r.astype(_dt(dtype, _default_of(r, start, stop, step)))


def _concrete_value(v, what):
    if isinstance(v, Tracer):
        if v.val is None:
            raise TypeError(f"{what} needs concrete (static) bounds under jit, got an abstract "
                            "traced value; the shape of an array must be known at trace time "
                            "(pass the bound as a static argument)")
        return np.asarray(v.val).item()
    return v


def _traced_arange(start, stop, step, dtype):
    from .math import add, multiply
    if stop is None:
        start, stop = 0, start
    n = len(np.arange(*(_concrete_value(v, "arange") for v in (start, stop, step))))
    d = _dt(dtype, dtypes.result_type(*[(aval_of(_operand(v)).dtype, aval_of(_operand(v)).weak)
                                        for v in (start, stop, step)])[0])
    return astype(add(start, multiply(step, np.arange(n, dtype=d))), d)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """NumPy's linspace; ``start``/``stop`` may be traced (the length ``num`` is static)."""
    _check_device(device, "linspace")
    from .math import add, multiply, subtract
    num = int(num)
    if num < 0:
        raise ValueError(f"linspace: number of samples, {num}, must be non-negative")
    if not any(isinstance(v, Tracer) for v in (start, stop)):
        r = np.linspace(start, stop, num, endpoint=endpoint, retstep=retstep, axis=axis)
        values = r[0] if retstep else r
        d = _dt(dtype, dtypes.complex_dtype(config.float_dtype())
                if dtypes.is_complex(values.dtype) else None)
        return (values.astype(d), r[1]) if retstep else values.astype(d)
    div = (num - 1) if endpoint else num
    frac = np.arange(num, dtype=np.float64) / builtins.max(div, 1)
    start, stop = _operand(start), _operand(stop)
    shp = np.broadcast_shapes(aval_of(start).shape, aval_of(stop).shape)
    frac = frac.reshape((num,) + (1,) * len(shp))
    step = subtract(stop, start)
    out = add(start, multiply(step, frac))
    if endpoint and num > 1:
        from .indexing import getitem
        from .manipulation import concatenate, expand_dims
        out = concatenate([getitem(out, slice(0, num - 1)), expand_dims(stop + 0 * start, 0)])
    if axis != 0:
        from .manipulation import moveaxis
        out = moveaxis(out, 0, axis)
    out = astype(out, _dt(dtype))
    return (out, multiply(step, 1.0 / div) if div else np.nan) if retstep else out


def eye(N, M=None, k=0, dtype=None, *, device=None):
    """An ``N`` x ``M`` array with ones on the ``k``-th diagonal."""
    _check_device(device, "eye")
    return np.eye(N, M, k, dtype=_dt(dtype))


def identity(n, dtype=None, *, device=None):
    """The ``n`` x ``n`` identity matrix."""
    _check_device(device, "identity")
    return eye(n, dtype=dtype)


_locate_module(globals(), __name__)
