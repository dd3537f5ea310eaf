"""``jitgraph.numpy.linalg``: norms, inverses, solves, determinants and decompositions of
(stacks of) matrices, with derivatives.

The decompositions are primitives in ``jitgraph.ops.decompositions`` (LAPACK through
NumPy/SciPy, run as host steps in compiled programs); everything else here composes them.
"""
from __future__ import annotations

import builtins
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..core import aval_of, bind
from ..errors import ShapeError
from ._base import _P, _axes, _operand, astype, float64, _locate_module
from .manipulation import expand_dims, moveaxis, reshape, swapaxes
from .math import abs, power, sqrt, true_divide, where, greater
from .products import matmul
from .reductions import max, min, sum


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


def _matrix(a, name, square=True):
    a = _operand(a)
    if not dtypes.is_inexact(aval_of(a).dtype):
        a = astype(a, float64)
    shp = aval_of(a).shape
    if len(shp) < 2 or (square and shp[-1] != shp[-2]):
        raise ShapeError(f"linalg.{name}: needs {'square ' if square else ''}matrices of shape "
                         f"(..., {'n, n' if square else 'm, n'}), got {shp}")
    return a


def inv(a):
    """Inverse of a square matrix (or a stack of them), differentiable."""
    return bind(_P.inv, _matrix(a, "inv"))


def solve(a, b):
    """Solve a x = b; ``b`` is (..., n) or (..., n, k) as NumPy 2 (1-d only as a vector)."""
    a = _matrix(a, "solve")
    b = _operand(b)
    d = dtypes.result_type((aval_of(a).dtype, False), (aval_of(b).dtype, False))[0]
    if not dtypes.is_inexact(d):
        d = float64
    a, b = astype(a, d), astype(b, d)     # float32 with float64 solves in float64, as NumPy
    vec = aval_of(b).ndim == 1
    if vec:
        b = reshape(b, aval_of(b).shape + (1,))
    # the stacks broadcast against each other, as the Array API's and NumPy's solve
    batch = tuple(np.broadcast_shapes(aval_of(a).shape[:-2], aval_of(b).shape[:-2]))
    from .manipulation import broadcast_to
    if aval_of(a).shape[:-2] != batch:
        a = broadcast_to(a, batch + aval_of(a).shape[-2:])
    if aval_of(b).shape[:-2] != batch:
        b = broadcast_to(b, batch + aval_of(b).shape[-2:])
    x = bind(_P.solve, a, b)
    return reshape(x, aval_of(x).shape[:-1]) if vec else x


def det(a):
    """Determinant of a square matrix (or a stack of them), differentiable."""
    return bind(_P.det, _matrix(a, "det"))


def slogdet(a):
    """Sign and log of the absolute determinant, stable where ``det`` over- or underflows."""
    return SlogdetResult(*bind(_P.slogdet, _matrix(a, "slogdet")))


def cholesky(a, upper=False):
    """Lower (or ``upper=True``: upper) Cholesky factor of a symmetric positive-definite matrix
    (a host step when compiled)."""
    L = bind(_P.cholesky, _matrix(a, "cholesky"))
    return swapaxes(L, -1, -2) if upper else L


def eigh(a, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices."""
    a = _matrix(a, "eigh")
    if UPLO == "U":
        a = swapaxes(a, -1, -2)
    return EighResult(*bind(_P.eigh, a))


def eigvalsh(a, UPLO="L"):
    """Eigenvalues of a symmetric (Hermitian) matrix, ascending."""
    return eigh(a, UPLO)[0]


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular value decomposition, as ``numpy.linalg.svd``: ``u * s @ vh == a``.

    ``full_matrices=True`` (NumPy's default) completes the thin factor of a non-square
    matrix to a square orthogonal one (``u`` is (m, m), or ``vh`` is (n, n)): the extra
    columns are an orthonormal basis of the complement, which is not unique (LAPACK's differ
    from these), and multiply zeros in the product."""
    a = _matrix(a, "svd", square=False)
    m, n = aval_of(a).shape[-2:]
    u, s, vh = bind(_P.svd, a)
    if not compute_uv:
        return s
    if full_matrices and m > n:
        u = _completed(u)
    elif full_matrices and m < n:
        vh = swapaxes(_completed(swapaxes(vh, -1, -2)), -1, -2)
    return SVDResult(u, s, vh)


def _completed(q):
    """``q`` (..., m, k), orthonormal columns, k < m, followed by m - k columns that make it
    a square orthogonal matrix: the last columns of the Q of ``[q, I]``, whose first k span
    ``q``'s columns."""
    from .manipulation import broadcast_to, concatenate
    from .indexing import getitem
    shp = aval_of(q).shape
    m, k = shp[-2:]
    eye = broadcast_to(np.eye(m, dtype=aval_of(q).dtype), shp[:-1] + (m,))
    basis, _ = bind(_P.qr, concatenate([q, eye], axis=-1))
    return concatenate([q, getitem(basis, (Ellipsis, slice(None), slice(k, m)))], axis=-1)


def svdvals(a):
    """Singular values, descending, as ``numpy.linalg.svdvals``."""
    return svd(a, full_matrices=False, compute_uv=False)


def qr(a, mode="reduced"):
    """QR decomposition (``mode="reduced"``, ``"complete"`` or ``"r"``), as ``numpy.linalg.qr``;
    ``"complete"`` of a tall matrix has no gradient (nor has JAX's: its extra columns of Q are
    any orthonormal completion)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode {mode!r} is not one of 'reduced', 'complete', 'r'")
    a = _matrix(a, "qr", square=False)
    m, n = aval_of(a).shape[-2:]
    if mode == "complete" and m > n:
        # the reduced QR of [a | I] (m x (n + m)): its Q is m x m, and the first n columns of
        # its R are Q^T a, upper triangular (the reflectors after the n-th leave them zero)
        from .manipulation import broadcast_to, concatenate
        eye = broadcast_to(np.eye(m, dtype=aval_of(a).dtype), aval_of(a).shape[:-2] + (m, m))
        q, r = bind(_P.qr, concatenate([a, eye], axis=-1))
        return QRResult(q, r[..., :n])
    q, r = bind(_P.qr, a)          # (m <= n: the reduced factors are the complete ones)
    return r if mode == "r" else QRResult(q, r)


def pinv(a, rcond=None, hermitian=False, rtol=None):
    """Pseudo-inverse from the thin SVD; singular values below rcond * max(s) count as 0."""
    a = _matrix(a, "pinv", square=False)
    m, n = aval_of(a).shape[-2:]
    cutoff = rtol if rtol is not None else rcond
    if cutoff is None:
        cutoff = 10 * builtins.max(m, n) * np.finfo(aval_of(a).dtype).eps
    u, s, vh = bind(_P.svd, a)
    # one cutoff per matrix of a stack (shape a.shape[:-2]): against its own singular values
    keep = greater(s, expand_dims(cutoff, -1) * max(s, axis=-1, keepdims=True))
    sinv = where(keep, true_divide(1.0, where(keep, s, 1.0)), 0.0)
    return matmul(swapaxes(vh, -1, -2) * expand_dims(sinv, -2), swapaxes(u, -1, -2))


def matrix_power(a, n):
    """The square matrix ``a`` raised to the integer power ``n`` (negative ``n`` inverts)."""
    a = _matrix(a, "matrix_power")
    n = int(n)
    if n < 0:
        a, n = inv(a), -n
    if n == 0:
        k = aval_of(a).shape[-1]
        from .manipulation import broadcast_to
        return broadcast_to(np.eye(k, dtype=aval_of(a).dtype), aval_of(a).shape)
    result, base = None, a
    while n:                      # binary powering
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def multi_dot(arrays):
    """The product of a chain of matrices, multiplied left to right."""
    out = arrays[0]
    for a in arrays[1:]:
        out = matmul(out, a)
    return out


def matrix_rank(a, tol=None, *, rtol=None):
    """Number of singular values above ``tol`` (absolute), or above ``rtol`` times the
    largest (the Array API's keyword; by default ``max(m, n) * eps``), as NumPy. Either may
    hold one value per matrix of a stack."""
    s = svdvals(a)
    if tol is not None and rtol is not None:
        raise ValueError("matrix_rank: pass tol (absolute) or rtol (relative), not both")
    if tol is None:
        if rtol is None:
            m, n = aval_of(_operand(a)).shape[-2:]
            rtol = builtins.max(m, n) * np.finfo(aval_of(s).dtype).eps
        tol = expand_dims(rtol, -1) * max(s, axis=-1, keepdims=True)
    else:
        tol = expand_dims(tol, -1)
    return sum(astype(greater(s, tol), np.int64), axis=-1)


def cond(x, p=None):
    """Condition number of ``x`` in the norm ``p`` (2-norm by default)."""
    if p is None or p == 2:
        s = svdvals(x)
        return true_divide(max(s, axis=-1), min(s, axis=-1))
    return norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))


def lstsq(a, b, rcond=None):
    """Least-squares solution (the pseudo-inverse's); residuals/rank/singular values as NumPy."""
    a = _matrix(a, "lstsq", square=False)
    x = matmul(pinv(a, rcond=rcond), b)
    r = matmul(a, x) - b
    res = sum(r * r, axis=0)
    s = svdvals(a)
    return x, res, matrix_rank(a), s


def _vector_norm(x, ord, axes, keepdims):
    if ord is None or ord == 2:
        return sqrt(sum(x * x, axis=axes, keepdims=keepdims))
    ax = abs(x)
    if ord == np.inf:
        return max(ax, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
        return min(ax, axis=axes, keepdims=keepdims)
    if ord == 0:
        return sum(astype(greater(ax, 0), aval_of(x).dtype), axis=axes, keepdims=keepdims)
    if ord == 1:
        return sum(ax, axis=axes, keepdims=keepdims)
    return power(sum(power(ax, float(ord)), axis=axes, keepdims=keepdims), 1.0 / float(ord))


def _matrix_norm(x, ord, axes, keepdims):
    r, c = axes
    if ord in (None, "fro", "f"):
        out = sqrt(sum(x * x, axis=axes))
    elif ord == "nuc":
        out = sum(svdvals(moveaxis(x, (r, c), (-2, -1))), axis=-1)
    elif ord in (1, -1):
        s = sum(abs(x), axis=r)
        out = (max if ord == 1 else min)(s, axis=c - 1 if c > r else c)
    elif ord in (np.inf, -np.inf):
        s = sum(abs(x), axis=c)
        out = (max if ord == np.inf else min)(s, axis=r - 1 if r > c else r)
    elif ord in (2, -2):
        s = svdvals(moveaxis(x, (r, c), (-2, -1)))
        out = (max if ord == 2 else min)(s, axis=-1)
    else:
        raise ValueError(f"linalg.norm: invalid norm order {ord!r} for matrices")
    if keepdims:
        for a in sorted(axes):
            out = expand_dims(out, a)
    return out


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector and matrix norms with NumPy's ``ord`` and ``axis`` conventions."""
    x = _operand(x)
    nd = aval_of(x).ndim
    if dtypes.is_complex(aval_of(x).dtype):
        if not (ord in (None, "fro") or isinstance(axis, (int, np.integer))
                or (axis is None and nd == 1)):
            raise TypeError(f"linalg.norm: ord={ord!r} of a complex matrix is not supported; "
                            "vector norms and the Frobenius norm are (they are norms of abs(x))")
        x = abs(x)     # (vector norms and the Frobenius norm are those of the moduli)
    if not dtypes.is_float(aval_of(x).dtype):
        x = astype(x, float64)
    if axis is None:
        if ord is None:
            out = sqrt(sum(x * x))
            return reshape(out, (1,) * nd) if keepdims else out
        axis = tuple(range(nd))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % builtins.max(nd, 1) for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"linalg.norm: improper number of dimensions to norm ({len(axes)})")


def vector_norm(x, ord=2, axis=None, keepdims=False):
    """Vector ``ord``-norm over ``axis`` (all elements by default), as
    ``numpy.linalg.vector_norm``."""
    x = _operand(x)
    axes = _axes(x, axis, "vector_norm")
    x = abs(x) if dtypes.is_complex(aval_of(x).dtype) else x
    return _vector_norm(x if dtypes.is_float(aval_of(x).dtype) else astype(x, float64),
                        ord, axes, keepdims)


def matrix_norm(x, ord="fro", keepdims=False):
    """Matrix norm (``"fro"``, ``"nuc"``, 1, 2, inf and their negatives) over the last two axes."""
    return norm(x, ord, axis=(-2, -1), keepdims=keepdims)


def tensorsolve(a, b, axes=None):
    """Solve ``tensordot(a, x, x.ndim) == b`` for ``x``, as ``numpy.linalg.tensorsolve``."""
    raise NotImplementedError("linalg.tensorsolve is not supported; reshape to a matrix and "
                              "use linalg.solve")

# ------------------------------------------------------------------ the standard's extension
def matrix_transpose(x):
    """The last two axes swapped (``jnp.matrix_transpose``), as the Array API's linalg has it."""
    from .array_api import matrix_transpose as _mt
    return _mt(x)


def vecdot(x1, x2, axis: int = -1):
    """Dot products of vectors along ``axis`` (``jnp.vecdot``)."""
    from .array_api import vecdot as _vd
    return _vd(x1, x2, axis=axis)


def outer(x1, x2):
    """The outer product of two vectors (``jnp.outer``; the standard takes 1-d operands)."""
    from .products import outer as _outer
    for v, name in ((x1, "x1"), (x2, "x2")):
        if aval_of(_operand(v)).ndim != 1:
            raise ValueError(f"jnp.linalg.outer: {name} must be 1-dimensional, got shape "
                             f"{aval_of(_operand(v)).shape}")
    return _outer(x1, x2)


def tensordot(x1, x2, axes=2):
    """``jnp.tensordot`` under the linalg extension's name."""
    from .products import tensordot as _td
    return _td(x1, x2, axes=axes)


def trace(x, offset: int = 0, dtype=None):
    """The sum of each matrix's ``offset`` diagonal over the last two axes (the standard's
    convention; ``jnp.trace`` takes the first two)."""
    from .indexing import trace as _trace
    out = _trace(x, offset=offset, axis1=-2, axis2=-1)
    return out if dtype is None else astype(out, dtype)


def diagonal(x, offset: int = 0):
    """Each matrix's ``offset`` diagonal over the last two axes."""
    from .indexing import diagonal as _diag
    return _diag(x, offset=offset, axis1=-2, axis2=-1)


def cross(x1, x2, axis: int = -1):
    """The cross product of 3-vectors along ``axis`` (``jnp.cross``)."""
    from .products import cross as _cross
    return _cross(x1, x2, axis=axis)


_locate_module(globals(), __name__)
