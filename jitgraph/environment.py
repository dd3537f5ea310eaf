"""What a bug report needs to know about the machine jitgraph runs on.

``environment_info()`` returns it as a dict, ``print_environment_info()`` (and ``python -m
jitgraph info``) prints it: the versions of Python and of the libraries jitgraph uses, the CPU
and its vector extensions (what the compiled kernels are built for), the BLAS the compiled
products call and its threads, the CUDA driver, toolkit and devices where numba-cuda and a GPU
(or the simulator) are present, the disk cache and the settings in force. Nothing here fails
for a missing optional library or GPU: an entry says what is missing instead.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from typing import Any, Callable

from .version import __version__

__all__ = ["environment_info", "format_environment_info", "print_environment_info"]

#: distribution names whose versions are reported (None where not installed)
PACKAGES = ("numpy", "numba", "llvmlite", "scipy", "threadpoolctl", "numba-cuda", "cupy",
            "mpi4py", "tqdm", "matplotlib")
#: vector extensions reported, as /proc/cpuinfo (x86 "flags", ARM "Features") and LLVM name them
VECTOR_EXTENSIONS = (
    "sse", "sse2", "sse3", "ssse3", "sse4_1", "sse4.1", "sse4_2", "sse4.2", "avx", "avx2",
    "fma", "f16c", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma",
    "avx512vbmi", "avx512_vnni", "avx512vnni", "avx512_bf16", "avx512bf16", "avx512_fp16",
    "avx512fp16", "amx_tile", "amx-tile", "amx_bf16", "amx-bf16", "amx_int8", "amx-int8",
    "neon", "asimd", "asimdhp", "asimddp", "sve", "sve2", "sme")
#: Numba and BLAS variables that change what compiled code does or how many threads it uses
RELEVANT_VARIABLES = (
    "NUMBA_OPT", "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "NUMBA_CACHE_DIR",
    "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_ENABLE_CUDASIM", "NUMBA_DISABLE_JIT",
    "NUMBA_BOUNDSCHECK", "NUMBA_FASTMATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS")


def _version(dist: str) -> str | None:
    """The installed version of distribution *dist* (any ``cupy-cuda*`` wheel for "cupy")."""
    names = [dist]
    if dist == "cupy":
        names += sorted(d.metadata["Name"] for d in importlib.metadata.distributions()
                        if (d.metadata["Name"] or "").lower().startswith("cupy-"))
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _guarded(what: Callable[[], Any]) -> Any:
    """``what()``, or ``{"error": ...}`` where it raised: one missing piece never hides the rest."""
    try:
        return what()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _proc_cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux), {} elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    return fields


def cpu_info() -> dict[str, Any]:
    """The CPU model, its core count, its vector extensions and the name LLVM compiles for."""
    import llvmlite.binding as llvm

    proc = _proc_cpuinfo()
    model = proc.get("model name") or proc.get("hardware") or platform.processor() or platform.machine()
    flags = set((proc.get("flags") or proc.get("features") or "").split())
    if "pni" in flags:           # Linux's name for SSE3 ("Prescott New Instructions")
        flags.add("sse3")
    source = "/proc/cpuinfo" if flags else "llvm"
    try:
        llvm_features = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",")
                         if f.startswith("+")}
    except Exception:            # LLVM raises where it cannot tell
        llvm_features = set()
    if not flags:
        flags = llvm_features
    return {
        "model": model,
        "machine": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "vector_extensions": [x for x in VECTOR_EXTENSIONS if x in flags],
        "extensions_from": source,
        "llvm_cpu_name": llvm.get_host_cpu_name(),
    }


def blas_info() -> dict[str, Any]:
    """Which BLAS the compiled products call (``"numpy"``: NumPy's OpenBLAS, ``"scipy"``:
    SciPy's) and what threadpoolctl sees of the BLAS libraries loaded, with their threads."""
    from .kernels import blas  # type: ignore[attr-defined]

    info: dict[str, Any] = {"compiled_products": blas.library()}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["libraries"] = "threadpoolctl is not installed: pip install threadpoolctl"
        return info
    info["libraries"] = [
        {k: lib.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer",
                                 "architecture", "filepath")}
        for lib in threadpool_info() if lib.get("user_api") == "blas"]
    return info


def cuda_info() -> dict[str, Any]:
    """The CUDA driver, toolkit and devices, where numba-cuda is installed and a GPU (or the
    simulator) can be used; otherwise why not."""
    from .cuda_driver import cuda_or_reason, simulator

    if importlib.util.find_spec("numba_cuda") is None and not simulator():
        return {"available": False,
                "reason": "numba-cuda is not installed (pip install -e '.[cuda]')"}
    cuda, reason = cuda_or_reason()
    if cuda is None:
        return {"available": False, "reason": reason}
    from .device import devices

    info: dict[str, Any] = {"available": True, "simulator": simulator()}
    if not simulator():
        info["driver"] = _guarded(lambda: ".".join(map(str, cuda.cudadrv.driver.driver.get_version())))
        info["runtime"] = _guarded(lambda: ".".join(map(str, cuda.runtime.get_version())))
    info["toolkit"] = _version("cuda-toolkit") or _version("nvidia-cuda-runtime")
    info["devices"] = [{"name": d.name, "id": d.id,
                        "compute_capability": ".".join(map(str, d.compute_capability or ()))}
                       for d in devices() if d.platform == "cuda"]
    return info


def cache_info(exact: bool = True) -> dict[str, Any]:
    """The disk cache this process compiles into: directory, bytes, entry count and limit
    (``exact=False``: the size recorded at the last store, no scan; entries then None)."""
    from .compiler.settings import disk_cache

    return disk_cache().usage(exact=exact)


def settings_info() -> dict[str, Any]:
    """The ``JITGRAPH_*`` variables set, the relevant Numba/BLAS ones, and Numba's thread count."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("JITGRAPH_")}
    env.update({k: os.environ[k] for k in RELEVANT_VARIABLES if k in os.environ})
    out: dict[str, Any] = {"variables": env or "none set (JITGRAPH_*, NUMBA_*, *_NUM_THREADS)"}
    try:
        from numba.core import config
        out["numba_num_threads"] = config.NUMBA_NUM_THREADS
        out["numba_threading_layer"] = config.THREADING_LAYER
    except Exception as e:  # pragma: no cover - numba is a dependency
        out["numba"] = f"{type(e).__name__}: {e}"
    out["prebuilt_kernels"] = _guarded(prebuilt_info)
    return out


def prebuilt_info() -> str:
    """Whether the kernels shipped as LLVM IR compile from it here, or why Numba compiles them
    (``jitgraph/compiler/prebuilt.py``: a first call with attention waits seconds longer)."""
    from .compiler import prebuilt
    data, why = prebuilt.manifest()
    if data is None:
        return f"not used ({why}): Numba compiles the attention kernels"
    return f"used: {len(data['kernels'])} attention kernels, made with numba {data['numba']}"


def environment_info() -> dict[str, Any]:
    """Everything ``print_environment_info`` prints, as a dict (see the module docstring)."""
    return {
        "jitgraph": __version__,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "cpu": _guarded(cpu_info),
        "blas": _guarded(blas_info),
        "cuda": _guarded(cuda_info),
        "cache": _guarded(cache_info),
        "settings": _guarded(settings_info),
    }


def format_size(n: int | None) -> str:
    """``n`` bytes as "37.5 MiB" ("no limit" for None)."""
    if n is None:
        return "no limit"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _lines(value: Any, indent: str) -> list[str]:
    """A nested dict/list as indented ``key: value`` lines."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out += [f"{indent}{k}:"] + _lines(v, indent + "  ")
            else:
                out.append(f"{indent}{k}: {v if v not in (None, {}, []) else '-'}")
        return out
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return [indent + " ".join(map(str, value))]
        out = []
        for v in value:
            sub = _lines(v, indent + "  ")
            out += [indent + "- " + sub[0].lstrip()] + sub[1:]
        return out
    return [f"{indent}{value}"]


def format_environment_info(info: dict[str, Any] | None = None) -> str:
    """The text ``print_environment_info`` prints."""
    info = environment_info() if info is None else info
    cache = dict(info["cache"])
    if "bytes" in cache:
        cache["bytes"] = f"{cache['bytes']} ({format_size(cache['bytes'])})"
        cache["limit"] = format_size(cache.get("limit"))
    lines = [f"jitgraph {info['jitgraph']}",
             f"python {info['python']} ({info['python_implementation']}) {info['executable']}",
             f"platform {info['platform']}",
             "packages:"]
    lines += [f"  {k}: {v or 'not installed'}" for k, v in info["packages"].items()]
    for section in ("cpu", "blas", "cuda"):
        lines += [f"{section}:"] + _lines(info[section], "  ")
    lines += ["cache:"] + _lines(cache, "  ")
    lines += ["settings:"] + _lines(info["settings"], "  ")
    return "\n".join(lines)


def print_environment_info(file: Any = None) -> None:
    """Print the versions, CPU, BLAS, CUDA, disk cache and settings a bug report needs."""
    print(format_environment_info(), file=file if file is not None else sys.stdout)
