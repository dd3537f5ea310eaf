"""Fused attention on the CPU: ``softmax(scale * q k^T, masked) v`` and its gradient without
the (Tq, Tk) score matrix (the FlashAttention recipe, in Numba).

The forward pass walks each block of query rows over the key blocks with a running row
maximum and row sum (an online softmax), so only a (rows, keys) tile of scores exists at a
time; it also returns each row's maximum and sum. Under the causal cut alone, a tile the
diagonal crosses is computed as a staircase of ``DIAGONAL_PARTS`` bands of rows, each with the
keys its last row sees (``_diagonal_parts``): 37.5 % less product work on those tiles, the
attention of a GPT step with T = 256 (two thirds of its tiles on the diagonal) 7-13 % faster.
The backward pass recomputes the tile probabilities from them. With enough batches for every
thread (``BATCH_SWEEP_MIN`` a thread) or a single key block, one work item owns a batch and one
sweep over its tiles accumulates ``dq``, ``dk`` and ``dv`` together (five products a tile);
otherwise one parallel sweep over key blocks accumulates ``dk`` and ``dv`` and a second over
query blocks ``dq`` (seven products a tile, but as many work items as key or query blocks).
Neither uses atomic adds, so every result is computed in one fixed order: deterministic. The
tile products go through BLAS (``matmul.blas_gemm``, the one product function generated
programs call, so it is compiled once for all of them). Work items (batch x block) run in
parallel on Numba's threads, the pool generated kernels run on (``threads.run_rows``: row
kernels over flat operands, launched without ``prange`` compilation). Each row's maximum score
and sum of exponentials are kept (not their log-sum-exp, which loses the sum where a row is all
``fill`` and ``fill`` is huge).

Masks (``kind``): 0 none; 1 a mask (in q's dtype: nonzero = attend), a masked score *is* ``fill``
(as ``where(mask, s, fill)``: a fully masked row attends uniformly when ``fill`` is finite);
2 an additive bias. ``causal``: keys after the query's index are left out (``j <= i``),
which is exact when they would have scored ``fill <= -1e4``: their probability underflows
to 0. ``extra`` is the mask or bias as (batches, 1 or Tq, 1 or Tk); ``ebi[b]`` is the
extra batch row of batch ``b`` (broadcasting without copies). Each sweep has two kernels,
one without the mask step (kind 0, so a transformer's causal attention compiles no mask code)
and a ``_masked`` one (kinds 1 and 2); a program compiles those it runs.

The row kernels also ship as LLVM IR made from this source (``jitgraph/compiler/prebuilt.py``;
``prebuilt_jobs`` lists them), which LLVM compiles in a fraction of Numba's time: after
changing this file or a kernels module it imports, run ``python -m jitgraph.compiler.prebuilt
[PYTHON]`` for each Numba shipped (``tests/test_prebuilt.py`` fails until then).
"""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
import numba
from numba import njit

from .fastmath import fast_exp
from .matmul import blas_gemm
from .rows import row_max
from .scalar import maximum_step
from .threads import run_rows

BLOCK = 128         # query rows and keys per tile (products on one BLAS thread each)
BATCH_SWEEP_MIN = 4  # batches per thread from which the gradient takes one sweep a batch
#: a causal tile the diagonal crosses: in how many bands of rows it is computed, each band
#: at least this many rows (``_diagonal_parts``)
DIAGONAL_PARTS = 4
SPLIT_MIN_ROWS = 32
#: the products' transpose flags, read from an array: a literal ``True`` or ``False`` would
#: compile ``blas_gemm`` once per combination (half a second each), these once for all
_FLAG = np.array([False, True])


@njit(cache=True, nogil=True, inline="always")
def _scores(q, k, scale, b, i0, i1, j0, j1):
    """Scaled scores of query rows i0:i1 against keys j0:j1 (the scale is the product's
    alpha)."""
    s = np.empty((i1 - i0, j1 - j0), q.dtype)
    blas_gemm(np.float64(scale), q[b, i0:i1], _FLAG[0], k[b, j0:j1], _FLAG[1], 0.0, s)
    return s


#: ``_no_mask``'s "every score counts" (never read: it says nothing was masked)
_ALL_LIVE = np.ones((1, 1), np.bool_)


@njit(cache=True, nogil=True)
def _no_mask(s, extra, ebi, kind, causal, fill, b, i0, i1, j0, j1):
    """The mask step of the kernels without a mask or bias (``kind`` 0): nothing to do here,
    the callers apply the causal cut (``_seen``: no exponential for the keys after each
    row's index)."""
    return False, _ALL_LIVE


@njit(cache=True, nogil=True)
def _apply_mask(s, extra, ebi, kind, causal, fill, b, i0, i1, j0, j1):
    """The mask step of the ``_masked`` kernels: applies the mask or bias (and the causal
    cut) to a tile of scores in place; returns True and whether each score counts for the
    gradient (False where the mask or the cut replaced it)."""
    live = np.empty(s.shape, np.bool_)
    live[:] = True
    cut = causal and j1 - 1 > i0
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
    return True, live


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


@njit(cache=True, nogil=True, inline="always")
def _seen(kind, causal, i, j0, n):
    """How many of the n keys from j0 on row i sees: those up to its own index under the
    causal cut alone (the rest have probability 0: no exponential computed for them)."""
    if kind == 0 and causal:
        return max(0, min(n, i - j0 + 1))
    return n


@njit(cache=True, nogil=True, inline="always")
def _work_item(t, n):
    """(batch, first row, end row) of work item ``t``: the blocks of ``n`` rows of each batch."""
    blocks = (n + BLOCK - 1) // BLOCK
    r0 = (t % blocks) * BLOCK
    return t // blocks, r0, min(r0 + BLOCK, n)


@njit(cache=True, nogil=True, inline="always")
def _diagonal_parts(kind, causal, i0, i1, j1):
    """In how many parts tile ``i0:i1 x j0:j1`` is computed: under the causal cut alone, a
    tile the diagonal crosses is a staircase (row ``i`` sees the keys up to ``i``), computed
    as ``DIAGONAL_PARTS`` bands of rows, each with the keys its last row sees (``_part``);
    one part elsewhere (a mask or bias, a tile below the diagonal, too few rows)."""
    if kind == 0 and causal and j1 - 1 > i0:
        return max(1, min(DIAGONAL_PARTS, (i1 - i0) // SPLIT_MIN_ROWS))
    return 1


@njit(cache=True, nogil=True, inline="always")
def _part(i0, i1, j1, parts, p):
    """(first row, end row, end key) of part ``p`` of ``parts`` (``_diagonal_parts``)."""
    if parts == 1:
        return i0, i1, j1
    r0 = i0 + p * (i1 - i0) // parts
    r1 = i0 + (p + 1) * (i1 - i0) // parts
    return r0, r1, min(j1, r1)


@njit(cache=True, nogil=True, inline="always")
def _forward_tile(mask, q, k, v, extra, ebi, kind, causal, fill, scale, m, ssum, acc, b, i0,
                  r0, r1, j0, j1):
    """Rows ``r0:r1`` (of the block from ``i0``: their slots in ``m``, ``ssum``, ``acc``)
    against keys ``j0:j1``: one step of the online softmax."""
    dv = v.shape[2]
    s = _scores(q, k, scale, b, r0, r1, j0, j1)
    mask(s, extra, ebi, kind, causal, fill, b, r0, r1, j0, j1)
    n = j1 - j0
    for r in range(r1 - r0):
        a = r0 - i0 + r
        nv = _seen(kind, causal, r0 + r, j0, n)
        mx = maximum_step(m[a], row_max(s, r, nv))     # (NaN propagates)
        tot = _exp_sum(s, r, nv, mx)
        for c in range(nv, n):
            s[r, c] = 0.0
        if m[a] == -np.inf:     # the first keys this row sees: nothing to rescale
            ssum[a] = tot
        else:
            alpha = fast_exp(m[a] - mx)
            ssum[a] = ssum[a] * alpha + tot
            if alpha != 1.0:
                for c in range(dv):
                    acc[a, c] *= alpha
        m[a] = mx
    blas_gemm(1.0, s, _FLAG[0], v[b, j0:j1], _FLAG[0], 1.0, acc[r0 - i0:r1 - i0])


@njit(cache=True, nogil=True, inline="always")
def _forward_block(mask, q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, t):
    """Work item ``t``: one block of query rows of one batch, over the key blocks."""
    tq, tk, dv = q.shape[1], k.shape[1], v.shape[2]
    b, i0, i1 = _work_item(t, tq)
    rows = i1 - i0
    # (np.empty and fills: each of np.full, np.zeros is a compile of its own)
    m = np.empty(rows, q.dtype)
    m[:] = -np.inf
    ssum = np.empty(rows, q.dtype)
    ssum[:] = 0.0
    acc = np.empty((rows, dv), q.dtype)
    acc[:] = 0.0
    jend = min(tk, i1) if causal else tk
    for j0 in range(0, jend, BLOCK):
        j1 = min(j0 + BLOCK, jend)
        parts = _diagonal_parts(kind, causal, i0, i1, j1)
        for part in range(parts):
            r0, r1, jx = _part(i0, i1, j1, parts, part)
            _forward_tile(mask, q, k, v, extra, ebi, kind, causal, fill, scale, m, ssum, acc, b,
                          i0, r0, r1, j0, jx)
    for r in range(rows):
        inv = q.dtype.type(1.0) / ssum[r]
        for c in range(dv):
            o[b, i0 + r, c] = acc[r, c] * inv
        rmax[b, i0 + r] = m[r]
        rsum[b, i0 + r] = ssum[r]


@njit(cache=True, nogil=True, inline="always")
def _probs_and_dscores(mask, q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta,
                       do, b, i0, i1, j0, j1):
    """Tile probabilities (recomputed from the row max and sum) and score cotangents."""
    s = _scores(q, k, scale, b, i0, i1, j0, j1)
    masked, live = mask(s, extra, ebi, kind, causal, fill, b, i0, i1, j0, j1)
    dp = np.empty((i1 - i0, j1 - j0), q.dtype)
    blas_gemm(1.0, do[b, i0:i1], _FLAG[0], v[b, j0:j1], _FLAG[1], 0.0, dp)
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


@njit(cache=True, nogil=True, inline="always")
def _key_block(mask, q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
               dk, dv, t):
    """dk, dv of one key block of one batch, over the query blocks."""
    tq, tk = q.shape[1], k.shape[1]
    b, j0, j1 = _work_item(t, tk)
    dk[b, j0:j1] = 0.0
    dv[b, j0:j1] = 0.0
    first = j0 if causal else 0
    for i0 in range(first, tq, BLOCK):
        i1 = min(i0 + BLOCK, tq)
        parts = _diagonal_parts(kind, causal, i0, i1, j1)
        for part in range(parts):
            r0, r1, jx = _part(i0, i1, j1, parts, part)
            p, ds = _probs_and_dscores(mask, q, k, v, extra, ebi, kind, causal, fill, scale,
                                       rmax, rsum, delta, do, b, r0, r1, j0, jx)
            blas_gemm(1.0, p, _FLAG[1], do[b, r0:r1], _FLAG[0], 1.0, dv[b, j0:jx])
            blas_gemm(1.0, ds, _FLAG[1], q[b, r0:r1], _FLAG[0], 1.0, dk[b, j0:jx])


@njit(cache=True, nogil=True, inline="always")
def _query_block(mask, q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do, dq,
                 t):
    """dq of one query block of one batch, over the key blocks."""
    tq, tk = q.shape[1], k.shape[1]
    b, i0, i1 = _work_item(t, tq)
    gq = dq[b, i0:i1]
    gq[:] = 0.0
    jend = min(tk, i1) if causal else tk
    for j0 in range(0, jend, BLOCK):
        j1 = min(j0 + BLOCK, jend)
        parts = _diagonal_parts(kind, causal, i0, i1, j1)
        for part in range(parts):
            r0, r1, jx = _part(i0, i1, j1, parts, part)
            _, ds = _probs_and_dscores(mask, q, k, v, extra, ebi, kind, causal, fill, scale,
                                       rmax, rsum, delta, do, b, r0, r1, j0, jx)
            blas_gemm(1.0, ds, _FLAG[0], k[b, j0:jx], _FLAG[0], 1.0, gq[r0 - i0:r1 - i0])


@njit(cache=True, nogil=True, inline="always")
def _batch_block(mask, q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, delta, do,
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
        for i0 in range(j0 if causal else 0, tq, BLOCK):
            i1 = min(i0 + BLOCK, tq)
            parts = _diagonal_parts(kind, causal, i0, i1, j1)
            for part in range(parts):
                r0, r1, jx = _part(i0, i1, j1, parts, part)
                p, ds = _probs_and_dscores(mask, q, k, v, extra, ebi, kind, causal, fill,
                                           scale, rmax, rsum, delta, do, b, r0, r1, j0, jx)
                blas_gemm(1.0, p, _FLAG[1], do[b, r0:r1], _FLAG[0], 1.0, dv[b, j0:jx])
                blas_gemm(1.0, ds, _FLAG[1], q[b, r0:r1], _FLAG[0], 1.0, dk[b, j0:jx])
                blas_gemm(1.0, ds, _FLAG[0], k[b, j0:jx], _FLAG[0], 1.0, dq[b, r0:r1])


@njit(cache=True, nogil=True)
def row_dots(do, o, delta, start, stop, step):
    """delta[b, i] = do[b, i] . o[b, i] for batches start, start + step, ... below stop."""
    for b in range(start, stop, step):
        for i in range(o.shape[1]):
            acc = o.dtype.type(0.0)
            for c in range(o.shape[2]):
                acc += do[b, i, c] * o[b, i, c]
            delta[b, i] = acc


@njit(cache=True, nogil=True, inline="always")
def _operands(q1, k1, v1, e1, ints):
    """The flat operands of a row kernel as the (batches, T, d) arrays they are: ``ints`` holds
    the batches, Tq, Tk, d, dv and the mask's (rows, 1 or Tq, 1 or Tk)."""
    nb, tq, tk, d, dv = ints[0], ints[1], ints[2], ints[3], ints[4]
    return (q1.reshape((nb, tq, d)), k1.reshape((nb, tk, d)), v1.reshape((nb, tk, dv)),
            e1.reshape((ints[5], ints[6], ints[7])))


@njit(cache=True, nogil=True, inline="always")
def _gradient_operands(q, v, do1, rmax1, rsum1, delta1):
    """The gradient sweeps' flat cotangent (batches, Tq, dv) and row statistics (batches, Tq)."""
    rows = q.shape[:2]
    return (do1.reshape(rows + (v.shape[2],)), rmax1.reshape(rows), rsum1.reshape(rows),
            delta1.reshape(rows))


# The sweeps the row kernels below run: rows lo:hi of a sweep's work items, every operand a
# flat array (the launcher that runs them on Numba's threads takes those), ``ints``
# (``_operands``, then the mask kind and the causal flag) and ``floats`` (fill, scale) the
# sweep's parameters; each work item is computed by itself, so the split does not matter.
# ``mask`` is the mask step, a compile-time choice: each sweep is a kernel without a mask or
# bias (the causal cut alone, as a transformer's attention runs) and a ``_masked`` one, so
# the common kernels do not compile the mask code (about half a second of Numba each).
@njit(cache=True, nogil=True, inline="always")
def _forward_sweep(mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1):
    q, k, v, extra = _operands(q1, k1, v1, e1, ints)
    o = o1.reshape((q.shape[0], q.shape[1], v.shape[2]))
    rmax, rsum = rmax1.reshape(q.shape[:2]), rsum1.reshape(q.shape[:2])
    for t in range(lo, hi):
        _forward_block(mask, q, k, v, extra, ebi, ints[8], ints[9] != 0, floats[0], floats[1],
                       o, rmax, rsum, t)


@njit(cache=True, nogil=True, inline="always")
def _batch_sweep(mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, delta1, do1,
                 dq1, dk1, dv1):
    """Batches lo:hi of the one-sweep-a-batch gradient (``_batch_block``)."""
    q, k, v, extra = _operands(q1, k1, v1, e1, ints)
    do, rmax, rsum, delta = _gradient_operands(q, v, do1, rmax1, rsum1, delta1)
    o = o1.reshape(do.shape)
    dq, dk, dv = dq1.reshape(q.shape), dk1.reshape(k.shape), dv1.reshape(v.shape)
    for b in range(lo, hi):
        _batch_block(mask, q, k, v, extra, ebi, ints[8], ints[9] != 0, floats[0], floats[1], o,
                     rmax, rsum, delta, do, dq, dk, dv, b)


@njit(cache=True, nogil=True, inline="always")
def _key_sweep(mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dk1,
               dv1):
    """Work items lo:hi of the key sweep (``_key_block``: dk and dv of a key block)."""
    q, k, v, extra = _operands(q1, k1, v1, e1, ints)
    do, rmax, rsum, delta = _gradient_operands(q, v, do1, rmax1, rsum1, delta1)
    dk, dv = dk1.reshape(k.shape), dv1.reshape(v.shape)
    for t in range(lo, hi):
        _key_block(mask, q, k, v, extra, ebi, ints[8], ints[9] != 0, floats[0], floats[1], rmax,
                   rsum, delta, do, dk, dv, t)


@njit(cache=True, nogil=True, inline="always")
def _query_sweep(mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dq1):
    """Work items lo:hi of the query sweep (``_query_block``: dq of a query block)."""
    q, k, v, extra = _operands(q1, k1, v1, e1, ints)
    do, rmax, rsum, delta = _gradient_operands(q, v, do1, rmax1, rsum1, delta1)
    dq = dq1.reshape(q.shape)
    for t in range(lo, hi):
        _query_block(mask, q, k, v, extra, ebi, ints[8], ints[9] != 0, floats[0], floats[1],
                     rmax, rsum, delta, do, dq, t)


# The row kernels (``kernels.threads.run_rows``: ``kernel(lo, hi, *operands, n)``), each sweep
# without and with the mask step.
@njit(cache=True, nogil=True, error_model="numpy")
def forward_rows(lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, n):
    _forward_sweep(_no_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_rows_masked(lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, n):
    _forward_sweep(_apply_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1)


@njit(cache=True, nogil=True, error_model="numpy")
def batch_rows(lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, delta1, do1, dq1,
               dk1, dv1, n):
    _batch_sweep(_no_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, delta1,
                 do1, dq1, dk1, dv1)


@njit(cache=True, nogil=True, error_model="numpy")
def batch_rows_masked(lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1, delta1, do1,
                      dq1, dk1, dv1, n):
    _batch_sweep(_apply_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, o1, rmax1, rsum1,
                 delta1, do1, dq1, dk1, dv1)


@njit(cache=True, nogil=True, error_model="numpy")
def key_rows(lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dk1, dv1, n):
    _key_sweep(_no_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1,
               dk1, dv1)


@njit(cache=True, nogil=True, error_model="numpy")
def key_rows_masked(lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dk1,
                    dv1, n):
    _key_sweep(_apply_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1,
               do1, dk1, dv1)


@njit(cache=True, nogil=True, error_model="numpy")
def query_rows(lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dq1, n):
    _query_sweep(_no_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1,
                 dq1)


@njit(cache=True, nogil=True, error_model="numpy")
def query_rows_masked(lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1, do1, dq1,
                      n):
    _query_sweep(_apply_mask, lo, hi, q1, k1, v1, e1, ebi, ints, floats, rmax1, rsum1, delta1,
                 do1, dq1)


@njit(cache=True, nogil=True, error_model="numpy")
def dots_rows(lo, hi, do1, o1, delta1, ints, n):
    """``row_dots`` of batches lo:hi."""
    shape = (ints[0], ints[1], ints[4])
    row_dots(do1.reshape(shape), o1.reshape(shape), delta1.reshape(shape[:2]), lo, hi, 1)


def _params(q, k, v, extra, kind, causal, fill, scale) -> tuple:
    """The flat operands and the ``ints`` and ``floats`` of the row kernels."""
    ints = np.array((q.shape[0], q.shape[1], k.shape[1], q.shape[2], v.shape[2]) + extra.shape
                    + (int(kind), int(bool(causal))), np.int64)
    floats = np.array([fill, scale], q.dtype)
    return (q.reshape(-1), k.reshape(-1), v.reshape(-1), extra.reshape(-1)), ints, floats


def _one_sweep(batches: int, tk: int) -> bool:
    """Whether the gradient takes one sweep a batch (``attention_backward``)."""
    return batches >= BATCH_SWEEP_MIN * numba.get_num_threads() or tk <= BLOCK


def _masked(name: str, kind: int) -> str:
    """The name of the row kernel of sweep ``name`` for mask ``kind`` (0: without the mask
    step)."""
    return name + "_masked" if kind else name


def _kernel(sweep: str, kind: int):
    """The row kernel of ``sweep`` for mask ``kind``."""
    return globals()[_masked(sweep, kind)]


def row_kernels(dtype, backward: bool, batches: int, tk: int,
                kind: int = 0) -> list[tuple[str, tuple]]:
    """The row kernels a forward (or backward) call at these sizes and mask ``kind`` runs,
    with their argument types as the compiler's compile jobs name them (a dtype: a flat array
    of it; ``"size"``: an int64): what its compile workers compile ahead of the first call."""
    a = np.dtype(dtype).name
    head = ("size", "size", a, a, a, a, "int64", "int64", a)     # rows, operands, parameters
    if not backward:
        return [(_masked("forward_rows", kind), head + (a, a, a, "size"))]
    if _one_sweep(batches, tk):
        return [(_masked("batch_rows", kind), head + (a,) * 8 + ("size",))]
    return [("dots_rows", ("size", "size", a, a, a, "int64", "size")),
            (_masked("key_rows", kind), head + (a,) * 6 + ("size",)),
            (_masked("query_rows", kind), head + (a,) * 5 + ("size",))]


def prebuilt_jobs() -> list[tuple[str, tuple]]:
    """Every row kernel at every dtype, mask kind and sweep (``row_kernels``' jobs): those
    ``jitgraph/compiler/prebuilt.py`` ships as LLVM IR, so a first call does not wait for
    Numba to compile them."""
    jobs: list = []
    for dtype in (np.float32, np.float64):
        for kind in (0, 1):
            # the forward sweep; one sweep a batch (one key block); key and query sweeps
            for backward, batches, tk in ((False, 1, 1), (True, 1, 1), (True, 1, 2 * BLOCK)):
                for job in row_kernels(dtype, backward, batches, tk, kind):
                    if job not in jobs:
                        jobs.append(job)
    return jobs


def _written(*outs) -> None:
    """The kernels write through flat views: an output that is not C-contiguous would be a
    copy, written and lost."""
    if not all(x.flags.c_contiguous for x in outs):
        raise ValueError("attention kernels: outputs must be C-contiguous arrays")


def attention_forward(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum):
    """o (B, Tq, dv), row max and row sum (B, Tq) of q (B, Tq, d), k (B, Tk, d), v (B, Tk, dv);
    ``extra`` has q's dtype (a mask: nonzero = attend). All C-contiguous."""
    _written(o, rmax, rsum)
    flat, ints, floats = _params(q, k, v, extra, kind, causal, fill, scale)
    n = q.shape[0] * ((q.shape[1] + BLOCK - 1) // BLOCK)
    run_rows(_kernel("forward_rows", kind), n, *flat, ebi, ints, floats, o.reshape(-1),
             rmax.reshape(-1), rsum.reshape(-1))


def attention_backward(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum, do,
                       dq, dk, dv):
    """dq, dk, dv of the forward pass above, given its o, row max and sum and the cotangent do."""
    nb, tq, tk = q.shape[0], q.shape[1], k.shape[1]
    _written(dq, dk, dv)
    flat, ints, floats = _params(q, k, v, extra, kind, causal, fill, scale)
    delta = np.empty(nb * tq, q.dtype)
    stats = (rmax.reshape(-1), rsum.reshape(-1), delta)
    if _one_sweep(nb, tk):
        # enough batches to keep every thread busy (or one key block, where the key sweep
        # has no more work items): one sweep a batch (its rows' delta first)
        run_rows(_kernel("batch_rows", kind), nb, *flat, ebi, ints, floats, o.reshape(-1),
                 *stats, do.reshape(-1), dq.reshape(-1), dk.reshape(-1), dv.reshape(-1))
        return
    run_rows(dots_rows, nb, do.reshape(-1), o.reshape(-1), delta, ints)
    run_rows(_kernel("key_rows", kind), nb * ((tk + BLOCK - 1) // BLOCK), *flat, ebi, ints,
             floats, *stats, do.reshape(-1), dk.reshape(-1), dv.reshape(-1))
    run_rows(_kernel("query_rows", kind), nb * ((tq + BLOCK - 1) // BLOCK), *flat, ebi, ints,
             floats, *stats, do.reshape(-1), dq.reshape(-1))
