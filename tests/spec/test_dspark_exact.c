// tests/spec/test_dspark_exact.c — greedy speculative decoding gives plain greedy decoding's tokens on the Bonsai
// weight types, where near-ties make the last bit matter: a random "small" qwen35 model (8 layers, vocabulary 4 096,
// flat logits) quantized to Q1_0, Q2_0, PQ2_0 and Q8_0 (--pure), and as F16 and F32. Plain decoding runs one token per
// forward (the mat-vec); the oracle drafter proposes those tokens again, so every verify pass of k + 1 tokens (the
// mat-mat kernels; float weights: the row kernel up to 8 rows, core/matmul.c) must reproduce them bit for bit: every
// draft accepted, the same 96 tokens, for k = 3 and 7 (4- and 8-row verify passes), on 1 and 2 threads. Before the
// mat-vec and the mat-mat shared one formula (quant/matvec_avx2.c), the Q1_0 run with k = 3 accepted 71 of 75 drafts
// and its tokens differed from plain decoding's from token 72 on. (F32 verify passes once went to sgemm,
// whose bits differ from the mat-vec's, test_dot_batch; on this model the F32 tokens matched all the same.)
// With a LoRA adapter applied unmerged (every projection and the head, rank 8; core/adapter.h) on the Q1_0 and F16
// models the same holds: the adapter's low-rank path gives a verify row the bits of the decode row, so every oracle
// draft is accepted and the tokens are plain greedy's with the adapter (which differ from those without it).
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "quant/quant.h"
#include "quantize/quantize.h"

#define N_GEN 96

static const int32_t prompt[] = {10, 200, 33, 47, 300, 5, 99, 123, 7, 64, 250, 18, 1000, 2047, 3};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

// lora_case: the oracle speculative loop on m with a random adapter (written to path) equals plain greedy with it.
static void lora_case(const bn_model *m, const char *type, const char *path) {
    char err[512];
    int32_t base[N_GEN], plain[N_GEN], gen[N_GEN + 64];
    fx_plain_greedy(m, prompt, N_PROMPT, N_GEN, base);
    for (int k = 3; k <= 7; k += 4) {
        bn_engine *e = fx_adapter_engine(m, path, 0.05f, 2);
        if (!e) return;
        if (k == 3) {
            fx_engine_greedy(e, prompt, N_PROMPT, N_GEN, plain);
            CHECK(memcmp(plain, base, sizeof base) != 0, "%s: the adapter changes the greedy tokens", type);
        }
        bn_engine_state *ts = bn_engine_state_new(e, 512, err, sizeof err);
        bn_spec_params p = {.type = BN_SPEC_ORACLE, .n_max = k, .adaptive = false, .n_threads = 2};
        bn_spec *sp = ts ? bn_spec_new_engine(ts, NULL, &p, err, sizeof err) : NULL;
        CHECK(sp != NULL, "%s: %s", type, err);
        if (sp) {
            fx_spec_greedy(sp, prompt, N_PROMPT, N_GEN, gen);
            const bn_spec_stats *st = bn_spec_stats_get(sp);
            printf("%-5s + adapter, k %d: %lld of %lld drafts accepted, same tokens: %s\n", type, k,
                   (long long)st->n_accept, (long long)st->n_drafted, memcmp(gen, plain, sizeof plain) ? "no" : "yes");
            CHECK(!memcmp(gen, plain, sizeof plain), "%s + adapter k %d: speculative = plain greedy", type, k);
            CHECK(st->n_drafted > 0 && st->n_accept == st->n_drafted, "%s + adapter k %d: every oracle draft accepted",
                  type, k);
        }
        bn_spec_free(sp);
        bn_engine_state_free(ts);
        bn_engine_free(e);
    }
    unlink(path);
}

int main(void) {
    char f16[512], q[512], err[512];
    fx_path(f16, sizeof f16, "exact-f16.gguf");
    fx_path(q, sizeof q, "exact-q.gguf");
    bn_mkmodel_params mp;
    bn_mkmodel_defaults(&mp, "small");
    mp.type = BN_F16;
    mp.seed = 1;
    CHECK(bn_mkmodel_write(&mp, f16, err, sizeof err) == 0, "mkmodel: %s", err);
    const char *types[] = {"Q1_0", "Q2_0", "PQ2_0", "Q8_0", "F16", "F32"};
    for (int ti = 0; ti < 6 && !test_failures; ti++) {
        bn_quantize_params qp = bn_quantize_params_default();
        qp.type = types[ti];
        qp.pure = true;
        qp.log = NULL;
        CHECK(bn_quantize_file(&qp, f16, q, err, sizeof err) == 0, "quantize %s: %s", types[ti], err);
        bn_model *m = bn_model_load(q, err, sizeof err);
        CHECK(m != NULL, "%s: %s", types[ti], err);
        if (!m) break;
        int32_t plain[N_GEN], gen[N_GEN + 64];
        fx_plain_greedy(m, prompt, N_PROMPT, N_GEN, plain);
        for (int threads = 1; threads <= 2; threads++)
            for (int k = 3; k <= 7; k += 4) {
                bn_engine *e = bn_engine_cpu_new(m, threads);
                bn_engine_state *ts = bn_engine_state_new(e, 512, err, sizeof err);
                bn_spec_params p = {.type = BN_SPEC_ORACLE, .n_max = k, .adaptive = false, .n_threads = threads};
                bn_spec *sp = ts ? bn_spec_new_engine(ts, NULL, &p, err, sizeof err) : NULL;
                CHECK(sp != NULL, "%s: %s", types[ti], err);
                if (!sp) break;
                fx_spec_greedy(sp, prompt, N_PROMPT, N_GEN, gen);
                int diff = -1;
                for (int i = 0; i < N_GEN && diff < 0; i++)
                    if (gen[i] != plain[i]) diff = i;
                const bn_spec_stats *st = bn_spec_stats_get(sp);
                printf("%-5s k %d, %d thread%s: %lld of %lld drafts accepted, first difference %d\n", types[ti], k,
                       threads, threads > 1 ? "s" : "", (long long)st->n_accept, (long long)st->n_drafted, diff);
                CHECK(diff < 0, "%s k %d, %d threads: speculative output differs from plain greedy at token %d",
                      types[ti], k, threads, diff);
                CHECK(st->n_drafted > 0 && st->n_accept == st->n_drafted, "%s k %d: %lld of %lld oracle drafts accepted",
                      types[ti], k, (long long)st->n_accept, (long long)st->n_drafted);
                bn_spec_free(sp);
                bn_engine_state_free(ts);
                bn_engine_free(e);
            }
        if (ti == 0 || ti == 4) {
            char ad[512];
            lora_case(m, types[ti], fx_path(ad, sizeof ad, "exact-lora.gguf"));
        }
        bn_model_free(m);
    }
    unlink(f16), unlink(q);
    return test_done("test_dspark_exact");
}
