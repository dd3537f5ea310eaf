"""A tour of automatic differentiation with jitgraph: the lecture's worked examples.

    python examples/autodiff_tour.py

Every number is checked against its closed form (the script exits with an AssertionError if
one is off), and the graphs that autodiff builds are printed along the way. Runs in a few
seconds, no compilation involved: the transforms run on the reference interpreter.
"""
from __future__ import annotations

import math
import time

import numpy as np

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import check_grads, grad, hessian, jvp, make_graph, vjp
from jitgraph.scipy.special import logsumexp
from example_utils import done


def section(title: str) -> None:
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def close(got, want, rtol: float = 1e-12, what: str = "") -> None:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert np.allclose(got, want, rtol=rtol, atol=1e-12), f"{what}: got {got}, want {want}"


def show(name: str, got, want) -> None:
    close(got, want, what=name)
    print(f"  {name:<22} = {float(got):12.8f}   (closed form {float(want):12.8f})  ok")


# --------------------------------------------------------------------------------------------
# (a) y = ln(x1) + x1*x2 - sin(x2) at (x1, x2) = (2, 5)
# --------------------------------------------------------------------------------------------
def y_fn(x1, x2):
    return jnp.log(x1) + x1 * x2 - jnp.sin(x2)


def example_a() -> dict:
    section("(a) y = ln(x1) + x1*x2 - sin(x2)   at (x1, x2) = (2, 5)")
    x1, x2 = 2.0, 5.0

    print("\nThe traced expression graph, make_graph(f)(2.0, 5.0):")
    print(make_graph(y_fn)(x1, x2))

    y = y_fn(x1, x2)
    show("y", y, math.log(x1) + x1 * x2 - math.sin(x2))

    # Forward mode: one pass per input direction, the tangent rides along with the value.
    print("\nForward mode (jvp), seed (dx1, dx2) = (1, 0):")
    y_val, dy_dx1 = jvp(y_fn, (x1, x2), (1.0, 0.0))
    show("dy/dx1 (forward)", dy_dx1, 1.0 / x1 + x2)        # 0.5 + 5 = 5.5
    assert float(dy_dx1) == 5.5
    print("  the forward-mode graph, make_graph(lambda x1, x2: jvp(f, ..., (1, 0))):")
    print(make_graph(lambda a, b: jvp(y_fn, (a, b), (1.0, 0.0)))(x1, x2))

    # Reverse mode: ONE backward pass gives both partials.
    print("\nReverse mode, grad(f, argnums=(0, 1)) -- both partials in one backward pass:")
    d1, d2 = grad(y_fn, argnums=(0, 1))(x1, x2)
    show("dy/dx1 (reverse)", d1, 1.0 / x1 + x2)
    show("dy/dx2 (reverse)", d2, x1 - math.cos(x2))          # 2 - cos 5 = 1.7163...
    assert float(d1) == 5.5
    # vjp makes the single pass explicit: one cotangent in, one cotangent per input out.
    _, f_vjp = vjp(y_fn, x1, x2)
    v1, v2 = f_vjp(1.0)
    close((v1, v2), (d1, d2), what="vjp")

    print("\nThe gradient graph, make_graph(grad(f, argnums=(0, 1)))(2.0, 5.0)")
    print("(autodiff expands the graph; the passes then drop what the gradient does not need):")
    gg = make_graph(grad(y_fn, argnums=(0, 1)))(x1, x2)
    print(gg)
    out = jitgraph.interpret(gg, [np.array(x1), np.array(x2)])
    close(out, (5.5, x1 - math.cos(x2)), what="interpreted gradient graph")
    print(f"\n  dy/dx1 = {float(d1)}   dy/dx2 = 2 - cos 5 = {float(d2):.6f}")
    return {"dy_dx1": float(d1), "dy_dx2": float(d2)}


# --------------------------------------------------------------------------------------------
# (b) x3 = x1 w1, x4 = x2 w2, x5 = x3 + x4, x6 = exp(x5), x7 = x1 + x6
# --------------------------------------------------------------------------------------------
def x7_fn(x1, x2, w1, w2):
    x3 = x1 * w1
    x4 = x2 * w2
    x5 = x3 + x4
    x6 = jnp.exp(x5)
    x7 = x1 + x6
    return x7


def example_b() -> dict:
    section("(b) x7 = x1 + exp(x1*w1 + x2*w2)   at x1=3, x2=0.5, w1=1.5, w2=2.0")
    x1, x2, w1, w2 = 3.0, 0.5, 1.5, 2.0
    print("\nThe graph:")
    print(make_graph(x7_fn)(x1, x2, w1, w2))

    e = math.exp(x1 * w1 + x2 * w2)                         # x6 = exp(5.5)
    want = {"dx7/dx1": 1.0 + w1 * e, "dx7/dx2": w2 * e, "dx7/dw1": x1 * e, "dx7/dw2": x2 * e}
    show("x7", x7_fn(x1, x2, w1, w2), x1 + e)

    print("\nReverse mode, all four partials from one backward pass:")
    grads = grad(x7_fn, argnums=(0, 1, 2, 3))(x1, x2, w1, w2)
    for (name, w), g in zip(want.items(), grads):
        show(name, g, w)

    print("\nForward mode needs one pass per input:")
    for k, (name, w) in enumerate(want.items()):
        seed = [0.0] * 4
        seed[k] = 1.0
        _, t = jvp(x7_fn, (x1, x2, w1, w2), tuple(seed))
        show(name + " (jvp)", t, w)
    return {k: float(g) for k, g in zip(want, grads)}


# --------------------------------------------------------------------------------------------
# (c) the lecture's neural network, higher-order derivatives
# --------------------------------------------------------------------------------------------
def init_random_params(scale, layer_sizes, rs):
    return [(scale * rs.standard_normal((m, n)), scale * rs.standard_normal(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    """Tanh layers; the last layer's outputs are normalised to log-probabilities."""
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    return sum(jnp.sum(W ** 2) + jnp.sum(b ** 2) for W, b in params)


def log_posterior(params, inputs, targets, L2_reg):
    log_prior = -L2_reg * l2_norm(params)
    log_lik = jnp.sum(neural_net_predict(params, inputs) * targets)
    return log_prior + log_lik


def example_c() -> dict:
    section("(c) the lecture's neural net, log posterior with an L2 prior")
    rs = np.random.default_rng(0)
    params = init_random_params(0.5, [4, 6, 3], rs)
    inputs = rs.standard_normal((8, 4))
    targets = np.eye(3)[rs.integers(0, 3, 8)]
    L2_reg = 0.1

    pred = neural_net_predict(params, inputs)
    close(np.exp(pred).sum(axis=1), np.ones(8), what="rows of exp(log-probabilities)")
    lp = float(log_posterior(params, inputs, targets, L2_reg))
    print(f"\n  log posterior = {lp:.6f}; each row of exp(neural_net_predict) sums to 1  ok")

    g = grad(log_posterior)(params, inputs, targets, L2_reg)
    # The output bias has a closed form: sum over rows of (targets - softmax) - 2 L2_reg b.
    probs = np.exp(np.asarray(pred))
    close(g[-1][1], np.sum(targets - probs, axis=0) - 2 * L2_reg * params[-1][1],
          what="output-bias gradient")
    print("  grad(log_posterior) has the params' structure:",
          [(gW.shape, gb.shape) for gW, gb in g])
    print("  output-bias gradient matches sum(targets - softmax) - 2*L2_reg*b  ok")

    # Derivatives up to order 2, both modes, against central differences.
    check_grads(lambda p: log_posterior(p, inputs, targets, L2_reg), (params,), order=2)
    print("  check_grads(log_posterior, order=2)  (forward and reverse vs finite differences)  ok")

    # A few steps of gradient ascent increase the log posterior.
    p = params
    for _ in range(10):
        gp = grad(log_posterior)(p, inputs, targets, L2_reg)
        p = [(W + 0.05 * gW, b + 0.05 * gb) for (W, b), (gW, gb) in zip(p, gp)]
    lp10 = float(log_posterior(p, inputs, targets, L2_reg))
    assert lp10 > lp, (lp10, lp)
    print(f"  10 steps of gradient ascent: {lp:.4f} -> {lp10:.4f}  ok")

    gg = make_graph(grad(log_posterior), static_argnums=3)(params, inputs, targets, L2_reg)
    ops = [n.prim.name for n in gg.nodes]
    print(f"  make_graph(grad(log_posterior)): {len(ops)} nodes, "
          f"{ops.count('matmul')} matmuls, {ops.count('tanh')} tanh")

    section("(c') higher-order derivatives")
    # Hessian of a quadratic form x^T A x is A + A^T, everywhere.
    A = rs.standard_normal((4, 4))
    x = rs.standard_normal(4)
    H = hessian(lambda v: jnp.dot(v, jnp.dot(A, v)))(x)
    close(H, A + A.T, what="Hessian of x^T A x")
    print("\n  hessian(x -> x^T A x) == A + A^T  ok")
    print("  " + np.array2string(np.asarray(H), precision=3, suppress_small=True)
          .replace("\n", "\n  "))

    # Repeated grad: d/dx sin = cos, d2 = -sin, d3 = -cos, d4 = sin.
    print("\n  grad applied repeatedly to sin, at x = 1:")
    d = jnp.sin
    want = [math.cos, lambda t: -math.sin(t), lambda t: -math.cos(t), math.sin]
    for k, w in enumerate(want, start=1):
        d = grad(d)
        show(f"grad^{k}(sin)(1)", d(1.0), w(1.0))
    g3 = grad(grad(grad(jnp.sin)))(1.0)
    assert float(g3) == -math.cos(1.0)

    # Forward-over-reverse and reverse-over-reverse agree.
    f = lambda v: jnp.sum(jnp.tanh(v) ** 3)                     # noqa: E731
    H_fr = hessian(f)(x)
    H_rr = jitgraph.jacrev(jitgraph.jacrev(f))(x)
    close(H_fr, H_rr, what="hessian fwd-over-rev vs rev-over-rev")
    t = np.tanh(x)
    close(np.diag(np.asarray(H_fr)), 6 * t * (1 - t**2) ** 2 - 6 * t**3 * (1 - t**2),
          what="diagonal Hessian of sum(tanh^3)")
    print("  hessian(sum(tanh(x)^3)): forward-over-reverse == reverse-over-reverse, "
          "diagonal matches closed form  ok")
    return {"log_posterior": lp, "hessian_ok": True}


def main() -> None:
    started = time.perf_counter()
    print("nothing here is compiled: every transform runs eagerly on the reference interpreter")
    a = example_a()
    b = example_b()
    c = example_c()
    section("summary")
    print(f"  (a) dy/dx1 = {a['dy_dx1']:.4f}, dy/dx2 = {a['dy_dx2']:.4f}")
    print("  (b) " + ", ".join(f"{k} = {v:.4f}" for k, v in b.items()))
    print(f"  (c) log posterior = {c['log_posterior']:.4f}; gradients, Hessians checked")
    print("\nall checks passed")
    done(started)


if __name__ == "__main__":
    main()
