"""``scipy.special`` functions used by models."""
from __future__ import annotations

from .. import numpy as jnp


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) computed as max + log(sum(exp(x - max))), safe for large and -inf inputs.

    The shift is wrapped in stop_gradient: the result does not depend on it mathematically, so
    its gradient is softmax(x) exactly.
    """
    x = jnp.asarray(x)
    if not jnp.dtypes.is_float(jnp.aval_of(x).dtype):
        x = jnp.astype(x, jnp.float64)
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jnp.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    s = jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)
    out = jnp.log(s) + m
    if not keepdims:
        out = jnp.squeeze(out, axis=axis) if axis is not None else jnp.reshape(out, ())
    return out


def expit(x):
    from ..nn import sigmoid
    return sigmoid(x)


def erf(x):
    (x,) = jnp._promote(x, float_only=True)
    return jnp.bind(jnp._P.erf, x)
