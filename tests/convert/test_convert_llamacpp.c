// tests/convert/test_convert_llamacpp.c — the importer's GGUF inside llama.cpp (npm libllama via
// tests/ref): a tiny qwen35 (Hk 2 ≠ Hv 4) exported to HF, given explicit layer_types (so the import
// writes qwen35.attention.recurrent_layers as llama.cpp's converter does) and imported as F32, must
// load in llama.cpp and give the logits llama.cpp gives on the original file (max |Δ logit| <= 1e-4:
// only ssm_a may differ, by <= 2 ulp) and those of our engine on the original (<= 0.05, the compat
// tests' bound; F32 weights, different accumulation order). Also the qwen3-tiny import. Skips without
// the reference.
#include "tests/test.h"
#include "tests/ref/llama_ref.h"
#include "convert/convert.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/forward.h"
#include "base/util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include <jansson.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static char dir[256];

static void check_one(const char *preset) {
    char g0[512], hf[512], g1[512], err[512] = "";
    snprintf(g0, sizeof g0, "%s/%s.gguf", dir, preset);
    snprintf(hf, sizeof hf, "%s/%s-hf", dir, preset);
    snprintf(g1, sizeof g1, "%s/%s-imported.gguf", dir, preset);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, preset);
    CHECK(bn_mkmodel_write(&p, g0, err, sizeof err) == 0, "%s", err);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    CHECK(bn_convert_gguf_to_hf(g0, hf, &o, err, sizeof err) == 0, "export: %s", err);
    if (strcmp(p.arch, "qwen35") == 0) { // add layer_types as real Qwen3.5 configs have
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", hf);
        json_t *c = json_load_file(path, 0, NULL);
        json_t *lt = json_array();
        for (int il = 0; il < p.n_layer; il++)
            json_array_append_new(lt, json_string((il + 1) % p.full_attn_interval ? "linear_attention" : "full_attention"));
        json_object_set_new(c, "layer_types", lt);
        CHECK(json_dump_file(c, path, JSON_INDENT(2)) == 0, "rewrite config");
        json_decref(c);
    }
    o.outtype = BN_F32;
    CHECK(bn_convert_hf_to_gguf(hf, g1, &o, err, sizeof err) == 0, "import: %s", err);
    bn_model *m = bn_model_load(g0, err, sizeof err);
    llama_ref *r = llama_ref_load(g1, 32, 2, err, sizeof err);
    CHECK(m && r, "%s: %s", preset, err);
    if (m && r) {
        enum { N = 12 };
        int32_t toks[N] = {1, 50, 7, 300, 12, 99, 256, 3, 400, 8, 9, 10};
        int V = m->cfg.n_vocab;
        CHECK(llama_ref_n_vocab(r) == V, "vocab %d vs %d", llama_ref_n_vocab(r), V);
        float *ours = xcalloc((size_t)N * V, sizeof(float)), *ref = xcalloc((size_t)N * V, sizeof(float));
        bn_state *s = bn_state_new(m, 32, 1);
        bn_forward_out out = {.logits = ours, .all_logits = true};
        CHECK(bn_forward(m, s, toks, N, &out, err, sizeof err) == 0, "%s", err);
        CHECK(llama_ref_eval(r, toks, N, ref) == 0, "llama eval");
        float *ref0 = xcalloc((size_t)N * V, sizeof(float));
        llama_ref *r0 = llama_ref_load(g0, 32, 2, err, sizeof err);
        CHECK(r0 && llama_ref_eval(r0, toks, N, ref0) == 0, "llama eval original: %s", err);
        llama_ref_free(r0);
        double maxd = 0, maxd0 = 0;
        for (int64_t i = 0; i < (int64_t)N * V; i++) {
            maxd = fmax(maxd, fabs((double)ours[i] - ref[i]));
            maxd0 = fmax(maxd0, fabs((double)ref0[i] - ref[i]));
        }
        printf("%s: llama.cpp imported vs original: max |dlogit| %.3g (tolerance 1e-4); vs our engine on the "
               "original: %.3g (tolerance 0.05); %d x %d logits\n", preset, maxd0, maxd, N, V);
        CHECK(maxd0 <= 1e-4, "%s: llama.cpp logits moved by %g", preset, maxd0);
        CHECK(maxd <= 0.05, "%s: max |dlogit| %g", preset, maxd);
        free(ref0);
        bn_state_free(s);
        free(ours);
        free(ref);
    }
    llama_ref_free(r);
    bn_model_free(m);
}

// vocab_roundtrip: a tied tiny qwen35 carrying the real Qwen vocabulary (ggml-vocab-qwen35.gguf: 151,936
// rows, 151,387 merges, control and [PAD] user-defined rows) through export + import: every tokenizer.*
// KV must come back byte-identical.
static void vocab_roundtrip(void) {
    char vocab[512], g0[512], hf[512], g1[512], err[512] = "";
    test_third_party(vocab, sizeof vocab, "llama.cpp/models/ggml-vocab-qwen35.gguf");
    if (access(vocab, R_OK) != 0) {
        printf("vocab round trip skipped: %s missing\n", vocab);
        return;
    }
    snprintf(g0, sizeof g0, "%s/vocab.gguf", dir);
    snprintf(hf, sizeof hf, "%s/vocab-hf", dir);
    snprintf(g1, sizeof g1, "%s/vocab-back.gguf", dir);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, "tiny");
    p.vocab = vocab;
    p.tied = true;
    p.type = BN_F16;
    CHECK(bn_mkmodel_write(&p, g0, err, sizeof err) == 0, "%s", err);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    CHECK(bn_convert_gguf_to_hf(g0, hf, &o, err, sizeof err) == 0, "vocab export: %s", err);
    o.outtype = BN_F16;
    CHECK(bn_convert_hf_to_gguf(hf, g1, &o, err, sizeof err) == 0, "vocab import: %s", err);
    gguf_file *a = gguf_open(g0, err, sizeof err), *b = gguf_open(g1, err, sizeof err);
    CHECK(a && b, "%s", err);
    int n_tok = 0, same = 0;
    for (size_t i = 0; a && b && i < a->n_kv; i++) {
        const gguf_kv *x = &a->kv[i];
        if (strncmp(x->key, "tokenizer.", 10) != 0) continue;
        n_tok++;
        int j = gguf_find_key(b, x->key);
        const gguf_kv *y = j >= 0 ? &b->kv[j] : NULL;
        bool ok = y && x->type == y->type && x->n == y->n && x->arr_type == y->arr_type;
        if (ok && x->type == GGUF_TYPE_STRING) ok = x->str_len == y->str_len && !memcmp(x->str, y->str, x->str_len);
        else if (ok && x->type == GGUF_TYPE_ARRAY && x->arr_type == GGUF_TYPE_STRING)
            for (uint64_t k = 0; k < x->n && ok; k++)
                ok = x->str_lens[k] == y->str_lens[k] && !memcmp(x->strs[k], y->strs[k], x->str_lens[k]);
        else if (ok && x->type == GGUF_TYPE_ARRAY) ok = !memcmp(x->data, y->data, x->n * gguf_type_size(x->arr_type));
        else if (ok) ok = !memcmp(x->data, y->data, gguf_type_size(x->type));
        CHECK(ok, "vocab: %s differs after export + import", x->key);
        same += ok;
    }
    for (size_t j = 0; a && b && j < b->n_kv; j++)
        if (strncmp(b->kv[j].key, "tokenizer.", 10) == 0) CHECK(gguf_find_key(a, b->kv[j].key) >= 0, "extra %s", b->kv[j].key);
    printf("vocab round trip (ggml-vocab-qwen35): %d/%d tokenizer KVs identical\n", same, n_tok);
    gguf_close(a);
    gguf_close(b);
}

int main(void) {
    char err[512];
    if (!llama_ref_available(err, sizeof err)) return test_skip(err);
    snprintf(dir, sizeof dir, "/tmp/bonsai-test-cvllama-%d", (int)getpid());
    mkdir(dir, 0777);
    check_one("tiny");
    check_one("qwen3-tiny");
    vocab_roundtrip();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return test_done("test_convert_llamacpp");
}
