"""The registry of compiler targets, by name, with what each can do (its ``Capabilities``).

It sits below ``core`` because every layer asks it: the primitives' records name a scalar
routine per target (``core.scalar_function``), ``device_put`` asks whether a target's
arrays live on a device, ``jit`` whether it compiles runtime sizes, the profiler how to
time it, the compile settings whether Numba's CPU options apply. The compiler registers
its targets here (``compiler/backends``); a new backend calls ``register_target`` with its
``Target`` (``compiler/backends/base.py``) and is then usable as ``jit(f, device=name)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Capabilities:
    """What a target can do, declared once, so that no caller compares target names."""

    device_arrays: bool = False
    """Its programs take and return ``DeviceArray`` leaves (traced by shape and dtype, no host
    copy); else NumPy arrays on the host."""
    dynamic_shapes: bool = False
    """It compiles programs whose sizes are runtime arguments (``pipeline.compile_dynamic``:
    its options take ``symbols`` and ``decisions``)."""
    approx_functions: bool = False
    """Its kernels call the vectorizable approximations of the primitives whose record says
    ``approx`` (``<name>_f32``/``<name>_f64``) under ``approx_math``."""
    streams: bool = False
    """Its programs run on a stream the caller gives (``jit(f, stream=...)``)."""
    numba_cpu: bool = False
    """It compiles with Numba's CPU pipeline: the compile settings' optimization level
    applies (``compiler.settings.compile_settings``)."""
    complex_numbers: bool = False
    """Its kernels compute complex64 and complex128 values (``pipeline.generate_graph``
    refuses a graph with complex values for a target without them)."""
    hardware: str = "cpu"
    """The machine its programs run on, "cpu" or "cuda": how the profiler times a call (a
    host clock, or events on the device's stream after a synchronize) and which peaks it
    rates the steps against."""


class Registered(Protocol):
    """What the registry reads of a target (the compiler's ``Target`` has more)."""
    name: str
    aliases: tuple[str, ...]
    capabilities: Capabilities


TARGETS: dict[str, Registered] = {}
"""Name -> target, in order of registration (filled at import by the compiler)."""
_ALIASES: dict[str, str] = {}


def register_target(target: Registered) -> Registered:
    """Make ``target`` usable by its name (and its aliases) everywhere: ``jit(f, device=...)``,
    ``device_put``, ``pipeline.compile``. Registering a name again replaces its target."""
    for name in (target.name, *target.aliases):
        other = _ALIASES.get(name, name if name in TARGETS else target.name)
        if other != target.name:
            raise ValueError(f"register_target: {name!r} already names target {other!r}")
    TARGETS[target.name] = target
    for alias in target.aliases:
        _ALIASES[alias] = target.name
    return target


def target_named(name: str, what: str = "unknown compiler target") -> Registered:
    """The registered target called ``name`` (or one of its aliases); ``what`` starts the
    error message, which lists the registered names."""
    key = str(name)
    target = TARGETS.get(_ALIASES.get(key, key))
    if target is None:
        raise ValueError(f"{what} {name!r}; one of {target_names()} "
                         "(jitgraph.devices() lists what is usable here)")
    return target


def target_names() -> list[str]:
    """The registered targets' names."""
    return list(TARGETS)


def capabilities(name: str) -> Capabilities:
    """The ``Capabilities`` of the target called ``name``."""
    return target_named(name).capabilities
