#!/usr/bin/env bash
# cuda/check.sh — the GPU verdict script: one device call on a fresh machine, within a budget of 420 s (7 min).
# It builds for sm_90 from the working tree, measures the rows that decide the targets first, and appends each
# verdict row to check-table.md as it is measured (printing the table so far), so a cut or killed run still shows
# what it measured. The steps, in order of value (a step runs cut to what is left of the budget, or is skipped when
# that is under a quarter of its limit):
#   env      nvidia-smi, nvcc and driver versions;
#   deps     only where pkg-config lacks the build's libraries: unpacks the carried .debs of cuda/gpu-deps.sh
#            (build-gpudeps/) into build-gpudeps-root/ and points pkg-config there (nothing is fetched);
#   setup    meson -Dcuda=enabled, release, in BUILD_DIR (default build-cuda);
#   build    only the programs of the verdict rows: bonsai-mkmodel, bonsai-bench, bench_train, cuda_copy_bw;
#   model-Q1_0, bench-Q1_0, model-Q2_0, bench-Q2_0
#            the 27B shape with all 64 layers, measured (no extrapolation): bonsai-mkmodel --type q1_0 / q2_0
#            writes the file with its random weights quantized as generated (3.6 / 7.2 GB; a 64-layer F16 file
#            would be 54 GB), then bonsai-bench -ngl 99 pp512 / tg128 (3 repetitions): prefill and decode tok/s,
#            kernels per token (the captured decode graph's nodes, BONSAI_CUDA_GRAPH_LOG=1), decode GB/s and its
#            share of the measured copy bandwidth (copybw, before the first bench);
#   model-F16, train-F16-4, train-Q1_0-64
#            FTPO LoRA training on the device (bench/bench_train --ngl 99, r 32 on q,k,v,o,gate,up,down, 4096
#            tokens, one warm-up and one timed step): step ms, tokens/s, device memory, TFLOP/s and MFU of the
#            bf16 dense peak (989 TFLOP/s on an H200 / H100 SXM), on a 4-layer F16 base (MFU does not depend on
#            the layer count; 64 F16 layers do not fit the disk) and the 64-layer Q1_0 base (its memory measured);
#            then one more step each timed by part (--profile), the diagnostics' "step by part" table;
#   build-rest, tests, tests-pdl, sanitize
#            the GPU test programs and the remaining tools, the CUDA tests on the GPU (4 at a time, meson's
#            timeouts x0.4), cuda_forward / cuda_dspark_graph / cuda_split again with BONSAI_CUDA_PDL=1, and (with
#            --sanitize) compute-sanitizer memcheck / racecheck on test_emu_runtime and test_cuda_mm;
#   dspark   a 27B-shape random drafter over the 64-layer Q1_0 target (bonsai-speculative -ngl 99): native,
#            forced-acceptance replay, adaptive; the shipped 1-bit model with its trained drafter; bench_draft;
#   then, as the budget allows, the diagnostics: launch cost (fusion off, GDN norm fusion, PDL), batched decode
#   (-npl 4 -nv 4), bonsai-serve, bench_cuda_mm, the MMQ prefill opt-in, the CPU engines, long prompts on a
#   4-layer file, and the opt-ins: llama.cpp's llama-bench on the same files (--peer) and ncu profiles (--profile).
# Verdict rows, each with its target and PASS / FAIL (SKIP: not measured in this run):
#   build: PASS when the build step passed;
#   Q1_0 decode: PASS at tg128 >= 600 tok/s (64 layers);
#   training, Q1_0 base: PASS when the device memory in use stays under 12 GB (64 layers, r 32, 4096 tokens);
#   training, F16 base: PASS at MFU >= 35 % of the bf16 dense peak (no peak known for the GPU: FAIL);
#   every other row (Q2_0 decode, GPU tests, DSpark rows): PASS when its step passed and gave its numbers.
# Time on an H200 machine (16 cores): estimates, none measured there yet; the step table of a run gives the real
# seconds. setup ~15 s, build ~60 s (nvcc ~100 core-seconds for cuda/*.cu, measured on a 2-core machine, plus the C
# library); each 64-layer file ~15-20 s (bonsai-mkmodel: ~7 ns per element on one core of a 2-core machine, 27B
# elements, 16 threads; on /dev/shm, no disk); each bench ~15 s (upload, 4 x pp512 + tg128); the F16 file ~10 s and its
# training ~15 s; the 64-layer training ~45 s (two steps of 6·24.4e9·4096 = 6.0e14 FLOP in fp32); the test programs
# ~25 s and the GPU tests ~60 + 20 s: the verdict rows by ~320 s, DSpark by ~360 s, the diagnostics in the rest.
# Every step runs under `timeout` with the limit printed in the plan; a step that fails or times out logs its tail
# and the script goes on; cells that depend on it read FAIL / TIMEOUT / SKIP. Exit status: 1 when a step failed or
# timed out, else 0 (a missed target is a FAIL row, not a failed script). The tables always print.
# Results: $OUT if set (the device tool returns files under it: check-table.md, check.log with every step's full
# log, tests.log), else BUILD_DIR/cuda-check/.
# Usage: cuda/check.sh [--emu | --tiny] [--quick] [--sanitize] [--profile] [--peer] [BUILD_DIR]
#   --emu: the same steps against the CPU emulator (tiny preset, 16 layers, pp16/tg8, no setup, build or GPU
#   tests; BUILD_DIR must be built already). This is how the script itself is tested without a GPU (tests
#   cuda_check_script_emu*). Numbers from --emu are emulator speed, meaningless.
#   --tiny: GPU mode with the tiny shapes (a smoke run).
#   --quick: fewer tests (emu_runtime, cuda_mm, cuda_forward), Q1_0 only, one repetition.
#   --sanitize: adds the sanitize step (60 s) after the tests.
#   --profile: adds two steps (60 s + 30 s): Nsight Compute (ncu, kernel durations, graph nodes one by one) over 16
#   decode tokens, then over a pp$PP prefill, of the 4-layer Q1_0 model; prints the kernels by time per token.
#   --peer: the llama.cpp rows (build-peer/llama-bench.xz from scripts/build-llamacpp-cuda.sh, carried; or
#   BONSAI_PEER_BENCH=PATH, which also turns them on): llama-bench -ngl 99 on the 64-layer files, the CPU reference
#   and the long prompts. Opt-in: two more 64-layer uploads and runs do not fit the default budget.
# BONSAI_CHECK_BUDGET=S sets the budget (0: none; the emulator's default). BONSAI_CHECK_INJECT="STEP=fail STEP=hang
# ..." replaces steps by a failing / hanging command (2 s limit): how cuda_check_script_emu_faults checks that the
# rows and tables still print.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
EMU=0 TINY=0 QUICK=0 SANITIZE=0 PROFILE=0 PEER_ON=0
while [ $# -gt 0 ]; do
    case "$1" in
    --emu) EMU=1; shift ;;
    --tiny) TINY=1; shift ;;
    --quick) QUICK=1; shift ;;
    --sanitize) SANITIZE=1; shift ;;
    --profile) PROFILE=1; shift ;;
    --peer) PEER_ON=1; shift ;;
    *) break ;;
    esac
done
[ -n "${BONSAI_PEER_BENCH:-}" ] && PEER_ON=1
B=${1:-build-cuda}
# BONSAI_CHECK_BUDGET: seconds the whole run may take (GPU default 420): a step gets at most what is left of it
# less 20 s (kept for the tables), and is skipped when that is under a quarter of its limit (it would most likely
# time out). 0: no budget (the emulator's default).
BUDGET=${BONSAI_CHECK_BUDGET:-$([ "$EMU" = 1 ] && echo 0 || echo 420)}
NPROC=$(nproc)
T_START=$(date +%s)
RES=${OUT:-$B/cuda-check}
mkdir -p "$RES"
# the models' folder: on a GPU machine /dev/shm where it has 32 GB free (the files, ~20 GB, then cost no disk writes
# and no fsync), else TMPDIR or /tmp
WDIR=${TMPDIR:-/tmp}
SHM_GB=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }')
[ "$EMU" = 0 ] && [ -z "${TMPDIR:-}" ] && [ "${SHM_GB:-0}" -ge 32 ] && WDIR=/dev/shm
W=$(mktemp -d "$WDIR/bn-cuda-check.XXXXXX")
trap 'rm -rf "$W"' EXIT
: >"$RES/check.log"
TABLE="$RES/check-table.md"

# ---- shapes, targets and the plan ---------------------------------------------------------------------
# LFULL: the layers of the decode, DSpark and Q1_0 training rows (all measured); TRAIN_F16_L: the F16 training base;
# LSMALL: the file of the CPU reference, the long prompts and the profiles (they need no 64 layers)
TYPES="Q1_0 Q2_0"
TARGET_TG=600      # Q1_0 decode, tok/s at LFULL layers
TARGET_MEM_MB=12000 # training on the Q1_0 base: device memory in use (12 GB)
TARGET_MFU=35      # training on the F16 base: % of the bf16 dense peak
if [ "$EMU" = 1 ]; then
    PRESET=tiny LFULL=16 LSMALL=4 TRAIN_F16_L=4 PP=16 TG=8 REPS=1 V=512 H=128 LONG_PP=64,256
else
    PRESET=27b LFULL=64 LSMALL=4 TRAIN_F16_L=4 PP=512 TG=128 REPS=3 V=248320 H=5120 LONG_PP=4096,16384
    [ "$QUICK" = 1 ] && REPS=1
    [ "$TINY" = 1 ] && PRESET=tiny LFULL=16 PP=64 TG=32 V=512 H=128 LONG_PP=512,2048
fi
[ "$QUICK" = 1 ] && TYPES="Q1_0"
# Limits in seconds, upper bounds (the budget decides what runs). bench, train, peer, cpuref, longpp, batch, mmq and
# the launch-cost runs: per run.
if [ "$EMU" = 1 ]; then
    # ~3-10x what each takes in the emulator on a loaded 2-core machine (the budget test's skips depend on them)
    declare -A LIMIT=([env]=5 [deps]=5 [setup]=5 [build]=5 [model]=20 [copybw]=20 [bench]=30 [train]=40
                      [train-long]=60 [build-rest]=5 [tests]=5 [tests-pdl]=5 [sanitize]=0 [dspark]=60 [draft]=30
                      [launch]=30 [batch]=40 [serve]=150 [mm]=5 [mmq]=30 [cpuref]=30 [longpp]=60 [peer]=30 [profile]=0)
else
    declare -A LIMIT=([env]=10 [deps]=15 [setup]=30 [build]=120 [model]=60 [copybw]=10 [bench]=40 [train]=45
                      [build-rest]=60 [tests]=90 [tests-pdl]=40 [sanitize]=60 [dspark]=60 [draft]=20 [launch]=25
                      [batch]=30 [serve]=90 [mm]=30 [mmq]=25 [cpuref]=20 [longpp]=30 [peer]=40 [profile]=60)
    LIMIT[train-long]=120 # the LFULL-layer Q1_0 training run
    [ "$QUICK" = 1 ] && LIMIT[tests]=50
fi
[ "$SANITIZE" = 1 ] && [ "$EMU" = 0 ] || LIMIT[sanitize]=0
[ "$PROFILE" = 1 ] && [ "$EMU" = 0 ] || LIMIT[profile]=0
[ "$PEER_ON" = 1 ] || LIMIT[peer]=0
N_TYPES=$(echo $TYPES | wc -w)
# the plan: the verdict steps (in order), then the rest
PLAN_CORE=$((LIMIT[env] + LIMIT[deps] + LIMIT[setup] + LIMIT[build] + LIMIT[copybw] + N_TYPES * (LIMIT[model] + LIMIT[bench])
    + LIMIT[model] + LIMIT[train] + LIMIT[train-long] + LIMIT[build-rest] + LIMIT[tests] + LIMIT[tests-pdl]
    + LIMIT[sanitize]))
PLAN_REST=$((LIMIT[dspark] * 7 / 4 + LIMIT[draft] + 4 * LIMIT[launch] + N_TYPES * (LIMIT[batch] + LIMIT[mmq])
    + LIMIT[serve] + LIMIT[mm] + LIMIT[model] / 2 + LIMIT[cpuref] * (LIMIT[peer] > 0 ? 2 : 1)
    + LIMIT[longpp] * (LIMIT[peer] > 0 ? 4 : 3) + N_TYPES * LIMIT[peer] + LIMIT[profile] * 3 / 2))

declare -A ST SECS LIM # step status (OK / FAIL / TIMEOUT / SKIP), seconds and the limit it was given
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
    LIM[$name]=$limit
    if [ "$limit" -le 0 ]; then
        ST[$name]=SKIP SECS[$name]=0
        say "== [$(elapsed) s] $name: skipped in this mode"
        return 0
    fi
    if [ "$BUDGET" -gt 0 ]; then # the whole run must end (tables printed) within BUDGET seconds
        local left=$((BUDGET - $(elapsed) - 20))
        if [ "$left" -le 0 ] || [ $((4 * left)) -lt "$limit" ]; then # nothing left, or under a quarter of the limit
            ST[$name]=SKIP SECS[$name]=0
            say "== [$(elapsed) s] $name: skipped (the ${BUDGET} s budget is spent: $((left > 0 ? left : 0)) s left," \
                "under a quarter of its ${limit} s limit)"
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
skip_step() { ORDER+=("$1"); ST[$1]=SKIP; SECS[$1]=0; LIM[$1]=0; say "== [$(elapsed) s] $1: skipped ($2)"; }
# field F of the I-th result (1-based) of a bonsai-bench JSON log (the step's output)
jfield() { grep -o "\"$2\": [0-9.]*" "$1" 2>/dev/null | sed -n "$3p" | awk '{print $2}'; }
# cell STEP: "" when the step passed, else its status (what a dependent cell shows)
cell() { [ "${ST[$1]:-SKIP}" = OK ] && echo "" || echo "${ST[$1]:-SKIP}"; }
# graph_nodes LOG: the node count of the first one-token logits graph the run captured (the kernels of a decode step)
graph_nodes() { grep -m1 -o "captured a logits graph of 1 token(s): [0-9]* nodes" "$1" 2>/dev/null | awk '{print $(NF - 1)}'; }
# mk TYPE L: bonsai-mkmodel's LAYERS-layer PRESET file of TYPE (Q1_0, Q2_0, F16) at $W/l<L>-<TYPE>.gguf
mk() { "$B/tools/bonsai-mkmodel" "$W/l$2-$1.gguf" --preset "$PRESET" --n-layer "$2" --type "${1,,}" --no-progress; }
# model_step TYPE L LIMIT: the step model-TYPE-L writing that file (skipped when the tool is missing)
model_step() {
    if [ -x "$B/tools/bonsai-mkmodel" ]; then run_step "model-$1-$2" "$3" bash -c 'mk "$1" "$2"' mk "$1" "$2"
    else skip_step "model-$1-$2" "bonsai-mkmodel not built"; fi
}
export -f mk
export B W PRESET

# ---- the verdict rows: appended to check-table.md as they are measured -------------------------------------------
# VROWS: "SECTION|row" in the order measured; a section's heading (section_SECTION) is written before its first row.
# The sections come in run order (build, decode, train, tests, dspark), so the file grows by appending only.
VROWS=()
LAST_SECTION=""
# add_row SECTION ROW: appends ROW under SECTION's heading in check-table.md and prints the table so far
add_row() {
    VROWS+=("$1|$2")
    if [ "$1" != "$LAST_SECTION" ]; then LAST_SECTION=$1; "section_$1" >>"$TABLE"; fi
    echo "$2" >>"$TABLE"
    echo "-- the table so far ($TABLE):"
    sed 's/^/   /' "$TABLE"
}
# verdict_rows SECTION: SECTION's heading and rows (the final report)
verdict_rows() {
    local r printed=0
    for r in ${VROWS[@]+"${VROWS[@]}"}; do
        [ "${r%%|*}" = "$1" ] || continue
        [ "$printed" = 0 ] && "section_$1" && printed=1
        echo "${r#*|}"
    done
}
# verdict_count: "N PASS, N FAIL, N SKIP" over the verdict rows (the last cell of each)
verdict_count() {
    local r p=0 f=0 s=0 v
    for r in ${VROWS[@]+"${VROWS[@]}"}; do
        v=$(echo "$r" | awk -F'|' '{ v = $(NF - 1); gsub(/ /, "", v); print v }')
        case $v in PASS) p=$((p + 1)) ;; FAIL) f=$((f + 1)) ;; *) s=$((s + 1)) ;; esac
    done
    echo "$p PASS, $f FAIL, $s SKIP"
}
# verdict_of STATUS: the verdict of a row whose step did not pass (SKIP stays SKIP, FAIL / TIMEOUT are FAIL)
verdict_of() { [ "$1" = SKIP ] && echo SKIP || echo FAIL; }
table_head() {
    echo "## CUDA check — $(date -u +%Y-%m-%dT%H:%MZ) — $DEVICE"
    echo
    echo "Mode $MODE, build dir $B, budget ${BUDGET} s (0: none). Verdict rows first, in the order measured; the"
    echo "diagnostics and the step table follow at the end of a finished run."
}
section_build() {
    echo
    echo "### Build"
    echo
    echo "| what | result | target | verdict |"
    echo "| ---- | ------ | ------ | ------- |"
}
section_decode() {
    echo
    echo "### Decode and prefill: $PRESET shape, $LFULL layers measured, bonsai-bench -ngl 99"
    echo
    echo "bonsai-mkmodel --preset $PRESET --n-layer $LFULL --type q1_0 / q2_0: random weights quantized as written,"
    echo "every 2-D weight (embedding and head too) in the type. pp$PP / tg$TG, $REPS repetitions. Kernels / token:"
    echo "the nodes of the captured one-token decode graph. Decode GB/s = weight bytes read per token (all but"
    echo "token_embd) × tg tok/s, against the copy bandwidth ${COPY_GBS:+$COPY_GBS GB/s (read + write)}${COPY_GBS:-(not measured)}. Verdict:"
    echo "Q1_0 PASS at tg$TG >= $TARGET_TG tok/s; the other types PASS when the run gave its numbers."
    echo
    echo "| type | layers | size MiB | pp$PP t/s | tg$TG t/s | kernels / token | decode GB/s | % of copy BW | target | verdict |"
    echo "| ---- | -----: | -------: | --------: | --------: | --------------: | ----------: | -----------: | ------ | ------- |"
}
section_train() {
    echo
    echo "### FTPO training step: bench_train --ngl 99, LoRA r 32 (q,k,v,o,gate,up,down), $TRAIN_T tokens"
    echo
    echo "One forward + backward after a warm-up, gradients taken to the host; FLOPs = 6·N_mm·tokens (N_mm: the"
    echo "projection weights). How the products run, as bench_train says: $(grep -h -m1 '^device:' "$W"/train-*.log \
        2>/dev/null | head -n 1 | sed 's/^device: //' | grep . || echo "(no run said)")."
    echo "Device MB: the whole device in use (total − free), the larger of the samples after the forward and"
    echo "after the backward. MFU: of ${TRAIN_PEAK:-no known} TFLOP/s, the bf16 dense tensor-core peak (H200 / H100"
    echo "SXM: 989), whatever precision the products run in. The Q1_0 base is measured with all $LFULL layers"
    echo "(verdict: device memory < $((TARGET_MEM_MB / 1000)) GB); the F16 base with $TRAIN_F16_L (a 64-layer F16 file is 54 GB; MFU does"
    echo "not depend on the layer count, the head being outside the FLOP count; verdict: MFU >= $TARGET_MFU %)."
    echo
    echo "| base | layers | tokens | step ms | tokens/s | device MB in use | TFLOP/s | MFU | target | verdict |"
    echo "| ---- | -----: | -----: | ------: | -------: | ---------------: | ------: | --: | ------ | ------- |"
}
section_tests() {
    echo
    echo "### GPU tests"
    echo
    echo "| what | result | target | verdict |"
    echo "| ---- | ------ | ------ | ------- |"
}
section_dspark() {
    echo
    echo "### DSpark on CUDA: $DS_PRESET-shape drafter (Q4_1, block $DS_B) over the $DS_L-layer Q1_0 target"
    echo
    echo "$DS_N greedy tokens (bonsai-speculative -ngl 99). replay = forced acceptance (MEASUREMENT AID: the real"
    echo "drafter runs every round, the recorded greedy tokens are proposed). The trained drafter: the shipped 1-bit"
    echo "model (data/), $DS_SHIP_N tokens, block 4. Verdict: PASS when the run gave its numbers."
    echo
    echo "| run | tok/s | tokens / target pass | draft ms/round | verify ms/step | target | verdict |"
    echo "| --- | ----: | -------------------: | -------------: | -------------: | ------ | ------- |"
}

MODE=$([ $EMU = 1 ] && echo emu || echo gpu)$([ $QUICK = 1 ] && echo ' quick')$([ $TINY = 1 ] && echo ' tiny')
say "cuda/check.sh $(date -u +%Y-%m-%dT%H:%MZ): mode $MODE, build dir $B, budget ${BUDGET} s, plan: verdict steps" \
    "${PLAN_CORE} s, the rest ${PLAN_REST} s (limits: $(for k in env deps setup build model copybw bench train train-long \
    build-rest tests tests-pdl sanitize dspark draft launch batch serve mm mmq peer cpuref longpp profile; do
    printf '%s %s, ' "$k" "${LIMIT[$k]}"; done | sed 's/, $//'); per run where a step runs several)"

# ---- env, deps, setup, build (GPU only) -----------------------------------------------------------------------
env_info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv || true
    nvcc --version | tail -2 || true
    echo "CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-<unset: lazy>}; $(nproc) CPUs; $(uname -r); $(df -h "$W" | tail -1)"
}
# gpu_tests WHAT: the GPU tests of the cuda suite (programs of this build not named *_emu), from meson introspect
# (its JSON is the same in every meson version; `meson test --list` is not): WHAT=names prints the test names,
# WHAT=targets the ninja targets they need.
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
# build_row: the build's verdict row
build_row() {
    local c
    c=$(cell build)
    add_row build "| build for sm_90 (${1}) | ${c:-OK} in ${SECS[build]} s | builds | $([ -z "$c" ] && echo PASS ||
        verdict_of "$c") |"
}
if [ "$EMU" = 1 ]; then
    BENCH="$B/tests/cuda/bonsai-bench-emu"
    DRAFT_BENCH=("$B/tests/cuda/bench-draft-emu" -s 1,2 -r 1)
    TRAIN_BENCH=(env BONSAI_EMU_PROTECT=0 "$B/tests/cuda/bench-train-emu") TRAIN_T=64 # memory protection off: 4x faster
    COPYBW=("$B/tests/cuda/cuda_copy_bw_emu" 16)
    for f in "$BENCH" "${COPYBW[0]}" "$B/tools/bonsai-mkmodel"; do
        [ -x "$f" ] || { echo "check.sh --emu: $f missing (build $B first)"; exit 1; }
    done
    DEVICE="CPU emulator"
    : >"$TABLE"
    table_head >>"$TABLE"
    for s in env deps setup build; do skip_step "$s" "--emu"; done
    add_row build "| build for sm_90 | not built (--emu: the emulator build $B) | builds | SKIP |"
else
    BENCH="$B/tools/bonsai-bench"
    DRAFT_BENCH=("$B/bench/bench_draft" -s 1,2,4,8 -r 7)
    TRAIN_BENCH=("$B/bench/bench_train") TRAIN_T=4096
    COPYBW=("$B/tests/cuda/cuda_copy_bw" 1024)
    run_step env "${LIMIT[env]}" bash -c "$(declare -f env_info); W=$W env_info"
    cat "$W/env.log"
    DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "unknown GPU")
    : >"$TABLE"
    table_head >>"$TABLE"
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
    CORE_TARGETS="tools/bonsai-mkmodel tools/bonsai-bench bench/bench_train tests/cuda/cuda_copy_bw"
    # shellcheck disable=SC2086
    run_step build "${LIMIT[build]}" ninja -C "$B" -j"$NPROC" $CORE_TARGETS
    build_row "$(echo $CORE_TARGETS | wc -w) programs"
fi

# ---- the decode rows: LFULL-layer Q1_0 and Q2_0, written and measured ----------------------------------------
COPY_GBS=""
# decode_row TYPE: the verdict row of bench-TYPE
decode_row() {
    local q=$1 f="$W/bench-$1.log" bpw
    bpw=$([ "$q" = Q1_0 ] && echo 1.125 || echo 2.25)
    awk -v q="$q" -v L="$LFULL" -v PP="$PP" -v TG="$TG" -v V="$V" -v H="$H" -v bpw="$bpw" -v copy="$COPY_GBS" \
        -v c="$(cell "bench-$q")" -v s="$(jfield "$f" model_size 1)" -v p="$(jfield "$f" avg_ns 1)" \
        -v g="$(jfield "$f" avg_ns 2)" -v k="$(graph_nodes "$f")" -v tgt="$TARGET_TG" 'BEGIN {
        target = q == "Q1_0" ? sprintf("tg%d >= %d tok/s", TG, tgt) : "ran and measured"
        if (c == "" && (s == "" || p == "" || g == "")) c = "FAIL"
        if (c != "") {
            printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", q, L, c, c, c, c, c, c, target,
                   c == "SKIP" ? "SKIP" : "FAIL")
            exit
        }
        pp = PP * 1e9 / p; tg = TG * 1e9 / g; gbs = (s - V * H * bpw / 8) * tg / 1e9
        pct = copy > 0 ? sprintf("%.1f %%", 100 * gbs / copy) : "n/a"
        ok = q == "Q1_0" ? tg >= tgt : 1
        printf("| %s | %d | %.1f | %.1f | %.1f | %s | %.1f | %s | %s | %s |\n", q, L, s / 1048576, pp, tg,
               k == "" ? "n/a" : k, gbs, pct, target, ok ? "PASS" : "FAIL")
    }'
}
for q in $TYPES; do
    model_step "$q" "$LFULL" "${LIMIT[model]}"
    if [ -z "${ST[copybw]:-}" ]; then # once, before the first bench
        if [ -x "${COPYBW[0]}" ]; then
            run_step copybw "${LIMIT[copybw]}" "${COPYBW[@]}" && COPY_GBS=$(tail -n 1 "$W/copybw.log")
            say "copy bandwidth: ${COPY_GBS:-${ST[copybw]}} GB/s (read + write)"
        else
            skip_step copybw "${COPYBW[0]} not built"
        fi
    fi
    if [ ! -f "$W/l$LFULL-$q.gguf" ]; then
        skip_step "bench-$q" "no model"
    elif [ ! -x "$BENCH" ]; then
        skip_step "bench-$q" "$BENCH not built"
    else
        run_step "bench-$q" "${LIMIT[bench]}" env BONSAI_CUDA_GRAPH_LOG=1 "$BENCH" -m "$W/l$LFULL-$q.gguf" -ngl 99 \
            -p "$PP" -n "$TG" -r "$REPS" -o json
    fi
    add_row decode "$(decode_row "$q")"
done

# ---- the training rows: bench_train --ngl 99 ------------------------------------------------------------------
# MFU of the bf16 dense tensor-core peak, known here by the GPU's name (H200, H100 SXM: 989 TFLOP/s;
# BONSAI_CHECK_PEAK_TFLOPS sets it), else left out (and the F16 row's target cannot pass)
TRAIN_PEAK=""
case "$DEVICE" in *H200* | *H100*HBM3*) TRAIN_PEAK=989 ;; esac
TRAIN_PEAK=${BONSAI_CHECK_PEAK_TFLOPS:-$TRAIN_PEAK}
# ==== the train step's bench_train call: every training row runs through here ====================================
# train_run STEP LIMIT FILE: one forward + backward of TRAIN_T tokens after a warm-up on FILE, on the device
train_run() {
    run_step "$1" "$2" "${TRAIN_BENCH[@]}" -m "$3" --ngl 99 --tokens "$TRAIN_T" --reps 1 --profile \
        ${TRAIN_PEAK:+--peak-tflops "$TRAIN_PEAK"}
}
# ==== end of the bench_train call =================================================================================
# trow STEP N: the N-th |-separated cell (2: model, 5: ms, 6: tok/s, 7: device MB, 8: TFLOP/s, 9: MFU) of the
# bench_train row in STEP's log
trow() { awk -F'|' -v n="$2" '/^\| l[0-9]+-/ { gsub(/^ +| +$/, "", $n); print $n; exit }' "$W/$1.log" 2>/dev/null; }
# train_row BASE L: the verdict row of train-BASE-L (Q1_0: device memory < 12 GB; F16: MFU >= 35 %)
train_row() {
    local q=$1 L=$2 s="train-$1-$2"
    awk -v q="$q" -v L="$L" -v T="$TRAIN_T" -v c="$(cell "$s")" -v ms="$(trow "$s" 5)" -v mb="$(trow "$s" 7)" \
        -v tf="$(trow "$s" 8)" -v mfu="$(trow "$s" 9)" -v peak="$TRAIN_PEAK" -v mem_max="$TARGET_MEM_MB" \
        -v mfu_min="$TARGET_MFU" 'BEGIN {
        if (q == "F16") target = sprintf("MFU >= %d %% of %s", mfu_min, peak != "" ? peak " TFLOP/s" : "a peak (none known)")
        else target = sprintf("device memory < %d GB", mem_max / 1000)
        if (c == "" && (ms == "" || mb == "" || tf == "")) c = "FAIL"
        if (c != "") {
            printf("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", q, L, T, c, c, c, c, c, target,
                   c == "SKIP" ? "SKIP" : "FAIL")
            exit
        }
        ok = q == "F16" ? mfu != "-" && mfu + 0 >= mfu_min : mb + 0 < mem_max
        printf("| %s | %d | %d | %.1f | %.0f | %.0f | %s | %s | %s | %s |\n", q, L, T, ms, T * 1000 / ms, mb, tf, mfu,
               target, ok ? "PASS" : "FAIL")
    }'
}
model_step F16 "$TRAIN_F16_L" $((LIMIT[model] * 2 / 3))
for run in "F16-$TRAIN_F16_L" "Q1_0-$LFULL"; do
    f="$W/l${run##*-}-${run%-*}.gguf" lim=$([ "$run" = "Q1_0-$LFULL" ] && echo "${LIMIT[train-long]}" || echo "${LIMIT[train]}")
    if [ ! -f "$f" ]; then
        skip_step "train-$run" "no model"
    elif [ ! -x "${TRAIN_BENCH[-1]}" ]; then
        skip_step "train-$run" "${TRAIN_BENCH[-1]} not built"
    else
        train_run "train-$run" "$lim" "$f"
    fi
    add_row train "$(train_row "${run%-*}" "${run##*-}")"
done
rm -f "$W/l$TRAIN_F16_L-F16.gguf" # 7.7 GB at 27B

# ---- the GPU tests (GPU only) ---------------------------------------------------------------------------------
# test_rows: the verdict rows of tests, tests-pdl and sanitize
test_row() { # test_row STEP WHAT: "N of M passed (the others: name and result)" from the meson log of STEP
    local c res
    c=$(cell "$1")
    res=$(grep -E "^ *[0-9]+/[0-9]+ " "$W/$1.log" 2>/dev/null | awk '
        { n++; if ($5 == "OK") ok++; else bad = bad (bad == "" ? "" : ", ") $4 " " $5 }
        END { if (n) printf("%d of %d passed%s", ok, n, bad == "" ? "" : " (" bad ")") }')
    if [ -z "$res" ]; then res=${c:-no results}
    elif [ -n "$c" ]; then res="$res; step $c"; fi
    add_row tests "| $2 | $res | all pass | $([ -z "$c" ] && echo PASS || verdict_of "$c") |"
}
TESTS="not run"
if [ "$EMU" = 1 ]; then
    for s in build-rest tests tests-pdl sanitize; do skip_step "$s" "--emu"; done
    TESTS="not run (--emu)"
    add_row tests "| GPU tests | not run (--emu) | all pass | SKIP |"
else
    GPU_TARGETS=$(gpu_tests targets 2>/dev/null | tr '\n' ' ')
    REST="tools/bonsai-serve tools/bonsai-mkdrafter tools/bonsai-speculative tests/cuda/bench_cuda_mm bench/bench_draft"
    # shellcheck disable=SC2086
    run_step build-rest "${LIMIT[build-rest]}" ninja -C "$B" -j"$NPROC" $GPU_TARGETS $REST
    mapfile -t GPU_TESTS < <(gpu_tests names 2>/dev/null)
    [ "$QUICK" = 1 ] && mapfile -t GPU_TESTS < <(printf '%s\n' "${GPU_TESTS[@]}" | grep -xE 'emu_runtime|cuda_mm|cuda_forward')
    if [ "${#GPU_TESTS[@]}" = 0 ]; then
        skip_step tests "no GPU tests found (was $B configured with -Dcuda=enabled?)"
        TESTS="none found"
    else
        # meson's own per-test timeouts (x0.4: cuda_forward 120 s) stop a hung test inside the step's limit
        # (PYTHONUNBUFFERED: meson's per-test lines survive the step's own limit)
        PYTHONUNBUFFERED=1 run_step tests "${LIMIT[tests]}" meson test -C "$B" --no-rebuild --print-errorlogs \
            --num-processes 4 --timeout-multiplier 0.4 "${GPU_TESTS[@]}"
        cp "$B/meson-logs/testlog.txt" "$RES/tests.log" 2>/dev/null || true
        grep -E "^ *[0-9]+/[0-9]+ " "$W/tests.log" || true
        TESTS=$(grep -E "^ *[0-9]+/[0-9]+ " "$W/tests.log" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $4, $5}')
        [ -z "$TESTS" ] && TESTS="${ST[tests]} (no results; see tests.log)"
    fi
    test_row tests "GPU tests (the cuda suite's GPU programs)"
    # the same kernels launched with the PDL attribute: logits and 64-step greedy identity against the CPU,
    # graphs, DSpark taps through graphs, the CPU+CUDA engine
    mapfile -t PDL_TESTS < <(printf '%s\n' ${GPU_TESTS[@]+"${GPU_TESTS[@]}"} | grep -xE 'cuda_forward|cuda_dspark_graph|cuda_split')
    if [ "${#PDL_TESTS[@]}" = 0 ]; then
        skip_step tests-pdl "none of cuda_forward, cuda_dspark_graph, cuda_split in this plan"
    else
        PYTHONUNBUFFERED=1 run_step tests-pdl "${LIMIT[tests-pdl]}" env BONSAI_CUDA_PDL=1 meson test -C "$B" \
            --no-rebuild --print-errorlogs --num-processes 3 --timeout-multiplier 0.4 "${PDL_TESTS[@]}"
        cp "$B/meson-logs/testlog.txt" "$RES/tests-pdl.log" 2>/dev/null || true
        TESTS+="; with BONSAI_CUDA_PDL=1: $(grep -E "^ *[0-9]+/[0-9]+ " "$W/tests-pdl.log" |
            awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $4, $5}')"
    fi
    test_row tests-pdl "the same with BONSAI_CUDA_PDL=1 (cuda_forward, cuda_dspark_graph, cuda_split)"
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
    if [ "${LIMIT[sanitize]}" -le 0 ]; then
        skip_step sanitize "not in this plan (--sanitize)"
    elif command -v compute-sanitizer >/dev/null; then
        run_step sanitize "${LIMIT[sanitize]}" bash -c "$(declare -f sanitize); B=$B sanitize"
        add_row tests "| compute-sanitizer memcheck + racecheck | ${ST[sanitize]} | no errors | $([ "${ST[sanitize]}" = OK ] &&
            echo PASS || verdict_of "${ST[sanitize]}") |"
    else
        skip_step sanitize "no compute-sanitizer"
    fi
fi

# ==== DSpark (cudadraft) ==============================================================================
# A $DS_PRESET-shape drafter (bonsai-mkdrafter: 27b = the Bonsai-27B drafter's shapes; Q4_1 matrices like
# the real file; --shared: token_embd/output borrowed from the target, as a converted
# --drop-shared-tensors file; block 16) over the DS_L-layer Q1_0 target, through bonsai-speculative -ngl 99
# --temp 0 (drafter on the device): "draft-replay" decodes natively first (the native row) and then replays that
# greedy run with the drafter's full work every round (forced acceptance, MEASUREMENT AID); "draft-dspark" runs the
# random drafter with the adaptive cost model.
DS_B=16 DS_PROMPT="Write a function that sorts a list of numbers"
if [ "$EMU" = 1 ]; then # emulator: small, on the LSMALL-layer file
    DS_SPEC="$B/tests/cuda/bonsai-speculative-emu" DS_PRESET=tiny DS_N=8 DS_TAPS=1,3 DS_B=4 DS_L=$LSMALL
else
    DS_SPEC="$B/tools/bonsai-speculative" DS_PRESET=27b DS_N=128 DS_TAPS=1,2,3,5,7 DS_L=$LFULL
    [ "$TINY" = 1 ] && DS_PRESET=tiny DS_N=32 DS_TAPS=1,3
fi
DS_SHIP_N=$([ "$EMU" = 1 ] && echo 16 || echo 256)
# the small file (cpuref, long prompts, profiles; the emulator's DSpark and serve target), written when first wanted
small_model() {
    [ -f "$W/l$LSMALL-Q1_0.gguf" ] || [ -n "${ST[model-Q1_0-$LSMALL]:-}" ] || model_step Q1_0 "$LSMALL" $((LIMIT[model] / 2))
    [ -f "$W/l$LSMALL-Q1_0.gguf" ]
}
[ "$DS_L" = "$LSMALL" ] && small_model
dspark_gen() { # builds the two tools if the build steps did not, then writes $W/drafter.gguf
    [ -x "$B/tools/bonsai-mkdrafter" ] && [ -x "$DS_SPEC" ] || ninja -C "$B" tools/bonsai-mkdrafter "${DS_SPEC#$B/}" || return 1
    "$B/tools/bonsai-mkdrafter" "$W/drafter.gguf" --preset "$DS_PRESET" --shared --type q4_1 --block-size "$DS_B" \
        --target-layers "$DS_TAPS"
}
export -f dspark_gen
export DS_SPEC DS_PRESET DS_B DS_TAPS
DS_T=${LIMIT[dspark]} # dspark-gen half of it (with building the tools), native + replay and adaptive a quarter each
if [ ! -f "$W/l$DS_L-Q1_0.gguf" ]; then
    for s in dspark-gen dspark-replay dspark-adaptive; do skip_step "$s" "no $DS_L-layer Q1_0 model"; done
else
    run_step dspark-gen $(( DS_T / 2 )) bash -c dspark_gen
    for run in replay adaptive; do
        if [ "${ST[dspark-gen]}" != OK ]; then skip_step "dspark-$run" "no drafter"; continue; fi
        [ "$run" = replay ] && args=(--spec-type draft-replay --no-adaptive) || args=(--spec-type draft-dspark)
        run_step "dspark-$run" $(( DS_T / 4 )) "$DS_SPEC" -m "$W/l$DS_L-Q1_0.gguf" -md "$W/drafter.gguf" -ngl 99 \
            --temp 0 -n "$DS_N" -c 1024 --spec-draft-n-max "$DS_B" -p "$DS_PROMPT" "${args[@]}"
    done
fi
# dsf LOG PATTERN FIELD: the FIELD-th whitespace field (commas dropped) of LOG's first line matching PATTERN
dsf() { grep -m1 -E "$2" "$1" 2>/dev/null | awk -v f="$3" '{ gsub(/,/, ""); print $f }'; }
# dspark_row RUN: the verdict row of one DSpark run (native: the replay step's native decode)
dspark_row() {
    local R="$W/dspark-replay.log" A="$W/dspark-adaptive.log"
    case $1 in
    native) awk -v c="$(cell dspark-replay)" -v nat="$(dsf "$R" '^native' 12)" 'BEGIN {
        if (c == "" && nat == "") c = "FAIL"
        if (c != "") { printf("| native tg | %s | %s | - | %s | ran and measured | %s |\n", c, c, c, c == "SKIP" ? "SKIP" : "FAIL"); exit }
        printf("| native tg | %.1f | 1.00 | - | %.2f | ran and measured | PASS |\n", nat, 1000 / nat) }' ;;
    replay | adaptive)
        local f=$([ "$1" = replay ] && echo "$R" || echo "$A")
        awk -v name="$([ "$1" = replay ] && echo "DSpark replay (forced acceptance, B=$DS_B)" ||
            echo "DSpark random drafter (adaptive)")" -v c="$(cell "dspark-$1")" -v s="$(dsf "$f" '^decoded' 8)" \
            -v tp="$(dsf "$f" 'tokens per target pass' 12)" -v d="$(dsf "$f" 'draft ms/round' 8)" \
            -v v="$(dsf "$f" 'draft ms/round' 16)" 'BEGIN {
            if (c == "" && (s == "" || tp == "" || v == "")) c = "FAIL"
            if (c != "") { printf("| %s | %s | %s | %s | %s | ran and measured | %s |\n", name, c, c, c, c, c == "SKIP" ? "SKIP" : "FAIL"); exit }
            printf("| %s | %.1f | %.2f | %.2f | %.2f | ran and measured | PASS |\n", name, s, tp, d, v) }' ;;
    shipped)
        local S="$W/dspark-shipped.log"
        awk -v c="$(cell dspark-shipped)" -v p="$(dsf "$S" '^plain\| decoded' 9)" -v d="$(dsf "$S" '^dspark\| decoded' 9)" \
            -v tp="$(dsf "$S" '^dspark\| spec: mean acc len' 13)" 'BEGIN {
            name = "DSpark, trained drafter (shipped 1-bit model)"
            if (c == "" && (p == "" || d == "" || tp == "")) c = "FAIL"
            if (c != "") { printf("| %s | %s | %s | - | - | ran and measured | %s |\n", name, c, c, c == "SKIP" ? "SKIP" : "FAIL"); exit }
            printf("| %s | %.1f (plain %.1f) | %.2f | - | - | ran and measured | PASS |\n", name, d, p, tp) }' ;;
    esac
}
for r in native replay adaptive; do add_row dspark "$(dspark_row "$r")"; done
# the shipped 1-bit model with its trained drafter (data/, docs/dspark.md §11.4), both on the device: plain greedy, then
# DSpark (block 4, always drafting 4), one held-out prompt in the model's ChatML. The 27B-shape rows above have random
# weights, so no drafter can be trained for them; this row is the trained drafter's acceptance and speed on a GPU.
dspark_shipped() {
    local a=(-m data/bonsai-loop-1bit.gguf -md data/bonsai-loop-1bit-drafter.gguf -ngl 99 --temp 0 -n "$DS_SHIP_N"
        -c 1024 --spec-draft-n-max 4 --no-spec-adaptive -e -p '<|im_start|>user\nQ: How much does<|im_end|>\n<|im_start|>assistant\n')
    "$DS_SPEC" "${a[@]}" --spec-type none 2>&1 | sed 's/^/plain| /' && "$DS_SPEC" "${a[@]}" --spec-type draft-dspark 2>&1 |
        sed 's/^/dspark| /'
}
export -f dspark_shipped
export DS_SHIP_N
if [ -x "$DS_SPEC" ]; then
    run_step dspark-shipped $(( LIMIT[dspark] / 4 )) bash -o pipefail -c dspark_shipped
else
    skip_step dspark-shipped "$DS_SPEC not built"
fi
add_row dspark "$(dspark_row shipped)"
# the drafter alone for 1-8 slots: one drafter pass per slot (serial; all started together) vs one batched pass
if [ "${ST[dspark-gen]:-SKIP}" != OK ]; then
    skip_step dspark-draft "no drafter"
else
    run_step dspark-draft "${LIMIT[draft]}" "${DRAFT_BENCH[@]}" -m "$W/l$DS_L-Q1_0.gguf" -md "$W/drafter.gguf" -ngl 99 \
        -k "$DS_B"
fi
# ==== end of DSpark ===================================================================================

# ---- the diagnostics, as the budget allows -------------------------------------------------------------
# launch cost: tg on the LFULL-layer Q1_0 file with the Q8-producer fusion off (BONSAI_CUDA_FUSE=0: a quantize launch
# per matmul group more), with the GDN recurrence and its output norm in one launch (BONSAI_CUDA_GDN_NORM=1, opt-in: one
# launch fewer per GDN layer), with programmatic dependent launch (BONSAI_CUDA_PDL=1, opt-in: each kernel's blocks may
# be placed while the one before it drains; the same launches), and both opt-ins; each run's kernels per token read
# from its captured graph, so the differences price a launch inside the decode graph
for v in fuse-off gdn-norm pdl opt-ins; do
    case $v in
    fuse-off) venv=(BONSAI_CUDA_FUSE=0) ;;
    gdn-norm) venv=(BONSAI_CUDA_GDN_NORM=1) ;;
    pdl) venv=(BONSAI_CUDA_PDL=1) ;;
    *) venv=(BONSAI_CUDA_PDL=1 BONSAI_CUDA_GDN_NORM=1) ;;
    esac
    if [ ! -f "$W/l$LFULL-Q1_0.gguf" ] || [ ! -x "$BENCH" ]; then
        skip_step "$v" "no $LFULL-layer Q1_0 model or no bench"
    else
        run_step "$v" "${LIMIT[launch]}" env BONSAI_CUDA_GRAPH_LOG=1 "${venv[@]}" "$BENCH" -m "$W/l$LFULL-Q1_0.gguf" \
            -ngl 99 -p 0 -n "$TG" -r "$REPS" -o json
    fi
done
# batch-TYPE: tg with 4 sequences at once (-npl 4: bn_cuda_forward_batch) and in passes of 4 tokens of each
# (-nv 4: ragged passes, bn_cuda_forward_multi, as speculative slots' verify passes with 3 drafts always accepted).
# The JSON results in order: tg, tg v4, tg x4, tg x4 v4.
for q in $TYPES; do
    if [ ! -f "$W/l$LFULL-$q.gguf" ] || [ ! -x "$BENCH" ]; then
        skip_step "batch-$q" "no $LFULL-layer $q model or no bench"
    else
        run_step "batch-$q" "${LIMIT[batch]}" "$BENCH" -m "$W/l$LFULL-$q.gguf" -ngl 99 -p 0 -n "$TG" -npl 1,4 -nv 1,4 \
            -r "$REPS" -o json
    fi
done
# ---- serve: bonsai-serve -ngl 99 (after DSpark: its drafter serves the speculative streams) ------------------
# serve_one LABEL MODE [SERVER ARGS...]: starts the server on the SERVE_L-layer Q1_0 file (with the extra args) and
# POSTs /completion (SERVE_N tokens, ignore_eos, no prompt cache), a warm-up and then SERVE_REPS timed ones; prints
# "| mode | tok/s |" rows: MODE all: one stream per request kind (timings.predicted_per_second, the best of the timed
# ones), then 4 greedy streams at once (total tokens / wall time); MODE streams: only the 4 streams, named LABEL, with
# the server's busy slots per decode call and per batch of rounds begun together (drafting; /metrics).
# SERVE_ADAPTIVE 0 (emulator): no adaptive row (in 8 tokens the cost model never stops drafting: the same run twice).
SERVE_N=128 SERVE_REPS=2 SERVE_BIN="$B/tools/bonsai-serve" SERVE_ADAPTIVE=1 SERVE_L=$DS_L
[ "$EMU" = 1 ] && SERVE_N=8 SERVE_REPS=1 SERVE_BIN="$B/tests/cuda/bonsai-serve-emu" SERVE_ADAPTIVE=0
serve_one() {
    local label=$1 mode=$2
    shift 2
    rm -f "$W/serve.ready"
    "$SERVE_BIN" -m "$W/l$SERVE_L-Q1_0.gguf" -ngl 99 --port 0 --ready-file "$W/serve.ready" -c 1024 -t 4 -np 4 \
        --metrics "$@" >>"$W/serve.out" 2>&1 &
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
export SERVE_N SERVE_REPS SERVE_BIN SERVE_ADAPTIVE SERVE_L EMU
if [ ! -f "$W/l$SERVE_L-Q1_0.gguf" ]; then
    skip_step serve "no $SERVE_L-layer Q1_0 model"
else
    run_step serve "${LIMIT[serve]}" bash -c serve_run && cat "$W/serve.log"
fi
if [ "$EMU" = 1 ]; then
    skip_step mm "--emu"
elif [ -x "$B/tests/cuda/bench_cuda_mm" ]; then
    run_step mm "${LIMIT[mm]}" "$B/tests/cuda/bench_cuda_mm" --quick && cat "$W/mm.log"
else
    skip_step mm "bench_cuda_mm not built"
fi
# mmq-TYPE: pp on the LFULL-layer file with the prefill GEMMs on the int8 tensor cores (BONSAI_CUDA_MMQ_PREFILL=1,
# opt-in: Q8 activations and column chunks of 32, no fp16 dequantization pass) against the default's pp (bench-TYPE)
for q in $TYPES; do
    if [ ! -f "$W/l$LFULL-$q.gguf" ] || [ ! -x "$BENCH" ]; then
        skip_step "mmq-$q" "no $LFULL-layer $q model or no bench"
    else
        run_step "mmq-$q" "${LIMIT[mmq]}" env BONSAI_CUDA_MMQ_PREFILL=1 "$BENCH" -m "$W/l$LFULL-$q.gguf" -ngl 99 \
            -p "$PP" -n 0 -r "$REPS" -o json
    fi
done

# ---- the peer (--peer): llama.cpp's llama-bench ---------------------------------------------------------------
# BONSAI_PEER_BENCH=PATH, else build-peer/llama-bench.xz (scripts/build-llamacpp-cuda.sh: llama.cpp from the
# npm bundle built here for sm_90, xz-compressed to travel; the device tool's `run` carries build-peer).
# Same arguments as our bench (-ngl 99, llama.cpp's defaults otherwise); the tables get ratio columns.
PEER=${BONSAI_PEER_BENCH:-}
unxz_to() { # unxz_to SRC DST: xz -dc, or Python's lzma where the machine has no xz
    if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as f, open(sys.argv[2], "wb") as o: shutil.copyfileobj(f, o)' "$1" "$2"; fi
}
if [ -z "$PEER" ] && [ "$EMU" = 0 ] && [ "${LIMIT[peer]}" -gt 0 ] && [ -f build-peer/llama-bench.xz ]; then
    unxz_to build-peer/llama-bench.xz "$W/llama-bench" && chmod +x "$W/llama-bench" && PEER="$W/llama-bench"
    cat build-peer/llama-bench.txt 2>/dev/null | tee -a "$RES/check.log" || true
fi
PEER_NAME=$(head -n 1 build-peer/llama-bench.txt 2>/dev/null)
[ -n "${BONSAI_PEER_BENCH:-}" ] || [ -z "$PEER_NAME" ] && PEER_NAME=${PEER:+$(basename "$PEER")}
PEER_WHY=$([ "$PEER_ON" = 1 ] && echo "no peer llama-bench (build-peer/llama-bench.xz)" || echo "not in this plan (--peer)")
# build-peer/lib: a fallback libgomp (llama.cpp's CPU backend links it) where the image has none
PEER_ENV=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build-peer/lib")
for q in $TYPES; do
    if [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
        skip_step "peer-$q" "$PEER_WHY"
    elif [ ! -f "$W/l$LFULL-$q.gguf" ]; then
        skip_step "peer-$q" "no model"
    else
        run_step "peer-$q" "${LIMIT[peer]}" "${PEER_ENV[@]}" "$PEER" -m "$W/l$LFULL-$q.gguf" -ngl 99 -p "$PP" -n "$TG" \
            -r "$REPS" -o json
    fi
done

# ---- cpuref: the CPU engines on the LSMALL-layer Q1_0 file, for reference ----------------------------------
# Ours (-ngl 0: the CPU engine, its AVX2 / AVX-512 kernels picked at run time) and the peer's CPU backend
# (-ngl 0 with CUDA_VISIBLE_DEVICES= so that no op is offloaded; scripts/build-llamacpp-cuda.sh builds its CPU
# code for AVX2 / FMA / F16C, not for this machine's CPU). pp64 / tg16, one repetition, every core.
CPU_PP=64 CPU_TG=16
if ! small_model; then
    skip_step cpuref-ours "no $LSMALL-layer Q1_0 model"
else
    run_step cpuref-ours "${LIMIT[cpuref]}" "$BENCH" -m "$W/l$LSMALL-Q1_0.gguf" -ngl 0 -t "$NPROC" -p "$CPU_PP" \
        -n "$CPU_TG" -r 1 -o json
fi
if [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
    skip_step cpuref-peer "$PEER_WHY"
elif [ ! -f "$W/l$LSMALL-Q1_0.gguf" ]; then
    skip_step cpuref-peer "no model"
else
    run_step cpuref-peer "${LIMIT[cpuref]}" env CUDA_VISIBLE_DEVICES= "${PEER_ENV[@]}" \
        "$PEER" -m "$W/l$LSMALL-Q1_0.gguf" -ngl 0 -t "$NPROC" -p "$CPU_PP" -n "$CPU_TG" -r 1 -o json
fi

# ---- longpp: long prompts, ours and the peer's ---------------------------------------------------------
# Prefill at LONG_PP tokens: the attention part grows with the square of the prompt, the rest linearly, so this
# shows how the prefill attention scales against llama.cpp's: ours with the per-token kernel (the default), ours
# with query tiles (BONSAI_CUDA_ATTN_TILED=1, attn_tiled_kernel: notes/cuda.md), the same tiles on the fp16 tensor
# cores (BONSAI_CUDA_ATTN_TILED=mma, attn_mma_kernel), then the peer.
for who in ours tiled mma peer; do
    case $who in ours) amode=0 ;; tiled) amode=1 ;; *) amode=mma ;; esac
    if [ ! -f "$W/l$LSMALL-Q1_0.gguf" ]; then
        skip_step "longpp-$who" "no $LSMALL-layer Q1_0 model"
    elif [ "$who" != peer ]; then
        run_step "longpp-$who" "${LIMIT[longpp]}" env "BONSAI_CUDA_ATTN_TILED=$amode" \
            "$BENCH" -m "$W/l$LSMALL-Q1_0.gguf" -ngl 99 -p "$LONG_PP" -n 0 -r 1 -o json
    elif [ -z "$PEER" ] || [ "${LIMIT[peer]}" -le 0 ]; then
        skip_step longpp-peer "$PEER_WHY"
    else
        run_step longpp-peer "${LIMIT[longpp]}" "${PEER_ENV[@]}" "$PEER" -m "$W/l$LSMALL-Q1_0.gguf" -ngl 99 \
            -p "$LONG_PP" -n 0 -r 1 -o json
    fi
done

# ---- profile (--profile): ncu kernel durations of a short decode and of a prefill ------------------------
# profile_run [pp]: ncu over bonsai-bench on the LSMALL-layer Q1_0 model; the CSV goes to $W/profile[-pp].csv, then a
# table: kernel, launches, total us, us per token. Decode: tg16 + its warm-up (17 tokens); pp: one pp$PP run +
# its warm-up (2·PP tokens; the prefill kernels are launched one by one, not through a graph).
profile_run() {
    local tag="" args=(-p 0 -n 16) tokens=17
    [ "${1:-}" = pp ] && tag=-pp args=(-p "$PP" -n 0) tokens=$((2 * PP))
    ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base \
        "$BENCH" -m "$W/l$LSMALL-Q1_0.gguf" -ngl 99 "${args[@]}" -r 1 -o json >"$W/profile$tag.csv" 2>"$W/profile$tag.err" || {
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
export BENCH PP LSMALL
if [ "${LIMIT[profile]}" -le 0 ]; then
    skip_step profile "not in this plan (--profile)"
elif ! command -v ncu >/dev/null; then
    skip_step profile "no ncu"
elif [ ! -f "$W/l$LSMALL-Q1_0.gguf" ]; then
    skip_step profile "no model"
else
    run_step profile "${LIMIT[profile]}" bash -c profile_run && cat "$W/profile.log"
    run_step profile-pp $((LIMIT[profile] / 2)) bash -c "profile_run pp" && cat "$W/profile-pp.log"
fi

# ---- the diagnostics' tables ------------------------------------------------------------------------

# train_part_rows: where a training step's device time goes, from bench_train --profile's line of each training run
train_part_rows() {
    local run lines=""
    for run in "F16-$TRAIN_F16_L" "Q1_0-$LFULL"; do
        lines+=$(awk -v run="$run" -F'[|]' '/^step by part \(ms\):/ {
            printf("| %s |", run); total = 0
            for (i = 1; i <= 4; i++) {
                match($i, /[0-9]+[.][0-9]+/)
                ms[i] = substr($i, RSTART, RLENGTH) + 0
                total += ms[i]
            }
            for (i = 1; i <= 4; i++) printf(" %.1f (%.0f %%) |", ms[i], total > 0 ? 100 * ms[i] / total : 0)
            printf(" %.1f |\n", total); exit
        }' "$W/train-$run.log" 2>/dev/null)$'\n'
    done
    [ -n "${lines//$'\n'/}" ] || return 0
    echo
    echo "### FTPO training step by part (one more step with per-part timing: bench_train --profile)"
    echo
    echo "Device ms between events at each part's start and end: linears = base and LoRA products with their"
    echo "dequantization; attention = scores, softmax and their products; delta rule = the recurrence's forward and"
    echo "backward; other = norms, gates, conv, RoPE, copies and the head's norm. The events cost some time of their own."
    echo
    echo "| base-layers | linears ms | attention ms | delta rule ms | other ms | total ms |"
    echo "| ----------- | ---------: | -----------: | ------------: | -------: | -------: |"
    printf '%s' "$lines" | grep .
}

# seed_projection: the seed recipe's time projected from the Q1_0 training row's measured step (when it ran)
seed_projection() {
    local ms
    ms=$(trow "train-Q1_0-$LFULL" 5)
    [ -n "$ms" ] || return 0
    echo
    awk -v ms="$ms" -v T="$TRAIN_T" -v L="$LFULL" 'BEGIN {
        min = (480 * ms + 40 * ms / 3) / 60000
        printf("Seed recipe (40 pairs x 12 epochs), projected from the %d-layer Q1_0 step of %d tokens (%.1f ms; every\n", L, T, ms)
        printf("row that long, each reference forward once, at a third of a step by FLOPs): 480 steps + 40 forwards =\n")
        printf("%.1f min, against the < 15 min target (a projection, not a run).\n", min)
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

# peer_rows: ours against the peer llama-bench, per type, as ratios
peer_rows() {
    [ "${LIMIT[peer]}" -le 0 ] && return 0
    echo
    echo "### Against llama.cpp: the same $LFULL-layer files through ${PEER_NAME:-the peer llama-bench} (-ngl 99)"
    echo
    echo "ratio = ours / llama.cpp (above 1: ours is faster)."
    echo
    echo "| type | layers | pp$PP ours | pp$PP llama.cpp | pp ratio | tg$TG ours | tg$TG llama.cpp | tg ratio |"
    echo "| ---- | -----: | ---------: | --------------: | -------: | ---------: | --------------: | -------: |"
    local q b p
    for q in $TYPES; do
        b="$W/bench-$q.log" p="$W/peer-$q.log"
        awk -v q="$q" -v L="$LFULL" -v PP="$PP" -v TG="$TG" -v c="$(cell "bench-$q")$(cell "peer-$q")" \
            -v op="$(jfield "$b" avg_ns 1)" -v og="$(jfield "$b" avg_ns 2)" \
            -v lp="$(jfield "$p" avg_ns 1)" -v lg="$(jfield "$p" avg_ns 2)" 'BEGIN {
            if (c == "" && (op == "" || og == "" || lp == "" || lg == "")) c = "FAIL"
            if (c != "") { printf("| %s | %d | %s | %s | %s | %s | %s | %s |\n", q, L, c, c, c, c, c, c); exit }
            a = PP * 1e9 / op; b = PP * 1e9 / lp; x = TG * 1e9 / og; d = TG * 1e9 / lg
            printf("| %s | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", q, L, a, b, a / b, x, d, x / d)
        }'
    done
}

# cpuref_rows: the CPU engines (cpuref) side by side, with the ratio where the peer ran
cpuref_rows() {
    [ "${ST[cpuref-ours]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### CPU engines, for reference: $LSMALL-layer Q1_0 file, -ngl 0, $NPROC threads"
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
    echo "### Long prompts: $LSMALL-layer Q1_0 file, -ngl 99, pp of $LONG_PP tokens (one repetition)"
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

# fuse_rows: tg with the defaults (bench-Q1_0), without the Q8-producer fusion, with the GDN output norm fused, with
# programmatic dependent launch and with both opt-ins, each with the kernels per token of its captured graph; what one
# launch in the decode graph costs and what PDL saves of it
fuse_rows() {
    [ "${ST[fuse-off]:-SKIP}" = SKIP ] && [ "${ST[gdn-norm]:-SKIP}" = SKIP ] && [ "${ST[pdl]:-SKIP}" = SKIP ] &&
        [ "${ST[opt-ins]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### Launch cost: tg$TG, $LFULL-layer Q1_0 file, with fewer and more launches per token"
    echo
    echo "| run | kernels per token | tg$TG t/s | us per token |"
    echo "| --- | ----------------: | --------: | -----------: |"
    awk -v TG="$TG" -v on="$(jfield "$W/bench-Q1_0.log" avg_ns 2)" -v off="$(jfield "$W/fuse-off.log" avg_ns 1)" \
        -v gn="$(jfield "$W/gdn-norm.log" avg_ns 1)" -v con="$(cell bench-Q1_0)" -v coff="$(cell fuse-off)" \
        -v cgn="$(cell gdn-norm)" -v pdl="$(jfield "$W/pdl.log" avg_ns 1)" -v cpdl="$(cell pdl)" \
        -v both="$(jfield "$W/opt-ins.log" avg_ns 1)" -v cboth="$(cell opt-ins)" \
        -v k1="$(graph_nodes "$W/bench-Q1_0.log")" -v k2="$(graph_nodes "$W/fuse-off.log")" \
        -v k3="$(graph_nodes "$W/gdn-norm.log")" -v k4="$(graph_nodes "$W/pdl.log")" \
        -v k5="$(graph_nodes "$W/opt-ins.log")" 'BEGIN {
        if (con == "" && on == "") con = "FAIL"
        if (coff == "" && off == "") coff = "FAIL"
        if (cgn == "" && gn == "") cgn = "FAIL"
        if (cpdl == "" && pdl == "") cpdl = "FAIL"
        if (cboth == "" && both == "") cboth = "FAIL"
        split("default|Q8-producer fusion off (BONSAI_CUDA_FUSE=0)|GDN output norm fused (BONSAI_CUDA_GDN_NORM=1)|" \
              "programmatic dependent launch (BONSAI_CUDA_PDL=1)|PDL and the GDN norm fusion together", name, "|")
        C[1] = con; C[2] = coff; C[3] = cgn; C[4] = cpdl; C[5] = cboth
        T[1] = on; T[2] = off; T[3] = gn; T[4] = pdl; T[5] = both
        K[1] = k1; K[2] = k2; K[3] = k3; K[4] = k4; K[5] = k5
        for (i = 1; i <= 5; i++) {
            k = K[i] == "" ? "n/a" : K[i]
            if (C[i] != "") printf("| %s | %s | %s | %s |\n", name[i], k, C[i], C[i])
            else printf("| %s | %s | %.1f | %.1f |\n", name[i], k, TG * 1e9 / T[i], T[i] / TG / 1000)
        }
        if (con == "" && coff == "" && k1 != "" && k2 > k1)
            printf("\nPer extra launch: %.2f us (the %d quantize launches also do their small work).\n",
                   (off - on) / TG / 1000 / (k2 - k1), k2 - k1)
        if (con == "" && cpdl == "" && k1 > 0)
            printf("PDL saves %.2f us per launch (%.1f us per token of %d launches).\n", (on - pdl) / TG / 1000 / k1,
                   (on - pdl) / TG / 1000, k1)
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
    on=$(jfield "$W/bench-Q1_0.log" avg_ns 2)
    tpdl=${ST[tests-pdl]:-SKIP}
    pdl_ok=$([ "$tpdl" = OK ] && echo 1 || echo 0)
    verdict "BONSAI_CUDA_PDL=1 (tg, tests-pdl $tpdl)" "$TG" "$on" "$(jfield "$W/pdl.log" avg_ns 1)" "$pdl_ok"
    verdict "BONSAI_CUDA_GDN_NORM=1 (tg)" "$TG" "$on" "$(jfield "$W/gdn-norm.log" avg_ns 1)" 1
    verdict "both (tg)" "$TG" "$on" "$(jfield "$W/opt-ins.log" avg_ns 1)" "$pdl_ok"
    local n i=0 best who t name
    for n in ${LONG_PP//,/ }; do i=$((i + 1)); done
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
        verdict "BONSAI_CUDA_MMQ_PREFILL=1 (pp$PP, $q)" "$PP" "$(jfield "$W/bench-$q.log" avg_ns 1)" \
            "$(jfield "$W/mmq-$q.log" avg_ns 1)" "$mma_on"
    done
}

# batch_rows: tg with 4 sequences at once (-npl 4) against one sequence, and both in passes of 4 tokens of each
# sequence (-nv 4), from the batch steps (results: tg, tg v4, tg x4, tg x4 v4)
batch_rows() {
    [ "${ST[batch-Q1_0]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### Batched decode: tg$TG of 4 sequences at once (-npl 4), and in passes of 4 tokens each (-nv 4), total t/s"
    echo
    echo "| type | layers | tg$TG t/s | tg$TG x4 t/s | x4 / x1 | tg$TG v4 t/s | tg$TG x4 v4 t/s | x4 v4 / x1 |"
    echo "| ---- | -----: | --------: | -----------: | ------: | -----------: | --------------: | ---------: |"
    local q f
    for q in $TYPES; do
        f="$W/batch-$q.log"
        awk -v q="$q" -v L="$LFULL" -v TG="$TG" -v c="$(cell "batch-$q")" -v g="$(jfield "$f" avg_ns 1)" \
            -v v="$(jfield "$f" avg_ns 2)" -v b="$(jfield "$f" avg_ns 3)" -v w="$(jfield "$f" avg_ns 4)" 'BEGIN {
            if (c == "" && (g == "" || b == "" || v == "" || w == "")) c = "FAIL"
            if (c != "") { printf("| %s | %d | %s | %s | %s | %s | %s | %s |\n", q, L, c, c, c, c, c, c); exit }
            a = TG * 1e9 / g; x = 4 * TG * 1e9 / b; y = TG * 1e9 / v; z = 4 * TG * 1e9 / w
            printf("| %s | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", q, L, a, x, x / a, y, z, z / a)
        }'
    done
}

# serve_rows: the serve step's table
serve_rows() {
    [ "${ST[serve]:-SKIP}" = SKIP ] && return 0
    echo
    echo "### bonsai-serve -ngl 99 -np 4: $SERVE_L-layer Q1_0 file, $SERVE_N tokens per request (one stream, then 4)"
    echo
    if [ "${ST[serve]}" = OK ]; then grep '^|' "$W/serve.log"; else echo "serve: ${ST[serve]}"; fi
}

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

# table: the final report: the verdict rows again (whole), the diagnostics, the step table
table() {
    table_head
    for sec in build decode train tests dspark; do verdict_rows "$sec"; done
    echo
    echo "Verdict: $(verdict_count). GPU tests: $TESTS. Int8 tensor cores (8-32 column products): $(mma_note)."
    echo
    echo "## Diagnostics"
    train_part_rows
    seed_projection
    fuse_rows
    batch_rows
    dspark_shipped_rows
    dspark_draft_rows
    serve_rows
    peer_rows
    cpuref_rows
    longpp_rows
    decide_rows
    if [ "${ST[profile]:-SKIP}" = OK ]; then
        echo
        echo "### Kernel time per decoded token (ncu, $LSMALL-layer Q1_0, tg16 + warm-up; launches include the upload and"
        echo "the tensor-core self-check)"
        echo
        cat "$W/profile.log"
    fi
    if [ "${ST[profile-pp]:-SKIP}" = OK ]; then
        echo
        echo "### Kernel time per prefilled token (ncu, $LSMALL-layer Q1_0, pp$PP + warm-up, launch by launch)"
        echo
        cat "$W/profile-pp.log"
    fi
    echo
    echo "| step | status | seconds | limit |"
    echo "| ---- | ------ | ------: | ----: |"
    local s
    for s in "${ORDER[@]}"; do printf '| %s | %s | %s | %s |\n' "$s" "${ST[$s]}" "${SECS[$s]}" "${LIM[$s]}"; done
    echo
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ), total $(elapsed) s of a ${BUDGET} s budget (plan: verdict steps" \
         "${PLAN_CORE} s, the rest ${PLAN_REST} s)"
}
say "== [$(elapsed) s] done"
table | tee "$TABLE"
for s in "${ORDER[@]}"; do
    case ${ST[$s]} in FAIL | TIMEOUT) exit 1 ;; esac
done
exit 0
