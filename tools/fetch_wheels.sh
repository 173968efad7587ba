#!/usr/bin/env bash
# Download the Python 3.12 wheels the GPU machine lacks (cffi, pycparser, pcpp, ml_dtypes
# for the half-precision tests, and nvidia-cudnn-frontend, host_cost's cuDNN-frontend
# peer) into .whl/,
# which git ignores and tools/gpu_lane.sh installs there (pass .whl in the run's carry).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 \
  -d .whl cffi==2.0.0 pycparser==3.0 pcpp==1.30 ml_dtypes==0.6.0 \
  nvidia-cudnn-frontend==1.32.0
ls .whl
