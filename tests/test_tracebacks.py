"""Errors as users see them: tracebacks cut to the user's frames (plus the one jitgraph frame
that re-raised), exact argument locations, a compile log in dtype[shape] terms, lax's dtype
rule, and donation that never writes the caller's NumPy arrays."""
from __future__ import annotations

import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import lax
from jitgraph.traceback_filter import NOTE, is_internal

HERE = os.path.abspath(__file__)


def _frames(err: BaseException) -> list[traceback.FrameSummary]:
    return traceback.extract_tb(err.__traceback__)


def _split(err):
    frames = _frames(err)
    return ([f for f in frames if is_internal(f.filename)],
            [f for f in frames if not is_internal(f.filename)])


def _model(w, x):
    h = jnp.dot(x, w)
    return jnp.sum(h + jnp.ones((5,)))           # (2, 4) + (5,): a shape error


CALLS = {
    "jit": lambda: jitgraph.jit(_model)(np.ones((3, 4)), np.ones((2, 3))),
    "jit of grad": lambda: jitgraph.jit(jitgraph.grad(_model))(np.ones((3, 4)), np.ones((2, 3))),
    "grad": lambda: jitgraph.grad(_model)(np.ones((3, 4)), np.ones((2, 3))),
    "value_and_grad": lambda: jitgraph.value_and_grad(_model)(np.ones((3, 4)), np.ones((2, 3))),
    "vmap": lambda: jitgraph.vmap(_model)(np.ones((2, 3, 4)), np.ones((2, 2, 3))),
    "make_graph": lambda: jitgraph.make_graph(_model)(np.ones((3, 4)), np.ones((2, 3))),
    "jacrev": lambda: jitgraph.jacrev(_model)(np.ones((3, 4)), np.ones((2, 3))),
    "eager jnp": lambda: jnp.add(np.ones(3), np.ones(4)),
    "lower": lambda: jitgraph.jit(_model).lower(np.ones((3, 4)), np.ones((2, 3))),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_shape_error_shows_the_users_frames_and_one_of_jitgraphs(name):
    with pytest.raises(jitgraph.ShapeError) as info:
        CALLS[name]()
    internal, user = _split(info.value)
    assert len(internal) <= 1, [f"{f.filename}:{f.lineno} {f.name}" for f in internal]
    assert all(f.filename == HERE for f in user), user
    names = [f.name for f in user]
    assert names[0] == f"test_a_shape_error_shows_the_users_frames_and_one_of_jitgraphs"
    if name != "eager jnp":
        assert "_model" in names                       # the user's line that failed
        assert "jnp.sum(h + jnp.ones((5,)))" in [f.line for f in user if f.name == "_model"][0]
    # the message is whole: op, shapes, the user's line and a fix
    msg = str(info.value)
    assert "(2, 4) and (5,)" in msg or "(3,) and (4,)" in msg
    assert "test_tracebacks.py" in msg
    if sys.version_info >= (3, 11):
        assert info.value.__notes__ == [NOTE]          # says how to see everything, once


def test_filtering_off_keeps_every_frame():
    with jitgraph.config.traceback_filtering("off"):
        with pytest.raises(jitgraph.ShapeError) as info:
            CALLS["jit"]()
    internal, _ = _split(info.value)
    assert len(internal) > 5                            # tracing, compiling, jnp's own frames
    assert not getattr(info.value, "__notes__", None)
    with pytest.raises(ValueError, match="traceback_filtering must be one of"):
        jitgraph.config.update("traceback_filtering", "sometimes")
    jitgraph.config.update("jax_traceback_filtering", "off")          # JAX's name works too
    try:
        assert jitgraph.config.read("traceback_filtering") == "off"
    finally:
        jitgraph.config.update("traceback_filtering", "auto")
    assert jitgraph.config.read("traceback_filtering") == "remove_frames"


def test_environment_variable_and_printed_traceback(tmp_path):
    """What a user's terminal shows: the script's frames, one jitgraph line, the message."""
    script = tmp_path / "user_script.py"
    script.write_text(
        "import numpy as np, jitgraph, jitgraph.numpy as jnp\n"
        "def model(w, x):\n"
        "    return jnp.sum(jnp.dot(x, w) + jnp.ones((5,)))\n"
        "jitgraph.jit(model)(np.ones((3, 4)), np.ones((2, 3)))\n")
    env = dict(os.environ)
    env.pop("JITGRAPH_TRACEBACK_FILTERING", None)
    short = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, timeout=300)
    env["JITGRAPH_TRACEBACK_FILTERING"] = "off"
    full = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    for r in (short, full):
        assert r.returncode == 1 and "ShapeError" in r.stderr, r.stderr
    frames = [line for line in short.stderr.splitlines() if line.startswith('  File "')]
    assert len(frames) == 3, short.stderr               # the call, jit's boundary, model
    assert sum("user_script.py" in f for f in frames) == 2
    n_full = sum(line.startswith('  File "') for line in full.stderr.splitlines())
    assert n_full > 8, full.stderr
    assert "JITGRAPH_TRACEBACK_FILTERING=off" in short.stderr


def test_errors_that_are_not_jitgraphs_keep_their_type_and_message():
    def f(x):
        raise KeyError("mine")
    with pytest.raises(KeyError, match="mine") as info:
        jitgraph.jit(f)(np.ones(2))
    internal, user = _split(info.value)
    assert len(internal) <= 1 and user[-1].name == "f"


# ---------------------------------------------------------------------------- locations
def test_argument_locations_name_index_parameter_and_path():
    f = jitgraph.jit(lambda w, x: jnp.sum(w * x))
    with pytest.raises(TypeError, match=r"argument 1 \('x'\)"):
        f(np.ones(3), np.zeros(3, "datetime64[s]"))
    g = jitgraph.jit(lambda params, x: params["scale"] * x)
    with pytest.raises(TypeError, match=r"argument 0 at params\['scale'\]: a string"):
        g({"scale": "a", "bias": np.ones(2)}, np.ones(2))
    with pytest.raises(TypeError, match=r"argument 0 at params\['scale'\]"):
        jitgraph.grad(lambda params, x: jnp.sum(params["scale"] * x))({"scale": "a"}, np.ones(2))
    with pytest.raises(TypeError, match=r"argument 0 at p\['w'\]\[1\] has dtype int64"):
        jitgraph.grad(lambda p: jnp.sum(p["w"][0]) + jnp.sum(p["w"][1]))(
            {"w": [np.ones(2), np.ones(2, np.int64)]})
    h = jitgraph.jit(lambda x, *, lr: x * lr)
    with pytest.raises(TypeError, match=r"keyword argument 'lr'"):
        h(np.ones(2), lr="fast")
    k = jitgraph.jit(lambda x, n, opts: x * opts["a"], static_argnums=1)
    with pytest.raises(TypeError, match=r"argument 2 at opts\['a'\]"):   # index past a static one
        k(np.ones(2), 3, {"a": "s"})


def test_compile_log_names_arguments_in_dtype_shape_terms(monkeypatch, capfd):
    monkeypatch.setenv("JITGRAPH_LOG", "compiles")
    f = jitgraph.jit(lambda x, params: jnp.sum(x) + params["w"].sum())
    f(np.ones((4, 3)), {"w": np.ones(2)})
    f(np.ones((5, 3)), {"w": np.ones(2, np.float32)})
    g = jitgraph.jit(lambda x, n: x * n, static_argnums=1)
    g(np.ones(2), 2)
    g(np.ones(2), 3)
    lines = [l for l in capfd.readouterr().err.splitlines() if l.startswith("jitgraph: compiled")]
    assert lines[1].endswith(": x: f64[4,3] -> f64[5,3]; params['w']: f64[2] -> f32[2]"), lines
    assert lines[3].endswith(": n: 2 -> 3 (static)"), lines


# ---------------------------------------------------------------------------- lax dtypes
def test_lax_requires_one_dtype_where_jnp_promotes():
    a32, i32 = np.ones(3, np.float32), np.ones(3, np.int32)
    with pytest.raises(TypeError, match=r"lax\.add: requires arguments to have the same dtypes, "
                                        r"got float32, int32.*jnp\.add"):
        lax.add(a32, i32)
    for op in (lax.sub, lax.mul, lax.max, lax.min, lax.lt, lax.div, lax.rem, lax.atan2):
        with pytest.raises(TypeError, match="same dtypes"):
            op(a32, np.ones(3))
    with pytest.raises(TypeError, match="same dtypes"):
        jitgraph.jit(lambda x, y: lax.add(x, y))(a32, i32)
    assert jnp.add(a32, i32).dtype == np.float64          # jnp promotes
    out = lax.add(a32, 2)                                  # Python scalars are weakly typed
    assert out.dtype == np.float32 and np.all(out == 3)
    assert lax.clamp(np.float32(0), a32, np.float32(2)).dtype == np.float32
    np.testing.assert_array_equal(lax.max(np.array([-1.0, 2.0]), 0.0), [0.0, 2.0])


# ---------------------------------------------------------------------------- donation
def test_donation_never_writes_the_callers_numpy_arrays():
    step = jitgraph.jit(lambda w, g: w - 0.5 * g, donate_argnums=0)
    w, g = np.arange(4.0), np.ones(4)
    w_before = w.copy()
    new = step(w, g)
    np.testing.assert_array_equal(w, w_before)             # as JAX: NumPy inputs are copied
    np.testing.assert_array_equal(new, w_before - 0.5)
    assert not np.shares_memory(new, w)
    newer = step(new, g)                                   # a result is donated as it is
    assert np.shares_memory(newer, new)
    np.testing.assert_array_equal(newer, w_before - 1.0)
    # the fast path (second call with NumPy arrays) copies too
    w2 = np.arange(4.0)
    step(w2, g)
    np.testing.assert_array_equal(w2, np.arange(4.0))


def test_jnp_array_copies_so_donating_it_leaves_the_numpy_array_alone():
    step = jitgraph.jit(lambda w: w * 2.0, donate_argnums=0)
    w = np.arange(3.0)
    a = jnp.array(w)                                       # a copy, as numpy.array / jnp.array
    assert not np.shares_memory(a, w)
    out = step(a)
    np.testing.assert_array_equal(w, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])
    # asarray as the Array API's: copy=None shares where it can, True copies, False refuses
    assert np.shares_memory(jnp.asarray(w), w)
    assert not np.shares_memory(jnp.asarray(w, copy=True), w)
    assert np.shares_memory(jnp.asarray(w, copy=False), w)
    with pytest.raises(ValueError, match="copy=False"):
        jnp.asarray([1.0, 2.0], copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        jnp.asarray(w, dtype=np.float32, copy=False)
    assert jnp.asarray(w, device="cpu").shape == (3,)
    with pytest.raises(ValueError, match="device_put"):
        jnp.asarray(w, device="cuda")


def test_layers_and_train_steps_are_boundaries_too():
    """A shape error in an nn layer called eagerly, in a user's module around it, and in a
    train_step: the user's frames, and one of jitgraph's."""
    from jitgraph import nn, optim
    from jitgraph.random import key
    lin = nn.Linear(3, 4, key=key(0))

    class Model(nn.Module):                         # a user's module: not wrapped
        def __init__(self):
            self.lin = lin

        def __call__(self, x):
            return self.lin(x)
    for call in (lambda: lin(np.ones((2, 5))), lambda: Model()(np.ones((2, 5)))):
        with pytest.raises(Exception) as info:
            call()
        internal, user = _split(info.value)
        assert len(internal) <= 1, [f"{f.filename}:{f.lineno}" for f in internal]
        assert user[0].filename == HERE
    assert Model.__call__.__module__ == __name__   # its own __call__, as written

    step = jitgraph.train_step(lambda m, x: jnp.sum(m(x)), optim.sgd(0.1))
    with pytest.raises(Exception) as info:
        step(lin, optim.sgd(0.1).init(lin), np.ones((2, 5)))
    internal, _ = _split(info.value)
    assert len(internal) <= 1, [f"{f.filename}:{f.lineno}" for f in internal]
