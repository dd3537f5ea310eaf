"""How long OpenBLAS's idle worker threads spin before they sleep: shortened from about 0.1 s to
about 0.4 ms, in every OpenBLAS this process has loaded.

After each threaded product OpenBLAS's workers busy-wait (``sched_yield`` in a loop) for
``thread_timeout`` cycles, 2**28 by default, before they block on a condition variable. A
compiled training step calls a product every millisecond or so and runs its own parallel loops
in between, so on a 2-core machine one core was always taken by a spinning BLAS worker: the
generated loops, the attention and cross-entropy kernels' threads and the next product all ran
beside it (measured on a 2-core Xeon, the GPT benchmark's small step: 64 ms with the default,
46 ms with 2**20 cycles, 49 ms with 2**16, 56 ms with 2**4: a short spin keeps back-to-back
products fast and frees the core right after them).

OpenBLAS reads the limit from ``OPENBLAS_THREAD_TIMEOUT`` (N, for 2**N cycles) once, when it
loads, and NumPy loads it before jitgraph runs; its workers re-read the variable on every wait
but it has no setter. So this module finds it in the library's own symbol table (a local
``thread_timeout``, 4 bytes) and writes it there, once per library: only where the symbol is
found exactly once, holds a power of two between 2**4 and 2**30 (a value OpenBLAS itself set),
and the user set no ``OPENBLAS_THREAD_TIMEOUT``. Anything else leaves the library as it is.
"""
from __future__ import annotations

import ctypes
import os
import struct

import numpy as np

SPIN_CYCLES = 1 << 20           # about 0.4 ms at 2.5 GHz
_SYMBOL, _ANCHOR = b"thread_timeout", b"openblas_thread_timeout"
_SHT_SYMTAB = 2
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                 ("value", "<u8"), ("size", "<u8")])     # one ELF64 symbol, 24 bytes
_DONE: dict[str, str] = {}      # library path -> what was done ("set 2**28 -> 2**20", "skipped: ...")


def _symbols(path: str, names: tuple[bytes, ...]) -> dict[bytes, list[tuple[int, int]]]:
    """name -> [(value, size)] of the named symbols in an ELF64 little-endian file's .symtab."""
    found: dict[bytes, list[tuple[int, int]]] = {n: [] for n in names}
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return found
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        for sec in sections:
            if sec[1] != _SHT_SYMTAB or sec[9] != 24 or sec[6] >= shnum:
                continue
            strtab = sections[sec[6]]
            f.seek(strtab[4])
            strings = f.read(strtab[5])
            f.seek(sec[4])
            syms = np.frombuffer(f.read(sec[5] - sec[5] % 24), _SYM)
            for name in names:      # every offset the name can start at (tails are shared)
                offsets, at = [], strings.find(name + b"\0")
                while at >= 0:
                    offsets.append(at)
                    at = strings.find(name + b"\0", at + 1)
                hit = syms[np.isin(syms["name"], offsets)]
                found[name] += [(int(v), int(z)) for v, z in zip(hit["value"], hit["size"])]
    return found


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux), NumPy's and SciPy's."""
    try:
        with open("/proc/self/maps") as f:
            fields = (line.split(None, 5) for line in f)
            paths = {x[5].strip() for x in fields if len(x) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if "openblas" in os.path.basename(p) and ".so" in p)


def _cell(path: str) -> ctypes.c_uint | str:
    """The loaded library's ``thread_timeout`` variable, or why it cannot be found."""
    try:
        lib = ctypes.CDLL(path)     # already loaded: the same handle, no second copy
        anchor = ctypes.cast(getattr(lib, _ANCHOR.decode()), ctypes.c_void_p).value
        syms = _symbols(path, (_SYMBOL, _ANCHOR))
    except (OSError, AttributeError, struct.error) as exc:
        return f"skipped: {exc}"
    if len(syms[_SYMBOL]) != 1 or len(syms[_ANCHOR]) != 1 or syms[_SYMBOL][0][1] != 4:
        return "skipped: no single thread_timeout symbol"
    return ctypes.c_uint.from_address(anchor - syms[_ANCHOR][0][0] + syms[_SYMBOL][0][0])


def _shorten(path: str, cycles: int) -> str:
    cell = _cell(path)
    if isinstance(cell, str):
        return cell
    old = cell.value
    if old & (old - 1) or not (1 << 4) <= old <= (1 << 30):
        return f"skipped: unexpected value {old}"
    if old > cycles:
        cell.value = cycles
    return f"set 2**{old.bit_length() - 1} -> 2**{cell.value.bit_length() - 1} cycles"


def shorten_idle_spin(cycles: int = SPIN_CYCLES) -> dict[str, str]:
    """Shorten the idle spin of every loaded OpenBLAS (once per library); path -> what was done.
    Leaves every library alone where the user set ``OPENBLAS_THREAD_TIMEOUT``."""
    if os.environ.get("OPENBLAS_THREAD_TIMEOUT"):
        return {}
    for path in _loaded_openblas():
        if path not in _DONE:
            _DONE[path] = _shorten(path, cycles)
    return dict(_DONE)


def spin_cycles(path: str) -> int | None:
    """The idle spin, in cycles, that the loaded OpenBLAS at ``path`` uses now (None: unknown)."""
    cell = _cell(path)
    return None if isinstance(cell, str) else cell.value
