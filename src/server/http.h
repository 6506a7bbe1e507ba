/* http — the HTTP side of `nightshift serve`, on libmicrohttpd: a pool of n_threads threads polls every
 * connection (epoll), so an open connection costs a descriptor and a little memory, not a thread.
 *
 *   POST /v1/completions, POST /v1/chat/completions    (JSON, or server-sent events with "stream": true)
 *   GET  /v1/models, /v1/models/{id}, /health, /metrics
 *   the Files and Batches API (server/http_api) when params.files and params.batches are set
 *
 * Every request that arrives gets an HTTP status. Its headers are bounded by max_header_bytes (through
 * libmicrohttpd's per-connection memory), its body by max_body_bytes (a larger Content-Length is refused with
 * 413 before the body is read; a chunked body that grows past it is discarded and refused). Then the route
 * (404, 405 with Allow), the API key (401; /health needs none) and the request limit: at most
 * max_connections requests are in progress at once (from their headers to the end of their response;
 * /health and /metrics are never refused), and one past it is answered 503 with Retry-After at once,
 * counted as a rejection with reason "connections". The body is parsed (openai: 400 with run's messages) and
 * submitted to the queue, whose admission answers at once: 429 with Retry-After, 503 while loading or
 * draining. An admitted request waits with its connection suspended, holding no thread: the queue's notify
 * hook resumes it when the engine has news (a stream's text, the result). A watchdog thread checks ten times
 * a second whether the client of a suspended request has closed its end (the request is then cancelled),
 * and enforces the deadlines: a request's headers must arrive within header_timeout_s of the connection's
 * start and its body within body_timeout_s of its headers, else the answer is 408 (a kept-alive connection
 * that sends no new request within header_timeout_s is closed); a connection silent for idle_timeout_s
 * while not waiting on the server is closed (libmicrohttpd's timeout).
 *
 * Open connections are bounded by the open-file limit (its soft limit is raised to the hard one at start,
 * and logged), less a reserve for the server's files, at most 65536: at that many libmicrohttpd stops
 * accepting, and new connections wait in the kernel's listen queue (4096) until one closes.
 *
 * No part of a request is ever used as a file path: the only files opened after start-up are the Files and
 * Batches API's, under names the server made (server/files, server/batches). An upload (POST /v1/files) is
 * bounded by max_upload_bytes instead of max_body_bytes, and streamed to disk, not kept in memory.
 */
#ifndef NS_SERVER_HTTP_H
#define NS_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "server/server.h"
#include "util/err.h"

struct http_params {
    const char *host;      /* address to bind: an IPv4 or IPv6 literal (default "127.0.0.1") */
    int port;              /* 0: any free port (http_port says which) */
    const char *api_key;   /* NULL: no authentication; else "Authorization: Bearer KEY" on all but /health */
    size_t max_body_bytes; /* default 1 MiB */
    size_t max_header_bytes;  /* per-connection memory for the request line and headers (default 32 KiB) */
    unsigned max_connections; /* requests in progress at most; past it 503 (default 512) */
    unsigned idle_timeout_s;  /* a connection silent this long is closed (default 30) */
    double header_timeout_s;  /* a request's headers must arrive within this of the connection's start or its
                                 previous response (default 10) */
    double body_timeout_s;    /* a body must arrive within this of its headers (default 30) */
    struct files *files;      /* the Files API's store (NULL: no Files and Batches API) */
    struct batches *batches;  /* the Batches API (NULL: none) */
    uint64_t max_upload_bytes; /* a file upload's bytes at most (default 200 MiB) */
    unsigned n_threads;        /* libmicrohttpd's polling threads (default 4) */
};

struct http_params http_default_params(void);

typedef struct http_server http_server;

/* Binds and starts serving srv (which may still be loading: requests are then answered 503). */
int http_start(const struct http_params *p, server *srv, http_server **out, struct err *e);
/* The port bound. */
int http_port(const http_server *h);
/* Waits until no request is being answered (1), or `seconds` have passed (0): the end of a drain, so that
 * responses are sent before http_stop closes the connections. Idle keep-alive connections do not count. */
int http_wait_idle(http_server *h, double seconds);
/* Stops listening, closes every connection and joins the threads. */
void http_stop(http_server *h);

/* Debug check of the invariants at the top of http.c (takes its lock). */
int http_check(http_server *h, struct err *e);

#endif
