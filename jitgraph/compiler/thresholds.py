"""Every size at which the compiler picks another code path, named once.

The code generators, the loop compiler and the runtime read these names, and so does the
size-regime test tier (``tests/test_size_regimes.py``): it builds its shapes from them, so a
changed threshold moves the tests with it instead of leaving them in the old regime.
"""
from __future__ import annotations

# ---------------------------------------------------------------- CPU loop kernels
# Elements (the kernel's whole loop nest) below which threads cost more than they save: a
# larger kernel gets a ``prange`` loop over its outermost dim (or over its reduced dim when it
# has a single output, a full reduction).
PARALLEL_MIN_WORK = 1 << 16
# A product of at least this many multiply-adds, in a program whose driver runs in Python, is
# split over Numba's threads (``kernels/matmul.py``'s ``par_gemm``: a band of rows or columns per
# thread, one one-thread BLAS call each; a batch, one product per thread): BLAS, generated loops
# and hand-written kernels share Numba's one pool. Smaller products run on one thread.
PARALLEL_MIN_PRODUCT = 1 << 18
# Loop kernels of a program with products (whose driver runs in Python) are threaded from
# this many elements: below it a loop takes tens of microseconds, and threading it saves less
# than a tenth of that per call while its compile grows by about 0.3 s (the W1 MLP step's two
# 128 x 512 loops: the same step time either way, half a second more cold compile threaded).
PARALLEL_MIN_WORK_BESIDE_PRODUCTS = 1 << 17
# With matmuls in a compiled driver (a loop body), BLAS threads own the cores: its idle
# workers spin after each call and starve Numba's workers (measured here, 2 cores: the MLP
# train step took 32 ms with parallel loop kernels instead of 2 ms with serial ones). Loop
# kernels then stay serial unless they are very large.
PARALLEL_MIN_WORK_WITH_BLAS = 1 << 22
# Outputs a kernel needs before its outer loop is threaded (fewer rows than this: serial, or
# the reduced loop is threaded when there is one output).
PARALLEL_MIN_OUTER = 8
# Reductions over leading axes (a bias gradient) with at least this many outputs loop in
# column order (reduced dims outside, kept dims inside, one accumulator per output).
COLUMN_ORDER_MIN_OUTER = 8
# Threads over the outputs of a leading-axis reduction read each output's rows with a stride:
# up to this many rows LLVM unrolls the rows' loop and vectorizes over the outputs (8 x 262144:
# 0.06 ms, as fast as column order); past it each sum runs down its column, one scalar at a
# time (16 x 131072: 0.13 ms; 64 x 32768: 2.9 ms, column order 0.06 ms), so column order is
# taken.
STRIDED_COLUMN_MAX_ROWS = 8
# A column-order reduction large enough to thread, with one kept dim, runs blocks of this many
# outputs on threads (each thread reads a contiguous run of every row): the sum and maximum of
# 2048 x 1024 float32 over its rows in 0.10 ms on 2 threads, 0.21 ms on one.
COLUMN_BLOCK = 256
# A column-order reduction beside products splits its rows over threads (each row's sums apart,
# added in order afterwards) when its first reduced dim has at least this many rows and its
# partial sums are at most 1/SPLIT_COLUMN_MAX_PARTIAL of the elements it reads: a convolution's
# bias gradient over (batch, 28, 28, 32), 3.1 ms serial.
SPLIT_COLUMN_MIN_ROWS = 4
SPLIT_COLUMN_MAX_PARTIAL = 8
# ... in at most this many parts of whole rows (a tall, narrow sum: 65536 x 16 over its rows in
# 16 parts of 4096 rows, on the launcher's threads, instead of one thread down the columns).
SPLIT_COLUMN_MAX_PARTS = 16
# A threaded loop kernel that writes the left operand of the product after it, row block by
# row block (an im2col before a convolution's product), runs with that product as one step
# (``threaded.py``'s product tail) when the operand has at least ``product_tail_min_bytes()``:
# each thread computes a chunk of the kernel's rows, then the product of those rows while they
# are still in its cache, instead of the whole operand going to memory and back. That pays
# only where the operand would leave the last-level cache between the two steps: a quarter of
# the cache the CPU reports (a VM's share of a large L3 is smaller than the L3), within these
# bounds. Measured on a 2-core Xeon slice reporting 300 MiB of L3 (paired / apart): 75-128 MB
# operands 0.89-0.92 (a 5 x 5 x 32 -> 64 convolution's forward at batch 128, 80 MB: 11.2 ->
# 9.7 ms), 16-40 MB ones 1.02-1.06 (their operand stays in cache; the chunks' extra BLAS calls
# cost more than the re-read).
PRODUCT_TAIL_MIN_BYTES_FLOOR = 16 << 20
PRODUCT_TAIL_MIN_BYTES_CAP = 64 << 20
# ... and only for a product of few columns from a small right operand: with more columns the
# product does more work per element of the left operand, so re-reading it costs relatively
# less, and a larger right operand (packed again by every chunk's BLAS call) crowds the chunk
# out of the cache. Measured as above: 65536 x 512 @ 512 x 16 / x 64 0.92-0.94, a 3 x 3 x 64
# -> 64 convolution 0.86; 512 x 256 columns 1.06, 1024 x 1024 1.13, 2048 x 64 (512 KiB) 1.05.
PRODUCT_TAIL_MAX_COLUMNS = 128
PRODUCT_TAIL_MAX_RIGHT_BYTES = 256 << 10
# A tail's chunk: as many kernel rows as give about this many bytes of the operand (2 MiB: one
# core's L2 on recent Xeons, where the 5 x 5 x 32 -> 64 convolution measured 0.91 of the steps
# apart against 0.95-0.97 with 0.5-1 MiB chunks; beyond a smaller L2 a chunk is still read from
# the L3, not memory), and enough rows for an efficient product (PRODUCT_TAIL_MIN_ROWS).
PRODUCT_TAIL_CHUNK_BYTES = 1 << 21
PRODUCT_TAIL_MIN_ROWS = 64
# Programs of at most this many steps (and no matmul) get a compiled driver; larger ones run
# their steps from a Python driver (see ``codegen_cpu``).
SMALL_PROGRAM_STEPS = 2

# ---------------------------------------------------------------- compiled control flow
# A scan body of at most this many loop kernels (and no matrix product) gets a compiled loop.
LOOP_BODY_MAX_STEPS = 16
# Shorter scans keep the Python loop: compiling the loop costs more than it would save them.
COMPILED_LOOP_MIN_LENGTH = 32
# Loops whose products are all below this many multiply-adds run with one BLAS thread.
SMALL_PRODUCT = 1 << 23

# ---------------------------------------------------------------- CUDA kernels
# Grids are sized from the device (``backends/cuda_geometry.py``: SM count, resident blocks,
# grid limits); these are the rules' constants.
MAX_THREADS = 256          # threads per block for rows and elementwise loops
MAX_BLOCKS = 1 << 16       # no grid-stride grid above this (the device rules stay below it;
                           # the fill/copy helpers use it as their grid cap)
GRID_WAVES = 8             # grid-stride grids: at most this many full waves of resident blocks
ELEMENTS_PER_THREAD = 4    # elementwise: elements per thread per iteration (loads, then stores)
MIN_BLOCKS_PER_SM = 2      # split and column reductions: at least this many blocks per SM
WARP_ROW_MAX = 1024        # reduction rows at most this long: a warp per row (block 32 x rows)
WARP_ROWS = 8              # rows (warps) per block of a warp-per-row kernel, at most
SPLIT_MIN_INNER = 1 << 15  # a reduction row at least this long is split over many blocks...
SPLIT_MAX_OUTER = 64       # ...when there are this few rows (else one block per row suffices)
SPLIT_CHUNK = 1 << 12      # smallest chunk (elements per block) of a split reduction; the SM
                           # count sizes the chunks above it
# A row whose elements are gathered (each a load whose address is another load: the label's
# logit of each example in a cross-entropy's mean) is bound by latency, not bandwidth: split
# from this long, in chunks this short, so the dependent loads spread over the grid instead
# of queueing in one block (a mean over 8192 rows: 32 blocks, not one of 32 loads per thread)
GATHER_SPLIT_MIN_INNER = 1 << 11
GATHER_SPLIT_CHUNK = 1 << 8
COLUMN_MIN_OUTER = 32      # leading-axis reductions with at least this many outputs: columns
COLUMN_ROWS = 8            # reduced-dim slices per column block (block = 32 x COLUMN_ROWS)
COLUMN_PART_MIN = 64       # a column reduction split over blocks: reduced slices per part, at least
# A long row: a reduction row this long is a split reduction on the GPU (with few rows), and
# the CPU reads it in one pass per stage; the tier tests rows at least this long.
LONG_ROW = SPLIT_MIN_INNER


def product_tail_min_bytes() -> int:
    """The smallest left operand a loop and its product run as one step for (see
    ``PRODUCT_TAIL_MIN_BYTES_FLOOR``): a quarter of the largest CPU cache Linux reports, within
    the floor and the cap (the cap where the size is not reported)."""
    if _TAIL_MIN:
        return _TAIL_MIN[0]
    size = 0
    try:
        import glob
        for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
            with open(path) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            size = max(size, int(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        size = 0
    quarter = size // 4 if size else PRODUCT_TAIL_MIN_BYTES_CAP
    _TAIL_MIN.append(min(PRODUCT_TAIL_MIN_BYTES_CAP, max(PRODUCT_TAIL_MIN_BYTES_FLOOR, quarter)))
    return _TAIL_MIN[0]


_TAIL_MIN: list = []
