"""Sliding windows with ``jax.lax``'s names and semantics: ``conv_general_dilated`` (and
``conv``, ``conv_with_general_padding``, ``conv_transpose``), ``reduce_window``, and the
shape helpers JAX libraries call on their own (``padtype_to_pads``, ``*_shape_tuple``).

A convolution is im2col + one product, in any number of spatial dims: the operand is
dilated and padded, one ``windows`` op (``ops/windows.py``) lays each window's elements along
tap axes, and the patch matrix is multiplied by the kernel reshaped to a matrix (so the
product goes to BLAS). A window reduction with a known reducer reduces over the same tap axes
(over a reshape where windows tile the operand), a max or min sending its gradient to the
first extreme as XLA does; a reducer of the user's own folds over one strided view per tap.
Both are compositions of differentiable operations, under jit and grad alike, whose kernels
do not grow with the window.
"""
from __future__ import annotations

import itertools
from collections import namedtuple
from typing import Callable

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ..errors import ShapeError
from ._base import _P, _locate_module, _operand, _promote, asarray, astype
from .lax_ops import dilate, pad_or_crop, rev
from .manipulation import broadcast_to, concatenate, reshape, swapaxes, transpose
from .products import Precision, matmul
from .creation import arange, zeros
from .math import where
from .reductions import (argmax as _argmax, argmin as _argmin, max as _max, min as _min,
                         prod as _prod, sum as _sum)

__all__ = ["ConvDimensionNumbers", "conv", "conv_dimension_numbers", "conv_general_dilated",
           "conv_general_permutations", "conv_general_shape_tuple", "conv_shape_tuple",
           "conv_transpose", "conv_transpose_shape_tuple", "conv_with_general_padding",
           "padtype_to_pads", "reduce_window", "reduce_window_shape_tuple"]

ConvDimensionNumbers = namedtuple("ConvDimensionNumbers", ["lhs_spec", "rhs_spec", "out_spec"])
ConvDimensionNumbers.__doc__ = ("Axis positions of (batch, feature, spatial...) in the "
                                "operand and the output, and of (out, in, spatial...) in the "
                                "kernel, as lax's type of the same name.")


# ------------------------------------------------------------------ shape helpers
def _dilate_shape(shape, dilation):
    return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dilation))


def padtype_to_pads(in_shape, window_shape, window_strides, padding) -> list[tuple[int, int]]:
    """``(low, high)`` padding per dim for ``'SAME'``, ``'SAME_LOWER'`` or ``'VALID'`` (as lax:
    SAME gives ``ceil(in / stride)`` outputs, the odd pad element going high; SAME_LOWER low)."""
    if not isinstance(padding, str):
        return [tuple(int(v) for v in p) for p in padding]
    kind = padding.upper()
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or (low, high) pairs, "
                         f"got {padding!r}")
    pads = []
    for n, k, s in zip(in_shape, window_shape, window_strides):
        out = -(-int(n) // int(s))
        total = max((out - 1) * int(s) + int(k) - int(n), 0)
        lo, hi = total // 2, total - total // 2
        pads.append((lo, hi) if kind == "SAME" else (hi, lo))
    return pads


def conv_general_permutations(dimension_numbers) -> tuple[tuple, tuple, tuple]:
    """Axis permutations putting (N, C, spatial...), (O, I, spatial...) and (N, C, spatial...)
    first for spec strings such as ``('NHWC', 'HWIO', 'NHWC')`` (spatial dims in the order the
    kernel spec names them)."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for spec, (a, b) in zip(dimension_numbers, pairs):
        if spec.count(a) != 1 or spec.count(b) != 1 or len(spec) != len(set(spec)):
            raise TypeError(f"conv dimension numbers: {spec!r} must name {a!r} and {b!r} once "
                            "and every other dim once")
    if not (set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"}
            == set(out_spec) - {"N", "C"}):
        raise TypeError(f"conv dimension numbers {dimension_numbers}: the spatial dims must be "
                        "the same letters in all three")

    def perm(spec, pair):
        spatial = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_spec:
            spatial.sort(key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)
    return tuple(perm(s, p) for s, p in zip(dimension_numbers, pairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """Dimension numbers as permutations: None is (N, C, spatial...) for operand and output
    and (O, I, spatial...) for the kernel; spec strings are read with
    ``conv_general_permutations``."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(f"conv: operand {tuple(lhs_shape)} and kernel {tuple(rhs_shape)} need "
                        "the same rank")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, (list, tuple)) and len(dimension_numbers) == 3:
        if all(isinstance(s, str) for s in dimension_numbers):
            for s, shp in zip(dimension_numbers, (lhs_shape, rhs_shape, lhs_shape)):
                if len(s) != len(shp):
                    raise TypeError(f"conv dimension numbers {tuple(dimension_numbers)}: "
                                    f"{s!r} does not match an array of rank {len(shp)}")
            return ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))
        return ConvDimensionNumbers(*(tuple(int(i) for i in p) for p in dimension_numbers))
    raise TypeError(f"conv: dimension_numbers must be None, three spec strings or a "
                    f"ConvDimensionNumbers, got {dimension_numbers!r}")


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count: int = 1) -> tuple:
    """Output shape, in (N, O, spatial...) order, of a convolution of operand ``lhs_shape``
    (N, C, spatial...) with kernel ``rhs_shape`` (O, I, spatial...)."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"conv: {len(pads)} padding pairs for {len(lhs_shape) - 2} spatial dims")
    out = []
    for n, k, s, (lo, hi) in zip(lhs_shape[2:], rhs_shape[2:], strides, pads):
        out.append(max(0, (int(n) + lo + hi - int(k)) // int(s) + 1))
    return (int(lhs_shape[0]) // batch_group_count, int(rhs_shape[0])) + tuple(out)


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                             dimension_numbers) -> tuple:
    """Output shape of ``conv_general_dilated`` (no dilation) in the output's own layout."""
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    lhs_t = tuple(lhs_shape[i] for i in dn.lhs_spec)
    rhs_t = tuple(rhs_shape[i] for i in dn.rhs_spec)
    out_t = conv_shape_tuple(lhs_t, rhs_t, window_strides, padding)
    return tuple(out_t[i] for i in np.argsort(dn.out_spec))


def _conv_transpose_padding(k: int, s: int, padding: str) -> tuple[int, int]:
    kind = padding.upper()
    if kind == "SAME":
        pad_len = k + s - 2
        pad_a = k - 1 if s > k - 1 else -(-pad_len // 2)
    elif kind == "VALID":
        pad_len = k + s - 2 + max(k - s, 0)
        pad_a = k - 1
    else:
        raise ValueError(f"conv_transpose: padding must be 'SAME', 'VALID' or pairs, got "
                         f"{padding!r}")
    return pad_a, pad_len - pad_a


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers) -> tuple:
    """Output shape of ``conv_transpose`` in the output's own layout."""
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    lhs_t = tuple(lhs_shape[i] for i in dn.lhs_spec)
    rhs_t = tuple(rhs_shape[i] for i in dn.rhs_spec)
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(k, s, padding)
                   for k, s in zip(rhs_t[2:], window_strides)]
    space = [(i - 1) * s - k + 2 + lo + hi
             for i, k, s, (lo, hi) in zip(lhs_t[2:], rhs_t[2:], window_strides, padding)]
    out_t = (lhs_t[0], rhs_t[0]) + tuple(space)
    return tuple(out_t[i] for i in np.argsort(dn.out_spec))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None) -> tuple:
    """Output shape of ``reduce_window`` with explicit ``(low, high)`` padding."""
    if base_dilation is not None:
        operand_shape = _dilate_shape(operand_shape, base_dilation)
    if window_dilation is not None:
        window_dimensions = _dilate_shape(window_dimensions, window_dilation)
    return tuple(max(0, (int(n) + lo + hi - int(k)) // int(s) + 1) for n, k, s, (lo, hi)
                 in zip(operand_shape, window_dimensions, window_strides, padding))


# ------------------------------------------------------------------ windows
def _ints(v, n: int, name: str, fn: str) -> tuple[int, ...]:
    v = (1,) * n if v is None else tuple(int(i) for i in v)
    if len(v) != n or any(i < 1 for i in v):
        raise ValueError(f"{fn}: {name} must be {n} positive ints, got {v}")
    return v


def _window_counts(shp, first_axis: int, window, strides, dilation, fn: str) -> list[int]:
    """How many windows fit along each dim of ``shp`` (already dilated and padded) from
    ``first_axis`` on."""
    dims = range(first_axis, first_axis + len(window))
    out = [(shp[d] - (k - 1) * r - 1) // s + 1 for d, k, s, r in zip(dims, window, strides,
                                                                          dilation)]
    if any(o <= 0 for o in out):
        raise ShapeError(f"{fn}: the window {tuple(window)} (dilation {tuple(dilation)}) does "
                         f"not fit the padded operand {shp}")
    return out


def _gather_windows(x, dims, window, strides, dilation, counts, at: int):
    """``x`` (already dilated and padded) with the elements of each window along dims
    ``dims`` laid along tap axes inserted at position ``at`` (after every dim of ``dims``):
    one ``windows`` op, whose index expression does not grow with the window (its gradient:
    ``windows_transpose`` and the broadcast's sum over the taps). im2col for a convolution."""
    shp = aval_of(x).shape
    nt = len(dims)
    x = reshape(x, shp[:at] + (1,) * nt + shp[at:])
    x = broadcast_to(x, shp[:at] + tuple(window) + shp[at:])
    return bind(_P.windows, x, axes=tuple(dims), taps=tuple(range(at, at + nt)),
                strides=tuple(strides), dilation=tuple(dilation),
                sizes=tuple(int(o) for o in counts))


def window_reduce(x, monoid: str, window, strides, dilation, fn: str):
    """``x`` (already dilated and padded) reduced with ``monoid`` ("sum", "max", "min" or
    "prod") over each window, one window size, stride and dilation per dim. Windows that tile
    their dims (stride = size, no dilation: most pooling) are a reshape and a reduction, whose
    gradient is elementwise; other windows are a ``windows`` op reduced over its tap axes. The
    kernels and their gradients do not grow with the window."""
    shp = aval_of(x).shape
    out = _window_counts(shp, 0, window, strides, dilation, fn)
    dims = [d for d, (k, s) in enumerate(zip(window, strides)) if k > 1 or s > 1]
    if all(window[d] == strides[d] and dilation[d] == 1 for d in dims):
        x = x[tuple(slice(0, out[d] * window[d]) for d in range(len(shp)))]
        split = []
        for d, n in enumerate(out):
            split += [n, window[d]] if d in dims else [n]
        x = reshape(x, tuple(split))
        taps = [d + dims.index(d) + 1 for d in dims]
    else:
        x = _gather_windows(x, dims, [window[d] for d in dims], [strides[d] for d in dims],
                            [dilation[d] for d in dims], [out[d] for d in dims], len(shp))
        taps = list(range(len(shp), len(shp) + len(dims)))
    if monoid in ("sum", "prod"):
        return (_sum if monoid == "sum" else _prod)(x, axis=tuple(taps),
                                                    dtype=aval_of(x).dtype)
    if not isinstance(x, Tracer):
        # concrete arrays (eager, no gradient to route): the extreme itself, one reduction over
        # the tap axes instead of a transposed copy, an argmax and a select (the same values;
        # a zero keeps its sign)
        return (_max if monoid == "max" else _min)(x, axis=tuple(taps))
    order = [a for a in range(aval_of(x).ndim) if a not in taps] + taps
    if order != sorted(order):
        x = transpose(x, tuple(order))
    return _first_extreme(reshape(x, tuple(out) + (-1,)), monoid)


def _first_extreme(x, monoid: str):
    """The max (min) over the last axis of ``x``, whose gradient goes to the first maximum
    (minimum) alone, as XLA's ``select_and_scatter``, TensorFlow's and PyTorch's pooling give
    it: the element picked by ``argmax`` (which also picks a NaN), kept by a select (so a
    -inf or NaN elsewhere in the window does not leak in)."""
    pick = (_argmax if monoid == "max" else _argmin)(x, axis=-1, keepdims=True)
    taps = aval_of(x).shape[-1]
    chosen = arange(taps) == pick
    return _sum(where(chosen, x, zeros((), aval_of(x).dtype)), axis=-1, dtype=aval_of(x).dtype)


def _views(x, first_axis: int, window, strides, dilation, fn: str):
    """The strided views of ``x`` (already dilated and padded) that each window offset
    reads, over the dims from ``first_axis`` on, in C order of the offsets; and the output
    sizes."""
    shp = aval_of(x).shape
    dims = range(first_axis, first_axis + len(window))
    out = _window_counts(shp, first_axis, window, strides, dilation, fn)
    views = []
    for offs in itertools.product(*[range(k) for k in window]):
        key = [slice(None)] * len(shp)
        for d, o, s, r, n in zip(dims, offs, strides, dilation, out):
            key[d] = slice(o * r, o * r + s * (n - 1) + 1, s)
        views.append(x[tuple(key)])
    return views, out


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None,
                         feature_group_count: int = 1, batch_group_count: int = 1,
                         precision=None, preferred_element_type=None):
    """``lax.conv_general_dilated``: a cross-correlation of ``lhs`` (batch, features,
    spatial... in the layout ``dimension_numbers`` names) with the kernel ``rhs``, with window
    strides, ``padding`` (``'SAME'``, ``'VALID'`` or ``(low, high)`` per spatial dim),
    operand dilation (transposed convolutions), kernel dilation and feature groups."""
    fn = "lax.conv_general_dilated"
    Precision.check(precision, fn)
    lhs, rhs = _promote(lhs, rhs)
    ls, rs = aval_of(lhs).shape, aval_of(rhs).shape
    dn = conv_dimension_numbers(ls, rs, dimension_numbers)
    nsp = len(ls) - 2
    if nsp < 0:
        raise ShapeError(f"{fn}: operand {ls} needs a batch and a feature dim")
    if int(batch_group_count) != 1:
        raise NotImplementedError(f"{fn}: batch_group_count={batch_group_count} is not "
                                  "supported (only 1); it arises in the gradients of "
                                  "grouped convolutions, which jitgraph derives itself")
    strides = _ints(window_strides, nsp, "window_strides", fn)
    ldil = _ints(lhs_dilation, nsp, "lhs_dilation", fn)
    rdil = _ints(rhs_dilation, nsp, "rhs_dilation", fn)
    groups = int(feature_group_count)
    # operand as (N, spatial..., C), kernel as (spatial..., I, O)
    x = transpose(lhs, (dn.lhs_spec[0],) + tuple(dn.lhs_spec[2:]) + (dn.lhs_spec[1],))
    w = transpose(rhs, tuple(dn.rhs_spec[2:]) + (dn.rhs_spec[1], dn.rhs_spec[0]))
    xs, ws = aval_of(x).shape, aval_of(w).shape
    cin, cout, window = xs[-1], ws[-1], ws[:-2]
    if cin != ws[-2] * groups or cout % groups:
        raise ShapeError(f"{fn}: the operand has {cin} features and the kernel takes "
                         f"{ws[-2]} per group with {cout} outputs, which does not fit "
                         f"feature_group_count={groups} (operand {ls}, kernel {rs})")
    for ax, d in enumerate(ldil):
        x = dilate(x, ax + 1, d)
    xs = aval_of(x).shape
    if isinstance(padding, str):
        pads = padtype_to_pads(xs[1:-1], _dilate_shape(window, rdil), strides, padding)
    else:
        pads = [tuple(int(v) for v in p) for p in padding]
        if len(pads) != nsp or any(len(p) != 2 for p in pads):
            raise ValueError(f"{fn}: padding must be a string or one (low, high) pair per "
                             f"spatial dim ({nsp}), got {padding!r}")
    x = pad_or_crop(x, [(0, 0)] + list(pads) + [(0, 0)])
    out = _window_counts(aval_of(x).shape, 1, window, strides, rdil, fn)
    n, k = xs[0], int(np.prod(window, dtype=np.int64))
    rows = n * int(np.prod(out, dtype=np.int64))
    per = cin // groups
    results = []
    for g in range(groups):
        xg = x if groups == 1 else x[..., g * per:(g + 1) * per]
        cols = _gather_windows(xg, range(1, nsp + 1), window, strides, rdil, out, nsp + 1)
        wg = w if groups == 1 else w[..., (cout // groups) * g:(cout // groups) * (g + 1)]
        results.append(matmul(reshape(cols, (rows, k * per)),
                              reshape(wg, (k * per, cout // groups))))
    y = concatenate(results, axis=-1) if groups > 1 else results[0]
    y = reshape(y, (n,) + tuple(out) + (cout,))
    # (N, spatial..., O) -> the output layout
    internal = [0, nsp + 1] + list(range(1, nsp + 1))    # (N, O, spatial...) positions
    y = transpose(y, tuple(internal[i] for i in np.argsort(dn.out_spec)))
    return y if preferred_element_type is None else astype(y, preferred_element_type)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """``lax.conv``: NCHW operand, OIHW kernel, no dilation."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    """``conv_general_dilated`` with explicit padding and dilations, as
    ``jax.lax.conv_with_general_padding``."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation,
                                rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


_TRANSPOSE_DEFAULT = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                      4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel: bool = False, precision=None,
                   preferred_element_type=None):
    """``lax.conv_transpose``: the gradient-of-convolution layout of a transposed convolution
    (operand dilated by ``strides``), channels-last by default."""
    lhs, rhs = _operand(lhs), _operand(rhs)
    ls, rs = aval_of(lhs).shape, aval_of(rhs).shape
    if len(ls) != len(rs) or len(ls) < 2:
        raise ShapeError(f"lax.conv_transpose: operand {ls} and kernel {rs} need the same "
                         "rank, at least 2")
    nd = len(ls)
    if dimension_numbers is None:
        if nd not in _TRANSPOSE_DEFAULT:
            raise ValueError("lax.conv_transpose: pass dimension_numbers for this rank")
        dimension_numbers = _TRANSPOSE_DEFAULT[nd]
    dn = conv_dimension_numbers(ls, rs, dimension_numbers)
    window = [rs[i] for i in dn.rhs_spec[2:]]
    rdil = _ints(rhs_dilation, nd - 2, "rhs_dilation", "lax.conv_transpose")
    strides = _ints(strides, nd - 2, "strides", "lax.conv_transpose")
    if isinstance(padding, str):
        eff = _dilate_shape(window, rdil)
        pads = [_conv_transpose_padding(k, s, padding) for k, s in zip(eff, strides)]
    else:
        pads = padding
    if transpose_kernel:
        rhs = rev(rhs, tuple(dn.rhs_spec[2:]))
        rhs = swapaxes(rhs, dn.rhs_spec[0], dn.rhs_spec[1])
    return conv_general_dilated(lhs, rhs, (1,) * (nd - 2), pads, strides, rdil, dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


def reduce_window(operand, init_value, computation: Callable, window_dimensions,
                  window_strides, padding, base_dilation=None, window_dilation=None):
    """``lax.reduce_window``: ``computation`` (a binary function such as ``lax.add`` or
    ``lax.max``) folded over each window of ``operand``, padding with ``init_value`` (one
    array operand; windows over every dim)."""
    fn = "lax.reduce_window"
    if isinstance(operand, (list, tuple, dict)):
        raise NotImplementedError(f"{fn}: one array operand is supported, not a pytree")
    x = _operand(operand)
    if not isinstance(x, Tracer):
        x = asarray(x)
    shp, dt = aval_of(x).shape, aval_of(x).dtype
    nd = len(shp)
    window = _ints(window_dimensions, nd, "window_dimensions", fn)
    strides = _ints(window_strides, nd, "window_strides", fn)
    bdil = _ints(base_dilation, nd, "base_dilation", fn)
    wdil = _ints(window_dilation, nd, "window_dilation", fn)
    init = init_value
    if not isinstance(init, Tracer):
        init = np.asarray(init, dt)[()]
    # padding and dilation holes hold the reduction's identity where it is known (XLA's
    # semantics: they do not take part), else ``init_value``; ``init_value`` enters once
    ident = _identity(computation)
    fill = init if ident is None or not dtypes.is_float(dt) else np.asarray(ident, dt)[()]
    for ax, d in enumerate(bdil):
        x = dilate(x, ax, d, fill)
    if isinstance(padding, str):
        pads = padtype_to_pads(aval_of(x).shape, _dilate_shape(window, wdil), strides, padding)
    else:
        pads = [tuple(int(v) for v in p) for p in padding]
        if len(pads) != nd:
            raise ValueError(f"{fn}: one (low, high) padding pair per dim ({nd}), got "
                             f"{padding!r}")
    x = pad_or_crop(x, pads, fill)
    monoid = _MONOIDS.get(_identity(computation))
    if monoid is not None:
        acc = window_reduce(x, monoid, window, strides, wdil, fn)
    else:       # a reducer of the user's own: folded over one strided view per tap
        views, _ = _views(x, 0, window, strides, wdil, fn)
        acc = views[0]
        for v in views[1:]:
            acc = computation(acc, v)
    if ident is None or isinstance(init, Tracer) or float(init) != ident:
        acc = computation(acc, init)
    return acc


#: the reduction of each known reducer, by its identity (``_identity``)
_MONOIDS = {0.0: "sum", -np.inf: "max", np.inf: "min", 1.0: "prod"}


def _identity(computation: Callable) -> float | None:
    """The value that leaves ``computation``'s result unchanged, for the reducers lax names
    (0 for sums, -inf for maxima, +inf for minima, 1 for products); None for others."""
    from . import lax_ops as _lax, math as _m
    known = {_m.add: 0.0, _m.maximum: -np.inf, _m.minimum: np.inf, _m.multiply: 1.0,
             _lax.add: 0.0, _lax.max: -np.inf, _lax.min: np.inf, _lax.mul: 1.0}
    for f, ident in known.items():
        if computation is f:
            return ident
    return None


_locate_module(globals(), __name__, prefix="lax.")
