/* gbnf — grammar text (the GBNF dialect of EBNF that llama.cpp users know) to expression rules.
 *
 *     root   ::= answer ("," answer)*        # the start rule is named root
 *     answer ::= "yes" | "no" | [0-9]+ ws?
 *     ws     ::= [ \t\n]{1,4}
 *
 * A rule is `name ::= alternatives`; names are [A-Za-z0-9_-]+; a rule runs on (across lines) until the
 * next `name ::=`. Items: "literal" (escapes \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH), [class] and [^class]
 * (as in regex.h), '.', a rule name, ( group ); each may be followed by * + ? {m} {m,} {m,n}. Comments run
 * from '#' to the end of the line. A rule used but not defined, a rule defined twice, a missing root rule
 * and left recursion (grammar.h) are errors that name the rule.
 */
#ifndef NS_CONSTRAIN_GBNF_H
#define NS_CONSTRAIN_GBNF_H

#include <stddef.h>

#include "constrain/expr.h"
#include "util/err.h"

#define GBNF_MAX_BYTES (64 * 1024)

/* Parses text[0..len) into r (initialised, empty): rule 0 is `root`. Errors name the line. */
int gbnf_parse(const char *text, size_t len, struct expr_rules *r, struct err *e);

#endif
