"""Device arrays: jitgraph's handle on GPU memory, and moving pytrees between host and device.

A ``DeviceArray`` owns one flat, contiguous Numba device buffer plus a shape. It is what a
``jit(f, device="cuda")`` function returns and what ``device_put`` makes; CuPy and PyTorch read
it without a copy (``__cuda_array_interface__``, ``__dlpack__``), and ``np.asarray`` copies it
to the host. Like a JAX array it is immutable from Python; a function that donates it
(``donate_argnums``) may update its memory in place, after which it is deleted.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) "device" memory is host memory and
the same code runs, so CI can test all of it without a GPU.
"""
from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, NamedTuple

import numpy as np

from . import dtypes
from .cuda_driver import (CudaUnavailableError, buffer_address, cuda_api, cuda_or_reason, driver,
                          simulator)
from .targets import target_named
from .tree import tree_map

__all__ = ["CudaUnavailableError", "DeviceArray", "Device", "cuda_api", "device_get",
           "device_put", "devices", "simulator"]


class Device(NamedTuple):
    platform: str                # "cpu" | "cuda"
    id: int
    name: str
    compute_capability: tuple = ()

    def __str__(self) -> str:
        numbered = target_named(self.platform).capabilities.device_arrays    # (the CPU is one)
        return f"{self.platform}:{self.id}" if numbered else self.platform


def devices() -> list[Device]:
    """What jitgraph can compile for here: the CPU, then each usable CUDA device."""
    out = [Device("cpu", 0, "cpu")]
    cuda, _ = cuda_or_reason()
    if cuda is None:
        return out
    if simulator():
        return out + [Device("cuda", 0, "CUDA simulator", compute_capability())]
    for i, g in enumerate(cuda.gpus):
        with g:
            name = cuda.get_current_device().name
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(Device("cuda", i, name, tuple(cuda.get_current_device().compute_capability)))
    return out


def compute_capability() -> tuple:
    """(major, minor) of the current device; the simulator reports what it emulates."""
    cuda = cuda_api()
    if simulator():
        return tuple(cuda.current_context().device.compute_capability)
    return tuple(cuda.get_current_device().compute_capability)


def _on_host(device: Any, what: str) -> bool:
    """Whether the registered target ``device`` (a name, an alias or a ``Device``) keeps its
    arrays on the host (its capabilities), rather than in device memory."""
    return not target_named(device, f"{what}: unknown device").capabilities.device_arrays


# ---------------------------------------------------------------- the array type
class DeviceArray:
    """An array in GPU memory (see the module docstring)."""

    __slots__ = ("_buf", "shape", "dtype", "_owned", "__weakref__")
    __array_priority__ = 100

    def __init__(self, buf, shape, owned: bool = False, dtype: np.dtype | None = None):
        self._buf = buf                   # flat contiguous numba device array, or None if deleted
        self.shape = tuple(shape)
        self.dtype = np.dtype(buf.dtype) if dtype is None else dtype   # (given: call paths)
        self._owned = owned               # from ``alloc``: its memory returns to the pool

    def __del__(self):
        buf = self._buf
        if buf is not None and self._owned:
            try:
                _DRIVER.release(buf, dtypes.storage(self.dtype))
            except Exception:         # interpreter shutdown: the pool may be gone
                pass

    # -- metadata
    @property
    def device(self) -> str:
        return "cuda:0"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def is_deleted(self) -> bool:
        return self._buf is None

    def buffer(self):
        """The flat Numba device array (raises if the array was donated)."""
        if self._buf is None:
            raise RuntimeError(
                f"this {self.dtype}{list(self.shape)} device array was donated to a jitted "
                "function (donate_argnums) and its memory now holds that function's result; "
                "use the returned arrays instead")
        return self._buf

    def delete(self) -> None:
        """Forget the memory (it was donated: a result now owns it)."""
        self._buf = None

    def donate(self) -> None:
        """Deleted by a call it was donated to that did not keep its memory: the memory goes
        back to the pool (never to the driver: a free would synchronise)."""
        buf = self._buf
        self._buf = None
        if buf is not None and self._owned:
            _DRIVER.release(buf, dtypes.storage(self.dtype))

    # -- host transfer
    def __array__(self, dtype=None, copy=None):
        a = driver().to_host(self.buffer()).reshape(self.shape)
        if a.dtype != self.dtype:         # a 16-bit float's buffer holds its bits
            a = a.view(self.dtype)
        return a if dtype is None else a.astype(dtype, copy=False)

    def block_until_ready(self) -> "DeviceArray":
        """Wait until the kernels writing this array have finished (launches are asynchronous)."""
        self.buffer()
        driver().synchronize()
        return self

    def item(self):
        return np.asarray(self).item()

    def __float__(self) -> float:
        return float(np.asarray(self))

    def __int__(self) -> int:
        return int(np.asarray(self))

    def __repr__(self) -> str:
        if self._buf is None:
            return f"DeviceArray(<deleted>, shape={self.shape}, dtype={self.dtype})"
        body = np.array2string(np.asarray(self), separator=", ", prefix="DeviceArray(")
        return f"DeviceArray({body}, dtype={self.dtype}, device={self.device})"

    def __getitem__(self, idx):
        """Indexing copies to the host (as ``np.asarray(a)[idx]``)."""
        return np.asarray(self)[idx]

    def tolist(self):
        return np.asarray(self).tolist()

    def __neg__(self):
        return _op("neg")(self)

    # -- zero-copy protocols
    @property
    def __cuda_array_interface__(self) -> dict:
        ptr = buffer_pointer(self.buffer())
        # v3 "stream": a consumer orders itself after our stream (an event, not a sync)
        stream = None if simulator() else int(driver().stream)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (ptr, False),
                "strides": None, "version": 3, "stream": stream}

    def __dlpack__(self, stream=None, **kwargs):
        buf = self.buffer()
        if simulator():              # simulated device memory is host memory
            return buf._ary.reshape(self.shape).__dlpack__()
        try:
            import cupy
        except ImportError:
            raise RuntimeError("exporting a device array through DLPack needs CuPy "
                               "(pip install 'jitgraph[cuda]'); __cuda_array_interface__ "
                               "works without it") from None
        return cupy.asarray(self).__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return (1, 0) if simulator() else (2, 0)     # kDLCPU / kDLCUDA, device 0


# ---------------------------------------------------------------- memory pool
# The driver layer keeps it (``cuda_driver``: one stream, so reuse needs no event).
_DRIVER = driver()
def alloc(n: int, dtype):
    """A flat device buffer of ``n`` elements (recycled when one is free)."""
    return driver().alloc(n, dtype)


def release(buf) -> None:
    driver().release(buf)


def empty_cache() -> None:
    """Give the pooled device memory of dead arrays back to the driver."""
    driver().empty_cache()


def _binary(name: str, reflected: bool = False):
    if reflected:
        return lambda self, o: _op(name)(o, self)
    return lambda self, o: _op(name)(self, o)


# Arithmetic runs on the device: one small jitted kernel per operator and signature.
for _name in ("add", "sub", "mul", "truediv", "matmul"):
    setattr(DeviceArray, f"__{_name}__", _binary(_name))
    setattr(DeviceArray, f"__r{_name}__", _binary(_name, reflected=True))
DeviceArray.__pow__ = _binary("pow")


# ``jit`` (a layer above this module) registers itself here, so the operators compile with it
OPERATOR_COMPILER: list = []


@functools.lru_cache(maxsize=None)
def _op(name: str):
    import operator
    fn = getattr(operator, name)
    return OPERATOR_COMPILER[0](lambda *xs: fn(*xs), device="cuda")


def buffer_pointer(buf) -> int:
    """Address of a Numba device array's first element (a host address in the simulator)."""
    return buffer_address(buf)


def _from_interface(x):
    """A Numba device array on ``x``'s memory, from ``__cuda_array_interface__`` (no copy)."""
    cuda = cuda_api()
    cai = x.__cuda_array_interface__
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None and tuple(strides) != tuple(
            s * dtype.itemsize for s in _row_major(shape)) and int(np.prod(shape)) > 1:
        raise ValueError(f"a strided CUDA array {shape} (strides {tuple(strides)}) was passed; "
                         "pass a contiguous one (e.g. cupy.ascontiguousarray(x) or x.contiguous())")
    if not simulator():
        d = driver()
        d.wait_for_producer(cai.get("stream"))      # ordered after its producer: an event
        return cuda.as_cuda_array(x, sync=False)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    n = int(np.prod(shape, dtype=np.int64))
    ptr = cai["data"][0]
    if n == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    raw = (ctypes.c_char * (n * dtype.itemsize)).from_address(ptr)
    return FakeCUDAArray(np.frombuffer(raw, dtype=dtype).reshape(shape))


def _row_major(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def as_device_buffer(x, dtype: np.dtype, shape: tuple):
    """Flat device buffer holding argument ``x``: device arrays without a copy, host arrays
    copied in."""
    if type(x) is DeviceArray:
        return x.buffer()
    cuda_api()
    if hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray):
        return _from_interface(x).reshape(int(np.prod(shape, dtype=np.int64)))
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__") and \
            x.__dlpack_device__()[0] == 2:
        try:
            import cupy
        except ImportError:
            raise TypeError("a CUDA array that only speaks DLPack needs CuPy to be read without "
                            "a copy (pip install 'jitgraph[cuda]')") from None
        return _from_interface(cupy.from_dlpack(x)).reshape(int(np.prod(shape, dtype=np.int64)))
    a = np.ascontiguousarray(np.asarray(x, dtype=dtype)).reshape(-1)
    return driver().to_device(a.view(dtypes.storage(dtype)))   # (16-bit floats: their bits)


def leaf_signature(x):
    """The jit signature entry of a device-array leaf (``None`` if ``x`` is not one)."""
    if type(x) is DeviceArray:
        return (x.shape, x.dtype.char)
    cai = getattr(x, "__cuda_array_interface__", None) if not isinstance(x, np.ndarray) else None
    if cai is not None:
        return (tuple(cai["shape"]), np.dtype(cai["typestr"]).char)
    return None


def host_placeholders(tree: Any) -> Any:
    """The pytree with each device-array leaf replaced by a host array of its shape and dtype
    that holds no memory (what tracing needs; the values are never read)."""
    def sub(x):
        sig = leaf_signature(x)
        if sig is None:
            return x
        return np.broadcast_to(np.zeros((), dtypes.of_char(sig[1])), sig[0])
    return tree_map(sub, tree)


# ---------------------------------------------------------------- moving pytrees
def device_put(x: Any, device: str = "cuda") -> Any:
    """Copy a pytree of arrays to ``device``, as ``jax.device_put``.

    On ``"cuda"`` every leaf becomes a ``DeviceArray`` (one that is one already stays as it
    is); a ``jit(f, device="cuda")`` function takes them without copying. On ``"cpu"`` it is
    ``device_get``.

    Example (``"cpu"``, so that it runs without a GPU):

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> jitgraph.device_put({"w": np.ones(2)}, "cpu")
    {'w': array([1., 1.])}

    ```

    :param x: a pytree of arrays (NumPy arrays, Python numbers, device arrays).
    :param device: ``"cuda"`` (also ``"gpu"``, ``"cuda:0"``) or ``"cpu"``.
    :returns: a pytree of ``x``'s structure with the arrays on ``device``.
    :raises jitgraph.device.CudaUnavailableError: on ``"cuda"`` when no usable GPU (or CUDA
        simulator) is found; the message says why.
    """
    if _on_host(device, "device_put"):
        return device_get(x)
    cuda_api("device_put")
    d = driver()

    def put(a):
        if type(a) is DeviceArray:
            return a
        h = np.asarray(a)
        try:
            buf = d.to_device(dtypes.as_stored(h))      # (a 16-bit float's bits)
        except Exception as e:
            raise device_error(e, "device_put", h.nbytes) from None
        return DeviceArray(buf, h.shape, dtype=h.dtype)
    return tree_map(put, x)


def device_get(x: Any) -> Any:
    """Copy every device array in a pytree to the host, as ``jax.device_get``: ``DeviceArray``
    leaves (and CuPy arrays) become NumPy arrays; other leaves are returned as they are.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> jitgraph.device_get({"w": np.ones(2), "step": 3})
    {'step': 3, 'w': array([1., 1.])}

    ```

    :param x: a pytree.
    :returns: a pytree of ``x``'s structure with host arrays in place of device arrays.
    """
    def get(a):
        if type(a) is DeviceArray or (hasattr(a, "__cuda_array_interface__")
                                      and not isinstance(a, np.ndarray) and hasattr(a, "get")):
            return np.asarray(a) if type(a) is DeviceArray else a.get()
        return a
    return tree_map(get, x)


def device_error(e: Exception, what: str, nbytes: int | None = None) -> Exception:
    """A CUDA driver error as an exception that says what to do."""
    msg = str(e)
    if "OUT_OF_MEMORY" in msg.upper() or "out of memory" in msg:
        size = f" ({nbytes / 2**30:.2f} GiB)" if nbytes else ""
        return MemoryError(f"{what}: the GPU ran out of memory{size}: free device arrays you no "
                           "longer need (del them), use smaller batches, or run on the CPU "
                           f"(device='cpu'). CUDA said: {msg}")
    return RuntimeError(f"{what}: a CUDA call failed ({type(e).__name__}: {msg}). If a kernel "
                        "failed, the CUDA context may be unusable: restart the process.")
