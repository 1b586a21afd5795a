// tests/model/test_forward_batch.c — bn_forward_batch (one decode step of several sequences at once) against
// one-token bn_forward of each sequence, on the tiny qwen35 model (GDN and attention layers) in F32, Q8_0 and
// Q1_0, with fp32 and fp16 KV caches: 4 sequences prefilled with prompts of different lengths (so different
// positions and caches), then 12 steps where the batched states and their unbatched twins get the same tokens
// (the batched run's argmax). Every step: the batched logits equal the twins' within 1e-4 (n columns take the
// mat-mat kernels, one the mat-vec ones: another summation order, test_forward_ref's prefill-vs-decode bound;
// measured F32 9e-6, fp16 KV 3.6e-5, Q8_0 / Q1_0 4.8e-7), argmax, lse and top-8 of the batched outs agree with
// the batched logits, greedy tokens identical. Errors (a shared state, more sequences than
// batch rows, a bad token, taps) leave every state unchanged.
// bn_forward_batch_front (the CPU half of the CPU+CUDA engine's batched step): front states of n_layer − 1 and of
// all layers (the attention layer is the last) against bn_forward_front of each sequence: residual rows within
// 1e-4 over 8 steps; a state of other layers, a bad token and no x_out are refused with every state unchanged.
#include "tests/test.h"
#include "tests/model/tiny.h"
#include "core/forward.h"
#include "core/forward_impl.h"
#include "core/model.h"
#include "core/sampler.h"
#include "core/util.h"
#include <math.h>
#include <string.h>
#include <unistd.h>

#define N_SEQ 4
#define N_STEPS 12
#define TOPK 8

// load_tiny: the tiny qwen35 model with weights of type wtype, written to a temporary GGUF and loaded (dies on error).
static bn_model *load_tiny(int wtype) {
    char err[512], path[256];
    tiny_model *tm = xcalloc(1, sizeof *tm);
    tiny_defaults(tm, "qwen35");
    tm->wtype = wtype;
    tiny_build(tm);
    snprintf(path, sizeof path, "/tmp/bonsai-test-batch-%d.gguf", (int)getpid());
    if (tiny_write(tm, path, err, sizeof err) != 0) bn_die("write: %s", err);
    bn_model *m = bn_model_load(path, err, sizeof err);
    unlink(path);
    if (!m) bn_die("load: %s", err);
    tiny_free(tm);
    free(tm);
    return m;
}

// batch_case: the checks above for weights of type wtype and a KV cache of kv_type; bound: max |Δ logit|.
static void batch_case(int wtype, int kv_type, double bound) {
    char err[512];
    bn_model *m = load_tiny(wtype);
    const int V = m->cfg.n_vocab;
    bn_state *b[N_SEQ], *r[N_SEQ]; // batched states, their one-token twins
    for (int i = 0; i < N_SEQ; i++) {
        b[i] = bn_state_new_kv(m, 128, 2, kv_type), r[i] = bn_state_new_kv(m, 128, 1, kv_type);
        int32_t prompt[16];
        const int n_prompt = 3 + 4 * i;
        for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((t * 37 + i * 11 + 5) % V);
        bn_forward_out none = {0};
        CHECK(bn_forward(m, b[i], prompt, n_prompt, &none, err, sizeof err) == 0 &&
                  bn_forward(m, r[i], prompt, n_prompt, &none, err, sizeof err) == 0,
              "prefill %d: %s", i, err);
    }
    float *lb = xmalloc(sizeof(float) * V * N_SEQ), *lr = xmalloc(sizeof(float) * V);
    int32_t am[N_SEQ], tk_ids[N_SEQ][TOPK], want_ids[TOPK], tok[N_SEQ];
    float lse[N_SEQ], tk_vals[N_SEQ][TOPK], want_vals[TOPK];
    bn_forward_out ob[N_SEQ], *outs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        ob[i] = (bn_forward_out){.logits = lb + (size_t)i * V, .argmax = &am[i], .lse = &lse[i], .topk = TOPK,
                                 .topk_ids = tk_ids[i], .topk_logits = tk_vals[i]};
        outs[i] = &ob[i];
        tok[i] = (int32_t)((i * 101 + 7) % V);
    }
    double worst = 0, worst_lse = 0;
    int bad_argmax = 0, bad_topk = 0, greedy_diff = 0;
    for (int step = 0; step < N_STEPS; step++) {
        CHECK(bn_forward_batch(m, b, tok, N_SEQ, outs, err, sizeof err) == 0, "batch step %d: %s", step, err);
        for (int i = 0; i < N_SEQ; i++) {
            bn_forward_out o = {.logits = lr};
            CHECK(bn_forward(m, r[i], &tok[i], 1, &o, err, sizeof err) == 0, "twin %d step %d: %s", i, step, err);
            const float *row = lb + (size_t)i * V;
            for (int v = 0; v < V; v++) worst = fmax(worst, fabs(row[v] - lr[v]));
            bad_argmax += am[i] != bn_logits_argmax(row, V);
            greedy_diff += bn_logits_argmax(lr, V) != am[i];
            worst_lse = fmax(worst_lse, fabs(lse[i] - bn_logits_lse(row, V)));
            bn_logits_topk_values(row, V, TOPK, want_ids, want_vals);
            bad_topk += memcmp(want_ids, tk_ids[i], sizeof want_ids) || memcmp(want_vals, tk_vals[i], sizeof want_vals);
            tok[i] = am[i];
        }
    }
    int pos_ok = 1;
    for (int i = 0; i < N_SEQ; i++) pos_ok &= bn_state_pos(b[i]) == bn_state_pos(r[i]) && bn_state_pos(b[i]) == 3 + 4 * i + N_STEPS;
    printf("%s %s KV: %d sequences x %d steps: max |d logit| batched vs one-token %.3g (bound %.0e), argmax %d bad, "
           "top-%d %d bad, lse %.2g, greedy tokens differing %d\n", bn_type_name(wtype), kv_type == BN_F16 ? "fp16" : "fp32",
           N_SEQ, N_STEPS, worst, bound, bad_argmax, TOPK, bad_topk, worst_lse, greedy_diff);
    CHECK(worst <= bound && bad_argmax == 0 && bad_topk == 0 && worst_lse == 0 && greedy_diff == 0 && pos_ok,
          "%s: the batched step differs from one-token steps", bn_type_name(wtype));

    // errors leave every state where it was
    int pos[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) pos[i] = bn_state_pos(b[i]);
    bn_state *dup[2] = {b[0], b[0]};
    CHECK(bn_forward_batch(m, dup, tok, 2, NULL, err, sizeof err) == -1 && strstr(err, "share"), "shared state: %s", err);
    int32_t bad_tok[N_SEQ] = {1, V, 2, 3};
    CHECK(bn_forward_batch(m, b, bad_tok, N_SEQ, NULL, err, sizeof err) == -1 && strstr(err, "bad token"),
          "bad token: %s", err);
    const int layer0 = 0;
    float taps[64];
    bn_forward_out with_taps = {.tap_layers = &layer0, .n_taps = 1, .taps = taps}, *tap_outs[N_SEQ] = {&with_taps};
    CHECK(bn_forward_batch(m, b, tok, 1, tap_outs, err, sizeof err) == -1 && strstr(err, "taps"), "taps: %s", err);
    bn_state *small = bn_state_new_kv(m, 1, 1, kv_type), *two[2] = {small, b[1]}; // 1 batch row
    CHECK(bn_forward_batch(m, two, tok, 2, NULL, err, sizeof err) == -1 && strstr(err, "rows"), "rows: %s", err);
    for (int i = 0; i < N_SEQ; i++) CHECK(bn_state_pos(b[i]) == pos[i], "state %d moved on error", i);
    bn_state_free(small);

    for (int i = 0; i < N_SEQ; i++) bn_state_free(b[i]), bn_state_free(r[i]);
    free(lb), free(lr);
    bn_model_free(m);
}

// front_case: the bn_forward_batch_front checks above for front states of n_layers layers (F32 weights, fp16 KV).
static void front_case(int n_layers) {
    char err[512];
    bn_model *m = load_tiny(BN_F32);
    const int V = m->cfg.n_vocab, H = m->cfg.n_embd;
    bn_state *b[N_SEQ], *r[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        b[i] = bn_state_new_front(m, 64, 2, BN_F16, n_layers), r[i] = bn_state_new_front(m, 64, 1, BN_F16, n_layers);
        int32_t prompt[16];
        const int n_prompt = 2 + 3 * i;
        for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((t * 41 + i * 13 + 1) % V);
        float *x = xmalloc(sizeof(float) * H * n_prompt);
        CHECK(bn_forward_front(m, b[i], prompt, n_prompt, x, NULL, err, sizeof err) == 0 &&
                  bn_forward_front(m, r[i], prompt, n_prompt, x, NULL, err, sizeof err) == 0,
              "front prefill %d: %s", i, err);
        free(x);
    }
    float xb[N_SEQ * 256], xr[256];
    CHECK(H <= 256, "tiny n_embd %d", H);
    double worst = 0;
    for (int step = 0; step < 8; step++) {
        int32_t tok[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) tok[i] = (int32_t)((step * 31 + i * 7 + 2) % V);
        CHECK(bn_forward_batch_front(m, b, tok, N_SEQ, xb, err, sizeof err) == 0, "front batch step %d: %s", step, err);
        for (int i = 0; i < N_SEQ; i++) {
            CHECK(bn_forward_front(m, r[i], &tok[i], 1, xr, NULL, err, sizeof err) == 0, "front twin: %s", err);
            for (int d = 0; d < H; d++) worst = fmax(worst, fabs(xb[(size_t)i * H + d] - xr[d]));
        }
    }
    int pos[N_SEQ], pos_ok = 1;
    for (int i = 0; i < N_SEQ; i++) pos[i] = bn_state_pos(b[i]), pos_ok &= pos[i] == bn_state_pos(r[i]);
    printf("front %d of %d layers: %d sequences x 8 steps: max |d x| batched vs one-token %.3g (bound 1e-4)\n",
           n_layers, m->cfg.n_layer, N_SEQ, worst);
    CHECK(worst <= 1e-4 && pos_ok, "front batch of %d layers differs from bn_forward_front (%.3g)", n_layers, worst);
    int32_t tok[N_SEQ] = {1, 2, 3, 4}, bad_tok[N_SEQ] = {1, 2, V, 4};
    CHECK(bn_forward_batch_front(m, b, bad_tok, N_SEQ, xb, err, sizeof err) == -1 && strstr(err, "bad token"),
          "front bad token: %s", err);
    CHECK(bn_forward_batch_front(m, b, tok, N_SEQ, NULL, err, sizeof err) == -1 && strstr(err, "x_out"),
          "front without x_out: %s", err);
    bn_state *other = bn_state_new_front(m, 64, 1, BN_F16, n_layers - 1), *mixed[2] = {b[0], other};
    CHECK(bn_forward_batch_front(m, mixed, tok, 2, xb, err, sizeof err) == -1 && strstr(err, "layers"),
          "front states of other layers: %s", err);
    for (int i = 0; i < N_SEQ; i++) CHECK(bn_state_pos(b[i]) == pos[i], "front state %d moved on error", i);
    bn_state_free(other);
    for (int i = 0; i < N_SEQ; i++) bn_state_free(b[i]), bn_state_free(r[i]);
    bn_model_free(m);
}

int main(void) {
    batch_case(BN_F32, BN_F32, 1e-4);
    batch_case(BN_F32, BN_F16, 1e-4);
    batch_case(BN_Q8_0, BN_F32, 1e-4);
    batch_case(BN_Q1_0, BN_F32, 1e-4);
    front_case(3);
    front_case(4);
    return test_done("forward_batch");
}
