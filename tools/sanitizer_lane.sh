#!/usr/bin/env bash
# The sanitizer lane: compute-sanitizer's four tools (memcheck, racecheck, synccheck,
# initcheck) over every ready kernel, the gpu_rand fills, the examples at small sizes
# (tools/sanitizer_workload.py) and the compiler's GPU tests, on the GPU machine.
#   device run:  bash tools/sanitizer_lane.sh                 (carry: .whl)
#                TOOLS="memcheck initcheck" WORKLOADS="kernels rand" bash tools/sanitizer_lane.sh
#                STEP_TIMEOUT=120 JOBS=4 WARMUP_TIMEOUT=90 bash tools/sanitizer_lane.sh
#                SKIP_INSTALL=1 ...   (the wheels are already in /tmp/site)
# compute-sanitizer comes from the CUDA toolkit there (PATH, $CUDA_HOME/bin,
# /usr/local/cuda/bin), else from the nvidia-cuda-sanitizer-api wheel carried in .whl/.
# Each (tool, workload) pair runs in its own process, JOBS at a time, at most
# STEP_TIMEOUT seconds each; kernels are compiled once beforehand, outside the tool, into
# a shared cache. A finding, a failing workload or a time-out fails the lane; the table
# at the end has one line per pair with the tool's error count.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cupric-out}
logs=/tmp/cupric-sanitizer-logs   # one per (tool, workload); joined into $out/sanitizer.log
rm -rf "$logs"
mkdir -p "$logs" "$out"
if [ "${SKIP_INSTALL:-0}" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CUPRIC_CACHE_DIR=${CUPRIC_CACHE_DIR:-/tmp/cupric-sanitizer-cache}

sanitizer=$(command -v compute-sanitizer || true)
for candidate in "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
                 /usr/local/cuda/bin/compute-sanitizer \
                 /tmp/site/nvidia/cu13/bin/compute-sanitizer \
                 /tmp/site/nvidia/cuda_sanitizer_api/compute-sanitizer/compute-sanitizer; do
  [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
done
if [ -z "$sanitizer" ]; then
  echo "compute-sanitizer not found (install the CUDA toolkit or carry the"
  echo "nvidia-cuda-sanitizer-api wheel in .whl/)"
  exit 2
fi
"$sanitizer" --version | tail -1

TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
WORKLOADS=${WORKLOADS:-kernels rand examples compiler}
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
JOBS=${JOBS:-4}

# Compile every kernel once without the tool: the sanitized runs then load cubins from
# the cache instead of spending their time limit in libNVVM.
timeout "${WARMUP_TIMEOUT:-300}" python3 tools/sanitizer_workload.py kernels rand > "$logs/warmup.log" 2>&1 \
  || { echo "warm-up failed:"; tail -30 "$logs/warmup.log"; }

run_one() {  # tool workload
  local tool=$1 workload=$2 log=$logs/$1-$2.log cmd
  if [ "$workload" = compiler ]; then
    # The compiler's GPU tests but the fuzzer (randomized, and long under the tool) and
    # the three that fault on purpose in a child process (a device assert, a trap, a
    # bounds-check abort), which the tool rightly reports.
    cmd=(python3 -m pytest -q -m gpu -p no:cacheprovider tests/compiler/test_lang_gpu.py
         tests/compiler/test_backend_gpu.py tests/compiler/test_device_lowering_gpu.py
         tests/compiler/test_launch_checks_gpu.py
         -k "not failed_assert and not trap_fails and not bounds_check_reports")
  else
    cmd=(python3 tools/sanitizer_workload.py "$workload")
  fi
  local extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  timeout "$STEP_TIMEOUT" "$sanitizer" --tool "$tool" --error-exitcode 86 \
    --print-limit 30 --target-processes all "${extra[@]}" "${cmd[@]}" > "$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1)
  [ -z "$summary" ] && summary="no summary"
  case $rc in
    0) status=ok ;; 86) status=FINDINGS ;; 124) status=TIMEOUT ;; *) status="FAILED rc $rc" ;;
  esac
  printf '%-10s %-9s %-14s %s\n' "$tool" "$workload" "$status" "$summary" > "$log.status"
}
export -f run_one
export sanitizer logs STEP_TIMEOUT

pairs=()
for tool in $TOOLS; do for workload in $WORKLOADS; do pairs+=("$tool $workload"); done; done
printf '%s\n' "${pairs[@]}" | xargs -P "$JOBS" -L 1 bash -c 'run_one $0 $1'

status=0
for pair in "${pairs[@]}"; do
  set -- $pair
  { echo "=== $1 $2"; tail -300 "$logs/$1-$2.log"; } >> "$out/sanitizer.log"
done
echo "--- sanitizer lane ---"
for pair in "${pairs[@]}"; do
  set -- $pair
  line=$(cat "$logs/$1-$2.log.status" 2>/dev/null || echo "$1 $2 missing")
  echo "$line"
  case $line in *" ok "*) ;; *) status=1
    grep -E "^========= +(Invalid|Uninitialized|Race|Barrier|Error|Program hit|    at)|Error:|Traceback" \
      "$logs/$1-$2.log" | head -12 ;; esac
done
exit $status
