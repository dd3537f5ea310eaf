"""A third backend added from outside the package: a plain-Python target that runs the
compiler's own plan (lowered, fused, memory-planned) step by step with each primitive's NumPy
rule. It is registered with ``register_target`` and then used as ``jit(f, device=NAME)``;
every case of the shared table (``tests/cases.py``) runs on it and matches the reference.
Nothing in jitgraph names it: what the pipeline, jit and the profiler need is the protocol.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

import jitgraph
from jitgraph.compiler import pipeline
from jitgraph.compiler.backends.base import ModuleText
from jitgraph.compiler.backends.cpu import CpuContext
from jitgraph.compiler.fusion import kernel_ops
from jitgraph.core import Graph
from jitgraph.interpreter import run
from jitgraph.targets import Capabilities, capabilities

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import CASES  # noqa: E402
from test_jit_cases import FWD_TOL, assert_same, reference_of  # noqa: E402

NAME = "numpy_plan"


@dataclass
class PlanOptions:
    """This target's own options: none yet."""


class PlanCodegen:
    """No kernel text: each step's driver line names the step; the plan is what runs."""
    accumulators: dict = {}
    profile = False

    def __init__(self, plan):
        self.plan = plan

    def loop_kernel(self, k):
        return None, None

    row_kernel = scatter_kernel = loop_kernel

    def add_kernel(self, s, src, params):
        raise AssertionError("no kernels to add")

    def kernel_call(self, s, *params_or_memory):
        return [f"{s.name}()"]

    product_call = host_call = kernel_call

    def module(self, body, memory):
        return ModuleText("\n".join(body), [], "run", memory.info)


class PlanProgram:
    """An ``Executable``: the plan's nodes, in step order, evaluated by the reference
    interpreter's loop (a node recomputed by several kernels once)."""
    kernels: list = []
    was_on_disk = native = False
    symbols = ()

    def __init__(self, gen, options, t0):
        self.graph, self.plan, self.source, self.stages = gen.graph, gen.plan, \
            gen.module.source, gen.stages
        self.single = options.single_output
        g = gen.graph
        producer = {v: n for n in g.nodes for v in n.outs}
        order: list = []

        def add(n):     # n after what it reads (views folded into a product are no step's)
            if n not in order:
                for v in n.inputs:
                    if v in producer:
                        add(producer[v])
                order.append(n)
        for step in gen.plan.steps:
            for n in kernel_ops(step):
                add(n)
        for v in g.outputs:
            if v in producer:
                add(producer[v])
        self.steps = Graph(g.inputs, order, g.outputs, g.consts)
        self.compile_seconds = time.perf_counter() - t0

    def make_runner(self, in_dtypes, out_tree):
        def call(*leaves):
            outs = run(self.steps, leaves)
            return outs[0] if self.single else out_tree.unflatten(outs)
        return call

    def profiled(self, graph=None):
        return self

    def numba_compiles(self):
        return 0


class PlanTarget:
    name = NAME
    aliases = ()
    # host arrays, fixed sizes, timed on the CPU; its steps are NumPy's, which has complex numbers
    capabilities = Capabilities(complex_numbers=True)
    options_type = PlanOptions

    def check_usable(self, what):
        """NumPy is always there."""

    def synchronize(self):
        """Done when the call returns."""

    def context(self, options):
        return CpuContext(approx_math=False)    # fusion writes kernel bodies: never run here

    def codegen(self, plan, ctx, options):
        return PlanCodegen(plan)

    def call_path(self, plan, info, options):
        return ""

    def decisions(self, codegen):
        return []

    def load(self, gen, options, t0, compile_again=None):
        return PlanProgram(gen, options, t0)


pipeline.register_target(PlanTarget())


def test_the_target_is_registered_and_asked():
    assert pipeline.target_of(NAME).name == NAME and capabilities(NAME) == Capabilities(
        complex_numbers=True)
    assert jitgraph.device_put({"w": np.ones(2)}, NAME)["w"].tolist() == [1.0, 1.0]
    f = jitgraph.jit(lambda x: (x * 2.0).sum(), device=NAME)
    assert float(f(np.arange(4.0))) == 12.0
    assert "LoopKernel" in f.lower(np.arange(4.0)).show("plan")
    result = jitgraph.benchmark(f, np.arange(4.0), reps=2, min_time=0.0, profile=False)
    assert result.device == "cpu" and result.stats.n == 2


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_case_table_runs_on_the_toy_target(case):
    got = jitgraph.jit(case.fn, device=NAME)(*case.args)
    assert_same(got, reference_of(case.fn, case.args), f"{case.name} on {NAME}", FWD_TOL,
                case.rtol, case.atol)
