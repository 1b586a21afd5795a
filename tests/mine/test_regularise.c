// tests/mine/test_regularise.c — regularisation (docs/antidoom.md §8): exact token counts after
// rejected flattening (derived by hand below), chosen flattening counts, headroom, source
// balancing, the single-token share cap, context de-duplication, determinism for a seed, report.
#include "tests/test.h"
#include "mine/regularise.h"
#include "eval/stats.h"
#include "base/util.h"
#include <jansson.h>
#include <string.h>

static void mk_row(bn_pair_row *r, int i, const char *rej, const char *src, int n_ch, const char *const *ch) {
    memset(r, 0, sizeof *r);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "context %d", i);
    r->context_before = xstrdup(ctx);
    r->rejected_token = xstrdup(rej);
    r->rejected_decoded = xstrdup(rej);
    r->source = xstrdup(src);
    r->source_prompt = xstrdup("p");
    r->rep.snippet = xstrdup("s");
    r->rep.period = 16;
    r->rep.repeats = 4;
    r->n_chosen = n_ch;
    r->chosen_tokens = xcalloc((size_t)n_ch + 1, sizeof(char *));
    r->chosen_decoded = xcalloc((size_t)n_ch + 1, sizeof(char *));
    for (int j = 0; j < n_ch; j++) {
        r->chosen_tokens[j] = xstrdup(ch[j]);
        r->chosen_decoded[j] = xstrdup(ch[j]);
    }
}

static int count_rej(const bn_pair_row *rows, int n, const char *tok) {
    int c = 0;
    for (int i = 0; i < n; i++) c += strcmp(rows[i].rejected_token, tok) == 0;
    return c;
}

static int count_src(const bn_pair_row *rows, int n, const char *src) {
    int c = 0;
    for (int i = 0; i < n; i++) c += strcmp(rows[i].source, src) == 0;
    return c;
}

int main(void) {
    const char *one[] = {" ok"};
    { // rejected flattening on 100 rows: ' the' 60, ' So' 20, 'Wait' 10, ' But' 5, five singletons.
      // counts sorted 1,1,1,1,1,5,10,20,60 -> median 1; w c = c^0.7 for c > 1: the 17.57, So 8.14,
      // Wait 5.01, But 3.09, singles 1 -> sum 38.81; rho: the .4527, So .2098, Wait .1292, But .0795,
      // single .0258. N = floor(0.7*100) = 70; caps round(rho*70): the 32, So 15, Wait 9, But 6 (5
      // available), singles 2 (1 available) -> pass 1 takes 66. Pass 2 picks max rho - seen/|sel|:
      // |sel| 66: Wait (-.0072), 67: So (-.0141 vs the -.0249), 68: the (-.0179 vs So -.0255),
      // 69: So (-.0221 vs the -.0256) -> the 33, So 17, Wait 10, But 5, singles 1.
        bn_pair_row pool[100];
        int k = 0;
        const char *toks[] = {" the", " So", "Wait", " But"};
        int counts[] = {60, 20, 10, 5};
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < counts[t]; j++, k++) mk_row(&pool[k], k, toks[t], k % 2 ? "a" : "b", 1, one);
        for (int j = 0; j < 5; j++, k++) {
            char s[16];
            snprintf(s, sizeof s, " x%d", j);
            mk_row(&pool[k], k, s, "a", 1, one);
        }
        bn_reg_params p = bn_reg_params_default();
        bn_pair_row *out = NULL;
        bn_reg_stats st;
        int n = bn_regularise(pool, 100, &p, &out, &st);
        CHECK(n == 70 && st.n_target == 70 && st.n_pool == 100, "N %d target %d", n, st.n_target);
        int c_the = count_rej(out, n, " the"), c_so = count_rej(out, n, " So"), c_wait = count_rej(out, n, "Wait"),
            c_but = count_rej(out, n, " But"), c_x0 = count_rej(out, n, " x0");
        CHECK(c_the == 33 && c_so == 17 && c_wait == 10 && c_but == 5 && c_x0 == 1, "counts the %d So %d Wait %d But %d x0 %d",
              c_the, c_so, c_wait, c_but, c_x0);
        // determinism: same seed -> same rows in the same order; another seed -> another order
        bn_pair_row *again = NULL;
        int n2 = bn_regularise(pool, 100, &p, &again, NULL);
        int same = n2 == n;
        for (int i = 0; same && i < n; i++) same = strcmp(out[i].context_before, again[i].context_before) == 0;
        CHECK(same, "same seed -> identical output");
        bn_pairs_free(again, n2);
        p.seed = 7;
        n2 = bn_regularise(pool, 100, &p, &again, NULL);
        int diff = 0;
        for (int i = 0; i < n && i < n2; i++) diff += strcmp(out[i].context_before, again[i].context_before) != 0;
        CHECK(n2 == 70 && diff > 0, "another seed -> another order (%d differ)", diff);
        CHECK(count_rej(again, n2, " the") == 33, "counts do not depend on the seed");
        bn_pairs_free(again, n2);
        // report
        FILE *f = tmpfile();
        bn_reg_print_top(f, pool, 100, 3, "pool");
        rewind(f);
        char buf[1024];
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = 0;
        fclose(f);
        CHECK(strstr(buf, "\" the\"") && strstr(buf, "60.00%") && strstr(buf, "20.00%") && !strstr(buf, " But"),
              "report:\n%s", buf);
        bn_pairs_free(out, n);
        // single-token share cap 0.25 without headroom: N = 100, ' the' <= 25
        p = bn_reg_params_default();
        p.headroom = 1.0;
        p.max_rejected_share = 0.25;
        n = bn_regularise(pool, 100, &p, &out, &st);
        CHECK(count_rej(out, n, " the") == 25 && n == 65, "share cap: the %d of %d (25 + all 40 others)",
              count_rej(out, n, " the"), n);
        bn_pairs_free(out, n);
        // max_rows below the headroom
        p = bn_reg_params_default();
        p.max_rows = 10;
        n = bn_regularise(pool, 100, &p, &out, &st);
        CHECK(n == 10 && st.n_target == 10, "max_rows 10 -> %d", n);
        bn_pairs_free(out, n);
        for (int i = 0; i < 100; i++) bn_pair_row_free(&pool[i]);
    }
    { // source balancing: one rejected token; sources a 80, b 20; N = 70
        bn_pair_row pool[100];
        for (int i = 0; i < 100; i++) mk_row(&pool[i], i, " t", i < 80 ? "a" : "b", 1, one);
        bn_reg_params p = bn_reg_params_default();
        bn_pair_row *out;
        int n = bn_regularise(pool, 100, &p, &out, NULL);
        int a = count_src(out, n, "a"), b = count_src(out, n, "b");
        CHECK(n == 70 && a == 56 && b == 14, "off: proportional a %d b %d", a, b);
        bn_pairs_free(out, n);
        CHECK(bn_balance_parse("equal", &p.balance) == 0 && bn_balance_parse("nope", &p.balance) == -1, "parse");
        p.balance = BN_BALANCE_EQUAL; // caps ceil(0.5*70) = 35 each; b has 20
        n = bn_regularise(pool, 100, &p, &out, NULL);
        a = count_src(out, n, "a"); b = count_src(out, n, "b");
        CHECK(n == 55 && a == 35 && b == 20, "equal: a %d b %d", a, b);
        bn_pairs_free(out, n);
        p.balance = BN_BALANCE_SQRT; // shares sqrt(80):sqrt(20) = 2/3:1/3 -> caps 47, 24
        n = bn_regularise(pool, 100, &p, &out, NULL);
        a = count_src(out, n, "a"); b = count_src(out, n, "b");
        CHECK(n == 67 && a == 47 && b == 20, "sqrt: a %d b %d", a, b);
        bn_pairs_free(out, n);
        // source label from source_task overrides source
        for (int i = 0; i < 100; i++) pool[i].extra = json_pack("{s:s}", "source_task", i < 50 ? "x" : "y");
        p.balance = BN_BALANCE_EQUAL; // x 50, y 50 -> caps 35 each
        n = bn_regularise(pool, 100, &p, &out, NULL);
        int ax = 0;
        for (int i = 0; i < n; i++) ax += strcmp(json_string_value(json_object_get(out[i].extra, "source_task")), "x") == 0;
        CHECK(n == 70 && ax == 35, "source_task label: x %d of %d", ax, n);
        bn_pairs_free(out, n);
        for (int i = 0; i < 100; i++) bn_pair_row_free(&pool[i]);
    }
    { // chosen flattening: 301 rows; ' So' in all (one row also has 'so', ' SO ' duplicates),
      // ' But' in 100, unique X_i in 250. ref = max(p95 = 1, 50) = 50. Keep round(c*sqrt(50/c)):
      // So 301 -> 123, But 100 -> 71; pruned 178 + 29 + 2 in-row duplicates = 209.
      // 34 rows hold only ' So'; those that lose it are dropped.
        bn_pair_row pool[301];
        for (int i = 0; i < 300; i++) {
            const char *ch[3];
            int m = 0;
            char x[16];
            snprintf(x, sizeof x, "X%d", i);
            ch[m++] = " So";
            if (i < 250) ch[m++] = x;
            if (i % 3 == 0) ch[m++] = " But";
            mk_row(&pool[i], i, " the", "a", m, ch);
        }
        const char *dup[] = {" So", "so", " SO ", "Z"};
        mk_row(&pool[300], 300, " the", "a", 4, dup);
        bn_reg_params p = bn_reg_params_default();
        p.headroom = 1.0;
        p.rejected_strength = 0;
        bn_pair_row *out;
        bn_reg_stats st;
        int n = bn_regularise(pool, 301, &p, &out, &st);
        int so = 0, but = 0, so_only_in = 0;
        for (int i = 250; i < 300; i++) so_only_in += i % 3 != 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < out[i].n_chosen; j++) {
                so += strcmp(out[i].chosen_decoded[j], " So") == 0 || strcmp(out[i].chosen_decoded[j], "so") == 0 ||
                      strcmp(out[i].chosen_decoded[j], " SO ") == 0;
                but += strcmp(out[i].chosen_decoded[j], " But") == 0;
            }
        CHECK(so_only_in == 34, "34 rows with only ' So'");
        CHECK(so == 123 && but == 71, "chosen flattening: So %d But %d", so, but);
        CHECK(st.n_chosen_pruned == 209, "pruned %d", st.n_chosen_pruned);
        CHECK(st.n_rows_no_chosen > 0 && st.n_rows_no_chosen <= 34 && n == 301 - st.n_rows_no_chosen,
              "rows dropped %d, out %d", st.n_rows_no_chosen, n);
        bn_pairs_free(out, n);
        for (int i = 0; i < 301; i++) bn_pair_row_free(&pool[i]);
    }
    { // identical contexts de-duplicated (text, or ids when present); first occurrence kept
        bn_pair_row pool[4];
        for (int i = 0; i < 4; i++) mk_row(&pool[i], i < 2 ? 0 : i, " t", "a", 1, one);
        free(pool[1].source);
        pool[1].source = xstrdup("second");
        pool[3].has_ids = pool[2].has_ids = true; // same ids, different text -> duplicates
        for (int i = 2; i < 4; i++) {
            pool[i].n_context = 2;
            pool[i].context_ids = xmalloc(8);
            pool[i].context_ids[0] = 1;
            pool[i].context_ids[1] = 2;
            pool[i].chosen_ids = xmalloc(4);
            pool[i].chosen_ids[0] = 9;
        }
        bn_reg_params p = bn_reg_params_default();
        p.headroom = 1;
        bn_pair_row *out;
        bn_reg_stats st;
        int n = bn_regularise(pool, 4, &p, &out, &st);
        CHECK(n == 2 && st.n_duplicates == 2, "dedupe: %d out, %d duplicates", n, st.n_duplicates);
        CHECK(count_src(out, n, "second") == 0, "first occurrence kept");
        bn_pairs_free(out, n);
        for (int i = 0; i < 4; i++) bn_pair_row_free(&pool[i]);
    }
    { // held-out split by prime phrase: 5 phrases x 2 rows, share 0.2 -> 1 phrase (2 rows) held out
        bn_pair_row pool[12];
        for (int i = 0; i < 12; i++) {
            mk_row(&pool[i], i, " t", "a", 1, one);
            if (i < 10) {
                char ph[32];
                snprintf(ph, sizeof ph, "phrase %d. ", i % 5);
                pool[i].prime_state = 2;
                pool[i].prime.phrase = xstrdup(ph);
                pool[i].prime.repeats = 3;
            }
        }
        int held = bn_split_heldout(pool, 10, 0.2, 3407);
        int same_group_ok = 1;
        for (int i = 0; i < 10; i++) same_group_ok &= !strcmp(pool[i].split, pool[(i + 5) % 10].split);
        CHECK(held == 2 && same_group_ok, "held %d, groups kept together %d", held, same_group_ok);
        char first[16];
        snprintf(first, sizeof first, "%s", pool[0].split);
        bn_split_heldout(pool, 10, 0.2, 3407);
        CHECK(!strcmp(first, pool[0].split), "deterministic for a seed");
        // unprimed rows group by source_prompt ("p" for both) -> 2 groups in 12 rows: the primed
        // phrases (5) + one prompt group = 6 groups; share 0.5 -> 3 groups held out
        held = bn_split_heldout(pool, 12, 0.5, 1);
        CHECK(!strcmp(pool[10].split, pool[11].split), "same prompt, same split");
        CHECK(held == 6, "3 of 6 groups x 2 rows held out (%d)", held);
        CHECK(bn_split_heldout(pool, 12, 0.0, 1) == 0, "share 0 -> nothing held out");
        for (int i = 0; i < 12; i++) bn_pair_row_free(&pool[i]);
    }
    { // helpers: median (even/odd) and numpy-style percentile
        double v[] = {5, 1, 3, 2};
        CHECK_NEAR(bn_median(v, 4), 2.5, 0, "median even");
        CHECK_NEAR(bn_median(v, 3), 3, 0, "median odd");
        CHECK_NEAR(bn_percentile(v, 4, 95), 4.7, 1e-12, "p95 of 1,2,3,5 = 3 + 0.85*2");
    }
    return test_done("test_regularise");
}
