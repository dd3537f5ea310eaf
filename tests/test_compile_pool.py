"""Compile workers: a program's new kernels compiled by this process and forked workers at
once give the same program (values against the reference interpreter), the workers' machine
code is loaded from Numba's cache rather than compiled again here, and a failing worker only
means the first call compiles that kernel itself."""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import compile_pool
from jitgraph.compiler.state import STATE

needs_fork = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="compile workers are forked on Linux only")


def _many_kernels(x, w, b):
    # rows, columns and elementwise work separated by products: several loop kernels
    h = jnp.tanh(x @ w + b)
    s = jnp.exp(h - h.max(axis=1, keepdims=True))
    p = s / s.sum(axis=1, keepdims=True)
    g = (p @ w.T) * jnp.cos(x)
    return (g.sum(axis=0) ** 2).sum() + jnp.log1p(jnp.abs(h)).mean()


def _args(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 5)).astype(dtype), rng.standard_normal((5, 7)).astype(dtype),
            rng.standard_normal(7).astype(dtype))


@needs_fork
def test_worker_compiles_are_loaded_and_give_the_reference_values(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "jit"))
    monkeypatch.setenv(compile_pool.ENV, "2")
    before = dict(STATE.compile_stats)
    f = jitgraph.jit(jitgraph.value_and_grad(_many_kernels, argnums=(1, 2)))
    args = _args(0)
    program = f.lower(*args).program
    value, (gw, gb) = f(*args)
    ref_value, (ref_gw, ref_gb) = jitgraph.value_and_grad(_many_kernels, argnums=(1, 2))(*args)
    np.testing.assert_allclose(value, ref_value, rtol=2e-5)
    np.testing.assert_allclose(gw, ref_gw, rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(gb, ref_gb, rtol=2e-4, atol=1e-5)
    kernels = len(program.kernel_modules)
    assert kernels >= 3
    delta = {k: STATE.compile_stats[k] - before[k] for k in before}
    assert delta["worker_failures"] == 0
    # jobs: the kernels, and the driver's BLAS helpers (kernels/matmul) with their signatures,
    # but for the products its driver calls as built-ins (compiler/gemm_launchers.py)
    assert program.blas_calls
    helpers = sum(name not in program.product_builtins for name, _ in program.blas_calls)
    assert delta["worker_compiles"] + delta["local_compiles"] == kernels + helpers
    # this process compiled only its own share; the workers' kernels came from Numba's cache
    # (and loop kernels LLVM compiled alone, from their objects in the jit cache)
    local = delta["local_compiles"]
    llvm = program.kernel_counts.llvm
    assert local - helpers - llvm <= program.numba_compiles() <= local
    assert jitgraph.cache_info()["local_compiles"] >= delta["local_compiles"]


def test_results_equal_without_workers(tmp_path, monkeypatch):
    args = _args(1, np.float64)
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "a"))
    with_workers = jitgraph.jit(_many_kernels)(*args)
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.setenv(compile_pool.ENV, "0")
    alone = jitgraph.jit(_many_kernels)(*args)
    assert float(with_workers) == float(alone)
    np.testing.assert_allclose(alone, _many_kernels(*args), rtol=1e-12)


@needs_fork
def test_every_job_runs_once_and_failures_are_left_to_the_first_call(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_pool.ENV, "1")
    done = tmp_path / "done"
    done.mkdir()

    def compile_one(job):
        (done / f"{job}-{os.getpid()}").touch()
        if job == 3:
            raise RuntimeError("a kernel that does not compile")
    before = dict(STATE.compile_stats)
    assert compile_pool.precompile(list(range(6)), compile_one)
    names = sorted(p.name for p in done.iterdir())
    assert sorted(int(n.split("-")[0]) for n in names) == list(range(6))   # each exactly once
    me = str(os.getpid())
    here = sum(n.endswith("-" + me) for n in names)
    assert STATE.compile_stats["local_compiles"] - before["local_compiles"] == here
    # job 3 failed where it ran: in a worker, that worker reports a failure
    ran_in_worker = not any(n == f"3-{me}" for n in names)
    assert STATE.compile_stats["worker_failures"] - before["worker_failures"] == ran_in_worker


def test_worker_count_setting_and_when_nothing_is_shared(monkeypatch):
    monkeypatch.setenv(compile_pool.ENV, "0")
    assert compile_pool.workers_wanted() == 0
    assert not compile_pool.precompile([1, 2, 3], lambda job: None)
    monkeypatch.setenv(compile_pool.ENV, "2")
    assert compile_pool.workers_wanted() == 2
    assert not compile_pool.precompile([1], lambda job: None)     # one kernel: nothing to share
    monkeypatch.setenv(compile_pool.ENV, "many")
    with pytest.raises(ValueError, match="JITGRAPH_COMPILE_WORKERS='many'.*0 turns"):
        compile_pool.workers_wanted()
    monkeypatch.delenv(compile_pool.ENV)
    monkeypatch.setenv("PMI_SIZE", "4")          # under an MPI launcher: no workers
    assert compile_pool.workers_wanted() == 0


@needs_fork
def test_a_hanging_worker_is_killed(monkeypatch):
    monkeypatch.setenv(compile_pool.ENV, "1")
    monkeypatch.setattr(compile_pool, "WAIT_S", 0.5)
    parent = os.getpid()

    def compile_one(job):
        # this process takes its time, so the worker gets a job, and it hangs in it
        time.sleep(0.2 if os.getpid() == parent else 60)
    before = STATE.compile_stats["worker_failures"]
    t0 = time.monotonic()
    assert compile_pool.precompile(list(range(4)), compile_one)
    assert time.monotonic() - t0 < 20
    assert STATE.compile_stats["worker_failures"] - before == 1


def test_predicted_blas_helper_signatures_are_the_ones_the_driver_calls(tmp_path, monkeypatch):
    """The driver's products are precompiled with the types codegen predicts (2-D views, C- or
    F-ordered, a transposed view with a dimension of 1 is C-contiguous): after a call, each
    predicted signature is one the helper was actually called with."""
    import numpy as np

    import jitgraph
    import jitgraph.numpy as jnp
    from jitgraph.compiler import compile_pool
    from jitgraph.kernels import matmul

    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("JITGRAPH_LOOP_IR", "0")     # products through Numba's helpers

    @jitgraph.jit
    def step(w, v, x):
        def loss(w, v):
            return jnp.sum(jnp.tanh(x @ w) @ v)
        gw, gv = jitgraph.grad(loss, argnums=(0, 1))(w, v)
        return w - 0.1 * gw, gv

    rng = np.random.default_rng(0)
    w, v, x = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 1), (6, 4)))
    step(w, v, x)
    program = step.lower(w, v, x).program
    assert program.blas_calls, "no products recorded"
    for name, types in program.blas_calls:
        called = {tuple(str(t) for t in sig) for sig in getattr(matmul, name).signatures}
        predicted = tuple(str(t) for t in compile_pool.numba_signature(types))
        assert predicted in called, (name, predicted, called)
    assert compile_pool.numba_signature(["float32/2F", "float", "size", "float64"]) == (
        *compile_pool.numba_signature(["float32/2F"]), *compile_pool.numba_signature(["float"]),
        *compile_pool.numba_signature(["size"]), *compile_pool.numba_signature(["float64"]))
