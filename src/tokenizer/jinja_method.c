/* jinja_method — Python's str / dict / list methods as templates call them (content.strip(),
 * message.get('x'), ...), the loop's cycle(), the global functions range(), namespace(), dict() and
 * raise_exception(), and the string operations filters share.
 *
 * Sandbox: methods that would change a list or dict (append, pop, update, ...) are refused, as HF's
 * ImmutableSandboxedEnvironment refuses them; range() stops at 100,000 items as Jinja's sandbox does.
 * Letter case and character classes are ASCII (other characters are left as they are / count as letters).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

enum { RANGE_MAX = 100000 };

static int name_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

static int take(struct jinja_render *r, struct jinja_buf *b, int rc, struct jinja_val *out)
{
    if (rc != 0) {
        free(b->p);
        memset(b, 0, sizeof *b);
        return -1;
    }
    return jinja_buf_take(r, b, out);
}

/* ---------- string operations ---------- */

/* Does the code point at s[i] (bytes k) appear in chars? */
static int in_chars(const struct jinja_val *chars, const char *s, size_t k)
{
    return chars->n >= k && memmem(chars->u.s, chars->n, s, k) != NULL;
}

static size_t char_len(const char *s, size_t n, size_t i)
{
    return jinja_utf8_offset(s + i, n - i, 1);
}

int jinja_str_strip(struct jinja_render *r, const struct jinja_val *s, const struct jinja_val *chars,
                    int left, int right, struct jinja_val *out)
{
    size_t a = 0, b = s->n;
    if (chars && chars->type == JV_STR) {
        while (left && a < b && in_chars(chars, s->u.s + a, char_len(s->u.s, b, a)))
            a += char_len(s->u.s, b, a);
        while (right && b > a) {
            size_t start = b - 1;
            while (start > a && ((unsigned char)s->u.s[start] & 0xC0) == 0x80)
                start--;
            if (!in_chars(chars, s->u.s + start, b - start)) break;
            b = start;
        }
    } else if (chars && chars->type != JV_NONE && chars->type != JV_UNDEF) {
        return jinja_fail(r, "strip: the characters must be a string, not %s", jinja_type_name(chars));
    } else {
        if (left) a = jinja_space_prefix(s->u.s, s->n);
        if (right && b > a) b -= jinja_space_suffix(s->u.s + a, b - a);
    }
    *out = jinja_str(s->u.s + a, b - a);
    return jinja_charge(r, s->n / 32);
}

static int is_upper(char c)
{
    return c >= 'A' && c <= 'Z';
}

static int is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

/* Jinja's title filter: a word starts after whitespace, '-', '(', '{', '[' or '<'. */
static int title_break(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

int jinja_str_case(struct jinja_render *r, const struct jinja_val *s, char how, struct jinja_val *out)
{
    char *o = jinja_ralloc(r, s->n + 1);
    if (!o || jinja_charge(r, s->n / 16) != 0) return -1;
    int start = 1, prev_cased = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        char c = s->u.s[i];
        int up = 0;
        switch (how) {
        case 'u':
            up = 1;
            break;
        case 'l':
            up = 0;
            break;
        case 'c':
            up = i == 0;
            break;
        case 's':
            up = is_lower(c);
            break;
        case 't':
            up = start;
            start = title_break(c);
            break; /* Jinja's title filter */
        default:
            up = !prev_cased;
            prev_cased = is_upper(c) || is_lower(c);
            break; /* str.title() */
        }
        if (how == 't' && (unsigned char)c >= 0x80) start = 0;
        o[i] = up && is_lower(c) ? (char)(c - 32) : !up && is_upper(c) ? (char)(c + 32) : c;
    }
    *out = jinja_str(o, s->n);
    return 0;
}

int jinja_str_replace(struct jinja_render *r, const struct jinja_val *s, const struct jinja_val *old,
                      const struct jinja_val *new_, int64_t count, struct jinja_val *out)
{
    struct jinja_buf b = {0};
    int rc = 0;
    size_t i = 0;
    if (old->n == 0) { /* Python puts new before every character and at the end */
        for (; rc == 0 && i <= s->n && count != 0; count--) {
            size_t k = i < s->n ? char_len(s->u.s, s->n, i) : 1;
            rc = jinja_put(r, &b, new_->u.s, new_->n) || jinja_put(r, &b, s->u.s + i, i < s->n ? k : 0);
            i += k;
        }
        if (rc == 0 && i < s->n) rc = jinja_put(r, &b, s->u.s + i, s->n - i);
        return take(r, &b, rc, out);
    }
    while (rc == 0 && count != 0) {
        const char *hit = memmem(s->u.s + i, s->n - i, old->u.s, old->n);
        if (!hit) break;
        size_t at = (size_t)(hit - s->u.s);
        rc = jinja_put(r, &b, s->u.s + i, at - i) || jinja_put(r, &b, new_->u.s, new_->n);
        i = at + old->n;
        count--;
    }
    if (rc == 0) rc = jinja_put(r, &b, s->u.s + i, s->n - i);
    return take(r, &b, rc, out);
}

/* The length of the line break at s[i] (0: none). */
static size_t line_break(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == '\r') return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) return 1;
    if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9))
        return 3;
    return 0;
}

int jinja_str_splitlines(struct jinja_render *r, const struct jinja_val *s, int keepends,
                         struct jinja_list **out)
{
    uint32_t count = 0;
    for (size_t i = 0, k; i < s->n; i += k ? k : 1)
        if ((k = line_break(s->u.s, s->n, i)) || i + 1 == s->n) count++;
    struct jinja_list *l = jinja_list_new(r, count);
    if (!l || jinja_charge(r, s->n / 16) != 0) return -1;
    l->n = 0;
    size_t start = 0;
    for (size_t i = 0, k; i < s->n; i += k ? k : 1) {
        k = line_break(s->u.s, s->n, i);
        if (!k && i + 1 < s->n) continue;
        size_t end = k ? i : s->n;
        l->items[l->n++] = jinja_str(s->u.s + start, (keepends ? end + k : end) - start);
        start = end + k;
    }
    *out = l;
    return 0;
}

/* Offset of the next separator in s[from..to): a run of whitespace (sep NULL) or sep; *len its length. */
static size_t next_sep(const char *s, size_t from, size_t to, const struct jinja_val *sep, size_t *len)
{
    if (sep) {
        const char *h = memmem(s + from, to - from, sep->u.s, sep->n);
        *len = h ? sep->n : 0;
        return h ? (size_t)(h - s) : to;
    }
    size_t i = from;
    while (i < to && !jinja_space_prefix(s + i, to - i))
        i += char_len(s, to, i);
    *len = jinja_space_prefix(s + i, to - i);
    return i;
}

/* The last separator in s[from..to): its offset, or SIZE_MAX. */
static size_t prev_sep(const char *s, size_t from, size_t to, const struct jinja_val *sep, size_t *len)
{
    if (sep) {
        for (size_t i = to >= from + sep->n ? to - sep->n + 1 : from; i-- > from;)
            if (memcmp(s + i, sep->u.s, sep->n) == 0) {
                *len = sep->n;
                return i;
            }
        return SIZE_MAX;
    }
    size_t i = to;
    while (i > from && !jinja_space_suffix(s + from, i - from)) {
        i--;
        while (i > from && ((unsigned char)s[i] & 0xC0) == 0x80)
            i--;
    }
    *len = jinja_space_suffix(s + from, i - from);
    return i > from ? i - *len : SIZE_MAX;
}

/* Python's str.split / str.rsplit; sep NULL splits at runs of whitespace and drops empty items. */
static int str_split(struct jinja_render *r, const struct jinja_val *s, const struct jinja_val *sep,
                     int64_t maxsplit, int right, struct jinja_val *out)
{
    if (sep && sep->n == 0) return jinja_fail(r, "split: empty separator");
    struct jinja_list *l = jinja_list_new(r, s->n + 1);
    if (!l || jinja_charge(r, s->n / 8) != 0) return -1;
    l->n = 0;
    const char *p = s->u.s;
    size_t a = 0, b = s->n, len;
    for (;; maxsplit--) {
        if (!sep) { /* whitespace at the end being split from is no item */
            if (right)
                b -= jinja_space_suffix(p + a, b - a);
            else
                a += jinja_space_prefix(p + a, b - a);
            if (a == b) break;
        }
        size_t at = maxsplit == 0 ? SIZE_MAX
                    : right       ? prev_sep(p, a, b, sep, &len)
                                  : next_sep(p, a, b, sep, &len);
        if (at == SIZE_MAX || (!right && at == b)) {
            l->items[l->n++] = jinja_str(p + a, b - a);
            break;
        }
        if (right) {
            l->items[l->n++] = jinja_str(p + at + len, b - at - len);
            b = at;
        } else {
            l->items[l->n++] = jinja_str(p + a, at - a);
            a = at + len;
        }
    }
    for (uint32_t i = 0; right && i < l->n / 2; i++) {
        struct jinja_val t = l->items[i];
        l->items[i] = l->items[l->n - 1 - i];
        l->items[l->n - 1 - i] = t;
    }
    *out = jinja_listv(l, 0);
    return 0;
}

/* One printf-style conversion of arg (spec is "%" flags width .precision conv). */
static int format_one(struct jinja_render *r, struct jinja_buf *b, const char *spec, size_t n,
                      const struct jinja_val *arg)
{
    char conv = spec[n - 1], cspec[48], tmp[512];
    if (n + 4 > sizeof cspec) return jinja_fail(r, "format: a conversion spec too long");
    if (conv == 's' || conv == 'r' || conv == 'a') {
        struct jinja_buf t = {0};
        struct jinja_val s;
        if ((conv == 's' ? jinja_write_str(r, &t, arg) : jinja_write_repr(r, &t, arg)) != 0 ||
            jinja_buf_take(r, &t, &s) != 0)
            return -1;
        snprintf(cspec, sizeof cspec, "%.*ss", (int)n - 1, spec);
        size_t need = (size_t)snprintf(NULL, 0, cspec, "") + s.n + 1;
        char *o = jinja_ralloc(r, need + 64);
        char *z = jinja_ralloc(r, s.n + 1);
        if (!o || !z) return -1;
        memcpy(z, s.u.s, s.n);
        int w = snprintf(o, need + 64, cspec, z);
        return jinja_put(r, b, o, w > 0 ? (size_t)w : 0);
    }
    if (!jinja_is_num(arg))
        return jinja_fail(r, "format: %%%c needs a number, not %s", conv, jinja_type_name(arg));
    double f = arg->type == JV_FLOAT ? arg->u.f : (double)arg->u.i;
    if (strchr("dioxXuc", conv)) {
        long long i = arg->type == JV_FLOAT ? (long long)f : (long long)arg->u.i;
        snprintf(cspec, sizeof cspec, "%.*sll%c", (int)n - 1, spec,
                 conv == 'i' || conv == 'u' ? 'd'
                 : conv == 'c'              ? 'c'
                                            : conv);
        if (conv == 'c') snprintf(cspec, sizeof cspec, "%.*sc", (int)n - 1, spec);
        if (conv == 'c' && (i <= 0 || i > 127)) return jinja_fail(r, "format: %%c takes an ASCII code here");
        int w = conv == 'c' ? snprintf(tmp, sizeof tmp, cspec, (int)i) : snprintf(tmp, sizeof tmp, cspec, i);
        return jinja_put(r, b, tmp, w > 0 ? (size_t)(w < (int)sizeof tmp ? w : (int)sizeof tmp - 1) : 0);
    }
    if (!strchr("eEfFgG", conv)) return jinja_fail(r, "format: unsupported conversion %%%c", conv);
    snprintf(cspec, sizeof cspec, "%.*s", (int)n, spec);
    int w = snprintf(tmp, sizeof tmp, cspec, f);
    return jinja_put(r, b, tmp, w > 0 ? (size_t)(w < (int)sizeof tmp ? w : (int)sizeof tmp - 1) : 0);
}

int jinja_str_format(struct jinja_render *r, const struct jinja_val *fmt, const struct jinja_val *args,
                     int n_args, struct jinja_val *out)
{
    struct jinja_buf b = {0};
    const char *s = fmt->u.s;
    int used = 0, rc = 0;
    for (size_t i = 0; i < fmt->n && rc == 0; i++) {
        if (s[i] != '%') {
            rc = jinja_put(r, &b, s + i, 1);
            continue;
        }
        size_t j = i + 1;
        while (j < fmt->n && strchr("-+ #0", s[j]))
            j++;
        for (int k = 0; k < 2; k++) {
            while (j < fmt->n && s[j] >= '0' && s[j] <= '9' && j - i < 20)
                j++;
            if (k == 0 && j < fmt->n && s[j] == '.')
                j++;
            else
                break;
        }
        while (j < fmt->n && strchr("hlL", s[j]))
            j++;
        if (j >= fmt->n)
            rc = jinja_fail(r, "format: an incomplete conversion");
        else if (s[j] == '%')
            rc = jinja_put(r, &b, "%", 1);
        else if (used >= n_args)
            rc = jinja_fail(r, "format: not enough arguments for the format string");
        else
            rc = format_one(r, &b, s + i, j - i + 1, &args[used++]);
        i = j;
    }
    if (rc == 0 && used < n_args) rc = jinja_fail(r, "format: not all arguments converted");
    return take(r, &b, rc, out);
}

/* ---------- methods ---------- */

static int want_str(struct jinja_render *r, const struct jinja_args *a, int i, const char *name,
                    const char *what, struct jinja_val *v)
{
    if (!jinja_arg(a, i, name, v) || v->type != JV_STR)
        return jinja_fail(r, "%s: a string argument is needed", what);
    return 0;
}

/* startswith / endswith: a string or a tuple of them. */
static int str_affix(struct jinja_render *r, const struct jinja_val *s, const struct jinja_args *a, int end,
                     struct jinja_val *out)
{
    struct jinja_val x;
    if (jinja_args_check(r, a, 1, NULL, end ? "endswith" : "startswith") != 0 || !jinja_arg(a, 0, NULL, &x))
        return -1;
    const struct jinja_val *opts = x.type == JV_LIST ? x.u.l->items : &x;
    uint32_t n = x.type == JV_LIST ? x.u.l->n : 1;
    int hit = 0;
    for (uint32_t i = 0; i < n && !hit; i++) {
        if (opts[i].type != JV_STR)
            return jinja_fail(r, "%s: strings are needed", end ? "endswith" : "startswith");
        hit = opts[i].n <= s->n && memcmp(s->u.s + (end ? s->n - opts[i].n : 0), opts[i].u.s, opts[i].n) == 0;
    }
    *out = jinja_bool(hit);
    return 0;
}

/* find / rfind / index / rindex / count of a substring (positions in code points, as Python). */
static int str_search(struct jinja_render *r, const struct jinja_val *s, const char *m,
                      const struct jinja_args *a, struct jinja_val *out)
{
    struct jinja_val sub;
    if (jinja_args_check(r, a, 1, NULL, m) != 0 || want_str(r, a, 0, NULL, m, &sub) != 0 ||
        jinja_charge(r, s->n / 16))
        return -1;
    int rev = m[0] == 'r', count = m[0] == 'c';
    int64_t found = -1, hits = 0;
    for (size_t i = 0; i + sub.n <= s->n;) {
        if (memcmp(s->u.s + i, sub.u.s, sub.n) != 0) {
            i++;
            continue;
        }
        hits++;
        found = (int64_t)i;
        if (!rev && !count) break;
        i += sub.n ? sub.n : 1;
    }
    if (count) {
        *out = jinja_int(sub.n ? hits : (int64_t)jinja_utf8_len(s->u.s, s->n) + 1);
        return 0;
    }
    if (found < 0 && strstr(m, "index")) return jinja_fail(r, "%s: substring not found", m);
    *out = jinja_int(found < 0 ? -1 : (int64_t)jinja_utf8_len(s->u.s, (size_t)found));
    return 0;
}

static int str_class(const struct jinja_val *s, const char *m)
{
    if (s->n == 0) return 0;
    int cased = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->u.s[i];
        int digit = c >= '0' && c <= '9', alpha = is_upper((char)c) || is_lower((char)c) || c >= 0x80;
        if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal")) {
            if (!digit) return 0;
        } else if (!strcmp(m, "isalpha")) {
            if (!alpha) return 0;
        } else if (!strcmp(m, "isalnum")) {
            if (!alpha && !digit) return 0;
        } else if (!strcmp(m, "isspace")) {
            return jinja_space_prefix(s->u.s, s->n) == s->n;
        } else if (!strcmp(m, "islower") || !strcmp(m, "isupper")) {
            if (is_upper((char)c) || is_lower((char)c)) cased = 1;
            if ((m[2] == 'l' && is_upper((char)c)) || (m[2] == 'u' && is_lower((char)c))) return 0;
        }
    }
    return strcmp(m, "islower") && strcmp(m, "isupper") ? 1 : cased;
}

static int str_join(struct jinja_render *r, const struct jinja_val *sep, const struct jinja_args *a,
                    struct jinja_val *out)
{
    struct jinja_val seq;
    struct jinja_list *items;
    struct jinja_buf b = {0};
    if (jinja_args_check(r, a, 1, NULL, "join") != 0 || !jinja_arg(a, 0, NULL, &seq) ||
        jinja_iterate(r, &seq, &items) != 0)
        return -1;
    int rc = 0;
    for (uint32_t i = 0; i < items->n && rc == 0; i++) {
        if (items->items[i].type != JV_STR)
            rc = jinja_fail(r, "join: item %u is %s, not a string", i, jinja_type_name(&items->items[i]));
        else
            rc = (i && jinja_put(r, &b, sep->u.s, sep->n)) ||
                 jinja_put(r, &b, items->items[i].u.s, items->items[i].n);
    }
    return take(r, &b, rc, out);
}

static int str_method2(struct jinja_render *r, const struct jinja_val *s, const char *m,
                       const struct jinja_args *a, struct jinja_val *out)
{
    static const char *const split_names[] = {"sep", "maxsplit", NULL}, *const lines_names[] = {"keepends",
                                                                                                NULL};
    struct jinja_val x, y, z;
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        struct jinja_val sep = jinja_none(), maxsplit = jinja_int(-1);
        if (jinja_args_check(r, a, 2, split_names, m) != 0) return -1;
        jinja_arg(a, 0, "sep", &sep);
        jinja_arg(a, 1, "maxsplit", &maxsplit);
        if ((sep.type != JV_NONE && sep.type != JV_STR) || maxsplit.type != JV_INT)
            return jinja_fail(r, "%s: bad arguments", m);
        return str_split(r, s, sep.type == JV_STR ? &sep : NULL, maxsplit.u.i, m[0] == 'r', out);
    }
    if (!strcmp(m, "splitlines")) {
        struct jinja_list *l;
        struct jinja_val keepends = jinja_bool(0);
        if (jinja_args_check(r, a, 1, lines_names, m) != 0) return -1;
        jinja_arg(a, 0, "keepends", &keepends);
        if (jinja_str_splitlines(r, s, jinja_truthy(&keepends), &l) != 0) return -1;
        *out = jinja_listv(l, 0);
        return 0;
    }
    if (!strcmp(m, "replace")) {
        z = jinja_int(-1);
        if (jinja_args_check(r, a, 3, NULL, m) != 0 || want_str(r, a, 0, NULL, m, &x) ||
            want_str(r, a, 1, NULL, m, &y))
            return -1;
        jinja_arg(a, 2, NULL, &z);
        return jinja_str_replace(r, s, &x, &y, z.type == JV_INT ? z.u.i : -1, out);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) return str_affix(r, s, a, m[0] == 'e', out);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") ||
        !strcmp(m, "count"))
        return str_search(r, s, m, a, out);
    if (!strcmp(m, "join")) return str_join(r, s, a, out);
    if (!strncmp(m, "is", 2) && strlen(m) < 12) {
        if (jinja_args_check(r, a, 0, NULL, m) != 0) return -1;
        *out = jinja_bool(str_class(s, m));
        return 0;
    }
    return 1;
}

/* A method of a string: 0 / -1, or 1 when there is no such method. */
static int str_method(struct jinja_render *r, const struct jinja_val *s, const char *m,
                      const struct jinja_args *a, struct jinja_val *out)
{
    static const char *const cases[] = {"upper", "lower", "capitalize", "title", "swapcase"};
    static const char how[] = {'u', 'l', 'c', 'T', 's'};
    struct jinja_val chars = jinja_none();
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        if (jinja_args_check(r, a, 1, NULL, m) != 0) return -1;
        jinja_arg(a, 0, NULL, &chars);
        return jinja_str_strip(r, s, &chars, m[0] != 'r', m[0] != 'l', out);
    }
    for (int i = 0; i < 5; i++)
        if (!strcmp(m, cases[i]))
            return jinja_args_check(r, a, 0, NULL, m) || jinja_str_case(r, s, how[i], out) ? -1 : 0;
    return str_method2(r, s, m, a, out);
}

static int dict_method(struct jinja_render *r, const struct jinja_val *d, const char *m,
                       const struct jinja_args *a, struct jinja_val *out)
{
    struct jinja_val key;
    if (!strcmp(m, "get")) {
        if (jinja_args_check(r, a, 2, NULL, m) != 0 || !jinja_arg(a, 0, NULL, &key))
            return jinja_fail(r, "get: a key is needed");
        if (!jinja_dict_get(r, d->u.d, key, out) && !jinja_arg(a, 1, NULL, out)) *out = jinja_none();
        return 0;
    }
    int which = !strcmp(m, "items") ? 2 : !strcmp(m, "keys") ? 0 : !strcmp(m, "values") ? 1 : -1;
    if (which < 0) return 1;
    if (jinja_args_check(r, a, 0, NULL, m) != 0) return -1;
    const struct jinja_dict *dd = d->u.d;
    struct jinja_list *l = jinja_list_new(r, dd->n);
    if (!l || jinja_charge(r, dd->n) != 0) return -1;
    for (uint32_t i = 0; i < dd->n; i++) {
        if (which < 2) {
            l->items[i] = which ? dd->vals[i] : dd->keys[i];
            continue;
        }
        struct jinja_list *pair = jinja_list_new(r, 2);
        if (!pair) return -1;
        pair->items[0] = dd->keys[i];
        pair->items[1] = dd->vals[i];
        l->items[i] = jinja_listv(pair, 1);
    }
    *out = jinja_listv(l, 0);
    return 0;
}

static int list_method(struct jinja_render *r, const struct jinja_val *l, const char *m,
                       const struct jinja_args *a, struct jinja_val *out)
{
    struct jinja_val x;
    if (strcmp(m, "index") && strcmp(m, "count")) return 1;
    if (jinja_args_check(r, a, 1, NULL, m) != 0 || !jinja_arg(a, 0, NULL, &x))
        return jinja_fail(r, "%s: an argument is needed", m);
    int64_t hits = 0, first = -1;
    for (uint32_t i = 0; i < l->u.l->n; i++)
        if (jinja_equal(r, &l->u.l->items[i], &x)) {
            hits++;
            if (first < 0) first = i;
        }
    if (m[0] == 'i' && first < 0) return jinja_fail(r, "index: the value is not in the list");
    *out = jinja_int(m[0] == 'i' ? first : hits);
    return 0;
}

int jinja_method_call(struct jinja_render *r, const struct jinja_val *obj, const char *name, size_t n,
                      const struct jinja_args *a, struct jinja_val *out)
{
    static const char *const mutators[] = {"append",  "extend", "insert",  "pop",    "remove",
                                           "clear",   "sort",   "reverse", "update", "setdefault",
                                           "popitem", "add",    "discard", NULL};
    char m[32];
    if (obj->type == JV_UNDEF) return jinja_fail_undefined(r, obj);
    if (n >= sizeof m)
        return jinja_fail(r, "'%s' object has no method '%.*s'", jinja_type_name(obj), (int)(n < 64 ? n : 64),
                          name);
    memcpy(m, name, n);
    m[n] = '\0';
    int rc = 1;
    if (obj->type == JV_STR)
        rc = str_method(r, obj, m, a, out);
    else if (obj->type == JV_DICT)
        rc = dict_method(r, obj, m, a, out);
    else if (obj->type == JV_LIST)
        rc = list_method(r, obj, m, a, out);
    else if (obj->type == JV_LOOP && !strcmp(m, "cycle")) {
        if (a->n_pos == 0) return jinja_fail(r, "loop.cycle: no items to cycle through");
        *out = a->pos[obj->u.loop->i % (uint32_t)a->n_pos];
        return 0;
    }
    if (rc <= 0) return rc;
    for (int i = 0; mutators[i]; i++)
        if (!strcmp(m, mutators[i]) && (obj->type == JV_LIST || obj->type == JV_DICT || obj->type == JV_NS))
            return jinja_fail(r, "'%s' changes a %s, which the sandbox forbids", m, jinja_type_name(obj));
    return jinja_fail(r, "'%s' object has no method '%s'", jinja_type_name(obj), m);
}

/* ---------- global functions ---------- */

static int fn_range(struct jinja_render *r, const struct jinja_args *a, struct jinja_val *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return jinja_fail(r, "range() takes 1 to 3 integers");
    for (int i = 0; i < a->n_pos; i++) {
        if (a->pos[i].type != JV_INT && a->pos[i].type != JV_BOOL)
            return jinja_fail(r, "range() takes integers, not %s", jinja_type_name(&a->pos[i]));
        v[a->n_pos == 1 ? 1 : i] = a->pos[i].u.i;
    }
    if (v[2] == 0) return jinja_fail(r, "range() step must not be zero");
    int64_t count = 0;
    if (v[2] > 0 && v[1] > v[0])
        count = (int64_t)(((uint64_t)v[1] - (uint64_t)v[0] - 1) / (uint64_t)v[2]) + 1;
    if (v[2] < 0 && v[0] > v[1])
        count = (int64_t)(((uint64_t)v[0] - (uint64_t)v[1] - 1) / (uint64_t)-v[2]) + 1;
    if (count > RANGE_MAX || count < 0) return jinja_fail(r, "range() of more than %d items", RANGE_MAX);
    struct jinja_list *l = jinja_list_new(r, (size_t)count);
    if (!l || jinja_charge(r, (uint64_t)count) != 0) return -1;
    for (int64_t i = 0; i < count; i++)
        l->items[i] = jinja_int(v[0] + i * v[2]);
    *out = jinja_listv(l, 0);
    return 0;
}

/* namespace(...) and dict(...): a mapping or pairs as the one positional argument, then keywords. */
static int fn_mapping(struct jinja_render *r, const struct jinja_args *a, int ns, struct jinja_val *out)
{
    struct jinja_dict *d = jinja_dict_new(r, 4);
    if (!d || a->n_pos > 1)
        return d ? jinja_fail(r, "%s() takes at most one positional argument", ns ? "namespace" : "dict")
                 : -1;
    if (a->n_pos == 1) {
        const struct jinja_val *m = &a->pos[0];
        if (m->type == JV_DICT || m->type == JV_NS) {
            for (uint32_t i = 0; i < m->u.d->n; i++)
                if (jinja_dict_set(r, d, m->u.d->keys[i], m->u.d->vals[i]) != 0) return -1;
        } else if (m->type == JV_LIST) {
            for (uint32_t i = 0; i < m->u.l->n; i++) {
                const struct jinja_val *p = &m->u.l->items[i];
                if (p->type != JV_LIST || p->u.l->n != 2) return jinja_fail(r, "dict(): items must be pairs");
                if (jinja_dict_set(r, d, p->u.l->items[0], p->u.l->items[1]) != 0) return -1;
            }
        } else {
            return jinja_fail(r, "%s(): cannot make a mapping of %s", ns ? "namespace" : "dict",
                              jinja_type_name(m));
        }
    }
    for (int i = 0; i < a->n_kw; i++)
        if (jinja_dict_set(r, d, jinja_str(a->kw[i].name, a->kw[i].len), a->kw[i].v) != 0) return -1;
    *out = jinja_dictv(d, ns);
    return 0;
}

static int fn_raise(struct jinja_render *r, const struct jinja_args *a)
{
    struct jinja_val msg = jinja_str("raise_exception() was called", 28), s;
    jinja_arg(a, 0, NULL, &msg);
    if (jinja_to_str(r, &msg, &s) != 0) return -1;
    if (!r->failed) {
        r->failed = r->raised = 1;
        err_set(r->e, "%.*s", (int)(s.n < 900 ? s.n : 900), s.u.s);
    }
    return -1;
}

static const char *const funcs[] = {"range", "namespace", "dict", "raise_exception"};

int jinja_func_find(const char *name, size_t n)
{
    for (int i = 0; i < (int)(sizeof funcs / sizeof funcs[0]); i++)
        if (name_is(name, n, funcs[i])) return i;
    return -1;
}

const char *jinja_func_name(int id)
{
    return id >= 0 && id < (int)(sizeof funcs / sizeof funcs[0]) ? funcs[id] : "?";
}

int jinja_func_call(struct jinja_render *r, int id, const struct jinja_args *a, struct jinja_val *out)
{
    switch (id) {
    case 0:
        return fn_range(r, a, out);
    case 1:
    case 2:
        return fn_mapping(r, a, id == 1, out);
    default:
        return fn_raise(r, a);
    }
}
