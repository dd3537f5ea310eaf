"""The NumPy reference interpreter: the ground truth compiled code is tested against."""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from .core import Graph, pinned, fp_errors_ignored


def run(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``graph`` on concrete arrays, node by node, with each primitive's NumPy rule.

    Each result is pinned to the dtype and shape the shape rule promised (as ``run_impl``
    does); floating-point warnings are silenced once for the whole graph, not per node, since
    eager gradients interpret many small graphs."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict = {}
    for v, a in zip(graph.inputs, args):
        dt = v.aval.dtype
        env[v] = a if type(a) is np.ndarray and a.dtype is dt else np.asarray(a, dtype=dt)
    env.update(graph.consts)
    ndarray = np.ndarray
    with fp_errors_ignored():
        for n in graph.nodes:
            prim = n.prim
            res = prim.impl(*[env[v] for v in n.inputs], **n.params)
            if prim.multiple_results:
                for v, r in zip(n.outs, res):
                    a = v.aval
                    if type(r) is not ndarray or r.dtype is not a.dtype or r.shape != a.shape:
                        r = pinned(r, a)
                    env[v] = r
                continue
            v = n.outs[0]
            a = v.aval
            if type(res) is not ndarray or res.dtype is not a.dtype or res.shape != a.shape:
                res = pinned(res, a)           # (a NumPy scalar, from a 0-d operation)
            env[v] = res
    return [env[v] for v in graph.outputs]


# ------------------------------------------------------------------ kept graphs
# Eager gradients interpret the same few graphs on every call (a cached backward graph, a
# custom_vjp function's fwd). ``run`` pays per node for the variable lookups in a dict, the
# argument list and the ``**params`` call, as much as the small NumPy operation itself; a
# ``Plan`` does that work once: slots in a list instead of a dict, each node's parameters
# bound in advance (``functools.partial``), its outputs' avals at hand for pinning.
class Plan:
    """``graph`` prepared for repeated evaluation with ``run_plan`` (the graph must not be
    changed afterwards)."""

    __slots__ = ("n_in", "in_dtypes", "consts", "steps", "outputs", "size", "vars")

    def __init__(self, graph: Graph):
        slot: dict = {}
        for v in graph.inputs:
            slot[v] = len(slot)
        self.n_in = len(graph.inputs)
        self.in_dtypes = [v.aval.dtype for v in graph.inputs]
        self.consts = []
        for v, c in graph.consts.items():
            slot[v] = len(slot)
            self.consts.append(c)
        self.steps = []
        for n in graph.nodes:
            fn = functools.partial(n.prim.impl, **n.params) if n.params else n.prim.impl
            ins = tuple(slot[v] for v in n.inputs)
            for o in n.outs:
                slot[o] = len(slot)
            outs = tuple((slot[o], o.aval) for o in n.outs)
            self.steps.append((fn, ins, n.prim.multiple_results, outs))
        self.outputs = [slot[v] for v in graph.outputs]
        self.size = len(slot)
        self.vars = list(slot)      # the graph's vars in slot order


def run_plan(plan: Plan, args: Sequence[np.ndarray], every: bool = False) -> list[np.ndarray]:
    """``run(graph, args)`` for ``Plan(graph)``: the same results, pinned the same way.
    ``every``: the value of every var instead, in the order of ``plan.vars``."""
    if len(args) != plan.n_in:
        raise TypeError(f"graph takes {plan.n_in} inputs, got {len(args)}")
    env = [a if type(a) is np.ndarray and a.dtype is dt else np.asarray(a, dtype=dt)
           for a, dt in zip(args, plan.in_dtypes)]
    env += plan.consts
    env += [None] * (plan.size - len(env))
    ndarray = np.ndarray
    with fp_errors_ignored():
        for fn, ins, multiple, outs in plan.steps:
            if len(ins) == 1:
                res = fn(env[ins[0]])
            elif len(ins) == 2:
                res = fn(env[ins[0]], env[ins[1]])
            else:
                res = fn(*[env[i] for i in ins])
            if multiple:
                for (k, a), r in zip(outs, res):
                    if type(r) is not ndarray or r.dtype is not a.dtype or r.shape != a.shape:
                        r = pinned(r, a)
                    env[k] = r
                continue
            k, a = outs[0]
            if type(res) is not ndarray or res.dtype is not a.dtype or res.shape != a.shape:
                res = pinned(res, a)
            env[k] = res
    return env if every else [env[k] for k in plan.outputs]
