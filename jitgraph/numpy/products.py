"""Products and contractions: matmul, dot, vdot, inner, outer, tensordot, einsum."""
from __future__ import annotations

import numpy as np

from ..core import aval_of, bind
from ..errors import ShapeError
from ._base import _P, _promote, _locate_module
from .math import multiply
from .reductions import sum
from .manipulation import broadcast_to, moveaxis, ravel, reshape, transpose


# ------------------------------------------------------------------ linear algebra
def matmul(a, b):
    """NumPy matmul: 1-d operands are promoted and squeezed, batch dims broadcast."""
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if len(sa) == 0 or len(sb) == 0:
        raise ShapeError(f"matmul: operands must not be scalars, got {sa} and {sb}; use *")
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    sa2, sb2 = aval_of(a2).shape, aval_of(b2).shape
    if sa2[-1] != sb2[-2]:
        from ..errors import user_frame, where as _where
        raise ShapeError(f"matmul: contracting dimensions differ: {sa} @ {sb} ({sa2[-1]} != "
                         f"{sb2[-2]}) at {_where(user_frame(2))}; transpose an operand?")
    from ..ops.elementwise import broadcast_shapes
    try:
        batch = broadcast_shapes(sa2[:-2], sb2[:-2])
    except ShapeError as err:
        raise ShapeError(f"matmul: batch dimensions of {sa} and {sb}: {err}") from None
    a2 = broadcast_to(a2, batch + sa2[-2:])
    b2 = broadcast_to(b2, batch + sb2[-2:])
    out = bind(_P.matmul, a2, b2)
    oshape = batch + ((sa2[-2],) if len(sa) > 1 else ()) + ((sb2[-1],) if len(sb) > 1 else ())
    return reshape(out, oshape)


def dot(a, b):
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if len(sa) == 0 or len(sb) == 0:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return matmul(a, b)
    if len(sb) == 1:
        return matmul(a, b)
    # N-d dot: contract a's last axis with b's second-to-last
    bm = moveaxis(b, -2, 0)
    rest_b = aval_of(bm).shape[1:]
    r = matmul(reshape(a, (-1, sa[-1])), reshape(bm, (sb[-2], -1)))
    return reshape(r, sa[:-1] + rest_b)


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    a, b = _promote(a, b)
    if aval_of(a).ndim == 0 or aval_of(b).ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a, b):
    a, b = ravel(a), ravel(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2):
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if isinstance(axes, int):
        ax_a = list(range(len(sa) - axes, len(sa)))
        ax_b = list(range(axes))
    else:
        ax_a = [int(i) % len(sa) for i in np.atleast_1d(axes[0])]
        ax_b = [int(i) % len(sb) for i in np.atleast_1d(axes[1])]
    if len(ax_a) != len(ax_b) or any(sa[i] != sb[j] for i, j in zip(ax_a, ax_b)):
        raise ShapeError(f"tensordot: contracted axes {ax_a} of {sa} and {ax_b} of {sb} "
                         "have different sizes")
    free_a = [i for i in range(len(sa)) if i not in ax_a]
    free_b = [i for i in range(len(sb)) if i not in ax_b]
    k = int(np.prod([sa[i] for i in ax_a], dtype=np.int64))
    at = reshape(transpose(a, free_a + ax_a), (-1, k))
    bt = reshape(transpose(b, ax_b + free_b), (k, -1))
    return reshape(matmul(at, bt), tuple(sa[i] for i in free_a) + tuple(sb[i] for i in free_b))


def einsum(subscripts: str, *operands):
    """einsum for one or two operands, lowered to transpose/reshape/sum and one matmul."""
    from ..einsum import einsum as _einsum
    return _einsum(subscripts, *operands)


_locate_module(globals(), __name__)
