"""rewrite.py: the graph index, the pattern matcher (keyed by primitive objects), the rebuilder,
and FusedOp records (conditions, the cost-model hook, enabling per context and per thread);
each rewritten graph computes what the original does."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.core import PRIMITIVES, Aval, Graph, Node, Primitive
from jitgraph.interpreter import run
from jitgraph.rewrite import (FUSED_OPS, FusedOp, GraphIndex, Rebuilder, Rule, fused_ops,
                              is_swap, match, maybe, op, rewritten, var)
from jitgraph.transforms import trace_to_graph

exp_p, log_p, mul_p, add_p = (PRIMITIVES[k] for k in ("exp", "log", "mul", "add"))
reshape_p, stop_p, sub_p = PRIMITIVES["reshape"], PRIMITIVES["stop_gradient"], PRIMITIVES["sub"]


def graph(fn, *args) -> Graph:
    return trace_to_graph(fn, args, abstract=True, what="test")[0]


def producer_of(g: Graph, prim: Primitive) -> Node:
    return next(n for n in g.nodes if n.prim is prim)


X = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


def test_index_producers_uses_and_constants():
    g = graph(lambda x: [jnp.exp(x) * 2.0 + jnp.exp(x) * 2.0, jnp.log(x * x)], X)
    ix = GraphIndex(g)
    for n in g.nodes:
        assert all(ix.producer[o] is n for o in n.outs)
    x = g.inputs[0]
    assert ix.uses(x) == sum(n.inputs.count(x) for n in g.nodes)
    assert ix.uses(g.outputs[0]) >= 1000          # read outside the graph
    consts = [n.inputs[1] for n in g.nodes if n.prim is mul_p and n.inputs[1] in g.consts]
    assert consts and ix.scalar(consts[0]) == 2.0 and ix.const(consts[0]) is not None
    assert ix.scalar(x) is None and ix.const(x) is None
    mul = producer_of(g, mul_p)
    assert ix.node(mul.out, mul_p) is mul and ix.node(mul.out, add_p) is None
    assert ix.node(mul.out, mul_p, uses=5) is None


def test_matcher_binds_names_and_checks_uses():
    g = graph(lambda x: [jnp.log(jnp.exp(x - 1.0))], X)
    ix = GraphIndex(g)
    pat = op(log_p, op(exp_p, op(sub_p, var("x"), var("c")), name="e", uses=1))
    hit = match(pat, ix, g.outputs[0])
    assert hit["x"] is g.inputs[0] and hit["c"] in g.consts
    assert hit["e_node"].prim is exp_p
    assert match(op(log_p, op(exp_p, var(), uses=2)), ix, g.outputs[0]) is None
    assert match(op(exp_p, var()), ix, g.outputs[0]) is None


def test_matcher_is_keyed_by_primitive_objects_not_names():
    """A primitive of another module that happens to be named "exp" is not ``exp``."""
    g = graph(lambda x: [jnp.exp(x)], X)
    impostor = Primitive("exp", kind="elementwise", abstract_eval=lambda a: a, impl=np.exp)
    ix = GraphIndex(g)
    assert match(op(exp_p, var()), ix, g.outputs[0]) is not None
    assert match(op(impostor, var()), ix, g.outputs[0]) is None


def test_matcher_repeated_names_commutative_and_maybe():
    g = graph(lambda x, y: [x * jnp.exp(x), y * jnp.exp(x),
                            jnp.exp(jnp.stop_gradient(x)) + 1.0], X, X + 1)
    ix = GraphIndex(g)
    same = op(mul_p, var("a"), op(exp_p, var("a")), commutative=True)
    assert match(same, ix, g.outputs[0])["a"] is g.inputs[0]
    assert match(same, ix, g.outputs[1]) is None        # y * exp(x): two different vars
    ordered = op(mul_p, op(exp_p, var("a")), var("a"))
    assert match(ordered, ix, g.outputs[0]) is None     # order matters unless commutative
    through = op(add_p, op(exp_p, maybe(stop_p, var("a"))), var("one"))
    assert match(through, ix, g.outputs[2])["a"] is g.inputs[0]
    assert match(op(exp_p, maybe(stop_p, var("a"))), ix,
                 producer_of(g, exp_p).out)["a"] is g.inputs[0]


def test_is_swap():
    g = graph(lambda x: [jnp.swapaxes(x, -1, -2), jnp.transpose(x, (1, 0, 2))],
              np.zeros((2, 3, 4)))
    a, b = g.nodes
    assert is_swap(a) and not is_swap(b)


def test_rebuilder_emits_and_keeps():
    g = graph(lambda x: [jnp.exp(x)], X)
    b = Rebuilder(g)
    x = g.inputs[0]
    two = b.const(2.0, Aval((), np.dtype(np.float64)))
    y = b.emit(mul_p, [x, two])
    b.add(Node(exp_p, [y], {}, [g.outputs[0]]))
    out = b.graph()
    assert b.producer[y].prim is mul_p and [n.prim for n in out.nodes] == [mul_p, exp_p]
    np.testing.assert_allclose(run(out, [X])[0], np.exp(2 * X))


def _log_exp_op(**kw) -> FusedOp:
    """A toy fused op: ``log(exp(x))`` is ``x`` (a rule with nothing to lower)."""
    def find(ix, n):
        return match(op(log_p, op(exp_p, var("x"), uses=1)), ix, n.out)

    def replace(b, n, hit):
        b.add(Node(reshape_p, [hit["x"]], dict(shape=n.out.aval.shape), [n.out], n.source))
    return FusedOp("log_exp", primitives=(), rules=(Rule((log_p,), find, replace),), **kw)


def test_fused_op_rewrites_and_keeps_the_numbers():
    g = graph(lambda x: [jnp.log(jnp.exp(x)) * 3.0], X)
    out = _log_exp_op().apply(g)
    assert exp_p not in [n.prim for n in out.nodes] and log_p not in [n.prim for n in out.nodes]
    np.testing.assert_allclose(run(out, [X])[0], run(g, [X])[0])


def test_fused_op_conditions_and_cost_model_hook():
    g = graph(lambda x: [jnp.log(jnp.exp(x))], X)
    seen = []

    def wins(hit):
        seen.append(hit["x"].aval.shape)
        return hit["x"].aval.size > 100      # pays only on big arrays: not this one
    assert _log_exp_op(wins=wins).apply(g) is g
    assert seen == [(2, 3)]                  # the hook saw the matched shapes
    assert _log_exp_op(conditions=(lambda hit: False,)).apply(g) is g
    assert _log_exp_op(wins=lambda hit: True).apply(g) is not g
    # a shared intermediate (exp used twice) is no match
    g2 = graph(lambda x: (lambda e: [jnp.log(e), e])(jnp.exp(x)), X)
    assert _log_exp_op().apply(g2) is g2


def test_disabled_is_per_context_and_nests():
    fused = _log_exp_op()
    assert fused.enabled
    with fused.disabled():
        assert not fused.enabled
        with fused.disabled():
            assert not fused.enabled
        assert not fused.enabled
    assert fused.enabled


def test_disabled_in_one_thread_leaves_another_enabled(model_fuses_attention):
    """``unfused()`` is a context variable: a thread inside it does not turn fusion off for a
    thread rewriting beside it, and the setting ends with the block."""
    att = FUSED_OPS["attention"]
    g, _ = _attention_graph()
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def fused_kinds(graph):
        return sum(n.prim is att.primitives[0] for n in graph.nodes)

    def unfused_thread():
        with jitgraph.attention.unfused():
            seen["a_inside"] = (att.enabled, fused_kinds(rewritten(g)))
            inside.set()
            checked.wait(10)
            seen["a_still"] = (att.enabled, fused_kinds(rewritten(g)))
        seen["a_after"] = (att.enabled, fused_kinds(rewritten(g)))

    def other_thread():
        inside.wait(10)
        seen["b"] = (att.enabled, fused_kinds(rewritten(g)))
        checked.set()
    threads = [threading.Thread(target=unfused_thread), threading.Thread(target=other_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"a_inside": (False, 0), "b": (True, 1), "a_still": (False, 0),
                    "a_after": (True, 1)}
    assert att.enabled


@pytest.fixture
def model_fuses_attention(monkeypatch):
    """The attention cost model's margin raised so that it fuses the small shapes below by
    itself (no forcing, so a thread of its own, in a fresh context, fuses them too): on the
    CPU the unfused program now wins below 256 MiB of scores, too large for these tests."""
    from jitgraph.fused import attention
    monkeypatch.setattr(attention, "MARGIN", 1e9)


def _attention_graph():
    """Attention of 64 short heads (fused where ``model_fuses_attention`` is in use)."""
    def att(q, k, v):
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * 0.5
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        return [jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), v)]
    q = np.random.default_rng(0).standard_normal((64, 16, 16))
    return graph(att, q, q, q), q


def test_rewritten_runs_the_registered_records_unless_disabled(model_fuses_attention):
    assert [f.name for f in fused_ops()][:2] == ["attention", "linear_ce"]
    g, q = _attention_graph()
    att_p = FUSED_OPS["attention"].primitives[0]
    fused = rewritten(g)
    assert any(n.prim is att_p for n in fused.nodes)
    np.testing.assert_allclose(run(fused, [q, q, q])[0], run(g, [q, q, q])[0], rtol=1e-12)
    with jitgraph.attention.unfused():
        assert rewritten(g) is g
    with jitgraph.linear_ce.unfused():
        assert any(n.prim is att_p for n in rewritten(g).nodes)


def test_register_refuses_a_second_record_of_one_name():
    from jitgraph.rewrite import register_fused_op
    with pytest.raises(ValueError, match="attention"):
        register_fused_op(FusedOp("attention", primitives=(), rules=()))


def test_records_declare_their_lowerings_and_the_compiler_installs_them():
    from jitgraph.compiler.host import DEVICE_CALLS, HOST_LOWERINGS
    for fused in fused_ops():
        for prim in fused.lowerings.get("host", {}):
            assert prim in fused.primitives and prim in HOST_LOWERINGS
        for prim, call in fused.lowerings.get("cuda", {}).items():
            assert DEVICE_CALLS[prim] is call
    assert FUSED_OPS["linear_ce"].merge is not None


def test_the_driver_offers_what_records_declare():
    """Generated CUDA code calls ``D.attention(*spec)``: the attention record's ``driver``
    entry, bound to the driver; other names stay missing attributes."""
    from jitgraph.cuda_driver import Driver
    d = Driver()
    call = d.attention
    assert call.func is FUSED_OPS["attention"].driver["attention"] and call.args == (d,)
    assert not hasattr(d, "no_such_kernel") and not hasattr(d, "_private")


def test_jit_traces_again_where_a_fused_op_is_disabled_or_forced(model_fuses_attention):
    """A jit function keeps one program per set of fused ops disabled or forced in the calling
    context: inside ``unfused()`` a function compiled with attention fused runs the unfused
    program (traced once), and outside it the fused program is served again without a trace,
    by the fast path too."""
    traces = []

    @jitgraph.jit
    def att(q, k, v):
        traces.append(1)
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * 0.5
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), v)

    att_p = FUSED_OPS["attention"].primitives[0]
    q = np.random.default_rng(1).standard_normal((64, 16, 16))
    fused = att(q, q, q)
    assert any(n.prim is att_p for n in att.lower(q, q, q).graph.nodes)
    with jitgraph.attention.unfused():
        assert not any(n.prim is att_p for n in att.lower(q, q, q).graph.nodes)
        plain = att(q, q, q)
        att(q, q, q)
        assert len(traces) == 2
        with jitgraph.attention.always_fused():          # nests: a third state
            att(q, q, q)
        assert len(traces) == 3
    for _ in range(3):                                   # the fused program again, no trace
        np.testing.assert_array_equal(att(q, q, q), fused)
    assert len(traces) == 3
    np.testing.assert_allclose(plain, fused, rtol=1e-10, atol=1e-12)
    with jitgraph.attention.unfused():                   # the unfused program, kept
        np.testing.assert_array_equal(att(q, q, q), plain)
    assert len(traces) == 3
