"""Launch geometry from the device (``backends/cuda_geometry.py``): the generated CUDA module
at benchmark shapes, generated without running it, fills a 132-SM device and stays within
its grid limits; each new kernel layout (unrolled elementwise loops, a warp per row, split
column reductions, SM-sized split reductions, the tiled GEMM's grid) is run on the simulator
against NumPy at a size that takes it (``JITGRAPH_CUDA_SM_COUNT`` shrinks the device so a
few rows or columns reach the many-block layouts)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler import thresholds as T
from jitgraph.compiler.backends import cuda as codegen_cuda
from jitgraph.compiler.backends import cuda_geometry as geo
from jitgraph.compiler.backends.base import emit_program
from jitgraph.compiler.backends.cuda import CudaCodegen, CudaContext
from jitgraph.compiler.fusion import make_plan
from jitgraph.compiler.lower import lower
from jitgraph.kernels import cuda_matmul

F32 = np.float32
SM = 132
_DIM = r"(\d+|\([\d, ]+\))"
_LAUNCHES = (re.compile(rf"D\.launch\((\w+), {_DIM}, {_DIM},"),      # through the driver layer
             re.compile(rf"(\w+)\[{_DIM}, {_DIM}\]\("))                # kernel[grid, block](...)


def _dims(text: str) -> tuple:
    v = eval(text)                                                   # noqa: S307
    return v if isinstance(v, tuple) else (v,)


def launches(source: str) -> list[tuple[str, tuple, tuple]]:
    """(kernel, grid dims, block dims) of every launch in a generated module."""
    out = []
    for pat in _LAUNCHES:
        out += [(k, _dims(g), _dims(b)) for k, g, b in pat.findall(source)]
    return out


def generate(fn, *args, limits=None, shuffle=True) -> str:
    """The CUDA module of ``fn`` at these shapes, generated only (nothing compiled or run)."""
    g = lower(jitgraph.make_graph(fn)(*args))
    ctx = CudaContext(limits)
    plan = make_plan(g, ctx)
    return emit_program(CudaCodegen(plan, ctx, shuffle=shuffle), plan, set())[0].source


def zeros(*shape):
    """A shape to trace with, without the memory (a broadcast scalar)."""
    return np.broadcast_to(F32(0.5), shape)


def _xent(z, y):
    return -jnp.mean(jnp.sum(nn.log_softmax(z) * y, axis=-1))


def _layernorm_loss(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, keepdims=True)
    return jnp.sum(((x - m) / jnp.sqrt(v + 1e-5) * g + b) ** 2)


# ---------------------------------------------------------------- the device record
def test_device_limits_default_and_sm_override(monkeypatch):
    monkeypatch.delenv("JITGRAPH_CUDA_SM_COUNT", raising=False)
    lim = geo.device_limits()            # the simulator: the H200-like default
    assert lim == geo.DEFAULT
    assert (lim.sm_count, lim.max_threads_per_block, lim.warp_size) == (132, 1024, 32)
    assert lim.max_grid == (2 ** 31 - 1, 65535, 65535) and lim.shared_per_block == 48 * 1024
    assert lim.wave(256) == 132 * 8 and lim.wave(32) == 132 * 32
    monkeypatch.setenv("JITGRAPH_CUDA_SM_COUNT", "7")
    assert geo.device_limits().sm_count == 7
    assert CudaContext().limits.sm_count == 7


# ---------------------------------------------------------------- benchmark geometry
def test_elementwise_2_26_fills_the_device_with_unrolled_loads():
    src = generate(lambda x: jnp.tanh(x) * 2.0 + 1.0, zeros(1 << 26))
    (kern, grid, block), = launches(src)
    # min(n / (4 * 256), 8 waves of 8 resident 256-thread blocks on 132 SMs)
    assert block == (256,) and grid == (132 * 8 * T.GRID_WAVES,) and grid[0] % SM == 0
    body = src[src.index(f"def {kern}"):].split("\n\n\n")[0]
    lines = body.splitlines()
    loads = [i for i, l in enumerate(lines) if "= in0[" in l]
    stores = [i for i, l in enumerate(lines) if l.strip().startswith("buf")]
    # 4 copies per iteration, every load before the first store (2^26 has no tail loop)
    assert len(loads) == T.ELEMENTS_PER_THREAD == len(stores) and max(loads) < min(stores)
    assert "lin_u3 = base + 768" in body
    # a size with a tail: groups of 1024, then one element per thread
    src = generate(lambda x: x * 3.0, zeros(5000))
    (_, grid, _), = launches(src)
    assert grid == (5,) and "range(4096 + cuda.grid(1), 5000" in src


def _kernel_body(src: str, kind: str) -> str:
    start = src.index(f"def k0_loop_{kind}")
    return src[start:].split("\n\n\n")[0]


def _loads_before_accumulations(body: str) -> None:
    """Inside the unrolled loop: four copies, every load of the input before the first
    accumulation, the copies accumulated in element order (rl_u0 first)."""
    loop = body[body.index("for rb in range("):body.index("for rl in range(")]
    lines = loop.splitlines()
    loads = [i for i, l in enumerate(lines) if "= in0[" in l]
    accs = [i for i, l in enumerate(lines) if l.strip().startswith("acc") and "=" in l]
    assert len(loads) == T.ELEMENTS_PER_THREAD and max(loads) < min(accs), loop
    assert all(f"rl_u{j} = rb" in loop for j in range(T.ELEMENTS_PER_THREAD))
    order = [l.split("_u")[-1][:1] for l in lines if l.strip().startswith("acc")]
    assert order == sorted(order), order


def test_split_reductions_and_rows_keep_four_loads_in_flight():
    """The split reduction's first pass, a block-per-row and a warp-per-row kernel each take
    ELEMENTS_PER_THREAD elements per iteration, loads first, then the plain loop for the
    rest (the elementwise kernels' scheme)."""
    src = generate(lambda x: jnp.sum(jnp.tanh(x) * 2.0), zeros(1 << 22))
    body = _kernel_body(src, "part")
    _loads_before_accumulations(body)
    assert "main_end = lo + ((min(lo + " in body and "for rl in range(main_end + tid," in body
    rows = _kernel_body(generate(lambda z: jnp.sum(z * z, axis=1), zeros(64, 5000)), "kernel")
    _loads_before_accumulations(rows)
    assert "main_end = (5000) // 1024 * 1024" in rows
    warp = _kernel_body(generate(lambda z: jnp.max(z, axis=1), zeros(4096, 1000)), "kernel")
    _loads_before_accumulations(warp)
    assert "main_end = (1000) // 128 * 128" in warp and "for rl in range(main_end + lane, 1000, 32)" in warp


def test_rows_warp_per_short_row_block_per_long_row():
    # (128, 10): a warp per row, one row per block (128 blocks: all the work there is)
    src = generate(lambda z: nn.softmax(z), zeros(128, 10))
    (_, grid, block), = launches(src)
    assert block == (32, 1) and grid == (128,)
    assert "cuda.shfl_down_sync" in src and "cuda.shfl_sync(0xffffffff" in src
    assert "syncthreads" not in src          # shuffles only: no block-wide barrier
    # softmax cross-entropy (8192, 32000), forward and backward: a block per long row
    ls = launches(generate(jitgraph.value_and_grad(_xent), zeros(8192, 32000),
                           zeros(8192, 32000)))
    rows = [(g, b) for _, g, b in ls if g[0] == 8192]
    assert rows == [((8192,), (256,))]
    assert all(g[0] >= 2 * SM or g == (1,) for _, g, _ in ls)    # (1,): the mean of 8192 losses


def test_layernorm_4096x1024_forward_backward():
    ls = launches(generate(jitgraph.value_and_grad(_layernorm_loss, argnums=(0, 1, 2)),
                           zeros(4096, 1024), zeros(1024), zeros(1024)))
    by = {k.rsplit("_", 1)[0]: (g, b) for k, g, b in ls}
    rows = [v for k, v in by.items() if v[1] == (32, 8) and "_kernel" in k]
    assert rows == [((512,), (32, 8))]                # 8 rows (warps) per block, 512 blocks
    parts = [v for k, v in by.items() if "_part" in k]
    finals = [v for k, v in by.items() if "_final" in k]
    # the gamma/beta gradients: 32 column blocks x 9 parts of the 4096 rows
    assert parts == [((288,), (32, 8))] and len(finals) == 1
    assert parts[0][0][0] >= 2 * SM


def test_bias_gradient_512x2048_splits_the_reduced_axis():
    src = generate(lambda x: jnp.sum(x * 2.0, axis=0), zeros(512, 2048))
    (k1, g1, b1), (k2, g2, b2) = launches(src)
    assert "_part_" in k1 and "_final_" in k2
    assert b1 == (32, 8) and g1 == (64 * 5,) and g1[0] >= 2 * SM     # 64 column blocks x 5
    assert g2 == (8,) and b2 == (256,)                                 # 2048 outputs combined
    assert "k0_loop_part_acc0_0[(tile % 5) * 2048 + ob]" in src


def test_full_sum_2_26_chunks_from_the_sm_count():
    src = generate(lambda x: jnp.sum(x), zeros(1 << 26))
    (k1, g1, b1), (k2, g2, b2) = launches(src)
    assert "_part_" in k1 and "_final_" in k2
    assert g1 == (132 * 8,) and b1 == (256,) and g2 == (1,)            # one full wave
    chunk = int(re.search(r"lo = \(bb % \d+\) \* (\d+)", src).group(1))
    assert chunk % 32 == 0 and chunk * g1[0] >= 1 << 26 > chunk * (g1[0] - 1)


def test_every_grid_within_the_device_limits():
    small = geo.DeviceLimits(max_grid=(100, 65535, 65535))
    progs = [(lambda x: x * 2.0, (zeros(1 << 20),)),
             (lambda z: nn.softmax(z), (zeros(100000, 16),)),
             (lambda z: nn.softmax(z), (zeros(5000, 3000),)),
             (lambda x: jnp.sum(x, axis=0), (zeros(4096, 64),)),
             (lambda x: jnp.sum(x), (zeros(1 << 22),))]
    for fn, args in progs:
        for limits in (geo.DEFAULT, small):
            for _, grid, block in launches(generate(fn, *args, limits=limits)):
                assert geo.within(grid, limits), (grid, limits)
                assert int(np.prod(block)) <= limits.max_threads_per_block
    # the tiled GEMM: every tile on grid x (2^31 - 1), none on y/z (65535)
    for m, n, batch in [(200000, 64, 1), (64, 64, 70000), (8, 8, 200000)]:
        for tile in (cuda_matmul.GPU_TILE, cuda_matmul.SIM_TILE):
            assert geo.within(cuda_matmul.gemm_grid(m, n, batch, tile), geo.DEFAULT)


# ---------------------------------------------------------------- the new paths, run
def _close(got, want):
    for g, w in zip(jitgraph.tree.tree_flatten(jitgraph.device_get(got))[0],
                    jitgraph.tree.tree_flatten(want)[0]):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
        else:
            np.testing.assert_array_equal(g, w)


def test_run_unrolled_elementwise_with_grid_stride_and_tail(monkeypatch):
    monkeypatch.setattr(codegen_cuda, "MAX_BLOCKS", 1)      # one block strides over 2 groups
    n = 2 * T.ELEMENTS_PER_THREAD * T.MAX_THREADS + 37
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    idx = rng.integers(-n, n, n)

    def f(a, b, i):
        return jnp.tanh(a) * b + 1.0, jnp.roll(a, 3) + b[i]
    jf = jitgraph.jit(f, device="cuda")
    src = jf.lower(a, b, idx).source
    assert "lin_u3" in src and all(g == (1,) for _, g, _ in launches(src))
    _close(jf(a, b, idx), f(a, b, idx))


def test_run_warp_rows_partial_last_group(monkeypatch):
    """5 rows, 4 rows (warps) per block, one block: the second iteration has 3 dead warps
    that redo the last row without storing; value and gradient, shuffles off (simulator)."""
    monkeypatch.setenv("JITGRAPH_CUDA_SM_COUNT", "1")
    monkeypatch.setattr(codegen_cuda, "MAX_BLOCKS", 1)
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((5, 24)) * 3).astype(F32)
    y = rng.integers(0, 24, 5)

    def f(z, y):
        ln = (z - z.mean(-1, keepdims=True)) / jnp.sqrt(z.var(-1, keepdims=True) + 1e-5)
        lp = nn.log_softmax(z)
        return nn.softmax(z), -jnp.mean(lp[jnp.arange(5), y]), ln, jnp.argmax(z, axis=-1)
    jf = jitgraph.jit(f, device="cuda")
    src = jf.lower(z, y).source
    assert any(b == (32, 4) and g == (1,) for _, g, b in launches(src))
    _close(jf(z, y), f(z, y))
    g = jitgraph.grad(lambda z: jnp.sum(f(z, y)[0] * z) + jnp.sum(f(z, y)[2] ** 2))
    _close(jitgraph.jit(g, device="cuda")(z), g(z))


def test_run_split_column_reduction(monkeypatch):
    """Two column blocks over 130 rows on a 3-SM device: the rows are split in 2 parts."""
    monkeypatch.setenv("JITGRAPH_CUDA_SM_COUNT", "3")
    monkeypatch.setattr(codegen_cuda, "MAX_BLOCKS", 2)        # fewer simulated threads
    rng = np.random.default_rng(2)
    x = rng.standard_normal((130, 40)).astype(F32)
    b = rng.standard_normal(40).astype(F32)

    def f(x, b):
        return jnp.sum(jnp.tanh(x + b), axis=0) * 2.0 + b, jnp.max(x * b, axis=0)
    jf = jitgraph.jit(f, device="cuda")
    src = jf.lower(x, b).source
    names = [k for k, _, _ in launches(src)]
    assert any("_part_" in k for k in names) and any("_final_" in k for k in names)
    assert "(tile % 2) * 65" in src and "range(np.int64(cuda.blockIdx.x), 4," in src
    _close(jf(x, b), f(x, b))
    g = jitgraph.grad(lambda x, b: jnp.sum(f(x, b)[0] * b), argnums=(0, 1))
    _close(jitgraph.jit(g, device="cuda")(x, b), g(x, b))


def test_run_split_reduction_chunks_from_sm_count(monkeypatch):
    monkeypatch.setenv("JITGRAPH_CUDA_SM_COUNT", "1")
    monkeypatch.setattr(codegen_cuda, "SPLIT_MIN_INNER", 512)
    monkeypatch.setattr(codegen_cuda, "SPLIT_CHUNK", 64)
    x = np.linspace(-2, 2, 1000).astype(F32)

    def f(x):
        return jnp.sum(jnp.tanh(x) * x), jnp.max(x * 0.5)
    jf = jitgraph.jit(f, device="cuda")
    src = jf.lower(x).source
    part = [g for k, g, _ in launches(src) if "_part_" in k]
    assert part == [(8,)] and "lo = (bb % 8) * 128" in src     # one wave of 1 SM: 8 blocks
    _close(jf(x), f(x))


def test_run_tiled_gemm_batched_on_grid_x():
    from numba import cuda
    rng = np.random.default_rng(3)
    batch, m, n, k = 3, 20, 13, 5
    a = rng.standard_normal((batch, m, k))
    b = rng.standard_normal((batch, n, k))                # stored transposed
    out = cuda.device_array(batch * m * n, np.float64)
    tile = cuda_matmul.SIM_TILE
    assert cuda_matmul.gemm_grid(m, n, batch, tile) == 3 * 2 * 3
    cuda_matmul.gemm_fallback(cuda.to_device(a.reshape(-1)), (m, k, False),
                              cuda.to_device(b.reshape(-1)), (n, k, True), out, m, n, k, batch,
                              1.0, 0.0, None, tile)
    np.testing.assert_allclose(out.copy_to_host().reshape(batch, m, n),
                               a @ b.transpose(0, 2, 1), rtol=1e-12)


def test_unrolled_row_loops_compute_what_the_plain_loop_does():
    """Rows of 1100 (a block per row: a 1024-element group, then a tail of 76) and of 200 (a
    warp per row: groups of 128, then 72): sums, and the first index of a repeated maximum
    (the unrolled copies accumulate in element order), against NumPy."""
    r = np.random.default_rng(0)
    for cols in (1100, 200):
        z = r.standard_normal((2, cols)).astype(F32)
        z[0, [5, 700 % cols, cols - 3]] = 9.0          # ties: the first one wins
        z[1, [cols - 1, 1]] = 7.0
        f = jitgraph.jit(lambda a: (jnp.sum(a * a, axis=1), jnp.argmax(a, axis=1)),
                         device="cuda")
        s, i = (np.asarray(v) for v in f(z))
        np.testing.assert_allclose(s, (z.astype(np.float64) ** 2).sum(1), rtol=1e-5)
        np.testing.assert_array_equal(i, np.argmax(z, axis=1))


def test_a_mean_of_gathered_rows_spreads_over_the_grid():
    """Softmax cross-entropy's loss (8192, 32000): the mean of the label logits gathers one
    element per row; its reduction is split over 32 blocks of 256 threads (not one block of
    32 dependent loads per thread), and the class indices of the backward's one-hot are
    computed, not loaded."""
    def xent(z, labels):
        return -jnp.mean(jnp.take_along_axis(nn.log_softmax(z, axis=-1), labels[:, None], 1))
    src = generate(jitgraph.value_and_grad(xent), zeros(8192, 32000),
                   np.zeros(8192, np.int64))
    ls = {k.split("_")[0] + "_" + k.split("_")[2]: (g, b) for k, g, b in launches(src)}
    assert ls["k1_part"] == ((32,), (256,)) and ls["k1_final"][0] == (1,)
    assert "c1[" not in src and "c0[" not in src


def test_split_mean_of_gathered_rows_matches_numpy():
    r = np.random.default_rng(3)
    z = r.standard_normal((2100, 5)).astype(F32)            # 2100 >= the gather split length
    labels = r.integers(0, 5, 2100)
    f = jitgraph.jit(lambda a, y: jnp.mean(jnp.take_along_axis(a, y[:, None], 1)), device="cuda")
    np.testing.assert_allclose(float(np.asarray(f(z, labels))),
                               z[np.arange(2100), labels].astype(np.float64).mean(), rtol=1e-5)


def _lse(z):
    """logsumexp as written out: the maximum, then the sum of exp(z - max) (nn.logsumexp
    guards a non-finite maximum, so its scalar stage is not the maximum alone)."""
    m = jnp.max(z, axis=-1, keepdims=True)
    return jnp.log(jnp.sum(jnp.exp(z - m), axis=-1)) + m[..., 0]


def test_softmax_rows_are_read_once_forward():
    """The row's maximum and the sum of exp(x - max) come from one pass (an online
    max-and-sum: a larger maximum rescales the running sum), in block rows and warp rows."""
    for cols in (32000, 1000):
        u = T.ELEMENTS_PER_THREAD
        lse = _kernel_body(generate(_lse, zeros(64, cols)), "kernel")
        assert sum("= in0[" in l for l in lse.splitlines()) == u + 1, lse   # one pass
        assert "_mn = maximum(" in lse and "math.exp((_m1 - _mn))" in lse
        # log-softmax: that pass, then the one writing the outputs (three passes before)
        ls = _kernel_body(generate(lambda z: nn.log_softmax(z, axis=-1), zeros(64, cols)),
                          "kernel")
        assert sum("= in0[" in l for l in ls.splitlines()) == 2 * (u + 1), ls


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (-inf - -inf in the simulator)
@pytest.mark.parametrize("cols", [1100, 200])
def test_online_max_and_sum_matches_the_two_pass_result(cols):
    """Block rows (1100) and warp rows (200), with a row of equal values, one growing
    maximum after another, a row holding -inf, and a row all -inf (its softmax is NaN, as
    NumPy's; its logsumexp -inf)."""
    r = np.random.default_rng(5)
    z = (r.standard_normal((6, cols)) * 3).astype(F32)
    z[1] = 2.0
    z[2] = np.linspace(-50, 50, cols)                     # the maximum grows at every element
    z[3, ::7] = -np.inf
    z[4] = -np.inf
    z[5, -1] = 80.0                                       # exp(80 - max) rescaling, late
    f = jitgraph.jit(lambda a: (nn.log_softmax(a, axis=-1), _lse(a)), device="cuda")
    with np.errstate(invalid="ignore"):
        ls, lse = (np.asarray(v) for v in f(z))
        z64 = z.astype(np.float64)
        m = z64.max(1, keepdims=True)
        want_lse = (m + np.log(np.exp(z64 - m).sum(1, keepdims=True)))[:, 0]
        want_ls = z64 - want_lse[:, None]
    np.testing.assert_allclose(lse[:4], want_lse[:4], rtol=2e-6)
    np.testing.assert_allclose(lse[5], want_lse[5], rtol=2e-6)
    assert np.isnan(lse[4]) and np.all(np.isnan(ls[4]))    # (-inf - -inf, as NumPy's)
    fin = np.isfinite(want_ls[:4])
    np.testing.assert_allclose(ls[:4][fin], want_ls[:4][fin], rtol=1e-5, atol=1e-5)
    assert np.all(ls[3, ::7] == -np.inf)
