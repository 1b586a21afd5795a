#!/usr/bin/env bash
# Builds the llama.cpp reference tools (CPU only, Release) from third_party/llama.cpp into
# third_party/llama.cpp/build/bin, for the benchmarks in bench/.
#   usage: scripts/build-llamacpp.sh [target...]     (default: llama-quantize llama-bench llama-perplexity)
# Idempotent: targets whose binary already exists are skipped. Uses -j2 (BONSAI_JOBS overrides).
# Exits 1 with a message if the source tree is missing (run scripts/fetch-llamacpp.sh first).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
src="$top/third_party/llama.cpp"
bld="$src/build"
jobs="${BONSAI_JOBS:-2}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-quantize llama-bench llama-perplexity)

if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "build-llamacpp: $src is missing; run scripts/fetch-llamacpp.sh first" >&2
  exit 1
fi

todo=()
for t in "${targets[@]}"; do
  [ -x "$bld/bin/$t" ] || todo+=("$t")
done
if [ ${#todo[@]} -eq 0 ]; then
  echo "build-llamacpp: up to date (${targets[*]})"
  exit 0
fi

if [ ! -f "$bld/CMakeCache.txt" ]; then
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  cmake -S "$src" -B "$bld" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_CUDA=OFF \
        -DBUILD_SHARED_LIBS=OFF >/dev/null
fi
echo "build-llamacpp: building ${todo[*]} with -j$jobs (this takes a while on few cores)"
cmake --build "$bld" --config Release -j "$jobs" --target "${todo[@]}"
for t in "${todo[@]}"; do
  [ -x "$bld/bin/$t" ] || { echo "build-llamacpp: $t was not built" >&2; exit 1; }
done
echo "build-llamacpp: done: $bld/bin/{${todo[*]}}"
