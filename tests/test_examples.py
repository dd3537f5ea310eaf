"""The example scripts run end to end (each in a fresh process with an empty disk cache)."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_example(args: list[str], cache_dir: pathlib.Path, timeout: float = 300) -> str:
    env = dict(os.environ)
    env["JITGRAPH_CACHE_DIR"] = str(cache_dir)
    env.pop("JITGRAPH_LOG", None)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(args)} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-6000:]}"
        f"\n--- stderr ---\n{proc.stderr[-6000:]}")
    return proc.stdout


def test_autodiff_tour(tmp_path):
    out = run_example(["examples/autodiff_tour.py"], tmp_path)
    assert "all checks passed" in out
    # (a) forward and reverse mode, and the printed graphs
    assert re.search(r"dy/dx1 \(forward\)\s+=\s+5\.50000000", out)
    assert re.search(r"dy/dx1 \(reverse\)\s+=\s+5\.50000000", out)
    assert re.search(r"dy/dx2 \(reverse\)\s+=\s+1\.71633781", out)      # 2 - cos 5
    assert "{ lambda" in out and "= log a" in out and "= sin b" in out and "= cos b" in out
    # (b) the four partials of x7 = x1 + exp(x1 w1 + x2 w2)
    for name, value in [("dx7/dx1", "368.03789840"), ("dx7/dx2", "489.38386453"),
                        ("dx7/dw1", "734.07579679"), ("dx7/dw2", "122.34596613")]:
        assert re.search(re.escape(name) + r"\s+=\s+" + re.escape(value), out), name
    # (c) neural net and higher-order derivatives
    assert "check_grads(log_posterior, order=2)" in out
    assert "hessian(x -> x^T A x) == A + A^T  ok" in out
    assert re.search(r"grad\^3\(sin\)\(1\)\s+=\s+-0\.54030231", out)       # -cos 1


def test_train_digits_smoke(tmp_path):
    out = run_example(["examples/train_digits.py", "--smoke"], tmp_path)
    epochs = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)s", out, re.M)
    assert [int(e[0]) for e in epochs] == [1, 2], out
    losses = [float(e[1]) for e in epochs]
    assert losses[1] < losses[0], out                  # training makes progress
    m = re.search(r"final test accuracy: ([\d.]+)%", out)
    assert m and float(m.group(1)) > 50.0, out
    m = re.search(r"compiles=(\d+) \(from disk cache: (\d+)\), hits=(\d+)", out)
    assert m, out
    compiles, disk, hits = map(int, m.groups())
    assert compiles == 2 and disk == 0               # step + predict, once each; empty cache
    assert hits >= 2 * 44 + 2 * 4 - 2                # every other call hit the compiled program
