"""Helpers the example scripts share, so that every example shows what it is doing:

- ``compiling(what)`` / ``compile_on_first_call(fn, what)``: print ``compiling <what> ...``
  before a jitted function's first call (jitgraph compiles on the first call) and
  ``compiled in X.XX s`` after it (``(from the disk cache)`` where the disk cache had it);
- ``Progress``: on a terminal, a progress bar (tqdm where installed, else one redrawn line)
  with the loss, the throughput (steps/s, or tokens/s, examples/s) and the ETA; where the output
  is not a terminal (CI, a pipe, a file), plain lines instead, at most one every few seconds,
  with the step, loss, throughput and ETA; a summary line at the end either way;
- ``add_output_arguments`` / ``finish``: ``--out DIR`` (default ``outputs/`` in the current
  directory, created when a picture is written) and ``--no-plot``; the loss/accuracy plot
  (matplotlib where installed, else a line saying how to get it), the compile counters and
  where the compiled code is cached.

``pip install -e '.[examples]'`` brings tqdm and matplotlib; both are optional.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from collections import deque
from typing import Callable, Sequence

INSTALL_HINT = "pip install -e '.[examples]'"
DEFAULT_OUT = "outputs"
LINE_SECONDS = 5.0          # plain progress lines (not a terminal): at most one per this long
RATE_WINDOW = 10.0          # the throughput and ETA shown while running: over the last 10 s
REDRAW_SECONDS = 0.1        # the self-drawn bar: redrawn at most this often

_compile_seconds = 0.0      # wall time spent in compiling(): left out of the throughput
_active: "Progress | None" = None     # the bar on the screen now, if any (say() goes round it)


def on_terminal(stream=None) -> bool:
    """Whether *stream* (default: stderr, where the bar goes) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # closed or not a file
        return False


def have_tqdm() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def say(line: str = "") -> None:
    """Print *line* to stdout, around the progress bar if one is drawn."""
    if _active is not None:
        _active.write(line)
    else:
        print(line, flush=True)


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_rate(per_second: float, unit: str) -> str:
    if per_second >= 100:
        return f"{per_second:,.0f} {unit}/s"
    return f"{per_second:.3g} {unit}/s"


# ------------------------------------------------------------------ compiles
def _counters() -> tuple[int, int]:
    import jitgraph
    info = jitgraph.cache_info()
    return info["misses"], info["disk_hits"]


@contextlib.contextmanager
def compiling(what: str):
    """Around the first call of a jitted function: ``compiling <what> ...`` before it,
    ``compiled in X.XX s`` after (the call's wall time: tracing, compiling or loading from the
    disk cache, and the one run)."""
    global _compile_seconds
    say(f"compiling {what} ...")
    misses0, disk0 = _counters()
    t0 = time.perf_counter()
    yield
    dt = time.perf_counter() - t0
    _compile_seconds += dt
    misses, disk = _counters()
    if disk > disk0:                  # (a program loaded from the disk cache counts in both)
        note = " (from the disk cache)"
    elif misses == misses0 and disk == disk0:
        note = " (already compiled in this process)"
    else:
        note = ""
    say(f"  compiled in {dt:.2f} s{note}")


class compile_on_first_call:
    """*fn* (a jitted function or ``train_step``), its first call inside ``compiling(what)``;
    later calls go straight to *fn*. Other attributes (``.optimizer``, ``.lower``) are *fn*'s."""

    def __init__(self, fn: Callable, what: str):
        self._fn, self._what, self._first = fn, what, True

    def __call__(self, *args, **kwargs):
        if not self._first:
            return self._fn(*args, **kwargs)
        with compiling(self._what):
            out = self._fn(*args, **kwargs)
        self._first = False
        return out

    def __getattr__(self, name):
        return getattr(self._fn, name)


def compile_summary() -> str:
    """How many programs this process compiled (or loaded from the disk cache), and how long."""
    import jitgraph
    i = jitgraph.cache_info()
    if i["misses"] == 0 and i["disk_hits"] == 0:
        return "nothing compiled: every call ran eagerly"
    return (f"compiled {i['misses']} program{'s' * (i['misses'] != 1)} "
            f"({i['disk_hits']} from the disk cache) in {i['compile_seconds']:.2f} s, "
            f"traced in {i['trace_seconds']:.2f} s")


# ------------------------------------------------------------------ progress
class Progress:
    """Progress of a loop of *total* steps: call ``update(n, loss=...)`` after each step (and
    ``write(line)`` for lines of your own while it runs), ``close()`` at the end (or use it as a
    context manager). *per_step* and *item* turn steps into items for the throughput (e.g. a
    batch of 16 x 128 tokens: ``per_step=2048, item="tokens"``); the time spent in
    ``compiling`` is left out of the throughput and the ETA.

    *mode*: ``"tqdm"`` / ``"bar"`` (self-drawn) on a terminal, ``"lines"`` elsewhere, ``"off"``
    (``enabled=False``: no output at all); by default picked from ``sys.stderr``."""

    def __init__(self, total: int, desc: str = "training", unit: str = "step",
                 per_step: float = 1, item: str | None = None, enabled: bool = True,
                 mode: str | None = None, line_seconds: float = LINE_SECONDS):
        if mode is None:
            mode = ("off" if not enabled else
                    "lines" if not on_terminal() else "tqdm" if have_tqdm() else "bar")
        self.total, self.desc, self.unit, self.mode = total, desc, unit, mode
        self.units = unit + ("es" if unit.endswith(("ch", "s", "x")) else "s")
        self.per_step, self.item = per_step, item
        self.line_seconds = line_seconds
        self.n = 0
        self.recent: deque = deque(maxlen=20)        # the losses the bar and the lines average
        self.last_loss: float | None = None
        self.t0 = self.last_line = self.last_draw = time.perf_counter()
        self.compile0 = _compile_seconds
        self.window: deque = deque([(0.0, 0)])    # (busy seconds, steps): the recent rate
        self.closed = False
        self._width = 0
        self._bar = None
        if mode == "tqdm":
            from tqdm import tqdm
            tqdm.monitor_interval = 0   # no monitor thread: jitgraph's compile workers need none
            self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                             dynamic_ncols=True, mininterval=REDRAW_SECONDS, smoothing=0.1)
        global _active
        if mode in ("tqdm", "bar"):
            _active = self
        if mode == "bar":
            self._draw()

    # --- numbers
    def busy_seconds(self) -> float:
        """Seconds since the start, less those spent compiling meanwhile."""
        compiled = _compile_seconds - self.compile0
        return max(time.perf_counter() - self.t0 - compiled, 1e-9)

    def steps_per_second(self, recent: bool = True) -> float:
        """Over the last ``RATE_WINDOW`` seconds (*recent*; the first steps after a compile
        are often slower), else since the start."""
        busy = self.busy_seconds()
        if recent and self.n > self.window[0][1] and busy - self.window[0][0] > 1e-6:
            b0, n0 = self.window[0]
            return (self.n - n0) / (busy - b0)
        return self.n / busy

    def rate(self, recent: bool = True) -> str:
        per_s = self.steps_per_second(recent)
        if self.item:
            return format_rate(per_s * self.per_step, self.item)
        return format_rate(per_s, self.units)

    def eta(self) -> str:
        if self.n == 0:
            return "?"
        return format_duration((self.total - self.n) / max(self.steps_per_second(), 1e-9))

    def loss(self) -> str:
        if not self.recent:
            return ""
        return f"loss {sum(self.recent) / len(self.recent):.4f}"

    def _status(self, recent: bool = True) -> str:
        return ", ".join(s for s in (self.loss(), self.rate(recent) if self.n else "") if s)

    # --- events
    def update(self, n: int = 1, loss: float | None = None) -> None:
        self.n += n
        if loss is not None:
            self.recent.append(float(loss))
            self.last_loss = float(loss)
        busy = self.busy_seconds()
        self.window.append((busy, self.n))
        while len(self.window) > 2 and busy - self.window[1][0] >= RATE_WINDOW:
            self.window.popleft()
        now = time.perf_counter()
        if self.mode == "tqdm":
            self._bar.set_postfix_str(self._status(), refresh=False)
            self._bar.update(n)
        elif self.mode == "bar":
            if now - self.last_draw >= REDRAW_SECONDS or self.n >= self.total:
                self._draw()
        elif self.mode == "lines" and self.n < self.total \
                and now - self.last_line >= self.line_seconds:
            self._line(f"{self.desc}: {self.unit} {self.n}/{self.total} "
                       f"({100 * self.n / self.total:.0f}%), {self._status()}, ETA {self.eta()}")

    def write(self, line: str) -> None:
        """Print *line* (stdout) without breaking the bar."""
        if self.mode == "tqdm":
            self._bar.write(line, file=sys.stdout)
            sys.stdout.flush()
        elif self.mode == "bar":
            self._clear()
            print(line, flush=True)
            self._draw()
        elif self.mode == "lines":
            self._line(line)

    def close(self) -> None:
        """Take the bar off the screen and print the summary line."""
        global _active
        if self.closed:
            return
        self.closed = True
        if _active is self:
            _active = None
        if self.mode == "tqdm":
            self._bar.close()
        elif self.mode == "bar":
            self._clear()
        if self.mode != "off":
            compiled = _compile_seconds - self.compile0
            note = f", plus {compiled:.1f} s compiling" if compiled >= 0.05 else ""
            status = self._status(recent=False)
            busy = self.busy_seconds()
            self._line(f"{self.desc}: {self.n} {self.units} in {busy:.{2 if busy < 10 else 1}f} s"
                       f"{note}" + (f"; {status}" if status else ""))

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- output
    def _line(self, line: str) -> None:
        print(line, flush=True)
        self.last_line = time.perf_counter()

    def _draw(self) -> None:
        self.last_draw = time.perf_counter()
        frac = min(self.n / self.total, 1.0) if self.total else 1.0
        cells = 20
        done = int(frac * cells)
        text = (f"{self.desc} {100 * frac:3.0f}% [{'#' * done}{'.' * (cells - done)}] "
                f"{self.n}/{self.total} {self._status()}"
                + (f", ETA {self.eta()}" if self.n else ""))
        width = shutil.get_terminal_size((80, 24)).columns - 1
        text = text[:width]
        sys.stderr.write("\r" + text + " " * max(self._width - len(text), 0))
        sys.stderr.flush()
        self._width = len(text)

    def _clear(self) -> None:
        sys.stderr.write("\r" + " " * self._width + "\r")
        sys.stderr.flush()
        self._width = 0


# ------------------------------------------------------------------ pictures and the end
def add_output_arguments(ap: argparse.ArgumentParser) -> None:
    """``--out DIR`` (where pictures go; default ``outputs/``) and ``--no-plot``."""
    ap.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                    help=f"folder for the pictures this example writes (default {DEFAULT_OUT}/ "
                         f"in the current directory; created if missing)")
    ap.add_argument("--no-plot", dest="plot", action="store_false",
                    help=f"write no plot (plots need matplotlib: {INSTALL_HINT})")


def output_path(out_dir: str, name: str) -> str:
    """``out_dir/name``, creating *out_dir* if missing."""
    os.makedirs(out_dir, exist_ok=True)
    return os.path.join(out_dir, name)


def plot_history(path: str, series: dict[str, Sequence[float]], title: str,
                 xlabel: str = "epoch", xs: Sequence[int] | None = None) -> str:
    """Write one line plot per series (x: *xlabel*, at *xs* or 1, 2, ...; y: the series'
    name) to ``path`` as a PNG (its folder created if missing); returns the line to print
    (where it went, or how to get it without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")                # files only: no display needed
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return f"no plot written: matplotlib is not installed ({INSTALL_HINT} to get {path})"
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
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


def finish(args: argparse.Namespace, name: str, series: dict[str, Sequence[float]],
           title: str, xlabel: str = "epoch", xs: Sequence[int] | None = None,
           started: float | None = None) -> None:
    """The lines every training example ends with: the plot ``<--out>/<name>.png`` (unless
    ``--no-plot``), what was compiled, the total time (from *started*, a ``perf_counter``),
    the cache's directory, and on a terminal without tqdm, how to get tqdm's bars."""
    if getattr(args, "plot", False):
        print(plot_history(os.path.join(args.out, name + ".png"), series, title, xlabel, xs))
    print(compile_summary())
    if started is not None:
        print(total_time(started))
    print(cache_line())
    if on_terminal() and not have_tqdm():
        print(f"(tqdm's progress bars: {INSTALL_HINT})")


def done(started: float) -> None:
    """The last lines of the short examples: what was compiled, and the total time."""
    print(compile_summary())
    print(total_time(started))


def total_time(started: float) -> str:
    t = time.perf_counter() - started
    return f"total time {t:.{2 if t < 10 else 1}f} s"
