"""``Session.run``: evaluate the subgraph the fetches need, compiled by ``jit`` once it pays.

A run becomes one function ``program(*feeds, variables, counter) -> (fetched values, new
variable values)``, evaluated node by node in topological order with jitgraph.numpy; there is
one per (fetches, fed nodes, variables) combination. It runs eagerly (op by op on NumPy
arrays) until its runs, with the next one priced as the last, would cost as much CPU time in
all as its compile is expected to take, then it is jitted (``jit`` compiles at the next run
and caches one compiled program per fed shape). Why: compiling a run costs up to about a
second (a training step's program: 0.5-1.1 s of wall time on two cores, less from the disk
cache), while a tutorial's initializer, evaluation or short loop runs eagerly in milliseconds
and is never worth compiling. Compiling once the eager runs have cost as much as a compile
bounds either choice's loss at about twice the better one's (the ski-rental rule), while a
training step that costs 0.5 s or more eagerly (a convolutional network's at MNIST's size) is
compiled after its first step (its second would reach the limit) instead of after dozens.
The expected compile (``compile_price``): the seconds per graph node the fetch sets this
process compiled so far took (``COMPILE_S_PER_NODE`` before the first), times the fetch set's
nodes, at most ``JIT_AFTER_S`` (one second): the MNIST network's evaluation (32 nodes, after
its 52-node training step compiled in 0.9 s) is compiled after three eager runs instead of
seven. ``Session(jit_after_s=...)`` sets a fixed limit instead. CPU time, not wall time: on a busy
machine the eager runs and the compile both take longer by the same factor, so the choice
does not change with the load (timed by the wall clock, a short loop on a busy machine
crossed the limit and paid a compile four times its eager cost).
Variables live in the session between runs; initializers and train ops return their new
values, which the session stores.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from .. import numpy as jnp
from .. import random as jr
from ..jit import cache_info, jit
from ..transforms import grad
from .graph import Constant, Graph, Placeholder, Special, Tensor, Variable, get_default_graph


class OpError(Exception):
    """Base of the errors a run reports (TensorFlow's ``tf.errors.OpError``)."""


class FailedPreconditionError(OpError):
    pass


class InvalidArgumentError(OpError, ValueError):
    pass


class NotFoundError(OpError):
    pass


_SESSIONS: list["Session"] = []
JIT_AFTER_S = 1.0       # the most CPU seconds of eager runs of one fetch set before it is
                        # compiled (0: at once; inf: never)
COMPILE_S_PER_NODE = 0.02   # a compile's expected seconds per graph node, before any compile
_COMPILED = [0.0, 0]        # compile seconds and graph nodes of the fetch sets compiled so far


def compile_price(nodes: int, limit: float | None = None) -> float:
    """The seconds compiling a fetch set of ``nodes`` graph nodes is expected to take: the
    rate of this process's compiles so far (``COMPILE_S_PER_NODE`` before the first), at most
    ``limit`` (default ``JIT_AFTER_S``)."""
    secs, done = _COMPILED
    rate = secs / done if done else COMPILE_S_PER_NODE
    return min(JIT_AFTER_S if limit is None else limit, nodes * rate)


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
        raise InvalidArgumentError(f"You must feed a value for placeholder tensor "
                                   f"'{n.op_name}' with dtype {n.dtype}")
    if isinstance(n, Variable):
        raise FailedPreconditionError(f"Attempting to use uninitialized value {n.op_name}")
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
        pairs = [(g, v) for g, v in zip(n.info["grads"], n.info["var_list"]) if g is not None]
        n.info["optimizer"].apply([v for _, v in pairs], [env[g] for g, _ in pairs], env, ctx)
        step = n.info.get("global_step")
        if step is not None:
            ctx.updates[step] = env[step] + np.ones((), step.dtype)
        return None
    if kind == "Assign":
        var, value = n.info["var"], env[n.inputs[0]]
        ctx.updates[var] = jnp.astype(value, var.dtype)
        return ctx.updates[var]
    if kind == "Random":
        key = jr.fold_in(jr.fold_in(jr.key(ctx.seed), n.info["index"]), ctx.counter)
        return n.info["sample"](key, *[env[i] for i in n.inputs])
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


class _Program:
    """One run's function: called eagerly until those calls, with the next one priced as the
    last, would cost ``limit()`` seconds of CPU time (the process's, every thread's), then
    through ``jit`` (which compiles at the next call: a run that is never repeated costs no
    compile). Its first compiled call adds its compile seconds and ``nodes`` (the graph nodes
    it evaluates) to the rate ``compile_price`` prices the next fetch sets' compiles at.
    ``dynamic_dims`` (``jit``'s) names the fed dims a placeholder leaves open (``None``):
    they are compiled as runtime sizes from the first compile, so a short last batch or a
    test set of another size runs the same program instead of compiling its own (as
    TensorFlow's graph serves any size there)."""

    def __init__(self, fn: Callable, jit_after_s: float, dynamic_dims: dict | None = None,
                 nodes: int = 0, priced: bool = False):
        self.fn, self.jit_after_s, self.dynamic_dims = fn, jit_after_s, dynamic_dims
        self.nodes, self.priced = nodes, priced
        self.compiled = self._jit() if jit_after_s <= 0 else None
        self.eager_s = 0.0
        self._first = self.compiled is None      # its first compiled run is still to come

    def _jit(self):
        return jit(self.fn, dynamic_dims=self.dynamic_dims)

    def limit(self) -> float:
        """The eager CPU seconds after which it is compiled: the expected compile where the
        session's limit is the default (``priced``), else that limit."""
        if self.priced and 0 < self.jit_after_s < float("inf"):
            return compile_price(self.nodes, self.jit_after_s)
        return self.jit_after_s

    def __call__(self, *args):
        if self.compiled is not None:
            if not self._first:
                return self.compiled(*args)
            before = cache_info()["compile_seconds"]
            out = self.compiled(*args)
            self._first = False
            _COMPILED[0] += max(0.0, cache_info()["compile_seconds"] - before)
            _COMPILED[1] += self.nodes
            return out
        t0 = time.process_time()
        out = self.fn(*args)
        cost = time.process_time() - t0
        self.eager_s += cost
        if self.eager_s + cost >= self.limit():     # the next run would reach it
            self.compiled = self._jit()
        return out


def _plan(nodes: list) -> tuple[list, list]:
    """(the nodes the compiled program computes, one ``finish(values) -> fetched`` per fetch):
    string constants are answered without running, summaries wrap their values, operations
    (train ops, initializers) fetch as None and scalars as NumPy scalars, as in TensorFlow."""
    program, finishers = [], []
    for n in nodes:
        if isinstance(n, Constant) and n.dtype.kind == "S":
            parts, finish = [], (lambda vals, v=n.value: v[()] if v.ndim == 0 else v.astype(object))
        elif getattr(n, "fetch_parts", None) is not None:
            parts, finish = n.fetch_parts, n.fetch_result
        elif isinstance(n, Special) and n.is_operation:
            parts, finish = [n], lambda vals: None
        else:
            parts, finish = [n], lambda vals: vals[0][()] if vals[0].ndim == 0 else vals[0]
        finishers.append((len(program), len(parts), finish))
        program += parts
    return program, finishers


class Session:
    """Runs a graph; holds the values of its variables. Use as a context manager.

    ``Session(graph=g)``; ``seed`` (default: the graph's ``tf.set_random_seed``, else 0) seeds
    the random ops. ``target`` and ``config`` are accepted and ignored (one local device).
    ``jit_after_s``: a fetch set is compiled once its eager runs have cost this many seconds
    of CPU time in all (0: compile at once; ``float("inf")``: never; default: the compile's
    expected seconds, ``compile_price``, at most ``JIT_AFTER_S``)."""

    def __init__(self, target: Any = "", graph: Graph | None = None, config: Any = None,
                 seed: int | None = None, jit_after_s: float | None = None):
        if isinstance(target, Graph):
            graph = target
        self.graph = graph or get_default_graph()
        self.seed = seed if seed is not None else (self.graph.seed or 0)
        self._values: dict[Variable, np.ndarray] = {}
        self._programs: dict = {}
        self.jit_after_s = JIT_AFTER_S if jit_after_s is None else jit_after_s
        self._priced = jit_after_s is None
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
        fetched, rebuild = _flatten_fetches(fetches)
        for n in fetched:
            if n.graph is not self.graph:
                raise ValueError(f"Tensor '{n.name}' is not an element of this graph (it was "
                                 "built in another graph than the session's)")
        nodes, finishers = _plan(fetched)
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
                                           f"'{n.op_name}' with dtype {n.dtype}" + (
                                               "" if n._shape is None
                                               else f" and shape {n.shape.as_list()}"))
        variables = [n for n in needed if isinstance(n, Variable)]
        for v in variables:
            if v not in self._values:
                raise FailedPreconditionError(
                    f"Attempting to use uninitialized value {v.op_name}: run "
                    "tf.global_variables_initializer() in this session first")
        fed = list(feeds)
        key = (tuple(id(n) for n in nodes), tuple(id(n) for n in fed),
               tuple(id(v) for v in variables))
        outs = []
        if nodes:
            program = self._programs.get(key)
            if program is None:
                program = self._programs[key] = self._make_program(nodes, fed, variables)
            counter = np.array(self._runs, np.int64)
            self._runs += 1
            outs, updates = program(*[feeds[n] for n in fed],
                                    [self._values[v] for v in variables], counter)
            by_name = {v.op_name: v for v in self.graph.variables}
            for name, val in updates.items():
                self._values[by_name[name]] = np.asarray(val)
            outs = [np.asarray(o) for o in outs]
        return rebuild([finish(outs[i:i + k]) for i, k, finish in finishers])

    def read_variable(self, v: Variable) -> np.ndarray:
        """The value ``v`` holds in this session (for ``Saver``)."""
        if v not in self._values:
            raise FailedPreconditionError(f"Attempting to use uninitialized value {v.op_name}")
        return self._values[v]

    def write_variable(self, v: Variable, value) -> None:
        """Set ``v`` in this session (``Saver.restore``, ``Variable.load``); the shape must
        match the variable's."""
        arr = np.asarray(value, v.dtype)
        if v._shape is not None and arr.shape != tuple(v._shape):
            raise InvalidArgumentError(f"Cannot assign a value of shape {arr.shape} to variable "
                                       f"{v.op_name} of shape {tuple(v._shape)}")
        self._values[v] = arr

    def _make_program(self, nodes, fed, variables):
        graph, seed = self.graph, self.seed
        nf = len(fed)

        def program(*args):         # (each fed value, the variables' values, the run counter)
            feed_vals, var_vals, counter = args[:nf], args[nf], args[nf + 1]
            env = dict(zip(fed, feed_vals))
            env.update(zip(variables, var_vals))
            ctx = _Context(counter, seed, graph)
            evaluate(nodes, env, ctx)
            outs = [np.zeros((), np.float32) if env[n] is None else env[n] for n in nodes]
            return outs, {v.op_name: val for v, val in ctx.updates.items()}

        program.__name__ = "session_run_" + "_".join(
            n.op_name.replace("/", "_") for n in nodes)[:60]
        open_dims = {i: tuple(a for a, d in enumerate(p._shape) if d is None)
                     for i, p in enumerate(fed)
                     if isinstance(p, Placeholder) and None in (p._shape or ())}
        return _Program(program, self.jit_after_s, open_dims, len(_order(nodes, list(fed))),
                        self._priced)


class InteractiveSession(Session):
    """A session that makes itself the default on creation (``tensor.eval()`` works)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _SESSIONS.append(self)

    def close(self) -> None:
        if self in _SESSIONS:
            _SESSIONS.remove(self)
        super().close()
