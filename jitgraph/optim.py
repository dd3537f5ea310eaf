"""Optimizers in optax's functional shape: ``opt = adam(1e-3)``; ``state = opt.init(params)``;
``updates, state = opt.update(grads, state, params)``; ``params = apply_updates(params, updates)``.

The state is a pytree of arrays (moment estimates, a step count), so a jitted training step
takes and returns it like the parameters, and the whole update compiles into the step's fused
kernels. The update rules are PyTorch's (``torch.optim``): weight decay in SGD, Adam and
RMSProp is added to the gradient (L2); AdamW decays the weights directly. Learning rates may be
schedules: functions of the step count (see ``constant``, ``step_decay``, ``cosine_decay``,
``linear_warmup``, ``warmup_cosine_decay``).
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np

from . import numpy as jnp
from .core import aval_of
from .tree import tree_flatten, tree_map, tree_unflatten

__all__ = ["GradientTransformation", "sgd", "adam", "adamw", "rmsprop", "clip_by_global_norm",
           "chain", "apply_updates", "global_norm", "constant", "step_decay", "cosine_decay",
           "linear_warmup", "warmup_cosine_decay"]


class GradientTransformation(NamedTuple):
    """``init(params) -> state``; ``update(grads, state, params=None) -> (updates, state)``."""
    init: Callable
    update: Callable


Schedule = Callable[[Any], Any]


# ------------------------------------------------------------------ schedules
def constant(value: float) -> Schedule:
    """A schedule returning ``value`` at every step."""
    return lambda count: value


def step_decay(init_value: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``init_value * gamma ** floor(count / step_size)`` (PyTorch's StepLR)."""
    return lambda count: init_value * gamma ** jnp.floor_divide(count, step_size)


def cosine_decay(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """Cosine from ``init_value`` down to ``alpha * init_value`` over ``decay_steps``, then flat."""
    def schedule(count):
        t = jnp.minimum(count, decay_steps) / decay_steps
        return init_value * ((1 - alpha) * 0.5 * (1 + jnp.cos(math.pi * t)) + alpha)
    return schedule


def linear_warmup(peak_value: float, warmup_steps: int, init_value: float = 0.0) -> Schedule:
    """Linear from ``init_value`` to ``peak_value`` over ``warmup_steps``, then flat."""
    def schedule(count):
        t = jnp.minimum(count, warmup_steps) / max(warmup_steps, 1)
        return init_value + (peak_value - init_value) * t
    return schedule


def warmup_cosine_decay(peak_value: float, warmup_steps: int, decay_steps: int,
                        end_value: float = 0.0) -> Schedule:
    """Linear warm-up to ``peak_value``, then cosine decay to ``end_value`` at ``decay_steps``."""
    warm = linear_warmup(peak_value, warmup_steps)
    cos = cosine_decay(peak_value, max(decay_steps - warmup_steps, 1),
                       alpha=end_value / peak_value if peak_value else 0.0)
    return lambda count: jnp.where(count < warmup_steps, warm(count),
                                   cos(count - warmup_steps))


# ------------------------------------------------------------------ helpers
def apply_updates(params, updates):
    """``params + updates``, leaf by leaf, keeping each parameter's dtype."""
    return tree_map(lambda p, u: p + jnp.astype(u, aval_of(p).dtype), params, updates)


def global_norm(tree) -> Any:
    """sqrt of the sum of squares of every leaf."""
    leaves = tree_flatten(tree)[0]
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves))


def _lr(learning_rate, count):
    return learning_rate(count) if callable(learning_rate) else learning_rate


def _as(x, like):
    """A scalar in ``like``'s dtype, so float32 parameters stay float32."""
    if isinstance(x, (int, float)):
        return x
    return jnp.astype(x, aval_of(like).dtype)


def _check_tree(grads, state_tree, what: str):
    g_def = tree_flatten(grads)[1]
    s_def = tree_flatten(state_tree)[1]
    if g_def != s_def:
        raise ValueError(f"{what}: the optimizer state was built for parameters of structure "
                         f"{s_def}, but the gradients have structure {g_def}; call "
                         "opt.init(params) with the parameters you train")


def _zeros_like_tree(params):
    return tree_map(lambda p: np.zeros(np.shape(p), aval_of(jnp.asarray(p)).dtype), params)


def _count0():
    return np.zeros((), np.int64)


def _map(fn, *trees):
    """tree_map over several trees returning tuples -> a tuple of trees."""
    leaves = [tree_flatten(t)[0] for t in trees]
    tdef = tree_flatten(trees[0])[1]
    outs = [fn(*xs) for xs in zip(*leaves)]
    n = len(outs[0]) if outs else 0
    return tuple(tree_unflatten(tdef, [o[i] for o in outs]) for i in range(n))


def _params_or_error(params, weight_decay, name):
    if weight_decay and params is None:
        raise ValueError(f"{name}: weight decay needs the parameters: opt.update(grads, "
                         "state, params)")


# ------------------------------------------------------------------ optimizers
def sgd(learning_rate, momentum: float = 0.0, nesterov: bool = False,
        weight_decay: float = 0.0) -> GradientTransformation:
    """SGD with optional (Nesterov) momentum and L2 weight decay, as ``torch.optim.SGD``."""
    if nesterov and momentum <= 0:
        raise ValueError("sgd: Nesterov momentum needs momentum > 0")

    def init(params):
        return {"count": _count0(),
                "momentum": _zeros_like_tree(params) if momentum else None}

    def update(grads, state, params=None):
        _params_or_error(params, weight_decay, "sgd")
        if momentum:
            _check_tree(grads, state["momentum"], "sgd")
        lr = _lr(learning_rate, state["count"])
        pt = params if params is not None else grads

        def leaf(g, p, buf=None):
            if weight_decay:
                g = g + weight_decay * p
            if buf is not None:
                buf = momentum * buf + g
                g = g + momentum * buf if nesterov else buf
            return -_as(lr, g) * g, buf

        if momentum:
            updates, bufs = _map(leaf, grads, pt, state["momentum"])
        else:
            updates, = _map(lambda g, p: leaf(g, p)[:1], grads, pt)
            bufs = None
        return updates, {"count": state["count"] + 1, "momentum": bufs}

    return GradientTransformation(init, update)


def _adam_like(learning_rate, b1, b2, eps, weight_decay, decoupled, name):
    def init(params):
        return {"count": _count0(), "mu": _zeros_like_tree(params),
                "nu": _zeros_like_tree(params)}

    def update(grads, state, params=None):
        _params_or_error(params, weight_decay, name)
        _check_tree(grads, state["mu"], name)
        count = state["count"] + 1
        lr = _lr(learning_rate, state["count"])
        t = jnp.astype(count, jnp.float64)
        c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
        pt = params if params is not None else grads

        def leaf(g, p, m, v):
            if weight_decay and not decoupled:
                g = g + weight_decay * p
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * (g * g)
            step = (m / _as(c1, g)) / (jnp.sqrt(v / _as(c2, g)) + eps)
            if weight_decay and decoupled:
                step = step + weight_decay * p
            return -_as(lr, g) * step, m, v

        updates, mu, nu = _map(leaf, grads, pt, state["mu"], state["nu"])
        return updates, {"count": count, "mu": mu, "nu": nu}

    return GradientTransformation(init, update)


def adam(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0) -> GradientTransformation:
    """Adam (Kingma & Ba) with bias correction, as ``torch.optim.Adam`` (L2 weight decay)."""
    return _adam_like(learning_rate, b1, b2, eps, weight_decay, False, "adam")


def adamw(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 1e-2) -> GradientTransformation:
    """AdamW (Loshchilov & Hutter): weight decay applied to the weights, not the gradient."""
    return _adam_like(learning_rate, b1, b2, eps, weight_decay, True, "adamw")


def rmsprop(learning_rate, decay: float = 0.99, eps: float = 1e-8, momentum: float = 0.0,
            centered: bool = False, weight_decay: float = 0.0) -> GradientTransformation:
    """RMSProp as ``torch.optim.RMSprop`` (``decay`` is its ``alpha``)."""
    def init(params):
        z = _zeros_like_tree
        return {"count": _count0(), "nu": z(params), "mean": z(params) if centered else None,
                "momentum": z(params) if momentum else None}

    def update(grads, state, params=None):
        _params_or_error(params, weight_decay, "rmsprop")
        _check_tree(grads, state["nu"], "rmsprop")
        lr = _lr(learning_rate, state["count"])
        pt = params if params is not None else grads

        def leaf(g, p, v, gm=None, buf=None):
            if weight_decay:
                g = g + weight_decay * p
            v = decay * v + (1.0 - decay) * (g * g)
            if centered:
                gm = decay * gm + (1.0 - decay) * g
                denom = jnp.sqrt(v - gm * gm) + eps
            else:
                denom = jnp.sqrt(v) + eps
            step = g / denom
            if momentum:
                buf = momentum * buf + step
                step = buf
            return -_as(lr, g) * step, v, gm, buf

        g_leaves, tdef = tree_flatten(grads)
        cols = [tree_flatten(t)[0] for t in (pt, state["nu"])]
        extra = [tree_flatten(state["mean"])[0] if centered else [None] * len(g_leaves),
                 tree_flatten(state["momentum"])[0] if momentum else [None] * len(g_leaves)]
        outs = [leaf(g, p, v, gm, b) for g, p, v, gm, b in zip(g_leaves, *cols, *extra)]
        unf = lambda i: tree_unflatten(tdef, [o[i] for o in outs])  # noqa: E731
        return unf(0), {"count": state["count"] + 1, "nu": unf(1),
                        "mean": unf(2) if centered else None,
                        "momentum": unf(3) if momentum else None}

    return GradientTransformation(init, update)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale all gradients by ``min(1, max_norm / global_norm)`` (torch's clip_grad_norm_)."""
    def init(params):
        return {}

    def update(grads, state, params=None):
        norm = global_norm(grads)
        scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
        return tree_map(lambda g: g * _as(scale, g), grads), state

    return GradientTransformation(init, update)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply transformations in order (``chain(clip_by_global_norm(1.0), adam(1e-3))``)."""
    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(grads, state, params=None):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(f"chain: expected a state of {len(transforms)} parts from "
                             "chain(...).init(params)")
        new_states = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params)
            new_states.append(s)
        return grads, tuple(new_states)

    return GradientTransformation(init, update)


# ------------------------------------------------------------------ autograd-style helpers
def flatten(tree):
    """``(vector, unflatten)``: every leaf raveled into one vector (autograd's
    ``autograd.misc.flatten``); ``unflatten(vector)`` rebuilds the tree."""
    leaves, tdef = tree_flatten(tree)
    shapes = [aval_of(jnp.asarray(x)).shape for x in leaves]
    vec = jnp.concatenate([jnp.ravel(x) for x in leaves]) if leaves else np.zeros(0)

    def unflatten(v):
        out, i = [], 0
        for s in shapes:
            n = math.prod(s)
            out.append(jnp.reshape(v[i:i + n], s))
            i += n
        return tree_unflatten(tdef, out)
    return vec, unflatten


def adam_minimize(grad_fn: Callable, x0, callback: Callable | None = None, num_iters: int = 100,
                  step_size: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                  eps: float = 1e-8):
    """autograd's ``adam(grad, x0, callback, num_iters, step_size, b1, b2, eps)`` loop:
    ``grad_fn(params, i)`` gives the gradient at iteration ``i``; ``callback(params, i, g)``."""
    opt = adam(step_size, b1, b2, eps)
    state = opt.init(x0)
    x = x0
    for i in range(num_iters):
        g = grad_fn(x, i)
        if callback is not None:
            callback(x, i, g)
        updates, state = opt.update(g, state, x)
        x = apply_updates(x, updates)
    return x
