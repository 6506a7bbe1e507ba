/* openai — see openai.h. Responses are written with jobs/output's buffer and JSON string writer, so a
 * completion's text is escaped (and any bad UTF-8 repaired) exactly as in run's result files. */
#include "server/openai.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/embedding.h"
#include "jobs/ingest.h"
#include "jobs/input.h"
#include "jobs/key.h"
#include "jobs/output.h"

int openai_set_error(struct openai_error *err, int status, const char *type, const char *code,
                     const char *fmt, ...)
{
    err->status = status;
    err->type = type;
    err->code = code;
    err->param[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return 1;
}

/* A request refused by run's rules: status, type, code and param as run's error file has them for the same
 * body (jobs/output's output_fail_classify); prompt_field names a prompt that does not fit. Returns 1. */
static int refuse(struct openai_error *err, const char *prompt_field, const char *code, const char *msg)
{
    char param[sizeof err->param];
    struct output_fail f = {.message = msg};
    output_fail_classify(&f, code, msg, prompt_field, param, sizeof param);
    openai_set_error(err, f.status, f.type, f.code, "%s", msg);
    if (f.param) snprintf(err->param, sizeof err->param, "%s", f.param);
    return 1;
}

/* ---- requests ---- */

/* The fields only the server reads (a backlog line has no use for them: run refuses "stream": true); their
 * errors read as run's do (refuse). */
static const char *const server_fields[] = {"stream", "stream_options", NULL};

static int bad_request(struct openai_error *err, const char *code, const char *msg)
{
    return refuse(err, NULL, code, msg);
}

static int read_server_fields(const json_t *root, struct server_req *r, struct openai_error *err)
{
    const json_t *v = json_object_get(root, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return bad_request(err, "invalid_type", "'stream' must be a boolean");
    r->stream = json_is_true(v);
    v = json_object_get(root, "stream_options");
    if (v && !json_is_null(v)) {
        const json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || (u && !json_is_boolean(u)))
            return bad_request(err, "invalid_type",
                               "'stream_options' must be an object with a boolean 'include_usage'");
        if (!r->stream)
            return bad_request(err, "invalid_value", "'stream_options' is only allowed with 'stream': true");
        r->include_usage = json_is_true(u);
    }
    return 0;
}

/* Fills r from the parsed item: prompt (rendered, tokenized, checked), parameters, seeds. */
static int fill_request(const struct openai_ctx *c, struct input_item *it, uint64_t unseeded,
                        struct server_req *r, struct openai_error *err, struct err *e)
{
    const char *code, *field = it->kind == INPUT_KIND_CHAT ? "messages" : "prompt";
    char msg[1024];
    int rc =
        ingest_prompt(c->model, c->parse_special, it, &r->prompt, &r->n_prompt, NULL, &code, msg, sizeof msg, e);
    if (rc != 0) return rc < 0 ? -1 : refuse(err, field, code, msg);
    if (ingest_check_request(c->model, it->kind, &it->gen, r->prompt, r->n_prompt, &code, msg, sizeof msg))
        return refuse(err, field, code, msg);
    r->max_tokens = ingest_max_tokens(c->model, r->n_prompt, it->gen.max_tokens);
    r->vocab = c->model->vocab;
    r->rendered = it->gen.echo || it->gen.logprobs >= 0;
    r->gen = it->gen;
    memset(&it->gen, 0, sizeof it->gen);
    uint64_t base = r->gen.has_seed ? r->gen.seed : unseeded;
    for (int32_t i = 0; i < r->n_choices; i++)
        r->choices[i].seed = key_completion_seed(base, (uint32_t)i);
    return 0;
}

/* Fills r, an embeddings request, from the parsed item: its inputs tokenized and checked as run's are. */
static int fill_embeddings(const struct openai_ctx *c, struct input_item *it, struct server_req *r,
                           struct openai_error *err, struct err *e)
{
    const char *code;
    char msg[1024];
    int rc = ingest_embed_prompts(c->model, c->parse_special, it, &r->prompt, &r->n_prompt, &r->starts, &code, msg,
                                  sizeof msg, e);
    if (rc != 0) return rc < 0 ? -1 : refuse(err, "input", code, msg);
    r->dimensions = it->embed->dimensions;
    r->base64 = it->embed->base64;
    return 0;
}

int openai_parse_request(const struct openai_ctx *c, enum input_kind kind, const char *body, size_t len,
                         uint64_t unseeded, struct server_req **out, struct openai_error *err, struct err *e)
{
    struct input_item it;
    json_t *root = NULL;
    struct server_req *r = NULL;
    int rc = -1, chat = kind == INPUT_KIND_CHAT, embed = kind == INPUT_KIND_EMBEDDING;
    const char *field = embed ? "input" : chat ? "messages" : "prompt";
    *out = NULL;
    if (input_parse_body(body, len, c->defaults, kind, server_fields, &it, &root, e)) goto done;
    if (it.code) {
        rc = refuse(err, field, it.code, it.message);
        goto done;
    }
    r = server_req_new(it.gen.n);
    if (!r) {
        err_set(e, "out of memory");
        goto done;
    }
    r->chat = chat;
    if (embed)
        rc = fill_embeddings(c, &it, r, err, e);
    else if ((rc = read_server_fields(root, r, err)) == 0)
        rc = fill_request(c, &it, unseeded, r, err, e);
    if (rc == 0) {
        *out = r;
        r = NULL;
    }
done:
    server_req_discard(r);
    json_decref(root);
    input_item_free(&it);
    return rc;
}

/* ---- responses ---- */

static void put_str(struct output_buf *b, const char *s)
{
    output_buf_put(b, s, strlen(s));
}

static void put_fmt(struct output_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(struct output_buf *b, const char *fmt, ...)
{
    char t[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (n > 0) output_buf_put(b, t, (size_t)n < sizeof t ? (size_t)n : sizeof t - 1);
}

static void put_json_str(struct output_buf *b, const char *s, size_t n)
{
    output_buf_put_json_string(b, s ? s : "", s ? n : 0);
}

static char *finish_buf(struct output_buf *b, size_t *len)
{
    output_buf_put(b, "", 1); /* NUL */
    if (b->oom) {
        output_buf_free(b);
        return NULL;
    }
    *len = b->n - 1;
    return b->p;
}

void openai_request_id(const struct server_req *r, uint64_t salt, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s-%08" PRIx64 "%016" PRIx64, r->chat ? "chatcmpl" : "cmpl", salt & 0xffffffffu,
             r->id);
}

const char *openai_finish_reason(enum engine_finish f)
{
    return f == ENGINE_FINISH_STOP ? "stop" : f == ENGINE_FINISH_LENGTH ? "length" : NULL;
}

/* {"id":...,"object":...,"created":...,"model":... (no closing brace) */
static void put_head(struct output_buf *b, const char *id, const char *object, int64_t created,
                     const char *model)
{
    put_str(b, "{\"id\":");
    put_json_str(b, id, strlen(id));
    put_str(b, ",\"object\":");
    put_json_str(b, object, strlen(object));
    put_fmt(b, ",\"created\":%" PRId64 ",\"model\":", created);
    put_json_str(b, model, strlen(model));
}

/* ,"usage":{...} as in run's result lines (jobs/output); cached: the first choice's prefix-cache hits. */
static void put_usage(struct output_buf *b, const struct server_req *r)
{
    int64_t gen = 0;
    for (int32_t i = 0; i < r->n_choices; i++)
        gen += r->choices[i].n_tokens;
    put_str(b, ",\"usage\":");
    output_usage(b, r->n_prompt, gen, r->n_choices ? r->choices[0].n_cached : 0);
}

/* The error of a choice that neither stopped nor reached its length; 0 when every choice did. */
static int failed_choice(const struct server_req *r, struct openai_error *err)
{
    for (int32_t i = 0; i < r->n_choices; i++) {
        const struct server_choice *ch = &r->choices[i];
        if (ch->finish == ENGINE_FINISH_CANCELLED)
            return openai_set_error(err, 503, "server_error", "cancelled",
                                    "the request was cancelled: the server is shutting down");
        if (ch->finish == ENGINE_FINISH_ERROR)
            return openai_set_error(err, 500, "server_error", "engine_error", "%s",
                                    ch->error ? ch->error : "failed");
    }
    return 0;
}

/* A choice rendered when it ended (echo, logprobs: output_result_text): o gets its text and, with logprobs,
 * its logprobs object in r's endpoint's shape, appended to lp from *at (the caller points o->logprobs into lp
 * once lp is final). 0, or -1 when the stored form cannot be read or out of memory. */
static int rendered_choice(const struct server_req *r, const struct server_choice *c, struct output_choice *o,
                           struct output_buf *lp, size_t *at)
{
    *at = lp->n;
    if (!r->rendered || r->gen.logprobs < 0 || !c->text) return 0;
    if (output_logprobs_unpack(c->text, c->text_len, &o->text, &o->len) ||
        output_logprobs_render(lp, r->vocab, r->chat, c->text, c->text_len) || lp->oom)
        return -1;
    o->logprobs_len = lp->n - *at;
    return 0;
}

/* An embeddings request's answer: run's embeddings list (jobs/embedding) from its choices' stored texts. */
static char *embeddings_response(const struct server_req *r, const char *model, size_t *len,
                                 struct openai_error *err)
{
    size_t n = r->n_choices > 0 ? (size_t)r->n_choices : 1;
    const char **texts = calloc(n, sizeof *texts);
    size_t *lens = calloc(n, sizeof *lens);
    struct output_buf b = {0};
    struct err e;
    char *out = NULL;
    if (texts && lens) {
        for (int32_t i = 0; i < r->n_choices; i++) {
            texts[i] = r->choices[i].text ? r->choices[i].text : "";
            lens[i] = r->choices[i].text_len;
        }
        struct embedding_out o = {texts, lens, r->n_choices, r->dimensions, r->base64, model, r->n_prompt};
        if (embedding_body(&b, &o, &e) == 0) out = finish_buf(&b, len);
        else openai_set_error(err, 500, "server_error", "engine_error", "%s", e.msg);
    }
    if (!out) output_buf_free(&b);
    if (!out && (!texts || !lens || b.oom))
        openai_set_error(err, 500, "server_error", "out_of_memory", "out of memory");
    free(texts);
    free(lens);
    return out;
}

char *openai_response(const struct server_req *r, const char *id, const char *model, int64_t created,
                      size_t *len, struct openai_error *err)
{
    if (failed_choice(r, err)) return NULL;
    if (r->starts) return embeddings_response(r, model, len, err);
    size_t n = r->n_choices > 0 ? (size_t)r->n_choices : 1;
    struct output_choice *ch = calloc(n, sizeof *ch);
    size_t *at = calloc(n, sizeof *at);
    struct output_buf lp = {0}, b = {0};
    char *out = NULL;
    if (!ch || !at) goto oom;
    int64_t gen = 0;
    for (int32_t i = 0; i < r->n_choices; i++) {
        const struct server_choice *c = &r->choices[i];
        ch[i] = (struct output_choice){.text = c->text ? c->text : "", .len = c->text_len,
                                       .finish_reason = openai_finish_reason(c->finish)};
        if (rendered_choice(r, c, &ch[i], &lp, &at[i])) goto oom;
        gen += c->n_tokens;
    }
    for (int32_t i = 0; i < r->n_choices; i++) /* lp.p is final now */
        if (ch[i].logprobs_len) ch[i].logprobs = lp.p + at[i];
    struct output_ok o = {.chat = r->chat, .model = model, .created = created, .choices = ch,
                          .n_choices = r->n_choices, .prompt_tokens = r->n_prompt, .completion_tokens = gen,
                          .cached_tokens = r->n_choices ? r->choices[0].n_cached : 0};
    output_completion_body(&b, &o, id);
    out = finish_buf(&b, len);
oom:
    free(ch);
    free(at);
    output_buf_free(&lp);
    if (!out) openai_set_error(err, 500, "server_error", "out_of_memory", "out of memory");
    return out;
}

/* One chunk: data: {head,"choices":[{"index":c, <delta or text>, "logprobs":lp or null,"finish_reason":fr}]} */
static void put_chunk(struct output_buf *b, const struct server_req *r, const char *id, const char *model,
                      int64_t created, int32_t c, const char *delta_json, const char *text, size_t len,
                      const struct output_buf *lp, const char *finish)
{
    put_str(b, "data: ");
    put_head(b, id, r->chat ? "chat.completion.chunk" : "text_completion", created, model);
    put_fmt(b, ",\"choices\":[{\"index\":%d,", (int)c);
    if (r->chat && delta_json) {
        put_str(b, delta_json);
    } else if (r->chat) {
        put_str(b, "\"delta\":{\"content\":");
        put_json_str(b, text, len);
        put_str(b, "}");
    } else {
        put_str(b, "\"text\":");
        put_json_str(b, text, len);
    }
    put_str(b, ",\"logprobs\":");
    if (lp && lp->n)
        output_buf_put(b, lp->p, lp->n);
    else
        put_str(b, "null");
    put_str(b, ",\"finish_reason\":");
    if (finish)
        put_json_str(b, finish, strlen(finish));
    else
        put_str(b, "null");
    put_str(b, "}]}\n\n");
}

char *openai_stream_start(const struct server_req *r, const char *id, const char *model, int64_t created,
                          size_t *len)
{
    struct output_buf b = {0};
    for (int32_t c = 0; r->chat && c < r->n_choices; c++)
        put_chunk(&b, r, id, model, created, c, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}", NULL,
                  0, NULL, NULL);
    return finish_buf(&b, len);
}

/* The text chunk of an event: a rendered choice's (echo, logprobs) comes whole in its final event, its
 * logprobs object with it; any other is the new text as it is. */
static void put_event_text(struct output_buf *b, const struct server_req *r, const char *id, const char *model,
                           int64_t created, const struct server_event *ev)
{
    int ok = ev->finished && openai_finish_reason(ev->finish);
    if (!r->rendered || r->gen.logprobs < 0 || !ok) {
        if (ev->len > 0) put_chunk(b, r, id, model, created, ev->choice, NULL, ev->text, ev->len, NULL, NULL);
        return;
    }
    struct output_buf lp = {0};
    const char *text;
    size_t len;
    if (output_logprobs_unpack(ev->text, ev->len, &text, &len) ||
        output_logprobs_render(&lp, r->vocab, r->chat, ev->text, ev->len))
        b->oom = 1;
    else
        put_chunk(b, r, id, model, created, ev->choice, NULL, text, len, &lp, NULL);
    b->oom |= lp.oom;
    output_buf_free(&lp);
}

char *openai_stream_event(const struct server_req *r, const char *id, const char *model, int64_t created,
                          const struct server_event *ev, size_t *len)
{
    struct output_buf b = {0};
    put_event_text(&b, r, id, model, created, ev);
    if (ev->finished) {
        const char *fr = openai_finish_reason(ev->finish);
        if (fr) {
            put_chunk(&b, r, id, model, created, ev->choice, "\"delta\":{}", "", 0, NULL, fr);
        } else {
            struct openai_error err;
            if (ev->finish == ENGINE_FINISH_CANCELLED)
                openai_set_error(&err, 503, "server_error", "cancelled",
                                 "the request was cancelled: the server is shutting down");
            else
                openai_set_error(&err, 500, "server_error", "engine_error", "%s",
                                 ev->error ? ev->error : "failed");
            size_t n;
            char *body = openai_error_body(&err, &n);
            put_str(&b, "data: ");
            if (body) output_buf_put(&b, body, n);
            put_str(&b, "\n\n");
            if (!body) b.oom = 1;
            free(body);
        }
    }
    return finish_buf(&b, len);
}

char *openai_stream_end(const struct server_req *r, const char *id, const char *model, int64_t created,
                        size_t *len)
{
    struct output_buf b = {0};
    if (r->include_usage) {
        put_str(&b, "data: ");
        put_head(&b, id, r->chat ? "chat.completion.chunk" : "text_completion", created, model);
        put_str(&b, ",\"choices\":[]");
        put_usage(&b, r);
        put_str(&b, "}\n\n");
    }
    put_str(&b, "data: [DONE]\n\n");
    return finish_buf(&b, len);
}

char *openai_models(const char *model, int64_t created, int one, size_t *len)
{
    struct output_buf b = {0};
    put_str(&b, one ? "{\"id\":" : "{\"object\":\"list\",\"data\":[{\"id\":");
    put_json_str(&b, model, strlen(model));
    put_fmt(&b, ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":\"nightshift\"}", created);
    put_str(&b, one ? "" : "]}");
    return finish_buf(&b, len);
}

char *openai_error_body(const struct openai_error *err, size_t *len)
{
    struct output_buf b = {0};
    put_str(&b, "{\"error\":{\"message\":");
    put_json_str(&b, err->message, strlen(err->message));
    put_str(&b, ",\"type\":");
    put_json_str(&b, err->type, strlen(err->type));
    put_str(&b, ",\"param\":");
    if (err->param[0])
        put_json_str(&b, err->param, strlen(err->param));
    else
        put_str(&b, "null");
    put_str(&b, ",\"code\":");
    if (err->code)
        put_json_str(&b, err->code, strlen(err->code));
    else
        put_str(&b, "null");
    put_str(&b, "}}");
    return finish_buf(&b, len);
}
