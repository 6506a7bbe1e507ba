/* dist_mpi — the MPI side of dist (see dist.h for the protocol and the invariant): start-up, the worker loop,
 * the coordinator's serving. Compiled to nothing unless built with make MPI=1 (NS_MPI); dist.c then holds
 * the stand-ins that refuse an MPI launch.
 *
 * Every send is non-blocking (MPI_Isend) and its buffer kept in a short list until it completes, so neither
 * side ever waits for the other to reach a receive: a coordinator in a long engine step stalls no worker,
 * and a worker in a long step stalls no coordinator.
 */
#if NS_MPI

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/dist.h"
#include "jobs/dist_int.h"
#include "jobs/embedding.h"
#include "util/clock.h"
#include "util/log.h"

enum { TAG_UP = 1, TAG_DOWN = 2, MAX_SENDS = 64 };

/* Sends in flight: their requests and buffers. */
struct dist_mpi {
    MPI_Request rq[MAX_SENDS];
    struct dist_buf buf[MAX_SENDS];
    int n;
};

static struct dist_mpi *mpi_of(dist *d) { return (struct dist_mpi *)d->mpi; }

int dist_available(void) { return 1; }

static int mpi_err(struct err *e, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return err_set(e, "dist: %s: %.*s", what, len, msg);
}

/* Frees the buffers of completed sends; with wait_all, waits for all of them first. */
static void sends_reap(struct dist_mpi *m, int wait_all)
{
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        int done = 0;
        if (wait_all) MPI_Wait(&m->rq[i], MPI_STATUS_IGNORE), done = 1;
        else MPI_Test(&m->rq[i], &done, MPI_STATUS_IGNORE);
        if (done) {
            dist_buf_free(&m->buf[i]);
            continue;
        }
        m->rq[k] = m->rq[i];
        m->buf[k] = m->buf[i];
        k++;
    }
    m->n = k;
}

/* Sends b's bytes to rank dest with tag; takes b's memory (b is emptied). */
static int send_buf(dist *d, int dest, int tag, struct dist_buf *b, struct err *e)
{
    struct dist_mpi *m = mpi_of(d);
    sends_reap(m, 0);
    if (m->n == MAX_SENDS) {
        MPI_Wait(&m->rq[0], MPI_STATUS_IGNORE);
        sends_reap(m, 0);
    }
    if (b->n > INT32_MAX) return err_set(e, "dist: a message of %zu bytes is too large", b->n);
    int i = m->n;
    m->buf[i] = *b;
    memset(b, 0, sizeof *b);
    int rc = MPI_Isend(m->buf[i].p, (int)m->buf[i].n, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &m->rq[i]);
    if (rc != MPI_SUCCESS) {
        dist_buf_free(&m->buf[i]);
        return mpi_err(e, rc, "send");
    }
    m->n++;
    return 0;
}

/* Receives the message that st announced into b (malloc'd). */
static int recv_buf(const MPI_Status *st, struct dist_buf *b, struct err *e)
{
    int n = 0;
    MPI_Get_count(st, MPI_BYTE, &n);
    memset(b, 0, sizeof *b);
    b->p = malloc(n > 0 ? (size_t)n : 1);
    if (!b->p) return err_set(e, "dist: out of memory for a message of %d bytes", n);
    b->n = b->cap = (size_t)n;
    int rc = MPI_Recv(b->p, n, MPI_BYTE, st->MPI_SOURCE, st->MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        dist_buf_free(b);
        return mpi_err(e, rc, "receive");
    }
    return 0;
}

/* --- start-up --- */

int dist_init(int *argc, char ***argv, dist **out, struct err *e)
{
    *out = NULL;
    if (dist_env_int("OMPI_COMM_WORLD_SIZE") < 0 && dist_env_int("PMI_SIZE") < 0 && dist_env_int("PMIX_RANK") < 0)
        return 0; /* not launched by MPI */
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) return mpi_err(e, rc, "MPI_Init");
    dist *d = calloc(1, sizeof *d);
    struct dist_mpi *m = calloc(1, sizeof *m);
    if (!d || !m) {
        free(d);
        free(m);
        MPI_Finalize();
        return err_set(e, "dist: out of memory");
    }
    d->mpi = m;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &d->local_rank);
    MPI_Comm_size(node, &d->local_size);
    MPI_Comm_free(&node);
    if (d->size == 1) { /* one rank: a plain single process */
        dist_free(d);
        return 0;
    }
    d->w = calloc((size_t)d->size, sizeof *d->w);
    if (!d->w) {
        dist_free(d);
        return err_set(e, "dist: out of memory");
    }
    *out = d;
    return 0;
}

void dist_free(dist *d)
{
    if (!d) return;
    sends_reap(mpi_of(d), 1);
    free(d->mpi);
    free(d->w);
    free(d);
    MPI_Finalize();
}

void dist_abort(dist *d, int code)
{
    (void)d;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* --- worker --- */

struct worker {
    dist *d;
    engine *eng;
    struct dist_buf out; /* results not sent yet */
    int64_t n_out;       /* how many */
    int64_t held;        /* requests in the engine or finished and not yet sent */
    int asked, ended;
    struct dist_rank_stats st;
};

/* Sends the results gathered, a question for want more requests (0: none), and with final the figures. */
static int worker_send_up(struct worker *w, int64_t want, int final, struct err *e)
{
    struct dist_buf b = {0};
    if (dist_buf_put_i64(&b, w->n_out) || dist_buf_put_i64(&b, want) || dist_buf_put_i64(&b, final) ||
        dist_buf_put(&b, w->out.p, w->out.n) || (final && dist_pack_stats(&b, &w->st))) {
        dist_buf_free(&b);
        return err_set(e, "dist: out of memory building a message");
    }
    dist_buf_free(&w->out);
    w->n_out = 0;
    return send_buf(w->d, 0, TAG_UP, &b, e);
}

/* Moves every finished result into the outgoing buffer. */
static int worker_take(struct worker *w, struct err *e)
{
    struct engine_result r;
    while (engine_take(w->eng, &r)) {
        int rc = embedding_result_to_text(&r) != 0 ? -1 : dist_pack_result(&w->out, &r); /* as rank 0 stores it */
        w->st.requests++;
        w->st.prompt_tokens += r.n_prompt;
        w->st.prompt_tokens_cached += r.n_prompt_cached;
        w->st.gen_tokens += r.n_tokens;
        engine_result_free(&r);
        if (rc) return err_set(e, "dist: out of memory packing a result");
        w->n_out++;
        w->held--;
    }
    return 0;
}

/* Receives rank 0's answer (waiting for it with block) and queues its requests (unless drop). */
static int worker_recv_down(struct worker *w, int block, int drop, struct err *e)
{
    MPI_Status st;
    int flag = 0;
    for (;;) { /* waits without spinning: ranks may share cores */
        MPI_Iprobe(0, TAG_DOWN, MPI_COMM_WORLD, &flag, &st);
        if (flag || !block) break;
        usleep(100);
    }
    if (!flag) return 0;
    struct dist_buf b;
    if (recv_buf(&st, &b, e) != 0) return -1;
    int64_t n = dist_buf_get_i64(&b), end = dist_buf_get_i64(&b);
    w->asked = 0;
    w->ended = end != 0;
    for (int64_t i = 0; i < n && !b.bad; i++) {
        struct engine_request rq;
        if (dist_unpack_request(&b, &rq, e) != 0) goto fail;
        int rc = drop ? 0 : engine_add(w->eng, &rq, e);
        dist_request_free(&rq);
        if (rc) goto fail;
        if (!drop) w->held++;
    }
    dist_buf_free(&b);
    return 0;
fail:
    dist_buf_free(&b);
    return -1;
}

int dist_work(dist *d, engine *eng, int32_t max_seqs, volatile sig_atomic_t *stop, void (*test_hook)(const char *),
              struct err *e)
{
    struct worker W = {.d = d, .eng = eng};
    struct worker *w = &W;
    double t0 = clock_now();
    for (;;) {
        if (stop && *stop) {
            if (w->asked && worker_recv_down(w, 1, 1, e) != 0) goto fail;
            break;
        }
        if (!w->ended && !w->asked && w->held <= max_seqs) {
            if (worker_send_up(w, 2 * (int64_t)max_seqs - w->held, 0, e) != 0) goto fail;
            w->asked = 1;
        } else if (w->n_out && worker_send_up(w, 0, 0, e) != 0) {
            goto fail;
        }
        if (w->asked && worker_recv_down(w, !engine_has_work(eng), 0, e) != 0) goto fail;
        if (!engine_has_work(eng)) {
            if (worker_take(w, e) != 0) goto fail; /* requests failed at engine_add */
            if (w->ended && w->held == 0) break;
            continue;
        }
        double t1 = clock_now();
        if (engine_step(eng, e) != 0) goto fail;
        w->st.busy_s += clock_now() - t1;
        if (test_hook) test_hook("step");
        if (worker_take(w, e) != 0) goto fail;
    }
    struct engine_stats es;
    engine_get_stats(eng, &es);
    w->st.wall_s = clock_now() - t0;
    w->st.peak_rss_bytes = dist_peak_rss_bytes();
    w->st.kv_blocks_peak = es.kv_blocks_peak;
    w->st.kv_blocks_total = es.kv_blocks_total;
    if (worker_send_up(w, 0, 1, e) != 0) goto fail;
    sends_reap(mpi_of(d), 1);
    dist_buf_free(&w->out);
    return 0;
fail:
    dist_buf_free(&w->out);
    return err_prefix(e, "rank %d", d->rank);
}

/* --- coordinator --- */

/* Answers worker r's question: the next requests in the planned order, or end. */
static int serve_answer(dist *d, int r, int64_t want, struct dist_feed *feed, int stopping, struct err *e)
{
    struct dist_worker *w = &d->w[r];
    int64_t n = stopping ? 0 : dist_chunk(d, feed, w->handed - w->returned, want);
    struct dist_buf b = {0};
    if (dist_buf_put_i64(&b, n) || dist_buf_put_i64(&b, n == 0)) goto oom;
    for (int64_t i = 0; i < n; i++) {
        struct engine_request rq;
        if (feed->next(feed->ctx, &rq, e) != 0) {
            dist_buf_free(&b);
            return -1;
        }
        feed->n_left--;
        if (dist_pack_request(&b, &rq) != 0) goto oom;
    }
    w->handed += n;
    w->asked = 0;
    return send_buf(d, r, TAG_DOWN, &b, e);
oom:
    dist_buf_free(&b);
    return err_set(e, "dist: out of memory building a chunk for rank %d", r);
}

/* One UP message from rank r. */
static int serve_up(dist *d, int r, struct dist_buf *b, struct dist_feed *feed, int stopping, struct err *e)
{
    struct dist_worker *w = &d->w[r];
    int64_t n = dist_buf_get_i64(b), want = dist_buf_get_i64(b), final = dist_buf_get_i64(b);
    if (b->bad || n < 0 || want < 0 || w->final)
        return err_set(e, "dist: rank %d sent a malformed message (results %lld, want %lld, after final %d)", r,
                       (long long)n, (long long)want, w->final);
    for (int64_t i = 0; i < n; i++) {
        struct engine_result res;
        if (dist_unpack_result(b, &res, e) != 0) return err_prefix(e, "from rank %d", r);
        w->returned++;
        if (feed->result(feed->ctx, &res, e) != 0) return -1;
    }
    if (final) {
        dist_unpack_stats(b, &w->stats);
        w->final = 1;
        d->n_final++;
    }
    if (want > 0 && !final) {
        w->asked = 1;
        if (serve_answer(d, r, want, feed, stopping, e) != 0) return -1;
    }
    return b->bad ? err_set(e, "dist: rank %d sent a truncated message", r) : 0;
}

int dist_serve(dist *d, struct dist_feed *feed, int stopping, int block, struct err *e)
{
    for (int got = 0;; got++) {
        MPI_Status st;
        int flag = 1;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_UP, MPI_COMM_WORLD, &flag, &st);
        if (!flag && block && !got && !dist_done(d)) { /* wait without spinning: ranks may share cores */
            usleep(200);
            got = -1;
            continue;
        }
        if (!flag) break;
        double t0 = clock_now();
        struct dist_buf b;
        if (recv_buf(&st, &b, e) != 0) return -1;
        int rc = serve_up(d, st.MPI_SOURCE, &b, feed, stopping, e);
        dist_buf_free(&b);
        sends_reap(mpi_of(d), 0);
        d->t_serve += clock_now() - t0;
        if (rc) return -1;
    }
    return 0;
}

int dist_drain(dist *d, struct dist_feed *feed, struct err *e)
{
    while (!dist_done(d))
        if (dist_serve(d, feed, 1, 1, e) != 0) return -1;
    sends_reap(mpi_of(d), 1);
    return 0;
}

#endif
