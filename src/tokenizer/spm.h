/* spm — SentencePiece-style encoding (tokenizer.ggml.model = "llama") over a vocab: score-driven merges of
 * UTF-8 characters, byte fallback through the <0xNN> tokens. Private to src/tokenizer/; uses only vocab and
 * util.
 */
#ifndef NS_TOKENIZER_SPM_H
#define NS_TOKENIZER_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/vocab.h"
#include "util/err.h"

struct spm;

/* Prepares encoding with v: the set of character pairs found side by side in some token, and the id of
 * each byte's "<0xNN>" token. v is borrowed and must outlive the spm. O(total text bytes). */
int spm_create(const struct vocab *v, struct spm **out, struct err *e);
void spm_free(struct spm *m); /* NULL is a no-op */

/* Debug check of the invariant at the top of spm.c; 0 when it holds. */
int spm_check(const struct spm *m, struct err *e);

/* Encodes one raw-text fragment (no special tokens in it): spaces become U+2581 ("▁"), with one more in
 * front when add_prefix; then the score-driven merges; characters left without a token fall back to their
 * <0xNN> byte tokens (or the unknown token when the vocab has no byte tokens). Appends to out.
 * O(n log n). */
int spm_encode(const struct spm *m, const char *text, size_t len, int add_prefix, struct vocab_tokens *out,
               struct err *e);

/* The bytes a piece stands for in decoded text: a byte token (is_byte) spelled "<0xNN>" is that byte, any
 * other piece its text with each U+2581 turned into a space. text[len] must be readable and NUL (vocab
 * texts are). Writes into out (room for len bytes) and returns the length, never more than len. */
size_t spm_piece_bytes(const char *text, size_t len, int is_byte, char *out);

/* Test hook: every pair of characters counts as possibly inside a token, so each fragment is merged as one
 * segment. Encoding results must not change (the segmentation is an optimisation only). */
void spm_merge_unsegmented(struct spm *m);

#endif
