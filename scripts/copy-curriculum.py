#!/usr/bin/env python3
"""scripts/copy-curriculum.py OUT LIST.bin AGAIN.bin N_VOCAB N_IDS [N_TOKENS] — the copy curriculum of the skills model
(scripts/make-skills-model.sh stage 5): uint32 tokens for bonsai-train-lm --data. Each document is the tokens of
"list:\\n" (LIST.bin), a block of 8-16 random learned tokens (N_IDS ids drawn once from 256..N_VOCAB-4, the byte-level
BPE's merges, the delimiters' own ids left out; all of them with N_IDS 0), the tokens of "again:\\n" (AGAIN.bin), the same block, and a newline. Only finding the
block predicts its second half (an induction task; chance ln N_IDS per token), which the mix's copy documents alone do
not teach a model this small within its schedule (data/README.md). Deterministic (seed 1); N_TOKENS defaults to
1 000 000.
"""
import os, random, struct, sys


def read_ids(path):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def main():
    out, list_bin, again_bin, n_vocab = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    n_ids = int(sys.argv[5])
    n_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 1000000
    head, mid = read_ids(list_bin), read_ids(again_bin)
    if not head or not mid:
        sys.exit("copy-curriculum: empty delimiter token file")
    pool = [i for i in range(256, n_vocab - 3) if i not in head + mid]
    rng, toks = random.Random(1), []
    if 0 < n_ids < len(pool):
        pool = sorted(rng.sample(pool, n_ids))
    while len(toks) < n_tokens:
        block = [rng.choice(pool) for _ in range(rng.randint(8, 16))]
        toks += head + block + mid + block + [10]
    with open(out + ".tmp", "wb") as f:
        f.write(struct.pack(f"<{len(toks)}I", *toks))
    os.replace(out + ".tmp", out)
    print(f"copy-curriculum: {len(toks)} tokens, blocks of 8-16 out of {len(pool)} ids -> {out}")


main()
