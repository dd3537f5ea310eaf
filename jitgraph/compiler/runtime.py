"""Runtime: turn an optimized graph into a callable program, and call it with little overhead."""
from __future__ import annotations

import gc
import hashlib
import math
import os
import sys
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..core import Graph, Node, Var
from .loops import lower_control_flow
from ..passes import optimize
from . import compile_pool, native
from .codegen_cpu import CpuCodegen, CpuContext, finish_module
from .disk_cache import MODULE_PREFIX, DiskCache, load_helpers_without_refresh
from .fusion import HostStep, make_plan

_DISK_CACHE: DiskCache | None = None

# LLVM optimization level for generated kernels (Numba's default is 3). Measured here on the
# 784-512-512-10 training step: level 1 compiles in 2.6-2.8 s of CPU time instead of 3.9-4.1 s,
# with no measurable loss in the elementwise, row-kernel or training-step benchmarks (the
# loops still vectorize). A user's NUMBA_OPT, where set, wins.
COMPILE_OPT_LEVEL = 1


@contextmanager
def compile_settings(device: str = "cpu"):
    """Numba settings while a generated program compiles (its first call: Numba compiles
    lazily): the optimization level, and the garbage collector off (``no_gc``). Holds Numba's
    compiler lock, so other threads' compiles keep their settings. CUDA kernels keep NVVM's
    own optimization level."""
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock
    if "NUMBA_OPT" in os.environ or device != "cpu":
        with no_gc():
            yield
        return
    with global_compiler_lock, no_gc():
        old = config.OPT
        config.OPT = type(old)(COMPILE_OPT_LEVEL)
        try:
            yield
        finally:
            config.OPT = old


@contextmanager
def no_gc():
    """The cyclic garbage collector off while Numba compiles. Why: a compile allocates
    hundreds of thousands of objects, which start collections that traverse everything Numba
    keeps (its typing and lowering registries): 12 % of a compiling process's time was in the
    collector, and the digits example's step compiled in 2.1-2.9 s instead of 2.5-3.6 s with it
    off (three interleaved runs). The compile's garbage is collected after, as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def disk_cache() -> DiskCache:
    global _DISK_CACHE
    d = os.environ.get("JITGRAPH_CACHE_DIR")
    if _DISK_CACHE is None or (d and str(_DISK_CACHE.directory) != str(d)):
        _DISK_CACHE = DiskCache(d or None)
    return _DISK_CACHE


def _codegen_fingerprint() -> str:
    """Hash of the code that generated modules call, so a change there invalidates the cache."""
    import jitgraph
    from .. import kernels  # type: ignore[attr-defined]
    h = hashlib.sha256(jitgraph.__version__.encode())
    kdir = os.path.dirname(kernels.__file__)
    for name in sorted(os.listdir(kdir)):
        if name.endswith(".py"):
            with open(os.path.join(kdir, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


_FINGERPRINT: str | None = None


def inline_calls(g: Graph) -> Graph:
    """Replace ``custom_vjp_call`` nodes by their forward graphs (the compiler needs no calls)."""
    if not any(n.prim.kind == "call" for n in g.nodes):
        return g
    nodes: list[Node] = []
    consts = dict(g.consts)
    subst: dict[Var, Var] = {}
    for n in g.nodes:
        ins = [subst.get(v, v) for v in n.inputs]
        if n.prim.kind != "call":
            nodes.append(Node(n.prim, ins, n.params, n.outs, n.source))
            continue
        sub = inline_calls(n.params["_graph"])
        env = dict(zip(sub.inputs, ins))
        for v, c in sub.consts.items():
            nv = Var(v.aval)
            consts[nv] = c
            env[v] = nv
        for m in sub.nodes:
            outs = [Var(o.aval) for o in m.outs]
            nodes.append(Node(m.prim, [env[v] for v in m.inputs], m.params, outs, m.source))
            env.update(zip(m.outs, outs))
        for o, so in zip(n.outs, sub.outputs):
            subst[o] = env[so]
    outs = [subst.get(v, v) for v in g.outputs]
    return optimize(Graph(g.inputs, nodes, outs, consts, g.in_tree, g.out_tree))


class CompiledProgram:
    """A compiled graph: its plan, generated source, kernels and Numba driver. ``make_runner``
    builds the call path ``jit`` uses.

    Each call allocates only its outputs (fresh NumPy arrays, or a donated input's buffer);
    intermediates live in scratch buffers kept between calls (a pool per size, so concurrent
    callers never share them). ``symbols`` name the sizes that are runtime arguments
    (``(name, input index, axis)``): such a program serves every size along those dims.
    """

    def __init__(self, graph: Graph, plan, source: str, kernels, driver, const_values,
                 info: dict, was_on_disk: bool, module, compile_seconds: float,
                 runner_template: str, symbols: Sequence = ()):
        self.graph = graph
        self.plan = plan
        self.source = source
        self.kernels = kernels
        self.driver = driver
        self.const_values = tuple(const_values)
        self.donated = info["donated"]
        self.blas_calls = tuple(info.get("blas_calls", ()))   # what compile_pool precompiles
        self.was_on_disk = was_on_disk
        self.module = module
        self.compile_seconds = compile_seconds
        self.runner_template = runner_template
        self.symbols = tuple(symbols)
        self.out_specs = [(n, np.dtype(d)) for _, n, d in info["out_specs"]]
        self.scratch_specs = [(n, np.dtype(d)) for _, n, d in info["scratch_specs"]]
        self.sources = info["output_sources"]
        self._scratch_pools: dict = {}
        self.kernel_modules: list = []
        self.options: dict = {}          # how it was generated (fastmath, donate, ...)
        self._profiled: dict = {}        # input shapes (None: self.graph's) -> profiled
        self.native = False              # runs from a native bundle, without Numba
        self.bundle_path = None          # where to write its native bundle after a call
        self.bundle_status = ""          # what became of that bundle
        self.bundle_file = None          # the bundle it was run from or written to
        self.driver_def = ""             # the driver's own source (a Python driver)
        self._runner_namespaces: list = []

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable:
        """A call path specialised to this program: checks, allocation and the driver call as
        straight-line Python (the per-call overhead of a cached ``jit`` call is this function)."""
        ns: dict = {"ndarray": np.ndarray, "empty": np.empty, "conv": _conv,
                    "pools": self._scratch_pools, "pool": self._scratch_pools.setdefault((), []),
                    "driver": self.driver, "unflatten": out_tree.unflatten,
                    "overlaps": _overlaps}
        if self.bundle_path is not None:
            ns["driver"] = self._driver_then_export
            self._runner_namespaces.append(ns)
        for i, d in enumerate(in_dtypes):
            ns[f"D{i}"] = np.dtype(d)
        for j, (_, d) in enumerate(self.out_specs):
            ns[f"OD{j}"] = d
        for j, (_, d) in enumerate(self.scratch_specs):
            ns[f"SD{j}"] = d
        for j, c in enumerate(self.const_values):
            ns[f"C{j}"] = c
        exec(self.runner_template, ns)
        run = ns["run"]
        run.source = self.runner_template
        return run

    def _driver_then_export(self, *args) -> None:
        """The driver's first call, then the native bundle written on a background thread
        (see ``native.py``); the runners then call the driver directly."""
        self.driver(*args)
        if self.bundle_path is None:
            return
        for ns in self._runner_namespaces:
            ns["driver"] = self.driver
        self._runner_namespaces.clear()
        _export_in_background(self)
        self.bundle_path = None

    def profiled(self, graph: Graph | None = None) -> "CompiledProgram":
        """The same program (at the sizes of ``self.graph``, or of ``graph``: the same
        function traced at the sizes of a call a program with runtime sizes serves) with a
        driver that records a timestamp after each step in ``module.profile_marks`` (see
        ``jitgraph.profile``)."""
        key = None if graph is None else tuple(v.aval.shape for v in graph.inputs)
        if key not in self._profiled:
            options = {k: v for k, v in self.options.items() if k != "symbols"}
            gen = generate(self.graph if graph is None else graph, profile=True, **options)
            prog = load(gen, time.perf_counter())
            prog.module.profile_marks = []
            prog.module.profile_clock = time.perf_counter
            prog.options = options
            self._profiled[key] = prog
        return self._profiled[key]

    def numba_compiles(self) -> int:
        """How many functions Numba really compiled (not loaded from its cache) for this
        program: its driver and its kernels, which live in modules of their own."""
        if self.native:
            return 0
        from .disk_cache import numba_compile_count
        return sum(numba_compile_count(m) for m in [self.module, *self.kernel_modules])


def runner_template(graph: Graph, info: dict, n_consts: int, symbols: Sequence = (),
                    single_output: bool = False) -> str:
    """Source of the call path (see ``CompiledProgram.make_runner``), with every size written
    as a literal, so programs whose sizes are runtime arguments can fit it like the module.
    A single output array is returned as it is, with no pytree to rebuild."""
    n_in = len(graph.inputs)
    xs = [f"x{i}" for i in range(n_in)]
    lines = [f"def run({', '.join(xs)}):"]
    for i in range(n_in):
        lines.append(f"    if x{i}.__class__ is not ndarray or x{i}.dtype is not D{i} or "
                     f"not x{i}.flags.c_contiguous or not x{i}.flags.writeable: "
                     f"x{i} = conv(x{i}, D{i})")
    donated = sorted(set(info["donated"].values()))
    if donated and n_in > 1:
        # a buffer updated in place must not also be read through another argument
        lines.append(f"    bad = overlaps(({', '.join(xs)},), {tuple(donated)!r})")
        lines.append("    if bad:")
        lines += [f"        if {i} in bad: x{i} = x{i}.copy()" for i in donated]
    lines += [f"    {name} = x{i}.shape[{axis}]" for name, i, axis in symbols]
    out_shapes = {j: v.aval.shape for (kind, j), v in zip(info["output_sources"], graph.outputs)
                  if kind == "out"}
    outs = []
    for j in range(len(info["out_specs"])):
        lines.append(f"    o{j} = empty({out_shapes[j]!r}, OD{j})")
        outs.append(f"o{j}")
    cs = [f"C{j}" for j in range(n_consts)]
    specs = info["scratch_specs"]
    sc = [f"s[{j}]" for j in range(len(specs))]
    if sc:
        key = f"({''.join(name + ', ' for name, _, _ in symbols)})"
        new = ", ".join(f"empty({n}, SD{j})" for j, (_, n, _) in enumerate(specs))
        p = "pool" if not symbols else "p"
        if symbols:
            lines.append(f"    p = pools.get({key})")
        lines.append(f"    s = {p}.pop() if {p} else [{new}]")
    lines.append(f"    driver({', '.join(xs + cs + outs + sc)})")
    if sc:
        lines.append("    pool.append(s)" if not symbols else
                     f"    pools.setdefault({key}, []).append(s) if len(pools) < 64 else None")
    res = []
    for (kind, j), v in zip(info["output_sources"], graph.outputs):
        shp = v.aval.shape
        if kind == "out":
            res.append(f"o{j}")
        elif kind == "input":
            res.append(f"x{j}.reshape({shp!r})")
        else:
            res.append(f"C{j}.reshape({shp!r}).copy()")
    lines.append(f"    return {res[0]}" if single_output else
                 f"    return unflatten([{', '.join(res)}])")
    return "\n".join(lines)


@dataclass
class Generated:
    """Everything code generation produced for one graph, before Numba compiles anything."""
    graph: Graph
    plan: Any
    template: str
    kernels: list
    driver: str
    info: dict
    decisions: list
    runner: str


def generate(graph: Graph, *, fastmath: bool = False, donate: Sequence[int] = (),
             approx_math: bool = True, symbols: Sequence = (), decisions=None,
             single_output: bool = False, profile: bool = False,
             compiled_driver: bool = False) -> Generated:
    """Fuse ``graph`` and generate its module and call-path templates (no compiling)."""
    graph = lower_control_flow(inline_calls(graph))
    ctx = CpuContext(approx_math=approx_math)
    plan = make_plan(graph, ctx)
    gen = CpuCodegen(plan, ctx, fastmath=fastmath, symbols=symbols, decisions=decisions,
                     profile=profile, compiled_driver=compiled_driver)
    template, kernels, driver, info = gen.module(set(donate))
    runner = runner_template(plan.graph, info, len(plan.const_args), symbols, single_output)
    return Generated(plan.graph, plan, template, kernels, driver, info, gen.made_decisions, runner)


def load(gen: Generated, t0: float, symbols: Sequence = (),
         allow_native: bool = False) -> CompiledProgram:
    """Name, write or find in the disk cache, import and wrap a generated program: each kernel
    is its own cache entry (shared by every program computing it), the driver another.
    ``allow_native``: where this process has not imported Numba, run the program from its
    native bundle (``native.py``) when the disk cache has one; otherwise write one after the
    program's first call."""
    global _FINGERPRINT
    fin = finish_module(gen.template, gen.kernels, gen.driver)
    if _FINGERPRINT is None:
        _FINGERPRINT = _codegen_fingerprint()
    cache = disk_cache()
    bundle = None
    if allow_native and native.enabled() and not any(
            isinstance(s, HostStep) for s in gen.plan.steps):
        bundle = cache.directory / (cache.entry_name(fin.driver_source, _FINGERPRINT) + ".native")
        if "numba" not in sys.modules:
            program = _load_native(gen, fin, bundle, t0, symbols)
            if program is not None:
                return program
    program = _load_with_numba(gen, fin, cache, t0, symbols)
    if bundle is not None and program.module.__file__ and \
            os.path.dirname(program.module.__file__) == str(cache.directory) and \
            not _intact(bundle):
        program.bundle_path = bundle      # written after the first call (make_runner)
    return program


def _intact(path) -> bool:
    """Whether a native bundle exists and passes its checksum (else it is written again)."""
    try:
        with open(path, "rb") as f:
            return native.parse(f.read()) is not None
    except OSError:
        return False


_HELPERS_READY = False


def _load_with_numba(gen: Generated, fin, cache: DiskCache, t0: float,
                     symbols: Sequence) -> CompiledProgram:
    global _HELPERS_READY
    from ..kernels import blas, matmul  # type: ignore[attr-defined]
    if not _HELPERS_READY:
        # the driver calls these products itself: load them as fast as generated kernels
        load_helpers_without_refresh(matmul)
        _HELPERS_READY = True
    modules, on_disk, new = [], [], []
    for name, src, arg_types in fin.kernel_modules:
        m, hit = cache.load_module(src, key_extra=_FINGERPRINT)
        modules.append((name, m))
        on_disk.append(hit)
        if not hit and arg_types:
            new.append((len(src), (m, name, arg_types)))
    module, hit = cache.load_module(fin.driver_source, key_extra=_FINGERPRINT)
    on_disk.append(hit)
    if not all(on_disk):    # this process compiles: spare Numba's scipy.linalg import (0.3 s)
        blas.light_numba_blas_check()
    if len(new) >= compile_pool.MIN_KERNELS:
        # the driver's BLAS helpers first (each costs as much as a large kernel; where Numba's
        # cache has them, this only loads them), then kernels largest first (source length as
        # the cost), so whoever is free takes the next largest and the processes finish together
        helpers = [(matmul, name, types) for name, types in gen.info.get("blas_calls", ())]
        wait_for_bundles()
        _precompile(helpers + [job for _, job in sorted(new, key=lambda c: -c[0])])
    for name, m in modules:
        setattr(module, name, getattr(m, name))
    for s in gen.plan.steps:
        if isinstance(s, HostStep):
            setattr(module, f"host_{s.name}", _host_impl(s.node))
    driver = getattr(module, fin.driver_name)
    program = _program(gen, fin, driver, module, all(on_disk), t0, symbols)
    program.kernel_modules = [m for _, m in modules]
    return program


def _program(gen: Generated, fin, driver, module, on_disk: bool, t0: float,
             symbols: Sequence) -> CompiledProgram:
    consts = [np.ascontiguousarray(gen.graph.consts[v]).reshape(-1) for v in gen.plan.const_args]
    program = CompiledProgram(gen.graph, gen.plan, fin.source, gen.kernels, driver, consts,
                              gen.info, on_disk, module, time.perf_counter() - t0,
                              gen.runner, symbols)
    program.driver_def = fin.driver_source.rsplit("\n\n\n", 1)[1]
    return program


def _load_native(gen: Generated, fin, path, t0: float, symbols: Sequence):
    """The program run from its native bundle at ``path``, or None (no usable bundle)."""
    cache = disk_cache()
    data = cache.read_trusted(path)
    if data is None:
        return None
    # the modules the bundle was made from must be intact: a damaged or missing entry takes
    # the Numba path, which repairs it and warns (the bundle must not hide it)
    names = []
    digests = [cache.entry_name(src, _FINGERPRINT) for _, src, _ in fin.kernel_modules]
    for digest in digests + [path.stem]:        # the bundle is named by the driver's entry
        if cache.entry_status(digest) != "ok":
            return None
        names.append(MODULE_PREFIX + digest)
    fallback_program: list = []

    def numba_function(name: str):
        """The Numba dispatcher behind a bundle's function (for argument types it lacks)."""
        if not fallback_program:
            fallback_program.append(_load_with_numba(gen, fin, disk_cache(), time.perf_counter(),
                                                     symbols))
        prog = fallback_program[0]
        return prog.driver if name == fin.driver_name else getattr(prog.module, name)

    loaded = native.load(data, {"entry": path.name}, numba_function)
    if loaded is None:
        return None
    functions, driver_def = loaded
    if driver_def is None:
        driver = functions.get(fin.driver_name)
    else:
        ns = {"np": np, "math": math, **functions}
        exec(compile(driver_def, str(path), "exec"), ns)
        driver = ns.get(fin.driver_name)
    if driver is None:
        return None
    module = types.SimpleNamespace(__name__=names[-1], __file__=None, **functions)
    program = _program(gen, fin, driver, module, True, t0, symbols)
    program.kernel_modules = [types.SimpleNamespace(__name__=n) for n in names[:-1]]
    program.native, program.bundle_file = True, path
    return program


def export_native(program: "CompiledProgram", path) -> bool:
    """Write ``program``'s native bundle (after its first call: its functions are compiled
    for the argument types it passes them). False where it cannot have one."""
    from numba.core.dispatcher import Dispatcher
    module, driver = program.module, program.driver
    if isinstance(driver, Dispatcher):
        callees, driver_def = {driver.__name__: driver}, None
    else:
        callees = {}
        for name in driver.__code__.co_names:
            value = vars(module).get(name)
            if isinstance(value, Dispatcher):
                callees[name] = value
            elif value is not None and value is not np and value is not math:
                return False            # a Python callable (host step): not in a bundle
        driver_def = program.driver_def
    signatures: dict = {}
    for name, arg_types in program.blas_calls:      # the kernels/ products it calls
        signatures.setdefault(name, set()).add(compile_pool.numba_signature(arg_types))
    return native.export(str(path), callees, driver_def, {"entry": path.name}, signatures)


_EXPORTS: list = []         # bundle-writing threads not yet joined


def _export_in_background(program: CompiledProgram) -> None:
    """Write ``program``'s native bundle on a thread (LLVM compiles its wrappers in 10-50 ms,
    without the GIL), holding Numba's compiler lock (LLVM's context is not thread-safe).
    A bundle is an optimisation: failures are only recorded in ``program.bundle_status``."""
    path = program.bundle_file = program.bundle_path

    def run() -> None:
        from numba.core.compiler_lock import global_compiler_lock
        try:
            with global_compiler_lock:
                ok = export_native(program, path)
            program.bundle_status = "written" if ok else "not supported for this program"
        except Exception as exc:
            program.bundle_status = f"failed: {exc!r}"

    thread = threading.Thread(target=run, name="jitgraph-native-bundle")
    _EXPORTS.append(thread)
    thread.start()


def wait_for_bundles() -> None:
    """Join the bundle-writing threads (before forking compile workers, which need a process
    without other threads; and in tests)."""
    while _EXPORTS:
        _EXPORTS.pop().join()


def _precompile(new: list) -> None:
    """Compile the program's new kernels now, on this process and forked compile workers at
    once (``compile_pool``), instead of one after another in its first call."""
    def compile_one(job):
        module, name, arg_types = job
        with compile_settings("cpu"):
            getattr(module, name).compile(compile_pool.numba_signature(arg_types))
    compile_pool.precompile(new, compile_one)


def compile_dynamic(graph: Graph, trace_at: Callable, symbols: dict, *, fastmath: bool = False,
                    donate: Sequence[int] = (), single_output: bool = False,
                    t0: float | None = None) -> CompiledProgram:
    """Compile ``graph`` with the sizes ``symbols`` (name -> [(input, axis)]) as runtime
    arguments. ``trace_at(point)`` traces the same function with those sizes set to
    ``point``'s; the programs generated at ``dynamic.sample_points`` are fitted into one
    (``dynamic.generalize``). Loop layouts are decided at the sizes of ``graph``. Raises
    ``CannotGeneralize`` when the program's structure depends on the sizes."""
    from .dynamic import CannotGeneralize, generalize, sample_points
    t0 = time.perf_counter() if t0 is None else t0
    opts = dict(fastmath=fastmath, donate=donate, single_output=single_output)
    base = generate(graph, **opts)
    sym_list = [(name, group[0][0], group[0][1]) for name, group in symbols.items()]
    points = sample_points(dict.fromkeys(symbols, 0))
    gens = []
    for point in points:
        try:
            gens.append(generate(trace_at(point), symbols=sym_list, decisions=base.decisions,
                                 **opts))
        except IndexError:          # more loop kernels than at the first sizes
            raise CannotGeneralize("the fusion plan depends on the sizes") from None
    first = gens[0]
    if any(isinstance(s, HostStep) for s in first.plan.steps):
        raise CannotGeneralize("host steps take fixed shapes")
    consts = [[g.graph.consts[v] for v in g.plan.const_args] for g in gens]
    if any(len(c) != len(consts[0]) or any(a.shape != b.shape or not np.array_equal(a, b)
                                           for a, b in zip(c, consts[0])) for c in consts):
        raise CannotGeneralize("constant arrays depend on the sizes")
    if any(len(g.kernels) != len(first.kernels) for g in gens):
        raise CannotGeneralize("the kernels depend on the sizes")
    for i, ks in enumerate(first.kernels):
        ks.source = generalize([g.kernels[i].source for g in gens], points)
    fitted = Generated(first.graph, first.plan, generalize([g.template for g in gens], points),
                       first.kernels, first.driver, first.info, first.decisions,
                       generalize([g.runner for g in gens], points))
    program = load(fitted, t0, sym_list, allow_native=True)
    program.graph, program.plan = base.graph, base.plan     # what lower() shows
    program.options = dict(opts, donate=tuple(donate))
    return program


def compile_graph(graph: Graph, *, fastmath: bool = False, donate: Sequence[int] = (),
                  approx_math: bool = True, single_output: bool = False) -> CompiledProgram:
    """Fuse, generate, compile (or load from the disk cache) and wrap ``graph``."""
    t0 = time.perf_counter()
    options = dict(fastmath=fastmath, donate=tuple(donate), approx_math=approx_math,
                   single_output=single_output)
    program = load(generate(graph, **options), t0, allow_native=True)
    program.options = options
    return program


def _overlaps(xs: tuple, donated: tuple) -> list:
    """The indices in ``donated`` whose argument may share memory with another of ``xs``.
    Arrays whose memory belongs to two different NumPy-allocated arrays cannot: that test is
    an identity check on owners found once per argument, where ``np.may_share_memory`` (used
    for everything else) costs about a microsecond a pair, which added up to most of a cached
    call with donated parameters."""
    owners = [_owner(x) for x in xs]
    bad = []
    for i in donated:
        ri, xi = owners[i], xs[i]
        for j, x in enumerate(xs):
            rj = owners[j]
            if j == i or (ri is not rj and ri is not None and rj is not None):
                continue
            if x is xi or np.may_share_memory(xi, x):
                bad.append(i)
                break
    return bad


def _owner(a: np.ndarray):
    """The NumPy array that allocated ``a``'s memory, or None where NumPy did not (a buffer,
    a memory map, foreign memory)."""
    while True:
        b = a.base
        if b is None:
            return a if a.flags.owndata else None
        if b.__class__ is not np.ndarray:
            return None
        a = b


def _conv(x, dtype):
    """An input as a writeable C-contiguous array of the compiled dtype (copies only if needed)."""
    a = np.asarray(x)
    if a.dtype != dtype or not a.flags.c_contiguous or not a.flags.writeable:
        a = np.array(a, dtype=dtype, order="C")
    return a


def _host_impl(node: Node):
    compiled = getattr(node.prim, "compiled_impl", None)
    if compiled is not None:        # control flow: a loop around compiled sub-programs
        return compiled(node)
    from ..core import run_impl

    def call(*arrays):
        res = run_impl(node.prim, arrays, node.params, [o.aval for o in node.outs])
        return res[0] if len(res) == 1 else tuple(res)
    return call
