"""Compile every generated CUDA kernel of a set of programs to PTX for a real GPU target
(default sm_90), without a GPU: Numba's simulator does no type checking, so this is what
catches generated code the CUDA target would reject. Needs numba-cuda with libNVVM
(``pip install 'numba-cuda[cu13]'``); must run without NUMBA_ENABLE_CUDASIM.

    python tests_cuda/ptx_check.py [--cc 9.0]      # prints one line per program, exit 1 on errors
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(_ROOT, "tests"), os.path.join(_ROOT, "tests_cuda"), _ROOT]

import numpy as np  # noqa: E402


def _no_driver_device_functions(cc) -> None:
    """Device functions compile for the *current* device's capability; without a driver,
    pretend there is one of capability ``cc`` (kernels themselves take ``cc`` directly)."""
    import types as pytypes

    from numba.cuda import dispatcher
    dev = pytypes.SimpleNamespace(compute_capability=cc)
    dispatcher.get_current_device = lambda: dev


def check_program(fn, args, cc=(9, 0), **patch) -> int:
    """Generate the CUDA module of ``jit(fn)(*args)`` and compile each kernel to PTX; returns
    the number of kernels compiled (raises on the first failure)."""
    from numba import cuda, from_dtype, types

    import jitgraph
    from jitgraph.compiler.backends import cuda as codegen_cuda
    from jitgraph.compiler.backends.base import emit_program
    from jitgraph.compiler.backends.cuda import CudaCodegen, CudaContext
    from jitgraph.compiler.backends.cuda_program import cache_key
    from jitgraph.compiler.fusion import make_plan
    from jitgraph.compiler.lower import inline_calls
    from jitgraph.compiler.settings import disk_cache, fingerprint

    old = {k: getattr(codegen_cuda, k) for k in patch}
    for k, v in patch.items():
        setattr(codegen_cuda, k, v)
    try:
        graph = inline_calls(jitgraph.make_graph(fn)(*args))
        ctx = CudaContext()
        plan = make_plan(graph, ctx)
        gen = CudaCodegen(plan, ctx, shuffle=True)
        module_text = emit_program(gen, plan, set())[0]
        source, info = module_text.source, module_text.info
    finally:
        for k, v in old.items():
            setattr(codegen_cuda, k, v)
    module, _ = disk_cache().load_module(source, key_extra=cache_key(
        fingerprint(), cc, False, True) + "|ptx-check")
    dtypes = {name: v.aval.dtype for v, name in plan._names.items()}
    dtypes.update({n: d for n, _, d in info["scratch_specs"]})
    n = 0
    for name, obj in vars(module).items():
        py = getattr(obj, "py_func", None)
        if py is None or getattr(py, "__module__", None) != module.__name__:
            continue
        sig = tuple(types.Array(from_dtype(np.dtype(dtypes[p])), 1, "C")
                    for p in inspect.signature(py).parameters)
        try:
            cuda.compile_ptx(py, sig, cc=cc)
        except Exception as e:
            src = inspect.getsource(py)
            raise RuntimeError(f"{name}: {type(e).__name__}: {e}\n{src}") from None
        n += 1
    return n


def library_kernels(cc=(9, 0)) -> int:
    """The hand-written kernels in kernels/cuda_*.py."""
    from numba import cuda, float32, float64, int64, types

    from jitgraph.kernels import cuda_matmul, cuda_util
    n = 0
    for dt in (float32, float64, int64):
        arr = types.Array(dt, 1, "C")
        cuda.compile_ptx(cuda_util._fill.py_func, (arr, dt), cc=cc)
        cuda.compile_ptx(cuda_util._copy.py_func, (arr, arr), cc=cc)
        for tile in (cuda_matmul.GPU_TILE, cuda_matmul.SIM_TILE):
            k = cuda_matmul.tiled_kernel(str(dt), tile)
            i = types.int64
            cuda.compile_ptx(k.py_func, (arr, i, i, i, arr, i, i, i, arr, arr, dt, dt, i, i, i),
                             cc=cc)
        n += 2 + 2
    return n


def programs():
    """(name, fn, args, codegen patches): the simulator test selection, the device MLP step,
    and the split / column reduction layouts."""
    import jitgraph
    import jitgraph.numpy as jnp
    from cases import CASES
    from test_cuda_cases import FORWARD, GRADS
    from test_cuda_runtime import _sgd

    by = {c.name: c for c in CASES}
    for name in FORWARD:
        yield name, by[name].fn, by[name].args, {}
    for name in GRADS:
        c = by[name]
        out = np.asarray(c.fn(*c.args))
        w = np.ones(out.shape, out.dtype)
        yield f"grad {name}", jitgraph.grad(lambda *a, c=c, w=w: jnp.sum(c.fn(*a) * w),
                                            argnums=c.argnums), c.args, {}
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((5, 6)).astype(np.float32), np.zeros(6, np.float32)),
              (rng.standard_normal((6, 3)).astype(np.float32), np.zeros(3, np.float32))]
    yield "mlp step", _sgd, (params, np.ones((4, 5), np.float32),
                             np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]), {}
    f = (lambda v: jnp.sum(jnp.tanh(v) * jitgraph.nn.sigmoid(1.5 * v + 0.1) + 0.5 * v ** 2))
    yield "split value+grad", jitgraph.value_and_grad(f), (np.ones(300, np.float32),), \
        {"SPLIT_MIN_INNER": 64, "SPLIT_CHUNK": 48}
    yield "columns", (lambda x, b: jnp.sum(jnp.tanh(x + b), axis=0) * 2.0 + b), \
        (np.ones((5, 40)), np.ones(40)), {}
    yield "argmax rows", (lambda x: (jnp.argmax(x, axis=-1), jnp.max(x, axis=-1))), \
        (np.ones((4, 100), np.float32),), {}
    # index maps at training sizes (the programs that failed to type past the CPU's parallel
    # threshold), value and gradient: offsets, clamps and thread indices in one integer type
    n = 1 << 17
    a, idx = rng.standard_normal(n).astype(np.float32), rng.integers(-n, n, n)

    def maps(a, i):
        c = jnp.concatenate([a, a[::-1] * 2.0])
        return jnp.pad(c, (3, 5)) + 1.0, jnp.roll(a, 7) * a[i], \
            jitgraph.nn.dropout(jitgraph.random.key(0), a, 0.3)
    yield "index maps 2^17", maps, (a, idx), {}
    yield "grad index maps 2^17", jitgraph.grad(
        lambda a, i: sum(jnp.sum(o) for o in maps(a, i))), (a, idx), {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default="9.0")
    ap.add_argument("-k", default="", help="only programs whose name contains this")
    a = ap.parse_args()
    cc = tuple(int(x) for x in a.cc.split("."))
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("ptx_check: unset NUMBA_ENABLE_CUDASIM (the simulator compiles nothing)")
        return 2
    failures = 0
    _no_driver_device_functions(cc)
    print(f"library kernels: {library_kernels(cc)} compiled")
    for name, fn, args, patch in programs():
        if a.k not in name:
            continue
        try:
            print(f"{name}: {check_program(fn, args, cc, **patch)} kernels ok")
        except Exception as e:
            failures += 1
            print(f"{name}: FAILED {e}")
    print(f"{failures} programs failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
