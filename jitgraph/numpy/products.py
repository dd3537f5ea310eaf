"""Products and contractions: matmul, dot, vdot, inner, outer, tensordot, einsum.

Each takes JAX's ``precision=`` (checked; on the CPU every product is computed in its
operands' dtype, so it changes nothing) and ``preferred_element_type=`` (the result's dtype).
"""
from __future__ import annotations

import builtins
import enum as _enum
import functools
from typing import Any

import numpy as np

from ..core import aval_of, bind
from ..errors import ShapeError
from ._base import _P, _promote, _locate_module, astype
from .math import conjugate, multiply
from .reductions import sum
from .manipulation import broadcast_to, moveaxis, ravel, reshape, transpose


# ------------------------------------------------------------------ precision
class Precision(_enum.Enum):
    """``lax.Precision``: how many passes an accelerator's product takes. Every value is
    accepted; none changes a CPU result (products run in the operands' own dtype)."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        names = {"default": cls.DEFAULT, "bfloat16": cls.DEFAULT, "fastest": cls.DEFAULT,
                 "high": cls.HIGH, "bfloat16_3x": cls.HIGH, "tensorfloat32": cls.HIGH,
                 "highest": cls.HIGHEST, "float32": cls.HIGHEST}
        return names.get(str(value).lower())

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def check(precision: Any, fn: str) -> None:
        """Accept what JAX accepts for ``precision=`` (None, a ``Precision``, its string
        names, or a pair of them); raise naming ``fn`` otherwise."""
        if precision is None or isinstance(precision, Precision):
            return
        if isinstance(precision, (tuple, list)) and len(precision) == 2:
            for p in precision:
                Precision.check(p, fn)
            return
        try:
            Precision(precision)
        except ValueError:
            raise ValueError(f"{fn}: precision must be None, a lax.Precision, one of "
                             "'default', 'high', 'highest' (or 'bfloat16', 'tensorfloat32', "
                             f"'float32'), or a pair of them; got {precision!r}") from None


def _precision_args(fn):
    """``fn`` taking JAX's keyword-only ``precision`` and ``preferred_element_type``."""
    @functools.wraps(fn)
    def wrapper(*args, precision=None, preferred_element_type=None, **kwargs):
        if precision is not None:
            Precision.check(precision, f"jnp.{fn.__name__}")
        r = fn(*args, **kwargs)
        return r if preferred_element_type is None else astype(r, preferred_element_type)
    return wrapper


# ------------------------------------------------------------------ linear algebra
@_precision_args
def matmul(a, b):
    """NumPy matmul: 1-d operands are promoted and squeezed, batch dims broadcast."""
    return _matmul(*_promote(a, b))


def _matmul(a, b):
    """``matmul`` of operands already promoted to one dtype."""
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
    if len(sa2) == 2 and len(sb2) == 2:
        batch = ()              # (no batch dims: nothing to broadcast)
    elif len(sb2) == 2:
        # (..., M, K) @ (K, N) is one (rows, K) @ (K, N) product, as XLA's dot_general: no
        # copy of b per batch, one large product instead of a batch of small ones, and a
        # gradient for b that is one product too (not a batch of them summed)
        rows = int(np.prod(sa2[:-1], dtype=np.int64))
        out = bind(_P.matmul, reshape(a2, (rows, sa2[-1])), b2)
        oshape = sa2[:-2] + ((sa2[-2],) if len(sa) > 1 else ()) + ((sb2[-1],) if len(sb) > 1
                                                                   else ())
        return reshape(out, oshape)
    else:
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


@_precision_args
def dot(a, b):
    """``numpy.dot``: products of vectors and matrices, sums over the last/second-to-last axes
    beyond."""
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if len(sa) == 0 or len(sb) == 0:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return _matmul(a, b)
    if len(sb) == 1:
        return _matmul(a, b)
    # N-d dot: contract a's last axis with b's second-to-last
    bm = moveaxis(b, -2, 0)
    rest_b = aval_of(bm).shape[1:]
    r = matmul(reshape(a, (-1, sa[-1])), reshape(bm, (sb[-2], -1)))
    return reshape(r, sa[:-1] + rest_b)


@_precision_args
def vdot(a, b):
    """Dot product of the flattened ``a`` and ``b``, ``a`` conjugated where it is complex."""
    return sum(multiply(conjugate(ravel(a)), ravel(b)))


@_precision_args
def inner(a, b):
    """Sum of products over the last axes of ``a`` and ``b``, as ``numpy.inner``."""
    a, b = _promote(a, b)
    if aval_of(a).ndim == 0 or aval_of(b).ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a, b):
    """The outer product of the flattened ``a`` and ``b``."""
    a, b = ravel(a), ravel(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


@_precision_args
def tensordot(a, b, axes=2):
    """Sum of products over ``axes`` (a count or two lists of axes), as ``numpy.tensordot``."""
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
    # every size spelled out (no -1): with an empty contracted or free axis, -1 is ambiguous
    k = int(np.prod([sa[i] for i in ax_a], dtype=np.int64))
    m = int(np.prod([sa[i] for i in free_a], dtype=np.int64))
    n = int(np.prod([sb[i] for i in free_b], dtype=np.int64))
    at = reshape(transpose(a, free_a + ax_a), (m, k))
    bt = reshape(transpose(b, ax_b + free_b), (k, n))
    return reshape(matmul(at, bt), tuple(sa[i] for i in free_a) + tuple(sb[i] for i in free_b))


@_precision_args
def einsum(subscripts: str, *operands, optimize="greedy"):
    """einsum with any number of operands, ellipses and repeated indices, contracted pairwise
    (an order chosen over the index sizes) as matmuls; see ``jitgraph.numpy._einsum``."""
    from ._einsum import einsum as _einsum
    return _einsum(subscripts, *operands, optimize=optimize)


def einsum_path(subscripts: str, *operands, optimize="greedy"):
    """The pairwise contraction order ``einsum`` uses for these operands."""
    from ._einsum import einsum_path as _path
    return _path(subscripts, *operands, optimize=optimize)



def kron(a, b):
    """Kronecker product: every a[i] * b block, laid out block by block."""
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a = reshape(a, tuple(d for s in sa for d in (s, 1)))
    b = reshape(b, tuple(d for s in sb for d in (1, s)))
    return reshape(multiply(a, b), tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 3-vectors (2-vectors get a zero z) along the last axis."""
    from .indexing import getitem
    from .math import subtract
    from .manipulation import stack
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _promote(a, b)
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    na, nb = aval_of(a).shape[-1], aval_of(b).shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeError(f"cross: incompatible dimensions for cross product (dimension must be "
                         f"2 or 3), got {na} and {nb}")
    comp = lambda x, i, n: getitem(x, (Ellipsis, i)) if i < n else 0.0     # noqa: E731
    a0, a1, a2 = (comp(a, i, na) for i in range(3))
    b0, b1, b2 = (comp(b, i, nb) for i in range(3))
    if na == 2 and nb == 2:
        return subtract(multiply(a0, b1), multiply(a1, b0))
    c = [subtract(multiply(a1, b2), multiply(a2, b1)), subtract(multiply(a2, b0), multiply(a0, b2)),
         subtract(multiply(a0, b1), multiply(a1, b0))]
    from .manipulation import broadcast_arrays
    return moveaxis(stack(broadcast_arrays(*c), axis=-1), -1, axisc)



def convolve(a, v, mode="full"):
    """1-d discrete convolution: a static gather of ``a`` times ``v``, summed (modes as NumPy)."""
    from .indexing import take
    from .math import where
    a, v = _promote(a, v)
    if aval_of(a).ndim != 1 or aval_of(v).ndim != 1:
        raise ValueError(f"convolve: operands must be 1-d, got {aval_of(a).shape} and "
                         f"{aval_of(v).shape}")
    n, m = aval_of(a).shape[0], aval_of(v).shape[0]
    if n == 0 or m == 0:
        raise ValueError("convolve: operands must not be empty")
    if m > n:
        a, v, n, m = v, a, m, n
    k = np.arange(n + m - 1)[:, None] - np.arange(m)[None, :]
    valid = (k >= 0) & (k < n)
    full = sum(multiply(where(valid, take(a, np.clip(k, 0, n - 1)), 0), v), axis=1)
    if mode == "full":
        return full
    if mode == "same":
        start = (m - 1) // 2
        return full[start:start + n]
    if mode == "valid":
        return full[m - 1:n]
    raise ValueError(f"convolve: mode must be 'full', 'same' or 'valid', got {mode!r}")


def correlate(a, v, mode="valid"):
    """1-d cross-correlation, c[k] = sum_n a[n + k] v[n] (NumPy's, for real operands)."""
    from .manipulation import flip
    a, v = _promote(a, v)
    if aval_of(v).ndim == 1 and aval_of(a).ndim == 1 and aval_of(v).shape[0] > aval_of(a).shape[0]:
        return flip(convolve(flip(a), v, mode))
    return convolve(a, flip(v), mode)


_locate_module(globals(), __name__)
