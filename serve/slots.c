// serve/slots.c — see slots.h.
#include "serve/slots.h"
#include "serve/request.h"
#include "core/engine.h"
#include "spec/step_batch.h"
#include "base/unicode.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int id;
    pthread_t thread;
    bn_engine_state *state;   // on S->eng
    float *logits;            // [n_vocab] logits of the last evaluated token
    // prompt cache: the snapshot at the end of the previous prompt (with speculation: before its last
    // token, which bn_spec keeps as id_last), of the cache_len tokens cache_tokens
    int32_t *cache_tokens;
    int cache_len;
    bn_engine_snapshot *cache_snap;
    float *cache_logits;      // [n_vocab] logits after the cached prompt (without speculation)
    bn_task *task;            // running task or NULL
    int n_prompt, n_decoded;
    bn_spec *spec;            // speculative decoder over `state` (NULL = plain decoding)
    float lora[BN_LORA_MAX];  // the running task's adapter scales (the state's)
    float cache_lora[BN_LORA_MAX]; // the scales the cached prompt was computed with
} slot;

struct bn_slots {
    bn_slots_params p;
    bn_engine *eng;           // the forward backend of every slot (-ngl)
    int n_vocab;
    slot *slots;
    pthread_mutex_t mu;       // queue, slot status, metrics
    pthread_cond_t cv;        // queue changed / stopping
    bn_step_batcher *steps;   // the engine: the plain slots' decode steps batched, every other forward under its
                              // lock (bn_step_batcher_lock: one forward at a time, in arrival order)
    bn_task **queue;
    int n_queue;
    bool stopping;
    bn_slots_metrics m;
    int n_lora;               // adapters of the engine
    float lora[BN_LORA_MAX];  // their global scales (under mu)
};

// ---- tasks --------------------------------------------------------------------------------

static void task_free(bn_task *t) {
    for (int i = 0; i < t->n_ev; i++) {
        free(t->ev[i].text);
        free(t->ev[i].top_ids);
        free(t->ev[i].top_lp);
    }
    free(t->ev);
    bn_task_params_free(&t->p);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

bn_task *bn_task_retain(bn_task *t) {
    pthread_mutex_lock(&t->mu);
    t->refs++;
    pthread_mutex_unlock(&t->mu);
    return t;
}

void bn_task_release(bn_task *t) {
    pthread_mutex_lock(&t->mu);
    int left = --t->refs;
    pthread_mutex_unlock(&t->mu);
    if (left == 0) task_free(t);
}

bool bn_task_ready_or_park(bn_task *t, int i) {
    pthread_mutex_lock(&t->mu);
    bool ready = t->n_ev > i || t->done;
    if (!ready && t->hooks.park) {
        t->parked = true;
        t->park_ev = i;
        t->hooks.park(t->hooks.ctx);
    } else if (!ready) { // no reader hooks: wait here
        while (t->n_ev <= i && !t->done) pthread_cond_wait(&t->cv, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return ready;
}

int bn_task_events(bn_task *t) {
    pthread_mutex_lock(&t->mu);
    int n = t->n_ev;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void bn_task_unhook(bn_task *t) {
    pthread_mutex_lock(&t->mu);
    t->hooks = (bn_task_hooks){0};
    t->parked = false;
    pthread_mutex_unlock(&t->mu);
}

void bn_task_cancel(bn_task *t, int reason) {
    pthread_mutex_lock(&t->mu);
    if (!t->cancel) t->cancel = reason;
    pthread_mutex_unlock(&t->mu);
}

// task_cancelled: the cancel reason (0: go on); asks the reader whether its client went away.
static int task_cancelled(bn_task *t) {
    pthread_mutex_lock(&t->mu);
    if (!t->cancel && t->hooks.gone && t->hooks.gone(t->hooks.ctx)) t->cancel = BN_CANCEL_CLIENT;
    int c = t->cancel;
    pthread_mutex_unlock(&t->mu);
    return c;
}

// wake_reader: wakes a parked reader when what it waits for is there (task lock held).
static void wake_reader(bn_task *t) {
    if (t->parked && (t->n_ev > t->park_ev || t->done)) {
        t->parked = false;
        t->hooks.wake(t->hooks.ctx);
    }
}

static void task_push(bn_task *t, bn_tok_event *e) {
    pthread_mutex_lock(&t->mu);
    if (t->n_ev == t->cap_ev) t->ev = xrealloc(t->ev, (t->cap_ev = t->cap_ev ? 2 * t->cap_ev : 64) * sizeof *t->ev);
    t->ev[t->n_ev++] = *e;
    pthread_cond_broadcast(&t->cv);
    wake_reader(t);
    pthread_mutex_unlock(&t->mu);
}

static void task_finish(bn_task *t, int code, const char *err) {
    pthread_mutex_lock(&t->mu);
    if (!code && t->cancel == BN_CANCEL_SHUTDOWN) code = 503, err = "server is shutting down";
    if (code) {
        t->failed = true;
        t->err_code = code;
        snprintf(t->err, sizeof t->err, "%s", err);
    }
    t->done = true;
    pthread_cond_broadcast(&t->cv);
    wake_reader(t);
    pthread_mutex_unlock(&t->mu);
}

// ---- generation ---------------------------------------------------------------------------

// eval: runs tokens through the slot's state under the engine lock; returns 0 or -1 with err. Keeps the last
// token's logits in sl->logits, or, with out, what out asks for (a decode step's argmax or top-k: no logits row
// crosses from a device engine, and sl->logits is left as it was).
static int eval(bn_slots *S, slot *sl, const int32_t *tok, int n, bn_forward_out *out, char *err, size_t errlen) {
    bn_forward_out logits_only = {.logits = sl->logits};
    bn_step_batcher_lock(S->steps);
    int rc = bn_engine_forward(sl->state, tok, n, out ? out : &logits_only, err, errlen);
    bn_step_batcher_unlock(S->steps);
    return rc;
}

// The longest a batch leader waits for the other decoding slots' steps and rounds (a slot still sending its last
// token, or accepting its last round's drafts).
#define STEP_GATHER_US 2000

// spec_round: one speculative round of the slot, begun (drafted) with the other slots' rounds and its verify pass
// batched with their steps and passes (bn_step_batcher_round), the acceptance under the engine lock. Writes the
// emitted tokens to out (room for cap) and returns their count, or -1 with err.
static int spec_round(bn_slots *S, slot *sl, bn_sampler *smp, int32_t *out, int cap, char *err, size_t errlen) {
    bn_spec_round r = {.sp = sl->spec, .smp = smp, .out_cap = cap};
    double ms;
    if (bn_step_batcher_round(S->steps, &r, &ms) != 0) return bn_err(err, errlen, "%s", r.err);
    bn_step_batcher_lock(S->steps);
    int rc = bn_spec_round_end(sl->spec, smp, ms, out, err, errlen);
    bn_step_batcher_unlock(S->steps);
    return rc;
}

// stop_overlap: length of the longest suffix of text that is a proper prefix of some stop string
// (those bytes are held back while streaming).
static size_t stop_overlap(const bn_task_params *p, const char *text, size_t len) {
    size_t best = 0;
    for (int s = 0; s < p->n_stop; s++) {
        size_t sl = strlen(p->stop[s]);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
            if (k <= len && memcmp(text + len - k, p->stop[s], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

// prefill: the prompt into the slot's state, reusing the slot's cached prefix when it is one (with speculation
// bn_spec_prefill_cached restores it and keeps the drafter's context rows of the prefix; it prefills the whole prompt
// but for its last token, id_last), then the prompt becomes the slot's cache entry. Returns the reused token count,
// -1 with err when a forward failed, -2 when the task was cancelled on the way.
static int prefill(bn_slots *S, slot *sl, bn_task *t, char *err, size_t errlen) {
    const bn_task_params *p = &t->p;
    const bool prefix = p->cache_prompt && sl->cache_snap && sl->cache_len > 0 && sl->cache_len <= p->n_prompt &&
                        memcmp(sl->cache_tokens, p->prompt, sizeof(int32_t) * sl->cache_len) == 0 &&
                        memcmp(sl->cache_lora, sl->lora, sizeof(float) * (size_t)S->n_lora) == 0;
    int reuse = 0;
    if (sl->spec) {
        bn_step_batcher_lock(S->steps);
        reuse = bn_spec_prefill_cached(sl->spec, p->prompt, p->n_prompt, prefix ? sl->cache_snap : NULL, err, errlen);
        bn_step_batcher_unlock(S->steps);
    } else if (prefix) {
        reuse = bn_engine_restore(sl->state, sl->cache_snap, err, errlen) == 0 ? sl->cache_len : -1;
        if (reuse > 0) memcpy(sl->logits, sl->cache_logits, sizeof(float) * S->n_vocab);
    } else
        bn_engine_state_reset(sl->state);
    if (reuse < 0) return -1;
    sl->n_prompt = p->n_prompt;
    sl->n_decoded = 0;
    const int chunk = 256;
    for (int i = reuse; !sl->spec && i < p->n_prompt; i += chunk) {
        int n = p->n_prompt - i < chunk ? p->n_prompt - i : chunk;
        if (eval(S, sl, p->prompt + i, n, NULL, err, errlen) != 0) return -1;
        if (task_cancelled(t)) return -2;
    }
    // new cache entry = this prompt (with speculation all but its last token: the state's position)
    if (!sl->cache_snap) sl->cache_snap = bn_engine_snapshot_new(sl->state, err, errlen);
    if (!sl->cache_snap || bn_engine_snapshot_into(sl->state, sl->cache_snap, err, errlen) != 0) return -1;
    free(sl->cache_tokens);
    sl->cache_tokens = xmalloc(sizeof(int32_t) * (p->n_prompt ? p->n_prompt : 1));
    memcpy(sl->cache_tokens, p->prompt, sizeof(int32_t) * p->n_prompt);
    sl->cache_len = bn_engine_state_pos(sl->state);
    memcpy(sl->cache_lora, sl->lora, sizeof sl->lora);
    if (!sl->spec) memcpy(sl->cache_logits, sl->logits, sizeof(float) * S->n_vocab);
    return reuse;
}

// One task's generation state, shared by run_task's steps.
typedef struct {
    bn_slots *S;
    slot *sl;
    bn_task *t;
    const bn_task_params *p;
    bn_sampler *smp;
    // what the penalties count (bn_sampler_set_history): the prompt, then each generated token (a speculative slot's
    // rounds keep their own: spec/dspark_spec.c)
    int32_t *hist;
    int n_hist, hist_cap;
    char *text;             // generated bytes
    size_t cap, len, sent;  // (sent: bytes already released)
    int n_ctx;
    int32_t *top_ids;       // [n_probs] scratch
    float *top_lp;
    // Without log-probs a decode step needs less than its logits row (a device engine then copies 4 bytes or top_k
    // pairs per token instead of the row): what the sampler picks from (bn_sampler_head_out: greedy, the argmax;
    // sampling with top_k <= BN_FORWARD_TOPK_MAX, the top_k best logits). The first token comes from the prompt's
    // logits.
    int32_t next, topk_ids[BN_FORWARD_TOPK_MAX]; // the last step's argmax / top-k (once a token was decoded)
    float topk_vals[BN_FORWARD_TOPK_MAX];
    bn_forward_out step_out;
    bool lean_steps;
    int32_t spec_out[65];   // a speculative round's tokens, handed out one by one
    int spec_k, spec_i;
    int stop_type;
    char err[256];          // why a forward failed
} gen;

static void gen_init(gen *g, bn_slots *S, slot *sl, bn_task *t) {
    const bn_task_params *p = &t->p;
    *g = (gen){.S = S, .sl = sl, .t = t, .p = p, .cap = 4096, .n_ctx = bn_engine_state_n_ctx(sl->state)};
    bn_sampler_params sp = p->sp;
    if (p->seed_random) sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)t << 16);
    g->smp = bn_sampler_new(&sp);
    if (bn_sampler_params_penalized(&sp) && !sl->spec) {
        g->hist_cap = p->n_prompt + 256;
        g->hist = xmalloc(sizeof(int32_t) * (size_t)g->hist_cap);
        memcpy(g->hist, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
        g->n_hist = p->n_prompt;
    }
    g->text = xmalloc(g->cap);
    g->top_ids = p->n_probs > 0 ? xmalloc(sizeof(int32_t) * p->n_probs) : NULL;
    g->top_lp = p->n_probs > 0 ? xmalloc(sizeof(float) * p->n_probs) : NULL;
    g->lean_steps =
        p->n_probs == 0 && bn_sampler_head_out(g->smp, S->n_vocab, &g->step_out, &g->next, g->topk_ids, g->topk_vals);
    if (sl->spec) bn_spec_set_no_step_logits(sl->spec, p->n_probs == 0);
}

static void gen_free(gen *g) {
    free(g->text);
    free(g->top_ids);
    free(g->top_lp);
    free(g->hist);
    bn_sampler_free(g->smp);
}

// gen_pick: the next token into *id and the logits row that produced it into *logits. Returns 0, 1 when the context
// is full (a speculative slot), -1 when a forward failed (g->err).
static int gen_pick(gen *g, int32_t *id, const float **logits) {
    slot *sl = g->sl;
    *logits = sl->logits;
    if (sl->spec) { // speculative: a step emits k >= 1 tokens; hand them out one by one
        if (g->spec_i == g->spec_k) {
            g->spec_k = spec_round(g->S, sl, g->smp, g->spec_out, 65, g->err, sizeof g->err);
            g->spec_i = 0;
            if (g->spec_k <= 0) return bn_spec_n_past(sl->spec) + 1 < g->n_ctx ? -1 : 1;
        }
        *logits = bn_spec_step_logits(sl->spec, g->spec_i);
        *id = g->spec_out[g->spec_i++];
    } else if (sl->n_decoded > 0 && g->lean_steps)
        *id = bn_sampler_pick(g->smp, &g->step_out, 0, g->S->n_vocab);
    else {
        bn_sampler_set_history(g->smp, g->hist, g->n_hist);
        *id = bn_sampler_sample(g->smp, sl->logits, g->S->n_vocab);
    }
    if (g->hist) {
        if (g->n_hist == g->hist_cap) g->hist = xrealloc(g->hist, sizeof(int32_t) * (size_t)(g->hist_cap *= 2));
        g->hist[g->n_hist++] = *id;
    }
    return 0;
}

// gen_probs: the event's log-probs of token id (n_probs > 0): the raw softmax's top n_probs of the row, or with
// post_sampling_probs the sampler's candidates.
static void gen_probs(gen *g, bn_tok_event *ev, int32_t id, const float *logits) {
    const bn_task_params *p = g->p;
    const int32_t *ids = g->top_ids;
    const float *vals = g->top_lp;
    if (p->post_sampling_probs && !g->sl->spec) {
        int nc = bn_sampler_last_candidates(g->smp, &ids, &vals);
        ev->n_top = nc < p->n_probs ? nc : p->n_probs;
        ev->logprob = 0;
        for (int k = 0; k < nc; k++)
            if (ids[k] == id) ev->logprob = vals[k];
    } else {
        ev->n_top = bn_logits_topk(logits, g->S->n_vocab, p->n_probs, g->top_ids, g->top_lp);
        ev->logprob = bn_logits_logprob(logits, g->S->n_vocab, id);
    }
    ev->top_ids = xmalloc(sizeof(int32_t) * (ev->n_top ? ev->n_top : 1));
    ev->top_lp = xmalloc(sizeof(float) * (ev->n_top ? ev->n_top : 1));
    memcpy(ev->top_ids, ids, sizeof(int32_t) * ev->n_top);
    memcpy(ev->top_lp, vals, sizeof(float) * ev->n_top);
}

// gen_text: appends token id's text, ends at end-of-generation or a stop word (g->stop_type), and sets the event's
// text to what is certainly final: no incomplete UTF-8 character at the end, not a possible stop-string start;
// invalid bytes become U+FFFD (as llama-server's JSON output).
static void gen_text(gen *g, bn_tok_event *ev, int32_t id) {
    const bn_task_params *p = g->p;
    if (!p->ignore_eos && bn_token_is_eog(g->S->p.tok, id)) g->stop_type = BN_STOP_EOS;
    else {
        char piece[256];
        int n = bn_token_to_piece(g->S->p.tok, id, piece, sizeof piece, false);
        if (n < 0) n = 0;
        if (g->len + n + 1 > g->cap) g->text = xrealloc(g->text, g->cap = 2 * (g->len + n + 1));
        memcpy(g->text + g->len, piece, n);
        g->len += n;
        g->text[g->len] = 0;
        for (int s = 0; s < p->n_stop; s++) { // stop words: search the new tail
            size_t sl_ = strlen(p->stop[s]);
            size_t from = g->sent > sl_ ? g->sent - sl_ : 0;
            char *hit = sl_ ? memmem(g->text + from, g->len - from, p->stop[s], sl_) : NULL;
            if (hit) {
                g->len = (size_t)(hit - g->text);
                g->text[g->len] = 0;
                g->stop_type = BN_STOP_WORD;
                snprintf(g->t->stopping_word, sizeof g->t->stopping_word, "%s", p->stop[s]);
                break;
            }
        }
    }
    size_t release = g->len;
    if (g->stop_type == BN_STOP_NONE) release -= stop_overlap(p, g->text, g->len);
    if (release < g->sent) release = g->sent;
    release = g->sent + bn_utf8_complete_len(g->text + g->sent, release - g->sent);
    ev->text = bn_utf8_sanitize(g->text + g->sent, release - g->sent, NULL);
    g->sent = release;
}

// gen_loop: generates until a stop, the limit or a cancellation; returns 0, or -1 when a forward failed (g->err).
static int gen_loop(gen *g) {
    slot *sl = g->sl;
    const bn_task_params *p = g->p;
    while (g->stop_type == BN_STOP_NONE) {
        if (task_cancelled(g->t)) break;
        if (p->n_predict >= 0 && sl->n_decoded >= p->n_predict) {
            g->stop_type = BN_STOP_LIMIT;
            break;
        }
        int32_t id;
        const float *logits;
        int rc = gen_pick(g, &id, &logits);
        if (rc < 0) return -1;
        if (rc > 0) { // context full
            g->stop_type = BN_STOP_LIMIT;
            g->t->truncated = true;
            break;
        }
        bn_tok_event ev = {.id = id};
        if (p->n_probs > 0) gen_probs(g, &ev, id, logits);
        g->t->n_predicted = ++sl->n_decoded;
        gen_text(g, &ev, id);
        task_push(g->t, &ev);
        if (g->stop_type != BN_STOP_NONE) break;
        if (sl->spec) continue; // the step already advanced the target
        if (bn_engine_state_pos(sl->state) >= g->n_ctx) {
            g->stop_type = BN_STOP_LIMIT;
            g->t->truncated = true;
            break;
        }
        bn_forward_out logits_out = {.logits = sl->logits};
        if (bn_step_batcher_step(g->S->steps, sl->state, id, g->lean_steps ? &g->step_out : &logits_out, g->err,
                                 sizeof g->err) != 0)
            return -1;
    }
    if (g->sent < g->len) { // held-back bytes at the end (a cut UTF-8 character becomes U+FFFD)
        bn_tok_event ev = {.id = -1, .text = bn_utf8_sanitize(g->text + g->sent, g->len - g->sent, NULL)};
        task_push(g->t, &ev);
    }
    g->t->stop_type = g->stop_type;
    return 0;
}

// account: the finished task's counters into the server's metrics (st0/st1: the speculative stats around it).
static void account(bn_slots *S, slot *sl, bn_task *t, int reuse, const bn_spec_stats *st0, const bn_spec_stats *st1) {
    const bn_task_params *p = &t->p;
    if (sl->spec) {
        t->draft_n = st1->n_drafted - st0->n_drafted;
        t->draft_n_accepted = st1->n_accept - st0->n_accept;
    }
    pthread_mutex_lock(&S->mu);
    S->m.prompt_tokens_total += (uint64_t)(p->n_prompt - reuse);
    S->m.prompt_tokens_cached_total += (uint64_t)reuse;
    S->m.prompt_seconds_total += t->t_prompt_ms / 1e3;
    S->m.tokens_predicted_total += (uint64_t)sl->n_decoded;
    S->m.predicted_seconds_total += t->t_gen_ms / 1e3;
    // the prompt's decode call (decode steps and verify passes are counted per batch), with speculation on the CPU
    // engine also the re-runs of accepted prefixes
    S->m.n_decode_total += 1 + (sl->spec ? (uint64_t)(st1->n_rerun - st0->n_rerun) : 0);
    if (p->n_prompt + sl->n_decoded > S->m.n_tokens_max) S->m.n_tokens_max = p->n_prompt + sl->n_decoded;
    if (sl->spec) {
        S->m.spec_draft_tokens += (uint64_t)t->draft_n;
        S->m.spec_accepted_tokens += (uint64_t)t->draft_n_accepted;
        S->m.spec_drafts += (uint64_t)(st1->n_rounds_spec - st0->n_rounds_spec);
        for (int i = 0; i < 8; i++) S->m.spec_accepted_pos[i] += (uint64_t)(st1->acc_pos[i] - st0->acc_pos[i]);
    }
    pthread_mutex_unlock(&S->mu);
}

// set_lora: the task's adapter scales (its "lora" field, else the global ones now) into the slot and its state;
// 0 or -1 with err.
static int set_lora(bn_slots *S, slot *sl, const bn_task *t, char *err, size_t errlen) {
    if (S->n_lora == 0) return 0;
    pthread_mutex_lock(&S->mu);
    memcpy(sl->lora, t->p.has_lora ? t->p.lora : S->lora, sizeof sl->lora);
    pthread_mutex_unlock(&S->mu);
    bn_step_batcher_lock(S->steps);
    const int rc = bn_engine_state_set_lora(sl->state, sl->lora, S->n_lora, err, errlen);
    bn_step_batcher_unlock(S->steps);
    return rc;
}

static void run_task(bn_slots *S, slot *sl, bn_task *t) {
    char err[256];
    double t0 = bn_time_ms();
    int reuse = set_lora(S, sl, t, err, sizeof err) == 0 ? prefill(S, sl, t, err, sizeof err) : -1;
    if (reuse < 0) {
        task_finish(t, reuse == -1 ? 500 : 0, reuse == -1 ? err : "");
        return;
    }
    t->n_cached = reuse;
    double t1 = bn_time_ms();
    t->t_prompt_ms = t1 - t0;
    bn_spec_stats st0 = {0}, st1 = {0};
    if (sl->spec) st0 = *bn_spec_stats_get(sl->spec);
    gen g;
    gen_init(&g, S, sl, t);
    bn_step_batcher_decoding(S->steps, +1); // its steps and verify passes batched with other slots' (step_batch.h)
    int rc = gen_loop(&g);
    bn_step_batcher_decoding(S->steps, -1);
    gen_free(&g);
    if (rc != 0) {
        task_finish(t, 500, g.err);
        return;
    }
    t->t_gen_ms = bn_time_ms() - t1;
    if (sl->spec) st1 = *bn_spec_stats_get(sl->spec);
    account(S, sl, t, reuse, &st0, &st1);
    task_finish(t, 0, "");
}

// queue_drop: removes queued task i, ends it (code: 0, or the error it fails with) and drops the slot's reference.
static void queue_drop(bn_slots *S, int i, int code, const char *err) {
    bn_task *t = S->queue[i];
    memmove(&S->queue[i], &S->queue[i + 1], sizeof(bn_task *) * (S->n_queue - i - 1));
    S->n_queue--;
    task_finish(t, code, err);
    bn_task_release(t);
}

// take_task: next queued task this slot may run (FIFO, honouring id_slot); NULL if none. Queued tasks whose client
// went away are dropped on the way.
static bn_task *take_task(bn_slots *S, int slot_id) {
    for (int i = 0; i < S->n_queue; i++) {
        bn_task *t = S->queue[i];
        if (task_cancelled(t)) {
            queue_drop(S, i--, 0, "");
            continue;
        }
        if (t->p.id_slot >= 0 && t->p.id_slot != slot_id) continue;
        memmove(&S->queue[i], &S->queue[i + 1], sizeof(bn_task *) * (S->n_queue - i - 1));
        S->n_queue--;
        return t;
    }
    return NULL;
}

typedef struct {
    bn_slots *S;
    slot *sl;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *wa = arg;
    bn_slots *S = wa->S;
    slot *sl = wa->sl;
    free(wa);
    pthread_mutex_lock(&S->mu);
    for (;;) {
        bn_task *t = NULL;
        while (!S->stopping && !(t = take_task(S, sl->id))) pthread_cond_wait(&S->cv, &S->mu);
        if (!t) break;
        sl->task = t;
        t->id_slot = sl->id;
        S->m.requests_processing++;
        pthread_mutex_unlock(&S->mu);
        run_task(S, sl, t);
        bn_task_release(t);
        pthread_mutex_lock(&S->mu);
        S->m.requests_processing--;
        sl->task = NULL;
        pthread_cond_broadcast(&S->cv);
    }
    pthread_mutex_unlock(&S->mu);
    return NULL;
}

bn_slots *bn_slots_start(const bn_slots_params *p, char *err, size_t errlen) {
    if (p->n_slots < 1 || p->n_ctx < 8) {
        bn_err(err, errlen, "need at least one slot and a context of at least 8 tokens");
        return NULL;
    }
    bn_engine *eng = bn_engine_open_lora(p->model, p->n_gpu_layers, p->n_threads, p->lora, err, errlen);
    if (!eng) return NULL;
    bn_slots *S = xcalloc(1, sizeof *S);
    S->p = *p;
    S->p.lora = NULL; // the engine's now
    S->eng = eng;
    S->n_lora = bn_lora_set_count(bn_engine_lora(eng));
    if (S->n_lora) memcpy(S->lora, bn_lora_set_scales(bn_engine_lora(eng)), sizeof(float) * (size_t)S->n_lora);
    S->n_vocab = p->model->cfg.n_vocab;
    S->slots = xcalloc((size_t)p->n_slots, sizeof(slot));
    S->queue = xcalloc((size_t)(p->queue_max + p->n_slots + 1), sizeof(bn_task *));
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    S->steps = bn_step_batcher_new(STEP_GATHER_US);
    for (int i = 0; i < p->n_slots; i++) {
        slot *sl = &S->slots[i];
        sl->id = i;
        sl->state = bn_engine_state_new(eng, p->n_ctx, err, errlen);
        sl->logits = xmalloc(sizeof(float) * S->n_vocab);
        sl->cache_logits = xmalloc(sizeof(float) * S->n_vocab);
        bool ok = sl->state != NULL;
        if (ok && (p->drafter || p->spec.type == BN_SPEC_ORACLE)) {
            sl->spec = bn_spec_new_engine(sl->state, p->drafter, &p->spec, err, errlen); // target on any engine
            ok = sl->spec != NULL;
        }
        if (!ok) { // startup failure: free what exists (no thread runs yet)
            for (int k = 0; k <= i; k++) {
                bn_spec_free(S->slots[k].spec);
                bn_engine_state_free(S->slots[k].state);
                free(S->slots[k].logits);
                free(S->slots[k].cache_logits);
            }
            free(S->slots);
            free(S->queue);
            bn_engine_free(S->eng);
            free(S);
            return NULL;
        }
    }
    for (int i = 0; i < p->n_slots; i++) {
        worker_arg *wa = xmalloc(sizeof *wa);
        wa->S = S;
        wa->sl = &S->slots[i];
        pthread_create(&S->slots[i].thread, NULL, worker, wa);
    }
    return S;
}

void bn_slots_drain(bn_slots *S) {
    pthread_mutex_lock(&S->mu);
    S->stopping = true;
    while (S->n_queue > 0) queue_drop(S, 0, 503, "server is shutting down");
    pthread_cond_broadcast(&S->cv);
    pthread_mutex_unlock(&S->mu);
}

void bn_slots_cancel_all(bn_slots *S) {
    bn_slots_drain(S);
    pthread_mutex_lock(&S->mu);
    for (int i = 0; i < S->p.n_slots; i++)
        if (S->slots[i].task) bn_task_cancel(S->slots[i].task, BN_CANCEL_SHUTDOWN);
    pthread_mutex_unlock(&S->mu);
}

int bn_slots_running(bn_slots *S) {
    pthread_mutex_lock(&S->mu);
    int n = 0;
    for (int i = 0; i < S->p.n_slots; i++) n += S->slots[i].task != NULL;
    pthread_mutex_unlock(&S->mu);
    return n;
}

void bn_slots_stop(bn_slots *S) {
    if (!S) return;
    bn_slots_cancel_all(S);
    for (int i = 0; i < S->p.n_slots; i++) {
        slot *sl = &S->slots[i];
        pthread_join(sl->thread, NULL);
        bn_spec_free(sl->spec);
        bn_engine_state_free(sl->state);
        bn_engine_snapshot_free(sl->cache_snap);
        free(sl->cache_tokens);
        free(sl->cache_logits);
        free(sl->logits);
    }
    free(S->slots);
    free(S->queue);
    bn_engine_free(S->eng);
    pthread_mutex_destroy(&S->mu);
    pthread_cond_destroy(&S->cv);
    bn_step_batcher_free(S->steps);
    free(S);
}

bn_task *bn_slots_submit(bn_slots *S, bn_task_params *params, const bn_task_hooks *hooks, char *err, size_t errlen,
                         int *code) {
    *code = 400;
    if (params->n_prompt >= S->p.n_ctx)
        bn_err(err, errlen, "request (%d tokens) exceeds the available context size (%d tokens), try increasing it",
               params->n_prompt, S->p.n_ctx);
    else if (params->id_slot >= S->p.n_slots)
        bn_err(err, errlen, "id_slot %d does not exist (%d slots)", params->id_slot, S->p.n_slots);
    else *code = 0;
    if (*code) {
        bn_task_params_free(params);
        return NULL;
    }
    bn_task *t = xcalloc(1, sizeof *t);
    t->p = *params;
    memset(params, 0, sizeof *params);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->refs = 2; // HTTP side + slot side
    t->id_slot = -1;
    if (hooks) t->hooks = *hooks;
    pthread_mutex_lock(&S->mu);
    int busy = 0;
    for (int i = 0; i < S->p.n_slots; i++) busy += S->slots[i].task != NULL;
    const int room = S->p.queue_max + (S->p.n_slots - busy);
    for (int i = 0; S->n_queue >= room && i < S->n_queue; i++) // full: first drop the tasks nobody waits for
        if (task_cancelled(S->queue[i])) queue_drop(S, i--, 0, "");
    if (S->stopping || S->n_queue >= room) {
        pthread_mutex_unlock(&S->mu);
        *code = 503;
        bn_err(err, errlen, S->stopping ? "server is shutting down" : "server busy: request queue is full");
        t->refs = 1;
        bn_task_release(t);
        return NULL;
    }
    S->queue[S->n_queue++] = t;
    S->m.requests_deferred = S->n_queue;
    pthread_cond_broadcast(&S->cv);
    pthread_mutex_unlock(&S->mu);
    return t;
}

int bn_slots_info(bn_slots *S, bn_slot_info *info, int n) {
    pthread_mutex_lock(&S->mu);
    for (int i = 0; i < S->p.n_slots && i < n; i++) {
        slot *sl = &S->slots[i];
        info[i] = (bn_slot_info){.id = i, .busy = sl->task != NULL, .n_ctx = S->p.n_ctx, .n_prompt = sl->n_prompt,
                                 .n_cache = sl->cache_len, .n_decoded = sl->n_decoded,
                                 .speculative = sl->spec != NULL};
    }
    pthread_mutex_unlock(&S->mu);
    return S->p.n_slots;
}

const char *bn_slots_backend(const bn_slots *S) { return bn_engine_name(S->eng); }

int bn_slots_lora(bn_slots *S, float *scales, int i, const char **path) {
    pthread_mutex_lock(&S->mu);
    if (scales) memcpy(scales, S->lora, sizeof(float) * (size_t)S->n_lora);
    pthread_mutex_unlock(&S->mu);
    if (path && i >= 0 && i < S->n_lora) *path = bn_lora_set_adapter(bn_engine_lora(S->eng), i)->path;
    return S->n_lora;
}

int bn_slots_set_lora(bn_slots *S, const float *scales, int n) {
    if (n != S->n_lora) return -1;
    pthread_mutex_lock(&S->mu);
    memcpy(S->lora, scales, sizeof(float) * (size_t)n);
    pthread_mutex_unlock(&S->mu);
    return 0;
}

void bn_slots_get_metrics(bn_slots *S, bn_slots_metrics *m) {
    pthread_mutex_lock(&S->mu);
    *m = S->m;
    m->requests_deferred = S->n_queue;
    pthread_mutex_unlock(&S->mu);
    bn_step_batcher_counts(S->steps, &m->decode_steps, &m->decode_step_seqs, &m->draft_calls, &m->draft_call_seqs);
    m->n_decode_total += m->decode_steps;
}
