"""``scipy.stats`` distributions as namespaces of differentiable functions:
``norm``, ``t``, ``multivariate_normal``, ``laplace``, ``expon``, ``uniform``, ``cauchy``,
``logistic``, ``gamma``, ``beta``, ``poisson`` (logpdf/logpmf, pdf/pmf, and cdf where closed-form).
"""
from __future__ import annotations

import math
import types

from .. import numpy as jnp
from ..ops import binders
from . import special
from .linalg import solve_triangular

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _std(x, loc, scale):
    x, loc, scale = binders.promote(x, loc, scale, float_only=True)
    return (x - loc) / scale, scale


def _norm_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return -0.5 * z * z - _HALF_LOG_2PI - jnp.log(s)


def _norm_cdf(x, loc=0.0, scale=1.0):
    return special.ndtr(_std(x, loc, scale)[0])


def _norm_logcdf(x, loc=0.0, scale=1.0):
    return special.log_ndtr(_std(x, loc, scale)[0])


def _norm_sf(x, loc=0.0, scale=1.0):
    return special.ndtr(-_std(x, loc, scale)[0])


def _norm_ppf(q, loc=0.0, scale=1.0):
    return special.ndtri(q) * scale + loc


norm = types.SimpleNamespace(
    logpdf=_norm_logpdf, pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_norm_logpdf(x, loc, scale)),
    cdf=_norm_cdf, logcdf=_norm_logcdf, sf=_norm_sf, ppf=_norm_ppf,
    logsf=lambda x, loc=0.0, scale=1.0: special.log_ndtr(-_std(x, loc, scale)[0]))


def _t_logpdf(x, df, loc=0.0, scale=1.0):
    x, df, loc, scale = binders.promote(x, df, loc, scale, float_only=True)
    z = (x - loc) / scale
    return (special.gammaln(0.5 * (df + 1.0)) - special.gammaln(0.5 * df)
            - 0.5 * jnp.log(df * math.pi) - jnp.log(scale)
            - 0.5 * (df + 1.0) * jnp.log1p(z * z / df))


t = types.SimpleNamespace(logpdf=_t_logpdf,
                          pdf=lambda x, df, loc=0.0, scale=1.0: jnp.exp(_t_logpdf(x, df, loc, scale)))


def _mvn_logpdf(x, mean=None, cov=1.0, allow_singular=False):
    """log N(x; mean, cov) over the last axis, by a Cholesky factor of ``cov``."""
    x = binders.promote(x, float_only=True)[0]
    d = jnp.shape(x)[-1] if jnp.ndim(x) else 1
    if mean is not None:
        x = x - mean
    cov = jnp.asarray(cov)
    if jnp.ndim(cov) < 2:
        cov = cov * jnp.eye(d) if jnp.ndim(cov) == 0 else jnp.diag(cov)
    L = jnp.linalg.cholesky(cov)
    xs = jnp.reshape(x, (-1, d))
    z = solve_triangular(L, jnp.transpose(xs), lower=True)             # (d, n)
    maha = jnp.sum(z * z, axis=0)
    logdet = jnp.sum(jnp.log(jnp.diagonal(L)))
    out = -0.5 * maha - logdet - d * _HALF_LOG_2PI
    return jnp.reshape(out, jnp.shape(x)[:-1]) if jnp.ndim(x) > 1 else jnp.reshape(out, ())


multivariate_normal = types.SimpleNamespace(
    logpdf=_mvn_logpdf,
    pdf=lambda x, mean=None, cov=1.0, allow_singular=False: jnp.exp(_mvn_logpdf(x, mean, cov)))


def _laplace_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return -jnp.abs(z) - jnp.log(2.0 * s)


def _laplace_cdf(x, loc=0.0, scale=1.0):
    z, _ = _std(x, loc, scale)
    return jnp.where(z < 0, 0.5 * jnp.exp(jnp.minimum(z, 0.0)), 1.0 - 0.5 * jnp.exp(-jnp.maximum(z, 0.0)))


laplace = types.SimpleNamespace(logpdf=_laplace_logpdf, cdf=_laplace_cdf,
                                pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_laplace_logpdf(x, loc, scale)))


def _expon_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return jnp.where(z >= 0, -z - jnp.log(s), -jnp.inf)


expon = types.SimpleNamespace(
    logpdf=_expon_logpdf, pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_expon_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: jnp.where(
        _std(x, loc, scale)[0] >= 0, -jnp.expm1(-jnp.maximum(_std(x, loc, scale)[0], 0.0)), 0.0))


def _uniform_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return jnp.where(jnp.logical_and(z >= 0, z <= 1), -jnp.log(s), -jnp.inf)


uniform = types.SimpleNamespace(
    logpdf=_uniform_logpdf, pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_uniform_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: jnp.clip(_std(x, loc, scale)[0], 0.0, 1.0))


def _cauchy_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return -math.log(math.pi) - jnp.log(s) - jnp.log1p(z * z)


cauchy = types.SimpleNamespace(
    logpdf=_cauchy_logpdf, pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_cauchy_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: 0.5 + jnp.arctan(_std(x, loc, scale)[0]) / math.pi)


def _logistic_logpdf(x, loc=0.0, scale=1.0):
    z, s = _std(x, loc, scale)
    return -z - 2.0 * jnp.logaddexp(0.0, -z) - jnp.log(s)


logistic = types.SimpleNamespace(
    logpdf=_logistic_logpdf, pdf=lambda x, loc=0.0, scale=1.0: jnp.exp(_logistic_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: special.expit(_std(x, loc, scale)[0]))


def _gamma_logpdf(x, a, loc=0.0, scale=1.0):
    x, a, loc, scale = binders.promote(x, a, loc, scale, float_only=True)
    z = (x - loc) / scale
    return special.xlogy(a - 1.0, z) - z - special.gammaln(a) - jnp.log(scale)


gamma = types.SimpleNamespace(
    logpdf=_gamma_logpdf, pdf=lambda x, a, loc=0.0, scale=1.0: jnp.exp(_gamma_logpdf(x, a, loc, scale)))


def _beta_logpdf(x, a, b, loc=0.0, scale=1.0):
    x, a, b, loc, scale = binders.promote(x, a, b, loc, scale, float_only=True)
    z = (x - loc) / scale
    return (special.xlogy(a - 1.0, z) + special.xlog1py(b - 1.0, -z) - special.betaln(a, b)
            - jnp.log(scale))


beta = types.SimpleNamespace(
    logpdf=_beta_logpdf, pdf=lambda x, a, b, loc=0.0, scale=1.0: jnp.exp(_beta_logpdf(x, a, b, loc, scale)))


def _poisson_logpmf(k, mu, loc=0):
    k, mu = binders.promote(k, mu, float_only=True)
    k = k - loc
    return special.xlogy(k, mu) - mu - special.gammaln(k + 1.0)


poisson = types.SimpleNamespace(logpmf=_poisson_logpmf,
                                pmf=lambda k, mu, loc=0: jnp.exp(_poisson_logpmf(k, mu, loc)))
