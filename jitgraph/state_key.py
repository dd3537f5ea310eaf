"""A hashable key of the Python state a function can read, for caches of traced graphs.

Tracing ``f`` bakes into its graph whatever ``f`` reads besides its arguments: closure cells,
defaults, module globals, and the same for every function it calls. A cache of traces is
only right while all of that is unchanged, so ``state_key`` collects it: immutable values
(numbers, strings, small arrays by their bytes) by value, functions by identity plus their
own state (recursively), modules and library functions and classes by identity. Anything
whose contents could change unseen (a list, a dict, an object, a class of the user's, a
large array, a traced value) makes the key ``None``: such functions are traced on every
call, as before.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable

import numpy as np

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


def _library(fn: Any) -> bool:
    mod = getattr(fn, "__module__", None)
    return isinstance(mod, str) and mod.partition(".")[0] in _LIBRARIES


def _value_key(x: Any, depth: int, seen: set) -> Any:
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
    if t is np.ndarray:
        if x.size > SMALL_ARRAY or x.dtype.hasobject:
            raise _Unkeyable
        return ("nd", x.shape, x.dtype.str, x.tobytes())
    if isinstance(x, np.generic):
        return ("np", x.dtype.str, x.tobytes())
    if isinstance(x, np.dtype):
        return ("dtype", x.str)
    if t is functools.partial:
        return ("partial", _value_key(x.func, depth, seen), _value_key(x.args, depth, seen),
                _value_key(tuple(sorted(x.keywords.items())), depth, seen))
    keyed = getattr(x, "_state_key_parts", None)   # e.g. a custom_vjp function
    if keyed is not None:
        if id(x) in seen:
            return ("id", x)
        seen.add(id(x))
        return ("obj", x, tuple(_value_key(p, depth + 1, seen) for p in keyed()))
    if t is types.BuiltinFunctionType or (callable(x) and _library(x)
                                         and not hasattr(x, "__self__")):
        return ("id", x)      # identity; the key holds x, so the id is never reused
    raise _Unkeyable          # (a user's class too: its attributes can be reassigned)


def _function_key(fn: types.FunctionType, depth: int, seen: set) -> Any:
    if _library(fn) or id(fn) in seen:
        return ("id", fn)
    if depth > MAX_DEPTH:
        raise _Unkeyable
    seen.add(id(fn))
    code = fn.__code__
    parts: list = [fn, _Same(code)]
    if fn.__closure__:
        for cell in fn.__closure__:
            try:
                parts.append(_value_key(cell.cell_contents, depth, seen))
            except ValueError:          # an empty cell (a name assigned later)
                parts.append(("empty",))
    if fn.__defaults__:
        parts.append(_value_key(fn.__defaults__, depth, seen))
    if fn.__kwdefaults__:
        parts.append(_value_key(tuple(sorted(fn.__kwdefaults__.items())), depth, seen))
    g = fn.__globals__
    for name in _global_names(code):
        if name in g:
            parts.append((name, _value_key(g[name], depth, seen)))
    return tuple(parts)


def state_key(*fns: Callable) -> tuple | None:
    """A hashable key equal on two calls only if ``fns`` can read the same state on both
    (see the module docstring), or None when that cannot be told cheaply."""
    try:
        seen: set = set()
        return tuple(_value_key(f, 0, seen) for f in fns)
    except (_Unkeyable, RecursionError):
        return None
