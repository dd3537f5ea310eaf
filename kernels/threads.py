"""Parallel loops for hand-written kernels that release the GIL (``nogil``), without ``prange``
compilation (seconds per kernel).

``run_rows`` runs a *row kernel* ``kernel(lo, hi, a0, a1, ..., n)`` over rows ``0..n`` on the
process's one thread pool: Numba's own threads, the ones generated kernels and ``prange`` loops
run on, through a launcher the compiler builds (``set_row_pool``; ``jitgraph.compiler.threaded``
writes it in LLVM IR). Python threads beside that pool would share the cores with its
threads while they spin at the end of a parallel region (GNU OpenMP's wait): a fused attention
step after a threaded loop ran 1.8-2x its own time that way. Without the compiler's pool (it
cannot build launchers here) the rows are split over Python threads, as ``run_split`` does."""
from __future__ import annotations

from typing import Callable

#: set by the compiler: ``pool(kernel, n, args) -> bool`` runs ``kernel`` over ``n`` rows on
#: Numba's threads, False where it cannot (then the Python threads below run it)
_ROW_POOL: list = []


def set_row_pool(pool: Callable) -> None:
    """Route ``run_rows`` through ``pool`` (the compiler calls this when it loads)."""
    _ROW_POOL[:] = [pool]


def run_rows(kernel, n: int, *args) -> None:
    """``kernel(lo, hi, *args, n)`` over rows ``0..n``, split over the threads: each row must
    be computed by itself whatever the split (then results do not depend on it). Arguments:
    1-D C-contiguous arrays, ``n`` last."""
    if n <= 0:
        return
    if _ROW_POOL and _ROW_POOL[0](kernel, n, args):
        return
    # (``run_split``'s first call, at start n, is an empty range: rows n:n)
    run_split(lambda s, st: kernel(min(n * s // st, n), min(n * (s + 1) // st, n), *args, n), n)


def run_split(work, n: int) -> None:
    """Run ``work(start, step)`` on up to Numba's thread count of Python threads (the kernels
    release the GIL): a parallel loop that costs no ``prange`` compilation. ``work(n, 1)``
    must run its kernel over no rows: it is called first, in this thread. The threads live
    for one call only: a process with other threads running forks no compile workers."""
    import threading

    import numba
    step = max(1, min(numba.get_num_threads(), n))
    if step == 1:
        work(0, 1)
        return
    # an empty range first: Numba compiles the kernel in this thread, not in the threads
    # below (which would wait for Numba's compiler lock where this thread holds it, as a
    # program's first call does, while this thread waits for them)
    work(n, 1)
    threads = [threading.Thread(target=work, args=(w, step)) for w in range(1, step)]
    for t in threads:
        t.start()
    work(0, step)
    for t in threads:
        t.join()
