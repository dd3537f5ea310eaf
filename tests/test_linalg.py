"""jnp.linalg and jitgraph.scipy.linalg beyond the case table: stacked matrices, compiled
programs (LAPACK as host steps), derivative identities with known values, clear errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.errors import ShapeError
from jitgraph.scipy.linalg import cho_solve, solve_triangular

rng = np.random.default_rng(5)
A = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
SPD = A @ np.swapaxes(A, -1, -2) + np.eye(3)


def test_known_derivatives():
    a = A[0]
    # d logdet / dA = A^-T;  d tr(A^-1) / dA = -(A^-2)^T
    np.testing.assert_allclose(jitgraph.grad(lambda a: jnp.linalg.slogdet(a)[1])(a),
                               np.linalg.inv(a).T, rtol=1e-12)
    ai = np.linalg.inv(a)
    np.testing.assert_allclose(jitgraph.grad(lambda a: jnp.trace(jnp.linalg.inv(a)))(a),
                               -(ai @ ai).T, rtol=1e-12)
    # eigenvalues of a symmetric matrix: d w_k / dS = v_k v_k^T
    s = SPD[0]
    w, v = np.linalg.eigh(s)
    np.testing.assert_allclose(jitgraph.grad(lambda s: jnp.linalg.eigh(s)[0][2])(s),
                               np.outer(v[:, 2], v[:, 2]), atol=1e-12)


def test_stacked_gradients_both_modes():
    jitgraph.check_grads(lambda a: jnp.linalg.cholesky(a @ jnp.swapaxes(a, -1, -2) + np.eye(3)),
                         (A,), order=1)
    jitgraph.check_grads(lambda a, b: jnp.linalg.solve(a, b), (A, rng.standard_normal((2, 3, 2))),
                         order=1)


def test_compiled_program_calls_lapack_between_kernels():
    def f(s, b):
        L = jnp.linalg.cholesky(s)
        x = cho_solve((L, True), b)
        return jnp.sum(x * x) + 2.0 * jnp.linalg.slogdet(s)[1]
    b = rng.standard_normal((3, 2))
    jf = jitgraph.jit(f)
    want = np.sum(scipy.linalg.cho_solve((np.linalg.cholesky(SPD[0]), True), b) ** 2) \
        + 2.0 * np.linalg.slogdet(SPD[0])[1]
    np.testing.assert_allclose(jf(SPD[0], b), want, rtol=1e-12)
    g = jitgraph.jit(jitgraph.grad(f))(SPD[0], b)
    np.testing.assert_allclose(g, jitgraph.grad(f)(SPD[0], b), rtol=1e-10)


def test_scipy_solve_triangular_conventions():
    a = np.triu(A[0])
    b = rng.standard_normal(3)
    for trans in (0, "T"):
        np.testing.assert_allclose(solve_triangular(a, b, trans=trans),
                                   scipy.linalg.solve_triangular(a, b, trans=trans), rtol=1e-12)


def test_errors_name_the_function_and_shape():
    with pytest.raises(ShapeError, match=r"linalg.inv: needs square matrices .*\(2, 3\)"):
        jnp.linalg.inv(np.ones((2, 3)))
    assert jnp.linalg.svd(np.ones((2, 3))).Vh.shape == (3, 3)   # full_matrices (see
    # test_array_api_names: the completed factor is orthogonal)
    with pytest.raises(ValueError, match="invalid norm order"):
        jnp.linalg.norm(np.ones((2, 2)), "bogus")
