"""Reductions over a set of axes (no keepdims at this level: jnp adds it with a reshape).

Code-generation record: ``Lowering(REDUCE, monoid="sum" | "max" | "min" | "prod")``; argmax and
argmin have ``Lowering(ARG_REDUCE, monoid="max" | "min")``. The backends own the loop structure.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import ARG_REDUCE, REDUCE, Aval, Lowering, Primitive, register
from ..errors import AxisError, ShapeError
from .binders import broadcast_to, concatenate, flip, reduce_sum, reshape, transpose


def normalize_axes(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (int(axes),)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
            raise AxisError(f"axis {a} is out of bounds for an array of dimension {ndim}")
        if ndim == 0:
            continue
        a %= ndim
        if a in out:
            raise ShapeError(f"repeated axis {a}")
        out.append(a)
    return tuple(sorted(out))


def _reduce_aval(x: Aval, *, axes, dtype_rule=None) -> Aval:
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ShapeError(f"axis {a} is out of bounds for an array of dimension {x.ndim}")
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return Aval(shape, x.dtype if dtype_rule is None else dtype_rule, x.weak)


def keepdims_shape(shape, axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _expand_back(g, x, axes):
    """Broadcast a reduced value back to the operand's shape."""
    return broadcast_to(reshape(g, keepdims_shape(x.shape, axes)), x.shape)


def _sum_impl(x, *, axes):
    return np.add.reduce(x, axis=axes)   # what np.sum runs, without its Python dispatch


reduce_sum_p = register(Primitive(
    "reduce_sum", kind="reduce", abstract_eval=_reduce_aval, impl=_sum_impl,
    vjp=lambda g, out, x, *, axes: (_expand_back(g, x, axes),),
    jvp=lambda ts, out, x, *, axes: None if ts[0] is None else reduce_sum(ts[0], axes),
    codegen=Lowering(REDUCE, monoid="sum")))


def _chooser_weights(out, x, axes):
    """Where x attains the extremum, 1/count (ties share the gradient equally, as JAX)."""
    hit = (x == _expand_back(out, x, axes)).astype(out.dtype)
    count = reduce_sum(hit, axes)
    return hit / _expand_back(count, x, axes)


def _chooser(name, fn, monoid):
    def vjp(g, out, x, *, axes):
        return (_expand_back(g, x, axes) * _chooser_weights(out, x, axes),)

    def jvp(ts, out, x, *, axes):
        if ts[0] is None:
            return None
        return reduce_sum(ts[0] * _chooser_weights(out, x, axes), axes)

    def aval(x, *, axes):
        _ordered(x, name)
        if x.size == 0 and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"zero-size array to reduction operation {name}, which has no identity")
        return _reduce_aval(x, axes=axes)

    return register(Primitive(name, kind="reduce", abstract_eval=aval,
                              impl=lambda x, *, axes: fn(x, axis=axes), vjp=vjp, jvp=jvp,
                              codegen=Lowering(REDUCE, monoid=monoid)))


reduce_max_p = _chooser("reduce_max", np.maximum.reduce, "max")   # np.max, minus dispatch
reduce_min_p = _chooser("reduce_min", np.minimum.reduce, "min")


def _exclusive_cumprod(x):
    """prod(x[..., :i]) along the last axis, by a log-depth scan of shifted multiplications.

    Only mul/slice/concatenate: no division, so it is exact with zeros in the input and its own
    derivatives (to any order) are exact too."""
    n = x.shape[-1]
    lead = tuple(x.shape[:-1])

    def shift(c, s):   # c shifted right by s along the last axis, filled with ones
        return concatenate([np.ones(lead + (s,), x.dtype), c[..., :n - s]], -1)

    c, s = x, 1
    while s < n:
        c = c * shift(c, s)
        s *= 2
    return shift(c, 1) if n > 1 else np.ones(x.shape, x.dtype)


def _prod_grad(x, axes):
    """d prod / d x_i = the product of all the other elements, as exclusive prefix times suffix
    products (JAX's approach): correct with zeros in the input, at every order."""
    shape = tuple(x.shape)
    rest = [i for i in range(len(shape)) if i not in axes]
    perm = rest + list(axes)
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    xt = reshape(transpose(x, perm), tuple(shape[i] for i in rest) + (n,))
    left = _exclusive_cumprod(xt)
    right = flip(_exclusive_cumprod(flip(xt, -1)), -1)
    others = reshape(left * right, tuple(shape[i] for i in perm))
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return transpose(others, inv)


reduce_prod_p = register(Primitive(
    "reduce_prod", kind="reduce", abstract_eval=_reduce_aval,
    impl=lambda x, *, axes: np.prod(x, axis=axes),
    vjp=lambda g, out, x, *, axes: (_expand_back(g, x, axes) * _prod_grad(x, axes),),
    jvp=lambda ts, out, x, *, axes: None if ts[0] is None else reduce_sum(
        ts[0] * _prod_grad(x, axes), axes),
    codegen=Lowering(REDUCE, monoid="prod")))


def _ordered(x: Aval, name: str) -> None:
    """Complex numbers have no order (the Array API standard leaves max/argmax of them
    undefined): a TypeError saying what to reduce instead."""
    if dtypes.is_complex(x.dtype):
        raise TypeError(f"complex numbers ({x.dtype}) have no order, so no {name}; reduce "
                        "jnp.abs(x) or jnp.real(x) instead")


def _arg_aval(x, *, axis):
    _ordered(x, "argmax/argmin")
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"axis {axis} is out of bounds for an array of dimension {x.ndim}")
    if x.shape[axis] == 0:
        raise ShapeError("attempt to get argmax/argmin of an empty sequence")
    return Aval(tuple(d for i, d in enumerate(x.shape) if i != axis), dtypes.int64)


argmax_p = register(Primitive(
    "argmax", kind="reduce", abstract_eval=_arg_aval,
    impl=lambda x, *, axis: np.argmax(x, axis=axis), differentiable=False,
    codegen=Lowering(ARG_REDUCE, monoid="max")))
argmin_p = register(Primitive(
    "argmin", kind="reduce", abstract_eval=_arg_aval,
    impl=lambda x, *, axis: np.argmin(x, axis=axis), differentiable=False,
    codegen=Lowering(ARG_REDUCE, monoid="min")))


# ---------------------------------------------------------------- batching
from ..batching import arg_reduce_rule, reduce_rule  # noqa: E402

for _p in (reduce_sum_p, reduce_max_p, reduce_min_p, reduce_prod_p):
    _p.batch = reduce_rule(_p)
argmax_p.batch = arg_reduce_rule(argmax_p)
argmin_p.batch = arg_reduce_rule(argmin_p)
