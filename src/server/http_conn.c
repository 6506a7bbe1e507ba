/* http_conn — see http_int.h: the connections' side of server/http. */
#include "server/http_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

/* ---- connections and their deadlines ---- */

static struct http_sock *sock_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The connection enters phase ph (its deadline's clock starts now if the phase changes); 0 when the
 * watchdog has cut it: nothing may be sent on it any more. */
int http_sock_enter(http_server *h, struct MHD_Connection *mc, enum sock_phase ph)
{
    struct http_sock *k = sock_of(mc);
    if (!k) return 1;
    pthread_mutex_lock(&h->mu);
    int ok = !k->cut;
    if (ok && k->phase != ph) {
        k->phase = ph;
        k->since = clock_now();
    }
    pthread_mutex_unlock(&h->mu);
    return ok;
}

/* A request was answered: the connection waits for the next one, within header_timeout_s. */
void http_sock_served(http_server *h, struct MHD_Connection *mc)
{
    struct http_sock *k = sock_of(mc);
    if (!k) return;
    pthread_mutex_lock(&h->mu);
    k->phase = SOCK_HEADERS;
    k->since = clock_now();
    k->served = 1;
    pthread_mutex_unlock(&h->mu);
}

/* Waits on h->cv until the clock_now() deadline (the condition variable runs on the monotonic clock). */
void http_wait_until(http_server *h, double deadline)
{
    double sec = floor(deadline);
    struct timespec ts = {(time_t)sec, (long)((deadline - sec) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
}

/* Writes a 408 on a connection whose request is late, straight to its socket: libmicrohttpd writes nothing
 * to a connection before a response is queued, and none can be while the caller holds h->mu (invariant 4).
 * Best effort: the socket's buffer is empty, so the few bytes go at once or not at all. */
static void send_timeout(int fd, const char *what, double limit)
{
    struct openai_error err;
    openai_set_error(&err, 408, "invalid_request_error", "request_timeout",
                     "the request's %s did not arrive within %.3g s", what, limit);
    size_t len = 0;
    char *body = openai_error_body(&err, &len);
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     body ? len : 0, body ? body : "");
    free(body);
    if (n > 0 && (size_t)n < sizeof buf && send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        log_debug("http: a late request's 408 could not be sent");
}

/* The deadlines libmicrohttpd lacks (its timeout is for silence, so a client trickling a byte now and then
 * would hold a connection for ever): a connection whose request headers took header_timeout_s, or whose body
 * took body_timeout_s, is answered 408 and shut down (never closed here: libmicrohttpd owns the descriptor
 * and closes it when its read fails); a kept-alive one that sent no new request in header_timeout_s is shut
 * down silently, as HTTP lets a server close an idle connection. n[] counts them by deadline. */
static void cut_late(http_server *h, double now, int n[SERVER_TIMEOUT_COUNT])
{
    for (struct http_sock *k = h->socks; k; k = k->next) {
        if (k->cut || k->phase == SOCK_ANSWER) continue;
        int body = k->phase == SOCK_BODY;
        double limit = body ? h->p.body_timeout_s : h->p.header_timeout_s;
        if (now - k->since <= limit) continue;
        enum server_timeout t = body ? SERVER_TIMEOUT_BODY : k->served ? SERVER_TIMEOUT_IDLE : SERVER_TIMEOUT_HEADERS;
        if (t != SERVER_TIMEOUT_IDLE) send_timeout(k->fd, body ? "body" : "headers", limit);
        shutdown(k->fd, SHUT_RDWR);
        k->cut = 1;
        n[t]++;
    }
}

/* ---- requests that wait without a thread ---- */

static void conn_free(struct conn *c)
{
    http_api_upload_free(c->upload);
    free(c->body);
    free(c->out);
    free(c);
}

/* Drops a reference to c (the last frees it); with n_open -= ended (on_completed: the request ended). */
void http_conn_unref(http_server *h, struct conn *c, int ended)
{
    pthread_mutex_lock(&h->mu);
    h->n_open -= ended;
    if (ended) pthread_cond_broadcast(&h->cv);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (last) conn_free(c);
}

/* Under h->mu: c's connection is processed again (its handler or content reader is called). */
void http_resume_locked(http_server *h, struct conn *c)
{
    c->suspended = 0;
    if (c->wprev)
        c->wprev->wnext = c->wnext;
    else
        h->waiting = c->wnext;
    if (c->wnext) c->wnext->wprev = c->wprev;
    c->wprev = c->wnext = NULL;
    h->n_waiting--;
    MHD_resume_connection(c->mc);
}

/* The queue's notify hook (under the queue's lock): c's request has news. */
void http_conn_notify(void *arg)
{
    struct conn *c = arg;
    http_server *h = c->h;
    pthread_mutex_lock(&h->mu);
    c->ready = 1;
    if (c->suspended) http_resume_locked(h, c);
    pthread_mutex_unlock(&h->mu);
}


/* Called by a handler or content reader that found nothing to do for c's request. */
enum wait_outcome http_wait_for_news(http_server *h, struct conn *c)
{
    enum wait_outcome w = WAIT_SUSPENDED;
    pthread_mutex_lock(&h->mu);
    if (c->gone || h->stop) {
        w = WAIT_GIVE_UP;
    } else if (c->ready) {
        c->ready = 0;
        w = WAIT_NEWS;
    } else {
        c->suspended = 1;
        c->wnext = h->waiting;
        if (h->waiting) h->waiting->wprev = c;
        h->waiting = c;
        h->n_waiting++;
        MHD_suspend_connection(c->mc);
    }
    pthread_mutex_unlock(&h->mu);
    return w;
}

/* One round over the suspended connections (libmicrohttpd does not watch them): a client that closed its
 * end is marked gone, and resumed with the streams that have been silent for HTTP_KEEPALIVE_S. O(suspended
 * connections), one poll() for all. */
static void wake_waiting(http_server *h, double now)
{
    if (h->n_waiting > h->pfd_cap) {
        int cap = h->n_waiting * 2;
        struct pollfd *p = realloc(h->pfd, (size_t)cap * sizeof *p);
        if (!p) return; /* next round */
        h->pfd = p;
        h->pfd_cap = cap;
    }
    int n = 0;
    for (struct conn *c = h->waiting; c; c = c->wnext)
        h->pfd[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN | POLLRDHUP};
    if (n == 0 || poll(h->pfd, (nfds_t)n, 0) < 0) return;
    int i = 0;
    for (struct conn *c = h->waiting, *next; c; c = next, i++) {
        next = c->wnext;
        if (h->pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) c->gone = 1;
        if (c->gone || (c->stream && now - c->t_sent > HTTP_KEEPALIVE_S)) http_resume_locked(h, c);
    }
}

/* The watchdog: the deadlines and the suspended connections, every HTTP_WATCH_SLICE; and the invariants,
 * whose check costs what a round does (one broken is logged once). */
void *http_watchdog_main(void *arg)
{
    http_server *h = arg;
    int broken = 0;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        double now = clock_now();
        int n[SERVER_TIMEOUT_COUNT] = {0};
        cut_late(h, now, n);
        wake_waiting(h, now);
        struct err e;
        if (!broken && http_check_locked(h, &e)) {
            log_warn("%s", e.msg);
            broken = 1;
        }
        pthread_mutex_unlock(&h->mu); /* the queue's lock is taken before h->mu, never after */
        for (int t = 0; t < SERVER_TIMEOUT_COUNT; t++) {
            server_queue_count_timeout(h->q, (enum server_timeout)t, n[t]);
            if (t != SERVER_TIMEOUT_IDLE)
                for (int i = 0; i < n[t]; i++)
                    server_queue_count_status(h->q, 408); /* the 408s sent */
        }
        if (n[SERVER_TIMEOUT_HEADERS] + n[SERVER_TIMEOUT_BODY] + n[SERVER_TIMEOUT_IDLE])
            log_debug("http: late requests: %d without headers in %.3g s, %d without a body in %.3g s; %d idle "
                      "connections closed",
                      n[SERVER_TIMEOUT_HEADERS], h->p.header_timeout_s, n[SERVER_TIMEOUT_BODY],
                      h->p.body_timeout_s, n[SERVER_TIMEOUT_IDLE]);
        pthread_mutex_lock(&h->mu);
        while (!h->stop && clock_now() < now + HTTP_WATCH_SLICE) /* h->cv is also the requests' */
            http_wait_until(h, now + HTTP_WATCH_SLICE);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

void http_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
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
        k->phase = SOCK_HEADERS;
        pthread_mutex_lock(&h->mu);
        k->next = h->socks;
        if (h->socks) h->socks->prev = k;
        h->socks = k;
        h->n_socks++;
        pthread_mutex_unlock(&h->mu);
        *socket_context = k;
    } else if (k) { /* closed: libmicrohttpd closes the socket after this returns */
        pthread_mutex_lock(&h->mu);
        if (k->prev)
            k->prev->next = k->next;
        else
            h->socks = k->next;
        if (k->next) k->next->prev = k->prev;
        h->n_socks--;
        pthread_mutex_unlock(&h->mu);
        free(k);
        *socket_context = NULL;
    }
}

int http_check_locked(http_server *h, struct err *e)
{
    int rc = 0;
    int n = 0;
    for (struct http_sock *k = h->socks; k && n <= h->n_socks; k = k->next, n++)
        if (k->next && k->next->prev != k) {
            rc = err_set(e, "http invariant 1: the connection list's links disagree at entry %d", n);
            break;
        }
    if (!rc && n != h->n_socks)
        rc = err_set(e, "http invariant 1: %d connections listed, n_socks %d", n, h->n_socks);
    n = 0;
    for (struct conn *c = h->waiting; c && !rc && n <= h->n_waiting; c = c->wnext, n++)
        if (!c->suspended || !c->r || c->refs < 1)
            rc = err_set(e, "http invariant 2: a waiting request is %s", !c->suspended ? "not suspended"
                                                                        : !c->r       ? "without a request"
                                                                                      : "unreferenced");
    if (!rc && n != h->n_waiting)
        rc = err_set(e, "http invariant 2: %d requests waiting, n_waiting %d", n, h->n_waiting);
    if (!rc && h->n_open < 0) rc = err_set(e, "http invariant 3: %d requests in progress", h->n_open);
    if (!rc && h->stop && h->n_waiting)
        rc = err_set(e, "http invariant 5: %d requests suspended after stop", h->n_waiting);
    return rc;
}

int http_check(http_server *h, struct err *e)
{
    pthread_mutex_lock(&h->mu);
    int rc = http_check_locked(h, e);
    pthread_mutex_unlock(&h->mu);
    return rc;
}
