/* reconcile — see reconcile.h. */
#include "jobs/reconcile.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* State of the scan over the store's line rows. */
struct scan {
    ledger *l;
    int64_t *del;        /* ids of the stale rows */
    size_t n_del, cap_del;
    int touched[2];      /* a scheduled row of this file is stale: its offsets must be compacted */
    int oom;
};

static void status_cb(void *user, int64_t id, const uint8_t key[32], int status)
{
    ledger *l = user;
    int64_t w = plan_keymap_find(l->keys, key);
    if (w >= 0) ledger_mark_stored(l, (uint32_t)w, status, id);
}

static int row_cb(void *user, const struct store_line *row)
{
    struct scan *s = user;
    ledger *l = s->l;
    int64_t li = ledger_find_line(l, row->line);
    struct ledger_line *L = li >= 0 ? &l->lines[li] : NULL;
    int valid = L && L->digest == ledger_digest_head(row->digest) && row->off >= 0 &&
                ledger_line_file(L) == row->file && L->state == LEDGER_LINE_WAITING && row->len <= UINT32_MAX;
    if (valid) {
        L->state = LEDGER_LINE_SCHEDULED;
        L->file = (uint8_t)row->file;
        l->n_committed[L->file]++;
        L->len = (uint32_t)row->len;
        return 0;
    }
    if (s->n_del == s->cap_del) {
        size_t cap = s->cap_del ? 2 * s->cap_del : 256;
        int64_t *p = realloc(s->del, cap * sizeof *p);
        if (!p) {
            s->oom = 1;
            return 1;
        }
        s->del = p;
        s->cap_del = cap;
    }
    s->del[s->n_del++] = row->id;
    if (row->off >= 0 && (row->file == 0 || row->file == 1)) s->touched[row->file] = 1;
    return 0;
}

/* The store part, in one transaction: works done, stale rows deleted, offsets compacted. */
static int reconcile_store(ledger *l, int retry_failed, struct reconcile_stats *st, struct err *e)
{
    struct scan s;
    memset(&s, 0, sizeof s);
    s.l = l;
    if (store_begin(l->st, e) != 0) goto fail_open;
    if (retry_failed && store_delete_failed(l->st, &st->failed_requeued, e) != 0) goto fail;
    if (store_foreach_status(l->st, status_cb, l, e) != 0) goto fail;
    for (size_t w = 0; w < l->n_works; w++) {
        if (l->works[w].state == LEDGER_WORK_PENDING) continue;
        st->works_stored++;
        ledger_credit_lines(l, (uint32_t)w, 0, e);
    }
    if (store_foreach_line(l->st, row_cb, &s, e) != 0) goto fail;
    if (s.oom) {
        err_set(e, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < s.n_del; i++)
        if (store_delete_line(l->st, s.del[i], e) != 0) goto fail;
    for (int f = 0; f < 2; f++) {
        int64_t end;
        if (s.touched[f] && store_compact_offsets(l->st, f, &end, e) != 0) goto fail;
    }
    if (store_commit(l->st, e) != 0) goto fail;
    st->stale_rows = (int64_t)s.n_del;
    if (s.n_del) log_info("store: %zu line rows were stale (settings, backlog or retried keys changed)", s.n_del);
    if (st->failed_requeued) log_info("--retry-failed: %lld failed keys queued again", (long long)st->failed_requeued);
    free(s.del);
    return 0;
fail:
    store_rollback(l->st);
fail_open:
    free(s.del);
    return -1;
}

int reconcile_run(ledger *l, int retry_failed, struct reconcile_stats *st, struct err *e)
{
    memset(st, 0, sizeof *st);
    if (reconcile_store(l, retry_failed, st, e) != 0) return -1;
    for (int f = 0; f < 2; f++) {
        struct output_repair_stats *rs = &st->files[f];
        if (output_repair(l->out[f], l->st, f, rs, e) != 0) return -1;
        l->out_end[f] = output_size(l->out[f]);
        if (rs->lines_rewritten || rs->bytes_cut)
            log_info("%s: repaired from the store: %lld lines kept, %lld written again, %lld stray bytes cut",
                     output_path(l->out[f]), (long long)rs->lines_kept, (long long)rs->lines_rewritten,
                     (long long)rs->bytes_cut);
    }
    /* lines finished before (or bad) but not yet in a file go out with the first commit */
    for (size_t i = 0; i < l->n_lines; i++)
        if (l->lines[i].state == LEDGER_LINE_WAITING && ledger_line_file(&l->lines[i]) >= 0 &&
            ledger_queue_line(l, (uint32_t)i, e) != 0)
            return -1;
    return 0;
}

json_t *reconcile_stats_json(const struct reconcile_stats *st)
{
    json_t *rep = json_object();
    for (int f = 0; f < 2; f++) {
        const struct output_repair_stats *rs = &st->files[f];
        json_object_set_new(rep, f ? "errors" : "results",
                            json_pack("{s:I, s:I, s:I}", "lines_kept", (json_int_t)rs->lines_kept, "lines_rewritten",
                                      (json_int_t)rs->lines_rewritten, "bytes_cut", (json_int_t)rs->bytes_cut));
    }
    json_object_set_new(rep, "stale_rows_dropped", json_integer((json_int_t)st->stale_rows));
    json_object_set_new(rep, "failed_keys_requeued", json_integer((json_int_t)st->failed_requeued));
    return rep;
}
