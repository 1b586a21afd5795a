// tests/train/test_merge.c — adapter merge into a GGUF (train/merge.h) on the tiny qwen35:
//  - F32 base: the merged model's base forward equals the base + adapter training forward
//    (last-position logits, relative L2 <= 1e-5); non-adapted tensors and KVs copied byte for byte;
//  - Q1_0 base, KEEP mode: adapted tensors stay Q1_0; with a zero adapter (B = 0) the merged file's
//    tensors are byte-identical to the base (lossless unpack → requant, docs/formats.md §3.10); with a
//    real adapter the diagnostics report the share of the delta that survived;
//  - F16 mode writes adapted tensors as F16; an adapter tensor missing in the base is an error.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/merge.h"

static char dir[] = "/tmp/bonsai_test_merge_XXXXXX";
static const int32_t TOK[8] = {4, 90, 33, 201, 7, 140, 12, 66};

static bn_lora *make_lora(const bn_model *m, double b_amp) {
    char err[256];
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 8, 0, err, sizeof err);
    bn_lora_init_peft(l, 11);
    bn_rng rng;
    bn_rng_seed(&rng, 12);
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++) l->params[l->t[i].off_b + e] = (float)(b_amp * (bn_rng_uniform(&rng) - 0.5));
    return l;
}

// same_tensor_bytes: true if tensor name has identical type, shape and bytes in both files.
static bool same_tensor_bytes(const gguf_file *a, const gguf_file *b, const char *name) {
    const gguf_tensor *x = gguf_find_tensor(a, name), *y = gguf_find_tensor(b, name);
    return x && y && x->type == y->type && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
}

static void test_f32(const char *base) {
    char err[256], out[512];
    bn_model *m = bn_model_load(base, err, sizeof err);
    if (!m) { CHECK(0, "%s", err); return; }
    bn_lora *l = make_lora(m, 0.1);
    int V = m->cfg.n_vocab;
    float *za = xmalloc(sizeof(float) * V), *zm = xmalloc(sizeof(float) * V);
    bn_train_graph_free(bn_train_forward(m, l, TOK, 8, NULL, za, err, sizeof err));
    snprintf(out, sizeof out, "%s/merged_f32.gguf", dir);
    bn_merge_stat *st = xcalloc((size_t)l->n_tensors, sizeof *st);
    CHECK(bn_lora_merge_gguf(base, l, 1.0f, BN_MERGE_KEEP, out, st, err, sizeof err) == 0, "merge: %s", err);
    bn_model *mm = bn_model_load(out, err, sizeof err);
    CHECK(mm != NULL, "merged loads: %s", err);
    if (mm) {
        bn_train_graph_free(bn_train_forward(mm, NULL, TOK, 8, NULL, zm, err, sizeof err));
        double num = 0, den = 0;
        for (int j = 0; j < V; j++) { num += ((double)zm[j] - za[j]) * ((double)zm[j] - za[j]); den += (double)za[j] * za[j]; }
        printf("F32 merge: merged-model logits vs base+adapter: rel L2 %.3g\n", sqrt(num / den));
        CHECK(sqrt(num / den) <= 1e-5, "merged logits differ by %g (tol 1e-5)", sqrt(num / den));
        CHECK(same_tensor_bytes(m->gguf, mm->gguf, "token_embd.weight") && same_tensor_bytes(m->gguf, mm->gguf, "blk.0.ssm_a") &&
              same_tensor_bytes(m->gguf, mm->gguf, "blk.3.attn_norm.weight"), "non-adapted tensors copied byte for byte");
        CHECK(mm->gguf->n_kv == m->gguf->n_kv && mm->gguf->n_tensors == m->gguf->n_tensors, "same KVs and tensors");
        CHECK(st[0].type == BN_F32 && fabs(st[0].kept - 1.0) < 1e-6 && st[0].rel_delta > 0, "F32 keeps the whole delta (kept %g)", st[0].kept);
        bn_model_free(mm);
    }
    // F16 mode
    snprintf(out, sizeof out, "%s/merged_f16.gguf", dir);
    CHECK(bn_lora_merge_gguf(base, l, 1.0f, BN_MERGE_F16, out, st, err, sizeof err) == 0, "merge f16: %s", err);
    gguf_file *g = gguf_open(out, err, sizeof err);
    if (g) {
        const gguf_tensor *t = gguf_find_tensor(g, "blk.0.ffn_up.weight"), *n = gguf_find_tensor(g, "token_embd.weight");
        CHECK(t && t->type == BN_F16 && n && n->type == BN_F32, "F16 mode: adapted tensors F16, others unchanged");
        CHECK(st[0].kept > 0.99, "F16 keeps > 99%% of the delta (%g)", st[0].kept);
        gguf_close(g);
    }
    // error: an adapter tensor the base lacks
    bn_lora *bad = bn_lora_new(2, 2, 0, "qwen35");
    bn_lora_add(bad, "blk.9.ffn_up.weight", 9, BN_LORA_UP, 128, 256, err, sizeof err);
    CHECK(bn_lora_merge_gguf(base, bad, 1.0f, BN_MERGE_KEEP, out, NULL, err, sizeof err) == -1 && strstr(err, "blk.9.ffn_up"),
          "missing base tensor reported: %s", err);
    bn_lora_free(bad);
    free(st); free(za); free(zm);
    bn_lora_free(l);
    bn_model_free(m);
}

static void test_q1_0(const char *base_f32) {
    char err[256], q1[512], out[512];
    snprintf(q1, sizeof q1, "%s/tiny_q1_0.gguf", dir);
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = "Q1_0";
    qp.pure = true;
    qp.log = NULL;
    qp.n_threads = 1;
    if (bn_quantize_file(&qp, base_f32, q1, err, sizeof err)) { CHECK(0, "quantize Q1_0: %s", err); return; }
    bn_model *m = bn_model_load(q1, err, sizeof err);
    if (!m) { CHECK(0, "%s", err); return; }
    // zero adapter: merge must reproduce the file's tensors exactly
    bn_lora *l0 = make_lora(m, 0.0);
    snprintf(out, sizeof out, "%s/merged_q1_zero.gguf", dir);
    CHECK(bn_lora_merge_gguf(q1, l0, 1.0f, BN_MERGE_KEEP, out, NULL, err, sizeof err) == 0, "merge q1 zero: %s", err);
    gguf_file *g = gguf_open(out, err, sizeof err);
    int same = 0;
    for (int i = 0; g && i < l0->n_tensors; i++) same += same_tensor_bytes(m->gguf, g, l0->t[i].name);
    CHECK(same == l0->n_tensors, "zero adapter: %d of %d adapted Q1_0 tensors byte-identical", same, l0->n_tensors);
    gguf_close(g);
    // real adapter: type kept, delta partially survives (1-bit dilution, docs/antidoom.md §12.7)
    bn_lora *l = make_lora(m, 0.4);
    bn_merge_stat *st = xcalloc((size_t)l->n_tensors, sizeof *st);
    snprintf(out, sizeof out, "%s/merged_q1.gguf", dir);
    CHECK(bn_lora_merge_gguf(q1, l, 1.0f, BN_MERGE_KEEP, out, st, err, sizeof err) == 0, "merge q1: %s", err);
    g = gguf_open(out, err, sizeof err);
    const gguf_tensor *t = g ? gguf_find_tensor(g, "blk.0.ffn_gate.weight") : NULL;
    CHECK(t && t->type == BN_Q1_0, "KEEP mode re-quantizes to Q1_0");
    double kept = 0, flips = 0;
    for (int i = 0; i < l->n_tensors; i++) { kept += st[i].kept; flips += st[i].sign_flips; }
    kept /= l->n_tensors;
    flips /= l->n_tensors;
    printf("Q1_0 merge: mean delta kept %.3f, sign flips %.4f, %s rel delta %.3g\n", kept, flips, st[0].name, st[0].rel_delta);
    CHECK(kept > 0.0 && kept < 1.0 && flips > 0, "Q1_0 keeps part of the delta (%g) and flips some signs (%g)", kept, flips);
    gguf_close(g);
    free(st);
    bn_lora_free(l0);
    bn_lora_free(l);
    bn_model_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char base[512], err[256];
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    snprintf(base, sizeof base, "%s/tiny.gguf", dir);
    if (bn_mkmodel_write(&p, base, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return test_done("train_merge"); }
    test_f32(base);
    test_q1_0(base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_merge");
}
