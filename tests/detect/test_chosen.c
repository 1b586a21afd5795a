// tests/detect/test_chosen.c — chosen-token selection (docs/antidoom.md §6): temperature renorm
// (tolerance 1e-12 against a direct softmax), case variants dropped but leading-space variants
// kept, relative min-p, top-k, ascending order, surface filters, the cap of 20, empty -> no row.
#include "tests/test.h"
#include "detect/chosen.h"
#include <string.h>

// A toy vocabulary: decoded surfaces and "raw" engine strings (space shown as 'Ġ' bytes).
static const char *dec_tab[64] = {
    [1] = " Wait", [2] = " wait", [3] = " WAIT", [4] = "Wait", [5] = " So", [6] = " ", [7] = "<|im_end|>",
    [8] = ".", [9] = " But", [10] = "\n", [11] = " Hmm", [12] = " x",
};
static char gen_buf[64][16];

static const char *dec(void *ctx, int32_t id, size_t *len) {
    const char *s = dec_tab[id];
    if (!s) { snprintf(gen_buf[id], sizeof gen_buf[id], " t%d", id); s = gen_buf[id]; }
    *len = strlen(s);
    return s;
}

static char raw_buf[64][32];
static const char *raw(void *ctx, int32_t id, size_t *len) {
    size_t n;
    const char *d = dec(ctx, id, &n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] == ' ') { raw_buf[id][k++] = (char)0xC4; raw_buf[id][k++] = (char)0xA0; }
        else raw_buf[id][k++] = d[i];
    }
    raw_buf[id][k] = 0;
    *len = k;
    return raw_buf[id];
}

int main(void) {
    bn_tok_strs ts = {dec, raw, NULL};
    int32_t ids[64];
    double p[64];
    { // renormalisation and case variants: rejected " Wait" (1)
        bn_topk L[] = {{1, -0.05}, {2, -3.0}, {3, -4.0}, {4, -2.0}, {5, -2.5}, {9, -5.0}};
        int n = 6;
        bn_chosen_params prm = bn_chosen_params_default(0.5);
        int k = bn_select_chosen(L, n, 1, &prm, &ts, ids, p, 64);
        // " wait" and " WAIT" are case variants; "Wait" (no space) is kept.
        CHECK(k == 3, "count %d (expected 3)", k);
        CHECK(k == 3 && ids[0] == 9 && ids[1] == 5 && ids[2] == 4, "ascending order: %d %d %d", ids[0], ids[1], ids[2]);
        double z = 0;
        for (int i = 0; i < n; i++) z += exp(L[i].logprob / 0.5);
        CHECK_NEAR(p[0], exp(-5.0 / 0.5) / z, 1e-12, "p(' But')");
        CHECK_NEAR(p[2], exp(-2.0 / 0.5) / z, 1e-12, "p('Wait')");
    }
    { // temperature floor: T = 0 -> 1e-6, no NaN; the near-tie survives with a finite probability
        bn_topk L[] = {{1, -0.1}, {5, -0.1000001}, {9, -9.0}};
        bn_chosen_params prm = bn_chosen_params_default(0.0);
        int k = bn_select_chosen(L, 3, 1, &prm, &ts, ids, p, 64);
        CHECK(k == 2 && ids[1] == 5 && isfinite(p[0]) && isfinite(p[1]), "T floor: k %d", k);
        CHECK_NEAR(p[1], 1.0 / (1.0 + exp(0.0000001 / 1e-6)), 1e-9, "near tie at T=1e-6: softmax of lp/1e-6");
        CHECK(p[0] == 0.0, "far token underflows to 0 at T=1e-6 (%g)", p[0]);
    }
    { // relative min-p over the remaining candidates
        bn_topk L[] = {{1, -0.01}, {5, -1.0}, {9, -1.0 - log(50.0)}, {11, -1.0 - log(200.0)}};
        bn_chosen_params prm = bn_chosen_params_default(1.0);
        prm.min_p = 0.01; // keep p >= 0.01 * p(' So'): ' But' (1/50) stays, ' Hmm' (1/200) goes
        int k = bn_select_chosen(L, 4, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 2 && ids[0] == 9 && ids[1] == 5, "min-p: k %d", k);
        prm.min_p = 0; // off (shipped)
        k = bn_select_chosen(L, 4, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 3 && ids[0] == 11, "min-p off: k %d", k);
    }
    { // surface filters: whitespace-only, raw substrings, require_alnum, min_decoded_chars
        bn_topk L[] = {{1, -0.1}, {6, -1.0}, {7, -1.5}, {8, -2.0}, {10, -2.2}, {5, -2.5}, {12, -3.0}};
        bn_chosen_params prm = bn_chosen_params_default(1.0);
        int k = bn_select_chosen(L, 7, 1, &prm, &ts, ids, NULL, 64);
        // ' ' and '\n' drop (strip -> 0 chars < 1): x, So, ., <|im_end|> remain (ascending)
        CHECK(k == 4 && ids[0] == 12 && ids[1] == 5 && ids[2] == 8 && ids[3] == 7, "default filters: k %d", k);
        const char *skip[] = {"<|"};
        prm.skip_raw_substrings = skip;
        prm.n_skip_raw = 1;
        k = bn_select_chosen(L, 7, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 3 && ids[2] == 8, "raw substring '<|' skipped: k %d", k);
        const char *skip_raw_space[] = {"\xc4\xa0"}; // 'Ġ' appears only in raw strings
        prm.skip_raw_substrings = skip_raw_space;
        k = bn_select_chosen(L, 7, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 2 && ids[0] == 8 && ids[1] == 7, "raw 'Ġ' substring skipped: k %d", k);
        prm.n_skip_raw = 0;
        prm.require_alnum = true;
        k = bn_select_chosen(L, 7, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 3 && ids[0] == 12 && ids[1] == 5 && ids[2] == 7, "require_alnum drops '.': k %d", k);
        prm.require_alnum = false;
        prm.min_decoded_chars = 2;
        k = bn_select_chosen(L, 7, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 2 && ids[0] == 5 && ids[1] == 7, "min_decoded_chars 2: k %d", k);
    }
    { // top-k and the cap of 20: 31 candidates with distinct probabilities
        bn_topk L[32];
        L[0] = (bn_topk){1, -0.01};
        for (int i = 1; i < 32; i++) L[i] = (bn_topk){20 + i, -0.5 - 0.1 * i}; // id 21 most probable
        bn_chosen_params prm = bn_chosen_params_default(1.0);
        int k = bn_select_chosen(L, 32, 1, &prm, &ts, ids, p, 64);
        // ascending: the 20 LEAST probable come first and fill the cap: ids 51, 50, ..., 32
        CHECK(k == 20 && ids[0] == 51 && ids[19] == 32, "cap 20: k %d first %d last %d", k, ids[0], ids[19]);
        int ascending = 1;
        for (int i = 1; i < k; i++) ascending &= p[i] >= p[i - 1];
        CHECK(ascending, "ascending probabilities");
        prm.top_k = 5; // the 5 most probable: 21..25, reported ascending
        k = bn_select_chosen(L, 32, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 5 && ids[0] == 25 && ids[4] == 21, "top_k 5: k %d first %d", k, ids[0]);
        prm = bn_chosen_params_default(1.0);
        prm.max_tokens = 3;
        k = bn_select_chosen(L, 32, 1, &prm, &ts, ids, NULL, 64);
        CHECK(k == 3 && ids[0] == 51, "max_tokens 3: k %d", k);
    }
    { // nothing survives -> 0 (no row)
        bn_topk L[] = {{1, -0.1}, {2, -1.0}, {3, -2.0}, {6, -3.0}};
        bn_chosen_params prm = bn_chosen_params_default(0.1);
        CHECK(bn_select_chosen(L, 4, 1, &prm, &ts, ids, p, 64) == 0, "empty -> no row");
        CHECK(bn_select_chosen(L, 0, 1, &prm, &ts, ids, p, 64) == 0, "empty list -> no row");
    }
    return test_done("test_chosen");
}
