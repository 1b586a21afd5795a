#!/usr/bin/env bash
# tests/serve/test_openai_client.sh — runs the openai npm client against a real bonsai-serve.
# Skips (77) when node or the openai package (third_party/node, installed by scripts/fetch-llamacpp.sh)
# is missing.
set -u
B=${BONSAI_BUILD_ROOT:?}
TP=${BONSAI_THIRD_PARTY:?}
SRC=${BONSAI_SOURCE_ROOT:?}
if ! command -v node >/dev/null || [ ! -d "$TP/node/node_modules/openai" ]; then
  echo "SKIP: node or the openai npm package is missing (run scripts/fetch-llamacpp.sh)"; exit 77
fi
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$B/tools/bonsai-mkmodel" "$dir/m.gguf" --preset tiny --seed 3 >/dev/null || exit 1
"$B/tools/bonsai-serve" -m "$dir/m.gguf" --port 0 --ready-file "$dir/ready" -c 256 -t 2 2>"$dir/log" &
pid=$!
for _ in $(seq 300); do [ -s "$dir/ready" ] && break; sleep 0.1; done
[ -s "$dir/ready" ] || { echo "server did not start"; cat "$dir/log"; exit 1; }
url="http://$(cat "$dir/ready")/v1"
NODE_PATH="$TP/node/node_modules" timeout 120 node "$SRC/tests/serve/openai_client.mjs" "$url"
