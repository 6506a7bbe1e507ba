/* reconcile — on start, makes the ledger, the store and the output files agree, so that a run resumed after
 * a kill (at any point) neither loses nor repeats anything:
 *
 *   - works whose keys the store holds become DONE or FAILED and are credited to the lines that need them
 *     (with retry_failed, failed results are deleted first: those works run again)
 *   - a line row is kept when it belongs to a backlog line (same line number and digest), has an offset and
 *     is in the file its results call for: that line is SCHEDULED. Every other row is stale (another
 *     backlog, changed settings, a retried key, a row left READY by --order input) and deleted; the offsets
 *     of the remaining rows are compacted to tile their file again
 *   - each output file is repaired to be exactly its scheduled rows, in offset order (jobs/output: a torn
 *     tail cut, missing or diverged lines written again, bytes past the last line cut); out_end is set
 *   - lines that are finished (done in an earlier run, or bad) but in no file are queued for the first commit
 *
 * The store changes are one transaction. Afterwards the ledger's invariants hold (ledger_check).
 */
#ifndef NS_JOBS_RECONCILE_H
#define NS_JOBS_RECONCILE_H

#include <stdint.h>

#include <jansson.h>

#include "jobs/ledger.h"
#include "jobs/output.h"
#include "util/err.h"

struct reconcile_stats {
    int64_t works_stored;    /* works found DONE or FAILED in the store (they are not run) */
    int64_t failed_requeued; /* retry_failed: failed results deleted (their works run again) */
    int64_t stale_rows;      /* line rows deleted */
    struct output_repair_stats files[2]; /* by enum store_file */
};

/* l holds the whole backlog (jobs/ingest), nothing yet done; l->st and both l->out must be open. */
int reconcile_run(ledger *l, int retry_failed, struct reconcile_stats *st, struct err *e);

/* The stats as the run record's "repair" object (a new reference). */
json_t *reconcile_stats_json(const struct reconcile_stats *st);

#endif
