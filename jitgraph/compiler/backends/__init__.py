"""Compiler backends: each is a ``Target`` (``base.py``) made of a scalar context, a code
generator, a call path and a loader, registered by name (``jitgraph.targets``) for
``pipeline.compile``, ``jit(f, device=...)`` and ``device_put``."""
from __future__ import annotations

from ...device import cuda_api, simulator
from ...targets import TARGETS, Capabilities, register_target
from ..fusion import Plan
from ..memory import Buffers
from . import cpu_program, cuda_program
from .base import CompileOptions, CpuOptions, CudaOptions, own_options
from .cpu import CpuCodegen, CpuContext
from .cuda import CudaCodegen, CudaContext, shuffle_default

__all__ = ["TARGETS", "CpuTarget", "CudaTarget", "register_target"]


class CpuTarget:
    """Numba ``@njit`` kernels, a Python or compiled driver, NumPy arrays."""
    name = "cpu"
    aliases = ()
    capabilities = Capabilities(dynamic_shapes=True, approx_functions=True, numba_cpu=True,
                                complex_numbers=True)
    options_type = CpuOptions

    def check_usable(self, what: str) -> None:
        """Numba's CPU target is always there."""

    def synchronize(self) -> None:
        """A CPU program has finished when its call returns."""

    def context(self, options: CompileOptions) -> CpuContext:
        return CpuContext(approx_math=own_options(options, CpuOptions).approx_math)

    def codegen(self, plan: Plan, ctx: CpuContext, options: CompileOptions) -> CpuCodegen:
        own = own_options(options, CpuOptions)
        return CpuCodegen(plan, ctx, fastmath=options.fastmath, symbols=own.symbols,
                          decisions=own.decisions, profile=options.profile,
                          compiled_driver=own.compiled_driver)

    def call_path(self, plan: Plan, info: Buffers, options: CompileOptions) -> str:
        """The source of the straight-line call path (generalized with the module when sizes
        are runtime arguments)."""
        return cpu_program.runner_template(plan.graph, info, len(plan.const_args),
                                           own_options(options, CpuOptions).symbols,
                                           options.single_output)

    def decisions(self, codegen: CpuCodegen) -> list:
        return codegen.made_decisions

    def load(self, gen, options: CompileOptions, t0: float, compile_again=None):
        return cpu_program.load(gen, options, t0, compile_again)


class CudaTarget:
    """``@cuda.jit`` kernels launched by a Python driver on device arrays."""
    name = "cuda"
    aliases = ("gpu", "cuda:0")
    capabilities = Capabilities(device_arrays=True, streams=True, hardware="cuda")
    options_type = CudaOptions

    def check_usable(self, what: str) -> None:
        cuda_api(what)

    def synchronize(self) -> None:
        cuda_api("synchronize").synchronize()

    def context(self, options: CompileOptions) -> CudaContext:
        self.check_usable("jit(device='cuda')")       # a clear error where CUDA is unusable
        return CudaContext()

    def codegen(self, plan: Plan, ctx: CudaContext, options: CompileOptions) -> CudaCodegen:
        return CudaCodegen(plan, ctx, shuffle=shuffle_default(simulator()),
                           fastmath=options.fastmath, profile=options.profile)

    def call_path(self, plan: Plan, info: Buffers, options: CompileOptions) -> str:
        return ""       # built per signature by CudaProgram.make_runner

    def decisions(self, codegen: CudaCodegen) -> list:
        return []

    def load(self, gen, options: CompileOptions, t0: float, compile_again=None):
        return cuda_program.load(gen, options, t0, compile_again)


register_target(CpuTarget())
register_target(CudaTarget())
