/* server_lane — see server_lane.h. */
#include "server/server_lane.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"

struct lane_result {
    struct engine_result r;
    struct lane_result *next;
};

struct server_lane {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the runner waits for results / for the lane to empty */
    void (*wake)(void *ctx);
    void *wake_ctx;
    struct server_lane_item *add_head, *add_tail; /* added, not yet taken by the engine thread */
    struct lane_result *res_head, *res_tail;
    int32_t n_results;
    uint64_t *flight; /* (n_flight, cap_flight) ids added and not yet resulted, any order */
    int32_t n_flight, cap_flight;
    int32_t n_in_engine;
    int abandoned;
    int cancel_due; /* abandoned with requests in the engine: the engine thread cancels them at its next take */
    struct engine_stats st;
};

int server_lane_init(void (*wake)(void *ctx), void *wake_ctx, server_lane **out, struct err *e)
{
    *out = NULL;
    server_lane *l = calloc(1, sizeof *l);
    if (!l) return err_set(e, "server lane: out of memory");
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&l->mu, NULL) || pthread_cond_init(&l->cv, &a);
    pthread_condattr_destroy(&a);
    if (bad) {
        free(l);
        return err_set(e, "server lane: cannot create a lock");
    }
    l->wake = wake;
    l->wake_ctx = wake_ctx;
    *out = l;
    return 0;
}

void server_lane_item_free(struct server_lane_item *it)
{
    if (!it) return;
    free(it->prompt);
    free(it->bias);
    for (int32_t i = 0; it->stop && i < it->rq.n_stop; i++)
        free(it->stop[i]);
    free(it->stop);
    constraint_spec_free(&it->constraint);
    free(it);
}

void server_lane_free(server_lane *l)
{
    if (!l) return;
    while (l->add_head) {
        struct server_lane_item *it = l->add_head;
        l->add_head = it->next;
        server_lane_item_free(it);
    }
    while (l->res_head) {
        struct lane_result *r = l->res_head;
        l->res_head = r->next;
        engine_result_free(&r->r);
        free(r);
    }
    free(l->flight);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---- the runner's side ---- */

/* A deep copy of r under the lane id of r->id; NULL when out of memory. */
static struct server_lane_item *item_copy(const struct engine_request *r)
{
    struct server_lane_item *it = calloc(1, sizeof *it);
    if (!it) return NULL;
    it->rq = *r;
    it->rq.id = SERVER_LANE_ID_BIT | r->id;
    it->rq.priority = ENGINE_PRIORITY_BATCH;
    it->rq.n_stop = 0;
    it->rq.constraint = NULL;
    struct err e;
    size_t np = r->n_prompt > 0 ? (size_t)r->n_prompt : 1, nb = (size_t)r->sampling.n_logit_bias;
    it->prompt = malloc(np * sizeof *it->prompt);
    it->bias = nb ? malloc(nb * sizeof *it->bias) : NULL;
    it->stop = r->n_stop > 0 ? calloc((size_t)r->n_stop, sizeof *it->stop) : NULL;
    if (!it->prompt || (nb && !it->bias) || (r->n_stop > 0 && !it->stop)) goto oom;
    if (r->n_prompt > 0) memcpy(it->prompt, r->prompt, (size_t)r->n_prompt * sizeof *it->prompt);
    if (nb) memcpy(it->bias, r->sampling.logit_bias, nb * sizeof *it->bias);
    for (int32_t i = 0; i < r->n_stop; i++, it->rq.n_stop++)
        if (!(it->stop[i] = strdup(r->stop[i] ? r->stop[i] : ""))) goto oom;
    if (r->constraint && r->constraint->kind != CONSTRAINT_NONE) {
        if (constraint_spec_copy(&it->constraint, r->constraint, &e)) goto oom;
        it->rq.constraint = &it->constraint;
    }
    it->rq.prompt = it->prompt;
    it->rq.sampling.logit_bias = it->bias;
    it->rq.stop = (const char *const *)it->stop;
    return it;
oom:
    server_lane_item_free(it);
    return NULL;
}

int server_lane_add(server_lane *l, const struct engine_request *r, struct err *e)
{
    if (r->id & SERVER_LANE_ID_BIT)
        return err_set(e, "server lane: request id %llu too large", (unsigned long long)r->id);
    struct server_lane_item *it = item_copy(r);
    if (!it) return err_set(e, "server lane: out of memory adding request %llu", (unsigned long long)r->id);
    pthread_mutex_lock(&l->mu);
    if (l->n_flight == l->cap_flight) {
        int32_t cap = l->cap_flight ? 2 * l->cap_flight : 64;
        uint64_t *f = realloc(l->flight, (size_t)cap * sizeof *f);
        if (!f) {
            pthread_mutex_unlock(&l->mu);
            server_lane_item_free(it);
            return err_set(e, "server lane: out of memory");
        }
        l->flight = f;
        l->cap_flight = cap;
    }
    l->flight[l->n_flight++] = it->rq.id;
    if (l->add_tail)
        l->add_tail->next = it;
    else
        l->add_head = it;
    l->add_tail = it;
    pthread_mutex_unlock(&l->mu);
    l->wake(l->wake_ctx);
    return 0;
}

/* Waits on l->cv until the clock_now() deadline (the condition variable runs on the monotonic clock). */
static void wait_until(server_lane *l, double deadline)
{
    double s = floor(deadline);
    struct timespec ts = {(time_t)s, (long)((deadline - s) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
}

void server_lane_wait(server_lane *l, double timeout)
{
    double deadline = clock_now() + timeout;
    pthread_mutex_lock(&l->mu);
    while (!l->res_head && clock_now() < deadline)
        wait_until(l, deadline);
    pthread_mutex_unlock(&l->mu);
}

int server_lane_has_work(server_lane *l)
{
    pthread_mutex_lock(&l->mu);
    int busy = l->n_flight > 0;
    pthread_mutex_unlock(&l->mu);
    return busy;
}

int server_lane_take(server_lane *l, struct engine_result *out)
{
    pthread_mutex_lock(&l->mu);
    struct lane_result *r = l->res_head;
    if (r) {
        l->res_head = r->next;
        if (!l->res_head) l->res_tail = NULL;
        l->n_results--;
    }
    pthread_mutex_unlock(&l->mu);
    if (!r) return 0;
    *out = r->r;
    out->id &= ~SERVER_LANE_ID_BIT;
    free(r);
    return 1;
}

void server_lane_get_stats(server_lane *l, struct engine_stats *st)
{
    pthread_mutex_lock(&l->mu);
    *st = l->st;
    pthread_mutex_unlock(&l->mu);
}

static int ops_add(void *ctx, const struct engine_request *r, struct err *e) { return server_lane_add(ctx, r, e); }
static int ops_step(void *ctx, struct err *e)
{
    (void)e;
    server_lane_wait(ctx, 0.1);
    return 0;
}
static int ops_has_work(void *ctx) { return server_lane_has_work(ctx); }
static int ops_take(void *ctx, struct engine_result *out) { return server_lane_take(ctx, out); }
static void ops_stats(void *ctx, struct engine_stats *st) { server_lane_get_stats(ctx, st); }

struct job_engine server_lane_ops(server_lane *l)
{
    return (struct job_engine){l, ops_add, ops_step, ops_has_work, ops_take, ops_stats};
}

void server_lane_abandon(server_lane *l)
{
    pthread_mutex_lock(&l->mu);
    l->abandoned = 1;
    while (l->res_head) {
        struct lane_result *r = l->res_head;
        l->res_head = r->next;
        engine_result_free(&r->r);
        free(r);
    }
    l->res_tail = NULL;
    l->n_results = 0;
    l->cancel_due = l->n_flight > 0;
    pthread_mutex_unlock(&l->mu);
    l->wake(l->wake_ctx);
}

void server_lane_wait_empty(server_lane *l)
{
    pthread_mutex_lock(&l->mu);
    while (l->n_flight > 0)
        wait_until(l, clock_now() + 0.1);
    l->abandoned = l->cancel_due = 0;
    pthread_mutex_unlock(&l->mu);
}

/* ---- the engine thread's side ---- */

void server_lane_take_added(server_lane *l, struct server_lane_item **added, uint64_t **cancel, int32_t *n_cancel)
{
    *cancel = NULL;
    *n_cancel = 0;
    pthread_mutex_lock(&l->mu);
    *added = l->add_head;
    for (struct server_lane_item *it = l->add_head; it; it = it->next)
        l->n_in_engine++;
    l->add_head = l->add_tail = NULL;
    if (l->cancel_due) { /* everything in flight is in the engine now (or is about to be added above) */
        *cancel = malloc((size_t)l->n_flight * sizeof **cancel);
        if (*cancel) {
            memcpy(*cancel, l->flight, (size_t)l->n_flight * sizeof **cancel);
            *n_cancel = l->n_flight;
            l->cancel_due = 0;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

void server_lane_post_result(server_lane *l, struct engine_result *res)
{
    struct lane_result *r = calloc(1, sizeof *r);
    pthread_mutex_lock(&l->mu);
    int32_t i = 0;
    while (i < l->n_flight && l->flight[i] != res->id)
        i++;
    if (i < l->n_flight) {
        l->flight[i] = l->flight[--l->n_flight];
        l->n_in_engine--;
    }
    if (r && !l->abandoned) {
        r->r = *res;
        memset(res, 0, sizeof *res);
        if (l->res_tail)
            l->res_tail->next = r;
        else
            l->res_head = r;
        l->res_tail = r;
        l->n_results++;
        r = NULL;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    free(r);
}

void server_lane_fail_all(server_lane *l, const char *msg)
{
    struct server_lane_item *added;
    uint64_t *cancel;
    int32_t n_cancel;
    server_lane_take_added(l, &added, &cancel, &n_cancel); /* now all of them count as in the engine */
    free(cancel);
    while (added) {
        struct server_lane_item *it = added;
        added = it->next;
        server_lane_item_free(it);
    }
    for (;;) {
        pthread_mutex_lock(&l->mu);
        uint64_t id = l->n_flight ? l->flight[0] : 0;
        pthread_mutex_unlock(&l->mu);
        if (!id) return;
        struct engine_result res = {.id = id, .finish = ENGINE_FINISH_ERROR, .error = strdup(msg)};
        server_lane_post_result(l, &res);
        engine_result_free(&res);
    }
}

void server_lane_post_stats(server_lane *l, const struct engine_stats *st)
{
    pthread_mutex_lock(&l->mu);
    l->st = *st;
    pthread_mutex_unlock(&l->mu);
}

int32_t server_lane_n_in_engine(server_lane *l)
{
    pthread_mutex_lock(&l->mu);
    int32_t n = l->n_in_engine;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int server_lane_check(server_lane *l, struct err *e)
{
    int rc = 0;
    pthread_mutex_lock(&l->mu);
    int32_t n_added = 0, n_res = 0;
    for (const struct server_lane_item *it = l->add_head; it; it = it->next)
        n_added++;
    for (const struct lane_result *r = l->res_head; r; r = r->next)
        n_res++;
    if (n_added + l->n_in_engine != l->n_flight)
        rc = err_set(e, "server lane: %d added + %d in the engine != %d in flight", (int)n_added, (int)l->n_in_engine,
                     (int)l->n_flight);
    else if (n_res != l->n_results)
        rc = err_set(e, "server lane: %d results listed, %d counted", (int)n_res, (int)l->n_results);
    else if (l->abandoned && n_res)
        rc = err_set(e, "server lane: %d results kept while abandoned", (int)n_res);
    for (int32_t i = 0; rc == 0 && i < l->n_flight; i++)
        for (int32_t k = i + 1; k < l->n_flight; k++)
            if (l->flight[i] == l->flight[k]) {
                rc = err_set(e, "server lane: id %llu in flight twice", (unsigned long long)l->flight[i]);
                break;
            }
    pthread_mutex_unlock(&l->mu);
    return rc;
}
