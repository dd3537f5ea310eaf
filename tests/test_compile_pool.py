"""Compile workers: a program's new kernels compiled by this process and a worker process at
once give the same program (values against the reference interpreter), the worker's machine
code is loaded from Numba's cache rather than compiled again here, and a failing worker only
means this process compiles the kernel itself."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import compile_pool


def _many_kernels(x, w, b):
    # rows, columns and elementwise work separated by products: several loop kernels
    h = jnp.tanh(x @ w + b)
    s = jnp.exp(h - h.max(axis=1, keepdims=True))
    p = s / s.sum(axis=1, keepdims=True)
    g = (p @ w.T) * jnp.cos(x)
    return (g.sum(axis=0) ** 2).sum() + jnp.log1p(jnp.abs(h)).mean()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "jit"))


def _args(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 5)).astype(dtype), rng.standard_normal((5, 7)).astype(dtype),
            rng.standard_normal(7).astype(dtype))


def test_worker_compiles_are_loaded_and_give_the_reference_values(fresh_cache, monkeypatch):
    monkeypatch.setenv(compile_pool.ENV, "1")
    if not compile_pool.ensure_started(wait_s=60):
        pytest.skip("no compile worker could start here")
    before = dict(compile_pool.STATS)
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
    by_worker = compile_pool.STATS["worker_compiles"] - before["worker_compiles"]
    here = compile_pool.STATS["local_compiles"] - before["local_compiles"]
    assert by_worker + here == kernels and by_worker >= 1
    # this process compiled only its own share; the worker's kernels came from Numba's cache
    assert program.numba_compiles() == here


def test_results_equal_without_workers(fresh_cache, monkeypatch, tmp_path):
    args = _args(1, np.float64)
    with_workers = jitgraph.jit(_many_kernels)(*args)
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(compile_pool, "MIN_KERNELS", 10 ** 9)     # everything compiled here
    alone = jitgraph.jit(_many_kernels)(*args)
    assert float(with_workers) == float(alone)
    np.testing.assert_allclose(alone, _many_kernels(*args), rtol=1e-12)


def test_a_failing_worker_job_falls_back_to_this_process():
    if not compile_pool.ensure_started(wait_s=60):
        pytest.skip("no compile worker could start here")
    before = compile_pool.STATS["worker_errors"]
    done = []
    bogus = [("/nonexistent", "", "def f(:\n", "f", ("float32",), None)] * 2
    compile_pool.precompile(bogus + [("here",)], lambda job: done.append(job))
    # every job done once: by the worker (the bogus ones fail there) or by this process
    assert compile_pool.STATS["worker_errors"] - before + len(done) == 3


def test_worker_count_setting(monkeypatch):
    monkeypatch.setenv(compile_pool.ENV, "0")
    assert compile_pool.workers_wanted() == 0
    monkeypatch.setenv(compile_pool.ENV, "2")
    assert compile_pool.workers_wanted() == 2
    monkeypatch.setenv(compile_pool.ENV, "many")
    with pytest.raises(ValueError, match="JITGRAPH_COMPILE_WORKERS='many'.*0 turns"):
        compile_pool.workers_wanted()
    monkeypatch.delenv(compile_pool.ENV)
    monkeypatch.setenv("PMI_SIZE", "4")          # under an MPI launcher: no workers
    assert compile_pool.workers_wanted() == 0
