"""Launch geometry from the device: how many blocks fill it, and what a grid may not exceed.

``device_limits()`` describes the current CUDA device (queried once per device from Numba's
device attributes); under the simulator, or where no GPU can be queried (generating a module
without running it), it is an H200-like default, so generated code and its tests see the
geometry of the benchmark machine. ``JITGRAPH_CUDA_SM_COUNT`` overrides the SM count (tests
use it to reach many-block paths at simulator sizes).

The rules below (and the kernel layouts in ``cuda.py`` that use them) turn the limits into
grids; on the default device (132 SMs, 2048 threads and 32 blocks per SM):

* grid-stride grids: ``min(work blocks, GRID_WAVES * wave(threads), grid x, MAX_BLOCKS)``,
  ``wave(t) = SMs * min(32, 2048 // t)``: elementwise over 2^26 float32 (groups of 4 * 256)
  is 8448 blocks of 256 (64 per SM);
* a warp per row (rows <= ``WARP_ROW_MAX``), ``WARP_ROWS`` rows per block halved while fewer
  than ``MIN_BLOCKS_PER_SM * SMs`` blocks: (4096, 1024) is 512 blocks of (32, 8), (128, 10)
  128 blocks of (32, 1); longer rows a block each: (8192, 32000) is 8192 blocks of 256;
* column reductions split their reduced dims into ``ceil(2 * SMs / column blocks)`` parts
  (each at least ``COLUMN_PART_MIN`` slices): (512, 2048) is 64 x 5 = 320 blocks of (32, 8);
* split reductions: one wave of 256-thread blocks over all rows, chunks at least
  ``SPLIT_CHUNK``: a sum of 2^26 is 1056 chunks of 63552.

Every grid is a compile-time constant of the generated source, so the disk cache (keyed by
source) keeps one entry per geometry.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

from ..thresholds import GRID_WAVES, MIN_BLOCKS_PER_SM


class DeviceLimits(NamedTuple):
    sm_count: int = 132                        # H200 (and H100 SXM)
    max_threads_per_block: int = 1024
    max_grid: tuple = (2 ** 31 - 1, 65535, 65535)
    warp_size: int = 32
    shared_per_block: int = 48 * 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32

    def resident_blocks(self, threads: int) -> int:
        """Blocks of ``threads`` threads one SM holds at once (thread and block limits only;
        registers and shared memory may lower it)."""
        return max(1, min(self.max_blocks_per_sm, self.max_threads_per_sm // max(1, threads)))

    def wave(self, threads: int) -> int:
        """Blocks of ``threads`` threads the whole device runs at once."""
        return self.sm_count * self.resident_blocks(threads)


DEFAULT = DeviceLimits()


@functools.lru_cache(maxsize=None)
def _query(device_id: int) -> DeviceLimits:
    from numba import cuda
    d = cuda.get_current_device()

    def attr(name: str, default: int) -> int:
        try:
            return int(getattr(d, name))
        except Exception:        # an attribute this driver binding does not name
            return default
    dflt = DEFAULT
    return DeviceLimits(
        sm_count=attr("MULTIPROCESSOR_COUNT", dflt.sm_count),
        max_threads_per_block=attr("MAX_THREADS_PER_BLOCK", dflt.max_threads_per_block),
        max_grid=(attr("MAX_GRID_DIM_X", dflt.max_grid[0]), attr("MAX_GRID_DIM_Y", dflt.max_grid[1]),
                  attr("MAX_GRID_DIM_Z", dflt.max_grid[2])),
        warp_size=attr("WARP_SIZE", dflt.warp_size),
        shared_per_block=attr("MAX_SHARED_MEMORY_PER_BLOCK", dflt.shared_per_block),
        max_threads_per_sm=attr("MAX_THREADS_PER_MULTIPROCESSOR", dflt.max_threads_per_sm),
        max_blocks_per_sm=attr("MAX_BLOCKS_PER_MULTIPROCESSOR", dflt.max_blocks_per_sm))


@functools.lru_cache(maxsize=None)
def _gpu_present() -> bool:
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:
        return False


def device_limits() -> DeviceLimits:
    """The current device's limits (the default under the simulator or without a GPU), with
    ``JITGRAPH_CUDA_SM_COUNT`` applied."""
    limits = DEFAULT
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1" and _gpu_present():
        try:
            from numba import cuda
            limits = _query(int(cuda.get_current_device().id))
        except Exception:        # a driver that cannot say: generate for the default
            limits = DEFAULT
    env = os.environ.get("JITGRAPH_CUDA_SM_COUNT")
    if env:
        limits = limits._replace(sm_count=max(1, int(env)))
    return limits


# ---------------------------------------------------------------- rules
def stride_grid(limits: DeviceLimits, work_blocks: int, threads: int, cap: int) -> int:
    """Blocks of a grid-stride loop over ``work_blocks`` blocks' worth of work: all of them up
    to ``GRID_WAVES`` full waves of the device (a multiple of the SM count), never above the
    grid's x limit or ``cap`` (the ``MAX_BLOCKS`` threshold); the loop covers the rest. No
    work: 0 (the launcher leaves the launch out)."""
    if work_blocks <= 0:
        return 0
    most = min(limits.wave(threads) * GRID_WAVES, limits.max_grid[0], cap)
    return max(1, min(int(work_blocks), most))


def min_blocks(limits: DeviceLimits) -> int:
    """Blocks a reduction splits its work into so each SM has some: ``MIN_BLOCKS_PER_SM`` per
    SM."""
    return MIN_BLOCKS_PER_SM * limits.sm_count


def within(grid, limits: DeviceLimits) -> bool:
    """A grid (int or tuple) within the device's grid limits."""
    dims = grid if isinstance(grid, tuple) else (grid,)
    return all(1 <= g <= m for g, m in zip(dims, limits.max_grid)) and len(dims) <= 3
