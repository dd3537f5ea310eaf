"""Helpers the example scripts share: a progress bar (tqdm when installed, else plain text)
and a loss/accuracy plot (matplotlib when installed, else skipped with a note)."""
from __future__ import annotations

import sys
from typing import Iterable, Sequence


def progress(iterable: Iterable, total: int | None = None, desc: str = "", enabled: bool = True):
    """``tqdm(iterable)`` if tqdm is installed and ``enabled``; otherwise the iterable itself
    (the scripts print one summary line per epoch either way)."""
    if not enabled:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr)


def plot_history(path: str, series: dict[str, Sequence[float]], title: str) -> str:
    """Write one line plot per series (x: epoch) to ``path``; returns a line to print."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(matplotlib is not installed: pip install matplotlib to get a plot)"
    fig, axes = plt.subplots(1, len(series), figsize=(4.5 * len(series), 3.5))
    axes = axes if len(series) > 1 else [axes]
    for ax, (name, values) in zip(axes, series.items()):
        ax.plot(range(1, len(values) + 1), values, marker="o")
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot written to {path}"
