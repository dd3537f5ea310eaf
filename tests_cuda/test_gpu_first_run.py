"""The GPU first-run command end to end on the simulator (``bench/gpu_first_run.py --sim``):
every phase writes its section, the smoke checks of the real-GPU branches pass, the step table
has graphs off and on, and the report is complete even for the phases asked for alone."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _first_run(tmp_path, phases: str, timeout: float):
    """``bench/gpu_first_run.py --sim --phases PHASES``: (the process, the report path)."""
    out = tmp_path / "first_run.md"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", JITGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "bench/gpu_first_run.py", "--sim", "--phases", phases,
                        "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return p, out


def test_first_run_phases_on_the_simulator(tmp_path):
    p, out = _first_run(tmp_path, "env,smoke,step", 400)
    report = out.read_text()
    assert p.returncode == 0, report + p.stderr[-3000:]
    for section in ("## env", "## smoke", "## step", "## summary"):
        assert section in report
    assert "| cuBLAS via nvmath-python |" in report and "| cuBLAS via CuPy |" in report
    assert "| products use | tiled kernel" in report
    smoke = [l for l in report.splitlines() if l.startswith("| MLP step") or
             l.startswith("| elementwise") or l.startswith("| softmax") or l.startswith("| product ")]
    assert len(smoke) == 4 and all("| ok |" in l for l in smoke), smoke
    assert "captured and replayed" in smoke[0]
    assert "| off | " in report and "| on | 1 graph launch |" in report
    for phase in ("env", "smoke", "step"):
        assert f"- {phase}: ok" in report
    assert "- bench:" not in report                 # only the phases asked for


def test_first_run_reports_a_failing_phase_and_goes_on(tmp_path):
    p, _ = _first_run(tmp_path, "nosuch", 120)
    assert p.returncode == 2 and "unknown phases" in p.stderr
