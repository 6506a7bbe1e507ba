/* sampler — per-request token sampling; see sampler.h for the order of operations.
 *
 * RNG (documented, fixed): the 64-bit seed is expanded by splitmix64 into the 256-bit state of xoshiro256**
 * (four successive splitmix64 outputs). One uniform float in [0, 1) is drawn per non-greedy sample as
 * (next() >> 40) * 2^-24, i.e. from the 24 high bits. Greedy sampling draws nothing. So a request's tokens
 * are a function of (logits, params, seed, accepted tokens) only.
 *
 * Invariant: window holds the last min(n_seen, repeat_last_n) accepted tokens (prompt and generated) in a
 * ring; counts is an open-addressing table (linear probing, load <= 1/2) of generated token -> count > 0.
 * sampler_check() verifies both (tests call it).
 *
 * Complexity per sample: O(n_vocab) for bias/penalties/softmax; top-k adds O(n_vocab log k); top-p without
 * top-k sorts all candidates, O(n_vocab log n_vocab). Memory: the candidate scratch is n_vocab * 8 bytes,
 * allocated at init only when temperature > 0.
 */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

struct sampler_cand {
    int32_t id;
    float logit; /* then the probability (unnormalized) */
};

struct sampler_count {
    int32_t token; /* -1: empty */
    int32_t count;
};

struct sampler {
    struct sampler_params p;
    struct logit_bias *bias; /* (p.n_logit_bias) owned copy */
    int32_t n_vocab;
    struct rng rng;

    int32_t *window;  /* (win_cap) ring of the last accepted tokens */
    int32_t *win_tmp; /* (win_cap) scratch for deduplication */
    int32_t win_cap, win_n, win_head;

    struct sampler_count *counts; /* (counts_cap), a power of two */
    uint32_t counts_cap, counts_n;

    struct sampler_cand *cand; /* (n_vocab), NULL when greedy */
};

struct sampler_params sampler_default_params(void)
{
    struct sampler_params p = {0};
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = 0;
    return p;
}

/* ---------------------------------------------------------------- RNG */

static float sampler_uniform(struct rng *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* ---------------------------------------------------------------- init */

int sampler_init(const struct sampler_params *p, int32_t n_vocab, sampler **out, struct err *e)
{
    *out = NULL;
    if (n_vocab < 1) return err_set(e, "sampler: vocabulary size %d", (int)n_vocab);
    if (!isfinite(p->temperature)) return err_set(e, "sampler: temperature must be finite");
    if (!(p->top_p > 0.0f)) return err_set(e, "sampler: top_p must be > 0 (got %g)", (double)p->top_p);
    if (isnan(p->min_p) || p->min_p > 1.0f)
        return err_set(e, "sampler: min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return err_set(e, "sampler: repeat_penalty must be > 0 (got %g)", (double)p->repeat_penalty);
    if (p->repeat_last_n < 0 || p->repeat_last_n > (1 << 24))
        return err_set(e, "sampler: repeat_last_n must be in [0, 16777216] (got %d)", (int)p->repeat_last_n);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return err_set(e, "sampler: presence/frequency penalties must be finite");
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return err_set(e, "sampler: bad logit bias list");
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            return err_set(e, "sampler: logit bias token %d is outside the vocabulary (%d)",
                           (int)p->logit_bias[i].token, (int)n_vocab);
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY)
            return err_set(e, "sampler: logit bias of token %d must be a number < +inf",
                           (int)p->logit_bias[i].token);
    }

    sampler *s = calloc(1, sizeof *s);
    if (!s) return err_set(e, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) goto oom;
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->win_cap = p->repeat_penalty != 1.0f ? p->repeat_last_n : 0;
    if (s->win_cap > 0) {
        s->window = malloc((size_t)s->win_cap * sizeof *s->window);
        s->win_tmp = malloc((size_t)s->win_cap * sizeof *s->win_tmp);
        if (!s->window || !s->win_tmp) goto oom;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        s->counts_cap = 64;
        s->counts = malloc(s->counts_cap * sizeof *s->counts);
        if (!s->counts) goto oom;
        for (uint32_t i = 0; i < s->counts_cap; i++) s->counts[i].token = -1;
    }
    if (p->temperature > 0.0f) {
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
        if (!s->cand) goto oom;
    }
    rng_seed(&s->rng, p->seed);
    *out = s;
    return 0;
oom:
    sampler_free(s);
    return err_set(e, "sampler: out of memory");
}

void sampler_free(sampler *s)
{
    if (!s) return;
    free(s->bias);
    free(s->window);
    free(s->win_tmp);
    free(s->counts);
    free(s->cand);
    free(s);
}

/* ---------------------------------------------------------------- history */

static uint32_t sampler_hash(int32_t token)
{
    return (uint32_t)token * 2654435761u;
}

static int sampler_counts_grow(sampler *s)
{
    uint32_t cap = s->counts_cap * 2;
    struct sampler_count *c = malloc(cap * sizeof *c);
    if (!c) return -1;
    for (uint32_t i = 0; i < cap; i++) c[i].token = -1;
    for (uint32_t i = 0; i < s->counts_cap; i++) {
        if (s->counts[i].token < 0) continue;
        uint32_t h = sampler_hash(s->counts[i].token) & (cap - 1);
        while (c[h].token >= 0) h = (h + 1) & (cap - 1);
        c[h] = s->counts[i];
    }
    free(s->counts);
    s->counts = c;
    s->counts_cap = cap;
    return 0;
}

void sampler_accept(sampler *s, int32_t token, int is_generated)
{
    if (token < 0 || token >= s->n_vocab) return;
    if (s->win_cap > 0) {
        s->window[s->win_head] = token;
        s->win_head = (s->win_head + 1) % s->win_cap;
        if (s->win_n < s->win_cap) s->win_n++;
    }
    if (is_generated && s->counts) {
        /* On out-of-memory the table stays at load 1/2 and the count is dropped: penalties weaken, nothing
         * breaks. (A 64-entry table never needs to grow for fewer than 32 distinct tokens.) */
        if ((s->counts_n + 1) * 2 > s->counts_cap && sampler_counts_grow(s)) return;
        uint32_t h = sampler_hash(token) & (s->counts_cap - 1);
        while (s->counts[h].token >= 0 && s->counts[h].token != token) h = (h + 1) & (s->counts_cap - 1);
        if (s->counts[h].token < 0) {
            s->counts[h].token = token;
            s->counts[h].count = 0;
            s->counts_n++;
        }
        s->counts[h].count++;
    }
}

int sampler_check(const sampler *s, struct err *e)
{
    if (s->win_n < 0 || s->win_n > s->win_cap || (s->win_cap > 0 && (s->win_head < 0 || s->win_head >= s->win_cap)))
        return err_set(e, "sampler_check: window %d/%d head %d", (int)s->win_n, (int)s->win_cap, (int)s->win_head);
    for (int32_t i = 0; i < s->win_n; i++)
        if (s->window[i] < 0 || s->window[i] >= s->n_vocab) return err_set(e, "sampler_check: bad window token");
    if (s->counts) {
        uint32_t n = 0;
        if (s->counts_cap & (s->counts_cap - 1)) return err_set(e, "sampler_check: capacity not a power of 2");
        for (uint32_t i = 0; i < s->counts_cap; i++) {
            if (s->counts[i].token < 0) continue;
            n++;
            if (s->counts[i].token >= s->n_vocab || s->counts[i].count < 1)
                return err_set(e, "sampler_check: bad count entry");
        }
        if (n != s->counts_n || n * 2 > s->counts_cap) return err_set(e, "sampler_check: count table size");
    }
    return 0;
}

/* ---------------------------------------------------------------- sampling */

static int sampler_cmp_int(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* a ranks before b: higher logit, then lower id. */
static int sampler_better(const struct sampler_cand *a, const struct sampler_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int sampler_cmp_cand(const void *pa, const void *pb)
{
    const struct sampler_cand *a = pa, *b = pb;
    if (sampler_better(a, b)) return -1;
    if (sampler_better(b, a)) return 1;
    return 0;
}

int32_t sampler_argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > bv) { /* strict: the lowest id wins ties; NaN never wins */
            bv = logits[i];
            best = i;
        }
    return best;
}

/* Sifts c[j] down the heap c[0..k) whose root is the worst candidate, until neither child is worse. O(log k). */
static void sampler_sift_down(struct sampler_cand *c, int32_t k, int32_t j)
{
    for (;;) {
        int32_t l = 2 * j + 1, r = l + 1, w = j;
        if (l < k && sampler_better(&c[w], &c[l])) w = l;
        if (r < k && sampler_better(&c[w], &c[r])) w = r;
        if (w == j) break;
        struct sampler_cand t = c[j]; c[j] = c[w]; c[w] = t;
        j = w;
    }
}

/* Keeps the k best candidates of c[0..n) in c[0..k), sorted best first. O(n log k) with a heap whose
 * root is the worst kept candidate. */
static void sampler_top_k(struct sampler_cand *c, int32_t n, int32_t k)
{
    /* build a heap of c[0..k) with the worst at the root */
    for (int32_t i = k / 2 - 1; i >= 0; i--) sampler_sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (!sampler_better(&c[i], &c[0])) continue;
        c[0] = c[i];
        sampler_sift_down(c, k, 0);
    }
    qsort(c, (size_t)k, sizeof *c, sampler_cmp_cand);
}

static void sampler_apply_penalties(sampler *s, float *logits)
{
    const struct sampler_params *p = &s->p;
    for (int32_t i = 0; i < p->n_logit_bias; i++) logits[s->bias[i].token] += s->bias[i].bias;
    if (s->win_n > 0) {
        /* each distinct token in the window is penalized once */
        memcpy(s->win_tmp, s->window, (size_t)s->win_n * sizeof *s->window);
        qsort(s->win_tmp, (size_t)s->win_n, sizeof *s->win_tmp, sampler_cmp_int);
        for (int32_t i = 0; i < s->win_n; i++) {
            if (i > 0 && s->win_tmp[i] == s->win_tmp[i - 1]) continue;
            float *l = &logits[s->win_tmp[i]];
            *l = *l > 0.0f ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        }
    }
    if (s->counts) {
        for (uint32_t i = 0; i < s->counts_cap; i++) {
            if (s->counts[i].token < 0) continue;
            logits[s->counts[i].token] -=
                p->presence_penalty + p->frequency_penalty * (float)s->counts[i].count;
        }
    }
}

int32_t sampler_sample(sampler *s, float *logits)
{
    const struct sampler_params *p = &s->p;
    sampler_apply_penalties(s, logits);
    if (p->temperature <= 0.0f || !s->cand) return sampler_argmax(logits, s->n_vocab);

    /* candidates: every token with a finite logit, in id order */
    struct sampler_cand *c = s->cand;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (isfinite(logits[i])) c[n++] = (struct sampler_cand){i, logits[i]};
    if (n == 0) return sampler_argmax(logits, s->n_vocab);
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        sampler_top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = 1;
    } else if (p->top_p < 1.0f) {
        qsort(c, (size_t)n, sizeof *c, sampler_cmp_cand);
        sorted = 1;
    }
    /* softmax(logit / T), unnormalized: exp((l - max) / T) */
    float mx = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].logit = expf((c[i].logit - mx) / p->temperature);
        total += c[i].logit;
    }
    if (p->top_p < 1.0f && sorted) {
        double cum = 0.0, want = (double)p->top_p * total;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].logit;
            if (cum >= want) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        total = 0.0;
        for (int32_t i = 0; i < n; i++) total += c[i].logit;
    }
    if (p->min_p > 0.0f) {
        /* the largest probability is exp(0) = 1 (the max logit survives top-k and top-p) */
        float thresh = p->min_p;
        int32_t m = 0;
        total = 0.0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit >= thresh) {
                c[m++] = c[i];
                total += c[i].logit;
            }
        n = m;
    }
    double u = (double)sampler_uniform(&s->rng) * total, cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].logit;
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}
