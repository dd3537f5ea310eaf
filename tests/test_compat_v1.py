"""jitgraph.compat.v1 (TensorFlow 1's static-graph API): the lecture's examples with exact
numbers, optimizers against NumPy references, a user-defined Operation, and the error cases."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph.compat.v1 as tf
from jitgraph.compat import session as session_mod


@pytest.fixture(autouse=True)
def fresh_graph(monkeypatch):
    # every run compiled: these tests check the jit path (sessions otherwise start eager)
    monkeypatch.setattr(session_mod, "JIT_AFTER_S", 0.0)
    tf.reset_default_graph()
    yield
    tf.reset_default_graph()


def test_constants_15_and_5():
    a = tf.constant(15, name="a")
    b = tf.constant(5, name="b")
    prod = tf.multiply(a, b, name="Multiply")
    total = tf.add(a, b, name="Add")
    res = tf.divide(prod, total, name="Divide")
    with tf.Session() as sess:
        out = sess.run({"prod": prod, "sum": total, "res": res})
    assert out == {"prod": 75, "sum": 20, "res": 3.75}
    assert res.name == "Divide:0" and res.op.name == "Divide" and a.name == "a:0"   # as TF


def test_relu_wx_plus_b_and_gradients():
    W0 = np.array([[1.0, -2.0], [0.5, 1.5], [-1.0, 0.0]], np.float32)   # no pre-activation is 0
    x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
    W = tf.Variable(W0, name="W")
    b = tf.Variable(tf.zeros((2,)), name="b")
    h = tf.nn.relu(tf.matmul(x, W) + b)
    gW, gb = tf.gradients(tf.reduce_sum(h), [W, b])
    xv = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]], np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        hv, gwv, gbv = sess.run([h, gW, gb], feed_dict={x: xv})
    pre = xv @ W0
    np.testing.assert_allclose(hv, np.maximum(pre, 0))
    np.testing.assert_allclose(gwv, xv.T @ (pre > 0).astype(np.float32))
    np.testing.assert_allclose(gbv, (pre > 0).sum(0))


def _blobs():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2)).astype(np.float32)
    Y = np.eye(3, dtype=np.float32)[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)]
    return X, Y


def _softmax_classifier():
    x = tf.placeholder(tf.float32, (None, 2), name="x")
    y = tf.placeholder(tf.float32, (None, 3), name="y")
    W = tf.Variable(tf.zeros((2, 3)), name="W")
    b = tf.Variable(tf.zeros((3,)), name="b")
    logits = tf.matmul(x, W) + b
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return x, y, W, b, loss


def _numpy_classifier_grads(W, b, X, Y):
    z = X @ W + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d = (p - Y) / len(X)
    return X.T @ d, d.sum(0)


def test_softmax_classifier_gradient_descent_matches_numpy():
    X, Y = _blobs()
    x, y, W, b, loss = _softmax_classifier()
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    Wn, bn = np.zeros((2, 3)), np.zeros(3)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = []
        for _ in range(8):
            _, lv, Wv, bv = sess.run([train_op, loss, W, b], {x: X, y: Y})
            losses.append(float(lv))
            np.testing.assert_allclose(Wv, Wn, rtol=1e-4, atol=1e-5)   # values before the step
            gW, gb = _numpy_classifier_grads(Wn, bn, X, Y)
            Wn, bn = Wn - 0.5 * gW, bn - 0.5 * gb
    assert losses[0] == pytest.approx(np.log(3)) and losses[-1] < 0.8 * losses[0]


def test_adam_optimizer_matches_tf1_formula():
    X, Y = _blobs()
    x, y, W, b, loss = _softmax_classifier()
    train_op = tf.train.AdamOptimizer(0.1).minimize(loss)
    Wn, bn = np.zeros((2, 3)), np.zeros(3)
    m = [np.zeros((2, 3)), np.zeros(3)]
    v = [np.zeros((2, 3)), np.zeros(3)]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for t in range(1, 5):
            _, Wv = sess.run([train_op, W], {x: X, y: Y})
            np.testing.assert_allclose(Wv, Wn, rtol=1e-4, atol=1e-5)
            gs = _numpy_classifier_grads(Wn, bn, X, Y)
            lr_t = 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            new = []
            for i, (p, g) in enumerate(zip((Wn, bn), gs)):
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                new.append(p - lr_t * m[i] / (np.sqrt(v[i]) + 1e-8))
            Wn, bn = new


class AddOperation(tf.Operation):
    """The lecture's operation: forward adds, backward passes the gradient to both inputs."""

    def __init__(self, x, y):
        super().__init__([x, y])

    def forward(self, x, y):
        return x + y

    def backward(self, upstream_grad):
        return upstream_grad, upstream_grad


class Cube(tf.Operation):
    def __init__(self, x):
        super().__init__([x])

    def forward(self, x):
        return x * x * x

    def backward(self, upstream_grad):
        (x,) = self.input_values
        return 3.0 * x * x * upstream_grad


def test_user_operation_forward_and_backward():
    a = tf.Variable(np.array([1.0, 2.0]), name="a")
    b = tf.placeholder(tf.float64, (2,), name="b")
    c = Cube(AddOperation(a, b))
    ga, gb = tf.gradients(tf.reduce_sum(c), [a, b])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        cv, gav, gbv = sess.run([c, ga, gb], {b: np.array([1.0, -1.0])})
    np.testing.assert_allclose(cv, [8.0, 1.0])
    np.testing.assert_allclose(gav, [12.0, 3.0])
    np.testing.assert_allclose(gbv, [12.0, 3.0])
    assert c.op_type == "Cube"


def test_errors_name_the_node():
    x = tf.placeholder(tf.float32, (None, 3), name="inputs")
    k = tf.placeholder(tf.int32, (2,), name="labels")
    W = tf.Variable(np.ones((3, 1), np.float32), name="weights")
    out = tf.matmul(x, W)
    with tf.Session() as sess:
        with pytest.raises(ValueError, match=r"shape \(2, 4\) for Tensor 'inputs:0', which has "
                                             r"shape \(\?, 3\)"):
            sess.run(out, {x: np.ones((2, 4))})
        with pytest.raises(TypeError, match="'labels:0' of dtype int32"):
            sess.run(k, {k: np.array([0.5, 1.0])})
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value weights"):
            sess.run(out, {x: np.ones((2, 3))})
        with pytest.raises(tf.errors.InvalidArgumentError, match="placeholder tensor 'inputs'"):
            sess.run(out)
        with pytest.raises(TypeError, match="invalid type"):
            sess.run("out")
    other = tf.Graph()
    with other.as_default():
        y = tf.constant(1.0, name="elsewhere")
    with tf.Session() as sess:
        with pytest.raises(ValueError, match="'elsewhere:0' is not an element of this graph"):
            sess.run(y)
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(W)
