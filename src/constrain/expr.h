/* expr — the expression trees every constraint front-end produces: byte sets, concatenation, alternation,
 * bounded and unbounded repetition, calls of named rules, and separated lists with optional items (JSON
 * object members). A grammar (struct expr_rules) is a list of named rules, rule 0 the root; a rule's body is
 * one tree. grammar.c turns the rules into byte automata.
 *
 * Everything is byte-level: text is UTF-8, and a set of code points becomes an alternation of UTF-8 byte
 * sequences (expr_from_cpset). Inside a JSON string the code points that JSON must escape (quote,
 * backslash, control characters) become their escape sequences instead (json_escape = 1).
 *
 * Memory: nodes live in one pool (struct expr_pool), freed at once by expr_rules_free. The pool has a node
 * budget: a constructor that would pass it (or cannot allocate) returns NULL and marks the pool failed;
 * constructors take NULL children and return NULL, so a front-end checks once at the end (expr_rules_error).
 *
 * Invariant (expr_check): every node's children are non-NULL; REPEAT has 0 <= min <= max (or max
 * EXPR_INF); CALL names a rule id below n; SEPLIST has a separator and one required flag per item.
 */
#ifndef NS_CONSTRAIN_EXPR_H
#define NS_CONSTRAIN_EXPR_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define EXPR_INF INT32_MAX       /* REPEAT without an upper bound */
#define EXPR_MAX_NODES (1 << 20) /* node budget of one grammar */
#define EXPR_MAX_RULES 4096
#define EXPR_MAX_CP 0x10FFFF

enum expr_op {
    EXPR_EMPTY,   /* the empty string */
    EXPR_NOTHING, /* matches nothing (an empty class) */
    EXPR_BYTES,   /* one byte of set */
    EXPR_CAT,     /* kids in order */
    EXPR_ALT,     /* one of kids */
    EXPR_REPEAT,  /* kids[0] min..max times */
    EXPR_CALL,    /* the rule `rule` */
    EXPR_SEPLIST  /* kids in order, each present or (if !required[i]) absent, sep between present ones */
};

struct expr_set {
    uint32_t w[8]; /* bit b of w[b >> 5]: byte b is in the set */
};

struct expr {
    enum expr_op op;
    int32_t n_kids;
    struct expr **kids;  /* (n_kids) */
    struct expr_set set; /* BYTES */
    int32_t min, max;    /* REPEAT */
    int32_t rule;        /* CALL */
    uint8_t *required;   /* SEPLIST (n_kids) */
    struct expr *sep;    /* SEPLIST */
};

struct expr_pool;

/* A grammar: named rules, rule 0 the root. Owns its pool and names. */
struct expr_rules {
    struct expr_pool *pool;
    int32_t n, cap;
    char **names;         /* (n) owned */
    struct expr **bodies; /* (n) NULL until defined */
};

int expr_rules_init(struct expr_rules *r, struct err *e);
void expr_rules_free(struct expr_rules *r);
/* The id of rule `name` (len bytes), added undefined if new; -1 when the pool failed or EXPR_MAX_RULES. */
int32_t expr_rule_id(struct expr_rules *r, const char *name, size_t len);
/* 0 unless the pool failed; then a message ("... too large: more than N expression nodes"). */
int expr_rules_error(const struct expr_rules *r, const char *what, struct err *e);
/* Debug check of the invariant above over every defined rule. */
int expr_check(const struct expr_rules *r, struct err *e);

/* Constructors (NULL on failure, see above). Lists are copied. */
struct expr *expr_empty(struct expr_rules *r);
struct expr *expr_nothing(struct expr_rules *r);
struct expr *expr_bytes(struct expr_rules *r, const struct expr_set *s);
struct expr *expr_byte_range(struct expr_rules *r, uint8_t lo, uint8_t hi);
struct expr *expr_literal(struct expr_rules *r, const char *bytes, size_t n);
struct expr *expr_str(struct expr_rules *r, const char *s); /* expr_literal of a C string */
struct expr *expr_cat(struct expr_rules *r, struct expr *const *kids, int32_t n);
struct expr *expr_alt(struct expr_rules *r, struct expr *const *kids, int32_t n);
struct expr *expr_cat2(struct expr_rules *r, struct expr *a, struct expr *b);
struct expr *expr_cat3(struct expr_rules *r, struct expr *a, struct expr *b, struct expr *c);
struct expr *expr_alt2(struct expr_rules *r, struct expr *a, struct expr *b);
struct expr *expr_repeat(struct expr_rules *r, struct expr *kid, int32_t min, int32_t max);
struct expr *expr_opt(struct expr_rules *r, struct expr *kid); /* kid{0,1} */
struct expr *expr_call(struct expr_rules *r, int32_t rule);
struct expr *expr_seplist(struct expr_rules *r, struct expr *const *kids, const uint8_t *required, int32_t n,
                          struct expr *sep);

void expr_set_add(struct expr_set *s, unsigned lo, unsigned hi);
int expr_set_has(const struct expr_set *s, unsigned b);

/* Sets of code points: sorted, disjoint, non-adjacent ranges within [0, EXPR_MAX_CP]. */
struct expr_cpset {
    int32_t n, cap;
    uint32_t *lo, *hi;
};
#define EXPR_CPSET_MAX 4096 /* ranges */

void expr_cpset_free(struct expr_cpset *s);
/* Adds [lo, hi] (lo <= hi <= EXPR_MAX_CP) and normalizes; -1 on allocation failure or too many ranges. */
int expr_cpset_add(struct expr_cpset *s, uint32_t lo, uint32_t hi);
/* Replaces s by its complement within [0, EXPR_MAX_CP]. */
int expr_cpset_negate(struct expr_cpset *s);
/* The code points of s (surrogates U+D800..U+DFFF never match) as UTF-8 byte sequences. json_escape: inside
 * a JSON string, so '"', '\\' and U+0000..U+001F match as their escape (\", \\, \n, \t, \r, \b, \f,
 * \u00XX) instead of raw. */
struct expr *expr_from_cpset(struct expr_rules *r, const struct expr_cpset *s, int json_escape);
/* One code point as expr_from_cpset would match it. */
struct expr *expr_codepoint(struct expr_rules *r, uint32_t cp, int json_escape);

#endif
