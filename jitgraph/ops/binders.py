"""Binders: the primitives applied with the dtype promotion and the shape handling that their
rules need, below ``jitgraph.numpy``.

The primitives' VJP and JVP rules are written with these functions and with the primitives
themselves (a primitive is callable), as JAX writes its rules with ``lax``: ``jitgraph.numpy``
is built on the primitives, so a rule that called it would reach up a layer. ``jitgraph.numpy``
stands on the same ground (``operand``, ``promote``, ``cast``) and adds NumPy's conventions:
axis arguments in every form, keyword names, errors that name the user's line.

Each binder records the nodes its ``jitgraph.numpy`` counterpart records (``select`` is
``where``'s, ``reduce_sum`` is ``sum``'s, ``div`` is ``true_divide``'s), so a rule's graph
is the same whichever of the two wrote it. Operands are tracers, arrays or Python scalars
(weak-typed, as everywhere).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import dtypes
from ..arrays import Array
from ..batching import reshape
from ..core import Aval, Tracer, aval_of, bind

__all__ = ["operand", "holds_tracer", "cast", "promote", "reshape", "transpose", "swapaxes",
           "expand_dims", "broadcast_to", "concatenate", "flip", "reduce_sum", "select", "div",
           "trunc", "matmul", "tril", "triu", "diagonal", "unbroadcast", "broadcast_tangent",
           "add_tangents"]


# ------------------------------------------------------------------ operands and promotion
def operand(x: Any, name: str = "argument") -> Any:
    """Tracers, arrays, Python scalars and (regular) nested lists, as operands (a nested list
    holding traced values is stacked); a TypeError or ValueError naming ``name`` for the
    rest."""
    if isinstance(x, Tracer):
        return x
    if holds_tracer(x):
        rows = [operand(e, name) for e in x]
        shapes = {aval_of(r).shape for r in rows}
        if len(shapes) > 1:
            raise ValueError(f"{name}: cannot make an array from a ragged nested sequence "
                             f"(rows of shapes {sorted(shapes)}); all rows must have the "
                             "same length")
        return _stack(rows)
    return dtypes.concrete_operand(x, name)


def holds_tracer(x: Any) -> bool:
    """Whether ``x`` is a traced value or a (nested) list or tuple holding one."""
    return isinstance(x, Tracer) or (isinstance(x, (list, tuple))
                                     and any(isinstance(e, Tracer) for e in _iter_nested(x)))


def _iter_nested(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _iter_nested(e)
        else:
            yield e


def _stack(rows: list) -> Any:
    """The rows (operands of one shape) joined along a new first axis."""
    return concatenate([reshape(r, (1,) + aval_of(r).shape) for r in rows], 0)


def cast(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (a ``convert`` node for a traced value of another dtype)."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else bind(elementwise.convert_p, x, dtype=dtype)
    if dtypes.is_complex(np.result_type(x)) and not dtypes.is_complex(dtype):
        x = np.real(x)          # (the real part, as ``convert`` takes, without NumPy's warning)
    if isinstance(x, np.ndarray):
        return x if x.dtype == dtype else x.astype(dtype)
    return np.asarray(x, dtype)


_PLAIN_SCALARS = (float, int, bool)


def _plain_operands(xs) -> bool:
    """Every operand is already one ``operand`` returns unchanged (the common case, which
    then skips building its error-message names)."""
    for x in xs:
        t = type(x)
        if not (t is Tracer or t in _PLAIN_SCALARS
                or (t is np.ndarray or t is Array) and x.dtype in dtypes.SUPPORTED):
            return False
    return True


def promote(*xs: Any, float_only: bool = False) -> list:
    """The operands cast to their common dtype (NumPy 2's promotion, Python scalars weak);
    ``float_only``: integer and bool results become float64."""
    if not _plain_operands(xs):
        xs = [operand(x, f"argument {i}" if len(xs) > 1 else "argument")
              for i, x in enumerate(xs)]
    if len(xs) == 2:        # the common cases, unrolled: eager code promotes on every op
        x, y = xs
        a, b = aval_of(x), aval_of(y)
        dtype = dtypes.result_type((a.dtype, a.weak), (b.dtype, b.weak))[0]
        if float_only and not dtypes.is_inexact(dtype):
            dtype = dtypes.float64
        return [x if a.dtype is dtype else cast(x, dtype),
                y if b.dtype is dtype else cast(y, dtype)]
    if len(xs) == 1:
        x = xs[0]
        a = aval_of(x)
        dtype = dtypes.result_type((a.dtype, a.weak))[0]
        if float_only and not dtypes.is_inexact(dtype):
            dtype = dtypes.float64
        return [x if a.dtype is dtype else cast(x, dtype)]
    avals = [aval_of(x) for x in xs]
    dtype, _ = dtypes.result_type(*[(a.dtype, a.weak) for a in avals])
    if float_only and not dtypes.is_inexact(dtype):
        dtype = dtypes.float64
    return [x if a.dtype is dtype else cast(x, dtype) for x, a in zip(xs, avals)]


# ------------------------------------------------------------------ layout
# (``reshape(x, shape)``, no node when the shape is already ``shape``: batching's, re-exported)
def transpose(x: Any, perm: Sequence[int]) -> Any:
    """``x`` with its axes permuted by ``perm`` (non-negative); no node for the identity."""
    perm = tuple(perm)
    return x if perm == tuple(range(aval_of(x).ndim)) else bind(layout.transpose_p, x, perm=perm)


def swapaxes(x: Any, axis1: int, axis2: int) -> Any:
    """``x`` with two axes (negative ones count from the end) exchanged."""
    nd = aval_of(x).ndim
    perm = list(range(nd))
    a, b = axis1 % nd, axis2 % nd
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def expand_dims(x: Any, axis: int) -> Any:
    """``x`` with a new axis of length 1 at ``axis`` (of the result; negative from the end)."""
    shape = list(aval_of(x).shape)
    shape.insert(axis % (len(shape) + 1), 1)
    return reshape(x, shape)


def broadcast_to(x: Any, shape: Sequence[int]) -> Any:
    """``x`` broadcast to ``shape``; no node when it has that shape already."""
    shape = tuple(int(d) for d in shape)
    if aval_of(x).shape == shape:
        return x
    if not isinstance(x, Tracer):
        x = np.asarray(x, aval_of(x).dtype)
    return bind(layout.broadcast_to_p, x, shape=shape)


def concatenate(xs: Sequence[Any], axis: int) -> Any:
    """The operands (promoted to one dtype) joined along ``axis`` (negative from the end)."""
    xs = promote(*xs)
    if len(xs) == 1:
        return xs[0]
    return bind(layout.concatenate_p, *xs, axis=axis % aval_of(xs[0]).ndim)


def flip(x: Any, axis: int) -> Any:
    """``x`` with the order of its elements reversed along ``axis`` (a ``slice`` of step -1)."""
    shape = aval_of(x).shape
    axis %= len(shape)
    return bind(layout.slice_p, x, slices=tuple(
        slice(None, None, -1).indices(n) if i == axis else (0, n, 1)
        for i, n in enumerate(shape)))


# ------------------------------------------------------------------ arithmetic
def reduce_sum(x: Any, axes: Sequence[int] | int) -> Any:
    """``x`` summed over ``axes`` (negative ones count from the end); no node for none."""
    axes = reductions.normalize_axes(axes, aval_of(x).ndim)
    return bind(reductions.reduce_sum_p, x, axes=axes) if axes else x


def select(condition: Any, x: Any, y: Any) -> Any:
    """``x`` where the boolean ``condition`` holds, else ``y`` (promoted to one dtype and
    broadcast together)."""
    return bind(elementwise.select_p, condition, *promote(x, y))


def div(x: Any, y: Any) -> Any:
    """``x / y`` in their common float dtype."""
    return bind(elementwise.div_p, *promote(x, y, float_only=True))


def trunc(x: Any) -> Any:
    """A float ``x`` rounded towards zero: ``ceil`` below zero, ``floor`` above (as
    ``jnp.trunc``, with ``ceil(x) = -floor(-x)``)."""
    floor, neg = elementwise.floor_p, elementwise.neg_p
    below = bind(elementwise.BINARY["lt"], *promote(x, 0))
    return select(below, neg(floor(neg(x))), floor(x))


def matmul(a: Any, b: Any) -> Any:
    """The ``matmul`` of two stacks of matrices of one rank and equal batch dimensions."""
    return bind(linalg.matmul_p, *promote(a, b))


# ------------------------------------------------------------------ matrices
def _tri_mask(shape: Sequence[int], k: int, lower: bool) -> np.ndarray:
    n, m = shape[-2:]
    return np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool)


def tril(x: Any, k: int = 0) -> Any:
    """``x`` (..., n, m) with the elements above its ``k``-th diagonal set to zero."""
    return select(_tri_mask(aval_of(x).shape, int(k), True), x, 0)


def triu(x: Any, k: int = 0) -> Any:
    """``x`` (..., n, m) with the elements below its ``k``-th diagonal set to zero."""
    return select(_tri_mask(aval_of(x).shape, int(k), False), x, 0)


def diagonal(x: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The ``offset`` diagonal of the (``axis1``, ``axis2``) planes of ``x``, as its last axis
    (a gather at constant indices)."""
    nd = aval_of(x).ndim
    a1, a2 = axis1 % nd, axis2 % nd
    x = transpose(x, [a1, a2] + [i for i in range(nd) if i not in (a1, a2)])
    n, m = aval_of(x).shape[:2]
    k = int(offset)
    length = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
    rows = np.arange(length, dtype=dtypes.int64) + max(-k, 0)
    cols = np.arange(length, dtype=dtypes.int64) + max(k, 0)
    d = bind(indexing.gather_p, x, rows, cols)
    return transpose(d, list(range(1, aval_of(d).ndim)) + [0])


# ------------------------------------------------------------------ broadcasting in the rules
def unbroadcast(g: Any, aval: Aval) -> Any:
    """A cotangent of broadcast shape summed back down to ``aval``'s shape (broadcast's
    transpose)."""
    if g is None or tuple(g.shape) == aval.shape:
        return g
    lead = len(g.shape) - aval.ndim
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(aval.shape) if d == 1 and g.shape[lead + i] != 1)
    if axes:
        g = reduce_sum(g, axes)
    return reshape(g, aval.shape)


def broadcast_tangent(t: Any, shape: Sequence[int]) -> Any:
    """A tangent of an operand, broadcast to the output shape."""
    if t is None or tuple(t.shape) == tuple(shape):
        return t
    return broadcast_to(t, shape)


def add_tangents(a: Any, b: Any) -> Any:
    """The sum of two tangents (or cotangents), either of which may be None (zero)."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# The primitives' modules import this one (their rules are written with it), so it binds them
# last, and the functions above read them at call time.
from . import elementwise, reductions, layout, indexing, linalg  # noqa: E402
