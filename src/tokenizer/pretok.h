/* pretok — the regex pre-tokenizers of byte-level BPE vocabs (tokenizer.ggml.pre).
 *
 * A pre-tokenizer is a list of PCRE2 regexes applied in sequence: the first splits the text into matches and
 * the gaps between them (both kept, in order), each later one splits every piece of the previous step the
 * same way, each piece seen as a string of its own (lookarounds do not see past its ends). The BPE merges
 * then run inside each final piece. Private to src/tokenizer/.
 */
#ifndef NS_TOKENIZER_PRETOK_H
#define NS_TOKENIZER_PRETOK_H

#include <stddef.h>

#include "util/err.h"

struct pretok;

/* Compiles the regexes of the pre-tokenizer `name` (each once; JIT where available). An unknown name is an
 * error listing the supported ones. *ignore_merges is set for pre-tokenizers whose vocab emits a piece that
 * is itself a token whole, without merging (Llama 3); *add_bos to the default of tokenizer.ggml.add_bos_token. */
int pretok_create(const char *name, struct pretok **out, int *ignore_merges, int *add_bos, struct err *e);
void pretok_free(struct pretok *p);

/* Called for each piece, in text order; a non-zero return stops the split and is returned. */
typedef int (*pretok_piece_fn)(void *user, const char *s, size_t n, struct err *e);

/* Splits text (any bytes: invalid UTF-8 never matches a regex, so it ends up in gap pieces) and calls fn
 * for every non-empty piece. Thread-safe: match data is allocated per call. O(len) regex work per level. */
int pretok_split(const struct pretok *p, const char *text, size_t len, pretok_piece_fn fn, void *user,
                 struct err *e);

#endif
