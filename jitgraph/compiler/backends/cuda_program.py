"""The CUDA executable: a generated module of CUDA kernels, loaded through the disk cache, and
the call path that runs it on device memory.

As on the CPU (``cpu_program.py``): the same plan and memory plan, a specialised straight-line call path
per signature, outputs allocated per call (or a donated input's buffer, updated in place),
intermediates in device scratch buffers pooled between calls. A call copies nothing between
host and device unless an argument is a host array.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ...core import Graph
from ...device import (DeviceArray, alloc, as_device_buffer, buffer_pointer,
                       compute_capability, cuda_api, device_error, simulator)
from ..fusion import HostStep
from ..host import host_impl
from ..settings import disk_cache, fingerprint


def cache_key(fingerprint: str, cc: tuple, sim: bool, shuffle: bool) -> str:
    """The disk-cache key of a CUDA module: generator fingerprint, target compute capability
    (Numba keeps one machine-code entry per capability), simulator or not, reduction flavour."""
    target = "cudasim" if sim else f"sm_{cc[0]}{cc[1]}"
    return f"{fingerprint}|cuda|{target}|shuffle={int(shuffle)}"


class CudaProgram:
    """A compiled graph for the GPU (an ``Executable``): plan, generated source, kernels and
    the Python driver that launches them. ``compile_again(graph, options)`` compiles a
    variant (the profiled one) the same way."""

    native = False                      # CUDA programs have no native bundle
    symbols: tuple = ()                 # the CUDA backend launches from static shapes

    def __init__(self, gen, driver, module, *, was_on_disk: bool, t0: float, options,
                 compile_again: Callable | None = None):
        cuda = cuda_api()
        info = gen.module.info
        self.name = options.name
        self.options = options
        self.donate = set(options.donate)
        self.graph = gen.shown_graph
        self.plan = gen.shown_plan
        self.stages: dict = dict(gen.stages)
        self.source = gen.module.source
        self.kernels = gen.module.kernels
        self.driver = driver
        self.module = module
        self.was_on_disk = was_on_disk
        self.donated = info["donated"]
        self.const_values = tuple(cuda.to_device(np.ascontiguousarray(gen.graph.consts[v])
                                                 .reshape(-1))
                                  for v in gen.plan.const_args)     # uploaded once
        self.out_specs = [(n, np.dtype(d)) for _, n, d in info["out_specs"]]
        self.scratch_specs = [(n, np.dtype(d)) for _, n, d in info["scratch_specs"]]
        self.sources = info["output_sources"]
        self._compile_again = compile_again
        self._profiled: CudaProgram | None = None
        self._scratch_pool: list = []
        self.compile_seconds = time.perf_counter() - t0

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable:
        """The call path: arguments to device buffers, outputs allocated, one driver call,
        results wrapped as DeviceArrays (no synchronisation: launches are asynchronous)."""
        cuda = cuda_api()
        n_in = len(in_dtypes)
        xs = [f"x{i}" for i in range(n_in)]
        ns: dict = {"DA": DeviceArray, "buf": as_device_buffer, "empty": alloc, "nd": np.ndarray,
                    "pool": self._scratch_pool, "driver": self.driver,
                    "unflatten": out_tree.unflatten, "overlaps": _overlaps, "copy": _copy,
                    "new_scratch": lambda: [cuda.device_array(n, d)
                                            for n, d in self.scratch_specs],
                    "fail": lambda e: _fail(e, self.name)}
        lines = [f"def run({', '.join(xs)}):", "    try:"]
        for i, (d, v) in enumerate(zip(in_dtypes, self.graph.inputs)):
            ns[f"D{i}"] = np.dtype(d)
            ns[f"S{i}"] = v.aval.shape
            lines.append(f"        b{i} = buf(x{i}, D{i}, S{i})")
        donated = sorted(set(self.donated.values()))
        for i in donated:
            others = ", ".join(f"b{j}" for j in range(n_in) if j != i)
            if others:   # updated in place: it must not also be read through another argument
                lines.append(f"        if overlaps(b{i}, ({others},)): b{i} = copy(b{i})")
        outs = []
        for j, (n, d) in enumerate(self.out_specs):
            ns[f"OD{j}"] = d
            lines.append(f"        o{j} = empty({n}, OD{j})")
            outs.append(f"o{j}")
        for j, c in enumerate(self.const_values):
            ns[f"C{j}"] = c
        cs = [f"C{j}" for j in range(len(self.const_values))]
        sc = [f"s[{j}]" for j in range(len(self.scratch_specs))]
        if sc:
            lines.append("        s = pool.pop() if pool else new_scratch()")
        bs = [f"b{i}" for i in range(n_in)]
        lines.append(f"        driver({', '.join(bs + cs + outs + sc)})")
        if sc:
            lines.append("        pool.append(s)")
        lines += ["    except Exception as e:", "        raise fail(e) from e"]
        for i in sorted(self.donate):   # JAX semantics: a donated device array is deleted
            if i < n_in:                # by the call, whether or not its memory was reused
                lines.append(f"    if x{i}.__class__ is DA: x{i}.delete()")
        res, seen = [], set()
        for (kind, j), v in zip(self.sources, self.graph.outputs):
            shp = v.aval.shape
            if (kind, j) in seen:     # the same buffer twice: each array owns its memory
                src = f"o{j}" if kind == "out" else (f"b{j}" if kind == "input" else f"C{j}")
                res.append(f"DA(copy({src}), {shp!r}, True)")
                continue
            seen.add((kind, j))
            if kind == "out":
                res.append(f"DA(o{j}, {shp!r}, True)")
            elif kind == "input" and j in donated:   # ours if it was ours (or a host copy)
                res.append(f"DA(b{j}, {shp!r}, x{j}._owned if x{j}.__class__ is DA "
                           f"else x{j}.__class__ is nd)")
            elif kind == "input":
                res.append(f"DA(copy(b{j}), {shp!r}, True)")
            else:
                res.append(f"DA(copy(C{j}), {shp!r}, True)")
        if out_tree.node == "*":
            lines.append(f"    return {res[0]}")
        else:
            lines.append(f"    return unflatten([{', '.join(res)}])")
        exec("\n".join(lines), ns)
        run = ns["run"]
        run.source = "\n".join(lines)
        return run

    def profiled(self, graph: Graph | None = None) -> "CudaProgram":
        """The same program with a driver that records a CUDA event after each step in
        ``module.profile_marks`` (see ``jitgraph.profile``). Events go on the default stream,
        where every kernel, cuBLAS call and host copy of the program runs, so the time between
        two marks is the GPU time of the step between them. Built without donation: profiling
        calls the program many times with the same arguments."""
        if self._profiled is None:
            options = replace(self.options, donate=(), profile=True)
            self._profiled = self._compile_again(self.graph, options)
        return self._profiled

    def numba_compiles(self) -> int:
        return 0     # CUDA kernels compile on first launch; not counted per module


class EventClock:
    """``profile_clock`` of a CUDA program: each reading records a CUDA event on the default
    stream (the one jitgraph launches on). Events are created once and reused after
    ``reset`` (between profiled calls, once the last ones were read), so creating them does
    not sit between two launches."""

    def __init__(self):
        self.events: list = []
        self.next = 0

    def __call__(self):
        if self.next == len(self.events):
            self.events.append(cuda_api().event())
        ev = self.events[self.next]
        self.next += 1
        ev.record()
        return ev

    def reset(self) -> None:
        self.next = 0


def event_intervals(marks: Sequence) -> list[float]:
    """Seconds between consecutive recorded events, after waiting for the last one."""
    if not marks:
        return []
    marks[-1].synchronize()
    return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]


def _overlaps(b, others) -> bool:
    lo = buffer_pointer(b)
    hi = lo + b.shape[0] * b.dtype.itemsize
    for o in others:
        p = buffer_pointer(o)
        if p < hi and lo < p + o.shape[0] * o.dtype.itemsize:
            return True
    return False


def _copy(b):
    from ...kernels.cuda_util import copy_into   # type: ignore[import-not-found]
    out = alloc(b.shape[0], np.dtype(b.dtype))
    copy_into(out, b)
    return out


def _fail(e: Exception, name: str) -> Exception:
    """CUDA driver errors (out of memory, launch failures) get a message saying what to do;
    anything else (a jitgraph or Numba error) is passed through unchanged."""
    mod = type(e).__module__ or ""
    if "cudadrv" in mod and "simulator" not in mod:     # driver errors, not typing errors
        return device_error(e, f"jit({name})")
    if isinstance(e, MemoryError):
        return device_error(e, f"jit({name})")
    return e


def load(gen, options, t0: float, compile_again: Callable | None = None) -> CudaProgram:
    """Find the module in the disk cache (or write it) and wrap it; its kernels compile on
    their first launch."""
    key = cache_key(fingerprint(), compute_capability(), simulator(), gen.module.info["shuffle"])
    module, was_on_disk = disk_cache().load_module(gen.module.source, key_extra=key)
    # the driver calls host steps by module-level name
    for s in gen.plan.steps:
        if isinstance(s, HostStep):
            setattr(module, f"host_{s.name}", host_impl(s.node))
    if options.profile:         # what the profiled driver's marks call and fill
        module.profile_marks, module.profile_clock = [], EventClock()
    return CudaProgram(gen, getattr(module, gen.module.driver_name), module,
                       was_on_disk=was_on_disk, t0=t0, options=options,
                       compile_again=compile_again)
