"""Bytes and FLOPs of each step of a fusion plan, from its shapes (for ``jitgraph.profile``).

Bytes are the compulsory memory traffic: every array a step reads, once, plus every array it
writes, once (a broadcast operand, a bias, counts its own size: it is read from cache after
the first pass). Values a kernel computes and uses without storing cost no bytes: that is the
point of fusion. FLOPs count an elementwise operation's ``lowering.flops`` per output element
(one, a transcendental such as ``exp`` too, as in roofline practice for fused kernels; none for
casts; layout and gather ops count none), one per input element of a reduction, ``2*m*n*k``
per matrix product plus its epilogue, one per added element of a scatter-add.

Two refinements keep "once" honest:

* Long rows. A row kernel's loop stages are passes over each row; re-reading an array in a
  later pass is a cache hit only while a row fits in cache. Rows longer than ``LONG_ROW``
  elements (2^15: 128 KiB of float32, past an L1/L2 slice per core or per SM) are read from
  memory again in every pass: such a kernel counts an array once per loop stage that reads it.
* Gathers. An array a kernel reads only through ``gather`` (``take_along_axis``, the picked
  logit of a cross-entropy) moves the gathered elements, not the whole array: each costs one
  ``SECTOR`` (32 bytes, the smallest DRAM transaction of a GPU; a CPU line is 64 but adjacent
  picks share none either way), at most the array's size.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core import GATHER, SCALAR
from .fusion import (HostStep, LoopKernel, LoopThenProduct, MatmulStep, Plan,
                     ProductThenLoop, ScatterStep, kernel_ops)


@dataclass(frozen=True)
class StepCost:
    kind: str      # "loop" | "matmul" | "loop+matmul" | "matmul+loop" | "scatter" | "host"
    bytes: int
    flops: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if self.bytes else float("inf")


LONG_ROW = 1 << 15    # elements per row past which each pass of a row kernel re-reads memory
SECTOR = 32           # bytes one gathered element moves


def _nbytes(v) -> int:
    return int(v.aval.size) * v.aval.dtype.itemsize


def _load_bytes(step, ops) -> int:
    """What a loop kernel's loads move (see the module docstring)."""
    body = step.body
    long_rows = bool(step.axes) and int(_prod(step.inner_shape)) > LONG_ROW
    passes: dict = {}
    for st in body.stages:
        for v in (st.loads if st.kind == "loop" else ()):
            passes[v] = passes.get(v, 0) + 1
    total = 0
    for v in body.loads:
        readers = [n for n in ops if v in n.inputs]
        if readers and all(n.prim.lowering.kind == GATHER and n.inputs[0] is v
                           and v not in n.inputs[1:] for n in readers):
            picked = sum(int(n.out.aval.size) for n in readers)
            total += min(_nbytes(v), picked * max(SECTOR, v.aval.dtype.itemsize))
            continue
        total += _nbytes(v) * (max(passes.get(v, 1), 1) if long_rows else 1)
    return total


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def step_cost(step, plan: Plan) -> StepCost:
    """What one plan step must move and compute."""
    if isinstance(step, LoopThenProduct):
        # the left operand is written and read again in cache, chunk by chunk: the memory
        # traffic is the two steps' without it (it is still stored once: the backward reads it)
        lc, pc = step_cost(step.loop, plan), step_cost(step.product, plan)
        return StepCost("loop+matmul", lc.bytes + pc.bytes - _nbytes(step.product.a[0]),
                        lc.flops + pc.flops)
    if isinstance(step, ProductThenLoop):
        # the product's output is never stored: neither its write nor the loop's read of it
        pc, lc = step_cost(step.product, plan), step_cost(step.loop, plan)
        return StepCost("matmul+loop", pc.bytes + lc.bytes - 2 * _nbytes(step.product.out),
                        pc.flops + lc.flops)
    if isinstance(step, LoopKernel):
        body = step.body
        stored = {v for st in body.stages for (v, _, _) in st.stores if v in plan.needed}
        stored |= {r[0].out for st in body.stages for r in st.reductions if r[0].out in plan.needed}
        ops = kernel_ops(step)
        moved = _load_bytes(step, ops) + sum(_nbytes(v) for v in stored)
        flops = 0
        for n in ops:
            low = n.prim.lowering
            if low.kind == SCALAR:
                flops += low.flops * int(n.out.aval.size)
            elif low.reduces:
                flops += int(n.inputs[0].aval.size)
        return StepCost("loop", moved, flops)
    if isinstance(step, MatmulStep):
        out = step.node.out.aval
        a, b = step.node.inputs
        k = a.aval.shape[-1]
        flops = 2 * int(out.size) * int(k)
        moved = _nbytes(step.a[0]) + _nbytes(step.b[0]) + out.size * out.dtype.itemsize
        ep = step.epilogue
        if ep is not None:
            if ep.alpha != 1.0:
                flops += int(out.size)
            if ep.c is not None and ep.beta != 0.0:
                flops += 2 * int(out.size)
                moved += _nbytes(ep.c)
        return StepCost("matmul", int(moved), flops)
    if isinstance(step, ScatterStep):
        g = step.node.inputs[0]
        moved = sum(_nbytes(v) for v in step.node.inputs) + _nbytes(step.node.out)
        return StepCost("scatter", int(moved), int(g.aval.size))
    assert isinstance(step, HostStep)
    moved = sum(_nbytes(v) for v in step.node.inputs) + sum(_nbytes(o) for o in step.node.outs)
    flops = int(sum(o.aval.size for o in step.node.outs)) if step.node.prim.kind == "elementwise" else 0
    return StepCost("host", int(moved), flops)

