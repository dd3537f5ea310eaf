"""RNN with lax.scan: forward + backward of a tanh RNN (hidden 256, batch 32, input 64, float32)
over T steps, ``jit(value_and_grad(loss))`` with ``lax.scan``, jitgraph vs jax.jit.

loss = mean(h_1..h_T) + mean(h_T ** 2), gradient wrt (Wx, Wh, b). Reports the step time at
T = 100 (ratio to jax.jit) and the compile time (first call minus a warm call, fresh caches)
at T = 10 and T = 1000: a scan compiles its body once, so it should not grow with T.

    python bench/rnn_scan.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/jax load)

import json
import os
import subprocess
import sys

import numpy as np

from common import (ResultTable, check_close, first_call_seconds, fmt_time, guarded,
                    import_error, import_jax, import_jitgraph, print_kv, run_main, timeit)

HIDDEN, BATCH, INPUT = 256, 32, 64
STEPS = 100


def init(seed: int = 0, steps: int = STEPS):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((INPUT, HIDDEN)) / np.sqrt(INPUT)).astype(np.float32),
              (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32),
              np.full((HIDDEN,), 0.01, np.float32)]
    xs = rng.standard_normal((steps, BATCH, INPUT)).astype(np.float32)
    return params, xs


def reference(params, xs):
    """Loss and gradients in float64 NumPy: the forward loop, then backpropagation in time."""
    Wx, Wh, b = (p.astype(np.float64) for p in params)
    xs = xs.astype(np.float64)
    T = len(xs)
    hs = [np.zeros((BATCH, HIDDEN))]
    for t in range(T):
        hs.append(np.tanh(xs[t] @ Wx + hs[-1] @ Wh + b))
    loss = np.mean(np.stack(hs[1:])) + np.mean(hs[-1] ** 2)
    direct = 1.0 / (T * BATCH * HIDDEN)
    g_h = direct + 2 * hs[-1] / (BATCH * HIDDEN)
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    for t in range(T, 0, -1):
        dz = g_h * (1 - hs[t] ** 2)
        dWx += xs[t - 1].T @ dz
        dWh += hs[t - 1].T @ dz
        db += dz.sum(0)
        g_h = dz @ Wh.T + direct
    return loss, [dWx, dWh, db]


def make_step(lib):
    """jit(value_and_grad(loss)) written once for jax and jitgraph."""
    jnp, lax = lib.numpy, lib.lax

    def loss(params, xs):
        Wx, Wh, b = params

        def cell(h, x):
            h = jnp.tanh(jnp.dot(x, Wx) + jnp.dot(h, Wh) + b)
            return h, h
        h, hs = lax.scan(cell, jnp.zeros((BATCH, HIDDEN), jnp.float32), xs)
        return jnp.mean(hs) + jnp.mean(h * h)
    return lib.jit(lib.value_and_grad(loss))


def compile_child(name: str, steps: int) -> None:
    """Runs in a fresh process (empty caches): the compile seconds of a new step function at
    ``steps`` steps, as first call minus a warm call."""
    lib = import_jax() if name == "jax.jit" else import_jitgraph()
    if name == "jax.jit":
        import jax.lax
        conv = jax.numpy.asarray
    else:
        conv = lambda a: a  # noqa: E731
    params, xs = init(steps=steps)
    params, xs = [conv(p) for p in params], conv(xs)
    step = make_step(lib)
    first = first_call_seconds(lambda: step(params, xs))
    warm = min(first_call_seconds(lambda: step(params, xs)) for _ in range(2))
    print("COMPILE_JSON " + json.dumps({"compile_s": first - warm}), flush=True)


def compile_seconds(name: str, steps: int) -> float:
    """``compile_child`` in a new process with fresh jitgraph and Numba caches."""
    cache = common.fresh_dir("rnn-compile")
    env = dict(os.environ, JITGRAPH_CACHE_DIR=os.path.join(cache, "jitgraph"),
               NUMBA_CACHE_DIR=os.path.join(cache, "numba"), BENCH_KEEP_CACHES="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--compile-child", name,
                           str(steps)], env=env, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("COMPILE_JSON "):
            return json.loads(line[len("COMPILE_JSON "):])["compile_s"]
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"child exited {proc.returncode}: {tail[0][:200]}")


def run(args) -> dict:
    params, xs = init()
    ref_loss, ref_grads = reference(params, xs)
    table = ResultTable(f"RNN scan: tanh cell hidden {HIDDEN}, batch {BATCH}, input {INPUT}, "
                        f"{STEPS} steps, forward + backward, float32 (ms/step)", unit="ms",
                        extra_cols=("check",))
    libs = []
    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.jit", f"n/a ({import_error('jax')})")
    else:
        jax.lax = __import__("jax.lax").lax
        libs.append(("jax.jit", jax, lambda a: jax.numpy.asarray(a)))
    jg = import_jitgraph()
    if jg is None:
        table.add_unavailable("jitgraph.jit", f"n/a ({import_error('jitgraph')})")
    else:
        libs.append(("jitgraph.jit", jg, lambda a: a))
    compile_rows = []
    results: dict = {"compile_s": {}}
    for name, lib, conv in libs:
        def bench(name=name, lib=lib, conv=conv):
            step = make_step(lib)
            p, x = [conv(a) for a in params], conv(xs)
            loss, grads = step(p, x)
            checks = [check_close(name, loss, ref_loss)] + [
                check_close(name, g, r, rtol=5e-3, atol=1e-5) for g, r in zip(grads, ref_grads)]
            bad = [c for c in checks if c != "ok"]
            t = timeit(lambda: step(p, x), warmup=2, repeats=5 if args.quick else 20,
                       max_time=3.0 if args.quick else 10.0)
            table.add(name, t, check=bad[0] if bad else "ok")
        guarded(name, bench)
        lengths = (10, 100) if args.quick else (10, 1000)
        secs = {n: guarded(f"{name} compile at {n} steps", compile_seconds, name, n)
                for n in lengths}
        results["compile_s"][name] = secs
        compile_rows.append((name, "   ".join(
            f"{n} steps: {fmt_time(s) if s is not None else 'n/a'}" for n, s in secs.items())))
    table.print()
    print()
    print_kv("RNN scan cold compile (first call - warm call, fresh caches, new process each)",
             compile_rows)
    print()
    results["table"] = table.as_dict()
    return results


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if "--compile-child" in argv:
        i = argv.index("--compile-child")
        compile_child(argv[i + 1], int(argv[i + 2]))
        return {}
    return run_main(__doc__, "RNN scan benchmark", "rnn_scan", run, argv)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
