"""Shared helpers for the jitgraph comparison benchmarks.

Import this module FIRST in every benchmark script: importing it pins the thread
counts of every library (BLAS, OpenMP, MKL, Numba, XLA) through environment
variables, which only take effect if they are set before those libraries load.

Provides
  * ``setup_env`` (run at import): thread limits, fresh compile-cache dirs;
  * ``Timing`` / ``timeit`` / ``time_per_call``: warmup, N repeats, median & IQR, sampled and
    summarised by ``jitgraph.profiler`` (the timing code ``jitgraph.benchmark`` uses);
  * ``lib_available`` / ``import_torch`` / ``import_jax`` / ``import_jitgraph``:
    optional-library detection (a missing library becomes a row showing "n/a");
  * ``print_header``: versions, thread settings, CPU;
  * ``ResultTable``: results table with each library's median and its ratio to jitgraph;
  * ``parse_args`` / ``dump_json``: the common command-line flags (--quick, --json, ...).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

# --------------------------------------------------------------------------------------
# Environment: must happen before numpy / torch / jax / numba are imported.
# --------------------------------------------------------------------------------------

THREADS = int(os.environ.get("BENCH_THREADS", "2"))

# XLA:CPU sizes its intra-op pool from the CPUs this process may run on; the
# ``intra_op_parallelism_threads`` token is the classic TF-era recipe and is ignored by
# current XLA (it is not a --flag, so it does not trip XLA's unknown-flag check).
# ``--xla_cpu_multi_thread_eigen=false`` would make JAX's matmuls single-threaded, i.e.
# 1 thread where every other library gets 2, so it is only added when
# BENCH_XLA_SINGLE_THREAD_EIGEN=1.  On a machine with more than THREADS CPUs the process
# is pinned to THREADS CPUs instead (see setup_env), which caps XLA and everyone else.
# (A lone non-"--" token is read by XLA as a flags *file* name, so it can only follow a flag.)
_XLA_THREAD_TOKENS: list[str] = []
if os.environ.get("BENCH_XLA_SINGLE_THREAD_EIGEN") == "1":
    _XLA_THREAD_TOKENS = ["--xla_cpu_multi_thread_eigen=false",
                          f"intra_op_parallelism_threads={THREADS}"]

_TMP_ROOT: str | None = None
PINNED_CPUS: list[int] | None = None


def _tmp_root() -> str:
    global _TMP_ROOT
    if _TMP_ROOT is None:
        _TMP_ROOT = tempfile.mkdtemp(prefix="jitgraph-bench-")
        atexit.register(shutil.rmtree, _TMP_ROOT, ignore_errors=True)
    return _TMP_ROOT


def fresh_dir(name: str) -> str:
    """A new empty directory under this process's temporary root (removed at exit)."""
    path = tempfile.mkdtemp(prefix=name + "-", dir=_tmp_root())
    return path


def limit_isa(isa: str) -> None:
    """``BENCH_ISA=avx2``: every framework runs AVX2 code, on an AVX-512 machine too, so one
    machine measures both kinds of code path. Numba (and the kernels jitgraph compiles with
    LLVM alone) compiles for Haswell with the machine's features less AVX-512; OpenBLAS runs
    its Haswell kernels; PyTorch its AVX2 kernels (ATen, oneDNN, MKL); XLA at most AVX2. The
    cores stay the same (an AVX2 machine's caches and clock differ), so this shows whether
    a ratio hangs on AVX-512 code, not what an AVX2 machine measures."""
    if isa.lower() != "avx2":
        raise SystemExit(f"BENCH_ISA={isa!r}: the benchmarks know 'avx2'")
    import llvmlite.binding as llvm
    wide = ("avx512", "avx10", "amx", "evex512")
    os.environ["NUMBA_CPU_NAME"] = "haswell"
    os.environ["NUMBA_CPU_FEATURES"] = ",".join(
        ("+" if on and not name.startswith(wide) else "-") + name
        for name, on in sorted(llvm.get_host_cpu_features().items()))
    os.environ.update(OPENBLAS_CORETYPE="Haswell", ATEN_CPU_CAPABILITY="avx2",
                      ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_cpu_max_isa" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_max_isa=AVX2").strip()


def setup_env(threads: int = THREADS) -> None:
    """Pin thread counts and point compile caches at fresh, empty directories."""
    global PINNED_CPUS
    n = str(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = n
    flags = os.environ.get("XLA_FLAGS", "")
    for tok in _XLA_THREAD_TOKENS:
        key = tok.split("=")[0]
        if key not in flags:
            flags = (flags + " " + tok).strip()
    if flags:
        os.environ["XLA_FLAGS"] = flags
    # Some machines set OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE to work around old OpenBLAS builds;
    # with the current one they only force slower (Haswell) kernels onto newer CPUs, which would
    # handicap every BLAS user here (NumPy, jitgraph) against XLA. Benchmarks unset both
    # (BENCH_KEEP_OPENBLAS_ENV=1 keeps them); the header reports the kernel OpenBLAS then runs.
    if os.environ.get("BENCH_KEEP_OPENBLAS_ENV") != "1":
        os.environ.pop("OPENBLAS_CORETYPE", None)
        os.environ.pop("OPENBLAS_L2_SIZE", None)
    if os.environ.get("BENCH_ISA"):
        limit_isa(os.environ["BENCH_ISA"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # If the machine has more CPUs than we want threads, pin the process so that every
    # runtime that sizes its pool from the affinity mask (XLA, Numba, OpenMP) sees THREADS.
    if hasattr(os, "sched_getaffinity") and os.environ.get("BENCH_NO_PIN") != "1":
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > threads:
            PINNED_CPUS = cpus[:threads]
            os.sched_setaffinity(0, PINNED_CPUS)
    # Compile caches: cold-compile numbers must not be served from a previous run's disk
    # cache.  Each process gets fresh, empty cache directories (removed at exit).
    if os.environ.get("BENCH_KEEP_CACHES") != "1":
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = fresh_dir("torchinductor")
        os.environ["JITGRAPH_CACHE_DIR"] = fresh_dir("jitgraph-cache")
        os.environ["NUMBA_CACHE_DIR"] = fresh_dir("numba-cache")


setup_env()

# Make the in-repo jitgraph importable when a script is run as ``python bench/x.py``
# (sys.path[0] is then bench/, not the repository root).
# BENCH_USE_INSTALLED_JITGRAPH=1 benchmarks whatever jitgraph the environment provides instead.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_ROOT not in sys.path and os.environ.get("BENCH_USE_INSTALLED_JITGRAPH") != "1":
    sys.path.insert(1, _REPO_ROOT)

import numpy as np  # noqa: E402  (after the environment is set)

# --------------------------------------------------------------------------------------
# Optional libraries
# --------------------------------------------------------------------------------------

_IMPORT_ERRORS: dict[str, str] = {}
_MODULES: dict[str, object] = {}


def _try_import(name: str):
    if name in _MODULES:
        return _MODULES[name]
    if name in _IMPORT_ERRORS:
        return None
    try:
        mod = __import__(name)
    except Exception as exc:  # ImportError, or a broken install raising anything else
        _IMPORT_ERRORS[name] = f"{type(exc).__name__}: {exc}"
        return None
    _MODULES[name] = mod
    return mod


def import_torch():
    torch = _try_import("torch")
    if torch is not None and not getattr(torch, "_bench_threads_set", False):
        torch.set_num_threads(THREADS)
        try:
            torch.set_num_interop_threads(THREADS)
        except RuntimeError:
            pass  # already set / parallel work already started
        torch._bench_threads_set = True
    return torch


def import_jax():
    jax = _try_import("jax")
    if jax is not None:
        import jax.numpy  # noqa: F401
    return jax


def import_jitgraph():
    """Return the jitgraph module, or None (see ``import_error('jitgraph')``)."""
    jg = _try_import("jitgraph")
    if jg is not None:
        try:
            import jitgraph.numpy  # noqa: F401
        except Exception as exc:
            _IMPORT_ERRORS["jitgraph"] = f"{type(exc).__name__}: {exc}"
            _MODULES.pop("jitgraph", None)
            return None
    return jg


def lib_available(name: str) -> bool:
    importer = {"torch": import_torch, "jax": import_jax, "jitgraph": import_jitgraph}.get(name)
    return (importer() if importer else _try_import(name)) is not None


def import_error(name: str) -> str:
    return _IMPORT_ERRORS.get(name, "not imported")


def lib_version(name: str) -> str:
    mod = _MODULES.get(name) or sys.modules.get(name)
    if mod is None:
        try:
            from importlib.metadata import version
            return version(name) + " (not imported)"
        except Exception:
            return "n/a"
    return str(getattr(mod, "__version__", "?"))


def block(x):
    """Wait for asynchronous results (JAX); no-op for NumPy / torch CPU tensors."""
    fn = getattr(x, "block_until_ready", None)
    if fn is not None:
        fn()
        return x
    if isinstance(x, (list, tuple)):
        for item in x:
            block(item)
    elif isinstance(x, dict):
        for item in x.values():
            block(item)
    return x


def to_numpy(x):
    """Best-effort conversion of a library's array/scalar to a NumPy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def run_json_child(cmd: list[str], result: str, timeout: float) -> dict:
    """Run a benchmark's child process ``cmd``, which writes its results to the JSON file
    ``result``: the dict it wrote, or ``{"error": ...}`` naming the timeout or the child's exit
    status and last exception line (``BENCH_TRACEBACK=1`` prints its stderr too)."""
    if os.path.exists(result):
        os.remove(result)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0 or not os.path.exists(result):
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        tail = [ln for ln in lines if re.match(r"[\w.]*(Error|Exception)\b", ln)][-1:] or lines[-1:]
        if os.environ.get("BENCH_TRACEBACK") == "1":
            print(proc.stderr[-4000:], file=sys.stderr)
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}"}
    with open(result) as f:
        return json.load(f)


def short_error(exc: BaseException, limit: int = 160) -> str:
    msg = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def _profiler():
    """jitgraph's own timing code (``jitgraph.profiler``): the project's comparisons time
    every library with what users call (``jitgraph.benchmark``)."""
    from jitgraph import profiler
    return profiler


class Timing:
    """Per-call times in seconds: median, quartiles, IQR (``jitgraph.profiler.Stats``)."""

    def __init__(self, samples: list[float], number: int = 1):
        st = _profiler().Stats.from_samples(samples, number)
        self.samples = sorted(samples)
        self.number = number
        self.median, self.q1, self.q3, self.iqr, self.min = st.median, st.q1, st.q3, st.iqr, st.min
        self.other_load: float | None = None   # CPUs used by other processes meanwhile

    def __repr__(self) -> str:
        return f"Timing(median={fmt_time(self.median)}, iqr={fmt_time(self.iqr)}, n={len(self.samples)})"

    def as_dict(self) -> dict:
        return {"median_s": self.median, "q1_s": self.q1, "q3_s": self.q3, "iqr_s": self.iqr,
                "min_s": self.min, "repeats": len(self.samples), "calls_per_sample": self.number,
                "other_load": self.other_load}


def timeit(fn, *, warmup: int = 3, repeats: int = 20, number: int = 1,
           max_time: float | None = 10.0, min_repeats: int = 5, sync=block) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then up to ``repeats`` samples.

    Each sample times ``number`` consecutive calls (result of the last one synced with
    ``sync``) and records the per-call time.  If the samples would take longer than
    ``max_time`` seconds in total, fewer are taken (but at least ``min_repeats``).
    """
    est = None   # fastest warmup call: one slow call must not cut the repeats short
    for _ in range(warmup):
        t0 = time.perf_counter()
        sync(fn())
        dt = time.perf_counter() - t0
        est = dt if est is None else min(est, dt)
    if max_time is not None and est is not None and est > 0:
        fit = int(max_time / (est * number))
        repeats = max(min(repeats, fit), min(min_repeats, repeats))
    best = _sample(fn, repeats, number, sync)
    # On a shared machine (BENCH_WAIT_QUIET=seconds, or --wait-quiet): if other processes
    # were busy during the measurement, wait for idle CPUs and measure again (twice at
    # most); keep the measurement taken on the quietest machine.
    for _ in range(2):
        if best.other_load is None or best.other_load <= BUSY or _quiet_budget() <= 0:
            break
        wait_quiet()
        again = _sample(fn, repeats, number, sync)
        if again.other_load is None or again.other_load < best.other_load:
            best = again
    return best


def timeit_interleaved(fns: dict, *, warmup: int = 3, repeats: int = 60, per_round: int = 10,
                       max_time: float | None = 30.0, settle: float = 0.15, sync=block) -> dict:
    """Time several implementations of one computation against each other: ``{name: fn}`` ->
    ``{name: Timing}``.

    Why: the speed of a shared machine drifts by 20-50 % over a few seconds (another tenant,
    the clock), so implementations timed one after the other, each in its own block of
    seconds, get ratios that change from run to run by as much. Here every round takes
    ``per_round`` samples of each implementation in turn (the order rotating between rounds),
    until each has ``repeats`` samples or ``max_time`` is spent, so all of them see the same
    mix of slow and fast phases and their ratios are comparable.

    Before each turn: ``settle`` seconds of sleep, then one untimed call. Libraries keep their
    worker threads spinning after a call (OpenBLAS for about 0.1 s; NumPy and SciPy each bring
    their own OpenBLAS, PyTorch its OpenMP pool), and those threads would otherwise take the
    cores from the next implementation's first calls."""
    names = list(fns)
    samples: dict = {n: [] for n in names}
    est = {}
    for n in names:
        for _ in range(warmup):
            t0 = time.perf_counter()
            sync(fns[n]())
            est[n] = min(est.get(n, 1e9), time.perf_counter() - t0)
    per_round_s = sum(est.values()) * (per_round + 1) + settle * len(names)
    rounds = max(1, -(-repeats // per_round))
    if max_time is not None and per_round_s > 0:
        rounds = max(2, min(rounds, int(max_time / per_round_s)))
    probe = _LoadProbe()
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(settle)      # the previous implementation's threads stop spinning
            sync(fns[n]())          # untimed: this one's threads and caches warm again
            samples[n] += sample_host(fns[n], per_round, 1, sync=sync)
    load = probe.stop()
    out = {}
    for n in names:
        out[n] = Timing(samples[n], 1)
        out[n].other_load = load
    return out


def sample_host(fn, repeats: int, number: int, **kw) -> list[float]:
    """``jitgraph.profiler.sample_host``: per-call seconds of samples of back-to-back calls."""
    return _profiler().sample_host(fn, repeats, number, **kw)


def _sample(fn, repeats: int, number: int, sync) -> Timing:
    probe = _LoadProbe()
    timing = Timing(sample_host(fn, repeats, number, sync=sync), number)
    timing.other_load = probe.stop()
    return timing


_QUIET_SPENT = 0.0


def _quiet_budget() -> float:
    """Seconds this process may still spend waiting for idle CPUs (BENCH_WAIT_QUIET)."""
    try:
        total = float(os.environ.get("BENCH_WAIT_QUIET", "0") or 0)
    except ValueError:
        total = 0.0
    return total - _QUIET_SPENT


def wait_quiet(max_wait: float | None = None, verbose: bool = False) -> float | None:
    """Wait until other processes use less than BUSY CPUs, at most ``max_wait`` seconds
    (default: what is left of BENCH_WAIT_QUIET).  Returns the last load seen."""
    global _QUIET_SPENT
    budget = _quiet_budget() if max_wait is None else max_wait
    t0 = time.monotonic()
    load = None
    while True:
        load = other_cpu_load(1.0)
        spent = time.monotonic() - t0
        if load is None or load < BUSY or spent >= budget:
            break
        time.sleep(1.0)
    if max_wait is None:
        _QUIET_SPENT += time.monotonic() - t0
    if verbose and load is not None and load >= BUSY:
        print(f"(machine still busy: {load:.2f} CPUs used by other processes; going on)",
              flush=True)
    return load


class _LoadProbe:
    """CPU time used by OTHER processes while we measure, in CPUs (from /proc/stat,
    minus this process's own CPU time).  None if unknown or the window was too short."""

    def __init__(self):
        self.busy0 = _busy_cpu_seconds()
        self.own0 = time.process_time()
        self.t0 = time.perf_counter()

    def stop(self) -> float | None:
        wall = time.perf_counter() - self.t0
        busy1 = _busy_cpu_seconds()
        if self.busy0 is None or busy1 is None or wall < 0.1:
            return None
        other = (busy1 - self.busy0) - (time.process_time() - self.own0)
        return max(0.0, other / wall)


def _busy_cpu_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:8]]
        busy = sum(vals) - vals[3] - vals[4]   # minus idle and iowait
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def spinning(n: int):
    """``n`` processes that each keep a CPU busy while the block runs (a loaded machine; they
    inherit this process's CPU affinity, so they compete for the same CPUs)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def time_per_call(fn, *, number: int = 10_000, repeats: int = 15, warmup_calls: int = 200,
                  sync_each=None, max_time: float | None = 20.0) -> Timing:
    """Per-call overhead: samples of ``number`` back-to-back calls; µs/call medians.

    ``sync_each`` (optional) is applied to every call's result, for libraries whose calls
    return before the work is done (JAX's async dispatch).
    """
    if sync_each is not None:
        call = lambda: sync_each(fn())  # noqa: E731
    else:
        call = fn
    for _ in range(warmup_calls):
        call()
    return timeit(call, warmup=1, repeats=repeats, number=number, max_time=max_time,
                  min_repeats=min(5, repeats), sync=lambda x: x)


def first_call_seconds(fn, sync=block) -> float:
    t0 = time.perf_counter()
    sync(fn())
    return time.perf_counter() - t0


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} µs"


# --------------------------------------------------------------------------------------
# Results table
# --------------------------------------------------------------------------------------

JITGRAPH = "jitgraph"
BUSY = 0.25   # other processes' CPUs above which a measurement is flagged


class ResultTable:
    """Rows of (library, Timing | None, note).  The ratio column is ``time / jitgraph``:
    > 1 means jitgraph is faster than that row, < 1 slower."""

    def __init__(self, title: str, unit: str | None = None, extra_cols: tuple[str, ...] = ()):
        self.title = title
        self.unit = unit  # "ms", "us" or None (auto per value)
        self.extra_cols = extra_cols
        self.rows: list[dict] = []

    def add(self, name: str, timing: Timing | None, note: str = "", **extra) -> None:
        self.rows.append({"name": name, "timing": timing, "note": note, "extra": extra})

    def add_unavailable(self, name: str, reason: str) -> None:
        self.add(name, None, note=reason)

    def _fmt(self, s: float | None) -> str:
        if s is None:
            return "n/a"
        if self.unit == "ms":
            return f"{s * 1e3:.3f}"
        if self.unit == "us":
            return f"{s * 1e6:.2f}"
        return fmt_time(s)

    def _ref(self) -> float | None:
        for r in self.rows:
            if r["name"].startswith(JITGRAPH) and r["timing"] is not None:
                return r["timing"].median
        return None

    def render(self) -> str:
        ref = self._ref()
        unit = {"ms": " (ms)", "us": " (µs)"}.get(self.unit, "")
        head = ["library", "median" + unit, "IQR" + unit, "n", "x jitgraph", *self.extra_cols,
                "other", "note"]
        lines = []
        for r in self.rows:
            t = r["timing"]
            if t is None:
                ratio = "n/a"
            elif ref is None:
                ratio = "n/a"
            else:
                ratio = f"{t.median / ref:.3g}x"
            cells = [r["name"], self._fmt(t.median if t else None), self._fmt(t.iqr if t else None),
                     str(len(t.samples)) if t else "-", ratio]
            for c in self.extra_cols:
                v = r["extra"].get(c)
                cells.append("" if v is None else str(v))
            load = getattr(t, "other_load", None) if t else None
            cells.append("" if load is None else f"{load:.2f}" + ("!" if load > BUSY else ""))
            cells.append(r["note"])
            lines.append(cells)
        widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h)
                  for i, h in enumerate(head)]
        out = [f"== {self.title} ==",
               "  " + "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
               "  " + "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * 4]
        for c in lines:
            out.append("  " + "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
        if ref is None:
            out.append("  (x jitgraph: n/a -- no jitgraph timing)")
        else:
            out.append("  (x jitgraph = median / jitgraph median; > 1: jitgraph faster)")
        if any(getattr(r["timing"], "other_load", None) is not None for r in self.rows):
            out.append(f"  (other = CPUs' worth of time used by other processes while timing; '!' "
                       f"above {BUSY}: the machine was busy, that row is unreliable)")
        return "\n".join(out)

    def print(self) -> None:
        print(self.render(), flush=True)

    def as_dict(self) -> dict:
        return {"title": self.title, "unit": self.unit, "extra_cols": list(self.extra_cols),
                "rows": [{"name": r["name"], "note": r["note"], "extra": r["extra"],
                          "timing": r["timing"].as_dict() if r["timing"] else None}
                         for r in self.rows]}

    @classmethod
    def from_dict(cls, d: dict) -> "ResultTable":
        cols = tuple(d.get("extra_cols") or dict.fromkeys(k for r in d["rows"] for k in r["extra"]))
        t = cls(d["title"], d.get("unit"), cols)
        for r in d["rows"]:
            timing = None
            if r["timing"]:
                td = r["timing"]
                timing = Timing.__new__(Timing)
                timing.number = td["calls_per_sample"]
                timing.median, timing.q1, timing.q3 = td["median_s"], td["q1_s"], td["q3_s"]
                timing.iqr, timing.min = td["iqr_s"], td["min_s"]
                timing.other_load = td.get("other_load")
                timing.samples = [None] * td["repeats"]
            t.add(r["name"], timing, r["note"], **r["extra"])
        return t


def print_kv(title: str, items: list[tuple[str, str]]) -> None:
    print(f"== {title} ==")
    w = max((len(k) for k, _ in items), default=0)
    for k, v in items:
        print(f"  {k.ljust(w)}  {v}")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------------------


#: the settings that make each framework generate or pick code for a narrower instruction set
#: than the machine has (an AVX2 run on an AVX-512 machine); XLA's is in XLA_FLAGS
ISA_SETTINGS = ("NUMBA_CPU_NAME", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                "MKL_ENABLE_INSTRUCTIONS")


def _isa_limits() -> str:
    """The instruction-set limits set in the environment ("" if none): such a run measures
    other code paths than the machine would take, so its header says so."""
    parts = [f"{k}={os.environ[k]}" for k in ISA_SETTINGS if os.environ.get(k)]
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is not None:
        off = "-avx512f" in features.split(",")
        parts.append("NUMBA_CPU_FEATURES=" + ("<AVX-512 off>" if off else "<given>"))
    return "  ".join(parts)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return " ".join(x for x in ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16")
                                    if x in flags)
    except OSError:
        pass
    return "?"


def other_cpu_load(seconds: float = 0.5) -> float | None:
    """CPUs' worth of busy time (from /proc/stat) while this process sleeps."""
    def read():
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals[:8]), idle
    try:
        t0, i0 = read()
        time.sleep(seconds)
        t1, i1 = read()
    except (OSError, ValueError, IndexError):
        return None
    total = t1 - t0
    if total <= 0:
        return None
    ncpu = os.cpu_count() or 1
    return (1.0 - (i1 - i0) / total) * ncpu


def _module_dir(name: str) -> str:
    mod = _MODULES.get(name)
    path = getattr(mod, "__file__", None) or next(iter(getattr(mod, "__path__", [])), "?")
    return os.path.dirname(path) if path and path.endswith(".py") else str(path)


def header_items() -> list[tuple[str, str]]:
    import_torch()
    import_jax()
    import_jitgraph()
    for name in ("numba", "llvmlite", "scipy"):
        _try_import(name)
    items = [
        ("python", platform.python_version() + " (" + platform.python_implementation() + ")"),
        ("numpy", np.__version__),
        ("numba / llvmlite", f"{lib_version('numba')} / {lib_version('llvmlite')}"),
        ("scipy", lib_version("scipy")),
        ("torch", lib_version("torch") if "torch" in _MODULES else f"n/a ({import_error('torch')})"),
        ("jax / jaxlib", (f"{lib_version('jax')} / {lib_version('jaxlib')}" if "jax" in _MODULES
                          else f"n/a ({import_error('jax')})")),
        ("jitgraph", f"{lib_version('jitgraph')} ({_module_dir('jitgraph')})" if "jitgraph" in _MODULES
         else f"unavailable ({import_error('jitgraph')})"),
    ]
    cpus = os.cpu_count()
    aff = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    items.append(("cpu", f"{_cpu_model()}; {cpus} logical CPUs, affinity {aff}"
                          + (f" (pinned to {PINNED_CPUS})" if PINNED_CPUS else "")
                          + f"; {_cpu_flags()}"))
    items.append(("threads (target)", str(THREADS)))
    busy = other_cpu_load()
    if busy is not None:
        items.append(("other CPU load", f"{busy:.2f} CPUs busy while this process slept 0.5 s"
                      + ("   <- other processes are running: expect noisy numbers"
                         if busy > 0.2 else "")))
    env = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
           "XLA_FLAGS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]
    items.append(("env", "  ".join(f"{k}={os.environ.get(k, '<unset>')}" for k in env)))
    isa = _isa_limits()
    if isa:
        items.append(("code for", isa))
    torch = _MODULES.get("torch")
    if torch is not None:
        items.append(("torch threads", f"intra-op {torch.get_num_threads()}, "
                                       f"inter-op {torch.get_num_interop_threads()}"))
    numba = _MODULES.get("numba")
    if numba is not None:
        try:
            items.append(("numba threads", str(numba.config.NUMBA_NUM_THREADS)))
        except Exception:
            pass
    try:
        import threadpoolctl
        pools = threadpoolctl.threadpool_info()
        items.append(("native pools", "; ".join(
            f"{p.get('internal_api')} {p.get('version')} {p.get('architecture', '')} "
            f"threads={p.get('num_threads')} ({os.path.basename(p.get('filepath', ''))[:28]})"
            for p in pools) or "none"))
    except Exception:
        pass
    return items


def print_header(title: str = "jitgraph benchmarks") -> None:
    print_kv(title, header_items())
    print()


# --------------------------------------------------------------------------------------
# Command line / results output
# --------------------------------------------------------------------------------------


def parse_args(description: str, argv=None, extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="fast smoke run: fewer repeats, smallest sizes only")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--no-header", action="store_true", help="do not print the version header")
    p.add_argument("--wait-quiet", type=float, default=None, metavar="SECONDS",
                   help="shared machine: spend up to SECONDS in all waiting for other processes "
                        "to leave the CPUs idle, re-measuring rows timed on a busy machine "
                        "(env BENCH_WAIT_QUIET)")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    if args.wait_quiet is not None:
        os.environ["BENCH_WAIT_QUIET"] = str(args.wait_quiet)
    return args


def dump_json(path: str | None, payload: dict) -> None:
    if not path:
        return
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)


def guarded(label: str, fn, *args, **kwargs):
    """Run ``fn``; on any exception print '<label>: unavailable (<error>)' and return None."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        print(f"{label}: unavailable ({short_error(exc)})", flush=True)
        if os.environ.get("BENCH_TRACEBACK") == "1":
            traceback.print_exc()
        return None


def check_close(name: str, got, want, rtol: float = 2e-3, atol: float = 1e-5) -> str:
    """Compare a result to the NumPy reference; returns 'ok' or a mismatch description."""
    try:
        g = np.asarray(to_numpy(got), dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
        if g.shape != w.shape:
            return f"MISMATCH shape {g.shape} vs {w.shape}"
        err = np.max(np.abs(g - w) / (atol + rtol * np.abs(w))) if g.size else 0.0
        return "ok" if err <= 1.0 else f"MISMATCH (err {err:.3g}x tol)"
    except Exception as exc:
        return f"check failed ({short_error(exc, 60)})"


def run_main(doc: str, title: str, key: str, run, argv=None, extra=None) -> dict:
    """The shared command line of a benchmark script: parse, print the header, run, write JSON."""
    args = parse_args(doc.splitlines()[0], argv, extra)
    if not args.no_header:
        print_header(title)
    results = run(args)
    dump_json(args.json, {key: results})
    return results
