/* jinja_value — the interpreter's values: arena, buffers, containers, Python's printing (str, repr,
 * json.dumps), equality and ordering, and the conversion of the JSON variables.
 *
 * Invariant: a value never changes once made, except a namespace's dict (set ns.x = ...); containers can
 * therefore share items, and nothing is freed before the render's arena is. Containers can still nest
 * without bound (a namespace can hold itself), so every walk over a value counts its depth against
 * VALUE_MAX_DEPTH and its items against the step budget.
 */
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

enum { VALUE_MAX_DEPTH = 100, CHUNK_FIRST = 4 * 1024, CHUNK_MAX = 256 * 1024 };

/* ---------- arena ---------- */

struct jinja_chunk {
    struct jinja_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void *jinja_alloc(struct jinja_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    struct jinja_chunk *h = a->head;
    if (h && h->size - h->used >= n) {
        void *p = (char *)h->data + h->used;
        h->used += n;
        return p;
    }
    /* chunks grow with the arena (a small render touches 4 KiB); a request larger than half a chunk gets
     * one of its own */
    size_t chunk = a->used < CHUNK_FIRST ? CHUNK_FIRST : a->used < CHUNK_MAX ? a->used : CHUNK_MAX;
    int own = n > chunk / 2;
    size_t size = own ? n : chunk;
    if (n > ((size_t)1 << 40) || (a->cap && a->used + size > a->cap)) return NULL;
    struct jinja_chunk *c = calloc(1, sizeof *c + size);
    if (!c) return NULL;
    c->size = size;
    c->used = n;
    a->used += size;
    if (h && own) { /* keep filling the current chunk */
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        a->head = c;
    }
    return c->data;
}

void jinja_arena_free(struct jinja_arena *a)
{
    for (struct jinja_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

void *jinja_ralloc(struct jinja_render *r, size_t n)
{
    void *p = jinja_alloc(&r->mem, n);
    if (!p) jinja_fail(r, "the template needs more than %zu MiB of memory", r->lim.max_memory >> 20);
    return p;
}

/* ---------- buffers ---------- */

int jinja_put(struct jinja_render *r, struct jinja_buf *b, const char *s, size_t n)
{
    if (n > r->lim.max_output || b->n > r->lim.max_output - n)
        return jinja_fail(r, "the output is longer than %zu bytes", r->lim.max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return jinja_fail(r, "out of memory (template output)");
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return jinja_charge(r, n / 64);
}

int jinja_puts(struct jinja_render *r, struct jinja_buf *b, const char *s)
{
    return jinja_put(r, b, s, strlen(s));
}

int jinja_buf_take(struct jinja_render *r, struct jinja_buf *b, struct jinja_val *out)
{
    char *s = jinja_ralloc(r, b->n + 1);
    if (s && b->n) memcpy(s, b->p, b->n);
    if (s) *out = jinja_str(s, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
    return s ? 0 : -1;
}

/* ---------- containers ---------- */

struct jinja_list *jinja_list_new(struct jinja_render *r, size_t n)
{
    if (n > UINT32_MAX / 2) {
        jinja_fail(r, "a list of %zu items is too long", n);
        return NULL;
    }
    struct jinja_list *l = jinja_ralloc(r, sizeof *l);
    if (!l || (n && !(l->items = jinja_ralloc(r, n * sizeof *l->items)))) return NULL;
    l->n = (uint32_t)n;
    return l;
}

struct jinja_dict *jinja_dict_new(struct jinja_render *r, size_t cap)
{
    struct jinja_dict *d = jinja_ralloc(r, sizeof *d);
    if (!d) return NULL;
    if (cap == 0) cap = 4;
    if (cap > UINT32_MAX / 2 || !(d->keys = jinja_ralloc(r, cap * sizeof *d->keys)) ||
        !(d->vals = jinja_ralloc(r, cap * sizeof *d->vals)))
        return NULL;
    d->cap = (uint32_t)cap;
    return d;
}

static int key_equal(const struct jinja_val *a, const char *s, size_t n)
{
    return a->type == JV_STR && a->n == n && memcmp(a->u.s, s, n) == 0;
}

int jinja_dict_get_str(struct jinja_render *r, const struct jinja_dict *d, const char *k, size_t n,
                       struct jinja_val *out)
{
    if (jinja_charge(r, d->n / 8) != 0) return 0;
    for (uint32_t i = 0; i < d->n; i++)
        if (key_equal(&d->keys[i], k, n)) {
            *out = d->vals[i];
            return 1;
        }
    return 0;
}

int jinja_dict_get(struct jinja_render *r, const struct jinja_dict *d, struct jinja_val key,
                   struct jinja_val *out)
{
    if (key.type == JV_STR) return jinja_dict_get_str(r, d, key.u.s, key.n, out);
    if (jinja_charge(r, d->n / 8) != 0) return 0;
    for (uint32_t i = 0; i < d->n; i++)
        if (jinja_equal(r, &d->keys[i], &key)) {
            *out = d->vals[i];
            return 1;
        }
    return 0;
}

int jinja_dict_set(struct jinja_render *r, struct jinja_dict *d, struct jinja_val key, struct jinja_val v)
{
    if (jinja_charge(r, d->n / 8) != 0) return -1;
    for (uint32_t i = 0; i < d->n; i++)
        if (jinja_equal(r, &d->keys[i], &key)) {
            d->vals[i] = v;
            return 0;
        }
    if (d->n == d->cap) {
        uint32_t cap = d->cap * 2;
        struct jinja_val *k = jinja_ralloc(r, cap * sizeof *k), *w = jinja_ralloc(r, cap * sizeof *w);
        if (!k || !w) return -1;
        memcpy(k, d->keys, d->n * sizeof *k);
        memcpy(w, d->vals, d->n * sizeof *w);
        d->keys = k;
        d->vals = w;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = v;
    return 0;
}

/* ---------- truth, names ---------- */

int jinja_truthy(const struct jinja_val *v)
{
    switch (v->type) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0.0;
    case JV_STR:
        return v->n != 0;
    case JV_LIST:
        return v->u.l->n != 0;
    case JV_DICT:
        return v->u.d->n != 0;
    default:
        return 1;
    }
}

const char *jinja_type_name(const struct jinja_val *v)
{
    static const char *const names[] = {"Undefined", "NoneType",    "bool",  "int",
                                        "float",     "str",         "list",  "dict",
                                        "Namespace", "LoopContext", "Macro", "function"};
    if (v->type == JV_LIST && v->tuple) return "tuple";
    return v->type < sizeof names / sizeof names[0] ? names[v->type] : "?";
}

/* ---------- UTF-8 as Python sees it ---------- */

static size_t utf8_step(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    size_t k = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    while (k > 1 && (i + k > n))
        k--;
    for (size_t j = 1; j < k; j++)
        if (((unsigned char)s[i + j] & 0xC0) != 0x80) return j;
    return k;
}

size_t jinja_utf8_len(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i += utf8_step(s, n, i))
        count++;
    return count;
}

size_t jinja_utf8_offset(const char *s, size_t n, size_t index)
{
    size_t i = 0;
    for (size_t k = 0; k < index && i < n; k++)
        i += utf8_step(s, n, i);
    return i;
}

/* The code point at s[i] (n bytes in all) and its byte length in *len. */
static uint32_t utf8_at(const char *s, size_t n, size_t i, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s + i;
    size_t k = utf8_step(s, n, i);
    *len = k;
    if (k == 1) return u[0];
    if (k == 2) return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (k == 3) return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 |
           (u[3] & 0x3F);
}

/* Python's str.isspace for one code point. */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

size_t jinja_space_prefix(const char *s, size_t n)
{
    size_t i = 0, k;
    while (i < n && py_space(utf8_at(s, n, i, &k)))
        i += k;
    return i;
}

size_t jinja_space_suffix(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1, k;
        while (start > 0 && end - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80)
            start--;
        uint32_t c = utf8_at(s, end, start, &k);
        if (start + k != end) { /* not one whole character: a stray byte */
            start = end - 1;
            c = (unsigned char)s[start];
        }
        if (!py_space(c)) break;
        end = start;
    }
    return n - end;
}

/* ---------- printing ---------- */

void jinja_format_float(double f, char *buf, size_t cap)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f > 0 ? "inf" : "-inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec < 17; prec++) { /* the shortest digits that read back as f, as Python's repr */
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, f);
    char digits[24];
    size_t nd = 0;
    const char *p = e + (e[0] == '-');
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int ex = atoi(p + 1);
    size_t w = 0;
    if (signbit(f)) buf[w++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            w += (size_t)snprintf(buf + w, cap - w, "0.");
            for (int i = -1; i > ex; i--)
                buf[w++] = '0';
            w += (size_t)snprintf(buf + w, cap - w, "%.*s", (int)nd, digits);
        } else {
            for (int i = 0; i <= ex; i++)
                buf[w++] = (size_t)i < nd ? digits[i] : '0';
            buf[w++] = '.';
            if ((size_t)ex + 1 < nd)
                w += (size_t)snprintf(buf + w, cap - w, "%.*s", (int)(nd - (size_t)ex - 1), digits + ex + 1);
            else
                buf[w++] = '0';
        }
        buf[w] = '\0';
        return;
    }
    buf[w++] = digits[0];
    if (nd > 1) w += (size_t)snprintf(buf + w, cap - w, ".%.*s", (int)(nd - 1), digits + 1);
    snprintf(buf + w, cap - w, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
}

static int write_repr_depth(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v,
                            int depth);

/* Python's repr of a string: single quotes unless the text has ' and no ". */
static int write_quoted(struct jinja_render *r, struct jinja_buf *b, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    if (jinja_put(r, b, &q, 1) != 0) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8] = {0};
        if (c == '\\' || c == (unsigned char)q)
            snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (c == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (c < 0x20 || c == 0x7F)
            snprintf(esc, sizeof esc, "\\x%02x", c);
        if (!esc[0]) continue;
        if (jinja_put(r, b, s + run, i - run) != 0 || jinja_puts(r, b, esc) != 0) return -1;
        run = i + 1;
    }
    return jinja_put(r, b, s + run, n - run) || jinja_put(r, b, &q, 1) ? -1 : 0;
}

static int write_dict(struct jinja_render *r, struct jinja_buf *b, const struct jinja_dict *d, int depth)
{
    if (jinja_puts(r, b, "{") != 0) return -1;
    for (uint32_t i = 0; i < d->n; i++)
        if ((i && jinja_puts(r, b, ", ") != 0) || write_repr_depth(r, b, &d->keys[i], depth + 1) != 0 ||
            jinja_puts(r, b, ": ") != 0 || write_repr_depth(r, b, &d->vals[i], depth + 1) != 0)
            return -1;
    return jinja_puts(r, b, "}");
}

static int write_scalar(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v)
{
    char tmp[64];
    switch (v->type) {
    case JV_NONE:
        return jinja_puts(r, b, "None");
    case JV_BOOL:
        return jinja_puts(r, b, v->u.i ? "True" : "False");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
        return jinja_puts(r, b, tmp);
    case JV_FLOAT:
        jinja_format_float(v->u.f, tmp, sizeof tmp);
        return jinja_puts(r, b, tmp);
    case JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %u/%u>", v->u.loop->i + 1, v->u.loop->n);
        return jinja_puts(r, b, tmp);
    case JV_MACRO:
        return jinja_puts(r, b, "<Macro '") || jinja_put(r, b, v->u.node->name, v->u.node->name_len) ||
                       jinja_puts(r, b, "'>")
                   ? -1
                   : 0;
    case JV_FUNC:
        snprintf(tmp, sizeof tmp, "<function %s>", jinja_func_name((int)v->u.i));
        return jinja_puts(r, b, tmp);
    default:
        return 0;
    }
}

static int write_repr_depth(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v, int depth)
{
    if (depth > VALUE_MAX_DEPTH) return jinja_fail(r, "a value nests deeper than %d levels", VALUE_MAX_DEPTH);
    if (jinja_charge(r, 1) != 0) return -1;
    switch (v->type) {
    case JV_UNDEF:
        return jinja_puts(r, b, "Undefined");
    case JV_STR:
        return write_quoted(r, b, v->u.s, v->n);
    case JV_LIST: {
        const struct jinja_list *l = v->u.l;
        if (jinja_puts(r, b, v->tuple ? "(" : "[") != 0) return -1;
        for (uint32_t i = 0; i < l->n; i++)
            if ((i && jinja_puts(r, b, ", ") != 0) || write_repr_depth(r, b, &l->items[i], depth + 1) != 0)
                return -1;
        return jinja_puts(r, b, !v->tuple ? "]" : l->n == 1 ? ",)" : ")");
    }
    case JV_DICT:
        return write_dict(r, b, v->u.d, depth);
    case JV_NS:
        return jinja_puts(r, b, "<Namespace ") || write_dict(r, b, v->u.d, depth) || jinja_puts(r, b, ">")
                   ? -1
                   : 0;
    default:
        return write_scalar(r, b, v);
    }
}

int jinja_write_repr(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v)
{
    return write_repr_depth(r, b, v, 0);
}

int jinja_write_str(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v)
{
    if (v->type == JV_UNDEF) return 0;
    if (v->type == JV_STR) return jinja_put(r, b, v->u.s, v->n);
    return write_repr_depth(r, b, v, 0);
}

int jinja_to_str(struct jinja_render *r, const struct jinja_val *v, struct jinja_val *out)
{
    if (v->type == JV_STR) {
        *out = *v;
        return 0;
    }
    struct jinja_buf b = {0};
    if (jinja_write_str(r, &b, v) != 0) {
        free(b.p);
        return -1;
    }
    return jinja_buf_take(r, &b, out);
}

/* ---------- json.dumps ---------- */

static int json_text(struct jinja_render *r, struct jinja_buf *b, const char *s, size_t n, int ensure_ascii)
{
    if (jinja_puts(r, b, "\"") != 0) return -1;
    size_t run = 0, k;
    for (size_t i = 0; i < n; i += k) {
        uint32_t c = utf8_at(s, n, i, &k);
        char esc[16] = {0};
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", (char)c);
        else if (c == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (c == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (c == '\b')
            snprintf(esc, sizeof esc, "\\b");
        else if (c == '\f')
            snprintf(esc, sizeof esc, "\\f");
        else if (c < 0x20 || (ensure_ascii && c == 0x7F))
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (ensure_ascii && c >= 0x10000)
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((c - 0x10000) >> 10),
                     0xDC00 + ((c - 0x10000) & 0x3FF));
        else if (ensure_ascii && c >= 0x80)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        if (!esc[0]) continue;
        if (jinja_put(r, b, s + run, i - run) != 0 || jinja_puts(r, b, esc) != 0) return -1;
        run = i + k;
    }
    return jinja_put(r, b, s + run, n - run) || jinja_puts(r, b, "\"") ? -1 : 0;
}

static int json_newline(struct jinja_render *r, struct jinja_buf *b, const struct jinja_json_style *st,
                        int level)
{
    if (st->indent < 0) return 0;
    if (jinja_puts(r, b, "\n") != 0) return -1;
    for (int i = 0; i < st->indent * level; i++)
        if (jinja_puts(r, b, " ") != 0) return -1;
    return 0;
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as text. */
static int json_key(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *k, int ensure_ascii)
{
    if (k->type == JV_STR) return json_text(r, b, k->u.s, k->n, ensure_ascii);
    if (k->type == JV_NONE || k->type == JV_BOOL) {
        const char *t = k->type == JV_NONE ? "null" : k->u.i ? "true" : "false";
        return json_text(r, b, t, strlen(t), 0);
    }
    if (k->type != JV_INT && k->type != JV_FLOAT)
        return jinja_fail(r, "tojson: keys must be str, int, float, bool or None, not %s",
                          jinja_type_name(k));
    struct jinja_val s;
    return jinja_to_str(r, k, &s) || json_text(r, b, s.u.s, s.n, 0) ? -1 : 0;
}

/* The order in which a dict's items are written: as inserted, or sorted by key. */
static int json_order(struct jinja_render *r, const struct jinja_dict *d, int sort, uint32_t **order)
{
    *order = jinja_ralloc(r, (d->n + 1) * sizeof **order);
    if (!*order) return -1;
    for (uint32_t i = 0; i < d->n; i++)
        (*order)[i] = i;
    for (uint32_t i = 1; sort && i < d->n; i++) /* insertion sort: stable, and dicts are small */
        for (uint32_t j = i; j > 0; j--) {
            int c;
            if (jinja_charge(r, 1) || jinja_compare(r, &d->keys[(*order)[j - 1]], &d->keys[(*order)[j]], &c))
                return -1;
            if (c <= 0) break;
            uint32_t t = (*order)[j];
            (*order)[j] = (*order)[j - 1];
            (*order)[j - 1] = t;
        }
    return 0;
}

static int json_container(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v,
                          const struct jinja_json_style *st, int level)
{
    int is_dict = v->type == JV_DICT;
    uint32_t n = is_dict ? v->u.d->n : v->u.l->n, *order = NULL;
    if (n == 0) return jinja_puts(r, b, is_dict ? "{}" : "[]");
    if (is_dict && json_order(r, v->u.d, st->sort_keys, &order) != 0) return -1;
    if (jinja_puts(r, b, is_dict ? "{" : "[") != 0) return -1;
    for (uint32_t i = 0; i < n; i++) {
        if (i && jinja_puts(r, b, st->item_sep) != 0) return -1;
        if (json_newline(r, b, st, level + 1) != 0) return -1;
        if (is_dict && (json_key(r, b, &v->u.d->keys[order[i]], st->ensure_ascii) != 0 ||
                        jinja_puts(r, b, st->key_sep) != 0))
            return -1;
        const struct jinja_val *item = is_dict ? &v->u.d->vals[order[i]] : &v->u.l->items[i];
        if (jinja_write_json(r, b, item, st, level + 1) != 0) return -1;
    }
    return json_newline(r, b, st, level) || jinja_puts(r, b, is_dict ? "}" : "]") ? -1 : 0;
}

int jinja_write_json(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v,
                     const struct jinja_json_style *st, int level)
{
    char tmp[64];
    if (level > VALUE_MAX_DEPTH)
        return jinja_fail(r, "tojson: the value nests deeper than %d levels", VALUE_MAX_DEPTH);
    if (jinja_charge(r, 1) != 0) return -1;
    switch (v->type) {
    case JV_NONE:
        return jinja_puts(r, b, "null");
    case JV_BOOL:
        return jinja_puts(r, b, v->u.i ? "true" : "false");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
        return jinja_puts(r, b, tmp);
    case JV_FLOAT:
        if (isnan(v->u.f)) return jinja_puts(r, b, "NaN");
        if (isinf(v->u.f)) return jinja_puts(r, b, v->u.f > 0 ? "Infinity" : "-Infinity");
        jinja_format_float(v->u.f, tmp, sizeof tmp);
        return jinja_puts(r, b, tmp);
    case JV_STR:
        return json_text(r, b, v->u.s, v->n, st->ensure_ascii);
    case JV_LIST:
    case JV_DICT:
        return json_container(r, b, v, st, level);
    default:
        return jinja_fail(r, "tojson: an object of type %s is not JSON serializable", jinja_type_name(v));
    }
}

/* ---------- equality and order ---------- */

static double num_of(const struct jinja_val *v)
{
    return v->type == JV_FLOAT ? v->u.f : (double)v->u.i;
}

static int equal_depth(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b,
                       int depth)
{
    if (depth > VALUE_MAX_DEPTH || jinja_charge(r, 1) != 0) return 0;
    if (jinja_is_num(a) && jinja_is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) return a->u.i == b->u.i;
        return num_of(a) == num_of(b);
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a->n == b->n && memcmp(a->u.s, b->u.s, a->n) == 0;
    case JV_LIST:
        if (a->tuple != b->tuple || a->u.l->n != b->u.l->n) return 0;
        for (uint32_t i = 0; i < a->u.l->n; i++)
            if (!equal_depth(r, &a->u.l->items[i], &b->u.l->items[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) return 0;
        for (uint32_t i = 0; i < a->u.d->n; i++) {
            struct jinja_val w;
            if (!jinja_dict_get(r, b->u.d, a->u.d->keys[i], &w) ||
                !equal_depth(r, &a->u.d->vals[i], &w, depth + 1))
                return 0;
        }
        return 1;
    case JV_FUNC:
        return a->u.i == b->u.i;
    default:
        return a->u.d == b->u.d; /* namespaces, loops, macros: the same object */
    }
}

int jinja_equal(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b)
{
    return equal_depth(r, a, b, 0);
}

int jinja_compare(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b, int *cmp)
{
    if (jinja_is_num(a) && jinja_is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT)
            *cmp = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        else
            *cmp = (num_of(a) > num_of(b)) - (num_of(a) < num_of(b));
        return 0;
    }
    if (a->type == JV_STR && b->type == JV_STR) { /* UTF-8 byte order is code point order */
        int c = memcmp(a->u.s, b->u.s, a->n < b->n ? a->n : b->n);
        *cmp = c ? (c > 0) - (c < 0) : (a->n > b->n) - (a->n < b->n);
        return 0;
    }
    if (a->type == JV_LIST && b->type == JV_LIST && a->tuple == b->tuple) {
        uint32_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (uint32_t i = 0; i < n; i++) {
            if (jinja_charge(r, 1) != 0) return -1;
            if (jinja_equal(r, &a->u.l->items[i], &b->u.l->items[i])) continue;
            return jinja_compare(r, &a->u.l->items[i], &b->u.l->items[i], cmp);
        }
        *cmp = (a->u.l->n > b->u.l->n) - (a->u.l->n < b->u.l->n);
        return 0;
    }
    return jinja_fail(r, "cannot order %s and %s", jinja_type_name(a), jinja_type_name(b));
}

/* ---------- iteration ---------- */

int jinja_iterate(struct jinja_render *r, const struct jinja_val *v, struct jinja_list **out)
{
    static struct jinja_list empty;
    switch (v->type) {
    case JV_UNDEF:
        *out = &empty;
        return 0;
    case JV_LIST:
        *out = v->u.l;
        return 0;
    case JV_DICT: {
        struct jinja_list *l = jinja_list_new(r, v->u.d->n);
        if (!l) return -1;
        for (uint32_t i = 0; i < l->n; i++)
            l->items[i] = v->u.d->keys[i];
        *out = l;
        return jinja_charge(r, l->n);
    }
    case JV_STR: {
        struct jinja_list *l = jinja_list_new(r, jinja_utf8_len(v->u.s, v->n));
        if (!l) return -1;
        for (size_t i = 0, k = 0; k < l->n; k++) {
            size_t step = utf8_step(v->u.s, v->n, i);
            l->items[k] = jinja_str(v->u.s + i, step);
            i += step;
        }
        *out = l;
        return jinja_charge(r, l->n);
    }
    default:
        return jinja_fail(r, "'%s' object is not iterable", jinja_type_name(v));
    }
}

/* ---------- the JSON variables ---------- */

int jinja_from_json(struct jinja_render *r, const json_t *j, int depth, struct jinja_val *out)
{
    if (depth > VALUE_MAX_DEPTH)
        return jinja_fail(r, "the variables nest deeper than %d levels", VALUE_MAX_DEPTH);
    if (jinja_charge(r, 1) != 0) return -1;
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = jinja_none();
        return 0;
    case JSON_TRUE:
        *out = jinja_bool(1);
        return 0;
    case JSON_FALSE:
        *out = jinja_bool(0);
        return 0;
    case JSON_INTEGER:
        *out = jinja_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = jinja_float(json_real_value(j));
        return 0;
    case JSON_STRING: {
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        if (memchr(s, '\0', n)) return jinja_fail(r, "a variable's string holds a NUL character");
        *out = jinja_str(s, n);
        return 0;
    }
    case JSON_ARRAY: {
        struct jinja_list *l = jinja_list_new(r, json_array_size(j));
        if (!l) return -1;
        for (uint32_t i = 0; i < l->n; i++)
            if (jinja_from_json(r, json_array_get(j, i), depth + 1, &l->items[i]) != 0) return -1;
        *out = jinja_listv(l, 0);
        return 0;
    }
    case JSON_OBJECT: {
        struct jinja_dict *d = jinja_dict_new(r, json_object_size(j));
        if (!d) return -1;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        { /* keys are unique: append in order */
            d->keys[d->n] = jinja_str(k, strlen(k));
            if (jinja_from_json(r, v, depth + 1, &d->vals[d->n]) != 0) return -1;
            d->n++;
        }
        *out = jinja_dictv(d, 0);
        return 0;
    }
    }
    return jinja_fail(r, "unknown JSON value");
}
