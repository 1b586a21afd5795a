// tests/core/test_sampler_dry.c — DRY (core/dry.h) and its place in the sampler chain:
//   - a hand-worked window "a b c a b c a b" (allowed length 2, base 2): only c is penalized, by 2^(5−2) = 8;
//   - on the real qwen35 vocabulary (third_party's ggml-vocab-qwen35.gguf), bn_dry_apply against llama.cpp's own dry
//     sampler (the prebuilt libllama) on histories with repeats and breakers, for the default breakers, none,
//     multi-token ones ("Q:", " cat"), windows of 16 / 64 / all and a repeat long enough to hit the exponent cap:
//     and on 400 tokens drawn from 11 (breakers among them): every logit within 1e-6 relative (they come out equal),
//     the same logits penalized, and some case penalizing something on each history;
//   - the sampler applies DRY after the repetition penalties and only with a history.
#include "core/dry.h"
#include "gguf/gguf.h"
#include "core/sampler.h"
#include "base/rng.h"
#include "base/util.h"
#include "tests/test.h"
#ifdef HAVE_LLAMA_REF
#include "tests/ref/llama_ref.h"
#endif
#include <math.h>
#include <string.h>

static void hand_worked(void) {
    const int32_t a = 1, b = 2, c = 3;
    const int32_t hist[] = {a, b, c, a, b, c, a, b};
    float l[8] = {0};
    bn_dry_apply(NULL, 1.0f, 2.0f, 2, 64, hist, 8, l, 8);
    for (int i = 0; i < 8; i++) CHECK(l[i] == (i == c ? -8.0f : 0.0f), "token %d: %g", i, l[i]);
    float m[8] = {0};
    bn_dry_apply(NULL, 1.0f, 2.0f, 2, 4, hist, 8, m, 8); // window "c a b"+"a b"? last 4: a b c... -> "c a b" no: b c a b
    // last 4 tokens "b c a b": the suffix "b" repeats once (length 1 < 2): nothing
    for (int i = 0; i < 8; i++) CHECK(m[i] == 0.0f, "window 4, token %d: %g", i, m[i]);
    float n0[8] = {0};
    bn_dry_apply(NULL, 0.0f, 2.0f, 2, 64, hist, 8, n0, 8);
    bn_dry_apply(NULL, 1.0f, 0.5f, 2, 64, hist, 8, n0, 8);
    bn_dry_apply(NULL, 1.0f, 2.0f, 2, 0, hist, 8, n0, 8);
    for (int i = 0; i < 8; i++) CHECK(n0[i] == 0.0f, "DRY off (multiplier 0, base < 1, last_n 0): token %d %g", i, n0[i]);
    // in the sampler: greedy picks c without DRY, b with it (c: 3 - 8 < b's 2); only with a history
    float row[8] = {0, 0, 2.0f, 3.0f, 0, 0, 0, 0};
    bn_sampler_params p = bn_sampler_params_default();
    p.temperature = 0;
    p.dry_multiplier = 1.0f, p.dry_base = 2.0f;
    bn_sampler *s = bn_sampler_new(&p);
    CHECK(bn_sampler_params_penalized(&p) && !bn_sampler_is_greedy(s), "DRY makes the sampler need rows and history");
    CHECK(bn_sampler_sample(s, row, 8) == c, "no history: c");
    bn_sampler_set_history(s, hist, 8);
    CHECK(bn_sampler_sample(s, row, 8) == b, "with the history: b");
    bn_sampler_free(s);
    // after the repetition penalties (llama-server's chain): c's 3.0 / 1.5 = 2.0, then - 8 -> -6; b's 2.0 / 1.5
    p.repeat_penalty = 1.5f;
    p.temperature = 1.0f, p.top_k = -1, p.top_p = 1.0f, p.min_p = 0.0f;
    s = bn_sampler_new(&p);
    bn_sampler_set_history(s, hist, 8);
    bn_sampler_sample(s, row, 8);
    const int32_t *ids;
    const float *probs;
    const int nc = bn_sampler_last_candidates(s, &ids, &probs);
    double pc = -1, pb = -1, sum = 0;
    const double lb = 2.0 / 1.5, lc = 3.0 / 1.5 - 8.0; // a: 0 * 1.5 = 0; others 0
    for (int i = 0; i < 8; i++) sum += exp(i == b ? lb : i == c ? lc : 0.0);
    for (int i = 0; i < nc; i++) {
        if (ids[i] == b) pb = probs[i];
        if (ids[i] == c) pc = probs[i];
    }
    CHECK(fabs(pb - exp(lb) / sum) < 1e-6 && fabs(pc - exp(lc) / sum) < 1e-6, "penalties then DRY: p(b) %g p(c) %g", pb,
          pc);
    bn_sampler_free(s);
}

#ifdef HAVE_LLAMA_REF
typedef struct {
    float mult, base;
    int allowed, last_n;
    int breakers; // 0: the defaults, 1: none, 2: "Q:", " cat", "\n"
} dry_case;

static void against_llama(void) {
    char path[1024], err[512];
    test_third_party(path, sizeof path, "llama.cpp/models/ggml-vocab-qwen35.gguf");
    if (!llama_ref_available(err, sizeof err)) {
        printf("llama.cpp comparison skipped: %s\n", err);
        return;
    }
    gguf_file *g = gguf_open(path, err, sizeof err);
    bn_tokenizer *tok = g ? bn_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    if (g) gguf_close(g);
    llama_ref *ref = llama_ref_load_vocab(path, err, sizeof err);
    CHECK(tok && ref, "qwen35 vocabulary and llama.cpp's: %s", err);
    if (!tok || !ref) {
        bn_tokenizer_free(tok);
        llama_ref_free(ref);
        return;
    }
    const int nv = bn_tokenizer_n_vocab(tok);
    CHECK(nv == llama_ref_n_vocab(ref), "vocabulary sizes %d / %d", nv, llama_ref_n_vocab(ref));
    // a history with repeated riddles (breakers "\n", ":", "\"" inside), then a long verbatim loop of one phrase
    char text[16384] = "";
    for (int i = 0; i < 6; i++) strcat(text, "Q: What did the cat say?\nA: \"The cat sat on the mat.\"\n");
    strcat(text, "Q: What did the cat say?\nA: \"The cat sat");
    char loop[16384] = "The elephants are coming over the hill";
    for (int i = 0; i < 40; i++) strcat(loop, " and the elephants are coming over the hill");
    int32_t *h1, *h2;
    const int n1 = bn_tokenize(tok, text, strlen(text), false, false, &h1);
    const int n2 = bn_tokenize(tok, loop, strlen(loop), false, false, &h2);
    printf("histories: %d tokens (riddles), %d tokens (one phrase 41 times)\n", n1, n2);
    const char *const custom[] = {"Q:", " cat", "\n"};
    bn_dry_breakers *dflt = bn_dry_breakers_new(tok, NULL, 0), *mine = bn_dry_breakers_new(tok, custom, 3);
    const char *const dflt_strs[] = {"\n", ":", "\"", "*"};
    const dry_case cases[] = {
        {0.8f, 1.75f, 2, 64, 0}, {0.8f, 1.75f, 2, 64, 1}, {0.8f, 1.75f, 2, 64, 2}, {1.0f, 3.0f, 1, 16, 0},
        {0.5f, 1.75f, 3, -1, 0}, {0.8f, 1.75f, 2, -1, 1}, {2.0f, 1.1f, 4, -1, 2},
    };
    // a third history: 400 tokens drawn from 12 (among them "\n", ":", "Q", " cat" and '"'), so that many tokens
    // extend some repeat and breakers stand everywhere
    int32_t *alpha, h3[400];
    const int na = bn_tokenize(tok, "Q: the cat\n\" sat on a mat *", 26, false, false, &alpha);
    bn_rng hr;
    bn_rng_seed(&hr, 17);
    for (int i = 0; i < 400; i++) h3[i] = alpha[(int)(bn_rng_uniform(&hr) * na) % na];
    free(alpha);
    printf("third history: 400 tokens from %d\n", na);
    // a fourth: a line repeated, ending where the next token would be the line break (a breaker by itself: never
    // penalized, though it extends the repeat)
    const char *lines = "the cat sat on the mat\nthe cat sat on the mat\nthe cat sat on the mat";
    int32_t *h4;
    const int n4 = bn_tokenize(tok, lines, strlen(lines), false, false, &h4);
    bn_rng r;
    bn_rng_seed(&r, 3);
    float *logits = xmalloc(sizeof(float) * (size_t)nv), *ours = xmalloc(sizeof(float) * (size_t)nv),
          *theirs = xmalloc(sizeof(float) * (size_t)nv);
    for (int i = 0; i < nv; i++) logits[i] = (float)(8.0 * bn_rng_uniform(&r) - 4.0);
    int32_t nl_id = -1;
    {
        int32_t *t;
        if (bn_tokenize(tok, "\n", 1, false, false, &t) == 1) nl_id = t[0];
        free(t);
    }
    for (int h = 0; h < 4; h++) {
        const int32_t *hist = h == 0 ? h1 : h == 1 ? h2 : h == 2 ? h3 : h4;
        const int n_hist = h == 0 ? n1 : h == 1 ? n2 : h == 2 ? 400 : n4;
        int moved_any = 0;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            const dry_case *c = &cases[k];
            const bn_dry_breakers *b = c->breakers == 0 ? dflt : c->breakers == 1 ? NULL : mine;
            const char *const *bs = c->breakers == 0 ? dflt_strs : c->breakers == 1 ? NULL : custom;
            const int nb = c->breakers == 0 ? 4 : c->breakers == 1 ? 0 : 3;
            memcpy(ours, logits, sizeof(float) * (size_t)nv);
            bn_dry_apply(b, c->mult, c->base, c->allowed, c->last_n, hist, n_hist, ours, nv);
            // llama.cpp takes max(last_n, 0); llama-server maps -1 to the context size before that
            if (llama_ref_dry(ref, logits, hist, n_hist, c->mult, c->base, c->allowed, c->last_n < 0 ? n_hist : c->last_n,
                              bs, nb, theirs) != 0) {
                CHECK(0, "llama.cpp's dry sampler failed");
                continue;
            }
            double worst = 0;
            int moved = 0, moved_ref = 0;
            for (int i = 0; i < nv; i++) {
                worst = fmax(worst, fabs((double)ours[i] - theirs[i]) / fmax(1.0, fabs((double)theirs[i])));
                moved += ours[i] != logits[i];
                moved_ref += theirs[i] != logits[i];
            }
            printf("history %d, multiplier %.2f base %.2f allowed %d last_n %3d breakers %d: %d logits penalized "
                   "(llama.cpp %d), max rel diff %.2e\n",
                   h, c->mult, c->base, c->allowed, c->last_n, c->breakers, moved, moved_ref, worst);
            CHECK(worst <= 1e-6, "history %d case %zu: logits off llama.cpp's by %g (relative)", h, k, worst);
            CHECK(moved == moved_ref, "history %d case %zu: %d penalized, llama.cpp %d", h, k, moved, moved_ref);
            if (h == 3 && nl_id >= 0) // the line break extends the repeat: penalized only without breakers
                CHECK((ours[nl_id] != logits[nl_id]) == (c->breakers == 1), "history 3 case %zu: the line break %s",
                      k, ours[nl_id] != logits[nl_id] ? "penalized" : "not penalized");
            moved_any += moved;
        }
        CHECK(moved_any > 0, "history %d: some case penalizes something", h);
    }
    free(logits), free(ours), free(theirs);
    free(h1), free(h2), free(h4);
    bn_dry_breakers_free(dflt);
    bn_dry_breakers_free(mine);
    bn_tokenizer_free(tok);
    llama_ref_free(ref);
}
#endif

int main(void) {
    hand_worked();
#ifdef HAVE_LLAMA_REF
    against_llama();
#else
    printf("llama.cpp comparison skipped: built without the llama.cpp headers\n");
#endif
    return test_done("sampler-dry");
}
