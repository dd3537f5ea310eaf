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
truth); a compiled program runs the compiler's lowering instead (``jitgraph.compiler.loops``
registers one per primitive): the same loop around the sub-graphs compiled once.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import dtypes
from . import numpy as jnp
from .autodiff import build_backward, build_jvp, build_vjp, eval_graph
from .batching import vmap
from .core import Aval, Graph, Node, Primitive, Tracer, Var, aval_of, bind, register
from .interpreter import run
from .passes import dce, optimize
from .transforms import trace_flat


# ------------------------------------------------------------------ graph helpers
def closed(fn: Callable, avals: Sequence[Aval], what: str) -> Graph:
    """``trace_flat`` for functions built from closed graphs (nothing to capture), optimized."""
    g, caps = trace_flat(fn, avals, what)
    assert not caps, "internal error: a derived control-flow body closed over a traced value"
    return optimize(g)


def permuted(g: Graph, in_perm: Sequence[int], out_sel: Sequence[int]) -> Graph:
    """The same computation with its inputs reordered and a selection of its outputs."""
    return Graph([g.inputs[i] for i in in_perm], g.nodes, [g.outputs[j] for j in out_sel],
                 g.consts)


def is_float(x) -> bool:
    """Whether ``x`` is differentiated: a float or a complex value."""
    return dtypes.is_inexact((x.aval if isinstance(x, (Var, Tracer)) else aval_of(x)).dtype)


def _zeros_like(x):
    return np.zeros(tuple(x.shape), x.dtype)


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
    return tuple(run(_branches[i], ops))


def _cond_jvp(ts, outs, index, *ops, _branches, name):
    wrt = [k for k, o in enumerate(ops) if is_float(o)]
    if all(ts[1 + k] is None for k in wrt):
        return [None] * len(outs)
    tans = [ts[1 + k] if ts[1 + k] is not None else _zeros_like(ops[k]) for k in wrt]
    branches = tuple(optimize(build_jvp(b, wrt)) for b in _branches)
    res = bind(cond_p, index, *ops, *tans, _branches=branches, name=name)
    n = len(outs)
    return [res[n + j] if is_float(outs[j]) else None for j in range(n)]


def _cond_vjp(cts, outs, index, *ops, _branches, name):
    wrt = [k for k, o in enumerate(ops) if is_float(o)]
    cts = [c if c is not None else _zeros_like(o) for c, o in zip(cts, outs)]
    branches = tuple(optimize(build_vjp(b, wrt)) for b in _branches)
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
    jvp=_cond_jvp, multiple_results=True, moves_data=True))
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
        outs = run(_body, consts + carry + [x[t] for x in xs])
        carry = outs[:nk]
        for y, o in zip(ys, outs[nk:]):
            y[t] = o
    return tuple(carry + ys)


def _scan_jvp(ts, outs, *ins, _body, num_consts, num_carry, length, reverse, name):
    """A scan of the body's JVP: tangents of consts join the consts, of the carry the carry,
    of xs the xs (absent tangents are zeros)."""
    nc, nk, n, m = num_consts, num_carry, len(ins), len(_body.outputs)
    wrt = [k for k in range(n) if is_float(ins[k])]
    if all(ts[k] is None for k in wrt):
        return [None] * len(outs)
    tan = {k: ts[k] if ts[k] is not None else _zeros_like(ins[k]) for k in wrt}
    g = optimize(build_jvp(_body, wrt))
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
    g, keep = build_backward(body, order, wrt, ct_kinds, False)
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
    jvp=_scan_jvp, multiple_results=True, moves_data=True))
scan_p.batch = _scan_batch


# ------------------------------------------------------------------ while
def _while_aval(*avals, _cond, _body, n_cc, n_bc, name):
    return [o.aval.strong() for o in _body.outputs]


def _while_impl(*args, _cond, _body, n_cc, n_bc, name):
    cc, bc, carry = list(args[:n_cc]), list(args[n_cc:n_cc + n_bc]), list(args[n_cc + n_bc:])
    while bool(run(_cond, cc + carry)[0]):
        carry = run(_body, bc + carry)
    return tuple(carry)


def _while_jvp(ts, outs, *ins, _cond, _body, n_cc, n_bc, name):
    nk = len(ins) - n_cc - n_bc
    body_ins = ins[n_cc:]
    body_ts = ts[n_cc:]
    wrt = [k for k in range(len(body_ins)) if is_float(body_ins[k])]
    if all(body_ts[k] is None for k in wrt):
        return [None] * nk
    tan = {k: body_ts[k] if body_ts[k] is not None else _zeros_like(body_ins[k]) for k in wrt}
    nb = len(body_ins)
    g = optimize(build_jvp(_body, wrt))
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
    jvp=_while_jvp, multiple_results=True, moves_data=True))
while_p.batch = _while_batch


# ------------------------------------------------------------------ remat (checkpoint)
def _barrier_aval(*avals):
    return [a.strong() for a in avals]


def _barrier_batch(args, dims):
    return list(optimization_barrier_p(*args)), list(dims)


# ``optimization_barrier``: the identity on several values at once, which no simplification
# looks through. The backward pass of a checkpoint reads the checkpoint's inputs through one
# taken together with the cotangents, so its recomputation is not merged with the forward
# pass (CSE sees other values) and cannot run before the cotangents exist. The compiler
# removes it after its last simplification and keeps the ordering it implies
# (``compiler.lower.strip_barriers``).
optimization_barrier_p = register(Primitive(
    "optimization_barrier", kind="opaque", abstract_eval=_barrier_aval,
    impl=lambda *xs: tuple(xs), vjp=lambda cts, outs, *xs: list(cts),
    jvp=lambda ts, outs, *xs: list(ts), multiple_results=True, batch=_barrier_batch, moves_data=True))


def _remat_aval(*avals, _graph, prevent_cse, name, policy=None):
    return [o.aval.strong() for o in _graph.outputs]


def _remat_impl(*args, _graph, prevent_cse, name, policy=None):
    return tuple(run(_graph, args))


def _remat_jvp(ts, outs, *ins, _graph, prevent_cse, name, policy=None):
    wrt = [k for k, x in enumerate(ins) if is_float(x)]
    if all(ts[k] is None for k in wrt):
        return [None] * len(outs)
    tans = [ts[k] if ts[k] is not None else _zeros_like(ins[k]) for k in wrt]
    res = eval_graph(optimize(build_jvp(_graph, wrt)), list(ins) + tans)
    n = len(outs)
    return [res[n + j] if is_float(outs[j]) else None for j in range(n)]


def saving_backward(bwd: Graph, n_in: int, policy: Callable | None, barrier: bool) -> Graph:
    """``bwd`` (inputs ``(*ins, *cts)``: the forward run again, then the backward) rewritten so
    that a compiled program recomputes the forward in the backward pass. The nodes
    ``policy(prim, *input_avals, **params)`` saves (and what they need) are computed from
    ``ins`` as the forward pass computed them, so the compiler merges them with it and keeps
    their results (JAX's checkpoint policies). Then ``ins``, the saved values and the
    cotangents pass one ``optimization_barrier`` (with ``barrier``), and every other forward
    node is computed again from its outputs, which CSE cannot merge with the forward pass
    and which exist only once the cotangents do."""
    ins, cts = bwd.inputs[:n_in], bwd.inputs[n_in:]
    backward = set(cts)
    for n in bwd.nodes:
        if any(i in backward for i in n.inputs):
            backward.update(n.outs)
    env = {v: Var(v.aval) for v in bwd.inputs}
    nodes: list = []
    saved: list = []

    def copy(n, env):
        """``n`` again on ``env``'s values (its new results recorded there)."""
        outs = [Var(o.aval) for o in n.outs]
        nodes.append(Node(n.prim, [env.get(i, i) for i in n.inputs], n.params, outs, n.source))
        env.update(zip(n.outs, outs))

    for n in bwd.nodes:
        if n.outs[0] in backward:
            continue
        copy(n, env)
        if policy is not None and policy(n.prim, *[i.aval for i in n.inputs], **n.params):
            saved.extend(n.outs)
    through = list(ins) + saved + list(cts)
    post = dict(env)
    if barrier:
        outs = [Var(env[v].aval.strong()) for v in through]
        nodes.append(Node(optimization_barrier_p, [env[v] for v in through], {}, outs, None))
        post.update(zip(through, outs))
    kept = set(saved)
    for n in bwd.nodes:
        if n.outs[0] not in kept:
            copy(n, post)
    outs = [post.get(v, v) for v in bwd.outputs]
    return dce(Graph([env[v] for v in bwd.inputs], nodes, outs, dict(bwd.consts)))


def _remat_vjp(cts, outs, *ins, _graph, prevent_cse, name, policy=None):
    """The backward pass is itself a remat node whose graph runs the forward again: nothing
    the forward computed inside is kept for it but what ``policy`` saves (see
    ``saving_backward``: with ``prevent_cse`` a compiled program neither merges the
    recomputation with the forward pass nor runs it before the backward pass needs it)."""
    wrt = [k for k, x in enumerate(ins) if is_float(x)]
    cts = [c if c is not None else _zeros_like(o) for c, o in zip(cts, outs)]
    bwd = saving_backward(optimize(build_vjp(_graph, wrt)), len(ins), policy, prevent_cse)
    grads = bind(remat_p, *ins, *cts, _graph=bwd, prevent_cse=prevent_cse,
                 name=f"backward of {name}")
    res: list = [None] * len(ins)
    for k, g in zip(wrt, grads):
        res[k] = g
    return res


def _remat_batch(args, dims, *, _graph, prevent_cse, name, policy=None):
    size = _batch_size(args, dims)
    ins = [_to_front(x, d) for x, d in zip(args, dims)]
    g = batched_graph(_graph, [None if d is None else 0 for d in dims], size)
    res = bind(remat_p, *ins, _graph=g, prevent_cse=prevent_cse, name=name, policy=policy)
    return list(res), [0] * len(res)


# kind "call": a compiled program inlines ``_graph`` (as it does custom_vjp calls)
remat_p = register(Primitive(
    "remat", kind="call", abstract_eval=_remat_aval, impl=_remat_impl, vjp=_remat_vjp,
    jvp=_remat_jvp, multiple_results=True))
remat_p.batch = _remat_batch
