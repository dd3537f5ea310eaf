"""A hashable key of the Python state a function can read, for caches of traced graphs.

Tracing ``f`` bakes into its graph whatever ``f`` reads besides its arguments: closure cells,
defaults, module globals, and the same for every function it calls. A cache of traces is
only right while all of that is unchanged, so ``state_key`` collects it: immutable values
(numbers, strings, small arrays by their bytes) by value, functions by identity plus their
own state (recursively), modules and library functions and classes by identity. Anything
whose contents could change unseen (a list, a dict, an object, a class of the user's, a
large array, a traced value) makes the key ``None``: such functions are traced on every
call, as before.

Computing the key walks every function again on each call, which costs as much as a small
eager operation. So each key is kept with what it was computed from (``_Walk.reads``: a
function's code, defaults and module, a closure cell's contents, a global's binding, an
object's ``_state_key_parts``, a small array's bytes); while every one of those reads back
the same object (the same bytes for arrays), the key is the same and is served without the walk.
"""
from __future__ import annotations

import functools
import types
from itertools import repeat
from operator import is_
from typing import Any, Callable

import numpy as np

from .arrays import Array

SMALL_ARRAY = 1024          # arrays up to this many elements are keyed by their bytes
MAX_DEPTH = 8               # functions reached through more calls than this: not keyed

_BY_VALUE = frozenset({int, bool, str, bytes, type(None), range, slice})
_LIBRARIES = frozenset({"jitgraph", "numpy", "scipy", "math", "builtins", "functools"})


class _Unkeyable(Exception):
    """Raised inside ``state_key`` when some reachable state cannot be keyed."""


_NAMES: dict = {}      # id(code) -> (code, names): hashing a code object costs more than this


def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """Every name ``code`` (and the code of functions, lambdas and comprehensions defined in
    it) looks up: globals among them, and attribute names, which are harmless extras."""
    hit = _NAMES.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_global_names(c))
    out = tuple(sorted(names))
    if len(_NAMES) >= 1024:
        _NAMES.clear()
    _NAMES[id(code)] = (code, out)
    return out


class _Same:
    """An object compared by identity and hashed by id (a code object's own hash is
    recomputed from its contents on every lookup); holding it keeps the id unique."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


class _Walk:
    """One key computation: the ids visited (cycles), and every read of state that can change
    (getter, object, what it gave), to tell later whether the key still holds."""

    __slots__ = ("ids", "reads")

    def __init__(self):
        self.ids: set = set()
        self.reads: list = []

    def __contains__(self, i: int) -> bool:
        return i in self.ids

    def add(self, i: int) -> None:
        self.ids.add(i)

    def read(self, getter: Callable, obj: Any) -> Any:
        got = getter(obj)
        self.reads.append((getter, obj, got))
        return got


_ABSENT = object()           # a global that is not defined, or an empty closure cell


def _cell(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:          # an empty cell (a name assigned later)
        return _ABSENT


def _function_state(fn: types.FunctionType) -> tuple:
    """What a function's key reads of it: module, code, defaults, closure cells' contents, the
    bindings of the global names its code looks up (``_ABSENT`` where there is none), and
    last the keyword defaults' names and values (their dict can change in place)."""
    code = fn.__code__
    cells = fn.__closure__
    kw = fn.__kwdefaults__
    return ((fn.__module__, code, fn.__defaults__, kw)
            + (tuple(map(_cell, cells)) if cells else ())
            + tuple(map(fn.__globals__.get, _global_names(code), repeat(_ABSENT)))
            + ((*kw, *kw.values()) if kw else ()))


def _array_key(x: np.ndarray) -> tuple:
    if x.size > SMALL_ARRAY or x.dtype.hasobject:
        raise _Unkeyable
    return ("nd", x.shape, x.dtype.str, x.tobytes())


def _never(_) -> Any:
    """A read that never gives the same again (state that is not worth comparing)."""
    return object()


_module = lambda fn: getattr(fn, "__module__", None)  # noqa: E731
_parts = lambda x: tuple(x._state_key_parts())        # noqa: E731
_EACH_SAME = frozenset({_function_state, _parts})   # tuples compared item by item, by identity


def _still(reads: list) -> bool:
    """Every read gives what it gave when the key was computed."""
    try:
        for getter, obj, got in reads:
            now = getter(obj)
            if now is got:
                continue
            if getter in _EACH_SAME:
                if len(now) != len(got) or not all(map(is_, now, got)):
                    return False
            elif getter is not _array_key or now != got:
                return False
    except _Unkeyable:
        return False
    return True


def _library_name(mod: Any) -> bool:
    return isinstance(mod, str) and mod.partition(".")[0] in _LIBRARIES


def _library(fn: Any, seen: _Walk) -> bool:
    return _library_name(seen.read(_module, fn))


def _value_key(x: Any, depth: int, seen: _Walk) -> Any:
    t = type(x)
    if t is types.FunctionType:
        return _function_key(x, depth + 1, seen)
    if t is types.ModuleType:
        return ("id", x)
    if t in _BY_VALUE:
        return (t, x)
    if t is float or t is complex:      # by bits: 0.0 and -0.0 compare equal
        return (t, repr(x))
    if t is tuple or t is frozenset:
        return (t, tuple(_value_key(e, depth, seen) for e in x))
    if t is np.ndarray or t is Array:
        return seen.read(_array_key, x)
    if isinstance(x, np.generic):
        return ("np", x.dtype.str, x.tobytes())
    if isinstance(x, np.dtype):
        return ("dtype", x.str)
    if t is functools.partial:     # (its keywords are a dict: the key is not kept)
        seen.read(_never, x)
        return ("partial", _value_key(x.func, depth, seen), _value_key(x.args, depth, seen),
                _value_key(tuple(sorted(x.keywords.items())), depth, seen))
    keyed = getattr(x, "_state_key_parts", None)   # e.g. a custom_vjp function
    if keyed is not None:
        if id(x) in seen:
            return ("id", x)
        seen.add(id(x))
        return ("obj", x, tuple(_value_key(p, depth + 1, seen) for p in seen.read(_parts, x)))
    if t is types.BuiltinFunctionType or (callable(x) and _library(x, seen)
                                         and not hasattr(x, "__self__")):
        return ("id", x)      # identity; the key holds x, so the id is never reused
    raise _Unkeyable          # (a user's class too: its attributes can be reassigned)


def _function_key(fn: types.FunctionType, depth: int, seen: _Walk) -> Any:
    if id(fn) in seen:
        return ("id", fn)
    if _library_name(getattr(fn, "__module__", None)):
        seen.read(_module, fn)
        return ("id", fn)
    if depth > MAX_DEPTH:
        raise _Unkeyable
    seen.add(id(fn))
    _, code, defaults, kwdefaults, *rest = seen.read(_function_state, fn)   # (module first)
    n_cells = len(fn.__closure__ or ())
    parts: list = [fn, _Same(code)]
    for c in rest[:n_cells]:
        parts.append(("empty",) if c is _ABSENT else _value_key(c, depth, seen))
    if defaults:
        parts.append(_value_key(defaults, depth, seen))
    if kwdefaults:
        parts.append(_value_key(tuple(sorted(kwdefaults.items())), depth, seen))
    for name, v in zip(_global_names(code), rest[n_cells:]):
        if v is not _ABSENT:
            parts.append((name, _value_key(v, depth, seen)))
    return tuple(parts)


_KEPT: dict = {}        # ids of the functions -> (functions, reads, key); see the docstring
_KEPT_MAX = 256


def state_key(*fns: Callable) -> tuple | None:
    """A hashable key equal on two calls only if ``fns`` can read the same state on both
    (see the module docstring), or None when that cannot be told cheaply."""
    ids = tuple(map(id, fns))
    kept = _KEPT.get(ids)
    if kept is not None and all(map(is_, kept[0], fns)) and _still(kept[1]):
        return kept[2]
    walk = _Walk()
    try:
        key = tuple(_value_key(f, 0, walk) for f in fns)
    except (_Unkeyable, RecursionError):
        return None
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[ids] = (fns, walk.reads, key)
    return key
