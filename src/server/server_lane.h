/* server_lane — the batch lane: how a batch's run (jobs/job, on the batch runner's thread: server/batches)
 * reaches the engine that the server's engine thread owns, at batch priority beside the interactive
 * requests of server_queue.
 *
 * The runner adds engine requests (deep-copied here: the job layer reuses its request's memory at once) and
 * takes results; the engine thread takes the added requests (server_lane_take_added), engine_adds them with
 * ENGINE_PRIORITY_BATCH under lane ids (SERVER_LANE_ID_BIT | the runner's id) and posts their results back
 * (server_lane_post_result). server_lane_ops gives the runner the calls as a struct job_engine, so job_run
 * drives the lane as it drives an engine of its own.
 *
 * Abandoning: when a run stops early (a cancelled batch, a shutdown), server_lane_abandon drops the results
 * not taken yet, and every request still in flight is handed to the engine thread to engine_cancel; their
 * results are dropped when they come. server_lane_wait_empty waits until nothing is in flight: then the lane
 * is as new, for the next run.
 *
 * Invariant (server_lane_check, under the lock): n_flight = requests added and not yet resulted (added
 * list + in the engine); every in-flight id is in the flight table once; results waiting to be taken are
 * counted by n_results; while abandoned, no result waits.
 */
#ifndef NS_SERVER_LANE_H
#define NS_SERVER_LANE_H

#include <stdint.h>

#include "engine/engine.h"
#include "jobs/job.h"
#include "util/err.h"

#define SERVER_LANE_ID_BIT (1ull << 62) /* engine ids of the lane's requests; server_queue's stay below */

/* A request added by the runner, owned by the lane until engine_add took a copy. */
struct server_lane_item {
    struct engine_request rq; /* its pointers point into this item's own copies */
    int32_t *prompt;
    struct logit_bias *bias;
    char **stop;
    struct constraint_spec constraint;
    struct server_lane_item *next;
};

typedef struct server_lane server_lane;

/* wake(ctx) is called (without the lane's lock) when the engine thread has something to take. */
int server_lane_init(void (*wake)(void *ctx), void *wake_ctx, server_lane **out, struct err *e);
/* Frees the lane (nothing may be in flight: server_lane_wait_empty first). */
void server_lane_free(server_lane *l);

/* Runner side, with the contracts of the engine calls (struct job_engine): */
int server_lane_add(server_lane *l, const struct engine_request *r, struct err *e);
/* Waits up to timeout seconds for a result to take; returns at once when one is ready. */
void server_lane_wait(server_lane *l, double timeout);
int server_lane_has_work(server_lane *l);
int server_lane_take(server_lane *l, struct engine_result *out);
void server_lane_get_stats(server_lane *l, struct engine_stats *st);
/* The calls above as a struct job_engine (step = wait up to 0.1 s). */
struct job_engine server_lane_ops(server_lane *l);
/* The run is over early: see the top. */
void server_lane_abandon(server_lane *l);
/* Waits until nothing is in flight; then the lane takes requests again. */
void server_lane_wait_empty(server_lane *l);

/* Engine thread. The added requests (list through next, oldest first), now the caller's: engine_add each
 * (rq.id is already the lane id), then server_lane_item_free. Also the ids to engine_cancel (abandoned;
 * *cancel malloc'd, *n_cancel of them; the caller frees it). */
void server_lane_take_added(server_lane *l, struct server_lane_item **added, uint64_t **cancel, int32_t *n_cancel);
void server_lane_item_free(struct server_lane_item *it);
/* The result of lane request res->id (taken: res is left empty); dropped when abandoned. */
void server_lane_post_result(server_lane *l, struct engine_result *res);
/* The engine's counters after a step, for the runner's progress (server_lane_get_stats). */
void server_lane_post_stats(server_lane *l, const struct engine_stats *st);
/* The engine failed: every request in flight ends now with ENGINE_FINISH_ERROR and msg (those not yet
 * taken too); the engine thread calls it again for requests added later. */
void server_lane_fail_all(server_lane *l, const char *msg);
/* Lane requests in the engine (taken and not yet resulted), for the engine thread's own check. */
int32_t server_lane_n_in_engine(server_lane *l);

/* Debug check of the invariant at the top (takes the lock). */
int server_lane_check(server_lane *l, struct err *e);

#endif
