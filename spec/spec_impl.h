// spec/spec_impl.h — what the files of the speculative loop share; not a public header (spec/dspark.h is). The loop
// (spec/dspark_spec.c) is the same in every mode; what proposes a round's drafts is one implementation per mode
// behind spec_proposer_ops: the DSpark drafter on the CPU or on the target's device, with its drafts or, as the
// replay measurement aid, proposing a recorded continuation (spec/spec_drafter.c), and the oracle measurement aid
// (spec/spec_oracle.c). Calls go one way: dspark_spec.c -> spec_drafter.c, spec_oracle.c.
#ifndef BONSAI_SPEC_IMPL_H
#define BONSAI_SPEC_IMPL_H
#include "spec/dspark.h"
#include "core/engine.h"

#define SPEC_MAX_N 32   // hard cap on drafts per round

// How a decoder's rounds get their drafts: one implementation per mode, chosen by bn_spec_new_engine; plain decoding
// (BN_SPEC_NONE) has none. Optional entries may be NULL.
typedef struct spec_proposer_ops {
    // start: the mode's state for a target of n_ctx positions (a drafter's state and the tap rows, tap_bytes of host
    // memory when they go through the host; the oracle's second target state); 0 or -1 (err). stop: frees what start
    // made (also after a failed start).
    int (*start)(bn_spec *sp, int n_ctx, size_t tap_bytes, char *err, size_t errlen);
    void (*stop)(bn_spec *sp);
    // where (optional): where the drafter runs for the stats ("CPU", the device's name); NULL: no drafter (the oracle)
    const char *(*where)(const bn_spec *sp);
    // restart: the target restarts at position pos (0: a new prompt; > 0: a cached prompt prefix is kept): context at
    // positions >= pos is dropped
    void (*restart)(bn_spec *sp, int pos);
    // follow (optional): the target committed tok[0..n) (a prefill chunk, a round's kept tokens): the oracle decodes
    // them too; 0 or -1 (err)
    int (*follow)(bn_spec *sp, const int32_t *tok, int n, char *err, size_t errlen);
    // process (with a drafter): the n pending context rows (the tap buffer's first rows) at target positions pos0..
    // reach the drafter, whose rows from pos0 on are dropped first; enqueue: a device drafter may return once the work
    // is enqueued (the draft after it reads the rows in order). 0 or -1 (err)
    int (*process)(bn_spec *sp, int n, int pos0, bool enqueue, char *err, size_t errlen);
    // flush_group (optional): the pending rows of the rounds r[at[0..g)], which share a drafter, reach it in one call
    // before they draft; returns the number of rounds that failed. Without it each round's rows go through process
    // (enqueued).
    int (*flush_group)(bn_spec_round *r, const int *at, int g);
    // draft_group: the drafts of the rounds r[at[0..g)] (k[at[m]] asked) into their verify_tokens[1..], their counts
    // into nd[at[m]] and the time each waited since t0 into ms[at[m]]; returns the number of rounds that failed.
    // Rounds with the same draft_group, drafter and p_min draft together.
    int (*draft_group)(bn_spec_round *r, const int *at, int g, const int *k, int *nd, double *ms, double t0);
    // settle (optional): a round that failed after its context rows were enqueued waits for that work
    void (*settle)(bn_spec *sp);
    // propose (optional): the tokens the round verifies out of the nd drafts in tok[1..] (the replay aid: its recorded
    // continuation instead); returns their count
    int (*propose)(bn_spec *sp, int32_t *tok, int nd);
    bool free_drafts; // its drafting time is kept out of the cost model (the oracle stands in for a free drafter)
    bool reprefills;  // it cannot reuse a cached prompt prefix: bn_spec_prefill_cached prefills the whole prompt
    bool on_device;   // the drafter runs on the target's device (the stats say how the taps travel)
} spec_proposer_ops;

// The implementations (spec/spec_drafter.c, spec/spec_oracle.c).
extern const spec_proposer_ops spec_cpu_drafter, spec_dev_drafter, spec_cpu_replay, spec_dev_replay, spec_oracle;

struct bn_spec {
    const bn_model *target;                 // the target model
    bn_engine_state *target_state;          // the caller's target state
    bn_engine *own_engine;                  // bn_spec_new only: the CPU engine around the caller's bn_state,
    bn_engine_state *own_target_state;      //   and the wrapper (freed with free(): the bn_state stays the caller's)
    const spec_proposer_ops *proposer;      // how drafts are proposed (NULL: plain decoding)
    const bn_drafter *drafter;              // DSPARK / REPLAY: the DSpark drafter (its context rows come as taps)
    struct {
        bn_dstate *state;                   // the drafter on the CPU (spec_cpu_drafter, spec_cpu_replay)
    } cpu;
    struct {
        const bn_dev_drafter_ops *ops;      // the drafter on the target's device (spec_dev_drafter, spec_dev_replay):
        void *state;                        //   its ops and state
    } dev;
    struct {
        bn_engine_state *state;             // ORACLE: a second target state that proposes the greedy continuation,
        bn_engine_snapshot *before;         //   its snapshot before its drafting,
        int64_t n_proposed;                 //   tokens it proposed so far (for oracle_miss_every)
    } oracle;
    int replay_pos0;                        // REPLAY: n_past after the prefill (recorded token i is proposed there + i)
    bn_engine_snapshot *pre_verify;         // the target before the verify (CPU rollback: restore + re-run)
    bn_engine_snapshot **verify_snaps;      // [n_max+1] after each verified token (other engines); NULL on the CPU
    bn_spec_params params;
    int n_taps;
    int tap_layers[BN_DRAFTER_MAX_TAPS];
    int32_t id_last;
    int n_past;
    bool ready;             // prefill done
    int32_t *hist;          // [n_ctx] the token committed at each target position p < n_hist: the target's KV
    int n_hist;             //   rows and the drafter's context rows there belong to hist[0..p] (prompt cache)
    float *logits;          // [(n_max+1)][V]
    int32_t *argmax;        // [n_max+1] each verified row's argmax (no_step_logits, greedy)
    int32_t *topk_ids;      // [n_max+1][BN_FORWARD_TOPK_MAX] each verified row's top_k best ids (no_step_logits,
    float *topk_vals;       //   a sampler that reads only those) and logits
    bool last_no_rows;      // the last step kept no logits rows (argmax or top-k verification)
    float *taps;            // [max(n_max+1, 64)][C][E] host taps (NULL with dev_taps)
    bool taps_pinned;       // taps from dev.ops->host_alloc (page-locked: DMA from the target, to the drafter)
    float *dev_taps;        // device drafter: the target's device tap buffer (dev.ops->target_taps), the same
                            //   layout; the target writes its taps there and the drafter reads them in place
    int tap_rows;           // rows of the tap buffer
    int n_pending;          // rows committed on the target but not yet given to the drafter (deferred while
    int pending_pos0;       //   steps draft nothing): taps in tap rows 0..n_pending−1, target positions from
                            //   pending_pos0; a target pass writes its taps behind them
    bn_spec_stats stats;
    // cost model (all EMAs; -1 = not measured yet)
    double ms_fwd[SPEC_MAX_N + 2];  // target forward of n tokens (index n)
    double ms_draft[SPEC_MAX_N + 1];// drafting k tokens (index k)
    double q_acc[SPEC_MAX_N];       // P(draft i accepted | drafts < i accepted)
    int steps_off;                  // steps since drafting was switched off
    int probe_every;                // current probe interval (PROBE_FIRST..PROBE_MAX)
    int last_n;                     // tokens emitted by the last step (rows of logits valid)
    int32_t drafts[SPEC_MAX_N];     // the drafts the last step verified,
    int last_nd;                    //   and their count
    // the round between bn_spec_round_begin and bn_spec_round_end
    bool in_round;
    int32_t verify_tokens[SPEC_MAX_N + 1]; // the verified tokens [id_last, d0..d_{nd−1}]
    bn_forward_out verify_head;     // what the verify pass returns per row (head outputs, all_logits)
    bn_forward_out verify_out;      // the pass's out: verify_head + the taps row
    int verify_pos0;                // the target's position before the pass
};

// spec_round_fail: round r failed (its message in r->err); returns 1 (a failure to count).
static inline int spec_round_fail(bn_spec_round *r) {
    r->rc = -1;
    return 1;
}

#endif
