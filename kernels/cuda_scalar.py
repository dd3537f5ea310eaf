"""Scalar helpers that generated CUDA kernels call, with NumPy's semantics.

The CUDA twins of ``scalar.py``: the same rules (NaN-propagating max/min, JAX-style index
clamping). Each helper computes in its argument's precision: a float32 kernel gets no float64
instruction from them (a Python float literal would promote the expression to float64, and
``math.floor`` returns an integer in Numba), which ``tests_cuda/ptx_check.py`` verifies on the
PTX.

Two kinds of definition:

* ``maximum``, ``minimum``, ``clamp_index``: ``@cuda.jit(device=True)`` functions (NVVM inlines
  them);
* ``floor``, ``sign``, ``logistic_f32``/``logistic_f64``, ``power``, ``erf``: plain Python
  functions (what the simulator runs), implemented on the GPU by ``overload(...,
  inline="always")`` per argument type. Inlined at the Numba IR level, their ``math.exp`` /
  ``math.tanh`` / ``**`` are lowered in the *calling kernel's* context, so ``jit(f,
  device="cuda", fastmath=True)`` (kernels decorated ``@cuda.jit(fastmath=True)``) gets the
  approximate instructions inside them too: numba-cuda maps float32 ``math.tanh`` to
  ``tanh.approx.f32`` (sm_75 and later), ``math.exp`` to ``__nv_fast_expf`` (one
  ``ex2.approx``, no range reduction), ``/`` to ``div.approx`` and ``**`` to ``__nv_fast_powf``,
  while the default stays libdevice's precise routines. (A device function is compiled once
  with its own flags and would keep the precise ones even in a fastmath kernel.) Floor and
  copysign are libdevice's ``floorf``/``floor`` and ``copysignf``/``copysign`` (one
  ``cvt.rmi`` / bit operations); ``logistic_*`` is branch-free (a select, no divergent branch).
"""
from __future__ import annotations

import math as _math
import os
import types

import numpy as np
from numba import cuda

from . import narrow as _narrow

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _ieee(fn):
    def f(*xs):
        with np.errstate(all="ignore"):
            return fn(*xs)
    return f


if SIMULATOR:
    # The simulator evaluates ``math.log(0.0)`` with Python's math module, which raises where
    # the GPU returns -inf: generated kernels get IEEE semantics from NumPy instead.
    math = types.SimpleNamespace(erf=_math.erf, **{n: _ieee(getattr(np, n)) for n in (
        "exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "sqrt", "fmod",
        "copysign")})
else:
    math = _math            # libdevice on the GPU

_device = cuda.jit(device=True)   # NVVM inlines small device functions itself

# the 16-bit floats' conversions (kernels/narrow.py: integer and float32 operations only, the
# same Python the simulator runs and the CPU compiles)
from_bf16, to_bf16, from_f16, to_f16, odd_f32 = (
    _device(_narrow.PYTHON[n]) for n in ("from_bf16", "to_bf16", "from_f16", "to_f16", "odd_f32"))


@_device
def maximum(a, b):
    """np.maximum: NaN in either operand propagates."""
    return a if (a > b or a != a) else b


@_device
def minimum(a, b):
    """np.minimum: NaN in either operand propagates."""
    return a if (a < b or a != a) else b


@_device
def clamp_index(i, n):
    """Index normalisation for gathers: negative wraps once, the rest is clamped (as JAX).
    The result is int64 whatever the index array's integer type (uint64 with the signed
    bound would promote to float64)."""
    i = np.int64(i)
    if i < 0:
        i += n
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i


# ------------------------------------------------------------------ typed helpers
# The Python bodies are the reference the simulator runs (NumPy scalars in, IEEE semantics);
# on the GPU the overloads below replace them.
def sign(x):
    """np.sign (0 stays 0, NaN stays NaN)."""
    with np.errstate(all="ignore"):
        return np.sign(x)


def floor(x):
    """np.floor on floats (``math.floor`` returns an integer in Numba, which overflows)."""
    return np.floor(x)


def erf(x):
    return math.erf(x)


def power(a, b):
    """a ** b with NumPy's float semantics (NaN for a negative base and fractional exponent)."""
    with np.errstate(all="ignore"):
        return np.power(a, b)


def _logistic(x):
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        r = x.dtype.type(1) / (x.dtype.type(1) + e)
        return r if x >= 0 else e * r


def logistic_f32(x):
    """1 / (1 + exp(-x)) in float32, without overflow for large |x|: with ``e = exp(-|x|)``,
    ``r = 1 / (1 + e)`` is the value for x >= 0 and ``e * r`` (exact, unlike ``1 - r``) for
    x < 0, chosen by a select."""
    return _logistic(np.float32(x))


def logistic_f64(x):
    return _logistic(np.float64(x))


if not SIMULATOR:
    from numba.core import types as nbtypes
    from numba.cuda import libdevice
    from numba.cuda.extending import overload

    def _floor_f32(x):
        return libdevice.floorf(x)

    def _floor_f64(x):
        return libdevice.floor(x)

    def _sign_f32(x):       # +-1 with x's sign bit; NaN stays NaN, +-0 gives +0 (as NumPy)
        s = libdevice.copysignf(np.float32(1), x) if x != np.float32(0) else np.float32(0)
        return x if x != x else s

    def _sign_f64(x):
        s = libdevice.copysign(np.float64(1), x) if x != np.float64(0) else np.float64(0)
        return x if x != x else s

    def _sign_signed(x):
        return (x > 0) - (x < 0)        # int64: the caller casts to the operand's type

    def _sign_unsigned(x):
        return x > 0

    def _logistic_f32(x):
        y = np.float32(x)
        e = math.exp(-abs(y))
        r = np.float32(1) / (np.float32(1) + e)
        return r if y >= np.float32(0) else e * r

    def _logistic_f64(x):
        y = np.float64(x)
        e = math.exp(-abs(y))
        r = np.float64(1) / (np.float64(1) + e)
        return r if y >= np.float64(0) else e * r

    def _power(a, b):
        return a ** b

    def _power_f32(a, b):
        return np.float32(a) ** np.float32(b)

    def _erf(x):
        return math.erf(x)

    def _by_float(f32, f64):
        def typer(x):
            if x == nbtypes.float32:
                return f32
            if x == nbtypes.float64:
                return f64
            return None
        return typer

    @overload(floor, inline="always")
    def _ol_floor(x):
        if isinstance(x, nbtypes.Integer):
            return _floor_f64 if x.bitwidth > 16 else _floor_f32   # as NumPy: a float
        return _by_float(_floor_f32, _floor_f64)(x)

    @overload(sign, inline="always")
    def _ol_sign(x):
        if isinstance(x, nbtypes.Boolean):
            return None
        if isinstance(x, nbtypes.Integer):
            return _sign_signed if x.signed else _sign_unsigned
        return _by_float(_sign_f32, _sign_f64)(x)

    @overload(logistic_f32, inline="always")
    def _ol_logistic_f32(x):
        return _logistic_f32 if isinstance(x, nbtypes.Number) else None

    @overload(logistic_f64, inline="always")
    def _ol_logistic_f64(x):
        return _logistic_f64 if isinstance(x, nbtypes.Number) else None

    @overload(power, inline="always")
    def _ol_power(a, b):
        # The generator casts array operands to one type, so a float64 operand beside a
        # float32 one is a Python literal of an op's rule (exp2: ``power(2.0, x)``): weak, as
        # in NumPy, it computes in float32
        if {a, b} == {nbtypes.float32, nbtypes.float64}:
            return _power_f32
        return _power

    @overload(erf, inline="always")
    def _ol_erf(x):
        return _erf
