/* job — see job.h. This file is the run itself: it wires the jobs modules together and drives the engine.
 *
 *   1. read    jobs/ingest     backlog -> ledger: lines, works (one per unique key), bad lines
 *   2. store   jobs/settings   the store is bound to this run's settings
 *              jobs/reconcile  ledger, store and output files made to agree; what is done is skipped
 *   3. plan    jobs/plan       the pending works in submission order
 *   4. run     run_engine      works fed to the engine (each read again from the backlog by offset:
 *                              jobs/ingest); its results handed to the ledger, which commits
 *                              them (ledger_commit_and_write) at most every commit_interval seconds and at
 *                              the end, and only then writes their lines
 *   5. record  jobs/record
 *
 * Invariant of the engine loop: in_engine = works submitted to rank 0's own engine and not yet taken back,
 * at most 2 * max_seqs; every result taken back, from the engine or from another rank (jobs/dist), is handed
 * to the ledger at once; feed.n_left = works of the plan not yet handed out, to rank 0 or another rank.
 * feed.n_held_self = in_engine whenever jobs/dist may look. Every work handed out and not yet back holds one
 * entry of the flight table (its engine request id is the entry's index): the work and its full key, which
 * the book does not keep (jobs/ledger.h, "Memory"); so the table is as long as the most works ever out. The
 * ledger's invariants (ledger_check) are checked at the end of every run, and after every commit when the
 * engine runs with debug_checks.
 */
#include "jobs/job.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>

#include "jobs/embedding.h"
#include "jobs/ingest.h"
#include "jobs/ledger.h"
#include "jobs/monitor.h"
#include "jobs/output.h"
#include "jobs/reconcile.h"
#include "jobs/record.h"
#include "jobs/settings.h"
#include "util/clock.h"
#include "util/log.h"

enum { JOB_LATENCY_SAMPLES = 1 << 16 };

/* A work handed out (to rank 0's engine or another rank) and not yet back. */
struct flight {
    uint32_t work;
    uint8_t key[32]; /* its full key: the result is stored under it */
    int32_t logprobs; /* the request's logprobs (-1: none), ... */
    uint8_t chat, echo; /* ... endpoint and echo: how its result is stored (output_result_text) */
};

typedef struct job {
    const struct job_config *c;
    const struct job_model *m;
    struct job_summary *sum;
    ledger book;
    ingest_source *src;   /* owned: reads lines again (prompts when submitted, ids when lines are built) */
    store *st;            /* owned; the ledger borrows it */
    output_file *out[2];  /* owned, by enum store_file; the ledger borrows them */
    int64_t n_pending_start, n_done_run, n_failed_run;
    struct flight *flight; /* (cap_flight) by engine request id */
    uint32_t *free_flight; /* (n_free) unused entries of flight */
    size_t cap_flight, n_free;
    struct ingest_request cur; /* the request feed_next made last (jobs/dist reads it until the next call) */
    double *latency;      /* (JOB_LATENCY_SAMPLES) seconds from engine_add to the result: a uniform sample of
                             every finished work's (reservoir sampling), so memory stays fixed */
    size_t n_latency;
    int64_t n_latency_seen;
    uint64_t latency_rng;
    double t_commit_last;
    uint64_t defaults_used; /* genparam rows whose default some line fell back to (ingest_stats) */
    json_t *backlog_json; /* backlog facts for the record */
    json_t *repair_json;  /* what reconcile did, for the record */
    const uint32_t *order; /* (n_order) the plan */
    size_t n_order;
    struct dist_feed feed; /* the plan's cursor: order[n_order - feed.n_left] is next */
    struct dist_rank_stats self; /* rank 0's own engine's figures (MPI runs) */
    struct monitor *mon;  /* the time series and the memory watchdog (jobs/monitor); NULL before the engine */
    int mirror_fd;        /* config.mirror: the output file read back (-1: none) */
    int64_t mirror_off;   /* bytes of the output file already written to config.mirror */
    double t_drain;       /* when config.drain was first seen set (0: not yet) */
    struct runtime_seqs seqs; /* the running sequences of this run (choose_seqs) */
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
    c.retest_after_days = 90;
    c.sample_interval = 5;
    c.watchdog = 1;
    c.drain_s = 5;
    return c;
}

/* --- 0. paths --- */

/* One path the run writes: see job_check_paths. */
static int check_path(const char *flag, const char *path, struct err *e)
{
    struct stat st;
    if (!path || !*path) return err_set(e, "%s: an empty path", flag);
    size_t n = strlen(path);
    if (path[n - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return err_set(e, "%s %s: is a directory; give a file path (e.g. %s%sresults.jsonl)", flag, path, path,
                       path[n - 1] == '/' ? "" : "/");
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) return err_set(e, "%s %s: not a regular file", flag, path);
        if (access(path, W_OK) != 0) return err_set(e, "%s %s: cannot write it: %s", flag, path, strerror(errno));
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &st) != 0) return err_set(e, "%s %s: its directory %s: %s", flag, path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return err_set(e, "%s %s: %s is not a directory", flag, path, dir);
    if (access(dir, W_OK) != 0)
        return err_set(e, "%s %s: cannot create files in %s: %s", flag, path, dir, strerror(errno));
    return 0;
}

/* The backlog: a regular file (see job_check_paths). */
static int check_backlog(const char *path, struct err *e)
{
    static const char why[] = "a backlog must be a regular file: the run reads its lines again by offset, and a "
                              "resumed run reads it again";
    struct stat st;
    if (!path || !*path) return err_set(e, "no backlog given");
    if (!strcmp(path, "-"))
        return err_set(e, "backlog -: standard input must be saved to a regular file first (%s; jobs/spool does it)",
                       why);
    if (stat(path, &st) != 0) return err_set(e, "backlog %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return 0;
    const char *what = S_ISDIR(st.st_mode)                         ? "a directory"
                       : S_ISFIFO(st.st_mode)                      ? "a pipe"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                      ? "a socket"
                                                                   : "not a regular file";
    return err_set(e, "backlog %s: is %s; %s (give a stream as standard input instead: nightshift run - < ...)", path,
                   what, why);
}

int job_check_paths(const struct job_config *c, struct err *e)
{
    return check_backlog(c->backlog, e) != 0 ? -1 : job_check_outputs(c, e);
}

int job_check_outputs(const struct job_config *c, struct err *e)
{
    if (check_path("-o", c->output, e) || check_path("--errors", c->errors, e) || check_path("--store", c->store, e))
        return -1;
    return c->record ? check_path("--record", c->record, e) : 0;
}

/* --- 1. read --- */

static int read_backlog(job *j, struct err *e)
{
    struct ingest_stats st;
    if (ingest_backlog(j->c, j->m, &j->book, &st, &j->backlog_json, &j->src, e) != 0) return -1;
    j->sum->lines = (int64_t)j->book.n_lines;
    j->sum->work_total = (int64_t)j->book.n_works;
    j->sum->input_errors = st.bad_lines;
    j->sum->folded_duplicates = st.folded_duplicates;
    j->sum->requests = st.requests;
    j->sum->distinct_requests = st.distinct_requests;
    j->sum->completions = st.completions;
    j->sum->interrupted = st.interrupted;
    j->defaults_used = st.defaults_used;
    return 0;
}

/* --- 2. store --- */

/* config.on_commit: what the store holds now. */
static void tell_committed(const job *j)
{
    int64_t ok, failed;
    if (!j->c->on_commit) return;
    ledger_count_committed(&j->book, &ok, &failed);
    j->c->on_commit(j->c->on_commit_ctx, ok, failed);
}

/* Opens the store and the output files, binds the store to the settings, and reconciles. */
static int open_store(job *j, struct err *e)
{
    const struct job_config *c = j->c;
    const char *paths[2] = {c->output, c->errors};
    for (int f = 0; f < 2; f++) /* first: their locks say whether another run writes them */
        if (output_open(paths[f], &j->out[f], e) != 0) return -1;
    if (store_open(c->store, c->durability, &j->st, e) != 0) return -1;
    if (settings_bind_store(j->st, c, j->m, j->defaults_used, e) != 0) return -1;
    j->book.st = j->st;
    j->book.out[0] = j->out[0];
    j->book.out[1] = j->out[1];
    struct reconcile_stats rs;
    if (reconcile_run(&j->book, c->retry_failed, &rs, e) != 0) return -1;
    plan_keymap_drop_index(j->book.keys); /* no key is looked up from here on: its slots go (~8 bytes a work) */
    if (j->book.p.debug_checks && ledger_check(&j->book, e) != 0) return err_prefix(e, "after reconcile");
    tell_committed(j);
    j->sum->work_skipped_done = rs.works_stored;
    for (int f = 0; f < 2; f++) {
        j->sum->repaired.lines_rewritten += rs.files[f].lines_rewritten;
        j->sum->repaired.bytes_cut += rs.files[f].bytes_cut;
    }
    j->repair_json = reconcile_stats_json(&rs);
    return 0;
}

/* --- 3. plan --- */

/* The pending works in submission order (jobs/plan, from the works' plan summaries), and the latency
 * sample. */
static int plan_work(job *j, uint32_t **order, size_t *n_order, struct err *e)
{
    const ledger *l = &j->book;
    size_t m = 0;
    for (size_t w = 0; w < l->n_works; w++) m += l->works[w].state == LEDGER_WORK_PENDING;
    *order = malloc((m ? m : 1) * sizeof **order);
    if (!*order) return err_set(e, "out of memory");
    *n_order = 0;
    for (size_t w = 0; w < l->n_works; w++)
        if (l->works[w].state == LEDGER_WORK_PENDING) (*order)[(*n_order)++] = (uint32_t)w;
    if (m && plan_order(&l->works[0].plan, sizeof l->works[0], *order, m, j->c->sort, e) != 0) return -1;
    j->n_pending_start = (int64_t)m;
    j->latency = malloc(JOB_LATENCY_SAMPLES * sizeof *j->latency);
    if (!j->latency) return err_set(e, "out of memory");
    j->latency_rng = 0x9e3779b97f4a7c15ull;
    return 0;
}

/* The blocks each planned work needs in the KV pool (plan_kv_blocks), in planned order; NULL when out of
 * memory. */
static uint32_t *plan_blocks(const job *j)
{
    const ledger *l = &j->book;
    uint32_t *blocks = malloc((j->n_order ? j->n_order : 1) * sizeof *blocks);
    if (!blocks) return NULL;
    for (size_t i = 0; i < j->n_order; i++) {
        const struct ledger_work *W = &l->works[j->order[i]], *P = i ? &l->works[j->order[i - 1]] : NULL;
        int64_t b = plan_kv_blocks(&W->plan, P ? &P->plan : NULL, ledger_gen_tokens(W->gen_units), j->m->ep.kv_block);
        blocks[i] = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
    }
    return blocks;
}

/* j->seqs: the runtime's choice as given; with auto, chosen again from the plan (the backlog's own lengths
 * in planned order, up to the knee), the engine capped at it and the choice logged. Not with config.engine
 * (the engine is another's). */
static int choose_seqs(job *j, struct err *e)
{
    const struct job_model *m = j->m;
    j->seqs = m->seqs;
    if (!j->seqs.n) j->seqs.n = m->ep.max_seqs; /* zeroed: given */
    if (!m->seqs.automatic || j->c->engine) return 0;
    uint32_t *blocks = plan_blocks(j);
    if (!blocks) return err_set(e, "out of memory");
    struct plan_fit f = plan_max_seqs(blocks, j->n_order, m->ep.kv_blocks, m->seqs.knee);
    free(blocks);
    int64_t per_seq = f.window_seqs ? f.window_blocks * m->ep.kv_block / f.window_seqs : 0;
    runtime_seqs_fit(&j->seqs, f.n, per_seq, "at the backlog's lengths in planned order");
    j->seqs.n = engine_set_max_seqs(m->eng, j->seqs.n);
    char why[256];
    uint64_t kv_bytes =
        (uint64_t)m->ep.kv_blocks * (uint64_t)m->ep.kv_block * model_kv_bytes_per_token(m->hp, m->ep.kv_type);
    runtime_describe_seqs(&j->seqs, m->backend, kv_bytes, why, sizeof why);
    log_info("%s", why);
    return 0;
}

/* Keeps a uniform sample of the latencies (reservoir sampling on a fixed xorshift stream). */
static void note_latency(job *j, double seconds)
{
    int64_t i = j->n_latency_seen++;
    if (j->n_latency < JOB_LATENCY_SAMPLES) {
        j->latency[j->n_latency++] = seconds;
        return;
    }
    uint64_t x = j->latency_rng;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    j->latency_rng = x;
    uint64_t k = x % (uint64_t)(i + 1);
    if (k < JOB_LATENCY_SAMPLES) j->latency[k] = seconds;
}

/* An unused flight entry (the table grows as more works are out at once); UINT32_MAX when out of memory. */
static uint32_t flight_take(job *j)
{
    if (!j->n_free) {
        size_t cap = j->cap_flight ? 2 * j->cap_flight : 256;
        struct flight *f = realloc(j->flight, cap * sizeof *f);
        if (f) j->flight = f;
        uint32_t *fr = f ? realloc(j->free_flight, cap * sizeof *fr) : NULL;
        if (!fr) return UINT32_MAX;
        j->free_flight = fr;
        for (size_t i = cap; i > j->cap_flight; i--) {
            j->flight[i - 1].work = UINT32_MAX; /* free */
            j->free_flight[j->n_free++] = (uint32_t)(i - 1);
        }
        j->cap_flight = cap;
    }
    return j->free_flight[--j->n_free];
}

/* --- 4. run --- */

/* The engine calls, through config.engine when it is set. */
static int eng_add(job *j, const struct engine_request *rq, struct err *e)
{
    const struct job_engine *x = j->c->engine;
    return x ? x->add(x->ctx, rq, e) : engine_add(j->m->eng, rq, e);
}

static int eng_step(job *j, struct err *e)
{
    const struct job_engine *x = j->c->engine;
    return x ? x->step(x->ctx, e) : engine_step(j->m->eng, e);
}

static int eng_has_work(job *j)
{
    const struct job_engine *x = j->c->engine;
    return x ? x->has_work(x->ctx) : engine_has_work(j->m->eng);
}

static int eng_take(job *j, struct engine_result *out)
{
    const struct job_engine *x = j->c->engine;
    return x ? x->take(x->ctx, out) : engine_take(j->m->eng, out);
}

static void eng_stats(job *j, struct engine_stats *st)
{
    const struct job_engine *x = j->c->engine;
    if (x)
        x->get_stats(x->ctx, st);
    else
        engine_get_stats(j->m->eng, st);
}

/* Appends the text of token id (as the completion's text has it: control tokens give nothing). */
/* Hands one result (rank 0's own or another rank's) to the ledger, and counts it; takes r's memory. */
static int hand_in(job *j, struct engine_result *r, struct err *e)
{
    if (r->id >= j->cap_flight || j->flight[r->id].work == UINT32_MAX) {
        engine_result_free(r);
        return err_set(e, "a result for unknown request %llu (bug)", (unsigned long long)r->id);
    }
    int ok = r->finish == ENGINE_FINISH_STOP || r->finish == ENGINE_FINISH_LENGTH;
    /* an embedding is stored as its text; a completion with echo or logprobs as output_result_text makes it */
    const struct flight *fl = &j->flight[r->id];
    if (embedding_result_to_text(r) != 0 || (ok && output_result_text(j->m->vocab, fl->echo, fl->logprobs, r) != 0)) {
        engine_result_free(r);
        return err_set(e, "out of memory");
    }
    struct store_result sr;
    memset(&sr, 0, sizeof sr);
    sr.status = ok ? STORE_STATUS_DONE : STORE_STATUS_FAILED;
    sr.finish = (int32_t)r->finish;
    sr.text = r->text;
    sr.text_len = r->text_len;
    r->text = NULL;
    sr.n_prompt = r->n_prompt;
    sr.n_gen = r->n_tokens;
    sr.n_cached = r->n_prompt_cached;
    if (!ok) {
        sr.error = r->error ? r->error : strdup(r->finish == ENGINE_FINISH_CANCELLED ? "cancelled" : "failed");
        r->error = NULL;
        j->n_failed_run++;
        j->sum->work_failed++;
    }
    j->n_done_run++;
    j->sum->work_computed++;
    j->sum->prompt_tokens += r->n_prompt;
    j->sum->prompt_tokens_cached += r->n_prompt_cached;
    j->sum->gen_tokens += r->n_tokens;
    note_latency(j, r->t_finished - r->t_added);
    struct flight *f = &j->flight[r->id];
    uint32_t w = f->work;
    memcpy(sr.key, f->key, 32);
    f->work = UINT32_MAX;
    j->free_flight[j->n_free++] = (uint32_t)r->id;
    engine_result_free(r);
    return ledger_add_result(&j->book, w, &sr, e);
}

/* Hands every result rank 0's engine has finished to the ledger; *n_taken = how many. */
static int take_results(job *j, int64_t *n_taken, struct err *e)
{
    struct engine_result r;
    *n_taken = 0;
    while (eng_take(j, &r)) {
        struct dist_rank_stats *me = &j->self;
        me->requests++;
        me->prompt_tokens += r.n_prompt;
        me->prompt_tokens_cached += r.n_prompt_cached;
        me->gen_tokens += r.n_tokens;
        (*n_taken)++;
        if (hand_in(j, &r, e) != 0) return -1;
    }
    return 0;
}

/* The feed's callbacks (jobs/dist): the next work of the plan, read again from the backlog and marked
 * queued, under a flight entry (the request's id); another rank's result. */
static int feed_next(void *ctx, struct engine_request *rq, struct err *e)
{
    job *j = ctx;
    uint32_t w = j->order[j->n_order - j->feed.n_left];
    ingest_request_free(&j->cur);
    if (ingest_work_request(j->src, w, &j->cur, e) != 0) return -1;
    uint32_t slot = flight_take(j);
    if (slot == UINT32_MAX) return err_set(e, "out of memory");
    j->flight[slot].work = w;
    memcpy(j->flight[slot].key, j->cur.key, 32);
    j->flight[slot].chat = j->cur.it.kind == INPUT_KIND_CHAT;
    j->flight[slot].echo = j->cur.it.kind == INPUT_KIND_COMPLETION && j->cur.it.gen.echo;
    j->flight[slot].logprobs = j->cur.it.kind == INPUT_KIND_EMBEDDING ? -1 : j->cur.it.gen.logprobs;
    *rq = j->cur.rq;
    rq->id = slot;
    ledger_mark_queued(&j->book, w);
    return 0;
}

static int feed_result(void *ctx, struct engine_result *r, struct err *e) { return hand_in(ctx, r, e); }

static void snapshot(job *j, struct progress_snapshot *ps)
{
    struct engine_stats es;
    eng_stats(j, &es);
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

/* Submits the plan's next works to rank 0's own engine while fewer than limit are in it. Under MPI, rank 0
 * takes its work as the other ranks do: when it holds at most max_seqs, a chunk by jobs/dist's rule
 * (dist_chunk). */
static int submit_works(job *j, int64_t *in_engine, struct err *e)
{
    int32_t limit = 2 * j->seqs.n; /* requests in the engine: max_seqs running, as many queued */
    if (j->c->dist && *in_engine > j->seqs.n) return 0;
    j->feed.n_held_self = *in_engine;
    for (int64_t n = dist_chunk(j->c->dist, &j->feed, *in_engine, limit - *in_engine); n > 0; n--) {
        struct engine_request rq;
        if (feed_next(j, &rq, e) != 0) return -1;
        j->feed.n_left--;
        if (eng_add(j, &rq, e) != 0) return -1;
        (*in_engine)++;
    }
    j->feed.n_held_self = *in_engine;
    return 0;
}

/* config.mirror: the output file's bytes not yet copied, copied (they are whole lines: the ledger wrote them
 * after their commit). */
static int mirror_new(job *j, struct err *e)
{
    if (!j->c->mirror) return 0;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = pread(j->mirror_fd, buf, sizeof buf, (off_t)j->mirror_off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return err_set(e, "-o %s: reading it back: %s", j->c->output, strerror(errno));
        if (n == 0) break;
        if (fwrite(buf, 1, (size_t)n, j->c->mirror) != (size_t)n)
            return err_set(e, "writing the results out: %s", strerror(errno));
        j->mirror_off += n;
    }
    if (fflush(j->c->mirror) != 0) return err_set(e, "writing the results out: %s", strerror(errno));
    return 0;
}

/* Commits what is handed in, writes its lines (ledger_commit_and_write) and copies them to config.mirror. */
static int commit_write(job *j, struct err *e)
{
    if (ledger_commit_and_write(&j->book, e) != 0) return -1;
    tell_committed(j);
    return mirror_new(j, e);
}

/* Commits what is handed in when the commit interval has passed. */
static int commit_due(job *j, double now, struct err *e)
{
    if (!ledger_n_uncommitted(&j->book) || now - j->t_commit_last < j->c->commit_interval) return 0;
    if (commit_write(j, e) != 0) return -1;
    j->t_commit_last = clock_now();
    return 0;
}

/* With rank 0's own engine idle: its failed submissions are taken back; when nothing is left for it, it
 * waits for the other ranks (one message at a time). *finished = 1 when every rank is done. */
static int engine_idle(job *j, int64_t *in_engine, int *finished, struct err *e)
{
    int64_t taken;
    *finished = 0;
    if (take_results(j, &taken, e) != 0) return -1; /* requests failed at engine_add */
    *in_engine -= taken;
    j->feed.n_held_self = *in_engine;
    if (j->feed.n_left > 0 || *in_engine > 0) return 0;
    if (dist_done(j->c->dist)) {
        *finished = 1;
        return 0;
    }
    if (dist_serve(j->c->dist, &j->feed, 0, 1, e) != 0) return -1;
    return commit_due(j, clock_now(), e);
}

/* While draining: the engine's cap on running sequences follows their number down, so a sequence that
 * finishes frees no room for a queued request (the engine clamps the cap to at least 1: with none running
 * the drain is over before the next step). */
static void drain_admit_none(job *j)
{
    if (j->c->engine) return; /* not ours to cap */
    struct engine_stats es;
    engine_get_stats(j->m->eng, &es);
    engine_set_max_seqs(j->m->eng, es.n_running);
}

/* config.drain: the first time it is seen set, no work is submitted any more and the engine admits none of
 * what it queues (drain_admit_none). 1 when the drain is over: nothing runs, or drain_s has passed (what
 * still runs is then left uncommitted, as through config.stop). */
static int drain_over(job *j)
{
    if (!j->c->drain || !*j->c->drain) return 0;
    struct engine_stats es;
    eng_stats(j, &es);
    double now = clock_now();
    if (!j->t_drain) {
        j->t_drain = now;
        log_info("stopping: no new work; the %d running sequences finish (at most %.0f s; interrupt again to stop "
                 "at once)", (int)es.n_running, j->c->drain_s);
        drain_admit_none(j);
    }
    return es.n_running == 0 || now - j->t_drain > j->c->drain_s;
}

/* The time series and the memory watchdog, on the run's own engine only (NULL with config.engine). */
static int start_monitor(job *j, struct err *e)
{
    if (j->c->engine) return 0;
    j->mon = calloc(1, sizeof *j->mon);
    if (!j->mon) return err_set(e, "out of memory");
    monitor_start(j->mon, j->m->eng, j->c->sample_interval, j->seqs.n, j->c->watchdog, j->t_commit_last);
    return 0;
}

static int run_engine(job *j, struct err *e)
{
    engine *eng = j->m->eng;
    dist *d = j->c->dist;
    int64_t in_engine = 0, taken;
    progress *pg = progress_init(stderr, j->c->progress, j->c->progress_interval, clock_now());
    struct progress_snapshot ps;
    j->t_commit_last = clock_now();
    if (start_monitor(j, e) != 0) {
        progress_free(pg);
        return -1;
    }
    for (;;) {
        if ((j->c->stop && *j->c->stop) || drain_over(j)) {
            j->sum->interrupted = 1;
            break;
        }
        if (!j->t_drain && submit_works(j, &in_engine, e) != 0) goto fail;
        if (d && dist_serve(d, &j->feed, 0, 0, e) != 0) goto fail;
        if (!eng_has_work(j)) {
            int finished;
            if (engine_idle(j, &in_engine, &finished, e) != 0) goto fail;
            if (finished) break;
            continue;
        }
        double t0 = clock_now();
        if (eng_step(j, e) != 0) goto fail;
        if (j->c->test_hook) j->c->test_hook("step");
        double t1 = clock_now();
        j->sum->t_engine += t1 - t0;
        if (take_results(j, &taken, e) != 0) goto fail;
        in_engine -= taken;
        j->feed.n_held_self = in_engine;
        if (commit_due(j, t1, e) != 0) goto fail;
        if (pg) {
            snapshot(j, &ps);
            progress_update(pg, &ps, t1);
        }
        if (j->mon) monitor_tick(j->mon, eng, j->n_done_run, j->n_failed_run, t1);
        if (j->t_drain) drain_admit_none(j);
    }
    /* the other ranks finish what they hold (told "end" from now on); their results are committed too */
    if (d && dist_drain(d, &j->feed, e) != 0) goto fail;
    if (d && j->book.p.debug_checks && dist_check(d, e) != 0) goto fail;
    if (take_results(j, &taken, e) != 0 || commit_write(j, e) != 0) goto fail;
    if (j->mon) monitor_finish(j->mon, eng, j->n_done_run, j->n_failed_run, clock_now());
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

/* The MPI job's figures: every rank's, and the coordinator's own cost (planning, serving the ranks, the
 * store and the output files) as a share of the wall time. */
static json_t *dist_json(job *j)
{
    struct engine_stats es;
    engine_get_stats(j->m->eng, &es);
    struct dist_rank_stats *me = &j->self;
    struct rusage ru;
    me->wall_s = j->sum->wall_s;
    me->busy_s = j->sum->t_engine;
    me->peak_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
    me->kv_blocks_peak = es.kv_blocks_peak;
    me->kv_blocks_total = es.kv_blocks_total;
    const struct job_summary *s = j->sum;
    double coord = s->t_plan + s->t_dist + s->t_store + s->t_output;
    return json_pack("{s:i, s:f, s:f, s:f, s:o}", "n_ranks", dist_size(j->c->dist), "coordinator_s", coord,
                     "coordinator_share", s->wall_s > 0 ? coord / s->wall_s : 0.0, "serve_s", s->t_dist, "ranks",
                     dist_ranks_json(j->c->dist, me));
}

/* The running sequences for the record: {"value", "auto"} and, with auto, what chose it. */
static json_t *seqs_json(const struct runtime_seqs *s)
{
    json_t *o = json_pack("{s:i, s:b}", "value", (json_int_t)s->n, "auto", s->automatic);
    if (s->automatic)
        json_object_update_new(o, json_pack("{s:i, s:I, s:s}", "knee", (json_int_t)s->knee, "seq_tokens",
                                            (json_int_t)s->seq_tokens, "basis", s->basis ? s->basis : ""));
    return o;
}

static int write_record(job *j, int64_t t_start_unix, const struct record_energy *energy, struct err *e)
{
    struct engine_stats es;
    eng_stats(j, &es);
    struct record_run rr = {j->c, j->m, j->sum, &es, j->latency, j->n_latency, j->n_latency_seen, j->backlog_json,
                            j->repair_json, t_start_unix, energy, ledger_bytes(&j->book) + ingest_source_bytes(j->src)};
    json_t *rec = record_build(&rr);
    json_object_set_new(rec, "max_seqs", seqs_json(&j->seqs));
    if (j->c->dist) json_object_set_new(rec, "distributed", dist_json(j));
    if (j->mon) {
        json_object_set_new(rec, "timeline", monitor_timeline_json(j->mon));
        json_object_set_new(rec, "watchdog", monitor_watchdog_json(j->mon));
    }
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
    j->feed = (struct dist_feed){.ctx = j, .next = feed_next, .result = feed_result};
    j->mirror_fd = -1;
    struct ledger_params lp = {m->name, m->sha256, c->version, m->backend, c->order_input, m->ep.debug_checks,
                               c->test_hook, m->vocab};
    if (job_check_paths(c, e) != 0 || ledger_init(&j->book, &lp, e) != 0) goto done;

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
    log_info("%lld lines: %lld bad, %lld requests (%lld distinct) for %lld completions: %lld unique (%lld already "
             "done, %zu to run), %lld folded duplicates",
             (long long)sum->lines, (long long)sum->input_errors, (long long)sum->requests,
             (long long)sum->distinct_requests, (long long)sum->completions, (long long)sum->work_total,
             (long long)sum->work_skipped_done, n_order, (long long)sum->folded_duplicates);

    /* the first commit writes what is already known (bad lines, lines done before) */
    j->mirror_fd = c->mirror ? open(c->output, O_RDONLY) : -1;
    if (c->mirror && j->mirror_fd < 0) {
        err_set(e, "-o %s: reading it back: %s", c->output, strerror(errno));
        goto done;
    }
    if (commit_write(j, e) != 0) goto done;
    j->order = order;
    j->n_order = n_order;
    j->feed.n_left = n_order;
    if (choose_seqs(j, e) != 0) goto done;
    if (run_engine(j, e) != 0) goto done;
    sum->t_dist = dist_serve_seconds(c->dist);
    if (finish_files(j, e) != 0) goto done;
    sum->wall_s = clock_now() - t_start;
    sum->gen_tok_s = sum->wall_s > 0 ? (double)sum->gen_tokens / sum->wall_s : 0;
    sum->prompt_tok_s = sum->wall_s > 0 ? (double)sum->prompt_tokens / sum->wall_s : 0;
    if (c->record && write_record(j, t_start_unix, &energy, e) != 0) goto done;
    rc = 0;
done:
    /* the other ranks wait for work until told end (an error ends them all: the caller aborts) */
    if (rc == 0 && c->dist && !dist_done(c->dist) && dist_drain(c->dist, &j->feed, e) != 0) rc = -1;
    record_energy_stop(&energy);
    ledger_free(&j->book);
    ingest_request_free(&j->cur);
    ingest_source_close(j->src);
    free(j->flight);
    free(j->free_flight);
    free(j->latency);
    free(j->mon);
    free(order);
    output_close(j->out[0]);
    output_close(j->out[1]);
    if (j->mirror_fd >= 0) close(j->mirror_fd);
    store_close(j->st);
    json_decref(j->backlog_json);
    json_decref(j->repair_json);
    return rc;
}
