"""Every array jitgraph returns, eager or compiled, answers JAX's array methods
(``block_until_ready``, ``.at``, ``is_ready``...): a sweep over the public functions of
``jitgraph.numpy``, ``jnp.linalg``, ``scipy``, ``nn``, ``random`` and ``lax``, and over the
transformations' results (``grad``, ``vmap``, ``vjp``, ``lax.scan``...), as JAX code such as
``x.block_until_ready()`` after a jnp call expects."""
from __future__ import annotations

import importlib
import types
import warnings

import numpy as np
import pytest

import jitgraph
import jitgraph.lax as lax
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.random as jr
from jitgraph.arrays import Array

X = np.random.default_rng(0).random((3, 3)) + 3 * np.eye(3)
KEY = jr.key(0)
# argument lists tried in turn until one is accepted: arrays, pairs, keys, ints, shapes
TRIALS = [(X,), (X, X), (KEY, (3,)), (KEY,), (KEY, X), (2, X), (np.arange(6).reshape(2, 3),),
          (np.arange(6).reshape(2, 3),) * 2, (X > 3,), (X > 3,) * 2, (X, 1), (3.0,), ((3,),),
          ([1, 2, 3],), (X, X, X), (KEY, 3, (2,))]


def _leaves(r):
    if isinstance(r, (tuple, list)):
        for e in r:
            yield from _leaves(e)
    elif isinstance(r, dict):
        for e in r.values():
            yield from _leaves(e)
    else:
        yield r


def _not_arrays(r) -> set:
    """The NumPy types among ``r``'s leaves that are not ``Array``."""
    return {type(x).__name__ for x in _leaves(r)
            if isinstance(x, (np.ndarray, np.generic)) and type(x) is not Array}


def _public_callables(modname: str):
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    for name in names:
        obj = getattr(mod, name, None)
        if isinstance(obj, types.SimpleNamespace):        # scipy.stats.norm and friends
            for m, f in vars(obj).items():
                if callable(f):
                    yield f"{name}.{m}", f
        elif (callable(obj) and not isinstance(obj, (type, types.ModuleType))
              and getattr(obj, "__module__", "").startswith("jitgraph")):
            yield name, obj


MODULES = {"jitgraph.numpy": 230, "jitgraph.numpy.linalg": 15, "jitgraph.scipy.special": 10,
           "jitgraph.scipy.linalg": 5, "jitgraph.scipy.stats": 15, "jitgraph.nn": 15,
           "jitgraph.random": 10, "jitgraph.lax": 40}


@pytest.mark.parametrize("modname", sorted(MODULES))
def test_every_eager_result_is_an_array_with_jaxs_methods(modname):
    """Each public function is called with the first argument list it accepts; whatever it
    returns that is a NumPy array or scalar (tuples, named tuples and dicts walked) must be an
    ``Array``. The sweep must reach a floor of functions, so that it cannot pass by calling
    nothing."""
    bad, called = {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, f in _public_callables(modname):
            for args in TRIALS:
                try:
                    r = f(*args)
                except Exception:
                    continue
                called += 1
                if _not_arrays(r):
                    bad[name] = _not_arrays(r)
                break
    assert not bad, f"{modname}: results that are not jitgraph Arrays: {bad}"
    assert called >= MODULES[modname], f"{modname}: only {called} functions could be called"


def _f(a):
    return jnp.sum(jnp.sin(a) * a)


TRANSFORMS = {
    "grad": lambda: jitgraph.grad(_f)(X),
    "grad of a float": lambda: jitgraph.grad(lambda a: a ** 3)(2.0),
    "value_and_grad": lambda: jitgraph.value_and_grad(_f)(X),
    "grad, has_aux": lambda: jitgraph.grad(lambda a: (_f(a), {"m": jnp.mean(a)}),
                                           has_aux=True)(X),
    "grad of a Module": lambda: jitgraph.tree_leaves(jitgraph.grad(
        lambda m: jnp.sum(m(X)))(nn.Linear(3, 2, key=KEY, dtype=np.float64))),
    "vmap": lambda: jitgraph.vmap(jnp.sin)(X),
    "vmap, tuple out": lambda: jitgraph.vmap(lambda a: (a.sum(), a * 2))(X),
    "jvp": lambda: jitgraph.jvp(jnp.sin, (X,), (X,)),
    "vjp out": lambda: jitgraph.vjp(jnp.sin, X)[0],
    "vjp_fn": lambda: jitgraph.vjp(jnp.sin, X)[1](X),
    "linearize": lambda: jitgraph.linearize(jnp.sin, X)[1](X),
    "jacfwd": lambda: jitgraph.jacfwd(jnp.sin)(X[0]),
    "jacrev": lambda: jitgraph.jacrev(jnp.sin)(X[0]),
    "hessian": lambda: jitgraph.hessian(_f)(X[0]),
    "checkpoint": lambda: jitgraph.checkpoint(_f)(X),
    "jit": lambda: jitgraph.jit(lambda a: {"s": a.sum(), "l": [a, a * 2]})(X),
    "jit of grad": lambda: jitgraph.jit(jitgraph.grad(_f))(X),
    "scan": lambda: lax.scan(lambda c, a: (c + a, c * 2), 0.0, X[0]),
    "fori_loop": lambda: lax.fori_loop(0, 3, lambda i, c: c + 1, X),
    "while_loop": lambda: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2),
                                         (0, X)),
    "cond": lambda: lax.cond(True, jnp.sin, jnp.cos, X),
    "switch": lambda: lax.switch(1, [jnp.sin, jnp.cos], X),
    "map": lambda: lax.map(jnp.sin, X),
    "keys": lambda: (jr.key(0), jr.PRNGKey(1), jr.split(KEY), jr.fold_in(KEY, 2)),
    "svd, eigh, qr, slogdet (named tuples)": lambda: (
        jnp.linalg.svd(X), jnp.linalg.eigh(X), jnp.linalg.qr(X), jnp.linalg.slogdet(X)),
    "jnp.float32 of an array": lambda: jnp.float32(X),
    "nanmedian": lambda: jnp.nanmedian(X),
    "initializers": lambda: (nn.initializers.glorot_normal()(KEY, (3, 2)),
                             nn.initializers.zeros(KEY, (2,))),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transformations_return_arrays(name):
    r = TRANSFORMS[name]()
    leaves = [x for x in _leaves(r) if isinstance(x, (np.ndarray, np.generic))]
    assert leaves, name
    assert not _not_arrays(r), f"{name}: {_not_arrays(r)}"
    for x in leaves:
        assert x.block_until_ready() is x and x.is_ready()


def test_the_methods_work_on_results_and_keep_numpy_values():
    u, s, vt = jnp.linalg.svd(X)
    np.testing.assert_allclose((u * s) @ vt, X, atol=1e-12)
    assert isinstance(jnp.linalg.svd(X), tuple) and jnp.linalg.svd(X).S is not None
    g = jitgraph.grad(_f)(X)
    np.testing.assert_allclose(g, np.sin(X) + X * np.cos(X), rtol=1e-13)
    np.testing.assert_array_equal(g.at[0, 0].set(7.0)[0, 0], 7.0)
    assert g[0, 0] != 7.0                                  # .at makes a copy
    carry, ys = lax.scan(lambda c, a: (c + a, c), 0.0, np.arange(4.0))
    assert float(carry) == 6.0 and ys.block_until_ready().tolist() == [0.0, 0.0, 1.0, 3.0]
    assert jnp.float32(np.ones(2)).dtype == np.float32
    assert type(jnp.float64(2)) is np.float64             # NumPy's scalar types stay scalars
    assert float(jnp.nanmedian(np.array([1.0, np.nan, 3.0]))) == 2.0


def test_pca_scenario_from_jaxs_examples():
    """JAX's pca_from_scratch: an SVD-based PCA under jit and vmap, then
    ``.block_until_ready()`` on the results."""
    def pca(x, n_components=2):
        xc = x - jnp.mean(x, axis=0)
        _, s, vt = jnp.linalg.svd(xc, full_matrices=False)
        comps = vt[:n_components]
        var = s ** 2 / (x.shape[0] - 1)
        return xc @ comps.T, comps, var[:n_components] / jnp.sum(var)

    x = np.random.default_rng(1).normal(size=(200, 5)) * np.array([10.0, 5.0, 1.0, 1.0, 1.0])
    proj, comps, ratio = jitgraph.jit(pca, static_argnames=["n_components"])(x, n_components=2)
    assert proj.block_until_ready().shape == (200, 2)
    want = np.linalg.svd(x - x.mean(0), compute_uv=False) ** 2
    np.testing.assert_allclose(ratio, want[:2] / want.sum(), rtol=1e-12)
    batched = jitgraph.vmap(lambda b: pca(b, 2))(np.stack([x, 2 * x]))
    for r in batched:
        r.block_until_ready()
    np.testing.assert_allclose(batched[2][1], ratio, rtol=1e-12)
    eager = pca(x)
    assert all(type(r) is Array for r in eager)
