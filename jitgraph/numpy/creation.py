"""Array creation: constants (zeros, ones, full, arange, eye, linspace) and *_like."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of
from ._base import _operand, astype, float64, _locate_module
from .manipulation import broadcast_to


# ------------------------------------------------------------------ creation (constants)
def _dt(dtype, default=float64):
    return dtypes.canonical(dtype) if dtype is not None else default


def zeros(shape, dtype=None):
    return np.zeros(shape, _dt(dtype))


def ones(shape, dtype=None):
    return np.ones(shape, _dt(dtype))


def full(shape, fill_value, dtype=None):
    if isinstance(fill_value, Tracer):
        return broadcast_to(astype(fill_value, dtype) if dtype else fill_value, shape)
    d = _dt(dtype, dtypes.canonical(np.asarray(fill_value).dtype))
    return np.full(shape, fill_value, d)


def zeros_like(x, dtype=None):
    a = aval_of(_operand(x))
    return np.zeros(a.shape, _dt(dtype, a.dtype))


def ones_like(x, dtype=None):
    a = aval_of(_operand(x))
    return np.ones(a.shape, _dt(dtype, a.dtype))


def full_like(x, fill_value, dtype=None):
    a = aval_of(_operand(x))
    return full(a.shape, fill_value, _dt(dtype, a.dtype))


def arange(start, stop=None, step=1, dtype=None):
    for v in (start, stop, step):
        if isinstance(v, Tracer):
            raise TypeError("arange needs concrete (static) bounds, got a traced value; the "
                            "shape of an array must be known at trace time")
    r = np.arange(start, stop, step) if stop is not None else np.arange(start)
    return r.astype(_dt(dtype, dtypes.canonical(r.dtype)))


def eye(N, M=None, k=0, dtype=None):
    return np.eye(N, M, k, dtype=_dt(dtype))


def linspace(start, stop, num=50, endpoint=True, dtype=None):
    return np.linspace(start, stop, num, endpoint=endpoint).astype(_dt(dtype))



def identity(n, dtype=None):
    return eye(n, dtype=dtype)


_locate_module(globals(), __name__)
