// cuda/launch.cu — the programmatic-dependent-launch switch (cuda/common.cuh, BN_LAUNCH).
#include "cuda/common.cuh"
#include "cuda/cuda_engine.h"
extern "C" {
#include "base/util.h"
}

// bn_cu_pdl_on: true when BONSAI_CUDA_PDL=1 was set when the first kernel was launched (read once: graphs
// captured with or without the attribute stay valid for the whole process).
bool bn_cu_pdl_on(void) {
    static const bool on = bn_env_is("BONSAI_CUDA_PDL", "1");
    return on;
}

extern "C" int bn_cuda_pdl_in_use(void) { return bn_cu_pdl_on() ? 1 : 0; }
