// spec/spec_oracle.c — the oracle as the speculative loop's proposer (spec/spec_impl.h). MEASUREMENT AID, not a
// drafter: a second target state follows the committed tokens and proposes the target's own greedy continuation, so
// speed tests can force acceptance (params.oracle_miss_every makes every Nth proposal wrong, for a controlled rate).
#include "spec/spec_impl.h"
#include "base/util.h"

// oracle_start: the second target state and its snapshot; 0 or -1 (err).
static int oracle_start(bn_spec *sp, int n_ctx, size_t tap_bytes, char *err, size_t errlen) {
    if (!(sp->oracle.state = bn_engine_state_new(sp->target_state->e, n_ctx, err, errlen))) return -1;
    return (sp->oracle.before = bn_engine_snapshot_new(sp->oracle.state, err, errlen)) != NULL ? 0 : -1;
}

static void oracle_stop(bn_spec *sp) {
    bn_engine_snapshot_free(sp->oracle.before);
    bn_engine_state_free(sp->oracle.state);
}

// oracle_restart: a new prompt (the oracle keeps no prefix: it re-prefills, spec_oracle.reprefills).
static void oracle_restart(bn_spec *sp, int pos) { bn_engine_state_reset(sp->oracle.state); }

static int oracle_follow(bn_spec *sp, const int32_t *tok, int n, char *err, size_t errlen) {
    bn_forward_out none = {0};
    return bn_engine_forward(sp->oracle.state, tok, n, &none, err, errlen) != 0 ? -1 : 0;
}

// oracle_draft: the target's own greedy continuation of id_last from the oracle state (which is at n_past); the
// oracle state is returned to n_past afterwards. Returns the count, or -1 with err.
static int oracle_draft(bn_spec *sp, int k, int32_t *drafts, char *err, size_t errlen) {
    if (bn_engine_snapshot_into(sp->oracle.state, sp->oracle.before, err, errlen) != 0) return -1;
    const int V = sp->target->cfg.n_vocab;
    int32_t tok = sp->id_last;
    int n = 0;
    for (; n < k; n++) {
        bn_forward_out out = {.argmax = &drafts[n]}; // greedy: the engine's argmax (no logits to the host)
        if (bn_engine_forward(sp->oracle.state, &tok, 1, &out, err, errlen) != 0) break;
        tok = drafts[n];
        int every = sp->params.oracle_miss_every;
        if (every > 0 && ++sp->oracle.n_proposed % every == 0) { // deliberate miss; the chain stays wrong after it
            drafts[n] = (tok + 1) % V;
            tok = drafts[n];
        }
    }
    if (bn_engine_restore(sp->oracle.state, sp->oracle.before, err, errlen) != 0) return -1;
    return n;
}

// oracle_draft_group: the rounds' continuations one after another, each timed on its own.
static int oracle_draft_group(bn_spec_round *r, const int *at, int g, const int *k, int *nd, double *ms, double t0) {
    int n_failed = 0;
    for (int m = 0; m < g; m++) {
        const int j = at[m];
        bn_spec *sp = r[j].sp;
        const double t1 = bn_time_ms();
        nd[j] = oracle_draft(sp, k[j], sp->verify_tokens + 1, r[j].err, sizeof r[j].err);
        ms[j] = bn_time_ms() - t1;
        if (nd[j] < 0) n_failed += spec_round_fail(&r[j]);
    }
    return n_failed;
}

const spec_proposer_ops spec_oracle = {.start = oracle_start, .stop = oracle_stop, .restart = oracle_restart,
                                       .follow = oracle_follow, .draft_group = oracle_draft_group,
                                       .free_drafts = true, .reprefills = true};
