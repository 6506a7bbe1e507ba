/* ingest — see ingest.h.
 *
 * One function prepares a line from what jobs/input read (prepare_line: render, tokenize, check against the
 * model and the engine); it runs when the backlog is read and again whenever a line is read again, so what
 * the run computes from a line later is what it computed when it read it, or the run stops (a key or a
 * digest that differs: the backlog changed).
 *
 * Invariant of the id table: for every distinct id of the JSON lines read so far, one slot holds the index
 * (+ 1) of the first line with that id and the id's hash (open addressing on the hash, load <= 3/4).
 */
#include "jobs/ingest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <xxhash.h>

#include "jobs/embedding.h"
#include "jobs/key.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sha256.h"

_Static_assert(GENPARAM_MAX_N <= LEDGER_MAX_N, "a line's completions fit the book's count");

struct id_slot {
    uint32_t line1; /* index of the first line with the id, + 1; 0: empty */
    uint32_t hash;  /* the id's hash (its low bits place the slot) */
};

struct ingest_source {
    const struct job_config *c;
    const struct job_model *m;
    ledger *l;
    input_reader *r;
    struct ingest_fallback fb; /* chat lines the model's template failed on (rendered by family) */
    int64_t fallback_line;     /* the first such line */
    /* duplicate ids (openai, jsonl) */
    struct id_slot *ids;       /* (id_cap) */
    size_t id_cap, n_ids;
    uint64_t id_seed;          /* random per run: a crafted backlog cannot aim ids at one probe chain */
    int rereading;             /* lines are read again: the table only answers, it does not grow */
    /* ingest_line_info's strings */
    struct input_item info_item;
    char *info_message;
};

/* A line as prepared from what jobs/input read: a request (its prompt) or a bad line. */
struct prepared {
    struct input_item it; /* as read (owned) */
    int32_t *prompt;      /* (n_prompt) rendered and tokenized; owned. An embeddings line: its inputs' tokens one
                             after the other, input k at [starts[k], starts[k + 1]) */
    int32_t n_prompt;
    int32_t *starts;      /* (inputs + 1) an embeddings line's, else NULL; owned */
    const char *code;     /* bad line: static string; NULL for a request */
    char message[1024];
    int no_template;      /* chat input for a model without a chat template */
};

static void prepared_free(struct prepared *p)
{
    input_item_free(&p->it);
    free(p->prompt);
    free(p->starts);
    memset(p, 0, sizeof *p);
}

/* Makes p a bad line with code and a printf-formatted message; its prompt is dropped. */
static void make_bad(struct prepared *p, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void make_bad(struct prepared *p, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->message, sizeof p->message, fmt, ap);
    va_end(ap);
    p->code = code;
    free(p->prompt);
    p->prompt = NULL;
    p->n_prompt = 0;
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
    if (rc != 0)
        return prompt_bad(code, msg, cap, "invalid_value", "cannot tokenize the rendered messages: %s", te.msg);
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
                return prompt_bad(code, msg, cap, "invalid_value",
                                  "prompt token id %d is outside the vocabulary (%d tokens)",
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
            rc = prompt_bad(code, msg, cap, "invalid_value",
                            "logit_bias token %d is outside the vocabulary (%d tokens)",
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

/* --- preparing a line --- */

void ingest_request_of(const struct job_model *m, enum input_kind kind, const struct gen_params *g,
                       const int32_t *prompt, int32_t n_prompt, uint64_t seed, struct engine_request *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->prompt = prompt;
    rq->n_prompt = n_prompt;
    if (kind == INPUT_KIND_EMBEDDING) { /* prefill only: no generation parameter applies */
        rq->embed_pooling = m->hp->pooling;
        return;
    }
    rq->max_tokens = ingest_max_tokens(m, n_prompt, g->max_tokens);
    genparam_to_sampler(g, seed, &rq->sampling);
    rq->stop = (const char *const *)g->stop;
    rq->n_stop = g->n_stop;
    rq->ignore_eos = g->ignore_eos;
    rq->constraint = g->constraint.kind != CONSTRAINT_NONE ? &g->constraint : NULL;
    rq->logprobs = g->logprobs >= 0; /* alternatives: completions' logprobs: N, chat's top_logprobs */
    rq->top_logprobs = g->logprobs > g->top_logprobs ? g->logprobs : g->top_logprobs;
    rq->prompt_logprobs = g->echo; /* the echoed text is the prompt's tokens (output_result_text) */
}

static void request_of(const ingest_source *s, const struct input_item *it, const int32_t *prompt, int32_t n_prompt,
                       uint64_t seed, struct engine_request *rq)
{
    ingest_request_of(s->m, it->kind, &it->gen, prompt, n_prompt, seed, rq);
}

int ingest_check_request(const struct job_model *m, enum input_kind kind, const struct gen_params *g,
                         const int32_t *prompt, int32_t n_prompt, const char **code, char *msg, size_t cap)
{
    if (!m->eng) return 0;
    struct engine_request rq;
    ingest_request_of(m, kind, g, prompt, n_prompt, 0, &rq);
    enum engine_request_check c = engine_check_request(m->eng, &rq, msg, cap);
    if (c == ENGINE_REQUEST_OK) return 0;
    *code = c == ENGINE_REQUEST_TOO_LARGE ? "request_too_large" : "invalid_value";
    return 1;
}

/* Asks the run's engine whether it would take p's requests (they differ only in their seeds), with its own
 * arithmetic (ingest_check_request): a request it would fail at once makes p bad now, so that no line read as
 * good fails for good in the engine, to be retried in vain by --retry-failed. */
static void check_with_engine(const ingest_source *s, struct prepared *p)
{
    const char *code;
    char msg[512];
    if (ingest_check_request(s->m, p->it.kind, &p->it.gen, p->prompt, p->n_prompt, &code, msg, sizeof msg))
        make_bad(p, code, "%s", msg);
}

/* Input k of an embeddings request tokenized and checked as a prompt is (ingest_prompt) and by the engine
 * (ingest_check_request), then appended to *prompt (*n_prompt; starts[k + 1] its end); 1 with the bad
 * request's code and message (naming the input) when it is refused. */
static int embed_input(const struct job_model *m, int parse_special, struct input_item *it, int32_t k,
                       int32_t **prompt, int32_t *n_prompt, int32_t *starts, const char **code, char *msg, size_t cap,
                       struct err *e)
{
    struct input_embed *in = it->embed;
    struct input_item one = {.kind = INPUT_KIND_COMPLETION, .prompt = in->text[k], .prompt_len = in->len[k],
                             .prompt_ids = in->ids[k], .n_prompt_ids = in->n_ids[k]};
    int32_t *ids, n_ids;
    char why[768];
    int rc = ingest_prompt(m, parse_special, &one, &ids, &n_ids, NULL, code, why, sizeof why, e);
    if (!one.prompt_ids) in->ids[k] = NULL; /* taken into ids */
    if (rc == 0 && ingest_check_request(m, INPUT_KIND_EMBEDDING, &it->gen, ids, n_ids, code, why, sizeof why)) {
        free(ids);
        rc = 1;
    }
    if (rc > 0 && in->n > 1) snprintf(msg, cap, "'input[%d]': %s", (int)k, why);
    else if (rc > 0) snprintf(msg, cap, "'input': %s", why);
    if (rc != 0) return rc;
    int32_t *grown = realloc(*prompt, (size_t)(*n_prompt + n_ids) * sizeof *grown);
    if (grown) {
        memcpy(grown + *n_prompt, ids, (size_t)n_ids * sizeof *ids);
        *prompt = grown;
        *n_prompt += n_ids;
        starts[k + 1] = *n_prompt;
    }
    free(ids);
    return grown ? 0 : err_set(e, "out of memory");
}

int ingest_embed_prompts(const struct job_model *m, int parse_special, struct input_item *it, int32_t **prompt,
                         int32_t *n_prompt, int32_t **starts, const char **code, char *msg, size_t cap,
                         struct err *e)
{
    const struct input_embed *in = it->embed;
    *prompt = NULL;
    *n_prompt = 0;
    *starts = NULL;
    if (in->dimensions > m->hp->n_embd) {
        *code = "invalid_value";
        snprintf(msg, cap,
                 "'dimensions' is %d, but this model's embeddings have %d values (fewer may be asked for: the first "
                 "N, normalised again)", (int)in->dimensions, (int)m->hp->n_embd);
        return 1;
    }
    if (!(*starts = calloc((size_t)in->n + 1, sizeof **starts))) return err_set(e, "out of memory");
    int rc = 0;
    for (int32_t k = 0; rc == 0 && k < in->n; k++)
        rc = embed_input(m, parse_special, it, k, prompt, n_prompt, *starts, code, msg, cap, e);
    if (rc != 0) {
        free(*prompt);
        free(*starts);
        *prompt = NULL;
        *starts = NULL;
        *n_prompt = 0;
    }
    return rc;
}

/* An embeddings line's inputs into p->prompt and p->starts (ingest_embed_prompts); a problem makes p bad. */
static int embed_prompts(ingest_source *s, struct prepared *p, struct err *e)
{
    const char *code;
    char msg[1024];
    int rc = ingest_embed_prompts(s->m, s->c->parse_special, &p->it, &p->prompt, &p->n_prompt, &p->starts, &code,
                                  msg, sizeof msg, e);
    if (rc > 0) make_bad(p, code, "%s", msg);
    return rc < 0 ? -1 : 0;
}

/* Makes p's prompt (ingest_prompt: rendered, tokenized, checked against the model) and asks the engine; a
 * problem makes p bad. Chat input for a model without a chat template is bad too and sets no_template (the
 * caller warns once). fb: the template fallbacks to count (NULL when a line is read again). */
static int prepare_line(ingest_source *s, struct prepared *p, struct ingest_fallback *fb, struct err *e)
{
    struct input_item *it = &p->it;
    const struct job_model *m = s->m;
    if (it->code) {
        make_bad(p, it->code, "%s", it->message ? it->message : "");
        return 0;
    }
    if (it->kind == INPUT_KIND_EMBEDDING) return embed_prompts(s, p, e);
    p->no_template = it->kind == INPUT_KIND_CHAT && m->chat == CHAT_NONE && !m->chat_jinja;
    const char *code;
    char msg[1024];
    int rc = ingest_prompt(m, s->c->parse_special, it, &p->prompt, &p->n_prompt, fb, &code, msg, sizeof msg, e);
    if (rc < 0) return -1;
    if (rc > 0) make_bad(p, code, "%s", msg);
    else check_with_engine(s, p);
    return 0;
}

/* The key and seed of completion k of request p. */
static int completion_key(const ingest_source *s, const struct prepared *p, int32_t k, uint8_t key[32],
                          uint64_t *seed, struct err *e)
{
    const struct gen_params *g = &p->it.gen;
    uint64_t base = g->has_seed ? g->seed : key_id_seed(p->it.custom_id);
    *seed = key_completion_seed(base, (uint32_t)k);
    struct gen_params run = *g; /* what the completions run with (shallow: stop and logit_bias borrowed) */
    run.max_tokens = ingest_max_tokens(s->m, p->n_prompt, g->max_tokens);
    struct key_params kp;
    memset(&kp, 0, sizeof kp);
    kp.model_sha256 = s->m->sha256;
    kp.kv_type = (uint32_t)s->m->ep.kv_type;
    kp.gen = &run;
    kp.seed = *seed;
    kp.prompt = p->prompt;
    kp.n_prompt = p->n_prompt;
    kp.index = (uint32_t)k;
    if (p->starts) { /* an embedding: input k */
        kp.embed_pooling = s->m->hp->pooling;
        kp.prompt = p->prompt + p->starts[k];
        kp.n_prompt = p->starts[k + 1] - p->starts[k];
    }
    return key_compute(&kp, key, e);
}

/* Reads line L again (and prepares it, when prepare). */
static int reread_line(ingest_source *s, const struct ledger_line *L, int prepare, struct prepared *p, struct err *e)
{
    memset(p, 0, sizeof *p);
    s->rereading = 1;
    int rc = input_reread(s->r, L->off, L->no, &p->it, e);
    if (rc == 0 && prepare) rc = prepare_line(s, p, NULL, e);
    s->rereading = 0;
    return rc;
}

static int changed(const struct ledger_line *L, const char *what, struct err *e)
{
    return err_set(e, "backlog line %u changed since this run read it (%s); run again to start from the backlog as "
                      "it is now", L->no, what);
}

/* --- duplicate ids --- */

static uint32_t id_hash_of(const ingest_source *s, const char *id)
{
    return (uint32_t)XXH3_64bits_withSeed(id, strlen(id), s->id_seed);
}

static int id_table_grow(ingest_source *s)
{
    size_t cap = s->id_cap ? s->id_cap * 2 : 1024;
    struct id_slot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < s->id_cap; i++) {
        if (!s->ids[i].line1) continue;
        size_t j = s->ids[i].hash & (cap - 1);
        while (t[j].line1) j = (j + 1) & (cap - 1);
        t[j] = s->ids[i];
    }
    free(s->ids);
    s->ids = t;
    s->id_cap = cap;
    return 0;
}

/* jobs/input's id_seen: the first line with this id, compared exactly (by reading its id again) when the
 * hashes match; a new id is recorded as the id of the line being read (the next index in the book). */
static int id_seen(void *user, const char *id, int64_t line, int64_t *first_line)
{
    ingest_source *s = user;
    uint32_t h = id_hash_of(s, id);
    for (size_t j = s->id_cap ? h & (s->id_cap - 1) : 0; s->id_cap && s->ids[j].line1; j = (j + 1) & (s->id_cap - 1)) {
        if (s->ids[j].hash != h) continue;
        const struct ledger_line *F = &s->l->lines[s->ids[j].line1 - 1];
        if ((int64_t)F->no == line) return 0; /* read again: its own id */
        char *fid = NULL;
        struct err e;
        if (input_reread_id(s->r, F->off, F->no, &fid, &e) != 0) return -1;
        int same = fid && !strcmp(fid, id);
        free(fid);
        if (same) {
            *first_line = F->no;
            return 1;
        }
    }
    if (s->rereading) return 0;
    if ((s->n_ids + 1) * 4 > s->id_cap * 3 && id_table_grow(s) != 0) return -1;
    size_t j = h & (s->id_cap - 1);
    while (s->ids[j].line1) j = (j + 1) & (s->id_cap - 1);
    s->ids[j] = (struct id_slot){(uint32_t)s->l->n_lines + 1, h};
    s->n_ids++;
    return 0;
}

/* --- reading the backlog --- */

/* Adds the line p to the ledger: a bad line, or a request with its works (keys folded by the ledger). */
static int add_line(ingest_source *s, struct prepared *p, struct ingest_stats *st, struct err *e)
{
    ledger *l = s->l;
    uint32_t li;
    uint8_t digest[32];
    const struct input_item *it = &p->it;
    int32_t n = p->code ? 0 : it->gen.n;
    if (!it->code) st->defaults_used |= ~it->gen.given;
    if (ledger_add_line(l, it->line, it->off, n, &li, e) != 0) return -1;
    l->lines[li].kind = (uint8_t)it->kind; /* a bad line's too: its error names "messages" or "prompt" */
    if (p->code) {
        if (ledger_code_index(p->code) < 0) return err_set(e, "ingest: unknown bad-line code %s (bug)", p->code);
        ledger_set_bad(l, li, p->code);
        ledger_digest_bad(it->custom_id, p->code, p->message, digest);
        st->bad_lines++;
    } else {
        uint8_t keys[LEDGER_MAX_N][32];
        struct plan_item plan = plan_item_of(p->prompt, p->n_prompt, s->m->ep.kv_block);
        for (int32_t k = 0; k < n; k++) {
            uint64_t seed;
            int folded;
            if (p->starts)
                plan = plan_item_of(p->prompt + p->starts[k], p->starts[k + 1] - p->starts[k], s->m->ep.kv_block);
            if (completion_key(s, p, k, keys[k], &seed, e) != 0) return -1;
            if (ledger_add_work(l, li, k, keys[k], plan, &folded, e) != 0) return -1;
            if (!folded) /* what the owner's request may generate (a folded one has the owner's key) */
                l->works[ledger_line_work(l, &l->lines[li], k)].gen_units =
                    ledger_gen_units(p->starts ? 0 : ingest_max_tokens(s->m, p->n_prompt, it->gen.max_tokens));
            st->folded_duplicates += folded;
            st->distinct_requests += k == 0 && !folded; /* k 0 folds only onto an earlier line's work */
        }
        st->requests++;
        st->completions += n;
        if (it->embed)
            ledger_digest_embedding(it->custom_id, it->model ? it->model : s->m->name, n, (const uint8_t(*)[32])keys,
                                    it->embed->dimensions, it->embed->base64, digest);
        else
            ledger_digest_request(it->custom_id, it->kind, it->model ? it->model : s->m->name, n,
                                  (const uint8_t(*)[32])keys, digest);
    }
    l->lines[li].digest = ledger_digest_head(digest);
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

static ingest_source *source_init(const struct job_config *c, const struct job_model *m, ledger *l)
{
    ingest_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->c = c;
    s->m = m;
    s->l = l;
    if (getrandom(&s->id_seed, sizeof s->id_seed, GRND_NONBLOCK) != (ssize_t)sizeof s->id_seed)
        s->id_seed = (uint64_t)(clock_now() * 1e9) ^ (uint64_t)(uintptr_t)s; /* no entropy yet: still varies */
    return s;
}

/* Reads every line of s's backlog into the ledger (interrupted by *c->stop or *c->drain: nothing runs yet,
 * so a drain has nothing to let finish). *first_chat_line: the first chat
 * line the model cannot render. */
static int read_lines(ingest_source *s, struct ingest_stats *st, int64_t *first_chat_line, struct err *e)
{
    const struct job_config *c = s->c;
    struct prepared p;
    memset(&p, 0, sizeof p);
    for (;;) {
        if ((c->stop && *c->stop) || (c->drain && *c->drain)) { /* interrupted while reading: nothing stored yet */
            st->interrupted = 1;
            return 0;
        }
        int rc = input_next(s->r, &p.it, e);
        if (rc < 0) return -1;
        if (rc == 0) return 0;
        int64_t fallbacks = s->fb.n;
        if (prepare_line(s, &p, &s->fb, e) != 0 || add_line(s, &p, st, e) != 0) {
            err_prefix(e, "backlog line %lld", (long long)p.it.line);
            prepared_free(&p);
            return -1;
        }
        if (fallbacks == 0 && s->fb.n > 0) s->fallback_line = p.it.line;
        if (p.no_template && !*first_chat_line) *first_chat_line = p.it.line;
        prepared_free(&p);
    }
}

int ingest_backlog(const struct job_config *c, const struct job_model *m, ledger *l, struct ingest_stats *st,
                   json_t **backlog, ingest_source **src, struct err *e)
{
    memset(st, 0, sizeof *st);
    *backlog = NULL;
    *src = NULL;
    ingest_source *s = source_init(c, m, l);
    if (!s) return err_set(e, "out of memory");
    struct input_opts o = c->input;
    o.id_seen = id_seen;
    o.id_user = s;
    if (input_open(c->backlog, &o, &s->r, e) != 0) goto fail;
    log_info("%s: %s format", c->backlog, input_format_name(input_get_format(s->r)));
    int64_t first_chat_line = 0;
    if (read_lines(s, st, &first_chat_line, e) != 0) goto fail;
    if (first_chat_line) /* those lines are bad ("chat_template"); the rest of the backlog runs */
        log_warn("%s line %lld (and any other chat line) fails: chat messages, but the model has no chat template "
                 "nightshift recognises (%s); pass --chat-template NAME with one of: %s",
                 c->backlog, (long long)first_chat_line, m->chat_source, chat_family_list());
    if (s->fb.n)
        log_warn("%lld chat line(s) rendered by nightshift's %s renderer: the model's template failed on them "
                 "(first: line %lld: %s)",
                 (long long)s->fb.n, chat_family_name(m->chat), (long long)s->fallback_line, s->fb.msg);
    *backlog = backlog_json(c->backlog, s->r);
    l->line_info = ingest_line_info;
    l->info_user = s;
    *src = s;
    return 0;
fail:
    ingest_source_close(s);
    return -1;
}

int ingest_estimate_bytes(const char *path, int32_t n, uint64_t *bytes, struct err *e)
{
    *bytes = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(e, "%s: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return err_set(e, "out of memory");
    }
    uint64_t lines = 0;
    size_t got;
    char last = '\n';
    while ((got = fread(buf, 1, CHUNK, f)) > 0) {
        for (const char *p = buf, *end = buf + got; (p = memchr(p, '\n', (size_t)(end - p))); p++) lines++;
        last = buf[got - 1];
    }
    int failed = ferror(f);
    free(buf);
    fclose(f);
    if (failed) return err_set(e, "%s: read: %s", path, strerror(errno));
    lines += last != '\n'; /* a last line without a newline */
    *bytes = lines * (ledger_bytes_per_line(n) + INGEST_BYTES_PER_LINE);
    return 0;
}

/* Never a duplicate: the bound's pass keeps no ids (a line whose only fault is a repeated id counts). */
static int bound_id_unseen(void *user, const char *id, int64_t line, int64_t *first_line)
{
    (void)user, (void)id, (void)line, (void)first_line;
    return 0;
}

/* What a good line read at off (its bytes end at end) can need: its bytes for the prompt, the template's
 * tokens, and its own max_tokens as genparam parsed it. */
static int64_t bound_of(const struct input_item *it, int64_t end)
{
    int64_t gen = it->kind == INPUT_KIND_EMBEDDING ? 0 : it->gen.max_tokens;
    return end - it->off + INGEST_TEMPLATE_TOKENS + gen;
}

int ingest_seq_tokens_bound(const char *path, const struct input_opts *o, int64_t *tokens, struct err *e)
{
    *tokens = 0;
    struct input_opts opts = *o;
    opts.id_seen = bound_id_unseen;
    opts.id_user = NULL;
    opts.quiet = 1; /* the run's own pass warns */
    input_reader *r;
    if (input_open(path, &opts, &r, e)) return -1;
    struct input_item it = {0}, prev = {0};
    int got, have_prev = 0;
    while ((got = input_next(r, &it, e)) == 1) { /* a line's end is known when the next one starts */
        if (have_prev && bound_of(&prev, it.off) > *tokens) *tokens = bound_of(&prev, it.off);
        input_item_free(&prev);
        have_prev = !it.code; /* a bad line widens nothing */
        prev = it;
        memset(&it, 0, sizeof it);
    }
    if (got == 0 && have_prev && bound_of(&prev, (int64_t)input_n_bytes(r)) > *tokens)
        *tokens = bound_of(&prev, (int64_t)input_n_bytes(r));
    input_item_free(&prev);
    input_item_free(&it);
    input_close(r);
    if (got < 0) *tokens = 0;
    else if (*tokens == 0) *tokens = 1; /* no good line: nothing will run, the smallest pool does */
    return got < 0 ? -1 : 0;
}

void ingest_source_close(ingest_source *s)
{
    if (!s) return;
    input_close(s->r);
    free(s->ids);
    input_item_free(&s->info_item);
    free(s->info_message);
    free(s);
}

size_t ingest_source_bytes(const ingest_source *s)
{
    return s ? s->id_cap * sizeof *s->ids : 0;
}

/* --- reading lines again --- */

int ingest_work_request(ingest_source *s, uint32_t w, struct ingest_request *out, struct err *e)
{
    const ledger *l = s->l;
    const struct ledger_work *W = &l->works[w];
    const struct ledger_line *L = &l->lines[W->owner];
    struct prepared p;
    uint64_t seed;
    memset(out, 0, sizeof *out);
    if (reread_line(s, L, 1, &p, e) != 0) goto fail;
    if (p.code) {
        changed(L, "it is a bad line now", e);
        goto fail;
    }
    if (completion_key(s, &p, W->index, out->key, &seed, e) != 0) goto fail;
    if (memcmp(out->key, plan_keymap_key(l->keys, w), PLAN_KEY_BYTES)) {
        changed(L, "its request's key differs", e);
        goto fail;
    }
    if (p.starts) { /* an embedding: input W->index alone */
        p.n_prompt = p.starts[W->index + 1] - p.starts[W->index];
        memmove(p.prompt, p.prompt + p.starts[W->index], (size_t)p.n_prompt * sizeof *p.prompt);
    }
    out->it = p.it; /* moved: the request points into *out */
    out->prompt = p.prompt;
    free(p.starts);
    request_of(s, &out->it, out->prompt, p.n_prompt, seed, &out->rq);
    out->rq.id = w;
    return 0;
fail:
    prepared_free(&p);
    return -1;
}

void ingest_request_free(struct ingest_request *r)
{
    input_item_free(&r->it);
    free(r->prompt);
    memset(r, 0, sizeof *r);
}

int ingest_line_info(void *user, const ledger *l, uint32_t li, struct ledger_line_info *out, struct err *e)
{
    ingest_source *s = user;
    const struct ledger_line *L = &l->lines[li];
    struct prepared p;
    memset(out, 0, sizeof *out);
    input_item_free(&s->info_item);
    free(s->info_message);
    s->info_message = NULL;
    if (reread_line(s, L, L->bad, &p, e) != 0) {
        prepared_free(&p);
        return -1;
    }
    int other = L->bad ? !p.code || strcmp(p.code, ledger_codes[L->code]) : p.it.code != NULL;
    if (other) {
        prepared_free(&p);
        return changed(L, "it is another kind of line now", e);
    }
    if (L->bad && !(s->info_message = strdup(p.message))) {
        prepared_free(&p);
        return err_set(e, "out of memory");
    }
    s->info_item = p.it;
    memset(&p.it, 0, sizeof p.it);
    prepared_free(&p);
    out->custom_id = s->info_item.custom_id;
    out->model = s->info_item.model;
    if (s->info_item.embed) {
        out->dimensions = s->info_item.embed->dimensions;
        out->base64 = s->info_item.embed->base64;
    }
    out->logprobs = s->info_item.kind != INPUT_KIND_EMBEDDING && s->info_item.gen.logprobs >= 0;
    out->message = s->info_message;
    return 0;
}
