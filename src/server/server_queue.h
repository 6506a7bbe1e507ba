/* server_queue — the one meeting point of the connection threads and the engine thread.
 *
 * The engine is not thread-safe, so one engine thread owns it. A connection thread builds a server_req
 * (the prompt and parameters of one HTTP request, n completions = n choices) and submits it here:
 * admission control (server_admit) decides at once, under the queue's lock, so a rejection is answered in
 * microseconds whatever the engine is doing. An admitted request is appended to the pending FIFO and to
 * the active list (admission order) and the engine thread is woken; the engine thread takes pending
 * requests and cancellations in batches (server_queue_take), runs them, and posts back text deltas (for
 * streams) and results, which wake the request's own condition variable and call its notify hook (for a
 * waiter that holds no thread: server/http suspends the connection meanwhile). A connection whose client went
 * away cancels its request (server_queue_cancel): a request not yet taken ends at the next take without
 * touching the engine; one in the engine is handed to the engine thread to engine_cancel.
 *
 * Ownership: a server_req is reference-counted under the queue's lock. Its creator holds one reference
 * (released with server_queue_release); an admitted request holds one more for the engine side, dropped
 * by the queue when its last choice ends. Fields marked "creator" are written before submit and read-only
 * after; "engine thread" fields belong to that thread; the rest are read and written under the lock.
 *
 * An embeddings request reserves its inputs' tokens (need = n_prompt), each input a sequence.
 *
 * Load for admission: queued = active requests minus those running, where the running ones are taken to
 * be the oldest active requests whose choices add up to the engine's running sequences (the scheduler is
 * first come, first served; preemption can make this approximate); queued tokens are their reservations.
 *
 * Invariant (server_queue_check, under the lock): the active list is in admission order and its length is
 * n_active; n_active and the sum of reservations agree with it; an active request is admitted, not finished,
 * referenced, and has a choice not done; a pending request is admitted and not yet taken; a request listed
 * for the engine thread to cancel is taken, cancelled and not finished; the admission meter
 * (server_admit_check) and the metrics (server_metrics_check) hold.
 */
#ifndef NS_SERVER_QUEUE_H
#define NS_SERVER_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "runtime/genparam.h"
#include "server/server_admit.h"
#include "server/server_metrics.h"
#include "tokenizer/tok.h"
#include "util/err.h"

/* News for a streaming request: new text of one choice, and whether that choice has ended. */
struct server_event {
    int32_t choice;
    char *text; /* (len) new bytes, malloc'd (NUL-terminated; len may be 0) */
    size_t len;
    int finished; /* 1: the choice ended with finish (its text is complete) */
    enum engine_finish finish;
    char *error; /* malloc'd message when finish is ENGINE_FINISH_ERROR */
    struct server_event *next;
};

struct server_choice {
    uint64_t seed;      /* creator */
    uint64_t engine_id; /* set at admission */
    size_t posted;      /* engine thread: bytes already posted as events */
    /* the result (under the lock; final once done) */
    int done;
    enum engine_finish finish;
    char *text; /* malloc'd, NUL-terminated; NULL (empty) for a choice cancelled before it ran */
    size_t text_len;
    char *error; /* malloc'd when finish is ENGINE_FINISH_ERROR */
    int32_t n_tokens;
    int32_t n_cached; /* prompt tokens served from the prefix cache */
};

struct server_req {
    /* creator */
    int chat;          /* 1: /v1/chat/completions, 0: /v1/completions */
    int stream;        /* 1: deltas are posted as events */
    int include_usage; /* stream_options.include_usage */
    int32_t *prompt;   /* (n_prompt) owned */
    int32_t n_prompt, max_tokens;
    int32_t *starts;   /* (n_choices + 1) owned: an embeddings request's (/v1/embeddings), whose choice c is
                          input c, prompt[starts[c] .. starts[c + 1]), prefilled only; NULL otherwise */
    int32_t dimensions; /* an embeddings request's: 0 all, else the first N values */
    int base64;        /* an embeddings request's encoding_format "base64" */
    struct gen_params gen; /* owned (stop strings, logit bias, constraint) */
    int rendered;      /* a choice's text is rendered when it ends (echo, logprobs: jobs/output's
                          output_result_text), and streamed then, whole */
    const tok_vocab *vocab; /* the model's (logprobs' token strings) */
    int32_t n_choices;
    struct server_choice *choices; /* (n_choices) */
    /* set at admission */
    uint64_t id;       /* server request number */
    int64_t need;      /* reserved tokens: n_choices x (n_prompt + max_tokens) */
    double t_admitted; /* clock_now() */
    /* under the lock */
    int refs;
    int admitted, taken, cancel, finished;
    int32_t n_done;
    struct server_event *ev_head, *ev_tail;
    pthread_cond_t cv;
    struct server_req *prev, *next;  /* active list */
    struct server_req *pending_next; /* pending FIFO, then the engine thread's batch */
    struct server_req *cancel_next;  /* cancellations for the engine thread */
    int cancel_listed;
    void (*notify)(void *arg); /* see server_queue_set_notify */
    void *notify_arg;
};

typedef struct server_queue server_queue;

/* A new request with n_choices choices and one reference (the creator's); NULL when out of memory. */
struct server_req *server_req_new(int32_t n_choices);
/* Frees a request that was never submitted (its creator's only reference); NULL is fine. */
void server_req_discard(struct server_req *r);
/* Drops a reference; the last one frees the request (prompt, gen, choices, events). */
void server_queue_release(server_queue *q, struct server_req *r);

/* A queue in state SERVER_LOADING (every submit is answered 503) until server_queue_open. */
int server_queue_init(server_queue **out, struct err *e);
/* Frees the queue; every request must have been released and the engine thread stopped. */
void server_queue_free(server_queue *q);
/* Sets the limits (the KV pool's size is known once the model is loaded) and starts serving. */
void server_queue_open(server_queue *q, const struct server_admit_limits *lim);
/* Stops admitting (503 from now on): the start of a drain. */
void server_queue_drain(server_queue *q);
enum server_state server_queue_state(server_queue *q);

/* Connection side. Admission: returns the verdict; on ADMIT_OK r is pending (id, need, engine ids set)
 * and holds the engine side's reference. *retry_after as server_admit_decide says. */
enum admit_verdict server_queue_submit(server_queue *q, struct server_req *r, double *retry_after);
/* Waits up to timeout seconds for r's next event: 1 with *ev (the caller frees it with
 * server_event_free), 0 when none came. */
int server_queue_next_event(server_queue *q, struct server_req *r, double timeout, struct server_event **ev);
void server_event_free(struct server_event *ev);
/* Waits up to timeout seconds for every choice of r to end: 1 when they have (the choices' results are
 * then final and may be read without the lock), 0 otherwise. */
int server_queue_wait_done(server_queue *q, struct server_req *r, double timeout);
/* The client is gone: r ends as soon as possible, its choices ENGINE_FINISH_CANCELLED (those not done). */
void server_queue_cancel(server_queue *q, struct server_req *r);
/* notify(arg) is called, under the queue's lock, whenever r's condition variable is: an event was posted, a
 * choice or the whole request ended. It must be quick and must not call the queue. NULL: none. Once this
 * returns, a hook it replaced is no longer running and will not be called again. */
void server_queue_set_notify(server_queue *q, struct server_req *r, void (*notify)(void *arg), void *arg);
/* Counts a response by HTTP status (for /metrics). */
void server_queue_count_status(server_queue *q, int status);
/* Counts a rejection decided outside admission (ADMIT_CONNECTIONS: server/http's request limit). */
void server_queue_count_rejected(server_queue *q, enum admit_verdict v);
/* Counts n connections cut by deadline t. */
void server_queue_count_timeout(server_queue *q, enum server_timeout t, int n);
/* The Prometheus text of the queue's metrics and gauges, with server/http's counts of open connections and
 * requests in progress (*out malloc'd). */
int server_queue_metrics_text(server_queue *q, int32_t connections, int32_t in_progress, char **out, size_t *len,
                              struct err *e);

/* Engine thread. Waits (only when engine_busy is 0) until there is something to do, then hands over
 * the pending requests (list through pending_next, oldest first; each now taken) in *added and the
 * requests to cancel (list through cancel_next) in *cancelled. Pending requests whose client has gone
 * end here, cancelled, without reaching the engine. Returns 1 once server_queue_stop was called and
 * nothing was handed over, else 0. */
int server_queue_take(server_queue *q, int engine_busy, struct server_req **added,
                      struct server_req **cancelled);
/* Streams only: text of choice c beyond what was posted (text[0..len) is the whole text released so far;
 * bytes past choice->posted become an event). No-op for a request that does not stream. */
void server_queue_post_text(server_queue *q, struct server_req *r, int32_t c, const char *text, size_t len);
/* Choice c ended with res (its text and error are taken; res is left empty). When it is r's last choice,
 * r finishes: it leaves the active list, its reservation is released, and the engine side's reference is
 * dropped — the engine thread must not touch r afterwards. */
void server_queue_post_result(server_queue *q, struct server_req *r, int32_t c, struct engine_result *res);
/* After an engine step that took busy seconds: the engine's counters (running sequences, KV, tokens). */
void server_queue_post_stats(server_queue *q, const struct engine_stats *st, double busy);
/* Wakes the engine thread: its next server_queue_take returns (0) even with nothing to hand over (another
 * source of work has some: server_lane). Any thread. */
void server_queue_wake(server_queue *q);
/* Asks the engine thread to stop: server_queue_take returns 1 from now on. */
void server_queue_stop(server_queue *q);

/* Drain: waits until no request is active (1) or until the clock_now() deadline passes (0). */
int server_queue_wait_idle(server_queue *q, double deadline);
/* Cancels every active request (a drain's deadline passed). */
void server_queue_cancel_all(server_queue *q);

/* Counts of what is in flight (tests, logs). */
int32_t server_queue_n_active(server_queue *q);

/* Debug check of the invariant at the top (takes the lock). */
int server_queue_check(server_queue *q, struct err *e);

#endif
