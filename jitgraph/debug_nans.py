"""Say where a NaN comes from: ``debug_nans``, ``debug_infs`` and ``train_step(check_nan=True)``.

With ``config.update("debug_nans", True)`` (JAX's ``jax_debug_nans``) every ``jit`` call checks
the floating outputs it returns (``first_bad_output``). On a NaN it traces the function again on
the same arguments and runs that graph op by op with the NumPy reference (``diagnose``), then
raises ``FloatingPointError`` naming the first primitive that made a NaN out of operands
without one, its operand and result types, the values at the first bad position, the user's
line that made the op, and a hint. ``debug_infs`` does the same for inf. A NaN that comes in
through an argument is named by its path in the arguments; a NaN the reference does not make
(the compiled program differs from it) is reported as that, not pinned on an operation.

``train_step(check_nan=True)`` runs the same diagnosis on the forward pass of a step whose
loss is NaN or inf. Library code that puts a NaN in on purpose registers the constant it
selects (``explain_constant``): ``nn.cross_entropy`` does for labels outside [0, classes), so
the report names the labels and their bad values instead of an anonymous ``select``.

Off, none of this runs: ``jit``'s call path is the code it was (``jit._call_slow``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes
from .core import Graph, Node, Var, keeping_sources, run_impl
from .errors import where
from .transforms import trace_to_graph
from .tree import argument_leaf_names, key_paths, tree_flatten

__all__ = ["Diagnosis", "diagnose", "explain_constant", "first_bad_output", "holds",
           "argument_names", "WORDS"]

# what each check looks for: debug_nans, debug_infs, train_step's check_nan
WORDS = {"nan": "NaN", "inf": "inf", "nonfinite": "NaN or inf"}


def _bad(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "nan":
        return np.isnan(x)
    if kind == "inf":
        return np.isinf(x)
    return ~np.isfinite(x)


def holds(x: Any, kind: str) -> bool:
    """Whether ``x`` is a floating array holding a ``kind`` value (``"nan"``, ``"inf"`` or
    ``"nonfinite"``)."""
    x = np.asarray(x)
    return (x.dtype.kind in "fc" or dtypes.is_float(x.dtype)) and bool(_bad(x, kind).any())


# ------------------------------------------------------------------ naming things
def argument_names(fun: Callable, n: int) -> list[str]:
    """Names for ``n`` positional arguments of ``fun``: its parameter names, ``batch[0]`` for
    a ``*batch`` parameter, else ``argument i``."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        p = params[i] if i < len(params) else (params[-1] if params else None)
        if p is not None and p.kind is inspect.Parameter.VAR_POSITIONAL:
            names.append(f"{p.name}[{i - params.index(p)}]")
        elif p is not None and i < len(params) and p.kind in (
                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        else:
            names.append(f"argument {i}")
    return names


def _position(idx: tuple) -> str:
    return str(idx[0]) if len(idx) == 1 else str(idx)


def _value(x: Any) -> str:
    return repr(np.asarray(x).item())


def _first_bad_position(x: np.ndarray, kind: str) -> tuple[tuple, int]:
    """The first bad element's index and how many there are."""
    bad = _bad(x, kind)
    return tuple(int(i) for i in np.argwhere(bad)[0]), int(bad.sum())


def first_bad_output(leaves: Sequence[Any], kinds: Sequence[str]) -> tuple[str, int] | None:
    """``(kind, leaf index)`` of the first output leaf holding one of ``kinds``, or None."""
    for kind in kinds:
        for i, x in enumerate(leaves):
            if holds(x, kind):
                return kind, i
    return None


# ------------------------------------------------------------------ deliberate NaNs
# id -> (the constant, its explanation); the constant is kept alive, so the id stays its own
_EXPLAINED: dict[int, tuple[np.ndarray, Callable]] = {}


def explain_constant(value: np.ndarray,
                     explain: Callable[[Node, Callable[[Var], np.ndarray], dict], str]
                     ) -> np.ndarray:
    """Register a constant that library code puts into a graph on purpose (a NaN fill) and
    returns it. When the first operation to make a NaN does so from this constant,
    ``explain(node, value_of, producer)`` says why (``value_of(var)`` is a var's value in the
    re-run, ``producer`` maps a var to the node that made it) instead of the generic report:
    a summary line (the user's line is appended to it), then indented details.
    Constants keep their identity through tracing, ``grad`` and the passes, so this works
    wherever the op ends up."""
    _EXPLAINED[id(value)] = (value, explain)
    return value


# ------------------------------------------------------------------ hints
_HINTS = {
    "log": "the log of a negative number is NaN (of 0, -inf): keep the argument positive, "
           "e.g. jnp.log(jnp.maximum(x, 1e-12)), or work in log space (log_softmax, "
           "logsumexp)",
    "log1p": "log1p of a number below -1 is NaN",
    "log2": "the log of a negative number is NaN",
    "log10": "the log of a negative number is NaN",
    "sqrt": "the square root of a negative number is NaN: clamp it with jnp.maximum(x, 0) "
            "(and mind that its gradient at 0 is inf)",
    "div": "0/0 and inf/inf are NaN, x/0 is inf: keep the denominator away from zero "
           "(jnp.where(d == 0, 1, d), or add an epsilon)",
    "mod": "x % 0 is NaN",
    "floordiv": "x // 0 is NaN or inf",
    "pow": "a negative base to a non-integer power is NaN, 0 to a negative power inf",
    "sub": "inf - inf is NaN: an operand is infinite already (an overflow before this)",
    "add": "inf + (-inf) is NaN: an operand is infinite already (an overflow before this)",
    "mul": "0 * inf is NaN: an operand is infinite already (an overflow before this)",
    "matmul": "a product that meets inf gives NaN (0 * inf, inf - inf): an operand is "
              "infinite already",
    "reduce_sum": "a sum of +inf and -inf is NaN, and a large sum can overflow to inf",
    "exp": "exp overflows to inf above ~709 (float64) or ~88 (float32): subtract the maximum "
           "first (logsumexp, log_softmax)",
    "arcsin": "arcsin outside [-1, 1] is NaN: clip the argument",
    "arccos": "arccos outside [-1, 1] is NaN: clip the argument",
    "arctanh": "arctanh outside [-1, 1] is NaN (of +-1, inf)",
    "arccosh": "arccosh below 1 is NaN",
    "lgamma": "lgamma of a non-positive integer is inf",
    "digamma": "digamma of a non-positive integer is NaN",
    "select": "jnp.where(condition, x, nan) put the NaN constant where the condition is "
              "False: the values were invalid there",
}
_HINTS.update(dict.fromkeys(
    ("scan", "while", "cond", "custom_vjp_call", "remat"),
    "the value is made inside this operation's own graph, which the re-run does not enter: "
    "run its body on these values to find the operation"))


# ------------------------------------------------------------------ the diagnosis
@dataclass
class Diagnosis:
    """What ``diagnose`` found; ``str()`` is the sentence the errors show."""
    text: str
    node: Node | None = None        # the first operation to make the value (None: none did)
    argument: str | None = None     # the argument that already held it, when none did
    reproduced: bool = True         # whether the reference re-run made the value at all

    def __str__(self) -> str:
        return self.text


def diagnose(fun: Callable, args: Sequence[Any], kwargs: dict | None = None, *,
             kind: str = "nan", names: Sequence[str] | None = None) -> Diagnosis:
    """Where ``fun(*args, **kwargs)`` gets a ``kind`` value (``"nan"``, ``"inf"`` or
    ``"nonfinite"``): trace it, run the graph op by op with the NumPy reference, and describe
    the first primitive whose result holds one while its operands hold none, with the user's
    line that made it; else the argument (``names[i]`` for ``args[i]``, plus the path inside
    it) that holds one. Only operations the bad outputs depend on count."""
    kwargs = dict(kwargs or {})
    names = list(names) if names is not None else argument_names(fun, len(args))
    word = WORDS[kind]
    with keeping_sources():
        graph, _, leaves, _, _ = trace_to_graph(lambda a, k: fun(*a, **k), (tuple(args), kwargs),
                                                abstract=True, what="debug_nans")
    run = _Run(graph)
    for v, x in zip(graph.inputs, leaves):
        run.env[v] = np.asarray(x, dtype=v.aval.dtype)
    for n in graph.nodes:
        try:
            outs = run_impl(n.prim, [run.env[v] for v in n.inputs], n.params,
                            [o.aval for o in n.outs])
        except Exception as e:    # (a reference rule that fails on these values)
            return Diagnosis(f"re-running it op by op with the NumPy reference failed at "
                             f"{n.prim.name} at {where(n.source)} ({type(e).__name__}: {e}), "
                             "so where the value came from is not known", reproduced=False)
        run.env.update(zip(n.outs, outs))
    bad_outs = [v for v in graph.outputs if run.holds(v, kind)]
    if not bad_outs:
        return Diagnosis(f"re-running it op by op with the NumPy reference gives no {word}: "
                         "the compiled program computes something other than the reference "
                         "here (with fastmath=True that can be the reordered float arithmetic; "
                         "otherwise a jitgraph bug: compare with the function run without jit)",
                         reproduced=False)
    live = run.live(bad_outs)
    node = run.first_maker(live, kind)
    if node is not None:
        return Diagnosis(run.describe(node, kind), node=node)
    leaf_names = argument_leaf_names(args, kwargs, params=names, expressions=True)
    for v, name in zip(graph.inputs, leaf_names):
        if v in live and run.holds(v, kind):
            x, where_ = run.env[v], ""
            if x.ndim:
                idx, count = _first_bad_position(x, kind)
                where_ = f" at position {_position(idx)} ({count} of {x.size} elements)"
            return Diagnosis(f"it comes in through the arguments: {name} holds {word}"
                             f"{where_}; no operation made one from values without it",
                             argument=name)
    return Diagnosis(f"a constant of the function holds {word} and no operation made one "
                     "(an array it closes over, or jnp.nan used as a value)")


class _Run:
    """A graph's values from the reference re-run, and the questions asked of them."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.env: dict = dict(graph.consts)
        self.producer = {o: n for n in graph.nodes for o in n.outs}
        self._holds: dict = {}

    def holds(self, v: Var, kind: str) -> bool:
        key = (v, kind)
        hit = self._holds.get(key)
        if hit is None:
            hit = self._holds[key] = holds(self.env[v], kind)
        return hit

    def live(self, roots: Sequence[Var]) -> set:
        """The vars ``roots`` depend on (themselves included)."""
        seen, stack = set(roots), list(roots)
        while stack:
            n = self.producer.get(stack.pop())
            if n is None:
                continue
            for v in n.inputs:
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        return seen

    def first_maker(self, live: set, kind: str) -> Node | None:
        """The first live node whose result holds ``kind`` while no operand does, constants
        excepted (a NaN constant is put in on purpose: the op that lets it through made it)."""
        consts = self.graph.consts
        for n in self.graph.nodes:
            if not any(o in live and self.holds(o, kind) for o in n.outs):
                continue
            if not any(self.holds(v, kind) for v in n.inputs if v not in consts):
                return n
        return None

    def describe(self, n: Node, kind: str) -> str:
        """The report on ``n``, the first node to make ``kind``."""
        env, consts, word, at = self.env, self.graph.consts, WORDS[kind], where(n.source)
        for v in n.inputs:                    # a constant that library code explains
            c = consts.get(v)
            hit = _EXPLAINED.get(id(c)) if c is not None else None
            if hit is not None and hit[0] is c:      # (its first line, then where)
                first, _, rest = hit[1](n, env.__getitem__, self.producer).partition("\n")
                return f"{first}, at {at}" + ("\n" + rest if rest else "")
        sig = (f"{n.prim.name}({', '.join(str(v.aval) for v in n.inputs)}) -> "
               f"{', '.join(str(o.aval) for o in n.outs)}")
        out = next(env[o] for o in n.outs if self.holds(o, kind))
        idx, count = _first_bad_position(out, kind) if out.ndim else ((), 1)
        pos = f" at position {_position(idx)}" if idx else ""
        many = f" ({count} of {out.size} elements)" if out.size > 1 else ""
        lines = [f"the first operation to make {word} from operands without it is {sig} at {at}:"]
        ops = _operands_at(n, env, out.shape, idx)
        if ops is not None:
            lines.append(f"  {n.prim.name}({', '.join(ops)}) = {_value(out[idx])}{pos}{many}")
        else:
            lines.append(f"  first {word} in the result{pos}{many}")
        held = [i for i, v in enumerate(n.inputs) if v in consts and self.holds(v, kind)]
        if held:
            lines.append(f"  operand {held[0]} is a constant holding {word}")
        if kind == "nan":       # a NaN made from an inf: say where the inf came from
            infs = [v for v in n.inputs if v not in consts and self.holds(v, "inf")]
            if infs:
                maker = self.first_maker(self.live(infs), "inf")
                came = (f"first made by {maker.prim.name} at {where(maker.source)}"
                        if maker is not None else "which came in through the arguments")
                lines.append(f"  an operand holds inf, {came}")
        hint = _HINTS.get(n.prim.name)
        if hint:
            lines.append(f"  hint: {hint}")
        return "\n".join(lines)


def _operands_at(n: Node, env: dict, shape: tuple, idx: tuple) -> list[str] | None:
    """The operands' values at the result's position ``idx`` (elementwise operations)."""
    if n.prim.kind != "elementwise" or len(n.outs) != 1:
        return None
    try:
        return [_value(np.broadcast_to(env[v], shape)[idx]) for v in n.inputs]
    except ValueError:
        return None
