"""Statements both backends' kernels share: accumulator start values and updates, the
parameters of a loop kernel, the stores of a stage, and what each step reads and writes.

Only the loop structure around these statements differs between backends (a loop nest on
the CPU, a grid of threads on the GPU); everything written here is the same text for both.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core import Graph, Var
from ..dtypes import is_narrow
from .emit import literal, offset
from .fusion import LoopKernel, MatmulStep, Plan, kernel_ops
from .thresholds import COLUMN_ORDER_MIN_OUTER


@dataclass
class KernelSource:
    """One generated kernel: its function name, its source and the graph nodes it computes
    (``params``: its parameter names in the generated program)."""
    name: str
    source: str
    ops: list
    params: tuple = ()
    arg_types: tuple = ()   # per parameter: a dtype name (a flat C array of it) or "size"

    def __repr__(self) -> str:
        return f"<kernel {self.name}: {len(self.ops)} ops>"


def numba_cast(expr: str, dtype) -> str:
    """``expr`` converted to ``dtype`` in Numba code (CPU and CUDA kernels alike)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return f"bool({expr})"
    return f"np.{dtype.name}({expr})"


def numba_convert(expr: str, src, dst) -> str:
    """``expr`` (of dtype ``src``) converted to ``dst``: a cast, or for the 16-bit floats,
    which kernels hold as their bits, a call of ``kernels/narrow.py``'s conversions (through
    float32; float64 and integers round to odd first, so the result is rounded once)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if not is_narrow(src) and not is_narrow(dst):
        return numba_cast(expr, dst)
    if src == dst:
        return expr
    if is_narrow(src):
        expr = f"{_FROM_BITS[src.name]}({expr})"
        return expr if dst == np.float32 else numba_convert(expr, np.float32, dst)
    if src != np.float32:
        wide = expr if src == np.float64 else numba_cast(expr, np.float64)
        expr = f"odd_f32({wide})" if src.kind != "b" else numba_cast(expr, np.float32)
    return f"{_TO_BITS[dst.name]}({expr})"


_FROM_BITS = {"float16": "from_f16", "bfloat16": "from_bf16"}
_TO_BITS = {"float16": "to_f16", "bfloat16": "to_bf16"}
#: the conversions' import, added to a generated module that calls them (and only then: the
#: source of every other program stays as it was)
NARROW_IMPORT = "from jitgraph.kernels.{module} import from_bf16, to_bf16, from_f16, to_f16, odd_f32\n"
_NARROW_CALL = re.compile(r"\b(?:from_bf16|to_bf16|from_f16|to_f16|odd_f32)\(")


def import_lines(module: str, names: Sequence[str], width: int = 99) -> str:
    """``from module import (a, b, ...)`` with ``names`` in order, wrapped before ``width``
    characters with continuation lines indented by four: a generated header's import of
    routines that the primitives' records name."""
    lines, line = [], f"from {module} import ("
    for i, name in enumerate(names):
        item = name + ("," if i < len(names) - 1 else ")")
        if line.endswith("("):
            line += item
        elif len(line) + 1 + len(item) > width:
            lines.append(line)
            line = "    " + item
        else:
            line += " " + item
    return "\n".join(lines + [line]) + "\n"


def with_narrow_import(header: str, source: str, module: str) -> str:
    """``header``, followed by the 16-bit float conversions' import if ``source`` calls them."""
    if _NARROW_CALL.search(source):
        return header + NARROW_IMPORT.format(module=module)
    return header


def step_ops(step) -> list:
    """The graph nodes a step computes (what ``lower().kernels`` lists per kernel)."""
    return kernel_ops(step)


def init_value(monoid: str, dtype) -> str:
    """The identity of a reduction's monoid, as a literal of the accumulator's dtype."""
    dtype = np.dtype(dtype)
    if monoid == "sum":
        return literal(0, dtype)
    if monoid == "prod":
        return literal(1, dtype)
    if dtype.kind == "b":
        return "False" if monoid in ("max", "argmax") else "True"
    if dtype.kind == "f":
        return literal(-np.inf if monoid in ("max", "argmax") else np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if monoid in ("max", "argmax") else info.max, dtype)


def acc_init_lines(reductions, pad: str) -> list[str]:
    """Start values of a stage's accumulators (an arg-reduction keeps its value in
    ``<acc>_v`` and its index in ``<acc>``, -1 until the first element)."""
    out = []
    for (n, acc, _, monoid) in reductions:
        init = init_value(monoid, n.inputs[0].aval.dtype)
        if monoid.startswith("arg"):
            out += [pad + f"{acc}_v = {init}", pad + f"{acc} = np.int64(-1)"]
        else:
            out.append(pad + f"{acc} = {init}")
    return out


def arg_update_lines(acc: str, val: str, monoid: str, index: str, pad: str) -> list[str]:
    """One element of an argmax/argmin: the first extreme wins ties, and a NaN wins."""
    cmp = ">" if monoid == "argmax" else "<"
    return [pad + f"if {acc} < 0 or {val} {cmp} {acc}_v or ({val} != {val} and {acc}_v == {acc}_v):",
            pad + f"    {acc}_v = {val}",
            pad + f"    {acc} = {index}"]


def has_arg_reduction(k: LoopKernel) -> bool:
    return any(r[3].startswith("arg") for s in k.body.stages for r in s.reductions)


def kernel_params(plan: Plan, k: LoopKernel) -> list[str]:
    """A loop kernel's array parameters: what it loads, then what it stores (a value a later
    stage reads back is both loaded and stored: one parameter)."""
    body = k.body
    loads = sorted(body.loads, key=lambda v: plan.array_name(v))
    stores = [v for s in body.stages for (v, _, _) in s.stores if v in plan.needed]
    stores += [r[0].out for s in body.stages for r in s.reductions if r[0].out in plan.needed]
    return list(dict.fromkeys([plan.array_name(v) for v in loads] +
                              [plan.array_name(v) for v in stores]))


def column_order(k: LoopKernel, parallel: bool, has_arg: bool) -> bool:
    """Reductions over leading axes (a bias gradient: sum over the batch) read memory with a
    stride when the reduced loop is innermost. Looping reduced dims outside and kept dims
    inside, with one accumulator per kept element, reads it contiguously and vectorizes."""
    st = k.body.stages
    return (bool(k.axes) and not parallel and not has_arg
            and max(k.axes) < min(i for i in range(len(k.shape)) if i not in k.axes)
            if len(k.axes) < len(k.shape) else False) and \
        int(np.prod(k.outer_shape, dtype=np.int64)) >= COLUMN_ORDER_MIN_OUTER and \
        st[0].kind == "loop" and len(st) <= 2 and (len(st) == 1 or st[1].kind == "scalar")


def outer_offset(v: Var, k: LoopKernel) -> str:
    """The flat index of ``v`` (a value of the kernel's kept dims) at the current outer index."""
    it = iter([o for o, d in zip(k.body.o_vars, k.outer_shape) if d != 1])
    idx = [next(it) if d != 1 else "0" for d in v.aval.shape]
    return offset(idx, v.aval.shape)


def store_lines(plan: Plan, st, k: LoopKernel, pad: str) -> list[str]:
    """A stage's stores of the values other steps read (full-index or per outer index)."""
    out = []
    for (v, val, where) in st.stores:
        if v not in plan.needed:
            continue
        off = offset(k.body.full_idx, v.aval.shape) if where == "full" else outer_offset(v, k)
        out.append(pad + f"{plan.array_name(v)}[{off}] = {val}")
    return out


def reads(s) -> list:
    """Arrays a step reads, in a fixed order (generated source must not depend on set order,
    or the same program would miss the disk cache in the next process)."""
    if isinstance(s, LoopKernel):
        vs = s.body.loads
    elif isinstance(s, MatmulStep):
        ep = s.epilogue
        vs = [s.a[0], s.b[0]] + ([ep.c] if ep is not None and ep.c is not None else [])
    else:
        vs = s.node.inputs
    return sorted(set(vs), key=lambda v: v.id)


def writes(s) -> list:
    """Arrays a step writes."""
    if isinstance(s, LoopKernel):
        out = [v for st in s.body.stages for (v, _, _) in st.stores]
        out += [r[0].out for st in s.body.stages for r in st.reductions]
        return out
    if isinstance(s, MatmulStep):
        return [s.out]
    return list(s.node.outs)


def graph_fingerprint(g: Graph) -> str:
    """A hash of a graph's structure (primitives, parameters, wiring, avals, constants) that is
    the same in every process: it names a control-flow node's bodies in generated source, so
    programs with different bodies never share a cache entry."""
    h = hashlib.sha256()
    index = {v: i for i, v in enumerate(g.inputs)}
    for v, c in g.consts.items():
        index[v] = len(index)
        h.update(f"c{v.aval}{c.shape}".encode())
        h.update(np.ascontiguousarray(c).tobytes())
    h.update(repr([v.aval for v in g.inputs]).encode())
    for n in g.nodes:
        ps = []
        for k in sorted(n.params):
            p = n.params[k]
            if isinstance(p, Graph):
                p = graph_fingerprint(p)
            elif isinstance(p, tuple) and p and isinstance(p[0], Graph):
                p = tuple(graph_fingerprint(x) for x in p)
            ps.append((k, repr(p)))
        h.update(repr((n.prim.name, ps, [index.get(v, -1) for v in n.inputs],
                       [o.aval for o in n.outs])).encode())
        for o in n.outs:
            index[o] = len(index)
    h.update(repr([index.get(v, -1) for v in g.outputs]).encode())
    return h.hexdigest()[:16]


def subgraph_comment(node) -> list[str]:
    """A comment naming the sub-graphs a node holds by their structure, for generated
    source: the disk cache keys on source, and two scans with the same shapes but different
    bodies must never share a program."""
    graphs = []
    for k in sorted(node.params):
        p = node.params[k]
        graphs += [p] if isinstance(p, Graph) else \
            [x for x in p if isinstance(x, Graph)] if isinstance(p, tuple) else []
    if not graphs:
        return []
    return [f"# {node.prim.name} of sub-graphs {', '.join(graph_fingerprint(g) for g in graphs)}"]
