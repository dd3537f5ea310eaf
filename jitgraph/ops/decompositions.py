"""Dense linear algebra on stacks of matrices (..., m, n): inv, solve, triangular solve, det,
slogdet, cholesky, eigh, svd, qr.

Their NumPy references call LAPACK (NumPy/SciPy); they have no codegen rule, so a compiled
program runs them as host steps between generated kernels. Derivative rules are the standard
ones (as autograd's and JAX's), written with the binders and these primitives, so they
differentiate again. ``eigh`` reads a symmetric matrix: its rules symmetrize the
(co)tangent, as JAX does.
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import dtypes
from ..core import Aval, Primitive, register
from ..batching import leading_batch_rule
from ..errors import ShapeError
from .binders import diagonal, expand_dims, reduce_sum, reshape, swapaxes, tril, triu


def _mT(x):
    return swapaxes(x, -1, -2)


def _sym(x):
    return 0.5 * (x + _mT(x))


def _eye_like(n, dtype):
    return np.eye(n, dtype=dtype)


def _zeros_if_none(ct, like):
    return np.zeros(like.shape, like.dtype) if ct is None else ct


#: the ops defined for complex matrices: their rules hold as they are under JAX's convention
#: (transposes, not adjoints); the others (Hermitian ones among them) refuse them
_COMPLEX_OK = ("inv", "solve", "det")


def _square(a, name):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: needs (..., n, n) square matrices, got shape {a.shape}")
    if dtypes.is_complex(a.dtype) and name not in _COMPLEX_OK:
        raise TypeError(f"{name}: complex matrices are not supported yet ({a.dtype}); "
                        f"{', '.join(_COMPLEX_OK)} take them")
    if not dtypes.is_inexact(a.dtype):
        raise TypeError(f"{name}: needs a floating-point matrix, got {a.dtype} (use .astype)")


def _prim(name, aval, impl, vjp, jvp, multiple_results=False):
    p = register(Primitive(name, kind="opaque", abstract_eval=aval, impl=impl, vjp=vjp,
                           jvp=jvp, multiple_results=multiple_results))
    p.batch = leading_batch_rule(p)   # (..., m, n) stacks: the batch axis goes first
    return p


# ---------------------------------------------------------------- inverse
def _inv_aval(a):
    _square(a, "inv")
    return Aval(a.shape, a.dtype)


inv_p = _prim("inv", _inv_aval, np.linalg.inv,
              vjp=lambda g, out, a: (-(_mT(out) @ g @ _mT(out)),),
              jvp=lambda ts, out, a: -(out @ ts[0] @ out))


# ---------------------------------------------------------------- solve (b: (..., n, k))
def _solve_aval(a, b):
    _square(a, "solve")
    if b.ndim != a.ndim or b.shape[-2] != a.shape[-1] or b.shape[:-2] != a.shape[:-2]:
        raise ShapeError(f"solve: right-hand side of shape {b.shape} does not fit matrices of "
                         f"shape {a.shape}")
    return Aval(b.shape, a.dtype)


def _solve_vjp(g, out, a, b):
    gb = solve_p(_mT(a), g)
    return -(gb @ _mT(out)), gb


def _solve_jvp(ts, out, a, b):
    ta, tb = ts
    rhs = tb if tb is not None else None
    if ta is not None:
        rhs = -(ta @ out) if rhs is None else rhs - ta @ out
    return solve_p(a, rhs)


solve_p = _prim("solve", _solve_aval, np.linalg.solve, _solve_vjp, _solve_jvp)


# ---------------------------------------------------------------- triangular solve
def _tri_aval(a, b, *, lower, trans):
    return _solve_aval(a, b)


_TRSM: dict = {}   # dtype char -> SciPy's BLAS trsm of that type


def _trsm(dtype: np.dtype):
    fn = _TRSM.get(dtype.char)
    if fn is None:
        from scipy.linalg import get_blas_funcs   # here, not at import: a slow import
        fn = _TRSM[dtype.char] = get_blas_funcs("trsm", dtype=dtype)
    return fn


def _tri_impl(a, b, *, lower, trans):
    """Each solve calls BLAS ``trsm`` itself, not ``scipy.linalg.solve_triangular``: that
    calls LAPACK ``trtrs``, which the OpenBLAS in SciPy's wheels (0.3.30) runs on all its
    threads at any size, so a 2x2 solve waits for a second thread (on a busy machine, a
    scheduler tick per call: 10 ms instead of 5 us) and pays 30 us of input checks.
    ``trsm`` stays on one thread below 8 rows or columns. Singular (zero-diagonal) matrices
    raise, as ``trtrs`` does; non-finite values propagate, as in ``np.linalg.solve``."""
    out = np.empty(b.shape, np.result_type(a, b))
    if out.size == 0:
        return out
    trsm = _trsm(out.dtype)
    for i in itertools.product(*map(range, a.shape[:-2])):   # (np.ndindex costs 15 us)
        ai, bi = a[i], b[i]
        if not np.diagonal(ai).all():
            raise np.linalg.LinAlgError("solve_triangular: singular matrix (a zero on the "
                                        "diagonal)")
        if ai.flags.f_contiguous:
            out[i] = trsm(1.0, ai, bi, lower=lower, trans_a=trans)
        else:   # C order is Fortran order of the transpose: the other triangle, transposed
            out[i] = trsm(1.0, ai.T, bi, lower=not lower, trans_a=1 - trans)
    return out


def _tri_op(a, lower, trans):
    """The matrix the solve inverts: the triangle of a, transposed if trans."""
    t = tril(a) if lower else triu(a)
    return _mT(t) if trans else t


def _tri_vjp(g, out, a, b, *, lower, trans):
    gb = solve_triangular_p(a, g, lower=lower, trans=1 - trans)
    ga = -(gb @ _mT(out)) if not trans else -(out @ _mT(gb))
    ga = tril(ga) if lower else triu(ga)
    return ga, gb


def _tri_jvp(ts, out, a, b, *, lower, trans):
    ta, tb = ts
    rhs = tb
    if ta is not None:
        d = _tri_op(ta, lower, trans) @ out
        rhs = -d if rhs is None else rhs - d
    return solve_triangular_p(a, rhs, lower=lower, trans=trans)


solve_triangular_p = _prim("solve_triangular", _tri_aval, _tri_impl, _tri_vjp, _tri_jvp)


# ---------------------------------------------------------------- determinants
def _det_aval(a):
    _square(a, "det")
    return Aval(a.shape[:-2], a.dtype)


def _det_vjp(g, out, a):
    return (reshape(g * out, out.shape + (1, 1)) * _mT(inv_p(a)),)


def _det_jvp(ts, out, a):
    return out * reduce_sum(_mT(inv_p(a)) * ts[0], (-2, -1))


det_p = _prim("det", _det_aval, np.linalg.det, _det_vjp, _det_jvp)


def _slogdet_aval(a):
    _square(a, "slogdet")
    return [Aval(a.shape[:-2], a.dtype), Aval(a.shape[:-2], a.dtype)]


def _slogdet_impl(a):
    s, l = np.linalg.slogdet(a)
    return s, l


def _slogdet_vjp(cts, outs, a):
    g = cts[1]
    if g is None:
        return (None,)
    return (reshape(g, g.shape + (1, 1)) * _mT(inv_p(a)),)


def _slogdet_jvp(ts, outs, a):
    return [None, reduce_sum(_mT(inv_p(a)) * ts[0], (-2, -1))]


slogdet_p = _prim("slogdet", _slogdet_aval, _slogdet_impl, _slogdet_vjp, _slogdet_jvp,
                  multiple_results=True)


# ---------------------------------------------------------------- cholesky
def _chol_aval(a):
    _square(a, "cholesky")
    return Aval(a.shape, a.dtype)


def _phi(x):
    """Lower triangle with a halved diagonal."""
    n = x.shape[-1]
    return tril(x) * (1.0 - 0.5 * _eye_like(n, x.dtype))


def _chol_vjp(g, L, a):
    # S = L^-T phi(L^T g) L^-1, symmetrized (autograd's rule)
    p = _phi(_mT(L) @ g)
    s = solve_triangular_p(L, _mT(solve_triangular_p(L, _mT(p), lower=True, trans=1)),
                           lower=True, trans=1)
    return (_sym(s),)


def _chol_jvp(ts, L, a):
    ta = _sym(ts[0])
    x = solve_triangular_p(L, _mT(solve_triangular_p(L, ta, lower=True, trans=0)),
                           lower=True, trans=0)         # L^-1 ta L^-T
    return L @ _phi(x)


cholesky_p = _prim("cholesky", _chol_aval, np.linalg.cholesky, _chol_vjp, _chol_jvp)


# ---------------------------------------------------------------- eigh
def _eigh_aval(a):
    _square(a, "eigh")
    return [Aval(a.shape[:-1], a.dtype), Aval(a.shape, a.dtype)]


def _eigh_impl(a):
    w, v = np.linalg.eigh(a)
    return w, v


def _eig_gaps(w):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it."""
    n = w.shape[-1]
    eye = _eye_like(n, w.dtype)
    d = expand_dims(w, -2) - expand_dims(w, -1)
    return (1.0 - eye) / (d + eye)


def _eigh_vjp(cts, outs, a):
    gw, gv = cts
    w, v = outs
    inner = np.zeros(a.shape, a.dtype)
    if gw is not None:
        inner = inner + expand_dims(gw, -1) * _eye_like(a.shape[-1], a.dtype)
    if gv is not None:
        inner = inner + _eig_gaps(w) * (_mT(v) @ gv)
    return (_sym(v @ inner @ _mT(v)),)


def _eigh_jvp(ts, outs, a):
    w, v = outs
    vt_ta_v = _mT(v) @ _sym(ts[0]) @ v
    dw = diagonal(vt_ta_v, 0, -2, -1)
    dv = v @ (_eig_gaps(w) * vt_ta_v)
    return [dw, dv]


eigh_p = _prim("eigh", _eigh_aval, _eigh_impl, _eigh_vjp, _eigh_jvp, multiple_results=True)


# ---------------------------------------------------------------- svd (thin)
def _svd_aval(a):
    if a.ndim < 2 or not dtypes.is_float(a.dtype):
        raise ShapeError(f"svd: needs (..., m, n) float matrices, got {a.shape} {a.dtype}")
    m, n = a.shape[-2:]
    k = min(m, n)
    b = a.shape[:-2]
    return [Aval(b + (m, k), a.dtype), Aval(b + (k,), a.dtype), Aval(b + (k, n), a.dtype)]


def _svd_impl(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u, s, vh


def _svd_vjp(cts, outs, a):
    """autograd's grad_svd (thin SVD, real)."""
    u, s, vh = outs
    gu, gs, gvh = (_zeros_if_none(c, o) for c, o in zip(cts, outs))
    m, n = a.shape[-2:]
    k = min(m, n)
    eye = _eye_like(k, a.dtype)
    v, gv = _mT(vh), _mT(gvh)
    s_row, s_col = expand_dims(s, -2), expand_dims(s, -1)
    f = 1.0 / (s_row * s_row - s_col * s_col + eye) - eye
    utgu, vtgv = _mT(u) @ gu, _mT(v) @ gv
    t1 = (f * (utgu - _mT(utgu))) * s_row
    t1 = t1 + eye * expand_dims(gs, -1)
    t1 = t1 + s_col * (f * (vtgv - _mT(vtgv)))
    t1 = u @ t1 @ vh
    if m < n:
        t1 = t1 + ((u / s_row) @ _mT(gv)) @ (_eye_like(n, a.dtype) - v @ vh)
    elif m > n:
        t1 = t1 + _mT(((v / s_row) @ _mT(gu)) @ (_eye_like(m, a.dtype) - u @ _mT(u)))
    return (t1,)


def _svd_jvp(ts, outs, a):
    """JAX's svd_jvp_rule (thin SVD, real)."""
    u, s, vh = outs
    da = ts[0]
    ut, v = _mT(u), _mT(vh)
    k = s.shape[-1]
    eye = _eye_like(k, a.dtype)
    s_dim = expand_dims(s, -2)
    ds_mat = ut @ da @ v
    ds = diagonal(ds_mat, 0, -2, -1)
    s_diffs = (s_dim + _mT(s_dim)) * (s_dim - _mT(s_dim))
    f = 1.0 / (s_diffs + eye) - eye
    dss = s_dim * ds_mat
    sds = _mT(s_dim) * ds_mat
    du = u @ (f * (dss + _mT(dss)))
    dv = v @ (f * (sds + _mT(sds)))
    m, n = a.shape[-2:]
    if m > n:
        dav = da @ v
        du = du + (dav - u @ (ut @ dav)) / s_dim
    if n > m:
        dahu = _mT(da) @ u
        dv = dv + (dahu - v @ (vh @ dahu)) / s_dim
    return [du, ds, _mT(dv)]


svd_p = _prim("svd", _svd_aval, _svd_impl, _svd_vjp, _svd_jvp, multiple_results=True)


# ---------------------------------------------------------------- qr (reduced, m >= n)
def _qr_aval(a):
    if a.ndim < 2 or not dtypes.is_float(a.dtype):
        raise ShapeError(f"qr: needs (..., m, n) float matrices, got {a.shape} {a.dtype}")
    m, n = a.shape[-2:]
    k = min(m, n)
    b = a.shape[:-2]
    return [Aval(b + (m, k), a.dtype), Aval(b + (k, n), a.dtype)]


def _qr_impl(a):
    q, r = np.linalg.qr(a, mode="reduced")
    return q, r


def _need_tall(a, what):
    if a.shape[-2] < a.shape[-1]:
        raise NotImplementedError(f"the {what} of qr is implemented for m >= n only, got "
                                  f"shape {a.shape}")


def _qr_vjp(cts, outs, a):
    """autograd's grad_qr: gA = (dq + q copyltu(M)) r^-T with M = r dr^T - dq^T q."""
    _need_tall(a, "gradient")
    q, r = outs
    dq, dr = (_zeros_if_none(c, o) for c, o in zip(cts, outs))
    m = r @ _mT(dr) - _mT(dq) @ q
    low = tril(m, -1)
    copyltu = low + _mT(low) + m * _eye_like(m.shape[-1], a.dtype)
    b = dq + q @ copyltu
    return (_mT(solve_triangular_p(r, _mT(b), lower=False, trans=0)),)


def _qr_jvp(ts, outs, a):
    """JAX's qr_jvp_rule."""
    _need_tall(a, "derivative")
    q, r = outs
    dx = ts[0]
    dx_rinv = _mT(solve_triangular_p(r, _mT(dx), lower=False, trans=1))     # dx r^-1
    qt_dx_rinv = _mT(q) @ dx_rinv
    low = tril(qt_dx_rinv, -1)
    do = low - _mT(low)
    dq = q @ (do - qt_dx_rinv) + dx_rinv
    dr = (qt_dx_rinv - do) @ r
    return [dq, dr]


qr_p = _prim("qr", _qr_aval, _qr_impl, _qr_vjp, _qr_jvp, multiple_results=True)
