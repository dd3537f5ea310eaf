"""Host steps: a primitive without a code-generation rule runs between kernels, in Python.

Most run their NumPy reference implementation. Control flow is the exception: a ``cond``,
``scan`` or ``while`` node runs the compiler's loop around its sub-programs, compiled once,
which ``compiler/loops.py`` registers in ``HOST_LOWERINGS`` (the primitives themselves know
nothing of the compiler).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable

from ..core import Node, run_impl
from .state import STATE

# primitive -> builder(node) -> the callable a host step runs (filled by compiler/loops.py)
HOST_LOWERINGS: dict = {}

# primitive -> jobs(node): the hand-written kernels its host step runs, as compile jobs
# ``(module, name, argument types)`` (``compile_pool.numba_signature``'s), compiled ahead in the
# compile workers beside the program's generated kernels (filled by compiler/fused_calls.py)
HOST_KERNEL_JOBS: dict = {}

# primitive -> its CUDA lowering: ``fits(node)`` whether its kernels take the node, and
# ``lines(codegen, step)``, the driver lines launching them (filled by compiler/fused_calls.py);
# a step without one runs on the host, on copies
DEVICE_CALLS: dict = {}


def on_device(node: Node) -> bool:
    """Whether a CUDA program runs this host step's primitive with device kernels."""
    call = DEVICE_CALLS.get(node.prim)
    return call is not None and call.fits(node)


def host_impl(node: Node) -> Callable:
    """The callable a program's host step for ``node`` runs: arrays in, array(s) out."""
    lowering = HOST_LOWERINGS.get(node.prim)
    if lowering is not None:        # control flow: a loop around compiled sub-programs
        return lowering(node)

    def call(*arrays):
        res = run_impl(node.prim, arrays, node.params, [o.aval for o in node.outs])
        return res[0] if len(res) == 1 else tuple(res)
    return call


def one_blas_thread():
    """A context manager running BLAS on one thread (threadpoolctl, on the BLAS compiled
    products call): for loops of small products, and kernels that split work over threads
    of their own (each product then runs on its thread alone, not oversubscribing the
    cores). A null context where threadpoolctl is missing."""
    if not STATE.blas_selection:
        try:
            from ..kernels import blas  # type: ignore[attr-defined]
            blas.register()     # the BLAS compiled products call is loaded (NumPy's or SciPy's)
            from threadpoolctl import ThreadpoolController
            STATE.blas_selection.append(ThreadpoolController().select(user_api="blas"))
        except ImportError:
            STATE.blas_selection.append(None)
    selection = STATE.blas_selection[0]
    if selection is None or not selection.lib_controllers:
        return contextlib.nullcontext()
    return _OneBlasThread(selection.lib_controllers)


class _OneBlasThread:
    """BLAS on one thread for a block, then back to what each library had: threadpoolctl's
    own setters and getters, not its ``limit`` (which gathers every library's full
    description on entry: 60-90 us a call from a program's driver here, against 2 us).
    Counted across threads: the first block in sets one thread, the last one out restores the
    saved counts (two threads' programs overlapping must not leave BLAS on one thread)."""
    __slots__ = ("libs",)
    _lock = threading.Lock()
    _depth = 0
    _saved: list = []

    def __init__(self, libs):
        self.libs = libs

    def __enter__(self):
        cls = _OneBlasThread
        with cls._lock:
            if cls._depth == 0:
                cls._saved = [lib.get_num_threads() for lib in self.libs]
                for lib in self.libs:
                    lib.set_num_threads(1)
            cls._depth += 1

    def __exit__(self, *exc):
        cls = _OneBlasThread
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                for lib, n in zip(self.libs, cls._saved):
                    lib.set_num_threads(n)
