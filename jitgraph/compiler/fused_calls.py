"""The compiled lowerings of fused primitives that run hand-written kernels as steps of their
own: the fused linear cross-entropy's chunked kernels (``kernels/linear_ce.py``, CPU), and
``attention`` and ``attention_bwd``, which call the tiled online-softmax kernels of
``kernels/attention.py`` on the CPU (registered in ``host.HOST_LOWERINGS``, as control flow
is) and of ``kernels/cuda_attention.py`` in CUDA programs (``host.DEVICE_CALLS``)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..attention import attention_bwd_p, attention_p
from ..linear_ce import linear_ce_bwd_p, linear_ce_p, linear_ce_train_p
from ..core import Node
from .host import DEVICE_CALLS, HOST_LOWERINGS, one_blas_thread


def _flat(x: np.ndarray) -> np.ndarray:
    """(..., T, d) -> (batches, T, d), C-contiguous (the kernels' layout)."""
    return np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))


def extra_operand(extra: tuple, batch: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
    """A mask or bias broadcasting to ``batch + (tq, tk)`` as (rows, 1 or tq, 1 or tk) in the
    kernels' dtype (one compiled kernel per dtype) and the row of each batch: broadcasting
    without copying it out to (T, T) per batch."""
    if not extra:
        return np.zeros((1, 1, 1), dtype), np.zeros(int(np.prod(batch, dtype=np.int64)),
                                                     np.int64)
    e = np.asarray(extra[0], dtype)
    e = e.reshape((1,) * (len(batch) + 2 - e.ndim) + e.shape)
    eb = e.shape[:-2]
    rows = np.arange(int(np.prod(eb, dtype=np.int64)), dtype=np.int64).reshape(eb)
    ebi = np.ascontiguousarray(np.broadcast_to(rows, batch).reshape(-1))
    return np.ascontiguousarray(e.reshape((-1,) + e.shape[-2:])), ebi


class _ExtraOperands:
    """``extra_operand`` for one step, with the operands of no mask or bias made once per batch
    shape and dtype (the kernels only read them): a host step's Python costs every call."""

    def __init__(self):
        self.plain: dict = {}

    def get(self, extra: tuple, batch: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
        if extra:
            return extra_operand(extra, batch, dtype)
        key = (batch, dtype)
        hit = self.plain.get(key)
        if hit is None:
            hit = self.plain[key] = extra_operand((), batch, dtype)
        return hit


def _forward(node: Node) -> Callable:
    from ..kernels.attention import attention_forward
    p = node.params

    operands = _ExtraOperands()

    def call(q, k, v, *extra):
        batch, tq = q.shape[:-2], q.shape[-2]
        e, ebi = operands.get(extra, batch, q.dtype)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        o = np.empty(qf.shape[:2] + (vf.shape[2],), q.dtype)
        m, tot = np.empty(qf.shape[:2], q.dtype), np.empty(qf.shape[:2], q.dtype)
        with one_blas_thread():     # the tile products run on the kernel's threads
            attention_forward(qf, kf, vf, e, ebi, p["kind"], p["causal"],
                              q.dtype.type(p["fill"]), q.dtype.type(p["scale"]), o, m, tot)
        return (o.reshape(batch + (tq, v.shape[-1])), m.reshape(batch + (tq,)),
                tot.reshape(batch + (tq,)))
    return call


def _backward(node: Node) -> Callable:
    from ..kernels.attention import attention_backward
    p = node.params

    operands = _ExtraOperands()

    def call(q, k, v, *rest):
        extra, (o, m, tot, do) = rest[:-4], rest[-4:]
        batch, tq = q.shape[:-2], q.shape[-2]
        e, ebi = operands.get(extra, batch, q.dtype)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        dq, dk, dv = np.empty_like(qf), np.empty_like(kf), np.empty_like(vf)
        with one_blas_thread():
            attention_backward(qf, kf, vf, e, ebi, p["kind"], p["causal"],
                               q.dtype.type(p["fill"]), q.dtype.type(p["scale"]), _flat(o),
                               np.ascontiguousarray(m.reshape(qf.shape[:2])),
                               np.ascontiguousarray(tot.reshape(qf.shape[:2])), _flat(do),
                               dq, dk, dv)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
    return call


HOST_LOWERINGS.update({attention_p: _forward, attention_bwd_p: _backward})


def _rows(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x)


def _ce_forward(node: Node) -> Callable:
    from ..kernels.linear_ce import forward

    def call(h, w, labels):
        loss, lse = np.empty(h.shape[0], h.dtype), np.empty(h.shape[0], h.dtype)
        forward(_rows(h), _rows(w), np.asarray(labels, np.int64), loss, lse)
        return loss, lse
    return call


def _ce_backward(node: Node) -> Callable:
    from ..kernels.linear_ce import backward

    def call(h, w, labels, lse, ct):
        dh, dw = np.empty(h.shape, h.dtype), np.empty(w.shape, w.dtype)
        backward(_rows(h), _rows(w), np.asarray(labels, np.int64), _rows(lse), _rows(ct), dh, dw)
        return dh, dw
    return call


def _ce_train(node: Node) -> Callable:
    from ..kernels.linear_ce import train

    def call(h, w, labels, ct):
        n = h.shape[0]
        loss, lse = np.empty(n, h.dtype), np.empty(n, h.dtype)
        dh, dw = np.empty(h.shape, h.dtype), np.empty(w.shape, w.dtype)
        train(_rows(h), _rows(w), np.asarray(labels, np.int64), _rows(ct), loss, lse, dh, dw)
        return loss, lse, dh, dw
    return call


HOST_LOWERINGS.update({linear_ce_p: _ce_forward, linear_ce_bwd_p: _ce_backward,
                       linear_ce_train_p: _ce_train})


class _CudaAttention:
    """The driver lines of an ``attention`` / ``attention_bwd`` step in a CUDA program: a
    prepared ``kernels.cuda_attention.Attention`` per call site, called on the flat buffers."""

    def fits(self, node: Node) -> bool:
        from ..kernels.cuda_attention import max_dim
        q, k, v = node.inputs[:3]
        return max(q.aval.shape[-1], v.aval.shape[-1]) <= max_dim(q.aval.dtype)

    def lines(self, codegen, s) -> list[str]:
        n, name = s.node, codegen.plan.array_name
        q, k, v = n.inputs[:3]
        p = n.params
        extra = n.inputs[3] if p["kind"] else None
        dt = np.dtype(q.aval.dtype).name
        obj = f"{s.name}_attention_{{H}}"
        codegen.chunks.append(
            f"{obj} = D.attention({q.aval.shape[:-2]!r}, {q.aval.shape[-2]}, "
            f"{k.aval.shape[-2]}, {q.aval.shape[-1]}, {v.aval.shape[-1]}, "
            f"{None if extra is None else extra.aval.shape!r}, {p['kind']}, {p['causal']}, "
            f"float({str(p['fill'])!r}), float({str(p['scale'])!r}), np.{dt})")
        ex = "None" if extra is None else name(extra)
        if n.prim is attention_p:
            outs = ", ".join(name(o) if o in codegen.plan.needed else f"{obj}.scratch({k})"
                             for k, o in enumerate(n.outs))
            return [f"{obj}.forward({name(q)}, {name(k)}, {name(v)}, {ex}, {outs})"]
        o, m, tot, do = n.inputs[-4:]
        outs = ", ".join(name(o) if o in codegen.plan.needed else f"{obj}.scratch({k + 3})"
                         for k, o in enumerate(n.outs))
        return [f"{obj}.backward({name(q)}, {name(k)}, {name(v)}, {ex}, {name(o)}, {name(m)}, "
                f"{name(tot)}, {name(do)}, {outs})"]


DEVICE_CALLS.update({attention_p: _CudaAttention(), attention_bwd_p: _CudaAttention()})
