/* job — one `nightshift run` as a library call: backlog in, result + error files, store and run record out.
 *
 *   1. read and validate every line, render chat messages with the model's template, tokenize, compute the
 *      keys of every completion and fold equal keys into one work (jobs/ingest, into jobs/ledger)
 *   2. open the store (jobs/store); refuse one made with another model or other defaults unless force
 *      (jobs/settings); reconcile: keys already done are skipped, stale line rows are dropped, the output
 *      files are repaired to match the store exactly (jobs/reconcile)
 *   3. order the remaining work (jobs/plan) and feed the engine; results are collected and committed to
 *      the store in one transaction per commit interval (every result finished in an engine step is in
 *      exactly one transaction), and only then written to the output files (ledger_commit_and_write)
 *   4. write the run record (jobs/record)
 *
 * Under MPI (config.dist), this runs on rank 0 only: steps 1, 2 and 4 are unchanged, and in step 3 the
 * planned works are handed, in chunks and in planned order, to the worker ranks as well as to rank 0's own
 * engine (jobs/dist); every result, wherever computed, goes through the same ledger commit.
 *
 * Every backlog line ends in exactly one of the two files, once (DESIGN.md invariant 3); a result line is
 * written only after the commit that holds it (invariant 2). A kill at any point loses at most the
 * uncommitted work; the next run with the same command finishes the job.
 */
#ifndef NS_JOBS_JOB_H
#define NS_JOBS_JOB_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "engine/engine.h"
#include "jobs/dist.h"
#include "jobs/input.h"
#include "jobs/plan.h"
#include "jobs/progress.h"
#include "jobs/store.h"
#include "runtime/runtime.h"
#include "tokenizer/chat.h"
#include "tokenizer/tok.h"

/* The engine a run drives (job_config.engine): by default m->eng through engine_add / engine_step /
 * engine_has_work / engine_take / engine_get_stats. A caller whose engine belongs to another thread (the
 * server's engine thread: server/batches) passes these instead; each has the contract of the engine call it
 * stands for, except that step may wait (briefly: it should return within a fraction of a second) for the
 * other thread's progress instead of computing. With them, the run has no memory watchdog (config.watchdog
 * is ignored), config.drain only stops the submissions (the running requests are not capped), and config.dist
 * must be NULL. */
struct job_engine {
    void *ctx;
    int (*add)(void *ctx, const struct engine_request *r, struct err *e);
    int (*step)(void *ctx, struct err *e);
    int (*has_work)(void *ctx);
    int (*take)(void *ctx, struct engine_result *out);
    void (*get_stats)(void *ctx, struct engine_stats *s);
};

struct job_config {
    const char *backlog, *output, *errors, *store, *record; /* paths (record may be NULL: none) */
    struct input_opts input;       /* format, line bound, generation defaults */
    enum store_durability durability;
    int retry_failed;              /* failed keys are computed again */
    int force;                     /* reuse a store made with another model / other defaults */
    int order_input;               /* write results in input order (default: as completed) */
    enum plan_sort sort;
    double commit_interval;        /* seconds between commits at most (0: after every engine step) */
    enum progress_mode progress;
    double progress_interval;      /* seconds between log lines when not on a terminal */
    int parse_special;             /* special-token text in completion prompts becomes those tokens */
    volatile sig_atomic_t *stop;   /* optional: set (by a signal handler) to stop after the current step */
    volatile sig_atomic_t *drain;  /* optional: set (by a signal handler) to stop admitting work: the running
                                      sequences finish (at most drain_s seconds more), what finished is
                                      committed, then the run stops as through stop */
    double drain_s;                /* default 5 */
    FILE *mirror;                  /* optional: every line of the output file is also written here, after it
                                      is in the file (so after its commit), in the file's order; a run starts
                                      with the whole file as reconciled, so a resumed run writes the results
                                      of earlier runs here again (`run -o -`: standard output) */
    dist *dist;                    /* optional: this is rank 0 of an MPI job (jobs/dist): it also hands works
                                      to the other ranks and commits their results; NULL: one process */
    int argc;                      /* the command line, for the record */
    char **argv;
    const json_t *settings;        /* the effective flags (borrowed), copied into the record; may be NULL */
    const char *version;           /* nightshift version, for the record and the store */
    const char *owner;             /* who runs it, for the record (NULL: none recorded) */
    int32_t retest_after_days;     /* the record says when to re-measure the settings (default 90) */
    double sample_interval;        /* seconds between time-series samples in the record (default 5) */
    int watchdog;                  /* 1 (default): lower max_seqs under memory pressure (jobs/monitor) */
    const struct job_engine *engine; /* optional: drive the engine through these (see above); NULL: m->eng */
    /* optional: called after every commit, and once when the run has reconciled its store, with the lines
     * the store holds results and errors for (ledger_count_committed): live progress that follows the
     * commits, also with order_input, whose files grow only in backlog order. NULL: none. */
    void (*on_commit)(void *ctx, int64_t lines_ok, int64_t lines_failed);
    void *on_commit_ctx;
    /* tests only (fault injection): called after every engine "step", and at "after_commit", "mid_write"
     * (half of a batch written) and "after_write" of every commit (ledger_commit_and_write); a crash test's
     * hook kills the process at a chosen call or slows the steps down. NULL normally. */
    void (*test_hook)(const char *point);
};

/* Defaults: format auto, durability full, sort ascending, commit interval 1 s, progress auto / 10 s,
 * parse_special 1, drain 5 s. Paths are NULL. */
struct job_config job_default_config(void);

struct job_model {
    const char *path;              /* model file */
    const char *name;              /* recorded as "model" in results when a line names none */
    uint64_t size;
    uint8_t sha256[32];
    const struct model_hparams *hp;
    const tok_vocab *vocab;
    enum chat_family chat;         /* the family renderer (CHAT_NONE: none); the fallback when chat_jinja is set */
    const jinja_template *chat_jinja; /* the model's own chat template (borrowed; NULL: chat by family; with
                                      chat == CHAT_NONE too, chat input is an error) */
    const char *chat_source;       /* "gguf", "flag" or "none" (for messages and the record) */
    engine *eng;
    struct engine_params ep;       /* what eng was made with; its debug_checks also runs the ledger's
                                      invariant check after every commit */
    struct runtime_seqs seqs;      /* how many sequences run at once (the runtime's rt->seqs). automatic: the
                                      run chooses again from its plan, up to seqs.knee = ep.max_seqs
                                      (plan_max_seqs), and records the choice; zeroed: ep.max_seqs, given */
    const char *backend;
    int backend_gpu;               /* the backend runs on a GPU (backend_caps.gpu): its energy is recorded */
    int threads;
};

struct job_summary {
    int64_t lines;                 /* non-blank backlog lines */
    int64_t lines_ok, lines_failed; /* in the result / error file now */
    int64_t input_errors;          /* bad lines (input, template, prompt too long) */
    int64_t engine_errors;         /* lines whose request failed in the engine */
    int64_t requests;              /* good lines (a line is one request, whatever its n) */
    int64_t distinct_requests;     /* of those, not a repeat of an earlier line's request */
    int64_t completions;           /* what the requests ask for (n each) = work_total + folded_duplicates */
    int64_t work_total;            /* unique keys: unique completions */
    int64_t work_skipped_done;     /* already done in the store */
    int64_t work_computed;         /* finished by this run */
    int64_t work_failed;           /* of those, failed */
    int64_t folded_duplicates;     /* completions served by another line's identical key */
    int64_t prompt_tokens, prompt_tokens_cached, gen_tokens;
    double wall_s, gen_tok_s, prompt_tok_s;
    double t_parse, t_plan, t_store, t_output, t_engine; /* seconds by phase */
    double t_dist;                 /* seconds serving the other MPI ranks (0 without) */
    int interrupted;               /* stopped by config.stop before finishing */
    struct output_repair_stats_pub {
        int64_t lines_rewritten, bytes_cut;
    } repaired;
};

/* Checks the paths before any work starts. The backlog must be a regular file (a pipe, a device, a directory
 * or "-" for standard input is refused, saying so: its lines are read again by offset during the run and
 * the whole file again by a resumed run; a stream is first saved to a file by jobs/spool, as `run -` does). The output,
 * errors, store and record paths (record may be NULL) must each be a regular file or not exist yet, in a
 * directory that exists and can be written to (the record is written through a temporary file beside it);
 * a file that exists must be writable. The message names the flag and the path ("-o out/: is a directory;
 * give a file path"). Creates nothing. */
int job_check_paths(const struct job_config *c, struct err *e);

/* job_check_paths without the backlog: for a caller that makes the backlog itself (jobs/spool). */
int job_check_outputs(const struct job_config *c, struct err *e);

/* Runs the job (job_check_paths first). Returns 0 when every line has ended in one of the files (or the run
 * was interrupted through config.stop: summary.interrupted), -1 with an error otherwise (nothing committed
 * is lost). The output files are locked (jobs/output) before the store is opened: two runs cannot write the
 * same file, whichever store they use. */
int job_run(const struct job_config *c, const struct job_model *m, struct job_summary *s, struct err *e);

#endif
