# scripts/demo-rounds.sh — sourced by scripts/demo.sh: STE candidates picked on validation data, in on-policy rounds.
#
# Why: through the 1-bit quantizer the outcome of one STE run is a lottery — which loops remain ("--" → "You" → …)
# and how far the perplexity drifts depend on the LoRA seed and on λ_tether (notes/e2e-results.md, "Why the recipe is
# what it is"). So several candidates are trained and every choice is made on validation data that the held-out
# evaluation never sees:
#   round r: the train pairs of every round so far (round 1: the base's pairs, mined by demo.sh; round r > 1:
#            mined with round r−1's pick on demo.sh's mining prompts $ptrain; rounds balanced, see round_pairs);
#            one candidate per seed × λ_tether (ste_rounds' LAMBDAS), each trained from the base;
#            the round's pick = the best candidate by the order below;
#   stop when the pick meets the validation loop and chosen_win goals, when mining finds no new pair, or after
#   N rounds; the final model = the best pick of all rounds by the same order.
# Order: first the summed shortfall against the loop and chosen_win goals, max(0, 0.9 − loop-rate reduction) +
# max(0, 0.9 − chosen_win / FP16's) (0 = both met), then the perplexity drift (lower is better). The drift has no
# bound of its own here (it is measured on text the base model was trained on, where it drifts less than on unseen
# text); the lowest drift among the goal-meeting candidates is the pick.
# Validation (data/val/, scripts/make-val-data.sh; nothing of it is in the held-out set): the greedy loop rate on
# $pvalq (question-style prompts "Q: What is the" made from fortunes the model never saw: the held-out prompts are
# riddle openings of that form), the perplexity on $valtxt (the riddles of the model's training text), chosen_win on
# $out/pairs-val.jsonl (pairs the base model gives on $pval, openings of unseen fortunes) against antidoom-f16's there.
# Why these two (notes/e2e-results.md, "Why the recipe is what it is"): over the 86 candidates of three earlier runs,
# the question prompts' loop rate ranked the held-out loop rates with Spearman ρ 0.88–0.97 (quotation openings:
# 0.50–0.95), and the riddles' drift ranked the held-out drift with mean ρ 0.77 (unseen quotations: 0.26, negative in one run).
# Uses demo.sh's variables and functions: root T out model th gen npred ntrain ptrain pval pvalq valtxt ftpo ste_stop
# ste_targets ste_nt keep_scales tether_ctx tether_batch labels resume mine_pairs maxp reuse.

# val_loop MODEL LABEL: the greedy loop rate of MODEL on the question-style validation prompts (also kept in
# val-LABEL.json)
val_loop() {
    "$T/bonsai-eval-loops" -m "$1" -p "$pvalq" "${gen[@]}" --temp 0 --n-predict "$npred" --label "$2" \
        --json "$out/val-$2.json" > /dev/null 2>&1
    jq -r .loop_rate "$out/val-$2.json"
}

# val_ppl MODEL: the perplexity of MODEL on the validation text
val_ppl() {
    "$T/bonsai-perplexity" -m "$1" -f "$valtxt" -c 128 -t "$th" 2>&1 |
        sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' | tail -1
}

# pair_cw MODEL PAIRS: chosen_win of MODEL itself on the held-out-split rows of PAIRS
pair_cw() {
    "$T/bonsai-ftpo-train" -m "$1" -p "$2" --eval "$out/adapter.gguf" -t "$th" 2>/dev/null |
        awk '$1 == "base" && $2 == "heldout" { print $4 }'
}

# val_score LOOP PPL CW: the shortfall against the validation loop and chosen_win goals (0 = both met), then the
# perplexity drift in % (the second key of the order above)
val_score() {
    awk -v l="$1" -v p="$2" -v c="$3" -v lb="$val_base_loop" -v pb="$val_base_ppl" -v cf="$val_cwf" \
        'BEGIN { red = lb > 0 ? (lb - l) / lb : 0; share = cf > 0 ? c / cf : 0
                 printf "%.4f %.2f\n", (red < 0.9 ? 0.9 - red : 0) + (share < 0.9 ? 0.9 - share : 0), 100 * (p - pb) / pb }'
}

# better SCORE DRIFT BEST_SCORE BEST_DRIFT: true when (SCORE, DRIFT) comes first in the order above (BEST empty: true)
better() {
    [ -z "$3" ] || awk -v s="$1" -v d="$2" -v bs="$3" -v bd="$4" 'BEGIN { exit !(s < bs || (s == bs && d < bd)) }'
}

# round_pairs Q R: every round's train pairs up to R, balanced around round 1 (the base's own loops): T = the largest
# round's size but at most 3× round 1's; a round larger than T is thinned to T evenly spaced rows (so a big later
# round cannot crowd out round 1's tokens), a smaller one repeated to about T (at most 3×); then the validation
# pairs (held-out split: evaluated, never trained on) -> $out/Q-rounds-pairs-R.jsonl
round_pairs() {
    local q=$1 r=$2 i nmax=0 n t f=$out/$1-rounds-pairs-$2.jsonl
    for i in $(seq "$r"); do n=$(wc -l < "$out/$q-round$i-pairs-train.jsonl"); [ "$n" -gt "$nmax" ] && nmax=$n; done
    n=$(wc -l < "$out/$q-round1-pairs-train.jsonl")
    [ "$n" -gt 0 ] || n=$nmax
    t=$(( nmax < 3 * n ? nmax : 3 * n ))
    : > "$f.tmp"
    for i in $(seq "$r"); do
        n=$(wc -l < "$out/$q-round$i-pairs-train.jsonl")
        [ "$n" -gt 0 ] || continue
        if [ "$n" -gt "$t" ]; then
            awk -v n="$n" -v t="$t" 'int(NR * t / n) > int((NR - 1) * t / n)' "$out/$q-round$i-pairs-train.jsonl" >> "$f.tmp"
            echo "  round $i: $n train pairs, thinned to $t" >&2
        else
            local copies=$(( (t + n / 2) / n ))
            [ "$copies" -le 3 ] || copies=3
            for _ in $(seq "$copies"); do cat "$out/$q-round$i-pairs-train.jsonl"; done >> "$f.tmp"
            echo "  round $i: $n train pairs x $copies" >&2
        fi
    done
    cat "$out/pairs-val.jsonl" >> "$f.tmp"
    mv "$f.tmp" "$f"
}

# train_candidate Q R SEED LAMBDA: one STE candidate of round R (candidate_row; resuming with DEMO_RESUME=1, the row an
# earlier run wrote to rounds-Q.tsv.prev when its model is there); appends its row to $out/rounds-Q.tsv, says so on
# stderr and prints "SCORE DRIFT LABEL"
train_candidate() {
    local q=$1 r=$2 s=$3 lam=$4 label=cand-$1-r$2-s$3-t$4 row="" reused="" steps vl vp drift vc sc
    [ "$resume" = 1 ] && [ -f "$out/$label.gguf" ] && [ -f "$out/rounds-$q.tsv.prev" ] &&
        row=$(awk -F '\t' -v l="$label" '$10 == l' "$out/rounds-$q.tsv.prev" | tail -1) && [ -n "$row" ] &&
        reused=" (reused)"
    [ -n "$row" ] || row=$(candidate_row "$q" "$r" "$s" "$lam" "$label") || return 1
    printf '%s\n' "$row" >> "$out/rounds-$q.tsv"
    IFS=$'\t' read -r _ _ _ steps vl vp drift vc sc _ <<< "$row"
    printf '  round %s seed %s λ_tether %-4s %4s steps: validation loop rate %.3f, perplexity %s (%+.2f %%), chosen_win %s -> shortfall %s%s\n' \
        "$r" "$s" "$lam" "$steps" "$vl" "$vp" "$drift" "$vc" "$sc" "$reused" >&2
    echo "$sc $drift $label"
}

# candidate_row Q R SEED LAMBDA LABEL: trains one STE candidate of round R (adapter, merged model $out/LABEL.gguf) and
# prints its validation row (round seed λ steps loop ppl drift chosen_win shortfall label, tab-separated)
candidate_row() {
    local q=$1 r=$2 s=$3 lam=$4 label=$5 lq c=$out/$5 steps vl vp vc sc drift ks=() tether_args=()
    lq=$(echo "$q" | tr 'A-Z' 'a-z')
    case " $keep_scales " in *" $q "*) ks=(--keep-scales) ;; esac
    awk -v x="$lam" 'BEGIN { exit !(x > 0) }' &&
        tether_args=(--tether-text "$root/data/val/tether.txt" --lambda-tether "$lam" --tether-ctx "$tether_ctx"
                     --tether-batch "$tether_batch")
    "$T/bonsai-ftpo-train" -m "$model" -p "$out/$q-rounds-pairs-$r.jsonl" "${ftpo[@]}" --seed "$s" -o "$c.adapter.gguf" \
        --early-stop "$ste_stop" --ste-type "$q" "${ks[@]}" --targets "$ste_targets" --lambda-nt "$ste_nt" "${tether_args[@]}" \
        --log "$c.log.jsonl" > "$c.train.txt" 2>&1 || { tail -5 "$c.train.txt" >&2; return 1; }
    "$T/bonsai-ftpo-train" -m "$out/base-f16.gguf" --merge "$c.adapter.gguf" -o "$c.gguf" --merge-type "$lq" "${ks[@]}" > /dev/null
    steps=$(grep -oE '^ftpo-train: [0-9]+/' "$c.train.txt" | grep -oE '[0-9]+' | tail -1)
    vl=$(val_loop "$c.gguf" "$label") vp=$(val_ppl "$c.gguf") vc=$(pair_cw "$c.gguf" "$out/pairs-val.jsonl")
    read -r sc drift <<< "$(val_score "$vl" "$vp" "$vc")"
    printf '%s\t%s\t%s\t%s\t%.4f\t%s\t%s\t%s\t%s\t%s\n' "$r" "$s" "$lam" "$steps" "$vl" "$vp" "$drift" "$vc" "$sc" "$label"
}

# ste_rounds Q N SEEDS LAMBDAS: the rounds above for quant type Q, at most N, one candidate per seed in SEEDS × λ in
# LAMBDAS; writes antidoom-Q-ste.gguf (round 1's pick),
# antidoom-Q-steR.gguf (round R's pick), $out/rounds-Q.tsv (every candidate's validation numbers) and
# $out/selected-Q.txt (the final label); appends the picks' labels to $labels
ste_rounds() {
    local q=$1 nrounds=$2 seeds=$3 lambdas=$4 r s lam prev=$model best_label="" best_score="" best_drift=""
    val_base_loop=$(val_loop "$out/base-$q.gguf" "base-$q")
    val_base_ppl=$(val_ppl "$out/base-$q.gguf")
    val_cwf=$(pair_cw "$out/antidoom-f16.gguf" "$out/pairs-val.jsonl")
    echo "validation: base-$q loop rate $val_base_loop, perplexity $val_base_ppl; antidoom-f16 chosen_win $val_cwf"
    printf 'round\tseed\tlambda_tether\tsteps\tval_loop_rate\tval_ppl\tval_drift_pct\tval_chosen_win\tshortfall\tlabel\n' \
        > "$out/rounds-$q.tsv"
    cp "$out/pairs-train.jsonl" "$out/$q-round1-pairs-train.jsonl"
    for r in $(seq "$nrounds"); do
        if [ "$r" -gt 1 ]; then
            echo "round $r: mining with the round-$((r - 1)) pick on the mining prompts"
            mine_pairs "$prev" "$ptrain" "$ntrain" train $((10 * r + 1)) $((1000 + 10 * r + 1)) "$out/$q-round$r-pairs-prime.jsonl" \
                "$out/$q-round$r-pairs-sample.jsonl" "$out/$q-round$r-pairs-raw.jsonl"
            if [ ! -s "$out/$q-round$r-pairs-raw.jsonl" ]; then
                echo "round $r: no new loops on the mining prompts; stopping"
                break
            fi
            reuse "$out/$q-round$r-pairs-train.jsonl" ||
                "$T/bonsai-mine-pairs" --regularise "$out/$q-round$r-pairs-raw.jsonl" -o "$out/$q-round$r-pairs-train.jsonl" \
                    --headroom 1 --top 5 | tail -1
        fi
        round_pairs "$q" "$r"
        local r_label="" r_score="" r_drift="" sc drift label
        for lam in $lambdas; do
            for s in $seeds; do
                read -r sc drift label <<< "$(train_candidate "$q" "$r" "$s" "$lam")"
                if better "$sc" "$drift" "$r_score" "$r_drift"; then r_score=$sc r_drift=$drift r_label=$label; fi
            done
        done
        local pick=antidoom-$q-ste$([ "$r" -gt 1 ] && echo "$r")
        cp "$out/$r_label.gguf" "$out/$pick.gguf"
        cp "$out/$r_label.adapter.gguf" "$out/adapter-$q-ste$([ "$r" -gt 1 ] && echo "$r").gguf"
        labels="$labels $pick"
        echo "round $r pick: $pick (= $r_label: shortfall $r_score, drift $r_drift %)"
        if better "$r_score" "$r_drift" "$best_score" "$best_drift"; then
            best_score=$r_score best_drift=$r_drift best_label=$pick
        fi
        prev=$out/$pick.gguf
        awk -v x="$r_score" 'BEGIN { exit !(x == 0) }' && { echo "round $r: validation loop and chosen_win goals met"; break; }
    done
    echo "$best_label" > "$out/selected-$q.txt"
    echo "selected on validation: $best_label (shortfall $best_score, drift $best_drift %)"
}
