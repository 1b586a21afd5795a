// tests/train/test_tether.c — the plain-text tether of bonsai-ftpo-train (--tether-text, --lambda-tether;
// train/tether.h bn_tether_loss, train/graph.h bn_train_forward_all_lora / bn_train_backward_all_lora) on the
// tiny qwen35 (F16 weights):
//  1. gradient: ∂ mean KL(p_ref ‖ p_θ) / ∂(A, B) of an adapter on every projection incl. the LM head (random B)
//     vs central finite differences of the fp32 forward (h = 1e-3; |analytic − fd| <= 2e-2·max|fd| + 1e-5:
//     fp32 logits limit the FD accuracy, see test_model_grad);
//  2. at step 0 (B = 0, PEFT init) the KL is 0 and so is its gradient (|KL| <= 1e-6, max |∂| <= 1e-6: the
//     reference log-probs are stored as float, so exact zeros are not expected), also through bn_ftpo_train with
//     --ste-type Q1_0 (the reference is the quantized base);
//  3. FTPO runs (24 steps, lr 3e-3, all targets) with λ_tether 0 and 20: the mean KL to the base over every
//     window of the tether text after training is at most 0.5× with the tether (measured 0.10×: 0.0082 vs 0.082),
//     while the last step's chosen_win is still > 0.5 (1.0); λ 0 equals a run without tether text bit for bit;
//  4. resume: 3 steps + checkpoint + --resume 3 steps gives the same adapter as 6 steps in one run (bit for bit;
//     the windows are a function of the seed and the step, nothing extra in the checkpoint);
//  5. --init-adapter (bn_ftpo_train_opts.init_adapter): lr 0 from a trained adapter writes it back byte for byte;
//     an adapter of another rank is refused.
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "base/util.h"
#include "base/rng.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/ftpo.h"
#include "train/trainer.h"
#include "train/tether.h"
#include "train/fakequant.h"
#include "quant/quant.h"

static char dir[] = "/tmp/bonsai_test_tether_XXXXXX";
enum { NT = 12, N_TEXT = 96 };
static int32_t TEXT[N_TEXT]; // the "plain text": 96 tokens = 8 windows of 12

static const bn_model *M;
static bn_lora *L;
static float *LOGP; // reference log-probs of TEXT[0..NT) {V, NT}

// kl_of: the tether loss of L on the first window (backward: adds ∂ into L->grads).
static double kl_of(bool backward) {
    char err[256];
    double kl = 0;
    if (bn_tether_loss(M, L, TEXT, NT, LOGP, 1.0f, backward, &kl, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    return kl;
}

// test_grad: part 1.
static void test_grad(void) {
    bn_lora_zero_grad(L);
    double kl0 = kl_of(true);
    float *g = xmalloc(sizeof(float) * L->n_params);
    memcpy(g, L->grads, sizeof(float) * L->n_params);
    double max_fd = 0, worst = 0;
    int n = 0;
    float *fd = xmalloc(sizeof(float) * L->n_params);
    int64_t *idx = xmalloc(sizeof(int64_t) * L->n_params);
    for (int ti = 0; ti < L->n_tensors; ti++) { // 6 elements of A and of B per tensor
        const bn_lora_tensor *t = &L->t[ti];
        int64_t na = t->n_in * L->r, nb = t->n_out * L->r;
        for (int k = 0; k < 12; k++) {
            int64_t e = k < 6 ? t->off_a + (k * 7919) % na : t->off_b + (k * 104729) % nb;
            float save = L->params[e];
            const float h = 1e-3f;
            L->params[e] = save + h;
            double lp = kl_of(false);
            L->params[e] = save - h;
            double lm = kl_of(false);
            L->params[e] = save;
            fd[n] = (float)((lp - lm) / (2.0 * h));
            idx[n++] = e;
            if (fabs(fd[n - 1]) > max_fd) max_fd = fabs(fd[n - 1]);
        }
    }
    for (int i = 0; i < n; i++) {
        double e = fabs(fd[i] - g[idx[i]]);
        if (e > worst) worst = e;
    }
    double tol = 2e-2 * max_fd + 1e-5;
    printf("tether gradient: KL %.4g, %d parameters over %d tensors, max |fd| %.4g, max |analytic - fd| %.3g (tol %.3g)\n",
           kl0, n, L->n_tensors, max_fd, worst, tol);
    CHECK(kl0 > 1e-3, "the random adapter moves the logits (KL %g)", kl0);
    CHECK(max_fd > 1e-4, "FD gradients are not all ~0 (max %g)", max_fd);
    CHECK(worst <= tol, "tether gradient vs FD: %g > %g", worst, tol);
    free(g); free(fd); free(idx);
}

// test_step0: part 2 (direct call).
static void test_step0(void) {
    bn_lora_init_peft(L, 5); // B = 0
    bn_lora_zero_grad(L);
    double kl = kl_of(true);
    double gmax = 0;
    for (int64_t i = 0; i < L->n_params; i++) if (fabs(L->grads[i]) > gmax) gmax = fabs(L->grads[i]);
    printf("step 0: KL %.3g, max |grad| %.3g\n", kl, gmax);
    CHECK(fabs(kl) <= 1e-6, "KL at B = 0: %g (tol 1e-6)", kl);
    CHECK(gmax <= 1e-6, "tether gradient at B = 0: %g (tol 1e-6)", gmax);
}

// text_kl: mean KL(base ‖ base + adapter) over every NT-token window of TEXT.
static double text_kl(const bn_model *m, const char *adapter) {
    char err[256];
    bn_lora *l = bn_lora_load_gguf(adapter, err, sizeof err);
    if (!l) { CHECK(0, "adapter: %s", err); return -1; }
    float *logp = xmalloc(sizeof(float) * (size_t)m->cfg.n_vocab * NT);
    double sum = 0;
    for (int w = 0; w < N_TEXT / NT; w++) {
        double kl = 0;
        if (bn_tether_ref(m, TEXT + w * NT, NT, logp, err, sizeof err) ||
            bn_tether_loss(m, l, TEXT + w * NT, NT, logp, 1.0f, false, &kl, err, sizeof err)) { CHECK(0, "%s", err); break; }
        sum += kl;
    }
    free(logp);
    bn_lora_free(l);
    return sum / (N_TEXT / NT);
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    char err[256];
    char *x = bn_read_file(a, &na, err, sizeof err), *y = bn_read_file(b, &nb, err, sizeof err);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x); free(y);
    return same;
}

// test_train: parts 2 (through the trainer, STE), 3 and 4.
static void test_train(const bn_model *m) {
    char err[256], a0[600], aoff[600], a1[600], a6[600], a33[600], ckpt[600];
    bn_train_rows *rows = fx_ftpo_rows(m);
    bn_ftpo_train_opts o = fx_ftpo_opts(BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 3e-3f, 4, 1, 8);
    o.eval_each_epoch = false;
    o.tether_tokens = TEXT;
    o.n_tether_tokens = N_TEXT;
    o.tether_ctx = NT;
    o.tether_batch = 2;
    bn_ftpo_train_result res;
    // part 2 through the trainer: STE Q1_0, the reference is the quantized base; the first step's KL is 0
    o.ste_type = "Q1_0";
    o.lambda_tether = 1;
    o.max_steps = 1;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "STE + tether 1 step: %s", err);
    printf("STE Q1_0 + tether: step-1 KL %.3g\n", res.first_tether);
    CHECK(fabs(res.first_tether) <= 1e-6, "STE step-1 tether KL %g (tol 1e-6)", res.first_tether);
    o.ste_type = NULL;
    o.max_steps = 0;
    // part 3: λ 0 vs 20
    snprintf(a0, sizeof a0, "%s/l0.gguf", dir);
    snprintf(aoff, sizeof aoff, "%s/off.gguf", dir);
    snprintf(a1, sizeof a1, "%s/l20.gguf", dir);
    o.lambda_tether = 0;
    o.out_adapter = a0;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "λ 0: %s", err);
    double win0 = res.last_chosen_win;
    o.tether_tokens = NULL;
    o.n_tether_tokens = 0;
    o.out_adapter = aoff;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "no tether text: %s", err);
    CHECK(same_file(a0, aoff), "λ 0 = no tether text (byte-identical adapters)");
    o.tether_tokens = TEXT;
    o.n_tether_tokens = N_TEXT;
    o.lambda_tether = 20;
    o.out_adapter = a1;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "λ 20: %s", err);
    double win1 = res.last_chosen_win;
    double kl0 = text_kl(m, a0), kl1 = text_kl(m, a1);
    printf("FTPO %lld steps: plain-text KL to the base %.4g (λ 0) vs %.4g (λ 20), ratio %.3f; chosen_win %.3f vs %.3f; "
           "tether KL in training %.4g -> %.4g\n", (long long)res.steps, kl0, kl1, kl1 / kl0, win0, win1,
           res.first_tether, res.last_tether);
    CHECK(kl0 > 1e-3, "without the tether FTPO moves the plain-text distribution (KL %g)", kl0);
    CHECK(kl1 <= 0.5 * kl0, "tether λ 20 keeps plain-text KL <= 0.5x λ 0's: %g vs %g", kl1, kl0);
    CHECK(win1 > 0.5, "with the tether FTPO still learns (chosen_win %g)", win1);
    // part 4: resume
    snprintf(a6, sizeof a6, "%s/six.gguf", dir);
    snprintf(a33, sizeof a33, "%s/three3.gguf", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.bin", dir);
    o.lambda_tether = 5;
    o.out_adapter = a6;
    o.max_steps = 6;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && res.steps == 6, "6 steps: %s", err);
    o.out_adapter = a33;
    o.ckpt_path = ckpt;
    o.max_steps = 3;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && res.steps == 3, "3 steps: %s", err);
    o.resume_path = ckpt;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && res.steps == 6, "resume 3 steps: %s", err);
    CHECK(same_file(a6, a33), "6 steps == 3 + resume 3 with the tether (byte-identical adapters)");
    // part 5: --init-adapter (the demo's second round): lr 0 from a trained adapter writes it back unchanged;
    // another rank is refused
    char ai[600];
    snprintf(ai, sizeof ai, "%s/init.gguf", dir);
    o.resume_path = NULL;
    o.ckpt_path = NULL;
    o.init_adapter = a1;
    o.lr = 0;
    o.out_adapter = ai;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "init from an adapter: %s", err);
    CHECK(same_file(a1, ai), "lr 0 from --init-adapter keeps the adapter (byte-identical)");
    o.rank = 8;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == -1 && strstr(err, "does not match"),
          "init adapter of another rank refused: %s", err);
    bn_train_rows_free(rows);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char base[512], err[256];
    bn_model *m = fx_tiny_model(dir, BN_F16, base, sizeof base);
    if (!m) return test_done("train_tether");
    M = m;
    bn_rng rng;
    bn_rng_seed(&rng, 99);
    for (int i = 0; i < N_TEXT; i++) TEXT[i] = (int32_t)bn_rng_below(&rng, 250);
    L = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 8, 0, err, sizeof err);
    CHECK(L != NULL, "adapter: %s", err);
    if (!L) return test_done("train_tether");
    bn_lora_init_peft(L, 11);
    for (int i = 0; i < L->n_tensors; i++) // B large enough that the KL is well above the fp32 noise
        for (int64_t e = 0; e < L->t[i].n_out * L->r; e++) L->params[L->t[i].off_b + e] = (float)(0.2 * (bn_rng_uniform(&rng) - 0.5));
    LOGP = xmalloc(sizeof(float) * (size_t)m->cfg.n_vocab * NT);
    CHECK(bn_tether_ref(m, TEXT, NT, LOGP, err, sizeof err) == 0, "reference: %s", err);
    test_grad();
    test_step0();
    test_train(m);
    free(LOGP);
    bn_lora_free(L);
    bn_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_tether");
}
