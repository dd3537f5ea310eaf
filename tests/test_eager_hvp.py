"""Un-jitted Hessian-vector products and grad of grad: ``hessian_vector_product`` takes grad
of grad the first time it sees a structure and one cached graph from the second on
(``autodiff.eager_hvp``); grad of grad written by hand records the inner passes into the outer
trace with the values they already have (``autodiff._graft``). Both must give the numbers of
the uncached path, of a Hessian formed outright and of central differences, on every call."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import autodiff, grad, hessian, hessian_vector_product, jit
from jitgraph.scipy.special import logsumexp
from jitgraph.scipy.stats import multivariate_normal

CALLS = 4   # first sighting (grad of grad), the cached graph built, then used twice


def _gmm(k: int = 3, d: int = 2, n: int = 20):
    """autograd's examples/gmm.py objective, small: a k-component Gaussian mixture's negative
    log-likelihood of n points, over flattened (log proportions, means, covariance roots)."""
    rs = np.random.RandomState(0)
    data = rs.randn(n, d)
    init = [rs.randn(k) * 0.1, rs.randn(k, d) * 0.1,
            np.zeros((k, d, d)) + np.eye(d) + 0.1 * rs.randn(k, d, d)]
    ends = np.cumsum([0] + [a.size for a in init])

    def objective(flat):
        lp, means, roots = [jnp.reshape(flat[a:b], x.shape)
                            for x, a, b in zip(init, ends[:-1], ends[1:])]
        lp = lp - logsumexp(lp)
        lls = [p + multivariate_normal.logpdf(data, m, jnp.dot(c.T, c))
               for p, m, c in zip(lp, means, roots)]
        return -jnp.sum(logsumexp(jnp.vstack(lls), axis=0))
    x0 = np.concatenate([a.ravel() for a in init])
    return objective, x0, rs.randn(x0.size)


def _by_hand(f):
    return grad(lambda x, v: jnp.dot(grad(f)(x), v))


def _clear_caches():
    autodiff._BACKWARD_CACHE.clear()
    autodiff._HVP_CACHE.clear()


def _close(got, want, rtol):
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.max(np.abs(want)))


def test_gmm_gradient_and_hvp_match_central_differences():
    f, x, v = _gmm()
    _clear_caches()
    eps = 1e-5
    e = np.eye(x.size)
    fd_grad = np.array([(f(x + eps * e[i]) - f(x - eps * e[i])) / (2 * eps)
                        for i in range(x.size)])
    g = grad(f)
    fd_hvp = (g(x + eps * v) - g(x - eps * v)) / (2 * eps)
    hvp = hessian_vector_product(f)
    for _ in range(CALLS):
        _close(g(x), fd_grad, 1e-8)
        _close(hvp(x, v), fd_hvp, 1e-7)


def test_gmm_hvp_cached_equals_uncached_and_the_hessian():
    f, x, v = _gmm()
    want = hessian(f)(x) @ v
    _clear_caches()
    hvp, by_hand = hessian_vector_product(f), _by_hand(f)
    first = hvp(x, v)                        # uncached: grad of grad, rules on the values
    assert not any(autodiff._HVP_CACHE.values())
    later = [hvp(x, v) for _ in range(CALLS)]
    assert any(autodiff._HVP_CACHE.values())
    for h in [first] + later:
        _close(h, want, 1e-13)
        _close(h, first, 1e-14)
    for h in later[1:]:
        np.testing.assert_array_equal(h, later[0])   # one cached graph: the same numbers
    for _ in range(CALLS):
        _close(by_hand(x, v), first, 1e-14)
    _clear_caches()
    _close(hvp(x, v), first, 0.0)            # and again from empty caches


def test_hvp_takes_new_points_and_vectors():
    """The cached graph takes the forward values and the vector as inputs: nothing of an
    earlier call is kept."""
    def rosen(x):
        return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2

    hvp = hessian_vector_product(rosen)
    rng = np.random.default_rng(0)
    for _ in range(6):
        x, v = rng.standard_normal(2), rng.standard_normal(2)
        H = np.array([[1200 * x[0] ** 2 - 400 * x[1] + 2, -400 * x[0]], [-400 * x[0], 200.0]])
        np.testing.assert_allclose(hvp(x, v), H @ v, rtol=1e-13)


def test_hvp_pytrees_argnums_and_kwargs():
    def f(params, x, scale=1.0):
        return scale * jnp.sum(jnp.tanh(x @ params["w"] + params["b"]) ** 2)

    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x = rng.standard_normal((4, 3))
    vec = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    flat = np.concatenate([params["b"], params["w"].ravel()])

    def f_flat(z):
        return f({"b": z[:2], "w": jnp.reshape(z[2:], (3, 2))}, x, scale=2.0)
    want = hessian(f_flat)(flat) @ np.concatenate([vec["b"], vec["w"].ravel()])
    for _ in range(CALLS):
        h = hessian_vector_product(f)(params, x, vec, scale=2.0)
        assert set(h) == {"w", "b"}
        got = np.concatenate([h["b"], np.ravel(h["w"])])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    hx = hessian_vector_product(f, argnums=1)(params, x, np.ones_like(x))
    assert hx.shape == x.shape
    with pytest.raises(TypeError, match="structure"):
        hessian_vector_product(f)(params, x, [vec["w"], vec["b"]])
    with pytest.raises(ValueError, match="shape"):
        hessian_vector_product(f, argnums=1)(params, x, np.ones(3))


def test_hvp_under_jit_and_of_traced_values():
    f, x, v = _gmm(k=2, n=8)
    want = hessian(f)(x) @ v
    hvp = hessian_vector_product(f)
    _close(jit(hvp)(x, v), want, 1e-12)
    # inside another un-jitted transform the arguments are traced: grad of grad of grad
    third = grad(lambda x: jnp.sum(hvp(x, v)))
    want = jitgraph.interpret(jitgraph.make_graph(third)(x), [x])[0]
    for _ in range(CALLS):
        _close(third(x), want, 1e-13)


def test_grad_of_grad_keeps_float32_and_weak_scalars():
    """The inner passes recorded into the outer trace keep their avals: a float32 program
    with Python-scalar constants stays float32 on every call."""
    x = np.array([0.3, -0.7, 1.2], np.float32)

    def f(x):
        return jnp.sum(0.5 * x ** 3 + 2.0 * jnp.tanh(x))
    hvp = _by_hand(f)
    v = np.array([1.0, -2.0, 0.5], np.float32)
    want = (3 * x.astype(np.float64) - 4 * np.tanh(x) * (1 - np.tanh(x) ** 2)) * v
    for _ in range(CALLS):
        h = hvp(x, v)
        assert h.dtype == np.float32
        np.testing.assert_allclose(h, want, rtol=1e-5)
        h2 = hessian_vector_product(f)(x, v)
        assert h2.dtype == np.float32
        np.testing.assert_allclose(h2, want, rtol=1e-5)


@pytest.mark.parametrize("order", ["C", "F"])
def test_triangular_solve_matches_scipy(order):
    import scipy.linalg
    from jitgraph.ops.decompositions import _tri_impl
    rng = np.random.default_rng(2)
    for n, k in [(1, 1), (2, 2), (2, 300), (5, 3), (12, 9)]:
        a = np.asarray(np.tril(rng.standard_normal((n, n))) + 4 * np.eye(n), order=order)
        a = a + np.triu(rng.standard_normal((n, n)), 1)   # the other triangle is not read
        b = rng.standard_normal((n, k))
        for lower in (True, False):
            for trans in (0, 1):
                want = scipy.linalg.solve_triangular(a, b, lower=lower, trans=trans)
                got = _tri_impl(a[None], b[None], lower=lower, trans=trans)[0]
                np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        _tri_impl(np.zeros((1, 2, 2)), np.ones((1, 2, 1)), lower=True, trans=0)
