// tests/cuda/test_cuda_train_graph.c — the device backend of FTPO training (cuda/train_graph.cu, reached through
// train/device.h's registered bn_train_device) vs the CPU's train/graph.c on tiny generated models: the "tiny"
// bonsai-mkmodel qwen35 (3 GDN + 1 gated attention layer) in F32 and F16, requantized to Q8_0 and Q1_0 (every 2-D
// weight, embedding and head included), the dense qwen3-tiny, and llama (NORM RoPE) and qwen2 (q/k/v biases) from
// tests/core/tiny.h. Every case adapts all the targets the model has (the LM head where it is untied) at rank 4 with
// random A and B (PEFT's B = 0 would leave paths without gradient) and compares: the last-position logits with the
// adapter and without (the reference forward), and every LoRA gradient for random dlogits, taken into pre-filled host
// gradients (take_grads adds, then zeroes the device's: a second take adds nothing). Also: load_params makes the
// device's logits follow changed parameters, a step timed by part (set_profile) gives every part the model has its
// time, open refuses dropout and an unknown GEMM arithmetic, and the device memory
// the trainer holds at its peak (alone, and for qwen35 F32 and Q1_0 with an --ste-type run's reference context next to
// it) equals the memory plan's device total (train/memplan.h) to the byte in the emulator, and stays within it plus the
// margin on a GPU. These cases run the device with fp32 GEMMs (train/device.h's BN_TRAIN_GEMM_F32), the CPU's twin, and
// the FFN block over spans of SPAN tokens. Part `bf16` runs three of them (qwen35 F32 and Q1_0, qwen3) again with bf16
// GEMMs (the kept layer inputs bf16, the FFN in one pass), checked against the CPU within the BF16_* bounds below, each
// error at least 10x the fp32 path's (the bf16 path did run), and a mutant model that must fail those bounds (they are
// tight enough to catch a lost chunk of rows), and the all-position graph within the same bounds; its memory check runs
// with bf16 GEMMs.
// Built twice: `cuda_train_graph` links the GPU library (skipped without a device, e.g. CI); `cuda_train_graph_emu`
// links the CPU emulator (cuda/emu/) and always runs, also in shuffled order.
// Tolerance (why): both sides compute in fp32 with the same formulas but different summation orders (cuBLAS / OpenBLAS
// GEMMs against core/matmul's dot products, tree reductions in the norms and the attention); quantized weights are
// dequantized bit-identically on both sides, so they need no more. Differences grow through 4 layers and the
// recurrence to ~1e-6 of a tensor's scale; the check is |device − cpu| <= TOL_REL · max|cpu| per tensor (logits, each
// A and each B), with TOL_REL = 1e-4: two orders above what is measured, far below the size of any real mistake (a
// wrong or missing term changes a gradient by O(1) of its scale).
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include "tests/test.h"
#include "tests/core/tiny.h"
#include "synth/mkmodel.h"
#include "quantize/quantize.h"
#include "core/model.h"
#include "base/util.h"
#include "base/rng.h"
#include "train/graph.h"
#include "train/lora.h"
#include "train/device.h"
#include "train/memplan.h"

#define TOL_REL 1e-4
#define RANK 4
#define ALL_TARGETS ((1u << BN_LORA_N_TARGETS) - 1)

// Bounds of the device with bf16 GEMMs against the CPU, relative L2 over the logits (and over the reference logits),
// over the whole gradient vector, and over the worst single A or B gradient. Each layer product rounds its weight and
// its input (x, or dy in the backward) to bf16 (relative 2^-9 each), and four layers and the recurrence carry that on:
// measured on the three models of part bf16 logits 5.3e-3..1.1e-2, reference 4.5e-3..1.2e-2, gradients
// 8.7e-3..3.4e-2, worst tensor 1.5e-2..8.2e-2, against ~1e-6 for the fp32 path. The bounds leave 3-4x of that; a
// mutant that zeroes an eighth of one layer's ffn_down rows (a chunk's share of a 27B-shape ffn_down: 480 of 5120
// rows) reads 0.21 / 0.24 / 0.81 (logits / gradients / worst tensor).
#define BF16_LOGITS 5e-2
#define BF16_GRADS 0.1
#define BF16_TENSOR 0.25
#define BF16_ABOVE_F32 10.0 // the bf16 path's errors are at least this many times the fp32 path's

// rel_errs: a device run's relative L2 differences from the CPU.
typedef struct {
    double logits, ref, grads, tensor;
} rel_errs;

// cpu_side: the CPU's results for one case and the inputs they came from.
typedef struct {
    const bn_lora *l;
    const int32_t *tok;
    int T;
    const float *dlogits, *logits, *ref, *grads;
} cpu_side;

static char tmpdir[256];
static rel_errs worst_bf16; // largest bf16 errors seen, for the summary
static char err[512];
static double worst_logits, worst_grads; // largest relative differences seen, for the summary

// max_rel_diff: max|a − b| / max|b| over n values (max|b| = 0: the absolute difference).
static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
        if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
    }
    return s > 0 ? d / s : d;
}

// fill_random: n values uniform in [−scale, scale) from rng.
static void fill_random(bn_rng *rng, float *p, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) p[i] = scale * (2.0f * (float)bn_rng_uniform(rng) - 1.0f);
}

// quantize_file: src with every 2-D weight requantized to type (--pure) into dst; 0 or -1.
static int quantize_file(const char *src, const char *dst, const char *type) {
    bn_quantize_params qp = bn_quantize_params_default();
    qp.type = type;
    qp.pure = true;
    qp.n_threads = 2;
    qp.log = NULL;
    if (bn_quantize_file(&qp, src, dst, err, sizeof err) != 0) {
        CHECK(0, "quantize %s to %s: %s", src, type, err);
        return -1;
    }
    return 0;
}

// make_mkmodel: preset with 2-D weights of type (F32, F16, or a quantized type by requantizing the F32 model) into
// path; 0 or -1.
static int make_mkmodel(const char *preset, const char *type, char *path, size_t n) {
    bn_mkmodel_params p;
    bn_mkmodel_defaults(&p, preset);
    const bool plain = !strcmp(type, "F32") || !strcmp(type, "F16");
    p.type = !strcmp(type, "F16") ? BN_F16 : BN_F32;
    char base[320];
    snprintf(base, sizeof base, "%s/%s-%s.gguf", tmpdir, preset, plain ? type : "F32");
    if (access(base, F_OK) != 0 && bn_mkmodel_write(&p, base, err, sizeof err) != 0) {
        CHECK(0, "mkmodel %s: %s", preset, err);
        return -1;
    }
    snprintf(path, n, "%s/%s-%s.gguf", tmpdir, preset, type);
    return plain ? 0 : quantize_file(base, path, type);
}

// make_tiny_h: tests/core/tiny.h's dense arch (llama, qwen2) in F32 into path; 0 or -1.
static int make_tiny_h(const char *arch, char *path, size_t n) {
    static tiny_model tm;
    tiny_defaults(&tm, arch);
    tiny_build(&tm);
    snprintf(path, n, "%s/tinyh-%s.gguf", tmpdir, arch);
    const int rc = tiny_write(&tm, path, err, sizeof err);
    tiny_free(&tm);
    CHECK(rc == 0, "tiny.h %s: %s", arch, err);
    return rc;
}

// make_adapter: every target m has, rank RANK, A and B random (seeded).
static bn_lora *make_adapter(const bn_model *m, uint64_t seed) {
    bn_lora *l = bn_lora_from_model(m, ALL_TARGETS, RANK, 8.0f, 0.0f, err, sizeof err);
    CHECK(l != NULL, "adapter: %s", err);
    if (!l) return NULL;
    bn_rng rng;
    bn_rng_seed(&rng, seed);
    fill_random(&rng, l->params, l->n_params, 0.1f);
    return l;
}

// compare_grads: every tensor's A and B gradient, device vs CPU; returns the largest relative difference.
static double compare_grads(const char *label, const bn_lora *l, const float *dev, const float *cpu) {
    double worst = 0;
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        const int64_t na = t->n_in * l->r, nb = (int64_t)l->r * t->n_out;
        const double da = max_rel_diff(dev + t->off_a, cpu + t->off_a, na);
        const double db = max_rel_diff(dev + t->off_b, cpu + t->off_b, nb);
        CHECK(da <= TOL_REL && db <= TOL_REL, "%s: %s gradient differs: A %.3g, B %.3g", label, t->name, da, db);
        if (da > worst) worst = da;
        if (db > worst) worst = db;
    }
    return worst;
}

// cpu_run: the CPU's logits with l and without, and l's gradients (into cpu_grads) for dlogits.
static int cpu_run(const bn_model *m, bn_lora *l, const int32_t *tok, int T, const float *dlogits, float *logits,
                   float *ref, float *cpu_grads) {
    bn_lora_zero_grad(l);
    bn_train_graph *g = bn_train_forward(m, l, tok, T, NULL, logits, err, sizeof err);
    CHECK(g != NULL, "cpu forward: %s", err);
    if (!g) return -1;
    CHECK(bn_train_backward(g, dlogits, err, sizeof err) == 0, "cpu backward: %s", err);
    bn_train_graph_free(g);
    memcpy(cpu_grads, l->grads, sizeof(float) * (size_t)l->n_params);
    bn_train_graph_free(bn_train_forward(m, NULL, tok, T, NULL, ref, err, sizeof err));
    return 0;
}

// device_grads: the device's forward (logits) and backward for dlogits, its gradients taken into pre-filled host
// grads (checked to add), then a second take (checked to add nothing); dev_grads = the device's gradients.
static void device_grads(const bn_train_device *d, void *ctx, const char *label, const bn_lora *l, const int32_t *tok,
                         int T, const float *dlogits, float *logits, float *dev_grads) {
    void *g = d->forward(ctx, true, tok, T, logits, err, sizeof err);
    CHECK(g != NULL, "%s: device forward: %s", label, err);
    if (!g) return;
    CHECK(d->backward(g, dlogits, err, sizeof err) == 0, "%s: device backward: %s", label, err);
    d->graph_free(g);
    const size_t n = (size_t)l->n_params;
    for (size_t i = 0; i < n; i++) dev_grads[i] = (float)(i % 7) - 3.0f; // pre-filled: take_grads adds
    CHECK(d->take_grads(ctx, dev_grads, err, sizeof err) == 0, "%s: take_grads: %s", label, err);
    for (size_t i = 0; i < n; i++) dev_grads[i] -= (float)(i % 7) - 3.0f;
    float *again = xcalloc(n, sizeof(float));
    CHECK(d->take_grads(ctx, again, err, sizeof err) == 0, "%s: take_grads: %s", label, err);
    double left = 0;
    for (size_t i = 0; i < n; i++) left = fmax(left, fabs(again[i]));
    CHECK(left == 0, "%s: the device's gradients are not zeroed after take_grads (%g left)", label, left);
    free(again);
}

// check_profile: one step timed by part: every part the model has took device time (the delta rule only in qwen35),
// the parts add up to no more than the step's wall time, and an untimed step leaves nothing to take.
static void check_profile(const bn_train_device *d, void *ctx, const char *label, const bn_model *m, const bn_lora *l,
                          const int32_t *tok, int T, const float *dlogits) {
    float *logits = xmalloc(sizeof(float) * m->cfg.n_vocab), *grads = xmalloc(sizeof(float) * (size_t)l->n_params);
    double ms[BN_TRAIN_PARTS], sum = 0;
    d->set_profile(ctx, true);
    const double t0 = bn_time_ms();
    device_grads(d, ctx, label, l, tok, T, dlogits, logits, grads);
    const double wall = bn_time_ms() - t0;
    CHECK(d->take_profile(ctx, ms, err, sizeof err) == 0, "%s: take_profile: %s", label, err);
    d->set_profile(ctx, false);
    for (int i = 0; i < BN_TRAIN_PARTS; i++) sum += ms[i];
    bool gdn = false;
    if (m->cfg.arch == BN_ARCH_QWEN35 && m->cfg.is_recurrent)
        for (int il = 0; il < m->cfg.n_layer; il++) gdn = gdn || m->cfg.is_recurrent[il];
    CHECK(ms[BN_TRAIN_PART_LINEAR] > 0 && ms[BN_TRAIN_PART_ATTN] > 0 && ms[BN_TRAIN_PART_OTHER] > 0,
          "%s: a part without time: linears %.3f, attention %.3f, other %.3f ms", label, ms[BN_TRAIN_PART_LINEAR],
          ms[BN_TRAIN_PART_ATTN], ms[BN_TRAIN_PART_OTHER]);
    CHECK(gdn ? ms[BN_TRAIN_PART_GDN] > 0 : ms[BN_TRAIN_PART_GDN] == 0, "%s: delta rule %.3f ms", label,
          ms[BN_TRAIN_PART_GDN]);
    CHECK(sum <= wall + 1.0, "%s: the parts' %.1f ms exceed the step's %.1f ms", label, sum, wall);
    device_grads(d, ctx, label, l, tok, T, dlogits, logits, grads);
    double after[BN_TRAIN_PARTS], left = 0;
    CHECK(d->take_profile(ctx, after, err, sizeof err) == 0, "%s: take_profile: %s", label, err);
    for (int i = 0; i < BN_TRAIN_PARTS; i++) left += after[i];
    CHECK(left == 0, "%s: %.3f ms timed with the timing off", label, left);
    printf("  %-22s step by part: linears %.1f, attention %.1f, delta rule %.1f, other %.1f ms of %.1f ms\n", label,
           ms[0], ms[1], ms[2], ms[3], wall);
    free(logits), free(grads);
}

// check_load_params: after l's B is scaled on the host and loaded, the device's logits follow the CPU's.
static void check_load_params(const bn_train_device *d, void *ctx, const char *label, const bn_model *m, bn_lora *l,
                              const int32_t *tok, int T) {
    const int V = m->cfg.n_vocab;
    for (int i = 0; i < l->n_tensors; i++)
        for (int64_t j = 0; j < (int64_t)l->r * l->t[i].n_out; j++) l->params[l->t[i].off_b + j] *= -2.0f;
    float *cpu = xmalloc(sizeof(float) * V), *dev = xmalloc(sizeof(float) * V);
    bn_train_graph_free(bn_train_forward(m, l, tok, T, NULL, cpu, err, sizeof err));
    CHECK(d->load_params(ctx, l, err, sizeof err) == 0, "%s: load_params: %s", label, err);
    d->graph_free(d->forward(ctx, true, tok, T, dev, err, sizeof err));
    const double diff = max_rel_diff(dev, cpu, V);
    CHECK(diff <= TOL_REL, "%s: logits after load_params differ by %.3g", label, diff);
    free(cpu);
    free(dev);
}

// ---- bf16 GEMMs ---------------------------------------------------------------------------------------------------

// The fp32 runs take the FFN block over spans of 4 tokens (the rows' 9 to 17 tokens: whole spans and a short last
// one); the bf16 runs over the default span, longer than any row here: one pass.
#define SPAN 4
static const bn_train_device_opts f32_gemm = {.gemm = BN_TRAIN_GEMM_F32, .ffn_chunk = SPAN},
                                  bf16_gemm = {.gemm = BN_TRAIN_GEMM_BF16};

// rel_l2: ‖a − b‖ / ‖b‖ over n values (‖b‖ = 0: ‖a − b‖).
static double rel_l2(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

// worst_tensor_l2: the largest rel_l2 of one tensor's A or B gradient, device vs CPU.
static double worst_tensor_l2(const bn_lora *l, const float *dev, const float *cpu) {
    double worst = 0;
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        worst = fmax(worst, rel_l2(dev + t->off_a, cpu + t->off_a, t->n_in * l->r));
        worst = fmax(worst, rel_l2(dev + t->off_b, cpu + t->off_b, (int64_t)l->r * t->n_out));
    }
    return worst;
}

// within_bf16: whether a device run's errors against the CPU are within the bf16 bounds.
static bool within_bf16(rel_errs e) {
    return e.logits <= BF16_LOGITS && e.ref <= BF16_LOGITS && e.grads <= BF16_GRADS && e.tensor <= BF16_TENSOR;
}

// device_errs: a device run with gemm on model dm (m, or a mutant of it) against the CPU's results: logits, reference
// logits, gradients; -1 in every field when the run fails.
static rel_errs device_errs(const bn_train_device *d, const bn_model *dm, const bn_train_device_opts *gemm,
                            const cpu_side *c, const char *label) {
    const int V = dm->cfg.n_vocab;
    rel_errs e = {-1, -1, -1, -1};
    void *ctx = d->open(dm, c->l, 0, gemm, err, sizeof err);
    CHECK(ctx != NULL, "%s: open: %s", label, err);
    if (!ctx) return e;
    float *logits = xmalloc(sizeof(float) * V), *ref = xmalloc(sizeof(float) * V);
    float *grads = xmalloc(sizeof(float) * (size_t)c->l->n_params);
    device_grads(d, ctx, label, c->l, c->tok, c->T, c->dlogits, logits, grads);
    d->graph_free(d->forward(ctx, false, c->tok, c->T, ref, err, sizeof err));
    e = (rel_errs){rel_l2(logits, c->logits, V), rel_l2(ref, c->ref, V), rel_l2(grads, c->grads, c->l->n_params),
                   worst_tensor_l2(c->l, grads, c->grads)};
    d->close(ctx);
    free(logits), free(ref), free(grads);
    return e;
}

// mutant_of: *out = m with the last eighth of layer il's ffn_down rows zeroed in a copy (*data, *layers to free):
// the result of a bf16 product that skipped a chunk of rows.
static void mutant_of(const bn_model *m, int il, bn_model *out, void **data, bn_layer_weights **layers) {
    *out = *m;
    *layers = xmalloc(sizeof(bn_layer_weights) * (size_t)m->cfg.n_layer);
    memcpy(*layers, m->w.layers, sizeof(bn_layer_weights) * (size_t)m->cfg.n_layer);
    bn_weight *w = &(*layers)[il].ffn_down;
    const size_t row = bn_row_size(w->type, w->ne[0]), rows = (size_t)w->ne[1];
    *data = xmalloc(row * rows);
    memcpy(*data, w->data, row * rows);
    memset((char *)*data + row * (rows - rows / 8), 0, row * (rows / 8));
    w->data = *data;
    out->w.layers = *layers;
}

// print_errs: one line of relative L2 differences against the CPU.
static void print_errs(const char *what, rel_errs e) {
    printf("    %-34s logits %.2e, reference %.2e, gradients %.2e (worst tensor %.2e)\n", what, e.logits, e.ref,
           e.grads, e.tensor);
}

// check_bf16: the device with bf16 GEMMs against the CPU within the bf16 bounds, each error at least BF16_ABOVE_F32
// times the fp32 path's (f32; the bf16 path did run); mutate: a mutant (mutant_of) fails the same bounds.
static void check_bf16(const bn_train_device *d, const char *label, const bn_model *m, const cpu_side *c,
                       rel_errs f32, bool mutate) {
    const rel_errs e = device_errs(d, m, &bf16_gemm, c, label);
    print_errs("fp32 GEMMs, relative L2:", f32);
    print_errs("bf16 GEMMs, relative L2:", e);
    CHECK(e.logits >= 0 && within_bf16(e), "%s: bf16 GEMMs: logits %.3g, reference %.3g (bound %g), gradients %.3g "
          "(bound %g), worst tensor %.3g (bound %g)", label, e.logits, e.ref, BF16_LOGITS, e.grads, BF16_GRADS,
          e.tensor, BF16_TENSOR);
    CHECK(e.logits >= BF16_ABOVE_F32 * f32.logits && e.grads >= BF16_ABOVE_F32 * f32.grads,
          "%s: bf16 GEMMs' errors (logits %.3g, gradients %.3g) are not %gx the fp32 path's (%.3g, %.3g)", label,
          e.logits, e.grads, BF16_ABOVE_F32, f32.logits, f32.grads);
    worst_bf16 = (rel_errs){fmax(worst_bf16.logits, e.logits), fmax(worst_bf16.ref, e.ref),
                            fmax(worst_bf16.grads, e.grads), fmax(worst_bf16.tensor, e.tensor)};
    if (!mutate) return;
    bn_model mut;
    void *data;
    bn_layer_weights *layers;
    const int il = m->cfg.n_layer > 1 ? 1 : 0;
    mutant_of(m, il, &mut, &data, &layers);
    const rel_errs me = device_errs(d, &mut, &bf16_gemm, c, label);
    print_errs("mutant (ffn_down rows), bf16:", me);
    CHECK(me.logits >= 0 && !within_bf16(me), "%s: a mutant with the last eighth of layer %d's ffn_down rows zeroed "
          "passes the bf16 bounds", label, il);
    free(data);
    free(layers);
}

// cpu_all_positions: random dlogits dz {V, T} (a fixed seed), then train/graph.c's all-position forward with the
// adapter into logits {V, T} and its backward for dz into l's gradients (zeroed first).
static void cpu_all_positions(const char *label, const bn_model *m, bn_lora *l, const int32_t *tok, int T,
                              float *logits, float *dz) {
    bn_rng rng;
    bn_rng_seed(&rng, 7);
    fill_random(&rng, dz, (int64_t)m->cfg.n_vocab * T, 1.0f);
    bn_lora_zero_grad(l);
    bn_train_graph *g = bn_train_forward_all_lora(m, l, tok, T, logits, err, sizeof err);
    CHECK(g && bn_train_backward_all_lora(g, dz, err, sizeof err) == 0, "%s: CPU all-position pass: %s", label, err);
    bn_train_graph_free(g);
}

// check_bf16_all_positions: the all-position graph (the tether's) with bf16 GEMMs and bf16 kept layer inputs: its
// logits and the LoRA gradients for random dlogits {V, T} against train/graph.c's, relative L2 within the bf16 bounds.
static void check_bf16_all_positions(const bn_train_device *d, const char *label, const bn_model *m, bn_lora *l,
                                     const int32_t *tok, int T) {
    const size_t VT = (size_t)m->cfg.n_vocab * T, n = (size_t)l->n_params;
    float *cpu = xmalloc(sizeof(float) * VT), *dev = xmalloc(sizeof(float) * VT), *dz = xmalloc(sizeof(float) * VT);
    float *dev_grads = xcalloc(n, sizeof(float));
    cpu_all_positions(label, m, l, tok, T, cpu, dz);
    void *ctx = d->open(m, l, 0, &bf16_gemm, err, sizeof err);
    void *dg = ctx ? d->forward_all(ctx, true, tok, T, dev, err, sizeof err) : NULL;
    CHECK(dg && d->backward(dg, dz, err, sizeof err) == 0 && d->take_grads(ctx, dev_grads, err, sizeof err) == 0,
          "%s: bf16 all-position pass: %s", label, err);
    d->graph_free(dg);
    d->close(ctx);
    const double el = rel_l2(dev, cpu, (int64_t)VT), eg = rel_l2(dev_grads, l->grads, (int64_t)n);
    printf("    %-34s logits %.2e, gradients %.2e\n", "all positions, bf16, relative L2:", el, eg);
    CHECK(el <= BF16_LOGITS && eg <= BF16_GRADS, "%s: bf16 all-position logits %.3g (bound %g), gradients %.3g (bound "
          "%g)", label, el, BF16_LOGITS, eg, BF16_GRADS);
    free(cpu), free(dev), free(dz), free(dev_grads);
}

// check_all_positions: the all-position forward (the tether's) with the adapter and without, and its backward for
// random dlogits {V, T}, against train/graph.c's; returns the largest relative difference (logits, gradients).
static double check_all_positions(const bn_train_device *d, void *ctx, const char *label, const bn_model *m, bn_lora *l,
                                  const int32_t *tok, int T) {
    const size_t VT = (size_t)m->cfg.n_vocab * T, n = (size_t)l->n_params;
    float *cpu = xmalloc(sizeof(float) * VT), *dev = xmalloc(sizeof(float) * VT), *dz = xmalloc(sizeof(float) * VT);
    float *cpu_ref = xmalloc(sizeof(float) * VT), *dev_ref = xmalloc(sizeof(float) * VT);
    float *dev_grads = xcalloc(n, sizeof(float));
    cpu_all_positions(label, m, l, tok, T, cpu, dz);
    bn_train_graph_free(bn_train_forward_all(m, tok, T, cpu_ref, err, sizeof err));
    void *dg = d->forward_all(ctx, true, tok, T, dev, err, sizeof err);
    CHECK(dg && d->backward(dg, dz, err, sizeof err) == 0, "%s: device all-position pass: %s", label, err);
    d->graph_free(dg);
    d->graph_free(d->forward_all(ctx, false, tok, T, dev_ref, err, sizeof err));
    CHECK(d->take_grads(ctx, dev_grads, err, sizeof err) == 0, "%s: take_grads: %s", label, err);
    const double dl = fmax(max_rel_diff(dev, cpu, (int64_t)VT), max_rel_diff(dev_ref, cpu_ref, (int64_t)VT));
    CHECK(dl <= TOL_REL, "%s: all-position logits differ by %.3g", label, dl);
    const double dgr = compare_grads(label, l, dev_grads, l->grads);
    free(cpu); free(dev); free(dz); free(cpu_ref); free(dev_ref); free(dev_grads);
    return fmax(dl, dgr);
}

// check_plan: the device bytes a trainer of m and l (with gemm's GEMMs) holds with two rows' graphs of T tokens alive, and after one of
// them ran backward (the trainer's peak: the weights, the adapter and gradients, the head's, layer and workspace
// buffers, the graphs), against the memory plan's device total for batch 2 and T tokens; then with a tether graph
// (all positions, T tokens) alive as well, against the plan with a tether of T-token windows. ste: as an --ste-type
// run holds them, with the reference's own context (m without an adapter) next to the trainer, its forwards (one
// row's and one all-position) run, against the plan with ste. The emulator counts the bytes asked for: equal to the
// byte. A GPU rounds allocations up and adds cuBLAS's: within the plan + the margin.
static void check_plan(const bn_train_device *d, const char *label, const bn_model *m, bn_lora *l, const int32_t *tok,
                       int T, const bn_train_device_opts *gemm, bool ste) {
    bn_memshape s = bn_memshape_of_model(m);
    bn_memplan_cfg c = bn_memplan_cfg_default(T);
    c.targets = ALL_TARGETS, c.rank = RANK, c.batch = 2, c.grad_accum = 1, c.ste = ste;
    c.gemm_bytes = gemm->gemm == BN_TRAIN_GEMM_F32 ? 4 : 2;
    c.ffn_chunk = gemm->ffn_chunk;
    bn_memplan p, pt;
    size_t fr = 0, tot = 0;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0 && p.lora_params == l->n_params,
          "%s: plan (%lld LoRA parameters vs %lld): %s", label, (long long)p.lora_params, (long long)l->n_params, err);
    c.tether_ctx = T;
    CHECK(bn_memplan_compute(&s, &c, &pt, err, sizeof err) == 0 && pt.dev.tether > 0, "%s: tether plan: %s", label,
          err);
    CHECK(d->mem_info(0, &fr, &tot, err, sizeof err) == 0 && tot >= fr, "%s: mem_info: %s", label, err);
    const int64_t before = (int64_t)(tot - fr);
    float *logits = xmalloc(sizeof(float) * m->cfg.n_vocab * T), *dz = xcalloc((size_t)m->cfg.n_vocab, sizeof(float));
    l->ste = ste;
    void *ctx = d->open(m, l, 0, gemm, err, sizeof err), *ref = ste ? d->open(m, NULL, 0, gemm, err, sizeof err) : NULL;
    void *g[2] = {NULL, NULL};
    for (int b = 0; ctx && b < 2; b++) g[b] = d->forward(ctx, true, tok, T, logits, err, sizeof err);
    CHECK(g[0] && g[1] && (!ste || ref), "%s: open and two forwards: %s", label, err);
    if (ref) d->graph_free(d->forward(ref, false, tok, T, logits, err, sizeof err));
    int64_t held = 0, after_bwd = 0, with_tether = 0;
    void *ga = NULL;
    if (g[0] && g[1]) {
        held = (int64_t)d->mem_in_use(ctx) - before;
        dz[1] = 1.0f;
        CHECK(d->backward(g[0], dz, err, sizeof err) == 0, "%s: backward: %s", label, err);
        after_bwd = (int64_t)d->mem_in_use(ctx) - before;
        if (ref) d->graph_free(d->forward_all(ref, false, tok, T, logits, err, sizeof err));
        ga = d->forward_all(ctx, true, tok, T, logits, err, sizeof err);
        CHECK(ga != NULL, "%s: all-position forward: %s", label, err);
        with_tether = (int64_t)d->mem_in_use(ctx) - before;
    }
    printf("  %-22s device memory with 2 graphs of %d tokens%s: %lld B held, %lld B after a backward, %lld B with a "
           "tether graph; planned %lld B, %lld B with the tether\n", label, T, ste ? " and the STE reference" : "",
           (long long)held, (long long)after_bwd, (long long)with_tether, (long long)p.dev.total,
           (long long)pt.dev.total);
#ifdef BONSAI_CUDA_EMU
    CHECK(held == p.dev.total && after_bwd == held, "%s: device bytes %lld (after a backward %lld) vs planned %lld",
          label, (long long)held, (long long)after_bwd, (long long)p.dev.total);
    CHECK(with_tether == pt.dev.total, "%s: device bytes with a tether graph %lld vs planned %lld", label,
          (long long)with_tether, (long long)pt.dev.total);
#else
    const int64_t bound = p.dev.total + BN_MEMPLAN_DEVICE_MARGIN;
    CHECK(held > 0 && held <= bound && after_bwd <= bound,
          "%s: device bytes %lld (after a backward %lld) over the plan %lld + margin", label, (long long)held,
          (long long)after_bwd, (long long)p.dev.total);
    CHECK(with_tether <= pt.dev.total + BN_MEMPLAN_DEVICE_MARGIN, "%s: device bytes with a tether graph %lld over the "
          "plan %lld + margin", label, (long long)with_tether, (long long)pt.dev.total);
#endif
    d->graph_free(ga);
    for (int b = 0; b < 2; b++) d->graph_free(g[b]);
    d->close(ctx);
    d->close(ref);
    l->ste = false;
    free(logits);
    free(dz);
}

// run_case: the model at path through both backends (T tokens), the device with fp32 GEMMs; prints the measured
// differences and the time. bf16: also the device with bf16 GEMMs (check_bf16; mutate: and a mutant). ste_plan: the
// memory check with an --ste-type run's reference context too.
static void run_case(const bn_train_device *d, const char *label, const char *path, int T, bool bf16, bool mutate,
                     bool ste_plan) {
    const clock_t c0 = clock();
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "%s: load: %s", label, err);
    if (!m) return;
    bn_lora *l = make_adapter(m, 1234);
    if (!l) {
        bn_model_free(m);
        return;
    }
    const int V = m->cfg.n_vocab;
    int32_t tok[32];
    bn_rng rng;
    bn_rng_seed(&rng, 99);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)bn_rng_below(&rng, (uint64_t)V);
    float *dlogits = xmalloc(sizeof(float) * V), *logits = xmalloc(sizeof(float) * V), *ref = xmalloc(sizeof(float) * V);
    float *dev_logits = xmalloc(sizeof(float) * V), *dev_ref = xmalloc(sizeof(float) * V);
    fill_random(&rng, dlogits, V, 1.0f);
    float *cpu_grads = xmalloc(sizeof(float) * (size_t)l->n_params), *dev_grads = xmalloc(sizeof(float) * (size_t)l->n_params);
    void *ctx = d->open(m, l, 0, &f32_gemm, err, sizeof err);
    CHECK(ctx != NULL, "%s: open: %s", label, err);
    if (ctx && cpu_run(m, l, tok, T, dlogits, logits, ref, cpu_grads) == 0) {
        device_grads(d, ctx, label, l, tok, T, dlogits, dev_logits, dev_grads);
        d->graph_free(d->forward(ctx, false, tok, T, dev_ref, err, sizeof err));
        const double dl = max_rel_diff(dev_logits, logits, V), dr = max_rel_diff(dev_ref, ref, V);
        const double dg = compare_grads(label, l, dev_grads, cpu_grads);
        CHECK(dl <= TOL_REL, "%s: logits differ by %.3g", label, dl);
        CHECK(dr <= TOL_REL, "%s: reference logits differ by %.3g", label, dr);
        CHECK(max_rel_diff(logits, ref, V) > 1e-3, "%s: the adapter does not change the logits", label);
        const rel_errs f32 = {rel_l2(dev_logits, logits, V), rel_l2(dev_ref, ref, V),
                              rel_l2(dev_grads, cpu_grads, l->n_params), worst_tensor_l2(l, dev_grads, cpu_grads)};
        float *params = xmalloc(sizeof(float) * (size_t)l->n_params);
        memcpy(params, l->params, sizeof(float) * (size_t)l->n_params);
        check_profile(d, ctx, label, m, l, tok, T, dlogits);
        check_load_params(d, ctx, label, m, l, tok, T);
        const double da = check_all_positions(d, ctx, label, m, l, tok, T); // with the parameters just loaded
        memcpy(l->params, params, sizeof(float) * (size_t)l->n_params); // the parameters the CPU results came from
        free(params);
        d->close(ctx);
        ctx = NULL;
        check_plan(d, label, m, l, tok, T, bf16 ? &bf16_gemm : &f32_gemm, false);
        if (ste_plan) check_plan(d, label, m, l, tok, T, bf16 ? &bf16_gemm : &f32_gemm, true);
        worst_logits = fmax(worst_logits, fmax(dl, dr));
        worst_grads = fmax(worst_grads, fmax(dg, da));
        printf("  %-22s T %2d, %2d adapted tensors: logits %.2e, reference %.2e, gradients %.2e, all positions %.2e "
               "(max rel diff); %.1f s\n", label, T, l->n_tensors, dl, dr, dg, da, (double)(clock() - c0) / CLOCKS_PER_SEC);
        const cpu_side cpu = {l, tok, T, dlogits, logits, ref, cpu_grads};
        if (bf16) check_bf16(d, label, m, &cpu, f32, mutate);
        if (bf16) check_bf16_all_positions(d, label, m, l, tok, T);
    }
    d->close(ctx);
    free(dlogits); free(logits); free(ref); free(dev_logits); free(dev_ref); free(cpu_grads); free(dev_grads);
    bn_lora_free(l);
    bn_model_free(m);
}

// check_refusals: open fails, with a message, for an unknown GEMM arithmetic, a negative FFN span and LoRA dropout.
static void check_refusals(const bn_train_device *d, const char *path) {
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) return;
    bn_lora *l = make_adapter(m, 1);
    if (!l) {
        bn_model_free(m);
        return;
    }
    const bn_train_device_opts bad = {.gemm = (bn_train_gemm)7}, bad_span = {.ffn_chunk = -1};
    err[0] = 0;
    void *ctx = d->open(m, l, 0, &bad, err, sizeof err);
    CHECK(ctx == NULL && strstr(err, "GEMM"), "open with an unknown GEMM arithmetic: %s", err);
    d->close(ctx);
    err[0] = 0;
    ctx = d->open(m, l, 0, &bad_span, err, sizeof err);
    CHECK(ctx == NULL && strstr(err, "FFN span of -1"), "open with an FFN span of -1: %s", err);
    d->close(ctx);
    l->dropout = 0.1f;
    err[0] = 0;
    ctx = d->open(m, l, 0, &f32_gemm, err, sizeof err);
    CHECK(ctx == NULL && strstr(err, "dropout"), "open with dropout: %s", err);
    d->close(ctx);
    bn_lora_free(l);
    bn_model_free(m);
}

int main(int argc, char **argv) {
    const bn_train_device *d = bn_train_device_get();
    CHECK(d != NULL && !strcmp(d->name, "CUDA"), "no CUDA training device registered");
    if (!d) return test_done("cuda_train_graph");
    if (d->device_count() <= 0) return test_skip("no CUDA device");
    const char *part = argc > 1 ? argv[1] : "all";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bonsai_cuda_train_graph_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("cannot make a temporary directory");
    char path[400];
    const bool all = !strcmp(part, "all"), bf16 = !strcmp(part, "bf16");
    if ((all || bf16 || !strcmp(part, "qwen35")) && make_mkmodel("tiny", "F32", path, sizeof path) == 0) {
        run_case(d, "qwen35 F32", path, 13, bf16, bf16, true);
        if (!bf16) check_refusals(d, path);
    }
    if ((all || !strcmp(part, "quant")) && make_mkmodel("tiny", "Q8_0", path, sizeof path) == 0)
        run_case(d, "qwen35 Q8_0", path, 9, false, false, false);
    if ((all || bf16 || !strcmp(part, "quant")) && make_mkmodel("tiny", "Q1_0", path, sizeof path) == 0)
        run_case(d, "qwen35 Q1_0", path, 9, bf16, false, true);
    if ((all || !strcmp(part, "quant")) && make_mkmodel("tiny", "F16", path, sizeof path) == 0)
        run_case(d, "qwen35 F16", path, 9, false, false, false);
    if ((all || bf16 || !strcmp(part, "dense")) && make_mkmodel("qwen3-tiny", "F32", path, sizeof path) == 0)
        run_case(d, "qwen3 F32", path, 17, bf16, false, false);
    if ((all || !strcmp(part, "dense")) && make_tiny_h("llama", path, sizeof path) == 0)
        run_case(d, "llama F32 (tiny.h)", path, 11, false, false, false);
    if ((all || !strcmp(part, "dense")) && make_tiny_h("qwen2", path, sizeof path) == 0)
        run_case(d, "qwen2 F32 (tiny.h)", path, 11, false, false, false);
    printf("largest relative differences: logits %.2e, gradients %.2e (tolerance %.0e)\n", worst_logits, worst_grads,
           TOL_REL);
    if (bf16)
        printf("largest bf16 GEMM relative L2: logits %.2e, reference %.2e, gradients %.2e, worst tensor %.2e (bounds %g, "
               "%g, %g)\n", worst_bf16.logits, worst_bf16.ref, worst_bf16.grads, worst_bf16.tensor, BF16_LOGITS,
               BF16_GRADS, BF16_TENSOR);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    return test_done("cuda_train_graph");
}
