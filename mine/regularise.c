// mine/regularise.c — docs/antidoom.md §8 (see regularise.h for the exact rules).
#include "mine/regularise.h"
#include "eval/stats.h"
#include "base/strmap.h"
#include "base/unicode.h"
#include "base/util.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bn_reg_params bn_reg_params_default(void) {
    bn_reg_params p = {.rejected_strength = 0.3, .chosen_strength = 0.5, .chosen_min_ref = 50,
                       .chosen_ref_percentile = 95, .balance = BN_BALANCE_OFF, .max_rows = 0, .headroom = 0.7,
                       .max_rejected_share = 0, .dedupe_contexts = true, .seed = 3407};
    return p;
}

int bn_balance_parse(const char *s, bn_balance_mode *mode) {
    if (!strcmp(s, "off")) *mode = BN_BALANCE_OFF;
    else if (!strcmp(s, "sqrt")) *mode = BN_BALANCE_SQRT;
    else if (!strcmp(s, "equal")) *mode = BN_BALANCE_EQUAL;
    else return -1;
    return 0;
}

// splitmix64: the seeded generator behind every random choice here.
static uint64_t rng_next(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(int *v, int n, uint64_t *st) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(st) % (uint64_t)(i + 1));
        int t = v[i]; v[i] = v[j]; v[j] = t;
    }
}

// ---- row keys -------------------------------------------------------------------------------

static const char *source_label(const bn_pair_row *r) {
    static const char *const keys[] = {"source_dataset", "source_task", "source_eval_key"};
    for (int k = 0; r->extra && k < 3; k++) {
        json_t *v = json_object_get(r->extra, keys[k]);
        if (json_is_string(v)) return json_string_value(v);
    }
    return r->source ? r->source : "";
}

// Context key bytes (malloc'd): ids when present, else the text.
static char *context_key(const bn_pair_row *r, size_t *len) {
    if (r->has_ids) {
        *len = 1 + (size_t)r->n_context * sizeof(int32_t);
        char *k = xmalloc(*len);
        k[0] = 'I';
        if (r->n_context) memcpy(k + 1, r->context_ids, (size_t)r->n_context * sizeof(int32_t));
        return k;
    }
    const char *c = r->context_before ? r->context_before : "";
    *len = 1 + strlen(c);
    char *k = xmalloc(*len + 1);
    k[0] = 'S';
    memcpy(k + 1, c, *len); // includes the NUL; len excludes it
    return k;
}

// Normalised chosen surface (strip + lower) as UTF-8 into a malloc'd string.
static char *norm_surface(const char *s, size_t *len) {
    size_t n = strlen(s);
    uint32_t *cp = xmalloc((n + 1) * sizeof *cp);
    bn_span sp = {cp, bn_utf8_to_cps(s, n, cp, NULL)};
    sp = bn_span_strip(sp, true, true);
    uint32_t *low = xmalloc((sp.n + 1) * sizeof *low);
    for (size_t i = 0; i < sp.n; i++) low[i] = bn_cp_lower(sp.p[i]);
    char *out = xmalloc(4 * sp.n + 1);
    *len = bn_cps_to_utf8(low, sp.n, out);
    free(cp);
    free(low);
    return out;
}

// Removes chosen entries whose keep[j] is 0, keeping the three parallel lists aligned.
static void prune_chosen(bn_pair_row *r, const unsigned char *keep) {
    int w = 0;
    for (int j = 0; j < r->n_chosen; j++) {
        if (!keep[j]) {
            free(r->chosen_tokens[j]);
            free(r->chosen_decoded[j]);
            continue;
        }
        r->chosen_tokens[w] = r->chosen_tokens[j];
        r->chosen_decoded[w] = r->chosen_decoded[j];
        if (r->has_ids) r->chosen_ids[w] = r->chosen_ids[j];
        w++;
    }
    r->n_chosen = w;
}

// ---- step 2: chosen flattening --------------------------------------------------------------

typedef struct { int row, entry; } occ;

// Prunes chosen entries of rows[0..n) in place; returns the number of rows kept (compacted).
static int chosen_flatten(bn_pair_row *rows, int n, const bn_reg_params *p, uint64_t *rng, bn_reg_stats *st) {
    bn_strmap tokens;
    bn_strmap_init(&tokens);
    int cap = 0, n_occ = 0;
    occ *occs = NULL;
    int *occ_tok = NULL;
    unsigned char **keep = xcalloc((size_t)n + 1, sizeof *keep);
    for (int i = 0; i < n; i++) {
        keep[i] = xcalloc((size_t)rows[i].n_chosen + 1, 1);
        bn_strmap seen;
        bn_strmap_init(&seen);
        for (int j = 0; j < rows[i].n_chosen; j++) {
            size_t len;
            char *key = norm_surface(rows[i].chosen_decoded[j], &len);
            int fresh;
            bn_strmap_get(&seen, key, len, &fresh);
            if (fresh) {
                keep[i][j] = 1;
                if (n_occ == cap) {
                    cap = cap ? 2 * cap : 256;
                    occs = xrealloc(occs, (size_t)cap * sizeof *occs);
                    occ_tok = xrealloc(occ_tok, (size_t)cap * sizeof *occ_tok);
                }
                occs[n_occ] = (occ){i, j};
                occ_tok[n_occ++] = bn_strmap_get(&tokens, key, len, NULL);
            } else {
                st->n_chosen_pruned++; // in-row duplicate
            }
            free(key);
        }
        bn_strmap_free(&seen);
    }
    int n_tok = tokens.n;
    double *count = xcalloc((size_t)n_tok + 1, sizeof *count);
    for (int k = 0; k < n_occ; k++) count[occ_tok[k]] += 1;
    double ref = bn_percentile(count, n_tok, p->chosen_ref_percentile);
    if (ref < p->chosen_min_ref) ref = p->chosen_min_ref;
    // For each over-represented token, keep a seeded choice of round(c * (ref/c)^s) occurrences.
    int *list = xmalloc((size_t)n_occ * sizeof *list + 1);
    for (int t = 0; t < n_tok; t++) {
        if (count[t] <= ref) continue;
        int m = 0;
        for (int k = 0; k < n_occ; k++)
            if (occ_tok[k] == t) list[m++] = k;
        int keep_n = (int)nearbyint(count[t] * pow(ref / count[t], p->chosen_strength));
        shuffle(list, m, rng);
        for (int k = keep_n; k < m; k++) {
            keep[occs[list[k]].row][occs[list[k]].entry] = 0;
            st->n_chosen_pruned++;
        }
    }
    int w = 0;
    for (int i = 0; i < n; i++) {
        int had = rows[i].n_chosen;
        prune_chosen(&rows[i], keep[i]);
        free(keep[i]);
        if (had > 0 && rows[i].n_chosen == 0) {
            bn_pair_row_free(&rows[i]);
            st->n_rows_no_chosen++;
            continue;
        }
        rows[w++] = rows[i];
    }
    free(keep); free(list); free(count); free(occs); free(occ_tok);
    bn_strmap_free(&tokens);
    return w;
}

// ---- step 4: rejected flattening + greedy bucket selection ----------------------------------

typedef struct {
    int tok, src;
    int *rows; // pool indices, seeded order
    int n, next;
} bucket;

// Selects up to N pool rows; writes their indices into sel; returns the count.
static int select_rows(const bn_pair_row *pool, int n_pool, int N, const bn_reg_params *p, uint64_t *rng, int *sel) {
    bn_strmap toks, srcs, bkeys;
    bn_strmap_init(&toks);
    bn_strmap_init(&srcs);
    bn_strmap_init(&bkeys);
    int *row_tok = xmalloc((size_t)n_pool * sizeof *row_tok + 1), *row_src = xmalloc((size_t)n_pool * sizeof *row_src + 1);
    for (int i = 0; i < n_pool; i++) {
        const char *t = pool[i].rejected_token ? pool[i].rejected_token : "";
        const char *s = source_label(&pool[i]);
        row_tok[i] = bn_strmap_get(&toks, t, strlen(t), NULL);
        row_src[i] = bn_strmap_get(&srcs, s, strlen(s), NULL);
    }
    int T = toks.n, S = srcs.n;
    double *c_tok = xcalloc((size_t)T + 1, sizeof *c_tok), *c_src = xcalloc((size_t)S + 1, sizeof *c_src);
    for (int i = 0; i < n_pool; i++) { c_tok[row_tok[i]]++; c_src[row_src[i]]++; }
    // token target shares rho_t and caps
    double med = bn_median(c_tok, T), wsum = 0;
    double *rho = xcalloc((size_t)T + 1, sizeof *rho);
    for (int t = 0; t < T; t++) {
        double w = c_tok[t] <= med ? 1.0 : pow(med / c_tok[t], p->rejected_strength);
        rho[t] = w * c_tok[t];
        wsum += rho[t];
    }
    int *cap_tok = xcalloc((size_t)T + 1, sizeof *cap_tok), *seen_tok = xcalloc((size_t)T + 1, sizeof *seen_tok);
    for (int t = 0; t < T; t++) {
        rho[t] /= wsum;
        cap_tok[t] = (int)nearbyint(rho[t] * N);
    }
    int share_cap = INT32_MAX;
    if (p->max_rejected_share > 0) {
        share_cap = (int)floor(p->max_rejected_share * N);
        if (share_cap < 1) share_cap = 1;
    }
    // source target shares and (when balancing) hard caps
    double *share_src = xcalloc((size_t)S + 1, sizeof *share_src), sq = 0;
    for (int s = 0; s < S; s++) sq += sqrt(c_src[s]);
    int *cap_src = xcalloc((size_t)S + 1, sizeof *cap_src), *seen_src = xcalloc((size_t)S + 1, sizeof *seen_src);
    for (int s = 0; s < S; s++) {
        share_src[s] = p->balance == BN_BALANCE_EQUAL ? 1.0 / S
                     : p->balance == BN_BALANCE_SQRT ? sqrt(c_src[s]) / sq : c_src[s] / n_pool;
        cap_src[s] = p->balance == BN_BALANCE_OFF ? INT32_MAX : (int)ceil(share_src[s] * N - 1e-9);
    }
    // (token, source) buckets in order of first appearance, rows shuffled per bucket
    bucket *b = xcalloc((size_t)n_pool + 1, sizeof *b);
    int *row_bucket = xmalloc((size_t)n_pool * sizeof *row_bucket + 1);
    for (int i = 0; i < n_pool; i++) {
        int key[2] = {row_tok[i], row_src[i]};
        int k = bn_strmap_get(&bkeys, key, sizeof key, NULL);
        row_bucket[i] = k;
        b[k].tok = row_tok[i];
        b[k].src = row_src[i];
        b[k].n++;
    }
    int B = bkeys.n;
    for (int k = 0; k < B; k++) { b[k].rows = xmalloc((size_t)b[k].n * sizeof(int)); b[k].n = 0; }
    for (int i = 0; i < n_pool; i++) b[row_bucket[i]].rows[b[row_bucket[i]].n++] = i;
    for (int k = 0; k < B; k++) shuffle(b[k].rows, b[k].n, rng);
    int n_sel = 0;
    for (int phase = 0; phase < 2 && n_sel < N; phase++) {
        while (n_sel < N) {
            int best = -1;
            double best1 = 0, best2 = 0, denom = n_sel > 0 ? n_sel : 1;
            for (int k = 0; k < B; k++) {
                int t = b[k].tok, s = b[k].src;
                if (b[k].next >= b[k].n || seen_tok[t] >= share_cap || seen_src[s] >= cap_src[s]) continue;
                if (phase == 0 && seen_tok[t] >= cap_tok[t]) continue;
                double k1 = rho[t] - seen_tok[t] / denom, k2 = share_src[s] - seen_src[s] / denom;
                if (best < 0 || k1 > best1 || (k1 == best1 && k2 > best2)) { best = k; best1 = k1; best2 = k2; }
            }
            if (best < 0) break;
            sel[n_sel++] = b[best].rows[b[best].next++];
            seen_tok[b[best].tok]++;
            seen_src[b[best].src]++;
        }
    }
    shuffle(sel, n_sel, rng);
    for (int k = 0; k < B; k++) free(b[k].rows);
    free(b); free(row_bucket); free(row_tok); free(row_src); free(c_tok); free(c_src); free(rho);
    free(cap_tok); free(seen_tok); free(share_src); free(cap_src); free(seen_src);
    bn_strmap_free(&toks); bn_strmap_free(&srcs); bn_strmap_free(&bkeys);
    return n_sel;
}

// ---- driver ---------------------------------------------------------------------------------

int bn_regularise(const bn_pair_row *rows, int n, const bn_reg_params *p, bn_pair_row **out, bn_reg_stats *st_out) {
    bn_reg_stats st = {.n_in = n};
    uint64_t rng = p->seed;
    // 1. de-duplicate identical contexts, copying the survivors
    bn_pair_row *work = xcalloc((size_t)n + 1, sizeof *work);
    int n_work = 0;
    bn_strmap ctx;
    bn_strmap_init(&ctx);
    for (int i = 0; i < n; i++) {
        if (p->dedupe_contexts) {
            size_t len;
            char *key = context_key(&rows[i], &len);
            int fresh;
            bn_strmap_get(&ctx, key, len, &fresh);
            free(key);
            if (!fresh) { st.n_duplicates++; continue; }
        }
        bn_pair_row_copy(&work[n_work++], &rows[i]);
    }
    bn_strmap_free(&ctx);
    // 2. chosen flattening
    if (p->chosen_strength > 0) n_work = chosen_flatten(work, n_work, p, &rng, &st);
    // 3. headroom
    st.n_pool = n_work;
    int N = p->max_rows > 0 && p->max_rows < n_work ? p->max_rows : n_work;
    if (p->headroom > 0 && p->headroom < 1) {
        int room = (int)floor(p->headroom * n_work + 1e-9);
        if (N > room) N = room;
    }
    st.n_target = N;
    // 4. rejected flattening and selection
    int *sel = xmalloc(((size_t)N + 1) * sizeof *sel);
    int n_sel = select_rows(work, n_work, N, p, &rng, sel);
    bn_pair_row *res = xcalloc((size_t)n_sel + 1, sizeof *res);
    unsigned char *taken = xcalloc((size_t)n_work + 1, 1);
    for (int k = 0; k < n_sel; k++) {
        res[k] = work[sel[k]]; // move
        taken[sel[k]] = 1;
    }
    for (int i = 0; i < n_work; i++)
        if (!taken[i]) bn_pair_row_free(&work[i]);
    free(taken);
    free(work);
    free(sel);
    st.n_out = n_sel;
    if (st_out) *st_out = st;
    *out = res;
    return n_sel;
}

int bn_split_heldout(bn_pair_row *rows, int n, double share, uint64_t seed) {
    bn_strmap groups;
    bn_strmap_init(&groups);
    int *row_group = xmalloc((size_t)n * sizeof *row_group + 1);
    for (int i = 0; i < n; i++) {
        const char *g = rows[i].prime_state == 2 && rows[i].prime.phrase ? rows[i].prime.phrase
                      : rows[i].source_prompt ? rows[i].source_prompt : "";
        char tag = rows[i].prime_state == 2 ? 'P' : 'S';
        size_t len = strlen(g);
        char *key = xmalloc(len + 2);
        key[0] = tag;
        memcpy(key + 1, g, len + 1);
        row_group[i] = bn_strmap_get(&groups, key, len + 1, NULL);
        free(key);
    }
    int G = groups.n;
    int n_held = (int)nearbyint(share * G);
    if (share > 0 && G >= 2 && n_held < 1) n_held = 1;
    if (n_held > G) n_held = G;
    int *order = xmalloc((size_t)G * sizeof *order + 1);
    for (int g = 0; g < G; g++) order[g] = g;
    uint64_t rng = seed;
    shuffle(order, G, &rng);
    unsigned char *held = xcalloc((size_t)G + 1, 1);
    for (int k = 0; k < n_held; k++) held[order[k]] = 1;
    int n_rows_held = 0;
    for (int i = 0; i < n; i++) {
        free(rows[i].split);
        rows[i].split = xstrdup(held[row_group[i]] ? "heldout" : "train");
        n_rows_held += held[row_group[i]];
    }
    free(order);
    free(held);
    free(row_group);
    bn_strmap_free(&groups);
    return n_rows_held;
}

// ---- report ---------------------------------------------------------------------------------

typedef struct { int idx; int count; } tok_count;

static int by_count_desc(const void *a, const void *b) {
    const tok_count *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return x->idx - y->idx;
}

void bn_reg_print_top(FILE *f, const bn_pair_row *rows, int n, int top, const char *title) {
    bn_strmap toks;
    bn_strmap_init(&toks);
    int *first_row = xmalloc((size_t)n * sizeof *first_row + 1);
    tok_count *c = xcalloc((size_t)n + 1, sizeof *c);
    for (int i = 0; i < n; i++) {
        const char *t = rows[i].rejected_token ? rows[i].rejected_token : "";
        int fresh;
        int k = bn_strmap_get(&toks, t, strlen(t), &fresh);
        if (fresh) { first_row[k] = i; c[k].idx = k; }
        c[k].count++;
    }
    qsort(c, (size_t)toks.n, sizeof *c, by_count_desc);
    fprintf(f, "%s: %d rows, %d distinct rejected tokens\n", title, n, toks.n);
    for (int k = 0; k < toks.n && k < top; k++) {
        const bn_pair_row *r = &rows[first_row[c[k].idx]];
        json_t *s = json_string(r->rejected_decoded ? r->rejected_decoded : "");
        char *shown = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        fprintf(f, "  %-24s %6.2f%%  (%d)\n", shown ? shown : "?", 100.0 * c[k].count / n, c[k].count);
        free(shown);
        json_decref(s);
    }
    free(first_row);
    free(c);
    bn_strmap_free(&toks);
}

void bn_reg_print_stats(FILE *f, const bn_reg_params *p, const bn_reg_stats *st) {
    fprintf(f, "regularise: %d rows in -> %d rows out\n", st->n_in, st->n_out);
    fprintf(f, "  %d dropped as identical contexts%s; chosen flattening (strength %g) pruned %d chosen entries and "
               "dropped %d rows left without one; %d rows in the pool\n",
            st->n_duplicates, p->dedupe_contexts ? "" : " (--no-dedupe)", p->chosen_strength, st->n_chosen_pruned,
            st->n_rows_no_chosen, st->n_pool);
    if (p->headroom < 1 && (p->max_rows <= 0 || (int)(p->headroom * st->n_pool) <= p->max_rows))
        fprintf(f, "  target N = %d = floor(headroom %g x pool %d): the headroom rule keeps %.0f%% of the pool so the "
                   "rejected-token flattening has room to choose (--headroom 1 keeps all)\n",
                st->n_target, p->headroom, st->n_pool, 100 * p->headroom);
    else if (p->max_rows > 0 && p->max_rows < st->n_pool)
        fprintf(f, "  target N = %d: --max-rows\n", st->n_target);
    else fprintf(f, "  target N = %d: the whole pool (headroom %g)\n", st->n_target, p->headroom);
    if (st->n_out < st->n_target)
        fprintf(f, "  %d rows short of N: the rejected-token caps (strength %g%s) left too few rows\n",
                st->n_target - st->n_out, p->rejected_strength,
                p->max_rejected_share > 0 ? ", --max-rejected-share" : "");
}
