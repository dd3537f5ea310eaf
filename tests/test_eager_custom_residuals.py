"""Un-jitted calls of a custom_vjp function evaluate fwd once and hand its residuals to bwd
(nothing is recomputed in the backward pass), while jit, make_graph and vmap still record the
primal graph alone; the gradients, to second order, are the ones a fresh evaluation gives."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import custom_vjp, defprimitive, grad, jit, make_graph, value_and_grad, vmap
from jitgraph.state_key import state_key

_CALLS = {"exp": 0}


def _counted_exp_impl(x):
    _CALLS["exp"] += 1
    return np.exp(x)


# exp with a counter in its NumPy rule: how often the reference interpreter evaluates it
counted_exp_p = defprimitive("test_counted_exp", _counted_exp_impl,
                             vjp=lambda g, out, x: (g * out,),
                             codegen=jitgraph.core.PRIMITIVES["exp"].codegen,
                             kind="elementwise",
                             batch=lambda args, dims: (counted_exp_p(args[0]), dims[0]))


def _softplus_sum():
    """sum(log(1 + exp(x))) with a custom VJP whose residual (sigmoid) comes from fwd."""
    @custom_vjp
    def f(x):
        return jnp.sum(jnp.log(1.0 + counted_exp_p(x)))

    def fwd(x):
        e = counted_exp_p(x)
        return jnp.sum(jnp.log(1.0 + e)), e / (1.0 + e)

    def bwd(sig, g):
        return (g * sig,)

    f.defvjp(fwd, bwd)
    return f


def _np_softplus_grad(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_eager_backward_reads_fwds_residuals_instead_of_recomputing():
    f = _softplus_sum()
    x = np.array([-1.5, 0.25, 2.0])
    loss = lambda y: f(y * 2.0) * 3.0                          # noqa: E731
    for _ in range(3):          # the first call, then the cached backward graph
        _CALLS["exp"] = 0
        v, g = value_and_grad(loss)(x)
        assert _CALLS["exp"] == 1                              # fwd alone, once
        assert float(v) == pytest.approx(3 * np.sum(np.log1p(np.exp(2 * x))), rel=1e-13)
        np.testing.assert_allclose(g, 6.0 * _np_softplus_grad(2 * x), rtol=1e-13)


def test_second_order_through_the_residuals():
    f = _softplus_sum()
    x = np.array([-1.5, 0.25, 2.0])
    v = np.array([0.5, -1.0, 2.0])
    # Hessian-vector product: the residual sigmoid(x) gets its own derivative, through fwd
    hvp = grad(lambda y: jnp.dot(grad(f)(y), v))
    s = _np_softplus_grad(x)
    for _ in range(3):
        np.testing.assert_allclose(hvp(x), s * (1 - s) * v, rtol=1e-12)
    h = 1e-6     # against central differences of the gradient, in float64
    fd = (grad(f)(x + h * v) - grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hvp(x), fd, rtol=1e-6)
    jitgraph.check_grads(lambda y: f(y * y), (x,), order=2, modes=("rev",))


def test_jit_make_graph_and_vmap_record_the_primal_graph_only():
    f = _softplus_sum()
    x = np.array([-1.5, 0.25, 2.0])
    g = make_graph(grad(f))(x)
    (call,) = [n for n in g.nodes if n.prim.name == "custom_vjp_call"] or [None]
    assert call is None or not call.params.get("res_out")
    fg = make_graph(f)(x)
    (call,) = [n for n in fg.nodes if n.prim.name == "custom_vjp_call"]
    assert not call.params.get("res_out") and len(call.outs) == 1
    np.testing.assert_allclose(jit(grad(f))(x), _np_softplus_grad(x), rtol=1e-6)
    xs = np.array([[-1.0, 0.5, 1.0], [2.0, -2.0, 0.0]])
    np.testing.assert_allclose(vmap(grad(f))(xs), _np_softplus_grad(xs), rtol=1e-12)
    np.testing.assert_allclose(grad(lambda y: jnp.sum(vmap(f)(y)))(xs),
                               _np_softplus_grad(xs), rtol=1e-12)


def test_kept_state_keys_notice_every_change():
    scale, table = 2, np.array([1.0, 2.0])
    fn = lambda x: x * scale + table                           # noqa: E731
    k1 = state_key(fn)
    assert state_key(fn) is k1                                 # served without the walk
    scale = 2.0                                                # equal, another type
    k2 = state_key(fn)
    assert k2 != k1
    table[0] = 5.0                                             # in place, same identity
    k3 = state_key(fn)
    assert k3 != k2
    fn.__defaults__ = (1.0,)
    k4 = state_key(fn)
    assert k4 != k3

    def h(x, *, c=1.0):
        return x * c
    k5 = state_key(h)
    h.__kwdefaults__["c"] = 2.0                                # a dict changed in place
    assert state_key(h) != k5
