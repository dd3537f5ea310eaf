"""The compiler's mutable state, in one object with one lifetime: the process.

Everything the compiler remembers between compiles lives on ``STATE``: the disk cache it
writes to, the fingerprint of the code generated modules call, which helper kernels are
loaded, the native bundles still being written, compile-pool counters and what the patches
of Numba's internals installed. Nothing else in ``jitgraph/compiler`` keeps module-level
mutable values (constants and locks aside), so a test or a long-lived process can see it
all, and ``reset`` returns it to a fresh process's state (except what Numba itself loaded).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CompilerState:
    """What the compiler keeps between compiles (see the module docstring)."""
    # the on-disk cache of generated modules (``pipeline.disk_cache``), made on first use
    disk_cache: Any = None
    # hash of jitgraph's version and every source file of the package, part of every cache
    # key; computed once
    fingerprint: str | None = None
    # threads writing native bundles, joined before forking compile workers
    bundle_threads: list = field(default_factory=list)
    # compile_pool: kernels compiled by workers and locally, and workers that failed;
    # loop_objects: loop kernels loop_ir or LLVM failed on (Numba compiled them)
    compile_stats: dict = field(default_factory=lambda: {
        "worker_compiles": 0, "local_compiles": 0, "worker_failures": 0,
        "loop_ir_failures": 0})
    # loops: threadpoolctl's BLAS selection, looked up once ([None]: unavailable)
    blas_selection: list = field(default_factory=list)
    # numba_patches / native: what was installed into Numba and the LLVM engines kept alive
    patches: dict = field(default_factory=dict)
    # disk_cache: private temporary directories modules were compiled in, removed at exit
    private_tmpdirs: list = field(default_factory=list)
    # disk_cache: generated module name -> guard(dispatcher), only while that module executes
    caching_hooks: dict = field(default_factory=dict)
    # helper_cache: guard(dispatcher) for the kernels' helpers, set once their locator is in
    helper_guard: Any = None
    # prebuilt: the object code of kernels shipped as LLVM IR, by job key (None: not usable
    # here), and the lock loading them (a child forked while it was held gets a new one)
    prebuilt_objects: dict = field(default_factory=dict)
    prebuilt_lock: Any = field(default_factory=threading.Lock)
    lock: Any = field(default_factory=threading.RLock)

    def reset_disk_cache(self) -> None:
        """Forget the disk cache object (the next compile opens the directory again)."""
        self.disk_cache = None


STATE = CompilerState()
