"""``tf.nn`` of TensorFlow 1: activations, losses, convolution, pooling and dropout as graph
nodes computed with ``jitgraph.nn`` (convolution is its im2col + matmul ``conv2d``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import numpy as jnp
from .. import random as jr
from ..core import Tracer, aval_of
from ..errors import ShapeError
from ..nn import activations as _act
from ..nn import functional as _F
from ..numpy import windows as lax_windows
from .array_ops import gather
from .graph import Special, Tensor, get_default_graph
from .namespace import Namespace


def _op(fn, op_type):
    def make(*args, name: str | None = None):
        return Tensor(list(args), fn, op_type, name)
    make.__name__ = op_type
    make.__doc__ = f"A graph tensor computing ``{fn.__name__}`` of the arguments (TF's ``{op_type}``)."
    return make


def _xent(labels=None, logits=None, axis=-1, name=None, dim=None):
    if labels is None or logits is None:
        raise TypeError("softmax_cross_entropy_with_logits needs labels= and logits= "
                        "(keywords, as TensorFlow requires)")
    ax = axis if dim is None else dim
    return Tensor([labels, logits],
                  lambda y, z: -jnp.sum(y * _act.log_softmax(z, axis=ax), axis=ax),
                  "SoftmaxCrossEntropyWithLogits", name)


def _sparse_xent(labels=None, logits=None, name=None):
    if labels is None or logits is None:
        raise TypeError("sparse_softmax_cross_entropy_with_logits needs labels= and logits=")

    def f(y, z):
        k = jnp.arange(_shape_of(z)[-1])
        return -jnp.sum(jnp.where(y[..., None] == k, _act.log_softmax(z, axis=-1), 0.0),
                        axis=-1)
    return Tensor([labels, logits], f, "SparseSoftmaxCrossEntropyWithLogits", name)


def _sigmoid_xent(labels=None, logits=None, name=None):
    """max(z, 0) - z * y + log(1 + exp(-|z|)): TensorFlow's overflow-free formula."""
    if labels is None or logits is None:
        raise TypeError("sigmoid_cross_entropy_with_logits needs labels= and logits=")
    return Tensor([labels, logits], lambda y, z: jnp.maximum(z, 0.0) - z * y
                  + jnp.log1p(jnp.exp(-jnp.abs(z))), "SigmoidCrossEntropyWithLogits", name)


def _shape_of(v) -> tuple:
    return aval_of(v).shape


def _nhwc_pair(v, what: str, fn: str) -> tuple[int, int]:
    """TF's [1, h, w, 1] strides / ksize as (h, w); batch and channel entries must be 1."""
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = [int(x) for x in v]
    if len(v) == 2:
        return v[0], v[1]
    if len(v) != 4 or v[0] != 1 or v[3] != 1:
        raise ValueError(f"tf.nn.{fn}: {what} must be [1, h, w, 1] for NHWC data, got {v} "
                         "(striding over the batch or channels is not served)")
    return v[1], v[2]


def _check_format(data_format: str, fn: str) -> None:
    if data_format != "NHWC":
        raise ValueError(f"tf.nn.{fn}: data_format {data_format!r} is not served; only 'NHWC' "
                         "(TensorFlow's default). Transpose the input with tf.transpose")


def _check_padding(padding: Any, fn: str) -> str:
    if not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise ValueError(f"tf.nn.{fn}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding.upper()


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format: str = "NHWC", dilations=None, name: str | None = None,
           filters=None) -> Tensor:
    """2-d cross-correlation: input (N, H, W, C), filter (kh, kw, C, out), strides [1,s,s,1]."""
    w = filter if filter is not None else filters
    if w is None or strides is None or padding is None:
        raise TypeError("tf.nn.conv2d needs input, filter, strides and padding")
    _check_format(data_format, "conv2d")
    stride = _nhwc_pair(strides, "strides", "conv2d")
    dilation = (1, 1) if dilations is None else _nhwc_pair(dilations, "dilations", "conv2d")
    pad = _check_padding(padding, "conv2d")

    def conv(x, k):
        a, kh, kw = _shape_of(x), *_shape_of(k)[:2]
        eff = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
        pads = _same_pads(eff, stride, a[1:3]) if pad == "SAME" else [(0, 0), (0, 0)]
        return lax_windows.conv_general_dilated(x, k, stride, pads, rhs_dilation=dilation,
                                                dimension_numbers=_NHWC)
    return Tensor([input, w], conv, "Conv2D", name)


_NHWC = ("NHWC", "HWIO", "NHWC")


def conv2d_transpose(value=None, filter=None, output_shape=None, strides=None,
                     padding: str = "SAME", data_format: str = "NHWC", name: str | None = None,
                     input=None, filters=None, dilations=None) -> Tensor:
    """The gradient of ``conv2d`` with respect to its input (a "deconvolution"): ``value``
    (N, h, w, in) with ``filter`` (kh, kw, out, in) to ``output_shape`` (N, H, W, out), the
    input shape of the convolution it transposes (several give the same ``h``, so TF asks)."""
    y = value if value is not None else input
    w = filter if filter is not None else filters
    if y is None or w is None or output_shape is None or strides is None:
        raise TypeError("tf.nn.conv2d_transpose needs value, filter, output_shape and strides")
    _check_format(data_format, "conv2d_transpose")
    if dilations is not None and _nhwc_pair(dilations, "dilations", "conv2d_transpose") != (1, 1):
        raise ValueError("tf.nn.conv2d_transpose: dilations other than 1 are not served")
    stride = _nhwc_pair(strides, "strides", "conv2d_transpose")
    pad = _check_padding(padding, "conv2d_transpose")
    out_shape = tuple(int(d) for d in np.ravel(output_shape))
    return Tensor([y, w], lambda v, k: transposed_conv2d(v, k, out_shape, stride, pad),
                  "Conv2DBackpropInput", name)


def transposed_conv2d(y, k, out_shape: tuple, stride: tuple, pad: str):
    """``conv2d_transpose`` as a convolution: ``y`` dilated by the strides, padded so that
    each output position meets the taps that read it, with the kernel flipped and its channel
    axes swapped."""
    n, h, w_, cin = _shape_of(y)
    kh, kw, cout, kin = _shape_of(k)
    if len(out_shape) != 4 or out_shape[0] != n or out_shape[3] != cout or kin != cin:
        raise ShapeError(f"tf.nn.conv2d_transpose: value {(n, h, w_, cin)} and filter "
                         f"{(kh, kw, cout, kin)} do not fit output_shape {out_shape} (filter "
                         "is (height, width, output channels, input channels))")
    pads = []
    for size, kk, s, big in zip((h, w_), (kh, kw), stride, out_shape[1:3]):
        want = (big - kk) // s + 1 if pad == "VALID" else -(-big // s)
        if want != size:
            raise ShapeError(f"tf.nn.conv2d_transpose: output_shape {out_shape} with strides "
                             f"{stride} and {pad} padding convolves to {want}, not {size}")
        lo = max((size - 1) * s + kk - big, 0) // 2 if pad == "SAME" else 0
        pads.append((kk - 1 - lo, big - (size - 1) * s - 1 + lo))
    flipped = jnp.transpose(k[::-1, ::-1], (0, 1, 3, 2))
    return lax_windows.conv_general_dilated(y, flipped, (1, 1), pads, lhs_dilation=stride,
                                            dimension_numbers=_NHWC)


def _pool(fn, op_type, combine):
    def pool(value, ksize, strides, padding, data_format: str = "NHWC",
             name: str | None = None, input=None) -> Tensor:
        value = value if input is None else input
        _check_format(data_format, fn)
        k = _nhwc_pair(ksize, "ksize", fn)
        s = _nhwc_pair(strides, "strides", fn)
        pad = _check_padding(padding, fn)
        return Tensor([value], lambda x: combine(x, k, s, pad), op_type, name)
    pool.__name__ = fn
    return pool


def _same_pads(k: tuple, s: tuple, hw: tuple) -> list[tuple[int, int]]:
    """TF's SAME padding: the output has ceil(n / stride) entries; the extra goes after."""
    pads = []
    for kk, ss, n in zip(k, s, hw):
        total = max((-(-n // ss) - 1) * ss + kk - n, 0)
        pads.append((total // 2, total - total // 2))
    return pads


def _max(x, k, s, pad):
    """Max over windows; on ties the gradient goes to the first maximum in the window (in
    row-major order), as TensorFlow's MaxPoolGrad, not split between them."""
    a = aval_of(x)
    (ph, pw) = _same_pads(k, s, a.shape[1:3]) if pad == "SAME" else [(0, 0), (0, 0)]
    h, w = a.shape[1] + sum(ph), a.shape[2] + sum(pw)
    if h < k[0] or w < k[1]:
        raise ShapeError(f"max_pool: window {k} does not fit the input {a.shape[1:3]}")
    return _F.max_pool2d(x, k, s, [ph, pw])     # (its gradient: to the first maximum)


def relu(v):
    """max(v, 0) with TensorFlow's gradient: 0 at 0 (ReluGrad passes where v > 0)."""
    return jnp.where(v > 0, v, jnp.zeros((), aval_of(v).dtype))


def _avg(x, k, s, pad):
    """TF's SAME average divides by the number of real (unpadded) entries in each window:
    the padded-with-zeros mean of x over the padded-with-zeros mean of ones."""
    mean = _F.avg_pool2d(x, k, s, pad)
    if pad == "VALID":
        return mean
    a = aval_of(x)
    return mean / _F.avg_pool2d(jnp.ones(a.shape[:3] + (1,), a.dtype), k, s, pad)


max_pool = _pool("max_pool", "MaxPool", _max)
avg_pool = _pool("avg_pool", "AvgPool", _avg)


def bias_add(value, bias, data_format: str | None = None, name: str | None = None) -> Tensor:
    """value + bias along the last axis (NHWC / N...C); bias must be 1-d."""
    if data_format not in (None, "NHWC", "N...C"):
        raise ValueError(f"tf.nn.bias_add: data_format {data_format!r} is not served; only "
                         "channels-last ('NHWC')")

    def f(x, b):
        if len(_shape_of(b)) != 1 or _shape_of(b)[0] != _shape_of(x)[-1]:
            raise ShapeError(f"bias_add: bias of shape {_shape_of(b)} must be 1-d with the size "
                             f"of the last axis of value {_shape_of(x)}")
        return x + b
    return Tensor([value, bias], f, "BiasAdd", name)


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name: str | None = None,
            rate=None) -> Tensor:
    """Keep each entry with probability ``keep_prob`` (a number or a fed tensor) and scale the
    kept ones by 1/keep_prob, as TF: with keep_prob 1 the value passes unchanged."""
    if (keep_prob is None) == (rate is None):
        raise TypeError("tf.nn.dropout needs exactly one of keep_prob= and rate=")
    if noise_shape is not None:
        raise ValueError("tf.nn.dropout: noise_shape is not served (one mask entry per entry)")
    keep = keep_prob if rate is None else 1 - rate
    g = get_default_graph()

    def sample(k, v, p):
        if not isinstance(p, Tracer) and np.all(np.asarray(p) == 1):
            return v        # every entry kept and divided by 1: eager runs draw nothing
        a = aval_of(v)
        return jnp.where(jr.uniform(k, a.shape, a.dtype) < p, v / p, jnp.zeros((), a.dtype))
    x = x if isinstance(x, Tensor) else Tensor([x], lambda v: v, "Identity")
    return Special([x, keep], "Random", name or "dropout", x._shape, x._dtype,
                   index=len(g.nodes) if seed is None else int(seed), sample=sample)


def moments(x, axes, shift=None, name: str | None = None, keep_dims=None,
            keepdims=None) -> tuple[Tensor, Tensor]:
    """(mean, variance) of ``x`` over ``axes``: the variance is the mean squared difference
    from the mean, as TensorFlow computes it (``shift`` is accepted and unused, as in TF 2)."""
    keep = bool(keep_dims or keepdims)
    axes = tuple(int(a) for a in np.ravel(axes))

    def variance(v):
        d = v - jnp.mean(v, axis=axes, keepdims=True)
        return jnp.mean(d * d, axis=axes, keepdims=keep)
    mean = Tensor([x], lambda v: jnp.mean(v, axis=axes, keepdims=keep), "Mean",
                  None if name is None else f"{name}/mean")
    return mean, Tensor([x], variance, "Variance",
                        None if name is None else f"{name}/variance")


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon,
                        name: str | None = None) -> Tensor:
    """``(x - mean) / sqrt(variance + variance_epsilon) * scale + offset`` (``offset`` and
    ``scale`` may be None), computed as TensorFlow does: ``x * inv + (offset - mean * inv)``
    with ``inv = rsqrt(variance + eps) * scale``."""
    extra = [t for t in (offset, scale) if t is not None]

    def f(v, m, var, *rest):
        rest = list(rest)
        o = rest.pop(0) if offset is not None else None
        sc = rest.pop(0) if scale is not None else None
        inv = 1.0 / jnp.sqrt(var + variance_epsilon)
        if sc is not None:
            inv = inv * sc
        return v * inv + ((o - m * inv) if o is not None else -m * inv)
    return Tensor([x, mean, variance, *extra], f, "BatchNorm", name)


def embedding_lookup(params, ids, partition_strategy: str = "mod", name: str | None = None,
                     validate_indices=True, max_norm=None) -> Tensor:
    """The rows of ``params`` at ``ids`` (one table; a list of one table too)."""
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise ValueError("tf.nn.embedding_lookup: a table sharded over several tensors is "
                             "not served; concatenate the shards with tf.concat first")
        params = params[0]
    if max_norm is not None:
        raise ValueError("tf.nn.embedding_lookup: max_norm is not served")
    return gather(params, ids, axis=0, name=name)


def l2_loss(t, name: str | None = None) -> Tensor:
    """sum(t ** 2) / 2."""
    return Tensor([t], lambda v: jnp.sum(v * v) / 2, "L2Loss", name)


nn = Namespace("tf.nn", dict(
    relu=_op(relu, "Relu"), relu6=_op(lambda v: jnp.clip(v, 0.0, 6.0), "Relu6"),
    elu=_op(_act.elu, "Elu"), softplus=_op(_act.softplus, "Softplus"),
    leaky_relu=_op(lambda v, alpha=0.2: _act.leaky_relu(v, alpha), "LeakyRelu"),
    sigmoid=_op(_act.sigmoid, "Sigmoid"), tanh=_op(jnp.tanh, "Tanh"),
    softmax=_op(_act.softmax, "Softmax"), log_softmax=_op(_act.log_softmax, "LogSoftmax"),
    softmax_cross_entropy_with_logits=_xent, softmax_cross_entropy_with_logits_v2=_xent,
    sparse_softmax_cross_entropy_with_logits=_sparse_xent,
    sigmoid_cross_entropy_with_logits=_sigmoid_xent,
    conv2d=conv2d, conv2d_transpose=conv2d_transpose, max_pool=max_pool, avg_pool=avg_pool, bias_add=bias_add, dropout=dropout,
    l2_loss=l2_loss, moments=moments, batch_normalization=batch_normalization,
    embedding_lookup=embedding_lookup,
), not_served={
    "rnn_cell": "RNN cells are not served", "dynamic_rnn": "RNNs are not served",
    "lrn": "local response normalisation is not served",
})
