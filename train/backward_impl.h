// train/backward_impl.h — what the backward's files share (train/backward.c: linear + LoRA, norms, elementwise, RoPE,
// weight gradients, the thread pool; train/backward_attn.c: attention; train/backward_gdn.c: causal conv1d and the
// gated delta rule). Not a public header.
#ifndef BONSAI_TRAIN_BACKWARD_IMPL_H
#define BONSAI_TRAIN_BACKWARD_IMPL_H
#include "train/backward.h"
#include "base/threads.h"
#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

#if defined(__x86_64__) || defined(__i386__)
// hsum8: Σ of the 8 lanes.
__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// have_avx2_fma: the CPU runs the avx2,fma kernels of these files (checked once per file).
static inline int have_avx2_fma(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return cached;
}
#else
static inline int have_avx2_fma(void) { return 0; }
#endif

// bn_train_pool: the pool bn_train_set_threads made (NULL: single-threaded), for the attention and GDN passes.
bn_pool *bn_train_pool(void);

#endif
