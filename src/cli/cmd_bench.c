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

static int parse_i32(const char *flag, const char *s, long lo, long hi, int32_t *out)
{
    long v;
    if (engine_flags_parse_long("bench", flag, s, lo, hi, &v)) return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_levels(const char *s, struct bench_opts *o)
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
        if (parse_i32("--concurrency", tok, 1, 4096, &o->levels[o->n_levels])) return -1;
        o->n_levels++;
        if (!p[n]) break;
        p += n + 1;
    }
    return 0;
}

/* 0 ok, 2 usage error, -1 --help printed */
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        int r = engine_flags_parse(&o->rp, "bench", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        static const char *const with_value[] = {"-m", "--model", "--prompt-len", "--gen-len", "--shared-prefix",
                                                 "--requests", "--concurrency", "--reps", "--seed", NULL};
        int known = 0;
        for (const char *const *w = with_value; *w; w++) known |= !strcmp(a, *w);
        if (!known) {
            cli_error("bench", "unknown flag '%s' (see nightshift bench --help)", a);
            return 2;
        }
        if (i + 1 >= argc) {
            cli_error("bench", "%s needs a value", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--prompt-len")) bad = parse_i32(a, v, 1, 1 << 20, &o->prompt_len);
        else if (!strcmp(a, "--gen-len")) bad = parse_i32(a, v, 1, 1 << 20, &o->gen_len);
        else if (!strcmp(a, "--shared-prefix")) bad = parse_i32(a, v, 0, 1 << 20, &o->shared_prefix);
        else if (!strcmp(a, "--requests")) bad = parse_i32(a, v, 1, 1 << 20, &o->requests);
        else if (!strcmp(a, "--concurrency")) bad = parse_levels(v, o);
        else if (!strcmp(a, "--reps")) bad = parse_i32(a, v, 1, 1000, &o->reps);
        else if (!strcmp(a, "--seed")) bad = engine_flags_parse_u64("bench", a, v, &o->seed);
        if (bad) return 2;
    }
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

int cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = bench_parse(argc, argv, &o);
    if (rc < 0) return 0;
    if (rc) return rc;
    struct runtime st;
    struct err e;
    int32_t *prompts = NULL;
    struct bench_level *runs = NULL; /* (n_levels, reps) */
    json_t *levels_json = NULL;
    memset(&st, 0, sizeof st);

    /* the stack without an engine: each level makes its own */
    o.rp.model_path = o.model;
    if (runtime_open_model(&o.rp, &st, &e)) {
        cli_error("bench", "%s", e.msg);
        rc = 1;
        goto done;
    }
    const struct model_hparams *hp = &st.model->hp;
    int64_t n_prompt = (int64_t)o.shared_prefix + o.prompt_len;
    if (hp->n_ctx_train > 0 && n_prompt + o.gen_len > hp->n_ctx_train) {
        cli_error("bench", "--shared-prefix %d + --prompt-len %d + --gen-len %d = %lld tokens exceeds the model context of %d",
                  (int)o.shared_prefix, (int)o.prompt_len, (int)o.gen_len, (long long)(n_prompt + o.gen_len),
                  (int)hp->n_ctx_train);
        rc = 2;
        goto done;
    }
    if (runtime_open_backend(&st, &e)) {
        cli_error("bench", "%s", e.msg);
        rc = 1;
        goto done;
    }
    struct engine_params ep = st.ep; /* max_seqs: set by each level */

    /* memory budget -> pool size: not capped by max_seqs here (each level sets its own), but below */
    uint64_t per_token = model_kv_bytes_per_token(hp, ep.kv_type);
    char budget_desc[256];
    if (runtime_plan_kv(&st, o.rp.kv_memory, UINT64_MAX, &e)) {
        cli_error("bench", "%s", e.msg);
        rc = 1;
        goto done;
    }
    const struct runtime_budget *bu = &st.budget;
    if (bu->automatic)
        snprintf(budget_desc, sizeof budget_desc,
                 "auto = available %.0f MiB - weights %.0f MiB - scratch %.0f MiB - headroom %.0f MiB", mib(bu->available),
                 mib(bu->weights), mib(bu->scratch), mib(bu->headroom));
    else
        snprintf(budget_desc, sizeof budget_desc, "--kv-memory %llu bytes", (unsigned long long)bu->kv_bytes);
    int64_t budget_blocks = bu->kv_blocks;
    int64_t per_req_blocks = (n_prompt + o.gen_len - 1 + ep.kv_block - 1) / ep.kv_block;
    if (budget_blocks < per_req_blocks) {
        cli_error("bench", "%s holds %lld KV tokens (%s, %llu bytes per token), but one request needs %lld (%lld prompt + %d generated)",
                  budget_desc, (long long)budget_blocks * ep.kv_block, model_kv_type_name(ep.kv_type),
                  (unsigned long long)per_token, (long long)per_req_blocks * ep.kv_block, (long long)n_prompt, (int)o.gen_len);
        rc = 2;
        goto done;
    }
    int64_t useful = 0;
    int32_t max_requests = 0;
    for (int l = 0; l < o.n_levels; l++) {
        int32_t n = level_requests(&o, o.levels[l]);
        if (n > max_requests) max_requests = n;
    }
    useful = (int64_t)max_requests * per_req_blocks;
    ep.kv_blocks = budget_blocks < useful ? budget_blocks : useful;

    /* prompts: the shared prefix, then unique ids */
    prompts = malloc((size_t)max_requests * (size_t)n_prompt * sizeof *prompts);
    if (!prompts) {
        cli_error("bench", "out of memory for %d prompts of %lld tokens", (int)max_requests, (long long)n_prompt);
        rc = 1;
        goto done;
    }
    uint64_t rng = o.seed;
    int32_t n_vocab = hp->n_vocab;
    for (int64_t k = 0; k < o.shared_prefix; k++) prompts[k] = (int32_t)(rng_splitmix64(&rng) % (uint64_t)n_vocab);
    for (int32_t i = 0; i < max_requests; i++) {
        int32_t *p = prompts + (size_t)i * (size_t)n_prompt;
        if (i) memcpy(p, prompts, (size_t)o.shared_prefix * sizeof *p);
        for (int64_t k = o.shared_prefix; k < n_prompt; k++) p[k] = (int32_t)(rng_splitmix64(&rng) % (uint64_t)n_vocab);
    }

    FILE *info = o.json ? stderr : stdout;
    fprintf(info, "nightshift bench: %s (%d layers, n_embd %d, vocab %d), %s backend, %d threads\n", o.model, (int)hp->n_layer,
            (int)hp->n_embd, (int)n_vocab, st.backend_name, st.threads);
    fprintf(info, "KV pool: %lld blocks x %d = %lld tokens (%s, %.1f MiB); budget %s holds %lld tokens\n", (long long)ep.kv_blocks,
            (int)ep.kv_block, (long long)ep.kv_blocks * ep.kv_block, model_kv_type_name(ep.kv_type),
            mib((uint64_t)ep.kv_blocks * (uint64_t)ep.kv_block * per_token), budget_desc, (long long)budget_blocks * ep.kv_block);
    fprintf(info, "requests: %lld prompt tokens (%d shared) + %d generated, greedy, EOS ignored; max_batch_tokens %d%s\n",
            (long long)n_prompt, (int)o.shared_prefix, (int)o.gen_len, (int)ep.max_batch_tokens,
            ep.prefix_cache ? "" : ", prefix cache off");
    fflush(info);

    /* warm-up: one short request */
    {
        struct bench_level warm;
        int32_t wn = n_prompt < 8 ? (int32_t)n_prompt : 8;
        if (run_level(&st, &ep, 1, 1, prompts, wn, o.gen_len < 4 ? o.gen_len : 4, &warm, &e)) {
            cli_error("bench", "%s", e.msg);
            rc = 1;
            goto done;
        }
    }
    if (!o.json)
        printf("%5s %6s %12s %11s %12s %8s %10s %15s %10s %8s %8s%s\n", "conc", "reqs", "prompt tok/s", "gen tok/s",
               "total tok/s", "wall s", "decode t/s", "peak KV tokens", "peak RSS", "cached", "preempt",
               o.reps > 1 ? "  total range" : "");
    levels_json = json_array();
    runs = malloc((size_t)o.n_levels * (size_t)o.reps * sizeof *runs);
    if (!runs) {
        cli_error("bench", "out of memory");
        rc = 1;
        goto done;
    }
    /* rounds of all levels; a level is reported once its last run is in */
    for (int32_t r = 0; r < o.reps; r++) {
    for (int l = 0; l < o.n_levels; l++) {
        int32_t c = o.levels[l];
        struct bench_level *lr = runs + (size_t)l * (size_t)o.reps;
        if (run_level(&st, &ep, c, level_requests(&o, c), prompts, (int32_t)n_prompt, o.gen_len, &lr[r], &e)) {
            cli_error("bench", "concurrency %d: %s", (int)c, e.msg);
            rc = 1;
            goto done;
        }
        if (r + 1 < o.reps) continue;
        qsort(lr, (size_t)o.reps, sizeof *lr, cmp_rate);
        const struct bench_level lv = lr[(o.reps - 1) / 2];
        json_t *rates = json_array();
        for (int32_t k = 0; k < o.reps; k++) json_array_append_new(rates, json_real(level_rate(&lr[k])));
        double w = lv.wall > 0 ? lv.wall : 1e-9;
        double pr = (double)lv.prompt_tokens / w, gr = (double)lv.gen_tokens / w;
        int64_t peak_tokens = lv.peak_blocks * ep.kv_block;
        double dr = lv.t_decode > 0 ? (double)lv.decode_rows / lv.t_decode : 0;
        if (!o.json) {
            printf("%5d %6d %12.1f %11.1f %12.1f %8.2f %10.1f %8lld (%3.0f%%) %6.0f MiB %8lld %8lld", (int)c, (int)lv.requests, pr,
                   gr, pr + gr, lv.wall, dr, (long long)peak_tokens, 100.0 * (double)lv.peak_blocks / (double)ep.kv_blocks,
                   mib(lv.peak_rss), (long long)lv.prompt_cached, (long long)lv.preemptions);
            if (o.reps > 1) printf("  %.1f-%.1f", level_rate(&lr[0]), level_rate(&lr[o.reps - 1]));
            printf("\n");
            fflush(stdout);
        }
        json_array_append_new(
            levels_json,
            json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "concurrency", c,
                      "requests", lv.requests, "failed", lv.failed, "prompt_tok_s", pr, "gen_tok_s", gr, "total_tok_s", pr + gr,
                      "wall_s", lv.wall, "decode_tok_s", dr, "prompt_tokens", (json_int_t)lv.prompt_tokens, "prompt_tokens_computed",
                      (json_int_t)lv.prompt_computed, "prompt_tokens_cached", (json_int_t)lv.prompt_cached, "gen_tokens",
                      (json_int_t)lv.gen_tokens, "steps", (json_int_t)lv.steps, "preemptions", (json_int_t)lv.preemptions,
                      "peak_kv_tokens", (json_int_t)peak_tokens, "peak_rss_bytes", (json_int_t)lv.peak_rss, "forward_s",
                      lv.t_forward));
        json_object_set_new(json_array_get(levels_json, json_array_size(levels_json) - 1), "total_tok_s_runs", rates);
        for (int32_t k = 0; k < o.reps; k++)
            if (lr[k].failed) rc = 1;
    }
    }
    if (o.json) {
        json_t *root = json_pack("{s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:b, s:O}", "model", o.model,
                                 "backend", st.backend_name, "threads", st.threads,
                                 "kv_type", model_kv_type_name(ep.kv_type), "kv_block", ep.kv_block, "kv_blocks",
                                 (json_int_t)ep.kv_blocks, "kv_tokens", (json_int_t)(ep.kv_blocks * ep.kv_block),
                                 "kv_budget_tokens", (json_int_t)(budget_blocks * ep.kv_block), "max_batch_tokens",
                                 ep.max_batch_tokens, "prompt_len", o.prompt_len, "shared_prefix", o.shared_prefix,
                                 "gen_len", o.gen_len, "prefix_cache", ep.prefix_cache, "levels", levels_json);
        char *s = json_dumps(root, JSON_COMPACT);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(root);
    }
done:
    json_decref(levels_json);
    free(runs);
    free(prompts);
    runtime_close(&st);
    return rc;
}
