/* tok_int — the layout of a tok_vocab, shared by tok.c (load, specials, decode), spm.c, bpe.c and pretok.c.
 * Private to src/tokenizer/: nothing outside this folder includes it.
 *
 * Everything here is immutable after tok_load() returns, so any number of threads may encode and decode
 * with one vocab at the same time; per-call scratch lives on the caller's stack or in malloc'd buffers.
 */
#ifndef NS_TOKENIZER_TOK_INT_H
#define NS_TOKENIZER_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok.h"
#include "util/err.h"

/* tokenizer.ggml.token_type values (ggml numbering). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
    TOK_TYPE_COUNT
};

/* Open-addressing hash map from a byte string to a token id. Keys are (ptr, len) views into the vocab's
 * text blob, so the map owns only its slot array. Capacity is a power of two >= 2 * entries: a lookup
 * probes O(1) slots on average. */
struct tok_strmap {
    uint32_t *slots; /* (cap) id + 1, 0 = empty */
    uint64_t mask;   /* cap - 1 */
};

/* Map from a pair of token ids (left, right) to the merge's rank and the merged token's id. */
struct tok_pairmap {
    uint64_t *keys; /* (cap) (left << 32 | right) + 1, 0 = empty */
    int32_t *rank;  /* (cap) */
    int32_t *merged; /* (cap) */
    uint64_t mask;
};

struct pretok; /* pretok.h */

struct tok_vocab {
    enum tok_kind kind;
    int32_t n_vocab;

    /* piece texts as stored in the file, each NUL-terminated in blob (pieces may also hold NUL bytes:
     * len is authoritative) */
    char *blob;
    uint64_t *off;  /* (n_vocab) */
    uint32_t *len;  /* (n_vocab) */
    float *score;   /* (n_vocab) SPM merge priority; 0 when the file has no scores */
    uint8_t *type;  /* (n_vocab) enum tok_type */
    struct tok_strmap map; /* piece -> id (the last of duplicates wins) */

    /* decoded bytes per token (tok_token_bytes with render_special = 0), one blob */
    char *dec;
    uint64_t *dec_off; /* (n_vocab) */
    uint32_t *dec_len; /* (n_vocab) */

    int32_t bos, eos, eot, pad, unk; /* -1 when absent */
    int add_bos, add_eos, add_space_prefix;
    uint8_t *eog; /* (n_vocab) 1 = end of generation */

    /* special-token matcher: a byte trie over the text of control / user-defined / unknown tokens */
    struct tok_trie_node *trie; /* node 0 is unused; children of the root are in trie_root */
    uint32_t n_trie, cap_trie;
    uint32_t trie_root[256];    /* node of each first byte, 0 = no special token starts with it */

    /* SPM: a Bloom-style bit set of the pairs of adjacent characters inside any token. Text is never
     * merged across two neighbouring characters whose pair is absent, so it is encoded in independent
     * segments cut there (a false positive only makes a segment longer). */
    uint64_t *pair_bits;
    uint64_t pair_mask; /* number of bits - 1 */

    int32_t byte_tok[256]; /* SPM: id of "<0xNN>"; BPE: id of the byte's mapped character; -1 if none */

    /* BPE */
    struct tok_pairmap ranks;
    int32_t n_merges;
    int ignore_merges; /* a pre-split word that is itself a token is emitted whole (Llama 3) */
    struct pretok *pre;

    char model_name[16];
    char pre_name[64];
};

struct tok_trie_node {
    uint32_t first_child; /* 0 = none */
    uint32_t next_sibling; /* 0 = none */
    int32_t id;      /* the special token whose text ends here, -1 if none (active with parse_special) */
    int32_t id_user; /* the same when it is user-defined, else -1 (always active) */
    uint8_t byte;
};

/* Growable id output buffer used by the encoders. */
struct tok_out {
    int32_t *ids;
    size_t n, cap;
};
int tok_out_push(struct tok_out *o, int32_t id, struct err *e);

/* Looks a byte string up in the vocab; -1 when absent. O(len). */
int32_t tok_lookup(const tok_vocab *v, const char *s, size_t len);

static inline const char *tok_text(const tok_vocab *v, int32_t id)
{
    return v->blob + v->off[id];
}

/* Length in bytes of the UTF-8 character starting at s[0] (n >= 1 bytes available): 1..4 for a valid,
 * complete sequence, else 1 (an invalid or truncated byte stands alone). */
size_t tok_utf8_char_len(const unsigned char *s, size_t n);

#endif
