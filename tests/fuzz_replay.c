// tests/fuzz_replay.c — a main() for the libFuzzer targets (tests/*/fuzz_*.c) that needs no libFuzzer, so the
// suite runs them on gcc in CI: every file of the seed corpus goes to LLVMFuzzerTestOneInput as it is, then
// --mutants deterministic variants of it (bit flips, "interesting" bytes and integers, deleted, inserted and
// duplicated ranges, truncations, splices with another corpus file). The targets check their own invariants
// (abort on a broken round trip); this driver adds that a crash names its input and leaves it on disk.
//
//   fuzz_replay_X [--mutants N] [--seed S] [--max-len BYTES] DIR|FILE...
//
// A crash (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) writes the input being run to fuzz-crash-<pid>.bin in the
// current directory, says which corpus file and mutant it was, and dies of the same signal; the saved file
// replays alone (pass it as the only argument, with --mutants 0). The same seed gives the same inputs.
// Under the sanitizer build (scripts/sanitize.sh) the same runs are checked by ASan and UBSan.
#include "base/util.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

typedef struct {
    char *path;
    uint8_t *data;
    size_t n;
} corpus_file;

// the input being run, for the crash handler
static const uint8_t *cur_data;
static size_t cur_n;
static char cur_what[512];

// save_input: writes the input being run to fuzz-crash-<pid>.bin and names it on stderr, with
// async-signal-safe calls only (a signal handler or the sanitizer's death callback calls it)
static void save_input(void) {
    char path[32] = "fuzz-crash-", digits[16];
    int nd = 0;
    for (unsigned p = (unsigned)getpid(); p || !nd; p /= 10) digits[nd++] = (char)('0' + p % 10);
    size_t pl = strlen(path);
    while (nd) path[pl++] = digits[--nd];
    memcpy(path + pl, ".bin", 5);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        for (size_t off = 0; off < cur_n;) {
            ssize_t w = write(fd, cur_data + off, cur_n - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
    }
    const char *m1 = "\nfuzz_replay: crashed on ", *m2 = "; the input is saved in ";
    (void)!write(2, m1, strlen(m1));
    (void)!write(2, cur_what, strlen(cur_what));
    (void)!write(2, m2, strlen(m2));
    (void)!write(2, path, strlen(path));
    (void)!write(2, "\n", 1);
}

// crash_handler: saves the input, then dies of the same signal
static void crash_handler(int sig) {
    save_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

// rng: splitmix64; returns the next 64 random bits of *s
static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// below: returns a random integer in [0, n) (0 when n is 0)
static size_t below(uint64_t *s, size_t n) { return n ? (size_t)(rng(s) % n) : 0; }

static int by_path(const void *a, const void *b) {
    return strcmp(((const corpus_file *)a)->path, ((const corpus_file *)b)->path);
}

// add_path: appends PATH (a file, or every regular file in a directory) to the corpus; returns 0, or -1 with a message
static int add_path(const char *path, corpus_file **files, int *n_files) {
    struct stat st;
    if (stat(path, &st) != 0) return perror(path), -1;
    if (!S_ISDIR(st.st_mode)) {
        corpus_file cf = {strdup(path), NULL, 0};
        char err[512];
        if (!(cf.data = (uint8_t *)bn_read_file(path, &cf.n, err, sizeof err)))
            return fprintf(stderr, "%s\n", err), free(cf.path), -1;
        *files = realloc(*files, (size_t)(*n_files + 1) * sizeof **files);
        (*files)[(*n_files)++] = cf;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return perror(path), -1;
    int first = *n_files;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (stat(sub, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (add_path(sub, files, n_files) != 0) return closedir(d), -1;
    }
    closedir(d);
    qsort(*files + first, (size_t)(*n_files - first), sizeof **files, by_path); // readdir order is not stable
    return 0;
}

// mutate: writes into out (capacity cap) a variant of in made by 1-4 random edits; returns its length
static size_t mutate(const uint8_t *in, size_t n, const corpus_file *files, int n_files, uint8_t *out, size_t cap,
                     uint64_t *s) {
    static const uint8_t bytes[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\', '{', '}', '[', ']', ',', ':', '\n', '0', '9',
                                    '-', 'e', '.', ' ', 0xc3, 0xe2, 0xf0};
    static const uint64_t ints[] = {0, 1, 2, 3, 7, 8, 16, 31, 32, 255, 256, 0x7fff, 0xffff, 0x7fffffff, 0x80000000,
                                    0xffffffff, 0x7fffffffffffffffull, 0x8000000000000000ull, UINT64_MAX};
    size_t len = n < cap ? n : cap;
    memcpy(out, in, len);
    int edits = 1 + (int)below(s, 4);
    for (int e = 0; e < edits; e++) {
        size_t at = below(s, len + 1), k = 1 + below(s, 16);
        switch (below(s, 8)) {
        case 0: // flip one bit
            if (len) out[below(s, len)] ^= (uint8_t)(1u << below(s, 8));
            break;
        case 1: // an interesting byte
            if (len) out[below(s, len)] = bytes[below(s, sizeof bytes)];
            break;
        case 2: { // an interesting integer, 1/2/4/8 bytes, little-endian (GGUF's counts, lengths, types, offsets)
            size_t w = (size_t)1 << below(s, 4);
            uint64_t v = ints[below(s, sizeof ints / sizeof ints[0])];
            if (rng(s) & 1) v = (uint64_t)0 - v;
            for (size_t i = 0; i < w && at + i < len; i++) out[at + i] = (uint8_t)(v >> (8 * i));
            break;
        }
        case 3: // delete a range
            if (at < len) {
                if (k > len - at) k = len - at;
                memmove(out + at, out + at + k, len - at - k);
                len -= k;
            }
            break;
        case 4: // insert random bytes
            if (len + k <= cap) {
                memmove(out + at + k, out + at, len - at);
                for (size_t i = 0; i < k; i++) out[at + i] = (uint8_t)rng(s);
                len += k;
            }
            break;
        case 5: { // duplicate a range in place
            size_t from = below(s, len);
            if (len && from + k <= len && len + k <= cap) {
                memmove(out + at + k, out + at, len - at);
                memmove(out + at, out + (from < at ? from : from + k), k);
                len += k;
            }
            break;
        }
        case 6: // truncate
            len = at;
            break;
        default: { // splice: keep a head, take another file's tail
            const corpus_file *o = &files[below(s, (size_t)n_files)];
            size_t from = below(s, o->n + 1), tail = o->n - from;
            if (at + tail > cap) tail = cap - at;
            memcpy(out + at, o->data + from, tail);
            len = at + tail;
            break;
        }
        }
    }
    return len;
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--mutants N] [--seed S] [--max-len BYTES] DIR|FILE...\n", argv0);
    exit(2);
}

int main(int argc, char **argv) {
    long mutants = 200, max_len = 1 << 16;
    uint64_t seed = 1;
    corpus_file *files = NULL;
    int n_files = 0;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--mutants") && i + 1 < argc) mutants = strtol(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--max-len") && i + 1 < argc) max_len = strtol(argv[++i], &end, 10);
        else if (argv[i][0] == '-') usage(argv[0]);
        else if (add_path(argv[i], &files, &n_files) != 0) return 1;
        if (end && (*end || mutants < 0 || max_len < 1)) usage(argv[0]);
    }
    if (n_files == 0) usage(argv[0]);
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
#ifdef __SANITIZE_ADDRESS__
    // the sanitizer reports faults itself (with a stack): keep its handlers, save the input when it dies
    __sanitizer_set_death_callback(save_input);
    int sigs[] = {SIGABRT};
#else
    int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
#endif
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], crash_handler);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t *buf = malloc((size_t)max_len), *in = NULL;
    if (!buf) abort();
    long runs = 0;
    for (int f = 0; f < n_files; f++) {
        for (long m = -1; m < mutants; m++) {
            uint64_t s = seed * 0x100000001b3ull ^ ((uint64_t)f << 32) ^ (uint64_t)(m + 1);
            size_t n = m < 0 ? files[f].n : mutate(files[f].data, files[f].n, files, n_files, buf, (size_t)max_len, &s);
            // each input in its own exact-size allocation, so ASan sees a read past its end
            free(in);
            if (!(in = malloc(n ? n : 1))) abort();
            memcpy(in, m < 0 ? files[f].data : buf, n);
            cur_data = in, cur_n = n;
            if (m < 0) snprintf(cur_what, sizeof cur_what, "%s as it is", files[f].path);
            else snprintf(cur_what, sizeof cur_what, "%s, mutant %ld of seed %llu", files[f].path, m,
                          (unsigned long long)seed);
            LLVMFuzzerTestOneInput(in, n);
            runs++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("fuzz_replay: %d corpus files, %ld inputs (%ld mutants each, seed %llu) in %.2f s, no crash\n", n_files,
           runs, mutants, (unsigned long long)seed, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    free(in);
    free(buf);
    for (int f = 0; f < n_files; f++) free(files[f].path), free(files[f].data);
    free(files);
    return 0;
}
