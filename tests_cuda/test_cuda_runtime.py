"""Device arrays, donation, pooling, training on the device, caching keys, cuBLAS glue,
split reductions and errors of the CUDA backend (run under Numba's CUDA simulator in CI)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.backends import cuda as codegen_cuda
from jitgraph.compiler.backends.cuda_program import cache_key
from jitgraph.device import as_device_buffer, buffer_pointer, device_error, simulator
from jitgraph.kernels import cuda_matmul

F32 = np.float32


def test_device_put_get_roundtrip():
    x = np.arange(6, dtype=F32).reshape(2, 3)
    tree = jitgraph.device_put({"a": x, "b": [x[0], np.float64(2.5)]})
    a = tree["a"]
    assert isinstance(a, jitgraph.DeviceArray)
    assert (a.shape, a.dtype, a.device, a.ndim, a.size) == ((2, 3), np.dtype(F32), "cuda:0", 2, 6)
    assert a.block_until_ready() is a
    back = jitgraph.device_get(tree)
    np.testing.assert_array_equal(back["a"], x)
    np.testing.assert_array_equal(back["b"][0], x[0])
    assert back["b"][1].dtype == np.float64 and back["b"][1] == 2.5
    np.testing.assert_array_equal(np.asarray(a, dtype=np.float64), x.astype(np.float64))
    assert "DeviceArray(" in repr(a)
    assert "cuda" in [d.platform for d in jitgraph.devices()]


def test_outputs_are_device_arrays_and_feed_the_next_call():
    f = jitgraph.jit(lambda x, y: (jnp.tanh(x) * y, jnp.sum(x)), device="cuda")
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    y = jitgraph.device_put(np.full((2, 3), 2.0))
    a, s = f(x, y)
    assert isinstance(a, jitgraph.DeviceArray) and isinstance(s, jitgraph.DeviceArray)
    np.testing.assert_allclose(np.asarray(a), np.tanh(x) * 2.0, rtol=1e-12)
    assert s.shape == () and abs(float(s) - x.sum()) < 1e-12
    a2, _ = f(a, a)                     # device arrays in, no host copy in between
    np.testing.assert_allclose(np.asarray(a2), np.tanh(np.tanh(x) * 2) * np.tanh(x) * 2, rtol=1e-12)


class _Foreign:
    """Another library's CUDA array: only ``__cuda_array_interface__`` (as CuPy, PyTorch)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = arr.__cuda_array_interface__
        self._keep = arr


def test_cuda_array_interface_inputs_are_read_without_copy():
    x = jitgraph.device_put(np.arange(5.0))
    foreign = _Foreign(x)
    assert buffer_pointer(as_device_buffer(foreign, np.dtype(np.float64), (5,))) == \
        buffer_pointer(x.buffer())
    f = jitgraph.jit(lambda v: v * 3.0, device="cuda")
    np.testing.assert_array_equal(np.asarray(f(foreign)), np.arange(5.0) * 3.0)
    cai = f(foreign).__cuda_array_interface__
    assert cai["shape"] == (5,) and cai["typestr"] == "<f8" and cai["version"] == 3


def test_dlpack_export():
    x = jitgraph.device_put(np.arange(4, dtype=F32))
    if simulator():       # simulated device memory is host memory: NumPy imports it
        np.testing.assert_array_equal(np.from_dlpack(x), np.arange(4, dtype=F32))
        return
    cupy = pytest.importorskip("cupy")
    y = cupy.from_dlpack(x)
    assert y.data.ptr == x.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(4, dtype=F32))


def test_donation_updates_in_place_and_deletes_the_argument():
    @jitgraph.jit(device="cuda", donate_argnums=(0,))
    def step(w, g):
        return w - 0.5 * g
    w = jitgraph.device_put(np.ones(4))
    ptr = buffer_pointer(w.buffer())
    w2 = step(w, np.arange(4.0))
    np.testing.assert_allclose(np.asarray(w2), 1 - 0.5 * np.arange(4.0))
    assert buffer_pointer(w2.buffer()) == ptr          # same device memory, updated in place
    assert w.is_deleted()
    with pytest.raises(RuntimeError, match="donated"):
        np.asarray(w)
    # a donated buffer that another argument also reads is copied first
    v = jitgraph.device_put(np.arange(4.0))
    out = step(v, v)
    np.testing.assert_allclose(np.asarray(out), np.arange(4.0) * 0.5)


def test_scratch_buffers_are_pooled():
    f = jitgraph.jit(lambda x: jnp.sum(jnp.exp(x) @ x.T), device="cuda")
    x = np.arange(6.0).reshape(2, 3) / 6
    want = np.sum(np.exp(x) @ x.T)
    for _ in range(2):
        assert abs(float(f(x)) - want) < 1e-9
    prog = f.lower(x).program
    assert len(prog._scratch_pool) <= 1


def _mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jnp.tanh(h)
    logp = jitgraph.nn.log_softmax(h, axis=-1)
    return -jnp.mean(jnp.sum(logp * y, axis=-1))


def _sgd(params, x, y):
    loss, grads = jitgraph.value_and_grad(_mlp_loss)(params, x, y)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


def test_mlp_training_on_device_matches_cpu():
    rng = np.random.default_rng(0)
    sizes = [5, 6, 3]
    params = [(rng.standard_normal((a, b)).astype(F32) * 0.5, np.zeros(b, F32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((4, 5)).astype(F32)
    y = np.eye(3, dtype=F32)[[0, 2, 1, 0]]
    gpu_step = jitgraph.jit(_sgd, device="cuda", donate_argnums=(0,))
    cpu_step = jitgraph.jit(_sgd)
    p_dev = jitgraph.device_put(params)
    xd, yd = jitgraph.device_put((x, y))
    p_cpu = params
    losses = []
    for _ in range(2):
        old = p_dev
        p_dev, loss = gpu_step(p_dev, xd, yd)
        assert all(a.is_deleted() for wb in old for a in wb)    # parameters updated in place
        p_cpu, loss_cpu = cpu_step(p_cpu, x, y)
        losses.append(float(loss))
        assert abs(float(loss) - float(loss_cpu)) < 1e-5
    assert losses[1] < losses[0]
    for (w, b), (wc, bc) in zip(jitgraph.device_get(p_dev), p_cpu):
        np.testing.assert_allclose(w, wc, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, bc, rtol=1e-5, atol=1e-6)


def test_split_reduction(monkeypatch):
    """Few long rows are reduced by many blocks (partials, then a second small kernel)."""
    monkeypatch.setattr(codegen_cuda, "SPLIT_MIN_INNER", 64)
    monkeypatch.setattr(codegen_cuda, "SPLIT_CHUNK", 48)

    def f(x):
        return jnp.sum(jnp.tanh(x) * jitgraph.nn.sigmoid(1.5 * x + 0.1) + 0.5 * x ** 2)
    x = np.linspace(-3, 3, 300).astype(F32)
    vg = jitgraph.jit(jitgraph.value_and_grad(f), device="cuda")
    assert "_final_" in vg.lower(x).source and "_part_" in vg.lower(x).source
    v, g = vg(x)
    v0, g0 = jitgraph.value_and_grad(f)(x)
    np.testing.assert_allclose(float(v), float(v0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g), g0, rtol=1e-5, atol=1e-6)
    h = jitgraph.jit(lambda z: jnp.log(jnp.mean(jnp.exp(z), axis=-1)), device="cuda")
    z = np.linspace(-1, 1, 400).reshape(2, 200)
    np.testing.assert_allclose(np.asarray(h(z)), np.log(np.mean(np.exp(z), axis=-1)), rtol=1e-12)


def test_shuffle_path_is_generated_only_for_plain_monoids():
    from jitgraph.compiler.backends.base import emit_program
    from jitgraph.compiler.backends.cuda import CudaCodegen, CudaContext
    from jitgraph.compiler.fusion import make_plan
    g = jitgraph.make_graph(lambda x: (jnp.sum(x, axis=-1), jnp.argmax(x, axis=-1)))(
        np.ones((4, 100), F32))
    ctx = CudaContext()
    plan = make_plan(g, ctx)
    src = emit_program(CudaCodegen(plan, ctx, shuffle=True), plan, set())[0].source
    compile(src, "<generated>", "exec")
    assert src.count("cuda.shfl_down_sync") == 5          # the sum's last warp; argmax: tree
    plan = make_plan(g, ctx)
    src_tree = emit_program(CudaCodegen(plan, ctx, shuffle=False), plan, set())[0].source
    assert "shfl" not in src_tree


def test_cache_key_and_disk_cache():
    keys = {cache_key("fp", (9, 0), False, True), cache_key("fp", (8, 0), False, True),
            cache_key("fp", (9, 0), True, True), cache_key("fp", (9, 0), False, False)}
    assert len(keys) == 4 and "sm_90" in cache_key("fp", (9, 0), False, True)
    jitgraph.clear_cache()
    x = np.arange(3.0)
    jitgraph.jit(lambda v: v + 41.0, device="cuda")(x)
    before = jitgraph.cache_info()["disk_hits"]
    jitgraph.jit(lambda v: v + 41.0, device="cuda")(x)     # same program: module from disk
    assert jitgraph.cache_info()["disk_hits"] == before + 1


def _colmajor_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
    """NumPy model of cuBLAS ``?gemm`` on flat column-major buffers."""
    def mat(buf, rows, cols, ld, t):
        r, c = (cols, rows) if t == "T" else (rows, cols)
        M = np.lib.stride_tricks.as_strided(buf, (r, c), (buf.itemsize, ld * buf.itemsize))
        return M.T if t == "T" else M
    Cm = np.lib.stride_tricks.as_strided(C, (m, n), (C.itemsize, ldc * C.itemsize))
    prod = alpha * mat(A, m, k, lda, ta) @ mat(B, k, n, ldb, tb)
    Cm[...] = prod + beta * Cm if beta != 0 else prod    # beta 0: C is not read (cuBLAS)


@pytest.mark.parametrize("at,bt", [(False, False), (True, False), (False, True), (True, True)])
def test_cublas_glue_maps_row_major_products(at, bt):
    rng = np.random.default_rng(1)
    m, n, k = 4, 5, 3
    a = rng.standard_normal((k, m) if at else (m, k))
    b = rng.standard_normal((n, k) if bt else (k, n))
    c = rng.standard_normal((m, n))
    want = 0.5 * (a.T if at else a) @ (b.T if bt else b) + 2.0 * c
    call = cuda_matmul.blas_call(a.shape + (at,), b.shape + (bt,), m, n, k)
    out = c.reshape(-1).copy()
    _colmajor_gemm(call.transa, call.transb, call.m, call.n, call.k, 0.5, b.reshape(-1),
                   call.lda, a.reshape(-1), call.ldb, 2.0, out, call.ldc)
    np.testing.assert_allclose(out.reshape(m, n), want, rtol=1e-12)


def test_tiled_matmul_with_gpu_tile_edges():
    from numba import cuda
    rng = np.random.default_rng(2)
    m, n, k = 66, 3, 17
    a = rng.standard_normal((k, m))
    b = rng.standard_normal((k, n))
    out = cuda.device_array(m * n, np.float64)
    cuda_matmul.gemm_fallback(cuda.to_device(a.reshape(-1)), (k, m, True), cuda.to_device(
        b.reshape(-1)), (k, n, False), out, m, n, k, 1, 1.0, 0.0, None, cuda_matmul.GPU_TILE)
    np.testing.assert_allclose(out.copy_to_host().reshape(m, n), a.T @ b, rtol=1e-12)


def test_host_step_runs_between_kernels():
    cube = jitgraph.defprimitive("cuda_test_cube", impl=lambda x: x * x * x)
    f = jitgraph.jit(lambda x: jnp.exp(cube(x)) + 1.0, device="cuda")
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(np.asarray(f(x)), np.exp(x ** 3) + 1.0, rtol=1e-12)


def test_errors():
    d = jitgraph.device_put(np.ones(3))
    with pytest.raises(TypeError, match="device_get"):
        jitgraph.jit(lambda v: v + 1)(d)
    with pytest.raises(ValueError, match="unknown device"):
        jitgraph.jit(lambda v: v, device="tpu")
    e = device_error(RuntimeError("[CUDA_ERROR_OUT_OF_MEMORY] out of memory"), "jit(step)", 2**31)
    assert isinstance(e, MemoryError) and "jit(step)" in str(e) and "2.00 GiB" in str(e)


def test_no_gpu_and_no_simulator_says_what_to_do():
    code = ("import jitgraph\ntry:\n    jitgraph.jit(lambda x: x, device='cuda')\n"
            "except jitgraph.device.CudaUnavailableError as e:\n    print('ERR', e)\n"
            "else:\n    print('OK')\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NUMBA_CUDA_DRIVER"] = "/nonexistent/libcuda.so"   # no driver or device, even on a
    env["CUDA_VISIBLE_DEVICES"] = ""                          # GPU machine
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120).stdout
    assert out.startswith("ERR"), out
    assert "NUMBA_ENABLE_CUDASIM=1" in out and "jitgraph[cuda]" in out


def test_column_reduction_over_leading_axes():
    """A bias gradient (sum over the batch) with >= 32 outputs: coalesced column blocks."""
    def f(x, b):
        return jnp.sum(jnp.tanh(x + b), axis=0) * 2.0 + b
    x = np.linspace(-2, 2, 5 * 40).reshape(5, 40)
    b = np.linspace(0, 1, 40)
    jf = jitgraph.jit(f, device="cuda")
    assert "sm_acc0_0[ty, tx]" in jf.lower(x, b).source
    np.testing.assert_allclose(np.asarray(jf(x, b)), f(x, b), rtol=1e-12)
    g = jitgraph.jit(lambda x: jnp.max(x, axis=(0, 1)), device="cuda")
    y = np.random.default_rng(3).standard_normal((3, 2, 33))
    np.testing.assert_array_equal(np.asarray(g(y)), y.max(axis=(0, 1)))


def test_dead_outputs_are_recycled_and_duplicates_own_their_memory():
    from jitgraph import device
    device.empty_cache()
    f = jitgraph.jit(lambda v: (v * 2.0, v + 1.0), device="cuda")
    x = np.arange(3.0)
    a, b = f(x)
    ptrs = {buffer_pointer(a.buffer()), buffer_pointer(b.buffer())}
    del a, b
    c, d = f(x)                             # the two freed buffers are reused
    assert {buffer_pointer(c.buffer()), buffer_pointer(d.buffer())} == ptrs
    np.testing.assert_array_equal(np.asarray(c), x * 2.0)
    g = jitgraph.jit(lambda v: (v * 3.0, v * 3.0), device="cuda")   # one value, two outputs
    p, q = g(x)
    assert buffer_pointer(p.buffer()) != buffer_pointer(q.buffer())
    del p
    r, _ = f(x)                             # may reuse p's memory: q must not change
    np.testing.assert_array_equal(np.asarray(q), x * 3.0)


def test_device_array_arithmetic_stays_on_the_device():
    a = jitgraph.device_put(np.arange(4, dtype=F32))
    b = jitgraph.device_put(np.ones(4, F32))
    c = (a + b) * 2.0 - 1.0 / (b + 1.0)
    assert isinstance(c, jitgraph.DeviceArray) and c.dtype == F32
    np.testing.assert_allclose(np.asarray(c), (np.arange(4) + 1) * 2.0 - 0.5, rtol=1e-6)
    m = jitgraph.device_put(np.eye(2, 4, dtype=F32))
    np.testing.assert_allclose(np.asarray(m @ a), [0.0, 1.0])
    assert (-a)[3] == -3.0 and a.tolist() == [0.0, 1.0, 2.0, 3.0]
