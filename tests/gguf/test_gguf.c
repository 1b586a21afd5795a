// tests/gguf/test_gguf.c — GGUF reader/writer (gguf/gguf.h): write->read round trips of every KV type,
// custom alignments, tensor layout/padding/order, atomic writes, docs/formats.md §1.5's negative list on
// hand-built buffers (each must fail with a message naming the field), type-42 g64/g128 detection,
// and a broken-file replay (every truncation, byte/u64 overwrites of the metadata, the checked-in
// corpus tests/gguf/corpus/) that must fail cleanly or succeed with in-bounds tensors — never crash.
//
// `test_gguf --write-corpus DIR` regenerates the checked-in corpus (ok_*.gguf must open, bad_*.gguf
// must fail).
#include "tests/test.h"
#include "tests/gguf/gguf_build.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>

static char tmpdir[256];

// ---- invariants of a successfully opened file ----------------------------------------------

// file_sane: every tensor lies inside the buffer, is aligned, has 1..4 dims and a known type.
static int file_sane(const gguf_file *f) {
    // (a 0-tensor file may end unpadded, gguf-py vocab style: data_offset is then the end of the KVs)
    if (f->data_offset > f->size || (f->n_tensors && f->data_offset % f->alignment)) return 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->n_dims < 1 || t->n_dims > 4 || bn_type_blck(t->type) == 0) return 0;
        if (t->offset % f->alignment) return 0;
        const uint8_t *d = t->data;
        if (d < f->base + f->data_offset || t->nbytes > (size_t)(f->base + f->size - d)) return 0;
        if (t->nbytes != bn_row_size(t->type, t->ne[0]) * (size_t)gguf_tensor_nrows(t)) return 0;
    }
    for (size_t i = 0; i < f->n_kv; i++)
        if (!f->kv[i].key || f->kv[i].type >= GGUF_TYPE_COUNT) return 0;
    return 1;
}

// open_copy: parses an exact-size heap copy (so an over-read leaves the allocation under ASan);
// returns 1 if opened (and checks sanity), 0 if it failed with a non-empty message.
static int open_copy(const void *buf, size_t n, char *err, size_t errlen) {
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, buf, n);
    err[0] = 0;
    gguf_file *f = gguf_open_mem(copy, n, err, errlen);
    int ok = f != NULL;
    if (f) {
        CHECK(file_sane(f), "opened file must be sane");
        gguf_close(f);
    } else {
        CHECK(err[0] != 0, "failure without a message");
    }
    free(copy);
    return ok;
}

// ---- KV round trips ------------------------------------------------------------------------

static gguf_kv mk_kv(const char *key, uint32_t type, uint32_t arr_type, uint64_t n, void *data) {
    gguf_kv kv = {0};
    kv.key = (char *)key;
    kv.type = type;
    kv.arr_type = arr_type;
    kv.n = n;
    kv.data = data;
    return kv;
}

static void test_kv_roundtrip(void) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/kv.gguf", tmpdir);
    gguf_writer *w = gguf_writer_new();
    gguf_set_u8(w, "t.u8", 200);
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -(1LL << 60);
    double f64 = 3.141592653589793;
    gguf_kv k;
    k = mk_kv("t.i8", GGUF_TYPE_INT8, 0, 1, &i8), gguf_set_kv(w, &k);
    k = mk_kv("t.u16", GGUF_TYPE_UINT16, 0, 1, &u16), gguf_set_kv(w, &k);
    k = mk_kv("t.i16", GGUF_TYPE_INT16, 0, 1, &i16), gguf_set_kv(w, &k);
    gguf_set_u32(w, "t.u32", 4000000000u);
    gguf_set_i32(w, "t.i32", -2000000000);
    gguf_set_f32(w, "t.f32", 1.5e-7f);
    gguf_set_bool(w, "t.bool", true);
    gguf_set_str(w, "t.str", "h\xc3\xa9llo w\xc3\xb6rld");
    gguf_set_u64(w, "t.u64", 18000000000000000000ull);
    k = mk_kv("t.i64", GGUF_TYPE_INT64, 0, 1, &i64), gguf_set_kv(w, &k);
    k = mk_kv("t.f64", GGUF_TYPE_FLOAT64, 0, 1, &f64), gguf_set_kv(w, &k);
    // a string with an embedded NUL through gguf_set_kv
    gguf_kv nul = {0};
    nul.key = "t.str_nul";
    nul.type = GGUF_TYPE_STRING;
    nul.n = 1;
    nul.str = "ab\0cd";
    nul.str_len = 5;
    gguf_set_kv(w, &nul);
    // numeric arrays of every element type, 3 elements each, distinct bytes
    uint8_t raw[3 * 8];
    for (int i = 0; i < 24; i++) raw[i] = (uint8_t)(i * 37 + 1);
    static const uint32_t arr_types[] = {GGUF_TYPE_UINT8,  GGUF_TYPE_INT8,    GGUF_TYPE_UINT16, GGUF_TYPE_INT16,
                                         GGUF_TYPE_UINT32, GGUF_TYPE_INT32,   GGUF_TYPE_FLOAT32, GGUF_TYPE_UINT64,
                                         GGUF_TYPE_INT64,  GGUF_TYPE_FLOAT64, GGUF_TYPE_BOOL};
    const int n_arr = sizeof arr_types / sizeof arr_types[0];
    for (int i = 0; i < n_arr; i++) {
        char key[32];
        snprintf(key, sizeof key, "arr.%s", gguf_type_name(arr_types[i]));
        if (arr_types[i] == GGUF_TYPE_BOOL) {
            uint8_t bools[3] = {1, 0, 1};
            gguf_set_arr(w, key, GGUF_TYPE_BOOL, 3, bools);
        } else {
            gguf_set_arr(w, key, arr_types[i], 3, raw);
        }
    }
    gguf_set_arr(w, "arr.empty", GGUF_TYPE_UINT32, 0, raw);
    char longs[1001];
    memset(longs, 'x', 1000);
    longs[1000] = 0;
    const char *strs[] = {"", "a", "\xc4\xa0h\xc3\xa9llo", longs, "with space"};
    gguf_set_arr_str(w, "arr.strings", 5, strs);
    gguf_set_arr_str(w, "arr.strings_empty", 0, strs);
    // re-setting a key moves it to the end (llama.cpp semantics)
    gguf_set_u32(w, "t.moved", 1);
    gguf_set_u32(w, "t.last", 2);
    gguf_set_u32(w, "t.moved", 3);
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write kv file: %s", err);
    gguf_writer_free(w);

    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f != NULL, "read kv file: %s", err);
    if (!f) return;
    CHECK(f->n_tensors == 0 && f->version == 3, "0 tensors, version 3");
    int64_t v;
    uint32_t u;
    float fl;
    bool b;
    CHECK(gguf_get_int(f, "t.u8", &v) && v == 200 && f->kv[gguf_find_key(f, "t.u8")].type == GGUF_TYPE_UINT8, "u8");
    CHECK(gguf_get_int(f, "t.i8", &v) && v == -100, "i8");
    CHECK(gguf_get_int(f, "t.u16", &v) && v == 60000, "u16");
    CHECK(gguf_get_int(f, "t.i16", &v) && v == -30000, "i16");
    CHECK(gguf_get_u32(f, "t.u32", &u) && u == 4000000000u, "u32");
    CHECK(gguf_get_int(f, "t.i32", &v) && v == -2000000000, "i32");
    CHECK(!gguf_get_u32(f, "t.i32", &u), "negative i32 does not fit u32");
    CHECK(gguf_get_f32(f, "t.f32", &fl) && fl == 1.5e-7f, "f32");
    CHECK(gguf_get_bool(f, "t.bool", &b) && b, "bool");
    CHECK(!gguf_get_bool(f, "t.u8", &b), "get_bool on u8 fails");
    CHECK(gguf_get_str(f, "t.str") && strcmp(gguf_get_str(f, "t.str"), "h\xc3\xa9llo w\xc3\xb6rld") == 0, "string");
    CHECK(gguf_get_str(f, "t.u8") == NULL, "get_str on u8 is NULL");
    CHECK(!gguf_get_int(f, "t.u64", &v), "u64 > INT64_MAX is not an int64");
    CHECK(!gguf_get_u32(f, "t.u64", &u), "u64 > UINT32_MAX is not a u32");
    int ku64 = gguf_find_key(f, "t.u64");
    CHECK(ku64 >= 0 && *(uint64_t *)f->kv[ku64].data == 18000000000000000000ull, "u64 value");
    CHECK(gguf_get_int(f, "t.i64", &v) && v == -(1LL << 60), "i64");
    int kf64 = gguf_find_key(f, "t.f64");
    CHECK(kf64 >= 0 && f->kv[kf64].type == GGUF_TYPE_FLOAT64 && *(double *)f->kv[kf64].data == f64, "f64");
    CHECK(gguf_get_f32(f, "t.f64", &fl) && fl == (float)f64, "f64 via get_f32");
    int kn = gguf_find_key(f, "t.str_nul");
    CHECK(kn >= 0 && f->kv[kn].str_len == 5 && memcmp(f->kv[kn].str, "ab\0cd", 5) == 0, "string with NUL");
    for (int i = 0; i < n_arr; i++) {
        char key[32];
        snprintf(key, sizeof key, "arr.%s", gguf_type_name(arr_types[i]));
        const gguf_kv *a = gguf_get_arr(f, key);
        CHECK(a && a->arr_type == arr_types[i] && a->n == 3, "%s: type/count", key);
        if (a && arr_types[i] != GGUF_TYPE_BOOL)
            CHECK(memcmp(a->data, raw, 3 * gguf_type_size(arr_types[i])) == 0, "%s: bytes", key);
        if (a && arr_types[i] == GGUF_TYPE_BOOL)
            CHECK(memcmp(a->data, "\1\0\1", 3) == 0, "%s: bytes", key);
    }
    const gguf_kv *e = gguf_get_arr(f, "arr.empty");
    CHECK(e && e->n == 0 && e->arr_type == GGUF_TYPE_UINT32, "empty array");
    const gguf_kv *s = gguf_get_arr(f, "arr.strings");
    CHECK(s && s->arr_type == GGUF_TYPE_STRING && s->n == 5, "string array");
    for (int i = 0; s && i < 5; i++)
        CHECK(strcmp(s->strs[i], strs[i]) == 0 && s->str_lens[i] == strlen(strs[i]), "string array element %d", i);
    const gguf_kv *se = gguf_get_arr(f, "arr.strings_empty");
    CHECK(se && se->n == 0 && se->arr_type == GGUF_TYPE_STRING, "empty string array");
    CHECK(strcmp(f->kv[f->n_kv - 1].key, "t.moved") == 0 && strcmp(f->kv[f->n_kv - 2].key, "t.last") == 0,
          "re-set key moved to the end");
    CHECK(gguf_get_u32(f, "t.moved", &u) && u == 3, "re-set value");
    // the file is a vocab-style 0-tensor file: data_offset = end of KVs padded (ggml writer pads always)
    CHECK(f->size % 32 == 0, "0-tensor file padded to 32 (size %zu)", f->size);

    // copy every KV into a new writer (gguf_set_kv) and compare the two files byte for byte
    char path2[300];
    snprintf(path2, sizeof path2, "%s/kv2.gguf", tmpdir);
    w = gguf_writer_new();
    for (size_t i = 0; i < f->n_kv; i++) gguf_set_kv(w, &f->kv[i]);
    CHECK(gguf_writer_write(w, path2, NULL, NULL, err, sizeof err) == 0, "rewrite: %s", err);
    gguf_writer_free(w);
    size_t n1, n2;
    char *a1 = bn_read_file(path, &n1, err, sizeof err), *a2 = bn_read_file(path2, &n2, err, sizeof err);
    CHECK(a1 && a2 && n1 == n2 && memcmp(a1, a2, n1) == 0, "gguf_set_kv copy is byte-identical");
    free(a1);
    free(a2);
    gguf_close(f);
}

// ---- tensors: alignment, padding, order -------------------------------------------------------

static int64_t align_up(int64_t x, int64_t a) { return x + (a - x % a) % a; }

static void test_tensor_layout(uint32_t align) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/t%u.gguf", tmpdir, align);
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "test");
    if (align != GGUF_DEFAULT_ALIGNMENT) gguf_set_u32(w, "general.alignment", align);
    float a[5] = {1, 2, 3, 4, 5}, b[100];
    uint16_t c[21];
    float d[6] = {-1, -2, -3, -4, -5, -6};
    for (int i = 0; i < 100; i++) b[i] = (float)i * 0.5f;
    for (int i = 0; i < 21; i++) c[i] = bn_fp32_to_fp16((float)i);
    int64_t ne_a[1] = {5}, ne_b[1] = {100}, ne_c[2] = {3, 7}, ne_d[2] = {6, 1};
    CHECK(gguf_writer_add_tensor(w, "zeta", 1, ne_a, BN_F32, BN_F32, a, err, sizeof err) == 0, "add: %s", err);
    CHECK(gguf_writer_add_tensor(w, "alpha", 1, ne_b, BN_F32, BN_F32, b, err, sizeof err) == 1, "add: %s", err);
    CHECK(gguf_writer_add_tensor(w, "mid.weight", 2, ne_c, BN_F16, BN_F16, c, err, sizeof err) == 2, "add: %s", err);
    CHECK(gguf_writer_add_tensor(w, "vec_as_2d", 2, ne_d, BN_F32, BN_F32, d, err, sizeof err) == 3, "add: %s", err);
    CHECK(gguf_writer_add_tensor(w, "alpha", 1, ne_a, BN_F32, BN_F32, a, err, sizeof err) < 0 && strstr(err, "duplicate"),
          "duplicate name refused: %s", err);
    int64_t ne_bad[1] = {33};
    CHECK(gguf_writer_add_tensor(w, "q", 1, ne_bad, BN_Q4_0, BN_Q4_0, a, err, sizeof err) < 0 && strstr(err, "block"),
          "ne0 33 for q4_0 refused: %s", err);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    CHECK(gguf_writer_add_tensor(w, longname, 1, ne_a, BN_F32, BN_F32, a, err, sizeof err) < 0, "64-byte name refused");
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write (align %u): %s", align, err);
    gguf_writer_free(w);

    size_t n;
    uint8_t *raw = (uint8_t *)bn_read_file(path, &n, err, sizeof err);
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f && raw, "open (align %u): %s", align, err);
    if (!f || !raw) {
        free(raw);
        gguf_close(f);
        return;
    }
    CHECK(f->alignment == align, "alignment %u read back as %u", align, f->alignment);
    CHECK(f->data_offset % align == 0, "data_offset %llu multiple of %u", (unsigned long long)f->data_offset, align);
    const char *names[4] = {"zeta", "alpha", "mid.weight", "vec_as_2d"};
    const void *src[4] = {a, b, c, d};
    size_t sizes[4] = {20, 400, 42, 24};
    uint32_t dims[4] = {1, 1, 2, 1}; // {6, 1} is stored with n_dims 1 (trailing 1s dropped)
    uint64_t off = 0;
    CHECK(f->n_tensors == 4, "4 tensors");
    for (size_t i = 0; i < 4 && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK(strcmp(t->name, names[i]) == 0, "tensor %zu is %s (insertion order), got %s", i, names[i], t->name);
        CHECK(t->offset == off, "%s: offset %llu want %llu (back to back, padded)", t->name,
              (unsigned long long)t->offset, (unsigned long long)off);
        CHECK(t->nbytes == sizes[i] && memcmp(t->data, src[i], sizes[i]) == 0, "%s: data", t->name);
        CHECK(t->n_dims == dims[i], "%s: n_dims %u want %u", t->name, t->n_dims, dims[i]);
        // padding after the tensor is zero
        uint64_t end = f->data_offset + t->offset + t->nbytes, pend = f->data_offset + align_up(off + t->nbytes, align);
        int zero = 1;
        for (uint64_t p = end; p < pend && p < n; p++) zero &= raw[p] == 0;
        CHECK(zero, "%s: zero padding", t->name);
        off = (uint64_t)align_up((int64_t)(off + t->nbytes), align);
    }
    CHECK(f->tensors[2].ne[0] == 3 && f->tensors[2].ne[1] == 7 && f->tensors[2].type == BN_F16, "f16 {3,7}");
    CHECK(n == f->data_offset + off, "file size %zu = data_offset + padded data (%llu)", n,
          (unsigned long long)(f->data_offset + off));
    gguf_close(f);
    free(raw);
}

// ---- atomic write --------------------------------------------------------------------------

static int fill_fail_at_1(void *ctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    (void)ctx;
    if (idx == 1) return bn_err(err, errlen, "synthetic fill failure at tensor %d", idx);
    memset(dst, 0x11, nbytes);
    return 0;
}

static int count_dir_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

static void stop_noop(int sig) { (void)sig; }

static void test_atomic(void) {
    char dir[300], path[400], err[512];
    snprintf(dir, sizeof dir, "%s/atomic", tmpdir);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    int64_t ne[1] = {64};
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "test");
    gguf_writer_add_tensor(w, "a", 1, ne, BN_F32, BN_F32, NULL, err, sizeof err);
    gguf_writer_add_tensor(w, "b", 1, ne, BN_F32, BN_F32, NULL, err, sizeof err);
    // no final file after a failed fill, and no temp file left behind
    err[0] = 0;
    CHECK(gguf_writer_write(w, path, fill_fail_at_1, NULL, err, sizeof err) != 0, "failed fill -> error");
    CHECK(strstr(err, "synthetic fill failure") != NULL, "callback message passed through: %s", err);
    CHECK(access(path, F_OK) != 0, "no file under the final name after a failed fill");
    CHECK(count_dir_entries(dir, "model.gguf") == 0, "no temp file left");
    // NULL data and no fill callback
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) != 0 && strstr(err, "no data"),
          "missing data refused: %s", err);
    CHECK(access(path, F_OK) != 0, "still no file");
    // an existing file is left untouched by a failed rewrite
    const char old[] = "previous content";
    CHECK(bn_write_file_atomic(path, old, sizeof old, err, sizeof err) == 0, "seed file: %s", err);
    CHECK(gguf_writer_write(w, path, fill_fail_at_1, NULL, err, sizeof err) != 0, "failed fill -> error");
    size_t n;
    char *back = bn_read_file(path, &n, err, sizeof err);
    CHECK(back && n == sizeof old && memcmp(back, old, n) == 0, "old file intact after failed write");
    free(back);
    CHECK(count_dir_entries(dir, "model.gguf") == 1, "only the old file in the directory");
    // a directory that does not exist: clean error
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.gguf", dir);
    CHECK(gguf_writer_write(w, bad, fill_fail_at_1, NULL, err, sizeof err) != 0 && err[0], "bad dir: %s", err);
    gguf_writer_free(w);
    // stopped by a signal mid-write: SIGTERM / SIGINT / SIGHUP (default action) remove the temp file, the old file
    // stays; a program with its own handler keeps it (that handler decides); SIGKILL leaves it (nothing can run)
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGTERM, SIGKILL};
    for (int k = 0; k < 5; k++) {
        const bool own_handler = k == 3;
        int ready[2];
        CHECK(pipe(ready) == 0, "pipe");
        pid_t pid = fork(); // (stdout is line-buffered, tests/test.h: nothing pending to be written twice)
        CHECK(pid >= 0, "fork");
        if (pid < 0) break; // (never kill(-1, ...))
        if (pid == 0) {
            close(ready[0]);
            if (own_handler) signal(SIGTERM, stop_noop);
            bn_atomic_file af;
            if (bn_atomic_open(&af, path, err, sizeof err) != 0) _exit(3);
            fputs("partial", af.f), fflush(af.f);
            if (write(ready[1], "x", 1) != 1) _exit(4);
            for (;;) pause(); // mid-write, until the parent's signal
        }
        close(ready[1]); // so a child that dies before it is ready gives end-of-file here, not a wait forever
        char c;
        CHECK(read(ready[0], &c, 1) == 1, "case %d: child wrote its temp file", k);
        kill(pid, sigs[k]);
        int st = 0;
        if (own_handler) usleep(200 * 1000), kill(pid, SIGKILL); // its handler returned: end it without cleanup
        for (int ms = 0; waitpid(pid, &st, WNOHANG) == 0; ms += 10) { // a child that survives its signal fails the
            if (ms == 10000) kill(pid, SIGKILL);                   // case below instead of hanging the test
            usleep(10 * 1000);
        }
        close(ready[0]);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == (own_handler ? SIGKILL : sigs[k]), "case %d: killed by its signal", k);
        int left = count_dir_entries(dir, "model.gguf.tmp.");
        CHECK(left == (own_handler || sigs[k] == SIGKILL ? 1 : 0), "signal %d%s: %d temp files left", sigs[k],
              own_handler ? " (own handler)" : "", left);
        back = bn_read_file(path, &n, err, sizeof err);
        CHECK(back && n == sizeof old && memcmp(back, old, n) == 0, "signal %d: the old file is intact", sigs[k]);
        free(back);
        // the next writer of the path removes what the dead writer left, and says so
        CHECK(bn_write_file_atomic(path, old, sizeof old, err, sizeof err) == 0, "rewrite: %s", err);
        CHECK(count_dir_entries(dir, "model.gguf.tmp.") == 0, "signal %d: the next writer removed the leftover",
              sigs[k]);
    }
    // a temp file of a process that still runs (pid 1; the parent of this one) or of a name that is not a pid is kept
    char live[500], odd[500];
    snprintf(live, sizeof live, "%s.tmp.%d", path, (int)getppid());
    snprintf(odd, sizeof odd, "%s.tmp.12x", path);
    CHECK(bn_write_file_atomic(live, "", 0, err, sizeof err) == 0 && bn_write_file_atomic(odd, "", 0, err, sizeof err) == 0,
          "seed look-alikes: %s", err);
    CHECK(bn_write_file_atomic(path, old, sizeof old, err, sizeof err) == 0, "rewrite: %s", err);
    CHECK(access(live, F_OK) == 0 && access(odd, F_OK) == 0, "a live writer's temp file and a non-pid name are kept");
    unlink(live), unlink(odd);
    unlink(path);
    rmdir(dir);
}

// ---- hand-built negative cases (docs/formats.md §1.5) --------------------------------------------

typedef struct {
    const char *name;   // llama.cpp test-gguf name where one exists
    const char *expect; // substring the error must contain ("" = must open)
    // knobs (0 = default)
    const char *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv;   // overrides when != 0
    uint64_t key0_len;          // lying length of the first key
    uint32_t kv1_type;          // value type of "test.value" (default u32)
    uint32_t kv1_arr_type;
    uint8_t kv1_bool;
    int dup_key;
    uint32_t align_kv;          // emit general.alignment = this (as align_kv_type)
    uint32_t align_kv_type;
    int align_value_for_offsets; // compute offsets with this alignment (default = declared)
    uint64_t name_len;          // lying length of tensor b's name
    int long_name;              // tensor b named with 64 bytes
    uint32_t n_dims1;           // tensor b dims (default 2)
    uint64_t ne1[5];            // tensor b ne (default {4,2})
    uint32_t type1;             // tensor b type (default F32)
    int type1_set;
    uint64_t offset1;           // tensor b offset override
    int offset1_set;
    int dup_name;
    size_t cut;                 // bytes removed from the end
    int no_data_pad;            // no padding before the data section
    size_t extra;               // zero bytes appended after the data
} gcase;

// build_case: a two-KV, two-tensor file (a: F32 {8} at 0, b: F32 {4,2}) with the case's defect.
static void build_case(const gcase *c, bb *b) {
    memset(b, 0, sizeof *b);
    uint32_t align = c->align_kv && c->align_kv_type == 0 ? c->align_kv : 32;
    if (align == 0 || (align & (align - 1))) align = 32;
    uint32_t off_align = c->align_value_for_offsets ? (uint32_t)c->align_value_for_offsets : align;
    bb_put(b, c->magic ? c->magic : "GGUF", 4);
    bb_u32(b, c->version ? c->version : 3);
    bb_u64(b, c->n_tensors ? c->n_tensors : 2);
    bb_u64(b, c->n_kv ? c->n_kv : 2 + (c->dup_key != 0) + (c->align_kv != 0));
    if (c->key0_len) bb_strn(b, c->key0_len, "general.architecture", 20);
    else bb_str(b, "general.architecture");
    bb_u32(b, GGUF_TYPE_STRING);
    bb_str(b, "test");
    for (int rep = 0; rep < 1 + (c->dup_key != 0); rep++) {
        bb_str(b, "test.value");
        uint32_t t = c->kv1_type ? c->kv1_type : GGUF_TYPE_UINT32;
        bb_u32(b, t);
        if (t == GGUF_TYPE_BOOL) bb_u8(b, c->kv1_bool);
        else if (t == GGUF_TYPE_ARRAY) {
            bb_u32(b, c->kv1_arr_type);
            bb_u64(b, 1);
            bb_u32(b, 7);
        } else bb_u32(b, 7);
    }
    if (c->align_kv) {
        bb_str(b, "general.alignment");
        uint32_t t = c->align_kv_type ? c->align_kv_type : GGUF_TYPE_UINT32;
        bb_u32(b, t);
        if (t == GGUF_TYPE_UINT64) bb_u64(b, c->align_kv);
        else bb_u32(b, c->align_kv);
    }
    // tensor a
    bb_str(b, "a");
    bb_u32(b, 1);
    bb_u64(b, 8);
    bb_u32(b, BN_F32);
    bb_u64(b, 0);
    // tensor b
    const char *bname = c->dup_name ? "a" : "b";
    char longname[65];
    memset(longname, 'b', 64);
    longname[64] = 0;
    if (c->long_name) bname = longname;
    if (c->name_len) bb_strn(b, c->name_len, bname, strlen(bname));
    else bb_str(b, bname);
    uint32_t nd = c->n_dims1 ? c->n_dims1 : 2;
    bb_u32(b, nd);
    for (uint32_t d = 0; d < nd && d < 5; d++) bb_u64(b, c->ne1[0] || c->ne1[1] ? c->ne1[d] : (d == 0 ? 4 : 2));
    bb_u32(b, c->type1_set ? c->type1 : BN_F32);
    bb_u64(b, c->offset1_set ? c->offset1 : (uint64_t)align_up(32, off_align));
    if (!c->no_data_pad) bb_pad(b, align);
    float vals[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    bb_put(b, vals, 32);
    bb_zeros(b, (size_t)align_up(32, off_align) - 32);
    bb_put(b, vals, 32);
    bb_zeros(b, c->extra);
    bb_pad(b, align);
    b->n -= c->cut < b->n ? c->cut : b->n;
}

#define U64BIG (1ull << 40)
static const gcase cases[] = {
    {"OK", "", .version = 3},
    {"OK_VERSION_2", "", .version = 2},
    {"OK_ALIGN_64", "", .align_kv = 64},
    {"OK_ALIGN_1", "", .align_kv = 1},
    {"OK_LAST_TENSOR_UNPADDED", "", .align_kv = 64, .cut = 32},
    {"OK_GAP_BETWEEN_TENSORS", "", .offset1 = 64, .offset1_set = 1, .extra = 32}, // ggml's order rule rejects it
    {"BAD_MAGIC", "magic", .magic = "GGUX"},
    {"BAD_MAGIC_LOWER", "magic", .magic = "gguf"},
    {"BAD_VERSION_0", "version", .version = 0xFFFF0000u},
    {"BAD_VERSION_SWAPPED", "version", .version = 0x03000000u},
    {"BAD_VERSION_1", "GGUFv1", .version = 1},
    {"BAD_VERSION_FUTURE", "version 4", .version = 4},
    {"BAD_N_TENSORS", "tensor_count", .n_tensors = 1ull << 62},
    {"BAD_N_TENSORS_NEG", "tensor_count", .n_tensors = ~0ull},
    {"BAD_N_KV", "kv_count", .n_kv = U64BIG},
    {"BAD_N_KV_NEG", "kv_count", .n_kv = ~0ull},
    {"KV_BAD_KEY_SIZE", "kv key", .key0_len = U64BIG},
    {"KV_EMPTY_KEY", "empty key", .key0_len = 0xFFFFFFFFFFFFFFFFull},
    {"KV_BAD_TYPE", "invalid value type 13", .kv1_type = 13},
    {"KV_BAD_TYPE_HUGE", "invalid value type", .kv1_type = 0x80000000u},
    {"KV_NESTED_ARRAY", "array element type 9", .kv1_type = GGUF_TYPE_ARRAY, .kv1_arr_type = GGUF_TYPE_ARRAY},
    {"KV_BAD_ARRAY_TYPE", "array element type 13", .kv1_type = GGUF_TYPE_ARRAY, .kv1_arr_type = 13},
    {"KV_BAD_BOOL", "bool", .kv1_type = GGUF_TYPE_BOOL, .kv1_bool = 2},
    {"KV_DUPLICATE_KEY", "duplicate key 'test.value'", .dup_key = 1},
    {"KV_BAD_ALIGN_0", "general.alignment", .align_kv = 0xFFFFFFFFu},
    {"KV_BAD_ALIGN_NPOT", "general.alignment", .align_kv = 48},
    {"KV_BAD_ALIGN_TYPE", "general.alignment", .align_kv = 32, .align_kv_type = GGUF_TYPE_UINT64},
    {"TENSORS_BAD_NAME_SIZE", "name length 64", .long_name = 1},
    {"TENSORS_HUGE_NAME_SIZE", "tensor name", .name_len = U64BIG},
    {"TENSORS_BAD_N_DIMS_0", "n_dims 0", .n_dims1 = 0xFFFFFFFFu},
    {"TENSORS_BAD_N_DIMS_5", "n_dims 5", .n_dims1 = 5, .ne1 = {4, 2, 1, 1, 1}},
    {"TENSORS_BAD_SHAPE", "block size", .type1 = BN_Q4_0, .type1_set = 1, .ne1 = {8, 32}},
    {"TENSORS_NEG_NE", "dimension", .ne1 = {4, ~0ull}},
    {"TENSORS_NE_TOO_BIG", "overflows", .ne1 = {1ull << 32, 1ull << 32}},
    {"TENSORS_ROW_BYTES_OVERFLOW", "overflows", .ne1 = {1ull << 62, 1}},
    {"TENSORS_BYTES_OVERFLOW", "overflows", .ne1 = {1ull << 31, 1ull << 31}},
    // an empty tensor whose other dimensions multiply past int64 (ggml accepts it: 0 elements): its row count must not
    // be computed from them (fuzz_gguf found the signed overflow under UBSan)
    {"TENSORS_ZERO_THEN_HUGE", "", .n_dims1 = 3, .ne1 = {0, 1ull << 32, 1ull << 32}},
    {"TENSORS_BAD_TYPE", "type id 4", .type1 = 4, .type1_set = 1},
    {"TENSORS_BAD_TYPE_HUGE", "type id", .type1 = 100000, .type1_set = 1},
    {"TENSORS_BAD_OFFSET", "past the end", .offset1 = U64BIG, .offset1_set = 1},
    {"TENSORS_DUPLICATE_NAME", "duplicate tensor name 'a'", .dup_name = 1},
    {"TENSORS_BAD_ALIGN", "alignment", .offset1 = 33, .offset1_set = 1},
    {"TENSORS_INCONSISTENT_ALIGN", "alignment", .align_kv = 64, .align_value_for_offsets = 32},
    {"TENSORS_OVERLAP", "overlap", .offset1 = 0, .offset1_set = 1},
    {"DATA_NOT_ENOUGH_DATA", "past the end", .cut = 33},
    {"DATA_TRUNCATED_INFOS", "truncated", .cut = 64 + 36},
    {"DATA_SECTION_PAST_END", "past the end", .no_data_pad = 1, .cut = 64},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void test_negative(void) {
    for (size_t i = 0; i < N_CASES; i++) {
        const gcase *c = &cases[i];
        gcase fixed = *c;
        // knob encodings: 0xFFFF0000 version -> 0; 0xFFFFFFFF key len -> 0; n_dims -> 0; align -> 0
        if (fixed.version == 0xFFFF0000u) fixed.version = 0;
        bb b;
        build_case(&fixed, &b);
        if (c->version == 0xFFFF0000u) memset(b.p + 4, 0, 4);
        if (c->key0_len == 0xFFFFFFFFFFFFFFFFull) memset(b.p + 24, 0, 8); // empty key
        if (c->n_dims1 == 0xFFFFFFFFu) { // n_dims 0: patch the u32 after tensor b's name
            size_t at = 0;
            for (size_t p = 0; p + 9 < b.n; p++)
                if (memcmp(b.p + p, "\x01\0\0\0\0\0\0\0b", 9) == 0) at = p + 9;
            memset(b.p + at, 0, 4);
        }
        if (c->align_kv == 0xFFFFFFFFu) { // general.alignment = 0
            for (size_t p = 0; p + 17 < b.n; p++)
                if (memcmp(b.p + p, "general.alignment", 17) == 0) memset(b.p + p + 17 + 4, 0, 4);
        }
        char err[512];
        int ok = open_copy(b.p, b.n, err, sizeof err);
        if (c->expect[0] == 0) CHECK(ok, "%s must open: %s", c->name, err);
        else CHECK(!ok && strstr(err, c->expect) != NULL, "%s: error '%s' must contain '%s'", c->name, ok ? "(opened)" : err,
                   c->expect);
        free(b.p);
    }
}

// ---- type 42: g64 vs g128 ---------------------------------------------------------------------

static void test_q2_0_detection(void) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/q2.gguf", tmpdir);
    for (int layout = 0; layout < 3; layout++) {
        // layout 0: legacy PQ2_0 stored as 42; 1: mainline g64 as 42; 2: PQ2_0 stored as 142
        int type = layout == 1 ? BN_Q2_0 : BN_PQ2_0;
        uint32_t file_type = layout == 2 ? BN_PQ2_0 : 42;
        gguf_writer *w = gguf_writer_new();
        gguf_set_str(w, "general.architecture", "test");
        int64_t ne_q[2] = {256, 8}, ne_q2[2] = {512, 3}, ne_v[1] = {10};
        size_t nq = bn_row_size(type, 256) * 8, nq2 = bn_row_size(type, 512) * 3;
        uint8_t *dq = malloc(nq), *dq2 = malloc(nq2);
        for (size_t i = 0; i < nq; i++) dq[i] = (uint8_t)(i * 7 + layout);
        for (size_t i = 0; i < nq2; i++) dq2[i] = (uint8_t)(i * 13 + layout);
        float v[10] = {0};
        gguf_writer_add_tensor(w, "first.weight", 2, ne_q, type, file_type, dq, err, sizeof err);
        gguf_writer_add_tensor(w, "norm.weight", 1, ne_v, BN_F32, BN_F32, v, err, sizeof err);
        gguf_writer_add_tensor(w, "last.weight", 2, ne_q2, type, file_type, dq2, err, sizeof err);
        CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
        gguf_writer_free(w);
        gguf_file *f = gguf_open(path, err, sizeof err);
        CHECK(f != NULL, "open layout %d: %s", layout, err);
        if (f) {
            const gguf_tensor *a = gguf_find_tensor(f, "first.weight"), *c = gguf_find_tensor(f, "last.weight");
            CHECK(a && a->type == type && a->file_type == file_type, "layout %d: first.weight read as %s (file id %u)",
                  layout, a ? bn_type_name(a->type) : "-", a ? a->file_type : 0);
            CHECK(c && c->type == type && c->nbytes == nq2 && memcmp(c->data, dq2, nq2) == 0, "layout %d: last.weight",
                  layout);
            CHECK(a && a->nbytes == nq && memcmp(a->data, dq, nq) == 0, "layout %d: data", layout);
            gguf_close(f);
        }
        // the same file without its final padding still resolves (last tensor span check)
        size_t n;
        char *raw = bn_read_file(path, &n, err, sizeof err);
        size_t unpadded = n - (size_t)(align_up((int64_t)nq2, 32) - (int64_t)nq2);
        gguf_file *g = gguf_open_mem(raw, unpadded, err, sizeof err);
        CHECK(g && gguf_find_tensor(g, "last.weight")->type == type, "layout %d unpadded: %s", layout, g ? "" : err);
        gguf_close(g);
        free(raw);
        free(dq);
        free(dq2);
    }
    // type 42 whose span fits neither layout -> clean error naming the tensor
    bb b = {0};
    bb_put(&b, "GGUF", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 1);
    bb_u64(&b, 0);
    bb_str(&b, "odd.weight");
    bb_u32(&b, 2);
    bb_u64(&b, 256);
    bb_u64(&b, 8);
    bb_u32(&b, 42);
    bb_u64(&b, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 700); // g64 needs 576 B (<= 576 span), g128 544 B: 700 fits neither
    CHECK(!open_copy(b.p, b.n, err, sizeof err) && strstr(err, "odd.weight") && strstr(err, "42"),
          "type 42 with a wrong span: %s", err);
    free(b.p);
}

// ---- broken-file replay -----------------------------------------------------------------------

// make_sample: a small valid file with string arrays, several KV types, and F32/PQ2_0(42)/F16/Q8_0 tensors.
static uint8_t *make_sample(size_t *n, size_t *end_of_last_data) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/sample.gguf", tmpdir);
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "qwen35");
    gguf_set_u32(w, "qwen35.block_count", 2);
    gguf_set_f32(w, "qwen35.rope.freq_base", 1e7f);
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    const char *toks[] = {"!", "\"", "\xc4\xa0t", "he", "<|im_end|>"};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", 5, toks);
    int32_t types[5] = {1, 1, 1, 1, 3};
    gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, 5, types);
    int64_t ne_v[1] = {8}, ne_q[2] = {256, 8}, ne_h[2] = {4, 3}, ne_8[2] = {32, 2};
    static uint8_t data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 31);
    gguf_writer_add_tensor(w, "output_norm.weight", 1, ne_v, BN_F32, BN_F32, data, err, sizeof err);
    gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", 2, ne_q, BN_PQ2_0, 42, data, err, sizeof err);
    gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 2, ne_h, BN_F16, BN_F16, data, err, sizeof err);
    gguf_writer_add_tensor(w, "token_embd.weight", 2, ne_8, BN_Q8_0, BN_Q8_0, data, err, sizeof err);
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "sample: %s", err);
    gguf_writer_free(w);
    uint8_t *raw = (uint8_t *)bn_read_file(path, n, err, sizeof err);
    gguf_file *f = gguf_open_mem(raw, *n, err, sizeof err);
    CHECK(f != NULL, "sample opens: %s", err);
    *end_of_last_data = 0;
    if (f) {
        const gguf_tensor *t = &f->tensors[f->n_tensors - 1];
        *end_of_last_data = f->data_offset + t->offset + t->nbytes;
        CHECK(gguf_find_tensor(f, "blk.0.ffn_up.weight")->type == BN_PQ2_0, "sample: 42 resolved to g128");
        gguf_close(f);
    }
    return raw;
}

static void test_replay(void) {
    size_t n, end_data;
    uint8_t *raw = make_sample(&n, &end_data);
    if (!raw) return;
    char err[512];
    // every truncation: fails cleanly, except lengths that only drop the final padding
    int opened = 0;
    for (size_t len = 0; len <= n; len++) opened += open_copy(raw, len, err, sizeof err);
    CHECK(opened == (int)(n - end_data + 1), "truncations that open: %d, want %zu (only the final padding missing)",
          opened, n - end_data + 1);
    // overwrite every metadata byte with boundary values, and every position with boundary u64s
    gguf_file *f = gguf_open_mem(raw, n, err, sizeof err);
    size_t meta = f ? (size_t)f->data_offset : n;
    gguf_close(f);
    static const uint8_t bytes[] = {0x00, 0x01, 0x02, 0x05, 0x09, 0x0d, 0x3f, 0x40, 0x7f, 0x80, 0xfe, 0xff};
    static const uint64_t words[] = {0, 1, 4, 5, 63, 64, 65, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                     0xffffffffffffffffull, 1ull << 32, 1ull << 40};
    uint8_t *mut = malloc(n);
    int n_ok = 0, n_runs = 0;
    for (size_t p = 0; p < meta; p++)
        for (size_t k = 0; k < sizeof bytes; k++) {
            memcpy(mut, raw, n);
            mut[p] = bytes[k];
            n_ok += open_copy(mut, n, err, sizeof err);
            n_runs++;
        }
    for (size_t p = 0; p + 8 <= meta; p++)
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
            memcpy(mut, raw, n);
            memcpy(mut + p, &words[k], 8);
            n_ok += open_copy(mut, n, err, sizeof err);
            n_runs++;
        }
    free(mut);
    printf("replay: %zu truncations (%d opened), %d overwrites (%d opened, the rest failed cleanly)\n", n + 1, opened,
           n_runs, n_ok);
    CHECK(n_ok < n_runs && n_ok > 0, "overwrites both open and fail");
    free(raw);
}

// ---- many KVs / tensors: duplicate checks and type-42 resolution stay O(n log n) --------------

// build_many: n u8 KVs and n tensors (type 42 {128} or F32 {8}), names k<i>/t<i>; dup_last renames the
// last key and the last tensor to the first ones.
static void build_many(bb *b, int n, int q42, int dup_kv, int dup_t) {
    memset(b, 0, sizeof *b);
    bb_put(b, "GGUF", 4);
    bb_u32(b, 3);
    bb_u64(b, (uint64_t)n);
    bb_u64(b, (uint64_t)n);
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "k%d", dup_kv && i == n - 1 ? 0 : i);
        bb_str(b, name);
        bb_u32(b, GGUF_TYPE_UINT8);
        bb_u8(b, (uint8_t)i);
    }
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "t%d", dup_t && i == n - 1 ? 0 : i);
        bb_str(b, name);
        bb_u32(b, 1);
        bb_u64(b, q42 ? 128 : 8);
        bb_u32(b, q42 ? 42 : BN_F32);
        bb_u64(b, (uint64_t)i * 64);
    }
    bb_pad(b, 32);
    bb_zeros(b, (size_t)n * 64);
}

static void test_many(void) {
    const int n = 50000;
    char err[512];
    bb b;
    double t0 = bn_time_ms();
    build_many(&b, n, 1, 0, 0);
    gguf_file *f = gguf_open_mem(b.p, b.n, err, sizeof err);
    // 50000 type-42 {128} tensors 64 B apart: 36 B (g64) and 34 B (g128) both fit -> mainline g64
    CHECK(f && f->n_tensors == (size_t)n && f->n_kv == (size_t)n && f->tensors[n - 1].type == BN_Q2_0,
          "%d ambiguous type-42 tensors open as g64: %s", n, f ? "" : err);
    gguf_close(f);
    free(b.p);
    build_many(&b, n, 0, 1, 0);
    CHECK(!gguf_open_mem(b.p, b.n, err, sizeof err) && strstr(err, "duplicate key 'k0'"), "late duplicate key: %s", err);
    free(b.p);
    build_many(&b, n, 0, 0, 1);
    CHECK(!gguf_open_mem(b.p, b.n, err, sizeof err) && strstr(err, "duplicate tensor name 't0'"),
          "late duplicate tensor: %s", err);
    free(b.p);
    printf("many: 3 x %d KVs + %d tensors parsed in %.0f ms\n", n, n, bn_time_ms() - t0);
}

// ---- checked-in corpus -------------------------------------------------------------------------

static int write_corpus(const char *dir) {
    char path[600], err[512];
    mkdir(dir, 0755);
    for (size_t i = 0; i < N_CASES; i++) {
        bb b;
        gcase c = cases[i];
        if (c.version == 0xFFFF0000u || c.key0_len == 0xFFFFFFFFFFFFFFFFull || c.n_dims1 == 0xFFFFFFFFu ||
            c.align_kv == 0xFFFFFFFFu)
            continue; // patched cases are covered in memory
        build_case(&c, &b);
        char lower[64];
        size_t k = 0;
        for (; c.name[k] && k < sizeof lower - 1; k++) lower[k] = (char)(c.name[k] >= 'A' && c.name[k] <= 'Z' ? c.name[k] + 32 : c.name[k]);
        lower[k] = 0;
        snprintf(path, sizeof path, "%s/%s_%s.gguf", dir, c.expect[0] ? "bad" : "ok", lower);
        if (strncmp(lower, "ok", 2) == 0) snprintf(path, sizeof path, "%s/%s.gguf", dir, lower);
        if (bn_write_file_atomic(path, b.p, b.n, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        free(b.p);
    }
    size_t n, end;
    uint8_t *raw = make_sample(&n, &end);
    snprintf(path, sizeof path, "%s/ok_sample_pq2_42.gguf", dir);
    bn_write_file_atomic(path, raw, n, err, sizeof err);
    free(raw);
    printf("corpus written to %s\n", dir);
    return 0;
}

static void test_corpus(void) {
    const char *root = getenv("BONSAI_SOURCE_ROOT");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/gguf/corpus", root ? root : ".");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "corpus directory %s exists", dir);
    if (!d) return;
    struct dirent *e;
    int n_files = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[1100], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n;
        char *raw = bn_read_file(path, &n, err, sizeof err);
        CHECK(raw != NULL, "read %s", path);
        if (!raw) continue;
        int ok = open_copy(raw, n, err, sizeof err);
        if (strncmp(e->d_name, "ok", 2) == 0) CHECK(ok, "%s must open: %s", e->d_name, err);
        else if (strncmp(e->d_name, "bad", 3) == 0) CHECK(!ok, "%s must fail", e->d_name);
        // also through the mmap path
        gguf_file *f = gguf_open(path, err, sizeof err);
        CHECK((f != NULL) == ok, "%s: gguf_open agrees with gguf_open_mem", e->d_name);
        gguf_close(f);
        free(raw);
        n_files++;
    }
    closedir(d);
    CHECK(n_files >= 20, "corpus has %d files (>= 20)", n_files);
    printf("corpus: %d files replayed\n", n_files);
}

static void rm_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(int argc, char **argv) {
    // test_atomic's signal cases are about stop signals at their default action, which bn_tmp_track replaces by its
    // cleanup handler; a run under nohup inherits SIGHUP ignored, which the library rightly leaves alone (so before,
    // the SIGHUP child never died and the test waited forever). This program starts from the defaults.
    signal(SIGHUP, SIG_DFL), signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bonsai-test-gguf-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
        int rc = write_corpus(argv[2]);
        rm_tmpdir();
        return rc;
    }
#define SECTION(call) (printf("%s\n", #call), call)
    SECTION(test_kv_roundtrip());
    static const uint32_t aligns[] = {1, 8, 32, 64, 256, 4096};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) SECTION(test_tensor_layout(aligns[i]));
    SECTION(test_atomic());
    SECTION(test_negative());
    SECTION(test_q2_0_detection());
    SECTION(test_replay());
    SECTION(test_many());
    SECTION(test_corpus());
    // a missing file and a directory give clean errors
    char err[512];
    CHECK(gguf_open("/nonexistent/x.gguf", err, sizeof err) == NULL && strstr(err, "/nonexistent/x.gguf"),
          "missing file: %s", err);
    CHECK(gguf_open("/tmp", err, sizeof err) == NULL && strstr(err, "not a regular file"), "directory: %s", err);
    rm_tmpdir();
    return test_done("test_gguf");
}
