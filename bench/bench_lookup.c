/* bench/bench_lookup.c — the host's cost of prompt lookup as the engine pays it at high concurrency: S
 * sequences, each a new index over P prompt tokens, then G steps in which every sequence appends one token,
 * brings its index up to date and proposes a draft of up to 8 tokens (what `--lookup-always` does each step).
 * Tokens are random ids below V (a small V repeats n-grams often, as a tiny model's vocabulary does). With
 * -k K a sequence proposes only every K-th step (staggered), indexing the K tokens since at once, as probes
 * do while the draft rule holds drafts back. Between steps, -e MB of other memory is written (a CPU
 * forward's traffic through the caches; 0: a GPU host's).
 * Prints nanoseconds per sequence-step (update + propose) and per prompt token indexed, median of -n rounds.
 *
 *   make build/bench/bench_lookup &&
 *   build/bench/bench_lookup [-s 64] [-p 128] [-g 128] [-v 512] [-k 1] [-e 0] [-n 5]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/lookup.h"
#include "util/clock.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 88172645463325252ull;
static int32_t next_token(int32_t v)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int32_t)(rng % (uint64_t)v);
}

int main(int argc, char **argv)
{
    int32_t s = 64, p = 128, g = 128, v = 512, every = 1, reps = 5;
    double evict_mb = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i];
        double x = atof(argv[i + 1]);
        if (!strcmp(a, "-s")) s = (int32_t)x;
        else if (!strcmp(a, "-p")) p = (int32_t)x;
        else if (!strcmp(a, "-g")) g = (int32_t)x;
        else if (!strcmp(a, "-v")) v = (int32_t)x;
        else if (!strcmp(a, "-k")) every = (int32_t)x;
        else if (!strcmp(a, "-e")) evict_mb = x;
        else if (!strcmp(a, "-n")) reps = (int32_t)x;
        else {
            fprintf(stderr, "usage: bench_lookup [-s SEQS] [-p PROMPT] [-g GEN] [-v VOCAB] [-k EVERY] [-e EVICT_MB]"
                            " [-n REPS]\n");
            return 2;
        }
    }
    if (s < 1 || p < 4 || g < 1 || v < 2 || every < 1 || reps < 1) {
        fprintf(stderr, "bench_lookup: bad sizes\n");
        return 2;
    }
    const size_t n_tok = (size_t)(p + g + 8), evict = (size_t)(evict_mb * 1048576.0);
    int32_t *tokens = malloc((size_t)s * n_tok * sizeof *tokens);
    char *other = evict ? malloc(evict) : NULL;
    lookup **ix = calloc((size_t)s, sizeof *ix);
    double *t_step = malloc((size_t)reps * sizeof *t_step), *t_prompt = malloc((size_t)reps * sizeof *t_prompt);
    if (!tokens || (evict && !other) || !ix || !t_step || !t_prompt) return 1;
    int32_t draft[8];
    long proposed = 0;
    for (int r = 0; r < reps; r++) {
        for (int32_t k = 0; k < s; k++)
            for (size_t i = 0; i < n_tok; i++) tokens[(size_t)k * n_tok + i] = next_token(v);
        double t0 = clock_now();
        for (int32_t k = 0; k < s; k++)
            if (!(ix[k] = lookup_new()) || lookup_update(ix[k], tokens + (size_t)k * n_tok, p)) return 1;
        t_prompt[r] = clock_now() - t0;
        double t = 0;
        for (int32_t step = 0; step < g; step++) {
            if (other) memset(other, step, evict);
            t0 = clock_now();
            for (int32_t k = 0; k < s; k++) {
                if ((step + k) % every) continue;
                const int32_t *tk = tokens + (size_t)k * n_tok;
                if (lookup_update(ix[k], tk, p + step + 1)) return 1;
                proposed += lookup_propose(ix[k], tk, p + step + 1, 8, draft, NULL);
            }
            t += clock_now() - t0;
        }
        t_step[r] = t;
        for (int32_t k = 0; k < s; k++) lookup_free(ix[k]);
    }
    qsort(t_step, (size_t)reps, sizeof *t_step, cmp_double);
    qsort(t_prompt, (size_t)reps, sizeof *t_prompt, cmp_double);
    printf("%d sequences, %d prompt + %d steps, vocab %d, proposing every %d, %.1f MiB written between steps: "
           "%.1f ns a sequence-step (update + propose), %.1f ns a prompt token; %.2f tokens proposed a "
           "sequence-step\n",
           (int)s, (int)p, (int)g, (int)v, (int)every, evict_mb, 1e9 * t_step[reps / 2] / ((double)s * g),
           1e9 * t_prompt[reps / 2] / ((double)s * p), (double)proposed / ((double)reps * s * g));
    free(tokens);
    free(other);
    free(ix);
    free(t_step);
    free(t_prompt);
    return 0;
}
