/* jinja_eval — expressions and statements, with Jinja2's scoping and the sandbox's budgets.
 *
 * Scopes are a stack of frames. Frame 0 holds the variables given to the render and everything set at the
 * top level (a top-level set shadows a variable of the same name). Each iteration of a for loop pushes a
 * fresh frame (its target, `loop`, and whatever the body sets: nothing of it outlives the iteration -- the
 * reason templates use namespace()); `if` opens no scope; a macro call pushes a frame and hides its
 * caller's frames (frames[1 .. base) are skipped), so a macro sees its parameters, then the top level, as
 * in Jinja. A name found nowhere is a global function or undefined.
 *
 * Budgets: every node evaluated or executed costs a step (builtins add their per-item work) and nests one
 * level deeper; passing max_steps or max_depth fails the render with a message saying which. Output goes
 * to r->out, capped at max_output bytes; a macro call, a block set and a filter block capture into a
 * buffer of their own, with the same cap.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

enum { CALL_MAX_ARGS = 32 };

int jinja_fail(struct jinja_render *r, const char *fmt, ...)
{
    if (r->failed) return -1;
    r->failed = 1;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(r->e, "line %u:%u: %s", r->line, r->col, msg);
    return -1;
}

int jinja_charge(struct jinja_render *r, uint64_t steps)
{
    r->steps += steps;
    if (r->steps > r->lim.max_steps)
        return jinja_fail(r, "the template ran past its budget of %llu steps",
                          (unsigned long long)r->lim.max_steps);
    return 0;
}

int jinja_fail_undefined(struct jinja_render *r, const struct jinja_val *v)
{
    const struct jinja_node *n = v->u.node;
    if (n && n->kind == JN_NAME) return jinja_fail(r, "'%.*s' is undefined", (int)n->name_len, n->name);
    if (n && n->kind == JN_ATTR)
        return jinja_fail(r, "'%.*s' is undefined (no such attribute or key)", (int)n->name_len, n->name);
    return jinja_fail(r, "a value used here is undefined");
}

/* ---------- scopes ---------- */

static int frame_push(struct jinja_render *r)
{
    if (r->n_frames == r->cap_frames) {
        uint32_t cap = r->cap_frames ? r->cap_frames * 2 : 16;
        struct jinja_frame *f = realloc(r->frames, cap * sizeof *f);
        if (!f) return jinja_fail(r, "out of memory (scopes)");
        memset(f + r->cap_frames, 0, (cap - r->cap_frames) * sizeof *f);
        r->frames = f;
        r->cap_frames = cap;
    }
    r->frames[r->n_frames++].n = 0; /* a frame's vars array is kept for reuse */
    return 0;
}

static void frame_pop(struct jinja_render *r)
{
    r->n_frames--;
}

/* Sets name in the innermost frame. */
static int scope_set(struct jinja_render *r, const char *name, size_t len, const struct jinja_val *v)
{
    struct jinja_frame *f = &r->frames[r->n_frames - 1];
    for (uint32_t i = f->n; i-- > 0;)
        if (f->vars[i].len == len && memcmp(f->vars[i].name, name, len) == 0) {
            f->vars[i].v = *v;
            return 0;
        }
    if (jinja_charge(r, f->n / 8) != 0) return -1;
    if (f->n == f->cap) {
        uint32_t cap = f->cap ? f->cap * 2 : 8;
        struct jinja_var *w = realloc(f->vars, cap * sizeof *w);
        if (!w) return jinja_fail(r, "out of memory (variables)");
        f->vars = w;
        f->cap = cap;
    }
    f->vars[f->n++] = (struct jinja_var){name, (uint32_t)len, *v};
    return 0;
}

static int frame_find(struct jinja_render *r, const struct jinja_frame *f, const char *name, size_t len,
                      struct jinja_val *out)
{
    for (uint32_t i = f->n; i-- > 0;)
        if (f->vars[i].len == len && memcmp(f->vars[i].name, name, len) == 0) {
            *out = f->vars[i].v;
            return 1;
        }
    jinja_charge(r, f->n / 8);
    return 0;
}

/* Looks name up in the visible frames: 1 and *out, or 0. */
static int scope_get(struct jinja_render *r, const char *name, size_t len, struct jinja_val *out)
{
    for (uint32_t k = r->n_frames; k-- > r->base && k > 0;)
        if (frame_find(r, &r->frames[k], name, len, out)) return 1;
    return frame_find(r, &r->frames[0], name, len, out);
}

/* ---------- arguments ---------- */

static int name_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

int jinja_arg(const struct jinja_args *a, int i, const char *name, struct jinja_val *v)
{
    if (i >= 0 && i < a->n_pos) {
        *v = a->pos[i];
        return 1;
    }
    for (int k = 0; name && k < a->n_kw; k++)
        if (name_is(a->kw[k].name, a->kw[k].len, name)) {
            *v = a->kw[k].v;
            return 1;
        }
    return 0;
}

int jinja_args_check(struct jinja_render *r, const struct jinja_args *a, int max_pos,
                     const char *const *names, const char *what)
{
    if (a->n_pos > max_pos)
        return jinja_fail(r, "%s takes at most %d positional arguments (%d given)", what, max_pos, a->n_pos);
    for (int k = 0; k < a->n_kw; k++) {
        int known = 0;
        for (int i = 0; names && names[i] && !known; i++)
            known = name_is(a->kw[k].name, a->kw[k].len, names[i]);
        if (!known)
            return jinja_fail(r, "%s has no argument named '%.*s'", what, (int)a->kw[k].len, a->kw[k].name);
    }
    return 0;
}

/* Evaluates the arguments of a call, filter or test node (kids: expressions, then JN_KWARG). */
static int eval_args(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *pos,
                     struct jinja_kwarg *kw, struct jinja_args *a)
{
    memset(a, 0, sizeof *a);
    a->pos = pos;
    a->kw = kw;
    if (n->n_kids > CALL_MAX_ARGS) return jinja_fail(r, "more than %d arguments", CALL_MAX_ARGS);
    for (uint32_t i = 0; i < n->n_kids; i++) {
        const struct jinja_node *k = n->kids[i];
        if (k->kind == JN_KWARG) {
            kw[a->n_kw] = (struct jinja_kwarg){k->name, k->name_len, {0}};
            if (jinja_eval(r, k->a, &kw[a->n_kw++].v) != 0) return -1;
        } else if (jinja_eval(r, k, &pos[a->n_pos++]) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---------- attribute, item, slice ---------- */

static int loop_field(const struct jinja_loop *l, const char *name, size_t n, struct jinja_val *out)
{
    int64_t i = l->i, len = l->n;
    if (name_is(name, n, "index"))
        *out = jinja_int(i + 1);
    else if (name_is(name, n, "index0"))
        *out = jinja_int(i);
    else if (name_is(name, n, "revindex"))
        *out = jinja_int(len - i);
    else if (name_is(name, n, "revindex0"))
        *out = jinja_int(len - i - 1);
    else if (name_is(name, n, "first"))
        *out = jinja_bool(i == 0);
    else if (name_is(name, n, "last"))
        *out = jinja_bool(i == len - 1);
    else if (name_is(name, n, "length"))
        *out = jinja_int(len);
    else if (name_is(name, n, "depth"))
        *out = jinja_int(1);
    else if (name_is(name, n, "depth0"))
        *out = jinja_int(0);
    else if (name_is(name, n, "previtem") && i > 0)
        *out = l->items[i - 1];
    else if (name_is(name, n, "nextitem") && i + 1 < len)
        *out = l->items[i + 1];
    else
        return 0;
    return 1;
}

int jinja_getattr(struct jinja_render *r, const struct jinja_val *obj, const char *name, size_t n,
                  const struct jinja_node *at, struct jinja_val *out)
{
    *out = jinja_undef(at);
    switch (obj->type) {
    case JV_UNDEF:
        return jinja_fail_undefined(r, obj);
    case JV_DICT:
    case JV_NS:
        jinja_dict_get_str(r, obj->u.d, name, n, out);
        return 0;
    case JV_LOOP:
        loop_field(obj->u.loop, name, n, out);
        return 0;
    default:
        return 0; /* other objects have no attributes a template can read */
    }
}

static int get_item(struct jinja_render *r, const struct jinja_val *obj, const struct jinja_val *key,
                    const struct jinja_node *at, struct jinja_val *out)
{
    *out = jinja_undef(at);
    int is_int = key->type == JV_INT || key->type == JV_BOOL;
    switch (obj->type) {
    case JV_UNDEF:
        return jinja_fail_undefined(r, obj);
    case JV_DICT:
    case JV_NS:
        jinja_dict_get(r, obj->u.d, *key, out);
        return 0;
    case JV_LOOP:
        if (key->type == JV_STR) loop_field(obj->u.loop, key->u.s, key->n, out);
        return 0;
    case JV_LIST: {
        int64_t n = obj->u.l->n, i = key->u.i;
        if (!is_int) return 0;
        if (i < 0) i += n;
        if (i >= 0 && i < n) *out = obj->u.l->items[i];
        return 0;
    }
    case JV_STR: {
        if (!is_int) return 0;
        int64_t n = (int64_t)jinja_utf8_len(obj->u.s, obj->n), i = key->u.i;
        if (jinja_charge(r, (uint64_t)n / 16) != 0) return -1;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return 0;
        size_t b = jinja_utf8_offset(obj->u.s, obj->n, (size_t)i);
        *out = jinja_str(obj->u.s + b, jinja_utf8_offset(obj->u.s + b, obj->n - b, 1));
        return 0;
    }
    default:
        return 0;
    }
}

/* Python's slice.indices: clamps start / stop for a sequence of n items; *count items result. */
static void slice_indices(int64_t n, int64_t step, const struct jinja_val *sv, int64_t *start, int64_t *count)
{
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n, b[2];
    for (int k = 0; k < 2; k++) {
        if (sv[k].type == JV_NONE) {
            b[k] = (step < 0) == (k == 0) ? hi : lo;
            if (k == 1 && step > 0) b[k] = n;
            continue;
        }
        int64_t x = sv[k].u.i;
        if (x < 0) x += n;
        b[k] = x < 0 ? lo : x >= n ? hi : x;
    }
    *start = b[0];
    if (step > 0)
        *count = b[1] > b[0] ? (b[1] - b[0] - 1) / step + 1 : 0;
    else
        *count = b[0] > b[1] ? (b[0] - b[1] - 1) / -step + 1 : 0;
}

static int eval_slice(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val obj, sv[3];
    if (jinja_eval(r, n->a, &obj) != 0) return -1;
    for (int k = 0; k < 3; k++) {
        sv[k] = jinja_none();
        if (n->kids[k] && jinja_eval(r, n->kids[k], &sv[k]) != 0) return -1;
        if (sv[k].type != JV_NONE && sv[k].type != JV_INT && sv[k].type != JV_BOOL)
            return jinja_fail(r, "slice indices must be integers or none, not %s", jinja_type_name(&sv[k]));
    }
    int64_t step = sv[2].type == JV_NONE ? 1 : sv[2].u.i, start, count;
    if (step == 0) return jinja_fail(r, "slice step cannot be zero");
    if (obj.type == JV_UNDEF) return jinja_fail_undefined(r, &obj);
    if (obj.type != JV_LIST && obj.type != JV_STR)
        return jinja_fail(r, "'%s' object cannot be sliced", jinja_type_name(&obj));
    struct jinja_list *items;
    if (jinja_iterate(r, &obj, &items) != 0) return -1;
    slice_indices(items->n, step, sv, &start, &count);
    if (jinja_charge(r, (uint64_t)count) != 0) return -1;
    if (obj.type == JV_LIST) {
        struct jinja_list *l = jinja_list_new(r, (size_t)count);
        if (!l) return -1;
        for (int64_t k = 0; k < count; k++)
            l->items[k] = items->items[start + k * step];
        *out = jinja_listv(l, obj.tuple);
        return 0;
    }
    struct jinja_buf b = {0};
    for (int64_t k = 0; k < count; k++) {
        const struct jinja_val *c = &items->items[start + k * step];
        if (jinja_put(r, &b, c->u.s, c->n) != 0) {
            free(b.p);
            return -1;
        }
    }
    return jinja_buf_take(r, &b, out);
}

/* ---------- operators ---------- */

static int contains(struct jinja_render *r, const struct jinja_val *needle, const struct jinja_val *hay,
                    int *res)
{
    *res = 0;
    switch (hay->type) {
    case JV_UNDEF:
        return 0; /* Undefined iterates as empty */
    case JV_STR:
        if (needle->type != JV_STR)
            return jinja_fail(r, "'in <string>' needs a string on the left, not %s", jinja_type_name(needle));
        if (jinja_charge(r, hay->n / 16) != 0) return -1;
        *res = needle->n == 0 ||
               (hay->n >= needle->n && memmem(hay->u.s, hay->n, needle->u.s, needle->n) != NULL);
        return 0;
    case JV_LIST:
        for (uint32_t i = 0; i < hay->u.l->n && !*res; i++)
            *res = jinja_equal(r, needle, &hay->u.l->items[i]);
        return 0;
    case JV_DICT:
    case JV_NS: {
        struct jinja_val v;
        *res = jinja_dict_get(r, hay->u.d, *needle, &v);
        return 0;
    }
    default:
        return jinja_fail(r, "argument of type '%s' is not iterable", jinja_type_name(hay));
    }
}

static int int_pow(struct jinja_render *r, int64_t base, int64_t ex, int64_t *out)
{
    int64_t acc = 1;
    while (ex > 0) {
        if ((ex & 1) && __builtin_mul_overflow(acc, base, &acc))
            return jinja_fail(r, "integer overflow in **");
        ex >>= 1;
        if (ex && __builtin_mul_overflow(base, base, &base)) return jinja_fail(r, "integer overflow in **");
    }
    *out = acc;
    return 0;
}

/* + - * // % ** on two integers (bools count as 0 / 1), with Python's floor division and modulo. */
static int int_arith(struct jinja_render *r, uint8_t op, int64_t a, int64_t b, struct jinja_val *out)
{
    int64_t v = 0;
    int over = 0;
    switch (op) {
    case JO_ADD:
        over = __builtin_add_overflow(a, b, &v);
        break;
    case JO_SUB:
        over = __builtin_sub_overflow(a, b, &v);
        break;
    case JO_MUL:
        over = __builtin_mul_overflow(a, b, &v);
        break;
    case JO_FLOORDIV:
    case JO_MOD:
        if (b == 0) return jinja_fail(r, "division by zero");
        if (a == INT64_MIN && b == -1) return jinja_fail(r, "integer overflow");
        v = op == JO_FLOORDIV ? a / b : a % b;
        if (op == JO_FLOORDIV && (a % b != 0) && ((a < 0) != (b < 0))) v--;
        if (op == JO_MOD && v != 0 && ((v < 0) != (b < 0))) v += b;
        break;
    case JO_POW:
        if (b < 0) {
            *out = jinja_float(pow((double)a, (double)b));
            return 0;
        }
        if (int_pow(r, a, b, &v) != 0) return -1;
        break;
    default:
        return -1;
    }
    if (over) return jinja_fail(r, "integer overflow");
    *out = jinja_int(v);
    return 0;
}

static int num_arith(struct jinja_render *r, uint8_t op, const struct jinja_val *x, const struct jinja_val *y,
                     struct jinja_val *out)
{
    if (x->type != JV_FLOAT && y->type != JV_FLOAT && op != JO_DIV)
        return int_arith(r, op, x->u.i, y->u.i, out);
    double a = x->type == JV_FLOAT ? x->u.f : (double)x->u.i,
           b = y->type == JV_FLOAT ? y->u.f : (double)y->u.i, v;
    if ((op == JO_DIV || op == JO_FLOORDIV || op == JO_MOD) && b == 0)
        return jinja_fail(r, "division by zero");
    switch (op) {
    case JO_ADD:
        v = a + b;
        break;
    case JO_SUB:
        v = a - b;
        break;
    case JO_MUL:
        v = a * b;
        break;
    case JO_DIV:
        v = a / b;
        break;
    case JO_FLOORDIV:
        v = floor(a / b);
        break;
    case JO_MOD:
        v = fmod(a, b);
        if (v != 0 && ((v < 0) != (b < 0))) v += b;
        break;
    default:
        v = pow(a, b);
        break;
    }
    *out = jinja_float(v);
    return 0;
}

/* s * count or list * count. */
static int repeat(struct jinja_render *r, const struct jinja_val *seq, int64_t count, struct jinja_val *out)
{
    uint64_t n = seq->type == JV_STR ? seq->n : seq->u.l->n;
    if (count < 0) count = 0;
    if (count && n * (uint64_t)count / (uint64_t)count != n) return jinja_fail(r, "a repetition too long");
    if (n * (uint64_t)count > r->lim.max_output)
        return jinja_fail(r, "a repetition longer than %zu", r->lim.max_output);
    if (seq->type == JV_LIST) {
        struct jinja_list *l = jinja_list_new(r, (size_t)(n * (uint64_t)count));
        if (!l || jinja_charge(r, l->n) != 0) return -1;
        for (uint32_t i = 0; i < l->n; i++)
            l->items[i] = seq->u.l->items[i % n];
        *out = jinja_listv(l, seq->tuple);
        return 0;
    }
    struct jinja_buf b = {0};
    for (int64_t i = 0; i < count; i++)
        if (jinja_put(r, &b, seq->u.s, seq->n) != 0) {
            free(b.p);
            return -1;
        }
    return jinja_buf_take(r, &b, out);
}

/* a + b of two lists (text 0), or str(a) + str(b) (text 1: ~, or + of two strings). */
static int concat(struct jinja_render *r, const struct jinja_val *a, const struct jinja_val *b, int text,
                  struct jinja_val *out)
{
    if (!text) {
        struct jinja_list *l = jinja_list_new(r, (size_t)a->u.l->n + b->u.l->n);
        if (!l || jinja_charge(r, l->n) != 0) return -1;
        if (a->u.l->n) memcpy(l->items, a->u.l->items, a->u.l->n * sizeof *l->items);
        if (b->u.l->n) memcpy(l->items + a->u.l->n, b->u.l->items, b->u.l->n * sizeof *l->items);
        *out = jinja_listv(l, a->tuple);
        return 0;
    }
    struct jinja_buf buf = {0};
    if (jinja_write_str(r, &buf, a) != 0 || jinja_write_str(r, &buf, b) != 0) {
        free(buf.p);
        return -1;
    }
    return jinja_buf_take(r, &buf, out);
}

static int arith(struct jinja_render *r, uint8_t op, const struct jinja_val *a, const struct jinja_val *b,
                 struct jinja_val *out)
{
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (op == JO_CONCAT) return concat(r, a, b, 1, out);
    if (op == JO_ADD && a->type == b->type &&
        (a->type == JV_STR || (a->type == JV_LIST && a->tuple == b->tuple)))
        return concat(r, a, b, a->type == JV_STR, out);
    if (op == JO_MUL && (a->type == JV_STR || a->type == JV_LIST) &&
        (b->type == JV_INT || b->type == JV_BOOL))
        return repeat(r, a, b->u.i, out);
    if (op == JO_MUL && (b->type == JV_STR || b->type == JV_LIST) &&
        (a->type == JV_INT || a->type == JV_BOOL))
        return repeat(r, b, a->u.i, out);
    if (op == JO_MOD && a->type == JV_STR) {
        int tuple = b->type == JV_LIST && b->tuple;
        return jinja_str_format(r, a, tuple ? b->u.l->items : b, tuple ? (int)b->u.l->n : 1, out);
    }
    if (a->type == JV_UNDEF) return jinja_fail_undefined(r, a);
    if (b->type == JV_UNDEF) return jinja_fail_undefined(r, b);
    if (jinja_is_num(a) && jinja_is_num(b)) return num_arith(r, op, a, b, out);
    return jinja_fail(r, "unsupported operand types for %s: '%s' and '%s'", names[op], jinja_type_name(a),
                      jinja_type_name(b));
}

static int eval_binop(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val a, b;
    if (jinja_eval(r, n->a, &a) != 0 || jinja_eval(r, n->b, &b) != 0) return -1;
    r->line = n->line;
    r->col = n->col;
    int c, res;
    switch (n->op) {
    case JO_EQ:
    case JO_NE:
        *out = jinja_bool(jinja_equal(r, &a, &b) == (n->op == JO_EQ));
        return 0;
    case JO_IN:
    case JO_NOT_IN:
        if (contains(r, &a, &b, &res) != 0) return -1;
        *out = jinja_bool(res == (n->op == JO_IN));
        return 0;
    case JO_LT:
    case JO_LE:
    case JO_GT:
    case JO_GE:
        if (jinja_compare(r, &a, &b, &c) != 0) return -1;
        *out = jinja_bool(n->op == JO_LT ? c < 0 : n->op == JO_LE ? c <= 0 : n->op == JO_GT ? c > 0 : c >= 0);
        return 0;
    default:
        return arith(r, n->op, &a, &b, out);
    }
}

/* ---------- calls, filters, tests ---------- */

int jinja_call_value(struct jinja_render *r, const struct jinja_val *f, const struct jinja_args *a,
                     struct jinja_val *out)
{
    if (f->type == JV_MACRO) return jinja_call_macro(r, f->u.node, a, out);
    if (f->type == JV_FUNC) return jinja_func_call(r, (int)f->u.i, a, out);
    const struct jinja_node *from = f->type == JV_UNDEF ? f->u.node : NULL;
    if (from && from->kind == JN_NAME && from->name_len == 12 && !memcmp(from->name, "strftime_now", 12))
        return jinja_fail(
            r, "strftime_now() is not available: nightshift renders prompts without the clock, so that "
               "a result depends on its request alone");
    if (f->type == JV_UNDEF) return jinja_fail_undefined(r, f);
    return jinja_fail(r, "'%s' object is not callable", jinja_type_name(f));
}

static int eval_call(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val pos[CALL_MAX_ARGS], callee;
    struct jinja_kwarg kw[CALL_MAX_ARGS];
    struct jinja_args a;
    if (n->a->kind == JN_ATTR) { /* obj.method(args) */
        struct jinja_val obj;
        if (jinja_eval(r, n->a->a, &obj) != 0 || eval_args(r, n, pos, kw, &a) != 0) return -1;
        r->line = n->line;
        r->col = n->col;
        struct jinja_val member;
        if ((obj.type == JV_DICT || obj.type == JV_NS) &&
            jinja_dict_get_str(r, obj.u.d, n->a->name, n->a->name_len, &member) &&
            (member.type == JV_MACRO || member.type == JV_FUNC))
            return jinja_call_value(r, &member, &a, out);
        return jinja_method_call(r, &obj, n->a->name, n->a->name_len, &a, out);
    }
    if (jinja_eval(r, n->a, &callee) != 0 || eval_args(r, n, pos, kw, &a) != 0) return -1;
    r->line = n->line;
    r->col = n->col;
    return jinja_call_value(r, &callee, &a, out);
}

/* Applies filter node f (its arguments evaluated here) to operand. */
static int apply_filter(struct jinja_render *r, const struct jinja_node *f, const struct jinja_val *operand,
                        struct jinja_val *out)
{
    struct jinja_val pos[CALL_MAX_ARGS];
    struct jinja_kwarg kw[CALL_MAX_ARGS];
    struct jinja_args a;
    if (eval_args(r, f, pos, kw, &a) != 0) return -1;
    r->line = f->line;
    r->col = f->col;
    if (f->builtin < 0) return jinja_fail(r, "no filter named '%.*s'", (int)f->name_len, f->name);
    return jinja_filter_apply(r, f->builtin, operand, &a, out);
}

/* A filter chain of a block (the innermost operand is NULL: input). */
static int apply_chain(struct jinja_render *r, const struct jinja_node *f, const struct jinja_val *input,
                       struct jinja_val *out)
{
    struct jinja_val operand = *input;
    if (f->a && apply_chain(r, f->a, input, &operand) != 0) return -1;
    return apply_filter(r, f, &operand, out);
}

static int eval_test(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val v, pos[CALL_MAX_ARGS];
    struct jinja_kwarg kw[CALL_MAX_ARGS];
    struct jinja_args a;
    int res = 0;
    if (jinja_eval(r, n->a, &v) != 0 || eval_args(r, n, pos, kw, &a) != 0) return -1;
    r->line = n->line;
    r->col = n->col;
    if (n->builtin < 0) return jinja_fail(r, "no test named '%.*s'", (int)n->name_len, n->name);
    if (jinja_test_apply(r, n->builtin, &v, &a, &res) != 0) return -1;
    *out = jinja_bool(res != (n->op == 1));
    return 0;
}

/* ---------- expressions ---------- */

static int eval_name(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    if (scope_get(r, n->name, n->name_len, out)) return 0;
    int f = jinja_func_find(n->name, n->name_len);
    if (f >= 0) {
        *out = (struct jinja_val){.type = JV_FUNC};
        out->u.i = f;
    } else {
        *out = jinja_undef(n);
    }
    return 0;
}

static int eval_literal(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    if (n->kind == JN_DICT) {
        struct jinja_dict *d = jinja_dict_new(r, n->n_kids / 2);
        if (!d) return -1;
        for (uint32_t i = 0; i + 1 < n->n_kids; i += 2) {
            struct jinja_val k, v;
            if (jinja_eval(r, n->kids[i], &k) != 0 || jinja_eval(r, n->kids[i + 1], &v) != 0 ||
                jinja_dict_set(r, d, k, v) != 0)
                return -1;
        }
        *out = jinja_dictv(d, 0);
        return 0;
    }
    struct jinja_list *l = jinja_list_new(r, n->n_kids);
    if (!l) return -1;
    for (uint32_t i = 0; i < n->n_kids; i++)
        if (jinja_eval(r, n->kids[i], &l->items[i]) != 0) return -1;
    *out = jinja_listv(l, n->kind == JN_TUPLE);
    return 0;
}

static int eval_unary(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val v;
    if (jinja_eval(r, n->a, &v) != 0) return -1;
    if (n->kind == JN_NOT) {
        *out = jinja_bool(!jinja_truthy(&v));
        return 0;
    }
    if (!jinja_is_num(&v))
        return jinja_fail(r, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+',
                          jinja_type_name(&v));
    if (v.type == JV_FLOAT)
        *out = jinja_float(n->kind == JN_NEG ? -v.u.f : v.u.f);
    else if (n->kind == JN_NEG && v.u.i == INT64_MIN)
        return jinja_fail(r, "integer overflow");
    else
        *out = jinja_int(n->kind == JN_NEG ? -v.u.i : v.u.i);
    return 0;
}

static int eval_node(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    struct jinja_val a, b;
    switch (n->kind) {
    case JN_CONST:
        *out = n->value;
        return 0;
    case JN_NAME:
        return eval_name(r, n, out);
    case JN_ATTR:
        return jinja_eval(r, n->a, &a) || jinja_getattr(r, &a, n->name, n->name_len, n, out) ? -1 : 0;
    case JN_ITEM:
        return jinja_eval(r, n->a, &a) || jinja_eval(r, n->b, &b) || get_item(r, &a, &b, n, out) ? -1 : 0;
    case JN_SLICE:
        return eval_slice(r, n, out);
    case JN_CALL:
        return eval_call(r, n, out);
    case JN_FILTER:
        return jinja_eval(r, n->a, &a) || apply_filter(r, n, &a, out) ? -1 : 0;
    case JN_TEST:
        return eval_test(r, n, out);
    case JN_NOT:
    case JN_NEG:
    case JN_POS:
        return eval_unary(r, n, out);
    case JN_BINOP:
        return eval_binop(r, n, out);
    case JN_AND:
    case JN_OR:
        if (jinja_eval(r, n->a, out) != 0) return -1;
        if (jinja_truthy(out) == (n->kind == JN_OR)) return 0;
        return jinja_eval(r, n->b, out);
    case JN_COND:
        if (jinja_eval(r, n->b, &a) != 0) return -1;
        if (jinja_truthy(&a)) return jinja_eval(r, n->a, out);
        if (n->c) return jinja_eval(r, n->c, out);
        *out = jinja_undef(n);
        return 0;
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT:
        return eval_literal(r, n, out);
    default:
        return jinja_fail(r, "a statement where an expression was expected");
    }
}

static int enter(struct jinja_render *r, const struct jinja_node *n)
{
    r->line = n->line;
    r->col = n->col;
    if (++r->depth > r->lim.max_depth)
        return jinja_fail(r, "the template nests deeper than %d levels", r->lim.max_depth);
    return jinja_charge(r, 1);
}

int jinja_eval(struct jinja_render *r, const struct jinja_node *n, struct jinja_val *out)
{
    int rc = enter(r, n) != 0 ? -1 : eval_node(r, n, out);
    r->depth--;
    return rc;
}

/* ---------- statements ---------- */

/* Binds v to a target: a name, a tuple of names (v unpacked), or ns.attr. */
static int assign(struct jinja_render *r, const struct jinja_node *target, const struct jinja_val *v)
{
    if (target->kind == JN_NAME) return scope_set(r, target->name, target->name_len, v);
    if (target->kind == JN_ATTR) {
        struct jinja_val ns;
        if (!scope_get(r, target->a->name, target->a->name_len, &ns) || ns.type != JV_NS)
            return jinja_fail(r, "cannot set an attribute of '%.*s': not a namespace()",
                              (int)target->a->name_len, target->a->name);
        return jinja_dict_set(r, ns.u.d, jinja_str(target->name, target->name_len), *v);
    }
    struct jinja_list *items;
    if (jinja_iterate(r, v, &items) != 0) return -1;
    if (items->n != target->n_kids)
        return jinja_fail(r, "cannot unpack %u values into %u names", items->n, target->n_kids);
    for (uint32_t i = 0; i < target->n_kids; i++)
        if (scope_set(r, target->kids[i]->name, target->kids[i]->name_len, &items->items[i]) != 0) return -1;
    return 0;
}

/* Runs body with its output captured into a string. */
static int capture(struct jinja_render *r, const struct jinja_node *body, struct jinja_val *out)
{
    struct jinja_buf b = {0}, *saved = r->out;
    r->out = &b;
    int rc = jinja_exec(r, body);
    r->out = saved;
    if (rc != 0) {
        free(b.p);
        return rc;
    }
    return jinja_buf_take(r, &b, out);
}

int jinja_call_macro(struct jinja_render *r, const struct jinja_node *m, const struct jinja_args *a,
                     struct jinja_val *out)
{
    if (a->n_pos > (int)m->n_kids)
        return jinja_fail(r, "macro '%.*s' takes %u arguments (%d given)", (int)m->name_len, m->name,
                          m->n_kids, a->n_pos);
    for (int k = 0; k < a->n_kw; k++) {
        int known = 0;
        for (uint32_t i = 0; i < m->n_kids && !known; i++)
            known = m->kids[i]->name_len == a->kw[k].len &&
                    !memcmp(m->kids[i]->name, a->kw[k].name, a->kw[k].len);
        if (!known)
            return jinja_fail(r, "macro '%.*s' has no parameter '%.*s'", (int)m->name_len, m->name,
                              (int)a->kw[k].len, a->kw[k].name);
    }
    uint32_t saved_base = r->base;
    if (frame_push(r) != 0) return -1;
    r->base = r->n_frames - 1;
    int rc = 0;
    for (uint32_t i = 0; i < m->n_kids && rc == 0; i++) {
        const struct jinja_node *p = m->kids[i];
        struct jinja_val v = jinja_undef(p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(p->name_len < 63 ? p->name_len : 63), p->name);
        if (!jinja_arg(a, (int)i, name, &v) && p->a) rc = jinja_eval(r, p->a, &v);
        if (rc == 0) rc = scope_set(r, p->name, p->name_len, &v);
    }
    if (rc == 0) rc = capture(r, m->body, out);
    frame_pop(r);
    r->base = saved_base;
    return rc;
}

/* The items a for statement iterates: the sequence, less those its `if` clause rejects. */
static int for_items(struct jinja_render *r, const struct jinja_node *n, struct jinja_list **out)
{
    struct jinja_val seq;
    struct jinja_list *all;
    if (jinja_eval(r, n->b, &seq) != 0 || jinja_iterate(r, &seq, &all) != 0) return -1;
    if (!n->c) {
        *out = all;
        return 0;
    }
    struct jinja_list *kept = jinja_list_new(r, all->n);
    if (!kept) return -1;
    kept->n = 0;
    for (uint32_t i = 0; i < all->n; i++) {
        struct jinja_val keep;
        if (frame_push(r) != 0) return -1;
        int rc = assign(r, n->a, &all->items[i]);
        if (rc == 0) rc = jinja_eval(r, n->c, &keep);
        frame_pop(r);
        if (rc != 0) return -1;
        if (jinja_truthy(&keep)) kept->items[kept->n++] = all->items[i];
    }
    *out = kept;
    return 0;
}

static int exec_for(struct jinja_render *r, const struct jinja_node *n)
{
    struct jinja_list *items;
    if (for_items(r, n, &items) != 0) return -1;
    if (items->n == 0) return n->alt ? jinja_exec(r, n->alt) : 0;
    struct jinja_loop *loop = jinja_ralloc(r, sizeof *loop);
    if (!loop) return -1;
    loop->items = items->items;
    loop->n = items->n;
    struct jinja_val lv = {.type = JV_LOOP};
    lv.u.loop = loop;
    for (uint32_t i = 0; i < items->n; i++) {
        loop->i = i;
        if (frame_push(r) != 0) return -1;
        int rc = scope_set(r, "loop", 4, &lv);
        if (rc == 0) rc = assign(r, n->a, &items->items[i]);
        if (rc == 0) rc = jinja_exec(r, n->body);
        frame_pop(r);
        if (rc < 0) return -1;
        if (rc == JINJA_BREAK) break;
    }
    return 0;
}

static int exec_with(struct jinja_render *r, const struct jinja_node *n)
{
    struct jinja_val vals[CALL_MAX_ARGS];
    if (n->n_kids > CALL_MAX_ARGS) return jinja_fail(r, "more than %d assignments in with", CALL_MAX_ARGS);
    for (uint32_t i = 0; i < n->n_kids; i++) /* evaluated in the outer scope, then bound */
        if (jinja_eval(r, n->kids[i]->b, &vals[i]) != 0) return -1;
    if (frame_push(r) != 0) return -1;
    int rc = 0;
    for (uint32_t i = 0; i < n->n_kids && rc == 0; i++)
        rc = assign(r, n->kids[i]->a, &vals[i]);
    if (rc == 0) rc = jinja_exec(r, n->body);
    frame_pop(r);
    return rc;
}

static int exec_node(struct jinja_render *r, const struct jinja_node *n)
{
    struct jinja_val v, w;
    int rc;
    switch (n->kind) {
    case JN_BODY:
        for (uint32_t i = 0; i < n->n_kids; i++)
            if ((rc = jinja_exec(r, n->kids[i])) != 0) return rc;
        return 0;
    case JN_TEXT:
        return jinja_put(r, r->out, n->name, n->name_len);
    case JN_OUTPUT:
        return jinja_eval(r, n->a, &v) || jinja_write_str(r, r->out, &v) ? -1 : 0;
    case JN_IF:
        for (; n && n->kind == JN_IF; n = n->alt) {
            if (jinja_eval(r, n->a, &v) != 0) return -1;
            if (jinja_truthy(&v)) return jinja_exec(r, n->body);
        }
        return n ? jinja_exec(r, n) : 0;
    case JN_FOR:
        return exec_for(r, n);
    case JN_SET:
        return jinja_eval(r, n->b, &v) || assign(r, n->a, &v) ? -1 : 0;
    case JN_SET_BLOCK:
        if ((rc = capture(r, n->body, &v)) != 0) return rc;
        if (n->c && apply_chain(r, n->c, &v, &w) != 0) return -1;
        return assign(r, n->a, n->c ? &w : &v);
    case JN_MACRO:
        v = (struct jinja_val){.type = JV_MACRO};
        v.u.node = n;
        return scope_set(r, n->name, n->name_len, &v);
    case JN_FILTER_BLOCK:
        if ((rc = capture(r, n->body, &v)) != 0) return rc;
        return apply_chain(r, n->c, &v, &w) || jinja_write_str(r, r->out, &w) ? -1 : 0;
    case JN_WITH:
        return exec_with(r, n);
    case JN_BREAK:
        return JINJA_BREAK;
    case JN_CONTINUE:
        return JINJA_CONTINUE;
    default:
        return jinja_fail(r, "an expression where a statement was expected");
    }
}

int jinja_exec(struct jinja_render *r, const struct jinja_node *n)
{
    int rc = enter(r, n) != 0 ? -1 : exec_node(r, n);
    r->depth--;
    return rc;
}

/* ---------- a whole render ---------- */

int jinja_render_tree(struct jinja_render *r, const json_t *vars, struct jinja_buf *out)
{
    if (frame_push(r) != 0) return -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vars, k, v)
    {
        struct jinja_val x;
        if (jinja_from_json(r, v, 0, &x) != 0 || scope_set(r, k, strlen(k), &x) != 0) return -1;
    }
    r->out = out;
    int rc = jinja_exec(r, r->t->root);
    return rc == 0 ? 0 : -1;
}

void jinja_render_release(struct jinja_render *r)
{
    for (uint32_t i = 0; i < r->cap_frames; i++)
        free(r->frames[i].vars);
    free(r->frames);
    r->frames = NULL;
    r->n_frames = r->cap_frames = 0;
    jinja_arena_free(&r->mem);
}
