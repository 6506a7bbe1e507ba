/* gguf — reading GGUF v2/v3 files, and the type tables (the writer is gguf_write.c).
 *
 * Invariant of an open gguf_file (checked by gguf_check(), which the tests call):
 *   - base[0..size) is the whole file; every pointer held (key values, string views, array data, tensor
 *     data) lies inside it, and every length added to its pointer stays inside it;
 *   - kvs[0..n_kv) hold unique NUL-free keys; a STRING value's view and an ARRAY's elements are inside the
 *     file; for arrays of strings, strs[kv.str_first .. kv.str_first + kv.arr_n) are their views;
 *   - tensors[0..n_tensors) have unique names, 1..4 dims each >= 1, a known type, ne[0] a multiple of the
 *     block size, n_bytes = n_elements / block_size * block_bytes without overflow, offset a multiple of
 *     the alignment, data_off + offset + n_bytes <= size, and sorted by offset no two overlap;
 *   - alignment is a power of two (general.alignment, a UINT32, or 32).
 * Everything allocated is O(n_kv + n_tensors + number of string array elements); each of these counts is
 * bounded by the file size divided by the smallest encoding of one item, checked before allocating.
 *
 * Parsing walks a cursor (struct rd) whose every read checks the bytes left first, so no count read from
 * the file can make a loop run past the end of the buffer.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf/gguf_int.h"

/* Smallest encodings, used to bound counts by the bytes left. */
#define GGUF_MIN_KV_BYTES (8 + 4 + 1)             /* empty key, type, 1-byte value */
#define GGUF_MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8) /* empty name, n_dims, one dim, type, offset */
#define GGUF_MIN_STR_BYTES 8                      /* empty string */

/* ------------------------------------------------------------------------------------------------ */
/* type tables */

/* The tensor types' table is in quant.c (gguf_dtype_info, gguf_row_bytes), beside the row functions it
 * names. */

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",   "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
};

const char *gguf_vtype_name(uint32_t vtype)
{
    return vtype < GGUF_VTYPE_COUNT ? vtype_names[vtype] : "?";
}

uint64_t gguf_vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_VTYPE_UINT8:
    case GGUF_VTYPE_INT8:
    case GGUF_VTYPE_BOOL:
        return 1;
    case GGUF_VTYPE_UINT16:
    case GGUF_VTYPE_INT16:
        return 2;
    case GGUF_VTYPE_UINT32:
    case GGUF_VTYPE_INT32:
    case GGUF_VTYPE_FLOAT32:
        return 4;
    case GGUF_VTYPE_UINT64:
    case GGUF_VTYPE_INT64:
    case GGUF_VTYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

void gguf_dtype_names(uint64_t types, char *out, size_t cap)
{
    size_t off = 0;
    if (cap) out[0] = '\0';
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX && off < cap; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (types >> t & 1 && ti) off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? ", " : "", ti->name);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* the open file */

struct gguf_kv {
    char *key;   /* NUL-terminated copy */
    uint64_t at; /* byte offset of the kv's key length in the file */
    uint32_t type;
    const uint8_t *val;  /* fixed-size value (little-endian, maybe unaligned) */
    struct gguf_str str; /* STRING value */
    uint32_t arr_type;   /* ARRAY only */
    uint64_t arr_n;
    const uint8_t *arr_data; /* ARRAY of fixed-size elements */
    uint64_t str_first;      /* ARRAY of STRING: index of element 0 in gguf_file.strs */
};

struct gguf_file {
    const uint8_t *base;
    uint64_t size;
    int mapped;
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_off; /* start of the data section */
    uint64_t n_kv;
    struct gguf_kv *kvs;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    uint64_t *offset_at; /* file byte offset of each tensor's data-offset field (for error messages) */
    uint64_t n_strs, cap_strs;
    struct gguf_str *strs; /* elements of every array of strings, kv by kv */
    /* open-addressing hash tables of indices + 1 (0 = empty), sized a power of two >= 2n */
    uint64_t kv_hash_cap, tensor_hash_cap;
    uint32_t *kv_hash, *tensor_hash;
};

struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
};

static int rd_need(struct rd *r, uint64_t n)
{
    return n <= r->size - r->pos;
}

static int rd_bytes(struct rd *r, void *dst, uint64_t n)
{
    if (!rd_need(r, n)) return -1;
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
    return rd_bytes(r, v, 4);
}
static int rd_u64(struct rd *r, uint64_t *v)
{
    return rd_bytes(r, v, 8);
}

/* A string: u64 length + bytes. The view points into the buffer. */
static int rd_str(struct rd *r, struct gguf_str *s, struct err *e, const char *what)
{
    uint64_t at = r->pos, len;
    if (rd_u64(r, &len))
        return err_set(e, "%s at byte %llu: truncated string length", what, (unsigned long long)at);
    if (!rd_need(r, len))
        return err_set(e, "%s at byte %llu: string length %llu exceeds the %llu bytes left in the file", what,
                       (unsigned long long)at, (unsigned long long)len,
                       (unsigned long long)(r->size - r->pos));
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

int gguf_grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap) return 0;
    uint64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

static uint64_t hash_cap_for(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

/* The slot of name in the table: the one holding it, or the empty slot where it would go (the table is never
 * full: cap >= 2n). */
static uint64_t hash_slot(const uint32_t *tab, uint64_t cap, const char *name,
                          const char *(*name_of)(const gguf_file *, uint64_t), const gguf_file *f)
{
    uint64_t h = XXH3_64bits(name, strlen(name)) & (cap - 1);
    while (tab[h] && strcmp(name_of(f, tab[h] - 1), name) != 0)
        h = (h + 1) & (cap - 1);
    return h;
}

/* Inserts index idx (name names[idx]) into the table; returns the index of an existing equal name, or -1. */
static int64_t hash_insert(uint32_t *tab, uint64_t cap, const char *name, uint32_t idx,
                           const char *(*name_of)(const gguf_file *, uint64_t), const gguf_file *f)
{
    uint64_t h = hash_slot(tab, cap, name, name_of, f);
    if (tab[h]) return tab[h] - 1;
    tab[h] = idx + 1;
    return -1;
}

static int64_t hash_find(const uint32_t *tab, uint64_t cap, const char *name,
                         const char *(*name_of)(const gguf_file *, uint64_t), const gguf_file *f)
{
    if (!tab) return -1;
    uint64_t h = hash_slot(tab, cap, name, name_of, f);
    return tab[h] ? (int64_t)tab[h] - 1 : -1;
}

static const char *kv_name_of(const gguf_file *f, uint64_t i)
{
    return f->kvs[i].key;
}
static const char *tensor_name_of(const gguf_file *f, uint64_t i)
{
    return f->tensors[i].name;
}

/* Copies a name NUL-terminated; rejects embedded NUL bytes (names are used as C strings). */
static char *copy_name(struct gguf_str s)
{
    if (memchr(s.ptr, 0, s.len)) return NULL;
    char *c = malloc(s.len + 1);
    if (!c) return NULL;
    memcpy(c, s.ptr, s.len);
    c[s.len] = '\0';
    return c;
}

/* Human-readable, bounded rendering of a (possibly hostile) name for error messages. */
static const char *show(struct gguf_str s, char *buf, size_t cap)
{
    size_t j = 0;
    for (uint64_t i = 0; i < s.len && j + 5 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '\'')
            buf[j++] = (char)c;
        else
            j += (size_t)snprintf(buf + j, cap - j, "\\x%02x", c);
    }
    if (j + 5 >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    else
        buf[j] = '\0';
    return buf;
}

/* Reads kv #i; the elements of an array of strings are appended to f->strs as they are read. */
static int parse_kv(gguf_file *f, struct rd *r, uint64_t i, struct err *e)
{
    struct gguf_kv *kv = &f->kvs[i];
    struct gguf_str key;
    char what[64], sbuf[96];
    kv->at = r->pos;
    snprintf(what, sizeof what, "key #%llu", (unsigned long long)i);
    if (rd_str(r, &key, e, what)) return -1;
    kv->key = copy_name(key);
    if (!kv->key) {
        if (memchr(key.ptr, 0, key.len))
            return err_set(e, "key '%s' at byte %llu: contains a NUL byte", show(key, sbuf, sizeof sbuf),
                           (unsigned long long)kv->at);
        return err_set(e, "out of memory");
    }
    uint64_t at = r->pos;
    if (rd_u32(r, &kv->type))
        return err_set(e, "key '%s' at byte %llu: truncated value type", kv->key, (unsigned long long)at);
    if (kv->type >= GGUF_VTYPE_COUNT)
        return err_set(e, "key '%s' at byte %llu: unknown value type %u", kv->key, (unsigned long long)at,
                       kv->type);
    at = r->pos;
    if (kv->type == GGUF_VTYPE_STRING) {
        if (rd_str(r, &kv->str, e, "value")) return err_prefix(e, "key '%s'", kv->key);
    } else if (kv->type == GGUF_VTYPE_ARRAY) {
        if (rd_u32(r, &kv->arr_type) || rd_u64(r, &kv->arr_n))
            return err_set(e, "key '%s' at byte %llu: truncated array header", kv->key,
                           (unsigned long long)at);
        if (kv->arr_type == GGUF_VTYPE_ARRAY)
            return err_set(e, "key '%s' at byte %llu: nested arrays are not allowed", kv->key,
                           (unsigned long long)at);
        if (kv->arr_type >= GGUF_VTYPE_COUNT)
            return err_set(e, "key '%s' at byte %llu: unknown array element type %u", kv->key,
                           (unsigned long long)at, kv->arr_type);
        uint64_t esz = kv->arr_type == GGUF_VTYPE_STRING ? GGUF_MIN_STR_BYTES : gguf_vtype_size(kv->arr_type);
        uint64_t need;
        if (__builtin_mul_overflow(kv->arr_n, esz, &need) || !rd_need(r, need))
            return err_set(e,
                           "key '%s' at byte %llu: array of %llu %s elements does not fit in the %llu bytes "
                           "left in the file",
                           kv->key, (unsigned long long)at, (unsigned long long)kv->arr_n,
                           gguf_vtype_name(kv->arr_type), (unsigned long long)(r->size - r->pos));
        if (kv->arr_type == GGUF_VTYPE_STRING) {
            kv->str_first = f->n_strs;
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                struct gguf_str s;
                snprintf(what, sizeof what, "element %llu", (unsigned long long)j);
                if (rd_str(r, &s, e, what)) return err_prefix(e, "key '%s'", kv->key);
                /* n_strs <= bytes read / GGUF_MIN_STR_BYTES, so the table is bounded by the file size */
                if (gguf_grow((void **)&f->strs, &f->cap_strs, f->n_strs + 1, sizeof *f->strs))
                    return err_set(e, "out of memory");
                f->strs[f->n_strs++] = s;
            }
        } else {
            kv->arr_data = r->p + r->pos;
            r->pos += need;
        }
    } else {
        uint64_t n = gguf_vtype_size(kv->type);
        if (!rd_need(r, n))
            return err_set(e, "key '%s' at byte %llu: truncated %s value", kv->key, (unsigned long long)at,
                           gguf_vtype_name(kv->type));
        kv->val = r->p + r->pos;
        r->pos += n;
    }
    return 0;
}

static int parse_tensor(gguf_file *f, struct rd *r, uint64_t i, struct err *e)
{
    struct gguf_tensor *t = &f->tensors[i];
    struct gguf_str name;
    char what[64], sbuf[96];
    uint64_t at0 = r->pos;
    snprintf(what, sizeof what, "tensor #%llu", (unsigned long long)i);
    if (rd_str(r, &name, e, what)) return -1;
    char *nm = copy_name(name);
    if (!nm) {
        if (memchr(name.ptr, 0, name.len))
            return err_set(e, "tensor '%s' at byte %llu: name contains a NUL byte",
                           show(name, sbuf, sizeof sbuf), (unsigned long long)at0);
        return err_set(e, "out of memory");
    }
    t->name = nm;
    uint64_t at = r->pos;
    if (rd_u32(r, &t->n_dims))
        return err_set(e, "tensor '%s' at byte %llu: truncated n_dims", nm, (unsigned long long)at);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(e, "tensor '%s' at byte %llu: n_dims %u is not in 1..%d", nm, (unsigned long long)at,
                       t->n_dims, GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = r->pos;
        if (rd_u64(r, &t->ne[d]))
            return err_set(e, "tensor '%s' at byte %llu: truncated dimension %u", nm, (unsigned long long)at,
                           d);
        if (t->ne[d] == 0)
            return err_set(e, "tensor '%s' at byte %llu: dimension %u is 0", nm, (unsigned long long)at, d);
        if (t->ne[d] > INT64_MAX || __builtin_mul_overflow(n_el, t->ne[d], &n_el) || n_el > INT64_MAX)
            return err_set(e, "tensor '%s' at byte %llu: element count overflows at dimension %u (ne = %llu)",
                           nm, (unsigned long long)at, d, (unsigned long long)t->ne[d]);
    }
    t->n_elements = n_el;
    at = r->pos;
    uint32_t type;
    if (rd_u32(r, &type))
        return err_set(e, "tensor '%s' at byte %llu: truncated type", nm, (unsigned long long)at);
    const struct gguf_dtype_info *ti = gguf_dtype_info(type);
    if (!ti)
        return err_set(e, "tensor '%s' at byte %llu: unsupported tensor type id %u", nm,
                       (unsigned long long)at, type);
    t->type = (enum gguf_dtype)type;
    if (t->ne[0] % ti->block_size)
        return err_set(e,
                       "tensor '%s' at byte %llu: row length %llu is not a multiple of the %s block size %u",
                       nm, (unsigned long long)at, (unsigned long long)t->ne[0], ti->name, ti->block_size);
    /* n_el / block_size * block_bytes: n_el <= INT64_MAX and block_bytes / block_size <= 8 for plain types */
    if (__builtin_mul_overflow(n_el / ti->block_size, (uint64_t)ti->block_bytes, &t->n_bytes))
        return err_set(e, "tensor '%s' at byte %llu: byte size overflows", nm, (unsigned long long)at);
    at = r->pos;
    f->offset_at[i] = at;
    if (rd_u64(r, &t->offset))
        return err_set(e, "tensor '%s' at byte %llu: truncated offset", nm, (unsigned long long)at);
    return 0;
}

/* Sorts tensor indices by offset for the overlap check: a merge sort with the file as context (qsort
 * would need a global to reach the tensors, making concurrent opens unsafe). O(n log n). */
static void sort_by_offset(const gguf_file *f, uint32_t *idx, uint32_t *tmp, uint64_t n)
{
    if (n < 2) return;
    uint64_t h = n / 2;
    sort_by_offset(f, idx, tmp, h);
    sort_by_offset(f, idx + h, tmp, n - h);
    uint64_t a = 0, b = h, k = 0;
    while (a < h && b < n)
        tmp[k++] = f->tensors[idx[b]].offset < f->tensors[idx[a]].offset ? idx[b++] : idx[a++];
    while (a < h)
        tmp[k++] = idx[a++];
    while (b < n)
        tmp[k++] = idx[b++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int validate_tensors(gguf_file *f, struct err *e)
{
    uint64_t data_size = f->size - f->data_off;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        unsigned long long at = (unsigned long long)f->offset_at[i];
        if (t->offset % f->alignment)
            return err_set(e, "tensor '%s' at byte %llu: offset %llu not aligned to %llu", t->name, at,
                           (unsigned long long)t->offset, (unsigned long long)f->alignment);
        uint64_t end;
        if (__builtin_add_overflow(t->offset, t->n_bytes, &end) || end > data_size)
            return err_set(
                e,
                "tensor '%s' at byte %llu: data [%llu, +%llu) at file byte %llu runs past the end of "
                "the file (data section is %llu bytes from byte %llu)",
                t->name, at, (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                (unsigned long long)(f->data_off + t->offset), (unsigned long long)data_size,
                (unsigned long long)f->data_off);
        t->data = f->base + f->data_off + t->offset;
    }
    if (f->n_tensors < 2) return 0;
    uint32_t *idx = malloc(f->n_tensors * sizeof *idx), *tmp = malloc(f->n_tensors * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx);
        free(tmp);
        return err_set(e, "out of memory");
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        idx[i] = (uint32_t)i;
    sort_by_offset(f, idx, tmp, f->n_tensors);
    int rc = 0;
    for (uint64_t k = 0; k + 1 < f->n_tensors; k++) {
        const struct gguf_tensor *a = &f->tensors[idx[k]], *b = &f->tensors[idx[k + 1]];
        if (a->offset + a->n_bytes > b->offset) {
            rc = err_set(
                e,
                "tensor '%s' at byte %llu: data [%llu, %llu) overlaps tensor '%s' (at byte %llu, data "
                "from %llu)",
                a->name, (unsigned long long)f->offset_at[idx[k]], (unsigned long long)a->offset,
                (unsigned long long)(a->offset + a->n_bytes), b->name,
                (unsigned long long)f->offset_at[idx[k + 1]], (unsigned long long)b->offset);
            break;
        }
    }
    free(idx);
    free(tmp);
    return rc;
}

static int parse(gguf_file *f, struct err *e)
{
    struct rd r = {f->base, f->size, 0};
    char magic[4];
    if (rd_bytes(&r, magic, 4))
        return err_set(e, "file of %llu bytes is too short for a GGUF header", (unsigned long long)f->size);
    if (memcmp(magic, "GGUF", 4))
        return err_set(e, "bad magic at byte 0: not a GGUF file (got %02x %02x %02x %02x)",
                       (unsigned char)magic[0], (unsigned char)magic[1], (unsigned char)magic[2],
                       (unsigned char)magic[3]);
    if (rd_u32(&r, &f->version)) return err_set(e, "truncated header at byte 4: version");
    if (f->version == 1)
        return err_set(e, "GGUF version 1 at byte 4 is not supported (only versions 2 and 3)");
    if (f->version != 2 && f->version != 3)
        return err_set(e, "unsupported GGUF version %u at byte 4 (only 2 and 3; a big-endian file?)",
                       f->version);
    if (rd_u64(&r, &f->n_tensors)) return err_set(e, "truncated header at byte 8: tensor count");
    if (rd_u64(&r, &f->n_kv)) return err_set(e, "truncated header at byte 16: metadata count");
    uint64_t left = r.size - r.pos;
    if (f->n_kv > left / GGUF_MIN_KV_BYTES || f->n_kv > UINT32_MAX - 1)
        return err_set(e, "metadata count %llu at byte 16 cannot fit in the %llu bytes of the file",
                       (unsigned long long)f->n_kv, (unsigned long long)f->size);
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES || f->n_tensors > UINT32_MAX - 1)
        return err_set(e, "tensor count %llu at byte 8 cannot fit in the %llu bytes of the file",
                       (unsigned long long)f->n_tensors, (unsigned long long)f->size);

    /* --- metadata --- */
    f->kvs = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kvs);
    f->kv_hash_cap = hash_cap_for(f->n_kv);
    f->kv_hash = calloc(f->kv_hash_cap, sizeof *f->kv_hash);
    if (!f->kvs || !f->kv_hash) return err_set(e, "out of memory");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (parse_kv(f, &r, i, e)) {
            f->n_kv = i + 1; /* free the key copied so far */
            return -1;
        }
        int64_t dup = hash_insert(f->kv_hash, f->kv_hash_cap, f->kvs[i].key, (uint32_t)i, kv_name_of, f);
        if (dup >= 0) {
            f->n_kv = i + 1;
            return err_set(e, "key '%s' at byte %llu: duplicate key (first at byte %llu)", f->kvs[i].key,
                           (unsigned long long)f->kvs[i].at, (unsigned long long)f->kvs[dup].at);
        }
    }
    /* --- alignment --- */
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = hash_find(f->kv_hash, f->kv_hash_cap, "general.alignment", kv_name_of, f);
    if (ai >= 0) {
        const struct gguf_kv *kv = &f->kvs[ai];
        if (kv->type != GGUF_VTYPE_UINT32)
            return err_set(e, "key 'general.alignment' at byte %llu: type %s, expected UINT32",
                           (unsigned long long)kv->at, gguf_vtype_name(kv->type));
        uint32_t a;
        memcpy(&a, kv->val, 4);
        if (a == 0 || (a & (a - 1)))
            return err_set(e, "key 'general.alignment' at byte %llu: alignment %u is not a power of two",
                           (unsigned long long)kv->at, a);
        f->alignment = a;
    }

    /* --- tensor infos --- */
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    f->offset_at = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->offset_at);
    f->tensor_hash_cap = hash_cap_for(f->n_tensors);
    f->tensor_hash = calloc(f->tensor_hash_cap, sizeof *f->tensor_hash);
    if (!f->tensors || !f->offset_at || !f->tensor_hash) return err_set(e, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t at = r.pos;
        if (parse_tensor(f, &r, i, e)) {
            f->n_tensors = i + 1;
            return -1;
        }
        int64_t dup = hash_insert(f->tensor_hash, f->tensor_hash_cap, f->tensors[i].name, (uint32_t)i,
                                  tensor_name_of, f);
        if (dup >= 0) {
            f->n_tensors = i + 1;
            return err_set(e, "tensor '%s' at byte %llu: duplicate tensor name", f->tensors[i].name,
                           (unsigned long long)at);
        }
    }

    /* --- data section --- */
    uint64_t pad = (f->alignment - r.pos % f->alignment) % f->alignment;
    f->data_off = r.pos + pad;
    if (f->n_tensors > 0 && f->data_off > f->size)
        return err_set(e, "data section at byte %llu starts past the end of the file (%llu bytes)",
                       (unsigned long long)f->data_off, (unsigned long long)f->size);
    if (f->data_off > f->size) f->data_off = f->size;
    return validate_tensors(f, e);
}

static void file_free(gguf_file *f)
{
    if (!f) return;
    for (uint64_t i = 0; f->kvs && i < f->n_kv; i++)
        free(f->kvs[i].key);
    for (uint64_t i = 0; f->tensors && i < f->n_tensors; i++)
        free((char *)f->tensors[i].name);
    free(f->kvs);
    free(f->tensors);
    free(f->offset_at);
    free(f->strs);
    free(f->kv_hash);
    free(f->tensor_hash);
    free(f->path);
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    free(f);
}

static int open_common(gguf_file *f, gguf_file **out, struct err *e)
{
    if (parse(f, e)) {
        file_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open_memory(const void *buf, size_t n, gguf_file **out, struct err *e)
{
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return err_set(e, "out of memory");
    f->base = buf;
    f->size = n;
    f->path = strdup("");
    if (!f->path) {
        file_free(f);
        return err_set(e, "out of memory");
    }
    if (n == 0) f->base = (const uint8_t *)"";
    return open_common(f, out, e);
}

int gguf_open(const char *path, gguf_file **out, struct err *e)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = err_set(e, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, "%s: not a regular file", path);
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return err_set(e, "out of memory");
    }
    f->path = strdup(path);
    f->size = (uint64_t)st.st_size;
    if (!f->path) {
        close(fd);
        file_free(f);
        return err_set(e, "out of memory");
    }
    if (f->size == 0) {
        close(fd);
        file_free(f);
        return err_set(e, "%s: empty file, not a GGUF file", path);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        int rc =
            err_set(e, "%s: cannot mmap %llu bytes: %s", path, (unsigned long long)f->size, strerror(errno));
        file_free(f);
        return rc;
    }
    f->base = m;
    f->mapped = 1;
    if (parse(f, e)) {
        err_prefix(e, "%s", path);
        file_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

void gguf_close(gguf_file *f)
{
    file_free(f);
}

uint32_t gguf_version(const gguf_file *f)
{
    return f->version;
}
uint64_t gguf_alignment(const gguf_file *f)
{
    return f->alignment;
}
uint64_t gguf_file_size(const gguf_file *f)
{
    return f->size;
}
const char *gguf_path(const gguf_file *f)
{
    return f->path;
}

/* ------------------------------------------------------------------------------------------------ */
/* metadata access */

uint64_t gguf_n_kv(const gguf_file *f)
{
    return f->n_kv;
}

int64_t gguf_find_kv(const gguf_file *f, const char *key)
{
    return hash_find(f->kv_hash, f->kv_hash_cap, key, kv_name_of, f);
}

const char *gguf_kv_key(const gguf_file *f, uint64_t i)
{
    return i < f->n_kv ? f->kvs[i].key : NULL;
}

enum gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i)
{
    return i < f->n_kv ? (enum gguf_vtype)f->kvs[i].type : GGUF_VTYPE_COUNT;
}

enum gguf_vtype gguf_kv_arr_type(const gguf_file *f, uint64_t i)
{
    if (i >= f->n_kv || f->kvs[i].type != GGUF_VTYPE_ARRAY) return GGUF_VTYPE_COUNT;
    return (enum gguf_vtype)f->kvs[i].arr_type;
}

uint64_t gguf_kv_arr_n(const gguf_file *f, uint64_t i)
{
    if (i >= f->n_kv || f->kvs[i].type != GGUF_VTYPE_ARRAY) return 0;
    return f->kvs[i].arr_n;
}

const void *gguf_kv_arr_data(const gguf_file *f, uint64_t i)
{
    if (i >= f->n_kv || f->kvs[i].type != GGUF_VTYPE_ARRAY || f->kvs[i].arr_n == 0) return NULL;
    return f->kvs[i].arr_data; /* NULL for arrays of strings */
}

struct gguf_str gguf_kv_arr_str(const gguf_file *f, uint64_t i, uint64_t j)
{
    struct gguf_str none = {NULL, 0};
    if (i >= f->n_kv) return none;
    const struct gguf_kv *kv = &f->kvs[i];
    if (kv->type != GGUF_VTYPE_ARRAY || kv->arr_type != GGUF_VTYPE_STRING || j >= kv->arr_n) return none;
    return f->strs[kv->str_first + j];
}

const void *gguf_kv_val(const gguf_file *f, uint64_t i)
{
    if (i >= f->n_kv || !gguf_vtype_size(f->kvs[i].type)) return NULL;
    return f->kvs[i].val;
}

struct gguf_str gguf_kv_str(const gguf_file *f, uint64_t i)
{
    struct gguf_str none = {NULL, 0};
    if (i >= f->n_kv || f->kvs[i].type != GGUF_VTYPE_STRING) return none;
    return f->kvs[i].str;
}

const struct gguf_str *gguf_kv_arr_strs(const gguf_file *f, uint64_t i)
{
    if (i >= f->n_kv) return NULL;
    const struct gguf_kv *kv = &f->kvs[i];
    if (kv->type != GGUF_VTYPE_ARRAY || kv->arr_type != GGUF_VTYPE_STRING || kv->arr_n == 0) return NULL;
    return &f->strs[kv->str_first];
}

static const struct gguf_kv *get_kv(const gguf_file *f, const char *key, struct err *e)
{
    int64_t i = gguf_find_kv(f, key);
    if (i < 0) {
        err_set(e, "missing key '%s'", key);
        return NULL;
    }
    return &f->kvs[i];
}

static int wrong_type(const struct gguf_kv *kv, const char *expected, struct err *e)
{
    return err_set(e, "key '%s' at byte %llu: type %s, expected %s", kv->key, (unsigned long long)kv->at,
                   gguf_vtype_name(kv->type), expected);
}

/* The value of an integer or BOOL kv as an int64; an error for other types and UINT64 above INT64_MAX. */
static int kv_int(const struct gguf_kv *kv, int64_t *out, struct err *e)
{
    const uint8_t *p = kv->val;
    switch (kv->type) {
    case GGUF_VTYPE_UINT8:
        *out = p[0];
        return 0;
    case GGUF_VTYPE_BOOL:
        *out = p[0] != 0;
        return 0;
    case GGUF_VTYPE_INT8:
        *out = (int8_t)p[0];
        return 0;
    case GGUF_VTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case GGUF_VTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case GGUF_VTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    case GGUF_VTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    case GGUF_VTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        *out = v;
        return 0;
    }
    case GGUF_VTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > INT64_MAX)
            return err_set(e, "key '%s' at byte %llu: value %llu does not fit in int64", kv->key,
                           (unsigned long long)kv->at, (unsigned long long)v);
        *out = (int64_t)v;
        return 0;
    }
    default:
        return wrong_type(kv, "an integer", e);
    }
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *out, struct err *e)
{
    const struct gguf_kv *kv = get_kv(f, key, e);
    return kv ? kv_int(kv, out, e) : -1;
}

int gguf_get_float(const gguf_file *f, const char *key, double *out, struct err *e)
{
    const struct gguf_kv *kv = get_kv(f, key, e);
    if (!kv) return -1;
    if (kv->type == GGUF_VTYPE_FLOAT32) {
        float v;
        memcpy(&v, kv->val, 4);
        *out = v;
        return 0;
    }
    if (kv->type == GGUF_VTYPE_FLOAT64) {
        memcpy(out, kv->val, 8);
        return 0;
    }
    if (kv->type == GGUF_VTYPE_UINT64) {
        uint64_t v;
        memcpy(&v, kv->val, 8);
        *out = (double)v;
        return 0;
    }
    int64_t v;
    if (kv->type != GGUF_VTYPE_BOOL && gguf_vtype_size(kv->type) && kv_int(kv, &v, NULL) == 0) {
        *out = (double)v;
        return 0;
    }
    return wrong_type(kv, "FLOAT32 or FLOAT64", e);
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, struct err *e)
{
    const struct gguf_kv *kv = get_kv(f, key, e);
    if (!kv) return -1;
    if (kv->type != GGUF_VTYPE_BOOL) return wrong_type(kv, "BOOL", e);
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, struct gguf_str *out, struct err *e)
{
    const struct gguf_kv *kv = get_kv(f, key, e);
    if (!kv) return -1;
    if (kv->type != GGUF_VTYPE_STRING) return wrong_type(kv, "STRING", e);
    *out = kv->str;
    return 0;
}

int gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap, struct err *e)
{
    struct gguf_str s = {NULL, 0};
    if (gguf_get_str(f, key, &s, e)) return -1;
    if (s.len >= cap)
        return err_set(e, "key '%s': string of %llu bytes does not fit in a buffer of %zu", key,
                       (unsigned long long)s.len, cap);
    if (memchr(s.ptr, 0, s.len)) return err_set(e, "key '%s': string contains a NUL byte", key);
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return 0;
}

uint64_t gguf_n_tensors(const gguf_file *f)
{
    return f->n_tensors;
}

const struct gguf_tensor *gguf_tensor(const gguf_file *f, uint64_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int64_t i = hash_find(f->tensor_hash, f->tensor_hash_cap, name, tensor_name_of, f);
    return i < 0 ? NULL : &f->tensors[i];
}

int gguf_check(const gguf_file *f)
{
    const uint8_t *end = f->base + f->size;
#define IN(p, n) ((const uint8_t *)(p) >= f->base && (uint64_t)(end - (const uint8_t *)(p)) >= (uint64_t)(n))
    if (!f->alignment || (f->alignment & (f->alignment - 1))) return -1;
    if (f->data_off > f->size) return -1;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kvs[i];
        if (gguf_find_kv(f, kv->key) != (int64_t)i) return -1;
        if (kv->type == GGUF_VTYPE_STRING && !IN(kv->str.ptr, kv->str.len)) return -1;
        if (kv->type != GGUF_VTYPE_STRING && kv->type != GGUF_VTYPE_ARRAY &&
            !IN(kv->val, gguf_vtype_size(kv->type)))
            return -1;
        if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_type == GGUF_VTYPE_STRING) {
            if (kv->str_first + kv->arr_n > f->n_strs) return -1;
            for (uint64_t j = 0; j < kv->arr_n; j++)
                if (!IN(f->strs[kv->str_first + j].ptr, f->strs[kv->str_first + j].len)) return -1;
        } else if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_n) {
            if (!IN(kv->arr_data, kv->arr_n * gguf_vtype_size(kv->arr_type))) return -1;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const struct gguf_dtype_info *ti = gguf_dtype_info(t->type);
        if (!ti || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->ne[0] % ti->block_size) return -1;
        uint64_t n = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            n *= t->ne[d];
        if (n != t->n_elements || t->n_bytes != n / ti->block_size * ti->block_bytes) return -1;
        if (t->offset % f->alignment || !IN(t->data, t->n_bytes)) return -1;
        if (gguf_find_tensor(f, t->name) != t) return -1;
    }
#undef IN
    return 0;
}
