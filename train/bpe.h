// train/bpe.h — a small byte-level BPE trainer for the reduced vocabularies of small models:
// merges learned from a text, written as a vocab-only GGUF in the layout of
// synth/mkmodel's synthetic vocabulary (tokenizer.ggml.model "gpt2", pre "qwen35"; ids 0..255 = the
// 256 byte tokens in byte order as GPT-2 bytes_to_unicode chars, then one token per merge in rank
// order, then <|endoftext|>, <|im_start|>, <|im_end|> as control tokens; eos = bos = padding =
// <|endoftext|>). `bonsai-mkmodel OUT.gguf --vocab VOCAB.gguf` copies it into a model.
// Training: the text is split into chunks (an optional leading space + a run of letters, of
// digits, or of other non-space bytes; runs of whitespace on their own), unique chunks are counted,
// and the most frequent adjacent pair (ties: the smaller pair of ids) is merged n_vocab − 259 times;
// a pair whose string is already a token is skipped. Deterministic.
#ifndef BONSAI_TRAIN_BPE_H
#define BONSAI_TRAIN_BPE_H
#include <stddef.h>

// bn_bpe_train_vocab: learns up to n_vocab − 259 merges from text[0..len) and writes the vocab GGUF
// to path atomically; stops early when no pair occurs twice. Returns the vocab size written, or -1
// (err) — n_vocab must be >= 259.
int bn_bpe_train_vocab(const char *text, size_t len, int n_vocab, const char *path, char *err, size_t errlen);

#endif
