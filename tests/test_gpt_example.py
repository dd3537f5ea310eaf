"""examples/gpt.py --smoke at a tiny size (one layer, d=16), in-process: the compiled AdamW steps
give finite losses that go down, and the first step's float32 loss equals the float64 reference
interpreter's loss of the initial model on the same batch; what it prints: the compile
announced and timed, plain progress lines (not a terminal), and with validation off
(``--eval-batches 0``: its forward-only program would be a second compile) no NaN."""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys

import numpy as np
import pytest

import jitgraph
import jitgraph.random as jr
from jitgraph import interpreter
from jitgraph.tree import tree_flatten, tree_map

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import gpt  # noqa: E402

ARGS = ["--smoke", "--layers", "1", "--dim", "16", "--heads", "2", "--context", "8", "--batch", "2",
        "--steps", "6", "--lr", "1e-2", "--eval-batches", "0"]


@pytest.fixture(scope="module")
def run():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        r = gpt.run(ARGS)
    r["stdout"] = out.getvalue()
    return r


def test_gpt_output(run):
    out = run["stdout"]
    assert re.search(r"^compiling the training step \(.*\) \.\.\.\n  compiled in \d+\.\d\d s",
                     out, re.M), out
    # pytest's stderr is not a terminal: no bar, a plain summary line with tokens/s
    assert "\r" not in out
    assert re.search(r"^training: 5 steps in \d+\.\d+ s; loss \d\.\d{4}, [\d,.]+ tokens/s$",
                     out, re.M), out
    assert "nan" not in out.lower() and "validation skipped (--eval-batches 0)" in out, out
    assert "compiling the validation" not in out and run["val_loss"] is None


def test_gpt_losses_finite_and_decreasing(run):
    losses = run["losses"]
    assert len(losses) == 6 and np.all(np.isfinite(losses)), losses
    assert np.mean(losses[-2:]) < np.mean(losses[:2]) - 0.05, losses
    # a fresh model predicts about uniformly over the 256 bytes: loss near log(256)
    assert abs(losses[0] - np.log(256)) < 0.1, losses


def test_gpt_first_loss_matches_float64_reference(run):
    cfg = run["config"]
    assert (cfg.layers, cfg.dim, cfg.context, cfg.tied) == (1, 16, 8, True)
    model64 = tree_map(lambda a: np.asarray(a, np.float64), gpt.GPT(cfg, jr.key(0)))
    x, y = run["first_batch"]
    graph = jitgraph.make_graph(gpt.loss_fn)(model64, x, y)
    ref, = interpreter.run(graph, tree_flatten((model64, x, y))[0])
    assert np.asarray(ref).dtype == np.float64
    np.testing.assert_allclose(run["losses"][0], float(ref), rtol=2e-6)
