"""``jitgraph.profile`` of the MLP training step on the GPU, appended to the GPU results file.

The step of ``bench/w1_mlp_train_step.py`` (784-512-512-10, tanh, softmax cross-entropy, SGD
lr 0.1, batch 128, float32) compiled with ``jit(device="cuda")``, parameters and data on the
device. The table has one row per step of the CUDA program (generated kernel, cuBLAS call,
host step): its time between CUDA events recorded on the launch stream, the bytes and FLOPs
the fusion plan says it moves and performs, GB/s, GFLOP/s and, against the GPU's measured
peaks (``jitgraph.machine_peaks("cuda")``), whether it is memory- or compute-bound; then the
sum of the steps against the whole call. Appended to ``--out`` as a markdown section
(``bench/gpu_check.sh`` passes the file it writes the GPU benchmark table to).

    python bench/gpu_profile.py [--out bench/gpu_results.md] [--sim] [--quick] [--budget S]

``--sim`` runs it at tiny sizes under Numba's CUDA simulator (no GPU; its events record no
time, so only the structure and the byte/FLOP counts mean anything): a check of this script.
``--quick`` profiles 10 calls instead of 50. ``--budget`` caps the whole script (compiling
included): when it runs out, or on SIGTERM/SIGINT, a ``FAILED`` line saying so is appended
instead of the table, and the exit status is 1.
"""
from __future__ import annotations

import os
import sys
import time

from gpu_args import Interrupted, StepTimeout, on_termination, parse_gpu_args, time_cap

T0 = time.monotonic()
ARGS = parse_gpu_args(__doc__.splitlines()[0], lambda p: p.add_argument(
    "--reps", type=int, default=None, help="profiled calls (default 50, --quick 10; 2 --sim)"))
on_termination()

# the W1 loss itself; its module's shared benchmark setup leaves this process's CPUs and
# cache directory alone
os.environ.setdefault("BENCH_NO_PIN", "1")
os.environ.setdefault("BENCH_KEEP_CACHES", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from w1_mlp_train_step import make_loss  # noqa: E402

import jitgraph  # noqa: E402
import jitgraph.numpy as jnp  # noqa: E402

DIMS, BATCH = ((8, 6, 6, 3), 4) if ARGS.sim else ((784, 512, 512, 10), 128)
LR = 0.1


loss = make_loss(jnp)


def step(params, x, y):
    value, grads = jitgraph.value_and_grad(loss)(params, x, y)
    return [p - LR * g for p, g in zip(params, grads)], value


def inputs():
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(DIMS[:-1], DIMS[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        params.append(np.full((fan_out,), 0.01, np.float32))
    x = rng.standard_normal((BATCH, DIMS[0])).astype(np.float32)
    y = np.eye(DIMS[-1], dtype=np.float32)[rng.integers(0, DIMS[-1], BATCH)]
    return params, x, y


def main() -> int:
    params, x, y = inputs()
    # not donated: profiling calls the step many times with the same parameters
    f = jitgraph.jit(step, device="cuda")
    dparams, dx, dy = jitgraph.device_put((params, x, y))
    reps = ARGS.reps or (2 if ARGS.sim else (10 if ARGS.quick else 50))
    r = jitgraph.profile(f, dparams, dx, dy, reps=reps, peaks=not ARGS.sim,
                         **({"min_time": 1e-4, "warmup": 1} if ARGS.sim else {}))
    dev = next((f"{d.name}" for d in jitgraph.devices() if d.platform == "cuda"), "none")
    mode = "CUDA SIMULATOR, tiny sizes (script check only)" if ARGS.sim else "GPU"
    peaks = ""
    if r.peaks:
        bw = ", ".join(f"{k} {v:.0f} GB/s" for k, v in r.peaks["bandwidth_GBs"].items())
        fl = ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in r.peaks["flops_GFs"].items())
        peaks = f"; peaks: {bw}" + (f", {fl}" if fl else "")
    text = (f"\n### jitgraph.profile of the MLP training step on the GPU "
            f"({'-'.join(map(str, DIMS))}, batch {BATCH}, float32)\n\n"
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {mode}; device: {dev}{peaks}; "
            f"per-step times between CUDA events on the launch stream, medians of {reps} "
            f"profiled calls\n\n```\n{r}\n```\n")
    print(text)
    _append(text)
    print(f"(profile appended to {ARGS.out})", file=sys.stderr)
    loss_now = float(np.asarray(f(dparams, dx, dy)[1]))
    return 0 if np.isfinite(loss_now) else 1


def _append(text: str) -> None:
    with open(ARGS.out, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def guarded() -> int:
    """``main`` under ``--budget``: a timeout, a signal or an error appends one FAILED line."""
    title = "\n### jitgraph.profile of the MLP training step on the GPU: FAILED: "
    try:
        if ARGS.budget:
            with time_cap(max(ARGS.budget - (time.monotonic() - T0), 1.0)):
                return main()
        return main()
    except StepTimeout:
        why = f"timed out after {time.monotonic() - T0:.0f} s (--budget {ARGS.budget:.0f} s)"
    except Interrupted as e:
        why = f"interrupted by {e.args[0] if e.args else 'a signal'} after {time.monotonic() - T0:.0f} s"
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        why = f"{type(e).__name__}: {msg}"
    _append(title + why + "\n")
    print(f"gpu_profile: FAILED: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    rc = guarded()
    if rc:
        # threads a cap interrupted (the simulator's) must not hold the exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
