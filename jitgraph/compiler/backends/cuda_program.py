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
from ...cuda_driver import driver as cuda_driver
from ...dtypes import as_stored, storage
from ...device import (DeviceArray, as_device_buffer, buffer_pointer, compute_capability,
                       cuda_api, device_error, simulator)
from ..fusion import HostStep, MatmulStep
from ..host import host_impl, on_device
from ..settings import disk_cache, fingerprint
from .base import CudaOptions, own_options


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
        D = cuda_driver()
        info = gen.module.info
        self.name = options.name
        self.options = options
        self.own = own_options(options, CudaOptions)   # the CUDA target's own options
        self.donate = set(options.donate)
        self.graph = gen.shown_graph
        self.plan = gen.shown_plan
        self.stages: dict = dict(gen.stages)
        self.source = gen.module.source
        self.kernels = gen.module.kernels
        self.driver = driver
        self.module = module
        self.was_on_disk = was_on_disk
        self.donated = info.donated
        self.const_values = tuple(D.to_device(as_stored(gen.graph.consts[v]))
                                  for v in gen.plan.const_args)     # uploaded once
        self.out_specs = [(n, storage(d)) for _, n, d in info.out_specs]   # (16-bit
        self.scratch_specs = [(n, storage(d)) for _, n, d in info.scratch_specs]  # floats: bits)
        self.sources = info.output_sources
        self.launch_counts: dict = info.launches   # step -> kernels it launches
        self._compile_again = compile_again
        self._profiled: CudaProgram | None = None
        self._scratch_pool: list = []
        self._replay: Callable | None = None
        self.compile_seconds = time.perf_counter() - t0

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable:
        """The call path: arguments to device buffers (a device array's own, read directly),
        outputs from the pool, one launch sequence (replayed as a CUDA graph once these
        buffers repeat), results wrapped as DeviceArrays. A cached call allocates, frees,
        copies and synchronises nothing (``cuda_driver.counting`` checks it): donation
        is checked by identity, a donated buffer no output kept goes back to the pool."""
        D = cuda_driver()
        n_in = len(in_dtypes)
        xs = [f"x{i}" for i in range(n_in)]
        ns: dict = {"DA": DeviceArray, "buf": as_device_buffer, "empty": D.alloc,
                    "nd": np.ndarray, "pool": self._scratch_pool, "step": self.launcher(),
                    "unflatten": out_tree.unflatten, "overlaps": _overlaps, "copy": _copy,
                    "new_scratch": lambda: [D.alloc(n, d) for n, d in self.scratch_specs],
                    "fail": lambda e: _fail(e, self.name), "D": D, "S": self.own.stream}
        lines = [f"def run({', '.join(xs)}):", "    try:"]
        donated = sorted(set(self.donated.values()))
        if donated:
            lines.append("        f = False")
        for i, (d, v) in enumerate(zip(in_dtypes, self.graph.inputs)):
            ns[f"D{i}"] = np.dtype(d)
            ns[f"S{i}"] = v.aval.shape
            lines.append(f"        b{i} = x{i}._buf if x{i}.__class__ is DA else None")
            lines.append(f"        if b{i} is None:")     # a host or foreign array, or deleted
            lines.append(f"            b{i} = buf(x{i}, D{i}, S{i})")
            if donated:
                lines.append("            f = True")
        for i in donated:
            others = [f"b{j}" for j in range(n_in) if j != i]
            if others:   # updated in place: it must not also be read through another argument
                same = " or ".join(f"b{i} is {o}" for o in others)
                lines.append(f"        if {same} or (f and overlaps(b{i}, ({', '.join(others)},))):")
                lines.append(f"            b{i} = copy(b{i})")
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
        call = f"step({', '.join(bs + cs + outs + sc)})"
        if self.own.stream is not None:       # the caller's stream, given explicitly
            lines += ["        with D.using(S):", f"            {call}"]
        else:
            lines.append(f"        {call}")
        if sc:
            lines.append("        pool.append(s)")
        lines += ["    except Exception as e:", "        raise fail(e) from e"]
        # JAX semantics: a donated device array is deleted by the call, whether or not its
        # memory was reused; memory no output kept goes to the pool, last argument first, so
        # the next call's outputs take the same buffers in the same roles (LIFO): a training
        # loop's buffers then repeat every two calls, and its graph is replayed.
        for i in sorted(self.donate, reverse=True):
            if i < n_in:
                verb = "delete" if i in donated else "donate"
                lines.append(f"    if x{i}.__class__ is DA: x{i}.{verb}()")
        res, seen = [], set()
        for r, ((kind, j), v) in enumerate(zip(self.sources, self.graph.outputs)):
            shp = v.aval.shape
            ns[f"RD{r}"] = np.dtype(v.aval.dtype)
            dt = f"RD{r}"
            if (kind, j) in seen:     # the same buffer twice: each array owns its memory
                src = f"o{j}" if kind == "out" else (f"b{j}" if kind == "input" else f"C{j}")
                res.append(f"DA(copy({src}), {shp!r}, True, {dt})")
                continue
            seen.add((kind, j))
            if kind == "out":
                res.append(f"DA(o{j}, {shp!r}, True, {dt})")
            elif kind == "input" and j in donated:   # ours if it was ours (or a host copy)
                res.append(f"DA(b{j}, {shp!r}, x{j}._owned if x{j}.__class__ is DA "
                           f"else x{j}.__class__ is nd, {dt})")
            elif kind == "input":
                res.append(f"DA(copy(b{j}), {shp!r}, True, {dt})")
            else:
                res.append(f"DA(copy(C{j}), {shp!r}, True, {dt})")
        lines += [f"    r{r} = {e}" for r, e in enumerate(res)]
        names = [f"r{r}" for r in range(len(res))]
        built = out_tree.expression(names)     # the result pytree as a literal, or unflatten
        lines.append(f"    return {built if built is not None else 'unflatten([' + ', '.join(names) + '])'}")
        exec("\n".join(lines), ns)
        run = ns["run"]
        run.source = "\n".join(lines)
        return run

    def launcher(self) -> Callable:
        """What a call runs on its buffers: the driver directly, or through a ``GraphReplay``
        (CUDA graphs: on unless ``cuda_graph=False``, for programs whose steps all stay on
        the device and can be captured; never for the profiled variant, whose marks are
        events between steps)."""
        if self._replay is None:
            D = cuda_driver()
            ok = (self.own.cuda_graph and not self.options.profile
                  and D.capture_mode is not None
                  and not any(isinstance(s, HostStep) and not on_device(s.node)
                              for s in self.plan.steps))
            if ok and any(isinstance(s, MatmulStep) for s in self.plan.steps):
                from ...kernels.cuda_matmul import capture_safe  # type: ignore[import-not-found]
                ok = capture_safe(D)
            self._replay = GraphReplay(self.driver, D) if ok else self.driver
        return self._replay

    def profiled(self, graph: Graph | None = None) -> "CudaProgram":
        """The same program with a driver that records a CUDA event after each step in
        ``module.profile_marks`` (see ``jitgraph.profile``). Events go on the driver's stream,
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
    """``profile_clock`` of a CUDA program: each reading records a CUDA event on the driver's
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
        ev.record(cuda_driver().stream)
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
    """Whether ``b``'s memory overlaps any of ``others`` (foreign arrays: by address)."""
    lo = buffer_pointer(b)
    hi = lo + b.shape[0] * b.dtype.itemsize
    for o in others:
        p = buffer_pointer(o)
        if p < hi and lo < p + o.shape[0] * o.dtype.itemsize:
            return True
    return False


def _copy(b):
    D = cuda_driver()
    out = D.alloc(b.shape[0], np.dtype(b.dtype))
    D.copy(out, b)
    return out


class GraphReplay:
    """A program's launch sequence as CUDA graphs, one per set of buffers it ran on: the
    second call on the same buffers (by identity: a training loop's donated parameters and
    pooled outputs repeat) captures the sequence, later ones replay it as one graph launch.
    The first call on new buffers runs the steps directly (it also compiles the kernels,
    which must not happen during a capture). A graph holds its buffers, so their identities
    cannot be reused while it is cached (at most ``capacity`` graphs per program). A capture
    that fails switches graphs off for the program, with a one-time warning."""

    capacity = 8

    def __init__(self, steps: Callable, driver):
        self.steps = steps
        self.driver = driver
        self.graphs: dict = {}
        self.seen: dict = {}
        self.enabled = True

    def __call__(self, *bufs) -> None:
        if not self.enabled:
            self.steps(*bufs)
            return
        key = tuple(map(id, bufs))
        hit = self.graphs.get(key)
        if hit is not None:
            self.driver.replay(hit[0])
            return
        if key not in self.seen:
            if len(self.seen) >= 64:
                self.seen.clear()
            self.seen[key] = True
            self.steps(*bufs)
            return
        del self.seen[key]
        try:
            graph = self.driver.capture(lambda: self.steps(*bufs))
        except Exception as e:
            self.enabled = False
            self.driver.warn_once("graph", f"jitgraph: CUDA graph capture failed "
                                  f"({type(e).__name__}: {e}); this program runs its launches "
                                  "directly from now on (jit(..., cuda_graph=False) asks for "
                                  "that without trying)")
            self.steps(*bufs)
            return
        if len(self.graphs) >= self.capacity:
            self.graphs.pop(next(iter(self.graphs)))
        self.graphs[key] = (graph, bufs)
        self.driver.replay(graph)


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
    key = cache_key(fingerprint(), compute_capability(), simulator(), gen.module.info.shuffle)
    module, was_on_disk = disk_cache().load_module(gen.module.source, key_extra=key)
    # the driver calls host steps by module-level name
    for s in gen.plan.steps:
        if isinstance(s, HostStep) and not on_device(s.node):
            setattr(module, f"host_{s.name}", host_impl(s.node))
    if options.profile:         # what the profiled driver's marks call and fill
        module.profile_marks, module.profile_clock = [], EventClock()
    return CudaProgram(gen, getattr(module, gen.module.driver_name), module,
                       was_on_disk=was_on_disk, t0=t0, options=options,
                       compile_again=compile_again)
