"""Each primitive's code-generation record (``core.Lowering``): every primitive has one that
fits its kind, the backends' scalar routines come from the records, a user primitive with an
expression rule fuses like a built-in one, and the compiler keeps no tables of op names."""
from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import core
from jitgraph.compiler.backends import cpu as cpu_backend, cuda as cuda_backend
from jitgraph.compiler.fusion import HostStep, LoopKernel
from jitgraph.compiler.kernel_text import import_lines
from jitgraph.core import (ARG_REDUCE, GATHER, HOST, INDEX_MAP, MATMUL, REDUCE, SCALAR,
                           SCATTER_ADD, Lowering, returns_input_type, scalar_function)
from jitgraph.targets import capabilities

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)

# the lowerings a primitive of each kind may have
FITS = {"elementwise": {SCALAR, HOST}, "layout": {INDEX_MAP}, "index": {GATHER},
        "reduce": {REDUCE, ARG_REDUCE}, "matmul": {MATMUL}, "opaque": {HOST, SCATTER_ADD},
        "call": {HOST}}


@pytest.mark.parametrize("name", sorted(core.PRIMITIVES))
def test_every_primitive_has_a_record_fitting_its_kind(name):
    prim = core.PRIMITIVES[name]
    low = prim.lowering
    assert isinstance(low, Lowering)
    assert low.kind in FITS[prim.kind], (prim.kind, low.kind)
    assert callable(low.rule) == (low.kind in (SCALAR, INDEX_MAP))
    if low.kind == REDUCE:
        assert low.monoid in ("sum", "max", "min", "prod")
    elif low.kind == ARG_REDUCE:
        assert low.monoid in ("max", "min")
    else:
        assert low.monoid is None
    assert low.kind != INDEX_MAP or low.cost == 0        # layout ops move, never compute
    assert set(low.functions) <= {"cpu", "cuda"}     # registered targets' names


@pytest.mark.parametrize("name, backend, dtype, approx, want", [
    ("max", "cpu", F64, True, "maximum"),
    ("min", "cuda", F32, False, "minimum"),
    ("pow", "cpu", F32, True, "power"),        # exp2's rule calls fn("pow") too
    ("pow", "cuda", F64, False, "power"),
    ("exp", "cpu", F32, True, "exp_f32"),
    ("exp", "cpu", F64, True, "exp_f64"),
    ("exp", "cpu", F64, False, "math.exp"),
    ("exp", "cpu", I64, True, "math.exp"),     # approximations take floats only
    ("exp", "cuda", F32, False, "math.exp"),
    ("logistic", "cpu", F32, False, "logistic"),
    ("logistic", "cpu", F32, True, "logistic_f32"),
    ("logistic", "cuda", F32, False, "logistic_f32"),
    ("logistic", "cuda", F64, False, "logistic_f64"),
    ("sin", "cpu", F32, True, "math.sin"),
    ("sin", "cuda", F32, False, "math.sin"),
    ("erf", "cuda", F32, False, "erf"),
    ("asin", "cpu", F64, True, "math.asin"),   # a math routine no primitive is named after
])
def test_scalar_function(name, backend, dtype, approx, want):
    assert scalar_function(name, backend, dtype, approx) == want


def test_returns_input_type():
    assert returns_input_type("tanh", "cpu", True)
    assert not returns_input_type("tanh", "cpu", False)
    assert not returns_input_type("tanh", "cuda", True)
    assert not returns_input_type("sin", "cpu", True)
    assert not returns_input_type("asin", "cpu", True)
    with pytest.raises(ValueError):
        scalar_function("exp", "tpu", F32, False)


def _record_routines(backend: str) -> set[str]:
    """The routines the records make ``backend``'s kernels call by a bare name (not
    ``math.``/``np.``): what its module header must import."""
    names = set()
    for prim in core.PRIMITIVES.values():
        fn = prim.lowering.functions.get(backend)
        if fn is not None and "." not in fn:
            names |= {fn.format(f="f32"), fn.format(f="f64")}
    if capabilities(backend).approx_functions:
        names |= set(core.approximations())
    return names


def _imported(header: str) -> set[str]:
    tree = ast.parse(header)
    return {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for a in node.names}


@pytest.mark.parametrize("backend, header", [("cpu", cpu_backend.HEADER),
                                             ("cuda", cuda_backend.HEADER)], ids=["cpu", "cuda"])
def test_each_header_imports_every_routine_the_records_name(backend, header):
    """The approximations' import is generated from the records; the other routines'
    (kernels/scalar.py, kernels/cuda_scalar.py) are checked here against them."""
    assert _record_routines(backend) <= _imported(header), \
        _record_routines(backend) - _imported(header)
    assert {"maximum", "erf"} <= _record_routines(backend)      # (the scan finds them)


def test_the_approximations_import_follows_the_records():
    assert core.approximations()[:2] == ["exp_f32", "exp_f64"]
    assert import_lines("jitgraph.kernels.fastmath", core.approximations()) in cpu_backend.HEADER
    assert import_lines("m", ["a", "b"]) == "from m import (a, b)\n"
    wrapped = import_lines("m", [f"name{i}" for i in range(20)], width=40).splitlines()
    assert len(wrapped) > 2 and all(len(line) <= 40 for line in wrapped)
    assert all(line.startswith("    ") for line in wrapped[1:])


def _cube(x):
    return x * x * x


def _rule(c, x):
    return f"({x} * {x} * {x})"


cube_p = jitgraph.defprimitive("test_lowering_cube", _cube, kind="elementwise", codegen=_rule,
                               vjp=lambda g, out, x: (3.0 * g * x * x,))
host_cube_p = jitgraph.defprimitive("test_lowering_host_cube", _cube, kind="elementwise")


def test_user_primitive_with_an_expression_rule_fuses():
    """``defprimitive(codegen=rule)`` gives a scalar record: it fuses with its neighbours."""
    assert cube_p.lowering.kind == SCALAR and cube_p.codegen is _rule
    assert host_cube_p.lowering.kind == HOST

    def f(x):
        return jnp.sum(cube_p(jnp.sin(x)) * 2.0, axis=1)

    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    lo = jitgraph.jit(f).lower(x)
    assert [type(s) for s in lo.plan.steps] == [LoopKernel], lo.plan.steps
    np.testing.assert_allclose(np.asarray(jitgraph.jit(f)(x)),
                               (_cube(np.sin(x)) * 2.0).sum(axis=1), rtol=1e-5)
    hosted = jitgraph.jit(lambda x: host_cube_p(jnp.sin(x)) * 2.0).lower(x)
    assert any(isinstance(s, HostStep) for s in hosted.plan.steps)


# ------------------------------------------------------------------ no op-name tables
COMPILER = pathlib.Path(jitgraph.__file__).parent / "compiler"
# reduction monoids share words with primitives ("max"): they are not op names
MONOIDS = {"sum", "max", "min", "prod", "argmax", "argmin"}


def _op_names(elts) -> list[str]:
    return [e.value for e in elts if isinstance(e, ast.Constant)
            and e.value in core.PRIMITIVES and e.value not in MONOIDS]


def _name_tables(tree: ast.Module) -> list[str]:
    """Dict and set literals naming two or more ops, module-level tuples or lists too, and the
    op name ``scatter_add`` anywhere: facts about ops that belong on their records."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            names = _op_names(k for k in node.keys if k is not None)
        elif isinstance(node, ast.Set):
            names = _op_names(node.elts)
        elif isinstance(node, ast.Constant) and node.value == "scatter_add":
            names = ["scatter_add", "scatter_add"]
        else:
            continue
        if len(names) >= 2:
            found.append(f"line {node.lineno}: {names}")
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and \
                isinstance(stmt.value, (ast.Tuple, ast.List)):
            names = _op_names(stmt.value.elts)
            if len(names) >= 2:
                found.append(f"line {stmt.lineno}: {names}")
    return found


@pytest.mark.parametrize("path", sorted(COMPILER.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(COMPILER)))
def test_compiler_has_no_tables_of_op_names(path):
    assert _name_tables(ast.parse(path.read_text())) == []


def test_the_table_scan_finds_tables():
    found = _name_tables(ast.parse('_COST = {"exp": 4, "tanh": 4}\n'
                                   '_KEEPS = ("add", "sub")\n'
                                   'def f(n):\n    return n.prim.name == "scatter_add"\n'))
    assert len(found) == 3, found
    assert _name_tables(ast.parse('IDENTITY = {"sum": 0, "max": 1, "min": 2}\n')) == []
