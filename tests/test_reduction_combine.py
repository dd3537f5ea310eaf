"""Max and min reductions in compiled loops combine with ``llvm.maximum`` / ``llvm.minimum``
(``kernels/scalar.py``), which LLVM turns into SIMD reductions: rows long enough to take the
vector loop and its remainder must still give NumPy's values, NaN anywhere in a row
propagating, and integers and bools as they are."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp

RNG = np.random.default_rng(7)


def _rows(dtype, shape=(9, 1003)):
    if np.dtype(dtype).kind == "f":
        x = RNG.standard_normal(shape).astype(dtype)
        x[2, shape[1] // 2] = np.nan     # mid-row: inside the vector loop
        x[5, -1] = np.nan                # the last element: the scalar remainder
        x[7, :] = -0.0
        x[7, 3] = 0.0
        return x
    if np.dtype(dtype).kind == "b":
        return RNG.random(shape) < 0.01
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("name", ["max", "min"])
def test_row_extrema_match_numpy(name, dtype):
    x = _rows(dtype)
    got = np.asarray(jitgraph.jit(lambda a: getattr(jnp, name)(a, axis=-1))(x))
    want = getattr(np, name)(x, axis=-1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)     # NaN where NumPy has NaN; 0.0 == -0.0


@pytest.mark.parametrize("name", ["max", "min"])
def test_column_order_extrema_match_numpy(name):
    """A reduction over the leading axis with many outputs loops in column order (one
    accumulator per output): the same combine, element by element."""
    x = _rows(np.float32, (700, 40))
    x[300, 11] = np.nan
    got = np.asarray(jitgraph.jit(lambda a: getattr(jnp, name)(a, axis=0))(x))
    np.testing.assert_array_equal(got, getattr(np, name)(x, axis=0))
