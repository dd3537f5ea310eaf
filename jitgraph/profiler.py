"""Benchmarking and profiling from Python: ``benchmark``, ``profile``, ``machine_peaks``.

Timing traps this avoids by construction: the first call (which compiles) is timed apart from
the cached calls; each sample runs the function enough times that the clock's resolution does
not matter; garbage collection is off while timing; results are medians with the interquartile
range, not means. On the GPU the host clock is never put around an asynchronous launch: CUDA
events recorded on the stream time the calls, after a synchronisation.

For a ``jit`` function the result also has a per-step table: each generated kernel, BLAS call
and host call, with its time (from a variant of the program whose driver reads a clock after
every step: ``perf_counter`` on the CPU, a CUDA event recorded on the launch stream on the
GPU), the bytes it must move and the FLOPs it performs (from the fusion plan's shapes,
``compiler/cost.py``), the GB/s and GFLOP/s it reached and whether the roofline of this
machine (``machine_peaks``) says it is memory- or compute-bound. The profiled calls go through
the ``jit`` function itself, so the call's entry (dispatch, argument checks, allocation) and
exit are measured in the same calls as the steps.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["BenchmarkResult", "Stats", "StepProfile", "benchmark", "machine_peaks", "profile",
           "sample_host", "time_cuda", "time_host"]


# ---------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Stats:
    """Seconds per call over ``n`` samples, each the mean of ``number`` back-to-back calls."""
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    n: int
    number: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def from_samples(cls, per_call: list[float], number: int = 1) -> "Stats":
        a = np.asarray(per_call, dtype=np.float64)
        if a.size == 0:
            raise ValueError("no timing samples")
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(a.mean()), float(a.min()), float(a.max()), float(q1),
                   float(q3), int(a.size), int(number))


def _autorange(call: Callable[[], Any], target: float, clock) -> int:
    """How many calls per sample make one sample last at least ``target`` seconds."""
    number = 1
    while True:
        t0 = clock()
        for _ in range(number):
            call()
        dt = clock() - t0
        if dt >= target or number >= 1 << 20:
            return number
        number = max(number * 2, int(number * target / max(dt, 1e-9) * 1.2))


def sample_host(call: Callable[..., Any], reps: int, number: int, *, args: tuple = (),
                sync: Callable[[Any], Any] | None = None, clock=time.perf_counter) -> list[float]:
    """Seconds per call of ``reps`` samples, each ``number`` back-to-back calls of
    ``call(*args)`` (no wrapper around it: a 2 us function is timed, not a closure) timed by
    ``clock`` with garbage collection off; ``sync`` is applied to each sample's last result
    (``block_until_ready`` for JAX's asynchronous dispatch). The sampling loop of
    ``time_host`` and of the project's own benchmarks (``bench/common.py``)."""
    samples = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            t0 = clock()
            for _ in range(number - 1):
                call(*args)
            r = call(*args)
            if sync is not None:
                sync(r)
            samples.append((clock() - t0) / number)
    finally:
        if was_enabled:
            gc.enable()
    return samples


def time_host(call: Callable[..., Any], *, warmup: int = 3, reps: int = 20,
              min_time: float = 0.2, sync: Callable[[Any], Any] | None = None,
              args: tuple = ()) -> Stats:
    """Time a synchronous ``call(*args)`` with ``time.perf_counter``: ``warmup`` calls, then
    ``reps`` samples of enough calls each (autoranged) that they last ``min_time`` in all."""
    def timed():
        r = call(*args)
        return r if sync is None else sync(r)
    for _ in range(warmup):
        timed()
    number = _autorange(timed, max(min_time / max(reps, 1), 2e-4), time.perf_counter)
    return Stats.from_samples(sample_host(call, reps, number, args=args, sync=sync), number)


def time_cuda(call: Callable[[], Any], *, warmup: int = 3, reps: int = 20,
              min_time: float = 0.2, stream=None) -> Stats:
    """Time GPU work with CUDA events recorded on ``stream`` (the driver's stream, where
    jitgraph's kernels run, if None): the host clock around an asynchronous launch would time
    the launch, not the kernel."""
    from numba import cuda

    from .cuda_driver import driver
    start, end = cuda.event(), cuda.event()
    if stream is None:
        stream = driver().stream

    def timed(number: int) -> float:
        start.record(stream)
        for _ in range(number):
            call()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    for _ in range(warmup):
        call()
    cuda.synchronize()
    number, target = 1, max(min_time / max(reps, 1), 2e-4)
    while number < 1 << 20:
        t0 = time.perf_counter()            # timed() synchronises: the host time bounds it
        if max(timed(number), time.perf_counter() - t0) >= target:
            break
        number *= 2
    samples = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            samples.append(timed(number) / number)
    finally:
        if was_enabled:
            gc.enable()
    return Stats.from_samples(samples, number)


# ---------------------------------------------------------------- machine peaks
def _device_name(device: str) -> str:
    if device == "cuda":
        from numba import cuda
        name = getattr(cuda.get_current_device(), "name", "CUDA simulator")
        return name.decode() if isinstance(name, bytes) else str(name)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} ({os.cpu_count()} cpus)"


def _measure_cpu_peaks(size: int = 1 << 24, runs: int = 3) -> dict:
    """STREAM copy/triad over all cores and a matmul per dtype, ``runs`` times each: the rate
    of every run (``machine_peaks`` keeps the best, since a busy core only slows a run down).
    The matmul grows from 512 until one product lasts 50 ms (at most 4096): big enough to
    reach the BLAS's peak, a second or two in all on a small machine."""
    from jitgraph.kernels.stream import stream_copy, stream_triad
    a, b, c = np.ones(size), np.ones(size), np.ones(size)
    stream_copy(a, b)                     # compile (or load) the kernels, touch the pages
    stream_triad(a, b, c, 3.0)
    copy = [2 * a.nbytes / _wall(lambda: stream_copy(a, b)) / 1e9 for _ in range(runs)]
    triad = [3 * a.nbytes / _wall(lambda: stream_triad(a, b, c, 3.0)) / 1e9
             for _ in range(runs)]
    flops = {}
    for dt in ("float32", "float64"):
        n = 512
        while True:
            x = np.ones((n, n), dt)
            if _wall(lambda: x @ x) >= 0.05 or n >= 4096:    # also the warm-up
                break
            n *= 2
        flops[dt] = [2 * n ** 3 / _wall(lambda: x @ x) / 1e9 for _ in range(runs)]
    return {"bandwidth_GBs": {"copy": copy, "triad": triad}, "flops_GFs": flops}


def _measure_cuda_peaks(size: int = 1 << 26) -> dict:
    """Device-to-device copy bandwidth and a 4096^3 matmul (CuPy/cuBLAS when installed), each
    the fastest of 5 samples timed with CUDA events."""
    from numba import cuda
    a = cuda.device_array(size, np.float32)
    b = cuda.device_array(size, np.float32)
    copy = time_cuda(lambda: b.copy_to_device(a), reps=5, min_time=0.05).min
    flops = {}
    try:
        import cupy
        n = 4096
        for dt in ("float32", "float64"):
            x = cupy.ones((n, n), dt)
            t = time_cuda(lambda: x @ x, reps=5, min_time=0.05,
                          stream=cuda.external_stream(cupy.cuda.get_current_stream().ptr)).min
            flops[dt] = 2 * n ** 3 / t / 1e9
    except ImportError:
        pass
    return {"bandwidth_GBs": {"copy": 2 * a.nbytes / copy / 1e9}, "flops_GFs": flops,
            "runs": 5}


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


_MEASURE = {"cpu": _measure_cpu_peaks, "cuda": _measure_cuda_peaks}
_REMEASURED: set = set()    # peaks files measured again in this process: once each, no loop


def _peaks_file(device: str) -> tuple[str, Path]:
    """The device's model name and its peaks file, keyed by that name."""
    from .compiler.disk_cache import default_cache_dir
    name = _device_name(device)
    key = hashlib.sha256(f"{device}:{name}".encode()).hexdigest()[:16]
    return name, default_cache_dir() / "peaks" / f"{device}-{key}.json"


def _measure(device: str, name: str) -> dict:
    """One measurement: each metric the best of its runs (a measuring function returns a
    rate, or a list of rates, one a run), with the run count, the load average (a busy machine
    measures low) and the time it was taken."""
    raw = dict(_MEASURE[device]())
    runs = raw.pop("runs", None)
    lists = [len(v) for g in ("bandwidth_GBs", "flops_GFs") for v in raw[g].values()
             if isinstance(v, (list, tuple))]
    for g in ("bandwidth_GBs", "flops_GFs"):
        raw[g] = {k: float(max(v) if isinstance(v, (list, tuple)) else v)
                  for k, v in raw[g].items()}
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):       # not on Windows
        load = None
    return {"device": name, "kind": device, **raw, "runs": int(runs or max(lists, default=1)),
            "loadavg": load, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _store(path: Path, data: dict) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return data


def machine_peaks(device: str = "cpu", refresh: bool = False) -> dict:
    """Attainable memory bandwidth (GB/s) and matmul FLOP/s (GFLOP/s, per dtype) of this
    machine's CPU or GPU, the best of several runs, measured once and kept in the jit cache
    directory, keyed by the device model, with the run count, load average and time of the
    measurement; ``refresh=True`` measures again and replaces it, a damaged file is measured
    again. ``profile`` measures again (once) when a step runs faster than a stored peak."""
    if device not in _MEASURE:
        raise ValueError(f"machine_peaks: device must be 'cpu' or 'cuda', not {device!r}")
    name, path = _peaks_file(device)
    if not refresh and path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("device") == name and data["bandwidth_GBs"] and "flops_GFs" in data:
                # a file from before these were recorded: measured once, load unknown
                return {"runs": 1, "loadavg": None, "measured_at": None, **data}
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        warnings.warn(f"machine_peaks: {path} is damaged; measuring again", stacklevel=2)
    return _store(path, _measure(device, name))


def _remeasure(device: str) -> dict:
    """Measure again and store, per metric, the higher of the stored and the new figure: a
    run on a busy machine can only understate a peak, never overstate it."""
    old = machine_peaks(device)
    name, path = _peaks_file(device)
    new = _measure(device, name)
    for g in ("bandwidth_GBs", "flops_GFs"):
        new[g] = {k: max(old[g].get(k, 0.0), new[g].get(k, 0.0)) for k in {**old[g], **new[g]}}
    new["runs"] += old["runs"]
    return _store(path, new)


# ---------------------------------------------------------------- results
@dataclass
class StepProfile:
    """One step of a compiled program: what it is, how long it took, what it moved."""
    name: str
    kind: str
    ops: list
    seconds: float
    bytes: int
    flops: int
    bound: str = ""             # "memory" | "compute" (roofline of machine_peaks)
    peak_fraction: float = float("nan")

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("nan")

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else float("nan")

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass
class BenchmarkResult:
    """What ``benchmark``/``profile`` measured; ``print`` it, or ``to_dict``/``to_json``."""
    name: str
    device: str
    stats: Stats
    first_call_s: float
    compile_s: float | None = None
    kernels: list = field(default_factory=list)       # StepProfile, one per program step
    peaks: dict | None = None
    note: str = ""              # e.g. that the CUDA simulator's events measure nothing
    # measured around the same profiled calls as the steps (medians, seconds): the whole call
    # through jit's dispatch, its entry (dispatch, argument checks, output and scratch
    # allocation: up to the first step) and its exit (after the last step: results returned)
    call_s: float | None = None
    call_entry_s: float | None = None
    call_exit_s: float | None = None
    coverage: float | None = None   # median over profiled calls of (steps' sum / whole call)
    memory: Any = None          # the program's MemoryStats (planned bytes, peak live)

    @property
    def steps_s(self) -> float:
        return float(sum(k.seconds for k in self.kernels))

    @property
    def peaks_stale(self) -> bool:
        """A step ran faster than the stored peak, so that peak is below what this machine
        does (measured on a busy machine, or the step's data stayed in cache)."""
        return any(k.peak_fraction > 1 for k in self.kernels)

    def to_dict(self) -> dict:
        d = {"name": self.name, "device": self.device, "stats": asdict(self.stats),
             "first_call_s": self.first_call_s, "compile_s": self.compile_s,
             "steps_s": self.steps_s if self.kernels else None, "peaks": self.peaks,
             "kernels": [dict(asdict(k), gbps=k.gbps, gflops=k.gflops) for k in self.kernels],
             "note": self.note, "call_s": self.call_s, "call_entry_s": self.call_entry_s,
             "call_exit_s": self.call_exit_s, "coverage": self.coverage,
             "peaks_stale": self.peaks_stale,
             "memory": asdict(self.memory) if self.memory is not None else None}
        d["stats"]["iqr"] = self.stats.iqr
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=_json_default, **kw)

    def compare(self, other: "BenchmarkResult") -> str:
        """One line for an A/B comparison: ``other``'s median over this one's."""
        r = other.stats.median / self.stats.median
        faster = "faster" if r > 1 else "slower"
        return (f"{self.name}: {_fmt_s(self.stats.median)} vs {other.name}: "
                f"{_fmt_s(other.stats.median)} -> {self.name} is {max(r, 1 / r):.2f}x {faster}")

    def plot_roofline(self, path: str) -> str:
        """A roofline chart (log-log: FLOP/byte against GFLOP/s) with each step as a point."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("plot_roofline needs matplotlib: pip install matplotlib "
                              "(or pip install -e '.[plots]')") from None
        peaks = self.peaks or machine_peaks(self.device)
        bw = max(peaks["bandwidth_GBs"].values())
        fl = max(peaks["flops_GFs"].values()) if peaks["flops_GFs"] else bw
        fig, ax = plt.subplots(figsize=(7, 5))
        xs = np.logspace(-3, 3, 200)
        ax.plot(xs, np.minimum(bw * xs, fl), "k-", label=f"roofline ({bw:.0f} GB/s, {fl:.0f} GFLOP/s)")
        for k in self.kernels:
            if k.flops and k.bytes and k.seconds > 0:
                ax.plot(k.intensity, k.gflops, "o")
                ax.annotate(k.name, (k.intensity, k.gflops), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{self.name} on {peaks.get('device', self.device)}")
        ax.legend(loc="lower right")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return path

    def __str__(self) -> str:
        s = self.stats
        lines = [f"{self.name} ({self.device}): median {_fmt_s(s.median)}, IQR "
                 f"{_fmt_s(s.q1)}-{_fmt_s(s.q3)}, min {_fmt_s(s.min)}, max {_fmt_s(s.max)} "
                 f"({s.n} samples x {s.number} calls); first call {_fmt_s(self.first_call_s)}"
                 + (f", compile {_fmt_s(self.compile_s)}" if self.compile_s is not None else "")]
        if self.kernels:
            call = self.call_s or s.median
            lines.append(f"  {'step':<16} {'kind':<8} {'time':>10} {'%call':>6} {'MB':>9} "
                         f"{'MFLOP':>9} {'GB/s':>7} {'GFLOP/s':>8} {'bound':>8} {'%peak':>6}  ops")
            for k in self.kernels:
                ops = ",".join(dict.fromkeys(k.ops))
                lines.append(
                    f"  {k.name:<16} {k.kind:<8} {_fmt_s(k.seconds):>10} "
                    f"{100 * k.seconds / call:5.1f}% {k.bytes / 1e6:9.3f} "
                    f"{k.flops / 1e6:9.3f} {k.gbps:7.2f} {k.gflops:8.2f} {k.bound or '-':>8} "
                    f"{_pct(k.peak_fraction):>6}  {ops[:40]}")
            if self.call_s is None:
                rest = s.median - self.steps_s
                lines.append(f"  steps total {_fmt_s(self.steps_s)} of the {_fmt_s(s.median)} "
                             f"call ({100 * self.steps_s / s.median:.1f}%); launch and Python "
                             f"overhead {_fmt_s(max(rest, 0.0))}")
            else:
                for what, t in (("call entry", self.call_entry_s), ("call exit", self.call_exit_s)):
                    lines.append(f"  {what:<16} {'call':<8} {_fmt_s(t):>10} "
                                 f"{100 * t / call:5.1f}%  "
                                 + ("dispatch, argument checks, output allocation"
                                    if what == "call entry" else "results returned"))
                lines.append(f"  steps total {_fmt_s(self.steps_s)} of the {_fmt_s(call)} "
                             f"profiled call ({100 * self.coverage:.1f}%, median per call; the "
                             f"rest is the call's entry and exit); the plain call's median "
                             f"{_fmt_s(s.median)}")
            if self.peaks_stale:
                lines.append("  * >100%: a step ran faster than the stored peak, so the peak is "
                             "stale (measured on a busy machine) or the step's data stayed in "
                             "cache; refresh it with jitgraph.machine_peaks(refresh=True)")
        if self.memory is not None:
            lines.append(f"  memory (planned): {self.memory}")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)

    __repr__ = __str__


def _pct(x: float) -> str:
    """A fraction of peak; above 1 never as a bare number, the footnote says why."""
    return "-" if x != x else ">100%*" if x > 1 else f"{100 * x:.1f}%"


def _fmt_s(t: float | None) -> str:
    if t is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(type(o).__name__)


# ---------------------------------------------------------------- entry points
def _target_for(f, args, device: str | None):
    """The compiler target whose hardware runs ``f``: ``device`` where given, else a jit
    function's own, else CUDA where an argument is a device array, else the CPU."""
    from .compiler.pipeline import target_of
    from .targets import TARGETS
    if device is None:
        own = getattr(f, "device", None)
        device = own if isinstance(own, str) and own in TARGETS else "cpu"
        if TARGETS[device].capabilities.hardware == "cpu":
            from .tree import tree_leaves
            if any(hasattr(x, "__cuda_array_interface__") for x in tree_leaves((args,))):
                device = "cuda"
    return target_of(device, "benchmark: unknown device")


def benchmark(f: Callable, *args: Any, warmup: int = 3, reps: int = 20, min_time: float = 0.2,
              device: str | None = None, profile: bool | None = None, peaks: bool = False,
              **kwargs: Any) -> BenchmarkResult:
    """Time ``f(*args, **kwargs)``: the first call apart (``first_call_s``, and ``compile_s``
    when it compiled a ``jit`` program), then ``reps`` samples of enough back-to-back calls to
    last ``min_time`` in all; ``print`` the result for a report. A donated argument that is a
    jitgraph array is passed again to every call: where the program updates it in place it
    holds its own new value, as in training, else its old one (a NumPy array is copied first
    by each call: pass ``jnp.array(x)`` to time the update alone).

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> @jitgraph.jit
    ... def double_sin(x):
    ...     return jnp.sin(x) * 2.0
    >>> result = jitgraph.benchmark(double_sin, np.ones(1000), reps=3, min_time=0.01, profile=False)
    >>> result.name, result.device, result.stats.n
    ('double_sin', 'cpu', 3)
    >>> result.stats.median > 0
    True

    ```

    :param f: any callable; a ``jit`` function also gets the per-step table.
    :param args: ``f``'s positional arguments.
    :param warmup: calls made before timing (after the first call).
    :param reps: the number of samples.
    :param min_time: seconds all samples should last together; each sample is the mean of
        enough back-to-back calls for that.
    :param device: a compiler target's name, ``"cpu"`` or ``"cuda"`` (default: a ``jit``
        function's own; ``"cuda"`` when an argument is a device array); on the GPU, CUDA
        events time the calls.
    :param profile: for a ``jit`` function, add the per-step table: each kernel, BLAS and host
        call with its time, bytes, FLOPs and rates (default on; ``False`` skips it).
    :param peaks: rate each step against this machine's ``machine_peaks`` (measured once per
        machine, again when a step beats it).
    :param kwargs: ``f``'s keyword arguments.
    :returns: a ``BenchmarkResult``: ``stats`` (median, IQR, min, max in seconds per call),
        ``first_call_s``, ``compile_s`` and the per-step table.
    """
    from .jit import JitFunction, cache_info
    target = _target_for(f, args, device)
    hardware = target.capabilities.hardware     # how to time it, the peaks to rate it by

    def call():
        return f(*args, **kwargs)

    before = cache_info()["misses"]
    sync = target.synchronize
    t0 = time.perf_counter()
    call()
    sync()
    first = time.perf_counter() - t0
    compiled = isinstance(f, JitFunction) and cache_info()["misses"] > before
    if hardware == "cuda":
        stats = time_cuda(call, warmup=warmup, reps=reps, min_time=min_time)
    elif kwargs:
        stats = time_host(call, warmup=warmup, reps=reps, min_time=min_time)
    else:        # f itself in the timed loop, no closure around it
        stats = time_host(f, warmup=warmup, reps=reps, min_time=min_time, args=args)
    result = BenchmarkResult(getattr(f, "__name__", type(f).__name__), hardware, stats, first,
                             max(first - stats.median, 0.0) if compiled else None)
    if hardware == "cuda":
        from .device import simulator
        if simulator():
            result.note = ("CUDA simulator: its events record no time, so these times are "
                           "placeholders; byte and FLOP counts are exact")
    if isinstance(f, JitFunction) and profile is not False:
        steps = _profile_steps(f, args, kwargs, reps=max(reps, 5), hardware=hardware)
        for k, v in steps.items():
            setattr(result, k, v)
        if peaks:
            result.peaks = _rate_against_peaks(result.kernels, hardware)
    return result


def profile(f: Callable, *args: Any, reps: int = 20, peaks: bool = True,
            **kwargs: Any) -> BenchmarkResult:
    """``benchmark`` with the per-step table of a ``jit`` function or a ``train_step`` (see
    ``benchmark``), each step rated against this machine's peaks (measured once, then read
    from the cache; measured again once when a step runs faster than a stored peak)."""
    from .jit import JitFunction
    inner = getattr(f, "jit_function", None)    # a train_step: its program, with its arguments
    if not isinstance(f, JitFunction) and isinstance(inner, JitFunction):
        f = inner
    if not isinstance(f, JitFunction):
        raise TypeError(f"profile: {getattr(f, '__name__', f)!r} is not a jit function or a "
                        "train_step; wrap it in jitgraph.jit, or use jitgraph.benchmark to time "
                        "any callable")
    return benchmark(f, *args, reps=reps, profile=True, peaks=peaks, **kwargs)


def _profile_steps(f, args, kwargs, reps: int, hardware: str = "cpu") -> dict:
    """Per-step medians from the profiling variant of ``f``'s program for these arguments,
    called through ``f`` itself (its dispatch, checks and allocation included): on the CPU
    ``perf_counter`` marks before the call, after each step and after the call; on the GPU
    CUDA events recorded there on the stream the kernels run on (read after the call, never a
    host clock around a launch). Returns the ``BenchmarkResult`` fields it measured."""
    from .compiler.cost import step_cost
    from .compiler.fusion import kernel_ops
    from .compiler.settings import compile_settings
    entry, leaves, _ = f._entry(args, kwargs)
    prog = entry.program
    if getattr(prog, "symbols", ()) and any(
            np.shape(x) != v.aval.shape for x, v in zip(leaves, prog.graph.inputs)):
        # a program with runtime sizes serving other sizes: profile it at this call's
        statics, dyn_args, dyn_kwargs = f._split(args, kwargs)
        graph, _ = f._trace(args, kwargs, statics, dyn_args, dyn_kwargs, probe=True)
        prog = prog.profiled(graph)
    else:
        prog = prog.profiled()
    run = prog.make_runner(entry.in_dtypes, entry.out_tree)
    marks, clock = prog.module.profile_marks, prog.module.profile_clock
    reset = getattr(clock, "reset", lambda: None)    # a pool of CUDA events, reused per call
    if hardware == "cuda":
        from .compiler.backends.cuda_program import event_intervals as intervals
    else:
        intervals = np.diff
    with compile_settings(f.device):
        run(*leaves)
    rows = []
    plain, entry.run = entry.run, run      # f's own call path, with the profiled program
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            del marks[:]
            reset()
            t0 = clock()
            f(*args, **kwargs)
            t1 = clock()
            rows.append(intervals([t0, *marks, t1]))
    finally:
        entry.run = plain
        del marks[:]
        if was_enabled:
            gc.enable()
    a = np.asarray(rows, dtype=np.float64)   # reps x (entry, steps..., exit)
    med = np.median(a, axis=0)
    steps = []
    memory = entry.program.stages.get("memory")
    run_steps = getattr(prog.stages.get("memory"), "steps_run", None) or prog.plan.steps
    for s, t in zip(run_steps, med[1:-1]):      # (a loop and its product tail: one step)
        c = step_cost(s, prog.plan)
        steps.append(StepProfile(s.name, c.kind, [n.prim.name for n in kernel_ops(s)],
                                 float(t), c.bytes, c.flops))
    whole = a.sum(axis=1)
    stats = None
    if memory is not None and not getattr(entry.program, "symbols", ()):
        stats = memory.stats()      # the program f runs (with its donation), fixed sizes
    return {"kernels": steps, "memory": stats, "call_s": float(np.median(whole)),
            "call_entry_s": float(med[0]),
            "call_exit_s": float(med[-1]),
            "coverage": float(np.median(a[:, 1:-1].sum(axis=1) / np.where(whole > 0, whole,
                                                                            np.nan)))}


def _rate_against_peaks(steps: list[StepProfile], device: str) -> dict:
    """Rate the steps against the stored peaks. A step faster than a peak means the peak was
    measured low: measure again (once per process and file, never a loop), keep the higher
    figures and rate again; a step still above it is printed as stale (``_pct``)."""
    peaks = machine_peaks(device)
    _rate(steps, peaks)
    path = _peaks_file(device)[1]
    if any(s.peak_fraction > 1 for s in steps) and path not in _REMEASURED:
        _REMEASURED.add(path)
        peaks = _remeasure(device)
        _rate(steps, peaks)
    return peaks


def _rate(steps: list[StepProfile], peaks: dict) -> None:
    """Memory- or compute-bound by the roofline's ridge point, and the fraction of that peak."""
    bw = max(peaks["bandwidth_GBs"].values())
    fl = max(peaks["flops_GFs"].values()) if peaks["flops_GFs"] else float("inf")
    ridge = fl / bw
    for s in steps:
        if s.intensity < ridge:
            s.bound, s.peak_fraction = "memory", s.gbps / bw
        else:
            s.bound, s.peak_fraction = "compute", s.gflops / fl


# ---------------------------------------------------------------- command line
def _load_target(target: str):
    """``path/to/file.py:name`` or ``package.module:name``; ``name()`` returns ``(f, args)`` or
    ``(f, args, kwargs)``."""
    import importlib
    import importlib.util
    where, _, name = target.rpartition(":")
    if not where or not name:
        raise SystemExit(f"expected FILE.py:FUNCTION or MODULE:FUNCTION, got {target!r}")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_jitgraph_bench_target", where)
        if spec is None or not os.path.exists(where):
            raise SystemExit(f"no such file: {where}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    made = getattr(module, name)()
    if callable(made):
        return made, (), {}
    f, args, *rest = made
    return f, tuple(args), dict(rest[0]) if rest else {}


def main(argv=None, prog: str = "python -m jitgraph.profiler") -> None:
    """``python -m jitgraph.bench FILE.py:FUNCTION [--reps N] [--json OUT] [--roofline PNG]``
    (or ``python -m jitgraph.profiler``): FUNCTION() returns ``(f, args[, kwargs])``; prints
    the benchmark (and, for a jit function, the per-step profile)."""
    a = command_line(prog).parse_args(argv)
    f, args, kwargs = _load_target(a.target)
    r = benchmark(f, *args, reps=a.reps, min_time=a.min_time, peaks=not a.no_peaks, **kwargs)
    print(r)
    if a.json:
        with open(a.json, "w") as fh:
            fh.write(r.to_json(indent=1))
    if a.roofline:
        print("roofline:", r.plot_roofline(a.roofline))


def command_line(prog: str = "python -m jitgraph.profiler"):
    """The parser of ``python -m jitgraph.bench`` (the docs' commands are checked against it)."""
    import argparse
    ap = argparse.ArgumentParser(
        prog=prog, description="Benchmark a function (and, for a jit function, profile it step "
        "by step): FUNCTION() returns (f, args[, kwargs]).")
    ap.add_argument("target", metavar="FILE.py:FUNCTION",
                    help="the file (or module) and the function that makes (f, args[, kwargs])")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions (default 20)")
    ap.add_argument("--min-time", type=float, default=0.2,
                    help="seconds each measurement runs at least (default 0.2)")
    ap.add_argument("--no-peaks", action="store_true", help="do not rate steps against peaks")
    ap.add_argument("--json", help="write the result as JSON to this file")
    ap.add_argument("--roofline", help="draw a roofline chart to this file (needs matplotlib)")
    return ap


if __name__ == "__main__":
    main()
