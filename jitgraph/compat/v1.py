"""TensorFlow 1's static-graph API on jitgraph: ``import jitgraph.compat.v1 as tf``.

    x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
    W = tf.Variable(tf.random_normal((3, 2)), name="W")
    h = tf.nn.relu(tf.matmul(x, W))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(h, feed_dict={x: data})

Building the graph computes nothing; ``Session.run`` compiles the part of the graph the fetches
need (one ``jit`` program per set of fetches, cached per fed shape) and keeps the variables'
values between runs. ``Operation`` is the base class for user-defined ops with their own
``forward`` and ``backward``.
"""
from __future__ import annotations

import types
from typing import Sequence

import numpy as np

from .. import numpy as jnp
from .. import random as jr
from ..core import aval_of
from ..custom import custom_vjp
from ..ops.elementwise import unbroadcast
from ..nn import activations as _act
from .graph import (Constant, Graph, Placeholder, Special, Tensor, Variable, as_tensor,
                    get_default_graph, reset_default_graph)
from .session import FailedPreconditionError, InvalidArgumentError, OpError, Session

float16 = np.float32     # computed in float32 (jitgraph has no float16)
float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64
bool = np.bool_          # noqa: A001  (TensorFlow's name)

errors = types.SimpleNamespace(OpError=OpError, FailedPreconditionError=FailedPreconditionError,
                               InvalidArgumentError=InvalidArgumentError)

__all__ = ["Graph", "Operation", "Session", "Tensor", "Variable", "add", "constant", "divide",
           "exp", "get_default_graph", "global_variables_initializer", "gradients", "log",
           "matmul", "multiply", "nn", "ones", "placeholder", "random_normal",
           "random_uniform", "reduce_mean", "reduce_sum", "reset_default_graph", "subtract",
           "train", "zeros"]


def placeholder(dtype, shape=None, name: str | None = None) -> Placeholder:
    return Placeholder(dtype, shape, name)


def constant(value, dtype=None, shape=None, name: str | None = None) -> Constant:
    if shape is not None:
        value = np.broadcast_to(np.asarray(value, dtype), shape)
    return Constant(value, dtype, name or "Const")


def zeros(shape, dtype=np.float32, name=None) -> Constant:
    return Constant(np.zeros(shape, dtype), name=name or "zeros")


def ones(shape, dtype=np.float32, name=None) -> Constant:
    return Constant(np.ones(shape, dtype), name=name or "ones")


def _op(fn, op_type):
    def make(*args, name: str | None = None):
        return Tensor(list(args), fn, op_type, name)
    make.__name__ = op_type
    return make


add = _op(jnp.add, "Add")
subtract = _op(jnp.subtract, "Sub")
multiply = _op(jnp.multiply, "Mul")
divide = _op(jnp.divide, "RealDiv")
matmul = _op(jnp.matmul, "MatMul")
log = _op(jnp.log, "Log")
exp = _op(jnp.exp, "Exp")
square = _op(jnp.square, "Square")
sqrt = _op(jnp.sqrt, "Sqrt")
negative = _op(jnp.negative, "Neg")
maximum = _op(jnp.maximum, "Maximum")


def _reduction(fn, op_type):
    def make(x, axis=None, keepdims: bool = False, name: str | None = None):
        ax = tuple(axis) if isinstance(axis, list) else axis
        return Tensor([x], lambda v: fn(v, axis=ax, keepdims=keepdims), op_type, name)
    make.__name__ = op_type
    return make


reduce_sum = _reduction(jnp.sum, "Sum")
reduce_mean = _reduction(jnp.mean, "Mean")
reduce_max = _reduction(jnp.max, "Max")


def argmax(x, axis=None, name=None):
    return Tensor([x], lambda v: jnp.argmax(v, axis=axis), "ArgMax", name)


def equal(x, y, name=None):
    return Tensor([x, y], jnp.equal, "Equal", name)


def cast(x, dtype, name=None):
    return Tensor([x], lambda v: jnp.astype(v, dtype), "Cast", name, dtype=dtype)


def _random(shape, dtype, sample, op_type, name):
    g = get_default_graph()
    return Special([], "Random", name or op_type, shape, dtype,
                   index=len(g.nodes), sample=sample)


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=np.float32, seed=None, name=None):
    shape = tuple(shape)
    return _random(shape, dtype, lambda k: jr.uniform(k, shape, dtype, minval, maxval),
                   "RandomUniform", name)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=np.float32, seed=None, name=None):
    shape = tuple(shape)
    return _random(shape, dtype, lambda k: jr.normal(k, shape, dtype) * stddev + mean,
                   "RandomStandardNormal", name)


truncated_normal = random_normal


def global_variables_initializer() -> Special:
    """An op that sets every variable of the graph (at run time) to its initial value."""
    return Special([], "Init", "init")


initialize_all_variables = global_variables_initializer


def no_op(name=None) -> Special:
    return Special([], "NoOp", name)


def group(*ops, name=None) -> Special:
    return Special([], "NoOp", name or "group", deps=list(ops))


def gradients(ys, xs, name: str | None = None) -> list[Tensor]:
    """Symbolic d(sum of ys)/dx for each x (a list of tensors, as tf.gradients)."""
    ys = [ys] if isinstance(ys, Tensor) else list(ys)
    single = isinstance(xs, Tensor)
    xs = [xs] if single else list(xs)
    return [Special([], "Gradients", name or f"gradients/{x.name}", x.shape, x.dtype,
                    ys=ys, xs=xs, index=i, deps=ys + xs) for i, x in enumerate(xs)]


# ------------------------------------------------------------------ user-defined operations
class Operation(Tensor):
    """A user-defined op, as in the lecture's graph framework::

        class AddOperation(tf.Operation):
            def __init__(self, x, y):
                super().__init__([x, y])
            def forward(self, x, y):
                return x + y
            def backward(self, upstream_grad):
                return upstream_grad, upstream_grad

    ``forward`` gets the input values; ``backward`` gets the gradient of the output and
    returns one gradient per input (the inputs' values are in ``self.input_values``). Both are
    written with array operators or ``jitgraph.numpy``, so they compile like the rest.
    """

    def __init__(self, input_nodes: Sequence = (), name: str | None = None):
        self.input_values: tuple = ()
        Tensor.__init__(self, list(input_nodes), self._call, type(self).__name__, name)
        op = self

        @custom_vjp
        def f(*vals):
            op.input_values = vals
            return op.forward(*vals)

        def fwd(*vals):
            op.input_values = vals
            return op.forward(*vals), vals

        def bwd(vals, g):
            op.input_values = vals
            gs = op.backward(g)
            gs = tuple(gs) if isinstance(gs, (tuple, list)) else (gs,)
            if len(gs) != len(vals):
                raise ValueError(f"{type(op).__name__}.backward returned {len(gs)} gradients "
                                 f"for {len(vals)} inputs")
            # a gradient of the broadcast shape is summed back to its input's shape
            return tuple(None if g_ is None else unbroadcast(jnp.asarray(g_), aval_of(v))
                         for g_, v in zip(gs, vals))

        f.defvjp(fwd, bwd)
        self._fn = f

    def _call(self, *vals):
        return self._fn(*vals)

    def forward(self, *values):
        raise NotImplementedError(f"{type(self).__name__} must define forward(*values)")

    def backward(self, upstream_grad):
        raise NotImplementedError(f"{type(self).__name__} must define backward(upstream_grad)")


# ------------------------------------------------------------------ tf.nn
def _softmax_xent(labels=None, logits=None, axis=-1, name=None):
    if labels is None or logits is None:
        raise TypeError("softmax_cross_entropy_with_logits needs labels= and logits=")
    return Tensor([labels, logits],
                  lambda y, z: -jnp.sum(y * _act.log_softmax(z, axis=axis), axis=axis),
                  "SoftmaxCrossEntropyWithLogits", name)


nn = types.SimpleNamespace(
    relu=_op(_act.relu, "Relu"), sigmoid=_op(_act.sigmoid, "Sigmoid"),
    tanh=_op(jnp.tanh, "Tanh"), softmax=_op(_act.softmax, "Softmax"),
    log_softmax=_op(_act.log_softmax, "LogSoftmax"),
    softmax_cross_entropy_with_logits=_softmax_xent,
    softmax_cross_entropy_with_logits_v2=_softmax_xent)
tanh, sigmoid = nn.tanh, nn.sigmoid


# ------------------------------------------------------------------ tf.train
class Optimizer:
    def minimize(self, loss: Tensor, var_list=None, name: str | None = None) -> Special:
        var_list = list(var_list) if var_list is not None else [
            v for v in loss.graph.variables if v.trainable]
        if not var_list:
            raise ValueError("minimize: no trainable variables to optimize")
        slots = self._create_slots(var_list)
        return Special([], "TrainOp", name or type(self).__name__, optimizer=self, loss=loss,
                       var_list=var_list, deps=[loss] + var_list + slots)

    def _create_slots(self, var_list) -> list:
        return []


class GradientDescentOptimizer(Optimizer):
    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate

    def apply(self, var_list, grads, env, ctx):
        for v, g in zip(var_list, grads):
            ctx.updates[v] = env[v] - self.learning_rate * g


class AdamOptimizer(Optimizer):
    """TensorFlow 1's Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t), epsilon outside the sqrt."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = learning_rate, beta1, beta2, epsilon
        self._slots: dict = {}

    def _create_slots(self, var_list):
        made = []
        for v in var_list:
            shape, dt = v.initial_value.shape, v.initial_value.dtype
            if shape is None:
                raise ValueError(f"AdamOptimizer: the shape of variable {v.name} must be known")
            m = Variable(np.zeros(shape, dt), trainable=False, name=f"{v.name}/Adam")
            s = Variable(np.zeros(shape, dt), trainable=False, name=f"{v.name}/Adam_1")
            self._slots[v] = (m, s)
            made += [m, s]
        self._t = Variable(np.zeros((), np.float64), trainable=False, name="beta_power_step")
        return made + [self._t]

    def apply(self, var_list, grads, env, ctx):
        t = env[self._t] + 1.0
        ctx.updates[self._t] = t
        for v, g in zip(var_list, grads):
            m, s = self._slots[v]
            mv = self.b1 * env[m] + (1 - self.b1) * g
            sv = self.b2 * env[s] + (1 - self.b2) * g * g
            lr_t = jnp.astype(self.lr * jnp.sqrt(1 - self.b2 ** t) / (1 - self.b1 ** t),
                              env[v].dtype)
            ctx.updates[m], ctx.updates[s] = mv, sv
            ctx.updates[v] = env[v] - lr_t * mv / (jnp.sqrt(sv) + self.eps)


train = types.SimpleNamespace(GradientDescentOptimizer=GradientDescentOptimizer,
                              AdamOptimizer=AdamOptimizer, Optimizer=Optimizer)

__all__ += ["Constant", "Placeholder", "as_tensor", "errors"]
