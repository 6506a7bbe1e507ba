/* http — see http.h. libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a
 * handler may block while its request is generated; the threads are bounded by max_connections. */
#include "server/http.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
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

#define HTTP_WAIT_SLICE 0.1     /* seconds between checks that the client is still there */
#define HTTP_KEEPALIVE_S 5.0    /* an idle stream sends an SSE comment this often */
#define HTTP_STREAM_BLOCK 16384 /* bytes per read of a streamed response */
#define HTTP_UPLOAD_FRAMING 65536 /* multipart boundaries and field headers an upload's body may add */

/* A TCP connection, for the header deadline (libmicrohttpd's socket_context). */
struct http_sock {
    int fd;
    double since; /* when it began to wait for a request's headers */
    int waiting;  /* 1: no request has come since `since` */
    int cut;      /* shut down by the watchdog */
    struct http_sock *prev, *next;
};

struct http_server {
    struct http_params p;
    server *srv;
    server_queue *q;
    struct MHD_Daemon *d;
    int port;
    uint64_t salt;   /* per process: response ids and seeds of unseeded requests */
    int64_t created; /* unix time the server started: the model object's "created" */
    atomic_uint_fast64_t n_requests;
    /* under mu: the connections, requests being answered, the watchdog */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct http_sock *socks;
    int n_open;
    int stop;
    pthread_t watchdog;
    int watchdog_started;
};

enum route {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_API /* the Files and Batches API: conn.api says which (server/http_api) */
};

/* One request on a connection (libmicrohttpd's con_cls), from its headers to its response. */
struct conn {
    enum route route;
    enum http_api_route api;
    http_api_upload *upload; /* POST /v1/files: the body goes here */
    int post;
    char *body; /* (len) the POST body so far, at most max_body_bytes */
    size_t len, cap;
    int too_big;
    double t_start;
};

/* A streamed response: owned by its libmicrohttpd response (freed by its free callback). */
struct stream {
    http_server *h;
    struct MHD_Connection *mc;
    struct server_req *r;
    char id[64];
    int64_t created;
    char *out; /* (out_len) bytes still to send from out_off */
    size_t out_len, out_off;
    int32_t n_finished;
    int ended;
    double t_sent;
};

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
                                .max_upload_bytes = 200u << 20};
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- responses ---- */

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
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)status, res);
    MHD_destroy_response(res);
    server_queue_count_status(h->q, status);
    return rc;
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
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)r->status, res);
    MHD_destroy_response(res);
    server_queue_count_status(h->q, r->status);
    return rc;
}

static enum MHD_Result fail_with(http_server *h, struct MHD_Connection *mc, int status, const char *type,
                                 const char *code, const char *msg)
{
    struct openai_error err;
    openai_set_error(&err, status, type, code, "%s", msg);
    return respond_error(h, mc, &err, status == 503 ? 1 : 0, NULL);
}

/* ---- connections ---- */

/* waiting 0: a request's headers have arrived; 1: the connection now waits for the next one. */
static void sock_mark(http_server *h, struct MHD_Connection *mc, int waiting)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct http_sock *k = ci ? ci->socket_context : NULL;
    if (!k) return;
    pthread_mutex_lock(&h->mu);
    k->waiting = waiting;
    k->since = clock_now();
    pthread_mutex_unlock(&h->mu);
}

/* Waits on h->cv until the clock_now() deadline (the condition variable runs on the monotonic clock). */
static void wait_until(http_server *h, double deadline)
{
    double sec = floor(deadline);
    struct timespec ts = {(time_t)sec, (long)((deadline - sec) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
}

/* The header deadline: libmicrohttpd's timeout is for silence, so a client that trickles a byte now and then
 * could hold a connection for ever; this thread shuts down (never closes: libmicrohttpd owns the descriptor)
 * every connection that has waited header_timeout_s for a request's headers. Four checks a second. */
static void *watchdog_main(void *arg)
{
    http_server *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        double now = clock_now();
        for (struct http_sock *k = h->socks; k; k = k->next)
            if (k->waiting && !k->cut && now - k->since > h->p.header_timeout_s) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = 1;
                log_debug("http: a connection sent no complete request headers in %.3g s: closed",
                          h->p.header_timeout_s);
            }
        wait_until(h, now + 0.25);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* 1 when the client has closed its end (or the socket failed). Safe while this thread owns the connection:
 * libmicrohttpd is not reading from it meanwhile. */
static int peer_gone(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* The connection timeout is for idle clients, not for the server's own work: off while it works, and on
 * again (its timer restarted) when it has something to send. */
static void timeout_off(struct MHD_Connection *mc)
{
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
}

static void timeout_on(http_server *h, struct MHD_Connection *mc)
{
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, h->p.idle_timeout_s);
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
        if (server_queue_metrics_text(q, &body, &len, &e))
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

/* First call for a request (headers read): route, method, key and body size are checked now, before any
 * body is read (a response queued now closes the connection afterwards). The answer comes at the last call.
 */
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
    if (route == ROUTE_API ? !http_api_method_ok(want, method) : strcmp(method, want) && !(is_get && !strcmp(want, "GET"))) {
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
    http_api_upload *up = NULL;
    struct http_api_reply reply;
    if (upload && http_api_upload_begin(h->p.files, mc, &up, &reply)) return respond_reply(h, mc, &reply);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        http_api_upload_free(up);
        return MHD_NO;
    }
    c->route = route;
    c->api = api;
    c->upload = up;
    c->post = !strcmp(method, "POST");
    c->t_start = clock_now();
    *con_cls = c;
    pthread_mutex_lock(&h->mu);
    h->n_open++;
    pthread_mutex_unlock(&h->mu);
    return MHD_YES;
}

/* A piece of the body: kept up to max_body_bytes, the rest discarded (the request then gets 413). */
static enum MHD_Result on_body(http_server *h, struct conn *c, const char *data, size_t n)
{
    if (clock_now() - c->t_start > h->p.body_timeout_s) return MHD_NO; /* too slow: close */
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

/* ---- streamed responses ---- */

/* Fills buf with the next bytes of the stream, waiting for events; checks the client every slice. */
static ssize_t stream_fill(struct stream *st, char *buf, size_t max)
{
    http_server *h = st->h;
    struct server_req *r = st->r;
    for (;;) {
        if (st->out_off < st->out_len) {
            size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
            memcpy(buf, st->out + st->out_off, n);
            st->out_off += n;
            st->t_sent = clock_now();
            return (ssize_t)n;
        }
        free(st->out);
        st->out = NULL;
        st->out_len = st->out_off = 0;
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->n_finished == r->n_choices) {
            st->out = openai_stream_end(r, st->id, server_model_name(h->srv), st->created, &st->out_len);
            st->ended = 1;
        } else {
            struct server_event *ev;
            if (server_queue_next_event(h->q, r, HTTP_WAIT_SLICE, &ev)) {
                st->out =
                    openai_stream_event(r, st->id, server_model_name(h->srv), st->created, ev, &st->out_len);
                st->n_finished += ev->finished;
                server_event_free(ev);
            } else if (peer_gone(st->mc)) {
                return MHD_CONTENT_READER_END_WITH_ERROR;
            } else if (clock_now() - st->t_sent > HTTP_KEEPALIVE_S) {
                st->out = strdup(": keep-alive\n\n");
                st->out_len = st->out ? strlen(st->out) : 0;
            } else {
                continue;
            }
        }
        if (!st->out) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st = cls;
    (void)pos;
    timeout_off(st->mc);
    ssize_t n = stream_fill(st, buf, max);
    timeout_on(st->h, st->mc);
    return n;
}

/* The response is gone (sent, or its connection closed): a request still running is cancelled. */
static void stream_free(void *cls)
{
    struct stream *st = cls;
    if (st->n_finished < st->r->n_choices) server_queue_cancel(st->h->q, st->r);
    server_queue_release(st->h->q, st->r);
    free(st->out);
    free(st);
}

static enum MHD_Result answer_stream(http_server *h, struct MHD_Connection *mc, struct server_req *r)
{
    struct stream *st = calloc(1, sizeof *st);
    if (!st) {
        server_queue_cancel(h->q, r);
        server_queue_release(h->q, r);
        return MHD_NO;
    }
    st->h = h;
    st->mc = mc;
    st->r = r;
    st->created = (int64_t)time(NULL);
    st->t_sent = clock_now();
    openai_request_id(r, h->salt, st->id, sizeof st->id);
    st->out = openai_stream_start(r, st->id, server_model_name(h->srv), st->created, &st->out_len);
    struct MHD_Response *res =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK, stream_read, st, stream_free);
    if (!res) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(mc, MHD_HTTP_OK, res);
    MHD_destroy_response(res);
    server_queue_count_status(h->q, 200);
    return rc;
}

/* ---- completions ---- */

/* Waits for a request that does not stream, then answers with the whole object. */
static enum MHD_Result answer_whole(http_server *h, struct MHD_Connection *mc, struct server_req *r)
{
    timeout_off(mc);
    while (!server_queue_wait_done(h->q, r, HTTP_WAIT_SLICE)) {
        if (!peer_gone(mc)) continue;
        server_queue_cancel(h->q, r);
        server_queue_release(h->q, r);
        return MHD_NO; /* nobody to answer: close the connection */
    }
    timeout_on(h, mc);
    char id[64];
    openai_request_id(r, h->salt, id, sizeof id);
    struct openai_error err;
    size_t len;
    char *body = openai_response(r, id, server_model_name(h->srv), (int64_t)time(NULL), &len, &err);
    server_queue_release(h->q, r);
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
    http_api_answer(h->p.files, h->p.batches, c->api, url, method, c->upload, c->body, c->len, after, limit, &reply);
    return respond_reply(h, mc, &reply);
}

static enum MHD_Result on_complete(http_server *h, struct MHD_Connection *mc, struct conn *c, const char *url,
                                   const char *method)
{
    if (c->route == ROUTE_API) return answer_api(h, mc, c, url, method);
    if (c->route != ROUTE_COMPLETIONS && c->route != ROUTE_CHAT) return answer_get(h, mc, c->route);
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
    int rc = openai_parse_request(octx, c->route == ROUTE_CHAT, c->body ? c->body : "", c->len, unseeded, &r,
                                  &err, &e);
    if (rc < 0) return fail_with(h, mc, 500, "server_error", "internal", e.msg);
    if (rc > 0) return respond_error(h, mc, &err, 0, NULL);
    double retry_after;
    enum admit_verdict v = server_queue_submit(h->q, r, &retry_after);
    if (v != ADMIT_OK) {
        enum MHD_Result res = reject(h, mc, v, retry_after, r);
        server_queue_release(h->q, r);
        return res;
    }
    return r->stream ? answer_stream(h, mc, r) : answer_whole(h, mc, r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server *h = cls;
    struct conn *c = *con_cls;
    (void)version;
    if (!c) {
        sock_mark(h, mc, 0);
        return on_headers(h, mc, url, method, con_cls);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return on_body(h, c, upload_data, n);
    }
    return on_complete(h, mc, c, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *h = cls;
    (void)toe;
    sock_mark(h, mc, 1); /* the next request's headers are due within header_timeout_s */
    struct conn *c = *con_cls;
    if (!c) return;
    http_api_upload_free(c->upload);
    free(c->body);
    free(c);
    *con_cls = NULL;
    pthread_mutex_lock(&h->mu);
    h->n_open--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server *h = cls;
    struct http_sock *k = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        k = calloc(1, sizeof *k);
        if (!k || !ci) { /* no deadline for this one; its idle timeout still applies */
            free(k);
            return;
        }
        k->fd = ci->connect_fd;
        k->since = clock_now();
        k->waiting = 1;
        pthread_mutex_lock(&h->mu);
        k->next = h->socks;
        if (h->socks) h->socks->prev = k;
        h->socks = k;
        pthread_mutex_unlock(&h->mu);
        *socket_context = k;
    } else if (k) { /* closed: libmicrohttpd closes the socket after this returns */
        pthread_mutex_lock(&h->mu);
        if (k->prev)
            k->prev->next = k->next;
        else
            h->socks = k->next;
        if (k->next) k->next->prev = k->prev;
        pthread_mutex_unlock(&h->mu);
        free(k);
        *socket_context = NULL;
    }
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

int http_start(const struct http_params *p, server *srv, http_server **out, struct err *e)
{
    *out = NULL;
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)p->port)};
    const struct sockaddr *addr = (const struct sockaddr *)&a4;
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (p->port < 0 || p->port > 65535) return err_set(e, "port %d: must be in [0, 65535]", p->port);
    if (inet_pton(AF_INET6, p->host, &a6.sin6_addr) == 1) {
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else if (inet_pton(AF_INET, p->host, &a4.sin_addr) != 1) {
        return err_set(e, "--host %s: not an IPv4 or IPv6 address", p->host);
    }
    http_server *h = calloc(1, sizeof *h);
    if (!h) return err_set(e, "http: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&h->mu, NULL) || pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad || pthread_create(&h->watchdog, NULL, watchdog_main, h)) {
        free(h);
        return err_set(e, "http: cannot start the header watchdog");
    }
    h->watchdog_started = 1;
    h->p = *p;
    h->srv = srv;
    h->q = server_get_queue(srv);
    h->created = (int64_t)time(NULL);
    h->salt = mix64((uint64_t)h->created ^ ((uint64_t)clock_now() << 20));
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, p->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                            p->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, p->max_header_bytes,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
                            on_connection, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
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
        wait_until(h, deadline);
    int idle = h->n_open == 0;
    pthread_mutex_unlock(&h->mu);
    return idle;
}

void http_stop(http_server *h)
{
    if (!h) return;
    if (h->watchdog_started) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->watchdog, NULL);
    }
    if (h->d) MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
