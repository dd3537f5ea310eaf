"""Packaging: what ``pip install .`` installs, which the editable install's finder hides.

The packages are found by setuptools (``setup.py``'s ``find_packages``), not listed by hand (a
hand list once missed ``jitgraph.compiler.backends``: the wheel's ``import jitgraph`` failed).
These tests check that the packages setuptools is configured with are exactly the folders with
an ``__init__.py`` under ``jitgraph/`` and ``kernels/`` (installed as ``jitgraph.kernels``), that
no folder of modules lacks one, and that the build step a wheel is made from (``build_py``)
copies every module of the source tree and no cache file (Numba's ``.nbi``/``.nbc``, ``.pyc``),
even from a tree with a stale egg-info manifest naming them. All offline; a real wheel is built
too where the environment can build one without the network. The full check, the wheel installed
into a fresh virtual environment and run from outside the tree, is ``.ci/wheel_check.sh``.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / "jitgraph" / "__init__.py").is_file(),
                                reason="needs the source tree (the tests were copied out of it)")

# source folder -> the package it is installed as
TOPS = {"jitgraph": "jitgraph", "kernels": "jitgraph.kernels"}
TOP_OF = {name: top for top, name in TOPS.items()}
CACHE_SUFFIXES = (".pyc", ".nbi", ".nbc")
#: the data files installed beside the modules (the kernels shipped as LLVM IR), by package
PACKAGE_DATA = {"jitgraph.kernels": ["prebuilt/*/manifest.json", "prebuilt/*/*.ll.xz"]}

CONFIGURED = textwrap.dedent("""
    import json, os, sys, tempfile
    import setuptools  # noqa: F401  (before distutils: setuptools' own copy of it)
    from distutils.core import run_setup
    script = "setup.py"
    if not os.path.isfile(script):      # what the build backend runs when there is none
        script = os.path.join(tempfile.mkdtemp(), "setup.py")
        with open(script, "w") as f:
            f.write("from setuptools import setup; setup()")
    dist = run_setup(script, stop_after="config")   # setup.py and pyproject.toml applied
    print(json.dumps({"packages": dist.packages, "package_dir": dist.package_dir,
                      "include_package_data": dist.include_package_data,
                      "package_data": dist.package_data or {}}))
""")


def _walk(root: pathlib.Path, top: str):
    """(folder relative to *root*, its file names) under *root*/*top*, without caches."""
    for d, dirs, files in os.walk(root / top):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        yield pathlib.Path(d).relative_to(root), files


def _package_folders(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every folder with an ``__init__.py``, by the package name it is installed as."""
    out = {}
    for top, name in TOPS.items():
        for rel, files in _walk(root, top):
            if "__init__.py" in files:
                out[".".join([name, *rel.parts[1:]])] = rel
    return out


def _expected_modules(root: pathlib.Path) -> set[str]:
    """The installed paths (``jitgraph/...``) of every module under jitgraph/ and kernels/,
    and of the data files ``PACKAGE_DATA`` names."""
    out = set()
    for top, name in TOPS.items():
        for rel, files in _walk(root, top):
            base = pathlib.PurePosixPath(*name.split("."), *rel.parts[1:])
            out |= {str(base / f) for f in files if f.endswith(".py")}
    for package, patterns in PACKAGE_DATA.items():
        folder = root / TOP_OF[package]
        for pattern in patterns:
            out |= {str(pathlib.PurePosixPath(*package.split("."), f.relative_to(folder)))
                    for f in folder.glob(pattern)}
    return out


def _configured(src: pathlib.Path) -> dict:
    p = subprocess.run([sys.executable, "-c", CONFIGURED], cwd=src, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_setuptools_is_configured_with_every_package_folder():
    cfg = _configured(ROOT)
    folders = _package_folders(ROOT)
    assert "jitgraph.compiler.backends" in folders          # the package a hand list missed
    assert sorted(cfg["packages"]) == sorted(folders), (
        f"packages setuptools builds {sorted(cfg['packages'])} != folders with an __init__.py "
        f"{sorted(folders)}")
    assert len(cfg["packages"]) == len(set(cfg["packages"]))
    # each package resolves, through package_dir, to its own folder (as build_py resolves it)
    package_dir = cfg["package_dir"]
    for name, folder in folders.items():
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in package_dir:
                resolved = pathlib.Path(package_dir[prefix], *parts[i:])
                break
        else:
            resolved = pathlib.Path(package_dir.get("", ""), *parts)
        assert resolved == folder, f"{name} would be built from {resolved}, not {folder}"
    # modules are installed, and the data files named one pattern each: none from a manifest
    assert cfg["include_package_data"] is False and cfg["package_data"] == PACKAGE_DATA


def test_every_folder_of_modules_is_a_package():
    """A folder of modules without ``__init__.py`` imports from a checkout (as a namespace
    package) but is found by no ``find_packages``, so the wheel would lack it."""
    lacking = [str(rel) for top in TOPS for rel, files in _walk(ROOT, top)
               if any(f.endswith(".py") for f in files) and "__init__.py" not in files]
    assert not lacking, f"folders of modules without an __init__.py: {lacking}"
    assert not (ROOT / "jitgraph" / "kernels").exists(), \
        "jitgraph/kernels/ would shadow kernels/, which is installed as jitgraph.kernels"


def _tree_with_stray_caches(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of what the build reads, with cache files and a stale egg-info naming them."""
    src = tmp_path / "src"
    for top in TOPS:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("setup.py", "pyproject.toml", "README.md"):
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, src / f)
    strays = ["kernels/__pycache__/matmul.blas_gemm-1.py311.nbi",
              "kernels/__pycache__/matmul.blas_gemm-1.py311.1.nbc",
              "kernels/__pycache__/matmul.cpython-311.pyc",
              "jitgraph/__pycache__/core.cpython-311.pyc",
              "jitgraph/compiler/backends/__pycache__/cpu.cpython-311.pyc"]
    for s in strays:
        (src / s).parent.mkdir(parents=True, exist_ok=True)
        (src / s).write_bytes(b"stray cache")
    (src / "jitgraph.egg-info").mkdir()
    (src / "jitgraph.egg-info" / "SOURCES.txt").write_text("\n".join(strays) + "\n")
    return src


def _check_files(files: set[str], root: pathlib.Path, what: str) -> None:
    caches = sorted(f for f in files if "__pycache__" in f or f.endswith(CACHE_SUFFIXES))
    assert not caches, f"cache files in {what}: {caches}"
    expected = _expected_modules(root)
    assert not expected - files, f"modules missing from {what}: {sorted(expected - files)}"
    assert not files - expected, f"files in {what} that are no module: {sorted(files - expected)}"


def test_build_copies_every_module_and_no_cache_file(tmp_path):
    """``build_py``, the step whose output a wheel packs, from a tree with stray caches."""
    src = _tree_with_stray_caches(tmp_path)
    lib = tmp_path / "lib"
    script = ("import sys, setuptools\nfrom distutils.core import run_setup\n"
              "run_setup('setup.py', script_args=['-q', 'build_py', '--build-lib', sys.argv[1]])")
    p = subprocess.run([sys.executable, "-c", script, str(lib)], cwd=src, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    files = {str(f.relative_to(lib).as_posix()) for f in lib.rglob("*") if f.is_file()}
    _check_files(files, src, "build_py's output")


def _can_build_wheels_offline() -> bool:
    """setuptools >= 68 (the build requirement) with a bdist_wheel command (its own from 70.1,
    else the wheel package's), and pip; read from the metadata (importing setuptools here would
    replace an already imported distutils)."""
    def version(dist: str) -> tuple[int, ...] | None:
        try:
            v = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None
        return tuple(int(x) if x.isdigit() else 0 for x in v.split(".")[:2])

    setuptools = version("setuptools")
    if setuptools is None or setuptools < (68,) or version("pip") is None:
        return False
    return setuptools >= (70, 1) or version("wheel") is not None


@pytest.mark.skipif(not _can_build_wheels_offline(),
                    reason="no setuptools >= 68 with bdist_wheel here to build without the "
                           "network (.ci/wheel_check.sh builds the wheel)")
def test_wheel_holds_every_module_and_no_cache_file(tmp_path):
    src = _tree_with_stray_caches(tmp_path)
    dist = tmp_path / "dist"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", "-w", str(dist), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    (wheel,) = dist.glob("jitgraph-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    _check_files({n for n in names if not n.split("/")[0].endswith(".dist-info")}, src,
                 "the wheel")


def test_metadata_is_complete_for_a_package_index():
    """What a package index shows: authors, links, classifiers, a license file, and a long
    description (the README) whose links work away from the repository."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["authors"] and project["keywords"]
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = project["classifiers"]
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in classifiers)
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "readme" in project["dynamic"]
    sys.path.insert(0, str(ROOT))
    try:
        import setup as setup_script
    finally:
        sys.path.remove(str(ROOT))
    text = setup_script.long_description()
    readme = (ROOT / "README.md").read_text()
    assert text.splitlines()[0] == readme.splitlines()[0] == "# jitgraph"
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets and all(t.startswith(("https://", "http://", "#", "mailto:")) for t in targets), \
        [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    # each relative link of the README points at that file of the repository
    for rel in re.findall(r"\]\((?!https?://|#)([^)\s]+)\)", readme):
        assert (ROOT / rel.split("#")[0]).exists(), rel
        assert f"{setup_script.REPOSITORY}/blob/main/{rel}" in text


def test_dependency_range_is_the_tested_one():
    """pyproject.toml admits the Numba releases the fast paths were checked on, and CI installs
    the oldest of them (the wheel check) beside the newest (the main run)."""
    from jitgraph.compiler import numba_patches
    text = (ROOT / "pyproject.toml").read_text()
    low, high = numba_patches.SUPPORTED
    assert f'"numba>={low},<{high}"' in text
    ci = (ROOT / ".ci" / "run").read_text()
    m = re.search(r"NUMBA_SPEC='numba==([0-9.]+)'", ci)
    assert m, "CI runs no job at the oldest supported Numba"
    assert numba_patches.is_supported(m[1]) and m[1].startswith(low + ".")
    assert m[1] in numba_patches._CHECKED
