#!/usr/bin/env bash
# scripts/make-val-data.sh — the demo's validation data and tether text, from fortunes the looping model never
# saw: Debian's `fortunes` package (files wisdom, platitudes, miscellaneous; scripts/make-corpus.sh
# --extra), minus any entry also in data/corpus/fortunes.txt, split by scripts/make-chat-data.py --validation:
#   data/val/prompts.jsonl  validation prompts (the first 4 words of every 4th entry)
#   data/val/text.txt       validation text (those entries; the held-out text's role, on other fortunes)
#   data/val/tether.txt     the other entries: the plain-text tether of the STE runs
#   data/val/tether-prompts.jsonl  their openings: extra prompts to mine pairs on (unseen, like the held-out ones)
#   data/val/prompts-questions.jsonl  question-style validation prompts ("Q: " + a question's first 3 words, the form
#                           of the held-out riddle prompts) from the package's other files (make-corpus.sh --questions)
#   data/val/train-riddles.txt  the riddles ("Q:/A:" entries) of the model's training text (data/corpus/fortunes.txt
#                           outside data/heldout.txt): the text of the validation perplexity drift
# Deterministic for a given package version; prints the corpus line and the split.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/make-corpus.sh" --extra "$tmp/extra.txt"
python3 "$root/scripts/make-chat-data.py" --validation "$tmp/extra.txt" "$root/data/corpus/fortunes.txt" "$tmp"
mkdir -p "$root/data/val"
mv "$tmp/prompts-val.jsonl" "$root/data/val/prompts.jsonl"
mv "$tmp/val.txt" "$root/data/val/text.txt"
mv "$tmp/tether.txt" "$root/data/val/tether.txt"
mv "$tmp/prompts-tether.jsonl" "$root/data/val/tether-prompts.jsonl"
mv "$tmp/COPYRIGHT.fortunes" "$root/data/val/COPYRIGHT.fortunes"
"$root/scripts/make-corpus.sh" --questions "$tmp/questions.txt"
python3 "$root/scripts/make-chat-data.py" --questions "$tmp/questions.txt" "$tmp" "$root/data/corpus/fortunes.txt" \
    "$tmp/extra.txt"
mv "$tmp/prompts-questions.jsonl" "$root/data/val/prompts-questions.jsonl"
python3 "$root/scripts/make-chat-data.py" --riddles "$root/data/corpus/fortunes.txt" "$root/data/heldout.txt" \
    "$root/data/val/train-riddles.txt"
# the question prompts split in two (odd / even lines): bonsai-antidoom's validation loop rate reads the first, and
# the second is a prompt set no stage of it touches, evaluated at the end beside the held-out set
awk 'NR % 2 == 1' "$root/data/val/prompts-questions.jsonl" > "$root/data/val/prompts-questions-pick.jsonl"
awk 'NR % 2 == 0' "$root/data/val/prompts-questions.jsonl" > "$root/data/val/prompts-questions-unseen.jsonl"
