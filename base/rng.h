// base/rng.h — the project's one seeded PRNG: xoshiro256** seeded through splitmix64. Small state
// (fits in a checkpoint), identical sequence for a seed on every machine. Used by the sampler, the
// model/drafter generators, LoRA init, dropout and data shuffling.
#ifndef BONSAI_RNG_H
#define BONSAI_RNG_H
#include <stdint.h>

typedef struct { uint64_t s[4]; } bn_rng;

// bn_rng_splitmix64: advances *x and returns the next splitmix64 output.
static inline uint64_t bn_rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// bn_rng_seed: deterministic state from a 64-bit seed (four splitmix64 outputs).
static inline void bn_rng_seed(bn_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = bn_rng_splitmix64(&seed);
}

static inline uint64_t bn_rng_rotl_(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// bn_rng_next: next 64 random bits (xoshiro256**).
static inline uint64_t bn_rng_next(bn_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = bn_rng_rotl_(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = bn_rng_rotl_(s[3], 45);
    return result;
}

// bn_rng_uniform: a double in [0, 1) with 53 random bits.
static inline double bn_rng_uniform(bn_rng *r) { return (double)(bn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

// bn_rng_uniform_f24: a float in [0, 1) with 24 random bits.
static inline float bn_rng_uniform_f24(bn_rng *r) { return (float)(bn_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

// bn_rng_below: an integer in [0, n) (n > 0).
static inline uint64_t bn_rng_below(bn_rng *r, uint64_t n) { return (uint64_t)(bn_rng_uniform(r) * (double)n); }
#endif
