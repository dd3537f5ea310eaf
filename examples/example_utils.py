"""Helpers the example scripts share: a progress bar on a terminal (tqdm when installed, else
the scripts' plain lines), a loss/accuracy plot written by default (matplotlib when installed,
else a line saying how to get it) and where the compiled code is cached.

``pip install -e '.[examples]'`` brings tqdm and matplotlib. Where the output is not a
terminal (CI, a pipe, a file), there is no bar either way: only one plain line per epoch.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Iterable, Sequence

INSTALL_HINT = "pip install -e '.[examples]'"


def on_terminal(stream=None) -> bool:
    """Whether *stream* (default: stderr, where the bar goes) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # closed or not a file
        return False


def progress(iterable: Iterable, total: int | None = None, desc: str = "", enabled: bool = True):
    """``tqdm(iterable)`` on a terminal where tqdm is installed; otherwise the iterable itself
    (the scripts print one summary line per epoch either way)."""
    if not enabled or not on_terminal():
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    # redrawn every 50 ms: an epoch of the digits example takes 0.2 s
    return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr,
                dynamic_ncols=True, mininterval=0.05, miniters=1)


def add_plot_argument(ap: argparse.ArgumentParser, default: str) -> None:
    """``--plot PATH`` (written by default to *default* in the current directory) and ``--no-plot``."""
    ap.add_argument("--plot", default=default, metavar="PATH",
                    help=f"where to write the loss/accuracy plot (default {default}; needs "
                         f"matplotlib: {INSTALL_HINT})")
    ap.add_argument("--no-plot", dest="plot", action="store_const", const=None,
                    help="write no plot")


def plot_history(path: str, series: dict[str, Sequence[float]], title: str,
                 xlabel: str = "epoch", xs: Sequence[int] | None = None) -> str:
    """Write one line plot per series (x: *xlabel*, at *xs* or 1, 2, ...; y: the series'
    name) to ``path`` as a PNG; returns the line to print (where it went, or how to get it
    without matplotlib)."""
    path = os.path.abspath(path)
    try:
        import matplotlib
        matplotlib.use("Agg")                # files only: no display needed
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return f"no plot written: matplotlib is not installed ({INSTALL_HINT} to get {path})"
    fig, axes = plt.subplots(1, len(series), figsize=(4.5 * len(series), 3.5), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items()):
        ax.plot(xs if xs is not None else range(1, len(values) + 1), values,
                marker="o" if len(values) <= 50 else None)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # epochs and steps are whole
        ax.set_ylabel(name)
        ax.set_title(name)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return f"plot written to {path}"


def cache_line() -> str:
    """Where this process's compiled code is cached, and how big that cache is."""
    import jitgraph.environment as env
    try:
        c = env.cache_info(exact=False)       # the recorded size: no scan of a large cache
    except OSError as e:
        return f"compiled code cache: {e}"
    return (f"compiled code is cached in {c['directory']} ({env.format_size(c['bytes'])} of "
            f"{env.format_size(c['limit'])}; python -m jitgraph cache info|prune|clear)")


def finish(plot: str | None, series: dict[str, Sequence[float]], title: str,
           xlabel: str = "epoch", xs: Sequence[int] | None = None) -> None:
    """The lines every training example ends with: the plot (unless ``--no-plot``), the
    cache's directory, and on a terminal without tqdm, how to get progress bars."""
    if plot:
        print(plot_history(plot, series, title, xlabel, xs))
    print(cache_line())
    if on_terminal():
        try:
            import tqdm  # noqa: F401
        except ImportError:
            print(f"(progress bars: {INSTALL_HINT} installs tqdm)")
