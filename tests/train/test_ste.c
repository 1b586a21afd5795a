// tests/train/test_ste.c — the STE LoRA path (bonsai-ftpo-train --ste-type, train/fakequant.h) on the tiny
// qwen35 (F16 weights), quantizer Q1_0:
//  1. definition: with l->ste, the forward on the STE model (W_eff = deq(Q(W0 + s·B·A)), every other weight
//     as bonsai-quantize stores it) equals the plain LoRA forward on a model holding W_eff − s·B·A (rel L2
//     <= 1e-5), and the STE gradients ∂A, ∂B equal the plain LoRA gradients evaluated there (|Δ| <= 1e-4 +
//     1e-3·|g|: fp32 summation order); they differ from the gradients at W0 (not the same computation);
//  2. merge: bn_lora_merge_requant's file holds exactly the STE weights (byte for byte), the training forward
//     on it equals the STE logits (rel L2 <= 1e-6), and the engine's logits on it agree within the
//     engine-vs-trainer tolerance of tests/train (NMSE <= 2e-2: the engine quantizes activations to Q8_0);
//  3. a fixed-seed FTPO run (12 steps, lr 1e-2) with --ste-type Q1_0 raises the merged-and-requantized
//     model's chosen_win above 0.5, while the same plain LoRA run merged then requantized stays below 0.25;
//     so does the run through Q2_0 with keep-scales, merged with keep-scales;
//  4. the STE type is part of the checkpoint: resuming without it (or with another type, or without
//     --keep-scales) is refused;
//  5. keep-scales (bn_quantize_keep_scales, --keep-scales) for Q1_0, Q2_0, PQ2_0: re-quantizing deq(Q(x)) gives
//     Q(x) byte for byte; an element pushed to 3·d keeps its block's scale (saturates at +d) where the
//     reference quantizer rescales the block; an element moved to 0.1·d gives code 0 (Q2_0); other types are
//     refused; part 2 also holds for Q2_0 with keep-scales, and every adapted block keeps the base's scale;
//  6. with an output type (bonsai-quantize --output-tensor-type q8_0), part 2 holds and the merged file's output
//     weight has that type (without one: the low-bit type, bonsai-quantize's rule), with keep-scales too (the
//     head then gets the reference quantizer).
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/forward.h"
#include "base/util.h"
#include "quant/quant.h"
#include "train/fakequant.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/merge.h"
#include "train/trainer.h"

static char dir[] = "/tmp/bonsai_test_ste_XXXXXX";
static const int32_t TOK[9] = {4, 90, 33, 201, 7, 140, 12, 66, 9};
#define NT 9

static bn_lora *make_lora(const bn_model *m) {
    char err[256];
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 8, 0, err, sizeof err);
    bn_lora_init_peft(l, 11);
    bn_rng rng;
    bn_rng_seed(&rng, 12);
    for (int i = 0; i < l->n_tensors; i++) // B large enough that Q(W0 + s·B·A) differs from Q(W0)
        for (int64_t e = 0; e < l->t[i].n_out * l->r; e++) l->params[l->t[i].off_b + e] = (float)(0.2 * (bn_rng_uniform(&rng) - 0.5));
    return l;
}

// grads_of: forward on m with l, L = Σ g_j z_j, backward; returns a copy of l->grads and the logits in z.
static float *grads_of(const bn_model *m, bn_lora *l, const float *g, float *z) {
    char err[256];
    bn_lora_zero_grad(l);
    bn_train_graph *gr = bn_train_forward(m, l, TOK, NT, NULL, z, err, sizeof err);
    CHECK(gr != NULL, "forward: %s", err);
    if (gr) CHECK(bn_train_backward(gr, g, err, sizeof err) == 0, "backward: %s", err);
    bn_train_graph_free(gr);
    float *out = xmalloc(sizeof(float) * l->n_params);
    memcpy(out, l->grads, sizeof(float) * l->n_params);
    return out;
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); den += (double)b[i] * b[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// test_definition: part 1.
static void test_definition(const bn_model *m) {
    char err[256];
    int V = m->cfg.n_vocab;
    bn_lora *l = make_lora(m);
    bn_model *q = bn_requant_model(m, "Q1_0", NULL, err, sizeof err), *ref = bn_requant_model(m, "F32", NULL, err, sizeof err);
    CHECK(q && ref, "requant models: %s", err);
    if (!q || !ref) return;
    CHECK(bn_requant_model_apply_lora(q, m, l, err, sizeof err) == 0, "apply lora: %s", err);
    // ref: every weight = the STE model's value (fp32), adapted ones minus s·B·A
    bn_weight *sq[256], *sr[256];
    int n = bn_model_weight_slots(q, sq, 256);
    bn_model_weight_slots(ref, sr, 256);
    for (int i = 0; i < n; i++) {
        if (!sq[i]->data || sr[i]->type != BN_F32 || sq[i]->type == BN_F32) continue;
        int64_t ne = sq[i]->ne[0] * (sq[i]->ne[1] > 0 ? sq[i]->ne[1] : 1);
        float *w = xmalloc(sizeof(float) * ne);
        bn_dequantize(sq[i]->type, sq[i]->data, w, ne);
        int li = bn_lora_find(l, sq[i]->name);
        if (li >= 0)
            bn_lora_merge_f32(w, l->t[li].n_in, l->t[li].n_out, l->params + l->t[li].off_a, l->params + l->t[li].off_b, l->r,
                              -bn_lora_scale(l));
        CHECK(bn_requant_model_set(ref, sq[i]->name, w, err, sizeof err) == 0, "set %s: %s", sq[i]->name, err);
        free(w);
    }
    float *g = xmalloc(sizeof(float) * V), *z_ste = xmalloc(sizeof(float) * V), *z_ref = xmalloc(sizeof(float) * V);
    float *z0 = xmalloc(sizeof(float) * V);
    bn_rng rng;
    bn_rng_seed(&rng, 5);
    for (int j = 0; j < V; j++) g[j] = (float)(bn_rng_uniform(&rng) - 0.5);
    l->ste = true;
    float *g_ste = grads_of(q, l, g, z_ste);
    l->ste = false;
    float *g_ref = grads_of(ref, l, g, z_ref);
    float *g_w0 = grads_of(m, l, g, z0);
    double dz = rel_l2(z_ste, z_ref, V);
    printf("STE logits vs LoRA at W_eff: rel L2 %.3g\n", dz);
    CHECK(dz <= 1e-5, "STE forward != LoRA forward at W_eff (rel L2 %g, tol 1e-5)", dz);
    int n_bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < l->n_params; i++) {
        double tol = 1e-4 + 1e-3 * fabs(g_ref[i]), e = fabs((double)g_ste[i] - g_ref[i]);
        n_bad += e > tol;
        worst = fmax(worst, e / tol);
    }
    printf("STE gradient vs LoRA gradient at W_eff: %lld params, worst error / tolerance %.3f; vs at W0: rel L2 %.3g\n",
           (long long)l->n_params, worst, rel_l2(g_ste, g_w0, l->n_params));
    CHECK(n_bad == 0, "%d of %lld STE gradients off (tol 1e-4 + 1e-3·|g|)", n_bad, (long long)l->n_params);
    CHECK(rel_l2(g_ste, g_w0, l->n_params) > 1e-2, "STE gradients differ from the plain ones at W0");
    free(g); free(z_ste); free(z_ref); free(z0); free(g_ste); free(g_ref); free(g_w0);
    bn_requant_model_free(q);
    bn_requant_model_free(ref);
    bn_lora_free(l);
}

// scales_kept: 1 when every block scale of the quantized weight w (type Q1_0 / Q2_0 / PQ2_0: d first in each
// block) equals the one in q0 (same type and shape).
static int scales_kept(const bn_weight *w, const bn_weight *q0) {
    int64_t nb = w->ne[0] * (w->ne[1] > 0 ? w->ne[1] : 1) / bn_type_blck(w->type);
    size_t bs = (size_t)bn_type_size(w->type);
    for (int64_t i = 0; i < nb; i++)
        if (memcmp((const uint8_t *)w->data + i * bs, (const uint8_t *)q0->data + i * bs, 2)) return 0;
    return 1;
}

// test_merge: part 2 (type "q1_0" or "q2_0"; keep: keep-scales, part 5; head: output.weight's type, part 6).
static void test_merge(const bn_model *m, const char *base, const char *type, bool keep, const char *head) {
    char err[256], out[600];
    int V = m->cfg.n_vocab;
    bn_lora *l = make_lora(m);
    bn_model *q = bn_requant_model(m, type, head, err, sizeof err), *q0 = bn_requant_model(m, type, head, err, sizeof err);
    if (!q || !q0) { CHECK(0, "requant: %s", err); return; }
    if (keep) bn_requant_model_keep_scales(q);
    if (bn_requant_model_apply_lora(q, m, l, err, sizeof err)) { CHECK(0, "STE model: %s", err); return; }
    if (keep) {
        int n_kept = 0, n_keep = 0; // a head of another type (part 6) gets the reference quantizer
        for (int i = 0; i < l->n_tensors; i++) {
            bn_weight *w[256], *w0[256];
            int n = bn_model_weight_slots(q, w, 256);
            bn_model_weight_slots(q0, w0, 256);
            for (int k = 0; k < n; k++)
                if (w[k]->data && w[k]->name && !strcmp(w[k]->name, l->t[i].name) && bn_type_keeps_scales(w[k]->type)) {
                    n_keep++;
                    n_kept += scales_kept(w[k], w0[k]);
                }
        }
        CHECK(n_kept == n_keep && n_keep >= l->n_tensors - 1,
              "%s keep-scales: adapted weights keep the base's block scales (%d of %d, %d adapted)", type, n_kept,
              n_keep, l->n_tensors);
    }
    snprintf(out, sizeof out, "%s/merged_%s%s%s.gguf", dir, type, keep ? "_keep" : "", head ? "_head" : "");
    bn_merge_stat *st = xcalloc((size_t)l->n_tensors, sizeof *st);
    CHECK(bn_lora_merge_requant(base, l, 1.0f, type, head, keep, out, st, err, sizeof err) == 0, "merge requant: %s", err);
    bn_model *mm = bn_model_load(out, err, sizeof err);
    CHECK(mm != NULL, "merged loads: %s", err);
    if (mm) {
        bn_weight *a[256], *b[256];
        int n = bn_model_weight_slots(q, a, 256), n_same = 0, n_w = 0;
        bn_model_weight_slots(mm, b, 256);
        for (int i = 0; i < n; i++) {
            if (!a[i]->data) continue;
            size_t bytes = bn_row_size(a[i]->type, a[i]->ne[0]) * (size_t)(a[i]->ne[1] > 0 ? a[i]->ne[1] : 1);
            n_w++;
            n_same += a[i]->type == b[i]->type && memcmp(a[i]->data, b[i]->data, bytes) == 0;
        }
        CHECK(n_same == n_w, "%s%s%s: merged file == STE weights byte for byte (%d of %d)", type, keep ? " keep" : "",
              head ? " head" : "", n_same, n_w);
        const bn_weight *out_w = mm->cfg.tied_output ? &mm->w.token_embd : &mm->w.output;
        int want = head ? bn_type_from_name(head) : bn_type_from_name(type);
        CHECK(out_w->type == want, "%s: the output weight is %s (want %s)", type, bn_type_name(out_w->type),
              bn_type_name(want));
        CHECK(st[0].type == bn_type_from_name(type) && st[0].kept != 0, "stats on the quantized tensors (kept %g)",
              st[0].kept);
        float *z_ste = xmalloc(sizeof(float) * V), *z_m = xmalloc(sizeof(float) * V), *z_e = xmalloc(sizeof(float) * V);
        l->ste = true;
        bn_train_graph_free(bn_train_forward(q, l, TOK, NT, NULL, z_ste, err, sizeof err));
        bn_train_graph_free(bn_train_forward(mm, NULL, TOK, NT, NULL, z_m, err, sizeof err));
        double d = rel_l2(z_m, z_ste, V);
        CHECK(d <= 1e-6, "training forward on the merged file vs STE logits: rel L2 %g (tol 1e-6)", d);
        bn_state *s = bn_state_new(mm, 64, 1);
        bn_forward_out fo = {.logits = z_e};
        CHECK(bn_forward(mm, s, TOK, NT, &fo, err, sizeof err) == 0, "engine: %s", err);
        double num = 0, den = 0;
        for (int j = 0; j < V; j++) { num += ((double)z_e[j] - z_ste[j]) * ((double)z_e[j] - z_ste[j]); den += (double)z_e[j] * z_e[j]; }
        printf("merged %s%s: trainer vs STE rel L2 %.3g; engine vs STE logits NMSE %.3g\n", type, keep ? " keep-scales" : "",
               d, num / den);
        CHECK(num <= 2e-2 * den, "engine on the merged %s file vs STE logits: NMSE %g (tol 2e-2)", type, num / den);
        bn_state_free(s);
        free(z_ste); free(z_m); free(z_e);
        bn_model_free(mm);
    }
    free(st);
    bn_requant_model_free(q);
    bn_requant_model_free(q0);
    bn_lora_free(l);
}

// test_keep_scales_codec: part 5 on the codec, for one type.
static void test_keep_scales_codec(int type) {
    enum { N = 1024 };
    int blck = bn_type_blck(type);
    size_t bytes = bn_row_size(type, N);
    float *x = xmalloc(sizeof(float) * N), *y = xmalloc(sizeof(float) * N), *back = xmalloc(sizeof(float) * N);
    uint8_t *q0 = xmalloc(bytes), *q1 = xmalloc(bytes), *qr = xmalloc(bytes);
    bn_rng rng;
    bn_rng_seed(&rng, 99);
    for (int i = 0; i < N; i++) x[i] = (float)(bn_rng_uniform(&rng) - 0.5);
    bn_quantize_ref(type, x, q0, N);
    bn_dequantize(type, q0, y, N);
    CHECK(bn_quantize_keep_scales(type, y, q0, q1, N) == bytes && !memcmp(q0, q1, bytes),
          "%s: keep-scales of deq(Q(x)) == Q(x)", bn_type_name(type));
    // block 1: element 5 pushed to 3·d (d = |deq| of element 5 for Q1_0; the block's max for Q2_0)
    float d = fabsf(y[blck + 5]);
    for (int j = 0; j < blck; j++) d = type == BN_Q1_0 ? d : fmaxf(d, fabsf(y[blck + j]));
    y[blck + 5] = 3 * d;
    y[blck + 6] = 0.1f * d;
    bn_quantize_keep_scales(type, y, q0, q1, N);
    bn_quantize_ref(type, y, qr, N);
    bn_dequantize(type, q1, back, N);
    size_t bs = (size_t)bn_type_size(type);
    CHECK(!memcmp(q1 + bs, q0 + bs, 2) && memcmp(qr + bs, q0 + bs, 2), "%s: 3·d keeps the scale (reference: rescales)",
          bn_type_name(type));
    CHECK(back[blck + 5] == d, "%s: 3·d saturates at +d (%g vs %g)", bn_type_name(type), back[blck + 5], d);
    if (type != BN_Q1_0) CHECK(back[blck + 6] == 0, "%s: 0.1·d -> code 0 (%g)", bn_type_name(type), back[blck + 6]);
    CHECK(bn_quantize_keep_scales(BN_Q8_0, x, q0, q1, N) == 0, "keep-scales refuses Q8_0");
    free(x); free(y); free(back); free(q0); free(q1); free(qr);
}

// merged_win: chosen_win over all rows of base + adapter merged and requantized to type (keep: keep-scales).
static double merged_win(const char *base, const char *adapter, const bn_train_rows *rows, const char *tag,
                         const char *type, bool keep) {
    char err[256], out[600];
    bn_lora *l = bn_lora_load_gguf(adapter, err, sizeof err);
    if (!l) { CHECK(0, "adapter: %s", err); return -1; }
    snprintf(out, sizeof out, "%s/merged_%s.gguf", dir, tag);
    double win = -1;
    bn_ftpo_cfg cfg = bn_ftpo_cfg_antidoom();
    if (bn_lora_merge_requant(base, l, 1.0f, type, NULL, keep, out, NULL, err, sizeof err) == 0) {
        bn_model *mm = bn_model_load(out, err, sizeof err);
        bn_ftpo_eval_result r;
        if (mm && bn_ftpo_eval(mm, rows, NULL, &cfg, -1, &r, err, sizeof err) == 0) win = r.chosen_win;
        bn_model_free(mm);
    }
    CHECK(win >= 0, "%s merged eval: %s", tag, err);
    bn_lora_free(l);
    return win;
}

// test_ftpo: parts 3 and 4.
static void test_ftpo(const bn_model *m, const char *base) {
    char err[256], a_plain[600], a_ste[600], ckpt[600];
    bn_model *mq = bn_requant_model(m, "Q1_0", NULL, err, sizeof err);
    if (!mq) { CHECK(0, "requant: %s", err); return; }
    bn_train_rows *rows = fx_ftpo_rows(mq);
    bn_ftpo_eval_result r0;
    bn_ftpo_cfg cfg = bn_ftpo_cfg_antidoom();
    CHECK(bn_ftpo_eval(mq, rows, NULL, &cfg, -1, &r0, err, sizeof err) == 0 && r0.chosen_win == 0,
          "Q1_0 base chosen_win 0 (rejected = its argmax): %g", r0.chosen_win);
    bn_ftpo_train_opts o = fx_ftpo_opts(BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD, 4, 1e-2f, 4, 1, 4);
    o.eval_each_epoch = false;
    o.seed = 3407;
    snprintf(a_plain, sizeof a_plain, "%s/plain.gguf", dir);
    snprintf(a_ste, sizeof a_ste, "%s/ste.gguf", dir);
    bn_ftpo_train_result res;
    o.out_adapter = a_plain;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "plain train: %s", err);
    double w_plain_f = res.last_chosen_win;
    o.out_adapter = a_ste;
    o.ste_type = "Q1_0";
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "STE train: %s", err);
    double w_ste_train = res.last_chosen_win;
    double w_plain = merged_win(base, a_plain, rows, "plain", "Q1_0", false);
    double w_ste = merged_win(base, a_ste, rows, "ste", "Q1_0", false);
    printf("FTPO %lld steps: plain LoRA chosen_win %.3f in training -> %.3f merged+Q1_0; STE Q1_0 %.3f in training -> %.3f "
           "merged+Q1_0\n", (long long)res.steps, w_plain_f, w_plain, w_ste_train, w_ste);
    CHECK(w_ste > 0.5, "STE: merged Q1_0 chosen_win %g (expected > 0.5)", w_ste);
    CHECK(w_plain < 0.25, "plain LoRA: merged Q1_0 chosen_win %g (expected < 0.25: lost in requantization)", w_plain);
    // the same run through Q2_0 with keep-scales (part 5): the codes alone carry the preference
    char a_ks[600];
    snprintf(a_ks, sizeof a_ks, "%s/ste_q2_keep.gguf", dir);
    o.out_adapter = a_ks;
    o.ste_type = "Q2_0";
    o.ste_keep_scales = true;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "STE Q2_0 keep-scales train: %s", err);
    double w_ks = merged_win(base, a_ks, rows, "ste_q2_keep", "Q2_0", true);
    printf("FTPO STE Q2_0 keep-scales: chosen_win %.3f in training -> %.3f merged+Q2_0 (keep-scales)\n",
           res.last_chosen_win, w_ks);
    CHECK(w_ks > 0.5, "STE Q2_0 keep-scales: merged chosen_win %g (expected > 0.5)", w_ks);
    o.ste_type = "Q1_0";
    o.ste_keep_scales = false;
    o.out_adapter = a_ste;
    // checkpoint carries the STE type
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.bin", dir);
    o.ckpt_path = ckpt;
    o.max_steps = 1;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "STE train 1 step: %s", err);
    o.resume_path = ckpt;
    o.ste_type = NULL;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == -1 && strstr(err, "ste-type"),
          "resume without the STE type refused: %s", err);
    o.ste_type = "Q2_0";
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == -1, "resume with another STE type refused");
    o.ste_type = "Q1_0";
    o.ste_keep_scales = true;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == -1, "resume with --keep-scales added refused");
    o.ste_keep_scales = false;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && res.steps == 2, "resume with the same type: %s", err);
    o.resume_path = NULL;
    o.ckpt_path = NULL;
    o.dropout = 0.1f;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == -1 && strstr(err, "dropout"), "STE with dropout refused");
    bn_train_rows_free(rows);
    bn_requant_model_free(mq);
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char base[512];
    bn_model *m = fx_tiny_model(dir, BN_F16, base, sizeof base);
    if (!m) return test_done("train_ste");
    test_definition(m);
    test_merge(m, base, "q1_0", false, NULL);
    test_merge(m, base, "q1_0", false, "q8_0");
    test_keep_scales_codec(BN_Q1_0);
    test_keep_scales_codec(BN_Q2_0);
    test_keep_scales_codec(BN_PQ2_0);
    test_merge(m, base, "q2_0", true, NULL);
    test_merge(m, base, "q2_0", true, "q8_0");
    test_ftpo(m, base);
    bn_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_done("train_ste");
}
