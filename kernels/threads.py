"""Work split over Python threads, for hand-written kernels that release the GIL (``nogil``):
a parallel loop that costs no ``prange`` compilation (seconds per kernel)."""
from __future__ import annotations


def run_split(work, n: int) -> None:
    """Run ``work(start, step)`` on up to Numba's thread count of Python threads (the kernels
    release the GIL): a parallel loop that costs no ``prange`` compilation. The threads live
    for one call only: a process with other threads running forks no compile workers."""
    import threading

    import numba
    step = max(1, min(numba.get_num_threads(), n))
    if step == 1:
        work(0, 1)
        return
    work(n, 1)          # an empty range: compiles here, not in several threads at once
    threads = [threading.Thread(target=work, args=(w, step)) for w in range(1, step)]
    for t in threads:
        t.start()
    work(0, step)
    for t in threads:
        t.join()
