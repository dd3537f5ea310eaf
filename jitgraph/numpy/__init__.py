"""NumPy-named functions that work on arrays (eagerly) and on traced values (recording nodes).

``import jitgraph.numpy as jnp``, then use it as NumPy: ``jnp.sum(jnp.tanh(x @ w))``. The same
call computes an array when given arrays, and records a graph node when given traced values
(inside ``jit``, ``grad``, ``vmap``, ...), so one function serves both. Dtype promotion follows
NumPy 2 with weak Python scalars (``float32_array * 2.0`` stays float32). Eager results are
``Array``: NumPy arrays that also answer JAX's array methods (``x.at[i].set(v)``,
``x.block_until_ready()``). An error names the function and the line of your code that called
it. ``jnp.linalg`` has the linear algebra; ``jax.lax``'s array operations are in
``jitgraph.lax``.
"""
# How the package is organised (a module per family of functions) is in docs/contributing.md.
from __future__ import annotations

from ._base import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .statistics import *  # noqa: F401,F403
from .array_api import *  # noqa: F401,F403
from .index_update import at  # noqa: F401  (also installs Tracer.at)
from . import linalg  # noqa: F401  (jnp.linalg)
from . import fft  # noqa: F401  (jnp.fft)

#: the revision of the Python Array API standard whose names this namespace follows: every
#: function 2024.12 added is here (``count_nonzero``, ``cumulative_prod``, ``diff``,
#: ``nextafter``, ``reciprocal``, ``take_along_axis``...) (the pass rate of the standard's
#: test suite is in docs/guides/semantics.md)
__array_api_version__ = "2024.12"
from .vectorize import vectorize  # noqa: F401
import numpy as np

from ._base import _ScalarType
from .. import dtypes as _dtypes

# callable scalar types (``jnp.float64(x)`` casts traced values too); they compare equal to
# (and convert to) the NumPy dtypes of the same name
bool_ = _ScalarType(bool_)
int32 = _ScalarType(int32)
int64 = _ScalarType(int64)
float32 = _ScalarType(float32)
float64 = _ScalarType(float64)
float_, int_ = float64, int64
int8, int16 = _ScalarType(np.int8), _ScalarType(np.int16)
uint8, uint16 = _ScalarType(np.uint8), _ScalarType(np.uint16)
uint32, uint64 = _ScalarType(np.uint32), _ScalarType(np.uint64)
complex64 = _ScalarType(np.complex64)      # computed on the CPU target (see dtypes)
complex128 = _ScalarType(np.complex128)
complex_ = complex128
float16 = _ScalarType(np.float16)   # stored in 16 bits, computed in float32 (see dtypes)


def __getattr__(name):
    """``bfloat16``, made on first use: it imports ml_dtypes (0.7 s, see ``dtypes``), and is a
    module attribute only where ml_dtypes is installed."""
    if name == "bfloat16":
        try:
            globals()["bfloat16"] = _ScalarType(_dtypes.bfloat16_dtype())
        except ImportError:
            raise AttributeError(f"jnp.bfloat16: {_dtypes.BFLOAT16_INSTALL}") from None
        return globals()["bfloat16"]
    raise AttributeError(f"module 'jitgraph.numpy' has no attribute {name!r}")


def __dir__():
    import importlib.util
    extra = ["bfloat16"] if importlib.util.find_spec("ml_dtypes") is not None else []
    return sorted(set(globals()) | set(extra))


from . import methods  # noqa: F401  (installs the Tracer operators and methods)
