/* tok — tokenizers built from GGUF metadata: SentencePiece ("llama") and byte-level BPE ("gpt2") with the
 * pre-tokenizer named by tokenizer.ggml.pre.
 *
 * A tok_vocab owns copies of everything it needs: the gguf_file may be closed after tok_load().
 * All functions are safe to call concurrently on one tok_vocab (it is immutable after load).
 */
#ifndef NS_TOKENIZER_TOK_H
#define NS_TOKENIZER_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct tok_vocab tok_vocab;

enum tok_kind { TOK_KIND_SPM, TOK_KIND_BPE };

/* Validates tokenizer.* metadata (ids inside the vocab, known token types, scores/types as long as the
 * token list, merges "left right" whose halves and concatenation are tokens). An unknown tokenizer model
 * or pre-tokenizer is an error that lists the supported ones; a BPE vocab without tokenizer.ggml.pre uses
 * "default" (with a warning). A special id of 0xFFFFFFFF (or negative) means "none". Defaults when keys are
 * absent: SPM bos/eos/unk = 1/2/0, add_bos on, space prefix on; BPE add_bos on only for Llama-3-style
 * pre-tokenizers; add_eos off. EOT, if not given, is the first of <|eot_id|>, <|im_end|>, <end_of_turn>,
 * <|end|> that is a control or user-defined token. Vocab-only files (no tensors) are fine.
 * O(tokens + merges) time and memory. */
int tok_load(const gguf_file *f, tok_vocab **out, struct err *e);
void tok_free(tok_vocab *v);

/* Encodes len bytes of text (need not be NUL-terminated; invalid UTF-8 is handled, never crashes).
 * add_bos: prepend BOS (when the vocab has one). parse_special: text of control (and unknown) tokens in the
 * input becomes those tokens (off = treated as plain text). User-defined tokens (added tokens that are not
 * special, e.g. DeepSeek's) are always matched, as the Hugging Face tokenizers do; the leftmost, then
 * longest special text wins. *ids is malloc'd (also when *n_ids is 0), caller frees. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
               size_t *n_ids, struct err *e);

/* The bytes a token stands for when it follows other text (SPM: "▁" -> " ", "<0x0A>" -> "\n"; BPE: the
 * byte-to-unicode mapping undone). Control tokens (BOS/EOS/...) give "" unless render_special. Returns the
 * number of bytes (may exceed cap: then only cap bytes were written), or -1 for an id outside the vocab. */
int tok_token_bytes(const tok_vocab *v, int32_t id, int render_special, char *buf, size_t cap);

/* Decodes a whole sequence to bytes as the detokenize command prints it (SPM: the leading space of the
 * first text piece is dropped when the model adds a space prefix, so decode(encode(s)) == s). An id outside
 * the vocab is an error naming it and its position. *out is malloc'd and NUL-terminated. */
int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, char **out, size_t *len, struct err *e);

/* tok_decode with control/unknown/unused tokens rendered as their text when render_special (the leading
 * space rule then still applies to the first text piece, so "<s>Hello" round-trips). */
int tok_decode_ex(const tok_vocab *v, const int32_t *ids, size_t n, int render_special, char **out, size_t *len,
                  struct err *e);

/* Debug check of the vocab's invariants (see tok.c); 0 when they hold. O(n_vocab + merges). */
int tok_check(const tok_vocab *v, struct err *e);

int32_t tok_n_vocab(const tok_vocab *v);
int32_t tok_n_merges(const tok_vocab *v); /* 0 for SPM */
int tok_add_space_prefix(const tok_vocab *v); /* SPM: a space is put in front of the text (default 1) */
/* tokenizer.ggml.token_type of id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte;
 * 0 undefined); -1 for a bad id. */
int tok_token_type(const tok_vocab *v, int32_t id);
/* The id whose piece text is exactly text[0..len); -1 if none. O(len). */
int32_t tok_find_piece(const tok_vocab *v, const char *text, size_t len);
enum tok_kind tok_get_kind(const tok_vocab *v);
const char *tok_model_name(const tok_vocab *v); /* "llama" or "gpt2" */
const char *tok_pre_name(const tok_vocab *v);   /* "default", "llama-bpe", ... ("" for SPM) */
/* Special ids; -1 when the vocab has none. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v);
int32_t tok_pad(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
int tok_add_bos(const tok_vocab *v); /* tokenizer.ggml.add_bos_token (default per model kind) */
int tok_add_eos(const tok_vocab *v);
/* 1 if generation should stop at this id: EOS, EOT, or a control/user-defined token whose text is one of
 * <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, <|endoftext|>. */
int tok_is_eog(const tok_vocab *v, int32_t id);
/* The piece text as stored in the vocab (for display); NULL for a bad id. */
const char *tok_piece(const tok_vocab *v, int32_t id);

/* tok_utf8 — incremental decode that never splits a UTF-8 character: feed token bytes, get back only the
 * complete characters so far. Invalid sequences come out as they are once they cannot become valid. */
struct tok_utf8 {
    char pending[8];
    int n_pending;
};
/* Appends the complete prefix of (pending + bytes) to out, keeps an incomplete tail (at most 3 bytes)
 * pending. Returns bytes written; cap >= n + 3 guarantees nothing is cut (bytes beyond cap are dropped).
 * Initialise the state with {{0}, 0}. */
size_t tok_utf8_feed(struct tok_utf8 *s, const char *bytes, size_t n, char *out, size_t cap);
/* Flushes what is pending (at end of stream; at most 3 bytes) and resets the state. */
size_t tok_utf8_flush(struct tok_utf8 *s, char *out, size_t cap);

#endif
