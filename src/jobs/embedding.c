/* embedding — see embedding.h. */
#include "jobs/embedding.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pooling.h"
#include "util/base64.h"

void embedding_input_free(struct input_embed *in)
{
    if (!in) return;
    for (int32_t i = 0; i < in->n; i++) {
        if (in->text) free(in->text[i]);
        if (in->ids) free(in->ids[i]);
    }
    free(in->text);
    free(in->len);
    free(in->ids);
    free(in->n_ids);
    free(in);
}

static int bad(const char **code, char *msg, size_t cap, const char *c, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(const char **code, char *msg, size_t cap, const char *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    *code = c;
    return 1;
}

/* 1 if v is a non-empty array of integers (token ids). */
static int is_id_array(const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) == 0) return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_integer(json_array_get(v, i))) return 0;
    return 1;
}

/* Input i of in from v (a string or an array of token ids; where names it in messages). */
static int take_input(struct input_embed *in, int32_t i, const json_t *v, const char *where, const char **code,
                      char *msg, size_t cap)
{
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n == 0) return bad(code, msg, cap, "invalid_value", "'%s' is an empty string", where);
        if (!(in->text[i] = malloc(n + 1))) return -1;
        memcpy(in->text[i], json_string_value(v), n + 1);
        in->len[i] = n;
        return 0;
    }
    size_t n = json_array_size(v);
    if (!(in->ids[i] = malloc(n * sizeof *in->ids[i]))) return -1;
    for (size_t k = 0; k < n; k++) {
        json_int_t t = json_integer_value(json_array_get(v, k));
        if (t < 0 || t > INT32_MAX)
            return bad(code, msg, cap, "invalid_value", "'%s' holds token id %" JSON_INTEGER_FORMAT ", not a token id",
                       where, t);
        in->ids[i][k] = (int32_t)t;
    }
    in->n_ids[i] = (int32_t)n;
    return 0;
}

/* The inputs of "input" (v). */
static int read_inputs(struct input_embed *in, const json_t *v, const char **code, char *msg, size_t cap)
{
    static const char shape[] = "'input' must be a string, an array of strings, an array of token ids or an array "
                                "of token-id arrays";
    int several = json_is_array(v) && !is_id_array(v);
    if (!json_is_string(v) && !json_is_array(v)) return bad(code, msg, cap, "invalid_type", "%s", shape);
    if (json_is_array(v) && json_array_size(v) == 0) return bad(code, msg, cap, "invalid_value", "'input' is empty");
    size_t n = several ? json_array_size(v) : 1;
    if (n > EMBEDDING_MAX_INPUTS)
        return bad(code, msg, cap, "invalid_value", "'input' holds %zu inputs; a line takes at most %d", n,
                   EMBEDDING_MAX_INPUTS);
    in->text = calloc(n, sizeof *in->text);
    in->len = calloc(n, sizeof *in->len);
    in->ids = calloc(n, sizeof *in->ids);
    in->n_ids = calloc(n, sizeof *in->n_ids);
    if (!in->text || !in->len || !in->ids || !in->n_ids) return -1;
    in->n = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = several ? json_array_get(v, i) : v;
        char where[32];
        snprintf(where, sizeof where, several ? "input[%zu]" : "input", i);
        if ((!json_is_string(x) && !is_id_array(x)) ||
            json_is_string(x) != json_is_string(several ? json_array_get(v, 0) : v))
            return bad(code, msg, cap, "invalid_type", "%s (not a mix)", shape);
        int rc = take_input(in, (int32_t)i, x, where, code, msg, cap);
        if (rc) return rc;
    }
    return 0;
}

/* encoding_format, dimensions, user and model. */
static int read_option(struct input_embed *in, const char *k, const json_t *v, char **model, const char **code,
                       char *msg, size_t cap)
{
    if (!strcmp(k, "encoding_format")) {
        const char *f = json_is_string(v) ? json_string_value(v) : NULL;
        if (json_is_null(v)) return 0;
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return bad(code, msg, cap, json_is_string(v) ? "invalid_value" : "invalid_type",
                       "'encoding_format' must be \"float\" or \"base64\"");
        in->base64 = !strcmp(f, "base64");
    } else if (!strcmp(k, "dimensions")) {
        if (json_is_null(v)) return 0;
        if (!json_is_integer(v))
            return bad(code, msg, cap, "invalid_type", "'dimensions' must be an integer, got %s",
                       genparam_json_type(v));
        if (json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
            return bad(code, msg, cap, "invalid_value", "'dimensions' must be at least 1");
        in->dimensions = (int32_t)json_integer_value(v);
    } else if (!strcmp(k, "user")) {
        if (!json_is_string(v) && !json_is_null(v))
            return bad(code, msg, cap, "invalid_type", "'user' must be a string, got %s", genparam_json_type(v));
    } else if (!strcmp(k, "model")) {
        if (json_is_null(v)) return 0;
        if (!json_is_string(v))
            return bad(code, msg, cap, "invalid_type", "'model' must be a string, got %s", genparam_json_type(v));
        free(*model);
        if (!(*model = strdup(json_string_value(v)))) return -1;
    } else {
        return bad(code, msg, cap, "unknown_field", "unknown field '%.64s'", k);
    }
    return 0;
}

int embedding_parse_body(const json_t *body, struct input_embed **out, char **model, const char **code, char *msg,
                         size_t cap)
{
    *out = NULL;
    *model = NULL;
    struct input_embed *in = calloc(1, sizeof *in);
    if (!in) return -1;
    const json_t *input = NULL;
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)body, k, v)
    {
        if (!strcmp(k, "input")) input = v;
        else if ((rc = read_option(in, k, v, model, code, msg, cap)) != 0) break;
    }
    if (rc == 0 && !input) rc = bad(code, msg, cap, "missing_prompt", "missing 'input'");
    if (rc == 0) rc = read_inputs(in, input, code, msg, cap);
    if (rc != 0) {
        embedding_input_free(in);
        free(*model);
        *model = NULL;
        return rc;
    }
    *out = in;
    return 0;
}

char *embedding_to_text(const float *v, int32_t n, size_t *len)
{
    uint8_t *bytes = malloc((size_t)n * 4 + 1);
    char *text = malloc(base64_encoded_len((size_t)n * 4) + 1);
    if (!bytes || !text) {
        free(bytes);
        free(text);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) { /* little-endian whatever the host */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
    *len = base64_encode(bytes, (size_t)n * 4, text);
    free(bytes);
    return text;
}

int embedding_from_text(const char *text, size_t len, float **v, int32_t *n)
{
    *v = NULL;
    *n = 0;
    uint8_t *bytes = malloc(len / 4 * 3 + 1);
    size_t nb;
    if (!bytes || base64_decode(text, len, bytes, &nb) != 0 || nb % 4 || nb == 0 || nb / 4 > INT32_MAX) {
        free(bytes);
        return -1;
    }
    float *out = malloc(nb);
    if (!out) {
        free(bytes);
        return -1;
    }
    for (size_t i = 0; i < nb / 4; i++) {
        uint32_t u = 0;
        for (int k = 0; k < 4; k++) u |= (uint32_t)bytes[4 * i + k] << (8 * k);
        memcpy(&out[i], &u, 4);
    }
    free(bytes);
    *v = out;
    *n = (int32_t)(nb / 4);
    return 0;
}

int embedding_result_to_text(struct engine_result *r)
{
    if (!r->embedding) return 0;
    size_t len;
    char *text = embedding_to_text(r->embedding, r->n_embedding, &len);
    if (!text) return -1;
    free(r->text);
    r->text = text;
    r->text_len = len;
    free(r->embedding);
    r->embedding = NULL;
    r->n_embedding = 0;
    return 0;
}

static void put_str(struct output_buf *b, const char *s)
{
    output_buf_put(b, s, strlen(s));
}

/* One data entry: embedding i (v, d values) as floats or base64. */
static int put_entry(struct output_buf *b, int32_t i, const float *v, int32_t d, int base64)
{
    char t[80];
    snprintf(t, sizeof t, "%s{\"object\":\"embedding\",\"index\":%" PRId32 ",\"embedding\":", i ? "," : "", i);
    put_str(b, t);
    if (base64) {
        size_t len;
        char *text = embedding_to_text(v, d, &len);
        if (!text) return -1;
        output_buf_put_json_string(b, text, len);
        free(text);
    } else {
        put_str(b, "[");
        for (int32_t k = 0; k < d; k++) {
            int n = snprintf(t, sizeof t, "%s%.9g", k ? "," : "", (double)v[k]);
            output_buf_put(b, t, (size_t)n);
        }
        put_str(b, "]");
    }
    put_str(b, "}");
    return 0;
}

int embedding_body(struct output_buf *b, const struct embedding_out *o, struct err *e)
{
    put_str(b, "{\"object\":\"list\",\"data\":[");
    for (int32_t i = 0; i < o->n; i++) {
        float *v;
        int32_t n;
        if (embedding_from_text(o->texts[i], o->lens[i], &v, &n) != 0)
            return err_set(e, "embedding %d: the stored result is not an embedding (or out of memory)", (int)i);
        if (o->dimensions > n) {
            free(v);
            return err_set(e, "embedding %d: dimensions %d, but it holds %d", (int)i, (int)o->dimensions, (int)n);
        }
        int32_t d = o->dimensions ? o->dimensions : n;
        if (d < n) pooling_normalize(v, d); /* the first d values, unit length again */
        int rc = put_entry(b, i, v, d, o->base64);
        free(v);
        if (rc) return err_set(e, "out of memory");
    }
    put_str(b, "],\"model\":");
    output_buf_put_json_string(b, o->model, strlen(o->model));
    char t[96];
    snprintf(t, sizeof t, ",\"usage\":{\"prompt_tokens\":%" PRId64 ",\"total_tokens\":%" PRId64 "}}", o->prompt_tokens,
             o->prompt_tokens);
    put_str(b, t);
    return 0;
}
