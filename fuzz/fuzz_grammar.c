/* fuzz_grammar — libFuzzer target for the structured-output compilers (constrain/): JSON Schema, regex,
 * GBNF grammar and choice front-ends, the grammar compiler, the pushdown matcher and the token masks.
 *
 * The first byte picks the kind (low 2 bits: schema, regex, grammar, choice); the rest up to the first
 * 0xFF byte is the constraint's source, what follows it is a text to match. A source the front-end accepts
 * is compiled; a compiled grammar must pass grammar_check, then the text is read byte by byte (every
 * configuration passes pda_check and survives an encode / decode round trip unchanged), and the mask of the
 * start state on stories260K's vocabulary must agree with stepping each token on its own. Errors are fine;
 * crashes, leaks, hangs and a broken invariant are not (abort()).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constraint.h"
#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "constrain/tokmask.h"
#include "gguf/gguf.h"
#include "tokenizer/tok.h"

static tok_vocab *fuzz_vocab;
static tokmask_vocab *fuzz_tv;

static void fuzz_load(void)
{
    const char *root = getenv("NIGHTSHIFT_SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", root ? root : "../shared");
    struct err e;
    gguf_file *f = NULL;
    if (gguf_open(path, &f, &e) || tok_load(f, &fuzz_vocab, &e) ||
        tokmask_vocab_init(fuzz_vocab, tok_n_vocab(fuzz_vocab), &fuzz_tv, &e)) {
        fprintf(stderr, "fuzz_grammar: %s: %s\n", path, e.msg);
        abort();
    }
    gguf_close(f);
}

/* Every configuration on the way through text is valid and round-trips through its encoding. */
static void fuzz_match(const struct grammar *g, pda_arena *a, const uint8_t *text, size_t n)
{
    struct err e;
    struct pda_config c[2], d;
    int cur = 0;
    if (pda_start(g, a, &c[0]) || pda_check(g, &c[0], &e)) abort();
    for (size_t i = 0; i < n && pda_alive(&c[cur]); i++, cur ^= 1) {
        if (pda_step(g, a, &c[cur], text[i], &c[cur ^ 1]) || pda_check(g, &c[cur ^ 1], &e)) abort();
        uint8_t buf[2048], buf2[2048];
        size_t len = pda_encode(&c[cur ^ 1], buf, sizeof buf);
        if (len > sizeof buf) continue;
        if (pda_decode(g, a, buf, len, &d, &e)) abort();
        if (pda_encode(&d, buf2, sizeof buf2) != len || memcmp(buf, buf2, len)) abort();
    }
}

/* The start state's mask equals stepping every token through the grammar on its own. */
static void fuzz_mask(const struct grammar *g, pda_arena *a)
{
    int32_t n = tokmask_n_tokens(fuzz_tv);
    uint32_t *mask = calloc((size_t)tokmask_words(fuzz_tv), sizeof *mask);
    struct pda_config start, c[2];
    if (!mask || pda_start(g, a, &start) || tokmask_compute(fuzz_tv, g, a, &start, mask, NULL)) abort();
    for (int32_t t = 0; t < n; t++) {
        int32_t len;
        int eog, ok;
        const uint8_t *b = tokmask_token(fuzz_tv, t, &len, &eog);
        if (eog) {
            ok = start.accept;
        } else {
            uint64_t m = pda_mark(a);
            int cur = 0;
            c[0] = start;
            ok = len > 0;
            for (int32_t i = 0; ok && i < len; i++, cur ^= 1) {
                if (pda_step(g, a, &c[cur], b[i], &c[cur ^ 1])) abort();
                ok = pda_alive(&c[cur ^ 1]);
            }
            pda_release(a, m);
        }
        if (ok != (int)((mask[t >> 5] >> (t & 31)) & 1)) abort();
    }
    free(mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_vocab) fuzz_load();
    if (size < 1) return 0;
    static const enum constraint_kind kinds[4] = {CONSTRAINT_JSON_SCHEMA, CONSTRAINT_REGEX, CONSTRAINT_GRAMMAR,
                                                  CONSTRAINT_CHOICE};
    enum constraint_kind k = kinds[data[0] & 3];
    const uint8_t *src = data + 1, *sep = memchr(src, 0xff, size - 1);
    size_t src_len = sep ? (size_t)(sep - src) : size - 1;
    const uint8_t *text = sep ? sep + 1 : NULL;
    size_t text_len = sep ? size - 1 - src_len - 1 : 0;
    struct err e;
    struct constraint_spec s = {0};
    if (constraint_spec_set(&s, k, (const char *)src, src_len, &e)) return 0;
    struct expr_rules r;
    struct grammar *g = NULL;
    if (constraint_spec_rules(&s, &r, &e) || expr_check(&r, &e)) abort(); /* it passed constraint_spec_set */
    if (grammar_compile(&r, &g, &e) == 0) {
        pda_arena *a;
        if (grammar_check(g, &e) || pda_arena_init(&a, &e)) abort();
        fuzz_match(g, a, text, text_len);
        if (g->n_states < 5000) fuzz_mask(g, a);
        pda_arena_free(a);
    }
    grammar_free(g);
    expr_rules_free(&r);
    constraint_spec_free(&s);
    return 0;
}
