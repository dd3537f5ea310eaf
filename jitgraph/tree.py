"""Pytrees: nested dicts, lists and tuples of leaves, flattened to a leaf list plus a hashable structure.

The structure (``TreeDef``) is hashable so it can be part of a jit cache key.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from .arrays import Array
from .core import Tracer
from .traceback_filter import filtered

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
    """Make instances of ``cls`` pytree nodes, as JAX's function of the same name: the
    transformations, ``tree_map`` and the optimizers then walk into them.

    The registration wins over the structure a type has otherwise (a registered namedtuple
    flattens as registered). A type is registered once.

    Example:

    ```pycon
    >>> import jitgraph
    >>> class Point:
    ...     def __init__(self, x, y):
    ...         self.x, self.y = x, y
    >>> jitgraph.register_pytree_node(
    ...     Point, lambda p: ((p.x, p.y), None), lambda aux, children: Point(*children))
    >>> jitgraph.tree_leaves(Point(1.0, 2.0))
    [1.0, 2.0]
    >>> jitgraph.grad(lambda p: p.x * p.y)(Point(3.0, 4.0)).x
    array(4.)

    ```

    :param cls: the class; not ``tuple``, ``list``, ``dict`` or ``None`` (built-in nodes:
        register a subclass instead).
    :param flatten: ``flatten(x) -> (children, aux)``: the children (a sequence of pytrees) and
        ``aux``, hashable data that is not a leaf (it is part of ``jit``'s cache key).
    :param unflatten: ``unflatten(aux, children) -> x``: the inverse of ``flatten``.
    :raises ValueError: when ``cls`` is a built-in node or is registered already.
    """
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
    """Flatten ``tree`` into its leaves and its structure, as ``jax.tree_util.tree_flatten``.

    Lists, tuples, dicts (in sorted key order), ``None`` (no leaves) and registered nodes
    (``register_pytree_node``) are walked; everything else is a leaf.

    Example:

    ```pycon
    >>> import jitgraph
    >>> leaves, treedef = jitgraph.tree_flatten({"b": 2, "a": (1, 3)})
    >>> leaves
    [1, 3, 2]
    >>> treedef
    TreeDef({'a': (*, *), 'b': *})

    ```

    :param tree: a pytree.
    :param is_leaf: ``is_leaf(node) -> bool``: nodes for which it returns ``True`` are leaves,
        not walked into.
    :returns: ``(leaves, treedef)``; ``tree_unflatten(treedef, leaves)`` rebuilds ``tree``.
    """
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
    ``tree_flatten``).

    Example:

    ```pycon
    >>> import jitgraph
    >>> _, treedef = jitgraph.tree_flatten({"b": 2, "a": (1, 3)})
    >>> jitgraph.tree_unflatten(treedef, [10, 20, 30])
    {'a': (10, 20), 'b': 30}

    ```

    :param treedef: a structure, from ``tree_flatten``.
    :param leaves: one leaf per ``*`` of ``treedef``, in flattening order.
    :returns: the pytree.
    """
    return treedef.unflatten(leaves)


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """``fn`` applied leaf by leaf to ``tree`` (and the trees ``rest``), as
    ``jax.tree_util.tree_map``: a pytree of the same structure holding the results.

    Example:

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> jitgraph.tree_map(lambda x: x * 2, {"w": jnp.ones(2), "b": 0.5})
    {'b': 1.0, 'w': array([2., 2.])}
    >>> jitgraph.tree_map(lambda x, y: x + y, [1, 2], [10, 20])
    [11, 22]

    ```

    :param fn: a function of one leaf of ``tree`` and the corresponding leaf of each of ``rest``.
    :param tree: a pytree.
    :param rest: pytrees of the same structure as ``tree`` (their leaves are ``fn``'s further
        arguments).
    :param is_leaf: ``is_leaf(node) -> bool``: nodes for which it returns ``True`` are passed
        to ``fn`` whole.
    :returns: a pytree of ``tree``'s structure.
    """
    leaves, td = tree_flatten(tree, is_leaf)
    others = [tree_flatten(r, is_leaf)[0] for r in rest]
    return td.unflatten([fn(*xs) for xs in zip(leaves, *others)])


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    """The leaves of a pytree in flattening order (lists, tuples, dicts and registered nodes
    are walked; ``None`` has no leaves).

    Example:

    ```pycon
    >>> import jitgraph
    >>> jitgraph.tree_leaves([1, {"x": 2, "y": None}, (3,)])
    [1, 2, 3]

    ```

    :param tree: a pytree.
    :param is_leaf: ``is_leaf(node) -> bool``: nodes for which it returns ``True`` are leaves.
    :returns: the list of leaves, as ``tree_flatten(tree)[0]``.
    """
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable | None = None) -> TreeDef:
    return tree_flatten(tree, is_leaf)[1]


def _as_array_leaf(x: Any) -> Any:
    t = x.__class__
    if t is np.ndarray:
        return x.view(Array)
    return np.asarray(x).view(Array) if isinstance(x, np.generic) else x


_UNCHANGED = (Array, Tracer, float, int, bool, type(None), str)


def as_arrays(tree: Any) -> Any:
    """``tree`` with its NumPy arrays and NumPy scalars as ``arrays.Array`` (JAX's array
    methods: ``block_until_ready``, ``.at``), other leaves and traced values unchanged: what
    the eager transforms (``grad``, ``vmap``, ``lax.scan``...) return, as JAX's return
    ``jax.Array``. Lists, tuples and dicts are walked directly (a gradient's parameter tree,
    on every call), other pytree nodes through ``tree_map``."""
    t = tree.__class__
    if t is np.ndarray:
        return tree.view(Array)
    if t in _UNCHANGED:
        return tree
    if t is list or t is tuple:
        return t([as_arrays(x) for x in tree])
    if t is dict:
        return {k: as_arrays(v) for k, v in tree.items()}
    return tree_map(_as_array_leaf, tree)


def returns_arrays(fn: Callable) -> Callable:
    """``fn`` as an API boundary (``traceback_filter``: errors leave it with the user's frames)
    whose result passes through ``as_arrays``: a public transform's eager results answer JAX's
    array methods."""
    @functools.wraps(fn)
    def with_arrays(*args, **kwargs):
        try:
            r = fn(*args, **kwargs)
        except Exception as err:
            raise filtered(err)
        return as_arrays(r)
    return with_arrays


# ``jax.tree``'s short names (``jax.tree.flatten`` ...), for code written against them
flatten, unflatten, map, leaves, structure = (tree_flatten, tree_unflatten, tree_map,
                                              tree_leaves, tree_structure)


def key_paths(tree: Any) -> list[str]:
    """Each leaf's path in ``tree`` as Python indexing, as JAX's ``keystr`` spells it:
    ``['w']``, ``[0][1]``, ``.mu`` (``''`` for a tree that is one leaf)."""
    _, treedef = tree_flatten(tree)
    out: list[str] = []

    def walk(node, prefix):
        if node == "*":
            out.append(prefix)
            return
        kind, meta, children = node
        for i, c in enumerate(children):
            if kind == "dict":
                step = f"[{meta[i]!r}]"
            elif kind == "namedtuple":
                step = f".{meta._fields[i]}"
            else:
                step = f"[{i}]"
            walk(c, prefix + step)
    walk(treedef.node, "")
    return out


def argument_leaf_names(args: Sequence[Any], kwargs: dict | None = None,
                        params: Sequence[str] = (), positions: Sequence[int] | None = None,
                        expressions: bool = False) -> list[str]:
    """One name per leaf of a call's ``(args, kwargs)``, in pytree order, for error messages:
    ``argument 1 ('x')`` for an array argument, ``argument 0 at params['scale']`` for a leaf
    inside one, ``keyword argument 'lr'``; with ``expressions`` the leaf as Python code
    (``x``, ``params['scale']``, ``args[2]``, ``lr``), as the compile log names it.
    ``params`` are the function's positional parameter names and ``positions`` the arguments'
    own indices (when static arguments were taken out)."""
    positions = range(len(args)) if positions is None else positions
    out: list[str] = []
    for i, a in zip(positions, args):
        name = params[i] if i < len(params) else None
        base = name or f"args[{i}]"
        for path in key_paths(a):
            if expressions:
                out.append(base + path)
            elif not path:
                out.append(f"argument {i}" + (f" ({name!r})" if name else ""))
            else:
                out.append(f"argument {i} at {base}{path}")
    for k in sorted_keys(kwargs or {}):            # (the pytree order of a dict)
        for path in key_paths(kwargs[k]):
            if expressions:
                out.append(f"{k}{path}")
            else:
                out.append(f"keyword argument {k!r}" if not path
                           else f"keyword argument at {k}{path}")
    return out
