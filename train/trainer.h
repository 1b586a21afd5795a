// train/trainer.h — the FTPO LoRA training loop (docs/antidoom.md §9–11): per optimizer step
// batch × grad_accum rows, policy forward + backward per row (train/graph.h), reference logits
// cached per row, FTPO loss/metrics per micro-batch, gradient averaging over micro-batches,
// global-norm clipping, HF linear warmup/decay, AdamW; running chosen_win over the last
// log_window steps for early stopping; atomic checkpoints (train/checkpoint.h) and resume.
#ifndef BONSAI_TRAIN_TRAINER_H
#define BONSAI_TRAIN_TRAINER_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/model.h"
#include "train/pairs_in.h"
#include "train/ftpo.h"
#include "train/adamw.h"
#include "train/lora.h"
#include "train/device.h"

typedef struct {
    // adapter
    unsigned targets;      // bn_lora_target mask (q,k,v,o,gate,up,down)
    int rank;              // 32
    float alpha;           // 0 = rank (scale 1)
    float dropout;         // 0
    uint64_t seed;         // 3407: LoRA init, epoch shuffles, dropout
    // optimisation
    int epochs;            // 12
    float lr;              // 3e-5
    int batch, grad_accum; // 4 × 4
    float warmup_ratio;    // 0.1
    bn_adamw_cfg adam;     // β (0.9, 0.999), eps 1e-8, wd 0.01
    float max_grad_norm;   // 2.5
    bn_ftpo_cfg loss;      // antidoom preset
    float early_stop;      // stop when the running chosen_win over a full window >= this (<= 0: off); 0.4
    int log_window;        // steps in the running mean (5; at most 64)
    int64_t max_steps;     // stop after this many optimizer steps in this run (0 = no limit)
    int save_every;        // checkpoint every N steps (0 = at epoch ends and the end only)
    bool eval_each_epoch;  // no-grad chosen_win over train and held-out rows after each epoch
    const char *out_adapter; // adapter GGUF written at the end (NULL = none)
    const char *ckpt_path;   // checkpoint file (NULL = none)
    const char *resume_path; // checkpoint to resume from (NULL = fresh)
    const char *init_adapter; // fresh run starting from this adapter's A, B (same targets/rank) instead of the PEFT
                              // init (NULL = PEFT init); fresh optimizer state and schedule (e.g. a second round)
    const char *log_jsonl;   // per-step JSON lines (NULL = none)
    const char *ste_type;    // train through requantization (NULL = off): the policy forward uses every weight
                             // as `bonsai-quantize --type ste_type` stores it, adapted ones as deq(Q(W0 + s·B·A))
                             // recomputed after each step, with the straight-through backward; the reference
                             // and the evaluations are the quantized base / quantized adapted model. Needs
                             // dropout 0; part of the checkpoint (resume refuses a different type).
    bool ste_keep_scales;    // with ste_type: adapted weights quantized with the quantized base's block scales
                             // (bn_quantize_keep_scales: Q1_0/Q2_0/PQ2_0; the adapter changes codes, not scales);
                             // part of the checkpoint ("TYPE+keep"). Merge the same way (bn_lora_merge_requant).
    const char *ste_output_type; // with ste_type: output.weight's type, as bonsai-quantize --output-tensor-type
                                 // (NULL: the type rules); part of the checkpoint ("TYPE/T")
    // plain-text tether (train/tether.h; off when lambda_tether <= 0 or there are no tokens): every optimizer step
    // adds lambda_tether · mean_t KL(p_ref(·|t) ‖ p_θ(·|t)) over tether_batch windows of tether_ctx tokens of
    // tether_tokens, p_ref = the reference model (the quantized base under STE); the windows are a function of seed
    // and step, so --resume continues with the same ones (nothing extra in the checkpoint).
    const int32_t *tether_tokens;
    int64_t n_tether_tokens;
    float lambda_tether;     // 0
    int tether_ctx;          // 64
    int tether_batch;        // 2
    int tether_cache_mb;     // 512
    // data-parallel training (train/dp.h; NULL = one process): each of the world ranks runs its share of every
    // micro-batch of batch × world rows, the gradients are summed before the step, every rank holds the same adapter;
    // rank 0 alone prints, logs and writes. A run of w ranks × batch b equals one rank × batch w·b (to rounding; with
    // dropout the other ranks draw their own masks) and their checkpoints resume each other.
    struct bn_dp *dp;
    // > 0 (-ngl): the forwards and backwards on the registered device backend (train/device.h; the whole model,
    // whatever the count), the adapter, optimizer and checkpoints on the host as ever; without a device, a warning
    // and the CPU. Not with dropout or ste_type (the device backend refuses them).
    int n_gpu_layers;
    // with a device (-ngl > 0; --train-gemm): the base weights' products with bf16 inputs and fp32 accumulation (the
    // default), or fp32 as the CPU trainer computes them; the CPU trainer computes in fp32 whatever this says
    bn_train_gemm train_gemm;
    bool quiet;              // no per-step lines on stderr
    bool progress;           // a progress bar over the steps (base/progress.h; with quiet: the one sign of life)
} bn_ftpo_train_opts;

typedef struct {
    int64_t steps;          // optimizer steps done in total (including resumed ones)
    int64_t total_steps;    // schedule length S
    bool early_stopped;
    bool interrupted;       // stopped by bn_ftpo_train_request_stop
    double chosen_win_avg;  // running mean at the end
    double first_loss, last_loss;
    double first_chosen_win, last_chosen_win;
    double first_tether, last_tether; // tether KL (before the step's update; 0 when off)
    bool stalled;           // at the first epoch end with >= 20 steps run, the train rows' chosen_win was within 0.02
                            // of its start and their mean margin had risen by less than 0.5 (a warning was printed:
                            // the learning rate is likely too low); needs the per-epoch evaluation
    int64_t dev_plan_bytes; // on a device (-ngl): the memory plan's device total for the run's longest row (else 0)
    int64_t dev_peak_bytes; // on a device: the most device memory in use after a micro-batch's forwards or backwards,
                            // less what was in use before the run (0: the CPU, or the driver does not say)
} bn_ftpo_train_result;

typedef struct {
    int n_rows;
    double chosen_win;  // mean over rows of the per-row fraction z_c > z_r
    double margin_win;  // fraction of all valid chosen with Δ >= ε
    double mean_delta;  // mean Δ over all valid chosen
    double loss;        // mean per-row FTPO loss (reference = adapter disabled)
} bn_ftpo_eval_result;

// bn_ftpo_eval: no-grad metrics of adapter l (NULL = the base model) over the rows with
// heldout == which (0 train, 1 held out, -1 all); returns 0 or -1 (err).
int bn_ftpo_eval(const bn_model *m, const bn_train_rows *rows, bn_lora *l, const bn_ftpo_cfg *cfg, int which,
                 bn_ftpo_eval_result *res, char *err, size_t errlen);

// bn_ftpo_train_request_stop: async-signal-safe; the running bn_ftpo_train finishes its current
// step, writes its checkpoint (and adapter) and returns 0 with result.interrupted set.
void bn_ftpo_train_request_stop(void);

// bn_ftpo_train_defaults: the seed recipe of docs/antidoom.md §11 (see the field comments).
bn_ftpo_train_opts bn_ftpo_train_defaults(void);
// bn_ftpo_size_preset: the learning rate and LoRA rank for a model of n_params weights, one preset per size class:
// under 50 M 1e-3 / 16 (what the recipe found on the shipped 3 M model), under 1 B 3e-4 / 16, under 10 B 1e-4 / 32,
// larger 3e-5 / 32 (the seed recipe's, docs/antidoom.md §11, for the 27 B Bonsai models).
void bn_ftpo_size_preset(int64_t n_params, float *lr, int *rank);
// bn_ftpo_train: trains an adapter on the rows not marked heldout; returns 0 or -1 (err).
// A step's gradient is the mean over the micro-batches it actually had (the last step of an epoch
// may have fewer than grad_accum). The running chosen_win window (<= 64 steps) is checkpointed.
int bn_ftpo_train(const bn_model *m, const bn_train_rows *rows, const bn_ftpo_train_opts *o,
                  bn_ftpo_train_result *res, char *err, size_t errlen);

#endif
