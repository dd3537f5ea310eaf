"""Neural networks: activations, initializers, ``Module`` layers, losses.

Activations and losses are pure functions; layers are ``Module`` pytrees (their arrays are what
``grad``, ``jit`` and the optimizers see). Everything is written with ``jitgraph.numpy``, so it
runs eagerly, under ``grad`` and under ``jit`` alike.
"""
from . import functional, initializers  # noqa: F401
from .activations import (elu, gelu, leaky_relu, log_sigmoid, log_softmax, logsumexp,  # noqa: F401
                          one_hot, relu, selu, sigmoid, silu, softmax, softplus,
                          standardize, swish)
from .functional import (avg_pool2d, conv2d, dot_product_attention, layer_norm,  # noqa: F401
                         max_pool2d)
from .layers import (Attention, AvgPool2d, Conv2d, Dropout, Embedding, LayerNorm,  # noqa: F401
                     Linear, MaxPool2d, MLP, MultiHeadAttention, Sequential)
from .losses import (binary_cross_entropy_with_logits, cross_entropy, mse, mse_loss,  # noqa: F401
                     nll_loss, softmax_cross_entropy)
from .module import Module  # noqa: F401
from ..random import dropout  # noqa: F401
