"""custom_vjp functions keep their traced rules between un-jitted calls (keyed by argument
structure, shapes, dtypes, weak types and the state the functions read): a cached trace must
give the numbers a fresh trace gives, and never a stale one."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph.numpy as jnp
from jitgraph import check_grads, custom_vjp, grad, value_and_grad
from jitgraph.custom import TRACE_CACHE_SIZE
from jitgraph.state_key import state_key


def _logsumexp():
    @custom_vjp
    def lse(x):
        m = jnp.max(x)
        return m + jnp.log(jnp.sum(jnp.exp(x - m)))

    def fwd(x):
        ans = lse(x)
        return ans, (x, ans)

    def bwd(res, g):
        x, ans = res
        return (g * jnp.exp(x - ans),)

    lse.defvjp(fwd, bwd)
    return lse


def _np_lse(x):
    return np.log(np.sum(np.exp(x)))


def test_shapes_and_dtypes_each_get_their_own_trace():
    lse = _logsumexp()
    rng = np.random.default_rng(0)
    for shape in [(3,), (5,), (2, 4), (3,)]:
        for dt in (np.float64, np.float32):
            x = rng.standard_normal(shape).astype(dt)
            for _ in range(3):       # a miss, then hits
                v, g = value_and_grad(lambda y: lse(y) * 2.0)(x)
                assert v.dtype == dt and g.dtype == dt and g.shape == shape
                tol = 1e-12 if dt == np.float64 else 1e-5
                np.testing.assert_allclose(v, 2 * _np_lse(x.astype(np.float64)), rtol=tol)
                sm = np.exp(x - _np_lse(x.astype(np.float64)))
                np.testing.assert_allclose(g, 2 * sm, rtol=tol * 10, atol=tol)
    assert len(lse._traces) == 6     # one trace per (shape, dtype), reused
    check_grads(lambda y: lse(y ** 2), (rng.standard_normal(4),), order=2, modes=("rev",))
    check_grads(lambda y: lse(y) * jnp.sum(y), (rng.standard_normal((2, 3)),), order=1,
                modes=("rev",))


def test_weak_scalar_and_array_arguments_are_told_apart():
    @custom_vjp
    def f(x):
        return x * 3.0

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 3.0,))
    assert float(grad(lambda x: f(x) * x)(np.float32(2.0))) == pytest.approx(12.0)
    # a Python float is weak: f32 * 3.0 stays float32, f64 array gives float64
    x32 = np.array([1.0, 2.0], np.float32)
    assert grad(lambda x: jnp.sum(f(x)))(x32).dtype == np.float32
    assert grad(lambda x: jnp.sum(f(x)))(x32.astype(np.float64)).dtype == np.float64
    assert float(grad(lambda x: f(x) * 2.0)(1.5)) == pytest.approx(6.0)


_GLOBAL_SCALE = 2.0


def test_changed_closures_and_globals_are_never_served_stale():
    global _GLOBAL_SCALE
    scale = 2.0
    table = np.array([1.0, 1.0])

    @custom_vjp
    def f(x):
        return x * scale * _GLOBAL_SCALE

    def fwd(x):
        return f(x), None

    def bwd(_, g):
        return (g * table,)

    f.defvjp(fwd, bwd)
    x = np.array([1.0, 1.0])
    gf = grad(lambda y: jnp.sum(f(y)))
    vf = value_and_grad(lambda y: jnp.sum(f(y)))
    for _ in range(2):
        np.testing.assert_allclose(gf(x), [1.0, 1.0])
        assert float(vf(x)[0]) == 8.0
    scale = 3.0                      # a closure cell rebound
    assert float(vf(x)[0]) == 12.0
    _GLOBAL_SCALE = 5.0              # a module global rebound
    try:
        assert float(vf(x)[0]) == 30.0
    finally:
        _GLOBAL_SCALE = 2.0
    table[1] = 7.0                   # a small closed-over array changed in place
    np.testing.assert_allclose(gf(x), [1.0, 7.0])
    table = [4.0, 4.0]               # a list: not keyable, traced on every call
    np.testing.assert_allclose(gf(x), [4.0, 4.0])
    table[0] = 9.0
    np.testing.assert_allclose(gf(x), [9.0, 4.0])
    scale, table = 0.0, 1.0
    assert not np.signbit(value_and_grad(f)(1.0)[0])
    scale = -0.0                     # equal to 0.0, but not the same bits
    assert np.signbit(value_and_grad(f)(1.0)[0])
    f.defvjp(fwd, lambda _, g: (g * 10.0,))   # new rules: the old traces are dropped
    np.testing.assert_allclose(gf(x), [10.0, 10.0])


def test_closed_over_traced_values_are_not_cached():
    @custom_vjp
    def f(x):
        return x * 2.0

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2.0,))

    def loss(w, x):
        @custom_vjp
        def g(y):          # closes over the traced w: its gradient comes from g's graph
            return y * w

        g.defvjp(lambda y: (g(y), None), lambda _, ct: (ct * w,))
        return jnp.sum(g(f(x)))

    for w in (1.5, 2.5):
        dw, dx = grad(loss, argnums=(0, 1))(w, np.array([1.0, 2.0]))
        assert float(dw) == pytest.approx(6.0)
        np.testing.assert_allclose(dx, [2 * w, 2 * w])


def test_the_trace_cache_is_bounded():
    lse = _logsumexp()
    for n in range(1, TRACE_CACHE_SIZE + 6):
        x = np.linspace(0.0, 1.0, n)
        np.testing.assert_allclose(grad(lse)(x), np.exp(x - _np_lse(x)), rtol=1e-12)
    assert 0 < len(lse._traces) <= TRACE_CACHE_SIZE


def test_state_key():
    a, big = [1.0], np.zeros(4096)
    f = lambda x: x + 1.0                                      # noqa: E731
    assert state_key(f) == state_key(f) is not None
    assert state_key(lambda x: x + a[0]) is None               # a mutable list
    assert state_key(lambda x: x + big) is None                # too large to compare

    class Config:
        scale = 2.0
    assert state_key(lambda x: x * Config.scale) is None       # class attributes can change
    assert state_key(lambda x: jnp.float32(x) + np.pi + abs(x)) is not None  # library, builtin
    assert state_key(lambda x: isinstance(x, (np.ndarray, float))) is not None
    s = 1.0
    g = lambda x: x * s                                        # noqa: E731
    k1 = state_key(g)
    s = 2.0
    assert state_key(g) != k1
