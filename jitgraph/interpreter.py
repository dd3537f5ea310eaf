"""The NumPy reference interpreter: the ground truth compiled code is tested against."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .core import Graph, run_impl


def run(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``graph`` on concrete arrays, node by node, with each primitive's NumPy rule."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict = {}
    for v, a in zip(graph.inputs, args):
        env[v] = np.asarray(a, dtype=v.aval.dtype)
    env.update(graph.consts)
    for n in graph.nodes:
        outs = run_impl(n.prim, [env[v] for v in n.inputs], n.params, [o.aval for o in n.outs])
        for v, o in zip(n.outs, outs):
            env[v] = o
    return [env[v] for v in graph.outputs]
