"""Fused linear cross-entropy: ``cross_entropy(h @ W, labels)`` without the (tokens, vocabulary)
logits, as Liger Kernel's and Cut Cross-Entropy's fused losses compute it.

``linear_ce(h, W, labels) -> (loss, lse)`` gives each row's loss ``logsumexp(z) - z[label]``
and log-sum-exp of ``z = h @ W``; the compiler runs it over chunks of rows
(``kernels/linear_ce.py``), holding one (rows, V) tile of logits at a time. Its VJP is
``linear_ce_bwd(h, W, labels, lse, ct) -> (dh, dW)``, which recomputes each tile. When a
compiled program's row cotangents do not depend on the losses (a mean or a sum of them: the
usual case), the compiler merges the two into ``linear_ce_train`` (``merge_train_steps``):
one sweep computing losses and gradients together, with the three products of the unfused
program and no recomputation.

``fuse_linear_ce(graph)`` finds the loss in the spellings users write when the logits are used
nowhere else: ``nn.cross_entropy`` (log-sum-exp minus a one-hot sum),
``take_along_axis(log_softmax(z), labels)``, and ``logsumexp(z) - z[arange, labels]``
(``scipy.special.logsumexp`` or a hand-written max shift). A label outside [0, V) picks 0
(as the one-hot sum does; ``nn.cross_entropy`` then masks its loss as NaN).

The ``LINEAR_CE`` record at the end (``rewrite.FusedOp``) is what the pipeline reads: the two
rules (patterns and replacement), the condition on the logits, the cost model
(``cost_estimate``: the rewrite applies only where the fused step is estimated faster, or
where the logits alone would be huge), the host lowerings of the three primitives and
``merge_train_steps``; ``unfused()`` disables it in the current context, ``always_fused()``
applies it past the cost model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import numpy as jnp
from ..autodiff import build_jvp, build_vjp, eval_graph
from ..batching import batch_eval, move_batch_axis
from ..core import PRIMITIVES, Aval, Graph, Node, Primitive, Var, aval_of, register
from ..errors import ShapeError
from ..ops.elementwise import add_p, exp_p, log_p, mul_p, select_p, stop_gradient_p, sub_p
from ..ops.indexing import gather_p
from ..ops.layout import reshape_p
from ..ops.linalg import matmul_p
from ..ops.reductions import reduce_max_p, reduce_sum_p
from ..passes import optimize
from ..rewrite import (FusedOp, GraphIndex, Rebuilder, Rule, host_threads, match, op,
                      register_fused_op, var)
from ..transforms import trace_flat

eq_p = PRIMITIVES["eq"]


# ------------------------------------------------------------------ primitives
def _check(h, w, labels):
    if h.ndim != 2 or w.ndim != 2 or h.shape[1] != w.shape[0]:
        raise ShapeError(f"linear_ce: h (N, D) @ W (D, V) needed, got {h.shape} and {w.shape}")
    if labels.shape != (h.shape[0],) or labels.dtype.kind not in "iu":
        raise ShapeError(f"linear_ce: labels must be (N,) integers, got {labels.shape} "
                         f"{labels.dtype}")
    if h.dtype != w.dtype or h.dtype.kind != "f":
        raise TypeError(f"linear_ce: h and W must share a float dtype, got {h.dtype}, {w.dtype}")


def _rows_np(h, w, labels):
    z = h @ w
    m = z.max(1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
    ok = (labels >= 0) & (labels < z.shape[1])
    picked = np.where(ok, z[np.arange(len(z)), np.where(ok, labels, 0)], 0)
    return z, lse.astype(h.dtype), picked


def _fwd_aval(h, w, labels):
    _check(h, w, labels)
    return [Aval((h.shape[0],), h.dtype), Aval((h.shape[0],), h.dtype)]


def _fwd_impl(h, w, labels):
    z, lse, picked = _rows_np(h, w, labels)
    return (lse - picked).astype(h.dtype), lse


def _dz_np(z, lse, labels, ct):
    dz = np.exp(z - lse[:, None]) * ct[:, None]
    ok = (labels >= 0) & (labels < z.shape[1])
    rows = np.arange(len(z))[ok]
    dz[rows, labels[ok]] -= ct[ok]
    return dz


def _bwd_aval(h, w, labels, lse, ct):
    return [Aval(h.shape, h.dtype), Aval(w.shape, w.dtype)]


def _bwd_impl(h, w, labels, lse, ct):
    dz = _dz_np(h @ w, lse, labels, ct)
    return (dz @ w.T).astype(h.dtype), (h.T @ dz).astype(w.dtype)


def _train_aval(h, w, labels, ct):
    _check(h, w, labels)
    return [Aval((h.shape[0],), h.dtype)] * 2 + [Aval(h.shape, h.dtype), Aval(w.shape, w.dtype)]


def _train_impl(h, w, labels, ct):
    z, lse, picked = _rows_np(h, w, labels)
    dz = _dz_np(z, lse, labels, ct)
    dt = h.dtype
    return ((lse - picked).astype(dt), lse, (dz @ w.T).astype(dt), (h.T @ dz).astype(dt))


def _composite(h, w, labels):
    """The row losses and log-sum-exps written with jnp: what the higher-order and batching
    rules evaluate."""
    z = jnp.matmul(h, w)
    m = jnp.stop_gradient(jnp.max(z, axis=1, keepdims=True))
    lse = jnp.log(jnp.sum(jnp.exp(z - m), axis=1)) + m[:, 0]
    v = z.shape[1]
    hit = jnp.reshape(labels, (-1, 1)) == np.arange(v)
    return lse - jnp.sum(jnp.where(hit, z, jnp.zeros((), z.dtype)), axis=1), lse


def _composite_graph(avals, with_ct: bool, with_lse: bool = False) -> Graph:
    """(h, W, labels) -> the losses (and lse), or with ``with_ct`` (h, W, labels, ct) ->
    (dh, dW) of the losses."""
    with unfused():
        outs = (lambda h, w, y: list(_composite(h, w, y))) if with_lse else \
            (lambda h, w, y: [_composite(h, w, y)[0]])
        g, caps = trace_flat(outs, avals, "linear_ce")
        assert not caps
        g = optimize(g)
        return optimize(build_vjp(g, [0, 1])) if with_ct else g


def _batched_composite(args, dims, graph: Graph):
    outs, out_dims = batch_eval(graph, list(args), list(dims))
    return [o if d == 0 or d is None else jnp.moveaxis(o, d, 0) for o, d in zip(outs, out_dims)], \
        [0 if d is not None else None for d in out_dims]


def _fwd_batch(args, dims):
    """W shared: the examples' rows are one longer batch of rows (one fused call); else the
    composite, batched."""
    h, w, labels = args
    dh, dw, dl = dims
    if dw is None and (dh is not None or dl is not None):
        size = int(h.shape[dh] if dh is not None else labels.shape[dl])
        hb = move_batch_axis(h, dh, 0) if dh is not None else \
            jnp.broadcast_to(h, (size,) + tuple(h.shape))
        lb = move_batch_axis(labels, dl, 0) if dl is not None else \
            jnp.broadcast_to(labels, (size,) + tuple(labels.shape))
        n = hb.shape[1]
        loss, lse = linear_ce_p(jnp.reshape(hb, (size * n, hb.shape[2])), w,
                                jnp.reshape(lb, (size * n,)))
        return [jnp.reshape(loss, (size, n)), jnp.reshape(lse, (size, n))], [0, 0]
    return _batched_composite(args, dims, _composite_graph(_avals(*_unbatched(args, dims)),
                                                           False, True))


def _unbatched(args, dims):
    """One example's operands (for the avals of the composite)."""
    return [x if d is None else jnp.take(x, 0, axis=d) for x, d in zip(args, dims)]


def _bwd_batch(args, dims):
    h, w, labels, lse, ct = args
    hd, wd, ld, _, cd = dims
    one = _unbatched([h, w, labels], [hd, wd, ld])
    return _batched_composite([h, w, labels, ct], [hd, wd, ld, cd],
                              _composite_graph(_avals(*one), True))


def _train_batch(args, dims):
    h, w, labels, ct = args
    stats, sd = _fwd_batch([h, w, labels], dims[:3])
    grads, gd = _bwd_batch([h, w, labels, None, ct], list(dims[:3]) + [None, dims[3]])
    return stats + grads, sd + gd


def _avals(*xs):
    return [aval_of(x) for x in xs]


def _fwd_vjp(cts, outs, h, w, labels):
    ct, clse = cts
    if clse is not None:
        raise NotImplementedError("the gradient through linear_ce's log-sum-exp output")
    if ct is None:
        return [None, None, None]
    dh, dw = linear_ce_bwd_p(h, w, labels, outs[1], ct)
    return [dh, dw, None]


def _fwd_jvp(ts, outs, h, w, labels):
    if ts[0] is None and ts[1] is None:
        return [None, None]
    with unfused():
        g = optimize(build_jvp(_composite_graph(_avals(h, w, labels), False), [0, 1]))
    tans = [t if t is not None else jnp.zeros_like(x) for t, x in zip(ts[:2], (h, w))]
    return [eval_graph(g, [h, w, labels] + tans)[1], None]


def _bwd_vjp(cts, outs, h, w, labels, lse, ct):
    """Second order: the VJP of the composite's VJP (lse is a function of h and W)."""
    first = _composite_graph(_avals(h, w, labels), True)
    with unfused():
        second = optimize(build_vjp(first, [0, 1, 3]))
    zs = [c if c is not None else jnp.zeros_like(x) for c, x in zip(cts, (h, w))]
    gh, gw, gct = eval_graph(second, [h, w, labels, ct] + zs)
    return [gh, gw, None, None, gct]


def _bwd_jvp(ts, outs, h, w, labels, lse, ct):
    tans = [ts[0], ts[1], ts[4]]
    if all(t is None for t in tans):
        return [None, None]
    first = _composite_graph(_avals(h, w, labels), True)
    with unfused():
        g = optimize(build_jvp(first, [0, 1, 3]))
    zs = [t if t is not None else jnp.zeros_like(x) for t, x in zip(tans, (h, w, ct))]
    return eval_graph(g, [h, w, labels, ct] + zs)[2:]


linear_ce_p = register(Primitive(
    "linear_ce", kind="opaque", abstract_eval=_fwd_aval, impl=_fwd_impl, vjp=_fwd_vjp,
    jvp=_fwd_jvp, multiple_results=True, batch=_fwd_batch))
linear_ce_bwd_p = register(Primitive(
    "linear_ce_bwd", kind="opaque", abstract_eval=_bwd_aval, impl=_bwd_impl, vjp=_bwd_vjp,
    jvp=_bwd_jvp, multiple_results=True, batch=_bwd_batch))
# made by the compiler only, after differentiation
linear_ce_train_p = register(Primitive(
    "linear_ce_train", kind="opaque", abstract_eval=_train_aval, impl=_train_impl,
    multiple_results=True, differentiable=False, batch=_train_batch))


# ------------------------------------------------------------------ the rewrite
_ROWS = lambda n: tuple(n.params.get("axes", ())) == (1,)     # a reduction over axis 1

# ``log(rowsum(exp(z - shift)))`` as (N, 1), binding ``z`` and ``shift``
LOG_SUM_EXP_SHIFTED = op(log_p, op(reshape_p, op(reduce_sum_p, op(exp_p, op(
    sub_p, var("z"), var("shift"))), where=_ROWS)))


def _row_max_shift(ix: GraphIndex, v: Var) -> Var | None:
    """``z`` when ``v`` is the (stopped, finite-guarded) row max of ``z``, (N, 1)."""
    v = ix.through(v, stop_gradient_p)
    sel = ix.node(v, select_p)
    if sel is not None:
        v = sel.inputs[1]
    r = ix.node(v, reshape_p)
    red = ix.node(r.inputs[0], reduce_max_p) if r is not None else None
    return red.inputs[0] if red is not None and _ROWS(red) else None


def _log_sum_exp_shifted(ix: GraphIndex, v: Var) -> tuple[Var, Var] | None:
    """(z, shift) when ``v`` = log(rowsum(exp(z - shift))) with ``shift`` z's row max."""
    hit = match(LOG_SUM_EXP_SHIFTED, ix, v)
    if hit is None or _row_max_shift(ix, hit["shift"]) is not hit["z"]:
        return None
    return hit["z"], hit["shift"]


def _lse(ix: GraphIndex, v: Var) -> Var | None:
    """``z`` when ``v`` is logsumexp(z) by rows, (N,) or (N, 1)."""
    add = ix.node(ix.through(v, reshape_p), add_p)
    if add is None:
        return None
    for a, b in (add.inputs, add.inputs[::-1]):
        hit = _log_sum_exp_shifted(ix, a)
        if hit is not None and hit[1] is b:
            return hit[0]
    return None


def _gathered_rows(ix: GraphIndex, ga: Node, z: Var) -> tuple[Var, Var] | None:
    """(z, labels) when ``ga`` gathers z[arange(N), labels] (``ga`` reads ``z``)."""
    if len(ga.inputs) != 3:
        return None
    rows, lab = ga.inputs[1:]
    c = ix.const(rows)
    if c is None or c.reshape(-1).shape != (z.aval.shape[0],) or \
            np.any(c.reshape(-1) != np.arange(z.aval.shape[0])):
        return None
    return z, lab


def _picked(ix: GraphIndex, v: Var) -> tuple[Var, Var] | None:
    """(z, labels) when ``v`` is z[i, labels[i]] by rows, (N,): a one-hot sum or a gather."""
    v = ix.through(v, reshape_p)
    s = ix.node(v, reduce_sum_p)
    if s is not None and _ROWS(s):
        sel = ix.node(s.inputs[0], select_p)
        if sel is None or ix.const(sel.inputs[2]) is None or \
                np.any(ix.const(sel.inputs[2]) != 0):
            return None
        hit, z = sel.inputs[0], sel.inputs[1]
        eq = ix.node(hit, eq_p)
        if eq is None:
            return None
        lab, ar = eq.inputs
        c = ix.const(ar)
        v_ = z.aval.shape[1]
        if c is None or c.shape != (v_,) or np.any(c != np.arange(v_)):
            return None
        lab = ix.through(lab, reshape_p)
        return (z, lab) if lab.aval.shape == (z.aval.shape[0],) else None
    ga = ix.node(v, gather_p)
    return _gathered_rows(ix, ga, ga.inputs[0]) if ga is not None else None


def _logits(ix: GraphIndex, z: Var) -> list[Var] | None:
    """(h, W) when ``z`` = h @ W with 2-D operands."""
    n = ix.node(z, matmul_p)
    if n is None or z.aval.ndim != 2 or n.inputs[0].aval.ndim != 2:
        return None
    return n.inputs


@dataclass(frozen=True)
class _Hit:
    """One loss found: its logits, labels and sign, and the product making the logits."""
    z: Var
    labels: Var
    sign: float
    logits: list | None


def _lse_minus_picked(ix: GraphIndex, n: Node) -> _Hit | None:
    """``logsumexp(z) - z[arange, labels]`` (``nn.cross_entropy``, ``scipy``'s logsumexp)."""
    a, b = n.inputs
    z = _lse(ix, a)
    p = _picked(ix, b) if z is not None else None
    if p is None or p[0] is not z or n.out.aval.shape != (z.aval.shape[0],):
        return None
    return _Hit(z, p[1], 1.0, _logits(ix, z))


def _gathered_log_softmax(ix: GraphIndex, n: Node) -> _Hit | None:
    """``take_along_axis(log_softmax(z), labels)``: log_softmax = (z - shift) - log(sum)."""
    ls = ix.node(n.inputs[0], sub_p)
    if ls is None:
        return None
    shifted, logsum = ls.inputs
    hit = _log_sum_exp_shifted(ix, logsum)
    sub = ix.node(shifted, sub_p)
    if hit is None or sub is None or sub.inputs[0] is not hit[0] or sub.inputs[1] is not hit[1]:
        return None
    z = hit[0]
    p = _gathered_rows(ix, n, z)
    if p is None or n.out.aval.shape not in ((z.aval.shape[0],), (z.aval.shape[0], 1)):
        return None
    return _Hit(z, p[1], -1.0, _logits(ix, z))


def _replace(b: Rebuilder, n: Node, hit: _Hit) -> None:
    """The loss from one ``linear_ce`` node per (h, W, labels), signed and shaped as ``n``."""
    z, lab = hit.z, hit.labels
    h, w = hit.logits
    if lab.aval.shape != (z.aval.shape[0],):
        lab = b.emit(reshape_p, [lab], dict(shape=(z.aval.shape[0],)))
    key = (h, w, lab)
    if key not in b.memo:
        outs = [Var(Aval((z.aval.shape[0],), z.aval.dtype)) for _ in range(2)]
        b.memo[key] = b.add(Node(linear_ce_p, [h, w, lab], {}, outs, n.source))[0]
    loss = b.memo[key]
    if hit.sign < 0:
        c = Var(Aval((), z.aval.dtype))
        b.consts[c] = np.asarray(-1.0, z.aval.dtype)
        loss = b.emit(mul_p, [loss, c])
    b.add(Node(reshape_p, [loss], dict(shape=n.out.aval.shape), [n.out], n.source))


def _logits_gone(out: Graph, hits: list) -> bool:
    """Whether the rewritten graph no longer computes the logits (else nothing is saved)."""
    zs = {hit.z for hit in hits}
    return not any(n.prim is matmul_p and n.out in zs for n in out.nodes)


def fuse_linear_ce(g: Graph) -> Graph:
    """Replace each fused-linear-cross-entropy pattern of ``g`` (module docstring); ``g``
    itself when there is none or the logits are used elsewhere."""
    return LINEAR_CE.apply(g)


# ------------------------------------------------------------------ one sweep for training
def merge_train_steps(g: Graph) -> Graph:
    """A ``linear_ce`` and its ``linear_ce_bwd`` become one ``linear_ce_train`` when the row
    cotangents do not depend on the forward's results: the nodes they do depend on move
    before it (they depend on nothing it computes)."""
    bwds = [n for n in g.nodes if n.prim is linear_ce_bwd_p]
    if not bwds:
        return g
    producer = GraphIndex(g).producer
    for b in bwds:
        h, w, lab, lse, ct = b.inputs
        f = producer.get(lse)
        if f is None or f.prim is not linear_ce_p or f.inputs != [h, w, lab]:
            continue
        anc, stack = [], [ct]
        seen: set = set()
        ok = True
        while stack:
            v = stack.pop()
            n = producer.get(v)
            if n is None or n in seen:
                continue
            seen.add(n)
            if n is f:
                ok = False
                break
            anc.append(n)
            stack.extend(n.inputs)
        if not ok:
            continue
        pos = g.nodes.index(f)
        moved = [n for n in g.nodes[pos + 1:] if n in seen]
        merged = Node(linear_ce_train_p, [h, w, lab, ct], {}, list(f.outs) + list(b.outs),
                      f.source)
        rest = [n for n in g.nodes[pos + 1:] if n not in seen and n is not b]
        g = Graph(g.inputs, g.nodes[:pos] + moved + [merged] + rest, g.outputs, g.consts,
                  g.in_tree, g.out_tree)
        producer = GraphIndex(g).producer
    return g


def unfused():
    """``with jitgraph.linear_ce.unfused():`` programs traced and compiled inside keep the
    cross-entropy of a product as written (the full logits): for comparing against the fused
    kernels. It holds for the current thread (or task) only."""
    return LINEAR_CE.disabled()


# ------------------------------------------------------------------ the cost model
# Microseconds per unit of each term of a float32 value-and-gradient step on the CPU, one
# table for each side (``cost_terms`` counts the units). Fitted with
# ``bench/fused_vs_unfused.py --only linear_ce --fit`` to two runs of its grid of 18 shapes (N
# in {64, 512, 4096}, d in {64, 256}, V in {64, 512, 8192}; one thread of an AVX-512 Xeon, the
# other core busy with other work): each side's medians as a non-negative sum of its terms,
# rows weighted by 1 / time. The fused step was slower at 31 of the 36 measurements (up to
# 2.1x; the others within the noise): its per-row loops cost twice the unfused program's
# generated loops per logit, and its products over chunks of rows a little more than whole
# products, so with these constants the rewrite pays only for memory (``LOGITS_ALWAYS_FUSED``).
FUSED_US = {
    "call": 26.5,           # the host step: operand copies, outputs
    "chunk": 0.0,           # per chunk of rows (BLAS calls, a thread dispatch): fitted to 0
    "logit": 1.11e-2,       # per logit: its exponential, the row loops
    "logit_feature": 7.34e-5,  # per logit and feature: three products, chunk by chunk
    "dispatch": 45.0,       # per chunk with more than one thread: start and join Python
}                           # threads (attention's measurement; not in the one-thread fit)
UNFUSED_US = {
    "call": 13.4,           # the unfused step's kernels
    "logit": 5.38e-3,       # per logit: the generated loops over (N, V)
    "logit_feature": 6.98e-5,  # per logit and feature: three whole products
}
MARGIN = 0.8                # fuse when the fused estimate is below this times the unfused one
LOGITS_ALWAYS_FUSED = 1 << 28   # logit bytes (256 MiB) from which the rewrite is kept for memory


def _chunks(n: int) -> int:
    """How many chunks of rows ``kernels/linear_ce.py`` takes (its ``chunk_rows``)."""
    rows = min(1024, max(64, -(-n // 8)))
    return -(-n // rows)


def cost_terms(n: int, d: int, v: int, threads: int = 1) -> tuple[dict, dict]:
    """How many units of each term of ``FUSED_US`` and ``UNFUSED_US`` a step takes at one
    shape: the same logits and products either way, the fused step in chunks of rows, each
    chunk's row loops split over ``threads`` Python threads."""
    logits = n * v
    chunks = _chunks(n)
    fused = {"call": 1, "chunk": chunks, "logit": logits, "logit_feature": logits * d,
             "dispatch": chunks if threads > 1 else 0}
    unfused = {"call": 1, "logit": logits, "logit_feature": logits * d}
    return fused, unfused


@dataclass(frozen=True)
class Cost:
    """The estimated microseconds of a step each way, the bytes of the unfused program's
    logits, and the decision."""
    fused_us: float
    unfused_us: float
    logit_bytes: int

    @property
    def ratio(self) -> float:
        return self.fused_us / self.unfused_us

    @property
    def wins(self) -> bool:
        """Fused when it is estimated faster by ``MARGIN``, or when the logits alone would take
        ``LOGITS_ALWAYS_FUSED`` bytes (then memory decides)."""
        return self.ratio < MARGIN or self.logit_bytes >= LOGITS_ALWAYS_FUSED


def cost_estimate(n: int, d: int, v: int, itemsize: int = 4, threads: int = 1) -> Cost:
    """The cost model at one shape (``cost_terms`` priced by ``FUSED_US`` and ``UNFUSED_US``)."""
    fused, unfused = cost_terms(n, d, v, threads)
    return Cost(sum(FUSED_US[k] * c for k, c in fused.items()),
                sum(UNFUSED_US[k] * c for k, c in unfused.items()), n * v * itemsize)


def _wins(hit: _Hit) -> bool:
    """The cost model at a match (``cost_estimate`` of its shapes)."""
    n, v = hit.z.aval.shape
    h = hit.logits[0]
    return cost_estimate(n, h.aval.shape[1], v, np.dtype(hit.z.aval.dtype).itemsize,
                         host_threads()).wins


def always_fused():
    """``with jitgraph.linear_ce.always_fused():`` programs traced and compiled inside fuse
    every linear cross-entropy pattern, whatever the cost model says (to measure or test the
    fused kernels where the unfused program is faster). It holds for the current thread (or
    task) only."""
    return LINEAR_CE.forced()


# ------------------------------------------------------------------ lowerings
def _rows(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x)


def _host_forward(node: Node, one_blas_thread: Callable) -> Callable:
    """The host step of a ``linear_ce`` node: ``kernels/linear_ce.py``'s chunked forward."""
    from ..kernels.linear_ce import forward

    def call(h, w, labels):
        loss, lse = np.empty(h.shape[0], h.dtype), np.empty(h.shape[0], h.dtype)
        forward(_rows(h), _rows(w), np.asarray(labels, np.int64), loss, lse)
        return loss, lse
    return call


def _host_backward(node: Node, one_blas_thread: Callable) -> Callable:
    """The host step of a ``linear_ce_bwd`` node."""
    from ..kernels.linear_ce import backward

    def call(h, w, labels, lse, ct):
        dh, dw = np.empty(h.shape, h.dtype), np.empty(w.shape, w.dtype)
        backward(_rows(h), _rows(w), np.asarray(labels, np.int64), _rows(lse), _rows(ct), dh, dw)
        return dh, dw
    return call


def _host_train(node: Node, one_blas_thread: Callable) -> Callable:
    """The host step of a ``linear_ce_train`` node: losses and gradients in one sweep."""
    from ..kernels.linear_ce import train

    def call(h, w, labels, ct):
        n = h.shape[0]
        loss, lse = np.empty(n, h.dtype), np.empty(n, h.dtype)
        dh, dw = np.empty(h.shape, h.dtype), np.empty(w.shape, w.dtype)
        train(_rows(h), _rows(w), np.asarray(labels, np.int64), _rows(ct), loss, lse, dh, dw)
        return loss, lse, dh, dw
    return call


# ------------------------------------------------------------------ the record
LINEAR_CE = register_fused_op(FusedOp(
    "linear_ce",
    primitives=(linear_ce_p, linear_ce_bwd_p, linear_ce_train_p),
    rules=(Rule(roots=(sub_p,), match=_lse_minus_picked, replace=_replace),
           Rule(roots=(gather_p,), match=_gathered_log_softmax, replace=_replace)),
    conditions=(lambda hit: hit.logits is not None,),      # the logits are a 2-D product
    wins=_wins,
    may_match=lambda g: any(n.prim is matmul_p for n in g.nodes) and
    any(n.prim is gather_p or n.prim is reduce_max_p for n in g.nodes),
    prepare=optimize,       # constants folded: a raw trace spells them as nodes
    keep=_logits_gone,
    lowerings={"host": {linear_ce_p: _host_forward, linear_ce_bwd_p: _host_backward,
                        linear_ce_train_p: _host_train}},
    merge=merge_train_steps))
