"""bfloat16 and float16 on the CUDA backend (simulator): programs whose arrays are 16-bit
floats compute in float32 and round once per primitive, so they give the reference
interpreter's numbers; products of 16-bit operands go to cuBLAS's GemmEx (float32
accumulation, tensor cores) or, without cuBLAS, to the tiled kernel reading the 16-bit bits.
Each is also checked against the float32 program within the 16-bit type's tolerance."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.backends import cuda as codegen_cuda
from jitgraph.kernels import narrow

ml_dtypes = pytest.importorskip("ml_dtypes")
from test_cuda_lean import FakeCupyCublas, FakeNvmathCublas, _blas  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
NARROW = [BF16, F16]
# a few units in the last place of each type, relative to the values' scale
TOL = {BF16: 3e-2, F16: 4e-3}


def _mlp_loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"]
    m = jnp.max(logits, axis=1, keepdims=True)
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=1)) + m[:, 0]
    return jnp.mean(lse - logits[jnp.arange(x.shape[0]), y])


def _data(dt, batch=12, seed=0):
    r = np.random.default_rng(seed)
    p = {"w1": (r.standard_normal((10, 16)) * 0.3).astype(dt), "b1": np.zeros(16, dt),
         "w2": (r.standard_normal((16, 5)) * 0.3).astype(dt)}
    return p, r.standard_normal((batch, 10)).astype(dt), r.integers(0, 5, batch)


def _host(tree):
    return jitgraph.tree_map(np.asarray, tree)


def _close(got, want, dt):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dt] * scale)


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_training_step_in_16_bits_matches_the_reference_and_float32(dt):
    p, x, y = _data(dt)
    vg = jitgraph.value_and_grad(_mlp_loss)
    loss, grads = jitgraph.jit(vg, device="cuda")(p, x, y)
    loss, grads = np.asarray(loss), _host(grads)
    ref_loss, ref_grads = vg(p, x, y)                 # the reference interpreter, eagerly
    assert loss.dtype == dt and all(g.dtype == dt for g in grads.values())
    _close(loss, ref_loss, dt)
    for k in grads:
        _close(grads[k], ref_grads[k], dt)
    f32 = jitgraph.tree_map(lambda a: a.astype(np.float32), (p, x))
    l32, g32 = vg(*f32, y)
    _close(loss, l32, dt)
    for k in grads:
        _close(grads[k], g32[k], dt)


@pytest.mark.parametrize("dt", NARROW, ids=str)
@pytest.mark.parametrize("binding", [FakeCupyCublas, FakeNvmathCublas], ids=["cupy", "nvmath"])
def test_products_of_16_bit_operands_go_to_gemm_ex(dt, binding):
    r = np.random.default_rng(1)
    a = r.standard_normal((6, 9)).astype(dt)
    b = r.standard_normal((9, 7)).astype(dt)
    lib = binding()
    with _blas(lib):
        f = jitgraph.jit(lambda a, b: jnp.tanh(a @ b) + (a.T @ a)[0, 0], device="cuda")
        got = np.asarray(f(a, b))
    code = {BF16: 14, F16: 2}[dt]
    assert lib.ex_calls and all(c == (code, code, 0, 68, -1) for c in lib.ex_calls)
    assert got.dtype == dt
    want = np.tanh(a.astype(np.float32) @ b.astype(np.float32)) + \
        (a.astype(np.float32).T @ a.astype(np.float32))[0, 0]
    _close(got, want, dt)
    src = f.lower(a, b).source
    assert f"operands='{dt.name}'" in src        # the product reads the 16-bit arrays


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_tiled_product_widens_16_bit_operands(dt):
    """No cuBLAS: the tiled kernel stages the operands' bits widened to float32 (a product
    larger than one simulator tile, with a batch and a transposed operand)."""
    r = np.random.default_rng(2)
    a = r.standard_normal((2, 11, 13)).astype(dt)
    b = r.standard_normal((2, 9, 13)).astype(dt)
    with _blas(None):
        got = np.asarray(jitgraph.jit(lambda a, b: a @ jnp.swapaxes(b, 1, 2),
                                      device="cuda")(a, b))
    want = a.astype(np.float32) @ np.swapaxes(b.astype(np.float32), 1, 2)
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want.astype(dt))     # accumulated in float32, rounded once


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_reductions_accumulate_in_float32(dt, monkeypatch):
    """A sum of n ones is n (rounded once) only if it accumulates wider than 16 bits
    (bfloat16 stops at 256, float16 at 2048), at sizes that take each reduction layout (the
    thresholds lowered so that the simulator runs them quickly): a row split over blocks,
    a block per row, a warp per row, columns."""
    monkeypatch.setattr(codegen_cuda, "SPLIT_MIN_INNER", 512)
    monkeypatch.setattr(codegen_cuda, "SPLIT_CHUNK", 256)
    monkeypatch.setattr(codegen_cuda, "WARP_ROW_MAX", 128)
    x = np.ones((1500,), dt)
    long_rows = np.ones((2, 200), dt)
    m = np.ones((33, 50), dt)
    f = jitgraph.jit(lambda x, lr, m: (jnp.sum(x), jnp.sum(lr, axis=1), jnp.sum(m, axis=1),
                                       jnp.sum(m, axis=0), jnp.mean(m)), device="cuda")
    s, long_sums, rows, cols, mean = (np.asarray(v) for v in f(x, long_rows, m))
    assert s.dtype == dt and float(s) == float(np.array(1500, dt))
    assert (long_sums == np.array(200, dt)).all()
    assert (rows == np.array(50, dt)).all() and (cols == np.array(33, dt)).all()
    assert float(mean) == 1.0
    src = f.lower(x, long_rows, m).source
    assert "_part_" in src                    # the long row took the split (two passes)


def test_layouts_gathers_and_converts_move_bits_exactly():
    r = np.random.default_rng(3)
    x = r.standard_normal((5, 6)).astype(BF16)
    h = r.standard_normal((5, 6)).astype(F16)
    idx = np.array([4, 0, 2])

    def f(x, h):
        t = jnp.concatenate([x.T, x[::-1].T], axis=1)
        return (t, jnp.pad(x, ((1, 0), (0, 2))), x[idx], h.astype(jnp.bfloat16),
                x.astype(jnp.float16), x.astype(jnp.float64), h.astype(jnp.int32))
    got = [np.asarray(v) for v in jitgraph.jit(f, device="cuda")(x, h)]
    want = f(x, h)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_device_conversions_match_ml_dtypes():
    """The device functions (what the simulator runs: the same Python as the CPU's) on
    every float16 and bfloat16 bit pattern, and on float32 values around the rounding
    boundaries."""
    bits = np.arange(0, 1 << 16, 97, dtype=np.uint16)
    for dt, dec in ((BF16, narrow.PYTHON["from_bf16"]), (F16, narrow.PYTHON["from_f16"])):
        want = bits.view(dt).astype(np.float32)
        got = np.array([dec(u) for u in bits], np.float32)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok], want[ok])
        assert np.isnan(got[~ok]).all()
    xs = np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, 65519.0, 65520.0, 2 ** -25, 3 * 2 ** -26,
                     -0.0, np.inf, -7e-39])
    with np.errstate(all="ignore"):
        for dt, enc in ((BF16, narrow.PYTHON["to_bf16"]), (F16, narrow.PYTHON["to_f16"])):
            np.testing.assert_array_equal(np.array([enc(v) for v in xs], np.uint16),
                                          xs.astype(dt).view(np.uint16))


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_device_arrays_of_16_bit_floats_round_trip(dt):
    """device_put stores the bits; jit reads device arrays and its own results as it reads
    host arrays; the host sees the values back in their own dtype."""
    x = np.linspace(-2, 2, 9).astype(dt)
    d = jitgraph.device_put(x)
    assert d.dtype == dt
    np.testing.assert_array_equal(np.asarray(d), x)
    f = jitgraph.jit(lambda a: a * 3.0 + 1.0, device="cuda")
    once = f(d)
    twice = f(once)
    assert once.dtype == dt and np.asarray(twice).dtype == dt
    want = (x.astype(np.float32) * 3 + 1).astype(dt)
    np.testing.assert_array_equal(np.asarray(once), want)
    np.testing.assert_array_equal(np.asarray(twice), (want.astype(np.float32) * 3 + 1).astype(dt))
    np.testing.assert_array_equal(np.asarray(d[2:4]), x[2:4])
