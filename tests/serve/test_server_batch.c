// tests/serve/test_server_batch.c — bonsai-serve's batched decode steps (serve/slots.c: the decode steps the slots
// want at the same time run as one bn_engine_forward_multi, spec/step_batch.h) on 4 slots: 4 requests at once
// (greedy, sampled with a seed, greedy with n_probs, sampled without: argmax, top-k and logits-row steps mixed in
// one batch) give the same texts as the same requests one at a time, and /metrics reports more than one busy
// slot per decode call (llamacpp:n_busy_slots_per_decode: the steps did run batched). Then the same with
// speculative slots (serve/slots.c spec_round: the rounds begin together and each round's verify pass joins the
// other slots' passes, bn_step_batcher_round), once with the oracle drafter (the target's own greedy continuation:
// passes of up to 5 tokens) and once with a random DSpark drafter that always drafts (--no-spec-adaptive: mostly
// rejected drafts, taps in every pass): the same texts as the plain server's one at a time, more than one busy slot
// per decode call and per drafting batch (llamacpp:n_busy_slots_per_draft), and
// drafts made (some of the oracle's accepted: all on the greedy requests, the sampled ones reject some; env
// BONSAI_BATCH_SPEC picks the cases). Run again as serve_batch_emu against bonsai-serve-emu -ngl 99 (the ragged
// passes of bn_cuda_forward_multi) and serve_batch_split_emu (-ngl 2: the same on the CPU+CUDA engine).
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_REQ 4

static server_fixture F;
// the requests' sampling settings (bodies made in main with n_predict tokens each)
static const char *const KINDS[N_REQ] = {"\"prompt\":\"Once upon a time\",\"temperature\":0",
                                         "\"prompt\":\"The cat sat on\",\"temperature\":0.8,\"top_k\":40,\"seed\":7",
                                         "\"prompt\":\"In the beginning\",\"temperature\":0,\"n_probs\":2",
                                         "\"prompt\":\"A long road\",\"temperature\":1.0,\"top_k\":0,\"seed\":3"};
static char BODIES[N_REQ][256];

typedef struct {
    int i;
    char *content; // malloc'd, NULL on failure
} job;

// post_job: POST /completion BODIES[j->i]; j->content = the completion text.
static void *post_job(void *arg) {
    job *j = arg;
    http_resp r;
    j->content = NULL;
    if (http_request(F.port, "POST", "/completion", BODIES[j->i], strlen(BODIES[j->i]), NULL, &r) != 0) return NULL;
    json_error_t je;
    json_t *o = r.status == 200 ? json_loadb(r.body, r.body_len, JSON_ALLOW_NUL, &je) : NULL;
    const char *c = json_string_value(json_object_get(o, "content"));
    if (c) j->content = strdup(c);
    else fprintf(stderr, "request %d: status %d, %s: %.200s\n", j->i, r.status, o ? "no content" : je.text, r.body);
    json_decref(o);
    http_resp_free(&r);
    return NULL;
}

// metric: the value of llamacpp:<name> in /metrics, or -1.
static double metric(const char *name) {
    http_resp r;
    if (http_request(F.port, "GET", "/metrics", NULL, 0, NULL, &r) != 0) return -1;
    char key[128];
    snprintf(key, sizeof key, "\nllamacpp:%s ", name);
    const char *at = r.body ? strstr(r.body, key) : NULL;
    const double v = at ? atof(at + strlen(key)) : -1;
    http_resp_free(&r);
    return v;
}

// run_together: `rounds` rounds of the N_REQ requests at once, each text checked against want (the plain server's,
// one at a time); what names the server in messages.
static void run_together(const char *what, int rounds, job *want) {
    job together[N_REQ];
    pthread_t th[N_REQ];
    for (int round = 0; round < rounds; round++) { // at once: the slots' steps meet in batches
        for (int i = 0; i < N_REQ; i++) together[i].i = i, pthread_create(&th[i], NULL, post_job, &together[i]);
        for (int i = 0; i < N_REQ; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < N_REQ; i++) {
            CHECK(want[i].content && together[i].content && strcmp(want[i].content, together[i].content) == 0,
                  "%s: request %d round %d: batched text \"%s\" != alone \"%s\"", what, i, round,
                  together[i].content ? together[i].content : "(failed)", want[i].content ? want[i].content : "(failed)");
            free(together[i].content);
        }
    }
}

// spec_case: a speculative server (extra: its arguments after -np 4 -c 256 --metrics --spec-draft-n-max 4) serving
// the requests at once: the texts of want, batched steps, drafts made (some accepted with some_accepted).
static void spec_case(const char *what, const char *const *extra, int rounds, job *want, bool some_accepted) {
    const char *args[16] = {"-np", "4", "-c", "256", "--metrics", "--spec-draft-n-max", "4"};
    int n = 7;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    CHECK(fixture_start(&F, args) == 0, "%s server", what);
    run_together(what, rounds, want);
    const double per_decode = metric("n_busy_slots_per_decode");
    const double per_draft = metric("n_busy_slots_per_draft");
    const double drafted = metric("spec_decode_num_draft_tokens_total");
    const double accepted = metric("spec_decode_num_accepted_tokens_total");
    printf("%s: busy slots per decode call %.3f, per drafting call %.3f after %d rounds of %d at once; %.0f drafts, "
           "%.0f accepted\n", what, per_decode, per_draft, rounds, N_REQ, drafted, accepted);
    CHECK(per_decode > 1.0, "%s: concurrent requests never shared a pass (%.3f per call)", what, per_decode);
    CHECK(per_draft > 1.0, "%s: concurrent requests never drafted together (%.3f per call)", what, per_draft);
    CHECK(drafted > 0 && (!some_accepted || accepted > 0), "%s: %.0f drafts, %.0f accepted", what, drafted,
          accepted);
    CHECK(fixture_stop(&F) == 0, "%s: clean exit", what);
}

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    // env BONSAI_BATCH_TOKENS / BONSAI_BATCH_ROUNDS: a shorter run (the emulator's serve_batch_emu)
    const int n_predict = getenv("BONSAI_BATCH_TOKENS") ? atoi(getenv("BONSAI_BATCH_TOKENS")) : 120;
    const int rounds = getenv("BONSAI_BATCH_ROUNDS") ? atoi(getenv("BONSAI_BATCH_ROUNDS")) : 3;
    for (int i = 0; i < N_REQ; i++)
        snprintf(BODIES[i], sizeof BODIES[i], "{%s,\"n_predict\":%d,\"ignore_eos\":true,\"cache_prompt\":false}",
                 KINDS[i], n_predict);
    const char *args[] = {"-np", "4", "-c", "256", "--metrics", NULL};
    CHECK(fixture_start(&F, args) == 0, "server");
    job alone[N_REQ];
    for (int i = 0; i < N_REQ; i++) { // one at a time: every decode step alone
        alone[i].i = i;
        post_job(&alone[i]);
    }
    const double per_decode_alone = metric("n_busy_slots_per_decode");
    run_together("plain", rounds, alone);
    const double per_decode = metric("n_busy_slots_per_decode");
    printf("busy slots per decode call: %.3f after the requests one at a time, %.3f after %d rounds of %d at once\n",
           per_decode_alone, per_decode, rounds, N_REQ);
    CHECK(per_decode_alone == 1.0, "one request at a time: %.3f sequences per decode step (want 1)", per_decode_alone);
    CHECK(per_decode > 1.0, "concurrent requests never shared a decode step (%.3f per call)", per_decode);
    CHECK(fixture_stop(&F) == 0, "clean exit");

    // env BONSAI_BATCH_SPEC: the speculative cases to run (default "oracle,dspark"; the emulator's runs: "oracle")
    const char *cases = getenv("BONSAI_BATCH_SPEC") ? getenv("BONSAI_BATCH_SPEC") : "oracle,dspark";
    const char *oracle[] = {"--spec-type", "draft-oracle", NULL};
    if (strstr(cases, "oracle")) spec_case("oracle", oracle, 1, alone, true);
    CHECK(fixture_drafter(&F) == 0, "drafter");
    const char *dspark[] = {"-md", F.drafter, "--spec-type", "draft-dspark", "--no-spec-adaptive", NULL};
    if (strstr(cases, "dspark")) spec_case("dspark", dspark, 1, alone, false);
    for (int i = 0; i < N_REQ; i++) free(alone[i].content);
    return test_done("test_server_batch");
}
