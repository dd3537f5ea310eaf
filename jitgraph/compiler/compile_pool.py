"""Compile a program's new kernels on several cores at once.

Numba compiles one function at a time per process (its compiler lock), and a cold training
step is mostly Numba compiling its kernels. So while this process compiles kernels from the
front of the list, worker processes (``compile_worker``) take kernels from the back, compile
them into the same disk caches, and this process's first call loads their machine code from
Numba's cache. Results are identical to compiling here: the same module file, the same
Numba cache entry, the same optimisation level.

Workers start on the first program with two or more new kernels and stay for the life of
the process (an idle worker costs memory, not time). ``JITGRAPH_COMPILE_WORKERS=N`` sets
how many (0: compile everything in this process); by default one fewer than the cores this
process may use, at most 3, and none under an MPI launcher (every rank already has a core).
A worker that fails or dies only means this process compiles that kernel itself.
"""
from __future__ import annotations

import atexit
import collections
import os
import pickle
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

ENV = "JITGRAPH_COMPILE_WORKERS"
MIN_KERNELS = 2                 # fewer new kernels than this: not worth a worker round trip
WAIT_S = 300.0                  # the longest this process waits for a worker's kernel
_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")

STATS = {"worker_compiles": 0, "worker_errors": 0, "local_compiles": 0, "workers_started": 0}

_cond = threading.Condition()
_batch_lock = threading.Lock()
_workers: list["_Worker"] = []
_current: "_Batch | None" = None
_started = False
_atexit_registered = False


def workers_wanted() -> int:
    """How many compile workers this process uses (see the module docstring)."""
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


class _Batch:
    """The kernels of one program still to compile, shared by this process and the workers."""

    def __init__(self, jobs: Sequence[tuple]) -> None:
        self.jobs = collections.deque(jobs)
        self.in_flight = 0


class _Worker:
    """One worker process and the thread that feeds it jobs from the current batch."""

    def __init__(self) -> None:
        import jitgraph
        root = os.path.dirname(os.path.dirname(os.path.abspath(jitgraph.__file__)))
        env = dict(os.environ, **{ENV: "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                                  "MKL_NUM_THREADS": "1"})
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "")
                                                      .split(os.pathsep) if p])
        from numba.core import config
        if config.CACHE_DIR:
            env["NUMBA_CACHE_DIR"] = str(config.CACHE_DIR)
        self.proc = subprocess.Popen([sys.executable, "-m", "jitgraph.compiler.compile_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=root)
        self.alive, self.ready = True, False
        self.thread = threading.Thread(target=self._feed, name="jitgraph-compile-feeder",
                                       daemon=True)
        self.thread.start()

    def _request(self, message: Any) -> Any:
        if message is not None:
            pickle.dump(message, self.proc.stdin)
            self.proc.stdin.flush()
        return pickle.load(self.proc.stdout)

    def _feed(self) -> None:
        try:
            if self._request(None)[0] != "ready":
                raise RuntimeError("compile worker did not start")
        except Exception:
            self.stop()
            return
        with _cond:
            self.ready = True
            _cond.notify_all()
        while True:
            with _cond:
                while self.alive and (_current is None or not _current.jobs):
                    _cond.wait()
                if not self.alive:
                    return
                batch = _current
                job = batch.jobs.pop()          # from the back: this process takes the front
                batch.in_flight += 1
            try:
                status, _ = self._request(job)
            except Exception:                    # the worker died: this process compiles it
                status = "dead"
            with _cond:
                batch.in_flight -= 1
                if status == "ok":
                    STATS["worker_compiles"] += 1
                else:
                    STATS["worker_errors"] += 1
                _cond.notify_all()
            if status == "dead":
                self.stop()
                return

    def stop(self) -> None:
        with _cond:
            self.alive = False
            _cond.notify_all()
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            self.proc.wait(timeout=2)
        except Exception:
            self.proc.kill()


def ensure_started(wait_s: float = 0.0) -> int:
    """Start the compile workers now rather than at the first program with new kernels
    (e.g. before a batch of first calls), waiting up to ``wait_s`` seconds for them to be
    ready. Returns how many are running."""
    global _started, _atexit_registered
    with _cond:
        if not _started:
            _started = True
            for _ in range(workers_wanted()):
                try:
                    _workers.append(_Worker())
                    STATS["workers_started"] += 1
                except Exception:   # no subprocesses here: compile in this process
                    break
            if _workers and not _atexit_registered:
                atexit.register(shutdown)
                _atexit_registered = True
        deadline = time.monotonic() + wait_s
        while any(w.alive and not w.ready for w in _workers) and time.monotonic() < deadline:
            _cond.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
        return sum(w.alive for w in _workers)


def shutdown() -> None:
    """Stop the workers (at exit; the next program with new kernels starts them again)."""
    global _started
    for w in list(_workers):
        w.stop()
    _workers.clear()
    _started = False


def precompile(jobs: Sequence[tuple], compile_here) -> None:
    """Compile ``jobs`` (``compile_worker.compile_kernel`` arguments), this process taking
    them in order with ``compile_here(job)`` while the workers take them from the end; returns
    when every job is compiled or has failed (then the first call compiles it, and reports)."""
    global _current
    if len(jobs) < MIN_KERNELS or not _batch_lock.acquire(blocking=False):
        return                      # another thread is compiling a batch: compile lazily
    try:
        if not ensure_started():
            return
        batch = _Batch(jobs)
        with _cond:
            _current = batch
            _cond.notify_all()
        while True:
            with _cond:
                if not batch.jobs:
                    break
                job = batch.jobs.popleft()
            try:
                compile_here(job)
                STATS["local_compiles"] += 1
            except Exception:       # the first call compiles it again and reports the error
                pass
        deadline = time.monotonic() + WAIT_S
        with _cond:
            while batch.in_flight and time.monotonic() < deadline:
                _cond.wait(timeout=1.0)
            stuck = batch.in_flight > 0
            _current = None
        if stuck:                   # a worker hangs: stop them all, compile lazily here
            shutdown()
    finally:
        _batch_lock.release()
