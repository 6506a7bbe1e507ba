/* schema_int — what schema.c and schema_scalar.c share: the compiler's context and the scalar builders. */
#ifndef NS_CONSTRAIN_SCHEMA_INT_H
#define NS_CONSTRAIN_SCHEMA_INT_H

#include <jansson.h>

#include "constrain/expr.h"
#include "constrain/schema.h"
#include "util/err.h"

struct sc_ref {
    char *name;        /* the $ref string */
    int state;         /* 1 compiling, 2 done */
    int recursive;     /* met again while compiling: called as a rule */
    int32_t rule;      /* its rule (recursive ones) */
    struct expr *node; /* what a reference compiles to once done */
};

struct sc {
    struct expr_rules *r;
    const json_t *root;
    struct err *e;
    char path[512]; /* JSON pointer of the schema being compiled, for messages */
    int depth;
    int failed;
    int sub_failed; /* a sub-compiler (regex) left its message in e: sc_fail prefixes it */
    int32_t value_rule, object_rule, array_rule; /* the generic JSON rules, -1 until needed */
    struct expr *ws, *comma, *colon;             /* shared: ws, ws "," ws, ws ":" ws */
    struct sc_ref *refs;
    int n_refs, cap_refs;
    int n_rules_made;
};

/* Sets the error (with the current path) once and returns -1. */
int sc_fail(struct sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* schema_scalar.c */
struct expr *sc_string(struct sc *c, const json_t *s);
struct expr *sc_number(struct sc *c, const json_t *s, int integer);
struct expr *sc_any_value(struct sc *c); /* any JSON value (calls the generic rules) */
struct expr *sc_any_object(struct sc *c);
struct expr *sc_any_array(struct sc *c);
struct expr *sc_json_string(struct sc *c);                   /* any JSON string */
struct expr *sc_literal_json(struct sc *c, const json_t *v); /* v in compact JSON */
int sc_init_shared(struct sc *c);

#endif
