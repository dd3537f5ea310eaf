"""MNIST from IDX files you have (the format yann.lecun.com published; gzip or raw).

    python examples/mnist.py --data-dir ~/data/mnist   # train-images-idx3-ubyte[.gz] etc.
    python examples/mnist.py --smoke                    # writes small IDX files from
                                                        # scikit-learn's digits, trains on them

``read_idx`` validates the header (magic number, element type, dimensions, file length) and
raises ``IDXError`` naming the file and the problem. The model is an MLP trained with
``jitgraph.train_step`` and Adam: the script says when it compiles the step and how long that
took, shows a progress bar with examples/s and the ETA on a terminal (plain lines elsewhere),
and writes the loss/accuracy plot to ``outputs/mnist.png`` (``--out DIR``, ``--no-plot``).
"""
from __future__ import annotations

import argparse
import gzip
import os
import struct
import sys
import tempfile
import time

import numpy as np

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.optim as optim
import jitgraph.random as jr
from example_utils import (Progress, add_output_arguments, compile_on_first_call, finish,
                           say)

# IDX element types: code -> big-endian NumPy dtype
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
         "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}


class IDXError(ValueError):
    """A file that is not a well-formed IDX file."""


def _open(path: str):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path: str, ndim: int | None = None) -> np.ndarray:
    """The array in an IDX file (gzip-compressed or raw)."""
    with _open(path) as f:
        try:
            data = f.read()
        except (OSError, EOFError) as e:
            raise IDXError(f"{path}: cannot read ({e})") from None
    if len(data) < 4:
        raise IDXError(f"{path}: {len(data)} bytes is too short for an IDX header")
    zero, code, nd = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in IDX_TYPES:
        raise IDXError(f"{path}: bad magic number 0x{data[:4].hex()} (an IDX file starts with "
                       "two zero bytes, a type code in 08 09 0B 0C 0D 0E and the rank)")
    if ndim is not None and nd != ndim:
        raise IDXError(f"{path}: holds a {nd}-d array, expected {ndim}-d")
    if len(data) < 4 + 4 * nd:
        raise IDXError(f"{path}: header truncated")
    shape = struct.unpack(f">{nd}I", data[4:4 + 4 * nd])
    dtype = np.dtype(IDX_TYPES[code])
    want = 4 + 4 * nd + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != want:
        raise IDXError(f"{path}: {len(data)} bytes, but a {dtype} array of shape {shape} "
                       f"needs {want}")
    return np.frombuffer(data, dtype, offset=4 + 4 * nd).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str, array: np.ndarray, compress: bool = False) -> None:
    """Write ``array`` as an IDX file (used by --smoke and the tests)."""
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}
    arr = np.asarray(array)
    code = codes.get(arr.dtype)
    if code is None:
        raise TypeError(f"IDX cannot store {arr.dtype}")
    payload = struct.pack(">HBB", 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    payload += arr.astype(IDX_TYPES[code]).tobytes()
    with (gzip.open(path, "wb") if compress else open(path, "wb")) as f:
        f.write(payload)


def load_mnist(data_dir: str):
    """(train images, train labels, test images, test labels): images as float32 in [0, 1],
    flattened; labels int64. Accepts each file with or without ``.gz``."""
    out = []
    for key, name in FILES.items():
        for candidate in (name, name + ".gz", name.replace("-idx", ".idx")):
            path = os.path.join(data_dir, candidate)
            if os.path.exists(path):
                break
        else:
            raise FileNotFoundError(f"{data_dir}: no {name}[.gz]")
        arr = read_idx(path, 3 if "images" in key else 1)
        if "images" in key:
            arr = (arr.reshape(len(arr), -1) / 255.0).astype(np.float32)
        else:
            arr = arr.astype(np.int64)
        out.append(arr)
    if len(out[0]) != len(out[1]) or len(out[2]) != len(out[3]):
        raise IDXError(f"{data_dir}: image and label counts differ")
    return tuple(out)


def write_digits_as_idx(directory: str) -> None:
    """scikit-learn's digits (8x8, values 0..16) as MNIST-style IDX files (0..255, gzip)."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    imgs = (X.reshape(-1, 8, 8) * 255 / 16).astype(np.uint8)
    write_idx(os.path.join(directory, FILES["train_images"] + ".gz"), imgs[:1400], True)
    write_idx(os.path.join(directory, FILES["train_labels"] + ".gz"), y[:1400].astype(np.uint8), True)
    write_idx(os.path.join(directory, FILES["test_images"]), imgs[1400:])
    write_idx(os.path.join(directory, FILES["test_labels"]), y[1400:].astype(np.uint8))


def train(data, epochs: int, batch: int = 64, hidden: int = 128, seed: int = 0) -> list:
    """Adam on an MLP; returns ``[(mean loss, test accuracy)]`` per epoch."""
    X_tr, y_tr, X_te, y_te = data
    model = nn.MLP([X_tr.shape[1], hidden, 10], key=jr.key(seed))
    opt = optim.adam(1e-3)
    state = opt.init(model)
    step = compile_on_first_call(
        jitgraph.train_step(lambda m, x, y: nn.cross_entropy(m(x), y), opt),
        "the training step (forward, backward, Adam update)")
    rng = np.random.default_rng(seed)
    history = []
    n_batches = len(X_tr) // batch
    with Progress(epochs * n_batches, desc="training", per_step=batch, item="examples") as bar:
        for epoch in range(1, epochs + 1):
            perm = rng.permutation(len(X_tr))
            losses = []
            for i in range(n_batches):
                idx = perm[i * batch:(i + 1) * batch]
                model, state, loss = step(model, state, X_tr[idx], y_tr[idx])
                losses.append(float(loss))
                bar.update(loss=losses[-1])
            acc = float(np.mean(np.argmax(model(X_te), axis=1) == y_te))     # eagerly
            say(f"epoch {epoch}: loss {np.mean(losses):.4f}, test accuracy {100 * acc:.2f}%")
            history.append((float(np.mean(losses)), acc))
    return history


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--epochs", type=int, default=None)
    add_output_arguments(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.smoke or args.data_dir is None:
        if not args.smoke:
            print("no --data-dir given: using scikit-learn's digits written as IDX files")
        with tempfile.TemporaryDirectory() as d:
            write_digits_as_idx(d)
            data = load_mnist(d)
    else:
        data = load_mnist(args.data_dir)
    print(f"loaded {len(data[0])} training and {len(data[2])} test images of "
          f"{data[0].shape[1]} pixels")
    history = train(data, args.epochs or (2 if args.smoke else 10))
    finish(args, "mnist", {"training loss": [h[0] for h in history],
                           "test accuracy": [h[1] for h in history]}, "MLP on MNIST-format data",
           started=started)
    acc = history[-1][1]
    assert acc > 0.5, acc
    return 0


if __name__ == "__main__":
    sys.exit(main())
