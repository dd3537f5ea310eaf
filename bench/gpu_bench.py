"""GPU benchmarks of jitgraph's CUDA backend beside PyTorch (eager, torch.compile), JAX and CuPy.

Workloads (float32, parameters and data on the device, all in one run):

* ``elementwise``: value and gradient of ``sum(tanh(x)*sigmoid(1.5x+0.1)+0.5x^2)`` at 2^26
  elements, as GB/s of the fused minimum (8 bytes per element), beside the device-to-device
  copy bandwidth measured in the same run;
* ``softmax_xent``: cross-entropy forward + backward on (8192, 32000) logits;
* ``mlp_small`` / ``mlp_large``: one SGD step of 784-512-512-10 at batch 128 and
  784-2048-2048-10 at batch 512 (tanh, softmax cross-entropy, lr 0.1);
* ``call_overhead``: a cached call of a small function on 16-element device arrays (µs);
* ``matmul``: 4096^3, GFLOP/s of jitgraph's cuBLAS path and its fallback kernel, CuPy, PyTorch.

Each row is appended to ``--out`` (and flushed) as soon as it is measured, after a header
naming the GPU, driver, CUDA runtime and library versions, so a timeout or a crash later keeps
what was measured; the whole table is printed at the end. ``median`` is the median of the
timed repeats (``reps``; fewer than asked where the implementation's repeat time ran out);
``first call`` is the first call alone (tracing and compiling included); ``vs jitgraph`` =
that row's time / jitgraph's (> 1: jitgraph is faster). ``check`` compares the first call's
result with a float64 NumPy reference computed on a small part only (the first 2^16 gradient
elements, the first 256 rows of the cross-entropy gradient, a 64x64 corner of the matmul;
the MLP's initial loss): ``MISMATCH`` marks a row, it does not stop the run. A failure is a
row ``FAILED: <reason>``; every workload runs in its own ``try`` under its own time cap (its
share of ``--budget``), and the run goes on.

PyTorch and JAX run in strict float32 unless ``--tf32`` (torch ``allow_tf32`` off for matmul
and cuDNN, ``jax_default_matmul_precision="highest"``); jitgraph and CuPy always use plain
float32 GEMM (``CUPY_TF32=0``). JAX does not preallocate GPU memory. ``torch.compile`` runs
with ``mode=None`` (``--torch-mode`` to change) and ``dynamic=False``, compiled once per
workload and implementation: its first call compiles, the repeats reuse it.

Exit status 0 when at least one row was measured, 1 when none was, 2 on bad options.
``--sim`` runs every workload at tiny sizes under Numba's CUDA simulator, to test this script
without a GPU (its numbers mean nothing).

    python bench/gpu_bench.py [--out bench/gpu_results.md] [--append] [--sim] [--quick]
                              [--budget SECONDS] [--tf32] [--only elementwise,matmul]
"""
from __future__ import annotations

import os

# before anything imports jax or cupy
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
os.environ["CUPY_TF32"] = "0"

import importlib.metadata  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

from gpu_args import Interrupted, StepTimeout, on_termination, parse_gpu_args, time_cap  # noqa: E402

T0 = time.monotonic()
WORKLOADS = ("elementwise", "xent", "mlp_small", "mlp_large", "overhead", "matmul")
# shares of the time budget (a workload that ends early leaves its time to the next ones)
WEIGHTS = {"elementwise": 3, "xent": 3, "mlp_small": 3, "mlp_large": 3, "overhead": 1,
           "matmul": 2}


def _options(p) -> None:
    p.add_argument("--only", default="", help="comma-separated workloads: " + ", ".join(WORKLOADS))
    p.add_argument("--append", action="store_true",
                   help="append to --out instead of starting it afresh (gpu_check.sh)")
    p.add_argument("--tf32", action="store_true",
                   help="let PyTorch and JAX use TF32 matmuls (default: strict float32)")
    p.add_argument("--torch-mode", default=None, help="torch.compile mode (default None)")
    p.add_argument("--peers-cpu", action="store_true",
                   help="with --sim: run the PyTorch and JAX rows on the CPU (checks their code)")


ARGS = parse_gpu_args(__doc__.splitlines()[0], _options)
on_termination()

import numpy as np  # noqa: E402

import jitgraph  # noqa: E402
import jitgraph.numpy as jnp  # noqa: E402
from jitgraph import nn  # noqa: E402

SIM = ARGS.sim
PEERS_CPU = SIM and ARGS.peers_cpu
DEV = "cpu" if PEERS_CPU else "cuda"          # where the PyTorch rows run
QUICK = ARGS.quick
REPS = 2 if SIM else (10 if QUICK else 30)
WARMUP = 0 if SIM else 2                      # calls after the first, before timing
REP_TIME = 2.0 if SIM else (1.5 if QUICK else 3.0)   # seconds of timed repeats per row, at most
# --quick on a GPU: 150 s over four workloads (see main), so that each workload's share (about
# 40 s) holds torch.compile's cold compile (15-40 s) beside the other rows
BUDGET = ARGS.budget if ARGS.budget is not None else (
    (100.0 if SIM else 150.0) if QUICK else (400.0 if SIM else 300.0))
DEADLINE = T0 + BUDGET - 2.0                  # 2 s left to print the table
CHECK_N = 2 ** 16                             # elements checked of the elementwise gradient
CHECK_ROWS = 256                              # rows checked of the cross-entropy gradient
SIZES = {
    "elementwise": 2 ** 10 if SIM else 2 ** 26,
    "xent": (8, 50) if SIM else (8192, 32000),
    "mlp_small": ([8, 6, 6, 3], 4) if SIM else ([784, 512, 512, 10], 128),
    "mlp_large": ([8, 10, 10, 3], 5) if SIM else ([784, 2048, 2048, 10], 512),
    "matmul": 20 if SIM else 4096,
}
ROWS: list[dict] = []
ERRORS: list[str] = []
STATE = {"deadline": DEADLINE, "cap": BUDGET, "timed_out": False, "started": []}


# ---------------------------------------------------------------- optional peers
def _import(name):
    if SIM and (name == "cupy" or not PEERS_CPU):
        return None                  # no GPU: peers can't run
    try:
        mod = __import__(name)
        if name == "jax":
            importlib.import_module("jax.numpy")      # a submodule: import it
            if not PEERS_CPU and not any(d.platform == "gpu" for d in mod.devices()):
                raise RuntimeError(f"jax sees no GPU ({mod.devices()})")
        if name == "torch" and not PEERS_CPU and not mod.cuda.is_available():
            raise RuntimeError("torch.cuda is not available")
        if name == "cupy":
            mod.cuda.runtime.getDeviceCount()
        return mod
    except Exception as e:
        ERRORS.append(f"{name}: {type(e).__name__}: {_one_line(e)}")
        return None


def _one_line(e) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else "")[:160]


torch = _import("torch")
jax = _import("jax")
cupy = _import("cupy")
if torch is not None:
    torch.backends.cuda.matmul.allow_tf32 = ARGS.tf32
    torch.backends.cudnn.allow_tf32 = ARGS.tf32
if jax is not None:
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if ARGS.tf32 else "highest")


def sync_all(last=None):
    """Wait for the device: the whole CUDA context (jitgraph's, CuPy's and PyTorch's work),
    and ``last`` when it is a JAX array (JAX dispatches asynchronously from the host)."""
    jitgraph.device.cuda_api().synchronize()
    if torch is not None and DEV == "cuda":
        torch.cuda.synchronize()
    if cupy is not None:
        cupy.cuda.Device().synchronize()
    if jax is not None and isinstance(last, jax.Array):
        last.block_until_ready()


def median_seconds(fn, inner: int = 1, reps: int = REPS, warmup: int = WARMUP):
    """Time ``fn``: the first call alone (compiles), ``warmup`` more, then up to ``reps``
    timed repeats of ``inner`` calls each followed by a device synchronisation (launches are
    asynchronous), stopping early after ``REP_TIME`` seconds of repeats or near the workload's
    cap. Returns (median seconds per call, repeats, first-call seconds, first call's result)."""
    t0 = time.perf_counter()
    first = last = fn()
    sync_all(last)
    first_s = time.perf_counter() - t0
    for _ in range(warmup):
        last = fn()
    sync_all(last)
    times = []
    stop = min(time.monotonic() + REP_TIME, STATE["deadline"] - 1.0)
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            last = fn()
        sync_all(last)
        times.append((time.perf_counter() - t0) / inner)
        if time.monotonic() > stop:
            break
    return statistics.median(times), len(times), first_s, first


# ---------------------------------------------------------------- rows, streamed to --out
COLUMNS = ["workload", "implementation", "median", "reps", "metric", "vs jitgraph",
           "first call", "check", "jitgraph path"]


def _fmt_s(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else (f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s")


def _cell(s) -> str:
    return str(s).replace("|", "/").replace("\n", " ")


def format_row(r) -> str:
    if r["s"] is None:
        cells = [r["workload"], r["impl"], f"FAILED: {r['error']}", "", "", "", "", "", ""]
    else:
        base = next((b["s"] for b in ROWS if b["workload"] == r["workload"] and b["s"]
                     and b["impl"].startswith("jitgraph")), None)
        ratio = f"{r['s'] / base:.2f}x" if base and not r["impl"].startswith("device") else ""
        cells = [r["workload"], r["impl"], _fmt_s(r["s"]), r["n"], r["metric"], ratio,
                 _fmt_s(r["first"]) if r["first"] is not None else "", r["check"],
                 r.get("path", "")]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _append(text: str) -> None:
    with open(ARGS.out, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def record(workload, impl, seconds, metric="", check="", error=None, n=0, first=None, path=""):
    r = {"workload": workload, "impl": impl, "s": seconds, "metric": metric, "check": check,
         "error": error, "n": n, "first": first, "path": path}
    ROWS.append(r)
    line = format_row(r)
    _append(line + "\n")
    print(line, file=sys.stderr, flush=True)


def timed(workload, impl, fn, metric, check, inner=1, reps=REPS, warmup=WARMUP):
    """Time ``fn`` and record its row; ``metric(seconds)`` and ``check(first result)`` make
    the row's metric and check cells (a check that raises marks the row, it is no failure)."""
    ours = impl.startswith("jitgraph")
    if ours:
        from jitgraph.cuda_driver import driver
        d = driver()
        replays = d.counts.graph_launches
    sec, n, first_s, first = median_seconds(fn, inner=inner, reps=reps, warmup=warmup)
    try:
        ok = check(first)
    except Exception as e:
        ok = f"MISMATCH (check failed: {type(e).__name__}: {_one_line(e)[:80]})"
    path = ""
    if ours:        # what the row measured: the products' binding, graph replays or launches
        from jitgraph.kernels.cuda_matmul import binding_label
        graphs = "on" if d.counts.graph_launches > replays else "off"
        path = f"{binding_label(d)}; CUDA graphs {graphs}"
    record(workload, impl, sec, metric(sec), ok, n=n, first=first_s, path=path)


def run(workload, impl, body):
    """Run one implementation; a failure becomes a row saying so, and the run goes on."""
    if time.monotonic() >= STATE["deadline"] - 0.5:
        record(workload, impl, None, error=f"skipped: the workload's time cap "
                                           f"({STATE['cap']:.0f} s) was spent")
        return
    try:
        body()
    except StepTimeout:
        STATE["timed_out"] = True
        record(workload, impl, None, error=f"timed out (the workload's cap, {STATE['cap']:.0f} s)")
    except Exception as e:
        if os.environ.get("BENCH_TRACEBACK") == "1":
            traceback.print_exc()
        record(workload, impl, None, error=f"{type(e).__name__}: {_one_line(e)}"[:160])


def close(got, want, rtol=2e-3, atol=1e-4, peer=False) -> str:
    """``ok`` or ``MISMATCH``; a TF32 peer (``--tf32``) is held to 1e-2."""
    if peer and ARGS.tf32:
        rtol, atol = max(rtol, 1e-2), max(atol, 1e-2)
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"MISMATCH (shape {got.shape} != {want.shape})"
    scale = max(1.0, float(np.max(np.abs(want))))
    if not np.all(np.isfinite(got)):
        return "MISMATCH (non-finite values)"
    err = float(np.max(np.abs(got - want)))
    ok = np.allclose(got, want, rtol=rtol, atol=atol * scale)
    return ("ok" + (" (TF32 tolerance)" if peer and ARGS.tf32 else "")) if ok \
        else f"MISMATCH (max err {err:.2g})"


def host_rows(x, rows: int) -> np.ndarray:
    """The first ``rows`` rows (leading axis) of a device result, on the host, copying only
    those where the library allows it."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach()[:rows].cpu().numpy()
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x[:rows])
    if isinstance(x, jitgraph.DeviceArray):
        shape = (min(rows, x.shape[0]),) + tuple(x.shape[1:])
        try:
            count = int(np.prod(shape))
            return np.asarray(x.buffer()[:count].copy_to_host()).reshape(shape)
        except Exception:
            return np.asarray(x)[:rows]
    return np.asarray(x[:rows])


# ---------------------------------------------------------------- elementwise value+grad
def elementwise():
    n = SIZES["elementwise"]
    w = f"elementwise value+grad, 2^{n.bit_length() - 1} f32"
    x = (np.random.default_rng(0).standard_normal(n) * 2).astype(np.float32)
    k = min(n, CHECK_N)
    x64 = x[:k].astype(np.float64)
    t, s = np.tanh(x64), 1 / (1 + np.exp(-(1.5 * x64 + 0.1)))
    ref_g = (1 - t * t) * s + 1.5 * t * s * (1 - s) + x64
    nbytes = 8 * n
    copy_s = {}

    def gbs(sec):
        return f"{nbytes / sec / 1e9:.0f} GB/s"

    def copy():
        cuda = jitgraph.device.cuda_api()
        src, dst = cuda.to_device(x), cuda.device_array(n, np.float32)
        impl = "device-to-device copy (Numba)"
        sec, reps, first_s, _ = median_seconds(lambda: dst.copy_to_device(src))
        copy_s["s"] = sec
        record(w, impl, sec, gbs(sec), close(dst[:k].copy_to_host(), x[:k]), n=reps,
               first=first_s)
    run(w, "device-to-device copy (Numba)", copy)

    def f(m, sigmoid):
        return lambda v: m.sum(m.tanh(v) * sigmoid(1.5 * v + 0.1) + 0.5 * v ** 2)

    def jg():
        vg = jitgraph.jit(jitgraph.value_and_grad(f(jnp, nn.sigmoid)), device="cuda")
        xd = jitgraph.device_put(x)

        def metric(sec):
            return gbs(sec) + (f" ({100 * copy_s['s'] / sec:.0f}% of copy)" if copy_s else "")
        timed(w, "jitgraph", lambda: vg(xd), metric, lambda r: close(host_rows(r[1], k), ref_g))
    run(w, "jitgraph", jg)
    if jax is not None:
        def jr():
            fj = jax.jit(jax.value_and_grad(f(jax.numpy, jax.nn.sigmoid)))
            xj = jax.device_put(x)
            timed(w, "jax.jit", lambda: jax.block_until_ready(fj(xj)), gbs,
                  lambda r: close(host_rows(r[1], k), ref_g, peer=True))
        run(w, "jax.jit", jr)
    if torch is not None:
        def torch_row(compiled):
            xt = torch.tensor(x, device=DEV)
            fn = f(torch, torch.sigmoid)
            if compiled:
                fn = torch.compile(fn, mode=ARGS.torch_mode, dynamic=False)   # once

            def step():
                v = xt.detach().requires_grad_(True)
                fn(v).backward()
                return v.grad
            timed(w, "torch.compile" if compiled else "torch eager", step, gbs,
                  lambda r: close(host_rows(r, k), ref_g, peer=True))
        run(w, "torch eager", lambda: torch_row(False))
        run(w, "torch.compile", lambda: torch_row(True))


# ---------------------------------------------------------------- softmax cross-entropy
def softmax_xent():
    b, c = SIZES["xent"]
    w = f"softmax-xent fwd+bwd ({b}, {c}) f32"
    rng = np.random.default_rng(1)
    z = rng.standard_normal((b, c)).astype(np.float32)
    labels = rng.integers(0, c, b).astype(np.int64)
    k = min(b, CHECK_ROWS)                    # reference of the first rows only
    z64 = z[:k].astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(k), labels[:k]] -= 1
    ref = p / b

    def metric(s):
        return f"{b * c * 8 / s / 1e9:.0f} GB/s"

    def loss(m, log_softmax):
        def f(zz, ll):
            return -m.mean(m.take_along_axis(log_softmax(zz, axis=-1), ll[:, None], axis=1))
        return f

    def jg():
        vg = jitgraph.jit(jitgraph.value_and_grad(loss(jnp, nn.log_softmax)), device="cuda")
        zd, ld = jitgraph.device_put((z, labels))
        timed(w, "jitgraph", lambda: vg(zd, ld), metric,
              lambda r: close(host_rows(r[1], k), ref))
    run(w, "jitgraph", jg)
    if jax is not None:
        def jr():
            fj = jax.jit(jax.value_and_grad(loss(jax.numpy, jax.nn.log_softmax)))
            args = (jax.device_put(z), jax.device_put(labels.astype(np.int32)))
            timed(w, "jax.jit", lambda: jax.block_until_ready(fj(*args)), metric,
                  lambda r: close(host_rows(r[1], k), ref, peer=True))
        run(w, "jax.jit", jr)
    if torch is not None:
        def torch_row(compiled):
            zt, lt = torch.tensor(z, device=DEV), torch.tensor(labels, device=DEV)
            xent = torch.nn.functional.cross_entropy
            if compiled:
                xent = torch.compile(xent, mode=ARGS.torch_mode, dynamic=False)   # once

            def step():
                v = zt.detach().requires_grad_(True)
                xent(v, lt).backward()
                return v.grad
            timed(w, "torch.compile" if compiled else "torch eager", step, metric,
                  lambda r: close(host_rows(r, k), ref, peer=True))
        run(w, "torch eager", lambda: torch_row(False))
        run(w, "torch.compile", lambda: torch_row(True))


# ---------------------------------------------------------------- MLP training step
def _init_params(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
            for a, b in zip(sizes[:-1], sizes[1:])]


def _numpy_loss(params, x, y):
    """float64 reference: the loss before the first step (matrices of at most 2048x2048)."""
    h = x.astype(np.float64)
    for i, (w, b) in enumerate(params):
        h = h @ w.astype(np.float64) + b.astype(np.float64)
        if i < len(params) - 1:
            h = np.tanh(h)
    z = h - h.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def mlp(key):
    sizes, batch = SIZES[key]
    w = f"MLP step {'-'.join(map(str, sizes))} batch {batch}"
    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    params = _init_params(sizes)
    ref = {}

    def check(lv, peer=False):
        if "loss" not in ref:
            ref["loss"] = _numpy_loss(params, x, y)
        return close(float(np.asarray(lv)), ref["loss"], rtol=1e-4, peer=peer)

    def ms(sec):
        return f"{sec * 1e3:.3f} ms"

    def loss_fn(m, ps, xx, yy, log_softmax):
        h = xx
        for i, (wt, bs) in enumerate(ps):
            h = h @ wt + bs
            if i < len(ps) - 1:
                h = m.tanh(h)
        return -m.mean(m.sum(log_softmax(h, axis=-1) * yy, axis=-1))

    def jg():
        def step(ps, xx, yy):
            lv, gs = jitgraph.value_and_grad(
                lambda q: loss_fn(jnp, q, xx, yy, nn.log_softmax))(ps)
            return [(a - 0.1 * ga, b - 0.1 * gb) for (a, b), (ga, gb) in zip(ps, gs)], lv
        fn = jitgraph.jit(step, device="cuda", donate_argnums=(0,))
        state = {"p": jitgraph.device_put(params)}
        xd, yd = jitgraph.device_put((x, y))

        def call():
            state["p"], lv = fn(state["p"], xd, yd)
            return lv
        timed(w, "jitgraph", call, ms, check)
    run(w, "jitgraph", jg)
    if jax is not None:
        def jax_row():
            def step(ps, xx, yy):
                lv, gs = jax.value_and_grad(
                    lambda q: loss_fn(jax.numpy, q, xx, yy, jax.nn.log_softmax))(ps)
                return [(a - 0.1 * ga, b - 0.1 * gb) for (a, b), (ga, gb) in zip(ps, gs)], lv
            fn = jax.jit(step, donate_argnums=() if PEERS_CPU else (0,))
            state = {"p": jax.device_put(params)}
            xj, yj = jax.device_put(x), jax.device_put(y)

            def call():
                state["p"], lv = fn(state["p"], xj, yj)
                return jax.block_until_ready(lv)
            timed(w, "jax.jit", call, ms, lambda lv: check(lv, peer=True))
        run(w, "jax.jit", jax_row)
    if torch is not None:
        def torch_row(compiled):
            xt, yt = torch.tensor(x, device=DEV), torch.tensor(y, device=DEV)
            flat = [torch.tensor(a, device=DEV).requires_grad_(True) for p in params for a in p]

            def fwd(ws, xx, yy):
                ps = list(zip(ws[0::2], ws[1::2]))
                return loss_fn(torch, ps, xx, yy, lambda h, axis: torch.log_softmax(h, dim=axis))
            f = torch.compile(fwd, mode=ARGS.torch_mode, dynamic=False) if compiled else fwd

            def call():
                lv = f(flat, xt, yt)
                lv.backward()
                with torch.no_grad():
                    for t in flat:
                        t -= 0.1 * t.grad
                        t.grad = None
                return lv.detach()
            timed(w, "torch.compile" if compiled else "torch eager", call, ms,
                  lambda lv: check(lv.cpu().numpy(), peer=True))
        run(w, "torch eager", lambda: torch_row(False))
        run(w, "torch.compile", lambda: torch_row(True))


# ---------------------------------------------------------------- call overhead
def call_overhead():
    w = "cached call overhead, 16 elements"
    a = np.arange(16, dtype=np.float32)
    ref = float(np.sum(a * a + a))
    inner = 5 if SIM else (500 if QUICK else 2000)

    def us(sec):
        return f"{sec * 1e6:.1f} µs"

    def jg():
        f = jitgraph.jit(lambda p, q: jnp.sum(p * q + p), device="cuda")
        ad = jitgraph.device_put(a)
        timed(w, "jitgraph", lambda: f(ad, ad), us, lambda r: close(float(r), ref), inner=inner)
    run(w, "jitgraph", jg)
    if jax is not None:
        def jr():
            f = jax.jit(lambda p, q: (p * q + p).sum())
            aj = jax.device_put(a)
            timed(w, "jax.jit", lambda: f(aj, aj), us, lambda r: close(float(r), ref, peer=True),
                  inner=inner)
        run(w, "jax.jit", jr)
    if torch is not None:
        def tr():
            at = torch.tensor(a, device=DEV)

            def f(p, q):
                return (p * q + p).sum()
            timed(w, "torch eager", lambda: f(at, at), us,
                  lambda r: close(float(r), ref, peer=True), inner=inner)
        run(w, "torch eager", tr)


# ---------------------------------------------------------------- matmul
def matmul():
    n = SIZES["matmul"]
    w = f"matmul {n}^3 f32"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    k = min(n, 64)                            # a corner, against float64
    ref = a[:k].astype(np.float64) @ b[:, :k].astype(np.float64)
    flops = 2.0 * n ** 3
    reps = max(3, REPS // 3) if not SIM else REPS

    def gf(sec):
        return f"{flops / sec / 1e9:.0f} GFLOP/s"

    def check(got, peer=False):
        return close(host_rows(got, k)[:, :k], ref, peer=peer)

    from jitgraph.cuda_driver import driver
    from jitgraph.kernels import cuda_matmul
    d = driver()
    for mode in ("auto", "fallback"):
        # the binding is cached per driver: select_matmul switches it (an environment variable
        # set now would be ignored once cuBLAS has loaded), and the row names what ran
        blas = cuda_matmul.select_matmul(d, mode)[0]
        impl = ("jitgraph (cuBLAS)" if mode == "auto" and blas is None
                else f"jitgraph ({cuda_matmul.binding_label(d)})")

        def jg(mode=mode, impl=impl):
            try:
                if mode == "auto" and not cuda_matmul.cublas_available(d):
                    raise RuntimeError(f"no cuBLAS binding loads: {cuda_matmul.load_blas(d)[1]}")
                f = jitgraph.jit(lambda p, q: p @ q, device="cuda")
                ad, bd = jitgraph.device_put((a, b))
                timed(w, impl, lambda: f(ad, bd), gf, check, reps=reps)
            finally:
                cuda_matmul.select_matmul(d, "auto")
        run(w, impl, jg)
    if cupy is not None:
        def cr():
            ac, bc = cupy.asarray(a), cupy.asarray(b)
            timed(w, "CuPy", lambda: ac @ bc, gf, check, reps=reps)
        run(w, "CuPy", cr)
    if torch is not None:
        def tr():
            at, bt = torch.tensor(a, device=DEV), torch.tensor(b, device=DEV)
            timed(w, "PyTorch", lambda: at @ bt, gf, lambda r: check(r, peer=True), reps=reps)
        run(w, "PyTorch", tr)


# ---------------------------------------------------------------- report
def table() -> str:
    return "\n".join(["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
                     + [format_row(r) for r in ROWS])


def _try(fn, default="n/a"):
    try:
        v = fn()
        return default if v in (None, "") else v
    except Exception:
        return default


def _version(dist):
    return _try(lambda: importlib.metadata.version(dist))


def _cuda_ver(v) -> str:
    """12040 -> 12.4; (12, 4) -> 12.4."""
    if isinstance(v, tuple):
        return ".".join(map(str, v))
    return f"{int(v) // 1000}.{int(v) % 1000 // 10}"


def header() -> str:
    devs = ", ".join(f"{d.name} (cc {'.'.join(map(str, d.compute_capability))})"
                     for d in jitgraph.devices() if d.platform == "cuda")
    if SIM:
        gpu = "none: CUDA SIMULATOR, tiny sizes (script check only; the numbers mean nothing)"
        drv = rt = "n/a"
    else:
        smi = _try(lambda: subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=5,
            check=True).stdout.strip().splitlines()[0], "")
        gpu = f"{devs or 'none'}" + (f" [nvidia-smi: {smi}]" if smi else "")
        from numba import cuda
        drv = (f"{smi.split(',')[1].strip() if smi.count(',') >= 2 else 'n/a'} "
               f"(CUDA {_try(lambda: _cuda_ver(cuda.cudadrv.driver.driver.get_version()))})")
        rt = (f"numba-cuda {_try(lambda: _cuda_ver(cuda.runtime.get_version()))}, "
              f"CuPy {_try(lambda: _cuda_ver(cupy.cuda.runtime.runtimeGetVersion()))}, "
              f"torch {_try(lambda: torch.version.cuda)}, "
              f"jax {_try(lambda: jax.devices()[0].client.platform_version)}")
    vers = [f"python {platform.python_version()}", f"numpy {np.__version__}",
            f"numba {_version('numba')}", f"numba-cuda {_version('numba-cuda')}",
            f"cupy {getattr(cupy, '__version__', 'n/a')}",
            f"torch {getattr(torch, '__version__', 'n/a')}",
            f"jax {getattr(jax, '__version__', 'n/a')} (jaxlib {_version('jaxlib')})"]
    tf32 = ("ON (--tf32): torch allow_tf32 matmul=True, cudnn=True; jax_default_matmul_precision"
            "=tensorfloat32" if ARGS.tf32 else
            "off: torch allow_tf32 matmul=False, cudnn=False; jax_default_matmul_precision=highest")
    if torch is not None:
        tf32 += (f" (torch reads back matmul={torch.backends.cuda.matmul.allow_tf32}, "
                 f"cudnn={torch.backends.cudnn.allow_tf32})")
    mode = "sim" if SIM else ("quick" if QUICK else "full")
    lines = [
        f"## jitgraph GPU benchmarks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"({mode} run)", "",
        f"- GPU: {gpu}",
        f"- driver: {drv}; CUDA runtime: {rt}",
        f"- versions: {', '.join(vers)}",
        f"- TF32 for PyTorch and JAX {tf32}; jitgraph and CuPy: plain float32 GEMM (CUPY_TF32=0); "
        f"JAX preallocation off (XLA_PYTHON_CLIENT_PREALLOCATE=false)",
        f"- torch.compile(mode={ARGS.torch_mode!r}, dynamic=False), compiled once per row; "
        f"timing: the first call alone ('first call', compiles), {WARMUP} warm-up calls, then "
        f"the median of up to {REPS} repeats (at most {REP_TIME:g} s of repeats a row); time "
        f"budget {BUDGET:.0f} s, shared out among the workloads",
        f"- check: the first call's result against float64 NumPy on a small part (first "
        f"{CHECK_N} gradient elements, first {CHECK_ROWS} cross-entropy rows, 64x64 matmul "
        f"corner, the MLP's initial loss)",
    ]
    if ERRORS:
        lines.append("- peers not run: " + "; ".join(ERRORS))
    return "\n".join(lines)


def _run_workload(name, fn, left) -> None:
    """Run one workload under its cap: its weight's share of the time left."""
    STATE["started"].append(name)
    now = time.monotonic()
    cap = (DEADLINE - now) * WEIGHTS[name] / sum(WEIGHTS[n] for n in left)
    STATE.update(deadline=now + cap, cap=cap)
    if cap < 1.0:
        record(name, "(all)", None, error="skipped: the benchmark's time budget was spent")
        return
    try:
        with time_cap(cap):
            fn()
    except StepTimeout:               # outside any one implementation (its set-up)
        STATE["timed_out"] = True
        record(name, "(set-up)", None, error=f"timed out (the workload's cap, {cap:.0f} s)")
    except Exception as e:
        record(name, "(set-up)", None, error=f"{type(e).__name__}: {_one_line(e)}"[:160])


def main() -> int:
    work = {"elementwise": elementwise, "xent": softmax_xent,
            "mlp_small": lambda: mlp("mlp_small"), "mlp_large": lambda: mlp("mlp_large"),
            "overhead": call_overhead, "matmul": matmul}
    only = [w for w in ARGS.only.split(",") if w]
    unknown = [w for w in only if w not in work]
    if unknown:
        print(f"unknown workloads {unknown}; choose from {list(work)}", file=sys.stderr)
        return 2
    # --quick on a GPU: four workloads, so that each one's share of the budget holds
    # torch.compile's cold compile (with all six, most torch.compile rows timed out)
    quick_set = ("elementwise", "xent", "mlp_small", "matmul")
    todo = [n for n in work if (n in only if only else not QUICK or SIM or n in quick_set)]
    head = header()
    with open(ARGS.out, "a" if ARGS.append else "w") as fh:
        fh.write(head + "\n\n" + table() + "\n")
    print(head + "\n", file=sys.stderr, flush=True)
    end = "finished"
    try:
        for i, name in enumerate(todo):
            _run_workload(name, work[name], todo[i:])
            print(f"  ... {len(ROWS)} rows after {time.monotonic() - T0:.0f} s", file=sys.stderr)
    except Interrupted as e:
        signal_name = e.args[0] if e.args else "a signal"
        STATE["timed_out"] = True
        left = [n for n in todo if n not in STATE["started"]]
        end = (f"INTERRUPTED by {signal_name} (the step's timeout?) during "
               f"{STATE['started'][-1] if STATE['started'] else 'set-up'}"
               + (f"; not run: {', '.join(left)}" if left else "") + ";")
    measured = sum(r["s"] is not None for r in ROWS)
    failed = len(ROWS) - measured
    mism = sum("MISMATCH" in r["check"] for r in ROWS)
    foot = (f"\n{end} in {time.monotonic() - T0:.0f} s: {measured} rows measured, "
            f"{failed} FAILED, {mism} MISMATCH\n")
    _append(foot)
    print(head + "\n\n" + table() + "\n" + foot)
    print(f"(table written to {ARGS.out})", file=sys.stderr)
    return 0 if measured else 1


if __name__ == "__main__":
    rc = main()
    if STATE["timed_out"]:
        # a cap interrupted a call: threads it left (the simulator's) must not hold the exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
