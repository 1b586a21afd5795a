// tests/spec/test_dspark_load.c — both drafter file conventions (docs/dspark.md §2–3): keys, tensor
// count and shapes, the target_layers shift (dflash ids = legacy ids + 1, both tapping the same
// residual stream), identical drafts from the two files, borrowed (shared) embeddings, a
// quantized drafter, and clear errors for a wrong E / V / tap layer / missing tensor.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

static const int32_t prompt[] = {3, 141, 59, 265, 358, 97, 93, 238, 46, 264};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

// drafts_for: runs the target over the prompt with the drafter's taps, feeds them to a fresh
// drafter state, then drafts 4 tokens after each of a few anchors; writes drafts [n_anchor][4]
// and the base logits of the last block to base. Returns 0.
static int drafts_for(const bn_model *m, const bn_drafter *d, int32_t *drafts, float *base) {
    char err[256];
    const int E = m->cfg.n_embd, C = d->cfg.n_taps;
    bn_state *ts = bn_state_new(m, 256, 1);
    float *taps = xmalloc(sizeof(float) * (size_t)N_PROMPT * C * E);
    bn_forward_out o = {.tap_layers = d->cfg.tap_layers, .n_taps = C, .taps = taps};
    if (bn_forward(m, ts, prompt, N_PROMPT, &o, err, sizeof err) != 0) bn_die("%s", err);
    bn_dstate *ds = bn_dstate_new(d, 256, 1);
    if (bn_drafter_process(d, ds, taps, N_PROMPT, 0, err, sizeof err) != 0) bn_die("%s", err);
    const int32_t anchors[3] = {5, 300, 77};
    for (int a = 0; a < 3; a++) {
        int n = bn_drafter_draft(d, ds, anchors[a], N_PROMPT, 4, 0.0f, drafts + 4 * a, err, sizeof err);
        CHECK(n == 4, "draft returned %d (%s)", n, err);
    }
    float *h = xmalloc(sizeof(float) * 4 * (size_t)E);
    bn_drafter_block(d, ds, anchors[2], N_PROMPT, 4, h, base, err, sizeof err);
    CHECK(bn_dstate_n_cache(ds) == N_PROMPT, "block rows must not stay in the cache (%d)", bn_dstate_n_cache(ds));
    free(h);
    free(taps);
    bn_dstate_free(ds);
    bn_state_free(ts);
    return 0;
}

// drop_tensor: copies src to dst without tensor `name`.
static void drop_tensor(const char *src, const char *dst, const char *name) {
    char err[256];
    gguf_file *g = gguf_open(src, err, sizeof err);
    if (!g) bn_die("%s", err);
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < g->n_kv; i++) gguf_set_kv(w, &g->kv[i]);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (strcmp(t->name, name) == 0) continue;
        gguf_writer_add_tensor(w, t->name, (int)t->n_dims, t->ne, t->type, t->file_type, t->data, err, sizeof err);
    }
    if (gguf_writer_write(w, dst, NULL, NULL, err, sizeof err) != 0) bn_die("%s", err);
    gguf_writer_free(w);
    gguf_close(g);
}

// expect_error: loading path against m fails with a message containing needle.
static void expect_error(const char *path, const bn_model *m, const char *needle) {
    char err[512] = "";
    bn_drafter *d = bn_drafter_load(path, m, err, sizeof err);
    CHECK(d == NULL, "loading %s should fail (%s)", path, needle);
    CHECK(strstr(err, needle) != NULL, "error '%s' should mention '%s'", err, needle);
    printf("expected error: %s\n", err);
    bn_drafter_free(d);
}

int main(void) {
    char tpath[512], lpath[512], fpath[512], spath[512], qpath[512], bad[512], err[512];
    fx_target(fx_path(tpath, sizeof tpath, "target.gguf"));
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.n_layer = 3;
    fx_drafter(&p, fx_path(lpath, sizeof lpath, "legacy.gguf"));
    p.convention = BN_DRAFTER_DFLASH;
    fx_drafter(&p, fx_path(fpath, sizeof fpath, "dflash.gguf"));
    p.shared = true;
    fx_drafter(&p, fx_path(spath, sizeof spath, "shared.gguf"));
    p.shared = false;
    p.convention = BN_DRAFTER_LEGACY;
    p.type = BN_Q8_0;
    fx_drafter(&p, fx_path(qpath, sizeof qpath, "q8.gguf"));
    p.type = BN_F32;

    bn_model *m = bn_model_load(tpath, err, sizeof err);
    if (!m) bn_die("%s", err);
    bn_drafter *dl = bn_drafter_load(lpath, m, err, sizeof err);
    CHECK(dl != NULL, "legacy load: %s", err);
    bn_drafter *df = bn_drafter_load(fpath, m, err, sizeof err);
    CHECK(df != NULL, "dflash load: %s", err);
    bn_drafter *dsh = bn_drafter_load(spath, m, err, sizeof err);
    CHECK(dsh != NULL, "shared load: %s", err);
    bn_drafter *dq = bn_drafter_load(qpath, m, err, sizeof err);
    CHECK(dq != NULL, "q8_0 load: %s", err);
    if (!dl || !df || !dsh || !dq) return test_done("dspark_load");

    // keys and tensor counts: 13 global + 11 per layer (docs/dspark.md §2.2), 11 + 11 per layer when shared
    CHECK(dl->gguf->n_tensors == 13 + 11 * 3, "legacy tensors %zu", dl->gguf->n_tensors);
    CHECK(df->gguf->n_tensors == 13 + 11 * 3, "dflash tensors %zu", df->gguf->n_tensors);
    CHECK(dsh->gguf->n_tensors == 11 + 11 * 3, "shared tensors %zu", dsh->gguf->n_tensors);
    CHECK(gguf_find_tensor(dl->gguf, "dspark.markov_head_a.weight") && gguf_find_tensor(df->gguf, "markov_w1.weight"),
          "Markov head names per convention");
    CHECK(gguf_find_key(dl->gguf, "dspark.dspark.block_size") >= 0 && gguf_find_key(df->gguf, "dflash.block_size") >= 0,
          "drafter keys: double-prefixed (legacy) vs dflash.*");
    CHECK(dl->cfg.convention == BN_DRAFTER_LEGACY && df->cfg.convention == BN_DRAFTER_DFLASH, "conventions");
    const gguf_kv *ltl = gguf_get_arr(dl->gguf, "dspark.dspark.target_layers");
    const gguf_kv *ftl = gguf_get_arr(df->gguf, "dflash.target_layers");
    CHECK(ltl && ftl && ltl->n == 2 && ftl->n == 2, "target_layers arrays");
    if (ltl && ftl)
        for (int i = 0; i < 2; i++) {
            int32_t a = ((const int32_t *)ltl->data)[i], b = ((const int32_t *)ftl->data)[i];
            CHECK(b == a + 1, "dflash target layer %d = legacy %d + 1", b, a);
            CHECK(dl->cfg.tap_layers[i] == a && df->cfg.tap_layers[i] == a, "both tap the output of layer %d", a);
        }
    CHECK(dl->cfg.mask_token_id == 511 && df->cfg.mask_token_id == 511, "mask token from both key spellings");
    CHECK(dl->cfg.markov_rank == 16 && dl->cfg.has_conf && dl->cfg.conf_in == 128 + 16 && dl->cfg.log_snr &&
              dl->cfg.snr_feat == 128 && dl->cfg.block_size == 4 && dl->cfg.n_layer == 3,
          "legacy config");
    CHECK(memcmp(&dl->cfg.n_embd, &df->cfg.n_embd, sizeof(bn_drafter_config) - offsetof(bn_drafter_config, n_embd)) == 0,
          "both conventions give the same config (apart from the convention)");
    CHECK(dsh->token_embd.data == m->w.token_embd.data && dsh->output.data == m->w.output.data,
          "shared drafter borrows the target's token_embd and output");

    // identical drafts and base logits from the two conventions
    const int V = m->cfg.n_vocab;
    int32_t d1[12], d2[12], d3[12], d4[12];
    float *b1 = xmalloc(sizeof(float) * 4 * V), *b2 = xmalloc(sizeof(float) * 4 * V);
    drafts_for(m, dl, d1, b1);
    drafts_for(m, df, d2, b2);
    CHECK(memcmp(d1, d2, sizeof d1) == 0, "legacy and dflash drafts differ");
    CHECK(memcmp(b1, b2, sizeof(float) * 4 * V) == 0, "legacy and dflash base logits are not bit-identical");
    drafts_for(m, dsh, d3, b2); // runs with borrowed weights
    drafts_for(m, dq, d4, b2);  // quantized matrices: runs, drafts are valid ids and never MASK
    for (int i = 0; i < 12; i++) {
        CHECK(d3[i] >= 0 && d3[i] < V && d3[i] != 511, "shared draft id %d", d3[i]);
        CHECK(d4[i] >= 0 && d4[i] < V && d4[i] != 511, "q8_0 draft id %d", d4[i]);
    }
    printf("drafts legacy/dflash: %d %d %d %d | %d %d %d %d | %d %d %d %d\n", d1[0], d1[1], d1[2], d1[3], d1[4], d1[5],
           d1[6], d1[7], d1[8], d1[9], d1[10], d1[11]);
    free(b1);
    free(b2);

    // errors
    bn_mkdrafter_defaults(&p);
    p.n_embd = 256;
    p.n_ff = 256;
    fx_drafter(&p, fx_path(bad, sizeof bad, "bad.gguf"));
    expect_error(bad, m, "embedding_length 256 != target n_embd 128");
    bn_mkdrafter_defaults(&p);
    p.n_vocab = 640;
    fx_drafter(&p, bad);
    expect_error(bad, m, "vocabulary 640 != target vocabulary 512");
    bn_mkdrafter_defaults(&p);
    p.target_layers[1] = 4;
    fx_drafter(&p, bad);
    expect_error(bad, m, "target layer 4 out of range");
    drop_tensor(fpath, bad, "blk.1.ffn_up.weight");
    expect_error(bad, m, "missing tensor 'blk.1.ffn_up.weight'");
    drop_tensor(lpath, bad, "dspark.hidden_norm.weight");
    expect_error(bad, m, "missing tensor 'dspark.hidden_norm.weight'");
    drop_tensor(spath, bad, "fc.weight");
    expect_error(bad, m, "missing tensor 'fc.weight'");
    char err2[256];
    CHECK(bn_drafter_load(spath, NULL, err2, sizeof err2) == NULL && strstr(err2, "token_embd"),
          "a shared drafter without a target must fail clearly");

    bn_drafter_free(dl);
    bn_drafter_free(df);
    bn_drafter_free(dsh);
    bn_drafter_free(dq);
    bn_model_free(m);
    const char *paths[] = {tpath, lpath, fpath, spath, qpath, bad};
    for (int i = 0; i < 6; i++) unlink(paths[i]);
    return test_done("dspark_load");
}
