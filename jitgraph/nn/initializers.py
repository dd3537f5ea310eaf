"""Weight initializers: ``init(key, shape, dtype) -> array``, as ``jax.nn.initializers``.

Fan-in and fan-out follow the layers' weight layouts: a dense weight is ``(in, out)``, a
convolution kernel ``(kh, kw, in, out)`` (receptive field times channels).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .. import random as jr


def _fans(shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) < 2:
        n = int(shape[0]) if shape else 1
        return n, n
    field = math.prod(shape[:-2])
    return int(shape[-2]) * field, int(shape[-1]) * field


def zeros(key, shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def ones(key, shape, dtype=np.float32):
    return np.ones(shape, dtype)


def normal(stddev: float = 1e-2) -> Callable:
    def init(key, shape, dtype=np.float32):
        return jr.normal(key, shape, dtype) * np.asarray(stddev, dtype)
    return init


def uniform(scale: float = 1e-2) -> Callable:
    def init(key, shape, dtype=np.float32):
        return jr.uniform(key, shape, dtype, 0.0, scale)
    return init


def variance_scaling(scale: float, mode: str, distribution: str) -> Callable:
    """Samples with variance ``scale / n`` (n: fan_in, fan_out or their mean)."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be fan_in, fan_out or fan_avg, got {mode!r}")
    if distribution not in ("uniform", "normal"):
        raise ValueError(f"variance_scaling: distribution must be uniform or normal, got "
                         f"{distribution!r}")

    def init(key, shape, dtype=np.float32):
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        var = scale / max(n, 1)
        if distribution == "uniform":
            lim = math.sqrt(3.0 * var)
            return jr.uniform(key, shape, dtype, -lim, lim)
        return jr.normal(key, shape, dtype) * np.asarray(math.sqrt(var), dtype)
    return init


glorot_uniform = xavier_uniform = variance_scaling(1.0, "fan_avg", "uniform")
glorot_normal = xavier_normal = variance_scaling(1.0, "fan_avg", "normal")
he_uniform = kaiming_uniform = variance_scaling(2.0, "fan_in", "uniform")
he_normal = kaiming_normal = variance_scaling(2.0, "fan_in", "normal")
lecun_normal = variance_scaling(1.0, "fan_in", "normal")
lecun_uniform = variance_scaling(1.0, "fan_in", "uniform")
