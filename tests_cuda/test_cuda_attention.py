"""Fused attention in CUDA programs: the rewrite's ``attention`` / ``attention_bwd`` steps run
the shared-memory tile kernels of ``kernels/cuda_attention.py`` (on Numba's CUDA simulator
here), with the CPU reference's values and gradients, and no host round trip."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
from jitgraph.compiler.fusion import HostStep
from jitgraph.cuda_driver import counting

RNG = np.random.default_rng(1)
T = 40                      # two 32-row tiles, the second ragged
Q, K, V = (RNG.standard_normal((1, 2, T, 4)).astype(np.float32) for _ in range(3))
CAUSAL = np.tril(np.ones((T, T), bool))
PAD = np.ones((1, 1, 1, T), bool)
PAD[..., 33:] = False


def _loss(mask):
    return lambda q, k, v: jnp.sum(jnp.sin(nn.dot_product_attention(q, k, v, mask)))


@pytest.mark.parametrize("mask", [CAUSAL, PAD], ids=["causal", "padded"])
def test_fused_attention_gradient_on_the_device(mask):
    step = jitgraph.value_and_grad(_loss(mask), argnums=(0, 1, 2))
    ref = step(Q, K, V)
    f = jitgraph.jit(step, device="cuda")
    plan = f.lower(Q, K, V).stages["plan"]
    fused = [s for s in plan.steps if isinstance(s, HostStep)]
    assert sorted(s.node.prim.name for s in fused) == ["attention", "attention_bwd"]
    args = jitgraph.device_put((Q, K, V))
    f(*args)
    with counting() as c:
        val, grads = f(*args)
    assert c.d2h == 0 and c.h2d == 0          # the fused steps never leave the device
    np.testing.assert_allclose(float(np.asarray(val)), ref[0], rtol=2e-5)
    for g, r in zip(grads, ref[1]):
        np.testing.assert_allclose(np.asarray(g), r, rtol=2e-4, atol=2e-5)


def test_forward_only_in_float64():
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    out = jitgraph.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, CAUSAL),
                       device="cuda")(q, k, v)
    np.testing.assert_allclose(np.asarray(out), nn.dot_product_attention(q, k, v, CAUSAL),
                               rtol=1e-12)


def test_kernels_are_clean_sm90_code():
    """The float32 attention kernels compile to PTX for sm_90 and assemble with ptxas: no
    register spills, and no float64 instruction (``ptx_check``'s rules; run in
    a subprocess without the simulator; skipped without libNVVM or ptxas)."""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys; sys.path.insert(0, %r); import ptx_check as p; "
            "print(json.dumps(p.attention_kernels(dtypes=('float32',)) if p.ptxas_path() "
            "else 'no ptxas'))" % here)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    missing = ("nvvm", "nvrtc", "dynamiclibnotfounderror")   # a CUDA toolkit library absent
    if r.returncode != 0 and any(m in r.stderr.lower() for m in missing):
        pytest.skip("libNVVM or NVRTC is not installed (pip install 'numba-cuda[cu13]')")
    assert r.returncode == 0, r.stderr[-2000:]
    records = json.loads(r.stdout.strip().splitlines()[-1])
    if records == "no ptxas":
        pytest.skip("ptxas is not installed (pip install nvidia-cuda-nvcc)")
    assert len(records) == 4         # (float32; ptx_check.py also checks float64's)
    assert all(k["spill_stores"] == 0 and k["spill_loads"] == 0 for k in records), records
    assert all(k["f64_count"] == 0 for k in records if k["single_precision"]), records
