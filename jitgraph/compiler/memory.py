"""The memory plan of a generated program: which buffer holds each value a step writes.

Buffers come from the caller, so a call allocates nothing inside generated code: outputs are
fresh arrays (``out_specs``), or a donated input's buffer updated in place; intermediates live
in scratch slots (``scratch_specs``) that the runtime pools between calls and that, within a
call, are reused between values whose lifetimes do not overlap (liveness from each step's
last read). Both backends use this plan unchanged; they only say how a step is called.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .fusion import LoopKernel, MatmulStep, Plan
from .kernel_text import reads, writes

# the statement a profiled driver runs before the first step and after each one
PROFILE_MARK = "profile_marks.append(profile_clock())"


def _nbytes(v) -> int:
    return int(v.aval.size) * np.dtype(v.aval.dtype).itemsize


@dataclass(frozen=True)
class MemoryStats:
    """A compiled program's memory, from its memory plan (deterministic; JAX's
    ``compiled.memory_analysis()`` names): ``argument_size_in_bytes`` (inputs),
    ``output_size_in_bytes`` (results), ``alias_size_in_bytes`` (results written into donated
    inputs: no new memory), ``temp_size_in_bytes`` (scratch buffers, pooled between calls),
    ``constant_size_in_bytes`` (arrays baked into the program), and
    ``peak_memory_in_bytes``: the most bytes live while any one step runs (arguments,
    constants, results written so far in new buffers, intermediates still to be read, the
    step's accumulators), ``steps`` giving that figure per step, and
    ``largest_temp_in_bytes``."""
    argument_size_in_bytes: int
    output_size_in_bytes: int
    alias_size_in_bytes: int
    temp_size_in_bytes: int
    constant_size_in_bytes: int
    peak_memory_in_bytes: int
    steps: tuple = ()
    largest_temp_in_bytes: int = 0
    """The biggest scratch buffer: whether a program ever holds an array of some size (the
    (T, T) scores of an attention that was not fused)."""

    def __str__(self) -> str:
        b = _size_text
        return (f"arguments {b(self.argument_size_in_bytes)}, outputs "
                f"{b(self.output_size_in_bytes)} ({b(self.alias_size_in_bytes)} in donated "
                f"buffers), scratch {b(self.temp_size_in_bytes)}, constants "
                f"{b(self.constant_size_in_bytes)}; peak live {b(self.peak_memory_in_bytes)}")


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


@dataclass
class Buffers:
    """The buffers a memory plan decided, as the backends' modules and programs read them:
    ``out_specs`` and ``scratch_specs`` are ``(name, elements, dtype)`` (outputs in the order
    the driver takes them), ``donated`` maps an output's name to the input whose buffer it
    is written into, ``output_sources`` says where each graph output is after a call:
    ``('out', k)``, ``('input', i)`` or ``('const', k)``. A backend's module may extend it
    (a subclass with what its own program reads, ``extended``)."""
    out_specs: list = field(default_factory=list)
    scratch_specs: list = field(default_factory=list)
    donated: dict = field(default_factory=dict)
    output_sources: list = field(default_factory=list)

    @property
    def out_names(self) -> list[str]:
        return [n for n, _, _ in self.out_specs]

    @property
    def scratch_names(self) -> list[str]:
        return [n for n, _, _ in self.scratch_specs]

    def extended(self, kind: type, **changes) -> "Buffers":
        """These buffers as a ``kind`` (a subclass), with ``changes``."""
        return kind(**{**vars(self), **changes})


class MemoryPlan:
    """Buffers for the steps of ``plan``; ``donate``: input indices whose buffers may hold
    outputs. ``driver_lines`` walks the steps once, binding buffers as it goes; afterwards
    ``info`` describes the buffers (``Buffers``) and ``in_place`` maps each output updated
    in place to its donor."""

    def __init__(self, plan: Plan, donate: set[int], accumulators: dict | None = None,
                 profile: bool = False):
        self.plan = plan
        self.donate = donate
        self.accumulators = accumulators if accumulators is not None else {}
        self.profile = profile
        self.in_place: dict = {}
        self.info = Buffers()

    def __str__(self) -> str:
        info = self.info
        lines = [f"output {n}: {size} x {np.dtype(d).name}" for n, size, d in info.out_specs]
        lines += [f"{n}: {size} x {np.dtype(d).name}" for n, size, d in info.scratch_specs]
        lines += [f"{name} = donated input {i} (updated in place)"
                  for name, i in info.donated.items()]
        return "\n".join(lines) or "(no buffers)"

    def driver_lines(self, calls: Sequence, step_lines: Callable) -> list[str]:
        """The driver's statements: buffer bindings, then ``step_lines(step, params)`` (the
        backend's call of each step), in plan order."""
        plan, g = self.plan, self.plan.graph
        outputs = set(g.outputs)
        last_use: dict = {}
        for i, (s, params) in enumerate(calls):
            for v in reads(s):
                last_use[v] = i
        free: dict = {}                 # (size, dtype) -> free scratch slot names
        scratch_specs: list = []
        out_specs: dict = {}            # output var -> (name, size, dtype)
        donated: dict = {}              # output var -> input index
        lines: list[str] = []
        bound: set = set()
        slot_of: dict = {}              # intermediate var -> its scratch slot
        donatable = {g.inputs[i]: i for i in self.donate if i < len(g.inputs)}

        def bind_buffer(v, step_index, s):
            if v in bound or (v not in plan.needed and v not in outputs):
                return
            bound.add(v)
            name = plan.array_name(v)
            if v in outputs:
                src = self._donor(v, s, step_index, donatable, last_use)
                if src is not None:
                    donated[v] = donatable.pop(src)
                    self.in_place[v] = src
                    lines.append(f"{name} = {plan.array_name(src)}  # donated: updated in place")
                else:
                    out_specs[v] = (f"out_{name}", v.aval.size, v.aval.dtype)
                    lines.append(f"{name} = out_{name}")
                return
            slot = take_slot(v.aval.size, v.aval.dtype)
            lines.append(f"{name} = {slot}")
            slot_of[v] = slot

        def take_slot(size: int, dtype) -> str:
            if free.get((size, dtype)):
                return free[(size, dtype)].pop()
            slot = f"scratch{len(scratch_specs)}"
            scratch_specs.append((slot, size, dtype))
            return slot

        if self.profile:
            lines.append(PROFILE_MARK)
        live: dict = {}                 # intermediates (and accumulators) live now -> bytes
        fresh_out = 0                   # bytes of outputs written so far in new buffers
        timeline: list = []             # (step name, bytes live while it runs)
        for i, (s, params) in enumerate(calls):
            for v in writes(s):
                bind_buffer(v, i, s)
                if v in slot_of:
                    live[v] = _nbytes(v)
                elif v in out_specs and v not in live:
                    live[v] = 0             # counted once, in fresh_out
                    fresh_out += _nbytes(v)
            taken = []
            for name, size, dt in self.accumulators.get(s.name, ()):
                slot = take_slot(size, dt)
                taken.append(((size, dt), slot))
                lines.append(f"{name} = {slot}")
                live[name] = size * np.dtype(dt).itemsize
            timeline.append((s.name, fresh_out + sum(live.values())))
            lines += step_lines(s, params)
            if self.profile:
                lines.append(PROFILE_MARK)
            for key, slot in taken:
                free.setdefault(key, []).append(slot)
            for name, _, _ in self.accumulators.get(s.name, ()):
                live.pop(name, None)
            for v in reads(s):
                if last_use.get(v) == i and v in slot_of:
                    free.setdefault((v.aval.size, v.aval.dtype), []).append(slot_of[v])
                    live.pop(v, None)
            for v in writes(s):         # written and never read: dead after its step
                if v in slot_of and v not in last_use:
                    live.pop(v, None)
        self.timeline = timeline
        self.steps_run = [s for s, _ in calls]     # as the driver runs them (a pair is one)
        lines.append("return None")
        order = list(dict.fromkeys(v for v in g.outputs if v in out_specs))  # one buffer each
        self.walked_scratch = list(scratch_specs)
        self.info = Buffers([out_specs[v] for v in order], scratch_specs,
                            {plan.array_name(v): i for v, i in donated.items()},
                            self._output_sources(order, donated))
        return lines

    def stats(self) -> "MemoryStats":
        """What this program's buffers take (after ``driver_lines``; see ``MemoryStats``)."""
        g, info = self.plan.graph, self.info
        arg = sum(_nbytes(v) for v in dict.fromkeys(g.inputs))
        const = sum(_nbytes(v) for v in self.plan.const_args)
        outs = list(dict.fromkeys(g.outputs))
        out = sum(_nbytes(v) for v in outs)
        alias = sum(_nbytes(v) for v in outs if v in self.in_place)
        temp = sum(size * np.dtype(dt).itemsize for _, size, dt in info.scratch_specs)
        # backend scratch the walk did not see (the CUDA split reductions' partials): live
        # throughout
        walked = {n for n, _, _ in getattr(self, "walked_scratch", info.scratch_specs)}
        extra = sum(size * np.dtype(dt).itemsize for n, size, dt in info.scratch_specs
                    if n not in walked)
        steps = [(name, arg + const + b + extra) for name, b in getattr(self, "timeline", [])]
        peak = max([b for _, b in steps], default=arg + const)
        largest = max([size * np.dtype(dt).itemsize for _, size, dt in info.scratch_specs],
                      default=0)
        return MemoryStats(arg, out, alias, temp, const, peak, tuple(steps), largest)

    def _output_sources(self, order, donated) -> list:
        """How to find each graph output after a call: ('out', k) | ('input', i) | ('const', k)."""
        g = self.plan.graph
        res = []
        for v in g.outputs:
            if v in order:
                res.append(("out", order.index(v)))
            elif v in donated:
                res.append(("input", donated[v]))
            elif v in g.consts:
                res.append(("const", self.plan.const_args.index(v)))
            else:
                res.append(("input", g.inputs.index(v)))
        return res

    def _donor(self, v, s, i, donatable, last_use):
        """A donated input whose buffer can hold output ``v``: same shape and dtype, read for the
        last time by the elementwise kernel that writes ``v``, at the same index only."""
        if isinstance(s, MatmulStep):   # GEMM epilogue: c is read and written in place
            ep = s.epilogue
            u = ep.c if ep is not None else None
            if u is not None and u in donatable and v is ep.out and ep.beta != 0 and \
                    last_use.get(u, -1) <= i and u not in (s.a[0], s.b[0]) and \
                    u not in self.plan.graph.outputs:
                return u
            return None
        if not isinstance(s, LoopKernel) or s.axes or len(s.stages) != 1:
            return None
        own = self.plan.syntax.offset(s.body.full_idx, s.shape)
        for u in donatable:
            if u.aval.shape != v.aval.shape or u.aval.dtype != v.aval.dtype or u in self.plan.graph.outputs:
                continue
            if last_use.get(u, -1) > i:
                continue
            offs = s.body.load_offsets.get(u)
            if offs is None or offs - {own}:
                continue
            return u
        return None
