// tests/train/test_model_grad.c — whole-model LoRA gradient on the tiny qwen35 (3 GDN + 1 gated
// attention layer, Hk 2 < Hv 4) and the tiny dense qwen3 from synth/mkmodel, and llama, qwen2 and a
// Q8_0-weight qwen35 from tests/core/tiny.h: FTPO loss on the
// last-position logits (reference = adapter disabled), backward through every layer
// (train/graph.h), compared with central finite differences of the fp32 training forward on
// LoRA parameters of every adapted projection (A and B, incl. the LM head).
// The fp32 forward limits FD accuracy (noise ~1e-6 on a loss of ~12): h = 1e-2 (truncation O(h²)),
// tolerance |analytic − fd| <= 1e-3 + 1e-2·|fd|.
// Also: the training forward's base logits match the engine's bn_forward (NMSE 1e-8; 2e-2 for Q8_0
// weights, where the engine quantizes activations), and with
// dropout the backward replays the same masks (FD with the RNG reset for every forward).
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/forward.h"
#include "base/util.h"
#include "train/graph.h"
#include "train/ftpo.h"
#include "tests/core/tiny.h"

static const bn_model *M;
static bn_lora *Lr;
static int32_t TOK[9] = {5, 17, 200, 42, 99, 7, 250, 11, 64};
enum { NT = 9 };
static float *REF;        // reference logits (base model)
static int REJ, CH[3];
static uint64_t DROP_SEED;

// loss: FTPO (antidoom preset) of the adapter's last-position logits; dz (optional) gets ∂L/∂z.
static double loss_and_grad(float *dz, bool backward) {
    int V = M->cfg.n_vocab;
    float *z = xmalloc(sizeof(float) * V);
    char err[256];
    bn_rng rng;
    bn_rng_seed(&rng, DROP_SEED);
    bn_train_graph *g = bn_train_forward(M, Lr, TOK, NT, DROP_SEED ? &rng : NULL, z, err, sizeof err);
    if (!g) { fprintf(stderr, "forward: %s\n", err); exit(1); }
    bn_ftpo_cfg cfg = bn_ftpo_cfg_antidoom();
    bn_ftpo_row row = {z, REF, REJ, CH, 3};
    float *dzb = dz ? dz : xmalloc(sizeof(float) * V);
    double L = bn_ftpo_loss(&cfg, &row, 1, V, &dzb, NULL);
    if (backward && bn_train_backward(g, dzb, err, sizeof err)) { fprintf(stderr, "backward: %s\n", err); exit(1); }
    if (!dz) free(dzb);
    bn_train_graph_free(g);
    free(z);
    return L;
}

// check_params: FD on elements of A and B of each adapted tensor.
static void check_params(const char *label) {
    int V = M->cfg.n_vocab;
    float *dz = xmalloc(sizeof(float) * V);
    bn_lora_zero_grad(Lr);
    double L0 = loss_and_grad(dz, true);
    float *grad = xmalloc(sizeof(float) * Lr->n_params);
    memcpy(grad, Lr->grads, sizeof(float) * Lr->n_params);
    int n_checked = 0, n_bad = 0;
    double worst = 0, max_fd = 0;
    for (int ti = 0; ti < Lr->n_tensors; ti++) {
        const bn_lora_tensor *t = &Lr->t[ti];
        int64_t picks[4] = {t->off_a + 1, t->off_a + (t->n_in * Lr->r) / 2 + 3, t->off_b, t->off_b + (t->n_out * Lr->r) - 2};
        for (int p = 0; p < 4; p++) {
            int64_t i = picks[p];
            float save = Lr->params[i];
            const float h = 1e-2f;
            Lr->params[i] = save + h;
            double lp = loss_and_grad(NULL, false);
            Lr->params[i] = save - h;
            double lm = loss_and_grad(NULL, false);
            Lr->params[i] = save;
            double fd = (lp - lm) / (2.0 * h);
            double e = fabs(fd - grad[i]);
            double tol = 1e-3 + 1e-2 * fabs(fd);
            n_checked++;
            max_fd = fmax(max_fd, fabs(fd));
            if (e > tol) {
                n_bad++;
                fprintf(stderr, "  %s %s %s[%lld]: analytic %.6g fd %.6g\n", label, t->name, p < 2 ? "A" : "B",
                        (long long)(i - (p < 2 ? t->off_a : t->off_b)), grad[i], fd);
            }
            worst = fmax(worst, e / tol);
        }
    }
    CHECK(n_bad == 0, "%s: %d of %d LoRA parameters off (tolerance 1e-3 + 1e-2·|fd|)", label, n_bad, n_checked);
    printf("  %-34s loss %.6f  %d params, max |fd| %.4g, worst error / tolerance %.3f\n", label, L0, n_checked, max_fd, worst);
    free(grad);
    free(dz);
}

// run_model: the checks on one model file; engine_tol bounds the NMSE of the training forward's
// base logits vs bn_forward (the engine quantizes activations to Q8 for quantized weights).
static int run_model(const char *preset, const char *path, double engine_tol) {
    char err[256];
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) { CHECK(0, "load %s: %s", preset, err); return -1; }
    M = m;
    int V = m->cfg.n_vocab;
    printf("%s: H %d, %d layers, V %d\n", preset, m->cfg.n_embd, m->cfg.n_layer, V);
    // base logits from the training forward vs the engine
    REF = xmalloc(sizeof(float) * V);
    bn_train_graph *g = bn_train_forward(m, NULL, TOK, NT, NULL, REF, err, sizeof err);
    CHECK(g != NULL, "base forward: %s", err);
    bn_train_graph_free(g);
    bn_state *s = bn_state_new(m, 64, 1);
    float *eng = xmalloc(sizeof(float) * V);
    bn_forward_out out = {.logits = eng};
    if (bn_forward(m, s, TOK, NT, &out, err, sizeof err) == 0) {
        double num = 0, den = 0;
        for (int j = 0; j < V; j++) { num += (eng[j] - REF[j]) * (double)(eng[j] - REF[j]); den += (double)eng[j] * eng[j]; }
        CHECK(num <= engine_tol * den, "%s: training forward vs bn_forward logits NMSE %g (tol %g)", preset, num / den, engine_tol);
        printf("  training forward vs engine logits: NMSE %.3g\n", num / den);
    } else {
        printf("  (engine forward unavailable: %s)\n", err);
    }
    bn_state_free(s);
    free(eng);
    // rejected = argmax of the reference, chosen = three other ids
    REJ = 0;
    for (int j = 1; j < V; j++) if (REF[j] > REF[REJ]) REJ = j;
    CH[0] = (REJ + 1) % V; CH[1] = (REJ + 7) % V; CH[2] = (REJ + 100) % V;

    Lr = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 2, 4.0f, 0.0f, err, sizeof err);
    CHECK(Lr != NULL, "lora: %s", err);
    if (!Lr) return -1;
    bn_lora_init_peft(Lr, 3407);
    bn_rng rng;
    bn_rng_seed(&rng, 5);
    for (int i = 0; i < Lr->n_tensors; i++) // non-zero B so dA is exercised
        for (int64_t e = 0; e < Lr->t[i].n_out * Lr->r; e++)
            Lr->params[Lr->t[i].off_b + e] = (float)(0.2 * (bn_rng_uniform(&rng) - 0.5));
    DROP_SEED = 0;
    char label[64];
    snprintf(label, sizeof label, "%s LoRA (all targets)", preset);
    check_params(label);
    Lr->dropout = 0.1f;
    DROP_SEED = 77;
    snprintf(label, sizeof label, "%s LoRA + dropout 0.1", preset);
    check_params(label);
    bn_lora_free(Lr);
    free(REF);
    bn_model_free(m);
    return 0;
}

int main(void) {
    char dir[] = "/tmp/bonsai_test_model_grad_XXXXXX";
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char path[600], err[256];
    const char *presets[] = {"tiny", "qwen3-tiny"};
    for (int i = 0; i < 2; i++) {
        bn_mkmodel_params p;
        bn_mkmodel_defaults(&p, presets[i]);
        snprintf(path, sizeof path, "%s/%s.gguf", dir, presets[i]);
        if (bn_mkmodel_write(&p, path, err, sizeof err)) { CHECK(0, "mkmodel %s: %s", presets[i], err); continue; }
        run_model(presets[i], path, 1e-8);
    }
    // tests/core/tiny.h generator: llama (NORM rope, no q/k norm), qwen2 (frozen q/k/v biases),
    // qwen35 with Q8_0 base weights (dequantized on the fly)
    static tiny_model tm;
    const char *archs[] = {"llama", "qwen2", "qwen35"};
    const char *labels[] = {"llama (tiny.h)", "qwen2 (tiny.h)", "qwen35 Q8_0 (tiny.h)"};
    for (int i = 0; i < 3; i++) {
        tiny_defaults(&tm, archs[i]);
        if (i == 2) tm.wtype = BN_Q8_0;
        tiny_build(&tm);
        snprintf(path, sizeof path, "%s/tiny_%d.gguf", dir, i);
        int rc = tiny_write(&tm, path, err, sizeof err);
        tiny_free(&tm);
        if (rc) { CHECK(0, "tiny.h %s: %s", archs[i], err); continue; }
        run_model(labels[i], path, i == 2 ? 2e-2 : 1e-8);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_model_grad");
}
