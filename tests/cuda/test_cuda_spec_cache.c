// tests/cuda/test_cuda_spec_cache.c — prompt-cache reuse with DSpark speculative decoding
// (bn_spec_prefill_cached) with the target on the CUDA engine (-ngl 99: the drafter on the device, taps read
// in place) and on the CPU+CUDA engine (-ngl 2 of the tiny target's 4 layers: device drafter, host taps): the
// checks of tests/spec/cache_check.h on each engine (cached request vs a fresh speculative prefill: tokens,
// drafts and counters identical; tokens vs plain greedy on the same engine; stale and non-prefix entries
// not used), 8 tokens per request (the emulator's time). Logit tolerance 5e-4 (fp16 KV cache on the device;
// the cached run reaches its positions through other batch sizes than a fresh prefill; observed in the
// emulator with 24 tokens: <= 4.5e-5 on both engines; tests/cuda/test_cuda_spec.c bounds CPU vs CUDA by 2e-3).
// argv[1]: "cuda" or "split" (one part per emulator test, each < 60 s); none runs both (GPU).
// Linked twice: cuda_spec_cache (skips without a device) and the _emu tests through the CPU emulator.
#include "tests/test.h"
#include "tests/spec/cache_check.h"
#include "cuda/cuda_engine.h"

int main(int argc, char **argv) {
    char err[512];
    if (!bn_cuda_available(err, sizeof err)) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    const char *part = argc > 1 ? argv[1] : "all";
    char tpath[512], dpath[512];
    bn_model *m;
    bn_drafter *d;
    fx_load_pair("cuda-cache-", tpath, dpath, &m, &d);
    const struct {
        const char *part;
        int ngl;
    } engines[] = {{"cuda", 99}, {"split", 2}};
    for (int i = 0; i < 2; i++) {
        if (strcmp(part, "all") != 0 && strcmp(part, engines[i].part) != 0) continue;
        bn_engine *e = bn_engine_open(m, engines[i].ngl, 2, err, sizeof err);
        if (!e) bn_die("engine -ngl %d: %s", engines[i].ngl, err);
        cache_check(e, d, 5e-4, 8);
        bn_engine_free(e);
    }
    bn_drafter_free(d);
    bn_model_free(m);
    unlink(tpath);
    unlink(dpath);
    return test_done("cuda_spec_cache");
}
