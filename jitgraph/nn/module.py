"""``Module``: a layer whose instances are pytrees, so ``jit``, ``grad`` and optimizers see
plain arrays (as Equinox modules).

Attributes holding arrays, modules, or containers of them are children; every other attribute
(sizes, strides, activation functions, rates) is static structure: part of the pytree's
definition and of jit's cache key. ``grad(loss)(model, ...)`` returns a model-shaped tree of
gradients; ``tree_map`` and the optimizers work on it leaf by leaf.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import Tracer
from ..traceback_filter import api_boundary
from ..tree import register_pytree_node, tree_flatten, tree_leaves


def _is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, Tracer))


def _is_dynamic(v: Any) -> bool:
    """Whether an attribute is a child: an array or a module, or a container holding one."""
    if _is_array(v) or isinstance(v, Module):
        return True
    return isinstance(v, (list, tuple, dict)) and _holds_dynamic(v)


def _holds_dynamic(x: Any) -> bool:
    """Whether flattening ``x`` (modules as leaves) reaches an array or a module: a search that
    stops at the first one (a model's list of blocks answers at its first block; flattening
    it whole at every level made a call's pytree walk quadratic in the model's depth)."""
    if _is_array(x) or isinstance(x, Module):
        return True
    t = type(x)
    if t is list or t is tuple:
        return any(map(_holds_dynamic, x))
    if t is dict:
        return any(map(_holds_dynamic, x.values()))
    if x is None or t in (int, float, str, bool):
        return False
    return any(_is_array(y) or isinstance(y, Module)     # namedtuples, registered nodes
               for y in tree_flatten(x, is_leaf=lambda y: isinstance(y, Module))[0])


def _flatten(m: "Module"):
    attrs = vars(m)
    dyn, children, static = [], [], []
    for k in sorted(attrs):
        v = attrs[k]
        if _is_dynamic(v):
            dyn.append(k)
            children.append(v)
        else:
            static.append((k, v))
    return children, (tuple(dyn), tuple(static))


def _unflatten(cls, aux, children):
    dyn, static = aux
    m = object.__new__(cls)
    for k, v in static:
        object.__setattr__(m, k, v)
    for k, v in zip(dyn, children):
        object.__setattr__(m, k, v)
    return m


class Module:
    """Base class: subclasses set their parameters in ``__init__`` and compute in ``__call__``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, _flatten, lambda aux, ch, cls=cls: _unflatten(cls, aux, ch))
        # jitgraph's own layers are API boundaries: an error inside one shows the user's
        # frames only (traceback_filter); a user's subclass keeps its __call__ as written
        call = cls.__dict__.get("__call__")
        if call is not None and cls.__module__.startswith("jitgraph."):
            cls.__call__ = api_boundary(call)

    def parameters(self) -> list:
        """The array leaves, in pytree order."""
        return tree_flatten(self)[0]

    def num_parameters(self) -> int:
        return int(sum(np.size(p) for p in self.parameters()))

    def __repr__(self) -> str:
        parts = []
        for k, v in sorted(vars(self).items()):
            if _is_array(v):
                parts.append(f"{k}={getattr(v, 'dtype', '')}{list(np.shape(v))}")
            elif isinstance(v, Module) or not _is_dynamic(v):
                parts.append(f"{k}={v!r}")
            else:
                parts.append(f"{k}=<{len(tree_leaves(v))} arrays>")
        return f"{type(self).__name__}({', '.join(parts)})"


register_pytree_node(Module, _flatten, lambda aux, ch: _unflatten(Module, aux, ch))
