"""The shared table of function-level cases.

Each ``Case`` is a plain function of arrays (no Python control flow on values) with tiny fixed
arguments and a NumPy expectation (``expect``), so the same table serves

* ``test_reference.py``: eager jitgraph == NumPy (values and exact dtypes), and the traced graph
  run by the reference interpreter == eager;
* ``test_grads.py``: every ``grad=True`` case through ``check_grads`` (order 2, both modes);
* the compiler's tests: ``for case in CASES: jit(case.fn)(*case.args)`` against the reference.

``argnums`` names the arguments that are differentiated (the others, e.g. integer labels, are
held fixed). ``dual(name, f, *args)`` builds a case from one body ``f(m, *args)`` written against
a module ``m`` that is ``jitgraph.numpy`` for ``fn`` and ``numpy`` for ``expect``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.special as sps
import scipy.stats as sst

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.scipy import linalg as jsl
from jitgraph.scipy import special as jsp
from jitgraph.scipy import stats as jst


@dataclass
class Case:
    name: str
    fn: Callable
    args: tuple
    grad: bool = True
    argnums: Any = 0
    expect: Callable | None = None
    rtol: float | None = None
    atol: float | None = None
    order: int = 2           # highest derivative order check_grads verifies

    def __repr__(self) -> str:
        return f"Case({self.name})"

    @property
    def diff_argnums(self) -> tuple[int, ...]:
        return (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)


CASES: list[Case] = []
_rng = np.random.default_rng(20240611)


def case(name, fn, *args, expect=None, grad=True, argnums=0, rtol=None, atol=None, order=2):
    c = Case(name, fn, tuple(args), grad, argnums, expect, rtol, atol, order)
    if any(x.name == name for x in CASES):
        raise ValueError(f"duplicate case name {name}")
    CASES.append(c)
    return c


def dual(name, f, *args, **kw):
    """A case whose jitgraph body and NumPy expectation are the same code ``f(m, *args)``."""
    fn = lambda *a, _f=f: _f(jnp, *a)          # noqa: E731
    ex = lambda *a, _f=f: _f(np, *a)           # noqa: E731
    return case(name, fn, *args, expect=ex, **kw)


# ------------------------------------------------------------------ data
def rn(*shape, dtype=np.float64):
    """Standard normal."""
    return _rng.standard_normal(shape).astype(dtype)


def pos(*shape, dtype=np.float64, lo=0.5, hi=2.0):
    return _rng.uniform(lo, hi, shape).astype(dtype)


def away(*shape, dtype=np.float64):
    """Random values with |x| in [0.3, 2], either sign (kinks of abs/max/etc. stay far)."""
    mag = _rng.uniform(0.3, 2.0, shape)
    sgn = np.where(_rng.uniform(size=shape) < 0.5, -1.0, 1.0)
    return (mag * sgn).astype(dtype)


def distinct(*shape, dtype=np.float64):
    """A random permutation of well-separated values (no ties for max/min/argmax)."""
    n = int(np.prod(shape, dtype=np.int64))
    v = (_rng.permutation(n) - n / 2.0) * 0.37 + _rng.uniform(-0.05, 0.05, n)
    return v.reshape(shape).astype(dtype)


def ints(*shape, lo=-5, hi=6, dtype=np.int64):
    return _rng.integers(lo, hi, shape).astype(dtype)


def nonzero_ints(*shape, dtype=np.int64):
    v = _rng.integers(1, 6, shape) * np.where(_rng.uniform(size=shape) < 0.5, -1, 1)
    return v.astype(dtype)


F32, F64 = np.float32, np.float64

# ------------------------------------------------------------------ unary elementwise
# name -> (body f(m, x), sampler, extra numpy-side body when numpy has no such function)
_UNARY = {
    "negative": (lambda m, x: m.negative(x), rn),
    "neg_op": (lambda m, x: -x, rn),
    "exp": (lambda m, x: m.exp(x), rn),
    "log": (lambda m, x: m.log(x), pos),
    "log1p": (lambda m, x: m.log1p(x), pos),
    "expm1": (lambda m, x: m.expm1(x), rn),
    "sin": (lambda m, x: m.sin(x), rn),
    "cos": (lambda m, x: m.cos(x), rn),
    "tan": (lambda m, x: m.tan(x), lambda *s, dtype=F64: _rng.uniform(-1, 1, s).astype(dtype)),
    "tanh": (lambda m, x: m.tanh(x), rn),
    "sqrt": (lambda m, x: m.sqrt(x), pos),
    "abs": (lambda m, x: m.abs(x), away),
    "absolute": (lambda m, x: m.absolute(x), away),
    "abs_op": (lambda m, x: abs(x), away),
    "sign": (lambda m, x: m.sign(x), away),
    "floor": (lambda m, x: m.floor(x), lambda *s, dtype=F64: (
        _rng.integers(-4, 4, s) + _rng.uniform(0.2, 0.8, s)).astype(dtype)),
    "square": (lambda m, x: m.square(x), rn),
    "reciprocal": (lambda m, x: m.reciprocal(x), away),
    "pos_op": (lambda m, x: +x, rn),
}
_UNARY_SHAPES = [("f64_2x3", (2, 3), F64, True), ("f32_2x3", (2, 3), F32, False),
                 ("f64_0d", (), F64, True), ("f64_size0", (0, 3), F64, True)]

for _n, (_f, _s) in _UNARY.items():
    for _tag, _shape, _dt, _g in _UNARY_SHAPES:
        dual(f"{_n}[{_tag}]", _f, _s(*_shape, dtype=_dt), grad=_g)

# integer inputs where NumPy defines the op on ints (non-differentiable)
for _n in ("negative", "abs", "sign", "square", "neg_op"):
    dual(f"{_n}[i32]", _UNARY[_n][0], ints(2, 3, dtype=np.int32), grad=False)
    dual(f"{_n}[i64_0d]", _UNARY[_n][0], ints(dtype=np.int64), grad=False)
# float functions of integer input promote to float64, as NumPy
for _n in ("exp", "sin", "sqrt", "tanh"):
    dual(f"{_n}[i64->f64]", _UNARY[_n][0], np.abs(nonzero_ints(4)), grad=False)
# jnp.reciprocal is 1.0 / x (NumPy's integer reciprocal truncates to 0; jitgraph follows JAX)
case("reciprocal[i64->f64]", jnp.reciprocal, nonzero_ints(4), expect=lambda x: 1.0 / x,
     grad=False)
dual("exp[i32->f64]", lambda m, x: m.exp(x), ints(3, dtype=np.int32), grad=False)
dual("floor[i64]", lambda m, x: m.floor(x * 0.5), ints(5), grad=False)

# logistic / erf have no NumPy name: expectation from scipy
for _tag, _shape, _dt, _g in _UNARY_SHAPES:
    _x = rn(*_shape, dtype=_dt)
    case(f"sigmoid[{_tag}]", lambda x: nn.sigmoid(x), _x, expect=lambda x: sps.expit(x), grad=_g)
    case(f"expit[{_tag}]", lambda x: jsp.expit(x), _x, expect=lambda x: sps.expit(x), grad=_g)
    case(f"erf[{_tag}]", lambda x: jsp.erf(x), _x, expect=lambda x: sps.erf(x), grad=_g)
case("erf[big]", lambda x: jsp.erf(x), np.array([-6.0, -2.5, 0.0, 1e-3, 3.0]),
     expect=lambda x: sps.erf(x))

# stop_gradient: forward identity (its zero derivative is tested in test_grads)
case("stop_gradient", lambda x: x * jnp.stop_gradient(x), rn(3), expect=lambda x: x * x,
     grad=False)
case("stop_gradient[i32]", lambda x: jitgraph.stop_gradient(x) + 1, ints(3, dtype=np.int32),
     expect=lambda x: x + 1, grad=False)

# ------------------------------------------------------------------ binary elementwise
_BINARY = {
    "add": (lambda m, x, y: m.add(x, y), rn, rn),
    "add_op": (lambda m, x, y: x + y, rn, rn),
    "subtract": (lambda m, x, y: m.subtract(x, y), rn, rn),
    "sub_op": (lambda m, x, y: x - y, rn, rn),
    "multiply": (lambda m, x, y: m.multiply(x, y), rn, rn),
    "mul_op": (lambda m, x, y: x * y, rn, rn),
    "divide": (lambda m, x, y: m.divide(x, y), rn, away),
    "true_divide": (lambda m, x, y: m.true_divide(x, y), rn, away),
    "div_op": (lambda m, x, y: x / y, rn, away),
    "maximum": (lambda m, x, y: m.maximum(x, y), distinct, lambda *s, dtype=F64:
                distinct(*s, dtype=dtype) + 0.1),
    "minimum": (lambda m, x, y: m.minimum(x, y), distinct, lambda *s, dtype=F64:
                distinct(*s, dtype=dtype) + 0.1),
    "power": (lambda m, x, y: m.power(x, y), pos, rn),
    "pow_op": (lambda m, x, y: x ** y, pos, rn),
    "mod": (lambda m, x, y: m.mod(x, y), lambda *s, dtype=F64: _rng.uniform(0.1, 0.9, s).astype(dtype) + ints(*s, lo=-3, hi=3).astype(dtype),
            lambda *s, dtype=F64: _rng.uniform(1.2, 2.0, s).astype(dtype) * 1.0),
    "remainder": (lambda m, x, y: m.remainder(x, y), lambda *s, dtype=F64: _rng.uniform(0.1, 0.9, s).astype(dtype) + 2.0,
                  lambda *s, dtype=F64: np.full(s, 1.5, dtype)),
}
_BINARY_SHAPES = [
    ("same", (2, 3), (2, 3), F64, True),
    ("bcast_row", (2, 3), (3,), F64, True),
    ("bcast_outer", (2, 1), (1, 3), F64, True),
    ("bcast_3d", (2, 1, 3), (4, 1), F64, True),
    ("0d_2d", (), (2, 3), F64, True),
    ("both_0d", (), (), F64, True),
    ("size0", (0, 3), (3,), F64, True),
    ("f32", (2, 3), (3,), F32, False),
]
for _n, (_f, _sx, _sy) in _BINARY.items():
    for _tag, _shx, _shy, _dt, _g in _BINARY_SHAPES:
        dual(f"{_n}[{_tag}]", _f, _sx(*_shx, dtype=_dt), _sy(*_shy, dtype=_dt), grad=_g,
             argnums=(0, 1))

# mixed dtypes: promotion exactly as NumPy 2
dual("add[f32+f64]", lambda m, x, y: x + y, rn(3, dtype=F32), rn(3), argnums=(0, 1))
dual("mul[f32*i32]", lambda m, x, y: x * y, rn(3, dtype=F32), ints(3, dtype=np.int32))
dual("mul[f32*i64]", lambda m, x, y: x * y, rn(3, dtype=F32), ints(3))
dual("add[i32+i64]", lambda m, x, y: x + y, ints(3, dtype=np.int32), ints(3), grad=False)
dual("add[i32+i32]", lambda m, x, y: x + y, ints(3, dtype=np.int32), ints(3, dtype=np.int32),
     grad=False)
dual("div[i64/i64]", lambda m, x, y: x / y, ints(4), nonzero_ints(4), grad=False)
dual("div[i32/i32]", lambda m, x, y: m.divide(x, y), ints(4, dtype=np.int32),
     nonzero_ints(4, dtype=np.int32), grad=False)
dual("add[bool+i32]", lambda m, x, y: m.add(x > 0, y), rn(4), ints(4, dtype=np.int32),
     grad=False)
# weak Python scalars never promote arrays of the same kind
dual("scalar[f32*2.0]", lambda m, x: x * 2.0, rn(3, dtype=F32), grad=False)
dual("scalar[2.0*f32]", lambda m, x: 2.0 * x, rn(3, dtype=F32), grad=False)
dual("scalar[f32+1]", lambda m, x: x + 1, rn(3, dtype=F32), grad=False)
dual("scalar[1-f32]", lambda m, x: 1 - x, rn(3, dtype=F32), grad=False)
dual("scalar[f32/3]", lambda m, x: x / 3, rn(3, dtype=F32), grad=False)
dual("scalar[3.0/f32]", lambda m, x: 3.0 / x, away(3, dtype=F32), grad=False)
dual("scalar[i32+1.5]", lambda m, x: x + 1.5, ints(3, dtype=np.int32), grad=False)
dual("scalar[i32*2]", lambda m, x: x * 2, ints(3, dtype=np.int32), grad=False)
dual("scalar[i32/2]", lambda m, x: x / 2, ints(3, dtype=np.int32), grad=False)
dual("scalar[f64*2.0]", lambda m, x: x * 2.0 - 1.0, rn(2, 2))
dual("scalar[0d_f32*2.5]", lambda m, x: x * 2.5, rn(dtype=F32), grad=False)
dual("scalar[maximum(f32,0)]", lambda m, x: m.maximum(x, 0), away(4, dtype=F32), grad=False)
dual("scalar[maximum(x,0.5)]", lambda m, x: m.maximum(x, 0.5), away(2, 3))
dual("scalar[minimum(1.0,x)]", lambda m, x: m.minimum(1.0, x), away(2, 3))
dual("scalar[f32<0.5]", lambda m, x: x < 0.5, rn(3, dtype=F32), grad=False)
# the same through jnp functions, so the eager (NumPy-array) path promotes as NumPy 2 too
dual("scalar[multiply(f32,2.0)]", lambda m, x: m.multiply(x, 2.0), rn(3, dtype=F32), grad=False)
dual("scalar[add(i32,1.5)]", lambda m, x: m.add(x, 1.5), ints(3, dtype=np.int32), grad=False)
dual("scalar[add(i32,1)]", lambda m, x: m.add(x, 1), ints(3, dtype=np.int32), grad=False)
dual("scalar[subtract(1,f32)]", lambda m, x: m.subtract(1, x), rn(3, dtype=F32), grad=False)
dual("scalar[divide(i32,2)]", lambda m, x: m.divide(x, 2), ints(3, dtype=np.int32), grad=False)
dual("scalar[maximum(i32,0.5)]", lambda m, x: m.maximum(x, 0.5), ints(3, dtype=np.int32),
     grad=False)
dual("scalar[power(f32,2.5)]", lambda m, x: m.power(x, 2.5), pos(3, dtype=F32), grad=False)
dual("scalar[where(f32,0.0,1)]", lambda m, x: m.where(x > 0, 0.0, x), rn(3, dtype=F32),
     grad=False)
dual("scalar[bool*1.5]", lambda m, x: m.multiply(x > 0, 1.5), rn(3), grad=False)

# powers: small integer exponents are multiplications; others the pow primitive
dual("pow[x**2]", lambda m, x: x ** 2, rn(2, 3))
dual("pow[x**3]", lambda m, x: x ** 3, rn(2, 3))
dual("pow[x**4]", lambda m, x: m.power(x, 4), rn(3))
dual("pow[x**0]", lambda m, x: x ** 0 + x, rn(3))
dual("pow[x**1]", lambda m, x: x ** 1, rn(3))
dual("pow[x**-1]", lambda m, x: x ** -1, away(3))
dual("pow[x**5]", lambda m, x: x ** 5, rn(3))
dual("pow[x**0.5]", lambda m, x: x ** 0.5, pos(3))
dual("pow[x**3.5 f32]", lambda m, x: x ** 3.5, pos(3, dtype=F32), grad=False)
dual("pow[x**3.5]", lambda m, x: x ** 3.5, pos(3))
dual("pow[2.0**x]", lambda m, x: 2.0 ** x, rn(3))
dual("pow[2.0**x f32]", lambda m, x: 2.0 ** x, rn(3, dtype=F32), grad=False)
dual("pow[i32**2]", lambda m, x: x ** 2, ints(4, dtype=np.int32), grad=False)
dual("pow[i64**i64]", lambda m, x, y: m.power(x, y), ints(4, lo=1, hi=6),
     ints(4, lo=0, hi=5), grad=False)
dual("pow[i32**2.5]", lambda m, x: x ** 2.5, ints(4, lo=0, hi=6, dtype=np.int32), grad=False)
dual("pow[f32**f32 0d]", lambda m, x, y: x ** y, pos(dtype=F32), rn(dtype=F32), grad=False)
dual("pow[i32**np.int64(2)]", lambda m, x: m.power(x, np.int64(2)), ints(4, dtype=np.int32),
     grad=False)
dual("pow[f32**np.int64(3)]", lambda m, x: m.power(x, np.int64(3)), rn(4, dtype=F32), grad=False)
dual("pow[bool**2]", lambda m, x: m.power(x > 0, 2), rn(4), grad=False)
dual("pow[i64**i64 big]", lambda m, x, y: m.power(x, y), np.array([3, 7, -5, 2]),
     np.array([20, 11, 13, 40]), grad=False)
dual("floor[i32 identity]", lambda m, x: m.floor(x), ints(5, dtype=np.int32), grad=False)
dual("inner[scalar]", lambda m, a, b: m.inner(a, b), rn(), rn(2, 3), argnums=(0, 1))
dual("tensordot[3d pairs]", lambda m, a, b: m.tensordot(a, b, axes=([1], [2])), rn(2, 3, 2),
     rn(2, 2, 3), argnums=(0, 1))

# integer arithmetic
dual("floor_divide[i64]", lambda m, x, y: m.floor_divide(x, y), ints(2, 3), nonzero_ints(3),
     grad=False)
dual("floordiv_op[i32]", lambda m, x, y: x // y, ints(6, dtype=np.int32),
     nonzero_ints(6, dtype=np.int32), grad=False)
dual("floordiv_op[f64]", lambda m, x, y: x // y, rn(6) * 4, away(6), grad=False)
dual("floordiv_op[i//2]", lambda m, x: x // 2, ints(6), grad=False)
dual("mod[i64]", lambda m, x, y: m.mod(x, y), ints(2, 3), nonzero_ints(3), grad=False)
dual("mod_op[i32]", lambda m, x: x % 3, ints(6, dtype=np.int32), grad=False)
dual("mod_op[f64 neg]", lambda m, x, y: x % y, np.array([-2.3, 2.3, -0.4, 5.1]),
     np.array([1.5, -1.5, 2.0, -2.0]), argnums=(0, 1))

# comparisons and logic (bool out)
for _n, _f in {"greater": lambda m, x, y: m.greater(x, y), "gt_op": lambda m, x, y: x > y,
               "greater_equal": lambda m, x, y: m.greater_equal(x, y),
               "ge_op": lambda m, x, y: x >= y, "less": lambda m, x, y: m.less(x, y),
               "lt_op": lambda m, x, y: x < y, "less_equal": lambda m, x, y: m.less_equal(x, y),
               "le_op": lambda m, x, y: x <= y, "equal": lambda m, x, y: m.equal(x, y),
               "eq_op": lambda m, x, y: x == y, "not_equal": lambda m, x, y: m.not_equal(x, y),
               "ne_op": lambda m, x, y: x != y}.items():
    dual(f"{_n}[f64]", _f, ints(2, 3).astype(F64), ints(3).astype(F64), grad=False)
    dual(f"{_n}[i32,f32]", _f, ints(2, 3, dtype=np.int32), ints(3).astype(F32), grad=False)
dual("logical_and", lambda m, x, y: m.logical_and(x > 0, y > 0), rn(2, 3), rn(3), grad=False)
dual("logical_or", lambda m, x, y: m.logical_or(x > 0, y > 0), rn(2, 3), rn(3), grad=False)
dual("logical_not", lambda m, x: m.logical_not(x > 0), rn(2, 3), grad=False)
dual("logical_and[numbers]", lambda m, x, y: m.logical_and(x, y), ints(5), ints(5), grad=False)
dual("logical_not[numbers]", lambda m, x: m.logical_not(x), ints(5).astype(F64), grad=False)
dual("and_op", lambda m, x, y: (x > 0) & (y < 0), rn(4), rn(4), grad=False)
dual("or_op", lambda m, x, y: (x > 0) | (y < 0), rn(4), rn(4), grad=False)
dual("invert_op", lambda m, x: ~(x > 0), rn(4), grad=False)
dual("isnan", lambda m, x: m.isnan(x), np.array([1.0, np.nan, np.inf, -np.inf, 0.0]),
     grad=False)
dual("isinf", lambda m, x: m.isinf(x), np.array([1.0, np.nan, np.inf, -np.inf, 0.0]),
     grad=False)
dual("isfinite", lambda m, x: m.isfinite(x), np.array([1.0, np.nan, np.inf, -np.inf, 0.0],
                                                     dtype=F32), grad=False)

# select and clip
dual("where", lambda m, x, y: m.where(x > y, x, y), distinct(2, 3), distinct(2, 3) + 0.05,
     argnums=(0, 1))
dual("where[bcast]", lambda m, x, y: m.where(x > 0, x * y, y), away(2, 3), rn(3),
     argnums=(0, 1))
dual("where[scalar branch]", lambda m, x: m.where(x > 0, x, 0.0), away(2, 3))
dual("where[f32 scalar]", lambda m, x: m.where(x > 0, x, 0.0), away(2, 3, dtype=F32), grad=False)
dual("where[0d cond]", lambda m, c, x: m.where(c > 0, x, -x), np.array(1.0), rn(3),
     argnums=1)
dual("where[int]", lambda m, x: m.where(x > 0, x, 0), ints(5), grad=False)
dual("where[mixed]", lambda m, x, y: m.where(x > 0, x, y), away(3, dtype=F32), rn(3),
     argnums=(0, 1))
dual("clip", lambda m, x: m.clip(x, -0.5, 0.7), away(2, 3) * 0.5 + 0.05)
dual("clip[f32]", lambda m, x: m.clip(x, -0.5, 0.7), rn(2, 3, dtype=F32), grad=False)
dual("clip[method]", lambda m, x: x.clip(-0.5, 0.7), np.array([-1.0, -0.2, 0.3, 1.1]))
dual("clip[int]", lambda m, x: m.clip(x, -2, 3), ints(6), grad=False)

# ------------------------------------------------------------------ reductions
_X234 = distinct(2, 3, 4)
_AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]
for _ax in _AXES:
    for _kd in (False, True):
        _t = f"axis={_ax},keepdims={_kd}"
        dual(f"sum[{_t}]", lambda m, x, a=_ax, k=_kd: m.sum(x, axis=a, keepdims=k), _X234)
        dual(f"max[{_t}]", lambda m, x, a=_ax, k=_kd: m.max(x, axis=a, keepdims=k), _X234)
        dual(f"min[{_t}]", lambda m, x, a=_ax, k=_kd: m.min(x, axis=a, keepdims=k), _X234)
        dual(f"mean[{_t}]", lambda m, x, a=_ax, k=_kd: m.mean(x, axis=a, keepdims=k), _X234)
    dual(f"prod[axis={_ax}]", lambda m, x, a=_ax: m.prod(x, axis=a), pos(2, 3, 2))
    dual(f"var[axis={_ax}]", lambda m, x, a=_ax: m.var(x, axis=a), _X234)
    dual(f"std[axis={_ax}]", lambda m, x, a=_ax: m.std(x, axis=a), _X234)
dual("prod[keepdims]", lambda m, x: m.prod(x, axis=1, keepdims=True), pos(2, 3))
dual("prod[one zero]", lambda m, x: m.prod(x, axis=0), np.array([[1.5, 0.0], [0.0, 2.0],
                                                                 [-1.2, 0.7]]))
dual("prod[two zeros]", lambda m, x: m.prod(x), np.array([1.5, 0.0, -0.8, 0.0, 1.3]), order=3)
dual("prod[three zeros]", lambda m, x: m.prod(x), np.array([0.0, 0.0, 0.0, 1.3]), order=3)
dual("prod[zeros 2 axes]", lambda m, x: m.prod(x, axis=(0, 2)), np.array(
    [[[0.0, 1.2], [0.5, 0.0], [2.0, 1.0]], [[1.5, -1.0], [0.0, 0.0], [0.3, 0.9]]]))
dual("prod[negative]", lambda m, x: m.prod(x, axis=-1), away(2, 4))
dual("var[ddof=1]", lambda m, x: m.var(x, axis=1, ddof=1), rn(3, 4))
dual("var[keepdims]", lambda m, x: m.var(x, axis=0, keepdims=True), rn(3, 4))
dual("std[ddof=1,keepdims]", lambda m, x: m.std(x, axis=-1, ddof=1, keepdims=True), rn(3, 4))
dual("mean[f32]", lambda m, x: m.mean(x, axis=0), rn(4, 3, dtype=F32), grad=False)
dual("var[f32]", lambda m, x: m.var(x), rn(4, 3, dtype=F32), grad=False)
dual("mean[i32]", lambda m, x: m.mean(x), ints(4, 3, dtype=np.int32), grad=False)
dual("sum[f32]", lambda m, x: m.sum(x, axis=1), rn(3, 4, dtype=F32), grad=False)
dual("sum[i32]", lambda m, x: m.sum(x, axis=0), ints(3, 4, dtype=np.int32), grad=False)
dual("sum[i64]", lambda m, x: m.sum(x), ints(3, 4), grad=False)
dual("sum[bool]", lambda m, x: m.sum(x > 0, axis=1), rn(3, 4), grad=False)
dual("sum[dtype=f32]", lambda m, x: m.sum(x, dtype=m.float32), ints(3, 4), grad=False)
dual("prod[i32]", lambda m, x: m.prod(x, axis=1), ints(3, 4, dtype=np.int32), grad=False)
dual("max[i32]", lambda m, x: m.max(x, axis=1), ints(3, 4, dtype=np.int32), grad=False)
dual("min[i64 keepdims]", lambda m, x: m.min(x, axis=0, keepdims=True), ints(3, 4), grad=False)
dual("amax", lambda m, x: m.amax(x, axis=0), distinct(3, 2))
dual("amin", lambda m, x: m.amin(x, axis=1), distinct(3, 2))
dual("max[ties]", lambda m, x: m.max(x, axis=1), np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),
     grad=False)
dual("sum[0d]", lambda m, x: m.sum(x), rn())
dual("sum[0d axis=0]", lambda m, x: m.sum(x, axis=0), rn())
dual("max[0d]", lambda m, x: m.max(x), rn())
dual("mean[0d]", lambda m, x: m.mean(x), rn())
dual("prod[0d]", lambda m, x: m.prod(x), rn())
dual("sum[size0 all]", lambda m, x: m.sum(x), rn(0, 3))
dual("sum[size0 axis0]", lambda m, x: m.sum(x, axis=0), rn(0, 3))
dual("sum[size0 axis1]", lambda m, x: m.sum(x, axis=1), rn(0, 3))
dual("prod[size0]", lambda m, x: m.prod(x, axis=0), rn(0, 3))
dual("max[size0 nonempty axis]", lambda m, x: m.max(x, axis=1), rn(0, 3))
dual("sum[method]", lambda m, x: x.sum(axis=1, keepdims=True), rn(2, 3))
dual("mean[method]", lambda m, x: x.mean(axis=0), rn(2, 3))
dual("max[method]", lambda m, x: x.max(axis=-1), distinct(2, 3))
dual("min[method]", lambda m, x: x.min(), distinct(2, 3))
dual("prod[method]", lambda m, x: x.prod(axis=0), pos(2, 3))
dual("var[method]", lambda m, x: x.var(axis=1, ddof=1), rn(2, 3))
dual("std[method]", lambda m, x: x.std(), rn(2, 3))
for _ax in (None, 0, 1, -1):
    dual(f"argmax[axis={_ax}]", lambda m, x, a=_ax: m.argmax(x, axis=a), distinct(3, 4),
         grad=False)
    dual(f"argmin[axis={_ax}]", lambda m, x, a=_ax: m.argmin(x, axis=a), distinct(3, 4),
         grad=False)
dual("argmax[keepdims]", lambda m, x: m.argmax(x, axis=1, keepdims=True), distinct(3, 4),
     grad=False)
dual("argmin[i32 keepdims]", lambda m, x: m.argmin(x, axis=0, keepdims=True),
     ints(3, 4, dtype=np.int32), grad=False)
dual("argmax[ties]", lambda m, x: m.argmax(x, axis=1), np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),
     grad=False)
dual("argmax[method]", lambda m, x: x.argmax(axis=0), distinct(3, 4), grad=False)
dual("argmin[f32 0-d out]", lambda m, x: x.argmin(), distinct(5, dtype=F32), grad=False)

# ------------------------------------------------------------------ shape ops
_A = rn(2, 3, 4)
dual("reshape", lambda m, x: m.reshape(x, (4, 6)), _A)
dual("reshape[-1]", lambda m, x: m.reshape(x, (-1, 4)), _A)
dual("reshape[to 0d]", lambda m, x: m.reshape(x, ()), rn(1, 1))
dual("reshape[from 0d]", lambda m, x: m.reshape(x, (1, 1, 1)), rn())
dual("reshape[size0]", lambda m, x: m.reshape(x, (3, 0)), rn(0, 3))
dual("reshape[method]", lambda m, x: x.reshape(3, 8), _A)
dual("reshape[method tuple]", lambda m, x: x.reshape((6, -1)), _A)
dual("reshape[i32]", lambda m, x: m.reshape(x, (2, 2)), ints(4, dtype=np.int32), grad=False)
dual("ravel", lambda m, x: m.ravel(x), _A)
dual("ravel[method]", lambda m, x: x.ravel(), _A)
dual("flatten[method]", lambda m, x: x.flatten(), _A)
dual("transpose", lambda m, x: m.transpose(x), _A)
dual("transpose[perm]", lambda m, x: m.transpose(x, (1, 2, 0)), _A)
dual("transpose[neg perm]", lambda m, x: m.transpose(x, (-1, 0, 1)), _A)
dual("transpose[method]", lambda m, x: x.transpose(2, 0, 1), _A)
dual("transpose[method tuple]", lambda m, x: x.transpose((0, 2, 1)), _A)
dual("T", lambda m, x: x.T, rn(2, 3))
dual("T[3d]", lambda m, x: x.T, _A)
dual("T[1d]", lambda m, x: x.T, rn(3))
dual("mT", lambda m, x: x.mT, _A)
dual("swapaxes", lambda m, x: m.swapaxes(x, 0, 2), _A)
dual("swapaxes[neg]", lambda m, x: m.swapaxes(x, -1, -2), _A)
dual("swapaxes[method]", lambda m, x: x.swapaxes(0, 1), _A)
dual("moveaxis", lambda m, x: m.moveaxis(x, 0, -1), _A)
dual("moveaxis[neg src]", lambda m, x: m.moveaxis(x, -1, 0), _A)
dual("moveaxis[mid]", lambda m, x: m.moveaxis(x, 2, 1), _A)
dual("expand_dims", lambda m, x: m.expand_dims(x, 0), rn(2, 3))
dual("expand_dims[-1]", lambda m, x: m.expand_dims(x, -1), rn(2, 3))
dual("expand_dims[tuple]", lambda m, x: m.expand_dims(x, (0, 2)), rn(2, 3))
dual("expand_dims[neg tuple]", lambda m, x: m.expand_dims(x, (-1, 0)), rn(2, 3))
dual("squeeze", lambda m, x: m.squeeze(x), rn(1, 3, 1))
dual("squeeze[axis]", lambda m, x: m.squeeze(x, axis=0), rn(1, 3, 1))
dual("squeeze[neg axis]", lambda m, x: m.squeeze(x, axis=-1), rn(1, 3, 1))
dual("squeeze[method]", lambda m, x: x.squeeze(), rn(1, 3, 1))
dual("squeeze[to 0d]", lambda m, x: m.squeeze(x), rn(1, 1))
dual("broadcast_to", lambda m, x: m.broadcast_to(x, (2, 3)), rn(3))
dual("broadcast_to[keep1]", lambda m, x: m.broadcast_to(x, (4, 2, 3)), rn(2, 1))
dual("broadcast_to[0d]", lambda m, x: m.broadcast_to(x, (2, 2)), rn())
dual("broadcast_to[int shape]", lambda m, x: m.broadcast_to(x, 4), rn(1))
dual("broadcast_arrays", lambda m, x, y: m.broadcast_arrays(x, y), rn(2, 1), rn(3),
     argnums=(0, 1))
dual("concatenate", lambda m, x, y: m.concatenate([x, y]), rn(2, 3), rn(1, 3), argnums=(0, 1))
dual("concatenate[axis1]", lambda m, x, y: m.concatenate([x, y], axis=1), rn(2, 3), rn(2, 2),
     argnums=(0, 1))
dual("concatenate[axis-1 three]", lambda m, x, y: m.concatenate((x, y, x), axis=-1),
     rn(2, 1), rn(2, 2), argnums=(0, 1))
dual("concatenate[one]", lambda m, x: m.concatenate([x]), rn(2, 2))
dual("concatenate[mixed dtype]", lambda m, x, y: m.concatenate([x, y]), rn(2, dtype=F32),
     rn(3), argnums=(0, 1))
dual("concatenate[f32 + i32]", lambda m, x, y: m.concatenate([x, y]), rn(2, dtype=F32),
     ints(3, dtype=np.int32), grad=False)
dual("concatenate[size0]", lambda m, x, y: m.concatenate([x, y]), rn(0, 2), rn(2, 2),
     argnums=(0, 1))
dual("concatenate[const]", lambda m, x: m.concatenate([x, m.ones((1, 2))]), rn(2, 2))
dual("stack", lambda m, x, y: m.stack([x, y]), rn(2, 3), rn(2, 3), argnums=(0, 1))
dual("stack[axis-1]", lambda m, x, y: m.stack([x, y, x], axis=-1), rn(3), rn(3),
     argnums=(0, 1))
dual("stack[axis1]", lambda m, x, y: m.stack((x, y), axis=1), rn(2, 2), rn(2, 2),
     argnums=(0, 1))
dual("stack[0d]", lambda m, x, y: m.stack([x, y]), rn(), rn(), argnums=(0, 1))
dual("array[of tracers]", lambda m, x, y: m.array([x * 2.0, y]), rn(), rn(), argnums=(0, 1))
dual("array[nested tracers]", lambda m, x, y: m.array([[x, y], [y, x]]), rn(), rn(),
     argnums=(0, 1))
dual("flip", lambda m, x: m.flip(x), rn(2, 3))
dual("flip[axis]", lambda m, x: m.flip(x, axis=1), rn(2, 3))
dual("flip[neg axis tuple]", lambda m, x: m.flip(x, axis=(0, -1)), rn(2, 3, 2))
dual("shape/ndim/size", lambda m, x: x * (m.shape(x)[0] + m.ndim(x) + m.size(x)), rn(2, 3))
dual("astype[f64->f32]", lambda m, x: x.astype(m.float32) * 2.0, rn(3), grad=False)
dual("astype[f32->f64]", lambda m, x: m.astype(x, m.float64) if m is jnp else x.astype(np.float64),
     rn(3, dtype=F32))
dual("astype[f64->i32]", lambda m, x: (x * 3).astype(m.int32), rn(2, 3), grad=False)
dual("astype[i64->f32]", lambda m, x: x.astype(m.float32) / 2, ints(4), grad=False)
dual("astype[bool->f64]", lambda m, x: (x > 0).astype(m.float64) * x, away(4))
dual("asarray[dtype]", lambda m, x: m.asarray(x, dtype=m.float32), rn(3), grad=False)
dual("asarray[list const]", lambda m, x: x * m.asarray([1.0, 2.0, 3.0]), rn(3))
dual("array[list const f32]", lambda m, x: x + m.array([1, 2, 3]), rn(3, dtype=F32), grad=False)

# ------------------------------------------------------------------ creation inside functions
dual("zeros+ones", lambda m, x: x + m.ones((2, 3)) * 2.0 - m.zeros(3), rn(2, 3))
dual("zeros[f32]", lambda m, x: x + m.zeros((3,), m.float32), rn(3, dtype=F32), grad=False)
dual("full", lambda m, x: x * m.full((2, 3), 1.5), rn(2, 3))
dual("full[int]", lambda m, x: x + m.full((3,), 2), ints(3, dtype=np.int32), grad=False)
dual("zeros_like", lambda m, x: x + m.zeros_like(x), rn(2, 3))
dual("ones_like[f32]", lambda m, x: x * m.ones_like(x), rn(2, 3, dtype=F32), grad=False)
dual("full_like", lambda m, x: x * m.full_like(x, 3.0), rn(2, 3))
dual("arange", lambda m, x: x * m.arange(3), rn(2, 3))
dual("arange[start stop step]", lambda m, x: x + m.arange(1, 7, 2), rn(3))
dual("arange[float]", lambda m, x: x * m.arange(0.0, 1.5, 0.5), rn(3))
dual("eye", lambda m, x: x @ m.eye(3) + x, rn(2, 3))
dual("eye[rect k]", lambda m, x: x * m.eye(2, 3, 1), rn(2, 3))
dual("linspace", lambda m, x: x * m.linspace(0.0, 1.0, 3), rn(3))
dual("constants", lambda m, x: x * m.pi + m.e, rn(2))

# ------------------------------------------------------------------ indexing
_M = rn(4, 5)
_T = rn(3, 4, 5)
dual("index[int]", lambda m, x: x[1], _M)
dual("index[neg int]", lambda m, x: x[-1], _M)
dual("index[int,int]", lambda m, x: x[2, -2], _M)
dual("index[slice]", lambda m, x: x[1:3], _M)
dual("index[slice step]", lambda m, x: x[::2, 1::2], _M)
dual("index[neg step]", lambda m, x: x[::-1], _M)
dual("index[neg step 2]", lambda m, x: x[3:0:-2, ::-3], _M)
dual("index[neg start]", lambda m, x: x[-3:, :-1], _M)
dual("index[empty slice]", lambda m, x: x[3:1], _M)
dual("index[out of range slice]", lambda m, x: x[2:100, -100:2], _M)
dual("index[ellipsis]", lambda m, x: x[..., 1], _T)
dual("index[ellipsis mid]", lambda m, x: x[0, ..., ::2], _T)
dual("index[None]", lambda m, x: x[None], _M)
dual("index[None mid]", lambda m, x: x[:, None, 1], _M)
dual("index[newaxis end]", lambda m, x: x[..., None], _M)
dual("index[mixed basic]", lambda m, x: x[1, ::-1, 2:4], _T)
dual("index[0d scalar]", lambda m, x: x[()], rn())
dual("index[1d int]", lambda m, x: x[2], rn(4))
dual("index[array]", lambda m, x: x[np.array([0, 2, 2])], _M)
dual("index[list]", lambda m, x: x[[3, 0, -1]], _M)
dual("index[neg array]", lambda m, x: x[np.array([-1, -4, 1])], _M)
dual("index[2d array]", lambda m, x: x[np.array([[0, 1], [3, 3]])], _M)
dual("index[:, array]", lambda m, x: x[:, np.array([4, 0, 0])], _M)
dual("index[array, array]", lambda m, x: x[np.array([0, 1, 3]), np.array([4, 4, 2])], _M)
dual("index[array, array bcast]", lambda m, x: x[np.array([[0], [2]]), np.array([1, 3, 1])], _M)
dual("index[int, array]", lambda m, x: x[-1, np.array([0, 2])], _T)
dual("index[array, :, array]", lambda m, x: x[np.array([0, 2]), :, np.array([1, 4])], _T)
dual("index[:, array, array]", lambda m, x: x[:, np.array([0, 3]), np.array([1, 4])], _T)
dual("index[:, :, array]", lambda m, x: x[:, :, np.array([4, 1, 1, 0])], _T)
dual("index[slice, array]", lambda m, x: x[1:, np.array([0, 2, 2])], _M)
dual("index[step, array]", lambda m, x: x[::-2, np.array([1, 0])], _M)
dual("index[bool mask const]", lambda m, x: x[np.array([True, False, True, True])], _M)
dual("index[gather labels]", lambda m, logp, labels: logp[m.arange(4), labels], _M,
     np.array([1, 0, 4, 4]))
dual("index[gather labels i32]", lambda m, logp, labels: logp[m.arange(4), labels], _M,
     np.array([1, 0, 4, 4], dtype=np.int32))
dual("index[traced index array]", lambda m, x, i: x[i], rn(5), np.array([[4, 0], [0, 0]]))
dual("index[i32 values]", lambda m, x: x[np.array([1, 0]), 1:], ints(3, 3, dtype=np.int32),
     grad=False)
dual("nll loss", lambda m, logp, labels: -m.mean(logp[m.arange(4), labels]), _M,
     np.array([1, 0, 4, 4]))
dual("take", lambda m, x: m.take(x, np.array([1, 1, -1])), _M)
dual("take[axis0]", lambda m, x: m.take(x, np.array([3, 0, 3]), axis=0), _M)
dual("take[axis1]", lambda m, x: m.take(x, np.array([4, 0, 4, 4]), axis=1), _M)
dual("take[axis-1 3d]", lambda m, x: m.take(x, np.array([[0, 1], [4, 4]]), axis=-1), _T)
dual("take[axis1 3d]", lambda m, x: m.take(x, np.array([2, -1]), axis=1), _T)
dual("take[0d index]", lambda m, x: m.take(x, np.array(2), axis=1), _M)
dual("take[traced idx]", lambda m, x, i: m.take(x, i, axis=0), _M, np.array([2, 2, 0]))
dual("take_along_axis", lambda m, x: m.take_along_axis(x, np.array([[0, 4], [1, 1], [2, 0],
                                                                       [3, 3]]), axis=1), _M)
dual("take_along_axis[axis0]", lambda m, x: m.take_along_axis(x, np.array([[3, 0, 1, 1, 2]]),
                                                               axis=0), _M)
dual("take_along_axis[argsort]", lambda m, x: m.take_along_axis(x, np.argsort(_M, axis=-1),
                                                                axis=-1), _M)
dual("take_along_axis[3d]", lambda m, x, i: m.take_along_axis(x, i, axis=1), _T,
     _rng.integers(0, 4, (3, 2, 5)))
dual("take_along_axis[bcast]", lambda m, x: m.take_along_axis(x, np.array([[1], [0], [3], [2]]),
                                                               axis=1), _M)

# ------------------------------------------------------------------ linear algebra
dual("matmul[2d@2d]", lambda m, a, b: a @ b, rn(2, 3), rn(3, 4), argnums=(0, 1))
dual("matmul[fn 2d@2d]", lambda m, a, b: m.matmul(a, b), rn(2, 3), rn(3, 4), argnums=(0, 1))
dual("matmul[1d@2d]", lambda m, a, b: a @ b, rn(3), rn(3, 4), argnums=(0, 1))
dual("matmul[2d@1d]", lambda m, a, b: a @ b, rn(2, 3), rn(3), argnums=(0, 1))
dual("matmul[1d@1d]", lambda m, a, b: a @ b, rn(3), rn(3), argnums=(0, 1))
dual("matmul[batched]", lambda m, a, b: a @ b, rn(2, 2, 3), rn(2, 3, 4), argnums=(0, 1))
dual("matmul[batch bcast]", lambda m, a, b: a @ b, rn(2, 1, 3, 2), rn(3, 2, 2), argnums=(0, 1))
dual("matmul[3d@2d]", lambda m, a, b: a @ b, rn(2, 2, 3), rn(3, 2), argnums=(0, 1))
dual("matmul[3d@1d]", lambda m, a, b: a @ b, rn(2, 2, 3), rn(3), argnums=(0, 1))
dual("matmul[1d@3d]", lambda m, a, b: a @ b, rn(3), rn(2, 3, 2), argnums=(0, 1))
dual("matmul[f32]", lambda m, a, b: a @ b, rn(2, 3, dtype=F32), rn(3, 2, dtype=F32),
     grad=False, rtol=1e-5)
dual("matmul[f32@f64]", lambda m, a, b: a @ b, rn(2, 3, dtype=F32), rn(3, 2), argnums=(0, 1))
dual("matmul[int]", lambda m, a, b: a @ b, ints(2, 3), ints(3, 2), grad=False)
dual("matmul[size0 k]", lambda m, a, b: a @ b, rn(2, 0), rn(0, 3), argnums=(0, 1))
dual("matmul[size0 m]", lambda m, a, b: a @ b, rn(0, 2), rn(2, 3), argnums=(0, 1))
dual("matmul[const rhs]", lambda m, a: a @ np.array([[1.0, -1.0], [0.5, 2.0]]), rn(3, 2))
dual("matmul[rmatmul]", lambda m, a: np.array([[1.0, -1.0], [0.5, 2.0]]) @ a, rn(2, 3))
dual("dot[2d]", lambda m, a, b: m.dot(a, b), rn(2, 3), rn(3, 2), argnums=(0, 1))
dual("dot[1d]", lambda m, a, b: m.dot(a, b), rn(3), rn(3), argnums=(0, 1))
dual("dot[2d,1d]", lambda m, a, b: m.dot(a, b), rn(2, 3), rn(3), argnums=(0, 1))
dual("dot[scalar]", lambda m, a, b: m.dot(a, b), rn(), rn(2, 3), argnums=(0, 1))
dual("dot[3d,2d]", lambda m, a, b: m.dot(a, b), rn(2, 2, 3), rn(3, 2), argnums=(0, 1))
dual("dot[2d,3d]", lambda m, a, b: m.dot(a, b), rn(2, 3), rn(2, 3, 4), argnums=(0, 1))
dual("dot[3d,1d]", lambda m, a, b: m.dot(a, b), rn(2, 2, 3), rn(3), argnums=(0, 1))
dual("dot[method]", lambda m, a, b: a.dot(b), rn(2, 3), rn(3), argnums=(0, 1))
dual("vdot", lambda m, a, b: m.vdot(a, b), rn(2, 3), rn(2, 3), argnums=(0, 1))
dual("inner[1d]", lambda m, a, b: m.inner(a, b), rn(3), rn(3), argnums=(0, 1))
dual("inner[2d]", lambda m, a, b: m.inner(a, b), rn(2, 3), rn(4, 3), argnums=(0, 1))
dual("outer", lambda m, a, b: m.outer(a, b), rn(3), rn(4), argnums=(0, 1))
dual("outer[2d ravel]", lambda m, a, b: m.outer(a, b), rn(2, 2), rn(3), argnums=(0, 1))
dual("tensordot[int]", lambda m, a, b: m.tensordot(a, b, axes=2), rn(2, 3, 4), rn(3, 4, 2),
     argnums=(0, 1))
dual("tensordot[1]", lambda m, a, b: m.tensordot(a, b, axes=1), rn(2, 3), rn(3, 2),
     argnums=(0, 1))
dual("tensordot[0]", lambda m, a, b: m.tensordot(a, b, axes=0), rn(2), rn(3), argnums=(0, 1))
dual("tensordot[pairs]", lambda m, a, b: m.tensordot(a, b, axes=([0, 2], [2, 0])),
     rn(2, 3, 4), rn(4, 5, 2), argnums=(0, 1))
dual("tensordot[int pair]", lambda m, a, b: m.tensordot(a, b, axes=(1, 0)), rn(2, 3), rn(3, 4),
     argnums=(0, 1))
_EINSUM = [
    ("ij,jk->ik", (2, 3), (3, 4)),
    ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)),
    ("i,i->", (3,), (3,)),
    ("i,j->ij", (3,), (2,)),
    ("ij,j->i", (2, 3), (3,)),
    ("ij,ij->i", (2, 3), (2, 3)),
    ("ij,ij->ij", (2, 3), (2, 3)),
    ("bij,jk->bik", (2, 2, 3), (3, 2)),
    ("ij,kj->ik", (2, 3), (4, 3)),
    ("ij,jk", (2, 3), (3, 4)),
    ("ijk,ikl->jl", (2, 2, 3), (2, 3, 2)),
    ("ij,kl->ijkl", (2, 1), (1, 3)),
    ("ij,k->i", (2, 3), (4,)),
    ("ba,bc->ca", (3, 2), (3, 4)),
]
for _s, _sa, _sb in _EINSUM:
    dual(f"einsum[{_s}]", lambda m, a, b, s=_s: m.einsum(s, a, b), rn(*_sa), rn(*_sb),
         argnums=(0, 1))
for _s, _sa in [("ij->ji", (2, 3)), ("ij->", (2, 3)), ("ij->j", (2, 3)), ("ijk->kij", (2, 3, 2)),
                ("ij", (2, 3)), ("ji", (2, 3)), ("i->", (4,))]:
    dual(f"einsum[{_s}]", lambda m, a, s=_s: m.einsum(s, a), rn(*_sa))
dual("einsum[f32]", lambda m, a, b: m.einsum("ij,jk->ik", a, b), rn(2, 3, dtype=F32),
     rn(3, 2, dtype=F32), grad=False, rtol=1e-5)

# ------------------------------------------------------------------ nn and scipy.special
def _np_softplus(x):
    return np.logaddexp(0.0, x).astype(np.asarray(x).dtype)


def _np_log_softmax(x, axis=-1):
    return x - sps.logsumexp(x, axis=axis, keepdims=True)


def _np_gelu_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))


for _tag, _dt, _g in (("f64", F64, True), ("f32", F32, False)):
    _x = away(2, 3, dtype=_dt)
    case(f"relu[{_tag}]", lambda x: nn.relu(x), _x, expect=lambda x: np.maximum(x, 0), grad=_g)
    case(f"softplus[{_tag}]", lambda x: nn.softplus(x), _x, expect=_np_softplus, grad=_g)
    case(f"log_sigmoid[{_tag}]", lambda x: nn.log_sigmoid(x), _x,
         expect=lambda x: -_np_softplus(-x), grad=_g)
    case(f"silu[{_tag}]", lambda x: nn.silu(x), _x, expect=lambda x: x * sps.expit(x), grad=_g)
    case(f"swish[{_tag}]", lambda x: nn.swish(x), _x, expect=lambda x: x * sps.expit(x), grad=_g)
    case(f"elu[{_tag}]", lambda x: nn.elu(x), _x,
         expect=lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))), grad=_g)
    case(f"elu[alpha {_tag}]", lambda x: nn.elu(x, alpha=0.5), _x,
         expect=lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0))), grad=_g)
    case(f"leaky_relu[{_tag}]", lambda x: nn.leaky_relu(x), _x,
         expect=lambda x: np.where(x >= 0, x, 0.01 * x), grad=_g)
    case(f"gelu[tanh {_tag}]", lambda x: nn.gelu(x), _x, expect=_np_gelu_tanh, grad=_g)
    case(f"gelu[erf {_tag}]", lambda x: nn.gelu(x, approximate=False), _x,
         expect=lambda x: 0.5 * x * (1.0 + sps.erf(x * (1.0 / math.sqrt(2.0)))), grad=_g)
    case(f"sigmoid[nn {_tag}]", lambda x: nn.sigmoid(x), _x, expect=sps.expit, grad=_g)
    case(f"log_softmax[{_tag}]", lambda x: nn.log_softmax(x), _x, expect=_np_log_softmax, grad=_g)
    case(f"log_softmax[axis0 {_tag}]", lambda x: nn.log_softmax(x, axis=0), _x,
         expect=lambda x: _np_log_softmax(x, 0), grad=_g)
    case(f"softmax[{_tag}]", lambda x: nn.softmax(x), _x,
         expect=lambda x: sps.softmax(x, axis=-1), grad=_g)
    case(f"softmax[axis0 {_tag}]", lambda x: nn.softmax(x, axis=0), _x,
         expect=lambda x: sps.softmax(x, axis=0), grad=_g)
    case(f"logsumexp[{_tag}]", lambda x: jsp.logsumexp(x), _x, expect=sps.logsumexp, grad=_g)
    case(f"logsumexp[axis1 {_tag}]", lambda x: jsp.logsumexp(x, axis=1), _x,
         expect=lambda x: sps.logsumexp(x, axis=1), grad=_g)
    case(f"logsumexp[keepdims {_tag}]", lambda x: nn.logsumexp(x, axis=1, keepdims=True), _x,
         expect=lambda x: sps.logsumexp(x, axis=1, keepdims=True), grad=_g)
    case(f"logsumexp[axis0 keepdims {_tag}]", lambda x: jsp.logsumexp(x, axis=0, keepdims=True),
         _x, expect=lambda x: sps.logsumexp(x, axis=0, keepdims=True), grad=_g)
    case(f"logsumexp[axis tuple {_tag}]", lambda x: jsp.logsumexp(x, axis=(0, 1)), _x,
         expect=lambda x: sps.logsumexp(x, axis=(0, 1)), grad=_g)
    case(f"logsumexp[None keepdims {_tag}]", lambda x: jsp.logsumexp(x, keepdims=True), _x,
         expect=lambda x: sps.logsumexp(x, keepdims=True), grad=_g)
case("logsumexp[large]", lambda x: jsp.logsumexp(x, axis=-1), np.array([[1000.0, 1001.0],
                                                                         [-1000.0, -999.0]]),
     expect=lambda x: sps.logsumexp(x, axis=-1))
case("logsumexp[-inf row]", lambda x: jsp.logsumexp(x, axis=-1),
     np.array([[-np.inf, -np.inf], [0.0, -np.inf]]),
     expect=lambda x: sps.logsumexp(x, axis=-1), grad=False)
case("logsumexp[0d]", lambda x: jsp.logsumexp(x), rn(), expect=sps.logsumexp)
case("logsumexp[int]", lambda x: jsp.logsumexp(x, axis=0), ints(3, 2),
     expect=lambda x: sps.logsumexp(x, axis=0), grad=False)
case("softplus[large]", lambda x: nn.softplus(x), np.array([-800.0, -30.0, 0.5, 30.0, 800.0]),
     expect=_np_softplus)
case("sigmoid[large]", lambda x: nn.sigmoid(x), np.array([-800.0, -30.0, 0.5, 30.0, 800.0]),
     expect=sps.expit)
case("log_softmax[large]", lambda x: nn.log_softmax(x), np.array([[1000.0, 0.0, -1000.0]]),
     expect=_np_log_softmax)
case("one_hot", lambda y: nn.one_hot(y, 4), np.array([0, 3, 1, 3]),
     expect=lambda y: np.eye(4)[y], grad=False)
case("one_hot[f32 2d]", lambda y: nn.one_hot(y, 3, dtype=jnp.float32), np.array([[0, 2], [1, 1]]),
     expect=lambda y: np.eye(3, dtype=np.float32)[y], grad=False)
case("relu[int]", lambda x: nn.relu(x), ints(5), expect=lambda x: np.maximum(x, 0), grad=False)
case("relu[0d]", lambda x: nn.relu(x), np.array(-0.7), expect=lambda x: np.maximum(x, 0.0))
case("cross entropy",
     lambda logits, y: -jnp.mean(jnp.sum(nn.log_softmax(logits) * nn.one_hot(y, 3), axis=1)),
     rn(4, 3), np.array([0, 2, 1, 2]),
     expect=lambda logits, y: -np.mean(np.sum(_np_log_softmax(logits) * np.eye(3)[y], axis=1)))

# ------------------------------------------------------------------ primitives without a jnp name
from jitgraph.core import PRIMITIVES as _P  # noqa: E402

case("prim pad_slice", lambda g: _P["pad_slice"](g, shape=(4, 5), slices=((1, 4, 2), (4, -1, -2))),
     rn(2, 3), expect=lambda g: _np_pad(g))


def _np_pad(g):
    z = np.zeros((4, 5), g.dtype)
    z[1:4:2, 4::-2] = g
    return z


_WIN1 = dict(axes=(1,), taps=(2,), strides=(2,), dilation=(2,))
_WIN2 = dict(axes=(1, 2), taps=(3, 4), strides=(1, 2), dilation=(2, 1))


def _np_windows(x, axes, taps, strides, dilation, sizes, transpose=False):
    """Element by element: window o, tap t of axis a reads position o * s + t * r."""
    shape = list(x.shape)
    for a, n in zip(axes, sizes):
        shape[a] = n
    out = np.zeros(shape, x.dtype)
    small, big = (x, out) if transpose else (out, x)
    for i in np.ndindex(*small.shape):
        j = list(i)
        for a, t, s, r in zip(axes, taps, strides, dilation):
            j[a] = i[a] * s + i[t] * r
        if transpose:
            big[tuple(j)] = small[i]
        else:
            small[i] = big[tuple(j)]
    return out


case("prim windows", lambda x: _P["windows"](x, sizes=(2,), **_WIN1), rn(2, 7, 3, 2),
     expect=lambda x: _np_windows(x, sizes=(2,), **_WIN1))
case("prim windows_transpose", lambda g: _P["windows_transpose"](g, sizes=(7,), **_WIN1),
     rn(2, 2, 3, 2), expect=lambda g: _np_windows(g, sizes=(7,), transpose=True, **_WIN1))
case("prim windows[2d]", lambda x: _P["windows"](x, sizes=(3, 3), **_WIN2) ** 2,
     rn(1, 5, 6, 2, 2, 1), expect=lambda x: _np_windows(x, sizes=(3, 3), **_WIN2) ** 2)
case("prim windows_transpose[2d]",
     lambda g: _P["windows_transpose"](g, sizes=(6, 7), **_WIN2) ** 2, rn(1, 3, 3, 2, 2, 1),
     expect=lambda g: _np_windows(g, sizes=(6, 7), transpose=True, **_WIN2) ** 2)


def _np_conv(x, w, strides, pads, rdil, groups):
    """Direct NCHW / OIHW cross-correlation, one output element at a time."""
    x = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    n, c, h, wd = x.shape
    o, per, kh, kw = w.shape
    (sh, sw), (rh, rw) = strides, rdil
    ho, wo = (h - (kh - 1) * rh - 1) // sh + 1, (wd - (kw - 1) * rw - 1) // sw + 1
    out = np.zeros((n, o, ho, wo))
    for b, f, i, j in np.ndindex(n, o, ho, wo):
        g = f // (o // groups)
        win = x[b, g * per:(g + 1) * per, i * sh:i * sh + (kh - 1) * rh + 1:rh,
                j * sw:j * sw + (kw - 1) * rw + 1:rw]
        out[b, f, i, j] = np.sum(win * w[f])
    return out


case("lax conv_general_dilated[stride dilation groups]",
     lambda x, w: jitgraph.lax.conv_general_dilated(x, w, (2, 1), ((1, 0), (1, 2)),
                                                    rhs_dilation=(1, 2),
                                                    feature_group_count=2),
     rn(2, 4, 5, 4), rn(4, 2, 2, 3), argnums=(0, 1),
     expect=lambda x, w: _np_conv(x, w, (2, 1), ((1, 0), (1, 2)), (1, 2), 2))


case("prim scatter_add", lambda g, i: _P["scatter_add"](g, i, shape=(3, 2)), rn(4, 2),
     np.array([0, 2, 0, -1]), expect=lambda g, i: _np_scatter(g, i))


def _np_scatter(g, i):
    out = np.zeros((3, 2))
    np.add.at(out, i, g)
    return out


case("prim scatter_add[2 idx]", lambda g: _P["scatter_add"](
    g, np.array([[0], [1]]), np.array([2, 2, 0]), shape=(2, 3)), rn(2, 3),
    expect=lambda g: _np_scatter2(g))


def _np_scatter2(g):
    out = np.zeros((2, 3))
    np.add.at(out, (np.array([[0], [1]]), np.array([2, 2, 0])), g)
    return out


case("prim gather[clamp]", lambda x: _P["gather"](x, np.array([-1, 7, 0])), rn(3, 2),
     expect=lambda x: x[np.array([2, 2, 0])])
case("prim convert", lambda x: _P["convert"](x, dtype=np.dtype(np.float32)), rn(3),
     expect=lambda x: x.astype(np.float32), grad=False)   # float32 output: see test_grads
case("prim convert[f32->f64]", lambda x: _P["convert"](x, dtype=np.dtype(np.float64)) ** 3,
     rn(3, dtype=F32), expect=lambda x: x.astype(np.float64) ** 3)
case("prim select", lambda c, x, y: _P["select"](c > 0, x, y), rn(3), rn(2, 3), rn(3),
     expect=lambda c, x, y: np.where(c > 0, x, y), argnums=(1, 2))
case("prim floordiv", lambda x, y: _P["floordiv"](x, y), ints(4), nonzero_ints(4),
     expect=np.floor_divide, grad=False)

# ------------------------------------------------------------------ compositions
dual("composite[mlp]", lambda m, x, w, b: m.tanh(x @ w + b).sum(axis=1), rn(3, 2), rn(2, 4),
     rn(4), argnums=(0, 1, 2))
dual("composite[multi use]", lambda m, x: x * x + m.sin(x) * x - x, rn(3))
dual("composite[normalize]", lambda m, x: (x - x.mean(axis=0)) / m.sqrt(x.var(axis=0) + 1e-3),
     rn(4, 3))
dual("composite[pytree out]", lambda m, x, y: (x * y, {"s": m.sum(x), "l": [y + 1.0]}),
     rn(2), rn(2), argnums=(0, 1))
dual("composite[layernorm f32]", lambda m, x: (x - x.mean(axis=-1, keepdims=True))
     / m.sqrt(x.var(axis=-1, keepdims=True) + 1e-5), rn(2, 4, dtype=F32), grad=False,
     rtol=1e-4, atol=1e-5)
dual("composite[softmax attn]", lambda m, q, k: m.exp(q @ k.T - m.max(q @ k.T, axis=1,
                                                                  keepdims=True)),
     rn(2, 3), rn(4, 3), argnums=(0, 1))


# ------------------------------------------------------------------ NumPy coverage (issue 9)
# New elementwise functions: float64 (2, 3) with gradients, float32 without; one case per
# function also at 0-d and size-0 operands.
def _unit(*shape, dtype=np.float64):
    return _rng.uniform(-0.8, 0.8, shape).astype(dtype)


def _gt1(*shape, dtype=np.float64):
    return _rng.uniform(1.2, 3.0, shape).astype(dtype)


def _halfish(*shape, dtype=np.float64):
    """Values away from integers and half-integers (rounding kinks), with exact .5 ties too."""
    v = (_rng.integers(-4, 4, shape) + _rng.uniform(0.1, 0.4, shape)).astype(dtype)
    return v


_UNARY_NEW = {
    "arcsin": (lambda m, x: m.arcsin(x), _unit),
    "arccos": (lambda m, x: m.arccos(x), _unit),
    "arctan": (lambda m, x: m.arctan(x), rn),
    "sinh": (lambda m, x: m.sinh(x), rn),
    "cosh": (lambda m, x: m.cosh(x), rn),
    "arcsinh": (lambda m, x: m.arcsinh(x), rn),
    "arccosh": (lambda m, x: m.arccosh(x), _gt1),
    "arctanh": (lambda m, x: m.arctanh(x), _unit),
    "log2": (lambda m, x: m.log2(x), pos),
    "log10": (lambda m, x: m.log10(x), pos),
    "exp2": (lambda m, x: m.exp2(x), rn),
    "sinc": (lambda m, x: m.sinc(x), away),
    "fabs": (lambda m, x: m.fabs(x), away),
    "deg2rad": (lambda m, x: m.deg2rad(x), rn),
    "rad2deg": (lambda m, x: m.rad2deg(x), rn),
    "cbrt": (lambda m, x: m.cbrt(x), away),
}
for _n, (_f, _s) in _UNARY_NEW.items():
    dual(f"{_n}[f64_2x3]", _f, _s(2, 3))
dual("new unary[f32]", lambda m, x, y, z: (m.arcsin(x), m.arctanh(x), m.cosh(y), m.arcsinh(y),
                                           m.arccosh(z), m.log10(z), m.exp2(y), m.sinc(y)),
     _unit(3, dtype=F32), away(3, dtype=F32), _gt1(3, dtype=F32), grad=False, rtol=1e-5,
     atol=1e-6)
dual("new unary[0d]", lambda m, x, y, z: (m.arcsin(x), m.log2(z), m.sinc(y)),
     _unit(), away(), _gt1(), argnums=(0, 1, 2))
dual("new unary[size0]", lambda m, x: (m.arcsin(x), m.sinc(x)), _unit(0, 2))
# rounding: zero gradient, checked for values (with exact .5 ties for rint/round)
_TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.7, 0.2])
for _n in ("ceil", "trunc", "rint", "fix"):
    dual(f"{_n}[ties]", (lambda n: lambda m, x: getattr(m, n)(x))(_n), _TIES, grad=False)
dual("rint[i32]", lambda m, x: m.rint(x), ints(3, dtype=np.int32), grad=False)
dual("round[decimals]", lambda m, x: m.round(x * 3.0, 2), _TIES, grad=False)

# binary
dual("arctan2[bcast]", lambda m, y, x: m.arctan2(y, x), rn(2, 3), away(3), argnums=(0, 1))
dual("hypot[bcast]", lambda m, x, y: m.hypot(x, y), rn(2, 1), away(3), argnums=(0, 1))
dual("copysign[bcast]", lambda m, x, y: m.copysign(x, y), away(2, 3), away(3), argnums=(0, 1))
dual("copysign[signed zeros and nans]", lambda m, x, y: m.copysign(x, y), pos(6),
     np.array([-0.0, 0.0, -np.nan, np.nan, -np.inf, 2.0]), grad=False)
# x away from the multiples of y, where fmod jumps
dual("fmod[bcast]", lambda m, x, y: m.fmod(x, y),
     (np.arange(-5, 7).reshape(2, 6) * 1.25 + 0.3), np.array([1.25] * 3 + [-1.25] * 3),
     argnums=(0, 1))
dual("logaddexp[bcast]", lambda m, x, y: m.logaddexp(x, y), rn(2, 3), rn(3) * 30.0,
     argnums=(0, 1))
dual("logaddexp[inf]", lambda m, x, y: m.logaddexp(x, y),
     np.array([-np.inf, np.inf, -np.inf, 1.0]), np.array([-np.inf, np.inf, 0.0, 1.0]), grad=False)
dual("logaddexp2", lambda m, x, y: m.logaddexp2(x, y), rn(4), rn(4), argnums=(0, 1))
dual("fmax fmin[nan]", lambda m, x, y: (m.fmax(x, y), m.fmin(x, y)),
     np.array([1.0, np.nan, np.nan, -2.0]), np.array([np.nan, 3.0, np.nan, 1.0]), grad=False)
dual("fmax fmin", lambda m, x, y: (m.fmax(x, y), m.fmin(x, y)), distinct(2, 3), distinct(3),
     argnums=(0, 1))
dual("copysign heaviside", lambda m, x, y: (m.copysign(x, y), m.heaviside(y, 0.5) * x),
     away(2, 3), away(3))

dual("nan_to_num[args]", lambda m, x, s: m.nan_to_num(s, nan=-1.0, posinf=9.0, neginf=-9.0) * x
     + m.nan_to_num(x), pos(4), np.array([1.0, np.inf, -np.inf, np.nan]))
dual("real imag conj angle", lambda m, x: (m.real(x), m.imag(x) + x, m.conj(x), m.conjugate(x),
                                           m.angle(x) + x), away(2, 3))
dual("isclose allclose", lambda m, x, y: (m.isclose(x, y, atol=0.5), m.allclose(x, x + 1e-9)),
     rn(2, 3), rn(2, 3), grad=False)
dual("any all", lambda m, x: (m.any(x > 1.0), m.all(x[:0])), rn(2, 3), grad=False)
dual("select", lambda m, x: m.select([x > 0.5, x < -0.5], [x * x, -x], 1.0), away(2, 3))
dual("logical_xor signbit", lambda m, x, y: (m.logical_xor(x > 0, y > 0), m.signbit(x)),
     rn(2, 3), rn(3), grad=False)
dual("float_power", lambda m, x, y: m.float_power(x, y), pos(3), rn(3), argnums=(0, 1))
dual("power[0 base]", lambda m, x: m.power(x * np.array([0.0, 1.0, 1.0]), np.array([0.0, 2.0, 0.0]))
     + x, pos(3))

# shape manipulation
dual("atleast_nd", lambda m, x, y: (m.atleast_1d(y), m.atleast_2d(y), m.atleast_3d(y),
                                    m.atleast_2d(x), m.atleast_3d(x), m.atleast_3d(x[0])),
     rn(2, 3), rn(), argnums=(0, 1))
dual("split family", lambda m, x: (*m.array_split(x, 3, axis=-1), *m.split(x, [1, 3], axis=1)),
     rn(2, 4))
dual("dsplit", lambda m, x: m.dsplit(x, [1]), rn(1, 2, 3))
dual("stacks", lambda m, x, v: (m.hstack([x, x]), m.vstack([v, x[0]]), m.dstack([x, x]),
                                m.column_stack([v, x[1]]), m.row_stack([v, v]),
                                m.hstack([v, v]), m.vstack([x, v])),
     rn(2, 3), rn(3), argnums=(0, 1))
dual("append", lambda m, x, v: (m.append(x, v), m.append(x, x, axis=-1)), rn(2, 3), rn(3),
     argnums=(0, 1))
dual("r_ c_", lambda m, x: (m.r_[x, 0:3, 7.0], m.c_[x, x]), rn(3))
dual("repeat tile", lambda m, x: (m.repeat(x, 2, axis=-1), m.repeat(x, [1, 0, 2], axis=1),
                                  m.repeat(x, 2), m.tile(x, (2, 1, 2)), m.tile(x[0], 2)),
     rn(2, 3))
dual("roll", lambda m, x: (m.roll(x, 1, axis=-1), m.roll(x, (1, 2), axis=(0, 1))), rn(2, 3))
dual("rollaxis rot90 flips", lambda m, x, y: (m.rollaxis(y, 2), m.rollaxis(y, -1, 1),
                                              m.rot90(x), m.rot90(x, 2), m.rot90(x, -1),
                                              m.rot90(y, 1, axes=(1, 2)), m.fliplr(x), m.flipud(x)),
     rn(2, 3), rn(2, 3, 2), argnums=(0, 1))
for _mode in ("reflect",):
    dual(f"pad[{_mode}]", (lambda md: lambda m, x: m.pad(x, ((1, 2), (2, 1)), mode=md))(_mode),
         rn(3, 3))
dual("pad[constant values]", lambda m, x: (m.pad(x, 2, constant_values=7.0),
                                           m.pad(x, ((0, 1),), constant_values=(1.0, -1.0))),
     rn(3))
dual("meshgrid", lambda m, x, y: (*m.meshgrid(x, y), *m.meshgrid(x, y, indexing="ij"),
                                  *m.meshgrid(x, y, x[:2], sparse=True)), rn(3), rn(2),
     argnums=(0, 1))
dual("diag diagonal trace", lambda m, x, v: (m.diag(x), m.diag(x, 1), m.diag(x, -1), m.diag(v),
                                             m.diag(v, -2), m.diagflat(x[:, :2]),
                                             m.trace(x), m.trace(x, 1), m.diagonal(x, -1)),
     rn(3, 4), rn(3), argnums=(0, 1))
dual("diagonal[3d]", lambda m, y: (m.diagonal(y, 1, 0, 2), m.trace(y, axis1=1, axis2=2),
                                   m.diagonal(y, 0, -1, -2)), rn(2, 3, 4))
dual("tril triu", lambda m, x, y: (m.tril(x), m.triu(x, 1), m.tril(x, -1), m.triu(y, -1)),
     rn(3, 4), rn(2, 3, 3), argnums=(0, 1))
dual("eye identity", lambda m, x: (m.eye(3, 4, 1) * x[0, 0], m.identity(3) + x), rn(3, 3))
dual("kron", lambda m, x, y: (m.kron(x, y), m.kron(x[0], y)), rn(2, 2), rn(2, 3), argnums=(0, 1))
dual("cross", lambda m, a, b: m.cross(a, b), rn(2, 3), rn(3), argnums=(0, 1))
dual("moveaxis[seq]", lambda m, y: m.moveaxis(y, (0, 1), (-1, 0)), rn(2, 3, 4))

# reductions, cumulative, sorting, statistics
for _ax in (-1,):
    dual(f"cumsum cumprod[axis {_ax}]",
         (lambda ax: lambda m, x: (m.cumsum(x, ax), m.cumprod(x, ax)))(_ax), rn(2, 5))
dual("cumsum[int, size0]", lambda m, i, z: (m.cumsum(i), m.cumsum(z, axis=1)),
     ints(3, dtype=np.int32), rn(2, 0), grad=False)
dual("cumprod[zeros]", lambda m, x: m.cumprod(x * np.array([1.0, 0.0, 1.0, 1.0])), rn(4))
dual("diff", lambda m, x: (m.diff(x), m.diff(x, 2, axis=0), m.diff(x, axis=-1, prepend=0.0,
                                                                  append=x[:, :1])), rn(3, 4))
dual("gradient", lambda m, x: m.gradient(x, axis=-1), rn(3, 4))
dual("ptp", lambda m, x: (m.ptp(x), m.ptp(x, axis=-1, keepdims=True)), distinct(2, 3))
dual("nan reductions", lambda m, x: (m.nanmax(x, axis=0), m.nanstd(x, axis=1, ddof=1)),
     np.where(np.arange(12).reshape(3, 4) % 5 == 1, np.nan, distinct(3, 4)), grad=False)
dual("nan reductions[grad]", lambda m, x: (m.nansum(m.where(x > 1.0, np.nan, x)),
                                           m.nanmean(m.where(x < -1.0, np.nan, x), axis=0)),
     away(2, 3))
dual("nanargmax", lambda m, x: (m.nanargmax(x, axis=1), m.nanargmin(x)),
     np.where(np.arange(6).reshape(2, 3) == 1, np.nan, distinct(2, 3)), grad=False)
dual("average", lambda m, x, w: (m.average(x), m.average(x, axis=1, weights=w),
                                 m.average(x, weights=x * x)), rn(3, 4), pos(4),
     argnums=(0, 1))
dual("cov corrcoef", lambda m, x, y: (m.cov(x[0], y), m.corrcoef(x)), rn(3, 5), rn(5),
     argnums=(0, 1))
dual("convolve correlate", lambda m, a, v: (m.convolve(a, v), m.convolve(a, v, "same"),
                                            m.convolve(v, a, "valid"), m.correlate(a, v),
                                            m.correlate(a, v, "full"), m.correlate(v, a, "same")),
     rn(5), rn(3), argnums=(0, 1))

# einsum
dual("einsum[chain]", lambda m, a, b, c: m.einsum("ij,jk,kl->il", a, b, c), rn(2, 3), rn(3, 4),
     rn(4, 2), argnums=(0, 1, 2))
dual("einsum[ellipsis]", lambda m, a, b, c: m.einsum("...ij,jk,...k->...i", a, b, c),
     rn(2, 2, 3), rn(3, 4), rn(2, 1, 4), argnums=(0, 1, 2))
dual("einsum[diag trace]", lambda m, a, x: (m.einsum("ii->i", a), m.einsum("iij->ji", x)),
     rn(3, 3), rn(3, 3, 2), argnums=(0, 1))
dual("einsum[implicit]", lambda m, a, b: (m.einsum("ij,jk", a, b), m.einsum("ba", a),
                                          m.einsum("i...->...", b)), rn(2, 3), rn(3, 4),
     argnums=(0, 1))

# index updates (x.at[...] on traced values; jnp.at(x)[...] eagerly)


def _np_at(x, key, mode, v):
    y = np.array(x, copy=True)
    if mode == "set":
        y[key] = v
    else:
        {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[mode].at(
            y, key, v)
    return y


_AT_KEYS = {"int": 1, "slice": (slice(None), slice(1, 3)), "ellipsis": (Ellipsis, -1),
            "array dup": np.array([0, 2, 0]), "mask": np.array([True, False, True])}
_AT_MODES = {"int": ("set",), "slice": ("add",), "ellipsis": ("multiply",), "mask": ("max",),
             "array dup": ("set", "add", "multiply", "min")}
for _kn, _key in _AT_KEYS.items():
    for _mode in _AT_MODES[_kn]:
        case(f"at[{_kn}].{_mode}", (lambda k, md: lambda x, v: getattr(jnp.at(x)[k], md)(v))(
            _key, _mode), distinct(3, 4), rn(*np.zeros((3, 4))[_key].shape) * 0.5,
             argnums=(0, 1), grad=(_kn, _mode) == ("array dup", "multiply"), expect=(lambda k, md: lambda x, v: _np_at(x, k, md, v))(_key, _mode))
case("at.get", lambda x: (jnp.at(x)[1:, ::-1].get(), jnp.at(x)[np.array([0, 0])].get()),
     rn(3, 4), expect=lambda x: (x[1:, ::-1], x[np.array([0, 0])]))
case("at[traced idx]", lambda x, v, i: (jnp.at(x)[i].add(v), jnp.at(x)[i].max(v),
                                        jnp.at(x)[i].multiply(v)),
     distinct(4), rn(3), np.array([0, 2, 0]), argnums=(0, 1),
     expect=lambda x, v, i: (_np_at(x, i, "add", v), _np_at(x, i, "max", v),
                             _np_at(x, i, "multiply", v)))

# scipy.special and scipy.stats


def _sp(name):
    return getattr(sps, name)


for _n, _s in (("erfc", rn), ("ndtr", rn),
               ("logit", lambda *s: _rng.uniform(0.05, 0.95, s)), ("gammaln", pos),
               ("gamma", pos), ("expit", rn)):
    case(f"special.{_n}", (lambda n: lambda x: getattr(jsp, n)(x))(_n), _s(2, 3),
         expect=(lambda n: lambda x: _sp(n)(x))(_n))
case("special.log_ndtr[tails]", lambda x: jsp.log_ndtr(x),
     np.array([-60.0, -25.0, -21.0, -5.0, 0.0, 4.0, 9.0, 30.0]), expect=sps.log_ndtr,
     rtol=1e-10)
case("special.binary", lambda a, b: (jsp.betaln(a, b), jsp.xlogy(a, b), jsp.xlog1py(a, b),
                                     jsp.xlogy(a * 0.0, b)),
     pos(2, 3), pos(3), argnums=(0, 1),
     expect=lambda a, b: (sps.betaln(a, b), sps.xlogy(a, b), sps.xlog1py(a, b),
                          sps.xlogy(a * 0.0, b)))
case("special.softmax", lambda x: jsp.softmax(x), rn(2, 3), expect=lambda x: sps.softmax(x))
case("stats.norm", lambda x, mu, s: (jst.norm.logpdf(x, mu, s), jst.norm.cdf(x, mu, s)),
     rn(4), rn(), pos(), argnums=(0, 1, 2),
     expect=lambda x, mu, s: (sst.norm.logpdf(x, mu, s), sst.norm.cdf(x, mu, s)))
case("stats.t", lambda x, df: (jst.t.logpdf(x, df), jst.t.pdf(x, df, 0.5, 2.0)), rn(4), pos() + 2.0,
     argnums=(0, 1), expect=lambda x, df: (sst.t.logpdf(x, df), sst.t.pdf(x, df, 0.5, 2.0)))
case("stats.others", lambda x: (jst.laplace.logpdf(x, 0.1, 2.0), jst.cauchy.logpdf(x),
                                jst.gamma.logpdf(x + 3.0, 2.5), jst.poisson.logpmf(3.0, x + 3.0)),
     away(3), expect=lambda x: (sst.laplace.logpdf(x, 0.1, 2.0), sst.cauchy.logpdf(x),
                                sst.gamma.logpdf(x + 3.0, 2.5), sst.poisson.logpmf(3, x + 3.0)))

# casts of traced values and isinstance
case("scalar type casts", lambda x: (jnp.float32(x) * 2.0, jnp.float64(jnp.float32(x)),
                                     jnp.int64(x * 3.0) + 0 * isinstance(x, jnp.ndarray)),
     rn(3), grad=False, expect=lambda x: (np.float32(x) * np.float32(2.0),
                                          np.float64(np.float32(x)), np.int64(x * 3.0)))

# cases with host steps (sorting, LAPACK, SciPy-only special functions), kept together so
# few compiled test programs contain a host step
dual("sort", lambda m, x: (m.sort(x), m.sort(x, axis=0), m.sort(x, axis=None)), distinct(3, 4))
dual("argsort", lambda m, x: (m.argsort(x), m.argsort(x, axis=0), m.argsort(x[0] * 0.0)),
     distinct(3, 4), grad=False)
dual("sort[size0]", lambda m, x: m.sort(x, axis=0), rn(0, 3))
dual("searchsorted", lambda m, x, v: (m.searchsorted(x, v),
                                      m.searchsorted(np.array([1.0, 2.0, 2.0, 3.0]),
                                                     np.array([2.0, 0.0, 5.0]), side="right")),
     np.sort(rn(5)), rn(2, 3), grad=False)
dual("median quantile", lambda m, x: (m.median(x[:, :3], axis=0),
                                      m.quantile(x, [0.1, 0.9], axis=1)), distinct(3, 4))
# linalg (host steps under jit)


def _spd(m, a):
    return m.matmul(a, m.swapaxes(a, -1, -2)) + 3.0 * np.eye(a.shape[-1])


dual("linalg inv det slogdet", lambda m, a: (m.linalg.inv(a), m.linalg.det(a),
                                             m.linalg.slogdet(a)[1]), rn(2, 3, 3) + 3 * np.eye(3))
dual("linalg solve", lambda m, a, b: (m.linalg.solve(a, b), m.linalg.solve(a, b[:, 0])),
     rn(3, 3) + 3 * np.eye(3), rn(3, 2), argnums=(0, 1))
dual("linalg cholesky", lambda m, a: m.linalg.cholesky(_spd(m, a)), rn(2, 3, 3))
dual("linalg eigh", lambda m, a: (m.linalg.eigh(_spd(m, a))[0],
                                  m.abs(m.linalg.eigh(_spd(m, a))[1])), rn(3, 3))
dual("linalg svd", lambda m, a: (m.linalg.svd(a, full_matrices=False)[1],
                                 m.abs(m.linalg.svd(a, full_matrices=False)[0]),
                                 m.abs(m.linalg.svd(a.T, full_matrices=False)[2])), rn(4, 3))
dual("linalg qr", lambda m, a: m.abs(m.linalg.qr(a)[1]) + m.abs(m.linalg.qr(a)[0]).sum(), rn(4, 3))
dual("linalg pinv matrix_power", lambda m, a, b: (m.linalg.pinv(a), m.linalg.matrix_power(b, 3),
                                                  m.linalg.matrix_power(b, -1)),
     rn(4, 3), rn(3, 3) + 3 * np.eye(3), argnums=(0, 1))
dual("linalg norm[vector]", lambda m, v: tuple(m.linalg.norm(v, o) for o in
                                               (None, 1, 2, np.inf, -np.inf, 3)), away(4))
dual("linalg norm[matrix]", lambda m, a: tuple(m.linalg.norm(a, o) for o in
                                               (None, "nuc", 1, -2, np.inf)),
     distinct(3, 4) * 0.5, rtol=1e-9)
dual("linalg norm[axes]", lambda m, a: (m.linalg.norm(a, axis=-1), m.linalg.norm(a, axis=(1, 2)),
                                        m.linalg.norm(a, 1, axis=(2, 1), keepdims=True)),
     away(2, 3, 4))


def _np_solve_tri(a, b, lower, trans):
    import scipy.linalg
    return scipy.linalg.solve_triangular(a, b, lower=lower, trans=trans)


case("solve_triangular", lambda a, b: (jsl.solve_triangular(a, b, lower=True),
                                       jsl.solve_triangular(a, b[:, 0], lower=False, trans=1)),
     rn(3, 3) + 3 * np.eye(3), rn(3, 2), argnums=(0, 1),
     expect=lambda a, b: (_np_solve_tri(a, b, True, 0), _np_solve_tri(a, b[:, 0], False, 1)))

for _n, _s in (("erfinv", _unit), ("ndtri", lambda *s: _rng.uniform(0.05, 0.95, s)),
               ("digamma", pos)):
    case(f"special.{_n}", (lambda n: lambda x: getattr(jsp, n)(x))(_n), _s(2, 3),
         expect=(lambda n: lambda x: _sp(n)(x))(_n))
case("special.polygamma", lambda x: (jsp.polygamma(1, x), jsp.polygamma(2, x)), pos(3),
     expect=lambda x: (sps.polygamma(1, x), sps.polygamma(2, x)), rtol=1e-10)
case("stats.norm.ppf", lambda q: jst.norm.ppf(q, 1.0, 2.0), _rng.uniform(0.1, 0.9, 3),
     expect=lambda q: sst.norm.ppf(q, 1.0, 2.0))
case("stats.multivariate_normal", lambda x, mu, a: (
    jst.multivariate_normal.logpdf(x, mu, _spd(jnp, a)),
    jst.multivariate_normal.pdf(x[0], mu, _spd(jnp, a))),
     rn(4, 3), rn(3), rn(3, 3), argnums=(0, 1, 2),
     expect=lambda x, mu, a: (sst.multivariate_normal.logpdf(x, mu, _spd(np, a)),
                              sst.multivariate_normal.pdf(x[0], mu, _spd(np, a))))


# ------------------------------------------------------------------ 32-bit word ops (random)
def _words(*shape):
    return _rng.integers(0, 2 ** 32, shape, dtype=np.int64)


_M32 = 0xFFFFFFFF
_RW = jitgraph.ops.random
case("uint32_add", _RW.uint32_add_p, _words(3, 4), _words(4), grad=False,
     expect=lambda x, y: (x + y) & _M32)
case("uint32_xor", _RW.uint32_xor_p, _words(3, 4), _words(3, 4), grad=False,
     expect=lambda x, y: x ^ y)
case("threefry_mix[r=13]", lambda x, y: _RW.threefry_mix_p(x, y, r=13), _words(5), _words(5),
     grad=False, expect=lambda x, y: (((y << 13) | (y >> 19)) & _M32) ^ ((x + y) & _M32))


# ------------------------------------------------------------------ control flow (jitgraph.lax)
def _np_scan(w, xs):
    c, ys = np.zeros(3), []
    for x in xs:
        ys.append(np.sin(c))
        c = np.tanh(c * w + x)
    return c, np.stack(ys)


case("lax.scan", lambda w, xs: jitgraph.lax.scan(
    lambda c, x: (jnp.tanh(c * w + x), jnp.sin(c)), jnp.zeros(3), xs), rn(3), rn(4, 3),
     argnums=(0, 1), expect=_np_scan)
case("lax.cond", lambda x, y: (
    jitgraph.lax.cond(x[0] > 0, lambda a, b: jnp.sin(a) * b, lambda a, b: a - b, x, y),
    jitgraph.lax.cond(x[0] < 0, lambda a, b: jnp.sin(a) * b, lambda a, b: a - b, x, y)),
     away(3), rn(3), argnums=(0, 1),
     expect=lambda x, y: (np.sin(x) * y if x[0] > 0 else x - y,
                          np.sin(x) * y if x[0] < 0 else x - y))
case("lax.while_loop", lambda x: jitgraph.lax.while_loop(
    lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, x))[1], rn(3), grad=False,
     expect=lambda x: x ** 4)
case("checkpoint", lambda x: jitgraph.checkpoint(lambda a: jnp.sin(a) * a)(x), rn(3),
     expect=lambda x: np.sin(x) * x)
case("checkpoint dots_saveable", lambda x, w: jitgraph.checkpoint(
    lambda a, b: jnp.tanh(jitgraph.checkpoint_name(a @ b, "z")) * a[:, :1],
    policy=jitgraph.checkpoint_policies.save_only_these_names("z"))(x, w), rn(3, 2), rn(2, 2),
     argnums=(0, 1), expect=lambda x, w: np.tanh(x @ w) * x[:, :1])
case("checkpoint_name", lambda x: jnp.sin(jitgraph.checkpoint_name(x * x, "sq")), rn(3),
     expect=lambda x: np.sin(x * x))
case("lax.optimization_barrier", lambda x, y: jnp.sin(
    jitgraph.lax.optimization_barrier((x, y))[0]) * y, rn(3), rn(3), argnums=(0, 1),
     expect=lambda x, y: np.sin(x) * y)


def _np_attention_probs(q, k, scale=0.5):
    s = q @ np.swapaxes(k, -1, -2) * scale
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _np_attention(q, k, v, scale=0.5):
    return _np_attention_probs(q, k, scale) @ v


def _np_attention_dq(q, do, k, v, scale=0.5):
    p = _np_attention_probs(q, k, scale)
    dp = do @ np.swapaxes(v, -1, -2)
    return (p * (dp - np.sum(do * (p @ v), -1, keepdims=True))) @ k * scale


_ATT = dict(scale=0.5, causal=True, kind=0, fill=-np.inf)
_att_k, _att_v = rn(2, 5, 3), rn(2, 5, 3)
case("attention", lambda q: jitgraph.attention.attention_p(q, _att_k, _att_v, **_ATT)[0],
     rn(2, 5, 3), expect=lambda q: _np_attention(q, _att_k, _att_v))
case("attention_bwd", lambda q, do: jitgraph.attention.attention_bwd_p(
    q, _att_k, _att_v, *jitgraph.attention.attention_p(q, _att_k, _att_v, **_ATT), do,
    **_ATT)[0], rn(2, 5, 3), rn(2, 5, 3), argnums=(0, 1), rtol=1e-5,
     expect=lambda q, do: _np_attention_dq(q, do, _att_k, _att_v))

_ce_w, _ce_y = rn(3, 4), np.array([0, 3, 1, 2, 3])


def _np_linear_ce(h):
    z = h @ _ce_w
    m = z.max(1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0] - z[np.arange(5), _ce_y]


def _np_linear_ce_dh(h, ct):
    z = h @ _ce_w
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(5), _ce_y] -= 1.0
    return (p * ct[:, None]) @ _ce_w.T


case("linear_ce", lambda h: jitgraph.linear_ce.linear_ce_p(h, _ce_w, _ce_y)[0], rn(5, 3),
     expect=_np_linear_ce)
case("linear_ce_bwd", lambda h, ct: jitgraph.linear_ce.linear_ce_bwd_p(
    h, _ce_w, _ce_y, jitgraph.linear_ce.linear_ce_p(h, _ce_w, _ce_y)[1], ct)[0],
     rn(5, 3), rn(5), argnums=(0, 1), rtol=1e-5, expect=lambda h, ct: _np_linear_ce_dh(h, ct))
case("linear_ce_train", lambda h, ct: jitgraph.linear_ce.linear_ce_train_p(
    h, _ce_w, _ce_y, ct)[2], rn(5, 3), rn(5), argnums=(0, 1), grad=False,
     expect=lambda h, ct: _np_linear_ce_dh(h, ct))


# ------------------------------------------------------------------ integer dtypes and bitwise ops
# Every integer dtype of the Array API standard, at and near its limits (where arithmetic
# wraps): fixed values, not drawn from ``_rng``, so the cases above keep their data.
_INTS = {"i8": np.int8, "i16": np.int16, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32,
         "u64": np.uint64}


def edge_ints(dtype) -> np.ndarray:
    """A (2, 5) array of ``dtype``'s limits, the values next to them and small ones."""
    i = np.iinfo(dtype)
    v = [0, 1, 2, 7, i.max, i.max - 1, i.min, i.min + 1 if i.min else 3, i.max // 2 + 1, 100]
    return np.array(v, dtype).reshape(2, 5)


def divisors(dtype) -> np.ndarray:
    """Non-zero operands of ``dtype`` (divisors), broadcasting against ``edge_ints``."""
    return np.array([3, 1, 2, 5, np.iinfo(dtype).max], dtype)


def shift_counts(dtype) -> np.ndarray:
    """Shift counts in ``[0, bits]`` and past it (NumPy's results: 0, or -1 for a negative
    signed operand shifted right)."""
    b = np.iinfo(dtype).bits
    return np.array([[0, 1, 3, b - 1, b], [b + 3, 2, 5, 1, 7]], dtype)


_INT_BINARY = {
    "add": lambda m, x, y: x + y, "subtract": lambda m, x, y: m.subtract(x, y),
    "multiply": lambda m, x, y: x * y, "floor_divide": lambda m, x, y: x // y,
    "remainder": lambda m, x, y: m.remainder(x, y), "maximum": lambda m, x, y: m.maximum(x, y),
    "less": lambda m, x, y: x < y, "equal": lambda m, x, y: m.equal(x, y),
    "bitwise_and": lambda m, x, y: m.bitwise_and(x, y), "bitwise_or": lambda m, x, y: x | y,
    "bitwise_xor": lambda m, x, y: x ^ y,
}
_INT_UNARY = {
    "negative": lambda m, x: -x, "abs": lambda m, x: m.abs(x), "sign": lambda m, x: m.sign(x),
    "bitwise_invert": lambda m, x: ~x, "astype_f64": lambda m, x: x.astype(m.float64),
    "sum": lambda m, x: m.sum(x, axis=1), "prod": lambda m, x: m.prod(x[:, :3]),
    "max": lambda m, x: m.max(x, axis=0), "cumsum": lambda m, x: m.cumsum(x, axis=1),
    "weak_scalar": lambda m, x: (x + 3) * 2 & 5, "where": lambda m, x: m.where(x > 7, x, 1),
}
_INT_REDUCTIONS = ("sum", "prod", "max", "cumsum")


def _int_elementwise(m, x, y, n):
    """Every elementwise integer op of the table on one dtype: one case (and, compiled, one
    fused kernel) per dtype, so the table costs few compiles."""
    return (tuple(f(m, x, y) for f in _INT_BINARY.values())
            + tuple(f(m, x) for k, f in _INT_UNARY.items() if k not in _INT_REDUCTIONS)
            + (x << n, m.bitwise_right_shift(x, n)))


for _t, _d in _INTS.items():
    dual(f"int_elementwise[{_t}]", _int_elementwise, edge_ints(_d), divisors(_d),
         shift_counts(_d), grad=False)
    dual(f"int_reductions[{_t}]", lambda m, x: tuple(_INT_UNARY[k](m, x)
                                                    for k in _INT_REDUCTIONS),
         edge_ints(_d), grad=False)
# the standard's promotion between kinds and widths (NumPy 2's: uint64 with a signed integer
# is float64, which the standard leaves open), and bools through the bitwise functions
for _a, _b in (("u8", "i8"), ("u16", "i16"), ("u32", "i8"), ("u8", "u32"), ("i16", "u64"),
               ("u64", "i8")):
    dual(f"int_promote[{_a}+{_b}]", lambda m, x, y: x + y, edge_ints(_INTS[_a]),
         divisors(_INTS[_b]), grad=False)
dual("int_promote[u16*f32]", lambda m, x, y: x * y, edge_ints(np.uint16),
     np.array([0.5, -1.0, 2.0, 3.0, 0.25], np.float32), grad=False)
dual("int_promote[u8+1.5]", lambda m, x: x + 1.5, edge_ints(np.uint8), grad=False)
dual("bitwise[bool]", lambda m, x, y: (m.bitwise_and(x, y), x | y, m.bitwise_xor(x, y), ~x),
     np.array([True, False, True, False]), np.array([True, True, False, False]), grad=False)

# ------------------------------------------------------------------ complex numbers
def cn(*shape, dtype=np.complex128):
    """Complex numbers with both parts standard normal."""
    return (_rng.standard_normal(shape) + 1j * _rng.standard_normal(shape)).astype(dtype)


# (their gradients, with JAX's convention for complex inputs, are tests/test_complex.py's)
_cz, _cw, _cz32 = cn(2, 3), cn(2, 3), cn(2, 3, dtype=np.complex64)
dual("complex_arith", lambda m, z, w: z * w + z / (w + 1.0) - 2j * z, _cz, _cw, grad=False)
dual("complex_arith_c64", lambda m, z: z * z - (1 + 2j) * z + 0.5, _cz32, grad=False,
     rtol=1e-5)
dual("complex_unary", lambda m, z: m.exp(z) + m.log(z) + m.sqrt(z) + m.sin(z) + m.cos(z)
     + m.tanh(z) + m.negative(z), _cz, grad=False)
dual("complex_parts", lambda m, z: m.real(z) * m.imag(z) + m.abs(z) + m.angle(z), _cz,
     grad=False)
dual("complex_conj_sign", lambda m, z: m.conj(z) * m.sign(z), _cz, grad=False)
dual("complex_reductions", lambda m, z: m.sum(z, axis=0) + m.prod(z, axis=0)
     + m.mean(z, axis=0), _cz, grad=False)
dual("complex_matmul", lambda m, z, w: z @ w.T, _cz, _cw, grad=False, rtol=1e-12)
dual("complex_matmul_c64", lambda m, z: z @ z.T, _cz32, grad=False, rtol=1e-5)
dual("complex_vdot", lambda m, z, w: m.vdot(z, w), _cz, _cw, grad=False)
dual("complex_einsum", lambda m, z, w: m.einsum("ij,kj->ik", z, w), _cz, _cw, grad=False,
     rtol=1e-12)
dual("complex_predicates", lambda m, z: m.isfinite(z) & ~m.isnan(z) & ~m.isinf(z)
     & (z == z) & ~(z != z), _cz, grad=False)
dual("complex_from_float", lambda m, x, z: x * z + x, rn(2, 3), _cz, grad=False)
dual("fft_c2c", lambda m, z: m.fft.fft(z) + m.fft.ifft2(z, norm="ortho"), _cz, grad=False,
     rtol=1e-12)
dual("fft_real", lambda m, x: m.fft.irfft(m.fft.rfft(x, 5) * 2.0, 6), rn(2, 4), grad=False,
     rtol=1e-12)
# real inputs and outputs through complex values: check_grads checks real/imag/conj/fft's
# rules (and the complex ops between) as maps of real numbers
dual("complex_via_real", lambda m, x: m.real(m.exp(1j * x) * m.conj(x + 2j))
     + m.imag(m.sqrt(x * (1 + 1j))) + m.abs(x - 0.5j), pos(2, 3), rtol=1e-12)
dual("fft_via_real", lambda m, x: m.real(m.fft.fft(x * (1 - 0.5j))) + m.fft.irfft(
     m.fft.rfft(x) * (0.5 + 2j), 3) + m.imag(m.fft.ifft2(x + 0j, norm="ortho")),
     rn(2, 3), rtol=1e-6)
case("complex_to_float", lambda z: jnp.astype(z, jnp.float64) + jnp.abs(z), _cz, grad=False,
     expect=lambda z: z.real + np.abs(z))

CASES_BY_NAME = {c.name: c for c in CASES}
GRAD_CASES = [c for c in CASES if c.grad]
