"""Classic TensorFlow 1 tutorial programs, written from the TF 1 API documentation, on
scikit-learn's bundled 8x8 digits (an MNIST-like set; nothing is downloaded).

The programs are plain TensorFlow 1 code: the import below is the only line that names
jitgraph. ``test_tf1_tutorials.py`` runs them and compares with the numbers TensorFlow gives
for the same programs. Those reference numbers were produced by running this file with the
import replaced by ``import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()``
(TensorFlow 2.21, CPU) and printing what each function returns.
"""
from __future__ import annotations

import functools

import numpy as np

import jitgraph.compat.v1 as tf


@functools.lru_cache(maxsize=None)
def digits():
    """(train x, train one-hot y, test x, test one-hot y): 1000 and 200 digits, pixels in [0, 1]."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    Y = np.eye(10, dtype=np.float32)[y]
    return X[:1000], Y[:1000], X[1000:1200], Y[1000:1200]


def init(rng, *shape, scale=0.1):
    """Initial weights from NumPy (so the runs are exact), as tutorials' tf.constant inits."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def conv2d(x, W, b, strides=1):
    """The tutorials' convolution layer: a SAME convolution, its bias, ReLU."""
    x = tf.nn.conv2d(x, W, strides=[1, strides, strides, 1], padding="SAME")
    return tf.nn.relu(tf.nn.bias_add(x, b))


def maxpool2d(x, k=2):
    """A k x k max pool of stride k, SAME padding."""
    return tf.nn.max_pool(x, ksize=[1, k, k, 1], strides=[1, k, k, 1], padding="SAME")


def linear_regression():
    """Per-sample gradient descent on a line, with "float" placeholders fed Python scalars."""
    tf.reset_default_graph()
    train_X = np.asarray([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779, 6.182, 7.59, 2.167, 7.042,
                          10.791, 5.313, 7.997, 5.654, 9.27, 3.1])
    train_Y = np.asarray([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366, 2.596, 2.53, 1.221,
                          2.827, 3.465, 1.65, 2.904, 2.42, 2.94, 1.3])
    n_samples = train_X.shape[0]

    X = tf.placeholder("float")
    Y = tf.placeholder("float")
    W = tf.Variable(0.25, name="weight")
    b = tf.Variable(-0.5, name="bias")
    pred = tf.add(tf.multiply(X, W), b)
    cost = tf.reduce_sum(tf.pow(pred - Y, 2)) / (2 * n_samples)
    optimizer = tf.train.GradientDescentOptimizer(0.01).minimize(cost)
    init_op = tf.global_variables_initializer()
    with tf.Session() as sess:
        sess.run(init_op)
        costs = []
        for epoch in range(10):
            for (x, y) in zip(train_X, train_Y):
                sess.run(optimizer, feed_dict={X: float(x), Y: float(y)})
            costs.append(sess.run(cost, feed_dict={X: train_X, Y: train_Y}))
        one = sess.run(pred, feed_dict={X: 2.0})
        return {"costs": [float(c) for c in costs], "W": float(sess.run(W)),
                "b": float(sess.run(b)), "one": float(one), "one_shape": np.shape(one),
                "names": [W.name, b.name], "dtype": str(np.asarray(sess.run(W)).dtype)}


def logistic_regression(logdir=None, epochs=5):
    """Softmax regression with mini-batches, reduction_indices=, and a loss summary."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits()
    x = tf.placeholder(tf.float32, [None, 64])
    y = tf.placeholder(tf.float32, [None, 10])
    W = tf.Variable(tf.zeros([64, 10]))
    b = tf.Variable(tf.zeros([10]))
    pred = tf.nn.softmax(tf.matmul(x, W) + b)
    cost = tf.reduce_mean(-tf.reduce_sum(y * tf.log(pred), reduction_indices=1))
    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(cost)
    correct = tf.equal(tf.argmax(pred, 1), tf.argmax(y, 1))
    accuracy = tf.reduce_mean(tf.cast(correct, "float"))
    tf.summary.scalar("loss", cost)
    tf.summary.histogram("weights", W)
    merged = tf.summary.merge_all()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        writer = tf.summary.FileWriter(logdir, graph=sess.graph) if logdir else None
        costs, step = [], 0
        for epoch in range(epochs):
            avg = 0.0
            for i in range(0, 1000, 100):
                _, c, s = sess.run([optimizer, cost, merged],
                                   feed_dict={x: Xtr[i:i + 100], y: Ytr[i:i + 100]})
                avg += c / 10
                if writer is not None:
                    writer.add_summary(s, step)
                step += 1
            costs.append(float(avg))
        if writer is not None:
            writer.close()
        Wv = sess.run(W)
        return {"costs": costs, "accuracy": float(accuracy.eval({x: Xte, y: Yte})),
                "W_sum": float(np.abs(Wv).sum()), "W_0_0": float(Wv[10, 3])}


def nearest_neighbor():
    """L1 nearest neighbour: one run per test digit, tf.arg_min over the training set."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits()
    Xtr, Ytr, Xte, Yte = Xtr[:500], Ytr[:500], Xte[:40], Yte[:40]
    xtr = tf.placeholder("float", [None, 64])
    xte = tf.placeholder("float", [64])
    distance = tf.reduce_sum(tf.abs(tf.add(xtr, tf.negative(xte))), reduction_indices=1)
    pred = tf.arg_min(distance, 0)
    accuracy = 0.0
    found = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for i in range(len(Xte)):
            nn_index = sess.run(pred, feed_dict={xtr: Xtr, xte: Xte[i, :]})
            found.append(int(nn_index))
            if np.argmax(Ytr[nn_index]) == np.argmax(Yte[i]):
                accuracy += 1.0 / len(Xte)
    return {"found": found, "accuracy": accuracy}


def mlp():
    """A raw two-hidden-layer perceptron (dicts of weights), Adam, accuracy on the test set."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits()
    rng = np.random.default_rng(1)
    X = tf.placeholder("float", [None, 64])
    Y = tf.placeholder("float", [None, 10])
    weights = {"h1": tf.Variable(init(rng, 64, 32)), "h2": tf.Variable(init(rng, 32, 32)),
               "out": tf.Variable(init(rng, 32, 10))}
    biases = {"b1": tf.Variable(init(rng, 32)), "b2": tf.Variable(init(rng, 32)),
              "out": tf.Variable(init(rng, 10))}

    def multilayer_perceptron(x):
        layer_1 = tf.nn.relu(tf.add(tf.matmul(x, weights["h1"]), biases["b1"]))
        layer_2 = tf.nn.relu(tf.add(tf.matmul(layer_1, weights["h2"]), biases["b2"]))
        return tf.matmul(layer_2, weights["out"]) + biases["out"]

    logits = multilayer_perceptron(X)
    loss_op = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=Y))
    train_op = tf.train.AdamOptimizer(learning_rate=0.01).minimize(loss_op)
    correct_pred = tf.equal(tf.argmax(logits, 1), tf.argmax(Y, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_pred, tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = []
        for epoch in range(3):
            for i in range(0, 1000, 100):
                _, loss = sess.run([train_op, loss_op], feed_dict={X: Xtr[i:i + 100],
                                                                   Y: Ytr[i:i + 100]})
                losses.append(float(loss))
        acc, out = sess.run([accuracy, logits], feed_dict={X: Xte, Y: Yte})
    return {"losses": losses[::5], "accuracy": float(acc), "logits_sum": float(np.abs(out).sum())}


def cnn():
    """A raw convolutional net: conv2d / bias_add / max_pool twice, get_shape().as_list() to
    flatten, dropout with a fed keep probability, Adam through compute/apply_gradients."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits()
    rng = np.random.default_rng(2)
    X = tf.placeholder(tf.float32, [None, 64])
    Y = tf.placeholder(tf.float32, [None, 10])
    keep_prob = tf.placeholder(tf.float32)
    weights = {"wc1": tf.Variable(init(rng, 3, 3, 1, 8, scale=0.3)),
               "wc2": tf.Variable(init(rng, 3, 3, 8, 16, scale=0.2)),
               "wd1": tf.Variable(init(rng, 2 * 2 * 16, 32)),
               "out": tf.Variable(init(rng, 32, 10))}
    biases = {"bc1": tf.Variable(tf.zeros([8])), "bc2": tf.Variable(tf.zeros([16])),
              "bd1": tf.Variable(tf.constant(0.1, shape=[32])), "out": tf.Variable(tf.zeros([10]))}

    x = tf.reshape(X, shape=[-1, 8, 8, 1])
    conv1 = maxpool2d(conv2d(x, weights["wc1"], biases["bc1"]))
    conv2 = maxpool2d(conv2d(conv1, weights["wc2"], biases["bc2"]))
    shape = conv2.get_shape().as_list()
    fc1 = tf.reshape(conv2, [-1, shape[1] * shape[2] * shape[3]])
    fc1 = tf.nn.relu(tf.add(tf.matmul(fc1, weights["wd1"]), biases["bd1"]))
    fc1 = tf.nn.dropout(fc1, keep_prob)
    logits = tf.add(tf.matmul(fc1, weights["out"]), biases["out"])
    loss_op = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=Y))
    optimizer = tf.train.AdamOptimizer(learning_rate=0.01)
    grads_and_vars = optimizer.compute_gradients(loss_op)
    train_op = optimizer.apply_gradients(grads_and_vars)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(Y, 1)),
                                      tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = []
        for epoch in range(2):
            for i in range(0, 1000, 100):
                _, loss = sess.run([train_op, loss_op], feed_dict={
                    X: Xtr[i:i + 100], Y: Ytr[i:i + 100], keep_prob: 1.0})
                losses.append(float(loss))
        acc = sess.run(accuracy, feed_dict={X: Xte, Y: Yte, keep_prob: 1.0})
    return {"shape": shape, "n_grads": len(grads_and_vars), "losses": losses[::4],
            "accuracy": float(acc)}


@functools.lru_cache(maxsize=None)
def digits28():
    """The digits at MNIST's size, 28x28 (each pixel 3x3, a 2-pixel border), flattened to 784:
    (train x, train one-hot y, test x, test one-hot y), 1500 and 256 digits."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = np.pad(np.kron((X / 16.0).reshape(-1, 8, 8), np.ones((3, 3))), ((0, 0), (2, 2), (2, 2)))
    X = X.reshape(-1, 784).astype(np.float32)
    Y = np.eye(10, dtype=np.float32)[y]
    return X[:1500], Y[:1500], X[1500:1756], Y[1500:1756]


def cnn_mnist(steps=200, batch_size=128, display_step=10):
    """The classic raw convolutional network at MNIST's size: 5x5 convolutions of 32 and 64
    filters, max pools, a 1024-unit dense layer, dropout, Adam (1e-3); loss and accuracy
    fetched every ``display_step`` steps, test accuracy at the end. The batches wrap around
    the training set, so the last batch of a pass is short (a second fed shape)."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits28()
    rng = np.random.default_rng(4)
    X = tf.placeholder(tf.float32, [None, 784])
    Y = tf.placeholder(tf.float32, [None, 10])
    keep_prob = tf.placeholder(tf.float32)
    weights = {"wc1": tf.Variable(init(rng, 5, 5, 1, 32)),
               "wc2": tf.Variable(init(rng, 5, 5, 32, 64, scale=0.05)),
               "wd1": tf.Variable(init(rng, 7 * 7 * 64, 1024, scale=0.02)),
               "out": tf.Variable(init(rng, 1024, 10, scale=0.05))}
    biases = {"bc1": tf.Variable(tf.zeros([32])), "bc2": tf.Variable(tf.zeros([64])),
              "bd1": tf.Variable(tf.zeros([1024])), "out": tf.Variable(tf.zeros([10]))}

    x = tf.reshape(X, shape=[-1, 28, 28, 1])
    conv1 = maxpool2d(conv2d(x, weights["wc1"], biases["bc1"]))
    conv2 = maxpool2d(conv2d(conv1, weights["wc2"], biases["bc2"]))
    fc1 = tf.reshape(conv2, [-1, weights["wd1"].get_shape().as_list()[0]])
    fc1 = tf.nn.relu(tf.add(tf.matmul(fc1, weights["wd1"]), biases["bd1"]))
    fc1 = tf.nn.dropout(fc1, keep_prob)
    logits = tf.add(tf.matmul(fc1, weights["out"]), biases["out"])
    prediction = tf.nn.softmax(logits)
    loss_op = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=Y))
    train_op = tf.train.AdamOptimizer(learning_rate=0.001).minimize(loss_op)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(prediction, 1), tf.argmax(Y, 1)),
                                      tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        shown = []
        for step in range(1, steps + 1):
            i = (step * batch_size) % len(Xtr)
            feed = {X: Xtr[i:i + batch_size], Y: Ytr[i:i + batch_size], keep_prob: 1.0}
            sess.run(train_op, feed_dict=feed)
            if step % display_step == 0 or step == 1:
                loss, acc = sess.run([loss_op, accuracy], feed_dict=feed)
                shown.append((step, float(loss), float(acc)))
        test_acc = sess.run(accuracy, feed_dict={X: Xte, Y: Yte, keep_prob: 1.0})
    return {"shown": shown, "test_accuracy": float(test_acc)}


def autoencoder():
    """A sigmoid autoencoder 64-32-16-32-64 in name scopes, RMSProp on the squared error."""
    tf.reset_default_graph()
    Xtr, _, Xte, _ = digits()
    rng = np.random.default_rng(3)
    X = tf.placeholder("float", [None, 64])
    with tf.name_scope("encoder"):
        w1, b1 = tf.Variable(init(rng, 64, 32), name="w1"), tf.Variable(init(rng, 32), name="b1")
        w2, b2 = tf.Variable(init(rng, 32, 16), name="w2"), tf.Variable(init(rng, 16), name="b2")
        code = tf.nn.sigmoid(tf.add(tf.matmul(tf.nn.sigmoid(tf.add(tf.matmul(X, w1), b1)), w2),
                                    b2))
    with tf.name_scope("decoder"):
        w3, b3 = tf.Variable(init(rng, 16, 32), name="w1"), tf.Variable(init(rng, 32), name="b1")
        w4, b4 = tf.Variable(init(rng, 32, 64), name="w2"), tf.Variable(init(rng, 64), name="b2")
        y_pred = tf.nn.sigmoid(tf.add(tf.matmul(tf.nn.sigmoid(tf.add(tf.matmul(code, w3), b3)),
                                                w4), b4))
    loss = tf.reduce_mean(tf.pow(X - y_pred, 2))
    optimizer = tf.train.RMSPropOptimizer(0.01).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = []
        for step in range(30):
            i = (step % 10) * 100
            _, l = sess.run([optimizer, loss], feed_dict={X: Xtr[i:i + 100]})
            losses.append(float(l))
        test_loss = sess.run(loss, feed_dict={X: Xte})
    return {"names": [v.name for v in tf.trainable_variables()], "losses": losses[::6],
            "test_loss": float(test_loss)}


def gan(seed, steps=60):
    """The classic GAN: Glorot-initialised weights drawn by tf.random_normal with a tensor
    stddev, generator and discriminator trained by two Adams on their own var_lists."""
    tf.reset_default_graph()
    tf.set_random_seed(seed)
    Xtr, _, _, _ = digits()
    noise_dim, hidden = 16, 32

    def glorot_init(shape):
        return tf.random_normal(shape=shape, stddev=1. / tf.sqrt(shape[0] / 2.))

    weights = {"gen_hidden1": tf.Variable(glorot_init([noise_dim, hidden])),
               "gen_out": tf.Variable(glorot_init([hidden, 64])),
               "disc_hidden1": tf.Variable(glorot_init([64, hidden])),
               "disc_out": tf.Variable(glorot_init([hidden, 1]))}
    biases = {"gen_hidden1": tf.Variable(tf.zeros([hidden])),
              "gen_out": tf.Variable(tf.zeros([64])),
              "disc_hidden1": tf.Variable(tf.zeros([hidden])),
              "disc_out": tf.Variable(tf.zeros([1]))}

    def generator(x):
        h = tf.nn.relu(tf.add(tf.matmul(x, weights["gen_hidden1"]), biases["gen_hidden1"]))
        return tf.nn.sigmoid(tf.add(tf.matmul(h, weights["gen_out"]), biases["gen_out"]))

    def discriminator(x):
        h = tf.nn.relu(tf.add(tf.matmul(x, weights["disc_hidden1"]), biases["disc_hidden1"]))
        return tf.nn.sigmoid(tf.add(tf.matmul(h, weights["disc_out"]), biases["disc_out"]))

    gen_input = tf.placeholder(tf.float32, shape=[None, noise_dim], name="input_noise")
    disc_input = tf.placeholder(tf.float32, shape=[None, 64], name="disc_input")
    gen_sample = generator(gen_input)
    disc_real = discriminator(disc_input)
    disc_fake = discriminator(gen_sample)
    gen_loss = -tf.reduce_mean(tf.log(disc_fake))
    disc_loss = -tf.reduce_mean(tf.log(disc_real) + tf.log(1. - disc_fake))
    gen_vars = [weights["gen_hidden1"], weights["gen_out"], biases["gen_hidden1"],
                biases["gen_out"]]
    disc_vars = [weights["disc_hidden1"], weights["disc_out"], biases["disc_hidden1"],
                 biases["disc_out"]]
    train_gen = tf.train.AdamOptimizer(learning_rate=0.002).minimize(gen_loss, var_list=gen_vars)
    train_disc = tf.train.AdamOptimizer(learning_rate=0.002).minimize(disc_loss, var_list=disc_vars)
    rng = np.random.default_rng(0)          # the data and noise are the same for every seed
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        w0 = sess.run(weights["gen_out"])
        for step in range(steps):
            i = (step % 10) * 100
            z = rng.uniform(-1., 1., size=[100, noise_dim]).astype(np.float32)
            _, _, gl, dl = sess.run([train_gen, train_disc, gen_loss, disc_loss],
                                    feed_dict={disc_input: Xtr[i:i + 100], gen_input: z})
    return {"init_std": float(w0.std()), "gen_loss": float(gl), "disc_loss": float(dl)}


def save_restore(path):
    """Train, save to a checkpoint path, restore into a fresh session (no initializer)."""
    tf.reset_default_graph()
    Xtr, Ytr, Xte, Yte = digits()
    x = tf.placeholder(tf.float32, [None, 64])
    y = tf.placeholder(tf.float32, [None, 10])
    W = tf.Variable(tf.zeros([64, 10]), name="W")
    b = tf.Variable(tf.zeros([10]), name="b")
    global_step = tf.Variable(0, name="global_step", trainable=False)
    logits = tf.matmul(x, W) + b
    cost = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(cost, global_step=global_step)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(y, 1)), "float"))
    saver = tf.train.Saver()

    def steps(sess, n):
        for i in range(0, 100 * n, 100):
            sess.run(train_op, feed_dict={x: Xtr[i:i + 100], y: Ytr[i:i + 100]})

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        steps(sess, 5)
        saved = saver.save(sess, path)
        acc_saved = sess.run(accuracy, feed_dict={x: Xte, y: Yte})
        steps(sess, 5)
        acc_continued = sess.run(accuracy, feed_dict={x: Xte, y: Yte})
    with tf.Session() as sess:
        saver.restore(sess, saved)
        acc_restored = sess.run(accuracy, feed_dict={x: Xte, y: Yte})
        step_restored = int(sess.run(global_step))
        steps(sess, 5)
        acc_after = sess.run(accuracy, feed_dict={x: Xte, y: Yte})
    return {"same_path": saved == path, "acc_saved": float(acc_saved),
            "acc_restored": float(acc_restored), "step_restored": step_restored,
            "acc_continued": float(acc_continued), "acc_after": float(acc_after)}
