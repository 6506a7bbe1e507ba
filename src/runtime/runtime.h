/* runtime — opens the inference stack from one params struct: GGUF file -> model -> vocab -> backend (by
 * name, through the backend registry) -> KV memory budget -> engine. Between the engine and its clients:
 * the CLI commands, jobs, the server and MPI ranks open their stack here, and nothing above this layer
 * picks a backend by name or sizes memory itself.
 *
 *   struct runtime_params p = runtime_default_params();
 *   p.model_path = "model.gguf";
 *   struct runtime rt;
 *   if (runtime_open(&p, &rt, &e)) ... (rt is closed on failure)
 *   ... engine_add(rt.eng, ...), engine_step(rt.eng, ...) ...
 *   runtime_close(&rt);
 *
 * Callers that make their own engines (bench: one per concurrency level; generate: a pool sized for its one
 * request) open in stages instead: runtime_open_model, runtime_open_backend, runtime_plan_kv, then
 * runtime_new_engine as often as they like.
 *
 * The KV budget ("auto"): the backend reports its memory (backend_ops.memory: host RAM for cpu, device
 * memory for a GPU) after the weights are loaded, and
 *     kv_free = available - weights - scratch - headroom - reserve      (0 when that is negative)
 * where weights counts the model's weight bytes only for a backend whose weights are paged in from the
 * file mapping (backend_caps.weights_mapped), scratch is the backend's for a step of max_batch_tokens rows,
 * headroom is the caller's or the backend's default, and reserve is what the caller holds besides the
 * engine in host memory (a run's book of its backlog: counted only when the backend's memory is host RAM,
 * i.e. not caps.gpu). runtime_open caps the pool at what max_seqs sequences (auto: the knee's) of
 * seq_tokens each use (params.seq_tokens, what the workload needs, at most the model's context; the context
 * when 0), rounded up to whole blocks, plus one block a sequence and a quarter more for the prefix cache:
 * more is never touched. A given --kv-memory is held to the same kv_free.
 *
 * Running sequences ("auto", params.max_seqs = RUNTIME_MAX_SEQS_AUTO, the default): at most the backend's
 * knee in sequences (runtime_seq_knee), and at most what the pool holds at seq_tokens (or the context) a
 * sequence. The engine is made with the knee as its max_seqs, the ceiling, and capped at the choice
 * (engine_set_max_seqs), so that a caller who knows the workload's real lengths (a run's plan: jobs/job)
 * can choose again, up to the knee. The pool's cap above counts the knee's sequences. rt->seqs says what
 * was chosen and why (runtime_describe_seqs). A given max_seqs is taken as it is.
 *
 * Invariant after runtime_open_backend: backend_name names the backend that was opened, every weight
 * matrix of the model has a type in caps.weight_types, and ep holds valid engine params but kv_blocks
 * (0 until runtime_plan_kv). After runtime_plan_kv: ep.kv_blocks = budget.kv_blocks, the blocks that
 * budget.kv_bytes holds, and kv_bytes <= kv_free = what its figures leave.
 */
#ifndef NS_RUNTIME_H
#define NS_RUNTIME_H

#include <stdint.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/err.h"

/* kv_memory and headroom: work it out (see the top of this file). */
#define RUNTIME_AUTO UINT64_MAX
/* max_seqs: chosen from the backend's knee and the KV pool (see the top of this file). */
#define RUNTIME_MAX_SEQS_AUTO 0
/* The knee in sequences is this many times the backend's step_knee_rows (t0 / c of a step's cost line
 * t0 + c * rows): a step of 4 t0 / c rows reaches 80% of the throughput the line allows, and twice as many
 * sequences (twice the KV, twice the latency) would gain at most 11% more. */
#define RUNTIME_KNEE_FACTOR 4

/* The flags among these fields (backend .. lookup_adaptive, debug_checks) are rows of runtime/runparam's
 * table: their defaults, flags, ranges, record keys and the copy into engine_params are there. */
struct runtime_params {
    const char *model_path;   /* GGUF file (not copied: must outlive the runtime) */
    const char *backend;      /* NULL or "auto" (default): the best available that runs the model; else "cpu", "cuda" */
    int threads;              /* cpu threads; <= 0 (default): one per online core */
    int device;               /* GPU ordinal (default 0) */
    enum backend_weights gpu_weights; /* a GPU backend's matrices (default AUTO); others take AUTO only */
    uint64_t kv_memory;       /* KV pool bytes; RUNTIME_AUTO (default): the budget from the backend's memory */
    uint64_t headroom;        /* bytes the auto budget leaves unused; RUNTIME_AUTO (default): the backend's */
    uint64_t reserve;         /* host bytes the caller will hold besides the engine (a run's book of its
                                 backlog), taken from the budget on a backend whose memory is host RAM
                                 (default 0) */
    enum kv_type kv_type;     /* default KV_TYPE_F16 */
    int32_t kv_block;         /* tokens per KV block, a power of two (default 16) */
    int32_t max_batch_tokens; /* rows per engine step; 0 (default): the backend's */
    int32_t max_seqs;         /* running sequences at once; RUNTIME_MAX_SEQS_AUTO (default): chosen */
    int64_t seq_tokens;       /* tokens one sequence of the workload can need at most (prompt + generated,
                                 from the caller, e.g. a run's backlog); 0 (default): the model's context */
    int prefix_cache;         /* 1 (default): reuse the KV of shared prompt prefixes */
    int32_t lookup;           /* prompt-lookup decoding: draft tokens per sequence and step, 0 = off (default
                                 ENGINE_DEFAULT_LOOKUP; engine.h) */
    int lookup_adaptive;      /* 1 (default): as many as pay off; 0: every token proposed (measurements) */
    int debug_checks;         /* 1: the engine checks its invariants after every step (tests); default 0 */
};

/* What went into the KV pool's size (for the run record, bench and messages). */
struct runtime_budget {
    int automatic;      /* 1: kv_memory was RUNTIME_AUTO; 0: given */
    int capped;         /* a given kv_memory was more than kv_free: it was cut to kv_free (with a warning) */
    uint64_t total;     /* the backend's memory: all of it */
    uint64_t available; /* free after the weights were loaded */
    uint64_t weights;   /* weight bytes counted against available (0 when load already took them out) */
    uint64_t scratch;   /* the backend's scratch for a step of max_batch_tokens rows */
    uint64_t headroom;  /* left unused */
    uint64_t reserve;   /* held by the caller besides the engine (params.reserve; 0 on a GPU backend) */
    uint64_t kv_free;   /* available - weights - scratch - headroom - reserve; 0 when nothing is left */
    uint64_t kv_bytes;  /* the pool's budget: kv_memory as given (at most kv_free), or kv_free capped */
    int64_t kv_blocks;  /* blocks of kv_block tokens that kv_bytes holds */
    int64_t kv_tokens;  /* kv_blocks * kv_block */
};

/* How many sequences run at once, and why (for the start-up line and the run record). */
struct runtime_seqs {
    int automatic;       /* 1: max_seqs was auto */
    int32_t n;           /* running sequences at once: the given max_seqs, or auto's choice */
    int32_t knee;        /* auto's ceiling: the backend's knee in sequences (runtime_seq_knee) */
    int64_t seq_tokens;  /* auto: the tokens a sequence was counted at (the mean of the window that binds) */
    const char *basis;   /* auto: where seq_tokens comes from ("at the backlog's longest line", "at the
                            model's context", "at the backlog's lengths in planned order": a run's plan) */
};

/* Everything open. Fields are read-only to callers; runtime_close frees them. */
struct runtime {
    struct runtime_params params; /* as given */
    gguf_file *gf;
    struct model *model;
    tok_vocab *vocab;
    struct backend backend;
    const char *backend_name;     /* the backend opened ("cpu", ...): what "auto" chose */
    struct backend_caps caps;
    int threads;                  /* params.threads, or the number of online cores */
    struct engine_params ep;      /* the engine's params (kv_blocks set by runtime_plan_kv) */
    struct runtime_budget budget; /* set by runtime_plan_kv */
    struct runtime_seqs seqs;     /* set by runtime_open */
    engine *eng;                  /* runtime_open's engine; NULL when opened in stages */
};

struct runtime_params runtime_default_params(void);

/* Opens everything: runtime_open_model, runtime_open_backend, runtime_plan_kv with params.kv_memory (auto
 * capped as the top of this file says), rt->seqs, then rt->eng (capped at rt->seqs.n). On failure rt is
 * closed. */
int runtime_open(const struct runtime_params *p, struct runtime *rt, struct err *e);

/* The stages. runtime_open_model zeroes rt, keeps a copy of *p, and opens GGUF -> model -> vocab (a
 * vocabulary larger than token_embd is refused). runtime_open_backend opens params.backend through the
 * registry, refuses a weight type the backend does not compute (naming the tensor), loads the weights and
 * fills rt->ep (max_batch_tokens: the params' or the backend's default; kv_blocks 0). On failure rt holds
 * what was opened: runtime_close releases it, as after success. */
int runtime_open_model(const struct runtime_params *p, struct runtime *rt, struct err *e);
int runtime_open_backend(struct runtime *rt, struct err *e);
/* Sizes the KV pool (after runtime_open_backend) from the backend's memory: kv_free (params.headroom and
 * params.reserve taken out) capped at cap bytes (UINT64_MAX: no cap) for RUNTIME_AUTO; kv_memory bytes as
 * given, but never more than kv_free (a larger one is cut to kv_free, with a warning naming the figures:
 * memory is a budget, not a hope). Fills rt->budget and rt->ep.kv_blocks. Fails when the memory cannot be
 * read, or when nothing is left for the KV cache (the message gives the figures). A given kv_memory too
 * small for one block is not an error here: engine_init refuses a pool of 0 blocks. */
int runtime_plan_kv(struct runtime *rt, uint64_t kv_memory, uint64_t cap, struct err *e);
/* A new engine over rt's model, backend and vocab with params ep (usually rt->ep, adjusted). The engine
 * (re)allocates the backend's KV pool, so only one engine per runtime may be alive at a time; free it
 * with engine_free before the next or before runtime_close. */
int runtime_new_engine(struct runtime *rt, const struct engine_params *ep, engine **out, struct err *e);

/* 0 if the backend computes every weight matrix type of m (caps->weight_types); else fails naming the first
 * tensor it does not and the types it does. (runtime_open_backend runs it before loading.) */
int runtime_check_weight_types(const struct model *m, const struct backend_caps *caps, const char *backend_name,
                               struct err *e);

/* Debug check of the invariant at the top of this file and of the budget's arithmetic (tests call it after
 * each stage). */
int runtime_check(const struct runtime *rt, struct err *e);

/* The backend's knee in sequences: RUNTIME_KNEE_FACTOR x caps->step_knee_rows (DRAFT_PRIOR_KNEE, a CPU's,
 * where the backend states none), in [1, max_batch_tokens] (a step's rows) and at most 4096. */
int32_t runtime_seq_knee(const struct backend_caps *caps, int32_t max_batch_tokens);

/* s for n_fit sequences of seq_tokens each from basis: auto's choice is the knee or n_fit, the smaller. */
void runtime_seqs_fit(struct runtime_seqs *s, int32_t n_fit, int64_t seq_tokens, const char *basis);

/* The choice for start-up lines: "max-seqs 384 (auto: KV for 384 x 1,344 tokens (BASIS) fits 58.9 GiB;
 * cuda knee 512)", "max-seqs 16 (auto: cpu knee 16; KV for 16 x 80 tokens (BASIS) fits 1.2 MiB)",
 * "max-seqs 64 (given)". kv_bytes: the pool's. */
void runtime_describe_seqs(const struct runtime_seqs *s, const char *backend, uint64_t kv_bytes, char *out,
                           size_t cap);

/* One line for start-up logs: "cpu backend, 4 threads; KV pool 4096 tokens (256 blocks x 16, f16, 8.0 MiB)". */
void runtime_describe(const struct runtime *rt, char *out, size_t cap);

/* Frees whatever rt holds (engine, backend, vocab, model, GGUF) and zeroes rt; safe on a zeroed runtime. */
void runtime_close(struct runtime *rt);

#endif
