"""Time @njit loops calling NumPy's math (scalar libm calls) against kernels.fastmath.

    python bench/fastmath_speed.py                  # 2**22 float32 values
    python bench/fastmath_speed.py --dtype float64 --log2n 20 --repeat 11

Each loop reads one array and writes one; the time is the median of --repeat runs
after a warm-up call (compilation excluded).  Ratio = NumPy-loop time / fast-loop time.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from jitgraph.kernels import fastmath as fm  # installed name only (see tests/test_fastmath.py)


def _numpy_loops():
    @numba.njit
    def np_exp(a, out):
        for i in range(a.size):
            out[i] = np.exp(a[i])

    @numba.njit
    def np_expm1(a, out):
        for i in range(a.size):
            out[i] = np.expm1(a[i])

    @numba.njit
    def np_log(a, out):
        for i in range(a.size):
            out[i] = np.log(a[i])

    @numba.njit
    def np_log1p(a, out):
        for i in range(a.size):
            out[i] = np.log1p(a[i])

    @numba.njit
    def np_tanh(a, out):
        for i in range(a.size):
            out[i] = np.tanh(a[i])

    @numba.njit
    def np_logistic(a, out):
        one = a.dtype.type(1)
        for i in range(a.size):
            out[i] = one / (one + np.exp(-a[i]))

    @numba.njit
    def np_softplus(a, out):
        zero = a.dtype.type(0)
        for i in range(a.size):
            v = a[i]
            out[i] = max(v, zero) + np.log1p(np.exp(-abs(v)))

    return {
        "exp": np_exp,
        "expm1": np_expm1,
        "log": np_log,
        "log1p": np_log1p,
        "tanh": np_tanh,
        "logistic": np_logistic,
        "softplus": np_softplus,
    }


def _fast_loop(f):
    @numba.njit
    def loop(a, out):
        for i in range(a.size):
            out[i] = f(a[i])

    return loop


def _median_time(fn, a, out, repeat):
    fn(a, out)  # compile / warm up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(a, out)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--log2n", type=int, default=22)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--only", nargs="*", default=list(fm.FUNCTION_NAMES), choices=list(fm.FUNCTION_NAMES))
    args = p.parse_args(argv)

    dtype = np.dtype(args.dtype)
    n = 1 << args.log2n
    rng = np.random.default_rng(0)
    signed = rng.uniform(-10.0, 10.0, n).astype(dtype)  # exp, expm1, tanh, logistic, softplus
    positive = rng.uniform(1e-3, 100.0, n).astype(dtype)  # log, log1p
    out = np.empty(n, dtype)
    np_loops = _numpy_loops()

    print(f"{n} {dtype.name} values, median of {args.repeat} runs, numba {numba.__version__}")
    print(f"{'function':10s} {'numpy loop':>11s} {'fast loop':>10s} {'ratio':>7s}")
    for name in args.only:
        a = positive if name in ("log", "log1p") else signed
        t_np = _median_time(np_loops[name], a, out, args.repeat)
        t_fast = _median_time(_fast_loop(fm.lookup(name, dtype)), a, out, args.repeat)
        print(f"{name:10s} {t_np * 1e3:9.2f}ms {t_fast * 1e3:8.2f}ms {t_np / t_fast:6.1f}x")


if __name__ == "__main__":
    main()
