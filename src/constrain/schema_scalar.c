/* schema_scalar — strings, numbers, integer ranges, formats, literals and the generic JSON rules for
 * schema.c (see schema.h for what is generated).
 *
 * Numeric ranges are exact: an integer range [lo, hi] becomes digit patterns (split by length, then by
 * leading digit, e.g. 17..243 = 1[7-9] | [2-9][0-9] | 1[0-9][0-9] | 2[0-3][0-9] | 24[0-3]); a number
 * bounded by integers is its integer part in such a range with a fraction where the bound allows one.
 */
#include "constrain/schema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/regex.h"

#define MAX_INT_DIGITS 18
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 2
#define INT_LIMIT 999999999999999999LL /* 18 nines */

static struct expr *digit(struct sc *c, char lo, char hi)
{
    return expr_byte_range(c->r, (uint8_t)lo, (uint8_t)hi);
}

int sc_init_shared(struct sc *c)
{
    struct expr_set s = {{0}};
    expr_set_add(&s, ' ', ' ');
    expr_set_add(&s, '\t', '\t');
    expr_set_add(&s, '\n', '\n');
    c->ws = expr_repeat(c->r, expr_bytes(c->r, &s), 0, SCHEMA_MAX_WS);
    c->comma = expr_cat3(c->r, c->ws, expr_str(c->r, ","), c->ws);
    c->colon = expr_cat3(c->r, c->ws, expr_str(c->r, ":"), c->ws);
    return c->ws && c->comma && c->colon ? 0 : -1;
}

/* One character of a JSON string: raw (not '"', '\\' or a control character) or any escape. */
static struct expr *string_char(struct sc *c)
{
    struct expr_cpset raw = {0};
    if (expr_cpset_add(&raw, 0x20, '"' - 1) || expr_cpset_add(&raw, '"' + 1, '\\' - 1) ||
        expr_cpset_add(&raw, '\\' + 1, EXPR_MAX_CP)) {
        expr_cpset_free(&raw);
        return NULL;
    }
    struct expr *r = expr_from_cpset(c->r, &raw, 0);
    expr_cpset_free(&raw);
    struct expr_set esc = {{0}}, hex = {{0}};
    for (const char *p = "\"\\/bfnrt"; *p; p++)
        expr_set_add(&esc, (unsigned char)*p, (unsigned char)*p);
    expr_set_add(&hex, '0', '9');
    expr_set_add(&hex, 'a', 'f');
    expr_set_add(&hex, 'A', 'F');
    struct expr *u = expr_cat2(c->r, expr_str(c->r, "u"), expr_repeat(c->r, expr_bytes(c->r, &hex), 4, 4));
    struct expr *escape = expr_cat2(c->r, expr_str(c->r, "\\"), expr_alt2(c->r, expr_bytes(c->r, &esc), u));
    return expr_alt2(c->r, r, escape);
}

struct expr *sc_json_string(struct sc *c)
{
    struct expr *q = expr_str(c->r, "\"");
    return expr_cat3(c->r, q, expr_repeat(c->r, string_char(c), 0, EXPR_INF), q);
}

struct expr *sc_literal_json(struct sc *c, const json_t *v)
{
    char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!d) return sc_fail(c, "out of memory"), NULL;
    struct expr *x = expr_str(c->r, d);
    free(d);
    return x;
}

/* ---- the generic JSON rules: value, object, array ---- */

static int32_t make_rule(struct sc *c, const char *name)
{
    int32_t id = expr_rule_id(c->r, name, strlen(name));
    if (id < 0) sc_fail(c, "too many rules");
    return id;
}

static struct expr *number_any(struct sc *c);

static int make_generic(struct sc *c)
{
    if (c->value_rule >= 0) return 0;
    c->value_rule = make_rule(c, "json-value");
    c->object_rule = make_rule(c, "json-object");
    c->array_rule = make_rule(c, "json-array");
    if (c->value_rule < 0 || c->object_rule < 0 || c->array_rule < 0) return -1;
    struct expr *value = expr_call(c->r, c->value_rule);
    struct expr *member = expr_cat3(c->r, sc_json_string(c), c->colon, value);
    struct expr *members =
        expr_cat3(c->r, member, expr_repeat(c->r, expr_cat2(c->r, c->comma, member), 0, EXPR_INF), c->ws);
    struct expr *object = expr_cat3(c->r, expr_cat2(c->r, expr_str(c->r, "{"), c->ws),
                                    expr_opt(c->r, members), expr_str(c->r, "}"));
    struct expr *items =
        expr_cat3(c->r, value, expr_repeat(c->r, expr_cat2(c->r, c->comma, value), 0, EXPR_INF), c->ws);
    struct expr *array = expr_cat3(c->r, expr_cat2(c->r, expr_str(c->r, "["), c->ws), expr_opt(c->r, items),
                                   expr_str(c->r, "]"));
    struct expr *alts[7] = {
        expr_call(c->r, c->object_rule), expr_call(c->r, c->array_rule), sc_json_string(c),     number_any(c),
        expr_str(c->r, "true"),          expr_str(c->r, "false"),        expr_str(c->r, "null")};
    c->r->bodies[c->object_rule] = object;
    c->r->bodies[c->array_rule] = array;
    c->r->bodies[c->value_rule] = expr_alt(c->r, alts, 7);
    return 0;
}

struct expr *sc_any_value(struct sc *c)
{
    return make_generic(c) ? NULL : expr_call(c->r, c->value_rule);
}
struct expr *sc_any_object(struct sc *c)
{
    return make_generic(c) ? NULL : c->r->bodies[c->object_rule];
}
struct expr *sc_any_array(struct sc *c)
{
    return make_generic(c) ? NULL : c->r->bodies[c->array_rule];
}

/* ---- numbers ---- */

/* Digit strings of length n from L to H (leading zeros allowed). */
static struct expr *digits_range(struct sc *c, const char *L, const char *H, int n)
{
    if (n == 0) return expr_empty(c->r);
    if (L[0] == H[0]) return expr_cat2(c->r, digit(c, L[0], L[0]), digits_range(c, L + 1, H + 1, n - 1));
    int low_zeros = 1, high_nines = 1;
    for (int i = 1; i < n; i++)
        low_zeros &= L[i] == '0', high_nines &= H[i] == '9';
    char nines[MAX_INT_DIGITS + 1], zeros[MAX_INT_DIGITS + 1];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    struct expr *alts[3];
    int k = 0;
    char mid_lo = (char)(L[0] + !low_zeros), mid_hi = (char)(H[0] - !high_nines);
    if (!low_zeros) alts[k++] = expr_cat2(c->r, digit(c, L[0], L[0]), digits_range(c, L + 1, nines, n - 1));
    if (mid_lo <= mid_hi)
        alts[k++] =
            expr_cat2(c->r, digit(c, mid_lo, mid_hi), expr_repeat(c->r, digit(c, '0', '9'), n - 1, n - 1));
    if (!high_nines) alts[k++] = expr_cat2(c->r, digit(c, H[0], H[0]), digits_range(c, zeros, H + 1, n - 1));
    return expr_alt(c->r, alts, k);
}

/* Non-negative integers a..b (a <= b <= INT_LIMIT) written without leading zeros. */
static struct expr *uint_range(struct sc *c, int64_t a, int64_t b)
{
    struct expr *alts[MAX_INT_DIGITS + 1];
    int k = 0;
    int64_t p = 1; /* 10^(d-1) */
    for (int d = 1; d <= MAX_INT_DIGITS; d++, p *= 10) {
        int64_t lo = d == 1 ? 0 : p, hi = p * 10 - 1;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo > hi) continue;
        char L[MAX_INT_DIGITS + 2], H[MAX_INT_DIGITS + 2];
        snprintf(L, sizeof L, "%lld", (long long)lo);
        snprintf(H, sizeof H, "%lld", (long long)hi);
        alts[k++] = digits_range(c, L, H, d);
    }
    return expr_alt(c->r, alts, k);
}

static struct expr *frac(struct sc *c, char kind) /* 'a' any, 'z' zeros only, 'n' not all zeros */
{
    struct expr *dot = expr_str(c->r, ".");
    if (kind == 'a')
        return expr_opt(c->r,
                        expr_cat2(c->r, dot, expr_repeat(c->r, digit(c, '0', '9'), 1, MAX_FRAC_DIGITS)));
    if (kind == 'z')
        return expr_opt(c->r,
                        expr_cat2(c->r, dot, expr_repeat(c->r, digit(c, '0', '0'), 1, MAX_FRAC_DIGITS)));
    struct expr *k[4] = {dot, expr_repeat(c->r, digit(c, '0', '0'), 0, MAX_FRAC_DIGITS - 1),
                         digit(c, '1', '9'), expr_repeat(c->r, digit(c, '0', '9'), 0, MAX_FRAC_DIGITS - 1)};
    return expr_cat(c->r, k, 4);
}

/* Non-negative numbers x with a <(=) x <(=) b, integers a <= b (b = INT_LIMIT: unbounded), as an integer
 * part and a fraction. NOTHING when the region is empty. */
static struct expr *region(struct sc *c, int64_t a, int a_excl, int64_t b, int b_excl, int integer)
{
    if (integer) {
        a += a_excl;
        b -= b_excl && b < INT_LIMIT;
        return a <= b ? uint_range(c, a, b) : expr_nothing(c->r);
    }
    if (a == b)
        return a_excl || b_excl ? expr_nothing(c->r) : expr_cat2(c->r, uint_range(c, a, a), frac(c, 'z'));
    struct expr *alts[3];
    int k = 0;
    alts[k++] = expr_cat2(c->r, uint_range(c, a, a), frac(c, a_excl ? 'n' : 'a'));
    if (b == INT_LIMIT) {
        alts[k++] = expr_cat2(c->r, uint_range(c, a + 1, b), frac(c, 'a'));
    } else {
        if (a + 1 <= b - 1) alts[k++] = expr_cat2(c->r, uint_range(c, a + 1, b - 1), frac(c, 'a'));
        if (!b_excl) alts[k++] = expr_cat2(c->r, uint_range(c, b, b), frac(c, 'z'));
    }
    return expr_alt(c->r, alts, k);
}

/* Reads a bound keyword: *v (rounded inward for integers), *excl; 0 absent, 1 present, -1 error. */
static int read_bound(struct sc *c, const json_t *s, const char *key, int upper, int integer, int64_t *v,
                      int *excl)
{
    const json_t *b = json_object_get(s, key);
    if (!b) return 0;
    if (json_is_boolean(b)) return 0; /* draft-4 exclusiveMinimum: true modifies minimum (handled there) */
    if (!json_is_number(b)) return sc_fail(c, "'%s' must be a number", key);
    double d = json_number_value(b);
    if (!(fabs(d) <= (double)INT_LIMIT))
        return sc_fail(c, "'%s' %g is beyond the supported range (18 digits)", key, d);
    if (!integer && d != floor(d))
        return sc_fail(
            c, "unsupported: '%s' %g on a number (number bounds must be integers; integer types take any)",
            key, d);
    if (integer && d != floor(d)) {
        *v = (int64_t)(upper ? floor(d) : ceil(d));
        *excl = 0;
    } else {
        *v = (int64_t)d;
    }
    return 1;
}

static int read_bounds(struct sc *c, const json_t *s, int integer, int64_t *lo, int *lo_excl, int64_t *hi,
                       int *hi_excl)
{
    int64_t v = 0;
    int ex;
    *lo = -INT_LIMIT, *hi = INT_LIMIT, *lo_excl = *hi_excl = 0;
    const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        int upper = k >= 2;
        ex = k % 2 == 1 || json_is_true(json_object_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum"));
        int rc = read_bound(c, s, keys[k], upper, integer, &v, &ex);
        if (rc < 0) return -1;
        if (!rc) continue;
        if (!upper && (v > *lo || (v == *lo && ex))) *lo = v, *lo_excl = ex;
        if (upper && (v < *hi || (v == *hi && ex))) *hi = v, *hi_excl = ex;
    }
    return 0;
}

static struct expr *number_any(struct sc *c)
{
    struct expr_set e = {{0}}, sign = {{0}};
    expr_set_add(&e, 'e', 'e');
    expr_set_add(&e, 'E', 'E');
    expr_set_add(&sign, '+', '+');
    expr_set_add(&sign, '-', '-');
    struct expr *exp = expr_cat3(c->r, expr_bytes(c->r, &e), expr_opt(c->r, expr_bytes(c->r, &sign)),
                                 expr_repeat(c->r, digit(c, '0', '9'), 1, MAX_EXP_DIGITS));
    struct expr *k[4] = {expr_opt(c->r, expr_str(c->r, "-")), uint_range(c, 0, INT_LIMIT), frac(c, 'a'),
                         expr_opt(c->r, exp)};
    return expr_cat(c->r, k, 4);
}

struct expr *sc_number(struct sc *c, const json_t *s, int integer)
{
    if (json_object_get(s, "multipleOf")) {
        const json_t *m = json_object_get(s, "multipleOf");
        if (!(integer && json_is_number(m) && json_number_value(m) == 1))
            return sc_fail(c, "unsupported JSON Schema keyword 'multipleOf'"), NULL;
    }
    int64_t lo, hi;
    int lo_excl, hi_excl;
    if (read_bounds(c, s, integer, &lo, &lo_excl, &hi, &hi_excl)) return NULL;
    if (lo == -INT_LIMIT && hi == INT_LIMIT)
        return integer ? expr_cat2(c->r, expr_opt(c->r, expr_str(c->r, "-")), uint_range(c, 0, INT_LIMIT))
                       : number_any(c);
    if (lo > hi)
        return sc_fail(c, "the bounds leave no number (minimum %lld > maximum %lld)", (long long)lo,
                       (long long)hi),
               NULL;
    struct expr *alts[2];
    int k = 0;
    if (hi > 0 || (hi == 0 && !hi_excl)) /* x >= 0 */
        alts[k++] = region(c, lo > 0 ? lo : 0, lo >= 0 ? lo_excl : 0, hi, hi_excl, integer);
    if (lo < 0) /* x < 0: -|x| with |x| from max(-hi, 0) (exclusive at 0: zero is written "0") to -lo */
        alts[k++] = expr_cat2(c->r, expr_str(c->r, "-"),
                              region(c, hi < 0 ? -hi : 0, hi < 0 ? hi_excl : 1, -lo, lo_excl, integer));
    struct expr *x = expr_alt(c->r, alts, k);
    if (x && x->op == EXPR_NOTHING) return sc_fail(c, "the bounds leave no number"), NULL;
    return x;
}

/* ---- strings ---- */

static const char *const formats[][2] = {
    {"date", "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-"
             "9]|1[0-9]|2[0-8]))"},
    {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
    {"date-time", NULL}, /* date "T" time */
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"email", "[A-Za-z0-9._%+-]{1,64}@([A-Za-z0-9-]{1,63}\\.){1,4}[A-Za-z]{2,12}"},
    {"ipv4",
     "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"},
};

static struct expr *format_expr(struct sc *c, const char *name)
{
    struct expr *x = NULL;
    if (!strcmp(name, "date-time")) {
        struct expr *d = format_expr(c, "date"), *t = format_expr(c, "time");
        return d && t ? expr_cat3(c->r, d, expr_str(c->r, "T"), t) : NULL;
    }
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(name, formats[i][0])) {
            if (regex_parse(c->r, formats[i][1], strlen(formats[i][1]), 0, &x, c->e))
                return c->sub_failed = 1, sc_fail(c, "format %s", name), NULL;
            return x;
        }
    return sc_fail(c,
                   "unsupported string format '%.64s' (supported: date, time, date-time, uuid, email, ipv4)",
                   name),
           NULL;
}

static int read_count(struct sc *c, const json_t *s, const char *key, int64_t *v)
{
    const json_t *x = json_object_get(s, key);
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return sc_fail(c, "'%s' must be a non-negative integer", key);
    if (json_integer_value(x) > SCHEMA_MAX_LENGTH)
        return sc_fail(c, "unsupported: '%s' %lld is above %d", key, (long long)json_integer_value(x),
                       SCHEMA_MAX_LENGTH);
    *v = json_integer_value(x);
    return 1;
}

struct expr *sc_string(struct sc *c, const json_t *s)
{
    int64_t min = 0, max = EXPR_INF;
    int has_min = read_count(c, s, "minLength", &min), has_max = read_count(c, s, "maxLength", &max);
    if (has_min < 0 || has_max < 0) return NULL;
    if (min > max) return sc_fail(c, "minLength %lld > maxLength %lld", (long long)min, (long long)max), NULL;
    const json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    struct expr *q = expr_str(c->r, "\""), *body = NULL;
    if ((pattern || format) && (has_min || has_max))
        return sc_fail(c, "unsupported: minLength/maxLength together with %s",
                       pattern ? "pattern" : "format"),
               NULL;
    if (pattern && format) return sc_fail(c, "unsupported: pattern together with format"), NULL;
    if (pattern) {
        if (!json_is_string(pattern)) return sc_fail(c, "'pattern' must be a string"), NULL;
        if (regex_parse(c->r, json_string_value(pattern), json_string_length(pattern), REGEX_JSON_STRING,
                        &body, c->e))
            return c->sub_failed = 1, sc_fail(c, "pattern"), NULL;
    } else if (format) {
        if (!json_is_string(format)) return sc_fail(c, "'format' must be a string"), NULL;
        body = format_expr(c, json_string_value(format));
    } else {
        body = expr_repeat(c->r, string_char(c), (int32_t)min, (int32_t)max);
    }
    return body ? expr_cat3(c->r, q, body, q) : NULL;
}
