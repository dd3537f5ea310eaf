"""``Session.run``: evaluate the subgraph the fetches need, compiled by ``jit``.

A run becomes one traced function ``program(feeds, variables, counter) -> (fetched values,
new variable values)``, evaluated node by node in topological order with jitgraph.numpy. It is
jitted once per (fetches, fed nodes, variables) combination; ``jit`` then caches one compiled
program per fed shape. Variables live in the session between runs; initializers and train ops
return their new values, which the session stores.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import numpy as jnp
from .. import random as jr
from ..jit import jit
from ..transforms import grad
from .graph import (Constant, Graph, Placeholder, Special, Tensor, Variable,
                    get_default_graph, topo_order)


class OpError(Exception):
    """Base of the errors a run reports (TensorFlow's ``tf.errors.OpError``)."""


class FailedPreconditionError(OpError):
    pass


class InvalidArgumentError(OpError, ValueError):
    pass


_SESSIONS: list["Session"] = []


def default_session() -> "Session":
    if not _SESSIONS:
        raise ValueError("Cannot evaluate a tensor without a session: use `with tf.Session() "
                         "as sess:` and sess.run(tensor), or tensor.eval(session=sess)")
    return _SESSIONS[-1]


class _Context:
    """Per-run state while tracing: the run counter (random ops) and variable updates."""

    def __init__(self, counter, seed: int, graph: Graph):
        self.counter = counter
        self.seed = seed
        self.graph = graph
        self.updates: dict = {}
        self.grad_cache: dict = {}


def _deps(node: Tensor) -> list[Tensor]:
    if isinstance(node, Special):
        if node.op_type == "Init":
            return [v.initial_value for v in node.graph.variables]
        return list(node.inputs) + list(node.info.get("deps", []))
    return list(node.inputs)


def _order(targets, stop) -> list[Tensor]:
    order, seen = [], set(id(s) for s in stop)
    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for d in _deps(n):
            visit(d)
        order.append(n)
    for t in targets:
        visit(t)
    return order


def evaluate(targets, env: dict, ctx: _Context) -> None:
    for n in _order(targets, [k for k in env]):
        env[n] = _compute(n, env, ctx)


def _compute(n: Tensor, env: dict, ctx: _Context):
    if isinstance(n, Constant):
        return n.value
    if isinstance(n, Placeholder):
        raise InvalidArgumentError(f"You must feed a value for placeholder tensor '{n.name}' "
                                   f"with dtype {n.dtype}")
    if isinstance(n, Variable):
        raise FailedPreconditionError(f"Attempting to use uninitialized value {n.name}")
    if not isinstance(n, Special):
        return n.compute(*[env[i] for i in n.inputs])
    kind = n.op_type
    if kind == "Gradients":
        return gradients_of(n.info["ys"], n.info["xs"], env, ctx)[n.info["index"]]
    if kind == "Init":
        for v in ctx.graph.variables:
            ctx.updates[v] = env[v.initial_value]
        return None
    if kind == "NoOp":
        return None
    if kind == "TrainOp":
        opt, loss, var_list = n.info["optimizer"], n.info["loss"], n.info["var_list"]
        grads = gradients_of([loss], var_list, env, ctx)
        opt.apply(var_list, grads, env, ctx)
        return None
    if kind == "Random":
        key = jr.fold_in(jr.fold_in(jr.key(ctx.seed), n.info["index"]), ctx.counter)
        return n.info["sample"](key)
    raise TypeError(f"unknown node type {kind}")


def gradients_of(ys, xs, env: dict, ctx: _Context) -> list:
    """d(sum of ys)/d(each x): the part of the graph between xs and ys is evaluated again as a
    function of the xs' values and differentiated by jitgraph.grad."""
    key = (tuple(id(y) for y in ys), tuple(id(x) for x in xs))
    if key in ctx.grad_cache:
        return ctx.grad_cache[key]
    evaluate(list(xs), env, ctx)
    xset = set(id(x) for x in xs)
    dependent: set = set()
    for n in _order(ys, []):
        if id(n) in xset or any(id(d) in dependent for d in _deps(n)):
            dependent.add(id(n))
    evaluate([n for n in _order(ys, xs) if id(n) not in dependent], env, ctx)
    base = {k: v for k, v in env.items() if id(k) not in dependent}

    def total(*xvals):
        e = dict(base)
        e.update(zip(xs, xvals))
        sub = _Context(ctx.counter, ctx.seed, ctx.graph)
        evaluate(list(ys), e, sub)
        return sum(jnp.sum(jnp.astype(e[y], jnp.float64) if e[y].dtype.kind != "f" else e[y])
                   for y in ys)

    xvals = [env[x] for x in xs]
    gs = grad(total, argnums=tuple(range(len(xs))))(*xvals)
    gs = list(gs)
    ctx.grad_cache[key] = gs
    return gs


def _flatten_fetches(fetches):
    """(list of nodes, rebuild(values) -> structure like fetches)."""
    if isinstance(fetches, Tensor):
        return [fetches], lambda vals: vals[0]
    if isinstance(fetches, (list, tuple)):
        parts = [_flatten_fetches(f) for f in fetches]
        nodes, sizes = [], []
        for p, _ in parts:
            nodes += p
            sizes.append(len(p))

        def rebuild(vals, parts=parts, sizes=sizes, typ=type(fetches)):
            out, i = [], 0
            for (p, rb), s in zip(parts, sizes):
                out.append(rb(vals[i:i + s]))
                i += s
            return typ(out) if typ in (list, tuple) else typ(*out)
        return nodes, rebuild
    if isinstance(fetches, dict):
        keys = list(fetches)
        nodes, rb = _flatten_fetches([fetches[k] for k in keys])
        return nodes, lambda vals: dict(zip(keys, rb(vals)))
    raise TypeError(f"Fetch argument {fetches!r} has invalid type {type(fetches).__name__}; "
                    "fetch a tensor or operation, or a list/tuple/dict of them")


class Session:
    """Runs a graph; holds the values of its variables. Use as a context manager."""

    def __init__(self, graph: Graph | None = None, seed: int = 0):
        self.graph = graph or get_default_graph()
        self.seed = seed
        self._values: dict[Variable, np.ndarray] = {}
        self._programs: dict = {}
        self._runs = 0
        self._closed = False

    def __enter__(self) -> "Session":
        _SESSIONS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        if _SESSIONS and _SESSIONS[-1] is self:
            _SESSIONS.pop()
        self.close()

    def close(self) -> None:
        self._closed = True

    def run(self, fetches, feed_dict: dict | None = None) -> Any:
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session")
        nodes, rebuild = _flatten_fetches(fetches)
        for n in nodes:
            if n.graph is not self.graph:
                raise ValueError(f"Tensor '{n.name}' is not an element of this graph (it was "
                                 "built in another graph than the session's)")
        feeds = {}
        for k, v in (feed_dict or {}).items():
            if not isinstance(k, Tensor):
                raise TypeError(f"feed_dict keys must be tensors (placeholders), got {k!r}")
            if k.graph is not self.graph:
                raise ValueError(f"Cannot feed Tensor '{k.name}': it is not an element of this "
                                 "graph")
            if isinstance(k, Placeholder):
                feeds[k] = k.check_feed(v)
            else:
                feeds[k] = np.asarray(v, dtype=k.dtype) if k.dtype is not None else np.asarray(v)
        needed = _order(nodes, list(feeds))
        for n in needed:
            if isinstance(n, Placeholder):
                raise InvalidArgumentError(f"You must feed a value for placeholder tensor "
                                           f"'{n.name}' with dtype {n.dtype}"
                                           + ("" if n.shape is None else f" and shape {n.shape}"))
        variables = [n for n in needed if isinstance(n, Variable)]
        for v in variables:
            if v not in self._values:
                raise FailedPreconditionError(
                    f"Attempting to use uninitialized value {v.name}: run "
                    "tf.global_variables_initializer() in this session first")
        fed = list(feeds)
        key = (tuple(id(n) for n in nodes), tuple(id(n) for n in fed),
               tuple(id(v) for v in variables))
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._make_program(nodes, fed, variables)
        counter = np.array(self._runs, np.int64)
        self._runs += 1
        outs, updates = program([feeds[n] for n in fed],
                                [self._values[v] for v in variables], counter)
        by_name = {v.name: v for v in self.graph.variables}
        for name, val in updates.items():
            self._values[by_name[name]] = np.asarray(val)
        vals = [None if isinstance(n, Special) and n.op_type in ("Init", "NoOp", "TrainOp")
                else np.asarray(o) for n, o in zip(nodes, outs)]
        return rebuild(vals)

    def _make_program(self, nodes, fed, variables):
        graph, seed = self.graph, self.seed

        def program(feed_vals, var_vals, counter):
            env = dict(zip(fed, feed_vals))
            env.update(zip(variables, var_vals))
            ctx = _Context(counter, seed, graph)
            evaluate(nodes, env, ctx)
            outs = [np.zeros((), np.float32) if env[n] is None else env[n] for n in nodes]
            return outs, {v.name: val for v, val in ctx.updates.items()}

        program.__name__ = "session_run_" + "_".join(n.name for n in nodes)[:60]
        return jit(program)
