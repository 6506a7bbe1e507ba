/* nightshift bench — synthetic throughput through the real scheduler, one run per concurrency level.
 *
 *   nightshift bench [-m MODEL] [--prompt-len 128] [--gen-len 128] [--requests N] [--concurrency 1,4,16,64]
 *                    [--shared-prefix LEN] [--reps R] [--seed S] [--json] [engine flags]
 *
 * Each level c runs N requests (default 2c) through a fresh engine with max_seqs = c: prompts of random
 * token ids (an optional shared prefix of LEN ids, then prompt-len unique ones), greedy, EOS ignored, so
 * every request generates exactly gen-len tokens. Rates are over the level's wall time (first add to last
 * result): prompt tok/s = prompt tokens / wall, generation tok/s = generated tokens / wall, total = both.
 * The KV pool is sized once from --kv-memory (auto by default) and capped at what the largest level can
 * ever hold (every request's blocks at once); the capacity is printed first. A tiny warm-up request runs
 * before the first level (page faults of the mapped weights, thread start-up).
 *
 * With --reps R every level runs R times, the levels taking turns (1, 4, ..., 1, 4, ...) so that a machine
 * whose speed drifts affects them alike; each level reports its median run by total tok/s (for even R the
 * lower of the middle two) and the lowest and highest total tok/s of its runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/engine_flags.h"
#include "engine/engine.h"
#include "util/clock.h"
#include "util/rng.h"
#include "util/sysmem.h"

#define BENCH_MAX_LEVELS 32

struct bench_opts {
    const char *model;
    int32_t prompt_len, gen_len, shared_prefix;
    int32_t requests; /* 0: 2 x concurrency */
    int32_t reps;     /* runs per level */
    int32_t levels[BENCH_MAX_LEVELS];
    int n_levels;
    uint64_t seed;
    int json;
    struct runtime_params rp;
};

struct bench_level {
    int32_t concurrency, requests, failed;
    int64_t prompt_tokens, prompt_computed, prompt_cached, gen_tokens, steps, preemptions;
    int64_t peak_blocks;
    double wall, t_forward;
    int64_t decode_rows; /* rows of decode-only steps (no prompt row in the step) */
    double t_decode;     /* wall time of those steps */
    uint64_t peak_rss;
};

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: nightshift bench [-m MODEL] [options]\n"
            "\n"
            "Synthetic requests (random token ids, greedy, EOS ignored) through the real scheduler, once per\n"
            "concurrency level; reports prompt, generation and total tok/s, wall time, peak KV use and peak RSS.\n"
            "\n"
            "  -m, --model PATH        GGUF model (default: %s)\n"
            "  --prompt-len N          unique prompt tokens per request (default 128)\n"
            "  --gen-len N             generated tokens per request (default 128)\n"
            "  --shared-prefix N       tokens every prompt starts with, before its unique part (default 0)\n"
            "  --requests N            requests per level (default: 2 x the level's concurrency)\n"
            "  --concurrency LIST      comma-separated levels; each sets --max-seqs (default 1,4,16,64)\n"
            "  --reps R                runs per level, levels taking turns; reports the median run and the\n"
            "                          range of total tok/s (default 1)\n"
            "  --seed S                seed of the random prompts (default 1)\n"
            "  --json                  one JSON object on stdout instead of the table\n"
            "Engine (--max-seqs is set by each concurrency level):\n",
            cli_default_model());
    struct runtime_params d = runtime_default_params();
    engine_flags_usage(out, &d);
}

/* Parses --concurrency's list ("1,4,16") into o->levels. 0, or -1 (printed). */
static int bench_parse_levels(const char *s, struct bench_opts *o)
{
    o->n_levels = 0;
    const char *p = s;
    for (;;) {
        char tok[32];
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof tok) {
            cli_error("bench", "--concurrency '%s': expected a comma-separated list of integers in [1, 4096]", s);
            return -1;
        }
        memcpy(tok, p, n);
        tok[n] = '\0';
        if (o->n_levels == BENCH_MAX_LEVELS) {
            cli_error("bench", "--concurrency: at most %d levels", BENCH_MAX_LEVELS);
            return -1;
        }
        long v;
        if (engine_flags_parse_long("bench", "--concurrency", tok, 1, 4096, &v)) return -1;
        o->levels[o->n_levels++] = (int32_t)v;
        if (!p[n]) break;
        p += n + 1;
    }
    return 0;
}

/* 0 ok, 2 usage error (printed), -1 --help printed */
static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->prompt_len = 128;
    o->gen_len = 128;
    o->seed = 1;
    o->reps = 1;
    o->levels[0] = 1, o->levels[1] = 4, o->levels[2] = 16, o->levels[3] = 64;
    o->n_levels = 4;
    o->rp = runtime_default_params();
    const char *concurrency = NULL; /* the list, parsed after the loop */
    const struct cli_opt opts[] = {
        {"--model", "-m", CLI_OPT_STRING, &o->model, 0, 0, 0, NULL},
        {"--prompt-len", NULL, CLI_OPT_INT32, &o->prompt_len, 1, 1 << 20, 0, NULL},
        {"--gen-len", NULL, CLI_OPT_INT32, &o->gen_len, 1, 1 << 20, 0, NULL},
        {"--shared-prefix", NULL, CLI_OPT_INT32, &o->shared_prefix, 0, 1 << 20, 0, NULL},
        {"--requests", NULL, CLI_OPT_INT32, &o->requests, 1, 1 << 20, 0, NULL},
        {"--concurrency", NULL, CLI_OPT_STRING, &concurrency, 0, 0, 0, NULL},
        {"--reps", NULL, CLI_OPT_INT32, &o->reps, 1, 1000, 0, NULL},
        {"--seed", NULL, CLI_OPT_U64, &o->seed, 0, 0, 0, NULL},
        {"--json", NULL, CLI_OPT_SET, &o->json, 1, 0, 0, NULL},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        }
        int r = engine_flags_parse(&o->rp, "bench", argc, argv, &i);
        if (!r) r = cli_opts_parse("bench", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cli_error("bench", "unknown flag '%s' (see nightshift bench --help)", a);
            return 2;
        }
    }
    if (concurrency && bench_parse_levels(concurrency, o)) return 2;
    if (!o->model) o->model = cli_default_model();
    return 0;
}

static int32_t level_requests(const struct bench_opts *o, int32_t c)
{
    return o->requests ? o->requests : 2 * c;
}

/* Runs n requests (prompts: rows of `prompts`, each n_prompt long) at max_seqs c on a fresh engine. */
static int run_level(struct runtime *rt, const struct engine_params *base, int32_t c, int32_t n,
                     const int32_t *prompts, int32_t n_prompt, int32_t gen_len, struct bench_level *lv, struct err *e)
{
    struct engine_params p = *base;
    p.max_seqs = c;
    engine *eng;
    memset(lv, 0, sizeof *lv);
    lv->concurrency = c;
    lv->requests = n;
    if (runtime_new_engine(rt, &p, &eng, e)) return -1;
    sysmem_reset_peak_rss();
    double t0 = clock_now();
    for (int32_t i = 0; i < n; i++) {
        struct engine_request r = {.id = (uint64_t)i, .prompt = prompts + (size_t)i * (size_t)n_prompt,
                                   .n_prompt = n_prompt, .max_tokens = gen_len, .sampling = sampler_default_params(),
                                   .ignore_eos = 1};
        if (engine_add(eng, &r, e)) goto fail;
    }
    for (;;) {
        struct engine_result res;
        while (engine_take(eng, &res)) {
            if (res.finish == ENGINE_FINISH_ERROR) {
                if (!lv->failed) cli_error("bench", "request %llu failed: %s", (unsigned long long)res.id, res.error);
                lv->failed++;
            }
            engine_result_free(&res);
        }
        if (!engine_has_work(eng)) break;
        struct engine_stats before, after;
        engine_get_stats(eng, &before);
        double ts = clock_now();
        if (engine_step(eng, e)) goto fail;
        double dt = clock_now() - ts;
        engine_get_stats(eng, &after);
        if (after.prompt_tokens_computed == before.prompt_tokens_computed &&
            after.rows_computed - before.rows_computed == after.gen_tokens - before.gen_tokens) {
            lv->decode_rows += after.rows_computed - before.rows_computed;
            lv->t_decode += dt;
        }
    }
    lv->wall = clock_now() - t0;
    lv->peak_rss = sysmem_peak_rss_bytes();
    struct engine_stats s;
    engine_get_stats(eng, &s);
    lv->prompt_tokens = (int64_t)(n - lv->failed) * n_prompt;
    lv->prompt_computed = s.prompt_tokens_computed;
    lv->prompt_cached = s.prompt_tokens_cached;
    lv->gen_tokens = s.gen_tokens;
    lv->steps = s.n_steps;
    lv->preemptions = s.n_preemptions;
    lv->peak_blocks = s.kv_blocks_peak;
    lv->t_forward = s.t_forward;
    engine_free(eng);
    return 0;
fail:
    engine_free(eng);
    return -1;
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* Total tok/s of a run. */
static double level_rate(const struct bench_level *lv)
{
    return (double)(lv->prompt_tokens + lv->gen_tokens) / (lv->wall > 0 ? lv->wall : 1e-9);
}

static int cmp_rate(const void *pa, const void *pb)
{
    double a = level_rate(pa), b = level_rate(pb);
    return (a > b) - (a < b);
}

/* What every level shares: the stack without an engine (each level makes its own), the engine parameters
 * with the pool size, the memory budget, and the prompts. */
struct bench_ctx {
    struct runtime st;
    struct engine_params ep; /* kv_blocks: the pool, sized once; max_seqs: set by each level */
    uint64_t per_token;      /* KV bytes per token */
    int64_t budget_blocks;   /* blocks the memory budget holds */
    char budget_desc[256];   /* where the budget comes from, for messages */
    int64_t n_prompt;        /* tokens per prompt: shared prefix + unique part */
    int32_t max_requests;    /* requests of the largest level */
    int32_t *prompts;        /* (max_requests, n_prompt) */
};

/* Opens the model and the backend and sizes the KV pool: from the budget, capped at what the largest level
 * can ever hold. Returns the exit status: 0 ok, 1 failure, 2 a request that cannot fit (printed). */
static int bench_open(struct bench_opts *o, struct bench_ctx *b)
{
    struct err e;
    o->rp.model_path = o->model;
    if (runtime_open_model(&o->rp, &b->st, &e)) goto fail;
    const struct model_hparams *hp = &b->st.model->hp;
    b->n_prompt = (int64_t)o->shared_prefix + o->prompt_len;
    if (hp->n_ctx_train > 0 && b->n_prompt + o->gen_len > hp->n_ctx_train) {
        cli_error("bench", "--shared-prefix %d + --prompt-len %d + --gen-len %d = %lld tokens exceeds the model context of %d",
                  (int)o->shared_prefix, (int)o->prompt_len, (int)o->gen_len, (long long)(b->n_prompt + o->gen_len),
                  (int)hp->n_ctx_train);
        return 2;
    }
    if (runtime_open_backend(&b->st, &e)) goto fail;
    struct engine_params *ep = &b->ep;
    *ep = b->st.ep;
    /* memory budget -> pool size: not capped by max_seqs here (each level sets its own), but below */
    b->per_token = model_kv_bytes_per_token(hp, ep->kv_type);
    if (runtime_plan_kv(&b->st, o->rp.kv_memory, UINT64_MAX, &e)) goto fail;
    const struct runtime_budget *bu = &b->st.budget;
    if (bu->automatic)
        snprintf(b->budget_desc, sizeof b->budget_desc,
                 "auto = available %.0f MiB - weights %.0f MiB - scratch %.0f MiB - headroom %.0f MiB", mib(bu->available),
                 mib(bu->weights), mib(bu->scratch), mib(bu->headroom));
    else
        snprintf(b->budget_desc, sizeof b->budget_desc, "--kv-memory %llu bytes", (unsigned long long)bu->kv_bytes);
    b->budget_blocks = bu->kv_blocks;
    int64_t per_req_blocks = (b->n_prompt + o->gen_len - 1 + ep->kv_block - 1) / ep->kv_block;
    if (b->budget_blocks < per_req_blocks) {
        cli_error("bench", "%s holds %lld KV tokens (%s, %llu bytes per token), but one request needs %lld (%lld prompt + %d generated)",
                  b->budget_desc, (long long)b->budget_blocks * ep->kv_block, model_kv_type_name(ep->kv_type),
                  (unsigned long long)b->per_token, (long long)per_req_blocks * ep->kv_block, (long long)b->n_prompt,
                  (int)o->gen_len);
        return 2;
    }
    b->max_requests = 0;
    for (int l = 0; l < o->n_levels; l++) {
        int32_t n = level_requests(o, o->levels[l]);
        if (n > b->max_requests) b->max_requests = n;
    }
    int64_t useful = (int64_t)b->max_requests * per_req_blocks;
    ep->kv_blocks = b->budget_blocks < useful ? b->budget_blocks : useful;
    return 0;
fail:
    cli_error("bench", "%s", e.msg);
    return 1;
}

/* The prompts: every row starts with the same shared prefix, then unique random ids. 0, or 1 (printed). */
static int bench_make_prompts(const struct bench_opts *o, struct bench_ctx *b)
{
    int64_t n_prompt = b->n_prompt;
    b->prompts = malloc((size_t)b->max_requests * (size_t)n_prompt * sizeof *b->prompts);
    if (!b->prompts) {
        cli_error("bench", "out of memory for %d prompts of %lld tokens", (int)b->max_requests, (long long)n_prompt);
        return 1;
    }
    uint64_t rng = o->seed;
    uint64_t n_vocab = (uint64_t)b->st.model->hp.n_vocab;
    int32_t *prompts = b->prompts;
    for (int64_t k = 0; k < o->shared_prefix; k++) prompts[k] = (int32_t)(rng_splitmix64(&rng) % n_vocab);
    for (int32_t i = 0; i < b->max_requests; i++) {
        int32_t *p = prompts + (size_t)i * (size_t)n_prompt;
        if (i) memcpy(p, prompts, (size_t)o->shared_prefix * sizeof *p);
        for (int64_t k = o->shared_prefix; k < n_prompt; k++) p[k] = (int32_t)(rng_splitmix64(&rng) % n_vocab);
    }
    return 0;
}

/* The model, the pool and the requests: on stdout for the table, on stderr with --json. */
static void bench_print_setup(const struct bench_opts *o, const struct bench_ctx *b)
{
    const struct model_hparams *hp = &b->st.model->hp;
    const struct engine_params *ep = &b->ep;
    FILE *info = o->json ? stderr : stdout;
    fprintf(info, "nightshift bench: %s (%d layers, n_embd %d, vocab %d), %s backend, %d threads\n", o->model, (int)hp->n_layer,
            (int)hp->n_embd, (int)hp->n_vocab, b->st.backend_name, b->st.threads);
    fprintf(info, "KV pool: %lld blocks x %d = %lld tokens (%s, %.1f MiB); budget %s holds %lld tokens\n", (long long)ep->kv_blocks,
            (int)ep->kv_block, (long long)ep->kv_blocks * ep->kv_block, model_kv_type_name(ep->kv_type),
            mib((uint64_t)ep->kv_blocks * (uint64_t)ep->kv_block * b->per_token), b->budget_desc,
            (long long)b->budget_blocks * ep->kv_block);
    fprintf(info, "requests: %lld prompt tokens (%d shared) + %d generated, greedy, EOS ignored; max_batch_tokens %d%s\n",
            (long long)b->n_prompt, (int)o->shared_prefix, (int)o->gen_len, (int)ep->max_batch_tokens,
            ep->prefix_cache ? "" : ", prefix cache off");
    fflush(info);
}

/* Reports a level whose reps runs are all in (lr, sorted here): its median run as a table row (unless
 * --json) and as an object appended to levels_json. Returns 1 if any run had a failed request, else 0. */
static int bench_report_level(const struct bench_opts *o, const struct bench_ctx *b, struct bench_level *lr,
                              json_t *levels_json)
{
    int32_t reps = o->reps;
    qsort(lr, (size_t)reps, sizeof *lr, cmp_rate);
    const struct bench_level lv = lr[(reps - 1) / 2];
    int32_t c = lv.concurrency;
    json_t *rates = json_array();
    for (int32_t k = 0; k < reps; k++) json_array_append_new(rates, json_real(level_rate(&lr[k])));
    double w = lv.wall > 0 ? lv.wall : 1e-9;
    double pr = (double)lv.prompt_tokens / w, gr = (double)lv.gen_tokens / w;
    int64_t peak_tokens = lv.peak_blocks * b->ep.kv_block;
    double dr = lv.t_decode > 0 ? (double)lv.decode_rows / lv.t_decode : 0;
    if (!o->json) {
        printf("%5d %6d %12.1f %11.1f %12.1f %8.2f %10.1f %8lld (%3.0f%%) %6.0f MiB %8lld %8lld", (int)c, (int)lv.requests, pr,
               gr, pr + gr, lv.wall, dr, (long long)peak_tokens, 100.0 * (double)lv.peak_blocks / (double)b->ep.kv_blocks,
               mib(lv.peak_rss), (long long)lv.prompt_cached, (long long)lv.preemptions);
        if (reps > 1) printf("  %.1f-%.1f", level_rate(&lr[0]), level_rate(&lr[reps - 1]));
        printf("\n");
        fflush(stdout);
    }
    json_t *lj = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}",
                           "concurrency", c, "requests", lv.requests, "failed", lv.failed, "prompt_tok_s", pr, "gen_tok_s", gr,
                           "total_tok_s", pr + gr, "wall_s", lv.wall, "decode_tok_s", dr, "prompt_tokens",
                           (json_int_t)lv.prompt_tokens, "prompt_tokens_computed", (json_int_t)lv.prompt_computed,
                           "prompt_tokens_cached", (json_int_t)lv.prompt_cached, "gen_tokens", (json_int_t)lv.gen_tokens,
                           "steps", (json_int_t)lv.steps, "preemptions", (json_int_t)lv.preemptions, "peak_kv_tokens",
                           (json_int_t)peak_tokens, "peak_rss_bytes", (json_int_t)lv.peak_rss, "forward_s", lv.t_forward);
    json_object_set_new(lj, "total_tok_s_runs", rates);
    json_array_append_new(levels_json, lj);
    int failed = 0;
    for (int32_t k = 0; k < reps; k++)
        if (lr[k].failed) failed = 1;
    return failed;
}

/* The warm-up request, then o->reps rounds of all levels (a level is reported once its last run is in).
 * Returns 0, 1 when a request failed (every level still reported), -1 when a level could not run (printed). */
static int bench_run_levels(const struct bench_opts *o, struct bench_ctx *b, json_t *levels_json)
{
    struct err e;
    struct bench_level warm;
    int32_t wn = b->n_prompt < 8 ? (int32_t)b->n_prompt : 8;
    if (run_level(&b->st, &b->ep, 1, 1, b->prompts, wn, o->gen_len < 4 ? o->gen_len : 4, &warm, &e)) {
        cli_error("bench", "%s", e.msg);
        return -1;
    }
    if (!o->json)
        printf("%5s %6s %12s %11s %12s %8s %10s %15s %10s %8s %8s%s\n", "conc", "reqs", "prompt tok/s", "gen tok/s",
               "total tok/s", "wall s", "decode t/s", "peak KV tokens", "peak RSS", "cached", "preempt",
               o->reps > 1 ? "  total range" : "");
    struct bench_level *runs = malloc((size_t)o->n_levels * (size_t)o->reps * sizeof *runs); /* (n_levels, reps) */
    if (!runs) {
        cli_error("bench", "out of memory");
        return -1;
    }
    int rc = 0;
    for (int32_t r = 0; r < o->reps; r++) {
        for (int l = 0; l < o->n_levels; l++) {
            int32_t c = o->levels[l];
            struct bench_level *lr = runs + (size_t)l * (size_t)o->reps;
            if (run_level(&b->st, &b->ep, c, level_requests(o, c), b->prompts, (int32_t)b->n_prompt, o->gen_len, &lr[r], &e)) {
                cli_error("bench", "concurrency %d: %s", (int)c, e.msg);
                rc = -1;
                goto done;
            }
            if (r + 1 == o->reps && bench_report_level(o, b, lr, levels_json)) rc = 1;
        }
    }
done:
    free(runs);
    return rc;
}

/* --json: one object, the setup and the levels, on stdout. */
static void bench_print_json(const struct bench_opts *o, const struct bench_ctx *b, json_t *levels_json)
{
    const struct engine_params *ep = &b->ep;
    json_t *root = json_pack("{s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:b, s:O}", "model", o->model,
                             "backend", b->st.backend_name, "threads", b->st.threads, "kv_type",
                             model_kv_type_name(ep->kv_type), "kv_block", ep->kv_block, "kv_blocks", (json_int_t)ep->kv_blocks,
                             "kv_tokens", (json_int_t)(ep->kv_blocks * ep->kv_block), "kv_budget_tokens",
                             (json_int_t)(b->budget_blocks * ep->kv_block), "max_batch_tokens", ep->max_batch_tokens,
                             "prompt_len", o->prompt_len, "shared_prefix", o->shared_prefix, "gen_len", o->gen_len,
                             "prefix_cache", ep->prefix_cache, "levels", levels_json);
    char *s = json_dumps(root, JSON_COMPACT);
    if (s) printf("%s\n", s);
    free(s);
    json_decref(root);
}

int cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = bench_parse(argc, argv, &o);
    if (rc < 0) return 0;
    if (rc) return rc;
    struct bench_ctx b;
    memset(&b, 0, sizeof b);
    json_t *levels_json = json_array();
    rc = bench_open(&o, &b);
    if (!rc) rc = bench_make_prompts(&o, &b);
    if (!rc) {
        bench_print_setup(&o, &b);
        int r = bench_run_levels(&o, &b, levels_json);
        rc = r < 0 ? 1 : r;
        if (r >= 0 && o.json) bench_print_json(&o, &b, levels_json);
    }
    json_decref(levels_json);
    free(b.prompts);
    runtime_close(&b.st);
    return rc;
}
