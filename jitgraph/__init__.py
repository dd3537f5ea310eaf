"""jitgraph: write NumPy-style code; jitgraph traces it into a graph, differentiates it and
compiles it to fused kernels (Numba, on the CPU or a CUDA GPU), cached by shape.

```python
import jitgraph
import jitgraph.numpy as jnp

def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)

grad_fn = jitgraph.jit(jitgraph.grad(loss))   # one compiled program for the gradient
```

The names here are the transformations (``jit``, ``grad``, ``value_and_grad``, ``vmap``,
``jvp``, ``vjp``, ``jacfwd``, ``hessian``, ``checkpoint``, ...), which compose freely, and the
tools around them: pytrees (``tree_map``), custom derivatives (``custom_vjp``), checkpoints
(``save``, ``load``), ``train_step``, devices, ``benchmark`` and ``profile``. The array
functions are in ``jitgraph.numpy``, control flow in ``jitgraph.lax``, layers in
``jitgraph.nn``, optimizers in ``jitgraph.optim``.
"""
# How the package is layered (which module may import which) is in docs/contributing.md.
from __future__ import annotations

from .version import __version__  # noqa: F401


def _source_tree_kernels() -> None:
    """Imported from a source checkout (``PYTHONPATH=<checkout>``, a git worktree), take
    ``jitgraph.kernels`` from the checkout's own ``kernels/``, as the installed layout maps it."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(os.path.dirname(here), "kernels", "__init__.py")
    if "jitgraph.kernels" in sys.modules or os.path.isdir(os.path.join(here, "kernels")) \
            or not os.path.isfile(src):
        return
    spec = importlib.util.spec_from_file_location(
        "jitgraph.kernels", src, submodule_search_locations=[os.path.dirname(src)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["jitgraph.kernels"] = module
    spec.loader.exec_module(module)
    globals()["kernels"] = module


_source_tree_kernels()

from . import config  # noqa: F401  (settings: default precision, random streams)
from . import ops  # noqa: F401  (registers the primitives)
from . import numpy  # noqa: F401
from . import nn, scipy  # noqa: F401
from .check import GradCheckError, check_grads
from .core import PRIMITIVES, Aval, Graph, Primitive
from .core import Aval as ShapedArray
from .custom import custom_vjp, defjvp, defprimitive, defvjp
from .errors import ConcretizationError, LeakedTracerError, ShapeError
from .interpreter import run as interpret
from .jit import cache_info, clear_cache, jit
from .profiler import BenchmarkResult, benchmark, machine_peaks, profile
from .transforms import (grad, hessian, hessian_vector_product, jacfwd, jacobian, jacrev, jvp,
                         make_graph, value_and_grad, vjp)
from .tree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from .device import DeviceArray, device_get, device_put, devices  # noqa: E402

stop_gradient = numpy.stop_gradient
primitive = defprimitive

__all__ = [
    "Aval", "BenchmarkResult", "ConcretizationError", "Graph", "GradCheckError", "LeakedTracerError", "PRIMITIVES",
    "Primitive", "ShapeError", "cache_info", "clear_cache", "jit", "ShapedArray", "check_grads", "custom_vjp", "defjvp",
    "benchmark", "defprimitive", "defvjp", "grad", "hessian", "hessian_vector_product", "machine_peaks", "profile", "interpret", "jacfwd", "jacobian", "jacrev",
    "jvp", "make_graph", "nn", "numpy", "primitive", "scipy", "stop_gradient", "tree_flatten",
    "tree_leaves", "tree_map", "tree_unflatten", "value_and_grad", "vjp",
    "DeviceArray", "device_get", "device_put", "devices",
]

# training toolkit
from . import optim, random  # noqa: E402,F401
from .serialization import load, save  # noqa: E402,F401
from .train import train_step  # noqa: E402,F401
from .tree import register_pytree_node  # noqa: E402,F401

__all__ += ["config", "load", "optim", "random", "register_pytree_node", "save", "train_step"]

# control flow, rematerialisation, forward mode
from . import control_flow  # noqa: E402,F401  (registers cond, scan, while, remat)
from . import fused  # noqa: E402,F401  (every fused op, each also published as jitgraph.<name>)
from . import lax  # noqa: E402,F401
from .remat import checkpoint, checkpoint_name, checkpoint_policies, remat  # noqa: E402,F401
from .transforms import linearize  # noqa: E402,F401

__all__ += ["checkpoint", "checkpoint_name", "checkpoint_policies", "lax", "linearize", "remat"]

# batching
from .batching import vmap  # noqa: E402

__all__ += ["vmap"]

# the environment report bug reports ask for (also: python -m jitgraph info)
from .environment import environment_info, print_environment_info  # noqa: E402

__all__ += ["environment_info", "print_environment_info"]
