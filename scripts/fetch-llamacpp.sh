#!/usr/bin/env bash
# Fetches the llama.cpp reference from the npm registry into third_party/:
#   third_party/node-llama-cpp/bins/linux-x64/   prebuilt CPU libllama / libggml (reference for tests)
#   third_party/node/node_modules/openai/        the openai npm client (server client test)
#   third_party/llama.cpp/                       llama.cpp source (git bundle inside node-llama-cpp):
#                                                headers, vocab GGUFs with tokenizer test vectors
# Idempotent; prints one line and exits 0 with a warning when npm cannot be reached
# (tests that need the reference then skip with a visible message).
set -u
VER=3.22.1
top=$(cd "$(dirname "$0")/.." && pwd)
dst="$top/third_party"
mkdir -p "$dst"
# the openai npm client for the server's client test (tests/serve/test_openai_client.sh)
if [ ! -d "$dst/node/node_modules/openai" ] && command -v npm >/dev/null 2>&1; then
  mkdir -p "$dst/node"
  (cd "$dst/node" && timeout 600 npm install --silent --no-audit --no-fund openai@4 >/dev/null 2>&1) ||
    echo "fetch-llamacpp: cannot install the openai npm package; its test will skip"
fi
if [ -f "$dst/.llamacpp-$VER.ok" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-llamacpp: npm not found; llama.cpp reference unavailable (compat tests will skip)"; exit 0
fi
if ! timeout 600 npm pack --silent "node-llama-cpp@$VER" "@node-llama-cpp/linux-x64@$VER" >/dev/null 2>npm.err; then
  echo "fetch-llamacpp: npm registry unreachable ($(tail -1 npm.err)); compat tests will skip"; exit 0
fi
rm -rf "$dst/node-llama-cpp" "$dst/llama.cpp"
mkdir -p "$dst/node-llama-cpp" x
tar xzf "node-llama-cpp-linux-x64-$VER.tgz" -C x
mv x/package/bins "$dst/node-llama-cpp/bins"
tar xzf "node-llama-cpp-$VER.tgz" package/llama/gitRelease.bundle
git clone -q package/llama/gitRelease.bundle "$dst/llama.cpp" 2>/dev/null || { echo "fetch-llamacpp: cannot clone bundle"; exit 0; }
touch "$dst/.llamacpp-$VER.ok"
echo "fetch-llamacpp: llama.cpp reference (node-llama-cpp $VER) in third_party/"
