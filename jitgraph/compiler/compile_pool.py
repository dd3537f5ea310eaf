"""Compile a program's new kernels on several cores at once.

Numba compiles one function at a time per process (its compiler lock), and a cold training
step is mostly Numba compiling its kernels. So when a program brings two or more new
kernels, this process forks compile workers: copies of itself that already have Numba
initialised and the kernel modules imported, so they start compiling at once (a worker
process started from scratch spends about a second importing before it can help, which on
two cores ate the whole gain). This process and the workers draw kernels from one pipe until
it is empty; each compiles into the same disk caches, and this process's first call loads
the workers' machine code from Numba's cache. Results are identical to compiling here: the
same module file, the same Numba cache entry, the same optimisation level.

A worker only compiles and then leaves with ``os._exit`` (no atexit handlers, no flushed
buffers, no BLAS or CUDA calls). Workers are used on Linux, when this process runs no other
Python threads (a lock another thread holds at the fork would stay held in the copy), and not
under an MPI launcher (every rank already has its core). ``JITGRAPH_COMPILE_WORKERS=N`` sets
how many; by default one fewer than the cores this process may use, at most 3; 0 turns them
off. A worker that fails or hangs only means this process compiles that kernel at its first
call.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from typing import Any, Callable, Sequence

from .settings import no_gc
from .state import STATE

ENV = "JITGRAPH_COMPILE_WORKERS"
MIN_KERNELS = 2                 # fewer new kernels than this: nothing to share
MAX_JOBS = 4096                 # job numbers go through a pipe, 2 bytes each: 8 KiB fits any pipe
WAIT_S = 60.0                   # the longest this process waits for a worker's last kernel
_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")

_batch_lock = threading.Lock()


def workers_wanted() -> int:
    """How many compile workers a program's new kernels get (see the module docstring)."""
    value = os.environ.get(ENV, "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            raise ValueError(f"{ENV}={value!r}: expected a whole number of worker processes "
                             "(0 turns compile workers off)") from None
    if any(os.environ.get(k) for k in _MPI_ENV):
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:          # not on Linux
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, 3))


def numba_signature(arg_types: Sequence[str]) -> tuple:
    """A kernel's argument types as the driver passes them as a Numba signature: a dtype name
    is a flat C-contiguous array of it, ``dtype/2C`` or ``dtype/2F`` a 2-D array of that
    order, ``"size"`` an int64 runtime size, ``"float"`` a Python float."""
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype

    def one(t: str):
        if t in ("size", "float"):
            return types.int64 if t == "size" else types.float64
        dtype, _, spec = t.partition("/")
        ndim, layout = (int(spec[0]), spec[1]) if spec else (1, "C")
        return types.Array(from_dtype(np.dtype(dtype)), ndim, layout)
    return tuple(one(t) for t in arg_types)


def _can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and \
        threading.active_count() == 1


def _initialise_numba() -> None:
    """Build Numba's typing and target contexts once, before the fork, instead of in every
    process at its first compile (about half a second each)."""
    from numba.core.registry import cpu_target

    with no_gc():
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()


def _take(fd: int) -> int | None:
    """The next job number from the shared pipe (reads of two bytes are atomic), or None."""
    b = os.read(fd, 2)
    return int.from_bytes(b, "little") if len(b) == 2 else None


def _fork() -> int:
    with warnings.catch_warnings():     # Python 3.12+ warns about forking with native threads
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _worker(fd: int, jobs: Sequence[Any], compile_one: Callable[[Any], None]) -> None:
    """In the forked copy: compile jobs until the pipe is empty, then leave at once."""
    code = 0
    try:
        while (i := _take(fd)) is not None:
            try:
                compile_one(jobs[i])
            except Exception:
                code = 1
    except BaseException:           # Ctrl-C and the like: stop at once
        code = 1
    finally:
        os._exit(code)


def _reap(pids: list[int], deadline: float) -> int:
    """Wait for the workers until ``deadline``, kill the rest; returns how many failed."""
    failed, left = 0, list(pids)
    while left:
        for pid in list(left):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:   # reaped elsewhere (SIGCHLD ignored): status unknown
                left.remove(pid)
                continue
            if done:
                left.remove(pid)
                failed += os.waitstatus_to_exitcode(status) != 0
        if left and time.monotonic() > deadline:
            _kill(left)
            return failed + len(left)
        if left:
            time.sleep(0.002)
    return failed


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def precompile(jobs: Sequence[Any], compile_one: Callable[[Any], None],
               numba: bool = True) -> bool:
    """Compile ``jobs`` with ``compile_one`` on this process and forked workers at once.
    Returns False, compiling nothing, when workers are not used (one job, workers off, another
    thread compiling, no fork here); the first call then compiles as usual. A job that fails
    is left to the first call too, which reports the error. ``numba``: a job may compile with
    Numba (its contexts are built before the fork; jobs for LLVM alone need none of it)."""
    jobs = list(jobs)[:MAX_JOBS]
    n = min(workers_wanted(), len(jobs) - 1)
    if len(jobs) < MIN_KERNELS or n <= 0 or not _can_fork() or \
            not _batch_lock.acquire(blocking=False):
        return False
    try:
        if numba:
            _initialise_numba()
        r, w = os.pipe()
        try:
            os.set_blocking(w, False)
            os.write(w, b"".join(i.to_bytes(2, "little") for i in range(len(jobs))))
        except BlockingIOError:     # a pipe smaller than the job list: nothing shared
            os.close(r)
            return False
        finally:
            os.close(w)
        sys.stdout.flush()
        sys.stderr.flush()
        pids = []
        try:
            for _ in range(n):
                pid = _fork()
                if pid == 0:
                    _worker(r, jobs, compile_one)
                pids.append(pid)
        except OSError:
            pass                    # fewer workers than asked: the rest is done here
        taken, t_last = 0, 0.0
        try:
            while (i := _take(r)) is not None:
                taken += 1
                t0 = time.monotonic()
                try:
                    compile_one(jobs[i])
                except Exception:   # the first call compiles it again and reports the error
                    pass
                t_last = max(t_last, time.monotonic() - t0)
        except BaseException:       # Ctrl-C: the workers go too, at once
            os.close(r)
            _kill(pids)
            raise
        os.close(r)
        failed = _reap(pids, time.monotonic() + max(WAIT_S, 5 * t_last))
        STATE.compile_stats["local_compiles"] += taken
        STATE.compile_stats["worker_failures"] += failed
        if not failed:
            STATE.compile_stats["worker_compiles"] += len(jobs) - taken
        return True
    finally:
        _batch_lock.release()
