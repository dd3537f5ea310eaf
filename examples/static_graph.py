"""The lecture's TensorFlow 1 examples on ``jitgraph.compat.v1``: build a graph, then run it.

    python examples/static_graph.py [--smoke]

(1) the constants 15 and 5, (2) h = relu(Wx + b) with a placeholder and variables, (3) a
softmax classifier on scikit-learn's digits trained with GradientDescentOptimizer(0.5).minimize.
Each ``sess.run`` evaluates the subgraph its fetches need eagerly, and compiles it (once, cached
by the fed shapes) when its eager runs have taken 10 s in all; the script ends with what was
compiled and the total time, and shows the classifier's progress (a bar on a terminal, plain
lines elsewhere).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import jitgraph.compat.v1 as tf
from example_utils import Progress, done


def constants():
    a = tf.constant(15, name="a")
    b = tf.constant(5, name="b")
    prod = tf.multiply(a, b, name="Multiply")
    total = tf.add(a, b, name="Add")
    res = tf.divide(prod, total, name="Divide")
    with tf.Session() as sess:
        out = sess.run(res)
    print(f"(15 * 5) / (15 + 5) = {out}")
    return float(out)


def relu_layer():
    x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
    W = tf.Variable(tf.random_uniform((3, 2), -1.0, 1.0), name="W")
    b = tf.Variable(tf.zeros((2,)), name="b")
    h = tf.nn.relu(tf.matmul(x, W) + b)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out = sess.run(h, feed_dict={x: np.array([[1.0, 2.0, 3.0]], np.float32)})
    print(f"h = relu(Wx + b) = {out}")
    return out


def softmax_classifier(epochs: int):
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    Y = np.eye(10, dtype=np.float32)[y]
    X_tr, Y_tr, X_te, Y_te = X[:1400], Y[:1400], X[1400:], Y[1400:]

    x = tf.placeholder(tf.float32, (None, 64), name="x")
    y_ = tf.placeholder(tf.float32, (None, 10), name="y_")
    W = tf.Variable(tf.zeros((64, 10)), name="W")
    b = tf.Variable(tf.zeros((10,)), name="b")
    logits = tf.matmul(x, W) + b
    cross_entropy = tf.reduce_mean(
        tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=logits))
    train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)
    correct = tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        starts = range(0, len(X_tr), 100)
        with Progress(epochs * len(starts), desc="training", per_step=100,
                      item="examples") as bar:
            for epoch in range(epochs):
                for i in starts:
                    _, loss = sess.run([train_step, cross_entropy],
                                       feed_dict={x: X_tr[i:i + 100], y_: Y_tr[i:i + 100]})
                    bar.update(loss=float(loss))
                bar.write(f"epoch {epoch + 1}: loss {float(loss):.4f}")
        acc = sess.run(accuracy, feed_dict={x: X_te, y_: Y_te})
    print(f"softmax classifier test accuracy: {float(acc):.4f}")
    return float(acc)


if __name__ == "__main__":
    started = time.perf_counter()
    smoke = "--smoke" in sys.argv
    assert constants() == 3.75
    relu_layer()
    acc = softmax_classifier(2 if smoke else 20)
    done(started)
    assert acc > (0.6 if smoke else 0.85), acc      # 20 epochs: about 0.897
