"""Train an MLP on scikit-learn's handwritten digits with a compiled SGD training step.

    python examples/train_digits.py                 # full run, asserts test accuracy >= 95 %
    python examples/train_digits.py --smoke         # 2 epochs, for CI
    python examples/train_digits.py --epochs 40 --seed 1 --hidden 256 --act relu --out runs
    mpiexec -n 2 python examples/train_digits.py --data-parallel   # needs jitgraph[distributed]

It says when it compiles the training step and the ``predict`` function (on their first calls)
and how long that took. On a terminal the run shows a progress bar with examples/s and the ETA
(tqdm's where installed); elsewhere plain lines. One line per epoch either way. The
loss/accuracy curves go to ``outputs/train_digits.png`` (``--out DIR``, ``--no-plot``; needs
matplotlib), and the last line says where the compiled code is cached
(``pip install -e '.[examples]'`` brings scikit-learn, tqdm and matplotlib).

The data is ``sklearn.datasets.load_digits()`` (1797 8x8 images, bundled with scikit-learn, no
download). The model is ``jitgraph.nn.MLP``, the loss ``jitgraph.nn.cross_entropy`` and the
optimizer ``jitgraph.optim.sgd``; ``jitgraph.train_step`` turns them into one compiled program
(forward pass, backward pass and update, fused into Numba kernels). The parameters and the
optimizer state are donated, so the update is written into their old buffers (as in JAX, a
donated argument is invalid after the call: always use the returned values).

Every call must have the same shapes, or the step compiles again for the new shapes: the
minibatches have a fixed size (the last partial batch of each epoch is dropped; the data is
reshuffled every epoch, so every example is still seen), and evaluation runs a jitted
``predict`` over fixed-size chunks, padding the last one.

With ``--data-parallel`` (launched by ``mpiexec -n N``) the step is
``train_step(..., distributed=True)``: every rank draws the same permutation (same seed), takes
its shard of each global batch of ``--batch-size`` rows (``jitgraph.distributed.shard``), and
the gradients are averaged over the ranks; only rank 0 prints.
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

try:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
except ImportError:                                       # pragma: no cover
    sys.exit("this example needs scikit-learn: pip install -e '.[examples]'")

NUM_CLASSES = 10
EVAL_CHUNK = 512          # predict() always sees this many rows, so it compiles once


# ------------------------------------------------------------------ data
def load_data(seed: int, test_size: float = 0.2, dtype=np.float32):
    """Standardized features (train statistics only), stratified train/test split."""
    X, y = load_digits(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, random_state=seed,
                                              stratify=y)
    mean = X_tr.mean(axis=0)
    std = X_tr.std(axis=0)
    std[std == 0] = 1.0                                   # a few corner pixels are always 0
    X_tr = ((X_tr - mean) / std).astype(dtype)
    X_te = ((X_te - mean) / std).astype(dtype)
    return X_tr, y_tr.astype(np.int64), X_te, y_te.astype(np.int64)


# ------------------------------------------------------------------ model
ACTIVATIONS = {"tanh": jnp.tanh, "relu": nn.relu}


def loss_fn(model, x, labels):
    """Mean softmax cross-entropy (fused log-softmax + NLL) of the MLP's logits."""
    return nn.cross_entropy(model(x), labels)


def make_functions(act_name: str, lr: float, data_parallel: bool = False):
    step = jitgraph.train_step(loss_fn, optim.sgd(lr), distributed=data_parallel)

    @jitgraph.jit
    def predict(model, x):
        return jnp.argmax(model(x), axis=1)

    return step, predict


def accuracy(predict, params, X, y) -> float:
    """Accuracy with the jitted ``predict`` over fixed-size chunks (last one zero-padded)."""
    correct = 0
    for start in range(0, len(X), EVAL_CHUNK):
        chunk = X[start:start + EVAL_CHUNK]
        n = len(chunk)
        if n < EVAL_CHUNK:
            chunk = np.concatenate([chunk, np.zeros((EVAL_CHUNK - n, X.shape[1]), X.dtype)])
        pred = np.asarray(predict(params, chunk))[:n]
        correct += int(np.sum(pred == y[start:start + n]))
    return correct / len(X)


# ------------------------------------------------------------------ training
def train(epochs: int, seed: int, hidden: int, act: str, batch_size: int, lr: float,
          verbose: bool = True, data_parallel: bool = False):
    shard = lambda idx: idx                                # noqa: E731
    if data_parallel:
        import jitgraph.distributed as dist
        shard = dist.shard                                 # this rank's rows of a global batch
        verbose = verbose and dist.is_main()
    X_tr, y_tr, X_te, y_te = load_data(seed)
    rng = np.random.default_rng(seed)
    sizes = [X_tr.shape[1], hidden, NUM_CLASSES]
    params = nn.MLP(sizes, key=jr.key(seed), activation=ACTIVATIONS[act])
    step, predict = make_functions(act, lr, data_parallel)
    if verbose:                         # (only rank 0 talks)
        step = compile_on_first_call(step, "the training step (forward, backward, SGD update)")
        predict = compile_on_first_call(predict, f"predict (chunks of {EVAL_CHUNK} rows)")
    opt_state = step.optimizer.init(params)
    n_batches = len(X_tr) // batch_size                    # drop the last partial batch
    if verbose:
        print(f"digits: {len(X_tr)} train / {len(X_te)} test, {X_tr.shape[1]} features; "
              f"MLP {'-'.join(map(str, sizes))} ({act}), batch {batch_size}, "
              f"{n_batches} steps/epoch, lr {lr}, seed {seed}")
        if data_parallel:
            print(f"data-parallel: {dist.world_size()} ranks x {batch_size // dist.world_size()} "
                  f"rows of each global batch of {batch_size}")
        print(f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>8} {'time':>8}")

    history = []
    t_start = time.perf_counter()
    bar = Progress(epochs * n_batches, desc="training", per_step=batch_size, item="examples",
                   enabled=verbose)
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        compile0 = jitgraph.cache_info()["compile_seconds"]
        perm = rng.permutation(len(X_tr))
        losses = np.empty(n_batches)
        for i in range(n_batches):
            idx = shard(perm[i * batch_size:(i + 1) * batch_size])
            # params and state are donated: the old arrays are invalid now, keep the new ones
            params, opt_state, loss = step(params, opt_state, X_tr[idx], y_tr[idx])
            losses[i] = float(loss)
            bar.update(loss=losses[i])
        train_acc = accuracy(predict, params, X_tr, y_tr)
        test_acc = accuracy(predict, params, X_te, y_te)
        dt = time.perf_counter() - t0
        compiled = jitgraph.cache_info()["compile_seconds"] - compile0
        history.append((float(losses.mean()), train_acc, test_acc, dt))
        note = f"  (incl. {compiled:.1f}s compiling)" if compiled > 0.05 else ""
        bar.write(f"{epoch:>5} {losses.mean():8.4f} {100 * train_acc:8.2f}% "
                  f"{100 * test_acc:7.2f}% {dt:7.2f}s{note}")
    bar.close()
    total = time.perf_counter() - t_start
    if not np.isfinite(history[-1][0]):
        raise FloatingPointError(f"training diverged: loss {history[-1][0]}")
    return params, history, total


def print_summary(args, epochs: int, history, total: float, info: dict) -> None:
    loss, train_acc, test_acc, _ = history[-1]
    print(f"final test accuracy: {100 * test_acc:.2f}%  (train {100 * train_acc:.2f}%, "
          f"loss {loss:.4f}) after {epochs} epochs in {total:.1f}s")
    print(f"jitgraph.cache_info(): compiles={info['misses']} (from disk cache: "
          f"{info['disk_hits']}), hits={info['hits']}, traces={info['traces']}, "
          f"compile {info['compile_seconds']:.1f}s, trace {info['trace_seconds']:.2f}s")
    print(f"  {info}")
    finish(args, "train_digits", {"training loss": [h[0] for h in history],
                                  "test accuracy": [h[2] for h in history]}, "MLP on digits")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="2 quick epochs (CI); accuracy > 50%%")
    ap.add_argument("--epochs", type=int, default=None, help="default 30 (2 with --smoke)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--act", choices=sorted(ACTIVATIONS), default="tanh")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    add_output_arguments(ap)
    ap.add_argument("--data-parallel", action="store_true",
                    help="data-parallel over MPI ranks: mpiexec -n N python train_digits.py "
                         "--data-parallel (pip install -e '.[distributed]')")
    args = ap.parse_args(argv)
    epochs = args.epochs if args.epochs is not None else (2 if args.smoke else 30)
    main_rank = True
    if args.data_parallel:
        import jitgraph.distributed as dist
        main_rank = dist.is_main()

    params, history, total = train(epochs, args.seed, args.hidden, args.act, args.batch_size,
                                   args.lr, data_parallel=args.data_parallel)
    test_acc = history[-1][2]
    info = jitgraph.cache_info()
    if main_rank:
        print_summary(args, epochs, history, total, info)

    threshold = 0.5 if args.smoke else 0.95
    assert test_acc >= threshold, f"test accuracy {test_acc:.4f} is below {threshold}"
    # one compile per jitted function (the data-parallel step is two: gradients, update):
    # fixed batch and chunk shapes never recompile
    expected = 3 if args.data_parallel else 2
    assert info["misses"] == expected, f"expected {expected} compiles, got {info['misses']}"
    return 0


if __name__ == "__main__":
    sys.exit(main())
