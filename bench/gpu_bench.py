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

Prints one markdown table (median of repeats; ``vs jitgraph`` = that row's time / jitgraph's,
> 1 means jitgraph is faster; ``check`` compares the result with a float64 NumPy reference) and
writes it to ``--out``. ``--sim`` runs every workload at tiny sizes under Numba's CUDA
simulator, to test this script without a GPU.

    python bench/gpu_bench.py [--out bench/gpu_results.md] [--sim] [--quick]
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import traceback

from gpu_args import parse_gpu_args


def _options(p) -> None:
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--only", default="", help="comma-separated workloads: elementwise, xent, "
                   "mlp_small, mlp_large, overhead, matmul")
    p.add_argument("--peers-cpu", action="store_true",
                   help="with --sim: run the PyTorch and JAX rows on the CPU (checks their code)")


ARGS = parse_gpu_args(__doc__.splitlines()[0], _options)

import numpy as np  # noqa: E402

import jitgraph  # noqa: E402
import jitgraph.numpy as jnp  # noqa: E402
from jitgraph import nn  # noqa: E402

SIM = ARGS.sim
PEERS_CPU = SIM and ARGS.peers_cpu
DEV = "cpu" if PEERS_CPU else "cuda"          # where the PyTorch rows run
REPS = 3 if SIM else (10 if ARGS.quick else 30)
SIZES = {
    "elementwise": 2 ** 10 if SIM else 2 ** 26,
    "xent": (8, 50) if SIM else (8192, 32000),
    "mlp_small": ([8, 6, 6, 3], 4) if SIM else ([784, 512, 512, 10], 128),
    "mlp_large": ([8, 10, 10, 3], 5) if SIM else ([784, 2048, 2048, 10], 512),
    "matmul": 20 if SIM else 4096,
}
ROWS: list[dict] = []
ERRORS: list[str] = []


# ---------------------------------------------------------------- optional peers
def _import(name):
    if SIM and (name == "cupy" or not PEERS_CPU):
        return None                  # no GPU: peers can't run
    try:
        mod = __import__(name)
        if name == "jax":
            import jax.numpy  # noqa: F401  (jax.numpy is a submodule: import it)
            if not PEERS_CPU and not any(d.platform == "gpu" for d in mod.devices()):
                raise RuntimeError(f"jax sees no GPU ({mod.devices()})")
        if name == "torch" and not PEERS_CPU and not mod.cuda.is_available():
            raise RuntimeError("torch.cuda is not available")
        return mod
    except Exception as e:
        ERRORS.append(f"{name}: {type(e).__name__}: {e}")
        return None


torch = _import("torch")
jax = _import("jax")
cupy = _import("cupy")


def sync_all():
    jitgraph.device.cuda_api().synchronize()
    if torch is not None and DEV == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn, inner: int = 1, reps: int = REPS, warmup: int = 2) -> float:
    """Median wall time of one call of ``fn`` (``inner`` calls per timed repeat, then a device
    synchronisation: launches are asynchronous)."""
    for _ in range(warmup):
        fn()
    sync_all()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync_all()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def record(workload, impl, seconds, metric="", check="", error=None):
    ROWS.append({"workload": workload, "impl": impl, "s": seconds, "metric": metric,
                 "check": check, "error": error})


def run(workload, impl, body):
    """Run one implementation; a failure becomes a row saying so, and the run goes on."""
    try:
        body()
    except Exception as e:
        if os.environ.get("BENCH_TRACEBACK") == "1":
            traceback.print_exc()
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        record(workload, impl, None, error=msg[:120])


def close(got, want, rtol=2e-3, atol=1e-4) -> str:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(want))))
    return "ok" if got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol * scale) \
        else f"MISMATCH (max err {float(np.max(np.abs(got - want))):.2g})"


# ---------------------------------------------------------------- elementwise value+grad
def elementwise():
    n = SIZES["elementwise"]
    w = f"elementwise value+grad, 2^{n.bit_length() - 1} f32"
    x = (np.random.default_rng(0).standard_normal(n) * 2).astype(np.float32)
    x64 = x.astype(np.float64)
    t, s = np.tanh(x64), 1 / (1 + np.exp(-(1.5 * x64 + 0.1)))
    ref_g = (1 - t * t) * s + 1.5 * t * s * (1 - s) + x64
    nbytes = 8 * n

    def gbs(sec):
        return f"{nbytes / sec / 1e9:.0f} GB/s"

    def copy():
        cuda = jitgraph.device.cuda_api()
        src, dst = cuda.to_device(x), cuda.device_array(n, np.float32)
        sec = median_seconds(lambda: dst.copy_to_device(src))
        record(w, "device-to-device copy (Numba)", sec, gbs(sec), close(dst.copy_to_host(), x))
    run(w, "device-to-device copy (Numba)", copy)

    def f(m, sigmoid):
        return lambda v: m.sum(m.tanh(v) * sigmoid(1.5 * v + 0.1) + 0.5 * v ** 2)

    def jg():
        vg = jitgraph.jit(jitgraph.value_and_grad(f(jnp, nn.sigmoid)), device="cuda")
        xd = jitgraph.device_put(x)
        sec = median_seconds(lambda: vg(xd))
        record(w, "jitgraph", sec, gbs(sec), close(vg(xd)[1], ref_g))
    run(w, "jitgraph", jg)
    if torch is not None:
        xt = torch.tensor(x, device=DEV)

        def torch_vg(fn):
            def step():
                v = xt.detach().requires_grad_(True)
                out = fn(v)
                out.backward()
                return v.grad
            return step
        ft = f(torch, torch.sigmoid)
        run(w, "torch eager", lambda: _time_torch(w, "torch eager", torch_vg(ft), ref_g, gbs))
        run(w, "torch.compile", lambda: _time_torch(w, "torch.compile",
                                                  torch_vg(torch.compile(ft)), ref_g, gbs))
    copy_s = [r["s"] for r in ROWS if r["workload"] == w and r["impl"].startswith("device") and r["s"]]
    for r in ROWS:
        if r["workload"] == w and r["impl"] == "jitgraph" and r["s"] and copy_s:
            r["metric"] += f" ({100 * copy_s[0] / r['s']:.0f}% of copy)"
    if jax is not None:
        fj = jax.jit(jax.value_and_grad(f(jax.numpy, jax.nn.sigmoid)))
        xj = jax.device_put(x)
        run(w, "jax.jit", lambda: _time_jax(w, fj, (xj,), lambda r: r[1], ref_g, gbs))


def _time_torch(w, impl, step, ref, metric):
    sec = median_seconds(step)
    record(w, impl, sec, metric(sec), close(step().detach().cpu().numpy(), ref))


def _time_jax(w, fn, args, pick, ref, metric, impl="jax.jit"):
    def call():
        jax.block_until_ready(fn(*args))
    sec = median_seconds(call)
    record(w, impl, sec, metric(sec), close(np.asarray(pick(fn(*args))), ref))


# ---------------------------------------------------------------- softmax cross-entropy
def softmax_xent():
    b, c = SIZES["xent"]
    w = f"softmax-xent fwd+bwd ({b}, {c}) f32"
    rng = np.random.default_rng(1)
    z = rng.standard_normal((b, c)).astype(np.float32)
    labels = rng.integers(0, c, b).astype(np.int64)
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(b), labels] -= 1
    ref = p / b

    def loss(m, log_softmax):
        def f(zz, ll):
            return -m.mean(m.take_along_axis(log_softmax(zz, axis=-1), ll[:, None], axis=1))
        return f

    def jg():
        vg = jitgraph.jit(jitgraph.value_and_grad(loss(jnp, nn.log_softmax)), device="cuda")
        zd, ld = jitgraph.device_put((z, labels))
        sec = median_seconds(lambda: vg(zd, ld))
        record(w, "jitgraph", sec, f"{b * c * 8 / sec / 1e9:.0f} GB/s", close(vg(zd, ld)[1], ref))
    run(w, "jitgraph", jg)
    if torch is not None:
        zt, lt = torch.tensor(z, device=DEV), torch.tensor(labels, device=DEV)

        def step_of(fn):
            def step():
                v = zt.detach().requires_grad_(True)
                fn(v, lt).backward()
                return v.grad
            return step
        xent = torch.nn.functional.cross_entropy
        metric = (lambda s: f"{b * c * 8 / s / 1e9:.0f} GB/s")
        run(w, "torch eager", lambda: _time_torch(w, "torch eager", step_of(xent), ref, metric))
        run(w, "torch.compile", lambda: _time_torch(w, "torch.compile",
                                                  step_of(torch.compile(xent)), ref, metric))
    if jax is not None:
        fj = jax.jit(jax.value_and_grad(loss(jax.numpy, jax.nn.log_softmax)))
        args = (jax.device_put(z), jax.device_put(labels.astype(np.int32)))
        run(w, "jax.jit", lambda: _time_jax(w, fj, args, lambda r: r[1], ref,
                                            lambda s: f"{b * c * 8 / s / 1e9:.0f} GB/s"))


# ---------------------------------------------------------------- MLP training step
def _init_params(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
            for a, b in zip(sizes[:-1], sizes[1:])]


def _numpy_step(params, x, y, lr=0.1):
    """float64 reference: one SGD step, returns the loss before the step."""
    hs, h = [x.astype(np.float64)], x.astype(np.float64)
    ps = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    for i, (w, b) in enumerate(ps):
        h = h @ w + b
        if i < len(ps) - 1:
            h = np.tanh(h)
        hs.append(h)
    z = hs[-1] - hs[-1].max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def mlp(key):
    sizes, batch = SIZES[key]
    w = f"MLP step {'-'.join(map(str, sizes))} batch {batch}"
    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    params = _init_params(sizes)
    ref_loss = _numpy_step(params, x, y)

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
        first = {}

        def call():
            state["p"], lv = fn(state["p"], xd, yd)
            first.setdefault("loss", lv)
        sec = median_seconds(call)
        record(w, "jitgraph", sec, f"{sec * 1e3:.3f} ms",
               close(float(first["loss"]), ref_loss, rtol=1e-4))
    run(w, "jitgraph", jg)
    if torch is not None:
        xt, yt = torch.tensor(x, device=DEV), torch.tensor(y, device=DEV)

        def torch_rows(compiled):
            ps = [(torch.tensor(a, device=DEV).requires_grad_(True),
                   torch.tensor(b, device=DEV).requires_grad_(True)) for a, b in params]
            flat = [t for p in ps for t in p]

            def fwd(xx, yy):
                return loss_fn(torch, ps, xx, yy, lambda h, axis: torch.log_softmax(h, dim=axis))
            f = torch.compile(fwd) if compiled else fwd
            first = {}

            def call():
                lv = f(xt, yt)
                lv.backward()
                with torch.no_grad():
                    for t in flat:
                        t -= 0.1 * t.grad
                        t.grad = None
                first.setdefault("loss", lv.detach())
            impl = "torch.compile" if compiled else "torch eager"
            sec = median_seconds(call)
            record(w, impl, sec, f"{sec * 1e3:.3f} ms",
                   close(float(first["loss"]), ref_loss, rtol=1e-4))
        run(w, "torch eager", lambda: torch_rows(False))
        run(w, "torch.compile", lambda: torch_rows(True))
    if jax is not None:
        def jax_row():
            def step(ps, xx, yy):
                lv, gs = jax.value_and_grad(
                    lambda q: loss_fn(jax.numpy, q, xx, yy, jax.nn.log_softmax))(ps)
                return [(a - 0.1 * ga, b - 0.1 * gb) for (a, b), (ga, gb) in zip(ps, gs)], lv
            fn = jax.jit(step, donate_argnums=(0,))
            state = {"p": jax.device_put(params)}
            xj, yj = jax.device_put(x), jax.device_put(y)
            first = {}

            def call():
                state["p"], lv = fn(state["p"], xj, yj)
                first.setdefault("loss", lv)
                jax.block_until_ready(lv)
            sec = median_seconds(call)
            record(w, "jax.jit", sec, f"{sec * 1e3:.3f} ms",
                   close(float(first["loss"]), ref_loss, rtol=1e-4))
        run(w, "jax.jit", jax_row)


# ---------------------------------------------------------------- call overhead
def call_overhead():
    w = "cached call overhead, 16 elements"
    a = np.arange(16, dtype=np.float32)
    ref = float(np.sum(a * a + a))
    inner = 20 if SIM else 2000

    def jg():
        f = jitgraph.jit(lambda p, q: jnp.sum(p * q + p), device="cuda")
        ad = jitgraph.device_put(a)
        sec = median_seconds(lambda: f(ad, ad), inner=inner)
        record(w, "jitgraph", sec, f"{sec * 1e6:.1f} µs", close(float(f(ad, ad)), ref))
    run(w, "jitgraph", jg)
    if torch is not None:
        def tr():
            at = torch.tensor(a, device=DEV)
            f = (lambda p, q: (p * q + p).sum())
            sec = median_seconds(lambda: f(at, at), inner=inner)
            record(w, "torch eager", sec, f"{sec * 1e6:.1f} µs", close(float(f(at, at)), ref))
        run(w, "torch eager", tr)
    if jax is not None:
        def jr():
            f = jax.jit(lambda p, q: (p * q + p).sum())
            aj = jax.device_put(a)
            sec = median_seconds(lambda: f(aj, aj), inner=inner)
            record(w, "jax.jit", sec, f"{sec * 1e6:.1f} µs", close(float(f(aj, aj)), ref))
        run(w, "jax.jit", jr)


# ---------------------------------------------------------------- matmul
def matmul():
    n = SIZES["matmul"]
    w = f"matmul {n}^3 f32"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64) if n <= 1024 else None
    flops = 2.0 * n ** 3

    def gf(sec):
        return f"{flops / sec / 1e9:.0f} GFLOP/s"

    def check(got):
        if ref is not None:
            return close(got, ref)
        k = slice(0, 64)                       # spot check a corner against float64
        return close(np.asarray(got)[k, k], a[k].astype(np.float64) @ b[:, k].astype(np.float64))

    from jitgraph.kernels import cuda_matmul
    for impl, mode in (("jitgraph (cuBLAS via CuPy)", "auto"), ("jitgraph (tiled fallback kernel)", "fallback")):
        def jg(mode=mode, impl=impl):
            os.environ["JITGRAPH_CUDA_MATMUL"] = mode
            if mode == "auto" and not cuda_matmul.cublas_available():
                raise RuntimeError("CuPy with a GPU is not available")
            f = jitgraph.jit(lambda p, q: p @ q, device="cuda")
            ad, bd = jitgraph.device_put((a, b))
            sec = median_seconds(lambda: f(ad, bd), reps=max(3, REPS // 3))
            record(w, impl, sec, gf(sec), check(f(ad, bd)))
        run(w, impl, jg)
    os.environ["JITGRAPH_CUDA_MATMUL"] = "auto"
    if cupy is not None:
        def cr():
            ac, bc = cupy.asarray(a), cupy.asarray(b)
            sec = median_seconds(lambda: ac @ bc, reps=max(3, REPS // 3))
            record(w, "CuPy", sec, gf(sec), check(cupy.asnumpy(ac @ bc)))
        run(w, "CuPy", cr)
    if torch is not None:
        def tr():
            at, bt = torch.tensor(a, device=DEV), torch.tensor(b, device=DEV)
            sec = median_seconds(lambda: at @ bt, reps=max(3, REPS // 3))
            record(w, "PyTorch", sec, gf(sec), check((at @ bt).cpu().numpy()))
        run(w, "PyTorch", tr)


# ---------------------------------------------------------------- report
def table() -> str:
    lines = ["| workload | implementation | median | metric | vs jitgraph | check |",
             "| --- | --- | --- | --- | --- | --- |"]
    base = {r["workload"]: r["s"] for r in ROWS if r["impl"].startswith("jitgraph") and r["s"]}
    for r in ROWS:
        if r["s"] is None:
            lines.append(f"| {r['workload']} | {r['impl']} | unavailable | {r['error']} | | |")
            continue
        ratio = f"{r['s'] / base[r['workload']]:.2f}x" if base.get(r["workload"]) else ""
        med = f"{r['s'] * 1e6:.1f} µs" if r["s"] < 1e-3 else f"{r['s'] * 1e3:.3f} ms"
        lines.append(f"| {r['workload']} | {r['impl']} | {med} | {r['metric']} | {ratio} | {r['check']} |")
    return "\n".join(lines)


def header() -> str:
    devs = ", ".join(f"{d.name} (cc {'.'.join(map(str, d.compute_capability))})"
                     for d in jitgraph.devices() if d.platform == "cuda")
    vers = [f"python {platform.python_version()}", f"numpy {np.__version__}"]
    import numba
    vers.append(f"numba {numba.__version__}")
    for name, mod in (("torch", torch), ("jax", jax), ("cupy", cupy)):
        vers.append(f"{name} {getattr(mod, '__version__', 'n/a')}")
    mode = "CUDA SIMULATOR, tiny sizes (script check only)" if SIM else "GPU"
    return (f"jitgraph GPU benchmarks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"{mode}; device: {devs or 'none'}; {', '.join(vers)}; median of {REPS} repeats")


def main() -> int:
    t0 = time.perf_counter()
    work = {"elementwise": elementwise, "xent": softmax_xent,
            "mlp_small": lambda: mlp("mlp_small"), "mlp_large": lambda: mlp("mlp_large"),
            "overhead": call_overhead, "matmul": matmul}
    only = [w for w in ARGS.only.split(",") if w]
    unknown = [w for w in only if w not in work]
    if unknown:
        print(f"unknown workloads {unknown}; choose from {list(work)}", file=sys.stderr)
        return 2
    for name, fn in work.items():
        if only and name not in only:
            continue
        fn()
        print(f"  ... {len(ROWS)} rows after {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    text = header() + "\n\n" + table() + "\n"
    if ERRORS:
        text += "\nPeers not run: " + "; ".join(ERRORS) + "\n"
    print(text)
    with open(ARGS.out, "w") as f:
        f.write(text)
    print(f"(table written to {ARGS.out})", file=sys.stderr)
    return 1 if any("MISMATCH" in r["check"] for r in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
