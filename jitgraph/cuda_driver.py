"""The driver layer of jitgraph's CUDA path: every device allocation, host<->device copy,
synchronisation, kernel launch, library call, event and graph capture goes through one
``Driver``, on one stream jitgraph owns (or the caller's, given explicitly).

Why one layer:

* a cached step must cost one launch sequence and nothing else; that is checkable only where
  every operation passes one place: ``Driver.counts`` counts them, and ``counting()`` gives a
  block's difference (tests assert zero allocations, copies and synchronisations per cached
  step, and a launch count equal to the plan's);
* ordering against other libraries is one event wait on the producer's stream (CUDA array
  interface v3 names it), not a device synchronise, and kernels never depend on the legacy
  default stream's implicit ordering;
* CUDA graph capture needs every operation of a step on the capturing stream.

The pool: device memory of dead arrays, by (size, dtype), for the next buffer of that size,
so a training step allocates nothing (``cuMemAlloc`` is slow, and Numba's deferred
``cuMemFree`` synchronises the device every few frees). Reuse needs no event: every kernel
and copy of jitgraph runs on one stream, so the kernels that used a buffer finish before the
next user's kernels start.

Under Numba's CUDA simulator the same code runs (streams and events exist there); CUDA graphs
do not, so a capture records the launch sequence and a replay runs it again, which is what a
graph does (``capture_mode == "record"``): the runner's graph logic is tested in CI.
"""
from __future__ import annotations

import contextlib
import functools
import os
import warnings
import weakref
from dataclasses import dataclass, fields
from typing import Callable, Iterator

import numpy as np

__all__ = ["CudaUnavailableError", "Counts", "Driver", "counting", "cuda_api", "driver",
           "simulator"]


class CudaUnavailableError(RuntimeError):
    """``device="cuda"`` was asked for where no CUDA device (or simulator) can be used."""


@functools.lru_cache(maxsize=None)
def simulator() -> bool:
    """True when Numba's CUDA simulator is on (it must be set before numba is imported, so
    it cannot change in a process)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


@functools.lru_cache(maxsize=None)
def cuda_or_reason():
    try:
        from numba import cuda
    except Exception as e:           # numba without a CUDA target
        return None, f"numba.cuda cannot be imported ({type(e).__name__}: {e})"
    if simulator():
        return cuda, None
    if "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS" not in os.environ:
        try:   # small launches are the point of small programs: no warning on each one
            from numba.cuda import config as _config
        except ImportError:
            from numba.core import config as _config
        _config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    try:
        ok = cuda.is_available()
    except Exception as e:
        return None, f"the CUDA driver could not be initialised ({type(e).__name__}: {e})"
    if not ok:
        return None, "no CUDA GPU or driver was found"
    return cuda, None


def cuda_api(what: str = "jitgraph"):
    """``numba.cuda``, or a clear error saying what is missing and how to fix it."""
    cuda, reason = cuda_or_reason()
    if cuda is None:
        raise CudaUnavailableError(
            f"{what}: device='cuda' is not usable: {reason}. Install the CUDA extra "
            "(pip install 'jitgraph[cuda]', which brings numba-cuda and CuPy) on a machine with an "
            "NVIDIA GPU and driver, or set NUMBA_ENABLE_CUDASIM=1 before importing jitgraph to "
            "run kernels in Numba's (slow) CUDA simulator; device='cpu' needs neither.")
    return cuda


@dataclass
class Counts:
    """What the driver did (cumulative; ``counting()`` gives a block's difference)."""
    allocs: int = 0            # device memory from the driver (pool misses)
    pool_hits: int = 0         # buffers handed out again from the pool
    h2d: int = 0               # host -> device copies
    d2h: int = 0               # device -> host copies
    syncs: int = 0             # host waits (stream or device synchronise)
    launches: int = 0          # kernel launches
    library_calls: int = 0     # cuBLAS calls
    event_waits: int = 0       # our stream waiting on another stream's event
    captures: int = 0          # CUDA graphs captured
    graph_launches: int = 0    # CUDA graphs replayed

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                         for f in fields(self)})

    def copy(self) -> "Counts":
        return Counts(**{f.name: getattr(self, f.name) for f in fields(self)})


class RecordedGraph:
    """A captured launch sequence (the simulator's stand-in for a CUDA graph)."""

    def __init__(self):
        self.calls: list = []

    def __len__(self) -> int:
        return len(self.calls)


class CudaGraph:
    """An instantiated CUDA graph (``cuda.bindings.driver``); freed with its owner."""

    def __init__(self, cu, graph, exe):
        self._cu, self.graph, self.exe = cu, graph, exe

    def __del__(self):
        try:
            self._cu.cuGraphExecDestroy(self.exe)
            self._cu.cuGraphDestroy(self.graph)
        except Exception:        # interpreter shutdown
            pass


def _check(result, what: str):
    """A ``cuda.bindings`` call's ``(err, *values)`` as its values, or a clear error."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"jitgraph: {what} failed ({err!r})")
    return rest[0] if len(rest) == 1 else rest


def _destroy_partial_capture(cu, stream: int) -> None:
    """End a capture that failed part way and destroy the graph it had recorded (an ended
    capture returns one even when invalidated), so the stream is usable again and nothing
    leaks."""
    with contextlib.suppress(Exception):
        err, graph = cu.cuStreamEndCapture(stream)
        if graph is not None:
            cu.cuGraphDestroy(graph)


class Driver:
    """The one object jitgraph's CUDA path does device work through (see the module
    docstring). ``stream`` is jitgraph's own stream unless ``using(stream)`` gave another."""

    def __init__(self):
        self.counts = Counts()
        self.pool: dict = {}
        self._own_stream = None
        self._stream = None
        self._recording: RecordedGraph | None = None
        self._event = None
        self._warned: set = set()
        self.libraries: dict = {}       # per-driver library state (the cuBLAS handle)
        self._pointers: dict = {}       # id(buffer) -> (weak reference, device address)

    # ------------------------------------------------------------ streams
    @property
    def cuda(self):
        return cuda_api()

    @property
    def stream(self):
        s = self._stream
        if s is None:
            if self._own_stream is None:
                self._own_stream = self.cuda.stream()
            s = self._stream = self._own_stream
        return s

    @property
    def stream_handle(self) -> int:
        """The raw ``CUstream`` of ``stream`` (what a library is handed); 0 in the simulator."""
        return 0 if simulator() else int(self.stream)

    @contextlib.contextmanager
    def using(self, stream) -> Iterator[None]:
        """Run a block's device work on ``stream`` (a Numba, CuPy or PyTorch stream, or a raw
        ``CUstream`` handle as an int)."""
        prev = self._stream
        self._stream = as_numba_stream(stream)
        try:
            yield
        finally:
            self._stream = prev

    def wait_for_producer(self, stream_handle: int | None) -> None:
        """Order our stream after work queued on another stream so far (the producer of an
        input array, named by its ``__cuda_array_interface__``): an event, no host wait.
        The legacy default stream (1) orders itself with ours, a blocking stream."""
        if stream_handle is None or stream_handle in (0, 1) or simulator():
            return
        cuda = self.cuda
        if self._event is None:
            self._event = cuda.event(timing=False)
        other = cuda.external_stream(int(stream_handle))
        if int(other) == int(self.stream):
            return
        self._event.record(other)
        self._event.wait(self.stream)
        self.counts.event_waits += 1

    # ------------------------------------------------------------ memory
    def alloc(self, n: int, dtype):
        """A flat device buffer of ``n`` elements (a recycled one when the pool has it)."""
        free = self.pool.get((n, dtype))
        if free:
            self.counts.pool_hits += 1
            return free.pop()
        self.counts.allocs += 1
        return self.cuda.device_array(n, dtype, stream=self.stream)

    def release(self, buf, dtype: np.dtype | None = None) -> None:
        """Give a dead buffer back to the pool (``dtype``: its dtype, when the caller knows)."""
        key = (buf.size, np.dtype(buf.dtype) if dtype is None else dtype)
        free = self.pool.get(key)
        if free is None:
            self.pool[key] = [buf]
        else:
            free.append(buf)

    def empty_cache(self) -> None:
        self.pool.clear()

    def to_device(self, host: np.ndarray):
        """A new device buffer holding a contiguous host array."""
        self.counts.h2d += 1
        return self.cuda.to_device(host, stream=self.stream)

    def upload(self, buf, host: np.ndarray) -> None:
        """``buf[:] = host`` (an existing device buffer)."""
        self.counts.h2d += 1
        buf.copy_to_device(host, stream=self.stream)

    def to_host(self, buf) -> np.ndarray:
        """The buffer's contents on the host, once the work queued before has finished."""
        self.counts.d2h += 1
        self.counts.syncs += 1
        s = self.stream
        out = buf.copy_to_host(stream=s)
        s.synchronize()
        return out

    def pointer(self, buf) -> int:
        """The device address of a buffer, looked up once per buffer (a weak table: pooled
        buffers are asked for every call; the lookup builds a dict in Numba)."""
        hit = self._pointers.get(id(buf))
        if hit is not None and hit[0]() is buf:
            return hit[1]
        p = buffer_address(buf)
        key = id(buf)
        try:
            ref = weakref.ref(buf, lambda _, k=key, t=self._pointers: t.pop(k, None))
        except TypeError:             # not weakly referenceable
            return p
        self._pointers[key] = (ref, p)
        return p

    def synchronize(self) -> None:
        self.counts.syncs += 1
        self.stream.synchronize()

    # ------------------------------------------------------------ work
    def launch(self, kernel, grid, block, args: tuple) -> None:
        """``kernel[grid, block, stream](*args)``, recorded when a capture is in progress."""
        rec = self._recording
        if rec is not None:
            rec.calls.append((kernel, grid, block, args))
            return
        self.counts.launches += 1
        kernel[grid, block, self.stream](*args)

    def fill(self, buf, value) -> None:
        """Set every element of a flat device buffer (a kernel, no host round trip)."""
        from .kernels.cuda_util import fill_kernel, launch_config
        if buf.shape[0]:
            g, t = launch_config(buf.shape[0])
            self.launch(fill_kernel, g, t, (buf, buf.dtype.type(value)))

    def copy(self, dst, src) -> None:
        """``dst[:] = src`` for flat device buffers of one size and dtype (a kernel)."""
        from .kernels.cuda_util import copy_kernel, launch_config
        if dst.shape[0]:
            g, t = launch_config(dst.shape[0])
            self.launch(copy_kernel, g, t, (dst, src))

    def product(self, a_spec, b_spec, m: int, n: int, k: int, batch: int, alpha: float,
                beta: float, dtype, operands: str | None = None):
        """One call site's product, prepared once (``kernels.cuda_matmul.Product``);
        ``operands``: the 16-bit float type of both operands, multiplied with float32
        accumulation into a ``dtype`` (float32) result."""
        from .kernels.cuda_matmul import Product
        return Product(self, a_spec, b_spec, m, n, k, batch, alpha, beta, np.dtype(dtype),
                       operands)

    def __getattr__(self, name: str):
        """``D.<name>(*spec)``: a fused op's kernels for one call site, prepared once (what a
        ``rewrite.FusedOp`` record's ``driver`` declares: ``D.attention``)."""
        from .rewrite import driver_call
        prepare = driver_call(name) if not name.startswith("_") else None
        if prepare is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(prepare, self)

    def library_call(self, fn: Callable, *args) -> None:
        """A library call that queues work on our stream (cuBLAS); recorded in a capture."""
        rec = self._recording
        if rec is not None:
            rec.calls.append((fn, None, None, args))
            return
        self.counts.library_calls += 1
        fn(*args)

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------ graphs
    @property
    def capture_mode(self) -> str | None:
        """"cuda" (real CUDA graphs through ``cuda.bindings``), "record" (the simulator: the
        launch sequence is recorded and replayed) or None (no way to capture here)."""
        if simulator():
            return "record"
        try:
            from cuda.bindings import driver as _cu  # noqa: F401
        except ImportError:
            return None
        return "cuda"

    def capture(self, step: Callable[[], None]):
        """Capture what ``step()`` queues on our stream as a graph (nothing runs yet)."""
        mode = self.capture_mode
        if mode is None:
            raise RuntimeError("CUDA graph capture needs cuda-bindings (pip install cuda-bindings)")
        if mode == "record":
            self._recording = rec = RecordedGraph()
            try:
                step()
            finally:
                self._recording = None
            self.counts.captures += 1
            return rec
        from cuda.bindings import driver as cu
        h = int(self.stream)
        # Numba frees device memory lazily; a cuMemFree inside the capture would invalidate
        # it, so deallocations wait until the capture has ended
        with self.cuda.defer_cleanup():
            _check(cu.cuStreamBeginCapture(
                h, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                "cuStreamBeginCapture")
            try:
                step()
            except BaseException:
                _destroy_partial_capture(cu, h)
                raise
            graph = _check(cu.cuStreamEndCapture(h), "cuStreamEndCapture")
        try:
            exe = _check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except BaseException:
            with contextlib.suppress(Exception):
                cu.cuGraphDestroy(graph)
            raise
        self.counts.captures += 1
        return CudaGraph(cu, graph, exe)

    def replay(self, graph) -> None:
        """Launch a captured graph on our stream: one launch for the whole step."""
        self.counts.graph_launches += 1
        if isinstance(graph, RecordedGraph):
            s = self.stream
            for fn, grid, block, args in graph.calls:
                if grid is None:
                    fn(*args)
                else:
                    fn[grid, block, s](*args)
            return
        from cuda.bindings import driver as cu
        _check(cu.cuGraphLaunch(graph.exe, int(self.stream)), "cuGraphLaunch")


def as_numba_stream(stream):
    """A Numba stream for a Numba, CuPy or PyTorch stream object or a raw handle."""
    cuda = cuda_api()
    if stream is None:
        return None
    if hasattr(stream, "synchronize") and type(stream).__module__.startswith("numba"):
        return stream
    if simulator():
        return cuda.stream()      # the simulator runs every launch in order anyway
    handle = stream
    if hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    elif hasattr(stream, "cuda_stream"):       # torch.cuda.Stream
        handle = stream.cuda_stream
    elif hasattr(stream, "ptr"):               # cupy.cuda.Stream
        handle = stream.ptr
    return cuda.external_stream(int(handle))


_DRIVER: list = []


def driver() -> Driver:
    """The process's driver (made on first use)."""
    if not _DRIVER:
        _DRIVER.append(Driver())
    return _DRIVER[0]


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """``with counting() as c: ...``: afterwards ``c`` holds what the block made the driver
    do (allocations, copies, synchronisations, launches, library calls, graph launches)."""
    d = driver()
    before = d.counts.copy()
    out = Counts()
    try:
        yield out
    finally:
        diff = d.counts - before
        for f in fields(diff):
            setattr(out, f.name, getattr(diff, f.name))


def buffer_address(buf) -> int:
    """Address of a Numba device array's first element (a host address in the simulator)."""
    if simulator():
        return buf._ary.__array_interface__["data"][0]
    return buf.__cuda_array_interface__["data"][0]
