#!/usr/bin/env bash
# The GPU path's first run on borrowed hardware, in one command (bench/gpu_first_run.py says
# what each phase does): under 8 minutes, every phase capped, every line written to OUT as it
# is known. Installs nothing (the machine may have no network).
#
#   bash bench/gpu_first_run.sh [--sim] [OUT.md]     # default OUT: bench/gpu_first_run.md
#
#   --sim    no GPU: every phase under Numba's CUDA simulator at tiny sizes (checks this script)
set -uo pipefail
cd "$(dirname "$0")/.."
SIM=()
OUT="$PWD/bench/gpu_first_run.md"
for arg in "$@"; do
    case "$arg" in
        --sim) SIM=(--sim) ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        -*) echo "gpu_first_run.sh: unknown option $arg (use --sim, OUT.md)" >&2; exit 2 ;;
        /*) OUT="$arg" ;;
        *) OUT="$PWD/$arg" ;;
    esac
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export JITGRAPH_CACHE_DIR="${JITGRAPH_CACHE_DIR:-$(mktemp -d)}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# the phases' caps add up to 450 s; the whole run is stopped at 470 s whatever happens
timeout -s TERM -k 10 470 python -u bench/gpu_first_run.py "${SIM[@]}" --out "$OUT"
rc=$?
[ "$rc" = 124 ] && echo "== stopped at the 470 s limit" | tee -a "$OUT"
echo "== exit status $rc; the report is $OUT"
exit "$rc"
