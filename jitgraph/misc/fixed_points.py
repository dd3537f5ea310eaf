"""``fixed_point``: the fixed point of an iteration, differentiated implicitly, as
``autograd.misc.fixed_points.fixed_point``.

```python
import jitgraph
import jitgraph.numpy as jnp
from jitgraph.misc.fixed_points import fixed_point

def newton_sqrt_iter(a):
    return lambda x: 0.5 * (x + a / x)

def sqrt(a, guess=10.0):
    return fixed_point(newton_sqrt_iter, a, guess, lambda x, y: jnp.abs(x - y), 1e-4)

jitgraph.grad(sqrt)(2.0)              # 0.5 / sqrt(2), not a derivative of the iterations
```

The forward pass iterates ``x = f(a)(x)`` from ``x0`` until ``distance(x, x_prev) <= tol``
(a ``lax.while_loop``, so it also runs under ``jit``). The reverse pass does not unroll those
iterations: at the fixed point ``x* = f(a)(x*)``, the cotangent ``g`` of ``x*`` gives ``a``
the cotangent ``(df/da)^T w``, where ``w = g + (df/dx)^T w`` is itself a fixed point, found by
the same iteration (autograd's rule). The backward pass is made of differentiable pieces, so
``grad(grad(sqrt))`` works too, up to the third derivative. ``x0`` gets no cotangent: the fixed
point does not depend on where the iteration starts.
"""
from __future__ import annotations

from typing import Any, Callable

from .. import numpy as jnp
from ..custom import custom_vjp
from ..lax import while_loop
from ..transforms import vjp
from ..tree import tree_map

__all__ = ["fixed_point"]

# how many times the fixed point can be differentiated in reverse mode: each order's rule is a
# custom_vjp whose passes solve with the next order's (order 0 is the plain loop, which has no
# reverse-mode derivative); tracing cost doubles with each order
ORDERS = 3


def fixed_point(f: Callable, a: Any, x0: Any, distance: Callable, tol: float) -> Any:
    """The fixed point of ``x -> f(a)(x)`` reached from ``x0``, with its derivative with
    respect to ``a`` by the implicit function theorem, as autograd's ``fixed_point``.

    :param f: ``f(a)`` returns the iteration, a function of ``x`` (``x``: an array or a pytree).
    :param a: the parameters (an array, a float or a pytree): what the result is
        differentiated with respect to.
    :param x0: where the iteration starts (``x``'s structure, shapes and dtypes).
    :param distance: ``distance(x, x_prev)``: a scalar; the iteration stops once it is at
        most ``tol`` (an array result stops once every entry is).
    :param tol: the tolerance.
    :returns: ``x`` with ``distance(f(a)(x), x) <= tol`` (the last iterate).
    """
    return _solver(f, distance, tol, ORDERS)(a, _start(f, a, x0))


def _start(f, a, x0):
    """``x0`` as arrays of the iteration's shapes and dtypes (a loop's carry keeps them; a
    scalar guess for a vector of parameters broadcasts, as in autograd's Python loop)."""
    x0 = tree_map(jnp.asarray, x0)
    x1 = f(a)(x0)
    return tree_map(lambda s, n: jnp.broadcast_to(jnp.astype(s, jnp.result_type(n)),
                                                  jnp.shape(n)), x0, x1)


def _iterate(step: Callable, x0, distance: Callable, tol: float):
    def keep_going(carry):
        x, prev = carry
        return jnp.any(jnp.asarray(distance(x, prev)) > tol)

    def body(carry):
        x, _ = carry
        return step(x), x
    return while_loop(keep_going, body, (step(x0), x0))[0]


def _add(x, y):
    return tree_map(lambda p, q: p + q, x, y)


def _adjoint(f: Callable) -> Callable:
    """The adjoint iteration of ``f`` at a fixed point: with ``params = (a, x*, g)``,
    ``w -> g + (df(a)/dx at x*)^T w``; its fixed point is the cotangent ``x*`` passes to
    ``a``. It depends on ``params`` through differentiable operations, for the next order."""
    def iteration(params):
        a, x_star, g = params
        _, vjp_x = vjp(f(a), x_star)
        return lambda w: _add(vjp_x(w)[0], g)
    return iteration


def _solver(f: Callable, distance: Callable, tol: float, order: int) -> Callable:
    """``solve(a, x0)``: the fixed point, reverse-differentiable ``order`` times."""
    def fixed_point(a, x0):
        return _iterate(f(a), x0, distance, tol)
    if order == 0:
        return fixed_point
    inner = _solver(f, distance, tol, order - 1)
    solve = custom_vjp(fixed_point)

    def fwd(a, x0):
        x = inner(a, x0)
        return x, (a, x)

    def bwd(res, g):
        a, x_star = res
        zeros = tree_map(jnp.zeros_like, g)
        w = _solver(_adjoint(f), distance, tol, order - 1)((a, x_star, g), zeros)
        _, vjp_a = vjp(lambda p: f(p)(x_star), a)
        return vjp_a(w)[0], None
    solve.defvjp(fwd, bwd)
    return solve

