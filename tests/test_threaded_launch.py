"""Threaded loop kernels run by launchers (``jitgraph/compiler/threaded.py``): a program whose
driver runs in Python threads its large loops as serial kernels over a range of rows, split
over Numba's threads by a launcher compiled from LLVM IR (no ``prange``, half the compile).

Checked here: such programs take that path (and no other), compute what the reference
interpreter computes, give the same bits on one thread and on several (each row is computed
by one thread, whatever the split, including row counts the threads do not divide), and a
launcher given wrong arguments raises ``TypeError`` instead of reading the wrong memory.
"""
from __future__ import annotations

import os

import numba
import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler import threaded
from jitgraph.compiler import thresholds as T

pytestmark = pytest.mark.skipif(not threaded.available(),
                                reason="launchers need Linux and a Numba numba_patches checked")


def layer(x, w, g):
    """A product, then rows of a layer norm and a GELU: loops of B x N elements."""
    h = x @ w
    mu = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mu) ** 2, axis=-1, keepdims=True)
    return nn.gelu((h - mu) / jnp.sqrt(var + 1e-5) * g)


def shapes(rows: int) -> tuple:
    """Inputs whose loops have ``rows`` rows and at least the threshold's elements."""
    n = max(64, -(-T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS // rows))
    r = np.random.default_rng(rows)
    return (r.standard_normal((rows, 16)).astype(np.float32),
            (r.standard_normal((16, n)) * 0.3).astype(np.float32),
            r.uniform(0.5, 1.5, n).astype(np.float32))


@pytest.fixture(scope="module", params=[256, 13], ids=["even", "odd_rows"])
def compiled(request):
    args = shapes(request.param)
    f = jitgraph.jit(layer)
    out = f(*args)
    return f, args, out


def test_large_loops_take_the_launcher_path(compiled):
    f, args, _ = compiled
    low = f.lower(*args)
    kernels = [k for k in low.kernels if k.name.startswith("loop_")]
    launched = [k for k in kernels if threaded.rows_of(k.source) is not None]
    assert launched, low.source
    assert not any("prange(" in k.source for k in launched)
    assert all(f"threads_{k.name}(" in low.source for k in launched)
    assert {launch.name for launch in low.program.launches} == {k.name for k in launched}
    # each launcher's rows are its kernel's outer dim: the program's batch
    assert {threaded.rows_of(k.source) for k in launched} == {args[0].shape[0]}


def test_values_match_the_reference(compiled):
    f, args, out = compiled
    g = jitgraph.make_graph(layer)(*args)
    [ref] = jitgraph.interpret(g, list(args))
    h = args[0].astype(np.float64) @ args[1]
    mu = h.mean(-1, keepdims=True)
    z = (h - mu) / np.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * args[2]
    expect = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4)


def test_same_bits_on_one_thread_and_on_all(compiled):
    f, args, out = compiled
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = f(*args)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, out)
    np.testing.assert_array_equal(f(*args), out)


def test_gradients_through_launched_loops_match_finite_differences():
    x, w, g = shapes(64)
    loss = jitgraph.jit(jitgraph.grad(lambda w, x, g: jnp.sum(layer(x, w, g) ** 2)))
    assert "threads_loop_" in loss.lower(w, x, g).source
    gw = np.asarray(loss(w, x, g), np.float64)
    f64 = lambda w: float(np.sum(np.asarray(  # noqa: E731
        jitgraph.jit(layer)(x.astype(np.float64), w, g.astype(np.float64)), np.float64) ** 2))
    r = np.random.default_rng(3)
    for _ in range(3):
        i, j = r.integers(0, w.shape[0]), r.integers(0, w.shape[1])
        e = np.zeros_like(w, dtype=np.float64)
        e[i, j] = 1e-4
        w64 = w.astype(np.float64)
        fd = (f64(w64 + e) - f64(w64 - e)) / 2e-4
        assert abs(fd - gw[i, j]) <= 2e-2 * max(1.0, abs(fd)), (i, j, fd, gw[i, j])


def test_a_launcher_refuses_wrong_arguments(compiled):
    f, args, _ = compiled
    program = f.lower(*args).program
    launch = program.launches[0]
    fn = getattr(program.module, threaded.PREFIX + launch.name)
    arrays = [np.zeros(8, np.dtype(d)) for d in launch.dtypes]
    with pytest.raises(TypeError, match="one-dimensional C-contiguous"):
        fn(*arrays[:-1])                                    # one argument short
    wrong = [np.zeros(8, np.float64 if d != "float64" else np.float32) for d in launch.dtypes]
    with pytest.raises(TypeError, match=launch.name):
        fn(*wrong)                                          # other dtypes
    strided = [np.zeros(16, np.dtype(d))[::2] for d in launch.dtypes]
    with pytest.raises(TypeError):
        fn(*strided)                                        # not contiguous
    with pytest.raises(TypeError):
        fn(*([None] * len(launch.dtypes)))                  # not arrays


def test_launcher_ir_is_built_for_every_dtype():
    """One launcher per kernel argument dtype the generator passes (LLVM verifies the IR)."""
    from jitgraph.compiler import native
    launch = threaded.Launch("loop_x", "entry_x", ("float32", "float64", "int64", "int32",
                                                    "bool", "uint8", "float16"), 9)
    import llvmlite.binding as llvm
    text = native.IR_GLOBALS + threaded.IR_DECLARATIONS + threaded.launcher_ir(0, launch)
    llvm.parse_assembly(text).verify()


# ------------------------------------------------------------------ hand-written row kernels
@numba.njit(nogil=True)
def _square_rows(lo, hi, x, scale, out, n):
    """A row kernel as ``kernels.threads.run_rows`` runs them: rows lo:hi of n."""
    for i in range(lo, hi):
        acc = 0.0
        for j in range(x.shape[0] // n):
            acc += x[i * (x.shape[0] // n) + j] ** 2
        out[i] = acc * scale[0]


def _row_operands(n: int):
    x = np.random.default_rng(n).standard_normal(n * 7)
    return x, np.array([0.5]), (x.reshape(n, 7) ** 2).sum(1) * 0.5


@pytest.mark.parametrize("n", [1, 13, 1000])
def test_hand_written_row_kernels_run_on_numbas_threads(n, monkeypatch):
    """``run_rows`` takes the launcher (one pool with the generated kernels): no Python
    threads start, every row is computed once, and one launcher serves every size."""
    from jitgraph.kernels import threads
    assert threads._ROW_POOL == [threaded.row_pool]
    monkeypatch.setattr(threads, "run_split", lambda *a: pytest.fail("Python threads ran"))
    x, scale, want = _row_operands(n)
    out = np.full(n, np.nan)
    threads.run_rows(_square_rows, n, x, scale, out)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    keys = [k for k in threaded._ROW_LAUNCHERS if k[0] is _square_rows]
    assert len(keys) == 1 and keys[0][1] == ("float64", "float64", "float64", "size")


def test_row_kernels_the_launcher_cannot_take_run_on_python_threads():
    """A 2-D operand (the launchers take flat arrays and sizes): the rows still run, split
    over Python threads, with the same values."""
    from jitgraph.kernels import threads

    @numba.njit(nogil=True)
    def rows2d(lo, hi, x, out, n):
        for i in range(lo, hi):
            out[i] = x[i].sum()
    x = np.arange(40.0).reshape(10, 4)
    out = np.zeros(10)
    assert not threaded.row_pool(rows2d, 10, (x, out))
    threads.run_rows(rows2d, 10, x, out)
    np.testing.assert_array_equal(out, x.sum(1))


NEW_KERNEL_UNDER_THE_LOCK = """
import numba, numpy as np
from numba.core.compiler_lock import global_compiler_lock
import jitgraph
from jitgraph.kernels import threads

@numba.njit(nogil=True)
def fresh_rows(lo, hi, x, out, n):
    for i in range(lo, hi):
        out[i] = 2.0 * x[i]

x, out = np.arange(64.0), np.zeros(64)
threads._ROW_POOL[:] = []               # the pool declines, as in a serial child
with global_compiler_lock:              # as a program's first call holds it
    threads.run_rows(fresh_rows, 64, x, out)
assert (out == 2.0 * x).all()
print("ok")
"""


def test_python_threads_run_a_new_kernel_while_the_caller_holds_numbas_lock():
    """A program's first call holds Numba's compiler lock while it runs. Where its row
    kernels take the Python threads (a child forked after OpenMP ran: no pool), a kernel
    Numba has not compiled yet is compiled by the calling thread first; the threads, which
    would wait for that lock while the caller waited for them, only run it. (In a new
    process: a hang must not take the lock from the rest of the suite.)"""
    import subprocess
    import sys
    try:
        p = subprocess.run([sys.executable, "-c", NEW_KERNEL_UNDER_THE_LOCK],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NUMBA_NUM_THREADS": "2"})
    except subprocess.TimeoutExpired:
        pytest.fail("run_rows hung: its threads waited for the compiler lock the caller held")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_a_row_kernel_numba_cannot_compile_falls_back_once():
    """No launcher for a kernel that does not compile for the arguments' types: the pool
    declines (once: the answer is kept) and the caller's own call reports the error."""
    @numba.njit(nogil=True)
    def bad_rows(lo, hi, x, n):
        for i in range(lo, hi):
            x[i] = "text"           # a string into a float array: a typing error
    x = np.zeros(4)
    assert not threaded.row_pool(bad_rows, 4, (x,))
    assert threaded._ROW_LAUNCHERS[(bad_rows, ("float64", "size"))] is False
    assert not threaded.row_pool(bad_rows, 4, (x,))
