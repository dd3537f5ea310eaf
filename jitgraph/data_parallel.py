"""The data-parallel training step behind ``train_step(..., distributed=True)``.

Two compiled programs per parameter signature, with the gradient allreduce between them:

1. ``grads``: forward and backward on this rank's shard; its outputs are the gradient buckets
   themselves (every gradient raveled into one flat buffer per bucket, already scaled by
   ``1/world_size``, the loss in the first bucket), so nothing is copied before the reduction;
2. the buckets are summed in place over the ranks (``MPI.IN_PLACE``, one call per bucket);
3. ``update``: slices the averaged gradients back out of the buckets (static slices, fused into
   the update's kernels) and applies the optimizer, with parameters and state donated.

Every rank thus applies the same averaged gradient to the same parameters (broadcast from rank
0 on the first call), and the loss returned is the mean over the global batch on every rank.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import distributed as dist
from .jit import jit
from .optim import GradientTransformation, apply_updates
from .transforms import make_graph, value_and_grad
from .tree import tree_flatten


class DataParallelStep:
    """``step(params, opt_state, *shard) -> (params, opt_state, loss[, aux])`` on every rank."""

    def __init__(self, loss_fn: Callable, optimizer: GradientTransformation, has_aux: bool,
                 donate: bool, bucket_bytes: int, overlap: bool):
        dist.init()
        self.loss_fn, self.optimizer, self.has_aux = loss_fn, optimizer, has_aux
        self.donate, self.bucket_bytes, self.overlap = donate, bucket_bytes, overlap
        self.world = dist.world_size()
        self.synced = False               # parameters broadcast from rank 0 yet?
        self._programs: dict = {}

    def programs(self, params, batch):
        """(plan, grads program, update program) for this parameter signature."""
        leaves, treedef = tree_flatten(params)
        key = (treedef, tuple((np.shape(x), np.asarray(x).dtype.str) for x in leaves))
        hit = self._programs.get(key)
        if hit is not None:
            return hit
        loss_fn, has_aux, optimizer = self.loss_fn, self.has_aux, self.optimizer
        # the plan needs the loss's dtype: trace once, shapes only
        graph = make_graph((lambda p, *b: loss_fn(p, *b)[0]) if has_aux else loss_fn)(
            params, *batch)
        loss_aval = graph.outputs[0].aval
        plan = dist.plan_buckets(
            [np.empty(np.shape(x), np.asarray(x).dtype) for x in leaves]
            + [np.empty((), loss_aval.dtype)], self.bucket_bytes)

        # scale = 1/world_size is a runtime argument: one compiled program for every world size
        def grads(params, scale, *batch):
            out, g = value_and_grad(loss_fn, has_aux=has_aux)(params, *batch)
            loss = out[0] if has_aux else out
            buckets = dist.pack_traced(tree_flatten(g)[0] + [loss], plan, scale)
            return (buckets, out[1]) if has_aux else buckets

        def update(params, opt_state, buckets):
            g = treedef.unflatten(dist.unpack_traced(buckets, plan)[:-1])
            updates, opt_state = optimizer.update(g, opt_state, params)
            return apply_updates(params, updates), opt_state

        name = getattr(loss_fn, "__name__", "loss")
        grads.__name__ = f"data_parallel_grads[{name}]"
        update.__name__ = f"data_parallel_update[{name}]"
        hit = (plan, jit(grads), jit(update, donate_argnums=(0, 1, 2) if self.donate else (2,)))
        self._programs[key] = hit
        return hit

    def reduce(self, buckets: list[np.ndarray]) -> list[np.ndarray]:
        """Sum the (pre-scaled) buckets over the ranks, in place."""
        if self.overlap:
            return dist.iallreduce_buffers(buckets, "sum").wait()
        return dist.allreduce_buffers(buckets, "sum")

    def __call__(self, params, opt_state, *batch) -> Any:
        if not self.synced:               # identical start everywhere, as DDP's constructor
            params, opt_state = dist.broadcast((params, opt_state))
            self.synced = True
        plan, grads, update = self.programs(params, batch)
        out = grads(params, 1.0 / self.world, *batch)
        buckets, aux = (out[0], out[1]) if self.has_aux else (out, None)
        self.reduce(buckets)
        loss = plan.leaf(buckets, plan.num_leaves - 1)
        params, opt_state = update(params, opt_state, buckets)
        return (params, opt_state, loss, aux) if self.has_aux else (params, opt_state, loss)

    def lower(self, params, opt_state, *batch):
        """The two compiled programs for these arguments: (grads, update)."""
        plan, grads, update = self.programs(params, batch)
        return (grads.lower(params, 1.0 / self.world, *batch),
                update.lower(params, opt_state, plan.empty()))
