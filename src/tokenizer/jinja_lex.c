/* jinja_lex — template text to tokens, as Jinja2's lexer does with trim_blocks and lstrip_blocks on.
 *
 * The source (already normalized: every newline is "\n") is text with tags in it: {{ expression }},
 * {% statement %}, {# comment #} and {% raw %}...{% endraw %}. Whitespace control works on the text
 * around tags:
 *   - a tag opened with "-" ({{-, {%-, {#-) strips all whitespace at the end of the text before it;
 *   - otherwise a block or comment tag (not {{) opened without "+" strips the blanks between the last
 *     newline of the text before it and the tag, when only blanks are there (lstrip_blocks) -- also at the
 *     start of the template or right after a tag that ended a line;
 *   - a tag closed with "-" (-}}, -%}, -#}) strips all whitespace after it;
 *   - otherwise a block or comment tag closed without "+" drops one newline right after it (trim_blocks).
 * Whitespace is Python's (str.isspace), as Jinja's regexes and str.rstrip() see it.
 *
 * Invariant: tokens cover the source in order and end with JT_EOF; a JT_TEXT is a non-empty slice of
 * the source; inside a tag its closing delimiter counts only when every bracket opened in it is closed
 * (as Jinja's balancing stack), so "{{ {'a': {'b': 1}} }}" is one expression.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

enum { LX_MAX_BRACKETS = 256 };

struct lexer {
    const char *s;
    size_t n, pos;
    uint32_t line;     /* line of pos (1-based) */
    size_t line_start; /* offset where that line starts */
    int line_starting; /* the last tag ended with a newline, or pos is the start */
    struct jinja_tok *t;
    size_t nt, cap;
    struct jinja_arena *mem;
    struct err *e;
};

/* Moves pos forward to `to`, counting lines. */
static void lx_seek(struct lexer *lx, size_t to)
{
    for (size_t i = lx->pos; i < to; i++)
        if (lx->s[i] == '\n') {
            lx->line++;
            lx->line_start = i + 1;
        }
    lx->pos = to;
}

static uint32_t lx_col(const struct lexer *lx)
{
    return (uint32_t)(lx->pos - lx->line_start + 1);
}

static int lx_fail(struct lexer *lx, const char *what)
{
    return err_set(lx->e, "line %u:%u: %s", lx->line, lx_col(lx), what);
}

/* Appends a token at the current position; NULL when out of memory (e set). */
static struct jinja_tok *lx_emit(struct lexer *lx, uint8_t type)
{
    if (lx->nt == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct jinja_tok *t = realloc(lx->t, cap * sizeof *t);
        if (!t) {
            err_set(lx->e, "out of memory (template tokens)");
            return NULL;
        }
        lx->t = t;
        lx->cap = cap;
    }
    struct jinja_tok *k = &lx->t[lx->nt++];
    memset(k, 0, sizeof *k);
    k->type = type;
    k->line = lx->line;
    k->col = lx_col(lx);
    return k;
}

/* Offset of the next "{{", "{%" or "{#" at or after pos, or n. */
static size_t lx_find_tag(const struct lexer *lx, size_t pos)
{
    while (pos + 1 < lx->n) {
        const char *b = memchr(lx->s + pos, '{', lx->n - pos - 1);
        if (!b) break;
        size_t i = (size_t)(b - lx->s);
        char c = lx->s[i + 1];
        if (c == '{' || c == '%' || c == '#') return i;
        pos = i + 1;
    }
    return lx->n;
}

/* The end of the text s[begin..end) that stays before a tag of kind ('{', '%' or '#') with sign ('-', '+'
 * or 0): whitespace control on the left of a tag. */
static size_t lx_text_end(const struct lexer *lx, size_t begin, size_t end, char kind, char sign)
{
    const char *s = lx->s;
    if (sign == '-') return end - jinja_space_suffix(s + begin, end - begin);
    if (sign == '+' || kind == '{') return end;
    size_t l = end; /* lstrip_blocks: from the last newline of the text (or its start) to the tag */
    while (l > begin && s[l - 1] != '\n')
        l--;
    if (l == begin && !lx->line_starting) return end; /* no newline in the text, and it starts mid-line */
    if (l == end) return end;
    return jinja_space_suffix(s + l, end - l) == end - l ? l : end;
}

static int lx_text(struct lexer *lx, size_t end)
{
    if (end > lx->pos) {
        struct jinja_tok *k = lx_emit(lx, JT_TEXT);
        if (!k) return -1;
        k->p = lx->s + lx->pos;
        k->n = end - lx->pos;
    }
    return 0;
}

/* After a closing delimiter: strips all whitespace ('-'), nothing ('+'), or one newline when trim is set. */
static void lx_after_close(struct lexer *lx, char sign, int trim)
{
    size_t p = lx->pos;
    if (sign == '-')
        p += jinja_space_prefix(lx->s + p, lx->n - p);
    else if (sign != '+' && trim && p < lx->n && lx->s[p] == '\n')
        p++;
    lx->line_starting = p > lx->pos && lx->s[p - 1] == '\n';
    lx_seek(lx, p);
}

/* pos is just after "{#" and its sign: skips to the end of the comment. */
static int lx_comment(struct lexer *lx)
{
    size_t body = lx->pos;
    const char *end = memmem(lx->s + body, lx->n - body, "#}", 2);
    if (!end) return lx_fail(lx, "the comment is not closed (no #})");
    size_t at = (size_t)(end - lx->s);
    char sign = at > body && (lx->s[at - 1] == '-' || lx->s[at - 1] == '+') ? lx->s[at - 1] : 0;
    lx_seek(lx, at + 2);
    lx_after_close(lx, sign, 1);
    return 0;
}

static int lx_is_word(const char *s, size_t n, size_t p, const char *w)
{
    size_t k = strlen(w);
    return p + k <= n && memcmp(s + p, w, k) == 0;
}

/* At tag (a "{%"): when it opens {% raw %}, sets *raw_end to the offset after its closing "%}" (or "-%}"
 * and whitespace). */
static int lx_raw_begin(const struct lexer *lx, size_t tag, size_t *raw_end)
{
    const char *s = lx->s;
    size_t p = tag + 2;
    if (p < lx->n && (s[p] == '-' || s[p] == '+')) p++;
    p += jinja_space_prefix(s + p, lx->n - p);
    if (!lx_is_word(s, lx->n, p, "raw")) return 0;
    p += 3;
    p += jinja_space_prefix(s + p, lx->n - p);
    if (lx_is_word(s, lx->n, p, "-%}")) {
        p += 3;
        p += jinja_space_prefix(s + p, lx->n - p);
    } else if (lx_is_word(s, lx->n, p, "%}")) {
        p += 2;
    } else {
        return 0;
    }
    *raw_end = p;
    return 1;
}

/* pos is the start of a raw block's text: emits it as text up to {% endraw %}. */
static int lx_raw(struct lexer *lx)
{
    const char *s = lx->s;
    for (size_t p = lx->pos;; p++) {
        p = lx_find_tag(lx, p);
        if (p >= lx->n) return lx_fail(lx, "{% raw %} is not closed with {% endraw %}");
        if (s[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = q < lx->n && (s[q] == '-' || s[q] == '+') ? s[q] : 0;
        q += sign != 0;
        q += jinja_space_prefix(s + q, lx->n - q);
        if (!lx_is_word(s, lx->n, q, "endraw")) continue;
        q += 6;
        q += jinja_space_prefix(s + q, lx->n - q);
        char close = 0;
        if (q < lx->n && (s[q] == '-' || s[q] == '+')) close = s[q++];
        if (!lx_is_word(s, lx->n, q, "%}")) continue;
        if (lx_text(lx, lx_text_end(lx, lx->pos, p, '%', sign)) != 0) return -1;
        lx_seek(lx, q + 2);
        lx_after_close(lx, close, 1);
        return 0;
    }
}

/* ---------- tokens inside a tag ---------- */

/* clang-format off */
static const struct {
    const char *text;
    uint8_t op;
} lx_ops[] = {
    {"//", JO_FLOORDIV}, {"**", JO_POW}, {"==", JO_EQ}, {"!=", JO_NE}, {">=", JO_GE}, {"<=", JO_LE},
    {"+", JO_ADD}, {"-", JO_SUB}, {"/", JO_DIV}, {"*", JO_MUL}, {"%", JO_MOD}, {"~", JO_CONCAT},
    {"[", JO_LBRACKET}, {"]", JO_RBRACKET}, {"(", JO_LPAREN}, {")", JO_RPAREN}, {"{", JO_LBRACE},
    {"}", JO_RBRACE}, {">", JO_GT}, {"<", JO_LT}, {"=", JO_ASSIGN}, {".", JO_DOT}, {":", JO_COLON},
    {"|", JO_PIPE}, {",", JO_COMMA}, {";", JO_SEMICOLON},
};
/* clang-format on */

static int lx_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int lx_is_name(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && lx_is_digit(c));
}

/* Digits with single underscores between them, from p: the end offset. */
static size_t lx_digits(const char *s, size_t n, size_t p)
{
    while (p < n && (lx_is_digit(s[p]) ||
                     (s[p] == '_' && p + 1 < n && lx_is_digit(s[p + 1]) && p > 0 && lx_is_digit(s[p - 1]))))
        p++;
    return p;
}

static int lx_number(struct lexer *lx)
{
    const char *s = lx->s;
    size_t p = lx->pos, end = lx_digits(s, lx->n, p);
    int after_dot = lx->nt > 0 && lx->t[lx->nt - 1].type == JT_OP && lx->t[lx->nt - 1].op == JO_DOT;
    int is_float = 0;
    if (!after_dot && end + 1 < lx->n && s[end] == '.' && lx_is_digit(s[end + 1])) {
        end = lx_digits(s, lx->n, end + 1);
        is_float = 1;
    }
    if (!after_dot && end < lx->n && (s[end] == 'e' || s[end] == 'E')) {
        size_t q = end + 1;
        if (q < lx->n && (s[q] == '+' || s[q] == '-')) q++;
        if (q < lx->n && lx_is_digit(s[q])) {
            end = lx_digits(s, lx->n, q);
            is_float = 1;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t i = p; i < end && k + 1 < sizeof buf; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = '\0';
    if (end - p >= sizeof buf) return lx_fail(lx, "number literal too long");
    struct jinja_tok *t = lx_emit(lx, is_float ? JT_FLOAT : JT_INT);
    if (!t) return -1;
    errno = 0;
    if (is_float)
        t->f = strtod(buf, NULL);
    else
        t->i = strtoll(buf, NULL, 10);
    if (errno == ERANGE && !is_float) return lx_fail(lx, "integer literal out of range");
    lx_seek(lx, end);
    return 0;
}

static int lx_hex(const char *s, size_t n, size_t p, int digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (p + (size_t)i >= n) return -1;
        char c = s[p + (size_t)i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + (uint32_t)d;
    }
    *cp = v;
    return 0;
}

static size_t lx_put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the escape at s[*p] (just after a backslash) into o: bytes written, or -1 (bad escape). */
static int lx_escape(const char *s, size_t n, size_t *p, char *o)
{
    char c = s[*p];
    static const char simple_in[] = "\\'\"abfnrtv", simple_out[] = "\\'\"\a\b\f\n\r\t\v";
    const char *k = c ? strchr(simple_in, c) : NULL;
    (*p)++;
    if (k) {
        o[0] = simple_out[k - simple_in];
        return 1;
    }
    if (c == '\n') return 0; /* a backslash at the end of a line joins the lines */
    uint32_t cp = 0;
    if (c >= '0' && c <= '7') {
        cp = (uint32_t)(c - '0');
        for (int i = 0; i < 2 && *p < n && s[*p] >= '0' && s[*p] <= '7'; i++)
            cp = cp * 8 + (uint32_t)(s[(*p)++] - '0');
    } else if (c == 'x' || c == 'u' || c == 'U') {
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (lx_hex(s, n, *p, digits, &cp)) return -1;
        *p += (size_t)digits;
    } else {
        o[0] = '\\'; /* an unknown escape stays as written */
        o[1] = c;
        return 2;
    }
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    return (int)lx_put_utf8(o, cp);
}

static int lx_string(struct lexer *lx)
{
    const char *s = lx->s;
    char q = s[lx->pos];
    size_t p = lx->pos + 1;
    while (p < lx->n && s[p] != q)
        p += s[p] == '\\' ? 2 : 1;
    if (p >= lx->n) return lx_fail(lx, "the string literal is not closed");
    size_t body = lx->pos + 1, end = p;
    char *o = jinja_alloc(lx->mem, end - body + 1); /* escapes never decode longer than written */
    if (!o) return err_set(lx->e, "out of memory (template strings)");
    size_t k = 0;
    for (size_t i = body; i < end;) {
        if (s[i] != '\\') {
            o[k++] = s[i++];
            continue;
        }
        i++;
        int w = lx_escape(s, end, &i, o + k);
        if (w < 0) {
            lx_seek(lx, i);
            return lx_fail(lx, "bad escape in a string literal (or a NUL or invalid code point)");
        }
        k += (size_t)w;
    }
    struct jinja_tok *t = lx_emit(lx, JT_STRING);
    if (!t) return -1;
    t->p = o;
    t->n = k;
    lx_seek(lx, end + 1);
    return 0;
}

/* The brackets open in a tag: what closes each, innermost last. */
struct lx_brackets {
    char want[LX_MAX_BRACKETS];
    int n;
};

static int lx_bracket(struct lexer *lx, struct lx_brackets *b, uint8_t op)
{
    static const char open[] = {JO_LBRACKET, JO_LPAREN, JO_LBRACE},
                      close[] = {JO_RBRACKET, JO_RPAREN, JO_RBRACE};
    static const char text[] = "])}";
    char msg[64];
    for (int i = 0; i < 3; i++) {
        if (op == open[i]) {
            if (b->n == LX_MAX_BRACKETS) return lx_fail(lx, "brackets nested too deeply");
            b->want[b->n++] = text[i];
            return 0;
        }
        if (op != close[i]) continue;
        if (b->n == 0) {
            snprintf(msg, sizeof msg, "unexpected '%c' (no bracket is open)", text[i]);
            return lx_fail(lx, msg);
        }
        if (b->want[b->n - 1] != text[i]) {
            snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", text[i], b->want[b->n - 1]);
            return lx_fail(lx, msg);
        }
        b->n--;
    }
    return 0;
}

/* One token inside a tag. */
static int lx_token(struct lexer *lx, struct lx_brackets *br)
{
    const char *s = lx->s;
    char c = s[lx->pos];
    if (lx_is_digit(c)) return lx_number(lx);
    if (c == '\'' || c == '"') return lx_string(lx);
    if (lx_is_name(c, 1)) {
        size_t p = lx->pos;
        while (p < lx->n && lx_is_name(s[p], 0))
            p++;
        struct jinja_tok *t = lx_emit(lx, JT_NAME);
        if (!t) return -1;
        t->p = s + lx->pos;
        t->n = p - lx->pos;
        lx_seek(lx, p);
        return 0;
    }
    for (size_t i = 0; i < sizeof lx_ops / sizeof lx_ops[0]; i++) {
        size_t k = strlen(lx_ops[i].text);
        if (lx->pos + k > lx->n || memcmp(s + lx->pos, lx_ops[i].text, k) != 0) continue;
        if (lx_bracket(lx, br, lx_ops[i].op) != 0) return -1;
        struct jinja_tok *t = lx_emit(lx, JT_OP);
        if (!t) return -1;
        t->op = lx_ops[i].op;
        lx_seek(lx, lx->pos + k);
        return 0;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "unexpected character '%c' in a tag",
             (unsigned char)c >= 0x20 && c != 0x7f ? c : '?');
    return lx_fail(lx, msg);
}

/* At the closing delimiter of a tag of kind '{' or '%' (outside brackets): consumes it and returns 1. */
static int lx_close(struct lexer *lx, char kind)
{
    const char *end = kind == '{' ? "}}" : "%}";
    const char *s = lx->s + lx->pos;
    size_t left = lx->n - lx->pos;
    char sign = 0;
    if (left >= 3 && (s[0] == '-' || (s[0] == '+' && kind == '%')) && memcmp(s + 1, end, 2) == 0)
        sign = s[0];
    else if (!(left >= 2 && memcmp(s, end, 2) == 0))
        return 0;
    if (!lx_emit(lx, kind == '{' ? JT_VAR_END : JT_BLOCK_END)) return -1;
    lx_seek(lx, lx->pos + 2 + (sign != 0));
    lx_after_close(lx, sign, kind == '%');
    return 1;
}

/* pos is just after "{{" or "{%" and its sign: the tokens of the tag, then its closing delimiter. */
static int lx_tag(struct lexer *lx, char kind, uint32_t line, uint32_t col)
{
    struct lx_brackets br = {.n = 0};
    for (;;) {
        lx_seek(lx, lx->pos + jinja_space_prefix(lx->s + lx->pos, lx->n - lx->pos));
        if (lx->pos >= lx->n)
            return err_set(lx->e, "line %u:%u: the tag opened here is not closed (no %s)", line, col,
                           kind == '{' ? "}}" : "%}");
        if (br.n == 0) {
            int c = lx_close(lx, kind);
            if (c < 0) return -1;
            if (c) return 0;
        }
        if (lx_token(lx, &br) != 0) return -1;
    }
}

static int lx_run(struct lexer *lx)
{
    while (lx->pos < lx->n) {
        size_t tag = lx_find_tag(lx, lx->pos);
        if (tag >= lx->n) {
            if (lx_text(lx, lx->n) != 0) return -1;
            lx_seek(lx, lx->n);
            break;
        }
        char kind = lx->s[tag + 1];
        char sign = tag + 2 < lx->n && (lx->s[tag + 2] == '-' || lx->s[tag + 2] == '+') ? lx->s[tag + 2] : 0;
        size_t raw_end = 0;
        int raw = kind == '%' && lx_raw_begin(lx, tag, &raw_end);
        if (lx_text(lx, lx_text_end(lx, lx->pos, tag, kind, sign)) != 0) return -1;
        lx_seek(lx, tag);
        uint32_t line = lx->line, col = lx_col(lx);
        if (raw) {
            lx_seek(lx, raw_end);
            if (lx_raw(lx) != 0) return -1;
            continue;
        }
        lx_seek(lx, tag + 2 + (sign != 0));
        if (kind == '#') {
            if (lx_comment(lx) != 0) return -1;
            continue;
        }
        struct jinja_tok *t = lx_emit(lx, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN);
        if (!t) return -1;
        t->line = line;
        t->col = col;
        if (lx_tag(lx, kind, line, col) != 0) return -1;
    }
    return lx_emit(lx, JT_EOF) ? 0 : -1;
}

int jinja_lex(const char *src, size_t len, struct jinja_arena *mem, struct jinja_tok **toks, size_t *n_toks,
              struct err *e)
{
    struct lexer lx = {.s = src, .n = len, .line = 1, .line_starting = 1, .mem = mem, .e = e};
    *toks = NULL;
    *n_toks = 0;
    if (lx_run(&lx) != 0) {
        free(lx.t);
        return -1;
    }
    *toks = lx.t;
    *n_toks = lx.nt;
    return 0;
}
