/* gguf_write — the GGUF v3 writer (the API at the end of gguf.h): synth's random-weight models, test and
 * fuzz inputs, vocab-only files.
 *
 * Invariant of a gguf_writer: kvs[0..n_kv) have unique keys and tensors[0..n_tensors) unique names, each
 * set holding exactly those (kv_set / tensor_set: index + 1 per name); every tensor's offset is a multiple
 * of the alignment and at or after the end of the tensor before it (data_size = end of the last one);
 * alignment is a power of two and changes only while there are no tensors.
 *
 * Each metadata value is serialized when it is set (type + payload bytes, exactly as in the file), so
 * gguf_writer_write only concatenates. Tensors get their data offset when added. Keys and tensor names are
 * kept unique through one hash set per kind (open addressing over indices + 1, rebuilt at half load), so
 * adding n items is O(n).
 */
#include "gguf/gguf.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf/gguf_int.h"

#define GGUF_WRITER_SCRATCH (16u << 20) /* fill() chunk size bound, unless a single row is larger */

struct wkv {
    char *key;
    uint32_t type;
    uint8_t *payload; /* the value bytes after the type field */
    uint64_t n;
};

struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t n_bytes, offset, row_bytes;
};

struct wset {
    uint64_t *slots; /* index + 1, 0 = empty */
    uint64_t cap, n;
};

struct gguf_writer {
    struct wkv *kvs;
    uint64_t n_kv, cap_kv;
    struct wtensor *tensors;
    uint64_t n_tensors, cap_tensors;
    struct wset kv_set, tensor_set;
    uint64_t alignment;
    uint64_t data_size; /* end of the last tensor in the data section */
};

static const char *wname(const gguf_writer *w, int tensors, uint64_t i)
{
    return tensors ? w->tensors[i].name : w->kvs[i].key;
}

/* 1 if name is in the set; otherwise 0 (and, when insert_idx >= 0, inserts it); -1 on out-of-memory. */
static int wset_probe(gguf_writer *w, int tensors, const char *name, int64_t insert_idx)
{
    struct wset *s = tensors ? &w->tensor_set : &w->kv_set;
    if (insert_idx >= 0 && 2 * (s->n + 1) > s->cap) {
        uint64_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (uint64_t k = 0; k < s->cap; k++) {
            if (!s->slots[k]) continue;
            const char *nm = wname(w, tensors, s->slots[k] - 1);
            uint64_t h = XXH3_64bits(nm, strlen(nm)) & (cap - 1);
            while (slots[h])
                h = (h + 1) & (cap - 1);
            slots[h] = s->slots[k];
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    if (!s->cap) return 0;
    uint64_t h = XXH3_64bits(name, strlen(name)) & (s->cap - 1);
    while (s->slots[h]) {
        if (strcmp(wname(w, tensors, s->slots[h] - 1), name) == 0) return 1;
        h = (h + 1) & (s->cap - 1);
    }
    if (insert_idx >= 0) {
        s->slots[h] = (uint64_t)insert_idx + 1;
        s->n++;
    }
    return 0;
}

gguf_writer *gguf_writer_init(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].payload);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w->kv_set.slots);
    free(w->tensor_set.slots);
    free(w);
}

/* general.alignment must be a UINT32 power of two set before any tensor (tensor offsets use it); returns
 * the alignment in *a. */
static int check_alignment(const gguf_writer *w, uint32_t type, const uint8_t *payload, uint32_t *a,
                           struct err *e)
{
    if (type != GGUF_VTYPE_UINT32) return err_set(e, "gguf writer: general.alignment must be a UINT32");
    memcpy(a, payload, 4);
    if (*a == 0 || (*a & (*a - 1))) return err_set(e, "gguf writer: alignment %u is not a power of two", *a);
    if (w->n_tensors) return err_set(e, "gguf writer: general.alignment must be set before adding tensors");
    return 0;
}

/* Every setter ends here. Takes ownership of payload (freed on failure too). */
static int add_kv(gguf_writer *w, const char *key, uint32_t type, uint8_t *payload, uint64_t n, struct err *e)
{
    int is_alignment = strcmp(key, "general.alignment") == 0;
    uint32_t alignment = 0;
    if (is_alignment && check_alignment(w, type, payload, &alignment, e)) {
        free(payload);
        return -1;
    }
    if (wset_probe(w, 0, key, -1) == 1) {
        free(payload);
        return err_set(e, "gguf writer: duplicate key '%s'", key);
    }
    char *k = strdup(key);
    if (!k || gguf_grow((void **)&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof *w->kvs)) {
        free(k);
        free(payload);
        return err_set(e, "out of memory");
    }
    w->kvs[w->n_kv] = (struct wkv){k, type, payload, n};
    if (wset_probe(w, 0, key, (int64_t)w->n_kv) < 0) {
        free(k);
        free(payload);
        return err_set(e, "out of memory");
    }
    w->n_kv++;
    if (is_alignment) w->alignment = alignment;
    return 0;
}

static int add_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v, struct err *e)
{
    uint64_t n = gguf_vtype_size(type);
    uint8_t *p = malloc(n);
    if (!p) return err_set(e, "out of memory");
    memcpy(p, v, n);
    return add_kv(w, key, type, p, n, e);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, struct err *e)
{
    return add_scalar(w, key, GGUF_VTYPE_UINT32, &v, e);
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, struct err *e)
{
    return add_scalar(w, key, GGUF_VTYPE_INT32, &v, e);
}

int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, struct err *e)
{
    return add_scalar(w, key, GGUF_VTYPE_UINT64, &v, e);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v, struct err *e)
{
    return add_scalar(w, key, GGUF_VTYPE_FLOAT32, &v, e);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, int v, struct err *e)
{
    uint8_t b = v != 0;
    return add_scalar(w, key, GGUF_VTYPE_BOOL, &b, e);
}

int gguf_writer_set_val(gguf_writer *w, const char *key, enum gguf_vtype t, const void *v, struct err *e)
{
    if (!gguf_vtype_size(t))
        return err_set(e, "gguf writer: key '%s': %s is not a scalar type", key, gguf_vtype_name(t));
    return add_scalar(w, key, t, v, e);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s, uint64_t len, struct err *e)
{
    uint8_t *p = malloc(8 + len);
    if (!p) return err_set(e, "out of memory");
    memcpy(p, &len, 8);
    if (len) memcpy(p + 8, s, len);
    return add_kv(w, key, GGUF_VTYPE_STRING, p, 8 + len, e);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype t, const void *data, uint64_t n,
                        struct err *e)
{
    uint64_t esz = gguf_vtype_size(t), bytes;
    if (!esz)
        return err_set(e, "gguf writer: key '%s': arrays of %s need another setter", key, gguf_vtype_name(t));
    if (__builtin_mul_overflow(esz, n, &bytes) || bytes > SIZE_MAX - 12)
        return err_set(e, "gguf writer: key '%s': array too large", key);
    uint8_t *p = malloc(12 + bytes);
    if (!p) return err_set(e, "out of memory");
    uint32_t et = t;
    memcpy(p, &et, 4);
    memcpy(p + 4, &n, 8);
    if (bytes) memcpy(p + 12, data, bytes);
    return add_kv(w, key, GGUF_VTYPE_ARRAY, p, 12 + bytes, e);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const struct gguf_str *strs, uint64_t n,
                            struct err *e)
{
    uint64_t bytes = 12;
    for (uint64_t j = 0; j < n; j++)
        if (__builtin_add_overflow(bytes, 8 + strs[j].len, &bytes) || bytes > SIZE_MAX)
            return err_set(e, "gguf writer: key '%s': array too large", key);
    uint8_t *p = malloc(bytes), *q = p + 12;
    if (!p) return err_set(e, "out of memory");
    uint32_t et = GGUF_VTYPE_STRING;
    memcpy(p, &et, 4);
    memcpy(p + 4, &n, 8);
    for (uint64_t j = 0; j < n; j++) {
        memcpy(q, &strs[j].len, 8);
        if (strs[j].len) memcpy(q + 8, strs[j].ptr, strs[j].len);
        q += 8 + strs[j].len;
    }
    return add_kv(w, key, GGUF_VTYPE_ARRAY, p, bytes, e);
}

int gguf_writer_copy_kv_at(gguf_writer *w, const gguf_file *src, uint64_t i, struct err *e)
{
    if (i >= gguf_n_kv(src)) return err_set(e, "gguf writer: no metadata key %llu to copy", (unsigned long long)i);
    const char *key = gguf_kv_key(src, i);
    enum gguf_vtype type = gguf_kv_type(src, i), arr_type = gguf_kv_arr_type(src, i);
    uint64_t arr_n = gguf_kv_arr_n(src, i);
    if (type == GGUF_VTYPE_STRING) {
        struct gguf_str s = gguf_kv_str(src, i);
        return gguf_writer_set_str(w, key, s.ptr, s.len, e);
    }
    if (type == GGUF_VTYPE_ARRAY && arr_type == GGUF_VTYPE_STRING)
        return gguf_writer_set_arr_str(w, key, gguf_kv_arr_strs(src, i), arr_n, e);
    if (type == GGUF_VTYPE_ARRAY) return gguf_writer_set_arr(w, key, arr_type, gguf_kv_arr_data(src, i), arr_n, e);
    return gguf_writer_set_val(w, key, type, gguf_kv_val(src, i), e);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, const char *prefix, struct err *e)
{
    size_t pl = strlen(prefix);
    for (uint64_t i = 0; i < gguf_n_kv(src); i++)
        if (strncmp(gguf_kv_key(src, i), prefix, pl) == 0 && gguf_writer_copy_kv_at(w, src, i, e)) return -1;
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum gguf_dtype t, uint32_t n_dims,
                           const uint64_t *ne, const void *data, struct err *e)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info(t);
    if (!ti) return err_set(e, "gguf writer: tensor '%s': unsupported tensor type id %u", name, (unsigned)t);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(e, "gguf writer: tensor '%s': n_dims %u is not in 1..%d", name, n_dims, GGUF_MAX_DIMS);
    struct wtensor wt = {0};
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        wt.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > INT64_MAX || __builtin_mul_overflow(n_el, ne[d], &n_el) || n_el > INT64_MAX)
            return err_set(e, "gguf writer: tensor '%s': bad dimension %u (%llu)", name, d,
                           (unsigned long long)ne[d]);
        wt.ne[d] = ne[d];
    }
    if (ne[0] % ti->block_size)
        return err_set(e,
                       "gguf writer: tensor '%s': row length %llu is not a multiple of the %s block size %u",
                       name, (unsigned long long)ne[0], ti->name, ti->block_size);
    if (wset_probe(w, 1, name, -1) == 1) return err_set(e, "gguf writer: duplicate tensor '%s'", name);
    wt.type = t;
    wt.n_dims = n_dims;
    wt.data = data;
    wt.row_bytes = gguf_row_bytes(t, ne[0]);
    if (__builtin_mul_overflow(n_el / ti->block_size, (uint64_t)ti->block_bytes, &wt.n_bytes))
        return err_set(e, "gguf writer: tensor '%s': byte size overflows", name);
    wt.offset = (w->data_size + w->alignment - 1) / w->alignment * w->alignment;
    wt.name = strdup(name);
    if (!wt.name || gguf_grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof *w->tensors)) {
        free(wt.name);
        return err_set(e, "out of memory");
    }
    w->tensors[w->n_tensors] = wt;
    if (wset_probe(w, 1, wt.name, (int64_t)w->n_tensors) < 0) {
        free(wt.name);
        return err_set(e, "out of memory");
    }
    w->n_tensors++;
    w->data_size = wt.offset + wt.n_bytes;
    return 0;
}

/* Output: a FILE or a preallocated memory buffer of the exact size. */
struct sink {
    FILE *fp;
    uint8_t *mem;
    uint64_t pos;
};

static int sink_write(struct sink *s, const void *p, uint64_t n, struct err *e)
{
    if (!n) return 0;
    if (s->fp) {
        if (fwrite(p, 1, n, s->fp) != n)
            return err_set(e, "write failed at byte %llu: %s", (unsigned long long)s->pos, strerror(errno));
    } else {
        memcpy(s->mem + s->pos, p, n);
    }
    s->pos += n;
    return 0;
}

static int sink_pad(struct sink *s, uint64_t alignment, struct err *e)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - s->pos % alignment) % alignment;
    while (pad) {
        uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
        if (sink_write(s, zeros, k, e)) return -1;
        pad -= k;
    }
    return 0;
}

static uint64_t header_bytes(const gguf_writer *w)
{
    uint64_t n = 4 + 4 + 8 + 8;
    for (uint64_t i = 0; i < w->n_kv; i++)
        n += 8 + strlen(w->kvs[i].key) + 4 + w->kvs[i].n;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        n += 8 + strlen(w->tensors[i].name) + 4 + 8 * (uint64_t)w->tensors[i].n_dims + 4 + 8;
    return n;
}

static int write_all(gguf_writer *w, struct sink *s, gguf_fill_fn fill, void *user, struct err *e)
{
    uint32_t version = 3;
    if (sink_write(s, "GGUF", 4, e) || sink_write(s, &version, 4, e) || sink_write(s, &w->n_tensors, 8, e) ||
        sink_write(s, &w->n_kv, 8, e))
        return -1;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kvs[i];
        uint64_t kl = strlen(kv->key);
        if (sink_write(s, &kl, 8, e) || sink_write(s, kv->key, kl, e) || sink_write(s, &kv->type, 4, e) ||
            sink_write(s, kv->payload, kv->n, e))
            return -1;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        uint64_t nl = strlen(t->name);
        if (sink_write(s, &nl, 8, e) || sink_write(s, t->name, nl, e) || sink_write(s, &t->n_dims, 4, e) ||
            sink_write(s, t->ne, 8 * (uint64_t)t->n_dims, e) || sink_write(s, &t->type, 4, e) ||
            sink_write(s, &t->offset, 8, e))
            return -1;
    }
    if (sink_pad(s, w->alignment, e)) return -1;
    uint64_t data_start = s->pos;
    uint8_t *scratch = NULL;
    uint64_t scratch_cap = 0;
    int rc = 0;
    for (uint64_t i = 0; i < w->n_tensors && rc == 0; i++) {
        const struct wtensor *t = &w->tensors[i];
        if ((rc = sink_pad(s, w->alignment, e))) break;
        if (s->pos - data_start != t->offset) {
            rc = err_set(e, "gguf writer: internal error: tensor '%s' lands at %llu, not %llu", t->name,
                         (unsigned long long)(s->pos - data_start), (unsigned long long)t->offset);
            break;
        }
        if (t->data) {
            rc = sink_write(s, t->data, t->n_bytes, e);
            continue;
        }
        if (!fill) {
            rc = err_set(e, "gguf writer: tensor '%s' has no data and no fill callback", t->name);
            break;
        }
        /* chunks of whole rows, at most GGUF_WRITER_SCRATCH bytes unless one row is larger */
        uint64_t rows_per_chunk =
            t->row_bytes >= GGUF_WRITER_SCRATCH ? 1 : GGUF_WRITER_SCRATCH / t->row_bytes;
        uint64_t chunk = rows_per_chunk * t->row_bytes;
        if (chunk > t->n_bytes) chunk = t->n_bytes;
        if (chunk > scratch_cap) {
            uint8_t *ns = realloc(scratch, chunk);
            if (!ns) {
                rc = err_set(e, "out of memory (%llu-byte scratch)", (unsigned long long)chunk);
                break;
            }
            scratch = ns;
            scratch_cap = chunk;
        }
        for (uint64_t done = 0; done < t->n_bytes && rc == 0;) {
            uint64_t k = t->n_bytes - done < chunk ? t->n_bytes - done : chunk;
            uint8_t *dst = s->fp ? scratch : s->mem + s->pos;
            if (fill(user, i, dst, k, e)) {
                rc = err_prefix(e, "tensor '%s'", t->name);
                break;
            }
            if (s->fp)
                rc = sink_write(s, scratch, k, e);
            else
                s->pos += k;
            done += k;
        }
    }
    free(scratch);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user, struct err *e)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) return err_set(e, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(fp, NULL, _IOFBF, 1 << 20);
    struct sink s = {fp, NULL, 0};
    int rc = write_all(w, &s, fill, user, e);
    if (fclose(fp) != 0 && rc == 0) rc = err_set(e, "close failed: %s", strerror(errno));
    if (rc) {
        err_prefix(e, "%s", path);
        unlink(path);
    }
    return rc;
}

int gguf_writer_write_mem(gguf_writer *w, void **buf, size_t *n, gguf_fill_fn fill, void *user, struct err *e)
{
    *buf = NULL;
    *n = 0;
    uint64_t hb = header_bytes(w);
    uint64_t total = (hb + w->alignment - 1) / w->alignment * w->alignment + w->data_size;
    if (total > SIZE_MAX)
        return err_set(e, "gguf writer: %llu bytes do not fit in memory", (unsigned long long)total);
    uint8_t *mem = malloc(total ? total : 1);
    if (!mem) return err_set(e, "out of memory (%llu bytes)", (unsigned long long)total);
    struct sink s = {NULL, mem, 0};
    if (write_all(w, &s, fill, user, e)) {
        free(mem);
        return -1;
    }
    assert(s.pos == total);
    *buf = mem;
    *n = total;
    return 0;
}
