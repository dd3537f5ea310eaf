"""The compiled lowerings of fused primitives that run hand-written kernels as steps of their
own, installed from each registered ``rewrite.FusedOp`` record: its ``"host"`` lowerings
(``node, one_blas_thread -> callable``, the host step on either backend; attention's tiled
online-softmax kernels, linear cross-entropy's chunked ones) into ``host.HOST_LOWERINGS``, as
control flow's are, and its ``"cuda"`` lowerings (``fits``/``lines``) into
``host.DEVICE_CALLS``. A fused op's module declares them; nothing here names one."""
from __future__ import annotations

import functools

from ..rewrite import FusedOp, on_fused_op
from .host import DEVICE_CALLS, HOST_LOWERINGS, one_blas_thread


def install(fused: FusedOp) -> None:
    """Make ``fused``'s primitives compile: its lowerings into the host and device tables."""
    for prim, build in fused.lowerings.get("host", {}).items():
        HOST_LOWERINGS[prim] = functools.partial(build, one_blas_thread=one_blas_thread)
    DEVICE_CALLS.update(fused.lowerings.get("cuda", {}))


on_fused_op(install)
