"""Cases of the shared table compiled with ``jit(f, device="cuda")`` against the reference
(eager NumPy implementations), and ``jit(grad(f), device="cuda")`` against ``grad(f)``.

The simulator runs every kernel thread in Python, so this is a selection covering each kind
of step: elementwise chains with broadcasting and casts, reductions over inner, leading and
all axes (sum/max/min/prod/arg*), layout ops and gathers, scatter-add, matmul (plain, batched,
transposed operands, integer, epilogues), and the row computations (softmax, log-softmax,
cross-entropy, layernorm).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from cases import CASES
from jitgraph.tree import tree_flatten

FORWARD = [
    "exp[f32_2x3]", "log1p[f64_2x3]", "tanh[f32_2x3]", "sign[f64_2x3]", "floor[f64_2x3]",
    "floor[f32_2x3]", "sigmoid[f32_2x3]", "expit[f64_2x3]", "erf[f64_2x3]", "negative[f64_size0]",
    "exp[f64_0d]", "add[bcast_3d]", "maximum[bcast_row]", "power[f32]", "mod[same]",
    "where[bcast]", "clip[f32]", "isnan", "logical_and", "pow[i64**i64 big]", "floordiv_op[i32]",
    "astype[f64->i32]", "sum[axis=None,keepdims=False]", "max[axis=0,keepdims=False]",
    "mean[axis=(0, 2),keepdims=False]", "min[axis=(-1, 0),keepdims=True]", "prod[axis=1]",
    "var[axis=-1]", "argmax[axis=None]", "argmin[axis=0]", "argmax[ties]", "sum[bool]",
    "sum[size0 all]", "max[0d]", "reshape", "transpose[perm]", "concatenate[axis1]", "flip[axis]",
    "broadcast_to", "index[slice step]", "index[neg step]", "index[2d array]", "take_along_axis",
    "prim pad_slice", "prim windows[2d]", "prim windows_transpose[2d]", "prim scatter_add", "prim scatter_add[2 idx]", "prim gather[clamp]",
    "matmul[2d@2d]", "matmul[batched]", "matmul[int]", "matmul[f32]", "matmul[size0 k]",
    "einsum[ba,bc->ca]", "log_softmax[f32]", "softmax[axis0 f64]", "logsumexp[-inf row]",
    "cross entropy", "one_hot", "composite[mlp]", "composite[layernorm f32]",
    "composite[softmax attn]",
    # integer dtypes at their limits and the bitwise ops (wraparound, shifts past the width)
    "int_elementwise[u8]", "int_elementwise[i16]", "int_elementwise[u64]",
    "int_reductions[u32]", "int_reductions[i8]", "int_promote[u64+i8]", "bitwise[bool]",
]
GRADS = ["tanh[f32_2x3]", "exp[f64_2x3]", "max[axis=0,keepdims=False]", "index[2d array]",
         "take_along_axis", "matmul[2d@2d]", "log_softmax[f32]", "cross entropy",
         "composite[mlp]", "composite[layernorm f32]",
         "lax conv_general_dilated[stride dilation groups]"]

_BY_NAME = {c.name: c for c in CASES}
TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-10, 1e-12)}


def _close(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        rtol, atol = TOL[want.dtype]
        scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _check_tree(got, want, what: str) -> None:
    gl, gt = tree_flatten(jitgraph.device_get(got))
    wl, wt = tree_flatten(want)
    assert gt == wt, f"{what}: output structure {gt} != {wt}"
    for i, (g, w) in enumerate(zip(gl, wl)):
        _close(g, w, f"{what} output {i}")


def test_selection_exists():
    missing = [n for n in FORWARD + GRADS if n not in _BY_NAME]
    assert not missing, f"cases renamed or removed from tests/cases.py: {missing}"


@pytest.mark.parametrize("name", FORWARD)
def test_forward(name):
    case = _BY_NAME[name]
    want = case.fn(*case.args)
    got = jitgraph.jit(case.fn, device="cuda")(*case.args)
    for leaf in tree_flatten(got)[0]:
        assert isinstance(leaf, jitgraph.DeviceArray), f"{name}: output is {type(leaf).__name__}"
    _check_tree(got, want, name)


@pytest.mark.parametrize("name", GRADS)
def test_jit_of_grad(name):
    """The gradient of a weighted sum of the case's output (weights fixed per case)."""
    case = _BY_NAME[name]
    out = np.asarray(case.fn(*case.args))
    w = np.random.default_rng(len(name)).standard_normal(out.shape).astype(out.dtype)

    def loss(*args):
        return jnp.sum(case.fn(*args) * w)
    g = jitgraph.grad(loss, argnums=case.argnums)
    _check_tree(jitgraph.jit(g, device="cuda")(*case.args), g(*case.args), name)
