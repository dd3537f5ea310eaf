"""The example scripts run end to end (each in a fresh process with an empty disk cache), and
their shared helpers: a progress bar only on a terminal, a plot where matplotlib is installed
(else a line saying how to get it), and where the compiled code is cached."""
from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import example_utils  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def run_example(args: list[str], cache_dir: pathlib.Path, timeout: float = 300,
                stderr: list | None = None) -> str:
    env = dict(os.environ)
    env["JITGRAPH_CACHE_DIR"] = str(cache_dir)
    env.pop("JITGRAPH_LOG", None)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(args)} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-6000:]}"
        f"\n--- stderr ---\n{proc.stderr[-6000:]}")
    if stderr is not None:
        stderr.append(proc.stderr)
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
    plot = tmp_path / "digits.png"
    err: list = []
    out = run_example(["examples/train_digits.py", "--smoke", "--plot", str(plot)], tmp_path,
                      stderr=err)
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
    # not a terminal: plain lines, no progress bar (with or without tqdm)
    assert "it/s" not in err[0] and "\r" not in err[0] + out
    if have("matplotlib"):
        assert f"plot written to {plot}" in out and plot.read_bytes()[:8] == PNG_SIGNATURE
    else:
        assert f"no plot written: matplotlib is not installed (pip install -e '.[examples]' " \
               f"to get {plot})" in out and not plot.exists()
    assert re.search(rf"^compiled code is cached in {re.escape(str(tmp_path))} \(\d", out, re.M), out


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch):
    items = range(3)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert example_utils.progress(items, desc="epoch 1") is items       # plain lines
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    assert example_utils.progress(items, enabled=False) is items
    monkeypatch.setitem(sys.modules, "tqdm", None)                      # tqdm not installed
    assert example_utils.progress(items, desc="epoch 1") is items


def test_progress_bar_on_a_terminal_with_tqdm(monkeypatch):
    pytest.importorskip("tqdm")
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert list(example_utils.progress(range(3), desc="epoch 1")) == [0, 1, 2]
    drawn = term.getvalue()                    # the bar, drawn and then cleared (leave=False)
    assert drawn.startswith("\repoch 1:   0%|") and "0/3" in drawn and drawn.endswith("\r")


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    line = example_utils.plot_history(str(tmp_path / "p.png"), {"loss": [2.0, 1.0]}, "t")
    assert line == (f"no plot written: matplotlib is not installed "
                    f"(pip install -e '.[examples]' to get {tmp_path / 'p.png'})")
    assert not (tmp_path / "p.png").exists()


def test_plot_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    path = tmp_path / "p.png"
    opened = []
    real_subplots = plt.subplots

    def spy(*a, **k):
        fig, axes = real_subplots(*a, **k)
        opened.append(axes)
        return fig, axes

    plt.subplots = spy
    try:
        line = example_utils.plot_history(str(path), {"training loss": [2.0, 1.0, 0.5],
                                                      "test accuracy": [0.5, 0.7, 0.9]}, "t")
    finally:
        plt.subplots = real_subplots
    assert line == f"plot written to {path}" and path.read_bytes()[:8] == PNG_SIGNATURE
    [axes] = opened
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in axes[0]]
    assert labels == [("epoch", "training loss"), ("epoch", "test accuracy")]
    assert [list(ax.lines[0].get_ydata()) for ax in axes[0]] == [[2.0, 1.0, 0.5], [0.5, 0.7, 0.9]]
