"""einsum for one or two operands, lowered to sum / transpose / reshape and one matmul.

Each index letter is classified: batch (both operands and output), contracted (both, not
output), free (one operand and output) or summed away (one operand only).
"""
from __future__ import annotations

import numpy as np

from . import numpy as jnp
from .core import aval_of
from .errors import ShapeError


def _parse(subscripts: str, n_ops: int) -> tuple[list[str], str]:
    s = subscripts.replace(" ", "")
    if "..." in s:
        raise ValueError("einsum: ellipsis ('...') is not supported; write the indices out")
    if "->" in s:
        lhs, out = s.split("->")
    else:
        lhs = s
        letters = lhs.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = lhs.split(",")
    if len(ins) != n_ops:
        raise ValueError(f"einsum: {subscripts!r} names {len(ins)} operands, got {n_ops}")
    return ins, out


def _reduce_single(x, spec: str, keep: set[str]):
    """Sum away letters not in ``keep``; diagonals (repeated letters) are not supported."""
    if len(set(spec)) != len(spec):
        raise ValueError(f"einsum: repeated index in one operand ({spec!r}) is not supported")
    axes = tuple(i for i, c in enumerate(spec) if c not in keep)
    if axes:
        x = jnp.sum(x, axis=axes)
        spec = "".join(c for c in spec if c in keep)
    return x, spec


def einsum(subscripts: str, *operands):
    if len(operands) not in (1, 2):
        raise ValueError("einsum: only one or two operands are supported")
    ins, out = _parse(subscripts, len(operands))
    ops = [jnp.asarray(o) for o in operands]
    for spec, o in zip(ins, ops):
        if len(spec) != aval_of(o).ndim:
            raise ShapeError(f"einsum: operand with shape {aval_of(o).shape} does not match "
                             f"subscripts {spec!r}")
    if len(ops) == 1:
        x, spec = _reduce_single(ops[0], ins[0], set(out))
        return jnp.transpose(x, [spec.index(c) for c in out])
    (sa, sb), (a, b) = ins, ops
    a, b = jnp._promote(a, b)
    a, sa = _reduce_single(a, sa, set(out) | set(sb))
    b, sb = _reduce_single(b, sb, set(out) | set(sa))
    dims = {}
    for spec, x in ((sa, a), (sb, b)):
        for c, d in zip(spec, aval_of(x).shape):
            if dims.setdefault(c, d) != d:
                raise ShapeError(f"einsum: index {c!r} has sizes {dims[c]} and {d}")
    batch = [c for c in sa if c in sb and c in out]
    contract = [c for c in sa if c in sb and c not in out]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    size = lambda cs: int(np.prod([dims[c] for c in cs], dtype=np.int64))
    at = jnp.transpose(a, [sa.index(c) for c in batch + free_a + contract])
    bt = jnp.transpose(b, [sb.index(c) for c in batch + contract + free_b])
    at = jnp.reshape(at, (size(batch), size(free_a), size(contract)))
    bt = jnp.reshape(bt, (size(batch), size(contract), size(free_b)))
    r = jnp.matmul(at, bt)
    order = batch + free_a + free_b
    r = jnp.reshape(r, tuple(dims[c] for c in order))
    return jnp.transpose(r, [order.index(c) for c in out])
