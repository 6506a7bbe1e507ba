/* server_queue — see server_queue.h. One mutex guards everything here; every condition variable waits on
 * it with the monotonic clock (clock_now's). Nothing slow happens under the lock: admission is O(active
 * requests), posting is a pointer append, and allocations are made before taking it. */
#include "server/server_queue.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"

struct server_queue {
    pthread_mutex_t mu;
    pthread_cond_t engine_cv; /* the engine thread waits for work */
    pthread_cond_t idle_cv;   /* a drain waits for n_active == 0 */
    enum server_state state;
    int stop;
    int woken; /* server_queue_wake: the engine thread's next take returns even with nothing to hand over */
    struct server_admit admit;
    struct server_metrics metrics;
    struct server_req *active_head, *active_tail; /* admission order */
    int32_t n_active;
    int64_t active_tokens;
    struct server_req *pend_head, *pend_tail;
    struct server_req *cancel_head;
    uint64_t next_id, next_engine_id;
    struct engine_stats st; /* the engine's, after its last step */
};

static int cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? -1 : 0;
}

/* Waits on cv until signalled or the clock_now() deadline: 0 on timeout. */
static int wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline)
{
    if (!isfinite(deadline)) return pthread_cond_wait(cv, mu), 1;
    double s = floor(deadline);
    struct timespec ts = {(time_t)s, (long)((deadline - s) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    return pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT;
}

/* ---- requests ---- */

struct server_req *server_req_new(int32_t n_choices)
{
    if (n_choices < 1) return NULL;
    struct server_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->choices = calloc((size_t)n_choices, sizeof *r->choices);
    if (!r->choices || cond_init(&r->cv)) {
        free(r->choices);
        free(r);
        return NULL;
    }
    r->n_choices = n_choices;
    r->refs = 1;
    return r;
}

void server_event_free(struct server_event *ev)
{
    if (!ev) return;
    free(ev->text);
    free(ev->error);
    free(ev);
}

static void req_free(struct server_req *r)
{
    while (r->ev_head) {
        struct server_event *ev = r->ev_head;
        r->ev_head = ev->next;
        server_event_free(ev);
    }
    for (int32_t i = 0; i < r->n_choices; i++) {
        free(r->choices[i].text);
        free(r->choices[i].error);
    }
    free(r->choices);
    free(r->prompt);
    free(r->starts);
    genparam_free(&r->gen);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void server_req_discard(struct server_req *r)
{
    if (r) req_free(r);
}

static void unref_locked(struct server_req *r)
{
    if (--r->refs == 0) req_free(r);
}

void server_queue_release(server_queue *q, struct server_req *r)
{
    if (!r) return;
    pthread_mutex_lock(&q->mu);
    unref_locked(r);
    pthread_mutex_unlock(&q->mu);
}

/* ---- the queue ---- */

int server_queue_init(server_queue **out, struct err *e)
{
    server_queue *q = calloc(1, sizeof *q);
    if (!q) return err_set(e, "server queue: out of memory");
    if (pthread_mutex_init(&q->mu, NULL)) {
        free(q);
        return err_set(e, "server queue: cannot create a mutex");
    }
    if (cond_init(&q->engine_cv)) goto fail_engine_cv;
    if (cond_init(&q->idle_cv)) goto fail_idle_cv;
    q->state = SERVER_LOADING;
    server_metrics_init(&q->metrics);
    *out = q;
    return 0;
fail_idle_cv:
    pthread_cond_destroy(&q->engine_cv);
fail_engine_cv:
    pthread_mutex_destroy(&q->mu);
    free(q);
    return err_set(e, "server queue: cannot create a condition variable");
}

void server_queue_free(server_queue *q)
{
    if (!q) return;
    pthread_cond_destroy(&q->engine_cv);
    pthread_cond_destroy(&q->idle_cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

void server_queue_open(server_queue *q, const struct server_admit_limits *lim)
{
    pthread_mutex_lock(&q->mu);
    server_admit_init(&q->admit, lim);
    q->state = SERVER_SERVING;
    pthread_mutex_unlock(&q->mu);
}

void server_queue_drain(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->state = SERVER_DRAINING;
    pthread_mutex_unlock(&q->mu);
}

enum server_state server_queue_state(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    enum server_state s = q->state;
    pthread_mutex_unlock(&q->mu);
    return s;
}

int32_t server_queue_n_active(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int32_t n = q->n_active;
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* What waits: the oldest active requests whose live choices add up to the running sequences are taken to
 * be running, the rest queued. O(active). */
static struct server_admit_load load_locked(const server_queue *q)
{
    struct server_admit_load l = {0, 0};
    int64_t running = q->st.n_running;
    for (const struct server_req *r = q->active_head; r; r = r->next) {
        int32_t live = r->n_choices - r->n_done;
        if (r->taken && live <= running) {
            running -= live;
            continue;
        }
        running = 0; /* first come, first served: nothing younger runs before it */
        l.n_queued++;
        l.queued_tokens += r->need;
    }
    return l;
}

enum admit_verdict server_queue_submit(server_queue *q, struct server_req *r, double *retry_after)
{
    int64_t per_seq = (int64_t)r->n_prompt + r->max_tokens, need = per_seq * r->n_choices;
    if (r->starts) { /* embeddings: each choice is its own input, prefilled only */
        per_seq = 0;
        for (int32_t i = 0; i < r->n_choices; i++)
            if (r->starts[i + 1] - r->starts[i] > per_seq) per_seq = r->starts[i + 1] - r->starts[i];
        need = r->n_prompt;
    }
    pthread_mutex_lock(&q->mu);
    struct server_admit_load l = load_locked(q);
    enum admit_verdict v = server_admit_decide(&q->admit, q->state, &l, per_seq, need, retry_after);
    if (v != ADMIT_OK) {
        q->metrics.rejected[v]++;
        pthread_mutex_unlock(&q->mu);
        return v;
    }
    r->id = ++q->next_id;
    for (int32_t i = 0; i < r->n_choices; i++)
        r->choices[i].engine_id = ++q->next_engine_id;
    r->need = need;
    r->t_admitted = clock_now();
    r->admitted = 1;
    r->refs++; /* the engine side's */
    r->prev = q->active_tail;
    r->next = NULL;
    if (q->active_tail)
        q->active_tail->next = r;
    else
        q->active_head = r;
    q->active_tail = r;
    q->n_active++;
    q->active_tokens += need;
    r->pending_next = NULL;
    if (q->pend_tail)
        q->pend_tail->pending_next = r;
    else
        q->pend_head = r;
    q->pend_tail = r;
    q->metrics.admitted++;
    pthread_cond_signal(&q->engine_cv);
    pthread_mutex_unlock(&q->mu);
    return ADMIT_OK;
}

/* ---- finishing ---- */

static enum server_outcome outcome_of(enum engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP:
        return SERVER_OUTCOME_STOP;
    case ENGINE_FINISH_LENGTH:
        return SERVER_OUTCOME_LENGTH;
    case ENGINE_FINISH_ERROR:
        return SERVER_OUTCOME_ERROR;
    default:
        return SERVER_OUTCOME_CANCELLED;
    }
}

/* Something happened to r: its waiters are woken, and its notify hook (the creator's) is called. */
static void wake_locked(struct server_req *r)
{
    pthread_cond_broadcast(&r->cv);
    if (r->notify) r->notify(r->notify_arg);
}

static void push_event_locked(struct server_req *r, struct server_event *ev)
{
    ev->next = NULL;
    if (r->ev_tail)
        r->ev_tail->next = ev;
    else
        r->ev_head = ev;
    r->ev_tail = ev;
    wake_locked(r);
}

/* The whole request has ended: out of the active list, reservation released, engine side's ref dropped. */
static void finish_req_locked(server_queue *q, struct server_req *r)
{
    r->finished = 1;
    if (r->prev)
        r->prev->next = r->next;
    else
        q->active_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        q->active_tail = r->prev;
    r->prev = r->next = NULL;
    if (r->cancel_listed) { /* its choices all ended before the engine thread saw the cancellation */
        struct server_req **p = &q->cancel_head;
        while (*p != r)
            p = &(*p)->cancel_next;
        *p = r->cancel_next;
        r->cancel_listed = 0;
    }
    q->n_active--;
    q->active_tokens -= r->need;
    server_admit_retire(&q->admit, r->need);
    int cancelled = 0;
    for (int32_t i = 0; i < r->n_choices; i++) {
        q->metrics.completion_tokens += r->choices[i].n_tokens;
        cancelled |= r->choices[i].finish == ENGINE_FINISH_CANCELLED;
    }
    q->metrics.prompt_tokens += r->n_prompt;
    if (!cancelled) server_metrics_observe_latency(&q->metrics, clock_now() - r->t_admitted);
    wake_locked(r);
    if (q->n_active == 0) pthread_cond_broadcast(&q->idle_cv);
    unref_locked(r);
}

/* Choice c ended. ev (allocated by the caller for a stream, else NULL) carries the text not posted yet. */
static void choice_done_locked(server_queue *q, struct server_req *r, int32_t c, struct engine_result *res,
                               struct server_event *ev)
{
    struct server_choice *ch = &r->choices[c];
    ch->done = 1;
    ch->finish = res->finish;
    ch->text = res->text;
    ch->text_len = res->text_len;
    ch->error = res->error;
    ch->n_tokens = res->n_tokens;
    ch->n_cached = res->n_prompt_cached;
    res->text = res->error = NULL;
    q->metrics.finished[outcome_of(ch->finish)]++;
    if (ev) push_event_locked(r, ev);
    r->n_done++;
    wake_locked(r);
    if (r->n_done == r->n_choices) finish_req_locked(q, r);
}

/* The event that ends choice c of a stream: the text beyond what was posted. NULL when out of memory (the
 * stream then ends without it: its connection sees the choice done through wait). */
static struct server_event *final_event(const struct server_req *r, int32_t c,
                                        const struct engine_result *res)
{
    const struct server_choice *ch = &r->choices[c];
    size_t from = ch->posted < res->text_len ? ch->posted : res->text_len;
    struct server_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->choice = c;
    ev->len = res->text_len - from;
    ev->text = malloc(ev->len + 1);
    ev->error = res->error ? strdup(res->error) : NULL;
    if (!ev->text || (res->error && !ev->error)) {
        server_event_free(ev);
        return NULL;
    }
    if (ev->len) memcpy(ev->text, res->text + from, ev->len); /* res->text may be NULL only when len is 0 */
    ev->text[ev->len] = '\0';
    ev->finished = 1;
    ev->finish = res->finish;
    return ev;
}

void server_queue_post_result(server_queue *q, struct server_req *r, int32_t c, struct engine_result *res)
{
    struct server_event *ev = r->stream ? final_event(r, c, res) : NULL;
    if (r->stream) r->choices[c].posted = res->text_len;
    pthread_mutex_lock(&q->mu);
    choice_done_locked(q, r, c, res, ev);
    pthread_mutex_unlock(&q->mu);
}

void server_queue_post_text(server_queue *q, struct server_req *r, int32_t c, const char *text, size_t len)
{
    struct server_choice *ch = &r->choices[c];
    if (!r->stream || len <= ch->posted) return;
    struct server_event *ev = calloc(1, sizeof *ev);
    char *t = malloc(len - ch->posted + 1);
    if (!ev || !t) { /* out of memory: the text comes with the final event */
        free(ev);
        free(t);
        return;
    }
    memcpy(t, text + ch->posted, len - ch->posted);
    t[len - ch->posted] = '\0';
    ev->choice = c;
    ev->text = t;
    ev->len = len - ch->posted;
    ch->posted = len;
    pthread_mutex_lock(&q->mu);
    push_event_locked(r, ev);
    pthread_mutex_unlock(&q->mu);
}

/* Ends every choice of r as cancelled (r never reached the engine, so none is done yet). The last one ends
 * r and may free it: nothing reads r after it. */
static void cancel_untaken_locked(server_queue *q, struct server_req *r)
{
    int32_t n = r->n_choices;
    for (int32_t c = 0; c < n; c++) {
        struct engine_result res = {.id = r->choices[c].engine_id, .finish = ENGINE_FINISH_CANCELLED};
        choice_done_locked(q, r, c, &res, r->stream ? final_event(r, c, &res) : NULL); /* text stays NULL */
    }
}

/* ---- the engine thread's side ---- */

int server_queue_take(server_queue *q, int engine_busy, struct server_req **added,
                      struct server_req **cancelled)
{
    *added = *cancelled = NULL;
    pthread_mutex_lock(&q->mu);
    while (!q->pend_head && !q->cancel_head) {
        if (q->stop) {
            pthread_mutex_unlock(&q->mu);
            return 1;
        }
        if (engine_busy || q->woken) break;
        pthread_cond_wait(&q->engine_cv, &q->mu);
    }
    q->woken = 0;
    struct server_req **tail = added;
    while (q->pend_head) {
        struct server_req *r = q->pend_head;
        q->pend_head = r->pending_next;
        r->pending_next = NULL;
        if (r->cancel) {
            cancel_untaken_locked(q, r); /* may free r */
            continue;
        }
        r->taken = 1;
        *tail = r;
        tail = &r->pending_next;
    }
    q->pend_tail = NULL;
    *cancelled = q->cancel_head;
    for (struct server_req *r = q->cancel_head; r; r = r->cancel_next)
        r->cancel_listed = 0;
    q->cancel_head = NULL;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void server_queue_post_stats(server_queue *q, const struct engine_stats *st, double busy)
{
    double now = clock_now();
    pthread_mutex_lock(&q->mu);
    q->st = *st;
    server_admit_busy(&q->admit, busy);
    server_metrics_sample_tokens(&q->metrics, now, st->gen_tokens);
    pthread_mutex_unlock(&q->mu);
}

void server_queue_wake(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->woken = 1;
    pthread_cond_signal(&q->engine_cv);
    pthread_mutex_unlock(&q->mu);
}

void server_queue_stop(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->engine_cv);
    pthread_mutex_unlock(&q->mu);
}

/* ---- the connection side ---- */

int server_queue_next_event(server_queue *q, struct server_req *r, double timeout, struct server_event **ev)
{
    double deadline = clock_now() + timeout;
    pthread_mutex_lock(&q->mu);
    while (!r->ev_head)
        if (!wait_until(&r->cv, &q->mu, deadline) && !r->ev_head) {
            pthread_mutex_unlock(&q->mu);
            return 0;
        }
    *ev = r->ev_head;
    r->ev_head = (*ev)->next;
    if (!r->ev_head) r->ev_tail = NULL;
    (*ev)->next = NULL;
    pthread_mutex_unlock(&q->mu);
    return 1;
}

int server_queue_wait_done(server_queue *q, struct server_req *r, double timeout)
{
    double deadline = clock_now() + timeout;
    pthread_mutex_lock(&q->mu);
    while (r->n_done < r->n_choices)
        if (!wait_until(&r->cv, &q->mu, deadline)) break;
    int done = r->n_done == r->n_choices;
    pthread_mutex_unlock(&q->mu);
    return done;
}

static void cancel_locked(server_queue *q, struct server_req *r)
{
    if (!r->admitted || r->finished || r->cancel) return;
    r->cancel = 1;
    if (r->taken && !r->cancel_listed) {
        r->cancel_next = q->cancel_head;
        q->cancel_head = r;
        r->cancel_listed = 1;
    }
    pthread_cond_signal(&q->engine_cv);
}

void server_queue_cancel(server_queue *q, struct server_req *r)
{
    pthread_mutex_lock(&q->mu);
    cancel_locked(q, r);
    pthread_mutex_unlock(&q->mu);
}

void server_queue_cancel_all(server_queue *q)
{
    pthread_mutex_lock(&q->mu);
    for (struct server_req *r = q->active_head; r; r = r->next)
        cancel_locked(q, r);
    pthread_mutex_unlock(&q->mu);
}

int server_queue_wait_idle(server_queue *q, double deadline)
{
    pthread_mutex_lock(&q->mu);
    while (q->n_active > 0)
        if (!wait_until(&q->idle_cv, &q->mu, deadline)) break;
    int idle = q->n_active == 0;
    pthread_mutex_unlock(&q->mu);
    return idle;
}

void server_queue_set_notify(server_queue *q, struct server_req *r, void (*notify)(void *arg), void *arg)
{
    pthread_mutex_lock(&q->mu);
    r->notify = notify;
    r->notify_arg = arg;
    pthread_mutex_unlock(&q->mu);
}

void server_queue_count_rejected(server_queue *q, enum admit_verdict v)
{
    if (v <= ADMIT_OK || v >= ADMIT_VERDICT_COUNT) return;
    pthread_mutex_lock(&q->mu);
    q->metrics.rejected[v]++;
    pthread_mutex_unlock(&q->mu);
}

void server_queue_count_timeout(server_queue *q, enum server_timeout t, int n)
{
    if ((unsigned)t >= SERVER_TIMEOUT_COUNT || n <= 0) return;
    pthread_mutex_lock(&q->mu);
    q->metrics.timeouts[t] += n;
    pthread_mutex_unlock(&q->mu);
}

void server_queue_count_status(server_queue *q, int status)
{
    pthread_mutex_lock(&q->mu);
    server_metrics_count_status(&q->metrics, status);
    pthread_mutex_unlock(&q->mu);
}

int server_queue_metrics_text(server_queue *q, int32_t connections, int32_t in_progress, char **out, size_t *len,
                              struct err *e)
{
    struct server_metrics m;
    struct server_gauges g;
    pthread_mutex_lock(&q->mu);
    struct server_admit_load l = load_locked(q);
    m = q->metrics;
    g = (struct server_gauges){
        .state = q->state,
        .queue_depth = l.n_queued,
        .queued_tokens = l.queued_tokens,
        .running = q->st.n_running,
        .active = q->n_active,
        .kv_blocks_used = q->st.kv_blocks_used,
        .kv_blocks_cached = q->st.kv_blocks_cached,
        .kv_blocks_total = q->st.kv_blocks_total,
        .drain_rate = q->state == SERVER_LOADING ? 0 : server_admit_rate(&q->admit),
        .gen_tokens_total = q->st.gen_tokens,
        .connections = connections,
        .in_progress = in_progress,
    };
    pthread_mutex_unlock(&q->mu);
    return server_metrics_render(&m, &g, clock_now(), out, len, e);
}

/* ---- the invariant ---- */

static int check_lists_locked(server_queue *q, struct err *e)
{
    int32_t n = 0;
    int64_t tokens = 0;
    uint64_t last_id = 0;
    const struct server_req *prev = NULL;
    for (const struct server_req *r = q->active_head; r; prev = r, r = r->next) {
        if (r->prev != prev)
            return err_set(e, "server queue: active request %llu has a broken back link",
                           (unsigned long long)r->id);
        if (!r->admitted || r->finished)
            return err_set(e, "server queue: request %llu is active but %s", (unsigned long long)r->id,
                           r->admitted ? "finished" : "not admitted");
        if (r->id <= last_id)
            return err_set(e, "server queue: active list out of admission order at %llu",
                           (unsigned long long)r->id);
        if (r->n_done >= r->n_choices)
            return err_set(e, "server queue: active request %llu has every choice done",
                           (unsigned long long)r->id);
        if (r->refs < 1)
            return err_set(e, "server queue: active request %llu has no reference",
                           (unsigned long long)r->id);
        last_id = r->id;
        n++;
        tokens += r->need;
    }
    if (prev != q->active_tail)
        return err_set(e, "server queue: the active list's tail is not its last request");
    if (n != q->n_active || tokens != q->active_tokens)
        return err_set(
            e, "server queue: %d active requests reserving %lld tokens, but the counts say %d and %lld",
            (int)n, (long long)tokens, (int)q->n_active, (long long)q->active_tokens);
    const struct server_req *last = NULL;
    for (const struct server_req *r = q->pend_head; r; last = r, r = r->pending_next)
        if (!r->admitted || r->taken || r->finished)
            return err_set(e, "server queue: pending request %llu is %s", (unsigned long long)r->id,
                           !r->admitted ? "not admitted"
                           : r->taken   ? "already taken"
                                        : "finished");
    if (last != q->pend_tail)
        return err_set(e, "server queue: the pending FIFO's tail is not its last request");
    for (const struct server_req *r = q->cancel_head; r; r = r->cancel_next)
        if (!r->cancel_listed || !r->taken || r->finished || !r->cancel)
            return err_set(e, "server queue: request %llu is listed for cancellation in a wrong state",
                           (unsigned long long)r->id);
    return 0;
}

int server_queue_check(server_queue *q, struct err *e)
{
    pthread_mutex_lock(&q->mu);
    int rc = check_lists_locked(q, e);
    if (!rc && q->state != SERVER_LOADING) rc = server_admit_check(&q->admit, e);
    if (!rc) rc = server_metrics_check(&q->metrics, e);
    pthread_mutex_unlock(&q->mu);
    return rc;
}
