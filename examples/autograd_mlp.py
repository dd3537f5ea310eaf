"""The lecture's autograd neural network (autograd's examples/neural_net.py), run on jitgraph:
only the imports changed. The data is scikit-learn's digits instead of MNIST (no download).

    python examples/autograd_mlp.py            # 5 epochs
    python examples/autograd_mlp.py --smoke    # 1 epoch, for CI

Everything runs eagerly: ``grad`` traces each call and evaluates with NumPy, as autograd does,
so nothing is compiled. (Added to the lecture's script: the progress bar or lines, with
examples/s and the ETA, and the total time, from example_utils.)
"""
from __future__ import print_function

import sys
import time

import numpy as onp
import numpy.random as npr

import jitgraph.numpy as np                                 # was: import autograd.numpy as np
from jitgraph import grad                                   # was: from autograd import grad
from jitgraph.optim import adam_minimize as adam            # was: autograd.misc.optimizers
from jitgraph.optim import flatten                          # was: autograd.misc.flatten
from jitgraph.scipy.special import logsumexp                # was: autograd.scipy.special
from example_utils import Progress, done                    # (added: progress, timing)


def load_digits_as_mnist():
    """(N, train_images, train_labels, test_images, test_labels), one-hot labels."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Y = onp.eye(10)[y]
    n = 1437
    return n, X[:n], Y[:n], X[n:], Y[n:]


def init_random_params(scale, layer_sizes, rs=npr.RandomState(0)):
    """Build a list of (weights, biases) tuples,
       one for each layer in the net."""
    return [(scale * rs.randn(m, n),   # weight matrix
             scale * rs.randn(n))      # bias vector
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    """Implements a deep neural network for classification.
       params is a list of (weights, bias) tuples.
       inputs is an (N x D) matrix.
       returns normalized class log-probabilities."""
    for W, b in params:
        outputs = np.dot(inputs, W) + b
        inputs = np.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    """Computes l2 norm of params by flattening them into a vector."""
    flattened, _ = flatten(params)
    return np.dot(flattened, flattened)


def log_posterior(params, inputs, targets, L2_reg):
    log_prior = -L2_reg * l2_norm(params)
    log_lik = np.sum(neural_net_predict(params, inputs) * targets)
    return log_prior + log_lik


def accuracy(params, inputs, targets):
    target_class = np.argmax(targets, axis=1)
    predicted_class = np.argmax(neural_net_predict(params, inputs), axis=1)
    return np.mean(predicted_class == target_class)


if __name__ == '__main__':
    started = time.perf_counter()
    # Model parameters
    layer_sizes = [64, 100, 10]
    L2_reg = 1.0

    # Training parameters
    param_scale = 0.1
    batch_size = 128
    num_epochs = 1 if "--smoke" in sys.argv else 5
    step_size = 0.01

    print("Loading training data...")
    N, train_images, train_labels, test_images, test_labels = load_digits_as_mnist()

    init_params = init_random_params(param_scale, layer_sizes)

    num_batches = int(onp.ceil(len(train_images) / batch_size))

    def batch_indices(iter):
        idx = iter % num_batches
        return slice(idx * batch_size, (idx + 1) * batch_size)

    # Define training objective
    def objective(params, iter):
        idx = batch_indices(iter)
        return -log_posterior(params, train_images[idx], train_labels[idx], L2_reg)

    # Get gradient of objective using autograd.
    objective_grad = grad(objective)

    print("     Epoch     |    Train accuracy  |       Test accuracy  ")

    bar = Progress(num_epochs * num_batches, desc="training (eager)", per_step=batch_size,
                   item="examples")

    def print_perf(params, iter, gradient):
        if iter % num_batches == 0:
            train_acc = accuracy(params, train_images, train_labels)
            test_acc = accuracy(params, test_images, test_labels)
            bar.write("{:15}|{:20}|{:20}".format(iter // num_batches, train_acc, test_acc))
        bar.update()

    # The optimizers provided can optimize lists, tuples, or dicts of parameters.
    optimized_params = adam(objective_grad, init_params, step_size=step_size,
                            num_iters=num_epochs * num_batches, callback=print_perf)
    bar.close()
    final = accuracy(optimized_params, test_images, test_labels)
    print("final test accuracy: {:.4f}".format(float(final)))
    done(started)
