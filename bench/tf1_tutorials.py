"""The classic TensorFlow 1 tutorial programs (``tests/compat/tf1_tutorials.py``) on
``jitgraph.compat.v1`` against TensorFlow's own ``tf.compat.v1``, whole programs, first runs
and compiles included.

    python bench/tf1_tutorials.py [--only NAME,...] [--repeats N] [--busy N]
                                  [--python-tf PATH] [--cnn-steps N] [--json out.json]

Each program runs in a new process per framework, as a user runs a tutorial script: the
process imports its framework (timed: "import"), loads the digits (not timed), then calls the
tutorial function (timed: "run": building the graph, the session's runs, their compiles;
jitgraph's disk cache is empty in every process). The two frameworks alternate, program by
program and repeat by repeat, so a change in the machine's load hits both; the table gives
medians and the ratio jitgraph / TensorFlow of the run and of import + run. The program's
source is the test module's, with its one import line swapped for ``import
tensorflow.compat.v1 as tf; tf.disable_v2_behavior()`` in TensorFlow's process (which does not
import jitgraph or Numba). Both processes' results are compared (losses to 1e-4 relative; the
GAN draws its initial weights from each framework's own random stream, so it is not; the
convolutional network's first three displayed losses and accuracies: by the end its losses
are 1e-3, where rounding differences have compounded over 200 Adam steps).
``cnn_mnist`` is the classic convolutional network at MNIST's size (28x28 digits, 5x5
convolutions of 32 and 64 filters, a 1024-unit layer, batch 128, ``--cnn-steps`` steps).
``--python-tf`` runs TensorFlow's process with another interpreter (a virtual environment
holding TensorFlow); ``--busy N`` keeps N processes spinning, one CPU each, meanwhile.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits and fresh cache directories)

import json
import os
import sys
import tempfile
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIALS = os.path.join(HERE, "..", "tests", "compat", "tf1_tutorials.py")
IMPORT_LINE = "import jitgraph.compat.v1 as tf"
TF_IMPORT = "import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()"
PROGRAMS = ("linear_regression", "logistic_regression", "nearest_neighbor", "mlp", "cnn",
            "autoencoder", "gan", "save_restore", "cnn_mnist")
UNCHECKED = {"gan"}         # initial weights from each framework's own random stream
CHECK_RTOL = 1e-4
FRAMEWORKS = ("jitgraph", "tensorflow")


# ------------------------------------------------------------------ the child
def child_main(framework: str, name: str, workdir: str, cnn_steps: int) -> int:
    """Import the framework, load the data, run one tutorial; write what it took."""
    t0 = time.perf_counter()
    if framework == "tensorflow":
        import tensorflow.compat.v1  # noqa: F401  (timed with the import)
    else:
        import jitgraph.compat.v1  # noqa: F401
    t_import = time.perf_counter() - t0
    with open(TUTORIALS) as f:
        src = f.read()
    if IMPORT_LINE not in src:
        raise SystemExit(f"{TUTORIALS} no longer has the line {IMPORT_LINE!r}")
    if framework == "tensorflow":
        src = src.replace(IMPORT_LINE, TF_IMPORT)
    mod = types.ModuleType("tf1_tutorials")
    exec(compile(src, TUTORIALS, "exec"), mod.__dict__)
    mod.digits()
    mod.digits28()                      # data loading is not the framework's time
    args, kwargs = (), {}
    if name == "gan":
        args = (0,)
    elif name == "save_restore":
        args = (os.path.join(workdir, f"{framework}-model.ckpt"),)
    elif name == "cnn_mnist":
        kwargs = {"steps": cnn_steps}
    t1 = time.perf_counter()
    result = getattr(mod, name)(*args, **kwargs)
    t_run = time.perf_counter() - t1
    if name == "cnn_mnist":         # after 200 steps the losses are ~1e-3: compare the first
        result = {"shown": result["shown"][:3]}         # ones, before rounding compounds
    with open(os.path.join(workdir, f"{framework}-{name}.json"), "w") as f:
        json.dump({"import_s": t_import, "run_s": t_run, "result": _numbers(result)}, f)
    return 0


def _numbers(obj) -> list[float]:
    """Every number in a tutorial's result, in order (what the two frameworks must share)."""
    if isinstance(obj, dict):
        return [x for k in sorted(obj) for x in _numbers(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _numbers(v)]
    if isinstance(obj, (bool, int, float, np.number)):
        return [float(obj)]
    return []


# ------------------------------------------------------------------ the parent
def run_child(framework: str, python: str, name: str, workdir: str, cnn_steps: int,
              timeout: float) -> dict:
    """One program under one framework in a new process: its times and numbers, or an error."""
    return common.run_json_child([python, os.path.abspath(__file__), "--child", framework, name,
                                  workdir, str(cnn_steps)],
                                 os.path.join(workdir, f"{framework}-{name}.json"), timeout)


def check(name: str, jg: list[float], ref: list[float]) -> str:
    if name in UNCHECKED:
        return "not compared (random init)"
    a, b = np.asarray(jg, np.float64), np.asarray(ref, np.float64)
    if a.shape != b.shape:
        return f"MISMATCH ({a.size} numbers against {b.size})"
    rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-6), initial=0.0))
    return ("ok" if rel <= CHECK_RTOL else "MISMATCH") + f" (rel {rel:.1e})"


def run(args) -> dict:
    names = args.only.split(",") if args.only else list(PROGRAMS)
    unknown = sorted(set(names) - set(PROGRAMS))
    if unknown:
        raise SystemExit(f"tf1_tutorials: no program {unknown}; choose from {PROGRAMS}")
    pythons = {"jitgraph": sys.executable, "tensorflow": args.python_tf or sys.executable}
    samples: dict = {(f, n): [] for f in FRAMEWORKS for n in names}
    errors: dict = {}
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="tf1-tutorials-") as workdir, \
            common.spinning(args.busy):
        for rep in range(args.repeats):
            for n in names:
                for f in FRAMEWORKS:
                    if (f, n) in errors:
                        continue
                    r = run_child(f, pythons[f], n, workdir, args.cnn_steps, args.child_timeout)
                    if "error" in r:
                        errors[f, n] = r["error"]
                        print(f"{f} {n}: {r['error']}", flush=True)
                        continue
                    samples[f, n].append((r["run_s"], r["import_s"] + r["run_s"]))
                    results[f, n] = r["result"]
                    print(f"  repeat {rep + 1}: {f:10s} {n:20s} import {r['import_s']:6.2f} s  "
                          f"run {r['run_s']:7.2f} s", flush=True)
    title = ("TensorFlow 1 tutorials, whole programs in new processes, medians of "
             f"{args.repeats} (s)" + (f", {args.busy} spinning processes beside them"
                                      if args.busy else ""))
    head = ["program", "jitgraph run", "TF run", "run x TF", "jitgraph import+run",
            "TF import+run", "import+run x TF", "check"]
    rows = []
    for n in names:
        med = {f: (np.median(samples[f, n], axis=0) if samples[f, n] else None)
               for f in FRAMEWORKS}
        jg, tf = med["jitgraph"], med["tensorflow"]

        def cell(m, i, err):
            return f"{m[i]:.2f}" if m is not None else ("n/a: " + err if err else "n/a")

        row = [n, cell(jg, 0, errors.get(("jitgraph", n))),
               cell(tf, 0, errors.get(("tensorflow", n))),
               f"{jg[0] / tf[0]:.2f}x" if jg is not None and tf is not None else "n/a",
               cell(jg, 1, ""), cell(tf, 1, ""),
               f"{jg[1] / tf[1]:.2f}x" if jg is not None and tf is not None else "n/a",
               check(n, results["jitgraph", n], results["tensorflow", n])
               if ("jitgraph", n) in results and ("tensorflow", n) in results else "n/a"]
        rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print("\n" + title)
    for r in [head] + rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    ratios = [float(r[3][:-1]) for r in rows if r[3] != "n/a"]
    if ratios:
        print(f"  target: every program's run at most 2x TensorFlow's; worst "
              f"{max(ratios):.2f}x ({rows[int(np.argmax(ratios))][0]})", flush=True)
    return {"columns": head, "rows": rows, "busy": args.busy, "repeats": args.repeats,
            "cnn_steps": args.cnn_steps}


def extra_args(p) -> None:
    p.add_argument("--only", default=None, metavar="NAME,...",
                   help=f"programs to run (default: all of {', '.join(PROGRAMS)})")
    p.add_argument("--repeats", type=int, default=3, help="new processes per program and framework")
    p.add_argument("--cnn-steps", type=int, default=200, help="training steps of cnn_mnist")
    p.add_argument("--python-tf", default=None, metavar="PATH",
                   help="interpreter for TensorFlow's processes (default: this one)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N processes spinning on a CPU each meanwhile (a busy machine)")
    p.add_argument("--child-timeout", type=float, default=600.0, metavar="SECONDS")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    common.run_main(__doc__, "TensorFlow 1 tutorials", "tf1_tutorials", run, sys.argv[1:],
                    extra_args)
