"""Row reductions for hand-written kernels, written so that LLVM vectorizes them: the maximum
with ``llvm.maximum`` (NaN propagates), the sum with reassociation allowed on this one
function. Neither allocates (a per-call accumulator array cost 50 ns a row, more than the
row's 128 values took). The sum's order is the one its compiled loop fixes, so results are
the same from run to run on a machine."""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit

from .scalar import maximum_step


@njit(cache=True, nogil=True, error_model="numpy")
def row_max(s, r, n):
    """max of s[r, :n] (-inf for n = 0; NaN if any is NaN)."""
    m = s.dtype.type(-np.inf)
    for c in range(n):
        m = maximum_step(m, s[r, c])
    return m


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def row_sum(s, r, n):
    """sum of s[r, :n], in the vector partial sums LLVM keeps (reassociated: vectorizable)."""
    a = s.dtype.type(0.0)
    for c in range(n):
        a += s[r, c]
    return a
