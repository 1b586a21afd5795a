// tests/convert/test_safetensors.c — safetensors writer → reader round trip (values, header layout),
// and a corrupt corpus that must be refused with a clear message.
#include "tests/test.h"
#include "convert/safetensors.h"
#include "base/util.h"
#include "quant/quant.h"
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/stat.h>

static char dir[256];

static void write_raw(const char *path, const char *hdr, size_t data_bytes, int64_t hlen_override) {
    FILE *f = fopen(path, "wb");
    uint64_t n = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(hdr);
    for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 255), f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fclose(f);
}

// expect_refused: opening path fails and the message contains want.
static void expect_refused(const char *what, const char *hdr, size_t data_bytes, int64_t hlen, const char *want) {
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, what);
    write_raw(path, hdr, data_bytes, hlen);
    bn_safetensors *st = bn_st_open_file(path, err, sizeof err);
    CHECK(st == NULL, "%s: accepted", what);
    CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want);
    printf("  %-12s -> %s\n", what, err);
    bn_st_close(st);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/bonsai-test-st-%d", (int)getpid());
    mkdir(dir, 0777);
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/ok.safetensors", dir);
    // writer: three tensors of the three dtypes
    float a[6] = {1, -2, 3.5f, 0.25f, -0.125f, 7};
    uint16_t h[3], b[2];
    for (int i = 0; i < 3; i++) h[i] = bn_fp32_to_fp16(a[i]);
    for (int i = 0; i < 2; i++) b[i] = bn_fp32_to_bf16(a[i + 3]);
    bn_st_writer *w = bn_st_writer_new();
    int64_t s1[2] = {2, 3}, s2[1] = {3}, s3[3] = {2, 1, 1};
    CHECK(bn_st_writer_add(w, "w.f32", BN_F32, 2, s1, a, err, sizeof err) == 0, "%s", err);
    CHECK(bn_st_writer_add(w, "w.f16", BN_F16, 1, s2, h, err, sizeof err) == 1, "%s", err);
    CHECK(bn_st_writer_add(w, "w.bf16", BN_BF16, 3, s3, b, err, sizeof err) == 2, "%s", err);
    CHECK(bn_st_writer_add(w, "w.f32", BN_F32, 1, s2, a, err, sizeof err) == -1, "duplicate accepted");
    CHECK(bn_st_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "%s", err);
    bn_st_writer_free(w);
    size_t n;
    char *file = bn_read_file(path, &n, err, sizeof err);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)file[i];
    CHECK(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
    CHECK(n == 8 + hl + 24 + 6 + 4, "file size %zu", n);
    CHECK(strncmp(file + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", 90) == 0,
          "header starts '%.90s'", file + 8);
    CHECK(file[8 + hl - 1] == ' ' || file[8 + hl - 1] == '}', "padding byte");
    free(file);
    bn_safetensors *st = bn_st_open_file(path, err, sizeof err);
    CHECK(st != NULL, "%s", err);
    if (st) {
        CHECK(st->n_tensors == 3, "n_tensors %d", st->n_tensors);
        const bn_st_tensor *t = bn_st_find(st, "w.f16");
        CHECK(t && t->type == BN_F16 && t->n_dims == 1 && t->shape[0] == 3 && t->nbytes == 6, "w.f16 meta");
        float back[6];
        if (t) {
            bn_st_to_f32(t->type, t->data, back, 3);
            CHECK(back[0] == 1 && back[1] == -2 && back[2] == 3.5f, "f16 values");
        }
        t = bn_st_find(st, "w.bf16");
        CHECK(t && t->type == BN_BF16 && t->n_dims == 3 && t->shape[0] == 2, "w.bf16 meta");
        if (t) {
            bn_st_to_f32(t->type, t->data, back, 2);
            CHECK(back[0] == 0.25f && back[1] == -0.125f, "bf16 values");
        }
        t = bn_st_find(st, "w.f32");
        CHECK(t && memcmp(t->data, a, 24) == 0, "f32 bytes");
        bn_st_close(st);
    }
    { // an F16 and a BF16 tensor at odd addresses (a header of odd length, an odd data offset): accepted, converted
      // through an aligned copy (fuzz_safetensors found the misaligned uint16 loads under UBSan)
        const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                          "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[6,6]},"
                          "\"p\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[7,11]}}";
        char odd[512];
        snprintf(odd, sizeof odd, "%s%s", hdr, strlen(hdr) % 2 ? "" : " "); // odd length: data starts at an odd byte
        snprintf(path, sizeof path, "%s/odd.safetensors", dir);
        FILE *f = fopen(path, "wb");
        uint64_t n = strlen(odd);
        for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 255), f);
        fwrite(odd, 1, n, f);
        fwrite(h, 2, 3, f);
        fputc(0, f);
        fwrite(b, 2, 2, f);
        fclose(f);
        bn_safetensors *st = bn_st_open_file(path, err, sizeof err);
        CHECK(st != NULL, "odd offsets: %s", err);
        const bn_st_tensor *th = st ? bn_st_find(st, "h") : NULL, *tp = st ? bn_st_find(st, "p") : NULL;
        float back[3] = {0};
        if (th) bn_st_to_f32(th->type, th->data, back, 3);
        CHECK(th && ((uintptr_t)th->data & 1) && back[0] == 1 && back[1] == -2 && back[2] == 3.5f,
              "F16 at an odd address: %g %g %g", back[0], back[1], back[2]);
        if (tp) bn_st_to_f32(tp->type, tp->data, back, 2);
        CHECK(tp && back[0] == 0.25f && back[1] == -0.125f, "BF16 at an odd offset: %g %g", back[0], back[1]);
        bn_st_close(st);
    }
    // corrupt corpus
    const char *ok1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_refused("truncated", ok1, 4, -1, "outside the file");
    expect_refused("tiny", "", 0, 3, "bad safetensors header length");
    expect_refused("hlen-big", ok1, 8, 1 << 20, "bad safetensors header length");
    expect_refused("bad-json", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],", 8, -1, "header JSON");
    expect_refused("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, -1, "overlap");
    expect_refused("dtype-size", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1, "data_offsets span");
    expect_refused("dtype-i8", "{\"a\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, -1, "only F32, F16 and BF16");
    expect_refused("duplicate", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, "duplicate");
    expect_refused("no-offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1, "data_offsets");
    expect_refused("neg-shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, -1, "bad shape");
    // sharded: a tensor in two shards is refused; a tensor the index names but its shard lacks too
    {
        char sd[400], sp[500];
        snprintf(sd, sizeof sd, "%s/sharded", dir);
        mkdir(sd, 0777);
        const char *one = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        snprintf(sp, sizeof sp, "%s/s1.safetensors", sd);
        write_raw(sp, one, 4, -1);
        snprintf(sp, sizeof sp, "%s/s2.safetensors", sd);
        write_raw(sp, one, 4, -1);
        snprintf(sp, sizeof sp, "%s/model.safetensors.index.json", sd);
        const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
        CHECK(bn_write_file_atomic(sp, idx, strlen(idx), err, sizeof err) == 0, "%s", err);
        bn_safetensors *x = bn_st_open_dir(sd, err, sizeof err);
        CHECK(!x && strstr(err, "two shards"), "duplicate across shards: %s", err);
        printf("  %-12s -> %s\n", "two-shards", err);
        bn_st_close(x);
        snprintf(sp, sizeof sp, "%s/s2.safetensors", sd);
        write_raw(sp, "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1);
        x = bn_st_open_dir(sd, err, sizeof err);
        CHECK(!x && strstr(err, "missing from shard"), "index names a missing tensor: %s", err);
        printf("  %-12s -> %s\n", "not-in-shard", err);
        bn_st_close(x);
        snprintf(sp, sizeof sp, "%s/model.safetensors.index.json", sd);
        idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
        CHECK(bn_write_file_atomic(sp, idx, strlen(idx), err, sizeof err) == 0, "%s", err);
        x = bn_st_open_dir(sd, err, sizeof err);
        CHECK(x && x->n_tensors == 2 && x->n_shards == 2 && bn_st_find(x, "c") && bn_st_find(x, "c")->shard == 1,
              "good sharded dir: %s", err);
        bn_st_close(x);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return test_done("test_safetensors");
}
