"""The products a driver in Python calls, as built-ins written in LLVM IR
(``jitgraph/compiler/gemm_launchers.py``).

Checked: every function against float64 NumPy for both dtypes, both transposes of each
operand, alpha/beta with an update in place, empty contractions and empty outputs, products
split by rows and by columns (taller and wider than the thread count), batches; bit for bit
against ``kernels/matmul.py``'s Numba functions they replace (the same ``?gemm`` calls on the
same bands); arguments they do not take (a clear error, or Numba's function); a program
whose driver calls them, against the reference and with Numba's helpers; and that a process
builds and runs them without importing Numba."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import gemm_launchers
from jitgraph.compiler.host import one_blas_thread

pytestmark = pytest.mark.skipif(not gemm_launchers.available(),
                                reason="product built-ins: Linux with a threading layer")


@pytest.fixture(scope="module")
def fns():
    out = gemm_launchers.functions()
    assert out is not None and set(out) == set(gemm_launchers.NAMES)
    return out


def _operands(rng, name, dt, m, n, k, ta, tb, batch=3):
    lead = (batch,) if gemm_launchers.NAMES[name] else ()
    a = rng.standard_normal(lead + ((k, m) if ta else (m, k))).astype(dt)
    b = rng.standard_normal(lead + ((n, k) if tb else (k, n))).astype(dt)
    c = rng.standard_normal(lead + (m, n)).astype(dt)
    return a, b, c


def _expected(alpha, a, ta, b, tb, beta, c):
    op_a = np.swapaxes(a, -1, -2) if ta else a
    op_b = np.swapaxes(b, -1, -2) if tb else b
    return alpha * (op_a.astype(np.float64) @ op_b.astype(np.float64)) + beta * c


# (m, n, k): tall (split by rows), wide (by columns), one element, more rows than threads
SHAPES = [(9, 4, 5), (3, 40, 7), (1, 1, 1), (64, 64, 16), (130, 3, 2)]


@pytest.mark.parametrize("name", list(gemm_launchers.NAMES))
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_products_match_float64_numpy(fns, name, dt):
    rng = np.random.default_rng(0)
    tol = 2e-5 if dt == np.float32 else 1e-12
    for m, n, k in SHAPES:
        for ta in (0, 1):
            for tb in (0, 1):
                for alpha, beta in ((1.0, 0.0), (-0.5, 1.0), (2.0, 0.25)):
                    a, b, c = _operands(rng, name, dt, m, n, k, ta, tb)
                    want = _expected(alpha, a, ta, b, tb, beta, c)
                    with one_blas_thread():
                        fns[name](alpha, a, ta, b, tb, beta, c)
                    assert c.dtype == dt
                    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * k,
                                               err_msg=f"{(m, n, k, ta, tb, alpha, beta)}")


@pytest.mark.parametrize("name", list(gemm_launchers.NAMES))
def test_empty_contractions_scale_the_output_and_empty_outputs_are_left_alone(fns, name):
    rng = np.random.default_rng(1)
    for dt in (np.float32, np.float64):
        a, b, c = _operands(rng, name, dt, 4, 5, 0, 0, 1)
        c[..., 0, 0] = -0.0
        before = c.copy()
        fns[name](1.0, a, 0, b, 1, 0.5, c)
        np.testing.assert_array_equal(c, (0.5 * before.astype(np.float64)).astype(dt))
        assert np.signbit(c[..., 0, 0]).all()          # beta * -0.0, as Numba's loop gives
        c[...] = np.nan                                 # beta 0: zeros, not NaN * 0
        fns[name](1.0, a, 0, b, 1, 0.0, c)
        assert (c == 0).all()
        a, b, c = _operands(rng, name, dt, 0, 5, 3, 0, 0)
        fns[name](1.0, a, 0, b, 0, 0.0, c)              # no rows: nothing to do
        assert c.size == 0


def test_bit_for_bit_the_numba_functions_they_replace(fns):
    """The same ``?gemm`` calls on the same bands as ``kernels/matmul.py``'s functions: equal
    bits, at one thread and at two (rows, columns and batches split)."""
    numba = pytest.importorskip("numba")
    from jitgraph.kernels import matmul
    rng = np.random.default_rng(2)
    threads = numba.get_num_threads()
    try:
        for nt in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(nt)
            for name in gemm_launchers.NAMES:
                for m, n, k in ((37, 5, 11), (5, 37, 11), (64, 48, 33)):
                    for ta, tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
                        a, b, c = _operands(rng, name, np.float32, m, n, k, ta, tb)
                        c2 = c.copy()
                        with one_blas_thread():
                            fns[name](0.75, a, ta, b, tb, 0.5, c)
                            getattr(matmul, name)(0.75, a, ta, b, tb, 0.5, c2)
                        assert c.tobytes() == c2.tobytes(), (nt, name, m, n, k, ta, tb)
    finally:
        numba.set_num_threads(threads)


def test_arguments_they_do_not_take_get_a_clear_error_or_numba(fns):
    gemm = fns["par_gemm"]
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 2), np.float32)
    c = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"par_gemm: op\(a\) \(3, 4\) @ op\(b\) \(3, 2\)"):
        gemm(1.0, a, 0, np.ones((3, 2), np.float32), 0, 0.0, c)
    with pytest.raises(TypeError, match="par_gemm: expected C-contiguous float32 or float64"):
        gemm(1.0, a.astype(np.float64), 0, b, 0, 0.0, c)            # mixed dtypes
    with pytest.raises(TypeError, match="C-contiguous"):
        gemm(1.0, np.asfortranarray(a), 0, b, 0, 0.0, c)
    with pytest.raises(TypeError, match="int32"):
        gemm(1.0, a.astype(np.int32), 0, b.astype(np.int32), 0, 0.0, c.astype(np.int32))
    with pytest.raises(TypeError, match="2 dimensions"):
        gemm(1.0, a[None], 0, b, 0, 0.0, c)
    with pytest.raises(TypeError, match="3 dimensions"):
        fns["par_batched_gemm"](1.0, a, 0, b, 0, 0.0, c)
    ro = c.copy()
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        gemm(1.0, a, 0, b, 0, 0.0, ro)
    assert (ro == 0).all()
    with pytest.raises(TypeError):
        gemm(1.0, a, 0, b, 0, 0.0)                                 # argument count
    # NumPy scalars and bool flags are no exact float or int: Numba's function computes them
    gemm(np.float32(2.0), a, False, b, np.int64(0), 0.0, c)
    np.testing.assert_array_equal(c, np.full((3, 2), 8.0, np.float32))


def test_a_program_calls_them_and_matches_the_reference_and_numba(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))

    def step(w1, w2, x):
        def loss(w1, w2):
            h = jnp.tanh(x @ w1)
            att = jnp.einsum("bik,bjk->bij", h, h)             # a batch of products
            return jnp.sum((att @ h) @ w2)
        g1, g2 = jitgraph.grad(loss, argnums=(0, 1))(w1, w2)
        return w1 - 0.1 * g1, w2 - 0.1 * g2

    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((48, 64)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((64, 8)) * 0.1).astype(np.float32)
    x = rng.standard_normal((4, 96, 48)).astype(np.float32)
    f = jitgraph.jit(step)
    got = f(w1, w2, x)
    program = f.lower(w1, w2, x).program
    assert "par_batched_gemm" in program.product_builtins or \
        "blas_gemm" in program.product_builtins
    ref = step(w1.astype(np.float64), w2.astype(np.float64), x.astype(np.float64))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5)
    monkeypatch.setenv("JITGRAPH_LOOP_IR", "0")                 # Numba's helpers
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "numba"))
    g = jitgraph.jit(step)
    by_numba = g(w1, w2, x)
    assert g.lower(w1, w2, x).program.product_builtins == ()
    for a, b in zip(got, by_numba):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_built_and_run_without_importing_numba(tmp_path):
    code = textwrap.dedent('''
        import sys
        import numpy as np
        from jitgraph.compiler import gemm_launchers
        fns = gemm_launchers.functions()
        a = np.arange(12, dtype=np.float64).reshape(3, 4)
        c = np.zeros((3, 3))
        fns["par_gemm"](1.0, a, 0, a, 1, 0.0, c)
        assert np.array_equal(c, a @ a.T), c
        print("numba" in sys.modules)
    ''')
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_ir_releases_the_gil_only_after_its_checks():
    text = gemm_launchers.module_ir()
    body = text[text.index("define internal i32 @jgp_par_gemm_f32"):]
    body = body[:body.index("\n}\n")]
    assert body.index("label %bad") < body.index("PyEval_SaveThread") < \
        body.index("PyEval_RestoreThread")


def test_a_program_with_small_products_starts_no_threads(tmp_path):
    """Products too small to split need ``blas_gemm`` alone, built without the threading
    layer: a process that runs only such programs starts no threads (and a child it forks
    later may still run threaded kernels)."""
    code = textwrap.dedent('''
        import numpy as np
        import jitgraph, jitgraph.numpy as jnp
        from jitgraph.compiler.state import STATE
        f = jitgraph.jit(lambda w, x: jnp.tanh(x @ w) @ w.T + 1.0)
        r = np.random.default_rng(0)
        w = r.standard_normal((5, 4)).astype(np.float32)
        x = r.standard_normal((6, 5)).astype(np.float32)
        np.testing.assert_allclose(f(w, x), np.tanh(x @ w) @ w.T + 1.0, rtol=1e-5, atol=1e-5)
        prog = f.lower(w, x).program
        print(prog.product_builtins, bool(STATE.patches.get("parallel")),
              "gemm_launchers" in STATE.patches)
    ''')
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["('blas_gemm',)", "False", "False"]


# (m, n, k, parts): deep products, split along the contraction (kernels/gemm_split.py)
DEEP = [(25, 32, 9000, 4), (3, 7, 4096, 2), (7, 1, 20000, 8), (64, 64, 8192, 4)]


def test_deep_products_are_split_along_the_contraction():
    from jitgraph.kernels import gemm_split
    for m, n, k, parts in DEEP:
        assert gemm_split.deep_parts(m, n, k) == parts
    assert gemm_split.deep_parts(25, 32, 4095) == 0            # too short a contraction
    assert gemm_split.deep_parts(600, 64, 4096) == 0           # too short beside 600 rows
    assert gemm_split.deep_parts(300, 300, 1 << 20) == 0       # too large an output


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_deep_products_match_float64_numpy(fns, dt):
    """Deep products at every transpose, with alpha and an update in place, and beta 0 over
    an output holding NaN (not read): against float64 NumPy."""
    rng = np.random.default_rng(5)
    tol = 1e-5 if dt == np.float32 else 1e-12
    for m, n, k, _ in DEEP:
        for ta in (0, 1):
            for tb in (0, 1):
                for alpha, beta in ((1.0, 0.0), (-0.5, 1.0), (2.0, 0.25)):
                    a, b, c = _operands(rng, "par_gemm", dt, m, n, k, ta, tb)
                    if beta == 0:
                        c[...] = np.nan
                    want = _expected(alpha, a, ta, b, tb, beta, np.nan_to_num(c))
                    with one_blas_thread():
                        fns["par_gemm"](alpha, a, ta, b, tb, beta, c)
                    scale = np.abs(want).max()
                    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * scale,
                                               err_msg=f"{(m, n, k, ta, tb, alpha, beta)}")


def test_deep_products_bit_for_bit_at_any_thread_count_and_with_numba(fns):
    """A deep product's parts depend on its shape alone: the same bits on one thread and two,
    and the same as ``kernels/matmul.py``'s ``par_gemm`` (the same ``?gemm`` calls on the same
    parts, added in the same order)."""
    numba = pytest.importorskip("numba")
    from jitgraph.kernels import matmul
    rng = np.random.default_rng(6)
    threads = numba.get_num_threads()
    cases = [(m, n, k, ta, tb, dt) for m, n, k, _ in DEEP[:3] for ta, tb in ((0, 0), (1, 0),
             (0, 1), (1, 1)) for dt in (np.float32, np.float64)]
    operands = [(_operands(rng, "par_gemm", dt, m, n, k, ta, tb), ta, tb)
                for m, n, k, ta, tb, dt in cases]
    seen = {}
    try:
        for nt in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(nt)
            for i, ((a, b, c), ta, tb) in enumerate(operands):
                for beta in (0.0, 0.5):
                    c1, c2 = c.copy(), c.copy()
                    with one_blas_thread():
                        fns["par_gemm"](0.75, a, ta, b, tb, beta, c1)
                        matmul.par_gemm(0.75, a, ta, b, tb, beta, c2)
                    assert c1.tobytes() == c2.tobytes(), (nt, cases[i], beta)
                    assert seen.setdefault((i, beta), c1.tobytes()) == c1.tobytes(), \
                        (nt, cases[i], beta)
    finally:
        numba.set_num_threads(threads)
