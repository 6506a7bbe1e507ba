/* lookup — the n-gram index of one sequence, for prompt-lookup decoding: where each 1-, 2- and 3-gram of
 * the sequence's tokens (prompt, then generated) last occurred, so that the tokens that followed it there can
 * be proposed as a draft of what comes next. No model, no sampling: the engine verifies every draft token
 * with the sampler and keeps only what the sampler agrees with, so a bad draft costs rows, never results.
 *
 * The index reads the caller's token array and copies none of it: tokens[0 .. n_indexed) must not change
 * between calls (a sequence's tokens are final once appended). lookup_update indexes the tokens added since
 * the last call, each once: O(1) expected per token (open addressing; a table half full is grown to a quarter
 * load), never a scan of the sequence per step.
 *
 * Proposal: when every token appended since the last proposal equals the token its draft was copied from
 * (the sequence went on copying that source), the draft continues from where the copy has got to. Else, for
 * n = 3, 2, 1 (longest first), the n-gram that ends the sequence is looked up; at its most recent earlier
 * occurrence, the tokens that followed it are the draft. (A text that repeats its short n-grams, as prose
 * does, has several earlier occurrences of them; the most recent one is often not the one being copied, and
 * the copy's own position tells them apart.) A draft may run past the end of the known tokens into itself
 * (the copy source then lies in the draft already proposed), so a repeating pattern extends periodically.
 */
#ifndef NS_ENGINE_LOOKUP_H
#define NS_ENGINE_LOOKUP_H

#include <stdint.h>

#include "util/err.h"

#define LOOKUP_MAX_N 3 /* longest n-gram matched */

typedef struct lookup lookup;

/* An empty index (NULL on out of memory). */
lookup *lookup_new(void);
void lookup_free(lookup *ix);

/* Indexes tokens[n_indexed .. n_tokens) (n_tokens >= the tokens indexed so far). 0 ok, -1 out of memory (the
 * index then still holds what it held: a later call may try again). */
int lookup_update(lookup *ix, const int32_t *tokens, int32_t n_tokens);
/* Tokens indexed so far. */
int32_t lookup_n_indexed(const lookup *ix);

/* Proposes up to max_draft tokens (into draft): the continuation of the last proposal's source while the
 * tokens since then followed it (*match_n = 0), else what follows the longest n-gram (n <= LOOKUP_MAX_N)
 * ending tokens[0 .. n_tokens) that also occurred earlier (*match_n = n; match_n may be NULL). Returns the
 * number proposed: 0 when neither applies. Needs lookup_update(ix, tokens, n_tokens) first. Remembers
 * where the draft was copied from, for the next call. O(max_draft + LOOKUP_MAX_N + the tokens appended
 * since the last proposal) expected. */
int32_t lookup_propose(lookup *ix, const int32_t *tokens, int32_t n_tokens, int32_t max_draft, int32_t *draft,
                       int32_t *match_n);

/* Debug check of the invariant at the top of lookup.c against the tokens it indexed. O(n_indexed). */
int lookup_check(const lookup *ix, const int32_t *tokens, struct err *e);

#endif
