"""``examples/train_digits.py --smoke`` in fresh processes: it trains, prints its accuracy, and a
second process with the same cache directory loads both compiled programs from disk and
reproduces the same numbers, and says so ("compiled in ... (from the disk cache)").
(``test_examples.py`` checks the first run's training curve in detail; this file adds the
warm-cache rerun.)"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_digits.py"

pytestmark = pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/train_digits.py missing")


def run_smoke(cache_dir: pathlib.Path) -> tuple[str, float]:
    env = dict(os.environ)
    env["JITGRAPH_CACHE_DIR"] = str(cache_dir)
    env.pop("JITGRAPH_LOG", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(EXAMPLE), "--smoke", "--no-plot"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout, wall


def test_smoke_run_then_warm_cache_rerun(tmp_path):
    cache = tmp_path / "cache"
    out1, wall1 = run_smoke(cache)
    m1 = re.search(r"final test accuracy: ([\d.]+)%", out1)
    assert m1, out1
    assert 50.0 < float(m1.group(1)) <= 100.0, out1
    c1 = re.search(r"compiles=(\d+) \(from disk cache: (\d+)\)", out1)
    assert c1 and int(c1.group(2)) == 0, out1

    out2, wall2 = run_smoke(cache)
    print(f"train_digits --smoke: cold cache {wall1:.2f}s, warm cache {wall2:.2f}s")
    c2 = re.search(r"compiles=(\d+) \(from disk cache: (\d+)\)", out2)
    assert c2 and int(c2.group(1)) == int(c1.group(1)) == int(c2.group(2)), out2
    assert re.search(r"^compiling the training step .*\n  compiled in \d+\.\d\d s$", out1, re.M)
    assert re.search(r"^compiling the training step .*\n  compiled in \d+\.\d\d s "
                     r"\(from the disk cache\)$", out2, re.M), out2
    # same data, same seed, same compiled code: the same numbers
    m2 = re.search(r"final test accuracy: ([\d.]+)%  \(train ([\d.]+)%, loss ([\d.]+)\)", out2)
    m1 = re.search(r"final test accuracy: ([\d.]+)%  \(train ([\d.]+)%, loss ([\d.]+)\)", out1)
    assert m1 and m2 and m1.groups() == m2.groups(), (out1, out2)
