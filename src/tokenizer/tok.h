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

/* Validates tokenizer.* metadata (ids inside the vocab, known token types, well-formed merges). An unknown
 * tokenizer model or pre-tokenizer is an error that lists the supported ones. */
int tok_load(const gguf_file *f, tok_vocab **out, struct err *e);
void tok_free(tok_vocab *v);

/* Encodes len bytes of text (need not be NUL-terminated; invalid UTF-8 is handled, never crashes).
 * add_bos: prepend BOS (when the vocab has one). parse_special: text of control/user-defined tokens in the
 * input becomes those tokens (off = treated as plain text). *ids is malloc'd, caller frees. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
               size_t *n_ids, struct err *e);

/* The bytes a token stands for when it follows other text (SPM: "▁" -> " ", "<0x0A>" -> "\n"; BPE: the
 * byte-to-unicode mapping undone). Control tokens (BOS/EOS/...) give "" unless render_special. Returns the
 * number of bytes (may exceed cap: then only cap bytes were written), or -1 for an id outside the vocab. */
int tok_token_bytes(const tok_vocab *v, int32_t id, int render_special, char *buf, size_t cap);

/* Decodes a whole sequence to bytes as the detokenize command prints it (SPM: the leading space of the
 * first piece is dropped when the model adds a space prefix). *out is malloc'd and NUL-terminated. */
int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, char **out, size_t *len, struct err *e);

int32_t tok_n_vocab(const tok_vocab *v);
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
/* 1 if generation should stop at this id (EOS, EOT, or another end-of-generation control token). */
int tok_is_eog(const tok_vocab *v, int32_t id);
/* The piece text as stored in the vocab (for display); NULL for a bad id. */
const char *tok_piece(const tok_vocab *v, int32_t id);

/* tok_utf8 — incremental decode that never splits a UTF-8 character: feed token bytes, get back only the
 * complete characters so far. Invalid sequences come out as they are once they cannot become valid. */
struct tok_utf8 {
    char pending[8];
    int n_pending;
};
/* Appends the complete prefix of (pending + bytes) to out (cap bytes), keeps an incomplete tail pending.
 * Returns bytes written. */
size_t tok_utf8_feed(struct tok_utf8 *s, const char *bytes, size_t n, char *out, size_t cap);
/* Flushes what is pending (at end of stream). */
size_t tok_utf8_flush(struct tok_utf8 *s, char *out, size_t cap);

#endif
