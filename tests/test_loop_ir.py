"""Loop kernels compiled straight to LLVM IR (``compiler/loop_ir.py``) compute what Numba
computes from the same source: the typing rules against Numba's own typing, hand-written
kernels over every construct the translator takes (bit for bit against Numba, NaN, infinities,
negative and zero divisors included), random expression kernels (hypothesis), and programs
that take the path, from the cache, from a damaged cache and with it turned off."""
from __future__ import annotations

import itertools
import operator
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import loop_ir, loop_objects, threaded

pytestmark = pytest.mark.skipif(not loop_objects.enabled(),
                                reason="launchers need Linux and a checked Numba")

HEADER = """import math
import numpy as np
from numba import njit
from jitgraph.kernels.scalar import (maximum, minimum, maximum_step, minimum_step, sign, floor,
    erf, logistic, power, clamp_index)
from jitgraph.kernels.fastmath import (exp_f32, exp_f64, log_f32, log_f64, log1p_f32, log1p_f64,
    expm1_f32, expm1_f64, tanh_f32, tanh_f64, logistic_f32, logistic_f64, softplus_f32,
    softplus_f64)
"""
DECORATOR = ("@njit(cache=False, parallel=False, fastmath={fm}, error_model='numpy', "
             "boundscheck=False, nogil=True, no_cfunc_wrapper=True)")
_count = itertools.count()


def both(body: str, arrays: list, fastmath: str = "False", rows: int | None = None):
    """Run kernel ``body`` (its statements, over parameters a0, a1, ...) compiled by Numba
    and by loop_ir on copies of ``arrays``; returns both results."""
    name = f"loop_t{next(_count)}"
    params = ", ".join(f"a{i}" for i in range(len(arrays)))
    head = f"def {name}(lo, hi, {params}):" if rows else f"def {name}({params}):"
    src = HEADER + DECORATOR.format(fm=fastmath) + "\n" + head + "\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    ns: dict = {}
    exec(compile(src, name, "exec"), ns)
    ours = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    numba_out = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    ns[name](*([0, rows] if rows else []), *numba_out)
    # (an int: a size passed at run time)
    dtypes = tuple(threaded.SIZE if isinstance(a, int) else a.dtype.name for a in arrays)
    launch = threaded.Launch(name, f"jgk_{name}", dtypes, rows or 1, direct=True,
                             serial=rows is None)
    obj = loop_ir.compile_object(loop_ir.translate(src, name, dtypes, launch.symbol).text)
    fn = threaded.build([launch], {}, (obj,))[launch.callable_name]
    fn(*ours)
    return numba_out, ours


def same_bits(x: np.ndarray, y: np.ndarray) -> None:
    assert x.dtype == y.dtype
    if x.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
        ok = ~np.isnan(x)
        np.testing.assert_array_equal(x[ok].view(np.uint8), y[ok].view(np.uint8))
    else:
        np.testing.assert_array_equal(x, y)


def check(body: str, arrays: list, ulps: int = 0, **kw) -> list:
    """Numba's results and ours: the same bits (``ulps``: within that many units in the last
    place, where LLVM may fuse a helper's multiply-adds differently in a vector loop)."""
    numba_out, ours = both(body, arrays, **kw)
    for x, y in zip(numba_out, ours):
        if not isinstance(x, np.ndarray):
            continue
        if ulps and x.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
            ok = ~np.isnan(x)
            np.testing.assert_array_max_ulp(x[ok], y[ok], maxulp=ulps)
        else:
            same_bits(x, y)
    return ours


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.7, 1e-30, -1e30, 88.0, -104.0, 700.0,
                    np.inf, -np.inf, np.nan, 1e-40, 5e-324, 2.0 ** 60, 12.25, -7.75])


# ----------------------------------------------------------------------------- typing

NUMBER_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float32", "float64"]


def test_result_types_are_numbas():
    """The translator's typing gives the types Numba's typing gives, for every pair of
    dtypes: ``a + b`` (and - *), ``a / b``, ``a & b``, ``a << b``, the type ``a < b``
    compares in, and the unified type of a variable or conditional taking both."""
    from numba import types
    from numba.core.registry import cpu_target
    ctx = cpu_target.typing_context
    ctx.refresh()
    nt = {d: getattr(types, "boolean" if d == "bool" else d) for d in NUMBER_DTYPES}

    def numba(op, a, b):
        return ctx.resolve_function_type(op, (nt[a], nt[b]), {})
    for a, b in itertools.product(NUMBER_DTYPES, repeat=2):
        assert str(numba(operator.add, a, b).return_type) == loop_ir.arith_result(a, b), (a, b)
        want = loop_ir.arith_result(a, b)
        assert str(numba(operator.truediv, a, b).return_type) == (
            want if want.startswith("float") else "float64"), (a, b)
        assert str(numba(operator.lt, a, b).args[0]) == loop_ir.compare_type(a, b), (a, b)
        assert str(ctx.unify_pairs(nt[a], nt[b])) == loop_ir.unify(a, b), (a, b)
        if not (a.startswith("float") or b.startswith("float")):
            band = numba(operator.and_, a, b).return_type
            assert str(band) == ("bool" if a == b == "bool" else loop_ir.int_result(a, b))
            shift = numba(operator.lshift, a, b).return_type
            assert str(shift) == ("uint64" if a.startswith("uint") else "int64"), (a, b)


# ----------------------------------------------------------------------------- constructs

def test_casts_between_dtypes_match_numba():
    """Every cast the generator writes (``np.<dtype>(x)``, ``bool(x)``, a store into an array
    of another dtype) on values in range, bit for bit."""
    rng = np.random.default_rng(0)
    src_vals = {"float64": np.concatenate([SPECIAL[np.isfinite(SPECIAL) & (abs(SPECIAL) < 100)],
                                           rng.uniform(-100, 100, 12)]),
                "int64": rng.integers(-100, 100, 32), "bool": rng.random(32) < 0.5,
                "uint8": rng.integers(0, 255, 32), "int32": rng.integers(-100, 100, 32)}
    for sd, vals in src_vals.items():
        x = vals.astype(sd)
        for td in ["float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "bool"]:
            if sd.startswith("float") and td.startswith("uint"):
                x = np.abs(x)
            cast = "bool" if td == "bool" else f"np.{td}"
            out = np.zeros(x.size, td)
            check(f"""
                for i in range({x.size}):
                    a1[i] = {cast}(a0[i])
                    a2[i] = a0[i]
            """, [x, out, np.zeros(x.size, td)])


def test_integer_division_modulo_and_shifts():
    """Python's floor division and modulo (negative operands), a zero divisor (0, NumPy's
    error model), unsigned operands, shifts and masks as the random-bits kernels write them."""
    rng = np.random.default_rng(1)
    a = rng.integers(-50, 50, 64)
    b = rng.integers(-7, 7, 64)
    u = rng.integers(0, 2 ** 32 - 1, 64).astype(np.uint32)
    check("""
        for i in range(64):
            a2[i] = a0[i] // a1[i]
            a3[i] = a0[i] % a1[i]
            a4[i] = a0[i] // 3 + a0[i] % 5 + (-a0[i]) // 4
            a5[i] = ((((a6[i] << 13) | (a6[i] >> 19)) & 4294967295) ^ ((a6[i] + a6[i]) & 4294967295))
            a7[i] = a6[i] // (a6[i] % 7) if a6[i] % 7 != 0 else a6[i] % 3
    """, [a, b, np.zeros(64, np.int64), np.zeros(64, np.int64), np.zeros(64, np.int64),
          np.zeros(64, np.uint32), u, np.zeros(64, np.uint32)])


def test_float_arithmetic_comparisons_and_selects():
    x = np.resize(SPECIAL, 40).astype(np.float32)
    y = np.roll(x, 3)
    check("""
        for i in range(40):
            s0 = a0[i] * a1[i] + a0[i] / np.float32(3.0) - a1[i]
            s1 = (s0 if a0[i] < a1[i] else -a1[i])
            s2 = bool(a0[i] >= np.float32(0.0)) and not (a1[i] != a1[i])
            s3 = a0[i] == a1[i] or a0[i] > np.float32(1.0)
            a2[i] = s1 + (np.float32(1.0) if s2 else np.float32(2.0)) + s3
            a3[i] = a0[i] * 2 + 1
    """, [x, y, np.zeros(40, np.float32), np.zeros(40, np.float64)])


def test_reassociated_reductions_and_accumulator_arrays():
    """A kernel's ``fastmath`` flags on its arithmetic; an accumulator array passed by the
    driver under another name (``acc = a2``), updated with ``+=`` in place."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(8 * 96).astype(np.float32)
    numba_out, ours = both("""
        acc0 = a1
        for z in range(96):
            acc0[z] = np.float32(0.0)
        for r in range(8):
            for o in range(96):
                acc0[o] += a0[r * 96 + o] * a0[r * 96 + o]
        for o in range(8):
            t = np.float32(0.0)
            for r in range(96):
                t += a0[o * 96 + r]
            a2[o] = t
    """, [x, np.zeros(96, np.float32), np.zeros(8, np.float32)],
        fastmath="{'reassoc', 'contract'}")
    for got, want in zip(ours, numba_out):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[1], (x.reshape(8, 96) ** 2).sum(0), rtol=1e-5)


def test_helpers_translated_from_their_source():
    """kernels/scalar.py and kernels/fastmath.py helpers (their own flags, their bit-level
    intrinsics) and math functions on special values, float32 and float64 (tanh_f32 evaluates
    with fused multiply-adds, which LLVM may form at other places in a loop of many
    statements: 1 ulp apart there)."""
    for dt, sfx in (("float32", "f32"), ("float64", "f64")):
        x = np.resize(SPECIAL, 48).astype(dt)
        y = np.roll(x, 5)
        outs = [np.zeros(48, dt) for _ in range(12)]
        c = f"np.{dt}"
        check(f"""
            for i in range(48):
                a2[i] = exp_{sfx}(a0[i])
                a3[i] = log_{sfx}(a0[i])
                a4[i] = tanh_{sfx}(a0[i])
                a5[i] = log1p_{sfx}(a0[i]) + expm1_{sfx}(a1[i])
                a6[i] = logistic_{sfx}(a0[i]) + softplus_{sfx}(a1[i])
                a7[i] = maximum(a0[i], a1[i]) - minimum(a0[i], a1[i])
                a8[i] = maximum_step(a0[i], a1[i]) + minimum_step(a0[i], a1[i])
                a9[i] = sign(a0[i]) + floor(a1[i])
                a10[i] = power(a0[i], {c}(2.0)) + logistic(a1[i])
                a11[i] = math.sqrt(a0[i]) + abs(a1[i])
                a12[i] = math.copysign(a0[i], a1[i]) + math.fabs(a0[i])
                a13[i] = math.sin(a0[i]) + math.cos(a1[i]) + math.exp(a0[i]) + math.log(a1[i])
                a14[i] = erf(a0[i]) + math.tan(a1[i]) + math.atan2(a0[i], a1[i])
                a15[i] = math.lgamma(a0[i]) + math.expm1(a1[i]) + math.hypot(a0[i], a1[i])
        """, [x, y, *outs, np.zeros(48, dt), np.zeros(48, dt)], ulps=2)


def test_gathers_wrap_negative_indices_once_and_clamp():
    idx = np.array([0, 3, -1, -4, 9, -20, 2, 5], np.int64)
    table = np.arange(10, dtype=np.float64) * 1.5
    check("""
        for i in range(8):
            a2[i] = a1[clamp_index(a0[i], 10)]
            a3[i] = a1[a0[i] % 10 - 10]
            a4[i] = a1[min(max(a0[i], 0), 9)] if a0[i] >= 0 and a1[a0[i] % 10] > 3.0 else -1.0
    """, [idx, table, np.zeros(8), np.zeros(8), np.zeros(8)])


def test_if_statements_and_bool_arrays():
    m = np.array([True, False, True, True, False, False, True, False])
    x = np.arange(8, dtype=np.int32) - 3
    check("""
        for i in range(8):
            if a0[i]:
                a2[i] = a1[i] * 2
            else:
                a2[i] = -a1[i]
            a3[i] = a0[i] ^ (a1[i] > 0)
            a4[i] = a0[i] & True | False
    """, [m, x, np.zeros(8, np.int32), np.zeros(8, bool), np.zeros(8, bool)])


def test_rows_kernel_runs_on_threads_like_numba():
    """A kernel over ``range(lo, hi)`` (a threaded kernel's form) through its launcher."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(64 * 33).astype(np.float32)
    check("""
        launch_rows = 64  # rows split over threads
        for o0_u in range(lo, hi):
            o0 = np.int64(o0_u) & 0x7FFFFFFFFFFFFFFF
            for o1 in range(33):
                a1[o0 * 33 + o1] = exp_f32(a0[o0 * 33 + o1]) * np.float32(0.5)
    """, [x, np.zeros(64 * 33, np.float32)], rows=64)


def test_sizes_passed_at_run_time():
    """Int64 parameters (the sizes of a program with ``dynamic_dims``, which the driver passes
    as ints) in loop bounds, index arithmetic and float arithmetic, as Numba computes them;
    the launcher takes an exact int for them and nothing else."""
    x = np.linspace(-2, 2, 35).astype(np.float32)
    body = """
        for o0 in range(a3):
            for o1 in range(5):
                a1[o0 * 5 + o1] = a0[o0 * 5 + o1] * np.float32(-(1.0 / a3))
        acc = np.float32(0.0)
        for r0 in range(a3 * 5):
            acc += a0[r0]
        a2[0] = acc / np.float32((1.0 * a3))
    """
    out = check(body, [x, np.zeros(35, np.float32), np.zeros(1, np.float32), 7],
                fastmath="{'reassoc', 'contract'}")
    np.testing.assert_allclose(out[1], x * np.float32(-1 / 7), rtol=1e-6)
    check(body, [x, np.zeros(35, np.float32), np.zeros(1, np.float32), 3])    # 3 of 7 rows
    # a size after a dozen arrays (the launcher's names for each argument must not meet)
    many = [np.full(6, float(i), np.float32) for i in range(12)]
    out = check("""
        for i in range(a12):
            a0[i] = a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i] + a8[i] + a9[i] \\
                + a10[i] + a11[i] + np.float32(a12)
    """, many + [4])
    np.testing.assert_array_equal(out[0], [70.0] * 4 + [0.0] * 2)
    src = HEADER + DECORATOR.format(fm="False") + "\ndef loop_sz(a0, a1):\n" \
        "    for i in range(a1):\n        a0[i] = np.float64(i) * 2.0\n"
    launch = threaded.Launch("loop_sz", "jgk_loop_sz", ("float64", threaded.SIZE), 1,
                             direct=True, serial=True)
    obj = loop_ir.compile_object(loop_ir.translate(src, "loop_sz", launch.dtypes,
                                                   launch.symbol).text)
    fn = threaded.build([launch], {}, (obj,))["loop_sz"]
    y = np.zeros(4)
    fn(y, 3)
    np.testing.assert_array_equal(y, [0.0, 2.0, 4.0, 0.0])
    for bad in (3.0, np.int64(3), "3"):
        with pytest.raises(TypeError, match="ints for sizes"):
            fn(y, bad)


def test_programs_with_runtime_sizes_take_the_path():
    """A program whose batch size is a runtime argument (``dynamic_dims``) compiles its loop
    kernels by LLVM too, and one program serves every batch size."""
    rng = np.random.default_rng(9)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    f = jitgraph.jit(_model, dynamic_dims={"x": 0})
    for n in (30, 1, 17):
        x = rng.standard_normal((n, 24)).astype(np.float32)
        got = np.asarray(f(x, w))
        h = np.tanh(x.astype(np.float64) @ w)
        want = (np.exp(-h * h) + np.log1p(h * h)).sum(1) / (1 + h.max(1))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    program = f.lower(x, w).program                # (at 17 rows)
    assert program.symbols
    launches = _direct_launches(program)
    assert launches and any(threaded.SIZE in launch.dtypes for launch in launches)
    assert program.numba_compiles() == 0


def test_threaded_kernels_with_a_runtime_row_count():
    """A program with runtime sizes splits a loop over rows whose count is a size: the
    launcher reads the count from the size argument (``launch_rows = a<k>``), at every size
    (more rows than threads, fewer, one), and Numba compiles nothing."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((64, 512)).astype(np.float32)
    f = jitgraph.jit(_model, dynamic_dims={"x": 0})
    for n in (300, 170, 3, 1):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        got = np.asarray(f(x, w))
        h = np.tanh(x.astype(np.float64) @ w)
        want = (np.exp(-h * h) + np.log1p(h * h)).sum(1) / (1 + h.max(1))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    program = f.lower(rng.standard_normal((170, 64)).astype(np.float32), w).program
    assert program.symbols and program.numba_compiles() == 0
    assert any(launch.rows_arg >= 0 and not launch.serial for launch in program.launches)
    assert threaded.linear_rows("(8 * a4 + 3)") == (3, 8, 4)
    assert threaded.linear_rows("a2") == (0, 1, 2) and threaded.linear_rows("(a1 * a2)") is None
    kernel = threaded.serial_call(lambda lo, hi, a0, a1: (lo, hi, a0, a1), "(a1 * a0)")
    assert kernel(3, 4) == (0, 12, 3, 4)


@pytest.mark.parametrize("body, why", [
    ("for i in prange(4):\n    a0[i] = 1.0", "prange"),
    ("for i in range(4):\n    a0[i] = a0[i] // 2.0", "float"),
    ("for i in range(4):\n    a0[i] = blas_gemm(a0)", "array a0"),
    ("x = 1\nwhile x < 3:\n    x += 1", "While"),
    ("for i in range(4):\n    a0[i] = np.exp(a0[i])", "call"),
])
def test_constructs_outside_the_language_go_to_numba(body, why):
    src = HEADER + DECORATOR.format(fm="False") + "\ndef loop_x(a0):\n" + \
        textwrap.indent(body, "    ")
    with pytest.raises(loop_ir.Unsupported, match=why):
        loop_ir.translate(src, "loop_x", ("float64",), "jgk_x")


# ----------------------------------------------------------------------------- random kernels

_LEAF_DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]


@st.composite
def expressions(draw, depth=0):
    """An expression over a0..a3 (dtypes ``_LEAF_DTYPES[:4]``) at index i, as generated
    kernels write them."""
    if depth >= 3 or draw(st.booleans()) and depth > 0:
        kind = draw(st.sampled_from(["arr", "arr", "int", "float", "f32"]))
        if kind == "arr":
            return f"a{draw(st.integers(0, 4))}[i]"
        if kind == "int":
            return str(draw(st.integers(-5, 9)))
        if kind == "float":
            return repr(draw(st.sampled_from([0.5, -1.25, 3.0, 1e-3])))
        return f"np.float32({draw(st.sampled_from([0.5, -2.0, 7.0]))!r})"
    op = draw(st.sampled_from(["+", "-", "*", "/", "<", "==", "ifexp", "neg", "f32", "f64",
                               "max", "exp"]))
    a = draw(expressions(depth=depth + 1))
    b = draw(expressions(depth=depth + 1))
    if op == "ifexp":
        c = draw(expressions(depth=depth + 1))
        return f"({a} if {c} > {b} else {b})"
    if op == "neg":
        return f"(-{a})"
    if op in ("f32", "f64"):
        return f"np.float{op[1:]}({a})"
    if op == "max":
        return f"maximum(np.float64({a}), np.float64({b}))"
    if op == "exp":
        return f"exp_f32(np.float32({a}))"
    return f"({a} {op} {b})"


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(expr=expressions(), out=st.sampled_from(["float64", "float32"]))
def test_random_expression_kernels_match_numba(expr, out):
    rng = np.random.default_rng(4)
    arrays = [np.resize(SPECIAL, 12).astype(np.float32), rng.standard_normal(12),
              rng.integers(-3, 4, 12), rng.integers(-3, 4, 12).astype(np.int32),
              rng.integers(0, 5, 12).astype(np.uint8), np.zeros(12, out)]
    body = f"for i in range(12):\n    a5[i] = {expr}"
    try:
        numba_out, ours = both(body, arrays)
    except loop_ir.Unsupported:
        return
    same_bits(numba_out[-1], ours[-1])


# ----------------------------------------------------------------------------- programs

def _model(x, w):
    h = jnp.tanh(x @ w)
    return jnp.sum(jnp.exp(-h * h) + jnp.log1p(h * h), axis=1) / (1.0 + jnp.max(h, axis=1))


def _direct_launches(program) -> list:
    return [launch for launch in program.launches if launch.direct]


def test_program_kernels_take_the_path_and_match_the_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 24)).astype(np.float32)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    f = jitgraph.jit(_model)
    got = np.asarray(f(x, w))
    program = f.lower(x, w).program
    assert _direct_launches(program), "no kernel went to loop_ir"
    h = np.tanh(x.astype(np.float64) @ w)
    want = (np.exp(-h * h) + np.log1p(h * h)).sum(1) / (1 + h.max(1))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    g = jitgraph.jit(jitgraph.grad(lambda x, w: jnp.sum(_model(x, w)), argnums=1))
    gw = np.asarray(g(x.astype(np.float64), w.astype(np.float64)))
    eps, i, j = 1e-6, 3, 7
    wp, wm = w.astype(np.float64), w.astype(np.float64)
    wp = wp.copy()
    wm = wm.copy()
    wp[i, j] += eps
    wm[i, j] -= eps
    fd = (float(np.sum(_model(x.astype(np.float64), wp))) -
          float(np.sum(_model(x.astype(np.float64), wm)))) / (2 * eps)
    np.testing.assert_allclose(gw[i, j], fd, rtol=1e-5)


_CHILD = """
import json, os, sys
import numpy as np
import jitgraph, jitgraph.numpy as jnp
sys.path.insert(0, {tests!r})
from test_loop_ir import _model, _direct_launches
rng = np.random.default_rng(5)
x = rng.standard_normal((300, 24)).astype(np.float32)
w = rng.standard_normal((24, 40)).astype(np.float32)
f = jitgraph.jit(_model)
out = np.asarray(f(x, w))
prog = f.lower(x, w).program
print(json.dumps({{"direct": len(_direct_launches(prog)), "numba": prog.numba_compiles(),
                  "native": prog.native, "sum": float(out.astype(np.float64).sum())}}))
"""


def _child(cache: str, **env) -> dict:
    import json
    code = _CHILD.format(tests=os.path.dirname(__file__))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "JITGRAPH_CACHE_DIR": cache, "JITGRAPH_NATIVE": "0",
                            **env}, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_objects_are_cached_checked_and_can_be_turned_off(tmp_path):
    """A second process loads the kernels' object code (Numba compiles none of them); a
    damaged object is compiled again; ``JITGRAPH_LOOP_IR=0`` gives Numba every kernel and
    the same numbers."""
    cache = str(tmp_path / "cache")
    first = _child(cache)
    assert first["direct"] > 0
    objects = [p for p in os.listdir(cache) if p.endswith(".o")]
    assert objects
    second = _child(cache)
    assert second["numba"] == 0 and second["sum"] == first["sum"]
    for name in objects:
        path = os.path.join(cache, name)
        with open(path, "r+b") as fh:
            fh.seek(os.path.getsize(path) // 2)
            fh.write(b"\x00garbage\x00")
    damaged = _child(cache)
    assert damaged["direct"] == first["direct"] and damaged["sum"] == first["sum"]
    off = _child(str(tmp_path / "off"), JITGRAPH_LOOP_IR="0")
    assert off["direct"] == 0
    np.testing.assert_allclose(off["sum"], first["sum"], rtol=1e-6)



def test_only_innermost_constant_loop_nests_are_unrolled():
    """A window's taps (constant, short, nothing but straight code inside) are unrolled
    completely; a short loop around a long one, a long loop, a loop over runtime bounds and a
    nest of more than ``UNROLL_NEST`` copies are not."""
    import ast
    src = textwrap.dedent("""
        def k(lo, hi, a0):
            for o in range(lo, hi):
                for h in range(4):
                    for t in range(128):
                        a0[t] = 1.0
                for r0 in range(3):
                    for r1 in range(3):
                        a0[r0 * 3 + r1] = 2.0
                for big in range(8):
                    for big2 in range(8):
                        a0[big + big2] = 3.0
    """)
    fn = ast.parse(src).body[0]
    chosen = loop_ir._unrolled(fn)
    loops = {n.target.id: id(n) in chosen for n in ast.walk(fn) if isinstance(n, ast.For)}
    assert loops == {"o": False, "h": False, "t": False, "r0": True, "r1": True,
                     "big": False, "big2": True}
    body = """
        for o in range(60):
            for r in range(4):
                a1[o * 4 + r] = a0[o * 4 + r] * 2.0
    """
    text = loop_ir.translate(HEADER + DECORATOR.format(fm="False") + "\ndef loop_u(a0, a1):\n" +
                             textwrap.indent(textwrap.dedent(body), "    "), "loop_u",
                             ("float64", "float64"), "jgk_u").text
    assert text.count("llvm.loop.unroll.full") == 1
    check(body, [np.arange(240.0), np.zeros(240)])


def test_kernels_target_the_cpu_numba_targets(monkeypatch):
    """Where ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` say which CPU Numba compiles for, the
    kernels LLVM compiles alone target it too: no AVX-512 register in a vectorized loop
    compiled for Haswell (AVX2), though this machine may have AVX-512; unset, this machine."""
    import llvmlite.binding as llvm
    from numba.core import config

    from jitgraph.compiler import native
    monkeypatch.setattr(config, "CPU_NAME", None)
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr(config, "ENABLE_AVX", True)
    assert native.target_cpu() == (llvm.get_host_cpu_name(),
                                   llvm.get_host_cpu_features().flatten())
    monkeypatch.setattr(config, "ENABLE_AVX", False)       # NUMBA_ENABLE_AVX=0
    assert not [f for f in native.target_cpu()[1].split(",") if f.startswith("+avx")]
    monkeypatch.setattr(config, "CPU_NAME", "haswell")
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx,+sse4.2")
    assert native.target_cpu() == ("haswell", "+avx2,+fma,+avx,+sse4.2")
    body = """
        for i in range(4096):
            a1[i] = a0[i] * 2.0 + 1.0
    """
    text = loop_ir.translate(HEADER + DECORATOR.format(fm="False") + "\ndef loop_isa(a0, a1):\n"
                             + textwrap.indent(textwrap.dedent(body), "    "), "loop_isa",
                             ("float32", "float32"), "jgk_isa").text
    asm = _optimized(text)[1]
    assert "ymm" in asm and "zmm" not in asm


def _optimized(text: str) -> tuple[str, str]:
    """The IR and assembly of a translated kernel after ``compile_object``'s optimisation."""
    import llvmlite.binding as llvm

    from jitgraph.compiler import native
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    tm = native.target_machine(opt=3)
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod), tm.emit_assembly(mod)


#: a bias gradient as the CPU backend writes it (``_split_column_body``): rows of partial sums
COLUMN_SUM = """
    for r0_u in range(lo, hi):
        r0 = np.int64(r0_u) & 0x7FFFFFFFFFFFFFFF
        part = r0 * 40
        acc = a1
        for z in range(40):
            acc[part + z] = np.float32(0.0)
        for r1 in range(24):
            for o0 in range(40):
                acc[part + o0] += a0[r0 * 960 + r1 * 40 + o0]
"""


def test_nonnegative_indices_skip_the_wraparound_and_vectorize():
    """An index built from loop counters, masks and sizes (``r0 * 960 + r1 * 40 + o0``) is
    never negative: it takes no wraparound select, which kept LLVM from vectorizing such
    loops (a bias gradient ran scalar with scattered stores, 5x slower than Numba's)."""
    x = np.random.default_rng(0).standard_normal(3 * 960).astype(np.float32)
    out = check(COLUMN_SUM, [x, np.zeros(3 * 40, np.float32)], rows=3)
    np.testing.assert_allclose(out[1].reshape(3, 40), x.reshape(3, 24, 40).sum(1), rtol=1e-5)
    src = HEADER + DECORATOR.format(fm="{'reassoc', 'contract'}") + \
        "\ndef loop_col(lo, hi, a0, a1):\n" + textwrap.indent(textwrap.dedent(COLUMN_SUM), "    ")
    text = loop_ir.translate(src, "loop_col", ("float32", "float32"), "jgk_col").text
    ir, _ = _optimized(text)
    assert "masked.scatter" not in ir and "masked.gather" not in ir
    assert re.search(r"fadd [a-z ]*<\d+ x float>", ir), "the column sums are not vectorized"


def test_indices_that_may_be_negative_still_wrap():
    """What the nonnegative-index analysis must not take as nonnegative: a variable that
    turns negative on a later assignment (read before it in the loop), differences,
    negations, right shifts and maxima of negatives, a conditional's negative side, an
    unsigned difference cast back to int64. Each indexes from the end, as in Numba."""
    table = np.arange(16, dtype=np.float64) * 1.5
    check("""
        j = 0
        for i in range(8):
            a1[i] = a0[j]
            j = j - 1
            a2[i] = a0[i - 3]
            a3[i] = a0[-i]
            a4[i] = a0[(i - 8) >> 1]
            a5[i] = a0[max(i - 9, -2)] + a0[min(i, i - 4)]
            a6[i] = a0[i if i > 3 else i - 8]
            a7[i] = a0[np.int64(np.uint64(i) - np.uint64(1)) if i == 0 else i & -1]
            k = i * 3
            k -= 5
            a8[i] = a0[k % 16 - 16 + (k * 0)]
    """, [table] + [np.zeros(8) for _ in range(8)])


def test_numba_target_settings_read_the_same_with_and_without_numba():
    """A process that has not imported Numba (one running a native bundle) reads Numba's
    target settings as Numba does: the same target and cache key as a process that has,
    ``NUMBA_CPU_NAME=generic`` (whose features default to none) included."""
    import json
    code = ("import sys, json\n{}from jitgraph.compiler import disk_cache, native\n"
            "print(json.dumps([native.target_cpu(), dict(disk_cache._machine_key())"
            "['numba_cpu_features'], 'numba' in sys.modules]))")
    for env in ({"NUMBA_CPU_NAME": "generic"}, {"NUMBA_ENABLE_AVX": "0"}):
        runs = []
        for first in ("", "import numba\n"):
            proc = subprocess.run([sys.executable, "-c", code.format(first)], text=True,
                                  capture_output=True, env={**os.environ, **env}, timeout=120)
            assert proc.returncode == 0, proc.stderr[-2000:]
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        assert [r[2] for r in runs] == [False, True]
        assert runs[0][:2] == runs[1][:2], (env, runs)
    assert runs[0][0][1] and "+avx" not in runs[0][0][1]        # NUMBA_ENABLE_AVX=0
