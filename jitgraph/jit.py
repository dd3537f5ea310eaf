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

from .arrays import Array
from .compile_phases import phase, recording, split_text
from .compiler import pipeline
from .compiler.backends.base import CompileOptions, options_from
from .compiler.dynamic import CannotGeneralize
from .compiler.settings import compile_settings
from .compiler.state import STATE
from . import config, dtypes
from . import debug_nans
from . import device as device_runtime
from .core import Graph, Tracer, short_dtype
from .errors import CompileError, user_frame, where
from .passes import optimize
from .rewrite import OVERRIDES_OPEN, overrides, targeting
from .transforms import positional_names, trace_to_graph
from .traceback_filter import api_boundary, filtered as _filtered
from .tree import argument_leaf_names, key_paths, sorted_keys, tree_flatten

@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    traces: int = 0
    compile_seconds: float = 0.0
    trace_seconds: float = 0.0
    dynamic_compiles: int = 0     # programs compiled with sizes as runtime arguments
    dynamic_hits: int = 0         # new shapes served by such a program, without compiling
    probe_traces: int = 0         # traces at sample sizes made to compile such programs
    native_loads: int = 0         # programs run from a native bundle, without Numba

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_STATS = CacheStats()
_ALL: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()


def cache_info() -> dict:
    """Counters over all jitted functions since the process started (or ``clear_cache``).

    The keys: ``hits`` and ``misses`` (calls that found a compiled program in memory, or did
    not), ``disk_hits`` (programs loaded from the disk cache), ``traces``, ``compile_seconds``
    and ``trace_seconds``, ``dynamic_compiles`` and ``dynamic_hits`` (see ``jit``'s
    ``dynamic_dims``), ``probe_traces``, ``native_loads`` (programs a process ran from the disk
    cache's native bundles without Numba), and how many kernels compile workers compiled
    (``worker_compiles``) beside this process (``local_compiles``). Which program served each
    shape of one function: ``f.cache_entries()``.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> jitgraph.clear_cache()
    >>> f = jitgraph.jit(lambda x: x + 1.0)
    >>> _ = f(np.ones(2)); _ = f(np.ones(2))
    >>> info = jitgraph.cache_info()
    >>> info["misses"], info["hits"]
    (1, 1)

    ```

    :returns: a dict of the counters.
    """
    stats = STATE.compile_stats
    return {**_STATS.as_dict(), "worker_compiles": stats["worker_compiles"],
            "local_compiles": stats["local_compiles"]}


def clear_cache() -> None:
    """Forget every in-memory compiled program and reset the ``cache_info`` counters. The disk
    cache stays: the next call of a function loads its program from there instead of compiling.

    Example:

    ```pycon
    >>> import jitgraph
    >>> jitgraph.clear_cache()
    >>> jitgraph.cache_info()["hits"]
    0

    ```
    """
    for f in list(_ALL):
        f._cache.clear()
        f._fast.clear()
        f._patterns.clear()
        f._by_state.clear()
    _STATS.__init__()
    STATE.compile_stats.update(worker_compiles=0, local_compiles=0)


# What every call checks its outputs for while ``debug_nans`` / ``debug_infs`` is on ("nan",
# "inf"). Off (empty), the call path is what it always was: the fast path never looks here.
_CHECK_KINDS: tuple = ()


def _follow_debug_settings() -> None:
    """``debug_nans`` or ``debug_infs`` changed. While one is on every call checks its outputs,
    so the fast path (which does not) is emptied, and ``_call_slow`` does not fill it."""
    global _CHECK_KINDS
    kinds = tuple(k for k in ("nan", "inf") if config.read(f"debug_{k}s"))
    if kinds and not _CHECK_KINDS:
        for f in list(_ALL):
            f._fast.clear()
            for caches in f._by_state.values():
                caches[1].clear()
    _CHECK_KINDS = kinds


config.on_change(_follow_debug_settings)
_follow_debug_settings()


def _log_enabled() -> bool:
    return "compiles" in os.environ.get("JITGRAPH_LOG", "")


def _split_line(entry: "_Entry", seconds: float) -> str:
    """The second log line of a compile: ``seconds`` (trace to the end of the first run) per
    stage (``compile_phases``; ``other``: the rest, signatures and the call path) and where
    the kernels came from (the program's ``kernel_counts``, where its target keeps them)."""
    other = max(0.0, seconds - sum(entry.phases.values()))
    line = f"jitgraph:   split: {split_text(entry.phases)}, other {other:.3f}s"
    counts = getattr(entry.program, "kernel_counts", None)
    if counts is not None:
        counts.here = entry.program.numba_compiles() - counts.compiled_before
        line += "; " + counts.text()
    return line


@dataclass
class Lowered:
    """What ``jit(f).lower(*args)`` shows: the optimized graph, the kernels and the module
    source, and ``stages``: the value each stage of ``compiler.pipeline`` produced (``graph``,
    ``lowered``, ``plan``, ``memory``, ``source``); ``show(stage)`` prints one."""
    graph: Graph
    kernels: list
    source: str
    plan: Any = None
    program: Any = None

    @property
    def stages(self) -> dict:
        return self.program.stages if self.program is not None else {}

    def show(self, stage: str = "source") -> str:
        """The text of one stage's value (see ``stages``)."""
        if stage not in self.stages:
            raise KeyError(f"Lowered.show: no stage {stage!r}; one of {list(self.stages)}")
        return pipeline.describe(self.stages[stage])

    def memory_analysis(self):
        """The program's memory from its memory plan (``compiler.memory.MemoryStats``, JAX's
        field names): arguments, outputs, donated buffers reused, scratch, constants and the
        peak bytes live during any step. Exact and deterministic: the plan fixes every
        buffer. (``memory()`` is the same.)"""
        mem = self.stages.get("memory")
        if mem is None:
            raise ValueError("Lowered.memory_analysis: this program has no memory plan")
        if getattr(self.program, "symbols", ()):
            raise ValueError("Lowered.memory_analysis: this program's sizes are runtime "
                             "arguments (dynamic shapes); lower it with dynamic=False for "
                             "fixed-size figures")
        return mem.stats()

    memory = memory_analysis

    def compile(self) -> "Lowered":
        """The program is compiled already (JAX's ``lower(...).compile()`` reads the same)."""
        return self

    def __repr__(self) -> str:
        return f"<Lowered: {len(self.graph.nodes)} graph nodes, {len(self.kernels)} kernels>"


@dataclass
class _Entry:
    program: Any
    out_tree: Any
    in_dtypes: list
    donated: set = field(default_factory=set)
    fresh: bool = True      # Numba compiles lazily: the first run's time counts as compile time
    run: Any = None         # the specialised call path (Executable.make_runner)
    log_line: str = ""
    setup_seconds: float = 0.0
    signature: str = ""     # what the program was compiled for, sizes that vary as symbols
    single: bool = False    # ``run`` returns one plain array (made an ``Array`` by the caller)
    phases: dict = field(default_factory=dict)   # seconds per compile stage (compile_phases)
    compile_wall: float = 0.0   # seconds from the cache miss to the program (trace included)


_MISSING = object()


def _sparing_numpy_arguments(run: Callable, donated: Sequence[int]) -> Callable:
    """``run`` that updates in place only jitgraph's own arrays: a donated argument that is a
    plain NumPy array belongs to the caller, who may read it again (JAX copies NumPy inputs
    to its own buffers and never writes them), so the program gets a copy of it. The result
    of an earlier call (an ``Array``) is donated as it is: it is invalid after the call."""
    if not donated:
        return run

    def run_donating_own_arrays(*leaves):
        leaves = list(leaves)
        for i in donated:
            if leaves[i].__class__ is np.ndarray:
                leaves[i] = leaves[i].copy()
        return run(*leaves)
    return run_donating_own_arrays


def _leaf_sig(x: Any):
    """The signature entry of one argument leaf; TypeError (without the argument's name, which
    the caller adds) for values that are not arrays."""
    t = type(x)
    if t is np.ndarray or t is Array:
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


@dataclass
class _DynamicProgram:
    """A program whose sizes ``symbols`` (name -> [(leaf, axis)]) are runtime arguments, and
    the other dims it was compiled for."""
    entry: _Entry
    shapes: list
    symbols: dict

    def accepts(self, shapes) -> bool:
        varying = {(leaf, ax) for group in self.symbols.values() for leaf, ax in group}
        for leaf, (a, b) in enumerate(zip(shapes, self.shapes)):
            if (a is None) != (b is None):
                return False
            if a is not None and any(x != y for ax, (x, y) in enumerate(zip(a, b))
                                     if (leaf, ax) not in varying):
                return False
        for group in self.symbols.values():
            sizes = {shapes[leaf][ax] for leaf, ax in group}
            if len(sizes) != 1 or min(sizes) < 2:
                return False
        return True


@dataclass
class _Pattern:
    """What one function has compiled for one argument structure (ranks and dtypes)."""
    seen: list = field(default_factory=list)          # shapes compiled for
    programs: list = field(default_factory=list)      # _DynamicProgram
    failed: set = field(default_factory=set)          # dim sets that did not generalize

    def lookup(self, shapes) -> _Entry | None:
        for p in self.programs:
            if p.accepts(shapes):
                return p.entry
        return None


def _pattern_key(key):
    treedef, sig, statics = key
    return treedef, tuple((len(s[0]), s[1]) if isinstance(s, tuple) else s for s in sig), statics


def _symbols(dims, shapes) -> dict:
    """Dims that vary, grouped into one symbol per size (a batch dim shared by x and y is one
    runtime size): ``{"n0": [(leaf, axis), ...]}``."""
    by_size: dict = {}
    for leaf, ax in dims:
        by_size.setdefault(shapes[leaf][ax], []).append((leaf, ax))
    return {f"n{i}": group for i, (_, group) in enumerate(sorted(by_size.items()))}


def _probe_array(shape, dtype) -> np.ndarray:
    """An array of any shape that takes no memory: tracing looks at shapes and dtypes only."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(shape), (0,) * len(shape))


def _dynamic_dims_spec(spec) -> dict:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise TypeError("jit: dynamic_dims must be a dict {argument index or name: axis or "
                        f"tuple of axes}}, got {type(spec).__name__}")
    return {k: (v,) if isinstance(v, int) else tuple(v) for k, v in spec.items()}


def _shapes_text(sig) -> str:
    """A call signature as ``f32[128,784], f32[128,10]`` (Python scalars by their type)."""
    return ", ".join(f"{short_dtype(dtypes.of_char(s[1]))}[{','.join(map(str, s[0]))}]"
                     if isinstance(s, tuple) else getattr(s, "__name__", "?") for s in sig)


def _signature_text(graph, symbols) -> str:
    """The graph inputs' avals, with runtime sizes by their symbol: ``f32[n0,784]``."""
    names = {(leaf, ax): name for name, group in (symbols or {}).items() for leaf, ax in group}
    return ", ".join(short_dtype(v.aval.dtype) + "[" + ",".join(
        names.get((i, ax), str(d)) for ax, d in enumerate(v.aval.shape)) + "]"
        for i, v in enumerate(graph.inputs))


def _device_leaf_sig(x: Any):
    """Signature entry of a leaf for a GPU-jitted function: device arrays as host ones."""
    sig = device_runtime.leaf_signature(x)
    return sig if sig is not None else _leaf_sig(x)


def _fast_node(a, fast: tuple, leaves: list):
    """``_fast_key`` of one argument: an array's (shape, dtype), a container's type and its
    children's keys (dict keys in the pytree's sorted order); None where unsupported."""
    t = type(a)
    if t in fast:
        leaves.append(a)
        return (a.shape, a.dtype.char)
    if t is list or t is tuple:
        if not a:
            return None
        ks = []
        for e in a:
            if type(e) in fast:        # arrays inline: a parameter list is mostly arrays
                leaves.append(e)
                ks.append((e.shape, e.dtype.char))
                continue
            k = _fast_node(e, fast, leaves)
            if k is None:
                return None
            ks.append(k)
        return (t, tuple(ks))
    if t is dict and a:
        names = sorted_keys(a)
        ks = []
        for n in names:
            k = _fast_node(a[n], fast, leaves)
            if k is None:
                return None
            ks.append(k)
        return (dict, tuple(names), tuple(ks))
    return None


def _arrays_key(args: tuple, fast: tuple) -> tuple | None:
    """The fast-path key of arguments that are all arrays (their shapes and dtypes), else
    None."""
    for a in args:
        if type(a) not in fast:
            return None
    return tuple([(a.shape, a.dtype.char) for a in args])


def callable_name(fun: Callable) -> str:
    """A name for any callable, for messages and logs: its ``__name__``, a partial's
    ``partial(name)``, a callable object's class name."""
    name = getattr(fun, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fun, functools.partial):
        return f"partial({callable_name(fun.func)})"
    return type(fun).__name__


class _ArrayResults:
    """An output structure whose leaves come back as ``Array`` views: the results of a
    jitted function answer JAX's array API (``.block_until_ready()``, ``.at``)."""

    __slots__ = ("unflatten",)

    def __init__(self, tree):
        build, view, types = tree.unflatten, np.ndarray.view, (Array,) * tree.num_leaves
        # (map over a C method: a third of the cost of a comprehension calling .view)
        self.unflatten = lambda leaves: build(list(map(view, leaves, types)))


def _infer_statics(signature: inspect.Signature, argnums: tuple, argnames: tuple
                   ) -> tuple[tuple, tuple]:
    """Static arguments named one way are static the other way too, as in JAX: a name in
    ``static_argnames`` is static when passed by position, and a position in
    ``static_argnums`` when passed by keyword (positional-or-keyword parameters only)."""
    params = [p.name for p in signature.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = [p.name for p in signature.parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if argnames:
        argnums = tuple(sorted(set(argnums) | {params.index(n) for n in argnames
                                                if n in params and n in named}))
    elif argnums:
        argnames = tuple(params[i] for i in argnums if i < len(params) and params[i] in named)
    return argnums, argnames


class JitFunction:
    """A jitted function; call it like the original. See ``jit``."""

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=(), donate_argnums=(),
                 device: str = "cpu", fastmath: bool = False, dynamic_dims=None,
                 dynamic: bool | None = None, cuda_graph: bool = True, stream=None):
        # any callable: a partial or a callable object has no ``__name__`` (messages use one),
        # and its instance attributes must not shadow this class's
        plain = inspect.isfunction(fun) or inspect.isbuiltin(fun)
        functools.update_wrapper(self, fun, updated=("__dict__",) if plain else ())
        self.__name__ = callable_name(fun)
        self.fun = fun
        self.static_argnums = tuple(sorted({static_argnums} if isinstance(static_argnums, int)
                                           else set(static_argnums)))
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        target = pipeline.target_of(device, "jit: unknown device")
        target.check_usable(f"jit({callable_name(fun)})")   # a clear error if unusable
        caps = target.capabilities
        self._fast_types = (np.ndarray, device_runtime.DeviceArray, Array) \
            if caps.device_arrays else (np.ndarray, Array)
        if stream is not None and not caps.streams:
            raise ValueError(f"jit: stream= is for programs that run on a stream "
                             f"(device='cuda'), not device={target.name!r}")
        self.device = target.name
        self._target, self._caps = target, caps
        self.fastmath = fastmath
        self.cuda_graph = bool(cuda_graph)
        self.stream = stream
        self._cache: dict = {}
        self._fast: dict = {}
        self._last_sig: dict = {}
        self._patterns: dict = {}            # shapes reduced to ranks -> _Pattern
        self._state = config.TRACE_STATE     # the settings the caches above were traced under
        self._by_state: dict = {}            # settings -> the caches traced under them
        self.dynamic = dynamic
        self.dynamic_dims = _dynamic_dims_spec(dynamic_dims)
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self._signature = None
        self._static_keyword: dict = {}      # static position -> its parameter's name
        if self._signature is not None and not (static_argnums and static_argnames):
            self.static_argnums, self.static_argnames = _infer_statics(
                self._signature, self.static_argnums, self.static_argnames)
            names = list(self._signature.parameters)
            self._static_keyword = {i: names[i] for i in self.static_argnums
                                    if i < len(names) and names[i] in self.static_argnames}
        _ALL.add(self)

    # ---------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:   # (free in Python 3.11 until something raises)
            if self._state is not config.TRACE_STATE:
                self._follow_settings()
            if not kwargs and not self.static_argnums and not OVERRIDES_OPEN.count:
                fast = self._fast_types
                # arrays only: the key is their shapes and dtypes. One and two arguments are
                # unrolled: a comprehension's frame costs as much as making the result an Array
                n = len(args)
                if n == 2:
                    a, b = args
                    key = ((a.shape, a.dtype.char), (b.shape, b.dtype.char)) \
                        if type(a) in fast and type(b) in fast else None
                elif n == 1:
                    a = args[0]
                    key = ((a.shape, a.dtype.char),) if type(a) in fast else None
                else:
                    key = _arrays_key(args, fast)
                if key is not None:
                    entry = self._fast.get(key)
                    if entry is not None:   # (it has run once, ``_call_slow``: no first-run work)
                        _STATS.hits += 1
                        out = entry.run(*args)
                        return out.view(Array) if entry.single else out
                    return self._call_slow(args, kwargs)
                leaves: list = []
                key = self._fast_key(args, leaves)     # nested lists/tuples/dicts of arrays
                if key is not None:
                    entry = self._fast.get(key)
                    if entry is not None:
                        _STATS.hits += 1
                        out = entry.run(*leaves)
                        return out.view(Array) if entry.single else out
            return self._call_slow(args, kwargs)
        except Exception as err:   # the user's frames only (traceback_filter)
            raise _filtered(err)

    def _fast_key(self, args, leaves: list | None = None) -> tuple | None:
        """The signature of a call whose arguments are arrays or lists, tuples and dicts of
        them at any nesting (a model's parameters), without the pytree machinery, appending
        the arrays to ``leaves`` in pytree order; None for anything else (namedtuples,
        registered nodes, scalars, None), which takes the general path."""
        if leaves is None:
            leaves = []
        key = []
        for a in args:
            k = _fast_node(a, self._fast_types, leaves)
            if k is None:
                return None
            key.append(k)
        return tuple(key)

    def _run(self, entry: _Entry, leaves: Sequence[Any]) -> Any:
        if entry.fresh:
            t0 = time.perf_counter()
            try:
                if entry.program.native:    # nothing to compile
                    out = entry.run(*leaves)
                else:
                    with compile_settings(self.device), recording() as phases, phase("numba"):
                        out = entry.run(*leaves)
                    for k, v in phases.items():
                        entry.phases[k] = entry.phases.get(k, 0.0) + v
            except Exception as e:
                if "numba" not in sys.modules:
                    raise
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
                print(_split_line(entry, entry.compile_wall + first), file=sys.stderr)
        else:
            out = entry.run(*leaves)
        return out.view(Array) if entry.single else out

    def _split(self, args, kwargs):
        statics = []
        for i in self.static_argnums:
            if i >= len(args):
                if self._static_keyword.get(i) in kwargs:    # given by name: a static argname
                    continue
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
        if _CHECK_KINDS:
            return self._run_checked(entry, leaves, args, kwargs)
        out = self._run(entry, leaves)
        if not kwargs and not self.static_argnums:    # next time: the fast path, once it has run
            key = self._fast_key(args)
            if key is not None:
                self._fast[key] = entry
        return out

    def _run_checked(self, entry: _Entry, leaves: list, args: tuple, kwargs: dict) -> Any:
        """``_run`` under ``debug_nans`` / ``debug_infs``: on a NaN (inf) in the outputs, re-run
        the function op by op (``debug_nans.diagnose``) and raise ``FloatingPointError`` saying
        which operation made it. Donated arguments are copied before the call, for the re-run,
        and written back before raising, so the caller's arrays hold what they held."""
        host = device_runtime.device_get
        kept = {i: np.array(host(leaves[i]), copy=True) for i in entry.donated}
        out = self._run(entry, leaves)
        outs = tree_flatten(out)[0]
        found = debug_nans.first_bad_output([host(x) for x in outs], _CHECK_KINDS)
        if found is None:
            return out
        kind, k = found
        restored = 0
        for i, x in kept.items():
            if isinstance(leaves[i], np.ndarray) and leaves[i].flags.writeable:
                np.copyto(leaves[i], x)
                restored += 1
        statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        _, treedef = tree_flatten((dyn_args, dyn_kwargs))
        d_args, d_kwargs = treedef.unflatten([kept[i] if i in kept else host(x)
                                              for i, x in enumerate(leaves)])
        fun = self._with_statics(args, statics)
        names = debug_nans.argument_names(self.fun, len(args))
        diagnosis = debug_nans.diagnose(lambda *a, **kw: fun(a, kw), d_args, d_kwargs,
                                        kind=kind, names=[names[i] for i in
                                                          self._dynamic_positions(len(dyn_args))])
        path = key_paths(out)[k]
        what = f"output {path}" if path else "the output"
        note = ("\n(The donated arguments hold their values from before the call again.)"
                if kept and restored == len(kept) else "")
        raise FloatingPointError(f"jit({self.__name__}): {what} holds {debug_nans.WORDS[kind]} "
                                 f"(debug_{kind}s); {diagnosis}{note}")

    def _entry(self, args, kwargs):
        """``(entry, leaves, hit)`` for this call's signature, compiling on a miss; the entry is
        None when an argument is traced (the call belongs to an enclosing transformation)."""
        state = config.TRACE_STATE
        if OVERRIDES_OPEN.count and overrides():    # a fused op disabled or forced here
            state = (state, overrides())
        if self._state is not state and self._state != state:
            self._follow_settings(state)
        statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, treedef = tree_flatten((dyn_args, dyn_kwargs))
        if any(isinstance(x, Tracer) for x in leaves):
            return None, leaves, False
        sig = []
        leaf_sig = _device_leaf_sig if self._caps.device_arrays else _leaf_sig
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
        entry = self._compile(key, args, kwargs, statics, dyn_args, dyn_kwargs, leaves)
        self._cache[key] = entry
        return entry, leaves, False

    def _follow_settings(self, state: tuple | None = None) -> None:
        """A setting that changes traced results (``config.TRACE_STATE``: default dtypes, the
        random-bit scheme; or, in this context, a fused op disabled or forced) changed: keep
        these caches for it, use the new state's ones (a trace and compile the first time,
        the old programs when a setting is changed back). The fast path of ``__call__`` is
        not taken while any fused op is overridden, so it only ever sees the settings'
        caches."""
        self._by_state[self._state] = (self._cache, self._fast, self._patterns, self._last_sig)
        self._state = config.TRACE_STATE if state is None else state
        self._cache, self._fast, self._patterns, self._last_sig = self._by_state.pop(
            self._state, ({}, {}, {}, {}))

    def _dynamic_positions(self, n_dynamic: int) -> list[int]:
        """Positional indices of the non-static arguments."""
        return [i for i in range(n_dynamic + len(self.static_argnums))
                if i not in self.static_argnums]

    def _leaf_names(self, dyn_args, dyn_kwargs) -> list[str]:
        """Each argument leaf's name in errors: its index, parameter and pytree path."""
        return argument_leaf_names(dyn_args, dyn_kwargs, positional_names(self.fun),
                                   self._dynamic_positions(len(dyn_args)))

    # ---------------------------------------------------------------- compiling
    def _trace(self, args, kwargs, statics, dyn_args, dyn_kwargs, probe: bool = False):
        """Trace and optimize; ``probe`` traces (at sample sizes, for programs whose sizes are
        runtime arguments) count as ``probe_traces``, not ``traces``."""
        if self._signature is not None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"jit({self.__name__}): {e} (called at {where(user_frame(3))})") from None
        f = self._with_statics(args, statics)
        t0 = time.perf_counter()
        # the fused rewrites' cost models price this target
        with phase("trace"), targeting(self.device):
            graph, captured, leaves, _, out_tree = trace_to_graph(
                f, (dyn_args, dyn_kwargs), abstract=True, what=f"jit({self.__name__})",
                leaf_names=lambda: self._leaf_names(dyn_args, dyn_kwargs))
        if captured:
            raise TypeError(f"jit({self.__name__}) closes over traced values of an enclosing "
                            "transformation; pass them as arguments instead")
        graph = optimize(graph)
        if probe:
            _STATS.probe_traces += 1
        else:
            _STATS.traces += 1
        _STATS.trace_seconds += time.perf_counter() - t0
        return graph, out_tree

    def _with_statics(self, args, statics) -> Callable:
        """``f(dyn_args, dyn_kwargs)``: the function with the static arguments put back."""
        static_pos = {k: v for kind, k, v in statics if kind == "arg"}
        static_kw = {k: v for kind, k, v in statics if kind == "kw"}
        n_total = len(args)

        def f(dargs, dkwargs):
            it = iter(dargs)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(n_total)]
            return self.fun(*full, **dkwargs, **static_kw)
        return f

    def _donated_leaves(self, dyn_args) -> set[int]:
        donated, pos = set(), 0
        for i, a in zip(self._dynamic_positions(len(dyn_args)), dyn_args):
            n = len(tree_flatten(a)[0])
            if i in self.donate_argnums:
                donated.update(range(pos, pos + n))
            pos += n
        return donated

    def _options(self, donated, out_tree) -> CompileOptions:
        """How this function's programs are compiled (``compiler.pipeline``)."""
        target = self._target
        own = options_from(target.options_type, {"allow_native": True, "stream": self.stream,
                                                 "cuda_graph": self.cuda_graph})
        return CompileOptions(fastmath=self.fastmath, donate=tuple(donated),
                              single_output=not self._caps.device_arrays
                              and out_tree.node == "*", name=self.__name__, target=own)

    def _compile(self, key, args, kwargs, statics, dyn_args, dyn_kwargs, leaves) -> _Entry:
        t0 = time.perf_counter()
        with recording() as phases:
            entry = self._compile_recorded(key, args, kwargs, statics, dyn_args, dyn_kwargs,
                                           leaves)
        if entry.fresh and not entry.phases:
            entry.phases, entry.compile_wall = phases, time.perf_counter() - t0
        return entry

    def _compile_recorded(self, key, args, kwargs, statics, dyn_args, dyn_kwargs,
                          leaves) -> _Entry:
        _STATS.misses += 1
        reason = self._miss_reason(key)
        pattern = self._patterns.setdefault(_pattern_key(key), _Pattern())
        shapes = [s[0] if isinstance(s, tuple) else None for s in key[1]]
        served = pattern.lookup(shapes)
        if served is not None:
            _STATS.dynamic_hits += 1
            self._last_sig[key[0]] = key
            if _log_enabled():
                print(f"jitgraph: {self.__name__}({_shapes_text(key[1])}) served by the "
                      f"compiled {self.__name__}({served.signature}) (sizes are runtime "
                      f"arguments): {reason}", file=sys.stderr)
            return served
        caps = self._caps
        if caps.device_arrays:      # trace device arrays by shape and dtype: no host copy
            args, kwargs, dyn_args, dyn_kwargs = device_runtime.host_placeholders(
                (args, kwargs, dyn_args, dyn_kwargs))
        # (a target without dynamic shapes, CUDA's, launches from static shapes)
        dims = self._dynamic_dims_for(dyn_args, dyn_kwargs, shapes, pattern) \
            if caps.dynamic_shapes else []
        graph, out_tree = self._trace(args, kwargs, statics, dyn_args, dyn_kwargs)
        donated = self._donated_leaves(dyn_args)
        symbols = program = None
        if dims:
            symbols = _symbols(dims, shapes)
            program = self._compile_dynamic(graph, out_tree, statics, dyn_args, dyn_kwargs,
                                            leaves, symbols, donated, pattern, dims)
        if program is None:
            symbols = None
            program = pipeline.compile(graph, self.device, self._options(donated, out_tree))
        _STATS.compile_seconds += program.compile_seconds
        if program.was_on_disk:
            _STATS.disk_hits += 1
        if program.native:
            _STATS.native_loads += 1
        self._last_sig[key[0]] = key
        pattern.seen.append(shapes)
        in_dtypes = [v.aval.dtype for v in graph.inputs]
        sig = _signature_text(graph, symbols)
        kind = f"as {self.__name__}({sig}) with sizes as runtime arguments, " if symbols else ""
        log_line = (f"jitgraph: compiled {self.__name__}({_signature_text(graph, None)}) "
                    f"in {{seconds:.2f}}s "
                    f"[{len(program.kernels)} kernels, {kind}"
                    f"{'loaded from disk cache' if program.was_on_disk else 'new'}]: {reason}")
        host = not caps.device_arrays
        run = program.make_runner(in_dtypes, _ArrayResults(out_tree) if host else out_tree)
        if host and donated:
            run = _sparing_numpy_arguments(run, sorted(set(
                getattr(program, "donated", {i: i for i in donated}).values())))
        entry = _Entry(program, out_tree, in_dtypes, donated,
                       run=run,
                       log_line=log_line, setup_seconds=program.compile_seconds,
                       signature=sig, single=self._options(donated, out_tree).single_output)
        if symbols:
            _STATS.dynamic_compiles += 1
            pattern.programs.append(_DynamicProgram(entry, shapes, symbols))
        return entry

    def _dynamic_dims_for(self, dyn_args, dyn_kwargs, shapes, pattern) -> list:
        """``(leaf, axis)`` pairs to compile as runtime sizes: those ``dynamic_dims`` names, and
        (unless ``dynamic=False``) those seen before with another size. A dim of size 0 or 1
        stays fixed, as do dims that failed to generalize before."""
        dims = set()
        if self.dynamic_dims:
            ranges = self._leaf_ranges(dyn_args, dyn_kwargs)
            for arg, axes in self.dynamic_dims.items():
                for leaf in ranges.get(arg, ()):
                    shp = shapes[leaf]
                    if shp is not None:
                        dims.update((leaf, a % len(shp)) for a in axes if -len(shp) <= a < len(shp))
        if self.dynamic is not False:
            for prev in pattern.seen:
                for leaf, (a, b) in enumerate(zip(shapes, prev)):
                    if a is not None:
                        dims.update((leaf, ax) for ax, (x, y) in enumerate(zip(a, b)) if x != y)
        dims = frozenset((leaf, ax) for leaf, ax in dims if shapes[leaf][ax] >= 2)
        return sorted(dims) if dims and dims not in pattern.failed else []

    def _leaf_ranges(self, dyn_args, dyn_kwargs) -> dict:
        """Argument position or keyword name -> the indices of its array leaves."""
        ranges, pos = {}, 0
        for i, a in zip(self._dynamic_positions(len(dyn_args)), dyn_args):
            n = len(tree_flatten(a)[0])
            ranges[i] = range(pos, pos + n)
            if self._signature is not None and i < len(self._signature.parameters):
                ranges[list(self._signature.parameters)[i]] = ranges[i]
            pos += n
        for k, v in dyn_kwargs.items():
            n = len(tree_flatten(v)[0])
            ranges[k] = range(pos, pos + n)
            pos += n
        return ranges

    def _compile_dynamic(self, graph, out_tree, statics, dyn_args, dyn_kwargs, leaves, symbols,
                         donated, pattern, dims):
        """Generate the program at sample sizes, fit the sizes as runtime arguments and compile
        that once; None (and the dims are remembered) if its structure depends on the sizes."""

        def trace_at(point):
            probe = list(leaves)
            for name, group in symbols.items():
                for leaf, axis in group:
                    shp = list(np.shape(leaves[leaf]))
                    shp[axis] = point[name]
                    probe[leaf] = _probe_array(shp, np.asarray(leaves[leaf]).dtype)
            _, treedef = tree_flatten((dyn_args, dyn_kwargs))
            a, k = treedef.unflatten(probe)
            full = list(a)
            for kind, i, v in statics:
                if kind == "arg":
                    full.insert(i, v)
            kw = dict(k, **{i: v for kind, i, v in statics if kind == "kw"})
            return self._trace(full, kw, statics, a, k, probe=True)[0]

        t0 = time.perf_counter()
        try:
            return pipeline.compile_dynamic(graph, trace_at, symbols,
                                            self._options(donated, out_tree), t0=t0,
                                            target=self.device)
        except CannotGeneralize as e:
            pattern.failed.add(frozenset(dims))
            if _log_enabled():
                print(f"jitgraph: {self.__name__}: sizes stay fixed ({e})", file=sys.stderr)
            return None

    def cache_entries(self) -> list[dict]:
        """One row per argument signature this function was called with: its shapes, and the
        compiled program that serves it.

        Example:

        ```pycon
        >>> import numpy as np
        >>> import jitgraph
        >>> f = jitgraph.jit(lambda x: x * 2.0, dynamic=False)
        >>> _ = f(np.ones(3))
        >>> [row["shapes"] for row in f.cache_entries()]
        ['f64[3]']

        ```

        :returns: a list of dicts: ``shapes`` (the arguments' shapes and dtypes), ``program``
            (the compiled program's signature) and ``dynamic`` (whether its sizes are runtime
            arguments).
        """
        rows = []
        for key, e in self._cache.items():
            rows.append({"shapes": _shapes_text(key[1]), "program": e.signature,
                         "dynamic": bool(e.program.symbols)})
        return rows

    def _miss_reason(self, key) -> str:
        treedef, sig, statics = key
        prev = self._last_sig.get(treedef)
        if not self._cache:
            return "first call"
        if prev is None:
            return "new argument structure"
        _, psig, pstat = prev
        dyn_args, dyn_kwargs = treedef.unflatten([0] * treedef.num_leaves)
        names = argument_leaf_names(dyn_args, dyn_kwargs, positional_names(self.fun),
                                    self._dynamic_positions(len(dyn_args)), expressions=True)
        changed = [f"{n}: {_shapes_text([b])} -> {_shapes_text([a])}"
                   for n, a, b in zip(names, sig, psig) if a != b]
        if changed:
            return "; ".join(changed)
        if statics != pstat:
            params = positional_names(self.fun)
            old = {(kind, k): v for kind, k, v in pstat}
            return "; ".join(
                f"{params[k] if kind == 'arg' and k < len(params) else k}: "
                f"{old.get((kind, k))!r} -> {v!r} (static)"
                for kind, k, v in statics if old.get((kind, k), _MISSING) != v) \
                or f"static arguments changed from {pstat} to {statics}"
        return "new signature"

    # ---------------------------------------------------------------- inspection
    @api_boundary
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Compile (or fetch) the program for these arguments and return it for inspection:
        the optimized graph, the kernels and the generated source, as JAX's ``lower``.

        Example:

        ```pycon
        >>> import numpy as np
        >>> import jitgraph
        >>> import jitgraph.numpy as jnp
        >>> lowered = jitgraph.jit(lambda x: jnp.sin(x) * 2.0).lower(np.ones(3))
        >>> len(lowered.kernels)
        1
        >>> print(lowered.graph)
        { lambda  ; a:f64[3]. let
            b:f64[3] = sin a
            c:f64[3] = mul b 2.0
          in (c,) }

        ```

        :param args: arguments as for a call (arrays: only their shapes and dtypes matter, and
            the static arguments' values).
        :param kwargs: keyword arguments as for a call.
        :returns: a ``Lowered``; ``print(lowered.source)`` is the generated module,
            ``lowered.show(stage)`` one stage of the pipeline, ``lowered.memory_analysis()`` the
            planned memory.
        :raises TypeError: when called on traced values (inside another transformation).
        """
        entry, _, _ = self._entry(args, kwargs)
        if entry is None:
            raise TypeError(f"jit({self.__name__}).lower: arguments must be arrays, not traced "
                            "values; call lower outside other transformations")
        p = entry.program
        return Lowered(p.graph, p.kernels, p.source, p.plan, p)


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), donate_argnums: int | Sequence[int] = (),
        device: str = "cpu", fastmath: bool = False, dynamic_dims=None,
        dynamic: bool | None = None, cuda_graph: bool = True, stream=None):
    """Compile ``fun`` to fused Numba kernels, cached by shape signature, as ``jax.jit``.

    Use it as ``jit(f)``, ``@jit`` or ``@jit(...)`` with options. The first call with new
    argument shapes and dtypes traces ``fun`` into a graph, optimizes and fuses it and compiles
    it (and keeps it in a disk cache, so a new process does not compile again); later calls
    with the same shapes run the compiled program directly. ``fun`` must be a pure function of
    its array arguments: Python side effects run once, at trace time.

    Example:

    ```pycon
    >>> import numpy as np
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> @jitgraph.jit
    ... def predict(w, x):
    ...     return jnp.tanh(x @ w)
    >>> predict(np.zeros((3, 2)), np.ones((4, 3)))
    array([[0., 0.],
           [0., 0.],
           [0., 0.],
           [0., 0.]])
    >>> power = jitgraph.jit(lambda x, n: x ** n, static_argnums=1)
    >>> power(np.array([1.0, 2.0]), 3)
    array([1., 8.])
    >>> jitgraph.jit(jitgraph.grad(lambda x: jnp.sum(x ** 2)))(np.array([1.0, 2.0]))
    array([2., 4.])

    ```

    :param fun: the function to compile: positional and keyword arguments that are arrays,
        Python numbers or pytrees of them; it returns an array or a pytree of arrays. Omitted,
        ``jit(...)`` returns a decorator.
    :param static_argnums: positional arguments that are not traced: ``fun`` sees their Python
        values (sizes, flags, modes), and each new value compiles another program. They must be
        hashable.
    :param static_argnames: the same, for arguments passed by keyword.
    :param donate_argnums: arguments whose buffers may be reused for outputs of the same shape
        and dtype (a training step updates its parameters in place). As in JAX, a donated
        argument is invalid after the call: its memory may hold the new values; use the
        returned arrays. Only jitgraph's own arrays (results of earlier calls) are updated in
        place: a plain NumPy array passed for a donated argument is copied first, as JAX copies
        NumPy inputs, so the caller's array keeps its values.
    :param device: ``"cpu"`` (default), ``"cuda"`` or another registered target's name
        (``jitgraph.targets.register_target``): where the program runs. On the GPU it returns
        device arrays (``DeviceArray``; host arrays passed in are copied over); every launch
        goes to one stream jitgraph owns, or to ``stream``.
    :param fastmath: let LLVM reorder and contract float arithmetic beyond IEEE semantics (on
        the GPU it also selects the approximate ``exp``/``tanh`` instructions).
    :param dynamic_dims: ``{arg: axes}``: compile, on the first call already, a program whose
        kernels take these sizes as runtime arguments. ``arg`` is a positional index or a
        parameter name, ``axes`` an axis or a tuple of axes of every array in it, e.g.
        ``jit(step, dynamic_dims={"x": 0, "y": 0})``. Dims of size 0 or 1 always stay fixed.
    :param dynamic: when ``fun`` is called with a new size along a dim it has seen with another
        size (a new batch size), compile once a version whose kernels take that size as a
        runtime argument, so that later sizes reuse it without compiling (the default);
        ``False`` compiles one program per shape.
    :param cuda_graph: on the GPU, once a program has run on the same buffers twice, capture
        its launch sequence as a CUDA graph and replay it as one launch (default); ``False``
        launches kernel by kernel.
    :param stream: on the GPU, the stream to launch on (a Numba, CuPy or PyTorch stream);
        default: the stream jitgraph owns.
    :returns: a ``JitFunction``: call it like ``fun``; ``f.lower(*args)`` shows the compiled
        program, ``f.cache_entries()`` the programs compiled so far.
    """
    def wrap(f):
        return JitFunction(f, static_argnums, static_argnames, donate_argnums, device, fastmath,
                           dynamic_dims, dynamic, cuda_graph=cuda_graph, stream=stream)
    return wrap if fun is None else wrap(fun)


device_runtime.OPERATOR_COMPILER.append(jit)     # DeviceArray arithmetic compiles with jit


# ``x.device`` / ``x.devices()`` of host arrays (jitgraph's results), as JAX arrays answer
_CPU = device_runtime.Device("cpu", 0, "cpu")
Array.device = property(lambda self: _CPU, doc="The device holding the array: the CPU.")
Array.devices = lambda self: {_CPU}
