"""Compiler backends: each is a ``Target`` (``base.py``) made of a scalar context, a code
generator and a loader. ``TARGETS`` names them for ``pipeline.compile``."""
from __future__ import annotations

from ...device import cuda_api, simulator
from ..fusion import Plan
from . import cpu_program, cuda_program
from .base import CompileOptions, Target
from .cpu import CpuCodegen, CpuContext
from .cuda import CudaCodegen, CudaContext, shuffle_default


class CpuTarget:
    """Numba ``@njit`` kernels, a Python or compiled driver, NumPy arrays."""
    name = "cpu"

    def context(self, options: CompileOptions) -> CpuContext:
        return CpuContext(approx_math=options.approx_math)

    def codegen(self, plan: Plan, ctx: CpuContext, options: CompileOptions) -> CpuCodegen:
        return CpuCodegen(plan, ctx, fastmath=options.fastmath, symbols=options.symbols,
                          decisions=options.decisions, profile=options.profile,
                          compiled_driver=options.compiled_driver)

    def call_path(self, plan: Plan, info: dict, options: CompileOptions) -> str:
        """The source of the straight-line call path (generalized with the module when sizes
        are runtime arguments)."""
        return cpu_program.runner_template(plan.graph, info, len(plan.const_args),
                                           options.symbols, options.single_output)

    def load(self, gen, options: CompileOptions, t0: float, compile_again=None):
        return cpu_program.load(gen, options, t0, compile_again)


class CudaTarget:
    """``@cuda.jit`` kernels launched by a Python driver on device arrays."""
    name = "cuda"

    def context(self, options: CompileOptions) -> CudaContext:
        cuda_api("jit(device='cuda')")       # a clear error where CUDA is unusable
        return CudaContext()

    def codegen(self, plan: Plan, ctx: CudaContext, options: CompileOptions) -> CudaCodegen:
        return CudaCodegen(plan, ctx, shuffle=shuffle_default(simulator()),
                           fastmath=options.fastmath, profile=options.profile)

    def call_path(self, plan: Plan, info: dict, options: CompileOptions) -> str:
        return ""       # built per signature by CudaProgram.make_runner

    def load(self, gen, options: CompileOptions, t0: float, compile_again=None):
        return cuda_program.load(gen, options, t0, compile_again)


TARGETS: dict[str, Target] = {"cpu": CpuTarget(), "cuda": CudaTarget()}
