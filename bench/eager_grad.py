"""Eager gradients: HIPS autograd's small example programs, un-jitted, autograd vs jitgraph.

Each program is written once against a library's NumPy module and gradient operators
(``autograd.numpy`` + ``autograd.grad``, ``jitgraph.numpy`` + ``jitgraph.grad``), as a
new user would port autograd's examples, and runs without ``jit``: every call traces,
differentiates and evaluates again, as autograd's tape does. Both libraries get the same
inputs; the first results are compared (``check``). The programs follow autograd's
``examples/``: logistic regression (100 gradient steps), Rosenbrock minimised with
scipy (CG with value_and_grad; Newton-CG with a Hessian-vector product), sin as a Taylor
series with first and second derivatives at 20 points (Python control flow on values),
a sinusoid fit with a 1-10-10-1 tanh net, tanh's first six elementwise derivatives on
200 points, and a logsumexp with a custom VJP.

Samples alternate between the libraries (one of each, again and again), so a change in the
machine's load hits both alike; ``--cpu-time`` times with the thread's CPU time instead of the
wall clock, which leaves out the time other processes hold the CPU (on a busy, shared machine).

    python bench/eager_grad.py [--quick] [--cpu-time] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys
import time

import numpy as np

from common import (ResultTable, check_close, guarded, import_error, import_jitgraph,
                    print_kv, sample_host, _try_import)


class Lib:
    """One library's spelling of the operators the programs use."""

    def __init__(self, name: str, np_mod, grad, value_and_grad, egrad, hvp, custom_logsumexp):
        self.name, self.np, self.grad, self.value_and_grad = name, np_mod, grad, value_and_grad
        self.egrad, self.hvp, self.custom_logsumexp = egrad, hvp, custom_logsumexp


def autograd_lib() -> Lib:
    ag = _try_import("autograd")
    if ag is None:
        raise RuntimeError(f"n/a ({import_error('autograd')}; pip install autograd)")
    import autograd.numpy as anp
    from autograd import elementwise_grad, hessian_vector_product
    from autograd.extend import defvjp, primitive

    @primitive
    def logsumexp(x):
        max_x = anp.max(x)
        return max_x + anp.log(anp.sum(anp.exp(x - max_x)))

    defvjp(logsumexp, lambda ans, x: lambda g: anp.full(x.shape, g) * anp.exp(
        x - anp.full(x.shape, ans)))
    return Lib("autograd", anp, ag.grad, ag.value_and_grad, elementwise_grad,
               hessian_vector_product, logsumexp)


def jitgraph_lib() -> Lib:
    jg = import_jitgraph()
    if jg is None:
        raise RuntimeError(import_error("jitgraph"))
    jnp = jg.numpy

    def egrad(f):
        return jg.grad(lambda x: jnp.sum(f(x)))

    def hvp(f):
        return jg.grad(lambda x, v: jnp.dot(jg.grad(f)(x), v))

    @jg.custom_vjp
    def logsumexp(x):
        max_x = jnp.max(x)
        return max_x + jnp.log(jnp.sum(jnp.exp(x - max_x)))

    def fwd(x):
        ans = logsumexp(x)
        return ans, (x, ans)

    def bwd(res, g):
        x, ans = res
        return (jnp.full(x.shape, g) * jnp.exp(x - jnp.full(x.shape, ans)),)

    logsumexp.defvjp(fwd, bwd)
    return Lib("jitgraph", jnp, jg.grad, jg.value_and_grad, egrad, hvp, logsumexp)


# ------------------------------------------------------------------ the programs
# Each returns a zero-argument callable (the timed work) for one library; calling it
# returns the numbers that are compared between libraries.

def logistic_regression(lib: Lib, steps: int = 100):
    """autograd's examples/logistic_regression.py: 100 steps of gradient descent."""
    np_ = lib.np
    inputs = np.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15],
                       [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]])
    targets = np.array([True, True, False, True])

    def sigmoid(x):
        return 0.5 * (np_.tanh(x / 2.) + 1)

    def logistic_predictions(weights, inputs):
        return sigmoid(np_.dot(inputs, weights))

    def training_loss(weights):
        preds = logistic_predictions(weights, inputs)
        label_probabilities = preds * targets + (1 - preds) * (1 - targets)
        return -np_.sum(np_.log(label_probabilities))

    training_gradient_fun = lib.grad(training_loss)

    def run():
        weights = np.array([0.0, 0.0, 0.0])
        for _ in range(steps):
            weights = weights - training_gradient_fun(weights) * 0.01
        return weights
    return run


def _rosenbrock(np_):
    def rosenbrock(x):
        return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    return rosenbrock


def rosenbrock_cg(lib: Lib):
    """autograd's examples/rosenbrock.py: scipy's CG with value_and_grad."""
    from scipy.optimize import minimize
    f = lib.value_and_grad(_rosenbrock(lib.np))

    def run():
        r = minimize(f, x0=np.array([0.0, 0.0]), jac=True, method="CG")
        return np.append(r.x, r.nfev)
    return run


def rosenbrock_newton_hvp(lib: Lib):
    """The same minimum by Newton-CG, with Hessian-vector products (grad of grad . v)."""
    from scipy.optimize import minimize
    rosen = _rosenbrock(lib.np)
    f, hvp = lib.value_and_grad(rosen), lib.hvp(rosen)

    def run():
        r = minimize(f, x0=np.array([-1.2, 1.0]), jac=True, hessp=hvp, method="Newton-CG")
        return np.append(r.x, [r.nfev, r.nhev])
    return run


def sin_taylor(lib: Lib, points: int = 20):
    """autograd's examples/sinusoid.py: sin as a Taylor series that stops on a value test,
    its first and second derivatives at each point (scalar calls)."""
    np_ = lib.np

    def fun(x):
        currterm = x
        ans = currterm
        for i in range(1000):
            currterm = -currterm * x ** 2 / ((2 * i + 3) * (2 * i + 2))
            ans = ans + currterm
            if np_.abs(currterm) < 0.2:
                break
        return ans
    d_fun = lib.grad(fun)
    dd_fun = lib.grad(d_fun)
    xs = np.linspace(-np.pi, np.pi, points)

    def run():
        return np.array([[float(d_fun(x)), float(dd_fun(x))] for x in xs])
    return run


def sinusoid_fit(lib: Lib):
    """A 1-10-10-1 tanh net fit to noisy sin samples (autograd's neural_net_regression.py
    style): the gradient of the log posterior with respect to a list of (W, b)."""
    np_ = lib.np
    rng = np.random.default_rng(0)
    x = np.linspace(-4, 4, 64).reshape(-1, 1)
    y = np.sin(x) + 0.1 * rng.standard_normal(x.shape)
    sizes = (1, 10, 10, 1)
    params = [(0.5 * rng.standard_normal((m, n)), 0.5 * rng.standard_normal(n))
              for m, n in zip(sizes[:-1], sizes[1:])]

    def predict(params, inputs):
        for W, b in params:
            outputs = np_.dot(inputs, W) + b
            inputs = np_.tanh(outputs)
        return outputs

    def log_posterior(params):
        prior = -0.1 * sum(np_.sum(W ** 2) + np_.sum(b ** 2) for W, b in params)
        return prior - np_.sum((predict(params, x) - y) ** 2) / 0.01

    g = lib.grad(log_posterior)

    def run():
        grads = g(params)
        return np.concatenate([np.ravel(a) for W_b in grads for a in W_b])
    return run


def tanh_derivatives(lib: Lib, order: int = 6):
    """autograd's examples/tanh.py: tanh and its first six elementwise derivatives."""
    np_ = lib.np

    def tanh(x):
        y = np_.exp(-2.0 * x)
        return (1.0 - y) / (1.0 + y)
    fs, f = [], tanh
    for _ in range(order):
        f = lib.egrad(f)
        fs.append(f)
    x = np.linspace(-5, 5, 200)   # (near |x| = 7 the sixth derivative is all rounding error)

    def run():
        return np.stack([np.asarray(d(x)) for d in fs])
    return run


def custom_gradient(lib: Lib):
    """autograd's examples/define_gradient.py: logsumexp with its own VJP."""
    np_ = lib.np
    logsumexp = lib.custom_logsumexp

    def example_func(y):
        z = y ** 2
        lse = logsumexp(z)
        return np_.sum(lse)
    g = lib.grad(example_func)
    y = np.random.default_rng(0).standard_normal(10)

    def run():
        return g(y)
    return run


PROGRAMS = [
    ("logistic regression (100 steps)", logistic_regression),
    ("rosenbrock CG (value_and_grad)", rosenbrock_cg),
    ("rosenbrock Newton-CG (hvp)", rosenbrock_newton_hvp),
    ("sin Taylor series (d, d2 at 20 pts)", sin_taylor),
    ("sinusoid fit, tanh net (grad)", sinusoid_fit),
    ("tanh derivatives (orders 1-6)", tanh_derivatives),
    ("custom VJP logsumexp (grad)", custom_gradient),
]


def interleaved(fns: dict, *, warmup: int, max_time: float, repeats: int, min_repeats: int,
                clock) -> dict:
    """Per-call ``Timing`` of each callable, sampled in turns (one sample of each, again and
    again), so a change in the machine's load hits every library alike. A sample times
    enough back-to-back calls to last about 2 ms."""
    number = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        t0 = clock()
        fn()
        number[name] = max(1, int(0.002 / max(clock() - t0, 1e-6)))
    samples = {name: [] for name in fns}
    probe = common._LoadProbe()
    end = time.perf_counter() + max_time
    while True:
        for name, fn in fns.items():
            samples[name] += sample_host(fn, 1, number[name], clock=clock)
        k = len(samples[name])
        if k >= repeats or (k >= min_repeats and time.perf_counter() > end):
            break
    load = probe.stop()
    out = {}
    for name in fns:
        out[name] = common.Timing(samples[name], number[name])
        out[name].other_load = load
    return out


def run(args) -> dict:
    reps = dict(warmup=1 if args.quick else 3, repeats=5 if args.quick else 25,
                max_time=1.0 if args.quick else 4.0, min_repeats=3,
                clock=time.thread_time if args.cpu_time else time.perf_counter)
    libs = {}
    for name, make in (("autograd", autograd_lib), ("jitgraph", jitgraph_lib)):
        lib = guarded(name, make)
        if lib is not None:
            libs[name] = lib
    unit = "CPU ms" if args.cpu_time else "ms"
    tables, ratios = [], []
    for title, program in PROGRAMS:
        table = ResultTable(f"Eager: {title} ({unit} per run)", unit="ms")
        fns, results = {}, {}
        for name, lib in libs.items():
            fn = guarded(f"{name} {title}", program, lib)
            if fn is not None and guarded(f"{name} {title}", lambda: results.update({name: fn()})
                                          or True):
                fns[name] = fn
        timings = interleaved(fns, **reps) if fns else {}
        for name in ("autograd", "jitgraph"):
            if name not in timings:
                table.add_unavailable(name, "unavailable")
                continue
            note = ""
            if name == "jitgraph" and "autograd" in results:
                note = check_close(title, results["jitgraph"], results["autograd"],
                                   rtol=1e-6, atol=1e-9)
            table.add(name, timings[name], note)
        table.print()
        print()
        tables.append(table.as_dict())
        if len(timings) == 2:
            ratios.append((title, timings["jitgraph"].median / timings["autograd"].median))
    if ratios:
        geo = float(np.exp(np.mean(np.log([r for _, r in ratios]))))
        print_kv("jitgraph / autograd (median time ratio; <= 1: jitgraph as fast or faster)",
                 [(t, f"{r:.2f}") for t, r in ratios] + [("geometric mean", f"{geo:.2f}")])
        print()
    return {"tables": tables, "ratios": dict(ratios)}


def _extra_args(p) -> None:
    p.add_argument("--cpu-time", action="store_true",
                   help="time with this thread's CPU time instead of the wall clock (on a "
                        "shared, busy machine: leaves out the time other processes hold the CPU)")


def main(argv=None) -> dict:
    return common.run_main(__doc__, "Eager gradients vs autograd", "eager_grad", run, argv,
                           extra=_extra_args)


if __name__ == "__main__":
    main(sys.argv[1:])
