// tests/mine/test_mine.c — the per-prompt mining pipeline (mine/mine.h) on the tiny mkmodel
// vocabulary with a scripted completion source (deterministic loops), in sample and prime mode,
// plus a smoke test of the in-process source on the tiny random model (greedy ids equal the
// recorded top-1, logprobs equal the recorded values exactly, top-K descending).
#include "tests/test.h"
#include "mine/mine.h"
#include "mine/runner.h"
#include "synth/mkmodel.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <jansson.h>
#include <string.h>
#include <unistd.h>

// A source that replays fixed texts: call c returns script[c % n_scripts] (tokenized), with a
// top-3 per position: the token itself (-0.05), 'X' (-3.0), 'Y' (-4.0).
typedef struct {
    bn_source base;
    const bn_tokenizer *tok;
    const char *script[2];
    int n_scripts, calls;
    int32_t *last_prompt;
    int n_last_prompt;
    int delay_us; // simulated generation time
} scripted;

static int scripted_generate(bn_source *b, const int32_t *prompt, int n_prompt, const bn_gen_params *p,
                             bn_gen_result *out, char *err, size_t errlen) {
    scripted *s = (scripted *)b;
    memset(out, 0, sizeof *out);
    if (s->delay_us) usleep((useconds_t)s->delay_us);
    free(s->last_prompt);
    s->last_prompt = xmalloc((size_t)n_prompt * sizeof(int32_t));
    memcpy(s->last_prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    s->n_last_prompt = n_prompt;
    const char *text = s->script[s->calls++ % s->n_scripts];
    int32_t *ids;
    int n = bn_tokenize(s->tok, text, strlen(text), false, false, &ids);
    if (n > p->n_predict) n = p->n_predict;
    out->n = n;
    out->ids = ids;
    out->k = 3;
    out->logprob = xmalloc(((size_t)n + 1) * sizeof(float));
    out->topk = xmalloc(((size_t)n * 3 + 1) * sizeof(bn_topk));
    for (int i = 0; i < n; i++) {
        out->logprob[i] = -0.05f;
        out->topk[i * 3 + 0] = (bn_topk){ids[i], -0.05};
        out->topk[i * 3 + 1] = (bn_topk){'X', -3.0};
        out->topk[i * 3 + 2] = (bn_topk){'Y', -4.0};
    }
    out->hit_limit = n == p->n_predict;
    return 0;
}

static void scripted_destroy(bn_source *b) {
    free(((scripted *)b)->last_prompt);
}

// "Ok!\n" + 9 copies of a 28-char unit. In the tiny synthetic vocab "Wait" is [W][a][it] / [ W][a][it];
// the detector reports start 16 (probe 128's phase), the localiser slides back to the first "W"
// (key(" W") == key("W")) and rejects " W" of the 2nd copy: 31 chars of completion precede it.
// Runner callback: records delivery order; stops after `stop_after` results.
typedef struct { int order[16], n, stop_after, pairs; } delivery;
static bool on_result(void *vctx, int i, int rc, bn_mine_result *r, const char *err) {
    delivery *d = vctx;
    d->order[d->n++] = i;
    d->pairs += rc == 0 && r->has_pair && r->pair.extra &&
                json_integer_value(json_object_get(r->pair.extra, "prompt_index")) == i;
    return d->n < d->stop_after;
}

static const char *LOOP = "Ok!\nWait, let me check the sum. Wait, let me check the sum. Wait, let me check the sum. "
                          "Wait, let me check the sum. Wait, let me check the sum. Wait, let me check the sum. "
                          "Wait, let me check the sum. Wait, let me check the sum. Wait, let me check the sum.";

// Six entries into one frame with a changing slot (no two periods the same).
static const char *FRAME = "Ok!\nWhy did the chicken cross the road? To get to the barn. Why did the chicken cross the "
                           "road? To get to a farm. Why did the chicken cross the road? To get to its nest. Why did the "
                           "chicken cross the road? To get to the shop. Why did the chicken cross the road? To get to "
                           "the other side. Why did the chicken cross the road? To get to bed.";

// frame_case: a frame loop (docs/antidoom.md §16) is missed by the verbatim detector; --detect frame (or both) mines it
// with rejected = the token that re-enters the frame, the " W" of the second "Why".
static void frame_case(scripted *s, const bn_tokenizer *tok, const bn_prompt *pr, const bn_mine_params *mp) {
    char err[512];
    bn_mine_result r;
    s->script[0] = FRAME;
    s->calls = 0;
    CHECK(bn_mine_one(&s->base, tok, pr, 5, mp, &r, err, sizeof err) == 0 && !r.looped && !r.loop_verbatim &&
          r.loop_frame && !r.has_pair && !strcmp(r.gen.status, "clean") &&
          json_is_true(json_object_get(r.gen.extra, "frame_loop")), "verbatim mode on a frame loop: %s", err);
    bn_mine_result_free(&r);
    for (int mode = BN_DETECT_FRAME; mode <= BN_DETECT_BOTH; mode++) {
        bn_mine_params mf = *mp;
        mf.detect = (bn_detect_mode)mode;
        s->calls = 0;
        CHECK(bn_mine_one(&s->base, tok, pr, 5, &mf, &r, err, sizeof err) == 0 && r.looped && r.loop_frame &&
              r.has_pair && !strcmp(r.gen.status, "loop_detected"), "detect %d: looped %d pair %d %s", mode,
              r.looped, r.has_pair, err);
        if (r.has_pair) {
            int32_t *gen_ids;
            int n_gen = bn_tokenize(tok, FRAME, strlen(FRAME), false, false, &gen_ids);
            int target = (int)r.pair.rep.rejected_token_index;
            CHECK(target < n_gen && r.pair.rejected_id == gen_ids[target], "rejected id at %d", target);
            char *before = bn_detokenize(tok, gen_ids, target, false, NULL);
            size_t bl = strlen(before);
            while (bl > 0 && before[bl - 1] == ' ') before[--bl] = 0;
            CHECK(!strcmp(before, "Ok!\nWhy did the chicken cross the road? To get to the barn."),
                  "text before the rejected token: '%s'", before);
            const char *rd = r.pair.rejected_decoded;
            while (*rd == ' ') rd++;
            CHECK(rd[0] == 'W', "rejected surface '%s'", r.pair.rejected_decoded);
            CHECK(r.pair.rep.repeats == 6 && r.pair.n_context == s->n_last_prompt + target, "repeats %lld",
                  (long long)r.pair.rep.repeats);
            free(before);
            free(gen_ids);
        }
        bn_mine_result_free(&r);
    }
}

int main(void) {
    char err[512];
    char dir[] = "/tmp/bonsai-test-mine-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    bn_mkmodel_params mk;
    bn_mkmodel_defaults(&mk, "tiny");
    CHECK(bn_mkmodel_write(&mk, path, err, sizeof err) == 0, "mkmodel: %s", err);
    bn_model *m = bn_model_load(path, err, sizeof err);
    CHECK(m != NULL, "load: %s", err);
    if (!m) return test_done("test_mine");
    bn_tokenizer *tok = bn_tokenizer_from_gguf(m->gguf, err, sizeof err);
    CHECK(tok != NULL, "tokenizer: %s", err);
    if (!tok) return test_done("test_mine");

    bn_msg msg = {"user", "What is 2+3?"};
    bn_prompt pr = {.msgs = &msg, .n_msgs = 1, .source = "math", .line = 1};
    scripted s = {.base = {"scripted", scripted_generate, scripted_destroy}, .tok = tok, .script = {LOOP}, .n_scripts = 1};
    bn_mine_params mp = bn_mine_params_default();
    mp.gen.n_predict = 1000;
    mp.split = "train";
    bn_mine_result r;
    { // sample mode: a loop of "Wait, let me check the sum. " after "Hmm. "
        CHECK(bn_mine_one(&s.base, tok, &pr, 7, &mp, &r, err, sizeof err) == 0, "mine: %s", err);
        CHECK(r.looped && r.has_pair, "looped %d pair %d", r.looped, r.has_pair);
        CHECK(r.gen.rep.start_char == 16 && r.gen.rep.repeat_start_char == 44, "hit start %lld",
              (long long)r.gen.rep.start_char);
        CHECK(!strcmp(r.gen.status, "loop_detected") && r.gen.has_rep && r.gen.rep.period == 28,
              "gen row status %s period %lld", r.gen.status, (long long)r.gen.rep.period);
        if (r.has_pair) {
            const bn_pair_row *row = &r.pair;
            int target = (int)row->rep.rejected_token_index;
            int32_t *gen_ids;
            int n_gen = bn_tokenize(tok, LOOP, strlen(LOOP), false, false, &gen_ids);
            // context = prompt ids + the generated ids before the target
            int n_prompt = s.n_last_prompt;
            CHECK(row->n_context == n_prompt + target, "context length %d vs %d + %d", row->n_context, n_prompt, target);
            CHECK(memcmp(row->context_ids, s.last_prompt, (size_t)n_prompt * 4) == 0 &&
                  memcmp(row->context_ids + n_prompt, gen_ids, (size_t)target * 4) == 0, "context ids");
            CHECK(target < n_gen && row->rejected_id == gen_ids[target], "rejected id");
            // the rejected token starts the 2nd copy: the completion text before it is "Ok!\nWait, ... sum."
            char *before = bn_detokenize(tok, gen_ids, target, false, NULL);
            size_t bl = strlen(before);
            CHECK(bl == 31, "text before the rejected token: %zu chars '%s'", bl, before);
            const char *rd = row->rejected_decoded;
            while (*rd == ' ') rd++;
            CHECK(rd[0] == 'W', "rejected surface '%s'", row->rejected_decoded);
            free(before);
            free(gen_ids);
            // chosen: 'Y' then 'X' (ascending probability), raw strings from the vocab
            CHECK(row->n_chosen == 2 && row->chosen_ids[0] == 'Y' && row->chosen_ids[1] == 'X' &&
                  !strcmp(row->chosen_decoded[0], "Y"), "chosen %d", row->n_chosen);
            CHECK(row->has_topk && row->n_topk == 3 && row->has_gen && row->gen.n_probs == 20 &&
                  !strcmp(row->gen.endpoint, "scripted") && row->prime_state == 1 && !strcmp(row->split, "train") &&
                  !strcmp(row->source, "math") && !strcmp(row->source_prompt, "What is 2+3?"), "extension fields");
            CHECK(strstr(row->context_before, "<|im_start|>assistant\n") != NULL &&
                  strstr(row->context_before, "Ok!\nWait, let me check the sum.") != NULL, "context_before text");
            // the row survives a JSONL round trip
            char *line = bn_pair_row_to_line(row, err, sizeof err);
            bn_pair_row back;
            CHECK(line && bn_pair_row_parse(line, strlen(line), &back, err, sizeof err) == 0 &&
                  back.rejected_id == row->rejected_id && back.n_context == row->n_context, "round trip: %s", err);
            CHECK(line && strstr(line, "\"prompt_index\":7"), "prompt_index recorded");
            bn_pair_row_free(&back);
            free(line);
        }
        bn_mine_result_free(&r);
    }
    { // over-long prompt: the user turn is cut to fit max_prompt_tokens and the row is marked
        char long_text[4096];
        size_t k = 0;
        for (int i = 0; i < 60; i++) k += (size_t)sprintf(long_text + k, "word%d ", i);
        bn_msg big = {"user", long_text};
        bn_prompt lp = {.msgs = &big, .n_msgs = 1, .source = "math", .line = 2};
        bn_mine_params m2 = mp;
        m2.max_prompt_tokens = 60;
        s.calls = 0;
        CHECK(bn_mine_one(&s.base, tok, &lp, 1, &m2, &r, err, sizeof err) == 0 && r.has_pair, "trimmed prompt: %s", err);
        CHECK(s.n_last_prompt <= 60 && s.n_last_prompt > 40, "prompt tokens after trimming: %d", s.n_last_prompt);
        CHECK(r.has_pair && !strncmp(r.pair.source_prompt, "[TRIMMED_SOURCE_PROMPT]word0 ", 29), "marked source_prompt");
        bn_mine_result_free(&r);
        m2.max_prompt_tokens = 5; // the template alone is longer
        CHECK(bn_mine_one(&s.base, tok, &lp, 1, &m2, &r, err, sizeof err) == -1 && strstr(err, "does not fit"),
              "cannot fit: %s", err);
    }
    { // no loop -> clean, no pair; prime mode without a loop -> escaped
        s.script[0] = "The answer is 5.";
        s.calls = 0;
        CHECK(bn_mine_one(&s.base, tok, &pr, 0, &mp, &r, err, sizeof err) == 0 && !r.looped && !r.has_pair &&
              !strcmp(r.gen.status, "clean") && !r.gen.has_rep && r.hit_limit == false, "clean: %s", err);
        bn_mine_result_free(&r);
    }
    frame_case(&s, tok, &pr, &mp);
    { // prime mode: greedy prefix "Sure. The sum is 5. And" is cut after "5.", then " " + phrase x 3
        s.script[0] = "Sure. The sum is 5. And";
        s.script[1] = LOOP;
        s.n_scripts = 2;
        s.calls = 0;
        mp.mode = BN_MINE_PRIME;
        CHECK(bn_mine_one(&s.base, tok, &pr, 3, &mp, &r, err, sizeof err) == 0 && r.looped && r.has_pair, "prime: %s", err);
        if (r.has_pair) {
            CHECK(r.pair.prime_state == 2 && r.pair.prime.prefix_chars == 19 && r.pair.prime.repeats == 3 &&
                  !strcmp(r.pair.prime.scan_mode, "completion"), "prime object: prefix_chars %lld",
                  (long long)r.pair.prime.prefix_chars);
            char *primed = bn_detokenize(tok, s.last_prompt, s.n_last_prompt, true, NULL);
            const char *tail = "<think>\nSure. The sum is 5. Wait, let me re-check the calculation. Wait, let me re-check the "
                               "calculation. Wait, let me re-check the calculation. ";
            size_t pl = strlen(primed), tl = strlen(tail);
            CHECK(pl > tl && !strcmp(primed + pl - tl, tail), "primed context ends with the prefix + phrase x 3:\n%s", primed);
            free(primed);
        }
        bn_mine_result_free(&r);
        s.script[1] = "I am done now.";
        s.calls = 0;
        CHECK(bn_mine_one(&s.base, tok, &pr, 4, &mp, &r, err, sizeof err) == 0 && !r.looped &&
              !strcmp(r.gen.status, "escaped"), "escaped");
        bn_mine_result_free(&r);
    }
    { // prime mode scanning the assistant text too: 3 primed copies + 2 generated ones -> onset in
      // the primed text -> the first generated token is rejected (index 0), context = primed context
        s.script[0] = "Sure. The sum is 5. And";
        s.script[1] = "Wait, let me re-check the calculation. Wait, let me re-check the calculation. Done.";
        s.calls = 0;
        mp.scan_assistant = true;
        CHECK(bn_mine_one(&s.base, tok, &pr, 5, &mp, &r, err, sizeof err) == 0 && r.looped && r.has_pair,
              "assistant scan: looped %d pair %d %s", r.looped, r.has_pair, err);
        if (r.has_pair) {
            CHECK(r.pair.rep.rejected_token_index == 0 && r.pair.n_context == s.n_last_prompt &&
                  !memcmp(r.pair.context_ids, s.last_prompt, (size_t)s.n_last_prompt * 4) &&
                  !strcmp(r.pair.prime.scan_mode, "assistant"), "rejected = first generated token (index %lld)",
                  (long long)r.pair.rep.rejected_token_index);
            CHECK(!strcmp(r.pair.rejected_decoded, "W"), "rejected '%s'", r.pair.rejected_decoded);
        }
        CHECK(!strncmp(r.gen.completion, "Wait, let me", 12), "log completion excludes the primed text: %.20s", r.gen.completion);
        bn_mine_result_free(&r);
        // 5 primed copies but the model escapes at once: repeats inside the primed text do not count
        s.script[1] = "Done. The answer is 5.";
        s.calls = 0;
        mp.prime_repeats = 5;
        CHECK(bn_mine_one(&s.base, tok, &pr, 6, &mp, &r, err, sizeof err) == 0 && !r.looped && !r.has_pair &&
              !strcmp(r.gen.status, "escaped"), "primed-only repeats: looped %d", r.looped);
        bn_mine_result_free(&r);
        mp.prime_repeats = 3;
        mp.scan_assistant = false;
    }
    { // phrase from the prefix: its last sentence (20-200 chars) is repeated; a short one falls back
        s.script[0] = "Sure. The sum of these numbers is 5. And";
        s.script[1] = LOOP;
        s.calls = 0;
        mp.phrase_from_prefix = true;
        CHECK(bn_mine_one(&s.base, tok, &pr, 8, &mp, &r, err, sizeof err) == 0 && r.has_pair, "phrase from prefix: %s", err);
        if (r.has_pair) CHECK(!strcmp(r.pair.prime.phrase, "The sum of these numbers is 5. "), "phrase '%s'", r.pair.prime.phrase);
        char *primed = bn_detokenize(tok, s.last_prompt, s.n_last_prompt, true, NULL);
        const char *tail = "<think>\nSure. The sum of these numbers is 5. The sum of these numbers is 5. The sum of these "
                           "numbers is 5. The sum of these numbers is 5. ";
        CHECK(strlen(primed) > strlen(tail) && !strcmp(primed + strlen(primed) - strlen(tail), tail), "primed: %s", primed);
        free(primed);
        bn_mine_result_free(&r);
        s.script[0] = "Sure. Ok. And";
        s.calls = 0;
        CHECK(bn_mine_one(&s.base, tok, &pr, 9, &mp, &r, err, sizeof err) == 0 && r.has_pair &&
              !strcmp(r.pair.prime.phrase, BN_DEFAULT_PRIME_PHRASE), "short sentence -> default phrase");
        bn_mine_result_free(&r);
        mp.phrase_from_prefix = false;
    }
    free(s.last_prompt);
    s.last_prompt = NULL;
    { // parallel runner: 2 scripted sources, 6 prompts, delivered in prompt order; stop after 4
        scripted s2[2] = {{.base = {"a", scripted_generate, scripted_destroy}, .tok = tok, .script = {LOOP}, .n_scripts = 1,
                           .delay_us = 20000},
                          {.base = {"b", scripted_generate, scripted_destroy}, .tok = tok, .script = {LOOP}, .n_scripts = 1,
                           .delay_us = 20000}};
        bn_source *srcs[2] = {&s2[0].base, &s2[1].base};
        bn_prompt ps[6];
        for (int i = 0; i < 6; i++) ps[i] = pr;
        bn_mine_opts o = bn_mine_opts_default();
        o.mine.gen.n_predict = 1000;
        delivery d = {.stop_after = 100};
        int got = bn_mine_run(srcs, 2, tok, ps, 0, 6, &o, on_result, &d);
        int in_order = got == 6;
        for (int i = 0; i < d.n; i++) in_order &= d.order[i] == i;
        CHECK(in_order && d.pairs == 6, "6 results in order with their own prompt_index (%d delivered, %d pairs)", got, d.pairs);
        CHECK(s2[0].calls + s2[1].calls == 6 && s2[0].calls > 0 && s2[1].calls > 0, "both sources used (20 ms per call): %d + %d",
              s2[0].calls, s2[1].calls);
        delivery e = {.stop_after = 4};
        got = bn_mine_run(srcs, 2, tok, ps, 1, 6, &o, on_result, &e);
        CHECK(got == 4 && e.order[0] == 1 && e.order[3] == 4, "stop after 4: %d delivered", got);
        free(s2[0].last_prompt);
        free(s2[1].last_prompt);
    }
    { // in-process source smoke test: greedy, 12 tokens
        bn_source *src = bn_source_inprocess(m, tok, 256, 2);
        int32_t *ids;
        int n = bn_tokenize(tok, "hello world", 11, false, false, &ids);
        bn_gen_params gp = bn_gen_params_default();
        gp.temperature = 0;
        gp.n_predict = 12;
        gp.n_probs = 5;
        bn_gen_result g;
        CHECK(src->generate(src, ids, n, &gp, &g, err, sizeof err) == 0, "generate: %s", err);
        CHECK(g.n <= 12 && g.k == 5, "n %d k %d", g.n, g.k);
        int ok_top1 = 1, ok_desc = 1;
        for (int i = 0; i < g.n; i++) {
            ok_top1 &= g.topk[i * 5].id == g.ids[i] && (float)g.topk[i * 5].logprob == g.logprob[i];
            for (int j = 1; j < 5; j++) ok_desc &= g.topk[i * 5 + j].logprob <= g.topk[i * 5 + j - 1].logprob;
        }
        CHECK(ok_top1, "greedy token = recorded top-1 with the same logprob");
        CHECK(ok_desc, "top-K descending");
        CHECK(g.n < 12 || g.hit_limit, "hit_limit when the budget is used");
        bn_gen_result_free(&g);
        free(ids);
        bn_source_free(src);
    }
    bn_tokenizer_free(tok);
    bn_model_free(m);
    unlink(path);
    rmdir(dir);
    return test_done("test_mine");
}
