/* kv_quality — what a KV element type costs in quality, against an f32 KV cache.
 *
 *   bench/kv_quality.sh [MODEL] [N_GEN]      (builds this file against build/libnightshift.a)
 *
 * For each prompt of a fixed set:
 *  1. free-running greedy generation of N_GEN tokens through the engine with KV f32, f16 and q8_0:
 *     exact-match count and mean common-prefix length against f32 ("greedy agreement");
 *  2. teacher-forced: the f32 sequence (prompt + generated) is fed in one step with every row's logits
 *     wanted, for each KV type; max |logit - logit_f32| over all positions and the vocabulary, the same
 *     relative to the f32 logits' standard deviation, and top-1 agreement per position.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"

static const char *prompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    ",
    "The three laws of thermodynamics are",
    "Here is a recipe for a simple tomato soup:",
    "Q: What is the boiling point of water at sea level?\nA:",
    "In 1969, the Apollo 11 mission",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "To install the package, run the following command:",
    "Photosynthesis is the process by which",
    "Dear hiring manager, I am writing to apply for",
    "List of prime numbers: 2, 3, 5, 7, 11,",
    "The main differences between TCP and UDP are",
    "Write a haiku about autumn leaves:",
    "SELECT name, age FROM users WHERE",
    "The mitochondria is the powerhouse of the cell because",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])
#define MAX_TOK 512

struct seq {
    int32_t tok[MAX_TOK];
    int32_t n_prompt, n;
};

static const enum kv_type types[3] = {KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_Q8_0};

static int generate(const struct model *m, struct backend *b, const tok_vocab *v, enum kv_type t, struct seq *s,
                    int n_gen, struct err *e)
{
    struct engine_params p = engine_default_params();
    p.kv_type = t;
    p.kv_blocks = 4 * N_PROMPTS * ((MAX_TOK + 15) / 16);
    engine *eng;
    if (engine_init(m, b, v, &p, &eng, e)) return -1;
    for (int i = 0; i < N_PROMPTS; i++) {
        struct engine_request r = {.id = (uint64_t)i, .prompt = s[i].tok, .n_prompt = s[i].n_prompt,
                                   .max_tokens = n_gen, .sampling = sampler_default_params(), .ignore_eos = 1};
        if (engine_add(eng, &r, e)) goto fail;
    }
    while (engine_has_work(eng))
        if (engine_step(eng, e)) goto fail;
    struct engine_result res;
    while (engine_take(eng, &res)) {
        struct seq *q = &s[res.id];
        memcpy(q->tok + q->n_prompt, res.tokens, (size_t)res.n_tokens * sizeof(int32_t));
        q->n = q->n_prompt + res.n_tokens;
        engine_result_free(&res);
    }
    engine_free(eng);
    return 0;
fail:
    engine_free(eng);
    return -1;
}

/* logits (n, n_vocab) of every position of tokens[0..n) in one step */
static int forced(struct backend *b, enum kv_type t, const int32_t *tokens, int32_t n, int32_t n_vocab, float *logits,
                  struct err *e)
{
    int32_t nb = (n + 15) / 16;
    if (b->ops->kv_alloc(b->ctx, nb, 16, t, e)) return -1;
    int32_t table[64], pos[MAX_TOK], seq[MAX_TOK], rows[MAX_TOK];
    for (int32_t i = 0; i < nb; i++) table[i] = i;
    for (int32_t i = 0; i < n; i++) pos[i] = i, seq[i] = 0, rows[i] = i;
    struct step_seq ss = {.block_table = table, .n_blocks = nb};
    struct step_batch sb = {.n_rows = n, .tokens = tokens, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = &ss,
                            .n_logits = n, .logit_rows = rows};
    (void)n_vocab;
    return b->ops->forward(b->ctx, &sb, logits, e);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int n_gen = argc > 2 ? atoi(argv[2]) : 32;
    struct err e;
    gguf_file *f;
    struct model *m;
    tok_vocab *v;
    struct backend b;
    if (gguf_open(path, &f, &e) || model_load(f, &m, &e) || tok_load(f, &v, &e) || backend_cpu_init(&b, 0, &e) ||
        b.ops->load(b.ctx, m, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        return 1;
    }
    int32_t n_vocab = m->hp.n_vocab;
    static struct seq s[3][N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        int32_t *ids;
        size_t n;
        if (tok_encode(v, prompts[i], strlen(prompts[i]), tok_add_bos(v), 0, &ids, &n, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        for (int t = 0; t < 3; t++) {
            memcpy(s[t][i].tok, ids, n * sizeof *ids);
            s[t][i].n_prompt = (int32_t)n;
        }
        free(ids);
    }
    printf("model %s, %d prompts, %d greedy tokens each (EOS ignored)\n", path, N_PROMPTS, n_gen);
    int avail[3];
    for (int t = 0; t < 3; t++) {
        avail[t] = generate(m, &b, v, types[t], s[t], n_gen, &e) == 0;
        if (!avail[t]) printf("  kv %-5s: not available: %s\n", model_kv_type_name(types[t]), e.msg);
    }
    if (!avail[0]) return 1;
    float *ref = malloc((size_t)MAX_TOK * (size_t)n_vocab * sizeof(float));
    float *got = malloc((size_t)MAX_TOK * (size_t)n_vocab * sizeof(float));
    const int pairs[3][2] = {{1, 0}, {2, 0}, {2, 1}}; /* (type, reference type) */
    for (int pi = 0; pi < 3; pi++) {
        int t = pairs[pi][0], r0 = pairs[pi][1];
        if (!avail[t] || !avail[r0]) continue;
        int exact = 0;
        double prefix = 0;
        double max_err = 0, max_rel = 0, sum_err = 0;
        int64_t n_pos = 0, top1 = 0, n_vals = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            const struct seq *a = &s[r0][i], *q = &s[t][i];
            int32_t k = a->n_prompt;
            while (k < a->n && a->tok[k] == q->tok[k]) k++;
            prefix += k - a->n_prompt;
            exact += k == a->n;
            /* teacher-forced on the f32 sequence, so every pair sees the same tokens */
            const struct seq *f = &s[0][i];
            if (forced(&b, types[r0], f->tok, f->n, n_vocab, ref, &e) ||
                forced(&b, types[t], f->tok, f->n, n_vocab, got, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            for (int32_t p = 0; p < f->n; p++) {
                const float *r = ref + (size_t)p * n_vocab, *g = got + (size_t)p * n_vocab;
                double mean = 0, var = 0;
                for (int32_t j = 0; j < n_vocab; j++) mean += r[j];
                mean /= n_vocab;
                for (int32_t j = 0; j < n_vocab; j++) var += (r[j] - mean) * (r[j] - mean);
                double sd = sqrt(var / n_vocab);
                double row_max = 0;
                for (int32_t j = 0; j < n_vocab; j++) {
                    double d = fabs((double)g[j] - (double)r[j]);
                    if (d > row_max) row_max = d;
                    sum_err += d;
                }
                n_vals += n_vocab;
                if (row_max > max_err) max_err = row_max;
                if (sd > 0 && row_max / sd > max_rel) max_rel = row_max / sd;
                top1 += argmax(r, n_vocab) == argmax(g, n_vocab);
                n_pos++;
            }
        }
        printf("  kv %-5s vs %-4s: greedy exact %2d/%d, mean common prefix %5.1f/%d; teacher-forced (%lld positions): "
               "max |dlogit| %.3f (%.3f sd), mean |dlogit| %.4f, top-1 agree %.1f%%\n",
               model_kv_type_name(types[t]), model_kv_type_name(types[r0]), exact, N_PROMPTS, prefix / N_PROMPTS, n_gen,
               (long long)n_pos, max_err, max_rel, sum_err / (double)n_vals, 100.0 * (double)top1 / (double)n_pos);
    }
    printf("  KV bytes per token: f32 %llu, f16 %llu, q8_0 %llu\n",
           (unsigned long long)model_kv_bytes_per_token(&m->hp, KV_TYPE_F32),
           (unsigned long long)model_kv_bytes_per_token(&m->hp, KV_TYPE_F16),
           (unsigned long long)model_kv_bytes_per_token(&m->hp, KV_TYPE_Q8_0));
    free(ref);
    free(got);
    backend_free(&b);
    tok_free(v);
    model_free(m);
    gguf_close(f);
    return 0;
}
