"""Native bundles: run a cached program's machine code in a process that never imports Numba.

Why: a process that only *runs* cached programs spent most of its start-up importing Numba
(0.35-0.4 s here) and building its dispatchers, though all it needs is the machine code
Numba compiled earlier.  After a program's first successful call, the functions its driver
calls (loop kernels, the ``kernels/`` products; or the driver itself where it is compiled)
are written to one *bundle* beside the disk cache's modules, ``<driver entry>.native``:

* for each overload: Numba's object code (which holds everything it calls, linked in), the
  argument types it was compiled for, and a *wrapper*: a CPython ``METH_FASTCALL`` function
  in LLVM IR that checks each argument's class, rank, dtype, byte order, layout and flags
  in NumPy's array struct (a mismatch returns a sentinel, never runs the kernel), then calls
  Numba's native entry point (return slot, exception slot, then each argument flattened:
  an array as meminfo, parent, size, itemsize, data, shape, strides), releasing the GIL
  where the dispatcher does;
* the undefined symbols of all objects (from their ELF symbol tables), so a loader can
  refuse a bundle whose symbols it cannot resolve instead of letting LLVM abort the process;
* the driver's Python source when the driver is Python.

A new process that has not imported Numba loads the bundle with llvmlite alone: Numba's
runtime, helpers and (for ``prange`` kernels) threading layer come from Numba's C extensions,
loaded by file without the ``numba`` package; each wrapper becomes a built-in function
object (``PyCFunction_NewEx``), so a call costs about what calling a dispatcher costs.  A call
with argument types the bundle lacks goes to Numba for that function; a bundle that fails
any check is ignored (the usual Numba path then builds the same program from the disk
cache).  Linux (ELF) only; ``JITGRAPH_NATIVE=0`` turns it off, and so does a Numba version
``numba_patches.py`` was not checked on (bundles rely on Numba's internals).
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import pickle
import struct
import sys
import threading
from typing import Any, Callable

import numpy as np

from . import numba_patches
from .disk_cache import atomic_write, numba_target_setting, seal, unseal
from .state import STATE

MAGIC = b"JITGRAPH-NATIVE-1\n"
#: the symbols of loop kernels ``loop_ir`` compiled (a bundle carries their object code)
LOOP_KERNEL_PREFIX = "jgk_"
_LOCK = threading.RLock()
# a fork waits until no thread is loading a bundle (taken after the disk cache's lock, never
# while Numba's compiler lock is held)
numba_patches.hold_across_fork(_LOCK)


def enabled() -> bool:
    """Bundles are written and read on Linux unless ``JITGRAPH_NATIVE=0`` or the installed
    Numba is not one ``numba_patches`` was checked on."""
    return sys.platform.startswith("linux") and os.environ.get("JITGRAPH_NATIVE", "1") != "0" \
        and numba_patches.fast_paths_enabled()


# ----------------------------------------------------------------------------- argument kinds

def runtime_kind(a: Any) -> tuple | None:
    """The key Numba's ``typeof`` would give an argument, as a tuple (None: unsupported)."""
    if a.__class__ is np.ndarray:
        f = a.flags
        layout = "C" if f.c_contiguous else ("F" if f.f_contiguous else "A")
        return ("a", a.dtype.str, a.ndim, layout, f.writeable, f.aligned)
    if a.__class__ is float or a.__class__ is np.float64:
        return ("f8",)
    if a.__class__ is int or a.__class__ is np.int64:
        return ("i8",)
    return None


def numba_kind(t: Any) -> tuple | None:
    """The same key from a Numba type (export time)."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype
    if isinstance(t, types.Array):
        try:
            dt = as_dtype(t.dtype)
        except Exception:
            return None
        if dt.kind not in "fiucb" or not dt.isnative:
            return None
        return ("a", dt.str, t.ndim, t.layout, bool(t.mutable), bool(t.aligned))
    if t == types.float64:
        return ("f8",)
    if t == types.int64:
        return ("i8",)
    return None


# ----------------------------------------------------------------------------- ELF symbols

def undefined_symbols(obj: bytes) -> list[str] | None:
    """Names an ELF64 little-endian object file needs from outside (None: not such a file)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    names: set[str] = set()
    for sh in sections:
        if sh[1] != 2:                              # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for k in range(sh[5] // 24):
            name_off, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, sh[4] + 24 * k)
            if shndx != 0 or name_off == 0:         # defined here, or no name
                continue
            if info >> 4 == 0 and info & 0xF == 0:  # local NOTYPE (section markers)
                continue
            end = obj.index(b"\0", str_off + name_off)
            names.add(obj[str_off + name_off:end].decode())
    return sorted(names)


# ----------------------------------------------------------------------------- export

def flattened_ok(fnty: Any, kinds: list[tuple]) -> bool:
    """Numba's native function type is (ret*, exc**, args flattened) as this module assumes."""
    params = [str(p) for p in fnty.args]
    if str(fnty.return_type) != "i32" or len(params) < 2:
        return False
    pos = 2
    for k in kinds:
        if k[0] == "a":
            nd = k[2]
            want = ["p", "p", "i64", "i64", "p"] + ["i64"] * (2 * nd)
        else:
            want = ["double" if k[0] == "f8" else "i64"]
        got = params[pos:pos + len(want)]
        got = ["p" if ("*" in g or g == "ptr") else g for g in got]
        if got != want:
            return False
        pos += len(want)
    return pos == len(params)


_NPY_C, _NPY_F, _NPY_ALIGNED, _NPY_WRITEABLE = 0x1, 0x2, 0x100, 0x400


def check_ir(i: int, k: tuple, flags: bool = True) -> list[str]:
    """IR that branches to ``%bad`` unless argument ``i`` is an ndarray of kind ``k``:
    its class, ndim, dtype number and byte order, layout, and (``flags``) its writeable and
    aligned flags (a Numba type of its own each; the machine code does not differ)."""
    _, dstr, nd, layout, writeable, aligned = k
    dt = np.dtype(dstr)
    mask = (_NPY_ALIGNED | _NPY_WRITEABLE if flags else 0) | \
        (_NPY_C | _NPY_F if layout != "C" else _NPY_C)
    want = (_NPY_ALIGNED if aligned and flags else 0) | (_NPY_WRITEABLE if writeable and flags else 0)
    want |= {"C": _NPY_C, "F": _NPY_F, "A": 0}[layout]
    o = ARRAY_OFFSETS
    return [
        f"  %ty{i}p = getelementptr i8, ptr %a{i}, i64 8",
        f"  %ty{i} = load ptr, ptr %ty{i}p",
        f"  %nda{i} = load ptr, ptr @jgw_ndarray",
        f"  %c{i}a = icmp eq ptr %ty{i}, %nda{i}",
        f"  br i1 %c{i}a, label %k{i}b, label %bad",
        f"k{i}b:",
        f"  %nd{i}p = getelementptr i8, ptr %a{i}, i64 {o['nd']}",
        f"  %nd{i} = load i32, ptr %nd{i}p",
        f"  %fl{i}p = getelementptr i8, ptr %a{i}, i64 {o['flags']}",
        f"  %fl{i} = load i32, ptr %fl{i}p",
        f"  %fm{i} = and i32 %fl{i}, {mask}",
        f"  %ds{i}p = getelementptr i8, ptr %a{i}, i64 {o['descr']}",
        f"  %ds{i} = load ptr, ptr %ds{i}p",
        f"  %tn{i}p = getelementptr i8, ptr %ds{i}, i64 {o['type_num']}",
        f"  %tn{i} = load i32, ptr %tn{i}p",
        f"  %bo{i}p = getelementptr i8, ptr %ds{i}, i64 {o['byteorder']}",
        f"  %bo{i} = load i8, ptr %bo{i}p",
        f"  %c{i}n = icmp eq i32 %nd{i}, {nd}",
        f"  %c{i}f = icmp eq i32 %fm{i}, {want}",
        f"  %c{i}t = icmp eq i32 %tn{i}, {dt.num}",
        f"  %c{i}o = icmp ne i8 %bo{i}, {ord('>' if sys.byteorder == 'little' else '<')}",
        f"  %c{i}1 = and i1 %c{i}n, %c{i}f",
        f"  %c{i}2 = and i1 %c{i}t, %c{i}o",
        f"  %c{i}3 = and i1 %c{i}1, %c{i}2",
        f"  br i1 %c{i}3, label %k{i}, label %bad",
        f"k{i}:"]


def array_fields_ir(i: int) -> list[str]:
    """IR that reads ndarray argument ``%a<i>``'s data pointer (``%d<i>``) and the pointers to
    its shape (``%h<i>``) and strides (``%t<i>``) from NumPy's array struct."""
    return [f"  %d{i}p = getelementptr i8, ptr %a{i}, i64 {ARRAY_OFFSETS['data']}",
            f"  %d{i} = load ptr, ptr %d{i}p",
            f"  %h{i}p = getelementptr i8, ptr %a{i}, i64 {ARRAY_OFFSETS['dims']}",
            f"  %h{i} = load ptr, ptr %h{i}p",
            f"  %t{i}p = getelementptr i8, ptr %a{i}, i64 {ARRAY_OFFSETS['strides']}",
            f"  %t{i} = load ptr, ptr %t{i}p"]


def scalar_ir(i: int, cls: str, unbox: str, ty: str, bad: str = "bad") -> list[str]:
    """IR that branches to ``%<bad>`` unless argument ``%a<i>`` is exactly of the class in
    global ``@<cls>`` (``jgw_float``, ``jgw_int``), else unboxes it with ``unbox`` into ``%v<i>``
    of type ``ty``. Its names are its own (``check_ir``'s ``%c<i><n>`` of one argument is
    ``%c<i'>`` of another)."""
    return [f"  %ty{i}p = getelementptr i8, ptr %a{i}, i64 8",
            f"  %ty{i} = load ptr, ptr %ty{i}p",
            f"  %cls{i} = load ptr, ptr @{cls}",
            f"  %isa{i} = icmp eq ptr %ty{i}, %cls{i}",
            f"  br i1 %isa{i}, label %k{i}, label %{bad}",
            f"k{i}:",
            f"  %v{i} = call {ty} @{unbox}(ptr %a{i})"]


def _wrapper_ir(index: int, symbol: str, kinds: list[tuple], nogil: bool = False) -> str:
    """LLVM IR of ``jgw_<index>``, a CPython ``METH_FASTCALL`` function: check that each
    argument is of the compiled type (else return the ``mismatch`` sentinel), unpack it, call
    Numba's function; return None, or the ``failed`` sentinel with Numba's status stored."""
    lines = [f"  %cnt = icmp eq i64 %nargs, {len(kinds)}",
             "  br i1 %cnt, label %start, label %bad",
             "start:"]
    call = ["ptr %ret", "ptr @jgw_exc"]
    for i, k in enumerate(kinds):
        lines += [f"  %a{i}pp = getelementptr ptr, ptr %args, i64 {i}",
                  f"  %a{i} = load ptr, ptr %a{i}pp"]
        if k[0] in ("f8", "i8"):
            cls, unbox, ty = (("jgw_float", "PyFloat_AsDouble", "double") if k[0] == "f8"
                              else ("jgw_int", "PyLong_AsLongLong", "i64"))
            lines += scalar_ir(i, cls, unbox, ty)
            call.append(f"{ty} %v{i}")
            continue
        nd = k[2]
        lines += check_ir(i, k) + array_fields_ir(i)
        shape, strides = [], []
        for j in range(nd):
            lines += [f"  %h{i}_{j}p = getelementptr i64, ptr %h{i}, i64 {j}",
                      f"  %h{i}_{j} = load i64, ptr %h{i}_{j}p",
                      f"  %t{i}_{j}p = getelementptr i64, ptr %t{i}, i64 {j}",
                      f"  %t{i}_{j} = load i64, ptr %t{i}_{j}p"]
            shape.append(f"%h{i}_{j}")
            strides.append(f"%t{i}_{j}")
        size = "1"
        for j, sz in enumerate(shape):
            lines.append(f"  %n{i}_{j} = mul i64 {size}, {sz}")
            size = f"%n{i}_{j}"
        call += ["ptr null", "ptr null", f"i64 {size}", f"i64 {np.dtype(k[1]).itemsize}",
                 f"ptr %d{i}"]
        call += [f"i64 {x}" for x in shape + strides]
    sig = ", ".join(["ptr", "ptr"] + [c.split(" ")[0] for c in call[2:]])
    # a ``nogil`` function lets other threads run while it computes, as its dispatcher does
    release = ["  %ts = call ptr @PyEval_SaveThread()"] if nogil else []
    reacquire = ["  call void @PyEval_RestoreThread(ptr %ts)"] if nogil else []
    return "\n".join([
        f'declare i32 @"{symbol}"({sig})',
        f"define ptr @jgw_{index}(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        "  %ret = alloca [8 x i64], align 16",
        *lines,
        *release,
        f'  %st = call i32 @"{symbol}"({", ".join(call)})',
        *reacquire,
        "  %ok0 = icmp eq i32 %st, 0",          # Numba's "ok" and "returned None"
        "  %ok1 = icmp eq i32 %st, -2",
        "  %ok = or i1 %ok0, %ok1",
        "  br i1 %ok, label %good, label %failed",
        "good:",
        "  call void @Py_IncRef(ptr @_Py_NoneStruct)",
        "  ret ptr @_Py_NoneStruct",
        "failed:",
        "  store i32 %st, ptr @jgw_status",
        "  %fo = load ptr, ptr @jgw_failed",
        "  call void @Py_IncRef(ptr %fo)",
        "  ret ptr %fo",
        "bad:",
        "  %mo = load ptr, ptr @jgw_mismatch",
        "  call void @Py_IncRef(ptr %mo)",
        "  ret ptr %mo",
        "}", ""])


IR_GLOBALS = """@jgw_exc = global ptr null, align 8
@jgw_ndarray = global ptr null, align 8
@jgw_float = global ptr null, align 8
@jgw_int = global ptr null, align 8
@jgw_mismatch = global ptr null, align 8
@jgw_failed = global ptr null, align 8
@jgw_status = global i32 0, align 4
@_Py_NoneStruct = external global i8
declare void @Py_IncRef(ptr)
declare double @PyFloat_AsDouble(ptr)
declare i64 @PyLong_AsLongLong(ptr)
declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
"""


def export(path: str, callees: dict, driver_def: str | None, machine: dict,
           signatures: dict | None = None, extra_ir: str = "",
           extra_functions: tuple = (), extra_objects: tuple = ()) -> bool:
    """Write the bundle for one program (see the module docstring). ``callees``: name ->
    Numba dispatcher; ``signatures``: name -> the argument types the program calls it with,
    where a shared helper has overloads for other programs too (only those go in the
    bundle); ``extra_ir``: more IR for the wrappers' module (the launchers of threaded
    kernels, ``threaded.py``: they call the callees' entry points, which the wrappers declare),
    defining the ``METH_FASTCALL`` functions ``extra_functions`` names as ``(name, symbol)``;
    ``extra_objects``: object code those functions call besides the callees' (the kernels
    ``loop_ir.py`` compiled). Returns whether a bundle was written."""
    import llvmlite.binding as llvm
    if not numba_patches.fast_paths_enabled() or not array_offsets_ok():
        return False
    objects: list[bytes] = []
    undefined: set[str] = set()
    table: dict[str, list] = {}
    ir_parts = [IR_GLOBALS]
    n = 0
    for name, disp in callees.items():
        entries = []
        overloads = list(disp.overloads.values())
        wanted = (signatures or {}).get(name)
        if wanted and any(tuple(c.signature.args) in wanted for c in overloads):
            overloads = [c for c in overloads if tuple(c.signature.args) in wanted]
        for cres in overloads:
            obj = numba_patches.object_code(cres)
            if obj is None or str(cres.signature.return_type) != "none":
                continue
            kinds = [numba_kind(t) for t in cres.signature.args]
            if any(k is None for k in kinds):
                continue
            fnty, symbol = numba_patches.entry_point(cres)
            if not flattened_ok(fnty, kinds):
                continue
            und = undefined_symbols(obj)
            if und is None:
                return False
            nogil = bool(getattr(disp, "targetoptions", {}).get("nogil"))
            ir_parts.append(_wrapper_ir(n, symbol, kinds, nogil))
            entries.append({"kinds": [list(k) for k in kinds], "wrapper": f"jgw_{n}"})
            objects.append(obj)
            undefined.update(und)
            n += 1
        if not entries:
            return False
        table[name] = entries
    for obj in extra_objects:
        und = undefined_symbols(obj)
        if und is None:
            return False
        objects.append(obj)
        undefined.update(und)
    if not _loadable(undefined):
        return False
    mod = llvm.parse_assembly("\n".join(ir_parts + [extra_ir]))
    mod.triple = llvm.get_process_triple()
    wrappers = target_machine().emit_object(mod)
    und = undefined_symbols(wrappers)
    if und is None:
        return False
    # Numba's functions and loop_ir's kernels are defined in the objects
    undefined.update(u for u in und if not u.startswith(("_ZN", LOOP_KERNEL_PREFIX)))
    blobs = objects + [wrappers]
    header = {"machine": machine, "driver": driver_def, "callees": table,
              "extra": [list(f) for f in extra_functions],
              "undefined": sorted(undefined), "sizes": [len(b) for b in blobs]}
    head = json.dumps(header, sort_keys=True).encode()
    payload = struct.pack("<Q", len(head)) + head + b"".join(blobs)
    atomic_write(path, seal(MAGIC, payload))
    return True


def _loadable(names: set[str]) -> bool:
    """Whether a process without Numba can resolve these symbols (export time): Numba's
    runtime and helpers, the threading layer, CPython's objects, BLAS, or the C library."""
    from ..kernels import blas  # type: ignore[attr-defined]
    known = set(numba_patches.runtime_symbols()) | set(_PARALLEL_SYMBOLS)
    known |= set(blas.ROUTINES.values()) | {"_Py_NoneStruct"}
    process = ctypes.CDLL(None)
    for name in names:
        if name in known or name.startswith("PyExc_"):
            continue
        try:
            getattr(process, name)
        except AttributeError:
            return False
    return True


# ----------------------------------------------------------------------------- loading

def parse(data: bytes) -> tuple[dict, list[bytes]] | None:
    """Header and blobs of a bundle's bytes (None: not a bundle, or damaged)."""
    payload = unseal(MAGIC, data)
    if payload is None:
        return None
    n, = struct.unpack_from("<Q", payload, 0)
    header = json.loads(payload[8:8 + n])
    blobs, pos = [], 8 + n
    for size in header["sizes"]:
        blobs.append(payload[pos:pos + size])
        pos += size
    if pos != len(payload):
        return None
    return header, blobs


# Where NumPy's array struct (``PyArrayObject_fields``) and dtype struct keep what the
# wrappers read; checked against a real array by ``array_offsets_ok`` before any use.
ARRAY_OFFSETS = {"data": 16, "nd": 24, "dims": 32, "strides": 40, "descr": 56, "flags": 64,
        "byteorder": 26, "type_num": 28}


@functools.lru_cache(maxsize=None)
def array_offsets_ok() -> bool:
    """NumPy's structs have the fields where the wrappers read them (a standard CPython
    build: 16-byte object header)."""
    if sys.getsizeof(object()) != 16:
        return False
    a = np.empty((3, 5), np.float32)[:, 1:4]
    b = np.empty((4, 2), np.float64).T
    b.setflags(write=False)
    read = lambda t, addr: t.from_address(addr).value  # noqa: E731
    for arr, flags in ((a, _NPY_ALIGNED | _NPY_WRITEABLE), (b, _NPY_ALIGNED | _NPY_F)):
        base = id(arr)
        dims = read(ctypes.c_void_p, base + ARRAY_OFFSETS["dims"])
        strides = read(ctypes.c_void_p, base + ARRAY_OFFSETS["strides"])
        descr = read(ctypes.c_void_p, base + ARRAY_OFFSETS["descr"])
        if (read(ctypes.c_void_p, base + ARRAY_OFFSETS["data"]) != arr.__array_interface__["data"][0]
                or read(ctypes.c_int, base + ARRAY_OFFSETS["nd"]) != arr.ndim or not dims
                or not strides or descr != id(arr.dtype)
                or read(ctypes.c_int, base + ARRAY_OFFSETS["flags"]) & 0x503 != flags
                or read(ctypes.c_int, descr + ARRAY_OFFSETS["type_num"]) != arr.dtype.num
                or read(ctypes.c_char, descr + ARRAY_OFFSETS["byteorder"]) != arr.dtype.byteorder.encode()
                or (ctypes.c_int64 * arr.ndim).from_address(dims)[:] != list(arr.shape)
                or (ctypes.c_int64 * arr.ndim).from_address(strides)[:] != list(arr.strides)):
            return False
    return True


#: CPUs Numba compiles for without AVX unless ``NUMBA_ENABLE_AVX`` says otherwise (its config)
_NO_AVX_BY_DEFAULT = frozenset({"corei7-avx", "core-avx-i", "sandybridge", "ivybridge", "nocona"})


def target_cpu() -> tuple[str, str]:
    """The CPU name and features machine code is generated for: those Numba compiles for
    (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES`` and ``NUMBA_ENABLE_AVX``, read as Numba reads
    them, without importing it), else this machine's. So the kernels LLVM compiles alone
    target what the Numba kernels beside them target: ``generic`` code for a cache shared by
    several kinds of machine, or AVX2 code on an AVX-512 machine."""
    import llvmlite.binding as llvm
    name = numba_target_setting("CPU_NAME")
    features = numba_target_setting("CPU_FEATURES")
    if features is None:        # this machine's, less AVX where Numba turns it off
        try:
            avx = bool(int(numba_target_setting("ENABLE_AVX")))
        except (TypeError, ValueError):     # unset: Numba's default for the CPU
            avx = (name or llvm.get_host_cpu_name()) not in _NO_AVX_BY_DEFAULT
        host = llvm.get_host_cpu_features()
        for feature in host if not avx else ():
            if feature.startswith("avx"):
                host[feature] = False
        features = host.flatten()
    return name or llvm.get_host_cpu_name(), features


def target_machine(opt: int = 0):
    """A new LLVM target machine for ``target_cpu()`` (``opt``: LLVM's code generation
    level)."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    cpu, features = target_cpu()
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="default",
                                        codemodel="jitdefault", jit=True)


def register_runtime() -> None:
    """Register the symbols Numba's machine code calls (its runtime, its helpers, CPython's
    None and exception objects) with LLVM, as Numba does when it starts (once)."""
    with _LOCK:
        if STATE.patches.get("runtime"):
            return
        import llvmlite.binding as llvm
        symbols = numba_patches.runtime_symbols()
        symbols["_Py_NoneStruct"] = id(None)
        import builtins
        for obj in vars(builtins).values():
            if isinstance(obj, type) and issubclass(obj, BaseException):
                symbols["PyExc_" + obj.__name__] = id(obj)
        for name, addr in symbols.items():
            llvm.add_symbol(name, addr)
        STATE.patches["runtime"] = True


class _Sentinel:
    """What a wrapper returns instead of None: ``MISMATCHED`` (an argument is not of its
    compiled type) or ``FAILED`` (Numba's function reported an error)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISMATCHED, FAILED = _Sentinel("MISMATCHED"), _Sentinel("FAILED")


def _plain(a: Any) -> Any:
    """NumPy scalars as the Python scalars the wrappers unbox (Numba types them alike)."""
    if a.__class__ is np.float64:
        return float(a)
    if a.__class__ is np.int64:
        return int(a)
    return a


def _function(name: str, overloads: dict, fallback: Callable[[], Any], status_addr: int,
              exc_addr: int, keep: list | tuple = ()):
    """A bundle's compiled function, called like the Numba dispatcher it came from: the
    overload that served the last call first (its wrapper checks the argument types), then
    the one for these arguments' types, then Numba (types the bundle lacks). It holds *keep*
    (its engine and method definitions) for as long as it lives."""
    last = [next(iter(overloads.values()))]

    def call(*args):
        r = last[0](*args)
        if r is None:
            return None
        if r is MISMATCHED:
            fn = overloads.get(tuple(map(runtime_kind, args)))
            if fn is None:
                return fallback()(*args)
            last[0] = fn
            r = fn(*map(_plain, args))
            if r is None:
                return None
        _raise(name, ctypes.c_int32.from_address(status_addr).value, exc_addr)

    call.__name__ = call.__qualname__ = name
    call.machine_code = keep  # type: ignore[attr-defined]
    return call


def _raise(name: str, status: int, exc_addr: int) -> None:
    """The exception a compiled function reported (Numba's static exceptions are a pickled
    ``(class, args, ...)``), else a RuntimeError naming the function."""
    info = ctypes.c_void_p.from_address(exc_addr).value
    exc: BaseException | None = None
    if status > 0 and info:
        try:
            ptr, size = struct.unpack("=Qi", ctypes.string_at(info, 12))
            cls, args = pickle.loads(ctypes.string_at(ptr, size))[:2]
            exc = cls(*args)
        except Exception:
            exc = None
    if exc is None:
        exc = RuntimeError(f"compiled function {name} failed (status {status})")
    raise exc


_PARALLEL_SYMBOLS = {"numba_parallel_for": "parallel_for", "get_num_threads": None,
                     "do_scheduling_signed": None, "do_scheduling_unsigned": None,
                     "allocate_sched": None, "deallocate_sched": None,
                     "set_num_threads": None, "get_thread_id": None,
                     "set_parallel_chunksize": None, "get_parallel_chunksize": None,
                     "get_sched_size": None}


def parallel_symbols() -> dict[str, int]:
    """Start the threading layer once and register its symbols with LLVM (empty where no
    layer loads: bundles with parallel kernels are then refused)."""
    with _LOCK:
        symbols = STATE.patches.get("parallel")
        if symbols is None:
            import llvmlite.binding as llvm
            try:
                module = numba_patches.threading_layer()
                symbols = {} if module is None else {
                    sym: getattr(module, attr or sym) for sym, attr in _PARALLEL_SYMBOLS.items()}
            except Exception:
                symbols = {}
            for name, addr in symbols.items():
                llvm.add_symbol(name, addr)
            STATE.patches["parallel"] = symbols
        return symbols


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x80


def builtin(name: str, address: int, keep: list) -> Callable | None:
    """A built-in function object (``PyCFunction_NewEx``) calling a wrapper: a call costs
    what calling ``len`` costs, not what ``ctypes`` costs. Its method definition goes to
    ``STATE.patches["defs"]`` and to *keep* (it must live as long as the function)."""
    if not address:
        return None
    new_cfunction = STATE.patches.get("new_cfunction")
    if new_cfunction is None:
        new_cfunction = STATE.patches["new_cfunction"] = ctypes.PYFUNCTYPE(
            ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_void_p)(("PyCFunction_NewEx", ctypes.pythonapi))
    d = _MethodDef(name.encode(), address, _METH_FASTCALL, None)
    STATE.patches.setdefault("defs", []).append(d)
    keep.append(d)
    return new_cfunction(ctypes.addressof(d), None, None)


def load(data: bytes, machine: dict, fallback: Callable[[str], Any]) -> tuple[dict, str | None] | None:
    """The callable functions of a bundle's bytes and its driver source, or None when the
    bundle is unusable here (then the caller takes the Numba path)."""
    parsed = parse(data)
    if parsed is None or not numba_patches.fast_paths_enabled():
        return None
    header, blobs = parsed
    if header.get("machine") != machine or not array_offsets_ok():
        return None
    import llvmlite.binding as llvm
    try:
        register_runtime()
    except Exception:
        return None
    needs = set(header["undefined"])
    if needs & set(_PARALLEL_SYMBOLS) and not parallel_symbols():
        return None
    from ..kernels import blas  # type: ignore[attr-defined]
    if needs & set(blas.ROUTINES.values()):
        blas.register()         # bound only for programs with products
    with _LOCK:
        # (creating the engine makes the process's own symbols visible to the lookup)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
        if any(llvm.address_of_symbol(s) is None for s in needs):
            return None         # LLVM would abort the process on an unresolved symbol
        for blob in blobs:
            engine.add_object_file(llvm.ObjectFileRef.from_data(blob))
        engine.finalize_object()
        STATE.patches.setdefault("engines", []).append(engine)
    addr = engine.get_global_value_address
    for gname, obj in (("jgw_ndarray", np.ndarray), ("jgw_float", float), ("jgw_int", int),
                       ("jgw_mismatch", MISMATCHED), ("jgw_failed", FAILED)):
        ctypes.c_void_p.from_address(addr(gname)).value = id(obj)    # alive while the process is
    functions = {}
    keep: list = [engine]       # the functions keep their machine code alive, whatever STATE does
    for name, entries in header["callees"].items():
        overloads = {}
        for e in entries:
            fn = builtin(name, engine.get_function_address(e["wrapper"]), keep)
            if fn is None:
                return None
            overloads[tuple(tuple(k) for k in e["kinds"])] = fn
        functions[name] = _function(name, overloads, lambda name=name: fallback(name),
                                    addr("jgw_status"), addr("jgw_exc"), keep)
    for name, symbol in header.get("extra", ()):
        fn = builtin(name, engine.get_function_address(symbol), keep)
        if fn is None:
            return None
        functions[name] = fn
    return functions, header.get("driver")
