/* bpe — byte-level BPE merges.
 *
 * Invariant (checked by bpe_check): ranks maps (left id, right id) of every merge in tokenizer.ggml.merges
 * to (rank = its index, merged id = the id of left's text + right's text); all three ids are inside the
 * vocab and 0 <= rank < n_merges. byte_tok[b] is -1 or an id inside the vocab; pre is a compiled
 * pre-tokenizer. Nothing changes after bpe_create().
 *
 * Encoding a piece starts from one symbol per byte (the token of the byte's mapped character) and
 * repeatedly applies the lowest-ranked merge among adjacent symbol pairs, leftmost first on equal ranks,
 * until no adjacent pair has a merge. The symbols form a doubly linked list over an array; candidate pairs
 * sit in a binary heap and are checked for staleness when popped, so a piece of n bytes costs O(n log n).
 */
#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"
#include "util/utf8.h"

/* Map from a pair of token ids (left, right) to the merge's rank and the merged token's id: open
 * addressing, capacity a power of two >= 2 * merges. */
struct bpe_pairmap {
    uint64_t *keys;  /* (mask + 1) (left << 32 | right) + 1, 0 = empty */
    int32_t *rank;   /* (mask + 1) */
    int32_t *merged; /* (mask + 1) */
    uint64_t mask;
};

struct bpe {
    const struct vocab *v; /* borrowed */
    struct pretok *pre;
    int ignore_merges; /* a pre-split word that is itself a token is emitted whole (Llama 3) */
    int add_bos;       /* the pre-tokenizer's default for tokenizer.ggml.add_bos_token */
    struct bpe_pairmap ranks;
    int32_t n_merges;
    int32_t byte_tok[256]; /* id of the byte's mapped character, -1 if none */
};

/* The GPT-2 mapping (see bpe.h): the code point byte b is shown as. */
static uint32_t bpe_byte_to_cp(uint8_t b)
{
    if (b <= 0x20) return 256u + b;                 /* controls and space: U+0100..U+0120 */
    if (b >= 0x7F && b <= 0xA0) return 289u + (b - 0x7Fu); /* DEL, C1 controls, NBSP: U+0121..U+0142 */
    if (b == 0xAD) return 323u;                     /* soft hyphen: U+0143 */
    return b;
}

/* The byte a code point stands for; -1 if it is not in the mapping's image. */
static int bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 256) {
        uint8_t b = (uint8_t)cp;
        return bpe_byte_to_cp(b) == cp ? (int)b : -1;
    }
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 0x7F);
    if (cp == 323) return 0xAD;
    return -1;
}

/* The GPT-2 mapping: every byte is shown as one printable code point (bytes that are printable Latin-1
 * stay themselves, the rest map to U+0100 + n in byte order). Writes the UTF-8 of byte b's code point into
 * out and returns its length (1 or 2). */
static size_t bpe_byte_utf8(uint8_t b, char out[UTF8_MAX_SEQ])
{
    return utf8_encode(bpe_byte_to_cp(b), out);
}

/* --- pair map --- */

static uint64_t bpe_pair_hash(uint64_t key)
{
    key ^= key >> 31;
    key *= 0x9E3779B97F4A7C15ull;
    key ^= key >> 29;
    return key;
}

static int bpe_pair_find(const struct bpe_pairmap *m, int32_t left, int32_t right, int32_t *rank, int32_t *merged)
{
    if (!m->keys || left < 0 || right < 0) return 0;
    uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    for (uint64_t i = bpe_pair_hash(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == 0) return 0;
        if (m->keys[i] == key) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return 1;
        }
    }
}

static void bpe_pair_insert(struct bpe_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    for (uint64_t i = bpe_pair_hash(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) return; /* duplicate pair: the first (lower) rank stays */
        if (m->keys[i] == 0) {
            m->keys[i] = key;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}

/* Reads tokenizer.ggml.merges into b->ranks (needs b->v's piece map). */
static int bpe_load_merges(struct bpe *b, const gguf_file *f, struct err *e)
{
    const struct vocab *v = b->v;
    int64_t kv = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (kv < 0) return err_set(e, "tokenizer.ggml.merges is missing (required for a gpt2 BPE vocab)");
    if (gguf_kv_type(f, (uint64_t)kv) != GGUF_VTYPE_ARRAY || gguf_kv_arr_type(f, (uint64_t)kv) != GGUF_VTYPE_STRING)
        return err_set(e, "tokenizer.ggml.merges: expected an array of strings");
    uint64_t n = gguf_kv_arr_n(f, (uint64_t)kv);
    if (n > (uint64_t)INT32_MAX)
        return err_set(e, "tokenizer.ggml.merges: %llu entries is too many", (unsigned long long)n);
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    struct bpe_pairmap *m = &b->ranks;
    m->keys = calloc(cap, sizeof *m->keys);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) return err_set(e, "out of memory (%llu merges)", (unsigned long long)n);
    m->mask = cap - 1;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_kv_arr_str(f, (uint64_t)kv, i);
        /* the separator is the first space after the first byte (a left half is never empty) */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || sp == s.ptr + s.len - 1) {
            free(cat);
            return err_set(e, "tokenizer.ggml.merges[%llu] = '%.*s' is not of the form 'left right'",
                           (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
        }
        size_t ln = (size_t)(sp - s.ptr), rn = s.len - ln - 1;
        int32_t l = vocab_lookup(v, s.ptr, ln), r = vocab_lookup(v, sp + 1, rn);
        if (l < 0 || r < 0) {
            free(cat);
            return err_set(e, "tokenizer.ggml.merges[%llu] = '%.*s': %s half is not a token of the vocab",
                           (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr, l < 0 ? "left" : "right");
        }
        if (ln + rn > cat_cap) {
            cat_cap = (ln + rn) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                free(cat);
                return err_set(e, "out of memory");
            }
            cat = nc;
        }
        memcpy(cat, s.ptr, ln);
        memcpy(cat + ln, sp + 1, rn);
        int32_t merged = vocab_lookup(v, cat, ln + rn);
        if (merged < 0) {
            free(cat);
            return err_set(e, "tokenizer.ggml.merges[%llu] = '%.*s': the merged text is not a token of the vocab",
                           (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
        }
        bpe_pair_insert(m, l, r, (int32_t)i, merged);
    }
    free(cat);
    b->n_merges = (int32_t)n;
    return 0;
}

int bpe_create(const struct vocab *v, const gguf_file *f, const char *pre_name, struct bpe **out, struct err *e)
{
    *out = NULL;
    struct bpe *b = calloc(1, sizeof *b);
    if (!b) return err_set(e, "out of memory");
    b->v = v;
    if (pretok_create(pre_name, &b->pre, &b->ignore_merges, &b->add_bos, e)) goto fail;
    for (int c = 0; c < 256; c++) {
        char u[UTF8_MAX_SEQ];
        size_t ul = bpe_byte_utf8((uint8_t)c, u);
        b->byte_tok[c] = vocab_lookup(v, u, ul);
    }
    if (bpe_load_merges(b, f, e)) goto fail;
    *out = b;
    return 0;
fail:
    bpe_free(b);
    return -1;
}

void bpe_free(struct bpe *b)
{
    if (!b) return;
    pretok_free(b->pre);
    free(b->ranks.keys);
    free(b->ranks.rank);
    free(b->ranks.merged);
    free(b);
}

int bpe_add_bos_default(const struct bpe *b) { return b->add_bos; }
int32_t bpe_n_merges(const struct bpe *b) { return b->n_merges; }

int bpe_check(const struct bpe *b, struct err *e)
{
    int32_t n = vocab_n(b->v);
    if (!b->pre) return err_set(e, "bpe_check: no pre-tokenizer");
    for (int c = 0; c < 256; c++)
        if (b->byte_tok[c] < -1 || b->byte_tok[c] >= n)
            return err_set(e, "bpe_check: byte token of %d out of range", c);
    const struct bpe_pairmap *m = &b->ranks;
    for (uint64_t i = 0; m->keys && i <= m->mask; i++) {
        if (!m->keys[i]) continue;
        uint64_t k = m->keys[i] - 1;
        if ((int64_t)(k >> 32) >= n || (int64_t)(k & 0xFFFFFFFFu) >= n || m->merged[i] < 0 || m->merged[i] >= n ||
            m->rank[i] < 0 || m->rank[i] >= b->n_merges)
            return err_set(e, "bpe_check: bad merge table entry %llu", (unsigned long long)i);
    }
    return 0;
}

/* --- merge loop --- */

struct bpe_cand {
    int32_t rank;
    int32_t left, right;      /* symbol positions */
    int32_t left_id, right_id; /* ids when queued: a mismatch at pop time means the pair is stale */
    int32_t merged;
};

struct bpe_work {
    const struct bpe *b;
    struct vocab_tokens *out;
    int32_t *id; /* (cap) symbol token id; -2 once merged into its left neighbour */
    int32_t *next, *prev;
    struct bpe_cand *heap;
    size_t n_heap, cap;
    char *mapped; /* (4 * cap) the piece in mapped characters, for ignore_merges */
};

static int bpe_cand_less(const struct bpe_cand *a, const struct bpe_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void bpe_heap_push(struct bpe_work *w, struct bpe_cand c)
{
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bpe_cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static struct bpe_cand bpe_heap_pop(struct bpe_work *w)
{
    struct bpe_cand top = w->heap[0];
    struct bpe_cand last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bpe_cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bpe_cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static void bpe_try_pair(struct bpe_work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return;
    struct bpe_cand c = {.left = left, .right = right, .left_id = w->id[left], .right_id = w->id[right]};
    if (bpe_pair_find(&w->b->ranks, c.left_id, c.right_id, &c.rank, &c.merged)) bpe_heap_push(w, c);
}

static int bpe_reserve(struct bpe_work *w, size_t n, struct err *e)
{
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *id = realloc(w->id, cap * sizeof *id);
    if (id) w->id = id;
    int32_t *nx = realloc(w->next, cap * sizeof *nx);
    if (nx) w->next = nx;
    int32_t *pv = realloc(w->prev, cap * sizeof *pv);
    if (pv) w->prev = pv;
    struct bpe_cand *h = realloc(w->heap, 2 * cap * sizeof *h); /* each merge pops one, pushes <= 2 */
    if (h) w->heap = h;
    char *mp = realloc(w->mapped, cap * 4);
    if (mp) w->mapped = mp;
    if (!id || !nx || !pv || !h || !mp) return err_set(e, "out of memory (BPE piece of %zu bytes)", n);
    w->cap = cap;
    return 0;
}

static int bpe_emit_symbol(struct bpe_work *w, int32_t id, struct err *e)
{
    if (id >= 0) return vocab_tokens_push(w->out, id, e);
    /* a byte whose mapped character is not in the vocab: the unknown token, or nothing */
    int32_t unk = vocab_specials(w->b->v)->unk;
    if (unk >= 0) return vocab_tokens_push(w->out, unk, e);
    return 0;
}

static int bpe_piece(void *user, const char *s, size_t n, struct err *e)
{
    struct bpe_work *w = user;
    const struct bpe *b = w->b;
    if (n > (size_t)INT32_MAX / 2) return err_set(e, "BPE piece of %zu bytes is too long", n);
    if (n == 1) return bpe_emit_symbol(w, b->byte_tok[(uint8_t)s[0]], e);
    if (bpe_reserve(w, n, e)) return -1;
    if (b->ignore_merges) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += bpe_byte_utf8((uint8_t)s[i], w->mapped + m);
        int32_t id = vocab_lookup(b->v, w->mapped, m);
        if (id >= 0) return vocab_tokens_push(w->out, id, e);
    }
    int32_t cnt = (int32_t)n;
    for (int32_t i = 0; i < cnt; i++) {
        w->id[i] = b->byte_tok[(uint8_t)s[i]];
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < cnt ? i + 1 : -1;
    }
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < cnt; i++) bpe_try_pair(w, i, i + 1);
    while (w->n_heap > 0) {
        struct bpe_cand c = bpe_heap_pop(w);
        if (w->id[c.left] != c.left_id || w->next[c.left] != c.right || w->id[c.right] != c.right_id) continue;
        w->id[c.left] = c.merged;
        w->id[c.right] = -2;
        int32_t nn = w->next[c.right];
        w->next[c.left] = nn;
        if (nn >= 0) w->prev[nn] = c.left;
        bpe_try_pair(w, w->prev[c.left], c.left);
        bpe_try_pair(w, c.left, nn);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (bpe_emit_symbol(w, w->id[i], e)) return -1;
    return 0;
}

int bpe_encode(const struct bpe *b, const char *text, size_t len, struct vocab_tokens *out, struct err *e)
{
    struct bpe_work w = {.b = b, .out = out};
    int rc = pretok_split(b->pre, text, len, bpe_piece, &w, e);
    free(w.id);
    free(w.next);
    free(w.prev);
    free(w.heap);
    free(w.mapped);
    return rc;
}

size_t bpe_unmap(const char *text, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t cl;
        int32_t cp = utf8_decode(s + i, len - i, &cl); /* -1 for a bad byte: not in the mapping */
        int b = cp < 0 ? -1 : bpe_cp_to_byte((uint32_t)cp);
        if (b >= 0) {
            if (n < cap) buf[n] = (char)b;
            n++;
        } else { /* not a mapped byte: keep the character's bytes */
            for (size_t k = 0; k < cl; k++, n++)
                if (n < cap) buf[n] = (char)s[i + k];
        }
        i += cl;
    }
    return n;
}
