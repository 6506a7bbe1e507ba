/* jinja — a sandboxed interpreter for the Jinja subset that chat templates are written in.
 *
 * A model's tokenizer.chat_template is a Jinja2 template. Hugging Face transformers (and vLLM through it)
 * renders it with an ImmutableSandboxedEnvironment configured with trim_blocks and lstrip_blocks, the
 * loopcontrols extension, raise_exception(), and a tojson filter that keeps key order and non-ASCII text.
 * This module compiles such a template once into a tree (jinja_compile) and renders it (jinja_render) with
 * variables given as a JSON object, so a prompt is the text the model's authors intended, byte for byte.
 *
 * The language (what real templates use; see jinja_int.h for the full list):
 *   text, {{ expr }}, {# comment #}, {% raw %}; whitespace control {%- -%} {{- -}} {#- -#} and {%+ +%};
 *   trim_blocks (the newline after a block tag goes) and lstrip_blocks (blanks before a block tag on its
 *   own line go); one trailing newline of the template goes (Jinja's keep_trailing_newline = False)
 *   statements: if/elif/else, for (tuple targets, an `if` clause, else, loop.*), set (names, ns.attr,
 *   tuples, block set), macro (defaults, keyword arguments), filter blocks, with, break/continue,
 *   generation (HF's marker block: rendered as is)
 *   values: none, bool, int, float, string, list/tuple, dict, namespace(); Python semantics for operators,
 *   truthiness, printing (None, True, ['a', 1]) and comparison; undefined is Jinja's default Undefined
 *   (prints as "", is falsy and iterates as empty; an attribute of it is an error)
 *   filters, tests, string/dict methods and the globals range(), namespace(), dict(), raise_exception()
 *
 * Sandbox: a template reads only the variables it is given and its own values. It has no access to files,
 * the environment or the clock (strftime_now is not defined, so templates fall back to their fixed date:
 * a prompt must not depend on the day it is rendered). Lists and dicts are immutable (as in HF's
 * ImmutableSandboxedEnvironment); only namespace() objects take assignments. A render is bounded by
 * jinja_limits: evaluation steps (time), output bytes, memory and nesting depth; passing one is an error
 * that says which, never a crash or a hang. Errors name the template position as "line L:C".
 *
 * Not supported (a compile error names them): include/import/extends/block (no file access), call
 * blocks, recursive loops.
 */
#ifndef NS_TOKENIZER_JINJA_H
#define NS_TOKENIZER_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/err.h"

typedef struct jinja_template jinja_template;

struct jinja_limits {
    uint64_t max_steps; /* evaluation steps: one per node evaluated, plus the per-item work of builtins */
    size_t max_output;  /* bytes of output, and of any captured block or macro result */
    size_t max_memory;  /* bytes the values of one render may allocate */
    int max_depth;      /* nesting of evaluation: expressions, statements and macro calls */
};

/* 10^7 steps, 1 MiB of output, 64 MiB of memory, depth 200. */
struct jinja_limits jinja_default_limits(void);

/* Compiles the template text src[0..len) (any bytes but NUL). *out is owned by the caller (jinja_free).
 * A syntax error says what and where ("line 3:14: ..."); nothing is allocated then. */
int jinja_compile(const char *src, size_t len, jinja_template **out, struct err *e);
void jinja_free(jinja_template *t);

/* Debug check of a compiled template's invariant: its tree is well formed (every node has the children its
 * kind needs, assignment targets are names, filters and tests are bound to their own names, break/continue
 * are inside a for, every text lies in the source). 0, or -1 naming the first bad node. O(nodes). */
int jinja_check(const jinja_template *t, struct err *e);

/* "jinja:" and the SHA-256 of the source text in hex: names the template (e.g. in store settings). */
const char *jinja_id(const jinja_template *t);

/* jinja_render's status when the template called raise_exception(msg): e holds msg. */
#define JINJA_RAISED (-2)

/* Renders t with the variables of the JSON object vars (borrowed; each key is a variable: objects become
 * dicts with their key order, arrays lists). lim may be NULL (defaults). On success *out is a malloc'd,
 * NUL-terminated text of *n_out bytes with no NUL inside (n_out may be NULL). Returns 0, JINJA_RAISED,
 * or -1 with e saying what failed and where. t is not modified: renders may run concurrently. */
int jinja_render(const jinja_template *t, const json_t *vars, const struct jinja_limits *lim, char **out,
                 size_t *n_out, struct err *e);

#endif
