#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU and the CUDA Python stack already installed
# (numba, numba-cuda, CuPy, PyTorch, JAX), run the CUDA backend's tests on the hardware, then
# the GPU benchmarks side by side; prints one markdown table and writes it to a file, then
# appends jitgraph.profile's per-step table of the MLP training step (bench/gpu_profile.py).
# Installs nothing from a package registry (the machine may have no network).
#
#   bash bench/gpu_check.sh [OUT.md]        # default OUT: bench/gpu_results.md
#   bash bench/gpu_check.sh --sim [OUT.md]  # no GPU: the same steps under Numba's CUDA
#                                           # simulator at tiny sizes (checks this script)
set -uo pipefail
cd "$(dirname "$0")/.."
SIM=0
if [ "${1:-}" = "--sim" ]; then SIM=1; shift; fi
OUT="${1:-bench/gpu_results.md}"
START=$(date +%s)

# jitgraph itself from this checkout, without touching dependencies
# (JITGRAPH_SKIP_INSTALL=1: leave the environment alone, use the checkout via PYTHONPATH).
if [ "${JITGRAPH_SKIP_INSTALL:-0}" != 1 ]; then
    pip install --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
        || echo "note: editable install failed; using the checkout through PYTHONPATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export JITGRAPH_CACHE_DIR="${JITGRAPH_CACHE_DIR:-$(mktemp -d)}"

status=0
if [ "$SIM" = 1 ]; then
    echo "== CUDA tests (simulator)"
    timeout 300 python -m pytest tests_cuda -q -p no:cacheprovider || status=1
    echo "== GPU benchmarks (simulator, tiny sizes)"
    timeout 300 python bench/gpu_bench.py --sim --quick --out "$OUT" || status=1
    echo "== jitgraph.profile of the MLP step (simulator, tiny sizes)"
    timeout 300 python bench/gpu_profile.py --sim --out "$OUT" || status=1
else
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    echo "== CUDA tests on the GPU"
    JITGRAPH_CUDA_REAL=1 timeout 200 python -m pytest tests_cuda -q -p no:cacheprovider \
        --durations=5 || status=1
    echo "== GPU benchmarks"
    timeout 260 python bench/gpu_bench.py --out "$OUT" || status=1
    echo "== jitgraph.profile of the MLP step on the GPU (appended to $OUT)"
    timeout 150 python bench/gpu_profile.py --out "$OUT" || status=1
fi
echo "== done in $(( $(date +%s) - START )) s (exit status $status); table in $OUT"
exit $status
