/* fuzz_gguf — libFuzzer target for the GGUF reader (and, for small inputs, the writer).
 *
 * For any input: gguf_open_memory either fails with a non-empty message, or succeeds and then every view it
 * hands out must be readable (ASan checks every touched byte lies in the input), the debug invariant check
 * must hold, every key and tensor must be findable by name, and copying all metadata + tensors through the
 * writer must produce a file that opens again with the same counts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint8_t sink;

static void touch(const void *p, uint64_t n)
{
    if (!n) return;
    const uint8_t *b = p;
    sink ^= b[0];
    sink ^= b[n - 1];
}

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static void walk(const gguf_file *f)
{
    struct err e;
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        REQUIRE(key && gguf_find_kv(f, key) == (int64_t)i);
        int64_t iv;
        double dv;
        int bv;
        struct gguf_str s;
        char buf[64];
        if (gguf_get_int(f, key, &iv, &e) == 0)
            sink ^= (uint8_t)iv;
        else
            REQUIRE(e.msg[0]);
        if (gguf_get_float(f, key, &dv, &e) == 0) sink ^= (uint8_t)(dv != dv);
        if (gguf_get_bool(f, key, &bv, &e) == 0) sink ^= (uint8_t)bv;
        if (gguf_get_str(f, key, &s, &e) == 0) touch(s.ptr, s.len);
        if (gguf_get_cstr(f, key, buf, sizeof buf, &e) == 0) REQUIRE(strlen(buf) < sizeof buf);
        if (gguf_kv_type(f, i) == GGUF_VTYPE_ARRAY) {
            uint64_t n = gguf_kv_arr_n(f, i);
            if (gguf_kv_arr_type(f, i) == GGUF_VTYPE_STRING) {
                REQUIRE(gguf_kv_arr_data(f, i) == NULL);
                for (uint64_t j = 0; j < n; j++) {
                    struct gguf_str a = gguf_kv_arr_str(f, i, j);
                    REQUIRE(a.ptr != NULL);
                    touch(a.ptr, a.len);
                }
                REQUIRE(gguf_kv_arr_str(f, i, n).ptr == NULL);
            } else if (n) {
                const uint8_t *d = gguf_kv_arr_data(f, i);
                REQUIRE(d != NULL);
                sink ^= d[0];
            }
        }
    }
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        REQUIRE(gguf_find_tensor(f, t->name) == t);
        REQUIRE(gguf_dtype_info(t->type) != NULL && t->n_bytes > 0);
        REQUIRE(gguf_row_bytes(t->type, t->ne[0]) > 0);
        touch(t->data, t->n_bytes);
    }
    REQUIRE(gguf_check(f) == 0);
}

/* Copies everything into a writer and re-reads the result. */
static void rewrite(const gguf_file *f)
{
    struct err e;
    gguf_writer *w = gguf_writer_init();
    if (!w) return;
    int ok = gguf_writer_copy_kv(w, f, "", &e) == 0;
    for (uint64_t i = 0; ok && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        ok = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &e) == 0;
    }
    REQUIRE(ok); /* whatever the reader accepts, the writer must accept */
    void *buf;
    size_t n;
    if (gguf_writer_write_mem(w, &buf, &n, NULL, NULL, &e) == 0) {
        gguf_file *g;
        REQUIRE(gguf_open_memory(buf, n, &g, &e) == 0);
        REQUIRE(gguf_n_kv(g) == gguf_n_kv(f) && gguf_n_tensors(g) == gguf_n_tensors(f));
        REQUIRE(gguf_alignment(g) == gguf_alignment(f));
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const struct gguf_tensor *a = gguf_tensor(f, i), *b = gguf_tensor(g, i);
            REQUIRE(a->n_bytes == b->n_bytes && memcmp(a->data, b->data, a->n_bytes) == 0);
        }
        gguf_close(g);
        free(buf);
    }
    gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *f = NULL;
    struct err e;
    e.msg[0] = '\0';
    if (gguf_open_memory(data, size, &f, &e) != 0) {
        REQUIRE(f == NULL && e.msg[0] != '\0');
        return 0;
    }
    walk(f);
    /* The writer's copy costs O(data + alignment padding): keep it to small tensors and alignments (a
     * valid file may ask for 2^31-byte alignment, which a faithful copy must pad to). */
    uint64_t total = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++)
        total += gguf_tensor(f, i)->n_bytes;
    if (total <= (1u << 20) && gguf_alignment(f) <= (1u << 16)) rewrite(f);
    gguf_close(f);
    return 0;
}
