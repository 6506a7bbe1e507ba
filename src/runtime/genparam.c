/* genparam — see genparam.h. The table is the whole definition of the generation parameters; every
 * function below walks it and switches on the row's type only.
 */
#include "runtime/genparam.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/sha256.h"

#define G(field) offsetof(struct gen_params, field)
#define S(field) ((ptrdiff_t)offsetof(struct sampler_params, field))

/* Order matters for the key encoding (jobs/key.c, KEY_VERSION): rows that enter the key are encoded in this
 * order, which is the layout of key version 2. */
const struct genparam genparam_table[] = {
    {"max_tokens", "max_tokens", "max_completion_tokens", "--max-tokens", "-n", GENPARAM_INT, 0,
     GENPARAM_MAX_TOKENS_LIMIT, 0, 256, 0, GENPARAM_KEY_YES, G(max_tokens), -1,
     "tokens to generate at most, clamped to the context"},
    {"top_k", "top_k", NULL, "--top-k", NULL, GENPARAM_INT, 0, INT32_MAX, 0, 0, 0, GENPARAM_KEY_SAMPLING, G(top_k),
     S(top_k), "keep the K most likely tokens; 0 = off"},
    {"repeat_last_n", NULL, NULL, "--repeat-last-n", NULL, GENPARAM_INT, 0, 1 << 20, 0, 64, 64, GENPARAM_KEY_YES,
     G(repeat_last_n), S(repeat_last_n), "window of the repetition penalty"},
    {"temperature", "temperature", NULL, "--temperature", "--temp", GENPARAM_FLOAT, 0, 2, 0, 1, 0,
     GENPARAM_KEY_SAMPLING, G(temperature), S(temperature), "sampling temperature; 0 = greedy"},
    {"top_p", "top_p", NULL, "--top-p", NULL, GENPARAM_FLOAT, 0, 1, 1, 1, 1, GENPARAM_KEY_SAMPLING, G(top_p),
     S(top_p), "nucleus sampling; 1 = off"},
    {"min_p", "min_p", NULL, "--min-p", NULL, GENPARAM_FLOAT, 0, 1, 0, 0, 0, GENPARAM_KEY_SAMPLING, G(min_p),
     S(min_p), "drop tokens below P * the top probability; 0 = off"},
    {"repetition_penalty", "repetition_penalty", "repeat_penalty", "--repetition-penalty", "--repeat-penalty",
     GENPARAM_FLOAT, 0, 10, 1, 1, 1, GENPARAM_KEY_YES, G(repetition_penalty), S(repeat_penalty),
     "penalize the last --repeat-last-n tokens; 1 = off"},
    {"presence_penalty", "presence_penalty", NULL, "--presence-penalty", NULL, GENPARAM_FLOAT, -2, 2, 0, 0, 0,
     GENPARAM_KEY_YES, G(presence_penalty), S(presence_penalty), "OpenAI presence penalty"},
    {"frequency_penalty", "frequency_penalty", NULL, "--frequency-penalty", NULL, GENPARAM_FLOAT, -2, 2, 0, 0, 0,
     GENPARAM_KEY_YES, G(frequency_penalty), S(frequency_penalty), "OpenAI frequency penalty"},
    {"seed", "seed", NULL, "--seed", NULL, GENPARAM_SEED, 0, 0, 0, 0, 0, GENPARAM_KEY_SAMPLING, G(seed), -1,
     "RNG seed"},
    {"stop", "stop", NULL, "--stop", NULL, GENPARAM_STOP, 0, 0, 0, 0, 0, GENPARAM_KEY_YES, G(stop), -1,
     "stop string (repeatable, up to 4); not part of the output"},
    {"logit_bias", "logit_bias", NULL, NULL, NULL, GENPARAM_LOGIT_BIAS, -100, 100, 0, 0, 0, GENPARAM_KEY_YES,
     G(logit_bias), -1, NULL},
    {"ignore_eos", "ignore_eos", NULL, "--ignore-eos", NULL, GENPARAM_BOOL, 0, 1, 0, 0, 0, GENPARAM_KEY_YES,
     G(ignore_eos), -1, "do not stop at end-of-generation tokens"},
    {"n", "n", NULL, "--completions", NULL, GENPARAM_INT, 1, GENPARAM_MAX_N, 0, 1, 1, GENPARAM_KEY_NO, G(n), -1,
     "completions per request, the request field n; -n is --max-tokens"},
    /* structured output: lo..hi are the constraint kinds a row carries (constraint.h); last, see the key */
    {"response_format", "response_format", "guided_json", "--response-format", "--guided-json",
     GENPARAM_CONSTRAINT, CONSTRAINT_JSON_OBJECT, CONSTRAINT_JSON_SCHEMA, 0, 0, 0, GENPARAM_KEY_YES,
     G(constraint), -1, "JSON output: '{\"type\": \"json_object\"}' or a json_schema object"},
    {"guided_regex", "guided_regex", NULL, "--guided-regex", NULL, GENPARAM_CONSTRAINT, CONSTRAINT_REGEX,
     CONSTRAINT_REGEX, 0, 0, 0, GENPARAM_KEY_YES, G(constraint), -1, "output matching a regular expression"},
    {"guided_choice", "guided_choice", NULL, "--guided-choice", NULL, GENPARAM_CONSTRAINT, CONSTRAINT_CHOICE,
     CONSTRAINT_CHOICE, 0, 0, 0, GENPARAM_KEY_YES, G(constraint), -1,
     "output exactly one of these (repeatable)"},
    {"guided_grammar", "guided_grammar", NULL, "--guided-grammar", NULL, GENPARAM_CONSTRAINT,
     CONSTRAINT_GRAMMAR, CONSTRAINT_GRAMMAR, 0, 0, 0, GENPARAM_KEY_YES, G(constraint), -1,
     "output matching a GBNF grammar (root rule)"},
    /* logprobs and scoring: last, entering the key only when set (so other requests keep their keys) */
    {"logprobs", "logprobs", NULL, NULL, NULL, GENPARAM_LOGPROBS, 0, LOGPROB_MAX_TOP, 0, -1, -1, GENPARAM_KEY_IF_SET,
     G(logprobs), -1, NULL},
    {"top_logprobs", "top_logprobs", NULL, NULL, NULL, GENPARAM_INT, 0, LOGPROB_MAX_TOP, 0, 0, 0, GENPARAM_KEY_IF_SET,
     G(top_logprobs), -1, NULL},
    {"echo", "echo", NULL, NULL, NULL, GENPARAM_BOOL, 0, 1, 0, 0, 0, GENPARAM_KEY_IF_SET, G(echo), -1, NULL},
};
const int genparam_count = (int)(sizeof genparam_table / sizeof genparam_table[0]);

#undef G
#undef S

static int32_t *int_at(struct gen_params *g, const struct genparam *p) { return (int32_t *)((char *)g + p->offset); }
static float *float_at(struct gen_params *g, const struct genparam *p) { return (float *)((char *)g + p->offset); }
static const int32_t *cint_at(const struct gen_params *g, const struct genparam *p)
{
    return (const int32_t *)((const char *)g + p->offset);
}
static const float *cfloat_at(const struct gen_params *g, const struct genparam *p)
{
    return (const float *)((const char *)g + p->offset);
}

/* --- values --- */

struct gen_params genparam_defaults(void)
{
    struct gen_params g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->type == GENPARAM_INT || p->type == GENPARAM_LOGPROBS) *int_at(&g, p) = (int32_t)p->def;
        else if (p->type == GENPARAM_FLOAT) *float_at(&g, p) = (float)p->def;
        else if (p->type == GENPARAM_BOOL) *(int *)((char *)&g + p->offset) = p->def != 0;
    }
    return g;
}

static void free_stop(char **stop, int32_t n)
{
    for (int32_t i = 0; i < n; i++) free(stop[i]);
    free(stop);
}

void genparam_free(struct gen_params *g)
{
    if (!g) return;
    free_stop(g->stop, g->n_stop);
    free(g->logit_bias);
    constraint_spec_free(&g->constraint);
    g->stop = NULL;
    g->logit_bias = NULL;
    g->n_stop = g->n_logit_bias = 0;
}

int genparam_copy(struct gen_params *dst, const struct gen_params *src, struct err *e)
{
    *dst = *src;
    dst->stop = NULL;
    dst->logit_bias = NULL;
    dst->n_stop = dst->n_logit_bias = 0;
    if (constraint_spec_copy(&dst->constraint, &src->constraint, NULL)) goto oom;
    if (src->n_stop) {
        dst->stop = calloc((size_t)src->n_stop, sizeof *dst->stop);
        if (!dst->stop) goto oom;
        for (int32_t i = 0; i < src->n_stop; i++) {
            dst->stop[i] = strdup(src->stop[i]);
            if (!dst->stop[i]) goto oom;
            dst->n_stop = i + 1;
        }
    }
    if (src->n_logit_bias) {
        dst->logit_bias = malloc((size_t)src->n_logit_bias * sizeof *dst->logit_bias);
        if (!dst->logit_bias) goto oom;
        memcpy(dst->logit_bias, src->logit_bias, (size_t)src->n_logit_bias * sizeof *dst->logit_bias);
        dst->n_logit_bias = src->n_logit_bias;
    }
    return 0;
oom:
    genparam_free(dst);
    return err_set(e, "out of memory");
}

/* --- validation --- */

static int in_range(const struct genparam *p, double v)
{
    return (p->lo_open ? v > p->lo : v >= p->lo) && v <= p->hi;
}

/* "[lo, hi]", "(lo, hi]" or ">= lo" (an INT row whose hi is INT32_MAX). */
static void range_text(const struct genparam *p, char *buf, size_t cap)
{
    if (p->type == GENPARAM_INT && p->hi >= INT32_MAX) snprintf(buf, cap, ">= %g", p->lo);
    else snprintf(buf, cap, "in %c%g, %g]", p->lo_open ? '(' : '[', p->lo, p->hi);
}

static int check_row(const struct genparam *p, const struct gen_params *g, struct err *e)
{
    char r[64];
    range_text(p, r, sizeof r);
    switch (p->type) {
    case GENPARAM_INT:
        if (!in_range(p, *cint_at(g, p))) return err_set(e, "%s must be %s, got %d", p->name, r, *cint_at(g, p));
        return 0;
    case GENPARAM_FLOAT:
        if (!in_range(p, *cfloat_at(g, p)))
            return err_set(e, "%s must be %s, got %g", p->name, r, (double)*cfloat_at(g, p));
        return 0;
    case GENPARAM_STOP:
        if (g->n_stop > GENPARAM_MAX_STOP) return err_set(e, "at most %d stop strings", GENPARAM_MAX_STOP);
        for (int32_t i = 0; i < g->n_stop; i++) {
            size_t len = strlen(g->stop[i]);
            if (len == 0 || len > GENPARAM_MAX_STOP_BYTES)
                return err_set(e, "stop strings must be 1..%d bytes", GENPARAM_MAX_STOP_BYTES);
        }
        return 0;
    case GENPARAM_LOGPROBS:
        if (*cint_at(g, p) != -1 && !in_range(p, *cint_at(g, p)))
            return err_set(e, "%s must be -1 (off) or %s, got %d", p->name, r, *cint_at(g, p));
        return 0;
    case GENPARAM_LOGIT_BIAS:
        for (int32_t i = 0; i < g->n_logit_bias; i++) {
            float b = g->logit_bias[i].bias;
            if (!in_range(p, b)) return err_set(e, "logit_bias values must be %s, got %g", r, (double)b);
            if (g->logit_bias[i].token < 0) return err_set(e, "logit_bias token ids must be >= 0");
        }
        return 0;
    default:
        return 0;
    }
}

int genparam_check(const struct gen_params *g, struct err *e)
{
    for (int i = 0; i < genparam_count; i++)
        if (check_row(&genparam_table[i], g, e)) return -1;
    if (g->max_tokens == 0 && !g->echo) /* a request may score its prompt; a run-wide default would score all */
        return err_set(e, "max_tokens must be at least 1 (0 only for a request with echo, to score its prompt)");
    return 0;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Constraint rows carry kinds 1..CONSTRAINT_GRAMMAR, no kind in two rows, and come after every other row
 * that enters the key (see genparam_key_encode). */
static int check_constraint_row(int i, struct err *e)
{
    const struct genparam *p = &genparam_table[i];
    int first = 0;
    while (first < genparam_count && genparam_table[first].type != GENPARAM_CONSTRAINT)
        first++;
    if (p->type != GENPARAM_CONSTRAINT)
        return i > first && p->key != GENPARAM_KEY_NO && p->key != GENPARAM_KEY_IF_SET
                   ? err_set(e, "genparam: %s enters the key after the constraint rows", p->name)
                   : 0;
    if (p->lo < 1 || p->hi > CONSTRAINT_GRAMMAR || p->lo > p->hi)
        return err_set(e, "genparam: %s: bad constraint kinds", p->name);
    for (int k = first; k < i; k++)
        if (genparam_table[k].type == GENPARAM_CONSTRAINT && genparam_table[k].hi >= p->lo &&
            genparam_table[k].lo <= p->hi)
            return err_set(e, "genparam: %s and %s carry the same constraint kind", genparam_table[k].name,
                           p->name);
    return 0;
}

int genparam_check_table(struct err *e)
{
    if (genparam_count > 64) return err_set(e, "genparam: %d rows; gen_params.given holds 64", genparam_count);
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        for (int k = 0; k < i; k++) {
            const struct genparam *q = &genparam_table[k];
            if (same(p->name, q->name) || same(p->json, q->json) || same(p->json, q->json_alias) ||
                same(p->json_alias, q->json) || same(p->flag, q->flag) || same(p->flag, q->flag_alias) ||
                same(p->flag_alias, q->flag))
                return err_set(e, "genparam: rows %s and %s share a name, field or flag", q->name, p->name);
        }
        int numeric = p->type == GENPARAM_INT || p->type == GENPARAM_FLOAT;
        if (numeric && !in_range(p, p->def)) return err_set(e, "genparam: %s's default is out of range", p->name);
        if (numeric && p->key == GENPARAM_KEY_SAMPLING && !in_range(p, p->off))
            return err_set(e, "genparam: %s's off value is out of range", p->name);
        if (p->sampler >= 0 && !numeric)
            return err_set(e, "genparam: %s maps to the sampler but is no number", p->name);
        if (check_constraint_row(i, e)) return -1;
    }
    return 0;
}

/* --- request JSON --- */

const char *genparam_json_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int bad(const char **code, const char *c, struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const char **code, const char *c, struct err *e, const char *fmt, ...)
{
    *code = c;
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int json_double(const json_t *v, const char *name, double *out, const char **code, struct err *e)
{
    if (!json_is_number(v))
        return bad(code, "invalid_type", e, "'%s' must be a number, got %s", name, genparam_json_type(v));
    double d = json_number_value(v);
    if (!isfinite(d)) return bad(code, "invalid_value", e, "'%s' must be a finite number", name);
    *out = d;
    return 0;
}

static int json_int_in(const json_t *v, const char *name, long long lo, long long hi, long long *out,
                        const char **code, struct err *e)
{
    long long x;
    if (json_is_integer(v)) {
        x = (long long)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!isfinite(d)) return bad(code, "invalid_value", e, "'%s' must be a finite integer", name);
        if (d != floor(d) || d < -9.2e18 || d > 9.2e18)
            return bad(code, "invalid_type", e, "'%s' must be an integer, got %g", name, d);
        x = (long long)d;
    } else {
        return bad(code, "invalid_type", e, "'%s' must be an integer, got %s", name, genparam_json_type(v));
    }
    if (x < lo || x > hi)
        return bad(code, "invalid_value", e, "'%s' must be in [%lld, %lld], got %lld", name, lo, hi, x);
    *out = x;
    return 0;
}

static int json_stop(const json_t *v, struct gen_params *g, const char **code, struct err *e)
{
    size_t n = 1;
    if (json_is_array(v)) n = json_array_size(v);
    else if (!json_is_string(v))
        return bad(code, "invalid_type", e, "'stop' must be a string or an array of strings, got %s",
                   genparam_json_type(v));
    if (n > GENPARAM_MAX_STOP)
        return bad(code, "invalid_value", e, "'stop' holds %zu strings, at most %d", n, GENPARAM_MAX_STOP);
    char **stop = n ? calloc(n, sizeof *stop) : NULL;
    if (n && !stop) return bad(code, "invalid_value", e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > GENPARAM_MAX_STOP_BYTES ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            free_stop(stop, (int32_t)i);
            return bad(code, json_is_string(s) ? "invalid_value" : "invalid_type", e,
                       "'stop' entries must be strings of 1..%d bytes", GENPARAM_MAX_STOP_BYTES);
        }
        stop[i] = strdup(json_string_value(s));
        if (!stop[i]) {
            free_stop(stop, (int32_t)i);
            return bad(code, "invalid_value", e, "out of memory");
        }
    }
    free_stop(g->stop, g->n_stop);
    g->stop = stop;
    g->n_stop = (int32_t)n;
    return 0;
}

static int cmp_bias(const void *a, const void *b)
{
    int32_t x = ((const struct logit_bias *)a)->token, y = ((const struct logit_bias *)b)->token;
    return (x > y) - (x < y);
}

/* Parses one "token id": bias entry into *out. */
static int json_bias_entry(const char *k, const json_t *val, struct logit_bias *out, const char **code, struct err *e)
{
    char *end;
    errno = 0;
    long long t = strtoll(k, &end, 10);
    if (!*k || *end || errno || t < 0 || t > INT32_MAX || k[0] == '-' || k[0] == '+' || k[0] == ' ')
        return bad(code, "invalid_value", e, "'logit_bias' key \"%.40s\" is not a token id", k);
    double d;
    if (json_double(val, "logit_bias value", &d, code, e) != 0) return -1;
    if (d < -100 || d > 100)
        return bad(code, "invalid_value", e, "'logit_bias' value for token %lld must be in [-100, 100], got %g", t, d);
    out->token = (int32_t)t;
    out->bias = (float)d;
    return 0;
}

static int json_logit_bias(const json_t *v, struct gen_params *g, const char **code, struct err *e)
{
    if (!json_is_object(v))
        return bad(code, "invalid_type", e, "'logit_bias' must be an object, got %s", genparam_json_type(v));
    size_t n = json_object_size(v), i = 0;
    if (n > GENPARAM_MAX_LOGIT_BIAS)
        return bad(code, "invalid_value", e, "'logit_bias' has %zu entries, at most %d", n, GENPARAM_MAX_LOGIT_BIAS);
    struct logit_bias *lb = n ? malloc(n * sizeof *lb) : NULL;
    if (n && !lb) return bad(code, "invalid_value", e, "out of memory");
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)v, k, val)
    {
        if (json_bias_entry(k, val, &lb[i++], code, e) != 0) goto fail;
    }
    if (n > 1) qsort(lb, n, sizeof *lb, cmp_bias); /* lb is NULL for {} */
    for (size_t j = 1; j < n; j++)
        if (lb[j].token == lb[j - 1].token) {
            bad(code, "invalid_value", e, "'logit_bias' names token %d twice", lb[j].token);
            goto fail;
        }
    free(g->logit_bias);
    g->logit_bias = lb;
    g->n_logit_bias = (int32_t)n;
    return 0;
fail:
    free(lb);
    return -1;
}

/* --- constraints (structured output) --- */

/* Replaces g's constraint by kind k from source text[0..len) (checked by the kind's front-end). */
static int set_constraint(struct gen_params *g, enum constraint_kind k, const char *text, size_t len,
                          const char *field, const char **code, struct err *e)
{
    struct err ce;
    struct constraint_spec s = {0};
    if (constraint_spec_set(&s, k, text, len, &ce))
        return bad(code, "invalid_value", e, "'%s': %s", field, ce.msg);
    constraint_spec_free(&g->constraint);
    g->constraint = s;
    return 0;
}

/* Sets a JSON-schema constraint from a schema value (an object or a boolean). */
static int set_schema(struct gen_params *g, const json_t *schema, const char *field, const char **code,
                      struct err *e)
{
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(code, "invalid_type", e, "'%s' must be a JSON Schema object, got %s", field,
                   genparam_json_type(schema));
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return bad(code, "invalid_value", e, "out of memory");
    int rc = set_constraint(g, CONSTRAINT_JSON_SCHEMA, text, strlen(text), field, code, e);
    free(text);
    return rc;
}

/* 0 if every key of o is one of names (NULL-terminated); else an error naming the first other one. */
static int only_keys(const json_t *o, const char *what, const char *const *names, const char **code,
                     struct err *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        const char *const *n = names;
        while (*n && strcmp(*n, k))
            n++;
        if (!*n) return bad(code, "invalid_value", e, "'%s' has an unsupported field '%.64s'", what, k);
    }
    return 0;
}

/* {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} */
static int json_schema_format(struct gen_params *g, const json_t *js, const char **code, struct err *e)
{
    static const char *const keys[] = {"name", "schema", "strict", "description", NULL};
    if (!json_is_object(js))
        return bad(code, "invalid_type", e, "'response_format.json_schema' must be an object, got %s",
                   js ? genparam_json_type(js) : "nothing");
    if (only_keys(js, "response_format.json_schema", keys, code, e)) return -1;
    const json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name))
        return bad(code, "invalid_type", e, "'response_format.json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict))
        return bad(code, "invalid_type", e, "'response_format.json_schema.strict' must be a boolean");
    const json_t *schema = json_object_get(js, "schema");
    if (!schema) return bad(code, "invalid_value", e, "'response_format.json_schema' needs a 'schema'");
    return set_schema(g, schema, "response_format.json_schema.schema", code, e);
}

/* response_format (OpenAI), or its alias guided_json (vLLM: the schema itself, or a string holding it). */
static int json_response_format(struct gen_params *g, const char *field, const json_t *v, const char **code,
                                struct err *e)
{
    static const char *const keys[] = {"type", "json_schema", NULL};
    if (!strcmp(field, "guided_json")) {
        if (!json_is_string(v)) return set_schema(g, v, field, code, e);
        json_error_t je;
        json_t *schema = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &je);
        if (!schema)
            return bad(code, "invalid_value", e, "'guided_json' is a string but not JSON: %s", je.text);
        int rc = set_schema(g, schema, field, code, e);
        json_decref(schema);
        return rc;
    }
    if (!json_is_object(v))
        return bad(code, "invalid_type", e, "'response_format' must be an object, got %s", genparam_json_type(v));
    if (only_keys(v, "response_format", keys, code, e)) return -1;
    const json_t *type = json_object_get(v, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    if (!strcmp(t, "text")) {
        constraint_spec_free(&g->constraint);
        return 0;
    }
    if (!strcmp(t, "json_object")) return set_constraint(g, CONSTRAINT_JSON_OBJECT, "", 0, field, code, e);
    if (!strcmp(t, "json_schema")) return json_schema_format(g, json_object_get(v, "json_schema"), code, e);
    return bad(code, "invalid_value", e,
               "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
}

static int json_constraint(const struct genparam *p, const char *field, const json_t *v, struct gen_params *g,
                           const char **code, struct err *e)
{
    enum constraint_kind k = (enum constraint_kind)p->lo;
    if (k == CONSTRAINT_JSON_OBJECT) return json_response_format(g, field, v, code, e);
    if (k == CONSTRAINT_CHOICE) {
        if (!json_is_array(v) || !json_array_size(v))
            return bad(code, "invalid_type", e, "'%s' must be a non-empty array of strings", field);
        char *text = json_dumps(v, JSON_COMPACT);
        if (!text) return bad(code, "invalid_value", e, "out of memory");
        int rc = set_constraint(g, k, text, strlen(text), field, code, e);
        free(text);
        return rc;
    }
    if (!json_is_string(v))
        return bad(code, "invalid_type", e, "'%s' must be a string, got %s", field, genparam_json_type(v));
    return set_constraint(g, k, json_string_value(v), json_string_length(v), field, code, e);
}

/* One constraint per request: a second constraint field is an error naming both. */
static int apply_constraint(const struct genparam *p, const char *field, const json_t *v,
                            struct gen_params *g, const char **code, struct err *e)
{
    int row = (int)(p - genparam_table);
    if (g->constraint_field)
        return bad(code, "invalid_value", e, "'%s' and '%s' both constrain the output: give one of them",
                   genparam_table[g->constraint_field - 1].json, field);
    if (json_constraint(p, field, v, g, code, e)) return -1;
    g->constraint_field = row + 1;
    return 0;
}

static int json_row(const struct genparam *p, const char *field, const json_t *v, struct gen_params *g,
                    const char **code, struct err *e)
{
    long long x;
    double d;
    switch (p->type) {
    case GENPARAM_INT:
        if (json_int_in(v, field, (long long)p->lo, (long long)p->hi, &x, code, e)) return -1;
        *int_at(g, p) = (int32_t)x;
        return 0;
    case GENPARAM_FLOAT:
        if (json_double(v, field, &d, code, e)) return -1;
        /* checked as the engine will see it: after rounding to float (1e-300 passes (0, 1] but rounds to 0) */
        if (!in_range(p, d) || !in_range(p, (float)d))
            return bad(code, "invalid_value", e, "'%s' must be in %c%g, %g], got %g", field, p->lo_open ? '(' : '[',
                       p->lo, p->hi, d);
        *float_at(g, p) = (float)d;
        return 0;
    case GENPARAM_BOOL:
        if (!json_is_boolean(v))
            return bad(code, "invalid_type", e, "'%s' must be a boolean, got %s", field, genparam_json_type(v));
        *(int *)((char *)g + p->offset) = json_is_true(v);
        return 0;
    case GENPARAM_SEED:
        if (json_int_in(v, field, INT64_MIN, INT64_MAX, &x, code, e)) return -1;
        g->has_seed = 1;
        g->seed = (uint64_t)x;
        return 0;
    case GENPARAM_STOP: return json_stop(v, g, code, e);
    case GENPARAM_LOGIT_BIAS: return json_logit_bias(v, g, code, e);
    case GENPARAM_CONSTRAINT: return apply_constraint(p, field, v, g, code, e);
    case GENPARAM_LOGPROBS:
        if (json_is_boolean(v)) {
            *int_at(g, p) = json_is_true(v) ? 0 : -1;
            return 0;
        }
        if (!json_is_integer(v))
            return bad(code, "invalid_type", e, "'%s' must be a boolean or an integer, got %s", field,
                       genparam_json_type(v));
        if (json_int_in(v, field, (long long)p->lo, (long long)p->hi, &x, code, e)) return -1;
        *int_at(g, p) = (int32_t)x;
        return 0;
    }
    return 0;
}

/* Request fields of OpenAI's chat and completions bodies that are not generation fields. */
static const char *const other_accepted[] = {"metadata", "user", "store", "service_tier", "prompt_cache_key",
                                             "safety_identifier", "parallel_tool_calls", NULL};
static const char *const other_neutral_only[] = {
    "stream",    "stream_options", "logprobs",   "top_logprobs", "echo",     "best_of",          "suffix",
    "tools",     "tool_choice",    "functions",  "function_call", "audio",   "modalities",       "prediction",
    "web_search_options", "reasoning_effort", "verbosity", NULL};

static int in_list(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

/* 1 when v is the value of field k that changes nothing. */
static int other_neutral(const char *k, const json_t *v)
{
    if (json_is_null(v)) return 1;
    if (!strcmp(k, "stream") || !strcmp(k, "logprobs") || !strcmp(k, "echo")) return json_is_false(v);
    if (!strcmp(k, "best_of")) return json_is_integer(v) && json_integer_value(v) == 1;
    if (!strcmp(k, "top_logprobs")) return json_is_integer(v) && json_integer_value(v) == 0;
    if (!strcmp(k, "suffix")) return json_is_string(v) && json_string_length(v) == 0;
    if (!strcmp(k, "tools") || !strcmp(k, "functions")) return json_is_array(v) && json_array_size(v) == 0;
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call"))
        return json_is_string(v) && !strcmp(json_string_value(v), "none");
    if (!strcmp(k, "modalities")) {
        const json_t *m = json_array_get(v, 0);
        return json_is_array(v) && json_array_size(v) == 1 && json_is_string(m) &&
               !strcmp(json_string_value(m), "text");
    }
    return 0;
}

int genparam_check_endpoint(const struct gen_params *g, int chat, const char **code, struct err *e)
{
    *code = "invalid_value";
    if (chat && g->echo) {
        *code = "unsupported_parameter";
        return err_set(e, "'echo' is a /v1/completions field; chat completions do not echo the prompt");
    }
    if (g->top_logprobs > 0 && g->logprobs < 0) return err_set(e, "'top_logprobs' needs 'logprobs': true");
    if (!chat && g->top_logprobs > 0)
        return err_set(e, "'top_logprobs' is a chat completions field; /v1/completions takes 'logprobs': N");
    if (!chat && g->logprobs > GENPARAM_MAX_COMPLETION_LOGPROBS)
        return err_set(e, "'logprobs' must be in [0, %d] for /v1/completions (OpenAI's limit), got %d",
                       GENPARAM_MAX_COMPLETION_LOGPROBS, (int)g->logprobs);
    if (g->max_tokens == 0 && (chat || !g->echo))
        return err_set(e, "'max_tokens' must be at least 1 (0 only with 'echo': true on /v1/completions, to score "
                          "the prompt)");
    return 0;
}

enum genparam_other genparam_other_field(const char *field, const json_t *v)
{
    if (in_list(other_accepted, field)) return GENPARAM_OTHER_ACCEPTED;
    if (in_list(other_neutral_only, field))
        return other_neutral(field, v) ? GENPARAM_OTHER_ACCEPTED : GENPARAM_OTHER_UNSUPPORTED;
    return GENPARAM_OTHER_UNKNOWN;
}

int genparam_apply_json(struct gen_params *g, const char *field, const json_t *v, const char **code, struct err *e)
{
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (!same(field, p->json) && !same(field, p->json_alias)) continue;
        if (json_is_null(v)) return 1;
        if (json_row(p, field, v, g, code, e)) return -1;
        g->given |= 1ull << i;
        return 1;
    }
    return 0;
}

/* --- CLI --- */

const struct genparam *genparam_find_flag(const char *flag)
{
    for (int i = 0; i < genparam_count; i++)
        if (same(flag, genparam_table[i].flag) || same(flag, genparam_table[i].flag_alias)) return &genparam_table[i];
    return NULL;
}

static int flag_stop(struct gen_params *g, const char *value, struct err *e)
{
    if (g->n_stop >= GENPARAM_MAX_STOP) return err_set(e, "at most %d --stop strings", GENPARAM_MAX_STOP);
    char **stop = realloc(g->stop, (size_t)(g->n_stop + 1) * sizeof *stop);
    if (!stop) return err_set(e, "out of memory");
    g->stop = stop;
    if (!(stop[g->n_stop] = strdup(value))) return err_set(e, "out of memory");
    g->n_stop++;
    return 0;
}

/* A constraint flag takes what the request field takes, as text: --response-format the JSON object,
 * --guided-json the schema, --guided-regex the pattern, --guided-grammar the grammar; --guided-choice one
 * choice per use. Two different constraint flags are an error. */
static int flag_constraint(struct gen_params *g, const struct genparam *p, const char *flag,
                           const char *value, struct err *e)
{
    enum constraint_kind k = (enum constraint_kind)p->lo;
    const char *code;
    if (g->constraint.kind != CONSTRAINT_NONE && !(k == CONSTRAINT_CHOICE && g->constraint.kind == k))
        return err_set(e,
                       "%s: another constraint was given already (one of --response-format, --guided-json, "
                       "--guided-regex, --guided-choice, --guided-grammar)",
                       flag);
    if (k == CONSTRAINT_REGEX || k == CONSTRAINT_GRAMMAR)
        return set_constraint(g, k, value, strlen(value), flag, &code, e);
    json_t *v = NULL;
    if (k == CONSTRAINT_CHOICE) {
        v = g->constraint.kind == k ? json_loads(g->constraint.text, 0, NULL) : json_array();
        if (!v || json_array_append_new(v, json_string(value))) {
            json_decref(v);
            return err_set(e, "%s: '%s' is not UTF-8 text", flag, value);
        }
    } else {
        json_error_t je;
        if (!(v = json_loads(value, JSON_DECODE_ANY, &je)))
            return err_set(e, "%s expects JSON: %s", flag, je.text);
    }
    int rc = k == CONSTRAINT_CHOICE
                 ? json_constraint(p, "guided_choice", v, g, &code, e)
                 : json_response_format(g, same(flag, p->flag_alias) ? "guided_json" : "response_format", v,
                                        &code, e);
    json_decref(v);
    return rc ? err_prefix(e, "%s", flag) : 0;
}

int genparam_set_flag(struct gen_params *g, const struct genparam *p, const char *flag, const char *value,
                      struct err *e)
{
    char *end;
    errno = 0;
    switch (p->type) {
    case GENPARAM_INT: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || v < (long long)p->lo || v > (long long)p->hi)
            return err_set(e, "%s expects an integer in [%lld, %lld], got '%s'", flag, (long long)p->lo,
                           (long long)p->hi, value);
        *int_at(g, p) = (int32_t)v;
        return 0;
    }
    case GENPARAM_FLOAT: {
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v))
            return err_set(e, "%s expects a number, got '%s'", flag, value);
        *float_at(g, p) = (float)v;
        return 0;
    }
    case GENPARAM_SEED: {
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-')
            return err_set(e, "%s expects a non-negative integer, got '%s'", flag, value);
        g->seed = v;
        g->has_seed = 1;
        return 0;
    }
    case GENPARAM_BOOL: *(int *)((char *)g + p->offset) = 1; return 0;
    case GENPARAM_STOP: return flag_stop(g, value, e);
    case GENPARAM_LOGIT_BIAS: return err_set(e, "%s: logit_bias has no flag", flag);
    case GENPARAM_LOGPROBS: return err_set(e, "%s: logprobs has no flag", flag);
    case GENPARAM_CONSTRAINT: return flag_constraint(g, p, flag, value, e);
    }
    return 0;
}

int genparam_in(const struct genparam *p, const char *const *only)
{
    if (!only) return 1;
    for (; *only; only++)
        if (!strcmp(*only, p->name)) return 1;
    return 0;
}

void genparam_usage_line(FILE *out, const char *left, const char *help, const char *def, const char *also)
{
    if ((int)strlen(left) > GENPARAM_USAGE_COL - 3) fprintf(out, "  %s\n%*s", left, GENPARAM_USAGE_COL, "");
    else fprintf(out, "  %-*s ", GENPARAM_USAGE_COL - 3, left);
    for (const char *h = help; *h; h++) {
        fputc(*h, out);
        if (*h == '\n') fprintf(out, "%*s", GENPARAM_USAGE_COL, "");
    }
    if (def && also) fprintf(out, " (%s; also %s)", def, also);
    else if (def || also) fprintf(out, def ? " (%s)" : " (also %s)", def ? def : also);
    fputc('\n', out);
}

/* "default 256" and the like: the value d holds for p, NULL where there is nothing to say (no stop strings,
 * a flag that is off, no constraint). */
static const char *usage_default(const struct genparam *p, const struct gen_params *d, char *buf, size_t cap)
{
    switch (p->type) {
    case GENPARAM_INT: snprintf(buf, cap, "default %d", *cint_at(d, p)); return buf;
    case GENPARAM_FLOAT: snprintf(buf, cap, "default %g", (double)*cfloat_at(d, p)); return buf;
    case GENPARAM_BOOL: return *(const int *)((const char *)d + p->offset) ? "default on" : NULL;
    case GENPARAM_SEED:
        if (!d->has_seed) return "default: derived from each request's id";
        snprintf(buf, cap, "default %llu", (unsigned long long)d->seed);
        return buf;
    default: return NULL;
    }
}

void genparam_usage(FILE *out, const struct gen_params *d, const char *const *only)
{
    struct gen_params table = genparam_defaults();
    if (!d) d = &table;
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (!p->flag || !genparam_in(p, only)) continue;
        static const char *const metavar[] = {" N", " X", "", " S", " STR", "", " TEXT", " N"};
        const char *alias = p->flag_alias;
        int short_alias = alias && alias[1] != '-';
        char left[64], def[64];
        snprintf(left, sizeof left, "%s%s%s%s", short_alias ? alias : "", short_alias ? ", " : "", p->flag,
                 metavar[p->type]);
        genparam_usage_line(out, left, p->help, usage_default(p, d, def, sizeof def), short_alias ? NULL : alias);
    }
}

/* --- settings, record --- */

static int row_has(const struct genparam *p, const struct constraint_spec *c)
{
    return c->kind != CONSTRAINT_NONE && c->kind >= p->lo && c->kind <= p->hi;
}

/* "none", "KIND:TEXT", or "KIND:sha256:HEX" for a text over 200 bytes (settings hold at most 768). */
static void constraint_setting(const struct genparam *p, const struct constraint_spec *c, char *buf,
                               size_t cap)
{
    if (!row_has(p, c)) {
        snprintf(buf, cap, "none");
        return;
    }
    if (c->len <= 200) {
        snprintf(buf, cap, "%s:%s", constraint_kind_name(c->kind), c->text);
        return;
    }
    uint8_t d[32];
    char hex[65];
    sha256_buf(c->text, c->len, d);
    sha256_hex(d, hex);
    snprintf(buf, cap, "%s:sha256:%s", constraint_kind_name(c->kind), hex);
}

/* The run record's value: the request field as a request would give it, or null. */
static json_t *constraint_json(const struct genparam *p, const struct constraint_spec *c)
{
    if (!row_has(p, c)) return json_null();
    if (c->kind == CONSTRAINT_JSON_OBJECT) return json_pack("{s:s}", "type", "json_object");
    if (c->kind == CONSTRAINT_REGEX || c->kind == CONSTRAINT_GRAMMAR) return json_string(c->text);
    json_t *v = json_loads(c->text, JSON_DECODE_ANY, NULL);
    if (c->kind == CONSTRAINT_CHOICE || !v) return v ? v : json_null();
    return json_pack("{s:s, s:{s:o}}", "type", "json_schema", "json_schema", "schema", v);
}

void genparam_setting(const struct genparam *p, const struct gen_params *g, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = '\0';
    if (p->key == GENPARAM_KEY_IF_SET) { /* at its default "none": what a store made before the row had */
        int32_t v = p->type == GENPARAM_BOOL ? *(const int *)((const char *)g + p->offset) : *cint_at(g, p);
        if (v == (int32_t)p->def) {
            snprintf(buf, cap, "none");
            return;
        }
    }
    switch (p->type) {
    case GENPARAM_INT:
    case GENPARAM_LOGPROBS: snprintf(buf, cap, "%d", *cint_at(g, p)); return;
    case GENPARAM_FLOAT: snprintf(buf, cap, "%.9g", (double)*cfloat_at(g, p)); return;
    case GENPARAM_BOOL: snprintf(buf, cap, "%d", *(const int *)((const char *)g + p->offset)); return;
    case GENPARAM_SEED:
        if (g->has_seed) snprintf(buf, cap, "%llu", (unsigned long long)g->seed);
        else snprintf(buf, cap, "none");
        return;
    case GENPARAM_STOP: {
        json_t *a = json_array();
        for (int32_t i = 0; i < g->n_stop; i++) json_array_append_new(a, json_string(g->stop[i]));
        char *d = json_dumps(a, JSON_COMPACT);
        snprintf(buf, cap, "%s", d ? d : "?");
        free(d);
        json_decref(a);
        return;
    }
    case GENPARAM_LOGIT_BIAS:
        for (int32_t i = 0; i < g->n_logit_bias && off + 32 < cap; i++)
            off += (size_t)snprintf(buf + off, cap - off, "%s%d:%.9g", i ? "," : "", g->logit_bias[i].token,
                                    (double)g->logit_bias[i].bias);
        return;
    case GENPARAM_CONSTRAINT:
        constraint_setting(p, &g->constraint, buf, cap);
        return;
    }
}

static json_t *row_json(const struct genparam *p, const struct gen_params *g)
{
    switch (p->type) {
    case GENPARAM_INT: return json_integer(*cint_at(g, p));
    case GENPARAM_LOGPROBS: return *cint_at(g, p) < 0 ? json_false() : json_integer(*cint_at(g, p));
    case GENPARAM_FLOAT: return json_real((double)*cfloat_at(g, p));
    case GENPARAM_BOOL: return json_boolean(*(const int *)((const char *)g + p->offset));
    case GENPARAM_SEED: return g->has_seed ? json_integer((json_int_t)g->seed) : json_null();
    case GENPARAM_STOP: {
        json_t *a = json_array();
        for (int32_t i = 0; i < g->n_stop; i++) json_array_append_new(a, json_string(g->stop[i]));
        return a;
    }
    case GENPARAM_LOGIT_BIAS: {
        json_t *o = json_object();
        for (int32_t i = 0; i < g->n_logit_bias; i++) {
            char k[16];
            snprintf(k, sizeof k, "%d", g->logit_bias[i].token);
            json_object_set_new(o, k, json_real((double)g->logit_bias[i].bias));
        }
        return o;
    }
    case GENPARAM_CONSTRAINT:
        return constraint_json(p, &g->constraint);
    }
    return json_null();
}

json_t *genparam_to_json(const struct gen_params *g)
{
    json_t *o = json_object();
    for (int i = 0; i < genparam_count; i++)
        json_object_set_new(o, genparam_table[i].name, row_json(&genparam_table[i], g));
    return o;
}

/* --- key, sampler --- */

static void put_u32(void (*put)(void *, const void *, size_t), void *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, b, 4);
}

static void put_f32(void (*put)(void *, const void *, size_t), void *w, float f)
{
    if (f == 0.0f) f = 0.0f; /* -0 -> +0 */
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(put, w, u);
}

void genparam_key_encode(const struct gen_params *g, uint64_t seed_used,
                         void (*put)(void *w, const void *bytes, size_t n), void *w)
{
    int greedy = !(g->temperature > 0);
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->key == GENPARAM_KEY_NO) continue;
        if (p->key == GENPARAM_KEY_IF_SET) { /* INT, BOOL and LOGPROBS rows: int32_t and int alike */
            int32_t v = p->type == GENPARAM_BOOL ? *(const int *)((const char *)g + p->offset) : *cint_at(g, p);
            if (v == (int32_t)p->def) continue;
            put_u32(put, w, 0x80010000u | (uint32_t)i);
            put_u32(put, w, (uint32_t)v);
            continue;
        }
        int off = greedy && p->key == GENPARAM_KEY_SAMPLING;
        switch (p->type) {
        case GENPARAM_INT: put_u32(put, w, (uint32_t)(off ? (int32_t)p->off : *cint_at(g, p))); break;
        case GENPARAM_FLOAT: put_f32(put, w, off ? (float)p->off : *cfloat_at(g, p)); break;
        case GENPARAM_BOOL: put_u32(put, w, *(const int *)((const char *)g + p->offset) != 0); break;
        case GENPARAM_SEED: {
            uint64_t s = off ? 0 : seed_used;
            put_u32(put, w, (uint32_t)s);
            put_u32(put, w, (uint32_t)(s >> 32));
            break;
        }
        case GENPARAM_STOP:
            put_u32(put, w, (uint32_t)g->n_stop);
            for (int32_t k = 0; k < g->n_stop; k++) {
                size_t len = strlen(g->stop[k]);
                put_u32(put, w, (uint32_t)len);
                put(w, g->stop[k], len);
            }
            break;
        case GENPARAM_LOGIT_BIAS:
            put_u32(put, w, (uint32_t)g->n_logit_bias);
            for (int32_t k = 0; k < g->n_logit_bias; k++) {
                put_u32(put, w, (uint32_t)g->logit_bias[k].token);
                put_f32(put, w, g->logit_bias[k].bias);
            }
            break;
        case GENPARAM_LOGPROBS: break; /* KEY_IF_SET only */
        case GENPARAM_CONSTRAINT:
            if (!row_has(p, &g->constraint)) break;
            put_u32(put, w, 0x80000000u | (uint32_t)g->constraint.kind);
            put_u32(put, w, (uint32_t)g->constraint.len);
            put(w, g->constraint.text, g->constraint.len);
            break;
        }
    }
}

void genparam_to_sampler(const struct gen_params *g, uint64_t seed, struct sampler_params *sp)
{
    *sp = sampler_default_params();
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->sampler < 0) continue;
        char *dst = (char *)sp + p->sampler;
        if (p->type == GENPARAM_INT) memcpy(dst, cint_at(g, p), sizeof(int32_t));
        else memcpy(dst, cfloat_at(g, p), sizeof(float));
    }
    sp->seed = seed;
    sp->n_logit_bias = g->n_logit_bias;
    sp->logit_bias = g->logit_bias;
}
