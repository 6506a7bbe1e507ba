/* bpe — byte-level BPE (tokenizer.ggml.model = "gpt2"): the GPT-2 byte <-> character mapping, the merge
 * table and the merge loop. Private to src/tokenizer/.
 */
#ifndef NS_TOKENIZER_BPE_H
#define NS_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "tokenizer/tok_int.h"
#include "util/err.h"

/* The GPT-2 mapping: every byte is shown as one printable code point (bytes that are printable Latin-1
 * stay themselves, the rest map to U+0100 + n in byte order). Writes the UTF-8 of byte b's code point into
 * out and returns its length (1 or 2). */
size_t bpe_byte_utf8(uint8_t b, char out[2]);

/* Reads tokenizer.ggml.merges (array of "left right" strings) into v->ranks: both halves must be
 * non-empty tokens and their concatenation a token; a bad merge is an error naming its index. Needs
 * v->map. Duplicate pairs keep the first (lowest) rank. */
int bpe_load_merges(tok_vocab *v, const gguf_file *f, struct err *e);

/* Encodes one raw-text fragment (no special tokens in it): pre-tokenizer split, then merges per piece.
 * O(n log n) in the piece length. */
int bpe_encode(const tok_vocab *v, const char *text, size_t len, struct tok_out *out, struct err *e);

/* The bytes of a normal token's text with the byte mapping undone, into buf (cap bytes). Characters
 * outside the mapping are copied as they are. Returns the full length (may exceed cap). */
size_t bpe_unmap(const char *text, size_t len, char *buf, size_t cap);

#endif
