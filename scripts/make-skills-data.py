#!/usr/bin/env python3
"""scripts/make-skills-data.py WORK PACKAGES INCLUDE_DIR SERVICES TASKS_DIR — the training text, held-out text and
task files of the skills model (called by scripts/make-skills-model.sh, after scripts/make-chat-data.py has written
WORK/chat.txt and WORK/prompts-heldout.jsonl).

Sources (Debian packages only):
  - WORK/chat.txt: the fortunes chat (make-chat-data.py: ChatML exchanges with the marker bytes 0x01 / 0x02, the
    held-out exchanges last; their count is the line count of WORK/prompts-heldout.jsonl). Open chat: where a weak
    model loops.
  - PACKAGES: a Debian Packages index (control stanzas of the archive's binary packages). Each stanza is cut down to
    Package, Source, Version, Architecture, Description (its first line), Section, Priority, Filename. The
    packages of every 10th source package (by a hash of the source name) are held out.
  - INCLUDE_DIR (libc6-dev's /usr/include) and SERVICES (netbase's /etc/services): never trained on; they give the
    second task set (a source the recipe never touched).

Training documents (blank-line separated, shuffled with a fixed seed), all built from training packages only:
  stanza   the cut-down control stanza;
  copy     "list:", 2-6 package names, "again:", the same names;
  recall   a short record (Package, Version, Architecture, Section, Description), "recall: FIELD", the field's line.
WORK/skills.txt: the shuffled training documents, then the held-out chat exchanges and held-out stanzas (the tail
that bonsai-train-lm --val-frac holds out). WORK/vocab.txt: plain text for the BPE vocabulary (training part only).
WORK/heldout-skills.txt: held-out stanzas and copy / recall documents as plain text (bonsai-perplexity).

Task files (docs/antidoom.md, the task-file format; prompts raw, no chat template):
  TASKS_DIR/control.jsonl  a held-out stanza up to Filename -> its Filename line (repeats the source name, version
                           and architecture from the prompt in the archive's fixed pool layout);
  TASKS_DIR/fields.jsonl   a held-out stanza, then the next one up to Priority -> its Priority and Filename lines
                           (the fields' fixed structure again, and the name and version from the prompt);
  TASKS_DIR/copy.jsonl     3-6 held-out package names, "again:" -> the list;
  TASKS_DIR/recall.jsonl   a held-out record, "recall: FIELD" -> that field's line;
  TASKS_DIR/hcopy.jsonl    as copy, with function names declared in the C headers (never trained on);
  TASKS_DIR/srecall.jsonl  as recall, with records made from /etc/services entries (never trained on).
Deterministic for given inputs.
"""
import hashlib, json, math, os, random, re, sys

N_TASKS = 100
FIELDS = ("Package", "Source", "Version", "Architecture", "Description", "Section", "Priority", "Filename")
RECORD = ("Package", "Version", "Architecture", "Section", "Description")
RECALL = ("Package", "Version", "Section", "Description")


def stanzas(path):
    """The Packages index as a list of dicts (continuation lines dropped), in file order."""
    out, cur = [], {}
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            if cur:
                out.append(cur)
            cur = {}
        elif not line[0].isspace() and ":" in line:
            k, v = line.split(":", 1)
            cur[k] = v.strip()
    if cur:
        out.append(cur)
    return out


def usable(s):
    """A stanza short and plain enough for a ctx-256 model: every field present, short lines, ASCII."""
    if not all(k in s for k in FIELDS if k != "Source"):
        return False
    text = "".join(s.get(k, "") for k in FIELDS)
    return (s["Architecture"] in ("amd64", "all") and len(s["Package"]) <= 32 and len(s["Description"]) <= 72
            and len(s["Filename"]) <= 96 and text.isascii())


def source_name(s):
    return s.get("Source", s["Package"]).split()[0]


def held_out(s):
    """Every 10th source package (by the MD5 of its name) is held out."""
    return int(hashlib.md5(source_name(s).encode()).hexdigest(), 16) % 10 == 0


def stanza_text(s, upto=None):
    keys = [k for k in FIELDS if k in s]
    if upto is not None:
        keys = keys[:keys.index(upto)]
    return "".join(f"{k}: {s[k]}\n" for k in keys)


def copy_doc(items):
    """(prompt, reference) of a copy document."""
    body = "".join(i + "\n" for i in items)
    return "list:\n" + body + "again:\n", body


def recall_doc(record, field):
    """(prompt, reference) of a recall document; record is a list of (key, value)."""
    body = "".join(f"{k}: {v}\n" for k, v in record)
    value = dict(record)[field]
    return body + f"recall: {field}\n", f"{field}: {value}\n"


def write_tasks(path, family, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for i, (p, r) in enumerate(pairs):
            f.write(json.dumps({"id": f"{family}-{i + 1:04d}", "family": family, "prompt": p, "reference": r}) + "\n")


def header_functions(include_dir):
    """Function names declared in the top-level C headers (extern declarations), sorted, unique."""
    names = set()
    pat = re.compile(r"^extern\s+[A-Za-z_][\w\s\*]*?\b([a-z_][a-z0-9_]{2,24})\s*\(")
    for fn in sorted(os.listdir(include_dir)):
        if fn.endswith(".h") and os.path.isfile(os.path.join(include_dir, fn)):
            for line in open(os.path.join(include_dir, fn), encoding="utf-8", errors="replace"):
                m = pat.match(line)
                if m and not m.group(1).startswith("__"):
                    names.add(m.group(1))
    return sorted(names)


def service_records(path):
    """/etc/services entries as records: Service, Port, Protocol, Aliases (or '-'), Comment (or '-')."""
    recs = []
    for line in open(path, encoding="utf-8", errors="replace"):
        body, _, comment = line.rstrip("\n").partition("#")
        parts = body.split()
        if len(parts) < 2 or "/" not in parts[1]:
            continue
        port, proto = parts[1].split("/", 1)
        recs.append([("Service", parts[0]), ("Port", port), ("Protocol", proto),
                     ("Aliases", " ".join(parts[2:]) or "-"), ("Comment", comment.strip() or "-")])
    return recs


def main():
    work, packages, include_dir, services, tasks_dir = sys.argv[1:6]
    rng = random.Random(7)
    # chat: the held-out exchanges are the last ones
    chat = open(f"{work}/chat.txt", encoding="utf-8").read()
    exchanges = ["\x01user" + e for e in chat.split("\x01user")[1:]]
    n_held = sum(1 for _ in open(f"{work}/prompts-heldout.jsonl", encoding="utf-8"))
    chat_train, chat_held = exchanges[:-n_held], exchanges[-n_held:]
    # short chat training is what keeps open chat looping: every CHAT_EVERY-th training exchange only
    chat_train = chat_train[::int(os.environ.get("BONSAI_SKILLS_CHAT_EVERY", "2"))]
    with open(f"{work}/prompts-train-skills.jsonl", "w", encoding="utf-8") as f:
        for e in chat_train:
            f.write(json.dumps({"prompt": e[len("\x01user\n"):e.index("\x02")], "source": "fortunes-train"}) + "\n")

    all_st = [s for s in stanzas(packages) if usable(s)]
    train = [s for s in all_st if not held_out(s)]
    held = [s for s in all_st if held_out(s)]
    rng.shuffle(train)
    rng.shuffle(held)
    # the mix: copying and recall are what a small model learns last, so they get most of the documents
    n_st, n_copy, n_rec = (int(x) for x in os.environ.get("BONSAI_SKILLS_MIX", "1500,7000,5000").split(","))
    docs = [stanza_text(s) for s in train[:n_st]]
    names = [s["Package"] for s in train]
    for _ in range(n_copy):
        p, r = copy_doc(rng.sample(names, rng.randint(2, 6)))
        docs.append(p + r)
    pool = train[n_st:] if len(train) > n_st + n_rec else train
    for i in range(n_rec):
        s = pool[i % len(pool)]
        p, r = recall_doc([(k, s[k]) for k in RECORD], rng.choice(RECALL))
        docs.append(p + r)
    docs += chat_train
    rng.shuffle(docs)

    # held-out material: stanzas for the tail / perplexity, then the task prompts from the rest
    rng = random.Random(11)  # the task files do not depend on the training mix
    tail_st, task_st = held[:200], held[200:]
    held_names = [s["Package"] for s in task_st]
    control = [(stanza_text(s, "Filename"), f"Filename: {s['Filename']}\n") for s in task_st[:N_TASKS]]
    copy = [copy_doc(rng.sample(held_names, rng.randint(3, 6))) for _ in range(N_TASKS)]
    recall = [recall_doc([(k, s[k]) for k in RECORD], RECALL[i % len(RECALL)])
              for i, s in enumerate(task_st[N_TASKS:2 * N_TASKS])]
    # fields: a full stanza, then the next one up to Priority -> the rest (the fixed structure's lines again)
    fields = [(stanza_text(a) + "\n" + stanza_text(b, "Priority"),
               f"Priority: {b['Priority']}\nFilename: {b['Filename']}\n")
              for a, b in zip(task_st[2 * N_TASKS:3 * N_TASKS], task_st[3 * N_TASKS:4 * N_TASKS])]
    funcs = header_functions(include_dir)
    hcopy = [copy_doc(rng.sample(funcs, rng.randint(3, 6))) for _ in range(N_TASKS)]
    recs = service_records(services)
    srecall = []
    for i, rec in enumerate(rng.sample(recs, min(N_TASKS, len(recs)))):
        srecall.append(recall_doc(rec, ("Service", "Port", "Protocol", "Aliases")[i % 4]))

    def norm(t):  # training text has no marker-free blank runs
        return t.rstrip("\n") + "\n\n"
    body = "".join(norm(d) if not d.startswith("\x01") else d for d in docs)
    tail = "".join(chat_held) + "".join(norm(stanza_text(s)) for s in tail_st)
    open(f"{work}/skills.txt", "w", encoding="utf-8").write(body + tail)
    # bonsai-train-lm --val-frac: the tail's share, rounded down (the held-out windows hold no training document)
    share = len(tail.encode()) / len((body + tail).encode())
    open(f"{work}/val-frac", "w").write(f"{math.floor(1000 * share) / 1000}\n")
    plain = "".join(norm(stanza_text(s)) for s in train[:n_st])
    open(f"{work}/vocab.txt", "w", encoding="utf-8").write(
        open(f"{work}/corpus-fortunes.txt", encoding="utf-8").read() + "\n" + plain)
    heldout_docs = [stanza_text(s) for s in tail_st[:100]] + [p + r for p, r in copy[:50]] + \
        [p + r for p, r in recall[:50]]
    open(f"{work}/heldout-skills.txt", "w", encoding="utf-8").write("".join(norm(d) for d in heldout_docs))
    os.makedirs(tasks_dir, exist_ok=True)
    for fam, pairs in (("control", control), ("fields", fields), ("copy", copy), ("recall", recall), ("hcopy", hcopy),
                       ("srecall", srecall)):
        write_tasks(f"{tasks_dir}/{fam}.jsonl", fam, pairs)
    total = len((body + tail).encode())
    print(f"skills-data: {len(docs)} training documents ({len(chat_train)} chat, {n_st} stanzas, {n_copy} copy, "
          f"{n_rec} recall), {len(train)} train / {len(held)} held-out stanzas, {total} bytes (tail "
          f"{len(tail.encode()) / total:.4f}); chat share {sum(len(e.encode()) for e in chat_train) / total:.3f}; "
          f"tasks: {len(control)} control, {len(fields)} fields, {len(copy)} copy, {len(recall)} recall, "
          f"{len(hcopy)} hcopy "
          f"({len(funcs)} header functions), {len(srecall)} srecall ({len(recs)} service entries)")


main()
