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
# With matmuls in the program, BLAS threads own the cores: its idle workers spin after each
# call and starve Numba's workers (measured here, 2 cores: the MLP train step took 32 ms with
# parallel loop kernels instead of 2 ms with serial ones). Loop kernels then stay serial
# unless they are very large.
PARALLEL_MIN_WORK_WITH_BLAS = 1 << 22
# Outputs a kernel needs before its outer loop is threaded (fewer rows than this: serial, or
# the reduced loop is threaded when there is one output).
PARALLEL_MIN_OUTER = 8
# Reductions over leading axes (a bias gradient) with at least this many outputs loop in
# column order (reduced dims outside, kept dims inside, one accumulator per output).
COLUMN_ORDER_MIN_OUTER = 8
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
MAX_THREADS = 256          # threads per block for rows and elementwise loops
MAX_BLOCKS = 4096          # grid-stride loops cover the rest
SPLIT_MIN_INNER = 1 << 15  # a reduction row at least this long is split over many blocks...
SPLIT_MAX_OUTER = 64       # ...when there are this few rows (else one block per row suffices)
SPLIT_CHUNK = 1 << 13      # elements per block in a split reduction (32 per thread at 256)
COLUMN_MIN_OUTER = 32      # leading-axis reductions with at least this many outputs: columns
COLUMN_ROWS = 8            # reduced-dim slices per column block (block = 32 x COLUMN_ROWS)
# A long row: a reduction row this long is a split reduction on the GPU (with few rows), and
# the CPU reads it in one pass per stage; the tier tests rows at least this long.
LONG_ROW = SPLIT_MIN_INNER
