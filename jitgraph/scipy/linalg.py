"""``scipy.linalg`` functions: solve_triangular, cho_solve/cho_factor, and re-exports of the
decompositions in ``jitgraph.numpy.linalg``."""
from __future__ import annotations

from .. import dtypes
from ..core import PRIMITIVES, aval_of, bind
from ..numpy import asarray, astype, float64
from ..numpy.linalg import cholesky as _np_cholesky, det, eigh, inv, pinv, qr, solve, svd  # noqa: F401
from ..numpy import reshape, swapaxes
from ..tree import as_arrays


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve op(a) x = b for triangular a (only its ``lower``/upper triangle is read)."""
    a, b = asarray(a), asarray(b)
    if not dtypes.is_float(aval_of(a).dtype):
        a = astype(a, float64)
    b = astype(b, aval_of(a).dtype)
    trans = {"N": 0, "T": 1, "C": 1}.get(trans, trans)
    if trans not in (0, 1):
        raise ValueError(f"solve_triangular: trans must be 0, 1, 'N' or 'T', got {trans!r}")
    if unit_diagonal:
        raise NotImplementedError("solve_triangular: unit_diagonal=True is not supported")
    vec = aval_of(b).ndim == aval_of(a).ndim - 1
    if vec:
        b = reshape(b, aval_of(b).shape + (1,))
    x = bind(PRIMITIVES["solve_triangular"], a, b, lower=bool(lower), trans=int(trans))
    return reshape(x, aval_of(x).shape[:-1]) if vec else as_arrays(x)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """SciPy's convention: the upper factor unless ``lower=True``."""
    L = _np_cholesky(a)
    return L if lower else swapaxes(L, -1, -2)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """Cholesky factor of ``a`` and its ``lower`` flag, for ``cho_solve`` (as SciPy)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``A x = b`` from ``cho_factor(A)``'s result, by two triangular solves."""
    c, lower = c_and_lower
    if lower:
        y = solve_triangular(c, b, lower=True)
        return solve_triangular(c, y, lower=True, trans=1)
    y = solve_triangular(c, b, lower=False, trans=1)
    return solve_triangular(c, y, lower=False)
