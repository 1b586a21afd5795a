// tests/train/test_drafter_tool.c — bonsai-train-drafter as a program on the tiny random target: it trains and writes
// a drafter that llama.cpp loads and bonsai-speculative drafts with (greedy text equal to plain decoding up to the
// shorter length), resumes from its checkpoint (writing the legacy convention, which drafts as the dflash file does),
// fine-tunes its own output with --init-drafter, trains on --text, and refuses an --init-drafter of another width
// naming both widths.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif

static const char *text_end(const char *out) { return strstr(out, "\n\nencoded"); }

// check_llamacpp_loads: llama.cpp (the npm reference) loads the trained dflash drafter with its weights: arch dflash,
// block size 4, and the target's vocabulary.
static void check_llamacpp_loads(const char *drafter, const char *target) {
#ifdef HAVE_LLAMA_REF
    char err[512], arch[32] = "", block[16] = "";
    if (!llama_ref_available(err, sizeof err)) {
        printf("  llama.cpp load check skipped: %s\n", err);
        return;
    }
    llama_ref *d = llama_ref_load_weights(drafter, err, sizeof err), *v = llama_ref_load_vocab(target, err, sizeof err);
    CHECK(d != NULL, "llama.cpp does not load the trained drafter: %s", err);
    CHECK(v != NULL, "llama.cpp does not load the target's vocabulary: %s", err);
    if (d && v) {
        llama_ref_meta(d, "general.architecture", arch, sizeof arch);
        llama_ref_meta(d, "dflash.block_size", block, sizeof block);
        CHECK(!strcmp(arch, "dflash") && !strcmp(block, "4"), "llama.cpp reads arch '%s', block size '%s'", arch,
              block);
        CHECK(llama_ref_n_vocab(d) == llama_ref_n_vocab(v), "llama.cpp: drafter vocabulary %d, target's %d",
              llama_ref_n_vocab(d), llama_ref_n_vocab(v));
        printf("  llama.cpp loads the trained drafter: arch %s, block size %s, vocabulary %d\n", arch, block,
               llama_ref_n_vocab(d));
    }
    llama_ref_free(d), llama_ref_free(v);
#else
    (void)drafter, (void)target;
    printf("  llama.cpp load check skipped: built without the reference\n");
#endif
}

int main(void) {
    const char *br = getenv("BONSAI_BUILD_ROOT");
    if (!br) return test_skip("BONSAI_BUILD_ROOT not set (run through meson test)");
    char tpath[200], ppath[200], dpath[200], d2path[200], ck[200], bad[200], cmd[2048];
    static char out[1 << 16], plain[1 << 15];
    fx_target(fx_path(tpath, sizeof tpath, "dt-target.gguf"));
    fx_path(ppath, sizeof ppath, "dt-prompts.jsonl");
    fx_path(dpath, sizeof dpath, "dt-drafter.gguf");
    fx_path(d2path, sizeof d2path, "dt-drafter2.gguf");
    fx_path(ck, sizeof ck, "dt.ckpt");
    FILE *f = fopen(ppath, "w");
    CHECK(f != NULL, "cannot write %s", ppath);
    if (!f) return test_done("test_train_drafter_tool");
    fputs("{\"prompt\": \"the cat sat\"}\n{\"prompt\": \"a dog ran far\"}\n\"one two three\"\n", f);
    fclose(f);
    const char *shape = "--n-gen 24 -b 2 --draft-layers 1 --draft-ff 32 --markov-rank 8 -t 1 --no-progress";
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-train-drafter -m %s -o %s --prompts %s --heldout %s --epochs 3 %s "
             "--checkpoint %s --save-every 1", br, tpath, dpath, ppath, ppath, shape, ck);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "train: %s", out);
    CHECK(strstr(out, "held-out, after") && strstr(out, "wrote"), "train output lacks its report: %s", out);
    CHECK(access(ck, F_OK) == 0, "no checkpoint written");
    check_llamacpp_loads(dpath, tpath);
    // the drafter drives bonsai-speculative; greedy output equals plain decoding
    const char *common = "-p 'the cat sat' -n 40 --temp 0 -t 1 --spec-draft-n-max 4 --no-spec-adaptive";
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-speculative -m %s --spec-type none %s", br, tpath, common);
    CHECK(fx_run(cmd, plain, sizeof plain) == 0, "plain: %s", plain);
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-speculative -m %s -md %s --spec-type draft-dspark %s", br, tpath, dpath,
             common);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "dspark with the trained drafter: %s", out);
    const char *e1 = text_end(plain), *e2 = text_end(out);
    CHECK(e1 && e2, "no generated text");
    if (e1 && e2) {
        size_t n = (size_t)(e1 - plain) < (size_t)(e2 - out) ? (size_t)(e1 - plain) : (size_t)(e2 - out);
        CHECK(strncmp(plain, out, n) == 0, "greedy text differs from plain decoding");
    }
    CHECK(strstr(out, "n_drafted = ") && !strstr(out, "n_drafted = 0\n"), "the trained drafter drafted nothing");
    // resume from the checkpoint (every step done: it only writes the drafter), and fine-tune with --init-drafter
    // the resumed run has the same weights: written in the legacy convention it drafts exactly as the dflash file
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-train-drafter -m %s -o %s --prompts %s --epochs 3 %s --resume %s "
             "--convention legacy", br, tpath, d2path, ppath, shape, ck);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "resume: %s", out);
    static char legacy[1 << 16], dflash[1 << 16];
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-speculative -m %s -md %s --spec-type draft-dspark %s", br, tpath, dpath,
             common);
    CHECK(fx_run(cmd, dflash, sizeof dflash) == 0, "dspark, dflash file: %s", dflash);
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-speculative -m %s -md %s --spec-type draft-dspark %s", br, tpath, d2path,
             common);
    CHECK(fx_run(cmd, legacy, sizeof legacy) == 0, "dspark, legacy file: %s", legacy);
    const char *a1 = strstr(dflash, "n_accept"), *a2 = strstr(legacy, "n_accept");
    CHECK(a1 && a2 && text_end(dflash) && text_end(legacy), "no acceptance counts: %s", legacy);
    if (a1 && a2 && text_end(dflash) && text_end(legacy)) {
        CHECK(strncmp(a1, a2, strcspn(a1, "\n")) == 0, "legacy and dflash files accept differently: %.40s / %.40s", a1,
              a2);
        CHECK(text_end(dflash) - dflash == text_end(legacy) - legacy &&
                  !strncmp(dflash, legacy, (size_t)(text_end(dflash) - dflash)),
              "legacy and dflash files give different text");
    }
    char err[256];
    gguf_file *gl = gguf_open(d2path, err, sizeof err);
    const char *arch = gl ? gguf_get_str(gl, "general.architecture") : NULL;
    CHECK(arch && !strcmp(arch, "dspark") && gguf_find_tensor(gl, "dspark.fc.weight") != NULL,
          "--convention legacy did not write a legacy file (arch %s)", arch ? arch : err);
    gguf_close(gl);
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-train-drafter -m %s -o %s --prompts %s --epochs 1 %s --init-drafter %s",
             br, tpath, d2path, ppath, shape, dpath);
    CHECK(fx_run(cmd, out, sizeof out) == 0, "--init-drafter: %s", out);
    // plain text instead of prompts
    f = fopen(ppath, "w");
    CHECK(f != NULL, "cannot write %s", ppath);
    if (f) fputs("the cat sat on the mat and the dog ran far away from the cat and the mat\n", f), fclose(f);
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-train-drafter -m %s -o %s --text %s --text-ctx 16 --epochs 2 %s", br,
             tpath, d2path, ppath, shape);
    CHECK(fx_run(cmd, out, sizeof out) == 0 && strstr(out, "windows from"), "--text: %s", out);
    // a drafter of another width is refused, naming both
    fx_path(bad, sizeof bad, "dt-bad.gguf");
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.n_embd = 96;
    fx_drafter(&p, bad);
    snprintf(cmd, sizeof cmd, "%s/tools/bonsai-train-drafter -m %s -o %s --prompts %s %s --init-drafter %s", br, tpath,
             d2path, ppath, shape, bad);
    CHECK(fx_run(cmd, out, sizeof out) == 1, "a 96-wide drafter was not refused: %s", out);
    CHECK(strstr(out, "embedding_length 96 != target n_embd"), "the refusal does not name both widths: %s", out);
    unlink(tpath), unlink(ppath), unlink(dpath), unlink(d2path), unlink(ck), unlink(bad);
    return test_done("test_train_drafter_tool");
}
