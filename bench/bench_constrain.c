/* bench/bench_constrain.c — the cost of structured output (issue 14).
 *
 *   bench_constrain MODEL [-n REQUESTS] [-c CONCURRENCY] [-r ROUNDS] [-t THREADS]
 *
 * 1. Compile time of a typical extraction schema over the model's vocabulary: the vocabulary index (once
 *    per engine) and the schema (once per distinct schema), medians of 5.
 * 2. Throughput at concurrency C: N extraction requests (ChatML prompts, half greedy, half sampled) with the
 *    schema on every request, against the same prompts unconstrained with max_tokens set to each request's
 *    constrained output length and ignore_eos (the same tokens per request, so the same batch shapes).
 *    After one warm-up run, rounds alternate the two; generated tokens / wall second, medians. Also the
 *    seconds spent masking and advancing constraint states on the engine's thread next to the forward
 *    seconds, and the mask cache's hits and misses (each run is a new engine: its caches start cold).
 *
 * Built by `make build/bench/bench_constrain` against build/libnightshift.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

static const char SCHEMA[] =
    "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"name\",\"age\",\"city\",\"occupation\"],"
    "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},\"age\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":120},\"city\":{\"type\":\"string\",\"maxLength\":30},\"occupation\":{\"type\":\"string\","
    "\"maxLength\":30},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"married\":{\"type\":\"boolean\"}}}";

struct bench {
    gguf_file *f;
    struct model *m;
    tok_vocab *v;
    struct backend be;
    int32_t **prompts, *n_prompt, *n_gen;
    int n;
};

/* CPU seconds of the whole process (all threads, the mask worker included): the load-independent view. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int make_prompts(struct bench *B, struct err *e)
{
    static const char *const first[] = {"Anna", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo"};
    static const char *const last[] = {"Smith", "Garcia", "Muller", "Rossi", "Nguyen", "Dubois", "Silva", "Tanaka"};
    static const char *const city[] = {"Paris", "Berlin", "Lagos", "Osaka", "Lima", "Toronto", "Madrid", "Oslo"};
    static const char *const job[] = {"teacher", "nurse", "engineer", "baker", "pilot", "lawyer", "farmer", "chef"};
    B->prompts = calloc((size_t)B->n, sizeof *B->prompts);
    B->n_prompt = calloc((size_t)B->n, sizeof *B->n_prompt);
    B->n_gen = calloc((size_t)B->n, sizeof *B->n_gen);
    if (!B->prompts || !B->n_prompt || !B->n_gen) return err_set(e, "out of memory");
    for (int i = 0; i < B->n; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "<|im_start|>system\nExtract the person as JSON.<|im_end|>\n<|im_start|>user\n%s %s is a %d-year-old "
                 "%s who lives in %s.<|im_end|>\n<|im_start|>assistant\n",
                 first[i % 8], last[(i / 8) % 8], 18 + (i * 7) % 70, job[(i / 3) % 8], city[(i / 5) % 8]);
        size_t n;
        if (tok_encode(B->v, text, strlen(text), 0, 1, &B->prompts[i], &n, e)) return -1;
        B->n_prompt[i] = (int32_t)n;
    }
    return 0;
}

/* One run of every request at concurrency c; constrained: with the schema (and n_gen recorded), else with
 * max_tokens n_gen and ignore_eos. */
static int run(struct bench *B, const struct constraint_spec *schema, int c, double *tok_s, double *tok_cpu_s,
               struct engine_stats *st, struct err *e)
{
    struct engine_params p = engine_default_params();
    p.kv_blocks = 4096;
    p.max_seqs = c;
    engine *eng;
    if (engine_init(B->m, &B->be, B->v, &p, &eng, e)) return -1;
    double t0 = clock_now(), c0 = cpu_seconds();
    for (int i = 0; i < B->n; i++) {
        struct engine_request q = {.id = (uint64_t)i, .prompt = B->prompts[i], .n_prompt = B->n_prompt[i],
                                   .max_tokens = schema ? 400 : B->n_gen[i], .sampling = sampler_default_params(),
                                   .ignore_eos = !schema, .constraint = schema};
        if (i % 2) q.sampling.temperature = 0.7f, q.sampling.seed = (uint64_t)i;
        if (engine_add(eng, &q, e)) goto fail;
    }
    int64_t gen = 0;
    int ok = 0;
    while (engine_has_work(eng)) {
        if (engine_step(eng, e)) goto fail;
        struct engine_result r;
        while (engine_take(eng, &r)) {
            if (schema) B->n_gen[r.id] = r.n_tokens;
            gen += r.n_tokens;
            ok += r.finish == ENGINE_FINISH_STOP || !schema;
            engine_result_free(&r);
        }
    }
    *tok_s = (double)gen / (clock_now() - t0);
    *tok_cpu_s = (double)gen / (cpu_seconds() - c0);
    engine_get_stats(eng, st);
    if (schema) printf("   (%d of %d constrained outputs complete)\n", ok, B->n);
    engine_free(eng);
    return 0;
fail:
    engine_free(eng);
    return -1;
}

static void bench_compile(struct bench *B, const struct constraint_spec *schema)
{
    double tv[5], tc[5];
    struct err e;
    for (int k = 0; k < 5; k++) {
        constraint_cache *cc;
        constraint *c;
        double t0 = clock_now();
        if (constraint_cache_init(B->v, tok_n_vocab(B->v), 0, &cc, &e)) return;
        double t1 = clock_now();
        if (constraint_acquire(cc, schema, &c, &e)) return;
        tc[k] = (clock_now() - t1) * 1e3;
        tv[k] = (t1 - t0) * 1e3;
        constraint_release(cc, c);
        constraint_cache_free(cc);
    }
    printf("compile (%d-token vocabulary): vocabulary index %.1f ms, schema %.2f ms (medians of 5)\n",
           tok_n_vocab(B->v), median(tv, 5), median(tc, 5));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_constrain MODEL [-n REQUESTS] [-c CONCURRENCY] [-r ROUNDS] [-t THREADS]\n");
        return 2;
    }
    struct bench B = {0};
    int c = 64, rounds = 3, threads = 0;
    B.n = 128;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) B.n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) c = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 16 || B.n < 1) return 2;
    struct err e = {{0}};
    struct constraint_spec schema = {0};
    if (gguf_open(argv[1], &B.f, &e) || model_load(B.f, &B.m, &e) || tok_load(B.f, &B.v, &e) ||
        backend_cpu_init(&B.be, threads, &e) || B.be.ops->load(B.be.ctx, B.m, &e) ||
        constraint_spec_set(&schema, CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &e) || make_prompts(&B, &e)) {
        fprintf(stderr, "bench_constrain: %s\n", e.msg);
        return 1;
    }
    bench_compile(&B, &schema);
    double con[16], unc[16], ccpu[16], ucpu[16], warm, wcpu;
    struct engine_stats sw;
    if (run(&B, &schema, c, &warm, &wcpu, &sw, &e)) { /* warm-up (page cache, allocator); sets each n_gen */
        fprintf(stderr, "bench_constrain: %s\n", e.msg);
        return 1;
    }
    for (int r = 0; r < rounds; r++) { /* ABBA: odd rounds run the unconstrained one first */
        struct engine_stats sc, su;
        int rc = r % 2
                     ? run(&B, NULL, c, &unc[r], &ucpu[r], &su, &e) || run(&B, &schema, c, &con[r], &ccpu[r], &sc, &e)
                     : run(&B, &schema, c, &con[r], &ccpu[r], &sc, &e) || run(&B, NULL, c, &unc[r], &ucpu[r], &su, &e);
        if (rc) {
            fprintf(stderr, "bench_constrain: %s\n", e.msg);
            return 1;
        }
        printf(
            "round %d: constrained %.1f tok/s, %.1f tok/cpu-s (forward %.2f s, constraint %.3f s, masks %lld "
            "computed / %lld cached); unconstrained %.1f tok/s, %.1f tok/cpu-s (forward %.2f s): %.1f%%, cpu %.1f%%\n",
            r + 1, con[r], ccpu[r], sc.t_forward, sc.t_constrain, (long long)sc.constrain_masks,
            (long long)sc.constrain_mask_hits, unc[r], ucpu[r], su.t_forward, 100 * con[r] / unc[r],
            100 * ccpu[r] / ucpu[r]);
        fflush(stdout);
    }
    double mc = median(con, rounds), mu = median(unc, rounds), mcc = median(ccpu, rounds), muc = median(ucpu, rounds);
    printf("concurrency %d, %d requests (medians of %d): constrained %.1f tok/s, %.1f tok/cpu-s; unconstrained %.1f "
           "tok/s, %.1f tok/cpu-s: wall %.1f%%, cpu %.1f%%\n",
           c, B.n, rounds, mc, mcc, mu, muc, 100 * mc / mu, 100 * mcc / muc);
    return 0;
}
