#!/usr/bin/env bash
# The GPU machine's one entry point: install the carried wheels (cffi, pycparser for
# Python 3.12), run the GPU test lane on the given targets (default: all of tests/), then,
# with BENCH=1, the benchmarks; the short table comes last.
#   device run:  bash tools/gpu_lane.sh [pytest targets...]       (carry: .whl)
#                BENCH=1 bash tools/gpu_lane.sh        (tests, then benchmarks)
#                LANE=all bash tools/gpu_lane.sh       (CPU lane too)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cupric-out}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
if [ "${TESTS:-1}" = 1 ]; then
  # LANE=all also runs the CPU lane against the GPU machine's own toolchain.
  marker=(-m gpu); [ "${LANE:-gpu}" = all ] && marker=()
  python3 -m pytest "${marker[@]}" -q -p no:cacheprovider --timeout=300 "${@:-tests}" 2>&1 | tee "$out/gpu_tests.log"
  status=${PIPESTATUS[0]}
fi
if [ "${BENCH:-0}" = 1 ]; then
  python3 benchmarks/run_all.py --json "$out/bench.json" 2>&1 | tee "$out/bench.log"
fi
exit $status
