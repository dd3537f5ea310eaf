"""Layer computations as pure functions of arrays (the ``Module`` classes call these).

Convolution is im2col + one matmul (``lax.conv_general_dilated``): the patch matrix is one
``windows`` op, built by index arithmetic in one fused kernel, and the product goes to BLAS,
which is the fastest path the compiler has (its loop kernels do not tile). Pooling is a
reduction over windows (``lax_windows.window_reduce``): a reshape where windows tile the
image. Neither grows with the window's size.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import dtypes
from .. import numpy as jnp
from ..core import aval_of
from ..errors import ShapeError
from ..numpy import windows as lax_windows
from ._args import check_layout as _check_layout, pair as _pair
from .activations import softmax


def pad2d(x, pad_h: tuple[int, int], pad_w: tuple[int, int], value: float = 0.0):
    """Pad the H and W axes of an NHWC array (with zeros, or ``value``)."""
    n, h, w, c = aval_of(x).shape
    dt = aval_of(x).dtype
    if any(pad_h) or any(pad_w):
        parts = []
        if pad_h[0]:
            parts.append(jnp.full((n, pad_h[0], w, c), value, dt))
        parts.append(x)
        if pad_h[1]:
            parts.append(jnp.full((n, pad_h[1], w, c), value, dt))
        x = jnp.concatenate(parts, axis=1) if len(parts) > 1 else x
        h = h + pad_h[0] + pad_h[1]
        parts = []
        if pad_w[0]:
            parts.append(jnp.full((n, h, pad_w[0], c), value, dt))
        parts.append(x)
        if pad_w[1]:
            parts.append(jnp.full((n, h, pad_w[1], c), value, dt))
        x = jnp.concatenate(parts, axis=2) if len(parts) > 1 else x
    return x


def _padding(padding, kernel: tuple[int, int], stride: tuple[int, int], hw: tuple[int, int]):
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return (0, 0), (0, 0)
        if p == "SAME":
            pads = []
            for k, s, n in zip(kernel, stride, hw):
                out = -(-n // s)
                total = max((out - 1) * s + k - n, 0)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ValueError(f"padding must be 'SAME', 'VALID', an int or pairs, got {padding!r}")
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * 2, (int(padding),) * 2
    ph, pw = padding
    ph = (ph, ph) if isinstance(ph, (int, np.integer)) else tuple(ph)
    pw = (pw, pw) if isinstance(pw, (int, np.integer)) else tuple(pw)
    return ph, pw


def conv2d(x, w, b=None, stride=1, padding=0, layout: str = "NHWC"):
    """2-d convolution (cross-correlation, as every framework). ``w`` is (kh, kw, in, out) for
    NHWC and (out, in, kh, kw) for NCHW (PyTorch's layout); ``b`` is (out,)."""
    _check_layout(layout, "conv2d")
    x = jnp.asarray(x)
    if layout == "NCHW":
        x = jnp.transpose(x, (0, 2, 3, 1))
        w = jnp.transpose(w, (2, 3, 1, 0))
    xa, wa = aval_of(x), aval_of(w)
    if xa.ndim != 4 or wa.ndim != 4:
        raise ShapeError(f"conv2d: input {xa.shape} and kernel {wa.shape} must both be 4-d")
    kh, kw, cin, cout = wa.shape
    if xa.shape[3] != cin:
        raise ShapeError(f"conv2d: input has {xa.shape[3]} channels, the kernel expects {cin} "
                         f"(input {xa.shape} in {layout}, kernel {wa.shape})")
    stride = _pair(stride, "stride")
    ph, pw = _padding(padding, (kh, kw), stride, xa.shape[1:3])
    h, w_ = xa.shape[1] + sum(ph), xa.shape[2] + sum(pw)
    if h < kh or w_ < kw:
        raise ShapeError(f"conv2d: window {(kh, kw)} does not fit the (padded) input {h}x{w_}")
    out = lax_windows.conv_general_dilated(x, w, stride, [ph, pw],
                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if b is not None:
        out = out + b
    return jnp.transpose(out, (0, 3, 1, 2)) if layout == "NCHW" else out


def _pool(x, kernel, stride, padding, layout, monoid, pad_value, fn):
    _check_layout(layout, fn)
    x = jnp.asarray(x)
    if aval_of(x).ndim != 4:
        raise ShapeError(f"{fn}: expected a 4-d {layout} input, got {aval_of(x).shape}")
    if layout == "NCHW":
        x = jnp.transpose(x, (0, 2, 3, 1))
    kernel = _pair(kernel, "kernel_size")
    stride = kernel if stride is None else _pair(stride, "stride")
    ph, pw = _padding(padding, kernel, stride, aval_of(x).shape[1:3])
    x = pad2d(x, ph, pw, pad_value)
    out = lax_windows.window_reduce(x, monoid, (1,) + kernel + (1,), (1,) + stride + (1,),
                                    (1, 1, 1, 1), fn)
    return (out if layout == "NHWC" else jnp.transpose(out, (0, 3, 1, 2)),
            kernel[0] * kernel[1])


def max_pool2d(x, kernel_size, stride=None, padding=0, layout: str = "NHWC"):
    """Max over windows (padding counts as -inf)."""
    out, _ = _pool(x, kernel_size, stride, padding, layout, "max", -np.inf, "max_pool2d")
    return out


def avg_pool2d(x, kernel_size, stride=None, padding=0, layout: str = "NHWC"):
    """Mean over windows (padding counts as zeros, as PyTorch's count_include_pad=True)."""
    out, n = _pool(x, kernel_size, stride, padding, layout, "sum", 0.0, "avg_pool2d")
    return out / n


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, axis=-1):
    """Normalise ``x`` over ``axis`` to zero mean and unit variance, then scale by ``weight``
    and shift by ``bias``."""
    mean = jnp.mean(x, axis=axis, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=axis, keepdims=True)
    y = xc / jnp.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def causal_mask(t: int) -> np.ndarray:
    """True where query i may attend to key j (j <= i)."""
    return np.tril(np.ones((t, t), dtype=bool))


def dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d) masked) v over (..., T, d) arrays; ``mask`` broadcasts to
    (..., Tq, Tk), True = attend."""
    d = aval_of(q).shape[-1]
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(d))
    if mask is not None:
        dt = aval_of(scores).dtype
        scores = jnp.where(mask, scores, jnp.asarray(np.finfo(dt).min / 2, dt))
    return jnp.matmul(softmax(scores, axis=-1), v)


def embedding(weight, ids):
    """Rows of ``weight`` for integer ``ids`` (any shape); ids out of range raise eagerly."""
    ids = jnp.asarray(ids)
    a = aval_of(ids)
    if not dtypes.is_integer_or_bool(a.dtype) or a.dtype == dtypes.bool_:
        raise TypeError(f"embedding: ids must be integers, got {a.dtype}")
    if isinstance(ids, np.ndarray) and ids.size:
        n = aval_of(weight).shape[0]
        if ids.min() < 0 or ids.max() >= n:
            raise IndexError(f"embedding: ids must be in [0, {n}), got values in "
                             f"[{ids.min()}, {ids.max()}]")
    return jnp.take(weight, ids, axis=0)
