"""``jit``: trace once per shape signature, compile to fused Numba kernels, cache, run.

A call computes its signature (pytree structure, each leaf's shape and dtype, Python-scalar weak
typing, static argument values). A hit runs the stored program and nothing else; a miss traces,
optimizes, fuses, generates and compiles (or loads the module from the disk cache).
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .core import Graph, Tracer
from .errors import CompileError, user_frame, where
from .passes import optimize
from .tree import tree_flatten

@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    traces: int = 0
    compile_seconds: float = 0.0
    trace_seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_STATS = CacheStats()
_ALL: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()


def cache_info() -> dict:
    """Counters over all jitted functions: hits, misses, disk_hits, traces, compile/trace seconds."""
    return _STATS.as_dict()


def clear_cache() -> None:
    """Forget every in-memory compiled program and reset the counters (the disk cache stays)."""
    for f in list(_ALL):
        f._cache.clear()
        f._fast.clear()
    _STATS.__init__()


def _log_enabled() -> bool:
    return "compiles" in os.environ.get("JITGRAPH_LOG", "")


@dataclass
class Lowered:
    """What ``jit(f).lower(*args)`` shows: the optimized graph, the kernels and the module source."""
    graph: Graph
    kernels: list
    source: str
    plan: Any = None
    program: Any = None

    def __repr__(self) -> str:
        return f"<Lowered: {len(self.graph.nodes)} graph nodes, {len(self.kernels)} kernels>"


@dataclass
class _Entry:
    program: Any
    out_tree: Any
    in_dtypes: list
    donated: set = field(default_factory=set)
    fresh: bool = True      # Numba compiles lazily: the first run's time counts as compile time
    run: Any = None         # the specialised call path (CompiledProgram.make_runner)
    log_line: str = ""
    setup_seconds: float = 0.0


def _leaf_sig(x: Any):
    """The signature entry of one argument leaf; TypeError (without the argument's name, which
    the caller adds) for values that are not arrays."""
    t = type(x)
    if t is np.ndarray:
        return (x.shape, x.dtype.char)
    if t is float or t is int or t is bool:
        return t
    if isinstance(x, np.generic):
        return ((), x.dtype.char)
    if isinstance(x, Tracer):
        return None
    if isinstance(x, (list, tuple, dict)) or x is None:
        return None
    if hasattr(x, "__cuda_array_interface__"):
        raise TypeError("a CUDA device array was passed to a function jitted for the CPU; "
                        "copy it to the host first (jitgraph.device_get(x)) or compile for the "
                        "GPU: jit(f, device='cuda')")
    if isinstance(x, str):
        raise TypeError("a string is not an array; mark the argument static "
                        "(jit(f, static_argnums=...)) to pass non-array values")
    if hasattr(x, "__array__"):
        a = np.asarray(x)
        return (a.shape, a.dtype.char)
    raise TypeError(f"expected an array or a scalar, got {type(x).__name__}; mark the "
                    "argument static (jit(f, static_argnums=...)) to pass other Python values")


def _device_leaf_sig(x: Any):
    """Signature entry of a leaf for a GPU-jitted function: device arrays as host ones."""
    from .device import leaf_signature
    sig = leaf_signature(x)
    return sig if sig is not None else _leaf_sig(x)


class JitFunction:
    """A jitted function; call it like the original. See ``jit``."""

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=(), donate_argnums=(),
                 device: str = "cpu", fastmath: bool = False):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = tuple(sorted({static_argnums} if isinstance(static_argnums, int)
                                           else set(static_argnums)))
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        if device in ("cuda", "gpu", "cuda:0"):
            from .device import DeviceArray, cuda_api
            cuda_api(f"jit({getattr(fun, '__name__', 'f')})")   # clear error if unusable
            device = "cuda"
            self._fast_types = (np.ndarray, DeviceArray)
        elif device != "cpu":
            raise ValueError(f"jit: unknown device {device!r}; use 'cpu' or 'cuda' "
                             "(jitgraph.devices() lists what is usable here)")
        else:
            self._fast_types = (np.ndarray,)
        self.device = device
        self.fastmath = fastmath
        self._cache: dict = {}
        self._fast: dict = {}
        self._last_sig: dict = {}
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self._signature = None
        _ALL.add(self)

    # ---------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and not self.static_argnums:
            key = []
            for a in args:
                if type(a) not in self._fast_types:
                    break
                key.append((a.shape, a.dtype.char))
            else:
                entry = self._fast.get(tuple(key))
                if entry is not None:
                    _STATS.hits += 1
                    return self._run(entry, args)
        return self._call_slow(args, kwargs)

    def _run(self, entry: _Entry, leaves: Sequence[Any]) -> Any:
        if entry.fresh:
            t0 = time.perf_counter()
            try:
                out = entry.run(*leaves)
            except Exception as e:
                from numba.core.errors import NumbaError
                if not isinstance(e, NumbaError):
                    raise
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise CompileError(
                    f"jit({self.__name__}): Numba could not compile the generated program "
                    f"({first}). This is a jitgraph bug; the generated source is available "
                    f"from jit(f).lower(*args).source. Workaround: run without jit.") from None
            entry.fresh = False
            first = time.perf_counter() - t0
            _STATS.compile_seconds += first
            if _log_enabled():   # logged after the first run: Numba compiles lazily
                print(entry.log_line.format(seconds=entry.setup_seconds + first), file=sys.stderr)
            return out
        return entry.run(*leaves)

    def _split(self, args, kwargs):
        statics = []
        for i in self.static_argnums:
            if i >= len(args):
                raise TypeError(f"jit({self.__name__}): static_argnums={i} but only {len(args)} "
                                "positional arguments were given")
            statics.append(("arg", i, args[i]))
        for k in self.static_argnames:
            if k in kwargs:
                statics.append(("kw", k, kwargs[k]))
        for kind, k, v in statics:
            try:
                hash(v)
            except TypeError:
                raise TypeError(
                    f"jit({self.__name__}): static argument {k!r} has unhashable type "
                    f"{type(v).__name__}; static arguments must be hashable (use a tuple instead "
                    "of a list, or make it a regular array argument)") from None
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        return tuple(statics), dyn_args, dyn_kwargs

    def _call_slow(self, args, kwargs):
        entry, leaves, hit = self._entry(args, kwargs)
        if entry is None:
            return self.fun(*args, **kwargs)   # inside another transformation: trace through
        if hit:
            _STATS.hits += 1
        elif not kwargs and not self.static_argnums and \
                all(type(a) in self._fast_types for a in args):
            self._fast[tuple((a.shape, a.dtype.char) for a in args)] = entry
        return self._run(entry, leaves)

    def _entry(self, args, kwargs):
        """``(entry, leaves, hit)`` for this call's signature, compiling on a miss; the entry is
        None when an argument is traced (the call belongs to an enclosing transformation)."""
        statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, treedef = tree_flatten((dyn_args, dyn_kwargs))
        if any(isinstance(x, Tracer) for x in leaves):
            return None, leaves, False
        sig = []
        leaf_sig = _leaf_sig if self.device == "cpu" else _device_leaf_sig
        for i, x in enumerate(leaves):
            try:
                sig.append(leaf_sig(x))
            except TypeError as e:   # names are only worked out for the error message
                raise TypeError(f"jit({self.__name__}): "
                                f"{self._leaf_names(dyn_args, dyn_kwargs)[i]}: {e}") from None
        key = (treedef, tuple(sig), statics)
        entry = self._cache.get(key)
        if entry is not None:
            return entry, leaves, True
        entry = self._compile(key, args, kwargs, statics, dyn_args, dyn_kwargs)
        self._cache[key] = entry
        return entry, leaves, False

    def _dynamic_positions(self, n_dynamic: int) -> list[int]:
        """Positional indices of the non-static arguments."""
        return [i for i in range(n_dynamic + len(self.static_argnums))
                if i not in self.static_argnums]

    def _leaf_names(self, dyn_args, dyn_kwargs) -> list[str]:
        params = list(self._signature.parameters) if self._signature else []
        names = []
        for i, a in zip(self._dynamic_positions(len(dyn_args)), dyn_args):
            nm = f"argument {i}" + (f" ({params[i]!r})" if i < len(params) else "")
            names += [nm] * len(tree_flatten(a)[0])
        for k, v in dyn_kwargs.items():
            names += [f"argument {k!r}"] * len(tree_flatten(v)[0])
        return names

    # ---------------------------------------------------------------- compiling
    def _trace(self, args, kwargs, statics, dyn_args, dyn_kwargs):
        from .transforms import trace_to_graph
        if self._signature is not None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"jit({self.__name__}): {e} (called at {where(user_frame(3))})") from None
        static_pos = {k: v for kind, k, v in statics if kind == "arg"}
        static_kw = {k: v for kind, k, v in statics if kind == "kw"}
        n_total = len(args)

        def f(dargs, dkwargs):
            it = iter(dargs)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(n_total)]
            return self.fun(*full, **dkwargs, **static_kw)

        t0 = time.perf_counter()
        graph, captured, leaves, _, out_tree = trace_to_graph(
            f, (dyn_args, dyn_kwargs), abstract=True, what=f"jit({self.__name__})")
        if captured:
            raise TypeError(f"jit({self.__name__}) closes over traced values of an enclosing "
                            "transformation; pass them as arguments instead")
        graph = optimize(graph)
        _STATS.traces += 1
        _STATS.trace_seconds += time.perf_counter() - t0
        return graph, out_tree

    def _donated_leaves(self, dyn_args) -> set[int]:
        donated, pos = set(), 0
        for i, a in zip(self._dynamic_positions(len(dyn_args)), dyn_args):
            n = len(tree_flatten(a)[0])
            if i in self.donate_argnums:
                donated.update(range(pos, pos + n))
            pos += n
        return donated

    def _compile(self, key, args, kwargs, statics, dyn_args, dyn_kwargs) -> _Entry:
        from .compiler import compile_graph
        _STATS.misses += 1
        reason = self._miss_reason(key)
        if self.device == "cuda":    # trace device arrays by shape and dtype: no host copy
            from .device import host_placeholders
            args, kwargs, dyn_args, dyn_kwargs = host_placeholders(
                (args, kwargs, dyn_args, dyn_kwargs))
        graph, out_tree = self._trace(args, kwargs, statics, dyn_args, dyn_kwargs)
        donated = self._donated_leaves(dyn_args)
        if self.device == "cuda":
            from .compiler.runtime_cuda import compile_graph_cuda
            program = compile_graph_cuda(graph, donate=donated, name=self.__name__,
                                         fastmath=self.fastmath)
        else:
            program = compile_graph(graph, fastmath=self.fastmath, donate=donated)
        _STATS.compile_seconds += program.compile_seconds
        if program.was_on_disk:
            _STATS.disk_hits += 1
        self._last_sig[key[0]] = key
        in_dtypes = [v.aval.dtype for v in graph.inputs]
        sig = ", ".join(f"{v.aval}" for v in graph.inputs)
        log_line = (f"jitgraph: compiled {self.__name__}({sig}) in {{seconds:.2f}}s "
                    f"[{len(program.kernels)} kernels, "
                    f"{'loaded from disk cache' if program.was_on_disk else 'new'}]: {reason}")
        return _Entry(program, out_tree, in_dtypes, donated,
                      run=program.make_runner(in_dtypes, out_tree), log_line=log_line,
                      setup_seconds=program.compile_seconds)

    def _miss_reason(self, key) -> str:
        treedef, sig, statics = key
        prev = self._last_sig.get(treedef)
        if not self._cache:
            return "first call"
        if prev is None:
            return "new argument structure"
        _, psig, pstat = prev
        for i, (a, b) in enumerate(zip(sig, psig)):
            if a != b:
                return f"leaf {i} changed from {b} to {a}"
        if statics != pstat:
            return f"static arguments changed from {pstat} to {statics}"
        return "new signature"

    # ---------------------------------------------------------------- inspection
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Compile (or fetch) for these arguments and return the graph, kernels and source."""
        entry, _, _ = self._entry(args, kwargs)
        if entry is None:
            raise TypeError(f"jit({self.__name__}).lower: arguments must be arrays, not traced "
                            "values; call lower outside other transformations")
        p = entry.program
        return Lowered(p.graph, p.kernels, p.source, p.plan, p)


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), donate_argnums: int | Sequence[int] = (),
        device: str = "cpu", fastmath: bool = False):
    """Compile ``fun`` to fused Numba kernels, cached by shape signature (``@jit`` or ``@jit(...)``).

    ``donate_argnums``: the buffers of these arguments may be reused for outputs of the same shape
    and dtype (a training step updates its parameters in place). As in JAX, a donated argument is
    invalid after the call: its memory may hold the new values; use the returned arrays.
    ``fastmath=True`` lets LLVM reorder and contract float arithmetic beyond IEEE semantics.
    """
    def wrap(f):
        return JitFunction(f, static_argnums, static_argnames, donate_argnums, device, fastmath)
    return wrap if fun is None else wrap(fun)
