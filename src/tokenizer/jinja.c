/* jinja — see jinja.h; the parts are described in jinja_int.h.
 *
 * Invariant: a compiled template is immutable (its tree, strings and source are read-only after
 * jinja_compile), so renders share it; a render owns everything it allocates and frees it before
 * returning, whatever happened (only the output survives, and only on success).
 */
#include "tokenizer/jinja.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"
#include "util/sha256.h"

enum { JINJA_MAX_SOURCE = 4 << 20 };

struct jinja_limits jinja_default_limits(void)
{
    struct jinja_limits l = {.max_steps = 10000000, .max_output = 1 << 20, .max_memory = (size_t)64 << 20, .max_depth = 200};
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
    if (len > JINJA_MAX_SOURCE) return err_set(e, "the template is %zu bytes (at most %d)", len, JINJA_MAX_SOURCE);
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
