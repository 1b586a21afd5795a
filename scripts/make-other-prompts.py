#!/usr/bin/env python3
"""scripts/make-other-prompts.py OUT.jsonl [N] — chat prompts from a source no model of the project was trained on and
no stage of the antidoom recipe reads: the openings (first four words) of sentences in the licence texts that
base-files installs in /usr/share/common-licenses (GPL-3, Apache-2.0, MPL-2.0, Artistic, LGPL-2.1, GFDL-1.3). One
prompt per distinct opening, in file order, every k-th kept so N spread over all the files (default 120). The loop
rate on them is the "other text" figure of notes/antidoom-results.md."""
import json
import re
import sys

FILES = ["GPL-3", "Apache-2.0", "MPL-2.0", "Artistic", "LGPL-2.1", "GFDL-1.3"]


def openings(text):
    """The first four words of each sentence of text that starts with a capital letter and has only plain words."""
    flat = re.sub(r"\s+", " ", text)
    for sent in re.split(r"(?<=[.!?])\s+", flat):
        words = sent.strip().split(" ")
        if len(words) < 6 or not words[0][:1].isupper():
            continue
        head = words[:4]
        if all(re.fullmatch(r"[A-Za-z][A-Za-z'-]*,?", w) for w in head):
            yield " ".join(head).rstrip(",")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make-other-prompts.py OUT.jsonl [N]")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    seen, rows = set(), []
    for name in FILES:
        with open("/usr/share/common-licenses/" + name, encoding="utf-8") as f:
            for o in openings(f.read()):
                if o.lower() not in seen:
                    seen.add(o.lower())
                    rows.append({"prompt": o, "source": "common-licenses/" + name})
    if len(rows) < n:
        sys.exit(f"make-other-prompts: only {len(rows)} openings, {n} asked")
    step = len(rows) / n
    picked = [rows[int(i * step)] for i in range(n)]
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in picked:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    import os
    os.replace(tmp, sys.argv[1])
    print(f"{len(picked)} prompts of {len(rows)} openings -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
