"""Loop kernels compiled straight to LLVM IR, without Numba's typing and lowering.

Why: Numba spends 0.1-0.35 s on each generated kernel, most of it in its Python-side typing
and lowering (a GPT step's 36 kernels: 6.2 s of CPU time), where LLVM itself needs a tenth of
that. A generated loop kernel is a small language: ``for`` over ``range``, assignments to
scalars, flat indexing of 1-d arrays, arithmetic, comparisons, conditional expressions, casts
(``np.float32(...)``) and calls of the scalar helpers in ``kernels/scalar.py`` and
``kernels/fastmath.py``. This module reads that source (the same text Numba would compile,
still written to the disk cache) and writes the LLVM IR of the kernel's native entry point,
with Numba's calling convention, so the launchers of ``threaded.py`` call it as they call a
Numba kernel. The helpers are translated from their own Python source, so both paths compute
with the same formulas.

Semantics follow Numba's for the same source: its typing rules for scalars (integers compute
in 64 bits, signed if any operand is; an integer beside a float32 gives float64 unless it is
narrow), casts on assignment and store, negative indices wrapping once, NumPy's error model
(an integer division by zero gives 0), the kernel's ``fastmath`` flags on its own arithmetic
and each ``kernels/fastmath.py`` helper's flags on its. Anything outside the language (a
``prange``, a product call, complex numbers, 16-bit floats, a float ``//``) raises
``Unsupported``, and the kernel is compiled by Numba as before.
"""
from __future__ import annotations

import ast
import functools
import inspect
import math
import struct
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import native
from .threaded import SIZE


class Unsupported(Exception):
    """The kernel uses something this translator does not: Numba compiles it instead."""


# ----------------------------------------------------------------------------- types

_LL = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
       "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64",
       "float32": "float", "float64": "double"}
#: how an array element of each dtype sits in memory (a NumPy bool is a byte)
_MEM = {**_LL, "bool": "i8"}
#: what a kernel parameter may be: a 1-d array of one of these dtypes, or ``SIZE``, an int64
#: scalar (a size passed at run time, ``dynamic_dims``)
DTYPES = frozenset(_LL) | {SIZE}
_CASTS = {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64"}


def _is_int(t: str) -> bool:
    return t.startswith(("int", "uint"))


def _is_float(t: str) -> bool:
    return t.startswith("float")


def _bits(t: str) -> int:
    return 1 if t == "bool" else np.dtype(t).itemsize * 8


def int_result(*ts: str) -> str:
    """Numba's integer result type: at least 64 bits, signed if any operand is (a bool
    counts as a signed integer)."""
    bits = max([64] + [_bits(t) for t in ts if t != "bool"])
    signed = any(t == "bool" or t.startswith("int") for t in ts)
    return f"{'int' if signed else 'uint'}{bits}"


def unify(a: str, b: str) -> str:
    """The type of a variable (or conditional expression, or helper result) that takes
    values of both: Numba's ``unify_pairs``, which is NumPy's ``promote_types``."""
    return a if a == b else np.promote_types(a, b).name


def compare_type(a: str, b: str) -> str:
    """The type Numba compares ``a`` and ``b`` in (and computes float arithmetic in):
    ``promote_types``, except that uint16 beside float32 goes to float64."""
    if {a, b} == {"uint16", "float32"}:
        return "float64"
    return unify(a, b)


def arith_result(a: str, b: str) -> str:
    """The type Numba computes ``a + b``, ``a - b``, ``a * b`` in: 64-bit integers between
    integers (and bools), else ``compare_type``."""
    if not _is_float(a) and not _is_float(b):
        return int_result(a, b)
    return compare_type(a, b)


def _float_const(t: str, v: float) -> str:
    """An LLVM float literal (a float32 as the double of its value, in hex)."""
    if t == "float32":
        v = float(np.float32(v))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


def _wrap(t: str, v: int) -> int:
    """``v`` as an integer of dtype ``t`` holds it (two's complement)."""
    bits = _bits(t)
    v = int(v) & ((1 << bits) - 1)
    return v - (1 << bits) if t.startswith("int") and v >= 1 << (bits - 1) else v


def _int_const(t: str, v: int) -> str:
    bits = _bits(t)
    v = int(v) & ((1 << bits) - 1)
    if t == "bool":
        return "true" if v else "false"
    return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)


@dataclass
class Val:
    """A scalar value: its dtype name and its LLVM operand text (``const``: its Python value
    where it is a literal, for literal-only typing; ``nonneg``: an integer known to be at
    least 0, so an index of it needs no wraparound, see ``_Translator.element``)."""
    ty: str
    ref: str
    const: Any = None
    nonneg: bool = False


@dataclass
class _Array:
    dtype: str
    data: str
    nitems: str


def const(t: str, v: Any) -> Val:
    if _is_float(t):
        return Val(t, _float_const(t, float(v)), v)
    return Val(t, _int_const(t, int(v)), v, t == "bool" or 0 <= _wrap(t, v) < 1 << 63)


# ----------------------------------------------------------------------------- helpers

def _flag_text(fastmath: Any) -> str:
    if fastmath is True:
        return "fast "
    if not fastmath:
        return ""
    return " ".join(sorted(fastmath)) + " "


def _arities(text: str) -> dict:
    """``"name/arity ..."`` as a dict: functions of Python's ``math`` module, the language
    generated kernels are written in (not jitgraph's ops, whose facts live on their records)."""
    return {f.split("/")[0]: int(f.split("/")[1]) for f in text.split()}


#: ``math`` functions as LLVM intrinsics (vectorizable) or C library calls, with their arity
_INTRINSICS = _arities("sqrt/1 sin/1 cos/1 exp/1 exp2/1 log/1 log2/1 log10/1 fabs/1 "
                       "copysign/2 pow/2")
_LIBM = _arities("tan/1 asin/1 acos/1 atan/1 atan2/2 sinh/1 cosh/1 tanh/1 asinh/1 acosh/1 "
                 "atanh/1 expm1/1 log1p/1 erf/1 erfc/1 lgamma/1 hypot/2")


@dataclass
class _Helper:
    """A scalar helper specialised to argument types: its LLVM name and result type."""
    name: str
    ret: str


@dataclass
class Module:
    """The IR of one kernel: its text, the entry point's symbol and the helpers it defines."""
    symbol: str
    text: str = ""
    helpers: dict = field(default_factory=dict)     # (function, arg types) -> _Helper
    helper_ir: list = field(default_factory=list)
    declares: set = field(default_factory=set)
    metadata: list = field(default_factory=list)     # loop metadata nodes' definitions
    unrolled: set = field(default_factory=set)       # the ``for`` nodes LLVM unrolls fully

    def unroll_mark(self) -> str:
        """The metadata of a loop LLVM must unroll completely (its back edge carries it)."""
        n = len(self.metadata)
        self.metadata.append(f"!{n} = distinct !{{!{n}, !{n + 1}}}")
        self.metadata.append(f'!{n + 1} = !{{!"llvm.loop.unroll.full"}}')
        return f"!{n}"


class _Body:
    """One LLVM function being written: its instructions, its variables (an ``alloca``
    each, promoted to registers by LLVM) and, for the typing pass, what it learned."""

    def __init__(self, tr: "_Translator", flags: str, namespace: dict, var_types: dict,
                 var_signs: dict | None = None):
        self.tr = tr
        self.flags = flags
        self.ns = namespace
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.vars: dict[str, tuple[str, str]] = {}      # name -> (type, slot)
        self.var_types = var_types                      # name -> type (from the typing pass)
        # name -> whether every value assigned to it is a nonnegative integer (from the typing
        # passes: a later assignment that may be negative makes the pass run again); None:
        # not tracked, no variable is known nonnegative
        self.var_signs = var_signs
        self.arrays: dict[str, _Array] = {}
        self.written: set[str] = set()                  # data pointers of arrays stored to
        self.scalars: dict[str, Val] = {}               # parameters read as they are
        self.returns: list[str] = []
        self.ret_type: str | None = None
        self.n = 0
        self.open = True                                # the current block has no terminator

    # -- text
    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def emit(self, text: str) -> str:
        ref = self.tmp()
        self.lines.append(f"  {ref} = {text}")
        return ref

    def put(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.open = True

    def jump(self, label: str) -> None:
        if self.open:
            self.put(f"br label %{label}")
        self.open = False

    # -- variables
    def slot(self, name: str, t: str) -> str:
        if name not in self.vars:
            ref = f"%v.{name}.{len(self.vars)}"
            self.allocas.append(f"  {ref} = alloca {_LL[t]}")
            self.vars[name] = (t, ref)
        return self.vars[name][1]

    def assign(self, name: str, v: Val) -> None:
        if name in self.arrays or name in self.scalars:
            raise Unsupported(f"assignment to parameter {name}")
        final = self.var_types.get(name, v.ty)
        if unify(final, v.ty) != final:
            final = unify(final, v.ty)
            self.tr.retype = True           # written again with the wider type
        self.var_types[name] = final
        if self.var_signs is not None:
            was = self.var_signs.get(name)
            self.var_signs[name] = was is not False and v.nonneg and not _is_float(final)
            if was and not self.var_signs[name]:
                self.tr.retype = True       # an earlier read took it as nonnegative
        ref = self.slot(name, final)
        self.put(f"store {_LL[final]} {self.tr.cast(self, v, final).ref}, ptr {ref}")

    def load(self, name: str) -> Val:
        if name in self.scalars:
            return self.scalars[name]
        if name not in self.vars:
            raise Unsupported(f"{name} read before it is assigned")
        t, ref = self.vars[name]
        nonneg = self.var_signs is not None and self.var_signs.get(name, False)
        return Val(t, self.emit(f"load {_LL[t]}, ptr {ref}"), nonneg=nonneg)


class _Translator:
    """Translates one kernel (and the helpers it calls) to one IR module."""

    def __init__(self, helpers_ns: dict):
        self.helpers_ns = helpers_ns
        self.module: Module | None = None
        self.retype = False

    # ------------------------------------------------------------------ casts
    def cast(self, b: _Body, v: Val, t: str) -> Val:
        if v.ty == t:
            return v
        w = self._cast(b, v, t)
        # an integer cast to a signed type at least as wide keeps its value (a bool is 0/1)
        if t.startswith("int") and (v.ty == "bool" or (
                _is_int(v.ty) and (_bits(t) > _bits(v.ty) or (_bits(t) == _bits(v.ty)
                                                              and v.nonneg)))):
            w.nonneg = v.ty == "bool" or v.ty.startswith("uint") or v.nonneg
        return w

    def _cast(self, b: _Body, v: Val, t: str) -> Val:
        c = v.const
        if c is not None and not isinstance(c, bool) and t != "bool":
            if _is_float(t):
                return const(t, float(c))
            if isinstance(c, int):
                return const(t, _wrap(t, c))
        return self._cast_ins(b, v, t)

    def _cast_ins(self, b: _Body, v: Val, t: str) -> Val:
        f, lf, lt = v.ty, _LL[v.ty], _LL[t]
        if t == "bool":
            if _is_float(f):
                return Val(t, b.emit(f"fcmp une {lf} {v.ref}, 0.0"))
            return Val(t, b.emit(f"icmp ne {lf} {v.ref}, 0"))
        if f == "bool":
            op = "uitofp" if _is_float(t) else "zext"
            return Val(t, b.emit(f"{op} i1 {v.ref} to {lt}"))
        if _is_float(f) and _is_float(t):
            op = "fpext" if _bits(t) > _bits(f) else "fptrunc"
            return Val(t, b.emit(f"{op} {lf} {v.ref} to {lt}"))
        if _is_float(f):
            op = "fptosi" if t.startswith("int") else "fptoui"
            return Val(t, b.emit(f"{op} {lf} {v.ref} to {lt}"))
        if _is_float(t):
            op = "sitofp" if f.startswith("int") else "uitofp"
            return Val(t, b.emit(f"{op} {lf} {v.ref} to {lt}"))
        if _bits(t) == _bits(f):
            return Val(t, v.ref)
        if _bits(t) < _bits(f):
            return Val(t, b.emit(f"trunc {lf} {v.ref} to {lt}"))
        op = "sext" if f.startswith("int") else "zext"
        return Val(t, b.emit(f"{op} {lf} {v.ref} to {lt}"))

    def truth(self, b: _Body, v: Val) -> Val:
        return self.cast(b, v, "bool")

    # ------------------------------------------------------------------ statements
    def stmts(self, b: _Body, body: list) -> None:
        for s in body:
            if not b.open:
                raise Unsupported("code after a return")
            self.stmt(b, s)

    def stmt(self, b: _Body, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise Unsupported("chained assignment")
            target, value = s.targets[0], s.value
            if isinstance(value, ast.Name) and value.id in b.arrays:
                # another name for a parameter array (an accumulator the driver passes)
                if not isinstance(target, ast.Name) or target.id in b.vars:
                    raise Unsupported("an array assigned to a scalar's name")
                b.arrays[target.id] = b.arrays[value.id]
                return
            self.store(b, target, self.expr(b, value))
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Subscript):
                arr, ptr = self.element(b, s.target)
                cur = self.load_element(b, arr, ptr)
                self.store_element(b, arr, ptr, self.binop(b, s.op, cur, self.expr(b, s.value)))
                return
            if not isinstance(s.target, ast.Name):
                raise Unsupported("augmented assignment to an attribute")
            cur = b.load(s.target.id)
            b.assign(s.target.id, self.binop(b, s.op, cur, self.expr(b, s.value)))
        elif isinstance(s, ast.For):
            self.for_loop(b, s)
        elif isinstance(s, ast.If):
            self.if_stmt(b, s)
        elif isinstance(s, ast.Return):
            self.ret(b, s)
        elif isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and
                                         isinstance(s.value, ast.Constant)):
            pass                                            # a docstring
        else:
            raise Unsupported(type(s).__name__)

    def store(self, b: _Body, target: ast.expr, v: Val) -> None:
        if isinstance(target, ast.Name):
            b.assign(target.id, v)
            return
        if isinstance(target, ast.Subscript):
            arr, ptr = self.element(b, target)
            self.store_element(b, arr, ptr, v)
            return
        raise Unsupported(f"assignment to {type(target).__name__}")

    def store_element(self, b: _Body, arr: _Array, ptr: str, v: Val) -> None:
        b.written.add(arr.data)
        ref = self.cast(b, v, arr.dtype).ref
        if arr.dtype == "bool":
            ref = b.emit(f"zext i1 {ref} to i8")
        b.put(f"store {_MEM[arr.dtype]} {ref}, ptr {ptr}")

    def load_element(self, b: _Body, arr: _Array, ptr: str) -> Val:
        v = b.emit(f"load {_MEM[arr.dtype]}, ptr {ptr}")
        if arr.dtype == "bool":
            v = b.emit(f"icmp ne i8 {v}, 0")
        return Val(arr.dtype, v)

    def element(self, b: _Body, node: ast.Subscript) -> tuple[_Array, str]:
        if not isinstance(node.value, ast.Name) or node.value.id not in b.arrays:
            raise Unsupported("indexing something other than a parameter array")
        arr = b.arrays[node.value.id]
        idx = self.expr(b, node.slice)
        if idx.ty == "bool" or not _is_int(idx.ty):
            raise Unsupported("a non-integer index")
        i = self.cast(b, idx, "int64" if idx.ty.startswith("int") else "uint64")
        ref = i.ref
        if idx.ty.startswith("int") and not i.nonneg:
            # Numba's wraparound: a negative index counts from the end, once (left out where
            # the index is known nonnegative: the select it takes keeps LLVM from
            # vectorizing a loop whose index is a sum of products, ``r0 * 768 + o0``)
            neg = b.emit(f"icmp slt i64 {ref}, 0")
            up = b.emit(f"add i64 {ref}, {arr.nitems}")
            ref = b.emit(f"select i1 {neg}, i64 {up}, i64 {ref}")
        ptr = b.emit(f"getelementptr inbounds {_MEM[arr.dtype]}, ptr {arr.data}, i64 {ref}")
        return arr, ptr

    def for_loop(self, b: _Body, s: ast.For) -> None:
        it = s.iter
        if s.orelse or not isinstance(s.target, ast.Name) or not isinstance(it, ast.Call) or \
                not isinstance(it.func, ast.Name) or it.func.id != "range" or it.keywords or \
                not 1 <= len(it.args) <= 3:
            raise Unsupported("a loop other than for ... in range(...)")
        args = [self.expr(b, a) for a in it.args]
        for a in args:
            if not (_is_int(a.ty) or a.ty == "bool"):
                raise Unsupported("range of a non-integer")
        args = [self.cast(b, a, "int64") for a in args]
        start, stop = (const("int64", 0), args[0]) if len(args) == 1 else (args[0], args[1])
        step = 1
        if len(args) == 3:
            if args[2].const is None or args[2].const == 0:
                raise Unsupported("range with a step that is not a nonzero literal")
            step = int(args[2].const)
        ctr = f"%c.{b.label('l')}"
        b.allocas.append(f"  {ctr} = alloca i64")
        b.put(f"store i64 {start.ref}, ptr {ctr}")
        head, body, end = b.label("head"), b.label("body"), b.label("end")
        b.jump(head)
        b.start(head)
        c = b.emit(f"load i64, ptr {ctr}")
        ok = b.emit(f"icmp {'slt' if step > 0 else 'sgt'} i64 {c}, {stop.ref}")
        b.put(f"br i1 {ok}, label %{body}, label %{end}")
        b.open = False
        b.start(body)
        b.assign(s.target.id, Val("int64", c, nonneg=step > 0 and start.nonneg))
        self.stmts(b, s.body)
        if b.open:
            c2 = b.emit(f"load i64, ptr {ctr}")
            c3 = b.emit(f"add nsw i64 {c2}, {step}")
            b.put(f"store i64 {c3}, ptr {ctr}")
            if id(s) in self.module.unrolled:
                b.put(f"br label %{head}, !llvm.loop {self.module.unroll_mark()}")
                b.open = False
        b.jump(head)
        b.start(end)

    def if_stmt(self, b: _Body, s: ast.If) -> None:
        test = self.truth(b, self.expr(b, s.test))
        then, other, end = b.label("then"), b.label("else"), b.label("endif")
        b.put(f"br i1 {test.ref}, label %{then}, label %{other}")
        b.open = False
        reached = False
        for label, body in ((then, s.body), (other, s.orelse)):
            b.start(label)
            self.stmts(b, body)
            reached |= b.open
            b.jump(end)
        b.start(end)
        if not reached:                 # both sides returned: what follows is dead
            b.put("unreachable")
            b.open = False

    def ret(self, b: _Body, s: ast.Return) -> None:
        if b.ret_type is None:                              # the kernel itself
            if s.value is not None:
                raise Unsupported("a kernel returning a value")
            b.put("ret i32 0")
        else:
            if s.value is None:
                raise Unsupported("a helper returning None")
            v = self.expr(b, s.value)
            b.returns.append(v.ty)
            t = b.ret_type or v.ty
            w = self.cast(b, v, t) if unify(t, v.ty) == t else v
            if w.ty != t:
                self.retype = True
                w = Val(t, "undef")
            b.put(f"ret {_LL[t]} {w.ref}")
        b.open = False

    # ------------------------------------------------------------------ expressions
    def expr(self, b: _Body, e: ast.expr) -> Val:
        if isinstance(e, ast.Constant):
            v = e.value
            if isinstance(v, bool):
                return Val("bool", "true" if v else "false", v)
            if isinstance(v, int):
                return const("int64" if v < 1 << 63 else "uint64", v)
            if isinstance(v, float):
                return const("float64", v)
            raise Unsupported(f"constant {v!r}")
        if isinstance(e, ast.Name):
            if e.id in b.vars or e.id in b.scalars:
                return b.load(e.id)
            return self.global_value(b, e.id)
        if isinstance(e, ast.Attribute):
            return self.global_value(b, ast.unparse(e))
        if isinstance(e, ast.Subscript):
            return self.load_element(b, *self.element(b, e))
        if isinstance(e, ast.BinOp):
            return self.binop(b, e.op, self.expr(b, e.left), self.expr(b, e.right))
        if isinstance(e, ast.UnaryOp):
            return self.unary(b, e.op, self.expr(b, e.operand))
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1:
                raise Unsupported("a chained comparison")
            return self.compare(b, e.ops[0], self.expr(b, e.left),
                                self.expr(b, e.comparators[0]))
        if isinstance(e, ast.BoolOp):
            return self.boolop(b, e)
        if isinstance(e, ast.IfExp):
            return self.ifexp(b, e)
        if isinstance(e, ast.Call):
            return self.call(b, e)
        raise Unsupported(type(e).__name__)

    def global_value(self, b: _Body, name: str) -> Val:
        if name in b.arrays:
            raise Unsupported(f"the array {name} used as a value (a call of a product?)")
        obj = b.ns.get(name, _MISSING)
        if obj is _MISSING and "." in name:
            head, attr = name.split(".", 1)
            obj = getattr(b.ns.get(head), attr, _MISSING)
        if isinstance(obj, (np.floating, np.integer, np.bool_)):
            t = np.dtype(type(obj)).name
            if t not in _LL:
                raise Unsupported(f"a constant of dtype {t}")
            return const(t, obj.item())
        if name in ("True", "False"):
            return Val("bool", name.lower(), name == "True")
        if isinstance(obj, float) and name in ("math.pi", "math.e", "math.inf", "np.pi", "np.e",
                                                "np.inf", "math.nan", "np.nan"):
            return const("float64", obj)
        raise Unsupported(f"the name {name}")

    def binop(self, b: _Body, op: ast.operator, x: Val, y: Val) -> Val:
        fl = b.flags
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            ins = {ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}[type(op)]
            if x.ty == "bool" and y.ty == "bool":
                return Val("bool", b.emit(f"{ins} i1 {x.ref}, {y.ref}"))
            if not (_is_int(x.ty) or x.ty == "bool") or not (_is_int(y.ty) or y.ty == "bool"):
                raise Unsupported("a bitwise operator on floats")
            t = int_result(x.ty, y.ty)
            x, y = self.cast(b, x, t), self.cast(b, y, t)
            # x & y is nonnegative where either is; | and ^ where both are
            nonneg = (x.nonneg or y.nonneg) if ins == "and" else (x.nonneg and y.nonneg)
            return Val(t, b.emit(f"{ins} i64 {x.ref}, {y.ref}"), nonneg=nonneg)
        if isinstance(op, (ast.LShift, ast.RShift)):
            if _is_float(x.ty) or _is_float(y.ty):
                raise Unsupported("a shift of a float")
            t = "uint64" if x.ty.startswith("uint") else "int64"     # the left operand's sign
            x, y = self.cast(b, x, t), self.cast(b, y, t)
            ins = "shl" if isinstance(op, ast.LShift) else ("ashr" if t.startswith("int")
                                                             else "lshr")
            return Val(t, b.emit(f"{ins} i64 {x.ref}, {y.ref}"),
                       nonneg=ins != "shl" and x.nonneg)
        if isinstance(op, ast.Div):
            t = arith_result(x.ty, y.ty)
            if not _is_float(t):
                t = "float64"
            x, y = self.cast(b, x, t), self.cast(b, y, t)
            return Val(t, b.emit(f"fdiv {fl}{_LL[t]} {x.ref}, {y.ref}"))
        if isinstance(op, ast.Pow):
            if x.ty != y.ty or not _is_float(x.ty):
                raise Unsupported("** other than float ** float of one type")
            return self.intrinsic(b, "pow", [x, y], x.ty)
        t = arith_result(x.ty, y.ty)
        x, y = self.cast(b, x, t), self.cast(b, y, t)
        lt = _LL[t]
        if isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
            name = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}[type(op)]
            if _is_float(t):
                return Val(t, b.emit(f"f{name} {fl}{lt} {x.ref}, {y.ref}"))
            # a sum or product of nonnegative integers is nonnegative (an index computed so
            # would wrap only past 2**63 elements: no array's size)
            nonneg = name != "sub" and x.nonneg and y.nonneg
            return Val(t, b.emit(f"{name} {lt} {x.ref}, {y.ref}"), nonneg=nonneg)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            if _is_float(t):
                raise Unsupported("a float // or %")
            r = self.int_divmod(b, isinstance(op, ast.Mod), t, x, y)
            # Python's floor division of nonnegatives, and a modulo by a nonnegative (its
            # sign is the divisor's; 0 for a zero divisor), are nonnegative
            r.nonneg = y.nonneg and (x.nonneg or isinstance(op, ast.Mod))
            return r
        raise Unsupported(type(op).__name__)

    def int_divmod(self, b: _Body, mod: bool, t: str, x: Val, y: Val) -> Val:
        """Python's floor division and modulo on 64-bit integers, 0 for a zero divisor
        (NumPy's error model, as Numba's ``error_model='numpy'``)."""
        signed = t.startswith("int")
        known = y.const is not None and y.const != 0
        d = y.ref
        if not known:
            zero = b.emit(f"icmp eq i64 {y.ref}, 0")
            d = b.emit(f"select i1 {zero}, i64 1, i64 {y.ref}")
        if not signed:
            r = b.emit(f"{'urem' if mod else 'udiv'} i64 {x.ref}, {d}")
        else:
            q = b.emit(f"sdiv i64 {x.ref}, {d}")
            rem = b.emit(f"srem i64 {x.ref}, {d}")
            nz = b.emit(f"icmp ne i64 {rem}, 0")
            sx = b.emit(f"xor i64 {rem}, {d}")
            neg = b.emit(f"icmp slt i64 {sx}, 0")
            adj = b.emit(f"and i1 {nz}, {neg}")
            if mod:
                up = b.emit(f"add i64 {rem}, {d}")
                r = b.emit(f"select i1 {adj}, i64 {up}, i64 {rem}")
            else:
                dn = b.emit(f"sub i64 {q}, 1")
                r = b.emit(f"select i1 {adj}, i64 {dn}, i64 {q}")
        if not known:
            r = b.emit(f"select i1 {zero}, i64 0, i64 {r}")
        return Val(t, r)

    def unary(self, b: _Body, op: ast.unaryop, x: Val) -> Val:
        if isinstance(op, ast.Not):
            v = self.truth(b, x)
            return Val("bool", b.emit(f"xor i1 {v.ref}, true"))
        if isinstance(op, ast.UAdd):
            return x if _is_float(x.ty) else self.cast(b, x, int_result(x.ty))
        if isinstance(op, ast.USub):
            if _is_float(x.ty):
                if x.const is not None:
                    return const(x.ty, -x.const)
                return Val(x.ty, b.emit(f"fneg {b.flags}{_LL[x.ty]} {x.ref}"))
            t = int_result(x.ty)
            if x.const is not None and not isinstance(x.const, bool):
                return const(t, -x.const)
            w = self.cast(b, x, t)
            return Val(t, b.emit(f"sub i64 0, {w.ref}"))
        if isinstance(op, ast.Invert) and _is_int(x.ty):
            t = int_result(x.ty)
            return Val(t, b.emit(f"xor i64 {self.cast(b, x, t).ref}, -1"))
        raise Unsupported(f"unary {type(op).__name__} on {x.ty}")

    _CMP = {ast.Lt: ("olt", "slt", "ult"), ast.LtE: ("ole", "sle", "ule"),
            ast.Gt: ("ogt", "sgt", "ugt"), ast.GtE: ("oge", "sge", "uge"),
            ast.Eq: ("oeq", "eq", "eq"), ast.NotEq: ("une", "ne", "ne")}

    def compare(self, b: _Body, op: ast.cmpop, x: Val, y: Val) -> Val:
        if type(op) not in self._CMP:
            raise Unsupported(type(op).__name__)
        fcmp, scmp, ucmp = self._CMP[type(op)]
        if x.ty == "bool" and y.ty == "bool":
            return Val("bool", b.emit(f"icmp {ucmp} i1 {x.ref}, {y.ref}"))
        t = compare_type(x.ty, y.ty)
        x, y = self.cast(b, x, t), self.cast(b, y, t)
        if _is_float(t):
            return Val("bool", b.emit(f"fcmp {fcmp} {_LL[t]} {x.ref}, {y.ref}"))
        return Val("bool", b.emit(f"icmp {scmp if t.startswith('int') else ucmp} "
                                  f"{_LL[t]} {x.ref}, {y.ref}"))

    def boolop(self, b: _Body, e: ast.BoolOp) -> Val:
        """``and`` / ``or`` of bools, short-circuited (a later operand may index memory
        only the earlier ones make safe)."""
        out = f"%bo.{b.label('b')}"
        b.allocas.append(f"  {out} = alloca i1")
        end = b.label("bend")
        is_and = isinstance(e.op, ast.And)
        for k, operand in enumerate(e.values):
            v = self.expr(b, operand)
            if v.ty != "bool":
                raise Unsupported("and / or of non-bool values")
            b.put(f"store i1 {v.ref}, ptr {out}")
            if k < len(e.values) - 1:
                nxt = b.label("bnext")
                if is_and:
                    b.put(f"br i1 {v.ref}, label %{nxt}, label %{end}")
                else:
                    b.put(f"br i1 {v.ref}, label %{end}, label %{nxt}")
                b.open = False
                b.start(nxt)
        b.jump(end)
        b.start(end)
        return Val("bool", b.emit(f"load i1, ptr {out}"))

    def ifexp(self, b: _Body, e: ast.IfExp) -> Val:
        """``x if c else y``: only the chosen side is evaluated (it may index memory the
        condition guards); LLVM turns it into a select where both sides are safe. The
        common type is known once both sides are written, so each side's store to the
        result is written then, in place of a mark."""
        test = self.truth(b, self.expr(b, e.test))
        then, other, end = b.label("ithen"), b.label("ielse"), b.label("iend")
        b.put(f"br i1 {test.ref}, label %{then}, label %{other}")
        b.open = False
        marks = []
        for label, side in ((then, e.body), (other, e.orelse)):
            b.start(label)
            v = self.expr(b, side)
            marks.append((len(b.lines), v))
            b.lines.append("")
            b.jump(end)
        t = unify(marks[0][1].ty, marks[1][1].ty)
        slot = f"%ie.{then}"
        b.allocas.append(f"  {slot} = alloca {_LL[t]}")
        for at, v in marks:
            sub = _Body(self, b.flags, b.ns, {})
            sub.n = b.n
            w = self.cast(sub, v, t)
            b.n = sub.n
            b.lines[at] = "\n".join(sub.lines + [f"  store {_LL[t]} {w.ref}, ptr {slot}"])
        b.start(end)
        nonneg = all(v.nonneg for _, v in marks) and not _is_float(t)
        return Val(t, b.emit(f"load {_LL[t]}, ptr {slot}"), nonneg=nonneg)

    # ------------------------------------------------------------------ calls
    def call(self, b: _Body, e: ast.Call) -> Val:
        if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
            raise Unsupported("keyword or starred arguments")
        name = ast.unparse(e.func)
        args = [self.expr(b, a) for a in e.args]
        short = name.split(".")[-1]
        if name in ("bool", "np.bool_") and len(args) == 1:
            return self.truth(b, args[0])
        if name.startswith("np.") and short in _CASTS and len(args) == 1:
            return self.cast(b, args[0], short)
        if name == "float" and len(args) == 1:
            return self.cast(b, args[0], "float64")
        if name == "int" and len(args) == 1:
            return self.cast(b, args[0], "int64")
        if name in ("min", "max") and len(args) >= 2:
            return self.minmax(b, name == "max", args)
        if name == "abs" and len(args) == 1:
            return self.absolute(b, args[0])
        if name in ("np.floor", "math.fabs", "np.sqrt") or (
                name.startswith("math.") and short in {**_INTRINSICS, **_LIBM}):
            short = {"np.floor": "floor", "np.sqrt": "sqrt"}.get(name, short)
            return self.math(b, short, args)
        obj = b.ns.get(name, _MISSING)
        special = _specials().get(id(obj))
        if special is not None:
            return special(self, b, args)
        if obj is not _MISSING and hasattr(obj, "py_func"):
            return self.helper_call(b, obj, args)
        raise Unsupported(f"a call of {name}")

    def minmax(self, b: _Body, larger: bool, args: list) -> Val:
        if any(_is_float(a.ty) for a in args):
            raise Unsupported("min / max of floats")
        t = args[0].ty
        for a in args[1:]:
            t = unify(t, a.ty)
        if _is_float(t):
            raise Unsupported("min / max of signed and unsigned 64-bit integers")
        acc = self.cast(b, args[0], t)
        pred = ("sgt" if larger else "slt") if t.startswith("int") else \
            ("ugt" if larger else "ult")
        for a in args[1:]:
            a = self.cast(b, a, t)
            # Python's max keeps the first of equal values: a later one wins only if larger
            c = b.emit(f"icmp {pred} {_LL[t]} {a.ref}, {acc.ref}")
            # the larger of values one of which is nonnegative, the smaller of nonnegatives
            nonneg = (a.nonneg or acc.nonneg) if larger else (a.nonneg and acc.nonneg)
            acc = Val(t, b.emit(f"select i1 {c}, {_LL[t]} {a.ref}, {_LL[t]} {acc.ref}"),
                      nonneg=nonneg)
        return acc

    def absolute(self, b: _Body, x: Val) -> Val:
        if _is_float(x.ty):
            return self.intrinsic(b, "fabs", [x], x.ty)
        if x.ty.startswith("uint"):
            return x
        if x.ty == "bool":
            raise Unsupported("abs of a bool")
        lt = _LL[x.ty]
        neg = b.emit(f"icmp slt {lt} {x.ref}, 0")
        m = b.emit(f"sub {lt} 0, {x.ref}")
        return Val(x.ty, b.emit(f"select i1 {neg}, {lt} {m}, {lt} {x.ref}"))

    def math(self, b: _Body, name: str, args: list) -> Val:
        arity = {**_INTRINSICS, **_LIBM, "floor": 1}[name]
        if len(args) != arity:
            raise Unsupported(f"math.{name} with {len(args)} arguments")
        t = args[0].ty
        for a in args[1:]:
            t = arith_result(t, a.ty)
        if t == "bool" or (any(a.ty == "bool" for a in args)):
            raise Unsupported(f"math.{name} of a bool")
        if not _is_float(t):
            t = "float64"
        args = [self.cast(b, a, t) for a in args]
        if name in _LIBM:
            lt = _LL[t]
            cname = name + ("f" if t == "float32" else "")
            self.module.declares.add(f"declare {lt} @{cname}({', '.join([lt] * arity)})")
            ops = ", ".join(f"{lt} {a.ref}" for a in args)
            return Val(t, b.emit(f"call {b.flags}{lt} @{cname}({ops})"))
        return self.intrinsic(b, name, args, t)

    def intrinsic(self, b: _Body, name: str, args: list, t: str) -> Val:
        lt = _LL[t]
        suffix = "f32" if t == "float32" else "f64"
        fn = f"@llvm.{name}.{suffix}"
        self.module.declares.add(f"declare {lt} {fn}({', '.join([lt] * len(args))})")
        ops = ", ".join(f"{lt} {a.ref}" for a in args)
        return Val(t, b.emit(f"call {b.flags}{lt} {fn}({ops})"))

    def helper_call(self, b: _Body, disp: Any, args: list) -> Val:
        h = self.helper(disp, tuple(a.ty for a in args), b.flags)
        ops = ", ".join(f"{_LL[a.ty]} {a.ref}" for a in args)
        return Val(h.ret, b.emit(f"call {_LL[h.ret]} @\"{h.name}\"({ops})"))

    def helper(self, disp: Any, types: tuple, caller_flags: str) -> _Helper:
        """The IR function of a ``kernels/`` helper for these argument types, translated from
        its Python source once per module (inlined into its callers by LLVM)."""
        opts = getattr(disp, "targetoptions", {})
        # Numba IR inlining (inline="always") gives the helper its caller's flags
        flags = caller_flags if opts.get("inline") == "always" else \
            _flag_text(opts.get("fastmath", False))
        key = (disp.py_func, types, flags)
        mod, outer = self.module, self.retype
        if key in mod.helpers:
            if mod.helpers[key] is None:
                raise Unsupported("a recursive helper")
            return mod.helpers[key]
        mod.helpers[key] = None
        fn = _parse_function(disp.py_func)
        if len(fn.args.args) != len(types) or fn.args.vararg or fn.args.kwonlyargs or \
                fn.args.defaults:
            raise Unsupported(f"the parameters of {fn.name}")
        ns = dict(disp.py_func.__globals__)
        name = f"jgh.{fn.name}.{'.'.join(types)}.{len(mod.helpers)}"
        var_types: dict = {}
        ret: str | None = None
        for _ in range(4):
            self.retype = False
            b = _Body(self, flags, ns, var_types)
            b.ret_type = ret or ""
            for p, t in zip(fn.args.args, types):
                b.scalars[p.arg] = Val(t, f"%p.{p.arg}")
            self._rebind_params(b, fn)
            self.stmts(b, fn.body)
            if b.open:
                raise Unsupported(f"{fn.name} can end without returning a value")
            new_ret = ret
            for r in b.returns:
                new_ret = r if new_ret is None else unify(new_ret, r)
            if not self.retype and new_ret == ret and ret is not None:
                break
            ret = new_ret
        else:
            raise Unsupported(f"the types of {fn.name} do not settle")
        params = ", ".join(f"{_LL[t]} %p.{p.arg}" for p, t in zip(fn.args.args, types))
        mod.helper_ir.append(
            f"define internal {_LL[ret]} @\"{name}\"({params}) alwaysinline {{\n"
            f"entry:\n" + "\n".join(b.allocas) + "\n" + _lines(b) + "\n}\n")
        h = mod.helpers[key] = _Helper(name, ret)
        self.retype = outer
        return h

    def _rebind_params(self, b: _Body, fn: ast.FunctionDef) -> None:
        """A parameter the function assigns to becomes a variable (Numba unifies its type
        with what is assigned)."""
        assigned = {t.id for s in ast.walk(fn) for t in
                    ([*s.targets] if isinstance(s, ast.Assign) else
                     [s.target] if isinstance(s, (ast.AugAssign, ast.For)) else [])
                    if isinstance(t, ast.Name)}
        for p in fn.args.args:
            if p.arg in assigned:
                v = b.scalars.pop(p.arg)
                b.assign(p.arg, v)


#: innermost loops (or nests of them) of a constant trip count up to this are unrolled
#: completely (a window's taps, a pooling window), up to ``UNROLL_NEST`` copies of the body;
#: LLVM's own unroller is off: it unrolled the long vectorized loops of a GPT step's kernels
#: too, which doubled their compile time and ran no faster
UNROLL_TRIPS = 16
UNROLL_NEST = 32


def _unrolled(fn: ast.FunctionDef) -> set:
    """The ``for`` nodes of ``fn`` to unroll completely (see ``UNROLL_TRIPS``)."""
    chosen: set = set()

    def trips(node: ast.For) -> int | None:
        it = node.iter
        if not (isinstance(it, ast.Call) and all(isinstance(a, ast.Constant) and
                                                 type(a.value) is int for a in it.args)):
            return None
        try:
            return len(range(*[a.value for a in it.args]))
        except (TypeError, ValueError):
            return None

    def visit(stmts: list) -> tuple[int, bool]:
        """The copies of the innermost body the unrolled loops among ``stmts`` make, and
        whether a loop stays among them (a loop around it is not unrolled: copies of a loop
        only make code)."""
        most, loop_left = 1, False
        for st in stmts:
            inner, left = 1, False
            for child in ("body", "orelse"):
                c, lft = visit(getattr(st, child, []) or [])
                inner, left = max(inner, c), left or lft
            if isinstance(st, ast.For):
                n = trips(st)
                if n is not None and not left and n <= UNROLL_TRIPS and n * inner <= UNROLL_NEST:
                    chosen.add(id(st))
                    inner *= n
                else:
                    inner, left = 1, True
            most, loop_left = max(most, inner), loop_left or left
        return most, loop_left
    visit(fn.body)
    return chosen


def _lines(b: _Body) -> str:
    return "\n".join(line for line in b.lines)


_MISSING = object()


@functools.lru_cache(maxsize=None)
def _parse_function(py_func) -> ast.FunctionDef:
    src = textwrap.dedent(inspect.getsource(py_func))
    node = ast.parse(src).body[0]
    if not isinstance(node, ast.FunctionDef):
        raise Unsupported("a helper that is not a plain function")
    return node


# ----------------------------------------------------------------------------- the helpers
# written in Numba's own intrinsics (LLVM IR built by hand): the same IR here

def _extremum(larger: bool):
    def emit(tr: _Translator, b: _Body, args: list) -> Val:
        x, y = args
        t = x.ty if x.ty == y.ty else unify(x.ty, y.ty)
        x, y = tr.cast(b, x, t), tr.cast(b, y, t)
        if _is_float(t):
            return tr.intrinsic(b, "maximum" if larger else "minimum", [x, y], t)
        if t == "bool":
            return Val(t, b.emit(f"{'or' if larger else 'and'} i1 {x.ref}, {y.ref}"))
        pred = ("s" if t.startswith("int") else "u") + ("gt" if larger else "lt")
        c = b.emit(f"icmp {pred} {_LL[t]} {x.ref}, {y.ref}")
        return Val(t, b.emit(f"select i1 {c}, {_LL[t]} {x.ref}, {_LL[t]} {y.ref}"))
    return emit


def _layout(t: str) -> tuple[str, int, int]:
    if t == "float32":
        return "i32", 23, 127
    if t == "float64":
        return "i64", 52, 1023
    raise Unsupported(f"a bit-level helper of {t}")


def _pow2(tr: _Translator, b: _Body, args: list) -> Val:
    (x,) = args
    ity, mbits, bias = _layout(x.ty)
    i = b.emit(f"fptosi {_LL[x.ty]} {x.ref} to i32")
    i = b.emit(f"add i32 {i}, {bias}")
    if ity != "i32":
        i = b.emit(f"sext i32 {i} to {ity}")
    i = b.emit(f"shl {ity} {i}, {mbits}")
    return Val(x.ty, b.emit(f"bitcast {ity} {i} to {_LL[x.ty]}"))


def _frexp_mant(tr: _Translator, b: _Body, args: list) -> Val:
    (x,) = args
    ity, mbits, bias = _layout(x.ty)
    v = b.emit(f"bitcast {_LL[x.ty]} {x.ref} to {ity}")
    v = b.emit(f"and {ity} {v}, {(1 << mbits) - 1}")
    v = b.emit(f"or {ity} {v}, {(bias - 1) << mbits}")
    return Val(x.ty, b.emit(f"bitcast {ity} {v} to {_LL[x.ty]}"))


def _frexp_exp(tr: _Translator, b: _Body, args: list) -> Val:
    (x,) = args
    ity, mbits, bias = _layout(x.ty)
    width = 32 if ity == "i32" else 64
    v = b.emit(f"bitcast {_LL[x.ty]} {x.ref} to {ity}")
    v = b.emit(f"lshr {ity} {v}, {mbits}")
    if ity != "i32":
        v = b.emit(f"trunc {ity} {v} to i32")
    v = b.emit(f"and i32 {v}, {(1 << (width - 1 - mbits)) - 1}")
    v = b.emit(f"sub i32 {v}, {bias - 1}")
    return Val(x.ty, b.emit(f"sitofp i32 {v} to {_LL[x.ty]}"))


_SPECIAL: dict = {}


def _specials() -> dict:
    """The helpers Numba builds from hand-written IR (``@intrinsic``), by object identity:
    their IR written here."""
    if not _SPECIAL:
        from ..kernels import fastmath, scalar  # type: ignore[attr-defined]
        _SPECIAL.update({id(scalar.maximum_step): _extremum(True),
                         id(scalar.minimum_step): _extremum(False),
                         id(fastmath._pow2): _pow2, id(fastmath._frexp_mant): _frexp_mant,
                         id(fastmath._frexp_exp): _frexp_exp})
    return _SPECIAL


# ----------------------------------------------------------------------------- kernels

@functools.lru_cache(maxsize=None)
def _helpers_namespace() -> dict:
    """The names a generated kernel's module imports (read, never changed)."""
    from ..kernels import fastmath, scalar  # type: ignore[attr-defined]
    ns: dict = {"np": np, "math": math}
    for m in (scalar, fastmath):
        ns.update({k: v for k, v in vars(m).items() if not k.startswith("__")})
    return ns


def _decorator_options(fn: ast.FunctionDef) -> dict:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func) == "njit":
            return {k.arg: ast.literal_eval(k.value) for k in d.keywords}
    raise Unsupported("a kernel without @njit(...)")


def translate(source: str, name: str, dtypes: tuple, symbol: str) -> Module:
    """The IR module of kernel ``name`` in generated ``source`` whose parameters (after ``lo,
    hi`` where the kernel has them) have ``dtypes`` (an array's, or ``SIZE``): a function
    ``symbol`` with Numba's native calling convention for ``(lo, hi, parameters...)``.
    Raises ``Unsupported``."""
    tree = ast.parse(source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(fns) != 1:
        raise Unsupported(f"no single function {name}")
    fn = fns[0]
    opts = _decorator_options(fn)
    if opts.get("parallel"):
        raise Unsupported("a parallel (prange) kernel")
    if any(isinstance(n, ast.Call) and ast.unparse(n.func) == "prange" for n in ast.walk(fn)):
        raise Unsupported("prange")
    params = [a.arg for a in fn.args.args]
    rows = params[:2] == ["lo", "hi"]
    arrays = params[2:] if rows else params
    if len(arrays) != len(dtypes) or any(d not in DTYPES for d in dtypes):
        raise Unsupported(f"parameters of dtypes {dtypes}")
    tr = _Translator(_helpers_namespace())
    flags = _flag_text(opts.get("fastmath", False))
    noalias = bool(opts.get("_jitgraph_noalias"))
    var_types: dict = {}
    var_signs: dict = {}
    unrolled = _unrolled(fn)
    for _ in range(4):
        tr.module = Module(symbol, unrolled=unrolled)
        tr.retype = False
        b = _Body(tr, flags, tr.helpers_ns, var_types, var_signs)
        if rows:    # (a launcher's range of rows, and a size: never negative)
            b.scalars["lo"], b.scalars["hi"] = (Val("int64", "%lo", nonneg=True),
                                                Val("int64", "%hi", nonneg=True))
        for j, (p, dt) in enumerate(zip(arrays, dtypes)):
            if dt == SIZE:
                b.scalars[p] = Val("int64", f"%v{j}", nonneg=True)
            else:
                b.arrays[p] = _Array(dt, f"%d{j}", f"%n{j}")
        tr.stmts(b, fn.body)
        if not tr.retype:
            break
    else:
        raise Unsupported("variable types do not settle")
    if b.open:
        b.put("ret i32 0")
    sig = ["ptr %ret", "ptr %exc", "i64 %lo", "i64 %hi"]
    for j, dt in enumerate(dtypes):
        if dt == SIZE:                  # (Numba passes an int64 as itself)
            sig.append(f"i64 %v{j}")
            continue
        # noalias on the arrays the kernel only reads: a donated input (a carry a loop
        # updates in place) is passed again as the output written where it is read, and
        # with noalias on that output too, a scan body whose 3-step loop LLVM unrolled gave
        # wrong results; the written arrays keep their accesses in order
        ro = "noalias " if noalias and f"%d{j}" not in b.written else ""
        sig += [f"ptr %m{j}", f"ptr %q{j}", f"i64 %n{j}", f"i64 %z{j}", f"ptr {ro}%d{j}",
                f"i64 %h{j}", f"i64 %s{j}"]
    mod = tr.module
    mod.text = "\n".join(sorted(mod.declares)) + "\n" + "".join(mod.helper_ir) + (
        f"define i32 @\"{symbol}\"({', '.join(sig)}) nounwind {{\nentry:\n"
        + "\n".join(b.allocas) + "\n" + _lines(b) + "\n}\n") + "\n".join(mod.metadata) + "\n"
    return mod


# ----------------------------------------------------------------------------- machine code

def compile_object(text: str, inspect: Callable[[Any], None] | None = None) -> bytes:
    """Optimise a module's IR text (LLVM's ``-O2`` pipeline with the loop and SLP vectorizers,
    for this machine; Numba runs ``-O3``, which compiled the GPT tiny step's kernels about 10 %
    slower here and ran them no faster, nor the CNN step's) and return its object code, code
    generation at ``-O3``. LLVM unrolls only the loops marked for it (``UNROLL_TRIPS``).
    ``inspect(module)`` sees the optimised module first (and may raise to refuse it)."""
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:          # LLVM's context is not thread-safe
        return _compile(llvm, text, inspect)


def _compile(llvm, text: str, inspect: Callable[[Any], None] | None = None) -> bytes:
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    mod.verify()
    tm = _optimizing_machine()
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    for option, value in (("loop_vectorization", True), ("slp_vectorization", True),
                          ("loop_unrolling", False)):
        if hasattr(pto, option):            # (older llvmlite lacks some)
            setattr(pto, option, value)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    if inspect is not None:
        inspect(mod)
    return tm.emit_object(mod)


@functools.lru_cache(maxsize=None)
def _optimizing_machine():
    """``native.target_machine`` at ``-O3``, made once (it only emits objects here: an
    execution engine would take it over)."""
    return native.target_machine(opt=3)
