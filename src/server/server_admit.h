/* server_admit — the server's admission control, as arithmetic: may a request join the work in flight, and
 * if not, when should its client come back. Pure: no locks, no clock of its own (the caller, server_queue,
 * holds its lock and passes the figures), so every rule is unit-tested without threads or HTTP.
 *
 * A request reserves need = n x (prompt + max_tokens) tokens: the KV it can use at most. It is admitted
 * when all of these hold (else the verdict says which failed, in this order):
 *   1. the server is serving (not loading, not draining)                              -> else 503
 *   2. prompt + max_tokens fits the whole KV pool (as engine_add tests it): it can run -> else 400
 *   3. queued requests (admitted, not yet running) stay within max_queue              -> else 429
 *   4. queued tokens + need stay within max_queue_tokens (an empty queue takes any
 *      request that fits the pool)                                                   -> else 429
 *   5. the wait is bounded: with nothing queued it starts at once; else the queued
 *      tokens ahead of it drain within max_wait at the measured drain rate (without a
 *      measurement yet: queued tokens + need fit one KV pool)                         -> else 429
 * One more verdict is not decided here: ADMIT_CONNECTIONS (503) is server/http's limit on requests in progress
 * (--max-connections), a verdict so that its rejections are counted and labelled with the others.
 * The drain rate is reserved tokens retired (requests finished, their whole reservation released, early
 * stops included) per second of engine busy time, over the last SERVER_ADMIT_WINDOW busy seconds: idle
 * time neither dilutes nor ages it (busy time (s, s + 1] is second s), so a burst after a quiet hour is
 * judged by the last busy period. Retry-After is the time, at that rate, until enough has drained for the
 * failed rule to hold again: rounded up to whole seconds, at least 1 and at most SERVER_ADMIT_MAX_RETRY; 1
 * without a measurement.
 *
 * Invariant (server_admit_check): every meter bucket in use holds a busy second no later than the clock's
 * current one, in the slot of that second; its sum is finite and non-negative; the limits are positive.
 */
#ifndef NS_SERVER_ADMIT_H
#define NS_SERVER_ADMIT_H

#include <stdint.h>

#include "util/err.h"

#define SERVER_ADMIT_WINDOW 8     /* busy seconds the drain rate is measured over */
#define SERVER_ADMIT_MAX_RETRY 60 /* seconds: the longest Retry-After given */

enum server_state { SERVER_LOADING, SERVER_SERVING, SERVER_DRAINING };

enum admit_verdict {
    ADMIT_OK,
    ADMIT_LOADING,      /* 503 */
    ADMIT_DRAINING,     /* 503 */
    ADMIT_TOO_LARGE,    /* 400: prompt + max_tokens is more than the whole KV pool */
    ADMIT_QUEUE_FULL,   /* 429: max_queue requests already wait */
    ADMIT_QUEUE_TOKENS, /* 429: max_queue_tokens would be passed */
    ADMIT_WAIT,         /* 429: the wait would pass max_wait */
    ADMIT_CONNECTIONS,  /* 503: http's max_connections requests are in progress (not decided here) */
    ADMIT_VERDICT_COUNT
};

struct server_admit_limits {
    int64_t kv_tokens;        /* tokens in the KV pool (blocks x block size) */
    int32_t max_queue;        /* admitted requests not yet running, at most (>= 1) */
    int64_t max_queue_tokens; /* their reserved tokens, at most (>= 1) */
    double max_wait;          /* seconds a queued request may be expected to wait to start (> 0) */
};

/* What is waiting now (admitted, not yet running). */
struct server_admit_load {
    int32_t n_queued;
    int64_t queued_tokens;
};

struct server_admit {
    struct server_admit_limits lim;
    double busy;                                 /* engine busy seconds in total (the meter's clock) */
    int64_t bucket_sec[SERVER_ADMIT_WINDOW + 1]; /* busy second each bucket holds (-1: empty) */
    double bucket_tokens[SERVER_ADMIT_WINDOW + 1];
};

/* Limits must be positive (server_admit_check says which is not). */
void server_admit_init(struct server_admit *a, const struct server_admit_limits *lim);
/* The engine was busy for seconds more (a step's duration). */
void server_admit_busy(struct server_admit *a, double seconds);
/* A request finished: its reservation of tokens is released (drained). */
void server_admit_retire(struct server_admit *a, int64_t tokens);
/* Reserved tokens drained per busy second over the window; 0 when nothing was measured. */
double server_admit_rate(const struct server_admit *a);
/* The verdict for a request reserving need tokens, each completion prompt + max_tokens = per_seq, in state
 * s with load l. *retry_after: seconds for a 429 (see the top), 1 for a 503, 0 otherwise. */
enum admit_verdict server_admit_decide(const struct server_admit *a, enum server_state s,
                                       const struct server_admit_load *l, int64_t per_seq, int64_t need,
                                       double *retry_after);
/* "ok", "loading", "draining", "too_large", "queue_full", "queue_tokens", "wait", "connections" (metrics
 * labels). */
const char *server_admit_reason(enum admit_verdict v);
/* The HTTP status of a verdict: 200, 503, 400 or 429. */
int server_admit_status(enum admit_verdict v);

/* Debug check of the invariant at the top. */
int server_admit_check(const struct server_admit *a, struct err *e);

#endif
