"""Forks after a first call, multiprocessing start methods, and threads making their first
calls at once in a fresh process.

* After a program's first call, a background thread writes its native bundle holding Numba's
  compiler lock (``cpu_program._export_in_background``). A process forked at that moment
  (``os.fork``, multiprocessing's ``fork``, data loaders) inherits the lock held by a thread
  that does not exist in it, and its own first compile waits forever.
* Threads that all make a first call at once in a process that has not imported Numba yet
  import it concurrently (``partially initialized module 'numba'``).

Each forked child, Pool and thread has a timeout: a hang is a failure, reported with the
stacks the child dumped, and the child is killed.
"""
from __future__ import annotations

import random

import pytest

from . import harness

HANG_S = 6.0    # a forked child's first call of a small program takes well under 2 s here
POOL_HANG_S = 15.0   # a Pool(2) of spawned workers: imports, then two first calls: ~5 s here


def _stack_of(stderr: str, prefix: str, limit: int = 2500) -> str:
    """The stacks hung children wrote (see child._stack_dump_later) whose title starts with
    *prefix*, at most *limit* characters."""
    parts = ["--- " + p for p in stderr.split("--- ")[1:] if p.startswith(prefix)]
    if not parts:
        return "(no stack written)"
    shown = [parts.pop()]                       # the last one whole, then earlier ones that fit
    while parts and sum(map(len, shown)) + len(parts[-1]) <= limit:
        shown.insert(0, parts.pop())
    return "".join(shown)


def _fork_problems(res: harness.Result) -> tuple[list[str], dict]:
    problems = harness.process_problems(res)
    counts = {"forks": 0, "hang": 0, "failed": 0, "wrong": 0}
    for f in (res.data or {}).get("forks", []):
        counts["forks"] += 1
        where = (f"fork #{f['index']} ({f['delay_ms']} ms after the first call of "
                 f"{f['parent_program']['name']} returned; {f['threads_at_fork']} threads at the fork)")
        problems += harness.program_problems([f["parent_program"]], f"{where}, parent")
        if f["status"] == "hang":
            counts["hang"] += 1
            problems.append(f"{where}: HANG: the forked child's first call of {f['child_name']} "
                            f"did not return in {HANG_S:.0f} s (killed); its stack:\n"
                            + _stack_of(res.stderr, f"forked child #{f['index']} "))
        elif f["returncode"] != 0 or "program" not in f:
            counts["failed"] += 1
            problems.append(f"{where}: the forked child exited with {f['returncode']} "
                            f"({f.get('garbled', 'no report')})")
        else:
            found = harness.program_problems([f["program"]], f"{where}, forked child")
            counts["wrong"] += bool(found)
            problems += found
    return problems, counts


def test_os_fork_right_after_first_call(tmp_path):
    """``os.fork()`` 0-50 ms after a first call returns (a new program each time, so a bundle
    thread is writing); the forked child makes the first call of another new program."""
    n = harness.rounds(6)
    rng = random.Random(harness.SEED + 11)
    delays = ([0, 5, 10, 20, 35, 50] + [rng.choice([0, 1, 2, 5, 10, 20, 35, 50]) for _ in range(n)])[:n]
    # by default stop after two hangs (each costs HANG_S); soaks count them all
    stop = 2 if harness.ROUNDS == 1 else None
    res = harness.run("fork", {"delays_ms": delays, "hang_s": HANG_S, "seed": harness.SEED,
                               "stop_after_hangs": stop,
                               "parent_programs": ["mul2", "tanh_sum", "f64_a_b"],
                               "child_programs": ["add1", "i64_aT_b", "mul2", "f32_a_bT"]},
                      cache_dir=tmp_path / "cache", logs=tmp_path / "logs", name="fork",
                      timeout_s=60 + n * (HANG_S + 5))
    problems, c = _fork_problems(res)
    stopped = "" if c["forks"] == n else f", stopped after {c['hang']} hangs"
    harness.fail_if(problems, f"os.fork after a first call: {c['hang']} hangs, {c['failed']} failed, "
                              f"{c['wrong']} wrong of {c['forks']} forks (planned {n}, delays "
                              f"{delays} ms{stopped})")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pool_after_first_call(tmp_path, method):
    """A first call, then at once a ``multiprocessing`` Pool(2) with start method *method*
    whose workers each make first calls of new programs."""
    problems, hangs, threads = [], 0, []
    n = harness.rounds(1)
    for r in range(n):
        base = 3.0 + 10 * r
        tasks = [["add1", base + 0.5], ["i64_aT_b", base + 1.0]]
        res = harness.run("pool", {"method": method, "seed": harness.SEED + r, "hang_s": POOL_HANG_S,
                                   "first_program": "mul2", "first_scale": base, "tasks": tasks},
                          cache_dir=tmp_path / "cache", logs=tmp_path / "logs",
                          name=f"pool-{method}-{r}", timeout_s=POOL_HANG_S + 30)
        problems += harness.process_problems(res)
        d = res.data or {}
        threads.append(d.get("threads_at_pool_start"))
        if "first" in d:
            problems += harness.program_problems([d["first"]], f"round {r}, first call")
        if "hang" in d:
            hangs += 1
            problems.append(f"round {r}: HANG: {d['hang']} (pool terminated); the workers' "
                            f"stacks:\n" + _stack_of(res.stderr, "Pool worker", 4000))
        if "pool_error" in d:
            e = d["pool_error"]
            problems.append(f"round {r}: the Pool raised {e['module']}.{e['type']}: {e['message']}\n"
                            f"{e['traceback']}")
        if "results" in d:
            problems += harness.program_problems(d["results"], f"round {r}, Pool({method}) worker")
    harness.fail_if(problems, f"multiprocessing {method}: {hangs} hangs in {n} rounds (threads "
                              f"when the Pool started: {threads})")


HALF = ["mul2", "add1", "tanh_sum", "i64_aT_b"]
THREAD_PROGRAMS = HALF + HALF            # threads i and i + 4 run the same program, other constants


def _thread_scales(r: int) -> list[float]:
    """The constants of process *r*'s eight programs: in process 0 all new; after it, threads
    0-3 run the programs threads 4-7 of the process before ran (on disk, with native bundles),
    threads 4-7 new ones (compiled, so they import Numba while the others load bundles)."""
    new = [1.0 + r + (4 + i) / 8 for i in range(4)]
    first = [1.0 + i / 8 for i in range(4)] if r == 0 else [1.0 + (r - 1) + (4 + i) / 8 for i in range(4)]
    return first + new


def test_threads_first_calls_in_fresh_process(tmp_path):
    """In each of several fresh processes (``import jitgraph`` only: Numba not imported),
    eight threads released by one barrier each make the first call of a different program:
    in the first process all eight compile; in the others four load from the disk cache (the
    native bundles a process before wrote) while four compile, so some import Numba while
    others ask which Numba is installed. Every call returns NumPy's answer, none raises."""
    n = harness.rounds(5)
    problems, crashed, seconds = [], 0, []
    for r in range(n):
        res = harness.run("threads", {"programs": THREAD_PROGRAMS, "scales": _thread_scales(r),
                                      "seed": harness.SEED, "hang_s": 60.0},
                          cache_dir=tmp_path / "cache", logs=tmp_path / "logs",
                          name=f"threads-{r}", timeout_s=80)
        found = harness.check(res)
        d = res.data or {}
        if d.get("numba_before"):
            found.append(f"threads-{r}: Numba was imported before the threads started: the "
                         "scenario does not test what it should")
        if d.get("hung_threads"):
            found.append(f"threads-{r}: HANG: threads {d['hung_threads']} did not finish in 60 s; "
                         f"stacks:\n{res.tail(2500)}")
        crashed += bool(found)
        problems += found
        seconds.append(round(res.seconds, 1))
    harness.fail_if(problems, f"threads' first calls: {crashed} of {n} fresh processes had a "
                              f"failed, wrong or hung call ({len(THREAD_PROGRAMS)} threads each; "
                              f"seconds per process {seconds})")
