"""``jit``'s caches: the in-memory signature cache (hits, misses, what recompiles and what does
not), argument handling (static and weak-typed arguments, kwargs, pytrees, errors), buffer
donation, composition with grad, the compile log, and the on-disk cache across processes
(reuse without any Numba compile, corrupted entries, concurrent first compiles)."""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.arrays import Array

ROOT = pathlib.Path(__file__).resolve().parents[1]
rng = np.random.default_rng(5)
X3 = rng.standard_normal(3).astype(np.float32)
X4 = rng.standard_normal(4).astype(np.float32)


class Delta:
    """``cache_info()`` differences over a ``with`` block."""

    def __enter__(self):
        self.before = jitgraph.cache_info()
        return self

    def __exit__(self, *exc):
        after = jitgraph.cache_info()
        self.d = {k: after[k] - self.before[k] for k in ("hits", "misses", "traces")}

    def __getitem__(self, k):
        return self.d[k]


# ------------------------------------------------------------------ hits and misses
def test_repeated_calls_hit_and_value_changes_do_not_recompile():
    f = jitgraph.jit(lambda x: jnp.tanh(x) * 2.0 + 1.0)
    with Delta() as d:
        r1 = f(X3)
        r2 = f(X3)
        r3 = f(X3 * 5.0)                     # new values, same signature
        r4 = f(np.asfortranarray(X3[::-1]))  # another layout of the same shape/dtype
    assert (d["misses"], d["hits"], d["traces"]) == (1, 3, 1)
    np.testing.assert_allclose(r1, np.tanh(X3) * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_allclose(r3, np.tanh(X3 * 5.0) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(r4, np.tanh(X3[::-1]) * 2 + 1, rtol=1e-6)
    assert r1.dtype == np.float32


def test_shape_change_recompiles_exactly_once():
    f = jitgraph.jit(lambda x: jnp.sum(x * x))
    with Delta() as d:
        f(X3)
    assert d["misses"] == 1
    with Delta() as d:
        a = f(X4)
        b = f(X4)
        c = f(X3)
    assert (d["misses"], d["hits"], d["traces"]) == (1, 2, 1)
    np.testing.assert_allclose(a, np.sum(X4 * X4), rtol=1e-6)
    np.testing.assert_allclose(b, a)
    np.testing.assert_allclose(c, np.sum(X3 * X3), rtol=1e-6)


def test_dtype_change_recompiles():
    f = jitgraph.jit(lambda x: x * 3 + 1)
    with Delta() as d:
        r32 = f(X3)
        r64 = f(X3.astype(np.float64))
        ri = f(np.arange(3, dtype=np.int32))
        f(X3)
    assert (d["misses"], d["hits"]) == (3, 1)
    assert r32.dtype == np.float32 and r64.dtype == np.float64 and ri.dtype == np.int32
    np.testing.assert_array_equal(ri, np.arange(3) * 3 + 1)
    np.testing.assert_allclose(r64, X3.astype(np.float64) * 3 + 1)


# ------------------------------------------------------------------ argument handling
def test_static_argnums_compile_separately_per_value():
    def f(x, n, mode):
        y = x ** n
        return jnp.sum(y) if mode == "sum" else jnp.max(y)
    jf = jitgraph.jit(f, static_argnums=(1, 2))
    with Delta() as d:
        a = jf(X3, 2, "sum")
        b = jf(X3, 3, "sum")
        c = jf(X3, 2, "max")
        a2 = jf(X3 * 2, 2, "sum")
    assert (d["misses"], d["hits"]) == (3, 1)
    np.testing.assert_allclose(a, np.sum(X3 ** 2), rtol=1e-6)
    np.testing.assert_allclose(b, np.sum(X3 ** 3), rtol=1e-5)
    np.testing.assert_allclose(c, np.max(X3 ** 2), rtol=1e-6)
    np.testing.assert_allclose(a2, np.sum((X3 * 2) ** 2), rtol=1e-6)


def test_static_argnames():
    jf = jitgraph.jit(lambda x, *, axis: jnp.sum(x, axis=axis), static_argnames="axis")
    x = rng.standard_normal((2, 3))
    with Delta() as d:
        np.testing.assert_allclose(jf(x, axis=0), x.sum(0))
        np.testing.assert_allclose(jf(x, axis=1), x.sum(1))
        np.testing.assert_allclose(jf(x, axis=0), x.sum(0))
    assert (d["misses"], d["hits"]) == (2, 1)


def test_unhashable_static_argument_is_a_type_error_naming_it():
    def scale(x, factors):
        return x * factors[0]
    jf = jitgraph.jit(scale, static_argnums=1)
    with pytest.raises(TypeError) as e:
        jf(X3, [2.0, 3.0])
    msg = str(e.value)
    assert "static argument 1" in msg and "list" in msg and "hashable" in msg
    assert "scale" in msg
    np.testing.assert_allclose(jf(X3, (2.0, 3.0)), X3 * 2.0)     # a tuple is fine


def test_python_scalars_are_weakly_typed():
    f = jitgraph.jit(lambda x, s: x * s)
    with Delta() as d:
        r = f(X3, 2.0)
        r2 = f(X3, 3.5)                       # a new value of the scalar: no recompile
    assert (d["misses"], d["hits"]) == (1, 1)
    assert r.dtype == np.float32 and r2.dtype == np.float32
    np.testing.assert_allclose(r2, X3 * np.float32(3.5))
    i32 = np.arange(4, dtype=np.int32)
    ri = f(i32, 3)
    assert ri.dtype == np.int32
    np.testing.assert_array_equal(ri, i32 * 3)
    # the same promotion as without jit
    for x, s in [(i32, 1.5), (X3, 2), (X3, True), (X3.astype(np.float64), 2.0)]:
        assert f(x, s).dtype == (x * s).dtype == jnp.multiply(x, s).dtype, (x.dtype, s)
        np.testing.assert_allclose(f(x, s), x * s)
    # a 0-d array is not weak: float64 promotes float32
    assert f(X3, np.float64(2.0)).dtype == np.float64


def test_kwargs():
    def f(x, y=None, *, scale=1.0):
        return x * scale + (0.0 if y is None else y)
    jf = jitgraph.jit(f)
    np.testing.assert_allclose(jf(X3, X3, scale=2.0), X3 * 3.0, rtol=1e-6)
    np.testing.assert_allclose(jf(X3, y=X3, scale=2.0), X3 * 3.0, rtol=1e-6)
    np.testing.assert_allclose(jf(X3, scale=4.0), X3 * 4.0, rtol=1e-6)
    assert jf(X3, scale=4.0).dtype == np.float32
    with Delta() as d:
        jf(X3, scale=5.0)
    assert d["misses"] == 0


def test_pytree_arguments_and_outputs_round_trip():
    def f(params, batch):
        w, b = params["w"], params["b"]
        h = [batch[0] @ w + b, batch[1]]
        return {"h": h, "stats": (jnp.sum(h[0]), jnp.max(b)), "none": None, "n": batch[1] * 2}
    jf = jitgraph.jit(f)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    batch = (rng.standard_normal((4, 3)), np.arange(3))
    got, want = jf(params, batch), f(params, batch)
    assert set(got) == {"h", "stats", "none", "n"}
    assert isinstance(got["h"], list) and isinstance(got["stats"], tuple) and got["none"] is None
    g_leaves, g_tree = jitgraph.tree_flatten(got)
    w_leaves, w_tree = jitgraph.tree_flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-12)
    # a different structure is a different signature, not an error
    params3 = dict(params, extra=np.ones(1))
    np.testing.assert_allclose(jf(params3, batch)["stats"][0], want["stats"][0], rtol=1e-12)


def test_wrong_number_of_arguments_names_the_function():
    @jitgraph.jit
    def combine(a, b):
        return a + b
    with pytest.raises(TypeError, match=r"combine.*missing.*'b'"):
        combine(X3)
    with pytest.raises(TypeError, match=r"combine.*too many"):
        combine(X3, X3, X3)


def test_string_leaf_names_the_argument():
    @jitgraph.jit
    def f(x, label):
        return x * 2
    with pytest.raises(TypeError) as e:
        f(X3, "two")
    assert "'label'" in str(e.value) and "string" in str(e.value)
    assert "static" in str(e.value)                    # says how to pass it
    with pytest.raises(TypeError, match=r"argument 0 at x\['b'\]:"):   # JAX's path spelling
        f({"a": X3, "b": "oops"}, X3)


def test_donated_buffer_holds_the_update():
    def loss(p, x, y):
        w, b = p
        return jnp.mean((x @ w + b - y) ** 2)

    def step(p, x, y):
        l, g = jitgraph.value_and_grad(loss)(p, x, y)
        return (p[0] - 0.1 * g[0], p[1] - 0.1 * g[1]), l
    jf = jitgraph.jit(step, donate_argnums=0)
    w, b = rng.standard_normal((5, 3)), rng.standard_normal(3)
    x, y = rng.standard_normal((8, 5)), rng.standard_normal((8, 3))
    (w_ref, b_ref), l_ref = step((w.copy(), b.copy()), x, y)
    x0, w0, b0 = x.copy(), w.copy(), b.copy()
    (nw, nb), l = jf((w, b), x, y)
    # the caller's NumPy arrays are never written (as in JAX): the program got copies
    np.testing.assert_array_equal(w, w0)
    np.testing.assert_array_equal(b, b0)
    assert not np.shares_memory(nw, w)
    np.testing.assert_allclose(nw, w_ref, rtol=1e-12)
    np.testing.assert_allclose(nb, b_ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(l, l_ref, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)              # arguments that are not donated stay
    # keep training with the returned arrays (the old ones are invalid after donation): the
    # weight update runs in place in the donated result's buffer (elementwise, same index)
    p = (nw, nb)
    for _ in range(3):
        p2, l2 = jf(p, x, y)
        assert np.shares_memory(p2[0], p[0])
        p = p2
    assert l2 < l
    # without donation nothing is shared
    plain = jitgraph.jit(step)
    (pw, _), _ = plain((w_ref, b_ref), x, y)
    assert not np.shares_memory(pw, w_ref)


_DW, _DH, _DD = rng.standard_normal((4, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
DONATION_CASES = {
    # name: (f(w, h, d) with w donated, which output leaves may hold w's buffer)
    "gemm update, w read after": (lambda w, h, d: (w - 0.1 * (h.T @ d), jnp.sum(w * w)), ()),
    "gemm, w is an operand": (lambda w, h, d: w - 0.1 * (w.T @ w), ()),
    "gemm, w used in forward": (lambda w, h, d: w - 0.1 * (h.T @ jnp.tanh(h @ w)), (0,)),
    "two elementwise outputs": (lambda w, h, d: (w - d[:4], w + d[:4]), (0, 1)),
    "transposed read": (lambda w, h, d: (w * 2.0, w.T + 1.0), ()),
    "reversed read": (lambda w, h, d: w[::-1] * 2.0, ()),
    "identity output": (lambda w, h, d: (w, w * 3.0), (0,)),
    "gemm then elementwise": (lambda w, h, d: jnp.tanh(w - 0.1 * (h.T @ d)) + w, (0,)),
    "w is c of two gemms": (lambda w, h, d: (w - 0.1 * (h.T @ d), w + 0.1 * (d.T @ h)), (0, 1)),
}


@pytest.mark.parametrize("name", list(DONATION_CASES))
def test_donation_never_changes_results(name):
    """A donated buffer is only reused where no later read needs the old values."""
    f, may_share = DONATION_CASES[name]
    w = _DW.copy()
    got = jitgraph.tree_leaves(jitgraph.jit(f, donate_argnums=0)(w, _DH, _DD))
    want = jitgraph.tree_leaves(f(_DW.copy(), _DH, _DD))
    for k, (g, v) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, v, rtol=1e-12, atol=1e-13, err_msg=f"{name}: output {k}")
        if np.shares_memory(g, w):
            assert k in may_share, f"{name}: output {k} unexpectedly shares w's buffer"
    assert sum(np.shares_memory(g, w) for g in got) <= 1


def test_jit_composes_with_grad_both_ways():
    def f(x, y):
        return jnp.sum(jnp.tanh(x) ** 2 * y) + jnp.mean(nn.log_softmax(x * y))
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(4)
    want = jitgraph.grad(f, argnums=(0, 1))(x, y)
    a = jitgraph.jit(jitgraph.grad(f, argnums=(0, 1)))(x, y)
    b = jitgraph.grad(jitgraph.jit(f), argnums=(0, 1))(x, y)
    c = jitgraph.jit(jitgraph.grad(jitgraph.jit(f), argnums=(0, 1)))(x, y)
    for got in (a, b, c):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    # value_and_grad, and a jitted function called from inside another one
    v, g = jitgraph.jit(jitgraph.value_and_grad(f))(x, y)
    np.testing.assert_allclose(v, f(x, y), rtol=1e-12)
    np.testing.assert_allclose(g, want[0], rtol=1e-12, atol=1e-14)
    inner = jitgraph.jit(lambda x: jnp.sin(x) * 2.0)
    outer = jitgraph.jit(lambda x: inner(x) + inner(x * 2.0))
    np.testing.assert_allclose(outer(x), 2 * np.sin(x) + 2 * np.sin(2 * x), rtol=1e-12)


def test_compile_log(monkeypatch, capfd):
    monkeypatch.setenv("JITGRAPH_LOG", "compiles")

    def logged_fn(x, s):
        return jnp.exp(x) * s
    jf = jitgraph.jit(logged_fn)
    capfd.readouterr()
    jf(X3, 2.0)
    jf(X3, 3.0)                                   # a hit: nothing printed
    jf(X4, 2.0)
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("jitgraph: compiled")]
    assert len(lines) == 2, err
    assert re.search(r"logged_fn\(f32\[3\], f64\[\]\) in \d+\.\d+s \[\d+ kernels?, [^\]]+\]: "
                     r"first call", lines[0]), lines[0]
    assert "logged_fn(f32[4], f64[])" in lines[1] and lines[1].endswith(": x: f32[3] -> f32[4]"), lines[1]
    monkeypatch.delenv("JITGRAPH_LOG")
    jitgraph.jit(logged_fn)(X4, 2.0)
    assert "jitgraph: compiled" not in capfd.readouterr().err


def test_clear_cache_forgets_programs():
    f = jitgraph.jit(lambda x: x - 1.0)
    f(X3)
    jitgraph.clear_cache()
    assert jitgraph.cache_info()["misses"] == 0
    with Delta() as d:
        np.testing.assert_allclose(f(X3), X3 - 1.0)
    assert d["misses"] == 1


# ------------------------------------------------------------------ the disk cache, across processes
CHILD = textwrap.dedent('''
    import json, sys, time, warnings
    t0 = time.perf_counter()
    import numpy as np
    import jitgraph
    import jitgraph.numpy as jnp
    from jitgraph import nn

    @jitgraph.jit
    def train_step(w, x, y):
        def loss(w):
            return -jnp.mean(jnp.sum(nn.log_softmax(jnp.tanh(x @ w)) * y, axis=1))
        l, g = jitgraph.value_and_grad(loss)(w)
        return w - 0.5 * g, l

    @jitgraph.jit
    def bumps(a):
        return jnp.exp(-a * a) * 3.0 + jnp.sum(a, axis=0)

    r = np.random.default_rng(0)
    w, x = r.standard_normal((5, 3)), r.standard_normal((8, 5))
    y = np.eye(3)[r.integers(0, 3, 8)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t1 = time.perf_counter()
        w2, l = train_step(w, x, y)
        e = bumps(x)
        run_seconds = time.perf_counter() - t1
    # what loading cached machine code pulled in: Numba's lowering registries (a context
    # refresh, which only compiling needs) and scipy.linalg (Numba's own BLAS binding)
    loaded = {"numba_registries": "numba.np.arraymath" in sys.modules,
              "scipy_linalg": "scipy.linalg" in sys.modules}
    w2_ref, l_ref = train_step.fun(w, x, y)
    programs = [train_step.lower(w, x, y).program, bumps.lower(x).program]
    err = max(float(np.abs(w2 - w2_ref).max()), abs(float(l) - float(l_ref)),
              float(np.abs(e - bumps.fun(x)).max()))
    print(json.dumps({"err": err, "loss": float(l), "info": jitgraph.cache_info(),
                      "numba_compiles": [p.numba_compiles() for p in programs],
                      "llvm_compiles": [p.kernel_counts.llvm if p.kernel_counts else 0
                                        for p in programs],
                      "was_on_disk": [p.was_on_disk for p in programs],
                      "modules": sorted({m.__name__ for p in programs
                                         for m in [p.module, *p.kernel_modules]}),
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
                      "run_seconds": run_seconds, "loaded": loaded, "seconds": time.perf_counter() - t0}))
''')


def _child_cmd(tmp_path: pathlib.Path) -> list[str]:
    script = tmp_path / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    return [sys.executable, str(script)]


def _env(cache_dir) -> dict:
    env = dict(os.environ)
    env["JITGRAPH_CACHE_DIR"] = str(cache_dir)
    env.pop("JITGRAPH_LOG", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _finish(proc_or_result, what: str) -> dict:
    out, err, rc = proc_or_result
    assert rc == 0, f"{what} exited with {rc}\n{err[-4000:]}"
    rep = json.loads(out.strip().splitlines()[-1])
    rep["stderr"] = err
    assert rep["err"] < 1e-12, f"{what}: wrong results ({rep['err']})"
    return rep


def run_child(tmp_path, cache_dir, what: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(_child_cmd(tmp_path), cwd=ROOT, env=_env(cache_dir), capture_output=True,
                       text=True, timeout=300)
    rep = _finish((p.stdout, p.stderr, p.returncode), what)
    rep["wall"] = time.perf_counter() - t0
    print(f"{what}: wall {rep['wall']:.2f}s (in process {rep['seconds']:.2f}s, first calls "
          f"{rep['run_seconds']:.2f}s), cache_info={rep['info']}")
    return rep


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache directory filled by a first process (whose report is returned too)."""
    tmp = tmp_path_factory.mktemp("disk")
    cache = tmp / "cache"
    first = run_child(tmp, cache, "process 1 (empty cache)")
    return tmp, cache, first


def test_second_process_loads_everything_from_disk(warm_cache):
    tmp, cache, first = warm_cache
    assert first["info"]["disk_hits"] == 0 and first["info"]["misses"] == 2
    # each program compiled its kernels: by Numba, or (loop kernels) by LLVM alone
    assert all(n + m > 0 for n, m in zip(first["numba_compiles"], first["llvm_compiles"]))
    assert list(cache.glob("*.py")), "no module written"
    second = run_child(tmp, cache, "process 2 (warm cache)")
    assert second["info"]["disk_hits"] >= 1
    assert second["info"]["disk_hits"] == second["info"]["misses"] == 2
    assert second["was_on_disk"] == [True, True]
    assert second["numba_compiles"] == [0, 0], "Numba compiled again although the cache was warm"
    assert second["llvm_compiles"] == [0, 0], "LLVM compiled again although the cache was warm"
    assert second["loss"] == first["loss"]
    assert not second["warnings"], second["warnings"]
    # cached code loads without a Numba context refresh and without scipy.linalg (~0.7 s)
    assert first["loaded"]["numba_registries"]   # it compiled
    assert second["loaded"] == {"numba_registries": False, "scipy_linalg": False}


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_corrupted_module_file_is_survived_with_a_warning(warm_cache, tmp_path, damage):
    src_tmp, cache, first = warm_cache
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy, copy_function=shutil.copy2)
    entries = sorted(copy.glob("*.py"))
    assert len(entries) == len(first["modules"])      # each kernel and each driver: one entry
    for e in entries:
        data = e.read_bytes()
        e.write_bytes(data[: len(data) // 2] if damage == "truncated"
                      else b"raise SystemExit('corrupted cache entry was executed')\n" + data)
    rep = run_child(tmp_path, copy, f"process 3 ({damage} entries)")
    assert rep["loss"] == first["loss"]
    cache_warnings = [w for w in rep["warnings"] if w.startswith("CacheWarning")]
    assert len(cache_warnings) >= len(entries), rep["warnings"]
    assert all("does not match its hash" in w for w in cache_warnings[:len(entries)]), \
        cache_warnings
    # the entries were rewritten: a further process uses them without warnings
    for e in entries:
        assert e.read_bytes() == (cache / e.name).read_bytes()
    again = run_child(tmp_path, copy, "process 4 (repaired cache)")
    assert again["was_on_disk"] == [True, True] and not again["warnings"]


def test_concurrent_first_compiles_from_two_processes(tmp_path):
    cache = tmp_path / "shared"
    cmd = _child_cmd(tmp_path)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=_env(cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reps = []
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        reps.append(_finish((out, err, p.returncode), f"concurrent process {k}"))
    print(f"two concurrent cold processes: wall {time.perf_counter() - t0:.2f}s")
    assert reps[0]["loss"] == reps[1]["loss"]
    for r in reps:
        assert not [w for w in r["warnings"] if "does not match" in w], r["warnings"]
    assert len(list(cache.glob("*.py"))) == len(reps[0]["modules"])
    assert not list(cache.glob(".*.tmp")), "temporary files left behind"
    third = run_child(tmp_path, cache, "process after the concurrent ones")
    assert third["was_on_disk"] == [True, True] and third["numba_compiles"] == [0, 0]


_SOURCE_HASH_SCRIPT = textwrap.dedent("""
    import hashlib, numpy as np, jitgraph, jitgraph.numpy as jnp
    from jitgraph import nn
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((6, 5)).astype(np.float32), np.zeros(5, np.float32)),
              (rng.standard_normal((5, 3)).astype(np.float32), np.zeros(3, np.float32))]
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    def loss(p, x, y):
        h = jnp.tanh(x @ p[0][0] + p[0][1])
        return -jnp.mean(jnp.sum(nn.log_softmax(h @ p[1][0] + p[1][1]) * y, axis=1))
    def step(p, x, y):
        g = jitgraph.grad(loss)(p, x, y)
        return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(p, g)]
    src = jitgraph.jit(step, donate_argnums=0).lower(params, x, y).source
    print(hashlib.sha256(src.encode()).hexdigest())
""")


def test_generated_source_is_identical_across_processes(tmp_path):
    """The disk cache is keyed by the generated source: it must not depend on object
    addresses or hash seeds, or every new process would miss the cache."""
    hashes = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "cache"), PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _SOURCE_HASH_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        hashes.add(out.stdout.strip().splitlines()[-1])
    assert len(hashes) == 1, hashes


def test_parameter_lists_take_the_fast_call_path():
    """Flat lists/tuples of arrays (a model's parameters) are keyed without the pytree code;
    a list and a tuple of the same arrays, or another length, are other signatures."""
    f = jitgraph.jit(lambda ps, x: sum(jnp.sum(p * x) for p in ps))
    ps = [rng.standard_normal(3) for _ in range(3)]
    x = rng.standard_normal(3)
    want = sum(float(np.sum(p * x)) for p in ps)
    assert float(f(ps, x)) == pytest.approx(want)
    with Delta() as d:
        assert float(f(ps, x)) == pytest.approx(want)
        assert float(f(tuple(ps), x)) == pytest.approx(want)
        assert float(f(ps[:2], x)) == pytest.approx(want - float(np.sum(ps[2] * x)))
    assert d["hits"] == 1 and d["misses"] == 2
    assert [k[0][0] for k in f._fast] == [list, tuple, list]


@pytest.mark.parametrize("alias", ["view", "same array", "shared buffer"])
def test_donated_parameter_aliasing_another_argument_is_copied_first(alias):
    """A donated array that shares memory with another argument is copied before the update
    (else the other argument would be read after being overwritten)."""
    def step(ps, x):
        return [p - 0.5 * x for p in ps], jnp.sum(x)
    # jitgraph's own arrays (results of an earlier call): a plain NumPy array is copied anyway
    w = rng.standard_normal(6).view(Array)
    if alias == "view":
        x = w[:]                                  # a view of the donated parameter
    elif alias == "same array":
        x = w
    else:                                         # two arrays over one foreign buffer
        buf = bytearray(w.tobytes())
        w = np.frombuffer(buf, np.float64).view(Array)
        x = np.frombuffer(buf, np.float64).view(Array)
    x_before = np.array(x)
    (nw,), s = jitgraph.jit(step, donate_argnums=0)([w], x)
    np.testing.assert_allclose(nw, x_before - 0.5 * x_before, rtol=1e-15)
    assert float(s) == pytest.approx(float(np.sum(x_before)))


def test_overlap_check_of_donated_arguments_finds_every_alias():
    """The donated arguments that may share memory with another argument, found by owner
    groups, are those a comparison of every pair with ``np.may_share_memory`` finds."""
    from jitgraph.compiler.backends.cpu_program import _overlaps
    base = np.arange(40.0)
    other = np.arange(10.0)
    buf = bytearray(other.tobytes())
    foreign_a, foreign_b = np.frombuffer(buf, np.float64), np.frombuffer(buf, np.float64)
    alone = np.frombuffer(bytearray(8 * 3), np.float64)
    xs = (base[:10], base[10:20], base[5:15], other, other, foreign_a, foreign_b, alone,
          np.ones(4), base.reshape(4, 10)[1], np.zeros(2)[:1], other[::2].copy())

    def reference(xs, donated):
        return [i for i in donated if any(j != i and (xs[j] is xs[i] or
                                                      np.may_share_memory(xs[i], xs[j]))
                                          for j in range(len(xs)))]
    for donated in (tuple(range(len(xs))), (0, 1), (1, 3, 7, 8), (5, 7, 11), (9,), ()):
        assert _overlaps(xs, donated) == reference(xs, donated), donated
    assert _overlaps(xs, tuple(range(len(xs)))) == [0, 1, 2, 3, 4, 5, 6, 9]


def test_garbage_collector_is_off_while_compiling_and_restored_after():
    """``compile_settings`` turns the cyclic collector off (Numba's compiles spend much of
    their time in it) and leaves it as it found it, also when the compile raises."""
    import gc

    from jitgraph.compiler.settings import compile_settings
    assert gc.isenabled()
    states = []
    with compile_settings():
        states.append(gc.isenabled())
    with pytest.raises(ZeroDivisionError):
        with compile_settings():
            states.append(gc.isenabled())
            1 / 0
    assert states == [False, False] and gc.isenabled()
    gc.disable()
    try:
        with compile_settings():
            pass
        assert not gc.isenabled()          # a user's choice stays
    finally:
        gc.enable()
    f = jitgraph.jit(lambda x: jnp.sum(jnp.exp(x) * 3.0))
    assert float(f(np.arange(3.0))) == pytest.approx(3 * np.exp(np.arange(3.0)).sum())
    assert gc.isenabled()


def test_static_argnames_and_argnums_name_each_other_as_in_jax():
    """A static argument may be passed either way: a name in ``static_argnames`` given by
    position is static (JAX's ``jit(vmap(pca), static_argnames=['n_components'])`` called
    with the argument by position), and so is a position in ``static_argnums`` given by
    keyword; each static value is traced once."""
    traced = []

    def head(x, n, *, scale=1.0):
        traced.append(n)
        return x[:n] * scale

    x = np.arange(5.0)
    by_name = jitgraph.jit(head, static_argnames=["n"])
    np.testing.assert_array_equal(by_name(x, 2), [0.0, 1.0])
    np.testing.assert_array_equal(by_name(x, n=3), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(by_name(x, 2), [0.0, 1.0])
    assert traced == [2, 3]
    by_position = jitgraph.jit(head, static_argnums=1)
    np.testing.assert_array_equal(by_position(x, n=2), [0.0, 1.0])
    np.testing.assert_array_equal(by_position(x, 4), [0.0, 1.0, 2.0, 3.0])
    assert traced == [2, 3, 2, 4]
    both = jitgraph.jit(head, static_argnames=("n", "scale"))
    np.testing.assert_array_equal(both(x, 2, scale=2.0), [0.0, 2.0])
    with pytest.raises(TypeError, match="static_argnums=1 but only 1 positional"):
        jitgraph.jit(head, static_argnums=1)(x)
