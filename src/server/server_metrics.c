/* server_metrics — see server_metrics.h. */
#include "server/server_metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double bounds[SERVER_METRICS_N_BOUNDS] = SERVER_METRICS_BOUNDS;
static const int statuses[SERVER_METRICS_N_STATUS] = {200, 400, 401, 404, 405, 408, 413, 429, 431, 500, 503};

void server_metrics_init(struct server_metrics *m)
{
    memset(m, 0, sizeof *m);
}

void server_metrics_observe_latency(struct server_metrics *m, double seconds)
{
    if (!(seconds >= 0) || !isfinite(seconds)) seconds = 0;
    int i = 0;
    while (i < SERVER_METRICS_N_BOUNDS && seconds > bounds[i])
        i++;
    m->latency_buckets[i]++;
    m->latency_count++;
    m->latency_sum += seconds;
}

void server_metrics_count_status(struct server_metrics *m, int status)
{
    int i = 0;
    while (i < SERVER_METRICS_N_STATUS && statuses[i] != status)
        i++;
    m->responses[i]++;
}

void server_metrics_sample_tokens(struct server_metrics *m, double now, int64_t gen_tokens)
{
    enum { CAP = SERVER_METRICS_RATE_WINDOW + 1 };
    if (m->n_rate > 0) {
        int last = (m->rate_head + m->n_rate - 1) % CAP;
        if (now - m->rate_t[last] < 1.0) return;
    }
    if (m->n_rate == CAP) { /* drop the oldest */
        m->rate_head = (m->rate_head + 1) % CAP;
        m->n_rate--;
    }
    int at = (m->rate_head + m->n_rate) % CAP;
    m->rate_t[at] = now;
    m->rate_tokens[at] = gen_tokens;
    m->n_rate++;
}

double server_metrics_tokens_per_s(const struct server_metrics *m, double now)
{
    enum { CAP = SERVER_METRICS_RATE_WINDOW + 1 };
    int first = -1, last = -1;
    for (int k = 0; k < m->n_rate; k++) {
        int i = (m->rate_head + k) % CAP;
        if (now - m->rate_t[i] > SERVER_METRICS_RATE_WINDOW) continue;
        if (first < 0) first = i;
        last = i;
    }
    if (first < 0 || first == last) return 0;
    return (double)(m->rate_tokens[last] - m->rate_tokens[first]) / (m->rate_t[last] - m->rate_t[first]);
}

/* A growing text buffer; a failed append leaves it marked failed. */
struct text {
    char *buf;
    size_t len, cap;
    int failed;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
    if (t->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->failed = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

static void metric(struct text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_gauges(struct text *t, const struct server_metrics *m, const struct server_gauges *g,
                          double now)
{
    metric(t, "nightshift_state", "gauge", "0 loading, 1 serving, 2 draining.");
    put(t, "nightshift_state %d\n", (int)g->state);
    metric(t, "nightshift_queue_depth", "gauge", "Requests admitted and waiting to start.");
    put(t, "nightshift_queue_depth %d\n", (int)g->queue_depth);
    metric(t, "nightshift_queued_tokens", "gauge",
           "Tokens (prompt + max_tokens) reserved by queued requests.");
    put(t, "nightshift_queued_tokens %lld\n", (long long)g->queued_tokens);
    metric(t, "nightshift_running_sequences", "gauge", "Sequences the engine is running.");
    put(t, "nightshift_running_sequences %d\n", (int)g->running);
    metric(t, "nightshift_active_requests", "gauge", "Requests admitted and not finished.");
    put(t, "nightshift_active_requests %d\n", (int)g->active);
    metric(t, "nightshift_kv_blocks", "gauge", "KV cache blocks by state.");
    put(t, "nightshift_kv_blocks{state=\"used\"} %lld\n", (long long)g->kv_blocks_used);
    put(t, "nightshift_kv_blocks{state=\"cached\"} %lld\n", (long long)g->kv_blocks_cached);
    put(t, "nightshift_kv_blocks{state=\"total\"} %lld\n", (long long)g->kv_blocks_total);
    metric(t, "nightshift_kv_usage_ratio", "gauge", "KV blocks used by running sequences over all blocks.");
    put(t, "nightshift_kv_usage_ratio %.6f\n",
        g->kv_blocks_total > 0 ? (double)g->kv_blocks_used / (double)g->kv_blocks_total : 0.0);
    metric(t, "nightshift_generation_tokens_per_second", "gauge", "Generated tokens per second, last 10 s.");
    put(t, "nightshift_generation_tokens_per_second %.3f\n", server_metrics_tokens_per_s(m, now));
    metric(t, "nightshift_drain_rate_tokens_per_second", "gauge",
           "Reserved tokens released per busy second (admission control's measure).");
    put(t, "nightshift_drain_rate_tokens_per_second %.3f\n", g->drain_rate);
    metric(t, "nightshift_http_connections", "gauge", "Open TCP connections.");
    put(t, "nightshift_http_connections %d\n", (int)g->connections);
    metric(t, "nightshift_http_requests_in_progress", "gauge",
           "Requests from their headers to the end of their response (--max-connections bounds them).");
    put(t, "nightshift_http_requests_in_progress %d\n", (int)g->in_progress);
    metric(t, "nightshift_generated_tokens_total", "counter", "Tokens generated by the engine.");
    put(t, "nightshift_generated_tokens_total %lld\n", (long long)g->gen_tokens_total);
}

static void render_counters(struct text *t, const struct server_metrics *m)
{
    static const char *const outcomes[SERVER_OUTCOME_COUNT] = {"stop", "length", "error", "cancelled"};
    metric(t, "nightshift_requests_admitted_total", "counter", "Requests admitted.");
    put(t, "nightshift_requests_admitted_total %lld\n", (long long)m->admitted);
    metric(t, "nightshift_rejections_total", "counter", "Requests refused by admission control, by reason.");
    for (int v = ADMIT_OK + 1; v < ADMIT_VERDICT_COUNT; v++)
        put(t, "nightshift_rejections_total{reason=\"%s\"} %lld\n",
            server_admit_reason((enum admit_verdict)v), (long long)m->rejected[v]);
    metric(t, "nightshift_completions_total", "counter", "Completions finished, by how they ended.");
    for (int o = 0; o < SERVER_OUTCOME_COUNT; o++)
        put(t, "nightshift_completions_total{finish=\"%s\"} %lld\n", outcomes[o], (long long)m->finished[o]);
    metric(t, "nightshift_http_responses_total", "counter", "HTTP responses by status.");
    for (int i = 0; i <= SERVER_METRICS_N_STATUS; i++) {
        if (i < SERVER_METRICS_N_STATUS)
            put(t, "nightshift_http_responses_total{code=\"%d\"} ", statuses[i]);
        else
            put(t, "nightshift_http_responses_total{code=\"other\"} ");
        put(t, "%lld\n", (long long)m->responses[i]);
    }
    static const char *const deadlines[SERVER_TIMEOUT_COUNT] = {"headers", "body", "idle"};
    metric(t, "nightshift_http_timeouts_total", "counter", "Connections cut by a deadline, by which.");
    for (int d = 0; d < SERVER_TIMEOUT_COUNT; d++)
        put(t, "nightshift_http_timeouts_total{deadline=\"%s\"} %lld\n", deadlines[d], (long long)m->timeouts[d]);
    metric(t, "nightshift_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
    put(t, "nightshift_prompt_tokens_total %lld\n", (long long)m->prompt_tokens);
    metric(t, "nightshift_completion_tokens_total", "counter", "Completion tokens of finished requests.");
    put(t, "nightshift_completion_tokens_total %lld\n", (long long)m->completion_tokens);
    metric(t, "nightshift_request_duration_seconds", "histogram",
           "Admission to the last token, per request.");
    int64_t cum = 0;
    for (int i = 0; i < SERVER_METRICS_N_BOUNDS; i++) {
        cum += m->latency_buckets[i];
        put(t, "nightshift_request_duration_seconds_bucket{le=\"%g\"} %lld\n", bounds[i], (long long)cum);
    }
    cum += m->latency_buckets[SERVER_METRICS_N_BOUNDS];
    put(t, "nightshift_request_duration_seconds_bucket{le=\"+Inf\"} %lld\n", (long long)cum);
    put(t, "nightshift_request_duration_seconds_sum %.6f\n", m->latency_sum);
    put(t, "nightshift_request_duration_seconds_count %lld\n", (long long)m->latency_count);
}

int server_metrics_render(const struct server_metrics *m, const struct server_gauges *g, double now,
                          char **out, size_t *len, struct err *e)
{
    struct text t = {malloc(4096), 0, 4096, 0};
    if (!t.buf) return err_set(e, "metrics: out of memory");
    render_gauges(&t, m, g, now);
    render_counters(&t, m);
    if (t.failed) {
        free(t.buf);
        return err_set(e, "metrics: out of memory");
    }
    *out = t.buf;
    *len = t.len;
    return 0;
}

int server_metrics_check(const struct server_metrics *m, struct err *e)
{
    int64_t sum = 0;
    for (int i = 0; i <= SERVER_METRICS_N_BOUNDS; i++) {
        if (m->latency_buckets[i] < 0) return err_set(e, "metrics: latency bucket %d is negative", i);
        sum += m->latency_buckets[i];
    }
    if (sum != m->latency_count)
        return err_set(e, "metrics: latency count %lld but the buckets hold %lld",
                       (long long)m->latency_count, (long long)sum);
    if (!(m->latency_sum >= 0) || !isfinite(m->latency_sum))
        return err_set(e, "metrics: latency sum %g", m->latency_sum);
    enum { CAP = SERVER_METRICS_RATE_WINDOW + 1 };
    if (m->n_rate < 0 || m->n_rate > CAP || m->rate_head < 0 || m->rate_head >= CAP)
        return err_set(e, "metrics: rate ring head %d count %d", m->rate_head, m->n_rate);
    for (int k = 1; k < m->n_rate; k++) {
        int a = (m->rate_head + k - 1) % CAP, b = (m->rate_head + k) % CAP;
        if (m->rate_t[b] < m->rate_t[a] || m->rate_tokens[b] < m->rate_tokens[a])
            return err_set(e, "metrics: rate sample %d goes back in time or count", k);
    }
    return 0;
}
