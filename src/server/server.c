/* server — see server.h. */
#include "server/server.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/embedding.h"
#include "jobs/ingest.h"
#include "jobs/output.h"
#include "util/clock.h"
#include "util/log.h"

/* Engine request id -> (request, choice): open addressing with linear probing, id 0 marks an empty slot;
 * at most half full. Engine thread only. */
struct idslot {
    uint64_t id;
    struct server_req *r;
    int32_t c;
};

struct idmap {
    struct idslot *slots;
    size_t cap, n; /* cap a power of two */
};

struct server {
    struct server_params p;
    server_queue *q;
    server_lane *lane; /* the batches' requests (server/batches) */
    struct runtime *rt;
    struct job_model model; /* the parser's view of the model (engine fields unused) */
    struct openai_ctx octx;
    pthread_t thread;
    int started;
    struct idmap map;
    pthread_mutex_t fail_mu;
    int failed;
    char fail_msg[ERR_MSG_MAX];
};

/* ---- the id map ---- */

static size_t slot_of(const struct idmap *m, uint64_t id)
{
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (m->cap - 1);
}

static int map_grow(struct idmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 256;
    struct idslot *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    struct idmap old = *m;
    m->slots = s;
    m->cap = cap;
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].id) continue;
        size_t k = slot_of(m, old.slots[i].id);
        while (m->slots[k].id)
            k = (k + 1) & (m->cap - 1);
        m->slots[k] = old.slots[i];
        m->n++;
    }
    free(old.slots);
    return 0;
}

static int map_put(struct idmap *m, uint64_t id, struct server_req *r, int32_t c)
{
    if ((m->n + 1) * 2 > m->cap && map_grow(m)) return -1;
    size_t k = slot_of(m, id);
    while (m->slots[k].id)
        k = (k + 1) & (m->cap - 1);
    m->slots[k] = (struct idslot){id, r, c};
    m->n++;
    return 0;
}

/* Removes id and returns its slot's content (id 0 when absent). Backward-shift deletion keeps every probe
 * chain unbroken. */
static struct idslot map_take(struct idmap *m, uint64_t id)
{
    struct idslot none = {0, NULL, 0};
    if (!m->cap) return none;
    size_t k = slot_of(m, id);
    while (m->slots[k].id && m->slots[k].id != id)
        k = (k + 1) & (m->cap - 1);
    if (!m->slots[k].id) return none;
    struct idslot got = m->slots[k];
    size_t hole = k;
    for (size_t j = (k + 1) & (m->cap - 1); m->slots[j].id; j = (j + 1) & (m->cap - 1)) {
        size_t home = slot_of(m, m->slots[j].id);
        /* move j into the hole unless its home lies cyclically in (hole, j] */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole].id = 0;
    m->n--;
    return got;
}

/* ---- the engine thread ---- */

static void post_failure(server *s, struct server_req *r, int32_t c, const char *msg)
{
    struct engine_result res = {.id = r->choices[c].engine_id, .finish = ENGINE_FINISH_ERROR};
    res.text = calloc(1, 1);
    res.error = strdup(msg);
    server_queue_post_result(s->q, r, c, &res); /* takes text and error (NULL when out of memory) */
    engine_result_free(&res);
}

/* Hands new requests to the engine: one engine request per choice, as jobs/ingest builds run's. A choice
 * that cannot be added (out of memory) fails, and so do the later choices of its request (the earlier ones
 * are in the engine, so the request does not end here unless c is 0 — then r is not touched again). */
static void add_requests(server *s, struct server_req *added)
{
    engine *eng = s->rt->eng;
    struct err e;
    for (struct server_req *r = added, *next; r; r = next) {
        next = r->pending_next;
        for (int32_t c = 0; c < r->n_choices; c++) {
            struct server_choice *ch = &r->choices[c];
            struct engine_request rq;
            if (r->starts) /* embeddings: choice c is input c */
                ingest_request_of(&s->model, INPUT_KIND_EMBEDDING, &r->gen, r->prompt + r->starts[c],
                                  r->starts[c + 1] - r->starts[c], ch->seed, &rq);
            else
                ingest_request_of(&s->model, r->chat ? INPUT_KIND_CHAT : INPUT_KIND_COMPLETION, &r->gen, r->prompt,
                                  r->n_prompt, ch->seed, &rq);
            rq.id = ch->engine_id;
            rq.priority = ENGINE_PRIORITY_INTERACTIVE;
            int rc = map_put(&s->map, ch->engine_id, r, c);
            if (rc)
                err_set(&e, "server: out of memory");
            else if ((rc = engine_add(eng, &rq, &e)) != 0)
                map_take(&s->map, ch->engine_id);
            if (rc == 0) continue;
            for (int32_t k = c, n = r->n_choices; k < n; k++)
                post_failure(s, r, k, e.msg);
            break;
        }
    }
}

/* Hands the batch lane's new requests to the engine at batch priority, and cancels an abandoned run's. A
 * request engine_add cannot take (out of memory) fails alone, through the lane. */
static void add_lane_requests(server *s)
{
    struct server_lane_item *added;
    uint64_t *cancel;
    int32_t n_cancel;
    server_lane_take_added(s->lane, &added, &cancel, &n_cancel);
    for (struct server_lane_item *it = added, *next; it; it = next) {
        next = it->next;
        struct err e;
        if (engine_add(s->rt->eng, &it->rq, &e)) {
            struct engine_result res = {.id = it->rq.id, .finish = ENGINE_FINISH_ERROR, .error = strdup(e.msg)};
            server_lane_post_result(s->lane, &res);
            engine_result_free(&res);
        }
        server_lane_item_free(it);
    }
    for (int32_t i = 0; i < n_cancel; i++)
        engine_cancel(s->rt->eng, cancel[i]);
    free(cancel);
}

static void apply_cancels(server *s, struct server_req *cancelled)
{
    for (struct server_req *r = cancelled, *next; r; r = next) {
        next = r->cancel_next;
        for (int32_t c = 0; c < r->n_choices; c++)
            if (!r->choices[c].done) engine_cancel(s->rt->eng, r->choices[c].engine_id);
    }
}

/* A choice that echoes or asks for logprobs, or an embedding: its text as run stores it (output_result_text,
 * embedding_result_to_text). */
static void render_result(server *s, const struct server_req *r, struct engine_result *res)
{
    int ok = res->finish == ENGINE_FINISH_STOP || res->finish == ENGINE_FINISH_LENGTH;
    if (r->starts ? embedding_result_to_text(res) == 0
                  : !r->rendered || !ok || output_result_text(s->rt->vocab, r->gen.echo, r->gen.logprobs, res) == 0)
        return;
    res->finish = ENGINE_FINISH_ERROR;
    free(res->error);
    res->error = strdup("server: out of memory storing the result");
}

static void collect_results(server *s)
{
    struct engine_result res;
    while (engine_take(s->rt->eng, &res)) {
        if (res.id & SERVER_LANE_ID_BIT) {
            server_lane_post_result(s->lane, &res);
            engine_result_free(&res);
            continue;
        }
        struct idslot got = map_take(&s->map, res.id);
        if (got.r) {
            render_result(s, got.r, &res);
            server_queue_post_result(s->q, got.r, got.c, &res); /* may free got.r */
        }
        else
            log_warn("server: a result for unknown engine request %llu", (unsigned long long)res.id);
        engine_result_free(&res);
    }
}

static void post_stream_texts(server *s)
{
    for (size_t i = 0; i < s->map.cap; i++) {
        const struct idslot *sl = &s->map.slots[i];
        const char *text;
        size_t len;
        if (sl->id && sl->r->stream && !sl->r->rendered && engine_peek_text(s->rt->eng, sl->id, &text, &len) == 0)
            server_queue_post_text(s->q, sl->r, sl->c, text, len);
    }
}

/* The engine thread's invariant: the map holds every choice in flight once (debug_checks). */
static int check_engine_side(server *s, struct err *e)
{
    struct engine_stats st;
    engine_get_stats(s->rt->eng, &st);
    int32_t n_lane = server_lane_n_in_engine(s->lane);
    if ((size_t)st.n_running + (size_t)st.n_waiting != s->map.n + (size_t)n_lane)
        return err_set(e, "server: the engine holds %d requests but the id map %zu and the batch lane %d",
                       (int)(st.n_running + st.n_waiting), s->map.n, (int)n_lane);
    if (st.n_running_batch + st.n_waiting_batch != n_lane)
        return err_set(e, "server: the engine holds %d batch-priority requests, the batch lane %d",
                       (int)(st.n_running_batch + st.n_waiting_batch), (int)n_lane);
    if (server_lane_check(s->lane, e)) return -1;
    for (size_t i = 0; i < s->map.cap; i++) {
        const struct idslot *sl = &s->map.slots[i];
        if (sl->id && (sl->c < 0 || sl->c >= sl->r->n_choices || sl->r->choices[sl->c].engine_id != sl->id))
            return err_set(e, "server: id map slot %zu does not name its choice", i);
    }
    return server_queue_check(s->q, e);
}

/* One loop of the engine thread: 1 when asked to stop, -1 on a failure (e). */
static int engine_loop_once(server *s, struct err *e)
{
    engine *eng = s->rt->eng;
    struct server_req *added, *cancelled;
    if (server_queue_take(s->q, engine_has_work(eng), &added, &cancelled)) return 1;
    apply_cancels(s, cancelled);
    add_requests(s, added);
    add_lane_requests(s);
    collect_results(s); /* requests that failed at once, cancellations */
    double busy = 0;
    if (engine_has_work(eng)) {
        double t0 = clock_now();
        if (engine_step(eng, e)) return -1;
        busy = clock_now() - t0;
        post_stream_texts(s);
        collect_results(s);
    }
    struct engine_stats st;
    engine_get_stats(eng, &st);
    server_lane_post_stats(s->lane, &st);
    /* admission counts the interactive requests: batch ones run only where they leave room */
    st.n_running -= st.n_running_batch;
    st.n_waiting -= st.n_waiting_batch;
    server_queue_post_stats(s->q, &st, busy);
    if (s->p.debug_checks && check_engine_side(s, e)) return -1;
    return 0;
}

/* After a failed step: every choice in flight fails with msg; then new requests fail until stopped. */
static void fail_everything(server *s, const char *msg)
{
    server_queue_drain(s->q);
    for (size_t i = 0; i < s->map.cap; i++) {
        struct idslot sl = s->map.slots[i];
        if (!sl.id) continue;
        map_take(&s->map, sl.id);
        post_failure(s, sl.r, sl.c, msg);
        i = (size_t)-1; /* the deletion may have shifted slots: start over */
    }
    server_lane_fail_all(s->lane, msg);
    for (;;) {
        struct server_req *added, *cancelled;
        if (server_queue_take(s->q, 0, &added, &cancelled)) return;
        server_lane_fail_all(s->lane, msg);
        for (struct server_req *r = added, *next; r; r = next) {
            next = r->pending_next;
            for (int32_t c = 0; c < r->n_choices; c++)
                post_failure(s, r, c, msg);
        }
    }
}

static void *engine_main(void *arg)
{
    server *s = arg;
    struct err e;
    int rc;
    for (rc = 0; rc == 0;)
        rc = engine_loop_once(s, &e);
    if (rc < 0) {
        log_warn("nightshift serve: the engine failed: %s", e.msg);
        pthread_mutex_lock(&s->fail_mu);
        s->failed = 1;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", e.msg);
        pthread_mutex_unlock(&s->fail_mu);
        fail_everything(s, e.msg);
    }
    return NULL;
}

/* ---- the facade ---- */

static void lane_wake(void *ctx)
{
    server *s = ctx;
    server_queue_wake(s->q);
}

server_lane *server_get_lane(server *s)
{
    return s->lane;
}

struct server_params server_default_params(void)
{
    return (struct server_params){.model_name = "model", .parse_special = 1, .max_wait = 10};
}

int server_init(const struct server_params *p, server **out, struct err *e)
{
    *out = NULL;
    if (!p->defaults) return err_set(e, "server: no generation defaults");
    if (!(p->max_wait > 0) || p->max_queue < 0 || p->max_queue_tokens < 0)
        return err_set(e, "server: max_wait must be positive and the queue caps non-negative");
    server *s = calloc(1, sizeof *s);
    if (!s) return err_set(e, "server: out of memory");
    s->p = *p;
    if (pthread_mutex_init(&s->fail_mu, NULL)) {
        free(s);
        return err_set(e, "server: cannot create a mutex");
    }
    if (server_queue_init(&s->q, e)) {
        pthread_mutex_destroy(&s->fail_mu);
        free(s);
        return -1;
    }
    if (server_lane_init(lane_wake, s, &s->lane, e)) {
        server_queue_free(s->q);
        pthread_mutex_destroy(&s->fail_mu);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int server_start(server *s, struct runtime *rt, const struct job_model *chat, struct err *e)
{
    if (!rt->eng) return err_set(e, "server: the runtime has no engine");
    s->rt = rt;
    s->model = (struct job_model){.path = s->p.model_path,
                                  .name = s->p.model_name,
                                  .hp = &rt->model->hp,
                                  .vocab = rt->vocab,
                                  .chat = chat->chat,
                                  .chat_jinja = chat->chat_jinja,
                                  .chat_source = chat->chat_source,
                                  .eng = rt->eng, /* read only: ingest_check_request */
                                  .ep = rt->ep,
                                  .backend = rt->backend_name};
    s->octx = (struct openai_ctx){&s->model, s->p.defaults, s->p.parse_special};
    int64_t kv_tokens = rt->ep.kv_blocks * rt->ep.kv_block;
    struct server_admit_limits lim = {
        .kv_tokens = kv_tokens,
        .max_queue = s->p.max_queue > 0 ? s->p.max_queue : 4 * rt->ep.max_seqs,
        .max_queue_tokens = s->p.max_queue_tokens > 0 ? s->p.max_queue_tokens : kv_tokens,
        .max_wait = s->p.max_wait,
    };
    if (pthread_create(&s->thread, NULL, engine_main, s))
        return err_set(e, "server: cannot start the engine thread");
    s->started = 1;
    server_queue_open(s->q, &lim); /* publishes octx: readers take the queue's lock before using it */
    log_info("nightshift serve: admission: %lld KV tokens, at most %d queued requests / %lld queued tokens, "
             "%.3g s of expected wait",
             (long long)lim.kv_tokens, (int)lim.max_queue, (long long)lim.max_queue_tokens, lim.max_wait);
    return 0;
}

server_queue *server_get_queue(server *s)
{
    return s->q;
}

const struct openai_ctx *server_openai(server *s)
{
    return server_queue_state(s->q) == SERVER_LOADING ? NULL : &s->octx;
}

const char *server_model_name(const server *s)
{
    return s->p.model_name;
}

int server_failed(server *s, char *msg, size_t cap)
{
    pthread_mutex_lock(&s->fail_mu);
    int f = s->failed;
    if (f && msg) snprintf(msg, cap, "%s", s->fail_msg);
    pthread_mutex_unlock(&s->fail_mu);
    return f;
}

int32_t server_drain(server *s, double seconds)
{
    server_queue_drain(s->q);
    if (server_queue_wait_idle(s->q, clock_now() + seconds)) return 0;
    int32_t n = server_queue_n_active(s->q);
    server_queue_cancel_all(s->q);
    while (!server_queue_wait_idle(s->q, clock_now() + 1.0))
        log_warn("nightshift serve: waiting for %d cancelled requests to end",
                 (int)server_queue_n_active(s->q));
    return n;
}

void server_stop(server *s)
{
    if (!s->started) return;
    server_queue_stop(s->q);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void server_free(server *s)
{
    if (!s) return;
    server_stop(s);
    free(s->map.slots);
    server_lane_free(s->lane);
    server_queue_free(s->q);
    pthread_mutex_destroy(&s->fail_mu);
    free(s);
}
