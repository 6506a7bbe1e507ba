/* backend — where the math runs. One struct of function pointers plus a context (STYLE.md): coarse entries
 * only. The CPU backend is the reference and always built; others must match it within stated tolerances.
 *
 * KV storage belongs to the backend: a pool of n_blocks blocks of block_size token slots for every layer.
 * Everything above the backend refers to KV only by block id. A step batch carries, per sequence, the
 * block table that maps its positions to blocks: position p lives in block_table[p / block_size], slot
 * p % block_size.
 */
#ifndef NS_BACKEND_H
#define NS_BACKEND_H

#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

struct step_seq {
    const int32_t *block_table; /* (n_blocks) block ids; covers positions [0, last row's pos] */
    int32_t n_blocks;
};

/* One forward step over a batch of rows (tokens) from several sequences.
 * Rows of one sequence are contiguous with consecutive positions; the KV of positions before a
 * sequence's first row in this step is already in its blocks (computed by earlier steps or shared from
 * the prefix cache). The step writes K and V of every row into its slot, then row r attends causally to
 * positions [0, pos[r]] of its own sequence only. */
struct step_batch {
    int32_t n_rows;
    const int32_t *tokens;     /* (n_rows) */
    const int32_t *pos;        /* (n_rows) position of the row in its sequence */
    const int32_t *seq;        /* (n_rows) index into seqs */
    int32_t n_seqs;
    const struct step_seq *seqs; /* (n_seqs) */
    int32_t n_logits;
    const int32_t *logit_rows; /* (n_logits) strictly increasing row indices whose logits are wanted */
};

/* Device memory as a backend sees it (bytes). */
struct backend_memory {
    uint64_t total, available;
};

/* What a backend can do, for the runtime's defaults and checks. */
struct backend_caps {
    int32_t default_max_batch_tokens;
    uint64_t weight_types; /* bit (1ull << gguf dtype) set: weight matrices of that type can be loaded */
    int weights_mapped;    /* 1: weights are read in place from the file mapping (cpu); 0: copied (cuda) */
};

/* Calls on one backend are not thread-safe: one at a time (the backend runs its own threads inside). */
struct backend_ops {
    const char *name;
    /* Binds / uploads the weights of m (m must outlive the backend). */
    int (*load)(void *ctx, const struct model *m, struct err *e);
    /* (Re)allocates the KV pool: n_blocks blocks of block_size tokens of type t. Invalidates all KV. */
    int (*kv_alloc)(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e);
    /* Runs one step; writes logits (n_logits, n_vocab) in logit_rows order. Invariant (CPU): a row's logits
     * are bit-identical whatever else is in the batch. */
    int (*forward)(void *ctx, const struct step_batch *b, float *logits, struct err *e);
    /* Bytes of scratch memory the backend needs for a step of up to max_rows rows (for memory budgeting). */
    uint64_t (*scratch_bytes)(void *ctx, int32_t max_rows);
    void (*free)(void *ctx);
    /* (optional) Debug check of the backend's own invariant (sizes of its KV pool and scratch). */
    int (*check)(void *ctx, struct err *e);
    /* (optional) Bytes of weight copies the backend allocated at load, beyond the model's file mapping
     * (CPU: the Q8_0/Q4_0/Q4_1 matrices repacked for its kernels), for memory budgeting. */
    uint64_t (*weight_copy_bytes)(void *ctx);
    /* (optional) Memory of the device the backend computes on (total, available now). */
    int (*memory)(void *ctx, struct backend_memory *out, struct err *e);
    /* (optional) Capabilities (see struct backend_caps). */
    void (*caps)(void *ctx, struct backend_caps *out);
};

struct backend {
    const struct backend_ops *ops;
    void *ctx;
};

/* The CPU backend; n_threads <= 0 means one per online core. */
int backend_cpu_init(struct backend *b, int n_threads, struct err *e);
void backend_free(struct backend *b);

#endif
