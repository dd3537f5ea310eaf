"""Runtime: turn an optimized graph into a callable program, and call it with little overhead."""
from __future__ import annotations

import hashlib
import os
import time
from typing import Callable, Sequence

import numpy as np

from ..core import Graph, Node, Var
from ..passes import optimize
from .codegen_cpu import CpuCodegen, CpuContext
from .disk_cache import DiskCache
from .fusion import HostStep, make_plan

_DISK_CACHE: DiskCache | None = None


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
    intermediates live in scratch buffers kept between calls (a pool, so concurrent callers
    never share them).
    """

    def __init__(self, graph: Graph, plan, source: str, kernels, driver, const_values,
                 info: dict, was_on_disk: bool, module, compile_seconds: float):
        self.graph = graph
        self.plan = plan
        self.source = source
        self.kernels = kernels
        self.driver = driver
        self.const_values = tuple(const_values)
        self.donated = info["donated"]
        self.was_on_disk = was_on_disk
        self.module = module
        self.compile_seconds = compile_seconds
        self.out_specs = [(n, np.dtype(d)) for _, n, d in info["out_specs"]]
        self.scratch_specs = [(n, np.dtype(d)) for _, n, d in info["scratch_specs"]]
        self.sources = info["output_sources"]
        self._scratch_pool: list = []

    def make_runner(self, in_dtypes: Sequence[np.dtype], out_tree) -> Callable:
        """A call path specialised to this program: checks, allocation and the driver call as
        straight-line Python (the per-call overhead of a cached ``jit`` call is this function)."""
        n_in = len(in_dtypes)
        xs = [f"x{i}" for i in range(n_in)]
        ns: dict = {"ndarray": np.ndarray, "empty": np.empty, "conv": _conv, "pool": self._scratch_pool,
                    "driver": self.driver, "unflatten": out_tree.unflatten,
                    "new_scratch": lambda: [np.empty(n, d) for n, d in self.scratch_specs]}
        lines = [f"def run({', '.join(xs)}):"]
        for i, d in enumerate(in_dtypes):
            ns[f"D{i}"] = np.dtype(d)
            lines.append(f"    if x{i}.__class__ is not ndarray or x{i}.dtype is not D{i} or "
                         f"not x{i}.flags.c_contiguous or not x{i}.flags.writeable: "
                         f"x{i} = conv(x{i}, D{i})")
        for i in sorted(set(self.donated.values())):
            # a buffer updated in place must not also be read through another argument
            others = ", ".join(f"x{j}" for j in range(n_in) if j != i)
            if others:
                lines.append(f"    if overlaps(x{i}, ({others},)): x{i} = x{i}.copy()")
        ns["overlaps"] = _overlaps
        out_shapes = {}
        for k, ((kind, j), v) in enumerate(zip(self.sources, self.graph.outputs)):
            if kind == "out":
                out_shapes[j] = v.aval.shape
        outs = []
        for j, (n, d) in enumerate(self.out_specs):
            ns[f"OD{j}"] = d
            lines.append(f"    o{j} = empty({out_shapes[j]!r}, OD{j})")
            outs.append(f"o{j}")
        for j, c in enumerate(self.const_values):
            ns[f"C{j}"] = c
        cs = [f"C{j}" for j in range(len(self.const_values))]
        sc = [f"s[{j}]" for j in range(len(self.scratch_specs))]
        if sc:
            lines.append("    s = pool.pop() if pool else new_scratch()")
        lines.append(f"    driver({', '.join(xs + cs + outs + sc)})")
        if sc:
            lines.append("    pool.append(s)")
        res = []
        for (kind, j), v in zip(self.sources, self.graph.outputs):
            shp = v.aval.shape
            if kind == "out":
                res.append(f"o{j}")
            elif kind == "input":
                res.append(f"x{j}.reshape({shp!r})")
            else:
                res.append(f"C{j}.reshape({shp!r}).copy()")
        if out_tree.node == "*":       # a single array: no pytree to rebuild
            lines.append(f"    return {res[0]}")
        else:
            lines.append(f"    return unflatten([{', '.join(res)}])")
        exec("\n".join(lines), ns)
        run = ns["run"]
        run.source = "\n".join(lines)
        return run

    def numba_compiles(self) -> int:
        from .disk_cache import numba_compile_count
        return numba_compile_count(self.module)


def compile_graph(graph: Graph, *, fastmath: bool = False, donate: Sequence[int] = (),
                  approx_math: bool = True) -> CompiledProgram:
    """Fuse, generate, compile (or load from the disk cache) and wrap ``graph``."""
    global _FINGERPRINT
    t0 = time.perf_counter()
    graph = inline_calls(graph)
    ctx = CpuContext(approx_math=approx_math)
    plan = make_plan(graph, ctx)
    gen = CpuCodegen(plan, ctx, fastmath=fastmath)
    source, kernels, driver_name, info = gen.module(set(donate))
    if _FINGERPRINT is None:
        _FINGERPRINT = _codegen_fingerprint()
    module, was_on_disk = disk_cache().load_module(source, key_extra=_FINGERPRINT)
    for s in plan.steps:
        if isinstance(s, HostStep):
            setattr(module, f"host_{s.name}", _host_impl(s.node))
    driver = getattr(module, driver_name)
    consts = [np.ascontiguousarray(graph.consts[v]).reshape(-1) for v in plan.const_args]
    return CompiledProgram(graph, plan, source, kernels, driver, consts, info,
                           was_on_disk, module, time.perf_counter() - t0)


def _overlaps(x: np.ndarray, others) -> bool:
    return any(x is o or np.may_share_memory(x, o) for o in others)


def _conv(x, dtype):
    """An input as a writeable C-contiguous array of the compiled dtype (copies only if needed)."""
    a = np.asarray(x)
    if a.dtype != dtype or not a.flags.c_contiguous or not a.flags.writeable:
        a = np.array(a, dtype=dtype, order="C")
    return a


def _host_impl(node: Node):
    from ..core import run_impl

    def call(*arrays):
        res = run_impl(node.prim, arrays, node.params, [o.aval for o in node.outs])
        return res[0] if len(res) == 1 else tuple(res)
    return call
