"""Fused attention on NVIDIA GPUs: the same computation as ``kernels/attention.py`` (online
softmax forward keeping each row's max and sum; backward recomputing the probabilities from
them, one pass over key tiles for dk and dv and one over query tiles for dq), as ``@cuda.jit``
kernels with the tiles in shared memory.

A block of ``TILE`` threads owns ``TILE`` rows (queries in the forward and dq kernels, keys in
the dk/dv kernel): each thread keeps its row in registers (local memory beyond them) and the
block loads the other operand's tile into shared memory together, one row per thread, then
every thread walks the tile. ``batch`` is the grid's second axis. Head dimensions up to
``MAX_DIM`` (128 in float32, 64 in float64, so the two shared tiles fit in 48 KiB); the
compiler keeps larger ones as host steps. Masks and the causal cut are applied as on the CPU
(``kind``, ``fill``, ``extra``/``ebi``: see there).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from .cuda_scalar import math

TILE = 32
NEG_INF = -np.inf


def max_dim(dtype) -> int:
    return 128 if np.dtype(dtype) == np.float32 else 64


@functools.lru_cache(maxsize=None)
def kernels(dtype_name: str):
    """The four kernels for one float dtype (shared-array shapes and types are compile-time)."""
    from numba import float32, float64
    dt = float32 if dtype_name == "float32" else float64
    dmax = max_dim(dtype_name)

    @cuda.jit(device=True, inline=True)
    def score(qrow, tile, c, d, extra, eb, kind, causal, fill, scale, i, j):
        """(score, live) of query row ``qrow`` against row ``c`` of a shared tile."""
        s = dt(0.0)
        for x in range(d):
            s += qrow[x] * tile[c, x]
        s *= scale
        live = True
        tq1 = extra.shape[1] > 1
        tk1 = extra.shape[2] > 1
        if kind == 1:
            if extra[eb, i if tq1 else 0, j if tk1 else 0] == 0:
                s = fill
                live = False
        elif kind == 2:
            s += extra[eb, i if tq1 else 0, j if tk1 else 0]
        if causal and j > i:
            s = fill
            live = False
        return s, live

    @cuda.jit(device=True, inline=True)
    def own_row(dst, src, b, row, n, width, zero):
        """This thread's row of ``src`` (zeros past the end; ``zero``: zeros only)."""
        for x in range(width):
            dst[x] = src[b, row, x] if row < n and not zero else dt(0.0)

    @cuda.jit(device=True, inline=True)
    def load_tile(tile, src, b, row, n, width, tx):
        """Row ``row`` of ``src`` into this thread's row of a shared tile."""
        if row < n:
            for x in range(width):
                tile[tx, x] = src[b, row, x]

    @cuda.jit
    def forward(q, k, v, extra, ebi, kind, causal, fill, scale, o, rmax, rsum):
        b = cuda.blockIdx.y
        tx = cuda.threadIdx.x
        i = cuda.blockIdx.x * TILE + tx
        tq, d, tk, dv = q.shape[1], q.shape[2], k.shape[1], v.shape[2]
        ks = cuda.shared.array((TILE, dmax), dt)
        vs = cuda.shared.array((TILE, dmax), dt)
        qi = cuda.local.array(dmax, dt)
        acc = cuda.local.array(dmax, dt)
        valid = i < tq
        own_row(qi, q, b, i, tq, d, False)
        own_row(acc, o, b, i, tq, dv, True)
        m = dt(NEG_INF)
        tot = dt(0.0)
        last = min(cuda.blockIdx.x * TILE + TILE, tq)
        jend = min(tk, last) if causal else tk
        eb = ebi[b]
        for j0 in range(0, jend, TILE):
            load_tile(ks, k, b, j0 + tx, tk, d, tx)
            load_tile(vs, v, b, j0 + tx, tk, dv, tx)
            cuda.syncthreads()
            if valid:
                for c in range(min(TILE, jend - j0)):
                    s, _ = score(qi, ks, c, d, extra, eb, kind, causal, fill, scale, i, j0 + c)
                    if s > m:
                        alpha = math.exp(m - s)
                        tot = tot * alpha + dt(1.0)
                        for x in range(dv):
                            acc[x] = acc[x] * alpha + vs[c, x]
                        m = s
                    else:
                        p = math.exp(s - m) if m > NEG_INF else dt(0.0)
                        tot += p
                        for x in range(dv):
                            acc[x] += p * vs[c, x]
            cuda.syncthreads()
        if valid:
            for x in range(dv):
                o[b, i, x] = acc[x] / tot
            rmax[b, i] = m
            rsum[b, i] = tot

    @cuda.jit
    def row_dots(do, o, delta):
        b = cuda.blockIdx.y
        i = cuda.blockIdx.x * TILE + cuda.threadIdx.x
        if i < o.shape[1]:
            acc = dt(0.0)
            for x in range(o.shape[2]):
                acc += do[b, i, x] * o[b, i, x]
            delta[b, i] = acc

    @cuda.jit
    def key_grads(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do,
                  dk, dv):
        """One thread per key row: dk and dv over the query tiles (in shared memory)."""
        b = cuda.blockIdx.y
        tx = cuda.threadIdx.x
        j = cuda.blockIdx.x * TILE + tx
        tq, d, tk, dvn = q.shape[1], q.shape[2], k.shape[1], v.shape[2]
        qs = cuda.shared.array((TILE, dmax), dt)
        dos = cuda.shared.array((TILE, dmax), dt)
        kj = cuda.local.array(dmax, dt)
        vj = cuda.local.array(dmax, dt)
        gk = cuda.local.array(dmax, dt)
        gv = cuda.local.array(dmax, dt)
        valid = j < tk
        own_row(kj, k, b, j, tk, d, False)
        own_row(gk, k, b, j, tk, d, True)
        own_row(vj, v, b, j, tk, dvn, False)
        own_row(gv, v, b, j, tk, dvn, True)
        eb = ebi[b]
        first = cuda.blockIdx.x * TILE if causal else 0
        for i0 in range(first, tq, TILE):
            load_tile(qs, q, b, i0 + tx, tq, d, tx)
            load_tile(dos, do, b, i0 + tx, tq, dvn, tx)
            cuda.syncthreads()
            if valid:
                for r in range(min(TILE, tq - i0)):
                    ii = i0 + r
                    s, live = score(kj, qs, r, d, extra, eb, kind, causal, fill, scale, ii, j)
                    p = math.exp(s - rmax[b, ii]) / rsum[b, ii]
                    dp = dt(0.0)
                    for x in range(dvn):
                        gv[x] += p * dos[r, x]
                        dp += dos[r, x] * vj[x]
                    ds = p * (dp - delta[b, ii]) * scale if live else dt(0.0)
                    for x in range(d):
                        gk[x] += ds * qs[r, x]
            cuda.syncthreads()
        if valid:
            for x in range(d):
                dk[b, j, x] = gk[x]
            for x in range(dvn):
                dv[b, j, x] = gv[x]

    @cuda.jit
    def query_grads(q, k, v, extra, ebi, kind, causal, fill, scale, rmax, rsum, delta, do, dq):
        """One thread per query row: dq over the key tiles (in shared memory)."""
        b = cuda.blockIdx.y
        tx = cuda.threadIdx.x
        i = cuda.blockIdx.x * TILE + tx
        tq, d, tk, dvn = q.shape[1], q.shape[2], k.shape[1], v.shape[2]
        ks = cuda.shared.array((TILE, dmax), dt)
        vs = cuda.shared.array((TILE, dmax), dt)
        qi = cuda.local.array(dmax, dt)
        doi = cuda.local.array(dmax, dt)
        gq = cuda.local.array(dmax, dt)
        valid = i < tq
        own_row(qi, q, b, i, tq, d, False)
        own_row(gq, q, b, i, tq, d, True)
        own_row(doi, do, b, i, tq, dvn, False)
        mi = rmax[b, i] if valid else dt(0.0)
        li = rsum[b, i] if valid else dt(1.0)
        di = delta[b, i] if valid else dt(0.0)
        last = min(cuda.blockIdx.x * TILE + TILE, tq)
        jend = min(tk, last) if causal else tk
        eb = ebi[b]
        for j0 in range(0, jend, TILE):
            load_tile(ks, k, b, j0 + tx, tk, d, tx)
            load_tile(vs, v, b, j0 + tx, tk, dvn, tx)
            cuda.syncthreads()
            if valid:
                for c in range(min(TILE, jend - j0)):
                    s, live = score(qi, ks, c, d, extra, eb, kind, causal, fill, scale, i,
                                    j0 + c)
                    if live:
                        p = math.exp(s - mi) / li
                        dp = dt(0.0)
                        for x in range(dvn):
                            dp += doi[x] * vs[c, x]
                        ds = p * (dp - di) * scale
                        for x in range(d):
                            gq[x] += ds * ks[c, x]
            cuda.syncthreads()
        if valid:
            for x in range(d):
                dq[b, i, x] = gq[x]

    return forward, row_dots, key_grads, query_grads


class Attention:
    """One call site of ``attention`` / ``attention_bwd`` in a CUDA program, prepared once: the
    3-D views of its flat buffers, the grids, and the extra operand's batch rows on the
    device. Called from the generated driver with the flat device buffers."""

    def __init__(self, driver, batch: tuple, tq: int, tk: int, d: int, dv: int,
                 extra_shape: tuple | None, kind: int, causal: bool, fill: float, scale: float,
                 dtype):
        self.D = driver
        self.dtype = np.dtype(dtype)
        self.nb = int(np.prod(batch, dtype=np.int64))
        self.tq, self.tk, self.d, self.dv = tq, tk, d, dv
        self.kind, self.causal = kind, bool(causal)
        self.fill, self.scale = self.dtype.type(fill), self.dtype.type(scale)
        if extra_shape is None:
            self.extra_shape = (1, 1, 1)
            rows = np.zeros(self.nb, np.int64)
            self.dummy = driver.to_device(np.zeros(1, self.dtype))
        else:
            e = (1,) * (len(batch) + 2 - len(extra_shape)) + tuple(extra_shape)
            eb = e[:-2]
            self.extra_shape = (int(np.prod(eb, dtype=np.int64)),) + e[-2:]
            idx = np.arange(self.extra_shape[0], dtype=np.int64).reshape(eb)
            rows = np.ascontiguousarray(np.broadcast_to(idx, batch).reshape(-1))
            self.dummy = None
        self.ebi = driver.to_device(rows)
        self.kernels = kernels(self.dtype.name)
        self._scratch: dict = {}

    def scratch(self, k: int):
        """A buffer of this call site for result ``k`` nothing reads (o, rowmax, rowsum, dq,
        dk, dv) and for the backward pass's row dots (k = 6): the kernels write every result."""
        if k not in self._scratch:
            nb, tq, tk, d, dv = self.nb, self.tq, self.tk, self.d, self.dv
            size = [nb * tq * dv, nb * tq, nb * tq, nb * tq * d, nb * tk * d, nb * tk * dv,
                    nb * tq][k]
            self._scratch[k] = self.D.to_device(np.zeros(size, self.dtype))
        return self._scratch[k]

    def _extra(self, extra):
        return (self.dummy if extra is None else extra).reshape(self.extra_shape)

    def _grid(self, n: int) -> tuple:
        return ((n + TILE - 1) // TILE, self.nb)

    def forward(self, q, k, v, extra, o, rmax, rsum) -> None:
        nb, tq, tk, d, dv = self.nb, self.tq, self.tk, self.d, self.dv
        fwd = self.kernels[0]
        self.D.launch(fwd, self._grid(tq), TILE, (
            q.reshape((nb, tq, d)), k.reshape((nb, tk, d)), v.reshape((nb, tk, dv)),
            self._extra(extra), self.ebi, self.kind, self.causal, self.fill, self.scale,
            o.reshape((nb, tq, dv)), rmax.reshape((nb, tq)), rsum.reshape((nb, tq))))

    def backward(self, q, k, v, extra, o, rmax, rsum, do, dq, dk, dv) -> None:
        nb, tq, tk, d, dvn = self.nb, self.tq, self.tk, self.d, self.dv
        delta = self.scratch(6)
        _, row_dots, key_grads, query_grads = self.kernels
        q3, k3, v3 = q.reshape((nb, tq, d)), k.reshape((nb, tk, d)), v.reshape((nb, tk, dvn))
        do3, m2, s2 = do.reshape((nb, tq, dvn)), rmax.reshape((nb, tq)), rsum.reshape((nb, tq))
        d2 = delta.reshape((nb, tq))
        self.D.launch(row_dots, self._grid(tq), TILE, (do3, o.reshape((nb, tq, dvn)), d2))
        common = (q3, k3, v3, self._extra(extra), self.ebi, self.kind, self.causal, self.fill,
                  self.scale, m2, s2, d2, do3)
        self.D.launch(key_grads, self._grid(tk), TILE,
                      common + (dk.reshape((nb, tk, d)), dv.reshape((nb, tk, dvn))))
        self.D.launch(query_grads, self._grid(tq), TILE, common + (dq.reshape((nb, tq, d)),))
