"""A threaded loop kernel and the product after it run as one step (``threaded.py``'s product
tail, ``CpuCodegen.pair_steps``): each thread computes a chunk of the kernel's rows, then the
product of the rows of the left operand that chunk wrote, while they are in its cache (a
convolution's im2col and its product).

Checked here, with the pairing's size threshold lowered to ``SMALL`` (it is a quarter of the
CPU's last-level cache, 16-64 MiB: ``thresholds.product_tail_min_bytes``), and once at the
machine's own threshold: the driver calls the paired launcher and no separate product; values match float64 NumPy and the reference
interpreter (float32 and float64, the right operand stored or transposed, a convolution and its
gradients); the same bits on one thread and on several; runtime sizes; the profiler's row for the
pair; a smaller operand stays unpaired; the launcher refuses arguments that do not fit, and the
fallback without launchers computes the same.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

import jitgraph
import jitgraph.lax as lax
import jitgraph.numpy as jnp
from jitgraph.compiler import threaded
from jitgraph.compiler import thresholds as T

pytestmark = pytest.mark.skipif(not threaded.available(),
                                reason="launchers need Linux and a Numba numba_patches checked")

SMALL = 4 << 20         # the threshold these tests compile with (an operand of 4 MiB or more)


@pytest.fixture(scope="module", autouse=True)
def small_threshold():
    T.product_tail_min_bytes()                  # (the machine's, read once)
    saved = list(T._TAIL_MIN)
    T._TAIL_MIN[:] = [SMALL]
    yield
    T._TAIL_MIN[:] = saved


def dense(x, w):
    return jnp.tanh(x) * 2.0 @ w


def dense_t(x, w):
    return (jnp.tanh(x) * 2.0) @ w.T


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_ref(x, w):
    """The convolution in float64 NumPy: padded input, one product per tap."""
    kh, kw = w.shape[:2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (kh // 2,) * 2, (kw // 2,) * 2, (0, 0)))
    h, wd = x.shape[1:3]
    out = 0
    for i in range(kh):
        for j in range(kw):
            out = out + xp[:, i:i + h, j:j + wd, :] @ w[i, j].astype(np.float64)
    return out


def _rows_for(k: int, itemsize: int) -> int:
    """Rows of a (rows, k) left operand just past the pairing threshold."""
    return -(-SMALL // (k * itemsize)) + 37


def _inputs(dtype, transposed: bool):
    r = np.random.default_rng(7)
    k, n = 160, 48
    m = _rows_for(k, np.dtype(dtype).itemsize)
    x = r.standard_normal((m, k)).astype(dtype)
    w = (r.standard_normal((n, k) if transposed else (k, n)) * 0.1).astype(dtype)
    return x, w


def _paired(f, *args) -> bool:
    src = f.lower(*args).source
    return threaded.TAIL_PREFIX in src


@pytest.fixture(scope="module", params=[(np.float32, False), (np.float32, True),
                                        (np.float64, False)],
                ids=["f32", "f32_transposed", "f64"])
def dense_case(request):
    dtype, transposed = request.param
    x, w = _inputs(dtype, transposed)
    fn = dense_t if transposed else dense
    f = jitgraph.jit(fn)
    return f, fn, (x, w), f(x, w), transposed


def test_the_pair_is_one_step_with_no_separate_product(dense_case):
    f, _, args, _, _ = dense_case
    low = f.lower(*args)
    assert threaded.TAIL_PREFIX in low.source, low.source
    driver = low.source.rsplit("\n\n\n", 1)[1]
    assert "par_gemm(" not in driver and "blas_gemm(" not in driver, driver
    assert any(launch.tail >= 0 for launch in low.program.launches)


def test_values_match_numpy_and_the_reference(dense_case):
    f, fn, (x, w), out, transposed = dense_case
    w64 = w.astype(np.float64)
    expect = (np.tanh(x.astype(np.float64)) * 2) @ (w64.T if transposed else w64)
    tol = 1e-4 if x.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out, expect, rtol=tol, atol=tol)
    [ref] = jitgraph.interpret(jitgraph.make_graph(fn)(x, w), [x, w])
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def test_same_bits_on_one_thread_and_on_all(dense_case):
    f, _, args, out, _ = dense_case
    threads = numba.get_num_threads()
    runs = []
    try:
        for n in (1, threads, 1):
            numba.set_num_threads(n)
            runs.append(f(*args))
    finally:
        numba.set_num_threads(threads)
    for run in runs:
        np.testing.assert_array_equal(run, out)


@pytest.mark.parametrize("m,k,n", [(512, 160, 48),                   # 320 KiB: in cache
                                   (_rows_for(64, 4), 64, T.PRODUCT_TAIL_MAX_COLUMNS + 1),
                                   (_rows_for(1100, 4), 1100, 64)],   # 275 KiB right operand
                         ids=["small_operand", "many_columns", "large_right_operand"])
def test_unpaired_where_it_would_not_pay(m, k, n):
    r = np.random.default_rng(1)
    x = r.standard_normal((m, k)).astype(np.float32)
    w = (r.standard_normal((k, n)) * 0.1).astype(np.float32)
    f = jitgraph.jit(dense)
    assert not _paired(f, x, w)
    np.testing.assert_allclose(f(x, w), (np.tanh(x.astype(np.float64)) * 2) @ w,
                               rtol=1e-4, atol=1e-4)


def test_switched_off_the_two_steps_stay_apart(dense_case, monkeypatch):
    f, fn, args, out, _ = dense_case
    monkeypatch.setenv("JITGRAPH_PRODUCT_TAIL", "0")
    apart = jitgraph.jit(fn)
    assert not _paired(apart, *args)
    tol = 1e-4 if out.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(apart(*args), out, rtol=tol, atol=tol)


def test_at_the_machines_own_threshold():
    """Paired from ``product_tail_min_bytes()`` of this CPU on, and not below it."""
    saved = list(T._TAIL_MIN)
    T._TAIL_MIN.clear()
    try:
        limit = T.product_tail_min_bytes()
        assert T.PRODUCT_TAIL_MIN_BYTES_FLOOR <= limit <= T.PRODUCT_TAIL_MIN_BYTES_CAP
        r = np.random.default_rng(2)
        k, n = 64, 8
        w = (r.standard_normal((k, n)) * 0.1).astype(np.float32)
        for rows, paired in ((limit // (4 * k) + 1, True), (limit // (4 * k) - 1, False)):
            x = r.standard_normal((rows, k), dtype=np.float32)
            f = jitgraph.jit(dense)
            assert _paired(f, x, w) is paired, rows
            np.testing.assert_allclose(f(x, w), (np.tanh(x) * 2) @ w, rtol=1e-4, atol=1e-4)
    finally:
        T._TAIL_MIN[:] = saved


@pytest.fixture(scope="module")
def conv_case():
    r = np.random.default_rng(3)
    x = r.standard_normal((48, 12, 12, 24)).astype(np.float32)   # patches: 6912 x 216
    w = (r.standard_normal((3, 3, 24, 32)) * 0.2).astype(np.float32)
    assert 48 * 144 * 216 * 4 >= SMALL
    return x, w


def test_convolution_forward_and_gradients(conv_case):
    x, w = conv_case
    f = jitgraph.jit(conv)
    assert _paired(f, x, w)
    np.testing.assert_allclose(f(x, w), conv_ref(x, w), rtol=1e-4, atol=1e-4)
    loss = lambda x, w: jnp.sum(jnp.tanh(conv(x, w)))  # noqa: E731
    g = jitgraph.jit(jitgraph.grad(loss, argnums=(0, 1)))
    assert _paired(g, x, w)
    gx, gw = g(x, w)
    rx, rw = jitgraph.interpret(jitgraph.make_graph(jitgraph.grad(loss, argnums=(0, 1)))(x, w),
                                [x, w])
    np.testing.assert_allclose(gx, rx, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(gw, rw, rtol=2e-4, atol=2e-3)
    # one gradient entry against float64 central differences of the NumPy convolution
    e = np.zeros_like(w, dtype=np.float64)
    e[1, 2, 3, 4] = 1e-3
    f64 = lambda w: float(np.sum(np.tanh(conv_ref(x, w))))  # noqa: E731
    fd = (f64(w + e) - f64(w - e)) / 2e-3
    assert abs(fd - float(gw[1, 2, 3, 4])) <= 1e-3 * max(1.0, abs(fd))


def test_the_input_gradient_product_is_a_head_of_the_col2im(conv_case, monkeypatch):
    """The input gradient's product (dY @ W^T) is read only by the col2im loop, each image's
    rows by that image's row of it: computed chunk by chunk into each thread's buffer and
    never stored (no scratch buffer of its size), the same bits on one thread and on two."""
    x, w = conv_case
    loss = lambda x: jnp.sum(jnp.tanh(conv(x, w)) * 0.5)  # noqa: E731
    g = jitgraph.jit(jitgraph.grad(loss))
    low = g.lower(x)
    assert threaded.HEAD_PREFIX in low.source, low.source
    assert any(launch.head for launch in low.program.launches)
    m, n = x.shape[0] * x.shape[1] * x.shape[2], w.shape[0] * w.shape[1] * w.shape[2]
    # with the weight gradient, the patches stay live until it: the input gradient's product
    # needed a buffer of its own, and has none paired
    both = jitgraph.grad(lambda x, w: jnp.sum(jnp.tanh(conv(x, w))), argnums=(0, 1))
    paired = jitgraph.jit(both).lower(x, w)
    monkeypatch.setenv("JITGRAPH_PRODUCT_TAIL", "0")
    apart = jitgraph.jit(both).lower(x, w)
    monkeypatch.delenv("JITGRAPH_PRODUCT_TAIL")
    temp = [p.program.stages["memory"].stats().temp_size_in_bytes for p in (paired, apart)]
    assert temp[0] <= temp[1] - m * n * 4, temp
    threads = numba.get_num_threads()
    runs = []
    try:
        for k in (1, threads):
            numba.set_num_threads(k)
            runs.append(np.asarray(g(x)))
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(runs[0], runs[1])
    [ref] = jitgraph.interpret(jitgraph.make_graph(jitgraph.grad(loss))(x), [x])
    np.testing.assert_allclose(runs[0], ref, rtol=2e-4, atol=2e-5)
    kinds = [s.kind for s in jitgraph.profile(g, x, reps=3, peaks=False).kernels]
    assert "matmul+loop" in kinds and "loop+matmul" in kinds, kinds


def test_the_head_launcher_refuses_arguments_that_do_not_fit(conv_case):
    x, w = conv_case
    g = jitgraph.jit(jitgraph.grad(lambda x: jnp.sum(jnp.tanh(conv(x, w)))))
    program = g.lower(x).program
    launch = next(launch for launch in program.launches if launch.head)
    fn = getattr(program.module, launch.callable_name)
    kernel_args = [np.zeros(8, np.dtype(d)) for d in launch.dtypes]
    rows = x.shape[0]
    r, k, n = x.shape[1] * x.shape[2], w.shape[3], w.size // w.shape[3]
    a, b = np.zeros(rows * r * k, np.float32), np.zeros(k * n, np.float32)
    with pytest.raises(TypeError, match=launch.callable_name):
        fn(*kernel_args, a[:-1], b, r, k, n, 1)         # the left operand one element short
    with pytest.raises(TypeError):
        fn(*kernel_args, a, b[:-1], r, k, n, 1)         # the right operand short
    with pytest.raises(TypeError):
        fn(*kernel_args, a, b, 0, k, n, 1)              # no rows
    with pytest.raises(TypeError):
        fn(*kernel_args, a, b, r, k, n)                 # one argument short


def test_runtime_sizes_of_a_gradient(conv_case):
    x, w = conv_case
    loss = lambda x, w: jnp.sum(jnp.tanh(conv(x, w)))  # noqa: E731
    g = jitgraph.jit(jitgraph.grad(loss, argnums=(0, 1)), dynamic_dims={0: 0})
    ref = jitgraph.grad(loss, argnums=(0, 1))
    for n in (48, 33):
        xs = np.concatenate([x, x])[:n]
        got = g(xs, w)
        want = jitgraph.interpret(jitgraph.make_graph(ref)(xs, w), [xs, w])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-3)
    src = g.lower(x, w).source
    assert threaded.HEAD_PREFIX in src and threaded.TAIL_PREFIX in src
    assert [e["dynamic"] for e in g.cache_entries()] == [True, True]


def test_runtime_sizes(conv_case):
    x, w = conv_case
    f = jitgraph.jit(conv, dynamic_dims={0: 0})
    for n in (48, 40, 61):
        xs = np.concatenate([x, x])[:n]
        np.testing.assert_allclose(f(xs, w), conv_ref(xs, w), rtol=1e-4, atol=1e-4)
    assert threaded.TAIL_PREFIX in f.lower(x, w).source


def test_profile_shows_the_pair_as_one_step(conv_case):
    x, w = conv_case
    f = jitgraph.jit(conv)
    f(x, w)
    result = jitgraph.profile(f, x, w, reps=3, peaks=False)
    kinds = [s.kind for s in result.kernels]
    assert "loop+matmul" in kinds, kinds
    pair = result.kernels[kinds.index("loop+matmul")]
    assert "windows" in pair.ops and "matmul" in pair.ops and pair.flops > 0
    assert not any(s.kind == "matmul" for s in result.kernels)


def test_the_launcher_refuses_arguments_that_do_not_fit(dense_case):
    f, _, args, _, transposed = dense_case
    program = f.lower(*args).program
    launch = next(launch for launch in program.launches if launch.tail >= 0)
    fn = getattr(program.module, launch.callable_name)
    x, w = args
    rows, k = x.shape
    n = w.size // k
    dt = x.dtype
    kernel_args = [np.zeros(x.size, np.dtype(d)) for d in launch.dtypes]
    b, c = np.zeros(k * n, dt), np.zeros(rows * n, dt)
    tb = int(transposed)
    fn(*kernel_args, b, c, 1, k, n, tb)             # fits: runs
    with pytest.raises(TypeError, match=launch.callable_name):
        fn(*kernel_args, b, c[:-1], 1, k, n, tb)     # the output one element short
    with pytest.raises(TypeError):
        fn(*kernel_args, b[:-1], c, 1, k, n, tb)     # the right operand short
    with pytest.raises(TypeError):
        fn(*kernel_args, b, c, 2, k, n, tb)          # rows that overrun the left operand
    with pytest.raises(TypeError):
        fn(*kernel_args, b, c, 1, k, 0, tb)          # no columns
    with pytest.raises(TypeError):
        fn(*kernel_args, b, c, 1, k, n, 2)           # not a flag
    with pytest.raises(TypeError):
        fn(*kernel_args, b.astype(np.float16), c, 1, k, n, tb)  # another dtype
    with pytest.raises(TypeError):
        fn(*kernel_args, b, c, 1, k, n)              # one argument short


def test_the_fallback_without_launchers_computes_the_same():
    """``serial_tail``: the kernel over all its rows, then the product as ``par_gemm``."""
    r = np.random.default_rng(5)
    src = r.standard_normal(6 * 4 * 5).astype(np.float64)
    a = np.zeros(6 * 4 * 5)
    calls = []

    def rows(src, a):               # a kernel writing rows of the left operand: 6 rows of 4 x 5
        calls.append(1)
        a[:] = src * 3.0

    def product(alpha, a2, ta, b2, tb, beta, c2):
        c2[:] = alpha * (a2.T if ta else a2) @ (b2.T if tb else b2) + (beta * c2 if beta else 0)

    for tb in (0, 1):
        b = r.standard_normal(5 * 7)
        c = np.full(6 * 4 * 7, np.nan)
        threaded.serial_tail(rows, 2, 1, product)(src, a, b, c, 4, 5, 7, tb)
        bm = b.reshape(7, 5).T if tb else b.reshape(5, 7)
        np.testing.assert_allclose(c.reshape(24, 7), (src * 3.0).reshape(24, 5) @ bm)
    assert len(calls) == 2


def test_the_head_fallback_without_launchers_computes_the_same():
    """``serial_head``: the product whole into a new array, then the kernel over all its
    rows reading it."""
    r = np.random.default_rng(6)
    a = r.standard_normal(6 * 4 * 5)           # 6 kernel rows of 4 x 5: the product's rows
    seen = []

    def rows(c, out):                          # the kernel: reads the product, writes out
        seen.append(c.copy())
        out[:] = c * 2.0

    def product(alpha, a2, ta, b2, tb, beta, c2):
        c2[:] = alpha * (a2.T if ta else a2) @ (b2.T if tb else b2)

    for tb in (0, 1):
        b = r.standard_normal(5 * 7)
        out = np.zeros(6 * 4 * 7)
        placeholder = np.zeros(1)
        threaded.serial_head(rows, 2, 0, lambda *args: 6, product)(
            placeholder, out, a, b, 4, 5, 7, tb)
        bm = b.reshape(7, 5).T if tb else b.reshape(5, 7)
        np.testing.assert_allclose(out.reshape(24, 7), 2.0 * (a.reshape(24, 5) @ bm))
        np.testing.assert_allclose(seen[-1], (a.reshape(24, 5) @ bm).ravel())


def test_reads_of_a_row_block_are_proved_from_the_source():
    from jitgraph.compiler.row_reads import reads_own_block
    src = """def k(lo, hi, a0, a1):
    for o0_u in range(lo, hi):
        o0 = np.int64(o0_u) & 0x7FFFFFFFFFFFFFFF
        for o1 in range(18):
            for r0 in range(5):
                s0_0 = a0[o0 * 112 + min(max((o1 - r0), 0), 13) * 8 + r0]
                a1[o0 * 18 + o1] = s0_0
"""
    assert reads_own_block(src, "a0", 112)           # at most 13 * 8 + 4 = 108 < 112
    assert not reads_own_block(src, "a0", 108)       # the row's stride must be the block
    assert not reads_own_block(src, "a1", 18)        # written
    assert not reads_own_block(src.replace("* 8 + r0", "* 8 + r0 + 4"), "a0", 112)  # overruns
    assert not reads_own_block(src.replace("o0 * 112 + ", "o0 * 112 + o0 + "), "a0", 112)
    assert not reads_own_block(src.replace("r0]", "r0 + n]"), "a0", 112)    # an unknown
    assert not reads_own_block(src.replace("a1[o0 * 18 + o1] = s0_0",
                                           "a1[o0 * 18 + o1] = f(a0)"), "a0", 112)


def test_tail_launcher_ir_verifies_for_both_dtypes():
    from jitgraph.compiler import native
    import llvmlite.binding as llvm
    for dt in ("float32", "float64"):
        base = threaded.Launch("loop_x", "entry_x", ("int64", dt, dt, "size"), 9,
                               rows_scale=3, rows_arg=3)
        tail = threaded.Launch("loop_x", "entry_x", base.dtypes, 9, rows_scale=3, rows_arg=3,
                               tail=1)
        assert tail.callable_name == f"{threaded.TAIL_PREFIX}1_loop_x"
        assert threaded.tail_call(tail.callable_name) == ("loop_x", 1, False)
        assert threaded.launched_kernel(tail.callable_name) == "loop_x"
        assert threaded.launched_kernel("threads_loop_x") == "loop_x"
        head = threaded.Launch("loop_x", "entry_x", base.dtypes, 9, rows_scale=3, rows_arg=3,
                               tail=2, head=True)
        assert head.callable_name == f"{threaded.HEAD_PREFIX}2_loop_x"
        assert threaded.tail_call(head.callable_name) == ("loop_x", 2, True)
        text = native.IR_GLOBALS + threaded.IR_DECLARATIONS + threaded.launcher_ir(
            0, base) + threaded.launcher_ir(1, tail) + threaded.launcher_ir(2, head)
        llvm.parse_assembly(text).verify()
    with pytest.raises(ValueError):         # no product of integers
        threaded.launcher_ir(0, threaded.Launch("loop_x", "e", ("int64", "int64"), 9, tail=1))
