/* tok — the tokenizer facade: loads a vocab from GGUF metadata and puts the SPM or BPE encoder on it,
 * dispatches encoding, decodes, and streams decoded bytes without splitting characters.
 *
 * Layers inside src/tokenizer/ (includes go one way, down): tok (this file) -> spm, bpe -> pretok (bpe
 * only) -> vocab -> gguf, util. Nothing below includes tok.h or tok_int.h.
 *
 * Invariant (checked by tok_check): the vocab's own invariant holds (vocab_check); exactly the encoder of
 * the vocab's kind exists and its invariant holds (spm_check / bpe_check); a decoded-bytes entry exists for
 * every id and is never longer than the piece text. After tok_load() nothing is modified, so a vocab may
 * be shared by any number of threads.
 *
 * Encoding: the text is first cut at the special tokens (leftmost-longest match; user-defined tokens always,
 * control and unknown ones only with parse_special), then each raw fragment goes to the SPM or BPE encoder.
 * SPM adds its leading space to every fragment (each starts the text or follows a special token).
 */
#include "tokenizer/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/tok_int.h"
#include "tokenizer/vocab.h"
#include "util/log.h"
#include "util/utf8.h"

/* 1 for the token types whose text is not part of the decoded output unless special tokens are rendered
 * (control, unknown, unused). */
static int tok_is_hidden_type(enum vocab_token_type t)
{
    return t == VOCAB_TYPE_CONTROL || t == VOCAB_TYPE_UNKNOWN || t == VOCAB_TYPE_UNUSED;
}

/* ---------- loading ---------- */

static int tok_read_flag(const gguf_file *f, const char *key, int *out, struct err *e)
{
    if (gguf_find_kv(f, key) < 0) return 0;
    return gguf_get_bool(f, key, out, e);
}

/* tokenizer.ggml.model -> t->kind and t->model_name. */
static int tok_read_model(tok_vocab *t, const gguf_file *f, struct err *e)
{
    if (gguf_find_kv(f, "tokenizer.ggml.model") < 0)
        return err_set(e, "tokenizer.ggml.model is missing (supported: llama, gpt2)");
    if (gguf_get_cstr(f, "tokenizer.ggml.model", t->model_name, sizeof t->model_name, e))
        return err_prefix(e, "tokenizer model (supported: llama, gpt2)");
    if (strcmp(t->model_name, "llama") == 0) {
        t->kind = TOK_KIND_SPM;
    } else if (strcmp(t->model_name, "gpt2") == 0) {
        t->kind = TOK_KIND_BPE;
    } else {
        return err_set(e, "unknown tokenizer model '%s' (tokenizer.ggml.model); supported: llama, gpt2",
                       t->model_name);
    }
    return 0;
}

/* The encoder of t's kind, with the defaults it implies for the special ids and add_bos. */
static int tok_create_encoder(tok_vocab *t, const gguf_file *f, struct vocab_specials *ids, int *add_bos,
                              struct err *e)
{
    *ids = (struct vocab_specials){.bos = -1, .eos = -1, .eot = -1, .pad = -1, .unk = -1};
    *add_bos = 1;
    if (t->kind == TOK_KIND_SPM) {
        t->add_space_prefix = 1;
        if (vocab_n(t->vocab) > 2) { /* the SentencePiece layout: <unk> <s> </s> */
            ids->unk = 0;
            ids->bos = 1;
            ids->eos = 2;
        }
        return spm_create(t->vocab, &t->spm, e);
    }
    if (gguf_find_kv(f, "tokenizer.ggml.pre") >= 0) {
        if (gguf_get_cstr(f, "tokenizer.ggml.pre", t->pre_name, sizeof t->pre_name, e)) return -1;
    } else {
        log_warn("tokenizer.ggml.pre is missing: using the 'default' pre-tokenizer");
        snprintf(t->pre_name, sizeof t->pre_name, "default");
    }
    if (bpe_create(t->vocab, f, t->pre_name, &t->bpe, e)) return -1;
    *add_bos = bpe_add_bos_default(t->bpe);
    return 0;
}

/* Decoded bytes of every token (render_special = 0), precomputed so decoding is a copy. */
static int tok_build_decoded(tok_vocab *t, struct err *e)
{
    const struct vocab *v = t->vocab;
    int32_t n = vocab_n(v);
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += vocab_text_len(v, i);
    t->dec = malloc(total ? total : 1);
    t->dec_off = malloc((size_t)n * sizeof *t->dec_off);
    t->dec_len = malloc((size_t)n * sizeof *t->dec_len);
    if (!t->dec || !t->dec_off || !t->dec_len) return err_set(e, "out of memory (decode table)");
    uint64_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *text = vocab_text(v, i);
        uint32_t len = vocab_text_len(v, i);
        enum vocab_token_type type = vocab_token_type(v, i);
        char *out = t->dec + pos;
        size_t m = 0;
        if (tok_is_hidden_type(type)) { /* nothing unless rendered as special */
            m = 0;
        } else if (type == VOCAB_TYPE_USER_DEFINED) {
            memcpy(out, text, len);
            m = len;
        } else if (t->kind == TOK_KIND_BPE) {
            m = bpe_unmap(text, len, out, len); /* never longer than the text */
        } else {
            m = spm_piece_bytes(text, len, type == VOCAB_TYPE_BYTE, out);
        }
        t->dec_off[i] = pos;
        t->dec_len[i] = (uint32_t)m;
        pos += m;
    }
    return 0;
}

int tok_load(const gguf_file *f, tok_vocab **out, struct err *e)
{
    *out = NULL;
    tok_vocab *t = calloc(1, sizeof *t);
    if (!t) return err_set(e, "out of memory");
    struct vocab_specials ids;
    if (tok_read_model(t, f, e) || vocab_load(f, &t->vocab, e) || tok_create_encoder(t, f, &ids, &t->add_bos, e) ||
        vocab_load_specials(t->vocab, f, &ids, e))
        goto fail;
    if (tok_read_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos, e) ||
        tok_read_flag(f, "tokenizer.ggml.add_eos_token", &t->add_eos, e) ||
        tok_read_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, e))
        goto fail;
    if (t->kind == TOK_KIND_BPE) t->add_space_prefix = 0; /* only SentencePiece prefixes a space */
    if (vocab_specials(t->vocab)->bos < 0) t->add_bos = 0;
    if (vocab_specials(t->vocab)->eos < 0) t->add_eos = 0;
    if (tok_build_decoded(t, e) || tok_check(t, e)) goto fail;
    *out = t;
    return 0;
fail:
    tok_free(t);
    return -1;
}

void tok_free(tok_vocab *t)
{
    if (!t) return;
    spm_free(t->spm);
    bpe_free(t->bpe);
    vocab_free(t->vocab);
    free(t->dec);
    free(t->dec_off);
    free(t->dec_len);
    free(t);
}

int tok_check(const tok_vocab *t, struct err *e)
{
    if (!t || !t->vocab) return err_set(e, "tok_check: no vocab");
    if (vocab_check(t->vocab, e)) return -1;
    if ((t->kind == TOK_KIND_SPM) != (t->spm != NULL) || (t->kind == TOK_KIND_BPE) != (t->bpe != NULL))
        return err_set(e, "tok_check: the encoder does not match the kind (%s)", t->model_name);
    if (t->spm && spm_check(t->spm, e)) return -1;
    if (t->bpe && bpe_check(t->bpe, e)) return -1;
    for (int32_t id = 0; id < vocab_n(t->vocab); id++)
        if (t->dec_len[id] > vocab_text_len(t->vocab, id))
            return err_set(e, "tok_check: token %d decodes longer than its text", id);
    return 0;
}

/* ---------- encoding ---------- */

/* A raw-text fragment: at the start of the text or right after a special token (fragments are always
 * separated by special tokens), so SPM puts its space in front of every one. */
static int tok_encode_fragment(const tok_vocab *t, const char *s, size_t n, struct vocab_tokens *o, struct err *e)
{
    if (n == 0) return 0;
    if (t->kind == TOK_KIND_SPM) return spm_encode(t->spm, s, n, t->add_space_prefix, o, e);
    return bpe_encode(t->bpe, s, n, o, e);
}

int tok_encode(const tok_vocab *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
               size_t *n_ids, struct err *e)
{
    struct vocab_tokens o = {0};
    *ids = NULL;
    *n_ids = 0;
    if (len && !text) return err_set(e, "tok_encode: NULL text");
    int32_t bos = vocab_specials(t->vocab)->bos;
    if (add_bos && bos >= 0 && vocab_tokens_push(&o, bos, e)) goto fail;
    const unsigned char *s = (const unsigned char *)text;
    size_t frag = 0; /* start of the pending raw fragment */
    for (size_t i = 0; i < len;) {
        int32_t id = -1;
        size_t m = vocab_match_special(t->vocab, s + i, len - i, parse_special, &id);
        if (m == 0) {
            i++;
            continue;
        }
        if (tok_encode_fragment(t, text + frag, i - frag, &o, e) || vocab_tokens_push(&o, id, e)) goto fail;
        i += m;
        frag = i;
    }
    if (tok_encode_fragment(t, text + frag, len - frag, &o, e)) goto fail;
    if (o.n == 0) { /* keep *ids non-NULL so callers can always free it */
        if (vocab_tokens_push(&o, 0, e)) goto fail;
        o.n = 0;
    }
    *ids = o.ids;
    *n_ids = o.n;
    return 0;
fail:
    free(o.ids);
    return -1;
}

/* ---------- decoding ---------- */

int tok_token_bytes(const tok_vocab *t, int32_t id, int render_special, char *buf, size_t cap)
{
    if (id < 0 || id >= vocab_n(t->vocab)) return -1;
    const char *src = t->dec + t->dec_off[id];
    size_t n = t->dec_len[id];
    if (render_special && tok_is_hidden_type(vocab_token_type(t->vocab, id))) {
        src = vocab_text(t->vocab, id);
        n = vocab_text_len(t->vocab, id);
    }
    if (buf) memcpy(buf, src, n < cap ? n : cap);
    return (int)n;
}

int tok_decode_ex(const tok_vocab *t, const int32_t *ids, size_t n, int render_special, char **out, size_t *len,
                  struct err *e)
{
    *out = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab_n(t->vocab))
            return err_set(e, "token id %d at position %zu is outside the vocab (%d tokens)", (int)ids[i], i,
                           (int)vocab_n(t->vocab));
        total += (size_t)tok_token_bytes(t, ids[i], render_special, NULL, 0);
    }
    char *buf = malloc(total + 1);
    if (!buf) return err_set(e, "out of memory (%zu bytes of text)", total);
    size_t pos = 0;
    int strip = t->kind == TOK_KIND_SPM && t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        int m = tok_token_bytes(t, ids[i], render_special, buf + pos, total - pos);
        /* the space the encoder put in front of the text */
        if (m > 0 && strip && !tok_is_hidden_type(vocab_token_type(t->vocab, ids[i]))) {
            if (buf[pos] == ' ') {
                memmove(buf + pos, buf + pos + 1, (size_t)m - 1);
                m--;
            }
            strip = 0;
        }
        pos += (size_t)m;
    }
    buf[pos] = '\0';
    *out = buf;
    if (len) *len = pos;
    return 0;
}

int tok_decode(const tok_vocab *t, const int32_t *ids, size_t n, char **out, size_t *len, struct err *e)
{
    return tok_decode_ex(t, ids, n, 0, out, len, e);
}

/* ---------- accessors ---------- */

int32_t tok_n_vocab(const tok_vocab *t) { return vocab_n(t->vocab); }
enum tok_kind tok_get_kind(const tok_vocab *t) { return t->kind; }
const char *tok_model_name(const tok_vocab *t) { return t->model_name; }
const char *tok_pre_name(const tok_vocab *t) { return t->kind == TOK_KIND_BPE ? t->pre_name : ""; }
int32_t tok_bos(const tok_vocab *t) { return vocab_specials(t->vocab)->bos; }
int32_t tok_eos(const tok_vocab *t) { return vocab_specials(t->vocab)->eos; }
int32_t tok_eot(const tok_vocab *t) { return vocab_specials(t->vocab)->eot; }
int32_t tok_pad(const tok_vocab *t) { return vocab_specials(t->vocab)->pad; }
int32_t tok_unk(const tok_vocab *t) { return vocab_specials(t->vocab)->unk; }
int tok_add_bos(const tok_vocab *t) { return t->add_bos; }
int tok_add_eos(const tok_vocab *t) { return t->add_eos; }
int tok_add_space_prefix(const tok_vocab *t) { return t->add_space_prefix; }
int32_t tok_n_merges(const tok_vocab *t) { return t->bpe ? bpe_n_merges(t->bpe) : 0; }
int tok_is_eog(const tok_vocab *t, int32_t id) { return vocab_is_eog(t->vocab, id); }

const char *tok_piece(const tok_vocab *t, int32_t id)
{
    if (id < 0 || id >= vocab_n(t->vocab)) return NULL;
    return vocab_text(t->vocab, id);
}

int tok_token_type(const tok_vocab *t, int32_t id)
{
    if (id < 0 || id >= vocab_n(t->vocab)) return -1;
    return (int)vocab_token_type(t->vocab, id);
}

int32_t tok_find_piece(const tok_vocab *t, const char *text, size_t len)
{
    return vocab_lookup(t->vocab, text, len);
}

/* ---------- streaming UTF-8 ---------- */

size_t tok_utf8_feed(struct tok_utf8 *s, const char *bytes, size_t n, char *out, size_t cap)
{
    size_t np = s->n_pending > 0 && s->n_pending <= 3 ? (size_t)s->n_pending : 0;
    size_t total = np + n;
    /* the last (up to 3) bytes of pending + bytes: a partial sequence among them is held back */
    unsigned char last[UTF8_MAX_SEQ - 1];
    size_t n_last = total < sizeof last ? total : sizeof last;
    for (size_t k = 0; k < n_last; k++) {
        size_t j = total - n_last + k;
        last[k] = (unsigned char)(j < np ? s->pending[j] : bytes[j - np]);
    }
    size_t keep = utf8_partial_tail(last, n_last);
    size_t emit = total - keep, w = 0;
    for (size_t j = 0; j < emit; j++) {
        char c = j < np ? s->pending[j] : bytes[j - np];
        if (w < cap) out[w++] = c;
    }
    memcpy(s->pending, last + n_last - keep, keep);
    s->n_pending = (int)keep;
    return w;
}

size_t tok_utf8_flush(struct tok_utf8 *s, char *out, size_t cap)
{
    size_t np = s->n_pending > 0 && s->n_pending <= 3 ? (size_t)s->n_pending : 0, w = 0;
    for (size_t j = 0; j < np && w < cap; j++) out[w++] = s->pending[j];
    s->n_pending = 0;
    return w;
}
