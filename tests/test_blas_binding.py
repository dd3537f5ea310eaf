"""The BLAS binding of compiled products (kernels/blas.py, kernels/matmul.py): one Fortran
``?gemm`` call by symbol name for C- and F-ordered operands, NumPy's ``np.dot`` for others."""
from __future__ import annotations

import numpy as np
import pytest

from jitgraph.kernels import blas
from jitgraph.kernels.matmul import gemm, matmul_blas


def _operand(rng, shape, order, dtype):
    """A C-ordered array, or the transposed view of a C array (F-ordered), of ``shape``."""
    if order == "C":
        return rng.standard_normal(shape).astype(dtype)
    return rng.standard_normal(shape[::-1]).astype(dtype).T


@pytest.mark.parametrize("orders", ["CC", "CF", "FC", "FF"])
def test_products_of_c_and_f_operands_match_numpy(orders):
    rng = np.random.default_rng(len(orders) + ord(orders[0]) + 2 * ord(orders[1]))
    a = _operand(rng, (5, 7), orders[0], np.float64)
    b = _operand(rng, (7, 3), orders[1], np.float64)
    out = np.full((5, 3), np.nan)
    matmul_blas(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-13, atol=1e-13)
    c = rng.standard_normal((5, 3))
    expected = -0.25 * (a @ b) + 2.0 * c
    gemm(-0.25, a, b, 2.0, c)
    np.testing.assert_allclose(c, expected, rtol=1e-13, atol=1e-13)


def test_float32_product_with_a_transposed_operand():
    rng = np.random.default_rng(3)
    a = _operand(rng, (4, 6), "F", np.float32)
    b = _operand(rng, (6, 9), "C", np.float32)
    out = np.zeros((4, 9), np.float32)
    matmul_blas(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning")
def test_strided_operands_fall_back_to_numpy_dot():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 8))[::2, ::2]      # neither C- nor F-ordered
    b = rng.standard_normal((4, 5))
    out = np.zeros((3, 5))
    matmul_blas(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-13, atol=1e-13)


def test_empty_contraction_gives_zeros():
    out = np.full((2, 3), 7.0)
    matmul_blas(np.zeros((2, 0)), np.zeros((0, 3)), out)
    assert (out == 0).all()


def test_routines_are_registered_under_their_symbols():
    import llvmlite.binding as llvm

    registered = blas.register()
    assert set(registered) == set(blas.ROUTINES.values())
    for symbol, address in registered.items():
        assert address and llvm.address_of_symbol(symbol) == address


def test_first_compile_of_a_process_does_not_import_scipy_linalg():
    """Numba's BLAS check at its first compile is the light one; Numba's own np.dot still works."""
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent("""
        import sys
        import numpy as np
        from jitgraph.kernels import blas
        from numba import njit
        blas.light_numba_blas_check()

        @njit
        def add_one(x):
            return x + 1.0

        add_one(1.0)                                     # loads Numba's lowering registries
        print("after compile", "scipy.linalg" in sys.modules)

        @njit
        def dot(a, b):
            return np.dot(a, b)

        a = np.arange(6.0).reshape(2, 3)
        print("dot", float(np.abs(dot(a, a.T) - a @ a.T).max()))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["after compile False", "dot 0.0"]


def test_products_call_numpys_openblas_where_numpy_bundles_one():
    """NumPy's wheels bundle an ILP64 OpenBLAS: compiled products share it (and its threads)."""
    if not blas._numpy_library_paths():
        pytest.skip("this NumPy bundles no OpenBLAS: products use SciPy's")
    assert blas.library() == "numpy"
    numpy_sgemm = blas._numpy_blas()["sgemm"]
    assert blas.register()[blas.ROUTINES["sgemm"]] == numpy_sgemm


def test_scipy_fallback_through_32_bit_shims_in_a_new_process():
    """``JITGRAPH_BLAS=scipy``: the same compiled code calls SciPy's LP64 routines through the
    shims that narrow the integers; a compiled training step's products still match NumPy."""
    import os
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent("""
        import numpy as np
        import jitgraph, jitgraph.numpy as jnp
        from jitgraph.kernels import blas
        from jitgraph.kernels.matmul import gemm, matmul_blas

        rng = np.random.default_rng(0)
        worst = 0.0
        for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-4)):
            a = rng.standard_normal((7, 5)).astype(dt)
            b = rng.standard_normal((6, 5)).astype(dt).T        # F-ordered view
            out = np.empty((7, 6), dt)
            matmul_blas(a, b, out)
            worst = max(worst, float(np.abs(out - a @ b).max()) / tol)
            c = rng.standard_normal((7, 6)).astype(dt)
            want = 0.5 * (a @ b) - 2.0 * c
            gemm(0.5, a, b, -2.0, c)
            worst = max(worst, float(np.abs(c - want).max()) / tol)

        @jitgraph.jit
        def f(w, x):
            return jnp.tanh(x @ w).sum()

        w = rng.standard_normal((16, 8)); x = rng.standard_normal((4, 16))
        g = jitgraph.jit(jitgraph.grad(f))(w, x)
        want = x.T @ (1 - np.tanh(x @ w) ** 2)
        worst = max(worst, float(np.abs(g - want).max()) / 1e-12)
        print(blas.library(), worst < 1)
    """)
    env = dict(os.environ, JITGRAPH_BLAS="scipy")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["scipy", "True"]
