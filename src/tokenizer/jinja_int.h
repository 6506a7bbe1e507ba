/* jinja_int.h — what the parts of the Jinja interpreter share (private to src/tokenizer/jinja*.c).
 *
 *   jinja_lex.c     template text -> tokens, whitespace control applied to the text between tags
 *   jinja_parse.c   tokens -> tree (struct jinja_node), Jinja2's grammar and operator precedence
 *   jinja_value.c   arena, values, printing (str, repr, tojson), comparison, JSON -> values
 *   jinja_eval.c    expressions and statements: scopes, loops, macros, the sandbox's budgets
 *   jinja_filter.c  filters and tests
 *   jinja_method.c  string / dict / list methods and the global functions
 *   jinja.c         the public API (compile, render)
 *
 * Ownership: a compiled template owns its normalized source and an arena holding the tree and every
 * string literal. A render owns an arena (capped at jinja_limits.max_memory) holding every value it
 * makes; values are immutable once made (a namespace's dict is the one exception), so they are shared
 * freely and never freed one by one. Strings from the JSON variables point into the caller's json_t.
 */
#ifndef NS_TOKENIZER_JINJA_INT_H
#define NS_TOKENIZER_JINJA_INT_H

#include <stdint.h>

#include "tokenizer/jinja.h"

/* ---------- arena: bump allocation in chunks, all freed at once ---------- */

struct jinja_chunk;
struct jinja_arena {
    struct jinja_chunk *head;
    size_t used; /* bytes of chunks allocated */
    size_t cap;  /* limit on used (0: none) */
};

/* n zeroed bytes, 16-aligned; NULL when past the cap or out of memory. */
void *jinja_alloc(struct jinja_arena *a, size_t n);
void jinja_arena_free(struct jinja_arena *a);

/* ---------- tokens ---------- */

enum jinja_tok_type {
    JT_EOF,
    JT_TEXT,        /* text between tags, whitespace control already applied (p, n into the source) */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,        /* p, n into the source */
    JT_STRING,      /* p, n: the decoded literal (arena); adjacent literals stay separate tokens */
    JT_INT,         /* i */
    JT_FLOAT,       /* f */
    JT_OP,          /* op */
};

/* clang-format off */
enum jinja_op {
    JO_NONE,
    /* binary operators of expressions (also JN_BINOP's op) */
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_CONCAT,
    JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOT_IN,
    /* punctuation */
    JO_LBRACKET, JO_RBRACKET, JO_LPAREN, JO_RPAREN, JO_LBRACE, JO_RBRACE,
    JO_ASSIGN, JO_DOT, JO_COLON, JO_PIPE, JO_COMMA, JO_SEMICOLON,
};
/* clang-format on */

struct jinja_tok {
    uint8_t type, op;
    uint32_t line, col; /* 1-based, in the normalized source */
    const char *p;
    size_t n;
    int64_t i;
    double f;
};

/* Splits the normalized source src[0..len) into tokens (*toks malloc'd, ending with JT_EOF; string
 * literals decoded into mem). An error names the line and column. */
int jinja_lex(const char *src, size_t len, struct jinja_arena *mem, struct jinja_tok **toks, size_t *n_toks,
              struct err *e);

/* ---------- values ---------- */

enum jinja_type {
    JV_UNDEF, /* Jinja's Undefined: "", falsy, iterates as empty; u.node says where it came from */
    JV_NONE,
    JV_BOOL,  /* u.i 0 or 1 */
    JV_INT,   /* u.i */
    JV_FLOAT, /* u.f */
    JV_STR,   /* u.s, n bytes of UTF-8 */
    JV_LIST,  /* u.l; tuple set: a Python tuple */
    JV_DICT,  /* u.d, keys in insertion order */
    JV_NS,    /* namespace(): u.d, the one mutable value */
    JV_LOOP,  /* the `loop` of a for statement: u.loop */
    JV_MACRO, /* u.node, the JN_MACRO */
    JV_FUNC,  /* a global function: u.i, its index in jinja_method.c's table */
};

struct jinja_val {
    uint8_t type;
    uint8_t tuple;
    uint32_t n;
    union {
        int64_t i;
        double f;
        const char *s;
        struct jinja_list *l;
        struct jinja_dict *d;
        struct jinja_loop *loop;
        const struct jinja_node *node;
    } u;
};

struct jinja_list {
    uint32_t n;
    struct jinja_val *items;
};

struct jinja_dict {
    uint32_t n, cap;
    struct jinja_val *keys, *vals;
};

struct jinja_loop {
    const struct jinja_val *items; /* the items iterated (after the `if` clause) */
    uint32_t n, i;                 /* count, index of the current item */
};

static inline struct jinja_val jinja_undef(const struct jinja_node *from)
{
    struct jinja_val v = {.type = JV_UNDEF};
    v.u.node = from;
    return v;
}
static inline struct jinja_val jinja_none(void)
{
    struct jinja_val v = {.type = JV_NONE};
    return v;
}
static inline struct jinja_val jinja_bool(int b)
{
    struct jinja_val v = {.type = JV_BOOL};
    v.u.i = b != 0;
    return v;
}
static inline struct jinja_val jinja_int(int64_t i)
{
    struct jinja_val v = {.type = JV_INT};
    v.u.i = i;
    return v;
}
static inline struct jinja_val jinja_float(double f)
{
    struct jinja_val v = {.type = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline struct jinja_val jinja_str(const char *s, size_t n)
{
    struct jinja_val v = {.type = JV_STR, .n = (uint32_t)n};
    v.u.s = s;
    return v;
}
static inline struct jinja_val jinja_listv(struct jinja_list *l, int tuple)
{
    struct jinja_val v = {.type = JV_LIST, .tuple = (uint8_t)tuple};
    v.u.l = l;
    return v;
}
static inline struct jinja_val jinja_dictv(struct jinja_dict *d, int ns)
{
    struct jinja_val v = {.type = (uint8_t)(ns ? JV_NS : JV_DICT)};
    v.u.d = d;
    return v;
}
static inline int jinja_is_num(const struct jinja_val *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}

/* ---------- the tree ---------- */

/* clang-format off */
enum jinja_node_kind {
    /* expressions */
    JN_CONST,  /* value */
    JN_NAME,   /* name */
    JN_ATTR,   /* a.name */
    JN_ITEM,   /* a[b] */
    JN_SLICE,  /* a[start:stop:step]: kids[0..2], each NULL when absent */
    JN_CALL,   /* a(kids): expressions, then JN_KWARG */
    JN_KWARG,  /* name=a */
    JN_FILTER, /* a | name(kids); in a filter chain of a block, the innermost a is NULL (the block's text) */
    JN_TEST,   /* a is [not] name(kids); op 1: negated */
    JN_NOT, JN_NEG, JN_POS, /* a */
    JN_BINOP,  /* a op b (enum jinja_op) */
    JN_AND, JN_OR,
    JN_COND,   /* a if b else c (c NULL: undefined) */
    JN_LIST, JN_TUPLE, JN_DICT, /* kids; a dict's are key, value, key, value, ... */
    /* statements */
    JN_BODY,   /* kids, in order */
    JN_TEXT,   /* name: the text */
    JN_OUTPUT, /* {{ a }} */
    JN_IF,     /* if a: body, else alt (a JN_IF for elif, a JN_BODY for else, or NULL) */
    JN_FOR,    /* for a (JN_NAME or JN_TUPLE of them) in b [if c]: body, else alt */
    JN_SET,    /* set a = b; a: JN_NAME, JN_ATTR of a JN_NAME (namespace), or JN_TUPLE of JN_NAME */
    JN_SET_BLOCK,    /* set a [| filters c]: body */
    JN_MACRO,        /* macro name(kids: JN_NAME with default a or NULL): body */
    JN_FILTER_BLOCK, /* filter c: body */
    JN_WITH,         /* with kids (JN_SET): body */
    JN_BREAK, JN_CONTINUE,
};
/* clang-format on */

struct jinja_node {
    uint8_t kind, op;
    int16_t builtin; /* JN_FILTER / JN_TEST: index in its table; -1: unknown (an error only when evaluated) */
    uint32_t line, col;
    const char *name;
    uint32_t name_len, n_kids;
    struct jinja_node *a, *b, *c, *body, *alt;
    struct jinja_node **kids;
    struct jinja_val value;
};

/* The tree of the tokens (a JN_BODY), allocated in mem; NULL with e set on a syntax error. */
struct jinja_node *jinja_parse(const struct jinja_tok *toks, size_t n_toks, struct jinja_arena *mem,
                               struct err *e);

struct jinja_template {
    char *src; /* normalized: \r\n and \r as \n, one trailing newline dropped */
    size_t len;
    struct jinja_arena mem; /* the tree and the decoded string literals */
    struct jinja_node *root;
    char id[72]; /* "jinja:" + SHA-256 hex of the original text */
};

/* ---------- rendering ---------- */

struct jinja_buf { /* a growing text, capped at max_output bytes */
    char *p;
    size_t n, cap;
};

struct jinja_var {
    const char *name;
    uint32_t len;
    struct jinja_val v;
};

struct jinja_frame { /* one scope: the context and top level (frame 0), a loop iteration, a macro call, with
                      */
    struct jinja_var *vars;
    uint32_t n, cap;
};

struct jinja_render {
    const struct jinja_template *t;
    struct jinja_limits lim;
    struct jinja_arena mem; /* every value made while rendering */
    uint64_t steps;
    int depth;
    struct jinja_buf *out;      /* where text goes now (a capture swaps it) */
    struct jinja_frame *frames; /* frames[0 .. n_frames): the scope stack */
    uint32_t n_frames, cap_frames;
    uint32_t base;      /* names resolve in frames[base ..] then frames[0] (a macro hides its caller's) */
    uint32_t line, col; /* position of the node being evaluated, for errors */
    struct err *e;
    int failed, raised; /* an error is set; it came from raise_exception */
};

/* Records "line L:C: <message>" at the current position (the first error wins) and returns -1. */
int jinja_fail(struct jinja_render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts steps against the budget: 0, or -1 once it is spent. */
int jinja_charge(struct jinja_render *r, uint64_t steps);
void *jinja_ralloc(struct jinja_render *r,
                   size_t n); /* render arena; NULL (and the error set) past the cap */

/* ---------- values: jinja_value.c ---------- */

int jinja_put(struct jinja_render *r, struct jinja_buf *b, const char *s, size_t n);
int jinja_puts(struct jinja_render *r, struct jinja_buf *b, const char *s);
/* The text of b as a string value in the arena; b is emptied (its memory freed). */
int jinja_buf_take(struct jinja_render *r, struct jinja_buf *b, struct jinja_val *out);

struct jinja_list *jinja_list_new(struct jinja_render *r, size_t n);
struct jinja_dict *jinja_dict_new(struct jinja_render *r, size_t cap);
/* Looks key up: 1 and *out when present, else 0. O(n) (counted as steps). */
int jinja_dict_get(struct jinja_render *r, const struct jinja_dict *d, struct jinja_val key,
                   struct jinja_val *out);
int jinja_dict_get_str(struct jinja_render *r, const struct jinja_dict *d, const char *k, size_t n,
                       struct jinja_val *out);
/* Sets key (replacing or appending). Only for dicts being built and namespaces. */
int jinja_dict_set(struct jinja_render *r, struct jinja_dict *d, struct jinja_val key, struct jinja_val v);

int jinja_truthy(const struct jinja_val *v);
const char *jinja_type_name(const struct jinja_val *v); /* Python's: "str", "int", "NoneType", "dict", ... */
int jinja_write_str(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v);  /* str(v) */
int jinja_write_repr(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v); /* repr(v) */
/* json.dumps(v, ensure_ascii, indent (<0: none), separators, sort_keys) as HF's tojson filter does. */
struct jinja_json_style {
    int indent, ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
};
int jinja_write_json(struct jinja_render *r, struct jinja_buf *b, const struct jinja_val *v,
                     const struct jinja_json_style *st, int level);
/* str(v) as a string value (strings themselves are returned as they are). */
int jinja_to_str(struct jinja_render *r, const struct jinja_val *v, struct jinja_val *out);
void jinja_format_float(double f, char *buf, size_t cap); /* Python's repr of a float */

int jinja_equal(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b);
/* Python's ordering of a and b (numbers, strings, lists / tuples): *cmp < 0, 0, > 0; -1 if unorderable. */
int jinja_compare(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b, int *cmp);
/* The items of an iterable: a list or tuple itself, a dict's keys, a string's characters, none for
 * undefined; anything else is an error. */
int jinja_iterate(struct jinja_render *r, const struct jinja_val *v, struct jinja_list **out);
int jinja_from_json(struct jinja_render *r, const json_t *j, int depth, struct jinja_val *out);

/* UTF-8 text as Python sees it (code points; the UTF-8 is trusted to be valid, a stray byte counts as one).
 */
size_t jinja_utf8_len(const char *s, size_t n);
size_t jinja_utf8_offset(const char *s, size_t n, size_t index); /* byte offset of code point index (<= n) */
size_t jinja_space_prefix(const char *s,
                          size_t n); /* bytes of Python whitespace (str.isspace) at the start */
size_t jinja_space_suffix(const char *s, size_t n); /* ... at the end */

/* ---------- evaluation: jinja_eval.c ---------- */

int jinja_eval(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out);
int jinja_exec(struct jinja_render *r,
               const struct jinja_node *n); /* 0, -1, or JINJA_BREAK / JINJA_CONTINUE */
enum { JINJA_BREAK = 1, JINJA_CONTINUE = 2 };
/* Calls macro m with the arguments: its output as a string. */
struct jinja_args;
int jinja_call_macro(struct jinja_render *r, const struct jinja_node *m, const struct jinja_args *a,
                     struct jinja_val *out);
int jinja_call_value(struct jinja_render *r, const struct jinja_val *f, const struct jinja_args *a,
                     struct jinja_val *out);
/* The message of the error an undefined value gives when used ("'x' is undefined"). */
int jinja_fail_undefined(struct jinja_render *r, const struct jinja_val *v);
/* obj.name as Jinja's getattr: a dict's key, a loop's field, else undefined (an undefined obj: error). */
int jinja_getattr(struct jinja_render *r, const struct jinja_val *obj, const char *name, size_t n,
                  const struct jinja_node *at, struct jinja_val *out);

/* Binds vars (a JSON object: each key a variable) in frame 0 and executes the template into out. */
int jinja_render_tree(struct jinja_render *r, const json_t *vars, struct jinja_buf *out);
/* Frees what a render allocated (not its output). */
void jinja_render_release(struct jinja_render *r);

/* ---------- arguments of filters, tests, methods, functions and macros ---------- */

struct jinja_kwarg {
    const char *name;
    uint32_t len;
    struct jinja_val v;
};

struct jinja_args {
    const struct jinja_val *pos;
    int n_pos;
    const struct jinja_kwarg *kw;
    int n_kw;
};

/* The argument at position i (or -1: keyword only) or named name: 1 with *v, or 0. */
int jinja_arg(const struct jinja_args *a, int i, const char *name, struct jinja_val *v);
/* Checks a against a signature: at most max_pos positional arguments and keywords among names (a
 * NULL-terminated list): 0, or -1 naming the one that does not fit in what. */
int jinja_args_check(struct jinja_render *r, const struct jinja_args *a, int max_pos,
                     const char *const *names, const char *what);

/* ---------- builtins: jinja_filter.c, jinja_method.c ---------- */

int jinja_filter_find(const char *name, size_t n); /* index, or -1 */
int jinja_filter_apply(struct jinja_render *r, int id, const struct jinja_val *in, const struct jinja_args *a,
                       struct jinja_val *out);
int jinja_test_find(const char *name, size_t n);
int jinja_test_apply(struct jinja_render *r, int id, const struct jinja_val *v, const struct jinja_args *a,
                     int *res);
/* Applies the filter or test called name (for map, select, selectattr, ...). */
int jinja_filter_by_name(struct jinja_render *r, const struct jinja_val *name, const struct jinja_val *in,
                         const struct jinja_args *a, struct jinja_val *out);
int jinja_test_by_name(struct jinja_render *r, const struct jinja_val *name, const struct jinja_val *v,
                       const struct jinja_args *a, int *res);

/* obj.name(args) for strings, dicts, lists and the loop. */
int jinja_method_call(struct jinja_render *r, const struct jinja_val *obj, const char *name, size_t n,
                      const struct jinja_args *a, struct jinja_val *out);
int jinja_func_find(const char *name, size_t n); /* a global function's index, or -1 */
int jinja_func_call(struct jinja_render *r, int id, const struct jinja_args *a, struct jinja_val *out);
const char *jinja_func_name(int id);

/* Python string operations shared by filters and methods (results in the render arena). */
int jinja_str_strip(struct jinja_render *r, const struct jinja_val *s, const struct jinja_val *chars,
                    int left, int right, struct jinja_val *out);
int jinja_str_case(struct jinja_render *r, const struct jinja_val *s, char how, struct jinja_val *out);
int jinja_str_replace(struct jinja_render *r, const struct jinja_val *s, const struct jinja_val *old,
                      const struct jinja_val *new_, int64_t count, struct jinja_val *out);
/* Python's str.splitlines: the lines of s, split at \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029. */
int jinja_str_splitlines(struct jinja_render *r, const struct jinja_val *s, int keepends,
                         struct jinja_list **out);
int jinja_str_format(struct jinja_render *r, const struct jinja_val *fmt, const struct jinja_val *args,
                     int n_args, struct jinja_val *out); /* printf-style: fmt % args */

#endif
