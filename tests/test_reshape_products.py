"""Reshapes index by dimension groups (merged dims cost a multiply-add, no division), and
``(..., M, K) @ (K, N)`` is one 2-D product (no copy of the matrix per batch), compiled and
differentiated."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jitgraph as jg
import jitgraph.numpy as jnp
from jitgraph.compiler.syntax import Syntax
from jitgraph.core import Aval
from jitgraph.ops.layout import reshape_index_map


def _read_through(ishape, oshape):
    """Every output position's input position, by evaluating the generated index text."""
    names = [f"i{k}" for k in range(len(oshape))]
    exprs = reshape_index_map(Syntax(), names, Aval(ishape, np.float32),
                              Aval(oshape, np.float32), shape=oshape)
    x = np.arange(int(np.prod(ishape))).reshape(ishape)
    y = x.reshape(oshape)
    for pos in itertools.product(*[range(d) for d in oshape]):
        at = tuple(eval(e, {}, dict(zip(names, pos))) for e in exprs)   # noqa: S307
        assert x[at] == y[pos], (ishape, oshape, pos, exprs)
    return exprs


def test_merged_and_split_dims_index_without_division_where_they_group():
    assert _read_through((1024, 1024), (8, 128, 1024)) == ["(i0 * 128 + i1)", "i2"]
    assert _read_through((8, 128, 1024), (1024, 1024)) == ["(i0 // 128)", "(i0 % 128)", "i1"]
    assert _read_through((6, 4), (4, 6)) == ["((i0 * 6 + i1) // 4)", "((i0 * 6 + i1) % 4)"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=0, max_size=4), st.randoms(use_true_random=False))
def test_any_reshape_reads_what_numpy_reshape_reads(dims, rnd):
    size = int(np.prod(dims))
    out = []
    rest = size
    while rest > 1:                         # a random factorisation of the same size
        f = rnd.choice([d for d in range(1, rest + 1) if rest % d == 0])
        out.append(f)
        rest //= f
        if rnd.random() < 0.3:
            out.append(1)
    rnd.shuffle(out)
    _read_through(tuple(dims), tuple(out) or (1,))


def _loss(x, w):
    return jnp.sum(jnp.tanh(x @ w) * jnp.arange(5.0))


def test_batched_rows_times_a_matrix_is_one_product():
    x, w = np.ones((3, 4, 2)), np.ones((2, 5))
    for fn in (_loss, jg.grad(_loss, 1), jg.grad(_loss, 0)):
        g = jg.make_graph(fn)(x, w)
        products = [n for n in g.nodes if n.prim.name == "matmul"]
        assert products and all(n.out.aval.ndim == 2 for n in products), g
        assert not any(n.prim.name == "broadcast_to" and n.inputs[0].aval.shape == (2, 5)
                       for n in g.nodes), g


@pytest.mark.parametrize("xshape,wshape", [((3, 4, 2), (2, 5)), ((2, 3, 4, 2), (2, 5)),
                                           ((3, 4, 2), (2,)), ((4, 2), (2, 5))])
def test_products_compiled_and_their_gradients(xshape, wshape):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xshape), rng.standard_normal(wshape)

    def loss(x, w):
        return jnp.sum(jnp.tanh(x @ w))
    np.testing.assert_allclose(jg.jit(lambda x, w: x @ w)(x, w), x @ w, rtol=1e-12)
    jg.check_grads(loss, (x, w), order=2)
    gx, gw = jg.jit(jg.grad(loss, (0, 1)))(x, w)
    ex, ew = jg.grad(loss, (0, 1))(x, w)
    np.testing.assert_allclose(gx, ex, rtol=1e-10)
    np.testing.assert_allclose(gw, ew, rtol=1e-10)


def test_a_large_batch_of_rows_through_blas_matches_numpy():
    """A size that takes the BLAS path, with a transposed 3-D operand read through a view."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 96, 64)).astype(np.float32)
    w = rng.standard_normal((64, 80)).astype(np.float32)

    def f(np_, x, w):
        return np_.tanh(np_.swapaxes(x, 1, 2).reshape(4, 96, 64) @ w)
    np.testing.assert_allclose(jg.jit(lambda x, w: f(jnp, x, w))(x, w), f(np, x, w),
                               rtol=2e-5, atol=2e-5)
