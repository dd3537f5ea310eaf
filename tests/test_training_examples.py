"""The training examples: the IDX loader on files written here, the cheap scripts end to end in
fresh processes, and the CNN/transformer models eagerly on tiny inputs (their full --smoke runs
compile large programs and are timed in the report rather than in CI)."""
from __future__ import annotations

import gzip
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import jitgraph
import jitgraph.nn as nn
import jitgraph.random as jr

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import mnist  # noqa: E402


def run_script(name: str, tmp_path) -> str:
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / name), "--smoke"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{name}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_idx_round_trip_raw_and_gzip(tmp_path):
    imgs = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    mnist.write_idx(tmp_path / "a.idx", imgs)
    mnist.write_idx(tmp_path / "b.idx.gz", imgs, compress=True)
    with open(tmp_path / "b.idx.gz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    for name in ("a.idx", "b.idx.gz"):
        got = mnist.read_idx(str(tmp_path / name), ndim=3)
        np.testing.assert_array_equal(got, imgs)
    floats = np.array([1.5, -2.25], np.float32)
    mnist.write_idx(tmp_path / "f.idx", floats)
    np.testing.assert_array_equal(mnist.read_idx(str(tmp_path / "f.idx")), floats)
    # the exact bytes of a 1-d ubyte file: magic 0x00000801, count, data
    mnist.write_idx(tmp_path / "l.idx", np.array([7, 2], np.uint8))
    assert (tmp_path / "l.idx").read_bytes() == bytes.fromhex("00000801 00000002 0702")


def test_idx_header_validation(tmp_path):
    bad = tmp_path / "bad.idx"
    bad.write_bytes(bytes.fromhex("00010803 00000001") + b"\0" * 4)
    with pytest.raises(mnist.IDXError, match="bad magic number"):
        mnist.read_idx(str(bad))
    short = tmp_path / "short.idx"
    short.write_bytes(bytes.fromhex("00000803 00000002 00000002 00000002") + b"\0" * 7)
    with pytest.raises(mnist.IDXError, match=r"7\D.*needs 24|23 bytes.*needs 24"):
        mnist.read_idx(str(short))
    labels = tmp_path / "labels.idx"
    mnist.write_idx(labels, np.zeros(3, np.uint8))
    with pytest.raises(mnist.IDXError, match="1-d array, expected 3-d"):
        mnist.read_idx(str(labels), ndim=3)
    with gzip.open(tmp_path / "trunc.gz", "wb") as f:
        f.write(b"\0\0")
    with pytest.raises(mnist.IDXError, match="too short"):
        mnist.read_idx(str(tmp_path / "trunc.gz"))


def test_load_mnist_directory(tmp_path):
    rng = np.random.default_rng(0)
    for key, name in mnist.FILES.items():
        n = 5 if "train" in key else 3
        arr = rng.integers(0, 256, (n, 4, 4)) if "images" in key else rng.integers(0, 10, n)
        mnist.write_idx(tmp_path / (name + (".gz" if "train" in key else "")),
                        arr.astype(np.uint8), compress="train" in key)
    X_tr, y_tr, X_te, y_te = mnist.load_mnist(str(tmp_path))
    assert X_tr.shape == (5, 16) and X_te.shape == (3, 16) and X_tr.dtype == np.float32
    assert 0.0 <= X_tr.min() and X_tr.max() <= 1.0 and y_tr.dtype == np.int64
    os.remove(tmp_path / mnist.FILES["test_labels"])
    with pytest.raises(FileNotFoundError, match="t10k-labels"):
        mnist.load_mnist(str(tmp_path))


def test_autograd_mlp_smoke(tmp_path):
    out = run_script("autograd_mlp.py", tmp_path)
    acc = float(re.search(r"^final test accuracy: ([\d.]+)$", out, re.M).group(1))
    assert acc > 0.5, out
    # eager: nothing compiled; plain progress (not a terminal) with the throughput
    assert "\r" not in out and "nothing compiled: every call ran eagerly" in out
    assert re.search(r"^training \(eager\): 12 steps in [\d.]+ s; [\d,.]+ examples/s$", out, re.M)


def test_custom_op_smoke(tmp_path):
    out = run_script("custom_op.py", tmp_path)
    assert "custom ops ok" in out
    # the compile announced before the first call and timed after it; the total time at the end
    assert re.search(r"^compiling jit\(grad\(.*\.\.\.\n  compiled in \d+\.\d\d s$", out, re.M), out
    assert re.search(r"^compiled 1 program \(0 from the disk cache\) in ", out, re.M), out
    assert re.search(r"^total time \d+\.\d+ s$", out, re.M), out


def test_cnn_and_transformer_models_eagerly():
    import char_transformer
    import cnn_digits
    model = cnn_digits.CNN(jr.key(0), channels=(2, 3))
    x = np.random.default_rng(0).random((2, 8, 8, 1)).astype(np.float32)
    assert model(x).shape == (2, 10)
    g = jitgraph.grad(cnn_digits.loss_fn)(model, x, np.array([1, 2]))
    assert type(g) is cnn_digits.CNN and g.conv1.weight.shape == (3, 3, 1, 2)
    shifted = cnn_digits.shift_augment(x, np.random.default_rng(1))
    assert shifted.shape == x.shape

    text = char_transformer.load_text()
    assert len(text) > 100_000 and "def" in text
    tm = char_transformer.CharTransformer(vocab=11, context=6, dim=8, heads=2, layers=2,
                                          key=jr.key(0))
    ids = np.arange(12).reshape(2, 6) % 11
    loss = char_transformer.loss_fn(tm, ids, (ids + 1) % 11)
    assert np.isfinite(float(loss)) and float(loss) < 2 * np.log(11)
    # causal: changing a later token leaves the earlier positions' logits alone
    ids2 = ids.copy()
    ids2[:, -1] = 0
    np.testing.assert_allclose(tm(ids)[:, :-1], tm(ids2)[:, :-1], rtol=1e-5, atol=1e-6)
    assert isinstance(tm.blocks[0].attn, nn.Attention)
