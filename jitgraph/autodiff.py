"""Automatic differentiation by graph expansion.

``build_vjp`` turns a graph into one that also computes cotangents of its inputs: it replays the
forward nodes into a new trace, then walks them in reverse calling each primitive's VJP rule on
traced values, so the backward pass is itself a graph of primitives (and can be differentiated
again). ``build_jvp`` does the same forward, with each primitive's JVP rule.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import dtypes
from .core import Aval, EvalTrace, Graph, Node, Trace, Tracer, Var, bind, top_trace
from . import numpy as jnp


def eval_graph(graph: Graph, args: Sequence[Any]) -> list:
    """Evaluate ``graph`` with ``bind``: on tracers this inlines the graph into the caller's trace,
    on arrays it runs the reference interpreter."""
    if not any(isinstance(a, Tracer) for a in args):
        from .interpreter import run
        return run(graph, list(args))
    env: dict = dict(zip(graph.inputs, args))
    _replay(graph, top_trace(args), env)
    return [env[v] for v in graph.outputs]


def _const_tracers(graph: Graph, trace: Trace, env: dict) -> None:
    """Constants enter the new trace as tracers, so rules can read ``.aval`` on every operand."""
    for v, c in graph.consts.items():
        env[v] = Tracer(trace, trace.const_var(c))


def _replay(graph: Graph, trace: Trace, env: dict) -> None:
    """Re-emit ``graph``'s nodes into ``trace`` (``env`` maps its inputs to tracers)."""
    _const_tracers(graph, trace, env)
    for n in graph.nodes:
        outs = bind(n.prim, *[env[v] for v in n.inputs], **n.params)
        if not n.prim.multiple_results:
            outs = (outs,)
        for v, o in zip(n.outs, outs):
            env[v] = o


def _differentiable(aval: Aval) -> bool:
    return dtypes.is_float(aval.dtype)


def _fit(ct, aval: Aval, node: Node):
    """Check a rule's result against the value it belongs to; cast dtype if needed."""
    if tuple(ct.shape) != aval.shape:
        raise RuntimeError(f"internal error: the derivative rule of {node.prim.name} produced "
                           f"shape {tuple(ct.shape)} for an operand of shape {aval.shape}")
    return ct if ct.dtype == aval.dtype else jnp.astype(ct, aval.dtype)


def _active_vars(graph: Graph, wrt: Sequence[int]) -> set:
    active = {graph.inputs[i] for i in wrt}
    for n in graph.nodes:
        if n.prim.differentiable and any(v in active for v in n.inputs):
            active.update(o for o in n.outs if _differentiable(o.aval))
    return active


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
                f"mode (node created at {n.source and '%s:%s' % n.source[:2]})")
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


def build_vjp(graph: Graph, wrt: Sequence[int], ct_values: Sequence[Any] | None = None,
              keep_outputs: bool = False) -> Graph:
    """Graph of ``(*outputs if keep_outputs, *cotangents of inputs[wrt])``.

    Inputs are the forward graph's inputs, then one cotangent per output unless ``ct_values``
    fixes them (``None`` entries mean a zero cotangent, e.g. for auxiliary outputs).
    """
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
