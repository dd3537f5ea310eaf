"""``check_grads``: derivatives against float64 central differences, to any order, both modes.

Along random directions v: forward mode compares ``jvp(f, x, v)`` with
``(f(x + eps v) - f(x - eps v)) / 2 eps``; reverse mode compares ``<vjp(ct), v>`` with
``<ct, numerical jvp>``. Order k checks the derivative functions of order k-1 the same way.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes
from .transforms import jvp, vjp
from .tree import tree_flatten, tree_unflatten


class GradCheckError(AssertionError):
    """A derivative disagreed with central differences."""


def _to_f64(x):
    a = np.asarray(x)
    return a.astype(np.float64) if dtypes.is_float(a.dtype) else a


def _leaves64(args):
    leaves, tree = tree_flatten(tuple(args))
    return [_to_f64(l) for l in leaves], tree


def _random_like(leaves, rng):
    return [rng.standard_normal(np.shape(l)).astype(np.float64) if dtypes.is_float(np.asarray(l).dtype)
            else np.zeros(np.shape(l), np.asarray(l).dtype) for l in leaves]


def _axpy(a, xs, ys):
    return [x + a * y if dtypes.is_float(np.asarray(x).dtype) else x for x, y in zip(xs, ys)]


def _flat_out(out) -> list[np.ndarray]:
    return [np.asarray(o, dtype=np.float64) for o in tree_flatten(out)[0]]


def _inner(xs, ys) -> float:
    return float(sum(np.sum(np.asarray(x, np.float64) * np.asarray(y, np.float64))
                     for x, y in zip(xs, ys)))


def _compare(name: str, order: int, got, want, rtol: float, atol: float, arg_info: str):
    got = [np.asarray(g, np.float64) for g in got]
    want = [np.asarray(w, np.float64) for w in want]
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise GradCheckError(f"{name}, order {order}: output {k} has shape {g.shape}, "
                                 f"numerical {w.shape}")
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            err = np.abs(g - w)
            i = np.unravel_index(np.nanargmax(err), err.shape) if err.ndim else ()
            raise GradCheckError(
                f"{name} derivative mismatch at order {order} ({arg_info}), output {k}:\n"
                f"  autodiff  {g[i]!r}\n  numerical {w[i]!r}\n  max abs err {np.nanmax(err):.3g}"
                f" (rtol={rtol}, atol={atol}) at index {tuple(int(j) for j in i)}")


def _numerical_jvp(f, leaves, tree, v, eps):
    plus = _flat_out(f(*tree_unflatten(tree, _axpy(eps, leaves, v))))
    minus = _flat_out(f(*tree_unflatten(tree, _axpy(-eps, leaves, v))))
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def check_jvp(f, args, eps, rtol, atol, order, rng):
    leaves, tree = _leaves64(args)
    v = _random_like(leaves, rng)
    _, t_out = jvp(f, tuple(tree_unflatten(tree, leaves)), tuple(tree_unflatten(tree, v)))
    num = _numerical_jvp(f, leaves, tree, v, eps)
    _compare("forward-mode (jvp)", order, _flat_out(t_out), num, rtol, atol,
             f"{len(leaves)} input leaves")


def check_vjp(f, args, eps, rtol, atol, order, rng):
    leaves, tree = _leaves64(args)
    v = _random_like(leaves, rng)
    out, vjp_fn = vjp(f, *tree_unflatten(tree, leaves))
    out_leaves, out_tree = tree_flatten(out)
    ct = [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) for o in out_leaves]
    cts_in = tree_flatten(vjp_fn(tree_unflatten(out_tree, ct)))[0]
    got = _inner(cts_in, v)
    want = _inner(ct, _numerical_jvp(f, leaves, tree, v, eps))
    _compare("reverse-mode (vjp)", order, [got], [want], rtol, atol,
             "inner product <vjp(ct), v> vs <ct, numerical jvp v>")


def check_grads(f: Callable, args: Sequence[Any], order: int = 2,
                modes: Sequence[str] = ("fwd", "rev"), eps: float = 1e-5,
                rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0) -> None:
    """Check ``f``'s derivatives against central differences, as
    ``jax.test_util.check_grads``: raise ``GradCheckError`` with a readable report if any
    derivative up to ``order`` is off.

    Along random directions ``v``, forward mode compares ``jvp(f, x, v)`` with
    ``(f(x + eps v) - f(x - eps v)) / 2 eps``, and reverse mode ``<vjp(ct), v>`` with
    ``<ct, numerical jvp>``; order ``k`` checks the derivative functions of order ``k - 1`` the
    same way. Float inputs are promoted to float64 so the central differences are accurate.

    Example: a correct function passes; a wrong custom rule is caught.

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.check_grads(lambda x: jnp.sin(x) * x, (np.array([0.5, 1.0]),), order=2)
    >>> @jitgraph.custom_vjp
    ... def wrong(x):
    ...     return jnp.sin(x)
    >>> wrong.defvjp(lambda x: (jnp.sin(x), x), lambda x, ct: (2.0 * ct,))
    >>> jitgraph.check_grads(wrong, (np.array([0.5]),), order=1, modes=("rev",))
    Traceback (most recent call last):
      ...
    jitgraph.check.GradCheckError: reverse-mode (vjp) derivative mismatch at order 1 ...

    ```

    :param f: the function, of positional arguments.
    :param args: a tuple of positional arguments for ``f`` (arrays or pytrees of them).
    :param order: the highest order of derivative to check.
    :param modes: ``"fwd"`` (``jvp``), ``"rev"`` (``vjp``) or both.
    :param eps: the step of the central differences.
    :param rtol: the relative tolerance.
    :param atol: the absolute tolerance.
    :param seed: the seed of the random directions.
    :raises GradCheckError: when a derivative disagrees; the report names the mode, the order,
        the output and the largest error.
    :raises ValueError: for an unknown mode.
    """
    if isinstance(modes, str):
        modes = (modes,)
    for m in modes:
        if m not in ("fwd", "rev"):
            raise ValueError(f"unknown mode {m!r}; use 'fwd' and/or 'rev'")
    rng = np.random.default_rng(seed)
    args = tuple(args)
    _check(f, args, order, 1, modes, eps, rtol, atol, rng)


def _check(f, args, order, level, modes, eps, rtol, atol, rng):
    leaves, tree = _leaves64(args)
    args = tuple(tree_unflatten(tree, leaves))
    if "fwd" in modes:
        check_jvp(f, args, eps, rtol, atol, level, rng)
        if order > 1:
            v = tuple(tree_unflatten(tree, _random_like(leaves, rng)))
            def f_jvp(*xs, v=v):
                return jvp(f, xs, v)[1]
            _check(f_jvp, args, order - 1, level + 1, ("fwd",), eps, rtol, atol, rng)
    if "rev" in modes:
        check_vjp(f, args, eps, rtol, atol, level, rng)
        if order > 1:
            out = f(*args)
            ct = tree_unflatten(tree_flatten(out)[1], [
                rng.standard_normal(np.shape(o)).astype(np.float64) for o in tree_flatten(out)[0]])
            def f_vjp(*xs, ct=ct):
                return vjp(f, *xs)[1](ct)
            _check(f_vjp, args, order - 1, level + 1, ("rev",), eps, rtol, atol, rng)
