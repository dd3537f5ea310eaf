"""``jit(f).lower(*args).memory_analysis()``: a program's memory from its memory plan, checked
exactly on small programs (the plan fixes every buffer, so the figures are deterministic)."""
import numpy as np

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.memory import MemoryStats

F64 = 8


def test_chain_of_products_reuses_two_scratch_slots():
    """x@w1 -> tanh -> @w2 -> tanh -> @w2: four (4, 5) intermediates in two slots; while a
    step runs, its input and its output are live, besides the arguments."""
    f = jitgraph.jit(lambda x, w1, w2: jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w2)
    x, w1, w2 = np.ones((4, 3)), np.ones((3, 5)), np.ones((5, 5))
    m = f.lower(x, w1, w2).memory_analysis()
    args, tile = (12 + 15 + 25) * F64, 20 * F64
    assert m == MemoryStats(
        argument_size_in_bytes=args, output_size_in_bytes=tile, alias_size_in_bytes=0,
        temp_size_in_bytes=2 * tile, constant_size_in_bytes=0,
        peak_memory_in_bytes=args + 2 * tile,
        steps=(("k0_matmul", args + tile), ("k1_loop", args + 2 * tile),
               ("k2_matmul", args + 2 * tile), ("k3_loop", args + 2 * tile),
               ("k4_matmul", args + 2 * tile)),
        largest_temp_in_bytes=tile)


def test_donated_update_takes_no_new_memory():
    f = jitgraph.jit(lambda w, g: w - 0.1 * g, donate_argnums=0)
    m = f.lower(np.ones(6), np.ones(6)).memory_analysis()
    assert (m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes) == \
        (96, 48, 48)
    assert (m.temp_size_in_bytes, m.peak_memory_in_bytes) == (0, 96)
    undonated = jitgraph.jit(lambda w, g: w - 0.1 * g).lower(np.ones(6), np.ones(6))
    assert undonated.memory().peak_memory_in_bytes == 96 + 48      # memory() is the same


def test_constants_and_a_dead_intermediate():
    c = np.arange(8.0)
    f = jitgraph.jit(lambda x: jnp.sum(jnp.exp(x @ np.ones((3, 8))) * c, axis=1))
    lo = f.lower(np.ones((2, 3)))
    m = lo.compile().memory_analysis()          # JAX's spelling works too
    assert m.constant_size_in_bytes == sum(
        int(np.prod(v.aval.shape)) * F64 for v in lo.plan.const_args) > 0
    assert m.argument_size_in_bytes == 6 * F64 and m.output_size_in_bytes == 2 * F64
    assert m.peak_memory_in_bytes == max(b for _, b in m.steps)
    assert "peak live" in str(m) and "B" in str(m)


def test_profile_reports_planned_peak():
    f = jitgraph.jit(lambda x: jnp.tanh(x) * 2.0)
    x = np.ones(16)
    r = jitgraph.profile(f, x, reps=2, peaks=False)
    assert r.memory == f.lower(x).memory_analysis()
    assert r.memory.peak_memory_in_bytes == 2 * 16 * F64
    assert "memory (planned): " in str(r) and r.to_dict()["memory"]["peak_memory_in_bytes"] == 256
