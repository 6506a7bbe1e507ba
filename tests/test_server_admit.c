/* Tests for server/server_admit: every rule of the verdict in order, the drain meter on the busy clock
 * (idle time does not dilute it, old seconds leave the window), and Retry-After from the drain rate. */
#include "server/server_admit.h"

#include <math.h>

#include "test.h"

static struct server_admit make(void)
{
    struct server_admit_limits lim = {
        .kv_tokens = 1000, .max_queue = 4, .max_queue_tokens = 800, .max_wait = 2};
    struct server_admit a;
    server_admit_init(&a, &lim);
    return a;
}

TEST(admit_rules_in_order)
{
    struct server_admit a = make();
    struct err e;
    CHECK(server_admit_check(&a, &e) == 0);
    struct server_admit_load idle = {0, 0};
    double retry;
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_LOADING, &idle, 10, 10, &retry), ADMIT_LOADING);
    CHECK(retry == 1);
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_DRAINING, &idle, 10, 10, &retry), ADMIT_DRAINING);
    CHECK_EQ_INT(server_admit_status(ADMIT_DRAINING), 503);
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &idle, 10, 10, &retry), ADMIT_OK);
    CHECK(retry == 0);
    /* KV for all but the last token: 1001 fits a pool of 1000, 1002 never can */
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &idle, 1001, 1001, &retry), ADMIT_OK);
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &idle, 1002, 1002, &retry), ADMIT_TOO_LARGE);
    CHECK_EQ_INT(server_admit_status(ADMIT_TOO_LARGE), 400);
    /* queue caps come before the wait */
    struct server_admit_load full = {4, 100};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &full, 10, 10, &retry), ADMIT_QUEUE_FULL);
    CHECK_EQ_INT(server_admit_status(ADMIT_QUEUE_FULL), 429);
    CHECK(retry == 1); /* no drain measured yet */
    struct server_admit_load heavy = {2, 700};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &heavy, 100, 101, &retry), ADMIT_QUEUE_TOKENS);
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &idle, 1001, 1001, &retry),
                 ADMIT_OK); /* over the cap, queue empty */
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &heavy, 100, 100, &retry), ADMIT_OK);
    /* without a measured rate, one pool's worth may wait */
    struct server_admit_load some = {1, 950};
    a.lim.max_queue_tokens = 5000;
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &some, 50, 50, &retry), ADMIT_OK);
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &some, 51, 51, &retry), ADMIT_WAIT);
    CHECK(retry == 1);
    CHECK_STR(server_admit_reason(ADMIT_QUEUE_TOKENS), "queue_tokens");
    CHECK_STR(server_admit_reason(ADMIT_WAIT), "wait");
    CHECK_STR(server_admit_reason(ADMIT_CONNECTIONS), "connections"); /* http's, never decided here */
    CHECK_EQ_INT(server_admit_status(ADMIT_CONNECTIONS), 503);
}

TEST(admit_meter_on_the_busy_clock)
{
    struct server_admit a = make();
    struct err e;
    CHECK(server_admit_rate(&a) == 0);
    server_admit_busy(&a, 0.5);
    server_admit_retire(&a, 100);
    CHECK(fabs(server_admit_rate(&a) - 200) < 1e-9); /* 100 tokens in 0.5 busy seconds */
    server_admit_busy(&a, 1.5);
    server_admit_retire(&a, 300);
    CHECK(fabs(server_admit_rate(&a) - 200) < 1e-9); /* 400 in 2 s */
    CHECK(server_admit_check(&a, &e) == 0);
    /* idle time is not busy time: nothing changes without server_admit_busy */
    CHECK(fabs(server_admit_rate(&a) - 200) < 1e-9);
    /* 20 busy seconds later with nothing finished: the old seconds have left the window */
    for (int i = 0; i < 20; i++)
        server_admit_busy(&a, 1.0);
    CHECK(server_admit_rate(&a) == 0);
    /* a steady 50 tokens per busy second: the rate is 50 once the window is full of it */
    for (int i = 0; i < 30; i++) {
        server_admit_busy(&a, 1.0);
        server_admit_retire(&a, 50);
        CHECK_MSG(server_admit_check(&a, &e) == 0, "%s", e.msg);
    }
    double r = server_admit_rate(&a);
    CHECK_MSG(fabs(r - 50) < 1e-6, "rate %g", r);
    server_admit_busy(&a, -1); /* ignored */
    server_admit_busy(&a, NAN);
    CHECK(server_admit_check(&a, &e) == 0);
    /* a corrupted bucket is caught */
    a.bucket_tokens[0] = -1;
    a.bucket_sec[0] = 0;
    CHECK(server_admit_check(&a, &e) != 0);
}

TEST(admit_retry_after_from_the_drain_rate)
{
    struct server_admit a = make();
    a.lim.max_queue_tokens = 100000;
    a.lim.max_queue = 100;
    server_admit_busy(&a, 2.0);
    server_admit_retire(&a, 200); /* 100 tokens per busy second */
    double retry;
    /* 2 s of waiting allowed = 200 tokens queued; 450 queued is 250 over: 3 s (2.5 rounded up) */
    struct server_admit_load l = {3, 450};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &l, 10, 10, &retry), ADMIT_WAIT);
    CHECK_MSG(retry == 3, "retry %g", retry);
    struct server_admit_load ok = {3, 200};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &ok, 10, 10, &retry), ADMIT_OK);
    /* nothing queued: admitted whatever the rate */
    struct server_admit_load none = {0, 0};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &none, 900, 900, &retry), ADMIT_OK);
    /* queue full: one slot frees when one mean-sized request (50 tokens) has drained: 1 s */
    a.lim.max_queue = 4;
    struct server_admit_load four = {4, 200};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &four, 10, 10, &retry), ADMIT_QUEUE_FULL);
    CHECK(retry == 1);
    /* a huge backlog is capped at SERVER_ADMIT_MAX_RETRY */
    a.lim.max_queue = 1000;
    struct server_admit_load huge = {500, 90000};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &huge, 10, 10, &retry), ADMIT_WAIT);
    CHECK(retry == SERVER_ADMIT_MAX_RETRY);
    /* queue tokens: 100 tokens over at 100/s */
    a.lim.max_queue_tokens = 300;
    struct server_admit_load t = {2, 250};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &t, 150, 150, &retry), ADMIT_QUEUE_TOKENS);
    CHECK(retry == 1);
    struct server_admit_load t2 = {2, 290};
    CHECK_EQ_INT(server_admit_decide(&a, SERVER_SERVING, &t2, 300, 310, &retry), ADMIT_QUEUE_TOKENS);
    CHECK(retry == 3);
}

int main(void)
{
    RUN(admit_rules_in_order);
    RUN(admit_meter_on_the_busy_clock);
    RUN(admit_retry_after_from_the_drain_rate);
    return test_summary();
}
