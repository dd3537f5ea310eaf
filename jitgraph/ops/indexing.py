"""Integer-array indexing: ``gather`` and its transpose ``scatter_add``.

``gather(x, i0, i1, ..., ik-1)`` is NumPy's ``x[i0, ..., ik-1]`` on the leading k axes with the
index arrays broadcast together. Negative indices count from the end; out-of-range indices are
clamped (as JAX), so compiled code never reads out of bounds. Repeated indices accumulate in
``scatter_add``, which is what the gradient of a gather needs.
"""
from __future__ import annotations

import numpy as np

from ..batching import align_front, batch_iota, batch_size, bdim_to_front, move_batch_axis
from ..core import GATHER, SCATTER_ADD, Aval, Lowering, Primitive, aval_of, register
from ..errors import ShapeError
from .elementwise import broadcast_shapes


def _check_indices(x: Aval, idx: tuple[Aval, ...]):
    if len(idx) > x.ndim:
        raise ShapeError(f"too many indices ({len(idx)}) for an array of dimension {x.ndim}")
    for i in idx:
        if i.dtype.kind not in "iu":
            raise TypeError(f"index arrays must be integers, got {i.dtype}")
    return broadcast_shapes(*(i.shape for i in idx))


def normalize_index(i: np.ndarray, n: int) -> np.ndarray:
    """Negative indices counted from the end, then clamped to [0, n - 1]. (Two ufuncs, not
    ``np.clip``, whose argument checks on integer arrays cost several times the clamp on
    the small index arrays of eager code.) In int64, as the kernels' ``clamp_index``: a narrow
    index dtype need not hold ``n``."""
    i = i.astype(np.int64, copy=False)
    i = np.where(i < 0, i + n, i)
    return np.minimum(np.maximum(i, 0), max(n - 1, 0))


def _broadcast_indices(idx, sizes, shape) -> tuple:
    """The normalized index arrays, each broadcast to ``shape`` (only those not in it)."""
    out = []
    for i, n in zip(idx, sizes):
        k = normalize_index(i, n)
        out.append(k if k.shape == shape else np.broadcast_to(k, shape))
    return tuple(out)


def _gather_aval(x, *idx):
    b = _check_indices(x, idx)
    return Aval(b + x.shape[len(idx):], x.dtype, x.weak)


def _gather_impl(x, *idx):
    return x[_broadcast_indices(idx, x.shape, np.broadcast_shapes(*(i.shape for i in idx)))]


def _gather_vjp(g, out, x, *idx):
    return (scatter_add_p(g, *idx, shape=x.shape),) + (None,) * len(idx)


def _gather_jvp(ts, out, x, *idx):
    return None if ts[0] is None else gather_p(ts[0], *idx)


def _scatter_aval(g, *idx, shape):
    b = _check_indices(Aval(shape, g.dtype), idx)
    want = b + tuple(shape[len(idx):])
    if g.shape != want:
        raise ShapeError(f"scatter_add updates have shape {g.shape}, expected {want}")
    return Aval(tuple(shape), g.dtype)


def _scatter_impl(g, *idx, shape):
    out = np.zeros(shape, g.dtype)
    b = g.shape[:g.ndim - (len(shape) - len(idx))]
    np.add.at(out, _broadcast_indices(idx, shape, b), g)
    return out


gather_p = register(Primitive(
    "gather", kind="index", abstract_eval=_gather_aval, impl=_gather_impl,
    vjp=_gather_vjp, jvp=_gather_jvp, codegen=Lowering(GATHER)))
scatter_add_p = register(Primitive(
    "scatter_add", kind="opaque", abstract_eval=_scatter_aval, impl=_scatter_impl,
    vjp=lambda ct, out, g, *idx, shape: (gather_p(ct, *idx),) + (None,) * len(idx),
    jvp=lambda ts, out, g, *idx, shape: None if ts[0] is None else scatter_add_p(
        ts[0], *idx, shape=shape),
    codegen=Lowering(SCATTER_ADD)))


# ---------------------------------------------------------------- batching
def _index_rank(idx, dims) -> int:
    """Rank of one example's broadcast index shape."""
    return max([aval_of(i).ndim - (d is not None) for i, d in zip(idx, dims)], default=0)


def _gather_batch(args, dims):
    """Unbatched indices: the batch axis of ``x`` moves just past the indexed axes and comes
    out after the index axes. Batched indices: they align at the front, and a batched ``x``
    is indexed by each example's number (``batch_iota``) along its leading batch axis."""
    x, idx, dx, didx = args[0], args[1:], dims[0], dims[1:]
    if all(d is None for d in didx):
        b = broadcast_shapes(*(aval_of(i).shape for i in idx))
        return gather_p(move_batch_axis(x, dx, len(idx)), *idx), len(b)
    ix = align_front(idx, didx)
    if dx is None:
        return gather_p(x, *ix), 0
    iota = batch_iota(batch_size(args, dims), _index_rank(idx, didx))
    return gather_p(move_batch_axis(x, dx, 0), iota, *ix), 0


def _scatter_batch(args, dims, *, shape):
    """The transpose of ``_gather_batch``'s layouts."""
    g, idx, dg, didx = args[0], args[1:], dims[0], dims[1:]
    k = len(idx)
    if all(d is None for d in didx):
        nb = len(broadcast_shapes(*(aval_of(i).shape for i in idx)))
        g = move_batch_axis(g, dg, nb)
        n = aval_of(g).shape[nb]
        return scatter_add_p(g, *idx, shape=tuple(shape[:k]) + (n,) + tuple(shape[k:])), k
    size = batch_size(args, dims)
    iota = batch_iota(size, _index_rank(idx, didx))
    return scatter_add_p(bdim_to_front(g, dg, size), iota, *align_front(idx, didx),
                         shape=(size,) + tuple(shape)), 0


gather_p.batch = _gather_batch
scatter_add_p.batch = _scatter_batch
