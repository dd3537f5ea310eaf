"""The static graph of ``jitgraph.compat.v1``: ``Tensor`` nodes recorded into a ``Graph``.

Building the graph computes nothing. Each node knows how to compute its value from its inputs'
values with ``jitgraph.numpy`` (``compute``), so a ``Session`` evaluates a subgraph in
topological order inside one traced function, which ``jit`` compiles. A node's static shape and
dtype come from tracing ``compute`` abstractly when it is built (unknown dimensions, TF's
``None``, are those that change when the unknown input dimensions do), so
``get_shape().as_list()`` works as in TensorFlow and a shape mismatch is reported at once.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Sequence

import numpy as np

from ..core import Aval, Trace, aval_of
from ..errors import ShapeError
from .. import numpy as jnp
from . import tf_dtypes


class Graph:
    """A container of nodes; names are unique within a graph (``x``, ``x_1``, ...)."""

    _ids = itertools.count()

    def __init__(self):
        self.nodes: list[Tensor] = []
        self.variables: list[Variable] = []
        self.summaries: list[Tensor] = []
        self._names: dict[str, int] = {}
        self._scope = ""
        self.seed: int | None = None
        self.id = next(Graph._ids)

    def unique_name(self, name: str) -> str:
        name = self._scope + name
        n = self._names.get(name)
        self._names[name] = 0 if n is None else n + 1
        return name if n is None else f"{name}_{n + 1}"

    @contextlib.contextmanager
    def name_scope(self, name: str | None):
        """Prefix the names of the nodes made inside with ``name/`` (made unique, as TF)."""
        old = self._scope
        if name:
            self._scope = name if name.endswith("/") else self.unique_name(name) + "/"
        try:
            yield self._scope
        finally:
            self._scope = old

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
    """The graph new tensors and operations are added to."""
    return _DEFAULT


def reset_default_graph() -> None:
    """Start a new, empty default graph (the old one's tensors stay in the old graph)."""
    global _DEFAULT
    _DEFAULT = Graph()


class TensorShape(tuple):
    """A static shape: a tuple of ints and ``None`` (unknown dimensions), or an unknown rank."""

    def __new__(cls, dims):
        self = super().__new__(cls, () if dims is None else tuple(dims))
        self.known_rank = dims is not None
        return self

    @property
    def ndims(self) -> int | None:
        return len(self) if self.known_rank else None

    def as_list(self) -> list:
        if not self.known_rank:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self)

    def is_fully_defined(self) -> bool:
        return self.known_rank and all(d is not None for d in self)

    def __repr__(self) -> str:
        return f"TensorShape({list(self) if self.known_rank else None})"


class _OpView:
    """``tensor.op``: the operation that makes a tensor (its name has no ``:0``)."""

    def __init__(self, t: "Tensor"):
        self.name, self.type, self.graph = t.op_name, t.op_type, t.graph
        self.inputs = list(t.inputs)

    def __repr__(self) -> str:
        return f"<tf.Operation '{self.name}' type={self.type}>"


class Tensor:
    """A node: ``compute(*input_values)`` gives its value. Arithmetic operators build nodes."""

    _strict_shapes = True        # a shape error found while building is raised at once
    is_operation = False         # an op with no output value (train ops, initializers)

    def __init__(self, inputs: Sequence[Any], compute: Callable | None, op_type: str,
                 name: str | None = None, shape=None, dtype=None):
        self.graph = _DEFAULT
        self.compute = compute
        self.op_type = op_type
        self.inputs = _operands(inputs, op_type)
        for x in self.inputs:
            if x.graph is not self.graph:
                raise ValueError(f"{op_type}: input {x.name!r} belongs to another graph than "
                                 "the default graph; build each model inside one graph")
        self.op_name = self.graph.unique_name(name or op_type)
        self._shape = None if shape is None else tuple(shape)
        self._dtype = None if dtype is None else np.dtype(dtype)
        if compute is not None and shape is None:
            self._shape, inferred = self._infer()
            self._dtype = inferred if self._dtype is None else self._dtype
        self.graph.nodes.append(self)

    @property
    def name(self) -> str:
        return self.op_name if self.is_operation else self.op_name + ":0"

    @property
    def op(self) -> _OpView:
        return _OpView(self)

    @property
    def dtype(self) -> np.dtype | None:
        return self._dtype

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    def get_shape(self) -> TensorShape:
        return TensorShape(self._shape)

    def _infer(self):
        """(shape, dtype) by tracing ``compute`` on abstract inputs: twice, with the unknown
        input dimensions set to 2 and to 3, when some are unknown."""
        ins = self.inputs
        for i in ins:
            if i._dtype is not None and i._dtype.kind == "S":
                raise TypeError(f"{self.op_type}: input '{i.name}' is a string tensor; "
                                "jitgraph computes numbers only (a string constant can only be "
                                "fetched with Session.run)")
        if any(i._dtype is None for i in ins):
            return None, None
        if any(i._shape is None for i in ins):       # unknown rank: the dtype only, from
            avals = self._trace_avals(2, ())          # scalars in place of those inputs
            return None, (avals.dtype if avals is not None else None)
        known = all(d is not None for i in ins for d in i._shape)
        avals = []
        for sub in ((2,) if known else (2, 3)):
            try:
                avals.append(self._trace_avals(sub, None, strict=True))
            except ShapeError as e:
                if known and self._strict_shapes:
                    shapes = ", ".join(f"'{i.name}' {list(i._shape)}" for i in ins)
                    raise ShapeError(f"{self.op_type} '{self.op_name}': {e} (inputs: "
                                     f"{shapes})") from None
                return None, None
            except Exception:            # found out when the graph runs
                return None, None
        if len({a.ndim for a in avals}) != 1 or len({a.dtype for a in avals}) != 1:
            return None, None
        shape = tuple(d if all(a.shape[k] == d for a in avals) else None
                      for k, d in enumerate(avals[0].shape))
        return shape, avals[0].dtype

    def _trace_avals(self, sub: int, unknown_rank, strict: bool = False) -> Aval | None:
        """The output aval of ``compute`` on abstract inputs, unknown dimensions set to ``sub``
        and inputs of unknown rank to shape ``unknown_rank``; None if it fails (unless
        ``strict``, which raises)."""
        try:
            with Trace(abstract=True, what=f"tf.{self.op_type}") as t:
                vals = [i.value if isinstance(i, Constant) else t.new_input(Aval(
                    unknown_rank if i._shape is None else
                    tuple(sub if d is None else d for d in i._shape), i._dtype))
                    for i in self.inputs]
                return aval_of(self.compute(*vals))
        except Exception:
            if strict:
                raise
            return None

    def __repr__(self) -> str:
        shape = "<unknown>" if self._shape is None else "(" + ", ".join(
            "?" if d is None else str(d) for d in self._shape) + ")"
        return (f"<tf.Tensor '{self.name}' shape={shape} dtype="
                f"{'?' if self._dtype is None else self._dtype}>")

    __hash__ = object.__hash__

    def eval(self, feed_dict=None, session=None):
        from .session import default_session
        return (session or default_session()).run(self, feed_dict)

    run = eval       # ``train_op.run(feed_dict=...)`` of an operation

    # operators (no __eq__: tensors compare by identity and key dicts, as in TensorFlow 1)
    def __add__(self, o): return binary(jnp.add, self, o, "Add")
    def __radd__(self, o): return binary(jnp.add, o, self, "Add")
    def __sub__(self, o): return binary(jnp.subtract, self, o, "Sub")
    def __rsub__(self, o): return binary(jnp.subtract, o, self, "Sub")
    def __mul__(self, o): return binary(jnp.multiply, self, o, "Mul")
    def __rmul__(self, o): return binary(jnp.multiply, o, self, "Mul")
    def __truediv__(self, o): return binary(jnp.divide, self, o, "RealDiv")
    def __rtruediv__(self, o): return binary(jnp.divide, o, self, "RealDiv")
    def __floordiv__(self, o): return binary(jnp.floor_divide, self, o, "FloorDiv")
    def __mod__(self, o): return binary(jnp.mod, self, o, "FloorMod")
    def __matmul__(self, o): return binary(jnp.matmul, self, o, "MatMul")
    def __rmatmul__(self, o): return binary(jnp.matmul, o, self, "MatMul")
    def __pow__(self, o): return binary(jnp.power, self, o, "Pow")
    def __rpow__(self, o): return binary(jnp.power, o, self, "Pow")
    def __lt__(self, o): return binary(jnp.less, self, o, "Less")
    def __le__(self, o): return binary(jnp.less_equal, self, o, "LessEqual")
    def __gt__(self, o): return binary(jnp.greater, self, o, "Greater")
    def __ge__(self, o): return binary(jnp.greater_equal, self, o, "GreaterEqual")
    def __neg__(self): return Tensor([self], jnp.negative, "Neg")
    def __abs__(self): return Tensor([self], jnp.abs, "Abs")

    def __getitem__(self, key):
        return Tensor([self], lambda v: v[key], "StridedSlice")


def _operands(inputs: Sequence[Any], op_type: str) -> list["Tensor"]:
    """The inputs as tensors; a Python number next to a tensor takes that tensor's dtype."""
    like = next((x.dtype for x in inputs if isinstance(x, Tensor) and x.dtype is not None
                 and x.dtype.kind != "S"), None)
    out = []
    for x in inputs:
        if isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(Constant(tf_dtypes.python_scalar_like(x, like)))
        else:
            out.append(Constant(x))
    return out


def as_tensor(x: Any) -> Tensor:
    """``x`` as a graph tensor (Python and NumPy values become constants)."""
    return x if isinstance(x, Tensor) else Constant(x)


class Constant(Tensor):
    """A value fixed when the graph is built; a string constant is fetched as ``bytes``."""

    def __init__(self, value, dtype=None, name=None):
        if tf_dtypes.is_string(value) or (dtype is not None
                                          and tf_dtypes.as_dtype(dtype).kind == "S"):
            arr = np.asarray(value, dtype=np.bytes_)
        else:
            arr = tf_dtypes.to_array(value, dtype)
        self.value = arr
        super().__init__([], None, "Const", name, arr.shape, arr.dtype)


class Placeholder(Tensor):
    """A tensor whose value is fed at each ``Session.run``."""
    def __init__(self, dtype, shape=None, name=None):
        if shape is not None and not isinstance(shape, (list, tuple)):
            shape = (shape,)
        super().__init__([], None, "Placeholder", name, shape, tf_dtypes.compute_dtype(dtype))

    def check_feed(self, value) -> np.ndarray:
        """The fed value as an array of this placeholder's dtype, or a clear error."""
        arr = np.asarray(value)
        dt = self._dtype
        if arr.dtype.kind == "f" and dt.kind in "iub" and not np.all(arr == np.round(arr)):
            raise TypeError(f"Cannot feed a {arr.dtype} value to Tensor '{self.name}' of dtype "
                            f"{dt} (the fraction would be lost); round it first")
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"Cannot feed a value of type {arr.dtype} to Tensor '{self.name}' "
                            f"of dtype {dt}")
        if self._shape is not None and (len(arr.shape) != len(self._shape) or any(
                d is not None and d != s for d, s in zip(self._shape, arr.shape))):
            want = "(" + ", ".join("?" if d is None else str(d) for d in self._shape) + ")"
            raise ValueError(f"Cannot feed value of shape {arr.shape} for Tensor "
                             f"'{self.name}', which has shape {want}")
        return np.asarray(arr, dtype=dt, order="C")   # (ascontiguousarray makes 0-d 1-d)


class Variable(Tensor):
    """State kept by a ``Session`` across ``run`` calls; set by an initializer or a train op."""

    def __init__(self, initial_value, trainable: bool = True, name: str | None = None,
                 dtype=None):
        if isinstance(initial_value, Tensor):
            init = initial_value if dtype is None else _cast(initial_value, dtype)
        else:
            init = Constant(initial_value, dtype)
        super().__init__([], None, "Variable", name or "Variable", init._shape, init._dtype)
        self.initial_value = init
        self.trainable = trainable
        self.graph.variables.append(self)

    def initializer_value(self):
        return self.initial_value

    def assign(self, value, name: str | None = None) -> "Special":
        return Special([value], "Assign", name or self.op_name + "/Assign", self._shape,
                       self._dtype, var=self)

    def assign_add(self, value, name: str | None = None) -> "Special":
        return self.assign(self + value, name or self.op_name + "/AssignAdd")

    def assign_sub(self, value, name: str | None = None) -> "Special":
        return self.assign(self - value, name or self.op_name + "/AssignSub")


def _cast(x: Tensor, dtype) -> Tensor:
    d = tf_dtypes.compute_dtype(dtype)
    return Tensor([x], lambda v: jnp.astype(v, d), "Cast", dtype=d)


class Special(Tensor):
    """Nodes the session evaluates itself (gradients, train ops, initializers, random ops)."""

    def __init__(self, inputs, op_type, name=None, shape=None, dtype=None, **info):
        self.is_operation = op_type in ("Init", "NoOp", "TrainOp")
        super().__init__(inputs, None, op_type, name, shape, dtype)
        self.info = info


def binary(fn, a, b, op_type: str, name=None) -> Tensor:
    return Tensor([a, b], fn, op_type, name)


def gradients(ys, xs, grad_ys=None, name: str | None = None, **unused) -> list[Tensor]:
    """Symbolic d(sum of ys)/dx for each x (a list of tensors, as tf.gradients)."""
    if grad_ys is not None:
        raise ValueError("tf.gradients: grad_ys is not served; multiply ys by the weights "
                         "(tf.reduce_sum(ys * grad_ys)) and differentiate that")
    ys = [ys] if isinstance(ys, Tensor) else list(ys)
    xs = [xs] if isinstance(xs, Tensor) else list(xs)
    reached = _reachable(ys)
    connected = [x for x in xs if id(x) in reached]
    grads = {id(x): Special([], "Gradients", name or f"gradients/{x.op_name}", x._shape,
                            x._dtype, ys=ys, xs=connected, index=i, deps=ys + connected)
             for i, x in enumerate(connected)}
    return [grads.get(id(x)) for x in xs]      # None where ys do not depend on x, as in TF


def _reachable(ys: Sequence[Tensor]) -> set:
    """The ids of the nodes the ys are computed from."""
    seen, stack = set(), list(ys)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack += n.inputs + (n.info.get("deps", []) if isinstance(n, Special) else [])
    return seen
