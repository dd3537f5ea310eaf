"""JAX's own pure-Python libraries, ``jax.example_libraries.stax`` and ``optimizers``, run on
jitgraph unchanged: the files in ``third_party/jax_example_libraries`` are JAX's, imported with
``jax``, ``jax.numpy``, ``jax.lax``, ``jax.nn`` (with ``jax.nn.initializers``), ``jax.random``
and ``jax.tree_util`` mapped to jitgraph. An MLP and a small CNN (Conv, Relu, MaxPool,
AvgPool, Flatten, Dense, LogSoftmax) train a few steps under ``jit`` with ``sgd``,
``momentum`` and ``adam`` in float64, and their losses and parameters match the values real
JAX gives for the same initial parameters and data (given explicitly, so no random stream is
involved); stax's layers initialize with jitgraph's initializer factories.

The expected values were produced by running this file's scenarios on real JAX:
``python tests/test_jax_libraries.py`` (JAX 0.10.2 on the CPU, ``jax_enable_x64``) prints them.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types

import numpy as np
import pytest

_LIBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "third_party",
                     "jax_example_libraries")


# ------------------------------------------------------------------ the import shim
def _util_module() -> types.ModuleType:
    """The three helpers optimizers.py takes from ``jax._src.util``."""
    util = types.ModuleType("jax._src.util")

    def safe_zip(*args):
        if len({len(a) for a in args}) > 1:
            raise ValueError(f"safe_zip: lengths differ: {[len(a) for a in args]}")
        return list(zip(*args))

    def safe_map(f, *args):
        return [f(*xs) for xs in safe_zip(*args)]

    def unzip2(pairs):
        pairs = list(pairs)
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    util.safe_zip, util.safe_map, util.unzip2 = safe_zip, safe_map, unzip2
    return util


def load_on_jitgraph():
    """(stax, optimizers) imported with jax's modules mapped to jitgraph's."""
    import jitgraph
    import jitgraph.lax
    import jitgraph.nn
    import jitgraph.nn.initializers
    import jitgraph.numpy
    import jitgraph.random
    import jitgraph.tree

    fake = types.ModuleType("jax")
    fake.numpy, fake.lax, fake.random = jitgraph.numpy, jitgraph.lax, jitgraph.random
    fake.nn, fake.tree, fake.tree_util = jitgraph.nn, jitgraph.tree, jitgraph.tree
    fake.jit, fake.grad, fake.value_and_grad = jitgraph.jit, jitgraph.grad, jitgraph.value_and_grad
    src = types.ModuleType("jax._src")
    src.util = _util_module()
    mapped = {"jax": fake, "jax.numpy": jitgraph.numpy, "jax.lax": jitgraph.lax,
              "jax.random": jitgraph.random, "jax.nn": jitgraph.nn,
              "jax.nn.initializers": jitgraph.nn.initializers, "jax.tree_util": jitgraph.tree,
              "jax.tree": jitgraph.tree, "jax._src": src, "jax._src.util": src.util}
    saved = {k: sys.modules.get(k) for k in mapped}
    sys.modules.update(mapped)
    try:
        mods = []
        for name in ("stax", "optimizers"):
            spec = importlib.util.spec_from_file_location(f"jitgraph_jax_{name}",
                                                          os.path.join(_LIBS, f"{name}.py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            mods.append(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mods


# ------------------------------------------------------------------ scenarios (either library)
def _data(shape, classes):
    x = np.sin(np.arange(int(np.prod(shape))) * 0.37).reshape(shape)
    y = np.eye(classes)[np.arange(shape[0]) % classes]
    return x, y


def _explicit(params):
    """Deterministic initial parameters of the structure init_fun returned."""
    count = [0]

    def fill(p):
        count[0] += 1
        n = int(np.prod(np.shape(p)))
        return np.cos(np.arange(n) * 0.7 + count[0]).reshape(np.shape(p)) * 0.4
    return [tuple(fill(p) for p in layer) for layer in params]


def models(stax):
    mlp = stax.serial(stax.Dense(5), stax.Relu, stax.Dense(3), stax.LogSoftmax)
    cnn = stax.serial(stax.Conv(3, (3, 3), padding="SAME"), stax.Relu,
                      stax.MaxPool((2, 2), strides=(2, 2)),
                      stax.AvgPool((2, 2), padding="SAME"),
                      stax.Flatten, stax.Dense(3), stax.LogSoftmax)
    return {"mlp": (mlp, (6, 4)), "cnn": (cnn, (3, 6, 6, 2))}


def train(stax, optimizers, jnp, jit, grad, key, model: str, opt: str, steps: int = 3):
    """Losses before each step and the final parameters of a few jitted training steps."""
    (init_fun, apply_fun), shape = models(stax)[model]
    _, params = init_fun(key, shape)
    params = _explicit(params)
    x, y = _data(shape, 3)
    make = {"sgd": lambda: optimizers.sgd(0.1),
            "momentum": lambda: optimizers.momentum(0.1, mass=0.9),
            "adam": lambda: optimizers.adam(0.01)}[opt]
    opt_init, opt_update, get_params = make()

    def loss(p, batch):
        inputs, targets = batch
        return -jnp.mean(jnp.sum(apply_fun(p, inputs) * targets, axis=1))

    @jit
    def step(i, state, batch):
        p = get_params(state)
        return loss(p, batch), opt_update(i, grad(loss)(p, batch), state)

    state = opt_init(params)
    losses = []
    for i in range(steps):
        value, state = step(i, state, (x, y))
        losses.append(float(value))
    final = [np.asarray(leaf) for layer in get_params(state) for leaf in layer]
    return losses, final


def checksums(leaves):
    """Two numbers per parameter: a weighted sum (which sees the order of the entries) and
    the sum of squares."""
    return [[float(np.sum(p.ravel() * np.cos(np.arange(p.size) * 0.9))), float(np.sum(p * p))]
            for p in leaves]


CASES = [("mlp", "sgd"), ("mlp", "momentum"), ("mlp", "adam"), ("cnn", "adam"),
         ("cnn", "momentum")]

# produced by ``python tests/test_jax_libraries.py`` (real JAX 0.10.2, float64)
EXPECTED = {
    ("mlp", "sgd"): {
        "losses": [1.1258056089863997, 1.1239732413871375, 1.1222029154798001],
        "params": [[1.1991198958364586, 1.485650937044095],
                   [-0.11874185995711956, 0.36072837520037027],
                   [-0.05837362712446853, 1.3059020055365502],
                   [-0.29060045601117224, 0.10795623344980444]]},
    ("mlp", "momentum"): {
        "losses": [1.1258056089863997, 1.1239732413871375, 1.1206685914457348],
        "params": [[1.194661402559591, 1.48475465974561],
                   [-0.10958321118333432, 0.35947581846612775],
                   [-0.06664053630287048, 1.303505335472183],
                   [-0.2628040616789199, 0.0882277977668548]]},
    ("mlp", "adam"): {
        "losses": [1.1258056089863997, 1.12220758025152, 1.1186404224440765],
        "params": [[1.2113902934503418, 1.4993972896495427],
                   [-0.07378269696187904, 0.35189088018902265],
                   [-0.12261264647902792, 1.2761428947828561],
                   [-0.2675451550186281, 0.10429964400978886]]},
    ("cnn", "adam"): {
        "losses": [1.1060548849276743, 1.08572638408993, 1.0666801595513906],
        "params": [[0.40800775849760007, 4.429797167432205],
                   [-0.31798421192381915, 0.28837533884198074],
                   [0.34229941604505437, 6.777628239851251],
                   [-0.26882189919126626, 0.1043751090997311]]},
    ("cnn", "momentum"): {
        "losses": [1.1060548849276743, 1.085208714649192, 1.041990284196871],
        "params": [[0.37843780646248043, 4.47255155290099],
                   [-0.34434424768012195, 0.23964563063482047],
                   [0.40228007127265103, 6.527262889249603],
                   [-0.2732859843879498, 0.09548913345437754]]},
}


# ------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def libs():
    return load_on_jitgraph()


@pytest.mark.parametrize("model,opt", CASES)
def test_training_matches_jax(libs, model, opt):
    import jitgraph
    import jitgraph.numpy as jnp
    stax, optimizers = libs
    losses, final = train(stax, optimizers, jnp, jitgraph.jit, jitgraph.grad,
                          jitgraph.random.key(0), model, opt)
    want = EXPECTED[model, opt]
    np.testing.assert_allclose(losses, want["losses"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(checksums(final), want["params"], rtol=1e-10, atol=1e-12)


def test_stax_layers_initialize_with_jitgraphs_initializer_factories(libs):
    """stax's ``Dense(out, W_init=glorot_normal())`` and ``Conv`` (``glorot_normal(in_axis,
    out_axis)`` from its dimension numbers) take jitgraph's factories unchanged: the shapes
    stax asks for, the dtype, and the variance glorot_normal promises, 2 / (fan_in + fan_out)
    (a conv kernel's fans count its receptive field)."""
    import jitgraph
    stax, _ = libs
    init_fun, _ = stax.serial(stax.Dense(400), stax.Relu, stax.Dense(300))
    out_shape, params = init_fun(jitgraph.random.key(0), (8, 500))
    assert out_shape == (8, 300)
    (w1, b1), (), (w2, b2) = params
    assert w1.shape == (500, 400) and b1.shape == (400,) and w2.shape == (400, 300)
    assert w1.dtype == np.float64
    np.testing.assert_allclose(np.var(w1), 2 / (500 + 400), rtol=0.02)
    np.testing.assert_allclose(np.var(w2), 2 / (400 + 300), rtol=0.02)
    np.testing.assert_allclose(np.std(b1), 1e-2, rtol=0.15)          # normal(): stddev 0.01
    assert np.abs(w1).max() <= 2 * np.sqrt(2 / 900) / .87962566103423978   # truncated at 2 sd
    conv_init, _ = stax.Conv(64, (3, 3))                  # NHWC input, HWIO kernel
    _, (k, kb) = conv_init(jitgraph.random.key(1), (2, 10, 10, 32))
    assert k.shape == (3, 3, 32, 64) and kb.shape == (1, 1, 1, 64)
    np.testing.assert_allclose(np.var(k), 2 / (9 * 32 + 9 * 64), rtol=0.03)


def test_optimizer_state_is_a_registered_pytree(libs):
    """optimizers.py registers its OptimizerState namedtuple: it flattens to the packed
    states (not the namedtuple's three fields), and survives a jit round trip."""
    import jitgraph
    _, optimizers = libs
    opt_init, _, get_params = optimizers.momentum(0.1, 0.9)
    state = opt_init({"w": np.ones(2), "b": np.zeros(1)})
    leaves, tree = jitgraph.tree_flatten(state)
    assert len(leaves) == 4           # (x, velocity) for each of the two parameters
    out = jitgraph.jit(lambda s: s)(state)
    assert type(out) is type(state) and out.tree_def == state.tree_def
    np.testing.assert_array_equal(get_params(out)["w"], np.ones(2))


if __name__ == "__main__":      # print EXPECTED from real JAX
    import jax
    import jax.numpy as jjnp
    from jax.example_libraries import optimizers as jopt, stax as jstax
    jax.config.update("jax_enable_x64", True)
    out = {}
    for model, opt in CASES:
        losses, final = train(jstax, jopt, jjnp, jax.jit, jax.grad, jax.random.PRNGKey(0),
                              model, opt)
        out[model, opt] = {"losses": losses, "params": checksums(final)}
    print("EXPECTED = {")
    for k, v in out.items():
        print(f"    {k!r}: {{\"losses\": {v['losses']!r},")
        print(f"        \"params\": {v['params']!r}}},")
    print("}")
