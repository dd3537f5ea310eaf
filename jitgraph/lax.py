"""Structured control flow with ``jax.lax``'s names and semantics: ``cond``, ``switch``,
``fori_loop``, ``while_loop``, ``scan``, ``map``, and ``stop_gradient``.

Each call traces the user's functions once, abstractly, on the avals of the operands (values
they close over become operands), and records ONE graph node holding the traced sub-graphs
(``jitgraph.control_flow``). So a 1,000-step scan is one node, differentiates as a scan
and compiles to a loop around one compiled body, unlike a Python loop, which unrolls.

The array operations of ``jax.lax`` (elementwise names such as ``lax.add`` and ``lax.max``,
slices, ``dot_general`` and ``Precision``, convolutions and ``reduce_window``) are
``jitgraph.numpy``'s ``lax_ops`` and ``windows``, re-exported here, so pure-Python JAX
libraries written on ``jax.numpy`` and ``lax`` run unchanged.
"""
from __future__ import annotations

import builtins
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes
from . import numpy as jnp
from .autodiff import eval_graph
from .control_flow import closed, cond_p, optimization_barrier_p, permuted, scan_p, while_p
from .core import Aval, Graph, Tracer, Var, aval_of, bind
from .errors import user_frame, where
from .passes import optimize
from .transforms import describe_fn, leaf_operand, trace_flat
from .tree import TreeDef, returns_arrays, tree_flatten
from .numpy import lax_ops as _lax_ops, windows as _windows
from .numpy.lax_ops import *  # noqa: F401,F403  (lax's array operations)
from .numpy.windows import *  # noqa: F401,F403  (convolutions, window reductions)

__all__ = ["cond", "switch", "fori_loop", "while_loop", "scan", "map", "stop_gradient",
           "optimization_barrier", *_lax_ops.__all__, *_windows.__all__]

stop_gradient = jnp.stop_gradient


@returns_arrays
def optimization_barrier(operand: Any) -> Any:
    """``operand`` (any pytree) unchanged, as ``jax.lax.optimization_barrier``: no graph
    simplification looks through it, and a compiled program computes nothing that reads its
    results before all of its operands exist."""
    leaves, tree = flatten_operands(operand, "an operand of optimization_barrier")
    if not leaves:
        return operand
    return tree.unflatten(list(optimization_barrier_p(*leaves)))


# ------------------------------------------------------------------ tracing user functions
def flatten_operands(tree: Any, what: str) -> tuple[list, TreeDef]:
    """The leaves of ``tree`` as operands (``what`` names them in errors), and its structure."""
    leaves, td = tree_flatten(tree)
    return [leaf_operand(x, what) for x in leaves], td


def trace_user(fun: Callable, in_tree: TreeDef, avals: Sequence[Aval], what: str,
               split: Callable | None = None) -> tuple[Graph, list, list]:
    """Trace ``fun(*in_tree.unflatten(tracers))``: (graph, captured tracers, output trees).
    ``split(out)`` returns the parts of the result to flatten one after another (default: the
    whole result); the graph's outputs are their leaves in that order."""
    trees: list = []

    def flat(*tracers):
        out = fun(*in_tree.unflatten(list(tracers)))
        parts = split(out) if split is not None else (out,)
        leaves = []
        for p in parts:
            pl, pt = tree_flatten(p)
            trees.append(pt)
            leaves += [leaf_operand(x, f"the output of {what}") for x in pl]
        return leaves
    graph, caps = trace_flat(flat, list(avals), what)
    return graph, caps, trees


def _union(cap_lists: Sequence[list]) -> list:
    """Every captured tracer once, in first-seen order."""
    caps: list = []
    for cs in cap_lists:
        for c in cs:
            if not any(c is d for d in caps):
                caps.append(c)
    return caps


def _with_captures(g: Graph, n_args: int, own: list, caps: list) -> Graph:
    """``g`` (inputs: arguments, then its own captures) taking the arguments, then ``caps``."""
    pos = {id(c): v for c, v in zip(own, g.inputs[n_args:])}
    ins = list(g.inputs[:n_args]) + [pos.get(id(c)) or Var(c.aval) for c in caps]
    return Graph(ins, g.nodes, g.outputs, g.consts)


def _fmt(avals) -> str:
    return "(" + ", ".join(repr(a) for a in avals) + ")"


def _cast_outputs(g: Graph, out_dtypes: Sequence, what: str) -> Graph:
    """``g`` with its outputs converted to ``out_dtypes`` (a weakly typed Python scalar
    result takes the type of the value it stands for, as in JAX)."""
    if all(o.aval.dtype == d for o, d in zip(g.outputs, out_dtypes)):
        return g
    return closed(lambda *a: [o if o.dtype == d else jnp.astype(o, d)
                              for o, d in zip(eval_graph(g, a), out_dtypes)],
                  [v.aval for v in g.inputs], what)


# ------------------------------------------------------------------ cond / switch
def _check_index(x: Any, what: str, site: str) -> Any:
    x = leaf_operand(x, what)
    a = aval_of(x)
    if a.shape != ():
        raise TypeError(f"{what} must be a scalar, got shape {a.shape} (at {site}); reduce it "
                        "first (e.g. jnp.all / jnp.any), or use jnp.where to select per element")
    if not dtypes.is_integer_or_bool(a.dtype):
        raise TypeError(f"{what} must be a boolean or integer scalar, got {a.dtype} (at {site}); "
                        "compare it first (e.g. x > 0)")
    return x


@returns_arrays
def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[clip(index, 0, len(branches) - 1)](*operands)``, as ``jax.lax.switch``:
    every branch is traced; only the selected one runs."""
    site = where(user_frame(2))
    return _switch(index, list(branches), operands, site, "switch")


@returns_arrays
def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands) if pred else false_fun(*operands)``, as ``jax.lax.cond``: both
    functions are traced (their outputs must have the same structure, shapes and dtypes);
    only the selected one runs, and gradients flow through it."""
    site = where(user_frame(2))
    pred = _check_index(pred, "cond's predicate", site)
    if aval_of(pred).dtype != np.bool_:
        pred = pred != 0
    return _switch(jnp.astype(pred, jnp.int32), [false_fun, true_fun], operands, site, "cond")


def _switch(index, branches: list, operands, site: str, what: str) -> Any:
    if not branches:
        raise ValueError(f"{what} needs at least one branch (at {site})")
    for b in branches:
        if not callable(b):
            raise TypeError(f"{what}: branches must be callables, got {type(b).__name__} "
                            f"(at {site})")
    index = _check_index(index, f"{what}'s index", site)
    leaves, in_tree = flatten_operands(tuple(operands), f"an operand of {what}")
    avals = [aval_of(x) for x in leaves]
    names = ["false_fun", "true_fun"] if what == "cond" else \
        [f"branches[{i}]" for i in range(len(branches))]
    traced = [trace_user(b, in_tree, avals, f"{what} {nm} {describe_fn(b)}")
              for b, nm in zip(branches, names)]
    first_g, _, (first_t,) = traced[0]
    desc = lambda i: f"{names[i]} ({describe_fn(branches[i])})"
    out_dtypes = []
    shown = range(len(branches))[::-1] if what == "cond" else range(len(branches))
    for i, (g, _, (t,)) in enumerate(traced[1:], 1):
        if t != first_t:
            a, b = (i, 0) if what == "cond" else (0, i)
            raise TypeError(f"{what}: {desc(a)} and {desc(b)} must return the same pytree "
                            f"structure, got {traced[a][2][0]} and {traced[b][2][0]} (at {site})")
    for j, o in enumerate(first_g.outputs):
        outs = [g.outputs[j].aval for g, _, _ in traced]
        strong = {a.dtype for a in outs if not a.weak}
        if len({a.shape for a in outs}) > 1 or len(strong) > 1:
            raise TypeError(
                f"{what}: {' and '.join(names[i] for i in shown)} output must have identical "
                "types, got "
                + "; ".join(f"{desc(i)}: {_fmt([v.aval for v in traced[i][0].outputs])}"
                            for i in shown)
                + f" (output leaf {j} differs; at {site}). Make the branches return arrays of "
                  "the same shapes and dtypes (e.g. with .astype or jnp.broadcast_to).")
        out_dtypes.append(strong.pop() if strong else np.result_type(*[a.dtype for a in outs]))
    caps = _union([c for _, c, _ in traced])
    graphs = tuple(_cast_outputs(_with_captures(g, len(leaves), c, caps), out_dtypes,
                                 f"{what} branch")
                   for g, c, _ in traced)
    graphs = tuple(optimize(g) for g in graphs)
    outs = bind(cond_p, index, *leaves, *caps, _branches=graphs,
                name=f"{what} ({', '.join(desc(i) for i in range(len(branches)))})")
    return first_t.unflatten(list(outs))


# ------------------------------------------------------------------ loops
def _loop_body(fun: Callable, init_leaves: list, init_tree: TreeDef, extra_avals: list,
               in_tree: TreeDef, what: str, site: str, split: Callable):
    """Trace a loop body whose first ``len(init_leaves)`` outputs are the new carry, which
    must match the carry it got. A carry started from a Python scalar takes the dtype the
    body gives it (as JAX's weak types do); a Python scalar the body returns takes the
    carry's. Returns (graph, captured, output trees, carry leaves)."""
    for attempt in range(2):
        avals = [aval_of(x) for x in init_leaves] + extra_avals
        g, caps, trees = trace_user(fun, in_tree, avals, what, split)
        if trees[0] != init_tree:
            raise TypeError(f"{what} must return a carry with the same pytree structure as its "
                            f"input carry: got {init_tree} in and {trees[0]} out (at {site})")
        nk = len(init_leaves)
        a_in = [aval_of(x) for x in init_leaves]
        a_out = [v.aval for v in g.outputs[:nk]]
        retry = False
        for k, (a, b) in enumerate(zip(a_in, a_out)):
            if a.shape != b.shape or (a.dtype != b.dtype and not a.weak and not b.weak):
                raise TypeError(
                    f"{what}: the carry must keep its shapes and dtypes from one iteration to "
                    f"the next, but carry leaf {k} is {a} on input and {b} on output (input "
                    f"carry {_fmt(a_in)}, output carry {_fmt(a_out)}; at {site}). Make the "
                    "body return a carry of the same types, e.g. with .astype(...) or by "
                    "starting the carry at the right shape")
            if a.dtype != b.dtype and a.weak and not b.weak:
                init_leaves[k] = jnp.astype(init_leaves[k], b.dtype)
                retry = True
        if not retry:
            break
    carry_dtypes = [aval_of(x).dtype for x in init_leaves]
    rest = [v.aval.dtype for v in g.outputs[nk:]]
    return _cast_outputs(g, carry_dtypes + rest, what), caps, trees, init_leaves


@returns_arrays
def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int = 1) -> tuple[Any, Any]:
    """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each leading slice ``x`` of ``xs``;
    returns ``(final carry, stacked ys)``. ``xs`` may be None with ``length`` given. One graph
    node: the body is traced and compiled once, whatever the length."""
    site = where(user_frame(2))
    return _scan(f, init, xs, length, reverse, site, f"scan body {describe_fn(f)}")


def _scan(f, init, xs, length, reverse, site, what):
    init_leaves, init_tree = flatten_operands(init, f"the initial carry of {what}")
    xs_leaves, xs_tree = flatten_operands(xs, f"xs of {what}")
    lengths = set()
    for x in xs_leaves:
        a = aval_of(x)
        if a.ndim == 0:
            raise ValueError(f"{what}: every leaf of xs needs a leading axis to scan over, got "
                             f"a scalar (at {site})")
        lengths.add(a.shape[0])
    if length is not None:
        length = int(length)
        lengths.add(length)
    if len(lengths) > 1:
        raise ValueError(f"{what}: scan got inconsistent lengths: the leading axes of xs "
                         f"{sorted(aval_of(x).shape[0] for x in xs_leaves)}"
                         + (f" and length={length}" if length is not None else "")
                         + f" must all be equal (at {site})")
    if not lengths:
        raise ValueError(f"{what}: scan got no xs to scan over; pass length=... (at {site})")
    n = lengths.pop()
    x_avals = [Aval(aval_of(x).shape[1:], aval_of(x).dtype) for x in xs_leaves]
    in_tree = tree_flatten((init, xs))[1]

    def split(out):
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(f"{what} must return a pair (carry, y), got "
                            f"{type(out).__name__} (at {site})")
        return out
    g, caps, trees, init_leaves = _loop_body(f, init_leaves, init_tree, x_avals, in_tree, what,
                                             site, split)
    nk, nx = len(init_leaves), len(xs_leaves)
    nin = nk + nx
    body = permuted(g, list(range(nin, len(g.inputs))) + list(range(nin)),
                    range(len(g.outputs)))
    outs = bind(scan_p, *caps, *init_leaves, *xs_leaves, _body=optimize(body),
                num_consts=len(caps), num_carry=nk, length=n, reverse=bool(reverse), name=what)
    outs = list(outs)
    return init_tree.unflatten(outs[:nk]), trees[1].unflatten(outs[nk:])


@returns_arrays
def map(f: Callable, xs: Any) -> Any:
    """``jax.lax.map``: ``f`` applied to each leading slice of ``xs``, results stacked (a scan
    with no carry)."""
    site = where(user_frame(2))
    return _scan(lambda c, x: ((), f(x)), (), xs, None, False, site,
                 f"map function {describe_fn(f)}")[1]


@returns_arrays
def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.while_loop``: ``while cond_fun(val): val = body_fun(val)``. Differentiable in
    forward mode only (use scan or fori_loop with static bounds for reverse mode)."""
    site = where(user_frame(2))
    return _while(cond_fun, body_fun, init_val, site,
                  f"while_loop (body_fun {describe_fn(body_fun)})")


def _while(cond_fun, body_fun, init_val, site, what):
    leaves, tree = flatten_operands(init_val, f"the initial value of {what}")
    in_tree = tree_flatten((init_val,))[1]
    body, bcaps, _, leaves = _loop_body(body_fun, leaves, tree, [], in_tree, what, site,
                                        lambda out: (out,))
    avals = [aval_of(x) for x in leaves]
    cg, ccaps, ctrees = trace_user(cond_fun, in_tree, avals,
                                    f"while_loop cond_fun {describe_fn(cond_fun)}")
    if len(cg.outputs) != 1 or cg.outputs[0].aval.shape != () or \
            cg.outputs[0].aval.dtype != np.bool_:
        raise TypeError(f"while_loop: cond_fun ({describe_fn(cond_fun)}) must return a "
                        "boolean scalar, but got output type(s) "
                        f"{_fmt([v.aval for v in cg.outputs])} (at {site})")
    nk = len(leaves)
    cgraph = optimize(permuted(cg, list(range(nk, len(cg.inputs))) + list(range(nk)), [0]))
    bgraph = optimize(permuted(body, list(range(nk, len(body.inputs))) + list(range(nk)),
                               range(nk)))
    outs = bind(while_p, *ccaps, *bcaps, *leaves, _cond=cgraph, _body=bgraph,
                n_cc=len(ccaps), n_bc=len(bcaps), name=what)
    return tree.unflatten(list(outs))


def _static_int(x) -> bool:
    return not isinstance(x, Tracer) and isinstance(x, (int, np.integer)) and \
        not isinstance(x, bool)


@returns_arrays
def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.fori_loop``: ``for i in range(lower, upper): val = body_fun(i, val)``. With
    Python int bounds it is a scan (reverse-mode differentiable); with traced bounds a
    while_loop (forward mode only)."""
    site = where(user_frame(2))
    what = f"fori_loop body_fun {describe_fn(body_fun)}"
    if _static_int(lower) and _static_int(upper):
        lo, hi = int(lower), int(upper)
        # Python int bounds give a weakly typed index, as JAX's int32 index behaves beside
        # float32 values: ``c * 1.1 + i`` stays float32
        start = np.asarray(lo, np.result_type(np.asarray(lower).dtype, np.asarray(upper).dtype)) \
            if isinstance(lower, np.integer) or isinstance(upper, np.integer) else lo

        def step(carry, _):
            i, v = carry
            return (i + 1, body_fun(i, v)), None
        (_, val), _ = _scan(step, (start, init_val), None, builtins.max(hi - lo, 0),
                            False, site, what)
        return val
    lower = _check_index(lower, "fori_loop's lower bound", site)
    upper = _check_index(upper, "fori_loop's upper bound", site)
    dt = np.result_type(aval_of(lower).dtype, aval_of(upper).dtype)
    lower, upper = jnp.astype(lower, dt), jnp.astype(upper, dt)

    def body(c):
        i, hi, v = c
        return i + 1, hi, body_fun(i, v)
    return _while(lambda c: c[0] < c[1], body, (lower, upper, init_val), site,
                  f"fori_loop with traced bounds ({what})")[2]
