"""jitgraph.distributed: bucket packing, sharding, world size 1, and real 2-rank runs under
mpiexec (the digits step against the single-process result, a failing and a killed rank)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import jitgraph
import jitgraph.distributed as dist

try:
    import mpi4py  # noqa: F401
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
CHILD = os.path.join(TESTS, "distributed_child.py")
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed "
                                  "(pip install -e '.[distributed]')")
needs_mpiexec = pytest.mark.skipif(not HAVE_MPI4PY or shutil.which("mpiexec") is None,
                                   reason="mpi4py or mpiexec is not installed "
                                   "(pip install -e '.[distributed]')")


def leaves_of(shapes, dtypes=None, seed=0):
    rng = np.random.default_rng(seed)
    dtypes = dtypes or [np.float32] * len(shapes)
    return [(rng.standard_normal(s) * 100).astype(d) for s, d in zip(shapes, dtypes)]


# ------------------------------------------------------------------ buckets
def test_bucket_boundaries_last_leaf_first():
    # 4-byte floats, 40-byte buckets: leaves of 6, 4, 3, 12 and 2 elements, taken from the end
    leaves = leaves_of([(2, 3), (4,), (3,), (3, 4), (2,)])
    plan = dist.plan_buckets(leaves, bucket_bytes=40)
    got = [[(i, off) for i, off, _ in b.entries] for b in plan.buckets]
    # leaf 4 (8 B) opens a bucket; leaf 3 (48 B > 40 B) gets its own and leaves it open;
    # leaves 2 and 1 join it (9 elements, 36 B); leaf 0 would make 60 B: close, leaf 0 alone
    assert got == [[(3, 0)], [(4, 0), (2, 2), (1, 5)], [(0, 0)]]
    assert [b.size for b in plan.buckets] == [12, 9, 6]


def test_buckets_separate_dtypes_and_default_size():
    leaves = leaves_of([(5,), (3,), (2, 2), ()], [np.float32, np.float64, np.float32, np.float64])
    plan = dist.plan_buckets(leaves)
    assert {(b.dtype, b.size) for b in plan.buckets} == {(np.dtype(np.float32), 9),
                                                         (np.dtype(np.float64), 4)}
    big = leaves_of([(1024, 1024)] * 3)        # 4 MiB each: one bucket per leaf at the default
    assert len(dist.plan_buckets(big).buckets) == 3
    assert len(dist.plan_buckets(big, bucket_bytes=12 << 20).buckets) == 1


@pytest.mark.parametrize("bucket_bytes", [4, 24, 1000, 1 << 22])
def test_pack_unpack_round_trip_is_exact(bucket_bytes):
    shapes = [(3, 4), (), (0,), (7,), (2, 1, 3), (1,)]
    dtypes = [np.float32, np.float64, np.float32, np.float32, np.float64, np.int64]
    leaves = leaves_of(shapes, dtypes, seed=1)
    plan = dist.plan_buckets(leaves, bucket_bytes)
    bufs = dist.pack(leaves, plan)
    assert all(b.ndim == 1 and b.flags.c_contiguous for b in bufs)
    assert sum(b.size for b in bufs) == sum(x.size for x in leaves)
    for a, b in zip(dist.unpack(bufs, plan), leaves):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    scaled = dist.unpack(dist.pack(leaves[:2], dist.plan_buckets(leaves[:2]), scale=0.5),
                         dist.plan_buckets(leaves[:2]))
    assert np.array_equal(scaled[0], leaves[0] * np.float32(0.5))


def test_traced_packing_matches_numpy_packing():
    """Inside jit the program's outputs are the buckets; the update unpacks them again."""
    leaves = leaves_of([(3, 4), (4,), (4, 2), (2,)], seed=2)
    plan = dist.plan_buckets(leaves, bucket_bytes=40)
    packed = jitgraph.jit(lambda ls: dist.pack_traced(ls, plan, 0.5))(leaves)
    want = dist.pack(leaves, plan, scale=0.5)
    assert len(packed) == len(want) >= 2
    for a, b in zip(packed, want):
        assert a.dtype == np.float32 and np.array_equal(a, b)
    back = jitgraph.jit(lambda bs: [x * 2.0 for x in dist.unpack_traced(bs, plan)])(packed)
    for a, b in zip(back, leaves):
        assert np.array_equal(a, b)


# ------------------------------------------------------------------ sharding
def test_shards_partition_every_global_batch_and_are_deterministic():
    n, gb, world = 103, 12, 3
    epoch0 = list(dist.global_batches(n, gb, seed=7))
    assert len(epoch0) == n // gb and all(len(b) == gb for b in epoch0)
    assert [list(b) for b in epoch0] == [list(b) for b in dist.global_batches(n, gb, seed=7)]
    assert [list(b) for b in epoch0] != [list(b) for b in dist.global_batches(n, gb, seed=7,
                                                                               epoch=1)]
    assert len(set(np.concatenate(epoch0))) == len(epoch0) * gb          # no repeats in an epoch
    per_rank = [list(dist.shard_batches(n, gb, seed=7, rank=r, world_size=world))
                for r in range(world)]
    for i, batch in enumerate(epoch0):
        parts = [per_rank[r][i] for r in range(world)]
        assert all(len(p) == gb // world for p in parts)
        assert np.array_equal(np.concatenate(parts), batch)               # union, in order
        assert len(set(np.concatenate(parts))) == gb                      # disjoint
    assert [list(b) for b in dist.global_batches(5, 2, shuffle=False, drop_last=False)] == \
        [[0, 1], [2, 3], [4]]


def test_shard_slices_trees_and_rejects_uneven_batches():
    x, y = np.arange(24.0).reshape(12, 2), np.arange(12)
    sx, sy = dist.shard((x, y), rank=2, world_size=4)
    assert np.array_equal(sx, x[6:9]) and np.array_equal(sy, [6, 7, 8])
    with pytest.raises(ValueError, match="10 rows .* does not split evenly over 4 ranks"):
        dist.shard(np.zeros((10, 3)), rank=0, world_size=4)
    with pytest.raises(ValueError, match="scalar"):
        dist.shard(np.float32(1.0), rank=0, world_size=2)


# ------------------------------------------------------------------ one process
@needs_mpi4py
def test_world_size_one_without_mpiexec():
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    dist.barrier()
    tree = {"a": np.arange(6.0).reshape(2, 3), "b": [np.float32(2.5)]}
    mean = dist.allreduce(tree)
    assert np.array_equal(mean["a"], tree["a"]) and mean["b"][0] == np.float32(2.5)
    assert mean["a"].dtype == np.float64 and mean["b"][0].dtype == np.float32
    total = dist.allreduce({"n": np.arange(3)}, op="sum")
    assert np.array_equal(total["n"], [0, 1, 2])
    arrays = {"a": tree["a"], "b": [np.ones(3, np.float32)]}
    assert dist.allreduce(arrays, inplace=True) is arrays
    assert np.array_equal(arrays["a"], np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match="leaf 1 is not a writable NumPy array"):
        dist.allreduce(tree, inplace=True)
    copy = dist.broadcast(tree)
    assert np.array_equal(copy["a"], tree["a"]) and copy["a"] is not tree["a"]
    with pytest.raises(ValueError, match="op must be 'mean' or 'sum'"):
        dist.allreduce(tree, op="max")
    with pytest.raises(TypeError, match="needs float leaves"):
        dist.allreduce({"n": np.arange(3)})


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The digits as an .npz for the mpiexec ranks, and the child module."""
    sys.path.insert(0, TESTS)
    import distributed_child as child
    path = str(tmp_path_factory.mktemp("digits") / "digits.npz")
    child.save_digits(path)
    return path, child


@pytest.fixture(scope="module")
def single_process_run(digits):
    """The plain single-process train_step on the same global batches."""
    path, child = digits
    return child.train(path, distributed=False)


@needs_mpi4py
def test_distributed_step_on_one_process_equals_plain_step(tmp_path, digits):
    # half the 2-rank test's global batch: the ranks there reuse this compiled program
    path, child = digits
    half = child.GLOBAL_BATCH // 2
    ref_params, ref_state, ref_losses = child.train(path, False, half)
    params, state, losses = child.train(path, True, half)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for a, b in zip(jitgraph.tree_leaves((params, state)), jitgraph.tree_leaves((ref_params,
                                                                                 ref_state))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    path = tmp_path / "ckpt.npz"
    dist.save(path, params)
    back = dist.load(path, like=params)
    assert all(np.array_equal(a, b) for a, b in zip(jitgraph.tree_leaves(back),
                                                    jitgraph.tree_leaves(params)))


def test_clear_error_without_mpi4py():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import jitgraph, jitgraph.distributed as d\n"
            "try:\n    d.world_size()\nexcept ImportError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_child_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "ERR jitgraph.distributed needs mpi4py" in out.stdout
    assert "pip install 'jitgraph[distributed]'" in out.stdout


# ------------------------------------------------------------------ two ranks under mpiexec
def _child_env() -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
                   [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return env


def _mpiexec(args, timeout, cache_dir=None):
    env = _child_env()
    if cache_dir:
        env["JITGRAPH_CACHE_DIR"] = cache_dir      # the session's: ranks reuse compiled kernels
    t0 = time.monotonic()
    try:
        out = subprocess.run(["mpiexec", "-n", "2", sys.executable, CHILD, *args], env=env,
                             capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpiexec -n 2 {' '.join(args)} did not finish in {timeout}s (hung?): "
                    f"{(e.stderr or b'')[-2000:]!r}")
    return out, time.monotonic() - t0


@needs_mpiexec
def test_two_ranks_match_one_process_on_digits(tmp_path, jit_cache_dir, digits,
                                              single_process_run):
    ref_params, _, ref_losses = single_process_run
    path = str(tmp_path / "dp.npz")
    out, _ = _mpiexec(["digits", digits[0], path], timeout=300, cache_dir=jit_cache_dir)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "ok 2 ranks" in out.stdout
    params, losses = jitgraph.load(path, like=(ref_params, ref_losses))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for a, b in zip(jitgraph.tree_leaves(params), jitgraph.tree_leaves(ref_params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_mpiexec
@pytest.mark.parametrize("mode", ["fail", "kill"])
def test_a_failing_rank_ends_the_run(mode):
    out, seconds = _mpiexec([mode, "1"], timeout=120)
    if not (out.stdout + out.stderr):
        # the launcher dropped every rank's output (it kills them all at once); once more
        out, seconds = _mpiexec([mode, "1"], timeout=120)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    if mode == "fail":
        assert "rank 1 of 2 failed with RuntimeError: deliberate failure on rank 1" in text
        assert "aborting all ranks" in text
    else:
        assert "signal 9" in text or "Killed" in text
    assert seconds < 60


def test_ring_allreduce_model_worked_example():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from scaling_model import ring_allreduce_s
    # 8 ranks, 1 GB over 1 GB/s, 10 us per message, 2 buckets: 2*7/8 s + 2*7*10us*2
    assert ring_allreduce_s(1e9, 8, 1e9, 1e-5, buckets=2) == pytest.approx(1.75 + 2.8e-4)
    assert ring_allreduce_s(1e9, 1, 1e9, 1e-5) == 0.0
