"""Losses, each in its numerically stable form.

``cross_entropy`` is log-softmax and negative log-likelihood fused: ``logsumexp(z) - z[y]``,
never ``log(softmax(z))``. It selects ``z[y]`` with a one-hot comparison (fuses into the
reduction kernel; no gather). Labels out of range are an error when they are concrete arrays;
under ``jit`` they are traced, so an out-of-range label makes that example's loss NaN instead
(and its gradient zero). The NaN is a constant registered with ``debug_nans``, so
``train_step(..., check_nan=True)`` and ``config.update("debug_nans", True)`` report "labels
outside [0, classes)" with the bad values and their positions.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from .. import numpy as jnp
from ..core import aval_of
from ..debug_nans import explain_constant
from ..errors import ShapeError
from .activations import log_softmax, logsumexp


def _reduce(x, reduction: str, fn: str):
    if reduction == "mean":
        return jnp.mean(x)
    if reduction == "sum":
        return jnp.sum(x)
    if reduction == "none":
        return x
    raise ValueError(f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_labels(labels, n_classes: int, fn: str):
    labels = jnp.asarray(labels)
    a = aval_of(labels)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{fn}: labels must be integer class indices, got {a.dtype} (for "
                        "probability targets use softmax_cross_entropy)")
    if isinstance(labels, np.ndarray) and labels.size and (
            labels.min() < 0 or labels.max() >= n_classes):
        bad = labels[(labels < 0) | (labels >= n_classes)]
        raise ValueError(f"{fn}: labels must be in [0, {n_classes}), got {bad[:5].tolist()} "
                         f"(logits have {n_classes} classes on the class axis)")
    return labels


def _invalid_labels(node, value_of, producer) -> str:
    """Why cross_entropy's ``where(valid, loss, nan)`` made NaN: the labels where ``valid``
    (``(labels >= 0) & (labels < classes)``) is False, and their values."""
    valid = node.inputs[0]
    ok = np.asarray(value_of(valid), bool)
    both = producer.get(valid)
    labels = classes = None
    if both is not None and both.prim.name == "logical_and":
        below = producer.get(both.inputs[1])
        if below is not None and below.prim.name == "lt":
            labels, classes = value_of(below.inputs[0]), int(value_of(below.inputs[1]))
    positions = [tuple(int(i) for i in p) for p in np.argwhere(~ok)]
    shown = []
    for p in positions[:3]:
        at = str(p[0]) if len(p) == 1 else str(p)
        shown.append(f"{int(labels[p])} at position {at}" if labels is not None
                     else f"position {at}")
    more = f" ({len(positions)} of {ok.size} labels)"
    bounds = f"[0, {classes})" if classes is not None else "[0, classes)"
    return (f"cross_entropy got labels outside {bounds}: found {', '.join(shown)}{more}\n"
            "  the loss of such an example is NaN and its gradient zero (it does not train)\n"
            f"  hint: labels are class indices in {bounds}; check the label encoding "
            "(1-based labels?) and the number of classes the logits have")


_LABEL_NANS: dict = {}


def _label_nan(dtype) -> np.ndarray:
    """The NaN cross_entropy gives an invalid label, one per dtype, registered as such."""
    dtype = np.dtype(dtype)
    hit = _LABEL_NANS.get(dtype)
    if hit is None:
        hit = _LABEL_NANS[dtype] = explain_constant(np.full((), np.nan, dtype), _invalid_labels)
    return hit


def cross_entropy(logits, labels, axis: int = -1, reduction: str = "mean"):
    """Softmax cross-entropy of integer ``labels`` under ``logits`` (PyTorch's F.cross_entropy
    with the class axis last by default)."""
    logits = jnp.asarray(logits)
    la = aval_of(logits)
    if not dtypes.is_float(la.dtype):
        raise TypeError(f"cross_entropy: logits must be floating point, got {la.dtype}")
    ax = axis % la.ndim
    n = la.shape[ax]
    labels = _check_labels(labels, n, "cross_entropy")
    batch = la.shape[:ax] + la.shape[ax + 1:]
    if aval_of(labels).shape != batch:
        raise ShapeError(f"cross_entropy: labels {aval_of(labels).shape} must have the logits' "
                         f"shape {la.shape} without the class axis {ax}: {batch}")
    valid = (labels >= 0) & (labels < n)
    # the labelled logit by a gather (no (N, classes) one-hot mask), at a safe index
    safe = jnp.expand_dims(jnp.where(valid, labels, jnp.zeros((), aval_of(labels).dtype)), ax)
    picked = jnp.squeeze(jnp.take_along_axis(logits, safe, axis=ax), axis=ax)
    nll = jnp.where(valid, logsumexp(logits, axis=ax) - picked, _label_nan(la.dtype))
    return _reduce(nll, reduction, "cross_entropy")


def softmax_cross_entropy(logits, targets, axis: int = -1, reduction: str = "mean"):
    """Cross-entropy against probability ``targets`` (one-hot or soft labels)."""
    return _reduce(-jnp.sum(targets * log_softmax(logits, axis=axis), axis=axis), reduction,
                   "softmax_cross_entropy")


def nll_loss(log_probs, labels, axis: int = -1, reduction: str = "mean"):
    """Negative log-likelihood of integer labels under log-probabilities."""
    la = aval_of(jnp.asarray(log_probs))
    labels = _check_labels(labels, la.shape[axis % la.ndim], "nll_loss")
    n = la.shape[axis % la.ndim]
    hit = jnp.expand_dims(labels, axis) == np.arange(n).reshape(
        (n,) + (1,) * (la.ndim - axis % la.ndim - 1))
    return _reduce(-jnp.sum(jnp.where(hit, log_probs, 0.0), axis=axis), reduction, "nll_loss")


def binary_cross_entropy_with_logits(logits, targets, reduction: str = "mean"):
    """max(z, 0) - z t + log(1 + exp(-|z|)): no overflow for large |z|."""
    z = jnp.asarray(logits)
    loss = jnp.maximum(z, 0) - z * targets + jnp.log1p(jnp.exp(-jnp.abs(z)))
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def mse(pred, target, reduction: str = "mean"):
    """Mean (``reduction="mean"``), sum or per-element squared error between ``pred`` and
    ``target``."""
    d = pred - target
    return _reduce(d * d, reduction, "mse")


mse_loss = mse
