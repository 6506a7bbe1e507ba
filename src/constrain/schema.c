/* schema — see schema.h. sc_compile dispatches one schema: keywords checked first (anything unknown is an
 * error), then $ref / allOf / anyOf / enum / const, then by type. Paths in messages are JSON pointers.
 */
#include "constrain/schema_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sc_fail(struct sc *c, const char *fmt, ...)
{
    if (c->failed) return -1;
    c->failed = 1;
    char msg[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a sub-compiler (regex) that failed left its message in e: keep it after ours */
    if (c->e && c->e->msg[0] && c->sub_failed)
        err_prefix(c->e, "%s at %s", msg, c->path[0] ? c->path : "/");
    else
        err_set(c->e, "%s at %s", msg, c->path[0] ? c->path : "/");
    return -1;
}

static const char *const ignored_keywords[] = {
    "title", "description", "default",  "examples",  "$schema",    "$id", "$comment",
    "$defs", "definitions", "readOnly", "writeOnly", "deprecated", NULL};
static const char *const supported_keywords[] = {
    "type",    "enum",        "const",    "properties",  "required",         "additionalProperties",
    "items",   "prefixItems", "minItems", "maxItems",    "minLength",        "maxLength",
    "pattern", "format",      "minimum",  "maximum",     "exclusiveMinimum", "exclusiveMaximum",
    "anyOf",   "allOf",       "$ref",     "uniqueItems", "multipleOf",       NULL};

static int in_list(const char *k, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(k, *list)) return 1;
    return 0;
}

static int check_keywords(struct sc *c, const json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (in_list(k, ignored_keywords) || !strncmp(k, "x-", 2)) continue;
        if (!in_list(k, supported_keywords)) return sc_fail(c, "unsupported JSON Schema keyword '%.64s'", k);
        if (!strcmp(k, "uniqueItems") && json_is_true(v))
            return sc_fail(c, "unsupported: 'uniqueItems': true");
    }
    return 0;
}

/* Appends "/a/b" to the path for the duration of one sub-schema (restored by path_pop). */
static size_t path_push(struct sc *c, const char *a, const char *b)
{
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, "/%s%s%.64s", a, b ? "/" : "", b ? b : "");
    return n;
}
static void path_pop(struct sc *c, size_t n)
{
    c->path[n] = '\0';
}

static struct expr *sc_compile(struct sc *c, const json_t *s);

static struct expr *sub(struct sc *c, const json_t *s, const char *a, const char *b)
{
    size_t n = path_push(c, a, b);
    struct expr *x = sc_compile(c, s);
    path_pop(c, n);
    return x;
}

/* ---- references ---- */

static const json_t *resolve_ref(struct sc *c, const char *ref)
{
    if (!strcmp(ref, "#")) return c->root;
    const char *prefixes[2] = {"#/$defs/", "#/definitions/"};
    for (int i = 0; i < 2; i++) {
        size_t l = strlen(prefixes[i]);
        if (strncmp(ref, prefixes[i], l)) continue;
        const json_t *defs = json_object_get(c->root, i ? "definitions" : "$defs");
        const json_t *t = defs ? json_object_get(defs, ref + l) : NULL;
        if (!t) return sc_fail(c, "$ref '%.100s' does not resolve", ref), NULL;
        return t;
    }
    return sc_fail(c, "unsupported $ref '%.100s' (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\")",
                   ref),
           NULL;
}

static struct sc_ref *ref_entry(struct sc *c, const char *ref)
{
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].name, ref)) return &c->refs[i];
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 8;
        struct sc_ref *r = realloc(c->refs, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        c->refs = r;
        c->cap_refs = cap;
    }
    struct sc_ref *r = &c->refs[c->n_refs];
    memset(r, 0, sizeof *r);
    r->rule = -1;
    if (!(r->name = strdup(ref))) return NULL;
    c->n_refs++;
    return r;
}

/* A $ref compiles once and is shared (inlined) where it is used; met again while it is being compiled, it
 * is recursive and becomes a rule that is called. */
static struct expr *compile_ref(struct sc *c, const json_t *ref)
{
    if (!json_is_string(ref)) return sc_fail(c, "'$ref' must be a string"), NULL;
    const char *name = json_string_value(ref);
    struct sc_ref *r = ref_entry(c, name);
    if (!r) return sc_fail(c, "out of memory"), NULL;
    if (r->state == 2) return r->node;
    if (r->state == 1) {
        r->recursive = 1;
        if (r->rule < 0 && (r->rule = expr_rule_id(c->r, name, strlen(name))) < 0)
            return sc_fail(c, "too many rules"), NULL;
        return expr_call(c->r, r->rule);
    }
    const json_t *target = resolve_ref(c, name);
    if (!target) return NULL;
    r->state = 1;
    int idx = (int)(r - c->refs);
    struct expr *x = sub(c, target, "$ref", NULL);
    r = &c->refs[idx]; /* refs may have moved */
    if (!x) return NULL;
    r->state = 2;
    if (r->recursive) {
        c->r->bodies[r->rule] = x;
        x = expr_call(c->r, r->rule);
    }
    r->node = x;
    return x;
}

/* ---- objects and arrays ---- */

static int is_required(const json_t *required, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(required, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    return 0;
}

/* "key": value for one member. */
static struct expr *member(struct sc *c, const char *key, struct expr *value)
{
    json_t *k = json_string(key);
    struct expr *x = k ? sc_literal_json(c, k) : NULL;
    json_decref(k);
    return x && value ? expr_cat3(c->r, x, c->colon, value) : NULL;
}

/* A map: members with any string key and values of schema ap. */
static struct expr *compile_map(struct sc *c, const json_t *ap)
{
    struct expr *v = sub(c, ap, "additionalProperties", NULL);
    if (!v) return NULL;
    struct expr *m = expr_cat3(c->r, sc_json_string(c), c->colon, v);
    struct expr *ms = expr_cat3(c->r, m, expr_repeat(c->r, expr_cat2(c->r, c->comma, m), 0, EXPR_INF), c->ws);
    return expr_cat3(c->r, expr_cat2(c->r, expr_str(c->r, "{"), c->ws), expr_opt(c->r, ms),
                     expr_str(c->r, "}"));
}

static int collect_members(struct sc *c, const json_t *props, const json_t *req, struct expr ***kids,
                           uint8_t **flags, int32_t *n)
{
    size_t cap = (props ? json_object_size(props) : 0) + json_array_size(req) + 1;
    *kids = malloc(cap * sizeof **kids);
    *flags = malloc(cap);
    if (!*kids || !*flags) return sc_fail(c, "out of memory");
    const char *k;
    json_t *v;
    *n = 0;
    if (props) json_object_foreach((json_t *)props, k, v)
        {
            struct expr *x = member(c, k, sub(c, v, "properties", k));
            if (!x) return -1;
            (*flags)[*n] = (uint8_t)is_required(req, k);
            (*kids)[(*n)++] = x;
        }
    size_t i;
    json_array_foreach(req, i, v)
    { /* required but not described: any value */
        if (!json_is_string(v)) return sc_fail(c, "'required' must list strings");
        if (props && json_object_get(props, json_string_value(v))) continue;
        struct expr *x = member(c, json_string_value(v), sc_any_value(c));
        if (!x) return -1;
        (*flags)[*n] = 1;
        (*kids)[(*n)++] = x;
    }
    return 0;
}

static struct expr *compile_object(struct sc *c, const json_t *s)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return sc_fail(c, "'properties' must be an object"), NULL;
    if (req && !json_is_array(req)) return sc_fail(c, "'required' must be an array"), NULL;
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return sc_fail(c, "'additionalProperties' must be a boolean or a schema"), NULL;
    int has_members = (props && json_object_size(props)) || json_array_size(req);
    if (!has_members && json_is_object(ap)) return compile_map(c, ap);
    if (!has_members && !json_is_false(ap)) return sc_any_object(c);
    struct expr **kids = NULL, *x = NULL;
    uint8_t *flags = NULL;
    int32_t n = 0;
    if (collect_members(c, props, req, &kids, &flags, &n) == 0) {
        struct expr *list = expr_seplist(c->r, kids, flags, n, c->comma);
        x = expr_cat3(c->r, expr_cat2(c->r, expr_str(c->r, "{"), c->ws), list,
                      expr_cat2(c->r, c->ws, expr_str(c->r, "}")));
    }
    free(kids);
    free(flags);
    return x;
}

/* Array items that are objects or arrays become rules of their own (called once per item), so counted
 * repetitions do not copy their automata. */
static struct expr *item_expr(struct sc *c, const json_t *items, const char *at)
{
    struct expr *x = sub(c, items, at, NULL);
    if (!x || x->op == EXPR_CALL) return x;
    const json_t *t = json_is_object(items) ? json_object_get(items, "type") : NULL;
    int nested =
        json_is_object(items) && (!t || (json_is_string(t) && (!strcmp(json_string_value(t), "object") ||
                                                               !strcmp(json_string_value(t), "array"))));
    if (!nested) return x;
    char name[32];
    snprintf(name, sizeof name, "items-%d", c->n_rules_made++);
    int32_t id = expr_rule_id(c->r, name, strlen(name));
    if (id < 0) return sc_fail(c, "too many rules"), NULL;
    c->r->bodies[id] = x;
    return expr_call(c->r, id);
}

/* Elements i.. of an array given that element i is present: prefix item i, then (comma and the next
 * ones) — required while below minItems — and after the prefix items the rest: one or more items. */
static struct expr *elements_from(struct sc *c, struct expr **prefix, int32_t n_prefix, struct expr *rest,
                                  int64_t min, int32_t i)
{
    if (i == n_prefix) return rest;
    if (i + 1 == n_prefix && !rest) return prefix[i];
    struct expr *next = expr_cat2(c->r, c->comma, elements_from(c, prefix, n_prefix, rest, min, i + 1));
    return expr_cat2(c->r, prefix[i], i + 1 < min ? next : expr_opt(c->r, next));
}

static int read_items_bounds(struct sc *c, const json_t *s, int64_t *min, int64_t *max)
{
    const char *keys[2] = {"minItems", "maxItems"};
    *min = 0;
    *max = EXPR_INF;
    for (int k = 0; k < 2; k++) {
        const json_t *v = json_object_get(s, keys[k]);
        if (!v) continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SCHEMA_MAX_LENGTH)
            return sc_fail(c, "'%s' must be an integer in [0, %d]", keys[k], SCHEMA_MAX_LENGTH);
        *(k ? max : min) = json_integer_value(v);
    }
    if (*min > *max) return sc_fail(c, "minItems %lld > maxItems %lld", (long long)*min, (long long)*max);
    return 0;
}

static struct expr *compile_array(struct sc *c, const json_t *s)
{
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    int64_t min, max;
    if (read_items_bounds(c, s, &min, &max)) return NULL;
    if (prefix && !json_is_array(prefix)) return sc_fail(c, "'prefixItems' must be an array"), NULL;
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return sc_fail(c, "'items' must be a schema"), NULL;
    int32_t n_prefix = (int32_t)json_array_size(prefix);
    if (max < n_prefix) n_prefix = (int32_t)max;
    int64_t rest_min = min > n_prefix ? min - n_prefix : 0,
            rest_max = max == EXPR_INF ? EXPR_INF : max - n_prefix;
    if (json_is_false(items) && rest_min > 0)
        return sc_fail(c, "minItems is more than prefixItems allows"), NULL;
    struct expr **kids = malloc(((size_t)n_prefix + 1) * sizeof *kids), *rest = NULL, *x = NULL;
    if (!kids) return sc_fail(c, "out of memory"), NULL;
    for (int32_t i = 0; i < n_prefix; i++) {
        char at[32];
        snprintf(at, sizeof at, "prefixItems/%d", (int)i);
        if (!(kids[i] = item_expr(c, json_array_get(prefix, (size_t)i), at))) goto done;
    }
    if (!json_is_false(items) && rest_max > 0) { /* the rest: one item, then up to rest_max - 1 more */
        struct expr *it = items ? item_expr(c, items, "items") : sc_any_value(c);
        int32_t lo = rest_min > 0 ? (int32_t)rest_min - 1 : 0,
                hi = rest_max == EXPR_INF ? EXPR_INF : (int32_t)rest_max - 1;
        rest = expr_cat2(c->r, it, expr_repeat(c->r, expr_cat2(c->r, c->comma, it), lo, hi));
        if (!rest) goto done;
    }
    struct expr *body = n_prefix || rest ? elements_from(c, kids, n_prefix, rest, min, 0) : NULL;
    if (body && min == 0) body = expr_opt(c->r, body);
    struct expr *open = expr_cat2(c->r, expr_str(c->r, "["), c->ws), *close = expr_str(c->r, "]");
    x = body ? expr_cat3(c->r, open, body, expr_cat2(c->r, c->ws, close)) : expr_cat2(c->r, open, close);
done:
    free(kids);
    return c->failed ? NULL : x;
}

/* ---- dispatch ---- */

static int value_has_type(const json_t *v, const char *t)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return 0;
}

static int value_allowed(const json_t *v, const json_t *type)
{
    if (!type) return 1;
    if (json_is_string(type)) return value_has_type(v, json_string_value(type));
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && value_has_type(v, json_string_value(t))) return 1;
    return 0;
}

/* enum (or const as a one-value enum): the values the type allows, as literals. */
static struct expr *compile_enum(struct sc *c, const json_t *values, const json_t *type)
{
    size_t n = json_array_size(values), i;
    struct expr **k = malloc((n ? n : 1) * sizeof *k);
    if (!k) return sc_fail(c, "out of memory"), NULL;
    int32_t m = 0;
    json_t *v;
    json_array_foreach(values, i, v) if (value_allowed(v, type)) k[m++] = sc_literal_json(c, v);
    struct expr *x = m ? expr_alt(c->r, k, m) : NULL;
    free(k);
    if (!m) sc_fail(c, "no value of 'enum' / 'const' has the schema's type");
    return x;
}

static struct expr *compile_type(struct sc *c, const json_t *s, const char *t)
{
    if (!strcmp(t, "string")) return sc_string(c, s);
    if (!strcmp(t, "number")) return sc_number(c, s, 0);
    if (!strcmp(t, "integer")) return sc_number(c, s, 1);
    if (!strcmp(t, "boolean")) return expr_alt2(c->r, expr_str(c->r, "true"), expr_str(c->r, "false"));
    if (!strcmp(t, "null")) return expr_str(c->r, "null");
    if (!strcmp(t, "object")) return compile_object(c, s);
    if (!strcmp(t, "array")) return compile_array(c, s);
    return sc_fail(c, "unknown type '%.64s'", t), NULL;
}

/* The type of a schema without "type", from its keywords; NULL: any value. */
static const char *implied_type(const json_t *s)
{
    static const char *const by[][5] = {
        {"object", "properties", "required", "additionalProperties", NULL},
        {"array", "items", "prefixItems", "minItems", "maxItems"},
        {"string", "minLength", "maxLength", "pattern", "format"},
        {"number", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}};
    for (int t = 0; t < 4; t++)
        for (int k = 1; k < 5 && by[t][k]; k++)
            if (json_object_get(s, by[t][k])) return by[t][0];
    return NULL;
}

/* 1 if s has keywords besides annotations and `except`. */
static int has_siblings(const json_t *s, const char *except)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) if (strcmp(k, except) && !in_list(k, ignored_keywords) &&
                                               strncmp(k, "x-", 2)) return 1;
    return 0;
}

static struct expr *compile_any_of(struct sc *c, const json_t *list)
{
    if (!json_is_array(list) || !json_array_size(list))
        return sc_fail(c, "'anyOf' must be a non-empty array"), NULL;
    size_t n = json_array_size(list), i;
    struct expr **k = malloc(n * sizeof *k);
    if (!k) return sc_fail(c, "out of memory"), NULL;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char at[32];
        snprintf(at, sizeof at, "%zu", i);
        if (!(k[i] = sub(c, v, "anyOf", at))) break;
    }
    struct expr *x = c->failed ? NULL : expr_alt(c->r, k, (int32_t)n);
    free(k);
    return x;
}

static struct expr *compile_types(struct sc *c, const json_t *s, const json_t *type)
{
    if (json_is_string(type)) return compile_type(c, s, json_string_value(type));
    if (!json_is_array(type) || !json_array_size(type))
        return sc_fail(c, "'type' must be a string or a non-empty array"), NULL;
    size_t n = json_array_size(type), i;
    struct expr **k = malloc(n * sizeof *k);
    if (!k) return sc_fail(c, "out of memory"), NULL;
    json_t *t;
    json_array_foreach(type, i,
                       t) if (!json_is_string(t) || !(k[i] = compile_type(c, s, json_string_value(t)))) break;
    if (i < n && !c->failed) sc_fail(c, "'type' must list type names");
    struct expr *x = c->failed ? NULL : expr_alt(c->r, k, (int32_t)n);
    free(k);
    return x;
}

static struct expr *sc_compile(struct sc *c, const json_t *s)
{
    if (c->failed) return NULL;
    if (++c->depth > SCHEMA_MAX_DEPTH)
        return sc_fail(c, "schema nested deeper than %d", SCHEMA_MAX_DEPTH), NULL;
    struct expr *x = NULL;
    const json_t *v, *type;
    if (json_is_true(s))
        x = sc_any_value(c);
    else if (json_is_false(s))
        sc_fail(c, "the schema false allows no value");
    else if (!json_is_object(s))
        sc_fail(c, "a schema must be an object or a boolean");
    else if (check_keywords(c, s)) {
    } else if ((v = json_object_get(s, "$ref"))) {
        x = has_siblings(s, "$ref") ? (sc_fail(c, "unsupported: '$ref' together with other keywords"), NULL)
                                    : compile_ref(c, v);
    } else if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || json_array_size(v) != 1 || has_siblings(s, "allOf"))
            sc_fail(c, "unsupported: 'allOf' (only with a single schema and no other keywords)");
        else
            x = sub(c, json_array_get(v, 0), "allOf", "0");
    } else if ((v = json_object_get(s, "anyOf"))) {
        x = has_siblings(s, "anyOf") ? (sc_fail(c, "unsupported: 'anyOf' together with other keywords"), NULL)
                                     : compile_any_of(c, v);
    } else if ((type = json_object_get(s, "type")), (v = json_object_get(s, "enum"))) {
        x = json_is_array(v) ? compile_enum(c, v, type) : (sc_fail(c, "'enum' must be an array"), NULL);
    } else if (json_object_get(s, "const")) {
        json_t *one = json_pack("[O]", json_object_get(s, "const"));
        x = one ? compile_enum(c, one, type) : NULL;
        json_decref(one);
    } else if (type) {
        x = compile_types(c, s, type);
    } else {
        const char *t = implied_type(s);
        x = t ? compile_type(c, s, t) : sc_any_value(c);
    }
    c->depth--;
    if (!x && !c->failed) sc_fail(c, "%s", "the schema is too large");
    return c->failed ? NULL : x;
}

static void sc_free(struct sc *c)
{
    for (int i = 0; i < c->n_refs; i++)
        free(c->refs[i].name);
    free(c->refs);
}

static int sc_begin(struct sc *c, const json_t *root, struct expr_rules *r, struct err *e)
{
    memset(c, 0, sizeof *c);
    c->r = r;
    c->root = root;
    c->e = e;
    c->value_rule = c->object_rule = c->array_rule = -1;
    if (e) e->msg[0] = '\0';
    if (expr_rule_id(r, "root", 4) != 0 || sc_init_shared(c))
        return expr_rules_error(r, "the schema", e) ? -1 : err_set(e, "out of memory");
    return 0;
}

static int sc_end(struct sc *c, struct expr *x, struct err *e)
{
    sc_free(c);
    if (c->failed) return -1;
    if (!x)
        return expr_rules_error(c->r, "the schema", e) ? -1 : err_set(e, "the schema could not be compiled");
    c->r->bodies[0] =
        expr_cat2(c->r, c->ws, x); /* JSON allows leading whitespace (SentencePiece models like it) */
    return expr_rules_error(c->r, "the schema", e);
}

int schema_compile(const json_t *schema, struct expr_rules *r, struct err *e)
{
    struct sc c;
    if (sc_begin(&c, schema, r, e)) return -1;
    return sc_end(&c, sc_compile(&c, schema), e);
}

int schema_any_object(struct expr_rules *r, struct err *e)
{
    struct sc c;
    if (sc_begin(&c, NULL, r, e)) return -1;
    return sc_end(&c, sc_any_object(&c), e);
}
