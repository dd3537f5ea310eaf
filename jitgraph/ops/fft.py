"""The discrete Fourier transform: one primitive, ``fft``, as JAX's ``lax.fft``.

Its ``kind`` is ``"fft"`` or ``"ifft"`` (complex to complex), ``"rfft"`` (real to the
non-negative frequencies) or ``"irfft"`` (their inverse, ``n`` real values along the last
axis), over ``axes``, scaled as NumPy's ``norm`` says. Its reference is NumPy's pocketfft,
and it runs as a host step between kernels under ``jit``.

The transforms are linear, so their derivatives are transforms too, written with JAX's
convention (transposes, not adjoints): ``fft`` and ``ifft`` are symmetric matrices, their
own transposes; ``rfft``'s transpose is the real part of the full ``fft`` of the cotangent
padded with zeros to the full length; ``irfft``'s is the conjugate of the ``rfft`` of the
cotangent, the frequencies that stand for two weighted twice (JAX's ``_irfft_transpose``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..core import Aval, Primitive, register
from ..batching import leading_batch_rule
from .binders import cast, concatenate
from .complex import conj_p, real_p

KINDS = ("fft", "ifft", "rfft", "irfft")
NORMS = ("backward", "ortho", "forward")


def _aval(x, *, kind, axes, n, norm):
    if kind in ("fft", "ifft", "irfft") and not dtypes.is_complex(x.dtype):
        raise TypeError(f"{kind}: needs a complex operand, got {x.dtype}")
    if kind == "rfft" and not dtypes.is_float(x.dtype):
        raise TypeError(f"rfft: needs a real floating-point operand, got {x.dtype}")
    shape = list(x.shape)
    if kind == "rfft":
        shape[axes[-1]] = shape[axes[-1]] // 2 + 1
        return Aval(tuple(shape), dtypes.complex_dtype(x.dtype))
    if kind == "irfft":
        shape[axes[-1]] = n
        return Aval(tuple(shape), dtypes.real_dtype(x.dtype))
    return Aval(x.shape, x.dtype)


def _impl(x, *, kind, axes, n, norm):
    if kind == "fft":
        out = np.fft.fftn(x, axes=axes, norm=norm)
    elif kind == "ifft":
        out = np.fft.ifftn(x, axes=axes, norm=norm)
    elif kind == "rfft":
        out = np.fft.rfftn(x, axes=axes, norm=norm)
    else:
        s = [x.shape[a] for a in axes[:-1]] + [n]
        out = np.fft.irfftn(x, s=s, axes=axes, norm=norm)
    d = dtypes.complex_dtype(x.dtype) if kind == "rfft" else \
        dtypes.real_dtype(x.dtype) if kind == "irfft" else x.dtype
    return np.asarray(out).astype(d, copy=False)


def _scale(norm: str, size: int, inverse: bool) -> float:
    """The factor ``norm`` puts on the unnormalized sum (``inverse``: the transform back)."""
    if norm == "ortho":
        return 1.0 / math.sqrt(size)
    return 1.0 / size if (norm == "forward") != inverse else 1.0


def _pad_last(g, axis: int, n: int):
    """``g`` padded with zeros along ``axis`` to length ``n``."""
    have = g.shape[axis]
    if have == n:
        return g
    shape = list(g.shape)
    shape[axis] = n - have
    return concatenate([g, np.zeros(shape, g.dtype)], axis)


def _vjp(g, out, x, *, kind, axes, n, norm):
    if kind in ("fft", "ifft"):
        return (fft_p(g, kind=kind, axes=axes, n=None, norm=norm),)
    size = math.prod(x.shape[a] if kind == "rfft" else out.shape[a] for a in axes)
    if kind == "rfft":
        full = fft_p(_pad_last(g, axes[-1], x.shape[axes[-1]]), kind="fft", axes=axes,
                     n=None, norm="backward")
        return (real_p(full) * _scale(norm, size, False),)
    r = fft_p(g, kind="rfft", axes=axes, n=None, norm="backward")
    k = r.shape[axes[-1]]
    weights = np.full(k, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    weights = (weights * _scale(norm, size, True)).reshape(
        [k if a == axes[-1] % r.ndim else 1 for a in range(r.ndim)])
    return (conj_p(r * cast(weights, r.dtype)),)


def _jvp(ts, out, x, *, kind, axes, n, norm):
    return None if ts[0] is None else fft_p(ts[0], kind=kind, axes=axes, n=n, norm=norm)


fft_p = register(Primitive("fft", kind="opaque", abstract_eval=_aval, impl=_impl, vjp=_vjp,
                           jvp=_jvp))
fft_p.batch = leading_batch_rule(fft_p)
