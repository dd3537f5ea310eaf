"""jitgraph.random: exact values, eager == jit, statistics (Threefry's known answers and JAX's
streams: test_random_jax_values.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
import jitgraph.random as jr

M = 0xFFFFFFFF
# normal(key(0), (2,)), float64: jax.random.normal(jax.random.PRNGKey(0), (2,)) with
# jax_enable_x64 (JAX 0.10.2), in each threefry scheme
NORMAL_KEY0 = {False: [1.8160866726679836, -0.7548848444703649],     # original scheme
               True: [-0.2058421394796434, -0.7847657764467411]}     # partitionable


def test_exact_values_of_key_split_fold_in_uniform():
    """Values from JAX 0.10.2 (``jax.random`` with ``jax_enable_x64``), both threefry schemes."""
    k = jr.key(0)
    np.testing.assert_array_equal(k, [0, 0])
    with jitgraph.config.threefry_partitionable(False):
        np.testing.assert_array_equal(jr.split(k), [[4146024105, 967050713],
                                                    [2718843009, 1272950319]])
        np.testing.assert_array_equal(jr.fold_in(k, 1), [928981903, 3453687069])
        u = jr.uniform(k, (3,), jnp.float32)     # (an odd size: the counter pads with 0)
        np.testing.assert_array_equal(u, np.array([0.96532142162323, 0.31468164920806885,
                                                   0.6330299377441406], np.float32))
        np.testing.assert_allclose(jr.normal(k, (2,)), NORMAL_KEY0[False], rtol=1e-14)
    with jitgraph.config.threefry_partitionable(True):
        np.testing.assert_array_equal(jr.split(k), [[1797259609, 2579123966],
                                                    [928981903, 3453687069]])
        np.testing.assert_array_equal(jr.fold_in(k, 1), [928981903, 3453687069])
        u = jr.uniform(k, (3,), jnp.float32)
        np.testing.assert_array_equal(u, np.array([0.9476670026779175, 0.9785798788070679,
                                                   0.33229148387908936], np.float32))
        np.testing.assert_allclose(jr.normal(k, (2,)), NORMAL_KEY0[True], rtol=1e-14)
    np.testing.assert_array_equal(jr.key(2 ** 32 + 5), [1, 5])


@pytest.fixture(scope="module")
def jitted_samplers():
    """One compiled program producing every sampler's output for a key (shared by tests)."""
    # each sampler is one generator instance in the program; together they cover every
    # way bits become values (float32 and float64 units, erfinv, Gumbel, ranks)
    # (the eager values are JAX's, test_random_jax_values.py: so are the compiled ones)
    def all_samples(k1, k2, x):
        return {"u32": jr.uniform(k1, (4, 8), jnp.float32), "normal": jr.normal(k2, (2, 3)),
                "perm": jr.permutation(k2, 7), "drop": jr.dropout(k1, x, 0.25) * 2.0,
                "bits": jr.bits(k2, (5,)), "keys": jr.split(k1, 3),
                "u_range": jr.uniform(k2, (5,), jnp.float32, -2.0, 3.0)}
    return all_samples, jitgraph.jit(all_samples)


def test_eager_and_jit_agree(jitted_samplers):
    eager, jitted = jitted_samplers
    for seed in (0, 12345):
        k1, k2 = jr.split(jr.key(seed))
        x = np.ones((4, 8), np.float32)
        a, b = eager(k1, k2, x), jitted(k1, k2, x)
        for name in a:
            if name == "normal":   # the compiled log/cos are vectorizable approximations
                np.testing.assert_allclose(a[name], b[name], rtol=1e-12, atol=1e-12)
            else:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_keys_are_reproducible_and_independent():
    k = jr.key(42)
    np.testing.assert_array_equal(jr.normal(k, (4,)), jr.normal(jr.key(42), (4,)))
    k1, k2 = jr.split(k)
    assert not np.array_equal(jr.uniform(k1, (8,)), jr.uniform(k2, (8,)))
    assert not np.array_equal(jr.fold_in(k, 0), jr.fold_in(k, 1))
    # a prefix of a bigger draw is not what a smaller draw gives for odd sizes, but the
    # same shape is always the same numbers
    np.testing.assert_array_equal(jr.bits(k, (5,)), jr.bits(k, 5))


def test_uniform_and_normal_statistics():
    k = jr.key(7)
    u = jr.uniform(k, (20000,))
    assert 0.0 <= u.min() and u.max() < 1.0 and u.dtype == np.float64
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    chi2 = np.sum((hist - 2000.0) ** 2 / 2000.0)
    assert chi2 < 27.9            # 99.9 % quantile of chi-square with 9 dof
    z = jr.normal(jr.fold_in(k, 1), (20000,), jnp.float32)
    assert z.dtype == np.float32
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03
    assert abs(np.mean(z ** 3)) < 0.1 and abs(np.mean(z ** 4) - 3.0) < 0.2
    # Kolmogorov-Smirnov distance to the normal CDF
    zs = np.sort(z.astype(np.float64))
    cdf = 0.5 * (1 + np.vectorize(math.erf)(zs / math.sqrt(2)))
    ks = np.max(np.abs(cdf - np.arange(1, len(zs) + 1) / len(zs)))
    assert ks < 1.95 / math.sqrt(len(zs))     # 99.9 % critical value


def test_bernoulli_categorical_randint_permutation_statistics():
    k = jr.key(3)
    b = jr.bernoulli(k, 0.3, (20000,))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.015
    p = np.array([0.1, 0.2, 0.7])
    c = jr.categorical(k, np.log(p), shape=(20000,))
    np.testing.assert_allclose(np.bincount(c, minlength=3) / 20000, p, atol=0.015)
    r = jr.randint(k, (20000,), -2, 3)
    assert set(np.unique(r)) == {-2, -1, 0, 1, 2}
    perms = np.stack([jr.permutation(key, 4) for key in jr.split(k, 400)])
    assert all(sorted(row) == [0, 1, 2, 3] for row in perms)
    first = np.bincount(perms[:, 0], minlength=4) / 400.0
    np.testing.assert_allclose(first, 0.25, atol=0.09)      # 4 standard deviations
    x = np.arange(12.0).reshape(3, 4)
    px = jr.permutation(k, x, axis=1)
    np.testing.assert_array_equal(np.sort(px, axis=1), x)


def test_dropout_runs_in_kernels_and_scales(jitted_samplers):
    _, jitted = jitted_samplers
    k = jr.key(0)
    x = np.ones((4, 8), np.float32)
    steps = jitted.lower(k, k, x).plan.steps   # the generator is inside the kernels
    assert steps and all(type(s).__name__ != "HostStep" for s in steps)
    x = np.ones((16, 32))
    kept = jr.dropout(k, x, 0.25)
    assert set(np.unique(kept)) <= {0.0, 1.0 / 0.75}
    assert abs(np.mean(kept == 0.0) - 0.25) < 0.05
    # gradient of dropout is the mask, scaled
    g = jitgraph.grad(lambda x: jnp.sum(jr.dropout(k, x, 0.25)))(x)
    np.testing.assert_array_equal(g, kept)


def test_bad_keys_are_clear_errors():
    with pytest.raises(TypeError, match="expected a key"):
        jr.uniform(0, (3,))
    with pytest.raises(TypeError, match="expected a key"):
        jr.normal(np.zeros(2), (3,))
    with pytest.raises(ValueError, match="dropout rate"):
        jr.dropout(jr.key(0), np.ones(3), 1.0)
    with pytest.raises(ValueError, match="empty range"):
        jr.randint(jr.key(0), (3,), 2, 2)
