"""Backend-neutral statement generation: the value of a graph variable at a symbolic index.

Layout ops (reshape, transpose, broadcast, slicing, padding, concatenation) and gathers become
index arithmetic; elementwise ops become scalar expressions (the rule of each primitive's
``lowering`` record); a materialized value is an array load, or a local variable when the same
kernel computed it at this index. Every piece of syntax comes from ``ctx``, the backend's
scalar context: its syntax table (``compiler/syntax.py``), which also names the backend's scalar
functions.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..core import GATHER, INDEX_MAP, SCALAR, Node, Var
from ..dtypes import is_narrow
from ..ops.layout import concat_index_map
from .syntax import Statement, Syntax


class CannotFuse(Exception):
    """The requested value can't be computed in this kernel at this point."""


def progression(c: np.ndarray) -> tuple[int, int] | None:
    """``(start, step)`` when the integer constant ``c`` is ``start + step * i``, ``i`` each
    element's row-major position (an ``arange`` of any shape: the class indices a one-hot
    comparison reads, a random generator's counters; step 0: every element equal), else None.
    Such a constant is computed from the index instead of loaded: no memory traffic, no array a
    kernel has to keep in cache, and no constant whose size follows the batch (which would tie
    the program to one batch size)."""
    if c.dtype.kind not in "iu" or c.size < 2:
        return None
    flat = c.reshape(-1).astype(np.int64)
    start, step = int(flat[0]), int(flat[1] - flat[0])
    if not np.array_equal(flat, start + step * np.arange(flat.size, dtype=np.int64)):
        return None
    return start, step


def norm_idx(idx: Sequence[str], shape: Sequence[int]) -> tuple[str, ...]:
    return tuple("0" if d == 1 else e for e, d in zip(idx, shape))


class ScatterParts(NamedTuple):
    """What the CPU and CUDA scatter-add kernels share: their parameters, the loops over the
    update's elements, the index reads and the two element offsets."""
    params: list[str]        # one per distinct array (x[i, i] passes i once), then the output
    loop_vars: list[str]     # batch axes b*, then the trailing axes q* the indices leave whole
    loop_sizes: list[int]
    index_lines: list[str]   # ``j{k} = clamp_index(...)``, unindented
    target: str              # offset into the output
    source: str              # the update's element


def scatter_parts(plan, node: Node, syntax: Syntax) -> ScatterParts:
    g, *ix = node.inputs
    shape = node.out.aval.shape
    nb = g.aval.ndim - (len(shape) - len(ix))
    rest = shape[len(ix):]
    bv = [f"b{i}" for i in range(nb)]
    rv = [f"q{i}" for i in range(len(rest))]
    lines, tgt = [], []
    for k, iv in enumerate(ix):
        lead = nb - iv.aval.ndim
        off = syntax.offset([("0" if d == 1 else b) for b, d in zip(bv[lead:], iv.aval.shape)],
                            iv.aval.shape)
        lines.append(syntax.assign(f"j{k}", syntax.clamp_index(
            syntax.index(plan.array_name(iv), off), shape[k])))
        tgt.append(f"j{k}")
    params = list(dict.fromkeys([plan.array_name(v) for v in node.inputs]
                                + [plan.array_name(node.out)]))
    return ScatterParts(params, bv + rv, list(g.aval.shape[:nb]) + list(rest), lines,
                        syntax.offset(tgt + rv, shape),
                        syntax.index(plan.array_name(g), syntax.offset(bv + rv, g.aval.shape)))


def scalar_expression(ctx, node: Node, args: Sequence[str]) -> str:
    """The expression of a SCALAR node on its operands' expressions ``args``: its rule, cast
    to its output dtype unless it already has it."""
    ctx.in_dtype = node.inputs[0].aval.dtype
    expr = node.prim.lowering.rule(ctx, *args, **node.params)
    return expr if _keeps_type(ctx, node) else ctx.cast(expr, node.out.aval.dtype)


def _keeps_type(ctx, node: Node) -> bool:
    """Whether the expression already has the output's float type, so the cast can go:
    each cast is a call Numba must type, a good part of compile time in long kernels."""
    dt = node.out.aval.dtype
    if is_narrow(dt) or any(is_narrow(i.aval.dtype) for i in node.inputs):
        return True       # (only converts make or read 16-bit floats: their bits)
    if dt.kind != "f" and dt != np.int64 or any(i.aval.dtype != dt for i in node.inputs[-2:]):
        return False
    low = node.prim.lowering
    if dt == np.int64:
        return low.keeps_int64
    return low.keeps_float or ctx.returns_input_type(node.prim.name)


class Emitter:
    """Generates the statements of one loop body (one stage of one kernel)."""

    def __init__(self, plan, step_pos: int, full_idx: Sequence[str] | None,
                 o_vars: Sequence[str], o_shape: Sequence[int], aligned_locals: dict,
                 full_locals: dict, ctx, prefix: str, stored_here: frozenset = frozenset(),
                 suffix: str = "", cached: dict | None = None):
        self.plan = plan
        self.step_pos = step_pos
        self.full_idx = None if full_idx is None else tuple(full_idx)
        self.o_nonunit = [d for d in o_shape if d != 1]
        self.o_nonunit_vars = [o for o, d in zip(o_vars, o_shape) if d != 1]
        self.aligned_locals = aligned_locals      # var -> local, valid at the outer index
        self.full_locals = full_locals            # var -> local, valid at the full index
        # values an earlier loop stage of this kernel stored: readable at this stage's own
        # index (the same outer index, so the same thread wrote it, and it is still in cache)
        self.stored_here = stored_here
        # values an earlier loop stage of this kernel computed and kept, at this stage's own
        # index, in an output buffer this kernel writes later (value -> that output's var)
        self.cached = cached or {}
        self.ctx = ctx
        self.prefix = prefix
        self.suffix = suffix                      # (locals are ``<prefix><n><suffix>``)
        self.lines: list[Statement] = []
        self.loads: set[Var] = set()
        self.load_offsets: dict[Var, set] = {}
        self.memo: dict = {}
        self.ops: set = set()
        self._n = 0
        self._progressions: dict = {}       # constant -> (start, step) or None

    def _new(self, expr: str) -> str:
        name = f"{self.prefix}{self._n}{self.suffix}"
        self._n += 1
        self.lines.append(self.ctx.assign(name, expr))
        return name

    def _is_aligned(self, v: Var, idx: tuple) -> bool:
        shape = v.aval.shape
        nonunit = [d for d in shape if d != 1]
        if nonunit != self.o_nonunit:
            return False
        return [e for e, d in zip(idx, shape) if d != 1] == self.o_nonunit_vars

    def value(self, v: Var, idx: Sequence[str]) -> str:
        idx = norm_idx(idx, v.aval.shape)
        c = self.plan.graph.consts.get(v)
        if c is not None and c.size == 1:
            return self.ctx.literal(c.reshape(()), v.aval.dtype)
        key = (v, idx)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        res = self._value(v, idx)
        self.memo[key] = res
        return res

    def _value(self, v: Var, idx: tuple) -> str:
        # read at this stage's own index (compared only for the values where it matters)
        own = self.full_idx is not None and (
            v in self.full_locals or v in self.cached or v in self.stored_here) and \
            idx == norm_idx(self.full_idx, v.aval.shape)
        if own and v in self.full_locals:
            return self.full_locals[v]
        if own and v in self.cached:        # (not a load: this kernel wrote it)
            w = self.cached[v]
            return self._new(self.ctx.index(self.plan.array_name(w),
                                            self.ctx.offset(idx, w.aval.shape)))
        if v in self.aligned_locals:
            if self._is_aligned(v, idx):
                return self.aligned_locals[v]
            raise CannotFuse(f"{v} read at {idx}, not at the outer index")
        c = self.plan.graph.consts.get(v)
        if c is not None:
            prog = self._progressions.get(v, False)
            if prog is False:
                prog = self._progressions[v] = progression(c)
            if prog is not None:          # computed from the index, not loaded
                start, step = prog
                if step == 0:
                    return self.ctx.literal(start, v.aval.dtype)
                i = self.ctx.offset(idx, v.aval.shape)
                if not i.isidentifier():      # several axes: their row-major position
                    i = self.ctx.group(i)
                expr = self.ctx.group(self.ctx.affine(start, step, i))
                return self._new(self.ctx.cast(expr, v.aval.dtype))
        if v in self.plan.materialized or v in self.plan.graph.consts or v in self.plan.input_set:
            pos = self.plan.available_at(v)
            if pos >= self.step_pos and not (v in self.stored_here and own):
                raise CannotFuse(f"{v} is produced by step {pos}, not before step {self.step_pos}")
            return self._load(v, self.ctx.offset(idx, v.aval.shape))
        return self._expand(v, idx)

    def _load(self, v: Var, off: str) -> str:
        """The element of stored ``v`` at flat offset ``off``."""
        self.loads.add(v)
        self.load_offsets.setdefault(v, set()).add(off)
        return self._new(self.ctx.index(self.plan.array_name(v), off))

    def _stored_before(self, v: Var) -> bool:
        """Whether ``v`` is an array an earlier step (or the caller) wrote, read as it is: a
        program input or a stored value, not a constant (computed from the index, or a
        literal) nor anything this kernel computes."""
        return (v in self.plan.input_set or v in self.plan.materialized) and \
            v not in self.full_locals and v not in self.aligned_locals and \
            v not in self.cached and self.plan.available_at(v) < self.step_pos

    def compute(self, v: Var, idx: Sequence[str]) -> str:
        """Compute ``v`` from its producer (for the values a kernel itself produces)."""
        idx = norm_idx(idx, v.aval.shape)
        key = (v, idx)
        if key not in self.memo:
            self.memo[key] = self._expand(v, idx)
        return self.memo[key]

    def _expand(self, v: Var, idx: tuple) -> str:
        node = self.plan.producer.get(v)
        if node is None:
            raise CannotFuse(f"no producer for {v}")
        self.ops.add(node)
        low = node.prim.lowering
        out_aval = v.aval
        if low.kind == SCALAR:
            self.ctx.in_dtype = node.inputs[0].aval.dtype
            args = []
            for inp in node.inputs:
                lead = out_aval.ndim - inp.aval.ndim
                args.append(self.value(inp, idx[lead:]))
            return self._new(scalar_expression(self.ctx, node, args))
        if low.kind == INDEX_MAP:
            return self._layout(node, idx)
        if low.kind == GATHER:
            return self._gather(node, idx)
        raise CannotFuse(f"{node.prim.name} output must be materialized")

    def _layout(self, node, idx):
        name = node.prim.name
        x = node.inputs
        out = node.out.aval
        if name == "concatenate":
            axis = node.params["axis"]
            parts = concat_index_map(self.ctx, list(idx), [i.aval for i in x], out,
                                     axis=axis)
            vals = []
            for inp, (in_idx, lo, hi) in zip(x, parts):
                in_idx = list(in_idx)
                n = inp.aval.shape[axis]
                in_idx[axis] = self.ctx.clip(in_idx[axis], n)
                vals.append((self.value(inp, in_idx), hi))
            expr = vals[-1][0]
            for val, hi in reversed(vals[:-1]):
                expr = self.ctx.select(self.ctx.bare("less", idx[axis], self.ctx.number(hi)),
                                       val, expr)
            return self._new(expr)
        if node.prim.lowering.masked:
            in_idx, cond = node.prim.lowering.rule(self.ctx, list(idx), x[0].aval, out,
                                                     **node.params)
            if x[0].aval.size == 0:
                return self.ctx.literal(0, out.dtype)
            if cond is None:        # every read in bounds
                return self.value(x[0], in_idx)
            in_idx = [e if e == o and d == n else self.ctx.clip(e, d)  # (discarded reads too)
                      for e, o, d, n in zip(in_idx, idx, x[0].aval.shape, out.shape)]
            val = self.value(x[0], in_idx)
            return self._new(self.ctx.select(cond, val, self.ctx.literal(0, out.dtype)))
        if name == "reshape" and self._stored_before(x[0]):
            # a reshape keeps each element's row-major position: read the stored input at
            # the output index's flat offset, rather than split the offset into the input's
            # dims and join them again (divisions and remainders that stop vectorization)
            return self._load(x[0], self.ctx.offset(idx, out.shape))
        in_idx = node.prim.lowering.rule(self.ctx, list(idx), x[0].aval, out, **node.params)
        return self.value(x[0], in_idx)

    def _gather(self, node, idx):
        x, *ix = node.inputs
        nb = node.out.aval.ndim - (x.aval.ndim - len(ix))
        b_idx, rest = idx[:nb], idx[nb:]
        in_idx = []
        for k, iv in enumerate(ix):
            lead = nb - iv.aval.ndim
            raw = self.value(iv, b_idx[lead:])
            in_idx.append(self._new(self.ctx.clamp_index(raw, x.aval.shape[k])))
        return self.value(x, in_idx + list(rest))
