/* dist — one backlog over many processes with MPI (`mpirun -np N nightshift run ...`), exactly once.
 *
 * Rank 0 is the coordinator: it reads and plans the backlog exactly as a single process does (jobs/job),
 * owns the store and the output files, and commits every result before it is written. It also computes on
 * its own engine. The other ranks are workers: they open their own runtime (their device by local rank,
 * their own memory budget), never see the backlog, and run the requests rank 0 hands them.
 *
 * Protocol (two tags, point to point with rank 0 only):
 *   worker -> 0 (UP):   finished results, how many more requests it wants (0: none now), and, last of all,
 *                       "final" with its figures (struct dist_rank_stats); nothing follows a final.
 *   0 -> worker (DOWN): the answer to every UP that wants more: a chunk of requests, the next ones in the
 *                       planned order (sorted by length, grouped by shared prefix); or "end": no more work.
 * A worker asks while it holds at most max_seqs requests (so its engine never runs dry waiting), has at
 * most one question outstanding, and after "end" finishes what it holds, sends its results and its final.
 * Chunks shrink toward the tail and keep every rank near an even share (dist_chunk), so no rank holds the
 * end up; rank 0's own engine takes its work by the same rule.
 *
 * Exactly once: a worker's result exists only in its memory and in flight until rank 0 hands it to the
 * ledger, which commits before it writes (jobs/ledger). A rank killed at any moment (MPI then ends the
 * whole job) loses at most uncommitted work; the rerun, with any N, reconciles from the store.
 *
 * Invariant (coordinator, dist_check): for every worker, handed = returned + held, where held >= 0 are the
 * requests it holds; after its final, no request is handed to it; asked is 0 or 1.
 *
 * Built without MPI (the default build), dist_init only detects an MPI launch and refuses it with a message
 * saying so; everything else works on the serialization alone (tests).
 */
#ifndef NS_JOBS_DIST_H
#define NS_JOBS_DIST_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "runtime/runtime.h"
#include "util/err.h"

typedef struct dist dist;

/* One rank's figures, for the run record. */
struct dist_rank_stats {
    int64_t requests, prompt_tokens, prompt_tokens_cached, gen_tokens;
    double wall_s, busy_s;     /* since the rank started working; inside engine_step */
    int64_t peak_rss_bytes;    /* the process's peak resident memory (getrusage) */
    int64_t kv_blocks_peak, kv_blocks_total;
};

/* Detects an MPI launch (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) and initialises MPI. *out = NULL when
 * not launched by MPI or with one rank: the caller runs as a single process. Fails when launched with
 * several ranks by a build without MPI. */
int dist_init(int *argc, char ***argv, dist **out, struct err *e);
/* Finalizes MPI and frees d (NULL is fine). */
void dist_free(dist *d);
/* Ends every rank of the job at once with code (MPI_Abort); for errors. Does not return. */
void dist_abort(dist *d, int code);
int dist_rank(const dist *d);
int dist_size(const dist *d);
/* This rank's index among the ranks on its node, and their number (device choice, memory sharing). */
int dist_local_rank(const dist *d);
int dist_local_size(const dist *d);
/* This rank's share of the node (no-op for d NULL or one rank per node): device = p->device + local rank
 * (one GPU per rank); default threads = online cores / ranks on the node. */
void dist_pick_resources(const dist *d, struct runtime_params *p);
/* After runtime_open: on a backend without its own memory (not a GPU) with an automatic budget, ranks on
 * one node share its RAM, so the KV pool is re-planned at kv_free / ranks on the node (at most what it
 * was). No-op otherwise. On failure rt is closed. */
int dist_share_memory(const dist *d, struct runtime *rt, struct err *e);
/* 1 when built with MPI. */
int dist_available(void);

/* --- worker (rank > 0) --- */

/* Runs requests from rank 0 on eng until rank 0 says end (or *stop is set), sending results back; sends its
 * final. max_seqs: the engine's. test_hook (tests only, may be NULL) is called with "step" after every
 * engine step, as jobs/job does. */
int dist_work(dist *d, engine *eng, int32_t max_seqs, volatile sig_atomic_t *stop, void (*test_hook)(const char *),
              struct err *e);

/* --- coordinator (rank 0) --- */

/* Where the coordinator's requests come from and its results go. */
struct dist_feed {
    void *ctx;
    size_t n_left;     /* requests not yet handed out (to a worker or rank 0's own engine) */
    int64_t n_held_self; /* requests in rank 0's own engine (kept current by its owner) */
    /* the next request in the planned order (n_left > 0); rq's pointers stay valid until the next call.
     * Fails (-1 with e set) when it cannot be made (the backlog line it is read from changed, I/O) */
    int (*next)(void *ctx, struct engine_request *rq, struct err *e);
    /* a worker's result for request id (id as in the request); takes r's memory */
    int (*result)(void *ctx, struct engine_result *r, struct err *e);
};

/* Answers what the workers sent: results go to feed->result, questions get a chunk from feed (or end when
 * feed->n_left is 0 or stopping). block: wait for one message when none is there. Returns 0 or -1. */
int dist_serve(dist *d, struct dist_feed *feed, int stopping, int block, struct err *e);
/* How many requests to hand a rank that holds held and wants want more: at most want, a 2 * n_ranks-th of
 * what is left (chunks shrink toward the tail), and what brings it up to an even share of all the work not
 * yet finished (no rank hoards a short backlog); at least 1 while any is left, 0 when none is. d NULL: one
 * process, min(want, n_left). */
int64_t dist_chunk(const dist *d, const struct dist_feed *feed, int64_t held, int64_t want);
/* 1 when every worker has sent its final. */
int dist_done(const dist *d);
/* Serves with end until every worker's final is in (their results still go to feed). */
int dist_drain(dist *d, struct dist_feed *feed, struct err *e);
/* Seconds the coordinator spent serving (packing, unpacking, messaging; not waiting). */
double dist_serve_seconds(const dist *d);
/* [{"rank", "requests", "prompt_tokens", ..., "tok_s", "busy_fraction"}, ...]: rank 0's own figures
 * (self) then the workers'. New reference. */
json_t *dist_ranks_json(const dist *d, const struct dist_rank_stats *self);
/* Debug check of the coordinator's invariant above. */
int dist_check(const dist *d, struct err *e);

/* --- serialization (exposed for tests) --- */

struct dist_buf {
    char *p;
    size_t n, cap, at; /* bytes written; capacity; read position */
    int bad;           /* a read ran past the end */
};

void dist_buf_free(struct dist_buf *b);
int dist_pack_request(struct dist_buf *b, const struct engine_request *rq);
/* Reads one request into *rq; its arrays are malloc'd into *owned (free with dist_request_free). */
int dist_unpack_request(struct dist_buf *b, struct engine_request *rq, struct err *e);
void dist_request_free(struct engine_request *rq);
/* A result's id, finish, text, error, counts and t_finished - t_added (tokens are not sent). */
int dist_pack_result(struct dist_buf *b, const struct engine_result *r);
int dist_unpack_result(struct dist_buf *b, struct engine_result *r, struct err *e);

#endif
