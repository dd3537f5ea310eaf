"""The machine code of loop kernels compiled by ``loop_ir``: planned, compiled, cached.

A kernel of a program whose driver runs in Python is compiled straight to LLVM IR
(``loop_ir.py``) where its source allows; its object code is cached beside the kernel's
module in the disk cache, as ``<module digest>.<argument types digest>.o`` (part of the
module's entry: evicted with it), with a checksum. The driver calls it through a launcher
(``threaded.py``), the same built-in function a threaded Numba kernel gets, so the kernel's
source module stays as it was and Numba compiles it where this path does not apply
(``JITGRAPH_LOOP_IR=0``, arguments of runtime sizes, a construct ``loop_ir`` does not
translate, a damaged object).
"""
from __future__ import annotations

import hashlib
import os
import pathlib
from dataclasses import dataclass

from . import loop_ir, native, threaded
from .disk_cache import atomic_write, seal, unseal
from .state import STATE

MAGIC = b"JITGRAPH-LOOP-OBJECT-1\n"
ENV = "JITGRAPH_LOOP_IR"
#: object code this process compiled or read, by cache path (programs sharing a kernel)
_LOADED: dict[pathlib.Path, bytes] = {}


def enabled() -> bool:
    """Kernels are compiled this way unless ``JITGRAPH_LOOP_IR=0``, where launchers exist and
    llvmlite has LLVM's new pass manager (as Numba's own optimisation uses)."""
    if os.environ.get(ENV, "1") == "0" or not threaded.available():
        return False
    import llvmlite.binding as llvm
    return hasattr(llvm, "create_pass_builder") and hasattr(llvm, "create_pipeline_tuning_options")


@dataclass
class DirectKernel:
    """One loop kernel compiled by ``loop_ir``: its launch record, where its object code is
    cached, its source (translated by the job that compiles it: on a compile worker, not
    before the fork) and its object code once compiled or read. ``numba_job``: what Numba
    compiles where the translator turns the source down (``_precompile``'s job for it)."""
    launch: threaded.Launch
    path: pathlib.Path
    source: str = ""
    obj: bytes | None = None
    in_memory: bool = False
    numba_job: tuple = ()


def plan(name: str, source: str, arg_types: tuple, cache, key: str,
         numba_job: tuple = ()) -> DirectKernel | None:
    """The kernel as a ``DirectKernel`` (its object code read from the cache, else to be
    compiled), or None where Numba must compile it (a ``prange`` loop, argument types
    ``loop_ir`` does not take)."""
    rows = threaded.rows_of(source)
    dtypes = tuple(arg_types[2:] if rows is not None else arg_types)
    linear = threaded.linear_rows(rows) if rows is not None else (1, 0, -1)
    if any(t not in loop_ir.DTYPES for t in dtypes) or "prange(" in source or linear is None:
        return None                     # 2-d views, 16-bit floats, prange...
    tag = hashlib.sha256(",".join(arg_types).encode()).hexdigest()[:12]
    launch = threaded.Launch(name, f"{native.LOOP_KERNEL_PREFIX}{name}_{tag}", dtypes,
                             linear[0], direct=True, serial=rows is None,
                             rows_scale=linear[1], rows_arg=linear[2])
    path = cache.directory / f"{cache.entry_name(source, key)}.{tag}.o"
    obj = _LOADED.get(path)
    k = DirectKernel(launch, path, source, obj=obj or _read(cache, path),
                     in_memory=obj is not None, numba_job=numba_job)
    if k.obj is not None:
        _LOADED[path] = k.obj
    return k


def compile_one(k: DirectKernel) -> None:
    """Translate and compile ``k`` and store its object code in the cache (a compile
    worker's job). Raises ``loop_ir.Unsupported`` where the translator turns it down."""
    text = loop_ir.translate(k.source, k.launch.name, k.launch.dtypes, k.launch.symbol).text
    k.obj = loop_ir.compile_object(text)
    try:
        atomic_write(k.path, seal(MAGIC, k.obj))
    except OSError:
        pass                            # a read-only cache: compiled again next process


def finish(k: DirectKernel, cache) -> bool:
    """After the compile workers: the object code they stored, else compiled here; False
    where ``loop_ir`` turned the source down or LLVM rejected the IR (then Numba compiles
    the kernel: a translator bug must not stop the program, and is counted)."""
    if k.obj is None:
        k.obj = _read(cache, k.path)
    if k.obj is None:
        try:
            compile_one(k)
        except loop_ir.Unsupported:
            return False
        except Exception as exc:
            _note_failure(k.launch.name, exc)
            return False
    _LOADED[k.path] = k.obj
    return True


def _note_failure(name: str, exc: Exception) -> None:
    """Count a kernel ``loop_ir`` or LLVM failed on (``STATE.compile_stats``, which tests
    read) and say so where ``JITGRAPH_LOG`` includes ``compiles``."""
    STATE.compile_stats["loop_ir_failures"] += 1
    if "compiles" in os.environ.get("JITGRAPH_LOG", ""):
        import sys
        print(f"jitgraph: loop kernel {name} went to Numba: {exc!r}", file=sys.stderr)


def _read(cache, path: pathlib.Path) -> bytes | None:
    """The object code cached at ``path`` (None: missing, unsafe or damaged)."""
    return unseal(MAGIC, cache.read_trusted(path))
