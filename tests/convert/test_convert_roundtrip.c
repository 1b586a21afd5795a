// tests/convert/test_convert_roundtrip.c — GGUF → HF → GGUF on generated models (tiny qwen35 with
// Hk 2 ≠ Hv 4, qwen3-tiny): every tensor byte-identical, every KV equal (the importer adds only
// general.quantization_version), and the converted model's logits equal the original's exactly
// (bn_forward, F32 weights). Then a PEFT round trip of a LoRA adapter on the tiny qwen35.
#include "tests/test.h"
#include "convert/convert.h"
#include "gguf/gguf.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/forward.h"
#include "convert/safetensors.h"
#include "base/util.h"
#include "quant/quant.h"
#include "train/lora.h"
#include "quantize/quantize.h"
#include "train/merge.h"
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static char dir[256];

static bool kv_equal(const gguf_kv *a, const gguf_kv *b) {
    if (a->type != b->type || a->n != b->n) return false;
    if (a->type == GGUF_TYPE_STRING) return a->str_len == b->str_len && memcmp(a->str, b->str, a->str_len) == 0;
    if (a->type == GGUF_TYPE_ARRAY) {
        if (a->arr_type != b->arr_type) return false;
        if (a->arr_type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < a->n; i++)
                if (a->str_lens[i] != b->str_lens[i] || memcmp(a->strs[i], b->strs[i], a->str_lens[i]) != 0) return false;
            return true;
        }
        return memcmp(a->data, b->data, a->n * gguf_type_size(a->arr_type)) == 0;
    }
    return memcmp(a->data, b->data, gguf_type_size(a->type)) == 0;
}

// max_ulp: largest distance in units of the last place between two F32 arrays.
static int64_t max_ulp(const float *x, const float *y, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t a, b;
        memcpy(&a, &x[i], 4);
        memcpy(&b, &y[i], 4);
        int64_t d = (int64_t)a - b;
        if (d < 0) d = -d;
        if (d > m) m = d;
    }
    return m;
}

// compare: same tensor set with identical types/shapes/bytes, same KVs (b may add quantization_version).
// ssm_a_ulp: ssm_a may differ by this many ulp (fp32 A_log cannot represent every −exp preimage).
static void compare(const char *what, const char *pa, const char *pb, int ssm_a_ulp) {
    char err[512];
    gguf_file *a = gguf_open(pa, err, sizeof err), *b = gguf_open(pb, err, sizeof err);
    CHECK(a && b, "%s: %s", what, err);
    if (!a || !b) return;
    CHECK(a->n_tensors == b->n_tensors, "%s: %zu vs %zu tensors", what, a->n_tensors, b->n_tensors);
    int same = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *x = &a->tensors[i], *y = gguf_find_tensor(b, x->name);
        CHECK(y != NULL, "%s: %s missing after the round trip", what, x->name);
        if (!y) continue;
        bool ok = x->type == y->type && x->n_dims == y->n_dims && memcmp(x->ne, y->ne, sizeof x->ne) == 0 &&
                  x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
        const char *dot = strrchr(x->name, '.');
        if (!ok && ssm_a_ulp > 0 && dot && strcmp(dot, ".ssm_a") == 0 && x->nbytes == y->nbytes && x->type == BN_F32) {
            int64_t u = max_ulp(x->data, y->data, gguf_tensor_nelements(x));
            printf("%s: %s within %lld ulp (allowed %d)\n", what, x->name, (long long)u, ssm_a_ulp);
            ok = u <= ssm_a_ulp;
        }
        CHECK(ok, "%s: tensor %s differs (type %d/%d, ne0 %lld/%lld)", what, x->name, x->type, y->type,
              (long long)x->ne[0], (long long)y->ne[0]);
        same += ok;
    }
    int kv_same = 0;
    for (size_t i = 0; i < a->n_kv; i++) {
        int j = gguf_find_key(b, a->kv[i].key);
        CHECK(j >= 0, "%s: KV %s missing", what, a->kv[i].key);
        if (j < 0) continue;
        bool ok = kv_equal(&a->kv[i], &b->kv[j]);
        CHECK(ok, "%s: KV %s differs", what, a->kv[i].key);
        kv_same += ok;
    }
    for (size_t j = 0; j < b->n_kv; j++)
        CHECK(gguf_find_key(a, b->kv[j].key) >= 0 || strcmp(b->kv[j].key, "general.quantization_version") == 0,
              "%s: extra KV %s", what, b->kv[j].key);
    printf("%s: %d/%zu tensors byte-identical (ssm_a: within %d ulp), %d/%zu KVs equal\n", what, same, a->n_tensors,
           ssm_a_ulp, kv_same, a->n_kv);
    gguf_close(a);
    gguf_close(b);
}

// logits_equal: bn_forward over the same tokens on both files; max |Δlogit| must be <= tol.
static void logits_equal(const char *what, const char *pa, const char *pb, double tol) {
    char err[512];
    bn_model *ma = bn_model_load(pa, err, sizeof err), *mb = bn_model_load(pb, err, sizeof err);
    CHECK(ma && mb, "%s: %s", what, err);
    if (!ma || !mb) return;
    const int n = 6;
    int32_t toks[6] = {1, 50, 7, 300, 12, 99};
    int V = ma->cfg.n_vocab;
    float *la = xcalloc((size_t)n * V, sizeof(float)), *lb = xcalloc((size_t)n * V, sizeof(float));
    bn_state *sa = bn_state_new(ma, 16, 1), *sb = bn_state_new(mb, 16, 1);
    bn_forward_out oa = {.logits = la, .all_logits = true}, ob = {.logits = lb, .all_logits = true};
    CHECK(bn_forward(ma, sa, toks, n, &oa, err, sizeof err) == 0, "%s", err);
    CHECK(bn_forward(mb, sb, toks, n, &ob, err, sizeof err) == 0, "%s", err);
    double maxd = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) maxd = fmax(maxd, fabs((double)la[i] - lb[i]));
    printf("%s: max |logit difference| over %d tokens x %d = %g (tolerance %g)\n", what, n, V, maxd, tol);
    CHECK(maxd <= tol, "%s: logits differ by %g", what, maxd);
    bn_state_free(sa);
    bn_state_free(sb);
    bn_model_free(ma);
    bn_model_free(mb);
    free(la);
    free(lb);
}

static void roundtrip(const char *preset, int type) {
    char g0[512], hf[512], g1[512], err[512] = "", what[64];
    snprintf(what, sizeof what, "%s/%s", preset, bn_type_name(type));
    snprintf(g0, sizeof g0, "%s/%s-%d.gguf", dir, preset, type);
    snprintf(hf, sizeof hf, "%s/%s-%d-hf", dir, preset, type);
    snprintf(g1, sizeof g1, "%s/%s-%d-back.gguf", dir, preset, type);
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, preset);
    p.type = type;
    CHECK(bn_mkmodel_write(&p, g0, err, sizeof err) == 0, "%s", err);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    CHECK(bn_convert_gguf_to_hf(g0, hf, &o, err, sizeof err) == 0, "%s: export: %s", what, err);
    o.outtype = type;
    CHECK(bn_convert_hf_to_gguf(hf, g1, &o, err, sizeof err) == 0, "%s: import: %s", what, err);
    // first trip: ssm_a of a foreign file comes back within 2 ulp (an fp32 A_log near 2 moves −exp(A_log)
    // in steps of ~4 ulp of a, so not every fp32 ssm_a has an fp32 A_log preimage);
    // logits then agree to 1e-4 (logit std ~4). Every other tensor and KV is exact.
    compare(what, g0, g1, 2);
    if (type == BN_F32) logits_equal(what, g0, g1, 1e-4);
    // second trip from our own import: fully byte-identical, logits exactly equal (tolerance 0)
    char hf2[600], g2[600];
    snprintf(hf2, sizeof hf2, "%s-2", hf);
    snprintf(g2, sizeof g2, "%s-2.gguf", g1);
    o.outtype = -1;
    CHECK(bn_convert_gguf_to_hf(g1, hf2, &o, err, sizeof err) == 0, "%s: export 2: %s", what, err);
    o.outtype = type;
    CHECK(bn_convert_hf_to_gguf(hf2, g2, &o, err, sizeof err) == 0, "%s: import 2: %s", what, err);
    char what2[80];
    snprintf(what2, sizeof what2, "%s (2nd trip)", what);
    compare(what2, g1, g2, 0);
    if (type == BN_F32) logits_equal(what2, g1, g2, 0);
}

// quant_export: a Q8_0 model exports dequantized (F32 safetensors); importing that back as F32 gives
// exactly bn_dequantize of every quantized tensor (other tensors byte-identical, ssm_a within 2 ulp).
static void quant_export(void) {
    char f32[512], q8[512], hf[512], back[512], err[512] = "";
    snprintf(f32, sizeof f32, "%s/tiny-0.gguf", dir);
    snprintf(q8, sizeof q8, "%s/tiny-q8.gguf", dir);
    snprintf(hf, sizeof hf, "%s/tiny-q8-hf", dir);
    snprintf(back, sizeof back, "%s/tiny-q8-back.gguf", dir);
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = "Q8_0";
    qp.pure = true;
    qp.log = NULL;
    qp.n_threads = 2;
    CHECK(bn_quantize_file(&qp, f32, q8, err, sizeof err) == 0, "quantize: %s", err);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    CHECK(bn_convert_gguf_to_hf(q8, hf, &o, err, sizeof err) == 0, "q8 export: %s", err);
    o.outtype = BN_F32;
    CHECK(bn_convert_hf_to_gguf(hf, back, &o, err, sizeof err) == 0, "q8 import: %s", err);
    gguf_file *a = gguf_open(q8, err, sizeof err), *b = gguf_open(back, err, sizeof err);
    CHECK(a && b, "%s", err);
    if (!a || !b) return;
    int n_quant = 0, n_ok = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *x = &a->tensors[i], *y = gguf_find_tensor(b, x->name);
        if (!y || y->type != BN_F32) {
            CHECK(0, "q8: %s missing or not F32 after import", x->name);
            continue;
        }
        int64_t n = gguf_tensor_nelements(x);
        float *d = xmalloc(sizeof(float) * (size_t)n);
        CHECK(bn_dequantize(x->type, x->data, d, n) == 0, "dequantize %s", x->name);
        const char *dot = strrchr(x->name, '.');
        bool ok = dot && strcmp(dot, ".ssm_a") == 0 ? max_ulp(d, y->data, n) <= 2 : memcmp(d, y->data, (size_t)n * 4) == 0;
        CHECK(ok, "q8: %s differs from its dequantized original", x->name);
        n_quant += x->type == BN_Q8_0;
        n_ok += ok;
        free(d);
    }
    CHECK(n_quant > 0, "no Q8_0 tensors in the quantized model");
    printf("q8_0 export: %d/%zu tensors equal their dequantized original (%d were Q8_0)\n", n_ok, a->n_tensors, n_quant);
    gguf_close(a);
    gguf_close(b);
}

static void peft_roundtrip(void) {
    char base[512], ad[512], peft[512], back[512], err[512] = "";
    snprintf(base, sizeof base, "%s/tiny-0.gguf", dir);
    snprintf(ad, sizeof ad, "%s/adapter.gguf", dir);
    snprintf(peft, sizeof peft, "%s/peft", dir);
    snprintf(back, sizeof back, "%s/adapter-back.gguf", dir);
    bn_model *m = bn_model_load(base, err, sizeof err);
    CHECK(m != NULL, "%s", err);
    if (!m) return;
    bn_lora *l = bn_lora_from_model(m, (unsigned)(BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD), 4, 8.0f, 0,
                                    err, sizeof err);
    CHECK(l != NULL, "%s", err);
    if (!l) return;
    for (int64_t i = 0; i < l->n_params; i++) l->params[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    CHECK(bn_lora_save_gguf(l, ad, err, sizeof err) == 0, "%s", err);
    bn_convert_opts o = {.outtype = -1, .quiet = true};
    CHECK(bn_convert_lora_to_peft(ad, base, peft, &o, err, sizeof err) == 0, "to peft: %s", err);
    CHECK(bn_convert_peft_to_lora(peft, base, back, &o, err, sizeof err) == 0, "from peft: %s", err);
    compare("lora", ad, back, 0);
    // the PEFT file holds HF (grouped) layout: lora_B row of HF z head 1 (group 0, j 1) = GGUF head 2 (tiled)
    char path[600];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", peft);
    bn_safetensors *st = bn_st_open_file(path, err, sizeof err);
    CHECK(st != NULL, "%s", err);
    int idx = bn_lora_get(l, 0, BN_LORA_Z);
    const bn_st_tensor *t = st ? bn_st_find(st, "base_model.model.model.layers.0.linear_attn.in_proj_z.lora_B.weight") : NULL;
    CHECK(t != NULL && idx >= 0, "in_proj_z lora_B missing");
    if (t && idx >= 0) {
        const int r = l->r, dv = m->cfg.ssm_d_state;
        const float *B = l->params + l->t[idx].off_b; // {r, n_out}: row o = r values
        const float *P = t->data;
        // HF row (head 1, elem 3) = GGUF row (head bn_vhead_to_gguf(1) = 2, elem 3)
        CHECK(bn_vhead_to_gguf(1, 2, 4) == 2, "perm of head 1");
        CHECK(memcmp(P + (size_t)(1 * dv + 3) * r, B + (size_t)(2 * dv + 3) * r, sizeof(float) * r) == 0,
              "lora_B row not permuted grouped<-tiled");
    }
    // semantics: merging the PEFT adapter into the exported (HF-layout) base equals exporting the
    // GGUF-side merge (bn_lora_merge_gguf), for every adapted weight — exact (same fp32 sums, permuted)
    char merged[600], hf_base[600], hf_merged[600];
    snprintf(merged, sizeof merged, "%s/merged.gguf", dir);
    snprintf(hf_base, sizeof hf_base, "%s/base-hf", dir);
    snprintf(hf_merged, sizeof hf_merged, "%s/merged-hf", dir);
    CHECK(bn_lora_merge_gguf(base, l, 1.0f, BN_MERGE_F32, merged, NULL, err, sizeof err) == 0, "merge: %s", err);
    CHECK(bn_convert_gguf_to_hf(base, hf_base, &o, err, sizeof err) == 0, "%s", err);
    CHECK(bn_convert_gguf_to_hf(merged, hf_merged, &o, err, sizeof err) == 0, "%s", err);
    bn_safetensors *sb = bn_st_open_dir(hf_base, err, sizeof err), *sm = bn_st_open_dir(hf_merged, err, sizeof err);
    CHECK(sb && sm && st, "%s", err);
    int n_mod = 0, n_ok = 0;
    for (int i = 0; sb && sm && st && i < st->n_tensors; i++) {
        const char *k = st->t[i].name;
        const char *pa = strstr(k, ".lora_A.weight");
        if (!pa) continue;
        char mod[256], wname[300], bname[300];
        snprintf(mod, sizeof mod, "%.*s", (int)(pa - k - strlen("base_model.model.")), k + strlen("base_model.model."));
        snprintf(wname, sizeof wname, "%s.weight", mod);
        snprintf(bname, sizeof bname, "base_model.model.%s.lora_B.weight", mod);
        const bn_st_tensor *A = &st->t[i], *B = bn_st_find(st, bname), *W = bn_st_find(sb, wname), *WM = bn_st_find(sm, wname);
        CHECK(B && W && WM && W->type == BN_F32, "%s: pieces missing", mod);
        if (!B || !W || !WM || W->type != BN_F32) continue;
        int64_t n_out = W->shape[0], n_in = W->shape[1];
        float *w = xmalloc(sizeof(float) * (size_t)(n_in * n_out));
        memcpy(w, W->data, sizeof(float) * (size_t)(n_in * n_out));
        bn_lora_merge_f32(w, n_in, n_out, A->data, B->data, (int)A->shape[0], bn_lora_scale(l));
        bool ok = memcmp(w, WM->data, sizeof(float) * (size_t)(n_in * n_out)) == 0;
        CHECK(ok, "%s: HF-side merge differs from the exported GGUF-side merge", mod);
        n_mod++;
        n_ok += ok;
        free(w);
    }
    printf("peft: %d/%d adapted weights: HF-layout merge == exported GGUF merge (exact)\n", n_ok, n_mod);
    CHECK(n_mod == l->n_tensors, "checked %d of %d adapted weights", n_mod, l->n_tensors);
    bn_st_close(sb);
    bn_st_close(sm);
    bn_st_close(st);
    bn_lora_free(l);
    bn_model_free(m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-test-convert-%d", (int)getpid());
    mkdir(dir, 0777);
    roundtrip("tiny", BN_F32);
    roundtrip("tiny", BN_F16);
    roundtrip("qwen3-tiny", BN_F32);
    roundtrip("tiny", BN_BF16);
    quant_export();
    peft_roundtrip();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return test_done("test_convert_roundtrip");
}
