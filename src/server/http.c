/* http — see http.h.
 *
 * libmicrohttpd runs a pool of n_threads threads, each polling its connections through epoll; no thread
 * belongs to a connection, so a handler must never block. A request waiting for the engine suspends its
 * connection (http_wait_for_news) and is resumed by the queue's notify hook when there is news. This file
 * answers requests; http_conn.c keeps the connections (deadlines, suspended requests, the watchdog, the
 * invariants: http_int.h).
 */
#include "server/http_int.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/http_api.h"
#include "util/clock.h"
#include "util/log.h"

#define HTTP_STREAM_BLOCK 16384   /* bytes per read of a streamed response */
#define HTTP_UPLOAD_FRAMING 65536 /* multipart boundaries and field headers an upload's body may add */
#define HTTP_FD_RESERVE 256       /* descriptors kept for everything but sockets (model, stores, files) */
#define HTTP_MAX_SOCKETS 65536    /* open connections at most, whatever the descriptor limit */
#define HTTP_LISTEN_BACKLOG 4096  /* connections the kernel holds before they are accepted */

struct http_params http_default_params(void)
{
    return (struct http_params){.host = "127.0.0.1",
                                .port = 8080,
                                .max_body_bytes = 1 << 20,
                                .max_header_bytes = 32 << 10,
                                .max_connections = 512,
                                .idle_timeout_s = 30,
                                .header_timeout_s = 10,
                                .body_timeout_s = 30,
                                .max_upload_bytes = 200u << 20,
                                .n_threads = 4};
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}


/* ---- responses ---- */

/* Queues res (taken) with status, unless the watchdog has cut the connection; counts what was queued. */
static enum MHD_Result queue_response(http_server *h, struct MHD_Connection *mc, int status,
                                      struct MHD_Response *res)
{
    enum MHD_Result rc = MHD_NO;
    if (http_sock_enter(h, mc, SOCK_ANSWER)) rc = MHD_queue_response(mc, (unsigned)status, res);
    MHD_destroy_response(res);
    if (rc == MHD_YES) server_queue_count_status(h->q, status);
    return rc;
}

/* Queues a response whose body is malloc'd (taken, even on failure). retry_after > 0 adds Retry-After. */
static enum MHD_Result respond(http_server *h, struct MHD_Connection *mc, int status, const char *ctype,
                               char *body, size_t len, double retry_after, const char *allow)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(
        len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (retry_after > 0) {
        char t[32];
        snprintf(t, sizeof t, "%.0f", retry_after);
        MHD_add_response_header(res, MHD_HTTP_HEADER_RETRY_AFTER, t);
    }
    if (allow) MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 401) MHD_add_response_header(res, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return queue_response(h, mc, status, res);
}

static enum MHD_Result respond_json(http_server *h, struct MHD_Connection *mc, int status, char *body,
                                    size_t len)
{
    return respond(h, mc, status, "application/json", body, len, 0, NULL);
}

static enum MHD_Result respond_error(http_server *h, struct MHD_Connection *mc,
                                     const struct openai_error *err, double retry_after, const char *allow)
{
    size_t len = 0;
    char *body = openai_error_body(err, &len);
    return respond(h, mc, err->status, "application/json", body, len, retry_after, allow);
}

/* An answer of server/http_api: a body, or an open file (fd taken). */
static enum MHD_Result respond_reply(http_server *h, struct MHD_Connection *mc, struct http_api_reply *r)
{
    if (r->fd < 0) return respond(h, mc, r->status, r->ctype, r->body, r->len, 0, NULL);
    struct MHD_Response *res = MHD_create_response_from_fd(r->fd_size, r->fd);
    if (!res) {
        close(r->fd);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
    return queue_response(h, mc, r->status, res);
}

static enum MHD_Result fail_with(http_server *h, struct MHD_Connection *mc, int status, const char *type,
                                 const char *code, const char *msg)
{
    struct openai_error err;
    openai_set_error(&err, status, type, code, "%s", msg);
    return respond_error(h, mc, &err, status == 503 ? 1 : 0, NULL);
}

static enum route find_route(const http_server *h, const char *url, const char **want_method, const char *model,
                             enum http_api_route *api)
{
    *api = h->p.files && h->p.batches ? http_api_route(url, want_method) : HTTP_API_NONE;
    if (*api != HTTP_API_NONE) return ROUTE_API;
    static const struct {
        const char *path, *method;
        enum route route;
    } routes[] = {
        {"/v1/completions", "POST", ROUTE_COMPLETIONS},
        {"/v1/chat/completions", "POST", ROUTE_CHAT},
        {"/v1/embeddings", "POST", ROUTE_EMBEDDINGS},
        {"/v1/models", "GET", ROUTE_MODELS},
        {"/health", "GET", ROUTE_HEALTH},
        {"/metrics", "GET", ROUTE_METRICS},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            *want_method = routes[i].method;
            return routes[i].route;
        }
    if (!strncmp(url, "/v1/models/", 11) && !strcmp(url + 11, model)) {
        *want_method = "GET";
        return ROUTE_MODEL;
    }
    return ROUTE_NONE;
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static int authorized(const http_server *h, struct MHD_Connection *mc)
{
    if (!h->p.api_key) return 1;
    const char *got = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!got || strncmp(got, "Bearer ", 7)) return 0;
    got += 7;
    size_t n = strlen(got), k = strlen(h->p.api_key);
    unsigned char diff = (unsigned char)(n != k);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(got[i] ^ h->p.api_key[i < k ? i : 0]);
    return diff == 0;
}

static enum MHD_Result answer_get(http_server *h, struct MHD_Connection *mc, enum route route)
{
    server_queue *q = h->q;
    size_t len = 0;
    char *body = NULL;
    struct err e;
    switch (route) {
    case ROUTE_HEALTH: {
        enum server_state s = server_queue_state(q);
        int failed = server_failed(h->srv, NULL, 0);
        const char *st = failed                 ? "failed"
                         : s == SERVER_LOADING  ? "loading"
                         : s == SERVER_DRAINING ? "draining"
                                                : "ok";
        char t[64];
        int n = snprintf(t, sizeof t, "{\"status\":\"%s\"}", st);
        body = strdup(t);
        return respond(h, mc, !failed && s == SERVER_SERVING ? 200 : 503, "application/json", body,
                       body ? (size_t)n : 0, s == SERVER_SERVING ? 0 : 1, NULL);
    }
    case ROUTE_METRICS:
        pthread_mutex_lock(&h->mu);
        int32_t n_socks = h->n_socks, n_open = h->n_open;
        pthread_mutex_unlock(&h->mu);
        if (server_queue_metrics_text(q, n_socks, n_open, &body, &len, &e))
            return fail_with(h, mc, 500, "server_error", "metrics", e.msg);
        return respond(h, mc, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, 0, NULL);
    case ROUTE_MODELS:
    case ROUTE_MODEL:
        body = openai_models(server_model_name(h->srv), h->created, route == ROUTE_MODEL, &len);
        return respond_json(h, mc, 200, body, len);
    default:
        return fail_with(h, mc, 404, "invalid_request_error", "not_found", "unknown path");
    }
}

/* The request limit (invariant 3): 1 when a request of this route may be answered now, counted in n_open. */
static int take_slot(http_server *h, enum route route)
{
    int exempt = route == ROUTE_HEALTH || route == ROUTE_METRICS;
    pthread_mutex_lock(&h->mu);
    int ok = exempt || h->n_open < (int)h->p.max_connections;
    if (ok) h->n_open++;
    pthread_mutex_unlock(&h->mu);
    return ok;
}

static void give_slot(http_server *h)
{
    pthread_mutex_lock(&h->mu);
    h->n_open--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Past --max-connections: 503 at once, before the body is read. */
static enum MHD_Result reject_busy(http_server *h, struct MHD_Connection *mc)
{
    struct openai_error err;
    openai_set_error(&err, 503, "server_error", server_admit_reason(ADMIT_CONNECTIONS),
                     "the server is answering %u requests already (--max-connections); retry after 1 s",
                     h->p.max_connections);
    server_queue_count_rejected(h->q, ADMIT_CONNECTIONS);
    return respond_error(h, mc, &err, 1, NULL);
}

/* First call for a request (headers read): route, method, key, body size and the request limit are checked
 * now, before any body is read (a response queued now closes the connection afterwards). The answer comes at
 * the last call. */
static enum MHD_Result on_headers(http_server *h, struct MHD_Connection *mc, const char *url,
                                  const char *method, void **con_cls)
{
    const char *want = NULL;
    enum http_api_route api;
    enum route route = find_route(h, url, &want, server_model_name(h->srv), &api);
    char msg[600];
    if (route == ROUTE_NONE) {
        snprintf(msg, sizeof msg, "unknown path '%.500s'", url);
        return fail_with(h, mc, 404, "invalid_request_error", "not_found", msg);
    }
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (route == ROUTE_API ? !http_api_method_ok(want, method)
                           : strcmp(method, want) && !(is_get && !strcmp(want, "GET"))) {
        struct openai_error err;
        openai_set_error(&err, 405, "invalid_request_error", "method_not_allowed", "%s takes %s, not %.32s",
                         url, want, method);
        return respond_error(h, mc, &err, 0, want);
    }
    if (route != ROUTE_HEALTH && !authorized(h, mc))
        return fail_with(h, mc, 401, "authentication_error", "invalid_api_key",
                         "missing or wrong API key (send 'Authorization: Bearer KEY')");
    int upload = api == HTTP_API_FILES;
    /* an upload: its file at most max_upload_bytes (checked as it streams), plus the multipart framing */
    uint64_t limit = upload ? h->p.max_upload_bytes + HTTP_UPLOAD_FRAMING : h->p.max_body_bytes;
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > limit) {
        snprintf(msg, sizeof msg, "the body is %.30s bytes; this server takes at most %llu%s", cl,
                 (unsigned long long)(upload ? h->p.max_upload_bytes : limit), upload ? " in a file" : "");
        return fail_with(h, mc, 413, "invalid_request_error", upload ? "file_too_large" : "body_too_large", msg);
    }
    if (!take_slot(h, route)) return reject_busy(h, mc);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct conn *c = calloc(1, sizeof *c);
    if (!c || !ci) {
        free(c);
        give_slot(h);
        return MHD_NO;
    }
    if (upload) {
        struct http_api_reply reply;
        if (http_api_upload_begin(h->p.files, mc, &c->upload, &reply)) {
            free(c);
            give_slot(h);
            return respond_reply(h, mc, &reply);
        }
    }
    c->h = h;
    c->mc = mc;
    c->fd = ci->connect_fd;
    c->refs = 1;
    c->route = route;
    c->api = api;
    c->post = !strcmp(method, "POST");
    *con_cls = c;
    return MHD_YES;
}

/* A piece of the body: kept up to max_body_bytes, the rest discarded (the request then gets 413). Its
 * deadline is the watchdog's. */
static enum MHD_Result on_body(http_server *h, struct conn *c, const char *data, size_t n)
{
    if (c->upload) return http_api_upload_data(c->upload, data, n);
    if (c->too_big || n > h->p.max_body_bytes - c->len) {
        c->too_big = 1;
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        return MHD_YES;
    }
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n)
            cap *= 2;
        char *b = realloc(c->body, cap);
        if (!b) return MHD_NO;
        c->body = b;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    return MHD_YES;
}

/* The request's creator reference is dropped: no more news from the queue; a request still running is
 * cancelled (a no-op for one that has ended). */
static void end_request(http_server *h, struct conn *c)
{
    if (!c->r) return;
    server_queue_set_notify(h->q, c->r, NULL, NULL);
    server_queue_cancel(h->q, c->r);
    server_queue_release(h->q, c->r);
    c->r = NULL;
}

/* ---- streamed responses ---- */

/* The next bytes of the stream into buf; 0 with the connection suspended when there are none yet. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct conn *c = cls;
    http_server *h = c->h;
    struct server_req *r = c->r;
    (void)pos;
    for (;;) {
        if (c->out_off < c->out_len) {
            size_t n = c->out_len - c->out_off < max ? c->out_len - c->out_off : max;
            memcpy(buf, c->out + c->out_off, n);
            c->out_off += n;
            c->t_sent = clock_now();
            return (ssize_t)n;
        }
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = 0;
        if (c->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!r) return MHD_CONTENT_READER_END_WITH_ERROR;
        struct server_event *ev;
        if (c->n_finished == r->n_choices) {
            c->out = openai_stream_end(r, c->id, server_model_name(h->srv), c->created, &c->out_len);
            c->ended = 1;
        } else if (server_queue_next_event(h->q, r, 0, &ev)) {
            c->out = openai_stream_event(r, c->id, server_model_name(h->srv), c->created, ev, &c->out_len);
            c->n_finished += ev->finished;
            server_event_free(ev);
        } else if (clock_now() - c->t_sent > HTTP_KEEPALIVE_S) {
            c->out = strdup(": keep-alive\n\n");
            c->out_len = c->out ? strlen(c->out) : 0;
        } else {
            enum wait_outcome w = http_wait_for_news(h, c);
            if (w == WAIT_SUSPENDED) return 0;
            if (w == WAIT_GIVE_UP) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (!c->out) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
    }
}

/* The response is gone (sent, or its connection closed): its reference to the request's conn. */
static void stream_free(void *cls)
{
    struct conn *c = cls;
    http_conn_unref(c->h, c, 0);
}

static enum MHD_Result answer_stream(http_server *h, struct MHD_Connection *mc, struct conn *c)
{
    c->stream = 1;
    c->created = (int64_t)time(NULL);
    c->t_sent = clock_now();
    openai_request_id(c->r, h->salt, c->id, sizeof c->id);
    c->out = openai_stream_start(c->r, c->id, server_model_name(h->srv), c->created, &c->out_len);
    struct MHD_Response *res =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK, stream_read, c, stream_free);
    if (!res) return MHD_NO; /* on_completed ends the request */
    pthread_mutex_lock(&h->mu);
    c->refs++;
    pthread_mutex_unlock(&h->mu);
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue_response(h, mc, MHD_HTTP_OK, res);
}

/* ---- completions ---- */

/* A request that does not stream: answered with the whole object once it is done. Called again (the
 * connection resumed) whenever there is news. */
static enum MHD_Result answer_whole(http_server *h, struct MHD_Connection *mc, struct conn *c)
{
    for (;;) {
        if (server_queue_wait_done(h->q, c->r, 0)) break;
        enum wait_outcome w = http_wait_for_news(h, c);
        if (w == WAIT_SUSPENDED) return MHD_YES;
        if (w == WAIT_GIVE_UP) {
            end_request(h, c);
            return MHD_NO; /* nobody to answer, or the server stops: close the connection */
        }
    }
    char id[64];
    openai_request_id(c->r, h->salt, id, sizeof id);
    struct openai_error err;
    size_t len;
    char *body = openai_response(c->r, id, server_model_name(h->srv), (int64_t)time(NULL), &len, &err);
    end_request(h, c);
    if (!body) return respond_error(h, mc, &err, err.status == 503 ? 1 : 0, NULL);
    return respond_json(h, mc, 200, body, len);
}

static enum MHD_Result reject(http_server *h, struct MHD_Connection *mc, enum admit_verdict v,
                              double retry_after, const struct server_req *r)
{
    struct openai_error err;
    int status = server_admit_status(v);
    const char *why = server_admit_reason(v);
    if (status == 503)
        openai_set_error(&err, 503, "server_error", why, "the server is %s; retry after %.0f s", why,
                         retry_after);
    else if (status == 400)
        openai_set_error(
            &err, 400, "invalid_request_error", "context_length_exceeded",
            "prompt (%d tokens) + max_tokens (%d) needs more KV cache than the server's whole pool: "
            "lower max_tokens",
            (int)r->n_prompt, (int)r->max_tokens);
    else
        openai_set_error(&err, 429, "rate_limit_error", "rate_limit_exceeded",
                         "the server is at capacity (%s); retry after %.0f s", why, retry_after);
    return respond_error(h, mc, &err, status == 400 ? 0 : retry_after, NULL);
}

/* The Files and Batches API (server/http_api). */
static enum MHD_Result answer_api(http_server *h, struct MHD_Connection *mc, struct conn *c, const char *url,
                                  const char *method)
{
    if (c->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is over %zu bytes", h->p.max_body_bytes);
        return fail_with(h, mc, 413, "invalid_request_error", "body_too_large", msg);
    }
    const char *after = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "after");
    const char *limit = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "limit");
    struct http_api_reply reply;
    http_api_answer(h->p.files, h->p.batches, c->api, url, method, c->upload, c->body, c->len, after, limit,
                    &reply);
    return respond_reply(h, mc, &reply);
}

/* The whole body is in: the answer, or the request submitted and waited for. */
static enum MHD_Result on_complete(http_server *h, struct MHD_Connection *mc, struct conn *c, const char *url,
                                   const char *method)
{
    if (c->route == ROUTE_API) return answer_api(h, mc, c, url, method);
    if (c->route != ROUTE_COMPLETIONS && c->route != ROUTE_CHAT && c->route != ROUTE_EMBEDDINGS)
        return answer_get(h, mc, c->route);
    if (c->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is over %zu bytes", h->p.max_body_bytes);
        return fail_with(h, mc, 413, "invalid_request_error", "body_too_large", msg);
    }
    const struct openai_ctx *octx = server_openai(h->srv);
    if (!octx)
        return fail_with(h, mc, 503, "server_error", "loading", "the model is loading; retry after 1 s");
    uint64_t unseeded = mix64(h->salt ^ atomic_fetch_add(&h->n_requests, 1));
    struct server_req *r;
    struct openai_error err;
    struct err e;
    enum input_kind kind = c->route == ROUTE_CHAT         ? INPUT_KIND_CHAT
                           : c->route == ROUTE_EMBEDDINGS ? INPUT_KIND_EMBEDDING
                                                          : INPUT_KIND_COMPLETION;
    int rc = openai_parse_request(octx, kind, c->body ? c->body : "", c->len, unseeded, &r, &err, &e);
    if (rc < 0) return fail_with(h, mc, 500, "server_error", "internal", e.msg);
    if (rc > 0) return respond_error(h, mc, &err, 0, NULL);
    server_queue_set_notify(h->q, r, http_conn_notify, c); /* before submit: no news is missed */
    double retry_after;
    enum admit_verdict v = server_queue_submit(h->q, r, &retry_after);
    if (v != ADMIT_OK) {
        enum MHD_Result res = reject(h, mc, v, retry_after, r);
        server_queue_release(h->q, r); /* never admitted: nothing calls its hook */
        return res;
    }
    c->r = r;
    return r->stream ? answer_stream(h, mc, c) : answer_whole(h, mc, c);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server *h = cls;
    struct conn *c = *con_cls;
    (void)version;
    if (!c) {
        if (!http_sock_enter(h, mc, SOCK_BODY)) return MHD_NO; /* cut by the watchdog meanwhile */
        return on_headers(h, mc, url, method, con_cls);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return on_body(h, c, upload_data, n);
    }
    if (c->r) return c->stream ? MHD_YES : answer_whole(h, mc, c); /* resumed */
    if (c->answering) return MHD_NO;         /* called again after an answer failed to be queued */
    c->answering = 1;
    if (!http_sock_enter(h, mc, SOCK_ANSWER)) return MHD_NO;
    return on_complete(h, mc, c, url, method);
}

/* The request has ended (answered, or its connection closed). */
static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *h = cls;
    (void)toe;
    http_sock_served(h, mc); /* the next request's headers are due within header_timeout_s */
    struct conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    end_request(h, c);
    http_conn_unref(h, c, 1);
}


static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_debug("http: %s", msg);
}

/* ---- the daemon ---- */

/* Raises the soft limit on open files to the hard limit and returns how many connections the descriptors
 * allow: the limit less HTTP_FD_RESERVE, at most HTTP_MAX_SOCKETS. Logged. */
static unsigned socket_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 1024 - HTTP_FD_RESERVE;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl)) rl.rlim_cur = was;
    }
    rlim_t n = rl.rlim_cur > 2 * HTTP_FD_RESERVE ? rl.rlim_cur - HTTP_FD_RESERVE : rl.rlim_cur / 2;
    unsigned socks = n > HTTP_MAX_SOCKETS ? HTTP_MAX_SOCKETS : (unsigned)n;
    if (rl.rlim_cur != was)
        log_info("http: open files: soft limit raised from %llu to the hard limit, %llu: %u connections at once",
                 (unsigned long long)was, (unsigned long long)rl.rlim_cur, socks);
    else
        log_info("http: open files: soft limit %llu (the hard limit is %llu): %u connections at once",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, socks);
    return socks;
}

static struct MHD_Daemon *start_daemon(http_server *h, unsigned flags, const struct sockaddr *addr)
{
    const struct http_params *p = &h->p;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, addr, MHD_OPTION_THREAD_POOL_SIZE,
        p->n_threads, MHD_OPTION_CONNECTION_LIMIT, h->max_sockets, MHD_OPTION_LISTEN_BACKLOG_SIZE,
        (unsigned)HTTP_LISTEN_BACKLOG, MHD_OPTION_CONNECTION_TIMEOUT, p->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, p->max_header_bytes, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
}

int http_start(const struct http_params *p, server *srv, http_server **out, struct err *e)
{
    *out = NULL;
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)p->port)};
    const struct sockaddr *addr = (const struct sockaddr *)&a4;
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (p->port < 0 || p->port > 65535) return err_set(e, "port %d: must be in [0, 65535]", p->port);
    if (p->n_threads < 1 || p->max_connections < 1)
        return err_set(e, "http: n_threads %u and max_connections %u must be at least 1", p->n_threads,
                       p->max_connections);
    if (inet_pton(AF_INET6, p->host, &a6.sin6_addr) == 1) {
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else if (inet_pton(AF_INET, p->host, &a4.sin_addr) != 1) {
        return err_set(e, "--host %s: not an IPv4 or IPv6 address", p->host);
    }
    http_server *h = calloc(1, sizeof *h);
    if (!h) return err_set(e, "http: out of memory");
    h->p = *p;
    h->srv = srv;
    h->q = server_get_queue(srv);
    h->created = (int64_t)time(NULL);
    h->salt = mix64((uint64_t)h->created ^ ((uint64_t)clock_now() << 20));
    h->max_sockets = socket_budget();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&h->mu, NULL) || pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad || pthread_create(&h->watchdog, NULL, http_watchdog_main, h)) {
        free(h);
        return err_set(e, "http: cannot start the connections' watchdog");
    }
    h->watchdog_started = 1;
    h->d = start_daemon(h, flags, addr);
    if (!h->d) {
        http_stop(h);
        return err_set(e, "cannot listen on %s port %d (in use, or not an address of this machine?)", p->host,
                       p->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    *out = h;
    return 0;
}

int http_port(const http_server *h)
{
    return h->port;
}

int http_wait_idle(http_server *h, double seconds)
{
    double deadline = clock_now() + seconds;
    pthread_mutex_lock(&h->mu);
    while (h->n_open > 0 && clock_now() < deadline)
        http_wait_until(h, deadline);
    int idle = h->n_open == 0;
    pthread_mutex_unlock(&h->mu);
    return idle;
}

void http_stop(http_server *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1; /* nothing is suspended from now on (invariant 5) */
    while (h->waiting)
        http_resume_locked(h, h->waiting);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->watchdog_started) pthread_join(h->watchdog, NULL);
    if (h->d) MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h->pfd);
    free(h);
}

