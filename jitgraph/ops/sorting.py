"""``argsort`` along the last axis: the one sorting primitive (``sort``, ``median``,
``quantile`` gather with its result, so their gradients flow through the gather).

It has no codegen rule: a compiled program runs NumPy's stable sort as a host step between
kernels. Its output is an integer permutation, so it has no derivative.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..batching import move_batch_axis
from ..core import Aval, Primitive, register
from ..errors import ShapeError


def _argsort_aval(x):
    if x.ndim == 0:
        raise ShapeError("argsort needs an array of at least one dimension, got a scalar")
    return Aval(x.shape, dtypes.int64)


def _argsort_impl(x):
    return np.argsort(x, axis=-1, kind="stable").astype(np.int64)


argsort_p = register(Primitive(
    "argsort", kind="opaque", abstract_eval=_argsort_aval, impl=_argsort_impl,
    differentiable=False))


def _argsort_batch(args, dims):
    """Sorts run along the last axis: a batch axis there moves to the front."""
    x, d = args[0], dims[0]
    if d == len(x.shape) - 1:
        x, d = move_batch_axis(x, d, 0), 0
    return argsort_p(x), d


argsort_p.batch = _argsort_batch
