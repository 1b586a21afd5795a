#!/usr/bin/env bash
# bench/spec-rollback.sh [BUILD_DIR] — the CPU engine's two ways to roll rejected drafts back, side by side:
# per-token snapshots (bonsai-speculative's default --spec-snap-mem 256: a snapshot after every verified token, a
# rejection restores one) vs restore + re-run (--spec-snap-mem 0: one snapshot before the verify pass, restored, the
# accepted prefix re-run). `bonsai-speculative --temp 0 --no-adaptive -n NPRED` on bonsai-mkmodel --seed 1 models
# quantized to TYPE, with a random q8_0 drafter of their width (every draft rejected: bench/spec-fixture.sh) or
# the oracle (every draft accepted: only the snapshot copies differ); the two modes alternate, best of ROUNDS each.
# Env: PRESETS ("small mid"), TYPE (Q1_0), THREADS (2), NPRED (128), ROUNDS (3).
# Prints one table: decode t/s of each mode and their ratio (> 1: per-token snapshots faster).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PRESETS=${PRESETS:-small mid}
TYPE=${TYPE:-Q1_0}
THREADS=${THREADS:-2}
NPRED=${NPRED:-128}
ROUNDS=${ROUNDS:-3}
. bench/spec-fixture.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ninja -C "$B" tools/bonsai-speculative tools/bonsai-mkmodel tools/bonsai-mkdrafter tools/bonsai-quantize \
    tools/bonsai-gguf >/dev/null

# speed ARGS...: the best decode t/s of ROUNDS runs of bonsai-speculative ARGS (one per call: the caller alternates)
speed() {
    local log v
    log=$("$B/tools/bonsai-speculative" --temp 0 --no-adaptive -n "$NPRED" -t "$THREADS" -p "Once upon a time" "$@" 2>&1) ||
        true
    v=$(sed -n 's/^decoded .* speed: *\([0-9.]*\) t\/s.*/\1/p' <<< "$log")
    [ -n "$v" ] || { echo "bonsai-speculative $*: $(tail -1 <<< "$log")" >&2; return 1; }
    echo "$v"
}

printf '\nbonsai-speculative, %s, %s threads, %s greedy tokens, best of %s alternating runs\n\n' "$TYPE" "$THREADS" \
    "$NPRED" "$ROUNDS"
printf '| model | drafter | drafts | per-token snapshots t/s | restore + re-run t/s | ratio |\n'
printf '|---|---|---:|---:|---:|---:|\n'
for preset in $PRESETS; do
    m=$dir/$preset.gguf d=$dir/$preset-drafter.gguf
    spec_fixture "$B" "$preset" "$TYPE" "$THREADS" "$m" "$d"
    for drafter in random oracle; do
        for n in 3 8; do
            args=(-m "$m" --spec-draft-n-max "$n")
            if [ "$drafter" = random ]; then args+=(-md "$d" --spec-type draft-dspark); else args+=(--spec-type draft-oracle); fi
            best_s=0 best_r=0
            for _ in $(seq "$ROUNDS"); do
                s=$(speed "${args[@]}") || exit 1
                r=$(speed "${args[@]}" --spec-snap-mem 0) || exit 1
                best_s=$(echo "if ($s > $best_s) $s else $best_s" | bc -l)
                best_r=$(echo "if ($r > $best_r) $r else $best_r" | bc -l)
            done
            printf '| %s | %s | %s | %.1f | %.1f | %.2fx |\n' "$preset" "$drafter" "$n" "$best_s" "$best_r" \
                "$(echo "$best_s / $best_r" | bc -l)"
        done
    done
done
