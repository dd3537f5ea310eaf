"""``vmap`` and ``jnp.vectorize`` against explicit Python loops over the reference.

* every case of the shared table (``cases.py``) batched at axis 0, at the last axis, and with
  some arguments unbatched (None), against ``stack([f(*example_i)])``; every differentiable
  case also as ``vmap(grad(f))`` (per-example gradients), which batches the backward-pass
  primitives (pad_slice, scatter_add, ...); a static check that the table and the explicit
  tests below reach every primitive's batching rule;
* compositions: vmap∘grad, grad∘vmap (also by float64 central differences), jit∘vmap∘grad as
  one compiled program, vmap∘vmap, jvp∘vmap, vmap∘jvp, vmap of hessian/jacrev/jit;
* in_axes/out_axes (pytree prefixes, negative axes, kwargs, axis_size), JAX's errors;
* rule branches the table does not force (matmul with one side unbatched, gathers with batched
  indices, custom_vjp, random), a hypothesis sweep of shapes and axes, and ``vectorize``.

Most checks run eagerly (the batched graph is replayed by the reference interpreter); a few go
through ``jit`` to check the compiled program.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import (PRIMITIVES, check_grads, custom_vjp, grad, hessian, jacrev, jit, jvp,
                      make_graph, vjp, vmap)
from jitgraph.transforms import trace_to_graph
from jitgraph.tree import tree_flatten, tree_leaves

from cases import CASES, GRAD_CASES

B = 3        # examples per batch in the table tests


# ------------------------------------------------------------------ loops over examples
def _examples(x) -> list:
    """B distinct examples derived from one argument: floats scaled (keeps positivity,
    symmetric domains and positive-definiteness), integers and bools rolled (keeps indices
    in range)."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return [(x * (1.0 - 0.04 * i)).astype(x.dtype) for i in range(B)]
    return [np.roll(x.ravel(), i).reshape(x.shape) for i in range(B)]


def _assert_close(got, want, rtol=1e-6, atol=1e-7):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def _check_against_loop(fn, args, in_axes, rtol=1e-6, atol=1e-7):
    """vmap(fn, in_axes) on stacked examples == stack of fn on each example."""
    examples = [_examples(a) if ax is not None else None for a, ax in zip(args, in_axes)]
    batched = [a if ax is None else np.stack(ex, axis=ax)
               for a, ex, ax in zip(args, examples, in_axes)]
    got = tree_leaves(vmap(fn, in_axes)(*batched))
    per = [tree_leaves(fn(*[a if ax is None else ex[i]
                            for a, ex, ax in zip(args, examples, in_axes)])) for i in range(B)]
    assert len(got) == len(per[0])
    for k, g in enumerate(got):
        _assert_close(g, np.stack([np.asarray(p[k]) for p in per]), rtol, atol)


def _configs(n_args: int) -> list[tuple]:
    """All arguments at axis 0; all at the last axis; first only; all but the first."""
    cfgs = [(0,) * n_args, (-1,) * n_args]
    if n_args > 1:
        cfgs += [(0,) + (None,) * (n_args - 1), (None,) + (1,) * (n_args - 1)]
    return cfgs


def _ok_axis(a, ax):
    """in_axes=1 needs an example of rank >= 1; fall back to 0 for scalars."""
    return 0 if ax == 1 and np.ndim(a) == 0 else ax


# ------------------------------------------------------------------ the shared case table
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_table_batched(case):
    for cfg in _configs(len(case.args)):
        cfg = tuple(_ok_axis(a, ax) for a, ax in zip(case.args, cfg))
        _check_against_loop(case.fn, case.args, cfg, rtol=case.rtol or 1e-6,
                            atol=case.atol or 1e-7)


def _scalar_loss(case):
    """Sum of every output of the case, differentiated with respect to its argnums."""
    def loss(*args):
        return functools.reduce(lambda s, o: s + jnp.sum(o), tree_leaves(case.fn(*args)), 0.0)
    return grad(loss, argnums=case.argnums)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_case_table_per_example_grads(case):
    """vmap(grad(f)) against a loop of grad(f): batches the backward-pass primitives."""
    _check_against_loop(_scalar_loss(case), case.args, (0,) * len(case.args), rtol=1e-5,
                        atol=1e-6)


# the primitives the explicit tests below batch (the table has no case that reaches them)
EXPLICIT = {"custom_vjp_call", "threefry_mix", "uint32_add", "uint32_xor"}
# the modules whose primitives this file covers (a primitive defined elsewhere later, such
# as control flow, brings its own batching tests)
COVERED_MODULES = {f"jitgraph.ops.{m}" for m in (
    "elementwise", "reductions", "layout", "indexing", "linalg", "transcendental", "sorting",
    "decompositions", "random")} | {"jitgraph.custom"}


def _package_primitive(p) -> bool:
    """Defined by jitgraph itself (not by a test's or user's defprimitive)."""
    ae = p.abstract_eval
    return getattr(ae, "__module__", "").startswith("jitgraph.") and \
        "defprimitive" not in getattr(ae, "__qualname__", "")


def test_every_primitive_has_a_batching_rule():
    missing = [n for n, p in PRIMITIVES.items() if _package_primitive(p) and p.batch is None]
    assert not missing, f"primitives without a batching rule: {missing}"


def test_table_reaches_every_builtin_primitive():
    """Each built-in primitive occurs in a table case's graph (forward, or the backward pass
    the per-example-gradient test batches) or has an explicit test here."""
    seen = set(EXPLICIT)
    for c in CASES:
        g = trace_to_graph(c.fn, c.args, abstract=True, what="coverage")[0]
        seen.update(n.prim.name for n in g.nodes)
    for c in GRAD_CASES:
        g = make_graph(_scalar_loss(c))(*c.args)
        seen.update(n.prim.name for n in g.nodes)
    covered = [n for n, p in PRIMITIVES.items() if _package_primitive(p)
               and p.abstract_eval.__module__ in COVERED_MODULES]
    assert len(covered) >= 84
    assert not [n for n in covered if n not in seen]


# ------------------------------------------------------------------ compositions
_rng = np.random.default_rng(7)


def _mlp():
    params = {"W1": _rng.standard_normal((5, 4)), "b1": _rng.standard_normal(4),
              "W2": _rng.standard_normal((4, 3))}
    X = _rng.standard_normal((6, 5))
    Y = _rng.integers(0, 3, 6)
    return params, X, Y


def _loss(p, x, y):
    h = jnp.tanh(x @ p["W1"] + p["b1"])
    return -jitgraph.nn.log_softmax(h @ p["W2"])[y]


def _stack_trees(trees):
    return {k: np.stack([t[k] for t in trees]) for k in trees[0]}


def test_vmap_of_grad_is_per_example_gradients():
    params, X, Y = _mlp()
    got = vmap(grad(_loss), in_axes=(None, 0, 0))(params, X, Y)
    want = _stack_trees([grad(_loss)(params, X[i], Y[i]) for i in range(len(X))])
    for k in want:
        _assert_close(got[k], want[k], 1e-12, 1e-12)


def test_grad_of_vmap_matches_sum_of_grads_and_central_differences():
    params, X, Y = _mlp()
    total = lambda p: jnp.sum(vmap(_loss, (None, 0, 0))(p, X, Y))   # noqa: E731
    got = grad(total)(params)
    per = [grad(_loss)(params, X[i], Y[i]) for i in range(len(X))]
    for k in got:
        _assert_close(got[k], sum(p[k] for p in per), 1e-12, 1e-12)
    check_grads(total, (params,), order=2, modes=("rev", "fwd"))


def _small_loss(p, x, y):
    return (jnp.sum(jnp.tanh(x @ p["W1"] + p["b1"]) * p["W2"][:, 0]) - y) ** 2


def test_vmap_closing_over_traced_values():
    """The vmapped function closes over a value of the enclosing grad / jit trace."""
    W = _rng.standard_normal((4, 3))
    xs = _rng.standard_normal((5, 4))
    total = lambda W: jnp.sum(vmap(lambda x: jnp.tanh(x @ W))(xs) ** 2)  # noqa: E731
    want = grad(lambda W: jnp.sum(jnp.tanh(xs @ W) ** 2))(W)
    _assert_close(grad(total)(W), want, 1e-12, 1e-12)
    _assert_close(jit(grad(total))(W), want, 1e-10, 1e-12)


def test_jit_of_vmap_of_grad_is_one_program():
    params, X, Y = _mlp()
    Y = Y.astype(np.float64)
    f = vmap(grad(_small_loss), in_axes=(None, 0, 0))
    before = jitgraph.cache_info()
    jf = jit(f)
    got = jf(params, X, Y)
    got2 = jf(params, X[::-1].copy(), Y[::-1].copy())
    after = jitgraph.cache_info()
    assert after["traces"] - before["traces"] == 1
    assert after["misses"] + after["disk_hits"] - before["misses"] - before["disk_hits"] == 1
    want = f(params, X, Y)
    for k in want:
        _assert_close(got[k], want[k], 1e-10, 1e-12)
        _assert_close(got2[k], want[k][::-1], 1e-10, 1e-12)
    # the batched graph does not grow with the batch: no loop over examples
    small = make_graph(f)(params, X[:2], Y[:2])
    large = make_graph(f)(params, np.concatenate([X, X]), np.concatenate([Y, Y]))
    assert len(small.nodes) == len(large.nodes)


def test_vmap_of_vmap_and_axes():
    A = _rng.standard_normal((3, 4, 5))
    M = _rng.standard_normal((4, 5))
    f = lambda x, y: jnp.dot(x, y)                                   # noqa: E731
    _assert_close(vmap(vmap(f, (0, 0)), (0, None))(A, M), np.einsum("ijk,jk->ij", A, M))
    # inner over the last axis, outer over the first, output at the end
    g = vmap(vmap(lambda x: jnp.sum(jnp.sin(x)), in_axes=-1), in_axes=0, out_axes=-1)
    _assert_close(g(A), np.sin(A).sum(axis=1).T)


def test_jvp_of_vmap_and_vmap_of_jvp():
    f = lambda x: jnp.sin(x) * jnp.sum(x * x)                        # noqa: E731
    xs, ts = _rng.standard_normal((3, 4)), _rng.standard_normal((3, 4))
    want = np.stack([jvp(f, (xs[i],), (ts[i],))[1] for i in range(3)])
    _assert_close(jvp(vmap(f), (xs,), (ts,))[1], want, 1e-12, 1e-12)
    vj = vmap(lambda x, t: jvp(f, (x,), (t,))[1])
    _assert_close(vj(xs, ts), want, 1e-12, 1e-12)


def test_vmap_of_hessian_jacrev_vjp_and_jit():
    f = lambda x: jnp.sum(jnp.sin(x) * x[0])                         # noqa: E731
    xs = _rng.standard_normal((3, 4))
    _assert_close(vmap(hessian(f))(xs), np.stack([hessian(f)(x) for x in xs]), 1e-12, 1e-12)
    h = lambda x: jnp.tanh(x) * x[1]                                 # noqa: E731
    _assert_close(vmap(jacrev(h))(xs), np.stack([jacrev(h)(x) for x in xs]), 1e-12, 1e-12)
    ct = _rng.standard_normal((3, 4))
    vj = vmap(lambda x, c: vjp(h, x)[1](c)[0])
    _assert_close(vj(xs, ct), np.stack([vjp(h, x)[1](c)[0] for x, c in zip(xs, ct)]), 1e-12)
    _assert_close(vmap(jit(h))(xs), np.stack([h(x) for x in xs]), 1e-12, 1e-12)


def test_check_grads_through_vmap_with_unbatched_weights():
    W = _rng.standard_normal((4, 3))
    xs = _rng.standard_normal((5, 4))
    f = lambda W, xs: vmap(lambda w, x: jnp.tanh(x @ w), (None, 0))(W, xs)  # noqa: E731
    check_grads(f, (W, xs), order=2, modes=("rev", "fwd"))


# ------------------------------------------------------------------ in_axes / out_axes
def test_in_axes_pytree_prefix_negative_and_kwargs():
    d = {"a": _rng.standard_normal((2, 3)), "b": _rng.standard_normal((3, 2))}
    s = _rng.standard_normal(2)

    def f(tree, scale, *, shift):
        return tree["a"] * scale + tree["b"].T + shift

    shift = _rng.standard_normal((3, 2))         # keyword arguments map over axis 0
    got = vmap(f, in_axes=({"a": 1, "b": -2}, None))(d, s, shift=shift)
    want = np.stack([f({"a": d["a"][:, i], "b": d["b"][i]}, s, shift=shift[i])
                     for i in range(3)])
    _assert_close(got, want)
    # a list for in_axes and a list argument with an int prefix
    got = vmap(lambda xs, y: xs[0] * y + xs[1], in_axes=[0, None])(
        [d["b"], d["b"]], s)
    _assert_close(got, d["b"] * s + d["b"])


def test_out_axes_trees_and_unbatched_outputs():
    x = _rng.standard_normal((3, 4))
    c = np.arange(4.0)
    f = lambda x: (x * 2.0, {"s": jnp.sum(x), "c": c})              # noqa: E731
    a, t = vmap(f, out_axes=(1, {"s": 0, "c": None}))(x)
    _assert_close(a, (x * 2.0).T)
    _assert_close(t["s"], x.sum(axis=1))
    _assert_close(t["c"], c)                                        # None: returned as is
    b = vmap(lambda x: c, in_axes=0, out_axes=-1)(x)               # unbatched: broadcast
    _assert_close(b, np.broadcast_to(c[:, None], (4, 3)))


def test_unmapped_python_scalars_are_static():
    """As in JAX, an unmapped Python number reaches the function as itself."""
    f = lambda x, n: x ** n if n > 1 else x                          # noqa: E731
    _assert_close(vmap(f, (0, None))(np.arange(3.0), 2), np.arange(3.0) ** 2)


def test_axis_size_with_no_mapped_argument():
    out = vmap(lambda v: v * 2.0, in_axes=None, axis_size=4)(np.arange(3.0))
    _assert_close(out, np.broadcast_to(np.arange(3.0) * 2.0, (4, 3)))


# ------------------------------------------------------------------ errors
def test_error_inconsistent_sizes():
    with pytest.raises(ValueError, match=r"vmap got inconsistent sizes for array axes to be "
                       r"mapped:\narg 0 has shape \(3, 2\) and axis 0 is to be mapped"):
        vmap(lambda a, b: a + b)(np.ones((3, 2)), np.ones((4, 2)))


def test_error_axis_out_of_range():
    with pytest.raises(ValueError, match="map its argument along axis 2.*rank should be at "
                       "least 3, but is only 2"):
        vmap(lambda a: a, in_axes=2)(np.ones((3, 2)))
    with pytest.raises(ValueError, match="out_axes 3 is out of range"):
        vmap(lambda a: a, out_axes=3)(np.ones((3, 2)))


def test_error_in_axes_tree_mismatch():
    with pytest.raises(ValueError, match="tree prefix"):
        vmap(lambda t: t["a"], in_axes=({"b": 0},))({"a": np.ones(3)})
    with pytest.raises(ValueError, match=r"len\(in_axes\)=2, len\(args\)=1"):
        vmap(lambda a: a, in_axes=(0, 0))(np.ones(3))
    with pytest.raises(TypeError, match="in_axes must be an int, None"):
        vmap(lambda a: a, in_axes="x")
    with pytest.raises(TypeError, match="tuple of entries corresponding to the positional"):
        vmap(lambda t: t["a"], in_axes={"a": 0})


def test_error_all_none_and_mapped_output_with_out_axes_none():
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        vmap(lambda a: a, in_axes=None)(np.ones(3))
    with pytest.raises(ValueError, match="mapped output but out_axes is None"):
        vmap(lambda a: a * 2.0, out_axes=None)(np.ones(3))


def test_error_primitive_without_batching_rule():
    p = jitgraph.defprimitive("test_vmap_no_rule", lambda x: x * 2)
    with pytest.raises(NotImplementedError, match="test_vmap_no_rule has no batching rule"):
        vmap(lambda x: p(x))(np.ones((2, 3)))
    q = jitgraph.defprimitive("test_vmap_with_rule", lambda x: x * 2,
                              batch=lambda args, dims: (args[0] * 2, dims[0]))
    _assert_close(vmap(lambda x: q(x), in_axes=1)(np.ones((2, 3))), np.full((3, 2), 2.0))


# ------------------------------------------------------------------ rule branches
@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0), (1, 2), (None, 2)])
def test_matmul_batching_branches_and_their_gradients(axes):
    a = _rng.standard_normal((2, 3, 4))         # examples (3, 4) @ (4, 5)
    b = _rng.standard_normal((2, 4, 5))
    ex_a = a[0] if axes[0] is None else np.moveaxis(np.stack([a[0] * (1 + i) for i in range(3)]),
                                                    0, axes[0])
    ex_b = b[0] if axes[1] is None else np.moveaxis(np.stack([b[0] - i for i in range(3)]),
                                                    0, axes[1])
    f = lambda x, y: jnp.tanh(x @ y)                                # noqa: E731
    got = vmap(f, axes)(ex_a, ex_b)
    pick = lambda x, ax, i: x if ax is None else np.moveaxis(x, ax, 0)[i]  # noqa: E731
    _assert_close(got, np.stack([f(pick(ex_a, axes[0], i), pick(ex_b, axes[1], i))
                                 for i in range(3)]), 1e-12, 1e-12)
    check_grads(lambda x, y: vmap(f, axes)(x, y), (ex_a, ex_b), order=1, modes=("rev",))


def test_outer_product_matmul_becomes_a_multiply():
    """Per-example weight gradients x_i^T g_i are batched (B, m, 1) @ (B, 1, n): a broadcast
    multiply, which fuses, instead of a batched matmul with a contraction of length 1."""
    g = make_graph(vmap(lambda x, y: jnp.outer(x, y)))(np.ones((4, 3)), np.ones((4, 5)))
    assert g.count("matmul") == 0 and g.count("mul") == 1
    x, y = _rng.standard_normal((4, 3)), _rng.standard_normal((4, 5))
    _assert_close(vmap(lambda x, y: x[:, None] @ y[None, :])(x, y), np.einsum("bi,bj->bij", x, y))


@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0), (1, 0)])
def test_gather_and_scatter_batching(axes):
    x = _rng.standard_normal((3, 5, 2))          # examples (5, 2)
    idx = np.array([[4, 0, 1], [2, 2, -1], [0, 3, 3]])
    xb = x if axes[0] == 0 else (x[0] if axes[0] is None else np.moveaxis(x, 0, axes[0]))
    ib = idx if axes[1] is not None else idx[0]
    f = lambda x, i: jnp.sum(x[i] * x[i], axis=-1)                  # noqa: E731
    got = vmap(f, axes)(xb, ib)
    want = np.stack([f(x[0] if axes[0] is None else x[k], idx[0] if axes[1] is None else idx[k])
                     for k in range(3)])
    _assert_close(got, want, 1e-12, 1e-12)
    gx = vmap(grad(lambda x, i: jnp.sum(f(x, i))), axes)(xb, ib)      # scatter_add batched
    want_g = np.stack([grad(lambda x, i: jnp.sum(f(x, i)))(
        x[0] if axes[0] is None else x[k], idx[0] if axes[1] is None else idx[k])
        for k in range(3)])
    _assert_close(gx, want_g, 1e-12, 1e-12)


def test_custom_vjp_under_vmap_keeps_its_rule():
    @custom_vjp
    def f(x, w):
        return jnp.sin(x) * w

    def fwd(x, w):
        return f(x, w), (x, w)

    def bwd(res, g):
        x, w = res
        return 3.0 * g * w, g * jnp.sin(x)        # deliberately not cos: the custom rule shows

    f.defvjp(fwd, bwd)
    xs, w = _rng.standard_normal((4, 3)), _rng.standard_normal(3)
    _assert_close(vmap(f, (0, None))(xs, w), np.sin(xs) * w, 1e-12, 1e-12)
    gx, gw = grad(lambda xs, w: jnp.sum(vmap(f, (0, None))(xs, w)), argnums=(0, 1))(xs, w)
    _assert_close(gx, np.broadcast_to(3.0 * w, xs.shape), 1e-12, 1e-12)
    _assert_close(gw, np.sin(xs).sum(axis=0), 1e-12, 1e-12)
    per = vmap(grad(lambda x, w: jnp.sum(f(x, w)), argnums=1), (0, None))(xs, w)
    _assert_close(per, np.sin(xs), 1e-12, 1e-12)


def test_random_under_vmap_matches_a_loop_of_keys():
    keys = jitgraph.random.split(jitgraph.random.key(3), 4)
    got = vmap(lambda k: jitgraph.random.normal(k, (3,)))(keys)
    want = np.stack([jitgraph.random.normal(k, (3,)) for k in keys])
    _assert_close(got, want, 0, 0)
    folded = vmap(lambda k, i: jitgraph.random.fold_in(k, i), (None, 0))(
        keys[0], np.arange(3))
    _assert_close(folded, np.stack([jitgraph.random.fold_in(keys[0], i) for i in range(3)]), 0, 0)


# ------------------------------------------------------------------ random shapes and axes
@st.composite
def _batched_problem(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    size = draw(st.integers(1, 3))
    ax_x = draw(st.integers(-(ndim + 1), ndim))
    y_rank = draw(st.integers(0, ndim))
    ax_y = draw(st.one_of(st.none(), st.integers(0, y_rank)))
    red = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    op = draw(st.sampled_from(["add", "mul", "max", "sub"]))
    return shape, size, ax_x, y_rank, ax_y, red, op


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_batched_problem())
def test_hypothesis_elementwise_and_reductions(problem):
    shape, size, ax_x, y_rank, ax_y, red, op = problem
    rng = np.random.default_rng(0)
    y_shape = shape[len(shape) - y_rank:]
    xs = [rng.standard_normal(shape) for _ in range(size)]
    ys = [rng.standard_normal(y_shape) for _ in range(size if ax_y is not None else 1)]

    def f(x, y):
        z = getattr(jnp, {"add": "add", "mul": "multiply", "max": "maximum",
                          "sub": "subtract"}[op])(x, y)
        return jnp.exp(z) if red is None else jnp.sum(z, axis=red) + jnp.max(z)

    xb = np.stack(xs, axis=ax_x)
    yb = ys[0] if ax_y is None else np.stack(ys, axis=ax_y)
    got = vmap(f, (ax_x, ax_y))(xb, yb)
    want = np.stack([f(xs[i], ys[0] if ax_y is None else ys[i]) for i in range(size)])
    _assert_close(got, want, 1e-12, 1e-12)


# ------------------------------------------------------------------ vectorize
def _cross(a, b):
    assert a.shape == b.shape == (3,)
    return jnp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                      a[0] * b[1] - a[1] * b[0]])


def test_vectorize_gufunc_signatures_broadcast_loop_axes():
    cross = jnp.vectorize(_cross, signature="(k),(k)->(k)")
    a, b = _rng.standard_normal((1, 2, 3)), _rng.standard_normal((4, 1, 3))
    _assert_close(cross(a, b), np.cross(a, b), 1e-12, 1e-12)
    assert cross(np.ones(3), np.ones(3)).shape == (3,)
    mv = jnp.vectorize(lambda m, v: m @ v, signature="(n,m),(m)->(n)")
    M, v = _rng.standard_normal((2, 3)), _rng.standard_normal((4, 3))
    _assert_close(mv(M, v), v @ M.T, 1e-12, 1e-12)
    dot = jnp.vectorize(lambda x, y: jnp.sum(x * y), signature="(n),(n)->()")
    x, y = _rng.standard_normal((2, 1, 5)), _rng.standard_normal((3, 5))
    _assert_close(dot(x, y), np.sum(x * y, axis=-1), 1e-12, 1e-12)


def test_vectorize_scalar_function_excluded_and_multiple_outputs():
    clip = jnp.vectorize(lambda x, lo: jnp.where(x < lo, lo, x) * 2.0, excluded={1})
    x = _rng.standard_normal((2, 3))
    _assert_close(clip(x, 0.0), np.where(x < 0.0, 0.0, x) * 2.0)
    minmax = jnp.vectorize(lambda v: (jnp.min(v), jnp.max(v)), signature="(n)->(),()")
    lo, hi = minmax(x)
    _assert_close(lo, x.min(axis=-1))
    _assert_close(hi, x.max(axis=-1))
    # size-1 loop axes everywhere come back as size-1 axes
    _assert_close(jnp.vectorize(jnp.sin)(np.ones((1, 3))), np.sin(np.ones((1, 3))))
    # it differentiates and compiles like any other jnp code
    f = jnp.vectorize(lambda v, w: jnp.sum(jnp.tanh(v) * w), signature="(n),(n)->()")
    g = grad(lambda x: jnp.sum(f(x, x[0])))(x)
    _assert_close(g, grad(lambda x: jnp.sum(jnp.tanh(x) * x[0]))(x), 1e-12, 1e-12)


def test_vectorize_errors():
    mv = jnp.vectorize(lambda m, v: m @ v, signature="(n,m),(m)->(n)")
    with pytest.raises(ValueError, match="does not have enough dimensions for all core "
                       r"dimensions \('n', 'm'\)"):
        mv(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="inconsistent size for core dimension 'm'"):
        mv(np.ones((2, 3)), np.ones(4))
    with pytest.raises(ValueError, match="not a valid gufunc signature"):
        jnp.vectorize(lambda x: x, signature="(n)->")
    bad = jnp.vectorize(lambda v: v, signature="(n)->()")
    with pytest.raises(ValueError, match=r"output shape \(3,\) does not match core dimensions"):
        bad(np.ones((2, 3)))
    with pytest.raises(TypeError, match="wrong number of positional arguments"):
        mv(np.ones((2, 3)))
