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
 *         READY (only with order_input): its row is stored without an offset; its bytes wait in the held
 *         heap until every line before it is scheduled
 *         SCHEDULED: its row has an offset; its bytes are in its file, or in the write buffer until the
 *         commit that scheduled it has been written
 *
 * One commit (ledger_commit_and_write) is one store transaction: the results handed in since the last one,
 * the rows of the lines they finish (and of lines queued by reconcile), and the offsets of the lines
 * scheduled; only after the transaction is committed are the scheduled bytes appended to the files (DESIGN.md
 * invariant 2). A kill at any point loses at most that transaction; the files never hold a byte that the
 * store does not (jobs/reconcile cuts a torn tail on the next start).
 *
 * Memory. The book keeps no text: a line is its offset in the backlog, its number, a digest and a few
 * counts (32 bytes); a work is its plan summary, owner and result row (28 bytes) plus its key in the keymap
 * (PLAN_KEY_BYTES + slots). Ids, prompts, parameters and messages are read again from the backlog when they
 * are needed (jobs/ingest: a work's prompt when it is submitted, a line's id when its bytes are built),
 * through line_info. So the book costs about 85 bytes per one-completion line whatever the lines hold
 * (ledger_bytes), and the backlog's own bytes never stay in memory.
 *
 * Invariants (ledger_check; they hold from the end of jobs/reconcile on, whenever no ledger call is running):
 *   - n_works == the size of keys; the works of a line are valid indices
 *   - a work is DONE or FAILED exactly when it has a result row; a line's n_done / n_failed count the works
 *     it needs that are DONE / FAILED
 *   - a work's owner needs it as completion `index`; its refs list holds every other line that needs it, once
 *   - lines are in backlog order: their numbers increase
 *   - a finished WAITING line is in the ready list, and the ready list holds only such lines, each once
 *   - a READY line has its bytes and row in the held heap, and the heap holds only READY lines; a SCHEDULED
 *     line is in the file its results call for; with order_input every line before `cursor` is SCHEDULED
 *   - per file: the lengths of its SCHEDULED lines add up to out_end, and the file (when open) is exactly
 *     out_end bytes long: nothing reaches a file but whole, committed lines
 *   - per file: n_committed counts the READY and SCHEDULED lines of that file (their rows are committed)
 *   - nothing is in the write buffers (they live only inside a commit), nor in `fin` when ledger_check runs
 *     (after a commit: results handed in wait there until the next one)
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
#define LEDGER_MAX_N 255 /* completions per line (the n field is a byte; genparam allows 128) */

struct ledger_work {
    struct plan_item plan;  /* what ordering needs of its owner's prompt */
    uint32_t owner;         /* the first line that needs it: its prompt and parameters run it */
    uint32_t ref_head;      /* the other lines that need it: first entry in ledger.refs, LEDGER_NO_REF when none */
    uint8_t state;          /* enum ledger_work_state */
    uint8_t index;          /* which completion of its owner it is (its seed and key follow from it) */
    uint16_t gen_units;     /* tokens it may generate (max_tokens as clamped to the context; 0 for an
                               embedding) in units of LEDGER_GEN_UNIT, rounded up, saturated: what the
                               concurrency plan needs (plan_kv_blocks), in bytes that were padding */
    uint32_t result_id;     /* its row in the store's results once DONE / FAILED, else 0 (rows past
                               UINT32_MAX are refused when stored) */
};

/* Bytes of built lines one commit's transaction holds at most (past one line): a result that finishes more
 * lines has them built and stored in further transactions (ledger_commit_and_write). */
#define LEDGER_COMMIT_BYTES ((size_t)1 << 20)
#define LEDGER_GEN_UNIT 16 /* tokens a unit of ledger_work.gen_units (2^20 tokens fit) */

/* gen_units of n_gen tokens, and the tokens that many units stand for (at least the n_gen they came from). */
static inline uint16_t ledger_gen_units(int64_t n_gen)
{
    int64_t u = n_gen > 0 ? (n_gen + LEDGER_GEN_UNIT - 1) / LEDGER_GEN_UNIT : 0;
    return (uint16_t)(u < UINT16_MAX ? u : UINT16_MAX);
}
static inline int64_t ledger_gen_tokens(uint16_t units) { return (int64_t)units * LEDGER_GEN_UNIT; }

struct ledger_ref {
    uint32_t line;
    uint32_t next;          /* next entry of the same work's list, LEDGER_NO_REF at the end */
};

/* One backlog line (32 bytes; see "Memory" above). */
struct ledger_line {
    int64_t off;            /* byte offset of the line in the backlog: it is read again from there */
    uint64_t digest : 56;   /* the first 7 bytes of its digest (ledger_digest_head) when it was read; a store
                               row belongs to it when the row's digest starts with them */
    uint64_t code : 8;      /* bad line: its code, an index into ledger_codes */
    uint32_t no;            /* 1-based line number in the backlog */
    uint32_t works;         /* n == 1: its work; n > 1: its works are multi[works .. works + n) */
    uint32_t len;           /* length of its bytes, once READY / SCHEDULED */
    uint8_t n, n_done, n_failed; /* completions it needs, and of those DONE / FAILED */
    uint8_t state : 2;      /* enum ledger_line_state */
    uint8_t file : 1;       /* enum store_file, once READY / SCHEDULED */
    uint8_t bad : 1;        /* a bad line: a code and (read again) a message, no works */
    uint8_t kind : 2;       /* enum input_kind */
};

/* The codes of bad lines (jobs/input's, then jobs/ingest's), NULL-terminated. */
extern const char *const ledger_codes[];
/* Index of code in ledger_codes; -1 when it is not one. */
int ledger_code_index(const char *code);

struct ledger;

/* What a line's bytes are built from besides its results (read again from the backlog: jobs/ingest). */
struct ledger_line_info {
    const char *custom_id;  /* NULL: none */
    const char *model;      /* the line's "model", or NULL */
    const char *message;    /* a bad line's message */
    int32_t dimensions;     /* an embeddings line's output options (jobs/embedding), else 0 */
    int base64;
    int logprobs;           /* 1: its results are stored with their logprobs (output_logprobs_pack) */
};
/* Fills *out for line li; the strings stay valid until the next call. */
typedef int (*ledger_info_fn)(void *user, const struct ledger *l, uint32_t li, struct ledger_line_info *out,
                              struct err *e);

/* What a line's bytes are built from, as a digest (the store row keeps all 32 bytes; the book the first 7):
 * a request line from its id, kind, model name and the keys of its completions; a bad line from its id,
 * code and message. */
void ledger_digest_request(const char *custom_id, int kind, const char *model, int32_t n, const uint8_t (*keys)[32],
                           uint8_t out[32]);
void ledger_digest_bad(const char *custom_id, const char *code, const char *message, uint8_t out[32]);
/* An embeddings line's: ledger_digest_request's (kind INPUT_KIND_EMBEDDING) with its output options too. */
void ledger_digest_embedding(const char *custom_id, const char *model, int32_t n, const uint8_t (*keys)[32],
                             int32_t dimensions, int base64, uint8_t out[32]);
uint64_t ledger_digest_head(const uint8_t digest[32]);

struct ledger_params {
    const char *model_name; /* the served model's name: "model" of every result (borrowed) */
    const uint8_t *model_sha256; /* (32) the model file's; with version and backend, names system_fingerprint
                                    (NULL: zeros) */
    const char *version;    /* nightshift's version (NULL: "?") */
    const char *backend;    /* the backend's name: "cpu", "cuda" (NULL: "?") */
    int order_input;        /* lines reach the files in input order (else as they finish) */
    int debug_checks;       /* 1: ledger_check after every commit (tests; O(lines + refs) each) */
    void (*test_hook)(const char *point); /* see job_config.test_hook; NULL normally */
    const tok_vocab *vocab; /* spells the tokens of results with logprobs (output_logprobs_render); NULL: a
                               line with logprobs cannot be built */
};

struct ledger_finished; /* a result handed in and not yet committed (ledger.c) */
struct ledger_held;     /* a READY line's bytes and row (ledger.c) */

#define LEDGER_RUN_ID_BYTES 33      /* 32 hex digits and a NUL */
#define LEDGER_FINGERPRINT_BYTES 24 /* "fp_" and 16 hex digits and a NUL */

typedef struct ledger {
    struct ledger_params p;
    char run_id[LEDGER_RUN_ID_BYTES]; /* names the lines' ids (jobs/output); from the store at the first build */
    char fingerprint[LEDGER_FINGERPRINT_BYTES]; /* system_fingerprint of every result */
    ledger_info_fn line_info; /* set by whoever filled the book (jobs/ingest) before the first commit */
    void *info_user;
    struct ledger_line *lines;
    size_t n_lines, cap_lines;
    struct ledger_work *works;
    size_t n_works, cap_works;
    uint32_t *multi;       /* the works of lines with n > 1 */
    size_t n_multi, cap_multi;
    struct ledger_ref *refs;
    size_t n_refs, cap_refs;
    plan_keymap *keys;     /* key -> work index */
    store *st;             /* borrowed; set before the first commit */
    output_file *out[2];   /* borrowed, by enum store_file; set (and repaired) before the first commit */
    int64_t out_end[2];    /* end of each file's last scheduled line */
    size_t cursor;         /* order_input: every line before it is SCHEDULED */
    int64_t n_committed[2]; /* per file: lines whose row the store holds (READY or SCHEDULED) */
    double t_store, t_output; /* seconds inside commits: store work; building and writing lines */
    /* the commit in progress (ledger.c only) */
    struct ledger_finished *fin; /* sorted by work inside a commit */
    size_t n_fin, cap_fin;
    uint32_t *ready;       /* lines to build in the next commit */
    size_t n_ready, cap_ready;
    struct ledger_held *held; /* min-heap by line: READY lines' bytes (order_input) */
    size_t n_held, cap_held;
    struct output_buf wbuf[2];
} ledger;

int ledger_init(ledger *l, const struct ledger_params *p, struct err *e);
/* Frees the lines, works and results not yet committed; not st or out. */
void ledger_free(ledger *l);
/* Bytes the book holds now (its arrays as far as they are in use, the keymap), for the record. */
size_t ledger_bytes(const ledger *l);
/* The fixed bytes of the book for each line of n completions that has no duplicate (a line, its works,
 * their keys and keymap slots at the highest load): what a backlog of such lines is budgeted at. */
size_t ledger_bytes_per_line(int32_t n);

/* --- filling the book (jobs/ingest) --- */

/* Appends a zeroed WAITING line numbered no at byte off, needing n works (0 for a bad line); *li = its
 * index. Lines come in backlog order. Pointers into lines are invalidated. */
int ledger_add_line(ledger *l, int64_t no, int64_t off, int32_t n, uint32_t *li, struct err *e);
/* Makes line li (just added, without works yet) a bad line with code (one of ledger_codes). */
void ledger_set_bad(ledger *l, uint32_t li, const char *code);
/* Completion k of line li has key (32 bytes) and a prompt summarized by plan: sets its work to the key's
 * work, a new PENDING one owned by li (*folded = 0) or the existing one (*folded = 1, li added to its refs). */
int ledger_add_work(ledger *l, uint32_t li, int32_t k, const uint8_t key[32], struct plan_item plan, int *folded,
                    struct err *e);
/* Work of completion k of line L. */
uint32_t ledger_line_work(const ledger *l, const struct ledger_line *L, int32_t k);
/* Index of the line numbered no (lines are in backlog order: O(log lines)); -1 when none. */
int64_t ledger_find_line(const ledger *l, int64_t no);

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

/* Work w (PENDING) was submitted to the engine: it becomes QUEUED. */
void ledger_mark_queued(ledger *l, uint32_t w);
/* Hands in the result of work w (PENDING or QUEUED): r->key (its full key), status, finish, text, counts and
 * error; created is set by the commit. Takes r->text and r->error (malloc'd), also on failure. */
int ledger_add_result(ledger *l, uint32_t w, struct store_result *r, struct err *e);
/* Results handed in and not yet committed. */
size_t ledger_n_uncommitted(const ledger *l);

/* One commit: stores the results handed in, credits them to their lines, builds the bytes of every line
 * that is finished now (its id, model or message through line_info; a line whose digest no longer matches
 * what was read fails the commit: the backlog changed), stores their rows and schedules them (in input
 * order with order_input) in one transaction; then, only after it committed, appends the scheduled bytes to
 * the files. A no-op when there is nothing to store or schedule. After a failure the ledger can only be
 * freed (a failure before the commit rolls the transaction back and writes nothing). */
int ledger_commit_and_write(ledger *l, struct err *e);

/* Lines in the result file, lines in the error file, and of those the ones that are not bad lines
 * (a completion failed in the engine). */
void ledger_count_lines(const ledger *l, int64_t *n_results, int64_t *n_errors, int64_t *n_engine_errors);

/* Lines whose results (ok) or errors (failed) the store holds now, committed: the SCHEDULED lines and, with
 * order_input, the READY ones waiting for an earlier line before they reach their file. O(1). */
void ledger_count_committed(const ledger *l, int64_t *n_results, int64_t *n_errors);

/* Debug check of the invariants above; 0 when they hold. O(lines + refs + works). */
int ledger_check(const ledger *l, struct err *e);

#endif
