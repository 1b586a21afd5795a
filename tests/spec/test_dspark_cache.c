// tests/spec/test_dspark_cache.c — prompt-cache reuse with DSpark speculative decoding
// (bn_spec_prefill_cached) on the CPU engine: the checks of tests/spec/cache_check.h, 24 tokens per
// request. Tolerance for the target logits: 1e-4 (F32 weights; the cached run reaches a position through
// other batch sizes than a fresh prefill; the bound of the restore check of tests/cuda/test_cuda_spec.c;
// observed 4.8e-6 vs a fresh prefill, 1.1e-5 vs plain decoding).
#include "tests/test.h"
#include "tests/spec/cache_check.h"

int main(void) {
    char tpath[512], dpath[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cache-", tpath, dpath, &m, &d);
    bn_engine *e = bn_engine_cpu_new(m, 2);
    cache_check(e, d, 1e-4, CC_N_GEN);
    bn_engine_free(e);
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("dspark_cache");
}
