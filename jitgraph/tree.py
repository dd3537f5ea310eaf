"""Pytrees: nested dicts, lists and tuples of leaves, flattened to a leaf list plus a hashable structure.

The structure (``TreeDef``) is hashable so it can be part of a jit cache key.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .arrays import Array
from .core import Tracer

_LEAF = "*"


class TreeDef:
    """Hashable description of a pytree's containers (leaves are ``*``)."""

    __slots__ = ("node", "num_leaves", "_hash")

    def __init__(self, node: Any, num_leaves: int):
        self.node = node
        self.num_leaves = num_leaves
        self._hash = hash(node)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeDef) and self.node == other.node

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"TreeDef({_describe(self.node)})"

    def unflatten(self, leaves: list) -> Any:
        node = self.node
        if node is _LEAF:
            return leaves[0]
        if node is _ONE_TUPLE:      # (the arguments of a one-argument function)
            return (leaves[0],)
        if node is _LEAF_NONE:      # (grad's (value, aux) without aux)
            return (leaves[0], None)
        return _build(node, iter(leaves))


    def expression(self, names: list[str]) -> str | None:
        """Python source building this tree from leaf variables ``names`` (for generated call
        paths that return a pytree without walking it), or None where a node needs more than
        a literal (namedtuples, registered nodes, dicts with other than str/int keys)."""
        it = iter(names)
        try:
            return _expr(self.node, it)
        except _NoLiteral:
            return None


class _NoLiteral(Exception):
    pass


def _expr(node: Any, it) -> str:
    if node == _LEAF:
        return next(it)
    kind, meta, children = node
    parts = [_expr(c, it) for c in children]
    if kind == "tuple":
        return "(" + "".join(p + ", " for p in parts) + ")"
    if kind == "list":
        return "[" + ", ".join(parts) + "]"
    if kind == "none":
        return "None"
    if kind == "dict" and all(type(k) in (str, int) for k in meta):
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(meta, parts)) + "}"
    raise _NoLiteral


def _describe(node: Any) -> str:
    if node == _LEAF:
        return "*"
    kind, meta, children = node
    inner = ", ".join(_describe(c) for c in children)
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_describe(c)}" for k, c in zip(meta, children)) + "}"
    if kind == "list":
        return f"[{inner}]"
    if kind == "none":
        return "None"
    return f"({inner},)" if len(children) == 1 else f"({inner})"


def _flatten(x: Any, leaves: list, is_leaf: Callable | None) -> Any:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    t = type(x)
    if t is tuple or t is list:
        return ("tuple" if t is tuple else "list", None,
                tuple([_flatten(c, leaves, is_leaf) for c in x]))
    if t is dict:
        keys = sorted_keys(x)
        return ("dict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    # the registry before any structural test, as JAX: a registered namedtuple (or tuple or
    # dict subclass) flattens as its registration says
    custom = _CUSTOM.get(t)
    if custom is not None:
        children, aux = custom[0](x)
        return ("custom", (t, aux), tuple(_flatten(c, leaves, is_leaf) for c in children))
    if x is None:
        return ("none", None, ())
    if isinstance(x, tuple) and hasattr(t, "_fields"):  # namedtuple
        return ("namedtuple", t, tuple(_flatten(c, leaves, is_leaf) for c in x))
    leaves.append(x)
    return _LEAF


def sorted_keys(d: dict) -> tuple:
    """A dict's keys in pytree order: sorted, as JAX sorts them (by ``repr`` where the keys
    do not compare, e.g. mixed strings and ints)."""
    try:
        return tuple(sorted(d))
    except TypeError:
        return tuple(sorted(d, key=repr))


def _build(node: Any, it) -> Any:
    if node == _LEAF:
        return next(it)
    kind, meta, children = node
    if kind == "tuple":
        return tuple([_build(c, it) for c in children])
    if kind == "list":
        return [_build(c, it) for c in children]
    if kind == "dict":
        return {k: _build(c, it) for k, c in zip(meta, children)}
    if kind == "namedtuple":
        return meta(*[_build(c, it) for c in children])
    if kind == "custom":
        cls, aux = meta
        return _CUSTOM[cls][1](aux, [_build(c, it) for c in children])
    return None


_CUSTOM: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    """Make instances of ``cls`` pytree nodes, as JAX's function of the same name:
    ``flatten(x) -> (children, aux)`` with ``aux`` hashable (it is part of jit's cache key),
    ``unflatten(aux, children) -> x``. The registration wins over the structure a type has
    otherwise (a registered namedtuple flattens as registered)."""
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node: expected a class, got {cls!r}")
    if cls in (tuple, list, dict, type(None)):
        raise ValueError(f"register_pytree_node: {cls.__name__} is a built-in pytree node; "
                         "register a subclass instead")
    if cls in _CUSTOM:
        raise ValueError(f"register_pytree_node: {cls.__qualname__} is registered already "
                         "(as in JAX, a type is registered once)")
    _CUSTOM[cls] = (flatten, unflatten)


def registered_flatten(cls: type) -> Callable | None:
    """The ``flatten`` registered for ``cls`` (``register_pytree_node``), or None: for code
    that walks one level of a pytree at a time (``vmap``'s in_axes prefixes)."""
    entry = _CUSTOM.get(cls)
    return None if entry is None else entry[0]


_ONE_TUPLE = ("tuple", None, (_LEAF,))
_LEAF_NONE = ("tuple", None, (_LEAF, ("none", None, ())))
_LEAF_TREE = TreeDef(_LEAF, 1)
_ONE_TUPLE_TREE = TreeDef(_ONE_TUPLE, 1)
_LEAF_NONE_TREE = TreeDef(_LEAF_NONE, 1)
_PLAIN = frozenset({np.ndarray, Array, float, Tracer})   # leaves for certain (eager code passes them a lot)


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, TreeDef]:
    """Flatten ``tree`` into (leaves, treedef)."""
    if is_leaf is None:
        t = type(tree)
        if t in _PLAIN:
            return [tree], _LEAF_TREE
        if t is tuple and 0 < len(tree) <= 2 and type(tree[0]) in _PLAIN:
            if len(tree) == 1:
                return [tree[0]], _ONE_TUPLE_TREE
            if tree[1] is None:
                return [tree[0]], _LEAF_NONE_TREE
    leaves: list = []
    node = _flatten(tree, leaves, is_leaf)
    return leaves, TreeDef(node, len(leaves))


def tree_unflatten(treedef: TreeDef, leaves: list) -> Any:
    """Rebuild the pytree ``treedef`` describes from ``leaves`` (the inverse of
    ``tree_flatten``)."""
    return treedef.unflatten(leaves)


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """``fn`` applied leaf by leaf to ``tree`` and the trees ``rest`` of the same structure."""
    leaves, td = tree_flatten(tree, is_leaf)
    others = [tree_flatten(r, is_leaf)[0] for r in rest]
    return td.unflatten([fn(*xs) for xs in zip(leaves, *others)])


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    """The leaves of a pytree in flattening order (lists, tuples, dicts and registered nodes
    are walked)."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable | None = None) -> TreeDef:
    return tree_flatten(tree, is_leaf)[1]


# ``jax.tree``'s short names (``jax.tree.flatten`` ...), for code written against them
flatten, unflatten, map, leaves, structure = (tree_flatten, tree_unflatten, tree_map,
                                              tree_leaves, tree_structure)
