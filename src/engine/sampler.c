/* sampler — stateless token sampling; see sampler.h for the order of operations and the exact draw.
 *
 * Invariant: between calls, every entry of the scratch count table is 0 (sampler_sample sets entries
 * while it applies the penalties and clears exactly those before it returns); sampler_check() verifies it.
 * The candidate buffer holds nothing between calls. So a draw depends only on its arguments.
 *
 * Complexity per sample: O(n_vocab) for bias/penalties/softmax, plus O(min(repeat_last_n, history)) for
 * the repetition penalty and O(pos) for presence/frequency (the counts are rebuilt from the generated
 * tokens each time; a generation is short next to the O(n_vocab) work, and this keeps no state to keep
 * right across preemption). top-k adds O(n_vocab log k); top-p without top-k sorts all candidates,
 * O(n_vocab log n_vocab). Memory: n_vocab * 12 bytes per scratch.
 */
#include "engine/sampler.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

struct sampler_cand {
    int32_t id;
    float logit; /* then the probability (unnormalized) */
};

struct sampler {
    int32_t n_vocab;
    int32_t *count;            /* (n_vocab) all 0 between calls; during sampler_edits, a token's edit index + 1 */
    struct sampler_cand *cand; /* (n_vocab) */
    struct logit_edit *edits;  /* (cap_edits) sampler_sample's edits */
    int32_t cap_edits;
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

int sampler_check_params(const struct sampler_params *p, int32_t n_vocab, struct err *e)
{
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
    return 0;
}

float sampler_uniform(uint64_t seed, int32_t pos)
{
    return (float)(rng_at(seed, (uint64_t)pos) >> 40) * (1.0f / 16777216.0f);
}

/* ---------------------------------------------------------------- what a draw uses */

static int sampler_drawn(const struct sampler_params *p)
{
    return p->temperature > 0.0f;
}
static int sampler_top_k_on(const struct sampler_params *p)
{
    return sampler_drawn(p) && p->top_k > 0;
}
static int sampler_top_p_on(const struct sampler_params *p)
{
    return sampler_drawn(p) && p->top_p < 1.0f;
}
static int sampler_min_p_on(const struct sampler_params *p)
{
    return sampler_drawn(p) && p->min_p > 0.0f;
}
static int sampler_repeat_on(const struct sampler_params *p)
{
    return p->repeat_penalty != 1.0f && p->repeat_last_n > 0;
}
static int sampler_presence_on(const struct sampler_params *p)
{
    return p->presence_penalty != 0.0f;
}
static int sampler_frequency_on(const struct sampler_params *p)
{
    return p->frequency_penalty != 0.0f;
}
static int sampler_bias_on(const struct sampler_params *p)
{
    return p->n_logit_bias > 0;
}

#define SF(field) #field, offsetof(struct sampler_params, field)
const struct sampler_field sampler_fields[] = {
    {SF(temperature), SAMPLE_USE_TEMPERATURE, sampler_drawn},
    {SF(top_k), SAMPLE_USE_TOP_K, sampler_top_k_on},
    {SF(top_p), SAMPLE_USE_TOP_P, sampler_top_p_on},
    {SF(min_p), SAMPLE_USE_MIN_P, sampler_min_p_on},
    {SF(repeat_penalty), SAMPLE_USE_EDITS, sampler_repeat_on},
    {SF(repeat_last_n), SAMPLE_USE_EDITS, sampler_repeat_on},
    {SF(presence_penalty), SAMPLE_USE_EDITS, sampler_presence_on},
    {SF(frequency_penalty), SAMPLE_USE_EDITS, sampler_frequency_on},
    {SF(seed), SAMPLE_USE_TEMPERATURE, sampler_drawn}, /* the uniform of a drawn row */
    {SF(n_logit_bias), SAMPLE_USE_EDITS, sampler_bias_on},
    {SF(logit_bias), SAMPLE_USE_EDITS, sampler_bias_on},
};
#undef SF
const int sampler_n_fields = (int)(sizeof sampler_fields / sizeof sampler_fields[0]);

uint32_t sampler_uses(const struct sampler_params *p)
{
    uint32_t uses = 0;
    for (int i = 0; i < sampler_n_fields; i++)
        if (sampler_fields[i].in_use(p)) uses |= sampler_fields[i].use;
    return uses;
}

/* ---------------------------------------------------------------- scratch */

int sampler_init(int32_t n_vocab, sampler **out, struct err *e)
{
    *out = NULL;
    if (n_vocab < 1) return err_set(e, "sampler: vocabulary size %d", (int)n_vocab);
    sampler *s = calloc(1, sizeof *s);
    if (!s) return err_set(e, "sampler: out of memory");
    s->n_vocab = n_vocab;
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s->count || !s->cand) {
        sampler_free(s);
        return err_set(e, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
    }
    *out = s;
    return 0;
}

void sampler_free(sampler *s)
{
    if (!s) return;
    free(s->count);
    free(s->cand);
    free(s->edits);
    free(s);
}

int sampler_check(const sampler *s, struct err *e)
{
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->count[i] != 0)
            return err_set(e, "sampler_check: count of token %d is %d between draws", (int)i, (int)s->count[i]);
    return 0;
}

/* ---------------------------------------------------------------- sampling */

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

/* Moves the k best candidates of c[0..n) to c[0..k), sorted best first (c stays a permutation: the others are
 * in c[k..n)). O(n log k) with a heap whose root is the worst kept candidate. */
static void sampler_top_k(struct sampler_cand *c, int32_t n, int32_t k)
{
    /* build a heap of c[0..k) with the worst at the root */
    for (int32_t i = k / 2 - 1; i >= 0; i--) sampler_sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (!sampler_better(&c[i], &c[0])) continue;
        struct sampler_cand t = c[0];
        c[0] = c[i];
        c[i] = t;
        sampler_sift_down(c, k, 0);
    }
    qsort(c, (size_t)k, sizeof *c, sampler_cmp_cand);
}

/* Top-p without top-k: the best candidates of c[0..n), sorted best first, enough of them to hold the nucleus
 * (their softmax terms reach top_p of the total): the best 256, then 4x as many while they fall short (a heap
 * pass each, O(n log k), instead of sorting all n). *total_all: the total over all n candidates, summed in id
 * order. Returns how many it kept. */
static int32_t sampler_nucleus(struct sampler_cand *c, int32_t n, const struct sampler_params *p, double *total_all)
{
    float mx = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += expf((c[i].logit - mx) / p->temperature);
    *total_all = total;
    const double want = (double)p->top_p * total;
    for (int32_t k = 256;; k *= 4) {
        if (k >= n) {
            qsort(c, (size_t)n, sizeof *c, sampler_cmp_cand);
            return n;
        }
        sampler_top_k(c, n, k); /* c[0..k) the k best, sorted; the rest of c[0..n) the others */
        double cum = 0.0;
        for (int32_t i = 0; i < k; i++)
            if ((cum += expf((c[i].logit - mx) / p->temperature)) >= want) return k;
    }
}

int32_t sampler_max_edits(const struct sampler_params *p, int32_t n_prompt, int32_t pos)
{
    int32_t n_hist = n_prompt + pos, w = n_hist < p->repeat_last_n ? n_hist : p->repeat_last_n;
    int32_t rep = p->repeat_penalty != 1.0f ? w : 0,
            counted = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    return p->n_logit_bias + rep + (counted ? pos : 0); /* only what sampler_edits can touch */
}

/* The edit of token t in out[0..*n): found through the count table (index + 1), else appended. */
static struct logit_edit *sampler_edit_of(sampler *s, int32_t t, struct logit_edit *out, int32_t *n)
{
    if (!s->count[t]) {
        out[*n] = (struct logit_edit){t, 0.0f, 1.0f, 0.0f};
        s->count[t] = ++*n;
    }
    return &out[s->count[t] - 1];
}

int32_t sampler_edits(sampler *s, const struct sampler_params *p, const int32_t *tokens, int32_t n_prompt,
                      int32_t pos, struct logit_edit *out)
{
    int32_t n = 0, n_hist = n_prompt + pos;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        sampler_edit_of(s, p->logit_bias[i].token, out, &n)->add += p->logit_bias[i].bias;
    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
        int32_t w = n_hist < p->repeat_last_n ? n_hist : p->repeat_last_n;
        for (int32_t i = n_hist - w; i < n_hist; i++)
            if (tokens[i] >= 0 && tokens[i] < s->n_vocab)
                sampler_edit_of(s, tokens[i], out, &n)->rep = p->repeat_penalty;
    }
    int counting = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (counting) /* the generated tokens' counts go into sub, then become their penalties */
        for (int32_t i = n_prompt; i < n_hist; i++)
            if (tokens[i] >= 0 && tokens[i] < s->n_vocab) sampler_edit_of(s, tokens[i], out, &n)->sub += 1.0f;
    for (int32_t i = 0; i < n; i++) {
        if (counting && out[i].sub > 0.0f) out[i].sub = p->presence_penalty + p->frequency_penalty * out[i].sub;
        s->count[out[i].token] = 0;
    }
    return n;
}

void sampler_apply_edits(const struct logit_edit *ed, int32_t n, float *logits)
{
    for (int32_t i = 0; i < n; i++) {
        float l = logits[ed[i].token];
        if (ed[i].add != 0.0f) l += ed[i].add;
        if (ed[i].rep != 1.0f) l = l > 0.0f ? l / ed[i].rep : l * ed[i].rep;
        if (ed[i].sub != 0.0f) l -= ed[i].sub;
        logits[ed[i].token] = l;
    }
}

/* Applies the bias and penalties of the draw at pos to logits, through the edits (the same ones a backend
 * applies when it draws). */
static int sampler_apply_penalties(sampler *s, const struct sampler_params *p, const int32_t *tokens,
                                   int32_t n_prompt, int32_t pos, float *logits)
{
    int32_t need = sampler_max_edits(p, n_prompt, pos);
    if (need > s->cap_edits) {
        struct logit_edit *ed = realloc(s->edits, (size_t)need * sizeof *ed);
        if (!ed) return -1;
        s->edits = ed;
        s->cap_edits = need;
    }
    sampler_apply_edits(s->edits, sampler_edits(s, p, tokens, n_prompt, pos, s->edits), logits);
    return 0;
}

int32_t sampler_sample(sampler *s, const struct sampler_params *p, const int32_t *tokens, int32_t n_prompt,
                       int32_t pos, float *logits)
{
    if (sampler_apply_penalties(s, p, tokens, n_prompt, pos, logits)) return -1;
    return sampler_draw(s, p, sampler_uniform(p->seed, pos), logits);
}

int32_t sampler_draw(sampler *s, const struct sampler_params *p, float u, float *logits)
{
    if (p->temperature <= 0.0f) return sampler_argmax(logits, s->n_vocab);
    /* candidates: every token with a finite logit, in id order */
    struct sampler_cand *c = s->cand;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (isfinite(logits[i])) c[n++] = (struct sampler_cand){i, logits[i]};
    if (n == 0) return sampler_argmax(logits, s->n_vocab);
    int sorted = 0;
    double total_all = -1.0; /* top-p alone: the total over every candidate, in id order */
    if (p->top_k > 0 && p->top_k < n) {
        sampler_top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = 1;
    } else if (p->top_p < 1.0f) {
        n = sampler_nucleus(c, n, p, &total_all);
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
    if (total_all >= 0.0) total = total_all;
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
    double target = (double)u * total, cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].logit;
        if (target < cum) return c[i].id;
    }
    return c[n - 1].id;
}
