"""A small CNN on scikit-learn's 8x8 digits: conv-relu-pool twice, then a linear layer.

    python examples/cnn_digits.py                 # 30 epochs, asserts test accuracy >= 98 %
    python examples/cnn_digits.py --smoke         # 2 epochs, for CI
    python examples/cnn_digits.py --out runs      # the plot's folder (default outputs/)

Convolutions are im2col + one BLAS matmul each (``jitgraph.nn.conv2d``); the whole training
step (forward, backward, Adam update) is one ``jitgraph.train_step`` program. It says when
it compiles it (and ``predict``) and how long that took; the run shows a progress bar with
examples/s and the ETA on a terminal, plain lines elsewhere; the loss/accuracy plot goes to
``outputs/cnn_digits.png`` (``--out DIR``, ``--no-plot``).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.optim as optim
import jitgraph.random as jr
from example_utils import Progress, add_output_arguments, compile_on_first_call, finish

EVAL_CHUNK = 120


class CNN(nn.Module):
    def __init__(self, key, channels=(16, 32), num_classes=10):
        k1, k2, k3 = jr.split(key, 3)
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, key=k1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, key=k2)
        self.head = nn.Linear(2 * 2 * c2, num_classes, key=k3)

    def __call__(self, x):                              # x: (batch, 8, 8, 1), NHWC
        h = nn.max_pool2d(nn.relu(self.conv1(x)), 2)    # (batch, 4, 4, c1)
        h = nn.max_pool2d(nn.relu(self.conv2(h)), 2)    # (batch, 2, 2, c2)
        return self.head(jnp.reshape(h, (x.shape[0], -1)))


def load_data(seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    return train_test_split(X, y.astype(np.int64), test_size=0.2, random_state=seed, stratify=y)


def shift_augment(x: np.ndarray, rng) -> np.ndarray:
    """Each image moved by up to one pixel in each direction (zero fill): the full run
    overfits the 1437 training images without it."""
    n, h, w, _ = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    dy, dx = rng.integers(0, 3, n), rng.integers(0, 3, n)
    rows = dy[:, None] + np.arange(h)[None, :]
    cols = dx[:, None] + np.arange(w)[None, :]
    return padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]


def loss_fn(model, x, y):
    return nn.cross_entropy(model(x), y)


def accuracy(predict, model, X, y) -> float:
    correct = 0
    for i in range(0, len(X), EVAL_CHUNK):
        chunk = X[i:i + EVAL_CHUNK]
        n = len(chunk)
        if n < EVAL_CHUNK:
            chunk = np.concatenate([chunk, np.zeros((EVAL_CHUNK - n,) + X.shape[1:], X.dtype)])
        correct += int(np.sum(np.asarray(predict(model, chunk))[:n] == y[i:i + n]))
    return correct / len(X)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    add_output_arguments(ap)
    args = ap.parse_args(argv)
    epochs = args.epochs or (2 if args.smoke else 30)

    X_tr, X_te, y_tr, y_te = load_data(args.seed)
    model = CNN(jr.key(args.seed))
    opt = optim.adam(optim.cosine_decay(args.lr, epochs * (len(X_tr) // args.batch_size)))
    state = opt.init(model)
    step = compile_on_first_call(jitgraph.train_step(loss_fn, opt),
                                 "the training step (forward, backward, Adam update)")
    predict = compile_on_first_call(jitgraph.jit(lambda m, x: jnp.argmax(m(x), axis=1)),
                                    f"predict (chunks of {EVAL_CHUNK} images)")
    print(f"digits CNN: {len(X_tr)} train / {len(X_te)} test, {model.num_parameters()} "
          f"parameters, batch {args.batch_size}, Adam lr {args.lr} (cosine)")
    rng = np.random.default_rng(args.seed)
    n_batches = len(X_tr) // args.batch_size
    history = []
    t_start = time.perf_counter()
    bar = Progress(epochs * n_batches, desc="training", per_step=args.batch_size,
                   item="examples")
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        perm = rng.permutation(len(X_tr))
        losses = []
        for i in range(n_batches):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            xb = X_tr[idx] if args.smoke else shift_augment(X_tr[idx], rng)
            model, state, loss = step(model, state, xb, y_tr[idx])
            losses.append(float(loss))
            bar.update(loss=losses[-1])
        test_acc = accuracy(predict, model, X_te, y_te)
        history.append((float(np.mean(losses)), test_acc))
        bar.write(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  test acc {100 * test_acc:6.2f}%  "
                  f"{time.perf_counter() - t0:6.2f}s")
    bar.close()
    steps = epochs * n_batches
    info = jitgraph.cache_info()
    print(f"final test accuracy: {100 * history[-1][1]:.2f}% after {epochs} epochs "
          f"({steps} steps) in {time.perf_counter() - t_start:.1f}s, "
          f"compile {info['compile_seconds']:.1f}s")
    finish(args, "cnn_digits", {"training loss": [h[0] for h in history],
                                "test accuracy": [h[1] for h in history]}, "CNN on digits")
    threshold = 0.5 if args.smoke else 0.98
    assert history[-1][1] >= threshold, f"test accuracy {history[-1][1]:.4f} < {threshold}"
    return 0


if __name__ == "__main__":
    sys.exit(main())
