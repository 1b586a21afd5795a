// cuda/cuda_train_graph.h — the training forward and backward of train/graph.h in LoRA mode (last-position logits,
// adapter gradients) on the device (cuda/train_graph.cu), callable from C. cuda/train_graph.cu registers these as the
// bn_train_device backend of train/device.h; tests and tools may call them directly. Host arrays in, host arrays out:
// the model's weights (stored types), the adapter's parameters and gradients stay on the device.
#ifndef BONSAI_CUDA_TRAIN_GRAPH_H
#define BONSAI_CUDA_TRAIN_GRAPH_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "train/lora.h"
#include "train/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_cuda_trainer bn_cuda_trainer;
typedef struct bn_cuda_train_graph bn_cuda_train_graph;

// bn_cuda_trainer_new: m's weights and a copy of adapter l (layout and parameters; l NULL = the base model only) on
// device `device`, the layers' base-weight products in opts->gemm's arithmetic (NULL: the default, bf16 inputs with
// fp32 accumulation; the LM head's one-position product stays fp32); NULL (err) on failure, for an architecture
// train/graph.h does not train, or for what the device path does not do (l->dropout > 0). With l->ste m's adapted
// weights hold W_eff (train/lora.h): no LoRA pair in the forward, the straight-through backward. Keeps a pointer to
// m.
bn_cuda_trainer *bn_cuda_trainer_new(const bn_model *m, const bn_lora *l, int device, const bn_train_device_opts *opts,
                                     char *err, size_t errlen);
// bn_cuda_trainer_free: frees the trainer (NULL is fine); its graphs must be freed first.
void bn_cuda_trainer_free(bn_cuda_trainer *t);
// bn_cuda_trainer_load_params: uploads l's parameters (l must have the layout of the trainer's adapter), with l->ste
// also m's adapted weights, read again from their host buffers; 0 or -1.
int bn_cuda_trainer_load_params(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen);
// bn_cuda_train_forward: the last position's logits {n_vocab} of tokens[0..n) into host logits, with the adapter or
// without (the reference); returns the graph (the device's layer inputs) for bn_cuda_train_backward, or NULL (err).
bn_cuda_train_graph *bn_cuda_train_forward(bn_cuda_trainer *t, bool use_adapter, const int32_t *tokens, int n,
                                           float *logits, char *err, size_t errlen);
// bn_cuda_train_forward_all: every position's logits {n_vocab, n} of tokens[0..n) into host logits (the tether's
// forward), with the adapter or without; the graph's bn_cuda_train_backward then takes dlogits {n_vocab, n}. NULL (err).
bn_cuda_train_graph *bn_cuda_train_forward_all(bn_cuda_trainer *t, bool use_adapter, const int32_t *tokens, int n,
                                               float *logits, char *err, size_t errlen);
// bn_cuda_train_backward: ADDS ∂L/∂A, ∂L/∂B for host dlogits {n_vocab} into the device's gradients (each layer
// recomputed from its saved input, as train/graph.c does; dlogits {n_vocab, n} for a graph of
// bn_cuda_train_forward_all); the graph must come from a forward with the adapter.
// 0 or -1 (err).
int bn_cuda_train_backward(bn_cuda_train_graph *g, const float *dlogits, char *err, size_t errlen);
// bn_cuda_train_graph_free: frees a forward's graph (NULL is fine).
void bn_cuda_train_graph_free(bn_cuda_train_graph *g);
// bn_cuda_trainer_take_grads: host grads[0..n_params) += the device's gradients, which are zeroed; 0 or -1 (err).
int bn_cuda_trainer_take_grads(bn_cuda_trainer *t, float *grads, char *err, size_t errlen);
// bn_cuda_trainer_mem_in_use: bytes in use on the trainer's device now, all users together (cudaMemGetInfo's total
// − free); 0 when the driver does not say.
size_t bn_cuda_trainer_mem_in_use(bn_cuda_trainer *t);
// bn_cuda_train_mem_info: device `device`'s free and total bytes (cudaMemGetInfo after cudaSetDevice, before any
// trainer opens it); 0 or -1 (err).
int bn_cuda_train_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
