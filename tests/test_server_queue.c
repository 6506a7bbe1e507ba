/* Tests for server/server_queue without HTTP and without an engine: the test plays the engine thread.
 * Loading and draining answer 503; admission order and hand-over; results and stream events reach their
 * request; a client that goes away cancels (before and after the engine took the request); the queue's
 * load (running vs queued) drives admission; drains wait for or cancel work; and many client threads
 * against a fake engine thread: every admitted request completes, every other one is a 429 with a
 * Retry-After, and the invariant holds throughout (references are checked by ASan in `make asan`). */
#include "server/server_queue.h"

#include <pthread.h>
#include <unistd.h>

#include "test.h"
#include "util/clock.h"

static struct server_req *make_req(int32_t n_prompt, int32_t max_tokens, int32_t n, int stream)
{
    struct server_req *r = server_req_new(n);
    if (!r) return NULL;
    r->prompt = calloc((size_t)n_prompt, sizeof *r->prompt);
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->stream = stream;
    r->gen = genparam_defaults();
    return r;
}

static struct engine_result result_of(uint64_t id, enum engine_finish f, const char *text, int32_t n_tokens)
{
    struct engine_result res = {.id = id, .finish = f, .n_tokens = n_tokens};
    res.text = strdup(text);
    res.text_len = strlen(text);
    return res;
}

static const struct server_admit_limits lim = {
    .kv_tokens = 1000, .max_queue = 3, .max_queue_tokens = 800, .max_wait = 5};

TEST(queue_loading_admission_and_handover)
{
    server_queue *q;
    struct err e;
    CHECK(server_queue_init(&q, &e) == 0);
    struct server_req *a = make_req(10, 20, 1, 0), *b = make_req(5, 5, 2, 0);
    double retry;
    CHECK_EQ_INT(server_queue_submit(q, a, &retry), ADMIT_LOADING);
    CHECK(retry == 1);
    server_queue_open(q, &lim);
    CHECK_EQ_INT(server_queue_submit(q, a, &retry), ADMIT_OK);
    CHECK_EQ_INT(server_queue_submit(q, b, &retry), ADMIT_OK);
    CHECK(server_queue_check(q, &e) == 0);
    CHECK(a->id < b->id && a->need == 30 && b->need == 20);
    CHECK(b->choices[0].engine_id != b->choices[1].engine_id);
    CHECK_EQ_INT(server_queue_n_active(q), 2);
    struct server_req *added, *cancelled;
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0);
    CHECK(added == a && a->pending_next == b && b->pending_next == NULL && cancelled == NULL);
    CHECK(a->taken && b->taken);
    CHECK(server_queue_check(q, &e) == 0);
    /* a result per choice; the request is done after its last */
    struct engine_result res = result_of(a->choices[0].engine_id, ENGINE_FINISH_LENGTH, "hello", 20);
    server_queue_post_result(q, a, 0, &res);
    CHECK(res.text == NULL);
    CHECK(server_queue_wait_done(q, a, 0.01));
    CHECK_STR(a->choices[0].text, "hello");
    CHECK_EQ_INT(a->choices[0].n_tokens, 20);
    CHECK(!server_queue_wait_done(q, b, 0.01));
    res = result_of(b->choices[1].engine_id, ENGINE_FINISH_STOP, "x", 1);
    server_queue_post_result(q, b, 1, &res);
    CHECK(!server_queue_wait_done(q, b, 0.01));
    res = result_of(b->choices[0].engine_id, ENGINE_FINISH_STOP, "y", 2);
    server_queue_post_result(q, b, 0, &res);
    CHECK(server_queue_wait_done(q, b, 0.01));
    CHECK_EQ_INT(server_queue_n_active(q), 0);
    CHECK(server_queue_check(q, &e) == 0);
    server_queue_release(q, a);
    server_queue_release(q, b);
    /* draining: 503 */
    server_queue_drain(q);
    struct server_req *c = make_req(1, 1, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, c, &retry), ADMIT_DRAINING);
    server_queue_release(q, c);
    char *text;
    size_t len;
    CHECK(server_queue_metrics_text(q, 0, 0, &text, &len, &e) == 0);
    CHECK(strstr(text, "nightshift_requests_admitted_total 2\n"));
    CHECK(strstr(text, "nightshift_rejections_total{reason=\"loading\"} 1\n"));
    CHECK(strstr(text, "nightshift_rejections_total{reason=\"draining\"} 1\n"));
    CHECK(strstr(text, "nightshift_completions_total{finish=\"stop\"} 2\n"));
    CHECK(strstr(text, "nightshift_request_duration_seconds_count 2\n"));
    CHECK(strstr(text, "nightshift_completion_tokens_total 23\n"));
    free(text);
    server_queue_free(q);
}

static void count_notify(void *arg)
{
    (*(int *)arg)++;
}

/* The notify hook is called with each piece of news (an event, a choice's end, the request's end), and not
 * once it is cleared; rejections decided elsewhere are counted with admission's. */
TEST(queue_notify_hook)
{
    server_queue *q;
    struct err e;
    CHECK(server_queue_init(&q, &e) == 0);
    server_queue_open(q, &lim);
    int n = 0;
    struct server_req *r = make_req(3, 10, 1, 1);
    server_queue_set_notify(q, r, count_notify, &n);
    double retry;
    CHECK_EQ_INT(server_queue_submit(q, r, &retry), ADMIT_OK);
    struct server_req *added, *cancelled;
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == r);
    CHECK_EQ_INT(n, 0);
    server_queue_post_text(q, r, 0, "Once", 4);
    CHECK_EQ_INT(n, 1);
    struct engine_result res = result_of(r->choices[0].engine_id, ENGINE_FINISH_STOP, "Once upon", 4);
    server_queue_post_result(q, r, 0, &res);
    CHECK(n >= 2); /* the final event, the choice, the request */
    int seen = n;
    server_queue_set_notify(q, r, NULL, NULL);
    server_queue_cancel(q, r); /* ended already: nothing happens, nobody is told */
    CHECK_EQ_INT(n, seen);
    server_queue_release(q, r);
    /* a cancelled request that was never taken tells its waiter too */
    n = 0;
    r = make_req(3, 10, 1, 0);
    server_queue_set_notify(q, r, count_notify, &n);
    CHECK_EQ_INT(server_queue_submit(q, r, &retry), ADMIT_OK);
    server_queue_cancel(q, r);
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == NULL);
    CHECK(n >= 1);
    CHECK(server_queue_wait_done(q, r, 0.01));
    server_queue_set_notify(q, r, NULL, NULL);
    server_queue_release(q, r);
    server_queue_count_rejected(q, ADMIT_CONNECTIONS);
    server_queue_count_rejected(q, ADMIT_OK); /* not a rejection: ignored */
    server_queue_count_timeout(q, SERVER_TIMEOUT_BODY, 2);
    char *text;
    size_t len;
    CHECK(server_queue_metrics_text(q, 7, 3, &text, &len, &e) == 0);
    CHECK(strstr(text, "nightshift_rejections_total{reason=\"connections\"} 1\n"));
    CHECK(strstr(text, "nightshift_http_timeouts_total{deadline=\"body\"} 2\n"));
    CHECK(strstr(text, "nightshift_http_connections 7\n"));
    CHECK(strstr(text, "nightshift_http_requests_in_progress 3\n"));
    free(text);
    CHECK(server_queue_check(q, &e) == 0);
    server_queue_free(q);
}

TEST(queue_stream_events)
{
    server_queue *q;
    struct err e;
    CHECK(server_queue_init(&q, &e) == 0);
    server_queue_open(q, &lim);
    struct server_req *r = make_req(3, 10, 1, 1);
    double retry;
    CHECK_EQ_INT(server_queue_submit(q, r, &retry), ADMIT_OK);
    struct server_req *added, *cancelled;
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == r);
    struct server_event *ev;
    CHECK(server_queue_next_event(q, r, 0.01, &ev) == 0);
    server_queue_post_text(q, r, 0, "Once", 4);
    server_queue_post_text(q, r, 0, "Once", 4); /* nothing new: no event */
    server_queue_post_text(q, r, 0, "Once upon", 9);
    struct engine_result res = result_of(r->choices[0].engine_id, ENGINE_FINISH_STOP, "Once upon a time", 4);
    server_queue_post_result(q, r, 0, &res);
    const char *want[] = {"Once", " upon", " a time"};
    for (int i = 0; i < 3; i++) {
        CHECK(server_queue_next_event(q, r, 0.01, &ev) == 1);
        CHECK_STR(ev->text, want[i]);
        CHECK_EQ_INT(ev->finished, i == 2);
        if (i == 2) CHECK_EQ_INT(ev->finish, ENGINE_FINISH_STOP);
        server_event_free(ev);
    }
    CHECK(server_queue_next_event(q, r, 0.01, &ev) == 0);
    server_queue_release(q, r);
    /* a request that does not stream gets no events */
    r = make_req(3, 10, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, r, &retry), ADMIT_OK);
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == r);
    server_queue_post_text(q, r, 0, "abc", 3);
    CHECK(server_queue_next_event(q, r, 0.01, &ev) == 0);
    res = result_of(r->choices[0].engine_id, ENGINE_FINISH_LENGTH, "abcdef", 10);
    server_queue_post_result(q, r, 0, &res);
    CHECK(server_queue_next_event(q, r, 0.01, &ev) == 0);
    CHECK(server_queue_wait_done(q, r, 0.01));
    server_queue_release(q, r); /* the last reference, after the engine side's */
    CHECK(server_queue_check(q, &e) == 0);
    server_queue_free(q);
}

TEST(queue_cancel_before_and_after_take)
{
    server_queue *q;
    struct err e;
    CHECK(server_queue_init(&q, &e) == 0);
    server_queue_open(q, &lim);
    struct server_req *a = make_req(3, 10, 2, 1), *b = make_req(3, 10, 1, 0);
    double retry;
    CHECK_EQ_INT(server_queue_submit(q, a, &retry), ADMIT_OK);
    server_queue_cancel(q, a);  /* before the engine took it: ends at the next take, never handed over */
    server_queue_release(q, a); /* the client is gone */
    CHECK(server_queue_check(q, &e) == 0);
    struct server_req *added, *cancelled;
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0);
    CHECK(added == NULL && cancelled == NULL);
    CHECK_EQ_INT(server_queue_n_active(q), 0); /* a is freed (ASan would see a leak or a double free) */
    CHECK_EQ_INT(server_queue_submit(q, b, &retry), ADMIT_OK);
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == b);
    server_queue_cancel(q, b);
    server_queue_cancel(q, b); /* once is enough */
    CHECK(server_queue_check(q, &e) == 0);
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0);
    CHECK(added == NULL && cancelled == b && b->cancel_next == NULL);
    struct engine_result res = result_of(b->choices[0].engine_id, ENGINE_FINISH_CANCELLED, "par", 1);
    server_queue_post_result(q, b, 0, &res);
    CHECK(server_queue_wait_done(q, b, 0.01));
    CHECK_EQ_INT(b->choices[0].finish, ENGINE_FINISH_CANCELLED);
    server_queue_release(q, b);
    /* a cancellation listed for the engine thread whose request ends first is dropped from the list */
    struct server_req *c = make_req(3, 10, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, c, &retry), ADMIT_OK);
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0 && added == c);
    server_queue_cancel(q, c);
    res = result_of(c->choices[0].engine_id, ENGINE_FINISH_LENGTH, "done", 10);
    server_queue_post_result(q, c, 0, &res);
    CHECK(server_queue_check(q, &e) == 0);
    server_queue_release(q, c);
    CHECK(server_queue_take(q, 1, &added, &cancelled) == 0);
    CHECK(added == NULL && cancelled == NULL);
    server_queue_free(q);
}

TEST(queue_load_drives_admission)
{
    server_queue *q;
    struct err e;
    CHECK(server_queue_init(&q, &e) == 0);
    server_queue_open(q, &lim); /* at most 3 queued */
    struct server_req *r[6];
    double retry;
    for (int i = 0; i < 3; i++) {
        r[i] = make_req(10, 10, 1, 0);
        CHECK_EQ_INT(server_queue_submit(q, r[i], &retry), ADMIT_OK);
    }
    r[3] = make_req(10, 10, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, r[3], &retry), ADMIT_QUEUE_FULL);
    CHECK(retry >= 1);
    struct server_req *added, *cancelled;
    CHECK(server_queue_take(q, 0, &added, &cancelled) == 0);
    /* the engine runs two of them now: two queue slots free up */
    struct engine_stats st = {.n_running = 2, .n_waiting = 1};
    server_queue_post_stats(q, &st, 0.5);
    CHECK_EQ_INT(server_queue_submit(q, r[3], &retry), ADMIT_OK);
    r[4] = make_req(10, 10, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, r[4], &retry), ADMIT_OK);
    r[5] = make_req(10, 10, 1, 0);
    CHECK_EQ_INT(server_queue_submit(q, r[5], &retry), ADMIT_QUEUE_FULL);
    CHECK(server_queue_check(q, &e) == 0);
    char *text;
    size_t len;
    CHECK(server_queue_metrics_text(q, 0, 0, &text, &len, &e) == 0);
    CHECK(strstr(text, "nightshift_queue_depth 3\n") && strstr(text, "nightshift_running_sequences 2\n"));
    CHECK(strstr(text, "nightshift_rejections_total{reason=\"queue_full\"} 2\n"));
    free(text);
    /* a drain with a deadline: what is still running is cancelled */
    server_queue_drain(q);
    CHECK(server_queue_wait_idle(q, clock_now() + 0.01) == 0);
    server_queue_cancel_all(q);
    CHECK(server_queue_take(q, 1, &added, &cancelled) == 0);
    int n = 0;
    for (struct server_req *c = cancelled; c; c = c->cancel_next, n++) {
        struct engine_result res = result_of(c->choices[0].engine_id, ENGINE_FINISH_CANCELLED, "", 0);
        server_queue_post_result(q, c, 0, &res);
    }
    CHECK_EQ_INT(n, 3); /* the three the engine had; the two it had not taken ended in take */
    CHECK(server_queue_wait_idle(q, clock_now() + 0.01) == 1);
    for (int i = 0; i < 6; i++)
        server_queue_release(q, r[i]);
    CHECK(server_queue_check(q, &e) == 0);
    server_queue_free(q);
}

/* ---- many clients against a fake engine thread ---- */

#define N_CLIENTS 8
#define N_PER_CLIENT 40

struct stress {
    server_queue *q;
    int ok, rejected, bad_retry, incomplete;
    pthread_mutex_t mu;
};

/* The fake engine: finishes every choice it holds after a few loops, streaming two deltas first. */
static void *fake_engine(void *arg)
{
    struct stress *s = arg;
    enum { CAP = 4096 };
    static struct server_req *live[CAP];
    static int age[CAP];
    int n = 0;
    for (;;) {
        struct server_req *added, *cancelled;
        if (server_queue_take(s->q, n > 0, &added, &cancelled)) break;
        for (struct server_req *r = added; r && n < CAP; r = r->pending_next) {
            live[n] = r;
            age[n++] = 0;
        }
        (void)cancelled; /* clients here never cancel */
        usleep(200);
        struct engine_stats st = {.n_running = n < 4 ? n : 4, .n_waiting = n > 4 ? n - 4 : 0};
        server_queue_post_stats(s->q, &st, 0.0002);
        for (int i = 0; i < n && i < 4; i++) {
            struct server_req *r = live[i];
            if (++age[i] == 1) server_queue_post_text(s->q, r, 0, "ab", 2);
            if (age[i] < 3) continue;
            live[i] = live[--n];
            age[i] = age[n];
            struct engine_result res = result_of(r->choices[0].engine_id, ENGINE_FINISH_LENGTH, "abc", 3);
            server_queue_post_result(s->q, r, 0, &res);
            i--;
        }
    }
    return NULL;
}

static void *client(void *arg)
{
    struct stress *s = arg;
    for (int i = 0; i < N_PER_CLIENT; i++) {
        struct server_req *r = make_req(8, 8, 1, i & 1);
        double retry;
        enum admit_verdict v = server_queue_submit(s->q, r, &retry);
        int done = 0;
        if (v == ADMIT_OK) {
            done = server_queue_wait_done(s->q, r, 10.0) && r->choices[0].text_len == 3;
            struct server_event *ev;
            size_t streamed = 0;
            while (r->stream && server_queue_next_event(s->q, r, 0, &ev)) {
                streamed += ev->len;
                server_event_free(ev);
            }
            if (r->stream && streamed != 3) done = 0;
        }
        pthread_mutex_lock(&s->mu);
        if (v == ADMIT_OK)
            s->ok++, s->incomplete += !done;
        else
            s->rejected++,
                s->bad_retry += v != ADMIT_QUEUE_FULL || !(retry >= 1 && retry <= SERVER_ADMIT_MAX_RETRY);
        pthread_mutex_unlock(&s->mu);
        server_queue_release(s->q, r);
    }
    return NULL;
}

TEST(queue_many_clients)
{
    struct stress s = {0};
    struct err e;
    CHECK(server_queue_init(&s.q, &e) == 0);
    pthread_mutex_init(&s.mu, NULL);
    struct server_admit_limits l = {
        .kv_tokens = 1 << 20, .max_queue = 6, .max_queue_tokens = 1 << 20, .max_wait = 100};
    server_queue_open(s.q, &l);
    pthread_t eng, cl[N_CLIENTS];
    CHECK(pthread_create(&eng, NULL, fake_engine, &s) == 0);
    for (int i = 0; i < N_CLIENTS; i++)
        CHECK(pthread_create(&cl[i], NULL, client, &s) == 0);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(cl[i], NULL);
    CHECK(server_queue_check(s.q, &e) == 0);
    server_queue_stop(s.q);
    pthread_join(eng, NULL);
    printf("# %d admitted, %d rejected (queue_full)\n", s.ok, s.rejected);
    CHECK_EQ_INT(s.ok + s.rejected, N_CLIENTS * N_PER_CLIENT);
    CHECK_EQ_INT(s.incomplete, 0);
    CHECK_EQ_INT(s.bad_retry, 0);
    CHECK(s.ok > 0);
    CHECK_EQ_INT(server_queue_n_active(s.q), 0);
    pthread_mutex_destroy(&s.mu);
    server_queue_free(s.q);
}

int main(void)
{
    RUN(queue_loading_admission_and_handover);
    RUN(queue_stream_events);
    RUN(queue_notify_hook);
    RUN(queue_cancel_before_and_after_take);
    RUN(queue_load_drives_admission);
    RUN(queue_many_clients);
    return test_summary();
}
