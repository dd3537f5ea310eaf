"""Softmax cross-entropy of ``logits = h @ W`` without the (tokens, vocabulary) logits: the rows
go through in chunks (as Liger Kernel's fused linear cross-entropy does), so only a
(rows, V) tile of logits exists at a time. Per chunk: one BLAS product for the tile (BLAS on
its own threads), then per row, split over Python threads (``threads.run_split``), its max,
log-sum-exp and labelled logit (a label outside [0, V) picks 0, as ``nn.cross_entropy``'s
one-hot sum does; its loss is then masked by the caller).

``forward`` gives the row losses and log-sum-exps; ``backward`` recomputes each tile for the
gradient (``dz = (softmax - onehot) * ct``, then ``dh = dz W^T``, ``dW += h^T dz``);
``train`` does both in one sweep when the row cotangents are known before the forward (a
mean or a sum of the losses: the compiler merges the two steps), three products per chunk
as the unfused program's, and no recomputation. ``chunk_rows`` sizes the chunks: large
enough that accumulating ``dW`` (a (D, V) read and write per chunk) costs little beside the
products, and at most an eighth of the rows, so the tile stays well below the logits' size.
"""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit

from .fastmath import fast_exp, fast_log
from .matmul import blas_gemm
from .rows import row_max
from .threads import run_split

MIN_ROWS, MAX_ROWS = 64, 1024


def chunk_rows(n: int) -> int:
    return int(min(MAX_ROWS, max(MIN_ROWS, -(-n // 8))))


@njit(cache=True, nogil=True)
def tile_stats(z, labels, r0, loss, lse, start, step):
    """Rows start, start + step, ... of the tile ``z`` (rows r0...): log-sum-exp and loss."""
    v = z.shape[1]
    for r in range(start, z.shape[0], step):
        m = row_max(z, r, v)
        acc = np.zeros(8, z.dtype)          # eight partial sums: vectorized, fixed order
        v8 = v - v % 8
        for c in range(0, v8, 8):
            for u in range(8):
                acc[u] += fast_exp(z[r, c + u] - m)
        s = z.dtype.type(0.0)
        for u in range(8):
            s += acc[u]
        for c in range(v8, v):
            s += fast_exp(z[r, c] - m)
        lr = m + fast_log(s)
        y = labels[r0 + r]
        picked = z[r, y] if 0 <= y < v else z.dtype.type(0.0)
        lse[r0 + r] = lr
        loss[r0 + r] = lr - picked


@njit(cache=True, nogil=True)
def tile_grad(z, labels, r0, lse, ct, start, step):
    """z <- (softmax(z) - onehot) * ct, in place, rows start, start + step, ..."""
    v = z.shape[1]
    for r in range(start, z.shape[0], step):
        lr = lse[r0 + r]
        g = ct[r0 + r]
        for c in range(v):
            z[r, c] = fast_exp(z[r, c] - lr) * g
        y = labels[r0 + r]
        if 0 <= y < v:
            z[r, y] -= g


@njit(cache=True, nogil=True)
def tile_train(z, labels, r0, ct, loss, lse, start, step):
    """Both of the above in one pass over each row's exponentials (one exp per logit)."""
    v = z.shape[1]
    v8 = v - v % 8
    for r in range(start, z.shape[0], step):
        m = row_max(z, r, v)
        y = labels[r0 + r]
        ok = 0 <= y < v
        picked = z[r, y] if ok else z.dtype.type(0.0)
        acc = np.zeros(8, z.dtype)
        for c in range(0, v8, 8):
            for u in range(8):
                e = fast_exp(z[r, c + u] - m)
                z[r, c + u] = e
                acc[u] += e
        s = z.dtype.type(0.0)
        for u in range(8):
            s += acc[u]
        for c in range(v8, v):
            e = fast_exp(z[r, c] - m)
            z[r, c] = e
            s += e
        lr = m + fast_log(s)
        lse[r0 + r] = lr
        loss[r0 + r] = lr - picked
        g = ct[r0 + r]
        scale = g / s
        for c in range(v):
            z[r, c] *= scale
        if ok:
            z[r, y] -= g


def _sweep(h, w, labels, ct, loss, lse, dh, dw, stats: bool, grads: bool) -> None:
    n, v = h.shape[0], w.shape[1]
    rows = chunk_rows(n)
    z = np.empty((min(rows, n), v), h.dtype)
    if grads:
        dw[:] = 0.0
    for r0 in range(0, n, rows):
        r1 = min(r0 + rows, n)
        t = z[:r1 - r0]
        blas_gemm(1.0, h[r0:r1], False, w, False, 0.0, t)
        if stats and grads:
            run_split(lambda s, st: tile_train(t, labels, r0, ct, loss, lse, s, st), r1 - r0)
        elif stats:
            run_split(lambda s, st: tile_stats(t, labels, r0, loss, lse, s, st), r1 - r0)
        else:
            run_split(lambda s, st: tile_grad(t, labels, r0, lse, ct, s, st), r1 - r0)
        if grads:
            blas_gemm(1.0, t, False, w, True, 0.0, dh[r0:r1])
            blas_gemm(1.0, h[r0:r1], True, t, False, 1.0, dw)


def forward(h, w, labels, loss, lse) -> None:
    _sweep(h, w, labels, None, loss, lse, None, None, True, False)


def backward(h, w, labels, lse, ct, dh, dw) -> None:
    _sweep(h, w, labels, ct, None, lse, dh, dw, False, True)


def train(h, w, labels, ct, loss, lse, dh, dw) -> None:
    _sweep(h, w, labels, ct, loss, lse, dh, dw, True, True)
