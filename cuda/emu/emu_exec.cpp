// cuda/emu/emu_exec.cpp — the emulator's kernel executor: blocks run one after another; inside a block
// every CUDA thread is a fiber with its own stack that runs until it reaches a barrier (__syncthreads:
// the whole block; shuffles/votes/__syncwarp: its warp). The last thread to arrive releases the
// waiters into the ready queue (in arrival order, or shuffled with BONSAI_EMU_SHUFFLE=seed). When
// no fiber is ready but some have not finished, the block deadlocked: report and abort.
#include "cuda/emu/emu_internal.h"
#include "cuda/emu/emu_fiber.h"
#include "cuda/emu/emu_api.h"
#include "base/rng.h"
#include <sys/mman.h>
#include <signal.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>

namespace bn_emu {
Thread *cur;
uint3 block_idx;
dim3 block_dim, grid_dim;
bool mma_fault; // BONSAI_EMU_MMA_FAULT (read_env): the MMA emulation uses a wrong fragment layout

namespace {
enum FiberState : uint8_t { F_READY, F_BLOCK, F_WARP, F_DONE };
struct Fiber : Thread {
    Ctx ctx;
    FiberState state;
    bool started;           // has a stack and a context (fresh threads may run on a finished one's stack)
    const char *waiting_at; // the warp operation a F_WARP fiber waits in
    bool grid_begun;        // has called bn_cu_grid_begin
};
struct Warp {
    uint64_t slot[2][32]; // double-buffered exchange slots (a lane cannot be two exchanges ahead)
    int parity, count, nlanes;
    int ndone;            // lanes that have exited
    const char *what;     // the exchange the waiting lanes are in, and its source position
    const char *site;
    Fiber *waiting[32];
};

const size_t SMEM_STATIC_MAX = 48 * 1024;   // static __shared__ per block (sm_90)
const size_t SMEM_DEFAULT_MAX = 48 * 1024;  // static + dynamic without the opt-in attribute
const size_t SMEM_OPTIN_MAX = 232448;       // sharedMemPerBlockOptin of sm_90 (227 KiB)
// static shared memory (BN_SHARED) of the running block; each array is followed by a 16-byte redzone
// checked when the block ends (a write past an array is reported with its name)
const size_t REDZONE = 16;
const uint8_t REDZONE_BYTE = 0xa5;
alignas(256) char smem_static[SMEM_STATIC_MAX + 64 * 1024];
std::vector<SharedKey *> static_arrays; // placed in the running block
// dynamic shared memory: the region ends at an inaccessible page, so an access past smem_bytes (or any
// access with smem_bytes = 0) faults and is reported
char *dyn_arena;      // SMEM_OPTIN_MAX bytes (rounded to pages), then the guard page
char *dyn_guard;
char *dyn_base;       // the running launch's region: dyn_guard - smem rounded up to 16

// Exec: the launch and block being executed.
struct Exec {
    const char *name;
    const std::function<void()> *body;
    dim3 grid, block;
    int nthreads, ndone;
    Fiber *fibers;               // [nthreads]
    Fiber **queue;               // ready ring [nthreads]
    int qhead, qlen;
    Fiber **bar_wait;            // arrival order at __syncthreads [nthreads]
    int bar_count;
    const char *bar_site;        // source position of the barrier the waiting threads are in
    int bar_parity;              // __syncthreads_count sums, double-buffered like the warp slots
    int bar_sum[2];
    Warp *warps;                 // [nthreads / 32 rounded up]
    Ctx sched;                   // the host thread's context
    size_t smem_dyn, smem_limit;
    size_t smem_cursor, smem_static_bytes; // arena bytes used (with redzones); static bytes as on the GPU
    uint64_t gen;                // block generation: BN_SHARED placements are per generation
    bool shuffle;
    bn_rng rng;
} X;

// fiber pool: stacks (with a guard page below each) and per-thread records, grown on demand
size_t stack_size, stack_stride;
char *stack_region;
int pool_threads;
std::vector<Fiber> fiber_pool;
std::vector<Fiber *> queue_pool, bar_pool;
std::vector<Warp> warp_pool;

uint64_t order_seed;           // 0: index order
bool order_seed_read;
bool racecheck;                // BONSAI_EMU_RACECHECK: every launch twice, index vs shuffled order
uint64_t launch_count, switch_count, thread_count;
std::unordered_map<const void *, int> max_dyn_smem; // cudaFuncSetAttribute

// profile (BONSAI_EMU_PROFILE=1): per kernel name, printed to stderr at exit
struct KernelStat {
    uint64_t launches, threads, switches;
    double cpu_s;
};
bool profile_on;
std::map<std::pair<std::string, const void *>, KernelStat> *profile; // (name in BN_LAUNCH, kernel)

// symbol_name: the demangled name of the function at fn from the executable's symbol table (kernels
// launched through a pointer variable show that variable's name in BN_LAUNCH); "" if not found.
std::string symbol_name(const void *fn) {
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fname) return "";
    int fd = open(info.dli_fname[0] ? info.dli_fname : "/proc/self/exe", O_RDONLY);
    if (fd < 0) fd = open("/proc/self/exe", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return "";
    void *map = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return "";
    std::string found;
    const char *base = (const char *)map;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
    uintptr_t rel = (uintptr_t)fn - (eh->e_type == ET_DYN ? (uintptr_t)info.dli_fbase : 0);
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum && found.empty(); i++) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(base + sh[i].sh_offset);
        const char *names = base + sh[sh[i].sh_link].sh_offset;
        for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); k++)
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_value == rel) {
                int status = 0;
                char *dem = abi::__cxa_demangle(names + sym[k].st_name, nullptr, nullptr, &status);
                found = status == 0 && dem ? dem : names + sym[k].st_name;
                free(dem);
                break;
            }
    }
    munmap(map, (size_t)st.st_size);
    size_t paren = found.find('(');
    if (paren != std::string::npos) found.resize(paren); // without the parameter list
    if (found.compare(0, 5, "void ") == 0) found.erase(0, 5); // nor a template's return type
    return found;
}

double thread_cpu_s() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void print_profile() {
    std::vector<std::pair<std::string, KernelStat>> rows;
    for (const auto &e : *profile) {
        std::string sym = symbol_name(e.first.second);
        rows.push_back({sym.empty() || sym == e.first.first ? e.first.first : e.first.first + " = " + sym, e.second});
    }
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.cpu_s > b.second.cpu_s; });
    double total = 0;
    for (const auto &r : rows) total += r.second.cpu_s;
    fprintf(stderr, "bonsai-emu profile (CPU time in kernels %.3f s):\n%-60s %9s %12s %12s %9s %6s\n", total, "kernel",
            "launches", "threads", "switches", "cpu ms", "share");
    for (const auto &r : rows)
        fprintf(stderr, "%-60.60s %9llu %12llu %12llu %9.1f %5.1f%%\n", r.first.c_str(),
                (unsigned long long)r.second.launches, (unsigned long long)r.second.threads,
                (unsigned long long)r.second.switches, r.second.cpu_s * 1e3,
                total > 0 ? 100.0 * r.second.cpu_s / total : 0.0);
}

void read_env() {
    if (order_seed_read) return;
    order_seed_read = true;
    const char *rc = getenv("BONSAI_EMU_RACECHECK");
    racecheck = rc && *rc && strcmp(rc, "0") != 0;
    const char *prof = getenv("BONSAI_EMU_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0) {
        profile_on = true;
        profile = new std::map<std::pair<std::string, const void *>, KernelStat>();
        atexit(print_profile);
    }
    const char *mf = getenv("BONSAI_EMU_MMA_FAULT");
    mma_fault = mf && *mf && strcmp(mf, "0") != 0;
    const char *s = getenv("BONSAI_EMU_SHUFFLE");
    if (s && *s) order_seed = strtoull(s, nullptr, 0);
    const char *kb = getenv("BONSAI_EMU_STACK_KB");
    stack_size = (size_t)(kb && atoi(kb) >= 16 ? atoi(kb) : 64) * 1024;
}

void ensure_pool(int n) {
    if (n <= pool_threads) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (stack_region) munmap(stack_region, stack_stride * pool_threads);
    stack_size = (stack_size + page - 1) / page * page;
    stack_stride = stack_size + page;
    void *r = mmap(nullptr, stack_stride * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) die("cannot map %d fiber stacks of %zu KiB", n, stack_size / 1024);
    stack_region = (char *)r;
    for (int i = 0; i < n; i++) mprotect(stack_region + stack_stride * i, page, PROT_NONE); // guard page
    pool_threads = n;
    fiber_pool.assign(n, Fiber());
    queue_pool.assign(n, nullptr);
    bar_pool.assign(n, nullptr);
    warp_pool.assign((n + 31) / 32, Warp());
}

// the ready queue: a ring of nthreads slots (each fiber is in it at most once); no division
inline void q_push(Fiber *f) {
    int slot = X.qhead + X.qlen++;
    X.queue[slot >= X.nthreads ? slot - X.nthreads : slot] = f;
}
inline void q_push_front(Fiber *f) {
    X.qhead = X.qhead == 0 ? X.nthreads - 1 : X.qhead - 1;
    X.queue[X.qhead] = f;
    X.qlen++;
}
inline Fiber *q_pop() {
    if (X.qlen == 0) return nullptr;
    Fiber *f = X.queue[X.qhead];
    X.qhead = X.qhead + 1 == X.nthreads ? 0 : X.qhead + 1;
    X.qlen--;
    return f;
}

template <class T> void shuffle_in_place(T *a, int n) {
    for (int i = n - 1; i > 0; i--) std::swap(a[i], a[bn_rng_below(&X.rng, (uint64_t)i + 1)]);
}

// release: the waiters become ready (arrival order, or random order in shuffle mode).
void release(Fiber **waiters, int n) {
    if (X.shuffle) shuffle_in_place(waiters, n);
    for (int i = 0; i < n; i++) {
        waiters[i]->state = F_READY;
        q_push(waiters[i]);
    }
}

// release_warp: the lanes of a warp become ready at the front of the queue, so a warp runs on through
// its shuffles while its stacks are in cache (shuffle mode: front or back at random).
void release_warp(Fiber **waiters, int n) {
    if (X.shuffle && (bn_rng_next(&X.rng) & 1)) {
        release(waiters, n);
        return;
    }
    if (X.shuffle) shuffle_in_place(waiters, n);
    for (int i = n - 1; i >= 0; i--) {
        waiters[i]->state = F_READY;
        q_push_front(waiters[i]);
    }
}

void fiber_main();
const char *where();

// start: gives a fresh fiber its own stack and a context that enters fiber_main.
inline void start(Fiber *f) {
    size_t color = (size_t)(f->lin % 64) * 64; // stagger the stack tops: 1024 fibers do not share one L1 set
    ctx_init(&f->ctx, stack_region + stack_stride * f->lin + (stack_stride - stack_size), stack_size - color,
             fiber_main);
    f->started = true;
}

// park: the running fiber stops (its state is set); runs the next ready fiber, else the scheduler.
inline __attribute__((always_inline)) void park(Fiber *self) {
    Fiber *next = q_pop();
    if (next == self) return;
    switch_count++;
    if (next) {
        if (!next->started) start(next);
        cur = next;
        ctx_switch(&self->ctx, &next->ctx);
    } else {
        ctx_switch(&self->ctx, &X.sched);
    }
    cur = self;
}

// fiber_main: runs CUDA threads until one has to wait for another fiber. When a thread finishes and
// the next ready thread has not started, it runs on this stack directly (no switch): a kernel without
// barriers runs all its threads in a loop on one stack.
void fiber_main() {
    for (;;) {
        Fiber *self = (Fiber *)cur;
        (*X.body)();
        if (!self->grid_begun)
            die("%s: thread %u ended without calling bn_cu_grid_begin(): every kernel calls it first (cuda/common.cuh, "
                "programmatic dependent launch: with BONSAI_CUDA_PDL=1 the GPU may start a kernel while the one before "
                "it still runs, and only that call waits for it)",
                where(), self->lin);
        self->state = F_DONE;
        X.ndone++;
        Warp &w = X.warps[self->warp];
        w.ndone++;
        if (w.count > 0) // on a GPU the waiting lanes hang or read undefined values
            die("%s: thread %u (lane %u) exited while %d lane(s) of its warp wait at %s (%s): the full mask names "
                "a lane that has exited",
                where(), self->lin, self->lane, w.count, w.what, w.site);
        Fiber *next = q_pop();
        if (next && !next->started) {
            next->started = true;
            cur = next;
            continue;
        }
        switch_count++;
        if (next) {
            cur = next;
            ctx_switch(&self->ctx, &next->ctx);
        } else {
            ctx_switch(&self->ctx, &X.sched);
        }
        abort(); // a finished fiber is never resumed
    }
}

const char *where() {
    static char buf[256];
    snprintf(buf, sizeof buf, "kernel '%s' block (%u,%u,%u) of grid (%u,%u,%u) x block (%u,%u,%u)", X.name,
             block_idx.x, block_idx.y, block_idx.z, X.grid.x, X.grid.y, X.grid.z, X.block.x, X.block.y, X.block.z);
    return buf;
}

[[noreturn]] void report_deadlock() {
    int n_block = 0, n_warp = 0, n_done = 0;
    const Fiber *first_block = nullptr, *first_warp = nullptr, *first_done = nullptr;
    for (int i = 0; i < X.nthreads; i++) {
        const Fiber *f = &X.fibers[i];
        if (f->state == F_BLOCK && !n_block++) first_block = f;
        if (f->state == F_WARP && !n_warp++) first_warp = f;
        if (f->state == F_DONE && !n_done++) first_done = f;
    }
    char detail[512];
    int len = snprintf(detail, sizeof detail, "%d thread(s) wait at __syncthreads", n_block);
    if (first_block)
        len += snprintf(detail + len, sizeof detail - len, " (first: thread %u)", first_block->lin);
    len += snprintf(detail + len, sizeof detail - len, ", %d wait at a warp operation", n_warp);
    if (first_warp)
        len += snprintf(detail + len, sizeof detail - len, " (first: %s in thread %u, warp %u)", first_warp->waiting_at,
                        first_warp->lin, first_warp->warp);
    len += snprintf(detail + len, sizeof detail - len, ", %d exited", n_done);
    if (first_done) snprintf(detail + len, sizeof detail - len, " (first: thread %u)", first_done->lin);
    die("%s: deadlock: %s. Every thread of the block must reach each __syncthreads, and all 32 lanes of a "
        "warp each shuffle/vote/__syncwarp (threads that return early never arrive).",
        where(), detail);
}

// check_redzones: aborts naming the BN_SHARED array whose redzone a thread of the block overwrote.
void check_redzones() {
    for (const SharedKey *k : static_arrays)
        for (size_t i = 0; i < REDZONE; i++)
            if ((uint8_t)smem_static[k->off + k->bytes + i] != REDZONE_BYTE)
                die("%s: a thread wrote past the end of BN_SHARED array '%s' (%zu bytes): byte %zu after it changed",
                    where(), k->name, k->bytes, i);
}

void run_block(uint3 bidx) {
    block_idx = bidx;
    X.gen++;
    X.smem_cursor = 0;
    X.smem_static_bytes = 0;
    static_arrays.clear();
    memset(dyn_base, 0xff, X.smem_dyn); // uninitialised shared memory reads as NaN / -1
    int n = X.nthreads;
    for (int i = 0; i < n; i++) {
        Fiber *f = &X.fibers[i];
        f->state = F_READY;
        f->started = false;
        f->grid_begun = false;
        X.queue[i] = f;
    }
    if (X.shuffle) shuffle_in_place(X.queue, n);
    X.qhead = 0;
    X.qlen = n;
    X.bar_count = 0;
    X.bar_site = nullptr;
    X.bar_parity = 0;
    X.bar_sum[0] = X.bar_sum[1] = 0;
    X.ndone = 0;
    for (int w = 0; w < (n + 31) / 32; w++) {
        X.warps[w].count = 0;
        X.warps[w].ndone = 0;
        X.warps[w].parity = 0;
        X.warps[w].nlanes = std::min(32, n - 32 * w);
    }
    Fiber *first = q_pop();
    start(first);
    cur = first;
    switch_count++;
    ctx_switch(&X.sched, &first->ctx);
    cur = nullptr;
    if (X.ndone != n) report_deadlock();
    check_redzones();
}

// on_fault: a SIGSEGV/SIGBUS inside a kernel names the kernel, block and thread (a fiber stack's guard
// page: stack overflow; past a device allocation: out of bounds); outside kernels, an access to device
// memory by host code is named. Then the default action ends the process.
void on_fault(int sig, siginfo_t *si, void *) {
    char msg[640], what[256] = "";
    const void *base = nullptr;
    size_t bytes = 0;
    bool in_alloc = device_alloc_of(si->si_addr, &base, &bytes);
    if (in_alloc)
        snprintf(what, sizeof what, "%s a cudaMalloc of %zu bytes at %p",
                 (uintptr_t)si->si_addr >= (uintptr_t)base + bytes ? "past the end of" : "inside", bytes, base);
    const char *sig_name = sig == SIGSEGV ? "segmentation fault" : "bus error";
    int len = 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (cur && X.name && dyn_guard && (uintptr_t)si->si_addr - (uintptr_t)dyn_guard < page) {
        len = snprintf(msg, sizeof msg,
                       "bonsai-emu: %s at %p in %s, thread %u (%u,%u,%u): dynamic shared memory overflow: access at "
                       "byte %zu of BN_DYN_SHARED, the launch gave smem_bytes = %zu\n",
                       sig_name, si->si_addr, where(), cur->lin, cur->tid.x, cur->tid.y, cur->tid.z,
                       (size_t)((char *)si->si_addr - dyn_base), X.smem_dyn);
    } else if (cur && X.name) {
        uintptr_t a = (uintptr_t)si->si_addr, lo = (uintptr_t)stack_region;
        bool guard = a >= lo && a < lo + stack_stride * pool_threads && (a - lo) % stack_stride < stack_stride - stack_size;
        len = snprintf(msg, sizeof msg, "bonsai-emu: %s at %p in %s, thread %u (%u,%u,%u): %s%s\n", sig_name,
                       si->si_addr, where(), cur->lin, cur->tid.x, cur->tid.y, cur->tid.z,
                       guard ? "fiber stack overflow (raise BONSAI_EMU_STACK_KB, default 64)"
                       : in_alloc ? "out-of-bounds access, " : "out-of-bounds or host-pointer access in device code?",
                       guard ? "" : what);
    } else if (in_alloc) {
        len = snprintf(msg, sizeof msg,
                       "bonsai-emu: %s at %p: host code accessed device memory (%s); only kernels, cudaMemcpy/"
                       "cudaMemset and cuBLAS may touch it (BONSAI_EMU_PROTECT=0 disables this check)\n",
                       sig_name, si->si_addr, what);
    }
    if (len > 0) (void)!write(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
    signal(sig, SIG_DFL); // returning re-executes the access under the default action
}

// run_grid: runs the blocks of the launch set up in X: index order (seed 0) or a random order of threads
// and blocks drawn from seed.
void run_grid(uint64_t nblocks, uint64_t seed) {
    X.shuffle = seed != 0;
    if (X.shuffle) bn_rng_seed(&X.rng, seed * 0x9e3779b97f4a7c15ull + launch_count);
    std::vector<uint64_t> order;
    if (X.shuffle && nblocks <= (1u << 26)) {
        order.resize(nblocks);
        for (uint64_t b = 0; b < nblocks; b++) order[b] = b;
        for (uint64_t i = nblocks - 1; i > 0; i--) std::swap(order[i], order[bn_rng_below(&X.rng, i + 1)]);
    }
    const dim3 grid = X.grid;
    for (uint64_t b = 0; b < nblocks; b++) {
        uint64_t lin = order.empty() ? b : order[b];
        run_block(uint3{(unsigned)(lin % grid.x), (unsigned)(lin / grid.x % grid.y), (unsigned)(lin / grid.x / grid.y)});
    }
}

// execute: runs every block of a launch (argument checks were done at launch/capture time).
void execute(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, size_t smem_limit,
             const std::function<void()> &body) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    read_env();
    install_fault_handler();
    int n = (int)(block.x * block.y * block.z);
    ensure_pool(n);
    X.name = name;
    X.body = &body;
    X.grid = grid;
    X.block = block;
    X.nthreads = n;
    X.fibers = fiber_pool.data();
    X.queue = queue_pool.data();
    X.bar_wait = bar_pool.data();
    X.warps = warp_pool.data();
    X.smem_dyn = smem;
    X.smem_limit = smem_limit;
    if (!dyn_arena) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (SMEM_OPTIN_MAX + page - 1) / page * page;
        void *r = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED) die("cannot map the shared-memory arena");
        dyn_arena = (char *)r;
        dyn_guard = dyn_arena + bytes;
        mprotect(dyn_guard, page, PROT_NONE);
    }
    dyn_base = dyn_guard - ((smem + 15) & ~(size_t)15);
    launch_count++;
    thread_count += (uint64_t)n * grid.x * grid.y * grid.z;
    block_dim = block;
    grid_dim = grid;
    for (int i = 0; i < n; i++) {
        Fiber *f = &X.fibers[i];
        f->lin = (unsigned)i;
        f->tid = uint3{(unsigned)i % block.x, ((unsigned)i / block.x) % block.y, (unsigned)i / (block.x * block.y)};
        f->lane = (unsigned)i % 32;
        f->warp = (unsigned)i / 32;
    }
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    double t0 = profile_on ? thread_cpu_s() : 0;
    uint64_t switches0 = switch_count;
    if (!racecheck) {
        run_grid(nblocks, order_seed);
    } else { // index order, then a shuffled order from the same memory: the results must be identical
        std::vector<char> before, first;
        device_snapshot(before);
        run_grid(nblocks, 0);
        device_snapshot(first);
        device_restore(before);
        run_grid(nblocks, order_seed ? order_seed : 0x5eed);
        char where_diff[256];
        if (device_diff(first, where_diff, sizeof where_diff))
            die("kernel '%s' (grid (%u,%u,%u) x block (%u,%u,%u)): race: device memory after the kernel depends on "
                "the thread/block order (first difference: %s; index order vs shuffled). A missing __syncthreads, "
                "blocks sharing data, or float atomics?",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z, where_diff);
    }
    if (profile_on) {
        KernelStat &st = (*profile)[{name, fn}];
        st.launches++;
        st.threads += (uint64_t)n * nblocks;
        st.switches += switch_count - switches0;
        st.cpu_s += thread_cpu_s() - t0;
    }
}
} // namespace

// install_fault_handler: once per host thread (the alternate stack), if nobody else handles SIGSEGV.
void install_fault_handler() {
    static thread_local bool done;
    if (done) return;
    done = true;
    struct sigaction old;
    if (sigaction(SIGSEGV, nullptr, &old) != 0) return;
    bool ours = (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == on_fault;
    if (!ours && old.sa_handler != SIG_DFL) return; // someone else's (ASan, the program's)
    stack_t ss = {};
    ss.ss_size = 64 * 1024;
    ss.ss_sp = malloc(ss.ss_size); // one per host thread that launches; kept for the thread's life
    sigaltstack(&ss, nullptr);
    if (ours) return;
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

// same_site: two source positions are the same (string literals may or may not be merged).
inline bool same_site(const char *a, const char *b) { return a == b || strcmp(a, b) == 0; }

// before_grid_begin: aborts: a barrier or warp operation ran before bn_cu_grid_begin (it must come first).
[[noreturn]] void before_grid_begin(const Fiber *self, const char *what, const char *site) {
    die("%s: thread %u: %s at %s before bn_cu_grid_begin(): every kernel calls it first (cuda/common.cuh)", where(),
        self->lin, what, site);
}

int syncthreads_count(int pred, const char *site) {
    Fiber *self = (Fiber *)cur;
    if (!self->grid_begun) before_grid_begin(self, "__syncthreads", site);
    if (X.bar_count == 0) X.bar_site = site;
    else if (!same_site(site, X.bar_site))
        die("%s: divergent __syncthreads: thread %u arrived at the barrier at %s while %d thread(s) wait at the one "
            "at %s (every thread must reach the same __syncthreads; undefined on a GPU)",
            where(), self->lin, site, X.bar_count, X.bar_site);
    int par = X.bar_parity;
    X.bar_sum[par] += pred != 0;
    X.bar_wait[X.bar_count++] = self;
    self->state = F_BLOCK;
    if (X.bar_count == X.nthreads) {
        X.bar_parity ^= 1;
        X.bar_sum[X.bar_parity] = 0; // the next barrier's sum (everyone has read the one before)
        release(X.bar_wait, X.bar_count);
        X.bar_count = 0;
    }
    park(self);
    return X.bar_sum[par];
}

void syncthreads(const char *site) { syncthreads_count(0, site); }

const uint64_t *warp_exchange(unsigned mask, uint64_t v, const char *what, const char *site) {
    Fiber *self = (Fiber *)cur;
    if (!self->grid_begun) before_grid_begin(self, what, site);
    Warp &w = X.warps[self->warp];
    const unsigned live = w.nlanes == 32 ? 0xffffffffu : (1u << w.nlanes) - 1; // the lanes the warp has
    if (mask == 0xffffffffu && live != mask)
        die("%s: thread %u: %s (%s) with mask 0xffffffff names lanes %d..31, which do not exist (the block has %u "
            "threads: its last warp has %d lanes; use mask 0x%08x)",
            where(), self->lin, what, site, w.nlanes, X.nthreads, w.nlanes, live);
    if (mask != live)
        die("%s: thread %u: %s (%s) with mask 0x%08x: the emulator supports only masks of every lane of the warp "
            "(0x%08x)", where(), self->lin, what, site, mask, live);
    if (w.ndone > 0) {
        unsigned gone = 0;
        for (int l = 0; l < w.nlanes; l++)
            if (X.fibers[self->warp * 32 + l].state == F_DONE) { gone = (unsigned)l; break; }
        die("%s: thread %u: %s (%s): its mask names lane %u, which has exited (undefined on a GPU: a hang or "
            "garbage)", where(), self->lin, what, site, gone);
    }
    if (w.count == 0) {
        w.what = what;
        w.site = site;
    } else if (!(what == w.what || strcmp(what, w.what) == 0) ||
               (strcmp(what, "__syncwarp") != 0 && !same_site(site, w.site))) { // __syncwarp: any sites
        die("%s: warp divergence: thread %u (lane %u) arrived at %s (%s) while %d lane(s) of its warp wait at %s "
            "(%s): all lanes of the mask must execute the same warp operation",
            where(), self->lin, self->lane, what, site, w.count, w.what, w.site);
    }
    int par = w.parity;
    w.slot[par][self->lane] = v;
    w.waiting[w.count++] = self;
    self->state = F_WARP;
    self->waiting_at = what;
    if (w.count == w.nlanes) {
        w.parity ^= 1;
        release_warp(w.waiting, w.count);
        w.count = 0;
    }
    park(self);
    return w.slot[par];
}

void *shared_static(SharedKey *key, size_t bytes, size_t align) {
    if (key->gen != X.gen) {
        if (align < 16) align = 16;
        size_t off = (X.smem_cursor + align - 1) & ~(align - 1);
        size_t static_bytes = (X.smem_static_bytes + align - 1) / align * align + bytes;
        if (static_bytes > SMEM_STATIC_MAX)
            die("%s: shared-memory overflow: %zu bytes of static shared memory (sm_90 allows %zu per block)", where(),
                static_bytes, SMEM_STATIC_MAX);
        if (static_bytes + X.smem_dyn > X.smem_limit)
            die("%s: shared-memory overflow: %zu dynamic + %zu static bytes > %zu bytes allowed for this launch%s",
                where(), X.smem_dyn, static_bytes, X.smem_limit,
                X.smem_limit == SMEM_DEFAULT_MAX ? " (opt in with cudaFuncSetAttribute MaxDynamicSharedMemorySize)" : "");
        if (off + bytes + REDZONE > sizeof smem_static) die("%s: too many BN_SHARED arrays", where());
        memset(smem_static + off, 0xff, bytes);
        memset(smem_static + off + bytes, REDZONE_BYTE, REDZONE);
        key->off = off;
        key->bytes = bytes;
        key->gen = X.gen;
        X.smem_cursor = off + bytes + REDZONE;
        X.smem_static_bytes = static_bytes;
        static_arrays.push_back(key);
    }
    return smem_static + key->off;
}

void *shared_dynamic() { return dyn_base; }

void grid_begin(const char *site) {
    Fiber *self = (Fiber *)cur;
    if (self->grid_begun) die("%s: thread %u: bn_cu_grid_begin() called twice (%s)", where(), self->lin, site);
    self->grid_begun = true;
}

void misaligned(const char *what, const void *p, size_t align) {
    const Fiber *self = (const Fiber *)cur;
    die("%s: thread %u: misaligned address: %s of a %zu-byte-aligned type at %p (%zu bytes past alignment); the "
        "GPU raises cudaErrorMisalignedAddress",
        where(), self ? self->lin : 0u, what, align, p, (size_t)((uintptr_t)p % align));
}

cudaError_t func_set_attribute(const void *fn, cudaFuncAttribute attr, int value) {
    std::lock_guard<std::recursive_mutex> lock(api_mutex());
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > SMEM_OPTIN_MAX)
        return set_error(cudaErrorInvalidValue);
    max_dyn_smem[fn] = value;
    return cudaSuccess;
}

void launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body) {
    uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        die("kernel '%s': invalid block size (%u,%u,%u): at most 1024 threads (x, y <= 1024, z <= 64)", name, block.x,
            block.y, block.z);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        die("kernel '%s': invalid grid size (%u,%u,%u)", name, grid.x, grid.y, grid.z);
    size_t limit;
    {
        std::lock_guard<std::recursive_mutex> lock(api_mutex());
        auto it = max_dyn_smem.find(fn);
        size_t optin = it == max_dyn_smem.end() ? 0 : (size_t)it->second;
        if (smem > std::max(optin, SMEM_DEFAULT_MAX))
            die("kernel '%s': shared-memory overflow: %zu bytes of dynamic shared memory requested, %zu allowed%s", name,
                smem, std::max(optin, SMEM_DEFAULT_MAX),
                optin ? "" : " (opt in with cudaFuncSetAttribute MaxDynamicSharedMemorySize, up to 232448)");
        limit = optin ? SMEM_OPTIN_MAX : SMEM_DEFAULT_MAX;
    }
    cudaError_t e = submit(stream, name, [name, fn, grid, block, smem, limit, body]() {
        execute(name, fn, grid, block, smem, limit, body);
    });
    set_error(e);
}
} // namespace bn_emu

// swap_setting: the API setters' common part: under the API lock, after the environment was read (it must not
// overwrite the new value later), *setting = value; returns the old value.
template <class T> static T swap_setting(T *setting, T value) {
    std::lock_guard<std::recursive_mutex> lock(bn_emu::api_mutex());
    bn_emu::read_env();
    const T old = *setting;
    *setting = value;
    return old;
}

extern "C" uint64_t bn_cuda_emu_set_order(uint64_t seed) { return swap_setting(&bn_emu::order_seed, seed); }

extern "C" int bn_cuda_emu_set_racecheck(int on) { return swap_setting(&bn_emu::racecheck, on != 0); }

extern "C" int bn_cuda_emu_set_mma_fault(int on) { return swap_setting(&bn_emu::mma_fault, on != 0); }

extern "C" void bn_cuda_emu_get_stats(bn_cuda_emu_stats *s) {
    std::lock_guard<std::recursive_mutex> lock(bn_emu::api_mutex());
    s->launches = bn_emu::launch_count;
    s->threads = bn_emu::thread_count;
    s->switches = bn_emu::switch_count;
}
