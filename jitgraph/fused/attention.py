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
compiler before fusing, so it applies to code that never calls ``nn``. The ``ATTENTION`` record
at the end (``rewrite.FusedOp``) is what the pipeline reads: the rule (``SOFTMAX`` and the
scores' forms, and the replacement), its condition, its cost model (``cost_estimate``: the
rewrite applies only at shapes where the fused training step is estimated faster, or where
the scores alone would be huge), and the lowerings of both primitives on the host and in CUDA
programs; ``unfused()`` disables it in the current context, ``always_fused()`` applies it
past the cost model.

The NumPy references compute the full matrices (the ground truth); the second derivative
of ``attention_bwd`` differentiates that composite again (rarely needed, never fast).
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass
from typing import Callable

from .. import dtypes
from .. import numpy as jnp
from ..autodiff import build_jvp, build_vjp, eval_graph
from ..batching import move_batch_axis
from ..core import Aval, Graph, Node, Primitive, Var, aval_of, bind, register
from ..errors import ShapeError
from ..ops.elementwise import (add_p, convert_p, div_p, exp_p, mul_p, select_p, stop_gradient_p,
                              sub_p)
from ..ops.layout import reshape_p, transpose_p
from ..ops.linalg import matmul_p
from ..ops.reductions import reduce_max_p, reduce_sum_p
from ..passes import optimize
from ..rewrite import (FusedOp, GraphIndex, Rebuilder, Rule, host_threads, is_swap, match,
                      maybe, op, register_fused_op, var)
from ..transforms import trace_flat

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
def _row_reduce(reduce: Primitive, of: str):
    """A keepdims reduction of the var bound to ``of`` over its last axis (as reshape of the
    reduction), stopped or not."""
    last_axis = lambda n: tuple(n.params.get("axes", ())) == (n.inputs[0].aval.ndim - 1,)
    keepdims = lambda n: n.out.aval.shape == n.inputs[0].aval.shape + (1,)
    return maybe(stop_gradient_p, op(reshape_p, op(reduce, var(of), where=last_axis),
                                     where=keepdims))


# ``e / rowsum(e)`` with ``e = exp(s - rowmax(s))``, the intermediates used nowhere else
SOFTMAX = op(div_p, op(exp_p, op(sub_p, var("s", uses=2), _row_reduce(reduce_max_p, "s"),
                                 uses=1), name="e", uses=2),
             _row_reduce(reduce_sum_p, "e"), uses=1)


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


@dataclass
class _Hit:
    """One attention found: the operands and the primitive's parameters."""
    index: GraphIndex
    probs: Var                 # softmax(S), (batch..., Tq, Tk)
    v: Var
    q: Var | None = None
    kt: Var | None = None      # the product's right operand, k swapped
    scale: float = 1.0
    causal: bool = False
    kind: int = 0
    extra: Var | None = None
    fill: float = -np.inf


def _masked(ix: GraphIndex, s: Var, hit: _Hit) -> Var | None:
    """Scores under a ``where(mask, s, fill)`` or ``s + bias`` (a constant causal one becomes
    ``causal``): the scores inside, else ``s`` itself; None when the form is not fusable."""
    tq, tk = s.aval.shape[-2:]
    n = ix.node(s, select_p)
    if n is not None:
        pred, on, off = n.inputs
        c = ix.scalar(off)
        if c is None or pred.aval.dtype != np.bool_:
            return None
        const = ix.const(pred)
        if const is not None and c <= CAUSAL_FILL and _causal_const(const, tq, tk, "mask"):
            hit.causal = True
        else:
            hit.kind, hit.extra = 1, pred
        hit.fill = c
        return on if ix.uses(on) == 1 else None
    n = ix.node(s, add_p)
    if n is None:
        return s
    for inner, bias in (n.inputs, n.inputs[::-1]):
        if ix.node(inner, mul_p, div_p, matmul_p, convert_p, uses=1) is not None and \
                inner.aval.shape == s.aval.shape:
            break
    else:
        return None
    const = ix.const(bias)
    if const is None:
        return None          # a computed or input bias: its gradient may be needed
    if _causal_const(const, tq, tk, "bias"):
        hit.causal = True
    else:
        hit.kind, hit.extra = 2, bias
    return inner


def _scaled(ix: GraphIndex, s: Var, hit: _Hit) -> Var | None:
    """Scores times or over scalar constants: the scores inside (their product in ``scale``)."""
    while (n := ix.node(s, mul_p, div_p)) is not None:
        a, b = n.inputs
        ca, cb = ix.scalar(a), ix.scalar(b)
        if cb is not None and a in ix.producer:
            hit.scale = hit.scale * cb if n.prim is mul_p else hit.scale / cb
            s = a
        elif ca is not None and n.prim is mul_p:
            hit.scale *= ca
            s = b
        else:
            return None
        if ix.uses(s) != 1:
            return None
    return s


def _uncast(ix: GraphIndex, s: Var) -> Var | None:
    """Scores under converts and batch reshapes (einsum flattens the batch dimensions around
    its product): the scores inside."""
    while True:
        n = ix.producer.get(s)
        if n is None or not (n.prim is convert_p or n.prim is reshape_p and
                             n.inputs[0].aval.shape[-2:] == s.aval.shape[-2:]):
            return s
        s = n.inputs[0]
        if ix.uses(s) != 1:
            return None


def _match(ix: GraphIndex, n: Node) -> _Hit | None:
    """``matmul(softmax(S), v)`` with ``S`` a scaled, masked or biased ``matmul(q, kT)``."""
    p, v = n.inputs
    if ix.uses(p) != 1 or p.aval.ndim < 2:
        return None
    r = ix.node(p, reshape_p)
    if r is not None and r.inputs[0].aval.shape[-2:] == p.aval.shape[-2:] and \
            ix.uses(r.inputs[0]) == 1:
        p = r.inputs[0]       # einsum's flattened batch
    soft = match(SOFTMAX, ix, p)
    if soft is None:
        return None
    hit = _Hit(ix, probs=p, v=v)
    s = soft["s"]
    for step in (_masked, _scaled):
        s = step(ix, s, hit)
        if s is None:
            return None
    s = _uncast(ix, s)
    prod = ix.node(s, matmul_p) if s is not None else None
    if prod is None:
        return None
    hit.q, hit.kt = prod.inputs
    return hit


def _replace(b: Rebuilder, n: Node, hit: _Hit) -> None:
    """One ``attention`` node (operands unflattened, k unswapped, cast to the output dtype)."""
    ix, dt = hit.index, np.dtype(n.out.aval.dtype)
    batch = hit.probs.aval.shape[:-2]

    def unflattened(x):
        if x.aval.shape[:-2] == batch:
            return x
        p = ix.node(x, reshape_p)
        if p is not None and p.inputs[0].aval.shape == batch + x.aval.shape[-2:]:
            return p.inputs[0]
        return b.emit(reshape_p, [x], dict(shape=batch + x.aval.shape[-2:]))

    def cast(x):
        return x if x.aval.dtype == dt else b.emit(convert_p, [x], dict(dtype=dt))
    q, kt, v = unflattened(hit.q), unflattened(hit.kt), unflattened(hit.v)
    kp = ix.producer.get(kt)
    if kp is not None and is_swap(kp):
        k = kp.inputs[0]
    else:
        nd = kt.aval.ndim
        k = b.emit(transpose_p, [kt], dict(perm=tuple(range(nd - 2)) + (nd - 1, nd - 2)))
    q, k = cast(q), cast(k)
    ins = [q, k, v]
    extra = hit.extra
    if hit.kind == 2 and extra in b.consts:
        extra = b.const(b.consts[extra], Aval(extra.aval.shape, dt))
    elif hit.kind == 2:
        extra = cast(extra)
    if hit.kind:
        ins.append(extra)
    params = dict(scale=float(hit.scale), causal=bool(hit.causal), kind=int(hit.kind),
                  fill=float(hit.fill))
    stats = [Var(Aval(q.aval.shape[:-1], dt)) for _ in range(2)]
    shape = batch + n.out.aval.shape[-2:]
    o = n.out if shape == n.out.aval.shape else Var(Aval(shape, dt))
    b.add(Node(attention_p, ins, params, [o] + stats, n.source))
    if o is not n.out:
        b.add(Node(reshape_p, [o], dict(shape=n.out.aval.shape), [n.out], n.source))


def fuse_attention(g: Graph) -> Graph:
    """Replace each attention pattern of ``g`` by an ``attention`` node (see the module
    docstring); the graph is returned unchanged when there is none."""
    return ATTENTION.apply(g)


def unfused():
    """``with jitgraph.attention.unfused():`` programs traced and compiled inside keep
    attention as written (the full score matrix): for comparing against the fused kernels.
    It holds for the current thread (or task) only."""
    return ATTENTION.disabled()


# ------------------------------------------------------------------ the cost model
# Microseconds per unit of each term of a float32 training step (forward + backward) on the
# CPU, one table for each side (``cost_terms`` counts the units). Fitted with
# ``bench/fused_vs_unfused.py --only attention --fit`` (BENCH_THREADS=1) to its grid of 96
# shapes (B*H in {1, 8, 32}, T in {16, 64, 128, 512}, head size in {16, 32, 64, 128}, causal and
# not) on one thread of a 2-core AMD EPYC (Zen 4, AVX-512), once the fused kernels ran on
# Numba's threads: each side's medians as a non-negative sum of its terms, each row weighted
# by 1 / its time so that small shapes count as much as large ones. The fitted ratio is within
# 20 % of the measured one at most shapes (the machine's noise is of that size), hence
# ``MARGIN``. Both sides' work runs on every thread (``cost_estimate``), their calls' fixed
# work on one.
FUSED_US = {
    "call": 197.0,          # the two host steps: operand copies, outputs, launches
    "tile": 3.08,           # per (up to) 128 x 128 tile: five BLAS calls from the kernel
    "score": 8.39e-4,       # per score seen: two exponentials (forward, recomputed), loops
    "masked_score": 4.61e-3,  # per score under a mask or bias (not in the grid: the
    # unfused side's price before exp_f32 stopped making denormals, kept until measured)
    "score_feature": 2.08e-4,  # per score of the tiles computed, per feature: tile products
}
UNFUSED_US = {
    "call": 45.6,           # the unfused step's extra kernels
    "batch": 2.74,          # per batch matrix: the batched products' BLAS calls
    "score": 1.13e-3,       # per score: the softmax loops and their backward over (T, T)
    "masked_score": 1.28e-4,  # per score under the causal cut, a mask or bias: the selects
    "spilled_score": 1.85e-3,  # per score beyond CACHE_BYTES: the (T, T) passes from memory
    "score_feature": 1.42e-4,  # per score and feature: six batched products
}
CACHE_BYTES = 1 << 21       # about one core's L2 cache: the scores that stay in cache
MARGIN = 0.8                # fuse when the fused estimate is below this times the unfused one
SCORES_ALWAYS_FUSED = 1 << 28   # score bytes (256 MiB) from which the rewrite is kept for memory
# the fused kernels' tile rows and the batches per thread from which their gradient takes one
# sweep a batch (``kernels/attention.py``'s ``BLOCK`` and ``BATCH_SWEEP_MIN``, which a test
# checks: the cost model imports no Numba, so a process running cached programs need not)
KERNEL_BLOCK = 128
KERNEL_SWEEP_MIN = 4


def cost_terms(batches: int, tq: int, tk: int, d: int, dv: int, causal: bool,
               masked: bool = False, itemsize: int = 4, threads: int = 1) -> tuple[dict, dict]:
    """How many units of each term of ``FUSED_US`` and ``UNFUSED_US`` a training step takes
    at one shape. The fused kernels (``kernels/attention.py``) walk 128-row query blocks over
    the key blocks up to the diagonal when causal, computing whole tiles but exponentials only
    for the scores each row sees; the unfused program computes every score, each batch
    matrix with its own BLAS calls, and its passes over the (T, T) scores run from memory
    once they outgrow the cache. (Both sides' work is priced as one thread's: the fit is of
    one-thread runs; ``cost_estimate`` shares it over the threads, so ``threads`` changes no
    count here.)"""
    block = KERNEL_BLOCK
    tiles = computed = 0
    for i0 in range(0, tq, block):
        i1 = min(i0 + block, tq)
        keys = min(tk, i1) if causal else tk
        tiles += -(-keys // block)
        computed += (i1 - i0) * keys
    cut = min(tq, tk)           # causal: row i sees min(tk, i + 1) keys
    seen = cut * (cut + 1) // 2 + (tq - cut) * tk if causal else tq * tk
    scores = batches * tq * tk
    feats = (d + dv) / 2
    fused = {"call": 1, "tile": batches * tiles, "score": batches * seen,
             "masked_score": scores if masked else 0,
             "score_feature": batches * computed * feats}
    unfused = {"call": 1, "batch": batches, "score": scores,
               "masked_score": scores if causal or masked else 0,
               "spilled_score": max(0, scores * itemsize - CACHE_BYTES) // itemsize,
               "score_feature": scores * feats}
    return fused, unfused


@dataclass(frozen=True)
class Cost:
    """The estimated microseconds of a training step each way, the bytes of the unfused
    program's scores, and the decision."""
    fused_us: float
    unfused_us: float
    score_bytes: int

    @property
    def ratio(self) -> float:
        return self.fused_us / self.unfused_us

    @property
    def wins(self) -> bool:
        """Fused when it is estimated faster by ``MARGIN``, or when the scores alone would take
        ``SCORES_ALWAYS_FUSED`` bytes (then memory decides)."""
        return self.ratio < MARGIN or self.score_bytes >= SCORES_ALWAYS_FUSED


def cost_estimate(batches: int, tq: int, tk: int, d: int, dv: int, causal: bool,
                  masked: bool = False, itemsize: int = 4, threads: int = 1) -> Cost:
    """The cost model at one shape (``cost_terms`` priced by ``FUSED_US`` and ``UNFUSED_US``)."""
    fused, unfused = cost_terms(batches, tq, tk, d, dv, causal, masked, itemsize, threads)
    # Both sides' work runs on every thread, one pool (the unfused program's batched products
    # and threaded loops; the fused kernels' work items, ``kernels.threads.run_rows``), their
    # calls' fixed work on one; the fit is of one-thread runs. The fused sweeps have as many
    # work items as batches (the gradient's one sweep a batch) or query blocks: with fewer
    # than threads, or a remainder, some threads idle.
    threads = max(1, threads)
    one_sweep = batches >= KERNEL_SWEEP_MIN * threads or tk <= KERNEL_BLOCK
    items = batches if one_sweep else batches * -(-tq // KERNEL_BLOCK)
    share = items / -(-items // threads)
    fused_work = sum(FUSED_US[k] * n for k, n in fused.items() if k != "call")
    work = sum(UNFUSED_US[k] * n for k, n in unfused.items() if k != "call")
    return Cost(FUSED_US["call"] * fused["call"] + fused_work / share,
                UNFUSED_US["call"] * unfused["call"] + work / threads,
                batches * tq * tk * itemsize)


def _wins(hit: _Hit) -> bool:
    """The cost model at a match (``cost_estimate`` of its shapes)."""
    batches = int(np.prod(hit.probs.aval.shape[:-2], dtype=np.int64))
    tq, tk = hit.probs.aval.shape[-2:]
    return cost_estimate(batches, tq, tk, hit.q.aval.shape[-1], hit.v.aval.shape[-1],
                         hit.causal, bool(hit.kind), np.dtype(hit.probs.aval.dtype).itemsize,
                         host_threads()).wins



def always_fused():
    """``with jitgraph.attention.always_fused():`` programs traced and compiled inside fuse
    every attention pattern, whatever the cost model says (to measure or test the fused
    kernels at shapes where the unfused program is faster). It holds for the current thread
    (or task) only."""
    return ATTENTION.forced()


# ------------------------------------------------------------------ lowerings
def _flat(x: np.ndarray) -> np.ndarray:
    """(..., T, d) -> (batches, T, d), C-contiguous (the kernels' layout)."""
    return np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))


def extra_operand(extra: tuple, batch: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
    """A mask or bias broadcasting to ``batch + (tq, tk)`` as (rows, 1 or tq, 1 or tk) in the
    kernels' dtype (one compiled kernel per dtype) and the row of each batch: broadcasting
    without copying it out to (T, T) per batch."""
    if not extra:
        return np.zeros((1, 1, 1), dtype), np.zeros(int(np.prod(batch, dtype=np.int64)),
                                                     np.int64)
    e = np.asarray(extra[0], dtype)
    e = e.reshape((1,) * (len(batch) + 2 - e.ndim) + e.shape)
    eb = e.shape[:-2]
    rows = np.arange(int(np.prod(eb, dtype=np.int64)), dtype=np.int64).reshape(eb)
    ebi = np.ascontiguousarray(np.broadcast_to(rows, batch).reshape(-1))
    return np.ascontiguousarray(e.reshape((-1,) + e.shape[-2:])), ebi


class _ExtraOperands:
    """``extra_operand`` for one step, with the operands of no mask or bias made once per batch
    shape and dtype (the kernels only read them): a host step's Python costs every call."""

    def __init__(self):
        self.plain: dict = {}

    def get(self, extra: tuple, batch: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
        if extra:
            return extra_operand(extra, batch, dtype)
        key = (batch, dtype)
        hit = self.plain.get(key)
        if hit is None:
            hit = self.plain[key] = extra_operand((), batch, dtype)
        return hit


def _host_forward(node: Node, one_blas_thread: Callable) -> Callable:
    """The host step of an ``attention`` node: ``kernels/attention.py``'s tiled forward."""
    from ..kernels.attention import attention_forward
    p = node.params

    operands = _ExtraOperands()

    def call(q, k, v, *extra):
        batch, tq = q.shape[:-2], q.shape[-2]
        e, ebi = operands.get(extra, batch, q.dtype)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        o = np.empty(qf.shape[:2] + (vf.shape[2],), q.dtype)
        m, tot = np.empty(qf.shape[:2], q.dtype), np.empty(qf.shape[:2], q.dtype)
        with one_blas_thread():     # the tile products run on the kernel's threads
            attention_forward(qf, kf, vf, e, ebi, p["kind"], p["causal"],
                              q.dtype.type(p["fill"]), q.dtype.type(p["scale"]), o, m, tot)
        return (o.reshape(batch + (tq, v.shape[-1])), m.reshape(batch + (tq,)),
                tot.reshape(batch + (tq,)))
    return call


def _host_backward(node: Node, one_blas_thread: Callable) -> Callable:
    """The host step of an ``attention_bwd`` node: ``kernels/attention.py``'s backward."""
    from ..kernels.attention import attention_backward
    p = node.params

    operands = _ExtraOperands()

    def call(q, k, v, *rest):
        extra, (o, m, tot, do) = rest[:-4], rest[-4:]
        batch = q.shape[:-2]
        e, ebi = operands.get(extra, batch, q.dtype)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        dq, dk, dv = np.empty_like(qf), np.empty_like(kf), np.empty_like(vf)
        with one_blas_thread():
            attention_backward(qf, kf, vf, e, ebi, p["kind"], p["causal"],
                               q.dtype.type(p["fill"]), q.dtype.type(p["scale"]), _flat(o),
                               np.ascontiguousarray(m.reshape(qf.shape[:2])),
                               np.ascontiguousarray(tot.reshape(qf.shape[:2])), _flat(do),
                               dq, dk, dv)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
    return call


def _kernel_jobs(node: Node) -> list:
    """The compile jobs of the row kernels an ``attention`` or ``attention_bwd`` host step
    runs (``kernels.attention.row_kernels``)."""
    from ..kernels import attention as kernels
    q, k = node.inputs[0], node.inputs[1]
    batches = int(np.prod(q.aval.shape[:-2], dtype=np.int64))
    return [(kernels, name, types) for name, types in kernels.row_kernels(
        q.aval.dtype, node.prim is attention_bwd_p, batches, k.aval.shape[-2],
        node.params["kind"])]


class _CudaAttention:
    """The driver lines of an ``attention`` / ``attention_bwd`` step in a CUDA program: a
    prepared ``kernels.cuda_attention.Attention`` per call site, called on the flat buffers."""

    def fits(self, node: Node) -> bool:
        from ..kernels.cuda_attention import max_dim
        q, k, v = node.inputs[:3]
        return max(q.aval.shape[-1], v.aval.shape[-1]) <= max_dim(q.aval.dtype)

    def lines(self, codegen, s) -> list[str]:
        n, name = s.node, codegen.plan.array_name
        q, k, v = n.inputs[:3]
        p = n.params
        extra = n.inputs[3] if p["kind"] else None
        dt = np.dtype(q.aval.dtype).name
        obj = f"{s.name}_attention_{{H}}"
        codegen.chunks.append(
            f"{obj} = D.attention({q.aval.shape[:-2]!r}, {q.aval.shape[-2]}, "
            f"{k.aval.shape[-2]}, {q.aval.shape[-1]}, {v.aval.shape[-1]}, "
            f"{None if extra is None else extra.aval.shape!r}, {p['kind']}, {p['causal']}, "
            f"float({str(p['fill'])!r}), float({str(p['scale'])!r}), np.{dt})")
        ex = "None" if extra is None else name(extra)
        if n.prim is attention_p:
            outs = ", ".join(name(o) if o in codegen.plan.needed else f"{obj}.scratch({k})"
                             for k, o in enumerate(n.outs))
            return [f"{obj}.forward({name(q)}, {name(k)}, {name(v)}, {ex}, {outs})"]
        o, m, tot, do = n.inputs[-4:]
        outs = ", ".join(name(o) if o in codegen.plan.needed else f"{obj}.scratch({k + 3})"
                         for k, o in enumerate(n.outs))
        return [f"{obj}.backward({name(q)}, {name(k)}, {name(v)}, {ex}, {name(o)}, {name(m)}, "
                f"{name(tot)}, {name(do)}, {outs})"]


def _cuda_prepared(driver, *spec):
    """One call site's fused attention, prepared once (``D.attention(*spec)`` in generated
    CUDA code)."""
    from ..kernels.cuda_attention import Attention
    return Attention(driver, *spec)


# ------------------------------------------------------------------ the record
ATTENTION = register_fused_op(FusedOp(
    "attention",
    primitives=(attention_p, attention_bwd_p),
    rules=(Rule(roots=(matmul_p,), match=_match, replace=_replace),),
    # the probabilities and v multiply in one dtype (the kernels' accumulation dtype)
    conditions=(lambda hit: hit.v.aval.dtype == hit.probs.aval.dtype,),
    wins=_wins,
    may_match=lambda g: sum(1 for n in g.nodes if n.prim is matmul_p) >= 2,
    lowerings={"host": {attention_p: _host_forward, attention_bwd_p: _host_backward},
               "host_kernels": {attention_p: _kernel_jobs, attention_bwd_p: _kernel_jobs},
               "cuda": {attention_p: _CudaAttention(), attention_bwd_p: _CudaAttention()}},
    driver={"attention": _cuda_prepared}))
