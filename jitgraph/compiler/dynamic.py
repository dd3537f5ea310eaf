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

import math
import re
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


# Python's tokens as far as generated source needs them, by one regular expression, and only
# on the lines where the samples differ (the standard library's ``tokenize`` over the whole of
# each sample took 0.25 s of a 1.6 s compile of the MNIST-size TF-1 network's training step:
# 67,000 tokens in three samples, nearly all of them alike). A comment or a string is one token
# (a size inside one is a structural difference), and so is a line's indentation (a change of
# nesting alone is one); lines inside a triple-quoted string are not tokenized (one that
# differs is a structural difference too).
_TOKEN = re.compile(r"""
    (?P<COMMENT>\#[^\n]*)
  | (?P<STRING>[rRbBuUfF]{0,2}(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<NAME>[A-Za-z_]\w*)
  | (?P<NUMBER>0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+
               |(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?[jJ]?)
  | (?P<INDENT>^[ \t]+)
  | (?P<SPACE>\s+)
  | (?P<OP>\S)
""", re.VERBOSE)
_LONG_STRING = re.compile(r"'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"")


def _tokens(line: str) -> list[tuple[str, str, int, int]]:
    """(kind, text, start, end) of each token of one line (INDENT, COMMENT, STRING, NAME,
    NUMBER, OP)."""
    return [(m.lastgroup, m.group(), m.start(), m.end())
            for m in _TOKEN.finditer(line) if m.lastgroup != "SPACE"]


def _in_long_strings(source: str) -> set[int]:
    """The numbers (from 0) of the lines a triple-quoted string spans after its first."""
    lines: set[int] = set()
    for m in _LONG_STRING.finditer(source):
        first = source.count("\n", 0, m.start())
        lines.update(range(first + 1, first + m.group().count("\n") + 1))
    return lines


def _number(text: str):
    """The value of a NUMBER token (an int or float literal)."""
    return int(text) if text.isdigit() else float(text)


def generalize(sources: Sequence[str], points: Sequence[Point]) -> str:
    """The first source with every size-dependent literal replaced by a formula in the
    symbols. ``sources[i]`` was generated at ``points[i]`` (``sample_points``)."""
    samples = [s.splitlines(keepends=True) for s in sources]
    first = samples[0]
    if any(len(lines) != len(first) for lines in samples):
        raise CannotGeneralize("the generated programs differ in length")
    differ = [i for i, line in enumerate(first) if any(s[i] != line for s in samples)]
    in_strings = _in_long_strings(sources[0]) if differ else set()
    streams = {i: [_tokens(s[i]) for s in samples] for i in differ}
    if any(len(t) != len(ts[0]) for ts in streams.values() for t in ts):
        raise CannotGeneralize("the generated programs differ in length")
    edits = {}                  # line number -> [(start, end, replacement)]
    for i in differ:
        if i in in_strings:
            raise CannotGeneralize(f"line {i + 1}: a string differs")
        toks = streams[i]
        for k, (kind, text, start, end) in enumerate(toks[0]):
            others = [t[k] for t in toks]
            if all(o[1] == text for o in others):
                continue
            if any(o[0] != kind for o in others):
                raise CannotGeneralize(f"line {i + 1}: {text!r} differs")
            if kind != "NUMBER":
                raise CannotGeneralize(f"line {i + 1}: {text!r} is {others[-1][1]!r} at "
                                       "other sizes")
            values = [_number(o[1]) for o in others]
            edits.setdefault(i, []).append((start, end, fit(values, points)))
    out = list(first)
    for i, line_edits in edits.items():
        line = out[i]
        for start, end, expr in reversed(line_edits):
            line = line[:start] + expr + line[end:]
        out[i] = line
    return "".join(out)


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
