/* tokmask — see tokmask.h. */
#include "constrain/tokmask.h"

#include <stdlib.h>
#include <string.h>

struct tokmask_vocab {
    int32_t n_tokens, n_words;
    uint8_t *bytes; /* every token's bytes, concatenated */
    int64_t
        *byte_at; /* (n_tokens + 1) token t is bytes[byte_at[t] .. byte_at[t + 1]) (empty outside the trie) */
    uint8_t *eog; /* (n_tokens) 1: end of generation */
    int32_t n_nodes;    /* node 0 is the root (no byte) */
    uint8_t *node_byte; /* (n_nodes) */
    uint16_t *depth;    /* (n_nodes) */
    int32_t *end;       /* (n_nodes) end of the subtree (exclusive) */
    int32_t *tok_first; /* (n_nodes) tokens ending here: ids[tok_first .. tok_first + tok_n) */
    int32_t *tok_n;
    int32_t *ids; /* (n_listed) */
    int max_depth;
};

static int cmp_token(const void *x, const void *y, void *arg)
{
    const tokmask_vocab *tv = arg;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    int64_t la = tv->byte_at[a + 1] - tv->byte_at[a], lb = tv->byte_at[b + 1] - tv->byte_at[b];
    int c = memcmp(tv->bytes + tv->byte_at[a], tv->bytes + tv->byte_at[b], (size_t)(la < lb ? la : lb));
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return (a > b) - (a < b);
}

/* Reads every token's bytes into tv->bytes / byte_at / eog. */
static int read_tokens(tokmask_vocab *tv, const tok_vocab *v, struct err *e)
{
    int64_t cap = 1 << 20, n = 0;
    tv->bytes = malloc((size_t)cap);
    tv->byte_at = malloc(((size_t)tv->n_tokens + 1) * sizeof *tv->byte_at);
    tv->eog = calloc((size_t)tv->n_tokens, 1);
    if (!tv->bytes || !tv->byte_at || !tv->eog) return err_set(e, "out of memory");
    char buf[TOKMASK_MAX_TOKEN_BYTES];
    for (int32_t t = 0; t < tv->n_tokens; t++) {
        tv->byte_at[t] = n;
        tv->eog[t] = (uint8_t)(tok_is_eog(v, t) != 0);
        int len = tok_token_bytes(v, t, 0, buf, sizeof buf);
        if (tv->eog[t] || len <= 0 || len > (int)sizeof buf) continue;
        if (n + len > cap) {
            while (n + len > cap)
                cap *= 2;
            uint8_t *b = realloc(tv->bytes, (size_t)cap);
            if (!b) return err_set(e, "out of memory");
            tv->bytes = b;
        }
        memcpy(tv->bytes + n, buf, (size_t)len);
        n += len;
    }
    tv->byte_at[tv->n_tokens] = n;
    return 0;
}

static int grow_nodes(tokmask_vocab *tv, int32_t *cap)
{
    int32_t c = *cap ? *cap * 2 : 4096;
    uint8_t *b = realloc(tv->node_byte, (size_t)c);
    if (b) tv->node_byte = b;
    uint16_t *d = realloc(tv->depth, (size_t)c * sizeof *d);
    if (d) tv->depth = d;
    int32_t *en = realloc(tv->end, (size_t)c * sizeof *en);
    if (en) tv->end = en;
    int32_t *f = realloc(tv->tok_first, (size_t)c * sizeof *f);
    if (f) tv->tok_first = f;
    int32_t *k = realloc(tv->tok_n, (size_t)c * sizeof *k);
    if (k) tv->tok_n = k;
    if (!b || !d || !en || !f || !k) return -1;
    *cap = c;
    return 0;
}

/* Builds the preorder trie from the tokens sorted by bytes: each token shares its longest common prefix
 * with the previous one; the nodes below it are new. */
static int build_trie(tokmask_vocab *tv, const int32_t *order, int32_t n, struct err *e)
{
    int32_t cap = 0, path[TOKMASK_MAX_TOKEN_BYTES + 1];
    if (grow_nodes(tv, &cap)) return err_set(e, "out of memory");
    tv->n_nodes = 1;
    tv->node_byte[0] = 0, tv->depth[0] = 0, tv->tok_first[0] = 0, tv->tok_n[0] = 0;
    path[0] = 0;
    int depth = 0;
    const uint8_t *prev = NULL;
    int64_t prev_len = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t t = order[k];
        const uint8_t *b = tv->bytes + tv->byte_at[t];
        int64_t len = tv->byte_at[t + 1] - tv->byte_at[t], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp])
            lcp++;
        for (; depth > lcp; depth--)
            tv->end[path[depth]] = tv->n_nodes;
        for (; depth < len; depth++) {
            if (tv->n_nodes == cap && grow_nodes(tv, &cap)) return err_set(e, "out of memory");
            int32_t id = tv->n_nodes++;
            tv->node_byte[id] = b[depth];
            tv->depth[id] = (uint16_t)(depth + 1);
            tv->tok_first[id] = k;
            tv->tok_n[id] = 0;
            path[depth + 1] = id;
        }
        int32_t at = path[len];
        if (!tv->tok_n[at]) tv->tok_first[at] = k;
        tv->tok_n[at]++;
        if (len > tv->max_depth) tv->max_depth = (int)len;
        prev = b;
        prev_len = len;
    }
    for (; depth >= 0; depth--)
        tv->end[path[depth]] = tv->n_nodes;
    return 0;
}

int tokmask_vocab_init(const tok_vocab *v, int32_t n_tokens, tokmask_vocab **out, struct err *e)
{
    *out = NULL;
    if (n_tokens < 1 || n_tokens > tok_n_vocab(v))
        return err_set(e, "tokmask: %d tokens of a %d-token vocabulary", n_tokens, tok_n_vocab(v));
    tokmask_vocab *tv = calloc(1, sizeof *tv);
    int32_t *order = malloc((size_t)n_tokens * sizeof *order);
    if (!tv || !order) {
        err_set(e, "out of memory");
        goto fail;
    }
    tv->n_tokens = n_tokens;
    tv->n_words = (n_tokens + 31) / 32;
    if (read_tokens(tv, v, e)) goto fail;
    int32_t n = 0;
    for (int32_t t = 0; t < n_tokens; t++)
        if (tv->byte_at[t + 1] > tv->byte_at[t]) order[n++] = t;
    qsort_r(order, (size_t)n, sizeof *order, cmp_token, tv);
    if (build_trie(tv, order, n, e)) goto fail;
    tv->ids = order;
    *out = tv;
    return 0;
fail:
    free(order);
    tokmask_vocab_free(tv);
    return -1;
}

void tokmask_vocab_free(tokmask_vocab *tv)
{
    if (!tv) return;
    free(tv->bytes);
    free(tv->byte_at);
    free(tv->eog);
    free(tv->node_byte);
    free(tv->depth);
    free(tv->end);
    free(tv->tok_first);
    free(tv->tok_n);
    free(tv->ids);
    free(tv);
}

int32_t tokmask_n_tokens(const tokmask_vocab *tv)
{
    return tv->n_tokens;
}
int32_t tokmask_words(const tokmask_vocab *tv)
{
    return tv->n_words;
}
int64_t tokmask_n_nodes(const tokmask_vocab *tv)
{
    return tv->n_nodes;
}

const uint8_t *tokmask_token(const tokmask_vocab *tv, int32_t t, int32_t *n, int *eog)
{
    if (t < 0 || t >= tv->n_tokens) {
        *n = 0;
        *eog = 0;
        return NULL;
    }
    *n = (int32_t)(tv->byte_at[t + 1] - tv->byte_at[t]);
    *eog = tv->eog[t];
    return tv->bytes + tv->byte_at[t];
}

static void allow(const tokmask_vocab *tv, int32_t node, uint32_t *mask)
{
    for (int32_t k = tv->tok_first[node]; k < tv->tok_first[node] + tv->tok_n[node]; k++) {
        int32_t t = tv->ids[k];
        mask[t >> 5] |= 1u << (t & 31);
    }
}

int tokmask_compute(const tokmask_vocab *tv, const struct grammar *g, pda_arena *a,
                    const struct pda_config *c, uint32_t *mask, int64_t *n_visited)
{
    memset(mask, 0, (size_t)tv->n_words * sizeof *mask);
    if (c->accept)
        for (int32_t t = 0; t < tv->n_tokens; t++)
            if (tv->eog[t]) mask[t >> 5] |= 1u << (t & 31);
    int64_t visited = 0;
    int rc = 0;
    uint64_t base = pda_mark(a);
    struct pda_config *cfg = malloc(((size_t)tv->max_depth + 1) * sizeof *cfg);
    uint64_t *marks = malloc(((size_t)tv->max_depth + 2) * sizeof *marks);
    if (!cfg || !marks) {
        rc = -1;
        goto done;
    }
    cfg[0] = *c;
    marks[1] = base;
    for (int32_t i = c->n ? 1 : tv->n_nodes; i < tv->n_nodes;) {
        int d = tv->depth[i];
        pda_release(a, marks[d]);
        visited++;
        if (pda_step(g, a, &cfg[d - 1], tv->node_byte[i], &cfg[d])) {
            rc = -1;
            goto done;
        }
        marks[d + 1] = pda_mark(a);
        if (!pda_alive(&cfg[d])) {
            i = tv->end[i];
            continue;
        }
        allow(tv, i, mask);
        i = cfg[d].n ? i + 1 : tv->end[i];
    }
done:
    pda_release(a, base);
    free(cfg);
    free(marks);
    if (n_visited) *n_visited = visited;
    return rc;
}

int tokmask_check(const tokmask_vocab *tv, struct err *e)
{
    int32_t listed = 0;
    uint8_t path[TOKMASK_MAX_TOKEN_BYTES + 1];
    for (int32_t i = 1; i < tv->n_nodes; i++) {
        int d = tv->depth[i];
        if (d < 1 || d > tv->depth[i - 1] + 1)
            return err_set(e, "tokmask: node %d at depth %d after depth %d", i, d, tv->depth[i - 1]);
        if (tv->end[i] <= i || tv->end[i] > tv->n_nodes)
            return err_set(e, "tokmask: node %d ends at %d", i, tv->end[i]);
        for (int32_t j = i + 1; j < tv->end[i]; j++)
            if (tv->depth[j] <= d)
                return err_set(e, "tokmask: node %d inside the subtree of %d is not below it", j, i);
        if (tv->end[i] < tv->n_nodes && tv->depth[tv->end[i]] > d)
            return err_set(e, "tokmask: subtree of %d ends early", i);
        path[d - 1] = tv->node_byte[i];
        for (int32_t k = tv->tok_first[i]; k < tv->tok_first[i] + tv->tok_n[i]; k++) {
            int32_t t = tv->ids[k];
            if (tv->byte_at[t + 1] - tv->byte_at[t] != d ||
                memcmp(tv->bytes + tv->byte_at[t], path, (size_t)d))
                return err_set(e, "tokmask: token %d listed at node %d does not spell its path", t, i);
            listed++;
        }
    }
    int32_t with_bytes = 0;
    for (int32_t t = 0; t < tv->n_tokens; t++)
        with_bytes += tv->byte_at[t + 1] > tv->byte_at[t];
    if (listed != with_bytes)
        return err_set(e, "tokmask: %d tokens listed, %d have bytes", listed, with_bytes);
    return 0;
}
