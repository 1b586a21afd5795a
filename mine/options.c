// mine/options.c — shared options of the mining/evaluation tools (base/args.h tables).
#include "mine/options.h"
#include "core/sampler.h"
#include "mine/source_http.h"
#include "core/chat.h"
#include "core/model.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

bn_mine_opts bn_mine_opts_default(void) {
    bn_mine_opts o = {.mine = bn_mine_params_default(), .prompts = bn_prompt_opts_default(), .eng = {.n_ctx = 6000},
                      .n_parallel = 1, .timeout_s = 1800};
    o.mine.thinking = BN_THINKING_AUTO;
    return o;
}

void bn_mine_opts_for_model(bn_mine_opts *o, const struct bn_model *m) {
    if (o->mine.thinking == BN_THINKING_AUTO)
        o->mine.thinking = bn_chat_thinking_for_template(gguf_get_str(m->gguf, "tokenizer.chat_template"));
}

// one_source: the HTTP source with --server, else the in-process one on engine, or on the CPU with o's threads.
static bn_source *one_source(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                             const struct bn_engine *engine, struct bn_step_batcher *batcher, char *err,
                             size_t errlen) {
    if (o->server_url) return bn_source_http(o->server_url, tok, o->timeout_s, err, errlen);
    if (engine) return bn_source_engine(engine, tok, o->eng.n_ctx, batcher, err, errlen);
    return bn_source_inprocess(m, tok, o->eng.n_ctx, o->eng.n_threads > 0 ? o->eng.n_threads : bn_n_threads_default());
}

bn_mine_params bn_mine_opts_for_prompt(const bn_mine_opts *o, int i) {
    bn_mine_params mp = o->mine;
    mp.gen.seed = o->mine.gen.seed + (uint64_t)i;
    if (o->n_phrases > 0) mp.prime_phrase = o->phrases[i % o->n_phrases];
    if (o->n_temps > 0) mp.gen.temperature = o->temps[i % o->n_temps];
    return mp;
}

void bn_mine_opts_free(bn_mine_opts *o) {
    for (int i = 0; i < o->n_phrases; i++) free(o->phrases[i]);
    free(o->phrases);
    o->phrases = NULL;
    o->n_phrases = 0;
}

// Loads non-empty lines of path as phrases ("\n" in a line stands for a newline); returns 0 or -1.
static int load_phrases(bn_mine_opts *o, const char *path, char *err, size_t errlen) {
    bn_lines *l = bn_lines_open(path, err, errlen);
    if (!l) return -1;
    const char *line;
    size_t len;
    while ((line = bn_lines_next(l, &len))) {
        if (len == 0) continue;
        char *ph = xmalloc(len + 1);
        size_t k = 0;
        for (size_t i = 0; i < len; i++) {
            if (line[i] == '\\' && i + 1 < len && line[i + 1] == 'n') { ph[k++] = '\n'; i++; }
            else ph[k++] = line[i];
        }
        ph[k] = 0;
        o->phrases = xrealloc(o->phrases, (size_t)(o->n_phrases + 1) * sizeof *o->phrases);
        o->phrases[o->n_phrases++] = ph;
    }
    bool failed = bn_lines_failed(l, err, errlen);
    bn_lines_close(l);
    if (failed) return -1;
    if (o->n_phrases == 0) return bn_err(err, errlen, "%s: no phrases", path);
    return 0;
}

bn_source **bn_mine_opts_sources(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                                 const struct bn_engine *engine, struct bn_step_batcher *batcher, char *err,
                                 size_t errlen) {
    int n = o->n_parallel > 0 ? o->n_parallel : 1;
    if (engine && !o->server_url && n > 1 && !batcher) {
        bn_err(err, errlen, "--parallel %d on a device engine needs a step batcher", n);
        return NULL;
    }
    bn_source **v = xcalloc((size_t)n, sizeof *v);
    int threads = o->eng.n_threads > 0 ? o->eng.n_threads : bn_n_threads_default();
    bn_mine_opts one = *o;
    one.eng.n_threads = threads / n > 0 ? threads / n : 1;
    for (int k = 0; k < n; k++) {
        if (!(v[k] = one_source(&one, m, tok, engine, n > 1 ? batcher : NULL, err, errlen))) {
            for (int j = 0; j < k; j++) bn_source_free(v[j]);
            free(v);
            return NULL;
        }
    }
    return v;
}

void bn_mine_opts_sources_free(const bn_mine_opts *o, bn_source **srcs) {
    if (!srcs) return;
    for (int k = 0; k < (o->n_parallel > 0 ? o->n_parallel : 1); k++) bn_source_free(srcs[k]);
    free(srcs);
}

bool bn_mine_opts_greedy(const bn_mine_opts *o) {
    if (o->n_temps == 0) return o->mine.gen.temperature <= 0;
    for (int i = 0; i < o->n_temps; i++)
        if (o->temps[i] > 0) return false;
    return true;
}

// template_fn: --template antidoom|none.
static int template_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_mine_opts *o = base;
    if (!strcmp(v, "antidoom")) o->prompts.template_ = BN_ANTIDOOM_TEMPLATE;
    else if (!strcmp(v, "none")) o->prompts.template_ = NULL;
    else return bn_err(err, errlen, "'%s' is not one of antidoom|none", v);
    return 0;
}

// scan_fn: --scan completion|assistant.
static int scan_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_mine_opts *o = base;
    if (strcmp(v, "completion") && strcmp(v, "assistant"))
        return bn_err(err, errlen, "'%s' is not one of completion|assistant", v);
    o->mine.scan_assistant = !strcmp(v, "assistant");
    return 0;
}

// phrases_fn: --prime-phrases FILE.
static int phrases_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    return load_phrases(base, v, err, errlen);
}

// temps_fn: --temps A,B,...: up to 32 comma-separated temperatures.
static int temps_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_mine_opts *o = base;
    o->n_temps = 0;
    for (const char *q = v; *q;) {
        char item[64], why[256];
        size_t len = strcspn(q, ",");
        double t;
        if (len >= sizeof item || o->n_temps == 32)
            return bn_err(err, errlen, "expected up to 32 comma-separated numbers");
        memcpy(item, q, len), item[len] = 0;
        if (bn_args_real(opt, item, -1e6, 1e6, &t, why, sizeof why) != 0)
            return bn_err(err, errlen, "'%s' is not a comma-separated list of numbers", v);
        o->temps[o->n_temps++] = (float)t;
        q += len + (q[len] == ',');
    }
    if (o->n_temps == 0) return bn_err(err, errlen, "'%s' is not a comma-separated list of numbers", v);
    return 0;
}

// skip_raw_fn: --chosen-skip-raw-substring S (repeatable, at most 16).
static int skip_raw_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_mine_opts *o = base;
    bn_chosen_params *c = &o->mine.chosen;
    if (c->n_skip_raw >= 16) return bn_err(err, errlen, "at most 16");
    o->skip_raw[c->n_skip_raw++] = v;
    c->skip_raw_substrings = o->skip_raw;
    return 0;
}

// breaker_fn: --dry-sequence-breaker S: llama.cpp's: each one replaces the defaults; "none": none.
static int breaker_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_mine_opts *o = base;
    if (o->n_dry_breakers == 32) return bn_err(err, errlen, "at most 32");
    if (strcmp(v, "none")) o->dry_breakers[o->n_dry_breakers++] = v;
    o->mine.gen.dry_breakers = o->dry_breakers;
    o->mine.gen.n_dry_breakers = o->n_dry_breakers;
    return 0;
}

#define O(f) offsetof(bn_mine_opts, f)
const bn_arg bn_mine_args[] = {
    BN_SECTION("prompts"),
    BN_STR("-p, --prompts", O(prompts_path), "PATH",
           "prompts JSONL (string | {prompt} | ShareGPT | OpenAI messages; optional source) (required)"),
    BN_INT("--max-prompts", O(prompts.max_prompts), "N", "stop after N prompts (0: all)", 0, INT32_MAX),
    BN_FN("--template", template_fn, "antidoom|none",
          "append antidoom's step-by-step instruction to the user turn (default none)"),
    BN_FALSE("--no-skip-agentic", O(prompts.skip_agentic),
             "keep sources containing bfcl/tau/browse/search (skipped by default)"),
    BN_INT("--max-prompt-tokens", O(mine.max_prompt_tokens), "N",
           "cut longer prompts' last user turn; rows marked [TRIMMED_SOURCE_PROMPT] (0: off)", 0, INT32_MAX),
    BN_STR("--system", O(mine.system), "TEXT", "system message (default none)"),
    BN_INT("--thinking", O(mine.thinking), "1|0|-1",
           "chat template: <think> open (1), closed (0), plain ChatML (-1); default: what the model's own template "
           "has (<think> open when it has a thinking block, else plain ChatML)",
           -1, 1),
    BN_SECTION("generation"),
    BN_CHOICE("--mode", O(mine.mode), "sample|prime", "plain sampling (antidoom) or primed contexts (Bonsai)"),
    BN_SAMPLER_CHAIN_ARGS(bn_mine_opts, mine.gen.),
    BN_FN("--temps", temps_fn, "A,B,...", "cycle temperatures over prompts (prompt i uses entry i mod count)"),
    BN_SEED("-s, --seed", O(mine.gen.seed), "base seed; prompt i uses seed + i"),
    BN_INT("-n, --n-predict", O(mine.gen.n_predict), "N", "max new tokens", -1, 1 << 30),
    BN_INT("--n-probs", O(mine.gen.n_probs), "K", "raw top-K recorded per position", 0, 65536),
    BN_SECTION("priming (--mode prime)"),
    BN_STR("--prime-phrase", O(mine.prime_phrase), "TEXT", "phrase repeated in primed contexts"),
    BN_FN("--prime-phrases", phrases_fn, "FILE", "one phrase per line (\\n = newline); prompt i uses line i mod count"),
    BN_TRUE("--phrase-from-prefix", O(mine.phrase_from_prefix),
            "phrase = the greedy prefix's last sentence when it has 20-200 chars"),
    BN_INT("--prime-repeats", O(mine.prime_repeats), "N", "copies of the phrase", 0, 1 << 20),
    BN_FN("--scan", scan_fn, "completion|assistant",
          "detector over the completion only (default) or also the primed assistant text (onset there -> first "
          "generated token)"),
    BN_INT("--prime-prefix-tokens", O(mine.prime_prefix_tokens), "N", "greedy prefix budget before the phrase", 0,
           1 << 20),
    BN_SECTION("where the generation runs (in-process by default; -ngl above)"),
    BN_STR("--server", O(server_url), "URL",
           "generate with a llama-server (http://host:port) /completion; -m still gives the tokenizer; the server must "
           "run the same model"),
    BN_INT("--parallel", O(n_parallel), "N",
           "prompts in flight at once; with --server match its -np, in-process each gets its own state and threads/N "
           "threads (with -ngl their decode steps run batched)",
           1, 256),
    BN_INT("--timeout", O(timeout_s), "S", "per-request timeout with --server, seconds", 0, INT32_MAX),
    BN_SECTION("loop detector and chosen tokens"),
    BN_INT("--min-repeats", O(mine.rep.min_repeats), "N", "copies of the repeated unit, the first counted", 1, 1 << 20),
    BN_INT("--min-total-repeated", O(mine.rep.min_total_repeated), "N", "repeats * period must reach N characters", 0,
           1 << 30),
    BN_INT("--max-period", O(mine.rep.max_period), "N", "longest repeated unit, characters", 1, 1 << 20),
    BN_CHOICE("--detect", O(mine.detect), "verbatim|frame|both",
              "whose loops are mined: the verbatim detector's, the frame-loop detector's, or both (verbatim first); "
              "evaluation reports both rates whatever this says"),
    BN_INT("--frame-min-repeats", O(mine.frame.min_repeats), "N", "frame loops: entries into the frame, the first "
           "counted", 2, 1 << 20),
    BN_INT("--frame-min-repeats-verbatim", O(mine.frame.min_repeats_verbatim), "N",
           "frame loops: the same when every period equals the next", 2, 1 << 20),
    BN_DOUBLE("--frame-min-similarity", O(mine.frame.min_similarity), "S",
              "frame loops: 1 - token edit distance / length of every two successive periods, at least", 0, 1),
    BN_INT("--frame-max-period", O(mine.frame.max_period), "N", "frame loops: tokens between two entries, at most", 1,
           1 << 16),
    BN_DOUBLE("--chosen-min-p", O(mine.chosen.min_p), "P", "relative min-p floor on chosen tokens (0: off)", 0, 1),
    BN_INT("--chosen-max-tokens", O(mine.chosen.max_tokens), "N", "chosen tokens per row at most", 1, 1 << 20),
    BN_INT("--chosen-min-decoded-chars", O(mine.chosen.min_decoded_chars), "N",
           "a chosen token's stripped text has at least N characters", 0, 1 << 20),
    BN_TRUE("--chosen-require-alnum", O(mine.chosen.require_alnum), "require an alphanumeric char in chosen surfaces"),
    BN_FN("--chosen-skip-raw-substring", skip_raw_fn, "S",
          "skip chosen tokens whose raw string contains S (repeatable)"),
    {0}};

const bn_arg bn_mine_penalty_args[] = {
    BN_SECTION("repetition penalties and DRY (llama.cpp's; off by default)"),
    BN_SAMPLER_PENALTY_ARGS(bn_mine_opts, mine.gen.),
    BN_FN("--dry-sequence-breaker", breaker_fn, "S",
          "DRY sequence breaker, repeatable; replaces the defaults \\n : \" * (\"none\": none)"),
    {0}};
#undef O

int bn_mine_opts_engine(const bn_mine_opts *o, const struct bn_model *m, bn_engine **eng, bn_step_batcher **batch,
                        char *err, size_t errlen) {
    *eng = NULL, *batch = NULL;
    if (o->server_url && o->eng.n_lora > 0)
        return bn_err(err, errlen, "--lora applies to in-process generation (a --server applies its own adapters)");
    if (o->server_url && o->eng.f32_act)
        return bn_err(err, errlen, "--f32-activations applies to in-process generation (a --server runs its own)");
    if (bn_engine_opts_f32_activations(&o->eng, err, errlen)) return -1; // before any state is made
    if ((o->eng.n_gpu_layers <= 0 && o->eng.n_lora == 0) || o->server_url) return 0;
    *eng = bn_engine_open_opts(m, &o->eng, err, errlen);
    if (!*eng) return -1;
    // no device (bn_engine_open warned): the CPU sources; with adapters the one CPU engine that applies them
    if (!strcmp(bn_engine_name(*eng), "CPU") && o->eng.n_lora == 0) {
        bn_engine_free(*eng);
        *eng = NULL;
        return 0;
    }
    if (o->n_parallel > 1) *batch = bn_step_batcher_new(2000); // the longest a batch waits for its sequences, us
    return 0;
}

int bn_mine_gen_open(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok, bn_mine_gen *g,
                     char *err, size_t errlen) {
    *g = (bn_mine_gen){0};
    if (bn_mine_opts_engine(o, m, &g->eng, &g->batch, err, errlen)) return -1;
    if (!(g->srcs = bn_mine_opts_sources(o, m, tok, g->eng, g->batch, err, errlen))) {
        bn_mine_gen_close(o, g);
        return -1;
    }
    return 0;
}

void bn_mine_gen_close(const bn_mine_opts *o, bn_mine_gen *g) {
    bn_mine_opts_sources_free(o, g->srcs);
    bn_step_batcher_free(g->batch);
    bn_engine_free(g->eng);
    *g = (bn_mine_gen){0};
}
