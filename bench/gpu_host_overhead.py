"""Host time of a cached GPU training step: jitgraph's own Python per call, with the launches
themselves stubbed out (``cuda_driver.Driver.launch``, ``library_call`` and ``replay`` do no
work), so what is timed is the call path: argument checks, the signature lookup, buffers from
the pool, the generated driver, the graph-replay lookup and the result pytree.

Workload: one SGD step of the 784-512-512-10 tanh MLP at batch 128 (softmax cross-entropy,
parameters a list of (W, b) tuples, donated), as in ``gpu_bench.py``'s ``mlp_small``.
Rows: the direct launch sequence (``cuda_graph=False``) and graph replay (the default).
Targets (the GPU issue): under 20 µs per step before graph capture, under 5 µs with it.

Runs without a GPU (Numba's CUDA simulator: no kernel runs, the launches are stubbed), or on
one (``--real``: the same stubs on the real driver layer).

    python bench/gpu_host_overhead.py [--quick] [--json out.json] [--real]
"""
from __future__ import annotations

import os
import sys

if "--real" not in sys.argv:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba is imported (by common)

import common  # noqa: E402,I001  (sets thread limits before numpy/numba load)

import numpy as np  # noqa: E402

from common import ResultTable, time_per_call  # noqa: E402

SIZES = (784, 512, 512, 10)
BATCH = 128


def make_step(jitgraph, jnp, cuda_graph: bool):
    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jnp.tanh(h)
        z = h - jnp.max(h, axis=1, keepdims=True)
        return -jnp.mean(jnp.sum((z - jnp.log(jnp.sum(jnp.exp(z), axis=1, keepdims=True)))
                                 * y, axis=1))

    def sgd(params, x, y):
        value, grads = jitgraph.value_and_grad(loss)(params, x, y)
        return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)], value
    return jitgraph.jit(sgd, device="cuda", donate_argnums=0, cuda_graph=cuda_graph)


class NoCublas:
    """CuPy's raw cuBLAS names, doing nothing: the call path up to cuBLAS is what is timed
    (without a GPU there is no cuBLAS, and the tiled kernel's path is not the one timed)."""
    CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_POINTER_MODE_HOST = 0, 1, 0

    def create(self):
        return 1

    def setStream(self, *a):
        pass

    setWorkspace = setPointerMode = setMathMode = sgemmStridedBatched = dgemmStridedBatched = \
        setStream


def stub_launches(driver) -> None:
    """Launches, library calls and graph replays count but do nothing; products take the
    cuBLAS path (``NoCublas`` where no cuBLAS binding loads)."""
    from jitgraph.kernels.cuda_matmul import Blas, load_blas
    if load_blas(driver)[0] is None:
        driver.libraries["blas"] = (Blas("cupy", NoCublas(), driver), "")
    counts = driver.counts

    def launch(kernel, grid, block, args):
        counts.launches += 1

    def library_call(fn, *args):
        counts.library_calls += 1

    def replay(graph):
        counts.graph_launches += 1
    driver.launch, driver.library_call, driver.replay = launch, library_call, replay


def run(args) -> dict:
    import jitgraph
    import jitgraph.numpy as jnp
    from jitgraph.cuda_driver import counting, driver

    d = driver()
    stub_launches(d)
    r = np.random.default_rng(0)
    host = [(r.standard_normal((a, b)).astype(np.float32) * 0.05, np.zeros(b, np.float32))
            for a, b in zip(SIZES, SIZES[1:])]
    x = r.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[r.integers(0, SIZES[-1], BATCH)]
    table = ResultTable(f"Host time of a cached MLP step {'-'.join(map(str, SIZES))}, batch "
                        f"{BATCH}, launches stubbed (µs/call)", unit="us",
                        extra_cols=("per call",))
    out = {}
    for graphs in (False, True):
        step = make_step(jitgraph, jnp, graphs)
        state = {"p": jitgraph.device_put(host)}
        xd, yd = jitgraph.device_put((x, y))

        def call():
            state["p"], _ = step(state["p"], xd, yd)
        for _ in range(8):
            call()
        with counting() as c:
            call()
        t = time_per_call(call, number=200 if args.quick else 2000,
                          repeats=5 if args.quick else 15, warmup_calls=50,
                          max_time=3.0 if args.quick else 8.0)
        what = (f"{c.launches} launches, {c.library_calls} cuBLAS" if not graphs else
                f"{c.graph_launches} graph launch")
        what += f", {c.allocs} allocs, {c.syncs} syncs, {c.h2d + c.d2h} copies"
        name = "jitgraph, graph replay" if graphs else "jitgraph, direct launches"
        table.add(name, t, "cuda_graph=True" if graphs else "cuda_graph=False",
                  **{"per call": what})
        out["graph" if graphs else "direct"] = t.median * 1e6
    table.print()
    return {"us_per_call": out}


if __name__ == "__main__":
    common.run_main(__doc__, "GPU host overhead", "gpu_host_overhead", run,
                    extra=lambda p: p.add_argument("--real", action="store_true",
                                                   help="on a real GPU (launches still stubbed)"))
