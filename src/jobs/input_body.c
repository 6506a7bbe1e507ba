/* input_body — one request object (a backlog line's body, its whole jsonl line, a server's body) into an
 * input_item: the prompt or messages, the generation fields, the model, an embeddings body; what is wrong
 * with it as an input_bad. The reader's side (lines, formats, ids) is input.c; what the two share is
 * input_int.h.
 */
#include "jobs/input.h"
#include "jobs/input_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "jobs/embedding.h"
#include "util/utf8.h"

int input_set_bad(struct input_bad *b, const char *code, const char *fmt, ...)
{
    b->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static char *dup_json_string(const json_t *s, size_t *len)
{
    size_t n = json_string_length(s);
    char *c = malloc(n + 1);
    if (!c) return NULL;
    memcpy(c, json_string_value(s), n);
    c[n] = '\0';
    if (len) *len = n;
    return c;
}

static int parse_messages(const json_t *v, struct input_item *it, struct input_bad *b)
{
    if (!json_is_array(v))
        return input_set_bad(b, "invalid_type", "'messages' must be an array, got %s", genparam_json_type(v));
    size_t n = json_array_size(v);
    if (n == 0) return input_set_bad(b, "invalid_value", "'messages' is empty");
    it->msgs = calloc(n, sizeof *it->msgs);
    if (!it->msgs) return input_set_bad(b, "invalid_value", "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(v, i);
        if (!json_is_object(m))
            return input_set_bad(b, "invalid_type", "messages[%zu] must be an object, got %s", i,
                                 genparam_json_type(m));
        const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) return input_set_bad(b, "invalid_type", "messages[%zu].role must be a string", i);
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return input_set_bad(b, "unsupported_request",
                                 "messages[%zu].role \"%.40s\" is not supported (system, user, assistant)", i, r);
        it->msgs[i].role = strdup(r);
        it->n_msgs = i + 1;
        if (json_is_string(content)) {
            it->msgs[i].content = dup_json_string(content, NULL);
        } else if (json_is_null(content) || (!content && !strcmp(r, "assistant"))) {
            if (strcmp(r, "assistant"))
                return input_set_bad(b, "invalid_type",
                                     "messages[%zu].content must be a string or an array of text parts", i);
            it->msgs[i].content = strdup("");
        } else if (json_is_array(content)) {
            /* text parts joined with "\n" */
            size_t total = 0, np = json_array_size(content);
            for (size_t k = 0; k < np; k++) {
                const json_t *part = json_array_get(content, k);
                const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text"))
                    return input_set_bad(b, "unsupported_request",
                                         "messages[%zu].content[%zu]: only parts of type \"text\" are supported", i, k);
                if (!json_is_string(text))
                    return input_set_bad(b, "invalid_type", "messages[%zu].content[%zu].text must be a string", i, k);
                total += json_string_length(text) + 1;
            }
            char *c = malloc(total + 1);
            if (!c) return input_set_bad(b, "invalid_value", "out of memory");
            size_t off = 0;
            for (size_t k = 0; k < np; k++) {
                const json_t *text = json_object_get(json_array_get(content, k), "text");
                if (k) c[off++] = '\n';
                memcpy(c + off, json_string_value(text), json_string_length(text));
                off += json_string_length(text);
            }
            c[off] = '\0';
            it->msgs[i].content = c;
        } else {
            return input_set_bad(b, content ? "invalid_type" : "missing_prompt",
                                 "messages[%zu].content must be a string or an array of text parts", i);
        }
        if (!it->msgs[i].role || !it->msgs[i].content) return input_set_bad(b, "invalid_value", "out of memory");
    }
    it->kind = INPUT_KIND_CHAT;
    return 0;
}

static int parse_prompt(const json_t *v, struct input_item *it, struct input_bad *b)
{
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0))) v = json_array_get(v, 0);
    if (json_is_string(v)) {
        it->prompt = dup_json_string(v, &it->prompt_len);
        if (!it->prompt) return input_set_bad(b, "invalid_value", "out of memory");
    } else if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0) return input_set_bad(b, "invalid_value", "'prompt' is empty");
        if (json_is_string(json_array_get(v, 0)))
            return input_set_bad(b, "unsupported_request", "'prompt' holds several prompts; put each on its own line");
        it->prompt_ids = malloc(n * sizeof *it->prompt_ids);
        if (!it->prompt_ids) return input_set_bad(b, "invalid_value", "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(v, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
                return input_set_bad(b, json_is_integer(t) ? "invalid_value" : "invalid_type",
                                     "'prompt' must be a string or an array of token ids (prompt[%zu] is not one)", i);
            it->prompt_ids[i] = (int32_t)json_integer_value(t);
        }
        it->n_prompt_ids = (int32_t)n;
    } else {
        return input_set_bad(b, "invalid_type", "'prompt' must be a string or an array of token ids, got %s",
                             genparam_json_type(v));
    }
    it->kind = INPUT_KIND_COMPLETION;
    return 0;
}

int input_parse_fields(input_reader *r, const json_t *obj, const char *prefix, const char *const *skip,
                       struct input_item *it, struct input_bad *b)
{
    const char *k;
    json_t *v;
    const json_t *prompt = NULL, *messages = NULL;
    json_object_foreach((json_t *)obj, k, v)
    {
        int handled = 0;
        for (const char *const *s = skip; *s; s++)
            if (!strcmp(k, *s)) handled = 1;
        if (handled) continue;
        if (!strcmp(k, "prompt")) {
            prompt = v;
            continue;
        }
        if (!strcmp(k, "messages")) {
            messages = v;
            continue;
        }
        if (!strcmp(k, "model")) {
            if (json_is_null(v)) continue;
            if (!json_is_string(v))
                return input_set_bad(b, "invalid_type", "'model' must be a string, got %s", genparam_json_type(v));
            free(it->model);
            it->model = dup_json_string(v, NULL);
            continue;
        }
        struct err ge;
        const char *code = NULL;
        int rc = genparam_apply_json(&it->gen, k, v, &code, &ge);
        if (rc < 0) return input_set_bad(b, code, "%s", ge.msg);
        if (rc == 1) continue;
        enum genparam_other o = genparam_other_field(k, v);
        if (o == GENPARAM_OTHER_UNSUPPORTED)
            return input_set_bad(b, "unsupported_parameter",
                                 "'%.64s' is not supported by nightshift (only its neutral value or null): the request "
                                 "would be answered without it", k);
        if (o == GENPARAM_OTHER_UNKNOWN) {
            if (r) input_warn_unknown(r, prefix, k, it->line);
            return input_set_bad(b, "unknown_field", "unknown field '%.64s'", k);
        }
    }
    if (prompt && messages) return input_set_bad(b, "invalid_value", "give either 'prompt' or 'messages', not both");
    if (!prompt && !messages) return input_set_bad(b, "missing_prompt", "no 'prompt' or 'messages'");
    if (messages ? parse_messages(messages, it, b) : parse_prompt(prompt, it, b)) return -1;
    struct err ge;
    const char *code; /* the checks between fields that depend on the endpoint (logprobs, echo, scoring) */
    if (genparam_check_endpoint(&it->gen, it->kind == INPUT_KIND_CHAT, &code, &ge))
        return input_set_bad(b, code, "%s", ge.msg);
    return 0;
}

/* 1 if jansson stopped at a NaN / Infinity / -Infinity token (any case): its error text names the token
 * ("invalid token near 'NaN'"); for a leading '-' the lexer stops after it, at jerr->position in line. */
static int is_nonfinite_token(const char *line, size_t len, const json_error_t *jerr)
{
    const char *t = strstr(jerr->text, "invalid token near '");
    if (!t) return 0;
    t += strlen("invalid token near '");
    if (t[0] == '-' && t[1] == '\'') {
        if (jerr->position < 0 || (size_t)jerr->position >= len) return 0;
        t = line + jerr->position;
        if (len - (size_t)jerr->position < 3) return 0;
    }
    return !strncasecmp(t, "nan", 3) || !strncasecmp(t, "inf", 3);
}

int input_is_number_error(const char *bytes, size_t len, const json_error_t *jerr)
{
    return strstr(jerr->text, "too big") || strstr(jerr->text, "overflow") || is_nonfinite_token(bytes, len, jerr);
}

/* The path of the first string in v that holds a NUL byte (a \u0000 escape) into path (cap bytes), or 0
 * when none does. Recursion depth is bounded by jansson's parser depth limit. */
static int find_nul(const json_t *v, char *path, size_t cap)
{
    if (json_is_string(v)) return strlen(json_string_value(v)) != json_string_length(v);
    size_t at = strlen(path);
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            snprintf(path + at, cap - at, "[%zu]", i);
            if (find_nul(json_array_get(v, i), path, cap)) return 1;
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            snprintf(path + at, cap - at, "%s%.40s", at ? "." : "", k);
            if (find_nul(x, path, cap)) return 1;
        }
    }
    path[at] = '\0';
    return 0;
}

int input_load_object(const char *bytes, size_t len, const char *what, json_t **root, json_error_t *jerr,
                      struct input_bad *b)
{
    *root = json_loadb(bytes, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, jerr);
    if (!*root) {
        /* name the common non-JSON numbers plainly */
        if (is_nonfinite_token(bytes, len, jerr))
            return input_set_bad(b, "invalid_value", "NaN and Infinity are not valid JSON numbers (column %d)",
                                 jerr->column);
        if (input_is_number_error(bytes, len, jerr))
            return input_set_bad(b, "invalid_value", "number out of range (column %d): %s", jerr->column, jerr->text);
        return input_set_bad(b, "invalid_json", "not JSON: %s (column %d)", jerr->text, jerr->column);
    }
    jerr->text[0] = '\0';
    if (!json_is_object(*root)) {
        input_set_bad(b, "invalid_type", "%s must be a JSON object, got %s", what, genparam_json_type(*root));
        json_decref(*root);
        *root = NULL;
        return -1;
    }
    return 0;
}

int input_refuse_nul(const json_t *root, struct input_bad *b)
{
    char path[256] = "";
    if (find_nul(root, path, sizeof path))
        return input_set_bad(b, "invalid_value", "'%s' holds a NUL character (\\u0000)", path);
    return 0;
}

int input_read_embedding(const json_t *body, struct input_item *it, struct input_bad *b)
{
    int erc = embedding_parse_body(body, &it->embed, &it->model, &b->code, b->msg, sizeof b->msg);
    if (erc < 0) input_set_bad(b, "invalid_value", "out of memory");
    if (erc != 0) return -1;
    it->kind = INPUT_KIND_EMBEDDING;
    it->gen.n = it->embed->n;
    it->gen.given = GENPARAM_ALL_ROWS; /* an embedding falls back to no generation default */
    return 0;
}

int input_endpoint_mismatch(const struct input_item *it, int chat, struct input_bad *b)
{
    if (chat && it->kind != INPUT_KIND_CHAT)
        return input_set_bad(b, "invalid_value", "url /v1/chat/completions needs body.messages");
    if (!chat && it->kind != INPUT_KIND_COMPLETION)
        return input_set_bad(b, "invalid_value", "url /v1/completions needs body.prompt");
    return 0;
}

int input_to_bad_item(struct input_item *it, const struct input_bad *b, struct err *e)
{
    struct input_item keep = {
        .line = it->line, .off = it->off, .custom_id = it->custom_id, .code = b->code, .model = it->model};
    it->custom_id = NULL;
    it->model = NULL;
    input_item_free(it);
    *it = keep;
    it->message = strdup(b->msg);
    if (!it->message) return err_set(e, "out of memory");
    return 0;
}

int input_parse_body(const char *bytes, size_t len, const struct gen_params *defaults, enum input_kind want,
                     const char *const *skip, struct input_item *it, json_t **root, struct err *e)
{
    static const char *const none[] = {NULL};
    memset(it, 0, sizeof *it);
    *root = NULL;
    if (genparam_copy(&it->gen, defaults, e) != 0) return -1;
    struct input_bad b = {0};
    size_t bad_at;
    if (!utf8_valid(bytes, len, &bad_at)) {
        input_set_bad(&b, "invalid_utf8", "invalid UTF-8 at byte %zu", bad_at);
        goto bad;
    }
    json_error_t jerr;
    if (input_load_object(bytes, len, "the body", root, &jerr, &b) || input_refuse_nul(*root, &b)) goto bad;
    if (want == INPUT_KIND_EMBEDDING) {
        if (input_read_embedding(*root, it, &b)) goto bad;
        return 0;
    }
    if (input_parse_fields(NULL, *root, "", skip ? skip : none, it, &b) != 0) goto bad;
    if (input_endpoint_mismatch(it, want == INPUT_KIND_CHAT, &b)) goto bad;
    return 0;
bad:
    return input_to_bad_item(it, &b, e);
}
