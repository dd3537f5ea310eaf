"""Error types and the user's own source line, so messages point at user code, not jitgraph."""
from __future__ import annotations

import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ShapeError(ValueError):
    """An operation got operands whose shapes do not fit together."""


class ConcretizationError(TypeError):
    """A traced value was used where Python needs a concrete value (``if``, ``bool()``, ``float()``)."""


class LeakedTracerError(RuntimeError):
    """A traced value escaped the function being traced and was used later."""


def user_frame(skip: int = 1) -> tuple[str, int, str] | None:
    """(filename, lineno, function) of the innermost frame outside the jitgraph package."""
    f = sys._getframe(skip)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR) and not fn.startswith("<frozen"):
            return fn, f.f_lineno, f.f_code.co_name
        f = f.f_back
    return None


def where(frame: tuple[str, int, str] | None) -> str:
    if frame is None:
        return "<unknown location>"
    fn, line, func = frame
    return f"{fn}:{line} (in {func})"


class CompileError(RuntimeError):
    """Numba rejected generated code: a jitgraph bug, reported with the kernel that failed."""
