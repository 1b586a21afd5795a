// tests/train/test_sft_grad.c — full-parameter gradients (train/sft.h) against central finite
// differences: the mean next-token cross-entropy of a 10-token sequence through the tiny qwen35
// (synth/mkmodel "tiny", F32: 3 Gated DeltaNet layers + 1 gated attention layer) and the tied
// qwen3-tiny, on sampled elements of EVERY parameter tensor (the 2 elements with the largest
// |analytic gradient| and 2 random ones per tensor). Loss and gradient are fp32 (noise ~1e-6 on a
// loss of ~11, i.e. ~1e-4 on the FD quotient), so h = 5e-3·max(1, |w|) balances that against the
// O(h²) truncation (2.3% on the largest attn_qkv element at h = 1e-2, 0.5% at 3e-3);
// tolerance |analytic − fd| <= 3e-4 + 2e-2·|fd|.
// Also: bn_sft_ce's gradient against finite differences (double loss; h = 1e-3, tolerance 1e-4 + 1e-3·|fd|).
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "train/sft.h"

static const int32_t TOK[10] = {5, 17, 200, 42, 99, 7, 250, 11, 64, 17};
enum { NT = 10 };

static double loss_of(bn_sft_params *p, bool backward) {
    char err[256];
    double l = bn_sft_seq_loss(p, TOK, NT, 1.0f, backward, err, sizeof err);
    if (l < 0) { fprintf(stderr, "loss: %s\n", err); exit(1); }
    return l;
}

// check_model: FD on 4 elements of every tensor; returns the number of tensors checked.
static int check_model(const char *label, const bn_model *m) {
    char err[256];
    bn_sft_params *p = bn_sft_params_new(m, err, sizeof err);
    CHECK(p != NULL, "%s: params: %s", label, err);
    if (!p) return 0;
    bn_sft_zero_grad(p);
    double L0 = loss_of(p, true);
    printf("%s: %d tensors, %lld params, loss %.4f\n", label, p->n_tensors, (long long)p->n_params, L0);
    float *grad = xmalloc(sizeof(float) * (size_t)p->n_params);
    memcpy(grad, p->grads, sizeof(float) * (size_t)p->n_params);
    uint64_t rs = 12345;
    int n_bad = 0, n_checked = 0;
    double worst = 0;
    for (int ti = 0; ti < p->n_tensors; ti++) {
        const bn_sft_tensor *t = &p->t[ti];
        int64_t picks[4] = {0, 0, 0, 0};
        // the two largest |gradient| elements
        for (int64_t i = 0; i < t->n; i++) {
            float a = fabsf(grad[t->off + i]);
            if (a > fabsf(grad[t->off + picks[0]])) { picks[1] = picks[0]; picks[0] = i; }
            else if (i != picks[0] && a > fabsf(grad[t->off + picks[1]])) picks[1] = i;
        }
        for (int k = 2; k < 4; k++) {
            rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
            picks[k] = (int64_t)((rs >> 33) % (uint64_t)t->n);
        }
        double tensor_worst = 0, tensor_max = 0;
        for (int k = 0; k < 4; k++) {
            int64_t i = t->off + picks[k];
            float save = p->params[i];
            float h = 5e-3f * fmaxf(1.0f, fabsf(save));
            p->params[i] = save + h;
            double lp = loss_of(p, false);
            p->params[i] = save - h;
            double lm = loss_of(p, false);
            p->params[i] = save;
            double fd = (lp - lm) / ((double)(save + h) - (double)(save - h));
            double e = fabs(fd - grad[i]);
            double tol = 3e-4 + 2e-2 * fabs(fd);
            n_checked++;
            tensor_max = fmax(tensor_max, fabs(fd));
            tensor_worst = fmax(tensor_worst, e / (fabs(fd) + 1e-2));
            if (e > tol) {
                n_bad++;
                fprintf(stderr, "  %s %s[%lld]: analytic %.6g fd %.6g\n", label, t->name, (long long)picks[k], grad[i], fd);
            }
        }
        worst = fmax(worst, tensor_worst);
        printf("  %-28s max|fd| %-10.4g worst rel err %.3g\n", t->name, tensor_max, tensor_worst);
        CHECK(tensor_max > 0, "%s: %s has an all-zero sampled gradient", label, t->name);
    }
    CHECK(n_bad == 0, "%s: %d of %d sampled gradient elements outside tolerance", label, n_bad, n_checked);
    printf("%s: %d elements checked, worst |err|/(|fd|+1e-2) %.3g\n", label, n_checked, worst);
    int nt = p->n_tensors;
    free(grad);
    bn_sft_params_free(p);
    return nt;
}

static double ce_at(const float *z, const int32_t *tg, int T, int V) { return bn_sft_ce(z, tg, T, V, 1.0f, NULL, NULL); }

static void check_ce(void) {
    enum { T = 5, V = 37 };
    float z[T * V], dz[T * V];
    int32_t tg[T] = {3, -1, 36, 0, 20}; // one ignored position
    uint64_t rs = 99;
    for (int i = 0; i < T * V; i++) {
        rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
        z[i] = (float)((double)(rs >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    int cnt = 0;
    double L = bn_sft_ce(z, tg, T, V, 1.0f, dz, &cnt);
    CHECK(cnt == 4, "ce counted %d positions, expected 4", cnt);
    double worst = 0;
    for (int i = 0; i < T * V; i++) {
        float save = z[i];
        const float h = 1e-3f;
        z[i] = save + h;
        double lp = ce_at(z, tg, T, V);
        z[i] = save - h;
        double lm = ce_at(z, tg, T, V);
        z[i] = save;
        double fd = (lp - lm) / ((double)(save + h) - (double)(save - h));
        double e = fabs(fd - dz[i]);
        worst = fmax(worst, e);
        CHECK(e <= 1e-4 + 1e-3 * fabs(fd), "ce dz[%d]: analytic %.6g fd %.6g", i, dz[i], fd);
    }
    // the ignored row has zero gradient; scale multiplies the gradient
    for (int i = 0; i < V; i++) CHECK(dz[V + i] == 0.0f, "ignored position has gradient %g", dz[V + i]);
    float dz2[T * V];
    bn_sft_ce(z, tg, T, V, 0.5f, dz2, NULL);
    CHECK_NEAR(dz2[7], 0.5 * dz[7], 1e-7, "ce scale");
    printf("ce: loss %.4f, worst |dz − fd| %.3g\n", L, worst);
}

int main(void) {
    check_ce();
    char dir[] = "/tmp/bonsai_test_sft_grad_XXXXXX";
    if (!mkdtemp(dir)) return test_skip("mkdtemp failed");
    const char *presets[] = {"tiny", "qwen3-tiny"};
    for (int i = 0; i < 2; i++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, presets[i]);
        bn_mkmodel_params mp;
        bn_mkmodel_defaults(&mp, presets[i]);
        if (bn_mkmodel_write(&mp, path, err, sizeof err)) { CHECK(0, "mkmodel %s: %s", presets[i], err); continue; }
        bn_model *m = bn_model_load(path, err, sizeof err);
        CHECK(m != NULL, "load %s: %s", presets[i], err);
        if (m) {
            int nt = check_model(presets[i], m);
            // tiny qwen35: token_embd, output_norm, output + 3 GDN layers × 14 + 1 attention layer × 11
            if (i == 0) CHECK(nt == 3 + 3 * 14 + 11, "tiny: %d tensors, expected 56", nt);
            bn_model_free(m);
        }
        unlink(path);
    }
    rmdir(dir);
    return test_done("train_sft_grad");
}
