"""Neural-network functions in numerically stable forms (log_softmax never takes log(softmax))."""
from __future__ import annotations

import math

from .. import numpy as jnp
from ..core import bind
from ..scipy import special
from ..scipy.special import logsumexp  # noqa: F401  (re-exported)


def relu(x):
    return jnp.maximum(x, 0)


def sigmoid(x):
    return special.expit(x)


def log_sigmoid(x):
    return -softplus(-x)


def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def silu(x):
    return x * sigmoid(x)


swish = silu


def elu(x, alpha=1.0):
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def leaky_relu(x, negative_slope=0.01):
    return jnp.where(x >= 0, x, negative_slope * x)


def gelu(x, approximate: bool = True):
    """GELU; ``approximate=True`` is the tanh form (JAX's default), else the exact erf form."""
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + jnp.tanh(c * (x + 0.044715 * (x * x * x))))
    (x,) = jnp._promote(x, float_only=True)
    return 0.5 * x * (1.0 + bind(jnp._P.erf, x * (1.0 / math.sqrt(2.0))))


def log_softmax(x, axis=-1):
    return special.log_softmax(x, axis=axis)


def softmax(x, axis=-1):
    return special.softmax(x, axis=axis)


def one_hot(x, num_classes: int, dtype=jnp.float64):
    """``one_hot(labels, k)[..., j] = (labels[...] == j)``."""
    x = jnp.asarray(x)
    return (jnp.expand_dims(x, -1) == jnp.arange(num_classes)).astype(dtype)
