"""Functional index updates ``x.at[idx].op(v)``: exact values against NumPy's in-place
updates (duplicates included), under jit, and derivatives in both x and v."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.fusion import HostStep, ScatterStep

X = np.arange(12.0).reshape(3, 4) - 5.0


def test_worked_examples():
    x = np.zeros(5)
    i = np.array([1, 3, 1])
    np.testing.assert_array_equal(jnp.at(x)[i].add(np.array([1.0, 2.0, 3.0])), [0, 4, 0, 2, 0])
    np.testing.assert_array_equal(jnp.at(x)[i].set(np.array([1.0, 2.0, 3.0])), [0, 3, 0, 2, 0])
    np.testing.assert_array_equal(jnp.at(np.ones(5))[i].multiply(np.array([2.0, 5.0, 3.0])),
                                  [1, 6, 1, 5, 1])
    np.testing.assert_array_equal(jnp.at(x)[i].min(np.array([-1.0, 2.0, -3.0])), [0, -3, 0, 0, 0])
    np.testing.assert_array_equal(jnp.at(x)[1:4].max(np.array([-1.0, 2.0, 1.0])), [0, 0, 2, 1, 0])
    np.testing.assert_array_equal(jnp.at(X)[X > 3].set(0.0), np.where(X > 3, 0.0, X))
    assert jnp.at(X)[1, -1].get() == X[1, -1]


def test_under_jit_the_method_form_compiles_to_scatter_kernels():
    f = jitgraph.jit(lambda x, v: x.at[:, np.array([0, 2, 0])].add(v))
    v = np.ones((3, 3))
    want = X.copy()
    np.add.at(want, (slice(None), np.array([0, 2, 0])), v)
    np.testing.assert_array_equal(f(X, v), want)
    lo = f.lower(X, v)
    assert any(isinstance(s, ScatterStep) for s in lo.plan.steps)
    assert not any(isinstance(s, HostStep) for s in lo.plan.steps)


def test_traced_index_arrays():
    f = jitgraph.jit(lambda x, i, v: (x.at[i].add(v), x.at[i].set(v), x.at[i].min(v)))
    i = np.array([2, 0])
    v = np.array([[1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, -3.0, -4.0]])
    a, s, m = f(X, i, v)
    np.testing.assert_array_equal(a, X + np.array([[-1, -2, -3, -4], [0] * 4, [1, 2, 3, 4]]))
    want = X.copy()
    want[i] = v
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(m, _min_at(X, i, v))


def _min_at(x, i, v):
    y = x.copy()
    np.minimum.at(y, i, v)
    return y


@pytest.mark.parametrize("mode", ["set", "add", "multiply", "min", "max"])
def test_gradients_in_x_and_values(mode):
    idx = np.array([0, 2, 0])
    x = np.array([0.3, -1.2, 0.7, 2.0])
    v = np.array([1.1, -0.4, 0.9])
    jitgraph.check_grads(lambda x, v: getattr(jnp.at(x)[idx], mode)(v) * x, (x, v), order=2)


def test_errors():
    with pytest.raises(IndexError):
        jnp.at(np.zeros(3))[5].set(1.0)
    with pytest.raises(NotImplementedError, match="power"):
        jnp.at(np.zeros(3))[0].power(2.0)
