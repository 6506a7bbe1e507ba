/* batches — the OpenAI Batch API on the server: POST /v1/batches, GET /v1/batches/{id}, GET /v1/batches,
 * POST /v1/batches/{id}/cancel, backed by the job layer (jobs/job: the same run as `nightshift run`).
 *
 * A batch is a directory under the data directory's batches/, named by its id ("batch_" + 24 random hex
 * digits; made here, never taken from a request except after batches_valid_id):
 *   batch.json     {"seq": creation number, "batch": the OpenAI batch object}, rewritten (a temporary file
 *                  renamed) at every change of status
 *   input.jsonl    a hard link to the input file's bytes (server/files), so the batch owns its backlog
 *   store.db, output.jsonl, errors.jsonl   the run's SQLite store and files, exactly as `run` makes them
 *                  (with --order input: results in input order)
 * One runner thread runs the batches one at a time, oldest first: job_run with the server's job_model and
 * generation defaults, its engine calls through the batch lane (server_lane: the server's engine thread, at
 * batch priority). When the run ends, its output and error files (those not empty) become files of the
 * store (files_adopt: purpose "batch_output") and the batch completes with its request counts (lines in
 * the output file, lines in the error file). While it runs, the counts follow its files (refreshed at most
 * every 0.5 s: total = the input's non-blank lines, completed / failed = the whole lines written so far). So
 * a batch's files hold what `run` writes for the same input and flags, byte for byte except the per-run
 * parts: every line's "id" (batch_req_...), "request_id" (req_...), the body's "id" and "created" (the run id
 * is random per store, created is the commit's time).
 *
 * Restarts: at open every batch is read back; one that was validating, in progress or finalizing is run
 * again, and job_run resumes it from its store (what was committed is kept, the files are repaired, the rest
 * is computed), so every input line ends in exactly one of the files once. A batch killed while cancelling
 * becomes cancelled with the files as they are (its output may then lack a torn last line).
 * Cancel: a queued batch is cancelled at once; the running one is stopped (job_config.stop), what it
 * finished is committed and kept, its requests in the engine are cancelled (server_lane_abandon).
 * A shutdown (batches_stop) stops the running batch the same way but leaves it in progress for the next
 * start.
 *
 * Thread-safe: the batch list and objects are under one lock; the runner holds it only between runs.
 * Invariant (batches_check): the list is in creation order, its length is n (<= max_batches), at most one
 * batch is running and it is in progress or cancelling, every object's status is one of the Batch API's.
 */
#ifndef NS_SERVER_BATCHES_H
#define NS_SERVER_BATCHES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "jobs/job.h"
#include "server/files.h"
#include "server/openai.h"
#include "server/server_lane.h"
#include "util/err.h"

struct batches_params {
    const char *dir;      /* the batches' directory (created if missing) */
    int32_t max_batches;  /* batches kept at most (default 1000) */
    const struct job_model *model;  /* what the runs use (borrowed; its eng is only read: engine_check_request) */
    const struct job_config *base;  /* the runs' settings: input defaults, parse_special, durability (borrowed;
                                       paths, stop, engine, record and order are set per batch) */
};

typedef struct batches batches;

/* Reads every batch back (see the top). Starts nothing. */
int batches_open(const struct batches_params *p, files *f, server_lane *lane, batches **out, struct err *e);
/* Starts the runner thread. */
int batches_start(batches *b, struct err *e);
/* Stops the runner: the running batch stops (left in progress) and its requests leave the engine; joins. */
void batches_stop(batches *b);
void batches_close(batches *b);

int batches_valid_id(const char *id);

/* POST /v1/batches with a JSON body: 0 with *obj (a new reference), or 1 with *err. */
int batches_create(batches *b, const char *body, size_t len, json_t **obj, struct openai_error *err);
/* GET /v1/batches/{id}: 0 with *obj, 1 with *err (404). */
int batches_get(batches *b, const char *id, json_t **obj, struct openai_error *err);
/* GET /v1/batches?after=ID&limit=N (newest first; limit in [1, 100], default 20): 0 with *obj (a list
 * object), 1 with *err. after may be NULL. */
int batches_list(batches *b, const char *after, const char *limit, json_t **obj, struct openai_error *err);
/* POST /v1/batches/{id}/cancel: 0 with *obj, 1 with *err (404; 400 for a batch that has ended otherwise). */
int batches_cancel(batches *b, const char *id, json_t **obj, struct openai_error *err);

/* Debug check of the invariant at the top (takes the lock). */
int batches_check(batches *b, struct err *e);

#endif
