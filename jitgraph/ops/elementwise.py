"""Elementwise primitives (NumPy broadcasting between operands).

Each definition carries its shape rule, NumPy reference, VJP, JVP and code-generation record
(``core.Lowering``). Its rule is ``rule(ctx, *input_exprs) -> scalar expression``, written with
the backend's syntax table, which ``ctx`` is (``compiler/syntax.py``: ``ctx.op``, ``ctx.select``,
``ctx.call``...), so the rule writes no syntax of its own; ``ctx.fn(name)`` names the backend's
scalar math function (libm, a vectorizable approximation, or CUDA's), as the record of primitive
``name`` says.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..core import Aval, Lowering, Primitive, register
from ..errors import ShapeError
from ..batching import elementwise_rule
from .binders import add_tangents, broadcast_tangent, cast, select, unbroadcast


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dims = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError("shapes " + " and ".join(str(s) for s in shapes)
                             + " cannot be broadcast together (NumPy broadcasting: trailing "
                             "dimensions must match or be 1); reshape or transpose an operand")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _same_dtype(avals, name):
    ds = {a.dtype for a in avals}
    if len(ds) > 1:
        raise TypeError(f"operands must share a dtype, got {', '.join(str(a.dtype) for a in avals)}"
                        " (use jitgraph.numpy functions, which promote, or .astype)")
    return avals[0].dtype


#: the elementwise primitives defined for complex operands (``ops/complex.py`` lists them):
#: the others refuse complex dtypes, as the Array API standard leaves them undefined there
COMPLEX_OK: set[str] = set()


def elementwise_aval(*avals, out_dtype=None, float_only=False, name=""):
    dtype = _same_dtype(avals, name)
    if dtypes.is_complex(dtype) and name not in COMPLEX_OK:
        raise TypeError(f"{name} is not defined for complex operands ({dtype}); apply it to "
                        "the real and imaginary parts (jnp.real, jnp.imag), or to jnp.abs(x)")
    if float_only and not dtypes.is_inexact(dtype):
        raise TypeError(f"needs a floating-point operand, got {dtype}")
    shape = broadcast_shapes(*(a.shape for a in avals))
    out = out_dtype(dtype) if callable(out_dtype) else out_dtype     # (a rule: abs's)
    return Aval(shape, out or dtype, weak=all(a.weak for a in avals))


UNARY: dict[str, Primitive] = {}
BINARY: dict[str, Primitive] = {}


def call(fn: str, **fields) -> Lowering:
    """The record of an op computed by the backend's scalar routine ``fn`` (``ctx.fn(fn)``)."""
    return Lowering.scalar(lambda c, *xs: c.call(c.fn(fn), *xs), **fields)


def operator(op: str, **fields) -> Lowering:
    """The record of an op that is operator ``op`` of the syntax table (``ctx.op``)."""
    return Lowering.scalar(lambda c, *xs: c.op(op, *xs), **fields)


def ours(fn: str) -> dict[str, str]:
    """``functions`` of a routine both backends' kernel modules define (``kernels.scalar``,
    ``kernels.cuda_scalar``) as ``fn``."""
    return {"cpu": fn, "cuda": fn}


# ``x op y`` of one float type is that type in Numba's (and CUDA's) typing rules; int64 too
_KEEPS_TYPE = {"keeps_float": True, "keeps_int64": True}


def unary(name, impl, codegen, vjp=None, jvp=None, float_only=True, out_dtype=None,
          differentiable=True):
    """Define a unary elementwise primitive; ``codegen`` is its record (``call``,
    ``Lowering.scalar``) or just its expression rule; ``jvp`` defaults to the VJP's local
    derivative."""
    def aval(x):
        return elementwise_aval(x, out_dtype=out_dtype, float_only=float_only, name=name)
    if jvp is None and vjp is not None:
        def jvp(ts, out, x, _vjp=vjp):
            return None if ts[0] is None else _vjp(ts[0], out, x)[0]
    p = register(Primitive(name, kind="elementwise", abstract_eval=aval, impl=impl, vjp=vjp,
                           jvp=jvp, codegen=codegen, differentiable=differentiable))
    p.batch = elementwise_rule(p)
    UNARY[name] = p
    return p


def binary(name, impl, codegen, vjp=None, jvp=None, out_dtype=None, differentiable=True,
           float_only=False):
    def aval(x, y):
        return elementwise_aval(x, y, out_dtype=out_dtype, float_only=float_only, name=name)
    p = register(Primitive(name, kind="elementwise", abstract_eval=aval, impl=impl, vjp=vjp,
                           jvp=jvp, codegen=codegen, differentiable=differentiable))
    p.batch = elementwise_rule(p)
    BINARY[name] = p
    return p


# ---------------------------------------------------------------- unary math (floats)
# VJP rules: (g, out, x) -> (dx,). Because they are linear in g, the JVP is the same rule on t.
neg_p = unary("neg", np.negative, operator("negate", **_KEEPS_TYPE),
              float_only=False, vjp=lambda g, out, x: (-g,))
exp_p = unary("exp", np.exp, call("exp", cost=4, approx=True),
              vjp=lambda g, out, x: (g * out,))
log_p = unary("log", np.log, call("log", cost=4, approx=True),
              vjp=lambda g, out, x: (g / x,))
log1p_p = unary("log1p", np.log1p, call("log1p", cost=4, approx=True),
                vjp=lambda g, out, x: (g / (1.0 + x),))
expm1_p = unary("expm1", np.expm1, call("expm1", cost=4, approx=True),
                vjp=lambda g, out, x: (g * (out + 1.0),))
sin_p = unary("sin", np.sin, call("sin", cost=4),
              vjp=lambda g, out, x: (g * cos_p(x),))
cos_p = unary("cos", np.cos, call("cos", cost=4),
              vjp=lambda g, out, x: (-(g * sin_p(x)),))
tan_p = unary("tan", np.tan, call("tan", cost=6),
              vjp=lambda g, out, x: (g * (1.0 + out * out),))
tanh_p = unary("tanh", np.tanh, call("tanh", cost=4, approx=True),
               vjp=lambda g, out, x: (g * (1.0 - out * out),))
logistic_p = unary("logistic", lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)),
                   call("logistic", cost=4, approx=True,
                        functions={"cpu": "logistic", "cuda": "logistic_{f}"}),
                   vjp=lambda g, out, x: (g * (out * (1.0 - out)),))
sqrt_p = unary("sqrt", np.sqrt, call("sqrt", cost=2),
               vjp=lambda g, out, x: (g / (2.0 * out),))
_erf_vec = np.vectorize(math.erf, otypes=[np.float64])
erf_p = unary("erf", lambda x: _erf_vec(x).astype(x.dtype),
              call("erf", cost=6, functions=ours("erf")),
              vjp=lambda g, out, x: (g * (2.0 / math.sqrt(math.pi)) * exp_p(-(x * x)),))
def _abs_vjp(g, out, x):
    if dtypes.is_complex(x.dtype):
        from .complex import conj_p     # (defined with the complex ops, after this module)
        # d|z| = Re(conj(z)/|z| dz); its transpose (JAX's convention) is g conj(z)/|z|, 0 at
        # z = 0 (written with z, not sign(z), whose derivative is taken as 0, as JAX's)
        return (cast(g / _nonzero(out), x.dtype) * conj_p(x),)
    return (g * sign_p(x),)


def _abs_jvp(ts, out, x):
    if ts[0] is None:
        return None
    if dtypes.is_complex(x.dtype):
        from .complex import conj_p, real_p
        return real_p(conj_p(x) * ts[0]) / _nonzero(out)
    return ts[0] * sign_p(x)


def _nonzero(r):
    """``r``, with 1 where it is 0 (a divisor whose numerator is 0 there)."""
    return select(r == 0, np.ones((), r.dtype), r)


abs_p = unary("abs", np.abs, lambda c, x: c.call("abs", x), float_only=False,
              vjp=_abs_vjp, jvp=_abs_jvp, out_dtype=dtypes.real_dtype)
def _sign_impl(x):
    """np.sign; for complex ``x``, x/|x| (0 at 0) as JAX and the Array API standard, whose
    infinities give NaN (NumPy's gives 1 for inf + 0j; generated code calls Numba's, which
    divides)."""
    if not dtypes.is_complex(x.dtype):
        return np.sign(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.abs(x)
        return np.where(a == 0, x * 0, x / np.where(a == 0, 1, a)).astype(x.dtype)


sign_p = unary("sign", _sign_impl, call("sign", functions=ours("sign")), float_only=False,
               vjp=lambda g, out, x: (None,))
floor_p = unary("floor", np.floor, call("floor", functions=ours("floor")),
                vjp=lambda g, out, x: (None,))
not_p = unary("logical_not", np.logical_not, operator("not"), float_only=False,
              differentiable=False)


def _stop_impl(x):
    return x


stop_gradient_p = unary("stop_gradient", _stop_impl,
                        Lowering.scalar(lambda c, x: x, flops=0, **_KEEPS_TYPE), float_only=False,
                        vjp=lambda g, out, x: (None,), jvp=lambda ts, out, x: None)


# ---------------------------------------------------------------- binary arithmetic
def _add_vjp(g, out, x, y):
    return unbroadcast(g, x.aval), unbroadcast(g, y.aval)


def _sub_vjp(g, out, x, y):
    return unbroadcast(g, x.aval), unbroadcast(-g, y.aval)


def _mul_vjp(g, out, x, y):
    return unbroadcast(g * y, x.aval), unbroadcast(g * x, y.aval)


def _div_vjp(g, out, x, y):
    gx = g / y
    return unbroadcast(gx, x.aval), unbroadcast(-(gx * out), y.aval)


def _safe_log(x):
    """log(x) where x > 0, else 0: the exponent's derivative of x**y is taken as 0 at x <= 0
    (for complex x, the principal log where x != 0)."""
    pos = (x != 0) if dtypes.is_complex(x.dtype) else x > 0
    return select(pos, log_p(select(pos, x, 1.0)), 0.0)


def _pow_dbase(x, y):
    """d(x**y)/dx = y x**(y-1), taken as 0 where y == 0 (not 0 * inf at x = 0), as autograd."""
    return y * (x ** select(y == 0, 1.0, y - 1.0))


def _pow_vjp(g, out, x, y):
    gx = g * _pow_dbase(x, y)
    gy = g * out * _safe_log(x)
    return unbroadcast(gx, x.aval), unbroadcast(gy, y.aval)


def _pow_jvp(ts, out, x, y):
    tx, ty = ts
    res = None if tx is None else tx * _pow_dbase(x, y)
    if ty is not None:
        res = add_tangents(res, ty * out * _safe_log(x))
    return broadcast_tangent(res, out.shape)


def _minmax_vjp(pick_x):
    def vjp(g, out, x, y):
        half = select(x == y, 0.5, 0.0).astype(g.dtype)
        wx = select(pick_x(x, y), 1.0, 0.0).astype(g.dtype) + half
        return unbroadcast(g * wx, x.aval), unbroadcast(g * (1.0 - wx), y.aval)
    return vjp


def _minmax_jvp(pick_x):
    def jvp(ts, out, x, y):
        half = select(x == y, 0.5, 0.0).astype(out.dtype)
        wx = select(pick_x(x, y), 1.0, 0.0).astype(out.dtype) + half
        tx, ty = ts
        r = None if tx is None else tx * wx
        r = add_tangents(r, None if ty is None else ty * (1.0 - wx))
        return broadcast_tangent(r, out.shape)
    return jvp


add_p = binary("add", np.add, operator("plus", **_KEEPS_TYPE),
               vjp=_add_vjp,
               jvp=lambda ts, out, x, y: broadcast_tangent(add_tangents(*ts), out.shape))
sub_p = binary("sub", np.subtract,
               operator("minus", **_KEEPS_TYPE), vjp=_sub_vjp,
               jvp=lambda ts, out, x, y: broadcast_tangent(
                   add_tangents(ts[0], None if ts[1] is None else -ts[1]), out.shape))
mul_p = binary("mul", np.multiply,
               operator("times", **_KEEPS_TYPE), vjp=_mul_vjp,
               jvp=lambda ts, out, x, y: broadcast_tangent(add_tangents(
                   None if ts[0] is None else ts[0] * y,
                   None if ts[1] is None else x * ts[1]), out.shape))
div_p = binary("div", lambda x, y: np.true_divide(x, y).astype(x.dtype),
               operator("divide", cost=2, keeps_float=True),
               vjp=_div_vjp, float_only=True,
               jvp=lambda ts, out, x, y: broadcast_tangent(add_tangents(
                   None if ts[0] is None else ts[0] / y,
                   None if ts[1] is None else -(ts[1] * out / y)), out.shape))
pow_p = binary("pow", np.power, call("pow", cost=8, functions=ours("power")), vjp=_pow_vjp,
               jvp=_pow_jvp, float_only=True)
max_p = binary("max", np.maximum, call("max", functions=ours("maximum")),
               vjp=_minmax_vjp(lambda x, y: x > y), jvp=_minmax_jvp(lambda x, y: x > y))
min_p = binary("min", np.minimum, call("min", functions=ours("minimum")),
               vjp=_minmax_vjp(lambda x, y: x < y), jvp=_minmax_jvp(lambda x, y: x < y))


def _int_floor_div(x, y):
    return np.floor_divide(x, y)


floordiv_p = binary("floordiv", _int_floor_div, operator("floor_divide"),
                    differentiable=False)
mod_p = binary("mod", np.mod, operator("remainder"),
               vjp=lambda g, out, x, y: (unbroadcast(g, x.aval),
                                         unbroadcast(-g * floor_p(x / y), y.aval)),
               jvp=lambda ts, out, x, y: broadcast_tangent(add_tangents(
                   ts[0], None if ts[1] is None else -(ts[1] * floor_p(x / y))), out.shape))

# ---------------------------------------------------------------- comparisons and logic (bool out)
_CMP = {"gt": (np.greater, "greater"), "ge": (np.greater_equal, "greater_equal"),
        "lt": (np.less, "less"), "le": (np.less_equal, "less_equal"),
        "eq": (np.equal, "equal"), "ne": (np.not_equal, "not_equal")}
for _name, (_fn, _op) in _CMP.items():
    binary(_name, _fn, operator(_op), out_dtype=dtypes.bool_, differentiable=False)
and_p = binary("logical_and", np.logical_and, operator("and"), differentiable=False)
or_p = binary("logical_or", np.logical_or, operator("or"), differentiable=False)


# ---------------------------------------------------------------- select and convert
def _select_aval(c, x, y):
    if c.dtype != dtypes.bool_:
        raise TypeError(f"condition must be bool, got {c.dtype}")
    out = elementwise_aval(x, y, name="select")
    return Aval(broadcast_shapes(c.shape, out.shape), out.dtype, out.weak)


def _select_vjp(g, out, c, x, y):
    z = np.zeros((), g.dtype)
    return None, unbroadcast(select(c, g, z), x.aval), unbroadcast(select(c, z, g), y.aval)


def _select_jvp(ts, out, c, x, y):
    _, tx, ty = ts
    if tx is None and ty is None:
        return None
    z = np.zeros((), out.dtype)
    return broadcast_tangent(select(c, z if tx is None else tx, z if ty is None else ty), out.shape)


select_p = register(Primitive(
    "select", kind="elementwise", abstract_eval=_select_aval, impl=np.where,
    vjp=_select_vjp, jvp=_select_jvp,   # (the condition is bool: the type is x's and y's)
    codegen=Lowering.scalar(lambda c, cond, x, y: c.select(cond, x, y), **_KEEPS_TYPE)))


def _convert_aval(x, *, dtype):
    return Aval(x.shape, dtype)


def _convert_vjp(g, out, x, *, dtype):
    if not dtypes.is_inexact(x.dtype):
        return (None,)
    return (cast(g, x.dtype),)


def _convert_jvp(ts, out, x, *, dtype):
    if ts[0] is None or not dtypes.is_inexact(dtype):
        return None
    return cast(ts[0], dtype)


convert_p = register(Primitive(
    "convert", kind="elementwise", abstract_eval=_convert_aval,
    impl=lambda x, *, dtype: (np.real(x) if dtypes.is_complex(x.dtype) and
                              not dtypes.is_complex(dtype) else x).astype(dtype),
    vjp=_convert_vjp, jvp=_convert_jvp,
    codegen=Lowering.scalar(lambda c, x, *, dtype: c.convert(x, c.in_dtype, dtype), flops=0),
    moves_data=True))


# ---------------------------------------------------------------- batching (unary/binary: above)
select_p.batch = elementwise_rule(select_p)
convert_p.batch = elementwise_rule(convert_p)
