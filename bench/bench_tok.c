/* bench_tok — tokenizer throughput: encodes ~1 MB of generated English text with a vocab, 5 times, and
 * prints the median MB/s. Build and run with bench/bench_tok.sh.
 *
 *   bench_tok VOCAB.gguf [MB]
 *
 * The text is deterministic: sentences assembled from word lists by a fixed LCG (no external data). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

static const char *const subj[] = {"The old sailor", "A curious child", "My neighbour's dog", "The committee",
                                   "Every engineer", "She", "The river", "Our small village", "Nobody", "The teacher"};
static const char *const verb[] = {"walked slowly toward", "couldn't believe", "wrote a long letter about",
                                   "had never seen", "quietly remembered", "argued about", "painted", "was afraid of",
                                   "laughed at", "carefully measured"};
static const char *const obj[] = {"the lighthouse on the hill", "1,250 apples", "a strange blue bird",
                                  "the results of the 2023 survey", "her grandmother's recipes", "the broken clock",
                                  "what everyone else had said", "the northern mountains", "it", "the stars"};
static const char *const tail[] = {".", "!", "?", ", and then it rained.", " before dinner.",
                                   " -- or so they say.", "; nobody knew why.", " (again).", " in 1987.", "."};

static char *make_text(size_t want, size_t *len)
{
    char *buf = malloc(want + 256);
    size_t n = 0;
    unsigned long long x = 12345;
    while (buf && n < want) {
        unsigned r[5];
        for (int k = 0; k < 5; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[k] = (unsigned)(x >> 33) % 10;
        }
        n += (size_t)sprintf(buf + n, "%s %s %s%s%s", subj[r[0]], verb[r[1]], obj[r[2]], tail[r[3]],
                             r[4] == 0 ? "\n\n" : " ");
    }
    *len = n;
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tok VOCAB.gguf [MB]\n");
        return 2;
    }
    double mb = argc > 2 ? atof(argv[2]) : 1.0;
    struct err e = {{0}};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    double t0 = clock_now();
    if (gguf_open(argv[1], &f, &e) || tok_load(f, &v, &e)) {
        fprintf(stderr, "bench_tok: %s\n", e.msg);
        return 1;
    }
    double t_load = clock_now() - t0;
    size_t len = 0;
    char *text = make_text((size_t)(mb * 1e6), &len);
    double rates[5];
    size_t n_ids = 0;
    for (int rep = 0; rep < 5; rep++) {
        int32_t *ids = NULL;
        double t = clock_now();
        if (tok_encode(v, text, len, 0, 0, &ids, &n_ids, &e)) {
            fprintf(stderr, "bench_tok: %s\n", e.msg);
            return 1;
        }
        rates[rep] = (double)len / 1e6 / (clock_now() - t);
        free(ids);
    }
    qsort(rates, 5, sizeof rates[0], cmp_double);
    printf(
        "%s: %zu bytes -> %zu tokens (%.2f bytes/token), load %.3f s, encode median %.2f MB/s (min %.2f, max %.2f)\n",
        argv[1], len, n_ids, (double)len / (double)n_ids, t_load, rates[2], rates[0], rates[4]);
    free(text);
    tok_free(v);
    gguf_close(f);
    return 0;
}
