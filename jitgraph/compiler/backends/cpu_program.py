"""The CPU executable: a generated program loaded through the disk cache (or from its native
bundle), and the straight-line call path ``jit`` runs on every cached call.
"""
from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
import types
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from ...arrays import Array
from ...compile_phases import phase
from ...core import Graph
from ...dtypes import as_stored, is_narrow, storage
from .. import (compile_pool, gemm_launchers, loop_ir, loop_objects, native, numba_patches,
               prebuilt, threaded)
from ..disk_cache import MODULE_PREFIX, DiskCache, numba_compile_count
from ..fusion import HostStep
from ..host import HOST_KERNEL_JOBS, host_impl, one_blas_thread
from ..memory import Buffers
from ..settings import compile_settings, disk_cache, fingerprint
from ..state import STATE
from .base import CpuOptions, own_options, with_own
from .cpu import finish_module


@dataclass
class KernelCounts:
    """Where a program's kernels came from (``JITGRAPH_LOG=compiles`` prints it): the kernels
    its steps call, how many distinct functions they are (steps whose kernels are equal up to
    names share one, ``cpu.finish_module``), and of those how many this process had loaded
    already, how many the disk cache had with their machine code, how many were new (or had
    only their source cached); then how many functions Numba compiled in compile workers and,
    after the first call, here; and how many kernels LLVM compiled without Numba."""
    steps: int
    distinct: int
    in_memory: int
    on_disk: int
    new: int
    in_workers: int
    compiled_before: int        # Numba compiles of these modules before this program loaded
    here: int | None = None     # set after the first call
    llvm: int = 0               # kernels compiled by LLVM alone (loop_ir), here or in workers

    def text(self) -> str:
        here = "?" if self.here is None else self.here
        return (f"kernels: {self.steps} steps -> {self.distinct} distinct "
                f"({self.steps - self.distinct} shared by structure): {self.in_memory} in "
                f"memory, {self.on_disk} on disk, {self.new} new; Numba compiled {here} "
                f"here, {self.in_workers} in workers; LLVM compiled {self.llvm}")


class CpuProgram:
    """A compiled graph on the CPU: its plan, generated source, kernels and Numba driver (an
    ``Executable``). ``make_runner`` builds the call path ``jit`` uses.

    Each call allocates only its outputs (fresh NumPy arrays, or a donated input's buffer);
    intermediates live in scratch buffers kept between calls (a pool per size, so concurrent
    callers never share them). ``symbols`` name the sizes that are runtime arguments
    (``(name, input index, axis)``): such a program serves every size along those dims.
    ``compile_again(graph, options)`` compiles a variant (the profiled one) the same way.
    """

    def __init__(self, gen, fin, driver, module, *, was_on_disk: bool, t0: float, options,
                 kernel_modules: Sequence = (), compile_again: Callable | None = None,
                 native_bundle=None, bundle_path=None):
        info = gen.module.info
        self.graph = gen.shown_graph
        self.plan = gen.shown_plan
        self.source = fin.source
        self.stages: dict = dict(gen.stages, source=fin.source)   # the finished text
        self.kernels = gen.module.kernels
        self.driver = driver
        self.driver_def = fin.driver_source.rsplit("\n\n\n", 1)[1]  # the driver's own source
        # (16-bit floats as their bits: what the kernels read, see kernels/narrow.py)
        self.const_values = tuple(as_stored(gen.graph.consts[v])
                                  for v in gen.plan.const_args)
        self.donated = info.donated
        self.blas_calls = tuple(info.blas_calls)   # what compile_pool precompiles
        self.split_products = info.split_products   # BLAS on one thread per call
        self.was_on_disk = was_on_disk
        self.module = module
        self.kernel_modules = list(kernel_modules)
        self.runner_template = gen.runner
        self.options = options            # how it was generated (CompileOptions)
        self.symbols = tuple(own_options(options, CpuOptions).symbols)
        self.out_specs = [(n, storage(d)) for _, n, d in info.out_specs]
        self.scratch_specs = [(n, storage(d)) for _, n, d in info.scratch_specs]
        # intermediates' slots as views of one allocation (``memory.Arena``), where sizes are
        # known ahead; None: an array each
        self.arena = None if self.symbols else info.arena
        self._arena_specs = [(name, n, storage(d)) for name, n, d in info.scratch_specs]
        self.sources = info.output_sources
        self.native = native_bundle is not None   # runs from a native bundle, without Numba
        self.bundle_file = native_bundle  # the bundle it was run from or written to
        self.bundle_path = bundle_path    # where to write its native bundle after a call
        self.bundle_status = ""           # what became of that bundle
        self.launches: list = []          # its threaded kernels' launchers (threaded.Launch)
        self.direct_objects: dict = {}    # entry symbol -> object code of loop_ir's kernels
        self.product_builtins: tuple = ()  # products its driver calls as gemm_launchers' built-ins
        self._compile_again = compile_again
        self._scratch_pools: dict = {}
        self._profiled: dict = {}        # input shapes (None: self.graph's) -> profiled
        self._runner_namespaces: list = []
        self.compile_seconds = time.perf_counter() - t0
        self.kernel_counts: KernelCounts | None = None

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable:
        """A call path specialised to this program: checks, allocation and the driver call as
        straight-line Python (the per-call overhead of a cached ``jit`` call is this function)."""
        ns: dict = {"ndarray": np.ndarray, "Array": Array, "empty": np.empty, "conv": _conv,
                    "arena": (None if self.arena is None else
                              functools.partial(self.arena.views, self._arena_specs)),
                    "pools": self._scratch_pools, "pool": self._scratch_pools.setdefault((), []),
                    "driver": self._pooled(self.driver), "unflatten": out_tree.unflatten,
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
        for k, v in enumerate(self.graph.outputs):
            ns[f"LD{k}"] = v.aval.dtype
        ns["U16"] = np.dtype(np.uint16)
        exec(self.runner_template, ns)
        run = ns["run"]
        run.source = self.runner_template
        return run

    def _pooled(self, driver: Callable) -> Callable:
        """The driver as the runner calls it: where the program splits its products over
        Numba's threads (``split_products``), inside ``one_blas_thread`` so that BLAS starts no
        threads of its own beside Numba's (set and restored per call, a few microseconds: the
        caller's own NumPy products keep their threads)."""
        if not self.split_products:
            return driver

        def pooled(*args):
            with one_blas_thread():
                driver(*args)
        return pooled

    def _driver_then_export(self, *args) -> None:
        """The driver's first call, then the native bundle written on a background thread
        (see ``native.py``); the runners then call the driver directly. (The first call too
        runs its split products with BLAS on one thread: with BLAS's own threads inside each of
        Numba's, the GPT tiny step's first call spent 0.28 s in products against 16 ms.)"""
        self._pooled(self.driver)(*args)
        if self.bundle_path is None:
            return
        for ns in self._runner_namespaces:
            ns["driver"] = self._pooled(self.driver)
        self._runner_namespaces.clear()
        _export_in_background(self)
        self.bundle_path = None

    def profiled(self, graph: Graph | None = None) -> "CpuProgram":
        """The same program (at the sizes of ``self.graph``, or of ``graph``: the same
        function traced at the sizes of a call a program with runtime sizes serves) with a
        driver that records a timestamp after each step in its module's ``profile_marks``
        (see ``jitgraph.profile``)."""
        key = None if graph is None else tuple(v.aval.shape for v in graph.inputs)
        if key not in self._profiled:
            options = with_own(replace(self.options, profile=True), CpuOptions, symbols=(),
                               decisions=None, allow_native=False)
            self._profiled[key] = self._compile_again(
                self.graph if graph is None else graph, options)
        return self._profiled[key]

    def numba_compiles(self) -> int:
        """How many functions Numba really compiled (not loaded from its cache) for this
        program: its driver and its kernels, which live in modules of their own."""
        if self.native:
            return 0
        return sum(numba_compile_count(m) for m in [self.module, *self.kernel_modules])


def runner_template(graph: Graph, info: Buffers, n_consts: int, symbols: Sequence = (),
                    single_output: bool = False) -> str:
    """Source of the call path (see ``CpuProgram.make_runner``), with every size written
    as a literal, so programs whose sizes are runtime arguments can fit it like the module.
    A single output array is returned as it is, with no pytree to rebuild."""
    n_in = len(graph.inputs)
    xs = [f"x{i}" for i in range(n_in)]
    lines = [f"def run({', '.join(xs)}):"]
    for i in range(n_in):
        # jitgraph's own results (arrays.Array) reach the driver as plain arrays: Numba
        # dispatches ndarray subclasses through a slow path
        lines.append(f"    if x{i}.__class__ is not ndarray: "
                     f"x{i} = x{i}.view(ndarray) if x{i}.__class__ is Array else conv(x{i}, D{i})")
        lines.append(f"    if x{i}.dtype is not D{i} or "
                     f"not x{i}.flags.c_contiguous or not x{i}.flags.writeable: "
                     f"x{i} = conv(x{i}, D{i})")
    donated = sorted(set(info.donated.values()))
    if donated and n_in > 1:
        # a buffer updated in place must not also be read through another argument
        lines.append(f"    bad = overlaps(({', '.join(xs)},), {tuple(donated)!r})")
        lines.append("    if bad:")
        lines += [f"        if {i} in bad: x{i} = x{i}.copy()" for i in donated]
    lines += [f"    {name} = x{i}.shape[{axis}]" for name, i, axis in symbols]
    args = list(xs)
    for i, v in enumerate(graph.inputs):      # the kernels read a 16-bit float's bits
        if is_narrow(v.aval.dtype):
            lines.append(f"    v{i} = x{i}.view(U16)")
            args[i] = f"v{i}"
    out_shapes = {j: v.aval.shape for (kind, j), v in zip(info.output_sources, graph.outputs)
                  if kind == "out"}
    outs = []
    for j in range(len(info.out_specs)):
        lines.append(f"    o{j} = empty({out_shapes[j]!r}, OD{j})")
        outs.append(f"o{j}")
    cs = [f"C{j}" for j in range(n_consts)]
    specs = info.scratch_specs
    sc = [f"s[{j}]" for j in range(len(specs))]
    if sc:
        key = f"({''.join(name + ', ' for name, _, _ in symbols)})"
        new = ", ".join(f"empty({n}, SD{j})" for j, (_, n, _) in enumerate(specs))
        new = "*arena()" if info.arena is not None and not symbols else new
        p = "pool" if not symbols else "p"
        if symbols:
            lines.append(f"    p = pools.get({key})")
        lines.append(f"    s = {p}.pop() if {p} else [{new}]")
    lines.append(f"    driver({', '.join(args + cs + outs + sc)})")
    if sc:
        lines.append("    pool.append(s)" if not symbols else
                     f"    pools.setdefault({key}, []).append(s) if len(pools) < 64 else None")
    res = []
    for k, ((kind, j), v) in enumerate(zip(info.output_sources, graph.outputs)):
        shp = v.aval.shape
        back = f".view(LD{k})" if is_narrow(v.aval.dtype) else ""
        if kind == "out":
            res.append(f"o{j}{back}")
        elif kind == "input":
            res.append(f"x{j}.reshape({shp!r})")
        else:
            res.append(f"C{j}.reshape({shp!r}).copy(){back}")
    lines.append(f"    return {res[0]}" if single_output else
                 f"    return unflatten([{', '.join(res)}])")
    return "\n".join(lines)


def load(gen, options, t0: float, compile_again: Callable | None = None) -> CpuProgram:
    """Name, write or find in the disk cache, import and wrap a generated program: each kernel
    is its own cache entry (shared by every program computing it), the driver another.
    ``allow_native`` (its ``CpuOptions``): where this process has not imported Numba, run the
    program from its native bundle (``native.py``) when the disk cache has one; otherwise
    write one after the program's first call."""
    fin = finish_module(gen.module.source, gen.module.kernels, gen.module.driver_name)
    if gen.module.info.split_products or threaded.is_threaded(fin.source):
        numba_patches.start_threads()   # before a parallel kernel or launcher starts them itself
    key = fingerprint()
    cache = disk_cache()
    bundle = None
    if own_options(options, CpuOptions).allow_native and native.enabled() and not any(
            isinstance(s, HostStep) for s in gen.plan.steps):
        bundle = cache.directory / (cache.entry_name(fin.driver_source, key) + ".native")
        if "numba" not in sys.modules:
            program = _load_native(gen, fin, bundle, t0, options, compile_again)
            if program is not None:
                return program
    return _load_with_numba(gen, fin, cache, t0, options, compile_again, bundle)


def _intact(path) -> bool:
    """Whether a native bundle exists and passes its checksum (else it is written again)."""
    try:
        with open(path, "rb") as f:
            return native.parse(f.read()) is not None
    except OSError:
        return False


def _source_only(disp) -> bool:
    """A kernel whose source is cached but whose machine code is not, anywhere: nothing
    compiled it in this process and Numba's cache has no index for it (a process stopped
    before compiling its kernels, or its compile workers failed). It is compiled ahead of the
    first call with the new kernels, in parallel, instead of one after another in that call."""
    return not disp.overloads and numba_patches.has_cached_code(disp) is False


def _load_with_numba(gen, fin, cache: DiskCache, t0: float, options, compile_again,
                     bundle=None) -> CpuProgram:
    from ...kernels import blas, matmul  # type: ignore[attr-defined]
    numba_patches.allow_noalias()       # before a kernel's decorator asks for it
    key = fingerprint()
    modules, on_disk, new = [], [], []
    memory_hits = uncompiled = 0
    # a driver in Python calls its loop kernels through launchers: those loop_ir translates
    # are compiled by LLVM alone (``loop_objects.py``), the rest by Numba
    direct: dict[str, loop_objects.DirectKernel] = {}
    use_ir = gen.module.info.python_driver and loop_objects.enabled()
    # and its products through built-ins written in LLVM IR (``gemm_launchers.py``)
    products = _products(gen.module.info)
    overloaded = _overloaded(fin)
    for name, src, arg_types in fin.kernel_modules:
        before = cache.stats["memory_hits"]
        m, hit = cache.load_module(src, key_extra=key)
        modules.append((name, m))
        k = loop_objects.plan(name, src, arg_types, cache, key, (m, name, arg_types)) \
            if use_ir and arg_types and name not in overloaded else None
        if k is not None:
            direct[name] = k
            on_disk.append(k.obj is not None)
            memory_hits += k.in_memory
            if k.obj is None:
                uncompiled += 1
                new.append((len(src) // 8, k))      # LLVM alone: a fraction of Numba's time
            continue
        on_disk.append(hit)
        if not hit or _source_only(getattr(m, name)):
            uncompiled += 1
            if arg_types:       # (a threaded kernel's body compiles twice: as a gufunc too)
                new.append((len(src) * (2 if "prange(" in src else 1), (m, name, arg_types)))
        else:
            memory_hits += cache.stats["memory_hits"] > before
    module, hit = cache.load_module(fin.driver_source, key_extra=key)
    on_disk.append(hit)
    compiled_before = sum(numba_compile_count(m) for m in [module, *(m for _, m in modules)])
    in_workers = STATE.compile_stats["worker_compiles"]
    if not all(on_disk):    # this process compiles: spare Numba's scipy.linalg import (0.3 s)
        blas.light_numba_blas_check()
    if len(new) >= compile_pool.MIN_KERNELS:
        # the driver's BLAS helpers first (each costs as much as a large kernel; where Numba's
        # cache has them, this only loads them), then kernels largest first (source length as
        # the cost, twice for a threaded one), so whoever is free takes the next largest and
        # the processes finish together
        helpers = _host_kernel_jobs(gen.plan.steps) + [
            (matmul, name, types) for name, types in gen.module.info.blas_calls
            if name not in products]
        wait_for_bundles()
        _precompile(helpers + [job for _, job in sorted(new, key=lambda c: -c[0])])
    if direct:
        with phase("llvm"):
            direct = {name: k for name, k in direct.items() if loop_objects.finish(k, cache)}
    # the driver calls its kernels (own cache entries) and host steps by module-level name
    for name, m in modules:
        setattr(module, name, getattr(m, name))
    launches = _launchers(module, fin, direct, overloaded)
    for name, fn in products.items():
        setattr(module, name, fn)
    for s in gen.plan.steps:
        if isinstance(s, HostStep):
            setattr(module, f"host_{s.name}", host_impl(s.node))
    if options.profile:         # what the profiled driver's marks call and fill
        module.profile_marks, module.profile_clock = [], time.perf_counter
    if bundle is not None and not (module.__file__ and os.path.dirname(module.__file__) ==
                                   str(cache.directory) and not _intact(bundle)):
        bundle = None                     # no bundle to write after the first call
    program = CpuProgram(gen, fin, getattr(module, fin.driver_name), module,
                         was_on_disk=all(on_disk), t0=t0, options=options,
                         kernel_modules=[m for _, m in modules], compile_again=compile_again,
                         bundle_path=bundle)
    program.launches = launches
    program.product_builtins = tuple(products)
    program.direct_objects = {k.launch.symbol: k.obj for k in direct.values()
                              if k.launch in launches}
    program.kernel_counts = KernelCounts(
        len(gen.module.kernels), len(modules), memory_hits,
        len(modules) - memory_hits - uncompiled, uncompiled,
        STATE.compile_stats["worker_compiles"] - in_workers, compiled_before,
        llvm=sum(1 for _, job in new if isinstance(job, loop_objects.DirectKernel)
                 and job.launch.name in direct))
    return program


def _products(info) -> dict:
    """The product built-ins a program's driver calls instead of ``kernels/matmul.py``'s Numba
    functions: where the driver is Python and calls one, and this process can build them
    (the split ones only for a program that splits its products: they start the threads)."""
    called = {n for n, _ in info.blas_calls}
    if not info.python_driver or not called & set(gemm_launchers.NAMES):
        return {}
    with phase("llvm"):
        return gemm_launchers.functions(parallel=info.split_products) or {}


def _overloaded(fin) -> set:
    """Kernels the program calls with arrays of more than one dtype (steps of equal structure
    over other dtypes share a kernel): Numba compiles an overload for each, and they are
    called through Numba's dispatcher, not a launcher (which takes one signature)."""
    seen: dict = {}
    for name, _, arg_types in fin.kernel_modules:
        seen.setdefault(name, set()).add(tuple(arg_types))
    return {name for name, sigs in seen.items() if len(sigs) > 1}


def _launchers(module, fin, direct: dict, overloaded: set) -> list:
    """Give the driver the launchers of its threaded kernels (``threaded.py``), as
    ``threads_<kernel>``, and of the kernels ``loop_ir`` compiled (``direct``), under their
    own names where they are serial; returns their ``Launch`` records (a native bundle builds
    the same launchers). A threaded kernel whose launcher cannot be built runs serially over
    all its rows; a direct kernel then runs as Numba compiles it. A kernel the driver calls
    with a product tail (``gemm_after<a>_<kernel>``) gets that launcher too, or where none
    can be built, its launcher (or serial call) followed by the product as ``par_gemm``."""
    launches, entries = [], {}
    tails = threaded.tail_calls(fin.driver_source)
    for name, src, arg_types in fin.kernel_modules:
        if name in direct:
            if direct[name].launch not in launches:
                launches.append(direct[name].launch)
                launches += [replace(direct[name].launch, tail=a, head=h)
                             for a, h in tails.get(name, ())]
            continue
        rows = threaded.rows_of(src)
        linear = threaded.linear_rows(rows) if rows is not None else None
        if linear is None or name in overloaded:
            continue
        with phase("numba"), compile_settings("cpu"):
            entry = threaded.entry_of(getattr(module, name),
                                      compile_pool.numba_signature(arg_types))
        if entry is not None:
            entries[entry[0]] = entry[1]
            launch = threaded.Launch(name, entry[0], tuple(arg_types[2:]), linear[0],
                                     rows_scale=linear[1], rows_arg=linear[2])
            launches += [launch] + [replace(launch, tail=a, head=h)
                                    for a, h in tails.get(name, ())]
    built: dict | None = {}
    if launches:
        with phase("llvm"):
            built = threaded.build(launches, entries, tuple(k.obj for k in direct.values()))
    if built is None and direct:        # no launchers here: Numba compiles those kernels too
        return _launchers(module, fin, {}, overloaded)
    built = built or {}
    for launch in launches:
        if launch.direct and launch.serial:
            setattr(module, launch.name, built[launch.callable_name])
    for name, src, arg_types in fin.kernel_modules:
        rows = threaded.rows_of(src)
        if rows is not None:
            fn = built.get(threaded.PREFIX + name) or threaded.serial_call(getattr(module, name),
                                                                           rows)
            setattr(module, threaded.PREFIX + name, fn)
            for a, head in tails.get(name, ()):
                tail = threaded.tail_name(name, a, head)
                fallback = threaded.serial_head(fn, len(arg_types) - 2, a, threaded.row_count(
                    rows), _par_gemm(module)) if head else threaded.serial_tail(
                    fn, len(arg_types) - 2, a, _par_gemm(module))
                setattr(module, tail, built.get(tail) or fallback)
    return launches if built else []


def _par_gemm(module) -> Callable:
    """The split product a tail falls back to: the built-in where this process has one."""
    def call(*args):
        fn = gemm_launchers.built("par_gemm") or vars(module)["par_gemm"]
        return fn(*args)
    return call


def _load_native(gen, fin, path, t0: float, options, compile_again):
    """The program run from its native bundle at ``path``, or None (no usable bundle)."""
    cache = disk_cache()
    key = fingerprint()
    data = cache.read_trusted(path)
    if data is None:
        return None
    # the modules the bundle was made from must be intact: a damaged or missing entry takes
    # the Numba path, which repairs it and warns (the bundle must not hide it)
    names = []
    digests = [cache.entry_name(src, key) for _, src, _ in fin.kernel_modules]
    for digest in digests + [path.stem]:        # the bundle is named by the driver's entry
        if cache.entry_status(digest) != "ok":
            return None
        names.append(MODULE_PREFIX + digest)
    fallback_program: list = []

    def numba_function(name: str):
        """The Numba dispatcher behind a bundle's function (for argument types it lacks)."""
        if not fallback_program:
            fallback_program.append(_load_with_numba(gen, fin, disk_cache(), time.perf_counter(),
                                                     options, compile_again))
        prog = fallback_program[0]
        return prog.driver if name == fin.driver_name else getattr(prog.module, name)

    loaded = native.load(data, {"entry": path.name}, numba_function)
    if loaded is None:
        return None
    functions, driver_def = loaded
    if driver_def is None:
        driver = functions.get(fin.driver_name)
    else:
        products = _products(gen.module.info)
        if any(name not in functions and name not in products
               for name, _ in gen.module.info.blas_calls):
            return None         # written with the product built-ins, which this process lacks
        ns = {"np": np, "math": math, **products, **functions}
        exec(compile(driver_def, str(path), "exec"), ns)
        driver = ns.get(fin.driver_name)
    if driver is None:
        return None
    module = types.SimpleNamespace(__name__=names[-1], __file__=None, **functions)
    return CpuProgram(gen, fin, driver, module, was_on_disk=True, t0=t0, options=options,
                      kernel_modules=[types.SimpleNamespace(__name__=n) for n in names[:-1]],
                      compile_again=compile_again, native_bundle=path)


def export_native(program: CpuProgram, path) -> bool:
    """Write ``program``'s native bundle (after its first call: its functions are compiled
    for the argument types it passes them). False where it cannot have one."""
    from numba.core.dispatcher import Dispatcher
    module, driver = program.module, program.driver
    if isinstance(driver, Dispatcher):
        callees, driver_def = {driver.__name__: driver}, None
    else:
        callees = {}
        launched = {launch.name: launch for launch in program.launches}
        for name in driver.__code__.co_names:
            value = vars(module).get(name)
            kernel = threaded.launched_kernel(name)
            if name in launched and launched[name].serial or \
                    value is not None and value is gemm_launchers.built(name):
                continue                        # loop_ir's, or a product: rebuilt on loading
            if isinstance(value, Dispatcher):
                callees[name] = value
            elif kernel is not None and kernel in launched:
                if not launched[kernel].direct:
                    callees[kernel] = vars(module)[kernel]  # its launcher is rebuilt
            elif value is not None and value is not np and value is not math:
                return False            # a Python callable (host step): not in a bundle
        driver_def = program.driver_def
    signatures: dict = {}
    for name, arg_types in program.blas_calls:      # the kernels/ products it calls
        if name in callees:
            signatures.setdefault(name, set()).add(compile_pool.numba_signature(arg_types))
    return native.export(str(path), callees, driver_def, {"entry": path.name}, signatures,
                         *threaded.bundle_ir(program.launches),
                         extra_objects=tuple(program.direct_objects.values()))


def _export_in_background(program: CpuProgram) -> None:
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
    STATE.bundle_threads.append(thread)
    thread.start()


def wait_for_bundles() -> None:
    """Join the bundle-writing threads (before forking compile workers, which need a process
    without other threads; and in tests)."""
    while STATE.bundle_threads:
        STATE.bundle_threads.pop().join()


def _host_kernel_jobs(steps) -> list:
    """The compile jobs of the hand-written kernels the program's host steps run (a fused
    attention's: seconds of Numba each, the largest jobs, so first), once each."""
    jobs: list = []
    for s in steps:
        lister = HOST_KERNEL_JOBS.get(s.node.prim) if isinstance(s, HostStep) else None
        for job in lister(s.node) if lister is not None else ():
            if job not in jobs:
                jobs.append(job)
    return jobs


def _precompile(new: list) -> None:
    """Compile the program's new kernels now, on this process and forked compile workers at
    once (``compile_pool``), instead of one after another in its first call."""
    def compile_one(job):
        if isinstance(job, loop_objects.DirectKernel):
            try:
                with phase("llvm"):
                    loop_objects.compile_one(job)
                return
            except loop_ir.Unsupported:     # Numba's, then (its cache serves ``finish``'s
                job = job.numba_job         # fallback)
            except Exception:
                return                      # ``finish`` tries once more, and counts it
        module, name, arg_types = job
        with phase("llvm"):
            if prebuilt.compile_job(module.__name__, name, tuple(arg_types)):
                return                      # (its IR is shipped: LLVM's job alone)
        with compile_settings("cpu"):
            getattr(module, name).compile(compile_pool.numba_signature(arg_types))
    def llvm_alone(job) -> bool:
        return isinstance(job, loop_objects.DirectKernel) or \
            prebuilt.ships(job[0].__name__, job[1], tuple(job[2]))
    with phase("numba"):
        compile_pool.precompile(new, compile_one, numba=not all(map(llvm_alone, new)))


def _overlaps(xs: tuple, donated: tuple) -> list:
    """The indices in ``donated`` whose argument may share memory with another of ``xs``.
    Arrays whose memory belongs to two different NumPy-allocated arrays cannot: the arguments
    are grouped by owner once, and each donated one is compared (``np.may_share_memory``,
    about a microsecond a pair) only with those of its own owner and those without one, not
    with every argument (a train step donates most of its arguments: comparing each with all
    took 0.3 ms a call with 85 leaves, most of a small model's call)."""
    owners = [_owner(x) for x in xs]
    by_owner: dict = {}
    unowned = []
    for j, r in enumerate(owners):
        if r is None:
            unowned.append(j)
        else:
            by_owner.setdefault(id(r), []).append(j)
    everyone = range(len(xs))
    bad = []
    for i in donated:
        ri, xi = owners[i], xs[i]
        for j in (everyone if ri is None else by_owner[id(ri)] + unowned):
            if j != i and (xs[j] is xi or np.may_share_memory(xi, xs[j])):
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
