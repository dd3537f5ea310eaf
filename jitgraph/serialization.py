"""Checkpoints: ``save(path, tree)`` / ``load(path, like)`` for parameter and optimizer pytrees.

The file is a NumPy ``.npz``: one array per leaf plus a JSON header with the tree's structure
and each leaf's shape and dtype. Writing goes to a temporary file in the same directory, then
``os.replace``: a crash never leaves a half-written checkpoint under ``path``. ``load`` with
``like`` (a tree of the expected structure, e.g. freshly initialized parameters) refuses a file
whose structure, shapes or dtypes differ, and says which leaf; without ``like`` it rebuilds
trees of dicts, lists and tuples.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from .tree import TreeDef, tree_flatten, tree_unflatten

_HEADER = "__jitgraph_checkpoint__"
_FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that does not match what the caller expects (or is not one)."""


def _node_json(node) -> Any:
    if node == "*":
        return "*"
    kind, meta, children = node
    kids = [_node_json(c) for c in children]
    if kind == "dict":
        return {"dict": [[k if isinstance(k, str) else repr(k), c] for k, c in zip(meta, kids)]}
    if kind in ("list", "tuple"):
        return {kind: kids}
    if kind == "none":
        return None
    cls = meta if kind == "namedtuple" else meta[0]
    return {"node": f"{cls.__module__}.{cls.__qualname__}", "children": kids}


def _json_node(js) -> Any:
    """Rebuild a plain (dict/list/tuple/None) structure; custom nodes need ``like``."""
    if js == "*":
        return "*"
    if js is None:
        return ("none", None, ())
    if "dict" in js:
        keys = tuple(k for k, _ in js["dict"])
        return ("dict", keys, tuple(_json_node(c) for _, c in js["dict"]))
    if "list" in js or "tuple" in js:
        kind = "list" if "list" in js else "tuple"
        return (kind, None, tuple(_json_node(c) for c in js[kind]))
    raise CheckpointError(f"the checkpoint holds a {js['node']} object; pass like=<a tree of "
                          "that structure> to load() to rebuild it")


def _leaf_desc(i: int, paths: list[str]) -> str:
    return paths[i] if i < len(paths) else f"leaf {i}"


def _paths(node, prefix: str = "") -> list[str]:
    if node == "*":
        return [prefix or "<root>"]
    kind, meta, children = node
    out = []
    for i, c in enumerate(children):
        if kind == "dict":
            key = f"[{meta[i]!r}]"
        elif kind == "custom" and isinstance(meta[1], tuple) and meta[1] \
                and isinstance(meta[1][0], tuple) and i < len(meta[1][0]):
            key = f".{meta[1][0][i]}"          # Module attribute names
        else:
            key = f"[{i}]"
        out += _paths(c, prefix + key)
    return out


def save(path: str | os.PathLike, tree: Any) -> None:
    """Write ``tree``'s arrays and structure to ``path`` (a NumPy ``.npz``), atomically: a
    crash never leaves a half-written file under ``path``.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> jitgraph.save("params.npz", {"w": np.ones(2), "step": np.array(3)})
    >>> jitgraph.load("params.npz")
    {'step': array(3), 'w': array([1., 1.])}

    ```

    :param path: the file to write (replaced if it exists).
    :param tree: a pytree of arrays (parameters, an optimizer state); every leaf is an array or
        a number.
    :raises TypeError: when a leaf is not an array.
    """
    leaves, tdef = tree_flatten(tree)
    arrays = {}
    specs = []
    for i, x in enumerate(leaves):
        a = np.asarray(x)
        if a.dtype == object:
            raise TypeError(f"save: leaf {_paths(tdef.node)[i]} is not an array ({type(x).__name__})")
        arrays[f"leaf_{i}"] = a
        specs.append([list(a.shape), a.dtype.str])
    header = {"format": _FORMAT, "structure": _node_json(tdef.node), "leaves": specs}
    arrays[_HEADER] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike, like: Any = None) -> Any:
    """Read a checkpoint written by ``save``.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> jitgraph.save("params.npz", {"w": np.ones(2)})
    >>> jitgraph.load("params.npz", like={"w": np.zeros(2)})
    {'w': array([1., 1.])}
    >>> jitgraph.load("params.npz", like={"w": np.zeros(3)})
    Traceback (most recent call last):
      ...
    jitgraph.serialization.CheckpointError: load: params.npz: ['w'] is float64[2] in the file, ...

    ```

    :param path: a file written by ``save``.
    :param like: a pytree of the expected structure (freshly initialized parameters, say): the
        file's structure, every shape and every dtype must match it, and the result has
        ``like``'s node types (a registered class, a ``Module``). Without it, the tree is rebuilt
        from dicts, lists and tuples.
    :returns: the pytree of NumPy arrays.
    :raises jitgraph.serialization.CheckpointError: when the file is not a checkpoint, or does not
        match ``like`` (the message names the leaf).
    """
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if _HEADER not in z.files:
                raise CheckpointError(f"load: {path} is not a jitgraph checkpoint (no header)")
            header = json.loads(bytes(z[_HEADER]).decode())
            arrays = [z[f"leaf_{i}"] for i in range(len(header["leaves"]))]
    except (OSError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"load: cannot read {path} as a checkpoint: {e}") from None
    if like is None:
        node = _json_node(header["structure"])
        return tree_unflatten(TreeDef(node, len(arrays)), arrays)
    want_leaves, want_def = tree_flatten(like)
    if _node_json(want_def.node) != header["structure"]:
        raise CheckpointError(
            f"load: {path} holds a different tree than expected: the file has "
            f"{len(arrays)} arrays in structure {json.dumps(header['structure'])[:300]}, the "
            f"caller expects {len(want_leaves)} in {json.dumps(_node_json(want_def.node))[:300]}"
            " (a checkpoint of another model or optimizer?)")
    paths = _paths(want_def.node)
    for i, (got, want) in enumerate(zip(arrays, want_leaves)):
        w = np.asarray(want)
        if got.shape != w.shape or got.dtype != w.dtype:
            raise CheckpointError(
                f"load: {path}: {_leaf_desc(i, paths)} is {got.dtype}{list(got.shape)} in the "
                f"file, but the caller expects {w.dtype}{list(w.shape)}")
    return tree_unflatten(want_def, arrays)
