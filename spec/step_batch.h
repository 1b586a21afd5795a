// spec/step_batch.h — decode steps (one token) and speculative rounds (drafting, then a verify pass of several tokens
// with per-token snapshots) from several threads, each on its own sequence state of one engine, run together (group
// commit): the rounds begin together (bn_spec_rounds_begin: one batched drafter pass), then every pass runs in one
// bn_engine_forward_multi. A thread's request joins the waiting list; a thread that finds no batch running becomes
// the leader, waits until every decoding sequence's request is there (or gather_us have passed: a sequence still busy
// elsewhere, e.g. sampling), and runs the list as one batch; the requests that arrive meanwhile form the next one.
// Used by bonsai-serve's slots and by the mining tools' in-process sources (--parallel -ngl).
#ifndef BONSAI_STEP_BATCH_H
#define BONSAI_STEP_BATCH_H
#include <pthread.h>
#include <stdint.h>
#include "core/engine.h"
#include "spec/dspark.h"

typedef struct bn_step_batcher bn_step_batcher;

// bn_step_batcher_new: a batcher; gather_us: the longest a leader waits for the other decoding sequences.
// Returns it (dies on OOM).
bn_step_batcher *bn_step_batcher_new(int gather_us);
// bn_step_batcher_free: frees it (NULL is fine; no step may be waiting).
void bn_step_batcher_free(bn_step_batcher *b);
// bn_step_batcher_lock / _unlock: exclusive use of the engine around any other forward on it (a prefill, a
// speculative step), granted in arrival order with the batches (a ticket lock: a prefill waiting behind a
// stream of batches gets the engine after the one running, not after the stream).
void bn_step_batcher_lock(bn_step_batcher *b);
void bn_step_batcher_unlock(bn_step_batcher *b);
// bn_step_batcher_decoding: a sequence enters (+1) or leaves (-1) its decode loop (a leader waits for the steps
// of the sequences inside it).
void bn_step_batcher_decoding(bn_step_batcher *b, int delta);
// bn_step_batcher_step: token tok appended to st (out as bn_engine_forward's, one row), run in a batch with the
// other waiting steps; returns 0 or -1 with err filled (the whole batch's error).
int bn_step_batcher_step(bn_step_batcher *b, bn_engine_state *st, int32_t tok, bn_forward_out *out, char *err,
                         size_t errlen);
// bn_step_batcher_pass: the pass seq (bn_engine_forward_multi's sequence: its tokens, out and snapshots, which must
// stay valid until it returns) run in a batch with the other waiting passes; 0 or -1 with err filled (the whole
// batch's error).
int bn_step_batcher_pass(bn_step_batcher *b, const bn_engine_seq *seq, char *err, size_t errlen);
// bn_step_batcher_round: a speculative round (spec/dspark.h) begun in a batch with the other waiting rounds (their
// drafting batched: bn_spec_rounds_begin) and its verify pass run with the batch's passes; the caller then ends the
// round (bn_spec_round_end under bn_step_batcher_lock) with *ms, the time of the forward that ran the pass. Returns 0,
// or -1 with round->err (the round's error, or the whole batch's when its forward failed; no round_end then).
int bn_step_batcher_round(bn_step_batcher *b, bn_spec_round *round, double *ms);
// bn_step_batcher_counts: batches run so far and the passes they carried; batches that began speculative rounds and
// the rounds they began (rounds / round_batches: the decoders per batched drafting call).
void bn_step_batcher_counts(bn_step_batcher *b, uint64_t *batches, uint64_t *steps, uint64_t *round_batches,
                            uint64_t *rounds);
#endif
