/* ingest — see ingest.h. */
#include "jobs/ingest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/key.h"
#include "util/log.h"
#include "util/sha256.h"

/* What reading one backlog needs besides the current line. */
struct reader {
    const struct job_config *c;
    const struct job_model *m;
    ledger *l;
    struct ingest_stats *st;
    struct ingest_fallback fb; /* chat lines the model's template failed on (rendered by family) */
    int64_t fallback_line;     /* the first such line */
};

void ingest_work_request(const ledger *l, uint32_t w, struct engine_request *rq)
{
    const struct ledger_work *W = &l->works[w];
    const struct ledger_line *L = &l->lines[W->owner];
    memset(rq, 0, sizeof *rq);
    rq->id = w;
    rq->prompt = L->prompt;
    rq->n_prompt = L->n_prompt;
    rq->max_tokens = W->max_tokens;
    genparam_to_sampler(&L->gen, W->seed, &rq->sampling);
    rq->stop = (const char *const *)L->gen.stop;
    rq->n_stop = L->gen.n_stop;
    rq->ignore_eos = L->gen.ignore_eos;
    rq->constraint = L->gen.constraint.kind != CONSTRAINT_NONE ? &L->gen.constraint : NULL;
}

/* Makes L a bad line with code and a printf-formatted message; its prompt and works are dropped. */
static void make_bad(struct ledger_line *L, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void make_bad(struct ledger_line *L, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    L->bad = 1;
    L->code = code;
    free(L->message);
    L->message = strdup(msg);
    free(L->prompt);
    L->prompt = NULL;
    free(L->works);
    L->works = NULL;
    L->n = 0;
}

static void digest_line(const struct reader *rd, struct ledger_line *L)
{
    sha256_ctx *c = sha256_init();
    if (!c) {
        memset(L->digest, 0, 32);
        return;
    }
    const char *id = L->custom_id ? L->custom_id : "";
    if (L->bad) {
        static const char tag[] = "nightshift-bad-v1";
        sha256_update(c, tag, sizeof tag);
        sha256_update(c, id, strlen(id) + 1);
        sha256_update(c, L->code, strlen(L->code) + 1);
        sha256_update(c, L->message ? L->message : "", L->message ? strlen(L->message) : 0);
    } else {
        static const char tag[] = "nightshift-line-v1";
        sha256_update(c, tag, sizeof tag);
        sha256_update(c, id, strlen(id) + 1);
        uint8_t kind = L->kind;
        sha256_update(c, &kind, 1);
        const char *model = L->model ? L->model : rd->m->name;
        sha256_update(c, model, strlen(model) + 1);
        uint32_t n = (uint32_t)L->n;
        sha256_update(c, &n, 4);
        for (int32_t k = 0; k < L->n; k++) sha256_update(c, plan_keymap_key(rd->l->keys, L->works[k]), 32);
    }
    sha256_final(c, L->digest);
}

/* A bad request's code and message (into msg, cap bytes); returns 1. */
static int prompt_bad(const char **code, char *msg, size_t cap, const char *c, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int prompt_bad(const char **code, char *msg, size_t cap, const char *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    *code = c;
    return 1;
}

/* The prompt text of msgs: the model's own template (m->chat_jinja) renders the whole prompt (*add_bos = 0, as
 * HF and vLLM tokenize it); the family renderer is used when there is none, and for a line the template fails
 * on other than by raise_exception (counted in fb, when given). 0 with *text (malloc'd), or 1 with the bad
 * request's code and message. */
static int render_text(const struct job_model *m, const struct chat_msg *msgs, size_t n, char **text, int *add_bos,
                       struct ingest_fallback *fb, const char **code, char *msg, size_t cap)
{
    char bos_text[64], eos_text[64]; /* the vocab's BOS / EOS text, for templates that spell them out */
    int32_t bos = tok_bos(m->vocab), eos = tok_eos(m->vocab);
    const char *bp = bos >= 0 ? tok_piece(m->vocab, bos) : NULL, *ep = eos >= 0 ? tok_piece(m->vocab, eos) : NULL;
    snprintf(bos_text, sizeof bos_text, "%s", bp ? bp : "");
    snprintf(eos_text, sizeof eos_text, "%s", ep ? ep : "");
    struct err te;
    *text = NULL;
    *add_bos = 0;
    if (m->chat_jinja) {
        int rc = chat_render_jinja(m->chat_jinja, msgs, n, bos_text, eos_text, text, &te);
        if (rc == 0) return 0;
        if (rc == JINJA_RAISED)
            return prompt_bad(code, msg, cap, "chat_template", "the model's chat template rejects these messages: %s",
                              te.msg);
        if (m->chat == CHAT_NONE)
            return prompt_bad(code, msg, cap, "chat_template", "the model's chat template failed: %s", te.msg);
        if (fb && fb->n++ == 0) snprintf(fb->msg, sizeof fb->msg, "%.200s", te.msg);
    }
    if (chat_render(m->chat, msgs, n, bos_text, eos_text, text, &te) != 0)
        return prompt_bad(code, msg, cap, "chat_template", "chat template %s: %s", chat_family_name(m->chat), te.msg);
    size_t bl = strlen(bos_text);
    *add_bos = tok_add_bos(m->vocab) && !(bl && !strncmp(*text, bos_text, bl));
    return 0;
}

/* Renders the chat messages of it and tokenizes them into *ids. */
static int render_chat(const struct job_model *m, const struct input_item *it, int32_t **ids, size_t *n_ids,
                       struct ingest_fallback *fb, const char **code, char *msg, size_t cap, struct err *e)
{
    struct err te;
    struct chat_msg *msgs = malloc(it->n_msgs * sizeof *msgs);
    if (!msgs) return err_set(e, "out of memory");
    for (size_t i = 0; i < it->n_msgs; i++) {
        msgs[i].role = it->msgs[i].role;
        msgs[i].content = it->msgs[i].content;
    }
    char *text = NULL;
    int add_bos;
    int rc = render_text(m, msgs, it->n_msgs, &text, &add_bos, fb, code, msg, cap);
    free(msgs);
    if (rc) return rc;
    rc = tok_encode(m->vocab, text, strlen(text), add_bos, 1, ids, n_ids, &te);
    free(text);
    if (rc != 0) return prompt_bad(code, msg, cap, "invalid_value", "cannot tokenize the rendered messages: %s", te.msg);
    return 0;
}

int ingest_prompt(const struct job_model *m, int parse_special, struct input_item *it, int32_t **out,
                  int32_t *n_out, struct ingest_fallback *fb, const char **code, char *msg, size_t cap, struct err *e)
{
    const tok_vocab *v = m->vocab;
    int32_t n_vocab = tok_n_vocab(v), n_ctx = m->hp->n_ctx_train > 0 ? m->hp->n_ctx_train : INT32_MAX;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct err te;
    int rc = 0;
    *out = NULL;
    *n_out = 0;
    if (it->kind == INPUT_KIND_CHAT) {
        if (m->chat == CHAT_NONE && !m->chat_jinja)
            return prompt_bad(code, msg, cap, "chat_template",
                              "chat messages, but the model has no chat template nightshift recognises (%s)",
                              m->chat_source ? m->chat_source : "none");
        rc = render_chat(m, it, &ids, &n_ids, fb, code, msg, cap, e);
        if (rc != 0) return rc;
    } else if (it->prompt_ids) {
        for (int32_t i = 0; i < it->n_prompt_ids; i++)
            if (it->prompt_ids[i] >= n_vocab)
                return prompt_bad(code, msg, cap, "invalid_value", "prompt token id %d is outside the vocabulary (%d tokens)",
                                  it->prompt_ids[i], n_vocab);
        ids = it->prompt_ids;
        n_ids = (size_t)it->n_prompt_ids;
        it->prompt_ids = NULL;
    } else if (tok_encode(v, it->prompt, it->prompt_len, tok_add_bos(v), parse_special, &ids, &n_ids, &te)) {
        return prompt_bad(code, msg, cap, "invalid_value", "cannot tokenize the prompt: %s", te.msg);
    }
    if (n_ids == 0) rc = prompt_bad(code, msg, cap, "invalid_value", "the prompt is empty (no tokens)");
    else if ((int64_t)n_ids >= n_ctx)
        rc = prompt_bad(code, msg, cap, "prompt_too_long", "the prompt is %zu tokens; the model's context is %d tokens",
                        n_ids, n_ctx);
    for (int32_t i = 0; rc == 0 && i < it->gen.n_logit_bias; i++)
        if (it->gen.logit_bias[i].token >= n_vocab)
            rc = prompt_bad(code, msg, cap, "invalid_value", "logit_bias token %d is outside the vocabulary (%d tokens)",
                            it->gen.logit_bias[i].token, n_vocab);
    if (rc != 0) {
        free(ids);
        return rc;
    }
    *out = ids;
    *n_out = (int32_t)n_ids;
    return 0;
}

int32_t ingest_max_tokens(const struct job_model *m, int32_t n_prompt, int32_t max_tokens)
{
    int32_t n_ctx = m->hp->n_ctx_train > 0 ? m->hp->n_ctx_train : INT32_MAX;
    return (int64_t)n_prompt + max_tokens > n_ctx ? n_ctx - n_prompt : max_tokens;
}

/* Renders / tokenizes the prompt of it into L->prompt and checks it against the model. A problem makes L a
 * bad line; chat input for a model without a template leaves L without a prompt (the caller reports it). */
static int tokenize_line(struct reader *rd, struct ledger_line *L, struct input_item *it, struct err *e)
{
    if (it->kind == INPUT_KIND_CHAT && rd->m->chat == CHAT_NONE && !rd->m->chat_jinja) return 0;
    const char *code;
    char msg[1024];
    /* the line's gen (moved into L) holds its logit bias */
    struct input_item view = *it;
    view.gen = L->gen;
    int64_t fallbacks = rd->fb.n;
    int rc = ingest_prompt(rd->m, rd->c->parse_special, &view, &L->prompt, &L->n_prompt, &rd->fb, &code, msg, sizeof msg,
                           e);
    if (fallbacks == 0 && rd->fb.n > 0) rd->fallback_line = L->no;
    it->prompt_ids = view.prompt_ids;
    if (rc < 0) return -1;
    if (rc > 0) make_bad(L, code, "%s", msg);
    return 0;
}

/* Asks the run's engine whether it would take line L's requests (they differ only in their seeds), with
 * its own arithmetic (engine_check_request): a request it would fail at once (prompt + max_tokens over the
 * whole KV pool: "request_too_large"; parameters the sampler refuses) makes L a bad line now, so that no
 * line read as good fails for good in the engine, to be retried in vain by --retry-failed. No engine (unit
 * tests): nothing to ask. */
static void check_with_engine(const struct reader *rd, struct ledger_line *L)
{
    if (!rd->m->eng) return;
    struct engine_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt = L->prompt;
    rq.n_prompt = L->n_prompt;
    rq.max_tokens = ingest_max_tokens(rd->m, L->n_prompt, L->gen.max_tokens);
    genparam_to_sampler(&L->gen, 0, &rq.sampling);
    rq.stop = (const char *const *)L->gen.stop;
    rq.n_stop = L->gen.n_stop;
    rq.ignore_eos = L->gen.ignore_eos;
    rq.constraint = L->gen.constraint.kind != CONSTRAINT_NONE ? &L->gen.constraint : NULL;
    char msg[512];
    enum engine_request_check c = engine_check_request(rd->m->eng, &rq, msg, sizeof msg);
    if (c != ENGINE_REQUEST_OK)
        make_bad(L, c == ENGINE_REQUEST_TOO_LARGE ? "request_too_large" : "invalid_value", "%s", msg);
}

/* The keys of line li's completions, folded into works by the ledger. */
static int add_line_works(struct reader *rd, uint32_t li, struct err *e)
{
    struct ledger_line *L = &rd->l->lines[li];
    int32_t max_tokens = ingest_max_tokens(rd->m, L->n_prompt, L->gen.max_tokens); /* >= 1 here */
    uint64_t base = L->gen.has_seed ? L->gen.seed : key_id_seed(L->custom_id);
    L->n = L->gen.n;
    L->works = malloc((size_t)L->n * sizeof *L->works);
    if (!L->works) return err_set(e, "out of memory");
    struct gen_params run = L->gen; /* what the completions run with (shallow: stop and logit_bias borrowed) */
    run.max_tokens = max_tokens;
    for (int32_t i = 0; i < L->n; i++) {
        uint64_t seed = key_completion_seed(base, (uint32_t)i);
        struct key_params kp;
        memset(&kp, 0, sizeof kp);
        kp.model_sha256 = rd->m->sha256;
        kp.kv_type = (uint32_t)rd->m->ep.kv_type;
        kp.gen = &run;
        kp.seed = seed;
        kp.prompt = L->prompt;
        kp.n_prompt = L->n_prompt;
        kp.index = (uint32_t)i;
        uint8_t key[32];
        int folded;
        if (key_compute(&kp, key, e) != 0) return -1;
        if (ledger_add_work(rd->l, li, i, key, max_tokens, seed, &folded, e) != 0) return -1;
        rd->st->folded_duplicates += folded;
    }
    return 0;
}

/* Adds the line read into *it to the ledger (taking what it keeps from *it). *first_chat_line is set to
 * the line's number when it is chat input that the model cannot render. */
static int add_item(struct reader *rd, struct input_item *it, int64_t *first_chat_line, struct err *e)
{
    uint32_t li;
    if (ledger_add_line(rd->l, &li, e) != 0) return -1;
    struct ledger_line *L = &rd->l->lines[li];
    L->no = it->line;
    L->custom_id = it->custom_id;
    it->custom_id = NULL;
    if (it->code) {
        L->bad = 1;
        L->code = it->code;
        L->message = it->message;
        it->message = NULL;
    } else {
        L->kind = (uint8_t)it->kind;
        L->model = it->model;
        it->model = NULL;
        L->gen = it->gen;
        memset(&it->gen, 0, sizeof it->gen);
        if (it->kind == INPUT_KIND_CHAT && rd->m->chat == CHAT_NONE && !rd->m->chat_jinja && !*first_chat_line)
            *first_chat_line = it->line;
        if (tokenize_line(rd, L, it, e) != 0) return -1;
        if (!L->bad && L->prompt) check_with_engine(rd, L);
        if (!L->bad && L->prompt && add_line_works(rd, li, e) != 0) return -1;
    }
    if (L->bad) rd->st->bad_lines++;
    digest_line(rd, L);
    return 0;
}

static json_t *backlog_json(const char *path, const input_reader *r)
{
    uint8_t d[32];
    input_file_sha256(r, d);
    char hex[65];
    sha256_hex(d, hex);
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:i}", "path", path, "sha256", hex, "format",
                     input_format_name(input_get_format(r)), "lines", (json_int_t)input_n_lines(r), "blank_lines",
                     (json_int_t)input_n_blank(r), "bytes", (json_int_t)input_n_bytes(r), "unknown_fields",
                     input_n_unknown_fields(r));
}

int ingest_backlog(const struct job_config *c, const struct job_model *m, ledger *l, struct ingest_stats *st,
                   json_t **backlog, struct err *e)
{
    struct reader rd = {c, m, l, st, {0, ""}, 0};
    memset(st, 0, sizeof *st);
    *backlog = NULL;
    input_reader *r = NULL;
    struct input_item it;
    memset(&it, 0, sizeof it);
    if (input_open(c->backlog, &c->input, &r, e) != 0) return -1;
    log_info("%s: %s format", c->backlog, input_format_name(input_get_format(r)));
    int64_t first_chat_line = 0;
    for (;;) {
        if (c->stop && *c->stop) { /* interrupted while reading: nothing was stored yet */
            st->interrupted = 1;
            break;
        }
        int rc = input_next(r, &it, e);
        if (rc < 0) goto fail;
        if (rc == 0) break;
        if (add_item(&rd, &it, &first_chat_line, e) != 0) {
            err_prefix(e, "backlog line %lld", (long long)it.line);
            goto fail;
        }
        input_item_free(&it);
    }
    if (first_chat_line) {
        err_set(e, "%s line %lld has chat messages, but the model has no chat template nightshift recognises (%s); "
                   "pass --chat-template NAME with one of: %s",
                c->backlog, (long long)first_chat_line, m->chat_source, chat_family_list());
        goto fail;
    }
    if (rd.fb.n)
        log_warn("%lld chat line(s) rendered by nightshift's %s renderer: the model's template failed on them "
                 "(first: line %lld: %s)",
                 (long long)rd.fb.n, chat_family_name(m->chat), (long long)rd.fallback_line, rd.fb.msg);
    *backlog = backlog_json(c->backlog, r);
    input_close(r);
    return 0;
fail:
    input_item_free(&it);
    input_close(r);
    return -1;
}
