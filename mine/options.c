// mine/options.c — shared flags of the mining/evaluation tools.
#include "mine/options.h"
#include "mine/source_http.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

bn_mine_opts bn_mine_opts_default(void) {
    bn_mine_opts o = {.mine = bn_mine_params_default(), .prompts = bn_prompt_opts_default(), .n_ctx = 6000, .n_parallel = 1,
                      .timeout_s = 1800};
    return o;
}

// one_source: the HTTP source with --server, else the in-process one on engine, or on the CPU with o's threads.
static bn_source *one_source(const bn_mine_opts *o, const struct bn_model *m, const struct bn_tokenizer *tok,
                             const struct bn_engine *engine, struct bn_step_batcher *batcher, char *err,
                             size_t errlen) {
    if (o->server_url) return bn_source_http(o->server_url, tok, o->timeout_s, err, errlen);
    if (engine) return bn_source_engine(engine, tok, o->n_ctx, batcher, err, errlen);
    return bn_source_inprocess(m, tok, o->n_ctx, o->n_threads > 0 ? o->n_threads : bn_n_threads_default());
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
    int threads = o->n_threads > 0 ? o->n_threads : bn_n_threads_default();
    bn_mine_opts one = *o;
    one.n_threads = threads / n > 0 ? threads / n : 1;
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

void bn_mine_opts_help(FILE *f) {
    fprintf(f,
            "  -m, --model PATH            GGUF model (required)\n"
            "  -p, --prompts PATH          prompts JSONL (string | {prompt} | ShareGPT | OpenAI messages; optional source)\n"
            "  --max-prompts N             stop after N prompts (default: all)\n"
            "  --template antidoom|none    append antidoom's step-by-step instruction to the user turn (default none)\n"
            "  --no-skip-agentic           keep sources containing bfcl/tau/browse/search (skipped by default)\n"
            "  --max-prompt-tokens N       cut longer prompts' last user turn; rows marked [TRIMMED_SOURCE_PROMPT] (default 2000)\n"
            "  --system TEXT               system message (default none)\n"
            "  --thinking 1|0|-1           chat template: <think> open (1, default), closed (0), plain ChatML (-1)\n"
            "  --mode sample|prime         plain sampling (antidoom) or primed contexts (Bonsai), default sample\n"
            "  --prime-phrase TEXT         phrase repeated in primed contexts (default \"%s\")\n"
            "  --prime-phrases FILE        one phrase per line (\\n = newline); prompt i uses line i mod count\n"
            "  --phrase-from-prefix        phrase = the greedy prefix's last sentence when it has 20-200 chars\n"
            "  --prime-repeats N           copies of the phrase (default 3)\n"
            "  --scan completion|assistant prime mode: detector over the completion only (default) or also\n"
            "                              the primed assistant text (onset there -> first generated token)\n"
            "  --prime-prefix-tokens N     greedy prefix budget before the phrase (default 48)\n"
            "  --temp T                    temperature (default 0.1; <= 0 greedy)\n"
            "  --temps A,B,...             cycle temperatures over prompts (prompt i uses entry i mod count)\n"
            "  --top-k N / --top-p P / --min-p P   sampler chain (default 50 / 1.0 / 0.01)\n"
            "  --repeat-penalty X / --frequency-penalty X / --presence-penalty X   llama.cpp's repetition penalties\n"
            "                              before the chain (default off: 1 / 0 / 0; bonsai-eval-loops only)\n"
            "  --repeat-last-n N           tokens of prompt + generation they count (default 64, -1 all, 0 off)\n"
            "  --dry-multiplier X / --dry-base X / --dry-allowed-length N / --dry-penalty-last-n N   llama.cpp's DRY\n"
            "                              (default off: 0 / 1.75 / 2 / 64; -1 all; bonsai-eval-loops only)\n"
            "  --dry-sequence-breaker S    DRY sequence breaker, repeatable, replaces \\n : \" * (\"none\": none)\n"
            "  --seed N                    base seed; prompt i uses seed + i (default 0)\n"
            "  --n-predict N               max new tokens (default 4000)\n"
            "  --n-probs K                 raw top-K recorded per position (default 20)\n"
            "  --ctx N                     context size of the in-process engine (default 6000)\n"
            "  -t, --threads N             CPU threads (default: all)\n"
            "  -ngl, --gpu-layers N        generate in-process on the GPU (CUDA builds): 0 all on the CPU (default),\n"
            "                              >= the layer count all on the GPU, in between the last N layers;\n"
            "                              with --parallel N the prompts' decode steps run batched\n"
            "  --server URL                generate with a llama-server (http://host:port) /completion; -m still\n"
            "                              gives the tokenizer; the server must run the same model\n"
            "  --parallel N                prompts in flight at once (default 1); with --server match its -np,\n"
            "                              in-process each gets its own state and threads/N threads\n"
            "  --timeout S                 per-request timeout with --server (default 1800)\n"
            "  --min-repeats N / --min-total-repeated N / --max-period N   detector (default 4 / 60 / 1024)\n"
            "  --chosen-min-p P            relative min-p floor on chosen tokens (default off)\n"
            "  --chosen-max-tokens N       (default 20)\n"
            "  --chosen-min-decoded-chars N (default 1)\n"
            "  --chosen-require-alnum      require an alphanumeric char in chosen surfaces\n"
            "  --chosen-skip-raw-substring S  skip chosen tokens whose raw string contains S (repeatable)\n",
            BN_DEFAULT_PRIME_PHRASE);
}

// Value of a flag: argv[*i + 1]; NULL (err) when missing.
static const char *value(int argc, char **argv, int *i, char *err, size_t errlen) {
    if (*i + 1 >= argc) { bn_err(err, errlen, "option '%s' needs a value (see --help)", argv[*i]); return NULL; }
    return argv[++*i];
}

// to_int / to_float: v (the value of flag) strictly parsed and in lo..hi into *out; 0, or -1 with err
static int to_int(const char *v, long long lo, long long hi, int *out, const char *flag, char *err, size_t errlen) {
    long long x;
    if (bn_parse_int(flag, v, lo, hi, &x, err, errlen) != 0) return -1;
    *out = (int)x;
    return 0;
}

static int to_float(const char *v, double lo, double hi, float *out, const char *flag, char *err, size_t errlen) {
    double x;
    if (bn_parse_float(flag, v, lo, hi, &x, err, errlen) != 0) return -1;
    *out = (float)x;
    return 0;
}

int bn_mine_opts_flag(bn_mine_opts *o, int argc, char **argv, int *i, char *err, size_t errlen) {
    const char *a = argv[*i], *v;
    bn_mine_params *mp = &o->mine;
#define VAL() do { if (!(v = value(argc, argv, i, err, errlen))) return -1; } while (0)
#define INT(dst, lo, hi) do { VAL(); if (to_int(v, lo, hi, &(dst), a, err, errlen)) return -1; } while (0)
#define FLT(dst, lo, hi) do { VAL(); if (to_float(v, lo, hi, &(dst), a, err, errlen)) return -1; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model_path = v; }
    else if (!strcmp(a, "-p") || !strcmp(a, "--prompts")) { VAL(); o->prompts_path = v; }
    else if (!strcmp(a, "--max-prompts")) INT(o->prompts.max_prompts, 0, INT32_MAX);
    else if (!strcmp(a, "--template")) {
        VAL();
        if (!strcmp(v, "antidoom")) o->prompts.template_ = BN_ANTIDOOM_TEMPLATE;
        else if (!strcmp(v, "none")) o->prompts.template_ = NULL;
        else return bn_err(err, errlen, "--template: expected antidoom or none");
    } else if (!strcmp(a, "--no-skip-agentic")) o->prompts.skip_agentic = false;
    else if (!strcmp(a, "--system")) { VAL(); mp->system = v; }
    else if (!strcmp(a, "--thinking")) {
        INT(mp->thinking, -1, 1);
    } else if (!strcmp(a, "--mode")) {
        VAL();
        if (!strcmp(v, "sample")) mp->mode = BN_MINE_SAMPLE;
        else if (!strcmp(v, "prime")) mp->mode = BN_MINE_PRIME;
        else return bn_err(err, errlen, "--mode: expected sample or prime");
    } else if (!strcmp(a, "--prime-phrase")) { VAL(); mp->prime_phrase = v; }
    else if (!strcmp(a, "--prime-phrases")) {
        VAL();
        if (load_phrases(o, v, err, errlen) < 0) return -1;
    } else if (!strcmp(a, "--phrase-from-prefix")) mp->phrase_from_prefix = true;
    else if (!strcmp(a, "--prime-repeats")) INT(mp->prime_repeats, 0, 1 << 20);
    else if (!strcmp(a, "--prime-prefix-tokens")) INT(mp->prime_prefix_tokens, 0, 1 << 20);
    else if (!strcmp(a, "--max-prompt-tokens")) INT(mp->max_prompt_tokens, 0, INT32_MAX);
    else if (!strcmp(a, "--temp")) FLT(mp->gen.temperature, -1e6, 1e6);
    else if (!strcmp(a, "--temps")) {
        VAL();
        o->n_temps = 0;
        for (const char *q = v; *q;) {
            char item[64];
            size_t len = strcspn(q, ",");
            double t;
            if (len >= sizeof item || o->n_temps == 32) return bn_err(err, errlen, "--temps: expected up to 32 comma-separated numbers");
            memcpy(item, q, len), item[len] = 0;
            if (bn_parse_float(a, item, -1e6, 1e6, &t, err, errlen) != 0) return -1;
            o->temps[o->n_temps++] = (float)t;
            q += len + (q[len] == ',');
        }
        if (o->n_temps == 0) return bn_err(err, errlen, "--temps: '%s' is not a comma-separated list of numbers", v);
    }
    else if (!strcmp(a, "--top-k")) INT(mp->gen.top_k, -1, INT32_MAX);
    else if (!strcmp(a, "--top-p")) FLT(mp->gen.top_p, 0, 1);
    else if (!strcmp(a, "--min-p")) FLT(mp->gen.min_p, 0, 1);
    else if (!strcmp(a, "--repeat-last-n")) INT(mp->gen.repeat_last_n, -1, INT32_MAX);
    else if (!strcmp(a, "--repeat-penalty")) FLT(mp->gen.repeat_penalty, 1e-6, 1e6);
    else if (!strcmp(a, "--frequency-penalty")) FLT(mp->gen.frequency_penalty, -1e6, 1e6);
    else if (!strcmp(a, "--presence-penalty")) FLT(mp->gen.presence_penalty, -1e6, 1e6);
    else if (!strcmp(a, "--dry-multiplier")) FLT(mp->gen.dry_multiplier, 0, 1e6);
    else if (!strcmp(a, "--dry-base")) FLT(mp->gen.dry_base, 1, 1e6);
    else if (!strcmp(a, "--dry-allowed-length")) INT(mp->gen.dry_allowed_length, 0, INT32_MAX);
    else if (!strcmp(a, "--dry-penalty-last-n")) INT(mp->gen.dry_penalty_last_n, -1, INT32_MAX);
    else if (!strcmp(a, "--dry-sequence-breaker")) { // llama.cpp's: each one replaces the defaults; "none": none
        VAL();
        if (o->n_dry_breakers == 32) return bn_err(err, errlen, "--dry-sequence-breaker: at most 32");
        if (strcmp(v, "none")) o->dry_breakers[o->n_dry_breakers++] = v;
        mp->gen.dry_breakers = o->dry_breakers;
        mp->gen.n_dry_breakers = o->n_dry_breakers;
    }
    else if (!strcmp(a, "--seed")) {
        VAL();
        long long seed;
        if (bn_parse_int(a, v, 0, INT64_MAX, &seed, err, errlen) != 0) return -1;
        mp->gen.seed = (uint64_t)seed;
    } else if (!strcmp(a, "--n-predict")) INT(mp->gen.n_predict, -1, 1 << 30);
    else if (!strcmp(a, "--n-probs")) INT(mp->gen.n_probs, 0, 65536);
    else if (!strcmp(a, "--ctx")) INT(o->n_ctx, 0, INT32_MAX);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT(o->n_threads, 0, 4096);
    else if (!strcmp(a, "--server")) { VAL(); o->server_url = v; }
    else if (!strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers")) {
        INT(o->n_gpu_layers, 0, INT32_MAX);
    }
    else if (!strcmp(a, "--timeout")) INT(o->timeout_s, 0, INT32_MAX);
    else if (!strcmp(a, "--parallel")) {
        INT(o->n_parallel, 1, 256);
    }
    else if (!strcmp(a, "--min-repeats")) INT(mp->rep.min_repeats, 1, 1 << 20);
    else if (!strcmp(a, "--min-total-repeated")) INT(mp->rep.min_total_repeated, 0, 1 << 30);
    else if (!strcmp(a, "--max-period")) INT(mp->rep.max_period, 1, 1 << 20);
    else if (!strcmp(a, "--chosen-min-p")) {
        float f;
        FLT(f, 0, 1);
        mp->chosen.min_p = f;
    } else if (!strcmp(a, "--chosen-max-tokens")) INT(mp->chosen.max_tokens, 1, 1 << 20);
    else if (!strcmp(a, "--chosen-min-decoded-chars")) INT(mp->chosen.min_decoded_chars, 0, 1 << 20);
    else if (!strcmp(a, "--chosen-require-alnum")) mp->chosen.require_alnum = true;
    else if (!strcmp(a, "--chosen-skip-raw-substring")) {
        VAL();
        if (mp->chosen.n_skip_raw >= 16) return bn_err(err, errlen, "too many --chosen-skip-raw-substring");
        o->skip_raw[mp->chosen.n_skip_raw++] = v;
        mp->chosen.skip_raw_substrings = o->skip_raw;
    } else return 0;
#undef VAL
#undef INT
#undef FLT
    return 1;
}

int bn_mine_opts_engine(const bn_mine_opts *o, const struct bn_model *m, bn_engine **eng, bn_step_batcher **batch,
                        char *err, size_t errlen) {
    *eng = NULL, *batch = NULL;
    if (o->n_gpu_layers <= 0 || o->server_url) return 0;
    *eng = bn_engine_open(m, o->n_gpu_layers, o->n_threads > 0 ? o->n_threads : bn_n_threads_default(), err, errlen);
    if (!*eng) return -1;
    if (!strcmp(bn_engine_name(*eng), "CPU")) { // no device (bn_engine_open warned): the CPU sources
        bn_engine_free(*eng);
        *eng = NULL;
        return 0;
    }
    if (o->n_parallel > 1) *batch = bn_step_batcher_new(2000); // the longest a batch waits for its sequences, us
    return 0;
}
