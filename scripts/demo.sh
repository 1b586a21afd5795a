#!/usr/bin/env bash
# scripts/demo.sh [BUILD_DIR] — the end-to-end antidoom demo run by `./bonsai.sh demo`.
# On the shipped looping model — data/bonsai-loop-1bit.gguf (natively 1-bit, weights stored as Q1_0 like
# the real Bonsai models) when present, else data/bonsai-loop-f16.gguf (scripts/make-model.sh):
#   1. loop rate of the base model (greedy, held-out prompts);
#   2. bonsai-mine-pairs on the mining prompts (the train prompts, then data/val/tether-prompts.jsonl: openings of
#      fortunes the model never saw, where it loops more), primed (docs/antidoom.md §3) and sampled (antidoom),
#      regularised; the same on the held-out prompts for held-out pairs and on the validation prompts for
#      validation pairs (split "heldout");
#   3. bonsai-ftpo-train: LoRA with FTPO, early stop on the running chosen_win;
#   4. merge into FP16 and bonsai-quantize to Q1_0 / Q2_0 (variant a: "antidoom-Q1_0"); the LoRA trained through
#      the quantizer, --ste-type Q1_0 / Q2_0, merged with --merge-type (variant b: "antidoom-Q1_0-ste"), holding
#      plain text with a KL tether to the quantized base (--tether-text data/val/tether.txt: fortunes the
#      model never saw, apart from the validation and held-out ones; Q2_0 also --keep-scales): one candidate per
#      seed × λ_tether, the pick made on validation prompts/text/pairs (scripts/demo-rounds.sh), in up to
#      DEMO_STE_ROUNDS on-policy rounds (pairs mined with the previous round's pick, the adapter retrained from
#      the base on all rounds' pairs; rounds 2.. are "antidoom-Q1_0-ste2" …, the final pick is printed); a LoRA
#      trained on the quantized base and merged keep (variant c: "antidoom-Q1_0-qbase"; only
#      with DEMO_QBASE=1);
#   5. evaluation of base and antidoom models: greedy loop rate on the held-out prompts, chosen_win on
#      the held-out pairs, held-out perplexity, mean/median completion length — one table, then the
#      requantization goals per quantized row (chosen_win vs FP16, loop-rate reduction and perplexity
#      drift vs the same-type base);
#   6. the bonsai-serve command.
# Deterministic (fixed seeds). Knobs (environment): BONSAI_DEMO_DIR (out/demo), DEMO_MODEL, DEMO_THREADS (2),
# DEMO_SEED (LoRA init / shuffle / tether windows of every FTPO run, 3407),
# DEMO_TRAIN_PROMPTS (mining prompts used, all), DEMO_MINE_UNSEEN (1: also mine on data/val/tether-prompts.jsonl),
# DEMO_HELD_PROMPTS (all), DEMO_NPREDICT (256), DEMO_EPOCHS, DEMO_LR, DEMO_STOP,
# DEMO_STE_STOP (early stop of the STE runs, 0.8), DEMO_STE_TARGETS (LoRA targets of the STE runs, lm_head),
# DEMO_STE_LAMBDA_NT (FTPO non-target tether of the STE runs, 1; the preset's is 0.4),
# DEMO_TETHER_CTX (64), DEMO_TETHER_BATCH (2) (windows of the STE runs' plain-text KL tether),
# DEMO_STE_ROUNDS (most STE rounds, 3; notes/e2e-results.md, "Why the recipe is what it is"), DEMO_STE_SEEDS and
# DEMO_STE_TETHERS (one STE candidate per seed × λ_tether in each round: "DEMO_SEED DEMO_SEED+1" × "3 10 30";
# DEMO_STE_TETHERS_Q2_0 for Q2_0: "1 3"),
# DEMO_KEEP_SCALES (quant types whose STE candidates train and merge with --keep-scales: the base's block scales
# kept, the adapter changes codes only; "Q2_0": its block scale is the block's max |w|, so without it one large
# element rescales the whole block and the perplexity drifts +14–28 %, notes/e2e-results.md, "Why the recipe is what
# it is"),
# DEMO_VAL_PROMPTS (validation prompts of each kind used, all), DEMO_QTYPES ("Q1_0 Q2_0"),
# DEMO_QBASE (0: variant c is skipped; on the natively 1-bit model it equals a, see notes/e2e-results.md),
# DEMO_RESUME (0; 1: continue a killed or shorter run in the same BONSAI_DEMO_DIR with the same settings — mined pairs,
# adapters and every evaluated STE candidate are reused, e.g. to add a round with DEMO_STE_ROUNDS; the evaluations of
# the final models are redone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/demo-rounds.sh"
B=${1:-build}
T="$B/tools"
out=${BONSAI_DEMO_DIR:-out/demo}
model=${DEMO_MODEL:-}
if [ -z "$model" ]; then
    model=$root/data/bonsai-loop-1bit.gguf
    [ -f "$model" ] || model=$root/data/bonsai-loop-f16.gguf
fi
ptrain=$out/prompts-mine.jsonl
pheld=$root/data/prompts/heldout.jsonl
heldtxt=$root/data/heldout.txt
th=${DEMO_THREADS:-2}
ntrain=${DEMO_TRAIN_PROMPTS:-0}
nheld=${DEMO_HELD_PROMPTS:-0}
npred=${DEMO_NPREDICT:-256}
epochs=${DEMO_EPOCHS:-12}
lr=${DEMO_LR:-1e-3}
stop=${DEMO_STOP:-0.4}
ste_stop=${DEMO_STE_STOP:-0.8}
ste_targets=${DEMO_STE_TARGETS:-lm_head}
ste_nt=${DEMO_STE_LAMBDA_NT:-1}
tether_ctx=${DEMO_TETHER_CTX:-64}
tether_batch=${DEMO_TETHER_BATCH:-2}
seed=${DEMO_SEED:-3407}
ste_rounds=${DEMO_STE_ROUNDS:-3}
ste_seeds=${DEMO_STE_SEEDS:-$seed $((seed + 1))}
ste_lambdas=${DEMO_STE_TETHERS:-3 10 30}
ste_lambdas_q2=${DEMO_STE_TETHERS_Q2_0:-1 3}
keep_scales=${DEMO_KEEP_SCALES-Q2_0}
nval=${DEMO_VAL_PROMPTS:-0}
qtypes=${DEMO_QTYPES:-Q1_0 Q2_0}
qbase=${DEMO_QBASE:-0}
resume=${DEMO_RESUME:-0}
export OPENBLAS_NUM_THREADS=$th
mkdir -p "$out"
# reuse FILE: true (saying so) when resuming and FILE is there; the tools write their outputs atomically, and so does
# this script (*.tmp, then mv), so a file that is there is whole
reuse() {
    [ "$resume" = 1 ] && [ -f "$1" ] || return 1
    echo "reusing $1"
}
if [ "$resume" = 1 ]; then
    # the candidates' validation rows go to rounds-Q.tsv.prev, where train_candidate finds them (scripts/demo-rounds.sh)
    for f in "$out"/rounds-*.tsv; do
        [ -f "$f" ] || continue
        if [ -f "$f.prev" ]; then tail -n +2 "$f" >> "$f.prev"; rm "$f"; else mv "$f" "$f.prev"; fi
    done
    rm -f "$out"/eval-*.json "$out"/val-*.json "$out"/chosen_win.txt "$out"/selected-*.txt
else
    rm -f "$out"/*.jsonl "$out"/*.json "$out"/*.tsv "$out"/*.tsv.prev "$out"/selected-*.txt
fi
# mining prompts: the train prompts, then the openings of the tether text's fortunes (DEMO_MINE_UNSEEN=0: train only)
cat "$root/data/prompts/train.jsonl" > "$ptrain"
[ "${DEMO_MINE_UNSEEN:-1}" = 1 ] && cat "$root/data/val/tether-prompts.jsonl" >> "$ptrain"
# validation data (scripts/make-val-data.sh), never in the held-out set: openings of fortunes the model never saw
# (validation pairs), question-style prompts from other unseen fortunes (loop rate) and the riddles of the model's
# training text (perplexity drift)
pval=$out/prompts-val.jsonl
awk -v n="$nval" 'n == 0 || NR <= n' "$root/data/val/prompts.jsonl" > "$pval"
pvalq=$out/prompts-val-questions.jsonl
awk -v n="$nval" 'n == 0 || NR <= n' "$root/data/val/prompts-questions.jsonl" > "$pvalq"
valtxt=$root/data/val/train-riddles.txt
# a resumed run reuses its validation pairs and its candidates' validation rows only when they came from the same
# validation data (the FTPO adapter trains on the train split only, so it stays)
valsig=$(cat "$pval" "$pvalq" "$valtxt" | sha256sum | cut -d' ' -f1)
if [ "$resume" = 1 ] && [ "$(cat "$out/validation.sha256" 2>/dev/null)" != "$valsig" ] &&
   { compgen -G "$out/rounds-*.tsv.prev" || compgen -G "$out/pairs-val*.jsonl"; } > /dev/null; then
    echo "validation data differ from the resumed run's: validation pairs mined again, STE candidates trained and" \
         "evaluated again"
    rm -f "$out"/rounds-*.tsv.prev "$out"/pairs-val*.jsonl
fi
echo "$valsig" > "$out/validation.sha256"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
maxp() { [ "$1" -gt 0 ] && echo "--max-prompts $1" || true; }
t0=$(date +%s)

# evaluation settings shared by every model: greedy, plain ChatML (the model's training format)
gen=(--thinking -1 -t "$th" --ctx 2048)
evaluate() {  # evaluate LABEL MODEL: loop rate JSON + perplexity
    local label=$1 m=$2
    "$T/bonsai-eval-loops" -m "$m" -p "$pheld" $(maxp "$nheld") "${gen[@]}" --temp 0 --n-predict "$npred" \
        --label "$label" --json "$out/eval-$label.json" --gen-log "$out/gen-$label.jsonl" > /dev/null
    "$T/bonsai-perplexity" -m "$m" -f "$heldtxt" -c 128 -t "$th" > "$out/ppl-$label.txt" 2>&1
    echo "$label: $(grep -E 'Final estimate' "$out/ppl-$label.txt" | tail -1)"
}

step "1/6 base model: $(basename "$model") — greedy loop rate on held-out prompts"
# its FP16 (for a 1-bit model the lossless unpack, as the real Bonsai "FP16" files) and quantized bases
"$T/bonsai-quantize" "$model" "$out/base-f16.gguf" F16 --threads "$th" > /dev/null
for q in $qtypes; do "$T/bonsai-quantize" "$out/base-f16.gguf" "$out/base-$q.gguf" "$q" --threads "$th" > /dev/null; done
evaluate base-f16 "$out/base-f16.gguf"

step "2/6 mine pairs: primed + sampled contexts on the mining prompts, then the held-out and validation prompts"
# mine_pairs MODEL PROMPTS N SPLIT SEED_PRIME SEED_SAMPLE OUT_PRIME OUT_SAMPLE OUT: primed (docs/antidoom.md §3) and
# sampled pairs of MODEL on the first N prompts (0 = all), both written, then concatenated into OUT
mine_pairs() {
    reuse "$9" && return
    local a=(-m "$1" "${gen[@]}" --n-predict "$npred" --n-probs 20 --chosen-require-alnum -p "$2" $(maxp "$3")
             --split "$4")
    "$T/bonsai-mine-pairs" "${a[@]}" -o "$7" --mode prime --phrase-from-prefix --prime-repeats 3 --prime-prefix-tokens 24 \
        --temp 0.1 --seed "$5" | tail -1
    "$T/bonsai-mine-pairs" "${a[@]}" -o "$8" --mode sample --temps 0.1,0.5,0.8 --seed "$6" | tail -1
    cat "$7" "$8" > "$9.tmp"
    mv "$9.tmp" "$9"
}
mine_pairs "$model" "$ptrain" "$ntrain" train 1 1001 "$out/pairs-prime.jsonl" "$out/pairs-sample.jsonl" \
    "$out/pairs-train-raw.jsonl"
reuse "$out/pairs-train.jsonl" ||
    "$T/bonsai-mine-pairs" --regularise "$out/pairs-train-raw.jsonl" -o "$out/pairs-train.jsonl" --headroom 1 --top 5 |
    tail -6
mine_pairs "$model" "$pheld" "$nheld" heldout 2 2001 "$out/pairs-heldout-prime.jsonl" "$out/pairs-heldout-sample.jsonl" \
    "$out/pairs-heldout.jsonl"
# validation pairs (held-out split: evaluated by the trainer, never trained on)
mine_pairs "$model" "$pval" 0 heldout 3 3001 "$out/pairs-val-prime.jsonl" "$out/pairs-val-sample.jsonl" \
    "$out/pairs-val.jsonl"
cat "$out/pairs-train.jsonl" "$out/pairs-val.jsonl" > "$out/pairs-all.jsonl"
echo "pairs: $(wc -l < "$out/pairs-train.jsonl") train, $(wc -l < "$out/pairs-val.jsonl") validation," \
     "$(wc -l < "$out/pairs-heldout.jsonl") held out"

step "3/6 FTPO LoRA training (early stop at running chosen_win >= $stop)"
ftpo=(--rank 16 --alpha 16 --targets all --epochs "$epochs" --lr "$lr" --batch 4 --grad-accum 1
      --seed "$seed" -t "$th")
reuse "$out/adapter.gguf" ||
    "$T/bonsai-ftpo-train" -m "$model" -p "$out/pairs-all.jsonl" "${ftpo[@]}" -o "$out/adapter.gguf" --early-stop "$stop" \
        --log "$out/ftpo-log.jsonl" 2>&1 | grep -vE '^step ' | tail -20

step "4/6 merge into FP16, re-quantize to $qtypes (a); train through the quantizer, STE (b); train on the quantized base (c)"
# merges go into the FP16 base (for a 1-bit model its unpack: same values, and every tensor F16 afterwards)
"$T/bonsai-ftpo-train" -m "$out/base-f16.gguf" --merge "$out/adapter.gguf" -o "$out/antidoom-f16.gguf" --merge-type f16 |
    tail -3
labels="base-f16 antidoom-f16"
for q in $qtypes; do
    lq=$(echo "$q" | tr 'A-Z' 'a-z')
    echo "(a) antidoom $q: $("$T/bonsai-quantize" "$out/antidoom-f16.gguf" "$out/antidoom-$q.gguf" "$q" --threads "$th" | tail -1)"
    labels="$labels antidoom-$q"
    echo "(b) STE through $q, targets $ste_targets (early stop at running chosen_win >= $ste_stop on the $q model):"
    ste_rounds "$q" "$ste_rounds" "$ste_seeds" "$([ "$q" = Q2_0 ] && echo "$ste_lambdas_q2" || echo "$ste_lambdas")"
    if [ "$qbase" = 1 ]; then
        echo "(c) LoRA on the $q base, merged keep:"
        "$T/bonsai-ftpo-train" -m "$out/base-$q.gguf" -p "$out/pairs-all.jsonl" "${ftpo[@]}" -o "$out/adapter-$q-qbase.gguf" --early-stop "$stop" \
            --log "$out/ftpo-log-$q-qbase.jsonl" 2>&1 | grep -E '^(ftpo-train: [0-9]+/|early stop)' | tail -2
        "$T/bonsai-ftpo-train" -m "$out/base-$q.gguf" --merge "$out/adapter-$q-qbase.gguf" -o "$out/antidoom-$q-qbase.gguf" \
            --merge-type keep > /dev/null
        labels="$labels antidoom-$q-qbase"
    fi
done
for q in $qtypes; do labels="$labels base-$q"; done

step "5/6 evaluate (greedy loop rate, held-out chosen_win, perplexity)"
for label in $labels; do [ -f "$out/eval-$label.json" ] || evaluate "$label" "$out/$label.gguf"; done
# chosen_win on the held-out pairs (scripts/demo-rounds.sh's pair_cw)
for label in $labels; do echo "${label} $(pair_cw "$out/$label.gguf" "$out/pairs-heldout.jsonl")" >> "$out/chosen_win.txt.tmp"; done
mv "$out/chosen_win.txt.tmp" "$out/chosen_win.txt"

step "6/6 results on $(basename "$model") ($(( $(date +%s) - t0 )) s)"
ppl_of() { sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/ppl-$1.txt"; }
cw_of() { awk -v l="$1" '$1 == l { print $2 }' "$out/chosen_win.txt"; }
{
    echo "| model | loop rate (greedy, held-out) | frame-loop rate | seq-rep-4 | chosen_win (held-out pairs) | perplexity (held-out) | mean len | median len |"
    echo "|---|---|---|---|---|---|---|---|"
    for label in $labels; do
        row=$(jq -r '"\(.loop_rate * 1000 | round / 10)% (\(.loops)/\(.n)) | \(if .frame_loop_rate then "\(.frame_loop_rate * 1000 | round / 10)% (\(.frame_loops)/\(.n))" else "n/a" end) | \(.seq_rep4 // "n/a" | if type == "number" then (. * 1000 | round / 1000) else . end) | \(.mean_length * 10 | round / 10) | \(.median_length)"' \
              "$out/eval-$label.json")
        ppl=$(ppl_of "$label")
        cwin=$(cw_of "$label")
        IFS='|' read -r lr fr rep mean med <<< "$row"
        fr=${fr# }
        echo "| $label | ${lr% } | ${fr% } | ${rep// /} | ${cwin:-n/a} | ${ppl:-n/a} | ${mean// /} | ${med// /} |"
    done
    echo
    echo "seq-rep-4: the mean share of repeated word 4-grams in a completion (1 - distinct / all; also counts a phrase"
    echo "that comes back with changes, which the loop detector does not); frame-loop rate: completions that re-enter one"
    echo "frame with changing slots (docs/antidoom.md §16), verbatim loops included"
    echo
    echo "requantization goals: chosen_win >= 90% of antidoom-f16's, loop-rate reduction >= 90% and"
    echo "perplexity drift <= 2% vs the base of the same type (antidoom-f16 vs base-f16 for reference); the CI is the"
    echo "model's loop rate's (Wilson, over the held-out prompts)"
    echo
    echo "| model | chosen_win / FP16 antidoom | loop-rate reduction vs same-type base | perplexity drift vs same-type base |"
    echo "|---|---|---|---|"
    cf=$(cw_of antidoom-f16)
    for label in $labels; do
        case $label in antidoom-*) ;; *) continue ;; esac
        ty=${label#antidoom-}; ty=${ty%%-*}
        lb=$(jq -r .loop_rate "$out/eval-base-$ty.json")
        read -r la clo chi < <(jq -r '"\(.loop_rate) \(.loop_rate_ci95[0]) \(.loop_rate_ci95[1])"' "$out/eval-$label.json")
        sel=$label
        cat "$out"/selected-*.txt 2>/dev/null | grep -qxF "$label" && sel="**$label** (selected on validation)"
        awk -v l="$sel" -v c="$(cw_of "$label")" -v cf="$cf" -v lb="$lb" -v la="$la" -v pb="$(ppl_of "base-$ty")" \
            -v pa="$(ppl_of "$label")" -v clo="$clo" -v chi="$chi" 'BEGIN {
                share = (cf > 0) ? 100 * c / cf : 0
                red = "n/a (base 0%)"
                if (lb > 0) red = sprintf("%.1f%% (%.1f%% -> %.1f%%, 95%% CI %.1f-%.1f%%)", 100 * (lb - la) / lb, 100 * lb, 100 * la,
                                          100 * clo, 100 * chi)
                drift = 100 * (pa - pb) / pb
                ok1 = share >= 90 ? "✓" : "✗"; ok2 = (lb > 0 && 100 * (lb - la) / lb >= 90) ? "✓" : "✗"
                ok3 = drift <= 2 ? "✓" : "✗"
                printf "| %s | %.1f%% %s | %s %s | %+.2f%% %s |\n", l, share, ok1, red, ok2, drift, ok3 }'
    done
    for q in $qtypes; do
        [ -s "$out/rounds-$q.tsv" ] || continue
        echo
        echo "$q STE candidates on validation (data/val, never in the held-out set: loop rate on question prompts, drift on"
        echo "the training text's riddles, chosen_win on validation pairs; shortfall 0 = the loop and chosen_win goals met"
        echo "there, then the lowest drift is picked; selected: $(cat "$out/selected-$q.txt")):"
        echo
        head -1 "$out/rounds-$q.tsv" | sed 's/\t/ | /g; s/^/| /; s/$/ |/'
        head -1 "$out/rounds-$q.tsv" | awk -F'\t' '{ s = "|"; for (i = 1; i <= NF; i++) s = s "---|"; print s }'
        tail -n +2 "$out/rounds-$q.tsv" | sed 's/\t/ | /g; s/^/| /; s/$/ |/'
    done
} | tee "$out/table.md"
echo
serve_q=$(for q in $qtypes; do echo "$q"; done | head -1)
serve_file="$out/$(cat "$out/selected-$serve_q.txt").gguf"
serve_what="trained through the $serve_q quantizer, picked on validation"
echo "serve the antidoom model (llama-server compatible), $serve_what:"
echo "  $T/bonsai-serve -m $serve_file --port 8080 -c 2048 -np 2"
echo "  (or the unquantized result: $T/bonsai-serve -m $out/antidoom-f16.gguf --port 8080 -c 2048 -np 2)"
echo "  curl -s localhost:8080/completion -d '{\"prompt\":\"<|im_start|>user\\nA day for firm<|im_end|>\\n<|im_start|>assistant\\n\",\"n_predict\":64}'"
