// cuda/emu/emu_runtime.cpp — the emulator's runtime API: errors, the one device, memory (host memory,
// with the device side of each copy checked to be a cudaMalloc range), streams with capture into
// graphs (CUDA's rules: no synchronising or legacy-stream calls while a global-mode capture is
// active; an illegal call invalidates the capture), events (wall clock) and graph replay.
#include "cuda/emu/emu_internal.h"
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <map>

namespace bn_emu {
namespace {
thread_local cudaError_t last_error = cudaSuccess;
bn_emu_stream legacy_stream = {0, false, false, cudaStreamCaptureModeGlobal, nullptr, {}};
std::map<uintptr_t, size_t> device_allocs; // start -> bytes asked for
size_t device_bytes;                       // the sum of device_allocs' bytes
std::map<uintptr_t, size_t> pinned_allocs; // cudaMallocHost / cudaHostAlloc: start -> bytes

// Device memory protection: outside device work (kernels, copies, memsets, cuBLAS: everything run
// through submit) every cudaMalloc range is PROT_NONE, so host code that dereferences a device
// pointer faults at once, as on a GPU. Each range is its own mapping with an inaccessible page after
// it (kernels that run past an allocation's last page fault too). BONSAI_EMU_PROTECT=0 turns it off;
// ASan builds use the heap instead (exact sizes, ASan's checks).
#if defined(__SANITIZE_ADDRESS__)
const bool use_mappings = false;
#else
const bool use_mappings = true;
#endif
int protect_state = -1; // -1 not read yet, 0 off, 1 on
int device_depth;       // nesting of device work
size_t page_bytes;

bool protecting() {
    if (protect_state < 0) {
        const char *e = getenv("BONSAI_EMU_PROTECT");
        protect_state = use_mappings && !(e && strcmp(e, "0") == 0);
        page_bytes = (size_t)sysconf(_SC_PAGESIZE);
    }
    return protect_state == 1;
}

size_t mapped_bytes(size_t n) { return (n + page_bytes - 1) / page_bytes * page_bytes; }

void set_device_access(bool on) {
    for (auto &a : device_allocs)
        if (a.second) mprotect((void *)a.first, mapped_bytes(a.second), on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

// DeviceAccess: device memory is accessible for the lifetime of one (outermost) piece of device work.
struct DeviceAccess {
    DeviceAccess() {
        if (protecting() && device_depth++ == 0) set_device_access(true);
    }
    ~DeviceAccess() {
        if (protecting() && --device_depth == 0) set_device_access(false);
    }
};
std::vector<bn_emu_stream *> capturing;    // streams capturing now

double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// in_range: [p, p + n) lies inside one allocation of the map.
bool in_range(const std::map<uintptr_t, size_t> &allocs, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

// is_device: [p, p + n) lies inside one cudaMalloc allocation.
bool is_device(const void *p, size_t n) { return in_range(device_allocs, p, n); }

cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    if ((dst_dev && !is_device(dst, n)) || (src_dev && !is_device(src, n))) return cudaErrorInvalidValue;
    return cudaSuccess;
}

// invalidate_blocking_captures: legacy-stream work waits for every stream created without cudaStreamNonBlocking,
// which a capturing stream cannot take part in (cudaErrorStreamCaptureImplicit, from any thread): invalidates those
// captures; returns whether there was one.
bool invalidate_blocking_captures() {
    bool any = false;
    for (bn_emu_stream *s : capturing)
        if (!(s->flags & cudaStreamNonBlocking)) s->invalidated = true, any = true;
    return any;
}

// invalidate_for_this_thread: a potentially unsafe call (a synchronous copy, an allocation, a device or event
// synchronization) from this thread breaks the captures CUDA forbids it during: this thread's own strict captures
// (Global or ThreadLocal) and any thread's Global capture; a ThreadLocal capture of another thread is not affected.
// Those captures are invalidated; returns whether there was one (the call then fails).
bool invalidate_for_this_thread() {
    bool any = false;
    for (bn_emu_stream *s : capturing)
        if (s->mode == cudaStreamCaptureModeGlobal ||
            (s->mode == cudaStreamCaptureModeThreadLocal && s->owner == std::this_thread::get_id()))
            s->invalidated = true, any = true;
    return any;
}
} // namespace

std::recursive_mutex &api_mutex() {
    static std::recursive_mutex m;
    return m;
}

cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bonsai-emu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    abort();
}

bn_emu_stream *resolve(cudaStream_t s) { return s ? s : &legacy_stream; }

cudaError_t sync_allowed(const char *what) {
    (void)what;
    return invalidate_for_this_thread() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t submit(cudaStream_t s, const char *what, std::function<void()> work) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    bn_emu_stream *st = resolve(s);
    if (st->capturing) {
        if (st->invalidated) return cudaErrorStreamCaptureInvalidated;
        st->graph->nodes.push_back({what, std::move(work)});
        return cudaSuccess;
    }
    if (st == &legacy_stream && invalidate_blocking_captures()) return cudaErrorStreamCaptureImplicit;
    DeviceAccess access;
    work();
    return cudaSuccess;
}

bool device_alloc_of(const void *p, const void **base, size_t *bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = device_allocs.upper_bound(a);
    if (it == device_allocs.begin()) return false;
    --it;
    size_t span = use_mappings ? mapped_bytes(it->second) + page_bytes : it->second;
    if (a >= it->first + span) return false;
    *base = (const void *)it->first;
    *bytes = it->second;
    return true;
}

void device_snapshot(std::vector<char> &out) {
    size_t total = 0;
    for (auto &a : device_allocs) total += a.second;
    out.resize(total);
    size_t at = 0;
    for (auto &a : device_allocs) {
        memcpy(out.data() + at, (const void *)a.first, a.second);
        at += a.second;
    }
}

void device_restore(const std::vector<char> &in) {
    size_t at = 0;
    for (auto &a : device_allocs) {
        memcpy((void *)a.first, in.data() + at, a.second);
        at += a.second;
    }
}

int device_diff(const std::vector<char> &ref, char *where, size_t n) {
    size_t at = 0;
    int differ = 0;
    for (auto &a : device_allocs) {
        const char *now = (const char *)a.first, *was = ref.data() + at;
        if (memcmp(now, was, a.second) != 0) {
            size_t i = 0;
            while (now[i] == was[i]) i++;
            if (differ++ == 0) {
                uint32_t w0 = 0, w1 = 0;
                size_t word = i & ~(size_t)3;
                if (word + 4 <= a.second) {
                    memcpy(&w0, was + word, 4);
                    memcpy(&w1, now + word, 4);
                }
                snprintf(where, n, "byte %zu of the cudaMalloc of %zu bytes at %p (32-bit word 0x%08x vs 0x%08x)", i,
                         a.second, now, w0, w1);
            }
        }
        at += a.second;
    }
    return differ;
}

cudaError_t memcpy_symbol(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool async) {
    if (!async) {
        cudaError_t e = sync_allowed("cudaMemcpyToSymbol");
        if (e) return set_error(e);
    }
    return set_error(submit(s, "cudaMemcpyToSymbol", [dst, src, n]() { memcpy(dst, src, n); }));
}
} // namespace bn_emu

using namespace bn_emu;

extern "C" {
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge: return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *dev) {
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev != 0) return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (bonsai emu)");
    p->totalGlobalMem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    p->sharedMemPerBlock = 48 * 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 132;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = 233472;
    p->sharedMemPerBlockOptin = 232448;
    p->memoryBusWidth = 6144;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    default: return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    return set_error(sync_allowed("cudaDeviceSynchronize"));
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

// device_mem_bytes: the emulated device's memory: BONSAI_EMU_DEVICE_MEM (bytes, or with a K/M/G suffix, powers of
// 1024) when set, else the host's physical memory.
static size_t device_mem_bytes() {
    const char *e = getenv("BONSAI_EMU_DEVICE_MEM");
    char *end = nullptr;
    const double v = e ? strtod(e, &end) : 0;
    if (!e || end == e || !(v > 0)) return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    const char u = *end;
    const double mul = u == 'K' || u == 'k'   ? 0x1p10
                       : u == 'M' || u == 'm' ? 0x1p20
                       : u == 'G' || u == 'g' ? 0x1p30
                                              : 1;
    return (size_t)(v * mul);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    const size_t used = device_bytes, total = device_mem_bytes();
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    *p = nullptr;
    cudaError_t e = sync_allowed("cudaMalloc");
    if (e) return set_error(e);
    const size_t total = device_mem_bytes();
    if (device_bytes > total || n > total - device_bytes)
        return set_error(cudaErrorMemoryAllocation); // over the device's memory (BONSAI_EMU_DEVICE_MEM)
    install_fault_handler();
    bool protect = protecting();
    void *m = nullptr;
    if (use_mappings) { // pages + one inaccessible page after them
        void *r = mmap(nullptr, mapped_bytes(n) + page_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return set_error(cudaErrorMemoryAllocation);
        if (n && mprotect(r, mapped_bytes(n), PROT_READ | PROT_WRITE) != 0) {
            munmap(r, mapped_bytes(n) + page_bytes);
            return set_error(cudaErrorMemoryAllocation);
        }
        m = r;
    } else if (posix_memalign(&m, 256, n ? n : 1) != 0) { // exact size: ASan reports out-of-bounds accesses
        return set_error(cudaErrorMemoryAllocation);
    }
    memset(m, 0xff, n); // device memory is not zeroed: make reads of unwritten memory visible (NaN)
    if (protect && device_depth == 0 && n) mprotect(m, mapped_bytes(n), PROT_NONE);
    device_allocs[(uintptr_t)m] = n;
    device_bytes += n;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (!p) return cudaSuccess;
    cudaError_t e = sync_allowed("cudaFree");
    if (e) return set_error(e);
    auto it = device_allocs.find((uintptr_t)p);
    if (it == device_allocs.end()) return set_error(cudaErrorInvalidValue);
    size_t n = it->second;
    device_allocs.erase(it);
    device_bytes -= n;
    if (use_mappings) munmap(p, mapped_bytes(n) + page_bytes);
    else free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!*p) return set_error(cudaErrorMemoryAllocation);
    pinned_allocs[(uintptr_t)*p] = n;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) { return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void *p) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    pinned_allocs.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

// check_async_copy: what cudaMemcpyAsync (fn) checks of one copy of n bytes on stream s: its kind and bounds
// (check_copy) and, during a capture, that its host side is pinned (staging is not capturable: the capture is
// invalidated). Returns the error (not yet set as the last one).
static cudaError_t check_async_copy(const char *fn, void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                    cudaStream_t s) {
    cudaError_t e = check_copy(dst, src, n, kind);
    if (e || !n || !resolve(s)->capturing) return e;
    const bool src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost || kind == cudaMemcpyDefault;
    const bool dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost || kind == cudaMemcpyDefault;
    const void *host_side[2] = {src_host ? src : nullptr, dst_host ? dst : nullptr};
    for (const void *h : host_side)
        if (h && !is_device(h, n) && !in_range(pinned_allocs, h, n)) {
            fprintf(stderr, "bonsai-emu: %s of %zu bytes %s pageable host memory %p during a stream capture: not "
                    "capturable on a GPU (use cudaMallocHost memory); the capture is invalidated\n", fn, n,
                    h == src ? "from" : "to", h);
            resolve(s)->invalidated = true;
            return cudaErrorStreamCaptureUnsupported;
        }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    cudaError_t e = check_async_copy("cudaMemcpyAsync", dst, src, n, kind, s);
    if (e) return set_error(e);
    return set_error(submit(s, "cudaMemcpyAsync", [dst, src, n]() { memmove(dst, src, n); }));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    cudaError_t e = sync_allowed("cudaMemcpy");
    if (e) return set_error(e);
    return cudaMemcpyAsync(dst, src, n, kind, 0);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = cudaMemcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind);
        if (e) return e;
    }
    return cudaSuccess;
}

// cudaMemcpy2DAsync: height rows of width bytes, each checked as cudaMemcpyAsync checks one copy (kinds, bounds, pinned
// host memory during a capture), run as one stream operation.
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidPitchValue);
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = check_async_copy("cudaMemcpy2DAsync (a row)", (char *)dst + r * dpitch,
                                         (const char *)src + r * spitch, width, kind, s);
        if (e) return set_error(e);
    }
    return set_error(submit(s, "cudaMemcpy2DAsync", [dst, dpitch, src, spitch, width, height]() {
        for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    }));
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (n && !is_device(p, n)) return set_error(cudaErrorInvalidValue);
    return set_error(submit(s, "cudaMemsetAsync", [p, value, n]() { memset(p, value, n); }));
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    cudaError_t e = sync_allowed("cudaMemset");
    if (e) return set_error(e);
    return cudaMemsetAsync(p, value, n, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new bn_emu_stream{flags, false, false, cudaStreamCaptureModeGlobal, nullptr, {}};
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (s->capturing) return set_error(cudaErrorStreamCaptureUnsupported);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    bn_emu_stream *st = resolve(s);
    if (st->capturing) { // waiting for a stream that only records: from any thread
        st->invalidated = true;
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (st == &legacy_stream) { // the legacy stream waits for the blocking streams, and is a synchronization
        const bool implicit = invalidate_blocking_captures();
        if (invalidate_for_this_thread() || implicit) return set_error(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    return resolve(s)->capturing ? set_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    return e ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle); // in-order device: nothing to wait for
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    bn_emu_stream *st = resolve(s);
    if (st == &legacy_stream) return set_error(cudaErrorStreamCaptureUnsupported); // legacy stream cannot capture
    if (st->capturing) return set_error(cudaErrorIllegalState);
    st->capturing = true;
    st->invalidated = false;
    st->mode = mode;
    st->owner = std::this_thread::get_id();
    st->graph = new bn_emu_graph();
    capturing.push_back(st);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    bn_emu_stream *st = resolve(s);
    *graph = nullptr;
    if (!st->capturing) return set_error(cudaErrorIllegalState);
    st->capturing = false;
    for (size_t i = 0; i < capturing.size(); i++)
        if (capturing[i] == st) capturing.erase(capturing.begin() + i);
    if (st->invalidated) {
        delete st->graph;
        st->graph = nullptr;
        return set_error(cudaErrorStreamCaptureInvalidated);
    }
    *graph = st->graph;
    st->graph = nullptr;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    bn_emu_stream *st = resolve(s);
    *status = !st->capturing ? cudaStreamCaptureStatusNone
              : st->invalidated ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
} // extern "C"

// bn_emu_event: the wall-clock time the stream reached the record (NaN before the first record).
struct bn_emu_event {
    double ms;
    unsigned flags;
};

extern "C" {
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new bn_emu_event{NAN, flags};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return set_error(cudaErrorInvalidResourceHandle);
    return set_error(submit(s, "cudaEventRecord", [e]() { e->ms = now_ms(); }));
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (!e) return set_error(cudaErrorInvalidResourceHandle);
    return set_error(sync_allowed("cudaEventSynchronize"));
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end) return set_error(cudaErrorInvalidResourceHandle);
    if ((start->flags | end->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
    if (isnan(start->ms) || isnan(end->ms)) return set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    if (!graph) return set_error(cudaErrorInvalidValue);
    *exec = new bn_emu_graph(*graph);
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return set_error(cudaErrorInvalidValue);
    return set_error(submit(s, "cudaGraphLaunch", [exec]() {
        for (const bn_emu_graph::Node &n : exec->nodes) n.run();
    }));
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count) {
    if (!graph || !count) return set_error(cudaErrorInvalidValue);
    if (nodes)
        for (size_t i = 0; i < *count && i < graph->nodes.size(); i++) nodes[i] = (cudaGraphNode_t)&graph->nodes[i];
    *count = graph->nodes.size();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
} // extern "C"
