"""Sizes as runtime arguments: turn generated source for a few sample sizes into source that
takes the sizes as variables.

The code generator writes every size, stride, loop bound and size-dependent constant (``1/n``
of a mean) as a literal. Generating the same program at a few sizes and comparing the token
streams finds each literal that depends on a size; each is fitted to a small formula in the
size symbols (``a*n + b``, ``c*n*m``, ``c/n``, ...) and checked at a further sample where all
sizes move at once. Anything else that differs between samples (another fusion decision,
another buffer plan) means the program's structure depends on the size: the caller then
compiles for fixed sizes instead. This needs no symbolic shape arithmetic in the primitives'
rules, and what it produces is exactly what the code generator would write for each size.
"""
from __future__ import annotations

import io
import math
import tokenize
from typing import Sequence


class CannotGeneralize(Exception):
    """The generated program's structure depends on the sizes (not only its literals)."""


Point = dict          # symbol name -> size


def sample_points(base: dict[str, int]) -> list[Point]:
    """Sizes to generate at: a reference point, one point per symbol moving alone, and a last
    point where every symbol moves (it only checks the fitted formulas). The values are odd
    and unlike the sizes models use, so a size rarely equals another dim by accident."""
    names = sorted(base)
    ref = {n: 97 + 16 * i for i, n in enumerate(names)}
    points = [ref]
    for n in names:
        p = dict(ref)
        p[n] = ref[n] + 38
        points.append(p)
    points.append({n: ref[n] + 58 + 2 * i for i, n in enumerate(names)})
    return points


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _number(text: str):
    """The value of a NUMBER token (an int or float literal)."""
    return int(text) if text.isdigit() else float(text)


def generalize(sources: Sequence[str], points: Sequence[Point]) -> str:
    """The first source with every size-dependent literal replaced by a formula in the
    symbols. ``sources[i]`` was generated at ``points[i]`` (``sample_points``)."""
    streams = [_tokens(s) for s in sources]
    first = streams[0]
    if any(len(t) != len(first) for t in streams):
        raise CannotGeneralize("the generated programs differ in length")
    edits = []                  # (row, col start, col end, replacement)
    for k, tok in enumerate(first):
        others = [t[k] for t in streams]
        if any(o.type != tok.type for o in others):
            raise CannotGeneralize(f"line {tok.start[0]}: {tok.string!r} differs")
        if all(o.string == tok.string for o in others):
            continue
        if tok.type != tokenize.NUMBER:
            raise CannotGeneralize(f"line {tok.start[0]}: {tok.string!r} is "
                                   f"{others[-1].string!r} at other sizes")
        values = [_number(o.string) for o in others]
        expr = fit(values, points)
        edits.append((tok.start, tok.end, expr))
    lines = sources[0].splitlines(keepends=True)
    for (r0, c0), (r1, c1), expr in reversed(edits):
        if r0 != r1:
            raise CannotGeneralize("a number spans lines")
        line = lines[r0 - 1]
        lines[r0 - 1] = line[:c0] + expr + line[c1:]
    return "".join(lines)


def fit(values: Sequence, points: Sequence[Point]) -> str:
    """A formula in the symbols giving ``values[i]`` at ``points[i]`` (points as made by
    ``sample_points``: reference, one per symbol, all moved); CannotGeneralize if none of the
    forms fits every point."""
    ref, last = points[0], points[-1]
    names = sorted(ref)
    moved = [n for n, p in zip(names, points[1:-1]) if values[1 + names.index(n)] != values[0]]
    if not moved:
        raise CannotGeneralize("a literal changes only when all sizes move together")
    is_int = all(isinstance(v, int) for v in values)
    for form in _forms(values, points, names, moved, is_int):
        if is_int and not _integral(form):
            continue
        for cand in _shortest_first(form, is_int):
            if all(_close(_evaluate(cand, p), v, is_int) for p, v in zip(points, values)):
                return _render(cand, is_int)
    if len(moved) > 1 and all(float(v).is_integer() for v in values):
        affine = _affine([int(v) for v in values], points, names, moved)
        if affine is not None:        # a float literal stays a float
            return affine if is_int else f"float{affine}"
    raise CannotGeneralize(f"no formula fits the literal {values[0]!r} "
                           f"(sizes {ref} -> {values[0]!r}, {last} -> {values[-1]!r})")


def _forms(values, points, names, moved, is_int):
    """Candidate formulas ``(coef, exponents, offset)`` meaning coef * prod(n**e) + offset."""
    ref = points[0]
    v0 = values[0]
    if len(moved) == 1:
        n = moved[0]
        p1 = points[1 + names.index(n)]
        v1 = values[1 + names.index(n)]
        a = (v1 - v0) / (p1[n] - ref[n])
        yield (a, {n: 1}, v0 - a * ref[n])                    # a*n + b
        for e in (-1, 2, -2):                                  # c/n, c*n^2, c/n^2
            yield (v0 / ref[n] ** e, {n: e}, 0)
    prod = math.prod(ref[n] for n in moved)
    yield (v0 / prod, {n: 1 for n in moved}, 0)                # c*n*m
    yield (v0 * prod, {n: -1 for n in moved}, 0)               # c/(n*m)


def _affine(values, points, names, moved) -> str | None:
    """``a*n + b*m + c`` with integer coefficients, or None: the size of a concatenation of
    arrays whose lengths are two runtime sizes (its strides and bounds, the count of a mean
    over it)."""
    ref, v0 = points[0], values[0]
    coefs = {}
    for n in moved:
        p, v = points[1 + names.index(n)], values[1 + names.index(n)]
        a, rem = divmod(v - v0, p[n] - ref[n])
        if rem:
            return None
        coefs[n] = a
    off = v0 - sum(a * ref[n] for n, a in coefs.items())
    if any(sum(a * p[n] for n, a in coefs.items()) + off != v for p, v in zip(points, values)):
        return None
    terms = [n if a == 1 else f"{a} * {n}" for n, a in sorted(coefs.items())]
    text = " + ".join(terms) + (f" {'-' if off < 0 else '+'} {abs(off)}" if off else "")
    return f"({text})"


def _shortest_first(form, is_int):
    """The form with its float coefficients written with as few digits as still fit (a mean's
    ``1/n`` is seen as float32 values: its coefficient is 1.0, not 0.99999997)."""
    coef, exps, off = form
    if not is_int:
        for digits in range(1, 17):
            yield (float(f"{coef:.{digits}g}"), exps, float(f"{off:.{digits}g}"))
    yield form


def _integral(form) -> bool:
    """Integer literals (sizes, strides, bounds) take integer formulas only."""
    coef, exps, off = form
    return coef == int(coef) and off == int(off) and all(e > 0 for e in exps.values())


def _evaluate(form, point):
    coef, exps, off = form
    v = coef
    for n, e in exps.items():
        v = v * point[n] ** e
    return v + off


def _close(a, b, is_int) -> bool:
    """Float literals may have been rounded to float32 (``np.float32(0.0078125)``), so they
    match a formula to float32's half ulp."""
    if is_int:
        return a == b
    return a == b or abs(a - b) <= 6e-8 * max(abs(a), abs(b))


def _render(form, is_int) -> str:
    coef, exps, off = form
    if is_int:
        coef, off = int(coef), int(off)
    ups = [n if e == 1 else f"{n} * {n}" for n, e in sorted(exps.items()) if e > 0]
    downs = [n if e == -1 else f"{n} * {n}" for n, e in sorted(exps.items()) if e < 0]
    terms = " * ".join(ups)
    if coef != 1 or not ups or not is_int:      # a float literal stays a float
        terms = f"{coef!r} * {terms}" if ups else repr(coef)
    if downs:
        terms = f"{terms} / " + (downs[0] if len(downs) == 1 and " " not in downs[0]
                                 else f"({' * '.join(downs)})")
    if off:
        terms = f"{terms} {'-' if off < 0 else '+'} {abs(off)!r}"
    return terms if terms.isidentifier() else f"({terms})"
