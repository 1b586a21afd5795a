// bench/bench_train.c — LoRA training throughput (forward + backward, tokens/s) on generated qwen35
// models or given GGUF files, on the CPU or through the device backend of train/device.h.
// FLOPs are counted as 6·N_mm per token (forward 2N + recompute 2N + backward-data 2N, docs/model.md §10.4;
// N_mm = weights of the projections, head excluded: FTPO reads the last position only). LoRA: r 32 on
// q,k,v,o,gate,up,down (the seeds' recipe).
// CPU (default): achieved GFLOP/s against OpenBLAS sgemm measured in the same run (the target: >= 35 % of the
// sgemm rate).
// Device (--ngl N, N > 0): the same step through the registered backend (cuda/train_graph.cu: weights in their
// stored types, each layer product's weight made 16-bit and computed with bf16 inputs and fp32 accumulation through
// cublasGemmEx, or with --train-gemm f32 made fp32 and computed through cuBLAS SGEMM), with the same FLOP count;
// prints achieved TFLOP/s, the device's bytes in use (the whole device, total − free as the driver reports it: the
// larger of the samples after the forward and after the backward) and the GEMM arithmetic. --peak-tflops X adds
// MFU = achieved / X: the honest peak is the one of the arithmetic that ran, the GPU's dense bf16 tensor-core peak
// for bf16 (~989 for an H200 SXM), its fp32 peak for f32 (~67). --profile: after the timed steps, one more device
// step with the backend's per-part timing on (train/device.h set_profile: slower, so apart from the timed ones),
// printed as "step by part (ms): linears X | attention X | delta rule X | other X".
// Usage: bench_train [preset ...] [-m FILE ...] [--tokens T] [--reps R] [--threads N] [--type f32|f16|bf16]
//                    [--ngl N] [--train-gemm bf16|f32] [--peak-tflops X] [--profile]
//        (default: tiny small, T 256, R 2, N = online CPUs as the training tools use; sgemm keeps OpenBLAS's own;
//        --type applies to the generated presets; -m benches the files instead of presets; --train-gemm bf16)
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "quant/quant.h"
#include "train/backward.h"
#include "train/device.h"
#include "train/graph.h"
#include "train/lora.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_MODELS 8

typedef struct {
    const char *presets[MAX_MODELS], *files[MAX_MODELS];
    int n_presets, n_files, T, R, n_threads, wtype, ngl;
    bn_train_gemm gemm; // the device's base-weight GEMMs (--train-gemm)
    double peak_tflops; // 0: no MFU
    bool profile;       // one more device step timed by part (--profile)
} bench_opts;

// step_result: what a timed forward + backward measured
typedef struct {
    double ms;
    size_t mem; // device bytes in use (device path only)
} step_result;

// sgemm_gflops: OpenBLAS sgemm rate on an {m,k}·{k,n} product (best of 10: the machine is shared).
static double sgemm_gflops(int m, int n, int k) {
    float *a = xcalloc((size_t)m * k, 4), *b = xcalloc((size_t)k * n, 4), *c = xcalloc((size_t)m * n, 4);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = 1e30;
    for (int r = 0; r < 10; r++) {
        double t0 = bn_time_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double dt = bn_time_ms() - t0;
        if (dt < best) best = dt;
    }
    free(a), free(b), free(c);
    return 2.0 * m * n * k / (best * 1e-3) / 1e9;
}

// matmul_params: elements of every projection weight (everything 2-D except embedding and head).
static int64_t matmul_params(const bn_model *m) {
    int64_t n = 0;
    for (size_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        if (t->n_dims < 2 || strstr(t->name, "token_embd") || !strcmp(t->name, "output.weight") ||
            strstr(t->name, "ssm_conv1d"))
            continue;
        n += gguf_tensor_nelements(t);
    }
    return n;
}

// parse_args: the options of argv (dies on a bad one).
static bench_opts parse_args(int argc, char **argv) {
    bench_opts o = {.T = 256, .R = 2, .n_threads = bn_n_threads_default(), .wtype = BN_F32, .gemm = BN_TRAIN_GEMM_BF16};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) o.T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o.R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) o.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ngl") && i + 1 < argc) o.ngl = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peak-tflops") && i + 1 < argc) o.peak_tflops = atof(argv[++i]);
        else if (!strcmp(argv[i], "--profile")) o.profile = true;
        else if (!strcmp(argv[i], "--train-gemm") && i + 1 < argc) {
            const char *g = argv[++i];
            if (strcmp(g, "bf16") && strcmp(g, "f32")) bn_die("--train-gemm: bf16 or f32");
            o.gemm = !strcmp(g, "f32") ? BN_TRAIN_GEMM_F32 : BN_TRAIN_GEMM_BF16;
        }
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            if (o.n_files == MAX_MODELS) bn_die("-m: at most %d files", MAX_MODELS);
            o.files[o.n_files++] = argv[++i];
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            o.wtype = bn_type_from_name(argv[++i]);
            if (o.wtype != BN_F32 && o.wtype != BN_F16 && o.wtype != BN_BF16) bn_die("--type: f32, f16 or bf16");
        } else if (argv[i][0] == '-') bn_die("unknown option %s", argv[i]);
        else if (o.n_presets < MAX_MODELS) o.presets[o.n_presets++] = argv[i];
    }
    if (o.n_files == 0 && o.n_presets == 0) o.presets[o.n_presets++] = "tiny", o.presets[o.n_presets++] = "small";
    if (o.T <= 0 || o.R <= 0) bn_die("--tokens and --reps must be > 0");
    if (o.peak_tflops < 0) bn_die("--peak-tflops must be > 0");
    return o;
}

// device_backend: the registered training backend with a device to use; dies with the reason when there is none.
static const bn_train_device *device_backend(bn_train_gemm gemm) {
    const bn_train_device *d = bn_train_device_get();
    if (!d) bn_die("--ngl: this program has no training device backend (build with -Dcuda=enabled)");
    int n = d->device_count();
    if (n <= 0) bn_die("--ngl: the %s backend finds no device", d->name);
    printf("device: %s device 0 of %d (forward + backward; the layers' base-weight GEMMs %s)\n", d->name, n,
           gemm == BN_TRAIN_GEMM_F32 ? "fp32 through cuBLAS SGEMM, attention's too"
                                     : "bf16 inputs with fp32 accumulation through cublasGemmEx, attention's TF32");
    return d;
}

// write_preset: generates preset `name` into dir; returns the file's path (static storage).
static const char *write_preset(const char *dir, const char *name, int wtype) {
    static char path[512];
    char err[256];
    bn_mkmodel_params mp;
    if (bn_mkmodel_defaults(&mp, name) != 0) bn_die("unknown preset %s", name);
    mp.type = wtype;
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    if (bn_mkmodel_write(&mp, path, err, sizeof err) != 0) bn_die("%s", err);
    return path;
}

// cpu_step: one forward + backward through train/graph.h.
static step_result cpu_step(bn_model *m, bn_lora *l, const int32_t *tok, int T, float *logits, const float *dl) {
    char err[256];
    double t0 = bn_time_ms();
    bn_train_graph *g = bn_train_forward(m, l, tok, T, NULL, logits, err, sizeof err);
    if (!g || bn_train_backward(g, dl, err, sizeof err) != 0) bn_die("%s", err);
    bn_train_graph_free(g);
    return (step_result){bn_time_ms() - t0, 0};
}

// device_step: one forward (with the adapter) + backward through the device backend, the gradients taken into
// l->grads; mem = the larger device use sampled after the forward and after the backward.
static step_result device_step(const bn_train_device *d, void *ctx, bn_lora *l, const int32_t *tok, int T,
                               float *logits, const float *dl) {
    char err[256];
    double t0 = bn_time_ms();
    void *g = d->forward(ctx, true, tok, T, logits, err, sizeof err);
    if (!g) bn_die("%s", err);
    size_t mem = d->mem_in_use(ctx);
    if (d->backward(g, dl, err, sizeof err) != 0) bn_die("%s", err);
    size_t after = d->mem_in_use(ctx);
    d->graph_free(g);
    if (d->take_grads(ctx, l->grads, err, sizeof err) != 0) bn_die("%s", err);
    return (step_result){bn_time_ms() - t0, after > mem ? after : mem};
}

// best_step: the fastest of R timed steps after a warm-up (on the device when d is set), the most memory seen.
static step_result best_step(const bench_opts *o, const bn_train_device *d, void *ctx, bn_model *m, bn_lora *l,
                             const int32_t *tok, float *logits, const float *dl) {
    step_result best = {1e30, 0};
    for (int r = 0; r < o->R + 1; r++) { // first run is a warm-up
        step_result s = d ? device_step(d, ctx, l, tok, o->T, logits, dl) : cpu_step(m, l, tok, o->T, logits, dl);
        if (r > 0 && s.ms < best.ms) best.ms = s.ms;
        if (s.mem > best.mem) best.mem = s.mem;
    }
    return best;
}

// mfu_cell: "12.3 %" of the peak, or "-" without one.
static const char *mfu_cell(double achieved_tflops, double peak_tflops) {
    static char cell[32];
    if (peak_tflops <= 0) return "-";
    snprintf(cell, sizeof cell, "%.1f %%", 100.0 * achieved_tflops / peak_tflops);
    return cell;
}

static void print_header(const bench_opts *o) {
    if (o->ngl > 0) {
        printf("| model | params | tokens | fwd+bwd ms | tok/s | device MB in use | achieved TFLOP/s | MFU | gemm |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    } else if (o->peak_tflops > 0) {
        printf("| model | params | tokens | fwd+bwd ms | tok/s | achieved GFLOP/s | sgemm GFLOP/s | share of sgemm "
               "| MFU |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        printf("| model | params | tokens | fwd+bwd ms | tok/s | achieved GFLOP/s | sgemm GFLOP/s | share of sgemm |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    }
}

// profile_step: one more device step timed by part, printed as a line.
static void profile_step(const bn_train_device *d, void *ctx, bn_lora *l, const int32_t *tok, int T, float *logits,
                         const float *dl) {
    static const char *names[BN_TRAIN_PARTS] = BN_TRAIN_PART_NAMES;
    char err[256];
    double ms[BN_TRAIN_PARTS];
    if (!d->set_profile) {
        printf("step by part: the %s backend cannot time its parts\n", d->name);
        return;
    }
    d->set_profile(ctx, true);
    step_result s = device_step(d, ctx, l, tok, T, logits, dl);
    if (d->take_profile(ctx, ms, err, sizeof err) != 0) bn_die("%s", err);
    d->set_profile(ctx, false);
    printf("step by part (ms):");
    for (int i = 0; i < BN_TRAIN_PARTS; i++) printf("%s %s %.1f", i ? " |" : "", names[i], ms[i]);
    printf(" (the timed step %.1f ms of wall time)\n", s.ms);
}

// bench_model: loads path, times its steps and prints its row (named `name`).
static void bench_model(const bench_opts *o, const bn_train_device *d, const char *path, const char *name) {
    char err[256];
    bn_model *m = bn_model_load(path, err, sizeof err);
    if (!m) bn_die("%s", err);
    bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN, 32, 32, 0, err, sizeof err);
    if (!l) bn_die("%s", err);
    bn_lora_init_peft(l, 1);
    const int T = o->T;
    int32_t *tok = xmalloc(sizeof(int32_t) * T);
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 7919) % m->cfg.n_vocab);
    float *logits = xmalloc(sizeof(float) * m->cfg.n_vocab), *dl = xcalloc(m->cfg.n_vocab, sizeof(float));
    dl[0] = 1, dl[1] = -1;
    void *ctx = NULL;
    const bn_train_device_opts dopts = {.gemm = o->gemm};
    if (d && (!(ctx = d->open(m, l, 0, &dopts, err, sizeof err)) || d->load_params(ctx, l, err, sizeof err) != 0))
        bn_die("%s: %s", name, err);
    step_result s = best_step(o, d, ctx, m, l, tok, logits, dl);
    double gflops = 6.0 * matmul_params(m) * T / (s.ms * 1e-3) / 1e9;
    if (d) {
        printf("| %s | %.2f M | %d | %.1f | %.0f | %.0f | %.2f | %s | %s |\n", name, bn_model_n_params(m) / 1e6, T,
               s.ms, T / (s.ms * 1e-3), s.mem / 1e6, gflops / 1e3, mfu_cell(gflops / 1e3, o->peak_tflops),
               bn_train_gemm_name(o->gemm));
        if (o->profile) profile_step(d, ctx, l, tok, T, logits, dl);
        d->close(ctx);
    } else {
        double sg = sgemm_gflops(T, m->cfg.n_ff, m->cfg.n_embd);
        printf("| %s | %.2f M | %d | %.1f | %.0f | %.2f | %.2f | %.0f %% |", name, bn_model_n_params(m) / 1e6, T,
               s.ms, T / (s.ms * 1e-3), gflops, sg, 100.0 * gflops / sg);
        if (o->peak_tflops > 0) printf(" %s |", mfu_cell(gflops / 1e3, o->peak_tflops));
        printf("\n");
    }
    fflush(stdout);
    free(tok), free(logits), free(dl);
    bn_lora_free(l);
    bn_model_free(m);
}

int main(int argc, char **argv) {
    bench_opts o = parse_args(argc, argv);
    bn_train_set_threads(o.n_threads); // attention and GDN over threads, as bonsai-ftpo-train -t does
    const bn_train_device *d = o.ngl > 0 ? device_backend(o.gemm) : NULL;
    print_header(&o);
    for (int i = 0; i < o.n_files; i++) {
        const char *slash = strrchr(o.files[i], '/');
        bench_model(&o, d, o.files[i], slash ? slash + 1 : o.files[i]);
    }
    if (o.n_presets == 0) return 0;
    char dir[] = "/tmp/bonsai-bench-train-XXXXXX";
    if (!mkdtemp(dir)) bn_die("mkdtemp failed");
    for (int p = 0; p < o.n_presets; p++) {
        const char *path = write_preset(dir, o.presets[p], o.wtype);
        bench_model(&o, d, path, o.presets[p]);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}
