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
    inputs: no new memory), ``temp_size_in_bytes`` (scratch buffers, pooled between calls;
    ``temp_allocated_in_bytes``: what they take packed into one allocation),
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
    temp_allocated_in_bytes: int = field(default=0, compare=False)
    """What the scratch buffers take once packed into one allocation (``Arena``: slots that
    never hold values at the same step share bytes); ``temp_size_in_bytes`` where a backend
    allocates each buffer on its own."""

    def __str__(self) -> str:
        b = _size_text
        packed = (f" (in {b(self.temp_allocated_in_bytes)})"
                  if self.temp_allocated_in_bytes < self.temp_size_in_bytes else "")
        return (f"arguments {b(self.argument_size_in_bytes)}, outputs "
                f"{b(self.output_size_in_bytes)} ({b(self.alias_size_in_bytes)} in donated "
                f"buffers), scratch {b(self.temp_size_in_bytes)}{packed}, constants "
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
    # the scratch slots as byte offsets in one allocation (``arena_layout``); None: each slot
    # an array of its own (sizes known only at run time)
    arena: "Arena | None" = None

    @property
    def out_names(self) -> list[str]:
        return [n for n, _, _ in self.out_specs]

    @property
    def scratch_names(self) -> list[str]:
        return [n for n, _, _ in self.scratch_specs]

    def extended(self, kind: type, **changes) -> "Buffers":
        """These buffers as a ``kind`` (a subclass), with ``changes``."""
        return kind(**{**vars(self), **changes})


ARENA_ALIGN = 64     # bytes: a slot of 4 KiB or more starts on a cache line (a full vector
ARENA_ALIGN_SMALL = 16  # register); a smaller one on 16 bytes (any dtype's alignment)


@dataclass(frozen=True)
class Arena:
    """Where each scratch slot lies in one allocation of ``nbytes``: ``offsets[slot name]``.
    Two slots overlap in memory only where they never hold values at the same step."""
    nbytes: int
    offsets: dict

    def views(self, specs: Sequence) -> list:
        """Fresh scratch arrays for one call: a view of one new allocation per slot of
        ``specs`` (``(name, elements, dtype)``, the slots in the driver's order)."""
        raw = np.empty(self.nbytes + ARENA_ALIGN, np.uint8)
        base = -raw.ctypes.data % ARENA_ALIGN
        out = []
        for name, n, dt in specs:
            o = base + self.offsets[name]
            out.append(raw[o:o + n * np.dtype(dt).itemsize].view(dt))
        return out


def arena_layout(specs: Sequence, occupancy: dict) -> Arena | None:
    """Pack the scratch slots into one allocation, as XLA's heap simulator and TFLite's arena
    planner do: slots by size, largest first, each at the lowest offset where it overlaps no
    slot that holds a value at one of the same steps (``occupancy``: slot -> [(first step,
    last step)], both ends inclusive). Why: the plan reuses a slot only for values of its exact
    size and dtype, so slots of different sizes summed to more than the most bytes ever live
    (the GPT benchmark's large step: 1121 MiB of slots, 1025 MiB live at its peak). None where
    a size is known only at run time."""
    sizes, aligns = {}, {}
    for name, n, dt in specs:
        if not isinstance(n, (int, np.integer)):
            return None
        nb = int(n) * np.dtype(dt).itemsize
        aligns[name] = ARENA_ALIGN if nb >= 4096 else ARENA_ALIGN_SMALL
        sizes[name] = -(-nb // aligns[name]) * aligns[name]
    spans = {name: sorted(occupancy.get(name, ())) for name in sizes}

    def together(a: list, b: list) -> bool:
        return any(s0 <= e1 and s1 <= e0 for s0, e0 in a for s1, e1 in b)

    placed: list = []               # (offset, end, name)
    offsets: dict = {}
    for name in sorted(sizes, key=lambda k: (-sizes[k], k)):
        size, align, at = sizes[name], aligns[name], 0
        for lo, hi, _ in sorted(p for p in placed if together(spans[p[2]], spans[name])):
            if at + size <= lo:
                break
            at = max(at, -(-hi // align) * align)
        offsets[name] = at
        placed.append((at, at + size, name))
    return Arena(max((hi for _, hi, _ in placed), default=0), offsets)


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
        occupancy: dict = {}            # slot -> [(first step, last step)] it holds a value
        opened: dict = {}               # slot -> the step its current value was bound at
        donatable = {g.inputs[i]: i for i in self.donate if i < len(g.inputs)}
        own_input: dict = {}            # output var -> the input at its position (first one)
        for v, u in zip(g.outputs, g.inputs):
            own_input.setdefault(v, u)

        def bind_buffer(v, step_index, s):
            if v in bound or (v not in plan.needed and v not in outputs):
                return
            bound.add(v)
            name = plan.array_name(v)
            if v in outputs:
                src = self._donor(v, s, step_index, donatable, last_use, own_input.get(v))
                if src is not None:
                    donated[v] = donatable.pop(src)
                    self.in_place[v] = src
                    lines.append(f"{name} = {plan.array_name(src)}  # donated: updated in place")
                else:
                    out_specs[v] = (f"out_{name}", v.aval.size, v.aval.dtype)
                    lines.append(f"{name} = out_{name}")
                return
            slot = take_slot(v.aval.size, v.aval.dtype, step_index)
            lines.append(f"{name} = {slot}")
            slot_of[v] = slot

        def take_slot(size: int, dtype, step_index: int) -> str:
            if free.get((size, dtype)):
                slot = free[(size, dtype)].pop()
            else:
                slot = f"scratch{len(scratch_specs)}"
                scratch_specs.append((slot, size, dtype))
            opened[slot] = step_index
            return slot

        def free_slot(key, slot: str, step_index: int) -> None:
            free.setdefault(key, []).append(slot)
            occupancy.setdefault(slot, []).append((opened.pop(slot), step_index))

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
                slot = take_slot(size, dt, i)
                taken.append(((size, dt), slot))
                lines.append(f"{name} = {slot}")
                live[name] = size * np.dtype(dt).itemsize
            timeline.append((s.name, fresh_out + sum(live.values())))
            lines += step_lines(s, params)
            if self.profile:
                lines.append(PROFILE_MARK)
            for key, slot in taken:
                free_slot(key, slot, i)
            for name, _, _ in self.accumulators.get(s.name, ()):
                live.pop(name, None)
            for v in reads(s):
                if last_use.get(v) == i and v in slot_of:
                    free_slot((v.aval.size, v.aval.dtype), slot_of[v], i)
                    live.pop(v, None)
            for v in writes(s):         # written and never read: dead after its step
                if v in slot_of and v not in last_use:
                    live.pop(v, None)
        for slot, first in opened.items():      # still holding a value at the end
            occupancy.setdefault(slot, []).append((first, len(calls)))
        self.timeline = timeline
        self.steps_run = [s for s, _ in calls]     # as the driver runs them (a pair is one)
        lines.append("return None")
        order = list(dict.fromkeys(v for v in g.outputs if v in out_specs))  # one buffer each
        self.walked_scratch = list(scratch_specs)
        self.info = Buffers([out_specs[v] for v in order], scratch_specs,
                            {plan.array_name(v): i for v, i in donated.items()},
                            self._output_sources(order, donated),
                            arena_layout(scratch_specs, occupancy))
        return lines

    def stats(self) -> "MemoryStats":
        """What this program's buffers take (after ``driver_lines``; see ``MemoryStats``)."""
        g, info = self.plan.graph, self.info
        arg = sum(_nbytes(v) for v in dict.fromkeys(g.inputs))
        const = sum(_nbytes(v) for v in self.plan.const_args)
        outs = list(dict.fromkeys(g.outputs))
        out = sum(_nbytes(v) for v in outs)
        alias = sum(_nbytes(v) for v in outs if v in self.in_place)
        # backend scratch the walk did not see (the CUDA split reductions' partials): live
        # throughout
        walked = {n for n, _, _ in getattr(self, "walked_scratch", info.scratch_specs)}
        extra = sum(size * np.dtype(dt).itemsize for n, size, dt in info.scratch_specs
                    if n not in walked)
        temp = sum(size * np.dtype(dt).itemsize for _, size, dt in info.scratch_specs)
        allocated = temp if info.arena is None else info.arena.nbytes + extra
        steps = [(name, arg + const + b + extra) for name, b in getattr(self, "timeline", [])]
        peak = max([b for _, b in steps], default=arg + const)
        largest = max([size * np.dtype(dt).itemsize for _, size, dt in info.scratch_specs],
                      default=0)
        return MemoryStats(arg, out, alias, temp, const, peak, tuple(steps), largest, allocated)

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

    def _donor(self, v, s, i, donatable, last_use, own):
        """A donated input whose buffer can hold output ``v``: same shape and dtype, read for the
        last time by the elementwise kernel that writes ``v``, at the same index only. The input
        at ``v``'s own position first (a training step's parameter or optimizer state, whose
        new value it is): a caller who passes the donated arrays again (``benchmark``,
        ``profile``, a loop that does not rebind) then gets each leaf's new value in its own
        array, not another leaf's (an AdamW step's moments in its parameters' arrays).
        ``own``: that input (None where the outputs outnumber the inputs)."""
        if own in donatable and self._can_hold(own, v, s, i, last_use):
            return own
        return next((u for u in donatable if u is not own and
                     self._can_hold(u, v, s, i, last_use)), None)

    def _can_hold(self, u, v, s, i, last_use) -> bool:
        """Whether donated input ``u``'s buffer can hold output ``v`` (``_donor``)."""
        if isinstance(s, MatmulStep):   # GEMM epilogue: c is read and written in place
            ep = s.epilogue
            return ep is not None and u is ep.c and v is ep.out and ep.beta != 0 and \
                last_use.get(u, -1) <= i and u not in (s.a[0], s.b[0]) and \
                u not in self.plan.graph.outputs
        if not isinstance(s, LoopKernel) or s.axes or len(s.stages) != 1:
            return False
        if u.aval.shape != v.aval.shape or u.aval.dtype != v.aval.dtype or \
                u in self.plan.graph.outputs or last_use.get(u, -1) > i:
            return False
        offs = s.body.load_offsets.get(u)
        return offs is not None and not offs - {self.plan.syntax.offset(s.body.full_idx, s.shape)}
