"""The programs the stress children run, written once for NumPy and for jitgraph.

Each program is ``fn(m, *inputs)`` where ``m`` is ``numpy`` (the reference, computed by the
test process) or ``jitgraph.numpy`` (traced and compiled by ``jitgraph.jit`` in a child).
Inputs are made from a seed and a shape variant, so the test process builds the very same
arrays as the child without passing them around. Shape variant ``"b"`` gives other shapes,
hence other programs (other generated modules, compiled afresh), that call the ``kernels/``
helpers with the same argument types as variant ``"a"``: a process running variant ``"b"``
after a process that ran ``"a"`` loads those helpers from Numba's cache.

This module imports NumPy only.
"""
from __future__ import annotations

import numpy as np

# shapes per variant: no dimension of 1 (a transposed view with a dimension of 1 is
# C-contiguous, which would change the helpers' argument types between variants)
_DIMS = {"a": (4, 3, 5), "b": (6, 5, 3)}


def _ints(rng, shape, dtype):
    return rng.integers(-40, 41, size=shape).astype(dtype)


def _floats(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------------- products
# matmul_loop (integers) and blas_gemm / matmul_blas (floats) overloads of several layouts

def _product(kind):
    """(fn, make) for a product of layout ``kind`` (aT_b, a_b, a_bT, aT_bT, rows)."""
    def make(rng, dims, dtype, gen):
        m, k, n = dims
        if kind == "aT_b":
            return gen(rng, (k, m), dtype), gen(rng, (k, n), dtype)
        if kind == "a_b":
            return gen(rng, (m, k), dtype), gen(rng, (k, n), dtype)
        if kind == "a_bT":
            return gen(rng, (m, k), dtype), gen(rng, (n, k), dtype)
        if kind == "aT_bT":
            return gen(rng, (k, m), dtype), gen(rng, (n, k), dtype)
        if kind == "rows":   # every other row: a strided (layout A) operand
            return gen(rng, (2 * m, k), dtype), gen(rng, (k, n), dtype)
        raise KeyError(kind)

    fns = {
        "aT_b": lambda m, a, b: a.T @ b,
        "a_b": lambda m, a, b: a @ b,
        "a_bT": lambda m, a, b: a @ b.T,
        "aT_bT": lambda m, a, b: a.T @ b.T,
        "rows": lambda m, a, b: a[::2] @ b,
    }
    return fns[kind], make


def _mixed(m, a32, b32, a64, b64):
    """float32 and float64 products in one program, each followed by a loop kernel (two new
    kernels: this process forks a compile worker, and both compile the program's blas_gemm
    overloads, float32 and float64, at once)."""
    return m.tanh(a32.T @ b32) * 2.0, m.exp(a64 @ b64.T)


def _make_mixed(rng, dims, dtype, gen):
    m, k, n = dims
    return (_floats(rng, (k, m), np.float32), _floats(rng, (k, n), np.float32),
            _floats(rng, (m, k), np.float64), _floats(rng, (n, k), np.float64))


def _elementwise(expr):
    def make(rng, dims, dtype, gen):
        m, k, n = dims
        return (_floats(rng, (m * n,), dtype),)
    return expr, make


PROGRAMS: dict = {}
for _dt, _gen in (("i64", _ints), ("i32", _ints), ("f32", _floats), ("f64", _floats)):
    for _kind in ("aT_b", "a_b", "a_bT", "aT_bT", "rows"):
        _fn, _mk = _product(_kind)
        PROGRAMS[f"{_dt}_{_kind}"] = (_fn, _mk, _dt, _gen)
PROGRAMS["mixed_f32_f64"] = (_mixed, _make_mixed, "f64", _floats)
# same argument types, different programs (the swapped-entry scenario)
PROGRAMS["mul2"] = (*_elementwise(lambda m, x: x * 2.0), "f64", _floats)
PROGRAMS["add1"] = (*_elementwise(lambda m, x: x + 1.0), "f64", _floats)
PROGRAMS["tanh_sum"] = (*_elementwise(lambda m, x: m.tanh(x) * 2.0 + m.sum(x * x)), "f64", _floats)

_DTYPES = {"i64": np.int64, "i32": np.int32, "f32": np.float32, "f64": np.float64}

def inputs(name: str, seed: int, variant: str = "a") -> tuple:
    """The arrays program *name* is called with (the same in every process)."""
    _, make, dt, gen = PROGRAMS[name]
    rng = np.random.default_rng([seed, sorted(PROGRAMS).index(name), ord(variant)])
    return make(rng, _DIMS[variant], _DTYPES[dt], gen)


def scaled(name: str, scale: float):
    """Program *name* with every float output multiplied by *scale* and every integer output
    increased by ``round(4 * scale)`` (new constants: a new program, compiled afresh; used to
    make first calls that need compiling)."""
    fn = PROGRAMS[name][0]
    offset = int(round(4 * scale))

    def f(m, *args):
        out = fn(m, *args)
        outs = out if isinstance(out, tuple) else (out,)
        res = tuple(o * scale if np.dtype(o.dtype).kind == "f" else o + offset for o in outs)
        return res if isinstance(out, tuple) else res[0]
    return f


def reference(name: str, seed: int, variant: str = "a", scale: float | None = None) -> list:
    """NumPy's outputs of program *name* (a list of arrays)."""
    fn = PROGRAMS[name][0] if scale is None else scaled(name, scale)
    out = fn(np, *inputs(name, seed, variant))
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def encode(outputs) -> list:
    """Arrays as JSON (floats as float64, which round-trips float32 exactly)."""
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    res = []
    for o in outs:
        a = np.asarray(o)
        data = a.astype(np.float64) if a.dtype.kind == "f" else a
        res.append({"dtype": a.dtype.str, "shape": list(a.shape), "data": data.reshape(-1).tolist()})
    return res


def decode(encoded: list) -> list:
    return [np.asarray(e["data"], dtype=np.dtype(e["dtype"])).reshape(e["shape"]) for e in encoded]


def compare(name: str, got: list, want: list) -> str | None:
    """Why *got* (decoded arrays) is not NumPy's *want*, or None: integers exactly, floats
    within a tight tolerance (float32 2e-5, float64 1e-11, relative to the largest value)."""
    if len(got) != len(want):
        return f"{name}: {len(got)} outputs, NumPy gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"{name}[{i}]: shape {g.shape}, NumPy gives {w.shape}"
        if g.dtype != w.dtype:
            return f"{name}[{i}]: dtype {g.dtype}, NumPy gives {w.dtype}"
        if w.dtype.kind in "iub":
            if not np.array_equal(g, w):
                bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
                return (f"{name}[{i}]: WRONG integer values at {bad.size} of {w.size} places, "
                        f"e.g. flat index {bad[0]}: got {g.reshape(-1)[bad[0]]}, "
                        f"NumPy {w.reshape(-1)[bad[0]]}; got {g.reshape(-1)[:6].tolist()}..., "
                        f"NumPy {w.reshape(-1)[:6].tolist()}...")
        else:
            rtol = 2e-5 if w.dtype == np.float32 else 1e-11
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            scale = max(1.0, float(np.max(np.abs(w64)))) if w64.size else 1.0
            err = np.abs(g64 - w64)
            if not (np.all(np.isfinite(g64) == np.isfinite(w64))
                    and np.all(err[np.isfinite(w64)] <= rtol * scale)):
                j = int(np.nanargmax(np.where(np.isnan(err), np.inf, err))) if err.size else 0
                return (f"{name}[{i}]: WRONG float values: max error {np.nanmax(err) if err.size else 0:.3g} "
                        f"(tolerance {rtol * scale:.3g}) at flat index {j}: got {g64.reshape(-1)[j]!r}, "
                        f"NumPy {w64.reshape(-1)[j]!r}")
    return None
