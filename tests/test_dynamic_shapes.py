"""Sizes as runtime arguments: fitting generated source over sample sizes, automatic dynamic
dims (a new batch size reuses one compiled program), ``dynamic_dims``, fallbacks, and kernels
shared by structure."""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.dynamic import CannotGeneralize, fit, generalize, sample_points

rng = np.random.default_rng(7)


# ------------------------------------------------------------------ fitting
def test_sample_points_move_one_symbol_then_all():
    pts = sample_points({"n0": 128, "n1": 3})
    assert len(pts) == 4
    ref = pts[0]
    assert [k for k in ref if pts[1][k] != ref[k]] == ["n0"]
    assert [k for k in ref if pts[2][k] != ref[k]] == ["n1"]
    assert all(pts[3][k] != ref[k] for k in ref)
    assert all(v >= 2 for p in pts for v in p.values())


@pytest.mark.parametrize("formula,expected", [
    (lambda n, m: 512 * n, "(512 * n0)"),
    (lambda n, m: n + 2, "(n0 + 2)"),
    (lambda n, m: n - 1, "(n0 - 1)"),
    (lambda n, m: n, "n0"),
    (lambda n, m: 3 * n * m, "(3 * n0 * n1)"),
    (lambda n, m: n * n, "(n0 * n0)"),
])
def test_fit_integer_literals(formula, expected):
    pts = sample_points({"n0": 0, "n1": 0})
    assert fit([formula(p["n0"], p["n1"]) for p in pts], pts) == expected


def test_fit_float_literals_including_float32_rounding():
    pts = sample_points({"n0": 0})
    # 1/n of a mean, rounded to float32 as the generated code writes it
    vals = [float(np.float32(1.0 / p["n0"])) for p in pts]
    assert fit(vals, pts) == "(1.0 / n0)"
    vals = [-0.1 / p["n0"] for p in pts]
    assert fit(vals, pts) == "(-0.1 / n0)"
    assert fit([float(p["n0"]) for p in pts], pts) == "(1.0 * n0)"


def test_fit_rejects_what_no_formula_gives():
    pts = sample_points({"n0": 0})
    with pytest.raises(CannotGeneralize):
        fit([p["n0"] // 3 for p in pts], pts)
    with pytest.raises(CannotGeneralize):                 # changes only when all move
        fit([1, 1, 5], sample_points({}) + [{}, {}])


def test_generalize_rewrites_only_numbers_and_checks_structure():
    pts = sample_points({"n0": 0})
    srcs = [f"for i in range({4 * p['n0']}):\n    a[i * 4 + 1] = np.float32({1.0 / p['n0']!r})\n"
            for p in pts]
    out = generalize(srcs, pts)
    assert out == "for i in range((4 * n0)):\n    a[i * 4 + 1] = np.float32((1.0 / n0))\n"
    bad = list(srcs)
    bad[1] = bad[1].replace("a[", "b[")
    with pytest.raises(CannotGeneralize):
        generalize(bad, pts)


def test_generalize_sizes_in_strings_comments_and_nesting_are_structure():
    """Only a number token of code is rewritten: a size in a comment, a one-line string or a
    triple-quoted one, and a change of indentation alone, are structural differences; numbers
    in names (``a12``), hex masks, exponents and complex literals that do not move stay as
    written, and several literals on one line are each rewritten."""
    pts = sample_points({"n0": 0, "n1": 0})

    def src(p, tail=""):
        n, m = p["n0"], p["n1"]
        return ('"""Generated."""\n'
                f"def k(a12, b):\n    for o0 in range({n}):\n"
                f"        x = a12[o0 * {m} + {n * m}] * 1e-05 + 2j\n"
                f"        b[o0] = np.int64(o0) & 0x7FFFFFFFFFFFFFFF  # rows\n{tail}")
    out = generalize([src(p) for p in pts], pts)
    assert "range(n0)" in out and "a12[o0 * n1 + (n0 * n1)]" in out
    assert "* 1e-05 + 2j" in out and "0x7FFFFFFFFFFFFFFF  # rows" in out
    for tail in (lambda p: f"        # {p['n0']} rows\n",
                 lambda p: f"        s = '{p['n0']} rows'\n",
                 lambda p: f'        s = """\n{p["n0"]}\n"""\n'):
        with pytest.raises(CannotGeneralize):
            generalize([src(p, tail(p)) for p in pts], pts)
    nested = [src(p, "    y = 1\n" if i == 1 else "        y = 1\n") for i, p in enumerate(pts)]
    with pytest.raises(CannotGeneralize):
        generalize(nested, pts)


# ------------------------------------------------------------------ jit
def mlp_params(sizes=(6, 8, 8, 3)):
    r = np.random.default_rng(0)
    return [((r.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             np.full(n, 0.01, np.float32)) for m, n in zip(sizes[:-1], sizes[1:])]


def loss(params, x, y):
    h = x
    for W, b in params[:-1]:
        h = jnp.tanh(h @ W + b)
    W, b = params[-1]
    logp = jitgraph.nn.log_softmax(h @ W + b)
    return -jnp.mean(jnp.sum(logp * y, axis=1))


def sgd(params, x, y):
    value, g = jitgraph.value_and_grad(loss)(params, x, y)
    return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, g)], value


def batch(n, d=6, k=3):
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]
    return x, y


def reference_step(params, x, y):
    """The same step on the NumPy reference path (no jit)."""
    return sgd(params, x, y)


def assert_step_close(got, want):
    (p1, l1), (p2, l2) = got, want
    np.testing.assert_allclose(l1, l2, rtol=2e-5, atol=1e-6)
    for (W1, b1), (W2, b2) in zip(p1, p2):
        np.testing.assert_allclose(W1, W2, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(b1, b2, rtol=2e-5, atol=1e-6)


@pytest.fixture(scope="module")
def stepped():
    """A step function called at batch 5, then 7 (which compiles the dynamic program)."""
    f = jitgraph.jit(sgd)
    before = jitgraph.cache_info()
    for n in (5, 7):
        x, y = batch(n)
        assert_step_close(f(mlp_params(), x, y), reference_step(mlp_params(), x, y))
    after = jitgraph.cache_info()
    assert after["dynamic_compiles"] - before["dynamic_compiles"] == 1
    return f


def test_new_batch_sizes_are_served_without_compiling(stepped):
    f = stepped
    before = jitgraph.cache_info()
    for n in (9, 2, 33, 7, 9):
        x, y = batch(n)
        assert_step_close(f(mlp_params(), x, y), reference_step(mlp_params(), x, y))
    after = jitgraph.cache_info()
    assert after["traces"] == before["traces"]            # nothing traced, nothing compiled
    assert after["dynamic_compiles"] == before["dynamic_compiles"]
    assert after["dynamic_hits"] - before["dynamic_hits"] == 3     # 9, 2 and 33 are new
    rows = {r["shapes"]: r for r in f.cache_entries()}
    params = "f32[6,8], f32[8], f32[8,8], f32[8], f32[8,3], f32[3], "
    assert rows[params + "f32[33,6], f32[33,3]"]["dynamic"]
    dyn = [r for r in rows.values() if r["dynamic"]]
    assert {r["program"] for r in dyn} == {params + "f32[n0,6], f32[n0,3]"}
    assert not rows[params + "f32[5,6], f32[5,3]"]["dynamic"]


def test_dynamic_source_takes_the_size_from_its_inputs(stepped):
    x, y = batch(11)
    src = stepped.lower(mlp_params(), x, y).source
    assert "n0 = in6_nd.shape[0]" in src
    assert not re.search(r"\b11\b", src)                 # the size appears nowhere
    assert ", n0)" in src                                 # the driver passes it to kernels
    assert "(1.0 / a" in src                              # the mean's 1/n is computed


def test_batch_of_one_keeps_a_fixed_size_program(stepped):
    before = jitgraph.cache_info()
    x, y = batch(1)
    assert_step_close(stepped(mlp_params(), x, y), reference_step(mlp_params(), x, y))
    assert jitgraph.cache_info()["traces"] > before["traces"]


def test_dynamic_dims_up_front_and_the_same_source_for_any_first_size():
    f = jitgraph.jit(sgd, dynamic_dims={"x": 0, "y": 0})
    g = jitgraph.jit(sgd, dynamic_dims={1: 0, 2: 0})
    x, y = batch(4)
    x2, y2 = batch(13)
    assert_step_close(f(mlp_params(), x, y), reference_step(mlp_params(), x, y))
    assert_step_close(g(mlp_params(), x2, y2), reference_step(mlp_params(), x2, y2))
    assert all(r["dynamic"] for r in f.cache_entries())
    # the program does not depend on the size it was first called with: one disk-cache entry
    assert f.lower(mlp_params(), x, y).source == g.lower(mlp_params(), x2, y2).source


def test_dynamic_false_keeps_every_size_fixed():
    f = jitgraph.jit(lambda x: jnp.sum(jnp.exp(x)), dynamic=False)
    for n in (3, 4, 5):
        np.testing.assert_allclose(f(np.ones(n)), n * np.e)
    assert not any(r["dynamic"] for r in f.cache_entries())


@pytest.mark.parametrize("name,fn", [
    ("diff", lambda x: x[1:] - x[:-1]),
    ("reshape", lambda x: (x.reshape(-1) * 2.0).reshape(x.shape[0], 2, 2).sum(axis=1)),
    ("transpose-sum", lambda x: jnp.sum(x.T @ x, axis=0) + jnp.mean(x)),
    ("concat", lambda x: jnp.concatenate([x, 2.0 * x[::-1]], axis=0)),
    ("softmax", lambda x: jitgraph.nn.softmax(x, axis=0)),
])
def test_layout_and_reductions_over_a_dynamic_dim(name, fn):
    f = jitgraph.jit(fn)
    for n in (3, 5, 8, 6):
        x = rng.standard_normal((n, 4))
        np.testing.assert_allclose(f(x), fn(x), rtol=1e-10, atol=1e-12, err_msg=name)
    assert sum(r["dynamic"] for r in f.cache_entries()) >= 2, name


def test_random_bits_over_a_dynamic_dim():
    """Dropout draws one counter per element (a constant ``arange`` of the batch's shape):
    computed from the index, it does not tie the program to one batch size, and every size
    gets the reference's bits (a convolutional network fed short last batches compiled a
    program for each)."""
    k = jitgraph.random.key(0)

    def f(k, x):
        keep = jitgraph.random.bernoulli(k, 0.75, x.shape)
        return jnp.sum(jnp.where(keep, x / 0.75, 0.0) ** 2, axis=1)

    jf = jitgraph.jit(f)
    before = jitgraph.cache_info()
    for n in (8, 5, 3, 11):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(jf(k, x), f(k, x), rtol=1e-6)
    assert jitgraph.cache_info()["dynamic_compiles"] - before["dynamic_compiles"] == 1
    assert sum(r["dynamic"] for r in jf.cache_entries()) == 3


def test_structure_that_depends_on_the_size_stays_fixed():
    def f(x):
        return jnp.sum(x) if x.shape[0] > 100 else jnp.sum(x * x)
    jf = jitgraph.jit(f)
    for n in (3, 4, 200):
        x = rng.standard_normal(n)
        np.testing.assert_allclose(jf(x), f(x), rtol=1e-12)
    assert not any(r["dynamic"] for r in jf.cache_entries())


def test_donated_parameters_with_a_dynamic_batch():
    f = jitgraph.jit(sgd, donate_argnums=0)
    for n in (3, 4, 6):
        x, y = batch(n)
        want = reference_step(mlp_params(), x, y)
        assert_step_close(f(mlp_params(), x, y), want)


def test_bad_dynamic_dims_spec():
    with pytest.raises(TypeError, match="dynamic_dims"):
        jitgraph.jit(sgd, dynamic_dims=[0])


# ------------------------------------------------------------------ kernels by structure
def test_layers_of_one_structure_share_a_kernel():
    f = jitgraph.jit(sgd)
    x, y = batch(4)
    lo = f.lower(mlp_params((6, 8, 8, 3)), x, y)
    names = [k.name for k in lo.kernels]
    assert len(set(names)) < len(names)                   # the two tanh layers: one function
    assert lo.source.count("def ") == len(set(names)) + 1
