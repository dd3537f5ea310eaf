"""Fusion plans move close to the algorithmic minimum of bytes.

Each workload's plan (CPU and CUDA contexts; plans only, nothing compiles) must move at most
``target`` times its minimum, summed over ``cost.step_cost``. The minimum is computed here from
the shapes: every input read once plus every output written once, at the workload's dtypes
(for the MLP step also each hidden activation written once and read once, see ``_mlp``).
"""
import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler.backends.cpu import CpuContext
from jitgraph.compiler.backends.cuda import CudaContext
from jitgraph.compiler.cost import LONG_ROW, SECTOR, step_cost
from jitgraph.compiler.fusion import LoopKernel, ScatterStep, kernel_ops, make_plan
from jitgraph.compiler.lower import lower
from jitgraph.interpreter import run
from jitgraph.scipy.special import logsumexp

F32 = np.float32
CONTEXTS = {"cpu": CpuContext, "cuda": CudaContext}


def _bytes(*arrays) -> int:
    return sum(int(np.prod(np.shape(a))) * np.asarray(a).dtype.itemsize for a in arrays)


def _plan(fn, args, backend):
    return make_plan(lower(jitgraph.make_graph(fn)(*args)), CONTEXTS[backend]())


def _moved(plan) -> int:
    return sum(step_cost(s, plan).bytes for s in plan.steps)


# ------------------------------------------------------------------ workloads
def _elementwise():
    x = np.ones(1 << 20, F32)
    f = lambda x: jnp.sum(jnp.tanh(x) * nn.sigmoid(1.5 * x + 0.1) + 0.5 * x * x)  # noqa: E731
    return jitgraph.grad(f), (x,), _bytes(x) * 2                      # read x, write the grad


def _xent_data():
    return np.ones((512, 1000), F32), np.zeros(512, np.int32)


def _xent_minimum(z, y):
    return _bytes(z, y) + _bytes(z) + 4                             # grad and loss written


def _xent_take():
    z, y = _xent_data()

    def f(z, y):
        return jnp.mean(logsumexp(z, axis=1) - jnp.take_along_axis(z, y[:, None], 1)[:, 0])
    return jitgraph.value_and_grad(f), (z, y), _xent_minimum(z, y)


def _xent_one_hot():
    z, y = _xent_data()

    def f(z, y):
        logp = z - logsumexp(z, axis=1, keepdims=True)
        hot = (y[:, None] == jnp.arange(z.shape[1])).astype(F32)
        return -jnp.mean(jnp.sum(logp * hot, axis=1))
    return jitgraph.value_and_grad(f), (z, y), _xent_minimum(z, y)


def _xent_nn():
    z, y = _xent_data()

    def f(z, y):
        return -jnp.mean(jnp.sum(nn.log_softmax(z) * nn.one_hot(y, z.shape[1], F32), axis=1))
    return jitgraph.value_and_grad(f), (z, y), _xent_minimum(z, y)


def _layernorm_data():
    return np.ones((1024, 512), F32), np.ones(512, F32), np.zeros(512, F32)


def _layernorm_weighted():
    x, g, b = _layernorm_data()
    w = np.ones_like(x)
    f = lambda x, g, b, w: jnp.sum(nn.functional.layer_norm(x, g, b) * w)  # noqa: E731
    return (jitgraph.value_and_grad(f, argnums=(0, 1, 2)), (x, g, b, w),
            _bytes(x, g, b, w) + _bytes(x, g, b) + 4)          # dx, dgamma, dbeta, loss


def _layernorm_loss():
    x, g, b = _layernorm_data()
    f = lambda x, g, b: jnp.mean(nn.functional.layer_norm(x, g, b) ** 2)  # noqa: E731
    return (jitgraph.value_and_grad(f, argnums=(0, 1, 2)), (x, g, b),
            2 * _bytes(x, g, b) + 4)


def _mlp():
    """One SGD step of 784-512-512-10 (tanh, softmax cross-entropy on integer labels, batch
    128). Minimum: the parameters read and written once, the batch (inputs and labels) read
    once, each hidden activation (h1, h2) written once and read once, the loss written."""
    dims, batch = (784, 512, 512, 10), 128
    params = []
    for a, c in zip(dims[:-1], dims[1:]):
        params += [np.ones((a, c), F32), np.ones(c, F32)]
    x, y = np.ones((batch, dims[0]), F32), np.zeros(batch, np.int32)

    def loss(params, x, y):
        w1, b1, w2, b2, w3, b3 = params
        h1 = jnp.tanh(x @ w1 + b1)
        h2 = jnp.tanh(h1 @ w2 + b2)
        z = h2 @ w3 + b3
        return jnp.mean(logsumexp(z, axis=1) - jnp.take_along_axis(z, y[:, None], 1)[:, 0])

    def step(params, x, y):
        value, grads = jitgraph.value_and_grad(loss)(params, x, y)
        return [p - 0.1 * g for p, g in zip(params, grads)], value

    hidden = 2 * batch * 512 * 4
    return step, (params, x, y), 2 * _bytes(*params) + _bytes(x, y) + 2 * hidden + 4


# (workload, target). The MLP step's bound is what its plan reaches with the steps fusion has:
# each GEMM reads its operands and writes its result, so W2 is read by the forward product, by
# dh1 = d2 @ W2.T and by the update, the pre-activations x @ W + b and the backward products
# dh = d @ W.T are stored and read back, which a GEMM with an elementwise epilogue (bias and
# tanh; times 1 - h^2) and a product pair sharing one read of W would remove (backend work).
WORKLOADS = {
    "elementwise_grad": (_elementwise, 1.0),
    "xent_take_along_axis": (_xent_take, 1.3),
    "xent_one_hot": (_xent_one_hot, 1.3),
    "xent_nn_log_softmax": (_xent_nn, 1.3),
    "layernorm_loss": (_layernorm_loss, 1.6),
    # dgamma/dbeta are column sums: a second pass over x and w after the row kernel
    "layernorm_weighted": (_layernorm_weighted, 1.7),
    "mlp_sgd_step": (_mlp, 2.3),
}


@pytest.mark.parametrize("backend", sorted(CONTEXTS))
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_plan_bytes_near_minimum(name, backend):
    make, target = WORKLOADS[name]
    fn, args, minimum = make()
    plan = _plan(fn, args, backend)
    moved = _moved(plan)
    assert moved <= target * minimum, (name, backend, moved, minimum, moved / minimum)


@pytest.mark.parametrize("backend", sorted(CONTEXTS))
def test_cross_entropy_has_no_dense_one_hot(backend):
    """The VJP of the picked logit is a select in the row kernel, not a scatter into zeros;
    forward and backward read the logits in one kernel."""
    fn, args, _ = _xent_take()
    plan = _plan(fn, args, backend)
    assert not any(isinstance(s, ScatterStep) for s in plan.steps)
    z = plan.graph.inputs[0]
    assert sum(z in s.body.loads for s in plan.steps if isinstance(s, LoopKernel)
               and not all(n.prim.lowering.kind == "gather" for n in s.body.ops
                           if z in n.inputs)) == 1


def test_layernorm_reads_x_twice():
    """Forward and backward of a layernorm: one row kernel, one column-sum kernel."""
    fn, args, _ = _layernorm_weighted()
    plan = _plan(fn, args, "cpu")
    x = plan.graph.inputs[0]
    assert sum(isinstance(s, LoopKernel) and x in s.body.loads for s in plan.steps) == 2


@pytest.mark.parametrize("labels", [[0, 3, 6, 1], [-1, -7, 9, 2], [6, 6, 0, -3]])
def test_one_per_row_scatter_rewrite_agrees(labels):
    """The rewritten graph (select on normalized labels) computes what the scatter did,
    negative and out-of-range labels included (interpreted: nothing compiles)."""
    rng = np.random.default_rng(0)
    z, y = rng.standard_normal((4, 7)).astype(F32), np.asarray(labels, np.int32)

    def f(z, y):
        return jnp.sum(jnp.take_along_axis(z, y[:, None], 1) * jnp.arange(1.0, 5.0)[:, None])
    g = jitgraph.make_graph(jitgraph.grad(f))(z, y)
    low = lower(g)
    assert any(n.prim.lowering.kind == "scatter_add" for n in g.nodes)
    assert not any(n.prim.lowering.kind == "scatter_add" for n in low.nodes)
    np.testing.assert_array_equal(run(low, [z, y])[0], run(g, [z, y])[0])


def test_long_rows_count_each_pass():
    """A row longer than LONG_ROW is read from memory once per pass of the row kernel."""
    x = np.ones((4, 2 * LONG_ROW), F32)
    plan = _plan(lambda x: jnp.sum(jnp.exp(x - jnp.max(x, axis=1, keepdims=True)), axis=1),
                 (x,), "cpu")
    (k,) = [s for s in plan.steps if isinstance(s, LoopKernel)]
    passes = sum(1 for st in k.body.stages if st.kind == "loop" and x_in(plan, st))
    assert passes == 2
    assert step_cost(k, plan).bytes == passes * _bytes(x) + 4 * 4


def x_in(plan, stage):
    return plan.graph.inputs[0] in stage.loads


def test_gather_counts_picked_elements():
    z, y = np.ones((512, 1000), F32), np.zeros(512, np.int32)
    plan = _plan(lambda z, y: jnp.take_along_axis(z, y[:, None], 1), (z, y), "cpu")
    # the row index take_along_axis passes is a constant arange: computed from the loop
    # index, not loaded (emit.progression), so it moves no bytes
    assert _moved(plan) == 512 * SECTOR + _bytes(y) + 512 * 4


def test_tanh_gelu_stores_its_activation_and_not_its_tanh():
    """A tanh-GELU between two products (a GPT block's MLP): the forward loop stores the
    activation alone, and the backward loop recomputes the tanh from the product it reads
    anyway, instead of a second full (batch, hidden) array written, kept until the backward
    pass and read back (GPT large: 16 MiB a layer less at the peak, and a quarter less
    traffic in both loops). Values: the interpreter's."""
    from jitgraph.compiler.kernel_text import writes
    r = np.random.default_rng(0)
    b, d, h = 64, 32, 128
    w1, w2, x = r.standard_normal((d, h)) / 6, r.standard_normal((h, d)) / 11, \
        r.standard_normal((b, d))

    def loss(w1, w2, x):
        z = x @ w1
        g = 0.5 * z * (1.0 + jnp.tanh(0.7978845608 * (z + 0.044715 * z ** 3)))
        return jnp.sum((g @ w2) ** 2)
    grad = jitgraph.grad(loss, argnums=(0, 1))
    plan = _plan(grad, (w1, w2, x), "cpu")
    tanh_loops = [s for s in plan.steps if isinstance(s, LoopKernel) and any(
        n.prim.name == "tanh" for n in kernel_ops(s))]
    assert len(tanh_loops) == 2, plan.steps          # the forward's and the backward's
    stored = [v for v in writes(tanh_loops[0]) if v.aval.shape == (b, h)]
    assert len(stored) == 1, stored                  # the activation the second product reads
    got = jitgraph.jit(grad)(w1, w2, x)
    want = run(jitgraph.make_graph(grad)(w1, w2, x), [w1, w2, x])
    for g, w in zip(jitgraph.tree_leaves(got), want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
