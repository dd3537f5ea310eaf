"""Graph-to-graph passes: constant folding, algebraic simplification, CSE and DCE.

They run on every graph a transform builds, so backward graphs carry no junk (x*1, x+0,
double negation, transpose of transpose, reshape of reshape, broadcast then sum, ...).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from . import dtypes
from .compile_phases import timed
from .core import PRIMITIVES, Aval, Graph, Node, Var, params_key, run_impl
from .rewrite import Rebuilder, dce, uniform_value

__all__ = ["FOLD_MAX_ELEMENTS", "dce", "optimize", "simplify", "simplify_node", "uniform_value"]

FOLD_MAX_ELEMENTS = 4096  # constant folding never creates constants bigger than this


def _freeze(x: Any) -> Any:
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, np.ndarray):
        return ("nd", x.shape, x.dtype.str, x.tobytes())
    try:
        hash(x)
        return x
    except TypeError:
        return ("id", id(x))


class _Builder(Rebuilder):
    """Rebuilds a graph node by node, folding, simplifying and deduplicating as it goes."""

    def __init__(self, g: Graph, products: bool = False):
        super().__init__(g)
        self.products = products    # rewrite transposed products (``_transposed_product``)
        self.subst: dict[Var, Var] = {}
        self.cse: dict = {}
        self.const_keys: dict = {}
        # each var's readers (outputs count), for the transposed-product sweep alone
        self.uses = Counter(v for n in g.nodes for v in n.inputs) + Counter(g.outputs) \
            if products else Counter()
        for v, c in g.consts.items():
            self._dedupe_const(v, c)

    def _dedupe_const(self, v: Var, c: np.ndarray) -> Var:
        if c.size <= 64:
            key = (c.shape, c.dtype.str, c.tobytes(), v.aval.weak)
            first = self.const_keys.setdefault(key, v)
            if first is not v:
                self.subst[v] = first
                return first
        return v

    def r(self, v: Var) -> Var:
        while v in self.subst:
            v = self.subst[v]
        return v

    def const(self, value: np.ndarray, aval: Aval) -> Var:
        v = super().const(value, aval)
        return self._dedupe_const(v, self.consts[v])

    def value(self, v: Var):
        return self.consts.get(v)

    def add(self, node: Node) -> list[Var]:
        """Fold, simplify, CSE or keep ``node``; returns the vars standing for its outputs."""
        node.inputs = [self.r(v) for v in node.inputs]
        prim = node.prim
        ins_c = [self.consts.get(v) for v in node.inputs]
        if (not prim.multiple_results and prim.kind != "opaque" and ins_c
                and all(c is not None for c in ins_c)
                and (node.out.aval.size <= 1 or node.out.aval.size <= min(
                    FOLD_MAX_ELEMENTS, max(c.size for c in ins_c)))):
            val = run_impl(prim, ins_c, node.params, [node.out.aval])[0]
            return [self.const(val, node.out.aval)]
        if not prim.multiple_results:
            rep = simplify_node(self, node)
            if rep is not None:
                return [rep]
        pk = params_key(node.params) if node.params else ()
        key = (prim.name, tuple(v.id for v in node.inputs),
               pk if pk is not None else ("frozen", _freeze(node.params)))
        hit = self.cse.get(key)
        if hit is not None:
            return hit
        self.cse[key] = node.outs
        return super().add(node)


def _uniform(b: _Builder, v: Var):
    return uniform_value(b.consts, b.producer, v)


def _is_const(b: _Builder, v: Var, value: float) -> bool:
    u = _uniform(b, v)
    return u is not None and bool(u == value)


def _fold_uniform(b: _Builder, n: Node) -> Var | None:
    """An elementwise op on values that are each uniform is a broadcast scalar constant."""
    if n.prim.kind != "elementwise" or not n.inputs or n.out.aval.size <= 1:
        return None
    us = [_uniform(b, v) for v in n.inputs]
    if any(u is None for u in us):
        return None
    scalars = [np.asarray(u, v.aval.dtype) for u, v in zip(us, n.inputs)]
    out = n.out.aval
    val = run_impl(n.prim, scalars, n.params, [Aval((), out.dtype)])[0]
    c = b.const(val, Aval((), out.dtype))
    return b.emit(PRIMITIVES["broadcast_to"], [c], {"shape": out.shape}, n.source)


def simplify_node(b: _Builder, n: Node) -> Var | None:
    """Algebraic rewrites; returns a replacement var or None to keep the node."""
    rep = _fold_uniform(b, n)
    if rep is not None:
        return rep
    name, ins, out = n.prim.name, n.inputs, n.out
    same = lambda v: v.aval.shape == out.aval.shape and v.aval.dtype == out.aval.dtype
    if name == "add":
        if _is_const(b, ins[1], 0) and same(ins[0]):
            return ins[0]
        if _is_const(b, ins[0], 0) and same(ins[1]):
            return ins[1]
    elif name == "sub":
        if _is_const(b, ins[1], 0) and same(ins[0]):
            return ins[0]
    elif name == "mul":
        if _is_const(b, ins[1], 1) and same(ins[0]):
            return ins[0]
        if _is_const(b, ins[0], 1) and same(ins[1]):
            return ins[1]
        if _is_const(b, ins[1], -1) and same(ins[0]):
            return b.emit(PRIMITIVES["neg"], [ins[0]], {}, n.source)
        if _is_const(b, ins[0], -1) and same(ins[1]):
            return b.emit(PRIMITIVES["neg"], [ins[1]], {}, n.source)
    elif name == "div":
        if _is_const(b, ins[1], 1) and same(ins[0]):
            return ins[0]
    elif name == "neg":
        p = b.producer.get(ins[0])
        if p is not None and p.prim.name == "neg":
            return p.inputs[0]
    elif name in ("reshape", "broadcast_to"):
        if same(ins[0]):
            return ins[0]
        p = b.producer.get(ins[0])
        if name == "reshape" and p is not None and p.prim.name == "reshape":
            return b.emit(PRIMITIVES["reshape"], [p.inputs[0]], n.params, n.source) \
                if p.inputs[0].aval.shape != out.aval.shape else p.inputs[0]
    elif name == "convert":
        if ins[0].aval.dtype == out.aval.dtype:
            return ins[0]
        p = b.producer.get(ins[0])
        if p is not None and p.prim is n.prim and p.inputs[0].aval.dtype == out.aval.dtype \
                and dtypes.is_float(ins[0].aval.dtype) \
                and np.can_cast(out.aval.dtype, ins[0].aval.dtype, "safe"):
            return p.inputs[0]     # widened exactly and back (a 16-bit float's round trip)
    elif name == "transpose":
        p = b.producer.get(ins[0])
        if p is not None and p.prim.name == "transpose":
            perm = tuple(p.params["perm"][i] for i in n.params["perm"])
            if perm == tuple(range(len(perm))):
                return p.inputs[0]
            return b.emit(PRIMITIVES["transpose"], [p.inputs[0]], {"perm": perm}, n.source)
        return _transposed_product(b, n, p) if b.products else None
    elif name == "reduce_sum":
        return _sum_of_broadcast(b, n)
    return None


def _transposed_product(b: _Builder, n: Node, p: Node | None) -> Var | None:
    """(a @ b)^T, its last two axes swapped, is b^T @ a^T: the product's operands are
    transposed for free (BLAS's flags), where the transpose of its result is a strided copy
    (a tied embedding's gradient from the output product: 3 ms of a GPT step for an
    8192 x 256 matrix). Only where the transpose is the product's one use (else both would
    be computed), counted in a graph common subexpressions are merged in already (two
    copies of one product, each transposed once, are one product used twice)."""
    perm = n.params["perm"]
    nd = len(perm)
    if p is None or p.prim.name != "matmul" or b.uses[n.inputs[0]] != 1 or \
            perm != tuple(range(nd - 2)) + (nd - 1, nd - 2):
        return None
    x, y = (b.emit(PRIMITIVES["transpose"], [v], {"perm": perm}, n.source) for v in p.inputs)
    return b.emit(PRIMITIVES["matmul"], [y, x], {}, n.source)


def _sum_of_broadcast(b: _Builder, n: Node) -> Var | None:
    """sum(broadcast_to(x), axes) over broadcast-only axes is x times the count."""
    p = b.producer.get(n.inputs[0])
    if p is None or p.prim.name != "broadcast_to":
        return None
    x = p.inputs[0]
    big = p.out.aval.shape
    lead = len(big) - x.aval.ndim
    added = {i for i in range(lead)} | {lead + j for j, d in enumerate(x.aval.shape)
                                        if d == 1 and big[lead + j] != 1}
    axes = set(n.params["axes"])
    if not axes <= added:
        return None
    count = int(np.prod([big[a] for a in axes], dtype=np.int64))
    y = x
    if count != 1:
        c = b.const(np.asarray(count, x.aval.dtype), Aval((), x.aval.dtype))
        y = b.emit(PRIMITIVES["mul"], [x, c], {}, n.source)
    padded = (1,) * lead + x.aval.shape
    kept = tuple(d for i, d in enumerate(padded) if i not in axes)
    if kept != y.aval.shape:
        y = b.emit(PRIMITIVES["reshape"], [y], {"shape": kept}, n.source)
    if kept != n.out.aval.shape:
        y = b.emit(PRIMITIVES["broadcast_to"], [y], {"shape": n.out.aval.shape}, n.source)
    return y


def simplify(g: Graph) -> Graph:
    """Constant folding, algebraic rewrites and common-subexpression elimination in one sweep."""
    return _simplify(g)[0]


def _simplify(g: Graph, products: bool = False) -> tuple[Graph, bool]:
    """``simplify``, and whether it rewrote anything (every rewrite substitutes a var);
    ``products``: rewrite transposed products too."""
    b = _Builder(g, products)
    for n in g.nodes:
        new = Node(n.prim, list(n.inputs), n.params, list(n.outs), n.source)
        reps = b.add(new)
        for old, rep in zip(n.outs, reps):
            if rep is not old:
                b.subst[old] = rep
                if products:                    # (a CSE hit: the uses of both)
                    b.uses[rep] += b.uses[old]
    outs = [b.r(v) for v in g.outputs]
    return Graph(list(g.inputs), b.nodes, outs, b.consts, g.in_tree, g.out_tree), bool(b.subst)


@timed("optimise")
def optimize(g: Graph) -> Graph:
    """The standard pipeline: simplify (fold + rewrite + CSE) then DCE, twice to a fixpoint,
    then a sweep rewriting transposed products where there are any.

    A sweep that rewrites nothing has reached the fixpoint already (dropping dead nodes
    enables no rewrite), so the second one is skipped then."""
    g, changed = _simplify(g)
    g = dce(g)
    if changed:
        g = dce(simplify(g))
    if _transposed_products(g):         # (once the product's uses are known: after CSE)
        g = dce(_simplify(g, products=True)[0])
    return g


def _transposed_products(g: Graph) -> bool:
    """Whether a product's result is transposed (``_transposed_product`` may apply)."""
    made = {n.out for n in g.nodes if n.prim.name == "matmul"}
    return any(n.prim.name == "transpose" and n.inputs[0] in made for n in g.nodes)
