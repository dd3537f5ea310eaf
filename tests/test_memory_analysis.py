"""``jit(f).lower(*args).memory_analysis()``: a program's memory from its memory plan, checked
exactly on small programs (the plan fixes every buffer, so the figures are deterministic)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.memory import MemoryStats, arena_layout

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


# ------------------------------------------------------------------ one allocation for scratch
def _disjoint_in_memory(arena, specs, occupancy):
    """Every two slots that hold values at one same step have disjoint bytes."""
    spans = {n: occupancy.get(n, []) for n, _, _ in specs}
    ends = {n: arena.offsets[n] + size * np.dtype(dt).itemsize for n, size, dt in specs}
    for a, _, _ in specs:
        for b, _, _ in specs:
            if a < b and any(s0 <= e1 and s1 <= e0 for s0, e0 in spans[a] for s1, e1 in spans[b]):
                assert ends[a] <= arena.offsets[b] or ends[b] <= arena.offsets[a], (a, b)


def test_arena_shares_bytes_between_slots_never_live_together():
    specs = [("s0", 1000, np.float64), ("s1", 3000, np.float32), ("s2", 10, np.int64),
             ("s3", 1000, np.float64)]
    occupancy = {"s0": [(0, 2)], "s1": [(3, 5)], "s2": [(1, 4)], "s3": [(2, 3), (6, 6)]}
    arena = arena_layout(specs, occupancy)
    _disjoint_in_memory(arena, specs, occupancy)
    # s0 (steps 0-2) and s1 (3-5) share bytes: the allocation is less than the sum of slots
    assert arena.nbytes < sum(n * np.dtype(d).itemsize for _, n, d in specs)
    assert arena.offsets["s1"] == arena.offsets["s0"] == 0
    assert all(arena.offsets[n] % 64 == 0 for n in ("s0", "s1", "s3"))
    views = arena.views(specs)
    assert [(v.size, v.dtype) for v in views] == [(n, np.dtype(d)) for _, n, d in specs]
    assert all(v.ctypes.data % 16 == 0 for v in views)
    assert np.shares_memory(views[0], views[1]) and not np.shares_memory(views[0], views[2])


def test_arena_needs_sizes_known_ahead():
    assert arena_layout([("s0", "n0 * 4", np.float32)], {"s0": [(0, 1)]}) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 12), st.integers(0, 6),
                          st.sampled_from([np.float32, np.float64, np.int8])),
                min_size=1, max_size=12))
def test_arena_never_overlaps_slots_live_at_one_step(slots):
    specs = [(f"s{i}", n, d) for i, (n, _, _, d) in enumerate(slots)]
    occupancy = {f"s{i}": [(a, a + w)] for i, (_, a, w, _) in enumerate(slots)}
    arena = arena_layout(specs, occupancy)
    _disjoint_in_memory(arena, specs, occupancy)
    assert arena.nbytes <= sum(-(-n * np.dtype(d).itemsize // 16) * 16 + 64
                               for _, n, d in specs)


def test_program_packs_scratch_and_computes_the_same():
    """The (64, 48) intermediates of the first layer are dead before the (64, 100) ones of the
    second are written: the program's one scratch allocation holds both in the same bytes,
    and the result is the interpreter's."""
    def f(x, w1, w2, w3, w4):
        a = jnp.tanh(x @ w1)            # (64, 48)
        b = a @ w2                      # (64, 8): a is dead after this product
        c = jnp.tanh(b @ w3)            # (64, 100)
        return jnp.sum(c @ w4)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) / 4 for s in ((64, 5), (5, 48), (48, 8), (8, 100), (100, 3))]
    m = jitgraph.jit(f).lower(*args).memory_analysis()
    assert 0 < m.temp_allocated_in_bytes < m.temp_size_in_bytes
    assert "scratch" in str(m) and "(in " in str(m)
    np.testing.assert_allclose(jitgraph.jit(f)(*args), f(*args), rtol=1e-12)
    g = jitgraph.jit(jitgraph.grad(f, argnums=(1, 2, 3)))
    ref = jitgraph.grad(f, argnums=(1, 2, 3))(*args)
    for _ in range(2):                  # the second call reuses the pooled scratch
        for got, want in zip(g(*args), ref):
            np.testing.assert_allclose(got, want, rtol=1e-10)
