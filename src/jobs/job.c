/* job — see job.h. This file is the run itself: it wires the jobs modules together and drives the engine.
 *
 *   1. read    jobs/ingest     backlog -> ledger: lines, works (one per unique key), bad lines
 *   2. store   jobs/settings   the store is bound to this run's settings
 *              jobs/reconcile  ledger, store and output files made to agree; what is done is skipped
 *   3. plan    jobs/plan       the pending works in submission order
 *   4. run     run_engine      works fed to the engine; its results handed to the ledger, which commits
 *                              them (ledger_commit_and_write) at most every commit_interval seconds and at
 *                              the end, and only then writes their lines
 *   5. record  jobs/record
 *
 * Invariant of the engine loop: in_engine = works submitted and not yet taken back, at most 2 * max_seqs;
 * every result taken back is handed to the ledger at once. The ledger's invariants (ledger_check) are
 * checked at the end of every run, and after every commit when the engine runs with debug_checks.
 */
#include "jobs/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs/ingest.h"
#include "jobs/ledger.h"
#include "jobs/output.h"
#include "jobs/reconcile.h"
#include "jobs/record.h"
#include "jobs/settings.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct job {
    const struct job_config *c;
    const struct job_model *m;
    struct job_summary *sum;
    ledger book;
    store *st;            /* owned; the ledger borrows it */
    output_file *out[2];  /* owned, by enum store_file; the ledger borrows them */
    int64_t n_pending_start, n_done_run, n_failed_run;
    double *latency;      /* (n_pending_start) seconds from engine_add to the result, per finished work */
    size_t n_latency;
    double t_commit_last;
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

/* --- 1. read --- */

static int read_backlog(job *j, struct err *e)
{
    struct ingest_stats st;
    if (ingest_backlog(j->c, j->m, &j->book, &st, &j->backlog_json, e) != 0) return -1;
    j->sum->lines = (int64_t)j->book.n_lines;
    j->sum->work_total = (int64_t)j->book.n_works;
    j->sum->input_errors = st.bad_lines;
    j->sum->folded_duplicates = st.folded_duplicates;
    j->sum->interrupted = st.interrupted;
    return 0;
}

/* --- 2. store --- */

/* Opens the store and the output files, binds the store to the settings, and reconciles. */
static int open_store(job *j, struct err *e)
{
    const struct job_config *c = j->c;
    if (store_open(c->store, c->durability, &j->st, e) != 0) return -1;
    if (settings_bind_store(j->st, c, j->m, e) != 0) return -1;
    const char *paths[2] = {c->output, c->errors};
    for (int f = 0; f < 2; f++)
        if (output_open(paths[f], &j->out[f], e) != 0) return -1;
    j->book.st = j->st;
    j->book.out[0] = j->out[0];
    j->book.out[1] = j->out[1];
    struct reconcile_stats rs;
    if (reconcile_run(&j->book, c->retry_failed, &rs, e) != 0) return -1;
    if (j->book.p.debug_checks && ledger_check(&j->book, e) != 0) return err_prefix(e, "after reconcile");
    j->sum->work_skipped_done = rs.works_stored;
    for (int f = 0; f < 2; f++) {
        j->sum->repaired.lines_rewritten += rs.files[f].lines_rewritten;
        j->sum->repaired.bytes_cut += rs.files[f].bytes_cut;
    }
    j->repair_json = reconcile_stats_json(&rs);
    return 0;
}

/* --- 3. plan --- */

/* The pending works in submission order (jobs/plan); prompts that no pending work needs are freed. */
static int plan_work(job *j, uint32_t **order, size_t *n_order, struct err *e)
{
    const ledger *l = &j->book;
    struct plan_item *items = calloc(l->n_works ? l->n_works : 1, sizeof *items);
    if (!items) return err_set(e, "out of memory");
    for (size_t w = 0; w < l->n_works; w++) {
        if (l->works[w].state != LEDGER_WORK_PENDING) continue;
        const struct ledger_line *L = &l->lines[l->works[w].owner];
        items[w] = (struct plan_item){L->prompt, L->n_prompt};
    }
    int rc = plan_order_pending(items, l->n_works, j->m->ep.kv_block, j->c->sort, order, n_order, e);
    free(items);
    if (rc != 0) return -1;
    ledger_drop_idle_prompts(&j->book);
    j->n_pending_start = (int64_t)*n_order;
    j->latency = malloc((*n_order ? *n_order : 1) * sizeof *j->latency);
    if (!j->latency) return err_set(e, "out of memory");
    return 0;
}

/* --- 4. run --- */

/* Hands every result the engine has finished to the ledger, and counts it. */
static int take_results(job *j, struct err *e)
{
    struct engine_result r;
    while (engine_take(j->m->eng, &r)) {
        int ok = r.finish == ENGINE_FINISH_STOP || r.finish == ENGINE_FINISH_LENGTH;
        struct store_result sr;
        memset(&sr, 0, sizeof sr);
        sr.status = ok ? STORE_STATUS_DONE : STORE_STATUS_FAILED;
        sr.finish = (int32_t)r.finish;
        sr.text = r.text;
        sr.text_len = r.text_len;
        r.text = NULL;
        sr.n_prompt = r.n_prompt;
        sr.n_gen = r.n_tokens;
        sr.n_cached = r.n_prompt_cached;
        if (!ok) {
            sr.error = r.error ? r.error : strdup(r.finish == ENGINE_FINISH_CANCELLED ? "cancelled" : "failed");
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
        uint32_t w = (uint32_t)r.id;
        engine_result_free(&r);
        if (ledger_add_result(&j->book, w, &sr, e) != 0) return -1;
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
    ps->lookup = j->m->ep.lookup > 0;
    ps->draft_acceptance = es.draft_tokens ? (double)es.draft_accepted / (double)es.draft_tokens : 0;
    ps->tokens_per_step = es.seq_steps ? (double)es.gen_tokens / (double)es.seq_steps : 1.0;
}

/* Submits works from order[*next] on while fewer than limit are in the engine. */
static int submit_works(job *j, const uint32_t *order, size_t n_order, size_t *next, int64_t *in_engine,
                        struct err *e)
{
    int32_t limit = 2 * j->m->ep.max_seqs; /* requests in the engine: max_seqs running, as many queued */
    while (*next < n_order && *in_engine < limit) {
        uint32_t w = order[(*next)++];
        struct engine_request rq;
        ingest_work_request(&j->book, w, &rq);
        if (engine_add(j->m->eng, &rq, e) != 0) return -1;
        ledger_mark_queued(&j->book, w);
        (*in_engine)++;
    }
    return 0;
}

static int run_engine(job *j, const uint32_t *order, size_t n_order, struct err *e)
{
    engine *eng = j->m->eng;
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
        if (submit_works(j, order, n_order, &next, &in_engine, e) != 0) goto fail;
        int64_t before = j->n_done_run;
        if (!engine_has_work(eng)) {
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
        if (take_results(j, e) != 0) goto fail;
        in_engine -= j->n_done_run - before;
        if (ledger_n_uncommitted(&j->book) && t1 - j->t_commit_last >= j->c->commit_interval) {
            if (ledger_commit_and_write(&j->book, e) != 0) goto fail;
            j->t_commit_last = clock_now();
        }
        if (pg) {
            snapshot(j, &ps);
            progress_update(pg, &ps, t1);
        }
    }
    if (take_results(j, e) != 0 || ledger_commit_and_write(&j->book, e) != 0) goto fail;
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

/* After the engine: checks the ledger, syncs the files, counts where the lines went. */
static int finish_files(job *j, struct err *e)
{
    struct job_summary *sum = j->sum;
    if (ledger_check(&j->book, e) != 0) return -1;
    for (int f = 0; f < 2; f++)
        if (output_sync(j->out[f], e) != 0) return -1;
    ledger_count_lines(&j->book, &sum->lines_ok, &sum->lines_failed, &sum->engine_errors);
    if (!sum->interrupted && sum->lines_ok + sum->lines_failed != sum->lines)
        return err_set(e, "%lld of %lld lines did not reach a file (bug)",
                       (long long)(sum->lines - sum->lines_ok - sum->lines_failed), (long long)sum->lines);
    sum->t_store += j->book.t_store;
    sum->t_output += j->book.t_output;
    return 0;
}

/* --- 5. record --- */

static int write_record(job *j, int64_t t_start_unix, const struct record_energy *energy, struct err *e)
{
    struct engine_stats es;
    engine_get_stats(j->m->eng, &es);
    struct record_run rr = {j->c, j->m, j->sum, &es, j->latency, j->n_latency, j->backlog_json, j->repair_json,
                            t_start_unix, energy};
    json_t *rec = record_build(&rr);
    int rc = record_write(j->c->record, rec, e);
    json_decref(rec);
    return rc;
}

/* --- the whole run --- */

int job_run(const struct job_config *c, const struct job_model *m, struct job_summary *sum, struct err *e)
{
    memset(sum, 0, sizeof *sum);
    double t_start = clock_now();
    int64_t t_start_unix = (int64_t)time(NULL);
    struct record_energy energy;
    record_energy_start(&energy, m->backend_gpu);
    job J;
    memset(&J, 0, sizeof J);
    job *j = &J;
    j->c = c;
    j->m = m;
    j->sum = sum;
    uint32_t *order = NULL;
    size_t n_order = 0;
    int rc = -1;
    struct ledger_params lp = {m->name, c->order_input, m->ep.debug_checks, c->test_hook};
    if (ledger_init(&j->book, &lp, e) != 0) goto done;

    if (read_backlog(j, e) != 0) goto done;
    if (sum->interrupted) {
        rc = 0;
        goto done;
    }
    double t_read = clock_now();
    sum->t_parse = t_read - t_start;

    if (open_store(j, e) != 0) goto done;
    double t_rec = clock_now();
    sum->t_store += t_rec - t_read;

    if (plan_work(j, &order, &n_order, e) != 0) goto done;
    sum->t_plan = clock_now() - t_rec;
    log_info("%lld lines: %lld unique requests, %lld already done, %zu to run, %lld folded duplicates, %lld bad lines",
             (long long)sum->lines, (long long)sum->work_total, (long long)sum->work_skipped_done, n_order,
             (long long)sum->folded_duplicates, (long long)sum->input_errors);

    /* the first commit writes what is already known (bad lines, lines done before) */
    if (ledger_commit_and_write(&j->book, e) != 0) goto done;
    if (run_engine(j, order, n_order, e) != 0) goto done;
    if (finish_files(j, e) != 0) goto done;
    sum->wall_s = clock_now() - t_start;
    sum->gen_tok_s = sum->wall_s > 0 ? (double)sum->gen_tokens / sum->wall_s : 0;
    sum->prompt_tok_s = sum->wall_s > 0 ? (double)sum->prompt_tokens / sum->wall_s : 0;
    if (c->record && write_record(j, t_start_unix, &energy, e) != 0) goto done;
    rc = 0;
done:
    record_energy_stop(&energy);
    ledger_free(&j->book);
    free(j->latency);
    free(order);
    output_close(j->out[0]);
    output_close(j->out[1]);
    store_close(j->st);
    json_decref(j->backlog_json);
    json_decref(j->repair_json);
    return rc;
}
