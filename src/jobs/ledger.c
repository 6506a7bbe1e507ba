/* ledger — see ledger.h for the states and the invariants (ledger_check).
 *
 * Inside a commit: results are stored first (each gets its row id and, through `slot`, is found by the
 * lines built in the same commit without a store read), then the finished lines are built and their rows
 * stored, then the transaction commits, then the write buffers go to the files. Lines built from results
 * of earlier commits read them back from the store (store_get_result, by row id).
 */
#include "jobs/ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "util/clock.h"

struct ledger_finished {
    uint32_t work;
    struct store_result r; /* text and error owned (malloc'd) */
};

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

static void line_free(struct ledger_line *L)
{
    free(L->custom_id);
    free(L->model);
    free(L->message);
    genparam_free(&L->gen);
    free(L->prompt);
    free(L->works);
    free(L->text);
}

static void free_result(struct store_result *r)
{
    free((char *)r->text);
    free((char *)r->error);
}

int ledger_init(ledger *l, const struct ledger_params *p, struct err *e)
{
    memset(l, 0, sizeof *l);
    l->p = *p;
    l->keys = plan_keymap_init();
    if (!l->keys) return err_set(e, "out of memory");
    return 0;
}

void ledger_free(ledger *l)
{
    for (size_t i = 0; i < l->n_fin; i++) free_result(&l->fin[i].r);
    free(l->fin);
    for (size_t i = 0; i < l->n_lines; i++) line_free(&l->lines[i]);
    free(l->lines);
    free(l->works);
    free(l->refs);
    free(l->slot);
    free(l->ready);
    output_buf_free(&l->wbuf[0]);
    output_buf_free(&l->wbuf[1]);
    plan_keymap_free(l->keys);
    memset(l, 0, sizeof *l);
}

/* --- filling the book --- */

int ledger_add_line(ledger *l, uint32_t *li, struct err *e)
{
    if (l->n_lines >= UINT32_MAX) return err_set(e, "more than %u backlog lines", UINT32_MAX - 1);
    if (grow((void **)&l->lines, &l->cap_lines, l->n_lines + 1, sizeof *l->lines)) return err_set(e, "out of memory");
    *li = (uint32_t)l->n_lines++;
    memset(&l->lines[*li], 0, sizeof l->lines[*li]);
    l->lines[*li].state = LEDGER_LINE_WAITING;
    return 0;
}

int ledger_add_work(ledger *l, uint32_t li, int32_t k, const uint8_t key[32], int32_t max_tokens, uint64_t seed,
                    int *folded, struct err *e)
{
    int added;
    int64_t w = plan_keymap_put(l->keys, key, &added);
    if (w < 0) return err_set(e, "out of memory");
    if (added) {
        if (grow((void **)&l->works, &l->cap_works, (size_t)w + 1, sizeof *l->works))
            return err_set(e, "out of memory");
        struct ledger_work *W = &l->works[w];
        memset(W, 0, sizeof *W);
        W->owner = li;
        W->ref_head = LEDGER_NO_REF;
        W->max_tokens = max_tokens;
        W->seed = seed;
        W->state = LEDGER_WORK_PENDING;
        l->n_works = (size_t)w + 1;
    }
    *folded = !added;
    if (grow((void **)&l->refs, &l->cap_refs, l->n_refs + 1, sizeof *l->refs)) return err_set(e, "out of memory");
    l->refs[l->n_refs] = (struct ledger_ref){li, l->works[w].ref_head};
    l->works[w].ref_head = (uint32_t)l->n_refs++;
    l->lines[li].works[k] = (uint32_t)w;
    return 0;
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
    l->works[w].result_id = result_id;
}

int ledger_queue_line(ledger *l, uint32_t li, struct err *e)
{
    if (grow((void **)&l->ready, &l->cap_ready, l->n_ready + 1, sizeof *l->ready)) return err_set(e, "out of memory");
    l->ready[l->n_ready++] = li;
    return 0;
}

int ledger_credit_lines(ledger *l, uint32_t w, int queue, struct err *e)
{
    const struct ledger_work *W = &l->works[w];
    for (uint32_t r = W->ref_head; r != LEDGER_NO_REF; r = l->refs[r].next) {
        uint32_t li = l->refs[r].line;
        struct ledger_line *L = &l->lines[li];
        if (W->state == LEDGER_WORK_DONE) L->n_done++;
        else L->n_failed++;
        if (queue && L->n_done + L->n_failed == L->n && ledger_queue_line(l, li, e) != 0) return -1;
    }
    return 0;
}

void ledger_drop_idle_prompts(ledger *l)
{
    uint8_t *needed = calloc(l->n_lines ? l->n_lines : 1, 1);
    if (!needed) return; /* the prompts stay: only memory is lost */
    for (size_t w = 0; w < l->n_works; w++)
        if (l->works[w].state == LEDGER_WORK_PENDING) needed[l->works[w].owner] = 1;
    for (size_t i = 0; i < l->n_lines; i++)
        if (!needed[i]) {
            free(l->lines[i].prompt);
            l->lines[i].prompt = NULL;
        }
    free(needed);
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

/* The result of work w: from the current commit or from the store (then *owned is set: free it). */
static int get_result(ledger *l, uint32_t w, struct store_result *r, int *owned, struct err *e)
{
    *owned = 0;
    struct ledger_finished *f = w < l->n_slot ? l->slot[w] : NULL;
    if (f) {
        *r = f->r;
        return 0;
    }
    int found;
    if (store_get_result(l->st, l->works[w].result_id, r, &found, e) != 0) return -1;
    if (!found) return err_set(e, "store: the result of a finished key is missing (backlog line %lld)",
                               (long long)l->lines[l->works[w].owner].no);
    *owned = 1;
    return 0;
}

/* Appends the line of L's results rs (n entries) to b: a result line, or an error line when one failed. */
static void put_result_line(const ledger *l, struct ledger_line *L, const struct store_result *rs,
                            struct output_choice *ch, struct output_buf *b)
{
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
        output_error_line(b, L->custom_id, L->no, "engine_error", msg);
        L->file = STORE_FILE_ERRORS;
    } else {
        struct output_ok o = {L->custom_id, L->kind == INPUT_KIND_CHAT, L->model ? L->model : l->p.model_name, created,
                              plan_keymap_key(l->keys, L->works[0]), ch, L->n, L->n_prompt, gen};
        output_ok_line(b, &o);
        L->file = STORE_FILE_OUTPUT;
    }
}

/* Builds the bytes of finished line L into L->text and sets L->file. */
static int build_line(ledger *l, struct ledger_line *L, struct err *e)
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
            rc = get_result(l, L->works[k], &rs[k], &owned[k], e);
            if (rc == 0) k_loaded = k + 1;
        }
        if (rc == 0) put_result_line(l, L, rs, ch, &b);
        for (int k = 0; k < k_loaded; k++)
            if (owned[k]) free_result(&rs[k]);
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

/* --- one commit --- */

/* Inserts L's row (its built bytes, in L->file, at offset off or -1 for none yet); L->row = its id. */
static int put_line_row(ledger *l, struct ledger_line *L, int64_t off, struct err *e)
{
    struct store_line row = {0, L->no, {0}, L->file, off, L->text, L->len};
    memcpy(row.digest, L->digest, 32);
    return store_put_line(l->st, &row, &L->row, e);
}

/* Gives built line L the next offset of its file (inserting its row, or setting the offset of its READY
 * row) and moves its bytes to the write buffer. */
static int schedule_line(ledger *l, struct ledger_line *L, int insert, struct err *e)
{
    int f = L->file;
    if (insert) {
        if (put_line_row(l, L, l->out_end[f], e) != 0) return -1;
    } else if (store_set_line_off(l->st, L->row, l->out_end[f], e) != 0) {
        return -1;
    }
    l->out_end[f] += (int64_t)L->len;
    output_buf_put(&l->wbuf[f], L->text, L->len);
    if (l->wbuf[f].oom) return err_set(e, "out of memory");
    free(L->text);
    L->text = NULL;
    L->state = LEDGER_LINE_SCHEDULED;
    return 0;
}

/* Inside the transaction: stores the results handed in and credits them (queueing the lines they finish). */
static int store_results(ledger *l, struct err *e)
{
    if (l->n_slot < l->n_works) {
        void *p = realloc(l->slot, l->n_works * sizeof *l->slot);
        if (!p) return err_set(e, "out of memory");
        l->slot = p;
        memset(l->slot + l->n_slot, 0, (l->n_works - l->n_slot) * sizeof *l->slot);
        l->n_slot = l->n_works;
    }
    int64_t now_unix = (int64_t)time(NULL);
    for (size_t i = 0; i < l->n_fin; i++) {
        struct ledger_finished *f = &l->fin[i];
        f->r.created = now_unix;
        memcpy(f->r.key, plan_keymap_key(l->keys, f->work), 32);
        struct ledger_work *W = &l->works[f->work];
        if (store_put_result(l->st, &f->r, &W->result_id, e) != 0) return -1;
        l->slot[f->work] = f;
        W->state = f->r.status == STORE_STATUS_DONE ? LEDGER_WORK_DONE : LEDGER_WORK_FAILED;
        if (ledger_credit_lines(l, f->work, 1, e) != 0) return -1;
    }
    return 0;
}

/* Inside the transaction: builds the queued lines and stores their rows, scheduled (as completed) or READY
 * (order_input, then schedules every line whose predecessors are all scheduled). */
static int schedule_ready(ledger *l, struct err *e)
{
    for (size_t i = 0; i < l->n_ready; i++) {
        struct ledger_line *L = &l->lines[l->ready[i]];
        if (build_line(l, L, e) != 0) return -1;
        if (!l->p.order_input) {
            if (schedule_line(l, L, 1, e) != 0) return -1;
        } else {
            if (put_line_row(l, L, -1, e) != 0) return -1;
            L->state = LEDGER_LINE_READY;
        }
    }
    while (l->p.order_input && l->cursor < l->n_lines) {
        struct ledger_line *L = &l->lines[l->cursor];
        if (L->state == LEDGER_LINE_READY) {
            if (schedule_line(l, L, 0, e) != 0) return -1;
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
    double t0 = clock_now();
    if (store_begin(l->st, e) != 0) return -1;
    if (store_results(l, e) != 0) goto fail;
    double t1 = clock_now();
    if (schedule_ready(l, e) != 0) goto fail;
    double t2 = clock_now();
    if (store_commit(l->st, e) != 0) goto fail;
    double t3 = clock_now();
    /* Only now, after the commit, do the lines reach the files (invariant 2). */
    if (l->p.test_hook) l->p.test_hook("after_commit");
    if (write_scheduled(l, e) != 0) return -1;
    if (l->p.test_hook) l->p.test_hook("after_write");
    double t4 = clock_now();
    for (size_t i = 0; i < l->n_fin; i++) {
        l->slot[l->fin[i].work] = NULL;
        free_result(&l->fin[i].r);
    }
    l->n_fin = 0;
    l->n_ready = 0;
    l->t_store += (t1 - t0) + (t3 - t2);
    l->t_output += (t2 - t1) + (t4 - t3);
    if (l->p.debug_checks && ledger_check(l, e) != 0) return err_prefix(e, "after a commit");
    return 0;
fail:
    store_rollback(l->st);
    return -1;
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

/* Works: states and result rows; refs lists (n_refs_to[li] counts the refs naming line li). */
static int check_works(const ledger *l, uint32_t *n_refs_to, struct err *e)
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
        if (w < l->n_slot && l->slot[w]) return err_set(e, "ledger_check: work %zu has a slot outside a commit", w);
        uint32_t last = LEDGER_NO_REF;
        for (uint32_t r = W->ref_head; r != LEDGER_NO_REF; r = l->refs[r].next) {
            if (r >= l->n_refs || ++n_seen > l->n_refs) return err_set(e, "ledger_check: work %zu: bad refs list", w);
            uint32_t li = l->refs[r].line;
            if (li >= l->n_lines) return err_set(e, "ledger_check: work %zu: ref to line index %u", w, li);
            const struct ledger_line *L = &l->lines[li];
            int32_t k = 0;
            while (k < L->n && L->works[k] != w) k++;
            if (k == L->n)
                return err_set(e, "ledger_check: work %zu names line %lld, which does not need it", w,
                               (long long)L->no);
            n_refs_to[li]++;
            last = li;
        }
        if (last != W->owner)
            return err_set(e, "ledger_check: work %zu: its owner is not the first line needing it", w);
    }
    if (n_seen != l->n_refs)
        return err_set(e, "ledger_check: %zu of %zu refs are in no list", l->n_refs - n_seen, l->n_refs);
    return 0;
}

/* One line: its works and counts, its state against the ready list and the cursor; adds its length to
 * scheduled[file] when SCHEDULED. */
static int check_line(const ledger *l, size_t i, uint32_t n_refs, int queued, int64_t scheduled[2], struct err *e)
{
    const struct ledger_line *L = &l->lines[i];
    long long no = (long long)L->no;
    int32_t n_done = 0, n_failed = 0;
    if (L->state > LEDGER_LINE_SCHEDULED) return err_set(e, "ledger_check: line %lld: state %d", no, L->state);
    if (L->bad && L->n) return err_set(e, "ledger_check: line %lld is bad but needs works", no);
    if (n_refs != (uint32_t)L->n)
        return err_set(e, "ledger_check: line %lld needs %d works, %u refs name it", no, L->n, n_refs);
    for (int32_t k = 0; k < L->n; k++) {
        if (L->works[k] >= l->n_works) return err_set(e, "ledger_check: line %lld: bad work %u", no, L->works[k]);
        uint8_t s = l->works[L->works[k]].state;
        n_done += s == LEDGER_WORK_DONE;
        n_failed += s == LEDGER_WORK_FAILED;
    }
    if (n_done != L->n_done || n_failed != L->n_failed)
        return err_set(e, "ledger_check: line %lld counts %d done, %d failed; its works say %d, %d", no, L->n_done,
                       L->n_failed, n_done, n_failed);
    int file = ledger_line_file(L);
    if (queued != (L->state == LEDGER_LINE_WAITING && file >= 0))
        return err_set(e, "ledger_check: line %lld is %s, %sfinished and %squeued", no,
                       L->state == LEDGER_LINE_WAITING ? "waiting" : "built", file >= 0 ? "" : "not ",
                       queued ? "" : "not ");
    if (L->state == LEDGER_LINE_READY && (!l->p.order_input || !L->text || !L->row || L->file != file))
        return err_set(e, "ledger_check: line %lld is ready without its bytes, row or file", no);
    if (L->state == LEDGER_LINE_SCHEDULED) {
        if (L->text || !L->row || L->file != file)
            return err_set(e, "ledger_check: line %lld is scheduled with unwritten bytes, no row or the wrong file",
                           no);
        scheduled[L->file] += (int64_t)L->len;
    }
    if (l->p.order_input && i < l->cursor && L->state != LEDGER_LINE_SCHEDULED)
        return err_set(e, "ledger_check: line %lld is before the cursor but not scheduled", no);
    return 0;
}

int ledger_check(const ledger *l, struct err *e)
{
    uint8_t *queued = calloc(l->n_lines ? l->n_lines : 1, 1);
    uint32_t *n_refs_to = calloc(l->n_lines ? l->n_lines : 1, sizeof *n_refs_to);
    int64_t scheduled[2] = {0, 0};
    int rc = 0;
    if (!queued || !n_refs_to) rc = err_set(e, "ledger_check: out of memory");
    for (size_t k = 0; rc == 0 && k < l->n_ready; k++) {
        if (l->ready[k] >= l->n_lines || queued[l->ready[k]]++)
            rc = err_set(e, "ledger_check: ready list entry %zu: bad or repeated line index %u", k, l->ready[k]);
    }
    if (rc == 0) rc = check_works(l, n_refs_to, e);
    for (size_t i = 0; rc == 0 && i < l->n_lines; i++) rc = check_line(l, i, n_refs_to[i], queued[i], scheduled, e);
    for (int f = 0; rc == 0 && f < 2; f++) {
        if (scheduled[f] != l->out_end[f])
            rc = err_set(e, "ledger_check: file %d: scheduled lines end at %lld, out_end is %lld", f,
                         (long long)scheduled[f], (long long)l->out_end[f]);
        else if (l->wbuf[f].n)
            rc = err_set(e, "ledger_check: file %d: %zu bytes left in the write buffer", f, l->wbuf[f].n);
        else if (l->out[f] && output_size(l->out[f]) != l->out_end[f])
            rc = err_set(e, "ledger_check: file %d is %lld bytes, its scheduled lines end at %lld", f,
                         (long long)output_size(l->out[f]), (long long)l->out_end[f]);
    }
    free(queued);
    free(n_refs_to);
    return rc;
}
