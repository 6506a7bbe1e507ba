/* Tests for server/server_metrics: the histogram (bucket edges, cumulative text), counters by label, the
 * throughput window, and the Prometheus text. */
#include "server/server_metrics.h"

#include "test.h"

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

TEST(metrics_histogram_and_counters)
{
    struct server_metrics m;
    struct err e;
    server_metrics_init(&m);
    server_metrics_observe_latency(&m, 0.05); /* on the bound: counts in le=0.05 */
    server_metrics_observe_latency(&m, 0.07);
    server_metrics_observe_latency(&m, 1000); /* over every bound: only +Inf */
    server_metrics_observe_latency(&m, -1);   /* clamped to 0 */
    CHECK(server_metrics_check(&m, &e) == 0);
    m.admitted = 7;
    m.rejected[ADMIT_QUEUE_FULL] = 3;
    m.rejected[ADMIT_DRAINING] = 1;
    m.finished[SERVER_OUTCOME_LENGTH] = 2;
    server_metrics_count_status(&m, 429);
    server_metrics_count_status(&m, 429);
    server_metrics_count_status(&m, 418);
    struct server_gauges g = {.state = SERVER_SERVING,
                              .queue_depth = 5,
                              .queued_tokens = 123,
                              .running = 2,
                              .kv_blocks_used = 10,
                              .kv_blocks_total = 40,
                              .drain_rate = 12.5};
    char *text;
    size_t len;
    CHECK(server_metrics_render(&m, &g, 100.0, &text, &len, &e) == 0);
    CHECK_EQ_INT(strlen(text), len);
    const char *want[] = {
        "nightshift_queue_depth 5",
        "nightshift_queued_tokens 123",
        "nightshift_running_sequences 2",
        "nightshift_kv_usage_ratio 0.250000",
        "nightshift_drain_rate_tokens_per_second 12.500",
        "nightshift_requests_admitted_total 7",
        "nightshift_rejections_total{reason=\"queue_full\"} 3",
        "nightshift_rejections_total{reason=\"draining\"} 1",
        "nightshift_rejections_total{reason=\"wait\"} 0",
        "nightshift_completions_total{finish=\"length\"} 2",
        "nightshift_http_responses_total{code=\"429\"} 2",
        "nightshift_http_responses_total{code=\"other\"} 1",
        "nightshift_request_duration_seconds_bucket{le=\"0.05\"} 2",
        "nightshift_request_duration_seconds_bucket{le=\"0.1\"} 3",
        "nightshift_request_duration_seconds_bucket{le=\"300\"} 3",
        "nightshift_request_duration_seconds_bucket{le=\"+Inf\"} 4",
        "nightshift_request_duration_seconds_count 4",
        "# TYPE nightshift_request_duration_seconds histogram",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(has_line(text, want[i]), "no line '%s'", want[i]);
    free(text);
    m.latency_count++;
    CHECK(server_metrics_check(&m, &e) != 0);
}

TEST(metrics_tokens_per_second)
{
    struct server_metrics m;
    struct err e;
    server_metrics_init(&m);
    CHECK(server_metrics_tokens_per_s(&m, 0) == 0);
    server_metrics_sample_tokens(&m, 10.0, 0);
    server_metrics_sample_tokens(&m, 10.5, 999); /* within a second of the last: not kept */
    server_metrics_sample_tokens(&m, 11.0, 100);
    CHECK(server_metrics_tokens_per_s(&m, 11.0) == 100);
    for (int i = 2; i <= 30; i++) {
        server_metrics_sample_tokens(&m, 10.0 + i, 100 * (int64_t)i);
        CHECK(server_metrics_check(&m, &e) == 0);
    }
    CHECK(server_metrics_tokens_per_s(&m, 40.0) == 100);
    CHECK(server_metrics_tokens_per_s(&m, 100.0) == 0); /* idle for a minute: nothing in the window */
}

int main(void)
{
    RUN(metrics_histogram_and_counters);
    RUN(metrics_tokens_per_second);
    return test_summary();
}
