/* constraint — structured output as the engine sees it: a request's constraint, compiled once per distinct
 * constraint, and the automaton state each constrained sequence carries.
 *
 * A constraint_spec is a kind and a canonical text (what the request key hashes): "" for json_object, the
 * schema in compact JSON (keys in the schema's order, which is the order properties are generated in) for
 * json_schema, the pattern for regex, a compact JSON array of strings for choice, the grammar text for
 * grammar. constraint_spec_set checks the source with the kind's front-end (schema keywords, regex and
 * grammar syntax) without building automata, so a bad constraint fails its request line early with a
 * message that names the problem.
 *
 * The cache (one per engine, so per run) compiles each distinct spec once (front-end, then grammar.h) and
 * keeps it while requests use it; failures are remembered too. A sequence's state (constraint_state) is
 * the canonical encoding of its pushdown configuration (pda.h) after the tokens generated so far, so it is
 * a function of those tokens alone: deterministic, independent of batching, nothing to rebuild after a
 * preemption. Masks are cached per (constraint, state) in a table of bounded size (mask_bytes), evicted
 * by a clock; which masks are cached never changes a result.
 *
 * Not thread-safe: one thread uses a cache at a time (the prefetch worker below is the cache's own).
 *
 * Invariant (constraint_cache_check): every compiled entry has a grammar that passes grammar_check or an
 * error message, never both, and a users count >= 0; the mask table's chains reach every used slot
 * exactly once, each in the bucket of its hash.
 */
#ifndef NS_CONSTRAIN_CONSTRAINT_H
#define NS_CONSTRAIN_CONSTRAINT_H

#include <stddef.h>
#include <stdint.h>

#include "constrain/expr.h"
#include "tokenizer/tok.h"
#include "util/err.h"

#define CONSTRAINT_MAX_TEXT (256 * 1024) /* bytes of a constraint's source */
#define CONSTRAINT_MAX_CHOICES 4096
#define CONSTRAINT_MAX_COMPILED 64 /* distinct constraints kept at once */
#define CONSTRAINT_DEFAULT_MASK_BYTES (32u << 20)

enum constraint_kind {
    CONSTRAINT_NONE = 0,
    CONSTRAINT_JSON_OBJECT,
    CONSTRAINT_JSON_SCHEMA,
    CONSTRAINT_REGEX,
    CONSTRAINT_CHOICE,
    CONSTRAINT_GRAMMAR
};

struct constraint_spec {
    enum constraint_kind kind;
    char *text; /* canonical source, owned, NUL-terminated (NULL for NONE) */
    size_t len;
};

/* "json_object", "json_schema", "regex", "choice", "grammar" ("none"). */
const char *constraint_kind_name(enum constraint_kind k);
/* Sets s (freed first) from source text[0..len) of kind k: JSON_SCHEMA takes the schema's JSON text,
 * CHOICE a JSON array of strings, REGEX and GRAMMAR their text, JSON_OBJECT ignores text. On failure s is
 * unchanged and the message names the problem ("unsupported JSON Schema keyword 'oneOf' at /"). */
int constraint_spec_set(struct constraint_spec *s, enum constraint_kind k, const char *text, size_t len,
                        struct err *e);
int constraint_spec_copy(struct constraint_spec *dst, const struct constraint_spec *src, struct err *e);
void constraint_spec_free(struct constraint_spec *s);
/* The expression rules of a spec (its front-end); r is initialised here, freed by the caller. */
int constraint_spec_rules(const struct constraint_spec *s, struct expr_rules *r, struct err *e);

typedef struct constraint_cache constraint_cache;
typedef struct constraint constraint; /* a compiled constraint, owned by its cache */

/* For the first n_tokens tokens of v (the ids a sampler draws from); mask_bytes bounds the mask table
 * (0: CONSTRAINT_DEFAULT_MASK_BYTES). The vocabulary index is built here (O(vocabulary bytes)). */
int constraint_cache_init(const tok_vocab *v, int32_t n_tokens, size_t mask_bytes, constraint_cache **out,
                          struct err *e);
void constraint_cache_free(constraint_cache *c);

/* The compiled constraint of s, compiled now if it is new (the message of a failed compile is the same for
 * every request that uses it). Counts a user until constraint_release. */
int constraint_acquire(constraint_cache *c, const struct constraint_spec *s, constraint **out, struct err *e);
void constraint_release(constraint_cache *c, constraint *k);

struct constraint_state {
    uint8_t *bytes; /* the configuration's encoding (owned) */
    uint32_t len, cap;
    uint8_t accept;   /* the text so far is a complete match */
    uint8_t complete; /* ... and nothing can follow it (or an end-of-generation token was taken) */
};

/* The state before any token. */
int constraint_state_start(constraint_cache *c, constraint *k, struct constraint_state *st, struct err *e);
void constraint_state_free(struct constraint_state *st);
/* The mask of tokens allowed after st (tokmask.h layout; end-of-generation tokens iff st accepts); valid
 * until the next call on c. */
int constraint_mask(constraint_cache *c, constraint *k, const struct constraint_state *st,
                    const uint32_t **mask, struct err *e);
/* Advances st by token t. Returns 1 (st unchanged) when t is not allowed, 0 when advanced. */
int constraint_advance(constraint_cache *c, constraint *k, struct constraint_state *st, int32_t t,
                       struct err *e);
/* Masks computed ahead, off the caller's thread: start computes, on a worker thread owned by the cache,
 * the masks of the states sts[0..n) (of constraints ks) that the cache does not hold (each distinct state
 * once) and returns at once; finish waits for the worker and puts the masks into the cache. The engine
 * starts before its forward step and finishes after it, so the masks its sampling needs are computed while
 * the forward runs. Between the two calls nothing else may use the cache (the worker reads only the
 * immutable grammars and vocabulary index). finish without start does nothing. */
int constraint_prefetch_start(constraint_cache *c, int32_t n, constraint *const *ks,
                              const struct constraint_state *const *sts, struct err *e);
int constraint_prefetch_finish(constraint_cache *c, struct err *e);

/* Sets logits[t] = -inf for every t < n that mask does not allow; returns how many are allowed. */
int32_t constraint_apply_mask(const uint32_t *mask, float *logits, int32_t n);

struct constraint_stats {
    int64_t compiled, compile_failed;
    int64_t masks_computed, mask_hits, mask_evictions, nodes_visited;
    int64_t masks_prefetched;  /* of masks_computed, those computed on the worker thread */
    double t_compile, t_masks; /* seconds (t_masks includes the worker's) */
};
void constraint_cache_stats(const constraint_cache *c, struct constraint_stats *st);
/* Debug check of the invariant above. */
int constraint_cache_check(const constraint_cache *c, struct err *e);

#endif
