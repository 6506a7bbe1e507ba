/* regex — regular expressions (the common subset of Python's re, JavaScript and RE2) to expressions.
 *
 * Supported: literals (UTF-8), '.', classes [a-z] [^...] with ranges and escapes, \d \D \w \W \s \S, the
 * escapes \n \t \r \f \v \0 \xHH \uHHHH \u{H..} and any escaped punctuation, groups ( ) (?: ) (?P<name> )
 * (?<name> ), alternation |, quantifiers * + ? {n} {n,} {n,m} (a lazy '?' after one is accepted: it does
 * not change what matches), '^' at the start and '$' at the end of a top-level alternative. Refused with a
 * message naming the construct and its offset: backreferences, lookaround, word boundaries (\b \B),
 * possessive quantifiers, inline flags, \p{...}, POSIX classes, anchors elsewhere, counts above
 * REGEX_MAX_COUNT, nesting deeper than REGEX_MAX_DEPTH. '.' is any character but "\n"; \w \d \s are ASCII.
 *
 * Two uses: a whole output (guided_regex: the text must match entirely, anchors are redundant), and the
 * content of a JSON string (JSON Schema "pattern", REGEX_JSON_STRING): characters are matched as they are
 * written inside a JSON string (a quote as \", a newline as \n, ...), and the pattern is searched for, as
 * JSON Schema says: an alternative without '^' may be preceded, one without '$' followed, by any
 * characters.
 */
#ifndef NS_CONSTRAIN_REGEX_H
#define NS_CONSTRAIN_REGEX_H

#include <stddef.h>

#include "constrain/expr.h"
#include "util/err.h"

#define REGEX_MAX_COUNT 1000
#define REGEX_MAX_DEPTH 200
#define REGEX_MAX_BYTES 16384

enum { REGEX_JSON_STRING = 1 };

/* Parses pattern[0..len) into *out (an expression of r). */
int regex_parse(struct expr_rules *r, const char *pattern, size_t len, int flags, struct expr **out,
                struct err *e);

/* Shared with the grammar parser (gbnf.c). Both read s[*at..len) and advance *at; errors name the offset.
 * regex_parse_class: a class starting at '[' into a code point set (negation applied).
 * regex_parse_escape: an escape after its backslash (*at is just past it) into a code point set (one code
 * point, or a class such as \d). */
int regex_parse_class(const char *s, size_t len, size_t *at, struct expr_cpset *out, struct err *e);
int regex_parse_escape(const char *s, size_t len, size_t *at, struct expr_cpset *out, struct err *e);

#endif
