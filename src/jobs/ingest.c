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
    char bos_text[64], eos_text[64]; /* the vocab's BOS / EOS text, for chat templates that spell them out */
    int32_t n_vocab, n_ctx;
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

/* Renders the chat messages of it with the model's template and tokenizes them into *ids; a problem makes
 * L a bad line (*ids stays NULL). */
static int render_chat(const struct reader *rd, struct ledger_line *L, const struct input_item *it, int32_t **ids,
                       size_t *n_ids, struct err *e)
{
    const struct job_model *m = rd->m;
    struct err te;
    struct chat_msg *msgs = malloc(it->n_msgs * sizeof *msgs);
    if (!msgs) return err_set(e, "out of memory");
    for (size_t i = 0; i < it->n_msgs; i++) {
        msgs[i].role = it->msgs[i].role;
        msgs[i].content = it->msgs[i].content;
    }
    char *text = NULL;
    int rc = chat_render(m->chat, msgs, it->n_msgs, rd->bos_text, rd->eos_text, &text, &te);
    free(msgs);
    if (rc != 0) {
        make_bad(L, "chat_template", "chat template %s: %s", chat_family_name(m->chat), te.msg);
        return 0;
    }
    size_t bl = strlen(rd->bos_text);
    int add_bos = tok_add_bos(m->vocab) && !(bl && !strncmp(text, rd->bos_text, bl));
    rc = tok_encode(m->vocab, text, strlen(text), add_bos, 1, ids, n_ids, &te);
    free(text);
    if (rc != 0) make_bad(L, "invalid_value", "cannot tokenize the rendered messages: %s", te.msg);
    return 0;
}

/* Renders / tokenizes the prompt of it into L->prompt and checks it against the model. A problem makes L a
 * bad line; chat input for a model without a template leaves L without a prompt (the caller reports it). */
static int tokenize_line(const struct reader *rd, struct ledger_line *L, struct input_item *it, struct err *e)
{
    const tok_vocab *v = rd->m->vocab;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct err te;
    if (it->kind == INPUT_KIND_CHAT) {
        if (rd->m->chat == CHAT_NONE) return 0;
        if (render_chat(rd, L, it, &ids, &n_ids, e) != 0) return -1;
        if (L->bad) return 0;
    } else if (it->prompt_ids) {
        for (int32_t i = 0; i < it->n_prompt_ids; i++)
            if (it->prompt_ids[i] >= rd->n_vocab) {
                make_bad(L, "invalid_value", "prompt token id %d is outside the vocabulary (%d tokens)",
                         it->prompt_ids[i], rd->n_vocab);
                return 0;
            }
        ids = it->prompt_ids;
        n_ids = (size_t)it->n_prompt_ids;
        it->prompt_ids = NULL;
    } else if (tok_encode(v, it->prompt, it->prompt_len, tok_add_bos(v), rd->c->parse_special, &ids, &n_ids, &te)) {
        make_bad(L, "invalid_value", "cannot tokenize the prompt: %s", te.msg);
        return 0;
    }
    L->prompt = ids;
    L->n_prompt = (int32_t)n_ids;
    if (n_ids == 0) {
        make_bad(L, "invalid_value", "the prompt is empty (no tokens)");
        return 0;
    }
    if ((int64_t)n_ids >= rd->n_ctx) {
        make_bad(L, "prompt_too_long", "the prompt is %zu tokens; the model's context is %d tokens", n_ids, rd->n_ctx);
        return 0;
    }
    for (int32_t i = 0; i < L->gen.n_logit_bias; i++)
        if (L->gen.logit_bias[i].token >= rd->n_vocab) {
            make_bad(L, "invalid_value", "logit_bias token %d is outside the vocabulary (%d tokens)",
                     L->gen.logit_bias[i].token, rd->n_vocab);
            return 0;
        }
    return 0;
}

/* The keys of line li's completions, folded into works by the ledger. */
static int add_line_works(struct reader *rd, uint32_t li, struct err *e)
{
    struct ledger_line *L = &rd->l->lines[li];
    int32_t max_tokens = L->gen.max_tokens;
    if ((int64_t)L->n_prompt + max_tokens > rd->n_ctx) max_tokens = rd->n_ctx - L->n_prompt; /* >= 1 here */
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
        if (it->kind == INPUT_KIND_CHAT && rd->m->chat == CHAT_NONE && !*first_chat_line) *first_chat_line = it->line;
        if (tokenize_line(rd, L, it, e) != 0) return -1;
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
    struct reader rd = {c, m, l, st, "", "", tok_n_vocab(m->vocab), INT32_MAX};
    if (m->hp->n_ctx_train > 0) rd.n_ctx = m->hp->n_ctx_train;
    int32_t bos = tok_bos(m->vocab), eos = tok_eos(m->vocab);
    const char *bp = bos >= 0 ? tok_piece(m->vocab, bos) : NULL, *ep = eos >= 0 ? tok_piece(m->vocab, eos) : NULL;
    snprintf(rd.bos_text, sizeof rd.bos_text, "%s", bp ? bp : "");
    snprintf(rd.eos_text, sizeof rd.eos_text, "%s", ep ? ep : "");
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
    *backlog = backlog_json(c->backlog, r);
    input_close(r);
    return 0;
fail:
    input_item_free(&it);
    input_close(r);
    return -1;
}
