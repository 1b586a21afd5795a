// tools/bonsai-train-drafter.c — trains a DSpark drafter for a target by distillation (docs/dspark.md §11):
//   bonsai-train-drafter -m TARGET.gguf -o DRAFTER.gguf --prompts train.jsonl [--text FILE] [options]
// The target continues every prompt (chat template applied as bonsai-eval-loops does; greedy by default, sampled
// with --temp) in-process, recording its taps at every position; the drafter (a fresh one of the given shape, or
// --init-drafter FILE) learns to predict the target's next B tokens from each anchor (train/drafter.h), by AdamW with
// the linear warmup + decay schedule. --text FILE adds plain text the target reads (teacher-forced: the labels are the
// text's tokens). --heldout FILE reports the teacher-forced acceptance on other prompts.
#include "train/drafter.h"
#include "synth/mkdrafter.h"
#include "records/prompts.h"
#include "core/chat.h"
#include "core/tokenizer.h"
#include "core/engine.h"
#include "core/sampler.h"
#include "base/args.h"
#include "base/progress.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

typedef struct {
    bn_engine_opts eng;
    bn_sampler_params smp;
    const char *out, *init, *prompts, *heldout, *ckpt, *resume, *text;
    int n_gen, max_prompts, epochs, batch, anchors, save_every, text_ctx;
    float lr, clip, wd, warmup;
    int layers, ff, heads, heads_kv, head_dim, rank, block, n_taps;
    int taps[BN_DRAFTER_MAX_TAPS];
    const char *type;
    bool no_conf;
    uint64_t seed;
    int wtype, convention;
} opts;

// convention_fn: --convention legacy|dflash.
static int convention_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    return bn_drafter_convention_parse(v, &((opts *)base)->convention, err, errlen);
}

#define O(f) offsetof(opts, f)
static const bn_arg tool_args[] = {
    BN_STR("-o, --output", O(out), "FILE", "the trained drafter (required)"),
    BN_FN("--convention", convention_fn, "C",
          "the file's convention: dflash (default; mainline llama.cpp's names) | legacy (arch dspark, the fork's v5)"),
    BN_STR("--prompts", O(prompts), "FILE", "training prompts (JSONL, records/prompts.h) the target continues"),
    BN_STR("--heldout", O(heldout), "FILE", "held-out prompts: teacher-forced acceptance before and after training"),
    BN_STR("--text", O(text), "FILE", "also train on plain text read by the target (labels: the text's tokens)"),
    BN_INT("--text-ctx", O(text_ctx), "N", "--text window in tokens (128)", 8, 1 << 20),
    BN_STR("--init-drafter", O(init), "FILE", "fine-tune this drafter (shape options are then ignored)"),
    BN_INT("--n-gen", O(n_gen), "N", "tokens the target generates per prompt (128)", 1, 1 << 20),
    BN_INT("--max-prompts", O(max_prompts), "N", "use at most N prompts of each file (0: all)", 0, 1 << 30),
    BN_INT("--epochs", O(epochs), "N", "passes over the sequences (2)", 1, 1000),
    BN_INT("-b, --batch", O(batch), "N", "sequences per update (4)", 1, 4096),
    BN_INT("--anchors", O(anchors), "N", "anchors drawn per sequence per pass (0: all; 48)", 0, 1 << 20),
    BN_FLOAT("--lr", O(lr), "X", "peak learning rate (2e-3)", 0, 10),
    BN_FLOAT("--clip", O(clip), "X", "global gradient norm clip (1; 0: none)", 0, 1e9),
    BN_FLOAT("--weight-decay", O(wd), "X", "AdamW decoupled weight decay (0.01)", 0, 1),
    BN_FLOAT("--warmup", O(warmup), "X", "warmup fraction of the steps (0.05)", 0, 1),
    BN_INT("--draft-layers", O(layers), "N", "fresh drafter: layers (1)", 1, 64),
    BN_INT("--draft-ff", O(ff), "N", "fresh drafter: FFN width (256)", 1, 1 << 16),
    BN_INT("--draft-heads", O(heads), "N", "fresh drafter: attention heads (4)", 1, 256),
    BN_INT("--draft-heads-kv", O(heads_kv), "N", "fresh drafter: K/V heads (2)", 1, 256),
    BN_INT("--draft-head-dim", O(head_dim), "N", "fresh drafter: head width (64)", 2, 1024),
    BN_INT("--markov-rank", O(rank), "N", "fresh drafter: Markov head rank (32)", 1, 4096),
    BN_INT("--block-size", O(block), "N", "fresh drafter: block size B (4)", 1, BN_DRAFTER_MAX_BLOCK),
    BN_INTS("--taps", O(taps), O(n_taps), BN_DRAFTER_MAX_TAPS, "L,L,...",
            "fresh drafter: target layers tapped, output of layer L (default: the middle and the last)", 0, 1 << 16),
    BN_TRUE("--no-conf", O(no_conf), "fresh drafter: no confidence head"),
    BN_STR("--type", O(type), "T", "trained matrices' type in the file: F16 (default), F32, Q8_0, ..."),
    BN_STR("--checkpoint", O(ckpt), "FILE", "write weights + AdamW state here every --save-every steps and at the end"),
    BN_INT("--save-every", O(save_every), "N", "checkpoint interval in updates (100)", 1, 1 << 30),
    BN_STR("--resume", O(resume), "FILE", "continue from a checkpoint (same drafter options)"),
    BN_SEED("-s, --seed", O(seed), "RNG seed (anchors, order, sampling)"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-train-drafter",
    .usage = "usage: bonsai-train-drafter -m TARGET.gguf -o DRAFTER.gguf --prompts FILE [--text FILE] [options]\n"
             "Trains a DSpark drafter on the target's own continuations (docs/dspark.md §11).\n",
    .notes = "Generation is greedy unless --temp > 0. The drafter borrows the target's token_embd and output.\n"};

static void parse_args(opts *o, int argc, char **argv) {
    *o = (opts){.eng = {.n_ctx = 0}, .smp = bn_sampler_params_default(), .n_gen = 128, .epochs = 2, .batch = 4,
                .anchors = 48, .lr = 2e-3f, .clip = 1, .wd = 0.01f, .warmup = 0.05f, .layers = 1, .ff = 256,
                .heads = 4, .heads_kv = 2, .head_dim = 64, .rank = 32, .block = 4, .save_every = 100, .seed = 1,
                .text_ctx = 128, .convention = BN_DRAFTER_DFLASH};
    o->smp.temperature = 0;
    const bn_arg_table tables[] = {BN_TABLE(tool_args, o), BN_TABLE(bn_engine_args, &o->eng),
                                   BN_TABLE(bn_sampler_chain_args, &o->smp), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o->eng.model || !o->out || (!o->prompts && !o->text))
        bn_args_fail(&tool, "-m TARGET.gguf, -o FILE and --prompts and/or --text are required");
    if (o->heads % o->heads_kv) bn_args_fail(&tool, "--draft-heads must be a multiple of --draft-heads-kv");
    o->smp.seed = o->seed;
    o->wtype = bn_type_from_name(o->type ? o->type : "F16");
    if (o->wtype < 0) bn_args_fail(&tool, "--type: unknown type");
}

// A generated sequence: prompt + continuation tokens and the taps of each position.
typedef struct {
    int32_t *tok;
    float *taps;
    int n, first;
} dseq;

typedef struct {
    const bn_model *m;
    const bn_tokenizer *tok;
    bn_engine_state *es;
    bn_sampler *smp;
    const int *tap_layers;
    int n_taps, n_gen;
} gen_ctx;

// generate: renders and tokenizes prompt p, lets the target continue it (n_gen tokens or up to an end-of-generation
// token) with taps at every position. Returns 0 or -1 with err.
static int generate(gen_ctx *g, const bn_prompt *p, dseq *s, char *err, size_t errlen) {
    const bn_config *c = &g->m->cfg;
    const size_t row = (size_t)g->n_taps * c->n_embd;
    bn_chat_msg *msgs = xcalloc((size_t)p->n_msgs, sizeof *msgs);
    for (int i = 0; i < p->n_msgs; i++) msgs[i] = (bn_chat_msg){p->msgs[i].role, p->msgs[i].content, NULL};
    const char *tmpl = gguf_get_str(g->m->gguf, "tokenizer.chat_template");
    char *text = bn_chat_render(msgs, p->n_msgs, true, bn_chat_thinking_for_template(tmpl));
    free(msgs);
    if (!text) return bn_err(err, errlen, "prompt line %d: the chat template rejected it", p->line);
    int32_t *ids = NULL;
    int n = bn_tokenize(g->tok, text, strlen(text), false, true, &ids);
    free(text);
    if (n < 2) {
        free(ids);
        return bn_err(err, errlen, "prompt line %d: %d tokens", p->line, n);
    }
    const int cap = n + g->n_gen;
    s->tok = xrealloc(ids, sizeof(int32_t) * (size_t)cap);
    s->taps = xcalloc((size_t)cap * row, sizeof(float));
    s->first = n - 1;
    float *logits = xmalloc(sizeof(float) * (size_t)c->n_vocab);
    bn_engine_state_reset(g->es);
    int rc = 0, at = 0; // at: the first position not yet decoded
    while (rc == 0 && n < cap) {
        bn_forward_out out = {.logits = logits, .tap_layers = g->tap_layers, .n_taps = g->n_taps,
                              .taps = s->taps + (size_t)at * row};
        rc = bn_engine_forward(g->es, s->tok + at, n - at, &out, err, errlen);
        at = n;
        if (rc) break;
        const int32_t next = bn_sampler_sample(g->smp, logits, c->n_vocab);
        s->tok[n++] = next;
        if (bn_token_is_eog(g->tok, next)) break;
    }
    s->n = n;
    free(logits);
    return rc;
}

// gen_file: the sequences of every prompt of path; returns their count or -1 with err.
static int gen_file(gen_ctx *g, const char *path, int max_prompts, dseq **out, char *err, size_t errlen) {
    bn_prompt_opts po = bn_prompt_opts_default();
    po.max_prompts = max_prompts;
    bn_prompt *ps = NULL;
    int skipped = 0, n = bn_prompts_read(path, &po, &ps, &skipped, err, errlen);
    if (n < 0) return -1;
    *out = xcalloc((size_t)n + 1, sizeof **out);
    bn_progress bar;
    bn_progress_start(&bar, "generate", n);
    int64_t toks = 0;
    for (int i = 0; i < n; i++) {
        if (generate(g, &ps[i], &(*out)[i], err, errlen) != 0) {
            bn_prompts_free(ps, n);
            return -1;
        }
        toks += (*out)[i].n - (*out)[i].first - 1;
        bn_progress_update(&bar, i + 1, NULL);
    }
    char extra[96];
    snprintf(extra, sizeof extra, "%lld target tokens from %s", (long long)toks, path);
    bn_progress_finish(&bar, extra);
    bn_prompts_free(ps, n);
    return n;
}

// text_file: plain text read by the target in windows of ctx tokens, appended to *ss (n so far): each window one
// sequence with its taps, anchors from position 1, labels the text's own tokens. Returns the new count or -1.
static int text_file(gen_ctx *g, const char *path, int ctx, dseq **ss, int n, char *err, size_t errlen) {
    size_t len;
    char *text = bn_read_file(path, &len, err, errlen);
    if (!text) return -1;
    int32_t *ids = NULL;
    const int nt = bn_tokenize(g->tok, text, len, false, false, &ids);
    free(text);
    const size_t row = (size_t)g->n_taps * g->m->cfg.n_embd;
    const int nw = nt > 0 ? (nt + ctx - 1) / ctx : 0;
    *ss = xrealloc(*ss, sizeof **ss * (size_t)(n + nw + 1));
    int rc = 0;
    for (int w = 0; w < nw && rc == 0; w++) {
        const int k = nt - w * ctx < ctx ? nt - w * ctx : ctx;
        dseq *s = &(*ss)[n];
        *s = (dseq){.tok = xmalloc(sizeof(int32_t) * (size_t)k), .taps = xcalloc((size_t)k * row, sizeof(float)),
                    .n = k, .first = 1};
        memcpy(s->tok, ids + (size_t)w * ctx, sizeof(int32_t) * (size_t)k);
        bn_engine_state_reset(g->es);
        bn_forward_out out = {.tap_layers = g->tap_layers, .n_taps = g->n_taps, .taps = s->taps};
        rc = bn_engine_forward(g->es, s->tok, k, &out, err, errlen);
        n++;
    }
    free(ids);
    if (rc == 0)
        fprintf(stderr, "bonsai-train-drafter: %d text tokens in %d windows from %s\n", nt > 0 ? nt : 0, nw, path);
    return rc ? -1 : n;
}

// load_drafter: --init-drafter, or a fresh random drafter of the option's shape (bn_mkdrafter_write to a temporary
// file next to the output, loaded, removed). Returns the drafter or NULL with err.
static bn_drafter *load_drafter(const opts *o, const bn_model *m, char *err, size_t errlen) {
    if (o->init) return bn_drafter_load(o->init, m, err, errlen);
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.convention = BN_DRAFTER_DFLASH;
    p.n_embd = m->cfg.n_embd, p.n_vocab = m->cfg.n_vocab, p.n_layer = o->layers, p.n_ff = o->ff;
    p.n_head = o->heads, p.n_head_kv = o->heads_kv, p.head_dim = p.n_rot = o->head_dim, p.markov_rank = o->rank;
    p.block_size = o->block, p.shared = true, p.log_snr = false, p.confidence_head = !o->no_conf;
    p.type = BN_F32, p.seed = o->seed;
    p.n_taps = o->n_taps ? o->n_taps : 2;
    for (int i = 0; i < p.n_taps; i++)
        p.target_layers[i] = o->n_taps ? o->taps[i] : i == 0 ? m->cfg.n_layer / 2 - 1 : m->cfg.n_layer - 1;
    if (p.n_taps == 2 && !o->n_taps && p.target_layers[0] == p.target_layers[1]) p.n_taps = 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.init-%d.gguf", o->out, (int)getpid());
    if (bn_mkdrafter_write(&p, tmp, err, errlen) != 0) return NULL;
    bn_drafter *d = bn_drafter_load(tmp, m, err, errlen);
    unlink(tmp); // the mapping stays valid
    return d;
}

// evaluate: teacher-forced figures over every anchor of the sequences: cross-entropy, top-1 and the expected
// accepted drafts per verify step (Σ_i P(rows 0..i all hit)) at block size B, printed with label.
static void evaluate(bn_dtrain *t, const dseq *ss, int n, const char *label) {
    bn_dtrain_stats st = {0};
    char err[256];
    int64_t na = 0;
    for (int i = 0; i < n; i++) {
        bn_dtrain_seq q = {.tokens = ss[i].tok, .taps = ss[i].taps, .n = ss[i].n, .first = ss[i].first};
        if (ss[i].n - t->cfg.block_size - ss[i].first <= 0) continue;
        if (bn_dtrain_step(t, &q, false, 1, &st, err, sizeof err) == 0) na += ss[i].n - t->cfg.block_size - ss[i].first;
    }
    double acc = 0;
    for (int i = 0; i < t->cfg.block_size; i++) acc += (double)st.n_pos[i] / (na ? na : 1);
    fprintf(stderr, "bonsai-train-drafter: %s: %lld anchors, cross-entropy %.4f, top-1 %.2f %%, teacher-forced "
                    "accepted drafts per verify step %.3f (tokens per step %.3f)\n",
            label, (long long)na, st.ce / (st.n_pred ? st.n_pred : 1), 100.0 * st.n_top1 / (st.n_pred ? st.n_pred : 1),
            acc, 1 + acc);
}

// pick_anchors: k distinct anchors of s drawn uniformly (all of them when k is 0 or not fewer); returns the count.
static int pick_anchors(const dseq *s, int B, int k, bn_rng *rng, int *out) {
    int n = s->n - B - s->first;
    if (n <= 0) return 0;
    for (int a = 0; a < n; a++) out[a] = s->first + a;
    if (k <= 0 || k >= n) return n;
    for (int a = 0; a < k; a++) { // partial Fisher-Yates
        int j = a + (int)bn_rng_below(rng, (uint64_t)(n - a));
        int x = out[a];
        out[a] = out[j], out[j] = x;
    }
    return k;
}

// train: the AdamW loop over the sequences (order reshuffled each epoch). Returns 0 or -1 with err.
static int train(const opts *o, bn_dtrain *t, const dseq *ss, int n, char *err, size_t errlen) {
    const int B = t->cfg.block_size;
    bn_adamw *opt = bn_adamw_new(t->n_params);
    bn_adamw_cfg cfg = bn_adamw_cfg_default();
    cfg.weight_decay = o->wd;
    bn_dtrain_pos pos = {.total_steps = bn_sched_total_steps(n, o->batch, 1, o->epochs)};
    bn_rng_seed(&pos.rng, o->seed);
    if (o->resume && bn_dtrain_checkpoint_load(t, opt, &pos, o->resume, err, errlen) != 0) return -1;
    const int64_t warm = bn_sched_warmup_steps(pos.total_steps, o->warmup);
    int *order = xmalloc(sizeof(int) * (size_t)n), maxn = 0;
    for (int i = 0; i < n; i++) maxn = ss[i].n > maxn ? ss[i].n : maxn;
    int *anc = xmalloc(sizeof(int) * (size_t)(maxn + 1) * (size_t)o->batch), nanc[4096];
    bn_progress bar;
    bn_progress_start(&bar, "train", pos.total_steps);
    double run_loss = 0, run_hit = 0;
    int rc = 0;
    while (rc == 0 && pos.step < pos.total_steps) {
        bn_rng ord = {{0}}; // the epoch's order depends on the seed and the epoch only (resume-safe)
        bn_rng_seed(&ord, o->seed * 1000003u + (uint64_t)pos.epoch);
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)bn_rng_below(&ord, (uint64_t)i + 1), x = order[i];
            order[i] = order[j], order[j] = x;
        }
        while (rc == 0 && pos.data_pos < n && pos.step < pos.total_steps) {
            const int nb = n - pos.data_pos < o->batch ? (int)(n - pos.data_pos) : o->batch;
            int64_t preds = 0;
            for (int b = 0; b < nb; b++) {
                int *ab = anc + (size_t)b * (maxn + 1);
                nanc[b] = pick_anchors(&ss[order[pos.data_pos + b]], B, o->anchors, &pos.rng, ab);
                preds += (int64_t)nanc[b] * B;
            }
            memset(t->grads, 0, sizeof(float) * (size_t)t->n_params);
            bn_dtrain_stats st = {0};
            for (int b = 0; b < nb && rc == 0 && preds > 0; b++) {
                const dseq *s = &ss[order[pos.data_pos + b]];
                bn_dtrain_seq q = {.tokens = s->tok, .taps = s->taps, .n = s->n, .first = s->first,
                                   .anchors = anc + (size_t)b * (maxn + 1), .n_anchors = nanc[b]};
                if (nanc[b] > 0) rc = bn_dtrain_step(t, &q, true, 1.0f / (float)preds, &st, err, errlen);
            }
            pos.data_pos += nb;
            if (rc || preds == 0) continue;
            bn_grad_clip(t->grads, t->n_params, o->clip);
            bn_adamw_step(opt, &cfg, (float)bn_sched_lr(o->lr, pos.step, pos.total_steps, warm), t->params, t->grads);
            pos.step++;
            run_loss = 0.95 * run_loss + 0.05 * st.ce / (double)st.n_pred;
            run_hit = 0.95 * run_hit + 0.05 * (double)st.n_top1 / (double)st.n_pred;
            const double bc = 1 - pow(0.95, (double)pos.step); // the running means' bias correction
            char extra[96];
            snprintf(extra, sizeof extra, "ce %.3f top-1 %.1f%%", run_loss / bc, 100 * run_hit / bc);
            bn_progress_update(&bar, pos.step, extra);
            if (o->ckpt && (pos.step % o->save_every == 0 || pos.step == pos.total_steps))
                rc = bn_dtrain_checkpoint_save(t, opt, &pos, o->ckpt, err, errlen);
        }
        if (pos.data_pos >= n) pos.data_pos = 0, pos.epoch++;
    }
    bn_progress_finish(&bar, NULL);
    free(order), free(anc);
    bn_adamw_free(opt);
    return rc;
}

static void free_seqs(dseq *ss, int n) {
    for (int i = 0; i < n; i++) free(ss[i].tok), free(ss[i].taps);
    free(ss);
}

int main(int argc, char **argv) {
    opts o;
    parse_args(&o, argc, argv);
    char err[1024];
    bn_model *m = bn_model_load(o.eng.model, err, sizeof err);
    bn_tokenizer *tok = m ? bn_tokenizer_from_gguf(m->gguf, err, sizeof err) : NULL;
    bn_drafter *d = tok ? load_drafter(&o, m, err, sizeof err) : NULL;
    bn_engine *eng = d ? bn_engine_open_opts(m, &o.eng, err, sizeof err) : NULL;
    bn_engine_state *es = eng ? bn_engine_state_new(eng, o.eng.n_ctx > 0 ? o.eng.n_ctx : 4096, err, sizeof err) : NULL;
    if (!es) {
        fprintf(stderr, "bonsai-train-drafter: %s\n", err);
        return 1;
    }
    bn_dtrain *t = bn_dtrain_new(d);
    char taps[128] = "";
    for (int i = 0, at = 0; i < d->cfg.n_taps && at < (int)sizeof taps - 12; i++)
        at += snprintf(taps + at, sizeof taps - (size_t)at, "%s%d", i ? "," : "", d->cfg.tap_layers[i]);
    fprintf(stderr, "bonsai-train-drafter: drafter E %d, %d layer(s), FFN %d, heads %d/%d x %d, Markov rank %d, "
                    "block %d, taps after target layers %s, %lld trained parameters\n",
            d->cfg.n_embd, d->cfg.n_layer, d->cfg.n_ff, d->cfg.n_head, d->cfg.n_head_kv, d->cfg.head_dim,
            d->cfg.markov_rank, d->cfg.block_size, taps, (long long)t->n_params);
    bn_sampler *smp = bn_sampler_new(&o.smp);
    gen_ctx g = {.m = m, .tok = tok, .es = es, .smp = smp, .tap_layers = d->cfg.tap_layers, .n_taps = d->cfg.n_taps,
                 .n_gen = o.n_gen};
    dseq *tr = NULL, *ho = NULL;
    int ntr = o.prompts ? gen_file(&g, o.prompts, o.max_prompts, &tr, err, sizeof err) : 0, nho = 0;
    if (ntr >= 0 && o.text) ntr = text_file(&g, o.text, o.text_ctx, &tr, ntr, err, sizeof err);
    if (ntr >= 0 && o.heldout) nho = gen_file(&g, o.heldout, o.max_prompts, &ho, err, sizeof err);
    int rc = ntr < 0 || nho < 0;
    if (!rc && ho) evaluate(t, ho, nho, "held-out, before");
    if (!rc) rc = train(&o, t, tr, ntr, err, sizeof err) != 0;
    if (!rc) evaluate(t, tr, ntr, "training prompts");
    if (!rc && ho) evaluate(t, ho, nho, "held-out, after");
    if (!rc) rc = bn_dtrain_write(t, o.out, o.wtype, o.convention, m->gguf, err, sizeof err) != 0;
    if (rc) fprintf(stderr, "bonsai-train-drafter: %s\n", err);
    else fprintf(stderr, "bonsai-train-drafter: wrote %s\n", o.out);
    free_seqs(tr, ntr > 0 ? ntr : 0);
    free_seqs(ho, nho > 0 ? nho : 0);
    bn_sampler_free(smp);
    bn_dtrain_free(t);
    bn_engine_state_free(es);
    bn_engine_free(eng);
    bn_drafter_free(d);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    return rc;
}
