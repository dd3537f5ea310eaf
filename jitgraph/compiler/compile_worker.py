"""A compile worker: a second process that compiles generated kernels into the shared caches.

Started by ``compile_pool`` as ``python -m jitgraph.compiler.compile_worker``. It imports a
kernel's module through the same ``DiskCache`` (so the module file, its name and Numba's
cache entries are exactly the parent's), compiles it for the argument types the parent's
driver will pass, and lets Numba save the machine code; the parent's first call then loads
it from Numba's cache instead of compiling. Messages are pickled frames on stdin/stdout;
anything else the compile prints goes to stderr, so it cannot corrupt the protocol.
"""
from __future__ import annotations

import os
import pickle
import sys
import time


def numba_signature(arg_types):
    """``compile_pool``'s argument types (a dtype name for a flat C array, ``"size"`` for an
    int64 runtime size) as a Numba signature."""
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype
    return tuple(types.int64 if t == "size" else types.Array(from_dtype(np.dtype(t)), 1, "C")
                 for t in arg_types)


def compile_kernel(cache_dir: str, key_extra: str, source: str, name: str, arg_types,
                   opt_level: int | None) -> None:
    """Import ``source`` from the disk cache at ``cache_dir`` and compile ``name`` in it."""
    from numba.core import config
    from .disk_cache import DiskCache
    module, _ = DiskCache(cache_dir).load_module(source, key_extra=key_extra)
    if opt_level is not None:
        config.OPT = type(config.OPT)(opt_level)
    getattr(module, name).compile(numba_signature(arg_types))


def main() -> int:
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                       # stray prints go to stderr, not into the protocol
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    import numba  # noqa: F401  (the imports a first compile would pay for, done before "ready")
    import jitgraph.kernels.fastmath  # noqa: F401
    import jitgraph.kernels.matmul  # noqa: F401
    import jitgraph.kernels.scalar  # noqa: F401
    from numba.core.registry import cpu_target
    cpu_target.target_context       # noqa: B018  (builds Numba's CPU target now)
    pickle.dump(("ready", os.getpid()), proto_out)
    proto_out.flush()
    while True:
        try:
            job = pickle.load(proto_in)
        except EOFError:
            return 0
        t0 = time.perf_counter()
        try:
            compile_kernel(*job)
            reply = ("ok", time.perf_counter() - t0)
        except BaseException as e:  # the parent compiles this kernel itself and reports
            reply = ("error", f"{type(e).__name__}: {e}"[:2000])
        pickle.dump(reply, proto_out)
        proto_out.flush()


if __name__ == "__main__":
    sys.exit(main())
