"""The example scripts run end to end (each in a fresh process with an empty disk cache), and
their shared helpers: the compile announcement and its time, a progress bar only on a terminal
(tqdm's or a self-drawn one) and plain progress lines elsewhere, a plot in the output folder
where matplotlib is installed (else a line saying how to get it), and where the compiled code
is cached."""
from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
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
                stderr: list | None = None, cwd: pathlib.Path = ROOT) -> str:
    env = dict(os.environ)
    env["JITGRAPH_CACHE_DIR"] = str(cache_dir)
    env.pop("JITGRAPH_LOG", None)
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
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
    # it says that nothing is compiled, and how long it took
    assert "nothing compiled: every call ran eagerly" in out
    assert re.search(r"^total time \d+\.\d+ s$", out, re.M), out


def test_train_digits_smoke(tmp_path):
    work = tmp_path / "work"                 # the current directory: the plot goes to outputs/
    work.mkdir()
    err: list = []
    out = run_example([str(ROOT / "examples" / "train_digits.py"), "--smoke"], tmp_path / "cache",
                      stderr=err, cwd=work)
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
    # each compile announced before the first call, and timed after it (an empty cache)
    assert re.search(r"^compiling the training step .*\.\.\.\n  compiled in \d+\.\d\d s$", out,
                     re.M), out
    assert re.search(r"^compiling predict .*\.\.\.\n  compiled in \d+\.\d\d s$", out, re.M), out
    # not a terminal: plain lines, no progress bar (with or without tqdm), and a summary line
    # with the throughput
    assert "it/s" not in err[0] and "step/s" not in err[0] and "\r" not in err[0] + out
    assert re.search(r"^training: 88 steps in \d+\.\d+ s, plus \d+\.\d s compiling; "
                     r"loss \d\.\d{4}, [\d,.]+ examples/s$", out, re.M), out
    plot = work / "outputs" / "train_digits.png"
    if have("matplotlib"):
        assert "plot written to outputs/train_digits.png" in out
        assert plot.read_bytes()[:8] == PNG_SIGNATURE
    else:
        assert "no plot written: matplotlib is not installed (pip install -e '.[examples]' " \
               "to get outputs/train_digits.png)" in out and not plot.exists()
    assert sorted(p.name for p in work.iterdir()) == (["outputs"] if have("matplotlib") else [])
    assert re.search(r"^compiled 2 programs \(0 from the disk cache\) in \d", out, re.M), out
    assert re.search(rf"^compiled code is cached in {re.escape(str(tmp_path / 'cache'))} \(\d",
                     out, re.M), out


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_mode_follows_stderr(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert example_utils.Progress(3).mode == "lines"          # piped, CI: plain lines
    assert example_utils.Progress(3, enabled=False).mode == "off"
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    assert example_utils.Progress(3, enabled=False).mode == "off"
    monkeypatch.setitem(sys.modules, "tqdm", None)                      # tqdm not installed
    bar = example_utils.Progress(3)
    assert bar.mode == "bar"
    bar.close()


def test_plain_progress_lines(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with example_utils.Progress(3, desc="training", per_step=1000, item="tokens",
                                line_seconds=0) as bar:
        for loss in (3.0, 2.0, 1.0):
            bar.update(loss=loss)
        bar.write("a line of the example's own")
    out = capsys.readouterr().out
    assert "\r" not in out and sys.stderr.getvalue() == ""
    lines = out.splitlines()
    assert re.fullmatch(r"training: step 1/3 \(33%\), loss 3\.0000, [\d,.]+ tokens/s, ETA \d+s",
                        lines[0]), out
    assert re.fullmatch(r"training: step 2/3 \(67%\), loss 2\.5000, [\d,.]+ tokens/s, ETA \d+s",
                        lines[1]), out
    assert lines[2] == "a line of the example's own"
    assert re.fullmatch(r"training: 3 steps in \d+\.\d+ s; loss 2\.0000, [\d,.]+ tokens/s",
                        lines[3]), out
    assert len(lines) == 4


def test_plain_progress_lines_at_most_every_few_seconds(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with example_utils.Progress(1000, desc="training") as bar:       # default: every 5 s
        for _ in range(1000):
            bar.update(loss=1.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("training: 1000 steps in "), lines


def test_self_drawn_bar_on_a_terminal_without_tqdm(monkeypatch, capsys):
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setenv("COLUMNS", "200")                     # the line is cut to the terminal
    with example_utils.Progress(2, desc="epoch 1", per_step=32, item="examples") as bar:
        bar.update(loss=0.5)
        bar.update(loss=0.25)
    drawn = term.getvalue()
    assert drawn.startswith("\repoch 1   0% [....................] 0/2")
    assert "2/2 loss 0.3750, " in drawn and " examples/s, ETA 0s" in drawn
    assert drawn.endswith("\r")                              # cleared at the end
    assert capsys.readouterr().out.startswith("epoch 1: 2 steps in ")   # the summary line


def test_progress_bar_on_a_terminal_with_tqdm(monkeypatch, capsys):
    pytest.importorskip("tqdm")
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    with example_utils.Progress(3, desc="training", per_step=64, item="tokens") as bar:
        assert bar.mode == "tqdm"
        for _ in range(3):
            bar.update(loss=2.0)
        bar.write("between")
    drawn = term.getvalue()                    # the bar, drawn and then cleared (leave=False)
    assert drawn.startswith("\rtraining:   0%|") and "3/3" in drawn and drawn.endswith("\r")
    assert "loss 2.0000" in drawn and "tokens/s" in drawn      # postfix: loss and throughput
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", drawn)          # elapsed < remaining (the ETA)
    out = capsys.readouterr().out
    assert out.startswith("between\ntraining: 3 steps in "), out


def test_compile_announced_and_timed(capsys):
    import jitgraph
    import jitgraph.numpy as jnp
    calls = []

    def f(x):
        calls.append(1)
        return jnp.sin(x) * 2.0

    g = example_utils.compile_on_first_call(jitgraph.jit(f), "f")
    g(np.ones(3))
    out = capsys.readouterr().out
    assert re.fullmatch(r"compiling f \.\.\.\n  compiled in \d+\.\d\d s"
                        r"(| \(from the disk cache\))\n", out), out
    np.testing.assert_allclose(g(np.ones(3)), 2 * np.sin(np.ones(3)))
    assert capsys.readouterr().out == ""                     # later calls: silent
    assert g.lower(np.ones(3)).source                         # the jitted function's attributes
    with example_utils.compiling("nothing new"):
        g(np.ones(3))
    assert capsys.readouterr().out.endswith(" s (already compiled in this process)\n")


def test_output_folder(tmp_path):
    import argparse
    ap = argparse.ArgumentParser()
    example_utils.add_output_arguments(ap)
    assert (ap.parse_args([]).out, ap.parse_args([]).plot) == ("outputs", True)
    assert ap.parse_args(["--no-plot", "--out", "x"]).plot is False
    path = example_utils.output_path(str(tmp_path / "a" / "b"), "p.png")
    assert path == str(tmp_path / "a" / "b" / "p.png") and (tmp_path / "a" / "b").is_dir()


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    line = example_utils.plot_history(str(tmp_path / "p.png"), {"loss": [2.0, 1.0]}, "t")
    assert line == (f"no plot written: matplotlib is not installed "
                    f"(pip install -e '.[examples]' to get {tmp_path / 'p.png'})")
    assert not (tmp_path / "p.png").exists()


def test_plot_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    path = tmp_path / "outputs" / "p.png"                     # its folder is created
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
