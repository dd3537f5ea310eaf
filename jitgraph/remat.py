"""``checkpoint`` (alias ``remat``), as ``jax.checkpoint``: the wrapped function's forward pass
is recomputed in the backward pass instead of its intermediates being kept, except the values
a ``policy`` saves (``checkpoint_policies``, and ``checkpoint_name`` to save values by name).

A call records one ``remat`` node holding the traced function (``jitgraph.control_flow``);
its VJP is another ``remat`` node whose graph runs the forward again, then the backward. Under
``jit`` the recomputation stays in the backward part of the compiled program: it reads the
checkpoint's inputs through an optimization barrier taken with the cotangents.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from .control_flow import remat_p
from .core import Primitive, aval_of, bind, register
from .errors import user_frame, where
from .lax import flatten_operands, trace_user
from .passes import optimize
from .transforms import describe_fn
from .tree import returns_arrays


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums: int | tuple = ()) -> Callable:
    """``fun`` whose intermediates are recomputed for its gradient rather than stored, as
    ``jax.checkpoint`` (``jitgraph.remat`` is the same function): less memory for the backward
    pass, at the price of running ``fun``'s forward pass again there.

    The values and derivatives are those of ``fun``; only what is kept between the forward
    and the backward pass changes.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> def block(x):
    ...     return jnp.sum(jnp.tanh(jnp.tanh(x)))
    >>> jitgraph.grad(jitgraph.checkpoint(block))(jnp.zeros(2))
    array([1., 1.])
    >>> jitgraph.grad(jitgraph.checkpoint(lambda x, n: x ** n, static_argnums=1))(2.0, 3)
    array(12.)

    ```

    :param fun: the function whose forward pass is recomputed.
    :param prevent_cse: (default, as in JAX) under ``jit`` the recomputation is neither merged
        with the forward pass nor run before the backward pass needs it; ``False`` lets the
        compiler merge them (then checkpointing saves nothing, as in JAX).
    :param policy: ``policy(prim, *input_avals, **params) -> bool``: which intermediates to save
        instead of recomputing, one of ``jitgraph.checkpoint_policies`` (default: none, JAX's
        ``nothing_saveable``).
    :param static_argnums: positional arguments that are not traced (Python values ``fun``
        branches on).
    :returns: a function with ``fun``'s arguments and results.
    :raises TypeError: when ``policy`` is not a function.
    """
    if policy is not None and not callable(policy):
        raise TypeError(f"checkpoint: policy must be a function (prim, *avals, **params) -> bool "
                        f"such as jitgraph.checkpoint_policies.dots_saveable, got {policy!r}")
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    what = f"checkpoint of {describe_fn(fun)}"

    @functools.wraps(fun)
    @returns_arrays
    def wrapped(*args: Any) -> Any:
        dyn = [i for i in range(len(args)) if i not in statics]

        def f(*d):
            full = list(args)
            for i, x in zip(dyn, d):
                full[i] = x
            return fun(*full)
        leaves, in_tree = flatten_operands(tuple(args[i] for i in dyn), f"an argument of {what}")
        try:
            g, caps, trees = trace_user(f, in_tree, [aval_of(x) for x in leaves], what)
        except TypeError as e:
            raise type(e)(f"{e}\n  (in {what}, called at {where(user_frame(2))})") from None
        outs = bind(remat_p, *leaves, *caps, _graph=optimize(g), prevent_cse=bool(prevent_cse),
                    name=what, policy=policy)
        return trees[0].unflatten(list(outs))
    return wrapped


remat = checkpoint


# ------------------------------------------------------------------ saving by name
def _name_batch(args, dims, *, name):
    return checkpoint_name_p(args[0], name=name), dims[0]


checkpoint_name_p = register(Primitive(
    "checkpoint_name", kind="elementwise", abstract_eval=lambda x, *, name: x,
    impl=lambda x, *, name: x, vjp=lambda g, out, x, *, name: [g],
    jvp=lambda ts, out, x, *, name: ts[0], codegen=lambda ctx, x, *, name: x,
    batch=_name_batch))


def checkpoint_name(x: Any, name: str) -> Any:
    """``x``, labelled ``name`` for the policies ``checkpoint_policies.save_only_these_names``
    and ``save_any_names_but_these``, as ``jax.ad_checkpoint.checkpoint_name``.

    Example: keep the labelled value for the backward pass, recompute the rest.

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> def f(x):
    ...     h = jitgraph.checkpoint_name(x * 2.0, "h")
    ...     return jnp.sum(h ** 2)
    >>> policy = jitgraph.checkpoint_policies.save_only_these_names("h")
    >>> jitgraph.grad(jitgraph.checkpoint(f, policy=policy))(jnp.array([1.0, 2.0]))
    array([ 8., 16.])

    ```

    :param x: an array or a traced value.
    :param name: the label.
    :returns: ``x``'s value.
    """
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: name must be a str, got {name!r}")
    return checkpoint_name_p(x, name=name)


# ------------------------------------------------------------------ policies
PRODUCTS = ("matmul",)


class _Policy:
    """A named, hashable saving rule: ``policy(prim, *input_avals, **params) -> bool``."""

    def __init__(self, name: str, test: Callable, args: tuple = ()):
        self.name, self.test, self.args = name, test, args

    def __call__(self, prim: Primitive, *avals: Any, **params: Any) -> bool:
        return bool(self.test(prim, avals, params))

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.args))})" if self.args else self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Policy) and (self.name, self.args) == (other.name, other.args)

    def __hash__(self) -> int:
        return hash((self.name, self.args))


def _named(prim, params, names) -> bool:
    return prim is checkpoint_name_p and params["name"] in names


def _save_only_these_names(*names: str) -> _Policy:
    """Save the values labelled with ``checkpoint_name`` by one of ``names``."""
    return _Policy("save_only_these_names", lambda p, a, k: _named(p, k, names), names)


def _save_any_names_but_these(*names: str) -> _Policy:
    """Save every value labelled with ``checkpoint_name``, except those named ``names``."""
    return _Policy("save_any_names_but_these",
                   lambda p, a, k: p is checkpoint_name_p and k["name"] not in names, names)


def _save_from_both_policies(a: Callable, b: Callable) -> _Policy:
    """Save what either policy saves."""
    return _Policy("save_from_both_policies",
                   lambda p, av, k: a(p, *av, **k) or b(p, *av, **k), (a, b))


class checkpoint_policies:
    """JAX's ``jax.checkpoint_policies``: which intermediates a ``checkpoint`` keeps for the
    backward pass (the rest it recomputes there). Under ``jit``, the compiled program's
    planned peak memory (``lower(...).memory_analysis()``) falls as a policy saves less."""
    everything_saveable = _Policy("everything_saveable", lambda p, a, k: True)
    nothing_saveable = _Policy("nothing_saveable", lambda p, a, k: False)
    dots_saveable = _Policy("dots_saveable", lambda p, a, k: p.name in PRODUCTS)
    checkpoint_dots = dots_saveable
    dots_with_no_batch_dims_saveable = _Policy(
        "dots_with_no_batch_dims_saveable",
        lambda p, a, k: p.name in PRODUCTS and all(x.ndim == 2 for x in a))
    checkpoint_dots_with_no_batch_dims = dots_with_no_batch_dims_saveable
    save_only_these_names = staticmethod(_save_only_these_names)
    save_any_names_but_these = staticmethod(_save_any_names_but_these)
    save_from_both_policies = staticmethod(_save_from_both_policies)
