"""jitgraph.benchmark / profile / machine_peaks: statistics on known timings, exact byte and
FLOP counts of known kernels, the profiling driver, the peaks file. No timing thresholds."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import profiler
from jitgraph.compiler.cost import step_cost
from jitgraph.profiler import Stats


# ------------------------------------------------------------------ statistics
def test_stats_of_known_samples():
    s = Stats.from_samples([float(v) for v in range(10, 0, -1)], number=7)
    assert (s.median, s.min, s.max, s.mean) == (5.5, 1.0, 10.0, 5.5)
    assert (s.q1, s.q3, s.iqr) == (3.25, 7.75, 4.5)           # linear interpolation, as NumPy
    assert (s.n, s.number) == (10, 7)
    with pytest.raises(ValueError):
        Stats.from_samples([])


def test_time_host_uses_inner_repetitions_and_counts_calls():
    calls = []
    st = profiler.time_host(lambda: calls.append(1), warmup=2, reps=5, min_time=0.01)
    assert st.n == 5 and st.number > 1                      # a ~100 ns call: many per sample
    assert st.min <= st.median <= st.max
    # warm-up, the autorange probes and the samples all really called the function
    assert len(calls) >= 2 + 5 * st.number


def test_benchmark_any_callable():
    r = jitgraph.benchmark(lambda a: a.sum(), np.ones(100), reps=4, min_time=0.01)
    assert r.compile_s is None and r.kernels == [] and r.device == "cpu"
    assert r.stats.n == 4 and r.first_call_s > 0
    d = json.loads(r.to_json())
    assert d["stats"]["median"] == r.stats.median and d["stats"]["iqr"] == r.stats.iqr
    assert "median" in str(r)


# ------------------------------------------------------------------ bytes and FLOPs
def _single_step(f, *args):
    lo = jitgraph.jit(f).lower(*args)
    assert len(lo.plan.steps) == 1, lo.plan.steps
    return step_cost(lo.plan.steps[0], lo.plan)


def test_cost_of_a_fused_elementwise_kernel_is_exact():
    x = np.ones(1 << 20, np.float32)
    c = _single_step(lambda x: jnp.tanh(x) * 2.0 + 1.0, x)
    assert c.kind == "loop"
    assert c.bytes == 2 * x.nbytes                          # read x once, write the result once
    assert c.flops == 3 * x.size                            # tanh, mul, add per element


def test_cost_of_a_softmax_row_kernel_is_exact():
    x = np.ones((8, 16), np.float32)
    c = _single_step(lambda x: jnp.exp(x - jnp.max(x, axis=1, keepdims=True)), x)
    # reads x once (the row pass and the second pass read the same array: counted once),
    # writes the result; per element: max, sub, exp
    assert c.bytes == 2 * x.nbytes
    assert c.flops == 3 * x.size


def test_cost_of_a_matmul_is_exact():
    a = np.ones((128, 784), np.float32)
    b = np.ones((784, 512), np.float32)
    c = _single_step(lambda a, b: a @ b, a, b)
    assert c.kind == "matmul"
    assert c.flops == 2 * 128 * 784 * 512
    assert c.bytes == a.nbytes + b.nbytes + 128 * 512 * 4


def test_cost_of_a_gemm_epilogue_counts_c():
    w = np.ones((8, 4), np.float32)
    x = np.ones((16, 8), np.float32)
    d = np.ones((16, 4), np.float32)
    c = _single_step(lambda w, x, d: w - 0.5 * (x.T @ d), w, x, d)
    assert c.flops == 2 * 8 * 4 * 16 + 8 * 4 + 2 * 8 * 4     # product, alpha, beta*c + ...
    assert c.bytes == x.nbytes + d.nbytes + 2 * w.nbytes


# ------------------------------------------------------------------ profile
def mlp_step(params, x, y):
    def loss(p):
        h = jnp.tanh(x @ p[0] + p[1])
        return -jnp.mean(jnp.sum(jitgraph.nn.log_softmax(h @ p[2] + p[3]) * y, axis=1))
    v, g = jitgraph.value_and_grad(loss)(params)
    return [p - 0.1 * gp for p, gp in zip(params, g)], v


def test_profile_names_every_step_of_the_program():
    r = np.random.default_rng(0)
    params = [r.standard_normal((6, 5)).astype(np.float32), np.zeros(5, np.float32),
              r.standard_normal((5, 3)).astype(np.float32), np.zeros(3, np.float32)]
    x = r.standard_normal((4, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    f = jitgraph.jit(mlp_step)
    res = jitgraph.profile(f, params, x, y, reps=3, min_time=0.005, peaks=False)
    lo = f.lower(params, x, y)
    assert [k.name for k in res.kernels] == [s.name for s in lo.plan.steps]
    assert {k.kind for k in res.kernels} == {"loop", "matmul"}
    for k, s in zip(res.kernels, lo.plan.steps):
        c = step_cost(s, lo.plan)
        assert (k.bytes, k.flops) == (c.bytes, c.flops)
        assert k.seconds >= 0
    assert res.compile_s is not None                        # the first call compiled
    text = str(res)
    assert "steps total" in text and all(k.name in text for k in res.kernels)
    assert "call entry" in text and "call exit" in text
    assert res.call_s > 0 and res.call_entry_s >= 0 and res.call_exit_s >= 0
    assert 0 < res.coverage <= 1
    # the accounting, on a clock that ticks once per reading: the profiled calls go through
    # f itself (a mark before the call, one before the first step, one after each step, one
    # after the call), and f's own call path is back afterwards
    entry = f._entry((params, x, y), {})[0]
    plain = entry.run
    module = entry.program.profiled().module
    ticks = iter(range(10 ** 6))
    module.profile_clock = lambda: float(next(ticks))
    got = profiler._profile_steps(f, (params, x, y), {}, reps=3)
    n = len(lo.plan.steps)
    assert [k.seconds for k in got["kernels"]] == [1.0] * n
    assert (got["call_entry_s"], got["call_exit_s"], got["call_s"]) == (1.0, 1.0, n + 2.0)
    assert got["coverage"] == n / (n + 2)
    assert entry.run is plain and module.profile_marks == []
    # the profiled variant computes what the program computes
    np.testing.assert_allclose(f(params, x, y)[1], mlp_step(params, x, y)[1], rtol=1e-5)


def test_profile_of_a_call_served_by_a_program_with_runtime_sizes():
    f = jitgraph.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=1))
    b = np.ones((4, 3), np.float32)
    f(np.ones((8, 4), np.float32), b)
    f(np.ones((6, 4), np.float32), b)              # the batch size becomes a runtime argument
    a = np.full((5, 4), 0.1, np.float32)
    res = jitgraph.profile(f, a, b, reps=2, min_time=0.001, peaks=False)
    mm, loop = res.kernels                          # costed at this call's sizes
    assert (mm.flops, mm.bytes) == (2 * 5 * 3 * 4, (5 * 4 + 4 * 3 + 5 * 3) * 4)
    assert (loop.flops, loop.bytes) == (2 * 5 * 3, (5 * 3 + 5) * 4)
    np.testing.assert_allclose(f(a, b), np.tanh(a @ b).sum(axis=1), rtol=1e-6)


def test_profile_rates_steps_against_peaks(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(profiler._MEASURE, "cpu", lambda: {
        "bandwidth_GBs": {"copy": 10.0, "triad": 12.0}, "flops_GFs": {"float32": 120.0}})
    f = jitgraph.jit(lambda a, b: a @ b + 1.0)
    a = np.ones((64, 64), np.float32)
    res = jitgraph.profile(f, a, a, reps=2, min_time=0.005)
    ridge = 120.0 / 12.0
    for k in res.kernels:
        assert k.bound == ("memory" if k.intensity < ridge else "compute")
        assert k.peak_fraction == pytest.approx(k.gbps / 12.0 if k.bound == "memory"
                                                else k.gflops / 120.0)
    assert res.peaks["flops_GFs"] == {"float32": 120.0}


def test_profile_of_a_train_step_profiles_its_program(monkeypatch, tmp_path):
    """``profile(train_step(...), params, state, x, y)``: the step's program, one row per
    kernel, its arguments donated call after call as the step donates them."""
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    import jitgraph.optim as optim
    opt = optim.sgd(0.1)
    step = jitgraph.train_step(lambda p, x, y: jnp.mean((x @ p["w"] - y) ** 2), opt)
    p = {"w": np.ones((8, 2), np.float32)}
    x, y = np.ones((16, 8), np.float32), np.zeros((16, 2), np.float32)
    res = jitgraph.profile(step, p, opt.init(p), x, y, reps=2, min_time=0.005, peaks=False)
    assert any(k.kind == "matmul" for k in res.kernels), res
    assert res.stats.median > 0 and res.call_s > 0


def test_profile_of_a_plain_function_is_a_clear_error():
    with pytest.raises(TypeError, match="not a jit function"):
        jitgraph.profile(lambda x: x, np.ones(2))


# ------------------------------------------------------------------ machine peaks
def test_peaks_are_measured_once_and_remeasured_when_damaged(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    calls = []

    def fake():
        calls.append(1)
        return {"bandwidth_GBs": {"copy": 20.0 + len(calls)}, "flops_GFs": {"float64": 50.0}}
    monkeypatch.setitem(profiler._MEASURE, "cpu", fake)
    p1 = jitgraph.machine_peaks("cpu")
    p2 = jitgraph.machine_peaks("cpu")
    assert len(calls) == 1 and p1 == p2 and p1["bandwidth_GBs"]["copy"] == 21.0
    (path,) = list((tmp_path / "peaks").glob("cpu-*.json"))
    path.write_text('{"device": ')                           # truncated
    with pytest.warns(UserWarning, match="damaged"):
        p3 = jitgraph.machine_peaks("cpu")
    assert len(calls) == 2 and p3["bandwidth_GBs"]["copy"] == 22.0
    assert json.loads(path.read_text()) == p3
    with pytest.raises(ValueError, match="device"):
        jitgraph.machine_peaks("tpu")


def test_real_cpu_peaks_are_plausible(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    real = profiler._measure_cpu_peaks
    monkeypatch.setitem(profiler._MEASURE, "cpu", lambda: real(size=1 << 16))
    p = jitgraph.machine_peaks("cpu")
    assert p["kind"] == "cpu" and p["device"]
    assert all(v > 0 for v in p["bandwidth_GBs"].values())
    assert set(p["flops_GFs"]) == {"float32", "float64"} and all(
        v > 0 for v in p["flops_GFs"].values())
    assert p["runs"] == 3 and p["measured_at"]


def _scripted(monkeypatch, *figures):
    """``_MEASURE["cpu"]`` returning these measurements in turn; the list of calls made."""
    calls = []

    def fake():
        calls.append(1)
        return figures[min(len(calls), len(figures)) - 1]
    monkeypatch.setitem(profiler._MEASURE, "cpu", fake)
    return calls


def test_peaks_are_the_best_of_the_runs_with_load_and_time(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(profiler.os, "getloadavg", lambda: (1.5, 0.75, 0.25))
    _scripted(monkeypatch, {
        "bandwidth_GBs": {"copy": [9.0, 14.0, 11.0], "triad": [12.0, 8.0, 13.0]},
        "flops_GFs": {"float32": [80.0, 60.0, 95.0], "float64": [40.0, 45.0, 30.0]}})
    p = jitgraph.machine_peaks("cpu")
    assert p["bandwidth_GBs"] == {"copy": 14.0, "triad": 13.0}
    assert p["flops_GFs"] == {"float32": 95.0, "float64": 45.0}
    assert p["runs"] == 3 and p["loadavg"] == [1.5, 0.75, 0.25]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", p["measured_at"])
    (path,) = (tmp_path / "peaks").glob("cpu-*.json")
    assert json.loads(path.read_text()) == p                  # all of it stored beside the figures


def test_peaks_without_a_load_average(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.delattr(profiler.os, "getloadavg")           # as on Windows
    _scripted(monkeypatch, {"bandwidth_GBs": {"copy": 10.0}, "flops_GFs": {}})
    p = jitgraph.machine_peaks("cpu")
    assert p["loadavg"] is None and p["runs"] == 1 and p["bandwidth_GBs"] == {"copy": 10.0}


def _step(gbps: float) -> profiler.StepProfile:
    """A memory-bound step moving 1 GB at ``gbps`` (0.1 FLOP/byte)."""
    return profiler.StepProfile("k0_loop", "loop", ["add"], 1.0 / gbps, 10 ** 9, 10 ** 8)


def _result(steps) -> profiler.BenchmarkResult:
    r = profiler.BenchmarkResult("f", "cpu", Stats.from_samples([1.0]), 1.0)
    r.kernels, r.call_s, r.call_entry_s, r.call_exit_s, r.coverage = steps, 1.0, 0.0, 0.0, 1.0
    return r


def _bare_above_100(text: str) -> list:
    return [m for m in re.findall(r"(\d+(?:\.\d+)?)%", text) if float(m) > 100]


def test_a_step_above_the_peak_measures_it_again_once(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    calls = _scripted(monkeypatch,
                      {"bandwidth_GBs": {"copy": [10.0, 8.0]}, "flops_GFs": {"float64": [100.0]}},
                      {"bandwidth_GBs": {"copy": [25.0, 40.0]}, "flops_GFs": {"float64": [70.0]}})
    jitgraph.machine_peaks("cpu")
    assert len(calls) == 1
    steps = [_step(30.0)]                                     # 300 % of the stored 10 GB/s
    peaks = profiler._rate_against_peaks(steps, "cpu")
    assert len(calls) == 2                                    # measured again, once
    # the higher figure per metric is kept: the new bandwidth, the old FLOP/s
    assert peaks["bandwidth_GBs"] == {"copy": 40.0} and peaks["flops_GFs"] == {"float64": 100.0}
    assert peaks["runs"] == 2 + 2
    assert jitgraph.machine_peaks("cpu") == peaks             # stored
    assert steps[0].bound == "memory" and steps[0].peak_fraction == pytest.approx(0.75)
    r = _result(steps)
    assert not r.peaks_stale and "75.0%" in str(r) and "stale" not in str(r)
    assert json.loads(r.to_json())["peaks_stale"] is False


def test_a_step_still_above_the_peak_is_marked_stale(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    calls = _scripted(monkeypatch,
                      {"bandwidth_GBs": {"copy": 10.0}, "flops_GFs": {"float64": 100.0}},
                      {"bandwidth_GBs": {"copy": 20.0}, "flops_GFs": {"float64": 100.0}})
    steps = [_step(30.0), _step(5.0)]
    peaks = profiler._rate_against_peaks(steps, "cpu")
    assert len(calls) == 2 and peaks["bandwidth_GBs"] == {"copy": 20.0}
    assert steps[0].peak_fraction == pytest.approx(1.5)      # the number stays in the data
    profiler._rate_against_peaks([_step(30.0)], "cpu")
    assert len(calls) == 2                                    # once per process, no loop
    r = _result(steps)
    r.peaks = peaks
    text = str(r)
    assert r.peaks_stale and ">100%*" in text and "25.0%" in text
    assert "stale" in text and "jitgraph.machine_peaks(refresh=True)" in text
    assert _bare_above_100(text) == []
    d = json.loads(r.to_json())
    assert d["peaks_stale"] is True and d["kernels"][0]["peak_fraction"] == pytest.approx(1.5)


def test_profile_measures_stale_peaks_again_once(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    low = {"bandwidth_GBs": {"copy": 1e-9}, "flops_GFs": {"float32": 1e-9}}   # any step beats it
    calls = _scripted(monkeypatch, low)
    f = jitgraph.jit(lambda a, b: a @ b + 1.0)
    a = np.ones((16, 16), np.float32)
    res = jitgraph.profile(f, a, a, reps=2, min_time=0.001)
    assert len(calls) == 2 and res.peaks_stale and res.peaks["runs"] == 2
    text = str(res)
    assert text.count(">100%*") == len(res.kernels) and "refresh=True" in text
    assert _bare_above_100(text) == []
    jitgraph.profile(f, a, a, reps=2, min_time=0.001)
    assert len(calls) == 2


def test_old_peaks_file_loads_as_measured_once(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    calls = _scripted(monkeypatch, {"bandwidth_GBs": {"copy": [5.0, 6.0, 4.0]},
                                    "flops_GFs": {"float64": [1.0, 2.0, 3.0]}})
    name = jitgraph.machine_peaks("cpu")["device"]
    (path,) = (tmp_path / "peaks").glob("cpu-*.json")
    old = {"device": name, "kind": "cpu", "bandwidth_GBs": {"copy": 12.0, "triad": 13.0},
           "flops_GFs": {"float32": 90.0, "float64": 45.0}}   # as written before runs/load
    path.write_text(json.dumps(old))
    p = jitgraph.machine_peaks("cpu")
    assert len(calls) == 1 and p == {**old, "runs": 1, "loadavg": None, "measured_at": None}
    peaks = profiler._rate_against_peaks([_step(20.0)], "cpu")      # merges with the old file
    assert len(calls) == 2 and peaks["runs"] == 1 + 3
    assert peaks["bandwidth_GBs"] == {"copy": 12.0, "triad": 13.0}
    assert peaks["flops_GFs"] == {"float32": 90.0, "float64": 45.0}


# ------------------------------------------------------------------ output
def test_compare_and_roofline(tmp_path):
    a = profiler.BenchmarkResult("a", "cpu", Stats.from_samples([1e-3]), 1e-3)
    b = profiler.BenchmarkResult("b", "cpu", Stats.from_samples([2e-3]), 2e-3)
    assert re.search(r"a is 2\.00x faster", a.compare(b))
    assert re.search(r"b is 2\.00x slower", b.compare(a))
    pytest.importorskip("matplotlib")
    a.peaks = {"bandwidth_GBs": {"copy": 10.0}, "flops_GFs": {"float32": 100.0}}
    a.kernels = [profiler.StepProfile("k0", "loop", ["add"], 1e-4, 10 ** 6, 10 ** 6)]
    out = a.plot_roofline(str(tmp_path / "roof.png"))
    assert (tmp_path / "roof.png").stat().st_size > 0 and out.endswith("roof.png")


def test_command_line_end_to_end(tmp_path):
    """``python -m jitgraph.bench FILE.py:FUNCTION`` in a fresh process."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "target.py"
    script.write_text("import numpy as np\nimport jitgraph, jitgraph.numpy as jnp\n"
                      "def make():\n"
                      "    return jitgraph.jit(lambda x: jnp.exp(x) + 1.0), (np.ones(8),)\n")
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "jitgraph.bench", f"{script}:make", "--reps", "2",
                        "--min-time", "0.001", "--no-peaks", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "median" in p.stdout and "steps total" in p.stdout and "k0_loop" in p.stdout
    d = json.loads(out.read_text())
    assert d["stats"]["n"] == 2 and [k["flops"] for k in d["kernels"]] == [16]
    with pytest.raises(SystemExit, match="FILE.py:FUNCTION"):
        profiler.main(["nonsense"])
