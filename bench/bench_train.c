// bench/bench_train.c — LoRA training throughput (forward + backward, tokens/s) on generated qwen35
// models, and achieved GFLOP/s against OpenBLAS sgemm measured in the same run (the target:
// >= 35 % of the sgemm rate). FLOPs are counted as 6·N_mm per token (forward 2N + recompute 2N +
// backward-data 2N, docs/model.md §10.4; N_mm = weights of the projections, head excluded: FTPO reads
// the last position only). LoRA: r 32 on q,k,v,o,gate,up,down (the seeds' recipe).
// Usage: bench_train [preset ...] [--tokens T] [--reps R] [--threads N] [--type f32|f16|bf16]
//        (default: tiny small, T 256, R 2, N = online CPUs as the training tools use; sgemm keeps OpenBLAS's own)
#include "synth/mkmodel.h"
#include "core/model.h"
#include "base/util.h"
#include "quant/quant.h"
#include "train/backward.h"
#include "train/graph.h"
#include "train/lora.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int main(int argc, char **argv) {
    const char *presets[8];
    int np = 0, T = 256, R = 2, n_threads = bn_n_threads_default(), wtype = BN_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            wtype = bn_type_from_name(argv[++i]);
            if (wtype != BN_F32 && wtype != BN_F16 && wtype != BN_BF16) bn_die("--type: f32, f16 or bf16");
        }
        else if (np < 8) presets[np++] = argv[i];
    }
    if (np == 0) presets[np++] = "tiny", presets[np++] = "small";
    bn_train_set_threads(n_threads); // attention and GDN over threads, as bonsai-ftpo-train -t does
    char err[256], dir[] = "/tmp/bonsai-bench-train-XXXXXX";
    if (!mkdtemp(dir)) bn_die("mkdtemp failed");
    printf("| model | params | tokens | fwd+bwd ms | tok/s | achieved GFLOP/s | sgemm GFLOP/s | share of sgemm |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < np; p++) {
        bn_mkmodel_params mp;
        if (bn_mkmodel_defaults(&mp, presets[p]) != 0) bn_die("unknown preset %s", presets[p]);
        mp.type = wtype;
        char path[512];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, presets[p]);
        if (bn_mkmodel_write(&mp, path, err, sizeof err) != 0) bn_die("%s", err);
        bn_model *m = bn_model_load(path, err, sizeof err);
        if (!m) bn_die("%s", err);
        bn_lora *l = bn_lora_from_model(m, BN_LORA_ATTN | BN_LORA_FFN, 32, 32, 0, err, sizeof err);
        if (!l) bn_die("%s", err);
        bn_lora_init_peft(l, 1);
        int32_t *tok = xmalloc(sizeof(int32_t) * T);
        for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 7919) % m->cfg.n_vocab);
        float *logits = xmalloc(sizeof(float) * m->cfg.n_vocab), *dl = xcalloc(m->cfg.n_vocab, sizeof(float));
        dl[0] = 1, dl[1] = -1;
        double best = 1e30;
        for (int r = 0; r < R + 1; r++) { // first run is a warm-up
            double t0 = bn_time_ms();
            bn_train_graph *g = bn_train_forward(m, l, tok, T, NULL, logits, err, sizeof err);
            if (!g || bn_train_backward(g, dl, err, sizeof err) != 0) bn_die("%s", err);
            bn_train_graph_free(g);
            double dt = bn_time_ms() - t0;
            if (r > 0 && dt < best) best = dt;
        }
        int64_t nmm = matmul_params(m);
        double achieved = 6.0 * nmm * T / (best * 1e-3) / 1e9;
        double sg = sgemm_gflops(T, m->cfg.n_ff, m->cfg.n_embd);
        printf("| %s | %.2f M | %d | %.1f | %.0f | %.2f | %.2f | %.0f %% |\n", presets[p], bn_model_n_params(m) / 1e6, T,
               best, T / (best * 1e-3), achieved, sg, 100.0 * achieved / sg);
        free(tok), free(logits), free(dl);
        bn_lora_free(l);
        bn_model_free(m);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}
