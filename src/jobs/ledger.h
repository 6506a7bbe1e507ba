/* ledger — the book of one run: every backlog line and every unit of work with its state, and the one step
 * that moves finished work into the store and only then into the output files (ledger_commit_and_write).
 *
 * Lines and works. `lines` holds every non-blank backlog line in input order; `works` every unique key
 * (index = the key's index in `keys`). A line needs n works, one per completion; a work is needed by one or
 * more lines (its refs list) and is owned by the first line that needed it: the owner's prompt and
 * parameters run it. jobs/ingest fills the book, jobs/reconcile marks what the store already holds, the
 * run (jobs/job) hands in the engine's results.
 *
 * States.
 *   work  PENDING (to run) -> QUEUED (in the engine, or finished and waiting for the next commit)
 *         -> DONE | FAILED (its result is in the store: result_id)
 *   line  WAITING: until every work it needs is DONE or FAILED (a bad line is finished from the start);
 *         a finished WAITING line is in the ready list, to be built by the next commit
 *         READY (only with order_input): its row is stored without an offset; its bytes wait in `text`
 *         until every line before it is scheduled
 *         SCHEDULED: its row has an offset; its bytes are in its file, or in the write buffer until the
 *         commit that scheduled it has been written
 *
 * One commit (ledger_commit_and_write) is one store transaction: the results handed in since the last one,
 * the rows of the lines they finish (and of lines queued by reconcile), and the offsets of the lines
 * scheduled; only after the transaction is committed are the scheduled bytes appended to the files (DESIGN.md
 * invariant 2). A kill at any point loses at most that transaction; the files never hold a byte that the
 * store does not (jobs/reconcile cuts a torn tail on the next start).
 *
 * Invariants (ledger_check; they hold from the end of jobs/reconcile on, whenever no ledger call is running):
 *   - n_works == the size of keys; the works of a line are valid indices
 *   - a work is DONE or FAILED exactly when it has a result row; a line's n_done / n_failed count the works
 *     it needs that are DONE / FAILED
 *   - a work's refs list holds each line that needs it, once; its owner is the first of those lines
 *   - a finished WAITING line is in the ready list, and the ready list holds only such lines, each once
 *   - a READY line has its bytes and a row; a SCHEDULED line has a row, the file its results call for and no
 *     bytes left to write; with order_input every line before `cursor` is SCHEDULED
 *   - per file: the lengths of its SCHEDULED lines add up to out_end, and the file (when open) is exactly
 *     out_end bytes long: nothing reaches a file but whole, committed lines
 *   - nothing is in the write buffers, and no work has a slot (both live only inside a commit)
 */
#ifndef NS_JOBS_LEDGER_H
#define NS_JOBS_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/input.h"
#include "jobs/output.h"
#include "jobs/plan.h"
#include "jobs/store.h"
#include "util/err.h"

enum ledger_work_state { LEDGER_WORK_PENDING, LEDGER_WORK_QUEUED, LEDGER_WORK_DONE, LEDGER_WORK_FAILED };
enum ledger_line_state { LEDGER_LINE_WAITING, LEDGER_LINE_READY, LEDGER_LINE_SCHEDULED };

#define LEDGER_NO_REF UINT32_MAX

struct ledger_work {
    uint32_t owner;     /* the line whose prompt and parameters run it */
    uint32_t ref_head;  /* first entry of its refs list in ledger.refs, LEDGER_NO_REF when none */
    int32_t max_tokens; /* clamped to the model's context */
    uint64_t seed;      /* the completion's seed */
    int64_t result_id;  /* its row in the store's results once DONE / FAILED, else 0 */
    uint8_t state;      /* enum ledger_work_state */
};

struct ledger_ref {
    uint32_t line;
    uint32_t next;      /* next entry of the same work's list, LEDGER_NO_REF at the end */
};

/* Pointers are owned by the ledger (freed by ledger_free); jobs/ingest fills them in. */
struct ledger_line {
    int64_t no;            /* 1-based line number in the backlog */
    char *custom_id;       /* NULL only for a bad line without a readable id */
    char *model;           /* the line's "model", or NULL */
    uint8_t kind;          /* enum input_kind */
    uint8_t state;         /* enum ledger_line_state */
    uint8_t file;          /* enum store_file, once READY / SCHEDULED */
    uint8_t bad;           /* a bad line: code and message, no works */
    const char *code;      /* static string */
    char *message;
    struct gen_params gen;
    int32_t *prompt;       /* (n_prompt) rendered prompt ids; freed once no pending work needs it */
    int32_t n_prompt;
    uint32_t *works;       /* (n) the work of each completion */
    int32_t n, n_done, n_failed;
    uint8_t digest[32];    /* what its bytes are built from; equals its store row's digest */
    int64_t row;           /* its row in the store's lines once READY / SCHEDULED */
    char *text;            /* (len) its bytes while READY (and inside the commit that builds them) */
    size_t len;            /* length of its bytes; kept once SCHEDULED */
};

struct ledger_params {
    const char *model_name; /* "model" of result lines whose backlog line names none (borrowed) */
    int order_input;        /* lines reach the files in input order (else as they finish) */
    int debug_checks;       /* 1: ledger_check after every commit (tests; O(lines + refs) each) */
    void (*test_hook)(const char *point); /* see job_config.test_hook; NULL normally */
};

struct ledger_finished; /* a result handed in and not yet committed (ledger.c) */

typedef struct ledger {
    struct ledger_params p;
    struct ledger_line *lines;
    size_t n_lines, cap_lines;
    struct ledger_work *works;
    size_t n_works, cap_works;
    struct ledger_ref *refs;
    size_t n_refs, cap_refs;
    plan_keymap *keys;     /* key -> work index */
    store *st;             /* borrowed; set before the first commit */
    output_file *out[2];   /* borrowed, by enum store_file; set (and repaired) before the first commit */
    int64_t out_end[2];    /* end of each file's last scheduled line */
    size_t cursor;         /* order_input: every line before it is SCHEDULED */
    double t_store, t_output; /* seconds inside commits: store work; building and writing lines */
    /* the commit in progress (ledger.c only) */
    struct ledger_finished *fin;
    size_t n_fin, cap_fin;
    struct ledger_finished **slot; /* (n_slot) work -> its entry in fin during a commit, else NULL */
    size_t n_slot;
    uint32_t *ready;       /* lines to build in the next commit */
    size_t n_ready, cap_ready;
    struct output_buf wbuf[2];
} ledger;

int ledger_init(ledger *l, const struct ledger_params *p, struct err *e);
/* Frees the lines, works and results not yet committed; not st or out. */
void ledger_free(ledger *l);

/* --- filling the book (jobs/ingest) --- */

/* Appends a zeroed WAITING line; *li = its index. Pointers into lines are invalidated. */
int ledger_add_line(ledger *l, uint32_t *li, struct err *e);
/* Completion k of line li (its works array holds n entries) has key: sets works[k] to the key's work, a
 * new PENDING one owned by li (*folded = 0) or the existing one (*folded = 1), and adds li to its refs. */
int ledger_add_work(ledger *l, uint32_t li, int32_t k, const uint8_t key[32], int32_t max_tokens, uint64_t seed,
                    int *folded, struct err *e);

/* --- what is already known (jobs/reconcile) --- */

/* The file a finished line belongs in (enum store_file), -1 while it waits for works. */
int ledger_line_file(const struct ledger_line *L);
/* Work w's result is in the store (row result_id, enum store_status status): it becomes DONE / FAILED.
 * The lines that need it are credited by ledger_credit_lines. */
void ledger_mark_stored(ledger *l, uint32_t w, int status, int64_t result_id);
/* Counts work w (DONE or FAILED) toward every line that needs it; with queue, a line it finishes is queued
 * for the next commit (without, the caller queues the lines itself, and the call cannot fail). */
int ledger_credit_lines(ledger *l, uint32_t w, int queue, struct err *e);
/* Queues finished line li for the next commit. */
int ledger_queue_line(ledger *l, uint32_t li, struct err *e);

/* --- the run (jobs/job) --- */

/* Frees the prompts that no PENDING work needs (their lines' works are done). */
void ledger_drop_idle_prompts(ledger *l);
/* Work w (PENDING) was submitted to the engine: it becomes QUEUED. */
void ledger_mark_queued(ledger *l, uint32_t w);
/* Hands in the result of work w (PENDING or QUEUED): r->status, finish, text, counts and error; its key and
 * created are set by the commit. Takes r->text and r->error (malloc'd), also on failure. */
int ledger_add_result(ledger *l, uint32_t w, struct store_result *r, struct err *e);
/* Results handed in and not yet committed. */
size_t ledger_n_uncommitted(const ledger *l);

/* One commit: stores the results handed in, credits them to their lines, builds the bytes of every line
 * that is finished now, stores their rows and schedules them (in input order with order_input) in one
 * transaction; then, only after it committed, appends the scheduled bytes to the files. A no-op when there
 * is nothing to store or schedule. After a failure the ledger can only be freed (a failure before the
 * commit rolls the transaction back and writes nothing). */
int ledger_commit_and_write(ledger *l, struct err *e);

/* Lines in the result file, lines in the error file, and of those the ones that are not bad lines
 * (a completion failed in the engine). */
void ledger_count_lines(const ledger *l, int64_t *n_results, int64_t *n_errors, int64_t *n_engine_errors);

/* Debug check of the invariants above; 0 when they hold. O(lines + refs + works). */
int ledger_check(const ledger *l, struct err *e);

#endif
