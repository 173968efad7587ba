#!/usr/bin/env bash
# The GPU machine's one entry point: install the carried wheels (cffi, pycparser, pcpp for
# Python 3.12), run the GPU test lane (each test folder in its own process, so that one
# crash cannot hide the rest), then, with BENCH=1, the benchmarks; a short table comes last.
#   device run:  bash tools/gpu_lane.sh [test folders or files...]   (carry: .whl)
#                BENCH=1 bash tools/gpu_lane.sh                      (tests, then benchmarks)
#                TESTS=0 BENCH=1 bash tools/gpu_lane.sh              (benchmarks only)
#                LANE=all bash tools/gpu_lane.sh                     (CPU lane too)
#                JOBS=7 FOLDER_TIMEOUT=300 bash tools/gpu_lane.sh    (7 folders at once)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cupric-out}
logs=/tmp/cupric-logs   # one log per test folder; joined into $out/gpu_tests.log
rm -rf "$logs"
mkdir -p "$out" "$logs"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
summary=()
skips=/tmp/cupric-skipped.txt   # every skipped test and its reason, from pytest's -rs
: > "$skips"
if [ "${TESTS:-1}" = 1 ]; then
  marker=(-m gpu); [ "${LANE:-gpu}" = all ] && marker=()
  # One SKIPPED line per test (pytest >= 8.3), not one per skip location.
  report=(-rfEs); python3 -m pytest --help 2>/dev/null | grep -q -- --no-fold-skipped \
    && report+=(--no-fold-skipped)
  if [ $# -gt 0 ]; then targets=("$@"); else
    targets=(); for d in tests/*/; do targets+=("${d%/}"); done; fi
  # JOBS folders at once (default 1): the GPU is shared, which is fine for correctness
  # tests but not for timing ones; FOLDER_TIMEOUT (seconds, 0 = none) bounds each folder.
  run_target() {
    local name; name=$(echo "$1" | tr '/.' '__')
    timeout "${FOLDER_TIMEOUT:-0}" python3 -m pytest "${marker[@]}" -q "${report[@]}" \
      -p no:cacheprovider --timeout=300 "$1" > "$logs/$name.log" 2>&1
    echo $? > "$logs/$name.rc"
  }
  running=0
  for target in "${targets[@]}"; do
    run_target "$target" &
    running=$((running + 1))
    if [ "$running" -ge "${JOBS:-1}" ]; then wait -n; running=$((running - 1)); fi
  done
  wait
  for target in "${targets[@]}"; do
    name=$(echo "$target" | tr '/.' '__')
    rc=$(cat "$logs/$name.rc")
    grep -E "^SKIPPED " "$logs/$name.log" >> "$skips"
    # rc 5: nothing selected (a folder without GPU tests) is not a failure.
    [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=1
    line=$(grep -vE "^(SKIPPED|FAILED|ERROR) " "$logs/$name.log" \
      | grep -E "(passed|failed|skipped|error|no tests ran)" | tail -1)
    [ $rc -ne 0 ] && [ $rc -ne 5 ] && grep -E "^(FAILED|ERROR) " "$logs/$name.log" | head -40
    if [ $rc -eq 5 ]; then
      line="no GPU tests"
    elif [ $rc -eq 124 ]; then
      line="stopped after FOLDER_TIMEOUT=${FOLDER_TIMEOUT}s: $line"
    elif [ $rc -gt 5 ] || [ -z "$line" ]; then
      tail -25 "$logs/$name.log"; line="crashed (rc $rc)"
    fi
    summary+=("$(printf '%-40s %s' "$target" "$line")")
  done
fi
[ -n "$(ls "$logs")" ] && for f in "$logs"/*.log; do echo "=== $f"; cat "$f"; done > "$out/gpu_tests.log"
if [ "${BENCH:-0}" = 1 ]; then
  # The run's JSON (<date>-<device>-<commit>.json) lands in $out/results: commit it under
  # benchmarks/results/ and regenerate BENCHMARKS.md (python3 tools/benchmarks_md.py).
  # BENCH_ONLY=a,b picks benchmarks, BENCH_QUICK=1 their short form; a copy sent here has
  # no .git, so pass CUPRIC_COMMIT (and CUPRIC_DIRTY=1 when the tree had changes).
  bench=(--results-dir "$out/results")
  [ -n "${BENCH_ONLY:-}" ] && bench+=(--only "$BENCH_ONLY")
  [ "${BENCH_QUICK:-0}" = 1 ] && bench+=(--quick)
  python3 benchmarks/run_all.py "${bench[@]}" > "$out/bench.log" 2>&1 || status=1
  grep -E "^(=== |FAILED|wrote )| ERROR " "$out/bench.log" | tail -60
fi
if [ -s "$skips" ]; then
  cp "$skips" "$out/gpu_skipped.txt"
  echo "--- skipped: $(wc -l < "$skips") lines (test - reason) ---"
  cat "$skips"
fi
if [ ${#summary[@]} -gt 0 ]; then
  echo "--- GPU lane ---"
  printf '%s\n' "${summary[@]}"
fi
exit $status
