"""Error types and the user's own source line, so messages point at user code, not jitgraph."""
from __future__ import annotations

import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ShapeError(ValueError):
    """An operation got operands whose shapes do not fit together."""


class AxisError(ShapeError, IndexError):
    """An axis outside an array's dimensions: a ShapeError, and an IndexError as the Array API
    standard asks (NumPy's ``AxisError`` is both a ValueError and an IndexError too)."""


class ConcretizationError(TypeError):
    """A traced value was used where Python needs a concrete value (``if``, ``bool()``, ``float()``)."""


class LeakedTracerError(RuntimeError):
    """A traced value escaped the function being traced and was used later."""


_INTERNAL_CODE: dict = {}   # id(code) -> (code, whether it belongs to jitgraph or frozen imports)


def user_frame(skip: int = 1) -> tuple[str, int, str] | None:
    """(filename, lineno, function) of the innermost frame outside the jitgraph package.

    Every traced operation records one, so the package test is memoized per code object (by
    id: hashing a code object hashes its bytecode)."""
    f = sys._getframe(skip)
    internal = _INTERNAL_CODE
    while f is not None:
        code = f.f_code
        hit = internal.get(id(code))
        if hit is None or hit[0] is not code:
            fn = code.co_filename
            hit = internal[id(code)] = (code, fn.startswith(_PKG_DIR) or fn.startswith("<frozen"))
        if not hit[1]:
            return code.co_filename, f.f_lineno, code.co_name
        f = f.f_back
    return None


def where(frame: tuple[str, int, str] | None) -> str:
    if frame is None:
        return "<unknown location>"
    fn, line, func = frame
    return f"{fn}:{line} (in {func})"


class CompileError(RuntimeError):
    """Numba rejected generated code: a jitgraph bug, reported with the kernel that failed."""
