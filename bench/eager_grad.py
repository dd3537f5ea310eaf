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
200 points, a logsumexp with a custom VJP, and a 10-component Gaussian mixture on 300
two-dimensional points fit by scipy's Newton-CG with ``grad`` and ``hessian_vector_product``
(``examples/gmm.py``: ``scipy.special.logsumexp`` and ``scipy.stats.multivariate_normal``).

Samples alternate between the libraries (one of each, again and again), so a change in the
machine's load hits both alike; ``--cpu-time`` times with the thread's CPU time instead of the
wall clock, which leaves out the time other processes hold the CPU (on a busy, shared machine).
``--busy N`` runs N spinning processes meanwhile (each holds a CPU): the loaded machine of
the issue, made on purpose.

    python bench/eager_grad.py [--quick] [--cpu-time] [--busy N] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys
import time

import numpy as np

from common import (ResultTable, spinning, check_close, guarded, import_error, import_jitgraph,
                    print_kv, sample_host, _try_import)


class Lib:
    """One library's spelling of the operators the programs use."""

    def __init__(self, name: str, np_mod, grad, value_and_grad, egrad, hvp, custom_logsumexp,
                 logsumexp, mvn_logpdf):
        self.name, self.np, self.grad, self.value_and_grad = name, np_mod, grad, value_and_grad
        self.egrad, self.hvp, self.custom_logsumexp = egrad, hvp, custom_logsumexp
        self.logsumexp, self.mvn_logpdf = logsumexp, mvn_logpdf   # scipy.special, scipy.stats


def autograd_lib() -> Lib:
    ag = _try_import("autograd")
    if ag is None:
        raise RuntimeError(f"n/a ({import_error('autograd')}; pip install autograd)")
    import autograd.numpy as anp
    from autograd import elementwise_grad, hessian_vector_product
    from autograd.extend import defvjp, primitive
    from autograd.scipy.special import logsumexp as scipy_logsumexp
    from autograd.scipy.stats import multivariate_normal

    @primitive
    def logsumexp(x):
        max_x = anp.max(x)
        return max_x + anp.log(anp.sum(anp.exp(x - max_x)))

    defvjp(logsumexp, lambda ans, x: lambda g: anp.full(x.shape, g) * anp.exp(
        x - anp.full(x.shape, ans)))
    return Lib("autograd", anp, ag.grad, ag.value_and_grad, elementwise_grad,
               hessian_vector_product, logsumexp, scipy_logsumexp, multivariate_normal.logpdf)


def jitgraph_lib() -> Lib:
    jg = import_jitgraph()
    if jg is None:
        raise RuntimeError(import_error("jitgraph"))
    jnp = jg.numpy
    from jitgraph.scipy.special import logsumexp as scipy_logsumexp
    from jitgraph.scipy.stats import multivariate_normal

    def egrad(f):
        return jg.grad(lambda x: jnp.sum(f(x)))

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

    def hvp(f):   # what jitgraph.hessian_vector_product computes (older versions lack it)
        return jg.grad(lambda x, v: jnp.dot(jg.grad(f)(x), v))

    logsumexp.defvjp(fwd, bwd)
    return Lib("jitgraph", jnp, jg.grad, jg.value_and_grad, egrad,
               getattr(jg, "hessian_vector_product", hvp), logsumexp, scipy_logsumexp,
               multivariate_normal.logpdf)


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


def _pinwheel(radial_std, tangential_std, num_classes, num_per_class, rate, rs):
    """autograd's examples/data.py make_pinwheel (NumPy)."""
    rads = np.linspace(0, 2 * np.pi, num_classes, endpoint=False)
    features = rs.randn(num_classes * num_per_class, 2) * np.array([radial_std, tangential_std])
    features[:, 0] += 1
    labels = np.repeat(np.arange(num_classes), num_per_class)
    angles = rads[labels] + rate * np.exp(features[:, 0])
    rotations = np.stack([np.cos(angles), -np.sin(angles), np.sin(angles), np.cos(angles)])
    rotations = np.reshape(rotations.T, (-1, 2, 2))
    return np.einsum("ti,tij->tj", features, rotations)


GMM_ITERATIONS = 20   # the full fit takes ~100 Newton steps (30 s); its trajectory is chaotic:
# rounding differences of 1e-16 between the libraries grow 10x every ~3 steps (1e-10 after 20)


def gmm_newton_cg(lib: Lib, iterations: int = GMM_ITERATIONS):
    """autograd's examples/gmm.py: a 10-component Gaussian mixture (log proportions, means,
    covariance square roots, flattened) fit to 300 pinwheel points by scipy's Newton-CG with
    ``grad`` and ``hessian_vector_product``, for ``iterations`` Newton steps. The gradient and
    the Hessian-vector product at the start are compared to 1e-12 (``checks``)."""
    from scipy.optimize import minimize
    np_ = lib.np
    rs = np.random.RandomState(0)
    k, d = 10, 2
    init = {"log proportions": rs.randn(k) * 0.1, "means": rs.randn(k, d) * 0.1,
            "lower triangles": np.zeros((k, d, d)) + np.eye(d)}
    data = _pinwheel(0.3, 0.05, 3, 100, 0.4, np.random.RandomState(0))
    ends = np.cumsum([0] + [a.size for a in init.values()])

    def unflatten(flat):
        return {name: np_.reshape(flat[a:b], value.shape)
                for (name, value), a, b in zip(init.items(), ends[:-1], ends[1:])}

    def gmm_log_likelihood(params, data):
        log_proportions = params["log proportions"] - lib.logsumexp(params["log proportions"])
        cluster_lls = []
        for log_proportion, mean, cov_sqrt in zip(log_proportions, params["means"],
                                                  params["lower triangles"]):
            cov = np_.dot(cov_sqrt.T, cov_sqrt)
            cluster_lls.append(log_proportion + lib.mvn_logpdf(data, mean, cov))
        return np_.sum(lib.logsumexp(np_.vstack(cluster_lls), axis=0))

    def objective(flat):
        return -gmm_log_likelihood(unflatten(flat), data)

    x0 = np.concatenate([np.ravel(a) for a in init.values()])
    jac, hessp = lib.grad(objective), lib.hvp(objective)

    def run():
        r = minimize(objective, x0, jac=jac, hessp=hessp, method="Newton-CG",
                     options={"maxiter": iterations})
        return np.concatenate([[r.fun], r.x, [r.nfev, r.njev, r.nhev]])
    v = np.random.RandomState(1).randn(x0.size)
    run.checks = {"gradient at x0": (jac(x0), 1e-12), "hvp at x0": (hessp(x0, v), 1e-12)}
    return run


PROGRAMS = [
    ("logistic regression (100 steps)", logistic_regression),
    ("rosenbrock CG (value_and_grad)", rosenbrock_cg),
    ("rosenbrock Newton-CG (hvp)", rosenbrock_newton_hvp),
    ("sin Taylor series (d, d2 at 20 pts)", sin_taylor),
    ("sinusoid fit, tanh net (grad)", sinusoid_fit),
    ("tanh derivatives (orders 1-6)", tanh_derivatives),
    ("custom VJP logsumexp (grad)", custom_gradient),
    (f"GMM Newton-CG, 10 x 300 pts ({GMM_ITERATIONS} steps)", gmm_newton_cg),
]
# seconds a run: the first call and the sizing call warm it up, each sample is one run
LONG_PROGRAMS = {gmm_newton_cg: dict(warmup=0, repeats=7, max_time=20.0)}


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


def _compare(title: str, fn_results: dict, checks: dict) -> str:
    """``check`` column of jitgraph's row: its results against autograd's (1e-6), and each of
    a program's ``checks`` (name -> (value, rtol)) against autograd's, relative to the
    largest entry."""
    note = check_close(title, fn_results["jitgraph"], fn_results["autograd"], rtol=1e-6,
                       atol=1e-9)
    for name, (got, rtol) in checks.get("jitgraph", {}).items():
        want = checks.get("autograd", {}).get(name)
        if want is not None:
            scale = float(np.max(np.abs(want[0])))      # relative to the largest entry
            c = check_close(name, got, want[0], rtol=0.0, atol=rtol * scale)
            note += f"; {name} {c}" + ("" if c != "ok" else f" (rtol {rtol:g})")
    return note


def _measure(title: str, program, libs: dict, opts: dict, unit: str):
    """One program's table, timed in turns across the libraries, and jitgraph's time ratio
    to autograd's (None without both)."""
    table = ResultTable(f"Eager: {title} ({unit} per run)", unit="ms")
    fns, results, checks = {}, {}, {}
    for name, lib in libs.items():
        fn = guarded(f"{name} {title}", program, lib)
        if fn is not None and guarded(f"{name} {title}",
                                      lambda: results.update({name: fn()}) or True):
            fns[name] = fn
            checks[name] = getattr(fn, "checks", {})
    timings = interleaved(fns, **opts) if fns else {}
    for name in ("autograd", "jitgraph"):
        if name not in timings:
            table.add_unavailable(name, "unavailable")
            continue
        note = _compare(title, results, checks) if name == "jitgraph" and "autograd" in results \
            else ""
        table.add(name, timings[name], note)
    table.print()
    print()
    ratio = timings["jitgraph"].median / timings["autograd"].median if len(timings) == 2 \
        else None
    return table, ratio


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
    if args.busy:
        print(f"{args.busy} spinning process(es) run meanwhile (--busy)\n")
    tables, ratios = [], []
    programs = [(t, p) for t, p in PROGRAMS if not args.only or args.only.lower() in t.lower()]
    with spinning(args.busy):
        for title, program in programs:
            opts = {**reps, **LONG_PROGRAMS.get(program, {})}
            if args.quick:
                opts.update(repeats=min(opts["repeats"], 5), max_time=min(opts["max_time"], 1.0))
            table, ratio = _measure(title, program, libs, opts, unit)
            tables.append(table.as_dict())
            if ratio is not None:
                ratios.append((title, ratio))
    if ratios:
        geo = float(np.exp(np.mean(np.log([r for _, r in ratios]))))
        print_kv("jitgraph / autograd (median time ratio; <= 1: jitgraph as fast or faster)",
                 [(t, f"{r:.2f}") for t, r in ratios] + [("geometric mean", f"{geo:.2f}")])
        print()
    return {"tables": tables, "ratios": dict(ratios), "busy": args.busy}


def _extra_args(p) -> None:
    p.add_argument("--cpu-time", action="store_true",
                   help="time with this thread's CPU time instead of the wall clock (on a "
                        "shared, busy machine: leaves out the time other processes hold the CPU)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="run N processes that spin on a CPU each while timing (a busy machine)")
    p.add_argument("--only", metavar="TEXT", default="",
                   help="run only the programs whose title contains TEXT (e.g. GMM)")


def main(argv=None) -> dict:
    return common.run_main(__doc__, "Eager gradients vs autograd", "eager_grad", run, argv,
                           extra=_extra_args)


if __name__ == "__main__":
    main(sys.argv[1:])
