#!/usr/bin/env bash
# cuda/check.sh — the one prepared script for a GPU machine (one device call, planned < 8 minutes):
#   env     nvidia-smi, nvcc and driver versions;
#   deps    only where pkg-config lacks the build's libraries: unpacks the carried .debs of
#           cuda/gpu-deps.sh (build-gpudeps/) into build-gpudeps-root/ and points pkg-config there;
#   setup   meson -Dcuda=enabled, release, in BUILD_DIR (default build-cuda);
#   build   only what the steps below run (the GPU tests, the tools, the benches);
#   tests   the CUDA tests on the GPU (`meson test --suite cuda`, the non-emulator ones);
#   tests-pdl  cuda_forward, cuda_dspark_graph and cuda_split again with programmatic dependent launch
#           (BONSAI_CUDA_PDL=1: each kernel may start while the one before it ends; opt-in until measured);
#   models  synthetic models of the real Qwen3.5-27B shape (bonsai-mkmodel --preset 27b, F16, then
#           bonsai-quantize --pure to Q1_0 and Q2_0) with 4 and 8 layers instead of 64 — the full model
#           would take ~54 GB of F16 and minutes to write — scaled linearly per layer:
#           t(64) = t(4) + 15·(t(8) − t(4)) (the head, embedding and per-layer costs separate);
#   train   FTPO LoRA training on the device: bench/bench_train --ngl 99 (forward + backward, r 32, 4096 tokens)
#           on the L1-layer Q1_0 and F16 files and the L2-layer Q1_0 file: step time, device memory, TFLOP/s and
#           MFU of the GPU's bf16 dense peak (its default bf16 GEMMs); 64-layer estimates linear in layers against the
#           training targets;
#   copybw  the measured device copy bandwidth; mm: bench_cuda_mm --quick;
#   bench   bonsai-bench -ngl 99 (pp512, tg128, tg128 x4: 4 sequences decoded at once, and v4: in passes of 4 tokens
#           of each, a greedy verify pass's shape at full acceptance) per type and layer
#           count;
#   dspark  the DSpark rows (cudadraft's section below), then the shipped 1-bit model with its trained drafter;
#   cpuref  for reference, the CPU engines on the same L1-layer Q1_0 file: bonsai-bench -ngl 0 and the peer
#           llama-bench -ngl 0 with the GPU hidden (CUDA_VISIBLE_DEVICES=), all cores, pp64 / tg16;
#   serve   bonsai-serve -ngl 99 -np 4 on the L2-layer Q1_0 file: decode tok/s of one stream (timings) for greedy
#           and sampled requests, each without log-probs (argmax / top-k steps) and with n_probs 1 (logits rows),
#           and the total of 4 greedy streams at once (their steps batched); then 4 speculative streams with the
#           DSpark step's drafter, adaptive and always drafting 3 (their verify passes batched: ragged passes);
# then ONE markdown table (tok/s, decode GB/s, % of copy bandwidth) and the per-step status table.
# Every step runs under `timeout` with the limit printed in the plan; a step that fails or times out
# logs its tail and the script goes on; cells that depend on it read FAIL / TIMEOUT / SKIP. Exit
# status: 0 when every step passed, 1 otherwise (the tables always print).
# Results: $OUT if set (the device tool returns files under it; at most 8 files: check-table.md,
# check.log with every step's full log, tests.log), else BUILD_DIR/cuda-check/.
# Usage: cuda/check.sh [--emu | --tiny] [--quick] [BUILD_DIR]
#   --emu: the same steps against the CPU emulator (tiny preset, 4/8 → 16 layers, pp16/tg8, no setup,
#   build or GPU tests; BUILD_DIR must be built already). This is how the script itself is tested
#   without a GPU (test cuda_check_script_emu). Numbers from --emu are emulator speed, meaningless.
#   --tiny: GPU mode with the tiny shapes (a smoke run).
#   --quick: fewer tests (emu_runtime, cuda_mm, cuda_forward), Q1_0 only, one repetition (~5 min plan).
#   --sanitize: adds a step (60 s) running test_emu_runtime and test_cuda_mm under compute-sanitizer
#   memcheck, then cuda_mm under racecheck (out-of-bounds accesses and shared-memory races on the GPU).
#   --profile: adds two steps (60 s + 30 s): Nsight Compute (ncu, kernel durations only, graph nodes one by one) over
#   16 decode tokens, then over a pp$PP prefill, of the L1-layer Q1_0 model; prints the kernels by total time per token.
# BONSAI_CHECK_INJECT="STEP=fail STEP=hang ..." replaces steps by a failing / hanging command (2 s limit):
# how cuda_check_script_emu_faults checks that the tables still print.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
EMU=0 TINY=0 QUICK=0 SANITIZE=0 PROFILE=0
while [ $# -gt 0 ]; do
    case "$1" in
    --emu) EMU=1; shift ;;
    --tiny) TINY=1; shift ;;
    --quick) QUICK=1; shift ;;
    --sanitize) SANITIZE=1; shift ;;
    --profile) PROFILE=1; shift ;;
    *) break ;;
    esac
done
B=${1:-build-cuda}
# BONSAI_CHECK_BUDGET: seconds the whole run may take (GPU mode default 570, under the device tool's 600 s
# per call): a step gets at most what is left of it less 20 s, later steps are skipped, so the tables always
# print before an outer timeout could kill the script. 0: no budget (the emulator runs).
BUDGET=${BONSAI_CHECK_BUDGET:-$([ "$EMU" = 1 ] && echo 0 || echo 570)}
NPROC=$(nproc)
T_START=$(date +%s)
RES=${OUT:-$B/cuda-check}
mkdir -p "$RES"
W=$(mktemp -d "${TMPDIR:-/tmp}/bn-cuda-check.XXXXXX")
trap 'rm -rf "$W"' EXIT
: >"$RES/check.log"

# ---- the plan: seconds per step (upper bounds; the sum is printed: 920 s full, 1050 s with the peer, +150 s with
# --sanitize --profile; BONSAI_CHECK_BUDGET below cuts or skips the steps that would overrun, the low-priority ones
# last in the order) ---
# Estimates behind it: build ~60-90 s on 16 cores (nvcc + the C tools), models ~45 s (one core writes the
# 8-layer F16 file, 6 GB), each bonsai-bench run ~5 s (upload + 4 × pp512/tg128), GPU tests ~20 s, each bench_train
# run ~10-20 s (upload, then 2 steps of 4096 tokens at ~0.3 s per layer with fp32 GEMMs at the fp32 peak; the default
# bf16 GEMMs take less).
TYPES="Q1_0 Q2_0"
if [ "$EMU" = 1 ]; then
    declare -A LIMIT=([env]=5 [deps]=5 [setup]=5 [build]=5 [tests]=5 [models]=60 [train]=60 [copybw]=20 [mm]=5
                      [bench]=60 [dspark]=60)
elif [ "$QUICK" = 1 ]; then
    TYPES="Q1_0"
    declare -A LIMIT=([env]=10 [deps]=15 [setup]=30 [build]=120 [tests]=50 [models]=60 [train]=30 [copybw]=10
                      [mm]=0 [bench]=15 [dspark]=30)
else
    declare -A LIMIT=([env]=10 [deps]=15 [setup]=30 [build]=120 [tests]=80 [models]=75 [train]=40 [copybw]=10
                      [mm]=30 [bench]=15 [dspark]=40)
fi
# bench: the limit is per bonsai-bench run (one per type and layer count); train: per bench_train run (three)
LIMIT[peer]=$([ "$EMU" = 1 ] && echo 60 || echo 20) # per run, like bench; 0 where no peer is given
[ -z "${BONSAI_PEER_BENCH:-}" ] && { [ "$EMU" = 1 ] || [ ! -f build-peer/llama-bench.xz ]; } && LIMIT[peer]=0
LIMIT[cpuref]=$([ "$EMU" = 1 ] && echo 60 || echo 20) # per run: ours, then the peer's (where one is given)
LIMIT[serve]=$([ "$EMU" = 1 ] && echo 150 || echo 60)
LIMIT[draft]=$([ "$EMU" = 1 ] && echo 30 || echo 20) # bench_draft: drafting for 1-8 slots, one pass each vs batched
LIMIT[longpp]=$([ "$EMU" = 1 ] && echo 60 || echo 30) # per run: ours, then the peer's (where one is given)
LIMIT[profile]=$([ "$PROFILE" = 1 ] && [ "$EMU" = 0 ] && echo 60 || echo 0)
LIMIT[sanitize]=$([ "$SANITIZE" = 1 ] && [ "$EMU" = 0 ] && echo 60 || echo 0)
LIMIT[tests-pdl]=$([ "$EMU" = 1 ] && echo 5 || echo 40)
N_TYPES=$(echo $TYPES | wc -w)
PLAN=0
for k in env deps setup build tests tests-pdl sanitize models copybw mm dspark draft serve profile; do PLAN=$((PLAN + LIMIT[$k])); done
PLAN=$((PLAN + LIMIT[profile] / 2)) # profile-pp (half the decode profile's limit)
PLAN=$((PLAN + LIMIT[dspark] / 4)) # dspark-shipped
PLAN=$((PLAN + 3 * LIMIT[train])) # Q1_0 at L1 and L2 layers, F16 at L1
PLAN=$((PLAN + 2 * N_TYPES * (LIMIT[bench] + LIMIT[peer]) + LIMIT[cpuref] * (LIMIT[peer] > 0 ? 2 : 1)))
PLAN=$((PLAN + LIMIT[longpp] * (LIMIT[peer] > 0 ? 4 : 3))) # ours, ours tiled, ours on tensor cores, the peer
PLAN=$((PLAN + (4 + N_TYPES) * LIMIT[bench])) # fuse-off, gdn-norm, pdl, opt-ins; mmq per type

declare -A ST SECS # step status (OK / FAIL / TIMEOUT / SKIP) and seconds
STDBUF=()
command -v stdbuf >/dev/null && STDBUF=(stdbuf -oL -eL)
ORDER=()
elapsed() { echo $(( $(date +%s) - T_START )); }
say() { echo "$*" | tee -a "$RES/check.log"; }

# run_step NAME LIMIT CMD...: runs CMD under timeout, its output in $W/NAME.log (appended to check.log);
# sets ST[NAME] and SECS[NAME]; on failure prints the log's tail. Returns CMD's status.
run_step() {
    local name=$1 limit=$2 rc t0
    shift 2
    ORDER+=("$name")
    if [ "$limit" -le 0 ]; then
        ST[$name]=SKIP SECS[$name]=0
        say "== [$(elapsed) s] $name: skipped in this mode"
        return 0
    fi
    if [ "$BUDGET" -gt 0 ]; then # the whole run must end (tables printed) within BUDGET seconds
        local left=$((BUDGET - $(elapsed) - 20))
        if [ "$left" -le 0 ]; then
            ST[$name]=SKIP SECS[$name]=0
            say "== [$(elapsed) s] $name: skipped (the ${BUDGET} s budget is spent)"
            return 0
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    case " ${BONSAI_CHECK_INJECT:-} " in # the script's own test: a step made to fail or to hang
    *" $name=fail "*) set -- false ;;
    *" $name=hang "*) limit=2 && set -- sleep 30 ;;
    esac
    say "== [$(elapsed) s] $name (limit ${limit} s): $*"
    t0=$(date +%s)
    # line-buffered (stdbuf): a program killed at its limit keeps what it printed so far in the log
    timeout -k 5 "$limit" ${STDBUF[@]+"${STDBUF[@]}"} "$@" >"$W/$name.log" 2>&1
    rc=$?
    SECS[$name]=$(( $(date +%s) - t0 ))
    case $rc in
    0) ST[$name]=OK ;;
    124 | 137) ST[$name]=TIMEOUT ;;
    *) ST[$name]=FAIL ;;
    esac
    { echo "---- $name: ${ST[$name]} (exit $rc) after ${SECS[$name]} s; full log:"; cat "$W/$name.log"; } >>"$RES/check.log"
    if [ "$rc" != 0 ]; then
        echo "-- $name: ${ST[$name]} (exit $rc) after ${SECS[$name]} s; last lines:"
        tail -n 15 "$W/$name.log" | sed 's/^/   | /'
    fi
    return $rc
}
skip_step() { ORDER+=("$1"); ST[$1]=SKIP; SECS[$1]=0; say "== [$(elapsed) s] $1: skipped ($2)"; }
# field F of the I-th result (1-based) of a bonsai-bench JSON log (the step's output)
jfield() { grep -o "\"$2\": [0-9.]*" "$1" 2>/dev/null | sed -n "$3p" | awk '{print $2}'; }
# cell STEP: "" when the step passed, else its status (what a dependent cell shows)
cell() { [ "${ST[$1]:-SKIP}" = OK ] && echo "" || echo "${ST[$1]:-SKIP}"; }

say "cuda/check.sh $(date -u +%Y-%m-%dT%H:%MZ): mode $([ $EMU = 1 ] && echo emu || echo gpu)$([ $QUICK = 1 ] && echo ' quick')$([ $TINY = 1 ] && echo ' tiny'), build dir $B, plan ${PLAN} s (limits: $(for k in env deps setup build tests tests-pdl sanitize models train copybw mm bench peer dspark draft cpuref longpp serve profile; do printf '%s %s, ' $k ${LIMIT[$k]}; done | sed 's/, $//'); bench, peer and train per run)"

# ---- env, deps, setup, build, tests (GPU only) ----------------------------------------------------
env_info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv || true
    nvcc --version | tail -2 || true
    echo "CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-<unset: lazy>}; $(nproc) CPUs; $(uname -r)"
}
# gpu_tests WHAT: the GPU tests of the cuda suite (programs of this build not named *_emu), from meson introspect
# (its JSON is the same in every meson version; `meson test --list` is not): WHAT=names prints the test names,
# WHAT=targets the ninja targets they and the steps below need.
gpu_tests() {
    meson introspect "$B" --tests | python3 -c '
import json, os, sys
b = os.path.realpath(sys.argv[1]); names = set(); targets = set()
for t in json.load(sys.stdin):
    if not any(s.endswith("cuda") for s in t["suite"]) or t["cmd"][0].endswith("_emu") or not t["cmd"][0].startswith(b):
        continue
    names.add(t["name"])
    targets.add(os.path.relpath(t["cmd"][0], b))
    targets.update(a for a in t["cmd"][1:] if a.startswith("tools/"))
print("\n".join(sorted(names if sys.argv[2] == "names" else targets)))' "$B" "$1"
}
if [ "$EMU" = 1 ]; then
    BENCH="$B/tests/cuda/bonsai-bench-emu"
    DRAFT_BENCH=("$B/tests/cuda/bench-draft-emu" -s 1,2 -r 1)
    TRAIN_BENCH=(env BONSAI_EMU_PROTECT=0 "$B/tests/cuda/bench-train-emu") TRAIN_T=64 # memory protection off: 4x faster
    COPYBW=("$B/tests/cuda/cuda_copy_bw_emu" 16)
    PRESET=tiny L1=4 L2=8 LFULL=16 PP=16 TG=8 REPS=1 V=512 H=128 LONG_PP=64,256
    for f in "$BENCH" "${COPYBW[0]}" "$B/tools/bonsai-mkmodel" "$B/tools/bonsai-quantize"; do
        [ -x "$f" ] || { echo "check.sh --emu: $f missing (build $B first)"; exit 1; }
    done
    DEVICE="CPU emulator"
    for s in env deps setup build tests tests-pdl; do skip_step "$s" "--emu"; done
    TESTS="not run (--emu)"
else
    PRESET=27b L1=4 L2=8 LFULL=64 PP=512 TG=128 REPS=3 V=248320 H=5120 LONG_PP=4096,16384
    [ "$QUICK" = 1 ] && REPS=1
    [ "$TINY" = 1 ] && PRESET=tiny LFULL=16 PP=64 TG=32 V=512 H=128 LONG_PP=512,2048
    BENCH="$B/tools/bonsai-bench"
    DRAFT_BENCH=("$B/bench/bench_draft" -s 1,2,4,8 -r 7)
    TRAIN_BENCH=("$B/bench/bench_train") TRAIN_T=4096
    COPYBW=("$B/tests/cuda/cuda_copy_bw" 1024)
    run_step env "${LIMIT[env]}" bash -c "$(declare -f env_info); env_info"
    cat "$W/env.log"
    DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "unknown GPU")
    if pkg-config --exists openblas jansson libpcre2-8 libmicrohttpd zlib 2>/dev/null; then
        skip_step deps "pkg-config finds every library"
    elif [ -x cuda/gpu-deps.sh ] && ls build-gpudeps/*.deb >/dev/null 2>&1; then
        run_step deps "${LIMIT[deps]}" cuda/gpu-deps.sh unpack build-gpudeps && source build-gpudeps-root/env.sh
    else
        skip_step deps "libraries missing and no build-gpudeps/*.deb carried: setup will fail"
    fi
    if [ -f "$B/build.ninja" ]; then
        skip_step setup "$B already configured"
    else
        run_step setup "${LIMIT[setup]}" meson setup "$B" -Dcuda=enabled --buildtype=release
    fi
    GPU_TARGETS=$(gpu_tests targets 2>/dev/null | tr '\n' ' ')
    EXTRA="tools/bonsai-bench tools/bonsai-mkmodel tools/bonsai-quantize tools/bonsai-serve tools/bonsai-mkdrafter
           tools/bonsai-speculative tests/cuda/cuda_copy_bw tests/cuda/bench_cuda_mm bench/bench_draft bench/bench_train"
    # shellcheck disable=SC2086
    run_step build "${LIMIT[build]}" ninja -C "$B" -j"$NPROC" $GPU_TARGETS $EXTRA
    mapfile -t GPU_TESTS < <(gpu_tests names 2>/dev/null)
    [ "$QUICK" = 1 ] && mapfile -t GPU_TESTS < <(printf '%s\n' "${GPU_TESTS[@]}" | grep -xE 'emu_runtime|cuda_mm|cuda_forward')
    if [ "${#GPU_TESTS[@]}" = 0 ]; then
        skip_step tests "no GPU tests found (was $B configured with -Dcuda=enabled?)"
        TESTS="none found"
    else
        # meson's own per-test timeouts (x0.4: cuda_forward 120 s) stop a hung test inside the step's limit
        # (PYTHONUNBUFFERED: meson's per-test lines survive the step's own limit)
        PYTHONUNBUFFERED=1 run_step tests "${LIMIT[tests]}" meson test -C "$B" --no-rebuild --print-errorlogs --num-processes 4 \
            --timeout-multiplier 0.4 "${GPU_TESTS[@]}"
        cp "$B/meson-logs/testlog.txt" "$RES/tests.log" 2>/dev/null || true
        grep -E "^ *[0-9]+/[0-9]+ " "$W/tests.log" || true
        TESTS=$(grep -E "^ *[0-9]+/[0-9]+ " "$W/tests.log" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $4, $5}')
        [ -z "$TESTS" ] && TESTS="${ST[tests]} (no results; see tests.log)"
        # the same kernels launched with the PDL attribute: logits and 64-step greedy identity against the CPU,
        # graphs, DSpark taps through graphs, the CPU+CUDA engine
        mapfile -t PDL_TESTS < <(printf '%s\n' "${GPU_TESTS[@]}" | grep -xE 'cuda_forward|cuda_dspark_graph|cuda_split')
        if [ "${#PDL_TESTS[@]}" = 0 ]; then
            skip_step tests-pdl "none of cuda_forward, cuda_dspark_graph, cuda_split in this plan"
        else
            PYTHONUNBUFFERED=1 run_step tests-pdl "${LIMIT[tests-pdl]}" env BONSAI_CUDA_PDL=1 meson test -C "$B" \
                --no-rebuild --print-errorlogs --num-processes 3 --timeout-multiplier 0.4 "${PDL_TESTS[@]}"
            cp "$B/meson-logs/testlog.txt" "$RES/tests-pdl.log" 2>/dev/null || true
            TESTS+="; with BONSAI_CUDA_PDL=1: $(grep -E "^ *[0-9]+/[0-9]+ " "$W/tests-pdl.log" |
                awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $4, $5}')"
        fi
    fi
    sanitize() { # memcheck on two test programs, racecheck on one (shared-memory hazards); API errors are not
        # reported (the tests make failing calls on purpose); the sanitizer's own lines are kept whole
        local rc=0 t
        set -o pipefail
        for t in test_emu_runtime test_cuda_mm; do
            compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 "$B/tests/cuda/$t" 2>&1 \
                | grep -E '^=========|checks' | head -n 40 || rc=1
        done
        compute-sanitizer --tool racecheck --error-exitcode 3 "$B/tests/cuda/test_cuda_mm" 2>&1 \
            | grep -E '^=========|checks' | head -n 40 || rc=1
        return $rc
    }
    if command -v compute-sanitizer >/dev/null; then
        run_step sanitize "${LIMIT[sanitize]}" bash -c "$(declare -f sanitize); B=$B sanitize"
    else
        skip_step sanitize "no compute-sanitizer"
    fi
fi

# ---- models, copy bandwidth, bench_cuda_mm ----------------------------------------------------------
gen() { # gen N_LAYER TYPES...: writes $W/l<N>-<type>.gguf (and keeps $W/l<L1>-f16.gguf for the train step)
    local L=$1 q
    shift
    "$B/tools/bonsai-mkmodel" "$W/l$L-f16.gguf" --preset "$PRESET" --n-layer "$L" --type f16 || return 1
    for q in "$@"; do
        "$B/tools/bonsai-quantize" "$W/l$L-f16.gguf" "$W/l$L-$q.gguf" "$q" --pure --threads $(( NPROC / 2 > 0 ? NPROC / 2 : 1 )) \
            || return 1
    done
    [ "$L" = "$L1" ] || rm -f "$W/l$L-f16.gguf"
}
gen_both() { # both layer counts in parallel
    gen "$L1" $TYPES >"$W/gen$L1.log" 2>&1 & local p1=$!
    gen "$L2" $TYPES >"$W/gen$L2.log" 2>&1 & local p2=$!
    local r1=0 r2=0
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    tail -n 3 "$W/gen$L1.log" "$W/gen$L2.log"
    [ "$r1" = 0 ] && [ "$r2" = 0 ]
}
export -f gen gen_both
export B W PRESET L1 L2 TYPES NPROC
if [ -x "$B/tools/bonsai-mkmodel" ] && [ -x "$B/tools/bonsai-quantize" ]; then
    run_step models "${LIMIT[models]}" bash -c gen_both
else
    skip_step models "bonsai-mkmodel / bonsai-quantize not built"
fi

# ---- train: FTPO LoRA forward + backward on the device (bench_train --ngl 99) ----------------------------------------
# One step of TRAIN_T tokens after a warm-up, per file: the L1-layer Q1_0 and F16 files, then the L2-layer Q1_0 file
# (the per-layer part of the device memory). bench_train's default GEMMs (bf16 inputs, fp32 accumulation; its rows name
# them): MFU is of the GPU's dense bf16 tensor-core peak, known here by its name (H200 / H100 SXM: 989 TFLOP/s;
# BONSAI_CHECK_PEAK_TFLOPS sets it), else left out.
TRAIN_PEAK=""
case "$DEVICE" in *H200* | *H100*) TRAIN_PEAK=989 ;; esac
TRAIN_PEAK=${BONSAI_CHECK_PEAK_TFLOPS:-$TRAIN_PEAK}
for run in "Q1_0-$L1" "F16-$L1" "Q1_0-$L2"; do
    q=${run%-*} L=${run##*-}
    f="$W/l$L-$([ "$q" = F16 ] && echo f16 || echo "$q").gguf"
    if [ ! -f "$f" ]; then
        skip_step "train-$run" "no model"
    elif [ ! -x "${TRAIN_BENCH[-1]}" ]; then
        skip_step "train-$run" "${TRAIN_BENCH[-1]} not built"
    else
        run_step "train-$run" "${LIMIT[train]}" "${TRAIN_BENCH[@]}" -m "$f" --ngl 99 --tokens "$TRAIN_T" --reps 1 \
            ${TRAIN_PEAK:+--peak-tflops "$TRAIN_PEAK"}
    fi
done
# trow STEP N: the N-th |-separated cell (2: model, 5: ms, 6: tok/s, 7: device MB, 8: TFLOP/s, 9: MFU, 10: gemm) of the
# bench_train row in STEP's log
trow() { awk -F'|' -v n="$2" '/^\| l[0-9]+-/ { gsub(/^ +| +$/, "", $n); print $n; exit }' "$W/$1.log" 2>/dev/null; }
# train_rows: the train steps' table (printed after the steps, so that a cut run still shows it, and with the others):
# the measured rows, then LFULL-layer estimates linear in layers, each with its run's PASS / FAIL and the targets:
# Q1_0 device memory < 12 GB (LFULL-layer estimate), F16 MFU >= 35 % of the bf16 peak
train_rows() {
    [ "${ST[train-Q1_0-$L1]:-SKIP}" = SKIP ] && [ "${ST[train-F16-$L1]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### FTPO training on the device: bench_train --ngl 99, LoRA r 32 (q,k,v,o,gate,up,down), $TRAIN_T tokens"
    echo
    echo "One forward + backward (gradients taken to the host) after a warm-up; FLOPs = 6·N_mm·tokens (N_mm:"
    local gemm
    gemm=$(trow "train-Q1_0-$L1" 10) && gemm=${gemm:-$(trow "train-F16-$L1" 10)}
    echo "projection weights). Base-weight GEMMs: ${gemm:-not reported} (bench_train's default is bf16: bf16 inputs, fp32"
    echo "accumulation); MFU is of the dense bf16 peak,"
    echo "${TRAIN_PEAK:-not known for this GPU (left out)}${TRAIN_PEAK:+ TFLOP/s}. Device MB: the whole device in use"
    echo "(total − free), the larger of after the forward and after the backward."
    echo "$LFULL-layer rows are ESTIMATES, linear in layers: step ms = t($L1)/$L1·$LFULL (only $L1 layers timed; the"
    echo "embedding and head are counted $LFULL/$L1 times, so it is high by their share);"
    echo "device MB = m($L1) + ($LFULL − $L1)·(m($L2) − m($L1))/($L2 − $L1), the per-layer part measured on Q1_0 at $L1"
    echo "and $L2 layers (F16 only at $L1 layers: no memory estimate)."
    echo
    echo "| base type | layers | tokens | step ms | tokens/s | device MB in use | achieved TFLOP/s | MFU | target | run |"
    echo "| --------- | -----: | -----: | ------: | -------: | ---------------: | ---------------: | --: | ------ | --- |"
    local q c2
    for q in Q1_0 F16; do
        c2=$([ "$q" = Q1_0 ] && cell "train-Q1_0-$L2" || echo NONE)
        awk -v q="$q" -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v T="$TRAIN_T" -v c1="$(cell "train-$q-$L1")" -v c2="$c2" \
            -v ms1="$(trow "train-$q-$L1" 5)" -v mb1="$(trow "train-$q-$L1" 7)" -v tf1="$(trow "train-$q-$L1" 8)" \
            -v mfu1="$(trow "train-$q-$L1" 9)" -v ms2="$(trow "train-Q1_0-$L2" 5)" -v mb2="$(trow "train-Q1_0-$L2" 7)" \
            -v tf2="$(trow "train-Q1_0-$L2" 8)" -v mfu2="$(trow "train-Q1_0-$L2" 9)" 'BEGIN {
            if (c1 == "" && (ms1 == "" || mb1 == "" || tf1 == "")) c1 = "FAIL"
            if (c2 == "" && (ms2 == "" || mb2 == "" || tf2 == "")) c2 = "FAIL"
            tgt = "-" # the F16 target: MFU of the bf16 peak
            if (q == "F16" && mfu1 == "-") tgt = "MFU >= 35 %: no bf16 peak known"
            else if (q == "F16") tgt = sprintf("MFU >= 35 %%: %s", mfu1 + 0 >= 35 ? "met" : "missed")
            if (c1 != "") printf("| %s | %d | %d | %s | %s | %s | %s | %s | - | %s |\n", q, L1, T, c1, c1, c1, c1, c1, c1)
            else printf("| %s | %d | %d | %.1f | %.0f | %.0f | %s | %s | %s | PASS |\n", q, L1, T, ms1, T * 1000 / ms1, mb1,
                        tf1, mfu1, tgt)
            if (c2 != "" && c2 != "NONE") printf("| %s | %d | %d | %s | %s | %s | %s | %s | - | %s |\n", q, L2, T, c2, c2, c2, c2, c2, c2)
            else if (c2 == "") printf("| %s | %d | %d | %.1f | %.0f | %.0f | %s | %s | - | PASS |\n", q, L2, T, ms2,
                                      T * 1000 / ms2, mb2, tf2, mfu2)
            lay = LF " (estimate, linear in layers)"
            if (c1 != "") { printf("| %s | %s | %d | %s | %s | %s | %s | %s | - | %s |\n", q, lay, T, c1, c1, c1, c1, c1, c1); exit }
            ms = ms1 / L1 * LF
            mem = c2 == "" ? sprintf("%.0f", mb1 + (LF - L1) * (mb2 - mb1) / (L2 - L1)) : "-"
            tgt = "-" # the Q1_0 target: device memory of the LFULL-layer estimate
            if (q == "Q1_0" && mem == "-") tgt = "device < 12 GB: not estimated (no " L2 "-layer run)"
            else if (q == "Q1_0") tgt = sprintf("device < 12 GB: %s (%.1f GB)", mem / 1000 < 12 ? "met" : "missed", mem / 1000)
            printf("| %s | %s | %d | %.1f | %.0f | %s | %s | %s | %s | PASS |\n", q, lay, T, ms, T * 1000 / ms, mem, tf1,
                   mfu1, tgt)
        }'
    done
}
train_rows | tee -a "$RES/check.log"

COPY_GBS=""
if [ -x "${COPYBW[0]}" ]; then
    run_step copybw "${LIMIT[copybw]}" "${COPYBW[@]}" && COPY_GBS=$(tail -n 1 "$W/copybw.log")
    say "copy bandwidth: ${COPY_GBS:-${ST[copybw]}} GB/s (read + write)"
else
    skip_step copybw "${COPYBW[0]} not built"
fi
if [ "$EMU" = 1 ]; then
    skip_step mm "--emu"
elif [ -x "$B/tests/cuda/bench_cuda_mm" ]; then
    run_step mm "${LIMIT[mm]}" "$B/tests/cuda/bench_cuda_mm" --quick && cat "$W/mm.log"
else
    skip_step mm "bench_cuda_mm not built"
fi

# ---- bonsai-bench -ngl 99 ----------------------------------------------------------------------------
for q in $TYPES; do
    for L in "$L1" "$L2"; do
        if [ ! -f "$W/l$L-$q.gguf" ]; then
            skip_step "bench-$q-$L" "no model"
        elif [ ! -x "$BENCH" ]; then
            skip_step "bench-$q-$L" "$BENCH not built"
        else
            run_step "bench-$q-$L" "${LIMIT[bench]}" "$BENCH" -m "$W/l$L-$q.gguf" -ngl 99 -p "$PP" -n "$TG" -npl 1,4 \
                -nv 1,4 -r "$REPS" -o json
        fi
    done
done
# fuse-off: tg on the L2-layer Q1_0 file with the Q8-producer fusion off (BONSAI_CUDA_FUSE=0): the same kernels'
# work plus a quantize launch per matmul group, 33 more launches per token at 8 layers (counted in the emulator:
# 118 against 85), so the difference prices a launch inside the decode graph
# gdn-norm: the same with the GDN recurrence and its output norm in one launch (BONSAI_CUDA_GDN_NORM=1, opt-in: one
# launch fewer per GDN layer, 79 per token at 8 layers)
# pdl: the default launches with programmatic dependent launch (BONSAI_CUDA_PDL=1, opt-in: each kernel's blocks may
# be placed while the kernel before it drains; the same 85 launches), so the difference is what PDL saves per launch
# opt-ins: both decode opt-ins at once (PDL and the GDN norm fusion: 79 launches), the best case if both pay
for v in fuse-off gdn-norm pdl opt-ins; do
    case $v in
    fuse-off) venv=(BONSAI_CUDA_FUSE=0) ;;
    gdn-norm) venv=(BONSAI_CUDA_GDN_NORM=1) ;;
    pdl) venv=(BONSAI_CUDA_PDL=1) ;;
    *) venv=(BONSAI_CUDA_PDL=1 BONSAI_CUDA_GDN_NORM=1) ;;
    esac
    if [ ! -f "$W/l$L2-Q1_0.gguf" ] || [ ! -x "$BENCH" ]; then
        skip_step "$v" "no $L2-layer Q1_0 model or no bench"
    else
        run_step "$v" "${LIMIT[bench]}" env "${venv[@]}" "$BENCH" -m "$W/l$L2-Q1_0.gguf" -ngl 99 -p 0 -n "$TG" -r "$REPS" \
            -o json
    fi
done
# mmq-TYPE: pp on the L2-layer file with the prefill GEMMs on the int8 tensor cores (BONSAI_CUDA_MMQ_PREFILL=1, opt-in:
# Q8 activations and column chunks of 32, no fp16 dequantization pass) against the default's pp (bench-TYPE-L2)
for q in $TYPES; do
    if [ ! -f "$W/l$L2-$q.gguf" ] || [ ! -x "$BENCH" ]; then
        skip_step "mmq-$q" "no $L2-layer $q model or no bench"
    else
        run_step "mmq-$q" "${LIMIT[bench]}" env BONSAI_CUDA_MMQ_PREFILL=1 "$BENCH" -m "$W/l$L2-$q.gguf" -ngl 99 -p "$PP" \
            -n 0 -r "$REPS" -o json
    fi
done

# ---- peer: llama.cpp's llama-bench on the same files (only where a peer binary is given) ------------
# BONSAI_PEER_BENCH=PATH, else build-peer/llama-bench.xz (scripts/build-llamacpp-cuda.sh: llama.cpp from the
# npm bundle built here for sm_90, xz-compressed to travel; the device tool's `run` carries build-peer).
# Same arguments as our bench (-ngl 99, llama.cpp's defaults otherwise); the table gets ratio columns.
PEER=${BONSAI_PEER_BENCH:-}
unxz_to() { # unxz_to SRC DST: xz -dc, or Python's lzma where the machine has no xz
    if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as f, open(sys.argv[2], "wb") as o: shutil.copyfileobj(f, o)' "$1" "$2"; fi
}
if [ -z "$PEER" ] && [ "$EMU" = 0 ] && [ -f build-peer/llama-bench.xz ]; then
    unxz_to build-peer/llama-bench.xz "$W/llama-bench" && chmod +x "$W/llama-bench" && PEER="$W/llama-bench"
    cat build-peer/llama-bench.txt 2>/dev/null | tee -a "$RES/check.log" || true
fi
PEER_NAME=$(head -n 1 build-peer/llama-bench.txt 2>/dev/null)
[ -n "${BONSAI_PEER_BENCH:-}" ] || [ -z "$PEER_NAME" ] && PEER_NAME=${PEER:+$(basename "$PEER")}
for q in $TYPES; do
    for L in "$L1" "$L2"; do
        if [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
            skip_step "peer-$q-$L" "no peer llama-bench"
        elif [ ! -f "$W/l$L-$q.gguf" ]; then
            skip_step "peer-$q-$L" "no model"
        else
            # build-peer/lib: a fallback libgomp (llama.cpp's CPU backend links it) where the image has none
            run_step "peer-$q-$L" "${LIMIT[peer]}" env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build-peer/lib" \
                "$PEER" -m "$W/l$L-$q.gguf" -ngl 99 -p "$PP" -n "$TG" -r "$REPS" -o json
        fi
    done
done

# ---- cpuref: the CPU engines on the L1-layer Q1_0 file, for reference ----------------------------------
# Ours (-ngl 0: the CPU engine, its AVX2 / AVX-512 kernels picked at run time) and the peer's CPU backend
# (-ngl 0 with CUDA_VISIBLE_DEVICES= so that no op is offloaded; scripts/build-llamacpp-cuda.sh builds its CPU
# code for AVX2 / FMA / F16C, not for this machine's CPU). pp64 / tg16, one repetition, every core.
CPU_PP=64 CPU_TG=16
if [ ! -f "$W/l$L1-Q1_0.gguf" ]; then
    skip_step cpuref-ours "no $L1-layer Q1_0 model"
else
    run_step cpuref-ours "${LIMIT[cpuref]}" "$BENCH" -m "$W/l$L1-Q1_0.gguf" -ngl 0 -t "$NPROC" -p "$CPU_PP" \
        -n "$CPU_TG" -r 1 -o json
fi
if [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
    skip_step cpuref-peer "no peer llama-bench"
elif [ ! -f "$W/l$L1-Q1_0.gguf" ]; then
    skip_step cpuref-peer "no model"
else
    run_step cpuref-peer "${LIMIT[cpuref]}" env CUDA_VISIBLE_DEVICES= \
        "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build-peer/lib" \
        "$PEER" -m "$W/l$L1-Q1_0.gguf" -ngl 0 -t "$NPROC" -p "$CPU_PP" -n "$CPU_TG" -r 1 -o json
fi

# ==== DSpark (cudadraft) ==============================================================================
# A $DS_PRESET-shape drafter (bonsai-mkdrafter: 27b = the Bonsai-27B drafter's shapes; Q4_1 matrices like
# the real file; --shared: token_embd/output borrowed from the target, as a converted
# --drop-shared-tensors file; block 16; taps moved below L2) over the L2-layer Q1_0 target, through
# bonsai-speculative -ngl 99 --temp 0 (drafter on the device): "draft-replay" decodes natively first (the
# native row) and then replays that greedy run with the drafter's full work every round (forced
# acceptance, MEASUREMENT AID); "draft-dspark" runs the random drafter with the adaptive cost model.
# LFULL-layer rows scale the target's share (verify ms/step) by the bonsai-bench tg ratio
# t(LFULL)/t(L2) of Q1_0; drafter and host time stay unscaled (the drafter does not depend on the target).
DS_B=16 DS_PROMPT="Write a function that sorts a list of numbers"
if [ "$EMU" = 1 ]; then
    DS_SPEC="$B/tests/cuda/bonsai-speculative-emu" DS_PRESET=tiny DS_N=8 DS_TAPS=1,3 DS_B=4 # emulator: small
else
    DS_SPEC="$B/tools/bonsai-speculative" DS_PRESET=27b DS_N=128 DS_TAPS=1,2,3,5,7
    [ "$TINY" = 1 ] && DS_PRESET=tiny DS_N=32 DS_TAPS=1,3
fi
dspark_gen() { # builds the two tools if the build step did not, then writes $W/drafter.gguf
    [ -x "$B/tools/bonsai-mkdrafter" ] && [ -x "$DS_SPEC" ] || ninja -C "$B" tools/bonsai-mkdrafter "${DS_SPEC#$B/}" || return 1
    "$B/tools/bonsai-mkdrafter" "$W/drafter.gguf" --preset "$DS_PRESET" --shared --type q4_1 --block-size "$DS_B" \
        --target-layers "$DS_TAPS"
}
export -f dspark_gen
export DS_SPEC DS_PRESET DS_B DS_TAPS
DS_T=${LIMIT[dspark]} # split: 50% drafter (+ building the tools), 25% replay (native + replay runs), 25% adaptive
if [ "$DS_T" -le 0 ]; then
    for s in dspark-gen dspark-replay dspark-adaptive; do skip_step "$s" "not in this plan"; done
elif [ ! -f "$W/l$L2-Q1_0.gguf" ]; then
    for s in dspark-gen dspark-replay dspark-adaptive; do skip_step "$s" "no $L2-layer Q1_0 model"; done
else
    run_step dspark-gen $(( DS_T / 2 )) bash -c dspark_gen
    for run in replay adaptive; do
        if [ "${ST[dspark-gen]}" != OK ]; then skip_step "dspark-$run" "no drafter"; continue; fi
        [ "$run" = replay ] && args=(--spec-type draft-replay --no-adaptive) lim=$(( DS_T / 4 )) \
            || args=(--spec-type draft-dspark) lim=$(( DS_T / 4 ))
        run_step "dspark-$run" "$lim" "$DS_SPEC" -m "$W/l$L2-Q1_0.gguf" -md "$W/drafter.gguf" -ngl 99 --temp 0 \
            -n "$DS_N" -c 1024 --spec-draft-n-max "$DS_B" -p "$DS_PROMPT" "${args[@]}"
    done
fi
# the shipped 1-bit model with its trained drafter (data/, docs/dspark.md §11.4), both on the device: plain greedy, then
# DSpark (block 4, always drafting 4), one held-out prompt in the model's ChatML. The 27B-shape rows above have random
# weights, so no drafter can be trained for them; this row is the trained drafter's acceptance and speed on a GPU.
DS_SHIP_N=$([ "$EMU" = 1 ] && echo 16 || echo 256)
dspark_shipped() {
    local a=(-m data/bonsai-loop-1bit.gguf -md data/bonsai-loop-1bit-drafter.gguf -ngl 99 --temp 0 -n "$DS_SHIP_N"
        -c 1024 --spec-draft-n-max 4 --no-spec-adaptive -e -p '<|im_start|>user\nQ: How much does<|im_end|>\n<|im_start|>assistant\n')
    "$DS_SPEC" "${a[@]}" --spec-type none 2>&1 | sed 's/^/plain| /' && "$DS_SPEC" "${a[@]}" --spec-type draft-dspark 2>&1 |
        sed 's/^/dspark| /'
}
export -f dspark_shipped
export DS_SHIP_N
if [ "${LIMIT[dspark]}" -le 0 ]; then
    skip_step dspark-shipped "not in this plan"
else
    run_step dspark-shipped $(( LIMIT[dspark] / 4 )) bash -o pipefail -c dspark_shipped
fi
# the drafter alone for 1-8 slots: one drafter pass per slot (serial; all started together) vs one batched pass
if [ "${ST[dspark-gen]:-SKIP}" != OK ]; then
    skip_step dspark-draft "no drafter"
else
    run_step dspark-draft "${LIMIT[draft]}" "${DRAFT_BENCH[@]}" -m "$W/l$L2-Q1_0.gguf" -md "$W/drafter.gguf" -ngl 99 \
        -k "$DS_B"
fi
# ---- serve: bonsai-serve -ngl 99 (after DSpark: its drafter serves the speculative streams) ------------------
# serve_one LABEL MODE [SERVER ARGS...]: starts the server on the L2-layer Q1_0 file (with the extra args) and POSTs
# /completion (SERVE_N tokens, ignore_eos, no prompt cache), a warm-up and then SERVE_REPS timed ones; prints
# "| mode | tok/s |" rows: MODE all: one stream per request kind (timings.predicted_per_second, the best of the timed
# ones), then 4 greedy streams at once (total tokens / wall time); MODE streams: only the 4 streams, named LABEL, with
# the server's busy slots per decode call and per batch of rounds begun together (drafting; /metrics).
# SERVE_ADAPTIVE 0 (emulator): no adaptive row (in 8 tokens the cost model never stops drafting: the same run twice).
SERVE_N=128 SERVE_REPS=2 SERVE_BIN="$B/tools/bonsai-serve" SERVE_ADAPTIVE=1
[ "$EMU" = 1 ] && SERVE_N=8 SERVE_REPS=1 SERVE_BIN="$B/tests/cuda/bonsai-serve-emu" SERVE_ADAPTIVE=0
serve_one() {
    local label=$1 mode=$2
    shift 2
    rm -f "$W/serve.ready"
    "$SERVE_BIN" -m "$W/l$L2-Q1_0.gguf" -ngl 99 --port 0 --ready-file "$W/serve.ready" -c 1024 -t 4 -np 4 --metrics \
        "$@" >>"$W/serve.out" 2>&1 &
    local pid=$! rc=0
    python3 - "$W/serve.ready" "$SERVE_N" "$SERVE_REPS" "$mode" "$label" <<'PYEOF' || rc=1
import json, os, sys, threading, time, urllib.request
ready, n, reps, mode, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
for _ in range(600):
    if os.path.exists(ready) and open(ready).read().strip(): break
    time.sleep(0.1)
else: sys.exit("bonsai-serve did not start")
host = open(ready).read().strip()
modes = [("greedy (argmax steps)", {"temperature": 0}), ("greedy, n_probs 1 (logits rows)", {"temperature": 0, "n_probs": 1}),
         ("sampled top_k 40 (top-k steps)", {"temperature": 0.8, "top_k": 40, "seed": 1}),
         ("sampled top_k 40, n_probs 1 (logits rows)", {"temperature": 0.8, "top_k": 40, "seed": 1, "n_probs": 1})]
if mode == "all":
    print("| request | decode tok/s |")
    print("| ------- | -----------: |")
    for name, extra in modes:
        best = 0.0
        for r in range(reps + 1):
            body = dict(prompt="Once upon a time", n_predict=n, ignore_eos=True, cache_prompt=False, **extra)
            req = urllib.request.Request(f"http://{host}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
            t = json.load(urllib.request.urlopen(req, timeout=60))["timings"]["predicted_per_second"]
            if r > 0: best = max(best, t) # r 0: warm-up (graph capture)
        print(f"| {name} | {best:.1f} |")
def post(body, out, i):
    req = urllib.request.Request(f"http://{host}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(req, timeout=120))["tokens_predicted"]
best = 0.0 # 4 greedy streams at once: the slots' steps (and verify passes) batched; total tokens / wall time
for r in range(reps + 1):
    got = [0] * 4
    th = [threading.Thread(target=post, args=(dict(prompt=f"Stream {i} once upon a time", n_predict=n, ignore_eos=True,
          cache_prompt=False, temperature=0), got, i)) for i in range(4)]
    t0 = time.time()
    for t in th: t.start()
    for t in th: t.join()
    if r > 0: best = max(best, sum(got) / (time.time() - t0))
if mode == "all":
    print(f"| 4 greedy streams at once, total (batched steps) | {best:.1f} |")
else:
    m = urllib.request.urlopen(f"http://{host}/metrics", timeout=10).read().decode()
    val = lambda key: next((l.split()[-1] for l in m.splitlines() if l.startswith(f"llamacpp:{key} ")), "?")
    per, per_draft = val("n_busy_slots_per_decode"), val("n_busy_slots_per_draft")
    print(f"| 4 greedy streams at once, total: {label}; {per} busy slots per pass, {per_draft} per drafting | {best:.1f} |")
PYEOF
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return $rc
}
# serve_run: the plain server's rows, then (with the DSpark step's drafter) 4 speculative streams, the random drafter
# with the adaptive cost model (mostly one-token passes) and always drafting 3 (verify passes of 4 tokens: ragged
# passes of up to 16 columns, bn_cuda_forward_multi; the slots' drafts in one batched drafter pass,
# bn_cuda_drafter_draft_multi), and on a GPU the last again with a drafter pass per slot (BONSAI_CUDA_DRAFT_BATCH=0).
serve_run() {
    [ -x "$SERVE_BIN" ] || ninja -C "$B" "${SERVE_BIN#$B/}" || return 1
    : >"$W/serve.out"
    serve_one "" all || return 1
    [ -f "$W/drafter.gguf" ] || return 0
    if [ "$SERVE_ADAPTIVE" = 1 ]; then
        serve_one "DSpark random drafter, adaptive" streams -md "$W/drafter.gguf" --spec-type draft-dspark || return 1
    fi
    serve_one "DSpark random drafter, always 3 drafts" streams -md "$W/drafter.gguf" --spec-type draft-dspark \
        --spec-draft-n-max 3 --no-spec-adaptive || return 1
    [ "$EMU" = 1 ] && return 0 # the same with each slot's own drafter graph (started together): what batching saves
    BONSAI_CUDA_DRAFT_BATCH=0 serve_one "DSpark random drafter, always 3 drafts, a drafter pass per slot" streams \
        -md "$W/drafter.gguf" --spec-type draft-dspark --spec-draft-n-max 3 --no-spec-adaptive
}
export -f serve_one serve_run
export SERVE_N SERVE_REPS SERVE_BIN SERVE_ADAPTIVE
if [ ! -f "$W/l$L2-Q1_0.gguf" ]; then
    skip_step serve "no $L2-layer Q1_0 model"
else
    run_step serve "${LIMIT[serve]}" bash -c serve_run && cat "$W/serve.log"
fi

# ---- longpp: long prompts, ours and the peer's (after DSpark and serve: a spent budget cuts this first) ---
# Prefill at LONG_PP tokens: the attention part grows with the square of the prompt, the rest linearly, so this
# shows how the prefill attention scales against llama.cpp's: ours with the per-token kernel (the default), ours
# with query tiles (BONSAI_CUDA_ATTN_TILED=1, attn_tiled_kernel: notes/cuda.md), the same tiles on the fp16 tensor
# cores (BONSAI_CUDA_ATTN_TILED=mma, attn_mma_kernel), then the peer.
for who in ours tiled mma peer; do
    case $who in ours) amode=0 ;; tiled) amode=1 ;; *) amode=mma ;; esac
    if [ ! -f "$W/l$L1-Q1_0.gguf" ]; then
        skip_step "longpp-$who" "no $L1-layer Q1_0 model"
    elif [ "$who" != peer ]; then
        run_step "longpp-$who" "${LIMIT[longpp]}" env "BONSAI_CUDA_ATTN_TILED=$amode" \
            "$BENCH" -m "$W/l$L1-Q1_0.gguf" -ngl 99 -p "$LONG_PP" -n 0 -r 1 -o json
    elif [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
        skip_step longpp-peer "no peer llama-bench"
    else
        run_step longpp-peer "${LIMIT[longpp]}" env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build-peer/lib" \
            "$PEER" -m "$W/l$L1-Q1_0.gguf" -ngl 99 -p "$LONG_PP" -n 0 -r 1 -o json
    fi
done

# ---- profile (--profile): ncu kernel durations of a short decode and of a prefill ------------------------
# profile_run [pp]: ncu over bonsai-bench on the L1-layer Q1_0 model; the CSV goes to $W/profile[-pp].csv, then a
# table: kernel, launches, total us, us per token. Decode: tg16 + its warm-up (17 tokens); pp: one pp$PP run +
# its warm-up (2·PP tokens; the prefill kernels are launched one by one, not through a graph).
profile_run() {
    local tag="" args=(-p 0 -n 16) tokens=17
    [ "${1:-}" = pp ] && tag=-pp args=(-p "$PP" -n 0) tokens=$((2 * PP))
    ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base \
        "$BENCH" -m "$W/l$L1-Q1_0.gguf" -ngl 99 "${args[@]}" -r 1 -o json >"$W/profile$tag.csv" 2>"$W/profile$tag.err" || {
        tail -n 20 "$W/profile$tag.err"; return 1; }
    python3 - "$W/profile$tag.csv" "$tokens" <<'PYEOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no ncu rows")
h = rows[0]; k, v = h.index("Kernel Name"), h.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: ns = float(r[v].replace(",", ""))
    except ValueError: continue
    name = r[k].split("(")[0].replace("void ", "")[:50]; tot[name] += ns; cnt[name] += 1
all_ns = sum(tot.values())
print("| kernel | launches | total us | us / token | share |")
print("| --- | ---: | ---: | ---: | ---: |")
tokens = int(sys.argv[2])
for name, ns in sorted(tot.items(), key=lambda x: -x[1])[:25]:
    print(f"| {name} | {cnt[name]} | {ns/1e3:.1f} | {ns/1e3/tokens:.2f} | {100*ns/all_ns:.1f}% |")
print(f"| all ({sum(cnt.values())} launches) | | {all_ns/1e3:.1f} | {all_ns/1e3/tokens:.2f} | |")
PYEOF
}
export -f profile_run
export BENCH PP
if [ "${LIMIT[profile]}" -le 0 ]; then
    skip_step profile "not in this plan (--profile)"
elif ! command -v ncu >/dev/null; then
    skip_step profile "no ncu"
elif [ ! -f "$W/l$L1-Q1_0.gguf" ]; then
    skip_step profile "no model"
else
    run_step profile "${LIMIT[profile]}" bash -c profile_run && cat "$W/profile.log"
    run_step profile-pp $((LIMIT[profile] / 2)) bash -c "profile_run pp" && cat "$W/profile-pp.log"
fi

# dsf LOG PATTERN FIELD: the FIELD-th whitespace field (commas dropped) of LOG's first line matching PATTERN
dsf() { grep -m1 -E "$2" "$1" 2>/dev/null | awk -v f="$3" '{ gsub(/,/, ""); print $f }'; }
dspark_rows() {
    local R="$W/dspark-replay.log" A="$W/dspark-adaptive.log" f1="$W/bench-Q1_0-$L1.log" f2="$W/bench-Q1_0-$L2.log"
    echo
    echo "### DSpark on CUDA: $DS_PRESET-shape drafter on the device (Q4_1, block $DS_B), $L2-layer Q1_0 target"
    echo
    echo "$DS_N greedy tokens (bonsai-speculative -ngl 99). replay = forced acceptance (MEASUREMENT AID: the real"
    echo "drafter runs every round, the recorded greedy tokens are proposed). $LFULL-layer rows: verify ms/step"
    echo "scaled by the bonsai-bench tg ratio t($LFULL)/t($L2) (Q1_0), drafter and host time as measured."
    echo
    echo "| run | layers | tok/s | tokens / target pass | draft ms/round | verify ms/step |"
    echo "| --- | -----: | ----: | -------------------: | -------------: | -------------: |"
    awk -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v B="$DS_B" -v cr="$(cell dspark-replay)" -v ca="$(cell dspark-adaptive)" \
        -v cb="$(cell "bench-Q1_0-$L1")$(cell "bench-Q1_0-$L2")" \
        -v g1="$(jfield "$f1" avg_ns 2)" -v g2="$(jfield "$f2" avg_ns 2)" -v nat="$(dsf "$R" '^native' 12)" \
        -v rs="$(dsf "$R" '^decoded' 8)" -v rtp="$(dsf "$R" 'tokens per target pass' 12)" \
        -v rd="$(dsf "$R" 'draft ms/round' 8)" -v rv="$(dsf "$R" 'draft ms/round' 16)" \
        -v as="$(dsf "$A" '^decoded' 8)" -v atp="$(dsf "$A" 'tokens per target pass' 12)" \
        -v ad="$(dsf "$A" 'draft ms/round' 8)" -v av="$(dsf "$A" 'draft ms/round' 16)" 'BEGIN {
        if (cr == "" && (nat == "" || rs == "" || rtp == "" || rv == "")) cr = "FAIL"
        if (ca == "" && (as == "" || atp == "" || av == "")) ca = "FAIL"
        if (cb == "" && (g1 == "" || g2 == "")) cb = "FAIL"
        r = cb == "" ? (g1 + (LF - L1) / (L2 - L1) * (g2 - g1)) / g2 : 0 # target time per token, LFULL vs L2
        split("native tg|DSpark replay (forced acceptance, B=" B ")|DSpark random drafter (adaptive)", name, "|")
        C[1] = cr; S[1] = nat; T[1] = 1; D[1] = "-"; Vv[1] = nat > 0 ? 1000 / nat : 0
        C[2] = cr; S[2] = rs; T[2] = rtp; D[2] = sprintf("%.2f", rd); Vv[2] = rv
        C[3] = ca; S[3] = as; T[3] = atp; D[3] = sprintf("%.2f", ad); Vv[3] = av
        for (i = 1; i <= 3; i++) {
            if (C[i] != "") {
                printf("| %s | %d | %s | %s | %s | %s |\n", name[i], L2, C[i], C[i], C[i], C[i])
                printf("| %s | %d (scaled) | %s | %s | %s | %s |\n", name[i], LF, C[i], C[i], C[i], C[i])
                continue
            }
            printf("| %s | %d | %.1f | %.2f | %s | %.2f |\n", name[i], L2, S[i], T[i], D[i], Vv[i])
            if (cb != "") { printf("| %s | %d (scaled) | %s | %s | %s | %s |\n", name[i], LF, cb, cb, cb, cb); continue }
            step_ms = 1000 * T[i] / S[i] # per target pass: drafter + host + verify
            printf("| %s | %d (scaled) | %.1f | %.2f | %s | %.2f |\n", name[i], LF, T[i] * 1000 / (step_ms + Vv[i] * (r - 1)),
                   T[i], D[i], Vv[i] * r)
        }
    }'
}
# dspark_shipped_rows: the trained drafter on the shipped model (plain vs DSpark, one run each), when it ran
dspark_shipped_rows() {
    [ "${ST[dspark-shipped]:-SKIP}" = SKIP ] && return 0
    local S="$W/dspark-shipped.log"
    echo
    echo "### DSpark with a trained drafter: data/bonsai-loop-1bit.gguf + data/bonsai-loop-1bit-drafter.gguf on the device"
    echo
    echo "$DS_SHIP_N greedy tokens, one held-out prompt in ChatML, block 4 (always drafting 4); ratio = DSpark / plain."
    echo
    echo "| run | tok/s | accepted drafts / verify | tokens / target pass | ratio |"
    echo "| --- | ----: | -----------------------: | -------------------: | ----: |"
    awk -v c="$(cell dspark-shipped)" -v p="$(dsf "$S" '^plain\| decoded' 9)" -v d="$(dsf "$S" '^dspark\| decoded' 9)" \
        -v acc="$(dsf "$S" '^dspark\| spec: mean acc len' 7)" -v tp="$(dsf "$S" '^dspark\| spec: mean acc len' 13)" 'BEGIN {
        if (c == "" && (p == "" || d == "" || acc == "")) c = "FAIL"
        if (c != "") { printf("| plain | %s | - | 1 | - |\n| DSpark, trained drafter | %s | %s | %s | %s |\n", c, c, c, c, c); exit }
        printf("| plain | %.1f | - | 1 | - |\n", p)
        printf("| DSpark, trained drafter | %.1f | %.3f | %.3f | %.2f |\n", d, acc - 1, tp, p > 0 ? d / p : 0)
    }'
}
# dspark_draft_rows: bench_draft's table (drafting for several slots), when it ran
dspark_draft_rows() {
    [ "${ST[dspark-draft]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### Drafting for several slots (bench/bench_draft -ngl 99, the drafter above, $DS_B drafts each)"
    echo
    if [ "${ST[dspark-draft]}" = OK ]; then
        grep '^drafter on' "$W/dspark-draft.log"
        echo
        grep '^|' "$W/dspark-draft.log"
    else
        echo "dspark-draft: ${ST[dspark-draft]}"
    fi
}
# ==== end of DSpark ===================================================================================

# peer_rows: ours against the peer llama-bench, per type and layer count (+ the scaled row), as ratios
peer_rows() {
    [ "${LIMIT[peer]}" -le 0 ] && return 0
    echo
    echo "### Against llama.cpp: the same files through ${PEER_NAME:-the peer llama-bench} (-ngl 99)"
    echo
    echo "ratio = ours / llama.cpp (above 1: ours is faster). $LFULL-layer rows scaled linearly as above for both."
    echo
    echo "| type | layers | pp$PP ours | pp$PP llama.cpp | pp ratio | tg$TG ours | tg$TG llama.cpp | tg ratio |"
    echo "| ---- | -----: | ---------: | --------------: | -------: | ---------: | --------------: | -------: |"
    local q b1 b2 p1 p2
    for q in $TYPES; do
        b1="$W/bench-$q-$L1.log" b2="$W/bench-$q-$L2.log" p1="$W/peer-$q-$L1.log" p2="$W/peer-$q-$L2.log"
        awk -v q="$q" -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v PP="$PP" -v TG="$TG" \
            -v c1="$(cell "bench-$q-$L1")$(cell "peer-$q-$L1")" -v c2="$(cell "bench-$q-$L2")$(cell "peer-$q-$L2")" \
            -v op1="$(jfield "$b1" avg_ns 1)" -v op2="$(jfield "$b2" avg_ns 1)" \
            -v og1="$(jfield "$b1" avg_ns 2)" -v og2="$(jfield "$b2" avg_ns 2)" \
            -v lp1="$(jfield "$p1" avg_ns 1)" -v lp2="$(jfield "$p2" avg_ns 1)" \
            -v lg1="$(jfield "$p1" avg_ns 2)" -v lg2="$(jfield "$p2" avg_ns 2)" 'BEGIN {
            if (c1 == "" && (op1 == "" || og1 == "" || lp1 == "" || lg1 == "")) c1 = "FAIL"
            if (c2 == "" && (op2 == "" || og2 == "" || lp2 == "" || lg2 == "")) c2 = "FAIL"
            C[1] = c1; C[2] = c2; C[3] = c1 != "" ? c1 : c2
            k = (LF - L1) / (L2 - L1)
            split(L1 " " L2 " " LF, Ls, " ")
            OP[1] = op1; OP[2] = op2; OP[3] = op1 + k * (op2 - op1)
            OG[1] = og1; OG[2] = og2; OG[3] = og1 + k * (og2 - og1)
            LP[1] = lp1; LP[2] = lp2; LP[3] = lp1 + k * (lp2 - lp1)
            LG[1] = lg1; LG[2] = lg2; LG[3] = lg1 + k * (lg2 - lg1)
            for (i = 1; i <= 3; i++) {
                lay = Ls[i] (i == 3 ? " (scaled)" : "")
                if (C[i] != "") { printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", q, lay, C[i], C[i], C[i], C[i], C[i], C[i]); continue }
                a = PP * 1e9 / OP[i]; b = PP * 1e9 / LP[i]; c = TG * 1e9 / OG[i]; d = TG * 1e9 / LG[i]
                printf("| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", q, lay, a, b, a / b, c, d, c / d)
            }
        }'
    done
}

# cpuref_rows: the CPU engines (cpuref) side by side, with the ratio where the peer ran
cpuref_rows() {
    [ "${ST[cpuref-ours]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### CPU engines, for reference: $L1-layer Q1_0 file, -ngl 0, $NPROC threads"
    echo
    echo "| engine | pp$CPU_PP t/s | tg$CPU_TG t/s |"
    echo "| ------ | ---------: | --------: |"
    local o="$W/cpuref-ours.log" p="$W/cpuref-peer.log"
    awk -v PP="$CPU_PP" -v TG="$CPU_TG" -v co="$(cell cpuref-ours)" -v cp="$(cell cpuref-peer)" \
        -v peer="${PEER_NAME:-peer llama-bench}" -v op="$(jfield "$o" avg_ns 1)" -v og="$(jfield "$o" avg_ns 2)" \
        -v lp="$(jfield "$p" avg_ns 1)" -v lg="$(jfield "$p" avg_ns 2)" 'BEGIN {
        if (co == "" && (op == "" || og == "")) co = "FAIL"
        if (cp == "" && (lp == "" || lg == "")) cp = "FAIL"
        if (co != "") printf("| bonsai-bench | %s | %s |\n", co, co)
        else printf("| bonsai-bench | %.1f | %.1f |\n", PP * 1e9 / op, TG * 1e9 / og)
        if (cp != "") { printf("| %s | %s | %s |\n", peer, cp, cp); exit }
        printf("| %s | %.1f | %.1f |\n", peer, PP * 1e9 / lp, TG * 1e9 / lg)
        if (co == "") printf("| ratio ours / llama.cpp | %.2f | %.2f |\n", lp / op, lg / og)
    }'
}

# longpp_rows: the longpp steps' prefill t/s per prompt length, ours and the peer's, and their ratio
longpp_rows() {
    [ "${ST[longpp-ours]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### Long prompts: $L1-layer Q1_0 file, -ngl 99, pp of $LONG_PP tokens (one repetition)"
    echo
    echo "| prompt | ours t/s | ours, tiled attention t/s | ours, tensor-core attention t/s | llama.cpp t/s |" \
         "ours / llama.cpp | tiled / llama.cpp | tensor-core / llama.cpp |"
    echo "| -----: | -------: | ---: | ---: | ---: | ---: | ---: | ---: |"
    local i n o t x p co ct cx cp
    co=$(cell longpp-ours) ct=$(cell longpp-tiled) cx=$(cell longpp-mma) cp=$(cell longpp-peer)
    i=0
    for n in ${LONG_PP//,/ }; do
        i=$((i + 1))
        o=$(jfield "$W/longpp-ours.log" avg_ns "$i") t=$(jfield "$W/longpp-tiled.log" avg_ns "$i")
        x=$(jfield "$W/longpp-mma.log" avg_ns "$i") p=$(jfield "$W/longpp-peer.log" avg_ns "$i")
        awk -v n="$n" -v o="$o" -v t="$t" -v x="$x" -v p="$p" -v co="$co" -v ct="$ct" -v cx="$cx" -v cp="$cp" 'BEGIN {
            if (co == "" && o == "") co = "FAIL"
            if (ct == "" && t == "") ct = "FAIL"
            if (cx == "" && x == "") cx = "FAIL"
            if (cp == "" && p == "") cp = "FAIL"
            a = co != "" ? co : sprintf("%.1f", n * 1e9 / o)
            b = ct != "" ? ct : sprintf("%.1f", n * 1e9 / t)
            e = cx != "" ? cx : sprintf("%.1f", n * 1e9 / x)
            c = cp != "" ? cp : sprintf("%.1f", n * 1e9 / p)
            r1 = co == "" && cp == "" ? sprintf("%.2f", p / o) : "-"
            r2 = ct == "" && cp == "" ? sprintf("%.2f", p / t) : "-"
            r3 = cx == "" && cp == "" ? sprintf("%.2f", p / x) : "-"
            printf("| %d | %s | %s | %s | %s | %s | %s | %s |\n", n, a, b, e, c, r1, r2, r3)
        }'
    done
    if grep -q "fp16 tensor-core self-check failed" "$W/longpp-mma.log" 2>/dev/null; then
        echo
        echo "The fp16 tensor-core self-check FAILED ($(grep -o -m1 "fp16 tensor-core self-check failed: [^;]*" \
            "$W/longpp-mma.log" | sed 's/^fp16 tensor-core //')):" \
             "the tensor-core column ran the tiled CUDA-core kernel."
    fi
}

# fuse_rows: tg with the defaults, without the Q8-producer fusion, with the GDN output norm fused, with programmatic
# dependent launch and with both opt-ins; what one launch in the decode graph costs and what PDL saves of it
fuse_rows() {
    [ "${ST[fuse-off]:-SKIP}" = SKIP ] && [ "${ST[gdn-norm]:-SKIP}" = SKIP ] && [ "${ST[pdl]:-SKIP}" = SKIP ] &&
        [ "${ST[opt-ins]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### Launch cost: tg$TG, $L2-layer Q1_0 file, with fewer and more launches per token"
    echo
    echo "| run | launches per token | tg$TG t/s | us per token |"
    echo "| --- | -----------------: | --------: | -----------: |"
    awk -v TG="$TG" -v on="$(jfield "$W/bench-Q1_0-$L2.log" avg_ns 2)" -v off="$(jfield "$W/fuse-off.log" avg_ns 1)" \
        -v gn="$(jfield "$W/gdn-norm.log" avg_ns 1)" -v con="$(cell "bench-Q1_0-$L2")" -v coff="$(cell fuse-off)" \
        -v cgn="$(cell gdn-norm)" -v pdl="$(jfield "$W/pdl.log" avg_ns 1)" -v cpdl="$(cell pdl)" \
        -v both="$(jfield "$W/opt-ins.log" avg_ns 1)" -v cboth="$(cell opt-ins)" 'BEGIN {
        if (con == "" && on == "") con = "FAIL"
        if (coff == "" && off == "") coff = "FAIL"
        if (cgn == "" && gn == "") cgn = "FAIL"
        if (cpdl == "" && pdl == "") cpdl = "FAIL"
        if (cboth == "" && both == "") cboth = "FAIL"
        split("default|Q8-producer fusion off (BONSAI_CUDA_FUSE=0)|GDN output norm fused (BONSAI_CUDA_GDN_NORM=1)|" \
              "programmatic dependent launch (BONSAI_CUDA_PDL=1)|PDL and the GDN norm fusion together", name, "|")
        split("85 118 79 85 79", n, " ")
        C[1] = con; C[2] = coff; C[3] = cgn; C[4] = cpdl; C[5] = cboth
        T[1] = on; T[2] = off; T[3] = gn; T[4] = pdl; T[5] = both
        for (i = 1; i <= 5; i++)
            if (C[i] != "") printf("| %s | %d | %s | %s |\n", name[i], n[i], C[i], C[i])
            else printf("| %s | %d | %.1f | %.1f |\n", name[i], n[i], TG * 1e9 / T[i], T[i] / TG / 1000)
        if (con == "" && coff == "")
            printf("\nPer extra launch: %.2f us (the 33 quantize launches also do their small work).\n",
                   (off - on) / TG / 1000 / 33)
        if (con == "" && cpdl == "")
            printf("PDL saves %.2f us per launch (%.1f us per token of 85 launches).\n", (on - pdl) / TG / 1000 / 85,
                   (on - pdl) / TG / 1000)
    }'
}

# decide_rows: the opt-in switches this run can settle, each with its figures and what they say: make it the default
# (faster by more than 2 % and, for PDL, tests-pdl passed) or keep it as it is
decide_rows() {
    echo
    echo "### Opt-ins: what this run says"
    echo
    # verdict WHAT TOKENS BASE_NS NEW_NS OK: one line: the t/s of TOKENS tokens with and without the switch and "make
    # it the default" when it is more than 2 % faster and OK is 1
    verdict() {
        awk -v what="$1" -v n="$2" -v base="$3" -v t="$4" -v ok="$5" 'BEGIN {
            if (base == "" || t == "") { printf("- %s: not measured\n", what); exit }
            gain = base / t - 1
            printf("- %s: %.1f against %.1f t/s (%+.1f %%): %s\n", what, n * 1e9 / t, n * 1e9 / base, 100 * gain,
                   gain > 0.02 && ok ? "make it the default" : "keep the default")
        }'
    }
    local on tpdl pdl_ok mma_on
    on=$(jfield "$W/bench-Q1_0-$L2.log" avg_ns 2)
    tpdl=${ST[tests-pdl]:-SKIP}
    pdl_ok=$([ "$tpdl" = OK ] && echo 1 || echo 0)
    verdict "BONSAI_CUDA_PDL=1 (tg, tests-pdl $tpdl)" "$TG" "$on" "$(jfield "$W/pdl.log" avg_ns 1)" "$pdl_ok"
    verdict "BONSAI_CUDA_GDN_NORM=1 (tg)" "$TG" "$on" "$(jfield "$W/gdn-norm.log" avg_ns 1)" 1
    verdict "both (tg)" "$TG" "$on" "$(jfield "$W/opt-ins.log" avg_ns 1)" "$pdl_ok"
    local n i=0 best who t name
    for n in ${LONG_PP//,/ }; do i=$((i + 1)); done
    [ "$i" = 0 ] && return 0
    best="" name=""
    for who in ours tiled mma; do
        t=$(jfield "$W/longpp-$who.log" avg_ns "$i")
        [ -z "$t" ] && continue
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t name=$who; fi
    done
    case $name in
    ours) name="the per-token kernel (the default)" ;;
    tiled) name="BONSAI_CUDA_ATTN_TILED=1" ;;
    mma) name="BONSAI_CUDA_ATTN_TILED=mma$(grep -q "fp16 tensor-core self-check failed" "$W/longpp-mma.log" 2>/dev/null &&
        echo " (but its self-check failed: that was the tiled kernel)")" ;;
    *) name="not measured" ;;
    esac
    echo "- prefill attention at pp$n: fastest $name"
    mma_on=$(mma_note | grep -q "^on" && echo 1 || echo 0)
    for q in $TYPES; do
        verdict "BONSAI_CUDA_MMQ_PREFILL=1 (pp$PP, $q)" "$PP" "$(jfield "$W/bench-$q-$L2.log" avg_ns 1)" \
            "$(jfield "$W/mmq-$q.log" avg_ns 1)" "$mma_on"
    done
}

# batch_rows: tg with 4 sequences at once (bonsai-bench -npl 4: bn_cuda_forward_batch) against one sequence, and
# both in passes of 4 tokens of each sequence (-nv 4: ragged passes, bn_cuda_forward_multi, as speculative slots'
# verify passes with 3 drafts always accepted: their decode ceiling, drafting not counted). The JSON results in
# order: pp, tg, tg v4, tg x4, tg x4 v4.
batch_rows() {
    echo
    echo "### Batched decode: tg$TG of 4 sequences at once (-npl 4), and in passes of 4 tokens each (-nv 4), total t/s"
    echo
    echo "| type | layers | tg$TG t/s | tg$TG x4 t/s | x4 / x1 | tg$TG v4 t/s | tg$TG x4 v4 t/s | x4 v4 / x1 |"
    echo "| ---- | -----: | --------: | -----------: | ------: | -----------: | --------------: | ---------: |"
    local q f1 f2
    for q in $TYPES; do
        f1="$W/bench-$q-$L1.log" f2="$W/bench-$q-$L2.log"
        awk -v q="$q" -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v TG="$TG" -v c1="$(cell "bench-$q-$L1")" \
            -v c2="$(cell "bench-$q-$L2")" -v g1="$(jfield "$f1" avg_ns 2)" -v g2="$(jfield "$f2" avg_ns 2)" \
            -v v1="$(jfield "$f1" avg_ns 3)" -v v2="$(jfield "$f2" avg_ns 3)" \
            -v b1="$(jfield "$f1" avg_ns 4)" -v b2="$(jfield "$f2" avg_ns 4)" \
            -v w1="$(jfield "$f1" avg_ns 5)" -v w2="$(jfield "$f2" avg_ns 5)" 'BEGIN {
            if (c1 == "" && (g1 == "" || b1 == "" || v1 == "" || w1 == "")) c1 = "FAIL"
            if (c2 == "" && (g2 == "" || b2 == "" || v2 == "" || w2 == "")) c2 = "FAIL"
            C[1] = c1; C[2] = c2; C[3] = c1 != "" ? c1 : c2
            k = (LF - L1) / (L2 - L1)
            split(L1 " " L2 " " LF, Ls, " ")
            G[1] = g1; G[2] = g2; G[3] = g1 + k * (g2 - g1)
            B[1] = b1; B[2] = b2; B[3] = b1 + k * (b2 - b1)
            V[1] = v1; V[2] = v2; V[3] = v1 + k * (v2 - v1)
            W[1] = w1; W[2] = w2; W[3] = w1 + k * (w2 - w1)
            for (i = 1; i <= 3; i++) {
                lay = Ls[i] (i == 3 ? " (scaled)" : "")
                if (C[i] != "") { printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", q, lay, C[i], C[i], C[i], C[i], C[i], C[i]); continue }
                a = TG * 1e9 / G[i]; b = 4 * TG * 1e9 / B[i]; v = TG * 1e9 / V[i]; w = 4 * TG * 1e9 / W[i]
                printf("| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", q, lay, a, b, b / a, v, w, w / a)
            }
        }'
    done
}

# serve_rows: the serve step's table
serve_rows() {
    [ "${ST[serve]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### bonsai-serve -ngl 99 -np 4: $L2-layer Q1_0 file, $SERVE_N tokens per request (one stream, then 4)"
    echo
    if [ "${ST[serve]}" = OK ]; then grep '^|' "$W/serve.log"; else echo "serve: ${ST[serve]}"; fi
}

# ---- the tables -----------------------------------------------------------------------------------

# mma_note: whether the int8 tensor cores served the runs (cuda/mma_check.cu's decision, from the logs)
mma_note() {
    local failed
    failed=$(grep -h -m1 -o "tensor-core self-check failed: [^;]*" "$W"/*.log 2>/dev/null | head -n 1)
    if [ -n "$failed" ]; then echo "OFF, ${failed#tensor-core } (the dp4a kernels ran)"
    elif [ "${BONSAI_CUDA_MMA:-1}" = 0 ]; then echo "off (BONSAI_CUDA_MMA=0)"
    elif grep -q "tensor cores: on (self-check passed)" "$RES/tests.log" 2>/dev/null ||
        grep -qh "^bonsai-bench: CUDA int8 tensor cores on;" "$W"/bench-*.log 2>/dev/null; then
        echo "on (self-check passed)"
    else echo "on (no self-check failure logged)"
    fi
}

table() {
    echo
    echo "## CUDA check — $(date -u +%Y-%m-%dT%H:%MZ) — $DEVICE"
    echo
    echo "Model: synthetic $PRESET shape (bonsai-mkmodel, --pure: every 2-D weight incl. head and embedding in the"
    echo "type), measured with $L1 and $L2 layers and scaled linearly to $LFULL layers. Decode GB/s = weight bytes"
    echo "read per token (all but token_embd) × tg tok/s; copy bandwidth ${COPY_GBS:-${ST[copybw]}} GB/s. GPU tests: $TESTS."
    echo "Int8 tensor cores (8-32 column products): $(mma_note)."
    echo
    echo "| type | layers | size (MiB) | pp$PP t/s | tg$TG t/s | decode GB/s | % of copy BW |"
    echo "| ---- | -----: | ---------: | --------: | --------: | ----------: | -----------: |"
    local q f1 f2 bpw
    for q in $TYPES; do
        f1="$W/bench-$q-$L1.log" f2="$W/bench-$q-$L2.log"
        bpw=$([ "$q" = Q1_0 ] && echo 1.125 || echo 2.25)
        awk -v q="$q" -v L1="$L1" -v L2="$L2" -v LF="$LFULL" -v PP="$PP" -v TG="$TG" -v V="$V" -v H="$H" -v bpw="$bpw" \
            -v copy="$COPY_GBS" -v c1="$(cell "bench-$q-$L1")" -v c2="$(cell "bench-$q-$L2")" \
            -v s1="$(jfield "$f1" model_size 1)" -v s2="$(jfield "$f2" model_size 1)" \
            -v p1="$(jfield "$f1" avg_ns 1)" -v p2="$(jfield "$f2" avg_ns 1)" \
            -v g1="$(jfield "$f1" avg_ns 2)" -v g2="$(jfield "$f2" avg_ns 2)" 'BEGIN {
            if (c1 == "" && (s1 == "" || p1 == "" || g1 == "")) c1 = "FAIL"
            if (c2 == "" && (s2 == "" || p2 == "" || g2 == "")) c2 = "FAIL"
            C[1] = c1; C[2] = c2; C[3] = c1 != "" ? c1 : c2
            embd = V * H * bpw / 8; k = (LF - L1) / (L2 - L1)
            split(L1 " " L2 " " LF, Ls, " ")
            S[1] = s1; S[2] = s2; S[3] = s1 + k * (s2 - s1)
            P[1] = p1; P[2] = p2; P[3] = p1 + k * (p2 - p1)
            G[1] = g1; G[2] = g2; G[3] = g1 + k * (g2 - g1)
            for (i = 1; i <= 3; i++) {
                lay = Ls[i] (i == 3 ? " (scaled)" : "")
                if (C[i] != "") { printf("| %s | %s | %s | %s | %s | %s | %s |\n", q, lay, C[i], C[i], C[i], C[i], C[i]); continue }
                pp = PP * 1e9 / P[i]; tg = TG * 1e9 / G[i]; gbs = (S[i] - embd) * tg / 1e9
                pct = copy > 0 ? sprintf("%.1f%%", 100 * gbs / copy) : "n/a"
                printf("| %s | %s | %.1f | %.1f | %.1f | %.2f | %s |\n", q, lay, S[i] / 1048576, pp, tg, gbs, pct)
            }
        }'
    done
    peer_rows
    batch_rows
    train_rows
    fuse_rows
    dspark_rows
    dspark_shipped_rows
    dspark_draft_rows
    cpuref_rows
    longpp_rows
    decide_rows
    serve_rows
    if [ "${ST[profile]:-SKIP}" = OK ]; then
        echo
        echo "### Kernel time per decoded token (ncu, $L1-layer Q1_0, tg16 + warm-up; launches include the upload and the"
        echo "tensor-core self-check)"
        echo
        cat "$W/profile.log"
        # the kernels' share of a decode step: their time per token against bonsai-bench's wall time per token
        awk -v k="$(awk -F'|' '/^\| all \(/ { gsub(/ /, "", $5); print $5 }' "$W/profile.log")" \
            -v g="$(jfield "$W/bench-Q1_0-$L1.log" avg_ns 2)" -v TG="$TG" 'BEGIN {
            if (k == "" || g == "") exit
            w = g / TG / 1000
            printf("\nKernels %.1f us per token; bonsai-bench tg%d on the same file %.1f us per token: launch gaps and host "
                   "work about %.0f%% of a step.\n", k, TG, w, 100 * (w - k) / w)
        }'
    fi
    if [ "${ST[profile-pp]:-SKIP}" = OK ]; then
        echo
        echo "### Kernel time per prefilled token (ncu, $L1-layer Q1_0, pp$PP + warm-up, launch by launch)"
        echo
        cat "$W/profile-pp.log"
    fi
    echo
    echo "| step | status | seconds | limit |"
    echo "| ---- | ------ | ------: | ----: |"
    local s lim
    for s in "${ORDER[@]}"; do
        lim=${LIMIT[$s]:-${LIMIT[${s%%-*}]:-}}
        printf '| %s | %s | %s | %s |\n' "$s" "${ST[$s]}" "${SECS[$s]}" "$lim"
    done
    echo
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ), total $(elapsed) s of a ${PLAN} s plan"
}
say "== [$(elapsed) s] done"
table | tee "$RES/check-table.md"
for s in "${ORDER[@]}"; do
    case ${ST[$s]} in FAIL | TIMEOUT) exit 1 ;; esac
done
exit 0
