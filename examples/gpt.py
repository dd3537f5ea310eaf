"""A GPT-style decoder-only transformer (learned positions, pre-layernorm, causal attention,
GELU MLP, tied or untied output layer, AdamW) trained on bytes of Python's own standard
library source, the "GPT" version of char_transformer.py.

    python examples/gpt.py                 # 4 layers, d=128, 4 heads, context 128, 1,500
                                           # steps (about 2 minutes on a 2-core machine)
    python examples/gpt.py --smoke         # a tiny model for a few steps, for CI
    python examples/gpt.py --untied        # a separate output matrix instead of the embedding's
    python examples/gpt.py --attention library   # nn.dot_product_attention instead of the
                                                 # explicit softmax(q @ k.T / sqrt(d) + mask) @ v

It says when it compiles the training step (about 15 s at the defaults on a 2-core machine;
with the step in the disk cache, under a second) and how long that took, then shows the
training's progress with tokens/s and the ETA (a bar on a terminal, plain lines elsewhere).
Reports the training step's tokens per second, the validation loss next to the text's unigram
entropy (what a model that ignores context reaches; ``--eval-batches 0`` skips validation), and
a sample.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

import jitgraph
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.optim as optim
import jitgraph.random as jr
from jitgraph.nn import initializers as init
from example_utils import Progress, compile_on_first_call, compiling, done

VOCAB = 256                          # bytes
# stdlib modules whose source is the training text (read from disk, so nothing is downloaded):
# about 1 MB of Python, documentation strings and comments
TEXT_MODULES = ("argparse", "textwrap", "string", "typing", "dataclasses", "functools",
                "inspect", "enum", "pathlib", "collections", "contextlib", "heapq", "fractions",
                "statistics", "difflib", "pprint", "calendar", "logging", "ast", "random")
VAL_SHARE = 0.1                       # the last tenth of each module is held out


def load_text(modules=TEXT_MODULES) -> list[bytes]:
    """The source files of standard-library modules, as bytes, one per module installed."""
    parts = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, "rb") as f:
                parts.append(f.read())
    if not parts:
        raise RuntimeError(f"none of the modules {modules} has its .py source installed")
    return parts


def split_text(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) bytes as int64 token ids: the last ``VAL_SHARE`` of each module
    held out, so validation reads the same kind of text as training."""
    cut = [int(len(p) * (1 - VAL_SHARE)) for p in parts]
    train = b"\n".join(p[:c] for p, c in zip(parts, cut))
    val = b"\n".join(p[c:] for p, c in zip(parts, cut))
    return (np.frombuffer(train, np.uint8).astype(np.int64),
            np.frombuffer(val, np.uint8).astype(np.int64))


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = VOCAB
    context: int = 128
    dim: int = 128
    heads: int = 4
    layers: int = 4
    tied: bool = True              # logits = h @ embedding.T (GPT-2) instead of a head matrix
    attention: str = "explicit"    # or "library": nn.dot_product_attention


def causal_bias(t: int, dtype=np.float32) -> np.ndarray:
    """0 where query i may attend to key j (j <= i), a large negative number elsewhere."""
    return np.where(np.tril(np.ones((t, t), bool)), 0.0, np.finfo(dtype).min / 2).astype(dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, key):
        k1, k2 = jr.split(key, 2)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, key=k1, weight_init=init.normal(0.02))
        # GPT-2: residual projections scaled by 1/sqrt(2 * layers)
        self.proj = nn.Linear(cfg.dim, cfg.dim, key=k2,
                              weight_init=init.normal(0.02 / math.sqrt(2 * cfg.layers)))
        self.heads, self.attention = cfg.heads, cfg.attention

    def __call__(self, x):
        b, t, d = x.shape
        h = self.heads
        qkv = jnp.transpose(jnp.reshape(self.qkv(x), (b, t, 3, h, d // h)), (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]                       # (b, h, t, d/h)
        if self.attention == "library":
            y = nn.dot_product_attention(q, k, v, nn.functional.causal_mask(t))
        else:
            scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(d // h) + causal_bias(t, x.dtype)
            y = nn.softmax(scores, axis=-1) @ v
        return self.proj(jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (b, t, d)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, key):
        k1, k2, k3 = jr.split(key, 3)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg, k1)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim, key=k2, weight_init=init.normal(0.02))
        self.proj = nn.Linear(4 * cfg.dim, cfg.dim, key=k3,
                              weight_init=init.normal(0.02 / math.sqrt(2 * cfg.layers)))

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(nn.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, key):
        ks = jr.split(key, cfg.layers + 3)
        self.tok = nn.Embedding(cfg.vocab, cfg.dim, key=ks[0])
        self.tok.weight = self.tok.weight * np.float32(0.02)
        pos = jr.normal(ks[1], (cfg.context, cfg.dim), np.float32)      # learned positions
        self.pos = np.asarray(pos) * np.float32(0.02)
        self.blocks = [Block(cfg, k) for k in ks[3:]]
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = None if cfg.tied else nn.Linear(cfg.dim, cfg.vocab, key=ks[2], bias=False,
                                                    weight_init=init.normal(0.02))

    def __call__(self, ids):                    # ids: (batch, time) int -> (batch, time, vocab)
        h = self.tok(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            h = b(h)
        h = self.ln(h)
        return h @ jnp.transpose(self.tok.weight) if self.head is None else self.head(h)


def loss_fn(model, ids, targets):
    return nn.cross_entropy(model(ids), targets)


def batches(data: np.ndarray, batch: int, context: int, rng):
    starts = rng.integers(0, len(data) - context - 1, batch)
    x = np.stack([data[s:s + context] for s in starts])
    y = np.stack([data[s + 1:s + context + 1] for s in starts])
    return x, y


def train(cfg: GPTConfig, steps: int, batch: int, lr: float = 3e-3, weight_decay: float = 0.1,
          seed: int = 0) -> dict:
    """Train ``steps`` AdamW steps; returns the losses, the model, the first batch and timings."""
    train_data, val_data = split_text(load_text())
    data = np.concatenate([train_data, val_data])
    model = GPT(cfg, jr.key(seed))
    opt = optim.adamw(optim.warmup_cosine_decay(lr, max(steps // 10, 1), steps),
                      weight_decay=weight_decay)
    state = opt.init(model)
    step = jitgraph.train_step(loss_fn, opt)
    rng = np.random.default_rng(seed)
    losses = []
    first_batch = batches(train_data, batch, cfg.context, rng)
    t0 = time.perf_counter()
    with compiling(f"the training step (forward, backward, AdamW; batch {batch} x "
                   f"{cfg.context} tokens)"):
        model, state, loss = step(model, state, *first_batch)
    compile_s = time.perf_counter() - t0
    losses.append(float(loss))
    t1 = time.perf_counter()
    with Progress(steps - 1, desc="training", per_step=batch * cfg.context,
                  item="tokens") as bar:
        for _ in range(1, steps):
            model, state, loss = step(model, state, *batches(train_data, batch, cfg.context, rng))
            losses.append(float(loss))
            bar.update(loss=losses[-1])
    train_s = time.perf_counter() - t1
    return {"config": cfg, "losses": losses, "model": model, "first_batch": first_batch,
            "compile_s": compile_s, "train_s": train_s, "data": data, "val": val_data,
            "train": train_data}


def unigram_entropy(data: np.ndarray) -> float:
    p = np.bincount(data, minlength=VOCAB) / len(data)
    p = p[p > 0]
    return -float(np.sum(p * np.log(p)))


def run(argv=None) -> dict:
    """The command line: train, report, check that the loss went down; returns ``train``'s dict
    (with ``val_loss``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, few steps (for CI)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--context", type=int, default=None)
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--untied", action="store_true", help="an output matrix of its own")
    ap.add_argument("--attention", choices=("explicit", "library"), default="explicit")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=0.8,
                    help="sampling temperature (1: the model's distribution; lower: likelier "
                         "bytes)")
    ap.add_argument("--eval-batches", type=int, default=None,
                    help="validation batches (0: none; validation compiles a program of its own)")
    args = ap.parse_args(argv)
    small = args.smoke
    cfg = GPTConfig(context=args.context or (16 if small else 128),
                    dim=args.dim or (32 if small else 128), heads=args.heads or (2 if small else 4),
                    layers=args.layers or (2 if small else 4), tied=not args.untied,
                    attention=args.attention)
    steps = args.steps or (12 if small else 1500)
    batch = args.batch or (4 if small else 16)
    print(f"model: GPT, {cfg.layers} layers, dim {cfg.dim}, {cfg.heads} heads, context "
          f"{cfg.context}, vocabulary {cfg.vocab} (bytes), {'tied' if cfg.tied else 'untied'} "
          f"output, {cfg.attention} attention; batch {batch}, {steps} AdamW steps")
    started = time.perf_counter()
    r = train(cfg, steps, batch, args.lr, args.weight_decay, args.seed)
    losses = r["losses"]
    print(f"text: {len(r['data'])} bytes of standard-library source "
          f"({', '.join(TEXT_MODULES)}); {r['model'].num_parameters()} parameters")
    n_val = (2 if small else 20) if args.eval_batches is None else args.eval_batches
    unigram = unigram_entropy(r["train"])
    k = min(5, max(1, steps // 4))
    trained = f"train loss {np.mean(losses[:k]):.3f} -> {np.mean(losses[-k:]):.3f}"
    against = (f"unigram entropy {unigram:.3f} (uniform {math.log(VOCAB):.3f})")
    if n_val > 0:
        evaluate = compile_on_first_call(jitgraph.jit(loss_fn),
                                         "the validation loss (forward only)")
        vrng = np.random.default_rng(1234)
        with Progress(n_val, desc="validation", unit="batch", per_step=batch * cfg.context,
                      item="tokens") as bar:
            val = []
            for _ in range(n_val):
                x, y = batches(r["val"], batch, cfg.context, vrng)
                val.append(float(evaluate(r["model"], x, y)))
                bar.update()
        val_loss = r["val_loss"] = float(np.mean(val))
        print(f"{trained}; validation loss {val_loss:.3f} nats/byte vs {against}")
    else:
        val_loss = r["val_loss"] = None
        print(f"{trained} nats/byte vs {against}; validation skipped (--eval-batches 0)")
    if not small:
        forward = compile_on_first_call(jitgraph.jit(lambda m, ids: m(ids)[:, -1]),
                                        "the sampling forward pass (one sequence)")
        ctx = list(r["val"][: cfg.context])
        srng = np.random.default_rng(args.seed)
        out = []
        n_sample = 300
        with Progress(n_sample, desc="sampling", unit="byte") as bar:
            for _ in range(n_sample):
                logits = np.asarray(forward(r["model"], np.array([ctx[-cfg.context:]])))[0]
                z = logits.astype(np.float64) / max(args.temperature, 1e-6)
                p = np.exp(z - z.max())
                ctx.append(int(srng.choice(VOCAB, p=p / p.sum())))
                out.append(ctx[-1])
                bar.update()
        print("sample:\n" + bytes(out).decode("utf-8", "replace"))
    done(started)
    assert all(np.isfinite(losses)), losses
    assert np.mean(losses[-k:]) < np.mean(losses[:k]), "the loss did not go down"
    if not small and val_loss is not None:
        assert val_loss < unigram, (val_loss, unigram)
    return r


def main(argv=None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
