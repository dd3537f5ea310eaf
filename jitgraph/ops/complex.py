"""Complex numbers: the primitives only complex operands have (``real``, ``imag``, ``conj``),
and the list of elementwise primitives defined for complex operands.

Derivatives follow JAX's convention: a VJP rule is the *transpose* of the op's linear map
(no conjugation), so a holomorphic op keeps its real rule (``g * f'(z)``) and ``grad`` of a
real-valued function of ``z = x + iy`` is ``df/dx - i df/dy``, the conjugate of the
direction of steepest ascent. ``real``'s transpose embeds ``g`` as ``g + 0i``; ``imag``'s is
``-i g``; ``conj``'s is ``conj``.

Generated code calls NumPy's ufuncs for complex scalars (``core.scalar_function``): Numba's
CPU target compiles them, where ``math``'s functions take only reals. The CUDA target
refuses complex dtypes (``backends/cuda.py``).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Aval, Lowering
from .binders import cast
from .elementwise import COMPLEX_OK, unary

#: elementwise primitives that NumPy and the Array API standard define for complex operands
COMPLEX_OK.update({
    "neg", "add", "sub", "mul", "div", "pow", "eq", "ne", "select", "convert", "stop_gradient",
    "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh",
    "sinh", "cosh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "log2",
    "log10", "real", "imag", "conj"})


def _part_aval(x: Aval) -> Aval:
    if not dtypes.is_complex(x.dtype):
        raise TypeError(f"needs a complex operand, got {x.dtype}")
    return Aval(x.shape, dtypes.real_dtype(x.dtype), weak=x.weak)


def _complex_only(name, impl, rule, vjp, real_out):
    def jvp(ts, out, x):        # (the ops are linear: the tangent's own part)
        return None if ts[0] is None else p(ts[0])
    p = unary(name, impl, Lowering.scalar(rule, flops=0), vjp=vjp, jvp=jvp, float_only=False,
              out_dtype=dtypes.real_dtype if real_out else None)
    if real_out:
        p.abstract_eval = _part_aval
    return p


real_p = _complex_only("real", np.real, lambda c, x: c.attribute(x, "real"), real_out=True,
                       vjp=lambda g, out, x: (cast(g, x.dtype),))
imag_p = _complex_only("imag", np.imag, lambda c, x: c.attribute(x, "imag"), real_out=True,
                       vjp=lambda g, out, x: (cast(g, x.dtype) * np.asarray(-1j, x.dtype),))
conj_p = _complex_only("conj", np.conjugate, lambda c, x: c.call(c.attribute(x, "conjugate")),
                       real_out=False, vjp=lambda g, out, x: (conj_p(g),))
