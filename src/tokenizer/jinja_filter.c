/* jinja_filter — Jinja2's filters and tests that chat templates use, with Jinja 3.1's signatures and
 * results, except where HF overrides one: tojson is json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) (keys in insertion order, no HTML escaping).
 *
 * Filters: abs attr capitalize count d default dictsort e escape first float format indent int items join
 * last length list lower map max min reject rejectattr replace reverse round safe select selectattr sort
 * string sum title tojson trim unique upper wordcount.
 * Tests: defined undefined none boolean true false integer float number string mapping iterable sequence
 * callable sameas escaped in eq equalto == ne != lt lessthan < le <= gt greaterthan > ge >= odd even
 * divisibleby lower upper filter test.
 * Letter case is ASCII only (upper, lower, title, capitalize leave other letters as they are).
 * Every filter counts its per-item work against the step budget.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

typedef int (*filter_fn)(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                         struct jinja_val *out);
typedef int (*test_fn)(struct jinja_render *r, const struct jinja_val *v, const struct jinja_args *a,
                       int *res);

static const char *const no_names[] = {NULL};

/* ---------- helpers ---------- */

/* item[attribute] as Jinja's attribute getters: a dotted path, integer parts index lists. */
static int attr_get(struct jinja_render *r, const struct jinja_val *item, const struct jinja_val *attr,
                    struct jinja_val *out)
{
    if (attr->type == JV_INT) {
        *out = item->type == JV_LIST && attr->u.i >= 0 && attr->u.i < item->u.l->n
                   ? item->u.l->items[attr->u.i]
                   : jinja_undef(NULL);
        return 0;
    }
    if (attr->type != JV_STR)
        return jinja_fail(r, "an attribute name must be a string, not %s", jinja_type_name(attr));
    *out = *item;
    const char *s = attr->u.s, *end = s + attr->n;
    while (s <= end) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        const char *e = dot ? dot : end;
        int digits = e > s;
        for (const char *p = s; p < e; p++)
            digits &= *p >= '0' && *p <= '9';
        struct jinja_val cur = *out;
        if (digits && cur.type == JV_LIST) {
            long i = strtol(s, NULL, 10);
            *out = i < cur.u.l->n ? cur.u.l->items[i] : jinja_undef(NULL);
        } else if (jinja_getattr(r, &cur, s, (size_t)(e - s), NULL, out) != 0) {
            return -1;
        }
        s = e + 1;
    }
    return 0;
}

/* Orders a and b for sort / min / max / unique: strings case-insensitively (ASCII) unless cs. */
static int order(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b, int cs, int *c)
{
    if (!cs && a->type == JV_STR && b->type == JV_STR) {
        size_t n = a->n < b->n ? a->n : b->n;
        for (size_t i = 0; i < n; i++) {
            int x = a->u.s[i] >= 'A' && a->u.s[i] <= 'Z' ? a->u.s[i] + 32 : (unsigned char)a->u.s[i];
            int y = b->u.s[i] >= 'A' && b->u.s[i] <= 'Z' ? b->u.s[i] + 32 : (unsigned char)b->u.s[i];
            if (x != y) {
                *c = x < y ? -1 : 1;
                return 0;
            }
        }
        *c = (a->n > b->n) - (a->n < b->n);
        return 0;
    }
    return jinja_compare(r, a, b, c);
}

/* Stable merge sort of v[0..n) by keys[0..n) (sorted along): reverse keeps equal items in order. */
static int sort_by(struct jinja_render *r, struct jinja_val *v, struct jinja_val *keys, uint32_t n, int cs,
                   int rev)
{
    struct jinja_val *tv = jinja_ralloc(r, (n + 1) * sizeof *tv), *tk = jinja_ralloc(r, (n + 1) * sizeof *tk);
    if (!tv || !tk) return -1;
    for (uint32_t w = 1; w < n; w *= 2)
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid,
                     k = lo;
            while (i < mid || j < hi) {
                int c = 0, take_left = j >= hi;
                if (i < mid && j < hi) {
                    if (jinja_charge(r, 1) != 0 || order(r, &keys[i], &keys[j], cs, &c) != 0) return -1;
                    take_left = rev ? c >= 0 : c <= 0;
                }
                uint32_t from = take_left ? i++ : j++;
                tv[k] = v[from];
                tk[k++] = keys[from];
            }
            memcpy(v + lo, tv + lo, (hi - lo) * sizeof *v);
            memcpy(keys + lo, tk + lo, (hi - lo) * sizeof *keys);
        }
    return 0;
}

static int list_copy(struct jinja_render *r, const struct jinja_val *in, struct jinja_list **out)
{
    struct jinja_list *items;
    if (jinja_iterate(r, in, &items) != 0 || !(*out = jinja_list_new(r, items->n))) return -1;
    if (items->n) memcpy((*out)->items, items->items, items->n * sizeof *items->items);
    return jinja_charge(r, items->n);
}

static int get_bool(const struct jinja_args *a, int i, const char *name)
{
    struct jinja_val v;
    return jinja_arg(a, i, name, &v) && jinja_truthy(&v);
}

/* ---------- filters ---------- */

static int f_abs(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    if (jinja_args_check(r, a, 0, no_names, "abs") != 0) return -1;
    if (in->type == JV_FLOAT)
        *out = jinja_float(fabs(in->u.f));
    else if (in->type == JV_INT || in->type == JV_BOOL)
        *out = jinja_int(in->u.i < 0 ? -in->u.i : in->u.i);
    else
        return jinja_fail(r, "abs: a number is needed, not %s", jinja_type_name(in));
    if (in->type == JV_INT && in->u.i == INT64_MIN) return jinja_fail(r, "integer overflow");
    return 0;
}

static int f_attr(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    struct jinja_val name;
    if (jinja_args_check(r, a, 1, no_names, "attr") != 0) return -1;
    if (!jinja_arg(a, 0, NULL, &name) || name.type != JV_STR) return jinja_fail(r, "attr: a name is needed");
    return jinja_getattr(r, in, name.u.s, name.n, NULL, out);
}

static int f_case(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out, char how, const char *what)
{
    struct jinja_val s;
    if (jinja_args_check(r, a, 0, no_names, what) != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    return jinja_str_case(r, &s, how, out);
}

static int f_capitalize(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                        struct jinja_val *out)
{
    return f_case(r, in, a, out, 'c', "capitalize");
}

static int f_lower(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    return f_case(r, in, a, out, 'l', "lower");
}

static int f_upper(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    return f_case(r, in, a, out, 'u', "upper");
}

static int f_title(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    return f_case(r, in, a, out, 't', "title");
}

static int f_length(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    if (jinja_args_check(r, a, 0, no_names, "length") != 0) return -1;
    switch (in->type) {
    case JV_UNDEF:
        *out = jinja_int(0);
        return 0;
    case JV_STR:
        *out = jinja_int((int64_t)jinja_utf8_len(in->u.s, in->n));
        return jinja_charge(r, in->n / 16);
    case JV_LIST:
        *out = jinja_int(in->u.l->n);
        return 0;
    case JV_DICT:
        *out = jinja_int(in->u.d->n);
        return 0;
    default:
        return jinja_fail(r, "object of type '%s' has no length", jinja_type_name(in));
    }
}

static int f_default(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                     struct jinja_val *out)
{
    static const char *const names[] = {"default_value", "boolean", NULL};
    if (jinja_args_check(r, a, 2, names, "default") != 0) return -1;
    *out = *in;
    if (in->type == JV_UNDEF || (get_bool(a, 1, "boolean") && !jinja_truthy(in)))
        if (!jinja_arg(a, 0, "default_value", out)) *out = jinja_str("", 0);
    return 0;
}

static int f_items(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out);

static int f_dictsort(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                      struct jinja_val *out)
{
    static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
    struct jinja_val by = jinja_str("key", 3), pairs;
    if (jinja_args_check(r, a, 3, names, "dictsort") != 0 ||
        f_items(r, in, &(struct jinja_args){0}, &pairs) != 0)
        return -1;
    jinja_arg(a, 1, "by", &by);
    int by_value = by.type == JV_STR && by.n == 5 && memcmp(by.u.s, "value", 5) == 0;
    struct jinja_list *l = pairs.u.l;
    struct jinja_val *keys = jinja_ralloc(r, (l->n + 1) * sizeof *keys);
    if (!keys) return -1;
    for (uint32_t i = 0; i < l->n; i++)
        keys[i] = l->items[i].u.l->items[by_value];
    if (sort_by(r, l->items, keys, l->n, get_bool(a, 0, "case_sensitive"), get_bool(a, 2, "reverse")) != 0)
        return -1;
    *out = pairs;
    return 0;
}

static int f_escape(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    struct jinja_val s;
    struct jinja_buf b = {0};
    if (jinja_args_check(r, a, 0, no_names, "escape") != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    for (uint32_t i = 0; i < s.n; i++) {
        const char *rep = s.u.s[i] == '&'    ? "&amp;"
                          : s.u.s[i] == '<'  ? "&lt;"
                          : s.u.s[i] == '>'  ? "&gt;"
                          : s.u.s[i] == '"'  ? "&#34;"
                          : s.u.s[i] == '\'' ? "&#39;"
                                             : NULL;
        if (rep ? jinja_puts(r, &b, rep) : jinja_put(r, &b, s.u.s + i, 1)) {
            free(b.p);
            return -1;
        }
    }
    return jinja_buf_take(r, &b, out);
}

static int f_first_last(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                        struct jinja_val *out, int last)
{
    struct jinja_list *items;
    if (jinja_args_check(r, a, 0, no_names, last ? "last" : "first") != 0 ||
        jinja_iterate(r, in, &items) != 0)
        return -1;
    *out = items->n ? items->items[last ? items->n - 1 : 0] : jinja_undef(NULL);
    return 0;
}

static int f_first(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    return f_first_last(r, in, a, out, 0);
}

static int f_last(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    return f_first_last(r, in, a, out, 1);
}

/* Python's float(s) / int(s, base) on a string (surrounding whitespace and underscores allowed). */
static int parse_number(const struct jinja_val *s, int as_float, int base, double *f, int64_t *i)
{
    char buf[128];
    size_t k = 0, lead = jinja_space_prefix(s->u.s, s->n), trail = jinja_space_suffix(s->u.s, s->n);
    if (lead >= s->n || s->n - lead - trail >= sizeof buf) return -1;
    for (size_t p = lead; p < s->n - trail; p++)
        if (s->u.s[p] != '_') buf[k++] = s->u.s[p];
    buf[k] = '\0';
    char *end;
    if (as_float)
        *f = strtod(buf, &end);
    else
        *i = strtoll(buf, &end, base);
    return *end || end == buf ? -1 : 0;
}

static int f_float(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    static const char *const names[] = {"default", NULL};
    double f;
    if (jinja_args_check(r, a, 1, names, "float") != 0) return -1;
    if (jinja_is_num(in))
        *out = jinja_float(in->type == JV_FLOAT ? in->u.f : (double)in->u.i);
    else if (in->type == JV_STR && parse_number(in, 1, 10, &f, NULL) == 0)
        *out = jinja_float(f);
    else if (!jinja_arg(a, 0, "default", out))
        *out = jinja_float(0.0);
    return 0;
}

static int f_int(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    static const char *const names[] = {"default", "base", NULL};
    struct jinja_val base = jinja_int(10);
    double f;
    int64_t i;
    if (jinja_args_check(r, a, 2, names, "int") != 0) return -1;
    jinja_arg(a, 1, "base", &base);
    int b = base.type == JV_INT && base.u.i >= 2 && base.u.i <= 36 ? (int)base.u.i : 10;
    if (in->type == JV_INT || in->type == JV_BOOL)
        *out = jinja_int(in->u.i);
    else if (in->type == JV_FLOAT && fabs(in->u.f) < 9.2e18)
        *out = jinja_int((int64_t)in->u.f);
    else if (in->type == JV_STR && parse_number(in, 0, b, NULL, &i) == 0)
        *out = jinja_int(i);
    else if (in->type == JV_STR && parse_number(in, 1, 10, &f, NULL) == 0 && fabs(f) < 9.2e18)
        *out = jinja_int((int64_t)f);
    else if (!jinja_arg(a, 0, "default", out))
        *out = jinja_int(0);
    return 0;
}

static int f_format(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    if (jinja_args_check(r, a, 64, no_names, "format") != 0) return -1;
    if (in->type != JV_STR) return jinja_fail(r, "format: the format must be a string");
    return jinja_str_format(r, in, a->pos, a->n_pos, out);
}

/* Jinja's indent: the lines of s + "\n" (Python's splitlines), every one but the first prefixed with the
 * indentation (empty ones too when blank), joined with "\n"; the first one too when first. */
static int f_indent(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    static const char *const names[] = {"width", "first", "blank", NULL};
    struct jinja_val s, width = jinja_int(4);
    struct jinja_list *lines;
    struct jinja_buf b = {0};
    if (jinja_args_check(r, a, 3, names, "indent") != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    jinja_arg(a, 0, "width", &width);
    char pad[256];
    int64_t w = width.type == JV_INT ? width.u.i : 0;
    if (width.type == JV_STR)
        snprintf(pad, sizeof pad, "%.*s", (int)(width.n < 255 ? width.n : 255), width.u.s);
    else
        snprintf(pad, sizeof pad, "%*s", (int)(w < 0 ? 0 : w > 255 ? 255 : w), "");
    int blank = get_bool(a, 2, "blank"), rc = get_bool(a, 1, "first") ? jinja_puts(r, &b, pad) : 0;
    if (rc == 0) rc = jinja_put(r, &b, s.u.s, s.n) || jinja_puts(r, &b, "\n") || jinja_buf_take(r, &b, &s);
    if (rc == 0) rc = jinja_str_splitlines(r, &s, 0, &lines);
    for (uint32_t i = 0; rc == 0 && i < lines->n; i++) {
        if (i) rc = jinja_puts(r, &b, "\n") || ((blank || lines->items[i].n) && jinja_puts(r, &b, pad));
        if (rc == 0) rc = jinja_put(r, &b, lines->items[i].u.s, lines->items[i].n);
    }
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    return jinja_buf_take(r, &b, out);
}

static int f_items(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    if (jinja_args_check(r, a, 0, no_names, "items") != 0) return -1;
    if (in->type == JV_UNDEF) {
        struct jinja_list *l = jinja_list_new(r, 0);
        *out = jinja_listv(l, 0);
        return l ? 0 : -1;
    }
    if (in->type != JV_DICT && in->type != JV_NS)
        return jinja_fail(r, "items: a mapping is needed, not %s", jinja_type_name(in));
    const struct jinja_dict *d = in->u.d;
    struct jinja_list *l = jinja_list_new(r, d->n);
    if (!l || jinja_charge(r, d->n) != 0) return -1;
    for (uint32_t i = 0; i < d->n; i++) {
        struct jinja_list *pair = jinja_list_new(r, 2);
        if (!pair) return -1;
        pair->items[0] = d->keys[i];
        pair->items[1] = d->vals[i];
        l->items[i] = jinja_listv(pair, 1);
    }
    *out = jinja_listv(l, 0);
    return 0;
}

static int f_join(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    static const char *const names[] = {"d", "attribute", NULL};
    struct jinja_val sep = jinja_str("", 0), attr, item;
    struct jinja_list *items;
    struct jinja_buf b = {0};
    if (jinja_args_check(r, a, 2, names, "join") != 0 || jinja_iterate(r, in, &items) != 0) return -1;
    jinja_arg(a, 0, "d", &sep);
    int has_attr = jinja_arg(a, 1, "attribute", &attr), rc = 0;
    for (uint32_t i = 0; i < items->n && rc == 0; i++) {
        item = items->items[i];
        if (has_attr) rc = attr_get(r, &items->items[i], &attr, &item);
        if (rc == 0 && i) rc = jinja_write_str(r, &b, &sep);
        if (rc == 0) rc = jinja_write_str(r, &b, &item);
    }
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    return jinja_buf_take(r, &b, out);
}

static int f_list(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    struct jinja_list *l;
    if (jinja_args_check(r, a, 0, no_names, "list") != 0 || list_copy(r, in, &l) != 0) return -1;
    *out = jinja_listv(l, 0);
    return 0;
}

static int f_map(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    struct jinja_val attr, dflt, name;
    struct jinja_list *l;
    if (list_copy(r, in, &l) != 0) return -1;
    int has_attr = jinja_arg(a, -1, "attribute", &attr), has_default = jinja_arg(a, -1, "default", &dflt);
    if (!has_attr && (!jinja_arg(a, 0, NULL, &name) || name.type != JV_STR))
        return jinja_fail(r, "map: a filter name or attribute= is needed");
    struct jinja_args rest = {a->pos + (a->n_pos > 0), a->n_pos > 0 ? a->n_pos - 1 : 0, a->kw,
                              has_attr ? 0 : a->n_kw};
    for (uint32_t i = 0; i < l->n; i++) {
        struct jinja_val v = l->items[i];
        if (has_attr ? attr_get(r, &v, &attr, &l->items[i])
                     : jinja_filter_by_name(r, &name, &v, &rest, &l->items[i]))
            return -1;
        if (has_attr && has_default && l->items[i].type == JV_UNDEF) l->items[i] = dflt;
    }
    *out = jinja_listv(l, 0);
    return 0;
}

static int f_min_max(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                     struct jinja_val *out, int max)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    struct jinja_val attr, best_key, key;
    struct jinja_list *items;
    if (jinja_args_check(r, a, 2, names, max ? "max" : "min") != 0 || jinja_iterate(r, in, &items) != 0)
        return -1;
    int has_attr = jinja_arg(a, 1, "attribute", &attr), cs = get_bool(a, 0, "case_sensitive");
    *out = jinja_undef(NULL);
    for (uint32_t i = 0; i < items->n; i++) {
        int c = 0;
        key = items->items[i];
        if (has_attr && attr_get(r, &items->items[i], &attr, &key) != 0) return -1;
        if (i && order(r, &key, &best_key, cs, &c) != 0) return -1;
        if (i == 0 || (max ? c > 0 : c < 0)) {
            best_key = key;
            *out = items->items[i];
        }
    }
    return 0;
}

static int f_max(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    return f_min_max(r, in, a, out, 1);
}

static int f_min(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    return f_min_max(r, in, a, out, 0);
}

/* select / reject (attr 0) and selectattr / rejectattr (attr 1). */
static int select_items(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                        struct jinja_val *out, int attr, int keep_if)
{
    struct jinja_val at, test;
    struct jinja_list *items, *l;
    if (jinja_iterate(r, in, &items) != 0 || !(l = jinja_list_new(r, items->n))) return -1;
    if (attr && !jinja_arg(a, 0, NULL, &at))
        return jinja_fail(r, "selectattr / rejectattr: an attribute is needed");
    int has_test = jinja_arg(a, attr, NULL, &test);
    int skip = attr + has_test;
    struct jinja_args rest = {a->pos + (a->n_pos < skip ? a->n_pos : skip),
                              a->n_pos > skip ? a->n_pos - skip : 0, a->kw, a->n_kw};
    l->n = 0;
    for (uint32_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->items[i];
        int res;
        if (attr && attr_get(r, &items->items[i], &at, &v) != 0) return -1;
        if (has_test ? jinja_test_by_name(r, &test, &v, &rest, &res) != 0 : (res = jinja_truthy(&v), 0))
            return -1;
        if (!res == !keep_if) l->items[l->n++] = items->items[i];
    }
    *out = jinja_listv(l, 0);
    return jinja_charge(r, items->n);
}

static int f_select(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    return select_items(r, in, a, out, 0, 1);
}

static int f_reject(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    return select_items(r, in, a, out, 0, 0);
}

static int f_selectattr(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                        struct jinja_val *out)
{
    return select_items(r, in, a, out, 1, 1);
}

static int f_rejectattr(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                        struct jinja_val *out)
{
    return select_items(r, in, a, out, 1, 0);
}

static int f_replace(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                     struct jinja_val *out)
{
    static const char *const names[] = {"old", "new", "count", NULL};
    struct jinja_val s, old, new_, count = jinja_none();
    if (jinja_args_check(r, a, 3, names, "replace") != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    if (!jinja_arg(a, 0, "old", &old) || !jinja_arg(a, 1, "new", &new_) || old.type != JV_STR ||
        new_.type != JV_STR)
        return jinja_fail(r, "replace: old and new strings are needed");
    jinja_arg(a, 2, "count", &count);
    return jinja_str_replace(r, &s, &old, &new_, count.type == JV_INT ? count.u.i : -1, out);
}

static int f_reverse(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                     struct jinja_val *out)
{
    struct jinja_list *items, *l;
    if (jinja_args_check(r, a, 0, no_names, "reverse") != 0 || jinja_iterate(r, in, &items) != 0 ||
        !(l = jinja_list_new(r, items->n)) || jinja_charge(r, items->n) != 0)
        return -1;
    for (uint32_t i = 0; i < l->n; i++)
        l->items[i] = items->items[l->n - 1 - i];
    if (in->type != JV_STR) {
        *out = jinja_listv(l, 0);
        return 0;
    }
    struct jinja_buf b = {0};
    for (uint32_t i = 0; i < l->n; i++)
        if (jinja_put(r, &b, l->items[i].u.s, l->items[i].n) != 0) {
            free(b.p);
            return -1;
        }
    return jinja_buf_take(r, &b, out);
}

static int f_round(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                   struct jinja_val *out)
{
    static const char *const names[] = {"precision", "method", NULL};
    struct jinja_val prec = jinja_int(0), method = jinja_str("common", 6);
    if (jinja_args_check(r, a, 2, names, "round") != 0) return -1;
    if (!jinja_is_num(in)) return jinja_fail(r, "round: a number is needed, not %s", jinja_type_name(in));
    jinja_arg(a, 0, "precision", &prec);
    jinja_arg(a, 1, "method", &method);
    double x = in->type == JV_FLOAT ? in->u.f : (double)in->u.i,
           p = pow(10.0, (double)(prec.type == JV_INT ? prec.u.i : 0));
    char buf[400];
    if (method.type == JV_STR && method.n == 4 && !memcmp(method.u.s, "ceil", 4))
        x = ceil(x * p) / p;
    else if (method.type == JV_STR && method.n == 5 && !memcmp(method.u.s, "floor", 5))
        x = floor(x * p) / p;
    else if (isfinite(x)) { /* Python's round: the exact binary value, ties to even, as printf rounds it */
        snprintf(buf, sizeof buf, "%.*f",
                 (int)(prec.type == JV_INT && prec.u.i > 0 ? (prec.u.i < 30 ? prec.u.i : 30) : 0), x);
        x = strtod(buf, NULL);
    }
    *out = jinja_float(x);
    return 0;
}

static int f_safe(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    *out = *in;
    return jinja_args_check(r, a, 0, no_names, "safe");
}

static int f_sort(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
    struct jinja_val attr;
    struct jinja_list *l;
    if (jinja_args_check(r, a, 3, names, "sort") != 0 || list_copy(r, in, &l) != 0) return -1;
    struct jinja_val *keys = jinja_ralloc(r, (l->n + 1) * sizeof *keys);
    if (!keys) return -1;
    int has_attr = jinja_arg(a, 2, "attribute", &attr);
    for (uint32_t i = 0; i < l->n; i++) {
        keys[i] = l->items[i];
        if (has_attr && attr_get(r, &l->items[i], &attr, &keys[i]) != 0) return -1;
    }
    if (sort_by(r, l->items, keys, l->n, get_bool(a, 1, "case_sensitive"), get_bool(a, 0, "reverse")) != 0)
        return -1;
    *out = jinja_listv(l, 0);
    return 0;
}

static int f_string(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    return jinja_args_check(r, a, 0, no_names, "string") || jinja_to_str(r, in, out) ? -1 : 0;
}

static int f_sum(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                 struct jinja_val *out)
{
    static const char *const names[] = {"attribute", "start", NULL};
    struct jinja_val attr, v;
    struct jinja_list *items;
    if (jinja_args_check(r, a, 2, names, "sum") != 0 || jinja_iterate(r, in, &items) != 0) return -1;
    int has_attr = jinja_arg(a, 0, "attribute", &attr);
    if (!jinja_arg(a, 1, "start", out)) *out = jinja_int(0);
    for (uint32_t i = 0; i < items->n; i++) {
        v = items->items[i];
        if (has_attr && attr_get(r, &items->items[i], &attr, &v) != 0) return -1;
        if (!jinja_is_num(&v) || !jinja_is_num(out))
            return jinja_fail(r, "sum: numbers are needed, not %s", jinja_type_name(&v));
        if (v.type == JV_FLOAT || out->type == JV_FLOAT)
            *out = jinja_float((out->type == JV_FLOAT ? out->u.f : (double)out->u.i) +
                               (v.type == JV_FLOAT ? v.u.f : (double)v.u.i));
        else if (__builtin_add_overflow(out->u.i, v.u.i, &out->u.i))
            return jinja_fail(r, "integer overflow");
        else
            out->type = JV_INT;
    }
    return 0;
}

static int f_tojson(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    struct jinja_val indent = jinja_none(), seps = jinja_none();
    if (jinja_args_check(r, a, 4, names, "tojson") != 0) return -1;
    jinja_arg(a, 1, "indent", &indent);
    jinja_arg(a, 2, "separators", &seps);
    if (indent.type != JV_NONE && indent.type != JV_INT)
        return jinja_fail(r, "tojson: indent must be an integer");
    struct jinja_json_style st = {indent.type == JV_INT ? (int)(indent.u.i < 0    ? 0
                                                                : indent.u.i > 64 ? 64
                                                                                  : indent.u.i)
                                                        : -1,
                                  get_bool(a, 0, "ensure_ascii"), get_bool(a, 3, "sort_keys"),
                                  indent.type == JV_INT ? "," : ", ", ": "};
    char item_sep[64], key_sep[64];
    if (seps.type != JV_NONE) {
        if (seps.type != JV_LIST || seps.u.l->n != 2 || seps.u.l->items[0].type != JV_STR ||
            seps.u.l->items[1].type != JV_STR)
            return jinja_fail(r, "tojson: separators must be two strings");
        snprintf(item_sep, sizeof item_sep, "%.*s", (int)seps.u.l->items[0].n, seps.u.l->items[0].u.s);
        snprintf(key_sep, sizeof key_sep, "%.*s", (int)seps.u.l->items[1].n, seps.u.l->items[1].u.s);
        st.item_sep = item_sep;
        st.key_sep = key_sep;
    }
    struct jinja_buf b = {0};
    if (jinja_write_json(r, &b, in, &st, 0) != 0) {
        free(b.p);
        return -1;
    }
    return jinja_buf_take(r, &b, out);
}

static int f_trim(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                  struct jinja_val *out)
{
    static const char *const names[] = {"chars", NULL};
    struct jinja_val s, chars = jinja_none();
    if (jinja_args_check(r, a, 1, names, "trim") != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    jinja_arg(a, 0, "chars", &chars);
    return jinja_str_strip(r, &s, &chars, 1, 1, out);
}

static int f_unique(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                    struct jinja_val *out)
{
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    struct jinja_val attr;
    struct jinja_list *items, *l;
    if (jinja_args_check(r, a, 2, names, "unique") != 0 || jinja_iterate(r, in, &items) != 0) return -1;
    struct jinja_val *keys = jinja_ralloc(r, (items->n + 1) * sizeof *keys);
    if (!keys || !(l = jinja_list_new(r, items->n))) return -1;
    int has_attr = jinja_arg(a, 1, "attribute", &attr), cs = get_bool(a, 0, "case_sensitive");
    l->n = 0;
    for (uint32_t i = 0; i < items->n; i++) {
        int seen = 0, c;
        keys[l->n] = items->items[i];
        if (has_attr && attr_get(r, &items->items[i], &attr, &keys[l->n]) != 0) return -1;
        for (uint32_t k = 0; k < l->n && !seen; k++) {
            if (jinja_charge(r, 1) != 0) return -1;
            seen = keys[k].type == JV_STR && keys[l->n].type == JV_STR
                       ? order(r, &keys[k], &keys[l->n], cs, &c) == 0 && c == 0
                       : jinja_equal(r, &keys[k], &keys[l->n]);
        }
        if (!seen) l->items[l->n++] = items->items[i];
    }
    *out = jinja_listv(l, 0);
    return 0;
}

static int f_wordcount(struct jinja_render *r, const struct jinja_val *in, const struct jinja_args *a,
                       struct jinja_val *out)
{
    struct jinja_val s;
    if (jinja_args_check(r, a, 0, no_names, "wordcount") != 0 || jinja_to_str(r, in, &s) != 0) return -1;
    int64_t words = 0;
    for (uint32_t i = 0, in_word = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.u.s[i];
        int w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                c >= 0x80;
        words += w && !in_word;
        in_word = (uint32_t)w;
    }
    *out = jinja_int(words);
    return jinja_charge(r, s.n / 16);
}

/* clang-format off */
static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"count", f_length}, {"d", f_default},
    {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items},
    {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower},
    {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
    {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};
/* clang-format on */

int jinja_filter_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (strlen(filters[i].name) == n && memcmp(filters[i].name, name, n) == 0) return (int)i;
    return -1;
}

int jinja_filter_apply(struct jinja_render *r, int id, const struct jinja_val *in, const struct jinja_args *a,
                       struct jinja_val *out)
{
    return filters[id].fn(r, in, a, out);
}

int jinja_filter_by_name(struct jinja_render *r, const struct jinja_val *name, const struct jinja_val *in,
                         const struct jinja_args *a, struct jinja_val *out)
{
    int id = name->type == JV_STR ? jinja_filter_find(name->u.s, name->n) : -1;
    if (id < 0)
        return jinja_fail(r, "no filter named '%.*s'", name->type == JV_STR ? (int)name->n : 1,
                          name->type == JV_STR ? name->u.s : "?");
    return jinja_filter_apply(r, id, in, a, out);
}

/* ---------- tests ---------- */

/* Tests that look at the value's type only. */
static int type_test(int id, const struct jinja_val *v)
{
    uint8_t t = v->type;
    switch (id) {
    case 0:
        return t != JV_UNDEF; /* defined */
    case 1:
        return t == JV_UNDEF; /* undefined */
    case 2:
        return t == JV_NONE; /* none */
    case 3:
        return t == JV_BOOL; /* boolean */
    case 4:
        return t == JV_BOOL && v->u.i; /* true */
    case 5:
        return t == JV_BOOL && !v->u.i; /* false */
    case 6:
        return t == JV_INT; /* integer */
    case 7:
        return t == JV_FLOAT; /* float */
    case 8:
        return jinja_is_num(v); /* number */
    case 9:
        return t == JV_STR; /* string */
    case 10:
        return t == JV_DICT; /* mapping */
    case 11:
        return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF || t == JV_LOOP; /* iterable */
    case 12:
        return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF; /* sequence */
    case 13:
        return t == JV_MACRO || t == JV_FUNC; /* callable */
    default:
        return 0; /* escaped */
    }
}

/* clang-format off */
static const char *const test_names[] = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "escaped",
    /* 15.. take an argument */
    "sameas", "in", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">",
    "ge", ">=", "divisibleby",
    /* 33.. */
    "odd", "even", "lower", "upper", "filter", "test",
};
/* clang-format on */

static int test_cmp(struct jinja_render *r, const char *name, const struct jinja_val *v,
                    const struct jinja_val *o, int *res)
{
    int c;
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
        *res = jinja_equal(r, v, o);
    else if (!strcmp(name, "ne") || !strcmp(name, "!="))
        *res = !jinja_equal(r, v, o);
    else if (jinja_compare(r, v, o, &c) != 0)
        return -1;
    else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<"))
        *res = c < 0;
    else if (!strcmp(name, "le") || !strcmp(name, "<="))
        *res = c <= 0;
    else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">"))
        *res = c > 0;
    else
        *res = c >= 0;
    return 0;
}

static int test_arg(struct jinja_render *r, int id, const struct jinja_val *v, const struct jinja_val *o,
                    int *res)
{
    const char *name = test_names[id];
    if (id == 15) { /* sameas: the same object */
        *res =
            v->type == o->type && (v->type == JV_NONE || v->type == JV_UNDEF ||
                                   (v->type == JV_STR ? v->u.s == o->u.s && v->n == o->n : v->u.i == o->u.i));
        return 0;
    }
    if (id == 16) { /* in */
        struct jinja_list *items;
        if (o->type == JV_STR) {
            *res = v->type == JV_STR && (v->n == 0 || memmem(o->u.s, o->n, v->u.s, v->n) != NULL);
            return 0;
        }
        if (o->type == JV_DICT) return (*res = jinja_dict_get(r, o->u.d, *v, &(struct jinja_val){0})), 0;
        if (jinja_iterate(r, o, &items) != 0) return -1;
        *res = 0;
        for (uint32_t i = 0; i < items->n && !*res; i++)
            *res = jinja_equal(r, v, &items->items[i]);
        return 0;
    }
    if (id == 32) { /* divisibleby */
        if (!jinja_is_num(v) || !jinja_is_num(o)) return jinja_fail(r, "divisibleby: numbers are needed");
        double x = v->type == JV_FLOAT ? v->u.f : (double)v->u.i,
               y = o->type == JV_FLOAT ? o->u.f : (double)o->u.i;
        if (v->type == JV_FLOAT || o->type == JV_FLOAT)
            *res = y != 0 && fmod(x, y) == 0;
        else if (o->u.i == 0)
            return jinja_fail(r, "division by zero");
        else
            *res = o->u.i == -1 || v->u.i % o->u.i == 0;
        return 0;
    }
    return test_cmp(r, name, v, o, res);
}

static int test_str_case(const struct jinja_val *v, int upper)
{
    int cased = 0;
    for (uint32_t i = 0; v->type == JV_STR && i < v->n; i++) {
        char c = v->u.s[i];
        if (c >= 'a' && c <= 'z') {
            if (upper) return 0;
            cased = 1;
        } else if (c >= 'A' && c <= 'Z') {
            if (!upper) return 0;
            cased = 1;
        }
    }
    return cased;
}

int jinja_test_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof test_names / sizeof test_names[0]; i++)
        if (strlen(test_names[i]) == n && memcmp(test_names[i], name, n) == 0) return (int)i;
    return -1;
}

int jinja_test_apply(struct jinja_render *r, int id, const struct jinja_val *v, const struct jinja_args *a,
                     int *res)
{
    struct jinja_val o;
    const char *name = test_names[id];
    if (id < 15) {
        *res = type_test(id, v);
        return jinja_args_check(r, a, 0, no_names, name);
    }
    if (id < 33) {
        if (jinja_args_check(r, a, 1, no_names, name) != 0) return -1;
        if (!jinja_arg(a, 0, NULL, &o)) return jinja_fail(r, "the test '%s' needs an argument", name);
        return test_arg(r, id, v, &o, res);
    }
    if (jinja_args_check(r, a, 0, no_names, name) != 0) return -1;
    if (id == 33 || id == 34) {
        if (v->type != JV_INT && v->type != JV_BOOL)
            return jinja_fail(r, "the test '%s' needs an integer", name);
        *res = (v->u.i % 2 != 0) == (id == 33);
    } else if (id == 35 || id == 36) {
        *res = test_str_case(v, id == 36);
    } else {
        *res = v->type == JV_STR &&
               (id == 37 ? jinja_filter_find(v->u.s, v->n) : jinja_test_find(v->u.s, v->n)) >= 0;
    }
    return 0;
}

int jinja_test_by_name(struct jinja_render *r, const struct jinja_val *name, const struct jinja_val *v,
                       const struct jinja_args *a, int *res)
{
    int id = name->type == JV_STR ? jinja_test_find(name->u.s, name->n) : -1;
    if (id < 0)
        return jinja_fail(r, "no test named '%.*s'", name->type == JV_STR ? (int)name->n : 1,
                          name->type == JV_STR ? name->u.s : "?");
    return jinja_test_apply(r, id, v, a, res);
}
