"""A cached GPU step costs one launch sequence and nothing else, counted at the driver layer
(``jitgraph.cuda_driver``) on Numba's CUDA simulator: no allocation, free, synchronisation or
copy; launches equal to the plan's (one graph launch once captured); donation by identity;
parameter pytrees of any nesting on jit's fast path; cuBLAS through a binding on the driver's
stream (a NumPy fake of CuPy's raw binding here, evaluated on the simulator's host memory)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest
from test_cuda_runtime import _colmajor_gemm, _sgd

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.fusion import MatmulStep
from jitgraph.cuda_driver import counting, driver
from jitgraph.kernels import cuda_matmul

F32 = np.float32
SIZES = (6, 8, 3)            # an MLP small enough for the simulator, with every step kind
BATCH = 4
WARMUP = {"direct": 2, "graph": 5}  # compile, fill the pool; graphs: each buffer set twice


def _data(seed=0):
    r = np.random.default_rng(seed)
    params = [(r.standard_normal((a, b)).astype(F32) * F32(0.3), np.zeros(b, F32))
              for a, b in zip(SIZES, SIZES[1:])]
    x = r.standard_normal((BATCH, SIZES[0])).astype(F32)
    y = np.eye(SIZES[-1], dtype=F32)[r.integers(0, SIZES[-1], BATCH)]
    return params, x, y


def _on_device(tree):
    return jitgraph.device_put(tree)


# ---------------------------------------------------------------- cuBLAS, faked
def _require_simulator() -> None:
    """The fakes below compute on device pointers from the host: on the simulator device
    memory is host memory; on a real GPU (JITGRAPH_CUDA_REAL=1) reading it would segfault."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("reads device memory from the host (a NumPy fake of cuBLAS): simulator only")


def _view(ptr: int, n: int, dtype) -> np.ndarray:
    raw = (ctypes.c_char * (n * np.dtype(dtype).itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype)


class FakeCupyCublas:
    """CuPy's raw cuBLAS names, evaluated with NumPy on host pointers (the simulator's device
    memory is host memory). Records what it was handed. As the real cuBLAS, ``setStream``
    puts the handle back on the default workspace pool: a GEMM run without the workspace
    jitgraph set is counted (``pool_gemms``), as one captured into a CUDA graph could
    allocate."""
    CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_POINTER_MODE_HOST = 0, 1, 0
    CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH = 0, 3

    def __init__(self):
        _require_simulator()
        self.streams, self.workspace, self.calls, self.math_modes = [], None, 0, []
        self.pool_gemms = 0
        self.ex_calls = []

    def setMathMode(self, handle, mode):
        self.math_modes.append(mode)

    def create(self):
        return 7

    def setStream(self, handle, stream):
        self.streams.append(stream)
        self.workspace = None                  # cublasSetStream: back to the default pool

    def setWorkspace(self, handle, ptr, nbytes):
        self.workspace = (ptr, nbytes)

    def setPointerMode(self, handle, mode):
        pass

    def _gemm(self, dtype, handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C,
              ldc, sc, batch):
        self.calls += 1
        self.pool_gemms += self.workspace is None
        t = {0: "N", 1: "T"}
        size = np.dtype(dtype).itemsize
        big = 1 << 12
        for i in range(batch):
            _colmajor_gemm(t[ta], t[tb], m, n, k, _view(alpha, 1, dtype)[0],
                           _view(A + i * sa * size, big, dtype), lda,
                           _view(B + i * sb * size, big, dtype), ldb, _view(beta, 1, dtype)[0],
                           _view(C + i * sc * size, big, dtype), ldc)

    def sgemmStridedBatched(self, *a):
        self._gemm(np.float32, *a)

    #: cudaDataType_t codes of GemmEx's 16-bit float operands, and the float32 result
    EX_TYPES = {2: np.float16, 14: "bfloat16"}

    def gemmStridedBatchedEx(self, handle, ta, tb, m, n, k, alpha, A, atype, lda, sa, B,
                             btype, ldb, sb, beta, C, ctype, ldc, sc, batch, compute, algo):
        """GemmEx as cuBLAS runs it here: 16-bit float operands (their bits widened to
        float32, exactly), float32 C, float32 accumulation (CUBLAS_COMPUTE_32F = 68)."""
        import ml_dtypes
        self.ex_calls.append((atype, btype, ctype, compute, algo))
        assert atype == btype and ctype == 0 and compute == 68, (atype, btype, ctype, compute)
        narrow = np.dtype(ml_dtypes.bfloat16 if atype == 14 else np.float16)
        self.calls += 1
        self.pool_gemms += self.workspace is None
        t = {0: "N", 1: "T"}
        big = 1 << 12
        for i in range(batch):
            wa = _view(A + i * sa * 2, big, np.uint16).view(narrow).astype(np.float32)
            wb = _view(B + i * sb * 2, big, np.uint16).view(narrow).astype(np.float32)
            _colmajor_gemm(t[ta], t[tb], m, n, k, _view(alpha, 1, np.float32)[0], wa, lda,
                           wb, ldb, _view(beta, 1, np.float32)[0],
                           _view(C + i * sc * 4, big, np.float32), ldc)

    def dgemmStridedBatched(self, *a):
        self._gemm(np.float64, *a)


class FakeNvmathCublas(FakeCupyCublas):
    """The same, under ``nvmath.bindings.cublas``'s names (checked against nvmath-python 1.0)."""

    class Operation:
        N, T = 0, 1

    class PointerMode:
        HOST = 0

    class Math:
        DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3

    def __getattr__(self, name):
        cupy_name = {"set_stream": "setStream", "set_workspace": "setWorkspace",
                     "set_pointer_mode": "setPointerMode", "set_math_mode": "setMathMode",
                     "sgemm_strided_batched": "sgemmStridedBatched",
                     "dgemm_strided_batched": "dgemmStridedBatched",
                     "gemm_strided_batched_ex": "gemmStridedBatchedEx"}[name]
        return getattr(self, cupy_name)


@contextlib.contextmanager
def _blas(lib):
    """Products through ``lib`` (a binding object, or None for the tiled kernel)."""
    d = driver()
    saved = d.libraries.pop("blas", None)
    d.libraries["blas"] = ((cuda_matmul.Blas("cupy", lib, d), "") if lib is not None else
                           (None, "the CUDA simulator has no cuBLAS"))
    try:
        yield lib
    finally:
        d.libraries.pop("blas")
        if saved is not None:
            d.libraries["blas"] = saved


@pytest.fixture(params=["cupy", "nvmath"])
def fake_blas(request):
    lib = FakeCupyCublas() if request.param == "cupy" else FakeNvmathCublas()
    d = driver()
    saved = d.libraries.pop("blas", None)
    d.libraries["blas"] = (cuda_matmul.Blas(request.param, lib, d), "")
    yield lib
    d.libraries.pop("blas")
    if saved is not None:
        d.libraries["blas"] = saved


# ---------------------------------------------------------------- a cached training step
@pytest.fixture(scope="module")
def runs():
    """SGD steps on the device, products through the faked cuBLAS: "direct" (launches) and
    "graph" (replayed CUDA graphs), the last two counted, beside the same steps on the CPU."""
    out = {}
    for mode in ("direct", "graph"):
        lib = FakeCupyCublas()
        with _blas(lib):
            step = jitgraph.jit(_sgd, device="cuda", donate_argnums=0,
                                cuda_graph=mode == "graph")
            cpu = jitgraph.jit(_sgd)
            pc, xh, yh = _data()
            p, x, y = _on_device(pc), _on_device(xh), _on_device(yh)
            losses, want = [], []
            for _ in range(WARMUP[mode]):
                p, loss = step(p, x, y)
                losses.append(float(loss))
                pc, lc = cpu(pc, xh, yh)
                want.append(float(lc))
            prog = step._entry((p, x, y), {})[0].program
            calls = lib.calls
            with counting() as c:
                for _ in range(2):
                    p, loss = step(p, x, y)     # the previous loss dies: its buffer returns
            losses.append(float(loss))
            for _ in range(2):
                pc, lc = cpu(pc, xh, yh)
            want.append(float(lc))
            out[mode] = dict(counts=c, program=prog, losses=losses, want=want,
                             params=jitgraph.device_get(p), cpu_params=pc,
                             library_calls=lib.calls - calls, streams=lib.streams,
                             workspace=lib.workspace, pool_gemms=lib.pool_gemms)
    return out


@pytest.mark.parametrize("mode", ["direct", "graph"])
def test_cached_step_allocates_copies_and_synchronises_nothing(runs, mode):
    c = runs[mode]["counts"]
    assert (c.allocs, c.h2d, c.d2h, c.syncs, c.event_waits) == (0, 0, 0, 0, 0), c
    assert c.pool_hits >= 2              # the loss, at least, from the pool each step


def test_launches_equal_the_plan(runs):
    c, prog = runs["direct"]["counts"], runs["direct"]["program"]
    products = sum(isinstance(s, MatmulStep) for s in prog.plan.steps)
    kernels = sum(prog.launch_counts.values())
    assert products == 5 and kernels >= 4       # 2 forward, 2 weight and 1 input gradient
    assert set(prog.launch_counts) | {s.name for s in prog.plan.steps
                                      if isinstance(s, MatmulStep)} == \
        {s.name for s in prog.plan.steps}
    assert (c.launches, c.library_calls) == (2 * kernels, 2 * products), c
    assert (c.graph_launches, c.captures) == (0, 0)


def test_graph_replay_is_one_launch_per_step(runs):
    r = runs["graph"]
    c = r["counts"]
    assert (c.launches, c.library_calls, c.graph_launches, c.captures) == (0, 0, 2, 0), c
    assert r["library_calls"] == 2 * 5            # the replays ran the five products each
    assert set(r["streams"]) == {driver().stream_handle}       # cuBLAS on the driver's stream
    assert r["workspace"][1] == cuda_matmul.Blas.WORKSPACE_BYTES   # preallocated: capturable
    assert r["pool_gemms"] == 0                   # no GEMM (captured ones included) on the pool


@pytest.mark.parametrize("mode", ["direct", "graph"])
def test_device_steps_match_the_cpu(runs, mode):
    r = runs[mode]
    np.testing.assert_allclose(r["losses"], r["want"], rtol=2e-5)
    for (w1, b1), (w2, b2) in zip(r["cpu_params"], r["params"]):
        np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b2, b1, rtol=1e-5, atol=1e-6)


def test_nested_parameters_take_the_fast_path(monkeypatch):
    """A list of (W, b) tuples and a dict of them: after the first call, no pytree flatten."""
    f = jitgraph.jit(lambda ps, x: sum(jnp.sum(x @ w + b) for w, b in ps["layers"]) + ps["s"])
    r = np.random.default_rng(0)
    ps = {"layers": [(r.standard_normal((3, 2)), r.standard_normal(2)) for _ in range(2)],
          "s": np.float64(1.5)}
    x = r.standard_normal((4, 3))
    want = f(ps, x)
    ps2 = dict(ps, s=np.asarray(1.5))          # a 0-d array leaf: still an array
    first = f(ps2, x)
    monkeypatch.setattr(type(f), "_call_slow", lambda *a: pytest.fail("slow path taken"))
    np.testing.assert_allclose(f(ps2, x), first)
    np.testing.assert_allclose(first, want)


def test_donated_buffer_no_output_keeps_goes_back_to_the_pool():
    f = jitgraph.jit(lambda a, b: jnp.sum(a * b), device="cuda", donate_argnums=0)
    a = _on_device(np.arange(8, dtype=F32))
    b = _on_device(np.ones(8, F32))
    own = jitgraph.jit(lambda v: v + 0.0, device="cuda")(a)     # an owned (pooled) array
    assert float(f(own, b)) == 28.0 and own.is_deleted()
    own = jitgraph.jit(lambda v: v + 0.0, device="cuda")(a)
    with counting() as c:
        f(own, b)
    assert c.allocs == 0                       # the donated memory served the next buffer


def test_donated_argument_passed_twice_is_copied_first():
    """Donation checked by identity: the same array as a donated and a read argument."""
    f = jitgraph.jit(lambda a, b: (a * 2.0 + b,), device="cuda", donate_argnums=0)
    a = _on_device(np.arange(5, dtype=F32))
    out, = f(a, a)
    np.testing.assert_allclose(np.asarray(out), np.arange(5) * 3.0)


def test_explicit_stream():
    from numba import cuda
    s = cuda.stream()
    f = jitgraph.jit(lambda v: jnp.exp(v) * 2.0, device="cuda", stream=s)
    x = _on_device(np.linspace(-1, 1, 7).astype(F32))
    np.testing.assert_allclose(np.asarray(f(x)), np.exp(np.linspace(-1, 1, 7)) * 2, rtol=1e-6)
    with pytest.raises(ValueError, match="stream="):
        jitgraph.jit(lambda v: v, stream=s)


def test_batched_product_with_epilogue_is_one_cublas_call(fake_blas):
    """alpha * op(A) @ op(B) + beta * C, batched: one strided-batched call on the driver's
    stream, with the workspace preallocated (what lets a graph capture hold it)."""
    f = jitgraph.jit(lambda a, b, c: 0.5 * jnp.einsum("bkm,bkn->bmn", a, b) - c, device="cuda")
    r = np.random.default_rng(4)
    a, b, c = (r.standard_normal(s) for s in ((3, 5, 2), (3, 5, 4), (3, 2, 4)))
    out = np.asarray(f(a, b, c))
    np.testing.assert_allclose(out, 0.5 * a.transpose(0, 2, 1) @ b - c, rtol=1e-12)
    assert fake_blas.calls == 1 and fake_blas.streams == [driver().stream_handle]
    assert fake_blas.workspace[1] == cuda_matmul.Blas.WORKSPACE_BYTES
    assert fake_blas.pool_gemms == 0


def test_the_workspace_is_set_again_after_every_stream_change(fake_blas):
    """cublasSetStream resets the handle's workspace to cuBLAS's pool: jitgraph sets its own
    again after each one, so no GEMM (captured or not) runs on the pool."""
    blas = driver().libraries["blas"][0]
    call = cuda_matmul.BlasCall("N", "N", 1, 1, 1, 1, 1, 1)
    for stream in (11, 12, 12, 11):                # (the simulator's streams are all 0)
        blas.gemm(stream, "float32", call, 0, 0, 0, 0, 0, 0, 0, 0, 0)   # batch 0: no data
    assert fake_blas.streams == [11, 12, 11]       # set only when it changes
    assert fake_blas.calls == 4 and fake_blas.pool_gemms == 0
    assert fake_blas.workspace == (cuda_matmul._ptr(blas.workspace), blas.WORKSPACE_BYTES)


class FakeCupyWithoutWorkspace(FakeCupyCublas):
    """CuPy's raw binding as it is: no ``setWorkspace``."""

    def __getattribute__(self, name):
        if name == "setWorkspace":
            raise AttributeError(name)
        return super().__getattribute__(name)


_FAKE_LIBCUBLAS = r"""
#include <stddef.h>
static void *last_handle, *last_ptr; static size_t last_bytes; static int calls;
int cublasSetWorkspace_v2(void *handle, void *ptr, size_t bytes) {
    last_handle = handle; last_ptr = ptr; last_bytes = bytes; calls++; return 0;
}
int fake_calls(void) { return calls; }
size_t fake_bytes(void) { return last_bytes; }
void *fake_handle(void) { return last_handle; }
"""


def test_cupy_without_set_workspace_sets_it_through_the_loaded_library(tmp_path, monkeypatch):
    """CuPy's binding has no setWorkspace: jitgraph calls cublasSetWorkspace_v2 of the libcublas
    the process loaded (here a stand-in built for the test), so graphs stay on."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in libcublas")
    src, lib = tmp_path / "fake_cublas.c", tmp_path / "libcublas.so.13"
    src.write_text(_FAKE_LIBCUBLAS)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    monkeypatch.setattr(cuda_matmul, "loaded_library",
                        lambda prefix: str(lib) if prefix == "libcublas" else None)
    fake = FakeCupyWithoutWorkspace()
    d = driver()
    blas = cuda_matmul.Blas("cupy", fake, d)
    c = ctypes.CDLL(str(lib))
    c.fake_bytes.restype = ctypes.c_size_t
    c.fake_handle.restype = ctypes.c_void_p
    assert blas.capture_safe and c.fake_calls() == 1
    assert (c.fake_handle(), c.fake_bytes()) == (7, cuda_matmul.Blas.WORKSPACE_BYTES)
    with _blas_entry(blas):
        f = jitgraph.jit(lambda a, b: a @ b, device="cuda")
        a, b = np.ones((2, 3), F32), np.ones((3, 2), F32)
        np.testing.assert_allclose(np.asarray(f(a, b)), a @ b)
    assert c.fake_calls() == 2                   # set again after the first setStream


def test_cupy_without_any_workspace_warns_once_that_graphs_are_off(monkeypatch):
    monkeypatch.setattr(cuda_matmul, "loaded_library", lambda prefix: None)
    d = driver()
    d._warned.discard("blas-graphs")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        blas = cuda_matmul.Blas("cupy", FakeCupyWithoutWorkspace(), d)
        cuda_matmul.Blas("cupy", FakeCupyWithoutWorkspace(), d)
    msgs = [str(m.message) for m in w if "CUDA graphs are off" in str(m.message)]
    assert len(msgs) == 1 and "no libcublas is loaded" in msgs[0] and "nvmath" in msgs[0]
    assert not blas.capture_safe
    with _blas_entry(blas):
        f = jitgraph.jit(lambda a, b: a @ b, device="cuda")     # cuda_graph=True (default)
        a, b = _on_device(np.ones((2, 3), F32)), _on_device(np.ones((3, 2), F32))
        before = d.counts.captures
        for _ in range(WARMUP["graph"] + 2):
            out = f(a, b)
        np.testing.assert_allclose(np.asarray(out), np.full((2, 2), 3.0))
        assert d.counts.captures == before           # launched directly, never captured


@contextlib.contextmanager
def _blas_entry(blas):
    d = driver()
    saved = d.libraries.pop("blas", None)
    d.libraries["blas"] = (blas, "")
    try:
        yield
    finally:
        d.libraries.pop("blas")
        if saved is not None:
            d.libraries["blas"] = saved


def test_select_matmul_switches_prepared_products(fake_blas):
    """The binding is cached per driver: select_matmul (not the environment variable) moves
    products already prepared to the tiled kernel and back, and binding_label says which."""
    d = driver()
    f = jitgraph.jit(lambda a, b: a @ b, device="cuda", cuda_graph=False)
    a, b = np.ones((2, 3), F32), np.ones((3, 2), F32)
    np.asarray(f(a, b))
    label = {"FakeCupyCublas": "cuBLAS (CuPy)", "FakeNvmathCublas": "cuBLAS (nvmath-python)"}
    assert fake_blas.calls == 1 and cuda_matmul.binding_label(d) == label[type(fake_blas).__name__]
    entry = d.libraries["blas"]
    try:
        cuda_matmul.select_matmul(d, "fallback")
        assert cuda_matmul.binding_label(d) == "tiled kernel"
        assert cuda_matmul.binding_label(d, why=True) == "tiled kernel (JITGRAPH_CUDA_MATMUL=fallback)"
        np.testing.assert_allclose(np.asarray(f(a, b)), a @ b)
        assert fake_blas.calls == 1                      # the tiled kernel ran
    finally:
        d.libraries["blas"] = entry
    np.asarray(f(a, b))
    assert fake_blas.calls == 2                          # back on cuBLAS


def test_missing_cublas_binding_warns_once_and_uses_the_tiled_kernel():
    d = driver()
    saved = d.libraries.pop("blas", None)
    d.libraries["blas"] = (None, "cupy_backends.cuda.libs.cublas: ImportError: no module")
    d._warned.discard("blas")
    try:
        f = jitgraph.jit(lambda a, b: a @ b, device="cuda")
        a, b = np.ones((2, 3), F32), np.ones((3, 2), F32)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            np.testing.assert_allclose(np.asarray(f(a, b)), a @ b)
            np.asarray(f(a, b))
        msgs = [str(x.message) for x in w if "cuBLAS" in str(x.message)]
        assert len(msgs) == 1 and "tiled GEMM" in msgs[0] and "ImportError" in msgs[0]
    finally:
        d.libraries.pop("blas")
        if saved is not None:
            d.libraries["blas"] = saved


# ---------------------------------------------------------------- the real-GPU branches, faked
class _FakeStream:
    def __init__(self, handle):
        self.handle = handle

    def __int__(self):
        return self.handle


class _FakeCuda:
    """What the driver layer asks of ``numba.cuda`` on a GPU, recording the calls."""

    def __init__(self):
        self.log = []
        fake = self

        class Event:
            def record(self, stream):
                fake.log.append(("record", int(stream)))

            def wait(self, stream):
                fake.log.append(("wait", int(stream)))
        self.Event = Event

    def stream(self):
        return _FakeStream(100)

    @contextlib.contextmanager
    def defer_cleanup(self):
        self.log.append(("defer_cleanup",))
        try:
            yield
        finally:
            self.log.append(("cleanup_resumed",))

    def event(self, timing=True):
        return self.Event()

    def external_stream(self, handle):
        return _FakeStream(handle)


class _FakeBindings:
    """``cuda.bindings.driver``'s graph calls: (err, value) tuples, recorded."""

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 2

    def __init__(self):
        self.log = []
        self.fail = set()          # names that return an error (999)

    def __getattr__(self, name):
        def call(*args):
            self.log.append((name,) + args)
            if name in self.fail:
                return (999, None)
            return (0, f"{name}-result") if name in ("cuStreamEndCapture",
                                                       "cuGraphInstantiate") else (0,)
        return call


@pytest.fixture
def gpu_driver(monkeypatch):
    """A fresh Driver that believes it runs on a GPU (simulator off, numba.cuda and
    cuda.bindings faked)."""
    import sys
    import types

    from jitgraph import cuda_driver
    fake, cu = _FakeCuda(), _FakeBindings()
    monkeypatch.setattr(cuda_driver, "simulator", lambda: False)
    monkeypatch.setattr(cuda_driver.Driver, "cuda", property(lambda self: fake))
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = cu
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", cu)
    return cuda_driver.Driver(), fake, cu


def test_foreign_inputs_are_ordered_by_an_event_on_their_stream(gpu_driver):
    d, fake, _ = gpu_driver
    d.wait_for_producer(7)              # a CuPy/PyTorch stream: record there, wait on ours
    d.wait_for_producer(1)              # the legacy default stream orders itself with ours
    d.wait_for_producer(None)           # the producer said no ordering is needed
    assert fake.log == [("record", 7), ("wait", 100)]
    assert (d.counts.event_waits, d.counts.syncs) == (1, 0)


def test_real_capture_brackets_the_step_and_replays_on_our_stream(gpu_driver):
    d, fake, cu = gpu_driver
    assert d.capture_mode == "cuda"
    seen = []
    g = d.capture(lambda: seen.append((cu.log[-1][0], fake.log[-1][0])))
    # the step ran inside the capture, with Numba's deallocations deferred (a cuMemFree
    # would invalidate the capture) until it ended
    assert seen == [("cuStreamBeginCapture", "defer_cleanup")]
    assert fake.log == [("defer_cleanup",), ("cleanup_resumed",)]
    assert [c[0] for c in cu.log] == ["cuStreamBeginCapture", "cuStreamEndCapture",
                                      "cuGraphInstantiate"]
    assert cu.log[0][1:] == (100, 2)                   # our stream, thread-local mode
    d.replay(g)
    assert cu.log[-1] == ("cuGraphLaunch", "cuGraphInstantiate-result", 100)
    assert (d.counts.captures, d.counts.graph_launches) == (1, 1)

    def broken():
        raise ValueError("a library refused the capture")
    n = len(cu.log)
    with pytest.raises(ValueError):
        d.capture(broken)
    # the capture is closed on failure and the partial graph it returned destroyed
    assert cu.log[n + 1:] == [("cuStreamEndCapture", 100),
                              ("cuGraphDestroy", "cuStreamEndCapture-result")]
    assert fake.log[-1] == ("cleanup_resumed",)
    # a graph that does not instantiate is destroyed too, and the error names the call
    cu.fail.add("cuGraphInstantiate")
    n = len(cu.log)
    with pytest.raises(RuntimeError, match="cuGraphInstantiate failed"):
        d.capture(lambda: None)
    assert cu.log[-1] == ("cuGraphDestroy", "cuStreamEndCapture-result")
    assert d.counts.captures == 1


def test_a_failed_capture_falls_back_to_direct_launches_with_one_warning(monkeypatch):
    d = driver()

    def refuse(step):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(d, "capture", refuse)
    d._warned.discard("graph")
    f = jitgraph.jit(lambda v: jnp.tanh(v) * 3.0, device="cuda")
    x = _on_device(np.linspace(-1, 1, 9).astype(F32))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [np.asarray(f(x)) for _ in range(4)]
    assert sum("capture failed" in str(m.message) for m in w) == 1
    for o in outs:
        np.testing.assert_allclose(o, np.tanh(np.linspace(-1, 1, 9)) * 3.0, rtol=1e-6)
    with counting() as c:
        f(x)
    assert c.launches == 1 and c.graph_launches == 0


def test_memory_analysis_counts_the_split_reductions_partials():
    """Per backend: the CUDA program of a long full sum keeps one partial per chunk in
    scratch (live throughout); the CPU program of the same function needs none."""
    from jitgraph.compiler import thresholds as T
    x = np.ones(T.SPLIT_MIN_INNER * 2, F32)
    fn = lambda v: jnp.sum(jnp.tanh(v))                          # noqa: E731
    gpu = jitgraph.jit(fn, device="cuda").lower(x)               # lowered only: nothing runs
    cpu = jitgraph.jit(fn).lower(x).memory_analysis()
    m = gpu.memory_analysis()
    parts = [s for s in gpu.stages["memory"].info.scratch_specs if "_part_" in s[0]]
    assert parts and m.temp_size_in_bytes == sum(n * np.dtype(d).itemsize for _, n, d in parts)
    assert cpu.temp_size_in_bytes == 0
    assert m.argument_size_in_bytes == cpu.argument_size_in_bytes == x.nbytes
    assert m.peak_memory_in_bytes == x.nbytes + 4 + m.temp_size_in_bytes
    assert cpu.peak_memory_in_bytes == x.nbytes + 4


def test_libcublas_is_preloaded_before_a_binding_imports(monkeypatch):
    """In a pip-only environment CuPy's binding finds libcublas.so.13 only once NVIDIA's wheel
    has put it in the process: load_blas preloads it through cuda.pathfinder first."""
    import importlib
    order = []
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")        # (load_blas's check only)
    monkeypatch.setattr(cuda_matmul, "preload_cublas", lambda: order.append("preload") or "ok")

    def import_module(name):
        order.append(name)
        if name == "cupy_backends.cuda.libs.cublas" and "preload" in order:
            return FakeCupyCublas.__new__(FakeCupyCublas)
        raise ImportError(f"no {name}")
    monkeypatch.setattr(importlib, "import_module", import_module)
    d = driver()
    saved = d.libraries.pop("blas", None)
    try:
        monkeypatch.setattr(cuda_matmul, "Blas", lambda name, lib, drv: ("made", name))
        blas, why = cuda_matmul.load_blas(d, "auto")
        assert blas == ("made", "cupy") and why == ""
        assert order == ["preload", "nvmath.bindings.cublas", "cupy_backends.cuda.libs.cublas"]
        order.clear()
        blas, why = cuda_matmul.load_blas(d, "nvmath")       # one binding only: its error
        assert blas is None and "nvmath.bindings.cublas: ImportError" in why
        assert "cupy" not in why and "libcublas preload: ok" in why
    finally:
        d.libraries.pop("blas", None)
        if saved is not None:
            d.libraries["blas"] = saved


def test_the_real_preload_reports_instead_of_raising():
    assert isinstance(cuda_matmul.preload_cublas(), str)     # here: no cuBLAS wheel, a reason
