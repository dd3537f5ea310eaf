"""float16 and bfloat16: stored in 16 bits, computed in float32 (``core.bind`` widens each
primitive's 16-bit operands and rounds its float32 results back, XLA's float
normalization), on the CPU backend and eagerly.

Checked: the bit conversions the kernels call against NumPy's and ml_dtypes' casts (every
16-bit pattern; float32 and float64 values near every rounding boundary); compiled programs
against the reference interpreter at sizes that take the serial loops, the parallel loops and
BLAS; results within each type's tolerance of the float32 program; float32 accumulation;
promotion; gradients; errors."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import dtypes
from jitgraph.compiler import thresholds
from jitgraph.kernels import narrow

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
NARROW = [BF16, F16]
TOL = {BF16: 3e-2, F16: 4e-3}        # a few units in the last place, relative to the scale


def _f32(x):
    return np.asarray(x).astype(np.float32)


def _close(got, want, dt):
    got, want = _f32(got), _f32(want)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dt] * scale)


# ---------------------------------------------------------------- the conversions
@njit
def _each(fn, x, out):
    """``out[i] = fn(x[i])``: one of kernels/narrow.py's conversions, compiled as kernels
    call it."""
    for i in range(x.size):
        out[i] = fn(x[i])
    return out


_DECODE = (narrow.from_bf16, narrow.from_f16)
_ENCODE = (narrow.to_bf16, narrow.to_f16)


@pytest.mark.parametrize("which,dt", [(0, BF16), (1, F16)], ids=["bfloat16", "float16"])
def test_every_16_bit_pattern_widens_exactly(which, dt):
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(dt).astype(np.float32)
    got = _each(_DECODE[which], bits, np.empty(bits.size, np.float32))
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()
    # the sign of a NaN survives (the encoders keep it too)
    assert (np.signbit(got[nan]) == np.signbit(want[nan])).all()


def _boundaries(dt) -> np.ndarray:
    """float32 values at and around every rounding boundary of ``dt``: each 16-bit value,
    the midpoints between neighbours (ties), and one float32 step either side."""
    vals = np.arange(1 << 16, dtype=np.uint16).view(dt).astype(np.float32)
    vals = np.sort(vals[np.isfinite(vals)])
    mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
    both = np.concatenate([vals, mids])
    return np.concatenate([both, np.nextafter(both, np.float32(np.inf)),
                           np.nextafter(both, np.float32(-np.inf)),
                           np.float32([np.inf, -np.inf, 3e38, -3e38, 1e-45, -1e-45, 0.0])])


@pytest.mark.parametrize("which,dt", [(0, BF16), (1, F16)], ids=["bfloat16", "float16"])
def test_rounding_to_16_bits_matches_numpy(which, dt):
    rng = np.random.default_rng(0)
    random = rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([_boundaries(dt), random])
    with np.errstate(all="ignore"):
        want = x.astype(dt).view(np.uint16)
    got = _each(_ENCODE[which], x, np.empty(x.size, np.uint16))
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(dt)).all()
    # the Python twins (what the CUDA simulator runs) agree on a sample
    enc = narrow.PYTHON["to_bf16" if which == 0 else "to_f16"]
    sample = x[::997]
    with np.errstate(all="ignore"):
        py = np.array([enc(v) for v in sample], np.uint16)
    ok = ~np.isnan(sample)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(py[ok], sample.astype(dt).view(np.uint16)[ok])


@pytest.mark.parametrize("which,dt", [(0, BF16), (1, F16)], ids=["bfloat16", "float16"])
def test_float64_rounds_once_to_16_bits(which, dt):
    """float64 -> 16 bits through float32 rounded to odd equals the direct cast, where
    rounding to nearest twice (float64 -> float32 -> 16 bits) is wrong near ties."""
    rng = np.random.default_rng(1)
    b = _boundaries(dt).astype(np.float64)
    ulp = np.spacing(b.astype(np.float32)).astype(np.float64)
    near_ties = np.concatenate([b + ulp * 1e-6, b - ulp * 1e-6])   # off a float32 tie
    x = np.concatenate([near_ties, rng.standard_normal(100_000)
                        * np.exp(rng.uniform(-40, 40, 100_000))])
    x = x[np.isfinite(x)]
    with np.errstate(all="ignore"):
        want = x.astype(dt).view(np.uint16)
        twice = x.astype(np.float32).astype(dt).view(np.uint16)
    odd = _each(narrow.odd_f32, x, np.empty(x.size, np.float32))
    got = _each(_ENCODE[which], odd, np.empty(x.size, np.uint16))
    np.testing.assert_array_equal(got, want)
    assert (twice != want).any()        # the values do exercise double rounding


# ---------------------------------------------------------------- dtype rules
def test_names_promotion_and_limits():
    assert jnp.bfloat16 == BF16 and jnp.float16 == F16
    assert jnp.zeros(3, jnp.bfloat16).dtype == BF16
    assert jnp.asarray([1.5, 2.0], dtype="bfloat16").dtype == BF16
    assert jnp.asarray(np.ones(2, F16)).dtype == F16           # kept, not widened
    x = jnp.ones(4, jnp.bfloat16)
    assert (x * 2.0).dtype == BF16 and (x + 1).dtype == BF16     # weak scalars adopt it
    assert (x + np.ones(4, np.float32)).dtype == np.float32
    assert jnp.result_type(jnp.bfloat16, jnp.float16) == np.float32   # as JAX and ml_dtypes
    assert jnp.finfo(jnp.bfloat16).eps == 2.0 ** -7
    assert jnp.finfo(jnp.float16).max == 65504.0
    assert jnp.isdtype(jnp.bfloat16, "real floating")
    assert dtypes.is_float(BF16) and dtypes.storage(BF16) == np.uint16
    # uint16, which kernels also hold a 16-bit float's bits in, stays an integer
    assert jnp.zeros(3, np.uint16).dtype == np.uint16
    assert (jnp.ones(3, np.uint16) + jnp.ones(3, jnp.float16)).dtype == np.float32


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_every_primitive_computes_in_float32_and_rounds_once(dt):
    """The graph widens, computes in float32 and rounds back: ``tanh(x) * x`` rounds after
    each primitive, the sum accumulates in float32 (1000 ones: bfloat16 accumulation would
    stop at 256)."""
    x = np.ones(1000, dt)
    g = jitgraph.make_graph(lambda x: jnp.sum(jnp.tanh(x) * x))(x)
    names = [n.prim.name for n in g.nodes]
    assert names.count("convert") >= 4 and "reduce_sum" in names
    sums = [n for n in g.nodes if n.prim.name == "reduce_sum"]
    assert all(n.inputs[0].aval.dtype == np.float32 for n in sums)
    assert float(jnp.sum(x)) == 1000.0 and float(jitgraph.jit(jnp.sum)(x)) == 1000.0
    # a widening straight back is folded away (the passes)
    lowered = jitgraph.jit(lambda x: jnp.reshape(x, (10, 100)).T).lower(x)
    assert "convert" not in str(lowered.graph)


# ---------------------------------------------------------------- compiled against reference
def _mlp(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    h = jnp.concatenate([h, h[:, :3]], axis=1)
    logits = jnp.pad(h, ((0, 0), (1, 0)))[:, :6] @ p["w2"]
    m = jnp.max(logits, axis=1, keepdims=True)
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=1)) + m[:, 0]
    return jnp.mean(lse - logits[jnp.arange(x.shape[0]), y])


def _mlp_data(dt, n, d=20, seed=0):
    r = np.random.default_rng(seed)
    p = {"w1": (r.standard_normal((d, 16)) * 0.3).astype(dt), "b1": np.zeros(16, dt),
         "w2": (r.standard_normal((6, 5)) * 0.3).astype(dt)}
    return p, r.standard_normal((n, d)).astype(dt), r.integers(0, 5, n)


@pytest.mark.parametrize("dt", NARROW, ids=str)
@pytest.mark.parametrize("n", [7, 5000], ids=["serial", "parallel"])
def test_training_step_matches_reference_and_float32(dt, n):
    """The value and gradient of an MLP with cross-entropy, compiled, against the reference
    interpreter (1 unit in the last place: float32 sums may associate differently before
    the one rounding) and against the float32 program (the type's tolerance); ``n = 5000``
    rows take the parallel loops."""
    assert n * 16 < thresholds.PARALLEL_MIN_WORK or n * 16 >= thresholds.PARALLEL_MIN_WORK
    p, x, y = _mlp_data(dt, n)
    vg = jitgraph.value_and_grad(_mlp)
    loss, grads = jitgraph.jit(vg)(p, x, y)
    ref_loss, ref_grads = vg(p, x, y)
    assert loss.dtype == dt and all(g.dtype == dt for g in grads.values())
    eps = float(jnp.finfo(dt).eps)
    for got, want in [(loss, ref_loss)] + [(grads[k], ref_grads[k]) for k in grads]:
        np.testing.assert_allclose(_f32(got), _f32(want), rtol=eps, atol=eps * 1e-2)
    p32 = jitgraph.tree_map(lambda a: a.astype(np.float32), p)
    l32, g32 = vg(p32, x.astype(np.float32), y)
    _close(loss, l32, dt)
    for k in grads:
        _close(grads[k], g32[k], dt)


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_blas_size_product_in_16_bits(dt):
    """A product above the BLAS threshold (float32 sgemm on the widened operands, one
    rounding of the float32 result) and one below it (the compiled loop)."""
    r = np.random.default_rng(2)
    big = 256
    assert big ** 3 >= thresholds.SMALL_PRODUCT
    a, b = (r.standard_normal((big, big)).astype(dt) for _ in range(2))
    for m in (a, a[:9, :9]):
        k = b[: m.shape[1], : m.shape[1]]
        got = jitgraph.jit(lambda u, v: u @ v)(m, k)
        assert got.dtype == dt
        want = (m.astype(np.float32) @ k.astype(np.float32)).astype(dt)
        np.testing.assert_allclose(_f32(got), _f32(want), rtol=float(jnp.finfo(dt).eps))


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_layouts_and_conversions_move_bits_exactly(dt):
    r = np.random.default_rng(3)
    x = r.standard_normal((300, 240)).astype(dt)       # past the parallel threshold
    idx = np.array([4, 0, 299, 2])
    h = r.standard_normal((6, 5)) * 1e3

    def f(x, h):
        return (jnp.concatenate([x.T, x[::-1].T], axis=1), jnp.pad(x, ((1, 0), (0, 2))),
                x[idx], jnp.where(x > 0, x, -x), jnp.asarray(h).astype(dt),
                x.astype(jnp.float64), x.astype(jnp.int32), (x > 0.5).astype(dt))
    got = jitgraph.jit(f)(x, h)
    want = f(x, h)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch):
    monkeypatch.setattr(dtypes, "bfloat16", None)
    with pytest.raises(ImportError, match="pip install ml_dtypes"):
        dtypes.requested("bfloat16")


def test_one_function_traced_per_dtype():
    f = jitgraph.jit(lambda x: x * 2.0 + 1.0)
    outs = [f(np.full(3, 1.25, d)) for d in (BF16, F16, np.float32)]
    assert [o.dtype for o in outs] == [BF16, F16, np.float32]
    assert all(float(o[0]) == 3.5 for o in outs)


def test_gradient_of_a_bfloat16_function_against_float32_central_differences():
    """Gradients flow through 16-bit values (the converts' VJPs): the bfloat16 gradient
    of a smooth loss is within bfloat16's tolerance of float64 central differences."""
    r = np.random.default_rng(4)
    w = (r.standard_normal(8) * 0.5).astype(BF16)

    def loss(w):
        return jnp.sum(jnp.sin(w) * w + 0.5 * w ** 2)
    g = jitgraph.jit(jitgraph.grad(loss))(w)
    assert g.dtype == BF16
    w64 = w.astype(np.float64)
    f64 = lambda v: np.sum(np.sin(v) * v + 0.5 * v ** 2)  # noqa: E731
    fd = np.array([(f64(w64 + e) - f64(w64 - e)) / 2e-6 for e in np.eye(8) * 1e-6])
    np.testing.assert_allclose(_f32(g), fd, atol=3e-2 * max(1.0, np.abs(fd).max()))


def test_ml_dtypes_is_imported_only_when_bfloat16_is_needed():
    """``import jitgraph`` leaves ml_dtypes (0.7 s) alone; a bfloat16 array made after it (the
    user imported ml_dtypes) is still computed as bfloat16, and asking for bfloat16 by name
    imports it."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent('''
        import sys
        import numpy as np
        import jitgraph, jitgraph.numpy as jnp
        assert "ml_dtypes" not in sys.modules
        assert float(jitgraph.jit(lambda x: (x * 2.0).sum())(np.ones(3, np.float32))) == 6.0
        assert jnp.result_type(np.float16, np.float32) == np.float32
        assert "ml_dtypes" not in sys.modules
        import ml_dtypes
        x = np.array([0.5, 1.5, 2.5], ml_dtypes.bfloat16)
        y = jitgraph.jit(lambda x: x * 2.0 + 1.0)(x)
        assert y.dtype == x.dtype and y.tolist() == [2.0, 4.0, 6.0], y
        g = jitgraph.grad(lambda x: (x * x).sum().astype(np.float32))(x)
        assert g.dtype == x.dtype and g.tolist() == [1.0, 3.0, 5.0], g
        print(jnp.zeros(2, "bfloat16").dtype, jnp.finfo(x.dtype).bits)
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["bfloat16", "16"]
