"""Fusion: split an optimized graph into steps — fused loop kernels, matmuls, scatters and host
calls — and decide which values are ever written to memory.

The plan is backend-neutral: a ``LoopKernel`` is an iteration space ``shape`` split into outer
dims (kept) and inner dims (``axes``, reduced), with a sequence of stages. A *loop* stage runs over
the inner dims for each outer index (accumulating reductions and storing elementwise results);
a *scalar* stage computes per-outer-index values from earlier reductions. That one structure
covers elementwise chains (no inner dims), reductions with their elementwise producers, and
softmax / log-softmax / cross-entropy / layernorm-like row computations in one kernel. Backends
turn it into loops: CPU ``@njit`` (``codegen_cpu``) or CUDA kernels.

Two rules keep plans near the minimum of memory traffic (``cost.step_cost``; asserted in
``tests/test_plan_bytes.py``): a node joins the kernel that computes most of what it reads
(``_by_affinity``), so a backward elementwise value lands in the row kernel of its row
statistics rather than in whatever kernel came last; and a stored value that loop kernels can
recompute from what they already read is recomputed instead (``_recompute_in_kernel``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


from ..core import (ARG_REDUCE, GATHER, HOST, INDEX_MAP, MATMUL, SCALAR, SCATTER_ADD, Graph,
                    Node, Var)
from ..dtypes import is_narrow
from ..passes import uniform_value
from ..rewrite import is_swap
from .emit import CannotFuse, Emitter, norm_idx

INLINE = {SCALAR, INDEX_MAP, GATHER}   # lowerings computed where used: the rest store outputs
EXPENSIVE = 6          # a shared elementwise value costing more than this is stored, not recomputed


@dataclass
class Stage:
    kind: str                      # "loop" | "scalar"
    items: list[Node] = field(default_factory=list)


@dataclass
class LoopKernel:
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    stages: list[Stage]
    name: str = ""
    body: Any = None               # KernelBody once generated

    @property
    def outer_shape(self) -> tuple[int, ...]:
        return tuple(d for i, d in enumerate(self.shape) if i not in self.axes)

    @property
    def inner_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes)

    def items(self) -> list[Node]:
        return [n for s in self.stages for n in s.items]

    def copy(self) -> "LoopKernel":
        return LoopKernel(self.shape, self.axes, [Stage(s.kind, list(s.items)) for s in self.stages],
                          self.name)


@dataclass
class MatmulStep:
    node: Node
    a: tuple                       # (array var, transposed, view shape before transposing)
    b: tuple
    name: str = ""
    epilogue: Any = None           # Epilogue: out = alpha * (a @ b) + beta * c, in one GEMM

    @property
    def out(self) -> Var:
        return self.epilogue.out if self.epilogue else self.node.out


@dataclass
class Epilogue:
    """An elementwise tail a GEMM computes itself: scaling and adding a same-shaped array
    (``W - lr * (x.T @ d)`` is one BLAS call that updates W's buffer)."""
    alpha: float
    beta: float
    c: Var | None
    out: Var
    nodes: list


@dataclass
class LoopThenProduct:
    """A threaded loop kernel and the product after it, run as one step: the kernel writes the
    product's left operand row block by row block, and each thread multiplies the block it
    has just written (``threaded.py``'s product tail; ``CpuCodegen.pair_steps`` pairs them).
    The memory plan sees one step: the product's output is never a buffer the kernel reads.
    ``arg``: the kernel's argument that is the product's left operand."""
    loop: LoopKernel
    product: MatmulStep
    arg: int

    @property
    def name(self) -> str:
        return f"{self.loop.name}+{self.product.name}"


@dataclass
class ProductThenLoop:
    """A product and the threaded loop kernel that alone reads its output, run as one step:
    each thread computes the product's rows its chunk of the kernel's rows reads into a buffer
    of its own, then runs the kernel on them (``threaded.py``'s product head; paired by
    ``CpuCodegen.pair_steps``). The output is never stored whole: the memory plan gives it no
    buffer. ``arg``: the kernel's argument that reads the output."""
    product: MatmulStep
    loop: LoopKernel
    arg: int

    @property
    def name(self) -> str:
        return f"{self.product.name}+{self.loop.name}"


@dataclass
class ScatterStep:
    node: Node
    name: str = ""


@dataclass
class HostStep:
    """A primitive without a code-generation rule: its NumPy implementation runs between kernels."""
    node: Node
    name: str = ""


@dataclass
class StageBody:
    kind: str
    lines: list[str]
    reductions: list[tuple]        # (node, acc, value, monoid or "argmax"/"argmin")
    stores: list[tuple]            # (var, local name, "full" | "outer" | "cache")
    loads: set = field(default_factory=set)   # arrays this stage reads (``cost`` counts passes)
    expanded: frozenset = frozenset()   # full-size values this loop stage computed inline


@dataclass
class KernelBody:
    o_vars: list[str]
    r_vars: list[str]
    full_idx: list[str]
    stages: list[StageBody]
    loads: set
    ops: set
    load_offsets: dict


class Plan:
    """The fusion plan of one graph: ordered steps plus the set of values kept in memory."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer: dict[Var, Node] = {o: n for n in graph.nodes for o in n.outs}
        self.consumers: dict[Var, list[Node]] = {}
        for n in graph.nodes:
            for i in n.inputs:
                self.consumers.setdefault(i, []).append(n)
        self.input_set: set[Var] = set(graph.inputs)
        self.steps: list = []
        self.step_of: dict[Var, int] = {}
        self.materialized: set[Var] = set()
        self.needed: set[Var] = set()     # materialized values read outside their own step
        self.const_args: list[Var] = []   # constant arrays the program reads
        self.epilogues: dict[Node, Epilogue] = {}
        self.in_gemm: set[Var] = set()    # values a GEMM epilogue computes without storing
        self.order: dict[Node, int] = {n: i for i, n in enumerate(graph.nodes)}
        self._names: dict[Var, str] = {}
        # the backend multiplies 16-bit float operands itself (cuBLAS's GemmEx: float32
        # accumulation on tensor cores), so a product reads them without a widened copy
        self.narrow_products = False
        self.syntax = None                # the target's syntax table its bodies are written in

    def available_at(self, v: Var) -> int:
        return self.step_of.get(v, -1)

    def array_name(self, v: Var) -> str:
        n = self._names.get(v)
        if n is None:
            if v in self.graph.inputs:
                n = f"in{self.graph.inputs.index(v)}"
            elif v in self.graph.consts:
                n = f"c{len([1 for k in self._names.values() if k.startswith('c')])}"
            else:
                n = f"buf{len([1 for k in self._names.values() if k.startswith('buf')])}"
            self._names[v] = n
        return n

    def kernels(self) -> list:
        return [s for s in self.steps if not isinstance(s, HostStep)]


# ---------------------------------------------------------------- materialization
def _decide_materialized(plan: Plan) -> None:
    g = plan.graph
    mat = plan.materialized
    mat.update(v for v in g.outputs if v not in g.consts and v not in g.inputs)
    for n in g.nodes:
        k = n.prim.lowering.kind
        if k == MATMUL:
            ep = _gemm_epilogue(plan, n)
            if ep is not None:
                plan.epilogues[n] = ep
                plan.in_gemm.update([n.out] + [m.out for m in ep.nodes])
                plan.in_gemm.discard(ep.out)
                mat.add(ep.out)
                if ep.c is not None and ep.c not in g.inputs and ep.c not in g.consts:
                    mat.add(ep.c)   # the GEMM reads c from memory: its producer must store it
        if k not in INLINE:
            mat.update(o for o in n.outs if o not in plan.in_gemm)
            if not n.prim.lowering.reduces:
                for i in (product_inputs(plan, n) if k == MATMUL else n.inputs):
                    if i not in g.consts and i not in g.inputs:
                        if k == MATMUL:
                            if _matmul_source(plan, i) is None:
                                # store the value under its reshapes/transposes: the kernel
                                # computing it writes its natural layout and BLAS gets a view
                                mat.add(_view_base(plan, i))
                            continue
                        mat.add(i)
    # use sizes (backwards): how many elements the consumers compute from each value
    use_size: dict[Var, int] = {}
    for n in reversed(g.nodes):
        for o in n.outs:
            best = o.aval.size
            for c in plan.consumers.get(o, []):
                ck = c.prim.lowering.kind
                if ck == INDEX_MAP and c.out not in mat:
                    best = max(best, use_size.get(c.out, c.out.aval.size))
                elif ck in (SCALAR, GATHER):
                    best = max(best, c.out.aval.size)
            use_size[o] = best
    # ...except a few operations on the arguments alone (a cross-entropy's gradient
    # coefficient from the labels: stored, it sat in whichever kernel came last, and the
    # gradient kernel reading it had to run after that one, apart from the row kernel of its
    # statistics: sparse cross-entropy 8192x1000 took three kernels and 14 ms, now 4 ms)
    arguments = plan.input_set | set(g.consts)
    cost: dict[Var, int] = {}
    for n in g.nodes:
        if n.prim.lowering.kind not in INLINE or n.out in mat or n.out in plan.in_gemm:
            continue
        c = n.prim.lowering.cost + sum(cost.get(i, 0) for i in n.inputs if i not in mat)
        cost[n.out] = c
        uses = len(plan.consumers.get(n.out, []))
        if c > 0 and use_size[n.out] > n.out.aval.size and not (
                c < EXPENSIVE and _arrays_under(plan, n.inputs) <= arguments):
            mat.add(n.out)           # broadcast into a bigger loop: compute once, not per use
        elif uses > 1 and c >= EXPENSIVE:
            mat.add(n.out)


def _view_base(plan: Plan, v: Var) -> Var:
    """The value a matmul operand is a free view of (see ``_matmul_source``): under at most one
    swap of the last two dims, then any row-major reshapes."""
    p = plan.producer.get(v)
    if p is not None and v not in plan.materialized and is_swap(p):
        v = p.inputs[0]
    while True:
        p = plan.producer.get(v)
        if p is None or v in plan.materialized or p.prim.name != "reshape":
            return v
        v = p.inputs[0]


def _matmul_source(plan: Plan, v: Var):
    """``(array, transposed, view shape)`` when matmul operand ``v`` is a free view of a stored
    array: the array itself, a row-major reshape of it, or a swap of its last two dims (the
    operands backward passes produce), so BLAS reads it in place and nothing is copied."""
    g = plan.graph
    if v in plan.materialized or v in plan.input_set or v in g.consts:
        return v, False, v.aval.shape
    p = plan.producer.get(v)
    if p is None:
        return None
    if p.prim.name == "reshape":
        r = _matmul_source(plan, p.inputs[0])
        if r is not None and not r[1]:
            return r[0], False, v.aval.shape
    if is_swap(p):
        r = _matmul_source(plan, p.inputs[0])
        if r is not None and not r[1]:
            return r[0], True, p.inputs[0].aval.shape
    return None


def product_inputs(plan: Plan, n: Node) -> list[Var]:
    """The arrays a product reads: its operands, or, where the backend multiplies 16-bit
    floats itself (``plan.narrow_products``) and both operands are float32 widenings of one
    16-bit type, the 16-bit arrays they widen (a float16/bfloat16 product accumulates in
    float32 either way: ``core.bind`` widened it)."""
    if not plan.narrow_products:
        return list(n.inputs)
    srcs = []
    for v in n.inputs:
        p = plan.producer.get(v)
        if p is None or p.prim.name != "convert" or not is_narrow(p.inputs[0].aval.dtype):
            return list(n.inputs)
        srcs.append(p.inputs[0])
    if len({s.aval.dtype for s in srcs}) != 1:
        return list(n.inputs)
    return srcs


def _uniform_scalar(plan: Plan, v: Var) -> float | None:
    u = uniform_value(plan.graph.consts, plan.producer, v)
    return None if u is None else float(u)


def _gemm_epilogue(plan: Plan, n: Node) -> Epilogue | None:
    """Match ``[beta * c +] alpha * matmul(a, b)`` where each intermediate has one use."""
    g = plan.graph
    if n.out.aval.ndim != 2 or n.out.aval.dtype.kind != "f":
        return None

    def only_consumer(v):
        cs = plan.consumers.get(v, [])
        return cs[0] if len(cs) == 1 and v not in g.outputs else None

    v, alpha, fused = n.out, 1.0, []
    c = only_consumer(v)
    if c is not None and c.prim.name == "mul" and c.out.aval.shape == v.aval.shape:
        other = c.inputs[1] if c.inputs[0] is v else c.inputs[0]
        s = _uniform_scalar(plan, other) if other is not v else None
        if s is not None:
            alpha *= s
            fused.append(c)
            v = c.out
            c = only_consumer(v)
    if c is not None and c.prim.name in ("add", "sub") and c.out.aval == v.aval:
        other = c.inputs[1] if c.inputs[0] is v else c.inputs[0]
        ready = other in plan.input_set or other in g.consts or (
            other in plan.producer and plan.order[plan.producer[other]] < plan.order[n])
        if other is not v and other.aval == v.aval and ready and other not in plan.in_gemm:
            beta = 1.0
            if c.prim.name == "sub":
                if c.inputs[0] is other:
                    alpha = -alpha
                else:
                    beta = -1.0
            return Epilogue(alpha, beta, other, c.out, fused + [c])
    if fused:
        return Epilogue(alpha, 0.0, None, v, fused)
    return None


def _reduced_axes(n: Node) -> tuple[int, ...]:
    """The axes a reduction node reduces (``axes`` for monoids, ``axis`` for argmax/argmin)."""
    return tuple(n.params["axes"]) if "axes" in n.params else (n.params["axis"],)


# ---------------------------------------------------------------- kernel bodies
def build_body(plan: Plan, k: LoopKernel, pos: int, ctx, copy: str = "",
               acc_reads: str = "", row_cache: dict | None = None) -> KernelBody:
    """Generate the statements of every stage; raises CannotFuse if the kernel is infeasible.

    ``copy``: a suffix for the names a loop stage binds per element (the variables of the dims
    it iterates, its locals), for a backend that unrolls the loop: each copy of the loop body
    is generated with its own names, rather than renamed in the text. ``acc_reads``: a suffix
    for the name through which later stages read an accumulator (a backend that keeps the
    accumulators in an array reads each element into a local first). ``row_cache``: values
    kept between loop stages (``cache_rows``), value -> (output var, first stage, last)."""
    row_cache = row_cache or {}
    o_shape, r_shape = k.outer_shape, k.inner_shape
    o_copy, r_copy = ("", copy) if k.axes else (copy, "")
    o_vars = [f"o{i}{o_copy}" if d != 1 else "0" for i, d in enumerate(o_shape)]
    r_vars = [f"r{i}{r_copy}" if d != 1 else "0" for i, d in enumerate(r_shape)]
    full, oi, ri = [], iter(o_vars), iter(r_vars)
    for d in range(len(k.shape)):
        full.append(next(ri) if d in k.axes else next(oi))
    aligned: dict[Var, str] = {}
    loads: set = set()
    ops: set = set()
    load_offsets: dict = {}
    stages = []
    stored_full: set = set()       # values earlier loop stages of this kernel wrote to memory
    for si, st in enumerate(k.stages):
        full_locals: dict[Var, str] = {}
        em = Emitter(plan, pos, full if st.kind == "loop" else None, o_vars, o_shape,
                     dict(aligned), full_locals, ctx, prefix=f"s{si}_",
                     stored_here=frozenset(stored_full),
                     suffix=copy if st.kind == "loop" else "",
                     cached={v: w for v, (w, first, last) in row_cache.items()
                             if first < si <= last} if st.kind == "loop" else None)
        reds, stores, new_aligned = [], [], {}
        for n in st.items:
            v = n.out
            if st.kind == "loop" and n.prim.lowering.reduces:
                src = n.inputs[0]
                if src.aval.shape != k.shape or _reduced_axes(n) != k.axes:
                    raise CannotFuse("reduction over a different space")
                val = em.value(src, full)
                acc = f"acc{si}_{len(reds)}"
                low = n.prim.lowering
                reds.append((n, acc, val,
                             "arg" + low.monoid if low.kind == ARG_REDUCE else low.monoid))
                new_aligned[v] = acc + acc_reads
                ops.add(n)
            elif st.kind == "loop":
                if v.aval.shape != k.shape:
                    raise CannotFuse("store of a different shape")
                val = em.compute(v, full)
                full_locals[v] = val
                stores.append((v, val, "full"))
            else:
                nonunit = [d for d in v.aval.shape if d != 1]
                if nonunit != [d for d in o_shape if d != 1]:
                    raise CannotFuse("scalar stage value is not per outer index")
                idx, it = [], iter([o for o, d in zip(o_vars, o_shape) if d != 1])
                for d in v.aval.shape:
                    idx.append(next(it) if d != 1 else "0")
                val = em.compute(v, idx)
                em.aligned_locals[v] = val
                new_aligned[v] = val
                stores.append((v, val, "outer"))
        for v, (w, first, _) in row_cache.items():
            if first == si:
                stores.append((w, em.memo[(v, norm_idx(full, v.aval.shape))], "cache"))
        aligned.update(new_aligned)
        loads |= em.loads
        ops |= em.ops
        for v, offs in em.load_offsets.items():
            load_offsets.setdefault(v, set()).update(offs)
        expanded = _expanded(plan, k, em, full) if st.kind == "loop" else frozenset()
        stages.append(StageBody(st.kind, em.lines, reds, stores, set(em.loads), expanded))
        if st.kind == "loop":
            stored_full.update(v for v, _, where in stores if where == "full")  # not "cache"
    return KernelBody(o_vars, r_vars, full, stages, loads, ops, load_offsets)


def _expanded(plan: Plan, k: LoopKernel, em: Emitter, full: list[str]) -> frozenset:
    """The full-size elementwise values a loop stage computed (not loaded) at its own index."""
    own = tuple(full)
    return frozenset(
        v for (v, idx) in em.memo if v.aval.shape == k.shape and idx == norm_idx(own, k.shape)
        and v not in plan.materialized and v not in em.cached and v in plan.producer
        and plan.producer[v].prim.lowering.kind == SCALAR)


ROW_CACHE_MIN_COST = 4   # inline cost (in adds) from which a later stage reloads, not recomputes


def cache_rows(plan: Plan, k: LoopKernel, pos: int, ctx) -> None:
    """Compute a costly value once per row where several loop stages of a row kernel use it.

    Softmax and cross-entropy kernels compute ``exp(z - max)`` in the stage summing it and
    again in the stage writing the result (the probabilities, the gradient). The first stage
    now also writes it, at its own index, into that result's output buffer, and the later
    stages read it back (from L1: a row was just written) before overwriting it: one
    transcendental per element instead of two, no extra memory. Safe because the stages of
    one outer index run in order with the same index, a kernel with stages is never written
    in place of its input, and nothing reads the output before the stage that writes it.
    Greedy: the costliest shared value first, one per output buffer."""
    cache: dict = {}
    for _ in range(4):
        pick = _row_cache_pick(plan, k, cache)
        if pick is None:
            return
        v, w, first, last = pick
        cache[v] = (w, first, last)
        try:
            body = build_body(plan, k, pos, ctx, row_cache=cache)
        except CannotFuse:
            return
        k.body = body


def _row_cache_pick(plan: Plan, k: LoopKernel, cache: dict):
    """(value, output, first stage, last stage) of the costliest value a later loop stage
    recomputes, with a free output buffer of its dtype that stage writes; or None."""
    stages = k.body.stages
    taken = {w for w, _, _ in cache.values()}
    loaded = {plan.array_name(v) for v in k.body.loads}
    best, best_cost = None, ROW_CACHE_MIN_COST - 1
    for last, st in enumerate(stages):
        outs = [w for w, _, where in st.stores if where == "full" and w in plan.needed
                and w not in taken and not is_narrow(w.aval.dtype)
                and plan.array_name(w) not in loaded]
        if st.kind != "loop" or not outs:
            continue
        for v in st.expanded - cache.keys():
            first = next((i for i in range(last) if v in stages[i].expanded), None)
            w = next((w for w in outs if w.aval.dtype == v.aval.dtype), None)
            if first is None or w is None:
                continue
            c = _inline_cost(plan, plan.producer[v])
            if c > best_cost or c == best_cost and best is not None and v.id < best[0].id:
                best, best_cost = (v, w, first, last), c
    return best


# ---------------------------------------------------------------- grouping
def _insert(k: LoopKernel, n: Node, kind: str):
    """Candidates placing ``n`` in each existing stage of ``kind`` (earliest first), then in a new
    stage at the end; build_body rejects placements whose inputs aren't ready there."""
    for i, st in enumerate(k.stages):
        if st.kind == kind:
            c = k.copy()
            c.stages[i].items.append(n)
            yield c
    c = k.copy()
    c.stages.append(Stage(kind, [n]))
    yield c


def _options(k: LoopKernel, n: Node):
    """Ways to add node ``n`` to kernel ``k``."""
    if n.prim.lowering.reduces:
        src = n.inputs[0].aval.shape
        axes = _reduced_axes(n)
        if src != k.shape:
            return
        if k.axes == axes:
            yield from _insert(k, n, "loop")
        elif k.axes == () and len(k.stages) == 1 and \
                not any(i.prim.lowering.reduces for i in k.stages[0].items):
            c = k.copy()
            c.axes = axes
            c.stages[-1].items.append(n)
            yield c
        return
    shape = n.out.aval.shape
    if shape == k.shape:
        if k.axes:
            yield from _insert(k, n, "loop")
        else:
            c = k.copy()
            c.stages[-1].items.append(n)
            yield c
    elif k.axes and [d for d in shape if d != 1] == [d for d in k.outer_shape if d != 1]:
        yield from _insert(k, n, "scalar")


def _array_deps(plan: Plan, n: Node) -> set[Var]:
    """Materialized values (or inputs) that computing ``n`` inline reads."""
    return _arrays_under(plan, n.inputs)


def _arrays_under(plan: Plan, values) -> set[Var]:
    """Materialized values (or inputs) that computing ``values`` inline reads."""
    out, stack, seen = set(), list(values), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in plan.materialized or v in plan.graph.inputs or v in plan.graph.consts:
            out.add(v)
            continue
        p = plan.producer.get(v)
        if p is not None:
            stack.extend(p.inputs)
    return out


def make_plan(graph: Graph, ctx, max_lookback: int = 6) -> Plan:
    plan = Plan(graph)
    plan.narrow_products = getattr(ctx, "narrow_products", False)
    plan.syntax = ctx
    after = getattr(graph, "schedule_after", {})
    _decide_materialized(plan)
    for n in graph.nodes:
        if (not any(o in plan.materialized for o in n.outs) and n not in plan.epilogues) or \
                all(o in plan.step_of for o in n.outs):
            continue
        kind = n.prim.lowering.kind
        if kind == MATMUL:
            ops = [_matmul_source(plan, i) for i in product_inputs(plan, n)]
            assert None not in ops, "matmul operand is neither stored nor a view of a stored array"
            ep = plan.epilogues.get(n)
            if ep is not None and ep.c is not None and ep.c not in plan.input_set \
                    and ep.c not in graph.consts:
                plan.materialized.add(ep.c)
            _append(plan, MatmulStep(n, ops[0], ops[1], epilogue=ep))
            continue
        if kind == SCATTER_ADD:
            _append(plan, ScatterStep(n))
            continue
        if kind == HOST:
            _append(plan, HostStep(n))
            continue
        deps = _array_deps(plan, n)
        min_pos = max([plan.available_at(d) for d in deps], default=-1)
        if n in after:      # behind an optimization barrier: not before what it waited for
            min_pos = max([min_pos] + [plan.available_at(d) for d in _arrays_under(plan, after[n])])
        placed = False
        lowest = max(min_pos, len(plan.steps) - max_lookback, 0)
        for pos in _by_affinity(plan, deps, range(len(plan.steps) - 1, lowest - 1, -1)):
            k = plan.steps[pos]
            for cand in _options(k, n):
                try:
                    cand.body = build_body(plan, cand, pos, ctx)
                except CannotFuse:
                    continue
                plan.steps[pos] = cand
                for o in n.outs:
                    plan.step_of[o] = pos
                placed = True
                break
            if placed:
                break
        if not placed:
            if n.prim.lowering.reduces:
                axes = _reduced_axes(n)
                k = LoopKernel(n.inputs[0].aval.shape, axes, [Stage("loop", [n])])
            else:
                k = LoopKernel(n.out.aval.shape, (), [Stage("loop", [n])])
            k.body = build_body(plan, k, len(plan.steps), ctx)
            _append(plan, k)
    _recompute_in_kernel(plan, ctx)
    _finish(plan, ctx)
    return plan


RECOMPUTE_MAX = 24     # inline cost (in adds) up to which loop kernels recompute a stored value


def _readers(plan: Plan) -> dict[Var, set[int]]:
    """The steps that read each stored value from memory."""
    out: dict[Var, set[int]] = {}
    for pos, s in enumerate(plan.steps):
        if isinstance(s, LoopKernel):
            vs = s.body.loads
        elif isinstance(s, MatmulStep):
            vs = {s.a[0], s.b[0]} | ({s.epilogue.c} if s.epilogue and s.epilogue.c else set())
        else:
            vs = set(s.node.inputs)
        for v in vs:
            out.setdefault(v, set()).add(pos)
    return out


def _inline_cost(plan: Plan, n: Node) -> int:
    cost, stack, seen = 0, [n], set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        cost += m.prim.lowering.cost
        for i in m.inputs:
            p = plan.producer.get(i)
            if p is not None and i not in plan.materialized and p.prim.lowering.kind in INLINE:
                stack.append(p)
    return cost


def _recompute_in_kernel(plan: Plan, ctx) -> None:
    """Stop storing full-size elementwise values that loop kernels can recompute for less
    traffic than the store and the re-reads. ``_decide_materialized`` stores a value with
    several uses so as not to compute it twice; when its uses landed in later stages of the row
    kernel computing it, or in another loop kernel that already reads what the value is
    computed from (a layernorm's column sums recompute ``dy`` from ``x`` and the row
    statistics), storing it moves two full arrays where recomputing a few operations moves
    none (or less than the value's size). The same holds for an elementwise kernel's value
    read by later row kernels that read its operands anyway (a tanh-GELU's tanh, recomputed
    by the backward loop from the product it reads: one full array less written, kept and
    read back). A value a rebuilt kernel cannot compute inline, or whose kernel would then
    store nothing, stays stored."""
    g = plan.graph
    readers = _readers(plan)
    outs = set(g.outputs)
    for pos in range(len(plan.steps)):
        k = plan.steps[pos]
        if not isinstance(k, LoopKernel):
            continue
        full = [m for st in k.stages if st.kind == "loop" for m in st.items]
        for n in [m for m in full if not m.prim.lowering.reduces and m.out.aval.shape == k.shape]:
            v = n.out
            if v in outs or len(n.outs) != 1 or n.prim.lowering.kind != SCALAR or \
                    _inline_cost(plan, n) > RECOMPUTE_MAX:
                continue
            if not readers.get(v):
                continue        # read nowhere from memory: a local of its stage, never stored
            others = sorted(readers[v] - {pos})
            if not all(isinstance(plan.steps[r], LoopKernel) for r in others):
                continue
            deps = _array_deps(plan, n)
            size = int(v.aval.size) * v.aval.dtype.itemsize
            if any(sum(int(d.aval.size) * d.aval.dtype.itemsize for d in deps
                       if d not in plan.steps[r].body.loads and plan.step_of.get(d) != r) >= size
                   for r in others):
                continue
            trial = plan.steps[pos].copy()
            for st in trial.stages:
                if n in st.items:
                    st.items.remove(n)
            trial.stages = [st for st in trial.stages if st.items]
            plan.materialized.discard(v)
            rebuilt = {}
            try:
                trial.body = build_body(plan, trial, pos, ctx)
                if not any(st.stores or st.reductions for st in trial.body.stages):
                    # its one stored value, recomputed by every reader: the kernel would be
                    # left computing nothing (an elementwise kernel of that value alone)
                    raise CannotFuse("nothing left to store")
                for r in others:
                    c = plan.steps[r].copy()
                    c.body = build_body(plan, c, r, ctx)
                    rebuilt[r] = c
            except CannotFuse:
                plan.materialized.add(v)
                continue
            plan.steps[pos] = k = trial
            for r, c in rebuilt.items():
                plan.steps[r] = c
            readers = _readers(plan)


def _by_affinity(plan: Plan, deps: set, positions) -> list[int]:
    """The loop kernels a node may join, best first: the one computing most of the stored
    values the node reads (it has them in registers, and whatever the node feeds will find
    its inputs there too), the latest among equals. Without this a backward elementwise value
    went to whichever kernel came last (a column reduction), splitting the row computation it
    belongs to into a second pass over the same rows."""
    made: dict[int, int] = {}
    for d in deps:
        p = plan.step_of.get(d)
        if p is not None:
            made[p] = made.get(p, 0) + 1
    ks = [p for p in positions if isinstance(plan.steps[p], LoopKernel)]
    return sorted(ks, key=lambda p: (-made.get(p, 0), -p))


def _append(plan: Plan, step) -> None:
    plan.steps.append(step)
    outs = [step.out] if isinstance(step, MatmulStep) else \
        (step.node.outs if hasattr(step, "node") else [])
    for o in outs:
        plan.step_of[o] = len(plan.steps) - 1
    if isinstance(step, LoopKernel):
        for n in step.items():
            for o in n.outs:
                plan.step_of[o] = len(plan.steps) - 1


def _finish(plan: Plan, ctx) -> None:
    """Regenerate bodies in final position, then record which values must be stored."""
    g = plan.graph
    needed = set(g.outputs)
    for pos, s in enumerate(plan.steps):
        if isinstance(s, LoopKernel):
            s.body = build_body(plan, s, pos, ctx)
            needed |= s.body.loads
        elif isinstance(s, MatmulStep):
            needed |= {s.a[0], s.b[0]}
            if s.epilogue is not None and s.epilogue.c is not None:
                needed.add(s.epilogue.c)
        else:
            needed |= set(s.node.inputs)
    plan.needed = {v for v in needed if v not in g.inputs and v not in g.consts}
    plan.const_args = [v for v in g.consts if v in needed]
    if getattr(ctx, "row_cache", False):
        for pos, s in enumerate(plan.steps):
            if isinstance(s, LoopKernel) and sum(st.kind == "loop" for st in s.stages) > 1:
                cache_rows(plan, s, pos, ctx)
    for i, s in enumerate(plan.steps):
        kind = type(s).__name__.replace("Step", "").replace("LoopKernel", "loop").lower()
        s.name = f"k{i}_{kind}"


def kernel_ops(step) -> list[Node]:
    """The graph nodes computed by a step (fused ones included)."""
    if isinstance(step, LoopThenProduct):
        return kernel_ops(step.loop) + kernel_ops(step.product)
    if isinstance(step, ProductThenLoop):
        return kernel_ops(step.product) + kernel_ops(step.loop)
    if isinstance(step, LoopKernel):
        items = step.items()
        ops = set(step.body.ops) | set(items)
        return [n for n in _order(ops)]
    if isinstance(step, MatmulStep) and step.epilogue is not None:
        return [step.node] + list(step.epilogue.nodes)
    return [step.node]


def _order(nodes):
    return sorted(nodes, key=lambda n: n.outs[0].id)
