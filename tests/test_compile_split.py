"""The compile log's split (``JITGRAPH_LOG=compiles``, ``compile_phases``): every compiled
program reports the seconds of each stage and where its kernels came from; identical layers
share one kernel, and a program whose kernels this process loaded already compiles none."""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import compile_phases

SPLIT = re.compile(r"^jitgraph:   split: (?P<phases>.*), other (?P<other>\d+\.\d+)s; kernels: "
                   r"(?P<steps>\d+) steps -> (?P<distinct>\d+) distinct \((?P<shared>\d+) shared "
                   r"by structure\): (?P<memory>\d+) in memory, (?P<disk>\d+) on disk, "
                   r"(?P<new>\d+) new; Numba compiled (?P<here>\d+) here, (?P<workers>\d+) in "
                   r"workers; LLVM compiled (?P<llvm>\d+)$")


def _splits(err: str) -> list[dict]:
    out = []
    for line in err.splitlines():
        if line.startswith("jitgraph:   split:"):
            m = SPLIT.match(line)
            assert m, line
            d = {k: int(v) for k, v in m.groupdict().items() if k not in ("phases", "other")}
            d["phases"] = {name: float(s) for name, s in
                           re.findall(r"(\w+) (\d+\.\d+)s", m.group("phases"))}
            out.append(d)
    return out


def layers(x, w1, w2, w3):
    """Two tanh layers of the same size: their backward kernels are the same function."""
    h = jnp.tanh(x @ w1)
    h = jnp.tanh(h @ w2)
    return jnp.sum(h @ w3)


def test_split_names_every_stage_and_counts_kernels(monkeypatch, capfd):
    monkeypatch.setenv("JITGRAPH_LOG", "compiles")
    monkeypatch.setenv("JITGRAPH_COMPILE_WORKERS", "0")
    rng = np.random.default_rng(0)
    x, w1, w2, w3 = (rng.standard_normal((5, 5)) for _ in range(4))
    capfd.readouterr()
    g = jitgraph.jit(jitgraph.grad(layers, argnums=(1, 2, 3)))
    with compile_phases.recording() as recorded:    # the unrounded seconds of each stage
        got = g(x, w1, w2, w3)
    h1 = np.tanh(x @ w1)
    h2 = np.tanh(h1 @ w2)
    dz2 = np.ones((5, 5)) @ w3.T * (1.0 - h2 ** 2)
    np.testing.assert_allclose(got[1], h1.T @ dz2, rtol=1e-10)
    err = capfd.readouterr().err
    (s,) = _splits(err)
    assert list(s["phases"]) == list(compile_phases.PHASES)
    assert all(v >= 0.0 for v in s["phases"].values())
    # the line rounds to milliseconds (a small graph's autodiff can print 0.000s): that each
    # stage ran is read from the recording around the call
    assert recorded["autodiff"] > 0.0 and recorded["trace"] > 0.0
    assert s["steps"] == s["distinct"] + s["shared"] and s["shared"] >= 1
    assert s["memory"] + s["disk"] + s["new"] == s["distinct"]
    # a fresh cache directory: every distinct kernel is new and compiled here, once (by Numba
    # or, a loop kernel of a driver in Python, by LLVM alone)
    assert s["new"] == s["distinct"] and s["here"] + s["llvm"] >= s["new"] and s["workers"] == 0

    # the same layers in another program: its kernels are loaded, nothing compiles
    again = jitgraph.jit(jitgraph.grad(layers, argnums=(1, 2, 3)))
    np.testing.assert_allclose(again(x, w1, w2, w3)[1], got[1], rtol=0)
    (s2,) = _splits(capfd.readouterr().err)
    assert s2["memory"] == s2["distinct"] == s["distinct"] and s2["new"] == 0
    assert s2["here"] == 0 and s2["llvm"] == 0


def test_phases_are_exclusive_and_only_recorded_inside_recording():
    with compile_phases.phase("trace"):    # nothing records: no effect, no error
        pass
    with compile_phases.recording() as outer:
        with compile_phases.phase("trace"):
            with compile_phases.recording() as inner, compile_phases.phase("autodiff"):
                sum(range(20000))
    assert set(outer) == {"trace", "autodiff"} and set(inner) == {"autodiff"}
    assert outer["autodiff"] == pytest.approx(inner["autodiff"])
    assert outer["trace"] >= 0.0
    assert compile_phases.split_text({"fuse": 0.5}).startswith("trace 0.000s, autodiff 0.000s")


CHILD = """
import json, sys
import numpy as np
import jitgraph
sys.path.insert(0, {here!r})
from test_compile_split import layers
rng = np.random.default_rng(0)
args = [rng.standard_normal((5, 5)) for _ in range(4)]
f = jitgraph.jit(jitgraph.grad(layers, argnums=(1, 2, 3)))
if sys.argv[1] == "lower":
    f.lower(*args)          # writes the kernels' sources to the cache, compiles nothing
else:
    f(*args)
info = jitgraph.cache_info()
print(json.dumps({{k: info[k] for k in ("worker_compiles", "local_compiles")}}))
"""


def test_kernels_whose_source_alone_is_cached_compile_ahead_of_the_first_call(tmp_path):
    """A process that stopped before compiling its kernels left their sources in the cache:
    the next one compiles them ahead of its first call with the new kernels (on compile
    workers), not one after another inside that call."""
    import json
    import os
    import pathlib
    import subprocess
    import sys
    # (Numba's kernels: loop kernels LLVM compiles alone are compiled when a program loads)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "cache"), JITGRAPH_LOG="compiles",
               JITGRAPH_COMPILE_WORKERS="0", JITGRAPH_LOOP_IR="0")
    code = CHILD.format(here=str(pathlib.Path(__file__).parent))
    first = subprocess.run([sys.executable, "-c", code, "lower"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1]) == {"worker_compiles": 0,
                                                         "local_compiles": 0}
    env["JITGRAPH_COMPILE_WORKERS"] = "1"
    second = subprocess.run([sys.executable, "-c", code, "run"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    (s,) = _splits(second.stderr)
    assert s["new"] == s["distinct"] >= 2 and s["disk"] == 0 and s["memory"] == 0
    stats = json.loads(second.stdout.splitlines()[-1])
    # every kernel, and the driver's BLAS helpers, went through the ahead-of-time compile
    assert stats["worker_compiles"] + stats["local_compiles"] >= s["distinct"], (stats, s)
