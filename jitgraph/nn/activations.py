"""Neural-network functions in numerically stable forms (log_softmax never takes log(softmax))."""
from __future__ import annotations

import math

from .. import numpy as jnp
from ..ops import binders
from ..ops.elementwise import erf_p
from ..scipy import special
from ..scipy.special import logsumexp  # noqa: F401  (re-exported)


def relu(x):
    """Elementwise ``max(x, 0)`` (gradient 0 at 0, as PyTorch and JAX: a select, not
    ``maximum``, whose gradient splits a tie; NaN stays NaN)."""
    x = jnp.asarray(x)
    return jnp.where(x > 0, x, jnp.where(jnp.isnan(x), x, 0))


def sigmoid(x):
    """Elementwise logistic function ``1 / (1 + exp(-x))``."""
    return special.expit(x)


def log_sigmoid(x):
    """``log(sigmoid(x))``, computed without overflow for large ``|x|``."""
    return -softplus(-x)


def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    return x * sigmoid(x)


swish = silu


def elu(x, alpha=1.0):
    """Exponential linear unit: ``x`` above zero, ``alpha * (exp(x) - 1)`` below."""
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def selu(x):
    """Scaled ELU (self-normalizing networks), JAX's constants."""
    return 1.0507009873554804934193349852946 * elu(x, 1.6732632423543772848170429916717)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis`` (the statistics computed where
    not given, over the elements ``where`` selects), as ``jax.nn.standardize``."""
    x = jnp.asarray(x)
    if where is None:
        def _mean(v):
            return jnp.mean(v, axis=axis, keepdims=True)
    else:
        w = jnp.broadcast_to(jnp.asarray(where), jnp.shape(x))

        def _mean(v):
            return (jnp.sum(jnp.where(w, v, 0), axis=axis, keepdims=True)
                    / jnp.sum(w, axis=axis, keepdims=True))
    if mean is None:
        mean = _mean(x)
    if variance is None:
        variance = _mean(jnp.square(x - mean))
    return (x - mean) / jnp.sqrt(variance + epsilon)


def leaky_relu(x, negative_slope=0.01):
    """``x`` above zero, ``negative_slope * x`` below."""
    return jnp.where(x >= 0, x, negative_slope * x)


def gelu(x, approximate: bool = True):
    """GELU; ``approximate=True`` is the tanh form (JAX's default), else the exact erf form."""
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + jnp.tanh(c * (x + 0.044715 * (x * x * x))))
    (x,) = binders.promote(x, float_only=True)
    return 0.5 * x * (1.0 + erf_p(x * (1.0 / math.sqrt(2.0))))


def log_softmax(x, axis=-1):
    """``x - logsumexp(x, axis)``: log-probabilities, computed stably."""
    return special.log_softmax(x, axis=axis)


def softmax(x, axis=-1):
    """``exp(x)`` normalised to sum to one along ``axis``, computed stably."""
    return special.softmax(x, axis=axis)


def one_hot(x, num_classes: int, dtype=jnp.float64):
    """``one_hot(labels, k)[..., j] = (labels[...] == j)``."""
    x = jnp.asarray(x)
    return (jnp.expand_dims(x, -1) == jnp.arange(num_classes)).astype(dtype)
