"""Tracebacks that show the user's code: jitgraph's own frames are cut where an error leaves it.

A shape error inside a jitted function passes through a dozen frames of tracing and compiling
before it reaches the user; none of them helps. Every API boundary (``jit`` calls, the
transforms, ``jnp`` functions) re-raises an error with those frames removed, as JAX's
``jax_traceback_filtering`` does: what is left is the user's frames, plus the boundary that
re-raised it. Nested boundaries filter again, which changes nothing.

``jitgraph.config.update("traceback_filtering", "off")`` (``JITGRAPH_TRACEBACK_FILTERING=off``,
or JAX's name ``jax_traceback_filtering``) keeps every frame, for debugging jitgraph itself.
"""
from __future__ import annotations

import functools
import os
import types
from typing import Any, Callable, TypeVar

from . import config

_HERE = os.path.dirname(os.path.abspath(__file__))
# the package, and the hand-written kernels beside it in a source checkout
# (installed, they are the package's ``kernels`` folder)
_INTERNAL = (_HERE + os.sep, os.path.join(os.path.dirname(_HERE), "kernels") + os.sep)
NOTE = ("(jitgraph removed its internal frames from this traceback; "
        "JITGRAPH_TRACEBACK_FILTERING=off shows them)")

F = TypeVar("F", bound=Callable[..., Any])


def is_internal(filename: str) -> bool:
    """Whether a frame's file belongs to jitgraph."""
    return filename.startswith(_INTERNAL)


def without_internal_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` with every jitgraph frame left out (the others in their order)."""
    kept = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def filtered(err: BaseException) -> BaseException:
    """``err``, its traceback filtered unless filtering is off: re-raise it with
    ``raise filtered(err)`` in an ``except`` block of a public entry point."""
    if config.read("traceback_filtering") == "off":
        return err
    tb = err.__traceback__
    short = without_internal_frames(tb)
    if short is not tb and not getattr(err, "_jg_filtered", False):
        try:
            err._jg_filtered = True
            if hasattr(err, "add_note"):        # Python 3.11+
                err.add_note(NOTE)
        except AttributeError:                  # pragma: no cover  (no __dict__)
            pass
    return err.with_traceback(short)


def api_boundary(fn: F) -> F:
    """Wrap a public function so that errors leaving it carry the user's frames only."""
    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            raise filtered(err)
    return boundary  # type: ignore[return-value]
