"""Random expressions (trees of smooth elementwise ops, reductions, broadcasting, reshape,
transpose and slicing on random small shapes), checked against a NumPy twin, through the
interpreted graph, and by check_grads to second order.

Deterministic: hypothesis runs derandomized with no example database, so CI sees the same
examples every time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.special as sps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import check_grads, make_graph
from jitgraph import nn
from jitgraph.scipy.special import logsumexp

SETTINGS = dict(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------ smooth ops, twice
def _is_j(m):
    return m is jnp


def np_logsumexp(v, axis=None, keepdims=False):
    """NumPy twin with np.sum's shape conventions (scipy's keeps a 1-d shape for 0-d input)."""
    out = sps.logsumexp(v, axis=axis, keepdims=keepdims)
    return np.reshape(out, np.sum(v, axis=axis, keepdims=keepdims).shape).astype(v.dtype)


UNARY: dict[str, Callable] = {
    "sin": lambda m, x: m.sin(x),
    "cos": lambda m, x: m.cos(x),
    "tanh": lambda m, x: m.tanh(x),
    "exp_tanh": lambda m, x: m.exp(m.tanh(x)),
    "logistic": lambda m, x: nn.sigmoid(x) if _is_j(m) else sps.expit(x),
    "softplus": lambda m, x: nn.softplus(x) if _is_j(m) else np.logaddexp(0.0, x).astype(x.dtype),
    "log1p_sq": lambda m, x: m.log(1.0 + x * x),
    "half_sq": lambda m, x: 0.5 * (x * x),
    "neg": lambda m, x: -x,
    "scale": lambda m, x: x * 1.5 - 0.25,
    "sqrt_1p_sq": lambda m, x: m.sqrt(1.0 + x * x),
    "cube": lambda m, x: x ** 3,
    "pow_2.5": lambda m, x: (1.0 + x * x) ** 1.25,
    "erf": lambda m, x: nn.gelu(x, approximate=False) if _is_j(m) else (
        0.5 * x * (1.0 + sps.erf(x * (1.0 / np.sqrt(2.0))))).astype(x.dtype),
}
BINARY: dict[str, Callable] = {
    "add": lambda m, x, y: x + y,
    "sub": lambda m, x, y: x - y,
    "mul": lambda m, x, y: x * y,
    "safe_div": lambda m, x, y: x / (1.0 + y * y),
    "mix": lambda m, x, y: m.tanh(x) * y + x,
}


@dataclass
class Expr:
    fn: Callable          # fn(m, xs) -> value
    shape: tuple
    text: str


def _bcast_ok(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@st.composite
def shapes(draw, max_rank=3):
    rank = draw(st.sampled_from([2, 3, 1, 0][:max_rank + 1]))
    return tuple(draw(st.sampled_from([3, 2, 4, 1])) for _ in range(rank))


@st.composite
def input_shapes(draw):
    """1-3 inputs whose shapes broadcast against a common base shape."""
    base = draw(shapes())
    n = draw(st.integers(1, 3))
    out = []
    for _ in range(n):
        drop = draw(st.integers(0, len(base)))
        s = list(base[drop:])
        for i in range(len(s)):
            if draw(st.booleans()) and draw(st.booleans()):
                s[i] = 1
        out.append(tuple(s))
    return out


def _reduce_expr(draw, e: Expr) -> Expr:
    kind = draw(st.sampled_from(["sum", "mean", "logsumexp", "max_smooth"]))
    nd = len(e.shape)
    if nd == 0 or draw(st.booleans()):
        axis = None
    elif draw(st.booleans()):
        axis = draw(st.integers(-nd, nd - 1))
    else:
        axis = tuple(sorted(set(draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd)))))
    keep = draw(st.booleans())

    def fn(m, xs, f=e.fn, kind=kind, axis=axis, keep=keep):
        v = f(m, xs)
        if kind == "sum":
            return m.sum(v, axis=axis, keepdims=keep)
        if kind == "mean":
            return m.mean(v, axis=axis, keepdims=keep)
        if kind == "max_smooth":      # a smooth "max": logsumexp of 4x, over 4
            return (logsumexp(v * 4.0, axis=axis, keepdims=keep) if _is_j(m) else
                    np_logsumexp(v * 4.0, axis=axis, keepdims=keep)) / 4.0
        return (logsumexp(v, axis=axis, keepdims=keep) if _is_j(m) else
                np_logsumexp(v, axis=axis, keepdims=keep))

    out = np.zeros(e.shape)
    out_shape = np.sum(out, axis=axis, keepdims=keep).shape
    return Expr(fn, out_shape, f"{kind}[axis={axis},keepdims={keep}]({e.text})")


def _layout_expr(draw, e: Expr) -> Expr:
    nd = len(e.shape)
    kinds = ["reshape_flat", "expand"]
    if nd >= 2:
        kinds += ["transpose", "reshape_rev"]
    if nd >= 1:
        kinds += ["flip", "slice"]
    kind = draw(st.sampled_from(kinds))
    if kind == "transpose":
        perm = tuple(draw(st.permutations(range(nd))))
        return Expr(lambda m, xs, f=e.fn, p=perm: m.transpose(f(m, xs), p),
                    tuple(e.shape[p] for p in perm), f"transpose{perm}({e.text})")
    if kind == "reshape_flat":
        return Expr(lambda m, xs, f=e.fn: m.reshape(f(m, xs), (-1,)),
                    (int(np.prod(e.shape, dtype=int)),), f"ravel({e.text})")
    if kind == "reshape_rev":
        new = tuple(reversed(e.shape))
        return Expr(lambda m, xs, f=e.fn, s=new: m.reshape(f(m, xs), s), new,
                    f"reshape{new}({e.text})")
    if kind == "expand":
        new = (2,) + e.shape
        return Expr(lambda m, xs, f=e.fn, s=new: m.broadcast_to(f(m, xs), s), new,
                    f"broadcast_to{new}({e.text})")
    axis = draw(st.integers(0, nd - 1))
    if kind == "flip":
        return Expr(lambda m, xs, f=e.fn, a=axis: m.flip(f(m, xs), axis=a), e.shape,
                    f"flip[{axis}]({e.text})")
    n = e.shape[axis]
    start = draw(st.integers(0, n - 1))
    step = draw(st.sampled_from([1, 2, -1]))
    sl = slice(start, None, step)
    idx = (slice(None),) * axis + (sl,)
    new = list(e.shape)
    new[axis] = len(range(*sl.indices(n)))
    return Expr(lambda m, xs, f=e.fn, i=idx: f(m, xs)[i], tuple(new), f"[{idx}]({e.text})")


@st.composite
def expressions(draw, in_shapes, depth=3, top=False):
    if depth == 0 or (not top and draw(st.integers(0, 5)) == 0):
        k = draw(st.integers(0, len(in_shapes) - 1))
        return Expr(lambda m, xs, k=k: xs[k], in_shapes[k], f"x{k}")
    kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "layout"]))
    if kind == "unary":
        name = draw(st.sampled_from(sorted(UNARY)))
        e = draw(expressions(in_shapes, depth - 1))
        return Expr(lambda m, xs, f=e.fn, u=UNARY[name]: u(m, f(m, xs)), e.shape,
                    f"{name}({e.text})")
    if kind == "binary":
        name = draw(st.sampled_from(sorted(BINARY)))
        a = draw(expressions(in_shapes, depth - 1))
        b = draw(expressions(in_shapes, depth - 1))
        if not _bcast_ok(a.shape, b.shape):
            b = Expr(lambda m, xs, f=b.fn: m.sum(f(m, xs)), (), f"sum({b.text})")
        return Expr(lambda m, xs, fa=a.fn, fb=b.fn, op=BINARY[name]: op(m, fa(m, xs), fb(m, xs)),
                    np.broadcast_shapes(a.shape, b.shape), f"{name}({a.text}, {b.text})")
    e = draw(expressions(in_shapes, depth - 1))
    return _reduce_expr(draw, e) if kind == "reduce" else _layout_expr(draw, e)


@st.composite
def programs(draw, depth=3):
    in_shapes = draw(input_shapes())
    e = draw(expressions(in_shapes, depth, top=True))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    args = tuple(rng.uniform(-1.5, 1.5, s) for s in in_shapes)
    return e, args


def _as_fn(e: Expr, m):
    return lambda *xs: e.fn(m, xs)


# ------------------------------------------------------------------ the properties
@settings(max_examples=50, **SETTINGS)
@given(programs(), st.sampled_from([np.float64, np.float32]))
def test_random_expression_reference(prog, dtype):
    e, args = prog
    args = tuple(a.astype(dtype) for a in args)
    got = _as_fn(e, jnp)(*args)
    want = _as_fn(e, np)(*args)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape == e.shape, e.text
    assert got.dtype == want.dtype == dtype, e.text
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got, want, err_msg=e.text, **tol)
    # traced, optimized and interpreted: the same values
    g = make_graph(_as_fn(e, jnp))(*args)
    (out,) = jitgraph.interpret(g, list(args))
    assert out.dtype == got.dtype and out.shape == got.shape
    np.testing.assert_allclose(out, got, err_msg=e.text, **tol)


@settings(max_examples=40, **SETTINGS)
@given(programs(), st.integers(1, 2))
def test_random_expression_grads(prog, order):
    e, args = prog
    check_grads(_as_fn(e, jnp), args, order=order, modes=("fwd", "rev"), rtol=1e-4, atol=1e-6)


@settings(max_examples=25, **SETTINGS)
@given(programs(depth=2))
def test_random_expression_grad_graph_matches_eager(prog):
    """grad of the summed expression: eager (concrete trace) == make_graph + interpret."""
    e, args = prog
    f = lambda *xs: jnp.sum(e.fn(jnp, xs))
    nums = tuple(range(len(args)))
    eager = jitgraph.grad(f, argnums=nums)(*args)
    g = make_graph(jitgraph.grad(f, argnums=nums))(*args)
    outs = jitgraph.interpret(g, list(args))
    for a, b, x in zip(outs, eager, args):
        assert a.shape == x.shape == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=e.text)
