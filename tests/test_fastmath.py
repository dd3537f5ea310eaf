"""Accuracy and special-value tests for kernels.fastmath.

Every function is called through a small @njit loop, the way generated kernels call
it, and compared with NumPy: float32 results against the float64 NumPy value,
float64 results against the long-double NumPy value where long double is wider
than double (x86-64 Linux), else against float64 NumPy with looser bounds.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

# Only the installed name: Numba's cache records the module name, so importing the same file
# as ``kernels.fastmath`` too would make cached entries unloadable under the other name.
import jitgraph.kernels.fastmath as fm  # pyproject maps kernels/ here

import numba

F32, F64 = np.float32, np.float64
LD = np.longdouble
WIDE_LD = np.finfo(LD).nmant > np.finfo(F64).nmant

# Max error in units in the last place (of the correctly rounded result), per
# function and dtype: measured maximum (module docstring) plus a margin.
MAX_ULP = {
    "float32": {
        "exp": 1.5,
        "expm1": 2.0,
        "log": 1.5,
        "log1p": 2.0,
        "tanh": 5.0,  # Eigen/XLA float32 rational function (with FMA): 4.6 ulp near |x| = 6
        "logistic": 3.5,
        "softplus": 2.5,
    },
    "float64": {
        "exp": 1.5,
        "expm1": 2.5,
        "log": 1.5,
        "log1p": 2.0,
        "tanh": 3.5,
        "logistic": 3.5,
        "softplus": 2.5,
    },
}
# Absolute error bounds for the bounded functions (float32); float64 uses relative bounds.
MAX_ABS_F32 = {"tanh": 3e-7, "logistic": 1e-7}
MAX_REL_F64 = 1e-14

_LOOPS: dict = {}


def _loop(f):
    """An @njit elementwise loop over ``f`` (one per function, compiled lazily)."""
    if f not in _LOOPS:

        @numba.njit
        def loop(a):
            out = np.empty_like(a)
            for i in range(a.size):
                out[i] = f(a[i])
            return out

        _LOOPS[f] = loop
    return _LOOPS[f]


def run(name, x):
    x = np.ascontiguousarray(x)
    return _loop(fm.lookup(name, x.dtype))(x)


def reference(name, x):
    """NumPy reference in a wider type: float64 for float32 inputs, long double for float64."""
    w = x.astype(F64 if x.dtype == F32 else LD)
    with np.errstate(all="ignore"):
        if name == "logistic":
            e = np.exp(-np.abs(w))
            return np.where(w >= 0, 1 / (1 + e), e / (1 + e))
        if name == "softplus":
            return np.maximum(w, 0) + np.log1p(np.exp(-np.abs(w)))
        return getattr(np, name)(w)


def sweep(dtype, name, n_random=150_000, n_log=60_000, n_dense=100_000, seed=0):
    """Finite inputs over the whole float range plus a dense grid where the function varies."""
    rng = np.random.default_rng(seed)
    fi = np.finfo(dtype)
    ity = np.uint32 if dtype == F32 else np.uint64
    bits = rng.integers(0, np.iinfo(ity).max, n_random, dtype=ity, endpoint=True).view(dtype)
    lo = math.log10(float(fi.smallest_subnormal))
    with np.errstate(over="ignore"):
        mags = np.logspace(lo, math.log10(float(fi.max)), n_log // 2, dtype=F64)
    mags = mags[np.isfinite(mags.astype(dtype))]
    hi = {
        "exp": 110.0,
        "expm1": 110.0,
        "tanh": 12.0,
        "logistic": 110.0,
        "softplus": 110.0,
        "log": 4.0,
        "log1p": 4.0,
    }[name]
    if dtype == F64 and name in ("exp", "expm1", "logistic", "softplus"):
        hi = 750.0
    dense = np.concatenate(
        [
            rng.uniform(-hi, hi, n_dense // 2),
            rng.uniform(-1.0, 1.0, n_dense // 4),
            rng.uniform(-1e-3, 1e-3, n_dense // 4),
        ]
    )
    if name in ("log", "log1p"):
        dense = np.concatenate([np.abs(dense), rng.uniform(-1.0, -0.5, n_dense // 8)])
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.concatenate([bits, mags.astype(dtype), -mags.astype(dtype), dense.astype(dtype)])
    return x[np.isfinite(x)]


def errors(name, x):
    """(ulp errors, abs errors, relative errors, result, reference) on finite references."""
    dtype = x.dtype.type
    y = run(name, x)
    assert y.dtype == x.dtype
    r = reference(name, x)
    with np.errstate(over="ignore"):
        rr = r.astype(dtype)
    fin = np.isfinite(rr)
    # a finite correctly rounded result must come back finite, an infinite one infinite
    np.testing.assert_array_equal(np.isfinite(y), fin, err_msg=f"{name}: finiteness differs")
    np.testing.assert_array_equal(y[~fin], rr[~fin])
    y, r, rr = y[fin], r[fin], rr[fin]
    with np.errstate(over="ignore"):  # spacing(max) is inf
        spacing = np.maximum(np.spacing(np.abs(rr)), np.finfo(dtype).smallest_subnormal)
    err = np.abs(y.astype(r.dtype) - r)
    ulp = (err / spacing.astype(r.dtype)).astype(F64)
    rel = (err / np.maximum(np.abs(r), np.finfo(dtype).smallest_normal)).astype(F64)
    return ulp, err.astype(F64), rel, x[fin]


DTYPES = [pytest.param(F32, id="float32"), pytest.param(F64, id="float64")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", fm.FUNCTION_NAMES)
def test_accuracy_sweep(name, dtype):
    x = sweep(dtype, name)
    ulp, abserr, rel, xf = errors(name, x)
    dname = np.dtype(dtype).name
    bound = MAX_ULP[dname][name]
    if dtype == F64 and not WIDE_LD:
        bound += 1.0  # the float64 NumPy reference itself can be off by ~1 ulp
    i = int(np.argmax(ulp))
    assert ulp[i] <= bound, f"{name}[{dname}]: {ulp[i]:.2f} ulp at x={xf[i]!r}"
    if dtype == F32 and name in MAX_ABS_F32:
        assert abserr.max() <= MAX_ABS_F32[name]
    if dtype == F64:
        j = int(np.argmax(rel))
        assert rel[j] <= MAX_REL_F64, f"{name}: rel err {rel[j]:.3g} at x={xf[j]!r}"


def _special_inputs(dtype):
    fi = np.finfo(dtype)
    vals = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        -np.nan,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        float(fi.max),
        -float(fi.max),
        float(fi.smallest_normal),
        -float(fi.smallest_normal),
        float(fi.smallest_subnormal),
        -float(fi.smallest_subnormal),
        float(fi.smallest_normal) / 3,
        -float(fi.smallest_normal) / 3,
        float(fi.eps),
        -float(fi.eps),
        1e-30,
        -1e-30,
        1e30,
        -1e30,
        1000.0,
        -1000.0,
        1e-7,
        -1e-7,
    ]
    if dtype == F32:
        vals += [
            88.72283,
            88.72284,
            88.7229,
            89.0,
            -87.33655,
            -87.3366,
            -103.2789,
            -103.97208,
            -103.9721,
            -104.0,
            -1.0 + 2.0**-24,
            16.635532,
            9.0,
            -9.0,
            9.1,
            7.90531,
            0.0004,
            -0.0004,
            0.00039,
            17.4,
            -17.4,
            16777216.0,
        ]
    else:
        vals += [
            709.782712893384,
            709.7827128933841,
            709.79,
            710.0,
            -708.3964185322641,
            -708.4,
            -744.4400719213812,
            -745.1332191019411,
            -745.1332191019412,
            -746.0,
            -1.0 + 2.0**-53,
            36.7368005696771,
            19.0,
            -19.0,
            22.0,
            -22.0,
            37.5,
            -37.5,
            9007199254740992.0,
            1e300,
            -1e300,
        ]
    with np.errstate(over="ignore"):
        return np.array(vals, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", fm.FUNCTION_NAMES)
def test_special_values(name, dtype):
    x = _special_inputs(dtype)
    y = run(name, x)
    with np.errstate(all="ignore"):
        r = reference(name, x).astype(dtype)
    for xi, yi, ri in zip(x, y, r):
        msg = f"{name}[{np.dtype(dtype).name}]({xi!r}) = {yi!r}, expected {ri!r}"
        if np.isnan(ri):
            assert np.isnan(yi), msg
        elif np.isinf(ri) or ri == 0:
            # exact, including the sign of zero
            assert yi == ri and np.signbit(yi) == np.signbit(ri), msg
        else:
            with np.errstate(over="ignore"):
                spacing = max(np.spacing(abs(ri)), np.finfo(dtype).smallest_subnormal)
            assert abs(float(yi) - float(ri)) <= 4 * float(spacing), msg


EXACT_CASES = [
    # (name, x, expected) checked for both dtypes, bitwise incl. sign of zero
    ("exp", 0.0, 1.0),
    ("exp", -0.0, 1.0),
    ("exp", np.inf, np.inf),
    ("exp", -np.inf, 0.0),
    ("exp", 1000.0, np.inf),
    ("exp", -1000.0, 0.0),
    ("exp", np.nan, np.nan),
    ("expm1", 0.0, 0.0),
    ("expm1", -0.0, -0.0),
    ("expm1", np.inf, np.inf),
    ("expm1", -np.inf, -1.0),
    ("expm1", 1000.0, np.inf),
    ("expm1", -1000.0, -1.0),
    ("expm1", np.nan, np.nan),
    ("log", 0.0, -np.inf),
    ("log", -0.0, -np.inf),
    ("log", 1.0, 0.0),
    ("log", -1.0, np.nan),
    ("log", -np.inf, np.nan),
    ("log", np.inf, np.inf),
    ("log", np.nan, np.nan),
    ("log1p", 0.0, 0.0),
    ("log1p", -0.0, -0.0),
    ("log1p", -1.0, -np.inf),
    ("log1p", -2.0, np.nan),
    ("log1p", np.inf, np.inf),
    ("log1p", -np.inf, np.nan),
    ("log1p", np.nan, np.nan),
    ("tanh", 0.0, 0.0),
    ("tanh", -0.0, -0.0),
    ("tanh", np.inf, 1.0),
    ("tanh", -np.inf, -1.0),
    ("tanh", 1000.0, 1.0),
    ("tanh", -1000.0, -1.0),
    ("tanh", np.nan, np.nan),
    ("logistic", 0.0, 0.5),
    ("logistic", -0.0, 0.5),
    ("logistic", np.inf, 1.0),
    ("logistic", -np.inf, 0.0),
    ("logistic", 1000.0, 1.0),
    ("logistic", -1e30, 0.0),
    ("logistic", np.nan, np.nan),
    ("softplus", np.inf, np.inf),
    ("softplus", -np.inf, 0.0),
    ("softplus", 1e30, 1e30),
    ("softplus", -1e30, 0.0),
    ("softplus", np.nan, np.nan),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_special_cases(dtype):
    for name, xv, ev in EXACT_CASES:
        y = run(name, np.array([xv], dtype=dtype))[0]
        e = dtype(ev)
        msg = f"{name}[{np.dtype(dtype).name}]({xv!r}) = {y!r}, expected {e!r}"
        if np.isnan(e):
            assert np.isnan(y), msg
        else:
            assert y == e and np.signbit(y) == np.signbit(e), msg


@pytest.mark.parametrize("dtype", DTYPES)
def test_denormal_inputs_and_outputs(dtype):
    fi = np.finfo(dtype)
    tiny = np.array(
        [
            fi.smallest_subnormal,
            fi.smallest_subnormal * 7,
            fi.smallest_normal / 2,
            fi.smallest_normal * (1 - fi.eps),
        ],
        dtype=dtype,
    )
    x = np.concatenate([tiny, -tiny])
    # functions that are x + O(x^2) return denormal inputs unchanged
    for name in ("expm1", "log1p", "tanh"):
        np.testing.assert_array_equal(run(name, x), x, err_msg=name)
    # log of denormals: finite, within 1 ulp of NumPy
    y, r = run("log", tiny), reference("log", tiny).astype(dtype)
    assert np.all(np.abs(y - r) <= np.spacing(np.abs(r)))
    # exp, logistic and softplus results that are denormal: within 1 denormal step
    lo = -100.0 if dtype == F32 else -740.0
    x = np.linspace(lo, lo - 4.0, 4001).astype(dtype)
    for name in ("exp", "logistic", "softplus"):
        y, r = run(name, x), reference(name, x)
        assert np.any((y > 0) & (y < fi.smallest_normal)), name
        assert np.max(np.abs(y.astype(r.dtype) - r)) <= fi.smallest_subnormal, name


def test_float32_stays_float32():
    for name in fm.FUNCTION_NAMES:
        f32, f64 = fm.lookup(name, F32), fm.lookup(name, F64)
        run(name, np.ones(2, F32))
        run(name, np.ones(2, F64))
        assert f32.nopython_signatures[0].return_type == numba.float32, name
        assert f64.nopython_signatures[0].return_type == numba.float64, name


def test_generic_front_ends():
    @numba.njit
    def call(a, b, i):
        return (
            fm.fast_tanh(a),
            fm.fast_tanh(b),
            fm.fast_exp(i),
            fm.fast_softplus(a),
            fm.fast_logistic(b),
            fm.fast_log(a),
            fm.fast_log1p(b),
            fm.fast_expm1(a),
        )

    res = call(F32(0.5), F64(0.5), 2)
    ret = call.nopython_signatures[0].return_type
    assert list(ret) == [
        numba.float32,
        numba.float64,
        numba.float64,
        numba.float32,
        numba.float64,
        numba.float32,
        numba.float64,
        numba.float32,
    ]
    assert res[0] == run("tanh", np.array([0.5], F32))[0]
    np.testing.assert_allclose(res[1], np.tanh(0.5), rtol=1e-15)
    np.testing.assert_allclose(res[2], np.exp(2.0), rtol=1e-15)
    for name, f in fm.FASTMATH_FUNCS.items():
        assert f.__name__ == f"fast_{name}"
        # from the interpreter the front ends evaluate the NumPy equivalent, dtype preserved
        v = f(np.array([0.25, 1.5], F32))
        assert v.dtype == F32
        np.testing.assert_allclose(v, run(name, np.array([0.25, 1.5], F32)), rtol=1e-6)
    assert fm.lookup("tanh", "float32") is fm.tanh_f32
    with pytest.raises(KeyError):
        fm.lookup("tanh", np.int32)
    with pytest.raises(KeyError):
        fm.lookup("sin", np.float64)


def _vector_width(ir_text, elt):
    return [int(w) for w in re.findall(r"<(\d+) x " + elt + ">", ir_text)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_loop_vectorizes(dtype):
    """A loop calling the functions compiles to SIMD code without libm calls, also when the
    caller uses Numba's default error model and fastmath flags."""
    sfx = "f32" if dtype == F32 else "f64"
    ex, th, lg, sp, l1 = (getattr(fm, f"{n}_{sfx}") for n in ("exp", "tanh", "logistic", "softplus", "log1p"))
    for flags in ({}, {"fastmath": True}):

        @numba.njit(**flags)
        def kernel(a, out):
            for i in range(a.size):
                out[i] = th(a[i]) + lg(a[i]) * sp(a[i]) - ex(a[i]) + l1(a[i])

        x = np.linspace(-0.9, 3, 64).astype(dtype)
        out = np.empty_like(x)
        kernel(x, out)
        text = kernel.inspect_llvm(kernel.signatures[0])
        widths = _vector_width(text, "float" if dtype == F32 else "double")
        assert widths and max(widths) >= 2, "loop was not vectorized"
        assert not re.search(r"call [^\n]*@(llvm\.)?(exp|log|tanh|log1p|expm1)(f|\.f32|\.f64)?\(", text)
        want = (
            np.tanh(x) + reference("logistic", x) * reference("softplus", x) - np.exp(x) + np.log1p(x)
        ).astype(dtype)
        np.testing.assert_allclose(out, want, rtol=2e-6 if dtype == F32 else 1e-14, atol=1e-6)


def test_fastmath_caller_keeps_special_values():
    """Inlined into a fastmath=True kernel, the helpers keep their own IEEE semantics."""

    @numba.njit(fastmath=True)
    def kernel(a, out):
        for i in range(a.size):
            out[i] = fm.exp_f32(a[i])
            out[a.size + i] = fm.log_f32(a[i])
            out[2 * a.size + i] = fm.tanh_f32(a[i])

    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1000.0], F32)
    out = np.empty(3 * x.size, F32)
    kernel(x, out)
    ex, lg, th = out[: x.size], out[x.size : 2 * x.size], out[2 * x.size :]
    with np.errstate(all="ignore"):
        for got, want in ((ex, np.exp(x)), (lg, np.log(x)), (th, np.tanh(x))):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            fin = ~np.isnan(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=1e-6)
