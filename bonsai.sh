#!/usr/bin/env bash
# The project's two set-up commands (see README):
#   ./bonsai.sh demo   install what is missing, build, run the end-to-end demo
#   ./bonsai.sh test   install what is missing, build, run every test; last line "N passed, N failed"
# Other verbs: deps (apt + npm reference only), build, bench-quantize.
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
cd "$top"
BUILD=${BUILD:-build}

deps() {
  local pkgs="meson ninja-build pkg-config gcc g++ libopenblas-dev zlib1g-dev libjansson-dev libpcre2-dev libmicrohttpd-dev git curl jq bc cmake python3 libc6-dev netbase"
  local missing=""
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  # node/npm may come from another packaging (e.g. nodesource): only install Debian's if absent
  command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
  if [ -n "$missing" ]; then
    echo "bonsai: installing:$missing"
    [ "$(id -u)" = 0 ] || { echo "bonsai: run as root to install packages"; exit 1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
  ./scripts/fetch-llamacpp.sh
}

build() {
  if [ ! -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --buildtype=release >/dev/null; fi
  ninja -C "$BUILD" | tail -1
}

case "${1:-}" in
  deps) deps ;;
  build) deps; build ;;
  test) deps; build; exec ./tests/run-tests.sh "$BUILD" ;;
  demo) deps; build; exec ./scripts/demo.sh "$BUILD" ;;
  bench-quantize) deps; build; exec ./bench/quantize.sh "$BUILD" ;;
  *) echo "usage: $0 demo|test|deps|build|bench-quantize"; exit 2 ;;
esac
