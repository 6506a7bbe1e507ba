/* engine_flags — the engine flags that `run` and `bench` share, and opening the whole stack
 * (GGUF -> model -> vocab -> backend -> KV budget -> engine) from them.
 *
 *   --backend NAME        cpu (default: the best available; only cpu is built without CUDA)
 *   --threads N, -t N     CPU threads (default: one per core)
 *   --kv-memory SIZE      KV pool budget, e.g. 512M, 2G, or "auto" (default): what the machine has left
 *                         after weights, scratch and headroom (util/sysmem), capped at what max_seqs
 *                         sequences of the full context can use twice over (the rest would never be touched)
 *   --headroom SIZE       memory left to the OS by "auto" (default: 20% of RAM, at least 2 GiB)
 *   --kv-type T           f32, f16 (default), q8_0
 *   --kv-block N          tokens per KV block, a power of two (default 16)
 *   --max-batch-tokens N  rows per engine step (default: the backend's, cpu 512)
 *   --max-seqs N          running sequences at once (default 64)
 *   --no-prefix-cache     turn the prefix cache off
 */
#ifndef NS_CLI_ENGINE_FLAGS_H
#define NS_CLI_ENGINE_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/err.h"

struct engine_flags {
    const char *backend;      /* NULL: best available */
    int threads;              /* <= 0: one per core */
    const char *kv_memory;    /* "auto" or a size */
    const char *headroom;     /* NULL: default */
    enum kv_type kv_type;
    int32_t kv_block;
    int32_t max_batch_tokens; /* 0: the backend's default */
    int32_t max_seqs;
    int prefix_cache;
};

void engine_flags_defaults(struct engine_flags *f);
/* If argv[*i] is an engine flag, consumes it (and its value: *i advances) and returns 1; returns 0 when it
 * is not one; -1 on a bad or missing value (the message is printed as "nightshift <cmd>: ..."). */
int engine_flags_parse(struct engine_flags *f, const char *cmd, int argc, char **argv, int *i);
/* The help lines above, for a command's --help. */
void engine_flags_usage(FILE *out);
/* Parses a decimal integer in [lo, hi] for flag; on failure prints "CMD: FLAG expects an integer in [LO, HI],
 * got 'S'" through cli_error and returns -1. Shared by the subcommands' own flags. */
int engine_flags_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* Parses a non-negative decimal integer for flag; on failure prints "CMD: FLAG expects a non-negative integer,
 * got 'S'" through cli_error and returns -1. */
int engine_flags_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* The effective flags as JSON (for run records). */
json_t *engine_flags_json(const struct engine_flags *f);

/* Everything a run needs, opened from a model path and the flags. */
struct engine_stack {
    gguf_file *gf;
    struct model *model;
    tok_vocab *vocab;
    struct backend backend;
    engine *eng;
    struct engine_params ep;
    uint64_t kv_bytes;        /* the pool's size */
    int threads;              /* resolved */
    const char *backend_name;
};

/* Opens the whole stack: engine_stack_open_model, engine_stack_open_backend, the KV budget from f->kv_memory
 * ("auto": engine_stack_auto_budget, capped at what max_seqs sequences of the full context can use twice
 * over), then the engine. On failure s is closed. */
int engine_stack_open(const char *model_path, const struct engine_flags *f, struct engine_stack *s, struct err *e);
/* The parts without an engine (for callers that make their own, like bench). engine_stack_open_model zeroes s
 * and opens GGUF -> model -> vocab; engine_stack_open_backend then starts the backend (s->threads: f's or one
 * per core), loads the weights and fills s->ep from f (kv_blocks left 0). On failure s holds what was opened:
 * engine_stack_close releases it, as after success. */
int engine_stack_open_model(const char *model_path, struct engine_stack *s, struct err *e);
int engine_stack_open_backend(const struct engine_flags *f, struct engine_stack *s, struct err *e);

/* The `--kv-memory auto` budget (bytes) and what went into it (sysmem_auto_kv_bytes). */
struct engine_stack_budget {
    uint64_t kv_bytes;  /* available - weights - scratch - headroom; 0 when nothing is left */
    uint64_t available; /* sysmem_available() */
    uint64_t weights;   /* model_weight_bytes() */
    uint64_t scratch;   /* the backend's scratch at s->ep.max_batch_tokens rows */
    uint64_t headroom;  /* f->headroom, or the default */
};
/* Fills a for the stack's model and backend (after engine_stack_open_backend) and f->headroom; no cap by
 * max_seqs. Fails when memory cannot be read or f->headroom does not parse. */
int engine_stack_auto_budget(const struct engine_stack *s, const struct engine_flags *f, struct engine_stack_budget *a,
                             struct err *e);
/* Frees whatever s holds (engine, backend, vocab, model, GGUF) and zeroes s; safe on a zeroed stack. */
void engine_stack_close(struct engine_stack *s);

#endif
