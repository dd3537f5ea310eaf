"""``jitgraph.environment_info()`` / ``print_environment_info()`` / ``python -m jitgraph info``:
each field a bug report needs is there and agrees with what the libraries themselves say, and
a missing optional library or GPU gives a reason instead of an error."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import platform
import re
import subprocess
import sys

import llvmlite
import llvmlite.binding as llvm
import numba
import numpy
import pytest
import scipy

import jitgraph
from jitgraph import environment


@pytest.fixture(scope="module")
def info():
    return jitgraph.environment_info()


def test_versions(info):
    assert info["jitgraph"] == jitgraph.__version__
    assert info["python"] == platform.python_version()
    assert info["executable"] == sys.executable
    pk = info["packages"]
    assert (pk["numpy"], pk["numba"], pk["llvmlite"], pk["scipy"]) == (
        numpy.__version__, numba.__version__, llvmlite.__version__, scipy.__version__)
    assert set(pk) >= {"numba-cuda", "cupy", "mpi4py", "threadpoolctl"}
    for name in ("numba-cuda", "mpi4py"):
        installed = importlib.util.find_spec(name.replace("-", "_")) is not None
        assert (pk[name] is not None) == installed, name
    assert environment._version("no-such-distribution-here") is None


def test_cpu(info):
    cpu = info["cpu"]
    assert isinstance(cpu["model"], str) and cpu["model"]
    assert cpu["logical_cores"] == os.cpu_count()
    assert cpu["llvm_cpu_name"] == llvm.get_host_cpu_name()
    assert set(cpu["vector_extensions"]) <= set(environment.VECTOR_EXTENSIONS)
    if platform.machine() in ("x86_64", "AMD64"):
        assert "sse2" in cpu["vector_extensions"]        # every x86-64 CPU has it
        llvm_has_avx2 = "+avx2" in llvm.get_host_cpu_features().flatten().split(",")
        assert ("avx2" in cpu["vector_extensions"]) == llvm_has_avx2


def test_cpu_without_proc_cpuinfo(monkeypatch):
    monkeypatch.setattr(environment, "_proc_cpuinfo", lambda: {})
    cpu = environment.cpu_info()
    assert cpu["extensions_from"] == "llvm" and cpu["model"]
    enabled = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f[:1] == "+"}
    assert set(cpu["vector_extensions"]) == enabled & set(environment.VECTOR_EXTENSIONS)


def test_blas(info):
    from jitgraph.kernels import blas
    b = info["blas"]
    assert b["compiled_products"] == blas.library() and b["compiled_products"] in ("numpy", "scipy")
    assert b["libraries"], "threadpoolctl found no BLAS although NumPy is loaded"
    for lib in b["libraries"]:
        assert isinstance(lib["num_threads"], int) and lib["num_threads"] >= 1
        assert lib["internal_api"] and os.path.exists(lib["filepath"])


def test_cuda_reports_a_reason_without_a_gpu(info, monkeypatch):
    cuda = info["cuda"]
    assert isinstance(cuda["available"], bool)
    if cuda["available"]:
        assert cuda["devices"]
        assert all(re.fullmatch(r"\d+\.\d+", d["compute_capability"]) for d in cuda["devices"])
    else:
        assert isinstance(cuda["reason"], str) and cuda["reason"]
    # without numba-cuda (and no simulator): a reason, no import attempted
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(environment.importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    from jitgraph import cuda_driver
    if not cuda_driver.simulator():
        assert environment.cuda_info() == {
            "available": False, "reason": "numba-cuda is not installed (pip install -e '.[cuda]')"}


def test_cache_directory_size_and_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("JITGRAPH_CACHE_MAX_BYTES", "3M")
    digest = "ab" * 32
    (tmp_path / f"{digest}.py").write_bytes(b"x" * 10)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / f"{digest}.f-1.py311.nbi").write_bytes(b"y" * 5)
    (tmp_path / "notes.txt").write_text("not an entry")
    c = environment.cache_info()
    assert c == {"directory": str(tmp_path), "bytes": 15, "entries": 1, "limit": 3 << 20}


def test_settings(monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_MAX_BYTES", "1G")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("UNRELATED_VARIABLE", "x")
    s = environment.settings_info()
    assert s["variables"]["JITGRAPH_CACHE_MAX_BYTES"] == "1G"
    assert s["variables"]["OMP_NUM_THREADS"] == "3"
    assert "UNRELATED_VARIABLE" not in s["variables"]
    assert s["numba_num_threads"] == numba.config.NUMBA_NUM_THREADS
    assert s["prebuilt_kernels"].startswith(("used: 18 attention kernels", "not used ("))


def test_prebuilt_kernels_say_why_numba_compiles_them(monkeypatch):
    from jitgraph.compiler import prebuilt
    monkeypatch.setenv(prebuilt.ENV, "0")
    prebuilt.manifest.cache_clear()
    try:
        assert environment.prebuilt_info() == \
            "not used (JITGRAPH_PREBUILT=0): Numba compiles the attention kernels"
    finally:
        monkeypatch.delenv(prebuilt.ENV)
        prebuilt.manifest.cache_clear()


def test_printed_report(info, monkeypatch):
    monkeypatch.setattr(environment, "environment_info", lambda: info)
    out = io.StringIO()
    jitgraph.print_environment_info(file=out)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == f"jitgraph {jitgraph.__version__}"
    assert f"  numpy: {numpy.__version__}" in lines and f"  numba: {numba.__version__}" in lines
    for section in ("packages:", "cpu:", "blas:", "cuda:", "cache:", "settings:"):
        assert section in lines, section
    assert f"  model: {info['cpu']['model']}" in lines
    assert f"  compiled_products: {info['blas']['compiled_products']}" in lines
    assert f"  directory: {info['cache']['directory']}" in lines
    assert environment.format_size(3 << 20) == "3.0 MiB" and environment.format_size(None) == "no limit"


def test_command_line_json_under_the_cuda_simulator():
    """``python -m jitgraph info --json``; with numba-cuda, under its simulator, so the CUDA
    section's device list is checked on machines without a GPU too."""
    simulated = importlib.util.find_spec("numba_cuda") is not None
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1") if simulated else None
    p = subprocess.run([sys.executable, "-m", "jitgraph", "info", "--json"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert set(got) == {"jitgraph", "python", "python_implementation", "executable", "platform",
                        "packages", "cpu", "blas", "cuda", "cache", "settings"}
    assert got["packages"]["numba"] == numba.__version__
    assert got["cache"]["directory"] == os.environ["JITGRAPH_CACHE_DIR"]
    if simulated:
        assert got["cuda"]["available"] is True and got["cuda"]["simulator"] is True
        assert [d["name"] for d in got["cuda"]["devices"]] == ["CUDA simulator"]
        assert re.fullmatch(r"\d+\.\d+", got["cuda"]["devices"][0]["compute_capability"])
        assert got["settings"]["variables"]["NUMBA_ENABLE_CUDASIM"] == "1"
