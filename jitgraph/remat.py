"""``checkpoint`` (alias ``remat``), as ``jax.checkpoint``: the wrapped function's forward pass
is recomputed in the backward pass instead of its intermediates being kept.

A call records one ``remat`` node holding the traced function (``jitgraph.control_flow``);
its VJP is another ``remat`` node whose graph runs the forward again, then the backward.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from .control_flow import remat_p
from .core import aval_of, bind
from .errors import user_frame, where
from .lax import flatten_operands, trace_user
from .passes import optimize
from .transforms import describe_fn


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums: int | tuple = ()) -> Callable:
    """``fun`` whose intermediates are recomputed for its gradient rather than stored.

    ``policy`` is accepted for compatibility with JAX's signature; jitgraph saves nothing
    inside the function (JAX's ``nothing_saveable``), whatever the policy. ``prevent_cse``:
    the recomputation is a node of its own, which graph simplification leaves alone."""
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    what = f"checkpoint of {describe_fn(fun)}"

    @functools.wraps(fun)
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
                    name=what)
        return trees[0].unflatten(list(outs))
    return wrapped


remat = checkpoint
