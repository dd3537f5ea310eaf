"""``tf.train`` of TensorFlow 1: optimizers (with TF 1's update formulas and slot
initialisations) and ``Saver`` (variables to a checkpoint file and back)."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import numpy as jnp
from .graph import Special, Tensor, Variable, get_default_graph, gradients
from .namespace import Namespace
from .session import NotFoundError, Session


def _value(x, env):
    """A hyperparameter's value in a run: a number, or a fed / computed tensor."""
    return env[x] if isinstance(x, Tensor) else x


class Optimizer:
    """The base of the optimizers: ``minimize`` = ``apply_gradients(compute_gradients(...))``."""

    _slot_names: tuple[str, ...] = ()
    _slot_init = 0.0

    def __init__(self, name: str):
        self._name = name
        self._slots: dict = {}

    def compute_gradients(self, loss: Tensor, var_list=None, **unused) -> list[tuple]:
        """[(gradient, variable)] for the trainable variables (or ``var_list``)."""
        var_list = list(var_list) if var_list is not None else [
            v for v in loss.graph.variables if v.trainable]
        if not var_list:
            raise ValueError("compute_gradients: no trainable variables to optimize")
        return list(zip(gradients(loss, var_list), var_list))

    def apply_gradients(self, grads_and_vars, global_step: Variable | None = None,
                        name: str | None = None) -> Special:
        """An op that updates each variable from its gradient (pairs with a None gradient are
        skipped) and adds 1 to ``global_step`` if given."""
        pairs = list(grads_and_vars)
        if not any(g is not None for g, _ in pairs):
            raise ValueError("apply_gradients: no gradients provided for any variable")
        var_list = [v for _, v in pairs]
        slots = self._create_slots([v for g, v in pairs if g is not None])
        hyper = [h for h in self._hyper() if isinstance(h, Tensor)]
        extra = [global_step] if global_step is not None else []
        return Special([], "TrainOp", name or self._name, optimizer=self,
                       grads=[g for g, _ in pairs], var_list=var_list, global_step=global_step,
                       deps=[g for g, _ in pairs if g is not None] + var_list + slots + hyper
                       + extra)

    def minimize(self, loss: Tensor, global_step: Variable | None = None, var_list=None,
                 name: str | None = None, **unused) -> Special:
        return self.apply_gradients(self.compute_gradients(loss, var_list), global_step, name)

    def _hyper(self) -> list:
        """The hyperparameters, which may be tensors (a fed learning rate)."""
        return [self.learning_rate]

    def _create_slots(self, var_list) -> list:
        made = []
        for v in var_list:
            if v in self._slots:
                made += self._slots[v]
                continue
            if v._shape is None or any(d is None for d in v._shape):
                raise ValueError(f"{type(self).__name__}: the shape of variable {v.op_name} "
                                 "must be known")
            slots = [Variable(np.full(v._shape, self._slot_init if i == 0 else 0.0, v.dtype),
                              trainable=False, name=f"{v.op_name}/{s}")
                     for i, s in enumerate(self._slot_names)]
            self._slots[v] = slots
            made += slots
        return made + self._extra_slots()

    def _extra_slots(self) -> list:
        return []

    def apply(self, var_list, grads, env, ctx) -> None:
        raise NotImplementedError


class GradientDescentOptimizer(Optimizer):
    def __init__(self, learning_rate, use_locking: bool = False,
                 name: str = "GradientDescent"):
        super().__init__(name)
        self.learning_rate = learning_rate

    def apply(self, var_list, grads, env, ctx):
        lr = _value(self.learning_rate, env)
        for v, g in zip(var_list, grads):
            ctx.updates[v] = env[v] - lr * g


class MomentumOptimizer(Optimizer):
    """accum = momentum * accum + g; var -= lr * accum (Nesterov: lr * (g + momentum * accum))."""

    _slot_names = ("Momentum",)

    def __init__(self, learning_rate, momentum, use_locking: bool = False,
                 name: str = "Momentum", use_nesterov: bool = False):
        super().__init__(name)
        self.learning_rate, self.momentum, self.nesterov = learning_rate, momentum, use_nesterov

    def _hyper(self):
        return [self.learning_rate, self.momentum]

    def apply(self, var_list, grads, env, ctx):
        lr, mu = _value(self.learning_rate, env), _value(self.momentum, env)
        for v, g in zip(var_list, grads):
            (acc,) = self._slots[v]
            a = mu * env[acc] + g
            ctx.updates[acc] = a
            ctx.updates[v] = env[v] - lr * (g + mu * a if self.nesterov else a)


class AdagradOptimizer(Optimizer):
    """accum += g^2 (starting at ``initial_accumulator_value``); var -= lr * g / sqrt(accum)."""

    _slot_names = ("Adagrad",)

    def __init__(self, learning_rate, initial_accumulator_value: float = 0.1,
                 use_locking: bool = False, name: str = "Adagrad"):
        super().__init__(name)
        self.learning_rate = learning_rate
        self._slot_init = initial_accumulator_value

    def apply(self, var_list, grads, env, ctx):
        lr = _value(self.learning_rate, env)
        for v, g in zip(var_list, grads):
            (acc,) = self._slots[v]
            a = env[acc] + g * g
            ctx.updates[acc] = a
            ctx.updates[v] = env[v] - lr * g / jnp.sqrt(a)


class RMSPropOptimizer(Optimizer):
    """TensorFlow 1's RMSProp: the mean square starts at 1 (not 0), epsilon is inside the sqrt:
    ms = decay * ms + (1 - decay) g^2; mom = momentum * mom + lr g / sqrt(ms + eps); var -= mom.
    ``centered`` subtracts the square of the mean gradient from ms."""

    _slot_names = ("RMSProp", "Momentum")
    _slot_init = 1.0

    def __init__(self, learning_rate, decay: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-10, use_locking: bool = False, centered: bool = False,
                 name: str = "RMSProp"):
        super().__init__(name)
        self.learning_rate, self.decay, self.momentum = learning_rate, decay, momentum
        self.epsilon, self.centered = epsilon, centered
        if centered:
            self._slot_names = ("RMSProp", "Momentum", "MG")

    def apply(self, var_list, grads, env, ctx):
        lr, rho, mu, eps = _value(self.learning_rate, env), self.decay, self.momentum, self.epsilon
        for v, g in zip(var_list, grads):
            ms_v, mom_v, *mg_v = self._slots[v]
            ms = rho * env[ms_v] + (1 - rho) * g * g
            denom = ms
            if mg_v:
                mg = rho * env[mg_v[0]] + (1 - rho) * g
                ctx.updates[mg_v[0]] = mg
                denom = ms - mg * mg
            mom = mu * env[mom_v] + lr * g / jnp.sqrt(denom + eps)
            ctx.updates[ms_v], ctx.updates[mom_v] = ms, mom
            ctx.updates[v] = env[v] - mom


class AdamOptimizer(Optimizer):
    """TensorFlow 1's Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t), epsilon outside the sqrt."""

    _slot_names = ("Adam", "Adam_1")

    def __init__(self, learning_rate=0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, use_locking: bool = False, name: str = "Adam"):
        super().__init__(name)
        self.learning_rate, self.b1, self.b2, self.eps = learning_rate, beta1, beta2, epsilon

    def _extra_slots(self):
        if not hasattr(self, "_t"):
            self._t = Variable(np.zeros((), np.float64), trainable=False, name="beta_power_step")
        return [self._t]

    def apply(self, var_list, grads, env, ctx):
        t = env[self._t] + 1.0
        ctx.updates[self._t] = t
        lr = _value(self.learning_rate, env)
        for v, g in zip(var_list, grads):
            m, s = self._slots[v]
            mv = self.b1 * env[m] + (1 - self.b1) * g
            sv = self.b2 * env[s] + (1 - self.b2) * g * g
            lr_t = jnp.astype(lr * jnp.sqrt(1 - self.b2 ** t) / (1 - self.b1 ** t),
                              env[v].dtype)
            ctx.updates[m], ctx.updates[s] = mv, sv
            ctx.updates[v] = env[v] - lr_t * mv / (jnp.sqrt(sv) + self.eps)


# ------------------------------------------------------------------ checkpoints
_SUFFIX = ".npz"


class Saver:
    """Saves variables' values to ``<save_path>.npz`` and restores them by variable name.

    The file is a NumPy archive, not TensorFlow's tensor-bundle format: checkpoints written by
    TensorFlow cannot be read, and TensorFlow cannot read these. A ``checkpoint`` text file in
    the directory names the latest ones, as TF's does, for ``tf.train.latest_checkpoint``."""

    def __init__(self, var_list=None, max_to_keep: int | None = 5, **unused):
        if var_list is None:
            var_list = list(get_default_graph().variables)
        if isinstance(var_list, dict):
            self._vars = dict(var_list)
        else:
            self._vars = {v.op_name: v for v in var_list}
        bad = [k for k, v in self._vars.items() if not isinstance(v, Variable)]
        if bad:
            raise TypeError(f"Saver: {bad} are not variables")
        if not self._vars:
            raise ValueError("Saver: no variables to save")
        self.max_to_keep = max_to_keep
        self._kept: list[str] = []

    def save(self, sess: Session, save_path: str, global_step=None, **unused) -> str:
        """Write every variable's value; returns the checkpoint path (``save_path-step``)."""
        if global_step is not None:
            step = sess.run(global_step) if isinstance(global_step, Tensor) else global_step
            save_path = f"{save_path}-{int(step)}"
        arrays = {name: sess.read_variable(v) for name, v in self._vars.items()}
        directory = os.path.dirname(os.path.abspath(save_path))
        if not os.path.isdir(directory):
            raise NotFoundError(f"Saver.save: the directory {directory} does not exist")
        with open(save_path + _SUFFIX, "wb") as f:
            np.savez(f, **arrays)
        if save_path in self._kept:
            self._kept.remove(save_path)
        self._kept.append(save_path)
        while self.max_to_keep and len(self._kept) > self.max_to_keep:
            old = self._kept.pop(0)
            if os.path.exists(old + _SUFFIX):
                os.remove(old + _SUFFIX)
        _write_state(directory, self._kept)
        return save_path

    def restore(self, sess: Session, save_path: str) -> None:
        """Set each variable (no initializer needed) from the checkpoint at ``save_path``."""
        if save_path is None or not os.path.exists(save_path + _SUFFIX):
            raise NotFoundError(f"Failed to find any matching files for {save_path} (a "
                                f"checkpoint written by Saver.save is {save_path}{_SUFFIX})")
        with np.load(save_path + _SUFFIX, allow_pickle=False) as data:
            missing = [k for k in self._vars if k not in data.files]
            if missing:
                raise NotFoundError(f"Key {missing[0]} not found in checkpoint {save_path}")
            for name, v in self._vars.items():
                sess.write_variable(v, data[name])


def _write_state(directory: str, kept: list[str]) -> None:
    lines = [f'model_checkpoint_path: "{os.path.basename(kept[-1])}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept]
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write("\n".join(lines) + "\n")


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The path of the newest checkpoint ``Saver.save`` wrote into the directory, or None."""
    path = os.path.join(checkpoint_dir, latest_filename or "checkpoint")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            if line.startswith("model_checkpoint_path:"):
                name = line.split(":", 1)[1].strip().strip('"')
                full = name if os.path.isabs(name) else os.path.join(checkpoint_dir, name)
                return full if os.path.exists(full + _SUFFIX) else None
    return None


train = Namespace("tf.train", dict(
    Optimizer=Optimizer, GradientDescentOptimizer=GradientDescentOptimizer,
    MomentumOptimizer=MomentumOptimizer, AdagradOptimizer=AdagradOptimizer,
    RMSPropOptimizer=RMSPropOptimizer, AdamOptimizer=AdamOptimizer, Saver=Saver,
    latest_checkpoint=latest_checkpoint,
), not_served={
    "import_meta_graph": "graphs are not serialised (rebuild the graph in Python, then restore)",
    "Supervisor": "not served; use a Session with Saver", "MonitoredTrainingSession":
    "not served; use a Session with Saver", "start_queue_runners": "input queues are not served "
    "(feed the data with feed_dict)", "shuffle_batch": "input queues are not served (feed the "
    "data with feed_dict)", "exponential_decay": "not served yet; feed the learning rate "
    "through a placeholder", "FtrlOptimizer": "not served", "AdadeltaOptimizer": "not served",
})
