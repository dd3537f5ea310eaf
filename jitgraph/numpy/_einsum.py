"""einsum with any number of operands, ellipses (``...``) and repeated indices.

Each operand is first reduced on its own (diagonals of repeated indices are gathered, indices
no other operand or the output needs are summed away); the operands are then contracted two at a
time in an order chosen over the index sizes (``optimize='greedy'``: the pair whose result is
smallest first; ``'optimal'``: the cheapest order by exhaustive search, for up to 6 operands).
Each pairwise contraction is a transpose/reshape to (batch, m, k) @ (batch, k, n): one matmul.
"""
from __future__ import annotations

import itertools
import string

import numpy as np

from ..core import aval_of
from ..errors import ShapeError
from ._base import _promote, asarray
from .indexing import diagonal
from .manipulation import broadcast_to, reshape, transpose
from .products import matmul
from .reductions import sum as reduce_sum

_LETTERS = string.ascii_letters


def _parse(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    s = subscripts.replace(" ", "")
    lhs, arrow, out = s.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {subscripts!r} names {len(ins)} operands, got {len(shapes)}")
    used = set(s) - set(",.->")
    bad = [c for c in used if c not in _LETTERS]
    if bad:
        raise ValueError(f"einsum: invalid subscript character {bad[0]!r} in {subscripts!r}")
    spare = [c for c in _LETTERS if c not in used]
    n_ell = 0
    for spec, shp in zip(ins, shapes):
        if "..." in spec:
            n_ell = max(n_ell, len(shp) - (len(spec) - 3))
    ell = "".join(spare[:n_ell])
    expanded = []
    for spec, shp in zip(ins, shapes):
        if "..." in spec:
            k = len(shp) - (len(spec) - 3)
            if k < 0:
                raise ShapeError(f"einsum: operand of shape {shp} has fewer axes than {spec!r}")
            spec = spec.replace("...", ell[n_ell - k:] if k else "")
        if len(spec) != len(shp):
            raise ShapeError(f"einsum: operand with shape {shp} does not match subscripts "
                             f"{spec!r} ({len(spec)} indices for {len(shp)} axes)")
        expanded.append(spec)
    if arrow:
        out = out.replace("...", ell)
        letters = "".join(expanded)
        for c in out:
            if c not in letters:
                raise ValueError(f"einsum: output index {c!r} appears in no operand")
        if len(set(out)) != len(out):
            raise ValueError(f"einsum: output subscript {out!r} repeats an index")
    else:
        letters = "".join(expanded)
        out = ell + "".join(sorted((c for c in set(letters) if letters.count(c) == 1
                                    and c not in ell), key=_LETTERS.index))
    return expanded, out


def _diagonals(x, spec: str):
    """Repeated indices in one operand select its diagonal (``'ii->i'``)."""
    while len(set(spec)) != len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        i = spec.index(c)
        j = spec.index(c, i + 1)
        x = diagonal(x, 0, i, j)
        spec = "".join(ch for k, ch in enumerate(spec) if k not in (i, j)) + c
    return x, spec


def _sum_away(x, spec: str, keep: set[str]):
    axes = tuple(i for i, c in enumerate(spec) if c not in keep)
    if axes:
        x = reduce_sum(x, axis=axes)
        spec = "".join(c for c in spec if c in keep)
    return x, spec


def _contract(a, sa: str, b, sb: str, keep: set[str], dims: dict):
    """One pairwise contraction, keeping the indices in ``keep``; one matmul."""
    a, sa = _sum_away(a, sa, keep | set(sb))
    b, sb = _sum_away(b, sb, keep | set(sa))
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    size = lambda cs: int(np.prod([dims[c] for c in cs], dtype=np.int64))     # noqa: E731
    at = transpose(a, [sa.index(c) for c in batch + free_a + contract])
    bt = transpose(b, [sb.index(c) for c in batch + contract + free_b])
    at = reshape(at, (size(batch), size(free_a), size(contract)))
    bt = reshape(bt, (size(batch), size(contract), size(free_b)))
    order = batch + free_a + free_b
    r = reshape(matmul(at, bt), tuple(dims[c] for c in order))
    return r, "".join(order)


def _pair_cost(sa: str, sb: str, keep: set[str], dims: dict) -> tuple[int, int]:
    """(flops, result size) of contracting two specs, keeping ``keep``."""
    letters = set(sa) | set(sb)
    out = [c for c in letters if c in keep]
    flops = int(np.prod([dims[c] for c in letters], dtype=np.int64))
    return flops, int(np.prod([dims[c] for c in out], dtype=np.int64))


def _keep_for(specs: list[str], i: int, j: int, out: str) -> set[str]:
    return set(out).union(*[set(s) for k, s in enumerate(specs) if k not in (i, j)])


def _greedy_path(specs: list[str], out: str, dims: dict) -> list[tuple[int, int]]:
    specs = list(specs)
    path = []
    while len(specs) > 1:
        best = None
        for i, j in itertools.combinations(range(len(specs)), 2):
            flops, size = _pair_cost(specs[i], specs[j], _keep_for(specs, i, j, out), dims)
            key = (size, flops)
            if best is None or key < best[0]:
                best = (key, i, j)
        _, i, j = best
        keep = _keep_for(specs, i, j, out)
        new = "".join(c for c in dict.fromkeys(specs[i] + specs[j]) if c in keep)
        specs = [s for k, s in enumerate(specs) if k not in (i, j)] + [new]
        path.append((i, j))
    return path


def _optimal_path(specs: list[str], out: str, dims: dict) -> list[tuple[int, int]]:
    best = [None, None]

    def search(specs, path, cost):
        if best[0] is not None and cost >= best[0]:
            return
        if len(specs) == 1:
            best[0], best[1] = cost, path
            return
        for i, j in itertools.combinations(range(len(specs)), 2):
            keep = _keep_for(specs, i, j, out)
            flops, _ = _pair_cost(specs[i], specs[j], keep, dims)
            new = "".join(c for c in dict.fromkeys(specs[i] + specs[j]) if c in keep)
            search([s for k, s in enumerate(specs) if k not in (i, j)] + [new],
                   path + [(i, j)], cost + flops)
    search(list(specs), [], 0)
    return best[1]


def einsum_path(subscripts: str, *operands, optimize="greedy"):
    """The pairwise contraction order einsum uses: a list of (i, j) positions in the shrinking
    operand list (the contracted pair's result is appended at the end)."""
    shapes = [aval_of(asarray(o)).shape for o in operands]
    specs, out = _parse(subscripts, shapes)
    dims = _sizes(specs, shapes)
    if optimize == "optimal" and len(specs) <= 6:
        return _optimal_path(specs, out, dims)
    return _greedy_path(specs, out, dims)


def _sizes(specs, shapes) -> dict:
    dims: dict = {}
    for spec, shp in zip(specs, shapes):
        for c, d in zip(spec, shp):
            if d == 1 and c in dims:
                continue
            if dims.get(c, 1) != d and dims.get(c, 1) != 1:
                raise ShapeError(f"einsum: index {c!r} has sizes {dims[c]} and {d}")
            dims[c] = d
    return dims


def einsum(subscripts: str, *operands, optimize="greedy", precision=None):
    if not operands:
        raise ValueError("einsum: needs at least one operand")
    ops = list(_promote(*operands))
    shapes = [aval_of(o).shape for o in ops]
    specs, out = _parse(subscripts, shapes)
    dims = _sizes(specs, shapes)
    for k, (o, spec) in enumerate(zip(ops, specs)):
        shp = aval_of(o).shape
        want = tuple(dims[c] for c in spec)
        if shp != want:              # size-1 axes broadcast against the index's size
            ops[k] = broadcast_to(o, want)
        ops[k], specs[k] = _diagonals(ops[k], spec)
    for k in range(len(ops)):
        others = set(out).union(*[set(s) for i, s in enumerate(specs) if i != k])
        ops[k], specs[k] = _sum_away(ops[k], specs[k], others)
    if optimize == "optimal" and len(specs) <= 6:
        path = _optimal_path(specs, out, dims)
    else:
        path = _greedy_path(specs, out, dims)
    for i, j in path:
        keep = _keep_for(specs, i, j, out)
        r, s = _contract(ops[i], specs[i], ops[j], specs[j], keep, dims)
        ops = [o for k, o in enumerate(ops) if k not in (i, j)] + [r]
        specs = [x for k, x in enumerate(specs) if k not in (i, j)] + [s]
    x, spec = _sum_away(ops[0], specs[0], set(out))
    return transpose(x, [spec.index(c) for c in out])
