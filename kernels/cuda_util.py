"""Small CUDA kernels the generated drivers and the runtime use: fill and copy flat arrays."""
from __future__ import annotations

from numba import cuda

def launch_config(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over ``n`` elements, within the grid limits
    the generated kernels use (``jitgraph.compiler.thresholds``)."""
    from jitgraph.compiler.thresholds import MAX_BLOCKS, MAX_THREADS
    threads = MAX_THREADS if n >= MAX_THREADS else max(32, 1 << max(0, (n - 1).bit_length()))
    return max(1, min(MAX_BLOCKS, -(-n // threads))), threads


@cuda.jit
def _fill(a, value):
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        a[i] = value


@cuda.jit
def _copy(dst, src):
    for i in range(cuda.grid(1), dst.shape[0], cuda.gridsize(1)):
        dst[i] = src[i]


def fill(a, value) -> None:
    """Set every element of the flat device array ``a`` (no host round trip)."""
    if a.shape[0]:
        g, t = launch_config(a.shape[0])
        _fill[g, t](a, a.dtype.type(value))


def copy_into(dst, src) -> None:
    """``dst[:] = src`` for flat device arrays of the same size and dtype."""
    if dst.shape[0]:
        g, t = launch_config(dst.shape[0])
        _copy[g, t](dst, src)
