#!/usr/bin/env bash
# tests/cuda/test_check_script.sh MODE SCRIPT BUILD_DIR OUT_DIR [PEER] — cuda/check.sh --emu (the GPU verdict script
# against the CPU emulator), its outputs checked line by line. Each check names what it wants; the first run that
# misses one prints them all and the script's output, and the test fails.
#   plain   the whole run: exit 0; the verdict rows with their targets and verdicts (Q1_0 decode FAIL: the emulator
#           is far below 600 tok/s; Q2_0 decode, training (a made-up peak of 1e-6 TFLOP/s, so the F16 MFU passes),
#           DSpark rows PASS; build and GPU tests SKIP), kernels per token counted, the training steps' time by part and
#           the seed recipe's time projected from them, the verdict count, and each verdict row printed (the table so
#           far) before the next step started.
#   faults  a failing bench (bench-Q2_0), a hanging step (copybw), a failing peer run (cpuref-peer, the emulator's
#           bench playing llama-bench) and a failing training run (train-F16-4), with a wrong MMA layout injected
#           into the emulator: the script goes on, exits 1, and every table still prints, with FAIL / TIMEOUT cells
#           where the steps failed and numbers where they did not (the peer, batched, launch-cost, serve, drafting,
#           long-prompt and opt-in tables included).
#   budget  BONSAI_CHECK_BUDGET=32 (20 s of it kept for the tables): the run ends within 32 s, says the budget is
#           spent, keeps the first decode row measured (~3 s in) and gives the 16-layer training row, which has under
#           a quarter of its 60 s limit left when its turn comes, SKIP.
MODE=$1 SCRIPT=$2 BUILD=$3 O=$4 PEER=${5:-}
rm -rf "$O" && mkdir -p "$O" || exit 1
T="$O/check-table.md"
missing=()
# want WHAT REGEX [FILE]: FILE (default check-table.md) has a line matching the extended REGEX
want() { grep -qE -- "$2" "${3:-$T}" || missing+=("$1: /$2/ in ${3:-$T}"); }
NUM='[0-9][0-9.]*'
case $MODE in
plain)
    OUT="$O" BONSAI_CHECK_PEAK_TFLOPS=0.000001 "$SCRIPT" --emu "$BUILD" >"$O/stdout" 2>&1
    rc=$?
    [ "$rc" = 0 ] || missing+=("exit status 0 (got $rc)")
    want "Q1_0 decode row: numbers, kernels, FAIL against 600 tok/s" \
        "^\| Q1_0 \| 16( \| $NUM){3} \| [0-9]+ \| $NUM \| $NUM % \| tg8 >= 600 tok/s \| FAIL \|$"
    want "Q2_0 decode row: PASS" "^\| Q2_0 \| 16( \| $NUM){3} \| [0-9]+ \| $NUM \| $NUM % \| ran and measured \| PASS \|$"
    want "F16 training row: MFU against the given peak, PASS" \
        "^\| F16 \| 4 \| 64( \| $NUM){5} % \| MFU >= 35 % of 0.000001 TFLOP/s \| PASS \|$"
    want "Q1_0 training row: all 16 layers, memory PASS" \
        "^\| Q1_0 \| 16 \| 64( \| $NUM){5} % \| device memory < 12 GB \| PASS \|$"
    want "the training section names the products' arithmetic: bench_train's default bf16 GEMMs" \
        "^projection weights\). How the products run, as bench_train says: .*base-weight GEMMs bf16"
    want "build row SKIP" "^\| build for sm_90 \| not built .* \| builds \| SKIP \|$"
    want "GPU tests row SKIP" "^\| GPU tests \| not run \(--emu\) \| all pass \| SKIP \|$"
    want "DSpark native row" "^\| native tg \| $NUM \| 1.00 \| - \| $NUM \| ran and measured \| PASS \|$"
    want "DSpark replay row" "^\| DSpark replay \(forced acceptance, B=4\)( \| $NUM){4} \| ran and measured \| PASS \|$"
    want "DSpark trained-drafter row" \
        "^\| DSpark, trained drafter \(shipped 1-bit model\) \| $NUM \(plain $NUM\) \| $NUM \| - \| - \| ran and measured \| PASS \|$"
    want "verdict count" "^Verdict: 7 PASS, 1 FAIL, 2 SKIP\. "
    want "launch-cost table: kernels per token counted" "^\| default \| [0-9]+( \| $NUM){2} \|$"
    want "step by part: both training runs, four parts and the total" \
        "^\| F16-4( \| $NUM \($NUM %\)){4} \| $NUM \|$"
    want "step by part: the 16-layer Q1_0 run" "^\| Q1_0-16( \| $NUM \($NUM %\)){4} \| $NUM \|$"
    want "the seed recipe projected from the Q1_0 step" "^$NUM min, against the < 15 min target \(a projection, not a run\)\.$"
    want "step table" "^\| bench-Q1_0 \| OK \| [0-9]+ \| 30 \|$"
    # the Q1_0 row printed as the table so far before the Q2_0 model was started; the training rows before the tests
    awk '/^   \| Q1_0 \| 16 \| [0-9]/ && !r { r = NR } /model-Q2_0-16 \(limit/ && !m { m = NR }
         END { exit !(r && m && r < m) }' "$O/stdout" ||
        missing+=("the Q1_0 decode row printed before model-Q2_0-16 started (stdout)")
    awk '/^   \| Q1_0 \| 16 \| 64 \| [0-9]/ && !r { r = NR } /dspark-gen \(limit/ && !m { m = NR }
         END { exit !(r && m && r < m) }' "$O/stdout" ||
        missing+=("the Q1_0 training row printed before dspark-gen started (stdout)")
    ;;
faults)
    OUT="$O" BONSAI_EMU_MMA_FAULT=1 BONSAI_CHECK_PEAK_TFLOPS=0.001 BONSAI_PEER_BENCH="$PEER" \
        BONSAI_CHECK_INJECT="bench-Q2_0=fail copybw=hang cpuref-peer=fail train-F16-4=fail" \
        "$SCRIPT" --emu "$BUILD" >"$O/stdout" 2>&1
    rc=$?
    [ "$rc" = 1 ] || missing+=("exit status 1 (got $rc)")
    want "failed bench: FAIL row" "^\| Q2_0 \| 16 \| FAIL \| FAIL \| FAIL \| FAIL \| FAIL \| FAIL \| ran and measured \| FAIL \|$"
    want "hung copybw: no share of the copy bandwidth" "^\| Q1_0 \| 16( \| $NUM){3} \| [0-9]+ \| $NUM \| n/a \| tg8 >= 600 tok/s \| FAIL \|$"
    want "copybw TIMEOUT" "^\| copybw \| TIMEOUT \| "
    want "the failed step's log" "^---- bench-Q2_0: FAIL" "$O/check.log"
    want "failed training run: FAIL row" \
        "^\| F16 \| 4 \| 64 \| FAIL \| FAIL \| FAIL \| FAIL \| FAIL \| MFU >= 35 % of 0.001 TFLOP/s \| FAIL \|$"
    want "the other training row measured" "^\| Q1_0 \| 16 \| 64( \| $NUM){5} % \| device memory < 12 GB \| PASS \|$"
    want "peer table: a good pair gives six numbers" "^### Against llama.cpp: the same 16-layer files through bonsai-bench-emu"
    want "peer table: Q2_0 FAIL (its bench failed)" "^\| Q2_0 \| 16 \| FAIL \| FAIL \| FAIL \| FAIL \| FAIL \| FAIL \|$"
    [ "$(grep -cE "^\| Q1_0 \| 16( \| $NUM){6} \|$" "$T")" = 2 ] ||
        missing+=("Q1_0 rows of six numbers in the peer and batched-decode tables")
    want "batched decode header" "\| tg8 x4 v4 t/s \|"
    want "failed peer CPU run: FAIL cells" "^\| bonsai-bench-emu \| FAIL \| FAIL \|$"
    want "serve: one stream" "^\| sampled top_k 40 \(top-k steps\) \| $NUM \|$"
    want "serve: 4 streams" "^\| 4 greedy streams at once, total \(batched steps\) \| $NUM \|$"
    want "serve: 4 DSpark streams" \
        "^\| 4 greedy streams at once, total: DSpark random drafter, always 3 drafts; $NUM busy slots per pass, $NUM per drafting \| $NUM \|$"
    want "MMA fault reported" "Int8 tensor cores \(8-32 column products\): OFF, self-check failed: q1_0"
    want "long prompts with the peer's ratios" "^\| 256( \| $NUM){7} \|$"
    want "fp16 MMA fault reported" "^The fp16 tensor-core self-check FAILED \(self-check failed: fp16 m16n8k16"
    want "launch cost per extra launch" "^Per extra launch: "
    want "launch cost: GDN norm row" "^\| GDN output norm fused \(BONSAI_CUDA_GDN_NORM=1\) \| [0-9]+( \| $NUM){2} \|$"
    want "launch cost: PDL row" "^\| programmatic dependent launch \(BONSAI_CUDA_PDL=1\) \| [0-9]+( \| $NUM){2} \|$"
    want "launch cost: both" "^\| PDL and the GDN norm fusion together \| [0-9]+( \| $NUM){2} \|$"
    want "PDL line" "^PDL saves "
    want "trained drafter table" "^\| DSpark, trained drafter( \| $NUM){4} \|$"
    want "drafting table" "^### Drafting for several slots"
    want "drafting: 2 slots" "^\| 2( \| $NUM){3} \| ${NUM}x \|$"
    want "opt-in PDL line" "^- BONSAI_CUDA_PDL=1 \(tg, tests-pdl SKIP\): $NUM against $NUM t/s \([-+]$NUM %\): keep the default$"
    want "opt-in attention line" "^- prefill attention at pp256: fastest "
    want "opt-in MMQ line (tensor cores off)" \
        "^- BONSAI_CUDA_MMQ_PREFILL=1 \(pp16, Q1_0\): $NUM against $NUM t/s \([-+]$NUM %\): keep the default$"
    want "verdict count" "^Verdict: [0-9]+ PASS, [0-9]+ FAIL, [0-9]+ SKIP\. "
    ;;
budget)
    OUT="$O" BONSAI_CHECK_BUDGET=32 "$SCRIPT" --emu "$BUILD" >"$O/stdout" 2>&1
    total=$(awk '/^date:/ { for (i = 1; i < NF; i++) if ($i == "total") print $(i + 1) }' "$T")
    [ -n "$total" ] && [ "$total" -le 32 ] || missing+=("a total of at most 32 s (got '$total')")
    want "the budget is spent" "budget is spent" "$O/stdout"
    want "the first decode row measured" "^\| Q1_0 \| 16( \| $NUM){3} \| [0-9]+ \| "
    want "a row it had no time for: SKIP" \
        "^\| Q1_0 \| 16 \| 64 \| SKIP \| SKIP \| SKIP \| SKIP \| SKIP \| device memory < 12 GB \| SKIP \|$"
    want "its step skipped for the budget" "^== \[[0-9]+ s\] train-Q1_0-16: skipped \(the 32 s budget is spent" "$O/stdout"
    ;;
*)
    echo "usage: $0 plain|faults|budget SCRIPT BUILD_DIR OUT_DIR [PEER]"
    exit 2
    ;;
esac
if [ "${#missing[@]}" -gt 0 ]; then
    cat "$O/stdout"
    echo
    for m in "${missing[@]}"; do echo "MISSING: $m"; done
    echo "test_check_script $MODE: ${#missing[@]} checks failed"
    exit 1
fi
echo "test_check_script $MODE: every check passed"
