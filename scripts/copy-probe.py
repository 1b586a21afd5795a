#!/usr/bin/env python3
"""scripts/copy-probe.py KIND OUT [PACKAGES] — the probe data of data/README.md's copying probes (the skills model).

KIND names:   copy documents of training package names only ("list:", 2-4 names, then three times "again:" and the
              names), as text for bonsai-train-lm --tokenize; needs PACKAGES (the Packages index make-skills-model.sh
              writes to its work folder) and uses make-skills-data.py's stanza filter and held-out split;
KIND fixed:   uint32 tokens: blocks of 12 random ids in 300..999, each block three times (a copy at a fixed distance);
KIND varied:  the same with blocks of 4-24 ids (only matching the content finds the copy);
KIND small:   as varied, with 64 ids (300..363);
KIND delimited: uint32 tokens: id 64, a block of 8-16 random ids in 0..63, id 65, the same block once more (an
              induction task: the copied half is predictable only by finding the block; chance ln 64 per token).
Deterministic.
"""
import random, struct, sys


def names_text(packages, out):
    src = open(__file__.replace("copy-probe.py", "make-skills-data.py"), encoding="utf-8").read()
    ns = {}
    exec(src.rsplit("\nmain()", 1)[0], ns)  # the stanza reader, filter and held-out split, without running main
    train = [s for s in ns["stanzas"](packages) if ns["usable"](s) and not ns["held_out"](s)]
    names = [s["Package"] for s in train]
    rng = random.Random(5)
    with open(out, "w", encoding="utf-8") as f:
        for _ in range(30000):
            body = "".join(n + "\n" for n in rng.sample(names, rng.randint(2, 4)))
            f.write("list:\n" + body + ("again:\n" + body) * 3 + "\n")


def blocks(out, lo, hi, seed, n_ids=700):
    rng, toks = random.Random(seed), []
    while len(toks) < 600000:
        b = [rng.randrange(300, 300 + n_ids) for _ in range(lo if lo == hi else rng.randint(lo, hi))]
        toks += b * 3
    open(out, "wb").write(struct.pack(f"<{len(toks)}I", *toks))


def delimited(out, seed=1, n=400000):
    rng, toks = random.Random(seed), []
    while len(toks) < n:
        b = [rng.randrange(64) for _ in range(rng.randint(8, 16))]
        toks += [64] + b + [65] + b
    open(out, "wb").write(struct.pack(f"<{len(toks)}I", *toks))


kind, out = sys.argv[1], sys.argv[2]
if kind == "names":
    names_text(sys.argv[3], out)
elif kind == "delimited":
    delimited(out)
elif kind in ("fixed", "varied", "small"):
    blocks(out, *{"fixed": (12, 12, 1), "varied": (4, 24, 2), "small": (4, 24, 3, 64)}[kind])
else:
    sys.exit("copy-probe: KIND must be names, fixed, varied, small or delimited")
