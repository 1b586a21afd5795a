// spec/dspark.h — DSpark block drafter (docs/dspark.md §2–4) and the speculative decoding loop over an
// engine of core/engine.h (CPU or CUDA target; the drafter runs on the target's device when its backend
// registered one, bn_dev_drafter_register, else on the CPU) (docs/dspark.md §5–7).
//
// Drafter: both file conventions (legacy `dspark`, `dflash`) load into one bn_drafter; the tap
// layers are kept in LEGACY numbering (tap = residual stream AFTER target layer L = bn_forward's
// taps), so a dflash file's target_layers are shifted by −1 on load.
// Math (written once, in dspark.c): encoder g = RMSNorm(fc·concat(taps); hidden_norm); context
// K/V injection K = RoPE(RMSNorm_head(W_k g)), V = W_v g into the drafter's own KV cache; the
// non-causal block pass over [id_last, MASK × (B−1)] with log-SNR conditioning; output norm + LM
// head; Markov chain (argmax skipping MASK, ties → lowest id); confidence head with p_min.
//
// Speculative loop (bn_spec): prefill with taps, draft, verify [id_last, d0..d_{k−1}] in ONE
// engine forward (all_logits + taps), accept by sample-and-compare, commit when a draft was
// rejected by restoring the target's pre-verify snapshot and re-running the accepted prefix (CPU
// engine) or by restoring the per-token snapshot after the last accepted token that the verify
// pass kept in device memory (CUDA engine, bn_engine_forward_snaps; forward.h snapshot contract),
// drafter KV truncation, §7 counters, and an online cost model that shortens or switches off
// drafting when it does not pay.
#ifndef BONSAI_DSPARK_H
#define BONSAI_DSPARK_H
#include "base/args.h"
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "core/model.h"
#include "core/forward.h"
#include "core/engine.h"
#include "core/sampler.h"
#include "synth/mkdrafter.h"

// ---- the drafter ---------------------------------------------------------------------------

typedef struct {
    int convention;         // enum bn_drafter_convention of the file
    int n_embd;             // E (== target n_embd)
    int n_layer, n_ff, n_head, n_head_kv, head_dim, n_rot;
    float rope_base, norm_eps;
    int n_vocab;            // V (== target n_vocab)
    int block_size;         // B
    int mask_token_id;
    int n_taps;             // C
    int tap_layers[BN_DRAFTER_MAX_TAPS]; // LEGACY numbering: output of target layer L
    int markov_rank;        // R
    bool has_conf;          // confidence head present
    int conf_in;            // E or E + R
    bool log_snr;
    float min_log_snr, max_log_snr;
    int snr_feat;           // fc1 input width (sin half + cos half)
} bn_drafter_config;

typedef struct {
    bn_weight attn_norm, ffn_norm;           // {E}
    bn_weight attn_q;                        // {E, nh*hd}
    bn_weight attn_k, attn_v;                // {E, nkv*hd}
    bn_weight attn_output;                   // {nh*hd, E}
    bn_weight attn_q_norm, attn_k_norm;      // {hd}
    bn_weight ffn_gate, ffn_up;              // {E, F}
    bn_weight ffn_down;                      // {F, E}
} bn_drafter_layer;

typedef struct bn_drafter {
    bn_drafter_config cfg;
    bn_weight token_embd;    // {E, V} (drafter's, else the target's)
    bn_weight output;        // {E, V} (drafter's output, else drafter token_embd, else target's output)
    bn_weight output_norm;   // {E}
    bn_weight fc;            // {C*E, E}
    bn_weight hidden_norm;   // {E}
    bn_weight markov_a;      // {R, V} row lookup by prev token (W1)
    bn_weight markov_b;      // {R, V} mat-vec (W2)
    float markov_b_scale;    // optional markov_w2.scale (1 if absent)
    bn_weight conf_w;        // {conf_in, 1}
    bn_weight conf_b;        // {1}
    bn_weight snr_fc1_w;     // {snr_feat, E}
    bn_weight snr_fc1_b;     // {E}
    bn_weight snr_fc2_w;     // {E, E}
    bn_weight snr_fc2_b;     // {E}
    bn_drafter_layer *layers;
    float *conf_wf;          // [conf_in] confidence weights as floats
    float *snr_emb;          // [2][E]: the log-SNR embedding of the anchor row (0) and of a mask row (1)
    gguf_file *gguf;
} bn_drafter;

// bn_drafter_load: opens a drafter GGUF of either convention, checks every key, tensor and
// shape against the target (E, V, tap layers < target n_layer); target may be NULL only when
// the file has its own token_embd/output. Returns NULL with one clear line in err.
bn_drafter *bn_drafter_load(const char *path, const bn_model *target, char *err, size_t errlen);
void bn_drafter_free(bn_drafter *d);

// The drafter's per-sequence state: its KV cache (context rows at target positions 0..n_cache−1,
// plus temporary block rows) and scratch. One allocation per buffer set.
typedef struct bn_dstate bn_dstate;
// bn_dstate_new: a drafter state for up to n_ctx positions (block rows included); dies on OOM.
bn_dstate *bn_dstate_new(const bn_drafter *d, int n_ctx, int n_threads);
// bn_dstate_new_pool: same, but borrowing a thread pool (e.g. the target state's: the drafter and
// the target never run at the same time, so one set of workers serves both). Never NULL.
struct bn_pool;
bn_dstate *bn_dstate_new_pool(const bn_drafter *d, int n_ctx, struct bn_pool *pool);
void bn_dstate_free(bn_dstate *s);
// bn_dstate_n_cache: number of context rows in the drafter KV cache (= target positions processed).
int bn_dstate_n_cache(const bn_dstate *s);
// bn_dstate_truncate: drops context rows at positions >= n (KV truncation: only the count drops, rows < n stay
// intact, which the prompt cache relies on); returns the new count.
int bn_dstate_truncate(bn_dstate *s, int n);

// bn_drafter_encode: g[t] = RMSNorm(fc · taps[t]; hidden_norm) for t < n; taps: [n][C][E]
// (bn_forward's layout), g: [n][E]. Returns 0.
int bn_drafter_encode(const bn_drafter *d, bn_dstate *s, const float *taps, int n, float *g);
// bn_drafter_process: encodes n tap rows of target positions pos0..pos0+n−1 and writes their K/V
// into every drafter layer's cache (docs/dspark.md §4.3). pos0 must equal bn_dstate_n_cache (rows are
// appended in order; truncate first to rewrite). Returns 0 or -1 with err.
int bn_drafter_process(const bn_drafter *d, bn_dstate *s, const float *taps, int n, int pos0, char *err,
                       size_t errlen);
// One sequence of a batched K/V injection (bn_drafter_process_multi).
typedef struct {
    bn_dstate *s;       // its drafter state (one per sequence)
    const float *taps;  // [n][C][E] tap rows
    int n, pos0;        // their count and first target position (== bn_dstate_n_cache(s))
} bn_process_seq;
// bn_drafter_process_multi: bn_drafter_process for n sequences of d at once: their rows go through the encoder and
// the K/V projections together, in chunks of the first state's scratch rows (>= 64), each row's K/V into its own
// sequence's cache. Results equal bn_drafter_process's up to the matmuls' summation order over more rows. Returns 0 or
// -1 with err (nothing processed when an argument is wrong).
int bn_drafter_process_multi(const bn_drafter *d, const bn_process_seq *seqs, int n, char *err, size_t errlen);
// bn_drafter_block: the non-causal block pass over [id_last, MASK × (n_rows−1)] at positions
// n_past.. (docs/dspark.md §4.4; n_rows <= B, mainline's n_block = n_max); writes h [n_rows][E] (after
// output_norm) and base logits [n_rows][V] (either may be NULL). The block rows' K/V are dropped
// afterwards. n_past must equal n_cache. Returns 0 or -1 with err.
int bn_drafter_block(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_rows, float *h,
                     float *base, char *err, size_t errlen);
// bn_drafter_markov: the Markov chain over n rows of base logits [n][V] with hidden h [n][E]
// (docs/dspark.md §4.5–4.6): prev_0 = id_last, d_i = argmax(base_i + W2·W1[prev_i]) skipping MASK
// (ties → lowest id). conf (may be NULL) gets c_i (1 when there is no confidence head). Stops
// early at the first i with c_i < p_min when p_min > 0. Returns the number of drafts written.
int bn_drafter_markov(const bn_drafter *d, bn_dstate *s, const float *base, const float *h, int n, int32_t id_last,
                      float p_min, int32_t *drafts, float *conf);
// bn_drafter_step_logits: one Markov step's logits [V] = base_row [V] + scale · W2·W1[prev] (prev a valid
// non-MASK id), the vector bn_drafter_markov takes its argmax of (tests use it to tell near-ties).
void bn_drafter_step_logits(const bn_drafter *d, bn_dstate *s, const float *base_row, int32_t prev, float *logits);
// bn_drafter_draft: block pass + Markov chain: up to n_max (<= B) drafts after id_last at n_past.
// Returns the count (>= 0) or -1 with err.
int bn_drafter_draft(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_max, float p_min,
                     int32_t *drafts, char *err, size_t errlen);

// One sequence of a batched draft (bn_drafter_draft_multi).
typedef struct {
    bn_dstate *s;     // its drafter state (one per sequence)
    int32_t id_last;  // the anchor
    int n_past;       // its position (== bn_dstate_n_cache(s))
    int n_max;        // drafts wanted (clamped to B; <= 0: none)
    int32_t *drafts;  // out: room for n_max
    int n_drafts;     // out: bn_drafter_draft's count
} bn_draft_seq;
#define BN_DRAFT_MULTI_MAX 64 // sequences per block pass (more run in further passes)
// bn_drafter_draft_multi: bn_drafter_draft for n sequences of d at once: their block rows go through the layers
// together (one matmul per weight over every sequence's rows, as many as the first state's scratch holds: at least
// 64 rows, i.e. 4 sequences of B = 16; attention per row on its own sequence's cache), then each sequence's Markov
// chain. The first state's thread pool runs it. Results equal bn_drafter_draft's per sequence up to the matmuls'
// summation order over more rows. Returns 0 (counts in seqs[i].n_drafts) or -1 with err (drafts undefined).
int bn_drafter_draft_multi(const bn_drafter *d, bn_draft_seq *seqs, int n, float p_min, char *err, size_t errlen);

// ---- the drafter on a target engine's device ------------------------------------------------
// A backend with its own drafter implementation (CUDA: cuda/dspark*.cu, registered by
// bn_cuda_engine_new) registers these ops for its engine ops table; bn_spec on a target state of that
// engine then drafts on the device (same contracts as bn_dstate_* / bn_drafter_process / _draft).
typedef struct bn_dev_drafter_ops {
    const char *name; // e.g. "CUDA"
    void *(*state_new)(const bn_drafter *d, int n_ctx, char *err, size_t errlen); // uploads d + a state
    void (*state_free)(void *ds);
    int (*truncate)(void *ds, int n); // as bn_dstate_truncate: rows < n must stay intact (prompt cache)
    int (*process)(void *ds, const float *taps, int n, int pos0, char *err, size_t errlen); // host taps
    // draft (as bn_drafter_draft) in two halves, so that several states can draft at once (bench/bench_draft):
    // draft_start enqueues the work and returns the rows it drafts (0: nothing to draft) or -1 with err;
    // draft_finish(ds, that count, ...) waits for every enqueued work (also with a count of 0) and returns the draft
    // count or -1 with err
    int (*draft_start)(void *ds, int32_t id_last, int n_past, int n_max, char *err, size_t errlen);
    int (*draft_finish)(void *ds, int n, float p_min, int32_t *drafts, char *err, size_t errlen);
    void *(*host_alloc)(size_t bytes); // page-locked host memory for the taps (DMA both ways); NULL on failure
    void (*host_free)(void *p);
    // Device tap hand-over (both optional; NULL: host taps through `process`). target_taps: a device
    // buffer of the target state ts (its engine is the one these ops are registered for) for rows tap
    // rows [rows][n_taps][E] that ts's forward accepts as bn_forward_out.taps, writing the taps there
    // without a host copy; owned by ts, valid while ts lives. NULL with err when it cannot be had.
    float *(*target_taps)(bn_engine_state *ts, int n_taps, int rows, char *err, size_t errlen);
    // process_dev: `process` with the taps in that device buffer (rows 0..n−1), read in place.
    int (*process_dev)(void *ds, const float *dev_taps, int n, int pos0, char *err, size_t errlen);
    // process_start (optional): `process` (on_device false) or `process_dev` (true) that returns once the work is
    // enqueued, before a draft_start that reads the rows in order; the taps stay untouched until its draft_finish
    // (bn_spec_rounds_begin: the slots' injections and drafts all run at once)
    int (*process_start)(void *ds, const float *taps, bool on_device, int n, int pos0, char *err, size_t errlen);
    // draft_multi: draft (as draft_start + draft_finish) for n >= 1 states of one drafter at once (bn_spec_rounds_begin:
    // one call per drafter), after the work queued on each; drafts[i] (room for n_max[i]), counts[i]; 0 or -1 with
    // err. Every state's queued work is waited for when it returns 0
    int (*draft_multi)(void *const *dss, const int32_t *id_last, const int *n_past, const int *n_max, int n,
                       float p_min, int32_t *const *drafts, int *counts, char *err, size_t errlen);
} bn_dev_drafter_ops;
// bn_dev_drafter_register: makes ops the drafter of targets on engines with ops table engine_ops
// (NULL ops removes it). At most 4 backends.
void bn_dev_drafter_register(const bn_engine_ops *engine_ops, const bn_dev_drafter_ops *ops);
// bn_dev_drafter_for: the registered device drafter of e's backend, or NULL (CPU, or not registered).
const bn_dev_drafter_ops *bn_dev_drafter_for(const bn_engine *e);

// ---- speculative decoding ------------------------------------------------------------------
// Server use (per slot; the drafter is read-only after load and may be shared by all slots):
//   sp = bn_spec_new_engine(slot_state, drafter, &params, err, n);       once per slot (any engine)
//   bn_spec_prefill(sp, prompt, n_prompt, err, n);                         per request (resets the
//       slot state and prefills the whole prompt), or with the prompt cache:
//   r = bn_spec_prefill_cached(sp, prompt, n_prompt, snap, err, n);        r positions reused (0: full
//       prefill), then bn_engine_snapshot_into(slot_state, snap) right after it: the cache entry for
//       the next request (position n_prompt − 1; the slot's tokens prompt[0..n_prompt−1))
//   loop: k = bn_spec_generate_step(sp, sampler, out, cap, err, n);       emits out[0..k), k >= 1
//       the caller stops at EOG / n_predict / stop strings and discards the rest of out[] of that
//       step; bn_spec_step_logits(sp, i) gives token i's target logits (log-probs).
//   timings.draft_n = stats.n_drafted, draft_n_accepted = stats.n_accept (bn_spec_stats_get).

enum bn_spec_type {
    BN_SPEC_NONE = 0,   // plain decoding through the same loop (1 token per step)
    BN_SPEC_DSPARK = 1, // the DSpark drafter
    BN_SPEC_ORACLE = 2, // MEASUREMENT AID ONLY: proposes the target's own greedy continuation,
                        // computed by a second target state, to force acceptance in speed tests
    BN_SPEC_REPLAY = 3, // MEASUREMENT AID ONLY: runs the real DSpark drafter every round (its full
                        // cost) but proposes tokens of a recorded greedy continuation (params.replay)
                        // instead of its drafts: DSpark speed at forced acceptance, drafter included
};

typedef struct {
    int type;           // enum bn_spec_type
    int n_max;          // drafts per round (clamped to the drafter's block size for DSPARK)
    int n_min;          // drafts shorter than this are not verified (0 = any)
    float p_min;        // confidence truncation (0 = off)
    bool adaptive;      // cost model: shorten / switch off drafting when it does not pay
    int n_threads;      // for the drafter / oracle state (<= 0: all CPUs)
    int oracle_miss_every; // ORACLE only: replace every Nth proposed token by a wrong one (0 = never),
                           // to measure speed at a controlled acceptance rate (and test partial accepts)
    bool cpu_drafter;   // DSPARK/REPLAY: keep the drafter on the CPU even when the target's engine has a
                        // device drafter (default: the device drafter, bn_dev_drafter_for)
    bool host_taps;     // with a device drafter: hand the taps over through host memory (target → host →
                        // drafter) instead of the target's device tap buffer (default; for tests/measurement)
    const int32_t *replay; // REPLAY only: the continuation after the prompt (token i = i-th generated),
    int n_replay;          //   the caller's, valid until bn_spec_free; proposals past its end are not made
    bool no_step_logits;   // the caller needs no step logits: a verify pass asks the engine for each row's argmax
                           // (greedy sampler, bn_sampler_is_greedy) or its top_k best logits (a sampler that reads
                           // no more, bn_sampler_topk_needed with k <= 64) instead of the row (no logits copied to
                           // the host; bn_spec_step_logits then returns NULL). Default false: rows kept (n_probs)
    size_t cpu_snap_bytes; // CPU target: keep a snapshot after every verified token (a rejection restores the one
                           // after the last accepted token, like the CUDA engines) when n_max + 1 of them take at
                           // most this many bytes; else (default 0) one snapshot before the verify pass, restored
                           // and the accepted prefix re-run (BN_SPEC_CPU_SNAP_BYTES: the tools' default)
} bn_spec_params;

// The tools' default bn_spec_params.cpu_snap_bytes: 256 MiB per slot (notes/verify-cost.md).
#define BN_SPEC_CPU_SNAP_BYTES ((size_t)256 << 20)

// §7 counters. Relations: n_accept <= n_drafted; mean_acc_len = 1 + n_accept / n_rounds_spec;
// acc_pos[i] = rounds with >= i+1 accepted; acc_pos[0] >= acc_pos[1] >= ...; Σ_i acc_pos[i] = n_accept.
typedef struct {
    int64_t n_steps;        // generate steps (target verify/decode passes)
    int64_t n_rounds_spec;  // steps that verified >= 1 draft (n_call_accept)
    int64_t n_drafted;      // Σ draft lengths sent to verify
    int64_t n_accept;       // Σ accepted drafts
    int64_t n_emitted;      // tokens emitted (= n_accept + n_steps)
    int64_t n_rerun;        // rollbacks that re-ran the accepted prefix (0 with per-token snapshots)
    bool per_token_snaps;   // rollbacks restore a snapshot taken after each verified token (no re-runs)
    int64_t acc_pos[64];    // rounds with >= i+1 drafts accepted
    int64_t drafted_pos[64];// rounds that drafted >= i+1 tokens
    double ms_draft, ms_verify, ms_rerun, ms_process;
    int n_max_now;          // current draft length chosen by the adaptive model (0 = drafting off)
} bn_spec_stats;

typedef struct bn_spec bn_spec;

// bn_spec_new_engine: a speculative decoder over the target engine state ts (CPU or CUDA; owned by
// the caller, which must not use it between bn_spec_prefill and the last step); d is the drafter
// for BN_SPEC_DSPARK (NULL otherwise). The oracle's second target state lives on ts's engine. Returns
// NULL with err on a bad combination or a failed (device) allocation.
bn_spec *bn_spec_new_engine(bn_engine_state *ts, const bn_drafter *d, const bn_spec_params *p, char *err,
                            size_t errlen);
// bn_spec_new: bn_spec_new_engine over a CPU bn_state of target (the caller's; the oracle's state
// uses p->n_threads threads). Returns NULL with err on a bad combination.
bn_spec *bn_spec_new(const bn_model *target, bn_state *ts, const bn_drafter *d, const bn_spec_params *p, char *err,
                     size_t errlen);
void bn_spec_free(bn_spec *sp);
// bn_spec_prefill: resets the target (and drafter) and decodes prompt[0..n−2] with taps;
// prompt[n−1] becomes id_last. n >= 1. Returns 0 or -1 with err.
int bn_spec_prefill(bn_spec *sp, const int32_t *prompt, int n, char *err, size_t errlen);
// Prompt cache with speculation (the fork cannot: docs/dspark.md §8). What a restored prefix of n_reuse
// positions needs, and why nothing more is saved:
//   - the target: recurrent state + position from an engine snapshot (the caller's, bn_engine_snapshot_into
//     of ts after an earlier prefill); its KV rows < n_reuse are still in ts's cache (core/forward.h rule);
//   - the drafter: only its context K/V rows < n_reuse. A row depends on the target's taps at that one
//     position (docs/dspark.md §4.2–4.3), i.e. on the tokens 0..p alone, and bn_dstate_truncate (CPU and device)
//     only lowers the row count while block passes write at >= n_cache, so rows < n_reuse written by an
//     earlier request for the same tokens are still there and exact: no copy. The drafter keeps no other
//     state between rounds (no last hidden or taps; id_last and n_past are the spec's and come from the
//     prompt). bn_spec records the token committed at every position (target KV rows and drafter rows are
//     written only together through it) and reuses a snapshot only when those tokens are a prefix of the
//     new prompt, so a stale cache (rows rewritten by a request that diverged earlier) falls back to a
//     full prefill instead of drafting from wrong rows;
//   - the oracle measurement aid keeps a second target state without a snapshot: it always re-prefills.
// bn_spec_prefill_cached: bn_spec_prefill that continues from snap, a snapshot of sp's target state taken
// by the caller after an earlier bn_spec_prefill[_cached] of sp (no target pass outside sp since): restores
// it (position n_reuse) and, when 1 <= n_reuse <= n − 1 and the tokens sp committed at positions < n_reuse
// equal prompt[0..n_reuse), decodes only prompt[n_reuse..n−2]. Otherwise (snap NULL, not a prefix, rows
// rewritten since, ORACLE) a full bn_spec_prefill. Returns n_reuse, 0 after a full prefill, or -1 with err.
int bn_spec_prefill_cached(bn_spec *sp, const int32_t *prompt, int n, const bn_engine_snapshot *snap, char *err,
                           size_t errlen);
// bn_spec_generate_step: one round (draft, verify, accept, commit). Writes the emitted tokens
// (accepted drafts then the target's own sample; at least 1) to out (room for n_max + 1) and
// returns their count, or -1 with err (e.g. context full). smp samples every target row
// (sample-and-compare). The last emitted token is the new id_last (not yet decoded by the target).
int bn_spec_generate_step(bn_spec *sp, bn_sampler *smp, int32_t *out, int out_cap, char *err, size_t errlen);
// bn_spec_round_begin / bn_spec_round_end: bn_spec_generate_step in two halves around its target pass, so that the
// caller can run that pass together with other sequences' (bn_engine_forward_multi; bonsai-serve's slots begin their
// rounds together, bn_spec_rounds_begin, through bn_step_batcher_round). round_begin chooses the draft length, drafts, and
// describes the verify pass [id_last, d0..d_{nd−1}] in *pass (pointing into sp, valid until round_end); returns 0
// or -1 with err. The caller runs exactly that pass, then round_end (ms: the pass's time as the caller saw it, for
// the cost model; < 0: unmeasured) accepts, commits or rolls back and writes the emitted tokens as
// bn_spec_generate_step; returns their count or -1 with err (also when the pass did not run). Both touch the
// target state and the drafter: no other forward of the engine may run meanwhile (serve: under the engine lock).
int bn_spec_round_begin(bn_spec *sp, bn_sampler *smp, int out_cap, bn_engine_seq *pass, char *err, size_t errlen);
int bn_spec_round_end(bn_spec *sp, bn_sampler *smp, double ms, int32_t *out, char *err, size_t errlen);
// One decoder's round in a batch of rounds (bn_spec_rounds_begin).
typedef struct {
    bn_spec *sp;         // in: the decoder (at most once per batch)
    bn_sampler *smp;     // in: its sampler
    int out_cap;         // in: room in its round_end's out
    bn_engine_seq pass;  // out: its verify pass (bn_spec_round_begin's *pass)
    int rc;              // out: 0, or -1 with err (no pass: do not run it, no round_end)
    char err[256];
} bn_spec_round;
// bn_spec_rounds_begin: bn_spec_round_begin for n decoders at once (distinct target states on one engine, e.g. a
// server's slots), each followed as before by its pass and its bn_spec_round_end. The decoders that draft with one
// DSpark drafter on the CPU draft together in bn_drafter_draft_multi (one block pass for all); device drafters and the
// oracle draft one after another, device drafters all started before any is waited for (each on its own
// stream: they run at once). A decoder's drafting time for the cost model is the time it waited for its drafts
// (the shared pass's, in a batch). Returns the number of rounds that failed (their rc -1, err filled).
int bn_spec_rounds_begin(bn_spec_round *r, int n);
// bn_spec_set_no_step_logits: params.no_step_logits for the steps from now on (a server sets it per request: on when
// the request wants no log-probs).
void bn_spec_set_no_step_logits(bn_spec *sp, bool on);
// bn_spec_step_logits: the target's logits row that produced emitted token i (0 <= i < the count
// the last bn_spec_generate_step returned; NULL when that step kept no rows, params.no_step_logits),
// for log-probs (n_probs); [n_vocab] floats, valid until
// the next step. NULL for a bad i.
const float *bn_spec_step_logits(const bn_spec *sp, int i);
// bn_spec_step_drafts: the drafts the last bn_spec_generate_step verified (count in *n, 0 when it did not
// draft), for tests and traces; valid until the next step.
const int32_t *bn_spec_step_drafts(const bn_spec *sp, int *n);
// bn_spec_n_past: committed target positions (the target state's position).
int bn_spec_n_past(const bn_spec *sp);
// bn_spec_stats_get: the counters so far.
const bn_spec_stats *bn_spec_stats_get(const bn_spec *sp);
// bn_spec_print_stats: common_speculative_print_stats-style lines to f.
void bn_spec_print_stats(const bn_spec *sp, FILE *f);
// bn_spec_drafter_device: "CPU" or the device drafter's backend name ("CUDA") for DSPARK/REPLAY; NULL
// for the other types.
const char *bn_spec_drafter_device(const bn_spec *sp);
// bn_spec_type_from_name: "draft-dspark" / "draft-oracle" / "draft-replay" / "none" → enum, or -1.
int bn_spec_type_from_name(const char *name);
// bn_spec_args: the speculative options shared by bonsai-speculative and bonsai-serve (base/args.h) over a
// bn_spec_params (the table's base): --spec-type, --spec-draft-n-max/-n-min/-p-min, --no-spec-adaptive,
// --spec-snap-mem (the drafter's path, -md, is the tool's).
extern const bn_arg bn_spec_args[];

#endif
