"""How fast the machine's GEMMs are, against its FMA peak: what bounds the matmul-bound steps.

    python bench/gemm_peak.py [--quick] [--json out.json]

1. FMA peak: a loop of register-only vector FMAs (ten independent ``<8 x float>`` chains,
   LLVM IR compiled here with llvmlite for this CPU), run on 1 thread and on every bench
   thread at once (ctypes releases the GIL). No memory traffic: the most FLOPs a core does.
2. A float32 ``n x n x n`` product (2048 by default) through each library: NumPy's
   ``np.matmul`` (its bundled OpenBLAS), jitgraph's ``blas_gemm`` (compiled code calls the same
   library, ``kernels/blas.py``), OpenBLAS limited to one thread (threadpoolctl), PyTorch and
   jax.jit where installed; GFLOP/s from the median time, and the share of the FMA peak.
The MLP steps' products run at the speed of the best of these (see ``matmul_bound.py``).
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy loads)

import ctypes
import threading
import time

import numpy as np

from common import guarded, import_jax, import_jitgraph, import_torch, print_kv, timeit

# independent accumulators (enough to hide the FMA latency at two FMAs a cycle, few enough to
# stay in the 16 AVX2 registers with the two operands), float32 lanes in one AVX2 register
CHAINS, LANES = 10, 8


def _fma_loop():
    """A C-callable ``float f(int64 n)``: n iterations of CHAINS independent vector FMAs."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    vec, i64 = ir.VectorType(ir.FloatType(), LANES), ir.IntType(64)
    mod = ir.Module(name="fma_peak")
    fma = ir.Function(mod, ir.FunctionType(vec, [vec] * 3), name=f"llvm.fma.v{LANES}f32")
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [i64]), name="fma_loop")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    # distinct starting values, so no compiler may merge the chains into one
    starts = [ir.Constant(vec, [1.0 + 1e-3 * c] * LANES) for c in range(CHAINS)]
    x = ir.Constant(vec, [0.9999999] * LANES)
    y = ir.Constant(vec, [1e-7] * LANES)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    accs = [b.phi(vec) for _ in range(CHAINS)]
    new = [b.call(fma, [a, x, y]) for a in accs]
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(nxt, loop)
    for a, n, s0 in zip(accs, new, starts):
        a.add_incoming(s0, entry)
        a.add_incoming(n, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = new[0]
    for n in new[1:]:
        total = b.fadd(total, n)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), tm)
    engine.finalize_object()
    f = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("fma_loop"))
    f.engine = engine               # the machine code lives as long as its engine
    return f


def fma_peak(threads: int, n: int) -> float:
    """GFLOP/s of ``threads`` threads each running the FMA loop ``n`` times (best of 3)."""
    f = _fma_loop()
    f(1000)
    best = 0.0
    for _ in range(3):
        ts = [threading.Thread(target=f, args=(n,)) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        best = max(best, threads * n * CHAINS * LANES * 2 / dt / 1e9)
    return best


def gemm_rates(size: int, repeats: int) -> dict[str, float]:
    """GFLOP/s of a float32 size^3 product in each available library (median time)."""
    r = np.random.default_rng(0)
    a = r.standard_normal((size, size), dtype=np.float32)
    b = r.standard_normal((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    flops = 2.0 * size ** 3
    rates: dict[str, float] = {}

    def rate(name, fn):
        rates[name] = flops / timeit(fn, repeats=repeats, max_time=20.0).median / 1e9

    rate("numpy np.matmul (its OpenBLAS)", lambda: np.matmul(a, b, out=c))
    jg = import_jitgraph()
    if jg is not None:
        from jitgraph.kernels import blas
        from jitgraph.kernels.matmul import blas_gemm
        rate(f"jitgraph blas_gemm ({blas.library()}'s BLAS)",
             lambda: blas_gemm(1.0, a, 0, b, 0, 0.0, c))

    def one_thread():
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=1, user_api="blas"):
            rate("numpy np.matmul, BLAS on 1 thread", lambda: np.matmul(a, b, out=c))
    guarded("1-thread BLAS", one_thread)
    torch = import_torch()
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rate("torch.mm", lambda: torch.mm(ta, tb))
    jax = import_jax()
    if jax is not None:
        mm = jax.jit(lambda x, y: x @ y)
        ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
        rate("jax.jit matmul", lambda: mm(ja, jb))
    return rates


def run(args) -> dict:
    n = 20_000_000 if args.quick else 200_000_000
    peak1 = fma_peak(1, n)
    peak = fma_peak(common.THREADS, n)
    print_kv("FMA peak (register-only AVX2 FMAs, best of 3)", [
        ("1 thread", f"{peak1:7.1f} GFLOP/s"),
        (f"{common.THREADS} threads", f"{peak:7.1f} GFLOP/s")])
    print()
    size = 512 if args.quick else 2048
    rates = gemm_rates(size, 5 if args.quick else 15)
    print_kv(f"float32 {size}^3 product (median of repeats)", [
        (k, f"{v:7.1f} GFLOP/s   ({100 * v / (peak1 if '1 thread' in k else peak):.0f} % of "
            f"the {'1-thread' if '1 thread' in k else f'{common.THREADS}-thread'} FMA peak)")
        for k, v in rates.items()])
    return {"fma_peak_gflops": {"1": peak1, str(common.THREADS): peak},
            "gemm_gflops": rates, "size": size}


def main(argv=None) -> dict:
    return common.run_main(__doc__, "GEMM vs FMA peak", "gemm_peak", run, argv)


if __name__ == "__main__":
    main()
