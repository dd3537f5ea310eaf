"""Vectorizable scalar math (exp, expm1, log, log1p, tanh, logistic, softplus) for @njit code.

Without SVML, LLVM turns ``np.exp`` / ``np.tanh`` / ``np.log`` in a Numba loop into one
scalar libm call per element, which blocks loop vectorization.  The functions here are
written as plain arithmetic (range reduction, polynomials, rational functions, selects)
plus three tiny LLVM intrinsics for the bit-level parts (build 2**n, split mantissa and
exponent), so a loop that calls them compiles to SIMD code (AVX2/AVX-512 here).

How generated code calls them
-----------------------------
The package maps this folder to ``jitgraph.kernels`` (pyproject ``package-dir``), so
generated modules do ``from jitgraph.kernels.fastmath import tanh_f32, fast_exp`` (or
``import jitgraph.kernels.fastmath as _fm`` and call ``_fm.tanh_f32(v)``; Numba resolves
module attributes at compile time); ``kernels.fastmath`` is the same file when the
repository root is on sys.path.  Import it under one name per process.  Two layers:

* dtype-specific: ``exp_f32, expm1_f32, log_f32, log1p_f32, tanh_f32, logistic_f32,
  softplus_f32`` (float32 -> float32) and the same names with ``_f64`` (float64 ->
  float64).  The code generator picks the suffix from the (static) dtype of the operand,
  e.g. with ``lookup(name, dtype)`` or ``FASTMATH_KERNELS[(name, "float32")]``.  Pass a
  value of exactly that dtype: ``x_f32`` given a float64 computes in float64 with float32
  constants (wrong precision), so cast first.
* dtype-generic: ``fast_exp, fast_expm1, fast_log, fast_log1p, fast_tanh,
  fast_logistic, fast_softplus`` (also ``FASTMATH_FUNCS[name]``), resolved at Numba typing
  time with ``@overload``: float32 -> the ``_f32`` version, float64, integers and bool ->
  the ``_f64`` version (float64 result, as ``math.exp`` in Numba).  For NumPy's
  small-integer rules (int8/int16 -> float16/float32) cast in the generated code.  Called
  from the interpreter they evaluate the NumPy equivalent.  They add ~10 ms of compile time
  once per (function, type) and nothing at run time.

The ``_f32`` versions compute in float32 (one float32 SIMD lane per element).  None of
them touch global state, allocate, or raise, so they are safe in ``prange`` loops and in
``cache=True`` kernels (the compiled code of a helper is linked into its caller).

Why ``njit(forceinline=True, ...)`` (measured here, numba 0.68.1, 2-core znver5)
--------------------------------------------------------------------------------
* plain ``@njit``: LLVM inlines only small callees (its cost threshold); the larger
  helpers (expm1_f64, tanh_f64, softplus_*) stay calls and the caller's loop does not
  vectorize (a log(softplus(a) + tanh(b)) float32 test kernel over 2**22 values:
  226-260 ms instead of 13 ms).
* ``inline="always"`` (Numba IR inlining): re-types the helper inside every kernel
  (530-660 ms per test kernel vs 250-490 ms below), and the helper then takes the
  *caller's* flags: with the default ``error_model="python"`` each ``/`` gets a
  ZeroDivisionError branch that blocks vectorization, and a ``fastmath=True`` caller would
  let LLVM drop the nan/inf handling.
* ``forceinline=True`` (chosen) marks the compiled helper ``alwaysinline`` in LLVM: it is
  typed and compiled once per process (or loaded from Numba's on-disk cache), always
  inlined, and keeps its own flags: ``error_model="numpy"`` (no division checks) and
  ``fastmath=False`` (set explicitly, since unset flags are inherited from the caller).
  ``no_cpython_wrapper``/``no_cfunc_wrapper`` cut ~15-40 ms per helper (they cannot be
  called from the interpreter; use the ``fast_*`` names or an @njit loop).
  ``cache=True``: compiling the helpers of a tanh+logistic+softplus+exp kernel costs
  ~270 ms once; with the cache warm, that kernel compiled in 104 ms instead of 377 ms.
  Entries go to ``kernels/__pycache__`` (``*.nbi``/``*.nbc``) or ``NUMBA_CACHE_DIR``.

Methods
-------
* exp: x clamped to [-104, 89] (f32) / [-746, 710] (f64) (nan restored at the end);
  n = round(x / ln 2) with the 1.5*2**23 (2**52) trick; r = x - n ln2 with a two-part
  (Cody-Waite) ln 2; exp(r) by Taylor polynomial (degree 8 / 13, truncation < 0.1 ulp);
  scaled by 2**n1 * 2**n2 (n1 = n/2 rounded) built from integer bits, so huge and denormal
  results round once and overflow to inf / underflow to 0 by themselves.
* expm1: same reduction; expm1(r) = r + r^2 q(r); result 2**n expm1(r) + (2**n - 1),
  exact for n = 0, so tiny x keeps full relative accuracy; -0.0 preserved.
* log: denormals scaled by 2**23 (2**54); mantissa m in [sqrt(1/2), sqrt 2) and exponent
  from the bits; log(1+f) by Cephes' logf polynomial (f32) / fdlibm's s = f/(2+f) series
  (f64); then the special cases 0 -> -inf, x < 0 -> nan, inf -> inf, nan -> nan.
* log1p: log(u) + (x - (u - 1)) / u with u = 1 + x (the correction recovers the rounding
  error of 1 + x); -1 -> -inf, -0.0 kept, inf -> inf.
* tanh f32: Eigen's / XLA's clamped rational function (odd degree 13 / even degree 6,
  clamped at 7.905), evaluated in float32 with fused multiply-adds (``fastmath={'contract'}``
  on this one helper): 2.7e-7 max abs error (4.6 ulp near |x| = 6), the accuracy XLA's CPU
  tanh has, at about a third of the cost of evaluating it in float64 (5.5e-8, 3.3x slower
  in a loop here).  |x| < 4e-4 -> x; |x| >= 9 -> +-1 (float32 rounding of tanh).
* tanh f64: -expm1(-2|x|) / (expm1(-2|x|) + 2) with the sign of x (copysign).
* logistic: e = exp(-|x|), result (1 or e) / (1 + e): no overflow, relative accuracy
  also for x << 0 (tiny and denormal results).
* softplus: max(x, 0) + log1p(exp(-|x|)).

Accuracy (measured against NumPy: float32 results vs float64 NumPy, float64 results vs
long-double NumPy; ulp = error / spacing of the correctly rounded result)
-------------------------------------------------------------------------------------
float32, exhaustive over all 2**32 inputs:
  exp 0.96 ulp, expm1 1.45, log 0.83, log1p 1.44, tanh 4.6 (max abs 2.7e-7; sampled),
  logistic 2.40 (max abs 8.9e-8), softplus 1.99; every nan/inf result matches NumPy.
float64, 6e6 inputs (random bit patterns, logspace of both signs, dense around the
interesting range):
  exp 0.96 ulp (rel 1.6e-16), expm1 1.88 (2.4e-16), log 0.78 (1.5e-16),
  log1p 1.44 (2.5e-16), tanh 2.50 (3.6e-16), logistic 2.02 (3.2e-16), softplus 1.77 (3.1e-16).
Special values as NumPy: exp(+-inf) = inf / 0, exp(1000) = inf, expm1(-inf) = -1,
log(0) = -inf, log(x < 0) = nan, log1p(-1) = -inf, tanh(+-inf) = +-1, logistic(-inf) = 0,
softplus(-inf) = 0, nan -> nan, signed zeros kept where NumPy keeps them; denormal inputs
and outputs are handled (no flush to zero).  tests/test_fastmath.py checks all of this.

Speed (bench/fastmath_speed.py, 2**22 values, one thread; noisy shared 2-core machine)
---------------------------------------------------------------------------------------
float32, NumPy-in-@njit loop / fast loop: exp ~9x (15.7 -> 1.8 ms), expm1 ~20-40x,
log ~5-9x, log1p ~15x, tanh ~35x (96 -> 2.6 ms), logistic ~8x, softplus ~5x; the float32
loops except softplus run at memory speed (~1.5-2 ms).  float64: exp ~3x, expm1 ~7x,
log ~3x, log1p ~8x, tanh ~9x, logistic ~3x, softplus ~1.7x.
Compute cost, L1-resident data, ns per element: f32 exp 0.36, expm1 0.43, log 0.40,
log1p 0.47, tanh ~0.2, logistic 0.42, softplus 1.35; f64 exp 1.10, expm1 1.27, log 0.86,
log1p 1.02, tanh 1.49, logistic 1.23, softplus 3.4.

sin / cos are not provided: a vectorizable version is only accurate up to a bounded |x|
without Payne-Hanek reduction; use np.sin / np.cos (libm) there.
"""

# The `a if a < b else b` clamps and `x == x` tests are deliberate: unlike min/max they
# fix how nan goes through (see the functions) and they compile to SIMD selects.
# ruff: noqa: FURB136, PLR0124

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit, types
from numba.extending import intrinsic, overload

_jit = njit(
    forceinline=True,
    no_cpython_wrapper=True,
    no_cfunc_wrapper=True,
    error_model="numpy",
    fastmath=False,
    cache=True,
)
# ``contract`` only lets LLVM fuse a*b+c into one FMA (one rounding instead of two); NaN and
# infinity semantics are unchanged. tanh_f32 relies on it for its float32 accuracy; exp_f32
# (softmax, cross-entropy, attention) for speed: 0.71 -> 0.45 ns per value on an AVX-512 Xeon,
# 0.98 ulp at most over every third float32 in [-104, 89] (0.96 without).
_jit_fma = njit(
    forceinline=True,
    no_cpython_wrapper=True,
    no_cfunc_wrapper=True,
    error_model="numpy",
    fastmath={"contract"},
    cache=True,
)


# ---------------------------------------------------------------------------
# Bit-level helpers (LLVM IR: bitcast, integer add/shift/mask).  They are
# generic over float32 / float64 and vectorize to plain integer SIMD ops.
# The integer work is done in i32 for float32 so that one float vector maps to
# one integer vector, and float<->int conversions go through i32 (available
# with SSE2/AVX2, unlike 64-bit ones which need AVX-512DQ).
# ---------------------------------------------------------------------------


def _layout(fty):
    """(float ir type, int ir type, mantissa bits, exponent bias) or None."""
    if fty == types.float32:
        return ir.FloatType(), ir.IntType(32), 23, 127
    if fty == types.float64:
        return ir.DoubleType(), ir.IntType(64), 52, 1023
    return None


@intrinsic
def _pow2(typingctx, n):
    """2.0**n for an integer-valued float ``n`` in the normal exponent range.

    No range checks: callers keep ``n`` in [-126, 127] (float32) or
    [-1022, 1023] (float64).
    """
    lay = _layout(n)
    if lay is None:
        return None
    fty, ity, mbits, bias = lay

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        i = builder.fptosi(args[0], i32)
        i = builder.add(i, ir.Constant(i32, bias))
        if ity.width != 32:
            i = builder.sext(i, ity)
        i = builder.shl(i, ir.Constant(ity, mbits))
        return builder.bitcast(i, fty)

    return n(n), codegen


@intrinsic
def _frexp_mant(typingctx, x):
    """Mantissa of a positive normal float, scaled into [0.5, 1)."""
    lay = _layout(x)
    if lay is None:
        return None
    fty, ity, mbits, bias = lay
    keep = (1 << mbits) - 1
    half = (bias - 1) << mbits

    def codegen(context, builder, sig, args):
        b = builder.bitcast(args[0], ity)
        b = builder.and_(b, ir.Constant(ity, keep))
        b = builder.or_(b, ir.Constant(ity, half))
        return builder.bitcast(b, fty)

    return x(x), codegen


@intrinsic
def _frexp_exp(typingctx, x):
    """Exponent e (as a float of x's type) with x == _frexp_mant(x) * 2**e.

    Valid for positive normal x; for other inputs it returns a finite value.
    """
    lay = _layout(x)
    if lay is None:
        return None
    fty, ity, mbits, bias = lay
    emask = (1 << (ity.width - 1 - mbits)) - 1

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        b = builder.bitcast(args[0], ity)
        b = builder.lshr(b, ir.Constant(ity, mbits))
        if ity.width != 32:
            b = builder.trunc(b, i32)
        b = builder.and_(b, ir.Constant(i32, emask))
        b = builder.sub(b, ir.Constant(i32, bias - 1))
        return builder.sitofp(b, fty)

    return x(x), codegen


# ---------------------------------------------------------------------------
# Constants.  Module-level NumPy scalars are frozen by Numba as typed
# constants, so float32 code never meets a float64 literal (a bare 1.0 or 1
# inside a float32 function would promote the whole expression to float64).
# ---------------------------------------------------------------------------

_F = np.float32
_D = np.float64

# float32 ------------------------------------------------------------------
_ZERO_F = _F(0.0)
_HALF_F = _F(0.5)
_ONE_F = _F(1.0)
_INF_F = _F(np.inf)
_NINF_F = _F(-np.inf)
_NAN_F = _F(np.nan)
_RND_F = _F(12582912.0)  # 1.5 * 2**23: (t + _RND_F) - _RND_F rounds t to an integer
_LOG2E_F = _F(1.44269504088896341)
_LN2_HI_F = _F(0.693359375)  # few mantissa bits: n * _LN2_HI_F is exact
_LN2_LO_F = _F(-2.12194440e-4)
_EXP_HI_F = _F(89.0)  # exp overflows to inf above ~88.72: clamping here still gives inf
_EXP_LO_F = _F(-104.0)  # exp(-104) < 2**-150: rounds to 0
_EXPM1_LO_F = _F(-20.0)  # expm1(x) rounds to -1 below ~-17.4
_EXPM1_BIG_F = _F(60.0)
_TINY_F = _F(1.1754943508222875e-38)  # smallest normal float32
_TWO23_F = _F(8388608.0)
_M23_F = _F(-23.0)
_SQRTHF_F = _F(0.70710678118654752440)
# Taylor coefficients 1/k! for expm1 on |r| <= ln2/2 (k = 2..8)
_E2_F = _F(1 / 2)
_E3_F = _F(1 / 6)
_E4_F = _F(1 / 24)
_E5_F = _F(1 / 120)
_E6_F = _F(1 / 720)
_E7_F = _F(1 / 5040)
_E8_F = _F(1 / 40320)
# Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f) on [sqrt(1/2)-1, sqrt(2)-1]
_L0_F = _F(7.0376836292e-2)
_L1_F = _F(-1.1514610310e-1)
_L2_F = _F(1.1676998740e-1)
_L3_F = _F(-1.2420140846e-1)
_L4_F = _F(1.4249322787e-1)
_L5_F = _F(-1.6668057665e-1)
_L6_F = _F(2.0000714765e-1)
_L7_F = _F(-2.4999993993e-1)
_L8_F = _F(3.3333331174e-1)
# Eigen's / XLA's float tanh: odd 13 / even 6 rational interpolant, clamped at 7.9053;
# evaluated in float32 with fused multiply-adds (see tanh_f32).
_TANH_CLAMP_F = _F(7.90531110763549805)
_TANH_SAT_F = _F(9.0)  # |x| >= 9: tanh rounds to +-1 in float32
_TANH_TINY_F = _F(0.0004)
_TA1_F = _F(4.89352455891786e-03)
_TA3_F = _F(6.37261928875436e-04)
_TA5_F = _F(1.48572235717979e-05)
_TA7_F = _F(5.12229709037114e-08)
_TA9_F = _F(-8.60467152213735e-11)
_TA11_F = _F(2.00018790482477e-13)
_TA13_F = _F(-2.76076847742355e-16)
_TB0_F = _F(4.89352518554385e-03)
_TB2_F = _F(2.26843463243900e-03)
_TB4_F = _F(1.18534705686654e-04)
_TB6_F = _F(1.19825839466702e-06)

# float64 ------------------------------------------------------------------
_ZERO_D = _D(0.0)
_HALF_D = _D(0.5)
_ONE_D = _D(1.0)
_TWO_D = _D(2.0)
_INF_D = _D(np.inf)
_NINF_D = _D(-np.inf)
_NAN_D = _D(np.nan)
_RND_D = _D(6755399441055744.0)  # 1.5 * 2**52
_LOG2E_D = _D(1.44269504088896338700e00)
_LN2_HI_D = _D(6.93147180369123816490e-01)  # fdlibm split of ln 2
_LN2_LO_D = _D(1.90821492927058770002e-10)
_EXP_HI_D = _D(710.0)  # exp overflows above ~709.78
_EXP_LO_D = _D(-746.0)  # exp(-746) < 2**-1075: rounds to 0
_EXPM1_LO_D = _D(-40.0)  # expm1(x) rounds to -1 below ~-37.4
_EXPM1_BIG_D = _D(500.0)
_TINY_D = _D(2.2250738585072014e-308)  # smallest normal float64
_TWO54_D = _D(18014398509481984.0)
_M54_D = _D(-54.0)
_SQRTHF_D = _D(0.70710678118654752440)
# Taylor coefficients 1/k! for expm1 on |r| <= ln2/2 (k = 2..13)
_E2_D = _D(1 / 2)
_E3_D = _D(1 / 6)
_E4_D = _D(1 / 24)
_E5_D = _D(1 / 120)
_E6_D = _D(1 / 720)
_E7_D = _D(1 / 5040)
_E8_D = _D(1 / 40320)
_E9_D = _D(1 / 362880)
_E10_D = _D(1 / 3628800)
_E11_D = _D(1 / 39916800)
_E12_D = _D(1 / 479001600)
_E13_D = _D(1 / 6227020800)
# fdlibm log: log(1+f) = 2s + s*R(s^2), s = f / (2 + f)
_LG1_D = _D(6.666666666666735130e-01)
_LG2_D = _D(3.999999999940941908e-01)
_LG3_D = _D(2.857142874366239149e-01)
_LG4_D = _D(2.222219843214978396e-01)
_LG5_D = _D(1.818357216161805012e-01)
_LG6_D = _D(1.531383769920937332e-01)
_LG7_D = _D(1.479819860511658591e-01)


# ---------------------------------------------------------------------------
# float32
# ---------------------------------------------------------------------------


@_jit_fma
def exp_f32(x):
    xc = x if x < _EXP_HI_F else _EXP_HI_F  # nan goes to the clamp, fixed below
    # far below the range (a mask's -inf or finfo.min, half of a causal attention matrix):
    # compute at 0 and select 0, never a denormal product (100+ cycles each on x86)
    xc = xc if xc > _EXP_LO_F else _ZERO_F
    n = (xc * _LOG2E_F + _RND_F) - _RND_F
    r = (xc - n * _LN2_HI_F) - n * _LN2_LO_F
    q = _E7_F + r * _E8_F
    q = _E6_F + r * q
    q = _E5_F + r * q
    q = _E4_F + r * q
    q = _E3_F + r * q
    q = _E2_F + r * q
    p = _ONE_F + (r + (r * r) * q)
    # 2**n as two factors so that n in [-150, 128] never leaves the normal
    # range; the last product rounds once, also into denormals and inf.
    n1 = (n * _HALF_F + _RND_F) - _RND_F
    y = (p * _pow2(n1)) * _pow2(n - n1)
    y = y if x > _EXP_LO_F else _ZERO_F
    return y if x == x else x


@_jit
def expm1_f32(x):
    xc = x if x < _EXP_HI_F else _EXP_HI_F
    xc = xc if xc > _EXPM1_LO_F else _EXPM1_LO_F
    n = (xc * _LOG2E_F + _RND_F) - _RND_F
    r = (xc - n * _LN2_HI_F) - n * _LN2_LO_F
    q = _E7_F + r * _E8_F
    q = _E6_F + r * q
    q = _E5_F + r * q
    q = _E4_F + r * q
    q = _E3_F + r * q
    q = _E2_F + r * q
    p = r + (r * r) * q  # expm1(r), relative accuracy near 0
    n1 = (n * _HALF_F + _RND_F) - _RND_F
    s1 = _pow2(n1)
    s2 = _pow2(n - n1)
    s = s1 * s2
    y = s * p + (s - _ONE_F)  # exact s, s - 1: no cancellation for n != 0
    big = ((p + _ONE_F) * s1) * s2  # exp(x): the -1 no longer matters
    y = big if n > _EXPM1_BIG_F else y
    y = x if x == _ZERO_F else y  # keeps -0.0
    return y if x == x else x


@_jit
def log_f32(x):
    tiny = x < _TINY_F  # denormals (and 0, negatives): scale up first
    xs = x * _TWO23_F if tiny else x
    m = _frexp_mant(xs)
    e = _frexp_exp(xs)
    e = e + _M23_F if tiny else e
    small = m < _SQRTHF_F
    e = e - _ONE_F if small else e
    f = (m + m) - _ONE_F if small else m - _ONE_F
    z = f * f
    y = _L0_F * f + _L1_F
    y = y * f + _L2_F
    y = y * f + _L3_F
    y = y * f + _L4_F
    y = y * f + _L5_F
    y = y * f + _L6_F
    y = y * f + _L7_F
    y = y * f + _L8_F
    y = y * f * z
    y = y + e * _LN2_LO_F
    y = y - _HALF_F * z
    y = f + y
    y = y + e * _LN2_HI_F
    y = _NINF_F if x == _ZERO_F else y
    y = _NAN_F if x < _ZERO_F else y
    return y if x < _INF_F else x + x  # +inf -> inf, nan -> nan


@_jit
def log1p_f32(x):
    u = _ONE_F + x
    c = (x - (u - _ONE_F)) / u  # rounding error of 1 + x, relative to u
    c = c if c == c else _ZERO_F  # x = inf, x = -1
    y = log_f32(u) + c
    return x if x == _ZERO_F else y  # keeps -0.0


@_jit_fma
def tanh_f32(x):
    xc = x if x < _TANH_CLAMP_F else _TANH_CLAMP_F
    xc = xc if xc > -_TANH_CLAMP_F else -_TANH_CLAMP_F
    x2 = xc * xc
    p = x2 * _TA13_F + _TA11_F
    p = x2 * p + _TA9_F
    p = x2 * p + _TA7_F
    p = x2 * p + _TA5_F
    p = x2 * p + _TA3_F
    p = x2 * p + _TA1_F
    p = xc * p
    q = x2 * _TB6_F + _TB4_F
    q = x2 * q + _TB2_F
    q = x2 * q + _TB0_F
    y = p / q
    y = x if math.fabs(x) < _TANH_TINY_F else y  # tanh(x) = x to 1 ulp; keeps -0.0
    y = y if x < _TANH_SAT_F else _ONE_F
    y = y if x > -_TANH_SAT_F else -_ONE_F
    return y if x == x else x


@_jit
def logistic_f32(x):
    e = exp_f32(-math.fabs(x))  # in [0, 1]: no overflow, relative accuracy for x << 0
    return (_ONE_F if x >= _ZERO_F else e) / (_ONE_F + e)


@_jit
def softplus_f32(x):
    m = x if x > _ZERO_F else _ZERO_F
    return m + log1p_f32(exp_f32(-math.fabs(x)))


# ---------------------------------------------------------------------------
# float64
# ---------------------------------------------------------------------------


@_jit
def exp_f64(x):
    xc = x if x < _EXP_HI_D else _EXP_HI_D
    # far below the range (a mask's -inf or finfo.min, half of a causal attention matrix):
    # compute at 0 and select 0, never a denormal product (100+ cycles each on x86)
    xc = xc if xc > _EXP_LO_D else _ZERO_D
    n = (xc * _LOG2E_D + _RND_D) - _RND_D
    r = (xc - n * _LN2_HI_D) - n * _LN2_LO_D
    q = _E12_D + r * _E13_D
    q = _E11_D + r * q
    q = _E10_D + r * q
    q = _E9_D + r * q
    q = _E8_D + r * q
    q = _E7_D + r * q
    q = _E6_D + r * q
    q = _E5_D + r * q
    q = _E4_D + r * q
    q = _E3_D + r * q
    q = _E2_D + r * q
    p = _ONE_D + (r + (r * r) * q)
    n1 = (n * _HALF_D + _RND_D) - _RND_D
    y = (p * _pow2(n1)) * _pow2(n - n1)
    y = y if x > _EXP_LO_D else _ZERO_D
    return y if x == x else x


@_jit
def expm1_f64(x):
    xc = x if x < _EXP_HI_D else _EXP_HI_D
    xc = xc if xc > _EXPM1_LO_D else _EXPM1_LO_D
    n = (xc * _LOG2E_D + _RND_D) - _RND_D
    r = (xc - n * _LN2_HI_D) - n * _LN2_LO_D
    q = _E12_D + r * _E13_D
    q = _E11_D + r * q
    q = _E10_D + r * q
    q = _E9_D + r * q
    q = _E8_D + r * q
    q = _E7_D + r * q
    q = _E6_D + r * q
    q = _E5_D + r * q
    q = _E4_D + r * q
    q = _E3_D + r * q
    q = _E2_D + r * q
    p = r + (r * r) * q
    n1 = (n * _HALF_D + _RND_D) - _RND_D
    s1 = _pow2(n1)
    s2 = _pow2(n - n1)
    s = s1 * s2
    y = s * p + (s - _ONE_D)
    big = ((p + _ONE_D) * s1) * s2
    y = big if n > _EXPM1_BIG_D else y
    y = x if x == _ZERO_D else y
    return y if x == x else x


@_jit
def log_f64(x):
    tiny = x < _TINY_D
    xs = x * _TWO54_D if tiny else x
    m = _frexp_mant(xs)
    e = _frexp_exp(xs)
    e = e + _M54_D if tiny else e
    small = m < _SQRTHF_D
    e = e - _ONE_D if small else e
    f = (m + m) - _ONE_D if small else m - _ONE_D
    s = f / (_TWO_D + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2_D + w * (_LG4_D + w * _LG6_D))
    t2 = z * (_LG1_D + w * (_LG3_D + w * (_LG5_D + w * _LG7_D)))
    rr = t2 + t1
    hfsq = _HALF_D * f * f
    y = e * _LN2_HI_D - ((hfsq - (s * (hfsq + rr) + e * _LN2_LO_D)) - f)
    y = _NINF_D if x == _ZERO_D else y
    y = _NAN_D if x < _ZERO_D else y
    return y if x < _INF_D else x + x


@_jit
def log1p_f64(x):
    u = _ONE_D + x
    c = (x - (u - _ONE_D)) / u
    c = c if c == c else _ZERO_D
    y = log_f64(u) + c
    return x if x == _ZERO_D else y


@_jit
def tanh_f64(x):
    e = expm1_f64(-_TWO_D * math.fabs(x))  # in [-1, 0]
    return math.copysign(-e / (e + _TWO_D), x)


@_jit
def logistic_f64(x):
    e = exp_f64(-math.fabs(x))  # in [0, 1]: no overflow, relative accuracy for x << 0
    return (_ONE_D if x >= _ZERO_D else e) / (_ONE_D + e)


@_jit
def softplus_f64(x):
    m = x if x > _ZERO_D else _ZERO_D
    return m + log1p_f64(exp_f64(-math.fabs(x)))


# ---------------------------------------------------------------------------
# Registry and dtype-generic front ends
# ---------------------------------------------------------------------------

FUNCTION_NAMES = ("exp", "expm1", "log", "log1p", "tanh", "logistic", "softplus")

_SUFFIX = {"float32": "f32", "float64": "f64"}

#: ``(name, "float32" | "float64") -> njit function``, e.g. ``("tanh", "float32") -> tanh_f32``.
FASTMATH_KERNELS = {
    (name, dt): globals()[f"{name}_{sfx}"] for name in FUNCTION_NAMES for dt, sfx in _SUFFIX.items()
}


def lookup(name, dtype):
    """The dtype-specific njit function for ``name`` and a float32/float64 ``dtype``.

    ``lookup("tanh", np.float32) is tanh_f32``.  Raises KeyError for unknown names or
    other dtypes (cast integer / float16 inputs to a float type first).
    """
    key = (name, np.dtype(dtype).name)
    if key not in FASTMATH_KERNELS:
        raise KeyError(f"no fast {name!r} for dtype {np.dtype(dtype).name}")
    return FASTMATH_KERNELS[key]


def _np_logistic(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        r = 1 / (1 + e)
        return np.where(np.asarray(x) >= 0, r, e * r)[()]


def _np_softplus(x):
    return np.logaddexp(0, x)


_PY_FALLBACKS = {
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "logistic": _np_logistic,
    "softplus": _np_softplus,
}

_GENERIC_JIT_OPTIONS = {
    "forceinline": True,
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
    "error_model": "numpy",
    "fastmath": False,
}


def _make_generic(name):
    f32 = FASTMATH_KERNELS[(name, "float32")]
    f64 = FASTMATH_KERNELS[(name, "float64")]
    fallback = _PY_FALLBACKS[name]

    def generic(x):
        return fallback(x)

    generic.__name__ = generic.__qualname__ = f"fast_{name}"
    generic.__module__ = __name__
    generic.__doc__ = (
        f"Vectorizable {name}(x) for use inside @njit code: float32 -> {name}_f32, "
        f"float64 / integers / bool -> {name}_f64 (result float64).\n\n"
        "Called from the interpreter it evaluates the NumPy equivalent."
    )

    @overload(generic, jit_options=_GENERIC_JIT_OPTIONS)
    def _overload(x):
        if x == types.float32:
            return lambda x: f32(x)
        if isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return lambda x: f64(np.float64(x))
        return None

    return generic


fast_exp = _make_generic("exp")
fast_expm1 = _make_generic("expm1")
fast_log = _make_generic("log")
fast_log1p = _make_generic("log1p")
fast_tanh = _make_generic("tanh")
fast_logistic = _make_generic("logistic")
fast_softplus = _make_generic("softplus")

#: ``name -> dtype-generic function`` (``"tanh" -> fast_tanh``), callable from @njit code.
FASTMATH_FUNCS = {name: globals()[f"fast_{name}"] for name in FUNCTION_NAMES}

__all__ = [
    "FASTMATH_FUNCS",
    "FASTMATH_KERNELS",
    "FUNCTION_NAMES",
    "exp_f32",
    "exp_f64",
    "expm1_f32",
    "expm1_f64",
    "fast_exp",
    "fast_expm1",
    "fast_log",
    "fast_log1p",
    "fast_logistic",
    "fast_softplus",
    "fast_tanh",
    "log1p_f32",
    "log1p_f64",
    "log_f32",
    "log_f64",
    "logistic_f32",
    "logistic_f64",
    "lookup",
    "softplus_f32",
    "softplus_f64",
    "tanh_f32",
    "tanh_f64",
]
