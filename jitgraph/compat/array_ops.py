"""TensorFlow 1's array and math ops as graph nodes computed with ``jitgraph.numpy``.

Each function records a node; its semantics follow TensorFlow 1's documentation where it
differs from NumPy: ``argmax`` without an axis reduces axis 0, reductions take
``reduction_indices=`` / ``keep_dims=`` (TF 1's names), ``tf.shape`` is int32, ``tf.div`` of
integers floors, ``cast`` to a narrow integer dtype wraps.
"""
from __future__ import annotations


import numpy as np

from .. import numpy as jnp
from .. import lax as _lax
from .. import random as jr
from ..core import Tracer, aval_of
from ..errors import ShapeError
from ..scipy import special as _special
from . import tf_dtypes
from .graph import Constant, Special, Tensor, get_default_graph


def _op(fn, op_type):
    def make(*args, name: str | None = None):
        return Tensor(list(args), fn, op_type, name)
    make.__name__ = op_type
    make.__doc__ = f"A graph tensor computing ``jnp.{fn.__name__}`` of the arguments (TF's ``{op_type}``)."
    return make


add = _op(jnp.add, "Add")
subtract = sub = _op(jnp.subtract, "Sub")
multiply = mul = _op(jnp.multiply, "Mul")
divide = truediv = realdiv = _op(jnp.divide, "RealDiv")
floordiv = floor_div = _op(jnp.floor_divide, "FloorDiv")
mod = floormod = _op(jnp.mod, "FloorMod")
log = _op(jnp.log, "Log")
log1p = _op(jnp.log1p, "Log1p")
exp = _op(jnp.exp, "Exp")
square = _op(jnp.square, "Square")
sqrt = _op(jnp.sqrt, "Sqrt")
rsqrt = _op(lambda v: 1 / jnp.sqrt(v), "Rsqrt")
negative = neg = _op(jnp.negative, "Neg")
# TF's gradients on ties: all to x (Maximum: where x >= y; Minimum: where x <= y), not split
maximum = _op(lambda x, y: jnp.where(x >= y, x, y), "Maximum")
minimum = _op(lambda x, y: jnp.where(x <= y, x, y), "Minimum")
pow = _op(jnp.power, "Pow")          # noqa: A001  (TensorFlow's name)
abs = _op(jnp.abs, "Abs")            # noqa: A001
sign = _op(jnp.sign, "Sign")
floor = _op(jnp.floor, "Floor")
ceil = _op(jnp.ceil, "Ceil")
round = _op(lambda v: jnp.round(v), "Round")   # noqa: A001  (half to even, as TF)
sin = _op(jnp.sin, "Sin")
cos = _op(jnp.cos, "Cos")
tanh = _op(jnp.tanh, "Tanh")
squared_difference = _op(lambda a, b: jnp.square(a - b), "SquaredDifference")
equal = _op(jnp.equal, "Equal")
not_equal = _op(jnp.not_equal, "NotEqual")
less = _op(jnp.less, "Less")
less_equal = _op(jnp.less_equal, "LessEqual")
greater = _op(jnp.greater, "Greater")
greater_equal = _op(jnp.greater_equal, "GreaterEqual")
logical_and = _op(jnp.logical_and, "LogicalAnd")
logical_or = _op(jnp.logical_or, "LogicalOr")
logical_not = _op(jnp.logical_not, "LogicalNot")
identity = _op(lambda v: v, "Identity")
zeros_like = _op(jnp.zeros_like, "ZerosLike")
ones_like = _op(jnp.ones_like, "OnesLike")


stop_gradient = _op(_lax.stop_gradient, "StopGradient")


def div(x, y, name: str | None = None) -> Tensor:
    """TF 1's ``div``: floor division for integers, true division for floats."""
    def f(a, b):
        ints = aval_of(a).dtype.kind in "iu" and aval_of(b).dtype.kind in "iu"
        return jnp.floor_divide(a, b) if ints else jnp.divide(a, b)
    return Tensor([x, y], f, "Div", name)


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False,
           name: str | None = None, **unused) -> Tensor:
    """A graph tensor of the matrix product ``a @ b`` (either operand transposed on request),
    as ``tf.matmul``."""
    def f(x, y):
        if transpose_a:
            x = jnp.swapaxes(x, -1, -2)
        if transpose_b:
            y = jnp.swapaxes(y, -1, -2)
        return jnp.matmul(x, y)
    return Tensor([a, b], f, "MatMul", name)


def add_n(inputs, name: str | None = None) -> Tensor:
    """A graph tensor of the elementwise sum of the tensors in ``inputs``."""
    def f(*vals):
        out = vals[0]
        for v in vals[1:]:
            out = out + v
        return out
    return Tensor(list(inputs), f, "AddN", name)


def clip_by_value(t, clip_value_min, clip_value_max, name: str | None = None) -> Tensor:
    """A graph tensor of ``t`` limited to ``[clip_value_min, clip_value_max]``."""
    return Tensor([t, clip_value_min, clip_value_max],
                  lambda v, lo, hi: jnp.minimum(jnp.maximum(v, lo), hi), "ClipByValue", name)


def where(condition, x=None, y=None, name: str | None = None) -> Tensor:
    """A graph tensor taking ``x`` where ``condition`` holds, else ``y`` (both are required)."""
    if x is None or y is None:
        raise ValueError("tf.where(condition) without x and y (the coordinates of the true "
                         "entries) is not served: its shape depends on the values")
    return Tensor([condition, x, y], jnp.where, "Select", name)


# ------------------------------------------------------------------ reductions
def _axis(axis, reduction_indices, fn: str):
    if axis is not None and reduction_indices is not None:
        raise ValueError(f"{fn}: give axis or reduction_indices, not both")
    ax = axis if axis is not None else reduction_indices
    if isinstance(ax, Tensor):
        if not isinstance(ax, Constant):
            raise ValueError(f"{fn}: the axis must be known when the graph is built (a Python "
                             "int or list), not a computed tensor")
        ax = ax.value.tolist()
    if isinstance(ax, np.ndarray):
        ax = ax.tolist()
    return tuple(ax) if isinstance(ax, (list, tuple)) else ax


def _reduction(fn, op_type, tf_name):
    def make(input_tensor, axis=None, keepdims: bool | None = None, name: str | None = None,
             reduction_indices=None, keep_dims: bool | None = None):
        ax = _axis(axis, reduction_indices, tf_name)
        keep = bool(keepdims if keepdims is not None else keep_dims)
        return Tensor([input_tensor], lambda v: fn(v, axis=ax, keepdims=keep), op_type, name)
    make.__name__ = tf_name
    make.__doc__ = f"A graph tensor reducing over ``axis`` with ``jnp.{fn.__name__}`` (TF's ``{tf_name}``)."
    return make


reduce_sum = _reduction(jnp.sum, "Sum", "reduce_sum")
reduce_mean = _reduction(jnp.mean, "Mean", "reduce_mean")
reduce_max = _reduction(jnp.max, "Max", "reduce_max")
reduce_min = _reduction(jnp.min, "Min", "reduce_min")
reduce_prod = _reduction(jnp.prod, "Prod", "reduce_prod")
reduce_any = _reduction(jnp.any, "Any", "reduce_any")
reduce_all = _reduction(jnp.all, "All", "reduce_all")
reduce_logsumexp = _reduction(_special.logsumexp, "ReduceLogSumExp", "reduce_logsumexp")


def _arg(fn, op_type, tf_name):
    def make(input, axis=None, name: str | None = None, dimension=None, output_type=np.int64):
        ax = _axis(axis, dimension, tf_name)
        ax = 0 if ax is None else ax              # TF 1: no axis means axis 0
        out = tf_dtypes.compute_dtype(output_type)
        return Tensor([input], lambda v: jnp.astype(fn(v, axis=ax), out), op_type, name)
    make.__name__ = tf_name
    make.__doc__ = f"A graph tensor of ``jnp.{fn.__name__}`` along ``axis`` (0 when omitted, as TF 1)."
    return make


argmax = arg_max = _arg(jnp.argmax, "ArgMax", "argmax")
argmin = arg_min = _arg(jnp.argmin, "ArgMin", "argmin")


# ------------------------------------------------------------------ dtypes and shapes
def cast(x, dtype, name: str | None = None) -> Tensor:
    """Convert to ``dtype``; floats to integers truncate toward zero, and to a narrow integer
    dtype (int8, int16, uint8, uint16, ...) wrap around, as TensorFlow's cast (through int64,
    whose cast to a narrower integer keeps the low bits)."""
    want = tf_dtypes.as_dtype(dtype)
    d = tf_dtypes.compute_dtype(want)

    def f(v):
        if aval_of(v).dtype.kind == "f" and d.kind in "iu":
            v = jnp.trunc(v)
            v = jnp.astype(v, np.int64) if d.itemsize < 8 else v
        return jnp.astype(v, d)
    return Tensor([x], f, "Cast", name, dtype=d)


def to_float(x, name: str = "ToFloat") -> Tensor:
    """``x`` cast to float32, as TF 1's ``tf.to_float``."""
    return cast(x, np.float32, name)


def to_int32(x, name: str = "ToInt32") -> Tensor:
    """``x`` cast to int32, as TF 1's ``tf.to_int32``."""
    return cast(x, np.int32, name)


def to_int64(x, name: str = "ToInt64") -> Tensor:
    """``x`` cast to int64, as TF 1's ``tf.to_int64``."""
    return cast(x, np.int64, name)


def _static_ints(value, fn: str, what: str) -> list[int]:
    """A shape argument as ints: a list (of ints or scalar constants) or a constant tensor."""
    if isinstance(value, Constant):
        return [int(v) for v in np.ravel(value.value)]
    if isinstance(value, Tensor):
        return None
    out = []
    for v in (value if isinstance(value, (list, tuple, np.ndarray)) else [value]):
        if isinstance(v, Tensor):
            if not isinstance(v, Constant):
                return None
            v = v.value
        out.append(int(v))
    return out


def _concrete(v, fn: str, what: str) -> list[int]:
    """A shape value at run time: known while tracing (``tf.shape`` gives concrete values)."""
    if isinstance(v, Tracer):
        raise ShapeError(f"tf.{fn}: the {what} must be known when the graph is compiled; it is "
                         "computed from variables or fed values. Use tf.shape(x), a Python "
                         "list or a constant")
    return [int(d) for d in np.ravel(np.asarray(v))]


def reshape(tensor, shape, name: str | None = None) -> Tensor:
    """Reshape (one entry may be -1); ``shape`` may come from ``tf.shape``, as in TF."""
    static = _static_ints(shape, "reshape", "shape")
    if static is not None:
        return Tensor([tensor], lambda v: jnp.reshape(v, tuple(static)), "Reshape", name)
    parts = shape if isinstance(shape, (list, tuple)) else [shape]
    return Tensor([tensor, *parts], lambda v, *s: jnp.reshape(v, tuple(
        d for p in s for d in _concrete(p, "reshape", "shape"))), "Reshape", name)


def shape(input, name: str | None = None, out_type=np.int32) -> Tensor:
    """The shape as an int32 vector; known when the graph compiles (one program per fed
    shape), so it can size ``reshape`` and random ops."""
    d = tf_dtypes.compute_dtype(out_type)
    return Tensor([input], lambda v: np.array(aval_of(v).shape, d), "Shape", name)


def size(input, name: str | None = None, out_type=np.int32) -> Tensor:
    """A graph tensor holding the number of elements of ``input``."""
    d = tf_dtypes.compute_dtype(out_type)
    return Tensor([input], lambda v: np.array(aval_of(v).size, d), "Size", name)


def rank(input, name: str | None = None) -> Tensor:
    """A graph tensor holding the number of dimensions of ``input``."""
    return Tensor([input], lambda v: np.array(aval_of(v).ndim, np.int32), "Rank", name)


def transpose(a, perm=None, name: str | None = None, conjugate: bool = False) -> Tensor:
    """A graph tensor of ``a`` with its axes permuted by ``perm`` (reversed by default)."""
    p = None if perm is None else tuple(int(i) for i in perm)
    return Tensor([a], lambda v: jnp.transpose(v, p), "Transpose", name)


def expand_dims(input, axis=None, name: str | None = None, dim=None) -> Tensor:
    """A graph tensor of ``input`` with a length-1 axis inserted at ``axis``."""
    ax = axis if axis is not None else dim
    return Tensor([input], lambda v: jnp.expand_dims(v, ax), "ExpandDims", name)


def squeeze(input, axis=None, name: str | None = None, squeeze_dims=None) -> Tensor:
    """A graph tensor of ``input`` without its length-1 axes (or only those in ``axis``)."""
    ax = _axis(axis, squeeze_dims, "squeeze")
    return Tensor([input], lambda v: jnp.squeeze(v, ax), "Squeeze", name)


def concat(values, axis, name: str = "concat") -> Tensor:
    """A graph tensor joining ``values`` along an existing ``axis``."""
    return Tensor(list(values), lambda *vs: jnp.concatenate(vs, axis=axis), "ConcatV2", name)


def stack(values, axis: int = 0, name: str = "stack") -> Tensor:
    """A graph tensor joining ``values`` along a new ``axis``."""
    def f(*vs):
        if not any(isinstance(v, Tracer) for v in vs):
            return np.stack([np.asarray(v) for v in vs], axis)   # keeps shapes concrete
        return jnp.stack(vs, axis=axis)
    return Tensor(list(values), f, "Pack", name)


def tile(input, multiples, name: str | None = None) -> Tensor:
    """A graph tensor repeating ``input`` ``multiples[i]`` times along each axis ``i``."""
    reps = tuple(_static_ints(multiples, "tile", "multiples") or ())
    return Tensor([input], lambda v: jnp.tile(v, reps), "Tile", name)


def one_hot(indices, depth: int, on_value=None, off_value=None, axis=None, dtype=None,
            name: str | None = None) -> Tensor:
    """A graph tensor of one-hot vectors of length ``depth`` for integer ``indices``."""
    d = tf_dtypes.compute_dtype(dtype if dtype is not None else np.float32)
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    if axis not in (None, -1):
        raise ValueError("tf.one_hot: only axis=-1 (the default) is served")
    return Tensor([indices], lambda i: jnp.where(i[..., None] == jnp.arange(depth), jnp.astype(
        jnp.asarray(on), d), jnp.astype(jnp.asarray(off), d)), "OneHot", name)


def gather(params, indices, axis: int = 0, name: str | None = None, **unused) -> Tensor:
    """A graph tensor of the slices of ``params`` at ``indices`` along ``axis``."""
    return Tensor([params, indices], lambda p, i: jnp.take(p, i, axis=axis), "GatherV2", name)


# ------------------------------------------------------------------ creation and random ops
def constant(value, dtype=None, shape=None, name: str | None = None, **unused) -> Constant:
    """A constant; Python floats are float32 and ints int32 unless ``dtype`` says otherwise;
    a string (or list of strings) is a string constant, fetched as bytes."""
    if shape is not None:
        if tf_dtypes.is_string(value):
            value = np.broadcast_to(np.asarray(value, np.bytes_), tuple(shape))
        else:
            value = np.broadcast_to(tf_dtypes.to_array(value, dtype), tuple(shape)).copy()
    return Constant(value, dtype, name or "Const")


def zeros(shape, dtype=np.float32, name: str | None = None) -> Constant:
    """A constant tensor of ``shape`` filled with zeros."""
    return Constant(np.zeros(tuple(shape) if not np.isscalar(shape) else (shape,),
                             tf_dtypes.compute_dtype(dtype)), name=name or "zeros")


def ones(shape, dtype=np.float32, name: str | None = None) -> Constant:
    """A constant tensor of ``shape`` filled with ones."""
    return Constant(np.ones(tuple(shape) if not np.isscalar(shape) else (shape,),
                            tf_dtypes.compute_dtype(dtype)), name=name or "ones")


def fill(dims, value, name: str | None = None) -> Constant:
    """A constant tensor of shape ``dims`` filled with ``value``."""
    return constant(value, shape=dims, name=name or "Fill")


def linspace(start, stop, num, name: str | None = None) -> Constant:
    """A constant tensor of ``num`` evenly spaced values from ``start`` to ``stop``."""
    return Constant(np.linspace(start, stop, num, dtype=np.float32), name=name or "LinSpace")


def range(start, limit=None, delta=1, dtype=None, name: str = "range") -> Constant:  # noqa: A001
    """A constant tensor of the values ``start, start + delta, ...`` below ``limit``, as
    ``tf.range``."""
    vals = np.arange(start, limit, delta) if limit is not None else np.arange(start)
    return Constant(tf_dtypes.to_array(vals.tolist(), dtype), name=name)


def set_random_seed(seed: int) -> None:
    """The graph-level seed: sessions of this graph seed their random ops from it."""
    get_default_graph().seed = int(seed)


def _random(shape, dtype, sample, op_type, name, params, seed):
    g = get_default_graph()
    static = _static_ints(shape, op_type, "shape")
    d = tf_dtypes.compute_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"{op_type}: dtype {d} is not served; random values are floats")
    if static is not None:
        return Special(list(params), "Random", name or op_type, tuple(static), d,
                       index=len(g.nodes) if seed is None else int(seed),
                       sample=lambda k, *p: sample(k, tuple(static), d, *p))
    parts = shape if isinstance(shape, (list, tuple)) else [shape]
    n = len(params)
    return Special(list(params) + list(parts), "Random", name or op_type, None, d,
                   index=len(g.nodes) if seed is None else int(seed),
                   sample=lambda k, *p: sample(k, tuple(
                       x for s in p[n:] for x in _concrete(s, op_type, "shape")), d, *p[:n]))


def random_uniform(shape, minval=0.0, maxval=None, dtype=np.float32, seed=None,
                   name: str | None = None) -> Special:
    """A tensor of uniform samples in ``[minval, maxval)``, drawn again at each ``Session.run``."""
    hi = 1.0 if maxval is None else maxval
    return _random(shape, dtype, lambda k, s, d, lo, h: jr.uniform(k, s, d) * (h - lo) + lo,
                   "RandomUniform", name, [minval, hi], seed)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=np.float32, seed=None,
                  name: str | None = None) -> Special:
    """Normal values; ``mean`` and ``stddev`` may be tensors (e.g. a fed noise scale)."""
    return _random(shape, dtype, lambda k, s, d, m, sd: jr.normal(k, s, d) * sd + m,
                   "RandomStandardNormal", name, [mean, stddev], seed)


_LO, _HI = 0.022750131948179195, 0.9772498680518208      # the normal CDF at -2 and 2


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=np.float32, seed=None,
                     name: str | None = None) -> Special:
    """Normal values more than 2 standard deviations from the mean are redrawn (as TF): drawn
    here by the inverse CDF of a uniform on (cdf(-2), cdf(2))."""
    def sample(k, s, d, m, sd):
        u = jr.uniform(k, s, np.float64, _LO, _HI)
        return jnp.astype(_special.ndtri(u), d) * sd + m
    return _random(shape, dtype, sample, "TruncatedNormal", name, [mean, stddev], seed)


def random_shuffle(value, seed=None, name: str | None = None) -> Special:
    """A tensor of ``value`` shuffled along its first axis, again at each ``Session.run``."""
    g = get_default_graph()
    t = value if isinstance(value, Tensor) else Constant(value)
    return Special([t], "Random", name or "RandomShuffle", t._shape, t._dtype,
                   index=len(g.nodes) if seed is None else int(seed),
                   sample=lambda k, v: jr.permutation(k, v))


__all__ = [n for n, v in list(globals().items())
           if not n.startswith("_") and callable(v) and getattr(v, "__module__", "") == __name__]
