"""Control flow in compiled programs: a ``cond``/``scan``/``while`` node is a step of its
program that runs a loop (or a branch) around its sub-graphs, each compiled once like any
program (fused kernels shared by structure through the kernel cache), whatever the trip
count. A body made of loop kernels only gets a compiled driver and a compiled loop around it
(no Python per step); other bodies are called from a Python loop. These loops are the
compiler's lowerings of the control-flow primitives, registered in ``host.HOST_LOWERINGS``.
"""
from __future__ import annotations

import contextlib
import hashlib
import time
from typing import Callable, Sequence

import numpy as np

from ..core import Graph
from ..control_flow import cond_p, scan_p, while_p
from . import pipeline
from .backends.base import CompileOptions, CpuOptions
from .backends.cpu import HEADER
from .fusion import HostStep, MatmulStep
from .host import HOST_LOWERINGS, one_blas_thread
from .settings import disk_cache, fingerprint
from .thresholds import COMPILED_LOOP_MIN_LENGTH, LOOP_BODY_MAX_STEPS, SMALL_PRODUCT


class _ListTree:
    """The output structure of a sub-program: a plain list."""
    unflatten = staticmethod(list)


def compile_sub(g: Graph, donate: Sequence[int] = ()) -> Callable:
    """A closed sub-graph compiled like any program (its kernels shared by structure through
    the kernel cache): the call path taking and returning flat arrays. ``donate``: inputs
    whose buffers the program may update in place."""
    prog = pipeline.compile(g, "cpu", CompileOptions(donate=tuple(donate),
                                                     target=CpuOptions(allow_native=True)))
    return prog.make_runner([v.aval.dtype for v in g.inputs], _ListTree)


# A loop body's matrix products are small and come one after another: OpenBLAS's threads
# then cost more than they bring (measured here, 2 cores shared with other processes: a
# 32x256x256 float32 product took 1-7 ms with 2 threads, 0.2 ms with one; the RNN benchmark's
# 100-step forward+backward went from 1 s to 80 ms). Loops whose products are all below this
# many multiply-adds (SMALL_PRODUCT) run with one BLAS thread (through threadpoolctl).


def _blas_limit(graphs: Sequence[Graph]):
    """A context manager giving the loop one BLAS thread, or None to leave BLAS as it is."""
    sizes = [int(np.prod(n.inputs[0].aval.shape)) * n.out.aval.shape[-1]
             for g in graphs for n in g.nodes if n.prim.kind == "matmul"]
    if not sizes or max(sizes) >= SMALL_PRODUCT:
        return None
    return one_blas_thread


def _limited(graphs: Sequence[Graph]):
    limit = _blas_limit(graphs)
    return limit if limit is not None else contextlib.nullcontext


def _result(res: list):
    return res[0] if len(res) == 1 else tuple(res)


def cond_program(node) -> Callable:
    """Each branch is compiled the first time it is taken."""
    branches = node.params["_branches"]
    runners: list = [None] * len(branches)
    last = len(branches) - 1

    def run(index, *ops):
        i = int(index)
        i = 0 if i < 0 else last if i > last else i
        r = runners[i]
        if r is None:
            r = runners[i] = compile_sub(branches[i])
        return _result(r(*ops))
    return run


# A scan body of at most LOOP_BODY_MAX_STEPS loop kernels (and no matrix product) gets a compiled driver
# and a compiled loop around it: no Python per step (measured here: 0.5 us per step of a small
# body instead of 12 us). Bodies with products or more kernels are called from a Python loop:
# their work hides its microseconds per step, and linking BLAS calls into one compiled loop
# tripled the RNN benchmark's compile time.
# Scans shorter than COMPILED_LOOP_MIN_LENGTH keep the Python loop: compiling the loop costs
# more than it would save them.


def _compiled_body(g: Graph):
    """The body compiled with a driver a compiled loop can call, or None when its program
    needs Python (a host step) or is too big."""
    t0 = time.perf_counter()
    options = CompileOptions(target=CpuOptions(compiled_driver=True))
    cpu = pipeline.target_of("cpu")
    gen = pipeline.generate_graph(g, cpu, options)
    steps = gen.plan.steps
    if len(steps) > LOOP_BODY_MAX_STEPS or \
            any(isinstance(s, (HostStep, MatmulStep)) for s in steps):
        return None
    return pipeline.load(gen, cpu, options, t0)


def _loop_module(source: str, *callees):
    """Name the loop by its source's hash, load it through the disk cache and give it the
    drivers it calls (as ``cpu_program.load`` gives drivers their kernels)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:12]
    module, _ = disk_cache().load_module(
        HEADER + "\n\n" + source.replace("{H}", h) + "\n", key_extra=fingerprint())
    for callee in callees:
        setattr(module, callee.__name__, callee)
    return getattr(module, source.split("def ", 1)[1].split("_{H}", 1)[0] + "_" + h)


def _results(prog, args: list[str], consts: list[str], outs: list[str]) -> list[str]:
    """Where each output of a compiled sub-program is after its driver ran: an output buffer,
    one of its arguments passed through, or a constant."""
    return [outs[j] if kind == "out" else args[j] if kind == "input" else consts[j]
            for kind, j in prog.sources]


def _carry_updates(carries: list[str], new: list[str], pad: str) -> list[str]:
    """Copy the new carry values in; values that are themselves carries (passed through,
    perhaps swapped) are copied out first."""
    tmp = {v: f"t{i}" for i, v in enumerate(new) if v in carries and v != carries[i]}
    lines = [pad + f"{t} = {v}.copy()" for v, t in tmp.items()]
    return lines + [pad + f"{a}[:] = {tmp.get(v, v)}" for a, v in zip(carries, new) if a != v]


def _scan_loop_source(prog, nc: int, nk: int, nx: int, ny: int, reverse: bool) -> str:
    """``scanloop(n, consts, init, xs, ys, final, body consts, outs, scratch)``: all arrays
    flat (xs and ys ``(n, size)``); the trip count is an argument, so one compiled loop
    serves every length."""
    names = lambda p, k: [f"{p}{i}" for i in range(k)]  # noqa: E731
    c, k, x, y, f = names("c", nc), names("k", nk), names("x", nx), names("y", ny), names("f", nk)
    b, o = names("b", len(prog.const_values)), names("o", len(prog.out_specs))
    s = names("s", len(prog.scratch_specs))
    a = names("a", nk)
    args = c + a + [f"{v}[t]" for v in x]
    res = _results(prog, args, b, o)
    lines = ["@njit(cache=True, nogil=True)",
             f"def scanloop_{{H}}(n, {', '.join(c + k + x + y + f + b + o + s)}):"]
    lines += [f"    a{i} = k{i}.copy()" for i in range(nk)]
    lines += ["    for i in range(n):", "        t = n - 1 - i" if reverse else "        t = i",
              f"        {prog.driver.__name__}({', '.join(args + b + o + s)})"]
    lines += [f"        y{j}[t, :] = {res[nk + j]}" for j in range(ny)]
    lines += _carry_updates(a, res[:nk], "        ")
    lines += [f"    f{i}[:] = a{i}" for i in range(nk)]
    lines.append("    return None")
    return "\n".join(lines)


def _scan_compiled_loop(node):
    """A scan whose loop is compiled too, or None (see ``_compiled_body``)."""
    p = node.params
    nc, nk, length, g = p["num_consts"], p["num_carry"], p["length"], p["_body"]
    prog = _compiled_body(g) if length >= COMPILED_LOOP_MIN_LENGTH else None
    if prog is None:
        return None
    nx, ny = len(g.inputs) - nc - nk, len(g.outputs) - nk
    loop = _loop_module(_scan_loop_source(prog, nc, nk, nx, ny, p["reverse"]), prog.driver)
    dts = [v.aval.dtype for v in g.inputs]
    sizes = [v.aval.size for v in g.inputs]
    carry_shapes = [v.aval.shape for v in g.inputs[nc:nc + nk]]
    y_specs = [((length,) + o.aval.shape, o.aval.dtype) for o in g.outputs[nk:]]
    consts = prog.const_values
    limit = _limited([g])

    def run(*args):
        flat = [np.ascontiguousarray(a, d).reshape(n) if i < nc + nk else
                np.ascontiguousarray(a, d).reshape(length, n)
                for i, (a, d, n) in enumerate(zip(args, dts, sizes))]
        ys = [np.empty(sh, d) for sh, d in y_specs]
        final = [np.empty(sizes[nc + i], dts[nc + i]) for i in range(nk)]
        with limit():
            loop(length, *flat, *[y.reshape(length, int(np.prod(y.shape[1:]))) for y in ys],
                 *final, *consts, *_buffers(prog))
        return _result([f.reshape(sh) for f, sh in zip(final, carry_shapes)] + ys)
    return run


def scan_program(node) -> Callable:
    """The loop a compiled program runs for a scan: the body compiled once, called once per
    step on the carry and a slice of each xs (views, no copies), each y written in place."""
    fast = _scan_compiled_loop(node)
    if fast is not None:
        return fast
    p = node.params
    nc, nk, length, reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    g = p["_body"]
    owned = _owned_carries(g, nc, nk)
    body = compile_sub(g, [nc + k for k in owned])
    y_specs = [((length,) + o.aval.shape, o.aval.dtype) for o in g.outputs[nk:]]
    order = range(length - 1, -1, -1) if reverse else range(length)
    limit = _limited([g])

    def run(*args):
        consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
        if length:
            for k in owned:             # the caller's buffers are never updated in place
                carry[k] = carry[k].copy()
        ys = [np.empty(s, d) for s, d in y_specs]
        with limit():
            for t in order:
                outs = body(*consts, *carry, *[x[t] for x in xs])
                carry = outs[:nk]
                for y, o in zip(ys, outs[nk:]):
                    y[t] = o
        return _result(list(carry) + ys)
    return run


def _owned_carries(body: Graph, n_before: int, nk: int) -> list[int]:
    """The carries a loop may let its body update in place (donate): after the first step
    (which gets copies) each is a buffer the loop owns, unless the body passes a const or an
    xs slice through as that carry."""
    carries = set(body.inputs[n_before:n_before + nk])
    outside = set(body.inputs) - carries
    return [k for k in range(nk) if body.outputs[k] not in outside]


def _buffers(prog) -> list:
    """Fresh output and scratch buffers for one call of a compiled sub-program's driver."""
    return [np.empty(n, d) for n, d in list(prog.out_specs) + list(prog.scratch_specs)]


def _while_compiled_loop(node):
    """A while loop whose condition and body have compiled drivers, run by a compiled loop;
    None when either does not qualify (``_compiled_body``)."""
    p = node.params
    n_cc, n_bc, cg, bg = p["n_cc"], p["n_bc"], p["_cond"], p["_body"]
    nk = len(bg.outputs)
    cp = _compiled_body(cg)
    bp = _compiled_body(bg) if cp is not None else None
    if bp is None:
        return None
    names = lambda q, k: [f"{q}{i}" for i in range(k)]  # noqa: E731
    cc, bc, k, f = names("cc", n_cc), names("bc", n_bc), names("k", nk), names("f", nk)
    cb, co = names("cb", len(cp.const_values)), names("co", len(cp.out_specs))
    bb, bo = names("bb", len(bp.const_values)), names("bo", len(bp.out_specs))
    cs, bs = names("cs", len(cp.scratch_specs)), names("bs", len(bp.scratch_specs))
    a = names("a", nk)
    pred = _results(cp, cc + a, cb, co)[0]
    lines = ["@njit(cache=True, nogil=True)",
             f"def whileloop_{{H}}({', '.join(cc + bc + k + f + cb + co + cs + bb + bo + bs)}):"]
    lines += [f"    a{i} = k{i}.copy()" for i in range(nk)]
    lines += ["    while True:",
              f"        {cp.driver.__name__}({', '.join(cc + a + cb + co + cs)})",
              f"        if not {pred}[0]:", "            break",
              f"        {bp.driver.__name__}({', '.join(bc + a + bb + bo + bs)})"]
    lines += _carry_updates(a, _results(bp, bc + a, bb, bo), "        ")
    lines += [f"    f{i}[:] = a{i}" for i in range(nk)] + ["    return None"]
    loop = _loop_module("\n".join(lines), cp.driver, bp.driver)
    dts = [v.aval.dtype for v in cg.inputs[:n_cc]] + [v.aval.dtype for v in bg.inputs]
    sizes = [v.aval.size for v in cg.inputs[:n_cc]] + [v.aval.size for v in bg.inputs]
    shapes = [v.aval.shape for v in bg.inputs[n_bc:]]
    limit = _limited([cg, bg])

    def run(*args):
        flat = [np.ascontiguousarray(x, d).reshape(n) for x, d, n in zip(args, dts, sizes)]
        final = [np.empty(n, d) for n, d in zip(sizes[n_cc + n_bc:], dts[n_cc + n_bc:])]
        with limit():
            loop(*flat, *final, *cp.const_values, *_buffers(cp), *bp.const_values,
                 *_buffers(bp))
        return _result([x.reshape(sh) for x, sh in zip(final, shapes)])
    return run


def while_program(node) -> Callable:
    fast = _while_compiled_loop(node)
    if fast is not None:
        return fast
    p = node.params
    n_cc, n_bc = p["n_cc"], p["n_bc"]
    nk = len(p["_body"].outputs)
    owned = _owned_carries(p["_body"], n_bc, nk)
    cond, body = compile_sub(p["_cond"]), compile_sub(p["_body"], [n_bc + k for k in owned])
    limit = _limited([p["_cond"], p["_body"]])

    def run(*args):
        cc, bc, carry = list(args[:n_cc]), list(args[n_cc:n_cc + n_bc]), list(args[n_cc + n_bc:])
        for k in owned:
            carry[k] = carry[k].copy()
        with limit():
            while cond(*cc, *carry)[0]:
                carry = body(*bc, *carry)
        return _result(carry)
    return run


# The compiler's lowering of each control-flow primitive to a host step: a loop around the
# node's compiled sub-programs (the primitive's own ``impl`` interprets them instead).
HOST_LOWERINGS.update({cond_p: cond_program, scan_p: scan_program, while_p: while_program})
