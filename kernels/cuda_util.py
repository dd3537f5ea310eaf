"""Small CUDA kernels the generated drivers and the runtime use: fill and copy flat arrays
(launched through the driver layer, ``jitgraph.cuda_driver``: ``Driver.fill``/``copy``)."""
from __future__ import annotations

from numba import cuda

def launch_config(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over ``n`` elements, within the grid limits
    the generated kernels use (``jitgraph.compiler.thresholds``)."""
    from jitgraph.compiler.thresholds import MAX_BLOCKS, MAX_THREADS
    threads = MAX_THREADS if n >= MAX_THREADS else max(32, 1 << max(0, (n - 1).bit_length()))
    return max(1, min(MAX_BLOCKS, -(-n // threads))), threads


@cuda.jit
def fill_kernel(a, value):
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        a[i] = value


@cuda.jit
def copy_kernel(dst, src):
    for i in range(cuda.grid(1), dst.shape[0], cuda.gridsize(1)):
        dst[i] = src[i]


def fill(a, value) -> None:
    """Set every element of the flat device array ``a`` (no host round trip)."""
    from jitgraph.cuda_driver import driver
    driver().fill(a, value)


_fill, _copy = fill_kernel, copy_kernel     # older names (tests_cuda/ptx_check.py)
