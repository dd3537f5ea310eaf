"""Layers as ``Module`` pytrees (PyTorch-style constructors, ``key=`` for the initial weights).

Weights follow the JAX convention ``y = x @ W + b`` (``W`` is (in, out)). Stochastic layers
take a key when called: ``Dropout(0.1)(x, key=k)``; ``deterministic=True`` turns them off.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .. import numpy as jnp
from .. import random as jr
from ..core import aval_of
from ..errors import ShapeError
from . import functional as F
from ._args import check_layout, pair
from . import initializers as init
from .activations import relu
from .module import Module


def _keys(key, n: int):
    if key is None:
        raise TypeError("pass key=jitgraph.random.key(seed) to initialize the weights")
    return list(jr.split(key, n))


class Linear(Module):
    """``x @ W + b`` with ``W`` of shape ``(in_features, out_features)`` drawn by
    ``weight_init``."""
    def __init__(self, in_features: int, out_features: int, *, key, bias: bool = True,
                 dtype=np.float32, weight_init: Callable = init.glorot_uniform()):
        kw, = _keys(key, 1)
        self.weight = np.asarray(weight_init(kw, (in_features, out_features), dtype))
        self.bias = np.zeros(out_features, dtype) if bias else None
        self.in_features, self.out_features = in_features, out_features

    def __call__(self, x):
        if aval_of(jnp.asarray(x)).shape[-1] != self.in_features:
            raise ShapeError(f"Linear({self.in_features}, {self.out_features}): input has "
                             f"{aval_of(jnp.asarray(x)).shape[-1]} features on its last axis "
                             f"(shape {aval_of(jnp.asarray(x)).shape})")
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class Sequential(Module):
    """Apply layers (modules or functions such as ``relu``) in order."""

    def __init__(self, *layers):
        self.layers = list(layers)

    def __call__(self, x, *, key=None, deterministic: bool = False):
        for i, layer in enumerate(self.layers):
            if isinstance(layer, (Dropout, Sequential)):
                x = layer(x, key=None if key is None else jr.fold_in(key, i),
                          deterministic=deterministic)
            else:
                x = layer(x)
        return x


class MLP(Module):
    """Linear layers with ``activation`` between them (none after the last)."""

    def __init__(self, sizes: Sequence[int], *, key, activation: Callable = relu,
                 dtype=np.float32):
        keys = _keys(key, len(sizes) - 1)
        self.layers = [Linear(m, n, key=k, dtype=dtype)
                       for m, n, k in zip(sizes[:-1], sizes[1:], keys)]
        self.activation = activation

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``dim``, indexed by integer arrays."""
    def __init__(self, num_embeddings: int, dim: int, *, key, dtype=np.float32):
        kw, = _keys(key, 1)
        self.weight = np.asarray(jr.normal(kw, (num_embeddings, dim), dtype))
        self.num_embeddings, self.dim = num_embeddings, dim

    def __call__(self, ids):
        return F.embedding(self.weight, ids)


class LayerNorm(Module):
    """Layer normalisation over the last axis with a learned scale and shift."""
    def __init__(self, dim: int, eps: float = 1e-5, dtype=np.float32):
        self.weight = np.ones(dim, dtype)
        self.bias = np.zeros(dim, dtype)
        self.eps = eps

    def __call__(self, x):
        return F.layer_norm(x, self.weight, self.bias, self.eps)


class Dropout(Module):
    """Zero each element with probability ``rate`` and scale the rest by ``1/(1-rate)``; call
    with ``key=`` when training, ``deterministic=True`` to turn it off."""
    def __init__(self, rate: float):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"Dropout rate must be in [0, 1), got {rate}")
        self.rate = rate

    def __call__(self, x, *, key=None, deterministic: bool = False):
        if deterministic or self.rate == 0.0:
            return x
        if key is None:
            raise TypeError("Dropout needs key= when training (or deterministic=True to "
                            "turn it off for evaluation)")
        return jr.dropout(key, x, self.rate)


class Conv2d(Module):
    """2-d convolution. ``layout='NHWC'`` (weight (kh, kw, in, out)) or ``'NCHW'`` (weight
    (out, in, kh, kw), as PyTorch). ``padding``: int, pairs, 'SAME' or 'VALID'."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 *, key, bias: bool = True, layout: str = "NHWC", dtype=np.float32):
        check_layout(layout, "Conv2d")
        kh, kw = pair(kernel_size, "kernel_size")
        kk, = _keys(key, 1)
        w = np.asarray(init.he_uniform()(kk, (kh, kw, in_channels, out_channels), dtype))
        self.weight = w if layout == "NHWC" else np.ascontiguousarray(w.transpose(3, 2, 0, 1))
        self.bias = np.zeros(out_channels, dtype) if bias else None
        self.stride, self.padding, self.layout = stride, padding, layout

    def __call__(self, x):
        out = F.conv2d(x, self.weight, None, self.stride, self.padding, self.layout)
        if self.bias is None:
            return out
        return out + (self.bias if self.layout == "NHWC" else jnp.reshape(self.bias, (-1, 1, 1)))


class MaxPool2d(Module):
    """Max pooling over ``kernel_size`` windows (NHWC or NCHW); a module with no parameters."""
    def __init__(self, kernel_size, stride=None, padding=0, layout: str = "NHWC"):
        self.kernel_size, self.stride, self.padding, self.layout = \
            kernel_size, stride, padding, layout

    def __call__(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.layout)


class AvgPool2d(MaxPool2d):
    """Average pooling over ``kernel_size`` windows (NHWC or NCHW); a module with no parameters."""
    def __call__(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.layout)


class Attention(Module):
    """Multi-head self-attention over (batch, time, dim), causal by default."""

    def __init__(self, dim: int, num_heads: int, *, key, causal: bool = True,
                 dtype=np.float32):
        if dim % num_heads:
            raise ValueError(f"Attention: dim {dim} is not divisible by num_heads {num_heads}")
        k1, k2 = _keys(key, 2)
        self.qkv = Linear(dim, 3 * dim, key=k1, dtype=dtype)
        self.out = Linear(dim, dim, key=k2, dtype=dtype)
        self.num_heads, self.causal = num_heads, causal

    def __call__(self, x, mask=None):
        b, t, d = aval_of(jnp.asarray(x)).shape
        h = self.num_heads
        qkv = jnp.reshape(self.qkv(x), (b, t, 3, h, d // h))
        qkv = jnp.transpose(qkv, (2, 0, 3, 1, 4))               # (3, b, h, t, d/h)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.causal:
            cm = F.causal_mask(t)
            mask = cm if mask is None else (mask & cm)
        y = F.dot_product_attention(q, k, v, mask)              # (b, h, t, d/h)
        y = jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (b, t, d))
        return self.out(y)


MultiHeadAttention = Attention
