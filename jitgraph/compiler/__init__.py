"""The compiler: ``pipeline.compile(graph, target, options)`` lowers, fuses, generates and
loads a graph (see ``pipeline.py``); ``loops`` registers the lowerings of control flow."""
from . import pipeline  # noqa: F401
from . import loops  # noqa: F401  (registers the control-flow host lowerings)
from . import fused_calls  # noqa: F401  (installs the fused ops' kernels, as they register)
