"""The TensorFlow 1 names tutorials need, one small graph each, against TensorFlow's numbers.

Each ``prog_*`` function is TensorFlow 1 code; the ``TF`` literal next to it is what that
function returned under ``import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()``
(TensorFlow 2.21, CPU) in place of the import below. Random ops are checked by the
properties TensorFlow documents for them (their streams differ from TensorFlow's).
"""
from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import jitgraph.compat.v1 as tf


def _run(fetches, feed=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed)


def _weighted(a) -> list[float]:
    """Two numbers that pin an array: its sum and its index-weighted sum."""
    a = np.asarray(a, np.float64)
    return [float(a.sum()), float((a * np.arange(a.size).reshape(a.shape)).sum())]


# ------------------------------------------------------------------ dtypes and names
def prog_dtypes():
    tf.reset_default_graph()
    x = tf.placeholder("float", name="x")
    c = tf.constant(1.5)
    i = tf.constant([1, 2])
    d = tf.constant(np.float64(2.0))
    s = x * 2 + c                           # Python numbers take the tensor's dtype
    v = tf.Variable(0.5, name="v")
    with tf.name_scope("layer"):
        w = tf.Variable(tf.zeros([2]), name="W")
    with tf.name_scope("layer"):
        w2 = tf.Variable(tf.zeros([2]), name="W")
    out = _run([s, i], {x: 3.0})
    return {"dtypes": [t.dtype.name for t in (x, c, i, d, s, v)],
            "names": [v.name, v.op.name, w.name, w2.name, s.name],
            "value": float(out[0]), "shape": list(np.shape(out[0])),
            "trainable": [t.name for t in tf.trainable_variables()]}


TF_DTYPES = {"dtypes": ["float32", "float32", "int32", "float64", "float32", "float32_ref"],
             "names": ["v:0", "v", "layer/W:0", "layer_1/W:0", "add:0"], "value": 7.5,
             "shape": [], "trainable": ["v:0", "layer/W:0", "layer_1/W:0"]}


def test_dtypes_names_and_scalars():
    got = prog_dtypes()
    assert got["dtypes"][:5] == TF_DTYPES["dtypes"][:5]    # (no reference dtypes: float32)
    assert got["dtypes"][5] == "float32"
    assert got["names"][:4] == TF_DTYPES["names"][:4]      # (operators' op names may differ)
    assert got["value"] == TF_DTYPES["value"] and got["shape"] == TF_DTYPES["shape"]
    assert got["trainable"] == TF_DTYPES["trainable"]


def prog_casts():
    tf.reset_default_graph()
    big = tf.constant([40000, -40000, 7])
    f = tf.constant([2.7, -2.7, 0.5])
    return [v.tolist() for v in _run([
        tf.cast(big, tf.int16), tf.cast(tf.constant([300, -1]), tf.uint8), tf.cast(f, tf.int32),
        tf.cast(tf.constant([True, False]), "float"), tf.to_float(tf.constant([3]))])]


TF_CASTS = [[-25536, 25536, 7], [44, 255], [2, -2, 0], [1.0, 0.0], [3.0]]


def test_casts_wrap_and_truncate_as_tf():
    assert prog_casts() == TF_CASTS


# ------------------------------------------------------------------ math, reductions, shapes
def prog_math():
    tf.reset_default_graph()
    a = tf.constant([[1.0, -5.0, 3.0], [4.0, 2.0, -6.0]])
    x = tf.placeholder(tf.float32, [None, 3])
    out = _run({
        "pow": tf.pow(a, 2), "abs": tf.abs(a), "arg_min": tf.arg_min(a, 1),
        "argmax_default": tf.argmax(a), "argmin_axis": tf.argmin(a, axis=1),
        "sum_ri": tf.reduce_sum(a, reduction_indices=[1]),
        "mean_keep": tf.reduce_mean(a, reduction_indices=0, keep_dims=True),
        "max_keep": tf.reduce_max(a, axis=1, keepdims=True),
        "shape": tf.shape(x), "reshape": tf.reshape(x, [-1]),
        "reshape_dyn": tf.reshape(tf.reshape(x, [-1]), tf.shape(x)),
        "div_int": tf.div(tf.constant(7), tf.constant(2)), "truediv": 7 / tf.constant(2.0),
        "clip": tf.clip_by_value(a, -2.0, 2.0), "where": tf.where(a > 0, a, -a),
    }, {x: np.arange(6, dtype=np.float32).reshape(2, 3)})
    return {k: (v.tolist(), str(np.asarray(v).dtype)) for k, v in sorted(out.items())}


TF_MATH = {
    "abs": ([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], "float32"), "arg_min": ([1, 2], "int64"),
    "argmax_default": ([1, 1, 0], "int64"), "argmin_axis": ([1, 2], "int64"),
    "clip": ([[1.0, -2.0, 2.0], [2.0, 2.0, -2.0]], "float32"), "div_int": (3, "int32"),
    "max_keep": ([[3.0], [4.0]], "float32"), "mean_keep": ([[2.5, -1.5, -1.5]], "float32"),
    "pow": ([[1.0, 25.0, 9.0], [16.0, 4.0, 36.0]], "float32"),
    "reshape": ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "float32"),
    "reshape_dyn": ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "float32"), "shape": ([2, 3], "int32"),
    "sum_ri": ([-1.0, 0.0], "float32"), "truediv": (3.5, "float32"),
    "where": ([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], "float32")}


def test_math_reductions_and_shapes_match_tf():
    assert prog_math() == TF_MATH


def prog_array():
    tf.reset_default_graph()
    a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    i = tf.constant([2, 0])
    v = tf.Variable([1.0, 2.0])
    out = _run({
        "concat": tf.concat([a, a * 2], 1), "stack": tf.stack([a, -a], axis=1),
        "one_hot": tf.one_hot(i, 3), "gather": tf.gather(a, [1, 1, 0]),
        "transpose": tf.transpose(tf.reshape(tf.range(6), [2, 3])),
        "expand": tf.expand_dims(i, 1), "squeeze": tf.squeeze(tf.zeros([1, 2, 1])),
        "tile": tf.tile(i, [2]), "prod": tf.reduce_prod(a, 0), "min": tf.reduce_min(a),
        "fill": tf.fill([2, 2], 7), "linspace": tf.linspace(0.0, 1.0, 3),
        "softplus": tf.nn.softplus(a), "relu6": tf.nn.relu6(a * 2),
        "squared_difference": tf.squared_difference(a, 1.5), "add_n": tf.add_n([a, a, a]),
        "logsumexp": tf.reduce_logsumexp(a, axis=1),
        "size_rank": tf.stack([tf.size(a), tf.rank(a)]),
        "ones": tf.ones(3, tf.int32), "var_grad": tf.gradients(tf.reduce_sum(v * v), v)[0],
        "none_grad": tf.constant(tf.gradients(a, v)[0] is None),
    })
    return {k: (np.asarray(v).tolist(), str(np.asarray(v).dtype)) for k, v in sorted(out.items())}


TF_ARRAY = {
    "add_n": ([[3.0, 6.0], [9.0, 12.0]], "float32"),
    "concat": ([[1.0, 2.0, 2.0, 4.0], [3.0, 4.0, 6.0, 8.0]], "float32"),
    "expand": ([[2], [0]], "int32"), "fill": ([[7, 7], [7, 7]], "int32"),
    "gather": ([[3.0, 4.0], [3.0, 4.0], [1.0, 2.0]], "float32"),
    "linspace": ([0.0, 0.5, 1.0], "float32"),
    "logsumexp": ([2.3132617473602295, 4.31326150894165], "float32"), "min": (1.0, "float32"),
    "none_grad": (True, "bool"), "one_hot": ([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], "float32"),
    "ones": ([1, 1, 1], "int32"), "prod": ([3.0, 8.0], "float32"),
    "relu6": ([[2.0, 4.0], [6.0, 6.0]], "float32"), "size_rank": ([4, 2], "int32"),
    "softplus": ([[1.31326162815094, 2.1269280910491943],
                  [3.0485873222351074, 4.0181498527526855]], "float32"),
    "squared_difference": ([[0.25, 0.25], [2.25, 6.25]], "float32"),
    "squeeze": ([0.0, 0.0], "float32"),
    "stack": ([[[1.0, 2.0], [-1.0, -2.0]], [[3.0, 4.0], [-3.0, -4.0]]], "float32"),
    "tile": ([2, 0, 2, 0], "int32"), "transpose": ([[0, 3], [1, 4], [2, 5]], "int32"),
    "var_grad": ([2.0, 4.0], "float32")}


def test_array_ops_match_tf():
    got, want = prog_array(), TF_ARRAY
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key][1] == want[key][1], key
        np.testing.assert_allclose(got[key][0], want[key][0], rtol=1e-6, err_msg=key)


def test_static_shapes_and_build_time_errors():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    w = tf.Variable(tf.zeros([3, 3, 1, 4]))
    y = tf.nn.max_pool(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"), [1, 2, 2, 1], [1, 2, 2, 1],
                       "VALID")
    assert y.get_shape().as_list() == [None, 4, 4, 4] and y.dtype == tf.float32
    assert tf.reshape(y, [-1, 64]).get_shape().as_list() == [None, 64]
    assert tf.placeholder(tf.float32).get_shape().ndims is None
    with pytest.raises(ValueError, match=r"MatMul 'MatMul'.*\[2, 3\].*\[2, 3\]"):
        tf.matmul(tf.zeros([2, 3]), tf.zeros([2, 3]))
    with pytest.raises(ValueError, match="bias_add: bias of shape"):
        tf.nn.bias_add(tf.zeros([2, 3]), tf.zeros([4]))
    with pytest.raises(TypeError, match="fraction would be lost"):
        tf.constant(2.5, dtype=tf.int32)


def test_string_constants():
    tf.reset_default_graph()
    hello = tf.constant("Hello, TensorFlow!")
    words = tf.constant(["a", "bc"])
    with tf.Session() as sess:
        assert sess.run(hello) == b"Hello, TensorFlow!"          # TF fetches bytes
        assert sess.run(words).tolist() == [b"a", b"bc"]
        assert sess.run([hello, tf.constant(2) * 3]) == [b"Hello, TensorFlow!", 6]
    with pytest.raises(TypeError, match="string tensor"):
        tf.add(hello, hello)


def test_names_not_served_say_why():
    for get, name in [(lambda: tf.get_variable, "tf.get_variable"),
                      (lambda: tf.nn.lrn, "tf.nn.lrn"),
                      (lambda: tf.train.import_meta_graph, "tf.train.import_meta_graph"),
                      (lambda: tf.summary.image, "tf.summary.image"),
                      (lambda: tf.no_such_name, "tf.no_such_name")]:
        with pytest.raises(AttributeError, match=rf"{name} is not served by jitgraph.compat.v1: "
                                                 r"\w+"):
            get()
    with pytest.raises(TypeError, match="complex64.*real numbers only"):
        tf.placeholder("complex64")


# ------------------------------------------------------------------ tf.nn
def _tf_conv_reference(x, k, stride, dilation, padding):
    """TF's conv2d from its definition: SAME pads the dilated window's extent, the extra
    after; one output element at a time."""
    kh, kw = k.shape[:2]
    eff = [(kk - 1) * d + 1 for kk, d in zip((kh, kw), dilation)]
    pads = []
    for n, e, s in zip(x.shape[1:3], eff, stride):
        total = max((-(-n // s) - 1) * s + e - n, 0) if padding == "SAME" else 0
        pads.append((total // 2, total - total // 2))
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    oh, ow = [(n - e) // s + 1 for n, e, s in zip(xp.shape[1:3], eff, stride)]
    out = np.zeros((x.shape[0], oh, ow, k.shape[3]))
    for b, i, j in np.ndindex(x.shape[0], oh, ow):
        win = xp[b, i * stride[0]:i * stride[0] + eff[0]:dilation[0],
                 j * stride[1]:j * stride[1] + eff[1]:dilation[1]]
        out[b, i, j] = np.einsum("hwc,hwco->o", win, k)
    return out


@pytest.mark.parametrize("stride,dilation,padding", [((1, 1), (2, 2), "SAME"),
                                                     ((2, 1), (1, 3), "SAME"),
                                                     ((1, 2), (2, 1), "VALID")])
def test_dilated_conv2d_is_the_definition(stride, dilation, padding):
    rng = np.random.default_rng(sum(dilation))
    x, k = rng.standard_normal((2, 9, 8, 3)), rng.standard_normal((3, 2, 3, 4))
    tf.reset_default_graph()
    y = tf.nn.conv2d(tf.constant(x), tf.constant(k), strides=[1, *stride, 1], padding=padding,
                     dilations=[1, *dilation, 1])
    np.testing.assert_allclose(_run(y), _tf_conv_reference(x, k, stride, dilation, padding),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape,kernel,stride,padding", [((7, 8), 3, 2, "SAME"),
                                                         ((8, 8), 4, 2, "SAME"),
                                                         ((9, 6), 2, 3, "VALID")])
def test_conv2d_transpose_is_the_gradient_of_conv2d(monkeypatch, jit_after_s, shape, kernel,
                                                    stride, padding):
    """TensorFlow's definition (Conv2DBackpropInput): the gradient of conv2d with respect to
    its input, for the output_shape given (7 and 8 both convolve to 4 at stride 2); and the
    filter's gradient through it."""
    import jitgraph
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((2, *shape, 3))
    k = rng.standard_normal((kernel, kernel, 3, 5))
    strides = [1, stride, stride, 1]

    def conv(x, k):
        tf.reset_default_graph()
        return _run(tf.nn.conv2d(tf.constant(x), tf.constant(k), strides, padding))
    y = rng.standard_normal(np.shape(conv(x, k)))
    tf.reset_default_graph()
    kv = tf.Variable(k)
    up = tf.nn.conv2d_transpose(tf.constant(y), kv, output_shape=[2, *shape, 3],
                                strides=strides, padding=padding)
    loss = tf.reduce_sum(up * tf.constant(x))
    got, dk = _run([up, tf.gradients(loss, [kv])[0]])
    # <conv2d_transpose(y, k), x> = <y, conv2d(x, k)>, so its derivative in k is conv2d's
    flat = lambda kk: np.sum(y * _tf_conv_reference(x, kk, (stride,) * 2, (1, 1), padding))
    want_dk = jitgraph.grad(lambda kk: jitgraph.numpy.sum(
        jitgraph.numpy.asarray(y) * jitgraph.lax.conv_general_dilated(
            x, kk, (stride, stride), [tuple(p) for p in _pads(shape, kernel, stride, padding)],
            dimension_numbers=("NHWC", "HWIO", "NHWC"))))(k)
    _, pull = jitgraph.vjp(lambda xx: jitgraph.lax.conv_general_dilated(
        xx, k, (stride, stride), _pads(shape, kernel, stride, padding),
        dimension_numbers=("NHWC", "HWIO", "NHWC")), x)
    np.testing.assert_allclose(got, np.asarray(pull(y)[0]), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dk, np.asarray(want_dk), rtol=1e-10, atol=1e-10)
    assert np.isclose(np.sum(got * x), flat(k))


def _pads(shape, kernel, stride, padding):
    if padding == "VALID":
        return [(0, 0), (0, 0)]
    totals = [max((-(-n // stride) - 1) * stride + kernel - n, 0) for n in shape]
    return [(t // 2, t - t // 2) for t in totals]


def test_conv2d_transpose_checks_its_output_shape():
    tf.reset_default_graph()
    y, k = tf.constant(np.ones((1, 4, 4, 2))), tf.constant(np.ones((3, 3, 5, 2)))
    with pytest.raises(Exception, match="convolves to"):
        _run(tf.nn.conv2d_transpose(y, k, [1, 10, 8, 5], [1, 2, 2, 1], "SAME"))


def prog_nn():
    tf.reset_default_graph()
    x = tf.constant(np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2) / 10)
    k = tf.constant((np.arange(54, dtype=np.float32).reshape(3, 3, 2, 3) - 27) / 30)
    out = _run({
        "conv_same_s2": tf.nn.conv2d(x, k, strides=[1, 2, 2, 1], padding="SAME"),
        "conv_valid": tf.nn.conv2d(x, k, strides=[1, 1, 1, 1], padding="VALID"),
        "max_same": tf.nn.max_pool(-x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME"),
        "avg_same": tf.nn.avg_pool(x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME"),
        "bias_add": tf.nn.bias_add(x, tf.constant([1.0, -1.0])),
        "sigmoid_xent": tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.constant([0.0, 1.0, 1.0]), logits=tf.constant([-50.0, 0.5, 30.0])),
        "sparse_xent": tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.constant([2, 0]), logits=tf.constant([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0]])),
        "l2": tf.nn.l2_loss(tf.constant([1.0, 2.0, 3.0])),
    })
    return {key: [list(np.shape(v))] + _weighted(v) for key, v in sorted(out.items())}


TF_NN = {
    "avg_same": [[1, 3, 3, 2], 51.29999953508377, 570.8999971747398],
    "bias_add": [[1, 5, 5, 2], 122.5, 4017.500002384186],
    "conv_same_s2": [[1, 3, 3, 3], -11.269997715950012, -1405.6232875585556],
    "conv_valid": [[1, 3, 3, 3], 188.73000240325928, 2428.110016822815],
    "l2": [[], 7.0, 0.0], "max_same": [[1, 3, 3, 2], -29.69999998062849, -368.09999895840883],
    "sigmoid_xent": [[3], 0.4740769863129598, 0.47407698631305334],
    "sparse_xent": [[2], 0.9590505957603455, 0.5514446496963501]}


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
def test_nn_ops_match_tf(monkeypatch, jit_after_s):
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    got = prog_nn()
    assert sorted(got) == sorted(TF_NN)
    for key, (shape, total, weighted) in TF_NN.items():
        assert got[key][0] == shape, key
        np.testing.assert_allclose(got[key][1:], [total, weighted], rtol=1e-5, err_msg=key)


def test_dropout_keeps_with_probability_and_scales():
    tf.reset_default_graph()
    x = tf.ones([200, 50])
    keep_prob = tf.placeholder(tf.float32)
    y = tf.nn.dropout(x, keep_prob)
    with tf.Session() as sess:
        half = sess.run(y, {keep_prob: 0.5})
        full = sess.run(y, {keep_prob: 1.0})
        again = sess.run(y, {keep_prob: 0.5})
    assert set(np.unique(half).tolist()) == {0.0, 2.0}          # kept entries scaled by 1/p
    assert abs((half > 0).mean() - 0.5) < 0.03                   # 10000 draws: 5 sigma
    assert (full == 1.0).all() and not np.array_equal(half, again)   # a new mask each run


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
def test_dropout_with_keep_prob_one_passes_its_input_unchanged(monkeypatch, jit_after_s):
    """keep_prob 1 keeps every entry, divided by 1: the input's values bit for bit (NaN, inf,
    -0.0 included), eagerly (where nothing is drawn) and compiled (where the mask is drawn);
    the run before it draws the mask it draws in a session without it."""
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    x_val = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    x_val[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    runs = []
    for keeps in ([0.5, 0.5], [0.5, 1.0, 0.5]):
        tf.reset_default_graph()
        tf.set_random_seed(7)
        x = tf.placeholder(tf.float32, [None, 30])
        keep_prob = tf.placeholder(tf.float32)
        y = tf.nn.dropout(x, keep_prob)
        with tf.Session() as sess:
            runs.append([sess.run(y, {x: x_val, keep_prob: p}) for p in keeps])
    assert runs[1][1].tobytes() == x_val.tobytes()
    assert runs[1][0].tobytes() == runs[0][0].tobytes()


def test_random_ops_with_tensor_stddev_follow_their_distribution():
    tf.reset_default_graph()
    tf.set_random_seed(3)
    shape = [400, 50]
    a = tf.random_normal(shape=shape, stddev=1. / tf.sqrt(shape[0] / 2.), mean=1.0)
    t = tf.truncated_normal([20000], stddev=2.0)
    u = tf.random_uniform([20000], -1.0, 3.0)
    av, tv, uv = _run([a, t, u])
    assert a.dtype == tf.float32 and av.shape == (400, 50)
    assert abs(av.std() - 1 / np.sqrt(200)) < 0.003 and abs(av.mean() - 1.0) < 0.003
    assert np.abs(tv).max() <= 4.0 and abs(tv.std() - 2.0 * 0.8796) < 0.03   # TF doc: 2 sigma
    assert uv.min() >= -1.0 and uv.max() < 3.0 and abs(uv.mean() - 1.0) < 0.03


# ------------------------------------------------------------------ tf.train
def prog_optimizers():
    results = {}
    for key, make in [
            ("rmsprop", lambda: tf.train.RMSPropOptimizer(0.1)),
            ("rmsprop_centered_momentum", lambda: tf.train.RMSPropOptimizer(
                0.05, decay=0.8, momentum=0.5, epsilon=1e-6, centered=True)),
            ("momentum_nesterov", lambda: tf.train.MomentumOptimizer(0.1, 0.9,
                                                                     use_nesterov=True)),
            ("adagrad", lambda: tf.train.AdagradOptimizer(0.3)),
            ("adam", lambda: tf.train.AdamOptimizer(0.2))]:
        tf.reset_default_graph()
        w = tf.Variable([1.0, -2.0, 0.5])
        loss = tf.reduce_sum(tf.square(w - tf.constant([0.5, 0.5, 0.5])) * [1.0, 3.0, 10.0])
        opt = make()
        grads_and_vars = opt.compute_gradients(loss)
        clipped = [(tf.clip_by_value(g, -4.0, 4.0), v) for g, v in grads_and_vars]
        step = tf.Variable(0, trainable=False)
        train_op = opt.apply_gradients(clipped, global_step=step)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(5):
                sess.run(train_op)
            results[key] = [float(v) for v in sess.run(w)] + [int(sess.run(step))]
    return results


TF_OPTIMIZERS = {
    "rmsprop": [0.6520912647247314, -1.0545724630355835, 0.5, 5],
    "rmsprop_centered_momentum": [0.6415023803710938, -1.1965734958648682, 0.5, 5],
    "momentum_nesterov": [0.29214125871658325, 1.0218663215637207, 0.5, 5],
    "adagrad": [0.5111171007156372, -1.0321435928344727, 0.5, 5],
    "adam": [0.24479332566261292, -1.0000030994415283, 0.5, 5]}


def test_optimizers_and_apply_gradients_match_tf():
    got = prog_optimizers()
    assert sorted(got) == sorted(TF_OPTIMIZERS)
    for key, want in TF_OPTIMIZERS.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-6, err_msg=key)


def test_saver_paths_and_errors(tmp_path):
    tf.reset_default_graph()
    v = tf.Variable([1.0, 2.0], name="v")
    step = tf.Variable(10, name="step", trainable=False)
    saver = tf.train.Saver(max_to_keep=1)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = saver.save(sess, str(tmp_path / "model"), global_step=step)
        sess.run(v.assign([5.0, 6.0]))
        second = saver.save(sess, str(tmp_path / "model"), global_step=20)
    assert first.endswith("model-10") and second.endswith("model-20")
    assert tf.train.latest_checkpoint(str(tmp_path)) == second
    assert not (tmp_path / "model-10.npz").exists()               # max_to_keep=1
    with tf.Session() as sess:
        saver.restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
        assert sess.run(v).tolist() == [5.0, 6.0] and sess.run(step) == 10
        with pytest.raises(tf.errors.NotFoundError, match="Failed to find"):
            saver.restore(sess, str(tmp_path / "nothing"))
    tf.reset_default_graph()
    other = tf.Variable([0.0], name="other")
    with tf.Session() as sess, pytest.raises(tf.errors.NotFoundError, match="Key other"):
        tf.train.Saver().restore(sess, second)


def test_counter_assign_eval_and_a_fed_learning_rate():
    tf.reset_default_graph()
    state = tf.Variable(0, name="counter")
    update = tf.assign(state, tf.add(state, tf.constant(1)))
    w = tf.Variable(1.0)
    lr = tf.placeholder(tf.float32, [])
    train_op = tf.train.GradientDescentOptimizer(lr).minimize(tf.square(w))
    sess = tf.InteractiveSession()
    sess.run(tf.global_variables_initializer())
    seen = [int(sess.run(update)) for _ in range(3)]
    train_op.run(feed_dict={lr: 0.25})                 # w -= 0.25 * 2w
    assert seen == [1, 2, 3] and state.eval() == 3 and w.eval() == 0.5
    sess.close()
    assert state.dtype == tf.int32 and update.name == "counter/Assign:0"


# ------------------------------------------------------------------ tf.summary
def test_summaries_are_a_noop_with_one_notice_without_a_writer(tmp_path, monkeypatch):
    from jitgraph.compat import summary as summary_mod
    monkeypatch.setitem(sys.modules, "tensorboardX", None)       # import fails: not installed
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(summary_mod._NOTICE, "given", False)
    tf.reset_default_graph()
    loss = tf.reduce_sum(tf.constant([1.0, 2.0]))
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("values", tf.constant([1.0, 2.0, 3.0]))
    merged = tf.summary.merge_all()
    with tf.Session() as sess:
        s = sess.run(merged)
        with pytest.warns(UserWarning, match="pip install tensorboardX"):
            writer = tf.summary.FileWriter(str(tmp_path), sess.graph)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                       # no second notice
            again = tf.summary.FileWriter(str(tmp_path / "b"))
            writer.add_summary(s, 0)
            again.add_summary(s, 1)
        writer.close()
    assert [(t, k) for t, k, _ in s.values] == [("loss", "scalar"), ("values", "histogram")]
    assert float(s.values[0][2]) == 3.0 and list(tmp_path.iterdir()) == [tmp_path / "b"]


@pytest.mark.parametrize("backend", ["tensorboardX", "tensorboard"])
def test_summaries_written_as_event_files(tmp_path, monkeypatch, backend):
    pytest.importorskip(backend)
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    if backend == "tensorboard":
        monkeypatch.setitem(sys.modules, "tensorboardX", None)   # tensorboard's own writer
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [])
    tf.summary.scalar("x", x)
    tf.summary.histogram("h", tf.stack([x, 2 * x]))
    merged = tf.summary.merge_all()
    with tf.Session() as sess:
        writer = tf.summary.FileWriter(str(tmp_path), sess.graph)
        assert writer.kind == backend
        for step in range(3):
            writer.add_summary(sess.run(merged, {x: float(step)}), step)
        writer.close()
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert acc.Histograms("h")[-1].histogram_value.max == 4.0


@pytest.mark.parametrize("jit_after_s", [float("inf"), 0.0], ids=["eager", "compiled"])
def test_moments_batch_normalization_and_embedding_lookup(monkeypatch, jit_after_s):
    """TensorFlow's documented formulas: moments' variance is the mean squared difference
    from the mean; batch_normalization is x * inv + (offset - mean * inv) with
    inv = rsqrt(variance + eps) * scale; embedding_lookup gathers rows. Gradients through
    them are the formulas' (float64, against jitgraph.grad of the same NumPy-style code)."""
    import jitgraph
    import jitgraph.numpy as jnp
    monkeypatch.setattr("jitgraph.compat.session.JIT_AFTER_S", jit_after_s)
    rng = np.random.default_rng(5)
    xv, sv, ov = rng.standard_normal((4, 3, 5)), rng.random(5) + 0.5, rng.standard_normal(5)
    table, ids = rng.standard_normal((6, 3)), np.array([[4, 0], [4, 5]])
    tf.reset_default_graph()
    x = tf.Variable(xv)
    mean, var = tf.nn.moments(x, axes=[0, 1])
    mk, vk = tf.nn.moments(x, axes=[2], keep_dims=True)
    y = tf.nn.batch_normalization(x, mean, var, tf.constant(ov), tf.constant(sv), 1e-3)
    y0 = tf.nn.batch_normalization(x, mk, vk, None, None, 1e-3)
    e = tf.nn.embedding_lookup([tf.constant(table)], tf.constant(ids))
    loss = tf.reduce_sum(y * y * tf.constant(np.arange(5.0)))
    got = _run([mean, var, vk, y, y0, e, tf.gradients(loss, [x])[0]])
    m, v = xv.mean(axis=(0, 1)), ((xv - xv.mean(axis=(0, 1))) ** 2).mean(axis=(0, 1))
    inv = sv / np.sqrt(v + 1e-3)
    vk_want = xv.var(axis=2, keepdims=True)
    want = [m, v, vk_want, xv * inv + (ov - m * inv),
            (xv - xv.mean(axis=2, keepdims=True)) / np.sqrt(vk_want + 1e-3), table[ids]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)

    def f(xx):
        mm = jnp.mean(xx, axis=(0, 1))
        vv = jnp.mean((xx - mm) ** 2, axis=(0, 1))
        yy = (xx - mm) / jnp.sqrt(vv + 1e-3) * sv + ov
        return jnp.sum(yy * yy * np.arange(5.0))
    np.testing.assert_allclose(got[-1], np.asarray(jitgraph.grad(f)(xv)), rtol=1e-9, atol=1e-11)
