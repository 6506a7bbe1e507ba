/* vocab — the token table, the piece map and the special tokens.
 *
 * Invariant (checked by vocab_check): n >= 1; every piece, score, type and end-of-generation flag exists
 * for ids 0..n-1; every type is a known enum vocab_token_type; the piece map returns, for each non-empty
 * piece text, an id whose text is exactly that text; every special id (bos, eos, eot, pad, unk) is -1 or
 * inside the vocab; every node of the special-token trie links only to nodes that exist and names only ids
 * inside the vocab. Nothing changes after vocab_load_specials().
 *
 * The piece map is open addressing over the texts (slots hold id + 1, 0 = empty; capacity a power of two
 * >= 2 * tokens), so a lookup probes O(1) slots on average and the map owns only its slot array. The
 * special-token matcher is a byte trie over the texts of control, user-defined and unknown tokens; the
 * root's children are indexed by first byte so a byte that starts no special text costs one load.
 */
#include "tokenizer/vocab.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct vocab_trie_node {
    uint32_t first_child;  /* 0 = none */
    uint32_t next_sibling; /* 0 = none */
    int32_t id;      /* the special token whose text ends here, -1 if none (active with parse_special) */
    int32_t id_user; /* the same when it is user-defined, else -1 (always active) */
    uint8_t byte;
};

struct vocab {
    int32_t n;

    /* piece texts as stored in the file, each NUL-terminated in blob */
    char *blob;
    uint64_t *off;  /* (n) */
    uint32_t *len;  /* (n) */
    float *score;   /* (n) */
    uint8_t *type;  /* (n) enum vocab_token_type */
    uint32_t *slots; /* (mask + 1) piece map: id + 1, 0 = empty */
    uint64_t mask;

    struct vocab_specials ids;
    uint8_t *eog; /* (n) 1 = end of generation */

    struct vocab_trie_node *trie; /* node 0 is unused, so 0 can mean "no node" */
    uint32_t n_trie, cap_trie;
    uint32_t trie_root[256]; /* node of each first byte, 0 = no special token starts with it */
};

/* ---------- token table ---------- */

int32_t vocab_n(const struct vocab *v) { return v->n; }
const char *vocab_text(const struct vocab *v, int32_t id) { return v->blob + v->off[id]; }
uint32_t vocab_text_len(const struct vocab *v, int32_t id) { return v->len[id]; }
float vocab_score(const struct vocab *v, int32_t id) { return v->score[id]; }
enum vocab_token_type vocab_token_type(const struct vocab *v, int32_t id) { return (enum vocab_token_type)v->type[id]; }
const struct vocab_specials *vocab_specials(const struct vocab *v) { return &v->ids; }

int vocab_is_eog(const struct vocab *v, int32_t id)
{
    return id >= 0 && id < v->n && v->eog[id];
}

int vocab_tokens_push(struct vocab_tokens *t, int32_t id, struct err *e)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *ids = realloc(t->ids, cap * sizeof *ids);
        if (!ids) return err_set(e, "out of memory (%zu token ids)", cap);
        t->ids = ids;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return 0;
}

/* Copies the token texts into one blob. */
static int vocab_load_texts(struct vocab *v, const gguf_file *f, struct err *e)
{
    int64_t kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (kv < 0) return err_set(e, "tokenizer.ggml.tokens is missing (not a model with a vocab?)");
    if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY || gguf_kv_arr_type(f, (uint64_t)kv) != GGUF_VTYPE_STRING)
        return err_set(e, "tokenizer.ggml.tokens: expected an array of strings");
    uint64_t n = gguf_kv_arr_n(f, (uint64_t)kv);
    if (n == 0) return err_set(e, "tokenizer.ggml.tokens is empty");
    if (n >= (uint64_t)INT32_MAX)
        return err_set(e, "tokenizer.ggml.tokens: %llu tokens is too many", (unsigned long long)n);
    v->n = (int32_t)n;
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
        v->type[i] = VOCAB_TYPE_NORMAL;
    }
    return 0;
}

/* Reads tokenizer.ggml.scores and tokenizer.ggml.token_type when present. */
static int vocab_load_scores_types(struct vocab *v, const gguf_file *f, struct err *e)
{
    uint64_t n = (uint64_t)v->n;
    int64_t kv = gguf_find_kv(f, "tokenizer.ggml.scores");
    if (kv >= 0) {
        if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY ||
            gguf_kv_arr_type(f, (uint64_t)kv) != GGUF_VTYPE_FLOAT32)
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
            if (t < 0 || t >= VOCAB_TYPE_COUNT)
                return err_set(e, "tokenizer.ggml.token_type[%llu] = %d is not a known token type (0..6)",
                               (unsigned long long)i, (int)t);
            v->type[i] = (uint8_t)t;
        }
    }
    return 0;
}

/* ---------- piece -> id map ---------- */

int32_t vocab_lookup(const struct vocab *v, const char *s, size_t len)
{
    if (len == 0 || len > UINT32_MAX) return -1;
    for (uint64_t i = XXH3_64bits(s, len) & v->mask;; i = (i + 1) & v->mask) {
        uint32_t slot = v->slots[i];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (v->len[id] == len && memcmp(vocab_text(v, id), s, len) == 0) return id;
    }
}

static int vocab_map_build(struct vocab *v, struct err *e)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)v->n) cap *= 2;
    v->slots = calloc(cap, sizeof *v->slots);
    if (!v->slots) return err_set(e, "out of memory (token map)");
    v->mask = cap - 1;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->len[id] == 0) continue;
        const char *s = vocab_text(v, id);
        for (uint64_t i = XXH3_64bits(s, v->len[id]) & v->mask;; i = (i + 1) & v->mask) {
            uint32_t slot = v->slots[i];
            if (slot == 0 ||
                (v->len[slot - 1] == v->len[id] && memcmp(vocab_text(v, (int32_t)(slot - 1)), s, v->len[id]) == 0)) {
                v->slots[i] = (uint32_t)id + 1; /* a duplicate text: the later id wins */
                break;
            }
        }
    }
    return 0;
}

int vocab_load(const gguf_file *f, struct vocab **out, struct err *e)
{
    *out = NULL;
    struct vocab *v = calloc(1, sizeof *v);
    if (!v) return err_set(e, "out of memory");
    v->ids = (struct vocab_specials){.bos = -1, .eos = -1, .eot = -1, .pad = -1, .unk = -1};
    if (vocab_load_texts(v, f, e) || vocab_load_scores_types(v, f, e) || vocab_map_build(v, e)) {
        vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void vocab_free(struct vocab *v)
{
    if (!v) return;
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->eog);
    free(v->slots);
    free(v->trie);
    free(v);
}

/* ---------- special-token trie ---------- */

static uint32_t vocab_trie_new(struct vocab *v, uint8_t byte, struct err *e)
{
    if (v->n_trie == v->cap_trie) {
        uint32_t cap = v->cap_trie ? v->cap_trie * 2 : 256;
        struct vocab_trie_node *t = realloc(v->trie, cap * sizeof *t);
        if (!t) {
            err_set(e, "out of memory (special tokens)");
            return 0;
        }
        v->trie = t;
        v->cap_trie = cap;
    }
    uint32_t i = v->n_trie++;
    v->trie[i] = (struct vocab_trie_node){.first_child = 0, .next_sibling = 0, .id = -1, .id_user = -1, .byte = byte};
    return i;
}

static int vocab_trie_insert(struct vocab *v, int32_t id, struct err *e)
{
    const unsigned char *s = (const unsigned char *)vocab_text(v, id);
    uint32_t len = v->len[id];
    if (v->n_trie == 0) { /* node 0 is a placeholder so that 0 can mean "no node" */
        vocab_trie_new(v, 0, e);
        if (v->n_trie == 0) return -1;
    }
    uint32_t node = v->trie_root[s[0]];
    if (node == 0) {
        if ((node = vocab_trie_new(v, s[0], e)) == 0) return -1;
        v->trie_root[s[0]] = node;
    }
    for (uint32_t k = 1; k < len; k++) {
        uint32_t c = v->trie[node].first_child;
        while (c && v->trie[c].byte != s[k]) c = v->trie[c].next_sibling;
        if (!c) {
            if ((c = vocab_trie_new(v, s[k], e)) == 0) return -1;
            v->trie[c].next_sibling = v->trie[node].first_child;
            v->trie[node].first_child = c;
        }
        node = c;
    }
    v->trie[node].id = id;
    v->trie[node].id_user = v->type[id] == VOCAB_TYPE_USER_DEFINED ? id : -1;
    return 0;
}

size_t vocab_match_special(const struct vocab *v, const unsigned char *s, size_t n, int parse_special,
                           int32_t *id)
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

/* ---------- special ids ---------- */

static int vocab_read_id(struct vocab *v, const gguf_file *f, const char *key, int32_t *out, struct err *e)
{
    if (gguf_find_kv(f, key) < 0) return 0; /* keep the default */
    int64_t x;
    if (gguf_get_int(f, key, &x, e)) return -1;
    if (x < 0 || x == 0xFFFFFFFFll) { /* -1 written as u32: "none" */
        *out = -1;
        return 0;
    }
    if (x >= v->n) return err_set(e, "%s = %lld is outside the vocab (%d tokens)", key, (long long)x, (int)v->n);
    *out = (int32_t)x;
    return 0;
}

static int vocab_is_special_type(uint8_t t)
{
    return t == VOCAB_TYPE_CONTROL || t == VOCAB_TYPE_USER_DEFINED || t == VOCAB_TYPE_UNKNOWN;
}

static int vocab_text_is(const struct vocab *v, int32_t id, const char *s)
{
    return strlen(s) == v->len[id] && memcmp(s, vocab_text(v, id), v->len[id]) == 0;
}

int vocab_load_specials(struct vocab *v, const gguf_file *f, const struct vocab_specials *defaults, struct err *e)
{
    static const char *const eog_texts[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"};
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>"};
    v->ids = *defaults;
    if (vocab_read_id(v, f, "tokenizer.ggml.bos_token_id", &v->ids.bos, e) ||
        vocab_read_id(v, f, "tokenizer.ggml.eos_token_id", &v->ids.eos, e) ||
        vocab_read_id(v, f, "tokenizer.ggml.unknown_token_id", &v->ids.unk, e) ||
        vocab_read_id(v, f, "tokenizer.ggml.padding_token_id", &v->ids.pad, e) ||
        vocab_read_id(v, f, "tokenizer.ggml.eot_token_id", &v->ids.eot, e))
        return -1;

    for (int32_t id = 0; id < v->n; id++) {
        if (!vocab_is_special_type(v->type[id]) || v->len[id] == 0) continue;
        if (vocab_trie_insert(v, id, e)) return -1;
        if (v->type[id] == VOCAB_TYPE_UNKNOWN) continue;
        for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++)
            if (vocab_text_is(v, id, eog_texts[k])) v->eog[id] = 1;
    }
    for (size_t k = 0; k < sizeof eot_texts / sizeof eot_texts[0] && v->ids.eot < 0; k++) {
        int32_t id = vocab_lookup(v, eot_texts[k], strlen(eot_texts[k]));
        if (id >= 0 && vocab_is_special_type(v->type[id]) && v->type[id] != VOCAB_TYPE_UNKNOWN) v->ids.eot = id;
    }
    if (v->ids.eos >= 0) v->eog[v->ids.eos] = 1;
    if (v->ids.eot >= 0) v->eog[v->ids.eot] = 1;
    return 0;
}

int vocab_check(const struct vocab *v, struct err *e)
{
    if (!v || v->n < 1) return err_set(e, "vocab_check: empty vocab");
    int32_t n = v->n;
    const int32_t specials[5] = {v->ids.bos, v->ids.eos, v->ids.eot, v->ids.pad, v->ids.unk};
    for (int k = 0; k < 5; k++)
        if (specials[k] < -1 || specials[k] >= n)
            return err_set(e, "vocab_check: special id %d outside the vocab", specials[k]);
    for (int32_t id = 0; id < n; id++) {
        if (v->type[id] >= VOCAB_TYPE_COUNT) return err_set(e, "vocab_check: token %d has type %d", id, v->type[id]);
        if (v->len[id] && vocab_lookup(v, vocab_text(v, id), v->len[id]) < 0)
            return err_set(e, "vocab_check: token %d is missing from the map", id);
    }
    for (uint32_t i = 1; i < v->n_trie; i++) {
        const struct vocab_trie_node *t = &v->trie[i];
        if (t->id >= n || t->id_user >= n || t->first_child >= v->n_trie || t->next_sibling >= v->n_trie)
            return err_set(e, "vocab_check: bad special-token trie node %u", i);
    }
    for (int b = 0; b < 256; b++)
        if (v->trie_root[b] >= (v->n_trie ? v->n_trie : 1))
            return err_set(e, "vocab_check: special-token trie root of byte %d out of range", b);
    return 0;
}
