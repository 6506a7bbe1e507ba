/* regex — see regex.h. A recursive-descent parser: alt := cat ('|' cat)*, cat := piece*, piece := atom
 * quantifier*, atom := group | class | '.' | escape | literal.
 */
#include "constrain/regex.h"

#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

struct rx {
    struct expr_rules *r;
    const char *s;
    size_t n, i;
    int json;
    int depth;
    struct err *e;
    int failed;
};

static int rx_fail(struct rx *p, const char *what)
{
    if (!p->failed) err_set(p->e, "%s at offset %zu", what, p->i);
    p->failed = 1;
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* n hex digits at s[*at..) into *cp. */
static int read_hex(const char *s, size_t len, size_t *at, int n, uint32_t *cp)
{
    uint32_t v = 0;
    for (int k = 0; k < n; k++) {
        if (*at >= len || hexval(s[*at]) < 0) return -1;
        v = v * 16 + (uint32_t)hexval(s[(*at)++]);
    }
    *cp = v;
    return 0;
}

static int add_ascii_class(struct expr_cpset *o, char c)
{
    switch (c) {
    case 'd':
        return expr_cpset_add(o, '0', '9');
    case 'w':
        return expr_cpset_add(o, '0', '9') || expr_cpset_add(o, 'A', 'Z') || expr_cpset_add(o, 'a', 'z') ||
               expr_cpset_add(o, '_', '_');
    case 's':
        return expr_cpset_add(o, '\t', '\r') || expr_cpset_add(o, ' ', ' '); /* \t \n \v \f \r and space */
    }
    return -1;
}

int regex_parse_escape(const char *s, size_t len, size_t *at, struct expr_cpset *out, struct err *e)
{
    size_t start = *at - 1;
    if (*at >= len) return err_set(e, "a pattern cannot end with a backslash (offset %zu)", start);
    char c = s[(*at)++];
    uint32_t cp;
    switch (c) {
    case 'd':
    case 'w':
    case 's':
    case 'D':
    case 'W':
    case 'S':
        if (add_ascii_class(out, (char)(c | 0x20))) return err_set(e, "out of memory");
        if (c < 'a' && expr_cpset_negate(out)) return err_set(e, "out of memory");
        return 0;
    case 'n':
        cp = '\n';
        break;
    case 't':
        cp = '\t';
        break;
    case 'r':
        cp = '\r';
        break;
    case 'f':
        cp = '\f';
        break;
    case 'v':
        cp = '\v';
        break;
    case '0':
        cp = 0;
        break;
    case 'x':
        if (read_hex(s, len, at, 2, &cp)) return err_set(e, "\\x needs two hex digits (offset %zu)", start);
        break;
    case 'u':
        if (*at < len && s[*at] == '{') {
            (*at)++;
            cp = 0;
            int n = 0;
            while (*at < len && hexval(s[*at]) >= 0 && n < 7)
                cp = cp * 16 + (uint32_t)hexval(s[(*at)++]), n++;
            if (!n || *at >= len || s[*at] != '}' || cp > EXPR_MAX_CP)
                return err_set(e, "bad \\u{...} escape (offset %zu)", start);
            (*at)++;
        } else if (read_hex(s, len, at, 4, &cp)) {
            return err_set(e, "\\u needs four hex digits (offset %zu)", start);
        }
        break;
    case 'b':
    case 'B':
        return err_set(e, "unsupported: word boundary \\%c (offset %zu)", c, start);
    case 'p':
    case 'P':
        return err_set(e, "unsupported: Unicode property \\%c{...} (offset %zu)", c, start);
    case 'A':
    case 'z':
    case 'Z':
    case 'G':
        return err_set(e, "unsupported: anchor \\%c (offset %zu); use ^ and $", c, start);
    default:
        if ((c >= '1' && c <= '9') || c == 'k')
            return err_set(e, "unsupported: backreference (offset %zu)", start);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return err_set(e, "unknown escape \\%c (offset %zu)", c, start);
        if ((unsigned char)c >= 0x80) {
            size_t l;
            int32_t v = utf8_decode((const unsigned char *)s + *at - 1, len - (*at - 1), &l);
            if (v < 0) return err_set(e, "invalid UTF-8 at offset %zu", *at - 1);
            *at += l - 1;
            cp = (uint32_t)v;
        } else {
            cp = (unsigned char)c;
        }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return err_set(e, "escape of a surrogate code point (offset %zu)", start);
    return expr_cpset_add(out, cp, cp) ? err_set(e, "out of memory") : 0;
}

/* One class member at s[*at]: a character, an escape (a set) or the start of a range; *lo_out = its code
 * point when it is a single character that may start a range, else -1. */
static int class_item(const char *s, size_t len, size_t *at, struct expr_cpset *set, int64_t *single,
                      struct err *e)
{
    *single = -1;
    if (s[*at] == '\\') {
        (*at)++;
        struct expr_cpset one = {0};
        if (regex_parse_escape(s, len, at, &one, e)) {
            expr_cpset_free(&one);
            return -1;
        }
        if (one.n == 1 && one.lo[0] == one.hi[0]) *single = one.lo[0];
        for (int32_t k = 0; k < one.n; k++)
            if (expr_cpset_add(set, one.lo[k], one.hi[k])) {
                expr_cpset_free(&one);
                return err_set(e, "out of memory");
            }
        expr_cpset_free(&one);
        return 0;
    }
    if (s[*at] == '[' && *at + 1 < len && (s[*at + 1] == ':' || s[*at + 1] == '=' || s[*at + 1] == '.'))
        return err_set(e, "unsupported: POSIX class (offset %zu)", *at);
    size_t l;
    int32_t cp = utf8_decode((const unsigned char *)s + *at, len - *at, &l);
    if (cp < 0) return err_set(e, "invalid UTF-8 at offset %zu", *at);
    *at += l;
    *single = cp;
    return expr_cpset_add(set, (uint32_t)cp, (uint32_t)cp) ? err_set(e, "out of memory") : 0;
}

int regex_parse_class(const char *s, size_t len, size_t *at, struct expr_cpset *out, struct err *e)
{
    size_t start = (*at)++;
    int neg = *at < len && s[*at] == '^';
    if (neg) (*at)++;
    int first = 1;
    while (*at < len && (s[*at] != ']' || first)) {
        first = 0;
        int64_t lo, hi;
        if (class_item(s, len, at, out, &lo, e)) return -1;
        if (*at + 1 < len && s[*at] == '-' && s[*at + 1] != ']') {
            if (lo < 0) return err_set(e, "a class range must start at a character (offset %zu)", *at);
            (*at)++;
            struct expr_cpset tmp = {0};
            int rc = class_item(s, len, at, &tmp, &hi, e);
            expr_cpset_free(&tmp);
            if (rc) return -1;
            if (hi < 0 || hi < lo) return err_set(e, "bad class range (offset %zu)", *at);
            if (expr_cpset_add(out, (uint32_t)lo, (uint32_t)hi)) return err_set(e, "out of memory");
        }
    }
    if (*at >= len) return err_set(e, "class opened at offset %zu is not closed", start);
    (*at)++;
    if (neg && expr_cpset_negate(out)) return err_set(e, "out of memory");
    return 0;
}

/* ---- the parser ---- */

static struct expr *parse_alt(struct rx *p, int top);

static struct expr *from_set(struct rx *p, struct expr_cpset *set)
{
    struct expr *x = expr_from_cpset(p->r, set, p->json);
    expr_cpset_free(set);
    return x;
}

static struct expr *parse_group(struct rx *p)
{
    size_t open = p->i++;
    if (p->i < p->n && p->s[p->i] == '?') {
        const char *t = p->s + p->i + 1;
        size_t left = p->n - p->i - 1;
        if (left >= 1 && t[0] == ':')
            p->i += 2;
        else if (left >= 2 && ((t[0] == 'P' && t[1] == '<') || (t[0] == '<' && t[1] != '=' && t[1] != '!'))) {
            while (p->i < p->n && p->s[p->i] != '>')
                p->i++;
            if (p->i >= p->n) return rx_fail(p, "unterminated group name"), NULL;
            p->i++;
        } else if (left >= 1 && (t[0] == '=' || t[0] == '!' || t[0] == '<'))
            return rx_fail(p, "unsupported: lookaround"), NULL;
        else
            return rx_fail(p, "unsupported: inline flags or group kind '(?'"), NULL;
    }
    if (++p->depth > REGEX_MAX_DEPTH) return rx_fail(p, "groups nested too deeply"), NULL;
    struct expr *x = parse_alt(p, 0);
    p->depth--;
    if (!x) return NULL;
    if (p->i >= p->n || p->s[p->i] != ')') {
        p->i = open;
        return rx_fail(p, "unclosed '('"), NULL;
    }
    p->i++;
    return x;
}

static struct expr *parse_atom(struct rx *p)
{
    char c = p->s[p->i];
    struct expr_cpset set = {0};
    switch (c) {
    case '(':
        return parse_group(p);
    case '[':
        if (regex_parse_class(p->s, p->n, &p->i, &set, p->e)) break;
        return from_set(p, &set);
    case '.':
        p->i++;
        if (expr_cpset_add(&set, '\n', '\n') || expr_cpset_negate(&set)) break;
        return from_set(p, &set);
    case '\\':
        p->i++;
        if (regex_parse_escape(p->s, p->n, &p->i, &set, p->e)) break;
        return from_set(p, &set);
    case '^':
        return rx_fail(p, "unsupported: '^' anywhere but at the start of an alternative"), NULL;
    case '$':
        return rx_fail(p, "unsupported: '$' anywhere but at the end of an alternative"), NULL;
    case '*':
    case '+':
    case '?':
    case '{':
        return rx_fail(p, "quantifier without anything to repeat"), NULL;
    default: {
        size_t l;
        int32_t cp = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &l);
        if (cp < 0) return rx_fail(p, "invalid UTF-8"), NULL;
        p->i += l;
        return expr_codepoint(p->r, (uint32_t)cp, p->json);
    }
    }
    expr_cpset_free(&set);
    p->failed = 1;
    return NULL;
}

static int read_count(struct rx *p, int32_t *v)
{
    size_t start = p->i;
    int64_t x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > REGEX_MAX_COUNT)
            return rx_fail(p, "unsupported: repetition count above "
                              "1000");
    }
    *v = (int32_t)x;
    return p->i > start ? 0 : 1;
}

/* A quantifier at p->i into min/max; 0 if there is none, 1 if one was read, -1 on error. A '{' that does
 * not start a valid {n}, {n,} or {n,m} is an error (never a literal). */
static int parse_quant(struct rx *p, int32_t *min, int32_t *max)
{
    if (p->i >= p->n) return 0;
    char c = p->s[p->i];
    if (c == '*')
        *min = 0, *max = EXPR_INF;
    else if (c == '+')
        *min = 1, *max = EXPR_INF;
    else if (c == '?')
        *min = 0, *max = 1;
    else if (c != '{')
        return 0;
    p->i++;
    if (c == '{') {
        int rc = read_count(p, min);
        if (rc) return rc < 0 ? -1 : rx_fail(p, "'{' must start a count {n}, {n,} or {n,m}");
        *max = *min;
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            rc = read_count(p, max);
            if (rc < 0) return -1;
            if (rc > 0) *max = EXPR_INF;
        }
        if (p->i >= p->n || p->s[p->i] != '}') return rx_fail(p, "unclosed count '{'");
        p->i++;
        if (*max < *min) return rx_fail(p, "count {n,m} with m < n");
    }
    if (p->i < p->n && p->s[p->i] == '?')
        p->i++; /* lazy: same language */
    else if (p->i < p->n && p->s[p->i] == '+')
        return rx_fail(p, "unsupported: possessive quantifier");
    return 1;
}

static struct expr *parse_piece(struct rx *p)
{
    struct expr *x = parse_atom(p);
    int32_t min, max;
    int rc;
    while (x && (rc = parse_quant(p, &min, &max)) != 0) {
        if (rc < 0) return NULL;
        x = expr_repeat(p->r, x, min, max);
    }
    return x;
}

/* Any characters (the implicit context of an unanchored JSON Schema pattern). */
static struct expr *any_text(struct rx *p)
{
    struct expr_cpset all = {0};
    if (expr_cpset_add(&all, 0, EXPR_MAX_CP)) return NULL;
    return expr_repeat(p->r, from_set(p, &all), 0, EXPR_INF);
}

/* One alternative: pieces up to '|' or ')' (or the end), with '^' / '$' at its ends when top. */
static struct expr *parse_cat(struct rx *p, int top)
{
    int anchored_start = 0, anchored_end = 0;
    if (top && p->i < p->n && p->s[p->i] == '^') p->i++, anchored_start = 1;
    int32_t n = 0, cap = 8;
    struct expr **k = malloc((size_t)cap * sizeof *k);
    if (!k) return rx_fail(p, "out of memory"), NULL;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (top && p->s[p->i] == '$' && (p->i + 1 == p->n || p->s[p->i + 1] == '|')) {
            p->i++;
            anchored_end = 1;
            break;
        }
        if (n == cap) {
            struct expr **t = realloc(k, (size_t)(cap *= 2) * sizeof *k);
            if (!t) break;
            k = t;
        }
        if (!(k[n++] = parse_piece(p))) break;
    }
    struct expr *x = p->failed || (n && !k[n - 1]) ? NULL : expr_cat(p->r, k, n);
    free(k);
    if (x && p->json && top) {
        if (!anchored_start) x = expr_cat2(p->r, any_text(p), x);
        if (!anchored_end) x = expr_cat2(p->r, x, any_text(p));
    }
    return x;
}

static struct expr *parse_alt(struct rx *p, int top)
{
    int32_t n = 0, cap = 4;
    struct expr **k = malloc((size_t)cap * sizeof *k);
    if (!k) return rx_fail(p, "out of memory"), NULL;
    for (;;) {
        if (n == cap) {
            struct expr **t = realloc(k, (size_t)(cap *= 2) * sizeof *k);
            if (!t) break;
            k = t;
        }
        if (!(k[n++] = parse_cat(p, top))) break;
        if (p->i >= p->n || p->s[p->i] != '|') break;
        p->i++;
    }
    struct expr *x = p->failed || !k[n - 1] ? NULL : expr_alt(p->r, k, n);
    free(k);
    return x;
}

int regex_parse(struct expr_rules *r, const char *pattern, size_t len, int flags, struct expr **out,
                struct err *e)
{
    *out = NULL;
    if (len > REGEX_MAX_BYTES)
        return err_set(e, "the pattern is %zu bytes, at most %d", len, REGEX_MAX_BYTES);
    struct rx p = {r, pattern, len, 0, (flags & REGEX_JSON_STRING) != 0, 0, e, 0};
    struct expr *x = parse_alt(&p, 1);
    if (!p.failed && p.i < p.n) rx_fail(&p, "unmatched ')'");
    if (p.failed) return -1;
    if (!x) return expr_rules_error(r, "the pattern", e) ? -1 : err_set(e, "the pattern could not be parsed");
    *out = x;
    return 0;
}
