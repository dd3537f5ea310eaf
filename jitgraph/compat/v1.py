"""TensorFlow 1's static-graph API on jitgraph: ``import jitgraph.compat.v1 as tf``.

```python
x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
W = tf.Variable(tf.random_normal((3, 2)), name="W")
h = tf.nn.relu(tf.matmul(x, W))
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(h, feed_dict={x: data})
```

Building the graph computes nothing; ``Session.run`` compiles the part of the graph the fetches
need (one ``jit`` program per set of fetches, cached per fed shape) and keeps the variables'
values between runs. ``Operation`` is the base class for user-defined ops with their own
``forward`` and ``backward``. A TensorFlow name this layer does not serve raises an
``AttributeError`` that names it and says why (docs/compat_v1.md has the coverage table).
"""
from __future__ import annotations

import types
from typing import Sequence

from .. import numpy as jnp
from ..core import aval_of
from ..custom import custom_vjp
from ..ops.binders import unbroadcast
from .array_ops import *  # noqa: F401,F403  (tf.add, tf.reshape, tf.reduce_sum, ...)
from .array_ops import __all__ as _array_names
from .graph import (Constant, Graph, Placeholder, Special, Tensor, TensorShape, Variable,
                    as_tensor, get_default_graph, gradients, reset_default_graph)
from .namespace import not_served
from .nn import nn
from .session import (FailedPreconditionError, InteractiveSession, InvalidArgumentError,
                      NotFoundError, OpError, Session)
from .summary import summary
from .train import train
from .tf_dtypes import (as_dtype, bool, double, float16, float32, float64, half, int8,  # noqa: A004
                        int16, int32, int64, string, uint8, uint16, uint32, uint64)

DType = type(float32)
errors = types.SimpleNamespace(OpError=OpError, FailedPreconditionError=FailedPreconditionError,
                               InvalidArgumentError=InvalidArgumentError,
                               NotFoundError=NotFoundError)
sigmoid = nn.sigmoid


def placeholder(dtype, shape=None, name: str | None = None) -> Placeholder:
    """A value fed at run time; ``"float"`` means float32, as in TensorFlow."""
    return Placeholder(dtype, shape, name)


def name_scope(name: str | None, default_name: str | None = None, values=None):
    """``with tf.name_scope("layer1"):`` prefixes the names made inside with ``layer1/``."""
    return get_default_graph().name_scope(name or default_name)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    """The graph's trainable variables (whose names start with ``scope``, if given)."""
    return [v for v in get_default_graph().variables
            if v.trainable and (scope is None or v.op_name.startswith(scope))]


def global_variables(scope: str | None = None) -> list[Variable]:
    """The graph's variables (those whose name starts with ``scope``, when given)."""
    return [v for v in get_default_graph().variables
            if scope is None or v.op_name.startswith(scope)]


all_variables = global_variables


def global_variables_initializer() -> Special:
    """An op that sets every variable of the graph (at run time) to its initial value."""
    return Special([], "Init", "init")


initialize_all_variables = global_variables_initializer


def variables_initializer(var_list, name: str = "init") -> Special:
    """An op that initialises the listed variables."""
    return group(*[v.assign(v.initial_value) for v in var_list], name=name)


def local_variables_initializer() -> Special:
    """A no-op: there are no local variables (no input queues or metrics)."""
    return no_op("init_local")


def assign(ref: Variable, value, name: str | None = None) -> Special:
    """An op that sets ``ref`` to ``value`` when run (and gives the new value)."""
    return ref.assign(value, name)


def assign_add(ref: Variable, value, name: str | None = None) -> Special:
    """An op adding ``value`` to the variable ``ref`` when run."""
    return ref.assign_add(value, name)


def assign_sub(ref: Variable, value, name: str | None = None) -> Special:
    """An op subtracting ``value`` from the variable ``ref`` when run."""
    return ref.assign_sub(value, name)


def no_op(name=None) -> Special:
    """An op that does nothing (a placeholder for control dependencies)."""
    return Special([], "NoOp", name)


def group(*ops, name=None) -> Special:
    """An op that runs ``ops`` and returns nothing."""
    return Special([], "NoOp", name or "group", deps=list(ops))


# ------------------------------------------------------------------ user-defined operations
class Operation(Tensor):
    """A user-defined op, as in the lecture's graph framework:

    ```python
    class AddOperation(tf.Operation):
        def __init__(self, x, y):
            super().__init__([x, y])
        def forward(self, x, y):
            return x + y
        def backward(self, upstream_grad):
            return upstream_grad, upstream_grad
    ```

    ``forward`` gets the input values; ``backward`` gets the gradient of the output and
    returns one gradient per input (the inputs' values are in ``self.input_values``). Both are
    written with array operators or ``jitgraph.numpy``, so they compile like the rest.
    """

    _strict_shapes = False       # a forward that fails on abstract values is found at run time

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



_NOT_SERVED = {
    "get_variable": "variable sharing by name is not served; make tf.Variable(...) objects "
                    "and pass them around",
    "variable_scope": "variable sharing is not served (tf.name_scope names nodes)",
    "layers": "tf.layers is not served; write the layer with tf.Variable and tf.matmul / "
              "tf.nn.conv2d",
    "contrib": "tf.contrib is not served", "keras": "tf.keras is not served (use jitgraph.nn)",
    "estimator": "estimators are not served", "data": "tf.data is not served (feed batches "
                                                      "with feed_dict)",
    "app": "tf.app is not served (call main() yourself)", "flags": "tf.flags is not served "
                                                                   "(use argparse)",
    "while_loop": "graph control flow is not served yet", "cond": "graph control flow is not "
                                                                  "served yet",
    "control_dependencies": "control dependencies are not served (fetch the ops together in "
                            "one Session.run)",
    "py_func": "py_func is not served: jitgraph compiles the whole run",
    "complex64": "jitgraph computes real numbers only",
    "complex128": "jitgraph computes real numbers only",
    "bfloat16": "NumPy has no bfloat16; use tf.float32",
    "Print": "tf.Print is not served; fetch the tensor with Session.run",
    "sparse_placeholder": "sparse tensors are not served",
}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise not_served(f"tf.{name}", _NOT_SERVED.get(name))


__all__ = list(_array_names) + [
    "Constant", "DType", "Graph", "InteractiveSession", "Operation", "Placeholder", "Session",
    "Tensor", "TensorShape", "Variable", "all_variables", "as_dtype", "as_tensor", "assign",
    "assign_add", "assign_sub", "bool",
    "double", "errors", "float16", "float32", "float64", "get_default_graph",
    "global_variables", "global_variables_initializer", "gradients", "group", "half",
    "initialize_all_variables", "int8", "int16", "int32", "int64", "local_variables_initializer",
    "name_scope", "nn", "no_op", "placeholder", "reset_default_graph", "sigmoid", "string",
    "summary", "train", "trainable_variables", "uint8", "uint16", "uint32", "uint64",
    "variables_initializer"]
