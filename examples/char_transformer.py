"""A small decoder-only transformer trained on text that ships with Python: the language
reference in ``pydoc_data.topics`` (the text ``help()`` shows), character by character.

    python examples/char_transformer.py             # 2 layers, d=64, 4 heads, 600 Adam steps
    python examples/char_transformer.py --smoke     # a tiny model for 20 steps, for CI

It says when it compiles the training step (and the validation and sampling functions) and
how long that took, and shows the training's progress with tokens/s and the ETA (a bar on a
terminal, plain lines elsewhere). Reports tokens per second of the compiled training step, the
validation loss next to the text's unigram entropy (what a model that ignores context can
reach), and samples; the loss curve goes to ``outputs/char_transformer.png`` (``--out DIR``,
``--no-plot``).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.optim as optim
import jitgraph.random as jr
from example_utils import (Progress, add_output_arguments, compile_on_first_call,
                           compiling, finish)


def load_text() -> str:
    from pydoc_data.topics import topics
    text = "\n\n".join(topics[k] for k in sorted(topics))
    return "".join(c for c in text if c == "\n" or 32 <= ord(c) < 127)


class Block(nn.Module):
    def __init__(self, dim, heads, key):
        k1, k2, k3 = jr.split(key, 3)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.Attention(dim, heads, key=k1, causal=True)
        self.fc1 = nn.Linear(dim, 4 * dim, key=k2)
        self.fc2 = nn.Linear(4 * dim, dim, key=k3)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(nn.gelu(self.fc1(self.ln2(x))))


class CharTransformer(nn.Module):
    def __init__(self, vocab, context, dim, heads, layers, key):
        ks = jr.split(key, layers + 3)
        self.tok = nn.Embedding(vocab, dim, key=ks[0])
        self.pos = np.asarray(jr.normal(ks[1], (context, dim), np.float32)) * np.float32(0.02)
        self.tok.weight = self.tok.weight * np.float32(0.02)
        self.blocks = [Block(dim, heads, k) for k in ks[3:]]
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, key=ks[2])

    def __call__(self, ids):                    # ids: (batch, time) int
        h = self.tok(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln(h))


def loss_fn(model, ids, targets):
    return nn.cross_entropy(model(ids), targets)


def batches(data, batch, context, rng):
    starts = rng.integers(0, len(data) - context - 1, batch)
    x = np.stack([data[s:s + context] for s in starts])
    y = np.stack([data[s + 1:s + context + 1] for s in starts])
    return x, y


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=None)
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    add_output_arguments(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    steps = args.steps or (20 if args.smoke else 600)
    context = args.context or (32 if args.smoke else 64)
    dim = args.dim or (32 if args.smoke else 64)

    text = load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], np.int64)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    counts = np.bincount(train, minlength=len(chars)) / len(train)
    unigram = -float(np.sum(counts[counts > 0] * np.log(counts[counts > 0])))
    print(f"text: {len(text)} characters of Python's language reference, vocabulary "
          f"{len(chars)}; unigram entropy {unigram:.3f} nats/char")

    model = CharTransformer(len(chars), context, dim, args.heads, args.layers, jr.key(args.seed))
    # (no gradient clipping: it adds a norm reduction per parameter array to the compiled
    # step, and the warm-up keeps this small model's first steps stable without it)
    opt = optim.adam(optim.warmup_cosine_decay(args.lr, max(steps // 10, 1), steps))
    state = opt.init(model)
    step = jitgraph.train_step(loss_fn, opt)
    evaluate = compile_on_first_call(jitgraph.jit(loss_fn), "the validation loss (forward only)")
    print(f"model: {args.layers} layers, dim {dim}, {args.heads} heads, context {context}, "
          f"{model.num_parameters()} parameters; batch {args.batch}, {steps} Adam steps")

    rng = np.random.default_rng(args.seed)
    losses = []
    x, y = batches(train, args.batch, context, rng)
    with compiling(f"the training step (forward, backward, Adam; batch {args.batch} x "
                   f"{context} characters)"):
        model, state, loss = step(model, state, x, y)
    losses.append(float(loss))
    with Progress(steps - 1, desc="training", per_step=args.batch * context,
                  item="tokens") as bar:
        for _ in range(steps - 1):
            x, y = batches(train, args.batch, context, rng)
            model, state, loss = step(model, state, x, y)
            losses.append(float(loss))
            bar.update(loss=losses[-1])
    vrng = np.random.default_rng(1234)
    val_loss = float(np.mean([evaluate(model, *batches(val, args.batch, context, vrng))
                              for _ in range(5 if args.smoke else 20)]))
    print(f"train loss {np.mean(losses[:5]):.3f} -> {np.mean(losses[-5:]):.3f}; validation "
          f"loss {val_loss:.3f} nats/char vs unigram entropy {unigram:.3f}")

    forward = compile_on_first_call(jitgraph.jit(lambda m, ids: m(ids)[:, -1]),
                                    "the sampling forward pass (one sequence)")
    ctx = list(data[split:split + context])
    out = []
    srng = np.random.default_rng(args.seed)
    n_sample = 40 if args.smoke else 300
    with Progress(n_sample, desc="sampling", unit="character") as bar:
        for _ in range(n_sample):
            logits = np.asarray(forward(model, np.array([ctx[-context:]])))[0].astype(np.float64)
            p = np.exp(logits - logits.max())
            nxt = int(srng.choice(len(chars), p=p / p.sum()))
            out.append(chars[nxt])
            ctx.append(nxt)
            bar.update()
    print("sample:\n" + "".join(out))
    every = max(1, len(losses) // 100)
    finish(args, "char_transformer", {"training loss (nats/char)": losses[::every]},
           "char transformer", xlabel="step", xs=range(1, len(losses) + 1, every),
           started=started)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), "the loss did not go down"
    if not args.smoke:
        assert val_loss < unigram, (val_loss, unigram)
    return 0


if __name__ == "__main__":
    sys.exit(main())
