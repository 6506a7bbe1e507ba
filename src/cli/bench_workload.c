/* bench_workload — see bench_workload.h.
 *
 * Copy passages are sentences "<subject> <verb> <object> <when/where>." drawn from the small word lists
 * below with the counter-based RNG (util/rng), so a passage reads as plain English the model can repeat,
 * and no two requests share one (no prefix-cache hits beyond the instruction).
 */
#include "cli/bench_workload.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

static const char *const subjects[] = {
    "the old farmer", "a young doctor", "my neighbour", "the small company", "our team", "the city council",
    "a tired student", "the museum guide", "her brother", "the night nurse", "two engineers", "the baker",
};
static const char *const verbs[] = {
    "repaired", "painted", "sold", "described", "delivered", "planned", "visited", "measured", "cleaned",
    "ordered", "photographed", "carried",
};
static const char *const objects[] = {
    "the wooden bridge", "three blue boxes", "a long letter", "the north garden", "twelve new chairs",
    "the broken clock", "an old map", "the spring festival", "the kitchen window", "a heavy suitcase",
    "the village library", "seven glass bottles",
};
static const char *const tails[] = {
    "before the rain started", "on Tuesday morning", "near the river", "with great care", "for the first time",
    "after a long delay", "in the main hall", "without any help", "late in the evening", "during the storm",
    "next to the station", "at the end of the week",
};

#define PICK(list, r) list[(r) % (sizeof list / sizeof list[0])]

int bench_workload_parse(const char *name, enum bench_workload_kind *out)
{
    if (!strcmp(name, "random")) *out = BENCH_WORKLOAD_RANDOM;
    else if (!strcmp(name, "copy")) *out = BENCH_WORKLOAD_COPY;
    else return -1;
    return 0;
}

const char *bench_workload_name(enum bench_workload_kind k)
{
    return k == BENCH_WORKLOAD_COPY ? "copy" : "random";
}

void bench_workload_free(struct bench_workload *w)
{
    free(w->ids);
    free(w->len);
    memset(w, 0, sizeof *w);
}

static int workload_alloc(struct bench_workload *w, enum bench_workload_kind kind, int32_t n, int32_t stride,
                          struct err *e)
{
    memset(w, 0, sizeof *w);
    w->kind = kind;
    w->n = n;
    w->stride = stride;
    w->ids = calloc((size_t)n * (size_t)stride, sizeof *w->ids); /* zero past each prompt */
    w->len = calloc((size_t)n, sizeof *w->len);
    if (!w->ids || !w->len) {
        bench_workload_free(w);
        return err_set(e, "out of memory for %d prompts of %d tokens", (int)n, (int)stride);
    }
    return 0;
}

int bench_workload_random(int32_t n, int32_t n_vocab, int32_t shared_prefix, int32_t prompt_len, uint64_t seed,
                          struct bench_workload *out, struct err *e)
{
    int32_t len = shared_prefix + prompt_len;
    if (n < 1 || n_vocab < 1 || len < 1)
        return err_set(e, "random workload: %d prompts of %d tokens", (int)n, (int)len);
    if (workload_alloc(out, BENCH_WORKLOAD_RANDOM, n, len, e)) return -1;
    uint64_t rng = seed;
    for (int32_t k = 0; k < shared_prefix; k++) out->ids[k] = (int32_t)(rng_splitmix64(&rng) % (uint64_t)n_vocab);
    for (int32_t i = 0; i < n; i++) {
        int32_t *p = out->ids + (size_t)i * (size_t)len;
        if (i) memcpy(p, out->ids, (size_t)shared_prefix * sizeof *p);
        for (int32_t k = shared_prefix; k < len; k++) p[k] = (int32_t)(rng_splitmix64(&rng) % (uint64_t)n_vocab);
        out->len[i] = len;
    }
    out->total = (int64_t)n * len;
    out->ignore_eos = 1;
    return 0;
}

/* Swaps two neighbouring letters inside one word of at least 5 letters of s (a typo), if it has one. */
static void add_typo(char *s, uint64_t r)
{
    size_t n = strlen(s), starts[64];
    int n_words = 0;
    for (size_t i = 0; i < n && n_words < 64; i++) {
        if (!isalpha((unsigned char)s[i]) || (i && isalpha((unsigned char)s[i - 1]))) continue;
        size_t j = i;
        while (j < n && isalpha((unsigned char)s[j])) j++;
        if (j - i >= 5) starts[n_words++] = i;
    }
    if (!n_words) return;
    char *w = s + starts[r % (uint64_t)n_words];
    size_t wl = 0;
    while (isalpha((unsigned char)w[wl])) wl++;
    size_t k = 1 + (r >> 16) % (wl - 3); /* inner letters k, k + 1 */
    char c = w[k];
    w[k] = w[k + 1];
    w[k + 1] = c;
}

/* Appends sentences to text until their tokens reach about `tokens`; returns the text's length or -1. */
static int make_passage(const tok_vocab *v, int32_t tokens, int typos, uint64_t *rng, char *text, size_t cap)
{
    size_t len = 0;
    int32_t have = 0;
    while (have < tokens) {
        uint64_t r = rng_splitmix64(rng);
        char s[256];
        int n = snprintf(s, sizeof s, "%s%s %s %s %s.", len ? " " : "", PICK(subjects, r), PICK(verbs, r >> 8),
                         PICK(objects, r >> 16), PICK(tails, r >> 24));
        s[len ? 1 : 0] = (char)toupper((unsigned char)s[len ? 1 : 0]);
        if (typos && (r >> 32) % 2) add_typo(s, r >> 33);
        if (n < 0 || len + (size_t)n + 1 > cap) return -1;
        int32_t *ids;
        size_t n_ids;
        struct err te;
        if (tok_encode(v, s, (size_t)n, 0, 0, &ids, &n_ids, &te)) return -1;
        free(ids);
        memcpy(text + len, s, (size_t)n + 1);
        len += (size_t)n;
        have += (int32_t)n_ids;
    }
    return (int)len;
}

/* The prompt of copy request i: instruction + passage, through the chat template; tokenized into *ids. */
static int copy_prompt(const tok_vocab *v, enum chat_family fam, int32_t i, int32_t passage_tokens, uint64_t *rng,
                       int32_t **ids, size_t *n_ids, struct err *e)
{
    static const char *const tasks[2] = {
        "Repeat the following text exactly, with nothing before or after it.",
        "Fix the spelling mistakes in the following text. Reply with the corrected text only.",
    };
    size_t cap = (size_t)passage_tokens * 16 + 1024;
    char *passage = malloc(cap), *user = malloc(cap + 256), *text = NULL;
    int rc = -1;
    if (!passage || !user) {
        err_set(e, "out of memory");
        goto done;
    }
    if (make_passage(v, passage_tokens, i % 2, rng, passage, cap) < 0) {
        err_set(e, "copy workload: cannot make a passage of %d tokens", (int)passage_tokens);
        goto done;
    }
    snprintf(user, cap + 256, "%s\n\n%s", tasks[i % 2], passage);
    int32_t bos = tok_bos(v), eos = tok_eos(v);
    const char *bt = bos >= 0 && tok_piece(v, bos) ? tok_piece(v, bos) : "";
    const char *et = eos >= 0 && tok_piece(v, eos) ? tok_piece(v, eos) : "";
    struct chat_msg msg = {"user", user};
    if (fam != CHAT_NONE) {
        if (chat_render(fam, &msg, 1, bt, et, &text, e)) goto done;
    } else {
        text = malloc(strlen(user) + 3);
        if (!text) {
            err_set(e, "out of memory");
            goto done;
        }
        sprintf(text, "%s\n\n", user);
    }
    size_t bl = strlen(bt);
    int add_bos = tok_add_bos(v) && bos >= 0 && !(bl && !strncmp(text, bt, bl));
    rc = tok_encode(v, text, strlen(text), add_bos, 1, ids, n_ids, e);
done:
    free(passage);
    free(user);
    free(text);
    return rc;
}

int bench_workload_copy(enum chat_family fam, const tok_vocab *v, int32_t n, int32_t passage_tokens, uint64_t seed,
                        struct bench_workload *out, struct err *e)
{
    if (n < 1) return err_set(e, "copy workload: %d prompts", (int)n);
    if (passage_tokens < 8) passage_tokens = 8;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = -1;
    if (!ids || !lens) {
        err_set(e, "out of memory");
        goto done;
    }
    uint64_t rng = seed, stride = 1;
    for (int32_t i = 0; i < n; i++) {
        if (copy_prompt(v, fam, i, passage_tokens, &rng, &ids[i], &lens[i], e)) goto done;
        if (lens[i] > stride) stride = lens[i];
    }
    if (stride > INT32_MAX / 2 || workload_alloc(out, BENCH_WORKLOAD_COPY, n, (int32_t)stride, e)) goto done;
    for (int32_t i = 0; i < n; i++) {
        memcpy(out->ids + (size_t)i * stride, ids[i], lens[i] * sizeof *ids[i]);
        out->len[i] = (int32_t)lens[i];
        out->total += (int64_t)lens[i];
    }
    rc = 0;
done:
    for (int32_t i = 0; ids && i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    return rc;
}
