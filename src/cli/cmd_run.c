/* nightshift run — clears a backlog of prompts, resumably. Flag parsing, model loading and the summary;
 * the job itself is jobs/job (job_run).
 *
 *   nightshift run BACKLOG [-m MODEL] -o RESULTS.jsonl [--errors ERRORS.jsonl] [--store RUN.db] [flags]
 *
 * Kill it at any moment and run the same command again: finished work is skipped, the output files are
 * repaired from the store, nothing is lost or written twice. SIGINT/SIGTERM stop it cleanly after the
 * current engine step (a second SIGINT kills at once).
 *
 * Hidden: `nightshift run --check-store DB` runs PRAGMA integrity_check and the store's own invariant
 * check, prints "ok" (exit 0) or the problems (exit 1). Used by the crash test.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "jobs/job.h"
#include "jobs/store.h"
#include "tokenizer/chat.h"
#include "util/log.h"
#include "util/sha256.h"

#define RUN_MAX_STOP INPUT_MAX_STOP

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: nightshift run BACKLOG [-m MODEL] -o RESULTS.jsonl [options]\n"
            "\n"
            "Clears a backlog of prompts at the highest throughput the machine allows. Resumable: kill it at any\n"
            "moment and run the same command again; finished work is skipped, nothing is lost or duplicated.\n"
            "\n"
            "BACKLOG: OpenAI Batch API JSONL ({\"custom_id\", \"method\", \"url\", \"body\"}), simple JSONL\n"
            "({\"id\", \"prompt\"|\"messages\", ...}) or plain text (one prompt per line). Each line's own\n"
            "generation fields override the defaults below.\n"
            "\n"
            "Files:\n"
            "  -m, --model PATH          GGUF model (default: %s)\n"
            "  -o, --output PATH         results, one line per request (OpenAI batch output shape)\n"
            "  --errors PATH             failed lines (default: OUTPUT.errors.jsonl)\n"
            "  --store PATH              SQLite store (default: OUTPUT.nightshift.db)\n"
            "  --record PATH             run record (default: OUTPUT.record.json)\n"
            "Input:\n"
            "  --format F                auto (default), openai, jsonl, text\n"
            "  --max-line-bytes N        longer lines are errors (default 1048576)\n"
            "  --chat-template NAME      for chat messages: %s (default: from the model)\n"
            "  --no-special              special-token text in prompts stays plain text\n"
            "Generation defaults:\n"
            "  --max-tokens N            (default 256; clamped to the context)\n"
            "  --temperature T           (default 1; 0 = greedy)\n"
            "  --top-p P, --top-k K, --min-p P\n"
            "  --presence-penalty P, --frequency-penalty P, --repetition-penalty R, --repeat-last-n N\n"
            "  --seed S                  (default: derived from each request's id)\n"
            "  --n N                     completions per request (default 1)\n"
            "  --stop STR                stop string (repeatable, up to %d)\n"
            "  --ignore-eos              do not stop at end-of-generation tokens\n"
            "Run:\n"
            "  --order completion|input  result order (default completion: as finished)\n"
            "  --sort ascending|descending|input   submission order by prompt length (default ascending)\n"
            "  --durability full|normal  fsync every commit (default full) or trade the last commits away\n"
            "  --commit-interval S       commit finished results at least every S seconds (default 1)\n"
            "  --retry-failed            compute failed requests again\n"
            "  --force                   reuse a store made with another model or other defaults\n"
            "  --progress-interval S     seconds between progress lines when not on a terminal (default 10)\n"
            "  -q, --quiet               no progress, no summary\n"
            "  -v, --verbose             more log lines\n"
            "Engine:\n",
            cli_default_model(), chat_family_list(), RUN_MAX_STOP);
    struct runtime_params d = runtime_default_params();
    engine_flags_usage(out, &d);
}

static volatile sig_atomic_t run_stop;

static void on_signal(int sig)
{
    (void)sig;
    run_stop = 1;
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

static int parse_double(const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_error("run", "%s expects a number, got '%s'", flag, s);
        return -1;
    }
    *out = v;
    return 0;
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
    json_t *o = json_pack("{s:s, s:b, s:I, s:I}", "backend", rt->backend_name, "automatic", b->automatic,
                          "kv_bytes", (json_int_t)b->kv_bytes, "kv_tokens", (json_int_t)b->kv_tokens);
    if (o && b->automatic) {
        const char *keys[] = {"memory_total", "memory_available", "weights", "scratch", "headroom", "kv_free"};
        const uint64_t vals[] = {b->total, b->available, b->weights, b->scratch, b->headroom, b->kv_free};
        for (int i = 0; i < 6; i++) json_object_set_new(o, keys[i], json_integer((json_int_t)vals[i]));
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

int cmd_run(int argc, char **argv)
{
    struct job_config c = job_default_config();
    struct runtime_params rp = runtime_default_params();
    struct input_gen *g = &c.input.defaults;
    const char *model_path = NULL, *chat_name = NULL;
    char *stops[RUN_MAX_STOP];
    int n_stops = 0, quiet = 0, verbose = 0;
    enum log_level saved_level = log_get_level();
    int rc = 2;
    json_t *settings = json_object();

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            rc = 0;
            goto out;
        }
        int er = engine_flags_parse(&rp, "run", argc, argv, &i);
        if (er < 0) goto out;
        if (er > 0) continue;
        if (a[0] != '-' || !a[1]) {
            if (c.backlog) {
                cli_error("run", "one backlog at a time (got '%s' and '%s')", c.backlog, a);
                goto out;
            }
            c.backlog = a;
            continue;
        }
        /* flags without a value */
        if (!strcmp(a, "--retry-failed")) c.retry_failed = 1;
        else if (!strcmp(a, "--force")) c.force = 1;
        else if (!strcmp(a, "--ignore-eos")) c.ignore_eos = 1;
        else if (!strcmp(a, "--no-special")) c.parse_special = 0;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else {
            if (i + 1 >= argc) {
                cli_error("run", "unknown option or missing value: %s (see nightshift run --help)", a);
                goto out;
            }
            const char *v = argv[++i];
            long n;
            double d;
            if (!strcmp(a, "--check-store")) {
                rc = check_store(v);
                goto out;
            } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
            else if (!strcmp(a, "-o") || !strcmp(a, "--output")) c.output = v;
            else if (!strcmp(a, "--errors")) c.errors = v;
            else if (!strcmp(a, "--store")) c.store = v;
            else if (!strcmp(a, "--record")) c.record = v;
            else if (!strcmp(a, "--format")) {
                if (input_format_parse(v, &c.input.format)) {
                    cli_error("run", "--format %s: expected auto, openai, jsonl or text", v);
                    goto out;
                }
            } else if (!strcmp(a, "--max-line-bytes")) {
                if (engine_flags_parse_long("run", a, v, 16, 1LL << 32, &n)) goto out;
                c.input.max_line_bytes = (size_t)n;
            } else if (!strcmp(a, "--chat-template")) {
                enum chat_family f;
                if (chat_family_parse(v, &f)) {
                    cli_error("run", "--chat-template %s: expected one of %s", v, chat_family_list());
                    goto out;
                }
                chat_name = v;
            } else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n")) {
                if (engine_flags_parse_long("run", a, v, 1, INPUT_MAX_TOKENS_LIMIT, &n)) goto out;
                g->max_tokens = (int32_t)n;
            } else if (!strcmp(a, "--top-k")) {
                if (engine_flags_parse_long("run", a, v, 0, INT32_MAX, &n)) goto out;
                g->top_k = (int32_t)n;
            } else if (!strcmp(a, "--repeat-last-n")) {
                if (engine_flags_parse_long("run", a, v, 0, 1 << 20, &n)) goto out;
                g->repeat_last_n = (int32_t)n;
            } else if (!strcmp(a, "--n")) {
                if (engine_flags_parse_long("run", a, v, 1, INPUT_MAX_N, &n)) goto out;
                g->n = (int32_t)n;
            } else if (!strcmp(a, "--seed")) {
                if (engine_flags_parse_u64("run", a, v, &g->seed)) goto out;
                g->has_seed = 1;
            } else if (!strcmp(a, "--stop")) {
                if (n_stops == RUN_MAX_STOP) {
                    cli_error("run", "at most %d --stop strings", RUN_MAX_STOP);
                    goto out;
                }
                stops[n_stops++] = (char *)v;
            } else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp") || !strcmp(a, "--top-p") ||
                       !strcmp(a, "--min-p") || !strcmp(a, "--presence-penalty") || !strcmp(a, "--frequency-penalty") ||
                       !strcmp(a, "--repetition-penalty") || !strcmp(a, "--repeat-penalty") ||
                       !strcmp(a, "--commit-interval") || !strcmp(a, "--progress-interval")) {
                if (parse_double(a, v, &d)) goto out;
                if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) g->temperature = (float)d;
                else if (!strcmp(a, "--top-p")) g->top_p = (float)d;
                else if (!strcmp(a, "--min-p")) g->min_p = (float)d;
                else if (!strcmp(a, "--presence-penalty")) g->presence_penalty = (float)d;
                else if (!strcmp(a, "--frequency-penalty")) g->frequency_penalty = (float)d;
                else if (!strcmp(a, "--repetition-penalty") || !strcmp(a, "--repeat-penalty")) g->repetition_penalty = (float)d;
                else if (!strcmp(a, "--commit-interval")) {
                    if (d < 0) {
                        cli_error("run", "--commit-interval must be >= 0");
                        goto out;
                    }
                    c.commit_interval = d;
                } else {
                    if (d <= 0) {
                        cli_error("run", "--progress-interval must be > 0");
                        goto out;
                    }
                    c.progress_interval = d;
                }
            } else if (!strcmp(a, "--order")) {
                if (!strcmp(v, "input")) c.order_input = 1;
                else if (!strcmp(v, "completion")) c.order_input = 0;
                else {
                    cli_error("run", "--order %s: expected completion or input", v);
                    goto out;
                }
            } else if (!strcmp(a, "--sort")) {
                if (plan_sort_parse(v, &c.sort)) {
                    cli_error("run", "--sort %s: expected ascending, descending or input", v);
                    goto out;
                }
            } else if (!strcmp(a, "--durability")) {
                if (!strcmp(v, "full")) c.durability = STORE_DURABILITY_FULL;
                else if (!strcmp(v, "normal")) c.durability = STORE_DURABILITY_NORMAL;
                else {
                    cli_error("run", "--durability %s: expected full or normal", v);
                    goto out;
                }
            } else {
                cli_error("run", "unknown option %s (see nightshift run --help)", a);
                goto out;
            }
        }
    }
    if (!c.backlog) {
        cli_error("run", "no backlog given (usage: nightshift run BACKLOG -o RESULTS.jsonl)");
        goto out;
    }
    if (!c.output) {
        cli_error("run", "no output file given (-o RESULTS.jsonl)");
        goto out;
    }
    g->stop = stops;
    g->n_stop = n_stops;
    struct err e;
    if (input_gen_check(g, &e)) {
        cli_error("run", "%s", e.msg);
        g->stop = NULL;
        g->n_stop = 0;
        goto out;
    }
    char errors_path[4096], store_path[4096], record_path[4096];
    if (!c.errors) {
        snprintf(errors_path, sizeof errors_path, "%s.errors.jsonl", c.output);
        c.errors = errors_path;
    }
    if (!c.store) {
        snprintf(store_path, sizeof store_path, "%s.nightshift.db", c.output);
        c.store = store_path;
    }
    if (!c.record) {
        snprintf(record_path, sizeof record_path, "%s.record.json", c.output);
        c.record = record_path;
    }
    const char *outs[] = {c.output, c.errors, c.store, c.record};
    for (int i = 0; i < 4; i++) {
        if (same_file(outs[i], c.backlog)) {
            cli_error("run", "%s is the backlog itself; refusing to overwrite it", outs[i]);
            goto out;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(outs[i], outs[k]) || same_file(outs[i], outs[k])) {
                cli_error("run", "%s is given for two different files", outs[i]);
                goto out;
            }
    }
    if (!model_path) model_path = cli_default_model();
    rc = 1;
    if (quiet) log_set_level(LOG_WARN);
    else if (verbose) log_set_level(LOG_DEBUG);
    c.progress = quiet ? PROGRESS_QUIET : PROGRESS_AUTO;

    /* model identity first: hashing a big model is the slow part of a start, and it is cached */
    struct job_model m;
    memset(&m, 0, sizeof m);
    struct stat st;
    if (stat(model_path, &st) != 0) {
        cli_error("run", "model %s: %s", model_path, strerror(errno));
        goto out;
    }
    int cached = 0;
    if (sha256_file_cached(model_path, m.sha256, &cached, &e)) {
        cli_error("run", "model %s", e.msg);
        goto out;
    }
    struct runtime rt;
    rp.model_path = model_path;
    if (runtime_open(&rp, &rt, &e)) {
        cli_error("run", "%s: %s", model_path, e.msg);
        goto out;
    }
    char desc[256];
    runtime_describe(&rt, desc, sizeof desc);
    log_info("nightshift run: %s", desc);
    m.path = model_path;
    m.name = base_name(model_path);
    m.size = (uint64_t)st.st_size;
    m.hp = &rt.model->hp;
    m.vocab = rt.vocab;
    m.eng = rt.eng;
    m.ep = rt.ep;
    m.backend = rt.backend_name;
    m.backend_gpu = rt.caps.gpu;
    m.threads = rt.threads;
    if (chat_name) {
        chat_family_parse(chat_name, &m.chat);
        m.chat_source = "flag";
    } else {
        size_t tmpl_len;
        if (cli_chat_template(rt.gf, &m.chat, &tmpl_len))
            m.chat_source = m.chat != CHAT_NONE ? "gguf" : "tokenizer.chat_template not recognised";
        else
            m.chat_source = "no tokenizer.chat_template in the model";
    }

    json_object_set_new(settings, "model", json_string(model_path));
    json_object_set_new(settings, "output", json_string(c.output));
    json_object_set_new(settings, "errors", json_string(c.errors));
    json_object_set_new(settings, "store", json_string(c.store));
    json_object_set_new(settings, "record", json_string(c.record));
    json_object_set_new(settings, "format", json_string(input_format_name(c.input.format)));
    json_object_set_new(settings, "max_line_bytes", json_integer((json_int_t)c.input.max_line_bytes));
    json_object_set_new(settings, "chat_template", json_string(chat_family_name(m.chat)));
    json_object_set_new(settings, "parse_special", json_boolean(c.parse_special));
    json_t *stop_arr = json_array();
    for (int i = 0; i < n_stops; i++) json_array_append_new(stop_arr, json_string(stops[i]));
    json_object_set_new(
        settings, "generation",
        json_pack("{s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:o, s:i, s:o, s:b}", "max_tokens", g->max_tokens,
                  "temperature", (double)g->temperature, "top_p", (double)g->top_p, "top_k", g->top_k, "min_p",
                  (double)g->min_p, "presence_penalty", (double)g->presence_penalty, "frequency_penalty",
                  (double)g->frequency_penalty, "repetition_penalty", (double)g->repetition_penalty, "repeat_last_n",
                  g->repeat_last_n, "seed", g->has_seed ? json_integer((json_int_t)g->seed) : json_string("per id"), "n",
                  g->n, "stop", stop_arr, "ignore_eos", c.ignore_eos));
    json_object_set_new(settings, "order", json_string(c.order_input ? "input" : "completion"));
    json_object_set_new(settings, "sort", json_string(plan_sort_name(c.sort)));
    json_object_set_new(settings, "durability", json_string(c.durability == STORE_DURABILITY_FULL ? "full" : "normal"));
    json_object_set_new(settings, "commit_interval_s", json_real(c.commit_interval));
    json_object_set_new(settings, "retry_failed", json_boolean(c.retry_failed));
    json_object_set_new(settings, "force", json_boolean(c.force));
    json_object_set_new(settings, "engine", engine_flags_json(&rp));
    json_object_set_new(settings, "kv_bytes", json_integer((json_int_t)rt.budget.kv_bytes));
    json_object_set_new(settings, "kv_budget", budget_json(&rt));
    c.settings = settings;
    c.argc = argc;
    c.argv = argv;
    c.version = NS_VERSION;
    c.stop = &run_stop;
    setup_test_hook(&c);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal kills */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct job_summary s;
    int jr = job_run(&c, &m, &s, &e);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    runtime_close(&rt);
    if (jr) {
        cli_error("run", "%s", e.msg);
        rc = 1;
        goto out;
    }
    if (!quiet && s.interrupted && s.wall_s == 0) {
        printf("nightshift run: interrupted while reading the backlog: nothing was stored; run it again\n");
    } else if (!quiet) {
        printf("nightshift run: %lld lines: %lld results -> %s, %lld errors -> %s (%lld bad input, %lld failed)\n",
               (long long)s.lines, (long long)s.lines_ok, c.output, (long long)s.lines_failed, c.errors,
               (long long)s.input_errors, (long long)s.engine_errors);
        printf("nightshift run: %lld unique requests: %lld computed now, %lld already done, %lld folded duplicates\n",
               (long long)s.work_total, (long long)s.work_computed, (long long)s.work_skipped_done,
               (long long)s.folded_duplicates);
        printf("nightshift run: %.2f s: %lld prompt tokens (%lld from the prefix cache), %lld generated; "
               "%.0f prompt tok/s, %.0f gen tok/s\n",
               s.wall_s, (long long)s.prompt_tokens, (long long)s.prompt_tokens_cached, (long long)s.gen_tokens,
               s.prompt_tok_s, s.gen_tok_s);
        printf("nightshift run: record -> %s%s\n", c.record, s.interrupted ? " (interrupted: run it again to finish)" : "");
    }
    rc = s.interrupted ? 130 : 0;
out:
    log_set_level(saved_level);
    json_decref(settings);
    return rc;
}
