/* logprob — see logprob.h for what a logprob is and what the cache keeps.
 *
 * Invariant of the cache: slot id holds NULL or one block's entries with the pool generation of block id at
 * the time they were stored; entries are trusted only while that block is cached with that generation (so a
 * block evicted and reused, whose generation changed, never serves the old entries).
 */
#include "engine/logprob.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct logprob_norm logprob_norm_row(const float *logits, int32_t n)
{
    float max = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - (double)max);
    return (struct logprob_norm){max, log(sum)};
}

double logprob_of(const struct logprob_norm *nm, const float *logits, int32_t t)
{
    return ((double)logits[t] - (double)nm->max) - nm->log_sum;
}

/* 1 if (la, a) ranks before (lb, b): the larger logit first, the lower id on ties. NaN ranks last. */
static int ranks_before(float la, int32_t a, float lb, int32_t b)
{
    if (isnan(lb)) return !isnan(la) || a < b;
    if (isnan(la)) return 0;
    return la > lb || (la == lb && a < b);
}

void logprob_fill(const float *logits, int32_t n, int32_t n_ids, int32_t t, int32_t n_top, struct logprob_entry *out)
{
    struct logprob_norm nm = logprob_norm_row(logits, n);
    if (n_top > LOGPROB_MAX_TOP) n_top = LOGPROB_MAX_TOP;
    if (n_top > n_ids) n_top = n_ids;
    if (n_top < 0) n_top = 0;
    out->token = t;
    out->logprob = logprob_of(&nm, logits, t);
    out->n_top = n_top;
    /* insertion into a sorted list of n_top: O(n_ids * n_top), n_top <= 20 */
    int32_t k = 0;
    for (int32_t i = 0; i < n_ids && n_top > 0; i++) {
        if (k == n_top && !ranks_before(logits[i], i, logits[out->top[k - 1].token], out->top[k - 1].token)) continue;
        int32_t j = k < n_top ? k++ : k - 1;
        while (j > 0 && ranks_before(logits[i], i, logits[out->top[j - 1].token], out->top[j - 1].token)) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].token = i;
    }
    for (int32_t j = 0; j < k; j++)
        out->top[j].logprob = logprob_of(&nm, logits, out->top[j].token);
}

void logprob_first(int32_t t, struct logprob_entry *out)
{
    out->token = t;
    out->logprob = NAN;
    out->n_top = 0;
}

_Static_assert(LOGPROB_MAX_TOP == SAMPLE_MAX_TOP_LOGPROBS,
               "a backend's logprob rows hold the alternatives a request may ask for");

void logprob_from_sample(const struct sample_logprobs *in, struct logprob_entry *out)
{
    out->token = in->tok.token;
    out->logprob = in->tok.logprob;
    out->n_top = in->n_top < 0 ? 0 : in->n_top > LOGPROB_MAX_TOP ? LOGPROB_MAX_TOP : in->n_top;
    for (int32_t j = 0; j < out->n_top; j++)
        out->top[j] = (struct logprob_top){in->top[j].token, in->top[j].logprob};
}

/* ---- the cache ---- */

struct logprob_block {
    uint32_t gen;       /* the block's kv_generation when stored */
    int32_t next_token; /* the token after the block */
    int32_t n_top;      /* alternatives in each entry */
    struct logprob_entry e[]; /* (block_size) positions b*B + 1 .. (b+1)*B */
};

struct logprob_cache {
    const kv_pool *pool;
    int32_t n_blocks, block_size, n_stored;
    struct logprob_block **slot; /* (n_blocks) */
};

int logprob_cache_init(const kv_pool *pool, logprob_cache **out, struct err *e)
{
    logprob_cache *c = calloc(1, sizeof *c);
    if (c) c->slot = calloc((size_t)kv_n_blocks(pool), sizeof *c->slot);
    if (!c || !c->slot) {
        free(c);
        *out = NULL;
        return err_set(e, "logprob cache: out of memory for %d blocks", (int)kv_n_blocks(pool));
    }
    c->pool = pool;
    c->n_blocks = kv_n_blocks(pool);
    c->block_size = kv_block_size(pool);
    *out = c;
    return 0;
}

void logprob_cache_free(logprob_cache *c)
{
    if (!c) return;
    for (int32_t i = 0; i < c->n_blocks; i++)
        free(c->slot[i]);
    free(c->slot);
    free(c);
}

static const struct logprob_block *valid_slot(const logprob_cache *c, int32_t id)
{
    if (id < 0 || id >= c->n_blocks) return NULL;
    const struct logprob_block *s = c->slot[id];
    if (!s || !kv_is_cached(c->pool, id) || kv_generation(c->pool, id) != s->gen) return NULL;
    return s;
}

const struct logprob_entry *logprob_cache_get(const logprob_cache *c, int32_t id, int32_t next_token, int32_t n_top)
{
    const struct logprob_block *s = valid_slot(c, id);
    return s && s->next_token == next_token && s->n_top >= n_top ? s->e : NULL;
}

int logprob_cache_put(logprob_cache *c, int32_t id, int32_t next_token, int32_t n_top,
                      const struct logprob_entry *entries)
{
    if (id < 0 || id >= c->n_blocks || !kv_is_cached(c->pool, id)) return 0;
    const struct logprob_block *v = valid_slot(c, id);
    if (v && v->next_token == next_token && v->n_top >= n_top) return 0;
    if (!c->slot[id]) {
        c->slot[id] = malloc(sizeof *c->slot[id] + (size_t)c->block_size * sizeof(struct logprob_entry));
        if (!c->slot[id]) return -1;
        c->n_stored++;
    }
    struct logprob_block *s = c->slot[id];
    s->gen = kv_generation(c->pool, id);
    s->next_token = next_token;
    s->n_top = n_top;
    memcpy(s->e, entries, (size_t)c->block_size * sizeof *entries);
    return 0;
}

int32_t logprob_cache_n_stored(const logprob_cache *c)
{
    return c ? c->n_stored : 0;
}

/* ---- one request's logprobs ---- */

int logprob_seq_init(struct logprob_seq *s, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, int gen,
                     int want_prompt, int32_t from, int32_t n_top)
{
    memset(s, 0, sizeof *s);
    s->gen = gen;
    s->n_top = n_top < 0 ? 0 : n_top > LOGPROB_MAX_TOP ? LOGPROB_MAX_TOP : n_top;
    s->n_prompt = n_prompt;
    if (gen && max_tokens > 0) {
        s->out = malloc((size_t)max_tokens * sizeof *s->out);
        if (!s->out) return -1;
        s->cap_out = max_tokens;
    }
    if (want_prompt) {
        s->prompt = malloc((size_t)n_prompt * sizeof *s->prompt);
        if (!s->prompt) {
            logprob_seq_free(s);
            return -1;
        }
        for (int32_t i = 0; i < n_prompt; i++) /* tokens now; logprobs as they are computed */
            logprob_first(prompt[i], &s->prompt[i]);
        s->from = from < 1 ? 1 : from > n_prompt ? n_prompt : from;
        s->n_prompt_have = s->from;
    }
    return 0;
}

void logprob_seq_free(struct logprob_seq *s)
{
    free(s->prompt);
    free(s->out);
    memset(s, 0, sizeof *s);
}

int32_t logprob_seq_prompt_rows(const struct logprob_seq *s, int32_t pos0, int32_t n_rows, int32_t *first)
{
    *first = pos0;
    if (!s->prompt) return 0;
    int32_t lo = pos0 > s->n_prompt_have - 1 ? pos0 : s->n_prompt_have - 1;
    int32_t hi = pos0 + n_rows < s->n_prompt - 1 ? pos0 + n_rows : s->n_prompt - 1;
    *first = lo;
    return hi > lo ? hi - lo : 0;
}

void logprob_seq_take_row(struct logprob_seq *s, int32_t pos, const float *logits, int32_t n, int32_t n_ids)
{
    struct logprob_entry *en = &s->prompt[pos + 1];
    logprob_fill(logits, n, n_ids, en->token, s->n_top, en);
    if (pos + 2 > s->n_prompt_have) s->n_prompt_have = pos + 2;
}

void logprob_seq_take_sample(struct logprob_seq *s, int32_t pos, const struct sample_logprobs *in)
{
    logprob_from_sample(in, &s->prompt[pos + 1]);
    if (pos + 2 > s->n_prompt_have) s->n_prompt_have = pos + 2;
}

void logprob_seq_push(struct logprob_seq *s, const struct logprob_entry *e)
{
    if (s->n_out < s->cap_out) s->out[s->n_out++] = *e;
}

int logprob_seq_hit_ok(struct logprob_seq *s, const logprob_cache *c, const int32_t *tokens, int32_t n_tokens,
                       int32_t index, int32_t block, int32_t block_size)
{
    if (!s->prompt) return 1;
    int64_t end = ((int64_t)index + 1) * block_size; /* the block predicts positions index*B + 1 .. end */
    int64_t last = end < s->n_prompt - 1 ? end : s->n_prompt - 1;
    if (last < s->n_prompt_have) return 1;
    if (!c || end >= n_tokens) return 0;
    const struct logprob_entry *e = logprob_cache_get(c, block, tokens[end], s->n_top);
    if (!e) return 0;
    const int64_t first = (int64_t)index * block_size + 1; /* e[0]'s position */
    for (int64_t p = first > s->from ? first : s->from; p <= last; p++) {
        struct logprob_entry *d = &s->prompt[p];
        *d = e[p - first];
        d->n_top = s->n_top; /* the stored ones may carry more alternatives */
    }
    if (last + 1 > s->n_prompt_have) s->n_prompt_have = (int32_t)last + 1;
    return 1;
}

int logprob_seq_offer(struct logprob_seq *s, logprob_cache *c, const int32_t *tokens, const int32_t *blocks,
                      int32_t n_registered, int32_t block_size)
{
    if (!s->prompt || !c) return 0;
    if (s->n_offered > n_registered) s->n_offered = n_registered; /* preempted since */
    for (; s->n_offered < n_registered; s->n_offered++) {
        int64_t end = ((int64_t)s->n_offered + 1) * block_size;
        if (end > s->n_prompt - 1 || end >= s->n_prompt_have) break; /* its last prediction is not a prompt entry yet */
        if (end - block_size + 1 < s->from) continue;              /* it predicts positions not asked for */
        if (logprob_cache_put(c, blocks[s->n_offered], tokens[end], s->n_top,
                              &s->prompt[(int64_t)s->n_offered * block_size + 1]))
            return -1;
    }
    return 0;
}
