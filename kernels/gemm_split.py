"""How ``par_gemm`` splits a deep product, shared by its two implementations (Numba's in
``matmul.py`` and the LLVM IR built-in of ``jitgraph/compiler/gemm_launchers.py``, which must
give the same bits and cannot import Numba).

A deep product (an output of few elements beside a long contraction: a convolution's weight
gradient, taps x channels by channels, summed over every position of the batch) has too few
rows and columns for bands, and each thread of a band split reads all of one operand. It is
split along the contraction instead, into parts whose number depends on the shape alone
(never on the thread count, so neither do the bits), each part's product written to an array
of its own and the parts added in order. Measured here (2-core Xeon, float32, one BLAS thread
per part): the first convolution's weight gradient of the MNIST-size TF-1 network, 25 x 32
over 100,352 positions, 1.40 -> 0.93 ms; 9 x 32 over 50,176 0.53 -> 0.35 ms; 256 x 256 over
8,192 3.09 -> 2.82 ms; 800 x 64 over 25,088 the same.
"""
from __future__ import annotations

DEEP_MIN_K = 4096           # a contraction at least this long,
DEEP_MIN_RATIO = 8          # this many times the output's longer side,
DEEP_MAX_OUT = 1 << 16      # and an output of at most this many elements
DEEP_PART_K = 2048          # contraction indices per part (at least),
DEEP_MAX_PARTS = 8          # and at most this many parts


def deep_parts(m: int, n: int, k: int) -> int:
    """How many parts of its contraction an (m, n) output summed over ``k`` is split into:
    0 where the product is split into bands of rows or columns instead."""
    if k < DEEP_MIN_K or m * n > DEEP_MAX_OUT or k < DEEP_MIN_RATIO * max(m, n):
        return 0
    return min(DEEP_MAX_PARTS, k // DEEP_PART_K)
