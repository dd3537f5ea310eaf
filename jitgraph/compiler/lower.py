"""The pipeline's first stage: rewrite a traced graph into what the backends compile.

Calls to ``custom_vjp`` functions are inlined (a compiled program needs no calls), a primal
scan and its VJP's residual scan become one loop, and stacked outputs nothing reads go.
"""
from __future__ import annotations

from ..control_flow import scan_p
from ..core import Graph, Node, Var
from ..passes import optimize


def lower(graph: Graph) -> Graph:
    """Every rewrite of this stage, in order."""
    return lower_control_flow(inline_calls(graph))


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
