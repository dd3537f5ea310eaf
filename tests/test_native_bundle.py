"""Native bundles (``jitgraph/compiler/native.py``): a process that has not imported Numba runs
cached programs from their machine code alone, with the same results as the Numba path.

Across processes: a first process compiles (and writes the bundles after each program's first
call), a second one runs the same programs without importing Numba, bit for bit the same.
In this process: the wrappers' type checks (a wrong argument type takes the fallback, never
the machine code), exceptions raised by compiled code, damaged bundles, the ELF reader."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import native
from jitgraph.compiler.backends import cpu_program

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not native.enabled(), reason="native bundles: Linux only")

CHILD = textwrap.dedent('''
    import hashlib, json, sys, warnings
    import numpy as np
    import jitgraph
    import jitgraph.numpy as jnp
    from jitgraph import nn
    from jitgraph.compiler import threaded, thresholds
    thresholds._TAIL_MIN[:] = [4 << 20]    # pair a loop and its product from 4 MiB (tailed)

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        h = jnp.tanh(x @ w1 + b1)
        return -jnp.mean(jnp.sum(nn.log_softmax(h @ w2 + b2) * y, axis=1))

    @jitgraph.jit
    def train_step(params, x, y):          # products: a Python driver calling kernels
        l, g = jitgraph.value_and_grad(loss)(params, x, y)
        return [p - 0.1 * d for p, d in zip(params, g)], l

    @jitgraph.jit
    def small(a, b):                       # a compiled driver
        return jnp.exp(-a * a) * 3.0 + b

    @jitgraph.jit
    def rows(v):                           # large enough for threads: a prange kernel
        return jnp.sum(jnp.tanh(v) * 2.0 + 1.0, axis=1)

    @jitgraph.jit
    def wide(x, w):                        # a product, then a loop a launcher threads
        return jnp.tanh(x @ w) * 2.0 + 1.0

    @jitgraph.jit
    def tailed(x, w):                      # a threaded loop, the product as its tail
        return jnp.tanh(x) @ w

    sized = jitgraph.jit(lambda x, y: train_step.fun([W1, B1, W2, B2], x, y)[1],
                         dynamic_dims={"x": 0, "y": 0})     # sizes as runtime arguments

    r = np.random.default_rng(0)
    W1, B1 = r.standard_normal((6, 16)).astype(np.float32), np.zeros(16, np.float32)
    W2, B2 = r.standard_normal((16, 4)).astype(np.float32), np.zeros(4, np.float32)
    x = r.standard_normal((32, 6)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[r.integers(0, 4, 32)]
    a = r.standard_normal((5, 7))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params = [W1, B1, W2, B2]
        losses = []
        for _ in range(3):
            params, l = train_step(params, x, y)
            losses.append(float(l))
        s = small(a, 1.5)
        s2 = small(a.T, 2.0)               # new sizes: a program with runtime sizes
        d = [float(sized(x[:n], y[:n])) for n in (32, 9, 17)]
        v = np.linspace(-3, 3, 1 << 17, dtype=np.float32).reshape(256, 512)
        big = rows(v)
        xw = r.standard_normal((256, 32)).astype(np.float32)
        ww = (r.standard_normal((32, 1024)) * 0.2).astype(np.float32)
        wide_out = wide(xw, ww)
        xt = r.standard_normal((2048, 640)).astype(np.float32)
        wt = (r.standard_normal((640, 64)) * 0.1).astype(np.float32)
        tail_out = tailed(xt, wt)
    digest = lambda arrays: hashlib.sha256(b"".join(np.ascontiguousarray(v).tobytes()
                                                    for v in arrays)).hexdigest()
    programs = [train_step.lower(params, x, y).program, small.lower(a, 1.5).program,
                wide.lower(xw, ww).program, tailed.lower(xt, wt).program]
    print(json.dumps({"losses": losses, "params": digest(params), "small": digest([s, s2]),
                      "rows": digest([big]), "rows_sum": float(big.sum()),
                      "parallel": threaded.is_threaded(rows.lower(v).source),
                      "wide": digest([wide_out]),
                      "wide_error": float(np.abs(wide_out - (np.tanh(xw @ ww) * 2 + 1)).max()),
                      "launched": "threads_loop_" in wide.lower(xw, ww).source,
                      "tailed": digest([tail_out]),
                      "tail_error": float(np.abs(tail_out - np.tanh(xt) @ wt).max()),
                      "paired": threaded.TAIL_PREFIX in tailed.lower(xt, wt).source,
                      "sized": d, "numba_imported": "numba" in sys.modules,
                      "info": jitgraph.cache_info(),
                      "native": [p.native for p in programs],
                      "numba_compiles": [p.numba_compiles() for p in programs],
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
''')


def run_child(tmp: pathlib.Path, cache: pathlib.Path, **env) -> dict:
    script = tmp / "child.py"
    script.write_text(CHILD)
    e = dict(os.environ, JITGRAPH_CACHE_DIR=str(cache), OMP_NUM_THREADS="1", **env)
    e.pop("JITGRAPH_LOG", None)
    p = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native")
    cache = tmp / "cache"
    first = run_child(tmp, cache)
    second = run_child(tmp, cache)
    return tmp, cache, first, second


def test_first_process_compiles_and_writes_bundles(two_processes):
    _, cache, first, _ = two_processes
    assert first["numba_imported"] and first["native"] == [False] * 4
    assert first["info"]["native_loads"] == 0
    bundles = list(cache.glob("*.native"))
    assert len(bundles) >= 7, bundles   # step, two small, the sized program, rows, wide, tailed
    assert not first["warnings"], first["warnings"]


def test_second_process_runs_without_numba_and_gets_the_same_bits(two_processes):
    _, _, first, second = two_processes
    assert not second["numba_imported"], "a warm process imported Numba"
    assert second["native"] == [True] * 4
    # every program came from disk (two of them with sizes as runtime arguments), natively
    assert second["info"]["native_loads"] == second["info"]["disk_hits"] == 7
    assert second["info"]["dynamic_compiles"] == 2
    assert second["numba_compiles"] == [0] * 4
    for key in ("losses", "params", "small", "sized", "rows", "wide", "tailed"):
        assert second[key] == first[key], key
    # the product tail ran from its launcher, from the bundle too
    assert first["paired"] and first["tail_error"] < 1e-4
    # the threaded loop ran from its launcher, in the bundle too, and got the right numbers
    assert first["launched"] and first["wide_error"] < 1e-5
    # the numbers themselves: tanh is odd and the ramp symmetric: the rows sum to the count
    assert first["parallel"] and abs(first["rows_sum"] - 256 * 512) < 1.0
    assert first["losses"][2] < first["losses"][0]      # and the training step trains
    assert not second["warnings"], second["warnings"]


def test_damaged_bundles_take_the_numba_path(two_processes, tmp_path):
    _, cache, first, _ = two_processes
    copy = tmp_path / "cache"
    import shutil
    shutil.copytree(cache, copy)
    for b in copy.glob("*.native"):
        data = bytearray(b.read_bytes())
        data[len(data) // 2] ^= 0xFF
        b.write_bytes(bytes(data))
    rep = run_child(tmp_path, copy)
    assert rep["numba_imported"] and rep["info"]["native_loads"] == 0
    assert rep["numba_compiles"] == [0] * 4        # Numba's own cache still serves it
    for key in ("losses", "params", "small", "sized", "rows", "wide", "tailed"):
        assert rep[key] == first[key], key
    # that process wrote them again (from machine code it loaded from Numba's cache)
    again = run_child(tmp_path, copy)
    assert not again["numba_imported"] and again["info"]["native_loads"] == 7
    assert again["params"] == first["params"]


def test_damaged_module_entry_is_not_hidden_by_its_bundle(two_processes, tmp_path):
    _, cache, first, _ = two_processes
    copy = tmp_path / "cache"
    import shutil
    shutil.copytree(cache, copy)
    for e in copy.glob("*.py"):
        e.write_bytes(e.read_bytes()[:-20])
    rep = run_child(tmp_path, copy)
    assert rep["info"]["native_loads"] == 0
    assert any("does not match its hash" in w for w in rep["warnings"]), rep["warnings"]
    assert rep["losses"] == first["losses"]


def test_switched_off_writes_no_bundle(tmp_path):
    rep = run_child(tmp_path, tmp_path / "cache", JITGRAPH_NATIVE="0")
    assert not list((tmp_path / "cache").glob("*.native"))
    assert rep["info"]["native_loads"] == 0


# ----------------------------------------------------------------------------- in this process

@pytest.fixture(scope="module")
def step_bundle(tmp_path_factory):
    """A program with products, run once here (which writes its bundle), and its bundle; its
    kernels and products compiled by Numba (``JITGRAPH_LOOP_IR=0``), so that the bundle
    carries Numba's ``blas_gemm`` and its wrappers."""
    def step(w, x):
        return jnp.tanh(x @ w) @ w.T + 1.0
    f = jitgraph.jit(step)
    r = np.random.default_rng(1)
    w = r.standard_normal((5, 4)).astype(np.float32)
    x = r.standard_normal((6, 5)).astype(np.float32)
    expect = np.tanh(x @ w) @ w.T + 1.0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITGRAPH_LOOP_IR", "0")
        np.testing.assert_allclose(f(w, x), expect, rtol=1e-5, atol=1e-5)
        prog = f.lower(w, x).program
    cpu_program.wait_for_bundles()
    assert prog.bundle_status == "written", prog.bundle_status
    return prog, prog.bundle_file, w, x, expect


def _load(path, fallback):
    return native.load(path.read_bytes(), {"entry": path.name}, fallback)


def test_wrong_argument_types_take_the_fallback(step_bundle):
    _, path, _, _, _ = step_bundle
    calls = []

    def fallback(name):
        return lambda *args: calls.append((name, [getattr(a, "dtype", type(a)) for a in args]))

    functions, _ = _load(path, fallback)
    kernel = next(f for n, f in functions.items() if n.startswith("loop_"))
    gemm = functions["blas_gemm"]
    a = np.ones((6, 5), np.float32)
    b = np.ones((5, 4), np.float32)
    out = np.zeros((6, 4), np.float32)
    gemm(1.0, a, 0, b, 0, 0.0, out)                     # compiled for these: no fallback
    np.testing.assert_array_equal(out, np.full((6, 4), 5.0, np.float32))
    gemm(2.0, b, 1, a, 1, 0.0, out.reshape(4, 6))       # transposes are flags
    np.testing.assert_array_equal(out, np.full((6, 4), 10.0, np.float32))
    assert calls == []
    bad = [
        (1.0, a.astype(np.float64), 0, b, 0, 0.0, out),   # dtype
        (1.0, a.reshape(2, 3, 5), 0, b, 0, 0.0, out),     # ndim
        (1.0, np.asfortranarray(a), 0, b, 0, 0.0, out),   # layout (a C overload exists)
        (1.0, a.tolist(), 0, b, 0, 0.0, out),             # not an array
        (1.0, a, 0, b, 0, 0.0),                           # argument count
    ]
    ro = out.copy()
    ro.setflags(write=False)
    bad.append((1.0, a, 0, b, 0, 0.0, ro))                # read-only output
    for args in bad:
        gemm(*args)
    assert [c[0] for c in calls] == ["blas_gemm"] * len(bad)
    assert kernel.__name__.startswith("loop_")


def test_an_exception_raised_by_compiled_code_reaches_the_caller(tmp_path, monkeypatch):
    src = tmp_path / "raising_kernels.py"
    src.write_text(textwrap.dedent('''
        from numba import njit

        @njit(cache=True)
        def check_positive(x):
            for i in range(x.shape[0]):
                if x[i] < 0:
                    raise ValueError("check_positive: a negative entry")
                x[i] = x[i] * 2.0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "nc"))
    import importlib
    mod = importlib.import_module("raising_kernels")
    mod.check_positive(np.ones(3))
    bundle = tmp_path / "k.native"
    assert native.export(str(bundle), {"check_positive": mod.check_positive}, None,
                         {"entry": "k"})
    functions, driver_def = native.load(bundle.read_bytes(), {"entry": "k"},
                                        lambda name: pytest.fail("fallback"))
    assert driver_def is None
    f = functions["check_positive"]
    v = np.array([1.0, 2.5])
    f(v)
    np.testing.assert_array_equal(v, [2.0, 5.0])
    with pytest.raises(ValueError, match="a negative entry"):
        f(np.array([1.0, -1.0]))
    # a bundle for another machine (or entry) is refused
    assert native.load(bundle.read_bytes(), {"entry": "other"}, lambda n: None) is None


def test_damaged_or_foreign_bytes_are_refused():
    assert native.parse(b"not a bundle") is None
    assert native.undefined_symbols(b"MZ not an ELF file") is None


def test_elf_reader_lists_what_an_object_needs():
    import llvmlite.binding as llvm
    mod = llvm.parse_assembly(textwrap.dedent('''
        declare double @needed_elsewhere(double)
        @counter = global i64 0
        define double @here(double %x) {
          %y = call double @needed_elsewhere(double %x)
          ret double %y
        }
    '''))
    mod.triple = llvm.get_process_triple()
    obj = native.target_machine().emit_object(mod)
    assert native.undefined_symbols(obj) == ["needed_elsewhere"]


def test_wrappers_release_the_gil_where_the_dispatcher_does():
    kinds = [("a", "<f4", 1, "C", True, True), ("f8",)]
    released = native._wrapper_ir(0, "f", kinds, nogil=True)
    held = native._wrapper_ir(0, "f", kinds, nogil=False)
    assert "PyEval_SaveThread" in released and "PyEval_RestoreThread" in released
    assert "PyEval_SaveThread" not in held
    # the type checks come before the GIL is let go: a mismatch never runs the machine code
    assert released.index("label %bad") < released.index("PyEval_SaveThread")


def test_wrapper_names_do_not_meet_for_many_arguments():
    """A scalar after eleven arrays: the scalar's check is named apart from ``check_ir``'s
    (``%c<i><n>`` of array 1 was ``%c<12>`` of argument 12), so the wrapper parses."""
    import llvmlite.binding as llvm
    kinds = [("a", "<f4", 1, "C", True, True)] * 12 + [("f8",), ("i8",)]
    llvm.parse_assembly(native.IR_GLOBALS + native._wrapper_ir(0, "f", kinds)).verify()
