#!/usr/bin/env bash
# scripts/build-llamacpp-cuda.sh — the peer for cuda/check.sh: llama.cpp's llama-bench from the npm bundle's
# source (third_party/llama.cpp, scripts/fetch-llamacpp.sh) built with CUDA for sm_90 only, static ggml, so
# that one file travels to the GPU machine: build-peer/llama-bench.xz (+ build-peer/llama-bench.txt, what
# it is). The device tool's `run` then carries build-peer (cuda/check.sh finds it there).
#   usage: scripts/build-llamacpp-cuda.sh            (-j2 here: ~1.5 h on 2 cores; BONSAI_JOBS overrides)
# CPU code is built for AVX2/FMA/F16C (the GPU machine's CPU is not this one); the GPU path is all that is
# measured. FlashAttention kernels are built (llama-bench's default -fa auto uses them on CUDA).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
src="$top/third_party/llama.cpp"
bld="$src/build-cuda"
out="$top/build-peer"
jobs="${BONSAI_JOBS:-2}"
[ -f "$src/CMakeLists.txt" ] || { echo "build-llamacpp-cuda: $src is missing; run scripts/fetch-llamacpp.sh first" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build-llamacpp-cuda: nvcc not found" >&2; exit 1; }
if [ ! -f "$bld/build.ninja" ]; then
    cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
        -DGGML_F16C=ON -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
fi
ninja -C "$bld" -j"$jobs" llama-bench
mkdir -p "$out/lib"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$out/lib/" # a fallback for an image without it (check.sh)
xz -T0 -9 -c "$bld/bin/llama-bench" >"$out/llama-bench.xz.tmp" && mv "$out/llama-bench.xz.tmp" "$out/llama-bench.xz"
commit=$(sed -n "s/.*GGML_COMMIT *\"\([0-9a-f]*\)\".*/\1/p" "$bld/ggml/src/ggml-version.h" 2>/dev/null || true)
{
    echo "llama.cpp llama-bench ${commit:+($commit) }CUDA sm_90, static, from the npm bundle's source"
    echo "built $(date -u +%Y-%m-%d) with $(nvcc --version | tail -1); needs libcudart.so.13 and libcublas.so.13 there"
} >"$out/llama-bench.txt"
ls -la "$out"
