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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-speculative -m TARGET.gguf [-md DRAFT.gguf] --spec-type T -p PROMPT [options]\n"
            "  --spec-type T            draft-dspark (needs -md) | draft-oracle (MEASUREMENT AID: the target's own\n"
            "                           greedy continuation from a second target state; forces acceptance) |\n"
            "                           draft-replay (MEASUREMENT AID, needs -md and --temp 0: decodes natively\n"
            "                           first, then runs the drafter every round but proposes the recorded\n"
            "                           tokens; forces acceptance with the drafter's cost included) | none\n"
            "  --spec-draft-n-max N     drafts per round (default 3; clamped to the drafter's block size)\n"
            "  --spec-draft-n-min N     shorter drafts are not verified (default 0)\n"
            "  --spec-draft-p-min P     confidence-head truncation (default 0 = off)\n"
            "  --no-adaptive            always draft n-max (default: an online cost model shortens or switches\n"
            "                           drafting off when it does not pay)\n"
            "  --spec-snap-mem MIB      CPU target: roll rejected drafts back to a snapshot kept after every verified\n"
            "                           token while n-max + 1 snapshots fit in MIB MiB (default 256); beyond, or\n"
            "                           0: restore the state before the verify and re-run the accepted tokens\n"
            "  -n N                     tokens to predict (default 64)   -c N  context (default 4096)\n"
            "  --temp F (default 0 = greedy)  --top-k N  --top-p F  --min-p F  --seed N   -t N threads\n"
            "  --repeat-penalty F (1 = off)  --frequency-penalty F  --presence-penalty F (0 = off)  --repeat-last-n N\n"
            "                           llama.cpp's repetition penalties over the last N tokens (64; -1 all)\n"
            "  --dry-multiplier F (0 = off)  --dry-base F (1.75)  --dry-allowed-length N (2)  --dry-penalty-last-n N\n"
            "                           (64; -1 all)  --dry-sequence-breaker S (repeatable; \"none\"): llama.cpp's DRY\n"
            "  -e                       process escapes (\\n, \\t) in the prompt\n"
            "  -ngl N                   target layers on the GPU (CUDA builds): 0 all on the CPU (default), >= its\n"
            "                           layer count all on the GPU, in between the last N layers + the output head\n"
            "                           on the GPU and the first layers on the CPU; with N > 0 the drafter runs on\n"
            "                           the GPU too\n"
            "  --cpu-drafter            keep the drafter on the CPU with -ngl N > 0\n");
}

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

int main(int argc, char **argv) {
    const char *mpath = NULL, *dpath = NULL, *prompt = NULL, *stype = NULL;
    int n_predict_max = 64, n_ctx = 4096, n_threads = 0, escapes = 0, n_gpu_layers = 0;
    // no_step_logits: this tool prints tokens only, so verify passes take the engine's argmax per row (--temp 0) or
    // its top_k best logits (sampling with --top-k <= 64)
    bn_spec_params sp = {.type = -1, .n_max = 3, .n_min = 0, .p_min = 0, .adaptive = true, .no_step_logits = true,
                         .cpu_snap_bytes = BN_SPEC_CPU_SNAP_BYTES};
    bn_sampler_args sa = {0};
    bn_sampler_params smp = bn_sampler_params_default();
    smp.temperature = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char err[512];
        int r = v ? bn_sampler_arg(a, v, &smp, &sa, err, sizeof err) : 0; // penalties and DRY
        if (r < 0) { fprintf(stderr, "bonsai-speculative: %s\n", err); return 1; }
        if (r > 0) { i++; continue; }
#define OPT(name) (strcmp(a, name) == 0 && v && ++i)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (OPT("-m") || OPT("--model")) mpath = v;
        else if (OPT("-md") || OPT("--model-draft") || OPT("--spec-draft-model")) dpath = v;
        else if (OPT("--spec-type")) stype = v;
        else if (OPT("--spec-draft-n-max") || OPT("--draft-max") || OPT("--draft")) sp.n_max = (int)bn_arg_int("bonsai-speculative", a, v, 0, 64);
        else if (OPT("--spec-draft-n-min") || OPT("--draft-min")) sp.n_min = (int)bn_arg_int("bonsai-speculative", a, v, 0, 64);
        else if (OPT("--spec-draft-p-min") || OPT("--draft-p-min")) sp.p_min = (float)bn_arg_float("bonsai-speculative", a, v, 0, 1);
        else if (OPT("-p") || OPT("--prompt")) prompt = v;
        else if (OPT("-n") || OPT("--n-predict")) n_predict_max = (int)bn_arg_int("bonsai-speculative", a, v, 0, 1 << 30);
        else if (OPT("-c") || OPT("--ctx-size")) n_ctx = (int)bn_arg_int("bonsai-speculative", a, v, 1, INT32_MAX);
        else if (OPT("-t") || OPT("--threads")) n_threads = (int)bn_arg_int("bonsai-speculative", a, v, 0, 4096);
        else if (OPT("-ngl") || OPT("--gpu-layers") || OPT("--n-gpu-layers")) n_gpu_layers = (int)bn_arg_int("bonsai-speculative", a, v, 0, INT32_MAX);
        else if (OPT("--temp")) smp.temperature = (float)bn_arg_float("bonsai-speculative", a, v, -1e6, 1e6);
        else if (OPT("--top-k")) smp.top_k = (int)bn_arg_int("bonsai-speculative", a, v, -1, INT32_MAX);
        else if (OPT("--top-p")) smp.top_p = (float)bn_arg_float("bonsai-speculative", a, v, 0, 1);
        else if (OPT("--min-p")) smp.min_p = (float)bn_arg_float("bonsai-speculative", a, v, 0, 1);
        else if (OPT("--seed") || OPT("-s")) smp.seed = (uint64_t)bn_arg_int("bonsai-speculative", a, v, 0, INT64_MAX);
        else if (OPT("--spec-snap-mem")) sp.cpu_snap_bytes = (size_t)bn_arg_int("bonsai-speculative", a, v, 0, 1 << 20) << 20;
        else if (strcmp(a, "--no-adaptive") == 0) sp.adaptive = false;
        else if (strcmp(a, "--cpu-drafter") == 0) sp.cpu_drafter = true;
        else if (strcmp(a, "-e") == 0 || strcmp(a, "--escape") == 0) escapes = 1;
        else {
            bn_arg_unknown("bonsai-speculative", a);
        }
#undef OPT
    }
    if (!mpath || !prompt) {
        usage(stderr);
        return 1;
    }
    if (!stype) {
        fprintf(stderr, "bonsai-speculative: --spec-type is required (draft-dspark | draft-oracle | none)\n");
        return 1;
    }
    sp.type = bn_spec_type_from_name(stype);
    if (sp.type < 0) {
        fprintf(stderr, "bonsai-speculative: unknown --spec-type '%s'\n", stype);
        return 1;
    }
    const bool drafter = sp.type == BN_SPEC_DSPARK || sp.type == BN_SPEC_REPLAY;
    if (drafter && !dpath) {
        fprintf(stderr, "bonsai-speculative: --spec-type %s needs -md DRAFT.gguf\n", stype);
        return 1;
    }
    if (sp.type == BN_SPEC_REPLAY && smp.temperature != 0) {
        fprintf(stderr, "bonsai-speculative: draft-replay replays a greedy run: use --temp 0\n");
        return 1;
    }
    if (sp.type == BN_SPEC_REPLAY)
        fprintf(stderr, "bonsai-speculative: draft-replay is a MEASUREMENT AID (the drafter runs, the recorded greedy "
                        "tokens are proposed)\n");
    if (sp.type == BN_SPEC_ORACLE)
        fprintf(stderr, "bonsai-speculative: draft-oracle is a MEASUREMENT AID (the target drafts for itself)\n");
    sp.n_threads = n_threads;
    char err[512];
    bn_model *m = bn_model_load(mpath, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    bn_drafter *d = NULL;
    if (drafter && !(d = bn_drafter_load(dpath, m, err, sizeof err))) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    char *ptext = xstrdup(prompt);
    if (escapes) unescape(ptext);
    int32_t *ids = NULL;
    int n_prompt = bn_tokenize(tok, ptext, strlen(ptext), true, true, &ids);
    if (n_prompt < 1) {
        fprintf(stderr, "bonsai-speculative: the prompt has no tokens\n");
        return 1;
    }
    bn_engine *eng = bn_engine_open(m, n_gpu_layers, n_threads, err, sizeof err);
    bn_engine_state *ts = eng ? bn_engine_state_new(eng, n_ctx, err, sizeof err) : NULL;
    int32_t *replay = NULL;
    if (ts && sp.type == BN_SPEC_REPLAY) {
        sp.n_replay = n_predict_max + (sp.n_max > 0 ? sp.n_max : 0) + 2; // the loop below overshoots by < a round
        replay = xmalloc(sizeof(int32_t) * (size_t)sp.n_replay);
        if (record_greedy(ts, ids, n_prompt, replay, sp.n_replay, err, sizeof err) != 0) {
            fprintf(stderr, "bonsai-speculative: native run: %s\n", err);
            return 1;
        }
        sp.replay = replay;
    }
    bn_spec *s = ts ? bn_spec_new_engine(ts, d, &sp, err, sizeof err) : NULL;
    if (!s) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    bn_dry_breakers *dry = bn_sampler_args_breakers(&smp, &sa, tok);
    bn_sampler *sampler = bn_sampler_new(&smp);
    double t0 = bn_time_ms();
    if (bn_spec_prefill(s, ids, n_prompt, err, sizeof err) != 0) {
        fprintf(stderr, "bonsai-speculative: %s\n", err);
        return 1;
    }
    double t1 = bn_time_ms();
    fwrite(ptext, 1, strlen(ptext), stdout);
    int n_predict = 0;
    bool stop = false;
    int32_t out[64];
    char piece[256];
    while (!stop && n_predict <= n_predict_max) {
        int n = bn_spec_generate_step(s, sampler, out, 64, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "\nbonsai-speculative: %s\n", err);
            break;
        }
        for (int i = 0; i < n && !stop; i++) {
            n_predict++;
            int len = bn_token_to_piece(tok, out[i], piece, sizeof piece, false);
            if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
            if (bn_token_is_eog(tok, out[i])) stop = true;
        }
        fflush(stdout);
    }
    double t2 = bn_time_ms();
    const bn_spec_stats *st = bn_spec_stats_get(s);
    printf("\n\n");
    printf("encoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", n_prompt, (t1 - t0) / 1e3,
           n_prompt / ((t1 - t0) / 1e3 + 1e-9));
    printf("decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", n_predict, (t2 - t1) / 1e3,
           n_predict / ((t2 - t1) / 1e3 + 1e-9));
    printf("\n");
    printf("n_draft   = %d\n", sp.n_max);
    printf("n_predict = %d\n", n_predict);
    printf("n_drafted = %lld\n", (long long)st->n_drafted);
    printf("n_accept  = %lld\n", (long long)st->n_accept);
    printf("accept    = %.3f%%\n", st->n_drafted ? 100.0 * (double)st->n_accept / (double)st->n_drafted : 0.0);
    printf("\n");
    bn_spec_print_stats(s, stdout);
    bn_sampler_free(sampler);
    bn_dry_breakers_free(dry);
    bn_spec_free(s);
    bn_engine_state_free(ts);
    bn_engine_free(eng);
    bn_drafter_free(d);
    free(replay);
    bn_tokenizer_free(tok);
    bn_model_free(m);
    free(ids);
    free(ptext);
    return 0;
}
