"""``tf.summary`` of TensorFlow 1: scalar and histogram summaries, written by ``FileWriter`` as
TensorBoard event files through ``tensorboardX``, else ``tensorboard``'s event writer; with
neither installed they are no-ops and say so once (``pip install tensorboardX``).

A summary node computes its tensor's value; fetching it (or ``merge_all()``) with
``Session.run`` gives a ``Summary`` holding (tag, kind, value) entries, which
``FileWriter.add_summary`` writes at a step.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np

from .graph import Tensor, get_default_graph
from .namespace import Namespace


class Summary:
    """What ``Session.run`` returns for summary ops: a list of (tag, kind, value)."""

    def __init__(self, values: list[tuple[str, str, np.ndarray]]):
        self.values = values

    def __repr__(self) -> str:
        return f"Summary({[(t, k) for t, k, _ in self.values]})"


class _SummaryOp(Tensor):
    """A scalar or histogram summary of ``tensor`` under ``tag`` (with the name scope)."""

    def __init__(self, kind: str, tag: str, tensor):
        super().__init__([tensor], lambda v: v, "ScalarSummary" if kind == "scalar"
                         else "HistogramSummary", tag)
        self.tag = self.op_name
        self.kind = kind
        self.fetch_parts = [self]
        self.graph.summaries.append(self)

    def fetch_result(self, vals):
        return Summary([(self.tag, self.kind, vals[0])])


class _Merged(Tensor):
    def __init__(self, parts: list, name: str | None = None):
        super().__init__([], None, "MergeSummary", name or "Merge/MergeSummary", (), None)
        self.fetch_parts = [p for s in parts for p in s.fetch_parts]

    def fetch_result(self, vals):
        return Summary([(p.tag, p.kind, v) for p, v in zip(self.fetch_parts, vals)])


def scalar(name: str, tensor, collections=None, family=None) -> Tensor:
    return _SummaryOp("scalar", name, tensor)


def histogram(name: str, values, collections=None, family=None) -> Tensor:
    return _SummaryOp("histogram", name, values)


def merge(inputs, collections=None, name: str | None = None) -> Tensor:
    return _Merged(list(inputs), name)


def merge_all(key=None, scope=None, name: str | None = None) -> Tensor | None:
    """All the graph's summaries as one op; None when there are none (as TensorFlow)."""
    parts = list(get_default_graph().summaries)
    return _Merged(parts, name) if parts else None


_NOTICE = {"given": False}


def _backend(logdir: str):
    """(kind, writer): tensorboardX's SummaryWriter, tensorboard's EventFileWriter, or None."""
    try:
        from tensorboardX import SummaryWriter
        return "tensorboardX", SummaryWriter(logdir)
    except ImportError:
        pass
    try:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        return "tensorboard", EventFileWriter(logdir)
    except ImportError:
        pass
    if not _NOTICE["given"]:
        _NOTICE["given"] = True
        warnings.warn("tf.summary.FileWriter: neither tensorboardX nor tensorboard is "
                      "installed, so summaries are not written (pip install tensorboardX, or "
                      "pip install 'jitgraph[tensorboard]')", stacklevel=3)
    return None, None


class FileWriter:
    """Writes summaries as TensorBoard event files in ``logdir`` (a no-op without a writer
    library; the first FileWriter made then warns once)."""

    def __init__(self, logdir: str, graph=None, **unused):
        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir
        self.kind, self._writer = _backend(logdir)

    def add_summary(self, summary: Summary, global_step: int | None = None) -> None:
        if not isinstance(summary, Summary):
            raise TypeError(f"add_summary expects what Session.run returns for a summary op, "
                            f"got {type(summary).__name__}")
        step = None if global_step is None else int(global_step)
        for tag, kind, value in summary.values:
            if self.kind == "tensorboardX":
                if kind == "scalar":
                    self._writer.add_scalar(tag, float(value), step)
                else:
                    self._writer.add_histogram(tag, np.asarray(value), step)
            elif self.kind == "tensorboard":
                self._writer.add_event(_event(tag, kind, np.asarray(value), step))

    def add_graph(self, graph: Any, global_step: int | None = None) -> None:
        """Graphs are not written (TensorBoard's graph view needs a GraphDef)."""

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self.kind = None


def _event(tag: str, kind: str, value: np.ndarray, step: int | None):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary as Pb
    if kind == "scalar":
        v = Pb.Value(tag=tag, simple_value=float(value))
    else:
        x = value.astype(np.float64).ravel()
        counts, edges = np.histogram(x, bins=30)
        v = Pb.Value(tag=tag, histo=HistogramProto(
            min=float(x.min()), max=float(x.max()), num=float(x.size), sum=float(x.sum()),
            sum_squares=float((x * x).sum()), bucket_limit=edges[1:].tolist(),
            bucket=counts.astype(np.float64).tolist()))
    return Event(wall_time=time.time(), step=step or 0, summary=Pb(value=[v]))


summary = Namespace("tf.summary", dict(
    scalar=scalar, histogram=histogram, merge=merge, merge_all=merge_all,
    FileWriter=FileWriter, Summary=Summary,
), not_served={
    "image": "image summaries are not served (scalars and histograms are)",
    "audio": "audio summaries are not served (scalars and histograms are)",
    "text": "text summaries are not served (scalars and histograms are)",
    "tensor_summary": "not served (scalars and histograms are)",
})
