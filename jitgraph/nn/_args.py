"""Argument checks shared by the functional convolution and pooling and their layers."""
from __future__ import annotations

import numpy as np


def pair(v, name: str) -> tuple[int, int]:
    """``v`` (an int, or a pair of ints) as a pair of ints; ``name`` names it in the error."""
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v}")
    return v


def check_layout(layout: str, fn: str) -> None:
    """Refuse a ``layout`` other than 'NHWC' and 'NCHW' (``fn`` names the caller)."""
    if layout not in ("NHWC", "NCHW"):
        raise ValueError(f"{fn}: layout must be 'NHWC' or 'NCHW', got {layout!r}")
