/* spm — SentencePiece-style encoding (tokenizer.ggml.model = "llama"). Private to src/tokenizer/. */
#ifndef NS_TOKENIZER_SPM_H
#define NS_TOKENIZER_SPM_H

#include <stddef.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

/* Builds v->pair_bits from the vocab's texts (needs v->blob, v->len). O(total text bytes). */
int spm_prepare(tok_vocab *v, struct err *e);

/* Encodes one raw-text fragment (no special tokens in it): spaces become U+2581 ("▁"), with one more in
 * front when add_prefix; then the score-driven merges; characters left without a token fall back to their
 * <0xNN> byte tokens (or the unknown token when the vocab has no byte tokens). O(n log n). */
int spm_encode(const tok_vocab *v, const char *text, size_t len, int add_prefix, struct tok_out *out,
               struct err *e);

#endif
