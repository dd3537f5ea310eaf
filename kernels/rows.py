"""Row reductions for hand-written kernels, with eight independent accumulators: LLVM
vectorizes them (a single accumulator is a serial chain it may not reorder), and the order is
fixed, so results are deterministic."""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit


@njit(cache=True, nogil=True)
def row_max(s, r, n):
    """max of s[r, :n], with eight independent maxima (vectorizable, the same result)."""
    m = np.full(8, -np.inf, s.dtype)
    n8 = n - n % 8
    for c in range(0, n8, 8):
        for u in range(8):
            m[u] = max(m[u], s[r, c + u])
    out = m[0]
    for u in range(1, 8):
        out = max(out, m[u])
    for c in range(n8, n):
        out = max(out, s[r, c])
    return out


@njit(cache=True, nogil=True)
def row_sum(s, r, n):
    """sum of s[r, :n] in eight partial sums (vectorizable; a fixed order: deterministic)."""
    a = np.zeros(8, s.dtype)
    n8 = n - n % 8
    for c in range(0, n8, 8):
        for u in range(8):
            a[u] += s[r, c + u]
    out = s.dtype.type(0.0)
    for u in range(8):
        out += a[u]
    for c in range(n8, n):
        out += s[r, c]
    return out
