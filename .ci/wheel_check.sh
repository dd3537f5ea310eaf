#!/usr/bin/env bash
# CI step: the package as `pip install .` gives it, not as the editable install's finder does.
# Builds the wheel from a clean copy of the checkout (tracked and untracked-but-not-ignored files:
# no stale build/, egg-info or __pycache__), checks its file list against the source tree,
# installs it with the test extras into a fresh virtual environment (no system site-packages),
# makes that environment's site-packages read-only, and from a directory outside the checkout
# runs (a) a smoke program twice (compile, then load from the disk cache in a fresh process) and
# (b) a sample of the test suite; last it checks that nothing was written inside site-packages.
# Exits non-zero on any failure. Usage: bash .ci/wheel_check.sh   (PYTHON=... to pick the python;
# NUMBA_SPEC='numba==0.64.0' installs that Numba beside the wheel: CI checks the oldest supported
# one here, while the main run has the newest)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python}"
start=$SECONDS
# the suite sample (about a minute on 2 cores): tests that need nothing of the checkout, run
# against the installed wheel: the disk cache across processes (a second process loads all,
# two processes compile at once), every primitive's gradient, eager mode, error messages and
# tracebacks (which trim frames by the package's path), save/load, optimizers and train_step,
# the Numba internals jitgraph reads present in this Numba, native bundles, loop kernels
# compiled by LLVM alone (their typing checked against this Numba's), the products built in
# LLVM IR (bit for bit against this Numba's functions, on its threading layer), and the attention
# kernels' shipped IR (in the wheel, made from its sources, used with this Numba: the oldest's IR)
sample=(tests/test_jit_cache.py::test_second_process_loads_everything_from_disk
        tests/test_jit_cache.py::test_concurrent_first_compiles_from_two_processes
        tests/test_grads.py tests/test_eager.py tests/test_errors.py tests/test_serialization.py
        tests/test_optim.py tests/test_tracebacks.py
        tests/test_numba_patches.py::test_the_listed_names_exist_in_the_installed_numba
        tests/test_native_bundle.py tests/test_loop_ir.py tests/test_gemm_launchers.py
        tests/test_prebuilt.py)

work="$(mktemp -d "${TMPDIR:-/tmp}/jitgraph-wheel-check.XXXXXX")"
site=""
cleanup() {
    local rc=$?
    if [ -n "$site" ] && [ -d "$site" ]; then chmod -R u+w "$site" || true; fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
step() { printf '\n== wheel check [%ss]: %s\n' "$((SECONDS - start))" "$*"; }

# ---------------------------------------------------------------- build the wheel
step "copying the checkout's files to $work/src"
git -C "$root" ls-files -z --cached --others --exclude-standard \
    | (cd "$root" && "$python" -c '
import os, shutil, sys
dst = sys.argv[1]
for p in sys.stdin.buffer.read().decode().split("\0"):
    if p and os.path.isfile(p):                      # --cached lists deleted files too
        os.makedirs(os.path.join(dst, os.path.dirname(p)), exist_ok=True)
        shutil.copy2(p, os.path.join(dst, p))
' "$work/src")

step "building the wheel (pip wheel --no-deps, build dependencies from the package index)"
"$python" -m pip wheel -q --no-deps --wheel-dir "$work/dist" "$work/src"
wheels=("$work"/dist/jitgraph-*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "expected one wheel: ${wheels[*]}"; exit 1; }
wheel="${wheels[0]}"
echo "built $(basename "$wheel")"

step "checking the wheel's files against jitgraph/ and kernels/ (installed as jitgraph.kernels)"
"$python" - "$wheel" "$work/src" <<'EOF'
import os, sys, zipfile
wheel, src = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
expected = set()
for top, installed in (("jitgraph", "jitgraph"), ("kernels", "jitgraph/kernels")):
    for d, dirs, files in os.walk(os.path.join(src, top)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        rel = os.path.relpath(d, os.path.join(src, top)).replace(os.sep, "/")
        base = installed if rel == "." else f"{installed}/{rel}"
        expected |= {f"{base}/{f}" for f in files if f.endswith(".py")}
        if rel.startswith("prebuilt/"):   # the attention kernels' IR (pyproject's package-data)
            expected |= {f"{base}/{f}" for f in files
                         if f == "manifest.json" or f.endswith(".ll.xz")}
shipped = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
missing, extra = sorted(expected - shipped), sorted(shipped - expected)
bad = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".nbi", ".nbc"))]
print(f"{len(shipped)} package files, {len(names) - len(shipped)} metadata files")
assert not missing, f"source modules missing from the wheel: {missing}"
assert not extra, f"files in the wheel that are no module of the source tree: {extra}"
assert not bad, f"caches in the wheel: {bad}"
EOF

# ---------------------------------------------------------------- a fresh environment
step "installing the wheel with the test extras into a fresh virtual environment"
unset PYTHONPATH PYTHONHOME NUMBA_CACHE_DIR XDG_CACHE_HOME JITGRAPH_TEST_CACHE_DIR JITGRAPH_LOG
"$python" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install -q "${wheel}[test]" ${NUMBA_SPEC:+"$NUMBA_SPEC"}
"$vpy" - "${NUMBA_SPEC:-}" <<'EOF'
import sys, llvmlite, numba, numpy
print(f"numba {numba.__version__}, llvmlite {llvmlite.__version__}, numpy {numpy.__version__}")
want = sys.argv[1].partition("==")[2]
assert not want or numba.__version__ == want, f"asked for numba {want}, got {numba.__version__}"
EOF
site="$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[ -f "$site/jitgraph/__init__.py" ] && [ -f "$site/jitgraph/kernels/__init__.py" ] \
    || { echo "jitgraph is not installed in $site"; exit 1; }
case "$site" in "$root"/*) echo "site-packages $site is inside the checkout"; exit 1;; esac
"$vpy" - <<'EOF'
import sys, sysconfig
base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
assert sys.prefix != sys.base_prefix and base not in sys.path, f"not a fresh venv: {sys.path}"
EOF

cat > "$work/snapshot.py" <<'EOF'
"""snapshot.py save SITE FILE | snapshot.py compare SITE FILE WHAT: every file under SITE
with its size and mtime; compare lists what was added, changed or removed since the save."""
import json, os, sys
def scan(site):
    out = {}
    for d, _, files in os.walk(site):
        for f in files:
            p = os.path.join(d, f)
            st = os.lstat(p)
            out[os.path.relpath(p, site)] = [st.st_size, st.st_mtime_ns]
    return out
cmd, site, path = sys.argv[1:4]
if cmd == "save":
    json.dump(scan(site), open(path, "w"))
    sys.exit(0)
before, after = json.load(open(path)), scan(site)
added = sorted(set(after) - set(before))
removed = sorted(set(before) - set(after))
changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
for label, paths in (("written", added), ("changed", changed), ("removed", removed)):
    for p in paths:
        print(f"  {label}: {os.path.join(site, p)}")
if added or changed or removed:
    print(f"FAIL: {sys.argv[4]} wrote inside the read-only site-packages {site}: "
          f"{len(added)} new, {len(changed)} changed, {len(removed)} removed files")
    sys.exit(1)
print(f"ok: {sys.argv[4]} wrote nothing inside {site}")
EOF
"$python" "$work/snapshot.py" save "$site" "$work/site.json"
step "making $site read-only (chmod -R a-w; root is not stopped by it, the snapshot check is)"
chmod -R a-w "$site"

# everything below runs outside the checkout, with its own jit cache and home directory
export JITGRAPH_CACHE_DIR="$work/cache" HOME="$work/home" JITGRAPH_WHEEL_SITE="$site"
export PYTHONDONTWRITEBYTECODE=1   # pip compiled the .pyc files: any write is the package's own
mkdir -p "$JITGRAPH_CACHE_DIR" "$HOME" "$work/outside"
cd "$work/outside"

# ---------------------------------------------------------------- (a) smoke program
cat > "$work/smoke.py" <<'EOF'
"""Import the installed jitgraph, jit a matmul, a reduction and a gradient, compare with NumPy.
argv[1] is 'compile' (an empty disk cache) or 'load' (a second process: all from disk)."""
import json, os, sys
import numpy as np
import jitgraph
import jitgraph.compiler.backends
import jitgraph.kernels
import jitgraph.numpy as jnp

site, phase = os.environ["JITGRAPH_WHEEL_SITE"], sys.argv[1]
for mod in (jitgraph, jitgraph.kernels, jitgraph.compiler.backends):
    assert os.path.realpath(mod.__file__).startswith(os.path.realpath(site) + os.sep), \
        f"{mod.__name__} imported from {mod.__file__}, not from {site}"

def loss(w, x, y):
    h = jnp.tanh(x @ w)
    return jnp.sum((h - y) ** 2) / x.shape[0]

value = jitgraph.jit(loss)
grad = jitgraph.jit(jitgraph.grad(loss))
rng = np.random.default_rng(0)
w, x, y = rng.standard_normal((6, 3)), rng.standard_normal((16, 6)), rng.standard_normal((16, 3))
h = np.tanh(x @ w)
ref_l = np.sum((h - y) ** 2) / 16
ref_g = x.T @ (2 * (h - y) * (1 - h * h)) / 16
l, g = value(w, x, y), grad(w, x, y)
np.testing.assert_allclose(l, ref_l, rtol=1e-12)
np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-12)
programs = [value.lower(w, x, y).program, grad.lower(w, x, y).program]
info = jitgraph.cache_info()
report = {"phase": phase, "info": info, "was_on_disk": [p.was_on_disk for p in programs],
          "numba_compiles": [p.numba_compiles() for p in programs]}
print(json.dumps(report))
if phase == "compile":
    assert info["disk_hits"] == 0 and info["misses"] == 2, info
    assert os.listdir(os.environ["JITGRAPH_CACHE_DIR"]), "nothing written to the disk cache"
else:
    assert info["disk_hits"] == info["misses"] == 2, info
    assert report["was_on_disk"] == [True, True], report
    assert report["numba_compiles"] == [0, 0], f"Numba compiled again from a warm cache: {report}"
print(f"smoke ({phase}): ok, jitgraph {jitgraph.__version__} from {os.path.dirname(jitgraph.__file__)}")
EOF
step "smoke program, first process (empty disk cache)"
"$vpy" "$work/smoke.py" compile
step "smoke program, second process (loads from the disk cache)"
"$vpy" "$work/smoke.py" load
smoke_writes=0
"$python" "$work/snapshot.py" compare "$site" "$work/site.json" "the smoke program" \
    || smoke_writes=1

# ---------------------------------------------------------------- (b) a sample of the suite
step "test sample against the installed wheel: ${sample[*]}"
mkdir "$work/suite"
cp -R "$work/src/tests" "$work/suite/tests"         # the clean copy: no __pycache__
cp "$work/src/pyproject.toml" "$work/suite/"        # pytest's settings (markers, addopts) only
cat > "$work/suite/tests/test_wheel_location.py" <<'EOF'
import os

import jitgraph
import jitgraph.kernels


def test_jitgraph_is_the_installed_wheel():
    site = os.path.realpath(os.environ["JITGRAPH_WHEEL_SITE"]) + os.sep
    for mod in (jitgraph, jitgraph.kernels):
        assert os.path.realpath(mod.__file__).startswith(site), mod.__file__
    print("jitgraph.__file__ =", jitgraph.__file__)
EOF
cd "$work/suite"
[ ! -e jitgraph ] && [ ! -e kernels ] || { echo "the suite copy has a package folder"; exit 1; }
"$vpy" -c 'import jitgraph, os; print("jitgraph.__file__ =", jitgraph.__file__); assert os.path.realpath(jitgraph.__file__).startswith(os.path.realpath(os.environ["JITGRAPH_WHEEL_SITE"]) + os.sep)'
"$vpy" -m pytest -rf -p no:cacheprovider tests/test_wheel_location.py "${sample[@]}"
cd "$work/outside"

# ---------------------------------------------------------------- nothing written in the package
step "nothing written inside the installed package"
all_writes=0
"$python" "$work/snapshot.py" compare "$site" "$work/site.json" "the smoke program and the test sample" \
    || all_writes=1
if [ "$smoke_writes" -ne 0 ] || [ "$all_writes" -ne 0 ]; then
    echo "wheel check FAILED: the installed package was written to (listed above)"
    exit 1
fi
# ---------------------------------------------------------------- the newest Numba as well
if [ -n "${NUMBA_SPEC:-}" ]; then
    step "the wheel in a second fresh environment, with the newest Numba pip finds"
    "$python" -m venv "$work/venv-newest"
    "$work/venv-newest/bin/python" -m pip install -q "$wheel"
    "$work/venv-newest/bin/python" -c 'import numba; print("numba", numba.__version__)'
    newest_site="$("$work/venv-newest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    export JITGRAPH_CACHE_DIR="$work/cache-newest" JITGRAPH_WHEEL_SITE="$newest_site"
    mkdir -p "$JITGRAPH_CACHE_DIR"
    "$work/venv-newest/bin/python" "$work/smoke.py" compile
    "$work/venv-newest/bin/python" "$work/smoke.py" load
fi
step "wheel check passed"
