"""The compiler pipeline: one entry point, ``compile(graph, target, options) -> Executable``.

    lower     graph -> graph        inline custom_vjp calls, merge residual scans  (lower.py)
    fuse      graph -> Plan         loop kernels, products, scatters, host steps   (fusion.py)
    generate  Plan  -> Generated    kernels, memory plan, driver, call path        (backends/)
    load      Generated -> Executable   disk cache, Numba or native bundle     (backends/)

Each stage is a function of the previous stage's value, and every value prints:
``jit(f).lower(*args).stages`` holds them all (the lowered graph, the plan, the memory plan,
the generated source). ``compile_dynamic`` is the same pipeline run at a few sample sizes,
with the generated sources fitted into one program whose sizes are runtime arguments.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ..compile_phases import phase
from ..core import Graph
from ..dtypes import is_complex
from ..rewrite import targeting
from ..targets import target_named
from .backends import register_target
from .backends.base import CompileOptions, Executable, ModuleText, ScalarContext, Target, \
    emit_program, with_own
from .dynamic import CannotGeneralize, generalize, sample_points
from .fusion import HostStep, Plan, kernel_ops, make_plan
from .lower import lower
from .memory import MemoryPlan

__all__ = ["CompileOptions", "Generated", "compile", "compile_dynamic", "fuse", "generate",
           "generate_graph", "load", "lower", "register_target", "target_of"]


@dataclass
class Generated:
    """Everything code generation produced for one graph, before anything compiles.
    ``shown_graph``/``shown_plan`` are what ``lower()`` shows (a program fitted from sample
    sizes shows the graph at the sizes it was called with)."""
    graph: Graph
    plan: Plan
    module: ModuleText
    memory: MemoryPlan
    decisions: list
    runner: str
    shown_graph: Graph = None          # type: ignore[assignment]
    shown_plan: Plan = None            # type: ignore[assignment]
    stages: dict = field(default_factory=dict)

    def __post_init__(self):
        self.shown_graph = self.graph if self.shown_graph is None else self.shown_graph
        self.shown_plan = self.plan if self.shown_plan is None else self.shown_plan


def target_of(name: str, what: str = "unknown compiler target") -> Target:
    """The registered target called ``name`` (``register_target``); ``what`` starts the
    error message where there is none."""
    return target_named(name, what)      # type: ignore[return-value]


def fuse(graph: Graph, ctx: ScalarContext) -> Plan:
    """Split the lowered graph into the steps of a program (``fusion.make_plan``)."""
    with phase("fuse"):
        return make_plan(graph, ctx)


def generate(plan: Plan, target: Target, ctx: ScalarContext,
             options: CompileOptions) -> Generated:
    """The backend's kernels, the memory plan, the driver and the call path of ``plan``."""
    with phase("generate"):
        codegen = target.codegen(plan, ctx, options)
        module, memory = emit_program(codegen, plan, set(options.donate))
        runner = target.call_path(plan, module.info, options)
    return Generated(plan.graph, plan, module, memory, target.decisions(codegen), runner)


def load(gen: Generated, target: Target, options: CompileOptions, t0: float) -> Executable:
    """Compile (or find in the disk cache) and wrap the generated program."""
    with phase("load"):
        return target.load(gen, options, t0, _compile_again(target))


def _compile_again(target: Target) -> Callable:
    """How an executable compiles a variant of itself (its profiled twin)."""
    return lambda graph, options: compile(graph, target.name, options)


def generate_graph(graph: Graph, target: Target, options: CompileOptions) -> Generated:
    """lower -> fuse -> generate: the generated program of ``graph``, not yet loaded, with
    every stage's value in ``stages``."""
    if not target.capabilities.complex_numbers:
        refuse_complex(graph, target.name)
    # the fused rewrites' cost models price this target
    with phase("optimise"), targeting(target.name):
        lowered = lower(graph)
    ctx = target.context(options)
    plan = fuse(lowered, ctx)
    gen = generate(plan, target, ctx, options)
    gen.stages = {"graph": graph, "lowered": lowered, "plan": plan, "memory": gen.memory,
                  "source": gen.module.source}
    return gen


def refuse_complex(graph: Graph, target: str) -> None:
    """A TypeError naming the first op with a complex value, for a target whose kernels do
    not compute complex numbers (its capabilities say)."""
    for n in graph.nodes:
        for v in list(n.inputs) + list(n.outs):
            if is_complex(v.aval.dtype):
                at = "" if n.source is None else " at %s:%s" % n.source[:2]
                raise TypeError(
                    f"{n.prim.name}{at} on {v.aval.dtype} {v.aval.shape}: the {target} target does "
                    f"not compute complex numbers yet; run this function on the CPU "
                    f"(jit(f, device='cpu')), or carry the real and imaginary parts as "
                    f"separate float arrays (jnp.real, jnp.imag)")
    for v in graph.inputs:
        if is_complex(v.aval.dtype):
            raise TypeError(f"an input of {v.aval.dtype} {v.aval.shape}: the {target} target "
                            "does not compute complex numbers yet; run this function on the "
                            "CPU (jit(f, device='cpu'))")


def compile(graph: Graph, target: str = "cpu", options: CompileOptions | None = None,
            t0: float | None = None) -> Executable:
    """lower -> fuse -> generate -> load (see the module docstring)."""
    t0 = time.perf_counter() if t0 is None else t0
    options = CompileOptions() if options is None else options
    tgt = target_of(target)
    return load(generate_graph(graph, tgt, options), tgt, options, t0)


def compile_dynamic(graph: Graph, trace_at: Callable, symbols: dict, options: CompileOptions,
                    t0: float | None = None, target: str = "cpu") -> Executable:
    """Compile ``graph`` with the sizes ``symbols`` (name -> [(input, axis)]) as runtime
    arguments, on a target whose capabilities say ``dynamic_shapes`` (its options take
    ``symbols``, ``decisions`` and ``allow_native``). ``trace_at(point)`` traces the same
    function with those sizes set to ``point``'s; the programs generated at
    ``dynamic.sample_points`` are fitted into one (``dynamic.generalize``). Loop layouts are
    decided at the sizes of ``graph``. Raises ``CannotGeneralize`` when the program's
    structure depends on the sizes."""
    t0 = time.perf_counter() if t0 is None else t0
    tgt = target_of(target)
    if not tgt.capabilities.dynamic_shapes:
        raise ValueError(f"compile_dynamic: target {tgt.name!r} compiles fixed sizes only")
    sym_list = tuple((name, group[0][0], group[0][1]) for name, group in symbols.items())
    # the program at the sizes of ``graph``, already with sizes as arguments: it decides the
    # loop layouts, and is the sample that checks the fitted formulas (where every size
    # differs from the reference point's), one trace and generation fewer
    base = generate_graph(graph, tgt, with_own(options, tgt.options_type, symbols=sym_list))
    at_points = with_own(options, tgt.options_type, symbols=sym_list, decisions=base.decisions)
    points = sample_points(dict.fromkeys(symbols, 0))
    actual = {name: int(graph.inputs[group[0][0]].aval.shape[group[0][1]])
              for name, group in symbols.items()}
    if all(actual[n] not in (p[n] for p in points[:-1]) for n in actual):
        points[-1] = actual
    gens = []
    for point in points:
        if point is actual:
            gens.append(base)
            continue
        try:
            gens.append(generate_graph(trace_at(point), tgt, at_points))
        except IndexError:          # more loop kernels than at the first sizes
            raise CannotGeneralize("the fusion plan depends on the sizes") from None
    first = gens[0]
    if any(isinstance(s, HostStep) for s in first.plan.steps):
        raise CannotGeneralize("host steps take fixed shapes")
    consts = [[g.graph.consts[v] for v in g.plan.const_args] for g in gens]
    if any(len(c) != len(consts[0]) or any(a.shape != b.shape or not np.array_equal(a, b)
                                           for a, b in zip(c, consts[0])) for c in consts):
        raise CannotGeneralize("constant arrays depend on the sizes")
    if any(len(g.module.kernels) != len(first.module.kernels) for g in gens):
        raise CannotGeneralize("the kernels depend on the sizes")
    for i, ks in enumerate(first.module.kernels):
        ks.source = generalize([g.module.kernels[i].source for g in gens], points)
    module = replace(first.module, source=generalize([g.module.source for g in gens], points))
    fitted = Generated(first.graph, first.plan, module, first.memory, first.decisions,
                       generalize([g.runner for g in gens], points),
                       shown_graph=base.graph, shown_plan=base.plan,
                       stages=dict(base.stages, source=module.source))
    loaded = with_own(at_points, tgt.options_type, decisions=None, allow_native=True)
    return load(fitted, tgt, loaded, t0)


def describe(value: Any) -> str:
    """A stage's value as text (what ``Lowered.show(stage)`` prints)."""
    if isinstance(value, Plan):
        return "\n".join(_step_text(s) for s in value.steps)
    return value if isinstance(value, str) else str(value)


def _step_text(s) -> str:
    kind = type(s).__name__
    shape = f" {tuple(s.shape)}" if hasattr(s, "shape") else ""
    axes = f" reduce {tuple(s.axes)}" if getattr(s, "axes", None) else ""
    ops = ", ".join(n.prim.name for n in kernel_ops(s))
    return f"{s.name}: {kind}{shape}{axes} [{ops}]"
