"""The compiler: fusion plan -> generated Numba source -> disk-cached module -> runnable program.

Stages, one module each: ``fusion`` (plan), ``emit`` (index arithmetic and scalar expressions),
``codegen_cpu`` (Numba source), ``disk_cache`` (content-addressed modules), ``runtime``.
"""
from .runtime import CompiledProgram, compile_graph  # noqa: F401
