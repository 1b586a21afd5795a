// tests/quantize/test_q5_engine.c — the engine runs Q5_0 / Q5_1 / Q5_K files: a tiny qwen35 (F16) is
// quantized to each (Q5_K via Q5_K_S), unpacked again to F32, and the logits of 8 tokens of both files
// through bn_forward must agree: cosine >= 0.998 per row and max |diff| <= 0.25 * logit std (measured
// 0.9993-0.9996 and 0.09-0.12; the difference is the Q8 activation rounding on a random model).
// Skips while quant/dot.c's dispatch has no kernel for one of the types.
#include "core/forward.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "tests/test.h"
#include "tests/quantize/tiny256.h"
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum { N_TOK = 8 };
static const int32_t tokens[N_TOK] = {1, 17, 30, 42, 99, 56, 7, 50};

// logits_of: all-token logits [N_TOK][n_vocab] of a model file; NULL after a failed CHECK.
static float *logits_of(const char *path, int *n_vocab) {
    char err[512];
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "load %s: %s", path, err);
    if (!m) return NULL;
    *n_vocab = m->cfg.n_vocab;
    float *logits = xmalloc((size_t)N_TOK * *n_vocab * sizeof(float));
    bn_state *s = bn_state_new(m, 64, 2);
    bn_forward_out out = {.logits = logits, .all_logits = true};
    int rc = bn_forward(m, s, tokens, N_TOK, &out, err, sizeof err);
    CHECK(rc == 0, "forward %s: %s", path, err);
    bn_state_free(s);
    bn_model_free(m);
    if (rc != 0) {
        free(logits);
        return NULL;
    }
    return logits;
}

static int quantize(const char *in, const char *out, const char *type) {
    bn_quantize_params p = bn_quantize_params_default();
    p.type = type;
    p.n_threads = 2;
    p.log = NULL;
    char err[512];
    int rc = bn_quantize_file(&p, in, out, err, sizeof err);
    CHECK(rc == 0, "quantize %s -> %s: %s", in, type, err);
    return rc;
}

// check_type: logits of the `ftype` file vs its F32 unpack.
static void check_type(const char *dir, const char *src, const char *ftype) {
    char q[300], f32[300];
    snprintf(q, sizeof q, "%s/%s.gguf", dir, ftype);
    snprintf(f32, sizeof f32, "%s/%s-f32.gguf", dir, ftype);
    if (quantize(src, q, ftype) != 0 || quantize(q, f32, "F32") != 0) return;
    int nv_q = 0, nv_f = 0;
    float *lq = logits_of(q, &nv_q), *lf = logits_of(f32, &nv_f);
    if (lq && lf && nv_q == nv_f) {
        double worst_cos = 1, worst_rel = 0;
        for (int t = 0; t < N_TOK; t++) {
            const float *a = lq + (size_t)t * nv_q, *b = lf + (size_t)t * nv_q;
            double ab = 0, aa = 0, bb = 0, mean = 0, var = 0, maxd = 0;
            for (int v = 0; v < nv_q; v++) {
                ab += (double)a[v] * b[v], aa += (double)a[v] * a[v], bb += (double)b[v] * b[v];
                mean += b[v];
                if (fabs((double)a[v] - b[v]) > maxd) maxd = fabs((double)a[v] - b[v]);
            }
            mean /= nv_q;
            for (int v = 0; v < nv_q; v++) var += (b[v] - mean) * (b[v] - mean);
            double cos = ab / sqrt(aa * bb + 1e-30), rel = maxd / sqrt(var / nv_q + 1e-30);
            if (cos < worst_cos) worst_cos = cos;
            if (rel > worst_rel) worst_rel = rel;
        }
        CHECK(worst_cos >= 0.998, "%s: worst row cosine %.6f", ftype, worst_cos);
        CHECK(worst_rel <= 0.25, "%s: max |diff| / logit std %.4f", ftype, worst_rel);
        printf("%-6s vs its F32 unpack: worst cosine %.6f, max |diff| / std %.4f\n", ftype, worst_cos, worst_rel);
    }
    free(lq);
    free(lf);
}

int main(void) {
    const int types[] = {BN_Q5_0, BN_Q5_1, BN_Q5_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!bn_vec_dot_best(types[i])) {
            printf("FAIL: quant/dot.c's dispatch has no vec_dot for %s\n", bn_type_name(types[i]));
            return 1;
        }
    char dir[128], err[512], cmd[300];
    if (scratch_dir(dir, sizeof dir, "bonsai-q5-engine") != 0) return test_skip("cannot create a temp dir");
    bn_mkmodel_params mp;
    tiny256_params(&mp);
    char src[300];
    snprintf(src, sizeof src, "%s/f16.gguf", dir);
    if (bn_mkmodel_write(&mp, src, err, sizeof err) != 0) {
        CHECK(0, "mkmodel: %s", err);
        return test_done("q5_engine");
    }
    check_type(dir, src, "Q5_0");
    check_type(dir, src, "Q5_1");
    check_type(dir, src, "Q5_K_S");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_done("q5_engine");
}
