"""STREAM-style bandwidth kernels for ``jitgraph.machine_peaks``: copy and triad over all
cores (McCalpin's STREAM, the usual measure of attainable memory bandwidth)."""
from __future__ import annotations

from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit, prange


@njit(cache=True, parallel=True, nogil=True)
def stream_copy(a, b):
    """b = a: reads and writes ``a.nbytes`` each."""
    for i in prange(a.size):
        b[i] = a[i]


@njit(cache=True, parallel=True, nogil=True)
def stream_triad(a, b, c, s):
    """a = b + s * c: reads two arrays, writes one."""
    for i in prange(a.size):
        a[i] = b[i] + s * c[i]
