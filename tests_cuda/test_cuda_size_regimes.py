"""The CUDA side of the size-regime tier (``tests/test_size_regimes.py``): launches whose grids
have more than one block, grid-stride loops over more elements (rows, column blocks, chunks)
than the grid has threads, and split reductions, for every kind of generated kernel, value
and gradient, against the CPU reference.

The simulator runs every thread in Python, so the thresholds that size the grids
(``jitgraph.compiler.thresholds``) are lowered here, by the tests, to values a simulated GPU
can reach: the generated code is the same code a real GPU runs at the real thresholds (each
test checks the launch configuration it meant to reach). Threads per block stay at the real
``MAX_THREADS``, so block reductions run their full shared-memory tree.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler.backends import cuda as codegen_cuda
from jitgraph.compiler import thresholds as T
from jitgraph.tree import tree_flatten

F32 = np.float32
BLOCKS = 2                          # the simulated grid limit: every grid-stride loop strides
_LAUNCH = re.compile(r"D\.launch\((\w+_kernel_\w+|\w+_part_\w+|\w+_final_\w+), (\d+), "
                     r"(\d+|\(\d+, \d+\))")
_rng = np.random.default_rng(33)


@pytest.fixture(autouse=True)
def small_grids(monkeypatch):
    monkeypatch.setattr(codegen_cuda, "MAX_BLOCKS", BLOCKS)
    monkeypatch.setattr(codegen_cuda, "SPLIT_MIN_INNER", 2 * T.MAX_THREADS)
    monkeypatch.setattr(codegen_cuda, "SPLIT_CHUNK", T.MAX_THREADS)


def launches(lowered) -> list[tuple[str, int, int]]:
    """(kernel, blocks, threads per block) of every launch in the generated module."""
    out = []
    for name, grid, block in _LAUNCH.findall(lowered.source):
        threads = eval(block)                     # an int or a (x, y) tuple  # noqa: S307
        out.append((name, int(grid), int(np.prod(threads))))
    return out


def _close(got, want, what: str) -> None:
    gl, wl = tree_flatten(jitgraph.device_get(got))[0], tree_flatten(want)[0]
    assert len(gl) == len(wl), what
    for i, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {i}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{what} output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {i}")


def check(f, args, argnums=0, grad=True):
    """jit(f, device="cuda") against f without jit, and its gradient; returns the launches
    of the forward program."""
    jf = jitgraph.jit(f, device="cuda")
    _close(jf(*args), f(*args), "jit(f)")
    if grad:
        w = [1.0 + 0.5 * np.cos(np.arange(np.size(o)) * 1.3).reshape(np.shape(o)).astype(o.dtype)
             for o in tree_flatten(f(*args))[0]]

        def loss(*a):
            return sum(jnp.sum(o * wi) for o, wi in zip(tree_flatten(f(*a))[0], w))
        g = jitgraph.grad(loss, argnums=argnums)
        _close(jitgraph.jit(g, device="cuda")(*args), g(*args), "jit(grad(f))")
    return launches(jf.lower(*args))


def test_elementwise_grid_stride_loops():
    """Index maps in an elementwise kernel with more elements than the grid's threads: each
    thread strides over several elements."""
    n = 3 * BLOCKS * T.MAX_THREADS + 7
    a, b = _rng.standard_normal(n).astype(F32), _rng.standard_normal(n).astype(F32)
    idx = _rng.integers(-n - 2, n + 2, n)

    def f(a, b, i):
        c = jnp.concatenate([a, b[::-1]])
        return jnp.pad(c, (3, 2)) * 2.0, jnp.roll(a, 5) + a[i]
    ls = check(f, (a, b, idx))
    assert ls and all(blocks == BLOCKS for _, blocks, _ in ls)
    assert all(threads == T.MAX_THREADS for _, _, threads in ls)


def test_rows_grid_stride_over_blocks():
    """One block per row, more rows than blocks (each block takes several rows): softmax,
    log-softmax, cross-entropy, layernorm."""
    rows, cols = BLOCKS + 1, T.MAX_THREADS // 2 + 3
    z = (_rng.standard_normal((rows, cols)) * 3.0).astype(F32)
    y = _rng.integers(0, cols, rows)

    def f(z, y):
        lp = nn.log_softmax(z)
        ln = (z - z.mean(-1, keepdims=True)) / jnp.sqrt(z.var(-1, keepdims=True) + 1e-5)
        return nn.softmax(z), -jnp.mean(lp[jnp.arange(rows), y]), ln
    ls = check(f, (z, y))
    assert any(blocks == BLOCKS for _, blocks, _ in ls)


def test_column_reductions_stride_over_column_blocks():
    """Leading-axis reductions (a bias gradient) with more column blocks than the grid."""
    cols = 32 * (BLOCKS + 1) + 5
    assert cols >= T.COLUMN_MIN_OUTER
    x = _rng.standard_normal((2 * T.COLUMN_ROWS + 1, cols)).astype(F32)
    # forward only: the gradient is a row kernel over the columns (51 per block at this grid,
    # half a minute in the simulator); gradients of column reductions are in test_cuda_cases
    ls = check(lambda x: (jnp.sum(x, axis=0), jnp.max(jnp.tanh(x), axis=0)), (x,), grad=False)
    assert any(blocks == BLOCKS and threads == 32 * T.COLUMN_ROWS for _, blocks, threads in ls)


def test_split_reduction_with_more_chunks_than_blocks():
    """A long row reduced in chunks by many blocks, more chunks than the grid has blocks."""
    n = 5 * T.MAX_THREADS + 3
    x = np.linspace(-2, 2, n).astype(F32)
    ls = check(lambda x: (jnp.sum(jnp.tanh(x) * x), jnp.max(x * 0.5)), (x,))
    names = [name for name, _, _ in ls]
    assert any("_part_" in s for s in names) and any("_final_" in s for s in names)


def test_scatter_add_grid_stride():
    """The gradient of a gather (scatter-add with atomics) over more updates than threads."""
    n = 3 * BLOCKS * T.MAX_THREADS + 1
    table = _rng.standard_normal((50, 4)).astype(F32)
    idx = _rng.integers(0, 50, n)
    check(lambda t, i: t[i] * 2.0, (table, idx))
