"""The compiler pipeline: one entry point, printable stages, backends behind one protocol and
the compiler's state in one object."""
import ast
import dataclasses
import pathlib
import types

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import pipeline
from jitgraph.compiler.backends import TARGETS, base
from jitgraph.compiler.backends.cpu import CpuCodegen, CpuContext
from jitgraph.compiler.backends.cpu_program import CpuProgram
from jitgraph.compiler.backends.cuda import CudaCodegen, CudaContext
from jitgraph.compiler.backends.cuda_program import CudaProgram
from jitgraph.compiler.state import STATE, CompilerState
from jitgraph.interpreter import run
from jitgraph.targets import Capabilities, capabilities, register_target, target_named

COMPILER = pathlib.Path(jitgraph.__file__).parent / "compiler"


def _loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2, axis=-1)


def _args():
    rng = np.random.default_rng(1)
    return rng.standard_normal((6, 3)), rng.standard_normal((4, 6))


def test_compile_is_the_one_entry_point_and_matches_the_reference():
    w, x = _args()
    graph = jitgraph.make_graph(_loss)(w, x)
    exe = pipeline.compile(graph, "cpu", pipeline.CompileOptions(single_output=True))
    out = exe.make_runner([w.dtype, x.dtype], graph.out_tree)(w, x)
    np.testing.assert_allclose(out, run(graph, [w, x])[0], rtol=1e-12)
    assert isinstance(exe, CpuProgram) and not exe.native and exe.symbols == ()


def test_each_stage_is_a_function_of_the_previous_one():
    w, x = _args()
    graph = jitgraph.make_graph(jitgraph.grad(lambda w, x: jnp.sum(_loss(w, x))))(w, x)
    target = pipeline.target_of("cpu")
    options = pipeline.CompileOptions()
    lowered = pipeline.lower(graph)
    ctx = target.context(options)
    plan = pipeline.fuse(lowered, ctx)
    gen = pipeline.generate(plan, target, ctx, options)
    exe = pipeline.load(gen, target, options, 0.0)
    assert gen.plan is plan and gen.module.kernels and "def program_" in gen.module.source
    assert exe.source == jitgraph.jit(jitgraph.grad(lambda w, x: jnp.sum(_loss(w, x)))).lower(
        w, x).source


def test_lower_shows_every_stage():
    w, x = _args()
    lo = jitgraph.jit(_loss).lower(w, x)
    assert list(lo.stages) == ["graph", "lowered", "plan", "memory", "source"]
    assert "tanh" in lo.show("graph") and "tanh" in lo.show("lowered")
    assert "LoopKernel" in lo.show("plan") and "MatmulStep" in lo.show("plan")
    assert "output" in lo.show("memory")
    assert lo.show("source") == lo.source and "{H}" not in lo.source
    with pytest.raises(KeyError, match="one of"):
        lo.show("nonsense")


def test_unknown_target_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown compiler target 'tpu'"):
        pipeline.target_of("tpu")


def test_backends_share_a_protocol_not_an_ancestor():
    assert {"cpu", "cuda"} <= set(TARGETS)
    for a, b in [(CpuCodegen, CudaCodegen), (CpuContext, CudaContext), (CpuProgram, CudaProgram)]:
        assert not issubclass(a, b) and not issubclass(b, a)
    for codegen in (CpuCodegen, CudaCodegen):
        for method in ("loop_kernel", "row_kernel", "scatter_kernel", "add_kernel",
                       "kernel_call", "product_call", "host_call", "module"):
            assert callable(getattr(codegen, method)), (codegen, method)
    for program in (CpuProgram, CudaProgram):
        for method in ("make_runner", "profiled", "numba_compiles"):
            assert callable(getattr(program, method)), (program, method)
    for target in (TARGETS["cpu"], TARGETS["cuda"]):
        for method in ("check_usable", "synchronize", "context", "codegen", "call_path",
                       "decisions", "load"):
            assert callable(getattr(target, method))
        assert isinstance(target.capabilities, Capabilities) and target.aliases is not None
        assert dataclasses.is_dataclass(target.options_type)
    # what the protocol declares is what the targets have
    declared = {n for n in vars(base.Target) if not n.startswith("_")} | \
        set(base.Target.__annotations__)
    for target in (TARGETS["cpu"], TARGETS["cuda"]):
        assert all(hasattr(target, n) for n in declared), declared
    assert CudaProgram.native is False and CudaProgram.symbols == ()


def test_old_monolithic_modules_are_gone():
    for name in ("runtime.py", "runtime_cuda.py", "codegen_cpu.py", "codegen_cuda.py"):
        assert not (COMPILER / name).exists(), name


def _module_level_mutables(path: pathlib.Path) -> list[str]:
    """Names bound at module level to a fresh list/dict/set, or rebound by ``global``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            mutable = isinstance(value, (ast.List, ast.Dict, ast.Set)) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", "") in
                ("list", "dict", "set"))
            if mutable:
                found += [t.id for t in targets if isinstance(t, ast.Name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [f"global {n}" for n in node.names]
    return found


# registries (filled once at import, like core.PRIMITIVES) and read-only tables
_ALLOWED = {"HOST_LOWERINGS", "TARGETS", "__all__"}


def test_compiler_state_lives_in_one_object():
    found = {}
    for path in sorted(COMPILER.rglob("*.py")):
        names = [n for n in _module_level_mutables(path) if n not in _ALLOWED
                 and not n.isupper() and not n.startswith("_IR")]
        if names:
            found[str(path.relative_to(COMPILER))] = names
    assert not found, f"module-level mutable state outside compiler/state.py: {found}"
    assert isinstance(STATE, CompilerState)


def test_a_compile_fills_the_state():
    w, x = _args()
    jitgraph.jit(_loss)(w, x)
    assert STATE.fingerprint and STATE.disk_cache is not None
    assert set(STATE.compile_stats) >= {"worker_compiles", "local_compiles", "worker_failures"}


def test_options_are_common_plus_each_targets_own():
    opts = base.CompileOptions(fastmath=True, donate=(0,))
    assert not opts.profile and opts.donate == (0,) and opts.target is None
    assert base.own_options(opts, base.CpuOptions).approx_math       # the defaults
    assert base.own_options(opts, base.CudaOptions).cuda_graph
    cpu_only = {f.name for f in dataclasses.fields(base.CpuOptions)}
    cuda_only = {f.name for f in dataclasses.fields(base.CudaOptions)}
    common = {f.name for f in dataclasses.fields(base.CompileOptions)}
    assert not (cpu_only & cuda_only) and not (common & (cpu_only | cuda_only))
    # jit hands every target the settings it has; each keeps those it declares
    settings = {"allow_native": True, "stream": "s", "cuda_graph": False}
    assert base.options_from(base.CpuOptions, settings) == base.CpuOptions(allow_native=True)
    assert base.options_from(base.CudaOptions, settings) == base.CudaOptions(False, "s")
    changed = base.with_own(opts, base.CpuOptions, symbols=(("n", 0, 0),))
    assert changed.target.symbols == (("n", 0, 0),) and opts.target is None
    with pytest.raises(TypeError, match="CudaOptions"):
        base.own_options(changed, base.CudaOptions)


def test_targets_are_asked_not_named():
    assert capabilities("cpu").dynamic_shapes and not capabilities("cuda").dynamic_shapes
    assert capabilities("cuda").device_arrays and not capabilities("cpu").device_arrays
    assert target_named("gpu") is target_named("cuda:0") is TARGETS["cuda"]
    with pytest.raises(ValueError, match="already names target 'cuda'"):
        register_target(types.SimpleNamespace(name="other", aliases=("gpu",),
                                              capabilities=Capabilities()))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        jitgraph.jit(_loss, device="tpu")
    with pytest.raises(ValueError, match="stream= is for programs that run on a stream"):
        jitgraph.jit(_loss, stream=object())
    with pytest.raises(ValueError, match="fixed sizes only"):
        pipeline.compile_dynamic(jitgraph.make_graph(_loss)(*_args()), None, {},
                                 pipeline.CompileOptions(), target="cuda")


_NAME_TESTS = ("jit.py", "device.py", "core.py", "compiler/settings.py", "compiler/pipeline.py")


@pytest.mark.parametrize("name", _NAME_TESTS)
def test_no_module_compares_target_names(name):
    """jit, device_put, the compile settings, the pipeline and core ask a target's
    capabilities; none compares a device string with "cpu" or "cuda"."""
    tree = ast.parse((COMPILER.parent / name).read_text())
    found = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
             and any(isinstance(c, ast.Constant) and c.value in ("cpu", "cuda", "gpu")
                     for c in [node.left, *node.comparators])]
    assert not found, f"{name}: lines {found} compare target names"
