#!/usr/bin/env bash
# bench/drafter-accept.sh [BUILD_DIR] — a trained DSpark drafter on its target over held-out prompts
# (docs/dspark.md §11.4): every prompt through the chat template, greedy, bonsai-speculative with --spec-type none
# and with draft-dspark at a fixed draft length (--no-spec-adaptive); prints per run type the summed decode time and
# tok/s, the drafted / accepted counts, the mean accepted drafts per verify step and tokens per target pass, and how
# many outputs differ from plain decoding. Env: MODEL (data/bonsai-loop-1bit.gguf), DRAFTER
# (data/bonsai-loop-1bit-drafter.gguf), PROMPTS (data/prompts/heldout.jsonl), NMAX (4), NPRED (128), THREADS (1),
# LIMIT (0: all prompts), ADAPTIVE (0; 1: the online cost model chooses the draft length, §5.1), ARGS (more
# bonsai-speculative options for both runs, e.g. "--lora out/qs/antidoom-adapter.gguf": a de-looped target).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
MODEL=${MODEL:-data/bonsai-loop-1bit.gguf}
DRAFTER=${DRAFTER:-data/bonsai-loop-1bit-drafter.gguf}
PROMPTS=${PROMPTS:-data/prompts/heldout.jsonl}
NMAX=${NMAX:-4}
NPRED=${NPRED:-128}
THREADS=${THREADS:-1}
LIMIT=${LIMIT:-0}
ADAPT=(--no-spec-adaptive)
[ "${ADAPTIVE:-0}" = 1 ] && ADAPT=()
read -r -a EXTRA <<< "${ARGS:-}"
command -v python3 >/dev/null || { echo "bench/drafter-accept.sh needs python3"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$PROMPTS" "$LIMIT" > "$dir/prompts.txt" <<'PY'
import json, sys
n = int(sys.argv[2])
for i, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    if n and i >= n: break
    p = json.loads(line)["prompt"]
    # the model's plain ChatML (no <think>), escaped for bonsai-speculative -e
    t = "<|im_start|>user\n" + p.strip() + "<|im_end|>\n<|im_start|>assistant\n"
    print(t.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))
PY
i=0
while IFS= read -r p; do
    for t in none draft-dspark; do
        "$B/tools/bonsai-speculative" -m "$MODEL" -md "$DRAFTER" --spec-type "$t" --spec-draft-n-max "$NMAX" \
            "${ADAPT[@]}" "${EXTRA[@]}" -e -p "$p" -n "$NPRED" -t "$THREADS" > "$dir/$i.$t" 2>/dev/null
    done
    i=$((i + 1))
done < "$dir/prompts.txt"
python3 - "$dir" "$i" <<'PY'
import re, sys
d, n = sys.argv[1], int(sys.argv[2])
tot = {}
ms = [0.0, 0.0, 0.0, 0.0]  # draft, verify, rerun, drafter process (bonsai-speculative's "spec: ms" line)
diff = 0
for i in range(n):
    text = {}
    for t in ("none", "draft-dspark"):
        s = open(f"{d}/{i}.{t}", encoding="utf-8", errors="replace").read()
        text[t] = s.split("\n\nencoded ")[0]
        m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", s)
        a = tot.setdefault(t, [0, 0.0, 0, 0, 0])
        a[0] += int(m.group(1)); a[1] += float(m.group(2))
        a[2] += int(re.search(r"n_drafted = (\d+)", s).group(1))
        a[3] += int(re.search(r"n_accept  = (\d+)", s).group(1))
        a[4] += int(re.search(r"#gen drafts = (\d+)", s).group(1))
        m = re.search(r"ms draft ([\d.]+), verify ([\d.]+), rerun ([\d.]+), drafter process ([\d.]+)", s)
        if m and t == "draft-dspark":
            ms = [x + float(y) for x, y in zip(ms, m.groups())]
    # the speculative loop may overshoot the token budget by up to a round: compare the common length
    a, b = text["none"], text["draft-dspark"]
    k = min(len(a), len(b))
    diff += a[:k] != b[:k]
print(f"{n} prompts, greedy; outputs differing from plain decoding (over their common length): {diff}")
for t, (tok, sec, dr, acc, rounds) in tot.items():
    per = acc / rounds if rounds else 0
    print(f"{t:13s} {tok:6d} tokens in {sec:7.3f} s = {tok / sec:8.1f} tok/s; drafted {dr}, accepted {acc}, "
          f"verify rounds {rounds}: {per:.3f} accepted drafts per verify step, {1 + per:.3f} tokens per target pass")
print(f"draft-dspark time: drafting {ms[0]:.1f} ms, verify passes {ms[1]:.1f} ms, re-runs {ms[2]:.1f} ms, "
      f"drafter K/V injection {ms[3]:.1f} ms")
r = tot["draft-dspark"][0] / tot["draft-dspark"][1] / (tot["none"][0] / tot["none"][1])
print(f"speed ratio draft-dspark / none: {r:.3f}")
PY
