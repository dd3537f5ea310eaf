"""Host steps: a primitive without a code-generation rule runs between kernels, in Python.

Most run their NumPy reference implementation. Control flow is the exception: a ``cond``,
``scan`` or ``while`` node runs the compiler's loop around its sub-programs, compiled once,
which ``compiler/loops.py`` registers in ``HOST_LOWERINGS`` (the primitives themselves know
nothing of the compiler).
"""
from __future__ import annotations

from typing import Callable

from ..core import Node, run_impl

# primitive -> builder(node) -> the callable a host step runs (filled by compiler/loops.py)
HOST_LOWERINGS: dict = {}


def host_impl(node: Node) -> Callable:
    """The callable a program's host step for ``node`` runs: arrays in, array(s) out."""
    lowering = HOST_LOWERINGS.get(node.prim)
    if lowering is not None:        # control flow: a loop around compiled sub-programs
        return lowering(node)

    def call(*arrays):
        res = run_impl(node.prim, arrays, node.params, [o.aval for o in node.outs])
        return res[0] if len(res) == 1 else tuple(res)
    return call
