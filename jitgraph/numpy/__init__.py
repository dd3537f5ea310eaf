"""NumPy-named functions that work on arrays (eagerly) and on traced values (recording nodes).

``import jitgraph.numpy as jnp``. Dtype promotion follows NumPy 2 with weak Python scalars
(``float32_array * 2.0`` stays float32). Everything here is a composition of primitives from
``jitgraph.ops``; nothing else knows how to compute.

One module per family: ``math`` (elementwise), ``manipulation`` (shapes), ``reductions``,
``indexing``, ``products`` (matmul, dot, einsum), ``creation``; ``methods`` installs the
ndarray-like operators on traced values. Every public function raises errors that name the
function and the user's source line (``_base._located``).
"""
from __future__ import annotations

from ._base import *  # noqa: F401,F403
from ._base import (_P, _axes, _axis1, _cast, _dtype_weak, _here,  # noqa: F401
                    _located, _operand, _promote)
from .math import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .statistics import *  # noqa: F401,F403
from .index_update import at  # noqa: F401  (also installs Tracer.at)
from . import linalg  # noqa: F401  (jnp.linalg)
from . import methods  # noqa: F401  (installs the Tracer operators and methods)
