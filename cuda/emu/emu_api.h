// cuda/emu/emu_api.h — C controls of the CUDA-on-CPU emulator (only in binaries linked with
// bonsai_cuda_emu; code built for both guards calls with #ifdef BONSAI_CUDA_EMU).
#ifndef BONSAI_CUDA_EMU_API_H
#define BONSAI_CUDA_EMU_API_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// bn_cuda_emu_stats: counters since the process started.
typedef struct {
    uint64_t launches; // kernel launches executed (graph replays count each kernel node)
    uint64_t threads;  // CUDA threads run
    uint64_t switches; // fiber context switches
} bn_cuda_emu_stats;

// bn_cuda_emu_set_order: order of threads (and blocks) in later launches: 0 = index order, otherwise
// a random order per block drawn from seed (same as env BONSAI_EMU_SHUFFLE=seed); returns the previous seed.
uint64_t bn_cuda_emu_set_order(uint64_t seed);
// bn_cuda_emu_set_racecheck: 1 = run every later launch twice from the same device memory, in index order
// and in a shuffled order, and abort naming the kernel if the results differ (same as env
// BONSAI_EMU_RACECHECK=1); returns the previous setting. Slow: copies all device memory 3x per launch.
int bn_cuda_emu_set_racecheck(int on);
// bn_cuda_emu_set_mma_fault: 1 = later emulated MMAs (cuda/mma.cuh) read the A fragment in a wrong layout
// (registers 1 and 2 swapped; same as env BONSAI_EMU_MMA_FAULT=1), to test what a wrong layout on a GPU would
// do; returns the previous setting.
int bn_cuda_emu_set_mma_fault(int on);
// bn_cuda_emu_get_stats: fills *s with the counters.
void bn_cuda_emu_get_stats(bn_cuda_emu_stats *s);

#ifdef __cplusplus
}
#endif
#endif
