/* backend — where the math runs. One struct of function pointers plus a context (STYLE.md): coarse entries
 * only. The CPU backend is the reference and always built; others must match it within stated tolerances.
 *
 * KV storage belongs to the backend: a pool of n_blocks blocks of block_size token slots for every layer.
 * Everything above the backend refers to KV only by block id. A step batch carries, per sequence, the
 * block table that maps its positions to blocks: position p lives in block_table[p / block_size], slot
 * p % block_size.
 *
 * Backends are opened by name through the registry (backend_open, below); what differs between them that
 * the layers above need (memory, default step size, weight types) they report through the memory and caps
 * ops, so nothing above src/backend/ compares backend names.
 */
#ifndef NS_BACKEND_H
#define NS_BACKEND_H

#include <stddef.h>
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
    /* (optional, backends whose caps say hidden_states) The final hidden state of some rows: the residual
     * stream after the last layer, through the output norm (the input of the output head), for embeddings.
     * n_hidden 0 (the default): none, and hidden is not touched. */
    int32_t n_hidden;
    const int32_t *hidden_rows; /* (n_hidden) strictly increasing row indices whose hidden state is wanted */
    float *hidden;              /* (n_hidden, n_embd) written by forward, in hidden_rows order */
};

/* Sampling on the backend (the optional op `sample`): after a forward that kept its logits (logits NULL),
 * each logit row is either resolved where it lies or copied to the host. A row's logits are first edited (its
 * bias and penalties, struct logit_edit); then a greedy row's token is their argmax over ids [0, n_ids) by
 * sampler_argmax's rule (the lowest id on ties, NaN never wins, 0 when no logit beats -inf) — so a backend's
 * greedy draw equals the host sampler's on the same logits; a drawn row (temperature > 0) follows
 * sampler_draw's steps with the row's filters and uniform u (equal to the host's draw but for the rounding of
 * sums, where u falls within it of a boundary between two tokens).
 * Logprobs (row.logprobs 1): the raw log-softmax of the row's logits as they came out of the forward (before
 * the edits) over all n_vocab values, by engine/logprob.h's formula, of the row's token (the one drawn, or
 * row.token for a SAMPLE_LOGPROBS row) and of its top_logprobs best ids among [0, n_ids) (the larger logit
 * first, the lower id on ties, NaN last): only those pairs leave the backend. */
struct logit_edit {
    int32_t token;
    float add; /* logit bias, added first when not 0 */
    float rep; /* repetition penalty, 1: none: l > 0 ? l / rep : l * rep */
    float sub; /* then subtracted: presence + frequency * count (0: none) */
};

enum sample_mode {
    SAMPLE_HOST,     /* copy the row's logits, unedited, to the host */
    SAMPLE_GREEDY,   /* edit, then argmax where the logits are */
    SAMPLE_DRAW,     /* edit, then sampler_draw's steps with the filters and u below */
    SAMPLE_LOGPROBS, /* draw nothing: only the logprobs of `token` (a prompt row: the prompt's next token) */
};

#define SAMPLE_MAX_TOP_LOGPROBS                                                                              \
    20 /* alternatives a row may ask for at most (engine/logprob.h's LOGPROB_MAX_TOP) */

struct sample_row {
    enum sample_mode mode;
    int32_t n_edits;
    const struct logit_edit *edits; /* (n_edits) distinct tokens below n_ids */
    float temperature, top_p, min_p, u; /* SAMPLE_DRAW: the request's filters, u = sampler_uniform(seed, pos) */
    int32_t top_k;
    int logprobs;         /* 1 (GREEDY, DRAW, LOGPROBS rows): the op fills its struct sample_logprobs */
    int32_t top_logprobs; /* with logprobs: alternatives, 0 .. SAMPLE_MAX_TOP_LOGPROBS */
    int32_t token;        /* SAMPLE_LOGPROBS: the token whose logprob is wanted (below n_vocab) */
};

/* The logprobs of one row (the op's output for a row with logprobs that it resolved). */
struct sample_logprob {
    int32_t token;
    double logprob;
};
struct sample_logprobs {
    struct sample_logprob tok;                          /* the row's token */
    int32_t n_top;                                      /* the row's top_logprobs (at most n_ids) */
    struct sample_logprob top[SAMPLE_MAX_TOP_LOGPROBS]; /* (n_top) best first */
};

/* What a backend's op sample expresses: the SAMPLE_USE_* of a row (sampler_uses gives a request's) must all
 * be in `uses`, within the limits, for the engine to send the row there; every other row comes to the host as
 * logits (SAMPLE_HOST). A greedy row without edits needs nothing but the op. */
enum sample_use {
    SAMPLE_USE_EDITS = 1u << 0,       /* logit bias and penalties, as struct logit_edit */
    SAMPLE_USE_TEMPERATURE = 1u << 1, /* a drawn row (SAMPLE_DRAW: temperature and the seed's uniform) */
    SAMPLE_USE_TOP_K = 1u << 2,       /* up to max_top_k */
    SAMPLE_USE_TOP_P = 1u << 3,
    SAMPLE_USE_MIN_P = 1u << 4,
    SAMPLE_USE_LOGPROBS =
        1u << 5, /* logprobs with up to max_top_logprobs alternatives (SAMPLE_LOGPROBS rows too) */
    SAMPLE_USE_MASK = 1u << 6, /* a structured-output token mask (no backend's op takes one yet) */
};
struct sample_caps {
    uint32_t uses;            /* SAMPLE_USE_* bits it expresses; 0 without the op sample */
    int32_t max_top_k;        /* SAMPLE_USE_TOP_K: top_k at most (0: any) */
    int32_t max_top_logprobs; /* SAMPLE_USE_LOGPROBS: top_logprobs at most */
};

/* What a backend's memory holds: the memory its weights, KV pool and scratch live in (host RAM for cpu,
 * device memory for a GPU backend). */
struct backend_memory {
    uint64_t total;     /* bytes this process can count on at most (cpu: min(RAM, cgroup limit)) */
    uint64_t available; /* bytes free now; read after load, it excludes what load allocated */
    uint64_t headroom;  /* bytes to leave unused by default (cpu: for the OS); 0: the runtime's default rule,
                           20% of total and at least 2 GiB */
};

/* What differs between backends, for the layers above (which never compare backend names). */
struct backend_caps {
    int32_t default_max_batch_tokens; /* rows per engine step when the user gives none */
    uint64_t weight_types;            /* bit (1ull << enum gguf_dtype) set for each weight matrix type it
                                         computes with (norms and biases are always F32) */
    int weights_mapped;               /* 1: the memory budget counts the model's weight bytes against
                                         memory.available after load (weights read through the file
                                         mapping, paged in as they are touched: cpu); 0: load copied the
                                         weights into backend memory, so available after load already
                                         excludes them */
    int gpu;                          /* 1: runs on a GPU (a run records the GPU's energy, where readable) */
    int hidden_states;                /* 1: forward fills step_batch.hidden (embeddings); 0: a batch with
                                         n_hidden > 0 is an error */
    uint32_t archs;                   /* bit (1u << enum model_arch) set for each architecture its forward
                                         step computes (load refuses the others); 0: not stated */
    uint32_t kv_types;                /* bit (1u << enum kv_type) set for each KV element type its pool and
                                         attention take (kv_alloc refuses the others); 0: not stated */
    double step_knee_rows;            /* about how many rows a step carries before its time doubles (t0 / c
                                         of draft.h's cost line): the prior of the engine's fit, which then
                                         learns the real one; 0: not stated (the engine assumes a CPU's) */
    struct sample_caps sampling;      /* what its op sample expresses (all 0 without the op) */
};

/* Checks a step batch against the contract above for a pool of n_blocks blocks of block_size tokens,
 * positions below max_pos and token ids below n_vocab (hidden rows included: strictly increasing row indices,
 * hidden not NULL when there are any): every backend's forward calls it first, so a bad batch is an error
 * naming the row, sequence or block, never an out-of-bounds access. O(rows + blocks). */
int backend_check_batch(const struct step_batch *b, int32_t n_vocab, int32_t n_blocks, int32_t block_size,
                        int64_t max_pos, struct err *e);

/* Calls on one backend are not thread-safe: one at a time (the backend runs its own threads inside). */
struct backend_ops {
    const char *name;
    /* Binds / uploads the weights of m (m must outlive the backend). */
    int (*load)(void *ctx, const struct model *m, struct err *e);
    /* (Re)allocates the KV pool: n_blocks blocks of block_size tokens of type t. Invalidates all KV. */
    int (*kv_alloc)(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e);
    /* Runs one step; writes logits (n_logits, n_vocab) in logit_rows order. Invariant (CPU): a row's logits
     * are bit-identical whatever else is in the batch. logits NULL (only where the op sample exists): the
     * logits stay in backend memory for sample. Also writes the hidden states of b->hidden_rows into
     * b->hidden where the backend has them (caps.hidden_states; same invariant: bit-identical per row on the
     * CPU); a backend without them fails a batch that asks for any. n_logits may be 0. */
    int (*forward)(void *ctx, const struct step_batch *b, float *logits, struct err *e);
    /* Bytes of scratch memory the backend needs for a step of up to max_rows rows (for memory budgeting). */
    uint64_t (*scratch_bytes)(void *ctx, int32_t max_rows);
    void (*free)(void *ctx);
    /* (optional) Debug check of the backend's own invariant (sizes of its KV pool and scratch). */
    int (*check)(void *ctx, struct err *e);
    /* (optional) Bytes of weight copies the backend allocated at load, beyond the model's file mapping
     * (CPU: the Q8_0/Q4_0/Q4_1 matrices repacked for its kernels), for memory budgeting. */
    uint64_t (*weight_copy_bytes)(void *ctx);
    /* The memory weights, KV and scratch live in, now (callable before or after load). Fails only when it
     * cannot be read. Required of every backend in the registry (the runtime's budget uses it; a test
     * double that only drives the engine may leave it NULL). */
    int (*memory)(void *ctx, struct backend_memory *out, struct err *e);
    /* Fills out; callable right after init. Required like memory. */
    void (*caps)(void *ctx, struct backend_caps *out);
    /* (optional) Resolves the logit rows of the last forward, which was called with logits NULL (so the
     * logits stayed in backend memory): rows (n = that step's n_logits, in logit_rows order). tokens[i] is
     * row i's token when the backend resolved it (a SAMPLE_GREEDY or SAMPLE_DRAW row it drew, a
     * SAMPLE_LOGPROBS row's `token`), and then, for a row with logprobs, logprobs[i] holds them (above); else
     * -1 and row i's logits are at logits + i * n_vocab, unedited (a SAMPLE_HOST row, or one it declined: a
     * backend may decline any row, and the host then does all of it). logprobs (n) may be NULL when no row
     * asks for any. Rows ask only for what caps.sampling states. Callable once per such forward. */
    int (*sample)(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens,
                  float *logits, struct sample_logprobs *logprobs, struct err *e);
    /* (optional) 1 if the last forward paid a one-off cost that the next steps of its shape will not (a CUDA
     * graph captured): the engine leaves that step out of the step times it learns from (draft.h). */
    int (*step_one_off)(void *ctx);
};

struct backend {
    const struct backend_ops *ops;
    void *ctx;
};

/* How to start a backend; fields a backend does not use are ignored. */
/* The precision of a GPU backend's weight matrices (--gpu-weights). AUTO: the file's own precision (BF16 for
 * every type but F32) when its weights fit with room for a useful KV pool, else FP8; the backend says which
 * and why at load. A backend whose weights are the file's own (cpu) takes AUTO only. */
enum backend_weights { BACKEND_WEIGHTS_AUTO = 0, BACKEND_WEIGHTS_BF16, BACKEND_WEIGHTS_FP8, BACKEND_WEIGHTS_N };
/* "auto", "bf16", "fp8"; parse: 0 ok, -1 for any other string. */
const char *backend_weights_name(enum backend_weights w);
int backend_weights_parse(const char *s, enum backend_weights *out);

struct backend_config {
    int n_threads;                /* cpu: <= 0 one per online core */
    int device;                   /* GPU ordinal (default 0) */
    enum backend_weights weights; /* GPU matrices' precision (default AUTO) */
};

/* ---- the registry: backends by name ----
 * A static table of {name, probe, init}, in order of preference (a GPU first, cpu last). "cuda" is listed
 * in every build; without NS_CUDA its probe says the build has none. */

/* Starts a backend by name. name NULL or "auto": the first usable one in order of preference (cuda when
 * built and a usable GPU exists, else cpu). An unknown name, or a backend not built or not usable here,
 * fails with a message naming it and why. On failure b is zeroed. */
int backend_open(const char *name, const struct backend_config *cfg, struct backend *b, struct err *e);
/* 0 if name is NULL, "auto" or a backend built into this binary; otherwise fails with backend_open's
 * message for it. Does not probe the hardware (cheap: for flag parsing). */
int backend_check_name(const char *name, struct err *e);
/* 1 if the backend name is built and usable here; 0 if not, with the reason in why (for `info`). */
int backend_probe(const char *name, char *why, size_t why_cap);
/* The names of the backends built into this binary, in order of preference, e.g. "cuda, cpu" (static). */
const char *backend_list(void);

/* The CPU backend; n_threads <= 0 means one per online core. */
int backend_cpu_init(struct backend *b, int n_threads, struct err *e);
#ifdef NS_CUDA
/* The CUDA backend (backend/cuda.cu). probe: 1 if a usable GPU exists, else 0 with the reason in why. */
int backend_cuda_probe(char *why, size_t why_cap);
int backend_cuda_init(struct backend *b, const struct backend_config *cfg, struct err *e);
#endif
void backend_free(struct backend *b);

#endif
