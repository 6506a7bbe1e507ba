/* nightshift sweep — measure the user's own backlog at increasing concurrency and recommend a setting.
 *
 *   nightshift sweep BACKLOG [-m MODEL] [--sample N] [--concurrency 1,2,4|auto] [--max-batch-tokens LIST]
 *                    [--point-seconds S] [-o PREFIX] [run's input, generation and engine flags]
 *
 * 1. The backlog is read (jobs/input) and every request tokenized as `run` does (jobs/ingest's
 *    ingest_prompt); N lines are sampled stratified by prompt length (jobs/sweep) and read again, so only
 *    the sample's prompts are held. Nothing is written beside the backlog: no store, no output file.
 * 2. The model and the backend are opened once (runtime); each point (concurrency c = max_seqs, and a token
 *    budget when --max-batch-tokens lists some) gets a fresh engine. The sample, in a fixed shuffled order,
 *    is fed as closed batches of c requests (feed_point says why); the point's window is the whole batches
 *    run until --point-seconds have passed (at least one, two at c = 1: jobs/sweep's steady state), and a
 *    batch still running at SWEEP_WINDOW_CAP times that is not counted (the point is then not usable).
 *    Tokens are the engine's counters over the window (prompt rows computed + generated), latencies those
 *    of the requests finished in it.
 * 3. Each level is measured at least twice, interleaved with its neighbours (jobs/sweep's sweep_schedule:
 *    c1, c2, c1, c2, c4, c2, c4, c8, c4, c8, ...), every run printed and merged into its point (tokens and
 *    time summed, the slowest and fastest run kept: the spread). Climbing stops when two steps in a row are
 *    flat (under 5% and inside the measured spread: sweep_should_stop), when a point is over the memory
 *    headroom (swap-out, PSI memory pressure, peak RSS past RAM - headroom) or not steady, when the next
 *    level's KV growth, extrapolated from this one, would cross the RSS limit, or when its time to steady
 *    state, extrapolated from the latencies (jobs/sweep), would pass the window's cap.
 * 4. Output: a table of runs, one of points with their spread, PREFIX.csv, PREFIX.json, PREFIX.svg, and the
 *    recommended `nightshift run` command with its confidence (sweep_confidence); when the point that
 *    `--max-seqs auto` runs (the backend's knee) is within 5% of the best, the command leaves --max-seqs out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "jobs/ingest.h"
#include "jobs/key.h"
#include "jobs/record.h"
#include "jobs/sweep.h"
#include "util/clock.h"
#include "util/mempress.h"
#include "util/rng.h"
#include "util/sysmem.h"

#define SWEEP_MAX_LEVELS 16
#define SWEEP_MAX_POINTS 64
#define SWEEP_MAX_PASS 128

struct sweep_args {
    const char *backlog, *out, *chat_name;
    struct runtime_params rp;
    struct input_opts input;
    int parse_special;
    int32_t sample;
    double point_s, psi_high;
    int32_t levels[SWEEP_MAX_LEVELS], n_levels; /* n_levels 0: auto */
    int32_t mbt[SWEEP_MAX_LEVELS], n_mbt;       /* n_mbt 0: the backend's default */
    const char *pass[SWEEP_MAX_PASS];           /* run flags as typed, for the recommended command */
    int n_pass;
};

/* One sampled request, ready for the engine. */
struct sweep_req {
    int32_t *ids, n_ids, max_tokens;
    struct gen_params gen;
    uint64_t seed;
};

struct sweep_ctx {
    struct runtime st;
    struct job_model jm;
    jinja_template *chat_jinja; /* the model's own chat template (owned; NULL: by family) */
    struct sweep_req *reqs;
    size_t n_reqs;
    int64_t n_lines; /* usable backlog lines */
    uint64_t rss_limit;
};

/* The page: what sweep does, its own flags (opts, with the defaults they hold now), then the generation and
 * engine flags from their tables. */
static void sweep_usage(FILE *out, const struct cli_opt *opts, int n, const struct cli_opt *run_opts, int n_run,
                        const struct sweep_args *A)
{
    fprintf(out,
            "usage: nightshift sweep BACKLOG [-m MODEL] [options] [run flags]\n"
            "\n"
            "Runs a sample of BACKLOG (stratified by prompt length) through the engine at increasing concurrency,\n"
            "each level at least twice, interleaved with its neighbours; stops when two steps in a row gain less\n"
            "than 5%% and less than the measured spread, or memory headroom would be crossed, and recommends a\n"
            "setting as a nightshift run command, with its confidence and a note if the machine's load changed.\n"
            "Writes PREFIX.csv, PREFIX.json and PREFIX.svg; never the run's files.\n"
            "\n");
    cli_opts_usage(out, opts, n);
    fprintf(out, "Input (as for run, and passed on to the recommended command):\n");
    cli_opts_usage(out, run_opts, n_run);
    fprintf(out, "Generation defaults (as for run):\n");
    genparam_usage(out, &A->input.defaults, NULL);
    fprintf(out, "Engine (--max-seqs is set by each level):\n");
    engine_flags_usage(out, &A->rp, NULL);
}

/* Parses a comma-separated list of integers in [lo, hi] into v (at most SWEEP_MAX_LEVELS). 0, or -1. */
static int parse_list(const char *flag, const char *s, long lo, long hi, int32_t *v, int32_t *n)
{
    *n = 0;
    for (const char *p = s;;) {
        char tok[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof tok || *n == SWEEP_MAX_LEVELS) {
            cli_error("sweep", "%s '%s': expected up to %d comma-separated integers in [%ld, %ld]", flag, s,
                      SWEEP_MAX_LEVELS, lo, hi);
            return -1;
        }
        memcpy(tok, p, len);
        tok[len] = '\0';
        long x;
        if (engine_flags_parse_long("sweep", flag, tok, lo, hi, &x)) return -1;
        v[(*n)++] = (int32_t)x;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* 1 when the flag (as typed, "=VALUE" ignored) is name. */
static int flag_is(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

/* Parses argv: 0 to go on, 1 when help was printed, -1 on a bad argument (printed). */
static int sweep_parse(int argc, char **argv, struct sweep_args *A)
{
    const char *conc = NULL, *mbt = NULL;
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &A->rp.model_path, .metavar = "PATH",
         .help = "GGUF model"},
        {.flag = "--sample", .type = CLI_OPT_INT32, .dst = &A->sample, .lo = 1, .hi = 1 << 20,
         .help = "backlog lines to sample"},
        {.flag = "--concurrency", .type = CLI_OPT_STRING, .dst = &conc, .metavar = "LIST|auto",
         .help = "levels (max_seqs) to try, e.g. 1,2,4,8 (default auto: 1, 2, 4, ... up\nto half the sample)"},
        {.flag = "--max-batch-tokens", .old = "--batch", .type = CLI_OPT_STRING, .dst = &mbt, .metavar = "LIST",
         .help = "token budgets to try at each level (default: the backend's)"},
        {.flag = "--point-seconds", .type = CLI_OPT_DOUBLE, .dst = &A->point_s, .lo_open = 1, .metavar = "S",
         .help = "measuring window of each run (a point runs at least twice)"},
        {.flag = "--psi-high", .type = CLI_OPT_DOUBLE, .dst = &A->psi_high, .lo_open = 1, .metavar = "PCT",
         .help = "memory pressure (PSI some avg10) counted as over the headroom"},
        {.flag = "--output", .alias = "-o", .old = "--out", .type = CLI_OPT_STRING, .dst = &A->out,
         .metavar = "PREFIX", .help = "output files' prefix"},
    };
    const struct cli_opt run_opts[] = { /* run's own flags, passed on to the recommended command */
        {.flag = "--format", .type = CLI_OPT_FORMAT, .dst = &A->input.format, .help = "see nightshift run --help"},
        {.flag = "--chat-template", .type = CLI_OPT_STRING, .dst = &A->chat_name, .metavar = "NAME",
         .help = "see nightshift run --help"},
        {.flag = "--no-special", .type = CLI_OPT_SET, .dst = &A->parse_special, .help = "see nightshift run --help"},
        {.flag = "--max-line-bytes", .type = CLI_OPT_SIZE, .dst = &A->input.max_line_bytes, .lo = 16,
         .hi = 4294967296.0, .help = "see nightshift run --help"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]), n_run = (int)(sizeof run_opts / sizeof run_opts[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int start = i, pass = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (!A->rp.model_path) A->rp.model_path = cli_default_model(); /* shown as -m's default */
            sweep_usage(stdout, opts, n_opts, run_opts, n_run, A);
            return 1;
        }
        int r = cli_opts_parse("sweep", opts, n_opts, argc, argv, &i);
        if (!r && (r = cli_opts_parse("sweep", run_opts, n_run, argc, argv, &i)) > 0) pass = 1;
        if (!r && (r = engine_flags_parse(&A->rp, "sweep", argc, argv, &i)) > 0) pass = !flag_is(a, "--max-seqs");
        if (!r && (r = cli_opts_parse_gen("sweep", &A->input.defaults, argc, argv, &i)) > 0) pass = 1;
        if (r < 0) return -1;
        if (r > 0) {
            for (int k = start; pass && k <= i && A->n_pass < SWEEP_MAX_PASS; k++) A->pass[A->n_pass++] = argv[k];
            continue;
        }
        if (a[0] == '-' && a[1]) {
            cli_error("sweep", "unknown option %s (see nightshift sweep --help)", a);
            return -1;
        }
        if (A->backlog) {
            cli_error("sweep", "one backlog at a time (got '%s' and '%s')", A->backlog, a);
            return -1;
        }
        A->backlog = a;
    }
    long lo, hi; /* a level is a --max-seqs, a budget a --max-batch-tokens: their ranges */
    engine_flags_range("max_seqs", &lo, &hi);
    if (conc && strcmp(conc, "auto") && parse_list("--concurrency", conc, lo, hi, A->levels, &A->n_levels)) return -1;
    engine_flags_range("max_batch_tokens", &lo, &hi);
    if (mbt && parse_list("--max-batch-tokens", mbt, lo, hi, A->mbt, &A->n_mbt)) return -1;
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Opens the model and the backend and fills the job model that ingest_prompt reads. 0, or -1 (printed). */
static int sweep_open(struct sweep_args *A, struct sweep_ctx *x)
{
    struct err e;
    if (runtime_open_model(&A->rp, &x->st, &e) || runtime_open_backend(&x->st, &e)) {
        cli_error("sweep", "%s: %s", A->rp.model_path, e.msg);
        return -1;
    }
    struct job_model *m = &x->jm;
    m->path = A->rp.model_path;
    m->name = base_name(A->rp.model_path);
    m->hp = &x->st.model->hp;
    m->vocab = x->st.vocab;
    m->ep = x->st.ep;
    m->backend = x->st.backend_name;
    m->threads = x->st.threads;
    enum chat_family f;
    if (A->chat_name && chat_family_parse(A->chat_name, &f)) {
        cli_error("sweep", "--chat-template %s: expected one of %s", A->chat_name, chat_family_list());
        return -1;
    }
    cli_model_chat(A->chat_name, x->st.gf, &x->chat_jinja, m);
    return 0;
}

/* The usable lines of a backlog: prompt length and line number of each. */
struct sweep_lines {
    int32_t *len;
    int64_t *line;
    size_t n, cap;
};

/* Appends one line; 0, or -1 when out of memory. */
static int lines_push(struct sweep_lines *L, int32_t len, int64_t line)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 1024;
        int32_t *a = realloc(L->len, cap * sizeof *a);
        if (a) L->len = a;
        int64_t *b = a ? realloc(L->line, cap * sizeof *b) : NULL;
        if (!b) return -1;
        L->line = b;
        L->cap = cap;
    }
    L->len[L->n] = len;
    L->line[L->n++] = line;
    return 0;
}

/* One pass over the backlog. keep NULL: records every usable line (its prompt tokenized as run does) in
 * *L. keep non-NULL (ascending line numbers, n_keep): tokenizes those lines into x->reqs. */
static int read_backlog(const struct sweep_args *A, struct sweep_ctx *x, struct sweep_lines *L, const int64_t *keep,
                        size_t n_keep)
{
    struct err e;
    input_reader *r;
    if (input_open(A->backlog, &A->input, &r, &e)) {
        cli_error("sweep", "%s", e.msg);
        return -1;
    }
    struct input_item it;
    memset(&it, 0, sizeof it);
    size_t k = 0;
    int rc;
    for (;;) {
        input_item_free(&it); /* the previous line's */
        memset(&it, 0, sizeof it);
        if ((rc = input_next(r, &it, &e)) != 1) break;
        if (it.code || (keep && (k == n_keep || keep[k] != it.line))) continue;
        int32_t *ids, n_ids;
        const char *code;
        char msg[512];
        int pr = ingest_prompt(&x->jm, A->parse_special, &it, &ids, &n_ids, NULL, &code, msg, sizeof msg, &e);
        if (pr < 0) goto oom;
        if (pr > 0) continue; /* a bad request: run would put it in the error file */
        if (!keep) {
            if (lines_push(L, n_ids, it.line)) goto oom_ids;
            free(ids);
        } else {
            struct sweep_req *q = &x->reqs[x->n_reqs];
            if (genparam_copy(&q->gen, &it.gen, &e)) goto oom_ids;
            x->n_reqs++;
            q->ids = ids;
            q->n_ids = n_ids;
            q->max_tokens = ingest_max_tokens(&x->jm, n_ids, it.gen.max_tokens);
            uint64_t seed = it.gen.has_seed ? it.gen.seed : key_id_seed(it.custom_id ? it.custom_id : "");
            q->seed = key_completion_seed(seed, 0);
            k++;
        }
        continue;
    oom_ids:
        free(ids);
        goto oom;
    }
    input_item_free(&it);
    input_close(r);
    if (rc < 0) cli_error("sweep", "%s: %s", A->backlog, e.msg);
    return rc < 0 ? -1 : 0;
oom:
    input_item_free(&it);
    input_close(r);
    cli_error("sweep", "out of memory reading %s", A->backlog);
    return -1;
}

static int cmp_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* The sample: every usable line's length, the stratified pick, a second pass for its prompts, then a fixed
 * shuffle so that every window sees the mix. 0, or -1 (printed). */
static int sweep_load(const struct sweep_args *A, struct sweep_ctx *x)
{
    struct sweep_lines L = {0};
    size_t *pick = NULL;
    int64_t *keep = NULL;
    if (read_backlog(A, x, &L, NULL, 0)) goto fail;
    x->n_lines = (int64_t)L.n;
    if (L.n == 0) {
        cli_error("sweep", "%s has no usable request", A->backlog);
        goto fail;
    }
    size_t k = (size_t)A->sample < L.n ? (size_t)A->sample : L.n;
    pick = malloc(k * sizeof *pick);
    keep = malloc(k * sizeof *keep);
    x->reqs = calloc(k, sizeof *x->reqs);
    if (!pick || !keep || !x->reqs || sweep_sample(L.len, L.n, k, pick) != k) {
        cli_error("sweep", "out of memory sampling %zu of %zu lines", k, L.n);
        goto fail;
    }
    for (size_t i = 0; i < k; i++) keep[i] = L.line[pick[i]];
    qsort(keep, k, sizeof *keep, cmp_i64);
    if (read_backlog(A, x, NULL, keep, k)) goto fail;
    uint64_t rng = 1;
    for (size_t i = x->n_reqs; i > 1; i--) {
        size_t j = (size_t)(rng_splitmix64(&rng) % i);
        struct sweep_req t = x->reqs[i - 1];
        x->reqs[i - 1] = x->reqs[j];
        x->reqs[j] = t;
    }
    free(L.len), free(L.line), free(pick), free(keep);
    return 0;
fail:
    free(L.len), free(L.line), free(pick), free(keep);
    return -1;
}

/* Adds sample request i to eng as id i. */
static int add_req(engine *eng, const struct sweep_req *q, uint64_t i, struct err *e)
{
    struct engine_request r = {.id = i, .prompt = q->ids, .n_prompt = q->n_ids, .max_tokens = q->max_tokens,
                               .stop = (const char *const *)q->gen.stop, .n_stop = q->gen.n_stop,
                               .ignore_eos = q->gen.ignore_eos};
    genparam_to_sampler(&q->gen, q->seed, &r.sampling);
    return engine_add(eng, &r, e);
}

/* Runs sample requests [*next, *next + c) as one closed batch on eng (none added until all have finished),
 * latencies into lat; *next advances. 0: all finished; 1: the window's cap came first; -1: error. */
static int run_batch(const struct sweep_args *A, struct sweep_ctx *x, engine *eng, struct sweep_point *p, double t0,
                     size_t *next, double *lat, size_t *n_lat, struct err *e)
{
    size_t in_flight = 0;
    for (int32_t k = 0; k < p->concurrency; k++, in_flight++)
        if (add_req(eng, &x->reqs[*next + (size_t)k], *next + (size_t)k, e)) return -1;
    *next += (size_t)p->concurrency;
    while (in_flight) {
        if (clock_now() - t0 >= A->point_s * SWEEP_WINDOW_CAP) return 1;
        if (engine_step(eng, e)) return -1;
        struct engine_result res;
        while (engine_take(eng, &res)) {
            in_flight--;
            if (res.finish == ENGINE_FINISH_ERROR) {
                if (!p->failed) cli_error("sweep", "a request failed: %s", res.error);
                p->failed++;
            }
            lat[(*n_lat)++] = res.t_finished - res.t_added;
            engine_result_free(&res);
        }
    }
    return 0;
}

/* The measuring loop of one point on a fresh engine eng: closed batches of c sample requests, back to back,
 * until --point-seconds have passed or the sample runs out; the window is the whole batches (their tokens,
 * from the engine's counters, and their time), so it holds the same mix of prompt and generated tokens as
 * the requests themselves: refilling as requests finish would count the refills' prompt rows, which run
 * several times faster per token than decode steps, without their generated tokens, and a window cut in
 * mid-flight counts partial requests. A `run` of a backlog sorted by length also moves in such waves. */
static int feed_point(const struct sweep_args *A, struct sweep_ctx *x, engine *eng, struct sweep_point *p, double *lat,
                      size_t *n_lat, struct err *e)
{
    size_t next = 0;
    double t0 = clock_now();
    while (next + (size_t)p->concurrency <= x->n_reqs) {
        int rc = run_batch(A, x, eng, p, t0, &next, lat, n_lat, e);
        if (rc) return rc < 0 ? -1 : 0;
        struct engine_stats s;
        engine_get_stats(eng, &s);
        p->requests += p->concurrency;
        p->prompt_tokens = s.prompt_tokens_computed;
        p->gen_tokens = s.gen_tokens;
        p->wall_s = clock_now() - t0;
        if (p->wall_s >= A->point_s && p->requests >= sweep_steady_need(p->concurrency)) break;
    }
    return 0;
}

/* The 1-minute load average of /proc/loadavg, or -1. */
static double read_load1(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f && fscanf(f, "%lf", &v) != 1) v = -1;
    if (f) fclose(f);
    return v;
}

/* Runs one point: p->concurrency and p->max_batch_tokens set by the caller. Besides the engine's figures
 * it records the machine's load: the process's CPU time over the window's wall time and threads (a CPU
 * backend's; another process taking a core lowers it) and the load average at the end. 0, or -1 (printed). */
static int run_point(const struct sweep_args *A, struct sweep_ctx *x, struct sweep_point *p)
{
    struct err e;
    struct engine_params ep = x->st.ep;
    ep.max_seqs = p->concurrency;
    ep.max_batch_tokens = p->max_batch_tokens;
    engine *eng = NULL;
    double *lat = malloc(x->n_reqs * sizeof *lat);
    size_t n_lat = 0;
    if (!lat) {
        cli_error("sweep", "out of memory");
        return -1;
    }
    struct mempress_sample m0, m1;
    struct record_energy en;
    if (runtime_new_engine(&x->st, &ep, &eng, &e)) goto fail;
    sysmem_reset_peak_rss();
    mempress_read(NULL, &m0);
    record_energy_start(&en, x->st.caps.gpu);
    double cpu0 = clock_cpu_s(), wall0 = clock_now();
    if (feed_point(A, x, eng, p, lat, &n_lat, &e)) goto fail;
    double cpu1 = clock_cpu_s(), wall = clock_now() - wall0;
    p->cpu_share = x->st.caps.gpu || cpu0 < 0 || cpu1 < 0 || wall <= 0 || x->st.threads < 1
                       ? -1 : (cpu1 - cpu0) / (wall * x->st.threads);
    p->load1 = read_load1();
    double cpu_j, gpu_j;
    record_energy_read(&en, &cpu_j, &gpu_j);
    record_energy_stop(&en);
    p->energy_j = cpu_j < 0 && gpu_j < 0 ? -1 : (cpu_j > 0 ? cpu_j : 0) + (gpu_j > 0 ? gpu_j : 0);
    mempress_read(NULL, &m1);
    struct engine_stats s;
    engine_get_stats(eng, &s);
    p->preemptions = s.n_preemptions;
    p->kv_blocks_peak = s.kv_blocks_peak;
    p->kv_blocks_total = s.kv_blocks_total;
    p->peak_rss = sysmem_peak_rss_bytes();
    p->p50_s = record_percentile(lat, n_lat, 50);
    p->p95_s = record_percentile(lat, n_lat, 95);
    p->psi_some_avg10 = m1.some_avg10;
    p->pswpin = m0.pswpin >= 0 && m1.pswpin >= 0 ? m1.pswpin - m0.pswpin : -1;
    p->pswpout = m0.pswpout >= 0 && m1.pswpout >= 0 ? m1.pswpout - m0.pswpout : -1;
    p->over_headroom = p->pswpout > 64 || (p->psi_some_avg10 >= A->psi_high) ||
                       (x->rss_limit && p->peak_rss > x->rss_limit);
    engine_free(eng);
    free(lat);
    return 0;
fail:
    cli_error("sweep", "concurrency %d: %s", (int)p->concurrency, e.msg);
    engine_free(eng);
    free(lat);
    return -1;
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* Sizes the KV pool once for every point: the memory budget, capped at what the largest level can use; and
 * the RSS limit (RAM this process may use minus the headroom). 0, or -1 (printed). */
static int sweep_plan(const struct sweep_args *A, struct sweep_ctx *x, int32_t max_level)
{
    struct err e;
    if (runtime_plan_kv(&x->st, A->rp.kv_memory, UINT64_MAX, &e)) {
        cli_error("sweep", "%s", e.msg);
        return -1;
    }
    int32_t blk = x->st.ep.kv_block;
    int64_t per_req = 1;
    for (size_t i = 0; i < x->n_reqs; i++) {
        int64_t b = ((int64_t)x->reqs[i].n_ids + x->reqs[i].max_tokens + blk - 1) / blk;
        if (b > per_req) per_req = b;
    }
    int64_t budget = x->st.budget.kv_blocks, useful = per_req * max_level;
    if (budget < per_req) {
        cli_error("sweep", "the KV budget holds %lld tokens, but the longest sampled request needs %lld",
                  (long long)budget * blk, (long long)per_req * blk);
        return -1;
    }
    x->st.ep.kv_blocks = budget < useful ? budget : useful;
    struct sysmem_info mi;
    if (!x->st.caps.gpu && sysmem_read(&mi, &e) == 0) {
        uint64_t ram = sysmem_ram(&mi);
        uint64_t head = A->rp.headroom != RUNTIME_AUTO ? A->rp.headroom : sysmem_default_headroom(&mi);
        x->rss_limit = ram > head ? ram - head : 0;
    }
    return 0;
}

static void print_header(void)
{
    printf("%5s %6s %9s %9s %6s %8s %8s %9s %11s %7s %6s %6s %4s\n", "conc", "mbt", "gen t/s", "total t/s", "cost",
           "p50 s", "p95 s", "RSS MiB", "KV peak", "preempt", "PSI", "swap", "run");
}

/* One measured run of p (its number run) as a table row. */
static void print_point(const struct sweep_point *p, int32_t run)
{
    char kv[32], psi[16], swp[16];
    snprintf(kv, sizeof kv, "%lld/%lld", (long long)p->kv_blocks_peak, (long long)p->kv_blocks_total);
    snprintf(psi, sizeof psi, p->psi_some_avg10 < 0 ? "-" : "%.1f", p->psi_some_avg10);
    snprintf(swp, sizeof swp, p->pswpout < 0 ? "-" : "%lld", (long long)(p->pswpin + p->pswpout));
    printf("%5d %6d %9.1f %9.1f %6.2f %8.2f %8.2f %9.1f %11s %7lld %6s %6s %4d%s", (int)p->concurrency,
           (int)p->max_batch_tokens, p->gen_tok_s, p->total_tok_s, p->rel_cost, p->p50_s, p->p95_s, mib(p->peak_rss),
           kv, (long long)p->preemptions, psi, swp, (int)run, sweep_usable(p) ? "" : "  not usable: ");
    printf("%s\n", sweep_unusable_reason(p));
    fflush(stdout);
}

/* 1 when the next level (next_c) would cross the RSS limit: this level's KV use grown in proportion. */
static int next_would_cross(const struct sweep_ctx *x, const struct sweep_point *p, int32_t next_c)
{
    if (!x->rss_limit) return 0;
    uint64_t per_block = model_kv_bytes_per_token(&x->st.model->hp, x->st.ep.kv_type) * (uint64_t)x->st.ep.kv_block;
    double kv = (double)p->kv_blocks_peak * (double)per_block;
    return (double)p->peak_rss + kv * ((double)next_c / p->concurrency - 1.0) > (double)x->rss_limit;
}

/* The levels: given, or 1, 2, 4, ... up to half the sample (at least 1). */
static int32_t make_levels(const struct sweep_args *A, const struct sweep_ctx *x, int32_t *lv)
{
    if (A->n_levels) {
        memcpy(lv, A->levels, (size_t)A->n_levels * sizeof *lv);
        return A->n_levels;
    }
    int32_t n = 0, top = (int32_t)(x->n_reqs / 2 > 1 ? x->n_reqs / 2 : 1);
    for (int32_t c = 1; c <= top && c <= 4096 && n < SWEEP_MAX_LEVELS; c *= 2) lv[n++] = c;
    return n;
}

/* Measures level l once more at each token budget, every run merged into its point pts[l * n_mbt + t]
 * (rates against pts[0]). 0, or -1 (printed). */
static int measure_level(const struct sweep_args *A, struct sweep_ctx *x, const int32_t *lv, int32_t l,
                         struct sweep_point *pts)
{
    int32_t n_mbt = A->n_mbt ? A->n_mbt : 1;
    for (int32_t t = 0; t < n_mbt; t++) {
        struct sweep_point r, *acc = &pts[l * n_mbt + t];
        memset(&r, 0, sizeof r);
        r.concurrency = lv[l];
        r.max_batch_tokens = A->n_mbt ? A->mbt[t] : x->st.ep.max_batch_tokens;
        if (run_point(A, x, &r)) return -1;
        sweep_rates(&r, pts[0].runs ? &pts[0] : NULL);
        print_point(&r, acc->runs + 1);
        sweep_merge(acc, &r);
    }
    return 0;
}

/* The best point of level l (over its token budgets), into *out; its index returned. */
static int level_best_of(const struct sweep_point *pts, int32_t n_mbt, int32_t l, struct sweep_point *out)
{
    int b = l * n_mbt;
    for (int32_t t = 1; t < n_mbt; t++)
        if (pts[l * n_mbt + t].total_tok_s > pts[b].total_tok_s) b = l * n_mbt + t;
    *out = pts[b];
    return b;
}

/* Runs the levels (each with every token budget), interleaved with their neighbours (sweep_schedule), until
 * the stop rule; *n_pts points, one per setting with its runs merged. 0, or -1. */
static int sweep_climb(const struct sweep_args *A, struct sweep_ctx *x, const int32_t *lv, int32_t n_lv,
                       struct sweep_point *pts, size_t *n_pts)
{
    struct sweep_point level_best[SWEEP_MAX_LEVELS];
    int32_t n_mbt = A->n_mbt ? A->n_mbt : 1;
    if (n_lv * n_mbt > SWEEP_MAX_POINTS) n_lv = SWEEP_MAX_POINTS / n_mbt;
    memset(pts, 0, (size_t)n_lv * (size_t)n_mbt * sizeof *pts);
    print_header();
    for (int32_t l = 0; l < n_lv; l++) {
        int32_t order[3];
        size_t k = sweep_schedule(l, l + 1 == n_lv, order);
        *n_pts = (size_t)(l + 1) * (size_t)n_mbt;
        for (size_t i = 0; i < k; i++) {
            if (measure_level(A, x, lv, order[i], pts)) return -1;
            if (order[i] == l && !sweep_usable(&pts[level_best_of(pts, n_mbt, l, &level_best[l])])) break;
        }
        for (int32_t j = 0; j <= l; j++) level_best_of(pts, n_mbt, j, &level_best[j]);
        int b = level_best_of(pts, n_mbt, l, &level_best[l]);
        enum sweep_stop why = sweep_should_stop(level_best, (size_t)l + 1);
        if (why == SWEEP_STOP_FLAT) {
            printf("stopping: throughput has flattened (the steps to concurrency %d and %d are both inside the "
                   "measured spread)\n", (int)lv[l - 1], (int)lv[l]);
            return 0;
        }
        if (why) {
            printf("stopping: %s\n", sweep_unusable_reason(&pts[b]));
            return 0;
        }
        if (l + 1 == n_lv) break;
        if (next_would_cross(x, &pts[b], lv[l + 1])) {
            printf("stopping: concurrency %d would cross the memory headroom\n", (int)lv[l + 1]);
            return 0;
        }
        double steady_s = sweep_predict_steady_s(l ? &level_best[l - 1] : NULL, &pts[b], lv[l + 1]);
        if (steady_s > A->point_s * SWEEP_WINDOW_CAP) {
            printf("stopping: concurrency %d would need ~%.0f s to reach steady state (cap %.0f s)\n", (int)lv[l + 1],
                   steady_s, A->point_s * SWEEP_WINDOW_CAP);
            return 0;
        }
    }
    return 0;
}

/* The points with their runs merged: mean rate, the slowest and fastest run, the spread, CPU share. */
static void print_summary(const struct sweep_point *pts, size_t n)
{
    printf("%5s %6s %4s %9s %9s %9s %7s %9s %11s\n", "conc", "mbt", "runs", "total t/s", "slowest", "fastest",
           "spread", "CPU %", "load avg");
    for (size_t i = 0; i < n; i++) {
        const struct sweep_point *p = &pts[i];
        char cpu[32] = "-", load[32] = "-";
        if (p->cpu_share_lo >= 0) snprintf(cpu, sizeof cpu, "%.0f-%.0f", 100 * p->cpu_share_lo, 100 * p->cpu_share_hi);
        if (p->load_lo >= 0) snprintf(load, sizeof load, "%.2f-%.2f", p->load_lo, p->load_hi);
        printf("%5d %6d %4d %9.1f %9.1f %9.1f %6.1f%% %9s %11s%s%s\n", (int)p->concurrency, (int)p->max_batch_tokens,
               (int)p->runs, p->total_tok_s, p->tok_s_lo, p->tok_s_hi, 100 * p->spread, cpu, load,
               sweep_usable(p) ? "" : "  not usable: ", sweep_unusable_reason(p));
    }
}

/* Appends s to buf (cap bytes), single-quoted for a POSIX shell when it has anything but plain characters. */
static void append_arg(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    int plain = *s != '\0' && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,+-@%") ==
                                  strlen(s);
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, n ? " " : "");
    if (plain) {
        snprintf(buf + n, n < cap ? cap - n : 0, "%s", s);
        return;
    }
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "'");
    for (; *s && n + 5 < cap; s++) n += (size_t)snprintf(buf + n, cap - n, *s == '\'' ? "'\\''" : "%c", *s);
    snprintf(buf + n, n < cap ? cap - n : 0, "'");
}

/* The `nightshift run` command that uses point p, into buf; automatic: p is auto's, --max-seqs left out. */
static void recommend_command(const struct sweep_args *A, const struct sweep_point *p, int automatic, char *buf,
                              size_t cap)
{
    char num[32], outp[4096];
    buf[0] = '\0';
    const char *lead[] = {"nightshift", "run", A->backlog, "-m", A->rp.model_path, "--max-seqs"};
    for (size_t i = 0; i < sizeof lead / sizeof lead[0] - (automatic ? 1 : 0); i++) append_arg(buf, cap, lead[i]);
    snprintf(num, sizeof num, "%d", (int)p->concurrency);
    if (!automatic) append_arg(buf, cap, num);
    if (A->n_mbt) {
        append_arg(buf, cap, "--max-batch-tokens");
        snprintf(num, sizeof num, "%d", (int)p->max_batch_tokens);
        append_arg(buf, cap, num);
    }
    for (int i = 0; i < A->n_pass; i++) append_arg(buf, cap, A->pass[i]);
    const char *b = base_name(A->backlog), *dot = strrchr(b, '.');
    snprintf(outp, sizeof outp, "%.*s.results.jsonl", (int)(dot && dot != b ? dot - b : (long)strlen(b)), b);
    append_arg(buf, cap, "-o");
    append_arg(buf, cap, outp);
}

/* What the sweep concludes: the best and the recommended point (-1: none), whether `--max-seqs auto` runs
 * the latter (auto_c: the backend's knee, auto's ceiling), how sure it is, and the load note. */
struct sweep_verdict {
    int best, rec, automatic, firm, load_changed;
    int32_t auto_c;
    char confidence[512], load_note[512], cmd[8192];
};

/* Fills *v from the n points (their rel_cost against the first, merged, set here). */
static void sweep_conclude(const struct sweep_args *A, const struct sweep_ctx *x, struct sweep_point *pts, size_t n,
                           struct sweep_verdict *v)
{
    for (size_t i = 0; i < n; i++) sweep_rates(&pts[i], &pts[0]);
    v->rec = sweep_recommend(pts, n, &v->best);
    v->auto_c = runtime_seq_knee(&x->st.caps, x->st.ep.max_batch_tokens);
    int a = A->n_mbt ? -1 : sweep_recommend_auto(pts, n, v->best, v->auto_c); /* auto runs the default budget */
    v->automatic = a >= 0;
    if (a >= 0) v->rec = a;
    v->firm = sweep_confidence(pts, n, v->rec, v->best, v->confidence, sizeof v->confidence);
    v->load_changed = sweep_load_note(pts, n, v->load_note, sizeof v->load_note);
    v->cmd[0] = '\0';
    if (v->rec >= 0) recommend_command(A, &pts[v->rec], v->automatic, v->cmd, sizeof v->cmd);
}

static void print_verdict(const struct sweep_point *pts, const struct sweep_verdict *v)
{
    if (v->load_changed) printf("note: %s; the spread is wide where it did, rerun on a quiet machine for a firmer "
                                "answer\n", v->load_note);
    if (v->rec < 0) {
        printf("no point kept the memory headroom without failures: nothing to recommend\n");
        return;
    }
    const struct sweep_point *b = &pts[v->best], *r = &pts[v->rec];
    char what[96];
    if (v->automatic) snprintf(what, sizeof what, "--max-seqs auto (the backend's knee, %d here)", (int)r->concurrency);
    else snprintf(what, sizeof what, "concurrency %d", (int)r->concurrency);
    printf("best: concurrency %d, %.1f tok/s (%d runs, spread %.1f%%); recommended: %s, %.1f tok/s (%.0f%% of the "
           "best)\n", (int)b->concurrency, b->total_tok_s, (int)b->runs, 100 * b->spread, what, r->total_tok_s,
           100.0 * r->total_tok_s / b->total_tok_s);
    printf("  confidence: %s\n", v->confidence);
    printf("  %s\n", v->cmd);
}

/* Writes PREFIX.csv, PREFIX.json and PREFIX.svg. 0, or -1 (printed). */
static int sweep_write_files(const struct sweep_args *A, const struct sweep_ctx *x, const struct sweep_point *pts,
                             size_t n, const struct sweep_verdict *v)
{
    int rec = v->rec;
    const char *cmd = v->cmd;
    char path[4096], title[512];
    struct err e;
    snprintf(path, sizeof path, "%s.csv", A->out);
    FILE *f = fopen(path, "w");
    int bad = !f || sweep_write_csv(f, pts, n);
    if (f && fclose(f)) bad = 1;
    if (bad) goto fail;
    snprintf(title, sizeof title, "nightshift sweep: %s on %s (%s, %zu of %lld requests)", base_name(A->backlog),
             base_name(A->rp.model_path), x->st.backend_name, x->n_reqs, (long long)x->n_lines);
    snprintf(path, sizeof path, "%s.svg", A->out);
    f = fopen(path, "w");
    bad = !f || sweep_write_svg(f, title, pts, n, rec);
    if (f && fclose(f)) bad = 1;
    if (bad) goto fail;
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:o, s:i, s:s?}", "backlog", A->backlog, "model",
                          A->rp.model_path, "backend", x->st.backend_name, "threads", x->st.threads, "sampled",
                          (json_int_t)x->n_reqs, "usable_lines", (json_int_t)x->n_lines, "points",
                          sweep_points_json(pts, n), "recommended", rec, "command", rec >= 0 ? cmd : NULL);
    if (o && json_object_update_new(o, json_pack("{s:b, s:i, s:s, s:b, s:s?}", "auto", v->automatic, "auto_max_seqs",
                                                 (int)v->auto_c, "confidence", v->confidence, "confident", v->firm,
                                                 "load_note", v->load_changed ? v->load_note : NULL))) {
        json_decref(o);
        o = NULL;
    }
    snprintf(path, sizeof path, "%s.json", A->out);
    if (!o || record_write(path, o, &e)) {
        json_decref(o);
        goto fail;
    }
    json_decref(o);
    return 0;
fail:
    cli_error("sweep", "cannot write %s", path);
    return -1;
}

int cmd_sweep(int argc, char **argv)
{
    struct sweep_args A;
    memset(&A, 0, sizeof A);
    A.rp = runtime_default_params();
    A.input = input_default_opts();
    struct gen_params defaults = genparam_defaults();
    A.input.defaults = defaults;
    A.parse_special = 1;
    A.sample = 256;
    A.point_s = 10;
    A.psi_high = 10;
    A.out = "sweep";
    int rc = sweep_parse(argc, argv, &A);
    if (rc) {
        genparam_free(&A.input.defaults);
        return rc > 0 ? 0 : 2;
    }
    struct err e;
    if (!A.backlog || genparam_check(&A.input.defaults, &e)) {
        cli_error("sweep", "%s", A.backlog ? e.msg : "no backlog given (usage: nightshift sweep BACKLOG -m MODEL)");
        genparam_free(&A.input.defaults);
        return 2;
    }
    if (!A.rp.model_path) A.rp.model_path = cli_default_model();
    struct sweep_ctx x;
    memset(&x, 0, sizeof x);
    struct sweep_point pts[SWEEP_MAX_POINTS];
    size_t n_pts = 0;
    int32_t lv[SWEEP_MAX_LEVELS];
    rc = 1;
    double t0 = clock_now();
    if (sweep_open(&A, &x) || sweep_load(&A, &x)) goto out;
    int32_t n_lv = make_levels(&A, &x, lv), max_lv = 1;
    for (int32_t i = 0; i < n_lv; i++) max_lv = lv[i] > max_lv ? lv[i] : max_lv;
    if (sweep_plan(&A, &x, max_lv)) goto out;
    char desc[256];
    runtime_describe(&x.st, desc, sizeof desc);
    printf("nightshift sweep: %zu of %lld requests of %s (stratified by prompt length); %s; %g s per point\n",
           x.n_reqs, (long long)x.n_lines, A.backlog, desc, A.point_s);
    if (sweep_climb(&A, &x, lv, n_lv, pts, &n_pts)) goto out;
    static struct sweep_verdict v; /* 9 KiB; one sweep a process */
    sweep_conclude(&A, &x, pts, n_pts, &v);
    print_summary(pts, n_pts);
    if (sweep_write_files(&A, &x, pts, n_pts, &v)) goto out;
    print_verdict(pts, &v);
    printf("wrote %s.csv, %s.json, %s.svg (%.1f s)\n", A.out, A.out, A.out, clock_now() - t0);
    rc = v.rec >= 0 ? 0 : 1;
out:
    for (size_t i = 0; i < x.n_reqs; i++) free(x.reqs[i].ids), genparam_free(&x.reqs[i].gen);
    free(x.reqs);
    jinja_free(x.chat_jinja);
    runtime_close(&x.st);
    genparam_free(&A.input.defaults);
    return rc;
}
