"""Run under ``mpiexec -n N`` by tests/test_distributed.py (also importable for its reference).

``digits DATA.npz OUT.npz``: a few data-parallel training steps of a small MLP with Adam on the
digits in DATA.npz (written by ``save_digits``; the ranks need not import scikit-learn),
each rank on its shard of the same global batches; rank 0 writes the parameters once
(``distributed.save``), every rank loads them back and checks they equal its own.
``fail RANK``: rank RANK raises in the middle of a training loop while the others wait in a
collective; ``kill RANK``: rank RANK kills itself with SIGKILL there.
"""
from __future__ import annotations

import os
import signal
import sys

import numpy as np

STEPS, GLOBAL_BATCH, SEED = 4, 64, 0


def save_digits(path: str) -> None:
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = ((X - X.mean(0)) / (X.std(0) + 1.0)).astype(np.float32)
    np.savez(path, X=X, y=y.astype(np.int64))


def setup(data: str):
    """Data, model, optimizer and loss, identical on every rank."""
    import jitgraph.nn as nn
    import jitgraph.optim as optim
    import jitgraph.random as jr
    with np.load(data) as z:
        X, y = z["X"], z["y"]
    model = nn.MLP([64, 32, 10], key=jr.key(SEED), activation=nn.relu)
    opt = optim.adam(1e-2)

    def loss_fn(model, x, labels):
        return nn.cross_entropy(model(x), labels)
    return X, y, model, opt, loss_fn


def train(data: str, distributed: bool, global_batch: int = GLOBAL_BATCH):
    """(params, state, losses) after STEPS steps on global batches of ``global_batch``."""
    import jitgraph
    import jitgraph.distributed as dist
    X, y, model, opt, loss_fn = setup(data)
    step = jitgraph.train_step(loss_fn, opt, distributed=distributed)
    state = opt.init(model)
    losses = []
    batches = dist.global_batches(len(X), global_batch, seed=SEED)
    for _, idx in zip(range(STEPS), batches):
        if distributed:
            idx = dist.shard(idx)
        model, state, loss = step(model, state, X[idx], y[idx])
        losses.append(float(loss))
    return model, state, losses


def check_collectives() -> None:
    """allreduce and broadcast of rank-dependent trees, small buckets so leaves share them."""
    import jitgraph.distributed as dist
    r, n = dist.rank(), dist.world_size()
    tree = {"a": np.full((3, 2), r + 1.0), "b": [np.arange(5) * (r + 1)],
            "c": np.full(7, r + 1.0, np.float32)}
    total = n * (n + 1) // 2
    s = dist.allreduce(tree, op="sum", bucket_bytes=16)
    assert np.all(s["a"] == total) and np.array_equal(s["b"][0], np.arange(5) * total)
    m = dist.allreduce({"a": tree["a"], "c": tree["c"]}, bucket_bytes=24)
    assert np.all(m["a"] == (n + 1) / 2) and m["c"].dtype == np.float32
    dist.allreduce(tree, op="sum", inplace=True, bucket_bytes=1 << 20)
    assert np.all(tree["c"] == total) and np.array_equal(tree["b"][0], np.arange(5) * total)
    b = dist.broadcast({"x": np.full(4, float(r)), "y": [np.int64(r)]}, root=n - 1)
    assert np.all(b["x"] == n - 1) and b["y"][0] == n - 1


def main(argv: list[str]) -> int:
    import jitgraph
    import jitgraph.distributed as dist
    mode = argv[0]
    if mode == "digits":
        model, state, losses = train(argv[1], distributed=True)
        dist.save(argv[2], (model, losses))
        back, _ = dist.load(argv[2], like=(model, losses))
        for a, b in zip(jitgraph.tree_leaves(back), jitgraph.tree_leaves(model)):
            assert np.array_equal(a, b), f"rank {dist.rank()}: parameters differ from rank 0's"
        check_collectives()
        if dist.is_main():
            print(f"ok {dist.world_size()} ranks, losses {losses}")
        return 0
    bad = int(argv[1])
    dist.init()
    x = {"w": np.ones(1000, np.float32)}
    for i in range(1000):
        if i == 3 and dist.rank() == bad:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"deliberate failure on rank {bad}")
        x = dist.allreduce(x)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
