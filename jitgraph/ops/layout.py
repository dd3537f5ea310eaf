"""Layout primitives: they move elements without arithmetic.

Code-generation record: ``Lowering.index_map(index_map)`` with ``index_map(ctx, out_idx, in_aval,
out_aval, **params) -> in_idx`` (lists of index expressions, written with the backend's syntax
table ``ctx``), so fusion can turn the op into index arithmetic inside a kernel instead of a
copy. ``pad_slice`` and ``concatenate`` also need a condition (see their rules): a masked
index map (``Lowering.index_map(rule, masked=True)``, as ``ops.windows``'s transpose) returns
``(in_idx, condition)`` and reads 0 where the condition fails.
"""
from __future__ import annotations

import numpy as np

from ..batching import all_to_front, move_batch_axis, permute, reshape, shift_axis
from ..core import Aval, Lowering, Primitive, aval_of, register
from ..errors import ShapeError
from .binders import transpose, unbroadcast


def _layout(name, aval, impl, vjp, index_map, jvp=None, masked=False):
    """Layout ops are linear: their JVP is the op itself applied to the tangent."""
    if jvp is None:
        def jvp(ts, out, *xs, **params):
            return None if ts[0] is None else bind_same(ts[0], **params)
    p = register(Primitive(name, kind="layout", abstract_eval=aval, impl=impl, vjp=vjp,
                           jvp=jvp, codegen=Lowering.index_map(index_map, masked)))

    def bind_same(t, **params):
        return p(t, **params)
    return p


# ---------------------------------------------------------------- reshape
def _reshape_aval(x, *, shape):
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ShapeError(f"cannot reshape array of shape {x.shape} (size {x.size}) into shape "
                         f"{shape}")
    return Aval(shape, x.dtype, x.weak)


def row_major_strides(shape) -> list[int]:
    """Element strides of a C-contiguous array (shared with the code generator's offsets)."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def _dim_groups(a: list[int], b: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """The finest pairing of consecutive dims of ``a`` and of ``b`` (positions) whose sizes
    multiply to the same number; None where the sizes do not pair up."""
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        gi, gj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                gi.append(i)
                pa, i = pa * a[i], i + 1
            elif pb < pa and j < len(b):
                gj.append(j)
                pb, j = pb * b[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    return groups if i == len(a) and j == len(b) else None


def reshape_index_map(ctx, out_idx, in_aval, out_aval, *, shape):
    """Row-major linear offset of the output index, split again in the input shape, group by
    group: dims merged into one cost a multiply-add, not a division and a remainder, so a
    loop over a reshaped buffer indexes it as plainly as the buffer itself (and vectorizes).

    Size-1 dimensions dropped or added cost no arithmetic."""
    in_nz = [(i, d) for i, d in enumerate(in_aval.shape) if d != 1]
    out_nz = [(i, d) for i, d in enumerate(out_aval.shape) if d != 1]
    groups = None if 0 in in_aval.shape else _dim_groups([d for _, d in in_nz],
                                                         [d for _, d in out_nz])
    if groups is None:
        groups = [(list(range(len(in_nz))), list(range(len(out_nz))))]
    res = ["0"] * in_aval.ndim
    for gi, gj in groups:
        outs = [out_nz[k] for k in gj]
        terms = [ctx.bare("times", out_idx[oi], ctx.number(s)) if s != 1 else out_idx[oi]
                 for (oi, _), s in zip(outs, row_major_strides([d for _, d in outs]))]
        lin = terms[0]
        for t in terms[1:]:
            lin = ctx.bare("plus", lin, t)
        lin = lin if len(terms) == 1 else ctx.group(lin)
        ins = [in_nz[k] for k in gi]
        for n, ((ii, d), s) in enumerate(zip(ins, row_major_strides([d for _, d in ins]))):
            if len(ins) == 1:
                res[ii] = lin
            elif n == 0:     # below d: the group's offset is in range
                res[ii] = ctx.op("floor_divide", lin, ctx.number(s))
            else:
                q = ctx.op("floor_divide", lin, ctx.number(s)) if s != 1 else lin
                res[ii] = ctx.op("remainder", q, ctx.number(d))
    return res


reshape_p = _layout(
    "reshape", _reshape_aval, lambda x, *, shape: x.reshape(shape),   # (np.reshape's work)
    lambda g, out, x, *, shape: (reshape(g, x.shape),), reshape_index_map)


# ---------------------------------------------------------------- transpose
def _transpose_aval(x, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"axes {perm} don't match an array of dimension {x.ndim}")
    return Aval(tuple(x.shape[p] for p in perm), x.dtype, x.weak)


def inverse_perm(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _transpose_index_map(ctx, out_idx, in_aval, out_aval, *, perm):
    res = [None] * len(perm)
    for i, p in enumerate(perm):
        res[p] = out_idx[i]
    return res


transpose_p = _layout(
    "transpose", _transpose_aval, lambda x, *, perm: np.transpose(x, perm),
    lambda g, out, x, *, perm: (transpose(g, inverse_perm(perm)),), _transpose_index_map)


# ---------------------------------------------------------------- broadcast_to
def _broadcast_impl(x, shape):
    """np.broadcast_to; a small array filled from a one-element operand where that is
    cheaper (np.full costs a third of np.broadcast_to's Python, and eager gradients broadcast
    scalars a lot)."""
    if x.size == 1 and x.ndim <= len(shape):
        n = 1
        for d in shape:
            n *= d
        if n <= 1024:
            return np.full(shape, x.reshape(()))
    return np.broadcast_to(x, shape)


def _broadcast_aval(x, *, shape):
    lead = len(shape) - x.ndim
    if lead < 0 or any(d != 1 and d != shape[lead + i] for i, d in enumerate(x.shape)):
        raise ShapeError(f"cannot broadcast shape {x.shape} to {shape}")
    return Aval(shape, x.dtype, x.weak)


def _broadcast_index_map(ctx, out_idx, in_aval, out_aval, *, shape):
    lead = len(shape) - in_aval.ndim
    return [ctx.number(0) if d == 1 else out_idx[lead + i] for i, d in enumerate(in_aval.shape)]


def _broadcast_vjp(g, out, x, *, shape):
    return (unbroadcast(g, x.aval),)


broadcast_to_p = _layout(
    "broadcast_to", _broadcast_aval, lambda x, *, shape: _broadcast_impl(x, shape),
    _broadcast_vjp, _broadcast_index_map)


# ---------------------------------------------------------------- basic slicing and its transpose
def slice_len(start, stop, step) -> int:
    return len(range(start, stop, step))


def _slice_aval(x, *, slices):
    if len(slices) != x.ndim:
        raise ShapeError(f"{len(slices)} slices for an array of dimension {x.ndim}")
    return Aval(tuple(slice_len(*s) for s in slices), x.dtype, x.weak)


def _slice_index_map(ctx, out_idx, in_aval, out_aval, *, slices):
    res = []
    for e, (start, stop, step) in zip(out_idx, slices):
        res.append(e if (start, step) == (0, 1) else ctx.op(
            "plus", ctx.number(start), ctx.bare("times", ctx.number(step), e)))
    return res


def _as_np_slices(slices):
    return tuple(slice(a, b if b >= 0 else None, c) for a, b, c in slices)


slice_p = _layout(
    "slice", _slice_aval, lambda x, *, slices: x[_as_np_slices(slices)],
    lambda g, out, x, *, slices: (pad_slice_p(g, shape=x.shape, slices=slices),),
    _slice_index_map)


def _pad_aval(g, *, shape, slices):
    want = tuple(slice_len(*s) for s in slices)
    if want != g.shape:
        raise ShapeError(f"pad_slice operand {g.shape} does not fit slices {slices}")
    return Aval(shape, g.dtype, g.weak)


def _pad_impl(g, *, shape, slices):
    z = np.zeros(shape, g.dtype)
    z[_as_np_slices(slices)] = g
    return z


def pad_slice_index_map(ctx, out_idx, in_aval, out_aval, *, shape, slices):
    """Returns (in_idx, condition): the element is read where condition holds, else 0."""
    idx, conds = [], []
    for e, (start, stop, step) in zip(out_idx, slices):
        n = slice_len(start, stop, step)
        if (start, step) == (0, 1) and n == out_aval.shape[len(idx)]:
            idx.append(e)
            continue
        lo, end = ctx.number(start), ctx.number(start + step * n)
        if step == 1:    # start <= e < end
            idx.append(ctx.op("minus", e, lo) if start else e)
            conds.append(ctx.group(ctx.bare("and", ctx.bare("greater_equal", e, lo),
                                            ctx.bare("less", e, end))))
            continue
        idx.append(ctx.op("floor_divide", ctx.op("minus", e, lo), ctx.number(step)))
        if step > 0:     # start <= e < end, on the step's grid
            parts = [ctx.bare("greater_equal", e, lo), ctx.bare("less", e, end),
                     ctx.bare("remainder", ctx.op("minus", e, lo), ctx.number(step))]
        else:
            parts = [ctx.bare("less_equal", e, lo), ctx.bare("greater", e, end),
                     ctx.bare("remainder", ctx.op("minus", lo, e), ctx.number(-step))]
        parts[2] = ctx.bare("equal", parts[2], ctx.number(0))
        conds.append(ctx.group(ctx.bare("and", ctx.bare("and", parts[0], parts[1]), parts[2])))
    cond = conds[0] if conds else None
    for c in conds[1:]:
        cond = ctx.bare("and", cond, c)
    return idx, cond


pad_slice_p = _layout(
    "pad_slice", _pad_aval, _pad_impl,
    lambda g, out, x, *, shape, slices: (slice_p(g, slices=slices),), pad_slice_index_map,
    masked=True)


# ---------------------------------------------------------------- concatenate
def _concat_aval(*xs, axis):
    if not xs:
        raise ShapeError("need at least one array to concatenate")
    first = xs[0]
    if not 0 <= axis < first.ndim:
        raise ShapeError(f"axis {axis} is out of bounds for an array of dimension {first.ndim}")
    for x in xs[1:]:
        if x.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape))
                                       if i != axis):
            raise ShapeError("all input array dimensions except for the concatenation axis must "
                             f"match exactly, got {', '.join(str(x.shape) for x in xs)}")
        if x.dtype != first.dtype:
            raise TypeError("concatenate operands must share a dtype")
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return Aval(tuple(shape), first.dtype, all(x.weak for x in xs))


def _concat_vjp(g, out, *xs, axis):
    res, off = [], 0
    for x in xs:
        n = x.shape[axis]
        sl = tuple((off, off + n, 1) if i == axis else (0, d, 1) for i, d in enumerate(g.shape))
        res.append(slice_p(g, slices=sl))
        off += n
    return tuple(res)


def _concat_jvp(ts, out, *xs, axis):
    if all(t is None for t in ts):
        return None
    return concatenate_p(*[np.zeros(x.shape, out.dtype) if t is None else t
                           for t, x in zip(ts, xs)], axis=axis)


def concat_index_map(ctx, out_idx, in_avals, out_aval, *, axis):
    """Returns [(in_idx, lower, upper)] per input: input k covers lower <= idx[axis] < upper."""
    res, off = [], 0
    for a in in_avals:
        n = a.shape[axis]
        idx = list(out_idx)
        idx[axis] = ctx.op("minus", out_idx[axis], ctx.number(off)) if off else out_idx[axis]
        res.append((idx, off, off + n))
        off += n
    return res


concatenate_p = _layout(
    "concatenate", _concat_aval, lambda *xs, axis: np.concatenate(xs, axis=axis),
    _concat_vjp, concat_index_map, jvp=_concat_jvp)


# ---------------------------------------------------------------- batching
def _reshape_batch(args, dims, *, shape):
    x = move_batch_axis(args[0], dims[0], 0)
    return reshape(x, aval_of(x).shape[:1] + tuple(shape)), 0


def _transpose_batch(args, dims, *, perm):
    """The batch axis keeps its position; the permuted axes go around it."""
    d = dims[0]
    new = [shift_axis(p, d) for p in perm]
    new.insert(d, d)
    return permute(args[0], new), d


def _broadcast_batch(args, dims, *, shape):
    x = move_batch_axis(args[0], dims[0], 0)
    s = aval_of(x).shape
    x = reshape(x, s[:1] + (1,) * (len(shape) - len(s) + 1) + s[1:])
    return broadcast_to_p(x, shape=s[:1] + tuple(shape)), 0


def _with_batch(seq, d, item):
    seq = list(seq)
    seq.insert(d, item)
    return tuple(seq)


def _slice_batch(args, dims, *, slices):
    x, d = args[0], dims[0]
    return slice_p(x, slices=_with_batch(slices, d, (0, aval_of(x).shape[d], 1))), d


def _pad_slice_batch(args, dims, *, shape, slices):
    g, d = args[0], dims[0]
    n = aval_of(g).shape[d]
    return pad_slice_p(g, shape=_with_batch(shape, d, n),
                       slices=_with_batch(slices, d, (0, n, 1))), d


def _concat_batch(args, dims, *, axis):
    return concatenate_p(*all_to_front(args, dims), axis=axis + 1), 0


reshape_p.batch = _reshape_batch
transpose_p.batch = _transpose_batch
broadcast_to_p.batch = _broadcast_batch
slice_p.batch = _slice_batch
pad_slice_p.batch = _pad_slice_batch
concatenate_p.batch = _concat_batch
