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
from .fusion import LoopKernel, LoopThenProduct, MatmulStep, Plan, ProductThenLoop, kernel_ops
from .syntax import NARROW_FUNCTIONS, Syntax
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


#: the conversions' import, added to a generated module that calls them (and only then: the
#: source of every other program stays as it was)
NARROW_IMPORT = "from jitgraph.kernels.{module} import " + ", ".join(NARROW_FUNCTIONS) + "\n"
_NARROW_CALL = re.compile(r"\b(?:" + "|".join(NARROW_FUNCTIONS) + r")\(")


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


def init_value(syntax: Syntax, monoid: str, dtype) -> str:
    """The identity of a reduction's monoid, as a literal of the accumulator's dtype."""
    dtype = np.dtype(dtype)
    if monoid == "sum":
        return syntax.literal(0, dtype)
    if monoid == "prod":
        return syntax.literal(1, dtype)
    if dtype.kind == "b":
        return syntax.literal(monoid not in ("max", "argmax"), dtype)
    if dtype.kind == "f":
        return syntax.literal(-np.inf if monoid in ("max", "argmax") else np.inf, dtype)
    info = np.iinfo(dtype)
    return syntax.literal(info.min if monoid in ("max", "argmax") else info.max, dtype)


def acc_init_lines(syntax: Syntax, reductions, pad: str) -> list[str]:
    """Start values of a stage's accumulators (an arg-reduction keeps its value in
    ``<acc>_v`` and its index in ``<acc>``, -1 until the first element)."""
    out = []
    for (n, acc, _, monoid) in reductions:
        init = init_value(syntax, monoid, n.inputs[0].aval.dtype)
        if monoid.startswith("arg"):
            out += [pad + syntax.assign(f"{acc}_v", init),
                    pad + syntax.assign(acc, syntax.literal(-1, np.int64))]
        else:
            out.append(pad + syntax.assign(acc, init))
    return out


def arg_update_lines(syntax: Syntax, acc: str, val: str, monoid: str, index: str,
                     pad: str) -> list[str]:
    """One element of an argmax/argmin: the first extreme wins ties, and a NaN wins."""
    s, best = syntax, f"{acc}_v"
    first = s.bare("less", acc, s.number(0))
    better = s.bare("greater" if monoid == "argmax" else "less", val, best)
    nan = s.op("and", s.bare("not_equal", val, val), s.bare("equal", best, best))
    return [pad + s.if_(s.bare("or", s.bare("or", first, better), nan)),
            pad + s.indent(s.assign(best, val)),
            pad + s.indent(s.assign(acc, index))]


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


def outer_offset(syntax: Syntax, v: Var, k: LoopKernel, body=None) -> str:
    """The flat index of ``v`` (a value of the kernel's kept dims) at the current outer index
    (``body``: one copy of the kernel's body, else ``k.body``)."""
    body = k.body if body is None else body
    it = iter([o for o, d in zip(body.o_vars, k.outer_shape) if d != 1])
    idx = [next(it) if d != 1 else "0" for d in v.aval.shape]
    return syntax.offset(idx, v.aval.shape)


def result_store(syntax: Syntax, plan: Plan, v: Var, k: LoopKernel, value: str) -> str:
    """The store of ``v``, a value of the kernel's kept dims (a reduction's result), at the
    current outer index."""
    return syntax.store(plan.array_name(v), outer_offset(syntax, v, k), value)


def store_lines(syntax: Syntax, plan: Plan, st, k: LoopKernel, pad: str,
                body=None) -> list[str]:
    """A stage's stores of the values other steps read (full-index or per outer index);
    ``body``: the copy of the kernel's body ``st`` is a stage of, else ``k.body``."""
    body = k.body if body is None else body
    out = []
    for (v, val, where) in st.stores:
        if v not in plan.needed:
            continue
        off = syntax.offset(body.full_idx, v.aval.shape) if where != "outer" else \
            outer_offset(syntax, v, k, body)
        out.append(pad + syntax.store(plan.array_name(v), off, val))
    return out


def reads(s) -> list:
    """Arrays a step reads, in a fixed order (generated source must not depend on set order,
    or the same program would miss the disk cache in the next process)."""
    if isinstance(s, LoopThenProduct):
        return sorted(set(reads(s.loop)) | set(reads(s.product)), key=lambda v: v.id)
    if isinstance(s, ProductThenLoop):        # (the product's output stays inside the step)
        return sorted((set(reads(s.loop)) | set(reads(s.product))) - {s.product.out},
                      key=lambda v: v.id)
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
    if isinstance(s, LoopThenProduct):
        return list(dict.fromkeys(writes(s.loop) + writes(s.product)))
    if isinstance(s, ProductThenLoop):
        return writes(s.loop)
    if isinstance(s, LoopKernel):
        out = [v for st in s.body.stages for (v, _, _) in st.stores]
        out += [r[0].out for st in s.body.stages for r in st.reductions]
        return list(dict.fromkeys(out))
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
