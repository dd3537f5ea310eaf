"""jitgraph.benchmark and jitgraph.profile on the GPU path (simulator): the whole call and each
step timed with CUDA events on the launch stream, never a host clock; exact bytes and FLOPs."""
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


class _FakeEvent:
    """A CUDA event whose clock is the number of events recorded before it, in ms: every
    interval between consecutive records reads exactly 1 ms, which no host clock would."""
    count = 0
    log: list = []

    def __init__(self, *a, **k):
        self.t = None

    def record(self, stream=0):
        _FakeEvent.log.append(stream)
        self.t = float(_FakeEvent.count)
        _FakeEvent.count += 1

    def synchronize(self):
        assert self.t is not None, "synchronize before record"

    def elapsed_time(self, other):
        return other.t - self.t


def test_gpu_profile_times_each_step_with_events(monkeypatch):
    from numba import cuda

    from jitgraph.compiler.cost import step_cost
    monkeypatch.setattr(cuda, "event", _FakeEvent)
    cube = jitgraph.defprimitive("cuda_profile_cube", impl=lambda x: x * x * x)   # host step
    f = jitgraph.jit(lambda a, b: jnp.tanh(cube(a @ b)) + 1.0, device="cuda")
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    b = np.ones((4, 2), np.float32)
    da, db = jitgraph.device_put((a, b))
    res = jitgraph.profile(f, da, db, reps=2, min_time=1e-4, warmup=1, peaks=False)
    lo = f.lower(da, db)
    assert res.device == "cuda"
    assert [k.name for k in res.kernels] == [s.name for s in lo.plan.steps]
    assert [k.kind for k in res.kernels] == ["matmul", "host", "loop"]
    for k, s in zip(res.kernels, lo.plan.steps):
        assert k.seconds == 1e-3                  # one fake-event interval: timed by events
        c = step_cost(s, lo.plan)
        assert (k.bytes, k.flops) == (c.bytes, c.flops)
    mm, host, loop = res.kernels
    assert (mm.flops, mm.bytes) == (2 * 3 * 2 * 4, (12 + 8 + 6) * 4)
    assert host.bytes == 2 * 6 * 4                 # the 3x2 product in, its cube out
    assert (loop.flops, loop.bytes) == (2 * 6, 2 * 6 * 4)   # tanh, add; read, write 3x2
    from jitgraph.cuda_driver import driver
    assert set(_FakeEvent.log) == {driver().stream}   # all on the driver's stream, the kernels
    assert res.stats.median == 1e-3               # whole call: one start-to-end interval
    # profiled calls: an event before the call, before the first step, after each step and
    # after the call, all read as intervals on the GPU's clock
    assert (res.call_entry_s, res.call_exit_s, res.call_s) == (1e-3, 1e-3, 5e-3)
    assert res.coverage == 0.6
    assert "steps total 3 ms of the 5 ms profiled call (60.0%" in str(res)
    np.testing.assert_allclose(np.asarray(f(da, db)), np.tanh((a @ b) ** 3) + 1.0, rtol=1e-6)


def test_gpu_profile_rates_against_gpu_peaks(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(profiler._MEASURE, "cuda", lambda: {
        "bandwidth_GBs": {"copy": 1000.0}, "flops_GFs": {"float32": 50000.0}})
    f = jitgraph.jit(lambda x: jnp.exp(x) * 2.0, device="cuda")
    res = jitgraph.profile(f, jitgraph.device_put(np.ones(16, np.float32)), reps=1,
                           min_time=1e-4, warmup=1)
    (k,) = res.kernels
    assert k.bound == "memory" and res.peaks["kind"] == "cuda"
    assert (k.bytes, k.flops) == (2 * 16 * 4, 2 * 16)
