"""``jitgraph.numpy.fft``: discrete Fourier transforms as ``numpy.fft`` and ``jax.numpy.fft``
(the Array API standard's ``fft`` extension), differentiable, eager and under ``jit``.

Every transform is the one primitive ``ops.fft.fft_p`` (NumPy's pocketfft; a host step in
compiled programs); the lengths ``n``/``s`` pad with zeros or crop first, as NumPy does.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import config, dtypes
from ..core import aval_of, bind
from ..ops.fft import NORMS, fft_p
from ._base import _check_device, _operand, astype
from .indexing import getitem
from .manipulation import pad, roll

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn",
           "ifftn", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift",
           "ifftshift"]


def _norm(norm, fn: str) -> str:
    if norm is None:
        return "backward"
    if norm not in NORMS:
        raise ValueError(f"jnp.fft.{fn}: norm={norm!r}; use None, 'backward', 'ortho' or "
                         "'forward'")
    return norm


def _axes_and_lengths(x, s, axes, fn: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``axes`` as negative numbers (so batching's leading axes leave them alone) and the
    length of each (``s``, or the operand's)."""
    nd = aval_of(x).ndim
    if axes is None:
        axes = tuple(range(nd - len(s), nd)) if s is not None else tuple(range(nd))
    axes = tuple(int(a) for a in ((axes,) if isinstance(axes, (int, np.integer)) else axes))
    if any(not -nd <= a < nd for a in axes) or len(set(a % nd for a in axes)) != len(axes):
        raise ValueError(f"jnp.fft.{fn}: axes {axes} do not fit an array of {nd} dimensions "
                         "(each axis once, -ndim <= axis < ndim)")
    axes = tuple(a % nd - nd for a in axes)
    shape = aval_of(x).shape
    lengths = tuple(shape[a] for a in axes) if s is None else tuple(int(n) for n in s)
    if len(lengths) != len(axes):
        raise ValueError(f"jnp.fft.{fn}: s has {len(lengths)} lengths for {len(axes)} axes")
    if any(n < 1 for n in lengths):
        raise ValueError(f"jnp.fft.{fn}: lengths must be at least 1, got {lengths}")
    return axes, lengths


def _fit(x, axes, lengths):
    """``x`` cropped or padded with zeros to ``lengths`` along ``axes``."""
    shape = aval_of(x).shape
    nd = len(shape)
    if all(shape[a] >= n for a, n in zip(axes, lengths)):
        key = [slice(None)] * nd
        for a, n in zip(axes, lengths):
            key[a % nd] = slice(0, n)
        return x if all(shape[a] == n for a, n in zip(axes, lengths)) else getitem(x, tuple(key))
    widths = [(0, 0)] * nd
    for a, n in zip(axes, lengths):
        widths[a % nd] = (0, max(n - shape[a], 0))
    return _fit(pad(x, widths), axes, lengths)


def _complex(x):
    x = _operand(x)
    d = aval_of(x).dtype
    return x if dtypes.is_complex(d) else astype(
        x, dtypes.complex_dtype(d if dtypes.is_float(d) else config.float_dtype()))


def _real(x, fn: str):
    x = _operand(x)
    d = aval_of(x).dtype
    if dtypes.is_complex(d):
        raise TypeError(f"jnp.fft.{fn}: needs a real operand, got {d} (use jnp.fft.fftn, or "
                        "pass jnp.real(x))")
    return x if dtypes.is_float(d) else astype(x, config.float_dtype())


def _c2c(kind: str, fn: str):
    def transform(a, s=None, axes=None, norm=None):
        x = _complex(a)
        ax, lengths = _axes_and_lengths(x, s, axes, fn)
        return bind(fft_p, _fit(x, ax, lengths), kind=kind, axes=ax, n=None,
                    norm=_norm(norm, fn))
    transform.__name__ = fn
    return transform


def _r2c(a, s, axes, norm, fn):
    x = _real(a, fn)
    ax, lengths = _axes_and_lengths(x, s, axes, fn)
    return bind(fft_p, _fit(x, ax, lengths), kind="rfft", axes=ax, n=None,
                norm=_norm(norm, fn))


def _c2r(a, s, axes, norm, fn):
    x = _complex(a)
    ax, lengths = _axes_and_lengths(x, s, axes, fn)
    if s is None:            # the last axis holds n//2 + 1 of n = 2 (m - 1) values
        lengths = lengths[:-1] + (2 * (lengths[-1] - 1),)
    if lengths[-1] < 1:
        raise ValueError(f"jnp.fft.{fn}: the output length along axis {ax[-1]} must be at "
                         "least 1; give n (or s)")
    half = lengths[:-1] + (lengths[-1] // 2 + 1,)
    return bind(fft_p, _fit(x, ax, half), kind="irfft", axes=ax, n=lengths[-1],
                norm=_norm(norm, fn))


_fftn, _ifftn = _c2c("fft", "fftn"), _c2c("ifft", "ifftn")


def _one(n):
    return None if n is None else (n,)


def fft(a, n=None, axis=-1, norm=None):
    """The one-dimensional discrete Fourier transform along ``axis``."""
    return _fftn(a, _one(n), (axis,), norm)


def ifft(a, n=None, axis=-1, norm=None):
    """The inverse of ``fft``."""
    return _ifftn(a, _one(n), (axis,), norm)


def rfft(a, n=None, axis=-1, norm=None):
    """``fft`` of a real array: the ``n // 2 + 1`` non-negative frequencies."""
    return _r2c(a, _one(n), (axis,), norm, "rfft")


def irfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``rfft``: ``n`` real values (default ``2 (m - 1)``)."""
    return _c2r(a, _one(n), (axis,), norm, "irfft")


def hfft(a, n=None, axis=-1, norm=None):
    """The transform of a signal with Hermitian symmetry (``numpy.fft.hfft``)."""
    from .math import conjugate
    inverse = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    return _c2r(conjugate(_complex(a)), _one(n), (axis,), inverse[_norm(norm, "hfft")],
                "hfft")


def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``hfft`` (``numpy.fft.ihfft``)."""
    from .math import conjugate
    inverse = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    return conjugate(_r2c(a, _one(n), (axis,), inverse[_norm(norm, "ihfft")], "ihfft"))


def fftn(a, s=None, axes=None, norm=None):
    """The n-dimensional transform over ``axes`` (all by default, or the last ``len(s)``)."""
    return _fftn(a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    """The inverse of ``fftn``."""
    return _ifftn(a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    """``fftn`` of a real array, halved along the last of ``axes``."""
    return _r2c(a, s, axes, norm, "rfftn")


def irfftn(a, s=None, axes=None, norm=None):
    """The inverse of ``rfftn``."""
    return _c2r(a, s, axes, norm, "irfftn")


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """``fftn`` over the last two axes."""
    return _fftn(a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """``ifftn`` over the last two axes."""
    return _ifftn(a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """``rfftn`` over the last two axes."""
    return _r2c(a, s, axes, norm, "rfft2")


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """``irfftn`` over the last two axes."""
    return _c2r(a, s, axes, norm, "irfft2")


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """The frequencies of ``fft``'s outputs, in cycles per unit of ``d`` (a constant)."""
    _check_device(device, "fft.fftfreq")
    out = np.fft.fftfreq(int(n), d)
    return out.astype(dtypes.requested(dtype) if dtype is not None else config.float_dtype())


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """The frequencies of ``rfft``'s outputs."""
    _check_device(device, "fft.rfftfreq")
    out = np.fft.rfftfreq(int(n), d)
    return out.astype(dtypes.requested(dtype) if dtype is not None else config.float_dtype())


def _shift(x, axes, sign: int):
    x = _operand(x)
    shape = aval_of(x).shape
    axes = tuple(range(len(shape))) if axes is None else \
        ((axes,) if isinstance(axes, (int, np.integer)) else tuple(axes))
    shifts = [sign * (shape[a] // 2) for a in axes]
    return roll(x, shifts, axes) if axes else x


def fftshift(x, axes=None):
    """The zero frequency moved to the middle (``axes``: all by default)."""
    return _shift(x, axes, 1)


def ifftshift(x, axes: Sequence[int] | int | None = None):
    """The inverse of ``fftshift``."""
    return _shift(x, axes, -1)
