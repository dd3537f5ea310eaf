"""The expression-graph IR and tracing.

* ``Aval``: abstract value (shape, dtype, weak-typed Python scalar or not).
* ``Var``/``Node``/``Graph``: the IR. One ``Node`` applies one ``Primitive`` to ``Var`` inputs.
* ``Primitive``: the single definition of an op: shape/dtype rule, NumPy reference
  implementation, VJP and JVP rules (written with primitives) and its code-generation record,
  a ``Lowering``: what the compiler's fusion and both backends need to know about the op.
* ``Trace``/``Tracer``: running a Python function on ``Tracer`` objects records nodes into a
  ``Trace``. A tracer may also carry its concrete value (``val``), which is how ``grad`` outside
  ``jit`` lets Python control flow look at values, as autograd and JAX do.
* ``bind``: apply a primitive to arrays (evaluates eagerly with the reference implementation) or
  tracers (records a node in the innermost trace involved).
"""
from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import config, dtypes
from .arrays import Array
from .errors import ConcretizationError, LeakedTracerError, ShapeError, user_frame, where
from .targets import capabilities


# --------------------------------------------------------------------------- abstract values
class Aval:
    """Shape and dtype of a value; ``weak`` marks values that came from Python scalars."""

    __slots__ = ("shape", "dtype", "weak", "_hash")

    def __init__(self, shape: Sequence[int], dtype, weak: bool = False):
        self.shape = shape if type(shape) is tuple and all(type(s) is int for s in shape) \
            else tuple(int(s) for s in shape)
        self.dtype = dtype if type(dtype) in _DTYPE_TYPES else np.dtype(dtype)
        self.weak = weak
        self._hash = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Aval) and self.shape == other.shape
                                 and self.dtype == other.dtype and self.weak == other.weak)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash((self.shape, self.dtype, self.weak))
        return h

    def strong(self) -> "Aval":
        return Aval(self.shape, self.dtype) if self.weak else self

    def __repr__(self) -> str:
        return short_dtype(self.dtype) + "[" + ",".join(map(str, self.shape)) + "]"


_DTYPE_TYPES = frozenset(type(d) for d in dtypes.SUPPORTED)
_SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool",
          "float16": "f16", "bfloat16": "bf16"}


def short_dtype(dtype) -> str:
    return _SHORT.get(np.dtype(dtype).name, np.dtype(dtype).name)


_ARRAY_AVALS: dict = {}   # (shape, dtype) -> Aval: arrays of one shape share their Aval
_WEAK_AVALS: dict = {}


def _weak_avals() -> None:
    """Python scalars' avals, for the default dtypes ``jitgraph.config`` sets."""
    _WEAK_AVALS.update({t: Aval((), dtypes.python_scalar_dtype(t()), weak=True)
                        for t in (bool, int, float, complex)})


_weak_avals()
config.on_change(_weak_avals)


def aval_of(x: Any) -> Aval:
    """Abstract value of a tracer, an array or a Python scalar (weak)."""
    t = type(x)
    if t is Tracer:
        return x.gvar.aval
    if t is np.ndarray or t is Array:
        key = (x.shape, x.dtype)
        a = _ARRAY_AVALS.get(key)
        if a is None:
            a = Aval(x.shape, dtypes.canonical(x.dtype))
            if len(_ARRAY_AVALS) < 4096:
                _ARRAY_AVALS[key] = a
        return a
    a = _WEAK_AVALS.get(t)
    if a is not None:
        return a
    if isinstance(x, Tracer):
        return x.gvar.aval
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return Aval((), dtypes.python_scalar_dtype(x), weak=True)
    if isinstance(x, (np.ndarray, np.generic)):
        return Aval(x.shape, dtypes.canonical(x.dtype))
    raise TypeError(f"expected an array, a scalar or a traced value, got {type(x).__name__}")


# --------------------------------------------------------------------------- IR
_var_ids = itertools.count()


class Var:
    """A value in a graph. Identity matters; ``aval`` gives shape and dtype."""

    __slots__ = ("aval", "id")

    def __init__(self, aval: Aval):
        self.aval = aval
        self.id = next(_var_ids)

    def __repr__(self) -> str:
        return f"v{self.id}:{self.aval}"


class Node:
    """``outs = prim(*inputs, **params)``; ``source`` is the user's file:line that made it."""

    __slots__ = ("prim", "inputs", "params", "outs", "source")

    def __init__(self, prim: "Primitive", inputs: list[Var], params: dict, outs: list[Var],
                 source=None):
        self.prim = prim
        self.inputs = inputs
        self.params = params
        self.outs = outs
        self.source = source

    @property
    def out(self) -> Var:
        return self.outs[0]

    def __repr__(self) -> str:
        return f"Node({self.prim.name}, {self.inputs} -> {self.outs})"


class Graph:
    """A closed expression graph: ``outputs = f(*inputs)``; ``consts`` holds literal arrays."""

    def __init__(self, inputs: list[Var], nodes: list[Node], outputs: list[Var],
                 consts: dict[Var, np.ndarray], in_tree=None, out_tree=None):
        self.inputs = inputs
        self.nodes = nodes
        self.outputs = outputs
        self.consts = consts
        self.in_tree = in_tree
        self.out_tree = out_tree

    def __str__(self) -> str:
        from .printing import graph_to_text
        return graph_to_text(self)

    __repr__ = __str__

    def to_dot(self) -> str:
        """Graphviz source of the graph."""
        from .printing import graph_to_dot
        return graph_to_dot(self)

    def count(self, prim_name: str) -> int:
        return sum(1 for n in self.nodes if n.prim.name == prim_name)


class SharedGraph(Graph):
    """A graph kept and reused across calls (a cached trace, e.g. of a custom_vjp function).
    Node parameters holding one are keyed by its identity (``params_key``), so nodes that
    carry it can be cached by structure like nodes with plain parameters."""


# --------------------------------------------------------------------------- code generation
# What code the compiler makes for a primitive (``Lowering.kind``):
SCALAR = "scalar"            # a scalar expression inside a fused loop kernel
INDEX_MAP = "index_map"      # index arithmetic: the element is read from the input elsewhere
GATHER = "gather"            # reads of ``x`` at clamped positions taken from index arrays
REDUCE = "reduce"            # a loop accumulating with ``monoid``
ARG_REDUCE = "arg_reduce"    # a loop keeping the position of the ``monoid`` ("max" or "min")
SCATTER_ADD = "scatter_add"  # its own kernel adding updates at indexed positions
MATMUL = "matmul"            # BLAS or the backend's matrix-product kernel
HOST = "host"                # no generated code: ``impl`` runs between kernels


@dataclass(frozen=True)
class Lowering:
    """A primitive's code-generation record: everything fusion and the backends know about
    it, kept on the primitive (``prim.lowering``) so a new op, or an op new to a backend,
    is written in one place."""

    kind: str = HOST
    """What code the compiler makes for the op: one of the kinds above."""
    rule: Callable | None = None
    """SCALAR: ``rule(ctx, *input_exprs, **params) -> expression``, backend-neutral: ``ctx`` is
    the backend's syntax table (``compiler/syntax.py``), and names scalar routines with
    ``ctx.fn``. INDEX_MAP: ``rule(ctx, out_idx, in_aval, out_aval, **params) -> in_idx`` (see
    ``ops.layout``)."""
    monoid: str | None = None
    """REDUCE: "sum", "max", "min" or "prod"; ARG_REDUCE: "max" or "min"."""
    cost: int = 1
    """Work per element, in adds: fusion stores a value used twice rather than recompute it
    when its cost (with its unstored inputs') reaches ``fusion.EXPENSIVE``."""
    functions: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Backend -> the scalar routine ``ctx.fn(<op name>)`` names there (default
    ``math.<name>``); ``{f}`` stands for the operand's float type, ``f32`` or ``f64``."""
    approx: bool = False
    """The CPU has vectorizable approximations ``<name>_f32``/``<name>_f64`` (LLVM cannot
    vectorize libm calls), used under ``approx_math``; they return their argument's type."""
    keeps_float: bool = False
    """On operands of one float type the expression has that type (Numba's typing of
    ``x + y``), so the generated code needs no cast around it: casts cost compile time."""
    keeps_int64: bool = False
    """The same for int64 operands (not true division, whose result is a float)."""
    flops: int = 1
    """Arithmetic operations per output element a profile counts (none for a cast)."""
    masked: bool = False
    """INDEX_MAP: the rule returns ``(in_idx, condition)``; the element is read where the
    condition holds, else it is 0 (padding, a transposed window)."""

    @classmethod
    def scalar(cls, rule: Callable, **fields: Any) -> "Lowering":
        return cls(SCALAR, rule, **fields)

    @classmethod
    def index_map(cls, rule: Callable, masked: bool = False) -> "Lowering":
        """Layout ops move elements: no arithmetic to recompute, so no cost."""
        return cls(INDEX_MAP, rule, cost=0, flops=0, masked=masked)

    @classmethod
    def of(cls, codegen: Any, kind: str) -> "Lowering":
        """The record of a primitive given ``codegen``: a record, None (a host step) or, for an
        elementwise or layout op, its expression rule or index map."""
        if isinstance(codegen, Lowering):
            return codegen
        if codegen is None or kind not in ("elementwise", "layout"):
            return HOST_STEP     # (a rule on another kind of op was never generated code)
        return cls.scalar(codegen) if kind == "elementwise" else cls.index_map(codegen)

    @property
    def reduces(self) -> bool:
        return self.kind in (REDUCE, ARG_REDUCE)


HOST_STEP = Lowering(HOST)


def _float_suffix(dtype: np.dtype) -> str:
    return "f32" if dtype == np.float32 else "f64"


def scalar_function(name: str, backend: str, in_dtype: np.dtype, approx_math: bool) -> str:
    """The routine generated code calls for ``ctx.fn(name)``: the one the record of primitive
    ``name`` gives for ``backend`` (``in_dtype``: the operand's), else ``math.<name>``.
    ``backend`` is a registered target's name (``targets.register_target``)."""
    approx = _uses_approximations(backend, approx_math)
    prim = PRIMITIVES.get(name)
    if np.dtype(in_dtype).kind == "c":
        return _complex_function(name, prim)
    if prim is None:
        return f"math.{name}"
    low, dtype = prim.lowering, np.dtype(in_dtype)
    if approx and low.approx and dtype.kind == "f":
        return f"{name}_{_float_suffix(dtype)}"
    fn = low.functions.get(backend)
    return f"math.{name}" if fn is None else fn.format(f=_float_suffix(dtype))


#: ``math``'s names of the inverse functions, as NumPy's ufuncs name them
_NUMPY_NAMES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                "acosh": "arccosh", "atanh": "arctanh"}


def _complex_function(name: str, prim: "Primitive | None") -> str:
    """The routine for a complex operand: the NumPy ufunc of that name (or the one that is
    the op's reference), which Numba's CPU target compiles for complex scalars (``math``'s
    functions take only reals)."""
    name = _NUMPY_NAMES.get(name, name)
    if isinstance(getattr(np, name, None), np.ufunc):
        return f"np.{name}"
    if prim is not None and isinstance(prim.impl, np.ufunc):
        return f"np.{prim.impl.__name__}"
    raise TypeError(f"{name} has no compiled routine for complex operands; compute it "
                    "from jnp.real(x) and jnp.imag(x)")


def approximations() -> list[str]:
    """The routines of the vectorizable approximations the records declare
    (``Lowering.approx``), ``<name>_f32`` and ``<name>_f64`` per primitive, in the order the
    primitives were defined: what a backend with them imports."""
    return [f"{name}_{suffix}" for name, prim in PRIMITIVES.items() if prim.lowering.approx
            for suffix in ("f32", "f64")]


def returns_input_type(name: str, backend: str, approx_math: bool) -> bool:
    """Whether ``ctx.fn(name)`` on ``backend`` is known to return its argument's float type
    (the CPU's approximations), so the expression needs no cast."""
    prim = PRIMITIVES.get(name)
    return _uses_approximations(backend, approx_math) and prim is not None and \
        prim.lowering.approx


def _uses_approximations(backend: str, approx_math: bool) -> bool:
    """Whether ``backend`` calls the records' approximations (``Lowering.approx``): under
    ``approx_math``, where its capabilities say it has them. Raises on an unknown name."""
    return capabilities(backend).approx_functions and approx_math


# --------------------------------------------------------------------------- primitives
class Primitive:
    """One op, defined once: every rule the pipeline needs lives on this object.

    Calling a primitive (``prim(*args, **params)``) records a node when an argument is traced
    and runs ``impl`` otherwise. ``jitgraph.defprimitive`` makes one from a NumPy function;
    the guide "Adding a primitive" walks through every rule.

    Example: the built-in ``sin``, and its rules.

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> sin = jitgraph.PRIMITIVES["sin"]
    >>> sin, sin.kind
    (sin, 'elementwise')
    >>> sin.abstract_eval(jitgraph.Aval((3,), np.float64))
    f64[3]
    >>> sin.impl(np.array([0.0]))
    array([0.])

    ```

    :param name: the op's name in graphs and messages (the key in ``jitgraph.PRIMITIVES``).
    :param kind: how the compiler treats it: ``"elementwise"``, ``"reduce"``, ``"layout"``,
        ``"index"``, ``"matmul"``, ``"opaque"`` or ``"call"``.
    :param abstract_eval: ``abstract_eval(*avals, **params) -> Aval``: the output's shape and
        dtype from the inputs' (a list of avals when ``multiple_results``).
    :param impl: ``impl(*arrays, **params) -> ndarray``: the NumPy reference, the ground truth.
    :param vjp: ``vjp(cts, outs, *inputs, **params) -> list``: the inputs' cotangents, written
        with ``jnp`` and primitives (``None`` in the list is a zero cotangent).
    :param jvp: ``jvp(tangents, outs, *inputs, **params)``: the output tangent(s).
    :param codegen: the ``Lowering`` record, or (elementwise and layout ops) just its
        expression rule or index map; ``None``: a host step. The compiler reads ``lowering``,
        the record.
    :param multiple_results: whether it returns a list of arrays.
    :param differentiable: ``False``: no gradient flows through it (autodiff treats its outputs
        as constants).
    :param moves_data: whether it only moves, selects or converts values (layouts, gathers,
        ``convert``, calls and control flow, whose bodies are already traced) and so runs on
        16-bit floats as they are; every other primitive computes in float32 on them
        (``bind`` widens float16/bfloat16 operands and rounds float32 results back).
        Default: true for the ``layout``, ``index`` and ``call`` kinds.
    :param batch: ``batch(args, dims, **params) -> (out, out_dim)``: the batching rule
        ``vmap`` uses; ``dims[i]`` is the batch axis of ``args[i]`` or ``None`` (unbatched);
        ``multiple_results`` primitives return ``(outs, out_dims)``. See ``jitgraph.batching``.
    """

    def __init__(self, name: str, *, kind: str, abstract_eval: Callable, impl: Callable,
                 vjp: Callable | None = None, jvp: Callable | None = None, codegen: Any = None,
                 multiple_results: bool = False, differentiable: bool = True,
                 batch: Callable | None = None, moves_data: bool | None = None):
        self.name = name
        self.kind = kind
        self.abstract_eval = abstract_eval
        self.impl = impl
        self.vjp = vjp
        self.jvp = jvp
        self.lowering = Lowering.of(codegen, kind)
        self.multiple_results = multiple_results
        self.differentiable = differentiable
        self.batch = batch
        self.moves_data = kind in ("layout", "index", "call") if moves_data is None \
            else moves_data

    @property
    def codegen(self) -> Callable | None:
        """The expression rule or index map (what ``codegen=`` took before records)."""
        return self.lowering.rule

    def __repr__(self) -> str:
        return self.name

    def __call__(self, *args, **params):
        return bind(self, *args, **params)


PRIMITIVES: dict[str, Primitive] = {}


def register(prim: Primitive) -> Primitive:
    if prim.name in PRIMITIVES:
        raise ValueError(f"a primitive named {prim.name!r} already exists")
    PRIMITIVES[prim.name] = prim
    return prim


# --------------------------------------------------------------------------- tracing
# Set by ``keeping_sources``: the nodes a transform traces inside ``jit`` (``grad``'s forward
# pass) record the user's line too, and graphs re-emitted into a trace keep their nodes' lines
# (``autodiff._replay``), so ``debug_nans``' re-trace of a training step names the line in the
# loss function rather than the call of the step. Off, tracing does exactly what it did.
KEEP_SOURCES = [False]


class keeping_sources:
    """``with keeping_sources():`` every traced node records the user's line (see above)."""

    def __enter__(self):
        self.old, KEEP_SOURCES[0] = KEEP_SOURCES[0], True

    def __exit__(self, *exc):
        KEEP_SOURCES[0] = self.old


class _TraceStack(threading.local):
    """The nesting of active traces, per thread (tracing in two threads must not interleave)."""

    def __init__(self):
        self.stack: list["Trace"] = []


_TRACES = _TraceStack()


class Trace:
    """Records nodes while a Python function runs on tracers.

    ``abstract`` traces (jit, make_graph) never hold values, so Python control flow on a traced
    value raises. Other traces carry concrete values alongside the graph.
    """

    def __init__(self, abstract: bool = False, what: str = "trace"):
        self.level = len(_TRACES.stack)
        self.abstract = abstract
        self.what = what
        self.inputs: list[Var] = []
        self.nodes: list[Node] = []
        self.consts: dict[Var, np.ndarray] = {}
        self.captured: dict[int, tuple["Tracer", Var]] = {}
        self._const_cache: dict[int, tuple[Any, Var]] = {}
        self.values: dict[Var, Any] = {}   # concrete value of each var (non-abstract traces)
        self.concrete = not abstract        # every var so far has a value in ``values``
        self.active = False

    def __enter__(self) -> "Trace":
        self.level = len(_TRACES.stack)
        _TRACES.stack.append(self)
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        popped = _TRACES.stack.pop()
        assert popped is self
        self.active = False

    def new_input(self, aval: Aval, val: Any = None) -> "Tracer":
        v = Var(aval)
        self.inputs.append(v)
        if self.abstract:
            val = None
        elif val is not None:
            self.values[v] = val
        else:
            self.concrete = False
        return Tracer(self, v, val)

    def const_var(self, value: Any, aval: Aval | None = None) -> Var:
        """The var of a constant, one per value object; ``aval``: the one it had in another
        graph, when it is recorded again (a weak-typed scalar stays weak)."""
        key = id(value)
        hit = self._const_cache.get(key)
        if hit is not None and hit[0] is value and (aval is None or hit[1].aval == aval):
            return hit[1]
        if aval is None:
            aval = aval_of(value)
        arr = np.asarray(value, dtype=aval.dtype)
        v = Var(aval)
        self.consts[v] = arr
        if not self.abstract:
            self.values[v] = arr
        self._const_cache[key] = (value, v)
        return v

    def to_var(self, x: Any) -> Var:
        if isinstance(x, Tracer):
            if x.trace is self:
                return x.gvar
            if not x.trace.active:
                raise LeakedTracerError(
                    f"a traced value {x.gvar.aval} from a finished {x.trace.what} was used; traced "
                    "values must not escape the function being transformed (return them instead)")
            hit = self.captured.get(id(x))
            if hit is None:
                v = Var(x.gvar.aval)
                self.captured[id(x)] = (x, v)
                return v
            return hit[1]
        return self.const_var(x)

    def value_of(self, x: Any) -> Any:
        if isinstance(x, Tracer):
            return x.val if x.trace is self or not self.abstract else None
        return x

    def emit(self, prim: Primitive, args: Sequence[Any], out_avals: list[Aval],
             params: dict) -> list["Tracer"]:
        in_vars = []
        in_vals = []
        known = True
        for x in args:
            if type(x) is Tracer:
                in_vars.append(x.gvar if x.trace is self else self.to_var(x))
                v = x.val
                in_vals.append(v)
                if v is None:
                    known = False
            else:
                in_vars.append(self.to_var(x))
                in_vals.append(x)
        outs = [Var(a) for a in out_avals]
        if self.abstract:
            # graphs of abstract traces (jit, make_graph) live on: their nodes name the user's
            # line. Un-jitted transforms evaluate or re-emit their graphs at once, and skip
            # the stack walk (an error about a node names where it was differentiated).
            self.nodes.append(Node(prim, in_vars, params, outs, user_frame(3)))
            return [Tracer(self, o) for o in outs]
        if not known:
            # (under jit: a transform's trace of abstract values; see ``keeping_sources``)
            self.nodes.append(Node(prim, in_vars, params, outs,
                                   user_frame(3) if KEEP_SOURCES[0] else None))
            self.concrete = False
            return [Tracer(self, o) for o in outs]
        self.nodes.append(Node(prim, in_vars, params, outs))
        vals = run_impl(prim, in_vals, params, out_avals)
        if len(outs) == 1:
            o, v = outs[0], vals[0]
            self.values[o] = v
            return [Tracer(self, o, v)]
        self.values.update(zip(outs, vals))
        return [Tracer(self, o, v) for o, v in zip(outs, vals)]

    def to_graph(self, out_values: Sequence[Any], in_tree=None, out_tree=None) -> Graph:
        """Close the trace: outputs may be tracers of this trace, outer tracers or constants."""
        outs = [self.to_var(o) for o in out_values]
        inputs = list(self.inputs) + [v for _, v in self.captured.values()]
        return Graph(inputs, list(self.nodes), outs, dict(self.consts), in_tree, out_tree)

    def captured_values(self) -> list["Tracer"]:
        return [t for t, _ in self.captured.values()]


class EvalTrace(Trace):
    """Evaluates primitives on concrete values without recording nodes: eager derivative rules.

    Its tracers carry their ``Var`` (so rules read ``.aval``, and weak types promote as in a
    graph) and their value; ``bind`` on them runs the reference implementation at once.
    """

    def __init__(self, what: str = "an eager backward pass"):
        super().__init__(abstract=False, what=what)

    def emit(self, prim: Primitive, args: Sequence[Any], out_avals: list[Aval],
             params: dict) -> list["Tracer"]:
        in_vals = []
        for x in args:
            if isinstance(x, Tracer):
                if x.trace is not self:
                    raise LeakedTracerError(
                        f"{prim.name}: a traced value of {x.trace.what} reached "
                        f"{self.what}, which evaluates concrete values only")
                x = x.val
            in_vals.append(x)
        vals = run_impl(prim, in_vals, params, out_avals)
        return [Tracer(self, Var(a), v) for a, v in zip(out_avals, vals)]


def _fp_error_state():
    """(context variable, value) that silence NumPy floating-point warnings, as
    ``np.errstate(all='ignore')`` does, or None on a NumPy without them. NumPy 2 keeps that
    state in a context variable; setting it directly costs a fraction of building an
    ``np.errstate`` per operation, which is as much as the small operations eager gradients
    run."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar as var
        with np.errstate(all="ignore"):
            return var, var.get()
    except (ImportError, AttributeError):   # another NumPy: the public way
        return None


_FP_IGNORE = _fp_error_state()


class _FpErrorsIgnored:
    """``with fp_errors_ignored():`` is ``with np.errstate(all='ignore'):``, cheaper."""

    __slots__ = ("token",)

    def __enter__(self):
        self.token = _FP_IGNORE[0].set(_FP_IGNORE[1])

    def __exit__(self, *exc):
        _FP_IGNORE[0].reset(self.token)


def fp_errors_ignored():
    return _FpErrorsIgnored() if _FP_IGNORE is not None else np.errstate(all="ignore")


def _bind_widened(prim: Primitive, args: Sequence[Any], avals: list, params: dict) -> Any:
    """``prim`` on 16-bit float operands: computed in float32 and rounded back, once per
    primitive (XLA's float normalization; JAX's results on the CPU). Sums, products and
    every transcendental accumulate in float32; the graph holds the converts, which fusion
    puts into the kernels' loads and stores. The result keeps the narrow type when every
    float operand (or the ``dtype=`` asked for) has it."""
    narrow = {a.dtype for a in avals if a.dtype in dtypes.NARROW_SET}
    wanted = params.get("dtype")
    if wanted in dtypes.NARROW_SET:
        narrow.add(wanted)
        params = {**params, "dtype": dtypes.float32}
    wide_floats = any(dtypes.is_float(a.dtype) and a.dtype not in dtypes.NARROW_SET and not a.weak
                      for a in avals)
    target = next(iter(narrow)) if len(narrow) == 1 and not wide_floats else None
    convert = PRIMITIVES["convert"]
    wide = [bind(convert, x, dtype=dtypes.float32) if av.dtype in dtypes.NARROW_SET else x
            for x, av in zip(args, avals)]
    out = bind(prim, *wide, **params)
    if target is None:
        return out
    outs = out if prim.multiple_results else [out]
    back = [bind(convert, o, dtype=target) if aval_of(o).dtype == dtypes.float32 else o
            for o in outs]
    return back if prim.multiple_results else back[0]


def run_impl(prim: Primitive, in_vals: Sequence[Any], params: dict,
             out_avals: list[Aval]) -> list[np.ndarray]:
    """Run the reference implementation and pin results to the dtypes the shape rule promised."""
    ndarray = np.ndarray
    arrays = [v if type(v) is ndarray else np.asarray(v) for v in in_vals]
    if _FP_IGNORE is None:
        with np.errstate(all="ignore"):
            res = prim.impl(*arrays, **params)
    else:
        token = _FP_IGNORE[0].set(_FP_IGNORE[1])
        try:
            res = prim.impl(*arrays, **params) if params else prim.impl(*arrays)
        finally:
            _FP_IGNORE[0].reset(token)
    if not prim.multiple_results:     # (one result: the common case, without the loop)
        a = out_avals[0]
        if type(res) is not ndarray or res.dtype is not a.dtype or res.shape != a.shape:
            res = pinned(res, a)
        return [res]
    out = []
    for r, a in zip(res, out_avals):
        if type(r) is not ndarray or r.dtype is not a.dtype or r.shape != a.shape:
            r = pinned(r, a)
        out.append(r)
    return out


def pinned(r: Any, a: Aval) -> np.ndarray:
    """``r`` (a NumPy scalar from a 0-d operation, or an array) with ``a``'s dtype and shape."""
    r = np.asarray(r, dtype=a.dtype)
    return r if r.shape == a.shape else r.reshape(a.shape)


class Tracer:
    """A value inside a trace; behaves like an ndarray (operators are installed by jitgraph.numpy)."""

    __slots__ = ("trace", "gvar", "val")
    __array_priority__ = 1000
    # no __array_ufunc__: with the high __array_priority__, ndarray + tracer defers to
    # Tracer.__radd__, and NumPy functions call __array__, which explains what to do instead

    def __init__(self, trace: Trace, var: Var, val: Any = None):
        self.trace = trace
        self.gvar = var
        self.val = val

    aval = property(lambda self: self.gvar.aval)
    shape = property(lambda self: self.gvar.aval.shape)
    dtype = property(lambda self: self.gvar.aval.dtype)
    ndim = property(lambda self: self.gvar.aval.ndim)
    size = property(lambda self: self.gvar.aval.size)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced value")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced value")
        return (self[i] for i in range(self.shape[0]))

    def _concrete(self, what: str) -> Any:
        if self.val is None:
            raise ConcretizationError(
                f"{what} needs a concrete value, but this is an abstract traced value "
                f"{self.gvar.aval} inside {self.trace.what} (at {where(user_frame(3))}).\n"
                "Python control flow cannot depend on traced values under jit/make_graph: use "
                "jnp.where(cond, a, b) to select values, or mark the argument static with "
                "jit(f, static_argnums=...) / static_argnames=...")
        return self.val

    def __bool__(self) -> bool:
        v = self._concrete("bool() / if / while")
        return bool(v)

    def __float__(self) -> float:
        return float(self._concrete("float()"))

    def __int__(self) -> int:
        return int(self._concrete("int()"))

    def __index__(self) -> int:
        if not dtypes.is_integer_or_bool(self.dtype):
            raise TypeError("only integer traced values can be used as an index")
        return int(self._concrete("using a traced value as a Python index"))

    def item(self):
        return self._concrete(".item()").item()

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"a traced value {self.gvar.aval} was passed to a NumPy function (at "
            f"{where(user_frame(2))}); use the jitgraph.numpy function of the same name "
            "(import jitgraph.numpy as jnp) so it can be traced")

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        if self.val is not None:
            return f"Traced<{self.gvar.aval}>(value={self.val!r})"
        return f"Traced<{self.gvar.aval}>"


def top_trace(args: Sequence[Any]) -> Trace | None:
    top = None
    for a in args:
        if isinstance(a, Tracer) and (top is None or a.trace.level > top.level):
            top = a.trace
    return top


def _format_operands(avals: Sequence[Aval]) -> str:
    return ", ".join(repr(a) for a in avals)


_SHAPE_RULE_CACHE: dict = {}   # (prim, avals, params) -> output aval(s): rules are pure
_SHAPE_RULE_CACHE_MAX = 8192


_PARAM_TYPES = frozenset({int, float, bool, str, type(None), tuple, SharedGraph}) | _DTYPE_TYPES


class KeyedParams(dict):
    """Parameters built once and shared by the nodes of many calls (a cached custom_vjp
    call's), with their ``params_key`` computed once: ``KeyedParams.of(**params)``."""

    __slots__ = ("key",)

    @classmethod
    def of(cls, **params: Any) -> "KeyedParams":
        p = cls(params)
        p.key = params_key(params)
        return p


def params_key(params: dict) -> tuple | None:
    """A hashable key equal for equal parameter dicts, or None when a parameter is not a plain
    value (a graph, an array, a callable). Types are part of the key (``1`` and ``True``
    hash alike)."""
    if type(params) is KeyedParams:
        return params.key
    key = []
    for k, v in params.items():
        tv = type(v)
        if tv not in _PARAM_TYPES:
            return None
        key += (k, tv, v)
    key = tuple(key)
    try:
        hash(key)
    except TypeError:                        # a tuple holding something unhashable
        return None
    return key


def _abstract_eval(prim: Primitive, avals: list[Aval], params: dict) -> Any:
    """``prim.abstract_eval``, memoized: eager code applies the same ops to the same shapes
    over and over, and shape rules are pure."""
    if params:
        pk = params_key(params)
        if pk is None:
            return prim.abstract_eval(*avals, **params)
        key = (prim, pk, *avals)
    else:
        key = (prim, *avals)
    out = _SHAPE_RULE_CACHE.get(key)
    if out is None:
        out = prim.abstract_eval(*avals, **params)
        if len(_SHAPE_RULE_CACHE) < _SHAPE_RULE_CACHE_MAX:
            _SHAPE_RULE_CACHE[key] = out
    return out


def bind(prim: Primitive, *args: Any, **params: Any) -> Any:
    """Apply ``prim``: record a node if any argument is traced, else evaluate with NumPy."""
    avals = []
    trace = None
    narrow = False
    for a in args:      # one pass: operand avals, and the innermost trace involved
        if type(a) is Tracer:
            av = a.gvar.aval
            if trace is None or a.trace.level > trace.level:
                trace = a.trace
        else:
            av = aval_of(a)
        avals.append(av)
        if av.dtype in dtypes.NARROW_SET:
            narrow = True
    if (narrow or params.get("dtype") in dtypes.NARROW_SET) and not prim.moves_data:
        return _bind_widened(prim, args, avals, params)
    try:
        out = _abstract_eval(prim, avals, params)
    except (ShapeError, TypeError, ValueError, IndexError) as e:
        frame = user_frame(2)
        msg = (f"{prim.name}: {e}\n  operands: {_format_operands(avals)}\n"
               f"  at {where(frame)}")
        raise type(e)(msg) from None
    out_avals = list(out) if prim.multiple_results else [out]
    if trace is None:
        res = run_impl(prim, args, params, out_avals)
    else:
        if not trace.active:
            raise LeakedTracerError(
                f"{prim.name}: a traced value from a finished {trace.what} was used (at "
                f"{where(user_frame(2))}); traced values must not escape the function being "
                "transformed (return them instead)")
        res = trace.emit(prim, args, out_avals, params)
    return res if prim.multiple_results else res[0]
