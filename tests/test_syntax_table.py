"""Generated code is written through one syntax table per target (``compiler/syntax.py``):
the built-in primitives' rules write no text of their own, a table that overrides an entry
changes every kernel that uses it, and the base table's literals and conversions mean the
numbers they say."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import core
from jitgraph.compiler.backends.cpu import CpuContext
from jitgraph.compiler.fusion import LoopKernel, make_plan
from jitgraph.compiler.lower import lower
from jitgraph.compiler.syntax import Statement, Syntax
from jitgraph.kernels.narrow import PYTHON as NARROW
from jitgraph.ops.elementwise import UNARY

ml_dtypes = pytest.importorskip("ml_dtypes")


class Tokens(Syntax):
    """A table whose every expression entry returns a fresh token: a rule's result is one
    token (or an operand) exactly when the table wrote all of it."""

    def __init__(self):
        self.backend, self.approx_math, self.in_dtype = "cpu", False, np.dtype(np.float32)
        self.n = 0

    def _token(self, *_):
        self.n += 1
        return f"<{self.n}>"

    op = bare = number = literal = call = cast = select = group = attribute = _token
    fn = _token

    def returns_input_type(self, name):
        return False


# the parameters the scalar primitives with parameters take
PARAMS = {"convert": {"dtype": np.dtype(np.float64)}, "threefry_mix": {"r": 13},
          "checkpoint_name": {"name": "h"}}


def _arity(name: str) -> int:
    if name == "select":
        return 3
    return 1 if name in UNARY or name in ("convert", "checkpoint_name") else 2


def _built_in(kind: str) -> list[str]:
    """The package's primitives with lowerings of ``kind`` (not those other tests define)."""
    return sorted(n for n, p in core.PRIMITIVES.items() if p.lowering.kind == kind
                  and p.lowering.rule.__module__.startswith("jitgraph."))


@pytest.mark.parametrize("name", _built_in(core.SCALAR))
def test_every_scalar_rule_writes_through_the_table(name):
    operands = ("x0", "x1", "x2")[:_arity(name)]
    out = core.PRIMITIVES[name].lowering.rule(Tokens(), *operands, **PARAMS.get(name, {}))
    assert out in operands or (out.startswith("<") and out.endswith(">")
                               and out.count("<") == 1), out


@pytest.mark.parametrize("name", _built_in(core.INDEX_MAP))
def test_every_index_map_writes_through_the_table(name):
    """Layout rules return index expressions the table wrote (or the output's own indices)."""
    prim = core.PRIMITIVES[name]
    example = {"reshape": lambda x: jnp.reshape(x, (6, 4)),
               "transpose": lambda x: jnp.transpose(x),
               "broadcast_to": lambda x: jnp.broadcast_to(x[:1], (4, 6)),
               "slice": lambda x: x[1:3, ::2],
               "pad_slice": lambda x: prim(x, shape=(5, 13), slices=((1, 5, 1), (0, 12, 2))),
               "concatenate": lambda x: jnp.concatenate([x, 2 * x], axis=1),
               "windows": lambda x: prim(x, axes=(1,), taps=(0,), strides=(1,),
                                         dilation=(1,), sizes=(3,)),
               "windows_transpose": lambda x: prim(x, axes=(1,), taps=(0,), strides=(2,),
                                                   dilation=(1,), sizes=(14,))}
    g = jitgraph.make_graph(example[name])(np.zeros((4, 6)))
    (node,) = [n for n in g.nodes if n.prim is prim]
    ctx, idx = Tokens(), ["i0", "i1"]
    if name == "concatenate":      # the index into each operand, and where it is read
        res = prim.lowering.rule(ctx, idx, [v.aval for v in node.inputs], node.out.aval,
                                 **node.params)
        exprs, cond = [e for in_idx, _, _ in res for e in in_idx], None
    else:
        res = prim.lowering.rule(ctx, idx, node.inputs[0].aval, node.out.aval, **node.params)
        exprs, cond = res if prim.lowering.masked else (res, None)
    for e in list(exprs) + ([cond] if cond is not None else []):
        assert e in idx or (e.startswith("<") and e.count("<") == 1), (name, e)


def _body_lines(f, ctx, *args) -> list:
    plan = make_plan(lower(jitgraph.make_graph(f)(*args)), ctx)
    (k,) = [s for s in plan.steps if isinstance(s, LoopKernel)]
    return [line for st in k.body.stages for line in st.lines]


class CStyle(CpuContext):
    """A table overriding three entries, the way a C-like target would."""

    operators = {**Syntax.operators, "and": "{} && {}"}

    def select(self, cond, x, y):
        return f"({cond} ? {x} : {y})"

    def assign(self, target, value):
        s = Statement(f"auto {target} = {value};")
        s.target, s.value = target, value
        return s


def test_an_overridden_entry_changes_every_use():
    def f(x):
        return jnp.where((x > 0) & (x < 2), x, 2.0 * x)
    x = np.linspace(-1, 3, 8)
    base = _body_lines(f, CpuContext(), x)
    c = _body_lines(f, CStyle(), x)
    assert len(base) == len(c)
    assert any(" if " in line for line in base) and not any(" if " in line for line in c)
    assert any(" ? " in line for line in c) and any(" && " in line for line in c)
    assert all(line.startswith("auto ") and line.endswith(";") for line in c)
    # the statements say what they assign: the same names in both
    assert [line.target for line in c] == [line.target for line in base]


def _eval(expr: str, **names):
    return eval(expr, {"np": np, "math": __import__("math"), **NARROW}, names)  # noqa: S307


@pytest.mark.parametrize("value,dtype", [(0.1, np.float32), (-2.5, np.float64), (np.inf, np.float32),
                                         (-np.inf, np.float64), (7, np.int32), (-3, np.int64),
                                         (True, np.bool_), (1.5, np.float16)])
def test_literals_mean_their_value(value, dtype):
    got = _eval(Syntax().literal(value, dtype))
    if np.dtype(dtype) == np.float16:       # kernels hold a 16-bit float's bits
        assert got == np.asarray(value, np.float16).view(np.uint16)
    else:
        assert got == np.asarray(value, dtype) and np.asarray(got).dtype == np.dtype(dtype)
    assert np.isnan(_eval(Syntax().literal(np.nan, np.float32)))


@pytest.mark.parametrize("src,dst", [(np.float64, np.float16), (np.float32, ml_dtypes.bfloat16),
                                     (np.float16, np.float64), (np.int64, np.float16),
                                     (ml_dtypes.bfloat16, np.float32), (np.float64, np.int32)])
def test_conversions_round_as_numpy(src, dst):
    xs = np.array([0.1, -1.75, 3.0e3, 65519.0, 1.0 / 3.0, -7.0]).astype(src)
    expr = Syntax().convert("x", np.dtype(src), np.dtype(dst))
    for x in xs:
        held = x.view(np.uint16) if np.dtype(src).itemsize == 2 and np.dtype(src).kind == "f" \
            or np.dtype(src) == ml_dtypes.bfloat16 else x
        got = _eval(expr, x=held)
        want = np.asarray(x).astype(dst)
        if np.dtype(dst).itemsize == 2 and np.dtype(dst).kind in "fV" or \
                np.dtype(dst) == ml_dtypes.bfloat16:
            assert int(got) == int(want.view(np.uint16)), (x, expr)
        else:
            assert got == want, (x, expr)
