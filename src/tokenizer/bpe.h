/* bpe — byte-level BPE (tokenizer.ggml.model = "gpt2") over a vocab: the GPT-2 byte <-> character mapping,
 * the merge table, the pre-tokenizer split and the merge loop. Private to src/tokenizer/; uses only vocab,
 * pretok, gguf (to read the merges) and util.
 */
#ifndef NS_TOKENIZER_BPE_H
#define NS_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"
#include "util/err.h"

struct bpe;

/* Prepares encoding with v: compiles the pre-tokenizer pre_name (an unknown name is an error listing the
 * supported ones), maps each byte to the token of its GPT-2 character, and reads tokenizer.ggml.merges
 * (required; an array of "left right" strings whose halves are non-empty tokens and whose concatenation is
 * a token; a bad merge is an error naming its index; duplicate pairs keep the first, lowest rank). v is
 * borrowed and must outlive the bpe. O(tokens + merges). */
int bpe_create(const struct vocab *v, const gguf_file *f, const char *pre_name, struct bpe **out,
               struct err *e);
void bpe_free(struct bpe *b); /* NULL is a no-op */

/* Debug check of the invariant at the top of bpe.c; 0 when it holds. O(merges). */
int bpe_check(const struct bpe *b, struct err *e);

/* The default of tokenizer.ggml.add_bos_token for this pre-tokenizer (on for Llama-3-style ones). */
int bpe_add_bos_default(const struct bpe *b);
int32_t bpe_n_merges(const struct bpe *b);

/* Encodes one raw-text fragment (no special tokens in it): pre-tokenizer split, then merges per piece.
 * Appends to out. O(n log n) in the piece length. */
int bpe_encode(const struct bpe *b, const char *text, size_t len, struct vocab_tokens *out, struct err *e);

/* The bytes of a normal token's text with the byte mapping undone, into buf (cap bytes). Characters
 * outside the mapping are copied as they are. Returns the full length (may exceed cap; never exceeds len). */
size_t bpe_unmap(const char *text, size_t len, char *buf, size_t cap);

#endif
