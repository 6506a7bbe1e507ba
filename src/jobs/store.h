/* store — the run's single source of truth: one SQLite database in WAL mode.
 *
 *   meta(k, v)        run metadata: model identity, default parameters, format version
 *   results(id, key, ...) one row per finished key: status (done/failed), finish reason, text, token
 *                     counts, created (unix time of the commit: output lines take it from here, so a line
 *                     rebuilt after a crash is byte-identical to the first one)
 *   lines(id, line, ...) one row per backlog line whose outcome is known: which file (output/errors), the
 *                     exact bytes of its line, a digest of what it was built from, and its byte offset in
 *                     that file once it has been scheduled for writing (NULL before).
 *
 * Both tables are append-only B-trees keyed by rowid (`id`), with no index on the key or the line number:
 * a commit writes only new pages at the end instead of touching pages all over a tree ordered by random
 * sha256 keys (measured: 8% of a 100k-request run's wall time with key-ordered tables, see bench/NOTES.md).
 * Callers find rows by the ids that the inserts and scans hand them.
 *
 * The output files are derived from `lines`: within each file the rows with an offset tile [0, end)
 * without gaps or overlaps (store_check verifies it), so on start the files can be compared with the store
 * and repaired (see jobs/output). A row's offset is assigned in the same transaction that inserts the
 * results it depends on, before any byte of it is written (DESIGN.md invariant 2).
 *
 * synchronous=FULL by default (a commit survives power loss); NORMAL trades the last commits for speed.
 * One process at a time: store_open takes an exclusive flock on the database file.
 */
#ifndef NS_JOBS_STORE_H
#define NS_JOBS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum store_durability { STORE_DURABILITY_FULL, STORE_DURABILITY_NORMAL };
enum store_status { STORE_STATUS_DONE = 1, STORE_STATUS_FAILED = 2 };
enum store_file { STORE_FILE_OUTPUT = 0, STORE_FILE_ERRORS = 1 };

typedef struct store store;

/* Creates the database if needed. Fails if another process holds it. */
int store_open(const char *path, enum store_durability d, store **out, struct err *e);
void store_close(store *s);

/* *v is malloc'd, or NULL when the key is absent. */
int store_meta_get(store *s, const char *k, char **v, struct err *e);
int store_meta_set(store *s, const char *k, const char *v, struct err *e);

int store_begin(store *s, struct err *e);
int store_commit(store *s, struct err *e);
void store_rollback(store *s);

struct store_result {
    uint8_t key[32];
    int status;          /* enum store_status */
    int32_t finish;      /* enum engine_finish */
    const char *text;    /* (text_len) */
    size_t text_len;
    int32_t n_prompt, n_gen, n_cached;
    int64_t created;     /* unix seconds */
    const char *error;   /* failed only, else NULL */
};

/* Appends a result; *id = its row id. A key is expected at most once (callers skip done keys). */
int store_put_result(store *s, const struct store_result *r, int64_t *id, struct err *e);
/* The result with row id `id` (O(log n)); *found = 0 when absent. On success text/error are malloc'd. */
int store_get_result(store *s, int64_t id, struct store_result *out, int *found, struct err *e);
/* Calls cb for every result's row id, key and status (one table scan, in insertion order). */
typedef void (*store_status_fn)(void *user, int64_t id, const uint8_t key[32], int status);
int store_foreach_status(store *s, store_status_fn cb, void *user, struct err *e);
/* Deletes failed results (they are computed again); *n = how many. */
int store_delete_failed(store *s, int64_t *n, struct err *e);
int64_t store_n_results(store *s, int status);

struct store_line {
    int64_t id;          /* row id (set by scans; ignored by store_put_line) */
    int64_t line;
    uint8_t digest[32];
    int file;            /* enum store_file */
    int64_t off;         /* -1: not scheduled yet */
    const char *text;    /* (len) the exact line, '\n' included */
    size_t len;
};

/* Appends a line row; *id = its row id. */
int store_put_line(store *s, const struct store_line *l, int64_t *id, struct err *e);
int store_set_line_off(store *s, int64_t id, int64_t off, struct err *e);
int store_delete_line(store *s, int64_t id, struct err *e);
/* Every line row in insertion order, text left NULL (len is set). Views valid during cb only. */
typedef int (*store_line_fn)(void *user, const struct store_line *l);
int store_foreach_line(store *s, store_line_fn cb, void *user, struct err *e);
/* Rows of one file that have an offset, in offset order, with text. cb returning non-zero stops. */
int store_foreach_emitted(store *s, int file, store_line_fn cb, void *user, struct err *e);
/* Reassigns the offsets of a file's scheduled rows so that they tile [0, end) in their current order
 * (after rows were deleted). *end = the file's length. */
int store_compact_offsets(store *s, int file, int64_t *end, struct err *e);

/* Debug check of the invariant above (and of status values); 0 when it holds. O(rows). */
int store_check(store *s, struct err *e);

/* PRAGMA integrity_check on a database file (opened read-only, no lock). *result is malloc'd ("ok" when
 * the file is sound). */
int store_integrity_check(const char *path, char **result, struct err *e);

#endif
