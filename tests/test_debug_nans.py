"""``debug_nans`` / ``debug_infs`` and ``train_step(check_nan=True)``: a NaN is traced to the
first primitive that made it and the user's line (this file), to the argument that brought it,
or to labels outside [0, classes); with the settings off nothing is checked."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import config, nn, optim
from jitgraph.debug_nans import diagnose
from jitgraph.train import NonFiniteLossError

THIS_FILE = os.path.basename(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def next_line() -> int:
    """The line number after the caller's line (where the op under test is written)."""
    return sys._getframe(1).f_lineno + 1


@pytest.fixture(autouse=True)
def _settings_off():
    yield
    config.update("debug_nans", False)
    config.update("debug_infs", False)


def raised(f, *args, **kwargs) -> str:
    with pytest.raises(FloatingPointError) as ei:
        f(*args, **kwargs)
    return str(ei.value)


# ------------------------------------------------------------------ an operation makes it
def test_log_of_a_negative_number_names_log_and_the_line():
    line = 0

    @jitgraph.jit
    def f(x):
        nonlocal line
        y = 2 * x
        line = next_line()
        return jnp.log(y - 1)
    x = np.array([1.0, 0.0, 3.0])
    config.update("debug_nans", True)
    msg = raised(f, x)
    assert msg.startswith("jit(f): the output holds NaN (debug_nans); the first operation to "
                          "make NaN from operands without it is log(f64[3]) -> f64[3] at ")
    assert f"{THIS_FILE}:{line} (in f)" in msg
    assert "log(-1.0) = nan at position 1 (1 of 3 elements)" in msg
    assert "hint: the log of a negative number is NaN" in msg


def test_zero_over_zero_names_div():
    line = next_line() + 2

    def f(x, y):
        return jnp.sum(x / y)
    config.update("debug_nans", True)
    msg = raised(jitgraph.jit(f), np.array([1.0, 0.0]), np.array([2.0, 0.0]))
    assert "is div(f64[2], f64[2]) -> f64[2]" in msg and f"{THIS_FILE}:{line}" in msg
    assert "div(0.0, 0.0) = nan at position 1" in msg and "0/0" in msg


def test_an_op_the_output_does_not_use_is_not_blamed():
    line = next_line() + 3

    def f(x):
        unused = jnp.log(-x)                  # NaN, but dead
        return jnp.sqrt(x - 2.0)
    config.update("debug_nans", True)
    msg = raised(jitgraph.jit(f), np.array([3.0, 1.0]))
    assert "is sqrt(f64[2]) -> f64[2]" in msg and f"{THIS_FILE}:{line}" in msg
    assert "sqrt(-1.0) = nan at position 1" in msg and "log" not in msg


def test_nan_from_an_inf_says_where_the_inf_came_from():
    line = next_line() + 2

    def f(x):
        return jnp.exp(x) - jnp.exp(x)
    config.update("debug_nans", True)
    msg = raised(jitgraph.jit(f), np.array([0.0, 1000.0]))
    assert "is sub(f64[2], f64[2]) -> f64[2]" in msg and "sub(inf, inf) = nan" in msg
    assert f"an operand holds inf, first made by exp at {__file__}:{line}" in msg


# ------------------------------------------------------------------ it comes in
def test_nan_passed_in_names_the_argument_and_its_path():
    def f(params, x, *, scale):
        return jnp.sum(x @ params["w"]) * scale + params["b"][1]
    params = {"w": np.ones((2, 2)), "b": [np.zeros(1), np.array([0.0, np.nan, 1.0])]}
    config.update("debug_nans", True)
    msg = raised(jitgraph.jit(f), params, np.ones((1, 2)), scale=2.0)
    assert "it comes in through the arguments: params['b'][1] holds NaN at position 1 " \
           "(1 of 3 elements)" in msg
    msg = raised(jitgraph.jit(f), {"w": np.ones((2, 2)), "b": [np.zeros(1), np.zeros(3)]},
                 np.ones((1, 2)), scale=np.array(np.nan))
    assert "scale holds NaN;" in msg


def test_nan_held_by_a_donated_argument_and_donated_arguments_are_restored():
    f = jitgraph.jit(lambda w, x: (w - 0.1 * x, jnp.log(x)), donate_argnums=0)
    w = np.array([1.0, 2.0])
    config.update("debug_nans", True)
    msg = raised(f, w, np.array([1.0, -1.0]))
    assert "output [1] holds NaN" in msg and "log(-1.0) = nan" in msg
    assert "donated arguments hold their values from before the call" in msg
    np.testing.assert_array_equal(w, [1.0, 2.0])


# ------------------------------------------------------------------ labels out of range
def ce_loss(params, x, y):
    return nn.cross_entropy(x @ params["w"], y)


CE_LINE = ce_loss.__code__.co_firstlineno + 1
PARAMS = {"w": np.linspace(-1, 1, 40).reshape(4, 10)}
X = np.ones((5, 4))
BAD_Y = np.array([1, 2, 3, 12, 0])


def assert_names_the_labels(msg: str) -> None:
    assert "cross_entropy got labels outside [0, 10): found 12 at position 3 (1 of 5 labels)" \
           f", at {__file__}:{CE_LINE} (in ce_loss)" in msg
    assert "gradient zero" in msg and "labels are class indices in [0, 10)" in msg
    assert "inputs already hold" not in msg


def test_out_of_range_labels_under_jit_are_named():
    f = jitgraph.jit(ce_loss)
    config.update("debug_nans", True)
    assert_names_the_labels(raised(f, PARAMS, X, BAD_Y))
    msg = raised(f, PARAMS, X, np.array([-1, 0, 10, 4, 11]))
    assert "found -1 at position 0, 10 at position 2, 11 at position 4 (3 of 5 labels)" in msg


def test_out_of_range_labels_in_float32_and_2d():
    f = jitgraph.jit(lambda z, y: nn.cross_entropy(z, y, reduction="none"))
    config.update("debug_nans", True)
    msg = raised(f, np.zeros((2, 3, 4), np.float32), np.array([[0, 1, 2], [3, 4, 0]]))
    assert "labels outside [0, 4): found 4 at position (1, 1) (1 of 6 labels)" in msg


def test_train_step_check_nan_names_the_labels_and_keeps_the_parameters():
    opt = optim.sgd(0.1)
    step = jitgraph.train_step(ce_loss, opt, check_nan=True)
    params = {"w": PARAMS["w"].copy()}
    with pytest.raises(NonFiniteLossError) as ei:
        step(params, opt.init(params), X, BAD_Y)
    msg = str(ei.value)
    assert msg.startswith("train_step: the loss is nan at step 1; cross_entropy got labels")
    assert_names_the_labels(msg)
    np.testing.assert_array_equal(params["w"], PARAMS["w"])


def test_train_step_under_debug_nans_names_the_labels_in_the_loss_function():
    opt = optim.sgd(0.1)
    step = jitgraph.train_step(ce_loss, opt)          # donated parameters, no check_nan
    params = {"w": PARAMS["w"].copy()}
    config.update("debug_nans", True)
    msg = raised(step, params, opt.init(params), X, BAD_Y)
    assert msg.startswith("jit(train_step[ce_loss]): output [2] holds NaN (debug_nans); ")
    assert_names_the_labels(msg)           # the loss's line, not the line calling the step
    np.testing.assert_array_equal(params["w"], PARAMS["w"])
    params, _, loss = step(params, opt.init(params), X, np.array([1, 2, 3, 9, 0]))
    assert np.isfinite(loss)


def test_train_step_check_nan_names_an_argument_holding_nan():
    opt = optim.sgd(0.1)
    step = jitgraph.train_step(ce_loss, opt, check_nan=True)
    x = X.copy()
    x[2, 1] = np.nan
    with pytest.raises(NonFiniteLossError, match=r"x holds NaN or inf at position \(2, 1\)"):
        step({"w": PARAMS["w"].copy()}, opt.init(PARAMS), x, np.array([1, 2, 3, 4, 0]))


# ------------------------------------------------------------------ the settings
def test_off_nothing_is_checked():
    f = jitgraph.jit(lambda x: jnp.log(x))
    out = f(np.array([-1.0, 1.0]))
    assert np.isnan(out[0]) and out[1] == 0
    config.update("debug_nans", True)
    config.update("debug_nans", False)
    assert np.isnan(f(np.array([-1.0, 1.0]))[0])
    assert np.isnan(jitgraph.jit(ce_loss)(PARAMS, X, BAD_Y))


def test_the_settings_the_jax_aliases_and_the_context_managers():
    f = jitgraph.jit(lambda x: jnp.sqrt(x))
    x = np.array([-1.0])
    f(x), f(x)                              # cached on the fast path before the setting
    assert config.read("debug_nans") is False and config.jax_debug_nans is False
    config.update("jax_debug_nans", True)
    assert config.read("debug_nans") is True and config.jitgraph_debug_nans is True
    assert "sqrt(-1.0) = nan" in raised(f, x)
    config.update("jax_debug_nans", False)
    assert np.isnan(f(x)[0])
    with config.debug_nans():
        assert "sqrt" in raised(f, x)
    assert config.read("debug_nans") is False
    assert "debug_nans" in config.values()
    with pytest.raises(ValueError, match="debug_nans must be True or False"):
        config.update("debug_nans", "maybe")


def test_debug_infs_checks_for_inf_and_debug_nans_does_not():
    line = next_line() + 2

    def f(x):
        return jnp.exp(x) * 2
    x = np.array([1.0, 1000.0])
    with config.debug_nans():
        assert np.isinf(jitgraph.jit(f)(x)[1])      # as JAX: inf is debug_infs' business
    config.update("jax_debug_infs", True)
    msg = raised(jitgraph.jit(f), x)
    assert msg.startswith("jit(f): the output holds inf (debug_infs); the first operation to "
                          "make inf from operands without it is exp(f64[2]) -> f64[2] at ")
    assert f"{THIS_FILE}:{line}" in msg and "exp(1000.0) = inf at position 1" in msg


def test_the_environment_variable_turns_it_on():
    code = ("import numpy as np, jitgraph, jitgraph.numpy as jnp\n"
            "assert jitgraph.config.read('debug_nans') is True\n"
            "try:\n"
            "    jitgraph.jit(lambda x: jnp.log(x))(np.array([-1.0]))\n"
            "except FloatingPointError as e:\n"
            "    print('raised', 'log(-1.0) = nan' in str(e))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, JITGRAPH_DEBUG_NANS="1"), timeout=300)
    assert p.stdout.strip() == "raised True", p.stderr


def test_a_nan_the_reference_does_not_make_is_reported_as_such():
    found = diagnose(lambda x: x + 1, (np.array([1.0]),))
    assert not found.reproduced and found.node is None
    assert "the NumPy reference gives no NaN" in str(found)


def test_static_arguments_and_a_nan_constant_put_in_by_where():
    line = next_line() + 2

    def f(x, floor):
        return jnp.where(x > floor, x, jnp.nan) * 2
    config.update("debug_nans", True)
    msg = raised(jitgraph.jit(f, static_argnums=1), np.array([3.0, 0.5]), 1.0)
    assert "is select(bool[2], f64[2], f64[]) -> f64[2]" in msg and f"{THIS_FILE}:{line}" in msg
    assert "select(False, 0.5, nan) = nan at position 1" in msg
    assert "operand 2 is a constant holding NaN" in msg
