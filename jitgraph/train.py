"""``train_step(loss_fn, optimizer)``: forward, backward and update as one compiled program.

The returned step is ``step(params, opt_state, *batch) -> (params, opt_state, loss)`` (plus
``aux`` with ``has_aux=True``). It is a ``jit`` function with the parameters and the optimizer
state donated: their buffers are overwritten with the new values, so rebind both on every call
(``params, state, loss = step(params, state, x, y)``), as in JAX. ``step.lower(...)`` shows the
fused kernels. ``check_nan=True`` checks each step's loss and, on a NaN or inf, re-runs that
step's forward pass op by op to name the operation that produced it, the labels out of range,
or the argument that held it already (``debug_nans.diagnose``, the report the ``debug_nans``
setting gives; it keeps a copy of the parameters for that, so the caller's arrays stay valid;
it does not change the compiled step).

``distributed=True`` makes the step data-parallel over MPI ranks (``jitgraph.distributed``,
launched with ``mpiexec``): each rank passes its shard of the global batch, the gradients are
averaged over the ranks in bucketed in-place allreduces, and every rank applies the same update
(parameters and optimizer state are broadcast from rank 0 on the first call); the loss returned
is the global batch's mean on every rank. See ``jitgraph/data_parallel.py``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .data_parallel import DataParallelStep
from .debug_nans import argument_names, diagnose
from .distributed import DEFAULT_BUCKET_BYTES
from .jit import jit
from .optim import GradientTransformation, apply_updates
from .traceback_filter import api_boundary
from .transforms import value_and_grad
from .tree import tree_map


class NonFiniteLossError(FloatingPointError):
    """A training step produced a NaN or infinite loss."""


class TrainStep:
    """A compiled training step; see ``train_step``."""

    def __init__(self, loss_fn: Callable, optimizer: GradientTransformation, has_aux: bool,
                 donate: bool, check_nan: bool, distributed: bool = False,
                 bucket_bytes: int | None = None, overlap: bool = False):
        if not isinstance(optimizer, GradientTransformation):
            raise TypeError("train_step: optimizer must be a jitgraph.optim transformation "
                            f"(e.g. optim.adam(1e-3)), got {type(optimizer).__name__}")
        self.loss_fn, self.optimizer, self.has_aux = loss_fn, optimizer, has_aux
        self.check_nan = check_nan
        self.steps = 0

        def step(params, opt_state, *batch):
            out, grads = value_and_grad(loss_fn, has_aux=has_aux)(params, *batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = apply_updates(params, updates)
            if has_aux:
                return params, opt_state, out[0], out[1]
            return params, opt_state, out

        step.__name__ = f"train_step[{getattr(loss_fn, '__name__', 'loss')}]"
        self.donate = donate
        self._jitted = jit(step, donate_argnums=(0, 1) if donate else ())
        self.distributed = distributed
        if distributed:
            self._jitted = DataParallelStep(loss_fn, optimizer, has_aux, donate,
                                            bucket_bytes or DEFAULT_BUCKET_BYTES, overlap)

    @api_boundary
    def __call__(self, params, opt_state, *batch) -> Any:
        if self.check_nan and self.donate:       # keep the pre-step values to locate the op
            params, opt_state = copy_tree(params), copy_tree(opt_state)
            kept = copy_tree(params)
        else:
            kept = params
        out = self._jitted(params, opt_state, *batch)
        self.steps += 1
        if self.check_nan and not np.all(np.isfinite(out[2])):
            found = diagnose((lambda p, *b: self.loss_fn(p, *b)[0]) if self.has_aux
                             else self.loss_fn, (kept, *batch), kind="nonfinite",
                             names=argument_names(self.loss_fn, 1 + len(batch)))
            raise NonFiniteLossError(
                f"train_step: the loss is {out[2]} at step {self.steps}; {found}\n"
                "(The parameters passed to this step are unchanged.)")
        return out

    def lower(self, params, opt_state, *batch):
        """The compiled program for these arguments: graph, kernels and generated source."""
        return self._jitted.lower(params, opt_state, *batch)

    @property
    def jit_function(self):
        """The ``jit`` function that runs the step (``jitgraph.profile`` profiles it)."""
        return self._jitted


def train_step(loss_fn: Callable, optimizer: GradientTransformation, *, has_aux: bool = False,
               donate: bool = True, check_nan: bool = False, distributed: bool = False,
               bucket_bytes: int | None = None, overlap: bool = False) -> TrainStep:
    """One cached, compiled program doing ``loss_fn``'s forward and backward pass and the
    optimizer update: ``params, opt_state, loss = step(params, opt_state, *batch)``.

    The parameters and the optimizer state are donated (their buffers are overwritten with
    the new values; NumPy arrays passed in are copied first), so rebind both on every call,
    as in JAX. ``step.lower(...)`` shows the
    fused kernels.

    Example: fit ``y = 2 x + 1``.

    ```pycon
    >>> import jitgraph
    >>> import jitgraph.numpy as jnp
    >>> from jitgraph import optim
    >>> def loss(params, x, y):
    ...     return jnp.mean((x * params["w"] + params["b"] - y) ** 2)
    >>> opt = optim.sgd(0.1)
    >>> params = {"w": jnp.array(0.0), "b": jnp.array(0.0)}
    >>> opt_state = opt.init(params)
    >>> step = jitgraph.train_step(loss, opt)
    >>> x = jnp.array([0.0, 1.0, 2.0])
    >>> for _ in range(200):
    ...     params, opt_state, loss_value = step(params, opt_state, x, 2.0 * x + 1.0)
    >>> round(float(params["w"]), 3), round(float(params["b"]), 3)
    (2.0, 1.0)

    ```

    :param loss_fn: ``loss_fn(params, *batch) -> scalar`` (``(scalar, aux)`` with
        ``has_aux=True``); ``params`` is a pytree of float arrays.
    :param optimizer: a ``jitgraph.optim`` transformation (``optim.adam(1e-3)``).
    :param has_aux: ``loss_fn`` returns ``(loss, aux)``; the step then returns
        ``(params, opt_state, loss, aux)``.
    :param donate: reuse the parameters' and the optimizer state's buffers for the new values
        (default); ``False`` keeps the arrays passed in valid.
    :param check_nan: check each step's loss; on a NaN or inf, re-run that step's forward pass op
        by op and raise an error naming the operation (or the argument) that produced it.
    :param distributed: data-parallel over MPI ranks (``jitgraph.distributed``, launched with
        ``mpiexec``): each rank passes its shard of the batch (``jitgraph.distributed.shard``),
        the gradients are averaged over the ranks, every rank applies the same update.
    :param bucket_bytes: with ``distributed``, the size of the gradient buckets each allreduce
        sends (default 4 MiB).
    :param overlap: with ``distributed``, one non-blocking ``Iallreduce`` per bucket.
    :returns: the step, a callable ``step(params, opt_state, *batch) -> (params, opt_state,
        loss)``.
    :raises TypeError: when ``optimizer`` is not a ``jitgraph.optim`` transformation.
    """
    return TrainStep(loss_fn, optimizer, has_aux, donate, check_nan, distributed, bucket_bytes,
                     overlap)


def copy_tree(tree):
    """A copy of every array leaf (keep one before a donating call if you need the old values)."""
    return tree_map(lambda x: np.array(x, copy=True), tree)
