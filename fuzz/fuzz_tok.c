/* fuzz_tok — libFuzzer target for the tokenizers.
 *
 * Loads the gpt-2 (byte-level BPE) and llama-spm (SentencePiece) vocabs once, from $NIGHTSHIFT_SHARED or
 * ../shared. The first byte of an input picks the vocab and parse_special (low two bits; so every input is
 * one encode + decode and the fuzzer runs 4x more of them), the rest is the text; it is encoded, then
 * decoded (whole and through the streaming UTF-8 decoder); decoding must give back the input exactly where the tokenizer promises it
 * (gpt-2 always, rendering specials; llama-spm with parse_special off, unless the input holds U+2581,
 * SentencePiece's visible space, which decodes to " "). An input starting with "GGUF" is
 * also opened as a GGUF file and, if valid, loaded as a vocab and used to encode a fixed text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tok.h"
#include "util/log.h"

static tok_vocab *fuzz_vocab[2];

static tok_vocab *fuzz_load(const char *name)
{
    const char *root = getenv("NIGHTSHIFT_SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/testdata/vocab/ggml-vocab-%s.gguf", root ? root : "../shared", name);
    struct err e;
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(path, &f, &e) || tok_load(f, &v, &e)) {
        fprintf(stderr, "fuzz_tok: %s: %s\n", path, e.msg);
        abort();
    }
    gguf_close(f);
    return v;
}

static void fuzz_check_stream(const tok_vocab *v, const int32_t *ids, size_t n, const char *whole, size_t whole_len)
{
    struct tok_utf8 st = {{0}, 0};
    char *out = malloc(whole_len + 16), piece[1024];
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int m = tok_token_bytes(v, ids[i], 1, piece, sizeof piece);
        if (m < 0 || (size_t)m > sizeof piece) abort();
        w += tok_utf8_feed(&st, piece, (size_t)m, out + w, whole_len + 16 - w);
    }
    w += tok_utf8_flush(&st, out + w, whole_len + 16 - w);
    /* the stream is the concatenation of all pieces (no leading-space rule): never longer than whole + 1 */
    if (w > whole_len + 1) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_vocab[0]) {
        log_set_level(LOG_QUIET);
        fuzz_vocab[0] = fuzz_load("gpt-2");
        fuzz_vocab[1] = fuzz_load("llama-spm");
    }
    if (size == 0) return 0;
    int k = data[0] & 1, special = data[0] >> 1 & 1;
    const char *text = (const char *)data + 1;
    size_t len_in = size - 1;
    /* SentencePiece shows spaces as U+2581, so that character itself decodes to a space */
    int has_ws_mark = len_in >= 3 && memmem(text, len_in, "\xe2\x96\x81", 3) != NULL;
    {
        const tok_vocab *v = fuzz_vocab[k];
        struct err e;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(v, text, len_in, special, special, &ids, &n, &e)) abort(); /* never fails on text */
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) abort();
        char *out = NULL;
        size_t len = 0;
        if (tok_decode_ex(v, ids, n, special, &out, &len, &e)) abort();
        int exact = k == 0 || (!special && !has_ws_mark);
        size_t skip = special && n > 0 && ids[0] == tok_bos(v); /* the added BOS */
        if (exact && !skip && (len != len_in || memcmp(out, text, len_in) != 0)) abort();
        if (exact && skip) {
            const char *b = tok_piece(v, tok_bos(v));
            size_t bl = strlen(b);
            if (len != bl + len_in || memcmp(out, b, bl) != 0 || memcmp(out + bl, text, len_in) != 0) abort();
        }
        fuzz_check_stream(v, ids, n, out, len);
        free(out);
        free(ids);
    }
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) { /* a hostile vocab */
        struct err e;
        gguf_file *f = NULL;
        tok_vocab *v = NULL;
        if (gguf_open_memory(data, size, &f, &e) == 0 && tok_load(f, &v, &e) == 0) {
            static const char probe[] = "Hello, world! 123 <s> <|endoftext|> \xc3\xa9\xff";
            int32_t *ids = NULL;
            size_t n = 0;
            if (tok_check(v, &e)) abort();
            if (tok_encode(v, probe, sizeof probe - 1, 1, 1, &ids, &n, &e) == 0) {
                char *out = NULL;
                if (tok_decode_ex(v, ids, n, 1, &out, NULL, &e)) abort();
                free(out);
            }
            free(ids);
        }
        tok_free(v);
        gguf_close(f);
    }
    return 0;
}
