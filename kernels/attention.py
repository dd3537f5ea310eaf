"""Fused attention on the CPU: ``softmax(scale * q k^T, masked) v`` and its gradient without
the (Tq, Tk) score matrix (the FlashAttention recipe, in Numba).

The forward pass walks each block of query rows over the key blocks with a running row
maximum and row sum (an online softmax), so only a (rows, keys) tile of scores exists at a
time; it also returns each row's maximum and sum. The backward pass recomputes the tile
probabilities from them. With enough batches for every thread (``BATCH_SWEEP_MIN`` a
thread) or a single key block, one work item owns a batch and one sweep over its tiles
accumulates ``dq``, ``dk`` and ``dv`` together (five products a tile); otherwise one parallel
sweep over key blocks accumulates ``dk`` and ``dv`` and a second over query blocks ``dq``
(seven products a tile, but as many work items as key or query blocks). Neither uses
atomic adds, so every result is computed in one fixed order: deterministic. The tile
products go through BLAS (``matmul.blas_gemm``, the one product function generated programs
call, so it is compiled once for all of them). Work items (batch x block) run
in parallel on Python threads (the kernels release the GIL; a ``prange`` loop costs seconds
of compilation per kernel). Each row's maximum score and sum of exponentials are kept (not
their log-sum-exp, which loses the sum where a row is all ``fill`` and ``fill`` is huge).

Masks (``kind``): 0 none; 1 a mask (in q's dtype: nonzero = attend), a masked score *is* ``fill``
(as ``where(mask, s, fill)``: a fully masked row attends uniformly when ``fill`` is finite);
2 an additive bias. ``causal``: keys after the query's index are left out (``j <= i``),
which is exact when they would have scored ``fill <= -1e4``: their probability underflows
to 0. ``extra`` is the mask or bias as (batches, 1 or Tq, 1 or Tk); ``ebi[b]`` is the
extra batch row of batch ``b`` (broadcasting without copies).
"""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
import numba
from numba import njit

from .fastmath import fast_exp
from .matmul import blas_gemm
from .rows import row_max
from .threads import run_split as _threads

BLOCK = 128         # query rows and keys per tile (products on one BLAS thread each)
BATCH_SWEEP_MIN = 4  # batches per thread from which the gradient takes one sweep a batch


@njit(cache=True, nogil=True)
def _scores(q, k, v, extra, ebi, kind, causal, fill, scale, b, i0, i1, j0, j1):
    """Scaled, masked scores of query rows i0:i1 against keys j0:j1 (the scale is the
    product's alpha), whether any was masked, and (if so) whether each counts for the
    gradient (False where a mask or the causal cut replaced it). Only tiles with a mask or
    bias take the per-element loop; without one, the callers apply the causal cut (``_seen``:
    no exponential for the keys after each row's index)."""
    s = np.empty((i1 - i0, j1 - j0), q.dtype)
    blas_gemm(scale, q[b, i0:i1], False, k[b, j0:j1], True, 0.0, s)
    cut = causal and j1 - 1 > i0
    if kind == 0:   # the causal cut alone is applied by the callers (_seen)
        return s, False, np.ones((1, 1), np.bool_)
    live = np.ones(s.shape, np.bool_)
    eb = ebi[b]
    tq = extra.shape[1] > 1
    tk = extra.shape[2] > 1
    for r in range(i1 - i0):
        i = i0 + r
        for c in range(j1 - j0):
            j = j0 + c
            x = s[r, c]
            if kind == 1:
                if extra[eb, i if tq else 0, j if tk else 0] == 0:
                    x = fill
                    live[r, c] = False
            elif kind == 2:
                x += extra[eb, i if tq else 0, j if tk else 0]
            if cut and j > i:
                x = fill
                live[r, c] = False
            s[r, c] = x
    return s, True, live


@njit(cache=True, nogil=True)
def _exp_shifted(s, r, n, shift, mul):
    """s[r, :n] <- exp(s[r, :n] - shift) * mul (0 where shift is -inf: nothing seen yet)."""
    if shift == -np.inf:
        for c in range(n):
            s[r, c] = 0.0
        return
    for c in range(n):
        s[r, c] = fast_exp(s[r, c] - shift) * mul


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def _exp_sum(s, r, n, shift):
    """s[r, :n] <- exp(s[r, :n] - shift), returning their sum (one vectorized pass; 0 where
    shift is -inf: nothing seen yet)."""
    if shift == -np.inf:
        for c in range(n):
            s[r, c] = 0.0
        return s.dtype.type(0.0)
    tot = s.dtype.type(0.0)
    for c in range(n):
        e = fast_exp(s[r, c] - shift)
        s[r, c] = e
        tot += e
    return tot


@njit(cache=True, nogil=True)
def _seen(kind, causal, i, j0, n):
    """How many of the n keys from j0 on row i sees: those up to its own index under the
    causal cut alone (the rest have probability 0: no exponential computed for them)."""
    if kind == 0 and causal:
        return max(0, min(n, i - j0 + 1))
    return n


@njit(cache=True, nogil=True)
def _work_item(t, n):
    """(batch, first row, end row) of work item ``t``: the blocks of ``n`` rows of each batch."""
    blocks = (n + BLOCK - 1) // BLOCK
    r0 = (t % blocks) * BLOCK
    return t // blocks, r0, min(r0 + BLOCK, n)


@njit(cache=True, nogil=True)
def _forward_block(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, t):
    """Work item ``t``: one block of query rows of one batch, over the key blocks."""
    tq, tk, dv = q.shape[1], k.shape[1], v.shape[2]
    b, i0, i1 = _work_item(t, tq)
    rows = i1 - i0
    m = np.full(rows, -np.inf, q.dtype)
    ssum = np.zeros(rows, q.dtype)
    acc = np.zeros((rows, dv), q.dtype)
    jend = min(tk, i1) if causal else tk
    for j0 in range(0, jend, BLOCK):
        j1 = min(j0 + BLOCK, jend)
        s, _, _ = _scores(q, k, v, extra, ebi, kind, causal, fill, scale, b, i0, i1, j0, j1)
        n = j1 - j0
        for r in range(rows):
            nv = _seen(kind, causal, i0 + r, j0, n)
            mx = max(m[r], row_max(s, r, nv))
            tot = _exp_sum(s, r, nv, mx)
            for c in range(nv, n):
                s[r, c] = 0.0
            if m[r] == -np.inf:     # the first keys this row sees: nothing to rescale
                ssum[r] = tot
            else:
                alpha = fast_exp(m[r] - mx)
                ssum[r] = ssum[r] * alpha + tot
                if alpha != 1.0:
                    for c in range(dv):
                        acc[r, c] *= alpha
            m[r] = mx
        blas_gemm(1.0, s, False, v[b, j0:j1], False, 1.0, acc)
    for r in range(rows):
        inv = q.dtype.type(1.0) / ssum[r]
        for c in range(dv):
            o[b, i0 + r, c] = acc[r, c] * inv
        rmax[b, i0 + r] = m[r]
        rsum[b, i0 + r] = ssum[r]


@njit(cache=True, nogil=True)
def forward_items(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, start, step):
    """Work items start, start + step, ... (one thread's share: interleaved, so causal rows
    of every length are spread over the threads)."""
    n = q.shape[0] * ((q.shape[1] + BLOCK - 1) // BLOCK)
    for t in range(start, n, step):
        _forward_block(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, t)


@njit(cache=True, nogil=True)
def _probs_and_dscores(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
                       b, i0, i1, j0, j1):
    """Tile probabilities (recomputed from the row max and sum) and score cotangents."""
    s, masked, live = _scores(q, k, v, extra, ebi, kind, causal, fill, scale, b, i0, i1, j0,
                              j1)
    dp = np.empty((i1 - i0, j1 - j0), q.dtype)
    blas_gemm(1.0, do[b, i0:i1], False, v[b, j0:j1], True, 0.0, dp)
    n = j1 - j0
    for r in range(i1 - i0):
        di = delta[b, i0 + r]
        nv = _seen(kind, causal, i0 + r, j0, n)
        _exp_shifted(s, r, nv, rmax[b, i0 + r], q.dtype.type(1.0) / rsum[b, i0 + r])
        for c in range(nv):
            dp[r, c] = s[r, c] * (dp[r, c] - di) * scale
        for c in range(nv, n):      # past the causal cut: probability and cotangent 0
            s[r, c] = 0.0
            dp[r, c] = 0.0
        if masked:
            for c in range(n):
                if not live[r, c]:
                    dp[r, c] = 0.0
    return s, dp


@njit(cache=True, nogil=True)
def _key_block(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
               dk, dv, t):
    """dk, dv of one key block of one batch, over the query blocks."""
    tq, tk = q.shape[1], k.shape[1]
    b, j0, j1 = _work_item(t, tk)
    gk = dk[b, j0:j1]
    gv = dv[b, j0:j1]
    gk[:] = 0.0
    gv[:] = 0.0
    first = j0 if causal else 0
    for i0 in range(first, tq, BLOCK):
        i1 = min(i0 + BLOCK, tq)
        p, ds = _probs_and_dscores(q, k, v, extra, ebi, kind, causal, fill, scale, rmax,
                                   rsum, delta, do, b, i0, i1, j0, j1)
        blas_gemm(1.0, p, True, do[b, i0:i1], False, 1.0, gv)
        blas_gemm(1.0, ds, True, q[b, i0:i1], False, 1.0, gk)


@njit(cache=True, nogil=True)
def _query_block(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do, dq, t):
    """dq of one query block of one batch, over the key blocks."""
    tq, tk = q.shape[1], k.shape[1]
    b, i0, i1 = _work_item(t, tq)
    gq = dq[b, i0:i1]
    gq[:] = 0.0
    jend = min(tk, i1) if causal else tk
    for j0 in range(0, jend, BLOCK):
        j1 = min(j0 + BLOCK, jend)
        _, ds = _probs_and_dscores(q, k, v, extra, ebi, kind, causal, fill, scale, rmax,
                                   rsum, delta, do, b, i0, i1, j0, j1)
        blas_gemm(1.0, ds, False, k[b, j0:j1], False, 1.0, gq)


@njit(cache=True, nogil=True)
def _batch_block(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, delta, do,
                 dq, dk, dv, b):
    """dq, dk and dv of batch ``b`` in one sweep (its rows' ``delta`` first): each tile's
    probabilities and score cotangents are computed once and feed all three products (five
    products a tile, not the seven of the two sweeps); one work item owns the whole batch,
    so dq accumulates without races, in a fixed order."""
    tq, tk = q.shape[1], k.shape[1]
    row_dots(do, o, delta, b, b + 1, 1)
    dq[b, :, :] = 0.0
    dk[b, :, :] = 0.0
    dv[b, :, :] = 0.0
    for j0 in range(0, tk, BLOCK):
        j1 = min(j0 + BLOCK, tk)
        gk = dk[b, j0:j1]
        gv = dv[b, j0:j1]
        for i0 in range(j0 if causal else 0, tq, BLOCK):
            i1 = min(i0 + BLOCK, tq)
            p, ds = _probs_and_dscores(q, k, v, extra, ebi, kind, causal, fill, scale, rmax,
                                       rsum, delta, do, b, i0, i1, j0, j1)
            blas_gemm(1.0, p, True, do[b, i0:i1], False, 1.0, gv)
            blas_gemm(1.0, ds, True, q[b, i0:i1], False, 1.0, gk)
            blas_gemm(1.0, ds, False, k[b, j0:j1], False, 1.0, dq[b, i0:i1])


@njit(cache=True, nogil=True)
def batch_items(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, delta, do, dq,
                dk, dv, start, step):
    for b in range(start, q.shape[0], step):
        _batch_block(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, delta, do,
                     dq, dk, dv, b)


@njit(cache=True, nogil=True)
def row_dots(do, o, delta, start, stop, step):
    """delta[b, i] = do[b, i] . o[b, i] for batches start, start + step, ... below stop."""
    for b in range(start, stop, step):
        for i in range(o.shape[1]):
            acc = o.dtype.type(0.0)
            for c in range(o.shape[2]):
                acc += do[b, i, c] * o[b, i, c]
            delta[b, i] = acc


@njit(cache=True, nogil=True)
def key_items(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do, dk, dv,
              start, step):
    n = q.shape[0] * ((k.shape[1] + BLOCK - 1) // BLOCK)
    for t in range(start, n, step):
        _key_block(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
                   dk, dv, t)


@njit(cache=True, nogil=True)
def query_items(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do, dq,
                start, step):
    n = q.shape[0] * ((q.shape[1] + BLOCK - 1) // BLOCK)
    for t in range(start, n, step):
        _query_block(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
                     dq, t)


def attention_forward(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum):
    """o (B, Tq, dv), row max and row sum (B, Tq) of q (B, Tq, d), k (B, Tk, d), v (B, Tk, dv);
    ``extra`` has q's dtype (a mask: nonzero = attend)."""
    n = q.shape[0] * ((q.shape[1] + BLOCK - 1) // BLOCK)
    _threads(lambda s, st: forward_items(q, k, v, extra, ebi, kind, causal, fill, scale, o,
                                         rmax, rsum, s, st), n)


def attention_backward(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, do,
                       dq, dk, dv):
    """dq, dk, dv of the forward pass above, given its o, row max and sum and the cotangent do."""
    nb, tq, tk = q.shape[0], q.shape[1], k.shape[1]
    delta = np.empty((nb, tq), q.dtype)
    if nb >= BATCH_SWEEP_MIN * numba.get_num_threads() or tk <= BLOCK:
        # enough batches to keep every thread busy (or one key block, where the key sweep
        # has no more work items): one sweep a batch
        _threads(lambda s, st: batch_items(q, k, v, extra, ebi, kind, causal, fill, scale, o,
                                           rmax, rsum, delta, do, dq, dk, dv, s, st), nb)
        return
    _threads(lambda s, st: row_dots(do, o, delta, s, nb, st), nb)
    args = (q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do)
    _threads(lambda s, st: key_items(*args, dk, dv, s, st), nb * ((tk + BLOCK - 1) // BLOCK))
    _threads(lambda s, st: query_items(*args, dq, s, st), nb * ((tq + BLOCK - 1) // BLOCK))
