/* nightshift synth — writes a GGUF with random weights in the shape of a real model, for benchmarks and
 * tests without downloading multi-GB files.
 *
 *   nightshift synth --shape NAME --type T -o FILE [--vocab VOCAB.gguf] [--n-vocab N] [--seed S]
 *
 * Invariant: the output is a function of (shape, type, vocab file, n_vocab, seed) alone. Each tensor's values
 * come from its own util/rng stream (xoshiro256**), seeded from (seed, tensor index), and are generated in
 * row order, so the bytes do not depend on how the writer chunks the data. Memory is bounded: tensor data
 * is produced by the writer's fill callback one chunk (<= 16 MiB) at a time, plus one row of floats.
 *
 * Values: matrices uniform in [-a, a] with a = sqrt(3 / n_in) (variance 1/n_in, n_in = ne[0], so a
 * product with a unit-variance input keeps unit variance); norm weights exactly 1.0 (the gemma and phi3
 * shapes: uniform in [0.75, 1.25], so that a norm applied in the wrong place shows); biases uniform in
 * [-0.1, 0.1]. Norms and biases are F32; every matrix (token embedding included) is in --type, except
 * that the K-quant mixes give some matrices another type (synth_role_type, after gguf/qmix).
 *
 * Vocabulary size: the shapes of real models have their real number of token rows (llama-1b and llama-8b
 * 128,256 as Llama 3; qwen2-7b 152,064 as Qwen2's embedding), so the embedding and the output head cost
 * what they cost in the real model whatever the vocabulary; the tiny shapes have the vocabulary's own.
 * --n-vocab N sets it (0: the vocabulary's own); a vocabulary larger than the shape's count is kept whole.
 * The token list (built-in or --vocab's) is padded to n_vocab with control tokens "<|reserved_ID|>" (type
 * 3, score 0, ID = their id): encoding text never produces them, as no merge or piece leads to them (only
 * their literal text with special tokens parsed does, as for any control token). Without padding the
 * tokenizer metadata is the --vocab file's, byte for byte.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "gguf/gguf.h"
#include "gguf/qmix.h"
#include "gguf/quant.h"
#include "util/log.h"
#include "util/rng.h"

struct synth_shape {
    const char *name;
    const char *arch; /* "llama", "qwen2", "gemma3", "gemma2" or "phi3" (its tensor set: synth_tensors) */
    const char *model_name;
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    float rope_base, norm_eps;
    int tied;     /* output.weight absent: the head reuses token_embd.weight */
    int qkv_bias; /* attn_q/k/v.bias (qwen2) */
    uint32_t n_vocab; /* the real model's token rows (the vocabulary is padded up to them), or 0 */
    uint32_t head_dim; /* <arch>.attention.key_length when not 0 (else n_embd / n_head) */
    uint32_t n_swa;    /* <arch>.attention.sliding_window when not 0 */
    float att_softcap, final_softcap; /* gemma2's soft-caps when not 0 */
    float rope_linear; /* rope.scaling.type "linear" with this rope.scaling.factor when not 0 (gemma3) */
};

static const struct synth_shape shapes[] = {
    {"tiny", "llama", "synth-tiny", 64, 2, 4, 2, 160, 512, 10000.0f, 1e-5f, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-tied", "llama", "synth-tiny-tied", 64, 2, 4, 2, 160, 512, 10000.0f, 1e-5f, 1, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2-tiny", "qwen2", "synth-qwen2-tiny", 64, 2, 4, 2, 160, 512, 1000000.0f, 1e-6f, 0, 1, 0, 0, 0, 0, 0, 0},
    /* rows of whole K-quant super-blocks (256), and enough layers for the mixes' per-layer choices */
    {"tiny-256", "llama", "synth-tiny-256", 256, 8, 4, 2, 512, 512, 10000.0f, 1e-5f, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llama-1b", "llama", "synth-Llama-3.2-1B", 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, 1, 0,
     128256, 0, 0, 0, 0, 0},
    {"llama-8b", "llama", "synth-Llama-3.1-8B", 4096, 32, 32, 8, 14336, 131072, 500000.0f, 1e-5f, 0, 0,
     128256, 0, 0, 0, 0, 0},
    /* Llama 3.1 70B: 80 layers, 64 query / 8 KV heads of 128 */
    {"llama-70b", "llama", "synth-Llama-3.1-70B", 8192, 80, 64, 8, 28672, 131072, 500000.0f, 1e-5f, 0, 0,
     128256, 0, 0, 0, 0, 0},
    {"qwen2-7b", "qwen2", "synth-Qwen2-7B", 3584, 28, 28, 4, 18944, 131072, 1000000.0f, 1e-6f, 0, 1, 152064, 0,
     0, 0, 0, 0},
    /* issue 11's architectures, tiny; windows of 8 positions, so short prompts already slide past them.
     * gemma3: 7 layers (local 0-4 and 6, global 5), head_dim 32 != n_embd / n_head as in the real models,
     * linear RoPE scaling of the global layers by 8 as in Gemma 3 4B and up;
     * gemma2: caps far below the real 50 / 30, so that they bite on random weights */
    {"gemma3-tiny", "gemma3", "synth-gemma3-tiny", 64, 7, 4, 2, 160, 512, 1000000.0f, 1e-6f, 1, 0, 0, 32, 8, 0, 0,
     8.0f},
    {"gemma2-tiny", "gemma2", "synth-gemma2-tiny", 64, 4, 4, 2, 160, 512, 10000.0f, 1e-6f, 1, 0, 0, 0, 8, 2.0f,
     3.0f, 0},
    {"phi3-tiny", "phi3", "synth-phi3-tiny", 64, 2, 4, 2, 160, 512, 10000.0f, 1e-5f, 0, 0, 0, 0, 8, 0, 0, 0},
};

/* Per-layer tensors at most (gemma3: 13), for the tensor table's size. */
#define SYNTH_MAX_LAYER_TENSORS 13

/* The type of a matrix in --type (gguf/qmix: llama.cpp's rules). The K-quant mixes follow the rules in full
 * (output head Q6_K, attn_v / ffn_down / attn_output bumped in some layers, llama.cpp's fallbacks for rows
 * that are not whole 256-element super-blocks); the other types are "pure": every matrix in --type, so the
 * Q4_0 and Q8_0 benchmark files stay uniform. */
static enum gguf_dtype synth_role_type(const struct qmix_type *ty, const struct synth_shape *s, const char *name,
                                       uint64_t ne0)
{
    const enum gguf_dtype b = ty->base;
    const int kquant = b == GGUF_DTYPE_Q2_K || b == GGUF_DTYPE_Q3_K || b == GGUF_DTYPE_Q4_K ||
                       b == GGUF_DTYPE_Q5_K || b == GGUF_DTYPE_Q6_K;
    const struct qmix_model m = {s->n_layer, s->n_head, s->n_head_kv, !s->tied, !kquant};
    return qmix_tensor_type(ty, &m, name, ne0);
}

/* uniform in [-1, 1) */
static float rng_sym(struct rng *r)
{
    return (float)(rng_next(r) >> 40) * 0x1p-23f - 1.0f;
}

/* ---- the built-in vocabulary (SentencePiece "llama" style, byte fallback) ---- */

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */

static const char *const vocab_words[] = {
    "the",    "a",       "and",    "to",    "of",    "in",    "was",    "he",       "she",    "it",
    "is",     "that",    "his",    "her",   "with",  "for",   "on",     "you",      "they",   "at",
    "be",     "had",     "but",    "not",   "one",   "day",   "there",  "were",     "said",   "time",
    "upon",   "once",    "little", "girl",  "boy",   "named", "play",   "happy",    "big",    "very",
    "saw",    "went",    "wanted", "mom",   "dog",   "cat",   "tree",   "park",     "sun",    "ball",
    "friend", "friends", "loved",  "so",    "all",   "up",    "out",    "what",     "do",     "can",
    "we",     "my",      "have",   "from",  "this",  "are",   "as",     "an",       "by",     "or",
    "will",   "would",   "could",  "about", "into",  "them",  "then",   "their",    "when",   "who",
    "how",    "why",     "where",  "yes",   "no",    "good",  "new",    "old",      "first",  "last",
    "long",   "great",   "small",  "world", "home",  "water", "answer", "question", "number", "name",
    "people", "make",    "made",   "know",  "think", "see",   "look",   "come",     "came",   "get",
    "got",    "like",    "just",   "more",  "some",  "other", "than",   "only",     "after",  "before",
};
static const char *const vocab_pieces[] = {
    "th",  "he",  "in",  "er",  "an",   "re", "on",   "at",   "en",   "nd",  "ti", "es",  "or",
    "te",  "of",  "ed",  "is",  "it",   "al", "ar",   "st",   "to",   "nt",  "ng", "se",  "ha",
    "as",  "ou",  "io",  "le",  "ve",   "co", "me",   "de",   "hi",   "ri",  "ro", "ic",  "ne",
    "ea",  "ra",  "ce",  "li",  "ch",   "ll", "be",   "ma",   "si",   "om",  "ur", "ing", "ion",
    "ent", "and", "her", "ter", "tion", "ly", "ther", "ould", "ight", "own", "ay", "ow",
};

/* A token list being built: the built-in one or --vocab's, then padded (vocab_pad). Texts are views into
 * pool (built-in pieces), pad_text (the padding) or the --vocab file's mapping (open until the output is
 * written). has_scores / has_types: whether tokenizer.ggml.scores / token_type get written (always for the
 * built-in list; for --vocab, when the file has them, and types whenever there is padding to mark). */
struct vocab {
    struct gguf_str *tokens;
    float *scores;
    int32_t *types;
    uint64_t n, cap;
    uint64_t n_pad; /* the last n_pad tokens are padding (vocab_pad) */
    int has_scores, has_types;
    int types_u32; /* the file's token_type is an array of UINT32 (else INT32): written back the same way */
    char *pool;    /* backing bytes of built-in token texts (SYNTH_VOCAB_POOL, never reallocated) */
    size_t pool_n, pool_cap;
    char *pad_text; /* backing bytes of the padding's texts, SYNTH_PAD_BYTES per token */
};

#define SYNTH_VOCAB_POOL 32768     /* bytes of token text: fixed, so views into the pool never move */
#define SYNTH_MAX_VOCAB (1u << 24) /* --n-vocab's limit, far above any real vocabulary (~256k) */
#define SYNTH_PAD_BYTES 24         /* "<|reserved_16777215|>" and its NUL */

/* Room for n tokens in each array; -1 on out-of-memory. */
static int vocab_reserve(struct vocab *v, uint64_t n)
{
    if (n <= v->cap) return 0;
    uint64_t cap = v->cap ? v->cap : 1024;
    while (cap < n)
        cap *= 2;
    struct gguf_str *t = realloc(v->tokens, cap * sizeof *t);
    if (t) v->tokens = t;
    float *sc = realloc(v->scores, cap * sizeof *sc);
    if (sc) v->scores = sc;
    int32_t *ty = realloc(v->types, cap * sizeof *ty);
    if (ty) v->types = ty;
    if (!t || !sc || !ty) return -1;
    v->cap = cap;
    return 0;
}

static int vocab_has(const struct vocab *v, const char *s, size_t len)
{
    for (uint64_t i = 0; i < v->n; i++)
        if (v->tokens[i].len == len && memcmp(v->tokens[i].ptr, s, len) == 0) return 1;
    return 0;
}

/* Appends a token unless present; -1 on out-of-memory or a full pool. */
static int vocab_add(struct vocab *v, const char *s, size_t len, float score, int32_t type)
{
    if (vocab_has(v, s, len)) return 0;
    if (vocab_reserve(v, v->n + 1)) return -1;
    if (!v->pool && !(v->pool = malloc(v->pool_cap = SYNTH_VOCAB_POOL))) return -1;
    if (len > v->pool_cap - v->pool_n) return -1; /* the built-in vocabulary is far smaller */
    memcpy(v->pool + v->pool_n, s, len);
    v->tokens[v->n] = (struct gguf_str){v->pool + v->pool_n, len};
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->pool_n += len;
    v->n++;
    return 0;
}

/* <unk>, <s>, </s>, the 256 byte tokens, then a few hundred pieces: "▁", printable ASCII, "▁x" for each
 * letter, common English words with a leading "▁", and common letter groups. Scores decrease in order
 * (earlier = more frequent), as in SentencePiece models. Token types: 1 normal, 2 unknown, 3 control,
 * 6 byte. O(n^2) duplicate check over ~600 entries: instant. */
static int vocab_builtin(struct vocab *v)
{
    char buf[64];
    int rc = 0;
    v->has_scores = v->has_types = 1;
    rc |= vocab_add(v, "<unk>", 5, 0.0f, 2);
    rc |= vocab_add(v, "<s>", 3, 0.0f, 3);
    rc |= vocab_add(v, "</s>", 4, 0.0f, 3);
    for (int b = 0; b < 256; b++) {
        int n = snprintf(buf, sizeof buf, "<0x%02X>", b);
        rc |= vocab_add(v, buf, (size_t)n, 0.0f, 6);
    }
    float score = -1.0f;
    rc |= vocab_add(v, SPM_SPACE, 3, score--, 1);
    for (size_t i = 0; i < sizeof vocab_words / sizeof vocab_words[0]; i++) {
        int n = snprintf(buf, sizeof buf, SPM_SPACE "%s", vocab_words[i]);
        rc |= vocab_add(v, buf, (size_t)n, score--, 1);
    }
    for (int c = 'a'; c <= 'z'; c++) {
        int n = snprintf(buf, sizeof buf, SPM_SPACE "%c", c);
        rc |= vocab_add(v, buf, (size_t)n, score--, 1);
        n = snprintf(buf, sizeof buf, SPM_SPACE "%c", c - 'a' + 'A');
        rc |= vocab_add(v, buf, (size_t)n, score--, 1);
    }
    for (size_t i = 0; i < sizeof vocab_pieces / sizeof vocab_pieces[0]; i++)
        rc |= vocab_add(v, vocab_pieces[i], strlen(vocab_pieces[i]), score--, 1);
    for (int c = 0x21; c < 0x7f; c++) {
        buf[0] = (char)c;
        rc |= vocab_add(v, buf, 1, score--, 1);
    }
    return rc;
}

static void vocab_free(struct vocab *v)
{
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->pool);
    free(v->pad_text);
}

/* Copies the n 4-byte elements of array `key` of f (element type a or b) into dst and sets *has (0 when
 * the key is absent) and *type; an array of another type or length is an error naming path and key. */
static int vocab_load_arr4(const gguf_file *f, const char *path, const char *key, enum gguf_vtype a,
                           enum gguf_vtype b, uint64_t n, void *dst, int *has, enum gguf_vtype *type,
                           struct err *e)
{
    int64_t k = gguf_find_kv(f, key);
    *has = 0;
    if (k < 0) return 0;
    enum gguf_vtype t = gguf_kv_arr_type(f, (uint64_t)k);
    if (gguf_kv_type(f, (uint64_t)k) != GGUF_VTYPE_ARRAY || (t != a && t != b) ||
        gguf_kv_arr_n(f, (uint64_t)k) != n)
        return err_set(e, "%s: %s is not an array of %llu %s", path, key, (unsigned long long)n,
                       gguf_vtype_name(a));
    memcpy(dst, gguf_kv_arr_data(f, (uint64_t)k), n * 4);
    *has = 1;
    *type = t;
    return 0;
}

/* The token list of a --vocab file: texts as views into its mapping, and its scores and token types when
 * it has them (float32; int32 or uint32; as many as the tokens). */
static int vocab_load_file(struct vocab *v, const gguf_file *f, const char *path, struct err *e)
{
    int64_t k = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (k < 0 || gguf_kv_arr_type(f, (uint64_t)k) != GGUF_VTYPE_STRING || gguf_kv_arr_n(f, (uint64_t)k) == 0)
        return err_set(e, "%s: no tokenizer.ggml.tokens string array", path);
    uint64_t n = gguf_kv_arr_n(f, (uint64_t)k);
    if (n > SYNTH_MAX_VOCAB) return err_set(e, "%s: %llu tokens is too many", path, (unsigned long long)n);
    if (vocab_reserve(v, n)) return err_set(e, "out of memory (%llu tokens)", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        v->tokens[i] = gguf_kv_arr_str(f, (uint64_t)k, i);
    v->n = n;
    enum gguf_vtype t;
    if (vocab_load_arr4(f, path, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, GGUF_VTYPE_FLOAT32, n,
                        v->scores, &v->has_scores, &t, e) ||
        vocab_load_arr4(f, path, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, GGUF_VTYPE_UINT32, n,
                        v->types, &v->has_types, &t, e))
        return -1;
    v->types_u32 = v->has_types && t == GGUF_VTYPE_UINT32;
    return 0;
}

/* The text of padding token id, "<|reserved_ID|>", into buf (SYNTH_PAD_BYTES); returns its length. */
static size_t vocab_pad_text(uint64_t id, char *buf)
{
    return (size_t)snprintf(buf, SYNTH_PAD_BYTES, "<|reserved_%llu|>", (unsigned long long)id);
}

/* Pads the token list to n (<= SYNTH_MAX_VOCAB) tokens: ids v->n .. n-1 become control tokens (type 3,
 * score 0) with the texts vocab_pad_text gives, which refuses to run when one of those texts is already a
 * token (a duplicate piece would make the old id unreachable). Token types get written from now on:
 * normal for a file's tokens that had none, as a loader reads a list without types. */
static int vocab_pad(struct vocab *v, uint64_t n, struct err *e)
{
    uint64_t n0 = v->n;
    char buf[SYNTH_PAD_BYTES];
    if (n <= n0) return 0;
    for (uint64_t i = 0; i < n0; i++) {
        const struct gguf_str *t = &v->tokens[i];
        if (t->len < 14 || t->len >= SYNTH_PAD_BYTES || memcmp(t->ptr, "<|reserved_", 11)) continue;
        uint64_t id = 0; /* the digits after the prefix: fewer than SYNTH_PAD_BYTES, so no overflow */
        for (size_t j = 11; j < t->len && t->ptr[j] >= '0' && t->ptr[j] <= '9'; j++)
            id = id * 10 + (uint64_t)(t->ptr[j] - '0');
        if (id >= n0 && id < n && vocab_pad_text(id, buf) == t->len && !memcmp(buf, t->ptr, t->len))
            return err_set(e, "token %llu of the vocabulary is '%s', the name of padding token %llu",
                           (unsigned long long)i, buf, (unsigned long long)id);
    }
    if (vocab_reserve(v, n) || !(v->pad_text = malloc((n - n0) * SYNTH_PAD_BYTES)))
        return err_set(e, "out of memory (padding to %llu tokens)", (unsigned long long)n);
    if (!v->has_types)
        for (uint64_t i = 0; i < n0; i++)
            v->types[i] = 1;
    v->has_types = 1;
    for (uint64_t id = n0; id < n; id++) {
        char *p = v->pad_text + (id - n0) * SYNTH_PAD_BYTES;
        v->tokens[id] = (struct gguf_str){p, vocab_pad_text(id, p)};
        v->scores[id] = 0.0f;
        v->types[id] = 3;
    }
    v->n = n;
    v->n_pad = n - n0;
    return 0;
}

static int vocab_write(gguf_writer *w, const struct vocab *v, struct err *e)
{
    if (gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5, e) ||
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "default", 7, e) ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens, v->n, e) ||
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, v->scores, v->n, e) ||
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, v->types, v->n, e) ||
        gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0, e) ||
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1, e) ||
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2, e) ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1, e) ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0, e))
        return -1;
    return 0;
}

/* The tokenizer.* metadata of a --vocab file: every key copied in order, except the token list, scores and
 * types, which come from v (the file's own bytes when nothing was padded); token types are added after
 * the other keys when the file has none and v has them (padding). */
static int vocab_write_file(gguf_writer *w, const gguf_file *f, const struct vocab *v, struct err *e)
{
    int types_done = 0;
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        int rc = 0;
        if (strncmp(key, "tokenizer.", 10) != 0) continue;
        if (!strcmp(key, "tokenizer.ggml.tokens")) {
            rc = gguf_writer_set_arr_str(w, key, v->tokens, v->n, e);
        } else if (!strcmp(key, "tokenizer.ggml.scores")) {
            rc = gguf_writer_set_arr(w, key, GGUF_VTYPE_FLOAT32, v->scores, v->n, e);
        } else if (!strcmp(key, "tokenizer.ggml.token_type")) {
            rc = gguf_writer_set_arr(w, key, v->types_u32 ? GGUF_VTYPE_UINT32 : GGUF_VTYPE_INT32, v->types,
                                     v->n, e);
            types_done = 1;
        } else {
            rc = gguf_writer_copy_kv_at(w, f, i, e);
        }
        if (rc) return -1;
    }
    if (v->has_types && !types_done)
        return gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, v->types, v->n, e);
    return 0;
}

/* ---- tensor data ---- */

enum fill_kind { FILL_MATRIX, FILL_ONES, FILL_BIAS, FILL_NORM };

struct synth_tensor {
    char name[64];
    enum gguf_dtype dtype;
    uint32_t n_dims;
    uint64_t ne[2];
    enum fill_kind kind;
};

struct synth_fill {
    const struct synth_tensor *tensors;
    uint64_t seed;
    uint64_t cur; /* tensor the stream below belongs to, or UINT64_MAX */
    struct rng rng;
    float *row; /* (ne[0]) scratch for one row */
    uint64_t row_cap;
};

/* One row of n values of the given kind: ones, biases in [-0.1, 0.1], or matrix values in [-a, a]; the
 * random kinds draw n values from rng in order. */
static void fill_row(enum fill_kind kind, float a, struct rng *rng, float *row, uint64_t n)
{
    switch (kind) {
    case FILL_ONES:
        for (uint64_t j = 0; j < n; j++)
            row[j] = 1.0f;
        break;
    case FILL_BIAS:
        for (uint64_t j = 0; j < n; j++)
            row[j] = 0.1f * rng_sym(rng);
        break;
    case FILL_NORM:
        for (uint64_t j = 0; j < n; j++)
            row[j] = 1.0f + 0.25f * rng_sym(rng);
        break;
    default:
        for (uint64_t j = 0; j < n; j++)
            row[j] = a * rng_sym(rng);
        break;
    }
}

static int synth_fill_cb(void *user, uint64_t ti, void *dst, uint64_t n_bytes, struct err *e)
{
    struct synth_fill *sf = user;
    const struct synth_tensor *t = &sf->tensors[ti];
    if (sf->cur != ti) {
        rng_seed(&sf->rng, sf->seed ^ (ti * 0xD1B54A32D192ED03ull));
        sf->cur = ti;
    }
    uint64_t n_in = t->ne[0], row_bytes = gguf_row_bytes(t->dtype, n_in);
    if (n_in > sf->row_cap) {
        float *r = realloc(sf->row, n_in * sizeof *r);
        if (!r) return err_set(e, "out of memory");
        sf->row = r;
        sf->row_cap = n_in;
    }
    float a = sqrtf(3.0f / (float)n_in);
    uint8_t *out = dst;
    for (uint64_t done = 0; done < n_bytes; done += row_bytes) {
        fill_row(t->kind, a, &sf->rng, sf->row, n_in);
        if (quant_quantize_row(t->dtype, sf->row, out + done, (int64_t)n_in))
            return err_set(e, "cannot quantize a row of %llu to %s", (unsigned long long)n_in,
                           gguf_dtype_info(t->dtype)->name);
    }
    return 0;
}

/* The tensor list of a shape; returns the count (at most 3 + SYNTH_MAX_LAYER_TENSORS * n_layer). The
 * llama set (+ qwen2 biases); gemma: + q/k norms (gemma3) and the post-norms, a tied head; phi3: fused
 * attn_qkv (q, k, v rows) and ffn_up (gate rows, then up rows). */
static uint64_t synth_tensors(const struct synth_shape *s, const struct qmix_type *ty, uint64_t n_vocab,
                              struct synth_tensor *ts)
{
    const int gemma = !strncmp(s->arch, "gemma", 5), gemma3 = !strcmp(s->arch, "gemma3"),
              phi3 = !strcmp(s->arch, "phi3");
    const enum fill_kind norm = gemma || phi3 ? FILL_NORM : FILL_ONES;
    uint64_t n = 0, head_dim = s->head_dim ? s->head_dim : s->n_embd / s->n_head, n_q = s->n_head * head_dim,
             n_kv = s->n_head_kv * head_dim;
#define T(kind_, dt_, nd_, a_, b_, ...)                                                                      \
    do {                                                                                                     \
        snprintf(ts[n].name, sizeof ts[n].name, __VA_ARGS__);                                                \
        ts[n].dtype = dt_;                                                                                   \
        if (kind_ == FILL_MATRIX) ts[n].dtype = synth_role_type(ty, s, ts[n].name, a_);                     \
        ts[n].n_dims = nd_;                                                                                  \
        ts[n].ne[0] = a_;                                                                                    \
        ts[n].ne[1] = b_;                                                                                    \
        ts[n].kind = kind_;                                                                                  \
        n++;                                                                                                 \
    } while (0)
    T(FILL_MATRIX, ty->base, 2, s->n_embd, n_vocab, "token_embd.weight"); // (n_vocab, n_embd)
    T(norm, GGUF_DTYPE_F32, 1, s->n_embd, 1, "output_norm.weight");       // (n_embd)
    if (!s->tied) T(FILL_MATRIX, ty->base, 2, s->n_embd, n_vocab, "output.weight");
    for (uint32_t il = 0; il < s->n_layer; il++) {
        T(norm, GGUF_DTYPE_F32, 1, s->n_embd, 1, "blk.%u.attn_norm.weight", il);
        if (phi3) {
            // (n_q + 2 n_kv, n_embd)
            T(FILL_MATRIX, ty->base, 2, s->n_embd, n_q + 2 * n_kv, "blk.%u.attn_qkv.weight", il);
        } else {
            T(FILL_MATRIX, ty->base, 2, s->n_embd, n_q, "blk.%u.attn_q.weight", il); // (n_q, n_embd)
            T(FILL_MATRIX, ty->base, 2, s->n_embd, n_kv, "blk.%u.attn_k.weight", il);
            T(FILL_MATRIX, ty->base, 2, s->n_embd, n_kv, "blk.%u.attn_v.weight", il);
        }
        if (s->qkv_bias) {
            T(FILL_BIAS, GGUF_DTYPE_F32, 1, n_q, 1, "blk.%u.attn_q.bias", il);
            T(FILL_BIAS, GGUF_DTYPE_F32, 1, n_kv, 1, "blk.%u.attn_k.bias", il);
            T(FILL_BIAS, GGUF_DTYPE_F32, 1, n_kv, 1, "blk.%u.attn_v.bias", il);
        }
        if (gemma3) {
            T(norm, GGUF_DTYPE_F32, 1, head_dim, 1, "blk.%u.attn_q_norm.weight", il);
            T(norm, GGUF_DTYPE_F32, 1, head_dim, 1, "blk.%u.attn_k_norm.weight", il);
        }
        T(FILL_MATRIX, ty->base, 2, n_q, s->n_embd, "blk.%u.attn_output.weight", il);
        if (gemma) T(norm, GGUF_DTYPE_F32, 1, s->n_embd, 1, "blk.%u.post_attention_norm.weight", il);
        T(norm, GGUF_DTYPE_F32, 1, s->n_embd, 1, "blk.%u.ffn_norm.weight", il);
        if (phi3) {
            T(FILL_MATRIX, ty->base, 2, s->n_embd, 2 * s->n_ff, "blk.%u.ffn_up.weight", il); // (2 n_ff, n_embd)
            T(FILL_MATRIX, ty->base, 2, s->n_ff, s->n_embd, "blk.%u.ffn_down.weight", il);
        } else {
            T(FILL_MATRIX, ty->base, 2, s->n_embd, s->n_ff, "blk.%u.ffn_gate.weight", il);
            T(FILL_MATRIX, ty->base, 2, s->n_ff, s->n_embd, "blk.%u.ffn_down.weight", il);
            T(FILL_MATRIX, ty->base, 2, s->n_embd, s->n_ff, "blk.%u.ffn_up.weight", il);
        }
        if (gemma) T(norm, GGUF_DTYPE_F32, 1, s->n_embd, 1, "blk.%u.post_ffw_norm.weight", il);
    }
#undef T
    return n;
}

static int synth_metadata(gguf_writer *w, const struct synth_shape *s, uint32_t file_type, uint64_t n_vocab,
                          int quantized, struct err *e)
{
    char key[128];
    const char *a = s->arch;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    if (gguf_writer_set_str(w, "general.architecture", a, strlen(a), e) ||
        gguf_writer_set_str(w, "general.name", s->model_name, strlen(s->model_name), e) ||
        gguf_writer_set_u32(w, "general.file_type", file_type, e) ||
        (quantized && gguf_writer_set_u32(w, "general.quantization_version", 2, e)) ||
        gguf_writer_set_u32(w, KEY("context_length"), s->n_ctx, e) ||
        gguf_writer_set_u32(w, KEY("embedding_length"), s->n_embd, e) ||
        gguf_writer_set_u32(w, KEY("block_count"), s->n_layer, e) ||
        gguf_writer_set_u32(w, KEY("feed_forward_length"), s->n_ff, e) ||
        gguf_writer_set_u32(w, KEY("attention.head_count"), s->n_head, e) ||
        gguf_writer_set_u32(w, KEY("attention.head_count_kv"), s->n_head_kv, e) ||
        gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base, e) ||
        gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps, e) ||
        gguf_writer_set_u32(w, KEY("rope.dimension_count"), s->head_dim ? s->head_dim : s->n_embd / s->n_head, e) ||
        gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab, e))
        return -1;
    if ((s->head_dim && (gguf_writer_set_u32(w, KEY("attention.key_length"), s->head_dim, e) ||
                         gguf_writer_set_u32(w, KEY("attention.value_length"), s->head_dim, e))) ||
        (s->n_swa && gguf_writer_set_u32(w, KEY("attention.sliding_window"), s->n_swa, e)) ||
        (s->att_softcap > 0 && gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), s->att_softcap, e)) ||
        (s->final_softcap > 0 && gguf_writer_set_f32(w, KEY("final_logit_softcapping"), s->final_softcap, e)) ||
        (s->rope_linear > 0 && (gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear", 6, e) ||
                                gguf_writer_set_f32(w, KEY("rope.scaling.factor"), s->rope_linear, e))))
        return -1;
#undef KEY
    return 0;
}

static void synth_usage(FILE *out)
{
    fprintf(out, "usage: nightshift synth --shape NAME --type T -o FILE [--vocab VOCAB.gguf] [--n-vocab N]\n"
                 "                        [--seed S]\n\n"
                 "Writes a GGUF v3 file with deterministic random weights in the shape of a real model.\n\n"
                 "  --shape NAME   ");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fprintf(out, "%s%s", i ? ", " : "", shapes[i].name);
    fprintf(out, "\n                 (token rows of the real models:");
    for (size_t i = 0, k = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].n_vocab) fprintf(out, "%s %s %u", k++ ? "," : "", shapes[i].name, shapes[i].n_vocab);
    fprintf(out, ";\n                 the other shapes: as many as the vocabulary has)\n  --type T       ");
    fputs(qmix_names(), out);
    fprintf(out,
            "\n                 (matrices and token embedding; norms and biases are always f32; the\n"
            "                 K-quant mixes give some tensors more bits, as llama.cpp's do)\n"
            "  -o FILE        output path\n"
            "  --vocab FILE   copy tokenizer.* metadata from this GGUF (default: a built-in byte-fallback\n"
            "                 SentencePiece vocabulary of 589 tokens)\n"
            "  --n-vocab N    token rows of token_embd and output (default: the shape's real count, or the\n"
            "                 vocabulary's when that is larger; 0: the vocabulary's own). Rows beyond the\n"
            "                 vocabulary's tokens get unused control tokens <|reserved_ID|>, which encoding\n"
            "                 text never produces (only their literal text with special tokens parsed)\n"
            "  --seed S       random seed (default 1); same arguments + seed = identical bytes\n");
}

/* The number of token rows (see the top of the file): --n-vocab when given (flag >= 0; 0: the vocabulary's
 * own n_tokens), else the shape's real count or n_tokens when that is larger. Padding only adds tokens:
 * --n-vocab below n_tokens is an error. */
static int synth_n_vocab(const struct synth_shape *s, int32_t flag, uint64_t n_tokens, uint64_t *out,
                         struct err *e)
{
    if (flag > 0 && (uint64_t)flag < n_tokens)
        return err_set(e, "--n-vocab %d is less than the vocabulary's %llu tokens (padding only adds tokens)",
                       (int)flag, (unsigned long long)n_tokens);
    if (flag >= 0)
        *out = flag ? (uint64_t)flag : n_tokens;
    else
        *out = s->n_vocab > n_tokens ? s->n_vocab : n_tokens;
    return 0;
}

/* The token list to write: vocab_path's (opened into *vf, which must stay open: the texts are views into
 * it) or the built-in one, padded to synth_n_vocab's count. */
static int synth_vocab(const struct synth_shape *s, const char *vocab_path, int32_t n_vocab_flag,
                       gguf_file **vf, struct vocab *v, struct err *e)
{
    if (vocab_path) {
        if (gguf_open(vocab_path, vf, e) || vocab_load_file(v, *vf, vocab_path, e)) return -1;
    } else if (vocab_builtin(v)) {
        return err_set(e, "out of memory");
    }
    uint64_t n = 0;
    return synth_n_vocab(s, n_vocab_flag, v->n, &n, e) || vocab_pad(v, n, e) ? -1 : 0;
}

int cmd_synth(int argc, char **argv)
{
    const char *shape_name = NULL, *type_name = NULL, *out_path = NULL, *vocab_path = NULL;
    uint64_t seed = 1;
    int32_t n_vocab_flag = -1;
    const struct cli_opt opts[] = {
        {.flag = "--shape", .type = CLI_OPT_STRING, .dst = &shape_name},
        {.flag = "--type", .type = CLI_OPT_STRING, .dst = &type_name},
        {.flag = "--output", .alias = "-o", .type = CLI_OPT_STRING, .dst = &out_path},
        {.flag = "--vocab", .type = CLI_OPT_STRING, .dst = &vocab_path},
        {.flag = "--n-vocab", .type = CLI_OPT_INT32, .dst = &n_vocab_flag, .hi = SYNTH_MAX_VOCAB},
        {.flag = "--seed", .type = CLI_OPT_U64, .dst = &seed},
    };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            synth_usage(stdout);
            return 0;
        }
        int r = cli_opts_parse("synth", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r == 0) cli_error("synth", "unknown flag '%s'", arg);
        if (r <= 0) {
            synth_usage(stderr);
            return 2;
        }
    }
    if (!shape_name || !type_name || !out_path) {
        cli_error("synth", "--shape, --type and -o are required");
        synth_usage(stderr);
        return 2;
    }
    const struct synth_shape *shape = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, shape_name)) shape = &shapes[i];
    const struct qmix_type *ty = qmix_find(type_name);
    if (!shape || !ty) {
        cli_error("synth", "unknown %s '%s'", shape ? "type" : "shape", shape ? type_name : shape_name);
        synth_usage(stderr);
        return 2;
    }

    struct err e = {{0}};
    int rc = 1;
    gguf_file *vf = NULL;
    struct vocab vocab = {0};
    struct synth_tensor *ts = NULL;
    struct synth_fill sf = {0};
    gguf_writer *w = gguf_writer_init();
    if (!w) {
        cli_error("synth", "out of memory");
        return 1;
    }
    if (synth_vocab(shape, vocab_path, n_vocab_flag, &vf, &vocab, &e)) goto fail;
    uint64_t n_vocab = vocab.n;
    enum gguf_dtype wt = ty->base;
    if (synth_metadata(w, shape, (uint32_t)ty->ftype, n_vocab,
                       wt != GGUF_DTYPE_F32 && wt != GGUF_DTYPE_F16 && wt != GGUF_DTYPE_BF16, &e))
        goto fail;
    if (vf ? vocab_write_file(w, vf, &vocab, &e) : vocab_write(w, &vocab, &e)) goto fail;

    ts = calloc(3 + SYNTH_MAX_LAYER_TENSORS * (size_t)shape->n_layer, sizeof *ts);
    if (!ts) {
        err_set(&e, "out of memory");
        goto fail;
    }
    uint64_t n_t = synth_tensors(shape, ty, n_vocab, ts), total = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        if (gguf_writer_add_tensor(w, ts[i].name, ts[i].dtype, ts[i].n_dims, ts[i].ne, NULL, &e)) goto fail;
        total += gguf_row_bytes(ts[i].dtype, ts[i].ne[0]) * ts[i].ne[1];
    }
    sf = (struct synth_fill){ts, seed, UINT64_MAX, {{0}}, NULL, 0};
    log_info("synth: %s %s, %u layers, n_vocab %llu (%llu padding), %llu tensors, %.1f MiB of weights -> %s",
             shape->name, ty->name, shape->n_layer, (unsigned long long)n_vocab,
             (unsigned long long)vocab.n_pad, (unsigned long long)n_t, (double)total / (1 << 20), out_path);
    if (gguf_writer_write(w, out_path, synth_fill_cb, &sf, &e)) goto fail;
    rc = 0;
fail:
    if (rc) cli_error("synth", "%s", e.msg);
    free(sf.row);
    free(ts);
    vocab_free(&vocab);
    gguf_close(vf);
    gguf_writer_free(w);
    return rc;
}
