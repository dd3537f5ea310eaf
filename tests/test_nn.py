"""jitgraph.nn: layers against NumPy references, gradients against central differences, and
eager == grad == jit on one small model that uses every layer."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.random as jr

RNG = np.random.default_rng(0)


def conv2d_reference(x, w, b, stride, pad):
    """Direct NHWC convolution loops (w: kh, kw, in, out)."""
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, ho, wo, o))
    for i in range(ho):
        for j in range(wo):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out + b


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1)])
def test_conv2d_matches_loops_and_nchw(stride, pad):
    x = RNG.standard_normal((2, 5, 6, 3))
    w = RNG.standard_normal((3, 3, 3, 4))
    b = RNG.standard_normal(4)
    want = conv2d_reference(x, w, b, stride, pad)
    np.testing.assert_allclose(nn.conv2d(x, w, b, stride, pad), want, rtol=1e-12, atol=1e-12)
    got = nn.conv2d(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), None, stride, pad,
                    layout="NCHW")
    np.testing.assert_allclose(got, (want - b).transpose(0, 3, 1, 2), rtol=1e-12, atol=1e-12)


def test_conv_same_padding_and_pools():
    x = RNG.standard_normal((1, 5, 5, 2))
    assert nn.conv2d(x, RNG.standard_normal((3, 3, 2, 1)), padding="SAME", stride=2).shape \
        == (1, 3, 3, 1)
    x = np.arange(16.0).reshape(1, 4, 4, 1)
    np.testing.assert_array_equal(nn.max_pool2d(x, 2)[0, :, :, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(nn.avg_pool2d(x, 2)[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]])
    np.testing.assert_array_equal(nn.max_pool2d(x, 3, stride=1)[0, :, :, 0], [[10, 11], [14, 15]])


def test_cross_entropy_is_stable_and_exact():
    logits = np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]])
    labels = np.array([0, 1])
    want = [0.0, np.log(np.exp(1) + np.exp(2) + np.exp(3)) - 2.0]
    np.testing.assert_allclose(nn.cross_entropy(logits, labels, reduction="none"), want)
    np.testing.assert_allclose(nn.cross_entropy(logits, labels), np.mean(want))
    # class axis elsewhere (PyTorch's (N, C, d) layout via axis=1)
    l3 = RNG.standard_normal((2, 3, 4))
    y3 = RNG.integers(0, 3, (2, 4))
    ref = -np.take_along_axis(l3 - np.log(np.exp(l3).sum(1, keepdims=True)), y3[:, None], 1)
    np.testing.assert_allclose(nn.cross_entropy(l3, y3, axis=1, reduction="none"), ref[:, 0])
    z = np.array([-800.0, 0.0, 800.0])
    t = np.array([1.0, 0.5, 0.0])
    np.testing.assert_allclose(nn.binary_cross_entropy_with_logits(z, t, reduction="none"),
                               [800.0, np.log(2.0), 800.0])
    assert nn.mse(np.array([1.0, 3.0]), np.array([0.0, 0.0])) == 5.0


def test_loss_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\), got \[3\]"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(TypeError, match="integer class indices"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0.0, 1.0]))
    with pytest.raises(jitgraph.ShapeError, match="labels"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0, 1, 2]))
    with pytest.raises(jitgraph.ShapeError, match="channels"):
        nn.conv2d(np.zeros((1, 4, 4, 2)), np.zeros((3, 3, 3, 1)))
    with pytest.raises(TypeError, match="key="):
        nn.Dropout(0.5)(np.ones(3))
    with pytest.raises(IndexError, match=r"ids must be in \[0, 4\)"):
        nn.Embedding(4, 2, key=jr.key(0))(np.array([4]))


def test_cross_entropy_out_of_range_label_under_jit_is_nan():
    f = jitgraph.jit(lambda z, y: nn.cross_entropy(z, y, reduction="none"))
    out = f(np.zeros((2, 3)), np.array([1, 5]))
    assert np.isfinite(out[0]) and np.isnan(out[1])


@pytest.mark.parametrize("name", ["conv_s2", "conv_nchw", "maxpool", "avgpool", "layernorm",
                                  "attention", "ce", "bce"])
def test_gradients_against_central_differences(name):
    x4 = RNG.standard_normal((1, 4, 4, 2))
    w = RNG.standard_normal((2, 2, 2, 2))
    fns = {
        "conv_s2": (lambda x, w: nn.conv2d(x, w, stride=2, padding=1), (x4, w)),
        "conv_nchw": (lambda x, w: nn.conv2d(x, w, layout="NCHW"),
                      (x4.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1))),
        "maxpool": (lambda x: nn.max_pool2d(x, 2), (x4,)),
        "avgpool": (lambda x: nn.avg_pool2d(x, 3, stride=1, padding=1), (x4,)),
        "layernorm": (lambda x, g, b: nn.layer_norm(x, g, b),
                      (RNG.standard_normal((3, 4)), RNG.standard_normal(4),
                       RNG.standard_normal(4))),
        "attention": (lambda q, k, v: nn.dot_product_attention(
            q, k, v, nn.functional.causal_mask(3)),
            tuple(RNG.standard_normal((2, 3, 2)) for _ in range(3))),
        "ce": (lambda z: nn.cross_entropy(z, np.array([0, 2])), (RNG.standard_normal((2, 3)),)),
        "bce": (lambda z: nn.binary_cross_entropy_with_logits(z, np.array([0.0, 1.0, 0.3])),
                (RNG.standard_normal(3),)),
    }
    f, args = fns[name]
    jitgraph.check_grads(f, args, order=1, modes=("rev",))


class TinyNet(nn.Module):
    """Conv, pool, embedding, layernorm, linear under jit. Every layer adds compiled kernels
    to this test's time: dropout under jit is covered in test_random, attention's pieces
    (batched matmul, softmax, where) in the compiler's own tests, and attention itself by
    check_grads above and the eager transformer test in test_training_examples."""

    def __init__(self, key):
        ks = jr.split(key, 3)
        self.conv = nn.Conv2d(1, 4, 3, padding=1, key=ks[0])
        self.norm = nn.LayerNorm(4)
        self.emb = nn.Embedding(5, 4, key=ks[1])
        self.head = nn.Linear(4, 3, key=ks[2])
        self.drop = nn.Dropout(0.5)

    def __call__(self, x, ids, key=None):
        h = nn.relu(self.conv(x))                       # (b, 4, 4, 4)
        h = nn.max_pool2d(h, 2)                         # (b, 2, 2, 4)
        h = jnp.reshape(h, (x.shape[0], 4, 4)) + self.emb(ids)
        h = self.drop(self.norm(h), key=key, deterministic=key is None)
        return self.head(jnp.mean(h, axis=1))


def test_module_eager_grad_jit_agree():
    net = TinyNet(jr.key(0))
    x = RNG.standard_normal((2, 4, 4, 1)).astype(np.float32)
    ids = np.array([[0, 1, 2, 3], [4, 3, 2, 1]])
    y = np.array([0, 2])

    def loss(net, x, ids, y):
        return nn.cross_entropy(net(x, ids), y)

    vg = jitgraph.value_and_grad(loss)
    l0, g0 = vg(net, x, ids, y)
    l1, g1 = jitgraph.jit(vg)(net, x, ids, y)
    assert type(g0) is TinyNet and type(g1) is TinyNet
    np.testing.assert_allclose(l0, l1, rtol=1e-5)
    leaves0, tree0 = jitgraph.tree_flatten(g0)
    leaves1, tree1 = jitgraph.tree_flatten(g1)
    assert tree0 == tree1 and len(leaves0) == 7
    for a, b in zip(leaves0, leaves1):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5)
    assert g0.conv.weight.shape == net.conv.weight.shape and g0.drop.rate == 0.5


def test_module_is_a_pytree_with_static_fields():
    m = nn.MLP([3, 4, 2], key=jr.key(0))
    leaves, tree = jitgraph.tree_flatten(m)
    assert [l.shape for l in leaves] == [(4,), (3, 4), (2,), (4, 2)]   # bias, weight (sorted)
    m2 = jitgraph.tree_unflatten(tree, [l * 0 for l in leaves])
    assert type(m2) is nn.MLP and m2.activation is nn.relu and not m2(np.ones((1, 3))).any()
    doubled = jitgraph.tree_map(lambda a: 2 * a, m)
    np.testing.assert_array_equal(doubled.layers[0].weight, 2 * m.layers[0].weight)
    assert m.num_parameters() == 3 * 4 + 4 + 4 * 2 + 2
    assert "layers=" in repr(m)


def test_module_children_are_the_attributes_whose_flattening_reaches_an_array():
    """An attribute is a child where flattening it (modules as leaves) reaches an array or a
    module, at any depth and through namedtuples and registered nodes; else it is static (part
    of the tree's definition, so of jit's cache key)."""
    import collections

    from jitgraph.nn.module import _flatten
    from jitgraph.tree import register_pytree_node

    class Box:                              # a registered node holding one child
        def __init__(self, v):
            self.v = v
    register_pytree_node(Box, lambda b: ([b.v], None), lambda aux, ch: Box(ch[0]))
    Pair = collections.namedtuple("Pair", "a b")

    class Holder(nn.Module):
        def __init__(self, size=3):
            self.sizes = (size, 4)
            self.name = "holder"
            self.nothing = None
            self.empty = ()
            self.nested_ints = ((1, 2), (None, "k"))
            self.deep = [[(), {"w": np.ones(2)}]]
            self.pair = Pair(1, np.zeros(3))
            self.static_pair = Pair(1, "x")
            self.boxed = (Box(np.ones(1)),)
            self.blocks = [nn.Linear(2, 2, key=jr.key(0)), 7]
            self.fn = np.tanh
    m = Holder()
    children, (dyn, static) = _flatten(m)
    assert dyn == ("blocks", "boxed", "deep", "pair")
    assert [k for k, _ in static] == ["empty", "fn", "name", "nested_ints", "nothing", "sizes",
                                      "static_pair"]
    assert children[0] is m.blocks and children[3] is m.pair
    leaves, tree = jitgraph.tree_flatten(m)
    # (as in JAX, a child's other leaves are leaves too: the 7 beside the layer, the pair's 1)
    assert [np.shape(a) for a in leaves] == [(2,), (2, 2), (), (1,), (2,), (), (3,)]
    assert leaves[2] == 7 and leaves[5] == 1
    m2 = jitgraph.tree_unflatten(tree, [a + 1 for a in leaves])
    assert m2.sizes == (3, 4) and m2.fn is np.tanh and m2.static_pair == Pair(1, "x")
    np.testing.assert_array_equal(m2.boxed[0].v, 2.0)
    assert jitgraph.tree_flatten(Holder(size=5))[1] != tree
    assert jitgraph.tree_flatten(Holder())[1] == tree
