/* server_admit — see server_admit.h. The meter is a ring of one-second buckets on the busy clock: bucket
 * i holds the tokens retired during busy second bucket_sec[i] (i = that second mod the ring size). */
#include "server/server_admit.h"

#include <math.h>
#include <string.h>

#define N_BUCKETS (SERVER_ADMIT_WINDOW + 1)

void server_admit_init(struct server_admit *a, const struct server_admit_limits *lim)
{
    memset(a, 0, sizeof *a);
    a->lim = *lim;
    for (int i = 0; i < N_BUCKETS; i++)
        a->bucket_sec[i] = -1;
}

void server_admit_busy(struct server_admit *a, double seconds)
{
    if (seconds > 0 && isfinite(seconds)) a->busy += seconds;
}

/* The busy second being counted: busy time (s, s + 1] is second s (the clock's value after a step names the
 * second that step ended in). */
static int64_t current_second(const struct server_admit *a)
{
    int64_t c = (int64_t)ceil(a->busy) - 1;
    return c > 0 ? c : 0;
}

void server_admit_retire(struct server_admit *a, int64_t tokens)
{
    if (tokens <= 0) return;
    int64_t sec = current_second(a);
    int i = (int)(sec % N_BUCKETS);
    if (a->bucket_sec[i] != sec) { /* a stale second from an earlier lap of the ring */
        a->bucket_sec[i] = sec;
        a->bucket_tokens[i] = 0;
    }
    a->bucket_tokens[i] += (double)tokens;
}

double server_admit_rate(const struct server_admit *a)
{
    int64_t cur = current_second(a), first = cur - SERVER_ADMIT_WINDOW > 0 ? cur - SERVER_ADMIT_WINDOW : 0;
    double sum = 0;
    for (int i = 0; i < N_BUCKETS; i++)
        if (a->bucket_sec[i] >= first) sum += a->bucket_tokens[i];
    /* the window: the seconds [first, cur], the current one as far as the clock has gone */
    double span = a->busy - (double)first;
    if (sum <= 0 || span <= 1e-3) return 0;
    return sum / span;
}

/* Seconds until `tokens` more have drained at rate, as a Retry-After. */
static double retry_for(double tokens, double rate)
{
    if (rate <= 0) return 1;
    double s = ceil(tokens / rate);
    if (!(s >= 1)) s = 1;
    return s > SERVER_ADMIT_MAX_RETRY ? SERVER_ADMIT_MAX_RETRY : s;
}

enum admit_verdict server_admit_decide(const struct server_admit *a, enum server_state s,
                                       const struct server_admit_load *l, int64_t per_seq, int64_t need,
                                       double *retry_after)
{
    const struct server_admit_limits *lim = &a->lim;
    *retry_after = 0;
    if (s != SERVER_SERVING) {
        *retry_after = 1;
        return s == SERVER_LOADING ? ADMIT_LOADING : ADMIT_DRAINING;
    }
    if (per_seq - 1 > lim->kv_tokens)
        return ADMIT_TOO_LARGE; /* the engine's test: KV for all but the last token */
    double rate = server_admit_rate(a);
    int64_t queued = l->n_queued > 0 ? l->n_queued : 0, tokens = l->queued_tokens > 0 ? l->queued_tokens : 0;
    if (queued + 1 > lim->max_queue) {
        /* a slot frees when the oldest queued requests start: (queued + 1 - max) of them, at their mean size
         */
        double mean = queued ? (double)tokens / (double)queued : (double)need;
        *retry_after = retry_for((double)(queued + 1 - lim->max_queue) * mean, rate);
        return ADMIT_QUEUE_FULL;
    }
    if (queued > 0 && tokens + need > lim->max_queue_tokens) {
        *retry_after = retry_for((double)(tokens + need - lim->max_queue_tokens), rate);
        return ADMIT_QUEUE_TOKENS;
    }
    if (queued == 0) return ADMIT_OK;
    if (rate > 0) {
        double bound = lim->max_wait * rate; /* tokens that drain within max_wait */
        if ((double)tokens > bound) {
            *retry_after = retry_for((double)tokens - bound, rate);
            return ADMIT_WAIT;
        }
    } else if (tokens + need > lim->kv_tokens) {
        *retry_after = 1;
        return ADMIT_WAIT;
    }
    return ADMIT_OK;
}

const char *server_admit_reason(enum admit_verdict v)
{
    static const char *const names[ADMIT_VERDICT_COUNT] = {
        "ok", "loading", "draining", "too_large", "queue_full", "queue_tokens", "wait", "connections"};
    return (unsigned)v < ADMIT_VERDICT_COUNT ? names[v] : "?";
}

int server_admit_status(enum admit_verdict v)
{
    switch (v) {
    case ADMIT_OK:
        return 200;
    case ADMIT_LOADING:
    case ADMIT_DRAINING:
    case ADMIT_CONNECTIONS:
        return 503;
    case ADMIT_TOO_LARGE:
        return 400;
    default:
        return 429;
    }
}

int server_admit_check(const struct server_admit *a, struct err *e)
{
    const struct server_admit_limits *l = &a->lim;
    if (l->kv_tokens < 1 || l->max_queue < 1 || l->max_queue_tokens < 1 || !(l->max_wait > 0))
        return err_set(
            e,
            "server_admit: limits must be positive (kv_tokens %lld, max_queue %d, max_queue_tokens %lld, "
            "max_wait %g)",
            (long long)l->kv_tokens, (int)l->max_queue, (long long)l->max_queue_tokens, l->max_wait);
    if (!(a->busy >= 0) || !isfinite(a->busy)) return err_set(e, "server_admit: busy clock %g", a->busy);
    int64_t now = current_second(a);
    for (int i = 0; i < N_BUCKETS; i++) {
        int64_t s = a->bucket_sec[i];
        if (s < 0) continue;
        if (s > now || s % N_BUCKETS != i)
            return err_set(e, "server_admit: bucket %d holds second %lld at busy second %lld", i,
                           (long long)s, (long long)now);
        if (!(a->bucket_tokens[i] >= 0) || !isfinite(a->bucket_tokens[i]))
            return err_set(e, "server_admit: bucket %d holds %g tokens", i, a->bucket_tokens[i]);
    }
    return 0;
}
