"""Nothing is written into the installed package: Numba's files of the ``kernels/`` helpers
belong under ``JITGRAPH_CACHE_DIR`` (per cache, private), not in ``jitgraph.kernels``'s
``__pycache__`` shared by every process of an installation (where their unlocked index
updates race, see ``test_helper_cache.py``). Expected to fail until that fix lands.

Named ``zz`` so that it runs last: it also compares with the files present when this session
started (``conftest.py``), so writes by the other stress tests count too.
"""
from __future__ import annotations

import os

from . import harness
from .conftest import SESSION_START


def test_no_numba_files_written_into_installed_package(tmp_path):
    """A child using the installed package (no copy) compiles loop and BLAS products with a
    fresh cache directory: no ``.nbi``/``.nbc`` appears or changes in
    ``jitgraph.kernels.__path__[0]/__pycache__``, and no helper's Numba cache points there."""
    kernels = harness.KERNELS_DIR
    before = harness.numba_helper_files(kernels)
    res = harness.run("programs", {"programs": ["i64_aT_b", "i32_a_bT", "f32_aT_b", "f64_a_bT",
                                                "tanh_sum"],
                                   "seed": harness.SEED, "helper_paths": True},
                      cache_dir=tmp_path / "cache", logs=tmp_path / "logs", name="installed",
                      timeout_s=90)
    problems = harness.check(res)
    after = harness.numba_helper_files(kernels)
    start = SESSION_START.get("package_helpers", before)
    for label, ref in (("during this session", start), ("by this test's child", before)):
        new = sorted(set(after) - set(ref))
        changed = sorted(k for k in set(after) & set(ref) if after[k] != ref[k])
        if new or changed:
            problems.append(f"{label}: {len(new)} new and {len(changed)} rewritten Numba files in "
                            f"{kernels / '__pycache__'}: new {new[:8]}, rewritten {changed[:8]}")
    paths = (res.data or {}).get("helper_cache_paths", {})
    inside = sorted(f"{name} -> {p}" for name, p in paths.items()
                    if os.path.commonpath([p, str(kernels)]) == str(kernels))
    if inside:
        problems.append(f"{len(inside)} of {len(paths)} kernels/ helpers keep their Numba cache "
                        f"inside the installed package, e.g. {inside[:4]}")
    if not paths and res.data and "helper_paths_error" in res.data:
        e = res.data["helper_paths_error"]
        problems.append(f"could not list the helpers' cache paths: {e['type']}: {e['message']}")
    harness.fail_if(problems, f"installed package {harness.PACKAGE_DIR}: Numba files under "
                              f"{kernels / '__pycache__'}: {len(after)} now")
