"""Readable listings of graphs: a jaxpr-like text form and Graphviz dot."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:       # (only for the annotations: core imports this module to print graphs)
    from .core import Graph, Var


def _namer():
    names: dict[int, str] = {}
    letters = "abcdefghijklmnopqrstuvwxyz"

    def name(v: Var) -> str:
        n = names.get(v.id)
        if n is None:
            i = len(names)
            n = ""
            while True:
                n = letters[i % 26] + n
                i = i // 26 - 1
                if i < 0:
                    break
            names[v.id] = n
        return n
    return name


def _fmt_param(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if callable(v):
        return getattr(v, "__name__", "fn")
    return repr(v)


def graph_to_text(g: Graph) -> str:
    name = _namer()
    def ref(v: Var) -> str:
        c = g.consts.get(v)
        if c is not None and c.ndim == 0:
            return repr(c.item())
        return name(v)

    ins = " ".join(f"{name(v)}:{v.aval}" for v in g.inputs)
    consts = " ".join(f"{name(v)}:{v.aval}" for v, c in g.consts.items() if c.ndim > 0)
    lines = [f"{{ lambda {consts} ; {ins}. let"]
    for n in g.nodes:
        outs = " ".join(f"{name(o)}:{o.aval}" for o in n.outs)
        params = ""
        shown = {k: v for k, v in n.params.items() if not k.startswith("_")}
        if shown:
            params = "[" + ", ".join(f"{k}={_fmt_param(v)}" for k, v in shown.items()) + "]"
        args = " ".join(ref(i) for i in n.inputs)
        lines.append(f"    {outs} = {n.prim.name}{params} {args}")
    lines.append(f"  in ({', '.join(ref(o) for o in g.outputs)},) }}")
    return "\n".join(lines)


def graph_to_dot(g: Graph) -> str:
    name = _namer()
    out = ["digraph jitgraph {", "  rankdir=TB;", '  node [fontname="monospace"];']
    for v in g.inputs:
        out.append(f'  {name(v)} [shape=ellipse, label="{name(v)}: {v.aval}"];')
    for v, c in g.consts.items():
        label = repr(c.item()) if c.ndim == 0 else f"const {v.aval}"
        out.append(f'  {name(v)} [shape=note, label="{label}"];')
    for i, n in enumerate(g.nodes):
        nid = f"op{i}"
        out.append(f'  {nid} [shape=box, label="{n.prim.name}"];')
        for inp in n.inputs:
            out.append(f"  {name(inp)} -> {nid};")
        for o in n.outs:
            out.append(f'  {name(o)} [shape=plaintext, label="{name(o)}: {o.aval}"];')
            out.append(f"  {nid} -> {name(o)};")
    for k, o in enumerate(g.outputs):
        out.append(f'  out{k} [shape=doublecircle, label="out{k}"];')
        out.append(f"  {name(o)} -> out{k};")
    out.append("}")
    return "\n".join(out)
