/* schema — JSON Schema (a stated subset) and "any JSON object" to expression rules.
 *
 * Supported (the README lists it for users): type (one or a list), enum, const, properties, required,
 * additionalProperties (false, true, or a schema for objects without properties: a map), items,
 * prefixItems, minItems, maxItems, minLength, maxLength, pattern (regex.h, searched as JSON Schema says),
 * format (date, time, date-time, uuid, email, ipv4), minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum on integers (exact), minimum / maximum with integer values on numbers, anyOf, allOf
 * with one member, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed), and the
 * boolean schemas. Annotations (title, description, default, examples, $schema, $id, $comment, $defs,
 * definitions, readOnly, writeOnly, deprecated) and "x-" extensions are ignored; any other keyword, and
 * uniqueItems: true, fails with a message that names it and where it is ("unsupported JSON Schema keyword
 * 'oneOf' at /properties/kind"). Nothing is loosened: what is generated always validates.
 *
 * What is generated: properties in the schema's order, only those listed (a required name that properties
 * does not describe takes any value); whitespace before the document and between tokens at most
 * SCHEMA_MAX_WS characters of space, tab and newline, none after it; numbers without leading zeros, at most
 * 18 integer digits, 16 fraction digits and 2 exponent digits (no exponent when bounded); strings as JSON
 * escapes them; enum and const values in compact JSON. Objects and arrays nested in array items and
 * recursive $refs are rules of their own; the rest is inlined into one automaton.
 */
#ifndef NS_CONSTRAIN_SCHEMA_H
#define NS_CONSTRAIN_SCHEMA_H

#include <jansson.h>

#include "constrain/expr.h"
#include "util/err.h"

#define SCHEMA_MAX_WS 16
#define SCHEMA_MAX_DEPTH 64
#define SCHEMA_MAX_LENGTH 10000 /* maxLength / minLength / minItems / maxItems bounds */

/* Compiles schema into r (initialised, empty): rule 0 matches exactly the JSON documents generated for it. */
int schema_compile(const json_t *schema, struct expr_rules *r, struct err *e);
/* Rule 0 matches any JSON object (response_format {"type": "json_object"}). */
int schema_any_object(struct expr_rules *r, struct err *e);

#endif
