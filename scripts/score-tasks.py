#!/usr/bin/env python3
"""scripts/score-tasks.py BUILD MODEL TASKS.jsonl... [-- BONSAI-RUN-OPTIONS...] — greedy task scores of MODEL on task
files (the task-file format of docs/antidoom.md: raw-completion prompts only) with build/tools/bonsai-run.

For every task: bonsai-run -m MODEL -p PROMPT --temp 0 -n N (N = 32 + 8 tokens), then
  line   the continuation's first line equals the reference's first line (exact match);
  tok    token accuracy over the first 32 tokens of the reference (teacher-free: the continuation and the reference
         are tokenized with the model's tokenizer, bonsai-train-lm --tokenize, and compared position by position).
Per family: n, line exact match k/n with its 95 % Wilson interval, mean token accuracy. Options after "--" go to
bonsai-run (e.g. --repeat-penalty 1.1, --dry-multiplier 0.8). BONSAI_TASKS_LIMIT=K scores the first K tasks of a
family only. Prints one line per family.
"""
import array, json, math, os, subprocess, sys, tempfile

N_TOK = 32


def wilson(k, n, z=1.96):
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def tokenize(tools, model, text, tmp):
    src, dst = os.path.join(tmp, "t.txt"), os.path.join(tmp, "t.bin")
    open(src, "w", encoding="utf-8").write(text)
    subprocess.run([f"{tools}/bonsai-train-lm", "--tokenize", src, "-m", model, "-o", dst], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a = array.array("I")
    a.frombytes(open(dst, "rb").read())
    return list(a)


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    build, model, files = args[0], args[1], args[2:]
    tools = f"{build}/tools"
    limit = int(os.environ.get("BONSAI_TASKS_LIMIT", "0"))
    fams = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            for line in open(path, encoding="utf-8"):
                t = json.loads(line)
                if t.get("chat"):
                    continue
                fam = fams.setdefault(t["family"], [0, 0, 0.0])
                if limit and fam[0] >= limit:
                    continue
                out = subprocess.run([f"{tools}/bonsai-run", "-m", model, "-p", t["prompt"], "--temp", "0", "-n",
                                      str(N_TOK + 8), "-t", "2"] + extra, check=True,
                                     capture_output=True).stdout.decode("utf-8", "replace")
                ref = t["reference"]
                fam[0] += 1
                fam[1] += out.split("\n")[0] == ref.split("\n")[0]
                r = tokenize(tools, model, ref, tmp)[:N_TOK]
                o = tokenize(tools, model, out, tmp) if out else []
                fam[2] += sum(1 for i, x in enumerate(r) if i < len(o) and o[i] == x) / max(1, len(r))
    label = os.path.basename(model) + (" " + " ".join(extra) if extra else "")
    for name, (n, k, acc) in fams.items():
        lo, hi = wilson(k, n)
        print(f"tasks {label}: {name:8s} n {n:3d}  line {k:3d}/{n} = {100 * k / max(1, n):5.1f} % "
              f"(95 % CI {100 * lo:.1f}-{100 * hi:.1f})  tok@{N_TOK} {100 * acc / max(1, n):5.1f} %")


main()
