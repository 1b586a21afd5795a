#!/usr/bin/env bash
# cuda/check.sh — the one prepared script for a GPU machine (one device call, < 8 minutes):
#   1. builds for sm_90 (meson -Dcuda=enabled, release) in BUILD_DIR (default build-cuda);
#   2. runs the CUDA tests on the GPU (`meson test --suite cuda`, the non-emulator ones);
#   3. generates synthetic models of the real Qwen3.5-27B shape (bonsai-mkmodel --preset 27b, F16,
#      then bonsai-quantize --pure to Q1_0 and Q2_0) with 4 and 8 layers instead of 64 — the full
#      model would take ~54 GB of F16 and minutes to write — and scales the measured times linearly
#      per layer: t(64) = t(4) + 15·(t(8) − t(4)) (the head, embedding and per-layer costs separate);
#   4. runs bonsai-bench -ngl 99 (pp512, tg128) on them, bench_cuda_mm --quick and the copy bandwidth;
#   5. prints ONE markdown table (tok/s, decode GB/s, % of copy bandwidth) plus the date.
# Usage: cuda/check.sh [--emu | --tiny] [BUILD_DIR]
#   --emu: the same steps against the CPU emulator (tiny preset, 4/8 → 16 layers, pp16/tg8, no build
#   and no GPU tests; BUILD_DIR must be built already). This is how the script itself is tested
#   without a GPU (test cuda_check_script_emu). Numbers from --emu are emulator speed, meaningless.
#   --tiny: GPU mode with the tiny shapes (a quick smoke run when device time is short).
set -euo pipefail
cd "$(dirname "$0")/.."
EMU=0 TINY=0
if [ "${1:-}" = "--emu" ]; then EMU=1; shift; elif [ "${1:-}" = "--tiny" ]; then TINY=1; shift; fi
B=${1:-build-cuda}
NPROC=$(nproc)
T_START=$(date +%s)
step() { echo "== [$(( $(date +%s) - T_START )) s] $*"; }

if [ "$EMU" = 1 ]; then
    BENCH="$B/tests/cuda/bonsai-bench-emu"
    COPYBW=("$B/tests/cuda/cuda_copy_bw_emu" 16)
    PRESET=tiny L1=4 L2=8 LFULL=16 PP=16 TG=8 REPS=1 V=512 H=128
    for f in "$BENCH" "${COPYBW[0]}" "$B/tools/bonsai-mkmodel" "$B/tools/bonsai-quantize"; do
        [ -x "$f" ] || { echo "check.sh --emu: $f missing (build $B first)"; exit 1; }
    done
    DEVICE="CPU emulator"
    TESTS="not run (--emu)"
else
    PRESET=27b L1=4 L2=8 LFULL=64 PP=512 TG=128 REPS=3 V=248320 H=5120
    [ "$TINY" = 1 ] && PRESET=tiny LFULL=16 PP=64 TG=32 V=512 H=128
    DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "unknown GPU")
    echo "device: $DEVICE"
    step "build ($B, sm_90, release)"
    [ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=enabled --buildtype=release >/dev/null
    ninja -C "$B" -j"$NPROC" | tail -1
    BENCH="$B/tools/bonsai-bench"
    COPYBW=("$B/tests/cuda/cuda_copy_bw" 1024)
    step "CUDA tests on the GPU"
    mapfile -t GPU_TESTS < <(meson test -C "$B" --list 2>/dev/null | sed -n 's|^bonsai:cuda / ||p' | grep -v '_emu')
    if [ "${#GPU_TESTS[@]}" = 0 ]; then
        TESTS="none found (was $B configured with -Dcuda=enabled?)"
    else
        rc=0
        meson test -C "$B" --print-errorlogs "${GPU_TESTS[@]}" >"$B/cuda-tests.log" 2>&1 || rc=$?
        SUMMARY=$(grep -E "^(Ok|Fail|Skipped|Timeout):" "$B/cuda-tests.log" | tr -s ' ' | tr '\n' ' ')
        [ "$rc" = 0 ] && TESTS="${GPU_TESTS[*]}: $SUMMARY" || TESTS="FAILED ($SUMMARY; see $B/cuda-tests.log)"
        grep -E "^ *[0-9]+/[0-9]+ " "$B/cuda-tests.log" || true
    fi
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/bn-cuda-check.XXXXXX")
trap 'rm -rf "$W"' EXIT
step "generate $PRESET-shape models with $L1 and $L2 layers (F16 → Q1_0, Q2_0)"
gen() { # gen N_LAYER: writes $W/l<N>-Q1_0.gguf and $W/l<N>-Q2_0.gguf
    local L=$1
    "$B/tools/bonsai-mkmodel" "$W/l$L-f16.gguf" --preset "$PRESET" --n-layer "$L" --type f16 >"$W/mk$L.log" 2>&1
    for q in Q1_0 Q2_0; do
        "$B/tools/bonsai-quantize" "$W/l$L-f16.gguf" "$W/l$L-$q.gguf" "$q" --pure --threads $(( NPROC / 2 > 0 ? NPROC / 2 : 1 )) \
            >"$W/q$L-$q.log" 2>&1
    done
    rm -f "$W/l$L-f16.gguf"
}
gen "$L1" & P1=$!
gen "$L2" & P2=$!
wait "$P1" && wait "$P2" || { echo "model generation failed:"; tail -3 "$W"/*.log; exit 1; }

step "copy bandwidth"
COPY_GBS=$("${COPYBW[@]}")
echo "copy bandwidth: $COPY_GBS GB/s (read + write)"
if [ "$EMU" = 0 ]; then
    step "bench_cuda_mm --quick"
    "$B/tests/cuda/bench_cuda_mm" --quick || echo "bench_cuda_mm failed"
fi

step "bonsai-bench -ngl 99 -p $PP -n $TG -r $REPS"
for q in Q1_0 Q2_0; do
    for L in "$L1" "$L2"; do
        "$BENCH" -m "$W/l$L-$q.gguf" -ngl 99 -p "$PP" -n "$TG" -r "$REPS" -o json >"$W/b-$q-$L.json"
    done
done

# field F of the I-th result (1-based) of a bonsai-bench JSON file
jfield() { grep -o "\"$2\": [0-9.]*" "$1" | sed -n "$3p" | awk '{print $2}'; }

step "done"
echo
echo "## CUDA check — $(date -u +%Y-%m-%dT%H:%MZ) — $DEVICE"
echo
echo "Model: synthetic $PRESET shape (bonsai-mkmodel, --pure: every 2-D weight incl. head and embedding in the"
echo "type), measured with $L1 and $L2 layers and scaled linearly to $LFULL layers. Decode GB/s = weight bytes"
echo "read per token (all but token_embd) × tg tok/s; copy bandwidth $COPY_GBS GB/s. GPU tests: $TESTS."
echo
echo "| type | layers | size (MiB) | pp$PP t/s | tg$TG t/s | decode GB/s | % of copy BW |"
echo "| ---- | -----: | ---------: | --------: | --------: | ----------: | -----------: |"
for q in Q1_0 Q2_0; do
    f1="$W/b-$q-$L1.json" f2="$W/b-$q-$L2.json"
    bpw=$([ "$q" = Q1_0 ] && echo 1.125 || echo 2.25)
    awk -v q="$q" -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v PP="$PP" -v TG="$TG" -v V="$V" -v H="$H" -v bpw="$bpw" \
        -v copy="$COPY_GBS" -v s1="$(jfield "$f1" model_size 1)" -v s2="$(jfield "$f2" model_size 1)" \
        -v p1="$(jfield "$f1" avg_ns 1)" -v p2="$(jfield "$f2" avg_ns 1)" \
        -v g1="$(jfield "$f1" avg_ns 2)" -v g2="$(jfield "$f2" avg_ns 2)" 'BEGIN {
        if (s1 == "" || s2 == "" || p1 == "" || p2 == "" || g1 == "" || g2 == "") {
            print "check.sh: missing bonsai-bench results for " q > "/dev/stderr"; exit 1
        }
        embd = V * H * bpw / 8; k = (LF - L1) / (L2 - L1)
        n = split(L1 " " L2 " " LF, Ls, " ")
        S[1] = s1; S[2] = s2; S[3] = s1 + k * (s2 - s1)
        P[1] = p1; P[2] = p2; P[3] = p1 + k * (p2 - p1)
        G[1] = g1; G[2] = g2; G[3] = g1 + k * (g2 - g1)
        for (i = 1; i <= 3; i++) {
            pp = PP * 1e9 / P[i]; tg = TG * 1e9 / G[i]; gbs = (S[i] - embd) * tg / 1e9
            printf("| %s | %d%s | %.1f | %.1f | %.1f | %.2f | %.1f%% |\n", q, Ls[i], i == 3 ? " (scaled)" : "",
                   S[i] / 1048576, pp, tg, gbs, 100 * gbs / copy)
        }
    }'
done
echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ), total $(( $(date +%s) - T_START )) s"
