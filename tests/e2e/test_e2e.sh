#!/usr/bin/env bash
# tests/e2e/test_e2e.sh — the end-to-end antidoom pipeline on the shipped looping model (issue #8),
# on a reduced budget: scripts/demo.sh with fewer prompts and shorter completions, fixed seeds.
# Asserts (antidoom FP16 vs base FP16, greedy, held-out prompts):
#   - the loop rate goes down by at least 25% relative (and the base model does loop: >= 25%);
#   - chosen_win on the held-out pairs goes up by at least 0.05;
#   - held-out perplexity stays within +10% of the base model's.
# Q1_0 / Q2_0 numbers are printed, not asserted (re-quantisation dilutes the LoRA: ANTIDOOM.md §12).
set -euo pipefail
src=${BONSAI_SOURCE_ROOT:?}
bld=${BONSAI_BUILD_ROOT:?}
if [ ! -f "$src/data/bonsai-loop-f16.gguf" ]; then echo "SKIP: data/bonsai-loop-f16.gguf missing"; exit 77; fi
command -v python3 >/dev/null || { echo "SKIP: python3 missing (demo table)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export BONSAI_DEMO_DIR=$dir DEMO_TRAIN_PROMPTS=${E2E_TRAIN_PROMPTS:-120} DEMO_HELD_PROMPTS=${E2E_HELD_PROMPTS:-40}
export DEMO_NPREDICT=${E2E_NPREDICT:-160} DEMO_THREADS=2
"$src/scripts/demo.sh" "$bld" > "$dir/demo.log" 2>&1 || { tail -40 "$dir/demo.log"; echo "FAIL: demo.sh failed"; exit 1; }
tail -12 "$dir/demo.log"
python3 - "$dir" <<'PY'
import json, re, sys
d = sys.argv[1]
def ev(l): return json.load(open(f"{d}/eval-{l}.json"))
def ppl(l):
    return float(re.findall(r"PPL = ([0-9.]+)", open(f"{d}/ppl-{l}.txt").read())[-1])
cw = {l.split()[0]: float(l.split()[1]) for l in open(f"{d}/chosen_win.txt") if len(l.split()) == 2}
b, a = ev("base-f16"), ev("antidoom-f16")
fails = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fails.append(what)
check(b["loop_rate"] >= 0.25, f"base loop rate {b['loop_rate']:.3f} >= 0.25")
check(a["loop_rate"] <= 0.75 * b["loop_rate"], f"antidoom loop rate {a['loop_rate']:.3f} <= 0.75 x base {b['loop_rate']:.3f}")
check(cw["antidoom-f16"] >= cw["base-f16"] + 0.05, f"held-out chosen_win {cw['base-f16']:.3f} -> {cw['antidoom-f16']:.3f} (+0.05)")
pb, pa = ppl("base-f16"), ppl("antidoom-f16")
check(pa <= 1.10 * pb, f"held-out perplexity {pb:.2f} -> {pa:.2f} (<= +10%)")
sys.exit(1 if fails else 0)
PY
