"""The pipeline's first stage: rewrite a traced graph into what the backends compile.

Calls to ``custom_vjp`` functions are inlined (a compiled program needs no calls), patterns
with a fused primitive are rewritten to it (the registered ``rewrite.FusedOp`` records:
attention, linear cross-entropy, whose forward and backward become one step when they can:
each record's ``merge``), a primal
scan and its VJP's residual scan become one loop, stacked outputs nothing reads go, and a
scatter-add that puts one value per row into zeros (the VJP of ``take_along_axis``) becomes an
elementwise select that fuses into its consumer, and a total reduction of an array that is also
reduced by rows becomes row partials (computed in that row kernel) and a sum of them. Last,
optimization barriers (a checkpoint's recomputation reads its inputs through one) are removed,
and the order they imply is kept for fusion as ``graph.schedule_after``.
"""
from __future__ import annotations

import numpy as np

from ..control_flow import optimization_barrier_p, scan_p
from ..core import PRIMITIVES, REDUCE, SCATTER_ADD, Aval, Graph, Node, Var
from ..passes import optimize
from ..rewrite import merged, rewritten


def lower(graph: Graph) -> Graph:
    """Every rewrite of this stage, in order."""
    return strip_barriers(split_total_reductions(scatter_to_select(lower_control_flow(
        merged(rewritten(inline_calls(graph)))))))


def inline_calls(g: Graph) -> Graph:
    """Replace ``custom_vjp_call`` nodes by their forward graphs (the compiler needs no calls)."""
    if not any(n.prim.kind == "call" for n in g.nodes):
        return g
    nodes: list[Node] = []
    consts = dict(g.consts)
    subst: dict[Var, Var] = {}
    for n in g.nodes:
        ins = [subst.get(v, v) for v in n.inputs]
        if n.prim.kind != "call":
            nodes.append(Node(n.prim, ins, n.params, n.outs, n.source))
            continue
        sub = inline_calls(n.params["_graph"])
        env = dict(zip(sub.inputs, ins))
        for v, c in sub.consts.items():
            nv = Var(v.aval)
            consts[nv] = c
            env[v] = nv
        for m in sub.nodes:
            outs = [Var(o.aval) for o in m.outs]
            nodes.append(Node(m.prim, [env[v] for v in m.inputs], m.params, outs, m.source))
            env.update(zip(m.outs, outs))
        for o, so in zip(n.outs, sub.outputs):
            subst[o] = env[so]
    outs = [subst.get(v, v) for v in g.outputs]
    return optimize(Graph(g.inputs, nodes, outs, consts, g.in_tree, g.out_tree))


def prune_scans(g: Graph) -> Graph:
    """Drop the stacked outputs of scans that nothing reads, and what computes them in the
    body (a VJP scan computes the xs' cotangents whether or not xs are differentiated)."""
    if not any(n.prim is scan_p for n in g.nodes):
        return g
    used = set(g.outputs)
    for n in g.nodes:
        used.update(n.inputs)
    nodes = []
    for n in g.nodes:
        nk = n.params["num_carry"] if n.prim is scan_p else 0
        keep = [j for j, o in enumerate(n.outs) if j < nk or o in used]
        if n.prim is not scan_p or len(keep) == len(n.outs):
            nodes.append(n)
            continue
        body = n.params["_body"]
        pruned = optimize(Graph(body.inputs, body.nodes, [body.outputs[j] for j in keep],
                                body.consts))
        nodes.append(Node(n.prim, n.inputs, dict(n.params, _body=pruned),
                          [n.outs[j] for j in keep], n.source))
    return Graph(g.inputs, nodes, g.outputs, g.consts, g.in_tree, g.out_tree)


def merge_residual_scans(g: Graph) -> Graph:
    """Reverse mode adds, next to a primal scan, a scan of the same operands whose body
    ``extends`` the primal body with residual outputs (``_scan_vjp``). Its first results are
    the primal scan's: keep it alone, at the primal scan's place, so a compiled gradient runs
    the forward loop once."""
    scans = [n for n in g.nodes if n.prim is scan_p]
    replace: dict = {}
    for e in scans:
        base = getattr(e.params["_body"], "extends", None)
        if base is None:
            continue
        for n in scans:
            if n is not e and n not in replace and n.params["_body"] is base and \
                    n.inputs == e.inputs and all(n.params[k] == e.params[k] for k in
                                                 ("num_consts", "num_carry", "length", "reverse")):
                replace[n] = e
                break
    if not replace:
        return g
    dropped = set(replace.values())
    subst: dict = {}
    nodes = []
    for n in g.nodes:
        if n in dropped:
            continue
        chain = [n]
        while chain[-1] in replace:         # a residual scan may itself be extended (grad of grad)
            chain.append(replace[chain[-1]])
        m = chain[-1]
        nodes.append(Node(m.prim, [subst.get(v, v) for v in m.inputs], m.params, m.outs,
                          m.source))
        for k in chain[:-1]:
            subst.update(zip(k.outs, m.outs))
    return Graph(g.inputs, nodes, [subst.get(v, v) for v in g.outputs], g.consts,
                 g.in_tree, g.out_tree)


def lower_control_flow(g: Graph) -> Graph:
    """The compiler's control-flow rewrites: merge each primal scan with its VJP's residual
    scan, then drop stacked outputs nothing reads."""
    return prune_scans(merge_residual_scans(g))


# ---------------------------------------------------------------- one value per row
def _positional(c, d: int, n: int, nd: int) -> bool:
    """Whether constant index array ``c`` is ``arange(n)`` laid along dim ``d`` of ``nd`` (the
    index ``take_along_axis`` passes for every dim but its axis): index = position."""
    if c is None or c.ndim != nd or c.shape[d] != n or \
            any(s != 1 for i, s in enumerate(c.shape) if i != d):
        return False
    return bool(np.array_equal(c.reshape(-1), np.arange(n)))


def _one_per_row(g: Graph, n: Node):
    """``axis`` when scatter-add node ``n`` writes exactly one value per row along ``axis`` of
    its zeros: every other index array is positional and the index along ``axis`` has size 1
    there (``x[..., labels[..., None], ...]`` transposed), else None."""
    shape = tuple(n.params["shape"])
    upd, idx = n.inputs[0], n.inputs[1:]
    nd = len(shape)
    if len(idx) != nd:
        return None
    free = [d for d in range(nd) if not _positional(g.consts.get(idx[d]), d, shape[d], nd)]
    if len(free) != 1:
        return None
    a = free[0]
    ia = idx[a].aval
    if ia.ndim != nd or ia.shape[a] != 1 or ia.dtype.kind not in "iu" or \
            any(s not in (1, shape[d]) for d, s in enumerate(ia.shape)) or \
            np.iinfo(ia.dtype).max < shape[a]:
        return None
    want = tuple(1 if d == a else s for d, s in enumerate(shape))
    return a if upd.aval.shape == want else None


def scatter_to_select(g: Graph) -> Graph:
    """``scatter_add(u, rows..., labels, shape)`` with one index per row along one axis (the VJP
    of ``take_along_axis(x, labels[..., None], axis)``, of a picked logit in cross-entropy) is
    ``select(arange(n) == labels, u, 0)``: an elementwise value the consumer computes in its own
    loop, where the scatter wrote a dense buffer of zeros plus the updates that the consumer
    then read back. The labels are normalized as the scatter normalizes them (negative ones
    count from the end, then clamped), so the two agree for every index."""
    if not any(n.prim.lowering.kind == SCATTER_ADD for n in g.nodes):
        return g
    consts = dict(g.consts)
    nodes: list[Node] = []
    subst: dict[Var, Var] = {}

    source = [None]         # the scatter being rewritten: its nodes keep its provenance

    def emit(name, ins, **params):
        prim = PRIMITIVES[name]
        out = Var(prim.abstract_eval(*[i.aval for i in ins], **params))
        nodes.append(Node(prim, ins, params, [out], source[0]))
        return out

    def const(value, dtype):
        v = Var(Aval((), np.dtype(dtype)))
        consts[v] = np.asarray(value, dtype)
        return v

    changed = False
    for n in g.nodes:
        ins = [subst.get(v, v) for v in n.inputs]
        a = _one_per_row(g, n) if n.prim.lowering.kind == SCATTER_ADD else None
        if a is None:
            nodes.append(Node(n.prim, ins, n.params, n.outs, n.source))
            continue
        changed = True
        source[0] = n.source
        shape = tuple(n.params["shape"])
        upd, lab = ins[0], ins[1 + a]
        size, dt = shape[a], lab.aval.dtype
        if dt.kind == "i":
            lab = emit("select", [emit("lt", [lab, const(0, dt)]),
                                  emit("add", [lab, const(size, dt)]), lab])
        lab = emit("min", [emit("max", [lab, const(0, dt)]), const(max(size - 1, 0), dt)])
        iota = Var(Aval(tuple(size if d == a else 1 for d in range(len(shape))), dt))
        consts[iota] = np.arange(size, dtype=dt).reshape(iota.aval.shape)
        hit = emit("eq", [iota, lab])
        out = emit("select", [hit, upd, const(0, upd.aval.dtype)])
        if out.aval.shape != shape:
            out = emit("broadcast_to", [out], shape=shape)
        subst[n.out] = out
    if not changed:
        return g
    outs = [subst.get(v, v) for v in g.outputs]
    return optimize(Graph(g.inputs, nodes, outs, consts, g.in_tree, g.out_tree))


# ---------------------------------------------------------------- total reductions by rows
def _row_axes(g: Graph) -> dict:
    """shape -> the trailing axes some monoid reduction of an array of that shape reduces."""
    out: dict = {}
    for n in g.nodes:
        low = n.prim.lowering
        if low.kind != REDUCE or "axes" not in n.params:
            continue
        shape, axes = n.inputs[0].aval.shape, tuple(sorted(n.params["axes"]))
        nd = len(shape)
        if 0 < len(axes) < nd and axes == tuple(range(nd - len(axes), nd)):
            out.setdefault(shape, axes)
    return out


def split_total_reductions(g: Graph) -> Graph:
    """``reduce(x, all axes)`` -> ``reduce(reduce(x, row axes), the rest)`` when the graph also
    reduces arrays of ``x``'s shape over those trailing (row) axes. A total reduction is its own
    kernel (its iteration space has no outer index), so a loss summed over a whole (N, M) array
    beside row statistics of it (layernorm, softmax) read the array a second time; as a row
    reduction it is one more accumulator of the row kernel, and the sum of N partials is a tiny
    kernel. (Summation order changes: per row, then over rows.)"""
    rows = None
    nodes: list[Node] = []
    changed = False
    for n in g.nodes:
        low = n.prim.lowering
        x = n.inputs[0] if n.inputs else None
        if low.kind != REDUCE or "axes" not in n.params or x.aval.ndim < 2 or \
                tuple(sorted(n.params["axes"])) != tuple(range(x.aval.ndim)):
            nodes.append(n)
            continue
        rows = _row_axes(g) if rows is None else rows
        axes = rows.get(x.aval.shape)
        if axes is None:
            nodes.append(n)
            continue
        changed = True
        part_aval = n.prim.abstract_eval(x.aval, **dict(n.params, axes=axes))
        part = Var(part_aval)
        nodes.append(Node(n.prim, [x], dict(n.params, axes=axes), [part], n.source))
        rest = tuple(range(part_aval.ndim))
        nodes.append(Node(n.prim, [part], dict(n.params, axes=rest), n.outs, n.source))
    if not changed:
        return g
    return Graph(g.inputs, nodes, g.outputs, g.consts, g.in_tree, g.out_tree)


# ---------------------------------------------------------------- optimization barriers
def strip_barriers(g: Graph) -> Graph:
    """Remove ``optimization_barrier`` nodes once nothing simplifies the graph any more. What
    they ordered stays ordered: ``schedule_after[node]`` lists the values every barrier
    upstream of ``node`` took (a checkpoint's inputs and cotangents), and fusion places the
    node in no step before those values exist (``fusion.make_plan``), so a checkpoint's
    recomputation runs in the backward pass, where its values are short-lived."""
    if not any(n.prim is optimization_barrier_p for n in g.nodes):
        return g
    subst: dict[Var, Var] = {}
    upstream: dict[Var, frozenset] = {}
    barriers: list[tuple] = []
    nodes: list[Node] = []
    after: dict[Node, tuple] = {}
    for n in g.nodes:
        ins = [subst.get(v, v) for v in n.inputs]
        ups = frozenset().union(*[upstream.get(v, frozenset()) for v in n.inputs])
        if n.prim is optimization_barrier_p:
            ups = ups | {len(barriers)}
            barriers.append(tuple(ins))
            subst.update(zip(n.outs, ins))
            upstream.update((o, ups) for o in n.outs)
            continue
        m = Node(n.prim, ins, n.params, n.outs, n.source)
        nodes.append(m)
        if ups:
            upstream.update((o, ups) for o in n.outs)
            after[m] = tuple(v for b in sorted(ups) for v in barriers[b])
    out = Graph(g.inputs, nodes, [subst.get(v, v) for v in g.outputs], g.consts, g.in_tree,
                g.out_tree)
    out.schedule_after = after
    return out
