"""The NumPy reference interpreter: the ground truth compiled code is tested against."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .core import Graph, fp_errors_ignored


def run(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``graph`` on concrete arrays, node by node, with each primitive's NumPy rule.

    Each result is pinned to the dtype and shape the shape rule promised (as ``run_impl``
    does); floating-point warnings are silenced once for the whole graph, not per node, since
    eager gradients interpret many small graphs."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict = {}
    for v, a in zip(graph.inputs, args):
        dt = v.aval.dtype
        env[v] = a if type(a) is np.ndarray and a.dtype is dt else np.asarray(a, dtype=dt)
    env.update(graph.consts)
    ndarray = np.ndarray
    with fp_errors_ignored():
        for n in graph.nodes:
            prim = n.prim
            res = prim.impl(*[env[v] for v in n.inputs], **n.params)
            if prim.multiple_results:
                for v, r in zip(n.outs, res):
                    env[v] = _pinned(r, v.aval)
                continue
            v = n.outs[0]
            a = v.aval
            if type(res) is not ndarray:          # a NumPy scalar, from a 0-d operation
                res = np.asarray(res, dtype=a.dtype)
                if res.shape != a.shape:
                    res = res.reshape(a.shape)
            elif res.dtype is not a.dtype or res.shape != a.shape:
                res = np.asarray(res, dtype=a.dtype).reshape(a.shape)
            env[v] = res
    return [env[v] for v in graph.outputs]


def _pinned(r, a):
    """``r`` as an array of the dtype and shape of the aval ``a``."""
    if type(r) is not np.ndarray or r.dtype is not a.dtype or r.shape != a.shape:
        r = np.asarray(r, dtype=a.dtype).reshape(a.shape)
    return r
