/* test_gguf — GGUF reader and writer: round trip, real files, and hostile files (every error names what
 * failed and where). */
#include <math.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "test.h"

/* ---- a byte builder for hand-assembled files ---- */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_bytes(struct bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(struct bb *b, uint32_t v)
{
    bb_bytes(b, &v, 4);
}
static void bb_u64(struct bb *b, uint64_t v)
{
    bb_bytes(b, &v, 8);
}
static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_bytes(b, s, strlen(s));
}
static void bb_hdr(struct bb *b, uint64_t n_tensors, uint64_t n_kv)
{
    bb_bytes(b, "GGUF", 4);
    bb_u32(b, 3);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_VTYPE_UINT32);
    bb_u32(b, v);
}
/* tensor info with up to 4 dims */
static void bb_tensor(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}
/* pad to `align`, then `data` zero bytes */
static void bb_finish(struct bb *b, size_t align, size_t data)
{
    static const uint8_t z[4096];
    size_t pad = (align - b->n % align) % align;
    bb_bytes(b, z, pad);
    while (data) {
        size_t k = data < sizeof z ? data : sizeof z;
        bb_bytes(b, z, k);
        data -= k;
    }
}

/* Opens b's bytes from an exactly-sized heap copy (so ASan sees any over-read); returns rc, fills e. */
static int open_bytes(const void *p, size_t n, struct err *e)
{
    void *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    gguf_file *f = NULL;
    err_clear(e);
    int rc = gguf_open_memory(copy, n, &f, e);
    if (rc == 0) {
        if (gguf_check(f) != 0) rc = 99;
        gguf_close(f);
    } else if (f != NULL) {
        rc = 98;
    }
    free(copy);
    return rc;
}

#define EXPECT_FAIL(b, ...)                                                                                  \
    do {                                                                                                     \
        struct err e_;                                                                                       \
        int rc_ = open_bytes((b)->p, (b)->n, &e_);                                                           \
        CHECK_MSG(rc_ == -1, "expected failure, got %d", rc_);                                               \
        const char *subs_[] = {__VA_ARGS__, NULL};                                                           \
        for (int k_ = 0; subs_[k_]; k_++)                                                                    \
            CHECK_MSG(strstr(e_.msg, subs_[k_]), "message \"%.600s\" lacks \"%.200s\"", e_.msg, subs_[k_]);  \
        free((b)->p);                                                                                        \
    } while (0)

/* ---- writer round trip ---- */

static int fill_pattern(void *user, uint64_t ti, void *dst, uint64_t n, struct err *e)
{
    (void)user;
    (void)e;
    uint8_t *d = dst;
    for (uint64_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i * 31 + ti * 7 + 1);
    return 0;
}

/* A writer holding one key of every value type and tensors of several types; data from `blob` or fill. */
static gguf_writer *sample_writer(const uint8_t *blob, struct err *e)
{
    gguf_writer *w = gguf_writer_init();
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -5000000000LL;
    double f64 = 3.25e100;
    int ok = gguf_writer_set_val(w, "t.u8", GGUF_VTYPE_UINT8, &u8, e) == 0 &&
             gguf_writer_set_val(w, "t.i8", GGUF_VTYPE_INT8, &i8, e) == 0 &&
             gguf_writer_set_val(w, "t.u16", GGUF_VTYPE_UINT16, &u16, e) == 0 &&
             gguf_writer_set_val(w, "t.i16", GGUF_VTYPE_INT16, &i16, e) == 0 &&
             gguf_writer_set_u32(w, "t.u32", 4000000000u, e) == 0 &&
             gguf_writer_set_i32(w, "t.i32", -2000000000, e) == 0 &&
             gguf_writer_set_f32(w, "t.f32", 0.125f, e) == 0 &&
             gguf_writer_set_bool(w, "t.bool", 1, e) == 0 && gguf_writer_set_bool(w, "t.bool0", 0, e) == 0 &&
             gguf_writer_set_str(w, "t.str", "héllo\0x", 8, e) == 0 &&
             gguf_writer_set_str(w, "t.empty", "", 0, e) == 0 &&
             gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull, e) == 0 &&
             gguf_writer_set_val(w, "t.i64", GGUF_VTYPE_INT64, &i64, e) == 0 &&
             gguf_writer_set_val(w, "t.f64", GGUF_VTYPE_FLOAT64, &f64, e) == 0;
    int32_t ints[5] = {1, -2, 3, -4, 5};
    float floats[3] = {0.5f, -1.5f, 1e30f};
    uint8_t bools[4] = {1, 0, 0, 1};
    struct gguf_str strs[4] = {{"a", 1}, {"", 0}, {"<0x0A>", 6}, {"\xe4\xbd\xa0", 3}};
    ok = ok && gguf_writer_set_arr(w, "a.i32", GGUF_VTYPE_INT32, ints, 5, e) == 0 &&
         gguf_writer_set_arr(w, "a.f32", GGUF_VTYPE_FLOAT32, floats, 3, e) == 0 &&
         gguf_writer_set_arr(w, "a.bool", GGUF_VTYPE_BOOL, bools, 4, e) == 0 &&
         gguf_writer_set_arr(w, "a.empty", GGUF_VTYPE_UINT64, NULL, 0, e) == 0 &&
         gguf_writer_set_arr_str(w, "a.str", strs, 4, e) == 0;
    uint64_t ne1[1] = {7}, ne2[2] = {64, 3}, ne3[3] = {256, 2, 2}, ne4[4] = {2, 3, 4, 5};
    ok = ok && gguf_writer_add_tensor(w, "f32.vec", GGUF_DTYPE_F32, 1, ne1, blob, e) == 0 &&
         gguf_writer_add_tensor(w, "f16.mat", GGUF_DTYPE_F16, 2, ne2, blob ? blob + 100 : NULL, e) == 0 &&
         gguf_writer_add_tensor(w, "q8.mat", GGUF_DTYPE_Q8_0, 2, ne2, blob ? blob + 1000 : NULL, e) == 0 &&
         gguf_writer_add_tensor(w, "q4k.cube", GGUF_DTYPE_Q4_K, 3, ne3, blob ? blob + 2000 : NULL, e) == 0 &&
         gguf_writer_add_tensor(w, "i32.4d", GGUF_DTYPE_I32, 4, ne4, blob ? blob + 3000 : NULL, e) == 0;
    if (!ok) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

static void check_sample(const gguf_file *f, const uint8_t *blob, int *ok_out)
{
    struct err e;
    int64_t v;
    double d;
    int b;
    struct gguf_str s;
    int ok = 1;
#define R(c)                                                                                                 \
    do {                                                                                                     \
        if (!(c)) {                                                                                          \
            printf("  check failed: %s (line %d)\n", #c, __LINE__);                                          \
            ok = 0;                                                                                          \
        }                                                                                                    \
    } while (0)
    R(gguf_version(f) == 3 && gguf_alignment(f) == 32 && gguf_n_kv(f) == 19 && gguf_n_tensors(f) == 5);
    R(gguf_get_int(f, "t.u8", &v, &e) == 0 && v == 200);
    R(gguf_get_int(f, "t.i8", &v, &e) == 0 && v == -100);
    R(gguf_get_int(f, "t.u16", &v, &e) == 0 && v == 60000);
    R(gguf_get_int(f, "t.i16", &v, &e) == 0 && v == -30000);
    R(gguf_get_int(f, "t.u32", &v, &e) == 0 && v == 4000000000LL);
    R(gguf_get_int(f, "t.i32", &v, &e) == 0 && v == -2000000000);
    R(gguf_get_int(f, "t.i64", &v, &e) == 0 && v == -5000000000LL);
    R(gguf_get_int(f, "t.u64", &v, &e) == -1 && strstr(e.msg, "t.u64") && strstr(e.msg, "int64"));
    R(gguf_get_float(f, "t.f32", &d, &e) == 0 && d == 0.125);
    R(gguf_get_float(f, "t.f64", &d, &e) == 0 && d == 3.25e100);
    R(gguf_get_float(f, "t.i16", &d, &e) == 0 && d == -30000.0);
    R(gguf_get_bool(f, "t.bool", &b, &e) == 0 && b == 1);
    R(gguf_get_bool(f, "t.bool0", &b, &e) == 0 && b == 0);
    R(gguf_get_str(f, "t.str", &s, &e) == 0 && s.len == 8 && memcmp(s.ptr, "héllo\0x", 8) == 0);
    char buf[64];
    R(gguf_get_cstr(f, "t.str", buf, sizeof buf, &e) == -1 && strstr(e.msg, "NUL"));
    R(gguf_get_cstr(f, "t.empty", buf, sizeof buf, &e) == 0 && buf[0] == '\0');
    R(gguf_get_str(f, "t.u8", &s, &e) == -1 && strstr(e.msg, "'t.u8'") && strstr(e.msg, "UINT8") &&
      strstr(e.msg, "STRING"));
    R(gguf_get_int(f, "nope", &v, &e) == -1 && strstr(e.msg, "'nope'"));
    R(gguf_get_bool(f, "t.u8", &b, &e) == -1 && strstr(e.msg, "BOOL"));
    R(gguf_get_float(f, "t.str", &d, &e) == -1 && strstr(e.msg, "t.str"));
    int64_t i = gguf_find_kv(f, "a.i32");
    R(i >= 0 && gguf_kv_type(f, i) == GGUF_VTYPE_ARRAY && gguf_kv_arr_type(f, i) == GGUF_VTYPE_INT32 &&
      gguf_kv_arr_n(f, i) == 5);
    int32_t ints[5];
    if (i >= 0 && gguf_kv_arr_data(f, i)) memcpy(ints, gguf_kv_arr_data(f, i), sizeof ints);
    R(i >= 0 && ints[1] == -2 && ints[4] == 5);
    i = gguf_find_kv(f, "a.f32");
    float fl[3] = {0};
    if (i >= 0 && gguf_kv_arr_data(f, i)) memcpy(fl, gguf_kv_arr_data(f, i), sizeof fl);
    R(fl[2] == 1e30f && fl[1] == -1.5f);
    i = gguf_find_kv(f, "a.bool");
    R(i >= 0 && gguf_kv_arr_n(f, i) == 4 && ((const uint8_t *)gguf_kv_arr_data(f, i))[3] == 1);
    i = gguf_find_kv(f, "a.empty");
    R(i >= 0 && gguf_kv_arr_n(f, i) == 0 && gguf_kv_arr_type(f, i) == GGUF_VTYPE_UINT64);
    i = gguf_find_kv(f, "a.str");
    R(i >= 0 && gguf_kv_arr_type(f, i) == GGUF_VTYPE_STRING && gguf_kv_arr_n(f, i) == 4 &&
      gguf_kv_arr_data(f, i) == NULL);
    if (i >= 0) {
        struct gguf_str s2 = gguf_kv_arr_str(f, i, 2), s1 = gguf_kv_arr_str(f, i, 1),
                        s3 = gguf_kv_arr_str(f, i, 3), sx = gguf_kv_arr_str(f, i, 4);
        R(s2.len == 6 && memcmp(s2.ptr, "<0x0A>", 6) == 0 && s1.len == 0 && s3.len == 3 &&
          memcmp(s3.ptr, "\xe4\xbd\xa0", 3) == 0 && sx.ptr == NULL);
    }
    /* keys in insertion order */
    R(strcmp(gguf_kv_key(f, 0), "t.u8") == 0 && strcmp(gguf_kv_key(f, 18), "a.str") == 0);
    const struct gguf_tensor *t = gguf_find_tensor(f, "q4k.cube");
    R(t && t->type == GGUF_DTYPE_Q4_K && t->n_dims == 3 && t->ne[0] == 256 && t->ne[2] == 2 &&
      t->ne[3] == 1 && t->n_elements == 1024 && t->n_bytes == 4 * 144 && t->offset % 32 == 0);
    t = gguf_find_tensor(f, "i32.4d");
    R(t && t->n_dims == 4 && t->ne[3] == 5 && t->n_bytes == 120 * 4);
    R(gguf_find_tensor(f, "missing") == NULL);
    const uint64_t src_off[5] = {0, 100, 1000, 2000, 3000};
    for (uint64_t k = 0; k < 5; k++) {
        t = gguf_tensor(f, k);
        if (blob) {
            R(memcmp(t->data, blob + src_off[k], t->n_bytes) == 0);
        } else {
            const uint8_t *dd = t->data;
            int same = 1;
            for (uint64_t j = 0; j < t->n_bytes; j++)
                same &= dd[j] == (uint8_t)(j * 31 + k * 7 + 1);
            R(same);
        }
    }
    R(gguf_check(f) == 0);
#undef R
    *ok_out = ok;
}

TEST(writer_round_trip_memory)
{
    uint8_t blob[8192];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)(i * 13 + 5);
    struct err e;
    gguf_writer *w = sample_writer(blob, &e);
    CHECK_MSG(w, "%.900s", e.msg);
    void *buf;
    size_t n;
    CHECK_MSG(gguf_writer_write_mem(w, &buf, &n, NULL, NULL, &e) == 0, "%.900s", e.msg);
    gguf_writer_free(w);
    gguf_file *f;
    CHECK_MSG(gguf_open_memory(buf, n, &f, &e) == 0, "%.900s", e.msg);
    int ok = 0;
    check_sample(f, blob, &ok);
    CHECK_STR(gguf_path(f), "");
    CHECK_EQ_INT(gguf_file_size(f), n);
    gguf_close(f);
    free(buf);
    CHECK(ok);
}

TEST(writer_round_trip_file_with_fill)
{
    struct err e;
    gguf_writer *w = sample_writer(NULL, &e);
    CHECK_MSG(w, "%.900s", e.msg);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    int rc = gguf_writer_write(w, path, fill_pattern, NULL, &e);
    gguf_writer_free(w);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    gguf_file *f;
    rc = gguf_open(path, &f, &e);
    unlink(path);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    int ok = 0;
    check_sample(f, NULL, &ok);
    gguf_close(f);
    CHECK(ok);
}

/* Two writers with the same content produce identical bytes; copy_kv copies every type incl. string
 * arrays; general.alignment is honoured. */
TEST(writer_copy_kv_and_alignment)
{
    struct err e;
    gguf_writer *w = sample_writer(NULL, &e);
    CHECK(w);
    void *buf;
    size_t n;
    CHECK(gguf_writer_write_mem(w, &buf, &n, fill_pattern, NULL, &e) == 0);
    gguf_writer_free(w);
    gguf_file *src;
    CHECK(gguf_open_memory(buf, n, &src, &e) == 0);

    gguf_writer *w2 = gguf_writer_init();
    CHECK(gguf_writer_set_u32(w2, "general.alignment", 48, &e) == -1 && strstr(e.msg, "power of two"));
    CHECK(gguf_writer_set_u32(w2, "general.alignment", 64, &e) == 0);
    CHECK(gguf_writer_copy_kv(w2, src, "a.", &e) == 0);
    CHECK(gguf_writer_copy_kv(w2, src, "t.", &e) == 0);
    CHECK(gguf_writer_copy_kv(w2, src, "t.", &e) == -1 && strstr(e.msg, "duplicate key 't.u8'"));
    CHECK(gguf_writer_copy_kv_at(w2, src, gguf_n_kv(src), &e) == -1 && strstr(e.msg, "no metadata key"));
    CHECK(gguf_writer_copy_kv_at(w2, src, 0, &e) == -1 && strstr(e.msg, "duplicate key"));
    uint64_t ne[2] = {32, 3};
    CHECK(gguf_writer_add_tensor(w2, "x", GGUF_DTYPE_Q4_0, 2, ne, NULL, &e) == 0);
    CHECK(gguf_writer_add_tensor(w2, "x", GGUF_DTYPE_Q4_0, 2, ne, NULL, &e) == -1 && strstr(e.msg, "'x'"));
    CHECK(gguf_writer_add_tensor(w2, "y", GGUF_DTYPE_F32, 2, ne, NULL, &e) == 0);
    uint64_t bad[2] = {33, 1};
    CHECK(gguf_writer_add_tensor(w2, "z", GGUF_DTYPE_Q8_0, 2, bad, NULL, &e) == -1 &&
          strstr(e.msg, "block size"));
    CHECK(gguf_writer_add_tensor(w2, "z", (enum gguf_dtype)4, 2, bad, NULL, &e) == -1 &&
          strstr(e.msg, "unsupported tensor type id 4"));
    CHECK(gguf_writer_set_u32(w2, "general.alignment", 16, &e) == -1);
    void *buf2;
    size_t n2;
    CHECK(gguf_writer_write_mem(w2, &buf2, &n2, NULL, NULL, &e) == -1 && strstr(e.msg, "'x'") &&
          strstr(e.msg, "no fill"));
    CHECK_MSG(gguf_writer_write_mem(w2, &buf2, &n2, fill_pattern, NULL, &e) == 0, "%.900s", e.msg);
    gguf_writer_free(w2);
    gguf_file *f;
    CHECK_MSG(gguf_open_memory(buf2, n2, &f, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(gguf_alignment(f), 64);
    CHECK_EQ_INT(gguf_n_kv(f), gguf_n_kv(src) + 1);
    for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *k = gguf_kv_key(src, i);
        int64_t j = gguf_find_kv(f, k);
        CHECK_MSG(j >= 0, "missing %.200s", k);
        CHECK_EQ_INT(gguf_kv_type(f, j), gguf_kv_type(src, i));
        CHECK_EQ_INT(gguf_kv_arr_n(f, j), gguf_kv_arr_n(src, i));
        for (uint64_t x = 0; x < gguf_kv_arr_n(src, i) && gguf_kv_arr_type(src, i) == GGUF_VTYPE_STRING;
             x++) {
            struct gguf_str a = gguf_kv_arr_str(src, i, x), b = gguf_kv_arr_str(f, j, x);
            CHECK(a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0);
        }
    }
    const struct gguf_tensor *y = gguf_find_tensor(f, "y");
    CHECK(y && y->offset % 64 == 0 && y->offset >= 3 * 18);
    CHECK(((const uint8_t *)y->data)[5] == (uint8_t)(5 * 31 + 7 + 1));
    gguf_close(f);
    gguf_close(src);
    free(buf);
    free(buf2);
}

/* A tensor larger than the writer's 16 MiB scratch is filled in consecutive chunks of whole rows. */
struct chunk_state {
    uint64_t calls, bytes, row_bytes, bad;
};
static int fill_chunks(void *user, uint64_t ti, void *dst, uint64_t n, struct err *e)
{
    (void)ti;
    (void)e;
    struct chunk_state *st = user;
    if (n % st->row_bytes || n > (16u << 20)) st->bad++;
    uint32_t *d = dst;
    for (uint64_t i = 0; i < n / 4; i++)
        d[i] = (uint32_t)(st->bytes / 4 + i);
    st->bytes += n;
    st->calls++;
    return 0;
}

TEST(writer_streams_large_tensor_in_row_chunks)
{
    struct err e;
    gguf_writer *w = gguf_writer_init();
    uint64_t ne[2] = {1000, 5000}; /* 20 MB of F32 */
    CHECK(gguf_writer_add_tensor(w, "big", GGUF_DTYPE_F32, 2, ne, NULL, &e) == 0);
    struct chunk_state st = {0, 0, 4000, 0};
    void *buf;
    size_t n;
    CHECK_MSG(gguf_writer_write_mem(w, &buf, &n, fill_chunks, &st, &e) == 0, "%.900s", e.msg);
    gguf_writer_free(w);
    CHECK_EQ_INT(st.calls, 2);
    CHECK_EQ_INT(st.bad, 0);
    CHECK_EQ_INT(st.bytes, 20000000);
    gguf_file *f;
    CHECK(gguf_open_memory(buf, n, &f, &e) == 0);
    const uint32_t *d = gguf_tensor(f, 0)->data;
    CHECK(d[0] == 0 && d[4999999] == 4999999 && d[4194000] == 4194000);
    gguf_close(f);
    free(buf);
}

/* ---- real files ---- */

TEST(real_stories260k)
{
    struct err e;
    gguf_file *f;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("%.900s not found", path);
    CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
    CHECK(gguf_check(f) == 0);
    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK(strcmp(gguf_path(f), path) == 0);
    CHECK_EQ_INT(gguf_file_size(f), 1185376);
    int64_t v;
    CHECK(gguf_get_int(f, "llama.block_count", &v, &e) == 0 && v == 5);
    CHECK(gguf_get_int(f, "llama.embedding_length", &v, &e) == 0 && v == 64);
    CHECK(gguf_get_int(f, "llama.attention.head_count_kv", &v, &e) == 0 && v == 4);
    double eps;
    CHECK(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &eps, &e) == 0 &&
          fabs(eps - 1e-5) < 1e-9);
    char arch[32];
    CHECK(gguf_get_cstr(f, "general.architecture", arch, sizeof arch, &e) == 0);
    CHECK_STR(arch, "llama");
    CHECK(gguf_get_cstr(f, "general.architecture", arch, 5, &e) == -1 && strstr(e.msg, "does not fit"));
    int64_t ti = gguf_find_kv(f, "tokenizer.ggml.tokens");
    CHECK(ti >= 0 && gguf_kv_arr_type(f, ti) == GGUF_VTYPE_STRING);
    CHECK_EQ_INT(gguf_kv_arr_n(f, ti), 512);
    struct gguf_str s = gguf_kv_arr_str(f, ti, 1);
    CHECK(s.len == 3 && memcmp(s.ptr, "<s>", 3) == 0);
    CHECK_EQ_INT(gguf_n_tensors(f), 48);
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++)
        CHECK_EQ_INT(gguf_tensor(f, i)->type, GGUF_DTYPE_F32);
    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 512 && t->n_bytes == 64 * 512 * 4);
    CHECK(gguf_find_tensor(f, "blk.4.ffn_down.weight") != NULL);
    CHECK(gguf_find_tensor(f, "blk.5.ffn_down.weight") == NULL);
    gguf_close(f);
}

TEST(real_vocab_files)
{
    static const struct {
        const char *name;
        uint64_t n_tokens;
    } files[] = {{"llama-spm", 32000},
                 {"phi-3", 32064},
                 {"gpt-2", 50257},
                 {"falcon", 65024},
                 {"deepseek-llm", 102400}};
    int n_found = 0;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/vocab/ggml-vocab-%s.gguf", files[k].name);
        const char *path = test_shared(rel);
        if (access(path, R_OK) != 0) continue;
        n_found++;
        struct err e;
        gguf_file *f;
        CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
        CHECK(gguf_check(f) == 0);
        CHECK_EQ_INT(gguf_n_tensors(f), 0);
        int64_t ti = gguf_find_kv(f, "tokenizer.ggml.tokens");
        CHECK(ti >= 0);
        CHECK_EQ_INT(gguf_kv_arr_n(f, ti), files[k].n_tokens);
        char model[16];
        CHECK(gguf_get_cstr(f, "tokenizer.ggml.model", model, sizeof model, &e) == 0);
        CHECK(strcmp(model, "llama") == 0 || strcmp(model, "gpt2") == 0);
        int64_t mi = gguf_find_kv(f, "tokenizer.ggml.merges");
        CHECK((mi >= 0) == (strcmp(model, "gpt2") == 0));
        gguf_close(f);
    }
    if (!n_found) SKIP("no vocab files under %.900s", test_shared("testdata/vocab"));
}

TEST(open_missing_and_empty_files)
{
    struct err e;
    gguf_file *f = (gguf_file *)1;
    CHECK(gguf_open("/nonexistent/x.gguf", &f, &e) == -1 && f == NULL &&
          strstr(e.msg, "/nonexistent/x.gguf"));
    CHECK(gguf_open("/tmp", &f, &e) == -1 && strstr(e.msg, "not a regular file"));
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(gguf_open(path, &f, &e) == -1 && strstr(e.msg, "empty"));
    FILE *fp = fopen(path, "wb");
    fputs("GGUF\x03", fp);
    fclose(fp);
    CHECK(gguf_open(path, &f, &e) == -1 && strstr(e.msg, path) && strstr(e.msg, "version"));
    unlink(path);
    CHECK(open_bytes("", 0, &e) == -1 && strstr(e.msg, "too short"));
}

/* ---- hostile files ---- */

/* Every proper prefix of a valid file with string arrays and tensors fails cleanly. */
TEST(truncation_at_every_byte)
{
    struct err e;
    gguf_writer *w = gguf_writer_init();
    struct gguf_str strs[3] = {{"ab", 2}, {"", 0}, {"xyz", 3}};
    uint16_t u16 = 7;
    CHECK(gguf_writer_set_str(w, "general.architecture", "llama", 5, &e) == 0);
    CHECK(gguf_writer_set_arr_str(w, "tok", strs, 3, &e) == 0);
    CHECK(gguf_writer_set_val(w, "u16", GGUF_VTYPE_UINT16, &u16, &e) == 0);
    float fl[2] = {1, 2};
    CHECK(gguf_writer_set_arr(w, "fl", GGUF_VTYPE_FLOAT32, fl, 2, &e) == 0);
    uint64_t ne[2] = {32, 2};
    CHECK(gguf_writer_add_tensor(w, "a", GGUF_DTYPE_Q8_0, 2, ne, NULL, &e) == 0);
    CHECK(gguf_writer_add_tensor(w, "b", GGUF_DTYPE_F16, 1, ne, NULL, &e) == 0);
    void *buf;
    size_t n;
    CHECK(gguf_writer_write_mem(w, &buf, &n, fill_pattern, NULL, &e) == 0);
    gguf_writer_free(w);
    CHECK(open_bytes(buf, n, &e) == 0);
    for (size_t k = 0; k < n; k++) {
        int rc = open_bytes(buf, k, &e);
        if (rc != -1 || e.msg[0] == '\0') {
            free(buf);
            CHECK_MSG(0, "prefix of %zu/%zu bytes: rc %d", k, n, rc);
        }
    }
    free(buf);
}

TEST(bad_magic_and_version)
{
    struct bb b = {0};
    bb_bytes(&b, "GGML", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "bad magic", "byte 0");
    b = (struct bb){0};
    bb_bytes(&b, "GGUF", 4);
    bb_u32(&b, 1);
    bb_u32(&b, 0);
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, "version 1", "not supported");
    b = (struct bb){0};
    bb_bytes(&b, "GGUF", 4);
    bb_u32(&b, 0x03000000);
    bb_u64(&b, 0);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "unsupported GGUF version 50331648");
    /* version 2 with the same layout is accepted */
    b = (struct bb){0};
    bb_bytes(&b, "GGUF", 4);
    bb_u32(&b, 2);
    bb_u64(&b, 0);
    bb_u64(&b, 1);
    bb_kv_u32(&b, "x", 1);
    struct err e;
    CHECK_MSG(open_bytes(b.p, b.n, &e) == 0, "%.900s", e.msg);
    free(b.p);
}

TEST(huge_counts)
{
    struct bb b = {0};
    bb_hdr(&b, 1ull << 60, 0);
    bb_finish(&b, 32, 64);
    EXPECT_FAIL(&b, "tensor count 1152921504606846976", "byte 8");
    b = (struct bb){0};
    bb_hdr(&b, 0, UINT64_MAX);
    bb_finish(&b, 32, 64);
    EXPECT_FAIL(&b, "metadata count", "byte 16");
    /* a count that is plausible per-byte but still larger than what follows */
    b = (struct bb){0};
    bb_hdr(&b, 0, 3);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 2);
    bb_bytes(&b, "\0\0\0\0\0\0\0\0\0\0\0\0", 12); /* empty key, type UINT8, no value */
    EXPECT_FAIL(&b, "key '' at byte 70", "truncated UINT8 value");
}

TEST(huge_string_and_array_lengths)
{
    struct bb b = {0};
    bb_hdr(&b, 0, 1);
    bb_u64(&b, 1ull << 62); /* key length */
    bb_bytes(&b, "abcdefghijklmnop", 16);
    EXPECT_FAIL(&b, "key #0 at byte 24", "string length 4611686018427387904");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, UINT64_MAX);
    bb_bytes(&b, "abcdefghijklmnop", 16);
    EXPECT_FAIL(&b, "key 'general.name'", "string length 18446744073709551615");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "arr");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_UINT32);
    bb_u64(&b, (1ull << 62) + 1); /* * 4 overflows to 4 */
    bb_bytes(&b, "abcdefghijklmnop", 16);
    EXPECT_FAIL(&b, "key 'arr' at byte 39", "array of 4611686018427387905 UINT32");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, 1ull << 40);
    bb_bytes(&b, "abcdefghijklmnop", 16);
    EXPECT_FAIL(&b, "tokenizer.ggml.tokens", "does not fit");

    /* a string element that is too long */
    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "toks");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, 100);
    bb_bytes(&b, "short", 5);
    EXPECT_FAIL(&b, "key 'toks'", "element 1", "string length 100");
}

TEST(bad_value_types)
{
    struct bb b = {0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "weird");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, "key 'weird' at byte 37", "unknown value type 13");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "nest");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, GGUF_VTYPE_UINT8);
    bb_u64(&b, 1);
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, "key 'nest'", "nested arrays");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "arr");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, 77);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "key 'arr'", "unknown array element type 77");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_u64(&b, 3);
    bb_bytes(&b, "a\0b", 3);
    bb_u32(&b, GGUF_VTYPE_UINT8);
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, "a\\x00b", "NUL");
}

TEST(duplicate_key_and_alignment)
{
    struct bb b = {0};
    bb_hdr(&b, 0, 3);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 1);
    bb_kv_u32(&b, "a", 2);
    EXPECT_FAIL(&b, "key 'a' at byte 58", "duplicate key (first at byte 24)");

    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_kv_u32(&b, "general.alignment", 48);
    EXPECT_FAIL(&b, "general.alignment", "48 is not a power of two");
    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_kv_u32(&b, "general.alignment", 0);
    EXPECT_FAIL(&b, "general.alignment", "not a power of two");
    b = (struct bb){0};
    bb_hdr(&b, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_VTYPE_UINT64);
    bb_u64(&b, 32);
    EXPECT_FAIL(&b, "general.alignment", "UINT64", "expected UINT32");

    /* a valid non-default alignment moves the data section */
    b = (struct bb){0};
    bb_hdr(&b, 1, 1);
    bb_kv_u32(&b, "general.alignment", 256);
    uint64_t ne[1] = {4};
    bb_tensor(&b, "t", 1, ne, GGUF_DTYPE_F32, 0);
    bb_finish(&b, 256, 16);
    b.p[256] = 0x42;
    gguf_file *f;
    struct err e;
    CHECK_MSG(gguf_open_memory(b.p, b.n, &f, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(gguf_alignment(f), 256);
    CHECK_EQ_INT(((const uint8_t *)gguf_tensor(f, 0)->data)[0], 0x42);
    gguf_close(f);
    free(b.p);
}

/* A file with one tensor info built from the given fields, data section of `data` bytes. */
static struct bb one_tensor(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                            uint64_t off, size_t data)
{
    struct bb b = {0};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, name, n_dims, ne, type, off);
    bb_finish(&b, 32, data);
    return b;
}

TEST(bad_tensor_infos)
{
    uint64_t ne[5] = {32, 2, 2, 2, 2};
    struct bb b = one_tensor("blk.0.attn_q.weight", 5, ne, GGUF_DTYPE_F32, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'blk.0.attn_q.weight' at byte 51", "n_dims 5");
    b = one_tensor("t", 0, ne, GGUF_DTYPE_F32, 0, 4096);
    EXPECT_FAIL(&b, "tensor 't'", "n_dims 0");

    uint64_t zero[2] = {32, 0};
    b = one_tensor("z", 2, zero, GGUF_DTYPE_F32, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'z' at byte 45", "dimension 1 is 0");

    uint64_t big[3] = {1ull << 32, 1ull << 32, 1ull << 32};
    b = one_tensor("ovf", 3, big, GGUF_DTYPE_F32, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'ovf'", "overflows at dimension 1");
    uint64_t big2[2] = {1ull << 62, 4};
    b = one_tensor("ovf2", 2, big2, GGUF_DTYPE_F32, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'ovf2'", "overflow");
    /* element count fits, bytes do not */
    uint64_t big3[2] = {1ull << 31, 1ull << 31};
    b = one_tensor("bytes", 2, big3, GGUF_DTYPE_F64, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'bytes'", "overflow");

    uint64_t ne2[2] = {32, 2};
    b = one_tensor("q", 2, ne2, 4, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'q'", "unsupported tensor type id 4");
    b = one_tensor("q", 2, ne2, 31, 0, 4096);
    EXPECT_FAIL(&b, "unsupported tensor type id 31");
    b = one_tensor("mx", 2, ne2, 39, 0, 4096); /* MXFP4: a ggml type nightshift has no row for */
    EXPECT_FAIL(&b, "tensor 'mx'", "unsupported tensor type id 39");
    b = one_tensor("q", 2, ne2, 1000000, 0, 4096);
    EXPECT_FAIL(&b, "unsupported tensor type id 1000000");

    uint64_t ne48[2] = {48, 2};
    b = one_tensor("rows", 2, ne48, GGUF_DTYPE_Q4_0, 0, 4096);
    EXPECT_FAIL(&b, "tensor 'rows'", "row length 48 is not a multiple of the Q4_0 block size 32");
    uint64_t ne300[1] = {300};
    b = one_tensor("k", 1, ne300, GGUF_DTYPE_Q6_K, 0, 4096);
    EXPECT_FAIL(&b, "Q6_K block size 256");

    b = one_tensor("blk.0.attn_q.weight", 2, ne2, GGUF_DTYPE_F32, 99, 4096);
    EXPECT_FAIL(&b, "tensor 'blk.0.attn_q.weight' at byte 75: offset 99 not aligned to 32");
    b = one_tensor("far", 2, ne2, GGUF_DTYPE_F32, 1ull << 40, 4096);
    EXPECT_FAIL(&b, "tensor 'far' at byte 59", "past the end");
    b = one_tensor("wrap", 2, ne2, GGUF_DTYPE_F32, UINT64_MAX - 31, 4096);
    EXPECT_FAIL(&b, "tensor 'wrap'", "past the end");
    b = one_tensor("edge", 2, ne2, GGUF_DTYPE_F32, 0, 255); /* needs 256 */
    EXPECT_FAIL(&b, "tensor 'edge'", "past the end");
    b = one_tensor("edge", 2, ne2, GGUF_DTYPE_F32, 0, 256);
    struct err e;
    CHECK_MSG(open_bytes(b.p, b.n, &e) == 0, "%.900s", e.msg);
    free(b.p);
    /* the data section itself starts past the end (header not padded) */
    b = (struct bb){0};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 1, ne2, GGUF_DTYPE_F32, 0);
    EXPECT_FAIL(&b, "data section", "past the end");
}

TEST(overlap_and_duplicate_tensors)
{
    uint64_t ne[1] = {16}; /* 64 bytes of F32 */
    struct bb b = {0};
    bb_hdr(&b, 3, 0);
    bb_tensor(&b, "c", 1, ne, GGUF_DTYPE_F32, 128);
    bb_tensor(&b, "a", 1, ne, GGUF_DTYPE_F32, 0);
    bb_tensor(&b, "b", 1, ne, GGUF_DTYPE_F32, 32); /* overlaps a */
    bb_finish(&b, 32, 256);
    EXPECT_FAIL(&b, "tensor 'a' at byte 82: data [0, 64) overlaps tensor 'b' (at byte 115");

    b = (struct bb){0};
    bb_hdr(&b, 3, 0);
    bb_tensor(&b, "c", 1, ne, GGUF_DTYPE_F32, 128);
    bb_tensor(&b, "a", 1, ne, GGUF_DTYPE_F32, 0);
    bb_tensor(&b, "b", 1, ne, GGUF_DTYPE_F32, 64); /* touching is fine */
    bb_finish(&b, 32, 256);
    struct err e;
    CHECK_MSG(open_bytes(b.p, b.n, &e) == 0, "%.900s", e.msg);
    free(b.p);

    b = (struct bb){0};
    bb_hdr(&b, 2, 0);
    bb_tensor(&b, "same", 1, ne, GGUF_DTYPE_F32, 0);
    bb_tensor(&b, "same", 1, ne, GGUF_DTYPE_F32, 64);
    bb_finish(&b, 32, 256);
    EXPECT_FAIL(&b, "tensor 'same' at byte 60", "duplicate tensor name");

    b = (struct bb){0};
    bb_hdr(&b, 2, 0);
    bb_tensor(&b, "x", 1, ne, GGUF_DTYPE_F32, 64);
    bb_tensor(&b, "y", 1, ne, GGUF_DTYPE_F32, 64);
    bb_finish(&b, 32, 256);
    EXPECT_FAIL(&b, "overlaps");
}

/* Many tensors and keys: the duplicate checks and string table stay linear. */
TEST(many_tensors_and_strings)
{
    struct err e;
    gguf_writer *w = gguf_writer_init();
    enum { N_STR = 200000, N_T = 2000 };
    struct gguf_str *strs = malloc(N_STR * sizeof *strs);
    char *pool = malloc(N_STR * 8);
    for (int i = 0; i < N_STR; i++) {
        int l = snprintf(pool + 8 * i, 8, "%d", i);
        strs[i] = (struct gguf_str){pool + 8 * i, (uint64_t)l};
    }
    CHECK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, N_STR, &e) == 0);
    free(strs);
    free(pool);
    uint64_t ne[1] = {8};
    for (int i = 0; i < N_T; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        CHECK(gguf_writer_add_tensor(w, name, GGUF_DTYPE_F32, 1, ne, NULL, &e) == 0);
    }
    void *buf;
    size_t n;
    CHECK(gguf_writer_write_mem(w, &buf, &n, fill_pattern, NULL, &e) == 0);
    gguf_writer_free(w);
    gguf_file *f;
    CHECK_MSG(gguf_open_memory(buf, n, &f, &e) == 0, "%.900s", e.msg);
    int64_t ti = gguf_find_kv(f, "tokenizer.ggml.tokens");
    struct gguf_str s = gguf_kv_arr_str(f, ti, 123456);
    CHECK(s.len == 6 && memcmp(s.ptr, "123456", 6) == 0);
    CHECK(gguf_find_tensor(f, "blk.1999.w") == gguf_tensor(f, 1999));
    CHECK(gguf_check(f) == 0);
    gguf_close(f);
    free(buf);
}

TEST(dtype_table)
{
    CHECK_STR(gguf_dtype_info(GGUF_DTYPE_Q4_K)->name, "Q4_K");
    CHECK_EQ_INT(gguf_dtype_info(GGUF_DTYPE_Q6_K)->block_bytes, 210);
    CHECK_EQ_INT(gguf_dtype_info(GGUF_DTYPE_Q8_K)->block_bytes, 292);
    CHECK_EQ_INT(gguf_dtype_info(GGUF_DTYPE_BF16)->block_bytes, 2);
    CHECK(gguf_dtype_info(4) == NULL && gguf_dtype_info(5) == NULL && gguf_dtype_info(64) == NULL);
    CHECK_EQ_INT(gguf_row_bytes(GGUF_DTYPE_Q4_0, 4096), 128 * 18);
    CHECK_EQ_INT(gguf_row_bytes(GGUF_DTYPE_Q4_0, 4097), 0);
    CHECK_EQ_INT(gguf_row_bytes(GGUF_DTYPE_F16, 3), 6);
    CHECK_EQ_INT(gguf_row_bytes(99, 32), 0);
    CHECK_STR(gguf_vtype_name(GGUF_VTYPE_FLOAT64), "FLOAT64");
    CHECK_STR(gguf_vtype_name(13), "?");
}

int main(void)
{
    RUN(writer_round_trip_memory);
    RUN(writer_round_trip_file_with_fill);
    RUN(writer_copy_kv_and_alignment);
    RUN(writer_streams_large_tensor_in_row_chunks);
    RUN(real_stories260k);
    RUN(real_vocab_files);
    RUN(open_missing_and_empty_files);
    RUN(truncation_at_every_byte);
    RUN(bad_magic_and_version);
    RUN(huge_counts);
    RUN(huge_string_and_array_lengths);
    RUN(bad_value_types);
    RUN(duplicate_key_and_alignment);
    RUN(bad_tensor_infos);
    RUN(overlap_and_duplicate_tensors);
    RUN(many_tensors_and_strings);
    RUN(dtype_table);
    return test_summary();
}
