/* jinja — see jinja.h; the parts are described in jinja_int.h.
 *
 * Invariant: a compiled template is immutable (its tree, strings and source are read-only after
 * jinja_compile), so renders share it; its tree is well formed as jinja_check states it. A render owns
 * everything it allocates and frees it before returning, whatever happened (only the output survives, and
 * only on success).
 */
#include "tokenizer/jinja.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"
#include "util/sha256.h"

enum { JINJA_MAX_SOURCE = 4 << 20 };

struct jinja_limits jinja_default_limits(void)
{
    struct jinja_limits l = {
        .max_steps = 10000000, .max_output = 1 << 20, .max_memory = (size_t)64 << 20, .max_depth = 200};
    return l;
}

/* Jinja reads a template with every newline as "\n" and (keep_trailing_newline off) drops one at the end. */
static size_t normalize(const char *src, size_t len, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            out[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            out[k++] = src[i];
        }
    }
    if (k > 0 && out[k - 1] == '\n') k--;
    out[k] = '\0';
    return k;
}

int jinja_compile(const char *src, size_t len, jinja_template **out, struct err *e)
{
    *out = NULL;
    if (len > JINJA_MAX_SOURCE)
        return err_set(e, "the template is %zu bytes (at most %d)", len, JINJA_MAX_SOURCE);
    const char *nul = memchr(src, '\0', len);
    if (nul) return err_set(e, "the template holds a NUL byte at offset %zu", (size_t)(nul - src));
    jinja_template *t = calloc(1, sizeof *t);
    struct jinja_tok *toks = NULL;
    size_t n_toks = 0;
    if (!t || !(t->src = malloc(len + 1))) {
        free(t);
        return err_set(e, "out of memory (template)");
    }
    t->len = normalize(src, len, t->src);
    uint8_t d[SHA256_BYTES];
    char hex[2 * SHA256_BYTES + 1];
    sha256_buf(src, len, d);
    sha256_hex(d, hex);
    memcpy(t->id, "jinja:", 6);
    memcpy(t->id + 6, hex, sizeof hex);
    if (jinja_lex(t->src, t->len, &t->mem, &toks, &n_toks, e) != 0) goto fail;
    if (e) e->msg[0] = '\0';
    t->root = jinja_parse(toks, n_toks, &t->mem, e);
    free(toks);
    if (!t->root) {
        if (e && !e->msg[0]) err_set(e, "syntax error"); /* every path says more; this is a guard */
        goto fail;
    }
    *out = t;
    return 0;
fail:
    jinja_free(t);
    return -1;
}

void jinja_free(jinja_template *t)
{
    if (!t) return;
    jinja_arena_free(&t->mem);
    free(t->src);
    free(t);
}

/* ---------- the debug check ---------- */

struct check {
    const jinja_template *t;
    struct err *e;
    int loops; /* for statements around the node (a macro body starts from none) */
};

static int check_fail(struct check *c, const struct jinja_node *n, const char *what)
{
    return err_set(c->e, "jinja_check: node of kind %d at line %u:%u: %s", n->kind, n->line, n->col, what);
}

static int check_node(struct check *c, const struct jinja_node *n, int depth);

static int check_kids(struct check *c, const struct jinja_node *n, int depth, int allow_null)
{
    for (uint32_t i = 0; i < n->n_kids; i++) {
        if (!n->kids[i] && allow_null) continue;
        if (!n->kids[i]) return check_fail(c, n, "a missing child");
        if (check_node(c, n->kids[i], depth + 1) != 0) return -1;
    }
    return 0;
}

/* An assignment target: a name, a tuple of names, or (set) name.attr. */
static int check_target(struct check *c, const struct jinja_node *n, int attr_ok)
{
    if (n->kind == JN_NAME || (attr_ok && n->kind == JN_ATTR && n->a && n->a->kind == JN_NAME)) return 0;
    if (n->kind != JN_TUPLE) return check_fail(c, n, "an assignment target that is not a name");
    for (uint32_t i = 0; i < n->n_kids; i++)
        if (!n->kids[i] || n->kids[i]->kind != JN_NAME)
            return check_fail(c, n, "a tuple target with a non-name");
    return 0;
}

/* The children n's kind needs: a, b, c, body (bit 0..3), and whether its name must be set. */
static int check_shape(struct check *c, const struct jinja_node *n)
{
    /* clang-format off */
    static const struct {
        uint8_t need, named;
    } shape[] = {
        [JN_CONST] = {0, 0}, [JN_NAME] = {0, 1}, [JN_ATTR] = {1, 1}, [JN_ITEM] = {3, 0}, [JN_SLICE] = {1, 0},
        [JN_CALL] = {1, 0}, [JN_KWARG] = {1, 1}, [JN_FILTER] = {0, 1}, [JN_TEST] = {1, 1}, [JN_NOT] = {1, 0},
        [JN_NEG] = {1, 0}, [JN_POS] = {1, 0}, [JN_BINOP] = {3, 0}, [JN_AND] = {3, 0}, [JN_OR] = {3, 0},
        [JN_COND] = {3, 0}, [JN_LIST] = {0, 0}, [JN_TUPLE] = {0, 0}, [JN_DICT] = {0, 0}, [JN_BODY] = {0, 0},
        [JN_TEXT] = {0, 1}, [JN_OUTPUT] = {1, 0}, [JN_IF] = {9, 0}, [JN_FOR] = {11, 0}, [JN_SET] = {3, 0},
        [JN_SET_BLOCK] = {9, 0}, [JN_MACRO] = {8, 1}, [JN_FILTER_BLOCK] = {12, 0}, [JN_WITH] = {8, 0},
        [JN_BREAK] = {0, 0}, [JN_CONTINUE] = {0, 0},
    };
    /* clang-format on */
    if (n->kind > JN_CONTINUE) return check_fail(c, n, "an unknown kind");
    const struct jinja_node *slot[4] = {n->a, n->b, n->c, n->body};
    for (int i = 0; i < 4; i++)
        if ((shape[n->kind].need >> i & 1) && !slot[i]) return check_fail(c, n, "a missing child");
    if (shape[n->kind].named && (!n->name || !n->name_len)) return check_fail(c, n, "no name");
    if (n->kind == JN_TEXT && (n->name < c->t->src || n->name + n->name_len > c->t->src + c->t->len))
        return check_fail(c, n, "text outside the source");
    if ((n->kind == JN_FILTER || n->kind == JN_TEST) &&
        n->builtin != (n->kind == JN_FILTER ? jinja_filter_find : jinja_test_find)(n->name, n->name_len))
        return check_fail(c, n, "a filter or test bound to another name");
    if ((n->kind == JN_SLICE && n->n_kids != 3) || (n->kind == JN_DICT && n->n_kids % 2))
        return check_fail(c, n, "a wrong number of children");
    if (n->kind == JN_BINOP && (n->op < JO_ADD || n->op > JO_NOT_IN))
        return check_fail(c, n, "an unknown operator");
    if ((n->kind == JN_BREAK || n->kind == JN_CONTINUE) && !c->loops)
        return check_fail(c, n, "break outside a loop");
    if (n->kind == JN_IF && n->alt && n->alt->kind != JN_IF && n->alt->kind != JN_BODY)
        return check_fail(c, n, "a bad else");
    if (n->kind == JN_CONST && n->value.type == JV_STR && n->value.n && !n->value.u.s)
        return check_fail(c, n, "a NULL string");
    return 0;
}

static int check_node(struct check *c, const struct jinja_node *n, int depth)
{
    if (depth > 4 * 200) return err_set(c->e, "jinja_check: the tree is deeper than the parser allows");
    if (check_shape(c, n) != 0) return -1;
    if (n->kind == JN_FOR && check_target(c, n->a, 0) != 0) return -1;
    if ((n->kind == JN_SET || n->kind == JN_SET_BLOCK) && check_target(c, n->a, 1) != 0) return -1;
    for (uint32_t i = 0; n->kind == JN_MACRO && i < n->n_kids; i++)
        if (!n->kids[i] || n->kids[i]->kind != JN_NAME)
            return check_fail(c, n, "a macro parameter that is no name");
    for (uint32_t i = 0; n->kind == JN_WITH && i < n->n_kids; i++)
        if (!n->kids[i] || n->kids[i]->kind != JN_SET)
            return check_fail(c, n, "a with binding that is no set");
    int loops = c->loops;
    const struct jinja_node *expr[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++) /* a for's target is a name, set's a target; both check as expressions too */
        if (expr[i] && check_node(c, expr[i], depth + 1) != 0) return -1;
    if (n->kind == JN_MACRO) c->loops = 0;
    if (n->kind == JN_FOR) c->loops++;
    int rc = (n->body && check_node(c, n->body, depth + 1)) || check_kids(c, n, depth, n->kind == JN_SLICE);
    c->loops = loops;
    if (rc == 0 && n->alt) rc = check_node(c, n->alt, depth + 1);
    return rc ? -1 : 0;
}

int jinja_check(const jinja_template *t, struct err *e)
{
    struct check c = {t, e, 0};
    if (!t->root || t->root->kind != JN_BODY) return err_set(e, "jinja_check: the root is not a body");
    return check_node(&c, t->root, 0);
}

const char *jinja_id(const jinja_template *t)
{
    return t->id;
}

int jinja_render(const jinja_template *t, const json_t *vars, const struct jinja_limits *lim, char **out,
                 size_t *n_out, struct err *e)
{
    struct jinja_render r = {.t = t, .lim = lim ? *lim : jinja_default_limits(), .e = e, .line = 1, .col = 1};
    struct jinja_buf b = {0};
    *out = NULL;
    if (n_out) *n_out = 0;
    if (!json_is_object(vars)) return err_set(e, "the template's variables must be a JSON object");
    r.mem.cap = r.lim.max_memory;
    int rc = jinja_render_tree(&r, vars, &b);
    int raised = r.raised;
    jinja_render_release(&r);
    if (rc == 0 && b.p && memchr(b.p, '\0', b.n)) rc = err_set(e, "the rendered text holds a NUL character");
    if (rc == 0 && !b.p && !(b.p = calloc(1, 1))) rc = err_set(e, "out of memory (template output)");
    if (rc != 0) {
        free(b.p);
        return raised ? JINJA_RAISED : -1;
    }
    *out = b.p;
    if (n_out) *n_out = b.n;
    return 0;
}
