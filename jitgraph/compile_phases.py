"""Where a compile spends its time: trace, autodiff, optimise, fuse, generate, load, Numba,
LLVM.

Why: a cold first call is several stages deep (tracing calls the autodiff rules, which call
the passes; loading compiles kernels), so one total hides which stage to make cheaper. Each
stage runs under ``phase(name)``; a phase's time is its own, without the phases nested in it
(autodiff inside a trace counts as autodiff only), and it is added to every ``recording()``
open on this thread. ``JITGRAPH_LOG=compiles`` prints the split of each compiled program.
"""
from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["PHASES", "phase", "recording", "timed", "split_text"]

# the stages in pipeline order (``numba``: compiling kernels ahead of the first call, and the
# first call itself, where Numba compiles what was not compiled ahead; ``llvm``: the loop
# kernels ``compiler/loop_ir.py`` compiles without Numba, and the launchers)
PHASES = ("trace", "autodiff", "optimise", "fuse", "generate", "load", "numba", "llvm")

_local = threading.local()
F = TypeVar("F", bound=Callable)


def _state() -> tuple[list, list]:
    if not hasattr(_local, "stack"):
        _local.stack, _local.records = [], []
    return _local.stack, _local.records


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` (its own time: nested phases are subtracted)."""
    stack, records = _state()
    if not records:             # nothing records: no clock, no stack
        yield
        return
    frame = [0.0]               # seconds of the phases nested in this one
    stack.append(frame)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - t0
        stack.pop()
        if stack:
            stack[-1][0] += elapsed
        own = elapsed - frame[0]
        for rec in records:
            rec[name] = rec.get(name, 0.0) + own


def timed(name: str) -> Callable[[F], F]:
    """Decorator: every call of the function is stage ``name``."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if not _state()[1]:         # nothing records (eager code): a plain call
                return fn(*args, **kwargs)
            with phase(name):
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]
    return wrap


@contextmanager
def recording() -> Iterator[dict]:
    """A dict that collects the seconds of every phase run on this thread inside the block."""
    _, records = _state()
    rec: dict = {}
    records.append(rec)
    try:
        yield rec
    finally:     # by identity: two records may hold equal times
        del records[next(i for i, r in enumerate(records) if r is rec)]


def split_text(seconds: dict) -> str:
    """``trace 0.412s, autodiff 0.120s, ...`` in pipeline order (stages that did not run: 0)."""
    return ", ".join(f"{p} {seconds.get(p, 0.0):.3f}s" for p in PHASES)
