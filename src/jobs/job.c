/* job — see job.h.
 *
 * Data: `lines` holds every non-blank backlog line in input order; `works` every unique key (index = the
 * keymap index). A line needs n works (one per completion); a work is needed by one or more lines (refs
 * list), and "owned" by the first line that needed it (its prompt and parameters are used to run it).
 *
 * Invariants (job_check):
 *   - a line is WAITING until all its works are finished (done or failed) or it is a bad line; it is READY
 *     when its row is in the store without an offset (only with --order input), SCHEDULED once its row has
 *     an offset; a SCHEDULED line's bytes are in its file or in the write buffer of the current flush;
 *   - out_end[f] is the end of the last scheduled line of file f = the file's size after a flush;
 *   - with --order input, every line before `cursor` is SCHEDULED;
 *   - in_engine = works submitted and not yet taken back.
 */
#include "jobs/job.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "jobs/key.h"
#include "jobs/output.h"
#include "jobs/record.h"
#include "jobs/settings.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/sysmem.h"

enum { W_PENDING, W_QUEUED, W_DONE, W_FAILED };
enum { L_WAITING, L_READY, L_SCHEDULED };
#define NO_REF UINT32_MAX

struct work {
    uint32_t owner;    /* line index whose prompt and parameters run it */
    uint32_t ref_head; /* first entry in refs, NO_REF when none */
    int32_t max_tokens;
    uint64_t seed;
    int64_t result_id; /* its row in the store's results once finished, else 0 */
    uint8_t state;
};

struct ref {
    uint32_t line;
    uint32_t next;
};

struct line {
    int64_t no;
    char *custom_id;
    char *model;           /* the line's "model" or NULL */
    uint8_t kind;          /* enum input_kind */
    uint8_t state;
    uint8_t file;          /* once READY / SCHEDULED */
    uint8_t bad;           /* a bad line: code + message */
    const char *code;
    char *message;
    struct input_gen gen;
    int32_t *prompt;       /* (n_prompt) freed once no pending work needs it */
    int32_t n_prompt;
    uint32_t *works;       /* (n) */
    int32_t n, n_done, n_failed;
    uint8_t digest[32];
    int64_t row;           /* its row in the store's lines once READY / SCHEDULED */
    char *text;            /* built line waiting for its turn (READY) */
    size_t len;
};

/* A finished work waiting for the next commit. r.text and r.error are owned (malloc'd); r.key and
 * r.created are set by the flush that stores it. */
struct finished {
    uint32_t work;
    struct store_result r;
};

typedef struct job {
    const struct job_config *c;
    const struct job_model *m;
    struct line *lines;
    size_t n_lines, cap_lines;
    int64_t *line_index; /* (max_line_no + 1) line number -> index in lines, -1 none */
    int64_t max_line_no;
    struct work *works;
    size_t cap_works;
    struct ref *refs;
    size_t n_refs, cap_refs;
    plan_keymap *keys;
    store *st;
    output_file *out[2];
    int64_t out_end[2];
    /* the current flush */
    struct finished *fin;
    size_t n_fin, cap_fin;
    struct finished **slot; /* (n_works) work -> its entry in fin during a flush, else NULL */
    uint32_t *ready;        /* lines to build in the next flush */
    size_t n_ready, cap_ready;
    struct output_buf wbuf[2];
    size_t cursor;          /* --order input */
    /* progress and accounting */
    int64_t n_pending_start, n_done_run, n_failed_run;
    double *latency;
    size_t n_latency;
    struct job_summary *sum;
    double t_commit_last;
    char bos_text[64], eos_text[64];
    json_t *backlog_json; /* backlog facts for the record */
    json_t *repair_json;  /* what reconcile did, for the record */
} job;

struct job_config job_default_config(void)
{
    struct job_config c;
    memset(&c, 0, sizeof c);
    c.input = input_default_opts();
    c.durability = STORE_DURABILITY_FULL;
    c.sort = PLAN_SORT_ASCENDING;
    c.commit_interval = 1.0;
    c.progress = PROGRESS_AUTO;
    c.progress_interval = 10;
    c.parse_special = 1;
    return c;
}

/* --- growing arrays --- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np) return -1;
    *p = np;
    *cap = c;
    return 0;
}

static void line_free(struct line *L)
{
    free(L->custom_id);
    free(L->model);
    free(L->message);
    input_gen_free(&L->gen);
    free(L->prompt);
    free(L->works);
    free(L->text);
}

/* --- debug check --- */

static int job_check(const job *j, struct err *e)
{
    int64_t n_works = plan_keymap_size(j->keys);
    for (size_t i = 0; i < j->n_lines; i++) {
        const struct line *L = &j->lines[i];
        if (L->state == L_WAITING && (L->bad || (L->n && L->n_done + L->n_failed == L->n)) && !L->text) {
            /* it must be queued for the next flush */
            int queued = 0;
            for (size_t k = 0; k < j->n_ready; k++) queued |= j->ready[k] == i;
            if (!queued) return err_set(e, "job_check: line %lld is finished but not queued", (long long)L->no);
        }
        if (j->c->order_input && i < j->cursor && L->state != L_SCHEDULED)
            return err_set(e, "job_check: line %lld is before the cursor but not scheduled", (long long)L->no);
        for (int32_t k = 0; k < L->n; k++)
            if ((int64_t)L->works[k] >= n_works) return err_set(e, "job_check: line %lld: bad work", (long long)L->no);
    }
    return 0;
}

/* --- phase 1: read, render, tokenize, key --- */

static void sampling_of(const struct line *L, uint64_t seed, struct sampler_params *sp)
{
    *sp = sampler_default_params();
    sp->temperature = L->gen.temperature;
    sp->top_k = L->gen.top_k;
    sp->top_p = L->gen.top_p;
    sp->min_p = L->gen.min_p;
    sp->repeat_penalty = L->gen.repetition_penalty;
    sp->repeat_last_n = L->gen.repeat_last_n;
    sp->presence_penalty = L->gen.presence_penalty;
    sp->frequency_penalty = L->gen.frequency_penalty;
    sp->seed = seed;
    sp->n_logit_bias = L->gen.n_logit_bias;
    sp->logit_bias = L->gen.logit_bias;
}

static void make_bad(struct line *L, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void make_bad(struct line *L, const char *code, const char *fmt, ...)
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

static void digest_line(const job *j, struct line *L)
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
        const char *model = L->model ? L->model : j->m->name;
        sha256_update(c, model, strlen(model) + 1);
        uint32_t n = (uint32_t)L->n;
        sha256_update(c, &n, 4);
        for (int32_t k = 0; k < L->n; k++) sha256_update(c, plan_keymap_key(j->keys, L->works[k]), 32);
    }
    sha256_final(c, L->digest);
}

/* Renders / tokenizes the line's prompt into L->prompt. A problem makes it a bad line. */
static int tokenize_line(job *j, struct line *L, struct input_item *it, struct err *e)
{
    const tok_vocab *v = j->m->vocab;
    int32_t n_vocab = tok_n_vocab(v);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct err te;
    if (it->kind == INPUT_KIND_CHAT) {
        if (j->m->chat == CHAT_NONE) return 0; /* no prompt; reported by the caller, once */
        struct chat_msg *msgs = malloc(it->n_msgs * sizeof *msgs);
        if (!msgs) return err_set(e, "out of memory");
        for (size_t i = 0; i < it->n_msgs; i++) {
            msgs[i].role = it->msgs[i].role;
            msgs[i].content = it->msgs[i].content;
        }
        char *text = NULL;
        int rc = chat_render(j->m->chat, msgs, it->n_msgs, j->bos_text, j->eos_text, &text, &te);
        free(msgs);
        if (rc != 0) {
            make_bad(L, "chat_template", "chat template %s: %s", chat_family_name(j->m->chat), te.msg);
            return 0;
        }
        size_t bl = strlen(j->bos_text);
        int add_bos = tok_add_bos(v) && !(bl && !strncmp(text, j->bos_text, bl));
        rc = tok_encode(v, text, strlen(text), add_bos, 1, &ids, &n_ids, &te);
        free(text);
        if (rc != 0) {
            make_bad(L, "invalid_value", "cannot tokenize the rendered messages: %s", te.msg);
            return 0;
        }
    } else if (it->prompt_ids) {
        for (int32_t i = 0; i < it->n_prompt_ids; i++)
            if (it->prompt_ids[i] >= n_vocab) {
                make_bad(L, "invalid_value", "prompt token id %d is outside the vocabulary (%d tokens)", it->prompt_ids[i],
                         n_vocab);
                return 0;
            }
        ids = it->prompt_ids;
        n_ids = (size_t)it->n_prompt_ids;
        it->prompt_ids = NULL;
    } else {
        if (tok_encode(v, it->prompt, it->prompt_len, tok_add_bos(v), j->c->parse_special, &ids, &n_ids, &te) != 0) {
            make_bad(L, "invalid_value", "cannot tokenize the prompt: %s", te.msg);
            return 0;
        }
    }
    L->prompt = ids;
    L->n_prompt = (int32_t)n_ids;
    int32_t n_ctx = j->m->hp->n_ctx_train > 0 ? j->m->hp->n_ctx_train : INT32_MAX;
    if (n_ids == 0) {
        make_bad(L, "invalid_value", "the prompt is empty (no tokens)");
        return 0;
    }
    if ((int64_t)n_ids >= n_ctx) {
        make_bad(L, "prompt_too_long", "the prompt is %zu tokens; the model's context is %d tokens", n_ids, n_ctx);
        return 0;
    }
    for (int32_t i = 0; i < L->gen.n_logit_bias; i++)
        if (L->gen.logit_bias[i].token >= n_vocab) {
            make_bad(L, "invalid_value", "logit_bias token %d is outside the vocabulary (%d tokens)",
                     L->gen.logit_bias[i].token, n_vocab);
            return 0;
        }
    return 0;
}

static int add_line_works(job *j, uint32_t li, struct err *e)
{
    struct line *L = &j->lines[li];
    int32_t n_ctx = j->m->hp->n_ctx_train > 0 ? j->m->hp->n_ctx_train : INT32_MAX;
    int32_t max_tokens = L->gen.max_tokens;
    if ((int64_t)L->n_prompt + max_tokens > n_ctx) max_tokens = n_ctx - L->n_prompt; /* clamped: >= 1 here */
    uint64_t base = L->gen.has_seed ? L->gen.seed : key_id_seed(L->custom_id);
    L->n = L->gen.n;
    L->works = malloc((size_t)L->n * sizeof *L->works);
    if (!L->works) return err_set(e, "out of memory");
    for (int32_t i = 0; i < L->n; i++) {
        uint64_t seed = key_completion_seed(base, (uint32_t)i);
        struct key_params kp;
        memset(&kp, 0, sizeof kp);
        kp.model_sha256 = j->m->sha256;
        kp.kv_type = (uint32_t)j->m->ep.kv_type;
        kp.max_tokens = max_tokens;
        sampling_of(L, seed, &kp.sampling);
        kp.stop = (const char *const *)L->gen.stop;
        kp.n_stop = L->gen.n_stop;
        kp.ignore_eos = j->c->ignore_eos;
        kp.prompt = L->prompt;
        kp.n_prompt = L->n_prompt;
        kp.index = (uint32_t)i;
        uint8_t key[32];
        if (key_compute(&kp, key, e) != 0) return -1;
        int added;
        int64_t w = plan_keymap_put(j->keys, key, &added);
        if (w < 0) return err_set(e, "out of memory");
        if (added) {
            if (grow((void **)&j->works, &j->cap_works, (size_t)w + 1, sizeof *j->works)) return err_set(e, "out of memory");
            struct work *W = &j->works[w];
            memset(W, 0, sizeof *W);
            W->owner = li;
            W->ref_head = NO_REF;
            W->max_tokens = max_tokens;
            W->seed = seed;
            W->state = W_PENDING;
        } else {
            j->sum->folded_duplicates++;
        }
        if (grow((void **)&j->refs, &j->cap_refs, j->n_refs + 1, sizeof *j->refs)) return err_set(e, "out of memory");
        j->refs[j->n_refs] = (struct ref){li, j->works[w].ref_head};
        j->works[w].ref_head = (uint32_t)j->n_refs++;
        L->works[i] = (uint32_t)w;
    }
    return 0;
}

static int read_backlog(job *j, struct err *e)
{
    input_reader *r = NULL;
    struct input_item it;
    memset(&it, 0, sizeof it);
    if (input_open(j->c->backlog, &j->c->input, &r, e) != 0) return -1;
    log_info("%s: %s format", j->c->backlog, input_format_name(input_get_format(r)));
    int64_t first_chat_line = 0;
    for (;;) {
        if (j->c->stop && *j->c->stop) { /* interrupted while reading: nothing was stored yet */
            j->sum->interrupted = 1;
            break;
        }
        int rc = input_next(r, &it, e);
        if (rc < 0) goto fail;
        if (rc == 0) break;
        if (grow((void **)&j->lines, &j->cap_lines, j->n_lines + 1, sizeof *j->lines)) {
            err_set(e, "out of memory at backlog line %lld", (long long)it.line);
            goto fail;
        }
        uint32_t li = (uint32_t)j->n_lines++;
        struct line *L = &j->lines[li];
        memset(L, 0, sizeof *L);
        L->no = it.line;
        L->custom_id = it.custom_id;
        it.custom_id = NULL;
        if (it.code) {
            L->bad = 1;
            L->code = it.code;
            L->message = it.message;
            it.message = NULL;
        } else {
            L->kind = (uint8_t)it.kind;
            L->model = it.model;
            it.model = NULL;
            L->gen = it.gen;
            memset(&it.gen, 0, sizeof it.gen);
            if (it.kind == INPUT_KIND_CHAT && j->m->chat == CHAT_NONE && !first_chat_line) first_chat_line = it.line;
            if (tokenize_line(j, L, &it, e) != 0) goto fail;
            if (!L->bad && L->prompt && add_line_works(j, li, e) != 0) goto fail;
        }
        if (L->bad) j->sum->input_errors++;
        digest_line(j, L);
        input_item_free(&it);
    }
    if (first_chat_line) {
        err_set(e, "%s line %lld has chat messages, but the model has no chat template nightshift recognises (%s); "
                "pass --chat-template NAME with one of: %s",
                j->c->backlog, (long long)first_chat_line, j->m->chat_source, chat_family_list());
        goto fail;
    }
    j->sum->lines = (int64_t)j->n_lines;
    j->sum->work_total = plan_keymap_size(j->keys);
    /* backlog facts for the record */
    uint8_t d[32];
    input_file_sha256(r, d);
    char hex[65];
    sha256_hex(d, hex);
    json_t *b = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:i}", "path", j->c->backlog, "sha256", hex, "format",
                          input_format_name(input_get_format(r)), "lines", (json_int_t)input_n_lines(r), "blank_lines",
                          (json_int_t)input_n_blank(r), "bytes", (json_int_t)input_n_bytes(r), "unknown_fields",
                          input_n_unknown_fields(r));
    json_decref(j->backlog_json);
    j->backlog_json = b;
    input_close(r);
    return 0;
fail:
    input_item_free(&it);
    input_close(r);
    return -1;
}

/* --- phase 2: the store --- */

static void status_cb(void *user, int64_t id, const uint8_t key[32], int status)
{
    job *j = user;
    int64_t w = plan_keymap_find(j->keys, key);
    if (w < 0) return;
    j->works[w].state = status == STORE_STATUS_DONE ? W_DONE : W_FAILED;
    j->works[w].result_id = id;
}

struct stale {
    job *j;
    int64_t *del; /* ids of rows to delete */
    size_t n_del, cap_del;
    int touched[2];
    int oom;
};

/* The file a finished line belongs in; -1 while it is not finished. */
static int expected_file(const struct line *L)
{
    if (L->bad) return STORE_FILE_ERRORS;
    if (L->n_done + L->n_failed < L->n) return -1;
    return L->n_failed ? STORE_FILE_ERRORS : STORE_FILE_OUTPUT;
}

static int row_cb(void *user, const struct store_line *row)
{
    struct stale *s = user;
    job *j = s->j;
    struct line *L = NULL;
    if (row->line >= 0 && row->line <= j->max_line_no && j->line_index[row->line] >= 0)
        L = &j->lines[j->line_index[row->line]];
    int valid = L && !memcmp(L->digest, row->digest, 32) && row->off >= 0 && expected_file(L) == row->file &&
                L->state == L_WAITING;
    if (valid) {
        L->state = L_SCHEDULED;
        L->file = (uint8_t)row->file;
        L->row = row->id;
        return 0;
    }
    if (grow((void **)&s->del, &s->cap_del, s->n_del + 1, sizeof *s->del)) {
        s->oom = 1;
        return 1;
    }
    s->del[s->n_del++] = row->id;
    if (row->off >= 0 && (row->file == 0 || row->file == 1)) s->touched[row->file] = 1;
    return 0;
}

static int queue_ready(job *j, uint32_t li, struct err *e)
{
    if (grow((void **)&j->ready, &j->cap_ready, j->n_ready + 1, sizeof *j->ready)) return err_set(e, "out of memory");
    j->ready[j->n_ready++] = li;
    return 0;
}

/* Counts finished work W (DONE or FAILED) toward every line that needs it. With queue, a line it completes
 * is queued for the next flush (without, the caller queues lines itself; then it cannot fail). */
static int credit_lines(job *j, const struct work *W, int queue, struct err *e)
{
    for (uint32_t r = W->ref_head; r != NO_REF; r = j->refs[r].next) {
        uint32_t li = j->refs[r].line;
        struct line *L = &j->lines[li];
        if (W->state == W_DONE) L->n_done++;
        else L->n_failed++;
        if (queue && L->n_done + L->n_failed == L->n && queue_ready(j, li, e) != 0) return -1;
    }
    return 0;
}

/* Marks works done from the store, drops stale rows, repairs both files. */
static int reconcile(job *j, struct err *e)
{
    struct stale s;
    memset(&s, 0, sizeof s);
    s.j = j;
    int64_t n_requeued = 0;
    if (store_begin(j->st, e) != 0) return -1;
    if (j->c->retry_failed && store_delete_failed(j->st, &n_requeued, e) != 0) goto fail;
    if (store_foreach_status(j->st, status_cb, j, e) != 0) goto fail;
    int64_t n_works = plan_keymap_size(j->keys);
    for (int64_t w = 0; w < n_works; w++) {
        struct work *W = &j->works[w];
        if (W->state == W_PENDING) continue;
        j->sum->work_skipped_done++;
        credit_lines(j, W, 0, e);
    }
    if (store_foreach_line(j->st, row_cb, &s, e) != 0) goto fail;
    if (s.oom) {
        err_set(e, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < s.n_del; i++)
        if (store_delete_line(j->st, s.del[i], e) != 0) goto fail;
    for (int f = 0; f < 2; f++) {
        int64_t end;
        if (s.touched[f] && store_compact_offsets(j->st, f, &end, e) != 0) goto fail;
    }
    if (store_commit(j->st, e) != 0) goto fail;
    if (s.n_del) log_info("store: %zu line rows were stale (settings, backlog or retried keys changed)", s.n_del);
    if (n_requeued) log_info("--retry-failed: %lld failed keys queued again", (long long)n_requeued);
    free(s.del);
    s.del = NULL;

    const char *paths[2] = {j->c->output, j->c->errors};
    json_t *rep = json_object();
    for (int f = 0; f < 2; f++) {
        struct output_repair_stats rs;
        if (output_open(paths[f], &j->out[f], e) != 0) {
            json_decref(rep);
            return -1;
        }
        if (output_repair(j->out[f], j->st, f, &rs, e) != 0) {
            json_decref(rep);
            return -1;
        }
        j->out_end[f] = output_size(j->out[f]);
        if (rs.lines_rewritten || rs.bytes_cut)
            log_info("%s: repaired from the store: %lld lines kept, %lld written again, %lld stray bytes cut", paths[f],
                     (long long)rs.lines_kept, (long long)rs.lines_rewritten, (long long)rs.bytes_cut);
        j->sum->repaired.lines_rewritten += rs.lines_rewritten;
        j->sum->repaired.bytes_cut += rs.bytes_cut;
        json_object_set_new(rep, f ? "errors" : "results",
                            json_pack("{s:I, s:I, s:I}", "lines_kept", (json_int_t)rs.lines_kept, "lines_rewritten",
                                      (json_int_t)rs.lines_rewritten, "bytes_cut", (json_int_t)rs.bytes_cut));
    }
    json_object_set_new(rep, "stale_rows_dropped", json_integer((json_int_t)s.n_del));
    json_object_set_new(rep, "failed_keys_requeued", json_integer((json_int_t)n_requeued));
    j->repair_json = rep;

    /* lines finished before (or bad) but not yet in a file go out with the first flush */
    for (size_t i = 0; i < j->n_lines; i++)
        if (j->lines[i].state == L_WAITING && expected_file(&j->lines[i]) >= 0 && queue_ready(j, (uint32_t)i, e) != 0)
            return -1;
    return 0;
fail:
    free(s.del);
    store_rollback(j->st);
    return -1;
}

/* --- phase 3: building lines and flushing --- */

static const char *finish_name(int32_t f)
{
    return f == ENGINE_FINISH_LENGTH ? "length" : "stop";
}

/* The result of work w: from the current flush or from the store (then *owned is set: free text/error). */
static int get_result(job *j, uint32_t w, struct store_result *r, int *owned, struct err *e)
{
    *owned = 0;
    struct finished *f = j->slot[w];
    if (f) {
        *r = f->r;
        return 0;
    }
    int found;
    if (store_get_result(j->st, j->works[w].result_id, r, &found, e) != 0) return -1;
    if (!found) return err_set(e, "store: the result of a finished key is missing (backlog line %lld)",
                               (long long)j->lines[j->works[w].owner].no);
    *owned = 1;
    return 0;
}

static void free_result(struct store_result *r, int owned)
{
    if (!owned) return;
    free((char *)r->text);
    free((char *)r->error);
}

/* Builds the bytes of a finished line into L->text. */
static int build_line(job *j, struct line *L, struct err *e)
{
    struct output_buf b = {0};
    if (L->bad) {
        output_error_line(&b, L->custom_id, L->no, L->code, L->message ? L->message : "");
        L->file = STORE_FILE_ERRORS;
    } else {
        struct store_result *rs = calloc((size_t)L->n, sizeof *rs);
        int *owned = calloc((size_t)L->n, sizeof *owned);
        struct output_choice *ch = calloc((size_t)L->n, sizeof *ch);
        int rc = 0, k_loaded = 0;
        if (!rs || !owned || !ch) rc = err_set(e, "out of memory");
        for (int32_t k = 0; k < L->n && rc == 0; k++) {
            rc = get_result(j, L->works[k], &rs[k], &owned[k], e);
            if (rc == 0) k_loaded = k + 1;
        }
        if (rc == 0) {
            int32_t failed = -1;
            int64_t gen = 0, created = 0;
            for (int32_t k = 0; k < L->n; k++) {
                if (rs[k].status != STORE_STATUS_DONE && failed < 0) failed = k;
                gen += rs[k].n_gen;
                if (rs[k].created > created) created = rs[k].created;
                ch[k] = (struct output_choice){rs[k].text, rs[k].text_len, finish_name(rs[k].finish)};
            }
            if (failed >= 0) {
                char msg[1200];
                snprintf(msg, sizeof msg, "%s%s", L->n > 1 ? "a completion failed: " : "",
                         rs[failed].error ? rs[failed].error : "failed");
                output_error_line(&b, L->custom_id, L->no, "engine_error", msg);
                L->file = STORE_FILE_ERRORS;
            } else {
                struct output_ok o = {L->custom_id, L->kind == INPUT_KIND_CHAT, L->model ? L->model : j->m->name, created,
                                      plan_keymap_key(j->keys, L->works[0]), ch, L->n, L->n_prompt, gen};
                output_ok_line(&b, &o);
                L->file = STORE_FILE_OUTPUT;
            }
        }
        for (int k = 0; k < k_loaded; k++) free_result(&rs[k], owned[k]);
        free(rs);
        free(owned);
        free(ch);
        if (rc != 0) {
            output_buf_free(&b);
            return -1;
        }
    }
    if (b.oom) {
        output_buf_free(&b);
        return err_set(e, "out of memory building backlog line %lld", (long long)L->no);
    }
    free(L->text);
    L->text = b.p;
    L->len = b.n;
    return 0;
}

/* Inserts L's row (its built bytes, in L->file, at offset off or -1 for none yet); L->row = its id. */
static int put_line_row(job *j, struct line *L, int64_t off, struct err *e)
{
    struct store_line row = {0, L->no, {0}, L->file, off, L->text, L->len};
    memcpy(row.digest, L->digest, 32);
    return store_put_line(j->st, &row, &L->row, e);
}

static int schedule_line(job *j, struct line *L, int insert, struct err *e)
{
    int f = L->file;
    if (insert) {
        if (put_line_row(j, L, j->out_end[f], e) != 0) return -1;
    } else if (store_set_line_off(j->st, L->row, j->out_end[f], e) != 0) {
        return -1;
    }
    j->out_end[f] += (int64_t)L->len;
    output_buf_put(&j->wbuf[f], L->text, L->len);
    if (j->wbuf[f].oom) return err_set(e, "out of memory");
    free(L->text);
    L->text = NULL;
    L->state = L_SCHEDULED;
    return 0;
}

/* Commits the finished works and the lines they complete in one transaction, then writes the lines. */
static int flush(job *j, struct err *e)
{
    if (j->n_fin == 0 && j->n_ready == 0 && !(j->c->order_input && j->cursor < j->n_lines)) return 0;
    double t0 = clock_now();
    int64_t now_unix = (int64_t)time(NULL);
    if (store_begin(j->st, e) != 0) return -1;
    for (size_t i = 0; i < j->n_fin; i++) {
        struct finished *f = &j->fin[i];
        f->r.created = now_unix;
        memcpy(f->r.key, plan_keymap_key(j->keys, f->work), 32);
        struct work *W = &j->works[f->work];
        if (store_put_result(j->st, &f->r, &W->result_id, e) != 0) goto fail;
        j->slot[f->work] = f;
        W->state = f->r.status == STORE_STATUS_DONE ? W_DONE : W_FAILED;
        if (credit_lines(j, W, 1, e) != 0) goto fail;
    }
    double t1 = clock_now();
    for (size_t i = 0; i < j->n_ready; i++) {
        struct line *L = &j->lines[j->ready[i]];
        if (build_line(j, L, e) != 0) goto fail;
        if (!j->c->order_input) {
            if (schedule_line(j, L, 1, e) != 0) goto fail;
        } else {
            if (put_line_row(j, L, -1, e) != 0) goto fail;
            L->state = L_READY;
        }
    }
    if (j->c->order_input) {
        while (j->cursor < j->n_lines) {
            struct line *L = &j->lines[j->cursor];
            if (L->state == L_READY) {
                if (schedule_line(j, L, 0, e) != 0) goto fail;
            } else if (L->state != L_SCHEDULED) {
                break;
            }
            j->cursor++;
        }
    }
    double t2 = clock_now();
    if (store_commit(j->st, e) != 0) goto fail;
    double t3 = clock_now();
    /* Only now, after the commit, do the lines reach the files (invariant 2). */
    if (j->c->test_hook) j->c->test_hook("after_commit");
    for (int f = 0; f < 2; f++) {
        if (!j->wbuf[f].n) continue;
        size_t first = j->c->test_hook ? j->wbuf[f].n / 2 : j->wbuf[f].n; /* tests: die in the middle */
        if (output_append(j->out[f], j->wbuf[f].p, first, e) != 0) return -1;
        if (first < j->wbuf[f].n) {
            j->c->test_hook("mid_write");
            if (output_append(j->out[f], j->wbuf[f].p + first, j->wbuf[f].n - first, e) != 0) return -1;
        }
        j->wbuf[f].n = 0;
    }
    if (j->c->test_hook) j->c->test_hook("after_write");
    double t4 = clock_now();
    for (size_t i = 0; i < j->n_fin; i++) {
        j->slot[j->fin[i].work] = NULL;
        free_result(&j->fin[i].r, 1);
    }
    j->n_fin = 0;
    j->n_ready = 0;
    j->sum->t_store += (t1 - t0) + (t3 - t2);
    j->sum->t_output += (t2 - t1) + (t4 - t3);
    j->t_commit_last = t4;
    return 0;
fail:
    store_rollback(j->st);
    return -1;
}

/* --- phase 3: running --- */

static int take_results(job *j, struct err *e)
{
    struct engine_result r;
    while (engine_take(j->m->eng, &r)) {
        if (grow((void **)&j->fin, &j->cap_fin, j->n_fin + 1, sizeof *j->fin)) {
            engine_result_free(&r);
            return err_set(e, "out of memory");
        }
        struct finished *f = &j->fin[j->n_fin++];
        memset(f, 0, sizeof *f);
        f->work = (uint32_t)r.id;
        int ok = r.finish == ENGINE_FINISH_STOP || r.finish == ENGINE_FINISH_LENGTH;
        f->r.status = ok ? STORE_STATUS_DONE : STORE_STATUS_FAILED;
        f->r.finish = (int32_t)r.finish;
        f->r.text = r.text;
        f->r.text_len = r.text_len;
        r.text = NULL;
        f->r.n_prompt = r.n_prompt;
        f->r.n_gen = r.n_tokens;
        f->r.n_cached = r.n_prompt_cached;
        if (!ok) {
            f->r.error = r.error ? r.error : strdup(r.finish == ENGINE_FINISH_CANCELLED ? "cancelled" : "failed");
            r.error = NULL;
            j->n_failed_run++;
            j->sum->work_failed++;
        }
        j->n_done_run++;
        j->sum->work_computed++;
        j->sum->prompt_tokens += r.n_prompt;
        j->sum->prompt_tokens_cached += r.n_prompt_cached;
        j->sum->gen_tokens += r.n_tokens;
        if (j->n_latency < (size_t)j->n_pending_start) j->latency[j->n_latency++] = r.t_finished - r.t_added;
        engine_result_free(&r);
    }
    return 0;
}

static void snapshot(job *j, struct progress_snapshot *ps)
{
    struct engine_stats es;
    engine_get_stats(j->m->eng, &es);
    memset(ps, 0, sizeof *ps);
    ps->done = j->n_done_run;
    ps->total = j->n_pending_start;
    ps->failed = j->n_failed_run;
    ps->prompt_tokens = es.prompt_tokens_computed + es.prompt_tokens_cached;
    ps->gen_tokens = es.gen_tokens;
    ps->kv_use = es.kv_blocks_total ? (double)es.kv_blocks_used / (double)es.kv_blocks_total : 0;
    int64_t pt = es.prompt_tokens_computed + es.prompt_tokens_cached;
    ps->prefix_hit = pt ? (double)es.prompt_tokens_cached / (double)pt : 0;
}

static int run_engine(job *j, const uint32_t *order, size_t n_order, struct err *e)
{
    engine *eng = j->m->eng;
    int32_t limit = 2 * j->m->ep.max_seqs; /* requests in the engine: max_seqs running, as many queued */
    int64_t in_engine = 0;
    size_t next = 0;
    progress *pg = progress_init(stderr, j->c->progress, j->c->progress_interval, clock_now());
    struct progress_snapshot ps;
    j->t_commit_last = clock_now();
    for (;;) {
        if (j->c->stop && *j->c->stop) {
            j->sum->interrupted = 1;
            break;
        }
        while (next < n_order && in_engine < limit) {
            uint32_t w = order[next++];
            struct work *W = &j->works[w];
            struct line *L = &j->lines[W->owner];
            struct engine_request rq;
            memset(&rq, 0, sizeof rq);
            rq.id = w;
            rq.prompt = L->prompt;
            rq.n_prompt = L->n_prompt;
            rq.max_tokens = W->max_tokens;
            sampling_of(L, W->seed, &rq.sampling);
            rq.stop = (const char *const *)L->gen.stop;
            rq.n_stop = L->gen.n_stop;
            rq.ignore_eos = j->c->ignore_eos;
            if (engine_add(eng, &rq, e) != 0) goto fail;
            W->state = W_QUEUED;
            in_engine++;
        }
        if (!engine_has_work(eng)) {
            int64_t before = j->n_done_run;
            if (take_results(j, e) != 0) goto fail; /* requests failed at engine_add */
            in_engine -= j->n_done_run - before;
            if (next >= n_order) break;
            continue;
        }
        double t0 = clock_now();
        if (engine_step(eng, e) != 0) goto fail;
        if (j->c->test_hook) j->c->test_hook("step");
        double t1 = clock_now();
        j->sum->t_engine += t1 - t0;
        int64_t before = j->n_done_run;
        if (take_results(j, e) != 0) goto fail;
        in_engine -= j->n_done_run - before;
        if (j->n_fin && t1 - j->t_commit_last >= j->c->commit_interval && flush(j, e) != 0) goto fail;
        if (pg) {
            snapshot(j, &ps);
            progress_update(pg, &ps, t1);
        }
    }
    if (take_results(j, e) != 0) goto fail;
    if (flush(j, e) != 0) goto fail;
    if (pg) {
        snapshot(j, &ps);
        progress_finish(pg, &ps, clock_now());
    }
    progress_free(pg);
    return 0;
fail:
    progress_free(pg);
    return -1;
}

/* --- plan --- */

/* The pending works in submission order (jobs/plan); prompts that no pending work needs are freed. */
static int plan_work(job *j, uint32_t **order, size_t *n_order, struct err *e)
{
    int64_t n_works = plan_keymap_size(j->keys);
    struct plan_item *items = calloc((size_t)(n_works ? n_works : 1), sizeof *items);
    uint8_t *needed = calloc(j->n_lines ? j->n_lines : 1, 1);
    if (!items || !needed) {
        free(items);
        free(needed);
        return err_set(e, "out of memory");
    }
    for (int64_t w = 0; w < n_works; w++) {
        if (j->works[w].state != W_PENDING) continue;
        const struct line *L = &j->lines[j->works[w].owner];
        needed[j->works[w].owner] = 1;
        items[w] = (struct plan_item){L->prompt, L->n_prompt};
    }
    for (size_t i = 0; i < j->n_lines; i++)
        if (!needed[i]) {
            free(j->lines[i].prompt);
            j->lines[i].prompt = NULL;
        }
    free(needed);
    int rc = plan_order_pending(items, (size_t)n_works, j->m->ep.kv_block, j->c->sort, order, n_order, e);
    free(items);
    if (rc != 0) return -1;
    j->n_pending_start = (int64_t)*n_order;
    j->latency = malloc((*n_order ? *n_order : 1) * sizeof *j->latency);
    if (!j->latency) return err_set(e, "out of memory");
    return 0;
}

/* --- the whole run --- */

int job_run(const struct job_config *c, const struct job_model *m, struct job_summary *sum, struct err *e)
{
    memset(sum, 0, sizeof *sum);
    double t_start = clock_now();
    int64_t t_start_unix = (int64_t)time(NULL);
    struct record_energy energy;
    record_energy_start(&energy, m->backend && !strcmp(m->backend, "cuda"));
    job J;
    memset(&J, 0, sizeof J);
    job *j = &J;
    j->c = c;
    j->m = m;
    j->sum = sum;
    uint32_t *order = NULL;
    int rc = -1;
    j->keys = plan_keymap_init();
    if (!j->keys) {
        err_set(e, "out of memory");
        goto done;
    }
    int32_t bos = tok_bos(m->vocab), eos = tok_eos(m->vocab);
    const char *bp = bos >= 0 ? tok_piece(m->vocab, bos) : NULL, *ep = eos >= 0 ? tok_piece(m->vocab, eos) : NULL;
    snprintf(j->bos_text, sizeof j->bos_text, "%s", bp ? bp : "");
    snprintf(j->eos_text, sizeof j->eos_text, "%s", ep ? ep : "");

    /* 1. read */
    if (read_backlog(j, e) != 0) goto done;
    if (sum->interrupted) {
        rc = 0;
        goto done;
    }
    for (size_t i = 0; i < j->n_lines; i++)
        if (j->lines[i].no > j->max_line_no) j->max_line_no = j->lines[i].no;
    j->line_index = malloc((size_t)(j->max_line_no + 1) * sizeof *j->line_index);
    int64_t n_works = plan_keymap_size(j->keys);
    j->slot = calloc((size_t)(n_works ? n_works : 1), sizeof *j->slot);
    if (!j->line_index || !j->slot) {
        err_set(e, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i <= j->max_line_no; i++) j->line_index[i] = -1;
    for (size_t i = 0; i < j->n_lines; i++) j->line_index[j->lines[i].no] = (int64_t)i;
    double t_read = clock_now();
    sum->t_parse = t_read - t_start;

    /* 2. store */
    if (store_open(c->store, c->durability, &j->st, e) != 0) goto done;
    if (settings_bind_store(j->st, c, m, e) != 0) goto done;
    if (reconcile(j, e) != 0) goto done;
    double t_rec = clock_now();
    sum->t_store += t_rec - t_read;

    /* 3. plan */
    size_t n_pending;
    if (plan_work(j, &order, &n_pending, e) != 0) goto done;
    double t_plan = clock_now();
    sum->t_plan = t_plan - t_rec;
    log_info("%zu lines: %lld unique requests, %lld already done, %zu to run, %lld folded duplicates, %lld bad lines",
             j->n_lines, (long long)n_works, (long long)sum->work_skipped_done, n_pending,
             (long long)sum->folded_duplicates, (long long)sum->input_errors);

    /* the first flush writes what is already known (bad lines, lines done before) */
    if (flush(j, e) != 0) goto done;
    if (run_engine(j, order, n_pending, e) != 0) goto done;
    if (job_check(j, e) != 0) goto done;
    for (int f = 0; f < 2; f++)
        if (output_sync(j->out[f], e) != 0) goto done;

    for (size_t i = 0; i < j->n_lines; i++) {
        const struct line *L = &j->lines[i];
        if (L->state != L_SCHEDULED) continue;
        if (L->file == STORE_FILE_OUTPUT) sum->lines_ok++;
        else {
            sum->lines_failed++;
            if (!L->bad) sum->engine_errors++;
        }
    }
    if (!sum->interrupted && sum->lines_ok + sum->lines_failed != (int64_t)j->n_lines) {
        err_set(e, "%lld of %zu lines did not reach a file (bug)",
                (long long)((int64_t)j->n_lines - sum->lines_ok - sum->lines_failed), j->n_lines);
        goto done;
    }
    sum->wall_s = clock_now() - t_start;
    sum->gen_tok_s = sum->wall_s > 0 ? (double)sum->gen_tokens / sum->wall_s : 0;
    sum->prompt_tok_s = sum->wall_s > 0 ? (double)sum->prompt_tokens / sum->wall_s : 0;
    if (c->record) {
        struct engine_stats es;
        engine_get_stats(m->eng, &es);
        struct record_run rr = {c, m, sum, &es, j->latency, j->n_latency, j->backlog_json, j->repair_json,
                                t_start_unix, &energy};
        json_t *rec = record_build(&rr);
        int wr = record_write(c->record, rec, e);
        json_decref(rec);
        if (wr != 0) goto done;
    }
    rc = 0;
done:
    record_energy_stop(&energy);
    for (size_t i = 0; i < j->n_fin; i++) free_result(&j->fin[i].r, 1);
    free(j->fin);
    for (size_t i = 0; i < j->n_lines; i++) line_free(&j->lines[i]);
    free(j->lines);
    free(j->line_index);
    free(j->works);
    free(j->refs);
    free(j->slot);
    free(j->ready);
    free(j->latency);
    free(order);
    output_buf_free(&j->wbuf[0]);
    output_buf_free(&j->wbuf[1]);
    output_close(j->out[0]);
    output_close(j->out[1]);
    store_close(j->st);
    plan_keymap_free(j->keys);
    json_decref(j->backlog_json);
    json_decref(j->repair_json);
    return rc;
}
