"""The syntax of generated kernels: one table that says how each piece of scalar code is written.

Primitive rules (``rule(ctx, *operands)`` in ``ops/*``), the emitter and the kernel text both
backends share write no syntax of their own: they ask the scalar context they are handed, and
every backend's context is a ``Syntax``, overriding the few entries where its kernels differ
(tinygrad's ``CStyleLanguage.code_for_op`` is the model). The CPU and CUDA targets both
generate Numba Python, so today they differ in one entry: the scalar function a primitive
calls (``fn``, from its ``core.Lowering`` record). A target that writes another language
subclasses this table and overrides what its language writes differently.

Statements are ``Statement`` values: their text, plus what they assign, so a backend that
rearranges a body (the CUDA backend unrolls elementwise loops) reads targets instead of
parsing text.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import is_narrow, kind, real_dtype
from ..ops.layout import row_major_strides

#: the operators of the language, by name (what a primitive means is its rule's business)
OPERATORS = {
    "negate": "-{}", "not": "not {}",
    "plus": "{} + {}", "minus": "{} - {}", "times": "{} * {}", "divide": "{} / {}",
    "floor_divide": "{} // {}", "remainder": "{} % {}",
    "greater": "{} > {}", "greater_equal": "{} >= {}", "less": "{} < {}",
    "less_equal": "{} <= {}", "equal": "{} == {}", "not_equal": "{} != {}",
    "and": "{} and {}", "or": "{} or {}",
    "bit_and": "{} & {}", "bit_or": "{} | {}", "bit_xor": "{} ^ {}", "bit_not": "~{}",
    "shift_left": "{} << {}", "shift_right": "{} >> {}",
}

_FROM_BITS = {"float16": "from_f16", "bfloat16": "from_bf16"}
_TO_BITS = {"float16": "to_f16", "bfloat16": "to_bf16"}
#: float -> narrow integer conversions go through a wider integer, as NumPy's C casts do
_FLOAT_TO_INT_VIA = {"int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
                     "uint32": "int64"}
#: the functions ``convert`` calls for 16-bit floats (``kernels/narrow.py``)
NARROW_FUNCTIONS = ("from_bf16", "to_bf16", "from_f16", "to_f16", "odd_f32")


class Statement(str):
    """The text of one generated statement, with the name it assigns (``target``) and the
    expression it assigns (``value``); both None for other statements."""
    target: str | None = None
    value: str | None = None


class Syntax:
    """The base table: Numba Python, valid in ``@njit`` and ``@cuda.jit`` kernels alike."""

    operators: dict[str, str] = OPERATORS
    #: whether a row kernel may keep a costly value of one loop stage for a later one in the
    #: output buffer that later stage writes (``fusion.cache_rows``): a backend whose threads
    #: read in a later stage what they wrote in an earlier one says so
    row_cache: bool = False

    # ------------------------------------------------------------ expressions
    def op(self, name: str, *operands: str) -> str:
        """Operator ``name`` (a key of ``operators``) applied to ``operands``, in parentheses,
        so the result composes without precedence rules."""
        return f"({self.operators[name].format(*operands)})"

    def bare(self, name: str, *operands: str) -> str:
        """The same without parentheses: index arithmetic, whose sums of products and
        comparisons need none."""
        return self.operators[name].format(*operands)

    def group(self, expr: str) -> str:
        """``expr`` in parentheses."""
        return f"({expr})"

    def attribute(self, expr: str, name: str) -> str:
        """Attribute ``name`` of the value ``expr`` (a complex number's ``real``)."""
        return f"{expr}.{name}"

    def number(self, value: int | float) -> str:
        """A Python number, untyped (an index bound, a shift, a mask)."""
        return str(value)

    def literal(self, value, dtype) -> str:
        """A constant of ``dtype``: typed, so it never changes the type of an expression."""
        dtype = np.dtype(dtype)
        if is_narrow(dtype):        # a 16-bit float: kernels hold its bits (kernels/narrow.py)
            return self.call("np.uint16", str(int(np.asarray(value, dtype).view(np.uint16))))
        v = np.asarray(value).item()
        if dtype.kind == "b":
            return "True" if v else "False"
        if dtype.kind in "iu":
            return self.call(f"np.{dtype.name}", str(int(v)))
        if dtype.kind == "c":
            v = complex(v)
            parts = (self._float_text(v.real), self._float_text(v.imag))
            return self.call(f"np.{dtype.name}", self.call("complex", *parts))
        if np.isnan(v):
            return self.call(f"np.{dtype.name}", "np.nan")
        if np.isinf(v):
            return self.call(f"np.{dtype.name}", f"{'-' if v < 0 else ''}np.inf")
        return self.call(f"np.{dtype.name}", repr(float(v)))

    def _float_text(self, v: float) -> str:
        """A part of a complex literal: a Python float, or NumPy's nan or inf."""
        if np.isnan(v):
            return "np.nan"
        return f"{'-' if v < 0 else ''}np.inf" if np.isinf(v) else repr(float(v))

    def fn(self, name: str) -> str:
        """The scalar function primitive ``name``'s rule calls (a backend names its own, from
        the primitive's ``core.Lowering`` record)."""
        return f"math.{name}"

    def call(self, fn: str, *args: str) -> str:
        """A call of the function the generated module names ``fn``."""
        return f"{fn}({', '.join(args)})"

    def cast(self, expr: str, dtype) -> str:
        """``expr`` converted to ``dtype``."""
        dtype = np.dtype(dtype)
        if dtype.kind == "b":
            return self.call("bool", expr)
        return self.call(f"np.{dtype.name}", expr)

    def convert(self, expr: str, src, dst) -> str:
        """``expr`` (of dtype ``src``) converted to ``dst``: a cast, or for the 16-bit floats,
        which kernels hold as their bits, a call of ``kernels/narrow.py``'s conversions
        (through float32; float64 and integers round to odd first, so the result is rounded
        once)."""
        src, dst = np.dtype(src), np.dtype(dst)
        if src.kind == "c" and dst.kind != "c":      # the real part, as NumPy's astype takes
            return self.convert(self.attribute(expr, "real"), real_dtype(src), dst)
        if kind(src) == "f" and dst.name in _FLOAT_TO_INT_VIA:
            # (through the integer NumPy's cast goes through: a float out of the narrow
            # type's range wraps as NumPy's does, where a direct cast is undefined)
            return self.cast(self.convert(expr, src, _FLOAT_TO_INT_VIA[dst.name]), dst)
        if not is_narrow(src) and not is_narrow(dst):
            return self.cast(expr, dst)
        if src == dst:
            return expr
        if is_narrow(src):
            expr = self.call(_FROM_BITS[src.name], expr)
            return expr if dst == np.float32 else self.convert(expr, np.float32, dst)
        if src != np.float32:
            wide = expr if src == np.float64 else self.cast(expr, np.float64)
            expr = self.call("odd_f32", wide) if src.kind != "b" else self.cast(expr, np.float32)
        return self.call(_TO_BITS[dst.name], expr)

    def select(self, cond: str, x: str, y: str) -> str:
        """``x`` where ``cond`` holds, else ``y``."""
        return f"({x} if {cond} else {y})"

    # ------------------------------------------------------------ indices
    def index(self, array: str, offset: str) -> str:
        """The element of a flat array at ``offset``."""
        return f"{array}[{offset}]"

    def offset(self, idx, shape) -> str:
        """The row-major offset of a multi-index into a flat array of ``shape`` (a dim of size
        1, or an index that is the literal 0, adds nothing)."""
        terms = [e if s == 1 else self.bare("times", e, self.number(s))
                 for e, s, d in zip(idx, row_major_strides(shape), shape)
                 if d != 1 and e != "0"]
        out = terms[0] if terms else self.number(0)
        for t in terms[1:]:
            out = self.bare("plus", out, t)
        return out

    def affine(self, start: int, step: int, i: str) -> str:
        """``start + step * i``, the terms that are 0 or 1 left out."""
        expr = i if step == 1 else self.bare("times", self.number(step), i)
        return expr if start == 0 else self.bare("plus", self.number(start), expr)

    def clip(self, i: str, n: int) -> str:
        """``i`` clamped to ``[0, n)`` (a read that a select then discards stays in bounds)."""
        return self.call("min", self.call("max", i, self.number(0)), self.number(n - 1))

    def clamp_index(self, i: str, n: int) -> str:
        """An index read from an array, clamped to ``[0, n)`` as a gather's are (NumPy's
        negative indices wrap first: ``kernels/scalar.py``)."""
        return self.call("clamp_index", i, self.number(n))

    # ------------------------------------------------------------ statements
    def assign(self, target: str, value: str) -> Statement:
        """``target`` bound to ``value``."""
        s = Statement(f"{target} = {value}")
        s.target, s.value = target, value
        return s

    def store(self, array: str, offset: str, value: str) -> str:
        """``value`` written to a flat array at ``offset``."""
        return f"{self.index(array, offset)} = {value}"

    def for_range(self, var: str, *bounds) -> str:
        """The head of a loop of ``var`` over ``range(*bounds)`` (its statements ``indent``ed)."""
        return f"for {var} in range({', '.join(map(str, bounds))}):"

    def combine(self, monoid: str, a: str, b: str) -> str:
        """Two partial results of a reduction combined (``sum``, ``prod``, ``max``, ``min``)."""
        if monoid == "sum":
            return self.bare("plus", a, b)
        if monoid == "prod":
            return self.bare("times", a, b)
        return self.call("maximum" if monoid == "max" else "minimum", a, b)

    def if_(self, cond: str) -> str:
        """The head of a block run where ``cond`` holds (its statements ``indent``ed)."""
        return f"if {cond}:"

    def indent(self, statement: str) -> str:
        """A statement inside a block."""
        return "    " + statement
