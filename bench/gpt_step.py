"""The training step of a GPT-style decoder (examples/gpt.py: learned positions, pre-layernorm,
causal attention, GELU MLP, tied or untied output, AdamW, float32): jitgraph.train_step vs
torch.compile vs jax.jit, the same model written the same way in each, same initial weights.

    python bench/gpt_step.py [--size tiny|small|large] [--untied] [--attention library]
                             [--optimizer sgd] [--repeats N] [--quick] [--json out.json]
                             [--python-jax PATH] [--python-torch PATH] [--busy N]
                             [--rounds N] [--dims vocab=V,dim=D,heads=H,...]

Each framework runs in a new process (so ``ru_maxrss``, the RSS high-water mark, is that
framework's own), in turn: jitgraph first (it builds the model and saves its weights and the
batch for the others), then torch and jax; ``--rounds`` times over (2 by default), the
frameworks alternating, so that a minute when a shared machine runs slow does not land on one
framework alone (measured here: the tiny step's ratio to torch.compile read 1.13x in one run and
0.89x in the next, each framework's median moving by up to 40 % between minutes). Each reports
the median step time over its rounds' repeats (and each round's median),
tokens/s, its first call (trace + compile + run) and peak RSS (also RSS right after its
imports); jitgraph also its planned peak (``lower(...).memory_analysis()``). The first losses
of every framework must agree with jitgraph's to 1e-4 relative. Ratios are to the best peer.
``--python-jax`` / ``--python-torch`` run that framework's process with another interpreter
(a virtual environment holding JAX, say); that process imports neither jitgraph nor Numba.
``--dims`` replaces some of ``--size``'s sizes (a held-out shape: an odd vocabulary, other
head sizes). ``--busy N`` keeps N processes spinning (one CPU each) while each framework
runs: the loaded machine of a shared server or CI runner, where a step that needs every core
at once at every barrier loses most.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import json
import math
import os
import resource
import sys
import tempfile
import time

import numpy as np

from common import ResultTable

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")

SIZES = {   # the sizes; "tiny" is its new-user check, for quick runs
    "tiny": dict(vocab=1024, dim=128, heads=4, layers=2, context=128, batch=8),
    "small": dict(vocab=8192, dim=256, heads=8, layers=4, context=256, batch=8),
    "large": dict(vocab=32000, dim=512, heads=8, layers=6, context=512, batch=4),
}
LR, B1, B2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.1
CHECK_STEPS = 3             # losses compared between frameworks (same batch every step)
CHECK_RTOL = 1e-4
FRAMEWORKS = ("jitgraph", "torch", "jax")
ROW = {"jitgraph": "jitgraph.train_step", "torch": "torch.compile", "jax": "jax.jit"}
MIB = 1 << 20


# ------------------------------------------------------------------ helpers for every child
def rss_bytes() -> int:
    """This process's RSS high-water mark: ``VmHWM`` of /proc/self/status where there is one.
    Not ``ru_maxrss`` there: Linux carries it across ``exec`` from the forked copy of the
    parent, so every child would start at the parent's peak (torch, jax and jitgraph are
    imported in the parent, for the header)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # kB on Linux, B on macOS


def causal_bias(t: int) -> np.ndarray:
    """examples/gpt.py's additive mask, for the peers (0 = attend, finfo.min / 2 = not)."""
    return np.where(np.tril(np.ones((t, t), bool)), 0.0,
                    np.finfo(np.float32).min / 2).astype(np.float32)


def measure(step, sync, cfg: dict) -> dict:
    """First call, the next losses, then ``repeats`` timed calls: per-call seconds."""
    t0 = time.perf_counter()
    losses = [float(sync(step()))]
    first_s = time.perf_counter() - t0
    while len(losses) < max(CHECK_STEPS, cfg["warmup"] + 1):
        losses.append(float(sync(step())))
    probe = common._LoadProbe()
    samples, t_end = [], time.perf_counter() + cfg["max_time"]
    while len(samples) < cfg["repeats"] and (len(samples) < 3 or time.perf_counter() < t_end):
        t = time.perf_counter()
        sync(step())
        samples.append(time.perf_counter() - t)
    return {"first_call_s": first_s, "losses": losses[:CHECK_STEPS], "samples": samples,
            "other_load": probe.stop(), "peak_rss": rss_bytes()}


def named_arrays(obj, prefix: str = ""):
    """(dotted name, array) for every array of a jitgraph Module tree: 'blocks.0.fc.weight'."""
    import jitgraph.nn as nn
    if isinstance(obj, np.ndarray):
        yield prefix, obj
    elif isinstance(obj, nn.Module):
        for k, v in sorted(vars(obj).items()):
            yield from named_arrays(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from named_arrays(v, f"{prefix}.{i}")


# ------------------------------------------------------------------ jitgraph
def child_jitgraph(cfg: dict, workdir: str) -> dict:
    sys.path.insert(0, EXAMPLES)
    import jitgraph
    import jitgraph.optim as optim
    import jitgraph.random as jr
    from gpt import GPT, GPTConfig, loss_fn
    rss0 = rss_bytes()
    s = cfg["size"]
    model = GPT(GPTConfig(vocab=s["vocab"], context=s["context"], dim=s["dim"], heads=s["heads"],
                          layers=s["layers"], tied=cfg["tied"], attention=cfg["attention"]),
                jr.key(cfg["seed"]))
    rng = np.random.default_rng(cfg["seed"])
    ids = rng.integers(0, s["vocab"], (s["batch"], s["context"]))
    tgt = rng.integers(0, s["vocab"], (s["batch"], s["context"]))
    np.savez(os.path.join(workdir, "init.npz"), ids=ids, tgt=tgt,
             **{"w:" + k: v for k, v in named_arrays(model)})
    opt = (optim.adamw(LR, B1, B2, EPS, weight_decay=WD) if cfg["optimizer"] == "adamw"
           else optim.sgd(LR))
    step = jitgraph.train_step(loss_fn, opt)
    st = {"m": model, "s": opt.init(model)}

    def call():
        st["m"], st["s"], loss = step(st["m"], st["s"], ids, tgt)
        return loss
    out = measure(call, lambda x: x, cfg)
    mem = step.lower(st["m"], st["s"], ids, tgt).memory_analysis()
    out.update(import_rss=rss0, planned_peak=mem.peak_memory_in_bytes,
               version=jitgraph.__version__)
    return out


# ------------------------------------------------------------------ torch
def child_torch(cfg: dict, workdir: str) -> dict:
    torch = common.import_torch()
    if torch is None:
        raise RuntimeError(f"torch unavailable ({common.import_error('torch')}); "
                           "pip install torch==2.13.0")
    rss0 = rss_bytes()
    nn, F = torch.nn, torch.nn.functional
    s, library = cfg["size"], cfg["attention"] == "library"
    d, h, V = s["dim"], s["heads"], s["vocab"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.register_buffer("bias", torch.tensor(causal_bias(s["context"])), persistent=False)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(x).reshape(B, T, 3, h, D // h).permute(2, 0, 3, 1, 4)
            if library:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // h)
                                  + self.bias[:T, :T], dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, D))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.pos = nn.Parameter(torch.zeros(s["context"], d))
            self.blocks = nn.ModuleList(Block() for _ in range(s["layers"]))
            self.ln = nn.LayerNorm(d)
            self.head = None if cfg["tied"] else nn.Linear(d, V, bias=False)

        def forward(self, ids):
            x = self.tok(ids) + self.pos[: ids.shape[1]]
            for b in self.blocks:
                x = b(x)
            x = self.ln(x)
            return F.linear(x, self.tok.weight) if self.head is None else self.head(x)

    model = GPT()
    init = np.load(os.path.join(workdir, "init.npz"))
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    with torch.no_grad():
        for name, p in model.named_parameters():
            w = init["w:" + name]
            p.copy_(torch.from_numpy(np.ascontiguousarray(w.T if name in linear else w)))
    ids, tgt = torch.from_numpy(init["ids"]), torch.from_numpy(init["tgt"])
    opt = (torch.optim.AdamW(model.parameters(), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
           if cfg["optimizer"] == "adamw" else torch.optim.SGD(model.parameters(), lr=LR))

    def step(a, b):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(a).reshape(-1, V), b.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()
    cstep = torch.compile(step)
    out = measure(lambda: cstep(ids, tgt), lambda x: x, cfg)
    out.update(import_rss=rss0, version=torch.__version__)
    return out


# ------------------------------------------------------------------ jax
def child_jax(cfg: dict, workdir: str) -> dict:
    jax = common.import_jax()
    if jax is None:
        raise RuntimeError(f"jax unavailable ({common.import_error('jax')}); pip install jax")
    import jax.numpy as jnp
    rss0 = rss_bytes()
    s, library = cfg["size"], cfg["attention"] == "library"
    h = s["heads"]
    init = np.load(os.path.join(workdir, "init.npz"))
    params = {k[2:]: jnp.asarray(init[k]) for k in init.files if k.startswith("w:")}
    ids, tgt = jnp.asarray(init["ids"]), jnp.asarray(init["tgt"])
    bias = jnp.asarray(causal_bias(s["context"]))

    def layer_norm(x, w, b, eps=1e-5):
        xc = x - jnp.mean(x, -1, keepdims=True)
        return xc / jnp.sqrt(jnp.mean(xc * xc, -1, keepdims=True) + eps) * w + b

    def linear(x, p, name):
        y = x @ p[name + ".weight"]
        return y + p[name + ".bias"] if name + ".bias" in p else y

    def attention(x, p, pre):
        B, T, D = x.shape
        qkv = jnp.transpose(linear(x, p, pre + "qkv").reshape(B, T, 3, h, D // h), (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        if library:   # jax.nn's layout is (B, T, heads, d)
            y = jax.nn.dot_product_attention(*(jnp.swapaxes(a, 1, 2) for a in (q, k, v)),
                                             is_causal=True)
        else:
            y = jnp.swapaxes(jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(D // h)
                                            + bias[:T, :T], axis=-1) @ v, 1, 2)
        return linear(y.reshape(B, T, D), p, pre + "proj")

    def forward(p, ids):
        x = p["tok.weight"][ids] + p["pos"][: ids.shape[1]]
        for i in range(s["layers"]):
            pre = f"blocks.{i}."
            x = x + attention(layer_norm(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"]), p,
                              pre + "attn.")
            u = layer_norm(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
            x = x + linear(jax.nn.gelu(linear(u, p, pre + "fc"), approximate=True), p,
                           pre + "proj")
        x = layer_norm(x, p["ln.weight"], p["ln.bias"])
        return x @ p["tok.weight"].T if cfg["tied"] else linear(x, p, "head")

    def loss_fn(p, ids, tgt):
        z = forward(p, ids)
        picked = jnp.take_along_axis(z, tgt[..., None], axis=-1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(z, axis=-1) - picked)

    def opt_init(p):
        zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, p)  # noqa: E731 (donated: 2 copies)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros(), "nu": zeros()}

    def opt_update(g, st, p):
        """jitgraph.optim.adamw (torch.optim.AdamW's rule) written out; or plain SGD."""
        if cfg["optimizer"] != "adamw":
            return jax.tree_util.tree_map(lambda a, b: a + -LR * b, p, g), st
        count = st["count"] + 1
        t = count.astype(jnp.float32)
        c1, c2 = 1.0 - B1 ** t, 1.0 - B2 ** t
        mu = jax.tree_util.tree_map(lambda m, b: B1 * m + (1.0 - B1) * b, st["mu"], g)
        nu = jax.tree_util.tree_map(lambda v, b: B2 * v + (1.0 - B2) * (b * b), st["nu"], g)
        new = jax.tree_util.tree_map(
            lambda a, m, v: a + -LR * ((m / c1) / (jnp.sqrt(v / c2) + EPS) + WD * a), p, mu, nu)
        return new, {"count": count, "mu": mu, "nu": nu}

    def train_step(p, st, ids, tgt):
        loss, g = jax.value_and_grad(loss_fn)(p, ids, tgt)
        p, st = opt_update(g, st, p)
        return p, st, loss

    step = jax.jit(train_step, donate_argnums=(0, 1))
    state = {"p": params, "s": opt_init(params)}

    def call():
        state["p"], state["s"], loss = step(state["p"], state["s"], ids, tgt)
        return loss
    out = measure(call, lambda x: jax.block_until_ready((state["p"], x))[1], cfg)
    out.update(import_rss=rss0, version=jax.__version__)
    return out


CHILDREN = {"jitgraph": child_jitgraph, "torch": child_torch, "jax": child_jax}


def child_main(name: str, workdir: str) -> int:
    with open(os.path.join(workdir, "config.json")) as f:
        cfg = json.load(f)
    out = CHILDREN[name](cfg, workdir)
    with open(os.path.join(workdir, name + ".json"), "w") as f:
        json.dump(out, f)
    return 0


# ------------------------------------------------------------------ the parent
def run_child(name: str, python: str, workdir: str, timeout: float) -> dict:
    """One framework in a new process; its result dict, or {'error': ...}."""
    return common.run_json_child([python, os.path.abspath(__file__), "--child", name, workdir],
                                 os.path.join(workdir, name + ".json"), timeout)


def pooled(runs: list[dict]) -> dict:
    """One framework's rounds as one result: every round's samples (and each round's median),
    the median first call, the highest RSS and load, the first round's losses; the first
    round's error where no round ran."""
    ok = [r for r in runs if "samples" in r]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    out["samples"] = [t for r in ok for t in r["samples"]]
    out["round_medians"] = [float(np.median(r["samples"])) for r in ok]
    out["first_call_s"] = float(np.median([r["first_call_s"] for r in ok]))
    out["peak_rss"] = max(r["peak_rss"] for r in ok)
    loads = [r["other_load"] for r in ok if r.get("other_load") is not None]
    out["other_load"] = max(loads) if loads else None
    return out


def loss_check(losses, ref) -> str:
    """'ok (rel ...)' when every loss is within CHECK_RTOL of jitgraph's, else 'MISMATCH ...'."""
    if ref is None:
        return "no jitgraph losses"
    a, b = np.asarray(losses, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(a)):
        return f"MISMATCH (non-finite {a.tolist()})"
    rel = float(np.max(np.abs(a - b) / np.abs(b)))
    return ("ok" if rel <= CHECK_RTOL else "MISMATCH") + f" (rel {rel:.1e})"


def sized(args) -> tuple[str, dict]:
    """The step's sizes: ``--size``'s, each one ``--dims`` names replaced (a held-out shape)."""
    size, name = dict(SIZES[args.size]), args.size
    for item in filter(None, (args.dims or "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in size or not value.strip().isdigit() or int(value) < 1:
            raise SystemExit(f"gpt_step: --dims takes positive KEY=N items, KEY one of "
                             f"{', '.join(size)}; got {item!r}")
        size[key.strip()] = int(value)
        name = "custom"
    if size["dim"] % size["heads"]:
        raise SystemExit(f"gpt_step: dim {size['dim']} is not a multiple of heads {size['heads']}")
    return name, size


def run(args) -> dict:
    size_name, size = sized(args)
    quick = args.quick
    cfg = {"size": size, "size_name": size_name, "tied": not args.untied,
           "attention": args.attention, "optimizer": args.optimizer, "seed": 0,
           "repeats": args.repeats or (3 if quick else 20), "warmup": 1 if quick else 3,
           "max_time": 10.0 if quick else 60.0}
    pythons = {"jitgraph": sys.executable, "torch": args.python_torch or sys.executable,
               "jax": args.python_jax or sys.executable}
    names = [n for n in FRAMEWORKS if n in args.frameworks.split(",")]
    if "jitgraph" not in names:
        raise SystemExit("gpt_step: jitgraph must run: it makes the weights the others start from")
    tokens = size["batch"] * size["context"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="gpt-step-") as workdir:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            json.dump(cfg, f)
        rounds = {n: [] for n in names}
        for r in range(1 if quick else max(1, args.rounds)):
            for n in names:
                if r and "error" in rounds[n][0]:
                    continue
                if common._quiet_budget() > 0:      # --wait-quiet / BENCH_WAIT_QUIET
                    common.wait_quiet(verbose=True)
                print(f"running {ROW[n]} in a new process ({pythons[n]}), round {r + 1} ...",
                      flush=True)
                with common.spinning(args.busy):
                    rounds[n].append(run_child(n, pythons[n], workdir, args.child_timeout))
                if "error" in rounds[n][-1]:
                    print(f"{ROW[n]}: unavailable ({rounds[n][-1]['error']})", flush=True)
        results = {n: pooled(rounds[n]) for n in names}

    timings = {}
    for n, r in results.items():
        if "samples" in r:
            timings[n] = common.Timing(r["samples"])
            timings[n].other_load = r.get("other_load")
    peers = [n for n in timings if n != "jitgraph"]
    best_t = min((timings[n].median for n in peers), default=None)
    best_rss = min((results[n]["peak_rss"] for n in peers), default=None)
    ref = results.get("jitgraph", {}).get("losses")
    s = size
    table = ResultTable(
        f"GPT training step ({size_name}: {s['layers']} layers, d={s['dim']}, {s['heads']} heads, "
        f"T={s['context']}, batch {s['batch']}, vocab {s['vocab']}, "
        f"{'tied' if cfg['tied'] else 'untied'}, {cfg['attention']} attention, "
        f"{cfg['optimizer']}, float32"
        + (f", {args.busy} spinning processes beside it" if args.busy else "") + ") (ms/step)",
        unit="ms", extra_cols=("x best peer", "tokens/s", "first call s", "RSS imports MiB",
                               "peak RSS MiB", "RSS x best peer", "planned peak MiB", "check"))
    for n in names:
        r = results[n]
        if n not in timings:
            table.add_unavailable(ROW[n], r.get("error", "?"))
            continue
        t = timings[n]
        check = "reference" if n == "jitgraph" else loss_check(r["losses"], ref)
        table.add(ROW[n], t, **{
            "x best peer": f"{t.median / best_t:.2f}x" if best_t else "n/a",
            "tokens/s": f"{tokens / t.median:,.0f}",
            "first call s": f"{r['first_call_s']:.1f}",
            "RSS imports MiB": f"{r['import_rss'] / MIB:.0f}",
            "peak RSS MiB": f"{r['peak_rss'] / MIB:.0f}",
            "RSS x best peer": f"{r['peak_rss'] / best_rss:.2f}x" if best_rss else "n/a",
            "planned peak MiB": (f"{r['planned_peak'] / MIB:.1f}" if "planned_peak" in r else ""),
            "check": check})
    table.print()
    print("  (each round's median, ms: " + "; ".join(
        f"{ROW[n]} " + " / ".join(f"{m * 1e3:.2f}" for m in results[n]["round_medians"])
        for n in names if "round_medians" in results[n]) + ")")
    print(f"  (first {CHECK_STEPS} losses, same batch each step: "
          + "; ".join(f"{ROW[n]} " + " ".join(f"{x:.6f}" for x in results[n]["losses"])
                      for n in names if "losses" in results[n]) + ")")
    if "jitgraph" in timings and best_t:
        jg = results["jitgraph"]
        print(f"  target: jitgraph step <= 0.8x the best peer's: "
              f"{timings['jitgraph'].median / best_t:.2f}x; peak memory <= the best peer's: "
              f"RSS {jg['peak_rss'] / best_rss:.2f}x, planned peak "
              f"{jg['planned_peak'] / best_rss:.2f}x the best peer's RSS", flush=True)
    return {"table": table.as_dict(), "config": cfg, "results": results, "busy": args.busy}


def extra_args(p) -> None:
    p.add_argument("--size", choices=tuple(SIZES), default="small")
    p.add_argument("--dims", default=None, metavar="KEY=N,...",
                   help="replace --size's sizes (vocab, dim, heads, layers, context, batch): "
                        "a held-out shape, e.g. vocab=5000,heads=6,context=200")
    p.add_argument("--untied", action="store_true", help="an output matrix of its own")
    p.add_argument("--attention", choices=("explicit", "library"), default="explicit",
                   help="explicit softmax(q @ k.T / sqrt(d) + mask) @ v, or each library's "
                        "attention function")
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per framework")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--python-jax", default=None, metavar="PATH",
                   help="interpreter for the jax process (default: this one)")
    p.add_argument("--python-torch", default=None, metavar="PATH",
                   help="interpreter for the torch process (default: this one)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="run N processes that spin on a CPU each while every framework runs "
                        "(a busy machine)")
    p.add_argument("--child-timeout", type=float, default=3600.0, metavar="SECONDS")
    p.add_argument("--rounds", type=int, default=2, metavar="N",
                   help="run the frameworks N times over, alternating (each time in new "
                        "processes), and pool each one's samples")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2], sys.argv[3]))
    common.run_main(__doc__, "GPT train step", "gpt_step", run, sys.argv[1:], extra_args)
