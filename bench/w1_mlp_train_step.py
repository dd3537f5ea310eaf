"""W1: one MLP training step (forward + backward + in-place SGD update).

MLP 784-512-512-10, tanh, batch 128, float32, softmax cross-entropy (mean over the
batch), SGD with lr 0.1.  Implementations: hand-written NumPy (manual backward), PyTorch
eager, torch.compile, jax.jit (params donated), jitgraph.jit (params donated).

Also: cold compile seconds (first call minus a warm call) for torch.compile, jax.jit and
jitgraph, and jitgraph's warm start from its disk cache in a NEW process.

    python bench/w1_mlp_train_step.py [--quick] [--large] [--json out.json]

``--large``: the other MLP size of the performance targets, 784-2048-2048-10 at batch 512,
step times only.
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import json
import os
import subprocess
import sys
import time

import numpy as np

from common import (ResultTable, block, check_close, first_call_seconds, fmt_time,
                    guarded, import_error, import_jax, import_jitgraph, import_torch,
                    print_kv, short_error, timeit_interleaved)

BATCH = 128
DIMS = (784, 512, 512, 10)
LR = 0.1


# ----------------------------------------------------------------------------- data


def init_params(seed: int = 0) -> list[np.ndarray]:
    """[W1, b1, W2, b2, W3, b3], float32, W ~ N(0, 1/fan_in), b = 0.01."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(DIMS[:-1], DIMS[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        params.append(np.full((fan_out,), 0.01, dtype=np.float32))
    return params


def make_data(seed: int = 1, batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    batch = BATCH if batch is None else batch
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, DIMS[0])).astype(np.float32)
    labels = rng.integers(0, DIMS[-1], size=batch)
    y = np.zeros((batch, DIMS[-1]), dtype=np.float32)
    y[np.arange(batch), labels] = 1.0
    return x, y


def copy_params(params):
    return [p.copy() for p in params]


# ----------------------------------------------------------------------------- NumPy


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> np.float32:
    """Forward, manual backward, in-place SGD update.  Returns the loss (before the update)."""
    W1, b1, W2, b2, W3, b3 = params
    h1 = np.tanh(x @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    z = h2 @ W3 + b3
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    logp = z - m - np.log(s)
    loss = -(logp * y).sum() / np.float32(BATCH)
    # backward
    dz = (e / s - y) * np.float32(1.0 / BATCH)
    dW3 = h2.T @ dz
    db3 = dz.sum(axis=0)
    dh2 = dz @ W3.T
    dh2 *= 1.0 - h2 * h2
    dW2 = h1.T @ dh2
    db2 = dh2.sum(axis=0)
    dh1 = dh2 @ W2.T
    dh1 *= 1.0 - h1 * h1
    dW1 = x.T @ dh1
    db1 = dh1.sum(axis=0)
    lr = np.float32(LR)
    for p, g in zip(params, (dW1, db1, dW2, db2, dW3, db3)):
        p -= lr * g
    return loss


def reference(params, x, y):
    """Loss at ``params`` and params after one SGD step (float64 NumPy for accuracy)."""
    p64 = [p.astype(np.float64) for p in params]
    loss = numpy_step(p64, x.astype(np.float64), y.astype(np.float64))
    return float(loss), p64


# ----------------------------------------------------------------------------- jnp-style
# The same source serves jax.numpy and jitgraph.numpy.


def make_loss(jnp):
    def loss(params, x, y):
        W1, b1, W2, b2, W3, b3 = params
        h1 = jnp.tanh(jnp.dot(x, W1) + b1)
        h2 = jnp.tanh(jnp.dot(h1, W2) + b2)
        z = jnp.dot(h2, W3) + b3
        m = jnp.max(z, axis=1, keepdims=True)
        lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
        return -jnp.mean(jnp.sum((z - lse) * y, axis=1))
    return loss


def make_step(lib):
    """step(params, x, y) -> (new_params, loss), jitted with the params donated."""
    loss = make_loss(lib.numpy)
    value_and_grad = lib.value_and_grad(loss)

    def step(params, x, y):
        value, grads = value_and_grad(params, x, y)
        return [p - LR * g for p, g in zip(params, grads)], value

    return lib.jit(step, donate_argnums=(0,))


# ----------------------------------------------------------------------------- torch


def torch_loss(torch):
    def loss(params, x, y):
        W1, b1, W2, b2, W3, b3 = params
        h1 = torch.tanh(x @ W1 + b1)
        h2 = torch.tanh(h1 @ W2 + b2)
        z = h2 @ W3 + b3
        m = torch.amax(z, dim=1, keepdim=True)
        lse = m + torch.log(torch.sum(torch.exp(z - m), dim=1, keepdim=True))
        return -torch.mean(torch.sum((z - lse) * y, dim=1))
    return loss


def torch_eager_step(torch):
    loss_fn = torch_loss(torch)

    def step(params, x, y):
        loss = loss_fn(params, x, y)
        loss.backward()
        with torch.no_grad():
            torch._foreach_add_(params, [p.grad for p in params], alpha=-LR)
        for p in params:
            p.grad = None
        return loss.detach()

    return step


def torch_compiled_step(torch):
    """Whole step compiled: torch.func.grad_and_value + in-place update inside torch.compile.
    Returns (step, variant description)."""
    loss_fn = torch_loss(torch)

    def step(params, x, y):
        grads, loss = torch.func.grad_and_value(loss_fn)(params, x, y)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(LR * g)
        return loss

    return torch.compile(step), "whole step (func.grad_and_value + in-place update)"


def torch_compiled_fwd_step(torch):
    """Fallback: compiled loss (AOTAutograd compiles the backward too), eager update."""
    loss_c = torch.compile(torch_loss(torch))

    def step(params, x, y):
        loss = loss_c(params, x, y)
        loss.backward()
        with torch.no_grad():
            torch._foreach_add_(params, [p.grad for p in params], alpha=-LR)
        for p in params:
            p.grad = None
        return loss.detach()

    return step, "compiled loss+backward, eager update"


# ----------------------------------------------------------------------------- runners


class Runner:
    """Holds mutable state; ``call()`` performs one training step."""

    def __init__(self, step, params, x, y, functional: bool):
        self.step, self.params, self.x, self.y = step, params, x, y
        self.functional = functional
        self.loss = None

    def call(self):
        if self.functional:
            self.params, self.loss = self.step(self.params, self.x, self.y)
            return self.params
        self.loss = self.step(self.params, self.x, self.y)
        return self.loss


def measure(name, runner, ref_loss, ref_params, pending, args, compile_time=False,
            convert=lambda p: p, note=""):
    """First call (checked against the reference); the warm calls are timed later, all
    implementations interleaved (``time_pending``)."""
    first = first_call_seconds(runner.call)
    checks = [check_close(name, runner.loss, ref_loss)]
    checks += [check_close(name, convert(p), r) for p, r in zip(runner.params, ref_params)]
    bad = [c for c in checks if c != "ok"]
    pending.append({"name": name, "runner": runner, "check": "ok" if not bad else bad[0],
                    "first": first, "note": note, "compile": compile_time})


def time_pending(pending, table, args, compile_times) -> None:
    """Warm calls of every implementation, interleaved round by round (the machine's speed
    drifts; see ``common.timeit_interleaved``), then the table rows in the order measured."""
    timings = timeit_interleaved({p["name"]: p["runner"].call for p in pending
                                  if "runner" in p},
                                 warmup=2 if args.quick else 5,
                                 repeats=10 if args.quick else 100,
                                 max_time=6.0 if args.quick else 40.0)
    for p in pending:
        if "runner" not in p:
            table.add_unavailable(p["name"], p["unavailable"])
            continue
        t = timings[p["name"]]
        table.add(p["name"], t, note=p["note"], check=p["check"])
        if p["compile"]:
            compile_times[p["name"]] = (p["first"], t.median)


def run(args) -> dict:
    global BATCH, DIMS
    if args.large:
        BATCH, DIMS = 512, (784, 2048, 2048, 10)
    params0 = init_params()
    x, y = make_data()
    ref_loss, ref_params = reference(params0, x, y)
    table = ResultTable(f"W1: MLP {'-'.join(map(str, DIMS))} tanh train step, batch {BATCH}, "
                        "float32 (ms/step)", unit="ms", extra_cols=("check",))
    compile_times: dict = {}        # name -> (first call s, warm call s), filled by time_pending
    pending: list = []              # implementations whose first call passed, to be timed

    def unavailable(name: str, reason: str) -> None:
        pending.append({"name": name, "unavailable": reason})

    # NumPy
    def numpy_bench():
        r = Runner(numpy_step, copy_params(params0), x, y, functional=False)
        measure("numpy (manual backward)", r, ref_loss, ref_params, pending, args)
    guarded("numpy", numpy_bench)

    torch = import_torch()
    if torch is None:
        unavailable("torch eager", f"n/a ({import_error('torch')})")
        unavailable("torch.compile", f"n/a ({import_error('torch')})")
    else:
        def tparams(requires_grad=True):
            return [torch.tensor(p).requires_grad_(requires_grad) for p in params0]
        tx, ty = torch.tensor(x), torch.tensor(y)

        def torch_eager():
            r = Runner(torch_eager_step(torch), tparams(), tx, ty, functional=False)
            measure("torch eager", r, ref_loss, ref_params, pending, args)
        guarded("torch eager", torch_eager)

        def torch_compiled():
            errors = []
            for make, needs_grad in ((torch_compiled_step, False), (torch_compiled_fwd_step, True)):
                try:
                    step, variant = make(torch)
                    r = Runner(step, tparams(needs_grad), tx, ty, functional=False)
                    measure("torch.compile", r, ref_loss, ref_params, pending, args,
                            compile_time=True, note=variant)
                    return
                except Exception as exc:  # try the next variant
                    errors.append(short_error(exc, 100))
                    torch._dynamo.reset()
            raise RuntimeError(" | ".join(errors))
        guarded("torch.compile", torch_compiled)
        if not any(p["name"] == "torch.compile" for p in pending):
            unavailable("torch.compile", "failed (see above)")

    jax = import_jax()
    if jax is None:
        unavailable("jax.jit", f"n/a ({import_error('jax')})")
    else:
        def jax_bench():
            step = make_step(jax)
            jparams = [jax.numpy.asarray(p) for p in params0]
            jx, jy = jax.numpy.asarray(x), jax.numpy.asarray(y)
            r = Runner(step, jparams, jx, jy, functional=True)
            measure("jax.jit", r, ref_loss, ref_params, pending, args, compile_time=True)
        guarded("jax.jit", jax_bench)

    def jitgraph_bench():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        step = make_step(jg)
        r = Runner(step, copy_params(params0), x, y, functional=True)
        measure("jitgraph.jit", r, ref_loss, ref_params, pending, args, compile_time=True)
    guarded("jitgraph", jitgraph_bench)
    if not any(p["name"] == "jitgraph.jit" for p in pending):
        unavailable("jitgraph.jit", "unavailable")

    time_pending(pending, table, args, compile_times)
    table.print()
    print()

    compile_rows = []
    for name in ("torch.compile", "jax.jit", "jitgraph.jit"):
        if name in compile_times:
            first, warm = compile_times[name]
            compile_rows.append((name, f"{first - warm:8.3f} s   (first call {fmt_time(first)}, "
                                       f"warm call {fmt_time(warm)})"))
        else:
            compile_rows.append((name, "n/a"))
    print_kv("W1 cold compile (first call - warm call, fresh caches, in-process)", compile_rows)
    print()
    if args.large:
        return {"table": table.as_dict(),
                "compile_s": {k: v[0] - v[1] for k, v in compile_times.items()}}

    sizes = guarded("new batch sizes", new_batch_sizes, params0, jax)
    if sizes is not None:
        print_kv("W1 first call at a new batch size, after batch 128 (in-process)", [
            (name, "   ".join(f"batch {b}: {fmt_time(t)}" for b, t in row))
            for name, row in sizes.items()])
        print()

    warm = guarded("jitgraph warm start", warm_start, args)
    if warm is not None:
        print_kv("W1 jitgraph start-up in a new process (import + build + first call)", [
            ("cold (empty cache)", f"{warm['cold']['in_process_s']:.3f} s in-process "
                                   f"(import {warm['cold']['import_s']:.3f} s, first call "
                                   f"{warm['cold']['first_call_s']:.3f} s); process wall "
                                   f"{warm['cold']['wall_s']:.3f} s"),
            ("warm (disk cache)", f"{warm['warm_in_process_s']:.3f} s in-process "
                                  f"(import {warm['warm_import_s']:.3f} s, first call "
                                  f"{warm['warm_first_call_s']:.3f} s); process wall "
                                  f"{warm['warm_wall_s']:.3f} s  [median of {warm['n']}]"),
        ])
        rows = [("jitgraph.jit", f"{warm['new_cache_first_call_s']:.3f} s first call (trace + "
                                 f"compile + run), median of {warm['n']}"),
                ("  without compile workers", f"{warm['no_workers_first_call_s']:.3f} s  "
                                              "(JITGRAPH_COMPILE_WORKERS=0)")]
        if "jax.jit" in compile_times:
            jax_s = compile_times["jax.jit"][0] - compile_times["jax.jit"][1]
            rows.append(("jax.jit (cold, above)", f"{jax_s:.3f} s   -> jitgraph / jax = "
                                                  f"{warm['new_cache_first_call_s'] / jax_s:.2f}x"))
        print_kv("W1 cold compile in a new process, empty jitgraph cache, kernels/ helpers "
                 "compiled", rows)
    else:
        print_kv("W1 jitgraph start-up in a new process", [("warm start", "unavailable")])
    print()
    return {"table": table.as_dict(),
            "compile_s": {k: v[0] - v[1] for k, v in compile_times.items()},
            "new_batch_sizes": sizes, "warm_start": warm}


# ----------------------------------------------------------------------------- new batch sizes


def new_batch_sizes(params0, jax) -> dict:
    """First-call seconds of the step at batch 100, then 77, after batch 128, for a step
    function that has only seen batch 128. jitgraph compiles one program with the batch size
    as a runtime argument at the second size and serves the third from it; jax.jit compiles
    each size."""
    out = {}
    libs = [("jitgraph.jit", import_jitgraph())] + ([("jax.jit", jax)] if jax is not None else [])
    for name, lib in libs:
        if lib is None:
            continue
        step = make_step(lib)
        conv = (lambda a: lib.numpy.asarray(a)) if name == "jax.jit" else (lambda a: a)
        row = []
        for b in (128, 100, 77):
            x, y = make_data(batch=b)
            params = [conv(p) for p in copy_params(params0)]
            t = first_call_seconds(lambda: step(params, conv(x), conv(y)))
            if b != 128:
                row.append((b, t))
        out[name] = row
    return out


# ----------------------------------------------------------------------------- warm start


def warm_start_child() -> None:
    """Runs in a fresh process: import jitgraph, build the step, call it once."""
    params = init_params()
    x, y = make_data()
    t0 = time.perf_counter()
    import jitgraph
    import jitgraph.numpy  # noqa: F401
    t_import = time.perf_counter()
    step = make_step(jitgraph)
    new_params, loss = step(params, x, y)
    block(new_params)
    float(np.asarray(loss))
    t_first = time.perf_counter()
    print("WARMSTART_JSON " + json.dumps({
        "import_s": t_import - t0, "first_call_s": t_first - t_import,
        "in_process_s": t_first - t0, "loss": float(np.asarray(loss))}), flush=True)


def _spawn_child(cache_dir: str, jit_dir: str | None = None, env: dict | None = None) -> dict:
    env = dict(os.environ, **(env or {}))
    env["JITGRAPH_CACHE_DIR"] = jit_dir or os.path.join(cache_dir, "jitgraph")
    env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    env["BENCH_KEEP_CACHES"] = "1"   # keep the cache directories as given
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--warmstart-child"],
                          env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("WARMSTART_JSON "):
            d = json.loads(line[len("WARMSTART_JSON "):])
            d["wall_s"] = wall
            return d
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"child exited {proc.returncode}: {tail[0][:200]}")


def warm_start(args) -> dict:
    """New processes: one with empty caches (it populates both), then ``n`` with an empty
    jitgraph cache beside the populated Numba cache (jitgraph's ``kernels/`` helpers compiled:
    the cold compile the issue's target speaks of), then ``n`` with both caches warm."""
    if import_jitgraph() is None:
        raise RuntimeError(import_error("jitgraph"))
    cache_dir = common.fresh_dir("jitgraph-warmstart")
    cold = _spawn_child(cache_dir)          # populates the cache
    n = 1 if args.quick else 3
    new_cache, serial = [], []
    for _ in range(n):          # alternating: with compile workers (the default) and without
        new_cache.append(_spawn_child(cache_dir, jit_dir=common.fresh_dir("jitgraph-newcache")))
        serial.append(_spawn_child(cache_dir, jit_dir=common.fresh_dir("jitgraph-newcache"),
                                   env={"JITGRAPH_COMPILE_WORKERS": "0"}))
    runs = [_spawn_child(cache_dir) for _ in range(n)]
    med = lambda rs, k: float(np.median([r[k] for r in rs]))  # noqa: E731
    files = sum(len(fs) for _, _, fs in os.walk(cache_dir))
    return {"cold": cold, "warm_runs": runs, "n": n, "cache_files": files,
            "new_cache_runs": new_cache, "no_workers_runs": serial,
            "new_cache_first_call_s": med(new_cache, "first_call_s"),
            "no_workers_first_call_s": med(serial, "first_call_s"),
            "warm_in_process_s": med(runs, "in_process_s"), "warm_import_s": med(runs, "import_s"),
            "warm_first_call_s": med(runs, "first_call_s"), "warm_wall_s": med(runs, "wall_s")}


# ----------------------------------------------------------------------------- main


def main(argv=None) -> dict:
    if argv is None:
        argv = sys.argv[1:]
    if "--warmstart-child" in argv:
        warm_start_child()
        return {}
    def extra(p):
        p.add_argument("--large", action="store_true",
                       help="784-2048-2048-10 at batch 512 (step times only)")
    return common.run_main(__doc__, "W1 MLP train step", "w1", run, argv, extra)


if __name__ == "__main__":
    main()
