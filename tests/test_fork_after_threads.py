"""A process forked after its parallel kernels ran (a data loader's workers forked from a
training process) runs jitgraph programs, old and new, with the right numbers.

GNU OpenMP, Numba's threading layer where TBB is not installed, terminates a forked child at
its first parallel loop once the parent's threads ran; jitgraph compiles a forked child's
programs without threads instead (``numba_patches.serial_kernels``). Run in a fresh process,
so that this test's own earlier compiles do not decide which layer runs.
"""
import json
import subprocess
import sys

# both scripts' fork: ``work()`` runs in a child forked then, its JSON result comes back by a pipe
FORK = r'''
import json, os, traceback


def in_forked_child(work):
    """(the child's exit status, what ``work()`` returned there, or None where it failed)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.write(w, json.dumps(work()).encode())
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    _, status = os.waitpid(pid, 0)
    return status, json.loads(data or b"null")
'''

SCRIPT = FORK + r'''
import numpy as np
import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler import numba_patches, threaded

rng = np.random.default_rng(0)
a = rng.standard_normal((512, 256)).astype(np.float32)
b = rng.standard_normal((256, 512)).astype(np.float32) * 0.1
old = jitgraph.jit(lambda a, b: jnp.tanh(a @ b) * 2.0)
assert "par_gemm(" in old.lower(a, b).source     # products and loops on Numba's threads
first = np.asarray(old(a, b))


def child():
    new = jitgraph.jit(lambda a, b: jnp.sin(a @ b) + jnp.sum(a))
    return {"old": float(np.abs(np.asarray(old(a, b)) - np.tanh(a @ b) * 2.0).max()),
            "new": float(np.abs(np.asarray(new(a, b)) - (np.sin(a @ b) + a.sum())).max()),
            "serial": numba_patches.serial_kernels(),
            "prange": threaded.is_threaded(new.lower(a, b).source)}


status, out = in_forked_child(child)
layer = numba_patches.threading_layer()     # (the program may have run without Numba)
print(json.dumps({"status": status, "child": out,
                  "layer": layer.__name__.rsplit(".", 1)[-1],
                  "parent": float(np.abs(first - np.tanh(a @ b) * 2.0).max())}))
'''


def test_forked_child_runs_programs_after_parallel_kernels():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["status"] == 0 and res["child"] is not None, (res, proc.stderr[-3000:])
    assert res["parent"] < 1e-4
    assert res["child"]["old"] < 1e-4 and res["child"]["new"] < 1e-3, res
    if res["layer"] == "omppool":   # TBB is fork-safe: the child keeps its threads there
        assert res["child"]["serial"] and not res["child"]["prange"], res


def test_machine_busy_reads_runnable_threads(monkeypatch):
    """OpenMP's short spin is chosen where other threads are runnable (``procs_running`` above
    one in most reads of /proc/stat), and not where the file cannot be read."""
    import io
    from jitgraph.compiler import numba_patches

    def fake(running):
        def opener(path, mode="r"):
            assert path == "/proc/stat"
            return io.BytesIO(b"cpu  1 2 3\nprocs_running %d\nprocs_blocked 0\n" % running)
        return opener
    monkeypatch.setattr(numba_patches, "open", fake(3), raising=False)
    assert numba_patches.machine_busy()
    monkeypatch.setattr(numba_patches, "open", fake(1), raising=False)
    assert not numba_patches.machine_busy()

    def broken(path, mode="r"):
        raise OSError("no /proc here")
    monkeypatch.setattr(numba_patches, "open", broken, raising=False)
    assert not numba_patches.machine_busy()


ATTENTION_SCRIPT = FORK + r'''
import numpy as np
import jitgraph as jg
import jitgraph.numpy as jnp
from jitgraph import nn

t = 200
mask = np.tril(np.ones((t, t), bool))
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 3, t, 16)).astype(np.float32) for _ in range(3))
loss = lambda q, k, v: jnp.sum(jnp.tanh(nn.dot_product_attention(q, k, v, mask)))
with jg.attention.always_fused():
    step = jg.jit(jg.value_and_grad(loss, argnums=(0, 1, 2)))
    assert "attention_bwd" in str(step.lower(q, k, v).stages["lowered"])
    first = [np.asarray(x) for x in jg.tree_leaves(step(q, k, v))]  # row kernels on the pool
ref = [np.asarray(x) for x in jg.tree_leaves(jg.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v))]


def err(got):
    return max(float(np.abs(np.asarray(a) - b).max() / (np.abs(b).max() + 1e-30))
               for a, b in zip(got, ref))


def child():
    with jg.attention.always_fused():
        again = jg.tree_leaves(step(q, k, v))               # the parent's program
        new = jg.jit(jg.grad(lambda q, k, v: loss(q, k, v) * 2.0, argnums=(0, 1, 2)))
        twice = jg.tree_leaves(new(q, k, v))                # a program compiled in the child
    return {"again": err(again), "new": max(
        float(np.abs(np.asarray(a) - 2 * b).max() / (np.abs(b).max() + 1e-30))
        for a, b in zip(twice, ref[1:]))}


status, out = in_forked_child(child)
print(json.dumps({"status": status, "child": out, "parent": err(first)}))
'''


def test_forked_child_runs_fused_attention_after_the_parent_ran_it():
    """Fused attention's row kernels run on Numba's threads in the parent; a child forked
    after that runs the parent's program and a new one (the row pool is the parent's, so the
    child's calls take the threads' fallback) with the reference numbers, and does not hang."""
    proc = subprocess.run([sys.executable, "-c", ATTENTION_SCRIPT], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["status"] == 0 and res["child"] is not None, (res, proc.stderr[-3000:])
    assert res["parent"] < 1e-5, res
    assert res["child"]["again"] < 1e-5 and res["child"]["new"] < 1e-5, res
