// tests/train/test_device.c — the trainer's device path (train/device.h) with a stand-in backend that runs the CPU
// graph on its own copy of the adapter and keeps its own gradients, as a device does: a run with -ngl gives the CPU
// run's adapter to the bit (the same math on uploaded copies: any lost upload, double-counted or lost gradient
// shows), the backend sees one upload per step plus the first, every row's reference forward and the gradients taken
// once per step; the trainer's GEMM setting reaches the backend's open (bf16 by default, f32 when asked); a checkpoint
// of the device run resumes on the CPU; a device one byte short of the run's device memory plan + margin is refused
// with the numbers before anything is opened or written, and one with exactly that trains; two ranks on the device sum
// through a registered device transport (a stand-in for NCCL) to the host transport's adapter; with no backend -ngl
// warns and trains on the CPU.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/train/fixture.h"
#include "train/device.h"
#include "train/dp.h"
#include "train/trainer.h"
#include "train/memplan.h"
#include "train/lora.h"
#include "quant/quant.h"

static char dir[] = "/tmp/bonsai_test_device_XXXXXX";

// The stand-in device: the model, its own adapter copy (params uploaded, gradients kept), and call counts.
typedef struct {
    const bn_model *m;
    bn_lora *copy;
    int uploads, ref_forwards, takes;
    int gemm; // the GEMM arithmetic open was asked for (−1: no options)
} host_device;

static host_device g_dev;
static int g_device_count = 1;

static int hd_count(void) { return g_device_count; }

static void *hd_open(const bn_model *m, const bn_lora *l, int device, const bn_train_device_opts *opts, char *err,
                     size_t errlen) {
    (void)device;
    g_dev = (host_device){.m = m, .gemm = opts ? (int)opts->gemm : -1};
    if (!l) return &g_dev;
    g_dev.copy = bn_lora_new(l->r, l->alpha, 0, l->arch); // l's layout, tensor by tensor
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        if (bn_lora_add(g_dev.copy, t->name, t->layer, t->target, t->n_in, t->n_out, err, errlen) < 0) return NULL;
    }
    return bn_lora_same_layout(g_dev.copy, l) ? &g_dev : NULL;
}

static void hd_close(void *ctx) {
    host_device *d = ctx;
    bn_lora_free(d->copy);
    d->copy = NULL;
}

static int hd_load(void *ctx, const bn_lora *l, char *err, size_t errlen) {
    (void)err, (void)errlen;
    host_device *d = ctx;
    memcpy(d->copy->params, l->params, sizeof(float) * l->n_params);
    d->uploads++;
    return 0;
}

static void *hd_forward(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                        size_t errlen) {
    host_device *d = ctx;
    if (!use_adapter) d->ref_forwards++;
    return bn_train_forward(d->m, use_adapter ? d->copy : NULL, tokens, n, NULL, logits, err, errlen);
}

static int hd_backward(void *graph, const float *dlogits, char *err, size_t errlen) {
    return bn_train_backward(graph, dlogits, err, errlen);
}

static void hd_graph_free(void *graph) { bn_train_graph_free(graph); }

static int hd_take(void *ctx, float *grads, char *err, size_t errlen) {
    (void)err, (void)errlen;
    host_device *d = ctx;
    for (int64_t i = 0; i < d->copy->n_params; i++) grads[i] += d->copy->grads[i];
    bn_lora_zero_grad(d->copy);
    d->takes++;
    return 0;
}

// hd_mem: device bytes in use (the stand-in has no device memory: 0)
static size_t hd_mem(void *ctx) {
    (void)ctx;
    return 0;
}

// The stand-in's memory as its driver would report it (the trainer compares its device plan with the free bytes).
static size_t g_free = (size_t)1 << 40, g_total = (size_t)1 << 40;

static int hd_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen) {
    (void)device, (void)err, (void)errlen;
    *free_bytes = g_free;
    *total_bytes = g_total;
    return 0;
}

static const bn_train_device host_backend = {"host stand-in", hd_count, hd_open, hd_close, hd_load,
                                             hd_forward, hd_backward, hd_graph_free, hd_take, hd_mem,
                                             NULL /* forward_all: the tether on the CPU */, hd_mem_info};

// opts: a short run of the tiny model (attention, GDN and head adapters; 5 steps over 10 rows).
static bn_ftpo_train_opts opts(const char *out) {
    bn_ftpo_train_opts o = fx_ftpo_opts(BN_LORA_ATTN | BN_LORA_GDN | BN_LORA_HEAD, 8, 2e-2f, 2, 1, 1);
    o.out_adapter = out;
    return o;
}

// same_params: whether two adapter files hold the same parameters to the bit.
static bool same_params(const char *a, const char *b) {
    char err[256];
    bn_lora *la = bn_lora_load_gguf(a, err, sizeof err), *lb = bn_lora_load_gguf(b, err, sizeof err);
    bool same = la && lb && la->n_params == lb->n_params &&
                memcmp(la->params, lb->params, sizeof(float) * la->n_params) == 0;
    bn_lora_free(la);
    bn_lora_free(lb);
    return same;
}

// check_memory_refusal: a device with less free memory than the run's device plan + the margin is refused before
// anything is opened or written, the message naming the free bytes, the plan's parts and the settings to lower; one
// byte more than plan + margin trains, reporting the plan's total in the result.
static void check_memory_refusal(const bn_model *m, const bn_train_rows *rows) {
    char err[1024], log[600];
    snprintf(log, sizeof log, "%s/refused.jsonl", dir);
    bn_ftpo_train_opts o = opts(NULL);
    o.n_gpu_layers = 1;
    o.max_steps = 1;
    o.log_jsonl = log;
    bn_ftpo_train_result res;
    bn_memshape s = bn_memshape_of_model(m);
    bn_memplan_cfg c = bn_memplan_cfg_default(9); // fx_ftpo_rows: the longest row has 9 tokens
    c.targets = o.targets, c.rank = o.rank, c.batch = o.batch, c.grad_accum = o.grad_accum;
    bn_memplan p;
    CHECK(bn_memplan_compute(&s, &c, &p, err, sizeof err) == 0, "plan: %s", err);
    const int64_t need = p.dev.total + BN_MEMPLAN_DEVICE_MARGIN;
    g_free = (size_t)need - 1;
    g_dev.uploads = 0;
    char free_b[48];
    snprintf(free_b, sizeof free_b, "(%lld B)", (long long)need - 1);
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) != 0 && strstr(err, "device 0: ") && strstr(err, free_b) &&
              strstr(err, "kept activations") && strstr(err, "--batch") && strstr(err, "batch 2 x 9 tokens"),
          "one byte short of plan + margin: refused with the numbers: %s", err);
    printf("refusal: %s\n", err);
    CHECK(g_dev.uploads == 0 && access(log, F_OK) != 0, "refused before opening the device or writing the log");
    g_free = (size_t)need;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && g_dev.uploads > 0, "plan + margin fits: %s", err);
    CHECK(res.dev_plan_bytes == p.dev.total, "the result reports the plan's device total (%lld vs %lld)",
          (long long)res.dev_plan_bytes, (long long)p.dev.total);
    g_free = g_total;
}

// A stand-in device transport (as NCCL's): counts its opens and sums, and sums through the host transport.
static int g_dp_opens, g_dp_sums, g_dp_device = -1;
static void *sd_open(bn_dp *dp, int device, char *err, size_t errlen) {
    (void)err, (void)errlen;
    g_dp_opens++;
    g_dp_device = device;
    return dp;
}
static int sd_sum(void *ctx, void *buf, int64_t n, size_t elem_size, char *err, size_t errlen) {
    g_dp_sums++;
    return bn_dp_sum_host(ctx, buf, n, elem_size, err, errlen);
}
static void sd_close(void *ctx) { (void)ctx; }
static const bn_dp_device standin_transport = {"stand-in transport", sd_open, sd_sum, sd_close};

// train_two_ranks: trains o on two forked ranks on the stand-in device, with the stand-in device transport or
// without; each rank exits 0 when its run succeeded (and, with the transport, took it on device 0 and summed there).
static int train_two_ranks(const bn_model *m, const bn_train_rows *rows, bn_ftpo_train_opts o, bool transport) {
    char err[256];
    int status;
    int rc = bn_dp_spawn(2, &o.dp, &status, err, sizeof err);
    if (rc != 0) return rc < 0 ? -1 : status;
    if (transport) bn_dp_device_register(&standin_transport);
    bn_ftpo_train_result res;
    int trc = bn_ftpo_train(m, rows, &o, &res, err, sizeof err);
    if (trc) printf("rank %d: %s\n", bn_dp_rank(o.dp), err);
    exit(trc ? 1 : transport && (g_dp_opens != 1 || g_dp_device != 0 || g_dp_sums == 0) ? 2 : 0);
}

// check_device_transport: two ranks training on devices take the registered device transport, and its sums give
// the adapter of the host transport's (the stand-in sums through it: the same bits).
static void check_device_transport(const bn_model *m, const bn_train_rows *rows) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/dp-host.gguf", dir);
    snprintf(b, sizeof b, "%s/dp-dev.gguf", dir);
    bn_ftpo_train_opts o = opts(a);
    o.n_gpu_layers = 1;
    CHECK(train_two_ranks(m, rows, o, false) == 0, "two ranks on the device, host transport");
    o.out_adapter = b;
    CHECK(train_two_ranks(m, rows, o, true) == 0, "two ranks on the device take the device transport (status 2: "
          "not opened once on device 0, or no sum through it)");
    CHECK(same_params(a, b), "the device transport's run gives the host transport's adapter");
}

int main(void) {
    if (!mkdtemp(dir)) return test_skip("cannot create a temp dir");
    char path[512], cpu[512], dev[512], resumed[512], ckpt[512], err[256];
    bn_model *m = fx_tiny_model(dir, BN_F32, path, sizeof path);
    if (!m) return test_done("train_device");
    bn_train_rows *rows = fx_ftpo_rows(m);
    rows->rows[3].heldout = rows->rows[8].heldout = true; // 10 train rows: 5 steps of 2
    snprintf(cpu, sizeof cpu, "%s/cpu.gguf", dir);
    snprintf(dev, sizeof dev, "%s/dev.gguf", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.gguf", dir);
    snprintf(ckpt, sizeof ckpt, "%s/dev.ckpt", dir);
    bn_ftpo_train_result res;

    bn_ftpo_train_opts o = opts(cpu);
    o.n_gpu_layers = 99; // no backend registered yet: a warning, and the CPU
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "-ngl without a backend trains on the CPU: %s", err);

    bn_train_device_register(&host_backend);
    o = opts(dev);
    o.n_gpu_layers = 1;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "train on the stand-in device: %s", err);
    CHECK(same_params(cpu, dev), "the device run's adapter equals the CPU run's to the bit");
    printf("device run: %d uploads, %d reference forwards, %d gradient takes over %lld steps\n", g_dev.uploads,
           g_dev.ref_forwards, g_dev.takes, (long long)res.steps);
    CHECK(res.steps == 5 && g_dev.uploads == 6 && g_dev.takes == 5 && g_dev.ref_forwards == rows->n_rows,
          "one upload per step and the first, every row's reference once (train and held out), the gradients once per step");
    CHECK(g_dev.gemm == BN_TRAIN_GEMM_BF16, "the trainer's default asks the device for bf16 GEMMs (got %d)", g_dev.gemm);

    o = opts(NULL);
    o.n_gpu_layers = 1;
    o.max_steps = 2;
    o.ckpt_path = ckpt;
    o.train_gemm = BN_TRAIN_GEMM_F32;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "2 steps on the device, checkpoint: %s", err);
    CHECK(g_dev.gemm == BN_TRAIN_GEMM_F32, "train_gemm f32 reaches the device's open (got %d)", g_dev.gemm);
    o = opts(resumed);
    o.resume_path = ckpt;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0, "resumed on the CPU: %s", err);
    CHECK(same_params(cpu, resumed), "a device checkpoint resumes on the CPU to the same adapter");

    check_memory_refusal(m, rows);
    check_device_transport(m, rows);

    g_device_count = 0;
    o = opts(NULL);
    o.n_gpu_layers = 1;
    g_dev.uploads = 0;
    CHECK(bn_ftpo_train(m, rows, &o, &res, err, sizeof err) == 0 && g_dev.uploads == 0,
          "a backend with no device: the CPU (uploads %d)", g_dev.uploads);

    bn_train_rows_free(rows);
    bn_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return test_done("train_device");
}
