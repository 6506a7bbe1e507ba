/* ledger — see ledger.h for the states, the memory and the invariants (ledger_check).
 *
 * Inside a commit: results are stored first (each gets its row id; `fin` is then sorted by work, so the
 * lines built in the same commit find them without a store read), then the finished lines are built (their
 * ids, models and messages read again through line_info, their digests checked against the book) and their
 * rows stored, then the transaction commits, then the write buffers go to the files. Lines built from results
 * of earlier commits read them back from the store (store_get_result, by row id).
 */
#include "jobs/ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "jobs/embedding.h"
#include "util/clock.h"
#include "util/sha256.h"

struct ledger_finished {
    uint32_t work;
    struct store_result r; /* text and error owned (malloc'd) */
};

struct ledger_held {
    uint32_t line;
    int64_t row;           /* its row in the store (no offset yet) */
    char *text;            /* (lines[line].len) owned */
};

const char *const ledger_codes[] = {"invalid_json",   "invalid_utf8",    "line_too_long",       "missing_id",
                                    "duplicate_id",   "invalid_type",    "invalid_value",       "missing_prompt",
                                    "unsupported_request", "chat_template", "prompt_too_long", "request_too_large",
                                    "unknown_field", "unsupported_parameter", NULL};

int ledger_code_index(const char *code)
{
    for (int i = 0; code && ledger_codes[i]; i++)
        if (!strcmp(code, ledger_codes[i])) return i;
    return -1;
}

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

static void free_result(struct store_result *r)
{
    free((char *)r->text);
    free((char *)r->error);
}

/* --- digests --- */

void ledger_digest_bad(const char *custom_id, const char *code, const char *message, uint8_t out[32])
{
    sha256_ctx *c = sha256_init();
    if (!c) {
        memset(out, 0, 32);
        return;
    }
    static const char tag[] = "nightshift-bad-v1";
    const char *id = custom_id ? custom_id : "";
    sha256_update(c, tag, sizeof tag);
    sha256_update(c, id, strlen(id) + 1);
    sha256_update(c, code, strlen(code) + 1);
    sha256_update(c, message ? message : "", message ? strlen(message) : 0);
    sha256_final(c, out);
}

/* ledger_digest_request and ledger_digest_embedding: the output options (dims, base64) are hashed only when
 * with_options, so that every other line's digest is what it always was. */
static void digest_line(const char *custom_id, int kind, const char *model, int32_t n, const uint8_t (*keys)[32],
                        int with_options, int32_t dims, int base64, uint8_t out[32])
{
    sha256_ctx *c = sha256_init();
    if (!c) {
        memset(out, 0, 32);
        return;
    }
    static const char tag[] = "nightshift-line-v1";
    const char *id = custom_id ? custom_id : "";
    sha256_update(c, tag, sizeof tag);
    sha256_update(c, id, strlen(id) + 1);
    uint8_t k = (uint8_t)kind;
    sha256_update(c, &k, 1);
    sha256_update(c, model, strlen(model) + 1);
    uint32_t nn = (uint32_t)n;
    sha256_update(c, &nn, 4);
    for (int32_t i = 0; i < n; i++) sha256_update(c, keys[i], 32);
    if (with_options) {
        uint8_t opt[5] = {(uint8_t)dims, (uint8_t)(dims >> 8), (uint8_t)(dims >> 16), (uint8_t)(dims >> 24),
                          (uint8_t)base64};
        sha256_update(c, opt, sizeof opt);
    }
    sha256_final(c, out);
}

void ledger_digest_request(const char *custom_id, int kind, const char *model, int32_t n, const uint8_t (*keys)[32],
                           uint8_t out[32])
{
    digest_line(custom_id, kind, model, n, keys, 0, 0, 0, out);
}

void ledger_digest_embedding(const char *custom_id, const char *model, int32_t n, const uint8_t (*keys)[32],
                             int32_t dimensions, int base64, uint8_t out[32])
{
    digest_line(custom_id, INPUT_KIND_EMBEDDING, model, n, keys, 1, dimensions, base64, out);
}

uint64_t ledger_digest_head(const uint8_t digest[32])
{
    uint64_t h = 0;
    memcpy(&h, digest, 7); /* 7 bytes: the line's code shares its word (ledger_line) */
    return h;
}

/* --- what names the run's lines --- */

/* "fp_" and 16 hex digits of sha256(model file's sha256, nightshift version, backend): the
 * system_fingerprint (what a result depends on besides the request). */
static void make_fingerprint(const struct ledger_params *p, char out[LEDGER_FINGERPRINT_BYTES])
{
    static const char zero[32];
    uint8_t d[32];
    char hex[65];
    const char *v = p->version ? p->version : "?", *be = p->backend ? p->backend : "?";
    sha256_ctx *c = sha256_init();
    if (!c) {
        snprintf(out, LEDGER_FINGERPRINT_BYTES, "fp_unknown");
        return;
    }
    sha256_update(c, p->model_sha256 ? (const char *)p->model_sha256 : zero, 32);
    sha256_update(c, v, strlen(v) + 1);
    sha256_update(c, be, strlen(be));
    sha256_final(c, d);
    sha256_hex(d, hex);
    snprintf(out, LEDGER_FINGERPRINT_BYTES, "fp_%.16s", hex);
}

/* The run's id: the store's meta "run.id", made (random) in the transaction of the first commit that builds a
 * line, so every line of one store, whether built before or after a crash, is named from the same run (a
 * commit that fails forgets it: the store may not hold it). */
static int load_run_id(ledger *l, struct err *e)
{
    static const char hx[] = "0123456789abcdef";
    char *v = NULL;
    if (l->run_id[0]) return 0;
    if (store_meta_get(l->st, "run.id", &v, e) != 0) return -1;
    if (v && strlen(v) == LEDGER_RUN_ID_BYTES - 1) {
        memcpy(l->run_id, v, LEDGER_RUN_ID_BYTES);
        free(v);
        return 0;
    }
    free(v);
    uint64_t r[2];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        r[0] = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15u ^ (uint64_t)getpid();
        r[1] = (uint64_t)(clock_now() * 1e9) * 0xbf58476d1ce4e5b9u;
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 16; k++) l->run_id[16 * i + k] = hx[(r[i] >> (60 - 4 * k)) & 15];
    l->run_id[LEDGER_RUN_ID_BYTES - 1] = '\0';
    return store_meta_set(l->st, "run.id", l->run_id, e);
}

/* Appends the line of a request that failed: bad (code from ledger_codes) or failed in the engine. */
static void put_fail_line(const ledger *l, const struct ledger_line *L, const char *custom_id, const char *code,
                          const char *message, struct output_buf *b)
{
    char param[72];
    struct output_fail f = {.run_id = l->run_id, .line = L->no, .custom_id = custom_id, .message = message};
    output_fail_classify(&f, code, message,
                         L->kind == INPUT_KIND_CHAT ? "messages" : L->kind == INPUT_KIND_EMBEDDING ? "input" : "prompt",
                         param, sizeof param);
    output_fail_line(b, &f);
}

/* --- the book --- */

int ledger_init(ledger *l, const struct ledger_params *p, struct err *e)
{
    memset(l, 0, sizeof *l);
    l->p = *p;
    make_fingerprint(p, l->fingerprint);
    l->keys = plan_keymap_init();
    if (!l->keys) return err_set(e, "out of memory");
    return 0;
}

void ledger_free(ledger *l)
{
    for (size_t i = 0; i < l->n_fin; i++) free_result(&l->fin[i].r);
    free(l->fin);
    for (size_t i = 0; i < l->n_held; i++) free(l->held[i].text);
    free(l->held);
    free(l->lines);
    free(l->works);
    free(l->multi);
    free(l->refs);
    free(l->ready);
    output_buf_free(&l->wbuf[0]);
    output_buf_free(&l->wbuf[1]);
    plan_keymap_free(l->keys);
    memset(l, 0, sizeof *l);
}

size_t ledger_bytes(const ledger *l)
{
    /* arrays count what is in use: the rest of their capacity is address space no page of which is touched */
    return l->n_lines * sizeof *l->lines + l->n_works * sizeof *l->works + l->n_multi * sizeof *l->multi +
           l->n_refs * sizeof *l->refs + l->cap_fin * sizeof *l->fin + l->cap_ready * sizeof *l->ready +
           l->cap_held * sizeof *l->held + (l->keys ? plan_keymap_bytes(l->keys) : 0);
}

/* The sizes the memory budget is built on (ledger.h, "Memory"). */
_Static_assert(sizeof(struct ledger_line) == 32, "a ledger line is 32 bytes");
_Static_assert(sizeof(struct ledger_work) == 28, "a ledger work is 28 bytes");

size_t ledger_bytes_per_line(int32_t n)
{
    /* keymap slots: 4 bytes each, at most 8/3 per key (load 3/8 right after it doubles) */
    size_t per_work = sizeof(struct ledger_work) + PLAN_KEY_BYTES + 11;
    return sizeof(struct ledger_line) + (size_t)n * per_work + (n > 1 ? (size_t)n * sizeof(uint32_t) : 0);
}

/* --- filling the book --- */

int ledger_add_line(ledger *l, int64_t no, int64_t off, int32_t n, uint32_t *li, struct err *e)
{
    if (l->n_lines >= UINT32_MAX) return err_set(e, "more than %u backlog lines", UINT32_MAX - 1);
    if (no < 1 || no > UINT32_MAX) return err_set(e, "backlog line number %lld is past %u", (long long)no, UINT32_MAX);
    if (n < 0 || n > LEDGER_MAX_N) return err_set(e, "%d completions for one line (at most %d)", (int)n, LEDGER_MAX_N);
    if (l->n_lines && (int64_t)l->lines[l->n_lines - 1].no >= no)
        return err_set(e, "ledger: line %lld added after line %u (bug)", (long long)no, l->lines[l->n_lines - 1].no);
    if (grow((void **)&l->lines, &l->cap_lines, l->n_lines + 1, sizeof *l->lines)) return err_set(e, "out of memory");
    uint32_t works = LEDGER_NO_REF;
    if (n > 1) {
        if (l->n_multi + (size_t)n > UINT32_MAX) return err_set(e, "more than %u completions", UINT32_MAX);
        if (grow((void **)&l->multi, &l->cap_multi, l->n_multi + (size_t)n, sizeof *l->multi))
            return err_set(e, "out of memory");
        works = (uint32_t)l->n_multi;
        for (int32_t k = 0; k < n; k++) l->multi[l->n_multi++] = LEDGER_NO_REF;
    }
    *li = (uint32_t)l->n_lines++;
    struct ledger_line *L = &l->lines[*li];
    memset(L, 0, sizeof *L);
    L->off = off;
    L->no = (uint32_t)no;
    L->n = (uint8_t)n;
    L->works = works;
    L->state = LEDGER_LINE_WAITING;
    return 0;
}

void ledger_set_bad(ledger *l, uint32_t li, const char *code)
{
    struct ledger_line *L = &l->lines[li];
    int c = ledger_code_index(code);
    L->bad = 1;
    L->code = (uint8_t)(c >= 0 ? c : ledger_code_index("invalid_value"));
    L->n = 0;
}

uint32_t ledger_line_work(const ledger *l, const struct ledger_line *L, int32_t k)
{
    return L->n == 1 ? L->works : l->multi[L->works + (uint32_t)k];
}

int ledger_add_work(ledger *l, uint32_t li, int32_t k, const uint8_t key[32], struct plan_item plan, int *folded,
                    struct err *e)
{
    int added;
    int64_t w = plan_keymap_put(l->keys, key, &added);
    if (w < 0) return err_set(e, "out of memory (or more than %u unique requests)", UINT32_MAX - 1);
    if (added) {
        if (grow((void **)&l->works, &l->cap_works, (size_t)w + 1, sizeof *l->works))
            return err_set(e, "out of memory");
        struct ledger_work *W = &l->works[w];
        memset(W, 0, sizeof *W);
        W->plan = plan;
        W->owner = li;
        W->ref_head = LEDGER_NO_REF;
        W->index = (uint8_t)k;
        W->state = LEDGER_WORK_PENDING;
        l->n_works = (size_t)w + 1;
    } else {
        if (grow((void **)&l->refs, &l->cap_refs, l->n_refs + 1, sizeof *l->refs)) return err_set(e, "out of memory");
        l->refs[l->n_refs] = (struct ledger_ref){li, l->works[w].ref_head};
        l->works[w].ref_head = (uint32_t)l->n_refs++;
    }
    *folded = !added;
    struct ledger_line *L = &l->lines[li];
    if (L->n == 1) L->works = (uint32_t)w;
    else l->multi[L->works + (uint32_t)k] = (uint32_t)w;
    return 0;
}

int64_t ledger_find_line(const ledger *l, int64_t no)
{
    size_t lo = 0, hi = l->n_lines;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((int64_t)l->lines[mid].no < no) lo = mid + 1;
        else hi = mid;
    }
    return lo < l->n_lines && (int64_t)l->lines[lo].no == no ? (int64_t)lo : -1;
}

/* --- states --- */

int ledger_line_file(const struct ledger_line *L)
{
    if (L->bad) return STORE_FILE_ERRORS;
    if (L->n_done + L->n_failed < L->n) return -1;
    return L->n_failed ? STORE_FILE_ERRORS : STORE_FILE_OUTPUT;
}

void ledger_mark_stored(ledger *l, uint32_t w, int status, int64_t result_id)
{
    l->works[w].state = status == STORE_STATUS_DONE ? LEDGER_WORK_DONE : LEDGER_WORK_FAILED;
    l->works[w].result_id = (uint32_t)result_id; /* a row past UINT32_MAX is never stored (store_results) */
}

int ledger_queue_line(ledger *l, uint32_t li, struct err *e)
{
    if (grow((void **)&l->ready, &l->cap_ready, l->n_ready + 1, sizeof *l->ready)) return err_set(e, "out of memory");
    l->ready[l->n_ready++] = li;
    return 0;
}

static int credit_line(ledger *l, uint32_t li, int done, int queue, struct err *e)
{
    struct ledger_line *L = &l->lines[li];
    if (done) L->n_done++;
    else L->n_failed++;
    if (queue && L->n_done + L->n_failed == L->n) return ledger_queue_line(l, li, e);
    return 0;
}

int ledger_credit_lines(ledger *l, uint32_t w, int queue, struct err *e)
{
    const struct ledger_work *W = &l->works[w];
    int done = W->state == LEDGER_WORK_DONE;
    if (credit_line(l, W->owner, done, queue, e) != 0) return -1;
    for (uint32_t r = W->ref_head; r != LEDGER_NO_REF; r = l->refs[r].next)
        if (credit_line(l, l->refs[r].line, done, queue, e) != 0) return -1;
    return 0;
}

void ledger_mark_queued(ledger *l, uint32_t w)
{
    l->works[w].state = LEDGER_WORK_QUEUED;
}

int ledger_add_result(ledger *l, uint32_t w, struct store_result *r, struct err *e)
{
    if (grow((void **)&l->fin, &l->cap_fin, l->n_fin + 1, sizeof *l->fin)) {
        free_result(r);
        return err_set(e, "out of memory");
    }
    struct ledger_finished *f = &l->fin[l->n_fin++];
    f->work = w;
    f->r = *r;
    return 0;
}

size_t ledger_n_uncommitted(const ledger *l) { return l->n_fin; }

/* --- building lines --- */

static const char *finish_name(int32_t f)
{
    return f == ENGINE_FINISH_LENGTH ? "length" : "stop";
}

static int cmp_fin(const void *a, const void *b)
{
    uint32_t x = ((const struct ledger_finished *)a)->work, y = ((const struct ledger_finished *)b)->work;
    return (x > y) - (x < y);
}

/* The result of work w: from the current commit or from the store (then *owned is set: free it). */
static int get_result(ledger *l, uint32_t w, struct store_result *r, int *owned, struct err *e)
{
    *owned = 0;
    struct ledger_finished probe = {.work = w};
    const struct ledger_finished *f = l->n_fin ? bsearch(&probe, l->fin, l->n_fin, sizeof *l->fin, cmp_fin) : NULL;
    if (f) {
        *r = f->r;
        return 0;
    }
    int found;
    if (store_get_result(l->st, l->works[w].result_id, r, &found, e) != 0) return -1;
    if (!found) return err_set(e, "store: the result of a finished key is missing (backlog line %u)",
                               l->lines[l->works[w].owner].no);
    *owned = 1;
    return 0;
}

/* A line built: its bytes (malloc'd) and the digest of what they are built from. */
struct built {
    char *text;
    size_t len;
    uint8_t digest[32];
};

static int changed(const struct ledger_line *L, struct err *e)
{
    return err_set(e, "backlog line %u changed since this run read it (its id, model or message is not what was "
                      "read); run again to start from the backlog as it is now",
                   L->no);
}

/* Appends the result line of embeddings line L (every result done): its embeddings list (jobs/embedding). */
static int put_embedding_line(const ledger *l, struct ledger_line *L, const struct ledger_line_info *info,
                              const struct store_result *rs, struct output_buf *b, struct err *e)
{
    const char *texts[LEDGER_MAX_N];
    size_t lens[LEDGER_MAX_N];
    int64_t prompt_tokens = 0;
    for (int32_t k = 0; k < L->n; k++) {
        texts[k] = rs[k].text;
        lens[k] = rs[k].text_len;
        prompt_tokens += rs[k].n_prompt;
    }
    struct embedding_out o = {texts, lens, L->n, info->dimensions, info->base64, l->p.model_name, prompt_tokens};
    struct output_buf body = {0};
    int rc = embedding_body(&body, &o, e) != 0 ? err_prefix(e, "backlog line %u", L->no) : 0;
    if (rc == 0 && body.oom) rc = err_set(e, "out of memory");
    if (rc != 0) {
        output_buf_free(&body);
        return -1;
    }
    output_body_line(b, l->run_id, L->no, info->custom_id, body.p, body.n);
    output_buf_free(&body);
    L->file = STORE_FILE_OUTPUT;
    return 0;
}

/* A line with logprobs: each done result holds its text then its logprobs (output_logprobs_pack, of no
 * endpoint): ch[k] gets the text, and the logprobs object in the line's shape, rendered into lp. */
static int put_choice_logprobs(const ledger *l, const struct ledger_line *L, const struct store_result *rs,
                               struct output_choice *ch, struct output_buf *lp, struct err *e)
{
    size_t start[LEDGER_MAX_N];
    for (int32_t k = 0; k < L->n; k++) {
        start[k] = lp->n;
        if (rs[k].status != STORE_STATUS_DONE) continue;
        if (!l->p.vocab || output_logprobs_unpack(rs[k].text, rs[k].text_len, &ch[k].text, &ch[k].len) ||
            output_logprobs_render(lp, l->p.vocab, L->kind == INPUT_KIND_CHAT, rs[k].text, rs[k].text_len))
            return err_set(e, "store: the logprobs of backlog line %u cannot be read (or no vocabulary: bug)", L->no);
        ch[k].logprobs_len = lp->n - start[k];
    }
    for (int32_t k = 0; k < L->n; k++) /* lp->p is final now */
        if (ch[k].logprobs_len) ch[k].logprobs = lp->p + start[k];
    return 0;
}

/* Appends the line of L's results rs (n entries) to b: a result line, or an error line when one failed. */
static int put_result_line(const ledger *l, struct ledger_line *L, const struct ledger_line_info *info,
                           const struct store_result *rs, struct output_choice *ch, struct output_buf *b,
                           struct err *e)
{
    struct output_buf lp = {0};
    int32_t failed = -1;
    int64_t gen = 0, created = 0;
    for (int32_t k = 0; k < L->n; k++) {
        if (rs[k].status != STORE_STATUS_DONE && failed < 0) failed = k;
        gen += rs[k].n_gen;
        if (rs[k].created > created) created = rs[k].created;
        ch[k] = (struct output_choice){.text = rs[k].text, .len = rs[k].text_len,
                                       .finish_reason = finish_name(rs[k].finish)};
    }
    if (failed < 0 && info->logprobs && put_choice_logprobs(l, L, rs, ch, &lp, e)) {
        output_buf_free(&lp);
        return -1;
    }
    if (failed < 0 && L->kind == INPUT_KIND_EMBEDDING) return put_embedding_line(l, L, info, rs, b, e);
    if (failed >= 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s%s", L->n > 1 ? "a completion failed: " : "",
                 rs[failed].error ? rs[failed].error : "failed");
        put_fail_line(l, L, info->custom_id, "engine_error", msg, b);
        L->file = STORE_FILE_ERRORS;
    } else {
        struct output_ok o = {l->run_id,    L->no,           info->custom_id, L->kind == INPUT_KIND_CHAT,
                              l->p.model_name, l->fingerprint, created,       ch,
                              L->n,         rs[0].n_prompt,  gen,             rs[0].n_cached};
        output_ok_line(b, &o);
        L->file = STORE_FILE_OUTPUT;
    }
    output_buf_free(&lp);
    return 0;
}

/* The bytes of request line L from its results; the digest from their keys. */
static int build_request_line(ledger *l, struct ledger_line *L, const struct ledger_line_info *info,
                              struct output_buf *b, uint8_t digest[32], struct err *e)
{
    size_t n = L->n;
    struct store_result *rs = calloc(n, sizeof *rs);
    int *owned = calloc(n, sizeof *owned);
    struct output_choice *ch = calloc(n, sizeof *ch);
    uint8_t (*keys)[32] = calloc(n, sizeof *keys);
    int rc = 0;
    size_t k_loaded = 0;
    if (!rs || !owned || !ch || !keys) rc = err_set(e, "out of memory");
    for (size_t k = 0; k < n && rc == 0; k++) {
        rc = get_result(l, ledger_line_work(l, L, (int32_t)k), &rs[k], &owned[k], e);
        if (rc == 0) {
            k_loaded = k + 1;
            memcpy(keys[k], rs[k].key, 32);
        }
    }
    if (rc == 0) {
        const char *model = info->model ? info->model : l->p.model_name;
        if (L->kind == INPUT_KIND_EMBEDDING)
            ledger_digest_embedding(info->custom_id, model, L->n, (const uint8_t(*)[32])keys, info->dimensions,
                                    info->base64, digest);
        else
            ledger_digest_request(info->custom_id, L->kind, model, L->n, (const uint8_t(*)[32])keys, digest);
        rc = put_result_line(l, L, info, rs, ch, b, e);
    }
    for (size_t k = 0; k < k_loaded; k++)
        if (owned[k]) free_result(&rs[k]);
    free(rs);
    free(owned);
    free(ch);
    free(keys);
    return rc;
}

/* Builds the bytes of finished line li and sets its file and length. */
static int build_line(ledger *l, uint32_t li, struct built *out, struct err *e)
{
    struct ledger_line *L = &l->lines[li];
    struct output_buf b = {0};
    struct ledger_line_info info = {0};
    memset(out, 0, sizeof *out);
    if (!l->line_info) return err_set(e, "ledger: no line_info to build backlog line %u (bug)", L->no);
    if (load_run_id(l, e) != 0) return -1;
    if (l->line_info(l->info_user, l, li, &info, e) != 0) return -1;
    if (L->bad) {
        const char *code = ledger_codes[L->code], *msg = info.message ? info.message : "";
        ledger_digest_bad(info.custom_id, code, msg, out->digest);
        if (info.custom_id) put_fail_line(l, L, info.custom_id, code, msg, &b);
        else output_error_line(&b, l->run_id, NULL, L->no, code, msg);
        L->file = STORE_FILE_ERRORS;
    } else if (build_request_line(l, L, &info, &b, out->digest, e) != 0) {
        output_buf_free(&b);
        return -1;
    }
    if (ledger_digest_head(out->digest) != L->digest) {
        output_buf_free(&b);
        return changed(L, e);
    }
    if (b.oom || b.n > UINT32_MAX) {
        output_buf_free(&b);
        return err_set(e, "out of memory building backlog line %u (or a line over 4 GiB)", L->no);
    }
    out->text = b.p;
    out->len = b.n;
    L->len = (uint32_t)b.n;
    return 0;
}

/* --- one commit --- */

/* Inserts the row of line L built into *bl, in L->file, at offset off or -1 for none yet; *row = its id. */
static int put_line_row(ledger *l, const struct ledger_line *L, const struct built *bl, int64_t off, int64_t *row,
                        struct err *e)
{
    struct store_line r = {0, L->no, {0}, L->file, off, bl->text, bl->len};
    memcpy(r.digest, bl->digest, 32);
    return store_put_line(l->st, &r, row, e);
}

/* Appends built line L (len bytes at text) at the end of its file's write buffer: SCHEDULED. */
static int schedule_bytes(ledger *l, struct ledger_line *L, const char *text, struct err *e)
{
    int f = L->file;
    l->out_end[f] += (int64_t)L->len;
    output_buf_put(&l->wbuf[f], text, L->len);
    if (l->wbuf[f].oom) return err_set(e, "out of memory");
    L->state = LEDGER_LINE_SCHEDULED;
    return 0;
}

/* --- the held heap (order_input: READY lines by line index) --- */

static void held_swap(struct ledger_held *h, size_t i, size_t j)
{
    struct ledger_held t = h[i];
    h[i] = h[j];
    h[j] = t;
}

static int held_push(ledger *l, uint32_t li, int64_t row, char *text, struct err *e)
{
    if (grow((void **)&l->held, &l->cap_held, l->n_held + 1, sizeof *l->held)) return err_set(e, "out of memory");
    size_t i = l->n_held++;
    l->held[i] = (struct ledger_held){li, row, text};
    while (i > 0 && l->held[(i - 1) / 2].line > l->held[i].line) {
        held_swap(l->held, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}

static struct ledger_held held_pop(ledger *l)
{
    struct ledger_held top = l->held[0];
    l->held[0] = l->held[--l->n_held];
    for (size_t i = 0;;) {
        size_t c = 2 * i + 1, m = i;
        if (c < l->n_held && l->held[c].line < l->held[m].line) m = c;
        if (c + 1 < l->n_held && l->held[c + 1].line < l->held[m].line) m = c + 1;
        if (m == i) break;
        held_swap(l->held, i, m);
        i = m;
    }
    return top;
}

/* Inside the transaction: stores the results handed in and credits them (queueing the lines they finish);
 * then sorts them by work for get_result. */
static int store_results(ledger *l, struct err *e)
{
    int64_t now_unix = (int64_t)time(NULL);
    for (size_t i = 0; i < l->n_fin; i++) {
        struct ledger_finished *f = &l->fin[i];
        f->r.created = now_unix;
        if (f->work >= l->n_works || memcmp(f->r.key, plan_keymap_key(l->keys, f->work), PLAN_KEY_BYTES))
            return err_set(e, "ledger: a result's key is not its work's (work %u; bug)", f->work);
        struct ledger_work *W = &l->works[f->work];
        int64_t row;
        if (store_put_result(l->st, &f->r, &row, e) != 0) return -1;
        if (row <= 0 || row > UINT32_MAX)
            return err_set(e, "the store's results row %lld is past %u", (long long)row, UINT32_MAX);
        W->result_id = (uint32_t)row;
        W->state = f->r.status == STORE_STATUS_DONE ? LEDGER_WORK_DONE : LEDGER_WORK_FAILED;
        if (ledger_credit_lines(l, f->work, 1, e) != 0) return -1;
    }
    if (l->n_fin) qsort(l->fin, l->n_fin, sizeof *l->fin, cmp_fin);
    return 0;
}

/* Inside the transaction: builds the queued lines ready[from ..) and stores their rows, scheduled (as
 * completed) or READY (order_input, then schedules every line whose predecessors are all scheduled); stops
 * after the line that takes the bytes built past LEDGER_COMMIT_BYTES, *end = the first line not built. */
static int schedule_ready(ledger *l, size_t from, size_t *end, struct err *e)
{
    size_t built = 0;
    *end = l->n_ready;
    for (size_t i = from; i < l->n_ready; i++) {
        if (built >= LEDGER_COMMIT_BYTES) {
            *end = i;
            break;
        }
        uint32_t li = l->ready[i];
        struct ledger_line *L = &l->lines[li];
        struct built bl;
        int64_t row;
        if (build_line(l, li, &bl, e) != 0) return -1;
        built += bl.len;
        int rc = put_line_row(l, L, &bl, l->p.order_input ? -1 : l->out_end[L->file], &row, e);
        if (rc == 0 && !l->p.order_input) rc = schedule_bytes(l, L, bl.text, e);
        if (rc == 0 && l->p.order_input) {
            rc = held_push(l, li, row, bl.text, e);
            if (rc == 0) {
                L->state = LEDGER_LINE_READY;
                continue; /* the heap owns the text now */
            }
        }
        free(bl.text);
        if (rc != 0) return -1;
    }
    while (l->p.order_input && l->cursor < l->n_lines) {
        struct ledger_line *L = &l->lines[l->cursor];
        if (L->state == LEDGER_LINE_READY) {
            if (!l->n_held || l->held[0].line != l->cursor)
                return err_set(e, "ledger: READY line %u is not first in the held heap (bug)", L->no);
            struct ledger_held h = held_pop(l);
            int rc = store_set_line_off(l->st, h.row, l->out_end[L->file], e);
            if (rc == 0) rc = schedule_bytes(l, L, h.text, e);
            free(h.text);
            if (rc != 0) return -1;
        } else if (L->state != LEDGER_LINE_SCHEDULED) {
            break;
        }
        l->cursor++;
    }
    return 0;
}

/* After the commit: appends the write buffers to their files. */
static int write_scheduled(ledger *l, struct err *e)
{
    void (*hook)(const char *) = l->p.test_hook;
    for (int f = 0; f < 2; f++) {
        struct output_buf *b = &l->wbuf[f];
        if (!b->n) continue;
        size_t first = hook ? b->n / 2 : b->n; /* tests: die in the middle */
        if (output_append(l->out[f], b->p, first, e) != 0) return -1;
        if (first < b->n) {
            hook("mid_write");
            if (output_append(l->out[f], b->p + first, b->n - first, e) != 0) return -1;
        }
        b->n = 0;
    }
    return 0;
}

int ledger_commit_and_write(ledger *l, struct err *e)
{
    if (l->n_fin == 0 && l->n_ready == 0 && !(l->p.order_input && l->cursor < l->n_lines)) return 0;
    /* One transaction stores the results and the first lines they finish; a result that finishes many lines
     * (a folded duplicate) has the rest built in further transactions of LEDGER_COMMIT_BYTES each, so the
     * write buffers stay bounded. A kill between them loses nothing: those lines are finished without a
     * row, and jobs/reconcile queues them again. */
    size_t from = 0, end;
    do {
        double t0 = clock_now();
        if (store_begin(l->st, e) != 0) return -1;
        if (store_results(l, e) != 0) goto fail;
        double t1 = clock_now();
        if (schedule_ready(l, from, &end, e) != 0) goto fail;
        double t2 = clock_now();
        if (store_commit(l->st, e) != 0) goto fail;
        for (size_t i = from; i < end; i++) /* every line of the ready list up to end has its row now */
            l->n_committed[l->lines[l->ready[i]].file]++;
        for (size_t i = 0; i < l->n_fin; i++) free_result(&l->fin[i].r); /* stored: not again */
        l->n_fin = 0;
        double t3 = clock_now();
        /* Only now, after the commit, do the lines reach the files (invariant 2). */
        if (l->p.test_hook) l->p.test_hook("after_commit");
        if (write_scheduled(l, e) != 0) return -1;
        if (l->p.test_hook) l->p.test_hook("after_write");
        double t4 = clock_now();
        l->t_store += (t1 - t0) + (t3 - t2);
        l->t_output += (t2 - t1) + (t4 - t3);
        from = end;
    } while (from < l->n_ready);
    l->n_ready = 0;
    if (l->p.debug_checks && ledger_check(l, e) != 0) return err_prefix(e, "after a commit");
    return 0;
fail:
    store_rollback(l->st);
    l->run_id[0] = '\0'; /* made in this transaction perhaps: read (or made) again by the next one */
    l->n_ready -= from; /* the lines committed before stay committed */
    memmove(l->ready, l->ready + from, l->n_ready * sizeof *l->ready);
    return -1;
}

void ledger_count_committed(const ledger *l, int64_t *n_results, int64_t *n_errors)
{
    *n_results = l->n_committed[STORE_FILE_OUTPUT];
    *n_errors = l->n_committed[STORE_FILE_ERRORS];
}

void ledger_count_lines(const ledger *l, int64_t *n_results, int64_t *n_errors, int64_t *n_engine_errors)
{
    *n_results = *n_errors = *n_engine_errors = 0;
    for (size_t i = 0; i < l->n_lines; i++) {
        const struct ledger_line *L = &l->lines[i];
        if (L->state != LEDGER_LINE_SCHEDULED) continue;
        if (L->file == STORE_FILE_OUTPUT) {
            (*n_results)++;
        } else {
            (*n_errors)++;
            if (!L->bad) (*n_engine_errors)++;
        }
    }
}

/* --- debug check --- */

/* 1 if line li needs work w (as some completion). */
static int line_needs(const ledger *l, uint32_t li, uint32_t w)
{
    const struct ledger_line *L = &l->lines[li];
    for (int32_t k = 0; k < L->n; k++)
        if (ledger_line_work(l, L, k) == w) return 1;
    return 0;
}

/* Works: states and result rows; owners and refs lists (n_refs_to[li] counts the works naming line li, up
 * to 255). */
static int check_works(const ledger *l, uint8_t *n_refs_to, struct err *e)
{
    if ((int64_t)l->n_works != plan_keymap_size(l->keys))
        return err_set(e, "ledger_check: %zu works for %lld keys", l->n_works, (long long)plan_keymap_size(l->keys));
    size_t n_seen = 0;
    for (size_t w = 0; w < l->n_works; w++) {
        const struct ledger_work *W = &l->works[w];
        int stored = W->state == LEDGER_WORK_DONE || W->state == LEDGER_WORK_FAILED;
        if (W->state > LEDGER_WORK_FAILED || stored != (W->result_id != 0))
            return err_set(e, "ledger_check: work %zu: state %d with result row %lld", w, W->state,
                           (long long)W->result_id);
        if (W->owner >= l->n_lines || W->index >= l->lines[W->owner].n ||
            ledger_line_work(l, &l->lines[W->owner], W->index) != w)
            return err_set(e, "ledger_check: work %zu: its owner does not need it as completion %d", w, W->index);
        if (n_refs_to[W->owner] < 255) n_refs_to[W->owner]++;
        for (uint32_t r = W->ref_head; r != LEDGER_NO_REF; r = l->refs[r].next) {
            if (r >= l->n_refs || ++n_seen > l->n_refs) return err_set(e, "ledger_check: work %zu: bad refs list", w);
            uint32_t li = l->refs[r].line;
            if (li >= l->n_lines || li == W->owner || !line_needs(l, li, (uint32_t)w))
                return err_set(e, "ledger_check: work %zu names line index %u, which does not need it (or owns it)", w,
                               li);
            if (n_refs_to[li] < 255) n_refs_to[li]++;
        }
    }
    if (n_seen != l->n_refs)
        return err_set(e, "ledger_check: %zu of %zu refs are in no list", l->n_refs - n_seen, l->n_refs);
    return 0;
}

/* One line: its number, works and counts, its state against the ready list, the held heap and the cursor;
 * adds its length to scheduled[file] when SCHEDULED. marks[i]: bit 0 queued, bit 1 held. */
static int check_line(const ledger *l, size_t i, uint8_t n_refs, uint8_t marks, int64_t scheduled[2], struct err *e)
{
    const struct ledger_line *L = &l->lines[i];
    unsigned no = L->no;
    int32_t n_done = 0, n_failed = 0;
    if (i > 0 && l->lines[i - 1].no >= L->no)
        return err_set(e, "ledger_check: line %u comes after line %u", no, l->lines[i - 1].no);
    if (L->state > LEDGER_LINE_SCHEDULED) return err_set(e, "ledger_check: line %u: state %d", no, L->state);
    if (L->bad && (L->n || !ledger_codes[L->code]))
        return err_set(e, "ledger_check: line %u is bad with works or no code", no);
    if (n_refs != L->n) return err_set(e, "ledger_check: line %u needs %d works, %u name it", no, L->n, n_refs);
    for (int32_t k = 0; k < L->n; k++) {
        uint32_t w = ledger_line_work(l, L, k);
        if (w >= l->n_works) return err_set(e, "ledger_check: line %u: bad work %u", no, w);
        uint8_t s = l->works[w].state;
        n_done += s == LEDGER_WORK_DONE;
        n_failed += s == LEDGER_WORK_FAILED;
    }
    if (n_done != L->n_done || n_failed != L->n_failed)
        return err_set(e, "ledger_check: line %u counts %d done, %d failed; its works say %d, %d", no, L->n_done,
                       L->n_failed, n_done, n_failed);
    int file = ledger_line_file(L), queued = marks & 1, held = (marks >> 1) & 1;
    if (queued != (L->state == LEDGER_LINE_WAITING && file >= 0))
        return err_set(e, "ledger_check: line %u is %s, %sfinished and %squeued", no,
                       L->state == LEDGER_LINE_WAITING ? "waiting" : "built", file >= 0 ? "" : "not ",
                       queued ? "" : "not ");
    if (held != (L->state == LEDGER_LINE_READY) || (held && (!l->p.order_input || L->file != file)))
        return err_set(e, "ledger_check: line %u is %sready and %sheld", no,
                       L->state == LEDGER_LINE_READY ? "" : "not ", held ? "" : "not ");
    if (L->state == LEDGER_LINE_SCHEDULED) {
        if (L->file != file) return err_set(e, "ledger_check: line %u is scheduled in the wrong file", no);
        scheduled[L->file] += (int64_t)L->len;
    }
    if (l->p.order_input && i < l->cursor && L->state != LEDGER_LINE_SCHEDULED)
        return err_set(e, "ledger_check: line %u is before the cursor but not scheduled", no);
    return 0;
}

/* marks[li] bit 0: in the ready list; bit 1: in the held heap (which must be a heap of distinct lines). */
static int mark_lists(const ledger *l, uint8_t *marks, struct err *e)
{
    for (size_t k = 0; k < l->n_ready; k++) {
        if (l->ready[k] >= l->n_lines || (marks[l->ready[k]] & 1))
            return err_set(e, "ledger_check: ready list entry %zu: bad or repeated line index %u", k, l->ready[k]);
        marks[l->ready[k]] |= 1;
    }
    for (size_t k = 0; k < l->n_held; k++) {
        uint32_t li = l->held[k].line;
        if (li >= l->n_lines || (marks[li] & 2) || !l->held[k].text || !l->held[k].row ||
            (k > 0 && l->held[(k - 1) / 2].line > li))
            return err_set(e, "ledger_check: held entry %zu (line index %u) is repeated, empty or out of heap order", k,
                           li);
        marks[li] |= 2;
    }
    return 0;
}

int ledger_check(const ledger *l, struct err *e)
{
    uint8_t *marks = calloc(l->n_lines ? l->n_lines : 1, 1);
    uint8_t *n_refs_to = calloc(l->n_lines ? l->n_lines : 1, 1);
    int64_t scheduled[2] = {0, 0}, committed[2] = {0, 0};
    int rc = 0;
    if (!marks || !n_refs_to) rc = err_set(e, "ledger_check: out of memory");
    if (rc == 0 && l->n_fin) rc = err_set(e, "ledger_check: %zu results outside a commit", l->n_fin);
    if (rc == 0) rc = mark_lists(l, marks, e);
    if (rc == 0) rc = check_works(l, n_refs_to, e);
    for (size_t i = 0; rc == 0 && i < l->n_lines; i++) {
        rc = check_line(l, i, n_refs_to[i], marks[i], scheduled, e);
        if (l->lines[i].state != LEDGER_LINE_WAITING) committed[l->lines[i].file]++;
    }
    for (int f = 0; rc == 0 && f < 2; f++) {
        if (committed[f] != l->n_committed[f])
            rc = err_set(e, "ledger_check: file %d: %lld lines are committed, n_committed says %lld", f,
                         (long long)committed[f], (long long)l->n_committed[f]);
        else if (scheduled[f] != l->out_end[f])
            rc = err_set(e, "ledger_check: file %d: scheduled lines end at %lld, out_end is %lld", f,
                         (long long)scheduled[f], (long long)l->out_end[f]);
        else if (l->wbuf[f].n)
            rc = err_set(e, "ledger_check: file %d: %zu bytes left in the write buffer", f, l->wbuf[f].n);
        else if (l->out[f] && output_size(l->out[f]) != l->out_end[f])
            rc = err_set(e, "ledger_check: file %d is %lld bytes, its scheduled lines end at %lld", f,
                         (long long)output_size(l->out[f]), (long long)l->out_end[f]);
    }
    free(marks);
    free(n_refs_to);
    return rc;
}
