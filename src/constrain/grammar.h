/* grammar — a constraint compiled to the byte level: one deterministic automaton per rule, whose edges
 * read a byte (through the rule's byte classes) or call another rule.
 *
 * The rules together are a recursive transition network: a pushdown automaton whose stack holds, for every
 * rule being matched, the state to continue from (pda.h walks it). A rule that never calls (a regex, a
 * list of choices, a JSON schema without recursion or free-form parts) is a plain DFA.
 *
 * Compilation (grammar_compile): every rule body (expr.h) becomes a Thompson NFA, then a DFA by subset
 * construction over the rule's byte classes (bytes that no set of the rule tells apart share a class). A
 * call of a rule that can match the empty string is compiled as "call it, where it must read at least one
 * byte" plus "skip it", so a call never returns without reading (pda.h relies on this to stop). A rule that
 * can call itself, directly or through others, before reading a byte (left recursion) is refused, as is a
 * rule that is used but never defined.
 *
 * Bounds: GRAMMAR_MAX_NFA states, GRAMMAR_MAX_ITEMS subset-construction items and GRAMMAR_MAX_WORK steps
 * per rule while compiling (so a pattern whose DFA explodes, like ".*" followed by 50 dots, fails fast),
 * GRAMMAR_MAX_STATES
 * DFA states and GRAMMAR_MAX_CELLS transition-table cells over all rules; past them compiling fails with a
 * message that says so (never a loosened automaton).
 *
 * Invariant (grammar_check): every transition and call target is a state of its rule (or -1 for none);
 * every call names a rule; flags agree with the transitions (GRAMMAR_BYTES iff some byte leads somewhere,
 * GRAMMAR_CALLS iff the state has calls, GRAMMAR_FINAL_ONLY iff accepting with neither); calls of a state
 * are sorted by rule, one per rule; no rule calls itself through start states (no left recursion).
 */
#ifndef NS_CONSTRAIN_GRAMMAR_H
#define NS_CONSTRAIN_GRAMMAR_H

#include <stdint.h>

#include "constrain/expr.h"
#include "util/err.h"

#define GRAMMAR_MAX_NFA 400000
#define GRAMMAR_MAX_STATES 200000
#define GRAMMAR_MAX_CELLS (8 << 20)
#define GRAMMAR_MAX_ITEMS (1 << 20) /* NFA states summed over the DFA states of one rule */
#define GRAMMAR_MAX_WORK (16 << 20) /* closure and transition steps of one rule's subset construction */

enum {
    GRAMMAR_ACCEPT = 1,    /* the rule may end here */
    GRAMMAR_BYTES = 2,     /* some byte leads on */
    GRAMMAR_CALLS = 4,     /* the state calls rules */
    GRAMMAR_FINAL_ONLY = 8 /* accepting and nothing leads on: the rule has ended */
};

struct grammar_call {
    int32_t rule; /* the rule called */
    int32_t to;   /* the state of the caller once the called rule has ended */
};

struct grammar_rule {
    char *name;
    uint8_t cls[256]; /* byte -> class */
    int32_t n_cls;
    int32_t n_states; /* state 0 is the start */
    int32_t *next;    /* (n_states, n_cls) the state after a byte of the class, -1: none */
    uint8_t *flags;   /* (n_states) GRAMMAR_* */
    int32_t *call_at; /* (n_states + 1) calls of s: calls[call_at[s] .. call_at[s + 1]) */
    struct grammar_call *calls;
    int nullable; /* the rule matches the empty string */
};

struct grammar {
    int32_t n_rules; /* rule 0 is the root */
    struct grammar_rule *rules;
    int64_t n_states, n_cells; /* totals over all rules */
};

/* Compiles src (rule 0 the root). Errors name the rule ("rule 'item' is left-recursive: item -> item";
 * "rule 'x' is used but not defined"; "... more than N states"). */
int grammar_compile(const struct expr_rules *src, struct grammar **out, struct err *e);
void grammar_free(struct grammar *g);
/* Debug check of the invariant above. O(states * classes + calls). */
int grammar_check(const struct grammar *g, struct err *e);

/* The state after byte b from state s of rule r (-1: none). */
static inline int32_t grammar_next(const struct grammar_rule *r, int32_t s, uint8_t b)
{
    return r->next[(int64_t)s * r->n_cls + r->cls[b]];
}

#endif
