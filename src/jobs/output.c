/* output — see output.h.
 *
 * Invariant: every line produced here is one valid JSON object (valid UTF-8, control characters escaped)
 * followed by exactly one '\n', and its bytes depend only on the arguments; after output_repair the file
 * size equals the end of the last scheduled line and the write position is there.
 */
#include "jobs/output.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "util/utf8.h"

/* --- buffer --- */

void output_buf_free(struct output_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int buf_reserve(struct output_buf *b, size_t extra)
{
    if (b->oom) return -1;
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
        b->oom = 1;
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

void output_buf_put(struct output_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0) return;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_str(struct output_buf *b, const char *s)
{
    output_buf_put(b, s, strlen(s));
}

static void put_i64(struct output_buf *b, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRId64, v);
    output_buf_put(b, t, (size_t)n);
}

void output_buf_put_json_string(struct output_buf *b, const char *str, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    if (buf_reserve(b, n + 2) != 0) return;
    b->p[b->n++] = '"';
    size_t i = 0;
    while (i < n) {
        /* copy a run of plain ASCII at once */
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' && s[j] != '\\') j++;
        if (j > i) {
            output_buf_put(b, s + i, j - i);
            i = j;
            if (i == n) break;
        }
        unsigned c = s[i];
        if (c < 0x80) {
            char esc[6] = {'\\', 0, 0, 0, 0, 0};
            size_t len = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            default:
                esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hx[c >> 4], esc[5] = hx[c & 15];
                len = 6;
            }
            output_buf_put(b, esc, len);
            i++;
            continue;
        }
        size_t len = utf8_seq_len(s + i, n - i);
        if (len) {
            output_buf_put(b, s + i, len);
            i += len;
        } else {
            output_buf_put(b, "\xef\xbf\xbd", 3); /* U+FFFD for one bad byte */
            i++;
        }
    }
    output_buf_put(b, "\"", 1);
}

/* --- lines --- */

/* 64 hex chars naming something of a run: XXH3-128 with two seeds over run_id, a tag and a number or a
 * string. Not a security boundary, only a stable name: the same run, tag and subject give the same name, so
 * a line rebuilt after a crash is byte-identical. */
static void run_hash(const char *run_id, const char *tag, int64_t no, const char *s, char out[65])
{
    static const char hx[] = "0123456789abcdef";
    char t[160];
    int n = snprintf(t, sizeof t, "%.64s|%s|%" PRId64, run_id ? run_id : "", tag, no);
    const char *subject = s ? s : "";
    XXH128_hash_t h[2];
    for (int i = 0; i < 2; i++) {
        uint64_t seed = XXH3_64bits_withSeed(t, (size_t)n, 0x6e73 + (uint64_t)i);
        h[i] = XXH3_128bits_withSeed(subject, strlen(subject), seed);
    }
    uint64_t w[4] = {h[0].high64, h[0].low64, h[1].high64, h[1].low64};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 16; k++) out[16 * i + k] = hx[(w[i] >> (60 - 4 * k)) & 15];
    out[64] = '\0';
}

/* {"id":"batch_req_<h>","custom_id":<id or null>,"response": — the start every line shares. */
static void put_line_head(struct output_buf *b, const char *run_id, int64_t line, const char *custom_id)
{
    char h[65];
    run_hash(run_id, "batch_req", line, NULL, h);
    put_str(b, "{\"id\":\"batch_req_");
    output_buf_put(b, h, 32);
    put_str(b, "\",\"custom_id\":");
    if (custom_id) output_buf_put_json_string(b, custom_id, strlen(custom_id));
    else put_str(b, "null");
    put_str(b, ",\"response\":");
}

static void put_request_id(struct output_buf *b, const char *run_id, int64_t line)
{
    char h[65];
    run_hash(run_id, "request", line, NULL, h);
    put_str(b, "\"request_id\":\"req_");
    output_buf_put(b, h, 32);
    put_str(b, "\"");
}

static void put_choices(struct output_buf *b, const struct output_ok *o)
{
    put_str(b, ",\"choices\":[");
    for (int i = 0; i < o->n_choices; i++) {
        const struct output_choice *c = &o->choices[i];
        if (i) put_str(b, ",");
        put_str(b, "{\"index\":");
        put_i64(b, i);
        if (o->chat) {
            put_str(b, ",\"message\":{\"role\":\"assistant\",\"content\":");
            output_buf_put_json_string(b, c->text, c->len);
            put_str(b, ",\"refusal\":null,\"annotations\":[]}");
        } else {
            put_str(b, ",\"text\":");
            output_buf_put_json_string(b, c->text, c->len);
        }
        put_str(b, ",\"logprobs\":");
        if (c->logprobs) output_buf_put(b, c->logprobs, c->logprobs_len);
        else put_str(b, "null");
        put_str(b, ",\"finish_reason\":");
        output_buf_put_json_string(b, c->finish_reason, strlen(c->finish_reason));
        put_str(b, "}");
    }
    put_str(b, "]");
}

/* --- logprobs --- */

static void put_logprob(struct output_buf *b, double lp)
{
    char t[40];
    if (!isfinite(lp)) {
        put_str(b, "null");
        return;
    }
    int n = snprintf(t, sizeof t, "%.17g", lp);
    output_buf_put(b, t, (size_t)n);
}

/* A token's bytes (control tokens spelled out), into buf (cap) or a malloc'd buffer when longer; *n bytes. */
static char *token_bytes(const tok_vocab *v, int32_t id, int special, char *buf, size_t cap, int *n)
{
    *n = tok_token_bytes(v, id, special, buf, cap);
    if (*n < 0) *n = 0;
    if ((size_t)*n <= cap) return buf;
    char *big = malloc((size_t)*n);
    if (big) tok_token_bytes(v, id, special, big, (size_t)*n);
    else *n = 0;
    return big ? big : buf;
}

static void put_token_string(struct output_buf *b, const tok_vocab *v, int32_t id)
{
    char buf[128];
    int n;
    char *s = token_bytes(v, id, 1, buf, sizeof buf, &n);
    output_buf_put_json_string(b, s, (size_t)n);
    if (s != buf) free(s);
}

/* {"token": its text, "logprob": lp, "bytes": [its bytes]}: one chat entry's fields (the bytes looked up once). */
static void put_token_logprob(struct output_buf *b, const tok_vocab *v, int32_t id, double lp)
{
    char buf[128];
    int n;
    char *s = token_bytes(v, id, 1, buf, sizeof buf, &n);
    put_str(b, "{\"token\":");
    output_buf_put_json_string(b, s, (size_t)n);
    put_str(b, ",\"logprob\":");
    put_logprob(b, lp);
    put_str(b, ",\"bytes\":[");
    for (int i = 0; i < n; i++) {
        if (i) put_str(b, ",");
        put_i64(b, (unsigned char)s[i]);
    }
    put_str(b, "]");
    if (s != buf) free(s);
}

/* One chat content entry: token, logprob, bytes and top_logprobs (each alternative with the same fields). */
static void put_chat_entry(struct output_buf *b, const tok_vocab *v, const struct logprob_entry *en)
{
    put_token_logprob(b, v, en->token, en->logprob);
    put_str(b, ",\"top_logprobs\":[");
    for (int32_t k = 0; k < en->n_top; k++) {
        if (k) put_str(b, ",");
        put_token_logprob(b, v, en->top[k].token, en->top[k].logprob);
        put_str(b, "}");
    }
    put_str(b, "]}");
}

/* The entries of prompt then gen, as one sequence: entry i of n_prompt + n_gen. */
static const struct logprob_entry *entry_at(const struct logprob_entry *prompt, int32_t n_prompt,
                                            const struct logprob_entry *gen, int32_t i)
{
    return i < n_prompt ? &prompt[i] : &gen[i - n_prompt];
}

static void put_completion_logprobs(struct output_buf *b, const tok_vocab *v, const struct logprob_entry *prompt,
                                    int32_t n_prompt, const struct logprob_entry *gen, int32_t n_gen, int drop_space)
{
    const int32_t n = n_prompt + n_gen;
    put_str(b, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) put_str(b, ",");
        put_token_string(b, v, entry_at(prompt, n_prompt, gen, i)->token);
    }
    put_str(b, "],\"token_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) put_str(b, ",");
        put_logprob(b, entry_at(prompt, n_prompt, gen, i)->logprob);
    }
    put_str(b, "],\"top_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        const struct logprob_entry *en = entry_at(prompt, n_prompt, gen, i);
        if (i) put_str(b, ",");
        if (!isfinite(en->logprob)) { /* nothing predicts it: a prompt's first token */
            put_str(b, "null");
            continue;
        }
        put_str(b, "{");
        for (int32_t k = 0; k < en->n_top; k++) {
            if (k) put_str(b, ",");
            put_token_string(b, v, en->top[k].token);
            put_str(b, ":");
            put_logprob(b, en->top[k].logprob);
        }
        put_str(b, "}");
    }
    put_str(b, "],\"text_offset\":[");
    int64_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        char buf[8];
        if (i) put_str(b, ",");
        put_i64(b, off);
        int len = tok_token_bytes(v, entry_at(prompt, n_prompt, gen, i)->token, 0, buf, sizeof buf);
        if (len > 0 && drop_space) { /* the first token with text: its space is not in the text */
            len--;
            drop_space = 0;
        }
        off += len > 0 ? len : 0;
    }
    put_str(b, "]}");
}

int output_echo_space(const tok_vocab *v, const struct logprob_entry *prompt, int32_t n_prompt)
{
    if (!tok_add_space_prefix(v) || !prompt) return 0;
    for (int32_t i = 0; i < n_prompt; i++) {
        char buf[8];
        int n = tok_token_bytes(v, prompt[i].token, 0, buf, sizeof buf);
        if (n > 0) return buf[0] == ' ';
    }
    return 0;
}

void output_logprobs(struct output_buf *b, const tok_vocab *v, int chat, const struct logprob_entry *prompt,
                     int32_t n_prompt, const struct logprob_entry *gen, int32_t n_gen, int drop_space)
{
    if (!prompt) n_prompt = 0;
    if (!gen) n_gen = 0;
    if (!chat) {
        put_completion_logprobs(b, v, prompt, n_prompt, gen, n_gen, drop_space);
        return;
    }
    put_str(b, "{\"content\":[");
    for (int32_t i = 0; i < n_gen; i++) {
        if (i) put_str(b, ",");
        put_chat_entry(b, v, &gen[i]);
    }
    put_str(b, "],\"refusal\":null}");
}

static void put_le(struct output_buf *b, uint64_t x, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(x >> (8 * i));
    output_buf_put(b, t, (size_t)n);
}

static void put_packed_entry(struct output_buf *b, const struct logprob_entry *en)
{
    uint64_t bits;
    put_le(b, (uint32_t)en->token, 4);
    memcpy(&bits, &en->logprob, 8);
    put_le(b, bits, 8);
    put_le(b, (uint64_t)en->n_top, 1);
    for (int32_t k = 0; k < en->n_top; k++) {
        put_le(b, (uint32_t)en->top[k].token, 4);
        memcpy(&bits, &en->top[k].logprob, 8);
        put_le(b, bits, 8);
    }
}

void output_logprobs_pack(struct output_buf *b, const char *text, size_t text_len, const struct logprob_entry *prompt,
                          int32_t n_prompt, const struct logprob_entry *gen, int32_t n_gen, int drop_space)
{
    char head[16];
    if (!prompt) n_prompt = 0;
    if (!gen) n_gen = 0;
    snprintf(head, sizeof head, "%08x", (unsigned)text_len);
    output_buf_put(b, head, 8);
    output_buf_put(b, text, text_len);
    put_le(b, (uint32_t)n_prompt, 4);
    put_le(b, (uint32_t)n_gen, 4);
    put_le(b, drop_space != 0, 1);
    for (int32_t i = 0; i < n_prompt + n_gen; i++) put_packed_entry(b, i < n_prompt ? &prompt[i] : &gen[i - n_prompt]);
}

int output_logprobs_unpack(const char *blob, size_t len, const char **text, size_t *text_len)
{
    size_t n = 0;
    for (int i = 0; i < 8 && len >= 8; i++) {
        char h = blob[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
        if (d < 0) return -1;
        n = n * 16 + (size_t)d;
    }
    if (len < 8 || n > len - 8 || len - 8 - n < 9) return -1;
    *text = blob + 8;
    *text_len = n;
    return 0;
}

/* Reads n bytes (little-endian) at *p, advancing it; -1 past end. */
static int get_le(const unsigned char **p, const unsigned char *end, int n, uint64_t *x)
{
    if (end - *p < n) return -1;
    *x = 0;
    for (int i = 0; i < n; i++) *x |= (uint64_t)(*p)[i] << (8 * i);
    *p += n;
    return 0;
}

static int get_packed_entry(const unsigned char **p, const unsigned char *end, int32_t n_vocab,
                            struct logprob_entry *en)
{
    uint64_t tok, bits, n_top;
    if (get_le(p, end, 4, &tok) || get_le(p, end, 8, &bits) || get_le(p, end, 1, &n_top) || n_top > LOGPROB_MAX_TOP ||
        (int32_t)tok < 0 || (int32_t)tok >= n_vocab)
        return -1;
    en->token = (int32_t)tok;
    memcpy(&en->logprob, &bits, 8);
    en->n_top = (int32_t)n_top;
    for (int32_t k = 0; k < en->n_top; k++) {
        if (get_le(p, end, 4, &tok) || get_le(p, end, 8, &bits) || (int32_t)tok < 0 || (int32_t)tok >= n_vocab)
            return -1;
        en->top[k].token = (int32_t)tok;
        memcpy(&en->top[k].logprob, &bits, 8);
    }
    return 0;
}

int output_logprobs_render(struct output_buf *b, const tok_vocab *v, int chat, const char *blob, size_t len)
{
    const char *text;
    size_t text_len;
    if (output_logprobs_unpack(blob, len, &text, &text_len)) return -1;
    const unsigned char *p = (const unsigned char *)text + text_len, *end = (const unsigned char *)blob + len;
    uint64_t n_prompt, n_gen, drop;
    if (get_le(&p, end, 4, &n_prompt) || get_le(&p, end, 4, &n_gen) || get_le(&p, end, 1, &drop) ||
        n_prompt + n_gen > (uint64_t)(end - p) / 13) /* an entry is 13 bytes at least */
        return -1;
    struct logprob_entry *en = malloc(((size_t)(n_prompt + n_gen) + 1) * sizeof *en);
    if (!en) return -1;
    int rc = 0;
    for (uint64_t i = 0; i < n_prompt + n_gen && !rc; i++) rc = get_packed_entry(&p, end, tok_n_vocab(v), &en[i]);
    if (!rc && p == end) output_logprobs(b, v, chat, en, (int32_t)n_prompt, en + n_prompt, (int32_t)n_gen, (int)drop);
    free(en);
    return rc || p != end || b->oom ? -1 : 0;
}

static void put_token_text(struct output_buf *b, const tok_vocab *v, int32_t id)
{
    char buf[256];
    int n = tok_token_bytes(v, id, 0, buf, sizeof buf);
    if (n > (int)sizeof buf) {
        char *big = malloc((size_t)n);
        if (big && tok_token_bytes(v, id, 0, big, (size_t)n) == n) output_buf_put(b, big, (size_t)n);
        else b->oom = 1;
        free(big);
    } else if (n > 0) {
        output_buf_put(b, buf, (size_t)n);
    }
}

int output_result_text(const tok_vocab *v, int echo, int32_t logprobs, struct engine_result *r)
{
    if (!echo && logprobs < 0) return 0;
    struct output_buf text = {0}, blob = {0};
    const int drop = echo && output_echo_space(v, r->prompt_logprobs, r->n_prompt);
    for (int32_t i = 0; echo && r->prompt_logprobs && i < r->n_prompt; i++)
        put_token_text(&text, v, r->prompt_logprobs[i].token);
    if (drop) { /* the prompt as given: without the space its first token's text begins with */
        memmove(text.p, text.p + 1, text.n - 1);
        text.n--;
    }
    output_buf_put(&text, r->text, r->text_len);
    if (logprobs >= 0) {
        int32_t n_gen = r->n_tokens; /* the end token that stopped it is in neither the text nor the list */
        if (r->finish == ENGINE_FINISH_STOP && n_gen > 0 && tok_is_eog(v, r->tokens[n_gen - 1])) n_gen--;
        output_logprobs_pack(&blob, text.p, text.n, echo ? r->prompt_logprobs : NULL, r->n_prompt, r->logprobs,
                             n_gen, drop);
        output_buf_free(&text);
    } else {
        blob = text; /* moved */
    }
    output_buf_put(&blob, "", 1); /* NUL-terminated, not counted */
    if (blob.oom) {
        output_buf_free(&blob);
        return -1;
    }
    free(r->text);
    r->text = blob.p;
    r->text_len = blob.n - 1;
    return 0;
}

void output_usage(struct output_buf *b, int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens)
{
    put_str(b, "{\"prompt_tokens\":");
    put_i64(b, prompt_tokens);
    put_str(b, ",\"completion_tokens\":");
    put_i64(b, completion_tokens);
    put_str(b, ",\"total_tokens\":");
    put_i64(b, prompt_tokens + completion_tokens);
    put_str(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    put_i64(b, cached_tokens);
    put_str(b, ",\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,"
               "\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}");
}

void output_completion_body(struct output_buf *b, const struct output_ok *o, const char *id)
{
    put_str(b, "{\"id\":");
    output_buf_put_json_string(b, id, strlen(id));
    put_str(b, o->chat ? ",\"object\":\"chat.completion\",\"created\":"
                       : ",\"object\":\"text_completion\",\"created\":");
    put_i64(b, o->created);
    put_str(b, ",\"model\":");
    output_buf_put_json_string(b, o->model, strlen(o->model));
    put_choices(b, o);
    put_str(b, ",\"usage\":");
    output_usage(b, o->prompt_tokens, o->completion_tokens, o->cached_tokens);
    put_str(b, ",\"system_fingerprint\":");
    if (o->fingerprint) output_buf_put_json_string(b, o->fingerprint, strlen(o->fingerprint));
    else put_str(b, "null");
    if (o->chat) put_str(b, ",\"service_tier\":\"default\"");
    put_str(b, "}");
}

void output_ok_line(struct output_buf *b, const struct output_ok *o)
{
    char h[65], id[80];
    run_hash(o->run_id, "body", o->line, o->custom_id, h);
    snprintf(id, sizeof id, "%s%.32s", o->chat ? "chatcmpl-" : "cmpl-", h);
    put_line_head(b, o->run_id, o->line, o->custom_id);
    put_str(b, "{\"status_code\":200,");
    put_request_id(b, o->run_id, o->line);
    put_str(b, ",\"body\":");
    output_completion_body(b, o, id);
    put_str(b, "},\"error\":null}\n");
}

void output_body_line(struct output_buf *b, const char *run_id, int64_t line, const char *custom_id, const char *body,
                      size_t n)
{
    put_line_head(b, run_id, line, custom_id);
    put_str(b, "{\"status_code\":200,");
    put_request_id(b, run_id, line);
    put_str(b, ",\"body\":");
    output_buf_put(b, body, n);
    put_str(b, "},\"error\":null}\n");
}

void output_fail_line(struct output_buf *b, const struct output_fail *f)
{
    put_line_head(b, f->run_id, f->line, f->custom_id);
    put_str(b, "{\"status_code\":");
    put_i64(b, f->status);
    put_str(b, ",");
    put_request_id(b, f->run_id, f->line);
    put_str(b, ",\"body\":{\"error\":{\"message\":");
    output_buf_put_json_string(b, f->message, strlen(f->message));
    put_str(b, ",\"type\":");
    output_buf_put_json_string(b, f->type, strlen(f->type));
    put_str(b, ",\"param\":");
    if (f->param) output_buf_put_json_string(b, f->param, strlen(f->param));
    else put_str(b, "null");
    put_str(b, ",\"code\":");
    output_buf_put_json_string(b, f->code, strlen(f->code));
    put_str(b, "}}},\"error\":null}\n");
}

/* How a bad request's code reads in OpenAI's error object. */
struct fail_kind {
    const char *code, *openai_code;
    int param_from_message; /* the message starts with (or names) the field at fault, in quotes */
};

static const struct fail_kind fail_kinds[] = {
    {"duplicate_id", "duplicate_custom_id", 0},     {"invalid_type", "invalid_type", 1},
    {"invalid_value", "invalid_value", 1},          {"missing_prompt", "missing_required_parameter", 0},
    {"unsupported_request", "unsupported_value", 0}, {"prompt_too_long", "context_length_exceeded", 0},
    {"request_too_large", "context_length_exceeded", 0}, {"unknown_field", "unknown_parameter", 1},
    {"unsupported_parameter", "unsupported_parameter", 1},
};

/* The first 'name' in msg (a field name: letters, digits, '_', '.', '[', ']'), into buf; NULL when none. */
static const char *quoted_field(const char *msg, char *buf, size_t cap)
{
    const char *a = strchr(msg, '\'');
    if (!a) return NULL;
    size_t n = strspn(a + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
    if (n == 0 || n >= cap || a[1 + n] != '\'') return NULL;
    memcpy(buf, a + 1, n);
    buf[n] = '\0';
    return buf;
}

void output_fail_classify(struct output_fail *f, const char *code, const char *message, const char *prompt_field,
                          char *param, size_t cap)
{
    int engine = !strcmp(code, "engine_error");
    f->status = engine ? 500 : 400;
    f->type = engine ? "server_error" : "invalid_request_error";
    f->code = code;
    f->param = NULL;
    for (size_t i = 0; i < sizeof fail_kinds / sizeof *fail_kinds; i++) {
        if (strcmp(code, fail_kinds[i].code)) continue;
        f->code = fail_kinds[i].openai_code;
        if (fail_kinds[i].param_from_message) f->param = quoted_field(message, param, cap);
    }
    if (!strcmp(f->code, "context_length_exceeded") || !strcmp(code, "chat_template")) f->param = prompt_field;
}

void output_error_line(struct output_buf *b, const char *run_id, const char *custom_id, int64_t line,
                       const char *code, const char *message)
{
    put_line_head(b, run_id, line, custom_id);
    put_str(b, "null,\"error\":{\"code\":");
    output_buf_put_json_string(b, code, strlen(code));
    put_str(b, ",\"message\":");
    output_buf_put_json_string(b, message, strlen(message));
    put_str(b, ",\"line\":");
    put_i64(b, line);
    put_str(b, "}}\n");
}

/* --- files --- */

struct output_file {
    int fd;
    char *path;
    int64_t size; /* = write position */
};

int64_t output_size(const output_file *f) { return f->size; }
const char *output_path(const output_file *f) { return f->path; }

int output_open(const char *path, output_file **out, struct err *e)
{
    *out = NULL;
    output_file *f = calloc(1, sizeof *f);
    if (!f) return err_set(e, "out of memory");
    f->path = strdup(path);
    f->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (!f->path || f->fd < 0) {
        err_set(e, "%s: %s", path, f->path ? strerror(errno) : "out of memory");
        output_close(f);
        return -1;
    }
    if (flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
        err_set(e, "%s: the file is being written by another nightshift process", path);
        output_close(f);
        return -1;
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        err_set(e, "%s: %s", path, strerror(errno));
        output_close(f);
        return -1;
    }
    f->size = st.st_size;
    *out = f;
    return 0;
}

void output_close(output_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

static int write_all_at(output_file *f, int64_t off, const void *p, size_t n, struct err *e)
{
    const char *c = p;
    while (n) {
        ssize_t w = pwrite(f->fd, c, n, off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return err_set(e, "%s: write at byte %lld: %s", f->path, (long long)off, strerror(errno));
        }
        c += w;
        off += w;
        n -= (size_t)w;
    }
    return 0;
}

int output_append(output_file *f, const void *p, size_t n, struct err *e)
{
    if (write_all_at(f, f->size, p, n, e) != 0) return -1;
    f->size += (int64_t)n;
    return 0;
}

int output_sync(output_file *f, struct err *e)
{
    if (fdatasync(f->fd) != 0) return err_set(e, "%s: fsync: %s", f->path, strerror(errno));
    return 0;
}

struct repair {
    output_file *f;
    int64_t file_size; /* as found */
    int64_t pos;       /* bytes verified or rewritten */
    int diverged;
    char *win;         /* read window over the file */
    int64_t win_off;
    size_t win_len;
    struct output_repair_stats *st;
    struct err *e;
    int failed;
};

enum { WIN_BYTES = 1 << 20 };

/* 1 if the file holds exactly text at off. */
static int file_matches(struct repair *r, int64_t off, const char *text, size_t len)
{
    if (off + (int64_t)len > r->file_size) return 0;
    while (len) {
        if (!(off >= r->win_off && off < r->win_off + (int64_t)r->win_len)) {
            ssize_t got = pread(r->f->fd, r->win, WIN_BYTES, off);
            if (got <= 0) return 0;
            r->win_off = off;
            r->win_len = (size_t)got;
        }
        size_t at = (size_t)(off - r->win_off), k = r->win_len - at;
        if (k > len) k = len;
        if (memcmp(r->win + at, text, k)) return 0;
        off += (int64_t)k;
        text += k;
        len -= k;
    }
    return 1;
}

static int repair_row(void *user, const struct store_line *l)
{
    struct repair *r = user;
    if (l->off != r->pos) {
        err_set(r->e, "%s: store offsets are not contiguous at backlog line %lld (run with --check-store)",
                r->f->path, (long long)l->line);
        r->failed = 1;
        return 1;
    }
    if (!r->diverged && file_matches(r, l->off, l->text, l->len)) {
        r->st->lines_kept++;
        r->pos += (int64_t)l->len;
        return 0;
    }
    if (!r->diverged) {
        r->diverged = 1;
        if (ftruncate(r->f->fd, r->pos) != 0) {
            err_set(r->e, "%s: truncate: %s", r->f->path, strerror(errno));
            r->failed = 1;
            return 1;
        }
        if (r->file_size > r->pos) r->st->bytes_cut += r->file_size - r->pos;
        r->file_size = r->pos;
    }
    if (write_all_at(r->f, r->pos, l->text, l->len, r->e) != 0) {
        r->failed = 1;
        return 1;
    }
    r->pos += (int64_t)l->len;
    r->st->lines_rewritten++;
    return 0;
}

int output_repair(output_file *f, store *s, int which, struct output_repair_stats *st, struct err *e)
{
    struct output_repair_stats dummy;
    if (!st) st = &dummy;
    memset(st, 0, sizeof *st);
    struct repair r;
    memset(&r, 0, sizeof r);
    r.f = f;
    r.file_size = f->size;
    r.st = st;
    r.e = e;
    r.win = malloc(WIN_BYTES);
    r.win_off = -1;
    if (!r.win) return err_set(e, "out of memory");
    int rc = store_foreach_emitted(s, which, repair_row, &r, e);
    free(r.win);
    if (rc != 0 || r.failed) return -1;
    if (!r.diverged && r.file_size > r.pos) {
        /* bytes past the last scheduled line: rows dropped from the store since, or writes from outside */
        st->bytes_cut += r.file_size - r.pos;
        if (ftruncate(f->fd, r.pos) != 0) return err_set(e, "%s: truncate: %s", f->path, strerror(errno));
    }
    f->size = r.pos;
    if ((st->bytes_cut || st->lines_rewritten) && output_sync(f, e) != 0) return -1;
    return 0;
}
