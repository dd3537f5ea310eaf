"""The refactored compiler generates the same source as before: a handful of programs pinned
by the SHA-256 of their generated CPU module (``lower().source``) and CUDA module.

The hashes were computed with the compiler before it was split into a pipeline and backends;
generated text is also what the disk cache is keyed on, so an unchanged hash means every
cache entry of these programs is still found. A deliberate change of generated code updates
these pins (and says so in its commit).
"""
import hashlib

import pytest
import numpy as np

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler.backends.base import emit_program
from jitgraph.compiler.backends import cuda_geometry
from jitgraph.compiler.backends.cuda import CudaCodegen, CudaContext
from jitgraph.compiler.fusion import make_plan
from jitgraph.compiler.lower import lower

F32 = np.float32


def _mlp_loss(params, x, y):
    (w1, b1), (w2, b2) = params
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return -jnp.mean(jnp.sum(nn.log_softmax(logits) * y, axis=-1))


def mlp_step(params, x, y):
    loss, g = jitgraph.value_and_grad(_mlp_loss)(params, x, y)
    new = [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]
    return loss, new


def softmax_xent(logits, labels):
    return jnp.mean(nn.logsumexp(logits, axis=-1) - jnp.sum(logits * labels, axis=-1))


def elementwise_grad(x):
    return jitgraph.grad(lambda v: jnp.sum(jnp.tanh(v) * jnp.exp(-v * v) + jnp.sin(v)))(x)


def column_sums(x):
    return jnp.sum(x * x, axis=0), jnp.max(x, axis=0)


def cumulative(xs):
    return jitgraph.lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(xs.shape[1:]), xs)


def long_rows(x):
    return jnp.sum(jnp.exp(x)), jnp.argmax(x)


def sgd_vjp(w, h, d):
    """The VJP of an SGD update with a constant cotangent: one constant only products read,
    another returned as it is. The driver's signature names them in the plan's order of
    constants, not in the order the steps first use them."""
    update = lambda w, h, d: w - 0.1 * (h.T @ d)  # noqa: E731
    return jitgraph.vjp(update, w, h, d)[1](np.ones((4, 3)))


def programs():
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((64, 32)).astype(F32), np.zeros(32, F32)),
              (rng.standard_normal((32, 10)).astype(F32), np.zeros(10, F32))]
    x = rng.standard_normal((16, 64)).astype(F32)
    y = np.eye(10, dtype=F32)[rng.integers(0, 10, 16)]
    return {
        "mlp_step": (mlp_step, (params, x, y)),
        "softmax_xent": (softmax_xent, (rng.standard_normal((32, 100)), np.eye(100)[:32])),
        "elementwise_grad": (elementwise_grad, (rng.standard_normal(1 << 17).astype(F32),)),
        "column_sums": (column_sums, (rng.standard_normal((256, 64)),)),
        "cumulative": (cumulative, (rng.standard_normal((8, 5)),)),
        "long_rows": (long_rows, (rng.standard_normal(1 << 16).astype(F32),)),
        "sgd_vjp": (sgd_vjp, (rng.standard_normal((4, 3)), rng.standard_normal((5, 4)),
                              rng.standard_normal((5, 3)))),
    }


PINS = {
    "cpu/mlp_step": "50a0f3faa05c3989b92e281b98c34b17adda9e53896cd4ccf92e4ad45dbab429",
    "cuda/mlp_step": "55def57d5f20478338ecb094c0f390406d3489be73e632261c7e142f29850528",
    "cpu/softmax_xent": "d644fb38d13262fd285eb8f51c10a60015e847c7ebffbaf7ae61257b42ad0eb6",
    "cuda/softmax_xent": "917a5c19c8c7d689cf7c1a7880e2790e18202f88faf80a5bce1ae5f121e0bccc",
    "cpu/elementwise_grad": "45dfb9086bc75a8ad2596af2b273a8acdc8171cb2a8dde53632ce2ff62a4ff7b",
    "cuda/elementwise_grad": "598704181df245fbc9085e11ba20521eefef8c15033656822bb2f39ee6784eb9",
    "cpu/column_sums": "2057ad3bc0fa75693c09e8842cf4c71fb6c3ef6fc979ec0d695c136d5f911686",
    "cuda/column_sums": "b5e975119331822ec050dc8b8f140f971a6c50f09d35a54939e41b24fd1607ae",
    "cpu/cumulative": "c3a518b7e9b396d6946c8de90c2d41bc5e43bf87d11b31a48f764405b3b21e10",
    "cuda/cumulative": "9fc8bc768fb18c4750cf0691769a6d03b21e5cfba50276028d6ee29e7263de0c",
    "cpu/long_rows": "a2625dcaffbd4336b7f060b963b5357853365e3d9f8cd60596e79cdece36534d",
    "cuda/long_rows": "f99a5530e0b62f741b7d6183c2c9d254f97c9a9c9fa8cd1bec89aab7041368c8",
    "cpu/sgd_vjp": "84b63133cc8a16b7d9804825a3de5db525927bf5c6603908f434a44ea294471f",
    "cuda/sgd_vjp": "4a8b96e338507e4c1a6e3968fe4a512fa5eac3993290a17def50bc9fd18b9988"
}

_PROGRAMS = programs()


def _cuda_source(fn, args) -> str:
    g = lower(jitgraph.make_graph(fn)(*args))
    ctx = CudaContext(cuda_geometry.DEFAULT)   # the pins' device, whatever GPU is here
    plan = make_plan(g, ctx)
    return emit_program(CudaCodegen(plan, ctx, shuffle=True), plan, set())[0].source


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_cpu_source_is_pinned(name):
    fn, args = _PROGRAMS[name]
    src = jitgraph.jit(fn).lower(*args).source
    assert hashlib.sha256(src.encode()).hexdigest() == PINS["cpu/" + name], src


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_cuda_source_is_pinned(name):
    fn, args = _PROGRAMS[name]
    src = _cuda_source(fn, args)
    assert hashlib.sha256(src.encode()).hexdigest() == PINS["cuda/" + name], src
