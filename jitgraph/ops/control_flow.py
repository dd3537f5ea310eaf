"""Control-flow primitives: ``cond`` (n-way, for cond and switch), ``scan``, ``while`` and
``remat`` (checkpoint). Each node holds closed sub-graphs in its parameters (names starting
with ``_``, so printing skips them); values the user's functions close over are explicit
operands, so every rule only evaluates graphs on the values it is given.

* ``cond``: operands ``(index, *ops)``; ``_branches`` take ``ops`` and return the same avals.
* ``scan``: operands ``(*consts, *init, *xs)``; ``_body(consts, carry, x) -> (carry, y)``;
  results ``(*final carry, *stacked ys)``.
* ``while``: operands ``(*cond consts, *body consts, *init)``; ``_cond(cc, carry) -> bool``,
  ``_body(bc, carry) -> carry``. Forward mode only.
* ``remat``: operands are ``_graph``'s inputs; its VJP recomputes ``_graph`` in the backward pass.

The reference implementations loop in Python over the reference interpreter (the ground
truth); ``compiled_impl`` is what a compiled program runs instead: the same loop around the
sub-graphs compiled once (``jitgraph.compiler``), whatever the trip count.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import numpy as np

from .. import dtypes
from ..core import Aval, Graph, Primitive, Tracer, Var, aval_of, bind, register
from .. import numpy as jnp


# ------------------------------------------------------------------ graph helpers
def run_graph(graph: Graph, args: Sequence[Any]) -> list:
    from ..interpreter import run
    return run(graph, list(args))


def eval_graph(graph: Graph, args: Sequence[Any]) -> list:
    from ..autodiff import eval_graph as ev
    return ev(graph, list(args))


def trace_flat(fn: Callable, avals: Sequence[Aval], what: str):
    """Trace ``fn(*tracers) -> list`` abstractly: (graph, captured outer tracers). The graph's
    inputs are one per aval, then one per captured value."""
    from ..custom import _trace_flat
    return _trace_flat(fn, avals, what)


def closed(fn: Callable, avals: Sequence[Aval], what: str) -> Graph:
    """``trace_flat`` for functions built from closed graphs (nothing to capture), optimized."""
    from ..passes import optimize
    g, caps = trace_flat(fn, avals, what)
    assert not caps, "internal error: a derived control-flow body closed over a traced value"
    return optimize(g)


def _opt(g: Graph) -> Graph:
    from ..passes import optimize
    return optimize(g)


def permuted(g: Graph, in_perm: Sequence[int], out_sel: Sequence[int]) -> Graph:
    """The same computation with its inputs reordered and a selection of its outputs."""
    return Graph([g.inputs[i] for i in in_perm], g.nodes, [g.outputs[j] for j in out_sel],
                 g.consts)


def is_float(x) -> bool:
    return dtypes.is_float((x.aval if isinstance(x, (Var, Tracer)) else aval_of(x)).dtype)


def _zeros_like(x):
    return np.zeros(tuple(x.shape), x.dtype)


def graph_fingerprint(g: Graph) -> str:
    """A hash of a graph's structure (primitives, parameters, wiring, avals, constants) that is
    the same in every process: it names a control-flow node's bodies in generated source, so
    programs with different bodies never share a cache entry."""
    h = hashlib.sha256()
    index = {v: i for i, v in enumerate(g.inputs)}
    for v, c in g.consts.items():
        index[v] = len(index)
        h.update(f"c{v.aval}{c.shape}".encode())
        h.update(np.ascontiguousarray(c).tobytes())
    h.update(repr([v.aval for v in g.inputs]).encode())
    for n in g.nodes:
        ps = []
        for k in sorted(n.params):
            p = n.params[k]
            if isinstance(p, Graph):
                p = graph_fingerprint(p)
            elif isinstance(p, tuple) and p and isinstance(p[0], Graph):
                p = tuple(graph_fingerprint(x) for x in p)
            ps.append((k, repr(p)))
        h.update(repr((n.prim.name, ps, [index.get(v, -1) for v in n.inputs],
                       [o.aval for o in n.outs])).encode())
        for o in n.outs:
            index[o] = len(index)
    h.update(repr([index.get(v, -1) for v in g.outputs]).encode())
    return h.hexdigest()[:16]


def _batch_size(args, dims) -> int:
    return next(int(a.shape[d]) for a, d in zip(args, dims) if d is not None)


def _to_front(x, d):
    return x if d is None or d == 0 else jnp.moveaxis(x, d, 0)


def _force_batched(x, d, size):
    """``x`` with its batch axis first; an unbatched value broadcast along a new one."""
    if d is None:
        return jnp.broadcast_to(jnp.reshape(x, (1,) + tuple(x.shape)), (size,) + tuple(x.shape))
    return _to_front(x, d)


def batched_graph(g: Graph, in_dims: Sequence[int | None], size: int) -> Graph:
    """``vmap`` of a closed graph: inputs batched at axis 0 where ``in_dims`` says so, every
    output batched at axis 0."""
    from ..batching import vmap
    avals = [Aval((size,) + v.aval.shape, v.aval.dtype) if d is not None else v.aval.strong()
             for v, d in zip(g.inputs, in_dims)]
    vf = vmap(lambda *a: list(eval_graph(g, a)), in_axes=tuple(in_dims), out_axes=0,
              axis_size=size)
    return closed(lambda *a: list(vf(*a)), avals, "a batched control-flow body")


# ------------------------------------------------------------------ cond / switch
def _cond_aval(index, *ops, _branches, name):
    return [o.aval.strong() for o in _branches[0].outputs]


def _cond_impl(index, *ops, _branches, name):
    i = int(np.clip(int(index), 0, len(_branches) - 1))
    return tuple(run_graph(_branches[i], ops))


def _cond_jvp(ts, outs, index, *ops, _branches, name):
    from ..autodiff import build_jvp
    wrt = [k for k, o in enumerate(ops) if is_float(o)]
    if all(ts[1 + k] is None for k in wrt):
        return [None] * len(outs)
    tans = [ts[1 + k] if ts[1 + k] is not None else _zeros_like(ops[k]) for k in wrt]
    branches = tuple(_opt(build_jvp(b, wrt)) for b in _branches)
    res = bind(cond_p, index, *ops, *tans, _branches=branches, name=name)
    n = len(outs)
    return [res[n + j] if is_float(outs[j]) else None for j in range(n)]


def _cond_vjp(cts, outs, index, *ops, _branches, name):
    from ..autodiff import build_vjp
    wrt = [k for k, o in enumerate(ops) if is_float(o)]
    cts = [c if c is not None else _zeros_like(o) for c, o in zip(cts, outs)]
    branches = tuple(_opt(build_vjp(b, wrt)) for b in _branches)
    grads = bind(cond_p, index, *ops, *cts, _branches=branches, name=name)
    res: list = [None] * (1 + len(ops))
    for k, g in zip(wrt, grads):
        res[1 + k] = g
    return res


def _cond_batch(args, dims, *, _branches, name):
    index, ops = args[0], list(args[1:])
    size = _batch_size(args, dims)
    op_dims = [None if d is None else 0 for d in dims[1:]]
    ops = [_to_front(x, d) for x, d in zip(ops, dims[1:])]
    branches = tuple(batched_graph(b, op_dims, size) for b in _branches)
    if dims[0] is None:                     # one branch for the whole batch
        res = bind(cond_p, index, *ops, _branches=branches, name=name)
        return list(res), [0] * len(res)
    # a predicate per example: every branch runs, each example selects its own result
    idx = jnp.clip(_to_front(index, dims[0]), 0, len(branches) - 1)
    per = [eval_graph(b, ops) for b in branches]
    outs = []
    for j in range(len(per[0])):
        r = per[0][j]
        for k in range(1, len(per)):
            sel = jnp.reshape(idx == k, (size,) + (1,) * (len(r.shape) - 1))
            r = jnp.where(sel, per[k][j], r)
        outs.append(r)
    return outs, [0] * len(outs)


cond_p = register(Primitive(
    "cond", kind="opaque", abstract_eval=_cond_aval, impl=_cond_impl, vjp=_cond_vjp,
    jvp=_cond_jvp, multiple_results=True))
cond_p.batch = _cond_batch


# ------------------------------------------------------------------ scan
def _scan_aval(*avals, _body, num_consts, num_carry, length, reverse, name):
    outs = _body.outputs
    return ([o.aval.strong() for o in outs[:num_carry]] +
            [Aval((length,) + o.aval.shape, o.aval.dtype) for o in outs[num_carry:]])


def _scan_impl(*args, _body, num_consts, num_carry, length, reverse, name):
    nc, nk = num_consts, num_carry
    consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
    ys = [np.empty((length,) + o.aval.shape, o.aval.dtype) for o in _body.outputs[nk:]]
    for i in range(length):
        t = length - 1 - i if reverse else i
        outs = run_graph(_body, consts + carry + [x[t] for x in xs])
        carry = outs[:nk]
        for y, o in zip(ys, outs[nk:]):
            y[t] = o
    return tuple(carry + ys)


def _scan_jvp(ts, outs, *ins, _body, num_consts, num_carry, length, reverse, name):
    """A scan of the body's JVP: tangents of consts join the consts, of the carry the carry,
    of xs the xs (absent tangents are zeros)."""
    from ..autodiff import build_jvp
    nc, nk, n, m = num_consts, num_carry, len(ins), len(_body.outputs)
    wrt = [k for k in range(n) if is_float(ins[k])]
    if all(ts[k] is None for k in wrt):
        return [None] * len(outs)
    tan = {k: ts[k] if ts[k] is not None else _zeros_like(ins[k]) for k in wrt}
    g = _opt(build_jvp(_body, wrt))
    tpos = {k: n + j for j, k in enumerate(wrt)}
    c_w = [k for k in wrt if k < nc]
    k_w = [k for k in wrt if nc <= k < nc + nk]
    x_w = [k for k in wrt if k >= nc + nk]
    y_f = [j for j in range(m - nk) if is_float(_body.outputs[nk + j])]
    in_perm = (list(range(nc)) + [tpos[k] for k in c_w] + list(range(nc, nc + nk)) +
               [tpos[k] for k in k_w] + list(range(nc + nk, n)) + [tpos[k] for k in x_w])
    out_sel = (list(range(nk)) + [m + k - nc for k in k_w] + list(range(nk, m)) +
               [m + nk + j for j in y_f])
    args = (list(ins[:nc]) + [tan[k] for k in c_w] + list(ins[nc:nc + nk]) +
            [tan[k] for k in k_w] + list(ins[nc + nk:]) + [tan[k] for k in x_w])
    res = bind(scan_p, *args, _body=permuted(g, in_perm, out_sel), num_consts=nc + len(c_w),
               num_carry=nk + len(k_w), length=length, reverse=reverse, name=name)
    carry_t = dict(zip(k_w, res[nk:nk + len(k_w)]))
    ys_t = dict(zip(y_f, res[nk + len(k_w) + m - nk:]))
    return ([carry_t.get(nc + j) for j in range(nk)] + [ys_t.get(j) for j in range(m - nk)])


def _scan_vjp(cts, outs, *ins, _body, num_consts, num_carry, length, reverse, name):
    """As JAX: a forward scan that also stacks the per-step values the body's backward pass
    reads (residuals), then a scan in the other direction of the body's backward graph, which
    carries the carry's cotangent and sums the consts' cotangents."""
    from ..autodiff import _build_backward
    nc, nk, n, body = num_consts, num_carry, len(ins), _body
    m = len(body.outputs)
    ny = m - nk
    wrt = [k for k in range(n) if is_float(ins[k])]
    if all(c is None for c in cts) or not wrt:
        return [None] * n
    c_w = [k for k in wrt if k < nc]
    k_w = [k for k in wrt if nc <= k < nc + nk]
    x_w = [k for k in wrt if k >= nc + nk]
    y_f = [j for j in range(ny) if is_float(body.outputs[nk + j])]
    order = list(dict.fromkeys(list(body.inputs) + list(body.consts) +
                               [o for nd in body.nodes for o in nd.outs]))
    ct_kinds = [True if is_float(o) else None for o in body.outputs]
    g, keep = _build_backward(body, order, wrt, ct_kinds, False)
    in_index = {v: i for i, v in enumerate(body.inputs)}
    # where each forward value the backward graph reads comes from
    b_consts, b_xs, per_step, src = [], [], [], []
    for i in keep:
        v = order[i]
        k = in_index.get(v)
        if v in body.consts:
            src.append(("c", len(b_consts)))
            b_consts.append(body.consts[v])
        elif k is not None and k < nc:
            src.append(("c", len(b_consts)))
            b_consts.append(ins[k])
        elif k is not None and k >= nc + nk:
            src.append(("x", len(b_xs)))
            b_xs.append(ins[k])
        else:
            src.append(("x", len(b_xs)))
            b_xs.append(None)               # stacked by the forward scan below
            per_step.append(v)
    if per_step:
        fwd = Graph(body.inputs, body.nodes, list(body.outputs) + per_step, body.consts)
        fwd.extends = body                  # the compiler merges it with the primal scan
        fres = bind(scan_p, *ins, _body=fwd, num_consts=nc, num_carry=nk, length=length,
                    reverse=reverse, name=name)
        stacked = iter(fres[m:])
        b_xs = [next(stacked) if x is None else x for x in b_xs]
    ncb, nxb, nkw, ncw = len(b_consts), len(b_xs), len(k_w), len(c_w)

    def step(*a):
        bc, kc = a[:ncb], a[ncb:ncb + nkw]
        acc = a[ncb + nkw:ncb + nkw + ncw]
        bx, cy = a[ncb + nkw + ncw:ncb + nkw + ncw + nxb], a[ncb + nkw + ncw + nxb:]
        fwd_vals = [bc[j] if kind == "c" else bx[j] for kind, j in src]
        ct_args = [kc[k_w.index(nc + j)] for j in range(nk) if ct_kinds[j]] + list(cy)
        grads = dict(zip(wrt, eval_graph(g, fwd_vals + ct_args)))
        return ([grads[k] for k in k_w] + [s + grads[k] for s, k in zip(acc, c_w)] +
                [grads[k] for k in x_w])

    slice_aval = lambda x: Aval(tuple(x.shape[1:]), x.dtype)
    avals = ([aval_of(c).strong() for c in b_consts] +
             [aval_of(ins[k]).strong() for k in k_w] + [aval_of(ins[k]).strong() for k in c_w] +
             [slice_aval(x) for x in b_xs] +
             [body.outputs[nk + j].aval.strong() for j in y_f])
    bwd = closed(step, avals, f"the backward pass of scan ({name})")
    init = ([cts[k - nc] if cts[k - nc] is not None else _zeros_like(ins[k]) for k in k_w] +
            [_zeros_like(ins[k]) for k in c_w])
    ct_ys = [cts[nk + j] if cts[nk + j] is not None else _zeros_like(outs[nk + j]) for j in y_f]
    res = bind(scan_p, *b_consts, *init, *b_xs, *ct_ys, _body=bwd, num_consts=ncb,
               num_carry=nkw + ncw, length=length, reverse=not reverse, name=name)
    grads: list = [None] * n
    for k, r in zip(k_w + c_w + x_w, res):
        grads[k] = r
    return grads


def _scan_batch(args, dims, *, _body, num_consts, num_carry, length, reverse, name):
    """Consts keep their batching, carries are all batched (so a carry that becomes batched
    after a step is batched from the start: JAX's fixpoint, taken at once), xs are batched at
    axis 1 (axis 0 is the scan's)."""
    nc, nk = num_consts, num_carry
    size = _batch_size(args, dims)
    consts = [_to_front(x, d) for x, d in zip(args[:nc], dims[:nc])]
    carry = [_force_batched(x, d, size) for x, d in zip(args[nc:nc + nk], dims[nc:nc + nk])]
    xs = [x if d is None else jnp.moveaxis(x, d, 1) for x, d in zip(args[nc + nk:], dims[nc + nk:])]
    body_dims = ([None if d is None else 0 for d in dims[:nc]] + [0] * nk +
                 [None if d is None else 0 for d in dims[nc + nk:]])
    body = batched_graph(_body, body_dims, size)
    res = bind(scan_p, *consts, *carry, *xs, _body=body, num_consts=nc, num_carry=nk,
               length=length, reverse=reverse, name=name)
    return list(res), [0] * nk + [1] * (len(res) - nk)


scan_p = register(Primitive(
    "scan", kind="opaque", abstract_eval=_scan_aval, impl=_scan_impl, vjp=_scan_vjp,
    jvp=_scan_jvp, multiple_results=True))
scan_p.batch = _scan_batch


# ------------------------------------------------------------------ while
def _while_aval(*avals, _cond, _body, n_cc, n_bc, name):
    return [o.aval.strong() for o in _body.outputs]


def _while_impl(*args, _cond, _body, n_cc, n_bc, name):
    cc, bc, carry = list(args[:n_cc]), list(args[n_cc:n_cc + n_bc]), list(args[n_cc + n_bc:])
    while bool(run_graph(_cond, cc + carry)[0]):
        carry = run_graph(_body, bc + carry)
    return tuple(carry)


def _while_jvp(ts, outs, *ins, _cond, _body, n_cc, n_bc, name):
    from ..autodiff import build_jvp
    nk = len(ins) - n_cc - n_bc
    body_ins = ins[n_cc:]
    body_ts = ts[n_cc:]
    wrt = [k for k in range(len(body_ins)) if is_float(body_ins[k])]
    if all(body_ts[k] is None for k in wrt):
        return [None] * nk
    tan = {k: body_ts[k] if body_ts[k] is not None else _zeros_like(body_ins[k]) for k in wrt}
    nb = len(body_ins)
    g = _opt(build_jvp(_body, wrt))
    tpos = {k: nb + j for j, k in enumerate(wrt)}
    c_w = [k for k in wrt if k < n_bc]
    k_w = [k for k in wrt if k >= n_bc]
    body = permuted(g, list(range(n_bc)) + [tpos[k] for k in c_w] + list(range(n_bc, nb)) +
                    [tpos[k] for k in k_w], list(range(nk)) + [nk + k - n_bc for k in k_w])
    cond = Graph(list(_cond.inputs) + [Var(aval_of(body_ins[k]).strong()) for k in k_w],
                 _cond.nodes, _cond.outputs, _cond.consts)
    res = bind(while_p, *ins[:n_cc], *body_ins[:n_bc], *[tan[k] for k in c_w],
               *body_ins[n_bc:], *[tan[k] for k in k_w], _cond=cond, _body=body, n_cc=n_cc,
               n_bc=n_bc + len(c_w), name=name)
    carry_t = dict(zip(k_w, res[nk:]))
    return [carry_t.get(n_bc + j) for j in range(nk)]


def _while_vjp(cts, outs, *ins, _cond, _body, n_cc, n_bc, name):
    raise ValueError(
        f"Reverse-mode differentiation does not work for {name}: the number of iterations is "
        "only known at run time, so the values of every step cannot be stored. Use "
        "lax.scan, or lax.fori_loop with static (Python int) bounds, which differentiate in "
        "reverse mode; or differentiate in forward mode (jvp, jacfwd).")


def _while_batch(args, dims, *, _cond, _body, n_cc, n_bc, name):
    """Every carry batched; the loop runs while any example's predicate holds, and examples
    whose predicate is false keep their carry (as JAX)."""
    size = _batch_size(args, dims)
    nk = len(args) - n_cc - n_bc
    cc = [_to_front(x, d) for x, d in zip(args[:n_cc], dims[:n_cc])]
    bc = [_to_front(x, d) for x, d in zip(args[n_cc:n_cc + n_bc], dims[n_cc:n_cc + n_bc])]
    carry = [_force_batched(x, d, size) for x, d in zip(args[n_cc + n_bc:], dims[n_cc + n_bc:])]
    cc_dims = [None if d is None else 0 for d in dims[:n_cc]]
    bc_dims = [None if d is None else 0 for d in dims[n_cc:n_cc + n_bc]]
    cond_b = batched_graph(_cond, cc_dims + [0] * nk, size)
    body_b = batched_graph(_body, bc_dims + [0] * nk, size)
    c_avals = [aval_of(x).strong() for x in cc + carry]
    cond = closed(lambda *a: [jnp.any(eval_graph(cond_b, a)[0])], c_avals,
                  f"a batched while_loop condition ({name})")

    def body_fn(*a):
        c, b, k = a[:n_cc], a[n_cc:n_cc + n_bc], list(a[n_cc + n_bc:])
        pred = eval_graph(cond_b, list(c) + k)[0]
        new = eval_graph(body_b, list(b) + k)
        return [jnp.where(jnp.reshape(pred, (size,) + (1,) * (len(x.shape) - 1)), y, x)
                for x, y in zip(k, new)]
    body = closed(body_fn, [aval_of(x).strong() for x in cc + bc + carry],
                  f"a batched while_loop body ({name})")
    res = bind(while_p, *cc, *cc, *bc, *carry, _cond=cond, _body=body, n_cc=n_cc,
               n_bc=n_cc + n_bc, name=name)
    return list(res), [0] * nk


while_p = register(Primitive(
    "while", kind="opaque", abstract_eval=_while_aval, impl=_while_impl, vjp=_while_vjp,
    jvp=_while_jvp, multiple_results=True))
while_p.batch = _while_batch


# ------------------------------------------------------------------ remat (checkpoint)
def _remat_aval(*avals, _graph, prevent_cse, name):
    return [o.aval.strong() for o in _graph.outputs]


def _remat_impl(*args, _graph, prevent_cse, name):
    return tuple(run_graph(_graph, args))


def _remat_jvp(ts, outs, *ins, _graph, prevent_cse, name):
    from ..autodiff import build_jvp
    wrt = [k for k, x in enumerate(ins) if is_float(x)]
    if all(ts[k] is None for k in wrt):
        return [None] * len(outs)
    tans = [ts[k] if ts[k] is not None else _zeros_like(ins[k]) for k in wrt]
    res = eval_graph(_opt(build_jvp(_graph, wrt)), list(ins) + tans)
    n = len(outs)
    return [res[n + j] if is_float(outs[j]) else None for j in range(n)]


def _remat_vjp(cts, outs, *ins, _graph, prevent_cse, name):
    """The backward pass is itself a remat node whose graph runs the forward again: nothing
    the forward computed inside is kept for it."""
    from ..autodiff import build_vjp
    wrt = [k for k, x in enumerate(ins) if is_float(x)]
    cts = [c if c is not None else _zeros_like(o) for c, o in zip(cts, outs)]
    bwd = _opt(build_vjp(_graph, wrt))
    grads = bind(remat_p, *ins, *cts, _graph=bwd, prevent_cse=prevent_cse,
                 name=f"backward of {name}")
    res: list = [None] * len(ins)
    for k, g in zip(wrt, grads):
        res[k] = g
    return res


def _remat_batch(args, dims, *, _graph, prevent_cse, name):
    size = _batch_size(args, dims)
    ins = [_to_front(x, d) for x, d in zip(args, dims)]
    g = batched_graph(_graph, [None if d is None else 0 for d in dims], size)
    res = bind(remat_p, *ins, _graph=g, prevent_cse=prevent_cse, name=name)
    return list(res), [0] * len(res)


# kind "call": a compiled program inlines ``_graph`` (as it does custom_vjp calls)
remat_p = register(Primitive(
    "remat", kind="call", abstract_eval=_remat_aval, impl=_remat_impl, vjp=_remat_vjp,
    jvp=_remat_jvp, multiple_results=True))
remat_p.batch = _remat_batch


# ------------------------------------------------------------------ compiled programs
def subgraph_comment(node) -> list[str]:
    """A comment naming the sub-graphs a node holds by their structure, for generated
    source: the disk cache keys on source, and two scans with the same shapes but different
    bodies must never share a program."""
    graphs = []
    for k in sorted(node.params):
        p = node.params[k]
        graphs += [p] if isinstance(p, Graph) else \
            [x for x in p if isinstance(x, Graph)] if isinstance(p, tuple) else []
    if not graphs:
        return []
    return [f"# {node.prim.name} of sub-graphs {', '.join(graph_fingerprint(g) for g in graphs)}"]


class _ListTree:
    """The output structure of a sub-program: a plain list."""
    unflatten = staticmethod(list)


def compile_sub(g: Graph, donate: Sequence[int] = ()) -> Callable:
    """A closed sub-graph compiled like any program (its kernels shared by structure through
    the kernel cache): the call path taking and returning flat arrays. ``donate``: inputs
    whose buffers the program may update in place."""
    from ..compiler.runtime import compile_graph
    prog = compile_graph(g, donate=tuple(donate))
    return prog.make_runner([v.aval.dtype for v in g.inputs], _ListTree)


# A loop body's matrix products are small and come one after another: OpenBLAS's threads
# then cost more than they bring (measured here, 2 cores shared with other processes: a
# 32x256x256 float32 product took 1-7 ms with 2 threads, 0.2 ms with one; the RNN benchmark's
# 100-step forward+backward went from 1 s to 80 ms). Loops whose products are all below this
# many multiply-adds run with one BLAS thread (threadpoolctl, when it is installed).
SMALL_PRODUCT = 1 << 23
_BLAS: list = []        # [threadpoolctl's BLAS selection] once looked up ([None]: unavailable)


def _blas_limit(graphs: Sequence[Graph]):
    """A context manager giving the loop one BLAS thread, or None to leave BLAS as it is."""
    sizes = [int(np.prod(n.inputs[0].aval.shape)) * n.out.aval.shape[-1]
             for g in graphs for n in g.nodes if n.prim.kind == "matmul"]
    if not sizes or max(sizes) >= SMALL_PRODUCT:
        return None
    if not _BLAS:
        try:
            import scipy.linalg.cython_blas  # noqa: F401  (the BLAS Numba's products call)
            from threadpoolctl import ThreadpoolController
            _BLAS.append(ThreadpoolController().select(user_api="blas"))
        except ImportError:
            _BLAS.append(None)
    return None if _BLAS[0] is None else (lambda: _BLAS[0].limit(limits=1))


class _NoLimit:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _limited(graphs: Sequence[Graph]):
    limit = _blas_limit(graphs)
    return limit if limit is not None else _NoLimit


def _result(res: list):
    return res[0] if len(res) == 1 else tuple(res)


def _cond_compiled(node) -> Callable:
    """Each branch is compiled the first time it is taken."""
    branches = node.params["_branches"]
    runners: list = [None] * len(branches)
    last = len(branches) - 1

    def run(index, *ops):
        i = int(index)
        i = 0 if i < 0 else last if i > last else i
        r = runners[i]
        if r is None:
            r = runners[i] = compile_sub(branches[i])
        return _result(r(*ops))
    return run


# A scan body of at most this many loop kernels (and no matrix product) gets a compiled driver
# and a compiled loop around it: no Python per step (measured here: 0.5 us per step of a small
# body instead of 12 us). Bodies with products or more kernels are called from a Python loop:
# their work hides its microseconds per step, and linking BLAS calls into one compiled loop
# tripled the RNN benchmark's compile time.
LOOP_BODY_MAX_STEPS = 16
# Shorter scans keep the Python loop: compiling the loop costs more than it would save them.
COMPILED_LOOP_MIN_LENGTH = 32


def _compiled_body(g: Graph):
    """The body compiled with a driver a compiled loop can call, or None when its program
    needs Python (a host step) or is too big."""
    import time
    from ..compiler.fusion import HostStep, MatmulStep
    from ..compiler.runtime import generate, load
    gen = generate(g, compiled_driver=True)
    steps = gen.plan.steps
    if len(steps) > LOOP_BODY_MAX_STEPS or \
            any(isinstance(s, (HostStep, MatmulStep)) for s in steps):
        return None
    return load(gen, time.perf_counter())


def _loop_module(source: str, *callees):
    """Name the loop by its source's hash, load it through the disk cache and give it the
    drivers it calls (as ``runtime.load`` gives drivers their kernels)."""
    import hashlib
    from ..compiler.codegen_cpu import HEADER
    from ..compiler import runtime
    h = hashlib.sha256(source.encode()).hexdigest()[:12]
    key = runtime._FINGERPRINT or runtime._codegen_fingerprint()    # set by runtime.load
    module, _ = runtime.disk_cache().load_module(
        HEADER + "\n\n" + source.replace("{H}", h) + "\n", key_extra=key)
    for callee in callees:
        setattr(module, callee.__name__, callee)
    return getattr(module, source.split("def ", 1)[1].split("_{H}", 1)[0] + "_" + h)


def _results(prog, args: list[str], consts: list[str], outs: list[str]) -> list[str]:
    """Where each output of a compiled sub-program is after its driver ran: an output buffer,
    one of its arguments passed through, or a constant."""
    return [outs[j] if kind == "out" else args[j] if kind == "input" else consts[j]
            for kind, j in prog.sources]


def _carry_updates(carries: list[str], new: list[str], pad: str) -> list[str]:
    """Copy the new carry values in; values that are themselves carries (passed through,
    perhaps swapped) are copied out first."""
    tmp = {v: f"t{i}" for i, v in enumerate(new) if v in carries and v != carries[i]}
    lines = [pad + f"{t} = {v}.copy()" for v, t in tmp.items()]
    return lines + [pad + f"{a}[:] = {tmp.get(v, v)}" for a, v in zip(carries, new) if a != v]


def _scan_loop_source(prog, nc: int, nk: int, nx: int, ny: int, reverse: bool) -> str:
    """``scanloop(n, consts, init, xs, ys, final, body consts, outs, scratch)``: all arrays
    flat (xs and ys ``(n, size)``); the trip count is an argument, so one compiled loop
    serves every length."""
    names = lambda p, k: [f"{p}{i}" for i in range(k)]  # noqa: E731
    c, k, x, y, f = names("c", nc), names("k", nk), names("x", nx), names("y", ny), names("f", nk)
    b, o = names("b", len(prog.const_values)), names("o", len(prog.out_specs))
    s = names("s", len(prog.scratch_specs))
    a = names("a", nk)
    args = c + a + [f"{v}[t]" for v in x]
    res = _results(prog, args, b, o)
    lines = ["@njit(cache=True, nogil=True)",
             f"def scanloop_{{H}}(n, {', '.join(c + k + x + y + f + b + o + s)}):"]
    lines += [f"    a{i} = k{i}.copy()" for i in range(nk)]
    lines += ["    for i in range(n):", "        t = n - 1 - i" if reverse else "        t = i",
              f"        {prog.driver.__name__}({', '.join(args + b + o + s)})"]
    lines += [f"        y{j}[t, :] = {res[nk + j]}" for j in range(ny)]
    lines += _carry_updates(a, res[:nk], "        ")
    lines += [f"    f{i}[:] = a{i}" for i in range(nk)]
    lines.append("    return None")
    return "\n".join(lines)


def _scan_compiled_loop(node):
    """A scan whose loop is compiled too, or None (see ``_compiled_body``)."""
    p = node.params
    nc, nk, length, g = p["num_consts"], p["num_carry"], p["length"], p["_body"]
    prog = _compiled_body(g) if length >= COMPILED_LOOP_MIN_LENGTH else None
    if prog is None:
        return None
    nx, ny = len(g.inputs) - nc - nk, len(g.outputs) - nk
    loop = _loop_module(_scan_loop_source(prog, nc, nk, nx, ny, p["reverse"]), prog.driver)
    dts = [v.aval.dtype for v in g.inputs]
    sizes = [v.aval.size for v in g.inputs]
    carry_shapes = [v.aval.shape for v in g.inputs[nc:nc + nk]]
    y_specs = [((length,) + o.aval.shape, o.aval.dtype) for o in g.outputs[nk:]]
    consts = prog.const_values
    limit = _limited([g])

    def run(*args):
        flat = [np.ascontiguousarray(a, d).reshape(n) if i < nc + nk else
                np.ascontiguousarray(a, d).reshape(length, n)
                for i, (a, d, n) in enumerate(zip(args, dts, sizes))]
        ys = [np.empty(sh, d) for sh, d in y_specs]
        final = [np.empty(sizes[nc + i], dts[nc + i]) for i in range(nk)]
        with limit():
            loop(length, *flat, *[y.reshape(length, int(np.prod(y.shape[1:]))) for y in ys],
                 *final, *consts, *_buffers(prog))
        return _result([f.reshape(sh) for f, sh in zip(final, carry_shapes)] + ys)
    return run


def _scan_compiled(node) -> Callable:
    """The loop a compiled program runs for a scan: the body compiled once, called once per
    step on the carry and a slice of each xs (views, no copies), each y written in place."""
    fast = _scan_compiled_loop(node)
    if fast is not None:
        return fast
    p = node.params
    nc, nk, length, reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    g = p["_body"]
    owned = _owned_carries(g, nc, nk)
    body = compile_sub(g, [nc + k for k in owned])
    y_specs = [((length,) + o.aval.shape, o.aval.dtype) for o in g.outputs[nk:]]
    order = range(length - 1, -1, -1) if reverse else range(length)
    limit = _limited([g])

    def run(*args):
        consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
        if length:
            for k in owned:             # the caller's buffers are never updated in place
                carry[k] = carry[k].copy()
        ys = [np.empty(s, d) for s, d in y_specs]
        with limit():
            for t in order:
                outs = body(*consts, *carry, *[x[t] for x in xs])
                carry = outs[:nk]
                for y, o in zip(ys, outs[nk:]):
                    y[t] = o
        return _result(list(carry) + ys)
    return run


def _owned_carries(body: Graph, n_before: int, nk: int) -> list[int]:
    """The carries a loop may let its body update in place (donate): after the first step
    (which gets copies) each is a buffer the loop owns, unless the body passes a const or an
    xs slice through as that carry."""
    carries = set(body.inputs[n_before:n_before + nk])
    outside = set(body.inputs) - carries
    return [k for k in range(nk) if body.outputs[k] not in outside]


def _buffers(prog) -> list:
    """Fresh output and scratch buffers for one call of a compiled sub-program's driver."""
    return [np.empty(n, d) for n, d in list(prog.out_specs) + list(prog.scratch_specs)]


def _while_compiled_loop(node):
    """A while loop whose condition and body have compiled drivers, run by a compiled loop;
    None when either does not qualify (``_compiled_body``)."""
    p = node.params
    n_cc, n_bc, cg, bg = p["n_cc"], p["n_bc"], p["_cond"], p["_body"]
    nk = len(bg.outputs)
    cp = _compiled_body(cg)
    bp = _compiled_body(bg) if cp is not None else None
    if bp is None:
        return None
    names = lambda q, k: [f"{q}{i}" for i in range(k)]  # noqa: E731
    cc, bc, k, f = names("cc", n_cc), names("bc", n_bc), names("k", nk), names("f", nk)
    cb, co = names("cb", len(cp.const_values)), names("co", len(cp.out_specs))
    bb, bo = names("bb", len(bp.const_values)), names("bo", len(bp.out_specs))
    cs, bs = names("cs", len(cp.scratch_specs)), names("bs", len(bp.scratch_specs))
    a = names("a", nk)
    pred = _results(cp, cc + a, cb, co)[0]
    lines = ["@njit(cache=True, nogil=True)",
             f"def whileloop_{{H}}({', '.join(cc + bc + k + f + cb + co + cs + bb + bo + bs)}):"]
    lines += [f"    a{i} = k{i}.copy()" for i in range(nk)]
    lines += ["    while True:",
              f"        {cp.driver.__name__}({', '.join(cc + a + cb + co + cs)})",
              f"        if not {pred}[0]:", "            break",
              f"        {bp.driver.__name__}({', '.join(bc + a + bb + bo + bs)})"]
    lines += _carry_updates(a, _results(bp, bc + a, bb, bo), "        ")
    lines += [f"    f{i}[:] = a{i}" for i in range(nk)] + ["    return None"]
    loop = _loop_module("\n".join(lines), cp.driver, bp.driver)
    dts = [v.aval.dtype for v in cg.inputs[:n_cc]] + [v.aval.dtype for v in bg.inputs]
    sizes = [v.aval.size for v in cg.inputs[:n_cc]] + [v.aval.size for v in bg.inputs]
    shapes = [v.aval.shape for v in bg.inputs[n_bc:]]
    limit = _limited([cg, bg])

    def run(*args):
        flat = [np.ascontiguousarray(x, d).reshape(n) for x, d, n in zip(args, dts, sizes)]
        final = [np.empty(n, d) for n, d in zip(sizes[n_cc + n_bc:], dts[n_cc + n_bc:])]
        with limit():
            loop(*flat, *final, *cp.const_values, *_buffers(cp), *bp.const_values,
                 *_buffers(bp))
        return _result([x.reshape(sh) for x, sh in zip(final, shapes)])
    return run


def _while_compiled(node) -> Callable:
    fast = _while_compiled_loop(node)
    if fast is not None:
        return fast
    p = node.params
    n_cc, n_bc = p["n_cc"], p["n_bc"]
    nk = len(p["_body"].outputs)
    owned = _owned_carries(p["_body"], n_bc, nk)
    cond, body = compile_sub(p["_cond"]), compile_sub(p["_body"], [n_bc + k for k in owned])
    limit = _limited([p["_cond"], p["_body"]])

    def run(*args):
        cc, bc, carry = list(args[:n_cc]), list(args[n_cc:n_cc + n_bc]), list(args[n_cc + n_bc:])
        for k in owned:
            carry[k] = carry[k].copy()
        with limit():
            while cond(*cc, *carry)[0]:
                carry = body(*bc, *carry)
        return _result(carry)
    return run


cond_p.compiled_impl = _cond_compiled
scan_p.compiled_impl = _scan_compiled
while_p.compiled_impl = _while_compiled


def prune_scans(g: Graph) -> Graph:
    """Drop the stacked outputs of scans that nothing reads, and what computes them in the
    body (a VJP scan computes the xs' cotangents whether or not xs are differentiated)."""
    from ..core import Node
    from ..passes import optimize
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
    from ..core import Node
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
