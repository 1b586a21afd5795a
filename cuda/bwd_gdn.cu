// cuda/bwd_gdn.cu — the gated delta-rule recurrence for the trainer, forward and backward (docs/model.md §8; the
// formulas of train/backward_gdn.c). Rows of S (a value dim j, dk key dims) are independent given q, k, v, α, β, so a
// warp owns rows and runs them through time with the forward's row step (cuda/gdn_rows.cuh; the engine's
// recurrence_kernel in cuda/gdn.cu reads q, k, v from the packed conv output and makes α, β from their logits, so the
// trainer's forward, given q, k, v, g, β apart, is a kernel of its own around the same step). The backward splits a
// value head's rows between GDN_BWD_GROUPS blocks of up to GDN_BWD_MAX_WARPS warps, so a warp walks three or four
// rows of a 128-row head (a step is latency-bound: the fewer rows a warp walks, the sooner it is done). The warps
// recompute their rows' states from checkpoints every CK steps, chunk by chunk, and walk each chunk backward. Per
// step a block sums its warps' dq/dk rows and dβ, dα terms in warp order and adds them into zeroed workspace rows:
// with two addends on an exact zero the sum has the same bits in either order, so the result does not depend on which
// block comes first. A second launch sums the dq/dk rows over the value heads of each key head in head order and adds
// dβ, dα (no order-dependent atomics: deterministic).
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/gdn_rows.cuh"
#include "cuda/cuda_bwd_seq.h"

#define GDN_FWD_WARPS 4 // rows per forward block (a warp each)
#define GDN_BWD_GROUPS 2     // blocks per value head: two addends per workspace element keep the sums' bits fixed
// GDN_BWD_MAX_WARPS: warps of a backward block, at most (rows j ≡ the warp's index within the head): what the kernel's
// 96 registers (ptxas, sm_90) allow without spilling; more warps cap the registers lower and spill
#define GDN_BWD_MAX_WARPS 20
// head_bwd_step's shared partials at the longest rows fit the 48 KiB a block takes without an opt-in
static_assert(GDN_BWD_MAX_WARPS * (2 * BN_CU_MAX_HEAD_DIM + 2) * sizeof(float) <= 48 * 1024, "GDN partials");
#define GDN_REGS (BN_CU_MAX_HEAD_DIM / 32)
#define GDN_REDUCE_THREADS 256
#define GDN_DEFAULT_CKPT 32

// gdn_fwd_kernel: block (value head h, group of GDN_FWD_WARPS rows): warp w runs row j = blockIdx.y·GDN_FWD_WARPS + w
// of S_h from S0 through the T steps, writing out (t, h, j) and the final row to S_out (rows independent: S_out may be
// S0).
static __global__ void gdn_fwd_kernel(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k,
                                      const float *v, const float *g, const float *beta, const float *S0, float *out,
                                      float *S_out) {
    bn_cu_grid_begin();
    const int h = blockIdx.x, lane = threadIdx.x % 32, j = blockIdx.y * GDN_FWD_WARPS + threadIdx.x / 32;
    if (j >= dv) return; // whole warp leaves together
    const int kh = h % Hk;
    const size_t srow = ((size_t)h * dv + j) * dk;
    float r[GDN_REGS];
    rec_row_load(r, S0 ? S0 + srow : nullptr, lane, dk);
    for (int t = 0; t < T; t++) {
        const size_t qk = ((size_t)t * Hk + kh) * dk, gi = (size_t)t * Hv + h;
        const float o = rec_row_step(r, k + qk, q + qk, expf(g[gi]), beta[gi], v[gi * dv + j], lane, dk);
        if (lane == 0) out[gi * dv + j] = o;
    }
    if (S_out) rec_row_store(S_out + srow, r, lane, dk);
}

// gdn_head: the pointers and sizes of one value head's backward.
struct gdn_head {
    int T, Hk, Hv, dk, dv, CK, h, kh;
    int j0, dj; // the block's first row (its first warp's) and the row stride (the head's warps)
    size_t ssz; // dk·dv
    const float *q, *k, *v, *g, *beta, *dout;
};

// row_run: warp's row registers r through steps t0..t1−1 of head H (outputs dropped); with states (not NULL) the row
// after step t goes to states + (t − t0 + 1)·ssz + j·dk.
static __device__ void row_run(float (&r)[GDN_REGS], const gdn_head &H, int j, int t0, int t1, float *states,
                               int lane) {
    for (int t = t0; t < t1; t++) {
        const size_t qk = ((size_t)t * H.Hk + H.kh) * H.dk, gi = (size_t)t * H.Hv + H.h;
        rec_row_step(r, H.k + qk, H.q + qk, expf(H.g[gi]), H.beta[gi], H.v[gi * H.dv + j], lane, H.dk);
        if (states) rec_row_store(states + (size_t)(t - t0 + 1) * H.ssz + (size_t)j * H.dk, r, lane, H.dk);
    }
}

// row_checkpoints: ckpt[c] row j = S_h's row j before step c·CK, for c < ceil(T / CK), from S0's row (NULL = 0).
static __device__ void row_checkpoints(const gdn_head &H, int j, const float *S0, float *ckpt, int lane) {
    float r[GDN_REGS];
    rec_row_load(r, S0 ? S0 + (size_t)H.h * H.ssz + (size_t)j * H.dk : nullptr, lane, H.dk);
    const int n_ck = (H.T + H.CK - 1) / H.CK;
    for (int c = 0; c < n_ck; c++) {
        rec_row_store(ckpt + (size_t)c * H.ssz + (size_t)j * H.dk, r, lane, H.dk);
        if (c + 1 < n_ck) row_run(r, H, j, c * H.CK, (c + 1) * H.CK, nullptr, lane);
    }
}

// row_recompute: chunk[s] row j = the row before step t0 + s, s = 0..t1−t0, from the checkpoint row before t0.
static __device__ void row_recompute(const gdn_head &H, int j, const float *ckpt_c, float *chunk, int t0, int t1,
                                     int lane) {
    float r[GDN_REGS];
    rec_row_load(r, ckpt_c + (size_t)j * H.dk, lane, H.dk);
    rec_row_store(chunk + (size_t)j * H.dk, r, lane, H.dk);
    row_run(r, H, j, t0, t1, chunk, lane);
}

// row_bwd_step: reverse step t on row j (Sp = S_{t−1}, St = S_t rows; ds = dS row, becoming dS_{t−1}); adds the row's
// terms of dq, dk into the warp's partials pq, pk, of dβ and dα into *dbeta, *dalpha (lane partials of dα), and
// β·dδ_j into dv_ (NULL: skipped). The formulas of gdn_bwd_head (train/backward_gdn.c).
static __device__ void row_bwd_step(const gdn_head &H, int t, int j, const float *sp, const float *st, float *ds,
                                    float *pq, float *pk, float *dv_, float *dbeta, float *dalpha, int lane) {
    const size_t qk = ((size_t)t * H.Hk + H.kh) * H.dk, gi = (size_t)t * H.Hv + H.h;
    const float *qh = H.q + qk, *kk = H.k + qk;
    const float alpha = expf(H.g[gi]), b = H.beta[gi], vj = H.v[gi * H.dv + j], doj = H.dout[gi * H.dv + j];
    float u = 0.0f;
    for (int i = lane; i < H.dk; i += 32) u += sp[i] * kk[i];
    u = alpha * bn_warp_reduce_sum(u); // u = (αS_{t−1})ᵀk, δ = β(v − u)
    const float delta = b * (vj - u);
    float dd = 0.0f; // o = S_tᵀq: dq += S_t·do, dS += q·do; S_t = S' + kδᵀ: dk += dS·δ, dδ = dSᵀk
    for (int i = lane; i < H.dk; i += 32) {
        pq[i] += st[i] * doj;
        const float d = ds[i] + qh[i] * doj;
        ds[i] = d;
        pk[i] += d * delta;
        dd += d * kk[i];
    }
    dd = bn_warp_reduce_sum(dd);
    if (dv_ && lane == 0) dv_[gi * H.dv + j] += b * dd;
    *dbeta += dd * (vj - u);
    const float du = -b * dd; // u = S'ᵀk, S' = αS_{t−1}: dk += S'·du, dS' = dS + k·du; dα += ⟨dS', S_{t−1}⟩
    for (int i = lane; i < H.dk; i += 32) {
        pk[i] += alpha * sp[i] * du;
        const float d = ds[i] + kk[i] * du;
        *dalpha += d * sp[i];
        ds[i] = alpha * d;
    }
}

// head_bwd_step: reverse step t of the block's rows (every thread calls): the warps' rows, then the warp partials
// summed in warp order and added into the zeroed sums: the head's dq/dk rows of step t into qk_rows (NULL: not wanted),
// dβ and dα into gsum {T, Hv} × 2. part: 2·n_warps·dk + 2·n_warps shared floats.
static __device__ void head_bwd_step(const gdn_head &H, int t, const float *Sp, const float *St, float *dS,
                                     float *part, float *qk_rows, float *dv_, float *gsum) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32, dk = H.dk;
    float *pq = part + (size_t)warp * dk, *pk = part + (size_t)(n_warps + warp) * dk;
    float *pb = part + (size_t)2 * n_warps * dk, *pa = pb + n_warps;
    for (int i = lane; i < dk; i += 32) pq[i] = 0.0f, pk[i] = 0.0f;
    float db = 0.0f, da = 0.0f;
    for (int j = H.j0 + warp; j < H.dv; j += H.dj) {
        const size_t off = (size_t)j * dk;
        row_bwd_step(H, t, j, Sp + off, St + off, dS + off, pq, pk, dv_, &db, &da, lane);
    }
    da = bn_warp_reduce_sum(da);
    if (lane == 0) pb[warp] = db, pa[warp] = da;
    __syncthreads();
    if (qk_rows) { // element e: dq's (e < dk) or dk's row, one thread each
        float *qrow = qk_rows + ((size_t)H.h * H.T + t) * dk, *krow = qrow + (size_t)H.Hv * H.T * dk;
        for (int e = threadIdx.x; e < 2 * dk; e += blockDim.x) {
            const int which = e / dk, i = e % dk;
            float sum = 0.0f;
            for (int w = 0; w < n_warps; w++) sum += part[(size_t)(which * n_warps + w) * dk + i];
            atomicAdd(which ? krow + i : qrow + i, sum);
        }
    }
    if (threadIdx.x == 0) {
        float sb = 0.0f, sa = 0.0f;
        for (int w = 0; w < n_warps; w++) sb += pb[w], sa += pa[w];
        const size_t gi = (size_t)t * H.Hv + H.h;
        atomicAdd(gsum + gi, sb);
        atomicAdd(gsum + (size_t)H.T * H.Hv + gi, sa);
    }
    __syncthreads(); // part is rewritten by the next step
}

// gdn_bwd_kernel: block (value head h, row group); its warps own rows j ≡ j0 + warp (mod dj) of the head. ws (per
// head): ceil(T/CK) checkpoints, CK + 1 chunk states, dS (each dk·dv); a warp reads and writes only its own rows of
// them, each lane its own elements: the barriers are head_bwd_step's. qk_rows {dk, T, Hv} × 2 (dq then dk rows) or
// NULL, and gsum, zeroed. Dynamic shared memory: head_bwd_step's part.
static __global__ void __launch_bounds__(GDN_BWD_MAX_WARPS * 32)
    gdn_bwd_kernel(gdn_head H, const float *S0, const float *dS_final, float *ws, float *qk_rows, float *gsum,
                   float *dv_, float *dS0) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(float, part);
    H.h = blockIdx.x, H.kh = H.h % H.Hk;
    H.j0 = blockIdx.y * (blockDim.x / 32), H.dj = gridDim.y * (blockDim.x / 32);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_ck = (H.T + H.CK - 1) / H.CK;
    float *ckpt = ws + (size_t)H.h * (n_ck + H.CK + 2) * H.ssz, *chunk = ckpt + (size_t)n_ck * H.ssz;
    float *dS = chunk + (size_t)(H.CK + 1) * H.ssz;
    const float *dSf = dS_final ? dS_final + (size_t)H.h * H.ssz : nullptr;
    for (int j = H.j0 + warp; j < H.dv; j += H.dj) {
        row_checkpoints(H, j, S0, ckpt, lane);
        for (int i = lane; i < H.dk; i += 32) dS[(size_t)j * H.dk + i] = dSf ? dSf[(size_t)j * H.dk + i] : 0.0f;
    }
    for (int c = n_ck - 1; c >= 0; c--) {
        const int t0 = c * H.CK, t1 = min(t0 + H.CK, H.T);
        for (int j = H.j0 + warp; j < H.dv; j += H.dj)
            row_recompute(H, j, ckpt + (size_t)c * H.ssz, chunk, t0, t1, lane);
        for (int t = t1 - 1; t >= t0; t--) {
            const float *Sp = chunk + (size_t)(t - t0) * H.ssz, *St = Sp + H.ssz;
            head_bwd_step(H, t, Sp, St, dS, part, qk_rows, dv_, gsum);
        }
    }
    if (dS0)
        for (int j = H.j0 + warp; j < H.dv; j += H.dj)
            for (int i = lane; i < H.dk; i += 32)
                dS0[(size_t)H.h * H.ssz + (size_t)j * H.dk + i] += dS[(size_t)j * H.dk + i];
}

// gdn_qk_reduce_kernel: element e = (t·Hk + kh)·dk + i of dq / dk_ (NULL: skipped) += the value heads h ≡ kh (mod Hk)
// rows of qk_rows, added in head order.
static __global__ void gdn_qk_reduce_kernel(int T, int Hk, int Hv, int dk, const float *qk_rows, float *dq,
                                            float *dk_) {
    bn_cu_grid_begin();
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)T * Hk * dk) return;
    const int i = (int)(e % dk), kh = (int)(e / dk % Hk), t = (int)(e / ((int64_t)dk * Hk));
    const size_t plane = (size_t)Hv * T * dk;
    float sq = 0.0f, sk = 0.0f;
    for (int h = kh; h < Hv; h += Hk) {
        const size_t r = ((size_t)h * T + t) * dk + i;
        sq += qk_rows[r], sk += qk_rows[plane + r];
    }
    if (dq) dq[e] += sq;
    if (dk_) dk_[e] += sk;
}

// gdn_gate_add_kernel: element gi = t·Hv + h: dbeta += gsum's dβ, dg += α·gsum's dα (α = exp g; NULL: skipped).
static __global__ void gdn_gate_add_kernel(int n, const float *g, const float *gsum, float *dg, float *dbeta) {
    bn_cu_grid_begin();
    const int gi = blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= n) return;
    if (dbeta) dbeta[gi] += gsum[gi];
    if (dg) dg[gi] += expf(g[gi]) * gsum[n + gi];
}

// bwd_block_warps: warps of a backward block for heads of dv rows: a group's rows, at most GDN_BWD_MAX_WARPS.
static int bwd_block_warps(int dv) {
    const int rows = (dv + GDN_BWD_GROUPS - 1) / GDN_BWD_GROUPS;
    return rows < GDN_BWD_MAX_WARPS ? rows : GDN_BWD_MAX_WARPS;
}

// gdn_shape_ok: the shapes the kernels take; else err filled.
static bool gdn_shape_ok(int T, int Hk, int Hv, int dk, int dv, char *err, size_t errlen) {
    if (T >= 0 && Hk > 0 && Hv > 0 && dk > 0 && dk <= 32 * GDN_REGS && dv > 0) return true;
    if (err && errlen)
        snprintf(err, errlen, "cuda gdn: unsupported shape T %d Hk %d Hv %d dk %d dv %d", T, Hk, Hv, dk, dv);
    return false;
}

// ckpt_steps: the checkpoint interval of ckpt_every (0 or less: the default).
static int ckpt_steps(int ckpt_every) { return ckpt_every > 0 ? ckpt_every : GDN_DEFAULT_CKPT; }

extern "C" int bn_cuda_gdn_fwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                               const float *g, const float *beta, const float *S0, float *out, float *S_out,
                               void *stream, char *err, size_t errlen) {
    if (!gdn_shape_ok(T, Hk, Hv, dk, dv, err, errlen)) return -1;
    dim3 grid(Hv, (dv + GDN_FWD_WARPS - 1) / GDN_FWD_WARPS);
    BN_LAUNCH(gdn_fwd_kernel, grid, GDN_FWD_WARPS * 32, 0, stream, T, Hk, Hv, dk, dv, q, k, v, g, beta, S0, out, S_out);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// ws_states: workspace floats of the per-head states (checkpoints, a chunk, dS) at checkpoint interval CK.
static size_t ws_states(int T, int Hv, int dk, int dv, int CK) {
    return (size_t)Hv * ((T + CK - 1) / CK + CK + 2) * dk * dv;
}

extern "C" size_t bn_cuda_gdn_bwd_workspace_floats(int T, int Hv, int dk, int dv, int ckpt_every) {
    return ws_states(T, Hv, dk, dv, ckpt_steps(ckpt_every)) + (size_t)2 * Hv * T * (dk + 1);
}

extern "C" int bn_cuda_gdn_bwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                               const float *g, const float *beta, const float *S0, const float *dout,
                               const float *dS_final, int ckpt_every, float *dq, float *dk_, float *dv_, float *dg,
                               float *dbeta, float *dS0, float *workspace, void *stream, char *err, size_t errlen) {
    if (!gdn_shape_ok(T, Hk, Hv, dk, dv, err, errlen)) return -1;
    const int CK = ckpt_steps(ckpt_every), warps = bwd_block_warps(dv);
    const gdn_head H = {T, Hk, Hv, dk, dv, CK, 0, 0, 0, 0, (size_t)dk * dv, q, k, v, g, beta, dout};
    float *qk_rows = workspace + ws_states(T, Hv, dk, dv, CK), *gsum = qk_rows + (size_t)2 * Hv * T * dk;
    const size_t sums = (size_t)2 * Hv * T * (dk + 1), smem = ((size_t)2 * warps * dk + 2 * warps) * sizeof(float);
    BN_CUDA_TRY(cudaMemsetAsync(qk_rows, 0, sums * sizeof(float), (cudaStream_t)stream), err, errlen);
    BN_LAUNCH(gdn_bwd_kernel, dim3(Hv, GDN_BWD_GROUPS), warps * 32, smem, stream, H, S0, dS_final, workspace,
              dq || dk_ ? qk_rows : nullptr, gsum, dv_, dS0);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    const int64_t n = (int64_t)T * Hk * dk, ng = (int64_t)T * Hv;
    if (ng == 0) return 0;
    BN_LAUNCH(gdn_gate_add_kernel, (int)((ng + GDN_REDUCE_THREADS - 1) / GDN_REDUCE_THREADS), GDN_REDUCE_THREADS, 0,
              stream, (int)ng, g, (const float *)gsum, dg, dbeta);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    if (!(dq || dk_) || n == 0) return 0;
    BN_LAUNCH(gdn_qk_reduce_kernel, (int)((n + GDN_REDUCE_THREADS - 1) / GDN_REDUCE_THREADS), GDN_REDUCE_THREADS, 0,
              stream, T, Hk, Hv, dk, (const float *)qk_rows, dq, dk_);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}
