"""The size-regime tier: compiled programs against the reference at sizes that take every code
path the compiler picks by size.

The rest of the suite uses small shapes, which take one regime only: serial loop kernels,
short rows, compiled drivers. Here every threshold in ``jitgraph.compiler.thresholds`` is
crossed, with the sizes computed from the thresholds themselves, and each test also checks
that the generated program took the path it is meant to test (a ``prange`` loop, a column
order loop, a compiled scan, a dynamic program), so a changed threshold cannot leave the tier
testing the old regime:

* every index map the emitter produces (concatenate, pad, roll, slices with negative steps,
  gathers with int32/int64 indices, broadcasts, transposes, reshapes), value and gradient, as
  a parallel loop kernel and as a serial one;
* the compiled-vs-reference case table (``test_jit_cases``) a second time, each case mapped
  with ``vmap`` over enough copies of its arguments that the loop kernels over its largest
  argument have twice ``PARALLEL_MIN_WORK`` elements, so they are parallel ones (and the
  scalarized gradient's full sum a parallel reduction): the cases that together cover every
  primitive and axis parameter of the table, value and gradient
  (``jit(grad(f))`` against ``grad(f)`` without jit);
* full reductions over one long vector (the reduced loop threaded) and reductions over leading
  axes (column order, serial, and threaded);
* rows of at least ``LONG_ROW`` columns (softmax, log-softmax, logsumexp, cross-entropy,
  layernorm), with few rows (serial) and with many (threaded);
* programs with matrix products (BLAS on one thread, the loop kernels threaded from the same
  threshold), products on both sides of ``PARALLEL_MIN_PRODUCT`` (split over threads by rows,
  by columns, by batch; one call), integer products (the loop product), value and gradient;
* scans shorter and longer than ``COMPILED_LOOP_MIN_LENGTH`` (Python loop, compiled loop);
* dynamic-shape programs at parallel sizes, against a fixed-size compile of the same function.

The CUDA side (grids of many blocks, grid-stride loops over more elements than threads) is in
``tests_cuda/test_cuda_size_regimes.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import lax, nn
from jitgraph.compiler import threaded, thresholds as T
from jitgraph.compiler.fusion import LoopKernel, ScatterStep
from jitgraph.scipy import special as jsp
from jitgraph.tree import tree_flatten

import test_jit_cases as table

F32, F64 = np.float32, np.float64
PAR = 2 * T.PARALLEL_MIN_WORK                  # elements of a kernel that must be threaded
SER = T.PARALLEL_MIN_WORK // 64                # ... that must stay serial
_rng = np.random.default_rng(2020)


# ------------------------------------------------------------------ helpers
def loop_kernels(lowered) -> list:
    """The generated loop kernels of a lowered program (not scatters, products, drivers)."""
    return [k for k in lowered.kernels if k.name.startswith("loop_")]


def parallel(src: str) -> bool:
    return threaded.is_threaded(src)


def big_kernels(lowered, min_work: int = T.PARALLEL_MIN_WORK) -> list[bool]:
    """Whether each loop kernel with at least ``min_work`` elements and ``PARALLEL_MIN_OUTER``
    outer rows (those the thresholds say to thread) is threaded."""
    steps = [s for s in lowered.plan.steps if isinstance(s, (LoopKernel, ScatterStep))]
    out = []
    for s, k in zip(steps, lowered.kernels):
        if isinstance(s, LoopKernel) and int(np.prod(s.shape)) >= min_work and \
                int(np.prod(s.outer_shape)) >= T.PARALLEL_MIN_OUTER:
            out.append(parallel(k.source))
    return out


reference = table.reference_of


def scalar_loss(f):
    """``f`` reduced to a scalar with fixed, non-uniform weights on its float outputs."""
    def loss(*args):
        total = 0.0
        for k, o in enumerate(tree_flatten(f(*args))[0]):
            if np.dtype(o.dtype).kind == "f":
                w = 1.0 + 0.5 * np.cos(np.arange(int(np.prod(o.shape))) * 1.3 + k)
                total = total + jnp.sum(o * w.reshape(o.shape).astype(o.dtype))
        return total
    return loss


def check_value_and_grad(f, args, argnums=0, tol=None, grad=True):
    """jit(f) against the reference, and jit(grad) against grad without jit. Returns the
    lowered forward program."""
    tol = tol or table.FWD_TOL
    jf = jitgraph.jit(f)
    table.assert_same(jf(*args), reference(f, args), "jit(f)", tol)
    if grad:
        gf = jitgraph.grad(scalar_loss(f), argnums=argnums)
        table.assert_same(jitgraph.jit(gf)(*args), gf(*args), "jit(grad(f))", table.GRAD_TOL)
    return jf.lower(*args)


def rn(*shape, dtype=F64):
    return _rng.standard_normal(shape).astype(dtype)


def _rows(n: int, cols: int = 64) -> tuple[int, int]:
    return (n // cols, cols)


# ------------------------------------------------------------------ index maps
def _index_map_cases(n: int):
    """(name, f, args, argnums) for each index-map kind, at ``n`` elements per kernel."""
    r, c = _rows(n)
    a, b = rn(n, dtype=F32), rn(n, dtype=F32)
    x, y = rn(r, c), rn(r, c)
    idx = _rng.integers(-n - 3, n + 3, n)             # negative and out of range: clamped
    return [
        ("concat 1d", lambda a, b: jnp.concatenate([a, b * 2.0]) + 1.0, (a, b), (0, 1)),
        ("concat axis0", lambda x, y: jnp.concatenate([x, y], axis=0) * 2.0, (x, y), (0, 1)),
        ("concat axis1", lambda x, y: jnp.concatenate([x, y[:, ::-1]], axis=1) - 1.0, (x, y), (0, 1)),
        ("pad 1d", lambda a: jnp.pad(a, (3, 5)) * 2.0, (a,), 0),
        ("pad 2d", lambda x: jnp.pad(x, ((1, 2), (3, 0))) + 1.0, (x,), 0),
        ("roll", lambda a: jnp.roll(a, 7) * 2.0 + jnp.roll(a, -n // 3), (a,), 0),
        ("roll 2d", lambda x: jnp.roll(x, -5, axis=1) + jnp.roll(x, 3, axis=0), (x,), 0),
        ("slice negative steps", lambda a: a[::-1] * 2.0 + jnp.concatenate([a[::-2], a[-2::-2]]),
         (a,), 0),
        ("slice 2d negative steps", lambda x: x[::-1, ::-1] + x[::-1, 5:][:, ::-1].sum()
         + jnp.pad(x[::-2, ::-3], ((0, r - (r + 1) // 2), (0, c - (c + 2) // 3))), (x,), 0),
        ("gather int64", lambda a, i: a[i] * 3.0, (a, idx), 0),
        ("gather int32", lambda x, i: x[i % r, (i // 7) % c] + 1.0, (x, idx.astype(np.int32)), 0),
        ("take_along_axis", lambda x, i: jnp.take_along_axis(x, i, axis=1) * 2.0,
         (x, _rng.integers(0, c, (r, c))), 0),
        ("broadcast", lambda x, v, s: x * v + s[:, None] - jnp.broadcast_to(v, (r, c)),
         (x, rn(c), rn(r)), (0, 1, 2)),
        ("transpose", lambda x: x.T * 2.0 + jnp.transpose(x.reshape(r, 8, 8), (2, 0, 1)).reshape(c, r),
         (x,), 0),
        ("reshape", lambda a: a.reshape(-1, 32)[:, ::-1].reshape(-1) * 2.0 + a, (a,), 0),
        ("windows max dilated", lambda x: lax.reduce_window(
            x, -np.inf, lax.max, (3, 3), (1, 1), "SAME", window_dilation=(2, 1)) * 2.0,
         (x,), 0),
        ("windows sum strided", lambda x: lax.reduce_window(
            x, 0.0, lax.add, (2, 3), (2, 2), ((0, 1), (1, 1))) - 1.0, (x,), 0),
    ]


_INDEX_NAMES = [case[0] for case in _index_map_cases(SER)]


class IndexMaps:
    """All index-map kinds of one regime in one program (value and gradient of each), so the
    regime costs one compile; a kind that fails there is compiled alone to name it."""

    def __init__(self, n: int):
        self.n = n
        self.cases = {name: (f, args, argnums) for name, f, args, argnums in _index_map_cases(n)}
        grads = {k: jitgraph.grad(scalar_loss(f), argnums=an) for k, (f, _, an) in self.cases.items()}

        def program(argss):
            return {k: (f(*argss[k]), grads[k](*argss[k])) for k, (f, _, _) in self.cases.items()}
        self.grads = grads
        self.program = jitgraph.jit(program)
        argss = {k: args for k, (_, args, _) in self.cases.items()}
        try:
            self.outs, self.lowered = self.program(argss), self.program.lower(argss)
        except Exception as e:          # each kind then compiles alone in its own test
            self.outs, self.lowered = e, None

    def check(self, kind: str) -> None:
        f, args, argnums = self.cases[kind]
        if isinstance(self.outs, Exception):
            check_value_and_grad(f, args, argnums)
            return
        value, grad = self.outs[kind]
        table.assert_same(value, reference(f, args), f"{kind}: jit(f)", table.FWD_TOL)
        table.assert_same(grad, self.grads[kind](*args), f"{kind}: jit(grad(f))", table.GRAD_TOL)


@pytest.fixture(scope="module")
def index_maps():
    return {"parallel": IndexMaps(PAR), "serial": IndexMaps(SER)}


@pytest.mark.parametrize("regime", ["parallel", "serial"])
@pytest.mark.parametrize("kind", _INDEX_NAMES)
def test_index_map(kind, regime, index_maps):
    """Each index map compiles and matches the reference in a threaded kernel (whose loop
    index Numba types as unsigned) and in a serial one, value and gradient."""
    index_maps[regime].check(kind)


@pytest.mark.parametrize("regime", ["parallel", "serial"])
def test_index_map_regime_taken(regime, index_maps):
    maps = index_maps[regime]
    if maps.lowered is None:
        raise maps.outs
    if regime == "parallel":
        big = big_kernels(maps.lowered)
        assert big and all(big), \
            f"a kernel of {maps.n} elements is serial:\n{maps.lowered.source}"
    else:
        assert not any(parallel(k.source) for k in loop_kernels(maps.lowered))


@pytest.mark.parametrize("regime", ["parallel", "serial"])
@pytest.mark.parametrize("n", [1 << 17, 1 << 20, 1 << 22])
def test_issue_programs_at_training_sizes(n, regime, monkeypatch):
    """The programs reported to crash past the parallel threshold (concatenate, pad, roll,
    dropout on 100,000 elements, a (512, 384) concatenation), value and gradient, at 2^17,
    2^20 and 2^22 elements, in threaded kernels and (thresholds raised past the size) in
    serial ones."""
    from jitgraph.compiler.backends import cpu as codegen_cpu
    if regime == "serial":
        monkeypatch.setattr(codegen_cpu, "PARALLEL_MIN_WORK", 4 * n)
    a, b = rn(n // 2, dtype=F32), rn(n // 2, dtype=F32)
    x, m = rn(100_000, dtype=F32), rn(512, 384, dtype=F32)

    def f(a, b, x, m):
        return (jnp.concatenate([a, b]), jnp.pad(a, (3, 5)), jnp.roll(b, 7),
                nn.dropout(jitgraph.random.key(0), x, 0.3),
                jnp.concatenate([m, m[::-1] * 2.0], axis=0))
    lowered = check_value_and_grad(f, (a, b, x, m), (0, 1, 2, 3))
    big = big_kernels(lowered)
    assert big and all(big) == (regime == "parallel") and any(big) == (regime == "parallel")


# ------------------------------------------------------------------ the case table, scaled
_SCALABLE_KINDS = {"elementwise", "layout", "index", "reduce", "stable"}


def copies(args: tuple) -> int:
    """How many copies of a case's arguments make the kernels over its largest argument
    twice ``PARALLEL_MIN_WORK`` elements (and so, with at least ``PARALLEL_MIN_OUTER`` rows,
    threaded)."""
    largest = max([np.asarray(a).size for a in args] + [1])
    return max(T.PARALLEL_MIN_OUTER, -(-2 * T.PARALLEL_MIN_WORK // largest))


def _scaled(args: tuple, n: int | None = None) -> tuple:
    """``n`` (default ``copies(args)``) copies of each argument along a new leading axis;
    float copies scaled by one of seven factors near 1 (one factor per copy, so ties and
    orderings inside a copy stay as the case made them, while copies differ)."""
    n = copies(args) if n is None else n
    factors = 1.0 + (np.arange(n) % 7 - 3) / 100.0
    out = []
    for a in args:
        a = np.asarray(a)
        t = np.broadcast_to(a, (n,) + a.shape)
        if a.dtype.kind == "f":
            t = t * factors.reshape((-1,) + (1,) * a.ndim).astype(a.dtype)
        out.append(np.ascontiguousarray(t, dtype=a.dtype))
    return tuple(out)


def _features(g) -> set:
    """What a program exercises: its primitives and their layout/axis parameters (ranks and
    dtypes are the small-shape table's job; here each primitive's code must run in a
    threaded loop, with every index map its parameters give)."""
    out = set()
    for n in g.nodes:
        out.add((n.prim.name,))
        for k in ("axes", "axis", "perm", "keepdims"):
            if k in n.params:
                out.add((n.prim.name, k, repr(n.params[k])))
    return out


_FEATURES: dict = {}


def _memo(fn):
    """Per case name: graphs are traced once per session, not once per use."""
    def get(c):
        key = (fn.__name__, c.name)
        if key not in _FEATURES:
            _FEATURES[key] = fn(c)
        return _FEATURES[key]
    get.__name__ = fn.__name__
    return get


def _program_features(c, grad: bool) -> set | None:
    """The features of the case's vmapped program (traced at a few copies), or None when it
    is not for this tier: products (a batch of thousands of small BLAS calls, and the
    threshold products impose: tested below), host steps, control flow, or no batching rule."""
    from jitgraph.passes import optimize
    try:
        g = optimize(jitgraph.make_graph(ScaledTable.program(c, grad))(*_scaled(c.args, 8)))
    except Exception:
        return None
    if any(n.prim.kind not in _SCALABLE_KINDS and n.prim.name != "scatter_add" for n in g.nodes):
        return None
    if not any(n.prim.kind in ("elementwise", "layout", "index", "reduce") for n in g.nodes):
        return None
    return _features(g)


@_memo
def _scalable(c) -> set | None:
    return _program_features(c, False)


@_memo
def _grad_features(c) -> set | None:
    return None if _scalable(c) is None else _program_features(c, True)


class ScaledTable:
    """The selected cases, batched into few programs (one jit each, compiled once)."""

    BUDGET = 120      # optimized graph nodes per batch program

    def __init__(self):
        # a gradient program also computes the value: forward-only programs are needed just
        # for what the gradient programs leave uncovered
        self.grads = table.greedy_cover(table.GRAD, _grad_features)
        self.forward = table.greedy_cover(
            table.ALL, _scalable, frozenset().union(*(_scalable(c) for c in self.grads)))
        self.batches: list[tuple[bool, list]] = []
        for grad, cases in ((False, self.forward), (True, self.grads)):
            cur, used = [], 0
            for c in cases:
                cost = len(_grad_features(c) if grad else _scalable(c))
                if cur and used + cost > self.BUDGET:
                    self.batches.append((grad, cur))
                    cur, used = [], 0
                cur.append(c)
                used += cost
            if cur:
                self.batches.append((grad, cur))
        self.results: dict = {}

    @staticmethod
    def program(c, grad: bool):
        f = jitgraph.vmap(c.fn)
        if not grad:
            return f
        # the case's own scalarization, over every copy
        g = jitgraph.grad(table.scalarized(c, f), argnums=c.argnums)
        return lambda *a: (f(*a), g(*a))

    def run(self, i: int):
        if i not in self.results:
            grad, cases = self.batches[i]
            progs = [self.program(c, grad) for c in cases]
            argss = [_scaled(c.args) for c in cases]

            def batch(argss):
                return tuple(p(*a) for p, a in zip(progs, argss))
            jf = jitgraph.jit(batch)
            try:
                self.results[i] = (jf(argss), jf.lower(argss), argss, progs)
            except Exception as e:
                self.results[i] = e
        return self.results[i]


_TABLE = ScaledTable()      # the selection and batches (compiled on first use, per batch)
_SCALED = [(i, j, c.name) for i, (_, cs) in enumerate(_TABLE.batches) for j, c in enumerate(cs)]


@pytest.fixture(scope="module")
def scaled():
    return _TABLE


def test_scaled_table_covers_the_table():
    """The selection covers every primitive and axis parameter the scalable part of the table
    uses, forward and backward."""
    by_name = {c.name: c for c in table.ALL}
    chosen = [by_name[name] for _, _, name in _SCALED]
    want = set().union(*(fs for c in table.ALL if (fs := _scalable(c))))
    got = set().union(*(_scalable(c) for c in chosen))
    assert want <= got and len({f[0] for f in want}) > 40
    want = set().union(*(fs for c in table.GRAD if (fs := _grad_features(c))))
    got = set().union(*(_grad_features(c) for c in chosen if c.grad and _grad_features(c)))
    assert want <= got


@pytest.mark.parametrize("i,j,name", _SCALED, ids=[f"{n}" for _, _, n in _SCALED])
def test_scaled_case(i, j, name, scaled):
    grad, cases = scaled.batches[i]
    c = cases[j]
    res = scaled.run(i)
    if isinstance(res, Exception):
        raise res
    outs, lowered, argss, progs = res
    what = f"{c.name} x{copies(c.args)}: "
    f = jitgraph.vmap(c.fn)
    value = outs[j][0] if grad else outs[j]
    table.assert_same(value, reference(f, argss[j]), what + "jit(f)", table.FWD_TOL, c.rtol, c.atol)
    if grad:
        table.assert_same(outs[j][1], progs[j](*argss[j])[1], what + "jit(grad(f))",
                          table.GRAD_TOL, c.rtol, c.atol)
    big = big_kernels(lowered)
    assert big and all(big), f"{what}: a large loop kernel of its batch program is serial"


# ------------------------------------------------------------------ reductions
def test_full_reductions_thread_the_reduced_loop():
    """One output, many elements: the reduced loop is the threaded one (partial results per
    thread), for sums, products, max/min with NaN, means and variances; argmax stays serial."""
    n = PAR
    x = rn(n, dtype=F32)
    xn = x.copy()
    xn[n // 3] = np.nan
    f = lambda x, xn: (jnp.sum(x), jnp.mean(x * x), jnp.var(x), jnp.max(x), jnp.min(x),  # noqa: E731
                       jnp.max(xn), jnp.min(xn), jnp.prod(1.0 + x * 1e-6), jnp.sum(x > 0))
    lowered = check_value_and_grad(f, (x, xn), tol={np.dtype(F32): (1e-4, 1e-5)})
    assert any(parallel(k.source) for k in loop_kernels(lowered))
    g = lambda x: (jnp.argmax(x), jnp.argmin(x))                                            # noqa: E731
    check_value_and_grad(g, (x,), grad=False)


@pytest.mark.parametrize("products", [False, True])
def test_leading_axis_reductions(products):
    """Sums over the batch (bias gradients) in column order (rows outside, one accumulator per
    output): serial below the threshold, blocks of outputs on threads from it (the
    launcher's in a program with products, ``prange`` otherwise); threads over the outputs for
    at most ``STRIDED_COLUMN_MAX_ROWS`` rows (LLVM unrolls the rows and vectorizes over the
    outputs). Each against the reference, value and gradient."""
    rows = PAR // 32
    x = rn(rows, 32)

    def column_kernels(lowered):
        return [k.source for k in loop_kernels(lowered)
                if "for z in range(" in k.source and "part = " not in k.source]
    if products:
        w = rn(32, 32)
        f = lambda x, w: (jnp.sum(x, axis=0), jnp.mean(jnp.tanh(x) * 2.0, axis=0), x @ w)  # noqa: E731
        lowered = check_value_and_grad(f, (x, w), (0, 1))
        col = column_kernels(lowered)
        assert col and all(parallel(s) and "o_hi = min(o_lo + 16, 32)" in s for s in col), \
            "no blocked column-order kernel"
        small = check_value_and_grad(f, (x[: rows // 4], w), (0, 1))
        col = column_kernels(small)
        assert col and not any(parallel(s) for s in col), "a threaded kernel below the threshold"
    else:
        f = lambda x: (jnp.sum(x, axis=0), jnp.max(x * 2.0, axis=0))                    # noqa: E731
        lowered = check_value_and_grad(f, (x,))
        col = column_kernels(lowered)       # (a compiled driver: blocks on prange threads)
        assert col and all(parallel(s) and "o_hi = min(o_lo + 16, 32)" in s for s in col), \
            "no blocked column-order kernel"
        small = check_value_and_grad(f, (x[: rows // 4],))
        col = column_kernels(small)
        assert col and not any(parallel(s) for s in col), "a threaded kernel below the threshold"
        few = T.STRIDED_COLUMN_MAX_ROWS
        lowered = check_value_and_grad(f, (rn(few, PAR // few),))
        assert any(parallel(k.source) for k in loop_kernels(lowered))


@pytest.mark.parametrize("products", [False, True])
@pytest.mark.parametrize("outputs", [33, 100, 600])
def test_blocked_column_reductions_at_ragged_output_counts(outputs, products):
    """Blocks of outputs on threads (``column_block``) where the last block is short, on the
    launcher's threads (a program with products) and in a ``prange`` loop: sums, means (a
    second, per-output stage), maxima and products over the rows, value and gradient,
    against the reference."""
    from jitgraph.compiler.backends.cpu import column_block
    rows = -(-T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS // outputs) + 3
    x = rn(rows, outputs)
    w = rn(outputs, 8)

    def f(x, w):
        out = (jnp.sum(x, axis=0), jnp.mean(x * x, axis=0), jnp.max(x, axis=0),
               jnp.prod(1.0 + 1e-4 * x, axis=0))
        return out + (x[:4] @ w,) if products else out + (jnp.sum(w),)
    lowered = check_value_and_grad(f, (x, w), (0, 1))
    size = column_block(outputs)
    blocked = [k.source for k in loop_kernels(lowered)
               if f"o_hi = min(o_lo + {size}, {outputs})" in k.source]
    assert blocked and all(parallel(s) for s in blocked), "no blocked column-order kernel"


def first_on_one_and_two_threads(f, *args) -> np.ndarray:
    """``jit(f)(*args)[0]`` on one of Numba's threads and on all of them, which must give the
    same bits (split sums are added in a fixed order); that result."""
    import numba
    jf = jitgraph.jit(f)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = np.asarray(jf(*args)[0])
        numba.set_num_threads(before)
        two = np.asarray(jf(*args)[0])
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, two)
    return two


def test_tall_narrow_sums_split_their_rows_into_parts():
    """A sum over many rows into few outputs beside products (65536 x 16: one part a row would
    keep as many partial sums as it reads) splits its rows into ``SPLIT_COLUMN_MAX_PARTS``
    parts of ``p * R // parts`` rows: the reference's numbers, the same bits on one thread
    and on two, and in a dynamic program (bounds linear in the row count) at another row
    count too."""
    parts = T.SPLIT_COLUMN_MAX_PARTS
    rows, cols = 4 * T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS // 16 + 5, 16
    x = rn(rows, cols, dtype=F32)
    w = rn(cols, 8, dtype=F32)

    def f(x, w):
        return jnp.sum(jnp.tanh(x), axis=0), x[:4] @ w
    lowered = check_value_and_grad(f, (x, w), (0, 1), tol={np.dtype(F32): (1e-4, 1e-5)})
    split = [k.source for k in loop_kernels(lowered) if f"pr * {rows} // {parts}" in k.source]
    assert split and all(threaded.rows_of(s) == parts for s in split), "no kernel split in parts"
    first_on_one_and_two_threads(f, x, w)
    dyn = jitgraph.jit(f, dynamic_dims={0: 0})
    for n in (rows, rows + 999, 2 * rows + 1):
        xn = rn(n, cols, dtype=F32)
        np.testing.assert_allclose(np.asarray(dyn(xn, w)[0]),
                                   np.tanh(xn.astype(F64)).sum(0), rtol=1e-4)
    assert any(e["dynamic"] for e in dyn.cache_entries())


def test_leading_axis_sums_beside_products_split_their_rows():
    """Above the threshold beside products, a column-order sum over (batch, h, w) runs its
    batch rows on threads, each row's sums apart, added in row order by the driver (a
    convolution's bias gradient): the same bits on one thread and on two, and the
    reference's numbers. Its elementwise output (the masked gradient) is written as before."""
    batch, hw, ch = 2 * T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS // (8 * 8 * 32), 8, 32
    x = rn(batch, hw, hw, ch, dtype=F32)
    w = rn(ch, 16, dtype=F32)

    def f(x, w):
        y = jnp.maximum(x, 0.0)
        return jnp.sum(y, axis=(0, 1, 2)), y.reshape(-1, ch) @ w
    lowered = check_value_and_grad(f, (x, w), (0, 1), tol={np.dtype(F32): (1e-4, 1e-5)})
    split = [k.source for k in loop_kernels(lowered) if "part = r0 *" in k.source]
    assert split and all(threaded.rows_of(s) == batch for s in split), "no split column kernel"
    assert f"np.sum(k0_loop_acc0.reshape(({batch}, {ch}))" in lowered.source
    two = first_on_one_and_two_threads(f, x, w)
    np.testing.assert_allclose(two, np.maximum(x, 0).astype(F64).sum((0, 1, 2)), rtol=1e-5)


@pytest.mark.parametrize("rows", [2, 2 * T.PARALLEL_MIN_OUTER])
def test_long_rows(rows):
    """Rows of LONG_ROW columns: softmax, log-softmax, logsumexp, cross-entropy, layernorm,
    value and gradient; few rows (serial) and many (threaded)."""
    cols = T.LONG_ROW
    z = (rn(rows, cols, dtype=F32) * 3.0)
    y = _rng.integers(0, cols, rows)

    def f(z, y):
        lp = nn.log_softmax(z)
        xent = -jnp.mean(lp[jnp.arange(rows), y])
        ln = (z - z.mean(-1, keepdims=True)) / jnp.sqrt(z.var(-1, keepdims=True) + 1e-5)
        return nn.softmax(z), lp, jsp.logsumexp(z, axis=1), xent, ln
    lowered = check_value_and_grad(f, (z, y), tol={np.dtype(F32): (2e-5, 2e-6)})
    kinds = [parallel(k.source) for k in loop_kernels(lowered)]
    assert any(kinds) == (rows * cols >= T.PARALLEL_MIN_WORK and rows >= T.PARALLEL_MIN_OUTER)


# ------------------------------------------------------------------ products
def test_products_program_crosses_the_blas_threshold():
    """A program with products threads its loop kernels from PARALLEL_MIN_WORK_BESIDE_PRODUCTS
    (on Numba's threads, as its split products: one thread pool)."""
    for n, threaded in ((2 * T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS, True),
                        (T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS // 2, False)):
        b, h = 256, n // 256
        x, w, bias = rn(b, 64, dtype=F32), rn(64, h, dtype=F32) * 0.1, rn(h, dtype=F32)
        f = lambda x, w, bias: jnp.tanh(x @ w + bias) * 2.0                              # noqa: E731
        lowered = check_value_and_grad(f, (x, w, bias), (0, 1, 2),
                                       tol={np.dtype(F32): (2e-5, 2e-5)})
        assert "gemm" in lowered.source
        assert any(parallel(k.source) for k in loop_kernels(lowered)) == threaded


@pytest.mark.parametrize("a_shape, b_shape, split", [
    ((1024, 64), (64, 16), "par_gemm"),              # tall: a band of rows per thread
    ((4, 256), (256, 512), "par_gemm"),              # wide: a band of columns per thread
    ((8, 64, 32), (8, 32, 64), "par_batched_gemm"),  # a batch: one product per thread
    ((6000, 9), (9, 32), "par_gemm"),                # the weight gradient (9, 32) summed over
    # 6000 rows is deep: split along its contraction (kernels/gemm_split.py)
    ((16, 32), (32, 64), "blas_gemm"),               # below PARALLEL_MIN_PRODUCT: one call
])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_products_split_over_threads(a_shape, b_shape, split, dtype):
    """Products of at least PARALLEL_MIN_PRODUCT multiply-adds are split over Numba's threads
    (value, and the gradient's products with transposed operands, against the reference)."""
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = int(np.prod(a_shape[:-2]))
    assert (batch * m * k * n >= T.PARALLEL_MIN_PRODUCT) == (split != "blas_gemm")
    a, b = rn(*a_shape, dtype=dtype), rn(*b_shape, dtype=dtype)
    f = lambda a, b: jnp.sin(a @ b)                                                  # noqa: E731
    lowered = check_value_and_grad(f, (a, b), (0, 1),
                                   tol={**table.FWD_TOL, np.dtype(F32): (1e-4, 1e-4)})
    assert f"{split}(" in lowered.source
    if split != "blas_gemm":
        assert "blas_gemm(" not in lowered.source


def test_sgd_update_split_over_threads():
    """A train step's fused weight update ``W - lr * x.T @ g`` (a product with alpha and beta,
    in place in the donated weights) as a split product: the numbers of the unsplit one."""
    rng = np.random.default_rng(5)
    params = {"w": rng.standard_normal((64, 256)).astype(F32) * 0.1,
              "v": rng.standard_normal((256, 8)).astype(F32) * 0.1}
    x = rng.standard_normal((1024, 64)).astype(F32)
    y = rng.standard_normal((1024, 8)).astype(F32)

    def loss(p, x, y):
        return jnp.mean((jnp.tanh(x @ p["w"]) @ p["v"] - y) ** 2)
    lr = 0.05
    opt = jitgraph.optim.sgd(lr)
    step = jitgraph.train_step(loss, opt)
    state = opt.init(params)
    assert "par_gemm(" in step.lower(params, state, x, y).show("source")
    expect = {k: v.astype(F64) for k, v in params.items()}
    got = params
    for _ in range(3):
        g = jitgraph.grad(loss)({k: v.astype(F64) for k, v in expect.items()}, x, y)
        expect = {k: expect[k] - lr * np.asarray(g[k]) for k in expect}
        got, state, _ = step(got, state, x, y)
    for key in params:
        np.testing.assert_allclose(np.asarray(got[key]), expect[key], rtol=1e-4, atol=1e-5)


def test_threads_share_the_one_blas_thread_block():
    """Programs splitting products over Numba's threads, called from four Python threads at
    once: right numbers, and BLAS's own thread counts as they were afterwards (each call sets
    one BLAS thread; overlapping calls must not leave it there)."""
    import threading
    from threadpoolctl import threadpool_info
    a, b = rn(512, 256, dtype=F32), rn(256, 512, dtype=F32) * 0.05
    f = jitgraph.jit(lambda a, b: jnp.tanh(a @ b) * 2.0)
    want = np.tanh(a.astype(F64) @ b.astype(F64)) * 2.0
    assert "par_gemm(" in f.lower(a, b).source
    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    errors = []

    def work():
        for _ in range(30):
            err = float(np.abs(np.asarray(f(a, b)) - want).max())
            if err > 1e-4:
                errors.append(err)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == counts


def test_integer_products_at_size():
    """Integer products have no BLAS: the loop product, at a size past the threshold."""
    a = _rng.integers(-5, 6, (512, 256))
    b = _rng.integers(-5, 6, (256, 600))
    lowered = check_value_and_grad(lambda a, b: a @ b + 1, (a, b), grad=False)
    assert "matmul_loop" in lowered.source


# ------------------------------------------------------------------ compiled loops
@pytest.mark.parametrize("length", [T.COMPILED_LOOP_MIN_LENGTH - 1, T.COMPILED_LOOP_MIN_LENGTH])
def test_scan_on_both_sides_of_the_compiled_loop_threshold(length, monkeypatch):
    """A scan (and the reverse scan of its gradient) runs from a Python loop below the
    threshold and as a compiled loop from it on."""
    from jitgraph.compiler import loops
    compiled = []
    real = loops._scan_compiled_loop

    def spy(node):
        r = real(node)
        compiled.append(r is not None)
        return r
    monkeypatch.setattr(loops, "_scan_compiled_loop", spy)
    w = np.eye(8) * 0.5 + rn(8, 8) * 0.05
    xs = rn(length, 8)

    def f(w, xs):
        h, hs = lax.scan(lambda h, x: (jnp.tanh(h * w[0] + x) + jnp.sin(h), h), jnp.zeros(8), xs)
        return jnp.sum(hs * hs) + jnp.sum(h)
    check_value_and_grad(f, (w, xs), (0, 1))
    assert compiled and all(c == (length >= T.COMPILED_LOOP_MIN_LENGTH) for c in compiled)


# ------------------------------------------------------------------ dynamic shapes
def test_dynamic_program_at_parallel_sizes():
    """A dynamic program made at parallel sizes serves another parallel size (fitted loop
    bounds, offsets and clamps of concat/pad/roll) with the numbers a fixed-size compile of
    the same function gives."""
    def f(x, y):
        c = jnp.concatenate([x, y * 2.0], axis=0)
        return jnp.pad(c, ((2, 1), (0, 3))) * 0.5 + jnp.roll(c, 3, axis=0).sum(axis=1).mean(), \
            jnp.sum(nn.softmax(c), axis=0)
    dyn = jitgraph.jit(f, dynamic_dims={0: 0, 1: 0})
    fixed = jitgraph.jit(f, dynamic=False)
    cols = 16
    for rows in (PAR // cols, PAR // cols + 37, 3 * PAR // cols + 5):
        x, y = rn(rows, cols), rn(rows + 3, cols)
        table.assert_same(dyn(x, y), fixed(x, y), f"dynamic vs fixed at {rows} rows",
                          table.FWD_TOL)
        table.assert_same(dyn(x, y), reference(f, (x, y)), f"dynamic at {rows} rows",
                          table.FWD_TOL)
    entries = dyn.cache_entries()
    assert any(e["dynamic"] for e in entries)
    assert len({e["program"] for e in entries}) == 1, entries


def test_thresholds_are_the_ones_in_use():
    """The tier's sizes come from the thresholds the code generators read."""
    from jitgraph.compiler import loops
    from jitgraph.compiler.backends import cpu as codegen_cpu, cuda as codegen_cuda
    assert codegen_cpu.PARALLEL_MIN_WORK is T.PARALLEL_MIN_WORK
    assert codegen_cpu.PARALLEL_MIN_WORK_WITH_BLAS is T.PARALLEL_MIN_WORK_WITH_BLAS
    assert codegen_cpu.PARALLEL_MIN_PRODUCT is T.PARALLEL_MIN_PRODUCT
    assert codegen_cpu.PARALLEL_MIN_WORK_BESIDE_PRODUCTS is T.PARALLEL_MIN_WORK_BESIDE_PRODUCTS
    assert loops.COMPILED_LOOP_MIN_LENGTH is T.COMPILED_LOOP_MIN_LENGTH
    assert codegen_cuda.SPLIT_MIN_INNER is T.SPLIT_MIN_INNER
    assert math.log2(T.PARALLEL_MIN_WORK).is_integer()

