"""Which elements of an array one row of a threaded kernel reads, proved from its source.

A product head (``threaded.py``) gives a kernel only the rows of the product's output that its
chunk of rows needs, in a buffer of the thread's own: that is right only where row ``o0`` of the
kernel reads that array at ``o0 * block + rest`` with ``0 <= rest < block`` and never writes it.
``reads_own_block`` proves it by interval arithmetic over each index expression of the
generated source (constants, loop variables with their ``range`` bounds, ``+ - *``, ``min`` and
``max``: what generated index expressions are made of); anything else is refused.
"""
from __future__ import annotations

import ast

#: the variable a launched kernel's rows run over (``for o0_u in range(lo, hi)``)
ROW = "o0"


def _interval(node: ast.AST, ranges: dict) -> tuple[int, int] | None:
    """Inclusive bounds of an integer expression, or None where it is not understood."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value, node.value
    if isinstance(node, ast.Name):
        return ranges.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        r = _interval(node.operand, ranges)
        return None if r is None else (-r[1], -r[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _interval(node.left, ranges), _interval(node.right, ranges)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a[0] + b[0], a[1] + b[1]
        if isinstance(node.op, ast.Sub):
            return a[0] - b[1], a[1] - b[0]
        c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(c), max(c)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ("min", "max") and len(node.args) == 2 and not node.keywords:
        a, b = (_interval(x, ranges) for x in node.args)
        if a is None or b is None:
            return None
        pick = min if node.func.id == "min" else max
        return pick(a[0], b[0]), pick(a[1], b[1])
    return None


def _terms(node: ast.AST) -> list:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(node.left) + _terms(node.right)
    return [node]


def _is_row_term(t: ast.AST, block: int) -> bool:
    return isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult) and \
        isinstance(t.left, ast.Name) and t.left.id == ROW and \
        isinstance(t.right, ast.Constant) and t.right.value == block


def reads_own_block(source: str, arg: str, block: int) -> bool:
    """Whether the kernel in ``source`` (one function whose rows run over ``o0``) reads array
    parameter ``arg`` only at ``o0 * block + rest``, ``0 <= rest < block``, and never writes
    it (nor passes it anywhere whole)."""
    try:
        fn = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return False
    if not isinstance(fn, ast.FunctionDef):
        return False
    ranges: dict = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and \
                isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) and \
                node.iter.func.id == "range" and len(node.iter.args) == 1 and \
                isinstance(node.iter.args[0], ast.Constant) and \
                type(node.iter.args[0].value) is int:
            hi = node.iter.args[0].value - 1        # (a name several loops bind: the widest)
            ranges[node.target.id] = (0, max(hi, ranges.get(node.target.id, (0, hi))[1]))
    subscripts = {id(n) for n in ast.walk(fn) if isinstance(n, ast.Subscript)
                  and isinstance(n.value, ast.Name) and n.value.id == arg}
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg]
    found = False
    for node in ast.walk(fn):
        if id(node) not in subscripts:
            continue
        if not isinstance(node.ctx, ast.Load):
            return False
        terms = _terms(node.slice)
        row = [t for t in terms if _is_row_term(t, block)]
        rest = [t for t in terms if not _is_row_term(t, block)]
        if len(row) != 1 or any(isinstance(n, ast.Name) and n.id == ROW
                                for t in rest for n in ast.walk(t)):
            return False
        lo = hi = 0
        for t in rest:
            r = _interval(t, ranges)
            if r is None:
                return False
            lo, hi = lo + r[0], hi + r[1]
        if lo < 0 or hi >= block:
            return False
        found = True
    # every use of the name is one of those reads (not an argument of another call, say)
    return found and len(uses) == len(subscripts)
