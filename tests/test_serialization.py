"""jitgraph.save / jitgraph.load: round trips, validation against the expected tree, atomic
writes, and a training run resumed from a checkpoint reproducing the uninterrupted run."""
from __future__ import annotations

import os

import numpy as np
import pytest

import jitgraph
import jitgraph.nn as nn
import jitgraph.optim as optim
import jitgraph.random as jr
from jitgraph.serialization import CheckpointError


def test_round_trip_plain_trees(tmp_path):
    tree = {"layers": [(np.arange(6.0).reshape(2, 3), np.zeros(3, np.float32))],
            "step": np.array(7), "extra": None}
    path = tmp_path / "ck.npz"
    jitgraph.save(path, tree)
    back = jitgraph.load(path)
    assert back["extra"] is None and isinstance(back["layers"], list)
    assert isinstance(back["layers"][0], tuple)
    np.testing.assert_array_equal(back["layers"][0][0], tree["layers"][0][0])
    assert back["layers"][0][1].dtype == np.float32 and int(back["step"]) == 7
    assert os.listdir(tmp_path) == ["ck.npz"]                  # no temporary files left


def test_modules_and_optimizer_state_need_like(tmp_path):
    model = nn.MLP([3, 4, 2], key=jr.key(0))
    opt = optim.adam(1e-3)
    tree = (model, opt.init(model))
    path = tmp_path / "model.npz"
    jitgraph.save(path, tree)
    with pytest.raises(CheckpointError, match="pass like="):
        jitgraph.load(path)
    m2, s2 = jitgraph.load(path, like=tree)
    assert type(m2) is nn.MLP and m2.activation is nn.relu
    np.testing.assert_array_equal(m2.layers[1].weight, model.layers[1].weight)
    assert int(s2["count"]) == 0


def test_mismatches_are_refused_with_the_leaf_named(tmp_path):
    path = tmp_path / "ck.npz"
    jitgraph.save(path, {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)})
    with pytest.raises(CheckpointError, match=r"\['w'\] is float32\[2, 3\] in the file, but "
                                              r"the caller expects float32\[3, 3\]"):
        jitgraph.load(path, like={"w": np.zeros((3, 3), np.float32), "b": np.zeros(3, np.float32)})
    with pytest.raises(CheckpointError, match=r"\['b'\] is float32\[3\].*float64\[3\]"):
        jitgraph.load(path, like={"w": np.zeros((2, 3), np.float32), "b": np.zeros(3)})
    with pytest.raises(CheckpointError, match="another model"):
        jitgraph.load(path, like=nn.MLP([2, 3], key=jr.key(0)))
    bad = tmp_path / "not_a_checkpoint.npz"
    np.savez(bad, a=np.zeros(2))
    with pytest.raises(CheckpointError, match="not a jitgraph checkpoint"):
        jitgraph.load(bad)
    (tmp_path / "garbage.npz").write_bytes(b"not a zip file")
    with pytest.raises(CheckpointError, match="cannot read"):
        jitgraph.load(tmp_path / "garbage.npz")


def test_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "ck.npz"
    jitgraph.save(path, {"w": np.ones(2)})
    with pytest.raises(TypeError, match="not an array"):
        jitgraph.save(path, {"w": np.ones(2), "f": object()})
    np.testing.assert_array_equal(jitgraph.load(path)["w"], np.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


def _train(model, state, opt, epochs, start, x, y):
    def loss(m, xb, yb):
        return nn.cross_entropy(m(xb), yb)
    for epoch in range(start, start + epochs):
        order = jr.permutation(jr.fold_in(jr.key(1), epoch), len(x))
        for i in range(0, len(x), 4):
            idx = order[i:i + 4]
            g = jitgraph.grad(loss)(model, x[idx], y[idx])
            updates, state = opt.update(g, state, model)
            model = optim.apply_updates(model, updates)
    return model, state


def test_interrupted_run_resumes_to_the_same_result(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 3)).astype(np.float32)
    y = rng.integers(0, 2, 12)
    opt = optim.adamw(0.05)
    model = nn.MLP([3, 5, 2], key=jr.key(0))
    straight, s_straight = _train(model, opt.init(model), opt, 4, 0, x, y)
    half, s_half = _train(model, opt.init(model), opt, 2, 0, x, y)
    jitgraph.save(tmp_path / "epoch2.npz", (half, s_half))
    del half, s_half                                           # the process "dies" here
    fresh = nn.MLP([3, 5, 2], key=jr.key(99))
    resumed, s_resumed = jitgraph.load(tmp_path / "epoch2.npz", like=(fresh, opt.init(fresh)))
    resumed, s_resumed = _train(resumed, s_resumed, opt, 2, 2, x, y)
    for a, b in zip(jitgraph.tree_leaves((straight, s_straight)),
                    jitgraph.tree_leaves((resumed, s_resumed))):
        np.testing.assert_array_equal(a, b)
