"""Every function-level case compiled by ``jitgraph.jit`` and checked against the reference
interpreter; for differentiable cases also ``jit(grad(f))`` and ``grad(jit(f))`` against the
gradient computed without jit.

The cases are the shared table ``tests/cases.py`` (``CASES``) plus this file's own list
(``OWN``: elementwise chains with broadcasting, casts, comparisons, float32 reductions over every
axis combination, strided/negative slicing, gathers and their scatter gradients, matmuls, einsum,
nn functions, integer and bool programs, 0-d and size-0 arrays).

Compile time dominates (Numba needs about 0.1 s per generated function), so:

* cases whose optimized graphs are identical (aliases such as ``add``/``add_op``, or two cases
  that fold to the same program) share one compiled program: the batch program of the first
  one is called again with the other case's arguments (same signature: a cache hit, no compile);
* the distinct programs are compiled in batches: one jitted function returns the outputs (and,
  for differentiable cases, the gradients) of several cases, so a batch is one program;
* with more than one CPU, helper processes (this file run as a script) compile some batches
  into the session's disk cache while this process compiles the others; this process then loads
  those from disk (no Numba compile). ``JITGRAPH_TEST_JIT_WORKERS=0`` turns the helpers off.

``jit(grad(f))`` is compiled for every differentiable case of ``OWN`` and for a subset of the
shared differentiable cases that covers every (primitive, rank, empty) combination and axis
parameter of any gradient program (``_select_jit_grad``); ``JITGRAPH_TEST_ALL_GRADS=1`` compiles
all of them (about three times the compile time). ``grad(jit(f))`` (no compile: jit traces
through) is checked for every differentiable case.

A failure is reported under the case's own name. When a case fails inside its batch, it is also
compiled alone, and the message says whether it fails there too; when a batch does not compile,
the cases that also fail alone are the ones reported.

Environment: ``JITGRAPH_TEST_JIT_WORKERS`` (helper processes, default: CPUs - 1, at most 3),
``JITGRAPH_TEST_JIT_BUDGET`` (graph nodes per batch program), ``JITGRAPH_TEST_ALL_GRADS``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.scipy import special as jsp
from jitgraph.tree import tree_flatten

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

try:
    from cases import CASES as _SHARED_CASES
except ImportError:            # the shared table may not exist yet: run the own list only
    _SHARED_CASES = []

F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64

# jit vs the reference interpreter. float: |got - want| <= atol * max(1, max|want|) + rtol * |want|.
# The fast vectorized exp/log/tanh/... are within a few ULP, and reductions may be reassociated,
# so float64 is compared to ~1e-12 relative and float32 to ~1e-5.
FWD_TOL = {np.dtype(F32): (1e-5, 1e-6), np.dtype(F64): (1e-11, 1e-12)}
# Gradients go through longer chains (and cancellations in backward sums).
GRAD_TOL = {np.dtype(F32): (2e-5, 2e-6), np.dtype(F64): (1e-9, 1e-11)}

BUDGET = int(os.environ.get("JITGRAPH_TEST_JIT_BUDGET", "80"))     # graph nodes per program
MAX_BATCH = 40


# ------------------------------------------------------------------ cases
@dataclass
class JCase:
    name: str
    fn: Callable
    args: tuple
    grad: bool = False
    argnums: Any = 0
    rtol: float | None = None
    atol: float | None = None
    key: str = ""                  # identical optimized graph <=> identical key
    weights: list = field(default_factory=list)   # cotangent weights of the float outputs
    jit_grad: bool = False         # its program also computes the gradient (see JIT_GRAD)

    def __repr__(self) -> str:
        return f"JCase({self.name})"


OWN: list[JCase] = []
_rng = np.random.default_rng(7031)


def own(name, fn, *args, grad=False, argnums=0, rtol=None, atol=None):
    assert not any(c.name == name for c in OWN), name
    OWN.append(JCase("own:" + name, fn, tuple(args), grad, argnums, rtol, atol))


def rn(*shape, dtype=F64):
    return _rng.standard_normal(shape).astype(dtype)


def uni(*shape, lo=0.5, hi=1.5, dtype=F64):
    return _rng.uniform(lo, hi, shape).astype(dtype)


def distinct(*shape, dtype=F64):
    n = int(np.prod(shape, dtype=np.int64))
    v = (_rng.permutation(n) - n / 2.0) * 0.31 + _rng.uniform(-0.05, 0.05, n)
    return v.reshape(shape).astype(dtype)


def ints(*shape, lo=-6, hi=7, dtype=I64):
    return _rng.integers(lo, hi, shape).astype(dtype)


def nonzero(*shape, dtype=I64):
    return (_rng.integers(1, 5, shape) * np.where(_rng.uniform(size=shape) < 0.5, -1, 1)).astype(dtype)


# elementwise chains and broadcasting
for _tag, _dt in (("f32", F32), ("f64", F64)):
    _g = _dt == F64
    own(f"chain[bcast 3d {_tag}]",
        lambda x, y, z: jnp.tanh(x * 2.0 + y) * jnp.exp(-z) - x / (1.0 + y * y)
        + jnp.sqrt(jnp.abs(z) + 1.0),
        rn(2, 3, 4, dtype=_dt), rn(3, 1, dtype=_dt), rn(4, dtype=_dt), grad=_g, argnums=(0, 1, 2))
    own(f"chain[long {_tag}]",
        lambda x: jnp.log1p(jnp.abs(jnp.cos(((x * 1.5 + 0.5) - x * 0.25) / (2.0 + jnp.sin(x)))
                                    * 3.0 - 1.0)) + jnp.expm1(x * 0.1),
        rn(5, 6, dtype=_dt), grad=_g)
    own(f"chain[outer bcast {_tag}]", lambda a, b: nn.sigmoid(a * b - 0.5) * (a - b) ** 2,
        rn(4, 1, dtype=_dt), rn(1, 5, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"chain[0d {_tag}]", lambda s, t: jnp.exp(s) * t - jnp.tanh(s * t) / (1.0 + t * t),
        rn(dtype=_dt), rn(dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"chain[0d with array {_tag}]", lambda s, x: jnp.sin(s * x) + s, rn(dtype=_dt),
        rn(3, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"chain[size0 {_tag}]", lambda x, y: jnp.exp(x) * y + 1.0, rn(0, 3, dtype=_dt),
        rn(3, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"chain[pow div {_tag}]", lambda x, y: (x * x + 1.0) ** 1.5 / (2.0 + jnp.cos(y)) - x ** 3,
        rn(3, 4, dtype=_dt), rn(4, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"chain[max min clip {_tag}]",
        lambda x, y: jnp.clip(jnp.maximum(x, y) - jnp.minimum(x, 0.25), -0.8, 0.9) + jnp.sign(y),
        distinct(3, 4, dtype=_dt), distinct(4, dtype=_dt) + 0.013)

# casts
own("cast[f64->f32->f64]", lambda x: (x.astype(jnp.float32) * 3.0).astype(jnp.float64) + x,
    rn(3, 4), grad=True)
own("cast[f32->i32->f32]", lambda x: (x * 4.0).astype(jnp.int32).astype(jnp.float32) + x,
    rn(3, 4, dtype=F32))
own("cast[f64->i64 negative]", lambda x: (x * 3.0).astype(jnp.int64) * 2, rn(2, 5))
own("cast[i32->f64]", lambda i: jnp.sqrt(i.astype(jnp.float64) * i) + 0.5,
    ints(4, 3, dtype=I32))
own("cast[i64->f32 mixed]", lambda i, x: i.astype(jnp.float32) * x + i, ints(3, dtype=I64),
    rn(2, 3, dtype=F32))
own("cast[bool->i32,f32]", lambda x: ((x > 0).astype(jnp.int32) * 2 + 1,
                                      (x < 0.5).astype(jnp.float32) * x),
    rn(3, 4, dtype=F32))
own("cast[i32->bool]", lambda i: (i != 0, jnp.logical_not(i), (i.astype(jnp.bool_))),
    ints(6, dtype=I32))
own("cast[i64->i32 wrap free]", lambda i: i.astype(jnp.int32) * 3, ints(5, dtype=I64))

# comparisons, logic and where
for _tag, _dt in (("f32", F32), ("f64", F64)):
    own(f"compare[{_tag}]", lambda x, y: (x < y, x >= y, x == y, x != y),
        np.round(rn(3, 4, dtype=_dt)), np.round(rn(4, dtype=_dt)))
    own(f"where[{_tag}]", lambda x, y: jnp.where(x > y, jnp.exp(x), y * 2.0) + jnp.where(x < 0, 0.0, x),
        distinct(3, 4, dtype=_dt), distinct(4, dtype=_dt) + 0.017, grad=_dt == F64,
        argnums=(0, 1))
own("compare[i32 vs f32]", lambda i, x: (i > x, jnp.where(i <= x, i, -i)),
    ints(3, 4, dtype=I32), np.round(rn(4, dtype=F32) * 3))
own("logic[bool ops]", lambda x, y: (jnp.logical_and(x > 0, y > 0) | (x < -1), ~(x > y),
                                     jnp.logical_or(x > 0.5, y < -0.5) & (x != y)),
    rn(3, 4), rn(4))
own("where[i64 bool cond]", lambda c, a, b: jnp.where(c, a, b) * 2, rn(5) > 0, ints(5), ints(5))

# reductions: float32 over every axis combination, with and without keepdims
_R32 = uni(2, 3, 4, dtype=F32)
_R32[0, 1, 2] += 0.5
_AX3 = [None, 0, 1, 2, -1, (0, 1), (0, 2), (1, 2), (0, 1, 2)]
for _ax in _AX3:
    for _kd in (False, True):
        def _red(x, a=_ax, k=_kd):
            out = {"sum": jnp.sum(x, axis=a, keepdims=k), "mean": jnp.mean(x, axis=a, keepdims=k),
                   "max": jnp.max(x, axis=a, keepdims=k), "min": jnp.min(x, axis=a, keepdims=k),
                   "prod": jnp.prod(x, axis=a, keepdims=k), "var": jnp.var(x, axis=a, keepdims=k),
                   "std": jnp.std(x, axis=a, keepdims=k)}
            if a is None or isinstance(a, int):
                out["argmax"] = jnp.argmax(x, axis=a, keepdims=k)
                out["argmin"] = jnp.argmin(x, axis=a, keepdims=k)
            return out
        own(f"reduce[f32 axis={_ax} keepdims={_kd}]", _red, _R32)
for _ax in (None, 0, 1, (0, 2)):
    own(f"reduce[f64 grad axis={_ax}]",
        lambda x, a=_ax: (jnp.sum(x * x, axis=a), jnp.mean(jnp.sin(x), axis=a, keepdims=True),
                          jnp.max(x, axis=a), jnp.prod(x, axis=a), jnp.var(x, axis=a),
                          jnp.std(x, axis=a, keepdims=True)),
        distinct(2, 3, 4) * 0.3 + 1.5, grad=True)
for _ax in (None, 0, 1, -1):
    own(f"reduce[i32 axis={_ax}]",
        lambda x, a=_ax: (jnp.sum(x, axis=a), jnp.prod(x, axis=a), jnp.max(x, axis=a),
                          jnp.min(x, axis=a), jnp.argmax(x, axis=a), jnp.argmin(x, axis=a),
                          jnp.mean(x, axis=a)),
        ints(3, 4, lo=-3, hi=4, dtype=I32))
    own(f"reduce[bool axis={_ax}]",
        lambda x, a=_ax: (jnp.sum(x > 0, axis=a), jnp.argmax(x > 0.3, axis=a)), rn(3, 4))
own("reduce[i64 keepdims]", lambda x: (jnp.sum(x, axis=1, keepdims=True),
                                       jnp.max(x, axis=0, keepdims=True)), ints(3, 4))
own("reduce[size0]", lambda x: (jnp.sum(x, axis=0), jnp.sum(x, axis=1), jnp.prod(x, axis=0),
                                jnp.max(x, axis=1), jnp.sum(x)), rn(0, 3), grad=True)
own("reduce[size0 f32]", lambda x: (jnp.sum(x, axis=0), jnp.min(x, axis=1)),
    rn(0, 3, dtype=F32))
own("reduce[0d f32]", lambda x: (jnp.sum(x), jnp.max(x), jnp.mean(x), jnp.argmax(x)),
    rn(dtype=F32))
own("reduce[row then col]", lambda x: jnp.sum(x - jnp.max(x, axis=1, keepdims=True), axis=0)
    / jnp.sum(jnp.exp(x), axis=(0, 1)), rn(4, 5), grad=True)
own("reduce[nan propagation]", lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0),
                                          jnp.argmax(x, axis=1), jnp.sum(x, axis=1)),
    np.array([[1.0, np.nan, 3.0], [2.0, 0.5, -1.0]], dtype=F32))

# layout: transpose, reshape, broadcast, slicing with steps, expand/squeeze, concat/stack
for _tag, _dt in (("f32", F32), ("f64", F64)):
    _g = _dt == F64
    own(f"slice[steps {_tag}]", lambda x: x[::2, ::-1] * 2.0 + x[1::2, ::-1] - x[::2, 5::-1],
        rn(4, 6, dtype=_dt), grad=_g)
    own(f"slice[neg steps 3d {_tag}]", lambda x: x[::-1, 4:0:-2, ::-3] + x[:, 1:3, 2::2][:, ::-1],
        rn(3, 5, 7, dtype=_dt), grad=_g)
    own(f"layout[transpose reshape {_tag}]",
        lambda x: jnp.transpose(x, (2, 0, 1)).reshape(4, 6) * jnp.arange(6.0) + x.reshape(4, 6),
        rn(2, 3, 4, dtype=_dt), grad=_g)
    own(f"layout[expand squeeze bcast {_tag}]",
        lambda x, y: jnp.squeeze(jnp.expand_dims(x, 1) * jnp.broadcast_to(y, (3, 1, 4)), axis=1)
        + jnp.expand_dims(y, 0)[0],
        rn(3, 4, dtype=_dt), rn(4, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"layout[concat stack {_tag}]",
        lambda x, y: jnp.concatenate([x, y[::-1], x[:1] * 2.0], axis=0).T
        + jnp.stack([x[0], y[1]], axis=1).sum(),
        rn(2, 3, dtype=_dt), rn(2, 3, dtype=_dt), grad=_g, argnums=(0, 1))
    own(f"layout[flip mT {_tag}]", lambda x: jnp.flip(x, axis=(0, 2)).mT - jnp.swapaxes(x, 1, 2),
        rn(2, 3, 4, dtype=_dt), grad=_g)
own("layout[i32 stack transpose]", lambda a, b: jnp.stack([a, b, a * b], axis=-1).transpose(2, 0, 1)[:, ::-1],
    ints(3, 4, dtype=I32), ints(3, 4, dtype=I32))
own("layout[bool concat]", lambda x: jnp.concatenate([x > 0, x[::-1] < 0], axis=1), rn(3, 2))
own("layout[transpose reduce]", lambda x: jnp.sum(jnp.transpose(x, (2, 0, 1))
                                                  * jnp.arange(4.0)[:, None, None], axis=1),
    rn(2, 3, 4), grad=True)
own("layout[size0 concat]", lambda x, y: jnp.concatenate([x, y], axis=0) * 2.0,
    rn(0, 3, dtype=F32), rn(2, 3, dtype=F32))
own("layout[reshape 0d]", lambda x: jnp.reshape(x, (1, 1)) + jnp.reshape(x, ()), rn())

# gathers, take, take_along_axis, and scatters (their gradients)
_LAB = np.array([3, 0, 2, 2, 1])
for _tag, _dt in (("f32", F32), ("f64", F64)):
    _g = _dt == F64
    own(f"gather[labels {_tag}]", lambda x, l: x[jnp.arange(5), l] * 2.0, rn(5, 4, dtype=_dt),
        _LAB, grad=_g)
    own(f"gather[labels i32 {_tag}]", lambda x, l: x[jnp.arange(5), l], rn(5, 4, dtype=_dt),
        _LAB.astype(I32), grad=_g)
    own(f"take[axis1 {_tag}]", lambda x: jnp.take(x, np.array([2, 2, 0, -1]), axis=1) + 1.0,
        rn(3, 4, dtype=_dt), grad=_g)
    own(f"take_along_axis[{_tag}]", lambda x, i: jnp.take_along_axis(x, i, axis=1),
        rn(4, 5, dtype=_dt), _rng.integers(0, 5, (4, 3)), grad=_g)
own("scatter[grad repeated labels]", lambda x, l: jnp.sum(x[jnp.arange(6), l] ** 2)
    + jnp.sum(x[l, l]), rn(6, 6), np.array([1, 1, 4, 1, 0, 4]), grad=True)
own("scatter[grad take repeated]", lambda x: jnp.sum(jnp.take(x, np.array([0, 2, 2, 2, -1]), axis=0)
                                                     * jnp.arange(3.0)), rn(4, 3), grad=True)
own("scatter[grad take_along_axis]", lambda x, i: jnp.take_along_axis(x, i, axis=0) * 3.0,
    rn(3, 4), np.array([[0, 2, 2, 1], [0, 0, 2, 1]]), grad=True)
own("gather[i64 table]", lambda t, i: t[i] + 1, ints(5, 3), np.array([[4, 0], [1, 1]]))
own("gather[bool table]", lambda t, i: t[i], rn(4) > 0, np.array([3, 3, 0]))
own("gather[nll loss f32]", lambda lp, y: -jnp.mean(lp[jnp.arange(4), y]),
    rn(4, 3, dtype=F32), np.array([2, 0, 1, 2]))

# matmul and einsum
for _tag, _dt in (("f32", F32), ("f64", F64)):
    _g = _dt == F64
    _r, _a = (2e-5, 1e-5) if _dt == F32 else (None, None)
    own(f"matmul[transposed {_tag}]", lambda a, b: a.T @ b + (b.T @ a).T,
        rn(3, 4, dtype=_dt), rn(3, 2, dtype=_dt), grad=_g, argnums=(0, 1), rtol=_r, atol=_a)
    own(f"matmul[batched {_tag}]", lambda a, b: a @ b, rn(3, 2, 4, dtype=_dt),
        rn(3, 4, 5, dtype=_dt), grad=_g, argnums=(0, 1), rtol=_r, atol=_a)
    own(f"matmul[vec {_tag}]", lambda a, b: (a @ b, b.T @ a[:4], a @ a), rn(4, dtype=_dt),
        rn(4, 3, dtype=_dt), grad=_g, argnums=(0, 1), rtol=_r, atol=_a)
    own(f"matmul[chain {_tag}]", lambda a, b, c: jnp.tanh(a @ b + 0.1) @ c,
        rn(3, 4, dtype=_dt), rn(4, 5, dtype=_dt), rn(5, 2, dtype=_dt), grad=_g,
        argnums=(0, 1, 2), rtol=_r, atol=_a)
    own(f"einsum[{_tag}]", lambda a, b: (jnp.einsum("bij,bjk->bik", a, b),
                                         jnp.einsum("bij,bij->b", a, a),
                                         jnp.einsum("bij->jb", a)),
        rn(2, 3, 4, dtype=_dt), rn(2, 4, 2, dtype=_dt), grad=_g, argnums=(0, 1), rtol=_r, atol=_a)
    # GEMM epilogues: alpha * (a @ b) + beta * c in one BLAS call
    own(f"gemm[sgd update {_tag}]", lambda w, h, d: w - 0.1 * (h.T @ d),
        rn(4, 3, dtype=_dt), rn(5, 4, dtype=_dt), rn(5, 3, dtype=_dt), grad=_g,
        argnums=(0, 1, 2), rtol=_r, atol=_a)
    own(f"gemm[computed c {_tag}]", lambda a, b, c: (lambda t, u: (t + (a @ b) * 2.0, u - a @ b))(
        jnp.tanh(c), jnp.sin(c).T.reshape(3, 2)),
        rn(3, 4, dtype=_dt), rn(4, 2, dtype=_dt), rn(3, 2, dtype=_dt), grad=_g,
        argnums=(0, 1, 2), rtol=_r, atol=_a)
    own(f"gemm[c is a product {_tag}]", lambda a, b, c, d: (a @ b) * 0.5 + c @ d
        + ((d.T @ c.T).T - 2.0 * (a @ b)),
        rn(3, 4, dtype=_dt), rn(4, 2, dtype=_dt), rn(3, 5, dtype=_dt), rn(5, 2, dtype=_dt),
        grad=_g, argnums=(0, 1, 2, 3), rtol=_r, atol=_a)
    own(f"gemm[c also an output {_tag}]", lambda a, b, c: (lambda t: (t - 3.0 * (a @ b), t))(
        c * 2.0), rn(3, 4, dtype=_dt), rn(4, 2, dtype=_dt), rn(3, 2, dtype=_dt), grad=_g,
        argnums=(0, 1, 2), rtol=_r, atol=_a)
own("matmul[i32]", lambda a, b: a @ b, ints(3, 4, dtype=I32), ints(4, 2, dtype=I32))
own("matmul[i64 batched]", lambda a, b: a @ b, ints(2, 3, 4), ints(2, 4, 2))
own("matmul[size0]", lambda a, b, c: (a @ b, c @ c.T, c.T @ c), rn(0, 3), rn(3, 2), rn(2, 0),
    grad=True, argnums=(0, 1, 2))
own("matmul[bias relu]", lambda x, w, b: nn.relu(x @ w + b), rn(4, 3), rn(3, 5), rn(5),
    grad=True, argnums=(0, 1, 2))

# nn
for _tag, _dt in (("f32", F32), ("f64", F64)):
    _g = _dt == F64
    own(f"nn[softmax family {_tag}]",
        lambda x: (nn.softmax(x), nn.softmax(x, axis=0), nn.log_softmax(x),
                   nn.log_softmax(x, axis=0), jsp.logsumexp(x, axis=1),
                   jsp.logsumexp(x, axis=0, keepdims=True), jsp.logsumexp(x)),
        rn(3, 5, dtype=_dt) * 3.0, grad=_g)
    own(f"nn[large logits {_tag}]", lambda x: (nn.log_softmax(x), nn.softmax(x)),
        np.array([[80.0, 0.0, -80.0], [-30.0, -31.0, -32.0]], dtype=_dt), grad=_g)
    own(f"nn[xent {_tag}]",
        lambda z, y: -jnp.mean(jnp.sum(nn.log_softmax(z) * nn.one_hot(y, 4, dtype=z.dtype), axis=1)),
        rn(6, 4, dtype=_dt), np.array([0, 3, 1, 1, 2, 0]), grad=_g)
    own(f"nn[activations {_tag}]", lambda x: (nn.relu(x), nn.gelu(x), nn.silu(x), nn.softplus(x),
                                              nn.elu(x), nn.leaky_relu(x), nn.log_sigmoid(x)),
        distinct(3, 4, dtype=_dt) * 0.5 + 0.01, grad=_g)
own("nn[one_hot]", lambda y: (nn.one_hot(y, 5), nn.one_hot(y, 3, dtype=jnp.float32)),
    np.array([0, 4, 2, 2, -1, 7]))
own("nn[softmax size0 rows]", lambda x: (nn.softmax(x), nn.log_softmax(x)), rn(0, 4), grad=True)
own("nn[logsumexp 0d]", lambda x: jsp.logsumexp(x), rn(dtype=F32))
own("nn[layernorm]", lambda x, g, b: (x - x.mean(-1, keepdims=True))
    / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b, rn(3, 6), rn(6), rn(6), grad=True,
    argnums=(0, 1, 2))

# integer and bool programs
own("int[arith i32]", lambda a, b: (a * b + a // b - a % b, -a, jnp.abs(a) * jnp.sign(b), a ** 2),
    ints(3, 4, dtype=I32), nonzero(3, 4, dtype=I32))
own("int[arith i64 bcast]", lambda a, b: (a // b, a % b, jnp.maximum(a, b), jnp.minimum(a, b) * 3),
    ints(4, 3), nonzero(3))
own("int[promote]", lambda a, b: (a + b, a * 2, a / 2, b + 1.5), ints(3, dtype=I32), ints(3))
own("bool[arith]", lambda x, y: (jnp.sum(x > y) + jnp.sum(x), (x > 0) == (y > 0)), rn(3, 4), rn(4))


# ------------------------------------------------------------------ the full list
def _from_shared(c) -> JCase:
    return JCase(c.name, c.fn, tuple(c.args), bool(c.grad), c.argnums, c.rtol, c.atol)


ALL: list[JCase] = OWN + [_from_shared(c) for c in _SHARED_CASES]
assert len({c.name for c in ALL}) == len(ALL), "duplicate case names"
GRAD: list[JCase] = [c for c in ALL if c.grad]


def _hash_array(h, a) -> None:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())


def _graph_key(c: JCase) -> str:
    """Identical keys <=> identical optimized graphs (text, constants, array params, trees)."""
    from jitgraph.passes import optimize
    g = optimize(jitgraph.make_graph(c.fn)(*c.args))
    h = hashlib.sha256(str(g).encode())
    h.update(repr(g.out_tree).encode())
    h.update(repr(tree_flatten(tuple(c.args))[1]).encode())
    seen = set()
    for n in g.nodes:
        for v in n.inputs:
            if v in g.consts and v not in seen:
                seen.add(v)
                _hash_array(h, g.consts[v])
        for k, p in sorted(n.params.items()):
            if isinstance(p, np.ndarray):
                _hash_array(h, p)
    for v in g.outputs:
        if v in g.consts:
            _hash_array(h, g.consts[v])
    h.update(f"jit_grad={c.jit_grad} argnums={c.argnums}".encode())
    return h.hexdigest()


def _weights(c: JCase) -> list:
    """Fixed cotangents for the float outputs (not all ones, so transposition bugs show)."""
    out = []
    for k, o in enumerate(tree_flatten(c.fn(*c.args))[0]):
        o = np.asarray(o)
        if o.dtype.kind != "f":
            out.append(None)
            continue
        w = 1.0 + 0.5 * np.cos(np.arange(o.size) * 1.3 + k)
        out.append(w.reshape(o.shape).astype(o.dtype))
    return out


def scalarized(c: JCase, fn: Callable | None = None) -> Callable:
    """``f`` reduced to a scalar: sum over float outputs of ``sum(out * weight)``. ``fn``:
    another function of the case's outputs' layout instead of ``c.fn`` (its ``vmap``: the
    weights broadcast over the mapped axis)."""
    ws = c.weights
    fn = c.fn if fn is None else fn

    def s(*a):
        total = 0.0
        for o, w in zip(tree_flatten(fn(*a))[0], ws):
            if w is not None:
                total = total + jnp.sum(o * w)
        return total
    s.__name__ = f"scalarized[{c.name}]"
    return s


def _cost(c: JCase) -> int:
    """Nodes of the optimized graph the case's program compiles (its gradient's, if any)."""
    from jitgraph.passes import optimize
    f = jitgraph.grad(scalarized(c), argnums=c.argnums) if c.jit_grad else c.fn
    return 2 + len(optimize(jitgraph.make_graph(f)(*c.args)).nodes)


def _prepare() -> list[list[JCase]]:
    """Key every case, and pack the distinct programs into batches (the same everywhere).

    A batch holds up to ``BUDGET`` graph nodes: Numba's cost is a fixed part per program and
    per kernel plus a part that grows faster than linearly with a kernel's size, so many
    small cases share a program and big ones get fewer companions."""
    reps: dict[str, JCase] = {}
    for c in ALL:
        c.key = _graph_key(c)
        reps.setdefault(c.key, c)
    batches: list[list[JCase]] = []
    for grad in (False, True):
        cur, used = [], 0
        for c in (c for c in reps.values() if c.jit_grad == grad):
            cost = _cost(c)
            if cur and (used + cost > BUDGET or len(cur) >= MAX_BATCH):
                batches.append(cur)
                cur, used = [], 0
            cur.append(c)
            used += cost
        if cur:
            batches.append(cur)
    return batches


def _batch_fn(cases: list[JCase]) -> Callable:
    grads = {c.name: jitgraph.grad(scalarized(c), argnums=c.argnums) for c in cases
             if c.jit_grad}

    def batch(argss):
        res = []
        for c, a in zip(cases, argss):
            res.append((c.fn(*a), grads[c.name](*a)) if c.jit_grad else c.fn(*a))
        return tuple(res)
    batch.__name__ = f"batch[{cases[0].name}..{cases[-1].name}]"
    return batch


def _grad_features(c: JCase) -> set:
    """What a gradient program exercises: (primitive, output rank, empty) and axis params."""
    from jitgraph.passes import optimize
    g = optimize(jitgraph.make_graph(jitgraph.grad(scalarized(c), argnums=c.argnums))(*c.args))
    out = set()
    for n in g.nodes:
        out.add((n.prim.name, n.out.aval.ndim, n.out.aval.size == 0))
        for k in ("axes", "axis", "perm", "keepdims"):
            if k in n.params:
                out.add((n.prim.name, k, repr(n.params[k])))
    return out


def greedy_cover(cases: list, features: Callable, covered: frozenset = frozenset()) -> list:
    """The cases, chosen greedily (most new features first, the first of ties), whose
    ``features(case)`` cover every case's, but those already ``covered``; a case whose
    features are None is never chosen."""
    feats = {c.name: features(c) for c in cases}
    rest = [c for c in cases if feats[c.name] is not None]
    chosen, covered = [], set(covered)
    while rest:
        best = max(rest, key=lambda c: len(feats[c.name] - covered))
        if not feats[best.name] - covered:
            break
        chosen.append(best)
        covered |= feats[best.name]
        rest.remove(best)
    return chosen


def _select_jit_grad(cases: list[JCase]) -> list[JCase]:
    """The cases whose gradient is compiled: every own case, then shared cases chosen greedily
    until every feature (``_grad_features``) of any gradient program is covered once. The full
    set costs about three times as much compile time; ``JITGRAPH_TEST_ALL_GRADS=1`` runs it."""
    if os.environ.get("JITGRAPH_TEST_ALL_GRADS"):
        return list(cases)
    feats = {c.name: _grad_features(c) for c in cases}
    chosen = [c for c in cases if c.name.startswith("own:")]
    covered = frozenset().union(*(feats[c.name] for c in chosen))
    chosen += greedy_cover([c for c in cases if not c.name.startswith("own:")],
                           lambda c: feats[c.name], covered)
    names = {c.name for c in chosen}
    return [c for c in cases if c.name in names]


for _c in GRAD:
    _c.weights = _weights(_c)
JIT_GRAD: list[JCase] = _select_jit_grad(GRAD)
for _c in JIT_GRAD:
    _c.jit_grad = True


# ------------------------------------------------------------------ running the batches
class Runner:
    """Compiles and runs the batches on demand; remembers each case's jit results."""

    def __init__(self):
        self.batches = _prepare()
        self.rep_of = {c.key: c for b in self.batches for c in b}
        self.where = {c.name: (i, j) for i, b in enumerate(self.batches) for j, c in enumerate(b)}
        self.fns: dict[int, Any] = {}
        self.outs: dict[int, Any] = {}       # batch -> tuple of outputs, or the exception
        self.compiled_by_helpers = 0
        self.alone_failures: dict[int, list] = {}

    def run_batch(self, i: int):
        if i not in self.outs:
            b = self.batches[i]
            jf = self.fns.setdefault(i, jitgraph.jit(_batch_fn(b)))
            try:
                self.outs[i] = jf([c.args for c in b])
            except Exception as e:            # reported by every case of the batch
                self.outs[i] = e
        return self.outs[i]

    def result(self, c: JCase):
        """(output, grads or None, batch names) of case ``c``, or raises the batch's error."""
        rep = self.rep_of[c.key]
        i, j = self.where[rep.name]
        out = self.run_batch(i)
        names = [x.name for x in self.batches[i]]
        if isinstance(out, Exception):
            return out, names
        if rep is not c:           # same program: swap this case's arguments in (a cache hit)
            argss = [x.args for x in self.batches[i]]
            argss[j] = c.args
            out = self.fns[i](argss)
        return out[j], names

    def warm_all(self, workers: int, timeout: float = 900.0) -> None:
        """Compile every batch: this process and ``workers`` helpers share them out by claiming
        batch numbers (O_EXCL files); helpers leave their programs in the disk cache."""
        claims = tempfile.mkdtemp(prefix="jitgraph-claims-")
        env = dict(os.environ)
        env.pop("JITGRAPH_LOG", None)
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        procs = []
        for _ in range(workers):
            try:
                procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--warm",
                                               claims], env=env, cwd=os.path.dirname(_HERE),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            except OSError:
                break
        mine = set()
        try:
            for i in range(len(self.batches)):
                if _claim(claims, i):
                    mine.add(i)
                    self.run_batch(i)
            deadline = time.monotonic() + timeout
            for p in procs:
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        finally:                              # never leave a helper behind
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            shutil.rmtree(claims, ignore_errors=True)
        self.compiled_by_helpers = len(self.batches) - len(mine)
        for i in range(len(self.batches)):
            self.run_batch(i)                 # helpers' batches load from the disk cache


def _claim(directory: str, i: int) -> bool:
    try:
        os.close(os.open(os.path.join(directory, f"{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _helper_main(claims: str) -> None:
    r = Runner()
    for i in range(len(r.batches)):
        if _claim(claims, i):
            r.run_batch(i)


def _default_workers() -> int:
    env = os.environ.get("JITGRAPH_TEST_JIT_WORKERS")
    if env is not None:
        return max(0, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(0, min(n - 1, 3))


@pytest.fixture(scope="module")
def runner(request):
    r = Runner()
    selected = sum(1 for it in request.session.items
                   if getattr(it, "module", None) is sys.modules[__name__])
    if selected > 100:        # the whole file: compile everything up front, in parallel
        t0 = time.perf_counter()
        r.warm_all(_default_workers())
        print(f"\n[test_jit_cases] {len(r.batches)} programs for {len(ALL)} cases in "
              f"{time.perf_counter() - t0:.1f}s ({r.compiled_by_helpers} compiled by helpers)")
    return r


# ------------------------------------------------------------------ comparing
def _leaves(x) -> list[np.ndarray]:
    return [np.asarray(v) for v in tree_flatten(x)[0]]


def assert_same(got, want, what: str, tol: dict, rtol=None, atol=None) -> None:
    g_leaves, w_leaves = _leaves(got), _leaves(want)
    assert tree_flatten(got)[1] == tree_flatten(want)[1], \
        f"{what}: output structure {tree_flatten(got)[1]} != {tree_flatten(want)[1]}"
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        assert g.dtype == w.dtype, f"{what}: leaf {k}: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{what}: leaf {k}: shape {g.shape}, expected {w.shape}"
        if g.dtype.kind in "fc":
            r, a = tol[g.real.dtype]
            r = max(r, rtol or 0.0)
            a = max(a, atol or 0.0)
            finite = np.abs(w[np.isfinite(w)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            np.testing.assert_allclose(g, w, rtol=r, atol=a * scale, equal_nan=True,
                                       err_msg=f"{what}: leaf {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: leaf {k}")


def reference_of(f: Callable, args) -> Any:
    """``f(*args)`` by the reference interpreter on its graph."""
    g = jitgraph.make_graph(f)(*args)
    outs = jitgraph.interpret(g, tree_flatten(tuple(args))[0])
    return g.out_tree.unflatten(outs) if g.out_tree is not None else outs


def reference(c: JCase):
    return reference_of(c.fn, c.args)


def _alone(c: JCase, grad: bool):
    fn = jitgraph.grad(scalarized(c), argnums=c.argnums) if grad else c.fn
    return jitgraph.jit(fn)(*c.args)


def _want(c: JCase, grad: bool):
    return jitgraph.grad(scalarized(c), argnums=c.argnums)(*c.args) if grad else reference(c)


def _check_alone(c: JCase, grad: bool, what: str) -> None:
    tol = GRAD_TOL if grad else FWD_TOL
    assert_same(_alone(c, grad), _want(c, grad), what + " compiled alone", tol, c.rtol, c.atol)


def _others_fail_alone(runner: Runner, c: JCase) -> list[str]:
    """Names of the other cases of c's batch that fail when compiled alone (cached)."""
    i, _ = runner.where[runner.rep_of[c.key].name]
    if i not in runner.alone_failures:
        bad = []
        for x in runner.batches[i]:
            for grad in ((False, True) if x.jit_grad else (False,)):
                try:
                    _check_alone(x, grad, x.name)
                except Exception:
                    bad.append(x.name + (" (grad)" if grad else ""))
        runner.alone_failures[i] = bad
    return [n for n in runner.alone_failures[i] if not n.startswith(c.name)]


def _check(c: JCase, runner: Runner, grad: bool) -> None:
    what = f"{c.name}: jit(grad(f))" if grad else f"{c.name}: jit(f)"
    tol = GRAD_TOL if grad else FWD_TOL
    res, batch = runner.result(c)
    context = f" (in a batch program with {len(batch)} cases: {batch})"
    if isinstance(res, Exception):
        # The batch did not compile or run. Blame the cases that also fail alone.
        try:
            _check_alone(c, grad, what)
        except Exception as e:
            raise AssertionError(f"{what}: {type(e).__name__}: {e}\n(its batch raised "
                                 f"{type(res).__name__}: {res})") from e
        culprits = _others_fail_alone(runner, c)
        if culprits:
            return        # this case is fine; the culprits' own tests fail
        raise AssertionError(f"{what}: the batch raised {type(res).__name__}: {res}{context}\n"
                             "but every case compiled alone passes: a bug that needs several "
                             "cases in one program") from res
    got = res[1] if grad else (res[0] if c.jit_grad else res)
    try:
        assert_same(got, _want(c, grad), what, tol, c.rtol, c.atol)
    except AssertionError as batch_error:
        try:
            _check_alone(c, grad, what)
        except Exception as e:
            raise AssertionError(f"{batch_error}{context}\nalso compiled alone: "
                                 f"{type(e).__name__}: {e}") from None
        raise AssertionError(f"{batch_error}{context}\nbut compiled alone it passes: a bug that "
                             "depends on the other cases in the program") from None


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_jit_matches_reference(case, runner):
    _check(case, runner, grad=False)


@pytest.mark.parametrize("case", JIT_GRAD, ids=lambda c: c.name)
def test_jit_grad_matches_grad(case, runner):
    """jit(grad(f)) == grad(f) (compiled in the case's batch program)."""
    _check(case, runner, grad=True)


@pytest.mark.parametrize("case", GRAD, ids=lambda c: c.name)
def test_grad_of_jit_matches_grad(case):
    """grad(jit(f)) == grad(f): jit traces through when its arguments are tracers."""
    s = scalarized(case)
    want = jitgraph.grad(s, argnums=case.argnums)(*case.args)
    got = jitgraph.grad(jitgraph.jit(s), argnums=case.argnums)(*case.args)
    assert_same(got, want, f"{case.name}: grad(jit(f))", GRAD_TOL, case.rtol, case.atol)


def test_case_list_is_large_and_distinct():
    assert len(OWN) >= 80
    if _SHARED_CASES:
        assert len(ALL) == len(OWN) + len(_SHARED_CASES)
    keys = {c.key for c in ALL if c.key}
    assert len(keys) > len(ALL) // 2      # the dedup only merges true aliases


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--warm":
        _helper_main(sys.argv[2])
    else:
        sys.exit("usage: test_jit_cases.py --warm CLAIM_DIR  (a helper of the test module)")
