/* tokmask — which tokens of a vocabulary a grammar configuration allows.
 *
 * The vocabulary index (tokmask_vocab, built once per vocabulary) holds every token's bytes as the engine
 * appends them to the text (tok_token_bytes without special rendering) in a trie laid out in preorder, so
 * a subtree is a contiguous range of nodes. A mask walks the trie once against the configuration: a node
 * is a byte read from its parent's configuration (pda_step), a dead configuration skips the whole subtree,
 * and the tokens ending at a live node are allowed. Tokens sharing a prefix share the work, so the cost
 * is the number of trie nodes whose prefix the grammar can still read — a few hundred where only
 * punctuation may follow, most of the trie inside a free-form string.
 *
 * End-of-generation tokens are outside the trie: allowed exactly when the configuration accepts. Tokens
 * with no bytes (control tokens) and tokens longer than TOKMASK_MAX_TOKEN_BYTES are never allowed.
 *
 * A mask is a bitset of tokmask_words() 32-bit words: bit t of word t / 32 is token t.
 *
 * Invariant (tokmask_check): nodes are in preorder (depth of node i + 1 is at most depth(i) + 1; a
 * subtree [i, end(i)) holds exactly the nodes below i); the bytes along the path to a node are the bytes
 * of each token listed at it; every token with bytes is listed exactly once.
 */
#ifndef NS_CONSTRAIN_TOKMASK_H
#define NS_CONSTRAIN_TOKMASK_H

#include <stdint.h>

#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "tokenizer/tok.h"
#include "util/err.h"

#define TOKMASK_MAX_TOKEN_BYTES 1024

typedef struct tokmask_vocab tokmask_vocab;

/* Indexes the first n_tokens tokens of v (n_tokens <= tok_n_vocab(v)). O(total token bytes * log). */
int tokmask_vocab_init(const tok_vocab *v, int32_t n_tokens, tokmask_vocab **out, struct err *e);
void tokmask_vocab_free(tokmask_vocab *tv);
int32_t tokmask_n_tokens(const tokmask_vocab *tv);
int32_t tokmask_words(const tokmask_vocab *tv);
int64_t tokmask_n_nodes(const tokmask_vocab *tv);
/* The bytes of token t (*n = 0 for tokens outside the trie); 1 for an end-of-generation token. */
const uint8_t *tokmask_token(const tokmask_vocab *tv, int32_t t, int32_t *n, int *eog);

/* Fills mask (tokmask_words words) for configuration c of g; uses arena a for scratch (released before
 * returning). *n_visited (may be NULL) gets the trie nodes stepped. -1: out of memory. */
int tokmask_compute(const tokmask_vocab *tv, const struct grammar *g, pda_arena *a,
                    const struct pda_config *c, uint32_t *mask, int64_t *n_visited);

/* Debug check of the invariant above. O(total token bytes). */
int tokmask_check(const tokmask_vocab *tv, struct err *e);

#endif
