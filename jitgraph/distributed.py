"""Data parallelism on MPI (mpi4py): ranks, collectives over pytrees, gradient buckets, sharding.

Launch one process per rank with ``mpiexec -n N python train.py``; every rank runs the same
script on its shard of each global batch. A single process started without ``mpiexec`` is a
world of size 1 (MPI's singleton init), so the same script runs unchanged on one process.

Collectives do not go leaf by leaf: leaves are packed into a few contiguous buckets of about
``bucket_bytes`` each (one dtype per bucket, last leaves first, as PyTorch DDP orders them,
because backward produces the last layer's gradients first) and each bucket is reduced in place
(``MPI.IN_PLACE``) with one ``Allreduce``. ``jitgraph.train_step(..., distributed=True)`` has
its compiled program write the gradients straight into such buckets (see ``data_parallel``).

``init()`` (called by every function here) installs an exception hook: a rank that raises
prints which rank failed and why, then calls ``MPI.COMM_WORLD.Abort(1)``, so the other ranks
exit instead of waiting forever in a collective. A rank killed by a signal is handled by
``mpiexec``, which then ends the others.

Needs ``pip install 'jitgraph[distributed]'`` (mpi4py and the MPICH wheel); without mpi4py,
every function raises ``DistributedUnavailableError`` saying so.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from . import numpy as jnp
from . import serialization
from .tree import tree_flatten, tree_unflatten

__all__ = ["DistributedUnavailableError", "init", "rank", "world_size", "is_main", "barrier",
           "broadcast", "allreduce", "allreduce_buffers", "iallreduce_buffers", "shard",
           "global_batches", "shard_batches", "save", "load", "BucketPlan", "plan_buckets",
           "pack", "unpack", "DEFAULT_BUCKET_BYTES"]

ABORT_GRACE_S = 1.0               # seconds a failing rank waits before MPI_Abort (see init)
DEFAULT_BUCKET_BYTES = 4 << 20      # 4 MiB: large enough for bandwidth, small enough to pipeline
INSTALL_HINT = ("pip install 'jitgraph[distributed]' (or: pip install mpi4py mpich), then "
                "launch with mpiexec -n N python your_script.py")


class DistributedUnavailableError(ImportError):
    """mpi4py (or an MPI library for it) is not installed."""


_MPI: Any = None
_INITIALIZED = False


def _mpi():
    global _MPI
    if _MPI is None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise DistributedUnavailableError(
                f"jitgraph.distributed needs mpi4py and an MPI library ({e}): {INSTALL_HINT}"
            ) from None
        _MPI = MPI
    return _MPI


def init(abort_on_error: bool = True) -> None:
    """Initialize MPI (every function here calls it; only the first call counts). With
    ``abort_on_error`` and more than one rank, an uncaught exception on any rank aborts all
    ranks with a message naming the failed rank, instead of leaving the others blocked in a
    collective."""
    global _INITIALIZED
    MPI = _mpi()
    if _INITIALIZED:
        return
    _INITIALIZED = True
    if abort_on_error and MPI.COMM_WORLD.Get_size() > 1:
        previous = sys.excepthook

        def abort_all(exc_type, exc, tb):
            comm = MPI.COMM_WORLD
            sys.stderr.write(
                f"jitgraph.distributed: rank {comm.Get_rank()} of {comm.Get_size()} failed with "
                f"{exc_type.__name__}: {exc}\n  aborting all ranks (MPI_Abort); the traceback "
                "follows\n")
            previous(exc_type, exc, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            # MPI_Abort makes the launcher kill every rank at once; output still in its
            # forwarding pipes is then lost (seen with MPICH's hydra on a loaded machine),
            # so give it a moment to carry the message above to the user first.
            time.sleep(ABORT_GRACE_S)
            comm.Abort(1)

        sys.excepthook = abort_all


def _comm():
    if not _INITIALIZED:
        init()
    return _MPI.COMM_WORLD


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1."""
    return _comm().Get_rank()


def world_size() -> int:
    """The number of ranks (1 for a process started without mpiexec)."""
    return _comm().Get_size()


def is_main() -> bool:
    """True on rank 0: the rank that logs and writes checkpoints."""
    return rank() == 0


def barrier() -> None:
    """Wait until every rank gets here."""
    _comm().Barrier()


# ------------------------------------------------------------------ buckets
@dataclass(frozen=True)
class Bucket:
    """One contiguous buffer: ``entries`` are (leaf index, offset, shape) of the leaves in it."""
    dtype: np.dtype
    size: int
    entries: tuple[tuple[int, int, tuple[int, ...]], ...]


@dataclass(frozen=True)
class BucketPlan:
    """Where every leaf of a list of arrays lives in a few flat buffers (hashable)."""
    buckets: tuple[Bucket, ...]
    num_leaves: int

    def empty(self) -> list[np.ndarray]:
        return [np.empty(b.size, b.dtype) for b in self.buckets]

    def leaf(self, buffers: Sequence[np.ndarray], i: int) -> np.ndarray:
        """A copy of leaf ``i`` out of the buffers."""
        for buf, b in zip(buffers, self.buckets):
            for j, off, shape in b.entries:
                if j == i:
                    return buf[off:off + _size(shape)].reshape(shape).copy()
        raise IndexError(f"BucketPlan.leaf: no leaf {i} (the plan has {self.num_leaves})")


def plan_buckets(leaves: Sequence[Any], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> BucketPlan:
    """Assign ``leaves`` (arrays, or anything with ``.shape`` and ``.dtype``) to buckets of one
    dtype each, last leaf first. A bucket is closed when the next leaf would take it past
    ``bucket_bytes``; a leaf larger than that gets a bucket of its own (and the small leaves
    around it keep filling the open one, so a bias does not end up alone)."""
    if bucket_bytes <= 0:
        raise ValueError(f"plan_buckets: bucket_bytes must be positive, got {bucket_bytes}")
    open_: dict[np.dtype, list] = {}         # dtype -> [entries, size]
    done: list[Bucket] = []
    for i in reversed(range(len(leaves))):
        shape = tuple(int(d) for d in leaves[i].shape)
        dtype = np.dtype(leaves[i].dtype)
        n = int(np.prod(shape, dtype=np.int64))
        if n * dtype.itemsize > bucket_bytes:            # alone, leaving the open bucket open
            done.append(Bucket(dtype, n, ((i, 0, shape),)))
            continue
        cur = open_.setdefault(dtype, [[], 0])
        if cur[0] and (cur[1] + n) * dtype.itemsize > bucket_bytes:
            done.append(Bucket(dtype, cur[1], tuple(cur[0])))
            cur[0], cur[1] = [], 0
        cur[0].append((i, cur[1], shape))
        cur[1] += n
    done += [Bucket(dt, size, tuple(ent)) for dt, (ent, size) in open_.items() if ent]
    return BucketPlan(tuple(done), len(leaves))


def pack(leaves: Sequence[Any], plan: BucketPlan, out: list[np.ndarray] | None = None,
         scale: float | None = None) -> list[np.ndarray]:
    """Copy ``leaves`` into the plan's buffers (new ones unless ``out`` is given), each
    multiplied by ``scale`` if given. NumPy arrays in, NumPy arrays out."""
    bufs = plan.empty() if out is None else out
    for buf, b in zip(bufs, plan.buckets):
        _pack_bucket(buf, b, leaves, scale)
    return bufs


def _pack_bucket(buf: np.ndarray, b: Bucket, leaves: Sequence[Any], scale=None) -> np.ndarray:
    for i, off, shape in b.entries:
        dst = buf[off:off + _size(shape)].reshape(shape)
        if scale is None:
            np.copyto(dst, leaves[i], casting="same_kind")
        else:
            np.multiply(leaves[i], scale, out=dst, casting="same_kind")
    return buf


def unpack(buffers: Sequence[np.ndarray], plan: BucketPlan, copy: bool = False) -> list:
    """The leaves back from the buffers: views into them (copies with ``copy=True``)."""
    leaves: list = [None] * plan.num_leaves
    for buf, b in zip(buffers, plan.buckets):
        for i, off, shape in b.entries:
            v = buf[off:off + _size(shape)].reshape(shape)
            leaves[i] = v.copy() if copy else v
    return leaves


def pack_traced(leaves: Sequence[Any], plan: BucketPlan, scale: float | None = None) -> list:
    """``pack`` written with ``jitgraph.numpy``: inside ``jit`` the compiled program's outputs
    are the flat buffers themselves."""
    out = []
    for b in plan.buckets:
        parts = [jnp.ravel(leaves[i]) for i, _, _ in b.entries]
        flat = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        out.append(flat if scale is None else flat * scale)
    return out


def unpack_traced(buffers: Sequence[Any], plan: BucketPlan) -> list:
    """``unpack`` written with ``jitgraph.numpy`` (static slices and reshapes)."""
    leaves: list = [None] * plan.num_leaves
    for buf, b in zip(buffers, plan.buckets):
        for i, off, shape in b.entries:
            leaves[i] = jnp.reshape(buf[off:off + _size(shape)], shape)
    return leaves


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ------------------------------------------------------------------ collectives
_OPS = ("sum", "mean")


def _check_op(op: str, fn: str) -> None:
    if op not in _OPS:
        raise ValueError(f"{fn}: op must be 'mean' or 'sum', got {op!r}")


def allreduce_buffers(buffers: Sequence[np.ndarray], op: str = "sum") -> Sequence[np.ndarray]:
    """Reduce contiguous 1-D buffers in place across all ranks, one ``Allreduce`` each."""
    _check_op(op, "allreduce_buffers")
    comm = _comm()
    n = comm.Get_size()
    if n > 1:
        for buf in buffers:
            comm.Allreduce(_MPI.IN_PLACE, buf, op=_MPI.SUM)
    if op == "mean" and n > 1:
        for buf in buffers:
            buf *= buf.dtype.type(1.0 / n)
    return buffers


class PendingReduce:
    """Non-blocking bucket reductions in flight; ``wait()`` completes them."""

    def __init__(self, buffers, requests, scale):
        self.buffers, self._requests, self._scale = buffers, requests, scale

    def wait(self) -> Sequence[np.ndarray]:
        if self._requests:
            _MPI.Request.Waitall(self._requests)
            self._requests = []
            if self._scale is not None:
                for buf in self.buffers:
                    buf *= buf.dtype.type(self._scale)
                self._scale = None
        return self.buffers


def iallreduce_buffers(buffers: Sequence[np.ndarray], op: str = "sum") -> PendingReduce:
    """Start an in-place ``Iallreduce`` of each buffer and return at once; call ``.wait()``
    before reading them. Transfers progress while this rank does other work only where the MPI
    library has a progress engine that runs meanwhile (see bench/README.md)."""
    _check_op(op, "iallreduce_buffers")
    comm = _comm()
    n = comm.Get_size()
    if n == 1:
        return PendingReduce(buffers, [], None)
    reqs = [comm.Iallreduce(_MPI.IN_PLACE, buf, op=_MPI.SUM) for buf in buffers]
    return PendingReduce(buffers, reqs, 1.0 / n if op == "mean" else None)


def _leaves_of(tree, fn: str) -> tuple[list[np.ndarray], Any]:
    leaves, treedef = tree_flatten(tree)
    arrays = [np.asarray(x) for x in leaves]
    for k, a in enumerate(arrays):
        if a.dtype == object or a.dtype.kind not in "biuf":
            raise TypeError(f"{fn}: leaf {k} is not a numeric array ({type(leaves[k]).__name__})")
    return arrays, treedef


def allreduce(tree: Any, op: str = "mean", *, inplace: bool = False,
              bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Any:
    """The elementwise sum or mean of ``tree`` over all ranks (every rank gets it), reduced in
    a few bucketed ``Allreduce`` calls. By default a new tree whose leaves are views into the
    reduced buckets (one packing copy); with ``inplace=True`` the reduction is written into
    ``tree``'s own arrays (as ``torch.distributed.all_reduce``) and a leaf that fills a bucket
    by itself is reduced where it lies, without any copy."""
    _check_op(op, "allreduce")
    arrays, treedef = _leaves_of(tree, "allreduce")
    if op == "mean":
        for k, a in enumerate(arrays):
            if a.dtype.kind != "f":
                raise TypeError(f"allreduce: op='mean' needs float leaves; leaf {k} is {a.dtype} "
                                "(use op='sum' for integers)")
    plan = plan_buckets(arrays, bucket_bytes)
    if not inplace:
        buffers = allreduce_buffers(pack(arrays, plan), op)
        return tree_unflatten(treedef, unpack(buffers, plan))
    leaves = tree_flatten(tree)[0]
    for k, (x, a) in enumerate(zip(leaves, arrays)):
        if a is not x or not a.flags.writeable:
            raise TypeError(f"allreduce(inplace=True): leaf {k} is not a writable NumPy array "
                            f"({type(x).__name__})")
    buffers = [arrays[b.entries[0][0]].reshape(-1)          # a leaf alone: reduced where it is
               if len(b.entries) == 1 and arrays[b.entries[0][0]].flags.c_contiguous
               else _pack_bucket(np.empty(b.size, b.dtype), b, arrays) for b in plan.buckets]
    allreduce_buffers(buffers, op)
    for buf, b in zip(buffers, plan.buckets):
        for i, off, shape in b.entries:
            src = buf[off:off + _size(shape)].reshape(shape)
            if not np.shares_memory(src, arrays[i]):
                np.copyto(arrays[i], src)
    return tree


def broadcast(tree: Any, root: int = 0, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Any:
    """``root``'s ``tree`` on every rank (e.g. identical initial parameters), as new arrays.
    Every rank passes a tree of the same structure, shapes and dtypes (checked)."""
    comm = _comm()
    arrays, treedef = _leaves_of(tree, "broadcast")
    if comm.Get_size() == 1:
        return tree_unflatten(treedef, [a.copy() for a in arrays])
    mine = (repr(treedef), [(a.shape, a.dtype.str) for a in arrays])
    theirs = comm.bcast(mine, root=root)
    if theirs != mine:
        raise ValueError(f"broadcast: rank {comm.Get_rank()}'s tree differs from root {root}'s: "
                         f"{_first_difference(mine, theirs)}")
    plan = plan_buckets(arrays, bucket_bytes)
    buffers = pack(arrays, plan) if comm.Get_rank() == root else plan.empty()
    for buf in buffers:
        comm.Bcast(buf, root=root)
    return tree_unflatten(treedef, unpack(buffers, plan, copy=True))


def _first_difference(mine, theirs) -> str:
    if mine[0] != theirs[0]:
        return f"structure {mine[0][:200]} here, {theirs[0][:200]} on the root"
    if len(mine[1]) != len(theirs[1]):
        return f"{len(mine[1])} leaves here, {len(theirs[1])} on the root"
    for k, (a, b) in enumerate(zip(mine[1], theirs[1])):
        if a != b:
            return f"leaf {k} is {a[1]}{list(a[0])} here, {b[1]}{list(b[0])} on the root"
    return "?"


# ------------------------------------------------------------------ sharding
def shard(batch: Any, *, rank: int | None = None, world_size: int | None = None) -> Any:
    """This rank's slice of a global batch: every leaf's leading axis (the global batch, the
    same on every rank) is split into ``world_size`` equal contiguous parts. The global batch
    size must be divisible by the number of ranks, so that the mean of the ranks' mean
    gradients is the gradient of the global batch."""
    r = _comm().Get_rank() if rank is None else rank
    n = _comm().Get_size() if world_size is None else world_size
    leaves, treedef = tree_flatten(batch)
    out = []
    for k, x in enumerate(leaves):
        x = x if hasattr(x, "shape") else np.asarray(x)
        if len(x.shape) == 0:
            raise ValueError(f"shard: leaf {k} is a scalar; every leaf needs a leading batch axis")
        b = x.shape[0]
        if b % n:
            raise ValueError(f"shard: the global batch of {b} rows (leaf {k}, shape "
                             f"{tuple(x.shape)}) does not split evenly over {n} ranks; use a "
                             f"global batch size divisible by {n}")
        m = b // n
        out.append(x[r * m:(r + 1) * m])
    return tree_unflatten(treedef, out)


def global_batches(num_examples: int, global_batch_size: int, *, seed: int = 0, epoch: int = 0,
                   shuffle: bool = True, drop_last: bool = True) -> Iterator[np.ndarray]:
    """The index arrays of an epoch's global batches; the same on every rank (the permutation
    comes from ``(seed, epoch)``, as DistributedSampler's ``set_epoch``)."""
    if global_batch_size <= 0:
        raise ValueError(f"global_batches: global_batch_size must be positive, got "
                         f"{global_batch_size}")
    order = (np.random.default_rng([seed, epoch]).permutation(num_examples) if shuffle
             else np.arange(num_examples))
    stop = (num_examples // global_batch_size) * global_batch_size if drop_last else num_examples
    for start in range(0, stop, global_batch_size):
        yield order[start:start + global_batch_size]


def shard_batches(num_examples: int, global_batch_size: int, *, seed: int = 0, epoch: int = 0,
                  shuffle: bool = True, rank: int | None = None,
                  world_size: int | None = None) -> Iterator[np.ndarray]:
    """This rank's indices of each global batch of ``global_batches`` (full batches only):
    ``X[idx], y[idx]`` is the rank's shard. Together the ranks cover each global batch exactly
    once."""
    for idx in global_batches(num_examples, global_batch_size, seed=seed, epoch=epoch,
                              shuffle=shuffle, drop_last=True):
        yield shard(idx, rank=rank, world_size=world_size)


# ------------------------------------------------------------------ checkpoints
def save(path, tree: Any) -> None:
    """``jitgraph.save`` on rank 0 only, then a barrier, so every rank may load it afterwards."""
    if is_main():
        serialization.save(path, tree)
    barrier()


def load(path, like: Any = None) -> Any:
    """``jitgraph.load`` on every rank (after a ``save`` here, the file is complete)."""
    init()
    return serialization.load(path, like=like)
