"""Bytes and FLOPs of each step of a fusion plan, from its shapes (for ``jitgraph.profile``).

Bytes are the compulsory memory traffic: every array a step reads, once, plus every array it
writes, once (a broadcast operand, a bias, counts its own size: it is read from cache after
the first pass). Values a kernel computes and uses without storing cost no bytes: that is the
point of fusion. FLOPs count an elementwise operation's ``lowering.flops`` per output element
(one, a transcendental such as ``exp`` too, as in roofline practice for fused kernels; none for
casts; layout and gather ops count none), one per input element of a reduction, ``2*m*n*k``
per matrix product plus its epilogue, one per added element of a scatter-add.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core import SCALAR
from .fusion import HostStep, LoopKernel, MatmulStep, Plan, ScatterStep, kernel_ops


@dataclass(frozen=True)
class StepCost:
    kind: str              # "loop" | "matmul" | "scatter" | "host"
    bytes: int
    flops: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if self.bytes else float("inf")


def _nbytes(v) -> int:
    return int(v.aval.size) * v.aval.dtype.itemsize


def step_cost(step, plan: Plan) -> StepCost:
    """What one plan step must move and compute."""
    if isinstance(step, LoopKernel):
        body = step.body
        stored = {v for st in body.stages for (v, _, _) in st.stores if v in plan.needed}
        stored |= {r[0].out for st in body.stages for r in st.reductions if r[0].out in plan.needed}
        moved = sum(_nbytes(v) for v in body.loads) + sum(_nbytes(v) for v in stored)
        flops = 0
        for n in kernel_ops(step):
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


def plan_costs(plan: Plan) -> list[StepCost]:
    return [step_cost(s, plan) for s in plan.steps]

