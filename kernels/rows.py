"""Row reductions for hand-written kernels, written so that LLVM vectorizes them: the maximum
with ``llvm.maximum`` (NaN propagates), without allocating (a per-call array of eight
partial maxima cost 50 ns a row, more than the row's 128 values took). Row sums are fused
into the loops that make the values (``attention._exp_sum``)."""
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
