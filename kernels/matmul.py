"""Matrix products for generated programs.

Float products go to BLAS through ``np.dot`` (Numba binds SciPy's BLAS; transposed operands are
passed as views, so backward-pass products copy nothing). Integer products, which BLAS does not
do, use a cache-friendly i-k-j loop.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def matmul_loop(a, b, out):
    """out = a @ b for any numeric dtype (2-D operands)."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@njit(cache=True, error_model="numpy")
def matmul_blas(a, b, out):
    """out = a @ b through BLAS; empty contractions give zeros (BLAS leaves them undefined)."""
    if a.shape[1] == 0:
        out[:, :] = 0
    elif out.size:
        np.dot(a, b, out)
