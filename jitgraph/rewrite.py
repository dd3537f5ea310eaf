"""Rewrites as data: what a fused op declares, and the one facility that finds and replaces
its patterns.

A fused primitive (``attention``, ``linear_ce``) replaces a pattern that users write with
ordinary primitives. Everything the pipeline needs to know about it is one ``FusedOp``
record, registered once with ``register_fused_op``:

- ``rules``: each pattern (a ``match(index, node)`` at a root primitive) beside its
  replacement (``replace(builder, node, hit)``); ``conditions`` that every hit must also
  meet, and ``wins``, the cost-model condition (whether the rewrite pays at the matched
  shapes; by default it always does);
- ``primitives``: the primitives it introduces;
- ``lowerings``: per backend, each primitive's lowering (``"host"``: a host step's callable,
  ``"cuda"``: the driver lines of a CUDA program's step), which the compiler installs;
- ``merge``: a rewrite the compiler runs after differentiation (a forward and its backward
  become one training step);
- ``driver``: what generated CUDA code calls on the driver (``D.attention(*spec)``: the
  kernels of one call site, prepared once).

Autodiff and the compiler run ``rewritten(graph)``, every enabled record in name order;
``FusedOp.disabled()`` turns one off for the current context (a ``contextvars`` variable:
another thread, or another asyncio task, keeps its own setting); ``FusedOp.forced()`` applies
it wherever its pattern and conditions match, whatever ``wins`` says (for benchmarks that
measure the cost model, and for tests of the fused kernels at small shapes). A record's cost
model prices the kernels of the targets it names (``priced``: the host's); while a program
for another target is traced and lowered (``targeting``, which ``jit`` and the compiler set)
its rewrite applies wherever it matches, as before there was a cost model.

The pieces below the records serve any graph rewrite: ``GraphIndex`` (producers, use
counts, constants), a small pattern language keyed by primitive objects (``op``, ``var``,
``maybe``; ``match``), and ``Rebuilder``, which copies a graph node by node while a rewrite
emits replacements.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from .core import Aval, Graph, Node, Primitive, Var

OUTPUT_USES = 1000      # a graph output counts as this many uses: it is read outside

_TARGET = contextvars.ContextVar("jitgraph.rewrite.target", default="cpu")
# the fused ops disabled or forced in this context, as (name, "off"/"forced") pairs: part of
# a jit cache key, so a function compiled with a rewrite is traced again without it
_OVERRIDES: contextvars.ContextVar[tuple] = contextvars.ContextVar("jitgraph.rewrite.overrides",
                                                                  default=())


class OverrideCount:
    """How many ``disabled()``/``forced()`` blocks are open in the whole process: while none
    is, ``jit``'s fast path needs no look at this context's overrides."""
    count = 0


OVERRIDES_OPEN = OverrideCount()


def overrides() -> tuple:
    """The fused ops disabled or forced in this context (``jit`` keys its cache by them)."""
    return _OVERRIDES.get()


@contextlib.contextmanager
def _override(var: contextvars.ContextVar, value: Any, entry: tuple) -> Iterator[None]:
    token, outer = var.set(value), _OVERRIDES.set(_OVERRIDES.get() + (entry,))
    OVERRIDES_OPEN.count += 1
    try:
        yield
    finally:
        OVERRIDES_OPEN.count -= 1
        _OVERRIDES.reset(outer)
        var.reset(token)


@contextlib.contextmanager
def targeting(target: str) -> Iterator[None]:
    """``with targeting("cuda"):`` graphs rewritten inside (in this context) are for
    ``target``'s programs: the cost models price only the targets they were measured on."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


# ------------------------------------------------------------------ graph helpers
def dce(g: Graph) -> Graph:
    """Drop nodes whose results nothing uses, and constants nothing reads."""
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outs):
            kept.append(n)
            live.update(n.inputs)
    kept.reverse()
    consts = {v: c for v, c in g.consts.items() if v in live}
    return Graph(list(g.inputs), kept, list(g.outputs), consts, g.in_tree, g.out_tree)


def uniform_value(consts: dict, producer: dict, v: Var):
    """The single value ``v`` holds everywhere (a constant, or a broadcast/reshape of one),
    or None. ``consts`` maps vars to arrays, ``producer`` vars to the nodes computing them."""
    while True:
        c = consts.get(v)
        if c is not None:
            if c.size == 0:
                return None
            flat = c.reshape(-1)
            return flat[0] if c.size == 1 or bool(np.all(flat == flat[0])) else None
        p = producer.get(v)
        if p is None or p.prim.name not in ("broadcast_to", "reshape"):
            return None
        v = p.inputs[0]


def is_swap(n: Node) -> bool:
    """Whether ``n`` transposes only its last two axes (``swapaxes(x, -1, -2)``)."""
    perm = n.params.get("perm") if n.prim.name == "transpose" else None
    nd = len(perm) if perm else 0
    return bool(perm) and nd >= 2 and tuple(perm) == tuple(range(nd - 2)) + (nd - 1, nd - 2)


class GraphIndex:
    """A graph's producers, use counts and constants: what a pattern is matched against."""

    def __init__(self, g: Graph):
        self.g = g
        self.consts = g.consts
        self.producer: dict[Var, Node] = {o: n for n in g.nodes for o in n.outs}
        self.use_count: dict[Var, int] = {}
        for n in g.nodes:
            for i in n.inputs:
                self.use_count[i] = self.use_count.get(i, 0) + 1
        for o in g.outputs:
            self.use_count[o] = self.use_count.get(o, 0) + OUTPUT_USES

    def uses(self, v: Var) -> int:
        """How many node inputs read ``v`` (an output of the graph counts ``OUTPUT_USES``)."""
        return self.use_count.get(v, 0)

    def node(self, v: Var, *prims: Primitive, uses: int | None = None) -> Node | None:
        """The node computing ``v`` when it is one of ``prims`` (and ``v`` has ``uses``
        uses, when given), else None."""
        n = self.producer.get(v)
        if n is None or n.prim not in prims or uses is not None and self.uses(v) != uses:
            return None
        return n

    def through(self, v: Var, *prims: Primitive) -> Var:
        """``v`` with any chain of ``prims`` (shape-only ops, say) peeled off its producers."""
        while True:
            n = self.node(v, *prims)
            if n is None:
                return v
            v = n.inputs[0]

    def const(self, v: Var) -> np.ndarray | None:
        """``v``'s literal value, when it is a constant."""
        c = self.consts.get(v)
        return None if c is None else np.asarray(c)

    def scalar(self, v: Var) -> float | None:
        """The one value ``v`` holds everywhere (a broadcast or reshaped scalar constant)."""
        u = uniform_value(self.consts, self.producer, v)
        return None if u is None or np.ndim(u) else float(u)


# ------------------------------------------------------------------ patterns
class Pattern:
    """A pattern over vars: ``match(pattern, index, v)`` gives the names it binds, or None."""

    def bind(self, ix: GraphIndex, v: Var, env: dict) -> bool:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class _Var(Pattern):
    name: str | None
    uses: int | None
    where: Callable[[Var], bool] | None

    def bind(self, ix: GraphIndex, v: Var, env: dict) -> bool:
        if self.name is not None and self.name in env:
            return env[self.name] is v          # a name seen before: the same var again
        if self.uses is not None and ix.uses(v) != self.uses:
            return False
        if self.where is not None and not self.where(v):
            return False
        if self.name is not None:
            env[self.name] = v
        return True


@dataclass(frozen=True, eq=False)
class _Op(Pattern):
    prims: tuple
    inputs: tuple
    name: str | None
    uses: int | None
    where: Callable[[Node], bool] | None
    commutative: bool

    def bind(self, ix: GraphIndex, v: Var, env: dict) -> bool:
        n = ix.node(v, *self.prims, uses=self.uses)
        if n is None or len(n.inputs) != len(self.inputs):
            return False
        if self.where is not None and not self.where(n):
            return False
        orders = [n.inputs, n.inputs[::-1]] if self.commutative else [n.inputs]
        for ins in orders:
            trial = dict(env)
            if all(p.bind(ix, i, trial) for p, i in zip(self.inputs, ins)):
                env.clear()
                env.update(trial)
                if self.name is not None:
                    env[self.name] = v
                    env[self.name + "_node"] = n
                return True
        return False


@dataclass(frozen=True, eq=False)
class _Maybe(Pattern):
    prim: Primitive
    inner: Pattern

    def bind(self, ix: GraphIndex, v: Var, env: dict) -> bool:
        n = ix.node(v, self.prim)
        return self.inner.bind(ix, n.inputs[0] if n is not None else v, env)


def var(name: str | None = None, *, uses: int | None = None,
        where: Callable[[Var], bool] | None = None) -> Pattern:
    """Any var (with ``uses`` uses, meeting ``where``), bound to ``name``; a name already
    bound matches only that same var."""
    return _Var(name, uses, where)


def op(prims: Primitive | Sequence[Primitive], *inputs: Pattern, name: str | None = None,
       uses: int | None = None, where: Callable[[Node], bool] | None = None,
       commutative: bool = False) -> Pattern:
    """A var computed by one of ``prims`` from vars matching ``inputs`` (in either order when
    ``commutative``), with ``uses`` uses and a node meeting ``where``; ``name`` binds the var,
    and ``name + "_node"`` its node."""
    prims = (prims,) if isinstance(prims, Primitive) else tuple(prims)
    return _Op(prims, inputs, name, uses, where, commutative)


def maybe(prim: Primitive, inner: Pattern) -> Pattern:
    """``inner``, optionally behind one ``prim`` node (a ``stop_gradient``, say)."""
    return _Maybe(prim, inner)


def match(pattern: Pattern, ix: GraphIndex, v: Var) -> dict | None:
    """The names ``pattern`` binds when ``v`` matches it, else None."""
    env: dict = {}
    return env if pattern.bind(ix, v, env) else None


# ------------------------------------------------------------------ rebuilding
class Rebuilder:
    """Copies a graph node by node while a rewrite adds nodes of its own: ``keep`` a node,
    ``emit`` a new one, ``const`` a new literal; ``graph()`` is the result (dead nodes kept:
    the caller drops them with ``dce``). ``memo`` is for the rewrite's own bookkeeping (one
    fused node shared by several matches)."""

    def __init__(self, g: Graph):
        self.g = g
        self.nodes: list[Node] = []
        self.consts: dict[Var, np.ndarray] = dict(g.consts)
        self.producer: dict[Var, Node] = {}
        self.memo: dict = {}
        self.source = None       # the line a rewrite's new nodes carry (the replaced node's)

    def add(self, node: Node) -> list[Var]:
        """Append ``node``; the vars standing for its outputs."""
        self.nodes.append(node)
        for o in node.outs:
            self.producer[o] = node
        return node.outs

    def keep(self, node: Node) -> None:
        self.add(node)

    def emit(self, prim: Primitive, inputs: list[Var], params: dict | None = None,
             source=None) -> Var:
        """A new node ``prim(*inputs, **params)`` (its result's aval by the primitive's rule);
        its result."""
        params = {} if params is None else params
        aval = prim.abstract_eval(*[i.aval for i in inputs], **params)
        return self.add(Node(prim, inputs, params, [Var(aval)],
                             self.source if source is None else source))[0]

    def const(self, value, aval: Aval) -> Var:
        """A new constant var holding ``value`` (as ``aval``'s dtype and shape)."""
        v = Var(aval)
        self.consts[v] = np.asarray(value, aval.dtype).reshape(aval.shape)
        return v

    def graph(self) -> Graph:
        g = self.g
        return Graph(g.inputs, self.nodes, g.outputs, self.consts, g.in_tree, g.out_tree)


# ------------------------------------------------------------------ fused ops
def host_threads() -> int:
    """The threads the fused ops' host kernels split their work over (Numba's configured
    count: a setting, read without starting Numba's threading layer), for cost models. It
    is Numba's default (``NUMBA_NUM_THREADS``, else the CPUs this process may run on) where
    Numba is not imported: a process that runs cached programs need not import it."""
    if "numba" in sys.modules:
        from numba.core import config
        return max(1, int(config.NUMBA_NUM_THREADS))
    from . import config as settings
    return settings.numba_threads()


def always(hit: Any) -> bool:
    """The default cost-model condition: the rewrite wins at every shape."""
    return True


@dataclass(frozen=True, eq=False)
class Rule:
    """One pattern and its replacement: at a node computed by one of ``roots``,
    ``match(index, node)`` gives a hit (any object) or None; ``replace(builder, node, hit)``
    emits what stands for the node's outputs (it must define the node's own output vars)."""
    roots: tuple
    match: Callable[[GraphIndex, Node], Any]
    replace: Callable[[Rebuilder, Node, Any], None]


@dataclass(eq=False)
class FusedOp:
    """Everything about one fused op, in one place (module docstring)."""
    name: str
    primitives: tuple
    rules: tuple
    # hit -> whether the rewrite applies, beyond the pattern (every one must hold)
    conditions: tuple = ()
    # the cost-model condition: hit (the matched vars carry the shapes) -> whether fusing wins
    wins: Callable[[Any], bool] = always
    # the targets whose kernels ``wins`` prices; for others the rewrite applies at every match
    priced: tuple = ("cpu",)
    # graph -> whether it may hold a match at all: a cheap test that skips the index
    may_match: Callable[[Graph], bool] | None = None
    # graph -> graph before matching (constants folded, say); the original is returned when
    # nothing matches
    prepare: Callable[[Graph], Graph] | None = None
    # (rewritten graph, the hits) -> whether the result is worth keeping
    keep: Callable[[Graph, list], bool] | None = None
    # backend ("host", "cuda") -> primitive -> lowering, installed by the compiler
    lowerings: Mapping[str, Mapping[Primitive, Any]] = field(default_factory=dict)
    # graph -> graph, run by the compiler after differentiation (train-step merging)
    merge: Callable[[Graph], Graph] | None = None
    # name -> prepare(driver, *spec): what generated CUDA code calls as ``D.<name>(*spec)``
    driver: Mapping[str, Callable] = field(default_factory=dict)

    def __post_init__(self):
        self._enabled = contextvars.ContextVar(f"jitgraph.rewrite.{self.name}", default=True)
        self._forced = contextvars.ContextVar(f"jitgraph.rewrite.{self.name}.forced",
                                              default=False)

    @property
    def enabled(self) -> bool:
        """Whether ``rewritten`` applies this op in the current context."""
        return self._enabled.get()

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """``with op.disabled():`` graphs traced and compiled inside, in this context (this
        thread, this task), keep the pattern as written."""
        with _override(self._enabled, False, (self.name, "off")):
            yield

    @contextlib.contextmanager
    def forced(self) -> Iterator[None]:
        """``with op.forced():`` graphs traced and compiled inside, in this context, take the
        rewrite wherever a pattern and the conditions match: the cost model (``wins``) is not
        asked."""
        with _override(self._forced, True, (self.name, "forced")):
            yield

    def pays(self, hit: Any) -> bool:
        """Whether the rewrite applies at a hit that meets the conditions: ``wins`` for a
        target the cost model prices, unless forced in this context."""
        return self._forced.get() or _TARGET.get() not in self.priced or bool(self.wins(hit))

    def find(self, g: Graph) -> dict[Node, tuple]:
        """Each node of ``g`` that a rule replaces -> (the rule, its hit)."""
        ix = GraphIndex(g)
        hits: dict[Node, tuple] = {}
        for n in g.nodes:
            for rule in self.rules:
                if n.prim not in rule.roots:
                    continue
                hit = rule.match(ix, n)
                if hit is not None and all(c(hit) for c in self.conditions) and self.pays(hit):
                    hits[n] = (rule, hit)
                    break
        return hits

    def apply(self, g: Graph) -> Graph:
        """``g`` with every match replaced (``g`` itself when none is, or when ``keep``
        refuses the result)."""
        if self.may_match is not None and not self.may_match(g):
            return g
        original = g
        if self.prepare is not None:
            g = self.prepare(g)
        hits = self.find(g)
        if not hits:
            return original
        b = Rebuilder(g)
        for n in g.nodes:
            hit = hits.get(n)
            if hit is None:
                b.keep(n)
                continue
            b.source = n.source
            hit[0].replace(b, n, hit[1])
        out = dce(b.graph())
        if self.keep is not None and not self.keep(out, [hit for _, hit in hits.values()]):
            return original
        return out


FUSED_OPS: dict[str, FusedOp] = {}
_LISTENERS: list[Callable[[FusedOp], None]] = []


def register_fused_op(fused: FusedOp) -> FusedOp:
    """Make ``fused`` part of every pipeline: autodiff and the compiler rewrite with it, and
    the compiler installs its lowerings."""
    if fused.name in FUSED_OPS:
        raise ValueError(f"a fused op named {fused.name!r} already exists")
    FUSED_OPS[fused.name] = fused
    for listen in _LISTENERS:
        listen(fused)
    return fused


def on_fused_op(listen: Callable[[FusedOp], None]) -> None:
    """Call ``listen`` with every registered fused op, now and as more are registered (how the
    compiler installs their lowerings without importing their modules)."""
    _LISTENERS.append(listen)
    for fused in list(FUSED_OPS.values()):
        listen(fused)


def driver_call(name: str) -> Callable | None:
    """The ``prepare(driver, *spec)`` a registered fused op declares as ``D.<name>``."""
    for fused in FUSED_OPS.values():
        prepare = fused.driver.get(name)
        if prepare is not None:
            return prepare
    return None


def fused_ops() -> list[FusedOp]:
    """The registered fused ops in name order (the order ``rewritten`` applies them)."""
    return [FUSED_OPS[k] for k in sorted(FUSED_OPS)]


def rewritten(graph: Graph) -> Graph:
    """``graph`` after every enabled fused op's rewrite (run on a forward graph before its
    backward pass is built, so a replaced pattern gets the fused primitive's VJP)."""
    for fused in fused_ops():
        if fused.enabled:
            graph = fused.apply(graph)
    return graph


def merged(graph: Graph) -> Graph:
    """``graph`` after every fused op's ``merge`` (the compiler's, after differentiation)."""
    for fused in fused_ops():
        if fused.merge is not None:
            graph = fused.merge(graph)
    return graph
