"""Two ways to give an operation its own derivative.

    python examples/custom_op.py [--smoke]

(1) ``jitgraph.custom_vjp`` (as JAX's): a numerically safe ``log1pexp`` whose backward pass is
``sigmoid``, used under ``grad`` and ``jit``; (2) a ``jitgraph.compat.v1.Operation`` subclass
with ``forward``/``backward`` (the lecture's graph framework), differentiated by
``tf.gradients`` inside a ``Session.run``. It says when it compiles the jitted gradient and how
long that took, and ends with what was compiled and the total time.
"""
from __future__ import annotations

import time

import numpy as np

import jitgraph
import jitgraph.compat.v1 as tf
import jitgraph.numpy as jnp
from example_utils import compiling, done


@jitgraph.custom_vjp
def log1pexp(x):
    return jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def _fwd(x):
    return log1pexp(x), x


def _bwd(x, g):
    return (g * jitgraph.nn.sigmoid(x),)


log1pexp.defvjp(_fwd, _bwd)


class Softplus(tf.Operation):
    """forward: log(1 + e^x); backward: upstream * sigmoid(x)."""

    def __init__(self, x):
        super().__init__([x])

    def forward(self, x):
        return log1pexp(x)

    def backward(self, upstream_grad):
        (x,) = self.input_values
        return upstream_grad / (1.0 + jnp.exp(-x))


def main():
    started = time.perf_counter()
    x = np.array([-800.0, -1.0, 0.0, 1.0, 800.0])
    dlog1pexp = jitgraph.jit(jitgraph.grad(lambda v: jnp.sum(log1pexp(v))))
    with compiling("jit(grad(sum of log1pexp)) for 5 float64 values"):
        g = dlog1pexp(x)
    want = 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
    print(f"custom_vjp: d/dx log(1+e^x) at {x.tolist()} = {np.round(g, 6).tolist()}")

    t = tf.placeholder(tf.float64, (5,), name="t")
    y = Softplus(t)
    (dy,) = tf.gradients(tf.reduce_sum(y), [t])
    with tf.Session() as sess:
        yv, dyv = sess.run([y, dy], {t: x})
    np.testing.assert_allclose(yv, [0.0, np.log1p(np.exp(-1.0)), np.log(2.0),
                                    1 + np.log1p(np.exp(-1.0)), 800.0], rtol=1e-12)
    np.testing.assert_allclose(dyv, want, rtol=1e-12, atol=1e-15)
    print(f"Operation subclass: softplus = {np.round(yv, 6).tolist()}, gradient ok")
    print("custom ops ok")
    done(started)


if __name__ == "__main__":
    main()
