"""Fused attention: ``softmax(scale * q @ k^T, masked) @ v`` as one primitive, and the graph
rewrite that finds it in the way users write attention.

``attention(q, k, v[, extra], scale, causal, kind, fill) -> (o, rowmax, rowsum)`` computes the
attention output and each query row's maximum score and sum of exponentials without the
(Tq, Tk) scores: the compiler runs it as
tiled kernels with an online softmax (``kernels/attention.py`` on the CPU,
``kernels/cuda_attention.py`` on the GPU). Its VJP is ``attention_bwd``, which recomputes the
probabilities tile by tile from the row statistics (FlashAttention's backward; the max and the
sum rather than their log-sum-exp, which loses the sum of a row that is all ``fill`` when
``fill`` is huge, as ``nn.dot_product_attention``'s is). ``extra`` is a boolean
mask (``kind=1``: a masked score is ``fill``, as ``where(mask, s, fill)``) or an additive
bias (``kind=2``), broadcasting to (..., Tq, Tk); ``causal`` drops the keys after each query
(``j <= i``, top-left aligned as ``np.tril``).

``fuse_attention(graph)`` rewrites ``matmul(softmax(S), v)`` with ``S`` a scaled, masked or
biased ``matmul(q, swap(k))``, and ``softmax`` spelled with the row max and row sum (as
``nn.softmax`` and hand-written code do), when the scores and probabilities are used nowhere
else. A constant mask or bias that is the causal pattern becomes ``causal=True``, so no
(T, T) array is read either. Autodiff runs it before building a backward pass and the
compiler before fusing, so it applies to code that never calls ``nn``.

The NumPy references compute the full matrices (the ground truth); the second derivative
of ``attention_bwd`` differentiates that composite again (rarely needed, never fast).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from . import numpy as jnp
from .autodiff import GRAPH_REWRITES, build_jvp, build_vjp, eval_graph, without_rewrite
from .batching import move_batch_axis
from .core import PRIMITIVES, Aval, Graph, Node, Primitive, Var, aval_of, bind, register
from .errors import ShapeError
from .passes import dce, optimize, uniform_value
from .transforms import trace_flat

CAUSAL_FILL = -1e4      # a cut score at most this low has probability 0 in float32 and 64


# ------------------------------------------------------------------ shapes
def _check(q, k, v, extra, what):
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ShapeError(f"{what}: q, k, v must be (..., T, d) arrays of one rank, got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"{what}: batch dimensions differ: {q.shape}, {k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{what}: q {q.shape} and k {k.shape} need one feature size, k and "
                         f"v {v.shape} one key count")
    if not (q.dtype == k.dtype == v.dtype) or not dtypes.is_float(q.dtype):
        raise TypeError(f"{what}: q, k, v must share a float dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if extra:
        sshape = q.shape[:-1] + (k.shape[-2],)
        e = extra[0].shape
        if len(e) > len(sshape) or any(a not in (1, b) for a, b in zip(e[::-1], sshape[::-1])):
            raise ShapeError(f"{what}: a mask or bias of shape {e} does not broadcast to the "
                             f"scores' shape {sshape}")


def _attention_aval(q, k, v, *extra, scale, causal, kind, fill):
    _check(q, k, v, extra, "attention")
    return [Aval(q.shape[:-1] + (v.shape[-1],), q.dtype), Aval(q.shape[:-1], q.dtype),
            Aval(q.shape[:-1], q.dtype)]


def _scores_np(q, k, extra, scale, causal, kind, fill):
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    live = np.ones(s.shape, bool)
    if kind == 1:
        live = np.broadcast_to(extra[0], s.shape)
        s = np.where(live, s, q.dtype.type(fill))
    elif kind == 2:
        s = s + extra[0].astype(q.dtype)
    if causal:
        cut = np.tril(np.ones(s.shape[-2:], bool))
        live = live & cut
        s = np.where(cut, s, q.dtype.type(fill))
    return s, live


def _attention_impl(q, k, v, *extra, scale, causal, kind, fill):
    s, _ = _scores_np(q, k, extra, scale, causal, kind, fill)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    tot = e.sum(-1, keepdims=True)
    dt = q.dtype
    return np.matmul(e / tot, v).astype(dt), m[..., 0].astype(dt), tot[..., 0].astype(dt)


def _bwd_aval(q, k, v, *rest, scale, causal, kind, fill):
    return [Aval(q.shape, q.dtype), Aval(k.shape, k.dtype), Aval(v.shape, v.dtype)]


def _bwd_impl(q, k, v, *rest, scale, causal, kind, fill):
    extra, (o, m, tot, do) = rest[:-4], rest[-4:]
    s, live = _scores_np(q, k, extra, scale, causal, kind, fill)
    p = np.exp(s - m[..., None]) / tot[..., None]
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    ds = np.where(live, p * (dp - np.sum(do * o, -1, keepdims=True)), 0) * scale
    dt = q.dtype
    return (np.matmul(ds, k).astype(dt), np.matmul(np.swapaxes(ds, -1, -2), q).astype(dt),
            np.matmul(np.swapaxes(p, -1, -2), do).astype(dt))


# ------------------------------------------------------------------ the composite (for rules)
def _composite(q, k, v, extra, scale, causal, kind, fill):
    """The attention output written with jnp: what the rules differentiate."""
    dt = np.dtype(q.aval.dtype if hasattr(q, "aval") else q.dtype)
    s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * np.asarray(scale, dt)
    if kind == 1:
        s = jnp.where(extra[0], s, np.asarray(fill, dt))
    elif kind == 2:
        s = s + jnp.astype(extra[0], dt)
    if causal:
        tq, tk = s.shape[-2:]
        s = jnp.where(np.tril(np.ones((tq, tk), bool)), s, np.asarray(fill, dt))
    m = jnp.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    e = jnp.exp(s - m)
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), v)


def _composite_graph(avals, params, with_ct: bool) -> Graph:
    """(q, k, v, *extra[, ct]) -> the composite's output, or with ``ct`` its VJP's
    (dq, dk, dv)."""
    def fwd(q, k, v, *extra):
        return [_composite(q, k, v, extra, **params)]
    with unfused():       # the rules differentiate the composite itself, not the primitive
        g, caps = trace_flat(fwd, avals, "attention")
        assert not caps
        g = optimize(g)
        return optimize(build_vjp(g, [0, 1, 2])) if with_ct else g


def _attention_jvp(ts, outs, q, k, v, *extra, **params):
    if all(t is None for t in ts[:3]):
        return [None, None]
    avals = [aval_of(x) for x in (q, k, v, *extra)]
    g = optimize(build_jvp(_composite_graph(avals, params, False), [0, 1, 2]))
    tans = [t if t is not None else jnp.zeros_like(x) for t, x in zip(ts[:3], (q, k, v))]
    res = eval_graph(g, [q, k, v, *extra] + tans)
    return [res[1], None, None]


def _attention_vjp(cts, outs, q, k, v, *extra, **params):
    co, cm, cs = cts
    if cm is not None or cs is not None:
        raise NotImplementedError("the gradient through attention's row statistics")
    if co is None:
        return [None] * (3 + len(extra))
    o, m, tot = outs
    dq, dk, dv = attention_bwd_p(q, k, v, *extra, o, m, tot, co, **params)
    return [dq, dk, dv] + [None] * len(extra)


def _bwd_vjp(cts, outs, q, k, v, *rest, **params):
    """Second order: the VJP of the composite's VJP (dq, dk, dv as functions of q, k, v and
    the cotangent; o and the row statistics are functions of q, k, v, so they get none)."""
    extra, do = rest[:-4], rest[-1]
    avals = [aval_of(x) for x in (q, k, v, *extra)]
    first = _composite_graph(avals, params, True)
    with unfused():
        second = optimize(build_vjp(first, [0, 1, 2, len(first.inputs) - 1]))
    zs = [c if c is not None else jnp.zeros_like(x) for c, x in zip(cts, (q, k, v))]
    res = eval_graph(second, [q, k, v, *extra, do] + zs)
    gq, gk, gv, gdo = res
    return [gq, gk, gv] + [None] * len(extra) + [None, None, None, gdo]


def _bwd_jvp(ts, outs, q, k, v, *rest, **params):
    """Tangents of (dq, dk, dv): the JVP of the composite's VJP (as ``_bwd_vjp``)."""
    extra, do = rest[:-4], rest[-1]
    tans = list(ts[:3]) + [ts[-1]]
    if all(t is None for t in tans):
        return [None, None, None]
    avals = [aval_of(x) for x in (q, k, v, *extra)]
    first = _composite_graph(avals, params, True)
    with unfused():
        g = optimize(build_jvp(first, [0, 1, 2, len(first.inputs) - 1]))
    zs = [t if t is not None else jnp.zeros_like(x) for t, x in zip(tans, (q, k, v, do))]
    return eval_graph(g, [q, k, v, *extra, do] + zs)[3:]


def _attention_batch(args, dims, **params):
    """Batch axis first on q, k, v (broadcast when unbatched); a batched mask or bias gets it
    first too, with size-1 axes so it still lines up with the scores from the right."""
    size = next(int(a.shape[d]) for a, d in zip(args, dims) if d is not None)
    qkv = []
    for x, d in zip(args[:3], dims[:3]):
        if d is None:
            x = jnp.broadcast_to(x, (size,) + tuple(x.shape))
        else:
            x = move_batch_axis(x, d, 0)
        qkv.append(x)
    extra = list(args[3:])
    if extra and dims[3] is not None:
        e = move_batch_axis(extra[0], dims[3], 0)
        rank = len(qkv[0].shape)
        extra = [jnp.reshape(e, (size,) + (1,) * (rank - len(e.shape)) + tuple(e.shape[1:]))]
    outs = bind(attention_p, *qkv, *extra, **params)
    return list(outs), [0, 0, 0]


def _bwd_batch(args, dims, **params):
    size = next(int(a.shape[d]) for a, d in zip(args, dims) if d is not None)
    n_extra = len(args) - 7
    fixed = []
    for i, (x, d) in enumerate(zip(args, dims)):
        if 3 <= i < 3 + n_extra:
            if d is not None:
                e = move_batch_axis(x, d, 0)
                rank = len(args[0].shape) + (1 if dims[0] is None else 0)
                x = jnp.reshape(e, (size,) + (1,) * (rank - len(e.shape)) + tuple(e.shape[1:]))
            fixed.append(x)
            continue
        fixed.append(jnp.broadcast_to(x, (size,) + tuple(x.shape)) if d is None
                     else move_batch_axis(x, d, 0))
    outs = bind(attention_bwd_p, *fixed, **params)
    return list(outs), [0, 0, 0]


attention_p = register(Primitive(
    "attention", kind="opaque", abstract_eval=_attention_aval, impl=_attention_impl,
    vjp=_attention_vjp, jvp=_attention_jvp, multiple_results=True, batch=_attention_batch))
attention_bwd_p = register(Primitive(
    "attention_bwd", kind="opaque", abstract_eval=_bwd_aval, impl=_bwd_impl, vjp=_bwd_vjp,
    jvp=_bwd_jvp, multiple_results=True, batch=_bwd_batch))


# ------------------------------------------------------------------ the rewrite
class _Graph:
    """Producers, use counts and constants of a graph, for matching."""

    def __init__(self, g: Graph):
        self.g = g
        self.producer = {o: n for n in g.nodes for o in n.outs}
        self.uses: dict[Var, int] = {}
        for n in g.nodes:
            for i in n.inputs:
                self.uses[i] = self.uses.get(i, 0) + 1
        for o in g.outputs:
            self.uses[o] = self.uses.get(o, 0) + 1000   # an output is used outside

    def op(self, v: Var, name: str, uses: int = 1):
        n = self.producer.get(v)
        if n is None or n.prim.name != name or self.uses.get(v, 0) != uses:
            return None
        return n

    def scalar(self, v: Var) -> float | None:
        u = uniform_value(self.g.consts, self.producer, v)
        return None if u is None or np.ndim(u) else float(u)


def _last_axis_reduce(m: _Graph, v: Var, name: str, of: Var):
    """``v`` = reshape(reduce_<name>(of, last axis), keepdims shape) -> True."""
    r = m.producer.get(v)
    if r is not None and r.prim.name == "stop_gradient":
        r = m.producer.get(r.inputs[0])
    if r is None or r.prim.name != "reshape":
        return False
    red = m.producer.get(r.inputs[0])
    nd = of.aval.ndim
    return (red is not None and red.prim.name == name and red.inputs[0] is of
            and tuple(red.params.get("axes", ())) == (nd - 1,)
            and r.out.aval.shape == of.aval.shape[:-1] + (1,))


def _softmax_input(m: _Graph, p: Var):
    """``s`` when ``p = e / rowsum(e)`` with ``e = exp(s - rowmax(s))``, intermediates unshared."""
    div = m.op(p, "div")
    if div is None:
        return None
    e, tot = div.inputs
    ex = m.op(e, "exp", uses=2)
    if ex is None or not _last_axis_reduce(m, tot, "reduce_sum", e):
        return None
    sub = m.op(ex.inputs[0], "sub")
    if sub is None:
        return None
    s, mx = sub.inputs
    if m.uses.get(s) != 2 or not _last_axis_reduce(m, mx, "reduce_max", s):
        return None
    return s


def _is_swap(n: Node) -> bool:
    perm = n.params.get("perm")
    nd = len(perm) if perm else 0
    return n.prim.name == "transpose" and nd >= 2 and \
        tuple(perm) == tuple(range(nd - 2)) + (nd - 1, nd - 2)


def _causal_const(c: np.ndarray, tq: int, tk: int, kind: str):
    """The fill of a constant mask (bool) or bias that is the causal pattern, else None."""
    if c.shape[-2:] != (tq, tk):
        return None
    flat = c.reshape((-1, tq, tk))
    if not (flat == flat[:1]).all():
        return None
    c2 = flat[0]
    tril = np.tril(np.ones((tq, tk), bool))
    if kind == "mask":
        return True if (c2.astype(bool) == tril).all() else None
    if (c2[tril] != 0).any():
        return None
    above = c2[~tril]
    if above.size and (above > CAUSAL_FILL).any():
        return None
    return True


def _match_scores(m: _Graph, s: Var):
    """(q, kT, scale, causal, kind, extra, fill, convert dtype) of scores ``s``."""
    scale, causal, kind, extra, fill = 1.0, False, 0, None, -np.inf
    tq, tk = s.aval.shape[-2:]
    n = m.producer.get(s)
    if n is not None and n.prim.name == "select" and m.uses.get(s) is not None:
        pred, on, off = n.inputs
        c = m.scalar(off)
        if c is None or pred.aval.dtype != np.bool_:
            return None
        const = m.g.consts.get(pred)
        if const is not None and c <= CAUSAL_FILL and _causal_const(np.asarray(const), tq, tk,
                                                                    "mask"):
            causal = True
        else:
            kind, extra = 1, pred
        fill = c
        s = on
        if m.uses.get(s) != 1:
            return None
        n = m.producer.get(s)
    elif n is not None and n.prim.name == "add":
        a, b = n.inputs
        for sc, bias in ((a, b), (b, a)):
            p = m.producer.get(sc)
            if p is not None and p.prim.name in ("mul", "div", "matmul", "convert") and \
                    sc.aval.shape == s.aval.shape and m.uses.get(sc) == 1:
                break
        else:
            return None
        const = m.g.consts.get(bias)
        if const is None:
            return None          # a computed or input bias: its gradient may be needed
        if const is not None and _causal_const(np.asarray(const), tq, tk, "bias"):
            causal = True
        else:
            kind, extra = 2, bias
        s = sc
        n = m.producer.get(s)
    while n is not None and n.prim.name in ("mul", "div"):
        a, b = n.inputs
        ca, cb = m.scalar(a), m.scalar(b)
        if cb is not None and m.producer.get(a) is not None:
            scale = scale * cb if n.prim.name == "mul" else scale / cb
            s = a
        elif ca is not None and n.prim.name == "mul":
            scale *= ca
            s = b
        else:
            return None
        if m.uses.get(s) != 1:
            return None
        n = m.producer.get(s)
    convert = None
    while n is not None and (n.prim.name == "convert" or n.prim.name == "reshape" and
                             n.inputs[0].aval.shape[-2:] == s.aval.shape[-2:]):
        convert = n.params["dtype"] if n.prim.name == "convert" else convert
        s = n.inputs[0]       # (einsum flattens the batch dimensions around its product)
        if m.uses.get(s) != 1:
            return None
        n = m.producer.get(s)
    if n is None or n.prim.name != "matmul":
        return None
    q, kt = n.inputs
    return q, kt, scale, causal, kind, extra, fill, convert


def fuse_attention(g: Graph) -> Graph:
    """Replace each attention pattern of ``g`` by an ``attention`` node (see the module
    docstring); the graph is returned unchanged when there is none."""
    if sum(1 for n in g.nodes if n.prim.name == "matmul") < 2:
        return g
    m = _Graph(g)
    found: dict[Node, tuple] = {}
    for n in g.nodes:
        if n.prim.name != "matmul":
            continue
        p, v = n.inputs
        if m.uses.get(p) != 1 or p.aval.ndim < 2:
            continue
        r = m.producer.get(p)
        if r is not None and r.prim.name == "reshape" and \
                r.inputs[0].aval.shape[-2:] == p.aval.shape[-2:] and m.uses.get(r.inputs[0]) == 1:
            p = r.inputs[0]       # einsum's flattened batch
        s = _softmax_input(m, p)
        if s is None:
            continue
        hit = _match_scores(m, s)
        if hit is None:
            continue
        q, kt, scale, causal, kind, extra, fill, convert = hit
        if v.aval.dtype != p.aval.dtype:
            continue
        found[n] = hit + (p.aval.shape[:-2],)
    if not found:
        return g
    nodes: list[Node] = []
    consts = dict(g.consts)
    for n in g.nodes:
        if n not in found:
            nodes.append(n)
            continue
        q, kt, scale, causal, kind, extra, fill, convert, batch = found[n]
        v = n.inputs[1]
        dt = np.dtype(n.out.aval.dtype)

        def emit(name, ins, **params):
            prim = PRIMITIVES[name]
            out = Var(prim.abstract_eval(*[i.aval for i in ins], **params))
            nodes.append(Node(prim, ins, params, [out], n.source))
            return out
        def unflattened(x):
            if x.aval.shape[:-2] == batch:
                return x
            p = m.producer.get(x)
            if p is not None and p.prim.name == "reshape" and \
                    p.inputs[0].aval.shape == batch + x.aval.shape[-2:]:
                return p.inputs[0]
            return emit("reshape", [x], shape=batch + x.aval.shape[-2:])
        q, kt, v = unflattened(q), unflattened(kt), unflattened(v)
        kp = m.producer.get(kt)
        k = kp.inputs[0] if kp is not None and _is_swap(kp) else None
        if k is None:
            nd = kt.aval.ndim
            k = emit("transpose", [kt], perm=tuple(range(nd - 2)) + (nd - 1, nd - 2))
        if q.aval.dtype != dt:
            q = emit("convert", [q], dtype=dt)
        if k.aval.dtype != dt:
            k = emit("convert", [k], dtype=dt)
        ins = [q, k, v]
        if kind == 1:
            ins.append(extra)
        elif kind == 2:
            if extra in consts:
                c = Var(Aval(extra.aval.shape, dt))
                consts[c] = np.asarray(consts[extra], dt)
                extra = c
            elif extra.aval.dtype != dt:
                extra = emit("convert", [extra], dtype=dt)
            ins.append(extra)
        params = dict(scale=float(scale), causal=bool(causal), kind=int(kind),
                      fill=float(fill))
        stats = [Var(Aval(q.aval.shape[:-1], dt)) for _ in range(2)]
        shape = batch + n.out.aval.shape[-2:]
        o = n.out if shape == n.out.aval.shape else Var(Aval(shape, dt))
        nodes.append(Node(attention_p, ins, params, [o] + stats, n.source))
        if o is not n.out:
            nodes.append(Node(PRIMITIVES["reshape"], [o], dict(shape=n.out.aval.shape), [n.out],
                              n.source))
    return dce(Graph(g.inputs, nodes, g.outputs, consts, g.in_tree, g.out_tree))


GRAPH_REWRITES.append(fuse_attention)


def unfused() -> without_rewrite:
    """``with jitgraph.attention.unfused():`` programs traced and compiled inside keep
    attention as written (the full score matrix): for comparing against the fused kernels."""
    return without_rewrite(fuse_attention)
