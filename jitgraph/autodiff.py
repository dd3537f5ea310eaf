"""Automatic differentiation by graph expansion.

``build_vjp`` turns a graph into one that also computes cotangents of its inputs: it replays the
forward nodes into a new trace, then walks them in reverse calling each primitive's VJP rule on
traced values, so the backward pass is itself a graph of primitives (and can be differentiated
again). ``build_jvp`` does the same forward, with each primitive's JVP rule.

``eager_vjp`` is reverse mode for un-jitted transforms, whose forward trace carries values: the
same VJP rules run on those values (or on the enclosing trace's tracers, for grad of grad), and
a program that records the same graph again reuses a cached, optimized backward graph.
``eager_hvp`` does the same for Hessian-vector products: one cached graph per structure.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from . import dtypes
from .compile_phases import timed
from .core import (KEEP_SOURCES, Aval, EvalTrace, Graph, Node, Trace, Tracer, Var, aval_of,
                   bind, params_key, top_trace)
from .errors import user_frame, where
from .interpreter import Plan, run_plan
from .interpreter import run as interpret
from .passes import optimize
from .rewrite import rewritten
from . import numpy as jnp


def eval_graph(graph: Graph, args: Sequence[Any]) -> list:
    """Evaluate ``graph`` with ``bind``: on tracers this inlines the graph into the caller's trace,
    on arrays it runs the reference interpreter."""
    if not any(isinstance(a, Tracer) for a in args):
        return interpret(graph, list(args))
    env: dict = dict(zip(graph.inputs, args))
    _replay(graph, top_trace(args), env)
    return [env[v] for v in graph.outputs]


def _const_tracers(graph: Graph, trace: Trace, env: dict) -> None:
    """Constants enter the new trace as tracers, so rules can read ``.aval`` on every operand
    (those ``env`` has already are left as they are)."""
    for v, c in graph.consts.items():
        if v not in env:
            cv = trace.const_var(c)
            env[v] = Tracer(trace, cv, None if trace.abstract else c)


def _replay(graph: Graph, trace: Trace, env: dict) -> None:
    """Re-emit ``graph``'s nodes into ``trace`` (``env`` maps its inputs to tracers; nodes
    whose outputs it maps already are not emitted again)."""
    _const_tracers(graph, trace, env)
    for n in graph.nodes:
        if n.outs[0] in env:
            continue
        outs = bind(n.prim, *[env[v] for v in n.inputs], **n.params)
        if not n.prim.multiple_results:
            outs = (outs,)
        if KEEP_SOURCES[0] and n.source is not None:
            _keep_source(trace, outs[0], n.source)
        for v, o in zip(n.outs, outs):
            env[v] = o


def _keep_source(trace: Trace, out: Any, source) -> None:
    """The node just emitted for ``out`` gets the replayed node's line (``keeping_sources``)."""
    if type(out) is Tracer and out.trace is trace and trace.nodes \
            and trace.nodes[-1].outs[0] is out.gvar:
        trace.nodes[-1].source = source


def _node_location(n: Node) -> str:
    if n.source is not None:
        return "node created at %s:%s" % n.source[:2]
    return f"differentiated at {where(user_frame(3))}"


def _differentiable(aval: Aval) -> bool:
    return dtypes.is_inexact(aval.dtype)


def _fit(ct, aval: Aval, node: Node):
    """Check a rule's result against the value it belongs to; cast dtype if needed."""
    if tuple(ct.shape) != aval.shape:
        raise RuntimeError(f"internal error: the derivative rule of {node.prim.name} produced "
                           f"shape {tuple(ct.shape)} for an operand of shape {aval.shape}")
    return ct if ct.dtype == aval.dtype else jnp.astype(ct, aval.dtype)


def _active_vars(graph: Graph, wrt: Sequence[int]) -> set:
    """The vars that carry derivatives of ``inputs[wrt]``, less the shifts of hand-written
    logsumexp / log-softmax (``_invariant_shifts``), whose derivative is exactly zero."""
    active = {graph.inputs[i] for i in wrt}
    has_exp = False
    for n in graph.nodes:
        if n.prim.differentiable and any(v in active for v in n.inputs):
            active.update(o for o in n.outs if _differentiable(o.aval))
            has_exp = has_exp or n.prim.name == "exp"
    if has_exp:
        active.difference_update(_invariant_shifts(graph))
    return active


def _invariant_shifts(graph: Graph) -> list:
    """Vars ``m`` that a graph only uses as the shift of ``m + log(sum(exp(x - m)))`` or
    ``(x - m) - log(sum(exp(x - m)))`` over the axes ``m`` is broadcast along (the max
    trick, written out by hand). Both results do not depend on ``m``, so its derivative is
    exactly zero, as if the user had written ``stop_gradient(max(x))``: the backward pass
    then skips ``max``'s derivative (the ties of each row), which costs a comparison per
    element in two more passes over every row and cancels anyway."""
    uses: dict = {}
    for n in graph.nodes:
        for v in n.inputs:
            uses.setdefault(v, []).append(n)
    outputs = set(graph.outputs)

    def only_use(v, name):
        us = uses.get(v, [])
        return us[0] if len(us) == 1 and us[0].prim.name == name and v not in outputs else None

    found = []
    for f in graph.nodes:
        if f.prim.name != "sub" or len(f.inputs) != 2:
            continue
        x, m = f.inputs
        xs, ms = x.aval.shape, m.aval.shape
        if len(ms) != len(xs) or m in outputs or f.outs[0] in outputs \
                or not _differentiable(m.aval):
            continue
        # log(sum(exp(x - m))) over the axes m is broadcast along, in m's shape
        g = next((u for u in uses.get(f.outs[0], []) if u.prim.name == "exp"), None)
        h = g and only_use(g.outs[0], "reduce_sum")
        if h is None:
            continue
        axes = set(h.params["axes"])
        if any((ms[a] != 1) if a in axes else (ms[a] != xs[a]) for a in range(len(xs))):
            continue
        r = h.outs[0]
        if r.aval.shape != ms:
            rs = only_use(r, "reshape")
            if rs is None or rs.outs[0].aval.shape != ms:
                continue
            r = rs.outs[0]
        lg = only_use(r, "log")
        if lg is None:
            continue
        j = lg.outs[0]
        # m's other uses: m + j; x - m's other uses: (x - m) - j; j's uses: only those
        rest_m = [u for u in uses.get(m, []) if u is not f]
        rest_f = [u for u in uses.get(f.outs[0], []) if u is not g]
        ok = bool(rest_m or rest_f) and j not in outputs
        ok = ok and all(u.prim.name == "add" and set(u.inputs) == {m, j} for u in rest_m)
        ok = ok and all(u.prim.name == "sub" and u.inputs == [f.outs[0], j] for u in rest_f)
        ok = ok and all(u in rest_m or u in rest_f for u in uses.get(j, []))
        if ok:
            found.append(m)
    return found


def _backward(graph: Graph, env: dict, active: set, cts_in: Sequence[Any]) -> dict:
    """Walk ``graph``'s nodes in reverse calling each VJP rule on the values in ``env`` (tracers
    of the current trace); ``cts_in`` holds one output cotangent each (``None``: zero).
    Returns the cotangents of the active vars that reached the graph's inputs."""
    ct_env: dict = {}

    def accumulate(v, ct):
        if ct is None or v not in active:
            return
        prev = ct_env.get(v)
        ct_env[v] = ct if prev is None else prev + ct

    for o, ct in zip(graph.outputs, cts_in):
        if ct is not None and _differentiable(o.aval):
            accumulate(o, jnp.astype(jnp.asarray(ct), o.aval.dtype) if not isinstance(ct, Tracer) else ct)
    for n in reversed(graph.nodes):
        cts = [ct_env.pop(o, None) for o in n.outs]
        if all(c is None for c in cts):
            continue
        if n.prim.vjp is None:
            raise NotImplementedError(
                f"{n.prim.name} has no VJP rule, so it cannot be differentiated in reverse "
                f"mode ({_node_location(n)})")
        ins = [env[v] for v in n.inputs]
        outs = [env[o] for o in n.outs]
        if n.prim.multiple_results:
            res = n.prim.vjp(cts, outs, *ins, **n.params)
        else:
            res = n.prim.vjp(cts[0], outs[0], *ins, **n.params)
        for v, r in zip(n.inputs, res):
            if r is not None and v in active:
                accumulate(v, _fit(r, v.aval, n))
    return ct_env


def _input_grads(graph: Graph, wrt: Sequence[int], ct_env: dict) -> list:
    grads = []
    for i in wrt:
        v = graph.inputs[i]
        g = ct_env.get(v)
        grads.append(g if g is not None else np.zeros(v.aval.shape, v.aval.dtype))
    return grads


@timed("autodiff")
def build_vjp(graph: Graph, wrt: Sequence[int], ct_values: Sequence[Any] | None = None,
              keep_outputs: bool = False) -> Graph:
    """Graph of ``(*outputs if keep_outputs, *cotangents of inputs[wrt])``.

    Inputs are the forward graph's inputs, then one cotangent per output unless ``ct_values``
    fixes them (``None`` entries mean a zero cotangent, e.g. for auxiliary outputs).
    """
    graph = rewritten(graph)
    active = _active_vars(graph, wrt)
    with Trace(abstract=True, what="the backward pass") as t:
        env: dict = {v: t.new_input(v.aval) for v in graph.inputs}
        if ct_values is None:
            cts_in = [t.new_input(Aval(o.aval.shape, o.aval.dtype)) for o in graph.outputs]
        else:   # constants enter as traced values, so the rules build graph nodes, not arrays
            cts_in = [None if c is None or isinstance(c, Tracer) else Tracer(t, t.const_var(c))
                      for c in ct_values]
        _replay(graph, t, env)
        grads = _input_grads(graph, wrt, _backward(graph, env, active, cts_in))
        outs = [env[o] for o in graph.outputs] if keep_outputs else []
        return t.to_graph(outs + grads)


def vjp_values(graph: Graph, values: dict, wrt: Sequence[int],
               ct_values: Sequence[Any]) -> list[np.ndarray]:
    """Cotangents of ``graph.inputs[wrt]`` as arrays, computed eagerly: the VJP rules run on the
    forward pass's concrete ``values`` (one per var of ``graph``) and evaluate at once, with no
    backward graph to build, simplify and interpret. Outside any transformation this gives
    what ``eval_graph(build_vjp(graph, wrt, ct_values), ...)`` gives, at a fraction of the cost."""
    active = _active_vars(graph, wrt)
    with EvalTrace() as t:
        env = {v: Tracer(t, v, x) for v, x in values.items()}
        cts_in = [None if c is None else Tracer(t, Var(o.aval.strong()), np.asarray(c, o.aval.dtype))
                  for c, o in zip(ct_values, graph.outputs)]
        grads = _input_grads(graph, wrt, _backward(graph, env, active, cts_in))
    return [g.val if isinstance(g, Tracer) else g for g in grads]


# ------------------------------------------------------------------ eager backward, cached
# Un-jitted grad traces the user's function on every call (its Python control flow may take
# another path each time), but a program usually records the same graph call after call. A
# backward graph depends only on the forward graph's *structure* -- primitives, parameters,
# wiring, shapes and dtypes -- when every forward value it reads (constants included) is one of
# its inputs. So the second time a structure is seen, its backward graph is built, optimized
# once and kept; later calls interpret it on the forward values, which skips the derivative
# rules' Python (promotion, shape rules, tracers) and runs fewer, simplified operations.
_BACKWARD_CACHE: dict = {}     # structure key -> (graph, forward-var positions) | None (seen once)
BACKWARD_CACHE_SIZE = 512


def structure_key(graph: Graph, wrt: Sequence[int], ct_values: Sequence[Any],
                  seeded: bool = False):
    """(key, forward vars in key order), or (None, None) if a node's parameters are not plain
    values (then the graph is not cached: e.g. a custom_vjp call that closes over traced
    values, whose graphs are not kept).
    ``seeded``: the cotangents that are not None are all 1 (``grad``'s scalar seed)."""
    index: dict = {}
    for v in graph.inputs:
        index[v] = len(index)
    for v in graph.consts:
        index[v] = len(index)
    parts = [tuple(wrt), tuple([v.aval for v in index]),
             tuple([None if c is None else "one" if seeded else o.aval
                    for c, o in zip(ct_values, graph.outputs)])]     # (as _ct_kind)
    for n in graph.nodes:
        if n.params:
            pk = params_key(n.params)
            if pk is None:
                return None, None
            parts.append((n.prim, pk, *[index[v] for v in n.inputs]))
        else:
            parts.append((n.prim, *[index[v] for v in n.inputs]))
        for o in n.outs:
            index[o] = len(index)
    parts.append(tuple([index[v] for v in graph.outputs]))
    return tuple(parts), list(index)


def _cached(cache: dict, size: int, key, build, now: bool = False):
    """``cache[key]``, an entry ``(graph, positions, Plan(graph))`` from ``build() -> (graph,
    positions)``, built the second time ``key`` is seen (``now``: the first); None before (the
    first sighting is remembered). A cache holding ``size`` keys drops its oldest."""
    hit = cache.get(key, False)
    if hit is False:
        if len(cache) >= size:
            cache.pop(next(iter(cache), None), None)
        cache[key] = hit = None
        if not now:
            return None
    if hit is None:
        g, positions = build()
        hit = cache[key] = (g, positions, Plan(g))
    return hit


def _ct_kind(c, o, seeded: bool):
    """How a cotangent enters a cached backward graph: not at all (None: zero), as the
    constant 1 ("one": ``seeded``, grad's scalar seed, which then folds away), or as an input
    (its aval)."""
    if c is None:
        return None
    return "one" if seeded else o.aval


def build_backward(graph: Graph, order: list, wrt: Sequence[int], ct_values: Sequence[Any],
                   seeded: bool, recompute: bool = False) -> tuple[Graph, list]:
    """Optimized graph ``(*forward values it reads, *cotangents) -> input cotangents``, and the
    positions in ``order`` of the forward values it reads. ``ct_values``: one per output, None
    for a zero cotangent; ``seeded``: the given ones are grad's constant 1. ``recompute``:
    ``order`` names only some of the forward values; the graph computes the others from them.
    The eager VJP caches it; scan's VJP stacks the forward values it reads."""
    active = _active_vars(graph, wrt)
    with Trace(abstract=True, what="the backward pass") as t:
        env = {v: t.new_input(v.aval) for v in order}
        n_fwd = len(order)
        if recompute:
            _replay(graph, t, env)
        cts_in = []
        for c, o in zip(ct_values, graph.outputs):
            kind = _ct_kind(c, o, seeded)
            cts_in.append(None if kind is None else
                          Tracer(t, t.const_var(np.ones((), o.aval.dtype))) if kind == "one"
                          else t.new_input(o.aval.strong()))
        g = t.to_graph(_input_grads(graph, wrt, _backward(graph, env, active, cts_in)))
    g = optimize(g)
    read = set(g.outputs)
    for n in g.nodes:
        read.update(n.inputs)
    keep = [i for i in range(n_fwd) if g.inputs[i] in read]
    g.inputs = [g.inputs[i] for i in keep] + g.inputs[n_fwd:]
    return g, keep


def eager_values(trace: Trace, graph: Graph, call_args: Sequence[Any]) -> dict | None:
    """The value of every var of ``graph`` (traced by ``trace`` from ``call_args``) for
    ``eager_vjp``: ``trace.values`` when it ran on concrete arrays outside any transformation;
    tracers of the enclosing trace, into which the forward nodes are recorded, when it ran
    inside another un-jitted transformation (grad of grad). None under jit or make_graph,
    where values are abstract: there the backward pass is built as a graph."""
    if not trace.concrete:
        return None
    if not any(isinstance(a, Tracer) for a in call_args):
        return trace.values
    outer = top_trace(call_args)
    if _graftable(outer, call_args):
        return _graft(graph, outer, call_args, trace.values)
    env = {v: a if isinstance(a, Tracer) else _const_tracer(outer, a)   # rules read .aval
           for v, a in zip(graph.inputs, call_args)}
    _replay(graph, outer, env)
    return env


def _const_tracer(trace: Trace, value: Any, aval: Aval | None = None) -> Tracer:
    cv = trace.const_var(value, aval)
    return Tracer(trace, cv, trace.values.get(cv))


def _graftable(trace: Trace, args: Sequence[Any]) -> bool:
    """``trace`` records nodes with their values (a plain trace, not abstract) and every
    argument has a value: what ``_graft`` needs."""
    return type(trace) is Trace and not trace.abstract and all(
        type(a) is not Tracer or a.val is not None for a in args)


def _graft(graph: Graph, trace: Trace, args: Sequence[Any], values: dict,
           fresh: bool = False) -> dict:
    """Record ``graph`` applied to ``args`` into ``trace`` as ``_replay`` does, with each
    node's value taken from ``values`` (var -> array, every var of ``graph``) instead of
    computed again, and its avals kept (constants keep theirs, weak or not, as on the first
    order path): the forward values of grad of grad, which the inner trace computed, and a
    cached backward graph's, which ``run_plan`` computes, are computed once, and no shape
    rule runs again. ``fresh``: the nodes get new vars (a cached graph, recorded on every
    call) instead of ``graph``'s own (a trace's graph, recorded once). Returns var -> tracer
    of ``trace`` for every var of ``graph``."""
    env: dict = {}
    tvar: dict = {}
    for v, c in graph.consts.items():
        t = env[v] = _const_tracer(trace, c, v.aval)
        tvar[v] = t.gvar
    for v, a in zip(graph.inputs, args):
        if type(a) is not Tracer:
            a = _const_tracer(trace, a)
        env[v], tvar[v] = a, trace.to_var(a)
    nodes, tvalues = trace.nodes, trace.values
    for n in graph.nodes:
        outs = [Var(o.aval) for o in n.outs] if fresh else n.outs
        nodes.append(Node(n.prim, [tvar[v] for v in n.inputs], n.params, outs))
        for o, t in zip(n.outs, outs):
            x = values[o]
            tvalues[t] = x
            tvar[o] = t
            env[o] = Tracer(trace, t, x)
    return env


@timed("autodiff")
def eager_vjp(graph: Graph, values: dict, wrt: Sequence[int], ct_values: Sequence[Any],
              key=None, seeded: bool = False) -> list:
    """Cotangents of ``graph.inputs[wrt]`` given ``eager_values``, through the structural cache:
    the first time a structure is seen the derivative rules run directly on the values
    (``vjp_values``, or on the enclosing trace's tracers); from the second time, a cached,
    optimized backward graph is evaluated on them. ``key``: ``structure_key``'s result, when
    the caller has it already (a ``vjp_fn`` called many times); ``seeded``: as there."""
    # (eager_values gives tracers for every var, inputs included, or arrays for all)
    nested = any(isinstance(values.get(v), Tracer) for v in graph.inputs) or \
        any(isinstance(c, Tracer) for c in ct_values)
    key, order = key or structure_key(graph, wrt, ct_values, seeded)
    hit = None if key is None else _cached(
        _BACKWARD_CACHE, BACKWARD_CACHE_SIZE, key,
        lambda: build_backward(graph, order, wrt, ct_values, seeded))
    if not hit:
        if not nested:
            return vjp_values(graph, values, wrt, ct_values)
        cts_in = [c if c is None or isinstance(c, Tracer) else np.asarray(c, o.aval.dtype)
                  for c, o in zip(ct_values, graph.outputs)]
        return _input_grads(graph, wrt, _backward(graph, values, _active_vars(graph, wrt), cts_in))
    g, keep, plan = hit
    args = [values[order[i]] for i in keep]
    if not seeded:
        args += [c if isinstance(c, Tracer) else np.asarray(c, o.aval.dtype)
                 for c, o in zip(ct_values, graph.outputs) if c is not None]
    if not nested:
        return run_plan(plan, args)
    outer = top_trace(args)
    if _graftable(outer, args) and all(aval_of(a) == v.aval for a, v in zip(args, g.inputs)):
        vals = run_plan(plan, [a.val if type(a) is Tracer else a for a in args], every=True)
        env = _graft(g, outer, args, dict(zip(plan.vars, vals)), fresh=True)
        return [env[v] for v in g.outputs]
    return eval_graph(g, args)


# ------------------------------------------------------------------ eager Hessian-vector products
# ``hessian_vector_product`` is grad of <grad f, v>. Un-jitted, grad of grad records the inner
# forward and backward passes into the outer trace on every call, and keys and runs the outer
# backward graph. Its structure follows from the inner forward graph's, so one graph per
# structure does it all: the inner backward pass, <., v> and the outer backward pass, built
# and optimized together, fed the forward values and v. A call traces f and runs that plan.
_HVP_CACHE: dict = {}   # (structure key, vector avals) -> (graph, positions, plan) | None
HVP_CACHE_SIZE = 64     # (their graphs are about three times a backward graph)


def vdot_leaves(xs: Sequence[Any], ys: Sequence[Any]):
    """sum_i <xs[i], ys[i]>: the inner product of two pytrees' leaves."""
    return functools.reduce(lambda a, b: a + b, [jnp.sum(x * y) for x, y in zip(xs, ys)])


@timed("autodiff")
def eager_hvp(graph: Graph, values: dict, wrt: Sequence[int],
              vectors: Sequence[np.ndarray]) -> list | None:
    """H v for the scalar ``graph`` (traced on concrete arrays, ``values`` of every var),
    with respect to ``graph.inputs[wrt]``, one array of ``vectors`` each, from the graph
    cached for this structure; None the first time a structure is seen or when it cannot be
    cached: then the caller takes grad of grad."""
    ct = [np.ones((), graph.outputs[0].aval.dtype)] + [None] * (len(graph.outputs) - 1)
    key, order = structure_key(graph, wrt, ct, seeded=True)
    if key is None:
        return None
    hit = _cached(_HVP_CACHE, HVP_CACHE_SIZE, (key, tuple(aval_of(v) for v in vectors)),
                  lambda: _build_hvp(graph, order, wrt, ct, vectors, key))
    if hit is None:
        return None
    _, keep, plan = hit
    n = len(order)
    return run_plan(plan, [values[order[i]] if i < n else vectors[i - n] for i in keep])


def _build_hvp(graph: Graph, order: list, wrt: Sequence[int], ct: list,
               vectors: Sequence[np.ndarray], key):
    """The graph ``(*forward values it reads, *vectors) -> H v`` for ``eager_hvp``, and the
    positions it reads (< len(order): in ``order``; after: in ``vectors``). First the graph of
    <grad, v> as a function of the forward inputs, its constants (inputs too: their values
    change between calls) and v: the forward nodes, then the cached inner backward graph on
    their values. Its backward graph takes the forward values and v as given and recomputes
    the inner backward pass itself."""
    g, g_keep, _ = _cached(_BACKWARD_CACHE, BACKWARD_CACHE_SIZE, key,
                           lambda: build_backward(graph, order, wrt, ct, True), now=True)
    with Trace(abstract=True, what="a Hessian-vector product") as t:
        env = {v: t.new_input(v.aval) for v in [*graph.inputs, *graph.consts]}
        _replay(graph, t, env)
        genv = {gv: env[order[i]] for gv, i in zip(g.inputs, g_keep)}
        _replay(g, t, genv)
        vs = [t.new_input(aval_of(v)) for v in vectors]
        inner = t.to_graph([vdot_leaves([genv[o] for o in g.outputs], vs)])
    given = [env[v].gvar for v in order] + [v.gvar for v in vs]
    return build_backward(inner, given, wrt, [np.ones((), inner.outputs[0].aval.dtype)],
                           True, recompute=True)


@timed("autodiff")
def build_jvp(graph: Graph, wrt: Sequence[int]) -> Graph:
    """Graph of ``(*outputs, *tangents of outputs)`` with inputs ``(*inputs, *tangents[wrt])``."""
    with Trace(abstract=True, what="the forward-mode pass") as t:
        env: dict = {v: t.new_input(v.aval) for v in graph.inputs}
        tenv: dict = {}
        for i in wrt:
            v = graph.inputs[i]
            tan = t.new_input(Aval(v.aval.shape, v.aval.dtype))
            if _differentiable(v.aval):
                tenv[v] = tan
        _const_tracers(graph, t, env)
        for n in graph.nodes:
            ins = [env[v] for v in n.inputs]
            outs = bind(n.prim, *ins, **n.params)
            outs = list(outs) if n.prim.multiple_results else [outs]
            for v, o in zip(n.outs, outs):
                env[v] = o
            ts = [tenv.get(v) for v in n.inputs]
            if all(x is None for x in ts) or not n.prim.differentiable:
                continue
            if n.prim.jvp is None:
                raise NotImplementedError(f"{n.prim.name} has no JVP rule, so it cannot be "
                                          "differentiated in forward mode")
            if n.prim.multiple_results:
                touts = n.prim.jvp(ts, outs, *ins, **n.params)
            else:
                touts = [n.prim.jvp(ts, outs[0], *ins, **n.params)]
            for v, tv in zip(n.outs, touts):
                if tv is not None and _differentiable(v.aval):
                    tenv[v] = _fit(tv, v.aval, n)
        prim_outs = [env[o] for o in graph.outputs]
        tan_outs = [tenv.get(o) if tenv.get(o) is not None
                    else np.zeros(o.aval.shape, o.aval.dtype) for o in graph.outputs]
        return t.to_graph(prim_outs + tan_outs)
