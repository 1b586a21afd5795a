#!/usr/bin/env bash
# cuda/check.sh — the one prepared script for a GPU machine (one device call does it all):
# builds for sm_90, runs the CUDA-vs-CPU checks, benchmarks the kernels on the 27B shapes and prints
# a table with % of the measured copy bandwidth. Usage: cuda/check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
[ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=enabled --buildtype=release >/dev/null
ninja -C "$B" -j"$(nproc)" | tail -1
echo "== CUDA vs CPU checks"
meson test -C "$B" --suite cuda --print-errorlogs 2>&1 | tail -5 || meson test -C "$B" cuda_matvec --print-errorlogs
echo "== kernel benchmark (27B shapes)"
"$B/tests/cuda/bench_cuda_matvec"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
