"""Imported first by every kernels module that defines ``@njit(cache=True)`` functions.

Why: Numba would keep their machine code in this package's ``__pycache__`` (shared by every
process of the installation, unlocked, impossible in a read-only install). This puts
jitgraph's locator in place first, so it lives under ``JITGRAPH_CACHE_DIR`` behind the disk
cache's locks and checksums instead (``jitgraph.compiler.helper_cache``).
"""
from jitgraph.compiler.helper_cache import install

install()
