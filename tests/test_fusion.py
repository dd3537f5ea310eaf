"""Fusion plans, read through ``jit(f).lower(*args)``: how many kernels a program becomes, which
values are stored, and that the generated source is valid, readable Python. Every test also
runs the compiled program and checks its numbers against the function run without jit."""
from __future__ import annotations

import ast
import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler.fusion import HostStep, LoopKernel, MatmulStep, ScatterStep

rng = np.random.default_rng(11)
X45 = rng.standard_normal((4, 5)).astype(np.float32)
Y5 = rng.standard_normal(5).astype(np.float32)


def stores(source: str) -> list[str]:
    """The array stores (``name[index] = value``) in a kernel's source."""
    return [line.strip() for line in source.splitlines() if re.search(r"\w\[[^\]]*\] = ", line)]


def step_kinds(lowered) -> dict:
    kinds = {"loop": 0, "matmul": 0, "scatter": 0, "host": 0}
    for s in lowered.plan.steps:
        kinds[{LoopKernel: "loop", MatmulStep: "matmul", ScatterStep: "scatter",
               HostStep: "host"}[type(s)]] += 1
    return kinds


def check_numbers(jf, fn, *args, rtol=1e-5, atol=1e-6):
    got = jitgraph.tree_leaves(jf(*args))
    want = jitgraph.tree_leaves(fn(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * max(1.0, float(np.abs(w).max(initial=0))))


# ------------------------------------------------------------------ elementwise chains
def chain10(x, y):
    """Ten elementwise ops; every intermediate is used once (y, an input, is broadcast)."""
    a = x * 2.0
    a = a + y
    a = jnp.sin(a)
    a = a - 1.0
    a = jnp.exp(a)
    a = a / y
    a = jnp.tanh(a)
    a = jnp.abs(a)
    a = a * x
    return a + 3.0


jit_chain10 = jitgraph.jit(chain10)


@pytest.fixture(scope="module")
def chain_lowered():
    return jit_chain10.lower(X45, Y5)


def test_chain_of_ten_elementwise_ops_is_one_kernel(chain_lowered):
    assert len(chain_lowered.kernels) == 1
    assert len(chain_lowered.plan.steps) == 1
    ops = {n.prim.name for n in chain_lowered.kernels[0].ops}
    assert {"mul", "add", "sin", "sub", "exp", "div", "tanh", "abs"} <= ops
    check_numbers(jit_chain10, chain10, X45, Y5)


def test_values_used_inside_one_kernel_are_never_written(chain_lowered):
    (k,) = chain_lowered.kernels
    assert len(stores(k.source)) == 1, k.source       # only the output
    # the driver passes x, y and the output, nothing else
    call = re.search(rf"(?<!def ){k.name}\(([^)]*)\)", chain_lowered.source)
    args = call.group(1).split(", ")
    assert args[:2] == ["in0", "in1"] and len(args) == 3, args
    # the driver allocates no scratch for this program
    assert "scratch" not in chain_lowered.source


def test_sum_of_elementwise_is_one_kernel():
    def f(x):
        return jnp.sum(jnp.exp(x) * 2.0 + jnp.sin(x))
    jf = jitgraph.jit(f)
    lo = jf.lower(X45)
    assert len(lo.kernels) == 1, lo.source
    assert len(stores(lo.kernels[0].source)) == 1     # the scalar result only
    check_numbers(jf, f, X45)


def test_row_reduction_with_its_producers_and_consumers_is_one_kernel():
    """(x - mean) / std along rows: reductions and the normalised output in one loop nest."""
    def f(x):
        m = jnp.mean(x, axis=1, keepdims=True)
        v = jnp.mean((x - m) ** 2, axis=1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5)
    jf = jitgraph.jit(f)
    lo = jf.lower(X45)
    assert len(lo.kernels) == 1, lo.source
    check_numbers(jf, f, X45, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ softmax cross-entropy
def xent(logits, onehot):
    return -jnp.mean(jnp.sum(nn.log_softmax(logits) * onehot, axis=1))


def test_softmax_cross_entropy_forward_and_backward_is_at_most_four_kernels():
    logits = rng.standard_normal((8, 5)).astype(np.float32)
    onehot = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 8)]
    vg = jitgraph.value_and_grad(xent)
    jf = jitgraph.jit(vg)
    lo = jf.lower(logits, onehot)
    assert len(lo.kernels) <= 4, lo.source
    assert step_kinds(lo)["matmul"] == 0 and step_kinds(lo)["host"] == 0
    # (currently 2: one row kernel -- max, sum of exp, log, the loss rows and the gradient --
    # and one kernel for the mean over rows)
    (v, g), (v0, g0) = jf(logits, onehot), vg(logits, onehot)
    np.testing.assert_allclose(v, v0, rtol=1e-5)
    np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)
    assert g.dtype == np.float32 and np.asarray(v).dtype == np.float32


# ------------------------------------------------------------------ an MLP training step
SIZES = (16, 8, 8, 4)
BATCH = 32


def init_params(seed=0, dtype=np.float32):
    r = np.random.default_rng(seed)
    return [((r.standard_normal((a, b)) / np.sqrt(a)).astype(dtype), np.zeros(b, dtype))
            for a, b in zip(SIZES[:-1], SIZES[1:])]


def mlp_loss(params, x, y_onehot):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return xent(h @ w + b, y_onehot)


def sgd_step(params, x, y_onehot):
    loss, grads = jitgraph.value_and_grad(mlp_loss)(params, x, y_onehot)
    new = [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)]
    return new, loss


@pytest.fixture(scope="module")
def mlp():
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    jf = jitgraph.jit(sgd_step)
    return jf, jf.lower(init_params(), x, y), x, y


def test_mlp_training_step_plan(mlp):
    jf, lo, x, y = mlp
    kinds = step_kinds(lo)
    # Observed plan (16-8-8-4, batch 32, tanh, softmax cross-entropy, SGD), 16 steps:
    # * 8 matmul steps: 3 forward (x@W1, h1@W2, h2@W3); backward 2 per layer that passes a
    #   gradient on (dlogits@W3.T, h2.T@dlogits; dh2@W2.T, h1.T@dh2) and 1 for the first
    #   layer (x.T@dh1). Transposes are BLAS views, never copies. The 3 weight-gradient
    #   products carry the SGD update as a GEMM epilogue (W - 0.1 * (h.T @ d) is one BLAS call
    #   with alpha=-0.1, beta=1), so no loop kernel updates a weight matrix;
    # * 8 loop kernels: 2 forward bias+tanh; 1 log-softmax row kernel (max, sum of exp, log,
    #   loss rows, softmax for the backward); 1 mean of the loss; 1 dlogits with its column
    #   sum (db3); 2 tanh backward kernels, (1 - h^2) * dh with its column sum (db2; db1, this
    #   one also applies the b1 and b2 updates); 1 update of b3.
    # Nothing runs on the host.
    assert kinds == {"loop": 8, "matmul": 8, "scatter": 0, "host": 0}, lo.plan.steps
    assert len(lo.kernels) == 8
    gemms = [s for s in lo.plan.steps if isinstance(s, MatmulStep) and s.epilogue is not None]
    assert len(gemms) == 3, lo.source
    assert all(s.epilogue.beta == 1.0 and abs(s.epilogue.alpha + 0.1) < 1e-7 for s in gemms)


def test_mlp_training_step_numbers(mlp):
    jf, lo, x, y = mlp
    p = init_params()
    (new, loss) = jf(p, x, y)
    (new0, loss0) = sgd_step(p, x, y)
    np.testing.assert_allclose(loss, loss0, rtol=1e-5)
    for (w, b), (w0, b0) in zip(new, new0):
        assert w.dtype == np.float32 and b.dtype == np.float32
        np.testing.assert_allclose(w, w0, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, b0, rtol=1e-5, atol=1e-6)
    # training makes progress
    losses = []
    for _ in range(5):
        p, loss = jf(p, x, y)
        losses.append(float(loss))
    assert losses[-1] < losses[0]


# ------------------------------------------------------------------ layout ops
def test_transpose_plus_add_is_one_kernel_without_copy():
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 3))
    f = lambda a, b: a.T + b               # noqa: E731
    jf = jitgraph.jit(f)
    lo = jf.lower(a, b)
    assert len(lo.kernels) == 1 and len(lo.plan.steps) == 1
    src = lo.kernels[0].source
    assert len(stores(src)) == 1                                # no transposed copy
    assert "a0[o1 * 4 + o0]" in src                             # strided read of a
    assert {n.prim.name for n in lo.kernels[0].ops} >= {"transpose", "add"}
    check_numbers(jf, f, a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,fn,shapes", [
    ("reshape+broadcast", lambda x, y: x.reshape(2, 6) * y[:, None], [(3, 4), (2,)]),
    ("slice steps", lambda x, y: x[::-1, ::2] + y[1:, ::-2], [(3, 4), (4, 4)]),
    ("concat", lambda x, y: jnp.concatenate([x, y], axis=0) * 2.0, [(3, 4), (4, 4)]),
    ("expand/squeeze/stack", lambda x, y: jnp.stack([x, jnp.squeeze(jnp.expand_dims(x, 0), 0)],
                                                    axis=-1) + 1.0, [(3, 4), (1,)]),
    ("gather rows", lambda x, y: x[jnp.arange(3), np.array([0, 3, 1])] * 2.0, [(3, 4), (1,)]),
])
def test_layout_ops_fuse_as_index_arithmetic(name, fn, shapes):
    args = [rng.standard_normal(s) for s in shapes]
    jf = jitgraph.jit(fn)
    lo = jf.lower(*args)
    assert len(lo.kernels) == 1, f"{name}:\n{lo.source}"
    assert len(stores(lo.kernels[0].source)) == 1, lo.kernels[0].source
    check_numbers(jf, fn, *args, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ generated source
def test_generated_source_is_valid_readable_python(mlp, chain_lowered):
    for lo in (mlp[1], chain_lowered):
        compile(lo.source, "<jitgraph generated>", "exec")
        tree = ast.parse(lo.source)
        funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        # one function per distinct kernel (steps computing the same structure share one),
        # and one driver
        assert len(funcs) == len({k.name for k in lo.kernels}) + 1
        assert lo.source.startswith('"""Generated by jitgraph')
        for k in lo.kernels:
            compile(k.source, k.name, "exec")
            assert f"def {k.name}(" in k.source
            assert k.name in lo.source
            assert k.ops, k.name
            assert "@njit(" in k.source
        # readable: short lines, 4-space indentation, no tabs
        for line in lo.source.splitlines():
            assert "\t" not in line
            assert (len(line) - len(line.lstrip(" "))) % 4 == 0, line
        assert max(len(l) for l in lo.source.splitlines() if not l.startswith("def program")) < 160


def test_lower_shows_graph_and_reuses_the_compiled_program():
    f = jitgraph.jit(lambda x: jnp.tanh(x) * 2.0)
    lo1 = f.lower(X45)
    before = jitgraph.cache_info()
    lo2 = f.lower(X45)
    out = f(X45)
    after = jitgraph.cache_info()
    assert lo2.program is lo1.program
    assert after["misses"] == before["misses"]
    assert "tanh" in str(lo1.graph)
    assert repr(lo1).startswith("<Lowered:")
    np.testing.assert_allclose(out, np.tanh(X45) * 2.0, rtol=1e-6)


@pytest.mark.parametrize("name", ["reshape_of_transpose", "transpose_of_reshape", "batched_swap"])
def test_matmul_operands_that_are_views_of_computed_values(name):
    """A computed operand is stored in its natural layout and BLAS reads a reshaped or
    transposed view of it; no copy kernel is generated for the layout change."""
    rng = np.random.default_rng(3)
    a, b = rng.random((4, 6)), rng.random((3, 8))
    c, d = rng.random((2, 3, 4)), rng.random((2, 5, 4))
    f, args = {
        "reshape_of_transpose": (lambda a, b: a @ jnp.reshape(jnp.transpose(b * 2), (6, 4)), (a, b)),
        "transpose_of_reshape": (lambda a, b: a @ jnp.transpose(jnp.reshape(b + 1, (4, 6))), (a, b)),
        "batched_swap": (lambda c, d: jnp.matmul(c * 2, jnp.swapaxes(d + 1, -1, -2)), (c, d)),
    }[name]
    jf = jitgraph.jit(f)
    np.testing.assert_allclose(jf(*args), f(*args), rtol=1e-12)
    lo = jf.lower(*args)
    copies = [k for k in lo.kernels if all(op.prim.kind == "layout" for op in k.ops)]
    assert copies == [], [k.source for k in copies]


def test_max_subtracted_cross_entropy_gradient_is_one_row_kernel():
    """Written out as users do (the max not stopped), the loss does not depend on the max, so
    the max gets no derivative (no per-row tie count, no fourth pass): max, sum of exp, then
    the loss and the gradient in a last pass, all in one row kernel, so the logits come from
    memory in one kernel only."""
    def loss(z, y):
        m = jnp.max(z, axis=1, keepdims=True)
        lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
        return -jnp.mean(jnp.sum((z - lse) * y, axis=1))
    z = rng.standard_normal((16, 7)).astype(np.float32)
    y = np.eye(7, dtype=np.float32)[rng.integers(0, 7, 16)]
    vg = jitgraph.value_and_grad(loss)
    jf = jitgraph.jit(vg)
    lo = jf.lower(z, y)
    rows = [s for s in lo.plan.steps if s.shape == (16, 7)]
    assert len(rows) == 1 and len(lo.plan.steps) == 2, lo.source      # + the mean
    assert sum(1 for s in rows[0].stages if s.kind == "loop") == 3
    (v, g), (v0, g0) = jf(z, y), vg(z, y)
    np.testing.assert_allclose(v, v0, rtol=1e-5)
    np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)
