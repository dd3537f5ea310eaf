"""Sliding-window layout primitives, the pair every convolution and its gradient is built from.

``windows`` gathers each window's elements along tap axes: ``out[.., o, .., t, ..] =
x[.., o * stride + t * dilation, .., t, ..]`` for each window axis ``axes[i]`` and its tap
axis ``taps[i]`` (im2col, in any number of spatial dims). ``windows_transpose`` is its
transpose: it puts each tap's element back where it was read from, zero elsewhere (col2im
before the sum over taps, which the VJP of the broadcast that made the tap axes adds).

Each is one index expression whatever the window's size, so a kernel reading them compiles
in the same time for a 3x3 and a 7x7 window (a convolution written as one strided view per
tap grows with the taps). Each is the other's VJP; both are linear.
"""
from __future__ import annotations

import numpy as np

from ..batching import move_batch_axis
from ..core import Aval, Lowering, Primitive, register
from ..errors import ShapeError


def _geometry(x, axes, taps, strides, dilation, sizes, fn: str):
    """Checks the window parameters against ``x`` (an aval)."""
    n = len(axes)
    if not (len(taps) == len(strides) == len(dilation) == len(sizes) == n):
        raise ShapeError(f"{fn}: axes {axes}, taps {taps}, strides {strides}, dilation "
                         f"{dilation} and sizes {sizes} must have one entry per window axis")
    used = list(axes) + list(taps)
    if len(set(used)) != len(used) or any(not 0 <= a < x.ndim for a in used):
        raise ShapeError(f"{fn}: window axes {axes} and tap axes {taps} must be distinct axes "
                         f"of the operand {x.shape}")
    if any(s < 1 for s in strides) or any(r < 1 for r in dilation) or any(o < 1 for o in sizes):
        raise ShapeError(f"{fn}: strides {strides}, dilation {dilation} and sizes {sizes} "
                         "must be positive")


def _span(o: int, w: int, s: int, r: int) -> int:
    """How many input positions ``o`` windows of ``w`` taps read (stride ``s``, dilation
    ``r``)."""
    return (o - 1) * s + (w - 1) * r + 1


def _windows_aval(x, *, axes, taps, strides, dilation, sizes):
    _geometry(x, axes, taps, strides, dilation, sizes, "windows")
    shape = list(x.shape)
    for a, t, s, r, o in zip(axes, taps, strides, dilation, sizes):
        if _span(o, x.shape[t], s, r) > x.shape[a]:
            raise ShapeError(f"windows: {o} windows of {x.shape[t]} taps (stride {s}, "
                             f"dilation {r}) do not fit axis {a} of the operand {x.shape}")
        shape[a] = o
    return Aval(tuple(shape), x.dtype, x.weak)


def _transpose_aval(g, *, axes, taps, strides, dilation, sizes):
    _geometry(g, axes, taps, strides, dilation, sizes, "windows_transpose")
    shape = list(g.shape)
    for a, t, s, r, n in zip(axes, taps, strides, dilation, sizes):
        if _span(g.shape[a], g.shape[t], s, r) > n:
            raise ShapeError(f"windows_transpose: {g.shape[a]} windows of {g.shape[t]} taps "
                             f"(stride {s}, dilation {r}) do not fit {n} positions")
        shape[a] = n
    return Aval(tuple(shape), g.dtype, g.weak)


def _window_view(x, axes, taps, strides, dilation, sizes):
    """Every window of ``x`` as one strided view, no copy: window axis ``a`` steps ``stride``
    positions of ``x``'s axis ``a``, and its tap axis ``dilation`` positions more."""
    shape, st = list(x.shape), list(x.strides)
    for a, t, s, r, o in zip(axes, taps, strides, dilation, sizes):
        shape[a] = o
        st[a] = s * x.strides[a]
        st[t] = x.strides[t] + r * x.strides[a]
    return np.lib.stride_tricks.as_strided(x, shape, st, writeable=x.flags.writeable)


def _windows_impl(x, *, axes, taps, strides, dilation, sizes):
    # one copy of the view, written in order (a copy per tap wrote the output with a stride:
    # twice the time for a 5x5 window)
    view = _window_view(np.asarray(x), axes, taps, strides, dilation, sizes)
    return np.array(view, order="C", copy=True)


def _transpose_impl(g, *, axes, taps, strides, dilation, sizes):
    shape = list(g.shape)
    for a, n in zip(axes, sizes):
        shape[a] = n
    out = np.zeros(shape, g.dtype)
    # each (window, tap) pair has its own element of ``out`` (the tap axis stays), so the
    # windows' view of ``out`` takes ``g`` in one assignment
    _window_view(out, axes, taps, strides, dilation, [g.shape[a] for a in axes])[...] = g
    return out


def _tap_term(ctx, t: str, r: int) -> str:
    return t if r == 1 else ctx.bare("times", ctx.number(r), t)


def windows_index_map(ctx, out_idx, in_aval, out_aval, *, axes, taps, strides, dilation,
                      sizes):
    """Window ``o``, tap ``t`` reads position ``o * stride + t * dilation``: in bounds by the
    shape rule, so no condition."""
    idx = list(out_idx)
    for a, t, s, r in zip(axes, taps, strides, dilation):
        o = out_idx[a] if s == 1 else ctx.bare("times", ctx.number(s), out_idx[a])
        idx[a] = ctx.op("plus", o, _tap_term(ctx, out_idx[t], r))
    return idx, None


def windows_transpose_index_map(ctx, out_idx, in_aval, out_aval, *, axes, taps, strides,
                                dilation, sizes):
    """Position ``h``, tap ``t`` holds window ``(h - t * dilation) / stride`` where that is a
    whole window number in range, else 0: returns (in_idx, condition)."""
    idx, conds = list(out_idx), []
    for a, t, s, r in zip(axes, taps, strides, dilation):
        e = ctx.op("minus", out_idx[a], _tap_term(ctx, out_idx[t], r))
        o = in_aval.shape[a]
        parts = [ctx.bare("greater_equal", e, ctx.number(0))]
        if s == 1:
            idx[a] = e
            parts.append(ctx.bare("less", e, ctx.number(o)))
        else:
            idx[a] = ctx.op("floor_divide", e, ctx.number(s))
            parts.append(ctx.bare("less_equal", e, ctx.number((o - 1) * s)))
            parts.append(ctx.bare("equal", ctx.bare("remainder", e, ctx.number(s)),
                                  ctx.number(0)))
        cond = parts[0]
        for p in parts[1:]:
            cond = ctx.bare("and", cond, p)
        conds.append(ctx.group(cond))
    cond = conds[0]
    for c in conds[1:]:
        cond = ctx.bare("and", cond, c)
    return idx, cond


def _params_vjp(prim_of):
    """The VJP of one of the pair: the other, with the cotangent's sizes along the window
    axes taken from the operand."""
    def vjp(g, out, x, *, axes, taps, strides, dilation, sizes):
        return (prim_of()(g, axes=axes, taps=taps, strides=strides, dilation=dilation,
                          sizes=tuple(x.shape[a] for a in axes)),)
    return vjp


def _linear_jvp(prim_of):
    def jvp(ts, out, x, **params):
        return None if ts[0] is None else prim_of()(ts[0], **params)
    return jvp


def _batch(prim_of):
    """A batch axis goes to the front; the window and tap axes shift past it."""
    def batch(args, dims, *, axes, taps, strides, dilation, sizes):
        x = move_batch_axis(args[0], dims[0], 0)
        return prim_of()(x, axes=tuple(a + 1 for a in axes), taps=tuple(t + 1 for t in taps),
                         strides=strides, dilation=dilation, sizes=sizes), 0
    return batch


def _pair(name, aval, impl, index_map, other):
    p = register(Primitive(name, kind="layout", abstract_eval=aval, impl=impl,
                           vjp=_params_vjp(other), jvp=_linear_jvp(lambda: p),
                           codegen=Lowering.index_map(index_map, masked=True)))
    p.batch = _batch(lambda: p)
    return p


windows_p = _pair("windows", _windows_aval, _windows_impl, windows_index_map,
                  lambda: windows_transpose_p)
windows_transpose_p = _pair("windows_transpose", _transpose_aval, _transpose_impl,
                            windows_transpose_index_map, lambda: windows_p)
