// tests/train/test_fakequant.c — train/fakequant.h against bonsai-quantize itself (tiny qwen35, F16):
//  - bn_requant_model(m, T) holds, weight by weight, exactly the type and bytes that
//    bn_quantize_file(--type T) writes (T = Q1_0, Q2_0, Q8_0; exact, no tolerance);
//  - bn_fake_quantize(T, w) == bn_dequantize(bn_quantize_ref(T, w)) bit for bit, is idempotent, F16 is
//    the fp16 round trip, and a row length off the block size or an unknown type returns -1.
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "base/rng.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "train/fakequant.h"

static char dir[] = "/tmp/bonsai_test_fakequant_XXXXXX";

static void test_model(const char *base, const char *type) {
    char err[256], out[512];
    snprintf(out, sizeof out, "%s/q_%s.gguf", dir, type);
    bn_quantize_params p = bn_quantize_params_default();
    p.type = type;
    p.log = NULL;
    CHECK(bn_quantize_file(&p, base, out, err, sizeof err) == 0, "quantize %s: %s", type, err);
    bn_model *m = bn_model_load(base, err, sizeof err), *mq = bn_model_load(out, err, sizeof err);
    CHECK(m && mq, "load: %s", err);
    if (!m || !mq) { bn_model_free(m); bn_model_free(mq); return; }
    bn_model *fq = bn_requant_model(m, type, NULL, err, sizeof err);
    CHECK(fq != NULL, "requant model %s: %s", type, err);
    if (fq) {
        bn_weight *a[256], *b[256];
        int n = bn_model_weight_slots(fq, a, 256), nb = bn_model_weight_slots(mq, b, 256);
        CHECK(n == nb && n <= 256, "same weight slots (%d vs %d)", n, nb);
        int n_same = 0, n_quant = 0;
        for (int i = 0; i < n && i < nb && i < 256; i++) {
            if (!a[i]->data || !b[i]->data) { CHECK(!a[i]->data && !b[i]->data, "slot %d presence", i); continue; }
            size_t bytes = bn_row_size(b[i]->type, b[i]->ne[0]);
            for (int d = 1; d < 4; d++) bytes *= (size_t)(b[i]->ne[d] > 0 ? b[i]->ne[d] : 1);
            bool same = a[i]->type == b[i]->type && memcmp(a[i]->data, b[i]->data, bytes) == 0;
            CHECK(same, "%s %s: in-memory %s vs file %s", type, b[i]->name, bn_type_name(a[i]->type), bn_type_name(b[i]->type));
            n_same += same;
            n_quant += bn_type_traits_of(b[i]->type)->is_quantized;
        }
        printf("%s: %d weights identical to bonsai-quantize's file (%d quantized)\n", type, n_same, n_quant);
        CHECK(n_quant > 0, "%s: some weights quantized", type);
        CHECK(fq->w.output.data == fq->w.token_embd.data || !m->cfg.tied_output, "tied head follows token_embd");
    }
    bn_requant_model_free(fq);
    bn_model_free(m);
    bn_model_free(mq);
}

static void test_rows(void) {
    enum { NI = 256, NO = 3 };
    static float w[NI * NO], fq[NI * NO], ref[NI * NO], again[NI * NO];
    static uint8_t q[NI * NO * 4];
    bn_rng rng;
    bn_rng_seed(&rng, 7);
    for (int i = 0; i < NI * NO; i++) w[i] = (float)(bn_rng_uniform(&rng) - 0.5) * 0.1f;
    const int types[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0, BN_Q4_0, BN_F16};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int ty = types[k];
        CHECK(bn_fake_quantize(ty, w, fq, NI, NO) == 0, "%s fake quantize", bn_type_name(ty));
        CHECK(bn_quantize_ref(ty, w, q, NI * NO) == bn_row_size(ty, NI) * NO, "%s ref quantize", bn_type_name(ty));
        bn_dequantize(ty, q, ref, NI * NO);
        CHECK(memcmp(fq, ref, sizeof fq) == 0, "%s: fake quantize == deq(quantize_ref) bit for bit", bn_type_name(ty));
        CHECK(bn_fake_quantize(ty, fq, again, NI, NO) == 0 && memcmp(again, fq, sizeof fq) == 0, "%s idempotent",
              bn_type_name(ty));
    }
    CHECK(bn_fake_quantize(BN_F16, w, fq, NI, NO) == 0 && fq[5] == bn_fp16_to_fp32(bn_fp32_to_fp16(w[5])), "F16 round trip");
    CHECK(bn_fake_quantize(BN_Q1_0, w, fq, 100, 1) == -1, "row of 100 is not a Q1_0 row");
    CHECK(bn_fake_quantize(9999, w, fq, NI, 1) == -1, "unknown type");
    memcpy(fq, w, sizeof w);
    CHECK(bn_fake_quantize(BN_Q1_0, fq, fq, NI, NO) == 0 && bn_fake_quantize(BN_Q1_0, w, ref, NI, NO) == 0 &&
          memcmp(fq, ref, sizeof fq) == 0, "in place (out == w)");
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char base[512];
    if (fx_write_tiny(dir, BN_F16, base, sizeof base) != 0) return test_done("train_fakequant");
    test_rows();
    test_model(base, "Q1_0");
    test_model(base, "Q2_0");
    test_model(base, "Q8_0");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_fakequant");
}
