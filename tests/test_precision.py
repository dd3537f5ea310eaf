"""jitgraph.config's precision settings: default float/int dtypes of every creation function,
random function, Python scalar and nn initializer; jit retracing when a setting changes; the
environment variables; matmul_precision reaching cuBLAS's math mode (a recording binding)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest

import jitgraph
import jitgraph.nn.initializers as init
import jitgraph.numpy as jnp
import jitgraph.random as jr
from jitgraph import config

ROOT = pathlib.Path(__file__).resolve().parents[1]
K = jr.key(0)

# every function that makes floats without being given a dtype
CREATION = {
    "zeros": lambda: jnp.zeros(3), "ones": lambda: jnp.ones((2, 2)),
    "full": lambda: jnp.full(2, 1.5), "empty": lambda: jnp.empty(2),
    "arange": lambda: jnp.arange(0.0, 1.0, 0.25), "linspace": lambda: jnp.linspace(0, 1, 5),
    "eye": lambda: jnp.eye(3), "identity": lambda: jnp.identity(2),
    "asarray": lambda: jnp.asarray(1.5), "array_list": lambda: jnp.array([1.5, 2.0]),
}
RANDOM = {
    "uniform": lambda: jr.uniform(K, (3,)), "normal": lambda: jr.normal(K, (3,)),
    "truncated_normal": lambda: jr.truncated_normal(K, -1.0, 1.0, (3,)),
    "gumbel": lambda: jr.gumbel(K, (3,)),
}
INITIALIZERS = ["glorot_normal", "glorot_uniform", "he_normal", "he_uniform", "lecun_normal",
                "lecun_uniform", "zeros", "ones"]


@pytest.fixture(autouse=True)
def _restore_settings():
    before = config.values()
    yield
    for name, value in before.items():
        config.update(name, value)


def test_settings_names_and_errors():
    assert config.read("default_float") == "float64"             # NumPy's, by default
    assert config.jax_enable_x64 is True and config.jitgraph_default_float == "float64"
    config.update("jax_enable_x64", False)
    assert config.values()["default_float"] == "float32" and config.read("default_int") == "int32"
    assert config.jax_enable_x64 is False
    config.update("jax_enable_x64", True)
    config.update("default_float", np.float32)
    assert config.read("jitgraph_default_float") == "float32" and config.jax_enable_x64 is False
    config.update("jax_default_matmul_precision", "tensorfloat32")
    assert config.read("matmul_precision") == "tf32"
    config.update("jax_default_matmul_precision", "highest")
    assert config.read("matmul_precision") == "float32"
    with pytest.raises(ValueError, match="default_float must be one of"):
        config.update("default_float", "float16")
    with pytest.raises(AttributeError, match="unknown setting 'jax_enable_x32'"):
        config.update("jax_enable_x32", True)
    with pytest.raises(ValueError, match="True or False"):
        config.update("jax_threefry_partitionable", "maybe")


@pytest.mark.parametrize("name", sorted(CREATION) + sorted(RANDOM))
def test_creation_and_random_functions_follow_the_default_float(name):
    make = {**CREATION, **RANDOM}[name]
    assert make().dtype == np.float64
    with config.default_float("float32"):
        assert make().dtype == np.float32
    assert make().dtype == np.float64
    with config.enable_x64(False):
        assert make().dtype == np.float32


def test_integers_and_dtypes_given_or_inherited():
    with config.enable_x64(False):
        assert jnp.arange(3).dtype == np.int32 and jnp.full(2, 7).dtype == np.int32
        assert jr.randint(K, (2,), 0, 5).dtype == np.int32
        assert jr.permutation(K, 4).dtype == np.int32
        assert jnp.zeros(2, jnp.float64).dtype == np.float64          # a given dtype stays
        assert jr.uniform(K, (2,), jnp.float64).dtype == np.float64
        x = np.ones(2)                                                # *_like keep theirs
        assert all(f(x).dtype == np.float64 for f in
                   (jnp.zeros_like, jnp.ones_like, jnp.empty_like, lambda a: jnp.full_like(a, 2)))
        assert jnp.full(2, np.float64(1.0)).dtype == np.float64       # NumPy scalars keep theirs
    assert jnp.arange(3).dtype == np.int64 and jr.randint(K, (2,), 0, 5).dtype == np.int64


def test_python_scalars_promote_to_the_default_float():
    ints, f32 = np.arange(3), np.ones(2, np.float32)
    assert jnp.add(ints, 1.5).dtype == np.float64
    assert jnp.multiply(f32, 2.0).dtype == np.float32                # weak: stays float32
    with config.default_float("float32"):
        assert jnp.add(ints, 1.5).dtype == np.float32
        assert jnp.multiply(np.ones(2), 2.0).dtype == np.float64     # a float64 array wins
        assert jnp.sin(1.0).dtype == np.float32
        assert jitgraph.grad(lambda x: jnp.sum(x * 2.0))(f32).dtype == np.float32
    assert jnp.add(ints, 1.5).dtype == np.float64


@pytest.mark.parametrize("name", INITIALIZERS)
def test_initializers_default_to_the_default_float(name):
    f = getattr(init, name)
    f = f if name in ("zeros", "ones") else f()       # the rest are factories, as JAX's
    assert f(K, (2, 3)).dtype == np.float64
    assert f(K, (2, 3), np.float32).dtype == np.float32
    with config.default_float("float32"):
        assert f(K, (2, 3)).dtype == np.float32
    for f in (init.normal(0.5), init.uniform(0.5)):
        assert f(K, (2,)).dtype == np.float64


def test_jit_retraces_when_a_setting_changes_and_keeps_the_old_programs():
    f = jitgraph.jit(lambda x: x + jnp.ones(3))
    x = np.zeros(3, np.float32)
    assert f(x).dtype == np.float64
    with config.default_float("float32"):
        assert f(x).dtype == np.float32                             # traced again
    misses = jitgraph.cache_info()["misses"]
    assert f(x).dtype == np.float64
    assert jitgraph.cache_info()["misses"] == misses                # the first program
    # the random-bit scheme is part of the same key (traced words differ between schemes)
    with config.threefry_partitionable(False):
        legacy = config.TRACE_STATE
    assert legacy != config.TRACE_STATE and "float64" in legacy


class _RecordingCublas(types.SimpleNamespace):
    """CuPy's cuBLAS binding's names, recording the math modes a handle is given."""

    def __init__(self):
        calls: list = []
        super().__init__(
            calls=calls, CUBLAS_OP_N=0, CUBLAS_OP_T=1, CUBLAS_POINTER_MODE_HOST=0,
            CUBLAS_DEFAULT_MATH=0, CUBLAS_TF32_TENSOR_OP_MATH=3,
            create=lambda: "handle", setStream=lambda h, s: None,
            setPointerMode=lambda h, m: None,
            setMathMode=lambda h, m: calls.append(("math", m)),
            sgemmStridedBatched=lambda *a: calls.append(("sgemm",)),
            dgemmStridedBatched=lambda *a: calls.append(("dgemm",)))


def test_matmul_precision_sets_the_cublas_math_mode():
    from jitgraph.kernels.cuda_matmul import Blas, blas_call
    lib = _RecordingCublas()
    blas = Blas("cupy", lib, driver=None)
    call = blas_call((None, 4, False), (None, 4, False), 4, 4, 4)

    def gemm():
        blas.gemm(0, "float32", call, 0, 0, 0, 0, 0, 0, 0, 0, 1)
    gemm()
    gemm()                                           # the mode is set once while unchanged
    with config.matmul_precision("tf32"):
        gemm()
    gemm()
    assert lib.calls == [("math", 0), ("sgemm",), ("sgemm",), ("math", 3), ("sgemm",),
                         ("math", 0), ("sgemm",)]


WRAPPER = """
import runpy, sys
import numpy as np
import jitgraph, jitgraph.nn as nn, jitgraph.numpy as jnp, jitgraph.random as jr
print("ones:", jnp.ones(1).dtype, "normal:", jr.normal(jr.key(0), (1,)).dtype,
      "he_normal:", nn.initializers.he_normal()(jr.key(0), (2, 2)).dtype)
made = []
init = nn.MLP.__init__
def recording(self, *a, **k):
    init(self, *a, **k)
    made.append(self)
nn.MLP.__init__ = recording
sys.path.insert(0, sys.argv[1])
sys.argv = [sys.argv[2], "--smoke"]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code or 0
print("params:", sorted({str(np.asarray(p).dtype) for m in made for p in jitgraph.tree_leaves(m)}))
sys.exit(code)
"""


def test_the_digits_example_trains_in_float32_from_the_environment(tmp_path):
    pytest.importorskip("sklearn")
    env = dict(os.environ, JITGRAPH_DEFAULT_FLOAT="float32",
               JITGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-c", WRAPPER, str(ROOT / "examples"),
                        str(ROOT / "examples" / "train_digits.py")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "ones: float32 normal: float32 he_normal: float32" in p.stdout
    assert "params: ['float32']" in p.stdout
    assert "accuracy" in p.stdout.lower()
    bad = subprocess.run([sys.executable, "-c", "import jitgraph"], cwd=ROOT, capture_output=True,
                         text=True, env=dict(os.environ, JITGRAPH_DEFAULT_FLOAT="float16"))
    assert bad.returncode != 0 and "JITGRAPH_DEFAULT_FLOAT='float16'" in bad.stderr
