"""The compiled lowerings of fused primitives that run hand-written kernels as steps of their
own, installed from each registered ``rewrite.FusedOp`` record: its ``"host"`` lowerings
(``node, one_blas_thread -> callable``, the host step on either backend; attention's tiled
online-softmax kernels, linear cross-entropy's chunked ones) into ``host.HOST_LOWERINGS``, as
control flow's are, the compile jobs of the kernels those steps run (``"host_kernels"``:
``node -> [(module, name, argument types)]``) into ``host.HOST_KERNEL_JOBS``, and its
``"cuda"`` lowerings (``fits``/``lines``) into ``host.DEVICE_CALLS``. A fused op's module
declares them; nothing here names one. The hand-written kernels' parallel loops
(``kernels.threads.run_rows``) run on Numba's threads, through ``threaded.row_pool``'s
launchers: one pool for generated and hand-written kernels; the kernels shipped as LLVM IR
(``prebuilt``) are compiled from it, the others by Numba."""
from __future__ import annotations

import functools

from ..rewrite import FusedOp, on_fused_op
from ..kernels import threads as kernel_threads  # type: ignore[attr-defined]
from .host import DEVICE_CALLS, HOST_KERNEL_JOBS, HOST_LOWERINGS, one_blas_thread
from .prebuilt import object_code
from .threaded import ROW_OBJECTS, row_pool


def install(fused: FusedOp) -> None:
    """Make ``fused``'s primitives compile: its lowerings into the host and device tables."""
    for prim, build in fused.lowerings.get("host", {}).items():
        HOST_LOWERINGS[prim] = functools.partial(build, one_blas_thread=one_blas_thread)
    HOST_KERNEL_JOBS.update(fused.lowerings.get("host_kernels", {}))
    DEVICE_CALLS.update(fused.lowerings.get("cuda", {}))


kernel_threads.set_row_pool(row_pool)
ROW_OBJECTS.append(object_code)     # their shipped IR first (``prebuilt``), then Numba
on_fused_op(install)
