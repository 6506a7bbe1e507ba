/* dist — see dist.h: the protocol, who owns what, and the invariant. This file holds the serialization (always
 * built) and, with NS_MPI, the worker loop and the coordinator's serving. Messages are byte buffers of
 * fixed-width fields in the host's byte order: every rank runs the same binary (one build, one cluster). */
#include "jobs/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "jobs/dist_int.h"

/* --- byte buffers --- */

void dist_buf_free(struct dist_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int dist_buf_put(struct dist_buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static void buf_get(struct dist_buf *b, void *dst, size_t n)
{
    if (b->bad || n > b->n - b->at) {
        b->bad = 1;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, b->p + b->at, n);
    b->at += n;
}

int dist_buf_put_i64(struct dist_buf *b, int64_t v) { return dist_buf_put(b, &v, sizeof v); }

int64_t dist_buf_get_i64(struct dist_buf *b)
{
    int64_t v;
    buf_get(b, &v, sizeof v);
    return v;
}

/* A length-prefixed byte string; NULL is length -1. */
static int buf_put_str(struct dist_buf *b, const char *s, size_t n)
{
    if (!s) return dist_buf_put_i64(b, -1);
    return dist_buf_put_i64(b, (int64_t)n) || dist_buf_put(b, s, n);
}

/* A malloc'd NUL-terminated copy (NULL for -1); *len its length. 0, or -1 on a short buffer or no memory. */
static int buf_get_str(struct dist_buf *b, char **s, size_t *len)
{
    int64_t n = dist_buf_get_i64(b);
    *s = NULL;
    if (len) *len = 0;
    if (n < 0) return b->bad ? -1 : 0;
    if ((uint64_t)n > b->n - b->at) return b->bad = 1, -1;
    *s = malloc((size_t)n + 1);
    if (!*s) return -1;
    buf_get(b, *s, (size_t)n);
    (*s)[n] = '\0';
    if (len) *len = (size_t)n;
    return 0;
}

/* --- requests and results --- */

int dist_pack_request(struct dist_buf *b, const struct engine_request *rq)
{
    struct sampler_params sp = rq->sampling;
    sp.logit_bias = NULL;
    int rc = dist_buf_put_i64(b, (int64_t)rq->id) || dist_buf_put_i64(b, rq->n_prompt) ||
             dist_buf_put(b, rq->prompt, (size_t)rq->n_prompt * sizeof *rq->prompt) ||
             dist_buf_put_i64(b, rq->max_tokens) || dist_buf_put(b, &sp, sizeof sp) ||
             dist_buf_put(b, rq->sampling.logit_bias, (size_t)sp.n_logit_bias * sizeof *rq->sampling.logit_bias) ||
             dist_buf_put_i64(b, rq->n_stop) || dist_buf_put_i64(b, rq->ignore_eos) ||
             dist_buf_put_i64(b, rq->logprobs) || dist_buf_put_i64(b, rq->prompt_logprobs) ||
             dist_buf_put_i64(b, rq->prompt_logprobs_from) || dist_buf_put_i64(b, rq->top_logprobs);
    for (int32_t i = 0; !rc && i < rq->n_stop; i++) rc = buf_put_str(b, rq->stop[i], strlen(rq->stop[i]));
    return rc ? -1 : 0;
}

void dist_request_free(struct engine_request *rq)
{
    free((void *)rq->prompt);
    free((void *)rq->sampling.logit_bias);
    for (int32_t i = 0; rq->stop && i < rq->n_stop; i++) free((void *)rq->stop[i]);
    free((void *)rq->stop);
    memset(rq, 0, sizeof *rq);
}

/* A count read from a message: in [0, max] and its items fit in what is left of the buffer. */
static int32_t get_count(struct dist_buf *b, int64_t max, size_t item)
{
    int64_t n = dist_buf_get_i64(b);
    if (b->bad || n < 0 || n > max || (uint64_t)n * item > b->n - b->at) {
        b->bad = 1;
        return 0;
    }
    return (int32_t)n;
}

int dist_unpack_request(struct dist_buf *b, struct engine_request *rq, struct err *e)
{
    memset(rq, 0, sizeof *rq);
    rq->id = (uint64_t)dist_buf_get_i64(b);
    rq->n_prompt = get_count(b, INT32_MAX, sizeof(int32_t));
    int32_t *prompt = malloc(((size_t)rq->n_prompt + 1) * sizeof *prompt);
    rq->prompt = prompt;
    if (!prompt) goto oom;
    buf_get(b, prompt, (size_t)rq->n_prompt * sizeof *prompt);
    rq->max_tokens = (int32_t)dist_buf_get_i64(b);
    buf_get(b, &rq->sampling, sizeof rq->sampling);
    rq->sampling.logit_bias = NULL;
    int64_t nb = rq->sampling.n_logit_bias;
    if (nb < 0 || (uint64_t)nb * sizeof(struct logit_bias) > b->n - b->at) goto bad;
    struct logit_bias *bias = malloc(((size_t)nb + 1) * sizeof *bias);
    rq->sampling.logit_bias = bias;
    if (!bias) goto oom;
    buf_get(b, bias, (size_t)nb * sizeof *bias);
    rq->n_stop = get_count(b, 1 << 16, sizeof(int64_t));
    rq->ignore_eos = (int)dist_buf_get_i64(b);
    rq->logprobs = (int)dist_buf_get_i64(b);
    rq->prompt_logprobs = (int)dist_buf_get_i64(b);
    rq->prompt_logprobs_from = (int32_t)dist_buf_get_i64(b);
    rq->top_logprobs = (int32_t)dist_buf_get_i64(b); /* checked by the engine like any request's */
    char **stop = calloc((size_t)rq->n_stop + 1, sizeof *stop);
    rq->stop = (const char *const *)stop;
    if (!stop) goto oom;
    for (int32_t i = 0; i < rq->n_stop; i++)
        if (buf_get_str(b, &stop[i], NULL) != 0 || !stop[i]) goto bad;
    if (b->bad) goto bad;
    return 0;
bad:
    dist_request_free(rq);
    return err_set(e, "dist: a request message is truncated or malformed (byte %zu of %zu)", b->at, b->n);
oom:
    dist_request_free(rq);
    return err_set(e, "dist: out of memory reading a request");
}

/* Logprob entries: a count (-1: none) and the entries' bytes (ranks run the same binary). */
static int put_logprobs(struct dist_buf *b, const struct logprob_entry *en, int32_t n)
{
    return dist_buf_put_i64(b, en ? n : -1) || (en && dist_buf_put(b, en, (size_t)n * sizeof *en));
}

static int get_logprobs(struct dist_buf *b, struct logprob_entry **out, int32_t want)
{
    *out = NULL;
    int64_t n = dist_buf_get_i64(b);
    if (n < 0) return b->bad;
    if (n != want || (uint64_t)n * sizeof **out > b->n - b->at || !(*out = malloc(((size_t)n + 1) * sizeof **out)))
        return -1;
    buf_get(b, *out, (size_t)n * sizeof **out);
    for (int64_t i = 0; i < n; i++)
        if ((*out)[i].n_top < 0 || (*out)[i].n_top > LOGPROB_MAX_TOP) return -1;
    return b->bad;
}

int dist_pack_result(struct dist_buf *b, const struct engine_result *r)
{
    double latency = r->t_finished - r->t_added;
    return (dist_buf_put_i64(b, (int64_t)r->id) || dist_buf_put_i64(b, r->finish) ||
            buf_put_str(b, r->text, r->text_len) || buf_put_str(b, r->error, r->error ? strlen(r->error) : 0) ||
            dist_buf_put_i64(b, r->n_tokens) || dist_buf_put_i64(b, r->n_prompt) ||
            dist_buf_put_i64(b, r->n_prompt_cached) || dist_buf_put_i64(b, r->n_preempted) ||
            dist_buf_put(b, &latency, sizeof latency) || put_logprobs(b, r->logprobs, r->n_tokens) ||
            put_logprobs(b, r->prompt_logprobs, r->n_prompt))
               ? -1
               : 0;
}

int dist_unpack_result(struct dist_buf *b, struct engine_result *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->id = (uint64_t)dist_buf_get_i64(b);
    int64_t finish = dist_buf_get_i64(b);
    if (buf_get_str(b, &r->text, &r->text_len) != 0 || buf_get_str(b, &r->error, NULL) != 0) goto bad;
    r->n_tokens = (int32_t)dist_buf_get_i64(b);
    r->n_prompt = (int32_t)dist_buf_get_i64(b);
    r->n_prompt_cached = (int32_t)dist_buf_get_i64(b);
    r->n_preempted = (int32_t)dist_buf_get_i64(b);
    double latency;
    buf_get(b, &latency, sizeof latency);
    r->t_finished = latency;
    if (get_logprobs(b, &r->logprobs, r->n_tokens) || get_logprobs(b, &r->prompt_logprobs, r->n_prompt)) goto bad;
    if (b->bad || finish < ENGINE_FINISH_STOP || finish > ENGINE_FINISH_CANCELLED) goto bad;
    r->finish = (enum engine_finish)finish;
    if (!r->text && !(r->text = strdup(""))) goto bad;
    return 0;
bad:
    engine_result_free(r);
    return err_set(e, "dist: a result message is truncated or malformed (byte %zu of %zu)", b->at, b->n);
}

int dist_pack_stats(struct dist_buf *b, const struct dist_rank_stats *s) { return dist_buf_put(b, s, sizeof *s); }

void dist_unpack_stats(struct dist_buf *b, struct dist_rank_stats *s) { buf_get(b, s, sizeof *s); }

/* --- figures --- */

int64_t dist_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (int64_t)ru.ru_maxrss * 1024;
}

static json_t *rank_json(int rank, const struct dist_rank_stats *s)
{
    double tok = (double)(s->prompt_tokens + s->gen_tokens);
    return json_pack("{s:i, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I}", "rank", rank, "requests",
                     (json_int_t)s->requests, "prompt_tokens", (json_int_t)s->prompt_tokens, "prompt_tokens_cached",
                     (json_int_t)s->prompt_tokens_cached, "gen_tokens", (json_int_t)s->gen_tokens, "wall_s",
                     s->wall_s, "busy_s", s->busy_s, "busy_fraction", s->wall_s > 0 ? s->busy_s / s->wall_s : 0.0,
                     "tok_s", s->wall_s > 0 ? tok / s->wall_s : 0.0, "gen_tok_s",
                     s->wall_s > 0 ? (double)s->gen_tokens / s->wall_s : 0.0, "peak_rss_bytes",
                     (json_int_t)s->peak_rss_bytes, "kv_blocks_peak", (json_int_t)s->kv_blocks_peak,
                     "kv_blocks_total", (json_int_t)s->kv_blocks_total);
}

/* --- the process group --- */

int dist_rank(const dist *d) { return d ? d->rank : 0; }
int dist_size(const dist *d) { return d ? d->size : 1; }
int dist_local_rank(const dist *d) { return d ? d->local_rank : 0; }
int dist_local_size(const dist *d) { return d ? d->local_size : 1; }
int dist_done(const dist *d) { return !d || d->n_final == d->size - 1; }
double dist_serve_seconds(const dist *d) { return d ? d->t_serve : 0; }

void dist_pick_resources(const dist *d, struct runtime_params *p)
{
    if (!d || d->local_size < 2) return;
    p->device += d->local_rank;
    if (p->threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        p->threads = cores > d->local_size ? (int)(cores / d->local_size) : 1;
    }
}

int dist_share_memory(const dist *d, struct runtime *rt, struct err *e)
{
    if (!d || d->local_size < 2 || rt->caps.gpu || !rt->budget.automatic) return 0;
    uint64_t share = rt->budget.kv_free / (uint64_t)d->local_size;
    if (share >= rt->budget.kv_bytes) return 0;
    engine_free(rt->eng);
    rt->eng = NULL;
    if (runtime_plan_kv(rt, share, UINT64_MAX, e) || runtime_new_engine(rt, &rt->ep, &rt->eng, e)) {
        runtime_close(rt);
        return err_prefix(e, "rank %d's share of the node's memory", d->rank);
    }
    return 0;
}

int64_t dist_chunk(const dist *d, const struct dist_feed *feed, int64_t held, int64_t want)
{
    int64_t left = (int64_t)feed->n_left;
    if (left == 0 || want <= 0) return 0;
    if (!d) return want < left ? want : left;
    int64_t total = left + feed->n_held_self;
    for (int r = 1; r < d->size; r++) total += d->w[r].handed - d->w[r].returned;
    int64_t n = want, tail = left / (2 * d->size), even = (total + d->size - 1) / d->size - held;
    if (tail < n) n = tail;
    if (even < n) n = even;
    if (left < n) n = left;
    return n < 1 ? 1 : n;
}

int dist_env_int(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : -1;
}

json_t *dist_ranks_json(const dist *d, const struct dist_rank_stats *self)
{
    json_t *a = json_array();
    json_array_append_new(a, rank_json(0, self));
    for (int r = 1; d && r < d->size; r++) json_array_append_new(a, rank_json(r, &d->w[r].stats));
    return a;
}

int dist_check(const dist *d, struct err *e)
{
    int n_final = 0;
    for (int r = 1; d && r < d->size; r++) {
        const struct dist_worker *w = &d->w[r];
        if (w->returned > w->handed || w->asked < 0 || w->asked > 1 || (w->final && w->asked))
            return err_set(e, "dist check: rank %d: handed %lld, returned %lld, asked %d, final %d", r,
                           (long long)w->handed, (long long)w->returned, w->asked, w->final);
        n_final += w->final;
    }
    if (d && n_final != d->n_final) return err_set(e, "dist check: %d finals counted, %d in", d->n_final, n_final);
    return 0;
}

#if !NS_MPI

int dist_available(void) { return 0; }

int dist_init(int *argc, char ***argv, dist **out, struct err *e)
{
    (void)argc, (void)argv;
    *out = NULL;
    int n = dist_env_int("OMPI_COMM_WORLD_SIZE");
    if (n < 0) n = dist_env_int("PMI_SIZE");
    if (n > 1)
        return err_set(e, "launched as one of %d MPI ranks, but this nightshift was built without MPI "
                          "(build with make MPI=1)", n);
    return 0;
}

void dist_free(dist *d) { (void)d; }

void dist_abort(dist *d, int code)
{
    (void)d;
    exit(code);
}

int dist_work(dist *d, engine *eng, int32_t max_seqs, volatile sig_atomic_t *stop, void (*test_hook)(const char *),
              struct err *e)
{
    (void)d, (void)eng, (void)max_seqs, (void)stop, (void)test_hook;
    return err_set(e, "built without MPI");
}

int dist_serve(dist *d, struct dist_feed *feed, int stopping, int block, struct err *e)
{
    (void)d, (void)feed, (void)stopping, (void)block, (void)e;
    return 0;
}

int dist_drain(dist *d, struct dist_feed *feed, struct err *e)
{
    (void)d, (void)feed, (void)e;
    return 0;
}

#endif
