"""``Array``: the NumPy array jitgraph returns, answering the parts of ``jax.Array``'s API that
JAX user code calls on results (``block_until_ready()``, ``x.at[i].set(v)``, ``device``...).

It is an ``np.ndarray`` subclass with no state of its own, so every NumPy function takes it
and NumPy's own operations on it behave as on a plain array (reductions to a scalar give a
NumPy scalar, the repr is NumPy's). Eager ``jitgraph.numpy`` calls, ``jit`` results and the
eager transformations (``grad``, ``vmap``, ``vjp``, ``lax.scan``..., through
``tree.as_arrays``) return it; compiled code is always handed plain arrays (Numba dispatches
ndarray subclasses through a slow path). ``.at`` is installed by ``jitgraph.numpy.index_update``
``device`` / ``devices()`` by ``jitgraph.jit`` and ``__array_namespace__`` by
``jitgraph.numpy.array_api``, the layers that own those ideas.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Array", "as_array"]

_ndarray = np.ndarray


class Array(np.ndarray):
    """A host array with JAX's result API (see the module docstring). Computation is
    synchronous, so the "asynchronous" methods return at once."""

    __slots__ = ()

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        # as a plain array: 0-d results of reductions are NumPy scalars
        if return_scalar:
            return arr[()]
        return arr if arr.__class__ is Array else arr.view(Array)

    def __repr__(self) -> str:
        return repr(self.view(_ndarray))

    def block_until_ready(self) -> "Array":
        """The array itself: its values are computed already."""
        return self

    def copy_to_host_async(self) -> None:
        """Nothing to do: the array is in host memory."""

    def is_ready(self) -> bool:
        return True

    def is_deleted(self) -> bool:
        return False

    def addressable_data(self, index: int) -> "Array":
        """The data of shard ``index``: a host array has one shard, itself."""
        if index != 0:
            raise IndexError(f"addressable_data: a host array has one shard (index 0), "
                             f"got {index}")
        return self

    @property
    def is_fully_addressable(self) -> bool:
        return True

    @property
    def is_fully_replicated(self) -> bool:
        return True


def as_array(x: Any) -> Any:
    """``x`` as an ``Array`` view if it is a plain ndarray (a NumPy scalar as a 0-d one); a
    tuple (named ones too: ``linalg.svd``'s result) or list of them element by element;
    anything else unchanged."""
    t = x.__class__
    if t is _ndarray:
        return x.view(Array)
    if isinstance(x, np.generic):
        return np.asarray(x).view(Array)
    if isinstance(x, (tuple, list)) and x and any(e.__class__ is _ndarray for e in x):
        items = [e.view(Array) if e.__class__ is _ndarray else e for e in x]
        return t(*items) if hasattr(x, "_fields") else t(items)
    return x
