/* vocab — the token table under every tokenizer: piece texts, scores and token types from GGUF metadata,
 * the piece -> id map, the special token ids with the end-of-generation set, and the matcher that finds the
 * texts of special tokens in raw text.
 *
 * The bottom of src/tokenizer/: it knows nothing of SentencePiece, BPE or pre-tokenizers (spm, bpe and the
 * tok facade build on it). Private to src/tokenizer/; tok.h is the public face.
 *
 * A vocab owns copies of everything it needs (the gguf_file may be closed after loading) and is immutable
 * once vocab_load_specials() has returned: any number of threads may read one vocab at the same time.
 */
#ifndef NS_TOKENIZER_VOCAB_H
#define NS_TOKENIZER_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

/* tokenizer.ggml.token_type values (ggml numbering). */
enum vocab_token_type {
    VOCAB_TYPE_UNDEFINED = 0,
    VOCAB_TYPE_NORMAL = 1,
    VOCAB_TYPE_UNKNOWN = 2,
    VOCAB_TYPE_CONTROL = 3,
    VOCAB_TYPE_USER_DEFINED = 4,
    VOCAB_TYPE_UNUSED = 5,
    VOCAB_TYPE_BYTE = 6,
    VOCAB_TYPE_COUNT
};

/* The special token ids; -1 = none. */
struct vocab_specials {
    int32_t bos, eos, eot, pad, unk;
};

struct vocab;

/* Reads tokenizer.ggml.tokens (required, 1 .. INT32_MAX - 1 strings), tokenizer.ggml.scores (float32,
 * optional: 0 when absent) and tokenizer.ggml.token_type (int32, optional: all normal when absent; each a
 * known type), both as long as the token list, and builds the piece map. Special ids are all -1 until
 * vocab_load_specials(). O(tokens) time and memory. */
int vocab_load(const gguf_file *f, struct vocab **out, struct err *e);

/* Sets the special ids: defaults, overridden by tokenizer.ggml.{bos,eos,unknown,padding,eot}_token_id when
 * present (an id inside the vocab, or 0xFFFFFFFF / negative for "none"; else an error naming the key). Then
 * builds the special-token matcher over every control, user-defined and unknown token, and the
 * end-of-generation set: EOS, EOT, and control/user-defined tokens whose text is one of <|im_end|>,
 * <|eot_id|>, <|end|>, <end_of_turn>, <|endoftext|>. EOT, if neither the defaults nor the file give one, is
 * the first of <|eot_id|>, <|im_end|>, <end_of_turn>, <|end|> that is a control or user-defined token.
 * Call once, after vocab_load(). */
int vocab_load_specials(struct vocab *v, const gguf_file *f, const struct vocab_specials *defaults,
                        struct err *e);

void vocab_free(struct vocab *v); /* NULL is a no-op */

/* Debug check of the invariant at the top of vocab.c; 0 when it holds. O(tokens). */
int vocab_check(const struct vocab *v, struct err *e);

/* The number of tokens (>= 1). Ids are 0 .. vocab_n - 1; the functions below that take an id need a valid
 * one. */
int32_t vocab_n(const struct vocab *v);
/* The piece text as stored in the file, NUL-terminated (a piece may also hold NUL bytes: its length is
 * authoritative). Valid until vocab_free(). */
const char *vocab_text(const struct vocab *v, int32_t id);
uint32_t vocab_text_len(const struct vocab *v, int32_t id);
float vocab_score(const struct vocab *v, int32_t id); /* SPM merge priority; 0 when the file has none */
enum vocab_token_type vocab_token_type(const struct vocab *v, int32_t id);

/* The id whose piece text is exactly s[0..len) (the last of duplicate texts); -1 if none or len is 0.
 * O(len). */
int32_t vocab_lookup(const struct vocab *v, const char *s, size_t len);

const struct vocab_specials *vocab_specials(const struct vocab *v);
/* 1 if generation should stop at id (see vocab_load_specials); 0 for any other id, valid or not. */
int vocab_is_eog(const struct vocab *v, int32_t id);

/* The longest special-token text starting at s (n >= 1 bytes left): returns its length and sets *id, or 0
 * when none starts there. User-defined tokens always match; control and unknown ones only with
 * parse_special. O(length of the longest special text). */
size_t vocab_match_special(const struct vocab *v, const unsigned char *s, size_t n, int parse_special,
                           int32_t *id);

/* A growable list of token ids: what the encoders append to. Start from {0}; the caller frees ids. */
struct vocab_tokens {
    int32_t *ids;
    size_t n, cap;
};
int vocab_tokens_push(struct vocab_tokens *t, int32_t id, struct err *e);

#endif
