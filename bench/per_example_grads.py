"""Per-example gradients of the W1 MLP: ``jit(vmap(grad(loss), in_axes=(None, 0, 0)))``.

MLP 784-512-512-10, tanh, softmax cross-entropy, float32, batch 128: the gradient of each
example's loss with respect to every parameter, materialised (128 copies of the ~665k
parameters, 340 MB). Rows: jitgraph.jit(jitgraph.vmap(jitgraph.grad)), jax.jit(jax.vmap(
jax.grad)) of the same source, and NumPy with hand-written per-example backward (einsum outer
products); then each library's batched gradient jit(grad(mean loss)) over the same batch, whose
ratio to the per-example row is the cost of materialising per-example gradients. The check
column compares against a float64 NumPy reference.

    python bench/per_example_grads.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, check_close, first_call_seconds, guarded, import_error,
                    import_jax, import_jitgraph, print_kv, timeit)
from w1_mlp_train_step import BATCH, DIMS, init_params, make_data, make_loss


def make_example_loss(jnp):
    """One example's loss (x (784,), y (10,) one-hot): W1's batch loss on a batch of one."""
    batch_loss = make_loss(jnp)
    return lambda params, x, y: batch_loss(params, x[None], y[None])


def numpy_per_example(params, x, y):
    """Manual backward for every example at once: weight gradients as outer products."""
    W1, b1, W2, b2, W3, b3 = params
    h1 = np.tanh(x @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    z = h2 @ W3 + b3
    e = np.exp(z - z.max(axis=1, keepdims=True))
    dz = e / e.sum(axis=1, keepdims=True) * y.sum(axis=1, keepdims=True) - y
    dh2 = (dz @ W3.T) * (1.0 - h2 * h2)
    dh1 = (dh2 @ W2.T) * (1.0 - h1 * h1)
    outer = lambda a, g: np.einsum("bi,bj->bij", a, g)   # noqa: E731
    return [outer(x, dh1), dh1, outer(h1, dh2), dh2, outer(h2, dz), dz]


def per_example_step(lib):
    return lib.jit(lib.vmap(lib.grad(make_example_loss(lib.numpy)), in_axes=(None, 0, 0)))


def batched_step(lib):
    return lib.jit(lib.grad(make_loss(lib.numpy)))


def measure(name, fn, args, want, table, quick, firsts):
    firsts[name] = first_call_seconds(lambda: fn(*args))
    got = fn(*args)
    checks = [check_close(name, g, w) for g, w in zip(got, want)]
    bad = [c for c in checks if c != "ok"]
    t = timeit(lambda: fn(*args), warmup=1 if quick else 3, repeats=5 if quick else 30,
               max_time=3.0 if quick else 15.0)
    table.add(name, t, check="ok" if not bad else bad[0])
    return t


def run(args) -> dict:
    params = init_params()
    x, y = make_data()
    p64 = [p.astype(np.float64) for p in params]
    want_pe = numpy_per_example(p64, x.astype(np.float64), y.astype(np.float64))
    want_mean = [g.mean(axis=0) for g in want_pe]
    table = ResultTable(f"Per-example gradients, MLP {'-'.join(map(str, DIMS))} tanh, batch "
                        f"{BATCH}, float32 (ms/call)", unit="ms", extra_cols=("check",))
    firsts: dict[str, float] = {}
    times: dict[str, float] = {}

    def add(name, make, lib, conv, want):
        fn = make(lib)
        a = ([conv(p) for p in params], conv(x), conv(y))
        times[name] = measure(name, fn, a, want, table, args.quick, firsts).median

    jg = import_jitgraph()
    if jg is None:
        table.add_unavailable("jitgraph per-example", import_error("jitgraph"))
    else:
        guarded("jitgraph per-example", add, "jitgraph.jit(vmap(grad))", per_example_step, jg,
                lambda a: a, want_pe)
    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.jit(vmap(grad))", f"n/a ({import_error('jax')})")
    else:
        guarded("jax per-example", add, "jax.jit(vmap(grad))", per_example_step, jax,
                jax.numpy.asarray, want_pe)

    def numpy_bench():
        a = (params, x, y)
        times["numpy (manual, einsum)"] = measure("numpy (manual, einsum)", numpy_per_example,
                                                  a, want_pe, table, args.quick, {}).median
    guarded("numpy", numpy_bench)
    if jg is not None:
        guarded("jitgraph batched", add, "jitgraph.jit(grad(mean)) [batched]", batched_step, jg,
                lambda a: a, want_mean)
    if jax is not None:
        guarded("jax batched", add, "jax.jit(grad(mean)) [batched]", batched_step, jax,
                jax.numpy.asarray, want_mean)
    table.print()
    print()
    rows = []
    for lib, pe, bt in (("jitgraph", "jitgraph.jit(vmap(grad))", "jitgraph.jit(grad(mean)) [batched]"),
                        ("jax", "jax.jit(vmap(grad))", "jax.jit(grad(mean)) [batched]")):
        if pe in times and bt in times:
            rows.append((lib, f"per-example / batched gradient = {times[pe] / times[bt]:.2f}x"))
    print_kv("Cost of materialising per-example gradients (same library, same run)", rows)
    print()
    print_kv("First call (trace + compile + run, fresh caches, in-process)",
             [(k, f"{v:.3f} s") for k, v in firsts.items()])
    print()
    return {"table": table.as_dict(), "first_call_s": firsts}


def main(argv=None) -> dict:
    return common.run_main(__doc__, "per-example gradients", "per_example_grads", run,
                           sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
