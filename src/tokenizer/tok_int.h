/* tok_int — the layout of a tok_vocab: the facade over vocab, spm and bpe. Private: only tok.c and the
 * tokenizer's tests include it; no module below the facade includes it or tok.h, so includes go one way
 * (tok -> spm, bpe; bpe -> pretok; spm, bpe -> vocab; vocab -> gguf; all -> util).
 *
 * Everything here is immutable after tok_load() returns, so any number of threads may encode and decode
 * with one vocab at the same time; per-call scratch lives on the caller's stack or in malloc'd buffers.
 */
#ifndef NS_TOKENIZER_TOK_INT_H
#define NS_TOKENIZER_TOK_INT_H

#include <stdint.h>

#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/tok.h"
#include "tokenizer/vocab.h"

struct tok_vocab {
    enum tok_kind kind;
    struct vocab *vocab;
    struct spm *spm; /* TOK_KIND_SPM only, else NULL */
    struct bpe *bpe; /* TOK_KIND_BPE only, else NULL */

    int add_bos, add_eos, add_space_prefix;

    /* decoded bytes per token (tok_token_bytes with render_special = 0), one blob */
    char *dec;
    uint64_t *dec_off; /* (n_vocab) */
    uint32_t *dec_len; /* (n_vocab) */

    char model_name[16];
    char pre_name[64];
};

#endif
