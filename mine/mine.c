// mine/mine.c — the per-prompt mining pipeline (see mine.h).
#include "mine/mine.h"
#include "detect/localise.h"
#include "detect/toktext.h"
#include "core/chat.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

bn_mine_params bn_mine_params_default(void) {
    bn_mine_params p = {.mode = BN_MINE_SAMPLE, .gen = bn_gen_params_default(), .rep = bn_rep_params_default(),
                        .frame = bn_frame_params_default(),
                        .chosen = bn_chosen_params_default(0.1), .thinking = 1, .system = NULL,
                        .prime_phrase = BN_DEFAULT_PRIME_PHRASE, .prime_repeats = 3, .prime_prefix_tokens = 48,
                        .max_prompt_tokens = 2000};
    return p;
}

// ---- token strings --------------------------------------------------------------------------

typedef struct {
    const bn_tokenizer *tok;
    char buf[2][512];
} tokstr_ctx;

// Piece of id (no control text) into a malloc'd string; *len = bytes.
static char *piece_dup(const bn_tokenizer *tok, int32_t id, size_t *len) {
    char small[256];
    int n = bn_token_to_piece(tok, id, small, sizeof small, false);
    char *out;
    if (n >= 0) {
        out = xmalloc((size_t)n + 1);
        memcpy(out, small, (size_t)n);
    } else {
        out = xmalloc((size_t)(-n) + 1);
        n = bn_token_to_piece(tok, id, out, -n, false);
    }
    out[n] = 0;
    *len = (size_t)n;
    return out;
}

static const char *cb_decoded(void *vctx, int32_t id, size_t *len) {
    tokstr_ctx *c = vctx;
    int n = bn_token_to_piece(c->tok, id, c->buf[0], sizeof c->buf[0] - 1, false);
    if (n < 0) n = 0;
    c->buf[0][n] = 0;
    *len = (size_t)n;
    return c->buf[0];
}

static const char *cb_raw(void *vctx, int32_t id, size_t *len) {
    tokstr_ctx *c = vctx;
    const char *t = bn_token_text(c->tok, id);
    if (!t) t = "";
    *len = strlen(t);
    return t;
}

// ---- pieces of the pipeline -----------------------------------------------------------------

// Renders the chat prompt; returns the malloc'd text or NULL (err).
static char *render_prompt(const bn_prompt *p, const bn_mine_params *mp, char *err, size_t errlen) {
    bn_chat_msg *msgs = xcalloc((size_t)p->n_msgs + 2, sizeof *msgs);
    int n = 0;
    bool has_system = p->n_msgs > 0 && !strcmp(p->msgs[0].role, "system");
    if (mp->system && mp->system[0] && !has_system) msgs[n++] = (bn_chat_msg){"system", mp->system, NULL};
    for (int i = 0; i < p->n_msgs; i++) msgs[n++] = (bn_chat_msg){p->msgs[i].role, p->msgs[i].content, NULL};
    char *text = bn_chat_render(msgs, n, true, mp->thinking);
    free(msgs);
    if (!text) bn_err(err, errlen, "chat template rejected the messages (line %d)", p->line);
    return text;
}

// Renders and tokenizes p; when it has more than max_prompt_tokens tokens, keeps only the head of
// the last user turn so that it fits (*trimmed set). Returns the token count or -1 (err).
static int render_fit(const bn_prompt *p, const bn_mine_params *mp, const bn_tokenizer *tok, char **text,
                      int32_t **ids, bool *trimmed, char *err, size_t errlen) {
    *trimmed = false;
    *ids = NULL;
    if (!(*text = render_prompt(p, mp, err, errlen))) return -1;
    int n = bn_tokenize(tok, *text, strlen(*text), false, true, ids);
    if (n < 0) return bn_err(err, errlen, "tokenizing prompt line %d failed", p->line);
    int u = p->n_msgs - 1; // the last turn is a user turn (prompts.h)
    int32_t *cids = NULL;
    int nc = bn_tokenize(tok, p->msgs[u].content, strlen(p->msgs[u].content), false, false, &cids);
    int keep = nc;
    for (int round = 0; mp->max_prompt_tokens > 0 && n > mp->max_prompt_tokens && round < 8; round++) {
        keep -= n - mp->max_prompt_tokens;
        if (keep < 1) {
            free(cids);
            return bn_err(err, errlen, "prompt line %d does not fit %d tokens even with its user turn cut", p->line,
                          mp->max_prompt_tokens);
        }
        bn_prompt cut = *p;
        cut.msgs = xmalloc((size_t)p->n_msgs * sizeof *cut.msgs);
        memcpy(cut.msgs, p->msgs, (size_t)p->n_msgs * sizeof *cut.msgs);
        char *head = bn_detokenize(tok, cids, keep, false, NULL);
        cut.msgs[u].content = head;
        free(*text);
        free(*ids);
        *ids = NULL;
        *text = render_prompt(&cut, mp, err, errlen);
        free(head);
        free(cut.msgs);
        if (!*text) { free(cids); return -1; }
        n = bn_tokenize(tok, *text, strlen(*text), false, true, ids);
        *trimmed = true;
    }
    free(cids);
    if (mp->max_prompt_tokens > 0 && n > mp->max_prompt_tokens)
        return bn_err(err, errlen, "prompt line %d: trimming did not converge", p->line);
    return n;
}

// Appends ids to a growing array.
static void append_ids(int32_t **v, int *n, const int32_t *ids, int k) {
    *v = xrealloc(*v, ((size_t)*n + (size_t)k + 1) * sizeof **v);
    memcpy(*v + *n, ids, (size_t)k * sizeof *ids);
    *n += k;
}

// The last sentence of text[0..len) (which ends at a sentence end) when it has 20-200 code points,
// as a malloc'd phrase (a space appended unless it ends in a newline); NULL otherwise.
static char *last_sentence(const char *text, size_t len) {
    size_t e = len;
    while (e > 0 && text[e - 1] == ' ') e--;
    if (e < 2) return NULL;
    size_t b = e - 1;
    while (b > 0 && !strchr(".!?\n", text[b - 1])) b--;
    while (b < e && (text[b] == ' ' || text[b] == '\n')) b++;
    uint32_t *cp = xmalloc((e - b + 1) * sizeof *cp);
    size_t n_cp = bn_utf8_to_cps(text + b, e - b, cp, NULL);
    free(cp);
    if (n_cp < 20 || n_cp > 200) return NULL;
    char *ph = xmalloc(e - b + 2);
    memcpy(ph, text + b, e - b);
    size_t k = e - b;
    if (text[e - 1] != '\n') ph[k++] = ' ';
    ph[k] = 0;
    return ph;
}

// Prime mode: appends the greedy prefix (cut at a sentence end) and the repeated phrase to ctx;
// with phrase_from_prefix the phrase is the prefix's last sentence when it has 20-200 chars
// (*phrase_owned then holds it and mp->prime_phrase is updated to point at it).
static int build_primed(bn_source *src, const bn_tokenizer *tok, bn_mine_params *mp, int32_t **ctx, int *n_ctx,
                        int64_t *prefix_chars, char **prefix_text, char **phrase_owned, char *err, size_t errlen) {
    bn_gen_params g = mp->gen;
    g.temperature = 0;
    g.n_predict = mp->prime_prefix_tokens;
    g.n_probs = 0;
    bn_gen_result pre;
    if (src->generate(src, *ctx, *n_ctx, &g, &pre, err, errlen) < 0) return -1;
    // cut after the last token whose text ends a sentence
    int cut = 0;
    size_t text_len = 0;
    char *text = xmalloc(1);
    text[0] = 0;
    size_t cut_len = 0;
    for (int i = 0; i < pre.n; i++) {
        size_t len;
        char *pc = piece_dup(tok, pre.ids[i], &len);
        text = xrealloc(text, text_len + len + 1);
        memcpy(text + text_len, pc, len);
        text_len += len;
        text[text_len] = 0;
        free(pc);
        size_t e = text_len;
        while (e > 0 && text[e - 1] == ' ') e--;
        if (e > 0 && strchr(".!?\n", text[e - 1])) { cut = i + 1; cut_len = text_len; }
    }
    text[cut_len] = 0;
    append_ids(ctx, n_ctx, pre.ids, cut);
    bn_gen_result_free(&pre);
    uint32_t *cp = xmalloc((cut_len + 1) * sizeof *cp);
    *prefix_chars = (int64_t)bn_utf8_to_cps(text, cut_len, cp, NULL);
    free(cp);
    // " " (if needed) + phrase x repeats
    if (mp->phrase_from_prefix && (*phrase_owned = last_sentence(text, cut_len))) mp->prime_phrase = *phrase_owned;
    const char *phrase = mp->prime_phrase ? mp->prime_phrase : BN_DEFAULT_PRIME_PHRASE;
    size_t plen = strlen(phrase);
    char *rep = xmalloc(plen * (size_t)mp->prime_repeats + 2);
    size_t k = 0;
    if (cut_len > 0 && text[cut_len - 1] != ' ' && text[cut_len - 1] != '\n') rep[k++] = ' ';
    for (int i = 0; i < mp->prime_repeats; i++) { memcpy(rep + k, phrase, plen); k += plen; }
    int32_t *ids = NULL;
    int n = bn_tokenize(tok, rep, k, false, false, &ids);
    free(rep);
    if (n < 0) { free(text); return bn_err(err, errlen, "tokenizing the prime phrase failed"); }
    append_ids(ctx, n_ctx, ids, n);
    free(ids);
    *prefix_text = text;
    return 0;
}

static char *dup_str(const char *s) { return s ? xstrdup(s) : NULL; }

// Fills the pair row for a localised target; returns false when no chosen token survives.
static bool make_pair(const bn_tokenizer *tok, const bn_prompt *p, const bn_mine_params *mp, const char *endpoint,
                      const int32_t *ctx, int n_ctx, const bn_gen_result *g, int target, const bn_rep_hit *hit,
                      int64_t prefix_chars, bn_pair_row *row) {
    tokstr_ctx tc = {.tok = tok};
    bn_tok_strs ts = {cb_decoded, cb_raw, &tc};
    const bn_topk *L = g->topk + (size_t)target * g->k;
    int nL = 0;
    while (nL < g->k && L[nL].id >= 0) nL++;
    bn_chosen_params cp = mp->chosen;
    cp.temperature = mp->gen.temperature;
    int32_t chosen[64];
    int n_ch = bn_select_chosen(L, nL, g->ids[target], &cp, &ts, chosen, NULL, 64);
    if (n_ch == 0) return false;
    memset(row, 0, sizeof *row);
    row->has_ids = true;
    row->n_context = n_ctx + target;
    row->context_ids = xmalloc(((size_t)row->n_context + 1) * sizeof(int32_t));
    memcpy(row->context_ids, ctx, (size_t)n_ctx * sizeof *ctx);
    memcpy(row->context_ids + n_ctx, g->ids, (size_t)target * sizeof *ctx);
    row->context_before = bn_detokenize(tok, row->context_ids, row->n_context, true, NULL);
    int32_t rej = g->ids[target];
    size_t len;
    row->rejected_id = rej;
    row->rejected_token = xstrdup(cb_raw(&tc, rej, &len));
    row->rejected_decoded = piece_dup(tok, rej, &len);
    row->n_chosen = n_ch;
    row->chosen_ids = xmalloc((size_t)n_ch * sizeof(int32_t));
    row->chosen_tokens = xcalloc((size_t)n_ch + 1, sizeof(char *));
    row->chosen_decoded = xcalloc((size_t)n_ch + 1, sizeof(char *));
    for (int i = 0; i < n_ch; i++) {
        row->chosen_ids[i] = chosen[i];
        row->chosen_tokens[i] = xstrdup(cb_raw(&tc, chosen[i], &len));
        row->chosen_decoded[i] = piece_dup(tok, chosen[i], &len);
    }
    row->source = xstrdup(p->source ? p->source : "");
    row->source_prompt = xstrdup(bn_prompt_user_text(p));
    row->rep = (bn_pair_rep){hit->start, hit->repeat_start, target, hit->period, hit->repeats, xstrdup(hit->snippet)};
    row->has_rejected_logprob = true;
    row->rejected_logprob = g->logprob[target];
    row->has_topk = true;
    row->n_topk = nL;
    row->topk = xmalloc(((size_t)nL + 1) * sizeof *row->topk);
    memcpy(row->topk, L, (size_t)nL * sizeof *L);
    row->has_gen = true;
    row->gen = (bn_pair_gen){.temperature = mp->gen.temperature, .top_p = mp->gen.top_p, .min_p = mp->gen.min_p,
                             .top_k = mp->gen.top_k, .n_probs = mp->gen.n_probs, .seed = (int64_t)mp->gen.seed,
                             .endpoint = dup_str(endpoint), .model_file = dup_str(mp->model_file),
                             .model_sha256 = dup_str(mp->model_sha256), .file_type = dup_str(mp->file_type)};
    if (mp->mode == BN_MINE_PRIME) {
        row->prime_state = 2;
        row->prime = (bn_pair_prime){.phrase = dup_str(mp->prime_phrase), .repeats = mp->prime_repeats,
                                     .prefix_chars = prefix_chars,
                                     .scan_mode = xstrdup(mp->scan_assistant ? "assistant" : "completion")};
    } else {
        row->prime_state = 1;
    }
    row->split = dup_str(mp->split);
    return true;
}

// detect_loops: both detectors over the scanned text tt (its tokens: primed[0..n_primed) then g's ids); fills r's
// flags, and *hit with the loop that mining localises when r->looped. A loop must reach into the completion: repeats
// inside the primed text alone do not count.
static void detect_loops(const bn_toktext *tt, const int32_t *primed, int n_primed, const bn_gen_result *g,
                         const bn_mine_params *mp, bn_mine_result *r, bn_rep_hit *hit) {
    size_t primed_chars = tt->off[n_primed];
    r->loop_verbatim = bn_find_repetition(tt->cp, tt->n_cp, &mp->rep, hit) == 1 && (size_t)hit->end > primed_chars;
    int n_scan = n_primed + g->n;
    int32_t *ids = xmalloc(((size_t)n_scan + 1) * sizeof *ids);
    memcpy(ids, primed, (size_t)n_primed * sizeof *ids);
    memcpy(ids + n_primed, g->ids, (size_t)g->n * sizeof *ids);
    bn_frame_hit fh;
    r->loop_frame = bn_find_frame_loop(ids, (size_t)n_scan, &mp->frame, &fh) == 1 && fh.end > n_primed;
    free(ids);
    bool use_frame = mp->detect == BN_DETECT_FRAME || (mp->detect == BN_DETECT_BOTH && !r->loop_verbatim);
    r->looped = use_frame ? r->loop_frame : r->loop_verbatim;
    if (r->looped && use_frame) *hit = bn_frame_rep_hit(tt, &fh);
}

int bn_mine_one(bn_source *src, const bn_tokenizer *tok, const bn_prompt *p, int prompt_index,
                const bn_mine_params *mp_in, bn_mine_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    bn_mine_params local = *mp_in, *mp = &local; // priming may pick the phrase per prompt
    char *phrase_owned = NULL;
    char *prompt_text = NULL;
    int32_t *ctx = NULL;
    bool trimmed;
    int n_ctx = render_fit(p, mp, tok, &prompt_text, &ctx, &trimmed, err, errlen);
    if (n_ctx < 0) { free(prompt_text); free(ctx); return -1; }
    int n_prompt = n_ctx; // the chat prompt alone (priming appends to ctx)
    int64_t prefix_chars = 0;
    char *prefix_text = NULL;
    if (mp->mode == BN_MINE_PRIME &&
        build_primed(src, tok, mp, &ctx, &n_ctx, &prefix_chars, &prefix_text, &phrase_owned, err, errlen) < 0) {
        free(ctx); free(prompt_text);
        return -1;
    }
    bn_gen_result g;
    if (src->generate(src, ctx, n_ctx, &mp->gen, &g, err, errlen) < 0) {
        free(ctx); free(prompt_text); free(prefix_text); free(phrase_owned);
        return -1;
    }
    // token text of what is scanned (the completion; in assistant-scan mode also the primed
    // assistant text before it) and the detector on it
    int n_primed = mp->mode == BN_MINE_PRIME && mp->scan_assistant ? n_ctx - n_prompt : 0;
    int n_scan = n_primed + g.n;
    char **surf = xcalloc((size_t)n_scan + 1, sizeof *surf);
    size_t *lens = xcalloc((size_t)n_scan + 1, sizeof *lens);
    for (int i = 0; i < n_scan; i++)
        surf[i] = piece_dup(tok, i < n_primed ? ctx[n_prompt + i] : g.ids[i - n_primed], &lens[i]);
    bn_toktext tt;
    bn_toktext_build(&tt, (const char *const *)surf, lens, n_scan);
    size_t primed_chars = tt.off[n_primed];
    bn_rep_hit hit;
    detect_loops(&tt, ctx + n_prompt, n_primed, &g, mp, r, &hit);
    r->hit_limit = g.hit_limit;
    r->n_generated = g.n;
    if (r->looped) {
        int target = bn_localise(&tt, &hit, NULL);
        // onset inside the primed text: the rejected token is the first generated one (it continues the loop)
        int target_gen = target < 0 ? -1 : target < n_primed ? 0 : target - n_primed;
        if (target_gen >= 0 && target_gen < g.n)
            r->has_pair = make_pair(tok, p, mp, src->endpoint, ctx, n_ctx, &g, target_gen, &hit, prefix_chars, &r->pair);
        if (r->has_pair) r->pair.extra = json_pack("{s:i}", "prompt_index", prompt_index);
        if (r->has_pair && trimmed) {
            const char *orig = r->pair.source_prompt;
            char *marked = xmalloc(strlen(orig) + 32);
            sprintf(marked, "[TRIMMED_SOURCE_PROMPT]%s", orig);
            free(r->pair.source_prompt);
            r->pair.source_prompt = marked;
        }
    }
    // the generation-log row
    char *completion = xmalloc(4 * (tt.n_cp - primed_chars) + 1);
    bn_cps_to_utf8(tt.cp + primed_chars, tt.n_cp - primed_chars, completion);
    r->gen.source = xstrdup(p->source ? p->source : "");
    r->gen.prompt = prompt_text;
    r->gen.completion = completion;
    r->gen.status = xstrdup(r->looped ? "loop_detected" : mp->mode == BN_MINE_PRIME ? "escaped" : "clean");
    if (r->looped) {
        r->gen.has_rep = true;
        r->gen.rep = (bn_pair_rep){hit.start, hit.repeat_start, r->has_pair ? r->pair.rep.rejected_token_index : -1,
                                   hit.period, hit.repeats, xstrdup(hit.snippet)};
    }
    r->gen.extra = json_pack("{s:i,s:i,s:b,s:b}", "prompt_index", prompt_index, "n_tokens", g.n, "hit_limit",
                             g.hit_limit, "frame_loop", r->loop_frame);
    if (trimmed) json_object_set_new(r->gen.extra, "trimmed_prompt", json_true());
    if (prefix_text) {
        json_object_set_new(r->gen.extra, "prime_prefix", json_string(prefix_text));
        json_object_set_new(r->gen.extra, "prime_phrase", json_string(mp->prime_phrase));
    }
    bn_toktext_free(&tt);
    for (int i = 0; i < n_scan; i++) free(surf[i]);
    free(surf);
    free(lens);
    bn_gen_result_free(&g);
    free(ctx);
    free(prefix_text);
    free(phrase_owned);
    return 0;
}

void bn_mine_result_free(bn_mine_result *r) {
    bn_gen_row_free(&r->gen);
    if (r->has_pair) bn_pair_row_free(&r->pair);
    memset(r, 0, sizeof *r);
}
