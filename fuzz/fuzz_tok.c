/* fuzz_tok — libFuzzer target for the tokenizers and the pre-tokenizers they use.
 *
 * Loads every vocabulary in testdata/vocab (ggml-vocab-*.gguf) once, from $NIGHTSHIFT_SHARED or ../shared:
 * SentencePiece and byte-level BPE with each pre-tokenizer those files name. Byte 0 of an input picks the
 * vocab (bits 1-7, modulo their number) and parse_special (bit 0); the rest is the text. It is encoded (ids
 * inside the vocab), then decoded (whole and through the streaming UTF-8 decoder); decoding must give back
 * the input exactly where the tokenizer promises it (byte-level BPE always, rendering specials, for texts of
 * bytes the vocab has tokens for, see fuzz_probe_bytes; SentencePiece with parse_special off, unless the
 * input holds U+2581, its visible space, which decodes to " ", or a user-defined token's text). An input
 * starting with "GGUF" is also opened as a GGUF file and, if valid, loaded as a vocab and used to encode a
 * fixed text.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tok.h"
#include "util/log.h"

enum { FUZZ_MAX_VOCABS = 32 };
static tok_vocab *fuzz_vocab[FUZZ_MAX_VOCABS];
static uint8_t fuzz_byte_ok[FUZZ_MAX_VOCABS][256]; /* a byte on its own encodes and decodes back */
static int fuzz_n_vocab;

/* Which bytes round-trip on their own. A byte-level vocab may lack the tokens of bytes its training text
 * never held: deepseek-llm maps C0, C1, F5..FF (never in valid UTF-8) to another token; falcon has no token
 * for 17 control bytes (03..05, 0B, 11, 13..17, 19, 1C..1E) and F2, and encodes them to nothing. Exact round
 * trips are promised for texts made of bytes that round-trip. */
static void fuzz_probe_bytes(const tok_vocab *v, uint8_t *ok)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b, *out = NULL;
        int32_t *ids = NULL;
        size_t n = 0, len = 0;
        struct err e;
        ok[b] = tok_encode(v, &c, 1, 0, 0, &ids, &n, &e) == 0 && tok_decode_ex(v, ids, n, 0, &out, &len, &e) == 0 &&
                len == 1 && out[0] == c;
        free(ids);
        free(out);
    }
}

/* SentencePiece: the user-defined tokens of each vocab (matched in text even without parse_special, and then
 * followed by the space prefix a text fragment gets, as llama.cpp does: phi-3's "</s>" decodes as "</s> "). */
enum { FUZZ_MAX_USER = 256 };
static const char *fuzz_user[FUZZ_MAX_VOCABS][FUZZ_MAX_USER];
static int fuzz_n_user[FUZZ_MAX_VOCABS];

static void fuzz_find_user_tokens(const tok_vocab *v, int k)
{
    for (int32_t id = 0; id < tok_n_vocab(v) && fuzz_n_user[k] < FUZZ_MAX_USER; id++)
        if (tok_token_type(v, id) == 4) fuzz_user[k][fuzz_n_user[k]++] = tok_piece(v, id);
}

static int fuzz_has_user_token(int k, const char *text, size_t n)
{
    for (int i = 0; i < fuzz_n_user[k]; i++) {
        size_t m = strlen(fuzz_user[k][i]);
        if (m && memmem(text, n, fuzz_user[k][i], m)) return 1;
    }
    return 0;
}

static int fuzz_bytes_ok(int k, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!fuzz_byte_ok[k][(unsigned char)text[i]]) return 0;
    return 1;
}

static int fuzz_cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every ggml-vocab-*.gguf of the shared folder, in name order (so an input means the same vocab each run). */
static void fuzz_load_all(void)
{
    const char *root = getenv("NIGHTSHIFT_SHARED");
    char dir[4096], path[8192];
    snprintf(dir, sizeof dir, "%s/testdata/vocab", root ? root : "../shared");
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_tok: %s: cannot open\n", dir);
        abort();
    }
    char *names[FUZZ_MAX_VOCABS];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < FUZZ_MAX_VOCABS) {
        size_t len = strlen(de->d_name);
        if (!strncmp(de->d_name, "ggml-vocab-", 11) && len > 5 && !strcmp(de->d_name + len - 5, ".gguf"))
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, fuzz_cmp_names);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct err e;
        gguf_file *f = NULL;
        tok_vocab *v = NULL;
        if (gguf_open(path, &f, &e) || tok_load(f, &v, &e)) {
            fprintf(stderr, "fuzz_tok: %s: %s\n", path, e.msg);
            abort();
        }
        gguf_close(f);
        fuzz_probe_bytes(v, fuzz_byte_ok[fuzz_n_vocab]);
        if (tok_get_kind(v) == TOK_KIND_SPM) fuzz_find_user_tokens(v, fuzz_n_vocab);
        fuzz_vocab[fuzz_n_vocab++] = v;
        free(names[i]);
    }
    if (!fuzz_n_vocab) {
        fprintf(stderr, "fuzz_tok: no vocab in %s\n", dir);
        abort();
    }
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
    if (!fuzz_n_vocab) {
        log_set_level(LOG_QUIET);
        fuzz_load_all();
    }
    if (size == 0) return 0;
    int k = (data[0] >> 1) % fuzz_n_vocab, special = data[0] & 1;
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
        int exact = tok_get_kind(v) == TOK_KIND_BPE ? fuzz_bytes_ok(k, text, len_in)
                                                    : !special && !has_ws_mark && !fuzz_has_user_token(k, text, len_in);
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
