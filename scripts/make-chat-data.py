#!/usr/bin/env python3
"""scripts/make-chat-data.py CORPUS OUTDIR [HELDOUT_SHARE [GROUP]] — the chat-formatted training text and the
prompt files for the small looping model (issue #8; called by scripts/make-model.sh).

Each fortune (one paragraph of CORPUS, data/corpus/fortunes.txt) becomes one ChatML exchange:
user = its first 4 words, assistant = the rest of the entry followed by the next GROUP-1 entries
(default GROUP 4; newlines kept), i.e. exactly what
bonsai-mine-pairs / bonsai-eval-loops render with --thinking -1 for the prompt {"prompt": opening}:
    <|im_start|>user\\n{opening}<|im_end|>\\n<|im_start|>assistant\\n{rest}<|im_end|>\\n
bonsai-train-lm --tokenize does not parse special tokens, so OUTDIR/chat.txt carries the byte 0x01 for
<|im_start|> and 0x02 for <|im_end|> (neither occurs in the corpus); make-model.sh maps those byte tokens
(ids 1 and 2) to the control tokens afterwards. The last HELDOUT_SHARE (default 0.1) of the entries are
held out: they come last in chat.txt (train-lm --val-frac) and give heldout.txt (plain text for
bonsai-perplexity) and prompts-heldout.jsonl; the others give prompts-train.jsonl. Deterministic.
"""
import json, sys

corpus, outdir = sys.argv[1], sys.argv[2]
share = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
GROUP = int(sys.argv[4]) if len(sys.argv) > 4 else 4
entries = [e.strip("\n") for e in open(corpus, encoding="utf-8").read().split("\n\n") if e.strip()]
n_held = max(1, int(len(entries) * share))
split = len(entries) - n_held
chat, prompts = [], {"train": [], "heldout": []}
held_bytes = 0
for i, e in enumerate(entries):
    words = e.split()
    if len(words) < 6:          # too short to have an opening and a continuation
        continue
    opening = " ".join(words[:4])
    # the rest of the entry after the 4th word, original line breaks kept
    pos = 0
    for w in words[:4]:
        pos = e.index(w, pos) + len(w)
    rest = e[pos:].strip()
    # the assistant keeps going: the rest of this entry, then the next entries of the same split
    # (GROUP in all), so answers are long (~100-200 tokens) and a weak model must decide late when
    # to stop — greedy decoding then falls into loops
    last = split if i < split else len(entries)
    nxt = [entries[j] for j in range(i + 1, min(i + GROUP, last))]
    rest = "\n\n".join([rest] + nxt)
    chat.append("\x01user\n" + opening + "\x02\n\x01assistant\n" + rest + "\x02\n")
    part = "heldout" if i >= split else "train"
    prompts[part].append(opening)
    if part == "heldout":
        held_bytes += len(chat[-1].encode("utf-8"))
open(f"{outdir}/chat.txt", "w", encoding="utf-8").write("".join(chat))
open(f"{outdir}/heldout.txt", "w", encoding="utf-8").write("\n\n".join(entries[split:]) + "\n")
for part in ("train", "heldout"):
    with open(f"{outdir}/prompts-{part}.jsonl", "w", encoding="utf-8") as f:
        for p in prompts[part]:
            f.write(json.dumps({"prompt": p, "source": "fortunes-" + part}) + "\n")
total = len("".join(chat).encode("utf-8"))
print(f"chat-data: {len(chat)} exchanges ({len(prompts['train'])} train, {len(prompts['heldout'])} held out), "
      f"{total} bytes, held-out share {held_bytes / total:.4f}")
