// cuda/emu/emu_internal.h — state shared by the emulator's runtime, executor and cuBLAS files
// (not for kernel code).
#ifndef BONSAI_CUDA_EMU_INTERNAL_H
#define BONSAI_CUDA_EMU_INTERNAL_H
#include "cuda/common.cuh"
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

// bn_emu_graph: the recorded work of a capture, replayed in order (also the instantiated form).
struct bn_emu_graph {
    struct Node {
        const char *what;
        std::function<void()> run;
    };
    std::vector<Node> nodes;
};
// bn_emu_stream: a stream; work runs at once unless the stream is capturing.
struct bn_emu_stream {
    unsigned flags;
    bool capturing;
    bool invalidated;             // an illegal call happened during the capture
    cudaStreamCaptureMode mode;
    bn_emu_graph *graph;          // the capture in progress
    std::thread::id owner;        // the thread that began the capture (ThreadLocal mode binds only that thread)
};

namespace bn_emu {
// api_mutex: serialises the emulator (one host thread emulates at a time).
std::recursive_mutex &api_mutex();
// set_error: records e as the last error; returns e.
cudaError_t set_error(cudaError_t e);
// resolve: the stream object of s (the legacy default stream for 0).
bn_emu_stream *resolve(cudaStream_t s);
// submit: runs work now, or appends it to s's capture; returns the CUDA error (capture rules).
cudaError_t submit(cudaStream_t s, const char *what, std::function<void()> work);
// sync_allowed: cudaSuccess, or the error (and invalidated captures) for a synchronising call now.
cudaError_t sync_allowed(const char *what);
// device_alloc_of: whether p lies in a cudaMalloc range or the inaccessible page after it; its start and size.
bool device_alloc_of(const void *p, const void **base, size_t *bytes);
// install_fault_handler: SIGSEGV/SIGBUS reports naming the kernel or the device allocation (once per thread).
void install_fault_handler();
// device_snapshot / device_restore: all device memory into / from one buffer (BONSAI_EMU_RACECHECK).
void device_snapshot(std::vector<char> &out);
void device_restore(const std::vector<char> &in);
// device_diff: how many allocations differ from the snapshot ref; the first difference described in where.
int device_diff(const std::vector<char> &ref, char *where, size_t n);
// die: prints "bonsai-emu: <message>" to stderr and aborts.
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
} // namespace bn_emu
#endif
