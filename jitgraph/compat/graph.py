"""The static graph of ``jitgraph.compat.v1``: ``Tensor`` nodes recorded into a ``Graph``.

Building the graph computes nothing. Each node knows how to compute its value from its inputs'
values with ``jitgraph.numpy`` (``compute``), so a ``Session`` evaluates a subgraph in
topological order inside one traced function, which ``jit`` compiles.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Sequence

import numpy as np

from .. import dtypes
from .. import numpy as jnp


class Graph:
    """A container of nodes; names are unique within a graph (``x``, ``x_1``, ...)."""

    _ids = itertools.count()

    def __init__(self):
        self.nodes: list[Tensor] = []
        self.variables: list[Variable] = []
        self._names: dict[str, int] = {}
        self.seed = 0
        self.id = next(Graph._ids)

    def unique_name(self, name: str) -> str:
        n = self._names.get(name)
        self._names[name] = 0 if n is None else n + 1
        return name if n is None else f"{name}_{n + 1}"

    @contextlib.contextmanager
    def as_default(self):
        global _DEFAULT
        old, _DEFAULT = _DEFAULT, self
        try:
            yield self
        finally:
            _DEFAULT = old


_DEFAULT = Graph()


def get_default_graph() -> Graph:
    return _DEFAULT


def reset_default_graph() -> None:
    global _DEFAULT
    _DEFAULT = Graph()


class Tensor:
    """A node: ``compute(*input_values)`` gives its value. Arithmetic operators build nodes."""

    def __init__(self, inputs: Sequence[Any], compute: Callable | None, op_type: str,
                 name: str | None = None, shape=None, dtype=None):
        self.graph = _DEFAULT
        self.inputs = [as_tensor(x) for x in inputs]
        for x in self.inputs:
            if x.graph is not self.graph:
                raise ValueError(f"{op_type}: input {x.name!r} belongs to another graph than "
                                 "the default graph; build each model inside one graph")
        self.compute = compute
        self.op_type = op_type
        self.name = self.graph.unique_name(name or op_type)
        self.shape = None if shape is None else tuple(shape)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.graph.nodes.append(self)

    def get_shape(self):
        return self.shape

    def __repr__(self) -> str:
        shape = "?" if self.shape is None else "(" + ", ".join(
            "?" if d is None else str(d) for d in self.shape) + ")"
        return f"<tf.Tensor '{self.name}' op={self.op_type} shape={shape}>"

    __hash__ = object.__hash__

    def eval(self, feed_dict=None, session=None):
        from .session import default_session
        return (session or default_session()).run(self, feed_dict)

    # operators
    def __add__(self, o): return binary(jnp.add, self, o, "Add")
    def __radd__(self, o): return binary(jnp.add, o, self, "Add")
    def __sub__(self, o): return binary(jnp.subtract, self, o, "Sub")
    def __rsub__(self, o): return binary(jnp.subtract, o, self, "Sub")
    def __mul__(self, o): return binary(jnp.multiply, self, o, "Mul")
    def __rmul__(self, o): return binary(jnp.multiply, o, self, "Mul")
    def __truediv__(self, o): return binary(jnp.divide, self, o, "RealDiv")
    def __rtruediv__(self, o): return binary(jnp.divide, o, self, "RealDiv")
    def __matmul__(self, o): return binary(jnp.matmul, self, o, "MatMul")
    def __rmatmul__(self, o): return binary(jnp.matmul, o, self, "MatMul")
    def __pow__(self, o): return binary(jnp.power, self, o, "Pow")
    def __neg__(self): return Tensor([self], jnp.negative, "Neg")


def as_tensor(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return Constant(x)


class Constant(Tensor):
    def __init__(self, value, dtype=None, name=None):
        arr = np.asarray(value, dtype=None if dtype is None else np.dtype(dtype))
        arr = arr.astype(dtypes.canonical(arr.dtype))
        self.value = arr
        super().__init__([], None, "Const", name, arr.shape, arr.dtype)


class Placeholder(Tensor):
    def __init__(self, dtype, shape=None, name=None):
        super().__init__([], None, "Placeholder", name, shape, dtypes.canonical(dtype))

    def check_feed(self, value) -> np.ndarray:
        """The fed value as an array of this placeholder's dtype, or a clear error."""
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and self.dtype.kind in "iub":
            raise TypeError(f"Cannot feed a {arr.dtype} value to Tensor '{self.name}' of dtype "
                            f"{self.dtype} (the fraction would be lost); round it first")
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"Cannot feed a value of type {arr.dtype} to Tensor '{self.name}' "
                            f"of dtype {self.dtype}")
        if self.shape is not None and (len(arr.shape) != len(self.shape) or any(
                d is not None and d != s for d, s in zip(self.shape, arr.shape))):
            want = "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
            raise ValueError(f"Cannot feed value of shape {arr.shape} for Tensor "
                             f"'{self.name}', which has shape {want}")
        return np.ascontiguousarray(arr, dtype=self.dtype)


class Variable(Tensor):
    """State kept by a ``Session`` across ``run`` calls; set by an initializer or a train op."""

    def __init__(self, initial_value, trainable: bool = True, name: str | None = None,
                 dtype=None):
        init = as_tensor(initial_value if dtype is None or isinstance(initial_value, Tensor)
                         else np.asarray(initial_value, dtype))
        super().__init__([], None, "Variable", name or "Variable", init.shape, init.dtype)
        self.initial_value = init
        self.trainable = trainable
        self.graph.variables.append(self)

    def initializer_value(self):
        return self.initial_value


class Special(Tensor):
    """Nodes the session evaluates itself (gradients, train ops, initializers, random ops)."""

    def __init__(self, inputs, op_type, name=None, shape=None, dtype=None, **info):
        super().__init__(inputs, None, op_type, name, shape, dtype)
        self.info = info


def binary(fn, a, b, op_type: str, name=None) -> Tensor:
    return Tensor([a, b], fn, op_type, name)


def topo_order(targets: Sequence[Tensor]) -> list[Tensor]:
    """Every node the targets depend on, inputs before users."""
    order, seen = [], set()
    stack = [(t, False) for t in reversed(targets)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        deps = list(node.inputs)
        if isinstance(node, Special):
            deps += node.info.get("deps", [])
        stack.extend((d, False) for d in reversed(deps) if id(d) not in seen)
    return order
