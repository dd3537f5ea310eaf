"""Threaded loop kernels without ``prange``: a serial kernel over a range of rows, run on
Numba's threads by a launcher written in LLVM IR.

Why: Numba compiles a ``prange`` loop's body twice (the function, then the loop body again as
a gufunc) and runs its parfor passes: a threaded kernel of the GPT step cost 0.8-0.95 s to
compile against 0.45-0.5 s serial, and threaded kernels were 14 of the step's 17 s of
compile CPU time. Here a threaded loop kernel is generated as an ordinary serial ``@njit``
kernel whose first two parameters are the rows it runs, ``loop(lo, hi, a0, a1, ...)``, so
it compiles (and caches, and goes to compile workers) as any serial kernel. The driver calls
its *launcher* ``threads_loop(a0, a1, ...)``: a CPython built-in function whose machine code
(a few dozen lines of IR below, compiled by LLVM in milliseconds, never by Numba) checks each
argument (a 1-d C-contiguous ndarray of the kernel's dtype, else ``TypeError``), releases the
GIL and calls Numba's threading layer (``numba_parallel_for``, the function every ``prange``
loop calls) with a function that calls the kernel's native entry point on chunks of rows taken
from a shared counter. The threads and their count (``numba.set_num_threads``) are Numba's
own, as for ``prange``; on one thread the launcher calls the kernel directly.

A launcher may also take a *product tail* (``Launch.tail``): after each chunk of rows, the
thread that computed it multiplies the rows of the kernel's output array that chunk wrote by a
second operand, one one-thread ``?gemm`` call (``kernels/blas.py``'s symbols), while those rows
are still in its cache. The code generator pairs a kernel with the product after it this way
when the kernel writes the product's left operand, row block by row block (a convolution's
im2col, then its product: ``CpuCodegen.pair_steps``). Its chunks are cut by size alone
(``PRODUCT_TAIL_CHUNK_BYTES``), so results do not depend on the number of threads.

Native bundles carry the same IR (``bundle_ir``, compiled with a bundle's wrappers), so a
process that loads a bundle gets the same launchers without Numba.
"""
from __future__ import annotations

import functools
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import native, numba_patches
from .state import STATE
from .thresholds import PRODUCT_TAIL_CHUNK_BYTES, PRODUCT_TAIL_MIN_ROWS

#: what a threaded kernel's source says about its rows (the loader reads the count back): a
#: statement ``launch_rows = <count>`` so marked, a count in code (a literal, or in a program
#: whose sizes are runtime arguments a formula in its size parameters, ``a4`` or ``(8 * a4)``,
#: which ``compiler/dynamic.py`` writes where a size's literals were)
ROWS_MARK = "# rows split over threads"
_ROWS = re.compile(r"^\s*launch_rows = (.+?)  " + re.escape(ROWS_MARK) + "$", re.M)
#: a count of rows ``base + scale * <size parameter arg>`` (``arg`` -1: a constant)
_LINEAR = re.compile(r"^\(?(?:(\d+) \* )?a(\d+)(?: \* (\d+))?(?: \+ (\d+))?\)?$")
#: the prefix of a launcher's name in the driver
PREFIX = "threads_"
#: the prefix of a launcher with a product tail: ``gemm_after<a>_<kernel>``, ``a`` the kernel
#: array argument that is the product's left operand
TAIL_PREFIX = "gemm_after"
#: the prefix of a launcher with a product head: ``gemm_before<c>_<kernel>``, ``c`` the kernel
#: array argument that reads the product's output (each thread computes the rows of it its
#: chunk reads into a buffer of its own: the output is never stored whole)
HEAD_PREFIX = "gemm_before"
_TAIL = "(" + TAIL_PREFIX + "|" + HEAD_PREFIX + r")(\d+)_(\w+)"
_TAIL_NAME = re.compile("^" + _TAIL + "$")
_TAIL_CALL = re.compile(r"\b" + _TAIL + r"\(")
#: a tail's arguments after the kernel's: the right operand and the output (flat arrays of the
#: left operand's dtype), the left operand's rows per kernel row, its columns, the output's
#: columns, and whether the right operand is stored transposed; a head's: the left operand and
#: the right one, then the same four sizes (the output's rows per kernel row first)
TAIL_ARGS = 6
_GEMM = {"float32": ("float", "jitgraph_sgemm64"), "float64": ("double", "jitgraph_dgemm64")}
#: a kernel parameter that is an int64 scalar (a size passed at run time), not an array
SIZE = "size"

#: chunks of rows per thread: each thread takes the next chunk until none is left
CHUNKS_PER_THREAD = 4
_ARRAYS = 4             # the shared block's first array slot (after status, counter, chunks, rows)

_LOCK = threading.RLock()


@dataclass(frozen=True)
class Launch:
    """A threaded kernel as its launcher needs it: the kernel's name, its native entry point's
    symbol, its arrays' dtypes (after ``lo, hi``) and its number of rows. ``direct``: the
    kernel was compiled by ``loop_ir`` (its object code goes with the launcher, which declares
    its entry point); ``serial``: such a kernel without rows to split (``rows`` is 1), whose
    launcher the driver calls by the kernel's own name."""
    name: str
    symbol: str
    dtypes: tuple
    rows: int
    direct: bool = False
    serial: bool = False
    rows_scale: int = 0     # the rows are rows + rows_scale * (size argument rows_arg)
    rows_arg: int = -1
    tail: int = -1          # the array argument a product tail multiplies (-1: no tail)
    head: bool = False      # ``tail`` is a product head's output instead

    @property
    def callable_name(self) -> str:
        """The name the driver calls the launcher by."""
        if self.tail >= 0:
            return tail_name(self.name, self.tail, self.head)
        return self.name if self.serial else PREFIX + self.name


def tail_name(kernel: str, arg: int, head: bool) -> str:
    """The driver's name for ``kernel``'s launcher with a product tail on argument ``arg``
    (``head``: a product head read as argument ``arg``)."""
    return f"{HEAD_PREFIX if head else TAIL_PREFIX}{arg}_{kernel}"


def tail_calls(driver_source: str) -> dict[str, tuple]:
    """kernel -> ``(argument, head)`` of each product tail and head a driver calls it with."""
    out: dict = {}
    for m in dict.fromkeys(_TAIL_CALL.findall(driver_source)):
        out[m[2]] = out.get(m[2], ()) + ((int(m[1]), m[0] == HEAD_PREFIX),)
    return out


def tail_call(name: str) -> tuple[str, int, bool] | None:
    """``(kernel, argument, head)`` of a launcher name with a product tail (the argument is the
    product's left operand) or head (``head``: the argument reads the product), else None."""
    m = _TAIL_NAME.match(name)
    return (m.group(3), int(m.group(2)), m.group(1) == HEAD_PREFIX) if m else None


def launched_kernel(name: str) -> str | None:
    """The kernel a launcher name in a driver runs (``threads_<kernel>`` or a tail's)."""
    tail = tail_call(name)
    if tail is not None:
        return tail[0]
    return name[len(PREFIX):] if name.startswith(PREFIX) else None


def serial_tail(run_rows: Callable, nargs: int, a_arg: int, product: Callable) -> Callable:
    """A tail's launcher where none can be built: the kernel over all its rows
    (``run_rows``: the kernel's own launcher, or its serial call), then the product as the
    driver would call it unpaired (``product`` takes ``par_gemm``'s arguments)."""
    def call(*args):
        kernel_args, (b, c, _, k, n, tb) = args[:nargs], args[nargs:]
        run_rows(*kernel_args)
        m = c.size // n
        b2 = b[:k * n].reshape((n, k) if tb else (k, n))
        product(1.0, kernel_args[a_arg][:m * k].reshape((m, k)), 0, b2, tb, 0.0,
                c.reshape((m, n)))
    return call


def serial_head(run_rows: Callable, nargs: int, c_arg: int, rows: Callable,
                product: Callable) -> Callable:
    """A head's launcher where none can be built: the product whole, into a new array, then
    the kernel over all its rows (``run_rows``) reading it as argument ``c_arg``; ``rows``
    gives the kernel's rows from its arguments."""
    def call(*args):
        kernel_args, (a, b, r, k, n, tb) = list(args[:nargs]), args[nargs:]
        m = rows(*kernel_args) * r
        c = np.empty(m * n, a.dtype)
        b2 = b[:k * n].reshape((n, k) if tb else (k, n))
        product(1.0, a[:m * k].reshape((m, k)), 0, b2, tb, 0.0, c.reshape((m, n)))
        kernel_args[c_arg] = c
        run_rows(*kernel_args)
    return call


def available() -> bool:
    """Whether generated kernels may be threaded this way: Linux, a Numba whose internals
    ``numba_patches`` checked (the native entry's calling convention) and NumPy's array
    struct where the launcher reads it. (The threading layer is started when a launcher is
    built, not here: code generation must not start threads before compile workers fork;
    where it does not load, ``build`` fails and the kernels run serially.)"""
    return sys.platform.startswith("linux") and numba_patches.fast_paths_enabled() and \
        native.array_offsets_ok()


def rows_of(source: str) -> int | str | None:
    """The rows of a threaded kernel, from its source: a count, or the expression of its
    count in the kernel's size parameters (None: not a threaded kernel)."""
    m = _ROWS.search(source)
    if not m:
        return None
    text = m.group(1).strip()
    return int(text) if text.isdigit() else text


def linear_rows(rows: int | str) -> tuple[int, int, int] | None:
    """``(base, scale, arg)``: the count is ``base + scale * <parameter arg>`` (``arg`` -1:
    the constant ``base``); None for another formula (then no launcher: the kernel runs
    serially over its rows, ``serial_call``)."""
    if isinstance(rows, int):
        return rows, 0, -1
    m = _LINEAR.match(rows)
    if m is None:
        return None
    c1, arg, c2, base = m.groups()
    return int(base or 0), int(c1 or 1) * int(c2 or 1), int(arg)


def row_count(rows: int | str) -> Callable:
    """A kernel's rows from its arguments (as its launcher is called: no ``lo, hi``)."""
    if isinstance(rows, int):
        return lambda *args: rows
    expr = compile(rows, "<rows>", "eval")
    return lambda *args: eval(expr, {f"a{i}": a for i, a in enumerate(args)})


def serial_call(kernel: Callable, rows: int | str) -> Callable:
    """``kernel`` over all its rows at once, called as its launcher is (no ``lo, hi``)."""
    if isinstance(rows, int):
        return functools.partial(kernel, 0, rows)
    count = row_count(rows)

    def call(*args):
        return kernel(0, count(*args), *args)
    return call


def is_threaded(source: str) -> bool:
    """Whether a generated kernel runs on threads: a ``prange`` loop (a compiled driver's
    kernels, full reductions) or rows split by a launcher."""
    return "prange(" in source or rows_of(source) is not None


def _kind(dtype: str) -> tuple:
    return ("a", np.dtype(dtype).str, 1, "C", True, True)


def launcher_ir(index: int, launch: Launch, declare: bool = True) -> str:
    """The IR of ``jgl_<index>`` (the launcher, METH_FASTCALL) and ``jgt_<index>`` (what each
    thread runs). It uses the globals of ``native.IR_GLOBALS`` and ``IR_DECLARATIONS``;
    ``declare``: declare the kernel's entry point (not where the module declares it already).

    The rows are cut into ``CHUNKS_PER_THREAD`` chunks per thread, and each thread takes the
    next chunk from a shared counter until none is left: a thread the operating system
    preempts (a busy machine) leaves its share to the others instead of holding every other
    thread at the region's end for its whole half. Each row is computed by one kernel call
    whatever the split, so results do not depend on it. A launcher with a product tail
    (``launch.tail``) cuts its chunks by size instead, and after each one calls ``?gemm`` on
    the rows of the left operand it wrote (``_tail_ir``)."""
    n = len(launch.dtypes)
    sym = launch.symbol
    tail = launch.tail >= 0
    head = tail and launch.head
    if tail and (launch.serial or launch.dtypes[launch.tail] not in _GEMM):
        raise ValueError(f"{launch.name}: no product tail for argument {launch.tail}")
    nargs = n + TAIL_ARGS * tail
    tslot = _ARRAYS + 2 * n             # a tail's slots: after the kernel's arrays
    # the count of rows: a constant, or base + scale * a size argument (unboxed by the checks)
    rows_ir = [f"  %rows = add i64 {int(launch.rows)}, 0"] if launch.rows_arg < 0 else [
        f"  %rowss = mul i64 %v{launch.rows_arg}, {int(launch.rows_scale)}",
        f"  %rows = add i64 %rowss, {int(launch.rows)}"]
    # the block the threads share: status, next chunk, chunks, then each array's data and length
    tramp = ["  %ret = alloca [8 x i64], align 16",
             "  %exc = alloca ptr, align 8",
             "  %ctr = getelementptr i64, ptr %data, i64 1",
             "  %nchp = getelementptr i64, ptr %data, i64 2",
             "  %nch = load i64, ptr %nchp",
             "  %rowsp = getelementptr i64, ptr %data, i64 3",
             "  %rows = load i64, ptr %rowsp"]
    entry_args = ["ptr %ret", "ptr %exc", "i64 %lo", "i64 %hi"]
    for j, dt in enumerate(launch.dtypes):
        if dt == SIZE:                  # an int64 (a size passed at run time): itself
            tramp += [f"  %vp{j} = getelementptr i64, ptr %data, i64 {_ARRAYS + 2 * j}",
                      f"  %v{j} = load i64, ptr %vp{j}"]
            entry_args.append(f"i64 %v{j}")
            continue
        size = np.dtype(dt).itemsize
        tramp += [f"  %dp{j} = getelementptr i64, ptr %data, i64 {_ARRAYS + 2 * j}",
                  f"  %d{j} = load ptr, ptr %dp{j}",
                  f"  %np{j} = getelementptr i64, ptr %data, i64 {_ARRAYS + 1 + 2 * j}",
                  f"  %n{j} = load i64, ptr %np{j}"]
        data = "%hd" if head and j == launch.tail else f"%d{j}"     # (a head: its buffer)
        entry_args += ["ptr null", "ptr null", f"i64 %n{j}", f"i64 {size}", f"ptr {data}",
                       f"i64 %n{j}", f"i64 {size}"]
    sig = ", ".join(a.split(" ")[0] for a in entry_args)
    if tail:
        tramp += _tail_setup_ir(launch, tslot)
    # (a tail's kernel has its own launcher in the same module, which declares it)
    tramp_fn = [f'declare i32 @"{sym}"({sig})'] * ((declare or launch.direct) and not tail) + [
        f"define void @jgt_{index}(ptr %args, ptr %dims, ptr %steps, ptr %data) {{",
        "entry:", *tramp,
        *(_head_buffer_ir(launch) if head else []),
        "  br label %loop",
        "loop:",
        "  %c = atomicrmw add ptr %ctr, i64 1 monotonic",
        "  %more = icmp slt i64 %c, %nch",
        "  br i1 %more, label %body, label %done",
        "body:",
        "  %lo0 = mul i64 %c, %rows",
        "  %lo = sdiv i64 %lo0, %nch",
        "  %c1 = add i64 %c, 1",
        "  %hi0 = mul i64 %c1, %rows",
        "  %hi = sdiv i64 %hi0, %nch",
        *(_head_ir(launch) if head else []),
        f'  %st = call i32 @"{sym}"({", ".join(entry_args)})',
        "  %ok0 = icmp eq i32 %st, 0",          # Numba's "ok" and "returned None"
        "  %ok1 = icmp eq i32 %st, -2",
        "  %ok = or i1 %ok0, %ok1",
        f"  br i1 %ok, label %{'tail' if tail and not head else 'loop'}, label %fail",
        *(_tail_ir(launch) if tail and not head else []),
        "fail:",
        "  store i64 1, ptr %data",
        "  br label %loop",
        "done:",
        *(["  call void @PyMem_RawFree(ptr %hbuf)"] if head else []),
        "  ret void",
        *(["nomem:", "  store i64 1, ptr %data", "  ret void"] if head else []),
        "}"]
    checks = [f"  %cnt = icmp eq i64 %nargs, {nargs}",
              "  br i1 %cnt, label %start, label %bad",
              "start:"]
    for j, dt in enumerate(launch.dtypes):
        checks += [f"  %a{j}pp = getelementptr ptr, ptr %args, i64 {j}",
                   f"  %a{j} = load ptr, ptr %a{j}pp"]
        if dt == SIZE:                  # an exact Python int
            checks += native.scalar_ir(j, "jgw_int", "PyLong_AsLongLong", "i64") + [
                       f"  %bv{j} = getelementptr i64, ptr %block, i64 {_ARRAYS + 2 * j}",
                       f"  store i64 %v{j}, ptr %bv{j}"]
            continue
        checks += native.check_ir(j, _kind(dt), flags=False) + native.array_fields_ir(j)
        checks += [f"  %n{j} = load i64, ptr %h{j}",
                   f"  %bd{j} = getelementptr i64, ptr %block, i64 {_ARRAYS + 2 * j}",
                   f"  store ptr %d{j}, ptr %bd{j}",
                   f"  %bn{j} = getelementptr i64, ptr %block, i64 {_ARRAYS + 1 + 2 * j}",
                   f"  store i64 %n{j}, ptr %bn{j}"]
    if tail:
        checks += _tail_checks_ir(launch, tslot)
    types = ", ".join(launch.dtypes)
    if tail:
        adt = launch.dtypes[launch.tail]
        types += (f", then the product's: {adt}, {adt}, rows, columns, columns, transposed"
                  if not head else f", then the product's: {adt}, {adt}, rows, inner, "
                  "columns, transposed")
    bad = f"{launch.callable_name}: expected {nargs} arguments: one-dimensional " \
          f"C-contiguous arrays of dtypes, or ints for sizes: {types}"
    failed = f"{launch.callable_name}: the kernel reported an error"
    launcher = [
        f"@jgl_bad_{index} = private constant [{len(bad) + 1} x i8] c\"{bad}\\00\"",
        f"@jgl_failed_{index} = private constant [{len(failed) + 1} x i8] c\"{failed}\\00\"",
        f"define ptr @jgl_{index}(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        f"  %block = alloca [{tslot + TAIL_ARGS * tail} x i64], align 16",
        "  %argv = alloca ptr, align 8",
        "  %shape = alloca [2 x i64], align 8",
        "  %steps = alloca i64, align 8",
        *checks,
        *rows_ir,
        *(_tail_sizes_ir(launch) if tail else []),
        "  store i64 0, ptr %block",
        "  %ctr = getelementptr i64, ptr %block, i64 1",
        "  store i64 0, ptr %ctr",
        "  %ts = call ptr @PyEval_SaveThread()",
        # (a serial kernel's launcher never starts the threading layer, nor links to it)
        "  %nt0 = call i64 @get_num_threads()" if not launch.serial else "  %nt0 = add i64 1, 0",
        "  %ntpos = icmp sgt i64 %nt0, 0",
        "  %nt = select i1 %ntpos, i64 %nt0, i64 1",
        "  %rowsp = getelementptr i64, ptr %block, i64 3",
        "  store i64 %rows, ptr %rowsp",
        f"  %want = mul i64 %nt, {CHUNKS_PER_THREAD}",
        "  %fewrows = icmp slt i64 %rows, %want",
        "  %nch0 = " + ("add i64 %tnch, 0" if tail else
                        "select i1 %fewrows, i64 %rows, i64 %want"),
        "  %nopos = icmp slt i64 %nch0, 0",            # (no rows at all: no chunk)
        "  %nch = select i1 %nopos, i64 0, i64 %nch0",
        "  %nchp = getelementptr i64, ptr %block, i64 2",
        "  store i64 %nch, ptr %nchp",
        "  %fewch = icmp slt i64 %nch, %nt",
        "  %nthr0 = select i1 %fewch, i64 %nch, i64 %nt",
        "  %nothr = icmp slt i64 %nthr0, 1",
        "  %nthr = select i1 %nothr, i64 1, i64 %nthr0",
        "  store ptr %block, ptr %argv",
        "  store i64 %nthr, ptr %shape",
        "  %shape1 = getelementptr i64, ptr %shape, i64 1",
        "  store i64 1, ptr %shape1",
        "  store i64 0, ptr %steps",
        "  %one = icmp eq i64 %nthr, 1",
        "  br i1 %one, label %alone, label %pool",
        "alone:",                               # one thread: no threading layer at all
        f"  call void @jgt_{index}(ptr %argv, ptr %shape, ptr %steps, ptr %block)",
        "  br label %joined",
        "pool:",
        f"  call void @numba_parallel_for(ptr @jgt_{index}, ptr %argv, ptr %shape, "
        "ptr %steps, ptr %block, i64 1, i64 1, i64 %nthr)" if not launch.serial else
        "  unreachable",
        "  br label %joined" if not launch.serial else "",
        "joined:",
        "  call void @PyEval_RestoreThread(ptr %ts)",
        "  %status = load i64, ptr %block",
        "  %fine = icmp eq i64 %status, 0",
        "  br i1 %fine, label %good, label %failed",
        "good:",
        "  call void @Py_IncRef(ptr @_Py_NoneStruct)",
        "  ret ptr @_Py_NoneStruct",
        "failed:",
        f"  call void @PyErr_SetString(ptr @PyExc_RuntimeError, ptr @jgl_failed_{index})",
        "  ret ptr null",
        "bad:",
        f"  call void @PyErr_SetString(ptr @PyExc_TypeError, ptr @jgl_bad_{index})",
        "  ret ptr null",
        "}"]
    return "\n".join(tramp_fn + launcher) + "\n"


def _tail_checks_ir(launch: Launch, tslot: int) -> list[str]:
    """The launcher's checks of a tail's arguments (after the kernel's), stored in the
    block: the right operand's and the output's data, then the four sizes."""
    n, out = len(launch.dtypes), []
    for j in range(n, n + TAIL_ARGS):
        out += [f"  %a{j}pp = getelementptr ptr, ptr %args, i64 {j}",
                f"  %a{j} = load ptr, ptr %a{j}pp"]
    for j in (n, n + 1):
        out += native.check_ir(j, _kind(launch.dtypes[launch.tail]), flags=False)
        out += native.array_fields_ir(j) + [
            f"  %n{j} = load i64, ptr %h{j}",
            f"  %bd{j} = getelementptr i64, ptr %block, i64 {tslot + j - n}",
            f"  store ptr %d{j}, ptr %bd{j}"]
    for j in range(n + 2, n + TAIL_ARGS):
        out += native.scalar_ir(j, "jgw_int", "PyLong_AsLongLong", "i64") + [
            f"  %bv{j} = getelementptr i64, ptr %block, i64 {tslot + j - n}",
            f"  store i64 %v{j}, ptr %bv{j}"]
    return out


def _tail_sizes_ir(launch: Launch) -> list[str]:
    """Refuse (``%bad``) a tail whose sizes are not positive, over 2**31 - 1, or whose arrays
    are shorter than the rows need; then its chunk count ``%tnch``: rows of the kernel per
    chunk for about ``PRODUCT_TAIL_CHUNK_BYTES`` of the left operand, and at least
    ``PRODUCT_TAIL_MIN_ROWS`` rows of it."""
    n, a = len(launch.dtypes), launch.tail
    r, k, c, tb = (f"%v{j}" for j in range(n + 2, n + TAIL_ARGS))
    size = np.dtype(launch.dtypes[a]).itemsize
    # (a head: its left operand is the first extra array, its output a buffer of its own)
    a_len, b_len = (f"%n{n}", f"%n{n + 1}") if launch.head else (f"%n{a}", f"%n{n}")
    out = ["  br label %tchk", "tchk:"]
    conds = []
    for i, (v, lo) in enumerate(((r, 1), (k, 1), (c, 1), ("%rows", 0))):
        out += [f"  %tlo{i} = icmp sge i64 {v}, {lo}",
                f"  %thi{i} = icmp sle i64 {v}, 2147483647"]
        conds += [f"%tlo{i}", f"%thi{i}"]
    out += [f"  %tbok = icmp ule i64 {tb}, 1",
            f"  %tar = mul i64 %rows, {r}", f"  %tna = mul i64 %tar, {k}",
            f"  %tnc = mul i64 %tar, {c}", f"  %tnb = mul i64 {k}, {c}",
            f"  %taok = icmp sle i64 %tna, {a_len}", f"  %tbok2 = icmp sle i64 %tnb, {b_len}"]
    conds += ["%tbok", "%taok", "%tbok2"]
    if not launch.head:                 # (a head's output is its own buffer)
        out.append(f"  %tcok = icmp sle i64 %tnc, %n{n + 1}")
        conds.append("%tcok")
    acc = conds[0]
    for i, cnd in enumerate(conds[1:]):
        out.append(f"  %tall{i} = and i1 {acc}, {cnd}")
        acc = f"%tall{i}"
    out += [f"  br i1 {acc}, label %tgo, label %bad", "tgo:",
            f"  %trk = mul i64 {r}, {c if launch.head else k}",   # operand/output per row
            f"  %trb = mul i64 %trk, {size}",
            f"  %trpc0 = sdiv i64 {PRODUCT_TAIL_CHUNK_BYTES}, %trb",
            f"  %tmin0 = add i64 {r}, {PRODUCT_TAIL_MIN_ROWS - 1}",
            f"  %tmin = sdiv i64 %tmin0, {r}",
            "  %tsmall = icmp slt i64 %trpc0, %tmin",
            "  %trpc = select i1 %tsmall, i64 %tmin, i64 %trpc0",
            "  %tnch0 = add i64 %rows, %trpc",
            "  %tnch1 = sub i64 %tnch0, 1",
            "  %tnch = sdiv i64 %tnch1, %trpc"]
    return out


def _tail_setup_ir(launch: Launch, tslot: int) -> list[str]:
    """What a thread of a tail's launcher reads once: the product's operands, sizes and
    ``?gemm``'s arguments (Fortran's: by reference)."""
    real = _GEMM[launch.dtypes[launch.tail]][0]
    out = []
    for i, name in enumerate(("tad", "tbd") if launch.head else ("tbd", "tcd")):
        out += [f"  %{name}p = getelementptr i64, ptr %data, i64 {tslot + i}",
                f"  %{name} = load ptr, ptr %{name}p"]
    for i, name in enumerate(("tr", "tk", "tn", "ttb"), 2):
        out += [f"  %{name}p = getelementptr i64, ptr %data, i64 {tslot + i}",
                f"  %{name} = load i64, ptr %{name}p"]
    out += ["  %ttrans = icmp ne i64 %ttb, 0",
            "  %tch = select i1 %ttrans, i8 84, i8 78",      # 'T' / 'N'
            "  %tld = select i1 %ttrans, i64 %tk, i64 %tn"]
    refs = (("g_ta", "i8", "%tch"), ("g_tn", "i8", "78"), ("g_m", "i64", "%tn"),
            ("g_n", "i64", "0"), ("g_k", "i64", "%tk"), ("g_al", real, "1.0"),
            ("g_lda", "i64", "%tld"), ("g_ldb", "i64", "%tk"), ("g_be", real, "0.0"),
            ("g_ldc", "i64", "%tn"))
    for name, ty, value in refs:
        out += [f"  %{name} = alloca {ty}, align 8", f"  store {ty} {value}, ptr %{name}"]
    return out


def _head_buffer_ir(launch: Launch) -> list[str]:
    """A head's thread: its buffer for the product's rows of its largest chunk (freed when it
    is done; none to be had: the launcher reports an error)."""
    size = np.dtype(launch.dtypes[launch.tail]).itemsize
    return ["  %hmax0 = add i64 %rows, %nch",
            "  %hmax1 = sub i64 %hmax0, 1",
            "  %hnz = icmp sgt i64 %nch, 0",
            "  %hnch = select i1 %hnz, i64 %nch, i64 1",
            "  %hmax = sdiv i64 %hmax1, %hnch",
            "  %hel0 = mul i64 %hmax, %tr",
            "  %hel = mul i64 %hel0, %tn",
            f"  %hby0 = mul i64 %hel, {size}",
            "  %hby = add i64 %hby0, 64",
            "  %hbuf = call ptr @PyMem_RawMalloc(i64 %hby)",
            "  %hnull = icmp eq ptr %hbuf, null",
            "  br i1 %hnull, label %nomem, label %hgo",
            "hgo:"]


def _head_ir(launch: Launch) -> list[str]:
    """Before a chunk ``lo:hi`` of the kernel's rows: rows ``lo * r:hi * r`` of the product
    (left operand @ right operand) into the thread's buffer, which the kernel then reads as
    argument ``launch.tail`` through a base pointer ``lo * r`` rows before it (``%hd``)."""
    real = _GEMM[launch.dtypes[launch.tail]][0]
    return _chunk_gemm_ir(launch, "h", "%tad", "%hbuf", False) + [
        "  %hneg = sub i64 0, %hcoff",
        f"  %hd = getelementptr {real}, ptr %hbuf, i64 %hneg"]


def _tail_ir(launch: Launch) -> list[str]:
    """After a chunk ``lo:hi`` of the kernel's rows: rows ``lo * r:hi * r`` of the output
    = those rows of the left operand (argument ``launch.tail``) @ the right operand."""
    return ["tail:", *_chunk_gemm_ir(launch, "t", f"%d{launch.tail}", "%tcd", True),
            "  br label %loop"]


def _chunk_gemm_ir(launch: Launch, p: str, a: str, c: str, c_rows: bool) -> list[str]:
    """Rows ``lo * r:hi * r`` of a product whose left operand starts at ``a`` (rows of ``k``)
    into ``c`` (at those rows where ``c_rows``, else from its start): one ``?gemm`` on the
    column-major transpose, C^T = op(B)^T A^T (as ``gemm_launchers``); names ``%<p>...``."""
    real, gemm = _GEMM[launch.dtypes[launch.tail]]
    out = [f"  %{p}m0 = sub i64 %hi, %lo",
           f"  %{p}m = mul i64 %{p}m0, %tr",
           f"  %{p}lo = mul i64 %lo, %tr",
           f"  %{p}aoff = mul i64 %{p}lo, %tk",
           f"  %{p}coff = mul i64 %{p}lo, %tn",
           f"  %{p}ap = getelementptr {real}, ptr {a}, i64 %{p}aoff"]
    if c_rows:
        out.append(f"  %{p}cp = getelementptr {real}, ptr {c}, i64 %{p}coff")
    return out + [
        f"  store i64 %{p}m, ptr %g_n",
        f"  call void @{gemm}(ptr %g_ta, ptr %g_tn, ptr %g_m, ptr %g_n, ptr %g_k, "
        f"ptr %g_al, ptr %tbd, ptr %g_lda, ptr %{p}ap, ptr %g_ldb, ptr %g_be, "
        f"ptr {f'%{p}cp' if c_rows else c}, ptr %g_ldc)"]


#: declarations the launchers need beside ``native.IR_GLOBALS`` (once per module)
IR_DECLARATIONS = """declare void @numba_parallel_for(ptr, ptr, ptr, ptr, ptr, i64, i64, i64)
declare i64 @get_num_threads()
declare void @jitgraph_sgemm64(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)
declare void @jitgraph_dgemm64(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)
declare ptr @PyMem_RawMalloc(i64)
declare void @PyMem_RawFree(ptr)
declare void @PyErr_SetString(ptr, ptr)
@PyExc_TypeError = external global i8
@PyExc_RuntimeError = external global i8
"""


def bundle_ir(launches: list[Launch]) -> tuple[str, tuple]:
    """The launchers' IR for a native bundle (``native.export``'s ``extra_ir``, beside the
    wrappers that declare the kernels' entry points) and their ``(name, symbol)`` pairs."""
    if not launches:
        return "", ()
    text = IR_DECLARATIONS + "".join(launcher_ir(i, launch, declare=False)
                                     for i, launch in enumerate(launches))
    return text, tuple((launch.callable_name, f"jgl_{i}") for i, launch in enumerate(launches))


def build(launches: list[Launch], entries: dict[str, int],
          objects: tuple = ()) -> dict[str, Callable] | None:
    """The launchers of ``launches`` in this process (their kernels compiled by Numba here:
    ``entries`` maps each entry point's symbol to its address; or by ``loop_ir``: their
    ``objects`` go in the launchers' engine), by name (``Launch.callable_name``); None where
    LLVM cannot build them (the caller then calls the kernels as Numba compiled them)."""
    import ctypes

    import llvmlite.binding as llvm
    if not launches:
        return {}
    with _LOCK:
        native.register_runtime()
        if not all(launch.serial for launch in launches) and not native.parallel_symbols():
            return None
        if any(launch.tail >= 0 for launch in launches):
            from ..kernels import blas  # type: ignore[attr-defined]
            blas.register()
        for sym, addr in entries.items():
            llvm.add_symbol(sym, addr)
        text = native.IR_GLOBALS + IR_DECLARATIONS + "".join(
            launcher_ir(i, launch) for i, launch in enumerate(launches))
        from numba.core.compiler_lock import global_compiler_lock
        with global_compiler_lock:      # LLVM's context is not thread-safe
            mod = llvm.parse_assembly(text)
            mod.triple = llvm.get_process_triple()
            mod.verify()
            engine = llvm.create_mcjit_compiler(mod, native.target_machine())
            for obj in objects:
                engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            engine.finalize_object()
        STATE.patches.setdefault("engines", []).append(engine)
    for gname, obj in (("jgw_ndarray", np.ndarray), ("jgw_int", int)):   # (sizes are ints)
        ctypes.c_void_p.from_address(engine.get_global_value_address(gname)).value = id(obj)
    keep: list = [engine]
    out = {}
    for i, launch in enumerate(launches):
        fn = native.builtin(launch.callable_name, engine.get_function_address(f"jgl_{i}"),
                             keep)
        if fn is None:
            return None
        out[launch.callable_name] = fn
    return out


def entry_of(dispatcher, signature) -> tuple[str, int] | None:
    """The symbol and address of ``dispatcher``'s native entry point for ``signature`` (loaded
    from Numba's cache, or compiled, if it has none yet); None where its calling convention is
    not the one the launcher calls."""
    dispatcher.compile(signature)
    cres = dispatcher.overloads.get(tuple(signature))
    if cres is None:
        return None
    fnty, symbol = numba_patches.entry_point(cres)
    kinds = [native.numba_kind(t) for t in cres.signature.args]
    if any(k is None for k in kinds) or not native.flattened_ok(fnty, kinds):
        return None
    return symbol, cres.library.get_pointer_to_function(symbol)


# ------------------------------------------------------------------ hand-written row kernels
_ROW_LAUNCHERS: dict = {}
#: where a hand-written row kernel's machine code may come from before Numba is asked:
#: ``(module, name, argument types) -> (entry symbol, object code) or None``
#: (``prebuilt.object_code``, put here by ``fused_calls``: this layer imports no higher one)
ROW_OBJECTS: list[Callable] = []


def _arg_type(x) -> str | None:
    """A row kernel argument's type as a launcher takes it (None: one it cannot take)."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return SIZE
    if isinstance(x, np.ndarray) and x.ndim == 1 and x.flags.c_contiguous:
        return x.dtype.name
    return None


def row_pool(kernel, n: int, args: tuple) -> bool:
    """Run the hand-written row kernel ``kernel(lo, hi, *args, n)`` (an ``@njit`` dispatcher)
    over rows ``0..n`` on Numba's threads, through a launcher built once per kernel and
    argument types (its rows are its last argument, so one launcher serves every size):
    ``kernels.threads.run_rows``'s pool. False where no launcher can be built here (the caller
    then runs the rows itself)."""
    if not available() or numba_patches.serial_kernels():
        return False
    types = tuple(_arg_type(a) for a in args) + (SIZE,)
    if None in types:
        return False
    key = (kernel, types)
    fn = _ROW_LAUNCHERS.get(key)
    if fn is None:
        with _LOCK:
            fn = _ROW_LAUNCHERS.get(key)
            if fn is None:
                try:
                    fn = _row_launcher(kernel, types) or False
                except Exception:   # (a kernel Numba cannot compile for these types: the
                    fn = False      # caller's own call then reports it, as without a pool)
                _ROW_LAUNCHERS[key] = fn
    if fn is False:
        return False
    fn(*(int(a) if t == SIZE else a for a, t in zip(args, types)), int(n))
    return True


def _row_launcher(kernel, types: tuple) -> Callable | None:
    """The launcher of ``kernel`` for arguments ``types`` (``row_pool``), or None."""
    from numba import types as nt
    from numba.np.numpy_support import from_dtype
    numba_patches.start_threads()
    name = re.sub(r"\W", "_", getattr(kernel, "__name__", "rows"))
    py_func = getattr(kernel, "py_func", None)
    for source in ROW_OBJECTS if py_func is not None else ():
        shipped = source(py_func.__module__, py_func.__name__, (SIZE, SIZE) + types)
        if shipped is not None:
            launch = Launch(name, shipped[0], types, 0, direct=True, rows_scale=1,
                            rows_arg=len(types) - 1)
            built = build([launch], {}, (shipped[1],))
            if built is not None:
                return built[launch.callable_name]
    entry = entry_of(kernel, tuple(nt.int64 if t == SIZE else
                                   nt.Array(from_dtype(np.dtype(t)), 1, "C")
                                   for t in (SIZE, SIZE) + types))
    if entry is None:
        return None
    launch = Launch(name, entry[0], types, 0, rows_scale=1, rows_arg=len(types) - 1)
    built = build([launch], {entry[0]: entry[1]})
    return None if built is None else built[launch.callable_name]
