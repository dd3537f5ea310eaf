"""Trace time: build the gradient graph of the MLP loss (no compilation).

The loss is the autograd lecture's classifier: 3 layers 784-512-512-10, tanh, output
normalised with logsumexp (``neural_net_predict``), log-likelihood ``sum(logp * targets)``.
Timed: ``jitgraph.make_graph(jitgraph.grad(loss))(params, x, y)``; for context
``jax.make_jaxpr(jax.grad(loss))(params, x, y)`` (the equivalent JAX trace).

    python bench/trace_time.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, guarded, import_error, import_jax, import_jitgraph,
                    timeit)

DIMS = (784, 512, 512, 10)
BATCH = 128


def init_params(seed: int = 0):
    """List of (W, b) tuples, as in the lecture."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((m, n)) * 0.1).astype(np.float32),
             (rng.standard_normal(n) * 0.1).astype(np.float32))
            for m, n in zip(DIMS[:-1], DIMS[1:])]


def make_data(seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, DIMS[0])).astype(np.float32)
    y = np.eye(DIMS[-1], dtype=np.float32)[rng.integers(0, DIMS[-1], BATCH)]
    return x, y


def _find_logsumexp(lib):
    """lib.scipy.special.logsumexp if the library has it, else None."""
    try:
        import importlib
        return importlib.import_module(lib.__name__ + ".scipy.special").logsumexp
    except Exception:
        return None


def make_loss(lib):
    """Returns (loss, which logsumexp was used)."""
    jnp = lib.numpy
    logsumexp = _find_logsumexp(lib)
    how = f"{lib.__name__}.scipy.special.logsumexp"
    if logsumexp is None:
        how = "logsumexp written with max/exp/log/sum"

        def logsumexp(x, axis=None, keepdims=False):
            m = jnp.max(x, axis=axis, keepdims=True)
            out = m + jnp.log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True))
            return out if keepdims else jnp.squeeze(out, axis=axis)

    def neural_net_predict(params, inputs):
        """params: list of (weights, bias) tuples; inputs: (N x D).
        Returns normalised class log-probabilities."""
        for W, b in params:
            outputs = jnp.dot(inputs, W) + b
            inputs = jnp.tanh(outputs)
        return outputs - logsumexp(outputs, axis=1, keepdims=True)

    def loss(params, inputs, targets):
        return -jnp.sum(neural_net_predict(params, inputs) * targets)

    return loss, how


def run(args) -> dict:
    params = init_params()
    x, y = make_data()
    table = ResultTable("Trace time: gradient graph of the 784-512-512-10 tanh MLP loss "
                        "(ms/trace)", unit="ms", extra_cols=("nodes",))
    reps = dict(warmup=2 if args.quick else 5, repeats=10 if args.quick else 50,
                max_time=3.0 if args.quick else 8.0, min_repeats=5)

    def jitgraph_row():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        loss, how = make_loss(jg)
        trace = lambda: jg.make_graph(jg.grad(loss))(params, x, y)  # noqa: E731
        graph = trace()
        nodes = getattr(graph, "nodes", None)
        n_nodes = len(nodes) if nodes is not None else "?"
        t = timeit(trace, sync=lambda g: g, **reps)
        table.add("jitgraph.make_graph(grad)", t, how, nodes=n_nodes)
    guarded("jitgraph", jitgraph_row)
    if not any(r["name"].startswith("jitgraph") for r in table.rows):
        table.add_unavailable("jitgraph.make_graph(grad)", "unavailable")

    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.make_jaxpr(grad)", f"n/a ({import_error('jax')})")
    else:
        def jax_row():
            loss, how = make_loss(jax)
            trace = lambda: jax.make_jaxpr(jax.grad(loss))(params, x, y)  # noqa: E731
            closed = trace()
            n_eqns = len(closed.jaxpr.eqns)
            t = timeit(trace, sync=lambda g: g, **reps)
            table.add("jax.make_jaxpr(grad)", t, f"for context; {how}", nodes=n_eqns)
        guarded("jax.make_jaxpr", jax_row)

    table.print()
    print()
    return {"table": table.as_dict()}


def main(argv=None) -> dict:
    return common.run_main(__doc__, "Trace time", "trace_time", run, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
