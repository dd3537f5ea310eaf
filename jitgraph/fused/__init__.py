"""The fused ops: one module each (its primitives, its ``rewrite.FusedOp`` record with the
pattern, the replacement, the cost model and the lowerings), its kernels in ``kernels/``.

Importing the package imports every module in it, which registers their records
(``rewrite.register_fused_op``), and publishes each as ``jitgraph.<name>`` too
(``jitgraph.attention.unfused()``, ``from jitgraph.linear_ce import linear_ce_p``): adding a
fused op is adding its module here and its kernels, with no list to extend anywhere else.
The modules do not import each other (an import-linter contract). ``MODULES`` lists the
modules found, by name.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType


def _publish(module: ModuleType, short: str) -> None:
    """Make ``module`` importable and readable as ``jitgraph.<short>``, refusing a name that
    an existing module or attribute of the package already has."""
    parent = sys.modules[__name__.rpartition(".")[0]]
    public = f"{parent.__name__}.{short}"
    taken = {m.name for m in pkgutil.iter_modules(parent.__path__)}
    if short in taken or hasattr(parent, short) or public in sys.modules:
        raise ImportError(f"the fused op module {module.__name__} cannot be published as "
                          f"{public}: that name is taken; rename the module")
    sys.modules[public] = module
    setattr(parent, short, module)


def _import_all() -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for short in names:
        _publish(importlib.import_module(f"{__name__}.{short}"), short)
    return names


MODULES: list[str] = _import_all()
