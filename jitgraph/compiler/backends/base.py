"""What a compiler backend provides, and the one walk over a plan that every backend shares.

A backend is a ``Target``: it writes the scalar code of its kernels (a ``ScalarContext``: its
syntax table, which fusion uses while it builds kernel bodies), generates one program's text (a
``Codegen``: loop kernels, row kernels, scatters, product and host calls, the module header
and the driver that launches the steps) and loads that text as an ``Executable``. The
pipeline (``compiler/pipeline.py``) calls them in that order; ``emit_program`` below is the
part of generation that is the same for every backend. To add a backend, write these three
objects, bundle them in a ``Target`` and pass it to ``register_target`` (``jitgraph.targets``);
nothing else in jitgraph changes (docs/pipeline/codegen.md, "Adding a backend").
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..fusion import (HostStep, LoopKernel, LoopThenProduct, MatmulStep, Plan, ProductThenLoop,
                      ScatterStep)
from ..kernel_text import KernelSource
from ..memory import Buffers, MemoryPlan
from ..syntax import Statement
from ...targets import Capabilities


@dataclass
class ModuleText:
    """One program's generated text, before anything is compiled: the module source (a
    template holding ``{H}`` where a backend names functions by a hash of the finished
    text), its kernels, the driver's name and the buffers of the memory plan (extended by the
    backend with what its program reads)."""
    source: str
    kernels: list[KernelSource]
    driver_name: str
    info: Buffers


@dataclass
class CompileOptions:
    """How a program is compiled, for every target. ``donate``: input indices whose buffers
    may hold outputs; ``single_output``: the call path returns a lone output array as it is
    (a host-array target; jit asks for it only there); ``profile``: a driver that marks the
    end of every step; ``name``: the function's name, for error messages; ``target``: the
    target's own options (``CpuOptions``, ``CudaOptions``; None: its defaults, see
    ``own_options``)."""
    fastmath: bool = False
    donate: tuple = ()
    single_output: bool = False
    profile: bool = False
    name: str = "f"
    target: Any = None


@dataclass
class CpuOptions:
    """The CPU target's own options. ``approx_math``: the vectorizable exp/log/tanh
    approximations; ``symbols``: sizes that are runtime arguments, ``(name, input index,
    axis)``; ``decisions``: loop layouts to reuse (``compile_dynamic``);
    ``compiled_driver``: a loop body's driver, called from a compiled loop;
    ``allow_native``: where this process has not imported Numba, a program may run from its
    native bundle (``native.py``), and one is written after its first call."""
    approx_math: bool = True
    symbols: tuple = ()
    decisions: Any = None
    compiled_driver: bool = False
    allow_native: bool = False


@dataclass
class CudaOptions:
    """The CUDA target's own options. ``cuda_graph``: a program replays its launch sequence
    as a CUDA graph once its buffers repeat; ``stream``: the caller's stream (else the
    driver's own)."""
    cuda_graph: bool = True
    stream: Any = None


def own_options(options: CompileOptions, kind: type) -> Any:
    """The target's own options in ``options`` (a ``kind`` with its defaults when none were
    given)."""
    own = options.target
    if own is None:
        return kind()
    if not isinstance(own, kind):
        raise TypeError(f"compile options for {kind.__name__} expected, got {type(own).__name__}")
    return own


def options_from(kind: type, settings: dict) -> Any:
    """A target's own options made from the settings a caller has (``jit``'s ``cuda_graph``,
    ``stream``, ...): those that ``kind`` declares, the rest ignored."""
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in settings.items() if k in names})


def with_own(options: CompileOptions, kind: type, **changes: Any) -> CompileOptions:
    """``options`` with its target options changed (``dataclasses.replace`` of both)."""
    return replace(options, target=replace(own_options(options, kind), **changes))


class ScalarContext(Protocol):
    """How a backend writes scalar code: its syntax table (a ``compiler.syntax.Syntax``, with
    the entries its language writes differently overridden), which the primitives' rules,
    the emitter and the kernel text write everything with, and the functions a primitive's
    expression calls. ``in_dtype`` is set by the emitter to the dtype of the operands at
    hand. (The entries below are the ones a rule most often uses; ``Syntax`` has them all.)"""
    backend: str
    approx_math: bool
    in_dtype: np.dtype

    def fn(self, name: str) -> str: ...

    def returns_input_type(self, name: str) -> bool: ...

    def op(self, name: str, *operands: str) -> str: ...

    def select(self, cond: str, x: str, y: str) -> str: ...

    def literal(self, value, dtype) -> str: ...

    def cast(self, expr: str, dtype) -> str: ...

    def convert(self, expr: str, src, dst) -> str: ...

    def call(self, fn: str, *args: str) -> str: ...

    def assign(self, target: str, value: str) -> Statement: ...


class Codegen(Protocol):
    """The text of one program for one backend (made per plan by ``Target.codegen``).

    Kernel methods return ``(source, parameter names)``; call methods return driver
    statements. ``accumulators`` (step name -> scratch the driver passes it) and ``profile``
    are read by the memory plan."""
    accumulators: dict
    profile: bool

    def loop_kernel(self, k: LoopKernel) -> tuple[str, list]: ...

    def row_kernel(self, k: LoopKernel) -> tuple[str, list]: ...

    def scatter_kernel(self, s: ScatterStep) -> tuple[str, list]: ...

    def add_kernel(self, s, src: str, params: list) -> None: ...

    def kernel_call(self, s, params: list) -> list[str]: ...

    def product_call(self, s: MatmulStep, memory: MemoryPlan) -> list[str]: ...

    def host_call(self, s: HostStep) -> list[str]: ...

    def module(self, body: list[str], memory: MemoryPlan) -> ModuleText: ...


class Executable(Protocol):
    """A loaded program, whatever its backend: what ``jit`` calls and shows.

    ``make_runner`` builds the call path for one signature; ``profiled`` is the same program
    with a driver that marks every step (``jitgraph.profile``); ``stages`` are the
    pipeline's intermediate values (``jit(f).lower(...)``); ``native`` is whether it runs
    from a native bundle (nothing to compile on its first call), ``numba_compiles`` how many
    functions Numba compiled for it."""
    graph: Any
    plan: Any
    source: str
    kernels: list
    compile_seconds: float
    was_on_disk: bool
    native: bool
    symbols: tuple
    stages: dict

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable: ...

    def profiled(self, graph=None) -> "Executable": ...

    def numba_compiles(self) -> int: ...


class Target(Protocol):
    """A backend: its name and capabilities (what ``jit``, ``device_put``, the profiler and
    the compile settings ask instead of comparing names), its own options, and the four
    things the pipeline calls in order: its scalar context, its code generator, the call path
    of a generated program and its loader. ``register_target`` makes one usable by name."""
    name: str
    aliases: tuple[str, ...]
    capabilities: Capabilities
    options_type: type
    """The dataclass of its own options (``CompileOptions.target``)."""

    def check_usable(self, what: str) -> None:
        """Raise a clear error, naming ``what`` asked, where this target cannot run here."""

    def synchronize(self) -> None:
        """Wait until every program launched on this target has finished (a timer's end)."""

    def context(self, options: CompileOptions) -> ScalarContext: ...

    def codegen(self, plan: Plan, ctx: ScalarContext, options: CompileOptions) -> Codegen: ...

    def call_path(self, plan: Plan, info: Buffers, options: CompileOptions) -> str:
        """The source of the straight-line call path ``load`` builds the program's runner
        from ("" where the executable builds one per signature itself)."""

    def decisions(self, codegen: Codegen) -> list:
        """The layout decisions ``codegen`` made (reused when the program is generated again
        at other sizes, ``compile_dynamic``); [] for a target without them."""

    def load(self, generated: Any, options: CompileOptions, t0: float,
             compile_again: Callable | None = None) -> Executable: ...


def emit_program(codegen: Codegen, plan: Plan, donate: set[int]) -> tuple[ModuleText, MemoryPlan]:
    """Generate every step's kernel, plan the buffers, then the driver: the walk over a plan
    that is the same for every backend (each backend says only how a step looks)."""
    calls = []
    for s in plan.steps:
        src, params = None, None
        if isinstance(s, LoopKernel):
            src, params = codegen.row_kernel(s) if s.axes else codegen.loop_kernel(s)
        elif isinstance(s, ScatterStep):
            src, params = codegen.scatter_kernel(s)
        if src is not None:
            codegen.add_kernel(s, src, params)
        calls.append((s, params))
    pair = getattr(codegen, "pair_steps", None)   # (optional: steps a backend runs as one)
    if pair is not None:
        calls = pair(calls)
    # generated names are numbered in order of first use, and the disk cache keys on the text:
    # the driver's signature (constants, then inputs) is named before its statements
    for v in list(plan.const_args) + list(plan.graph.inputs):
        plan.array_name(v)
    memory = MemoryPlan(plan, donate, codegen.accumulators, codegen.profile)

    def step_lines(s, params) -> list[str]:
        if isinstance(s, (LoopThenProduct, ProductThenLoop)):
            return codegen.paired_call(s, params)
        if isinstance(s, (LoopKernel, ScatterStep)):
            return codegen.kernel_call(s, params)
        if isinstance(s, MatmulStep):
            return codegen.product_call(s, memory)
        return codegen.host_call(s)

    body = memory.driver_lines(calls, step_lines)
    return codegen.module(body, memory), memory
