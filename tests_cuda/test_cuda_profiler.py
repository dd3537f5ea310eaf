"""jitgraph.benchmark on the GPU path (simulator): timed with CUDA events, not a host clock."""
from __future__ import annotations

import numpy as np

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import profiler


def test_gpu_benchmark_times_with_cuda_events(monkeypatch):
    from numba import cuda
    recorded = []
    real_event = cuda.event

    def counting_event(*a, **k):
        ev = real_event(*a, **k)
        orig = ev.record

        def record(*ra, **rk):
            recorded.append(1)
            return orig(*ra, **rk)
        ev.record = record
        return ev
    monkeypatch.setattr(cuda, "event", counting_event)

    def no_host_clock():
        raise AssertionError("a host clock timed GPU work")
    f = jitgraph.jit(lambda x: jnp.exp(x) + 1.0, device="cuda")
    x = jitgraph.device_put(np.ones(8, np.float32))
    monkeypatch.setattr(profiler, "time_host", lambda *a, **k: no_host_clock())
    r = jitgraph.benchmark(f, x, reps=3, min_time=1e-4, warmup=1)
    assert r.device == "cuda" and r.stats.n == 3
    assert len(recorded) >= 2 * 3                 # a start and an end event per sample
    np.testing.assert_allclose(np.asarray(f(x)), np.e + 1.0, rtol=1e-6)
