"""What the stress tests share: starting children with a timeout, checking their results
against NumPy, copies of the package, finding and damaging cache files.

* Every child is ``python tests/stress/child.py SCENARIO JSON`` in its own session (process
  group), with ``JITGRAPH_CACHE_DIR`` set by the test and ``PYTHONPATH`` set to the directory
  the package this test process imported comes from (or to a private copy of it), so the
  children run the same code as the test. Output goes to files, never to a pipe that could
  fill up and stall a child.
* Every child has a timeout: past it the whole process group is killed with SIGKILL (forked
  compile workers and Pool workers too) and the test reports a HANG with the stacks the child
  dumped (``faulthandler``) shortly before. A process group is also killed after its leader
  exits, so nothing a test started outlives it.
* ``JITGRAPH_STRESS_ROUNDS=N`` multiplies every repetition count (default 1) for longer soaks;
  ``JITGRAPH_STRESS_SEED`` changes the seeds (default 0).
"""
from __future__ import annotations

import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from . import programs as P

HERE = pathlib.Path(__file__).resolve().parent
CHILD = HERE / "child.py"
MARK = "STRESS-RESULT "
ROUNDS = max(1, int(os.environ.get("JITGRAPH_STRESS_ROUNDS", "1") or 1))
SEED = int(os.environ.get("JITGRAPH_STRESS_SEED", "0") or 0)
DIGEST = re.compile(r"^[0-9a-f]{64}\.")


def rounds(n: int) -> int:
    """A repetition count, times ``JITGRAPH_STRESS_ROUNDS``."""
    return n * ROUNDS


def _package():
    import jitgraph
    import jitgraph.kernels as kernels
    pkg = pathlib.Path(jitgraph.__file__).resolve().parent
    return pkg, pathlib.Path(kernels.__path__[0]).resolve()


PACKAGE_DIR, KERNELS_DIR = _package()
#: the sys.path entry the children import jitgraph from (the one this process imported)
PACKAGE_ROOT = PACKAGE_DIR.parent


def package_copy(dest: pathlib.Path) -> pathlib.Path:
    """A private copy of the package (its ``.py`` files, no ``__pycache__``) under *dest*;
    returns the directory to put on ``PYTHONPATH``. Why: Numba keeps the ``kernels/`` helpers'
    machine code beside them in ``kernels/__pycache__`` (before the fix), shared by every
    process of an installation; a copy gives a test a cold helper cache of its own and keeps
    the checkout's clean. (After the fix the helpers' files are under ``JITGRAPH_CACHE_DIR``
    and the copy's ``kernels/__pycache__`` stays empty.)"""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(PACKAGE_DIR, dest / "jitgraph", ignore=ignore)
    if PACKAGE_DIR not in KERNELS_DIR.parents:   # a source tree: kernels/ beside jitgraph/
        shutil.copytree(KERNELS_DIR, dest / "kernels", ignore=ignore)
    return dest


def copy_root(src: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Copy a package copy made by :func:`package_copy` *with* its caches (mtimes kept)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def kernels_dir_of(root: pathlib.Path | None) -> pathlib.Path:
    """The ``kernels`` folder of the package on *root* (None: the one this process imported)."""
    if root is None:
        return KERNELS_DIR
    inside = root / "jitgraph" / "kernels"
    return inside if inside.is_dir() else root / "kernels"


# ----------------------------------------------------------------------------- children

@dataclass
class Result:
    what: str
    returncode: int | None
    stdout: str
    stderr: str
    data: dict | None
    seconds: float
    timed_out: bool
    timeout_s: float

    def tail(self, n: int = 3000) -> str:
        return self.stderr[-n:]

    def describe(self) -> str:
        if self.timed_out:
            state = f"HANG: still running after {self.timeout_s:.0f} s, killed (SIGKILL)"
        elif self.returncode is not None and self.returncode < 0:
            state = f"CRASH: killed by signal {signal.Signals(-self.returncode).name}"
        else:
            state = f"exit status {self.returncode}"
        return f"{self.what}: {state} after {self.seconds:.1f} s"


class Child:
    """A child process running one scenario (see child.py), started at once."""

    def __init__(self, scenario: str, args: dict, *, cache_dir: pathlib.Path, logs: pathlib.Path,
                 name: str, root: pathlib.Path | None = None, env: dict | None = None,
                 timeout_s: float = 90.0):
        self.name, self.timeout_s = name, timeout_s
        logs.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        # no session-wide helpers cache: each test's helpers live under its own cache dir
        e = {k: v for k, v in os.environ.items() if k != "JITGRAPH_HELPER_CACHE_DIR"}
        for k in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT", "JITGRAPH_LOG", "JITGRAPH_TEST_CACHE_DIR"):
            e.pop(k, None)
        e["JITGRAPH_CACHE_DIR"] = str(cache_dir)
        e["PYTHONPATH"] = os.pathsep.join([str(root or PACKAGE_ROOT)] +
                                          ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
        e.setdefault("OMP_NUM_THREADS", "1")
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        e.update(env or {})
        args = dict(args, timeout_s=timeout_s)
        self._out, self._err = open(self.out_path, "w+"), open(self.err_path, "w+")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, str(CHILD), scenario, json.dumps(args)],
                                     stdout=self._out, stderr=self._err, env=e, cwd=str(logs),
                                     start_new_session=True)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self) -> Result:
        timed_out = False
        try:
            self.proc.wait(max(0.1, self.timeout_s - (time.monotonic() - self.t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
            self.proc.wait()
        seconds = time.monotonic() - self.t0
        self.kill()   # whatever of its group is left (workers, forked children)
        self._out.close()
        self._err.close()
        out, err = self.out_path.read_text(errors="replace"), self.err_path.read_text(errors="replace")
        data = None
        for line in reversed(out.splitlines()):
            if line.startswith(MARK):
                try:
                    data = json.loads(line[len(MARK):])
                except ValueError:
                    pass
                break
        return Result(self.name, self.proc.returncode, out, err, data, seconds, timed_out,
                      self.timeout_s)


def run(scenario: str, args: dict, **kw) -> Result:
    return Child(scenario, args, **kw).finish()


# ----------------------------------------------------------------------------- checks

def process_problems(res: Result) -> list[str]:
    """A hang, a crash, a failed exit or a missing result of one child, with its stderr."""
    bad = res.timed_out or res.returncode != 0 or res.data is None
    if not bad and "scenario_error" not in res.data:
        return []
    msg = res.describe()
    if res.data is None and not res.timed_out:
        msg += " (no result printed)"
    if res.data and "scenario_error" in res.data:
        e = res.data["scenario_error"]
        msg += f"; the scenario raised {e['module']}.{e['type']}: {e['message']}\n{e['traceback']}"
    return [msg + "\n--- stderr tail ---\n" + res.tail()]


def program_problems(records: list, where: str, *, allow_jitgraph_errors: bool = False) -> list[str]:
    """Wrong answers (against NumPy) and exceptions in a child's program records."""
    problems = []
    for rec in records:
        label = f"{where}: {rec['name']} (variant {rec['variant']}, scale {rec['scale']})"
        if "error" in rec:
            e = rec["error"]
            if allow_jitgraph_errors and e["module"].startswith("jitgraph"):
                continue
            problems.append(f"{label} RAISED {e['module']}.{e['type']}: {e['message'][:600]}\n"
                            + e["traceback"][-1500:])
            continue
        want = P.reference(rec["name"], rec["seed"], rec["variant"], rec["scale"])
        why = P.compare(rec["name"], P.decode(rec["outputs"]), want)
        if why:
            problems.append(f"{label}: {why}")
    return problems


def jitgraph_errors(records: list) -> list[str]:
    return [f"{r['name']}: {r['error']['module']}.{r['error']['type']}: {r['error']['message'][:300]}"
            for r in records if "error" in r and r["error"]["module"].startswith("jitgraph")]


def check(res: Result, *, allow_jitgraph_errors: bool = False) -> list[str]:
    """Every problem of a ``programs``/``threads`` child: process state, then its answers."""
    problems = process_problems(res)
    if res.data and "programs" in res.data:
        problems += program_problems(res.data["programs"], res.what,
                                     allow_jitgraph_errors=allow_jitgraph_errors)
    return problems


def fail_if(problems: list[str], summary: str) -> None:
    """Fail with a summary line and every problem (numbered), or print the summary."""
    import pytest
    print(summary)
    if problems:
        shown = "\n\n".join(f"[{i + 1}] {p}" for i, p in enumerate(problems[:12]))
        more = f"\n\n... and {len(problems) - 12} more" if len(problems) > 12 else ""
        pytest.fail(f"{summary}\n{len(problems)} problem(s):\n\n{shown}{more}", pytrace=False)


# ----------------------------------------------------------------------------- cache files

@dataclass
class CacheFiles:
    """The files of a populated cache by kind (see :func:`cache_files`)."""
    kinds: dict = field(default_factory=dict)

    def __getitem__(self, kind: str) -> list[pathlib.Path]:
        return self.kinds.get(kind, [])


def cache_files(cache_dir: pathlib.Path, kernels_dir: pathlib.Path) -> CacheFiles:
    """``py`` (generated modules at the cache root), ``native`` (bundles), ``nbi``/``nbc``/
    ``sha256`` (Numba's files of the generated modules: names start with an entry's digest)
    and ``helper_nbi``/``helper_nbc``/``helper_sha256`` (Numba's files of the ``kernels/``
    helpers: anywhere under the cache directory with another name, or in the package's
    ``kernels/__pycache__``)."""
    kinds: dict = {k: [] for k in ("py", "native", "nbi", "nbc", "sha256",
                                   "helper_nbi", "helper_nbc", "helper_sha256")}
    kinds["py"] = sorted(cache_dir.glob("*.py"))
    kinds["native"] = sorted(cache_dir.glob("*.native"))
    numba = [p for p in cache_dir.rglob("*") if p.is_file()]
    pyc = kernels_dir / "__pycache__"
    helpers_in_package = [p for p in pyc.rglob("*") if p.is_file()] if pyc.is_dir() else []
    for p in numba + helpers_in_package:
        kind = p.suffix.lstrip(".")
        if kind not in ("nbi", "nbc", "sha256") or ".tmp" in p.name:
            continue
        generated = p in numba and DIGEST.match(p.name) is not None
        kinds[kind if generated else "helper_" + kind].append(p)
    return CacheFiles({k: sorted(set(v)) for k, v in kinds.items()})


def numba_helper_files(kernels_dir: pathlib.Path) -> dict[str, tuple[int, int]]:
    """``{name: (size, mtime_ns)}`` of Numba's files in a package's ``kernels/__pycache__``."""
    pyc = kernels_dir / "__pycache__"
    if not pyc.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in pyc.iterdir()
            if p.suffix in (".nbi", ".nbc", ".sha256")}


def damage(path: pathlib.Path, how: str, rng: random.Random) -> str:
    """Truncate *path* (to a seeded length, possibly 0) or flip 1-8 seeded bytes in it."""
    data = bytearray(path.read_bytes())
    if how == "truncate":
        n = rng.choice([0, rng.randrange(0, max(1, len(data)))]) if data else 0
        path.write_bytes(bytes(data[:n]))
        return f"{path.name}: truncated {len(data)} -> {n} bytes"
    if not data:
        return f"{path.name}: empty, left alone"
    spots = sorted(rng.randrange(len(data)) for _ in range(rng.randint(1, 8)))
    for i in spots:
        data[i] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return f"{path.name}: flipped bytes at {spots} of {len(data)}"


def crossed_index_report(cache_dir: pathlib.Path, root: pathlib.Path | None, logs: pathlib.Path) -> str:
    """For a failure message: the helpers' Numba index entries whose data file holds another
    overload than the one the index names (read by a child; "" when none or unreadable)."""
    folders = sorted({str(p.parent) for kind in ("helper_nbi",)
                      for p in cache_files(cache_dir, kernels_dir_of(root))[kind]})
    if not folders:
        return ""
    res = run("inspect_index", {"folders": folders}, cache_dir=cache_dir, root=root, logs=logs,
              name="inspect-index", timeout_s=60)
    lines = []
    for idx in (res.data or {}).get("indexes", []):
        for e in idx.get("entries", []):
            if e.get("crossed"):
                lines.append(f"{os.path.basename(idx['index'])}: key {e['key']} -> {e['file']}, "
                             f"which holds the machine code for {e['holds']}")
    return ("CROSSED Numba index entries left by the writers:\n  " + "\n  ".join(lines)) if lines else ""
