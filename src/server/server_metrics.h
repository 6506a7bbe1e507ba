/* server_metrics — the server's counters and their Prometheus text (GET /metrics).
 *
 * Plain data: the owner (server_queue) updates it under its own lock and renders a copy. Counters only grow;
 * the latency histogram has fixed upper bounds (SERVER_METRICS_BOUNDS seconds, then +Inf) and each
 * observation counts in the first bucket whose bound is >= it (the text is cumulative, as Prometheus wants).
 * Generation throughput is measured from samples of the engine's generated-token counter, at most one per
 * second, over the last SERVER_METRICS_RATE_WINDOW seconds of wall time (0 when no token was generated then).
 *
 * Invariant (server_metrics_check): the histogram's count is the sum of its buckets and its sum is finite
 * and non-negative; the throughput samples are in time order with non-decreasing counts.
 */
#ifndef NS_SERVER_METRICS_H
#define NS_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "server/server_admit.h"
#include "util/err.h"

#define SERVER_METRICS_N_BOUNDS 12
#define SERVER_METRICS_BOUNDS                                                                                \
    {                                                                                                        \
        0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300                                                \
    }
#define SERVER_METRICS_RATE_WINDOW 10
#define SERVER_METRICS_N_STATUS 11 /* the HTTP statuses counted one by one, then "other" */

/* The deadlines server/http enforces on slow clients (nightshift_http_timeouts_total's labels). */
enum server_timeout {
    SERVER_TIMEOUT_HEADERS, /* a request's headers took longer than header_timeout_s: 408 */
    SERVER_TIMEOUT_BODY,    /* its body took longer than body_timeout_s: 408 */
    SERVER_TIMEOUT_IDLE,    /* a kept-alive connection sent no new request in header_timeout_s: closed */
    SERVER_TIMEOUT_COUNT
};

enum server_outcome {
    SERVER_OUTCOME_STOP,
    SERVER_OUTCOME_LENGTH,
    SERVER_OUTCOME_ERROR,
    SERVER_OUTCOME_CANCELLED,
    SERVER_OUTCOME_COUNT
};

struct server_metrics {
    int64_t admitted;
    int64_t rejected[ADMIT_VERDICT_COUNT];          /* by verdict (ADMIT_OK unused) */
    int64_t finished[SERVER_OUTCOME_COUNT];         /* completions by how they ended */
    int64_t responses[SERVER_METRICS_N_STATUS + 1]; /* by HTTP status, see server_metrics_count_status */
    int64_t timeouts[SERVER_TIMEOUT_COUNT];         /* connections cut by a deadline */
    int64_t prompt_tokens, completion_tokens;       /* of finished requests */
    int64_t latency_buckets[SERVER_METRICS_N_BOUNDS + 1]; /* last: over the largest bound */
    int64_t latency_count;
    double latency_sum;
    /* throughput samples: (time, generated tokens) */
    double rate_t[SERVER_METRICS_RATE_WINDOW + 1];
    int64_t rate_tokens[SERVER_METRICS_RATE_WINDOW + 1];
    int n_rate, rate_head; /* ring: the oldest at rate_head */
};

/* What is true now (read by the owner when rendering). */
struct server_gauges {
    enum server_state state;
    int32_t queue_depth;   /* admitted, waiting to start */
    int64_t queued_tokens; /* their reserved tokens */
    int32_t running;       /* sequences the engine runs */
    int32_t active;        /* admitted, not finished */
    int64_t kv_blocks_used, kv_blocks_cached, kv_blocks_total;
    double drain_rate;        /* server_admit_rate */
    int32_t connections;      /* open TCP connections (server/http's) */
    int32_t in_progress;      /* requests from their headers to the end of their response (server/http's) */
    int64_t gen_tokens_total; /* the engine's counter */
};

void server_metrics_init(struct server_metrics *m);
/* A request's latency from admission to its last completion, in seconds. */
void server_metrics_observe_latency(struct server_metrics *m, double seconds);
/* Counts a response by its HTTP status. */
void server_metrics_count_status(struct server_metrics *m, int status);
/* A sample of the engine's generated-token counter at time now (kept when a second has passed since the
 * last one). */
void server_metrics_sample_tokens(struct server_metrics *m, double now, int64_t gen_tokens);
/* Generated tokens per second over the window before now (0 without two samples in it). */
double server_metrics_tokens_per_s(const struct server_metrics *m, double now);

/* The Prometheus text exposition (format 0.0.4) of m and g at time now: *out malloc'd, NUL-terminated. */
int server_metrics_render(const struct server_metrics *m, const struct server_gauges *g, double now,
                          char **out, size_t *len, struct err *e);

/* Debug check of the invariant at the top. */
int server_metrics_check(const struct server_metrics *m, struct err *e);

#endif
