/* pda — reading bytes against a compiled grammar (grammar.h): the pushdown automaton's configurations.
 *
 * A stack is a list of frames (rule, state), the top frame where the next byte is read, the frames below
 * it the states their rules continue from once the rule above has ended. A configuration is the set of
 * stacks the bytes so far may have reached (grammars can be ambiguous; a JSON schema's anyOf is) plus
 * `accept`: whether the bytes so far are a complete match.
 *
 * Closure: after a byte, a top frame whose state calls rules pushes a frame for each (the caller frame
 * moves to the call's return state; when that state is final-only the caller frame is dropped instead, so
 * right recursion keeps a constant depth), and a top frame whose state accepts pops (the frame below
 * continues, or, at the bottom, the configuration accepts). A frame pushed by a call is "fresh" until it
 * has read a byte and never pops while fresh: grammar.h compiles calls of nullable rules with a separate
 * skip, so this loses nothing, and with no left recursion every closure is finite. Only stacks whose top
 * state reads bytes are kept.
 *
 * Bounds: a stack deeper than PDA_MAX_DEPTH frames and stacks beyond PDA_MAX_STACKS per configuration are
 * dropped (c->overflow is set): the language only ever narrows, so every accepted text still matches.
 *
 * Nodes are immutable and shared between stacks (a stack is a pointer to its top node); they live in an
 * arena released in LIFO order (pda_mark / pda_release), so a depth-first walk over a token trie costs no
 * frees. A configuration is canonical: stacks sorted and unique, so its encoding (pda_encode) is a key
 * for caches and the state a sequence carries between steps.
 *
 * Invariant (pda_check): stacks are sorted by (hash, frames), unique, at most PDA_MAX_DEPTH deep; every
 * frame names a rule and a state of it; the top frame's state reads bytes; only a top frame is fresh.
 */
#ifndef NS_CONSTRAIN_PDA_H
#define NS_CONSTRAIN_PDA_H

#include <stddef.h>
#include <stdint.h>

#include "constrain/grammar.h"
#include "util/err.h"

#define PDA_MAX_DEPTH 128
#define PDA_MAX_STACKS 32

struct pda_node {
    const struct pda_node *parent; /* the frame below, NULL at the bottom */
    uint64_t hash;                 /* of this frame and every frame below */
    int32_t rule, state;
    uint16_t depth; /* frames from the bottom, 1 at the bottom */
    uint8_t fresh;
};

struct pda_config {
    int32_t n;
    uint8_t accept;
    uint8_t overflow; /* a stack was dropped (see Bounds) */
    const struct pda_node *stack[PDA_MAX_STACKS];
};

typedef struct pda_arena pda_arena;

int pda_arena_init(pda_arena **out, struct err *e);
void pda_arena_free(pda_arena *a);
/* LIFO release: every node allocated after pda_mark returned m is freed by pda_release(a, m). */
uint64_t pda_mark(const pda_arena *a);
void pda_release(pda_arena *a, uint64_t m);

/* The configuration before any byte (accept iff the root rule is nullable). -1: out of memory. */
int pda_start(const struct grammar *g, pda_arena *a, struct pda_config *out);
/* The configuration after reading byte b from in (empty and not accepting when b cannot follow). -1: out of
 * memory. in and out must differ. */
int pda_step(const struct grammar *g, pda_arena *a, const struct pda_config *in, uint8_t b,
             struct pda_config *out);
static inline int pda_alive(const struct pda_config *c)
{
    return c->n > 0 || c->accept;
}
/* Nothing can follow: the match is complete. */
static inline int pda_complete(const struct pda_config *c)
{
    return c->n == 0 && c->accept;
}

/* Canonical encoding: byte accept, byte n, then per stack a byte depth and its frames top first, each
 * LEB128(rule * 2 + fresh) and LEB128(state). Returns the length; writes at most cap bytes (call again
 * with a buffer of the returned size when it is larger). */
size_t pda_encode(const struct pda_config *c, uint8_t *buf, size_t cap);
/* Rebuilds a configuration from its encoding, checking it against g (a bad encoding is an error, never a
 * crash). */
int pda_decode(const struct grammar *g, pda_arena *a, const uint8_t *buf, size_t len, struct pda_config *out,
               struct err *e);

/* Debug check of the invariant above. */
int pda_check(const struct grammar *g, const struct pda_config *c, struct err *e);

#endif
