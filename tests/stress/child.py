"""The child programs of the stress tier: ``python child.py SCENARIO JSON_ARGS``.

Each scenario runs in a fresh process started by ``harness.py`` (with ``JITGRAPH_CACHE_DIR``
and ``PYTHONPATH`` set by the test) and prints one line ``STRESS-RESULT {json}`` last. Results
are returned as data (``programs.encode``); the test process compares them with NumPy. Errors
are caught per program and returned (type, module, message, traceback tail), so one failing
program does not hide the others. A child never decides whether the test passes.

Scenarios:

* ``programs``: run a list of programs (optionally after waiting for a start file, so several
  processes compile at the same moment; optionally with the window of Numba's index update
  widened by sleeps, ``widen``).
* ``fork``: first calls of new programs, each followed after a short delay by ``os.fork``; the
  forked child makes its own first call of another new program. A forked child that does not
  finish within ``hang_s`` is reported as a hang (its stack is dumped to stderr) and killed.
* ``pool``: a first call, then a ``multiprocessing`` Pool(2) of the given start method whose
  workers each run new programs (timeout: reported as a hang, the pool is terminated).
* ``threads``: in a process that has not imported Numba, N threads released together by a
  barrier each make the first call of a different program.

Nothing at module level imports jitgraph: ``spawn`` and ``forkserver`` workers import this
file as ``__mp_main__``.
"""
from __future__ import annotations

import faulthandler
import json
import os
import random
import select
import signal
import sys
import threading
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import programs as P  # noqa: E402  (NumPy only)

MARK = "STRESS-RESULT "
_T0 = time.monotonic()


# ----------------------------------------------------------------------------- helpers

def _error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)[:2000],
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def _jit(name: str, scale: float | None):
    import jitgraph
    import jitgraph.numpy as jnp
    fn = P.PROGRAMS[name][0] if scale is None else P.scaled(name, scale)
    return jitgraph.jit(lambda *a: fn(jnp, *a))


def _program_record(name: str, seed: int, variant: str, scale: float | None, describe: bool) -> dict:
    """Run one program; its outputs (encoded) or its error, and which cache files are its own."""
    rec = {"name": name, "seed": seed, "variant": variant, "scale": scale}
    args = P.inputs(name, seed, variant)
    try:
        f = _jit(name, scale)
        rec["outputs"] = P.encode(f(*args))
    except BaseException as exc:   # noqa: BLE001 - reported to the test process
        rec["error"] = _error(exc)
        return rec
    if describe:
        try:
            p = f.lower(*args).program
            rec["modules"] = [getattr(p.module, "__name__", None)] + \
                [getattr(m, "__name__", None) for m in p.kernel_modules]
            rec["native"] = bool(p.native)
        except BaseException as exc:   # noqa: BLE001
            rec["describe_error"] = _error(exc)
    return rec


PAIR_WAIT_S = 0.6


def _widen_numba_index_window(rendezvous: str) -> None:
    """Make the unlocked read-modify-write of a ``kernels/`` helper's Numba index overlap
    between processes, by delays alone (so every interleaving it produces is one that can
    happen without them):

    * Numba's ``IndexDataCacheFile.save`` reads the index, adds its key under the first free
      data file number, writes the index, then the data file. Here, before writing a helper's
      index, a process leaves a marker in the *rendezvous* folder and waits up to 0.6 s for
      another process's marker for the same index: two processes that save within 0.6 s of
      each other have then both read the index before either writes it (and picked the same
      number for their different overloads);
    * each then reads the index back after 30 ms: the one whose key is not in it (the other's
      index replaced its own) writes its data file 80 ms later, so the data file ends up
      holding the overload the index does not name.

    Files of the generated modules (names starting with their digest) are left alone: each
    belongs to one module, whose overloads one process compiles."""
    import re

    from numba.core import caching
    digest = re.compile(r"^[0-9a-f]{64}\.")
    cls = caching.IndexDataCacheFile
    orig_save, orig_save_index = cls.save, cls._save_index
    os.makedirs(rendezvous, exist_ok=True)

    def save(self, key, data):
        self._stress_key = key
        try:
            return orig_save(self, key, data)
        finally:
            self._stress_key = None

    def partner(base: str, mine: str) -> bool:
        now = time.time_ns()
        for name in os.listdir(rendezvous):
            if name.startswith(base + ".") and not name.startswith(mine):
                born = int(name.rsplit(".", 1)[1])
                if now - born < (PAIR_WAIT_S + 0.3) * 1e9:
                    return True
        return False

    def save_index(self, overloads):
        key = getattr(self, "_stress_key", None)
        base = os.path.basename(self._index_path)
        if key is None or key not in overloads or digest.match(base):
            return orig_save_index(self, overloads)
        mine = f"{base}.{os.getpid()}."
        open(os.path.join(rendezvous, mine + str(time.time_ns())), "w").close()
        deadline = time.monotonic() + PAIR_WAIT_S
        while time.monotonic() < deadline and not partner(base, mine):
            time.sleep(0.005)
        time.sleep(0.02)          # the partner sees this one's marker too
        orig_save_index(self, overloads)
        time.sleep(0.03)
        try:
            won = self._load_index().get(key) == overloads[key]
        except Exception:   # noqa: BLE001 - only a delay depends on it
            won = True
        if not won:
            time.sleep(0.08)
    cls.save, cls._save_index = save, save_index


def _helper_cache_paths() -> dict:
    """Where Numba keeps the cache of each ``kernels/`` helper that has one (imports them)."""
    import importlib
    import pkgutil

    import jitgraph.kernels as kernels
    from numba.core.dispatcher import Dispatcher
    out: dict = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        if info.name.startswith("cuda"):
            continue
        try:
            mod = importlib.import_module(f"jitgraph.kernels.{info.name}")
        except Exception:  # noqa: BLE001 - optional dependencies
            continue
        for attr, obj in vars(mod).items():
            if isinstance(obj, Dispatcher) and obj.py_func.__module__ == mod.__name__:
                cache = getattr(obj, "_cache", None)
                path = getattr(cache, "cache_path", None) or getattr(cache, "_cache_path", None)
                if path:
                    out[f"{info.name}.{attr}"] = os.path.abspath(path)
    return out


def _base_info() -> dict:
    info = {"pid": os.getpid(), "numba_imported": "numba" in sys.modules}
    try:
        import jitgraph
        import jitgraph.kernels as kernels
        info["jitgraph_file"] = jitgraph.__file__
        info["kernels_dir"] = os.path.abspath(kernels.__path__[0])
        info["cache_info"] = jitgraph.cache_info()
    except BaseException as exc:   # noqa: BLE001
        info["info_error"] = _error(exc)
    return info


def _arm_watchdog(a: dict) -> None:
    """Dump every thread's stack to stderr shortly before the test process kills this one."""
    if a.get("timeout_s"):
        left = a["timeout_s"] - 2.0 - (time.monotonic() - _T0)
        faulthandler.dump_traceback_later(max(1.0, left), exit=False)


def _wait_for(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"start file {path} did not appear")
        time.sleep(0.002)


# ----------------------------------------------------------------------------- scenarios

def scenario_programs(a: dict) -> dict:
    if a.get("widen"):
        _widen_numba_index_window(a["widen"])
    import jitgraph  # noqa: F401  (imported before the start signal: only compiling is timed)
    if a.get("ready_file"):
        open(a["ready_file"], "w").close()
    if a.get("go_file"):
        _wait_for(a["go_file"], 60)
    todo = [(n, v) for v in a.get("variants", ["a"]) for n in a.get("programs", [])]
    todo += [tuple(p) for p in a.get("pairs", [])]   # more (program, variant) runs
    if a.get("order_seed") is not None:
        random.Random(a["order_seed"]).shuffle(todo)
    res = [_program_record(n, a.get("seed", 0), v, a.get("scale"), a.get("describe", False))
           for n, v in todo]
    out = {"programs": res}
    if a.get("helper_paths"):
        try:
            out["helper_cache_paths"] = _helper_cache_paths()
        except BaseException as exc:   # noqa: BLE001
            out["helper_paths_error"] = _error(exc)
    return out


def _stack_dump_later(seconds: float, what: str) -> None:
    """A daemon thread that writes the main thread's Python stack to stderr after *seconds*
    (a hang: the main thread then waits for a lock, without the GIL)."""
    main = threading.main_thread().ident

    def dump():
        frame = sys._current_frames().get(main)
        text = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
        sys.stderr.write(f"--- {what}: still running after {seconds:.1f} s; its stack:\n{text}")
        sys.stderr.flush()
    t = threading.Timer(seconds, dump)
    t.daemon = True
    t.start()
    return t


def _fork_child(name: str, seed: int, scale: float, w: int, hang_s: float, index: int) -> None:
    """In the forked copy: dump the stack if it hangs, make a first call, report, leave."""
    code = 0
    try:
        _stack_dump_later(max(0.5, hang_s - 1.0), f"forked child #{index} (pid {os.getpid()})")
        rec = _program_record(name, seed, "a", scale, False)
        payload = json.dumps(rec).encode()
        while payload:
            n = os.write(w, payload)
            payload = payload[n:]
    except BaseException:   # noqa: BLE001
        code = 3
    finally:
        os._exit(code)


def _wait_fork(pid: int, r: int, hang_s: float) -> dict:
    """Collect a forked child's report; kill it after ``hang_s`` (a hang)."""
    chunks, t0, status = [], time.monotonic(), None
    while True:
        left = hang_s - (time.monotonic() - t0)
        if left <= 0:
            break
        ready, _, _ = select.select([r], [], [], min(left, 0.05))
        if ready:
            chunk = os.read(r, 1 << 16)
            if chunk:
                chunks.append(chunk)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        return {"status": "hang", "seconds": round(time.monotonic() - t0, 3)}
    while True:   # the rest of the pipe
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    rc = os.waitstatus_to_exitcode(status)
    data = b"".join(chunks)
    rec = {"status": "exited", "returncode": rc, "seconds": round(time.monotonic() - t0, 3)}
    if data:
        try:
            rec["program"] = json.loads(data)
        except ValueError:
            rec["garbled"] = data[:200].decode(errors="replace")
    return rec


def scenario_fork(a: dict) -> dict:
    import jitgraph  # noqa: F401
    seed, hang_s = a.get("seed", 0), a.get("hang_s", 10.0)
    stop_after = a.get("stop_after_hangs")
    parent_names, child_names = a["parent_programs"], a["child_programs"]
    forks = []
    for i, delay_ms in enumerate(a["delays_ms"]):
        base = 1.0 + a.get("round", 0) * 100 + i
        pname, cname = parent_names[i % len(parent_names)], child_names[i % len(child_names)]
        first = _program_record(pname, seed, "a", base + 0.25, False)   # a first call
        time.sleep(delay_ms / 1000.0)
        r, w = os.pipe()
        # faulthandler's watchdog thread would not exist in the copy, and re-arming it there
        # waits for that thread forever: disarm it across the fork, re-arm it after
        faulthandler.cancel_dump_traceback_later()
        with warnings.catch_warnings():   # Python 3.12+ warns about forking with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            threads = threading.active_count()
            pid = os.fork()
        if pid == 0:
            os.close(r)
            _fork_child(cname, seed, base + 0.5, w, hang_s, i)
        _arm_watchdog(a)
        os.close(w)
        rec = _wait_fork(pid, r, hang_s)
        if stop_after and sum(f["status"] == "hang" for f in forks) + (rec["status"] == "hang") >= stop_after:
            rec["stopped"] = True
        rec.update({"index": i, "delay_ms": delay_ms, "threads_at_fork": threads,
                    "parent_program": first, "child_name": cname, "child_scale": base + 0.5})
        forks.append(rec)
        if rec.get("stopped"):
            break
    return {"forks": forks, "planned": len(a["delays_ms"])}


def pool_task(task):
    """A Pool worker's job: the first call of a new program in this worker (its stack goes to
    stderr if it is still running shortly before the Pool's timeout)."""
    name, seed, scale, hang_s = task
    timer = _stack_dump_later(max(0.5, hang_s - 2.0), f"Pool worker (pid {os.getpid()}) running {name}")
    try:
        rec = _program_record(name, seed, "a", scale, False)
    finally:
        timer.cancel()
    rec["worker_pid"] = os.getpid()
    return rec


def scenario_pool(a: dict) -> dict:
    import multiprocessing
    import multiprocessing.pool  # noqa: F401  (imported before the first call: the Pool
    seed, method = a.get("seed", 0), a["method"]   # then starts within a few ms of its return)
    ctx = multiprocessing.get_context(method)
    hang_s = a.get("hang_s", 30.0)
    tasks = [(n, seed, s, hang_s) for n, s in a["tasks"]]
    first = _program_record(a["first_program"], seed, "a", a.get("first_scale"), False)
    threads = threading.active_count()
    pool = ctx.Pool(2)
    out = {"first": first, "method": method, "threads_at_pool_start": threads}
    try:
        out["results"] = pool.map_async(pool_task, tasks, chunksize=1).get(hang_s)
        pool.close()
    except multiprocessing.TimeoutError:
        out["hang"] = f"the Pool({method}) did not finish its {len(tasks)} tasks in {hang_s} s"
        pool.terminate()
    except BaseException as exc:   # noqa: BLE001
        out["pool_error"] = _error(exc)
        pool.terminate()
    pool.join()
    return out


def scenario_threads(a: dict) -> dict:
    import jitgraph  # noqa: F401
    numba_before = "numba" in sys.modules
    seed, names = a.get("seed", 0), a["programs"]
    scales = a["scales"]          # one per thread: a scale another process ran is cached
    barrier = threading.Barrier(len(names))
    results: list = [None] * len(names)
    prepared = [(n, P.inputs(n, seed, "a")) for n in names]

    def work(i: int) -> None:
        name = prepared[i][0]
        try:
            f = _jit(name, scales[i])
            barrier.wait(30)
            results[i] = {"name": name, "seed": seed, "variant": "a", "scale": scales[i],
                          "outputs": P.encode(f(*prepared[i][1]))}
        except BaseException as exc:   # noqa: BLE001
            results[i] = {"name": name, "seed": seed, "variant": "a", "scale": scales[i],
                          "error": _error(exc)}

    threads = [threading.Thread(target=work, args=(i,), name=f"stress-{i}") for i in range(len(names))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + a.get("hang_s", 60.0)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    out = {"programs": [r for r in results if r is not None], "numba_before": numba_before,
           "hung_threads": hung}
    if hung:
        faulthandler.dump_traceback(all_threads=True)
    return out


def scenario_inspect_index(a: dict) -> dict:
    """For a failure report: each Numba index (``.nbi``) under the given folders, with the
    argument types of each key and those its data file was compiled for (Numba 0.68's
    layouts: the index pickles ``(stamp, {key: data file})`` after a version; a data file
    pickles a compile result whose fourth field is its signature). Read-only."""
    import glob
    import pickle

    import numba  # noqa: F401  (the pickles refer to Numba's types)
    out = []
    for folder in a["folders"]:
        for nbi in sorted(glob.glob(os.path.join(folder, "*.nbi"))):
            entry = {"index": nbi, "entries": []}
            try:
                with open(nbi, "rb") as f:
                    pickle.load(f)
                    _, overloads = pickle.loads(f.read())
            except Exception as exc:   # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {exc}"
                out.append(entry)
                continue
            for key, name in overloads.items():
                e = {"key": str(key[0]), "file": name}
                try:
                    with open(os.path.join(folder, name), "rb") as f:
                        e["holds"] = str(pickle.loads(f.read())[3].args)
                    e["crossed"] = e["holds"] != e["key"]
                except Exception as exc:   # noqa: BLE001
                    e["error"] = f"{type(exc).__name__}: {exc}"[:200]
                entry["entries"].append(e)
            out.append(entry)
    return {"indexes": out}


SCENARIOS = {"programs": scenario_programs, "fork": scenario_fork, "pool": scenario_pool,
             "threads": scenario_threads, "inspect_index": scenario_inspect_index}


def main() -> None:
    scenario, a = sys.argv[1], json.loads(sys.argv[2])
    faulthandler.enable()
    _arm_watchdog(a)
    caught: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = SCENARIOS[scenario](a)
        except BaseException as exc:   # noqa: BLE001
            out = {"scenario_error": _error(exc)}
        out.update(_base_info())
    out["warnings"] = [f"{w.category.__module__}.{w.category.__name__}: {w.message}" for w in caught]
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
