/* test_lookup — the n-gram index of prompt-lookup decoding: proposals against a brute-force scan of the
 * tokens (longest suffix n-gram first, its most recent earlier occurrence, periodic extension), built
 * incrementally in pieces of any size, with lookup_check after every update. */
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

/* The proposal by definition: for n = 3, 2, 1 the latest p < n_tokens with tokens[p-n .. p) equal to the
 * last n tokens; the draft copies from p on, reading its own tokens past the end. */
static int32_t brute_propose(const int32_t *t, int32_t n_tokens, int32_t max, int32_t *draft, int32_t *match_n)
{
    *match_n = 0;
    for (int n = LOOKUP_MAX_N; n >= 1; n--) {
        if (n >= n_tokens) continue;
        for (int32_t p = n_tokens - 1; p >= n; p--) {
            if (memcmp(t + p - n, t + n_tokens - n, (size_t)n * sizeof *t)) continue;
            for (int32_t m = 0; m < max; m++) draft[m] = p + m < n_tokens ? t[p + m] : draft[p + m - n_tokens];
            *match_n = n;
            return max;
        }
    }
    return 0;
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
    CHECK_EQ_INT(n, 2);
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
        for (int32_t i = 0; i < N; i++) t[i] = (int32_t)(mix64((uint64_t)vi * 7777 + (uint64_t)i) % (uint64_t)vocabs[vi]);
        /* copy spans, like a completion that repeats its prompt */
        if (vocabs[vi] > 50) memcpy(t + 2000, t + 100, 500 * sizeof *t);
        lookup *ix = lookup_new();
        CHECK(ix);
        int32_t n_tokens = 0, step = 0;
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
            int32_t want = brute_propose(t, n_tokens, max, bd, &bn);
            CHECK_MSG(got == want && n == bn, "vocab %d, %d tokens: proposed %d (n %d), brute force %d (n %d)",
                      (int)vocabs[vi], (int)n_tokens, (int)got, (int)n, (int)want, (int)bn);
            CHECK(memcmp(d, bd, (size_t)got * sizeof *d) == 0);
        }
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
