/* test_constraint — constraints at the token level on real vocabularies (gpt-2 and llama-spm from
 * ../shared/testdata/vocab, SmolLM2 when models/ has it):
 *
 *   - every mask equals the brute force (each token's bytes stepped through the automaton on its own;
 *     end-of-generation tokens iff the state accepts), at every state along a tokenized valid document;
 *   - the tokens of a valid document are each allowed, and the end state accepts;
 *   - specs: canonical text, errors that name the problem, failures remembered by the cache;
 *   - a mask cache too small for the work evicts and still gives the same masks;
 *   - compile and first-mask times for a typical schema (reported, not asserted). */
#include "constrain/constraint.h"

#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "constrain/tokmask.h"
#include "gguf/gguf.h"
#include "test.h"
#include "util/clock.h"

static const char *const SCHEMA = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                                  "\"maxLength\":40},\"age\":{\"type\":\"integer\","
                                  "\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\",\"format\":"
                                  "\"email\"},\"tags\":{\"type\":\"array\","
                                  "\"items\":{\"type\":\"string\"},\"maxItems\":4},\"mood\":{\"enum\":["
                                  "\"happy\",\"sad\",\"neutral\"]},\"address\":"
                                  "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                                  "\"zip\":{\"type\":\"string\",\"pattern\":"
                                  "\"^[0-9]{5}$\"}},\"required\":[\"city\"]}},\"required\":[\"name\",\"age\","
                                  "\"mood\"],\"additionalProperties\":false}";

static const char *const DOC =
    "{\"name\": \"Ann \\\"Lee\\\" \xc3\xa9t\xc3\xa9\", \"age\": 42, \"email\": \"ann@example.com\", "
    "\"tags\": [\"a b\", \"c\"],"
    " \"mood\": \"happy\", \"address\": {\"city\": \"Paris\", \"zip\": \"75001\"}}";

static tok_vocab *load_vocab(const char *path)
{
    struct err e;
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(path, &f, &e) || tok_load(f, &v, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        v = NULL;
    }
    gguf_close(f);
    return v;
}

/* The brute-force mask of a state: each token stepped through the grammar byte by byte. */
static int brute_mask(const tok_vocab *v, int32_t n_tokens, const struct grammar *g,
                      const struct constraint_state *st, uint32_t *mask)
{
    struct err e;
    pda_arena *a;
    if (pda_arena_init(&a, &e)) return -1;
    struct pda_config start;
    if (pda_decode(g, a, st->bytes, st->len, &start, &e)) return -1;
    memset(mask, 0, (size_t)(n_tokens + 31) / 32 * 4);
    char buf[TOKMASK_MAX_TOKEN_BYTES];
    for (int32_t t = 0; t < n_tokens; t++) {
        int ok;
        if (tok_is_eog(v, t)) {
            ok = start.accept;
        } else {
            int n = tok_token_bytes(v, t, 0, buf, sizeof buf);
            uint64_t m = pda_mark(a);
            struct pda_config c[2];
            c[0] = start;
            int cur = 0;
            ok = n > 0 && n <= (int)sizeof buf;
            for (int i = 0; ok && i < n; i++, cur ^= 1) {
                pda_step(g, a, &c[cur], (uint8_t)buf[i], &c[cur ^ 1]);
                ok = pda_alive(&c[cur ^ 1]);
            }
            pda_release(a, m);
        }
        if (ok) mask[t >> 5] |= 1u << (t & 31);
    }
    pda_arena_free(a);
    return 0;
}

static struct grammar *grammar_of(const struct constraint_spec *s)
{
    struct err e;
    struct expr_rules r;
    struct grammar *g = NULL;
    if (constraint_spec_rules(s, &r, &e) || grammar_compile(&r, &g, &e))
        fprintf(stderr, "grammar: %s\n", e.msg);
    expr_rules_free(&r);
    return g;
}

/* Tokenizes doc, walks it through the constraint checking each mask against the brute force (at the first
 * `n_brute` states) and that each token is allowed; the end state must accept. */
static void walk_document(const char *vocab_path, enum constraint_kind kind, const char *src, const char *doc,
                          int n_brute)
{
    struct err e;
    tok_vocab *v = load_vocab(vocab_path);
    CHECK_MSG(v, "cannot load %s", vocab_path);
    int32_t n_tokens = tok_n_vocab(v);
    struct constraint_spec s = {0};
    CHECK_MSG(constraint_spec_set(&s, kind, src, strlen(src), &e) == 0, "%s", e.msg);
    struct grammar *g = grammar_of(&s);
    CHECK(g);
    constraint_cache *cc;
    CHECK_MSG(constraint_cache_init(v, n_tokens, 0, &cc, &e) == 0, "%s", e.msg);
    constraint *k;
    CHECK_MSG(constraint_acquire(cc, &s, &k, &e) == 0, "%s", e.msg);
    int32_t *ids;
    size_t n_ids;
    CHECK(tok_encode(v, doc, strlen(doc), 0, 0, &ids, &n_ids, &e) == 0);
    struct constraint_state st;
    CHECK(constraint_state_start(cc, k, &st, &e) == 0);
    uint32_t *brute = malloc((size_t)(n_tokens + 31) / 32 * 4);
    for (size_t i = 0; i < n_ids; i++) {
        const uint32_t *mask;
        CHECK_MSG(constraint_mask(cc, k, &st, &mask, &e) == 0, "%s", e.msg);
        if ((int)i < n_brute) {
            CHECK(brute_mask(v, n_tokens, g, &st, brute) == 0);
            for (int32_t w = 0; w < (n_tokens + 31) / 32; w++)
                CHECK_MSG(brute[w] == mask[w],
                          "%s: mask differs from brute force at token %zu, word %d: %08x vs %08x", vocab_path,
                          i, w, mask[w], brute[w]);
        }
        int32_t t = ids[i];
        CHECK_MSG((mask[t >> 5] >> (t & 31)) & 1, "%s: token %zu (%d '%s') of the document is masked",
                  vocab_path, i, t, tok_piece(v, t));
        CHECK_MSG(constraint_advance(cc, k, &st, t, &e) == 0, "%s: advance by token %zu: %s", vocab_path, i,
                  e.msg);
    }
    CHECK(st.accept);
    CHECK_MSG(constraint_cache_check(cc, &e) == 0, "%s", e.msg);
    free(brute);
    free(ids);
    constraint_state_free(&st);
    constraint_release(cc, k);
    constraint_cache_free(cc);
    constraint_spec_free(&s);
    grammar_free(g);
    tok_free(v);
}

TEST(masks_match_brute_force_gpt2)
{
    walk_document(test_shared("testdata/vocab/ggml-vocab-gpt-2.gguf"), CONSTRAINT_JSON_SCHEMA, SCHEMA, DOC,
                  12);
}

TEST(masks_match_brute_force_llama_spm)
{
    walk_document(test_shared("testdata/vocab/ggml-vocab-llama-spm.gguf"), CONSTRAINT_JSON_SCHEMA, SCHEMA,
                  DOC, 12);
}

TEST(masks_match_brute_force_smollm2)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) SKIP("%s not found", path);
    walk_document(path, CONSTRAINT_JSON_SCHEMA, SCHEMA, DOC, 6);
    walk_document(path, CONSTRAINT_JSON_OBJECT, "", "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}", 4);
    walk_document(path, CONSTRAINT_REGEX, "(\\d{3}-){2}\\d{4}", "555-123-4567", 4);
    walk_document(path, CONSTRAINT_CHOICE, "[\"positive\",\"negative\",\"neutral\"]", "neutral", 3);
    walk_document(path, CONSTRAINT_GRAMMAR, "root ::= \"yes\" | \"no\" | \"maybe (\" [a-z ]+ \")\"",
                  "maybe (not sure)", 4);
}

TEST(specs_are_canonical_and_checked)
{
    struct err e;
    struct constraint_spec a = {0}, b = {0};
    CHECK(constraint_spec_set(&a, CONSTRAINT_JSON_SCHEMA, "{ \"type\" : \"string\" }", 21, &e) == 0);
    CHECK_STR(a.text, "{\"type\":\"string\"}");
    CHECK(constraint_spec_set(&b, CONSTRAINT_CHOICE, "[ \"a\", \"b\" ]", 12, &e) == 0);
    CHECK_STR(b.text, "[\"a\",\"b\"]");
    /* failures leave the spec as it was */
    CHECK(constraint_spec_set(&a, CONSTRAINT_JSON_SCHEMA, "{\"oneOf\":[]}", 12, &e) != 0);
    CHECK_MSG(strstr(e.msg, "'oneOf'"), "%s", e.msg);
    CHECK_STR(a.text, "{\"type\":\"string\"}");
    CHECK(constraint_spec_set(&b, CONSTRAINT_CHOICE, "[]", 2, &e) != 0);
    CHECK(constraint_spec_set(&b, CONSTRAINT_CHOICE, "[1]", 3, &e) != 0);
    CHECK(constraint_spec_set(&b, CONSTRAINT_REGEX, "a(b", 3, &e) != 0);
    CHECK_MSG(strstr(e.msg, "unclosed"), "%s", e.msg);
    CHECK(constraint_spec_set(&b, CONSTRAINT_GRAMMAR, "root ::= x", 10, &e) != 0);
    CHECK(constraint_spec_set(&b, CONSTRAINT_JSON_SCHEMA, "{not json", 9, &e) != 0);
    CHECK_STR(b.text, "[\"a\",\"b\"]");
    constraint_spec_free(&a);
    constraint_spec_free(&b);
}

/* A compile failure past the front-end (an automaton too large) is remembered: the same message again. */
TEST(compile_failures_are_remembered)
{
    struct err e;
    tok_vocab *v = load_vocab(test_shared("testdata/vocab/ggml-vocab-gpt-2.gguf"));
    CHECK(v);
    constraint_cache *cc;
    CHECK(constraint_cache_init(v, tok_n_vocab(v), 0, &cc, &e) == 0);
    struct constraint_spec s = {0};
    CHECK(constraint_spec_set(&s, CONSTRAINT_REGEX, "((a{1000}){1000}){1000}", 23, &e) == 0);
    constraint *k;
    CHECK(constraint_acquire(cc, &s, &k, &e) != 0);
    CHECK_MSG(strstr(e.msg, "too large"), "%s", e.msg);
    CHECK(constraint_acquire(cc, &s, &k, &e) != 0);
    struct constraint_stats st;
    constraint_cache_stats(cc, &st);
    CHECK_EQ_INT(st.compile_failed, 1);
    constraint_spec_free(&s);
    constraint_cache_free(cc);
    tok_free(v);
}

/* With room for 16 masks only, walking two documents evicts and recomputes; every mask still matches one
 * computed by a roomy cache. */
TEST(small_mask_cache_evicts_same_masks)
{
    struct err e;
    tok_vocab *v = load_vocab(test_shared("testdata/vocab/ggml-vocab-gpt-2.gguf"));
    CHECK(v);
    int32_t n = tok_n_vocab(v), words = (n + 31) / 32;
    constraint_cache *small, *big;
    CHECK(constraint_cache_init(v, n, 1, &small, &e) == 0 && constraint_cache_init(v, n, 0, &big, &e) == 0);
    struct constraint_spec s = {0};
    CHECK(constraint_spec_set(&s, CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &e) == 0);
    constraint *ks, *kb;
    CHECK(constraint_acquire(small, &s, &ks, &e) == 0 && constraint_acquire(big, &s, &kb, &e) == 0);
    int32_t *ids;
    size_t n_ids;
    CHECK(tok_encode(v, DOC, strlen(DOC), 0, 0, &ids, &n_ids, &e) == 0);
    for (int pass = 0; pass < 2; pass++) {
        struct constraint_state a, b;
        CHECK(constraint_state_start(small, ks, &a, &e) == 0 && constraint_state_start(big, kb, &b, &e) == 0);
        for (size_t i = 0; i < n_ids; i++) {
            const uint32_t *ma, *mb;
            CHECK(constraint_mask(small, ks, &a, &ma, &e) == 0);
            uint32_t copy[2048];
            CHECK(words <= 2048);
            memcpy(copy, ma, (size_t)words * 4);
            CHECK(constraint_mask(big, kb, &b, &mb, &e) == 0);
            CHECK_MSG(!memcmp(copy, mb, (size_t)words * 4), "masks differ at token %zu", i);
            CHECK(constraint_advance(small, ks, &a, ids[i], &e) == 0 &&
                  constraint_advance(big, kb, &b, ids[i], &e) == 0);
        }
        constraint_state_free(&a);
        constraint_state_free(&b);
    }
    struct constraint_stats st;
    constraint_cache_stats(small, &st);
    CHECK(st.mask_evictions > 0);
    CHECK_MSG(constraint_cache_check(small, &e) == 0, "%s", e.msg);
    free(ids);
    constraint_spec_free(&s);
    constraint_cache_free(small);
    constraint_cache_free(big);
    tok_free(v);
}

/* A token that the state does not allow is refused and leaves the state alone; an EOG token only where the
 * state accepts; after completion nothing more. */
TEST(advance_refuses_and_completes)
{
    struct err e;
    tok_vocab *v = load_vocab(test_shared("testdata/vocab/ggml-vocab-gpt-2.gguf"));
    CHECK(v);
    constraint_cache *cc;
    CHECK(constraint_cache_init(v, tok_n_vocab(v), 0, &cc, &e) == 0);
    struct constraint_spec s = {0};
    CHECK(constraint_spec_set(&s, CONSTRAINT_CHOICE, "[\"yes\",\"no\"]", 12, &e) == 0);
    constraint *k;
    CHECK(constraint_acquire(cc, &s, &k, &e) == 0);
    struct constraint_state st;
    CHECK(constraint_state_start(cc, k, &st, &e) == 0);
    CHECK(!st.accept);
    int32_t yes = tok_find_piece(v, "yes", 3), no = tok_find_piece(v, "no", 2), eot = tok_eos(v);
    CHECK(yes >= 0 && no >= 0);
    if (eot >= 0 && tok_is_eog(v, eot)) CHECK_EQ_INT(constraint_advance(cc, k, &st, eot, &e), 1);
    uint32_t len = st.len;
    CHECK_EQ_INT(constraint_advance(cc, k, &st, tok_find_piece(v, "maybe", 5), &e), 1);
    CHECK_EQ_INT(st.len, len);
    CHECK_EQ_INT(constraint_advance(cc, k, &st, no, &e), 0);
    CHECK(st.accept && st.complete);
    CHECK_EQ_INT(constraint_advance(cc, k, &st, yes, &e), 1);
    constraint_state_free(&st);
    constraint_release(cc, k);
    constraint_spec_free(&s);
    constraint_cache_free(cc);
    tok_free(v);
}

/* Masks computed ahead on the worker equal the ones computed in place; a state already cached or listed
 * twice is computed once; finish without start does nothing. */
TEST(prefetch_matches_in_place)
{
    struct err e;
    tok_vocab *v = load_vocab(test_shared("testdata/vocab/ggml-vocab-gpt-2.gguf"));
    CHECK(v);
    int32_t n = tok_n_vocab(v), words = (n + 31) / 32;
    constraint_cache *pre, *sync;
    CHECK(constraint_cache_init(v, n, 0, &pre, &e) == 0 && constraint_cache_init(v, n, 0, &sync, &e) == 0);
    CHECK(constraint_prefetch_finish(pre, &e) == 0);
    struct constraint_spec s = {0};
    CHECK(constraint_spec_set(&s, CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &e) == 0);
    constraint *kp, *ks;
    CHECK(constraint_acquire(pre, &s, &kp, &e) == 0 && constraint_acquire(sync, &s, &ks, &e) == 0);
    int32_t *ids;
    size_t n_ids;
    CHECK(tok_encode(v, DOC, strlen(DOC), 0, 0, &ids, &n_ids, &e) == 0);
    enum { K = 8 };
    struct constraint_state st[K], sy[K];
    constraint *kk[K];
    const struct constraint_state *ptr[K];
    for (int j = 0; j < K; j++) { /* state j: after the first 3 * j tokens; states 6 and 7 repeat 5 */
        int upto = 3 * (j < 6 ? j : 5);
        CHECK(constraint_state_start(pre, kp, &st[j], &e) == 0 && constraint_state_start(sync, ks, &sy[j], &e) == 0);
        for (int i = 0; i < upto && i < (int)n_ids; i++)
            CHECK(constraint_advance(pre, kp, &st[j], ids[i], &e) == 0 &&
                  constraint_advance(sync, ks, &sy[j], ids[i], &e) == 0);
        kk[j] = kp;
        ptr[j] = &st[j];
    }
    const uint32_t *m;
    CHECK(constraint_mask(pre, kp, &st[0], &m, &e) == 0); /* already cached: not computed again */
    CHECK(constraint_prefetch_start(pre, K, kk, ptr, &e) == 0);
    CHECK_MSG(constraint_prefetch_finish(pre, &e) == 0, "%s", e.msg);
    struct constraint_stats cs;
    constraint_cache_stats(pre, &cs);
    CHECK_EQ_INT(cs.masks_prefetched, 5);
    CHECK_EQ_INT(cs.masks_computed, 6);
    for (int j = 0; j < K; j++) {
        const uint32_t *a, *b;
        CHECK(constraint_mask(pre, kp, &st[j], &a, &e) == 0);
        uint32_t copy[2048];
        CHECK(words <= 2048);
        memcpy(copy, a, (size_t)words * 4);
        CHECK(constraint_mask(sync, ks, &sy[j], &b, &e) == 0);
        CHECK_MSG(!memcmp(copy, b, (size_t)words * 4), "state %d: prefetched mask differs", j);
        constraint_state_free(&st[j]);
        constraint_state_free(&sy[j]);
    }
    constraint_cache_stats(pre, &cs);
    CHECK_EQ_INT(cs.masks_computed, 6); /* every lookup above was a hit */
    CHECK_MSG(constraint_cache_check(pre, &e) == 0, "%s", e.msg);
    free(ids);
    constraint_release(pre, kp);
    constraint_release(sync, ks);
    constraint_spec_free(&s);
    constraint_cache_free(pre);
    constraint_cache_free(sync);
    tok_free(v);
}

/* Compile time (front-end + automaton + vocabulary index) and the cost of the first masks of a typical
 * extraction schema on SmolLM2's 49k vocabulary: reported for bench/NOTES.md. */
TEST(compile_time_smollm2)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) SKIP("%s not found", path);
    struct err e;
    tok_vocab *v = load_vocab(path);
    CHECK(v);
    double t0 = clock_now();
    constraint_cache *cc;
    CHECK(constraint_cache_init(v, tok_n_vocab(v), 0, &cc, &e) == 0);
    double t1 = clock_now();
    struct constraint_spec s = {0};
    CHECK(constraint_spec_set(&s, CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &e) == 0);
    constraint *k;
    CHECK(constraint_acquire(cc, &s, &k, &e) == 0);
    double t2 = clock_now();
    struct constraint_state st;
    const uint32_t *mask;
    CHECK(constraint_state_start(cc, k, &st, &e) == 0 && constraint_mask(cc, k, &st, &mask, &e) == 0);
    double t3 = clock_now();
    fprintf(stderr,
            "# smollm2 (%d tokens): vocabulary index %.1f ms, schema compile %.1f ms, first mask %.2f ms\n",
            tok_n_vocab(v), (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
    /* the masks along a whole document (string contents are the expensive states) */
    int32_t *ids;
    size_t n_ids;
    CHECK(tok_encode(v, DOC, strlen(DOC), 0, 0, &ids, &n_ids, &e) == 0);
    for (size_t i = 0; i < n_ids; i++)
        CHECK(constraint_advance(cc, k, &st, ids[i], &e) == 0 && constraint_mask(cc, k, &st, &mask, &e) == 0);
    free(ids);
    struct constraint_stats cs;
    constraint_cache_stats(cc, &cs);
    fprintf(stderr, "# document of %zu tokens: %lld masks in %.1f ms (%.0f trie nodes each)\n", n_ids,
            (long long)cs.masks_computed, cs.t_masks * 1e3, (double)cs.nodes_visited / (double)cs.masks_computed);
    constraint_state_free(&st);
    constraint_release(cc, k);
    constraint_spec_free(&s);
    constraint_cache_free(cc);
    tok_free(v);
}

int main(void)
{
    RUN(masks_match_brute_force_gpt2);
    RUN(masks_match_brute_force_llama_spm);
    RUN(masks_match_brute_force_smollm2);
    RUN(specs_are_canonical_and_checked);
    RUN(compile_failures_are_remembered);
    RUN(small_mask_cache_evicts_same_masks);
    RUN(advance_refuses_and_completes);
    RUN(prefetch_matches_in_place);
    RUN(compile_time_smollm2);
    return test_summary();
}
