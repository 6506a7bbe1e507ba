/* nightshift run — clears a backlog of prompts, resumably. Flag parsing, model loading and the summary;
 * the job itself is jobs/job (job_run).
 *
 *   nightshift run BACKLOG [-m MODEL] -o RESULTS.jsonl [--errors ERRORS.jsonl] [--store RUN.db] [flags]
 *
 * Kill it at any moment and run the same command again: finished work is skipped, the output files are
 * repaired from the store, nothing is lost or written twice. SIGTERM stops it cleanly after the current
 * engine step (exit status 143). SIGINT (Ctrl-C) stops admitting work and lets the running sequences finish
 * for up to a few seconds, commits what finished and exits with 130; a second SIGINT stops after the current
 * step, a third kills.
 *
 * Streams (jobs/spool): BACKLOG "-" is standard input, a named pipe or process substitution (<(zcat x.gz)) is
 * read once, and a gzip or zstd backlog is decompressed; each is
 * first copied into a regular file beside the store, STORE.backlog (replaced atomically by every run, so a
 * resumed run reads the same lines from the same offsets; a run with other content replaces it, and
 * reconcile then drops the earlier content's lines from the files, as for an edited backlog file: the
 * store's finished requests stay as a cache). -o - writes the results to standard output: the run then
 * keeps its files in the current directory, named after the backlog (NAME = "stdin" for "-", else the
 * backlog's file name without .gz / .zst): NAME.results.jsonl (the output file proper, copied to standard
 * output line by line after each commit), NAME.errors.jsonl, NAME.nightshift.db, NAME.record.json. A
 * resumed -o - run writes every result again, earlier runs' first. The summary then goes to stderr.
 *
 * Hidden: `nightshift run --check-store DB` runs PRAGMA integrity_check and the store's own invariant
 * check, prints "ok" (exit 0) or the problems (exit 1). Used by the crash test.
 */
#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "jobs/dist.h"
#include "jobs/ingest.h"
#include "jobs/job.h"
#include "jobs/spool.h"
#include "jobs/store.h"
#include "tokenizer/chat.h"
#include "util/log.h"
#include "util/sha256.h"

/* The page: what run does, then its own flags (opts, the defaults they hold now), the generation defaults and
 * the engine flags, each from its table. */
static void run_usage(FILE *out, const struct cli_opt *opts, int n, const struct gen_params *gen,
                      const struct runtime_params *rp)
{
    fprintf(out,
            "usage: nightshift run BACKLOG [-m MODEL] -o RESULTS.jsonl [options]\n"
            "\n"
            "Clears a backlog of prompts at the highest throughput the machine allows. Resumable: kill it at any\n"
            "moment and run the same command again; finished work is skipped, nothing is lost or duplicated.\n"
            "Ctrl-C stops admitting work, lets running requests finish (a few seconds), keeps what finished and\n"
            "exits 130; a second Ctrl-C stops at once.\n"
            "\n"
            "BACKLOG: OpenAI Batch API JSONL ({\"custom_id\", \"method\", \"url\", \"body\"}), simple JSONL\n"
            "({\"id\", \"prompt\"|\"messages\", ...}) or plain text (one prompt per line). Each line's own\n"
            "generation fields override the defaults below. \"-\" reads standard input; gzip and zstd files (or\n"
            "input) are decompressed. Either is first saved beside the store as STORE.backlog (a rerun with the\n"
            "same input resumes; with other input, the files then hold the new input's results only).\n"
            "\n");
    cli_opts_usage(out, opts, n);
    fprintf(out, "Generation defaults (a line's own fields override them):\n");
    genparam_usage(out, gen, NULL);
    fprintf(out, "Engine:\n");
    engine_flags_usage(out, rp, NULL);
}

static volatile sig_atomic_t run_stop, run_drain, run_signal;

/* SIGTERM, and a second SIGINT: stop after the current engine step (the handler is then reset: one more
 * kills). A first SIGINT: drain (job_config.drain). The exit status says which signal (130 / 143, 128 + the
 * signal, as a shell reports a process killed by it). */
static void on_signal(int sig)
{
    if (!run_signal || sig == SIGTERM) run_signal = sig;
    if (sig == SIGINT && !run_drain) {
        run_drain = 1;
        return;
    }
    run_stop = 1;
    signal(sig, SIG_DFL);
}

/* Tests only. NIGHTSHIFT_TEST_CRASH=POINT:N: SIGKILL this process the Nth time the job passes POINT
 * (after_commit, mid_write, after_write, step). NIGHTSHIFT_TEST_STEP_DELAY_US=N: sleep N us after every
 * engine step, so that a crash test's random kills land mid-run however fast the machine is. */
static const char *crash_point;
static long crash_countdown, step_delay_us;

static void test_hook(const char *point)
{
    if (step_delay_us > 0 && !strcmp(point, "step")) usleep((useconds_t)step_delay_us);
    if (crash_point && !strcmp(point, crash_point) && --crash_countdown == 0) kill(getpid(), SIGKILL);
}

static void setup_test_hook(struct job_config *c)
{
    static char buf[64];
    const char *env = getenv("NIGHTSHIFT_TEST_CRASH");
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s", env);
        char *colon = strchr(buf, ':');
        if (colon) {
            *colon = '\0';
            crash_countdown = strtol(colon + 1, NULL, 10);
            if (crash_countdown > 0) crash_point = buf;
        }
    }
    env = getenv("NIGHTSHIFT_TEST_STEP_DELAY_US");
    if (env && *env) step_delay_us = strtol(env, NULL, 10);
    if (crash_point || step_delay_us > 0) c->test_hook = test_hook;
}

static int check_store(const char *path)
{
    struct err e;
    char *res = NULL;
    if (store_integrity_check(path, &res, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    if (strcmp(res, "ok")) {
        printf("%s\n", res);
        free(res);
        return 1;
    }
    free(res);
    store *s;
    if (store_open(path, STORE_DURABILITY_FULL, &s, &e) || store_check(s, &e)) {
        if (s) store_close(s);
        printf("%s\n", e.msg);
        return 1;
    }
    store_close(s);
    printf("ok\n");
    return 0;
}

/* What went into the KV pool's size, for the record. */
static json_t *budget_json(const struct runtime *rt)
{
    const struct runtime_budget *b = &rt->budget;
    json_t *o = json_pack("{s:s, s:b, s:b, s:I, s:I}", "backend", rt->backend_name, "automatic", b->automatic,
                          "capped", b->capped, "kv_bytes", (json_int_t)b->kv_bytes,
                          "kv_tokens", (json_int_t)b->kv_tokens);
    if (o) {
        const char *keys[] = {"memory_total", "memory_available", "weights", "scratch", "headroom", "backlog",
                              "kv_free"};
        const uint64_t vals[] = {b->total, b->available, b->weights, b->scratch, b->headroom, b->reserve, b->kv_free};
        for (int i = 0; i < 7; i++) json_object_set_new(o, keys[i], json_integer((json_int_t)vals[i]));
    }
    return o;
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Everything the command line says. */
struct run_args {
    struct job_config c;
    char model_name[256]; /* the GGUF's general.name (results' "model") */
    struct runtime_params rp;
    const char *chat_name, *check_store;
    jinja_template *chat_jinja; /* the model's own chat template, compiled (owned; NULL: by family) */
    int quiet, verbose;
    int to_stdout; /* -o -: the output file is results_path, copied to standard output */
    char errors_path[4096], store_path[4096], record_path[4096], results_path[4096], spool_path[4200];
};

static const char *const run_orders[] = {"completion", "input", NULL};
static const char *const run_sorts[] = {"ascending", "descending", "input", NULL};
static const char *const run_durabilities[] = {"full", "normal", NULL};

/* Parses argv into A: 0 to go on, 1 when the command is done (help printed), -1 on a bad argument (printed). */
static int run_parse(int argc, char **argv, struct run_args *A)
{
    struct job_config *c = &A->c;
    char chat_help[256];
    snprintf(chat_help, sizeof chat_help, "render chat messages with nightshift's NAME renderer:\n%s\n"
             "(default: the model's own template)", chat_family_list());
    const struct cli_opt opts[] = {
        {.help = "Files:"},
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &A->rp.model_path, .metavar = "PATH",
         .help = "GGUF model"},
        {.flag = "--output", .alias = "-o", .type = CLI_OPT_STRING, .dst = &c->output, .metavar = "PATH",
         .help = "results, one line per request (OpenAI batch output shape); \"-\": standard\n"
                 "output, the files then in the current directory named after the backlog\n"
                 "(NAME = stdin, or the backlog's file name): NAME.results.jsonl,\n"
                 "NAME.errors.jsonl, NAME.nightshift.db, NAME.record.json; a rerun\n"
                 "writes every result to standard output again"},
        {.flag = "--errors", .type = CLI_OPT_STRING, .dst = &c->errors, .metavar = "PATH",
         .help = "failed lines (default: OUTPUT.errors.jsonl)"},
        {.flag = "--store", .type = CLI_OPT_STRING, .dst = &c->store, .metavar = "PATH",
         .help = "SQLite store (default: OUTPUT.nightshift.db)"},
        {.flag = "--record", .type = CLI_OPT_STRING, .dst = &c->record, .metavar = "PATH",
         .help = "run record (default: OUTPUT.record.json)"},
        {.flag = "--check-store", .type = CLI_OPT_STRING, .dst = &A->check_store}, /* hidden: the crash test's */
        {.help = "Input:"},
        {.flag = "--format", .type = CLI_OPT_FORMAT, .dst = &c->input.format, .help = "the backlog's format"},
        {.flag = "--max-line-bytes", .type = CLI_OPT_SIZE, .dst = &c->input.max_line_bytes, .lo = 16,
         .hi = 4294967296.0, .help = "longer lines are errors"},
        {.flag = "--chat-template", .type = CLI_OPT_STRING, .dst = &A->chat_name, .metavar = "NAME",
         .help = chat_help},
        {.flag = "--no-special", .type = CLI_OPT_SET, .dst = &c->parse_special,
         .help = "special-token text in prompts stays plain text"},
        {.help = "Run:"},
        {.flag = "--order", .type = CLI_OPT_CHOICE, .dst = &c->order_input, .choices = run_orders,
         .help = "result order: as finished, or the backlog's"},
        {.flag = "--sort", .type = CLI_OPT_CHOICE, .dst = &c->sort, .choices = run_sorts,
         .help = "submission order by prompt length"},
        {.flag = "--durability", .type = CLI_OPT_CHOICE, .dst = &c->durability, .choices = run_durabilities,
         .help = "fsync every commit, or trade the last commits away"},
        {.flag = "--commit-interval", .type = CLI_OPT_DOUBLE, .dst = &c->commit_interval, .metavar = "S",
         .help = "commit finished results at least every S seconds"},
        {.flag = "--retry-failed", .type = CLI_OPT_SET, .dst = &c->retry_failed, .lo = 1,
         .help = "compute failed requests again"},
        {.flag = "--force", .type = CLI_OPT_SET, .dst = &c->force, .lo = 1,
         .help = "reuse a store made with another model or other defaults"},
        {.flag = "--progress-interval", .type = CLI_OPT_DOUBLE, .dst = &c->progress_interval, .lo_open = 1,
         .metavar = "S", .help = "seconds between progress lines when not on a terminal"},
        {.flag = "--owner", .type = CLI_OPT_STRING, .dst = &c->owner, .metavar = "NAME",
         .help = "who owns the run, for the record (default: the user name)"},
        {.flag = "--retest-after", .type = CLI_OPT_INT32, .dst = &c->retest_after_days, .hi = 36500,
         .metavar = "DAYS", .help = "the record says to re-measure the settings after DAYS"},
        {.flag = "--sample-interval", .type = CLI_OPT_DOUBLE, .dst = &c->sample_interval, .lo_open = 1,
         .metavar = "S", .help = "seconds between the record's time-series samples"},
        {.flag = "--no-watchdog", .type = CLI_OPT_SET, .dst = &c->watchdog,
         .help = "do not lower --max-seqs under memory pressure or swapping"},
        {.flag = "--quiet", .alias = "-q", .type = CLI_OPT_SET, .dst = &A->quiet, .lo = 1,
         .help = "no progress, no summary"},
        {.flag = "--verbose", .alias = "-v", .type = CLI_OPT_SET, .dst = &A->verbose, .lo = 1,
         .help = "more log lines"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (!A->rp.model_path) A->rp.model_path = cli_default_model(); /* shown as -m's default */
            run_usage(stdout, opts, n_opts, &c->input.defaults, &A->rp);
            return 1;
        }
        int r = engine_flags_parse(&A->rp, "run", argc, argv, &i);
        if (!r) r = cli_opts_parse_gen("run", &c->input.defaults, argc, argv, &i);
        if (!r) r = cli_opts_parse("run", opts, n_opts, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        if (a[0] == '-' && a[1]) {
            cli_error("run", "unknown option %s (see nightshift run --help)", a);
            return -1;
        }
        if (c->backlog) {
            cli_error("run", "one backlog at a time (got '%s' and '%s')", c->backlog, a);
            return -1;
        }
        c->backlog = a;
    }
    return 0;
}

/* The name -o - gives the run's files: "stdin" for "-" and a process substitution (/dev/fd/N), else the
 * backlog's file name without .gz / .zst. */
static void backlog_stem(const char *backlog, char *out, size_t size)
{
    const char *b = strcmp(backlog, "-") && strncmp(backlog, "/dev/fd/", 8) ? base_name(backlog) : "stdin";
    size_t n = strlen(b);
    if (n > 3 && !strcmp(b + n - 3, ".gz")) n -= 3;
    else if (n > 4 && !strcmp(b + n - 4, ".zst")) n -= 4;
    snprintf(out, size, "%.*s", (int)n, b);
}

/* Standard input and compressed backlogs: copied into STORE.backlog, which becomes the backlog (jobs/spool). */
static int run_spool(struct run_args *A, struct err *e)
{
    struct job_config *c = &A->c;
    enum spool_kind k = spool_kind_of(c->backlog);
    if (k == SPOOL_NONE) return 0;
    if (k == SPOOL_STDIN && isatty(STDIN_FILENO))
        log_warn("reading the backlog from standard input (a terminal): end it with Ctrl-D");
    snprintf(A->spool_path, sizeof A->spool_path, "%s.backlog", c->store);
    int changed;
    if (spool_copy(c->backlog, A->spool_path, &changed, e) != 0) return -1;
    if (changed)
        log_warn("backlog %s differs from the one the last run with %s read: the files will hold this backlog's "
                 "results only (the store's finished requests are reused where requests repeat)",
                 k == SPOOL_STDIN ? "- (standard input)" : c->backlog, c->store);
    log_debug("backlog %s saved as %s", c->backlog, A->spool_path);
    c->backlog = A->spool_path;
    return 0;
}

/* Checks what the arguments say together and fills the default paths: 0, or -1 (printed). */
static int run_check_args(struct run_args *A)
{
    struct job_config *c = &A->c;
    enum chat_family f;
    if (A->chat_name && chat_family_parse(A->chat_name, &f)) {
        cli_error("run", "--chat-template %s: expected one of %s", A->chat_name, chat_family_list());
        return -1;
    }
    if (!c->backlog) {
        cli_error("run", "no backlog given (usage: nightshift run BACKLOG -o RESULTS.jsonl)");
        return -1;
    }
    if (!c->output) {
        cli_error("run", "no output file given (-o RESULTS.jsonl)");
        return -1;
    }
    struct err e;
    if (genparam_check(&c->input.defaults, &e)) {
        cli_error("run", "%s", e.msg);
        return -1;
    }
    const char *name = c->output;
    char stem[2048];
    if (!strcmp(c->output, "-")) { /* standard output: the files after the backlog, in the current directory */
        A->to_stdout = 1;
        backlog_stem(c->backlog, stem, sizeof stem);
        name = stem;
        snprintf(A->results_path, sizeof A->results_path, "%s.results.jsonl", stem);
        c->output = A->results_path;
        c->mirror = stdout;
    }
    if (!c->errors)
        snprintf(A->errors_path, sizeof A->errors_path, "%s.errors.jsonl", name), c->errors = A->errors_path;
    if (!c->store) snprintf(A->store_path, sizeof A->store_path, "%s.nightshift.db", name), c->store = A->store_path;
    if (!c->record) snprintf(A->record_path, sizeof A->record_path, "%s.record.json", name), c->record = A->record_path;
    const char *outs[] = {c->output, c->errors, c->store, c->record};
    for (int i = 0; i < 4; i++) {
        if (same_file(outs[i], c->backlog)) {
            cli_error("run", "%s is the backlog itself; refusing to overwrite it", outs[i]);
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(outs[i], outs[k]) || same_file(outs[i], outs[k])) {
                cli_error("run", "%s is given for two different files", outs[i]);
                return -1;
            }
    }
    if (job_check_outputs(c, &e) || run_spool(A, &e) || job_check_paths(c, &e)) {
        cli_error("run", "%s", e.msg);
        return -1;
    }
    if (!A->rp.model_path) A->rp.model_path = cli_default_model();
    return 0;
}

/* The model's identity (sha256, cached) and the whole stack through the runtime; fills *m. 0, or -1
 * (printed). On success the caller closes rt. */
static int run_open(struct run_args *A, const dist *d, struct job_model *m, struct runtime *rt)
{
    const char *model_path = A->rp.model_path;
    struct err e;
    memset(m, 0, sizeof *m);
    /* model identity first: hashing a big model is the slow part of a start, and it is cached */
    struct stat st;
    if (stat(model_path, &st) != 0) {
        cli_error("run", "model %s: %s", model_path, strerror(errno));
        return -1;
    }
    int cached = 0;
    if (sha256_file_cached(model_path, m->sha256, &cached, &e)) {
        cli_error("run", "model %s", e.msg);
        return -1;
    }
    struct runtime_params rp = A->rp;
    dist_pick_resources(d, &rp);
    /* the backlog's book is part of the memory budget (rank 0 holds it): counted before the KV pool is sized */
    if (dist_rank(d) == 0 && ingest_estimate_bytes(A->c.backlog, A->c.input.defaults.n, &rp.reserve, &e)) {
        cli_error("run", "backlog %s", e.msg);
        return -1;
    }
    /* an auto KV pool only as large as the backlog's longest good line can use (rank 0 reads the backlog) */
    if (dist_rank(d) == 0 && rp.kv_memory == RUNTIME_AUTO &&
        ingest_seq_tokens_bound(A->c.backlog, &A->c.input, &rp.seq_tokens, &e)) {
        cli_error("run", "backlog %s", e.msg);
        return -1;
    }
    if (runtime_open(&rp, rt, &e) || dist_share_memory(d, rt, &e)) {
        cli_error("run", "%s: %s", model_path, e.msg);
        return -1;
    }
    char desc[256], seqs[256] = "";
    runtime_describe(rt, desc, sizeof desc);
    if (!rt->seqs.automatic || dist_rank(d) > 0) /* rank 0's auto choice is made again from the plan (jobs/job) */
        runtime_describe_seqs(&rt->seqs, rt->backend_name, rt->budget.kv_bytes, seqs, sizeof seqs);
    log_info("nightshift run: %s%s%s", desc, seqs[0] ? "; " : "", seqs);
    cli_model_identity(m, model_path, (uint64_t)st.st_size, rt, A->model_name, sizeof A->model_name);
    cli_model_chat(A->chat_name, rt->gf, &A->chat_jinja, m);
    return 0;
}

/* The effective flags, for the run record. */
static json_t *run_settings_json(const struct run_args *A, const struct job_model *m, const struct runtime *rt)
{
    const struct job_config *c = &A->c;
    json_t *settings = json_object();
    json_object_set_new(settings, "model", json_string(A->rp.model_path));
    json_object_set_new(settings, "output", json_string(c->output));
    json_object_set_new(settings, "errors", json_string(c->errors));
    json_object_set_new(settings, "store", json_string(c->store));
    json_object_set_new(settings, "record", json_string(c->record));
    json_object_set_new(settings, "format", json_string(input_format_name(c->input.format)));
    json_object_set_new(settings, "max_line_bytes", json_integer((json_int_t)c->input.max_line_bytes));
    json_object_set_new(settings, "chat_template", json_string(chat_template_name(m->chat, m->chat_jinja)));
    json_object_set_new(settings, "parse_special", json_boolean(c->parse_special));
    json_object_set_new(settings, "generation", genparam_to_json(&c->input.defaults));
    json_object_set_new(settings, "order", json_string(c->order_input ? "input" : "completion"));
    json_object_set_new(settings, "sort", json_string(plan_sort_name(c->sort)));
    json_object_set_new(settings, "durability",
                        json_string(c->durability == STORE_DURABILITY_FULL ? "full" : "normal"));
    json_object_set_new(settings, "commit_interval_s", json_real(c->commit_interval));
    json_object_set_new(settings, "retry_failed", json_boolean(c->retry_failed));
    json_object_set_new(settings, "force", json_boolean(c->force));
    json_object_set_new(settings, "engine", engine_flags_json(&A->rp));
    json_object_set_new(settings, "kv_bytes", json_integer((json_int_t)rt->budget.kv_bytes));
    json_object_set_new(settings, "kv_budget", budget_json(rt));
    return settings;
}

static void run_print_summary(FILE *out, const struct job_config *c, const struct job_summary *s)
{
    if (s->interrupted && s->wall_s == 0) {
        fprintf(out, "nightshift run: interrupted while reading the backlog: nothing was stored; run it again\n");
        return;
    }
    fprintf(out, "nightshift run: %lld lines: %lld results -> %s, %lld errors -> %s (%lld bad input, %lld failed)\n",
           (long long)s->lines, (long long)s->lines_ok, c->output, (long long)s->lines_failed, c->errors,
           (long long)s->input_errors, (long long)s->engine_errors);
    fprintf(out, "nightshift run: %lld requests (%lld distinct) for %lld completions: %lld unique (%lld computed now, "
           "%lld already done), %lld folded duplicates\n",
           (long long)s->requests, (long long)s->distinct_requests, (long long)s->completions,
           (long long)s->work_total, (long long)s->work_computed, (long long)s->work_skipped_done,
           (long long)s->folded_duplicates);
    fprintf(out, "nightshift run: %.2f s: %lld prompt tokens (%lld from the prefix cache), %lld generated; "
           "%.0f prompt tok/s, %.0f gen tok/s\n",
           s->wall_s, (long long)s->prompt_tokens, (long long)s->prompt_tokens_cached, (long long)s->gen_tokens,
           s->prompt_tok_s, s->gen_tok_s);
    fprintf(out, "nightshift run: record -> %s%s\n", c->record,
            s->interrupted ? " (interrupted: run it again to finish)" : "");
}

int cmd_run(int argc, char **argv)
{
    static struct run_args A; /* large path buffers; cmd_run runs once per process */
    memset(&A, 0, sizeof A);
    A.c = job_default_config();
    A.rp = runtime_default_params();
    enum log_level saved_level = log_get_level();
    struct job_config *c = &A.c;
    int rc = 2, pr = run_parse(argc, argv, &A);
    if (pr) {
        rc = pr > 0 ? 0 : 2;
        goto out;
    }
    if (A.check_store) {
        rc = check_store(A.check_store);
        goto out;
    }
    if (run_check_args(&A)) goto out;
    rc = 1;
    if (A.quiet) log_set_level(LOG_WARN);
    else if (A.verbose) log_set_level(LOG_DEBUG);
    c->progress = A.quiet ? PROGRESS_QUIET : PROGRESS_AUTO;
    struct err e;
    dist *d = NULL;
    if (dist_init(&argc, &argv, &d, &e)) {
        cli_error("run", "%s", e.msg);
        goto out;
    }
    if (dist_rank(d) > 0 && !A.verbose) log_set_level(LOG_WARN); /* the workers: only rank 0 reports */
    struct job_model m;
    struct runtime rt;
    if (run_open(&A, d, &m, &rt)) goto fail_dist;
    json_t *settings = run_settings_json(&A, &m, &rt);
    c->settings = settings;
    c->argc = argc;
    c->argv = argv;
    c->version = NS_VERSION;
    if (!c->owner) {
        const char *u = getenv("USER");
        struct passwd *pw = u && *u ? NULL : getpwuid(getuid());
        c->owner = u && *u ? u : pw ? pw->pw_name : NULL;
    }
    c->stop = &run_stop;
    c->drain = &run_drain;
    c->dist = d;
    setup_test_hook(c);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* resets itself when it stops the run: one more signal kills */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct job_summary s;
    int jr = dist_rank(d) > 0 ? dist_work(d, rt.eng, rt.seqs.n, &run_stop, c->test_hook, &e) : job_run(c, &m, &s, &e);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    runtime_close(&rt);
    json_decref(settings);
    if (jr) {
        cli_error("run", "%s", e.msg);
        goto fail_dist;
    }
    rc = 0;
    if (dist_rank(d) > 0) {
        dist_free(d);
        goto out;
    }
    dist_free(d);
    if (!A.quiet) run_print_summary(A.to_stdout ? stderr : stdout, c, &s);
    rc = s.interrupted ? 128 + (run_signal ? (int)run_signal : SIGINT) : 0;
    goto out;
fail_dist:
    rc = 1;
    if (d) dist_abort(d, 1); /* every rank ends with this one (MPI's rule), the store keeps what was committed */
out:
    jinja_free(A.chat_jinja);
    genparam_free(&c->input.defaults);
    log_set_level(saved_level);
    return rc;
}
