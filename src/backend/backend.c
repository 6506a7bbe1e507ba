/* backend — the seam's backend-independent part: the registry of backends by name, and backend_free.
 * Each backend lives in its own file (cpu.c, cuda.cu, ...).
 *
 * Invariant of the registry table: names are unique; an entry whose init is NULL is not built into this
 * binary (its probe says why); the entries are in order of preference for "auto", cpu last (always built
 * and always usable). backend_open is the only place that turns a name into a backend.
 */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

struct backend_entry {
    const char *name;
    /* 1: usable here; 0: not, with the reason in why */
    int (*probe)(char *why, size_t why_cap);
    /* NULL: not built into this binary */
    int (*init)(struct backend *b, const struct backend_config *cfg, struct err *e);
};

static int cpu_probe(char *why, size_t why_cap)
{
    if (why_cap) why[0] = '\0';
    return 1;
}

static int cpu_init(struct backend *b, const struct backend_config *cfg, struct err *e)
{
    return backend_cpu_init(b, cfg->n_threads, e);
}

#ifndef NS_CUDA
static int cuda_not_built(char *why, size_t why_cap)
{
    snprintf(why, why_cap, "this build has no CUDA backend (build with make CUDA=1)");
    return 0;
}
#endif

static const struct backend_entry backend_table[] = {
#ifdef NS_CUDA
    {"cuda", backend_cuda_probe, backend_cuda_init},
#else
    {"cuda", cuda_not_built, NULL},
#endif
    {"cpu", cpu_probe, cpu_init},
};

#define BACKEND_N_ENTRIES ((int)(sizeof backend_table / sizeof backend_table[0]))

static const struct backend_entry *backend_find(const char *name)
{
    for (int i = 0; i < BACKEND_N_ENTRIES; i++)
        if (!strcmp(backend_table[i].name, name)) return &backend_table[i];
    return NULL;
}

static int backend_is_auto(const char *name)
{
    return !name || !strcmp(name, "auto");
}

/* The built entries' names, in table order (test_runtime checks this against the table). */
#ifdef NS_CUDA
#define BACKEND_BUILT_NAMES "cuda, cpu"
#else
#define BACKEND_BUILT_NAMES "cpu"
#endif

const char *backend_list(void)
{
    return BACKEND_BUILT_NAMES;
}

/* The entry for a name that is built, or NULL with the error set (unknown or not built). */
static const struct backend_entry *backend_find_built(const char *name, struct err *e)
{
    const struct backend_entry *be = backend_find(name);
    if (!be) {
        err_set(e, "unknown backend '%s' (this build has: %s)", name, backend_list());
        return NULL;
    }
    if (!be->init) {
        char why[256];
        be->probe(why, sizeof why);
        err_set(e, "backend %s: %s", name, why);
        return NULL;
    }
    return be;
}

int backend_check_name(const char *name, struct err *e)
{
    if (backend_is_auto(name)) return 0;
    return backend_find_built(name, e) ? 0 : -1;
}

int backend_probe(const char *name, char *why, size_t why_cap)
{
    const struct backend_entry *be = backend_find(name);
    if (!be) {
        snprintf(why, why_cap, "unknown backend (this build has: %s)", backend_list());
        return 0;
    }
    return be->probe(why, why_cap);
}

/* The first usable built entry in order of preference (cpu at the latest). */
static const struct backend_entry *backend_pick_auto(void)
{
    char why[256];
    for (int i = 0; i < BACKEND_N_ENTRIES; i++)
        if (backend_table[i].init && backend_table[i].probe(why, sizeof why)) return &backend_table[i];
    return backend_find("cpu");
}

int backend_open(const char *name, const struct backend_config *cfg, struct backend *b, struct err *e)
{
    b->ops = NULL;
    b->ctx = NULL;
    struct backend_config zero = {0};
    if (!cfg) cfg = &zero;
    const struct backend_entry *be = backend_is_auto(name) ? backend_pick_auto() : backend_find_built(name, e);
    if (!be) return -1;
    char why[256];
    if (!be->probe(why, sizeof why)) return err_set(e, "backend %s is not usable here: %s", be->name, why);
    if (be->init(b, cfg, e)) {
        b->ops = NULL;
        b->ctx = NULL;
        return -1;
    }
    return 0;
}

static const char *const backend_weights_names[BACKEND_WEIGHTS_N] = {"auto", "bf16", "fp8"};

const char *backend_weights_name(enum backend_weights w)
{
    return (unsigned)w < BACKEND_WEIGHTS_N ? backend_weights_names[w] : "?";
}

int backend_weights_parse(const char *s, enum backend_weights *out)
{
    for (int i = 0; i < BACKEND_WEIGHTS_N; i++)
        if (!strcmp(s, backend_weights_names[i])) {
            *out = (enum backend_weights)i;
            return 0;
        }
    return -1;
}

void backend_free(struct backend *b)
{
    if (!b || !b->ops) return;
    if (b->ops->free) b->ops->free(b->ctx);
    b->ops = NULL;
    b->ctx = NULL;
}

int backend_check_batch(const struct step_batch *b, int32_t n_vocab, int32_t n_blocks, int32_t block_size,
                        int64_t max_pos, struct err *e)
{
    if (b->n_rows < 1) return err_set(e, "step batch: no rows");
    if (b->n_seqs < 1) return err_set(e, "step batch: no sequences");
    if (b->n_logits < 0 || b->n_logits > b->n_rows) return err_set(e, "step batch: n_logits %d out of range",
                                                                   (int)b->n_logits);
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const struct step_seq *sq = &b->seqs[i];
        if (sq->n_blocks < 0 || (sq->n_blocks > 0 && !sq->block_table))
            return err_set(e, "step batch: sequence %d has a bad block table", (int)i);
        for (int32_t j = 0; j < sq->n_blocks; j++)
            if (sq->block_table[j] < 0 || sq->block_table[j] >= n_blocks)
                return err_set(e, "step batch: sequence %d block %d is id %d, pool has %d blocks", (int)i, (int)j,
                               (int)sq->block_table[j], (int)n_blocks);
    }
    for (int32_t r = 0; r < b->n_rows; r++) {
        if (b->tokens[r] < 0 || b->tokens[r] >= n_vocab)
            return err_set(e, "step batch: row %d token %d is outside the vocabulary (%d)", (int)r,
                           (int)b->tokens[r], (int)n_vocab);
        if (b->seq[r] < 0 || b->seq[r] >= b->n_seqs)
            return err_set(e, "step batch: row %d sequence index %d out of range", (int)r, (int)b->seq[r]);
        const struct step_seq *sq = &b->seqs[b->seq[r]];
        if (b->pos[r] < 0 || b->pos[r] >= max_pos || b->pos[r] / block_size >= sq->n_blocks)
            return err_set(e, "step batch: row %d position %d is not covered by its block table (%d blocks of %d)",
                           (int)r, (int)b->pos[r], (int)sq->n_blocks, (int)block_size);
    }
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_rows ||
            (i > 0 && b->logit_rows[i] <= b->logit_rows[i - 1]))
            return err_set(e, "step batch: logit_rows[%d] = %d is not a strictly increasing row index", (int)i,
                           (int)b->logit_rows[i]);
    if (b->n_hidden < 0 || b->n_hidden > b->n_rows || (b->n_hidden > 0 && (!b->hidden_rows || !b->hidden)))
        return err_set(e, "step batch: n_hidden %d out of range or without its buffers", (int)b->n_hidden);
    for (int32_t i = 0; i < b->n_hidden; i++)
        if (b->hidden_rows[i] < 0 || b->hidden_rows[i] >= b->n_rows ||
            (i > 0 && b->hidden_rows[i] <= b->hidden_rows[i - 1]))
            return err_set(e, "step batch: hidden_rows[%d] = %d is not a strictly increasing row index", (int)i,
                           (int)b->hidden_rows[i]);
    return 0;
}
