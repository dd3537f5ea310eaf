"""``python -m jitgraph.bench FILE.py:FUNCTION [--reps N] [--json OUT] [--roofline PNG]``: the
command line of ``jitgraph.profiler`` under a shorter name. ``FUNCTION()`` returns
``(f, args[, kwargs])``; prints ``jitgraph.benchmark`` of ``f(*args, **kwargs)`` and, for a jit
function, its per-step profile."""
from __future__ import annotations

from .profiler import main

__all__ = ["main"]

if __name__ == "__main__":
    main(prog="python -m jitgraph.bench")
