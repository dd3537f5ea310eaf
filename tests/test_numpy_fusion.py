"""Every new elementwise function compiles into the surrounding fused loop kernel: a chain
``tanh(x) * 2 -> f -> + y`` is one kernel, with no host step, and gives NumPy's numbers."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sps

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.fusion import HostStep, LoopKernel
from jitgraph.scipy import special as jsp

rng = np.random.default_rng(3)
X = rng.uniform(0.2, 0.7, (3, 4))       # inside every function's domain after tanh(x) * 0.9
Y = rng.uniform(1.1, 1.9, 4)

UNARY = {
    "arcsin": (jnp.arcsin, np.arcsin), "arccos": (jnp.arccos, np.arccos),
    "arctan": (jnp.arctan, np.arctan), "sinh": (jnp.sinh, np.sinh), "cosh": (jnp.cosh, np.cosh),
    "arcsinh": (jnp.arcsinh, np.arcsinh), "arctanh": (jnp.arctanh, np.arctanh),
    "arccosh[1+x]": (lambda x: jnp.arccosh(1.0 + x), lambda x: np.arccosh(1.0 + x)),
    "log2": (jnp.log2, np.log2), "log10": (jnp.log10, np.log10), "exp2": (jnp.exp2, np.exp2),
    "sinc": (jnp.sinc, np.sinc), "fabs": (jnp.fabs, np.fabs), "ceil": (jnp.ceil, np.ceil),
    "trunc": (jnp.trunc, np.trunc), "rint": (jnp.rint, np.rint),
    "round[2]": (lambda x: jnp.round(x, 2), lambda x: np.round(x, 2)),
    "deg2rad": (jnp.deg2rad, np.deg2rad), "rad2deg": (jnp.rad2deg, np.rad2deg),
    "cbrt": (jnp.cbrt, np.cbrt), "nan_to_num": (jnp.nan_to_num, np.nan_to_num),
    "erfc": (jsp.erfc, sps.erfc), "gammaln": (jsp.gammaln, sps.gammaln),
    "ndtr": (jsp.ndtr, sps.ndtr), "log_ndtr": (jsp.log_ndtr, sps.log_ndtr),
    "logit": (jsp.logit, sps.logit), "signbit": (jnp.signbit, np.signbit),
}
BINARY = {
    "arctan2": (jnp.arctan2, np.arctan2), "hypot": (jnp.hypot, np.hypot),
    "logaddexp": (jnp.logaddexp, np.logaddexp), "logaddexp2": (jnp.logaddexp2, np.logaddexp2),
    "fmax": (jnp.fmax, np.fmax), "fmin": (jnp.fmin, np.fmin),
    "copysign": (jnp.copysign, np.copysign), "xlogy": (jsp.xlogy, sps.xlogy),
    "xlog1py": (jsp.xlog1py, sps.xlog1py), "isclose": (jnp.isclose, np.isclose),
    "float_power": (jnp.float_power, np.float_power),
}


def _one_kernel(f, *args):
    jf = jitgraph.jit(f)
    lo = jf.lower(*args)
    kinds = [type(s) for s in lo.plan.steps]
    assert HostStep not in kinds, lo.source
    assert kinds == [LoopKernel], f"{len(kinds)} steps: {kinds}\n{lo.source}"
    return jf


def test_every_unary_function_fuses_into_one_kernel():
    """sum_i f_i(tanh(x) * 0.9) + y over all the functions: one loop kernel, no host step."""
    def chain(fs):
        return lambda x, y: sum(jnp.astype(f(jnp.tanh(x) * 0.9), jnp.float64) for f in fs) + y
    j = _one_kernel(chain([f for f, _ in UNARY.values()]), X, Y)
    want = sum(ref(np.tanh(X) * 0.9).astype(np.float64) for _, ref in UNARY.values()) + Y
    np.testing.assert_allclose(j(X, Y), want, rtol=1e-12)
    ops = {n.prim.name for n in j.lower(X, Y).kernels[0].ops}
    assert {"arcsin", "arccos", "sinh", "cosh", "log2", "exp2", "erfc", "lgamma"} <= ops


def test_every_binary_function_fuses_into_one_kernel():
    def f(x, y):
        a, b = jnp.tanh(x) * 0.9, jnp.cos(x) + 0.5
        return sum(jnp.astype(g(a, b), jnp.float64) for g, _ in BINARY.values()) * 2.0 + y
    j = _one_kernel(f, X, Y)
    a, b = np.tanh(X) * 0.9, np.cos(X) + 0.5
    want = sum(ref(a, b).astype(np.float64) for _, ref in BINARY.values()) * 2.0 + Y
    np.testing.assert_allclose(j(X, Y), want, rtol=1e-12)
    assert {"arctan2", "hypot"} <= {n.prim.name for n in j.lower(X, Y).kernels[0].ops}


def test_reduction_helpers_fuse_with_their_operands():
    """any/all/nansum/cumsum are sums, selects and shifted copies: one kernel family, no host."""
    def f(x):
        return (jnp.any(x > 0.5), jnp.nansum(jnp.where(x > 0.6, jnp.nan, x), axis=1),
                jnp.cumsum(x, axis=1))
    lo = jitgraph.jit(f).lower(X)
    assert not any(isinstance(s, HostStep) for s in lo.plan.steps), lo.source
    got = jitgraph.jit(f)(X)
    np.testing.assert_array_equal(got[0], np.any(X > 0.5))
    np.testing.assert_allclose(got[1], np.nansum(np.where(X > 0.6, np.nan, X), axis=1))
    np.testing.assert_allclose(got[2], np.cumsum(X, axis=1), rtol=1e-13)


def test_host_only_functions_run_between_kernels():
    """digamma/erfinv/sort/linalg have no scalar routine: each is one host step."""
    def f(x):
        return jsp.digamma(x + 1.0) * 2.0 + jnp.sort(x, axis=1) + jnp.linalg.det(x[:, :3])
    jf = jitgraph.jit(f)
    lo = jf.lower(X)
    hosts = [s.node.prim.name for s in lo.plan.steps if isinstance(s, HostStep)]
    assert sorted(hosts) == ["argsort", "det", "digamma"], lo.source
    np.testing.assert_allclose(jf(X), sps.digamma(X + 1.0) * 2.0 + np.sort(X, axis=1)
                               + np.linalg.det(X[:, :3]), rtol=1e-12)
