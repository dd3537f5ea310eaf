"""``scipy.special`` functions used by models."""
from __future__ import annotations

from .. import numpy as jnp
from ..ops.binders import promote
from ..ops.elementwise import erf_p, logistic_p
from ..ops.transcendental import (digamma_p, erfc_p, erfinv_p, lgamma_p, ndtri_p,
                                  polygamma_p)
from ..tree import as_arrays

# the functions of scipy.special (not the primitives and binders this module is written with)
__all__ = ["beta", "betaln", "digamma", "entr", "erf", "erfc", "erfinv", "expit",
           "gamma", "gammaln", "log_ndtr", "log_softmax", "logit", "logsumexp",
           "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "softmax", "xlog1py",
           "xlogy"]


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
    """The logistic sigmoid 1 / (1 + exp(-x)) (``jitgraph.nn.sigmoid``)."""
    (x,) = promote(x, float_only=True)
    return as_arrays(logistic_p(x))


def erf(x):
    """The error function, elementwise."""
    (x,) = promote(x, float_only=True)
    return as_arrays(erf_p(x))


# ---------------------------------------------------------------- more special functions
def _f(x):
    (x,) = promote(x, float_only=True)
    return x


def _prim1(prim, x):
    return as_arrays(prim(_f(x)))


def erfc(x):
    """``1 - erf(x)``, accurate where ``erf(x)`` is close to one."""
    return _prim1(erfc_p, x)


def erfinv(x):
    """Inverse error function (a host step under jit)."""
    return _prim1(erfinv_p, x)


def gammaln(x):
    """log|Gamma(x)|."""
    return _prim1(lgamma_p, x)


def gamma(x):
    """Gamma(x) = sign * exp(gammaln(x)); the sign alternates between the negative poles."""
    x = _f(x)
    odd = jnp.equal(jnp.mod(jnp.floor(x), 2.0), 1.0)
    sign = jnp.where(jnp.logical_or(x > 0, jnp.logical_not(odd)), 1.0, -1.0)
    return sign * jnp.exp(gammaln(x))


def digamma(x):
    """d/dx gammaln(x) (a host step under jit)."""
    return _prim1(digamma_p, x)


psi = digamma


def polygamma(n, x):
    """The n-th derivative of digamma (``n`` a static non-negative integer)."""
    n = int(n)
    if n < 0:
        raise ValueError(f"polygamma: n must be a non-negative integer, got {n}")
    if n == 0:
        return digamma(x)
    return as_arrays(polygamma_p(_f(x), n=n))


def betaln(a, b):
    """``log(abs(beta(a, b)))``, computed through ``gammaln``."""
    a, b = promote(a, b, float_only=True)
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def beta(a, b):
    """The beta function ``gamma(a) gamma(b) / gamma(a + b)``."""
    return jnp.exp(betaln(a, b))


def logit(p):
    """``log(p / (1 - p))``, the inverse of the logistic sigmoid."""
    p = _f(p)
    return jnp.log(p) - jnp.log1p(-p)


def xlogy(x, y):
    """x * log(y), 0 where x == 0 (also its derivative in y there)."""
    x, y = promote(x, y, float_only=True)
    zero = jnp.equal(x, 0.0)
    return jnp.where(zero, 0.0, x * jnp.log(jnp.where(zero, 1.0, y)))


def xlog1py(x, y):
    """x * log1p(y), 0 where x == 0."""
    x, y = promote(x, y, float_only=True)
    zero = jnp.equal(x, 0.0)
    return jnp.where(zero, 0.0, x * jnp.log1p(jnp.where(zero, 0.0, y)))


def entr(x):
    """-x log x for x > 0, 0 at 0, -inf below."""
    x = _f(x)
    return jnp.where(x > 0, -xlogy(x, x), jnp.where(jnp.equal(x, 0.0), 0.0, -jnp.inf))


def softmax(x, axis=None):
    """exp(x) / sum(exp(x)) over ``axis`` (default: all), shifted by the max, which
    stop_gradient keeps out of the derivative (``jitgraph.nn.softmax``)."""
    x = _f(x)
    axis = axis if axis is not None else tuple(range(jnp.ndim(x)))
    unnormalized = jnp.exp(x - jnp.stop_gradient(jnp.max(x, axis=axis, keepdims=True)))
    return unnormalized / jnp.sum(unnormalized, axis=axis, keepdims=True)


def log_softmax(x, axis=None):
    """x - logsumexp(x) over ``axis`` (default: all), never log(softmax(x))
    (``jitgraph.nn.log_softmax``)."""
    x = _f(x)
    axis = axis if axis is not None else tuple(range(jnp.ndim(x)))
    shifted = x - jnp.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


_SQRT1_2 = 0.7071067811865476
_HALF_LOG_2PI = 0.9189385332046727


def ndtr(x):
    """Standard normal CDF."""
    return 0.5 * erfc(-_f(x) * _SQRT1_2)


def ndtri(p):
    """Inverse of ndtr (a host step under jit)."""
    return _prim1(ndtri_p, p)


def log_ndtr(x):
    """log(ndtr(x)), accurate in both tails: log1p(-ndtr(-x)) on the right, the asymptotic
    series below -20 (where ndtr underflows)."""
    x = _f(x)
    right = x > 5.0
    left = x < -20.0
    mid = jnp.where(jnp.logical_or(right, left), 0.0, x)
    xr = jnp.where(right, x, 6.0)
    xl = jnp.where(left, x, -21.0)
    x2 = xl * xl
    series = 1.0 - 1.0 / x2 + 3.0 / (x2 * x2) - 15.0 / (x2 * x2 * x2)
    tail = -0.5 * x2 - jnp.log(-xl) - _HALF_LOG_2PI + jnp.log(series)
    return jnp.where(right, jnp.log1p(-ndtr(-xr)), jnp.where(left, tail, jnp.log(ndtr(mid))))


def multigammaln(a, d):
    """Log of the multivariate gamma function of dimension ``d``."""
    d = int(d)
    a = _f(a)
    out = 0.25 * d * (d - 1) * 1.1447298858494002     # log(pi)
    for j in range(d):
        out = out + gammaln(a - 0.5 * j)
    return out
