/* spm — score-driven merging over UTF-8 characters.
 *
 * Invariant: the symbols always tile the escaped text left to right without gaps (a symbol's bytes are
 * followed directly by its next symbol's bytes), so the text of two neighbours is one contiguous span.
 * Starting from one symbol per UTF-8 character, the merge of adjacent symbols whose joined text is a token
 * with the highest score is applied first (leftmost on equal scores) until no adjacent pair joins to a
 * token. Candidates sit in a binary heap and are checked for staleness by their byte size when popped:
 * a symbol's size only grows, so an unchanged size sum means an unchanged pair.
 *
 * Merges never join two neighbouring characters that are not adjacent inside some token (every merged
 * symbol is a token), so the text is cut there into segments that are merged independently: the same
 * result as one global heap (candidates of different segments never interact, and inside a segment their
 * order is unchanged), with small heaps instead of one of the whole text's size.
 *
 * Invariant of a struct spm (checked by spm_check): pair_bits has pair_mask + 1 bits, a power of two
 * >= 2^16, and holds the bit of every pair of neighbouring characters inside some token's text (a false
 * positive only makes a segment longer); byte_tok[b] is -1 or the id of the token "<0xNN>" for byte b.
 * Never modified after spm_create() (except by the spm_merge_unsegmented test hook).
 */
#include "tokenizer/spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

struct spm {
    const struct vocab *v; /* borrowed */
    /* a Bloom-style bit set of the pairs of adjacent characters inside any token: text is never merged
     * across two neighbouring characters whose pair is absent, so it is encoded in independent segments
     * cut there */
    uint64_t *pair_bits;
    uint64_t pair_mask;    /* number of bits - 1 */
    int32_t byte_tok[256]; /* id of "<0xNN>", -1 if none */
};

/* A character as a number: its (up to 4) bytes packed. */
static uint32_t spm_char_key(const unsigned char *s, size_t n)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) k = k << 8 | s[i];
    return k;
}

static uint64_t spm_pair_hash(uint32_t a, uint32_t b)
{
    uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

static int spm_pair_maybe(const struct spm *m, uint32_t a, uint32_t b)
{
    uint64_t h = spm_pair_hash(a, b) & m->pair_mask;
    return (int)(m->pair_bits[h >> 6] >> (h & 63) & 1);
}

/* Sets the bit of every pair of neighbouring characters inside a token's text. */
static int spm_build_pairs(struct spm *m, struct err *e)
{
    const struct vocab *v = m->v;
    uint64_t n_pairs = 0;
    for (int32_t id = 0; id < vocab_n(v); id++) n_pairs += vocab_text_len(v, id);
    uint64_t bits = 1 << 16;
    while (bits < 8 * n_pairs) bits *= 2;
    m->pair_bits = calloc(bits / 64, sizeof *m->pair_bits);
    if (!m->pair_bits) return err_set(e, "out of memory (SPM pair set)");
    m->pair_mask = bits - 1;
    for (int32_t id = 0; id < vocab_n(v); id++) {
        const unsigned char *t = (const unsigned char *)vocab_text(v, id);
        size_t n = vocab_text_len(v, id), i = 0;
        uint32_t prev = 0;
        int have_prev = 0;
        while (i < n) {
            size_t cl = utf8_char_len(t + i, n - i);
            uint32_t cur = spm_char_key(t + i, cl);
            if (have_prev) {
                uint64_t h = spm_pair_hash(prev, cur) & m->pair_mask;
                m->pair_bits[h >> 6] |= 1ull << (h & 63);
            }
            prev = cur;
            have_prev = 1;
            i += cl;
        }
    }
    return 0;
}

int spm_create(const struct vocab *v, struct spm **out, struct err *e)
{
    *out = NULL;
    struct spm *m = calloc(1, sizeof *m);
    if (!m) return err_set(e, "out of memory");
    m->v = v;
    if (spm_build_pairs(m, e)) {
        spm_free(m);
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        m->byte_tok[b] = vocab_lookup(v, hex, 6);
    }
    *out = m;
    return 0;
}

void spm_free(struct spm *m)
{
    if (!m) return;
    free(m->pair_bits);
    free(m);
}

int spm_check(const struct spm *m, struct err *e)
{
    if (!m->pair_bits || m->pair_mask < (1u << 16) - 1 || (m->pair_mask & (m->pair_mask + 1)))
        return err_set(e, "spm_check: bad pair set (mask %llu)", (unsigned long long)m->pair_mask);
    for (int b = 0; b < 256; b++)
        if (m->byte_tok[b] < -1 || m->byte_tok[b] >= vocab_n(m->v))
            return err_set(e, "spm_check: byte token of %d out of range", b);
    return 0;
}

void spm_merge_unsegmented(struct spm *m)
{
    for (uint64_t i = 0; i <= m->pair_mask / 64; i++) m->pair_bits[i] = ~0ull;
}

size_t spm_piece_bytes(const char *text, size_t len, int is_byte, char *out)
{
    unsigned hex;
    char tail;
    if (is_byte && len == 6 && sscanf(text, "<0x%2x%c", &hex, &tail) == 2 && tail == '>') {
        out[0] = (char)hex;
        return 1;
    }
    size_t m = 0;
    for (size_t k = 0; k < len; k++) { /* U+2581 -> space */
        if (k + 2 < len && (unsigned char)text[k] == 0xE2 && (unsigned char)text[k + 1] == 0x96 &&
            (unsigned char)text[k + 2] == 0x81) {
            out[m++] = ' ';
            k += 2;
        } else {
            out[m++] = text[k];
        }
    }
    return m;
}

struct spm_sym {
    uint32_t start, n; /* n = 0: merged into its left neighbour */
    int32_t prev, next;
};

struct spm_cand {
    float score;
    int32_t left, right;
    uint32_t size;
};

struct spm_work {
    const struct spm *m;
    const struct vocab *v;
    const char *buf;
    struct spm_sym *sym;
    struct spm_cand *heap;
    size_t n_heap;
};

/* a comes out of the heap before b */
static int spm_cand_first(const struct spm_cand *a, const struct spm_cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void spm_push(struct spm_work *w, struct spm_cand c)
{
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!spm_cand_first(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static struct spm_cand spm_pop(struct spm_work *w)
{
    struct spm_cand top = w->heap[0];
    struct spm_cand last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && spm_cand_first(&w->heap[c + 1], &w->heap[c])) c++;
        if (!spm_cand_first(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static void spm_try_pair(struct spm_work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return;
    uint32_t size = w->sym[left].n + w->sym[right].n;
    int32_t id = vocab_lookup(w->v, w->buf + w->sym[left].start, size);
    if (id < 0) return;
    struct spm_cand c = {.score = vocab_score(w->v, id), .left = left, .right = right, .size = size};
    spm_push(w, c);
}

static int spm_emit(struct spm_work *w, const struct spm_sym *s, struct vocab_tokens *out, struct err *e)
{
    int32_t id = vocab_lookup(w->v, w->buf + s->start, s->n);
    if (id >= 0) return vocab_tokens_push(out, id, e);
    int32_t unk = vocab_specials(w->v)->unk;
    for (uint32_t k = 0; k < s->n; k++) { /* byte fallback */
        int32_t b = w->m->byte_tok[(uint8_t)w->buf[s->start + k]];
        if (b >= 0) {
            if (vocab_tokens_push(out, b, e)) return -1;
        } else if (unk >= 0) {
            if (k == 0 && vocab_tokens_push(out, unk, e)) return -1; /* one unknown per character */
        }
    }
    return 0;
}

int spm_encode(const struct spm *m, const char *text, size_t len, int add_prefix, struct vocab_tokens *out,
               struct err *e)
{
    static const char ws[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */
    if (len > (size_t)INT32_MAX / 8) return err_set(e, "text fragment of %zu bytes is too long", len);
    size_t cap = 3 * len + 3;
    char *buf = malloc(cap);
    struct spm_work w = {.m = m, .v = m->v, .buf = buf};
    size_t n = 0;
    int rc = 0;
    if (!buf) return err_set(e, "out of memory (%zu bytes of text)", len);
    if (add_prefix) {
        memcpy(buf, ws, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, ws, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    /* segments: cut between neighbouring characters that no token has side by side; the work arrays grow
     * to the longest segment (a word, for normal text) */
    size_t cap_sym = 0;
    for (size_t seg = 0; seg < n && rc == 0;) {
        int32_t n_sym = 0;
        uint32_t prev = 0;
        size_t i = seg, end = seg;
        for (size_t cnt = 0; end < n; cnt++) { /* find the segment's end and size */
            size_t cl = utf8_char_len((const unsigned char *)buf + end, n - end);
            uint32_t cur = spm_char_key((const unsigned char *)buf + end, cl);
            if (cnt > 0 && !spm_pair_maybe(m, prev, cur)) break;
            prev = cur;
            end += cl;
        }
        if (end - seg > cap_sym) {
            size_t nc = cap_sym ? cap_sym : 64;
            while (nc < end - seg) nc *= 2;
            struct spm_sym *ns = realloc(w.sym, nc * sizeof *ns);
            if (ns) w.sym = ns;
            struct spm_cand *nh = realloc(w.heap, 2 * nc * sizeof *nh); /* a merge pops 1, pushes <= 2 */
            if (nh) w.heap = nh;
            if (!ns || !nh) {
                rc = err_set(e, "out of memory (text segment of %zu bytes)", end - seg);
                break;
            }
            cap_sym = nc;
        }
        while (i < end) {
            size_t cl = utf8_char_len((const unsigned char *)buf + i, end - i);
            w.sym[n_sym] =
                (struct spm_sym){.start = (uint32_t)i, .n = (uint32_t)cl, .prev = n_sym - 1, .next = n_sym + 1};
            n_sym++;
            i += cl;
        }
        seg = i;
        w.sym[n_sym - 1].next = -1;
        w.n_heap = 0;
        for (int32_t k = 0; k + 1 < n_sym; k++) spm_try_pair(&w, k, k + 1);
        while (w.n_heap > 0) {
            struct spm_cand c = spm_pop(&w);
            struct spm_sym *l = &w.sym[c.left], *r = &w.sym[c.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; /* stale */
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) w.sym[r->next].prev = c.left;
            spm_try_pair(&w, l->prev, c.left);
            spm_try_pair(&w, c.left, l->next);
        }
        for (int32_t k = 0; k >= 0; k = w.sym[k].next)
            if ((rc = spm_emit(&w, &w.sym[k], out, e)) != 0) break;
    }
    free(w.sym);
    free(w.heap);
    free(buf);
    return rc;
}
