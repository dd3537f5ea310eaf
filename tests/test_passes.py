"""Graph passes: DCE, CSE, constant folding and algebraic simplification, each on a small graph
(node counts / primitives present), and the optimized graph computes what the original does."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import grad, make_graph
from jitgraph.core import PRIMITIVES, Aval, Graph, Node, Var
from jitgraph.interpreter import run
from jitgraph.passes import FOLD_MAX_ELEMENTS, dce, optimize, simplify
from jitgraph.transforms import trace_to_graph


def raw_graph(fn, *args):
    """The graph as traced, before any pass."""
    return trace_to_graph(fn, args, abstract=True, what="test")[0]


def prims(g: Graph) -> list[str]:
    return [n.prim.name for n in g.nodes]


def assert_same_results(g1: Graph, g2: Graph, args):
    a = run(g1, list(args))
    b = run(g2, list(args))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


class Builder:
    """Builds graphs by hand, so constant-only nodes (which tracing never makes) can be tested."""

    def __init__(self):
        self.inputs, self.nodes, self.consts = [], [], {}

    def input(self, shape, dtype=np.float64):
        v = Var(Aval(shape, dtype))
        self.inputs.append(v)
        return v

    def const(self, value, dtype=None):
        value = np.asarray(value, dtype)
        v = Var(Aval(value.shape, value.dtype))
        self.consts[v] = value
        return v

    def op(self, name, *ins, **params):
        prim = PRIMITIVES[name]
        out = Var(prim.abstract_eval(*[i.aval for i in ins], **params))
        self.nodes.append(Node(prim, list(ins), params, [out]))
        return out

    def graph(self, *outs):
        return Graph(self.inputs, self.nodes, list(outs), self.consts)


# ------------------------------------------------------------------ DCE
def test_dce_drops_unused_nodes_and_constants():
    def f(x):
        unused = jnp.sin(x) * np.arange(3.0)      # dead, with a constant
        _ = jnp.exp(unused)
        return jnp.cos(x) + 1.0

    x = np.array([0.1, 0.2, 0.3])
    g = raw_graph(f, x)
    assert prims(g) == ["sin", "mul", "exp", "cos", "add"]
    assert len(g.consts) == 2
    d = dce(g)
    assert prims(d) == ["cos", "add"]
    assert len(d.consts) == 1
    assert len(d.inputs) == 1          # inputs are kept even when unused
    assert_same_results(g, d, [x])
    # make_graph runs it
    assert prims(make_graph(f)(x)) == ["cos", "add"]


def test_dce_keeps_unused_input():
    g = dce(raw_graph(lambda x, y: x * 2.0, 1.0, 2.0))
    assert len(g.inputs) == 2 and prims(g) == ["mul"]


# ------------------------------------------------------------------ CSE
def test_cse_merges_identical_nodes():
    def f(x):
        a = jnp.sin(x) * jnp.sin(x)
        b = jnp.sum(x, axis=0) + jnp.sum(x, axis=0)
        c = jnp.sum(x, axis=1)                    # different params: not merged
        return a, b, c, jnp.reshape(x, (6,)), jnp.reshape(x, (6,))

    x = np.arange(6.0).reshape(2, 3)
    g = raw_graph(f, x)
    assert prims(g).count("sin") == 2 and prims(g).count("reduce_sum") == 3
    s = simplify(g)
    assert prims(s).count("sin") == 1
    assert prims(s).count("reduce_sum") == 2
    assert prims(s).count("reshape") == 1
    assert s.outputs[3] is s.outputs[4]
    assert_same_results(g, s, [x])


def test_cse_is_transitive_and_respects_operand_order():
    def f(x, y):
        a = jnp.exp(x - y) + 1.0
        b = jnp.exp(x - y) + 1.0          # whole chain repeated
        c = y - x                          # operands swapped: different value
        return a * b, c

    x, y = np.array([1.0, 2.0]), np.array([0.5, 3.0])
    g = raw_graph(f, x, y)
    s = optimize(g)
    assert prims(s).count("exp") == 1 and prims(s).count("sub") == 2
    assert_same_results(g, s, [x, y])


def test_cse_merges_equal_small_constants():
    def f(x):
        return x * np.array([1.0, 2.0]) + x * np.array([1.0, 2.0])

    g = raw_graph(f, np.ones(2))
    assert len(g.consts) == 2
    s = optimize(g)
    assert prims(s).count("mul") == 1 and len(s.consts) == 1


# ------------------------------------------------------------------ constant folding
def test_constant_folding():
    b = Builder()
    x = b.input((3,))
    c1 = b.const([1.0, 2.0, 3.0])
    c2 = b.const(2.0)
    k = b.op("mul", c1, c2)                                        # const * const
    k = b.op("exp", b.op("neg", k))                                # still constant
    out = b.op("add", x, k)
    g = b.graph(out)
    s = optimize(g)
    assert prims(s) == ["add"]
    (cv,) = [c for v, c in s.consts.items() if v in s.nodes[0].inputs]
    np.testing.assert_allclose(cv, np.exp(-np.array([2.0, 4.0, 6.0])))
    assert_same_results(g, s, [np.array([0.5, 1.0, 1.5])])


def test_constant_folding_is_size_limited():
    b = Builder()
    x = b.input((100, 100))
    big = b.op("broadcast_to", b.const(2.0), shape=(100, 100))     # 10000 > FOLD_MAX_ELEMENTS
    out = b.op("mul", x, big)
    g = b.graph(out)
    assert 100 * 100 > FOLD_MAX_ELEMENTS
    s = optimize(g)
    assert "broadcast_to" in prims(s)
    assert all(c.size <= FOLD_MAX_ELEMENTS for c in s.consts.values())
    assert_same_results(g, s, [np.ones((100, 100))])


def test_folding_keeps_dtypes():
    b = Builder()
    x = b.input((2,), np.float32)
    c = b.op("convert", b.const([1.5, 2.5]), dtype=np.dtype(np.float32))
    out = b.op("mul", x, c)
    g = b.graph(out)
    s = optimize(g)
    assert prims(s) == ["mul"]
    assert all(cv.dtype == np.float32 for cv in s.consts.values())
    assert_same_results(g, s, [np.array([1.0, 2.0], np.float32)])


def test_folding_never_grows_constants():
    # a broadcast of a scalar constant stays a broadcast (compiled code makes it for free)
    b = Builder()
    x = b.input((50,))
    big = b.op("broadcast_to", b.const(2.0), shape=(50,))
    g = b.graph(b.op("add", x, big))
    s = optimize(g)
    assert all(c.size == 1 for c in s.consts.values())
    assert_same_results(g, s, [np.arange(50.0)])


def test_gradient_constants_fold():
    # d/dx sum(3 * x): every node of the backward pass is constant: at most a broadcast remains
    g = make_graph(grad(lambda x: jnp.sum(3.0 * x)))(np.ones(4))
    assert prims(g) in ([], ["broadcast_to"]), g
    assert all(c.size == 1 for c in g.consts.values())
    np.testing.assert_array_equal(run(g, [np.ones(4)])[0], np.full(4, 3.0))


# ------------------------------------------------------------------ algebraic simplification
@pytest.mark.parametrize("fn, remaining", [
    (lambda x: x * 1.0, []),
    (lambda x: 1.0 * x, []),
    (lambda x: x + 0.0, []),
    (lambda x: 0.0 + x, []),
    (lambda x: x - 0.0, []),
    (lambda x: x / 1.0, []),
    (lambda x: x * -1.0, ["neg"]),
    (lambda x: -(-x), []),
    (lambda x: -(-(-x)), ["neg"]),
    (lambda x: jnp.transpose(jnp.transpose(x)), []),
    (lambda x: jnp.transpose(jnp.transpose(x, (1, 2, 0)), (2, 0, 1)), []),
    (lambda x: jnp.transpose(jnp.transpose(x, (1, 2, 0)), (1, 2, 0)), ["transpose"]),
    (lambda x: jnp.reshape(jnp.reshape(x, (6, 4)), (3, 8)), ["reshape"]),
    (lambda x: jnp.reshape(jnp.reshape(x, (24,)), (2, 3, 4)), []),
    (lambda x: x * np.ones((2, 3, 4)), []),
    (lambda x: jnp.sum(jnp.broadcast_to(x, (5, 2, 3, 4)), axis=0), ["mul"]),
    (lambda x: (x * 1.0 + 0.0) * 1.0 - 0.0, []),
])
def test_simplification(fn, remaining):
    x = np.arange(24.0).reshape(2, 3, 4) / 7
    g = raw_graph(fn, x)
    assert prims(g) != remaining
    s = optimize(g)
    assert sorted(prims(s)) == sorted(remaining), s
    assert_same_results(g, s, [x])


def test_transpose_of_a_product_is_the_product_of_transposed_operands():
    """(a @ b)^T = b^T @ a^T, its operands transposed for free: no transpose of the result is
    left (a tied embedding's gradient, batched products too), and the results are the same;
    kept where the product has another use (else two products would be computed)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    ab, bb = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 3, 4))
    cases = [
        (lambda a, b: jnp.transpose(a @ b), (a, b)),
        (lambda a, b: jnp.transpose(a.T @ b), (a.T.copy(), b)),
        (lambda a, b: jnp.swapaxes(a @ b, -1, -2), (ab, bb)),
    ]
    for fn, args in cases:
        g = raw_graph(fn, *args)
        s = optimize(g)
        assert prims(g)[-1] == "transpose"
        (m,) = [n for n in s.nodes if n.prim.name == "matmul"]
        producers = {o: n for n in s.nodes for o in n.outs}
        assert s.outputs[0] is m.out           # nothing transposes the product's result
        assert all(v in s.inputs or producers[v].prim.name == "transpose" for v in m.inputs)
        assert_same_results(g, s, list(args))
    # (a tied embedding: the gradient of logits = h @ E^T with respect to E)
    e, h = rng.standard_normal((7, 3)), rng.standard_normal((4, 3))
    g = raw_graph(grad(lambda e: jnp.sum(jnp.sin(h @ e.T))), e)
    s = optimize(g)
    producers = {o: n for n in s.nodes for o in n.outs}
    assert producers[s.outputs[0]].prim.name == "matmul", prims(s)
    assert_same_results(g, s, [e])
    both = optimize(raw_graph(lambda a, b: (jnp.transpose(a @ b), a @ b), a, b))
    assert prims(both).count("matmul") == 1 and "transpose" in prims(both)


def test_convert_to_same_dtype_is_removed():
    b = Builder()
    x = b.input((3,))
    y = b.op("convert", x, dtype=np.dtype(np.float64))
    z = b.op("convert", b.op("sin", y), dtype=np.dtype(np.float32))
    g = b.graph(z)
    s = optimize(g)
    assert prims(s) == ["sin", "convert"]
    assert_same_results(g, s, [np.arange(3.0)])


def test_simplification_keeps_shape_and_dtype_changing_identities():
    # x * 1 that broadcasts x, or that promotes its dtype, is not x
    x = np.arange(3.0)
    g = optimize(raw_graph(lambda x: x * np.ones((2, 3)), x))
    assert g.outputs[0].aval.shape == (2, 3)
    assert_same_results(raw_graph(lambda x: x * np.ones((2, 3)), x), g, [x])
    xf = np.arange(3.0, dtype=np.float32)
    g0 = raw_graph(lambda x: x * np.ones(3), xf)
    g = optimize(g0)
    assert g.outputs[0].aval.dtype == np.float64
    assert_same_results(g0, g, [xf])
    # x * 0 is not 0 (x may be inf or nan)
    g = optimize(raw_graph(lambda x: x * 0.0, x))
    assert prims(g) == ["mul"]


def test_sum_of_broadcast_over_mixed_axes():
    x = np.arange(3.0).reshape(3, 1)

    def f(x):
        b = jnp.broadcast_to(x, (2, 3, 4))
        return jnp.sum(b, axis=0), jnp.sum(b, axis=(0, 2)), jnp.sum(b, axis=2), jnp.sum(b, axis=1)

    g = raw_graph(f, x)
    s = optimize(g)
    assert_same_results(g, s, [x])
    outs = run(s, [x])
    np.testing.assert_array_equal(outs[1], 8.0 * x[:, 0])
    # summing a non-broadcast axis keeps the reduction
    assert "reduce_sum" in prims(s)


def test_backward_graph_has_no_identity_junk():
    W = np.ones((3, 2))

    def loss(x):
        h = jnp.tanh(x @ W)
        return jnp.sum(h * h) + jnp.sum(jnp.exp(-x))

    x = np.ones((4, 3)) * 0.1
    g = make_graph(grad(loss))(x)
    for n in g.nodes:
        for v in n.inputs:
            c = g.consts.get(v)
            if c is not None and c.size == 1 and n.prim.name in ("mul", "div"):
                assert c.item() != 1.0, g
            if c is not None and c.size == 1 and n.prim.name in ("add", "sub"):
                assert c.item() != 0.0, g
        assert not (n.prim.name == "convert" and n.inputs[0].aval.dtype == n.outs[0].aval.dtype)
        assert not (n.prim.name in ("reshape", "broadcast_to")
                    and n.inputs[0].aval.shape == n.outs[0].aval.shape)
    # optimize is idempotent
    assert prims(optimize(g)) == prims(g)
    raw = trace_to_graph(grad(loss), (x,), abstract=True, what="test")[0]
    assert_same_results(raw, g, [x])


# ------------------------------------------------------------------ optimized == unoptimized
def _programs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4))
    return [
        (lambda x: jnp.sum(jnp.tanh(x) * 1.0 + 0.0, axis=0), (x,)),
        (lambda x: jitgraph.nn.log_softmax(x) * jitgraph.nn.softmax(x), (x,)),
        (lambda x: jnp.transpose(jnp.transpose(x)) @ jnp.ones((4, 2)), (x,)),
        (grad(lambda x: jnp.sum(jitgraph.nn.logsumexp(x, axis=1))), (x,)),
        (grad(lambda x: jnp.sum(jnp.prod(x, axis=1))), (x,)),
        (grad(lambda x: jnp.sum(grad(lambda y: jnp.sum(jnp.sin(y)) ** 2)(x) ** 2)), (x,)),
        (lambda x: (x[::-1, 1:][None] * 2.0, jnp.max(x, axis=1, keepdims=True) - x), (x,)),
    ]


@pytest.mark.parametrize("k", range(7))
def test_optimized_equals_unoptimized(k):
    fn, args = _programs()[k]
    raw = raw_graph(fn, *args)
    opt = optimize(raw)
    assert len(opt.nodes) <= len(raw.nodes)
    a = run(raw, list(args))
    b = run(opt, list(args))
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)
    # and both equal eager evaluation
    eager = jitgraph.tree_leaves(fn(*args))
    for x, e in zip(b, eager):
        np.testing.assert_allclose(x, e, rtol=1e-13, atol=1e-15)
