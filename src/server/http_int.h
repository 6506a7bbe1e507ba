/* http_int — what server/http's two files share (private to them): the server's and a request's structs,
 * and the connections' side of the server (http_conn.c): their deadlines, the requests that wait without a
 * thread (suspended connections), the watchdog and the invariants' check. http.c answers requests: routes,
 * responses, streams, the daemon.
 *
 * Invariants (http_check, under h->mu):
 *   1. socks lists every open TCP connection once, and n_socks is its length.
 *   2. waiting lists exactly the requests whose connection is suspended, once each, and n_waiting is its
 *      length; a suspended request holds an admitted request (conn.r) and its conn is referenced.
 *   3. n_open counts the requests in progress (from their headers to on_completed), >= 0; it passes
 *      max_connections only by requests for /health and /metrics, which are never refused (take_slot checks
 *      the limit and raises the count in one step).
 *   4. A connection the watchdog cut is never answered again: every response goes through queue_response,
 *      which refuses a cut connection, and the watchdog writes only to a connection in SOCK_HEADERS or
 *      SOCK_BODY, which no handler is answering (the phase changes under h->mu).
 *   5. Once stop is set, nothing is suspended.
 */
#ifndef NS_SERVER_HTTP_INT_H
#define NS_SERVER_HTTP_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <microhttpd.h>

#include "server/http.h"
#include "server/http_api.h"

#define HTTP_WATCH_SLICE 0.1      /* seconds between the watchdog's rounds */
#define HTTP_KEEPALIVE_S 5.0      /* an idle stream sends an SSE comment this often */


/* Where a TCP connection is, for its deadlines. */
enum sock_phase {
    SOCK_HEADERS, /* waiting for a request's headers: header_timeout_s */
    SOCK_BODY,    /* headers in, waiting for the body: body_timeout_s */
    SOCK_ANSWER   /* the server is answering: no deadline of ours (the idle timeout while it sends) */
};

/* A TCP connection (libmicrohttpd's socket_context); fields under h->mu. */
struct http_sock {
    int fd;
    enum sock_phase phase;
    double since; /* when the phase began */
    int served;   /* a request was answered on it: waiting for the next is a kept-alive idle connection */
    int cut;      /* shut down by the watchdog */
    struct http_sock *prev, *next;
};

struct http_server {
    struct http_params p;
    server *srv;
    server_queue *q;
    struct MHD_Daemon *d;
    int port;
    unsigned max_sockets; /* libmicrohttpd's connection limit: what the descriptors allow */
    uint64_t salt;   /* per process: response ids and seeds of unseeded requests */
    int64_t created; /* unix time the server started: the model object's "created" */
    atomic_uint_fast64_t n_requests;
    /* under mu: the connections, requests being answered, the suspended ones, the watchdog */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct http_sock *socks;
    int n_socks;
    int n_open;
    struct conn *waiting;
    int n_waiting;
    struct pollfd *pfd; /* (pfd_cap) the watchdog's */
    int pfd_cap;
    int stop;
    pthread_t watchdog;
    int watchdog_started;
};

enum route {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_EMBEDDINGS,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_API /* the Files and Batches API: conn.api says which (server/http_api) */
};

/* One request on a connection (libmicrohttpd's con_cls), from its headers to its response; a streamed
 * response keeps it too (refs). */
struct conn {
    http_server *h;
    struct MHD_Connection *mc;
    int fd;
    enum route route;
    enum http_api_route api;
    http_api_upload *upload; /* POST /v1/files: the body goes here */
    int post;
    char *body; /* (len) the POST body so far, at most max_body_bytes */
    size_t len, cap;
    int too_big;
    int answering;        /* the whole body is in */
    struct server_req *r; /* the admitted request: the creator's reference (NULL: none, or released) */
    /* under h->mu */
    int refs;      /* con_cls, and a streamed response */
    int suspended; /* the connection is suspended: listed in h->waiting */
    int ready;     /* the request has news the connection has not looked at */
    int gone;      /* the watchdog saw the client close its end */
    struct conn *wprev, *wnext;
    /* a streamed response (the connection's thread) */
    int stream;
    char id[64];
    int64_t created;
    char *out; /* (out_len) bytes still to send from out_off */
    size_t out_len, out_off;
    int32_t n_finished;
    int ended;
    double t_sent; /* read by the watchdog only while suspended */
};

enum wait_outcome {
    WAIT_SUSPENDED, /* the connection is suspended: return and be called again when there is news */
    WAIT_NEWS,      /* something happened since the caller last looked: look again */
    WAIT_GIVE_UP    /* the client has gone, or the server stops: end the request */
};

/* The connection enters phase ph (its deadline's clock starts now if the phase changes); 0 when the
 * watchdog has cut it: nothing may be sent on it any more. */
int http_sock_enter(http_server *h, struct MHD_Connection *mc, enum sock_phase ph);
/* A request was answered: the connection waits for the next one, within header_timeout_s. */
void http_sock_served(http_server *h, struct MHD_Connection *mc);
/* Waits on h->cv (h->mu held) until the clock_now() deadline. */
void http_wait_until(http_server *h, double deadline);
/* Drops a reference to c (the last frees it); with n_open -= ended (the request ended). */
void http_conn_unref(http_server *h, struct conn *c, int ended);
/* Under h->mu: c's connection is processed again. */
void http_resume_locked(http_server *h, struct conn *c);
/* The queue's notify hook (server_queue_set_notify): c's request has news. */
void http_conn_notify(void *arg);
/* Called by a handler or content reader that found nothing to do for c's request. */
enum wait_outcome http_wait_for_news(http_server *h, struct conn *c);
/* The watchdog thread (arg: the server): deadlines, suspended connections, the invariants. */
void *http_watchdog_main(void *arg);
/* libmicrohttpd's NOTIFY_CONNECTION: a TCP connection opened or closed (the socks list). */
void http_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe);
/* The invariants (h->mu held): 0, or -1 naming the one broken. */
int http_check_locked(http_server *h, struct err *e);

#endif
