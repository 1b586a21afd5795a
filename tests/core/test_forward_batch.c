// tests/core/test_forward_batch.c — bn_forward_batch (one decode step of several sequences at once) against
// one-token bn_forward of each sequence, on the tiny qwen35 model (GDN and attention layers) in F32, Q8_0 and
// Q1_0, with fp32 and fp16 KV caches: 4 sequences prefilled with prompts of different lengths (so different
// positions and caches), then 12 steps where the batched states and their unbatched twins get the same tokens
// (the batched run's argmax). Every step: the batched logits equal the twins' within 1e-4 (n columns take the
// mat-mat kernels, one the mat-vec ones: another summation order, test_forward_ref's prefill-vs-decode bound;
// measured F32 9e-6, fp16 KV 3.6e-5, Q8_0 / Q1_0 4.8e-7), argmax, lse and top-8 of the batched outs agree with
// the batched logits, greedy tokens identical. Errors (a shared state, more sequences than
// batch rows, a bad token) leave every state unchanged.
// bn_forward_multi (a ragged pass: several tokens of each of several sequences), F32 and Q1_0: 3 sequences with 3, 1
// and 5 tokens (rotated each round, 6 rounds) against bn_forward of each sequence alone: every row's logits within
// 1e-4 (the same bound), argmax and lse equal, taps of layers 0 and 2 within 1e-4, per-token snapshots within 1e-4
// with their positions; after each round one sequence is restored to its middle snapshot (twin likewise), so the
// next round also checks the restore. Errors (0 tokens, more tokens than batch rows, past n_ctx, front outs) leave
// every state unchanged.
// bn_forward_multi_front (the CPU half of the CPU+CUDA engine's batched passes), one token each: front states of
// n_layer − 1 and of all layers (the attention layer is the last) against bn_forward_front of each sequence: residual rows within
// 1e-4 over 8 steps; a state of other layers, a bad token and no x_out are refused with every state unchanged.
#include "tests/test.h"
#include "tests/core/tiny.h"
#include "core/forward.h"
#include "core/forward_impl.h"
#include "core/model.h"
#include "core/sampler.h"
#include "base/util.h"
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
    bn_state *small = bn_state_new_kv(m, 1, 1, kv_type), *two[2] = {small, b[1]}; // 1 batch row
    CHECK(bn_forward_batch(m, two, tok, 2, NULL, err, sizeof err) == -1 && strstr(err, "rows"), "rows: %s", err);
    for (int i = 0; i < N_SEQ; i++) CHECK(bn_state_pos(b[i]) == pos[i], "state %d moved on error", i);
    bn_state_free(small);

    for (int i = 0; i < N_SEQ; i++) bn_state_free(b[i]), bn_state_free(r[i]);
    free(lb), free(lr);
    bn_model_free(m);
}

// batch_front: bn_forward_multi_front with one token of each of n sequences (n <= N_SEQ); its result.
static int batch_front(const bn_model *m, bn_state *const *seqs, const int32_t *tokens, int n, float *x_out, char *err,
                       size_t errlen) {
    const int32_t *tokp[N_SEQ];
    int ones[N_SEQ];
    for (int t = 0; t < n; t++) tokp[t] = &tokens[t], ones[t] = 1;
    return bn_forward_multi_front(m, seqs, tokp, ones, n, x_out, NULL, err, errlen);
}

// front_case: the bn_forward_multi_front checks above for front states of n_layers layers (F32 weights, fp16 KV).
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
        CHECK(batch_front(m, b, tok, N_SEQ, xb, err, sizeof err) == 0, "front batch step %d: %s", step, err);
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
    CHECK(batch_front(m, b, bad_tok, N_SEQ, xb, err, sizeof err) == -1 && strstr(err, "bad token"),
          "front bad token: %s", err);
    CHECK(batch_front(m, b, tok, N_SEQ, NULL, err, sizeof err) == -1 && strstr(err, "x_out"),
          "front without x_out: %s", err);
    bn_state *other = bn_state_new_front(m, 64, 1, BN_F16, n_layers - 1), *mixed[2] = {b[0], other};
    CHECK(batch_front(m, mixed, tok, 2, xb, err, sizeof err) == -1 && strstr(err, "layers"),
          "front states of other layers: %s", err);
    for (int i = 0; i < N_SEQ; i++) CHECK(bn_state_pos(b[i]) == pos[i], "front state %d moved on error", i);
    bn_state_free(other);
    for (int i = 0; i < N_SEQ; i++) bn_state_free(b[i]), bn_state_free(r[i]);
    bn_model_free(m);
}

// max_diff: max |a[i] − b[i]| over n floats.
static double max_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

#define M_SEQ 3
#define M_MAXTOK 5
#define M_ROUNDS 6

// multi_case: the bn_forward_multi checks above for weights of type wtype.
static void multi_case(int wtype) {
    char err[512];
    bn_model *m = load_tiny(wtype);
    const int V = m->cfg.n_vocab, H = m->cfg.n_embd;
    const int taps_at[2] = {0, 2};
    bn_state *b[M_SEQ], *r[M_SEQ];
    bn_snapshot *sb[M_SEQ][M_MAXTOK], *sr[M_SEQ][M_MAXTOK];
    for (int i = 0; i < M_SEQ; i++) {
        b[i] = bn_state_new(m, 128, 2), r[i] = bn_state_new(m, 128, 1);
        int32_t prompt[16];
        const int n_prompt = 2 + 5 * i;
        for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((t * 29 + i * 17 + 3) % V);
        CHECK(bn_forward(m, b[i], prompt, n_prompt, NULL, err, sizeof err) == 0 &&
                  bn_forward(m, r[i], prompt, n_prompt, NULL, err, sizeof err) == 0, "multi prefill %d: %s", i, err);
        for (int j = 0; j < M_MAXTOK; j++) sb[i][j] = bn_snapshot_new(b[i]), sr[i][j] = bn_snapshot_new(r[i]);
    }
    const size_t n_rec = sb[0][0]->n;
    float *lb = xmalloc(sizeof(float) * V * M_SEQ * M_MAXTOK), *lr = xmalloc(sizeof(float) * V * M_MAXTOK);
    float *tb = xmalloc(sizeof(float) * 2 * H * M_SEQ * M_MAXTOK), *tr = xmalloc(sizeof(float) * 2 * H * M_MAXTOK);
    int32_t amb[M_SEQ][M_MAXTOK], amr[M_MAXTOK];
    float lseb[M_SEQ][M_MAXTOK], lser[M_MAXTOK];
    double w_logit = 0, w_tap = 0, w_snap = 0;
    int bad = 0;
    for (int round = 0; round < M_ROUNDS; round++) {
        static const int lens[M_SEQ] = {3, 1, 5};
        int n_tok[M_SEQ];
        int32_t toks[M_SEQ][M_MAXTOK];
        const int32_t *tokp[M_SEQ];
        bn_forward_out ob[M_SEQ], *outs[M_SEQ];
        for (int i = 0; i < M_SEQ; i++) {
            n_tok[i] = lens[(i + round) % M_SEQ];
            for (int j = 0; j < n_tok[i]; j++) toks[i][j] = (int32_t)((round * 53 + i * 31 + j * 7 + 1) % V);
            tokp[i] = toks[i];
            const size_t o = (size_t)i * M_MAXTOK;
            // sequence 1 asks for its last row only and no taps: a plain decode step's outs
            ob[i] = (bn_forward_out){.logits = lb + o * V, .argmax = amb[i], .lse = lseb[i], .all_logits = i != 1,
                                     .snaps = sb[i]};
            if (i != 1) ob[i].tap_layers = taps_at, ob[i].n_taps = 2, ob[i].taps = tb + o * 2 * H;
            outs[i] = &ob[i];
        }
        CHECK(bn_forward_multi(m, b, tokp, n_tok, M_SEQ, outs, err, sizeof err) == 0, "multi round %d: %s", round, err);
        for (int i = 0; i < M_SEQ; i++) {
            const bool all = i != 1;
            bn_forward_out o = {.logits = lr, .argmax = amr, .lse = lser, .all_logits = all, .snaps = sr[i]};
            if (all) o.tap_layers = taps_at, o.n_taps = 2, o.taps = tr;
            CHECK(bn_forward(m, r[i], toks[i], n_tok[i], &o, err, sizeof err) == 0, "multi twin %d: %s", i, err);
            const int n_rows = all ? n_tok[i] : 1;
            const float *rows = lb + (size_t)i * M_MAXTOK * V;
            w_logit = fmax(w_logit, max_diff(rows, lr, (size_t)n_rows * V));
            for (int j = 0; j < n_rows; j++)
                bad += amb[i][j] != bn_logits_argmax(rows + (size_t)j * V, V) ||
                       lseb[i][j] != bn_logits_lse(rows + (size_t)j * V, V);
            if (all) w_tap = fmax(w_tap, max_diff(tb + (size_t)i * M_MAXTOK * 2 * H, tr, (size_t)n_tok[i] * 2 * H));
            for (int j = 0; j < n_tok[i]; j++) {
                w_snap = fmax(w_snap, max_diff(sb[i][j]->data, sr[i][j]->data, n_rec));
                bad += bn_snapshot_pos(sb[i][j]) != bn_snapshot_pos(sr[i][j]) ||
                       bn_snapshot_pos(sb[i][j]) != bn_state_pos(r[i]) - n_tok[i] + j + 1;
            }
            bad += bn_state_pos(b[i]) != bn_state_pos(r[i]);
        }
        const int back = round % M_SEQ; // a rejected draft tail: back to the middle token's snapshot
        bn_state_restore(b[back], sb[back][(n_tok[back] - 1) / 2]);
        bn_state_restore(r[back], sr[back][(n_tok[back] - 1) / 2]);
    }
    printf("%s multi: %d sequences of 3/1/5 tokens x %d rounds: max |d logit| vs bn_forward alone %.3g, taps %.3g, "
           "snapshots %.3g (bound 1e-4), %d argmax / lse / position mismatches\n", bn_type_name(wtype), M_SEQ,
           M_ROUNDS, w_logit, w_tap, w_snap, bad);
    CHECK(w_logit <= 1e-4 && w_tap <= 1e-4 && w_snap <= 1e-4 && bad == 0, "%s: the ragged pass differs",
          bn_type_name(wtype));

    // errors leave every state where it was
    int pos[M_SEQ];
    for (int i = 0; i < M_SEQ; i++) pos[i] = bn_state_pos(b[i]);
    int32_t many[BN_MAX_BATCH + 1] = {0};
    const int32_t *tokp[M_SEQ] = {many, many, many};
    int n_zero[M_SEQ] = {1, 0, 1}, n_big[M_SEQ] = {BN_MAX_BATCH, 1, 1}, n_late[2] = {1, 3};
    CHECK(bn_forward_multi(m, b, tokp, n_zero, M_SEQ, NULL, err, sizeof err) == -1 && strstr(err, "0 tokens"),
          "no tokens: %s", err);
    CHECK(bn_forward_multi(m, b, tokp, n_big, M_SEQ, NULL, err, sizeof err) == -1 && strstr(err, "rows"),
          "too many tokens: %s", err);
    bn_state *small = bn_state_new(m, 8, 1), *late[2] = {small, b[1]}; // b[1] is past the first state's n_ctx
    CHECK(bn_forward_multi(m, late, tokp, n_late, 2, NULL, err, sizeof err) == -1 && strstr(err, "n_ctx"),
          "past n_ctx: %s", err);
    CHECK(bn_state_pos(small) == 0, "the small state moved on error");
    bn_state_free(small);
    for (int i = 0; i < M_SEQ; i++) CHECK(bn_state_pos(b[i]) == pos[i], "multi state %d moved on error", i);

    for (int i = 0; i < M_SEQ; i++) {
        for (int j = 0; j < M_MAXTOK; j++) bn_snapshot_free(sb[i][j]), bn_snapshot_free(sr[i][j]);
        bn_state_free(b[i]), bn_state_free(r[i]);
    }
    free(lb), free(lr), free(tb), free(tr);
    bn_model_free(m);
}

int main(void) {
    batch_case(BN_F32, BN_F32, 1e-4);
    batch_case(BN_F32, BN_F16, 1e-4);
    batch_case(BN_Q8_0, BN_F32, 1e-4);
    batch_case(BN_Q1_0, BN_F32, 1e-4);
    front_case(3);
    front_case(4);
    multi_case(BN_F32);
    multi_case(BN_Q1_0);
    return test_done("forward_batch");
}
