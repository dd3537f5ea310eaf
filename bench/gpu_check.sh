#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU and the CUDA Python stack already installed
# (numba, numba-cuda, CuPy, PyTorch, JAX), check the driver and toolkit, run the CUDA
# backend's tests on the hardware, then the GPU benchmarks side by side (bench/gpu_bench.py:
# each table row is appended to OUT as soon as it is measured), then jitgraph.profile's
# per-step table of the MLP training step (bench/gpu_profile.py), and prints OUT at the end.
# Installs nothing from a package registry (the machine may have no network).
#
#   bash bench/gpu_check.sh [--quick] [--sim] [--tf32] [OUT.md]   # default OUT: bench/gpu_results.md
#
#   --quick  fewer repeats, four workloads, shorter step timeouts: under 5 minutes in all
#            (default: under 7.5)
#   --sim    no GPU: the same steps under Numba's CUDA simulator at tiny sizes (checks this
#            script; no driver check)
#   --tf32   PyTorch and JAX may use TF32 matmuls (default: strict float32 on both sides)
#
# Every step runs under its own `timeout`; the budget is printed first. Exit status: 0 when the
# benchmark table has at least one measured row (MISMATCH and FAILED rows are marked in it, the
# tests' and the profile's results are in its summary); 1 when it has none; 2 when no GPU is
# usable (the driver check says what is missing), or on a bad option.
# Environment: JITGRAPH_SKIP_INSTALL=1 skips the editable install (the checkout is used through
# PYTHONPATH anyway); JITGRAPH_GPU_CHECK_SKIP_TESTS=1 skips the CUDA tests.
set -uo pipefail
SIM=0
QUICK=0
TF32=0
OUT=bench/gpu_results.md
for arg in "$@"; do
    case "$arg" in
        --sim) SIM=1 ;;
        --quick) QUICK=1 ;;
        --tf32) TF32=1 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $arg (use --quick, --sim, --tf32, OUT.md)" >&2
            exit 2 ;;
        *) case "$arg" in /*) OUT="$arg" ;; *) OUT="$PWD/$arg" ;; esac ;;
    esac
done
cd "$(dirname "$0")/.."          # OUT: as given, from where the script was started
START=$(date +%s)

# step timeouts (seconds), each including the KILL s that `timeout -k` allows after its signal;
# the scripts stop by themselves (--budget) a few seconds before their step's timeout
KILL=5
if [ "$QUICK" = 1 ]; then
    # the benchmarks get 160 s: gpu_bench.py --quick runs four workloads of about 40 s each,
    # enough for torch.compile's cold compile
    T_INSTALL=0; T_SMI=5; T_PRE=15; T_TESTS=60; T_BENCH=160; T_PROFILE=40; LIMIT=290
else
    T_INSTALL=15; T_SMI=5; T_PRE=20; T_TESTS=125; T_BENCH=210; T_PROFILE=75; LIMIT=450
fi
if [ "$SIM" = 1 ]; then
    # the simulator is slow where the GPU is fast (the profile compiles and runs the step
    # twice); no driver check, no install
    T_INSTALL=0; T_SMI=0; T_PRE=0
    if [ "$QUICK" = 1 ]; then T_TESTS=45; T_BENCH=85; T_PROFILE=85
    else T_TESTS=125; T_BENCH=160; T_PROFILE=160; fi
fi
[ "${JITGRAPH_SKIP_INSTALL:-0}" = 1 ] && T_INSTALL=0
[ "${JITGRAPH_GPU_CHECK_SKIP_TESTS:-0}" = 1 ] && T_TESTS=0
TOTAL=$((T_INSTALL + T_SMI + T_PRE + T_TESTS + T_BENCH + T_PROFILE))
MODE="$([ "$SIM" = 1 ] && echo "sim, ")$([ "$QUICK" = 1 ] && echo quick || echo full)$([ "$TF32" = 1 ] && echo ", TF32 on for PyTorch/JAX")"
echo "== jitgraph GPU check ($MODE) -> $OUT"
echo "== time budget: install ${T_INSTALL} s + driver check $((T_SMI + T_PRE)) s + tests ${T_TESTS} s" \
     "+ benchmarks ${T_BENCH} s + profile ${T_PROFILE} s = at most ${TOTAL} s (limit ${LIMIT} s)"

mkdir -p "$(dirname "$OUT")"
LOG_DIR=$(mktemp -d)
SUMMARY=()
note() { SUMMARY+=("$1"); echo "   $1"; }

# step NAME SECONDS SIGNAL CMD...: run CMD under `timeout -s SIGNAL -k KILL (SECONDS-KILL)`,
# its stdout to $LOG_DIR/NAME.log (and, for the tests, to the terminal too; the scripts print
# their progress on stderr and their table, which OUT holds, on stdout); note its status and
# time; returns its status
step() {
    local name=$1 secs=$2 sig=$3 t0 rc
    shift 3
    t0=$(date +%s)
    if [ "$name" = tests ]; then
        timeout -s "$sig" -k "$KILL" "$((secs - KILL))" "$@" 2>&1 | tee "$LOG_DIR/$name.log"
        rc=${PIPESTATUS[0]}
    else
        timeout -s "$sig" -k "$KILL" "$((secs - KILL))" "$@" > "$LOG_DIR/$name.log" \
            2> >(tee "$LOG_DIR/$name.err" >&2)
        rc=$?
    fi
    local how="ok"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then how="TIMED OUT (rc $rc, cap ${secs} s)"
    elif [ "$rc" != 0 ]; then how="exit status $rc"; fi
    note "$name: $how in $(( $(date +%s) - t0 )) s"
    return "$rc"
}

{ echo "# jitgraph GPU check, $(date -u '+%Y-%m-%d %H:%M UTC') ($MODE)"
  echo
  echo "Time budget: at most ${TOTAL} s (install ${T_INSTALL}, driver check $((T_SMI + T_PRE))," \
       "tests ${T_TESTS}, benchmarks ${T_BENCH}, profile ${T_PROFILE})."
  echo; } > "$OUT"

# ---- driver and toolkit: nvidia-smi, numba-cuda, CuPy
if [ "$SIM" = 1 ]; then
    echo "== driver check skipped (--sim: Numba's CUDA simulator, no GPU needed)"
    export NUMBA_ENABLE_CUDASIM=1
else
    echo "== driver and toolkit check"
    MISSING=()
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        MISSING+=("nvidia-smi not found: no NVIDIA driver installed, or not on PATH")
    else
        SMI=$(timeout -k 1 "$((T_SMI - 1))" nvidia-smi \
              --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)
        if [ $? != 0 ] || [ -z "$SMI" ]; then
            MISSING+=("nvidia-smi lists no GPU (${SMI:-no output}): driver not loaded, or the" \
                      "container was started without the GPU")
        else
            echo "   nvidia-smi: $SMI"
        fi
    fi
    PRE=$(timeout -k 2 "$((T_PRE - 2))" python - <<'EOF' 2>&1
import sys


def why(e):
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


fatal = False
try:
    from numba import cuda
except Exception as e:
    fatal = True
    print(f"MISSING: numba-cuda is not importable: {why(e)}")
else:
    try:
        cuda.select_device(0)
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        print(f"ok: numba-cuda sees {len(cuda.gpus)} GPU(s): {name}, compute capability "
              f"{'.'.join(map(str, dev.compute_capability))}")
    except Exception as e:
        fatal = True
        print(f"MISSING: numba-cuda sees no usable GPU: {why(e)}")
        try:
            print("numba's cuda.detect():")
            cuda.detect()
        except Exception as e2:
            print(f"  (cuda.detect() failed too: {why(e2)})")
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    print(f"ok: CuPy {cupy.__version__} sees {n} GPU(s)")
except Exception as e:
    print(f"MISSING (not fatal: jitgraph's cuBLAS path and the CuPy row will fail): CuPy: {why(e)}")
sys.exit(2 if fatal else 0)
EOF
    )
    PRE_RC=$?
    [ -n "$PRE" ] && echo "$PRE" | sed 's/^/   /'
    if [ "$PRE_RC" = 124 ] || [ "$PRE_RC" = 137 ]; then
        MISSING+=("the numba-cuda/CuPy check did not finish within $T_PRE s")
    elif [ "$PRE_RC" != 0 ]; then
        MISSING+=("$(echo "$PRE" | grep '^MISSING: numba' | head -1 | sed 's/^MISSING: //')")
    fi
    CUPY_MISSING=$(echo "$PRE" | grep '^MISSING (not fatal' | sed 's/^MISSING //')
    [ -n "$CUPY_MISSING" ] && MISSING+=("$CUPY_MISSING")
    # a usable GPU is one numba-cuda can open; nvidia-smi alone missing is only a warning
    if [ "$PRE_RC" != 0 ]; then
        echo "== no usable GPU; nothing else was run. Missing:"
        { echo "No usable GPU; nothing was run. Missing:"; printf -- '- %s\n' "${MISSING[@]}"; } >> "$OUT"
        printf -- '   - %s\n' "${MISSING[@]}"
        exit 2
    fi
    if [ "${#MISSING[@]}" -gt 0 ]; then
        printf -- '   warning: %s\n' "${MISSING[@]}"
        printf -- '- warning: %s\n' "${MISSING[@]}" >> "$OUT"
    fi
fi

# ---- jitgraph itself from this checkout, without touching dependencies
if [ "$T_INSTALL" -gt 0 ] && [ "$SIM" = 0 ]; then
    timeout -k 2 "$((T_INSTALL - 2))" pip install --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
        || echo "note: editable install failed or timed out; using the checkout through PYTHONPATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export JITGRAPH_CACHE_DIR="${JITGRAPH_CACHE_DIR:-$(mktemp -d)}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
ARGS=()
[ "$SIM" = 1 ] && ARGS+=(--sim)
[ "$QUICK" = 1 ] && ARGS+=(--quick)

# ---- the CUDA tests; at the cap, SIGTERM becomes a KeyboardInterrupt, on which pytest stops
# and still prints its summary (SIGINT itself may be ignored in a background job)
TESTS_LINE="skipped (JITGRAPH_GPU_CHECK_SKIP_TESTS=1)"
if [ "$T_TESTS" -gt 0 ]; then
    echo "== CUDA tests $([ "$SIM" = 1 ] && echo "(simulator)" || echo "on the GPU") (cap $T_TESTS s)"
    if [ "$SIM" = 1 ]; then REAL=0; else REAL=1; fi
    JITGRAPH_CUDA_REAL=$REAL step tests "$T_TESTS" TERM python -u - tests_cuda -q \
        -p no:cacheprovider --tb=short --durations=5 <<'EOF'
import collections, os, signal, sys, threading
import pytest


class Count:
    """Outcomes, for a summary line that an interrupted session prints too."""
    def __init__(self):
        self.n = collections.Counter()

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.n[report.outcome] += 1
        elif report.outcome == "skipped":
            self.n["skipped"] += 1
        elif report.outcome == "failed":
            self.n["errors"] += 1


def summary(rc, how=""):
    line = ("\ntests summary: " + (", ".join(f"{v} {k}" for k, v in sorted(count.n.items()))
                                 or "none ran") + how + f"; pytest exit status {rc}\n")
    sys.stdout.flush()
    os.write(STDOUT, line.encode())   # the real stdout: pytest may be capturing sys.stdout
    os._exit(rc)   # threads an interrupted test left (the simulator's) must not hold the exit


def on_term(signum, frame):
    # pytest stops on KeyboardInterrupt; should a test swallow it, end 3 s later regardless
    threading.Timer(3.0, summary, (2, " (stopped at the cap, the running test abandoned)")).start()
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
count = Count()
STDOUT = os.dup(1)
rc = int(pytest.main(sys.argv[1:], plugins=[count]))
summary(rc, " (stopped at the cap)" if rc == 2 else "")
EOF
    TESTS_RC=$?
    TESTS_LINE="$(grep '^tests summary: ' "$LOG_DIR/tests.log" | tail -1 | sed 's/^tests summary: //')"
    if [ "$TESTS_RC" = 137 ]; then
        TESTS_LINE="${TESTS_LINE:-no summary}; killed at the ${T_TESTS} s cap"
    fi
    [ -n "$TESTS_LINE" ] || TESTS_LINE="exit status $TESTS_RC, no summary"
    echo "   tests: $TESTS_LINE"
fi

# ---- the benchmarks: rows appended to $OUT as they are measured
echo "== GPU benchmarks$([ "$SIM" = 1 ] && echo " (simulator, tiny sizes)") (cap $T_BENCH s)"
BENCH_ARGS=("${ARGS[@]}")
[ "$TF32" = 1 ] && BENCH_ARGS+=(--tf32)
step bench "$T_BENCH" TERM python -u bench/gpu_bench.py "${BENCH_ARGS[@]}" --append \
    --budget "$((T_BENCH - KILL - 4))" --out "$OUT"

# ---- jitgraph.profile of the MLP step, appended to $OUT
echo "== jitgraph.profile of the MLP step$([ "$SIM" = 1 ] && echo " (simulator, tiny sizes)") (cap $T_PROFILE s)"
step profile "$T_PROFILE" TERM python -u bench/gpu_profile.py "${ARGS[@]}" \
    --budget "$((T_PROFILE - KILL - 3))" --out "$OUT"

# ---- summary, appended to $OUT; the exit status follows the benchmark rows
ROWS=$(awk '/^### jitgraph.profile/ {exit} /^\| / && !/^\| workload \|/ && !/^\| ---/' "$OUT" | grep -c '^| ')
FAILED_ROWS=$(awk '/^### jitgraph.profile/ {exit} /^\| .*\| FAILED: /' "$OUT" | grep -c '^| ')
MEASURED=$((ROWS - FAILED_ROWS))
{ echo
  echo "### GPU check summary"
  echo
  echo "- CUDA tests: $TESTS_LINE"
  printf -- '- %s\n' "${SUMMARY[@]}"
  echo "- benchmark rows: $MEASURED measured, $FAILED_ROWS FAILED"
  if [ "$MEASURED" = 0 ] && [ -s "$LOG_DIR/bench.err" ]; then
      echo "- the benchmarks' last words:"; echo; echo '```'; tail -n 8 "$LOG_DIR/bench.err"; echo '```'
  fi
  echo "- total $(( $(date +%s) - START )) s of the ${TOTAL} s budget"; } >> "$OUT"
echo
echo "================================================================ $OUT"
cat "$OUT"
rm -rf "$LOG_DIR"
if [ "$MEASURED" -gt 0 ]; then status=0; else status=1; fi
echo "== done in $(( $(date +%s) - START )) s (exit status $status); table in $OUT"
exit $status
