"""Global settings that change what traced code computes: default precision and random streams.

``jitgraph.config.update("default_float", "float32")`` (or JAX's ``update("jax_enable_x64",
False)``) makes creation functions, random numbers, Python scalars on their own and ``nn``
initializers float32 when no dtype is given; ``with jitgraph.config.default_float("float32"):``
does it for a block, and ``JITGRAPH_DEFAULT_FLOAT=float32`` for a process. The default stays
NumPy's float64 (autograd-compatible numbers). ``matmul_precision`` selects float32 or TF32
cuBLAS math on the GPU (``jax_default_matmul_precision``); ``jax_threefry_partitionable``
selects JAX's random-bit scheme. ``debug_nans`` (``jax_debug_nans``) makes every ``jit`` call
check its outputs for NaN and name the operation and source line that made one
(``jitgraph/debug_nans.py``); ``debug_infs`` does the same for inf. ``traceback_filtering``
(``jax_traceback_filtering``) set to ``"off"`` keeps jitgraph's own frames in tracebacks. ``docs/precision.md``
describes each setting.

A ``jit`` function keeps one cache per value of the settings that change traced results
(``TRACE_STATE``), so changing a setting retraces, and changing it back finds the programs
compiled before.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["update", "read", "values", "default_float", "default_int", "enable_x64",
           "matmul_precision", "threefry_partitionable", "debug_nans", "debug_infs",
           "traceback_filtering",
           "float_dtype", "int_dtype"]

_FLOATS = {"float32": "float32", "float64": "float64", "f32": "float32", "f64": "float64"}
_INTS = {"int32": "int32", "int64": "int64", "i32": "int32", "i64": "int64"}
# JAX's names for matmul precision -> what a float32 GEMM runs as on the GPU
_PRECISIONS = {"default": "float32", "highest": "float32", "float32": "float32",
               "fp32": "float32", "high": "tf32", "tf32": "tf32", "tensorfloat32": "tf32"}
# JAX's names for its modes: every one that removes frames removes them (tracebacks are
# filtered where errors leave jitgraph, jitgraph/traceback_filter.py)
_TRACEBACKS = {"auto": "remove_frames", "on": "remove_frames", "true": "remove_frames",
               "1": "remove_frames", "remove_frames": "remove_frames",
               "quiet_remove_frames": "remove_frames", "tracebackhide": "remove_frames",
               "off": "off", "false": "off", "0": "off"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _choice(name: str, table: dict) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        v = str(np.dtype(value) if isinstance(value, type) else value).lower()
        if v not in table:
            raise ValueError(f"jitgraph.config: {name} must be one of "
                             f"{sorted(set(table))}, got {value!r}")
        return table[v]
    return parse


def _flag(name: str) -> Callable[[Any], bool]:
    def parse(value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        v = str(value).lower()
        if v in _TRUE or v in _FALSE:
            return v in _TRUE
        raise ValueError(f"jitgraph.config: {name} must be True or False, got {value!r}")
    return parse


# name -> (parser, default, environment variable)
_OPTIONS: dict[str, tuple[Callable[[Any], Any], Any, str]] = {
    "default_float": (_choice("default_float", _FLOATS), "float64", "JITGRAPH_DEFAULT_FLOAT"),
    "default_int": (_choice("default_int", _INTS), "int64", "JITGRAPH_DEFAULT_INT"),
    "matmul_precision": (_choice("matmul_precision", _PRECISIONS), "float32",
                         "JITGRAPH_MATMUL_PRECISION"),
    # JAX's default since 0.5 (True in the JAX these streams were checked against)
    "threefry_partitionable": (_flag("threefry_partitionable"), True,
                               "JITGRAPH_THREEFRY_PARTITIONABLE"),
    # check jit outputs (not traced: the same programs run, the calls check what they return)
    "debug_nans": (_flag("debug_nans"), False, "JITGRAPH_DEBUG_NANS"),
    "debug_infs": (_flag("debug_infs"), False, "JITGRAPH_DEBUG_INFS"),
    # hide jitgraph's own frames from the tracebacks of errors raised through its API
    "traceback_filtering": (_choice("traceback_filtering", _TRACEBACKS), "remove_frames",
                            "JITGRAPH_TRACEBACK_FILTERING"),
}
_ALIASES = {"jax_default_matmul_precision": "matmul_precision",
            "jax_threefry_partitionable": "threefry_partitionable",
            "jax_debug_nans": "debug_nans", "jax_debug_infs": "debug_infs",
            "jax_traceback_filtering": "traceback_filtering"}
_TRACED = ("default_float", "default_int", "threefry_partitionable")

_values: dict[str, Any] = {}
_listeners: list[Callable[[], None]] = []
_INTERNED: dict[tuple, tuple] = {}
TRACE_STATE: tuple = ()
_PROCESS_MARKS: tuple = ()      # ``mark_process``: facts of this process that programs depend on


def _set_trace_state() -> None:
    global TRACE_STATE
    t = tuple(_values[n] for n in _TRACED) + _PROCESS_MARKS
    TRACE_STATE = _INTERNED.setdefault(t, t)     # equal states are the same object


def mark_process(mark: str) -> None:
    """Add ``mark`` to ``TRACE_STATE`` for the rest of this process: every ``jit`` function
    then keeps its programs aside and compiles anew at its next call. The compiler marks a
    child forked from a process whose GNU OpenMP threads ran (``"serial"``: OpenMP cannot
    run in it again, so its programs are compiled without threads)."""
    global _PROCESS_MARKS
    if mark not in _PROCESS_MARKS:
        _PROCESS_MARKS += (mark,)
        _set_trace_state()


def _load_environment() -> None:
    for name, (parse, default, env) in _OPTIONS.items():
        raw = os.environ.get(env)
        try:
            _values[name] = default if raw in (None, "") else parse(raw)
        except ValueError as err:
            raise ValueError(f"environment variable {env}={raw!r}: {err}") from None
    _set_trace_state()


def _canonical_name(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name.startswith("jitgraph_"):
        name = name[len("jitgraph_"):]
    if name not in _OPTIONS and name != "jax_enable_x64":
        raise AttributeError(f"jitgraph.config: unknown setting {name!r}; the settings are "
                             f"{sorted(_OPTIONS) + ['jax_enable_x64'] + sorted(_ALIASES)}")
    return name


def update(name: str, value: Any) -> None:
    """Set a setting for the process, as ``jax.config.update``. ``jax_enable_x64=False`` sets
    ``default_float='float32'`` and ``default_int='int32'`` (True sets them back to 64 bits)."""
    name = _canonical_name(name)
    if name == "jax_enable_x64":
        x64 = _flag(name)(value)
        new = {"default_float": "float64" if x64 else "float32",
               "default_int": "int64" if x64 else "int32"}
    else:
        new = {name: _OPTIONS[name][0](value)}
    if all(_values[k] == v for k, v in new.items()):
        return
    _values.update(new)
    _set_trace_state()
    for fn in list(_listeners):
        fn()


def read(name: str) -> Any:
    """The current value of a setting (``jax_enable_x64``: whether defaults are 64-bit)."""
    name = _canonical_name(name)
    if name == "jax_enable_x64":
        return _values["default_float"] == "float64" and _values["default_int"] == "int64"
    return _values[name]


def values() -> dict[str, Any]:
    """Every setting and its current value."""
    return dict(_values)


def __getattr__(name: str) -> Any:
    """``config.jax_enable_x64``, ``config.jitgraph_default_float`` ...: a setting's value."""
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return read(name)
    except AttributeError:
        raise AttributeError(f"module 'jitgraph.config' has no attribute {name!r}") from None


def on_change(fn: Callable[[], None]) -> None:
    """Call ``fn()`` after every change of a setting (caches derived from the settings)."""
    _listeners.append(fn)


@contextlib.contextmanager
def _setting(**new: Any) -> Iterator[None]:
    old = {k: read(k) for k in new}
    for k, v in new.items():
        update(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            update(k, v)


def default_float(dtype: Any) -> contextlib.AbstractContextManager:
    """``with config.default_float("float32"):`` the default float dtype inside the block."""
    return _setting(default_float=dtype)


def default_int(dtype: Any) -> contextlib.AbstractContextManager:
    """``with config.default_int("int32"):`` the default integer dtype inside the block."""
    return _setting(default_int=dtype)


def enable_x64(enabled: bool = True) -> contextlib.AbstractContextManager:
    """``with config.enable_x64(False):`` 32-bit float and int defaults inside the block."""
    return _setting(jax_enable_x64=enabled)


def matmul_precision(precision: str) -> contextlib.AbstractContextManager:
    """``with config.matmul_precision("tf32"):`` as ``jax.default_matmul_precision``."""
    return _setting(matmul_precision=precision)


def threefry_partitionable(enabled: bool) -> contextlib.AbstractContextManager:
    """``with config.threefry_partitionable(False):`` JAX's original random-bit scheme."""
    return _setting(threefry_partitionable=enabled)


def debug_nans(enabled: bool = True) -> contextlib.AbstractContextManager:
    """``with config.debug_nans():`` jit calls inside the block raise ``FloatingPointError``
    naming the operation that made a NaN (as ``jax.debug_nans``)."""
    return _setting(debug_nans=enabled)


def traceback_filtering(mode: str) -> contextlib.AbstractContextManager:
    """``with config.traceback_filtering("off"):`` errors inside the block keep jitgraph's own
    frames in their tracebacks (``"auto"`` hides them, the default)."""
    return _setting(traceback_filtering=mode)


def debug_infs(enabled: bool = True) -> contextlib.AbstractContextManager:
    """``with config.debug_infs():`` the same for an infinite value."""
    return _setting(debug_infs=enabled)


def float_dtype() -> np.dtype:
    """The dtype of floats made without a dtype (float64 unless the settings say float32)."""
    return np.dtype(_values["default_float"])


def int_dtype() -> np.dtype:
    """The dtype of integers made without a dtype (int64 unless the settings say int32)."""
    return np.dtype(_values["default_int"])


_load_environment()


def numba_threads() -> int:
    """The threads Numba's threading layer starts with, read without importing Numba (0.2 s a
    process that runs only cached programs need not spend): ``NUMBA_NUM_THREADS``, else the
    CPUs this process may run on, as Numba's own default."""
    try:
        return max(1, int(os.environ.get("NUMBA_NUM_THREADS") or 0)
                   or len(os.sched_getaffinity(0)))
    except (AttributeError, ValueError):
        return max(1, os.cpu_count() or 1)
