#!/usr/bin/env python3
"""scripts/make-chat-data.py CORPUS OUTDIR [HELDOUT_SHARE [GROUP]] — the chat-formatted training text and the
prompt files for the small looping model (called by scripts/make-model.sh).
scripts/make-chat-data.py --validation EXTRA CORPUS OUTDIR — validation data from text the model never saw
(EXTRA: scripts/make-corpus.sh --extra; called by scripts/make-val-data.sh): EXTRA's entries minus any also in
CORPUS; every 4th one (from the first) is a validation entry: OUTDIR/val.txt (plain text, as heldout.txt) and
OUTDIR/prompts-val.jsonl (their openings, as below); the others give OUTDIR/tether.txt (plain text for
bonsai-ftpo-train --tether-text) and OUTDIR/prompts-tether.jsonl (their openings: prompts to mine pairs on). So validation prompts, validation text and tether text are disjoint from
each other, from the model's training text and from the held-out set.
scripts/make-chat-data.py --questions QUESTIONS OUTDIR SEEN... — question-style validation prompts (QUESTIONS:
scripts/make-corpus.sh --questions; called by scripts/make-val-data.sh): for every entry of QUESTIONS not in any
SEEN file that opens with a question, "Q: " + the question's first 3 words -> OUTDIR/prompts-questions.jsonl, except
prompts equal to the opening of a SEEN entry (the SEEN files hold every train, held-out, validation and tether
prompt's entry, and a prompt with the same text would give the same completion). The
held-out prompts are riddle openings of that form ("Q: What is purple"); the validation prompts above are openings
of quotations, which rank candidates' held-out loop rates less well (notes/e2e-results.md).
scripts/make-chat-data.py --riddles CORPUS HELDOUT OUT — the riddles ("Q:" entries) of CORPUS that are not in HELDOUT
(the model's training text, not the held-out set): OUT, plain text for the validation perplexity drift.

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
import json, re, sys


def read_entries(path):
    """The non-empty paragraphs of a corpus file, without their trailing newlines."""
    return [e.strip("\n") for e in open(path, encoding="utf-8").read().split("\n\n") if e.strip()]


def opening(entry):
    """The prompt of an entry (its first 4 words), or None when it is too short for an opening and a continuation."""
    words = entry.split()
    return " ".join(words[:4]) if len(words) >= 6 else None


def write_prompts(path, openings, source):
    with open(path, "w", encoding="utf-8") as f:
        for p in openings:
            f.write(json.dumps({"prompt": p, "source": source}) + "\n")


QUESTION = re.compile(r"(?:Q:\s*)?([A-Z][^.!?\"]*\?)")
QUESTION_WORDS = ("what", "why", "how", "who", "where", "when", "which", "did", "do", "does", "is", "are", "can", "have",
                  "has", "if")


def question_prompt(entry):
    """The question-style prompt of an entry ("Q: " + the first 3 words of the question it opens with: a sentence in
    its first two lines that ends in "?", has at least 4 words and starts with a question word), or None."""
    m = QUESTION.match(" ".join(entry.split("\n")[:2]).strip())
    if not m:
        return None
    words = m.group(1).split()
    if len(words) < 4 or not words[0].lower().startswith(QUESTION_WORDS):
        return None
    return "Q: " + " ".join(words[:3])


if sys.argv[1] == "--questions":
    questions, outdir, seen_files = sys.argv[2], sys.argv[3], sys.argv[4:]
    seen_entries = [e for f in seen_files for e in read_entries(f)]
    seen, seen_openings = set(seen_entries), set(filter(None, map(opening, seen_entries)))
    entries = [e for e in read_entries(questions) if e not in seen]
    # a prompt is its text: one equal to an opening of a SEEN entry (a train, held-out, validation or tether prompt:
    # "Q: What is the" is both) would repeat that prompt's greedy completion, so it is dropped
    candidates = [p for p in map(question_prompt, entries) if p]
    prompts = [p for p in candidates if p not in seen_openings]
    write_prompts(f"{outdir}/prompts-questions.jsonl", prompts, "fortunes-questions")
    print(f"question prompts: {len(prompts)} of {len(entries)} entries ({len(read_entries(questions)) - len(entries)} "
          f"entries also in {' '.join(seen_files)} dropped, {len(candidates) - len(prompts)} prompts equal to their "
          f"openings dropped)")
    sys.exit(0)

if sys.argv[1] == "--riddles":
    corpus, heldout, out = sys.argv[2], sys.argv[3], sys.argv[4]
    held = set(read_entries(heldout))
    riddles = [e for e in read_entries(corpus) if e.startswith("Q:") and e not in held]
    open(out, "w", encoding="utf-8").write("\n\n".join(riddles) + "\n")
    print(f"train riddles: {len(riddles)} Q:/A: entries of {corpus} outside {heldout}")
    sys.exit(0)

if sys.argv[1] == "--validation":
    extra, corpus, outdir = sys.argv[2], sys.argv[3], sys.argv[4]
    seen = set(read_entries(corpus))
    entries = [e for e in read_entries(extra) if e not in seen]
    val = entries[0::4]
    rest = [e for i, e in enumerate(entries) if i % 4 != 0]
    open(f"{outdir}/val.txt", "w", encoding="utf-8").write("\n\n".join(val) + "\n")
    open(f"{outdir}/tether.txt", "w", encoding="utf-8").write("\n\n".join(rest) + "\n")
    openings = [o for o in map(opening, val) if o]
    write_prompts(f"{outdir}/prompts-val.jsonl", openings, "fortunes-val")
    tether_openings = [o for o in map(opening, rest) if o]
    write_prompts(f"{outdir}/prompts-tether.jsonl", tether_openings, "fortunes-tether")
    print(f"validation data: {len(entries)} entries ({len(read_entries(extra)) - len(entries)} also in {corpus} dropped): "
          f"{len(val)} validation ({len(openings)} prompts), {len(rest)} tether ({len(tether_openings)} prompts)")
    sys.exit(0)

corpus, outdir = sys.argv[1], sys.argv[2]
share = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
GROUP = int(sys.argv[4]) if len(sys.argv) > 4 else 4
entries = read_entries(corpus)
n_held = max(1, int(len(entries) * share))
split = len(entries) - n_held
chat, prompts = [], {"train": [], "heldout": []}
held_bytes = 0
for i, e in enumerate(entries):
    first = opening(e)
    if first is None:
        continue
    # the rest of the entry after the 4th word, original line breaks kept
    pos = 0
    for w in e.split()[:4]:
        pos = e.index(w, pos) + len(w)
    rest = e[pos:].strip()
    # the assistant keeps going: the rest of this entry, then the next entries of the same split
    # (GROUP in all), so answers are long (~100-200 tokens) and a weak model must decide late when
    # to stop — greedy decoding then falls into loops
    last = split if i < split else len(entries)
    nxt = [entries[j] for j in range(i + 1, min(i + GROUP, last))]
    rest = "\n\n".join([rest] + nxt)
    chat.append("\x01user\n" + first + "\x02\n\x01assistant\n" + rest + "\x02\n")
    part = "heldout" if i >= split else "train"
    prompts[part].append(first)
    if part == "heldout":
        held_bytes += len(chat[-1].encode("utf-8"))
open(f"{outdir}/chat.txt", "w", encoding="utf-8").write("".join(chat))
open(f"{outdir}/heldout.txt", "w", encoding="utf-8").write("\n\n".join(entries[split:]) + "\n")
for part in ("train", "heldout"):
    write_prompts(f"{outdir}/prompts-{part}.jsonl", prompts[part], "fortunes-" + part)
total = len("".join(chat).encode("utf-8"))
print(f"chat-data: {len(chat)} exchanges ({len(prompts['train'])} train, {len(prompts['heldout'])} held out), "
      f"{total} bytes, held-out share {held_bytes / total:.4f}")
