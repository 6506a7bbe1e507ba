/* input — see input.h.
 *
 * Invariant: the line buffer never holds more than max_line_bytes bytes; every non-blank physical line
 * yields exactly one item (request or bad line), in file order, with its byte offset; an id read from any
 * JSON line (good or bad) is in the id set (or was told to id_seen), so a later line with the same id is a
 * duplicate; a line with an unknown field is bad, and each unknown field name is warned about once. A line
 * read again (input_reread) is parsed by the same code from the same bytes, so it yields the same item while
 * the file is unchanged.
 */
#include "jobs/input.h"
#include "jobs/input_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "jobs/embedding.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/utf8.h"

enum { RBUF_BYTES = 1 << 16, DETECT_LINES = 32 };

/* --- a set of strings (ids, warned field names) --- */

struct strset {
    char **slot; /* (cap) owned strings or NULL */
    int64_t *val;
    size_t cap, n;
    uint64_t seed; /* random per set, so a crafted backlog cannot aim ids at one probe chain */
};

static uint64_t str_hash(const struct strset *s, const char *k)
{
    return XXH3_64bits_withSeed(k, strlen(k), s->seed);
}

static int strset_grow(struct strset *s)
{
    if (s->cap == 0 && getrandom(&s->seed, sizeof s->seed, GRND_NONBLOCK) != (ssize_t)sizeof s->seed)
        s->seed = (uint64_t)(clock_now() * 1e9) ^ (uint64_t)(uintptr_t)s; /* no entropy yet: still varies */
    size_t cap = s->cap ? s->cap * 2 : 1024;
    char **slot = calloc(cap, sizeof *slot);
    int64_t *val = calloc(cap, sizeof *val);
    if (!slot || !val) {
        free(slot);
        free(val);
        return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slot[i]) continue;
        size_t j = str_hash(s, s->slot[i]) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
        val[j] = s->val[i];
    }
    free(s->slot);
    free(s->val);
    s->slot = slot;
    s->val = val;
    s->cap = cap;
    return 0;
}

/* Finds s; returns its slot index or -1. */
static int64_t strset_find(const struct strset *s, const char *k)
{
    if (!s->cap) return -1;
    size_t j = str_hash(s, k) & (s->cap - 1);
    while (s->slot[j]) {
        if (!strcmp(s->slot[j], k)) return (int64_t)j;
        j = (j + 1) & (s->cap - 1);
    }
    return -1;
}

static int strset_add(struct strset *s, const char *k, int64_t v)
{
    if ((s->n + 1) * 2 > s->cap && strset_grow(s) != 0) return -1;
    char *c = strdup(k);
    if (!c) return -1;
    size_t j = str_hash(s, k) & (s->cap - 1);
    while (s->slot[j]) j = (j + 1) & (s->cap - 1);
    s->slot[j] = c;
    s->val[j] = v;
    s->n++;
    return 0;
}

static void strset_free(struct strset *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
    free(s->slot);
    free(s->val);
    memset(s, 0, sizeof *s);
}

/* --- items --- */

void input_item_free(struct input_item *it)
{
    if (!it) return;
    free(it->custom_id);
    free(it->message);
    free(it->prompt);
    free(it->prompt_ids);
    for (size_t i = 0; i < it->n_msgs; i++) {
        free(it->msgs[i].role);
        free(it->msgs[i].content);
    }
    free(it->msgs);
    free(it->model);
    embedding_input_free(it->embed);
    genparam_free(&it->gen);
    memset(it, 0, sizeof *it);
}

/* --- the reader --- */

struct input_reader {
    FILE *f;
    char *path;
    struct input_opts o;
    enum input_format format;
    char *rbuf;
    size_t rlen, rpos;
    int eof;
    char *line; /* (line_cap) at most max_line_bytes + 1 */
    size_t line_len, line_cap;
    unsigned char lead; /* first byte of the current line that is not a space, tab or CR (0: none yet) */
    int sniffed;        /* the first block was checked for being text (sniff_text) */
    int64_t line_off;   /* byte offset of the current line */
    char *reline[2];    /* (max_line_bytes + 8) input_reread's buffers: an id_seen callback may read an
                           earlier line's id while a line read again is being parsed */
    int depth;          /* input_reread calls in progress */
    int no_ids;         /* reading an id for input_reread_id: no duplicate check */
    int64_t n_lines, n_blank;
    uint64_t n_bytes;
    sha256_ctx *sha;
    uint8_t digest[32];
    int finished;
    struct strset ids;
    struct strset warned;
};

enum input_format input_get_format(const input_reader *r) { return r->format; }
int64_t input_n_lines(const input_reader *r) { return r->n_lines; }
int64_t input_n_blank(const input_reader *r) { return r->n_blank; }
uint64_t input_n_bytes(const input_reader *r) { return r->n_bytes; }
int input_n_unknown_fields(const input_reader *r) { return (int)r->warned.n; }
void input_file_sha256(const input_reader *r, uint8_t out[32]) { memcpy(out, r->digest, 32); }

static const char *const input_format_names[INPUT_FORMAT_COUNT] = {"auto", "openai", "jsonl", "text"};

const char *input_format_name(enum input_format f)
{
    return (unsigned)f < INPUT_FORMAT_COUNT ? input_format_names[f] : "auto";
}

int input_format_parse(const char *name, enum input_format *out)
{
    for (int f = 0; f < INPUT_FORMAT_COUNT; f++)
        if (!strcmp(name, input_format_names[f])) return *out = (enum input_format)f, 0;
    return -1;
}

void input_format_list(char *buf, size_t cap)
{
    size_t n = 0;
    for (int f = 0; f < INPUT_FORMAT_COUNT && n < cap; f++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", f == 0 ? "" : f + 1 < INPUT_FORMAT_COUNT ? ", " : " or ",
                              input_format_names[f]);
}

struct input_opts input_default_opts(void)
{
    struct input_opts o;
    memset(&o, 0, sizeof o);
    o.format = INPUT_FORMAT_AUTO;
    o.max_line_bytes = 1 << 20;
    o.defaults = genparam_defaults();
    return o;
}

/* Refuses a file that is not text before any line of it becomes a request: a UTF-16/32 byte order mark,
 * a NUL byte, or more than 1/8 of the first block not UTF-8 text (invalid sequences, or control bytes other
 * than tab, newline, CR, FF and VT). A file with a few bad bytes (Latin-1 accents) still reads: its lines
 * with them are bad lines. p: the first block (n bytes, at most RBUF_BYTES; the whole file when smaller). */
static int sniff_text(const input_reader *r, const unsigned char *p, size_t n, struct err *e)
{
    if (n >= 2 && ((p[0] == 0xff && p[1] == 0xfe) || (p[0] == 0xfe && p[1] == 0xff)))
        return err_set(e, "%s starts with a UTF-16 byte order mark; nightshift reads UTF-8 backlogs (convert it, e.g. "
                          "iconv -f UTF-16 -t UTF-8)", r->path);
    const unsigned char *nul = memchr(p, 0, n);
    if (nul)
        return err_set(e, "%s is not a text backlog: it holds a NUL byte (at byte %zu); is it a binary file?", r->path,
                       (size_t)(nul - p));
    size_t bad = 0, i = 0, end = n > UTF8_MAX_SEQ ? n - UTF8_MAX_SEQ : 0; /* a sequence cut by the block end is fine */
    while (i < end) {
        size_t k = utf8_seq_len(p + i, n - i);
        if (k == 0) k = 1, bad++;
        else if (k == 1 && ((p[i] < 0x20 && !strchr("\t\n\r\f\v", p[i])) || p[i] == 0x7f)) bad++;
        i += k;
    }
    if (bad * 8 > n)
        return err_set(e, "%s is not a text backlog: %zu of its first %zu bytes are not UTF-8 text; is it a binary "
                          "file?", r->path, bad, n);
    return 0;
}

/* Remembers the first byte of the line that is not blank, in a chunk of it (first: the chunk starts the
 * file, where a UTF-8 byte order mark is skipped). */
static void note_lead(input_reader *r, const char *p, size_t n, int first)
{
    if (r->lead) return;
    size_t i = first && n >= 3 && !memcmp(p, "\xef\xbb\xbf", 3) ? 3 : 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) i++;
    if (i < n) r->lead = (unsigned char)p[i];
}

/* Reads one physical line (without '\n' and a trailing '\r'). Returns 1 with a line, 0 at EOF, -1 on error.
 * *too_long: the line had more than max_line_bytes bytes (its content is not kept). */
static int read_line(input_reader *r, int *too_long, struct err *e)
{
    r->line_len = 0;
    r->lead = 0;
    r->line_off = (int64_t)r->n_bytes - (int64_t)(r->rlen - r->rpos);
    *too_long = 0;
    int got_any = 0;
    for (;;) {
        if (r->rpos == r->rlen) {
            if (r->eof) break;
            size_t n = fread(r->rbuf, 1, RBUF_BYTES, r->f);
            if (n == 0) {
                if (ferror(r->f)) return err_set(e, "%s: read: %s", r->path, strerror(errno));
                r->eof = 1;
                break;
            }
            if (!r->sniffed) {
                r->sniffed = 1;
                if (sniff_text(r, (const unsigned char *)r->rbuf, n, e) != 0) return -1;
            }
            sha256_update(r->sha, r->rbuf, n);
            r->n_bytes += n;
            r->rlen = n;
            r->rpos = 0;
        }
        got_any = 1;
        char *start = r->rbuf + r->rpos;
        size_t avail = r->rlen - r->rpos;
        char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        note_lead(r, start, take, r->n_lines == 0 && r->n_bytes == r->rlen && r->rpos == 0);
        if (!*too_long) {
            /* one byte of slack for a '\r' that will be stripped */
            if (r->line_len + take > r->o.max_line_bytes + 1) {
                *too_long = 1;
            } else {
                if (r->line_len + take + 1 > r->line_cap) {
                    size_t cap = r->line_cap ? r->line_cap : 4096;
                    while (cap < r->line_len + take + 1) cap *= 2;
                    if (cap > r->o.max_line_bytes + 2) cap = r->o.max_line_bytes + 2;
                    char *nb = realloc(r->line, cap);
                    if (!nb) return err_set(e, "%s: out of memory", r->path);
                    r->line = nb;
                    r->line_cap = cap;
                }
                memcpy(r->line + r->line_len, start, take);
                r->line_len += take;
            }
        }
        r->rpos += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!got_any) return 0;
    r->n_lines++;
    if (!*too_long) {
        /* a UTF-8 byte order mark before the first line is not part of it (editors on Windows add one) */
        if (r->n_lines == 1 && r->line_len >= 3 && !memcmp(r->line, "\xef\xbb\xbf", 3)) {
            memmove(r->line, r->line + 3, r->line_len - 3);
            r->line_len -= 3;
        }
        if (r->line_len && r->line[r->line_len - 1] == '\r') r->line_len--;
        if (r->line_len > r->o.max_line_bytes) *too_long = 1;
        else r->line[r->line_len] = '\0';
    }
    return 1;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

static int rewind_reader(input_reader *r, struct err *e)
{
    if (fseek(r->f, 0, SEEK_SET) != 0) return err_set(e, "%s: cannot seek: %s", r->path, strerror(errno));
    sha256_abort(r->sha);
    r->sha = sha256_init();
    if (!r->sha) return err_set(e, "out of memory");
    r->rlen = r->rpos = 0;
    r->eof = 0;
    r->n_lines = r->n_blank = 0;
    r->n_bytes = 0;
    return 0;
}

static int detect_format(input_reader *r, struct err *e)
{
    int n_seen = 0, n_json = 0, n_openai = 0;
    while (n_seen < DETECT_LINES) {
        int too_long;
        int rc = read_line(r, &too_long, e);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (too_long) { /* its content is gone, but how it starts still says what it is */
            n_seen++;
            n_json += r->lead == '{';
            continue;
        }
        if (is_blank(r->line, r->line_len)) continue;
        n_seen++;
        size_t i = 0;
        while (i < r->line_len && (r->line[i] == ' ' || r->line[i] == '\t')) i++;
        if (i < r->line_len && r->line[i] == '{') n_json++;
        else continue;
        json_t *j = json_loadb(r->line, r->line_len, 0, NULL);
        if (json_is_object(j) && (json_object_get(j, "custom_id") || json_object_get(j, "body"))) n_openai++;
        json_decref(j);
    }
    if (n_seen > 0 && n_json * 2 > n_seen) r->format = n_openai ? INPUT_FORMAT_OPENAI : INPUT_FORMAT_JSONL;
    else if (n_seen == 0) r->format = INPUT_FORMAT_JSONL; /* empty file: nothing to read either way */
    else r->format = INPUT_FORMAT_TEXT;
    return rewind_reader(r, e);
}

int input_open(const char *path, const struct input_opts *o, input_reader **out, struct err *e)
{
    *out = NULL;
    input_reader *r = calloc(1, sizeof *r);
    if (!r) return err_set(e, "out of memory");
    r->o = *o;
    if (r->o.max_line_bytes < 16) r->o.max_line_bytes = 16;
    r->path = strdup(path);
    r->rbuf = malloc(RBUF_BYTES);
    r->sha = sha256_init();
    if (!r->path || !r->rbuf || !r->sha) {
        err_set(e, "out of memory");
        goto fail;
    }
    r->f = fopen(path, "rb");
    if (!r->f) {
        err_set(e, "%s: %s", path, strerror(errno));
        goto fail;
    }
    r->format = o->format;
    if (r->format == INPUT_FORMAT_AUTO && detect_format(r, e) != 0) goto fail;
    *out = r;
    return 0;
fail:
    input_close(r);
    return -1;
}

void input_close(input_reader *r)
{
    if (!r) return;
    if (r->f) fclose(r->f);
    sha256_abort(r->sha);
    free(r->path);
    free(r->rbuf);
    free(r->line);
    free(r->reline[0]);
    free(r->reline[1]);
    strset_free(&r->ids);
    strset_free(&r->warned);
    free(r);
}

/* --- parsing one line (the request object itself: input_body.c) --- */

void input_warn_unknown(input_reader *r, const char *prefix, const char *name, int64_t line)
{
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    if (r->o.quiet || strset_find(&r->warned, full) >= 0) return;
    if (r->warned.n < 256) {
        strset_add(&r->warned, full, line);
        log_warn("%s: line %lld: unknown field '%s': lines with it fail (warned once per field name)", r->path,
                 (long long)line, full);
    }
}

/* Registers the id (in the reader's own set, or through the id_seen callback); a duplicate is a bad line. */
static int take_id(input_reader *r, struct input_item *it, const char *id, struct input_bad *b)
{
    it->custom_id = strdup(id);
    if (!it->custom_id) return input_set_bad(b, "invalid_value", "out of memory");
    if (r->no_ids) return 0;
    if (r->o.id_seen) {
        int64_t first;
        int seen = r->o.id_seen(r->o.id_user, id, it->line, &first);
        if (seen < 0) return input_set_bad(b, "invalid_value", "out of memory");
        if (seen)
            return input_set_bad(b, "duplicate_id", "duplicate id \"%.100s\" (first on line %lld)", id,
                                 (long long)first);
        return 0;
    }
    int64_t at = strset_find(&r->ids, id);
    if (at >= 0 && r->ids.val[at] == it->line) return 0; /* read again (input_reread): its own id */
    if (at >= 0)
        return input_set_bad(b, "duplicate_id", "duplicate id \"%.100s\" (first on line %lld)", id,
                             (long long)r->ids.val[at]);
    if (strset_add(&r->ids, id, it->line) != 0) return input_set_bad(b, "invalid_value", "out of memory");
    return 0;
}

static int read_id(input_reader *r, const json_t *v, const char *name, int allow_int, struct input_item *it,
                   struct input_bad *b)
{
    char num[32];
    const char *id;
    if (!v || json_is_null(v)) return input_set_bad(b, "missing_id", "missing '%s'", name);
    if (json_is_string(v)) {
        id = json_string_value(v);
        if (strlen(id) != json_string_length(v))
            return input_set_bad(b, "invalid_value", "'%s' contains a NUL byte", name);
    } else if (allow_int && json_is_integer(v)) {
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        id = num;
    } else {
        return input_set_bad(b, "invalid_type", "'%s' must be a string%s, got %s", name,
                             allow_int ? " or an integer" : "", genparam_json_type(v));
    }
    if (!*id) return input_set_bad(b, "missing_id", "'%s' is empty", name);
    if (strlen(id) > INPUT_MAX_ID_BYTES)
        return input_set_bad(b, "invalid_value", "'%s' is longer than %d bytes", name, INPUT_MAX_ID_BYTES);
    return take_id(r, it, id, b);
}

/* The id of a line's object: "custom_id" (openai), or "id" or else "custom_id" (jsonl, integers allowed). */
static int read_line_id(input_reader *r, const json_t *root, struct input_item *it, struct input_bad *b)
{
    if (r->format == INPUT_FORMAT_OPENAI) return read_id(r, json_object_get(root, "custom_id"), "custom_id", 0, it, b);
    const json_t *id = json_object_get(root, "id");
    if (!id && json_object_get(root, "custom_id"))
        return read_id(r, json_object_get(root, "custom_id"), "custom_id", 1, it, b);
    return read_id(r, id, "id", 1, it, b);
}

static int is_token_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' || c == '-' ||
           c == '.';
}

/* A line that is JSON but for out-of-range numbers (or NaN / Infinity tokens) still has an id: each bad token
 * is blanked out of a copy (it becomes "[]", which no id can be) until the copy parses, and the id is read
 * from that into *it (registered as any other id). At most 16 tokens; no id when the copy never parses. */
static void salvage_id(input_reader *r, const json_error_t *first, struct input_item *it)
{
    size_t len = r->line_len;
    char *copy = malloc(len + 1);
    if (!copy) return;
    memcpy(copy, r->line, len + 1);
    json_error_t jerr = *first;
    for (int k = 0; k < 16 && input_is_number_error(copy, len, &jerr); k++) {
        if (jerr.position < 0 || (size_t)jerr.position > len) break;
        size_t start = (size_t)jerr.position, end = start;
        while (start > 0 && is_token_char(copy[start - 1])) start--;
        while (end < len && is_token_char(copy[end])) end++;
        if (end - start < 2) break;
        memset(copy + start, ' ', end - start);
        copy[start] = '[';
        copy[start + 1] = ']';
        json_t *root = json_loadb(copy, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
        if (root) {
            struct input_bad ignored;
            if (json_is_object(root)) read_line_id(r, root, it, &ignored);
            json_decref(root);
            break;
        }
    }
    free(copy);
}

static int parse_json_line(input_reader *r, struct input_item *it, struct input_bad *b)
{
    json_t *root;
    json_error_t jerr;
    if (input_load_object(r->line, r->line_len, "a line", &root, &jerr, b)) {
        if (input_is_number_error(r->line, r->line_len, &jerr)) salvage_id(r, &jerr, it); /* the rest is JSON */
        return -1;
    }
    int rc = -1;
    if (read_line_id(r, root, it, b) != 0 || input_refuse_nul(root, b) != 0) goto done;
    if (r->format == INPUT_FORMAT_OPENAI) {
        const json_t *method = json_object_get(root, "method"), *url = json_object_get(root, "url");
        const json_t *body = json_object_get(root, "body");
        const char *k;
        json_t *v;
        json_object_foreach(root, k, v)
        {
            if (strcmp(k, "custom_id") && strcmp(k, "method") && strcmp(k, "url") && strcmp(k, "body"))
                input_warn_unknown(r, "", k, it->line);
        }
        if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST"))) {
            input_set_bad(b, "unsupported_request", "'method' must be \"POST\"");
            goto done;
        }
        int want_chat = -1;
        if (url) {
            const char *u = json_is_string(url) ? json_string_value(url) : "";
            if (!strcmp(u, "/v1/chat/completions")) want_chat = 1;
            else if (!strcmp(u, "/v1/completions")) want_chat = 0;
            else if (!strcmp(u, "/v1/embeddings")) want_chat = 2;
            else {
                input_set_bad(b, "unsupported_request",
                              "'url' must be \"/v1/chat/completions\", \"/v1/completions\" or \"/v1/embeddings\"");
                goto done;
            }
        }
        if (!body) {
            input_set_bad(b, "missing_prompt", "missing 'body'");
            goto done;
        }
        if (!json_is_object(body)) {
            input_set_bad(b, "invalid_type", "'body' must be an object, got %s", genparam_json_type(body));
            goto done;
        }
        static const char *const none[] = {NULL};
        if (want_chat == 2) { /* embeddings: one work per input (gen.n counts them) */
            if (input_read_embedding(body, it, b)) goto done;
        } else if (input_parse_fields(r, body, "body.", none, it, b) != 0) goto done;
        if (want_chat >= 0 && want_chat <= 1 && input_endpoint_mismatch(it, want_chat, b)) goto done;
    } else {
        static const char *const skip[] = {"id", "custom_id", NULL};
        if (input_parse_fields(r, root, "", skip, it, b) != 0) goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* Parses the line in r->line (line it->line, at byte it->off) into *it: a request or a bad line. Returns 1, or
 * -1 when out of memory. */
static int parse_line(input_reader *r, struct input_item *it, int too_long, struct err *e)
{
    struct input_bad b = {0};
    if (too_long) {
        input_set_bad(&b, "line_too_long", "line is over --max-line-bytes (%zu bytes)", r->o.max_line_bytes);
        goto bad_line;
    }
    if (genparam_copy(&it->gen, &r->o.defaults, e) != 0) return -1;
    size_t bad_at;
    if (!utf8_valid(r->line, r->line_len, &bad_at)) {
        input_set_bad(&b, "invalid_utf8", "invalid UTF-8 at byte %zu", bad_at);
        goto bad_line;
    }
    if (r->format == INPUT_FORMAT_TEXT) {
        if (memchr(r->line, '\0', r->line_len)) {
            input_set_bad(&b, "invalid_value", "the line contains a NUL byte");
            goto bad_line;
        }
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)it->line);
        it->custom_id = strdup(num); /* line numbers are unique: no id set */
        it->kind = INPUT_KIND_COMPLETION;
        it->prompt = malloc(r->line_len + 1);
        if (!it->custom_id || !it->prompt) return err_set(e, "out of memory");
        memcpy(it->prompt, r->line, r->line_len + 1);
        it->prompt_len = r->line_len;
        return 1;
    }
    if (parse_json_line(r, it, &b) != 0) goto bad_line;
    return 1;
bad_line:
    if (input_to_bad_item(it, &b, e) != 0) return -1;
    return 1;
}

int input_next(input_reader *r, struct input_item *it, struct err *e)
{
    memset(it, 0, sizeof *it);
    for (;;) {
        int too_long;
        int rc = read_line(r, &too_long, e);
        if (rc < 0) return -1;
        if (rc == 0) {
            if (!r->finished) {
                sha256_final(r->sha, r->digest);
                r->sha = NULL;
                r->finished = 1;
            }
            return 0;
        }
        it->line = r->n_lines;
        it->off = r->line_off;
        if (!too_long && is_blank(r->line, r->line_len)) {
            r->n_blank++;
            continue;
        }
        return parse_line(r, it, too_long, e);
    }
}

/* Reads the physical line at byte off into buf (max_line_bytes + 8 bytes) as read_line reads it: a UTF-8
 * byte order mark at offset 0 and a trailing CR dropped; *len, and *too_long when it has more than
 * max_line_bytes bytes. O(line) (pread: the sequential reader is not disturbed). */
static int reread_bytes(input_reader *r, int64_t off, char *buf, size_t *len, int *too_long, struct err *e)
{
    size_t max = r->o.max_line_bytes, cap = max + 8, n = 0, chunk = 512;
    *too_long = 0;
    for (;;) {
        size_t want = cap - 1 - n < chunk ? cap - 1 - n : chunk; /* lines are short: read little, then more */
        chunk *= 2;
        ssize_t got = pread(fileno(r->f), buf + n, want, (off_t)(off + (int64_t)n));
        if (got < 0) {
            if (errno == EINTR) continue;
            return err_set(e, "%s: read at byte %lld: %s", r->path, (long long)off, strerror(errno));
        }
        char *nl = memchr(buf + n, '\n', (size_t)got);
        n += (size_t)got;
        if (nl) {
            n = (size_t)(nl - buf);
            break;
        }
        if (got == 0) break;
        if (n > max + 1) { /* as read_line: more than max_line_bytes + 1 bytes before the newline */
            *too_long = 1;
            return 0;
        }
    }
    if (n > max + 1) {
        *too_long = 1;
        return 0;
    }
    if (off == 0 && n >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3)) {
        memmove(buf, buf + 3, n - 3);
        n -= 3;
    }
    if (n && buf[n - 1] == '\r') n--;
    if (n > max) *too_long = 1;
    buf[n] = '\0';
    *len = n;
    return 0;
}

int input_reread(input_reader *r, int64_t off, int64_t line, struct input_item *it, struct err *e)
{
    memset(it, 0, sizeof *it);
    it->line = line;
    it->off = off;
    size_t len = 0, cap = r->o.max_line_bytes + 8;
    int too_long, d = r->depth;
    if (off < 0) return err_set(e, "%s: line %lld has no offset (bug)", r->path, (long long)line);
    if (d >= 2) return err_set(e, "input: input_reread nested too deep (bug)");
    if (!r->reline[d] && !(r->reline[d] = malloc(cap))) return err_set(e, "out of memory");
    if (reread_bytes(r, off, r->reline[d], &len, &too_long, e) != 0) return -1;
    if (!too_long && is_blank(r->reline[d], len))
        return err_set(e, "%s: line %lld (byte %lld) is blank now: the backlog changed", r->path, (long long)line,
                       (long long)off);
    char *saved = r->line;
    size_t saved_len = r->line_len;
    r->line = r->reline[d];
    r->line_len = len;
    r->depth++;
    int rc = parse_line(r, it, too_long, e);
    r->depth--;
    r->line = saved;
    r->line_len = saved_len;
    return rc < 0 ? -1 : 0;
}

int input_reread_id(input_reader *r, int64_t off, int64_t line, char **id, struct err *e)
{
    struct input_item it;
    int saved = r->no_ids;
    r->no_ids = 1;
    int rc = input_reread(r, off, line, &it, e);
    r->no_ids = saved;
    *id = NULL;
    if (rc != 0) return -1;
    *id = it.custom_id;
    it.custom_id = NULL;
    input_item_free(&it);
    return 0;
}

