/* test_lookup — the n-gram index of prompt-lookup decoding: proposals against a brute-force scan of the
 * tokens (the last proposal's source continued while the tokens follow it, else the longest suffix n-gram
 * first, its most recent earlier occurrence; periodic extension), built incrementally in pieces of any size,
 * with lookup_check after every update. */
#include "engine/lookup.h"

#include <stdint.h>

#include "test.h"

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The proposal by definition, with the last proposal's source and token count in *src and *at (-1: none):
 * while every token since then equals the one its source went on with, the copy continues; else for
 * n = 3, 2, 1 the latest p < n_tokens with tokens[p-n .. p) equal to the last n tokens. The draft copies
 * from its source on, reading its own tokens past the end. */
static int32_t brute_propose(const int32_t *t, int32_t n_tokens, int32_t max, int32_t *draft, int32_t *match_n,
                             int32_t *src, int32_t *at)
{
    *match_n = 0;
    int32_t p = -1;
    if (*src >= 0) {
        p = *src + n_tokens - *at;
        for (int32_t i = *at; i < n_tokens; i++)
            if (t[i] != t[*src + i - *at]) p = -1;
    }
    for (int n = LOOKUP_MAX_N; n >= 1 && p < 0; n--) {
        if (n >= n_tokens) continue;
        for (int32_t q = n_tokens - 1; q >= n && p < 0; q--)
            if (!memcmp(t + q - n, t + n_tokens - n, (size_t)n * sizeof *t)) p = q, *match_n = n;
    }
    *src = p, *at = p < 0 ? -1 : n_tokens;
    if (p < 0) return 0;
    for (int32_t m = 0; m < max; m++) draft[m] = p + m < n_tokens ? t[p + m] : draft[p + m - n_tokens];
    return max;
}

TEST(lookup_small_cases)
{
    struct err e;
    lookup *ix = lookup_new();
    CHECK(ix);
    int32_t d[8], n;
    /* nothing occurred before: no proposal */
    int32_t a[] = {5, 6, 7};
    CHECK(lookup_update(ix, a, 3) == 0);
    CHECK_EQ_INT(lookup_propose(ix, a, 3, 4, d, &n), 0);
    CHECK_EQ_INT(n, 0);
    lookup_free(ix);

    /* "1 2 3 9 1 2 3 4 1 2 3": 3-gram "1 2 3" last occurred before 4 (not before 9) */
    int32_t b[] = {1, 2, 3, 9, 1, 2, 3, 4, 1, 2, 3};
    ix = lookup_new();
    CHECK(lookup_update(ix, b, 11) == 0);
    CHECK(lookup_check(ix, b, &e) == 0);
    CHECK_EQ_INT(lookup_propose(ix, b, 11, 5, d, &n), 5);
    CHECK_EQ_INT(n, 3);
    int32_t want_b[] = {4, 1, 2, 3, 4}; /* runs into its own draft: 4 1 2 3, then the 4 it proposed */
    CHECK(memcmp(d, want_b, sizeof want_b) == 0);
    lookup_free(ix);

    /* only a 1-gram matches: "7 8 9 7" -> 8 9 7 8 ... */
    int32_t c[] = {7, 8, 9, 7};
    ix = lookup_new();
    CHECK(lookup_update(ix, c, 4) == 0);
    CHECK_EQ_INT(lookup_propose(ix, c, 4, 4, d, &n), 4);
    CHECK_EQ_INT(n, 1);
    int32_t want_c[] = {8, 9, 7, 8};
    CHECK(memcmp(d, want_c, sizeof want_c) == 0);
    /* a proposal needs the index up to date */
    int32_t c2[] = {7, 8, 9, 7, 8};
    CHECK_EQ_INT(lookup_propose(ix, c2, 5, 4, d, &n), 0);
    CHECK(lookup_update(ix, c2, 5) == 0);
    CHECK_EQ_INT(lookup_propose(ix, c2, 5, 2, d, &n), 2);
    CHECK_EQ_INT(n, 0); /* the 8 followed the last draft's source: the copy continues (as "7 8" would) */
    CHECK(d[0] == 9 && d[1] == 7);
    /* a run of one token extends itself */
    int32_t r[] = {4, 4};
    lookup_free(ix);
    ix = lookup_new();
    CHECK(lookup_update(ix, r, 2) == 0);
    CHECK_EQ_INT(lookup_propose(ix, r, 2, 3, d, &n), 3);
    CHECK(d[0] == 4 && d[1] == 4 && d[2] == 4 && n == 1);
    CHECK_EQ_INT(lookup_propose(ix, r, 2, 0, d, &n), 0);
    lookup_free(ix);

    /* a copy in progress keeps its source: "8 4 1 2 5 6 4 1 2 7", then "8 4" copies from the start; once
     * "1 2" followed, the 3-gram "4 1 2" last occurred before 7, but the copy goes on with 5 6 */
    int32_t s[] = {8, 4, 1, 2, 5, 6, 4, 1, 2, 7, 8, 4, 1, 2, 9};
    ix = lookup_new();
    CHECK(lookup_update(ix, s, 12) == 0);
    CHECK_EQ_INT(lookup_propose(ix, s, 12, 4, d, &n), 4);
    CHECK(n == 2 && d[0] == 1 && d[1] == 2 && d[2] == 5 && d[3] == 6);
    CHECK(lookup_update(ix, s, 14) == 0);
    CHECK_EQ_INT(lookup_propose(ix, s, 14, 3, d, &n), 3);
    CHECK(n == 0 && d[0] == 5 && d[1] == 6 && d[2] == 4);
    CHECK(lookup_check(ix, s, &e) == 0);
    /* 9 did not follow the source (5 did): the 3-gram "1 2 9" never occurred, nor "2 9"; "9" neither */
    CHECK(lookup_update(ix, s, 15) == 0);
    CHECK_EQ_INT(lookup_propose(ix, s, 15, 3, d, &n), 0);
    /* and with no proposal there is nothing to continue: "8 4 1 2 9 8" takes the 1-gram "8" afresh */
    int32_t s2[] = {8, 4, 1, 2, 5, 6, 4, 1, 2, 7, 8, 4, 1, 2, 9, 8};
    CHECK(lookup_update(ix, s2, 16) == 0);
    CHECK_EQ_INT(lookup_propose(ix, s2, 16, 2, d, &n), 2);
    CHECK(n == 1 && d[0] == 4 && d[1] == 1); /* "9 8" never occurred; "8" last did before 4 (at 11) */
    CHECK(lookup_check(ix, s2, &e) == 0);
    lookup_free(ix);
}

/* Random token streams over small vocabularies (many repeats, growth of the tables), indexed in pieces of
 * random size; every prefix's proposal equals the brute-force one. */
TEST(lookup_matches_brute_force)
{
    struct err e;
    enum { N = 3000 };
    static int32_t t[N];
    int32_t vocabs[] = {2, 5, 50, 100000};
    for (int vi = 0; vi < 4; vi++) {
        for (int32_t i = 0; i < N; i++)
            t[i] = (int32_t)(mix64((uint64_t)vi * 7777 + (uint64_t)i) % (uint64_t)vocabs[vi]);
        /* copy spans, like a completion that repeats its prompt */
        if (vocabs[vi] > 50) memcpy(t + 2000, t + 100, 500 * sizeof *t);
        lookup *ix = lookup_new();
        CHECK(ix);
        int32_t n_tokens = 0, step = 0, src = -1, at = -1, continued = 0;
        while (n_tokens < N) {
            int32_t piece = 1 + (int32_t)(mix64((uint64_t)step++) % 7);
            if (step % 50 == 0) piece = 300;
            n_tokens = n_tokens + piece > N ? N : n_tokens + piece;
            CHECK(lookup_update(ix, t, n_tokens) == 0);
            CHECK_EQ_INT(lookup_n_indexed(ix), n_tokens);
            if (step % 23 == 0) CHECK_MSG(lookup_check(ix, t, &e) == 0, "%s", e.msg);
            int32_t d[12], bd[12], n, bn;
            int32_t max = 1 + step % 12;
            int32_t got = lookup_propose(ix, t, n_tokens, max, d, &n);
            int32_t want = brute_propose(t, n_tokens, max, bd, &bn, &src, &at);
            CHECK_MSG(got == want && n == bn, "vocab %d, %d tokens: proposed %d (n %d), brute force %d (n %d)",
                      (int)vocabs[vi], (int)n_tokens, (int)got, (int)n, (int)want, (int)bn);
            CHECK(memcmp(d, bd, (size_t)got * sizeof *d) == 0);
            continued += got > 0 && n == 0;
        }
        CHECK_MSG(continued > 0, "vocab %d: no proposal continued its source", (int)vocabs[vi]);
        CHECK(lookup_check(ix, t, &e) == 0);
        lookup_free(ix);
    }
}

/* The check notices a token that changed under the index. */
TEST(lookup_check_catches_changed_tokens)
{
    struct err e;
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = i % 9;
    lookup *ix = lookup_new();
    CHECK(lookup_update(ix, t, 64) == 0);
    CHECK(lookup_check(ix, t, &e) == 0);
    t[30] = 1000;
    CHECK(lookup_check(ix, t, &e) != 0);
    CHECK(strstr(e.msg, "lookup_check") != NULL);
    lookup_free(ix);
}

int main(void)
{
    RUN(lookup_small_cases);
    RUN(lookup_matches_brute_force);
    RUN(lookup_check_catches_changed_tokens);
    return test_summary();
}
