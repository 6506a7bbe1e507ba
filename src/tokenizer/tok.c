/* tok — vocab loading and validation, special tokens, encode dispatch, decoding.
 *
 * Invariant (checked by tok_check): n_vocab >= 1; every piece, score, type and decoded-bytes entry exists
 * for ids 0..n_vocab-1; every type is a known enum tok_type; the piece map returns, for each non-empty
 * piece text, an id whose text is exactly that text; every special id (bos, eos, eot, pad, unk) is -1 or
 * inside the vocab; every id stored in the special-token trie, the byte table and the merge table is inside
 * the vocab. After tok_load() nothing is modified, so a vocab may be shared by any number of threads.
 *
 * Encoding: the text is first cut at the special tokens (leftmost-longest match; user-defined tokens always,
 * control and unknown ones only with parse_special), then each raw fragment goes to the SPM or BPE encoder.
 * SPM adds its leading space to every fragment (each starts the text or follows a special token).
 */
#include "tokenizer/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer/bpe.h"
#include "tokenizer/pretok.h"
#include "tokenizer/spm.h"
#include "tokenizer/tok_int.h"
#include "util/log.h"

/* ---------- small helpers ---------- */

/* Length of the UTF-8 sequence that lead byte c announces (0 if c cannot start a multi-byte one, ASCII
 * included) and the allowed range [*lo, *hi] of its second byte (this excludes overlongs, surrogates and code
 * points above U+10FFFF; later bytes are any continuation byte). */
static size_t tok_utf8_lead(unsigned c, unsigned *lo, unsigned *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) *lo = 0xA0;
        if (c == 0xED) *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) *lo = 0x90;
        if (c == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* 1 if the bytes s[1..n) after a lead byte are a valid start of its sequence: s[1] (when n >= 2) inside
 * [lo, hi], the rest continuation bytes. n must not exceed the announced length. */
static int tok_utf8_tail_ok(const unsigned char *s, size_t n, unsigned lo, unsigned hi)
{
    if (n >= 2 && (s[1] < lo || s[1] > hi)) return 0;
    for (size_t k = 2; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return 1;
}

size_t tok_utf8_char_len(const unsigned char *s, size_t n)
{
    unsigned lo, hi;
    size_t need = tok_utf8_lead(s[0], &lo, &hi);
    if (need == 0 || n < need || !tok_utf8_tail_ok(s, need, lo, hi)) return 1;
    return need;
}

/* 1 for the token types whose text is not part of the decoded output unless special tokens are rendered
 * (control, unknown, unused). */
static int tok_is_hidden_type(uint8_t t)
{
    return t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN || t == TOK_TYPE_UNUSED;
}

int tok_out_push(struct tok_out *o, int32_t id, struct err *e)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *ids = realloc(o->ids, cap * sizeof *ids);
        if (!ids) return err_set(e, "out of memory (%zu token ids)", cap);
        o->ids = ids;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return 0;
}

/* ---------- piece -> id map ---------- */

int32_t tok_lookup(const tok_vocab *v, const char *s, size_t len)
{
    if (len == 0 || len > UINT32_MAX) return -1;
    const struct tok_strmap *m = &v->map;
    for (uint64_t i = XXH3_64bits(s, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t slot = m->slots[i];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (v->len[id] == len && memcmp(tok_text(v, id), s, len) == 0) return id;
    }
}

static int tok_map_build(tok_vocab *v, struct err *e)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)v->n_vocab) cap *= 2;
    v->map.slots = calloc(cap, sizeof *v->map.slots);
    if (!v->map.slots) return err_set(e, "out of memory (token map)");
    v->map.mask = cap - 1;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (v->len[id] == 0) continue;
        const char *s = tok_text(v, id);
        for (uint64_t i = XXH3_64bits(s, v->len[id]) & v->map.mask;; i = (i + 1) & v->map.mask) {
            uint32_t slot = v->map.slots[i];
            if (slot == 0 || (v->len[slot - 1] == v->len[id] && memcmp(tok_text(v, (int32_t)(slot - 1)), s, v->len[id]) == 0)) {
                v->map.slots[i] = (uint32_t)id + 1; /* a duplicate text: the later id wins */
                break;
            }
        }
    }
    return 0;
}

/* ---------- special-token trie ---------- */

static uint32_t tok_trie_new(tok_vocab *v, uint8_t byte, struct err *e)
{
    if (v->n_trie == v->cap_trie) {
        uint32_t cap = v->cap_trie ? v->cap_trie * 2 : 256;
        struct tok_trie_node *t = realloc(v->trie, cap * sizeof *t);
        if (!t) {
            err_set(e, "out of memory (special tokens)");
            return 0;
        }
        v->trie = t;
        v->cap_trie = cap;
    }
    uint32_t i = v->n_trie++;
    v->trie[i] = (struct tok_trie_node){.first_child = 0, .next_sibling = 0, .id = -1, .id_user = -1, .byte = byte};
    return i;
}

static int tok_trie_insert(tok_vocab *v, int32_t id, struct err *e)
{
    const unsigned char *s = (const unsigned char *)tok_text(v, id);
    uint32_t len = v->len[id];
    if (v->n_trie == 0) { /* node 0 is a placeholder so that 0 can mean "no node" */
        tok_trie_new(v, 0, e);
        if (v->n_trie == 0) return -1;
    }
    uint32_t node = v->trie_root[s[0]];
    if (node == 0) {
        if ((node = tok_trie_new(v, s[0], e)) == 0) return -1;
        v->trie_root[s[0]] = node;
    }
    for (uint32_t k = 1; k < len; k++) {
        uint32_t c = v->trie[node].first_child;
        while (c && v->trie[c].byte != s[k]) c = v->trie[c].next_sibling;
        if (!c) {
            if ((c = tok_trie_new(v, s[k], e)) == 0) return -1;
            v->trie[c].next_sibling = v->trie[node].first_child;
            v->trie[node].first_child = c;
        }
        node = c;
    }
    v->trie[node].id = id;
    v->trie[node].id_user = v->type[id] == TOK_TYPE_USER_DEFINED ? id : -1;
    return 0;
}

/* The longest special token starting at s (n bytes left); returns its length and sets *id, or 0. */
static size_t tok_trie_match(const tok_vocab *v, const unsigned char *s, size_t n, int parse_special, int32_t *id)
{
    uint32_t node = v->trie_root[s[0]];
    size_t best = 0;
    for (size_t k = 1; node; k++) {
        int32_t cand = parse_special ? v->trie[node].id : v->trie[node].id_user;
        if (cand >= 0) {
            best = k;
            *id = cand;
        }
        if (k >= n) break;
        uint32_t c = v->trie[node].first_child;
        while (c && v->trie[c].byte != s[k]) c = v->trie[c].next_sibling;
        node = c;
    }
    return best;
}

/* ---------- loading ---------- */

static int tok_read_id(const gguf_file *f, const tok_vocab *v, const char *key, int32_t *out, struct err *e)
{
    if (gguf_find_kv(f, key) < 0) return 0; /* keep the default */
    int64_t x;
    if (gguf_get_int(f, key, &x, e)) return -1;
    if (x < 0 || x == 0xFFFFFFFFll) { /* -1 written as u32: "none" */
        *out = -1;
        return 0;
    }
    if (x >= v->n_vocab)
        return err_set(e, "%s = %lld is outside the vocab (%d tokens)", key, (long long)x, (int)v->n_vocab);
    *out = (int32_t)x;
    return 0;
}

static int tok_read_flag(const gguf_file *f, const char *key, int *out, struct err *e)
{
    if (gguf_find_kv(f, key) < 0) return 0;
    return gguf_get_bool(f, key, out, e);
}

static int tok_load_pieces(tok_vocab *v, const gguf_file *f, struct err *e)
{
    int64_t kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (kv < 0) return err_set(e, "tokenizer.ggml.tokens is missing (not a model with a vocab?)");
    if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY || gguf_kv_arr_type(f, (uint64_t)kv) != GGUF_VTYPE_STRING)
        return err_set(e, "tokenizer.ggml.tokens: expected an array of strings");
    uint64_t n = gguf_kv_arr_n(f, (uint64_t)kv);
    if (n == 0) return err_set(e, "tokenizer.ggml.tokens is empty");
    if (n >= (uint64_t)INT32_MAX) return err_set(e, "tokenizer.ggml.tokens: %llu tokens is too many", (unsigned long long)n);
    v->n_vocab = (int32_t)n;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_kv_arr_str(f, (uint64_t)kv, i);
        if (s.len > UINT32_MAX / 2) return err_set(e, "tokenizer.ggml.tokens[%llu] is too long", (unsigned long long)i);
        total += s.len + 1; /* bounded by the file size: no overflow */
    }
    v->blob = malloc(total ? total : 1);
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->score = calloc(n, sizeof *v->score);
    v->type = malloc(n);
    v->eog = calloc(n, 1);
    if (!v->blob || !v->off || !v->len || !v->score || !v->type || !v->eog)
        return err_set(e, "out of memory (%llu tokens)", (unsigned long long)n);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_kv_arr_str(f, (uint64_t)kv, i);
        v->off[i] = pos;
        v->len[i] = (uint32_t)s.len;
        if (s.len) memcpy(v->blob + pos, s.ptr, s.len);
        v->blob[pos + s.len] = '\0';
        pos += s.len + 1;
        v->type[i] = TOK_TYPE_NORMAL;
    }

    kv = gguf_find_kv(f, "tokenizer.ggml.scores");
    if (kv >= 0) {
        if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY || gguf_kv_arr_type(f, (uint64_t)kv) != GGUF_VTYPE_FLOAT32)
            return err_set(e, "tokenizer.ggml.scores: expected an array of float32");
        if (gguf_kv_arr_n(f, (uint64_t)kv) != n)
            return err_set(e, "tokenizer.ggml.scores has %llu entries but there are %llu tokens",
                           (unsigned long long)gguf_kv_arr_n(f, (uint64_t)kv), (unsigned long long)n);
        const unsigned char *d = gguf_kv_arr_data(f, (uint64_t)kv);
        for (uint64_t i = 0; i < n; i++) memcpy(&v->score[i], d + 4 * i, 4);
    }

    kv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (kv >= 0) {
        enum gguf_vtype at = gguf_kv_arr_type(f, (uint64_t)kv);
        if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY || (at != GGUF_VTYPE_INT32 && at != GGUF_VTYPE_UINT32))
            return err_set(e, "tokenizer.ggml.token_type: expected an array of int32");
        if (gguf_kv_arr_n(f, (uint64_t)kv) != n)
            return err_set(e, "tokenizer.ggml.token_type has %llu entries but there are %llu tokens",
                           (unsigned long long)gguf_kv_arr_n(f, (uint64_t)kv), (unsigned long long)n);
        const unsigned char *d = gguf_kv_arr_data(f, (uint64_t)kv);
        for (uint64_t i = 0; i < n; i++) {
            int32_t t;
            memcpy(&t, d + 4 * i, 4);
            if (t < 0 || t >= TOK_TYPE_COUNT)
                return err_set(e, "tokenizer.ggml.token_type[%llu] = %d is not a known token type (0..6)",
                               (unsigned long long)i, (int)t);
            v->type[i] = (uint8_t)t;
        }
    }
    return 0;
}

/* Decoded bytes of every token (render_special = 0), precomputed so decoding is a copy. */
static int tok_build_decoded(tok_vocab *v, struct err *e)
{
    int32_t n = v->n_vocab;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += v->len[i];
    v->dec = malloc(total ? total : 1);
    v->dec_off = malloc((size_t)n * sizeof *v->dec_off);
    v->dec_len = malloc((size_t)n * sizeof *v->dec_len);
    if (!v->dec || !v->dec_off || !v->dec_len) return err_set(e, "out of memory (decode table)");
    uint64_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *t = tok_text(v, i);
        uint32_t len = v->len[i];
        char *out = v->dec + pos;
        size_t m = 0;
        switch (v->type[i]) {
        case TOK_TYPE_CONTROL:
        case TOK_TYPE_UNKNOWN:
        case TOK_TYPE_UNUSED:
            break; /* nothing unless rendered as special */
        case TOK_TYPE_USER_DEFINED:
            memcpy(out, t, len);
            m = len;
            break;
        default:
            if (v->kind == TOK_KIND_BPE) {
                m = bpe_unmap(t, len, out, len); /* never longer than the text */
            } else {
                unsigned hex;
                char tail;
                if (v->type[i] == TOK_TYPE_BYTE && len == 6 && sscanf(t, "<0x%2x%c", &hex, &tail) == 2 && tail == '>') {
                    out[m++] = (char)hex;
                    break;
                }
                for (uint32_t k = 0; k < len; k++) { /* U+2581 -> space */
                    if (k + 2 < len && (unsigned char)t[k] == 0xE2 && (unsigned char)t[k + 1] == 0x96 &&
                        (unsigned char)t[k + 2] == 0x81) {
                        out[m++] = ' ';
                        k += 2;
                    } else {
                        out[m++] = t[k];
                    }
                }
            }
        }
        v->dec_off[i] = pos;
        v->dec_len[i] = (uint32_t)m;
        pos += m;
    }
    return 0;
}

static const char *const tok_eog_texts[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"};

static int tok_is_special_type(uint8_t t)
{
    return t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN;
}

int tok_load(const gguf_file *f, tok_vocab **out, struct err *e)
{
    *out = NULL;
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) return err_set(e, "out of memory");
    v->bos = v->eos = v->eot = v->pad = v->unk = -1;
    for (int b = 0; b < 256; b++) v->byte_tok[b] = -1;

    if (gguf_find_kv(f, "tokenizer.ggml.model") < 0) {
        err_set(e, "tokenizer.ggml.model is missing (supported: llama, gpt2)");
        goto fail;
    }
    if (gguf_get_cstr(f, "tokenizer.ggml.model", v->model_name, sizeof v->model_name, e)) {
        err_prefix(e, "tokenizer model (supported: llama, gpt2)");
        goto fail;
    }
    if (strcmp(v->model_name, "llama") == 0) {
        v->kind = TOK_KIND_SPM;
    } else if (strcmp(v->model_name, "gpt2") == 0) {
        v->kind = TOK_KIND_BPE;
    } else {
        err_set(e, "unknown tokenizer model '%s' (tokenizer.ggml.model); supported: llama, gpt2", v->model_name);
        goto fail;
    }
    if (tok_load_pieces(v, f, e) || tok_map_build(v, e)) goto fail;

    int default_add_bos = 1;
    if (v->kind == TOK_KIND_SPM) {
        v->add_space_prefix = 1;
        if (v->n_vocab > 2) { /* the SentencePiece layout: <unk> <s> </s> */
            v->unk = 0;
            v->bos = 1;
            v->eos = 2;
        }
        if (spm_prepare(v, e)) goto fail;
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            v->byte_tok[b] = tok_lookup(v, hex, 6);
        }
    } else {
        if (gguf_find_kv(f, "tokenizer.ggml.pre") >= 0) {
            if (gguf_get_cstr(f, "tokenizer.ggml.pre", v->pre_name, sizeof v->pre_name, e)) goto fail;
        } else {
            log_warn("tokenizer.ggml.pre is missing: using the 'default' pre-tokenizer");
            snprintf(v->pre_name, sizeof v->pre_name, "default");
        }
        if (pretok_create(v->pre_name, &v->pre, &v->ignore_merges, &default_add_bos, e)) goto fail;
        for (int b = 0; b < 256; b++) {
            char u[2];
            size_t ul = bpe_byte_utf8((uint8_t)b, u);
            v->byte_tok[b] = tok_lookup(v, u, ul);
        }
        if (bpe_load_merges(v, f, e)) goto fail;
    }
    v->add_bos = default_add_bos;
    if (tok_read_id(f, v, "tokenizer.ggml.bos_token_id", &v->bos, e) ||
        tok_read_id(f, v, "tokenizer.ggml.eos_token_id", &v->eos, e) ||
        tok_read_id(f, v, "tokenizer.ggml.unknown_token_id", &v->unk, e) ||
        tok_read_id(f, v, "tokenizer.ggml.padding_token_id", &v->pad, e) ||
        tok_read_id(f, v, "tokenizer.ggml.eot_token_id", &v->eot, e) ||
        tok_read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, e) ||
        tok_read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, e) ||
        tok_read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, e))
        goto fail;
    if (v->kind == TOK_KIND_BPE) v->add_space_prefix = 0; /* only SentencePiece prefixes a space */
    if (v->bos < 0) v->add_bos = 0;
    if (v->eos < 0) v->add_eos = 0;

    /* special tokens: the trie, end-of-generation flags, a guessed EOT when the file names none */
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (!tok_is_special_type(v->type[id]) || v->len[id] == 0) continue;
        if (tok_trie_insert(v, id, e)) goto fail;
        if (v->type[id] == TOK_TYPE_UNKNOWN) continue;
        for (size_t k = 0; k < sizeof tok_eog_texts / sizeof tok_eog_texts[0]; k++)
            if (strlen(tok_eog_texts[k]) == v->len[id] && memcmp(tok_eog_texts[k], tok_text(v, id), v->len[id]) == 0)
                v->eog[id] = 1;
    }
    if (v->eot < 0) {
        static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>"};
        for (size_t k = 0; k < sizeof eot_texts / sizeof eot_texts[0] && v->eot < 0; k++) {
            int32_t id = tok_lookup(v, eot_texts[k], strlen(eot_texts[k]));
            if (id >= 0 && tok_is_special_type(v->type[id]) && v->type[id] != TOK_TYPE_UNKNOWN) v->eot = id;
        }
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;

    if (tok_build_decoded(v, e)) goto fail;
    if (tok_check(v, e)) goto fail;
    *out = v;
    return 0;
fail:
    tok_free(v);
    return -1;
}

void tok_free(tok_vocab *v)
{
    if (!v) return;
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->eog);
    free(v->map.slots);
    free(v->dec);
    free(v->dec_off);
    free(v->dec_len);
    free(v->trie);
    free(v->pair_bits);
    free(v->ranks.keys);
    free(v->ranks.rank);
    free(v->ranks.merged);
    pretok_free(v->pre);
    free(v);
}

int tok_check(const tok_vocab *v, struct err *e)
{
    if (!v || v->n_vocab < 1) return err_set(e, "tok_check: empty vocab");
    int32_t n = v->n_vocab;
    const int32_t specials[5] = {v->bos, v->eos, v->eot, v->pad, v->unk};
    for (int k = 0; k < 5; k++)
        if (specials[k] < -1 || specials[k] >= n) return err_set(e, "tok_check: special id %d outside the vocab", specials[k]);
    for (int32_t id = 0; id < n; id++) {
        if (v->type[id] >= TOK_TYPE_COUNT) return err_set(e, "tok_check: token %d has type %d", id, v->type[id]);
        if (v->len[id] && tok_lookup(v, tok_text(v, id), v->len[id]) < 0)
            return err_set(e, "tok_check: token %d is missing from the map", id);
        if (v->dec_len[id] > v->len[id]) return err_set(e, "tok_check: token %d decodes longer than its text", id);
    }
    for (int b = 0; b < 256; b++)
        if (v->byte_tok[b] < -1 || v->byte_tok[b] >= n) return err_set(e, "tok_check: byte token of %d out of range", b);
    for (uint32_t i = 1; i < v->n_trie; i++) {
        const struct tok_trie_node *t = &v->trie[i];
        if (t->id >= n || t->id_user >= n || t->first_child >= v->n_trie || t->next_sibling >= v->n_trie)
            return err_set(e, "tok_check: bad special-token trie node %u", i);
    }
    if (v->kind == TOK_KIND_BPE) {
        if (!v->pre) return err_set(e, "tok_check: BPE vocab without a pre-tokenizer");
        for (uint64_t i = 0; v->ranks.keys && i <= v->ranks.mask; i++) {
            if (!v->ranks.keys[i]) continue;
            uint64_t k = v->ranks.keys[i] - 1;
            if ((int64_t)(k >> 32) >= n || (int64_t)(k & 0xFFFFFFFFu) >= n || v->ranks.merged[i] < 0 ||
                v->ranks.merged[i] >= n || v->ranks.rank[i] < 0 || v->ranks.rank[i] >= v->n_merges)
                return err_set(e, "tok_check: bad merge table entry %llu", (unsigned long long)i);
        }
    }
    return 0;
}

/* ---------- encoding ---------- */

/* A raw-text fragment: at the start of the text or right after a special token (fragments are always
 * separated by special tokens), so SPM puts its space in front of every one. */
static int tok_encode_fragment(const tok_vocab *v, const char *s, size_t n, struct tok_out *o, struct err *e)
{
    if (n == 0) return 0;
    if (v->kind == TOK_KIND_SPM) return spm_encode(v, s, n, v->add_space_prefix, o, e);
    return bpe_encode(v, s, n, o, e);
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
               size_t *n_ids, struct err *e)
{
    struct tok_out o = {0};
    *ids = NULL;
    *n_ids = 0;
    if (len && !text) return err_set(e, "tok_encode: NULL text");
    if (add_bos && v->bos >= 0 && tok_out_push(&o, v->bos, e)) goto fail;
    const unsigned char *s = (const unsigned char *)text;
    size_t frag = 0; /* start of the pending raw fragment */
    for (size_t i = 0; i < len;) {
        int32_t id = -1;
        size_t m = v->trie_root[s[i]] ? tok_trie_match(v, s + i, len - i, parse_special, &id) : 0;
        if (m == 0) {
            i++;
            continue;
        }
        if (tok_encode_fragment(v, text + frag, i - frag, &o, e) || tok_out_push(&o, id, e)) goto fail;
        i += m;
        frag = i;
    }
    if (tok_encode_fragment(v, text + frag, len - frag, &o, e)) goto fail;
    if (o.n == 0) { /* keep *ids non-NULL so callers can always free it */
        if (tok_out_push(&o, 0, e)) goto fail;
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

int tok_token_bytes(const tok_vocab *v, int32_t id, int render_special, char *buf, size_t cap)
{
    if (id < 0 || id >= v->n_vocab) return -1;
    const char *src = v->dec + v->dec_off[id];
    size_t n = v->dec_len[id];
    if (render_special && tok_is_hidden_type(v->type[id])) {
        src = tok_text(v, id);
        n = v->len[id];
    }
    if (buf) memcpy(buf, src, n < cap ? n : cap);
    return (int)n;
}

int tok_decode_ex(const tok_vocab *v, const int32_t *ids, size_t n, int render_special, char **out, size_t *len,
                  struct err *e)
{
    *out = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_vocab)
            return err_set(e, "token id %d at position %zu is outside the vocab (%d tokens)", (int)ids[i], i,
                           (int)v->n_vocab);
        total += (size_t)tok_token_bytes(v, ids[i], render_special, NULL, 0);
    }
    char *buf = malloc(total + 1);
    if (!buf) return err_set(e, "out of memory (%zu bytes of text)", total);
    size_t pos = 0;
    int strip = v->kind == TOK_KIND_SPM && v->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        int m = tok_token_bytes(v, ids[i], render_special, buf + pos, total - pos);
        /* the space the encoder put in front of the text */
        if (m > 0 && strip && !tok_is_hidden_type(v->type[ids[i]])) {
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

int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, char **out, size_t *len, struct err *e)
{
    return tok_decode_ex(v, ids, n, 0, out, len, e);
}

/* ---------- accessors ---------- */

int32_t tok_n_vocab(const tok_vocab *v) { return v->n_vocab; }
enum tok_kind tok_get_kind(const tok_vocab *v) { return v->kind; }
const char *tok_model_name(const tok_vocab *v) { return v->model_name; }
const char *tok_pre_name(const tok_vocab *v) { return v->kind == TOK_KIND_BPE ? v->pre_name : ""; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int32_t tok_pad(const tok_vocab *v) { return v->pad; }
int32_t tok_unk(const tok_vocab *v) { return v->unk; }
int tok_add_bos(const tok_vocab *v) { return v->add_bos; }
int tok_add_eos(const tok_vocab *v) { return v->add_eos; }
int tok_add_space_prefix(const tok_vocab *v) { return v->add_space_prefix; }
int32_t tok_n_merges(const tok_vocab *v) { return v->n_merges; }

int tok_is_eog(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && v->eog[id];
}

const char *tok_piece(const tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab) return NULL;
    return tok_text(v, id);
}

int tok_token_type(const tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab) return -1;
    return v->type[id];
}

int32_t tok_find_piece(const tok_vocab *v, const char *text, size_t len)
{
    return tok_lookup(v, text, len);
}

/* ---------- streaming UTF-8 ---------- */

/* 1 if t[0..n) (n < its announced length) can still become a valid character. */
static int tok_utf8_viable(const unsigned char *t, size_t n)
{
    unsigned lo, hi;
    size_t need = tok_utf8_lead(t[0], &lo, &hi);
    return need != 0 && n < need && tok_utf8_tail_ok(t, n, lo, hi);
}

size_t tok_utf8_feed(struct tok_utf8 *s, const char *bytes, size_t n, char *out, size_t cap)
{
    size_t np = s->n_pending > 0 && s->n_pending <= 3 ? (size_t)s->n_pending : 0;
    size_t total = np + n;
    /* the tail: an incomplete but viable sequence starting in the last 3 bytes */
    size_t keep = 0;
    for (size_t back = 1; back <= 3 && back <= total; back++) {
        size_t at = total - back;
        unsigned char c = (unsigned char)(at < np ? s->pending[at] : bytes[at - np]);
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        unsigned char t[4] = {0}; /* (zeroed: gcc -O1 cannot see that back >= 1 sets t[0]) */
        for (size_t k = 0; k < back; k++) {
            size_t j = at + k;
            t[k] = (unsigned char)(j < np ? s->pending[j] : bytes[j - np]);
        }
        if (tok_utf8_viable(t, back)) keep = back;
        break;
    }
    size_t emit = total - keep, w = 0;
    for (size_t j = 0; j < emit; j++) {
        char c = j < np ? s->pending[j] : bytes[j - np];
        if (w < cap) out[w++] = c;
    }
    char tail[4];
    for (size_t k = 0; k < keep; k++) {
        size_t j = emit + k;
        tail[k] = j < np ? s->pending[j] : bytes[j - np];
    }
    memcpy(s->pending, tail, keep);
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
