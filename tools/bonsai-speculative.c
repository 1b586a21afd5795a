// tools/bonsai-speculative.c — speculative decoding with the target on the CPU or (-ngl N > 0) the
// CUDA engine (the drafter then on the device too); output like llama-speculative-simple (docs/server.md §13;
// loop docs/dspark.md §5.1). --spec-type draft-replay (measurement aid): decode natively first (greedy,
// timed: the "native" line), then run DSpark with the drafter's full work every round but the recorded
// tokens proposed — DSpark speed at forced acceptance, drafter cost included.
#include "spec/dspark.h"
#include "core/engine.h"
#include "core/model.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include "base/args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == '\\' ? '\\' : *p;
        } else *o++ = *p;
    }
    *o = 0;
}

// record_greedy: plain greedy decoding of n tokens after the prompt on ts (through bn_spec with no
// drafts, argmax-only steps: no logits cross to the host), into out; prints the native speed line.
// Returns 0 or -1 with err.
static int record_greedy(bn_engine_state *ts, const int32_t *prompt, int n_prompt, int32_t *out, int n, char *err,
                         size_t errlen) {
    bn_spec_params none = {.type = BN_SPEC_NONE, .no_step_logits = true};
    bn_spec *s = bn_spec_new_engine(ts, NULL, &none, err, errlen);
    if (!s) return -1;
    bn_sampler_params gp = bn_sampler_params_default();
    gp.temperature = 0;
    bn_sampler *g = bn_sampler_new(&gp);
    int rc = bn_spec_prefill(s, prompt, n_prompt, err, errlen), got = 0;
    double t0 = bn_time_ms();
    while (rc == 0 && got < n) {
        int32_t tok[2];
        int k = bn_spec_generate_step(s, g, tok, 2, err, errlen);
        if (k < 0) rc = -1;
        for (int i = 0; i < k && got < n; i++) out[got++] = tok[i];
    }
    double ms = bn_time_ms() - t0;
    if (rc == 0)
        printf("native (recorded for replay): decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", got, ms / 1e3,
               got / (ms / 1e3 + 1e-9));
    bn_sampler_free(g);
    bn_spec_free(s);
    return rc;
}

typedef struct {
    bn_engine_opts eng;
    const char *draft, *prompt;
    int n_predict;
    bool escapes;
    bn_spec_params sp;
    bn_sampler_params smp;
    bn_sampler_args sa;
} spec_opts;

#define O(f) offsetof(spec_opts, f)
static const bn_arg spec_args[] = {
    BN_STR("-md, --model-draft, --spec-draft-model", O(draft), "FILE", "DSpark drafter GGUF"),
    BN_STR("-p, --prompt", O(prompt), "TEXT", "the prompt (required)"),
    BN_TRUE("-e, --escape", O(escapes), "process escapes (\\n, \\t) in the prompt"),
    BN_INT("-n, --n-predict", O(n_predict), "N", "tokens to predict", 0, 1 << 30),
    BN_SEED("-s, --seed", O(smp.seed), "RNG seed"),
    BN_TRUE("--cpu-drafter", O(sp.cpu_drafter), "keep the drafter on the CPU with -ngl N > 0"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-speculative",
    .usage = "usage: bonsai-speculative -m TARGET.gguf [-md DRAFT.gguf] --spec-type T -p PROMPT [options]\n"
             "Speculative decoding with llama-speculative-simple's output; greedy (--temp 0) by default.\n",
    .notes = "With -ngl N > 0 the drafter runs on the GPU too (unless --cpu-drafter).\n"};

// parse_args: the options into o (exits on --help, --version or a bad or missing option).
static void parse_args(spec_opts *o, int argc, char **argv) {
    // no_step_logits: this tool prints tokens only, so verify passes take the engine's argmax per row (--temp 0) or
    // its top_k best logits (sampling with --top-k <= 64)
    *o = (spec_opts){.eng = {.n_ctx = 4096},
                     .n_predict = 64,
                     .sp = {.type = -1, .n_max = 3, .n_min = 0, .p_min = 0, .adaptive = true, .no_step_logits = true,
                            .cpu_snap_bytes = BN_SPEC_CPU_SNAP_BYTES},
                     .smp = bn_sampler_params_default()};
    o->smp.temperature = 0;
    const bn_arg_table tables[] = {BN_TABLE(spec_args, o),
                                   BN_TABLE(bn_engine_args, &o->eng),
                                   BN_TABLE(bn_spec_args, &o->sp),
                                   BN_TABLE(bn_sampler_chain_args, &o->smp),
                                   BN_TABLE(bn_sampler_penalty_args, &o->smp),
                                   BN_TABLE(bn_sampler_breaker_args, &o->sa),
                                   {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o->eng.model || !o->prompt) bn_args_fail(&tool, "-m TARGET.gguf and -p PROMPT are required");
    if (o->eng.n_ctx < 1) bn_args_fail(&tool, "-c must be at least 1");
    if (o->sp.type < 0) bn_args_fail(&tool, "--spec-type is required (draft-dspark | draft-oracle | none)");
    const int type = o->sp.type;
    if ((type == BN_SPEC_DSPARK || type == BN_SPEC_REPLAY) && !o->draft)
        bn_args_fail(&tool, "--spec-type draft-%s needs -md DRAFT.gguf", type == BN_SPEC_DSPARK ? "dspark" : "replay");
    if (type == BN_SPEC_REPLAY && o->smp.temperature != 0)
        bn_args_fail(&tool, "draft-replay replays a greedy run: use --temp 0");
    if (type == BN_SPEC_REPLAY)
        fprintf(stderr, "bonsai-speculative: draft-replay is a MEASUREMENT AID (the drafter runs, the recorded greedy "
                        "tokens are proposed)\n");
    if (type == BN_SPEC_ORACLE)
        fprintf(stderr, "bonsai-speculative: draft-oracle is a MEASUREMENT AID (the target drafts for itself)\n");
    o->sp.n_threads = o->eng.n_threads;
}

// The loaded models and the speculative loop over them.
typedef struct {
    bn_model *m;
    bn_tokenizer *tok;
    bn_drafter *d;
    bn_engine *eng;
    bn_engine_state *ts;
    bn_spec *s;
    int32_t *ids, *replay;
    int n_prompt;
    char *ptext;
} spec_run;

// setup: loads the target, tokenizer, drafter and prompt, opens the engine and the speculative loop (after the
// native run draft-replay records); returns 0 or -1 with err.
static int setup(spec_opts *o, spec_run *r, char *err, size_t errlen) {
    const bool drafter = o->sp.type == BN_SPEC_DSPARK || o->sp.type == BN_SPEC_REPLAY;
    if (!(r->m = bn_model_load(o->eng.model, err, errlen))) return -1;
    if (!(r->tok = bn_tokenizer_from_gguf(r->m->gguf, err, errlen))) return -1;
    if (drafter && !(r->d = bn_drafter_load(o->draft, r->m, err, errlen))) return -1;
    r->ptext = xstrdup(o->prompt);
    if (o->escapes) unescape(r->ptext);
    r->n_prompt = bn_tokenize(r->tok, r->ptext, strlen(r->ptext), true, true, &r->ids);
    if (r->n_prompt < 1) return bn_err(err, errlen, "the prompt has no tokens");
    if (!(r->eng = bn_engine_open_opts(r->m, &o->eng, err, errlen))) return -1;
    if (!(r->ts = bn_engine_state_new(r->eng, o->eng.n_ctx, err, errlen))) return -1;
    if (o->sp.type == BN_SPEC_REPLAY) {
        o->sp.n_replay = o->n_predict + (o->sp.n_max > 0 ? o->sp.n_max : 0) + 2; // the loop overshoots by < a round
        r->replay = xmalloc(sizeof(int32_t) * (size_t)o->sp.n_replay);
        if (record_greedy(r->ts, r->ids, r->n_prompt, r->replay, o->sp.n_replay, err, errlen) != 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            return bn_err(err, errlen, "native run: %s", why);
        }
        o->sp.replay = r->replay;
    }
    return (r->s = bn_spec_new_engine(r->ts, r->d, &o->sp, err, errlen)) ? 0 : -1;
}

// print_stats: llama-speculative-simple's closing lines.
static void print_stats(const spec_run *r, const spec_opts *o, int n_predict, double t0, double t1, double t2) {
    const bn_spec_stats *st = bn_spec_stats_get(r->s);
    printf("\n\n");
    printf("encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", r->n_prompt, (t1 - t0) / 1e3,
           r->n_prompt / ((t1 - t0) / 1e3 + 1e-9));
    printf("decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", n_predict, (t2 - t1) / 1e3,
           n_predict / ((t2 - t1) / 1e3 + 1e-9));
    printf("\n");
    printf("n_draft   = %d\n", o->sp.n_max);
    printf("n_predict = %d\n", n_predict);
    printf("n_drafted = %lld\n", (long long)st->n_drafted);
    printf("n_accept  = %lld\n", (long long)st->n_accept);
    printf("accept    = %.3f%%\n", st->n_drafted ? 100.0 * (double)st->n_accept / (double)st->n_drafted : 0.0);
    printf("\n");
    bn_spec_print_stats(r->s, stdout);
}

int main(int argc, char **argv) {
    spec_opts o;
    parse_args(&o, argc, argv);
    spec_run r = {0};
    char err[512];
    if (setup(&o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    bn_dry_breakers *dry = bn_sampler_args_breakers(&o.smp, &o.sa, r.tok);
    bn_sampler *sampler = bn_sampler_new(&o.smp);
    double t0 = bn_time_ms();
    if (bn_spec_prefill(r.s, r.ids, r.n_prompt, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    double t1 = bn_time_ms();
    fwrite(r.ptext, 1, strlen(r.ptext), stdout);
    int n_predict = 0;
    bool stop = false;
    int32_t out[64];
    char piece[256];
    while (!stop && n_predict <= o.n_predict) {
        int n = bn_spec_generate_step(r.s, sampler, out, 64, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "\nbonsai-speculative: %s\n", err);
            break;
        }
        for (int i = 0; i < n && !stop; i++) {
            n_predict++;
            int len = bn_token_to_piece(r.tok, out[i], piece, sizeof piece, false);
            if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
            if (bn_token_is_eog(r.tok, out[i])) stop = true;
        }
        fflush(stdout);
    }
    print_stats(&r, &o, n_predict, t0, t1, bn_time_ms());
    bn_sampler_free(sampler);
    bn_dry_breakers_free(dry);
    bn_spec_free(r.s);
    bn_engine_state_free(r.ts);
    bn_engine_free(r.eng);
    bn_drafter_free(r.d);
    free(r.replay);
    bn_tokenizer_free(r.tok);
    bn_model_free(r.m);
    free(r.ids);
    free(r.ptext);
    return 0;
}
