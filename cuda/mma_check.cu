// cuda/mma_check.cu — the tensor-core self-checks (cuda/cuda_engine.h): int8 (bn_cuda_mma_selftest, bn_cuda_mma_in_use)
// and fp16 (bn_cuda_mma16_selftest, bn_cuda_attn_mma_ok; at the end).
//
// cuda/mmq_tc.cu's kernels rest on cuda/mma.cuh's fragment layout of mma.sync m16n8k32, which only a GPU can
// prove (the emulator computes from the same formulas). A wrong layout would not crash: DSpark verification, the
// drafter's block pass and batched steps of 8+ sequences would just compute wrong logits. So before the first
// upload the engine runs the tensor-core kernels and the dp4a ones (cuda/mmvq.cu, plain integer dots) on the same
// random low-bit weights and Q8 activations, and keeps the tensor cores only when the two agree.
#include "cuda/mm_impl.cuh"
#include "cuda/mma.cuh"
#include "cuda/cuda_engine.h"
#include <math.h>
#include <mutex>
#include <stdlib.h>
#include <string.h>
#include <vector>
extern "C" {
#include "base/util.h"
#include "base/rng.h"
// from quant/quant.h, which cannot be included next to common.cuh (both define bn_half)
size_t bn_quantize_ref(int type, const float *src, void *dst, int64_t n);
size_t bn_row_size(int type, int64_t ne0);
const char *bn_type_name(int type);
}

// The check's shape: rows of 1024 (every low-bit type repacks to its planar layout at this width), 64 rows (two
// blocks of MMA_MT·16 rows), column counts 8 and 24 (one and three column groups of the MMA).
enum { CHECK_NE0 = 1024, CHECK_NE1 = 64, CHECK_NB_MAX = 24 };
// Agreement: the per-unit integers are exact in both kernels and only the fp32 summation order differs
// (~1e-6 relative); a wrong fragment layout moves whole products (errors of the order of the outputs).
static const double CHECK_TOL = 1e-4;

// rng_unit: the next value of the project's PRNG (base/rng.h) mapped to [-1, 1).
static float rng_unit(bn_rng *r) { return 2.0f * bn_rng_uniform_f24(r) - 1.0f; }

// column_gap: 1 when the nb columns of tc (tensor cores) and vq (dp4a), {CHECK_NE1, nb} each, agree; else 0 with
// msg naming the type, layout, nb and column.
static int column_gap(const float *tc, const float *vq, int nb, int type, bool planar, char *msg, size_t len) {
    for (int c = 0; c < nb; c++) {
        double ymax = 0, dmax = 0;
        for (int r = 0; r < CHECK_NE1; r++) {
            const size_t i = (size_t)c * CHECK_NE1 + r;
            ymax = fmax(ymax, fabs(vq[i]));
            const double d = fabs((double)tc[i] - vq[i]);
            if (!(d <= dmax)) dmax = d; // NaN sticks
        }
        if (!(dmax <= CHECK_TOL * fmax(ymax, 1.0))) {
            snprintf(msg, len, "%s%s, %d columns: column %d differs from the dp4a kernel by %.3g (largest |y| %.3g)",
                     bn_type_name(type), planar ? " planar" : "", nb, c, dmax, ymax);
            return 0;
        }
    }
    return 1;
}

// check_layout: y from bn_cu_mmq_tc vs bn_cu_mmvq for one type and layout, the weight and x uploaded once, at every
// nb of nbs (<= CHECK_NB_MAX: the first nb columns of x); returns 1 when they agree, 0 when not (msg: where), -1 on a
// CUDA error (msg: which).
static int check_layout(int type, bool planar, const int *nbs, int n_nbs, const uint8_t *wq, const float *x,
                        char *msg, size_t len) {
    const size_t rb = bn_row_size(type, CHECK_NE0), wbytes = rb * CHECK_NE1;
    const size_t ybytes = sizeof(float) * CHECK_NE1 * CHECK_NB_MAX;
    bn_cu_weight w = {nullptr, type, CHECK_NE0, CHECK_NE1, rb};
    dev_bufs b;
    void *dw;
    int8_t *qs;
    bn_q8_ds *ds;
    float *dx, *dy_tc, *dy_vq;
    cudaError_t e = b.alloc(&dw, wbytes);
    if (e == cudaSuccess) e = b.alloc((void **)&dx, sizeof(float) * CHECK_NE0 * CHECK_NB_MAX);
    if (e == cudaSuccess) e = b.alloc((void **)&dy_tc, ybytes);
    if (e == cudaSuccess) e = b.alloc((void **)&dy_vq, ybytes);
    if (e == cudaSuccess) e = b.alloc((void **)&qs, (size_t)CHECK_NE0 * CHECK_NB_MAX);
    if (e == cudaSuccess) e = b.alloc((void **)&ds, sizeof(bn_q8_ds) * CHECK_NE0 / 32 * CHECK_NB_MAX);
    if (e == cudaSuccess) e = cudaMemcpy(dw, wq, wbytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(dx, x, sizeof(float) * CHECK_NE0 * CHECK_NB_MAX, cudaMemcpyHostToDevice);
    w.data = dw;
    if (e == cudaSuccess && planar) e = bn_cu_weight_repack(&w, 0);
    const bn_q8_act act = {qs, ds};
    const bn_cu_weight *wp = &w;
    std::vector<float> tc((size_t)CHECK_NE1 * CHECK_NB_MAX), vq((size_t)CHECK_NE1 * CHECK_NB_MAX);
    int rc = 1;
    for (int k = 0; k < n_nbs && e == cudaSuccess && rc == 1; k++) {
        const int nb = nbs[k];
        e = bn_cu_quantize_act(w.type, dx, CHECK_NE0, nb, qs, ds, 0);
        if (e == cudaSuccess) e = bn_cu_mmvq(&wp, &dy_vq, 1, &act, dx, nb, 0);
        if (e == cudaSuccess) e = bn_cu_mmq_tc(&wp, &dy_tc, 1, &act, nb, 0);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaMemcpy(tc.data(), dy_tc, sizeof(float) * CHECK_NE1 * nb, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) e = cudaMemcpy(vq.data(), dy_vq, sizeof(float) * CHECK_NE1 * nb, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) rc = column_gap(tc.data(), vq.data(), nb, type, planar, msg, len);
    }
    if (e != cudaSuccess) {
        snprintf(msg, len, "CUDA error %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    return rc;
}

extern "C" int bn_cuda_mma_selftest(char *msg, size_t msglen) {
    char scratch_msg[8];
    if (!msg || !msglen) msg = scratch_msg, msglen = sizeof scratch_msg;
    msg[0] = 0;
    static const int types[] = {BN_CU_Q1_0, BN_CU_Q2_0, BN_CU_PQ2_0};
    static const int nbs[] = {8, CHECK_NB_MAX};
    bn_rng rng;
    bn_rng_seed(&rng, 20261130);
    std::vector<float> wf((size_t)CHECK_NE0 * CHECK_NE1), x((size_t)CHECK_NE0 * CHECK_NB_MAX);
    for (float &v : wf) v = rng_unit(&rng);
    for (float &v : x) v = 3.0f * rng_unit(&rng);
    for (int type : types) {
        const size_t rb = bn_row_size(type, CHECK_NE0);
        std::vector<uint8_t> wq(rb * CHECK_NE1);
        for (int r = 0; r < CHECK_NE1; r++)
            bn_quantize_ref(type, wf.data() + (size_t)r * CHECK_NE0, wq.data() + (size_t)r * rb, CHECK_NE0);
        for (int planar = 0; planar < 2; planar++) {
            const bn_cu_weight probe = {nullptr, type, CHECK_NE0, CHECK_NE1, rb};
            if (planar && !bn_cu_weight_repackable(&probe)) continue;
            const int rc =
                check_layout(type, planar, nbs, (int)(sizeof nbs / sizeof nbs[0]), wq.data(), x.data(), msg, msglen);
            if (rc != 1) return rc;
        }
    }
    return 1;
}

// The process-wide decision of bn_cuda_mma_in_use (made once, before any graph is captured).
static std::once_flag g_decide_once;
static char g_status[320] = "on";

// decide: fills g_status and switches the tensor-core kernels off where they must not run.
static void decide(void) {
    char why[256] = "";
    if (!BN_CU_MMA) snprintf(g_status, sizeof g_status, "off (built with BN_CU_MMA=0)");
    else if (bn_env_is("BONSAI_CUDA_MMA", "0")) snprintf(g_status, sizeof g_status, "off (BONSAI_CUDA_MMA=0)");
    else if (bn_cuda_mma_selftest(why, sizeof why) != 1) {
        snprintf(g_status, sizeof g_status, "off (self-check failed: %s)", why);
        fprintf(stderr,
                "bonsai: CUDA int8 tensor-core self-check failed: %s; products of 8-32 columns use the dp4a kernels\n",
                why);
    } else return;
    bn_cu_mmq_tc_enable(false);
}

extern "C" int bn_cuda_mma_in_use(void) {
    std::call_once(g_decide_once, decide);
    return bn_cu_mmq_tc_enabled();
}

extern "C" const char *bn_cuda_mma_status(void) {
    std::call_once(g_decide_once, decide);
    return g_status;
}

// ---- the fp16 MMA (prefill attention on the tensor cores, BONSAI_CUDA_ATTN_TILED=mma) ----------------------------
// mma16_check_k: one warp; d {16, 8} row-major = a {16, 16} row-major · b {16, 8} (stored [n][k]) + c, each lane
// loading its fragments by cuda/mma.cuh's fp16 layout formulas.
static __global__ void mma16_check_k(const bn_half *a, const bn_half *b, const float *c, float *d) {
    bn_cu_grid_begin();
    const int lane = threadIdx.x;
    uint32_t af[4], bf[2];
    float cf[4], df[4];
    for (int r = 0; r < 4; r++) {
        uint32_t w = 0;
        for (int j = 0; j < 2; j++)
            w |= (uint32_t)bn_half_raw(a[bn_mma_a_row(lane, r) * 16 + bn_mma16_a_k(lane, r, j)]) << (16 * j);
        af[r] = w;
        cf[r] = c[bn_mma_c_row(lane, r) * 8 + bn_mma_c_col(lane, r)];
    }
    for (int r = 0; r < 2; r++) {
        uint32_t w = 0;
        for (int j = 0; j < 2; j++) w |= (uint32_t)bn_half_raw(b[bn_mma_b_col(lane) * 16 + bn_mma16_b_k(lane, r, j)]) << (16 * j);
        bf[r] = w;
    }
    bn_mma_f16_16x8x16(df, af, bf, cf);
    for (int r = 0; r < 4; r++) d[bn_mma_c_row(lane, r) * 8 + bn_mma_c_col(lane, r)] = df[r];
}

extern "C" int bn_cuda_mma16_selftest(char *msg, size_t msglen) {
    enum { NA = 16 * 16, NB = 16 * 8, NC = 16 * 8 };
    std::vector<bn_half> ha(NA), hb(NB);
    std::vector<float> fa(NA), fb(NB), hc(NC), hd(NC);
    bn_rng rng;
    bn_rng_seed(&rng, 0x6d6d613136ull);
    for (int i = 0; i < NA; i++) ha[i] = bn_f2h(rng_unit(&rng)), fa[i] = bn_h2f(ha[i]);
    for (int i = 0; i < NB; i++) hb[i] = bn_f2h(rng_unit(&rng)), fb[i] = bn_h2f(hb[i]);
    for (int i = 0; i < NC; i++) hc[i] = rng_unit(&rng);
    bn_half *da = nullptr, *db = nullptr;
    float *dc = nullptr, *dd = nullptr;
    cudaError_t e = cudaMalloc(&da, sizeof(bn_half) * NA);
    if (e == cudaSuccess) e = cudaMalloc(&db, sizeof(bn_half) * NB);
    if (e == cudaSuccess) e = cudaMalloc(&dc, sizeof(float) * NC);
    if (e == cudaSuccess) e = cudaMalloc(&dd, sizeof(float) * NC);
    if (e == cudaSuccess) e = cudaMemcpy(da, ha.data(), sizeof(bn_half) * NA, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(db, hb.data(), sizeof(bn_half) * NB, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(dc, hc.data(), sizeof(float) * NC, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        BN_LAUNCH(mma16_check_k, 1, 32, 0, 0, da, db, dc, dd);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(hd.data(), dd, sizeof(float) * NC, cudaMemcpyDeviceToHost);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
    if (e != cudaSuccess) {
        snprintf(msg, msglen, "%s", cudaGetErrorString(e));
        return -1;
    }
    // the products of halves are exact in fp32; only the sum's rounding differs (|d| <= 17, so ~1e-6)
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 8; col++) {
            double want = hc[row * 8 + col];
            for (int k = 0; k < 16; k++) want += (double)fa[row * 16 + k] * fb[col * 16 + k];
            const double got = hd[row * 8 + col];
            if (!(fabs(got - want) <= 1e-4)) {
                snprintf(msg, msglen, "fp16 m16n8k16: d[%d][%d] = %.6g, want %.6g", row, col, got, want);
                return 0;
            }
        }
    return 1;
}

static std::once_flag g_mma16_once;
static bool g_mma16_ok;

extern "C" int bn_cuda_attn_mma_ok(void) {
    std::call_once(g_mma16_once, [] {
        char why[256] = "";
        g_mma16_ok = bn_cuda_mma16_selftest(why, sizeof why) == 1;
        if (!g_mma16_ok)
            fprintf(stderr, "bonsai: CUDA fp16 tensor-core self-check failed: %s; prefill attention by query tiles "
                            "runs on the CUDA cores (BONSAI_CUDA_ATTN_TILED=1's kernel)\n", why);
    });
    return g_mma16_ok ? 1 : 0;
}
