"""The classic TensorFlow 1 tutorials of ``tf1_tutorials.py`` on jitgraph.compat.v1, against
the numbers TensorFlow's ``tf.compat.v1`` gives for the same programs.

The ``TF_*`` literals are what each program function returned when ``tf1_tutorials.py`` was run
with its import line replaced by ``import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()``
(TensorFlow 2.21, CPU). The exact programs (initial values from NumPy) must agree to 1e-5; the
GAN draws its initial weights with ``tf.random_normal``, whose stream differs from TensorFlow's,
so its losses are compared with TensorFlow's spread over seeds 0-9.

The sessions run eagerly here (``JIT_AFTER_S`` = inf) unless a test says otherwise; the
compiled path runs the linear regression, both convolutional networks and the lecture's tests
in tests/test_compat_v1.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import tf1_tutorials as tut


@pytest.fixture(autouse=True)
def eager_sessions(monkeypatch):
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", float("inf"))


TF_LINEAR = {"costs": [0.48621636629104614, 0.3050627112388611, 0.23096871376037598,
                       0.20016618072986603, 0.1870242804288864, 0.18118329346179962,
                       0.17841988801956177, 0.17698973417282104, 0.17615874111652374,
                       0.17560958862304688],
             "W": 0.42306962609291077, "b": -0.45946943759918213, "one": 0.3866698145866394,
             "one_shape": (), "names": ["weight:0", "bias:0"], "dtype": "float32"}


def _check_linear(got):
    np.testing.assert_allclose(got["costs"], TF_LINEAR["costs"], rtol=1e-5)
    np.testing.assert_allclose([got["W"], got["b"], got["one"]],
                               [TF_LINEAR["W"], TF_LINEAR["b"], TF_LINEAR["one"]], rtol=1e-5)
    assert got["one_shape"] == () and got["names"] == TF_LINEAR["names"]
    assert got["dtype"] == "float32"


def test_linear_regression():
    _check_linear(tut.linear_regression())


def test_linear_regression_compiled(monkeypatch):
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", 0.0)     # every run through jit
    _check_linear(tut.linear_regression())


TF_LOGISTIC = {"costs": [1.9412246942520142, 1.3319348096847534, 0.9928351640701294,
                         0.7940533757209778, 0.6672295331954956],
               "accuracy": 0.9449999928474426, "W_sum": 106.35963439941406,
               "W_0_0": 0.14122584462165833}


@pytest.mark.filterwarnings("ignore:tf.summary.FileWriter")   # no writer library installed
def test_logistic_regression_with_summaries(tmp_path):
    got = tut.logistic_regression(logdir=str(tmp_path))
    np.testing.assert_allclose(got["costs"], TF_LOGISTIC["costs"], rtol=1e-5)
    np.testing.assert_allclose([got["W_sum"], got["W_0_0"]],
                               [TF_LOGISTIC["W_sum"], TF_LOGISTIC["W_0_0"]], rtol=1e-5)
    assert got["accuracy"] == pytest.approx(TF_LOGISTIC["accuracy"], abs=1e-6)


TF_NEAREST = {"found": [461, 4, 464, 281, 45, 344, 455, 262, 442, 283, 358, 14, 270, 94, 22, 378,
                        437, 372, 285, 368, 425, 373, 375, 260, 459, 305, 264, 455, 332, 0, 248,
                        313, 359, 124, 15, 136, 94, 284, 220, 434],
              "accuracy": 0.9000000000000005}


def test_nearest_neighbor():
    got = tut.nearest_neighbor()
    assert got["found"] == TF_NEAREST["found"]           # ties go to the first, as tf.arg_min
    assert got["accuracy"] == pytest.approx(TF_NEAREST["accuracy"])


TF_MLP = {"losses": [2.2994816303253174, 2.158363103866577, 1.7084077596664429,
                     1.3219696283340454, 1.052603840827942, 0.6563562750816345],
          "accuracy": 0.8299999833106995, "logits_sum": 6648.7587890625}


def test_mlp():
    got = tut.mlp()
    np.testing.assert_allclose(got["losses"], TF_MLP["losses"], rtol=1e-5)
    np.testing.assert_allclose(got["logits_sum"], TF_MLP["logits_sum"], rtol=1e-5)
    assert got["accuracy"] == pytest.approx(TF_MLP["accuracy"], abs=1e-6)


TF_CNN = {"shape": [None, 2, 2, 16], "n_grads": 8,
          "losses": [2.321394920349121, 2.232862949371338, 2.0155646800994873,
                     1.5934224128723145, 1.2659980058670044],
          "accuracy": 0.8899999856948853}


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
def test_cnn(monkeypatch, jit_after_s):
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    got = tut.cnn()
    assert got["shape"] == TF_CNN["shape"] and got["n_grads"] == TF_CNN["n_grads"]
    np.testing.assert_allclose(got["losses"], TF_CNN["losses"], rtol=1e-5)
    assert got["accuracy"] == pytest.approx(TF_CNN["accuracy"], abs=1e-6)


# tut.cnn_mnist(steps=4, batch_size=32, display_step=2) under TensorFlow
TF_CNN_MNIST = {"shown": [(1, 1.8460184335708618, 0.625), (2, 1.6608179807662964, 0.53125),
                          (4, 1.3244960308074951, 0.6875)],
                "test_accuracy": 0.4296875}


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
def test_cnn_at_mnist_size(monkeypatch, jit_after_s):
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    got = tut.cnn_mnist(steps=4, batch_size=32, display_step=2)
    assert [s for s, _, _ in got["shown"]] == [s for s, _, _ in TF_CNN_MNIST["shown"]]
    np.testing.assert_allclose([v for _, v, _ in got["shown"]],
                               [v for _, v, _ in TF_CNN_MNIST["shown"]], rtol=1e-5)
    assert [a for _, _, a in got["shown"]] == [a for _, _, a in TF_CNN_MNIST["shown"]]
    assert got["test_accuracy"] == pytest.approx(TF_CNN_MNIST["test_accuracy"], abs=1e-6)


def test_a_costly_eager_run_is_compiled_after_the_threshold(monkeypatch):
    """The default session compiles a fetch set once its eager runs, with the next priced as
    the last, would cost ``JIT_AFTER_S`` seconds of CPU in all: a run that costs a tenth of
    that is compiled after about ten runs, not before; one that costs over half of it after its
    first (compiled at the next call: nothing is compiled for a run never repeated); a run that
    only waits (no CPU) is never compiled; the compiled runs give the eager runs' values."""
    import time

    from jitgraph.compat import session
    monkeypatch.setattr(session, "JIT_AFTER_S", 0.2)

    def slow(x):
        t0 = time.process_time()
        while time.process_time() - t0 < 0.02:    # the eager run's cost (traced once under jit)
            pass
        return x * 2.0

    def waits(x):
        time.sleep(0.05)
        return x * 2.0

    idle = session._Program(waits, session.JIT_AFTER_S)
    for _ in range(6):
        idle(np.ones(2))
    assert idle.compiled is None and idle.eager_s < 0.1

    prog = session._Program(slow, session.JIT_AFTER_S)
    x = np.arange(3.0, dtype=np.float32)
    runs = 0
    while prog.compiled is None:
        assert prog.eager_s < session.JIT_AFTER_S       # not compiled before it paid
        before = prog.eager_s
        np.testing.assert_array_equal(prog(x), x * 2.0)
        last = prog.eager_s - before
        runs += 1
    # compiled once the next run, priced as the last, would reach the limit: not sooner
    assert prog.eager_s + last >= session.JIT_AFTER_S and runs <= 10, (runs, prog.eager_s)
    assert prog.eager_s >= session.JIT_AFTER_S / 2, prog.eager_s
    np.testing.assert_array_equal(np.asarray(prog(x)), x * 2.0)

    def costly(x):
        t0 = time.process_time()
        while time.process_time() - t0 < 0.12:    # over half the limit
            pass
        return x * 3.0

    once = session._Program(costly, session.JIT_AFTER_S)
    np.testing.assert_array_equal(once(x), x * 3.0)
    assert once.compiled is not None and once.compiled.cache_entries() == []    # not yet compiled
    np.testing.assert_array_equal(np.asarray(once(x)), x * 3.0)
    assert len(once.compiled.cache_entries()) == 1


def test_the_default_limit_is_the_expected_compile(monkeypatch):
    """Sessions price a fetch set's compile at the seconds per graph node of this process's
    compiles so far (``COMPILE_S_PER_NODE`` before the first), at most ``JIT_AFTER_S``: a fetch
    set is compiled once its eager runs would cost that much; its first compiled call adds its
    own compile to the rate. A limit given to the session is used as it is."""
    import time

    from jitgraph.compat import session
    monkeypatch.setattr(session, "JIT_AFTER_S", 1.0)
    monkeypatch.setattr(session, "_COMPILED", [0.0, 0])
    assert session.compile_price(10) == pytest.approx(10 * session.COMPILE_S_PER_NODE)
    assert session.compile_price(10 ** 6) == session.JIT_AFTER_S
    monkeypatch.setattr(session, "_COMPILED", [0.2, 100])       # 2 ms a node
    assert session.compile_price(50) == pytest.approx(0.1)

    def slow(x):
        t0 = time.process_time()
        while time.process_time() - t0 < 0.02:
            pass
        return x * 2.0

    x = np.arange(3.0, dtype=np.float32)
    fixed = session._Program(slow, 1.0, nodes=50)
    priced = session._Program(slow, 1.0, nodes=50, priced=True)
    for _ in range(6):
        fixed(x)
    assert fixed.compiled is None           # 0.12 s of a fixed 1 s
    runs = 0
    while priced.compiled is None:
        priced(x)
        runs += 1
    assert 0.05 <= priced.eager_s < 0.1 and runs <= 5, (runs, priced.eager_s)
    np.testing.assert_array_equal(np.asarray(priced(x)), x * 2.0)     # its compile
    assert session._COMPILED[1] == 150 and session._COMPILED[0] > 0.2
    np.testing.assert_array_equal(np.asarray(priced(x)), x * 2.0)
    assert session._COMPILED[1] == 150      # counted once
    # the default: priced; a limit given to the session: fixed
    assert session.Session()._priced and not session.Session(jit_after_s=0.5)._priced


TF_AUTOENCODER = {"names": ["encoder/w1:0", "encoder/b1:0", "encoder/w2:0", "encoder/b2:0",
                            "decoder/w1:0", "decoder/b1:0", "decoder/w2:0", "decoder/b2:0"],
                  "losses": [0.18116351962089539, 0.1774004101753235, 0.18077920377254486,
                             0.18071173131465912, 0.17343227565288544],
                  "test_loss": 0.17265945672988892}


def test_autoencoder():
    got = tut.autoencoder()
    assert got["names"] == TF_AUTOENCODER["names"]
    np.testing.assert_allclose(got["losses"] + [got["test_loss"]],
                               TF_AUTOENCODER["losses"] + [TF_AUTOENCODER["test_loss"]],
                               rtol=1e-5)


# tut.gan(seed) under TensorFlow for seeds 0-9: (init_std, gen_loss, disc_loss)
TF_GAN = [(0.24664932489395142, 1.9338865280151367, 0.4285867214202881),
          (0.2493198662996292, 2.384014368057251, 0.4282337427139282),
          (0.25312918424606323, 2.415602922439575, 0.5137872695922852),
          (0.25425219535827637, 1.9294445514678955, 0.4698145389556885),
          (0.24589993059635162, 1.901784062385559, 0.6063968539237976),
          (0.2450764775276184, 1.8952909708023071, 0.47872525453567505),
          (0.24460184574127197, 2.089280605316162, 0.49268898367881775),
          (0.2569611668586731, 2.1846585273742676, 0.38367027044296265),
          (0.2517588436603546, 2.146669387817383, 0.3908032476902008),
          (0.25018635392189026, 2.262010335922241, 0.3246302008628845)]


@pytest.mark.parametrize("seed", [0, 1])
def test_gan_within_tensorflows_spread_over_seeds(seed):
    got = tut.gan(seed)
    ref = np.array(TF_GAN)
    mean, std = ref.mean(0), ref.std(0, ddof=1)
    for k, key in enumerate(["init_std", "gen_loss", "disc_loss"]):
        assert abs(got[key] - mean[k]) < 3 * std[k], (key, got[key], mean[k], std[k])


TF_SAVE_RESTORE = {"same_path": True, "acc_saved": 0.8100000023841858,
                   "acc_restored": 0.8100000023841858, "step_restored": 5,
                   "acc_continued": 0.8450000286102295, "acc_after": 0.8450000286102295}


def test_save_restore(tmp_path):
    got = tut.save_restore(str(tmp_path / "model.ckpt"))
    assert got["same_path"] and got["step_restored"] == TF_SAVE_RESTORE["step_restored"]
    for key in ("acc_saved", "acc_restored", "acc_continued", "acc_after"):
        assert got[key] == pytest.approx(TF_SAVE_RESTORE[key], abs=1e-6), key


def test_open_placeholder_dims_are_runtime_sizes(monkeypatch):
    """A placeholder's ``None`` dims are compiled as runtime sizes from the first compile: a
    training loop's short last batch and a test set of another size run the program compiled
    for the first batch (one compile), with the values of each size; a fixed dim stays
    fixed."""
    import jitgraph
    import jitgraph.compat.v1 as tf
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", 0.0)
    tf.reset_default_graph()
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 4])
    keep = tf.placeholder(tf.float32)
    W = tf.Variable(w0)
    h = tf.nn.dropout(tf.nn.relu(tf.matmul(x, W)), keep)
    loss = tf.reduce_mean(tf.reduce_sum(h * h, axis=1))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        before = jitgraph.cache_info()
        for n in (8, 5, 3, 11):
            xv = rng.standard_normal((n, 4)).astype(np.float32)
            got = sess.run(loss, feed_dict={x: xv, keep: 1.0})
            want = np.mean(np.sum(np.maximum(xv @ w0, 0) ** 2, axis=1))
            np.testing.assert_allclose(got, want, rtol=1e-5)
        after = jitgraph.cache_info()
        (prog,) = [p for p in sess._programs.values() if p.dynamic_dims]
        entries = prog.compiled.cache_entries()
    assert after["dynamic_compiles"] - before["dynamic_compiles"] == 1, (before, after)
    assert after["dynamic_hits"] - before["dynamic_hits"] == 3
    assert all(r["dynamic"] for r in entries)
    assert "f32[n0,4]" in entries[0]["program"]
