"""The generated CUDA kernels are clean sm_90 code, checked without a GPU: every kernel of the
GPU benchmarks' programs (bench/gpu_bench.py: elementwise value+grad, with and without
fastmath; softmax cross-entropy; the 784-512-512-10 MLP step; layernorm forward+backward) and
of a representative selection of the case table is compiled to PTX (libNVVM) and assembled
with ``ptxas -arch=sm_90 -v`` by ``ptx_check.py``. Asserted: no register spills; no float64
instruction in single-precision kernels (the rule is in ``ptx_check``'s docstring); float32
scalar helpers without float64 instructions, and floor/sign/logistic without branches;
approximate ``tanh``/``exp`` exactly under ``fastmath=True``. ``python tests_cuda/ptx_check.py``
checks the whole CUDA test selection, ``--all`` the whole case table.

The check needs the real ``numba.cuda`` (this process runs the simulator), so it runs once, in
a subprocess without NUMBA_ENABLE_CUDASIM (records are cached on disk by content); it skips,
saying what to install, where ptxas or libNVVM is missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "ptx_check.py")
BENCH = ["bench elementwise value+grad 2^26", "bench elementwise value+grad 2^26 fastmath",
         "bench softmax-xent fwd+bwd (8192, 32000)", "bench MLP step 784-512-512-10 batch 128",
         "bench layernorm fwd+bwd (8192, 1024)"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptx") / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, CHECK, "--subset", "--json", str(out)], env=env,
                       capture_output=True, text=True, timeout=900)
    if not out.exists():      # (it writes the reason it skips, if it does, to the report)
        pytest.fail(f"ptx_check exited {r.returncode} without a report:\n{r.stdout}\n{r.stderr}")
    data = json.loads(out.read_text())
    if "skip" in data:
        pytest.skip(data["skip"])
    data["log"] = r.stdout
    return data


def _kernels(report, name_prefix=""):
    return [(p["name"], k) for p in report["programs"] if p["name"].startswith(name_prefix)
            for k in p.get("kernels", ())]


def test_every_program_compiles(report):
    failed = {p["name"]: p["error"] for p in report["programs"] if "error" in p}
    assert not failed, failed
    names = {p["name"] for p in report["programs"]}
    assert set(BENCH) <= names, sorted(set(BENCH) - names)
    empty = [p["name"] for p in report["programs"] if p["name"] in BENCH and not p["kernels"]]
    assert not empty, empty


def test_no_register_spills(report):
    spilled = [(prog, k["kernel"], k["registers"], k["spill_stores"], k["spill_loads"])
               for prog, k in _kernels(report) if k["spill_stores"] or k["spill_loads"]]
    assert not spilled, spilled
    bad = [h["kernel"] for h in report["helpers"] if h["spill_stores"] or h["spill_loads"]]
    assert not bad, bad


def test_single_precision_kernels_have_no_float64(report):
    checked = [(prog, k) for prog, k in _kernels(report) if k["single_precision"]]
    assert len(checked) >= 20       # the benchmarks' kernels are all float32
    bad = [(prog, k["kernel"], k["f64_count"], k["f64_sample"]) for prog, k in checked
           if k["f64_count"]]
    assert not bad, bad


def test_scalar_helpers(report):
    """float32 helpers compute in float32; floor, sign, logistic and max/min have no branch."""
    helpers = {(h["kernel"], h["fastmath"]): h for h in report["helpers"]}
    for key in [("floor(float32)", False), ("sign(float32)", False), ("sign(int32)", False),
                ("logistic_f32(float32)", False), ("logistic_f32(float32)", True),
                ("floor(float64)", False), ("sign(float64)", False)]:
        assert key in helpers, key
    bad = [(h["kernel"], h["fastmath"], h["f64_count"], h["f64_sample"])
           for h in helpers.values() if h["single_precision"] and h["f64_count"]]
    assert not bad, bad
    branchy = [(h["kernel"], h["fastmath"], h["branches"]) for h in helpers.values()
               if h["branch_free"] and h["branches"]]
    assert not branchy, branchy


def test_fastmath_uses_approximate_tanh_and_exp(report):
    """``fastmath=True``: ``tanh.approx.f32`` and ``__expf`` (inside the logistic helper too);
    the default keeps the precise libdevice routines."""
    helpers = {(h["kernel"], h["fastmath"]): h for h in report["helpers"]}
    assert helpers[("math.tanh(float32)", True)]["tanh_approx"]
    assert not helpers[("math.tanh(float32)", False)]["tanh_approx"]
    for name in ("math.exp(float32)", "logistic_f32(float32)"):
        assert helpers[(name, False)]["precise_exp"], name
        assert not helpers[(name, True)]["precise_exp"], name
    default = [k for _, k in _kernels(report, BENCH[0]) if not k["fastmath"]]
    fast = [k for _, k in _kernels(report, BENCH[1])]
    assert fast and all(k["fastmath"] for k in fast)
    assert any(k["tanh_approx"] for k in fast) and not any(k["precise_exp"] for k in fast)
    assert not any(k["tanh_approx"] for k in default) and any(k["precise_exp"] for k in default)


def test_ptx_newer_than_the_oldest_supported_driver_is_a_problem():
    """NVVM 13.5 writes PTX 9.5; a CUDA 13.0 driver compiles 9.0: reported, not rewritten."""
    sys.path.insert(0, HERE)
    try:
        import ptx_check
    finally:
        sys.path.remove(HERE)
    clean = {"spill_stores": 0, "spill_loads": 0, "registers": 32, "single_precision": False,
             "f64_count": 0, "dtypes": ["float32"]}
    assert ptx_check.OLDEST_DRIVER == (13, 0) and ptx_check.PTX_ISA[(13, 0)] == (9, 0)
    assert ptx_check.problems(dict(clean, ptx_version=[9, 0])) == []
    (msg,) = ptx_check.problems(dict(clean, ptx_version=[9, 5]))
    assert "PTX 9.5 is newer than a CUDA 13.0 driver compiles (9.0)" in msg and "nvJitLink" in msg
    assert ptx_check.ptx_version(".version 9.5\n.target sm_90\n") == (9, 5)
    # the check assembles what libNVVM wrote: no rewriting of the version
    assert "re.sub" not in open(ptx_check.__file__).read().split("def ptxas(")[1].split("def ")[0]
