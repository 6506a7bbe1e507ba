/* test_sampler — the sampler (greedy, temperature, top-k/top-p/min-p, penalties, logit bias, RNG
 * determinism) on hand-made logits, and stop_scan (stop strings across token boundaries). */
#include <math.h>
#include <string.h>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "test.h"

#define NV 8

static sampler *mk(struct sampler_params p)
{
    sampler *s = NULL;
    struct err e;
    if (sampler_init(&p, NV, &s, &e)) return NULL;
    return s;
}

/* Counts draws per token over n samples of fixed logits. */
static void histogram(sampler *s, const float *logits, int n, int *counts)
{
    memset(counts, 0, NV * sizeof *counts);
    for (int i = 0; i < n; i++) {
        float l[NV];
        memcpy(l, logits, sizeof l);
        int32_t t = sampler_sample(s, l);
        if (t >= 0 && t < NV) counts[t]++;
    }
}

TEST(test_greedy_and_ties)
{
    struct sampler_params p = sampler_default_params();
    sampler *s = mk(p);
    CHECK(s);
    float l1[NV] = {0, 3, 1, 3, -2, 0, 3, 1};
    CHECK_EQ_INT(sampler_sample(s, l1), 1); /* lowest id among the tied maxima */
    float l2[NV] = {NAN, -1, -INFINITY, 5, 5.0001f, 0, 0, 0};
    CHECK_EQ_INT(sampler_sample(s, l2), 4);
    float l3[NV] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(sampler_sample(s, l3), 0);
    CHECK(sampler_check(s, NULL) == 0);
    sampler_free(s);
}

TEST(test_seed_determinism)
{
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 7;
    float base[NV] = {1, 2, 0.5f, 1.5f, 0, 2, 1, 0.2f};
    int32_t a[64], b[64], c[64];
    sampler *s1 = mk(p), *s2 = mk(p);
    p.seed = 8;
    sampler *s3 = mk(p);
    CHECK(s1 && s2 && s3);
    for (int i = 0; i < 64; i++) {
        float l[NV];
        memcpy(l, base, sizeof l);
        a[i] = sampler_sample(s1, l);
        memcpy(l, base, sizeof l);
        b[i] = sampler_sample(s2, l);
        memcpy(l, base, sizeof l);
        c[i] = sampler_sample(s3, l);
    }
    sampler_free(s1);
    sampler_free(s2);
    sampler_free(s3);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* all draws are valid ids and not all the same */
    int distinct = 0;
    for (int t = 0; t < NV; t++) {
        int seen = 0;
        for (int i = 0; i < 64; i++) seen |= a[i] == t;
        distinct += seen;
    }
    CHECK(distinct >= 4);
}

TEST(test_temperature_distribution)
{
    /* logits ln(1), ln(2), ln(3), ln(4) and -inf elsewhere: probabilities 0.1, 0.2, 0.3, 0.4 at T = 1 */
    float l[NV] = {0, logf(2), logf(3), logf(4), -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 123;
    sampler *s = mk(p);
    CHECK(s);
    int counts[NV];
    histogram(s, l, 20000, counts);
    sampler_free(s);
    CHECK(counts[4] + counts[5] + counts[6] + counts[7] == 0);
    for (int t = 0; t < 4; t++) {
        double want = 0.1 * (t + 1) * 20000;
        CHECK_MSG(fabs(counts[t] - want) < 0.08 * want + 60, "token %d drawn %d times, want ~%.0f", t, counts[t], want);
    }
    /* a low temperature concentrates on the best */
    p.temperature = 0.05f;
    s = mk(p);
    CHECK(s);
    histogram(s, l, 2000, counts);
    sampler_free(s);
    CHECK(counts[3] > 1990);
}

TEST(test_top_k_top_p_min_p)
{
    float l[NV] = {0, logf(2), logf(3), logf(4), -INFINITY, -INFINITY, -INFINITY, -INFINITY}; /* p .1 .2 .3 .4 */
    int counts[NV];
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 5;
    /* top-k 2: only tokens 3 and 2, in ratio 4:3 */
    p.top_k = 2;
    sampler *s = mk(p);
    CHECK(s);
    histogram(s, l, 7000, counts);
    sampler_free(s);
    CHECK(counts[0] == 0 && counts[1] == 0);
    CHECK(abs(counts[3] - 4000) < 250 && abs(counts[2] - 3000) < 250);
    /* top-k 1 = greedy */
    p.top_k = 1;
    s = mk(p);
    histogram(s, l, 500, counts);
    sampler_free(s);
    CHECK_EQ_INT(counts[3], 500);
    /* top-p 0.65: smallest prefix with mass >= 0.65 is {3 (.4), 2 (.3)} */
    p.top_k = 0;
    p.top_p = 0.65f;
    s = mk(p);
    histogram(s, l, 7000, counts);
    sampler_free(s);
    CHECK(counts[0] == 0 && counts[1] == 0 && counts[2] > 2500 && counts[3] > 3500);
    /* top-p 0.75: adds token 1 (.4 + .3 = .7 < .75) */
    p.top_p = 0.75f;
    s = mk(p);
    histogram(s, l, 9000, counts);
    sampler_free(s);
    CHECK(counts[0] == 0 && counts[1] > 1500);
    /* min-p 0.5: keep p >= 0.5 * 0.4 = 0.2: tokens 1, 2, 3 */
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    s = mk(p);
    histogram(s, l, 9000, counts);
    sampler_free(s);
    CHECK(counts[0] == 0 && counts[1] > 1500 && counts[2] > 2500 && counts[3] > 3500);
    /* min-p 0.8: keep p >= 0.32: token 3 only */
    p.min_p = 0.8f;
    s = mk(p);
    histogram(s, l, 500, counts);
    sampler_free(s);
    CHECK_EQ_INT(counts[3], 500);
}

TEST(test_repeat_penalty)
{
    struct sampler_params p = sampler_default_params();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    sampler *s = mk(p);
    CHECK(s);
    /* history 1, 1, 2, 5: window of 3 holds 1, 2, 5 (the first 1 fell out but the second is in) */
    sampler_accept(s, 1, 0);
    sampler_accept(s, 1, 0);
    sampler_accept(s, 2, 1);
    sampler_accept(s, 5, 1);
    CHECK(sampler_check(s, NULL) == 0);
    /* positive logits are divided, negative multiplied, each distinct token once */
    float l[NV] = {1.0f, 4.0f, -1.0f, 3.5f, 0, 3.9f, 0, 0};
    CHECK_EQ_INT(sampler_sample(s, l), 3);
    CHECK(l[1] == 2.0f && l[2] == -2.0f && l[5] == 1.95f && l[3] == 3.5f && l[0] == 1.0f);
    /* token 1 leaves the window after three more tokens */
    sampler_accept(s, 0, 1);
    sampler_accept(s, 0, 1);
    sampler_accept(s, 0, 1);
    float l2[NV] = {-1.0f, 4.0f, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(sampler_sample(s, l2), 1);
    CHECK(l2[1] == 4.0f && l2[0] == -2.0f);
    sampler_free(s);
}

TEST(test_presence_frequency_penalties)
{
    struct sampler_params p = sampler_default_params();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    sampler *s = mk(p);
    CHECK(s);
    sampler_accept(s, 3, 0); /* prompt tokens do not count (OpenAI: generated text only) */
    sampler_accept(s, 4, 1);
    sampler_accept(s, 4, 1);
    sampler_accept(s, 4, 1);
    sampler_accept(s, 6, 1);
    for (int i = 0; i < 100; i++) sampler_accept(s, 7, 1); /* grows the count table */
    CHECK(sampler_check(s, NULL) == 0);
    float l[NV] = {0, 0, 0, 10, 10, 0, 10, 40};
    sampler_sample(s, l);
    CHECK(l[3] == 10.0f);
    CHECK(l[4] == 10.0f - 0.5f - 0.75f);
    CHECK(l[6] == 10.0f - 0.5f - 0.25f);
    CHECK(l[7] == 40.0f - 0.5f - 25.0f);
    CHECK(l[0] == 0.0f);
    sampler_free(s);
}

TEST(test_logit_bias)
{
    struct logit_bias bias[2] = {{2, 100.0f}, {5, -INFINITY}};
    struct sampler_params p = sampler_default_params();
    p.n_logit_bias = 2;
    p.logit_bias = bias;
    sampler *s = mk(p);
    CHECK(s);
    bias[0].token = 0; /* the sampler copied the list */
    float l[NV] = {0, 5, 0, 1, 1, 50, 0, 0};
    CHECK_EQ_INT(sampler_sample(s, l), 2);
    sampler_free(s);
    /* -inf bans a token even at temperature > 0 */
    struct logit_bias ban = {5, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    p.temperature = 1.0f;
    s = mk(p);
    int counts[NV];
    float l2[NV] = {0, 0, 0, 0, 0, 20, 0, 0};
    histogram(s, l2, 500, counts);
    sampler_free(s);
    CHECK_EQ_INT(counts[5], 0);
    /* a bias token outside the vocabulary is an error naming it */
    struct logit_bias bad = {NV, 1.0f};
    p.logit_bias = &bad;
    sampler *x = NULL;
    struct err e;
    CHECK(sampler_init(&p, NV, &x, &e) != 0 && x == NULL);
    CHECK(strstr(e.msg, "8") != NULL);
}

TEST(test_bad_params)
{
    struct err e;
    sampler *s = NULL;
    struct sampler_params p = sampler_default_params();
    p.top_p = 0.0f;
    CHECK(sampler_init(&p, NV, &s, &e) != 0 && strstr(e.msg, "top_p"));
    p = sampler_default_params();
    p.repeat_penalty = 0.0f;
    CHECK(sampler_init(&p, NV, &s, &e) != 0 && strstr(e.msg, "repeat_penalty"));
    p = sampler_default_params();
    p.temperature = NAN;
    CHECK(sampler_init(&p, NV, &s, &e) != 0);
    p = sampler_default_params();
    CHECK(sampler_init(&p, 0, &s, &e) != 0);
}

/* Feeds pieces one by one like a generator and returns the released text. */
static const char *feed(const char *const *pieces, int n, const char *const *stops, int n_stops, int *stopped)
{
    static char text[512], out[512];
    size_t len = 0, released = 0, out_len = 0;
    *stopped = 0;
    for (int i = 0; i < n && !*stopped; i++) {
        size_t pl = strlen(pieces[i]);
        memcpy(text + len, pieces[i], pl);
        len += pl;
        size_t upto;
        *stopped = stop_scan(text, len, released, stops, n_stops, &upto);
        if (upto < released) return "BUG: release went backwards";
        memcpy(out + out_len, text + released, upto - released);
        out_len += upto - released;
        released = upto;
    }
    if (!*stopped) {
        memcpy(out + out_len, text + released, len - released);
        out_len += len - released;
    }
    out[out_len] = '\0';
    return out;
}

TEST(test_stop_strings)
{
    int stopped;
    const char *stops1[] = {"END"};
    const char *p1[] = {"hello E", "N", "D more"};
    CHECK_STR(feed(p1, 3, stops1, 1, &stopped), "hello ");
    CHECK(stopped);
    /* a partial match that fails is released later, intact */
    const char *p2[] = {"a E", "N", "x b"};
    CHECK_STR(feed(p2, 3, stops1, 1, &stopped), "a ENx b");
    CHECK(!stopped);
    /* earliest of several stop strings wins; text before it is kept */
    const char *stops2[] = {"xyz", "\n\n", "yz"};
    const char *p3[] = {"ab", "cxy", "z\n\n"};
    CHECK_STR(feed(p3, 3, stops2, 3, &stopped), "abc");
    CHECK(stopped);
    /* a stop string inside one token */
    const char *p4[] = {"one", " two<|end|>three"};
    const char *stops3[] = {"<|end|>"};
    CHECK_STR(feed(p4, 2, stops3, 1, &stopped), "one two");
    CHECK(stopped);
    /* held-back text never includes part of a stop string: check the release at every step */
    size_t rel;
    const char *t = "abc<|en";
    CHECK(stop_scan(t, strlen(t), 0, stops3, 1, &rel) == 0);
    CHECK_EQ_INT(rel, 3);
    /* overlapping prefix: "aab" after "aa" */
    const char *stops4[] = {"aab"};
    const char *p5[] = {"xa", "a", "a", "b!"};
    CHECK_STR(feed(p5, 4, stops4, 1, &stopped), "xa");
    CHECK(stopped);
    /* no stop strings, empty stop strings: everything released */
    const char *stops5[] = {""};
    const char *p6[] = {"abc", "def"};
    CHECK_STR(feed(p6, 2, stops5, 1, &stopped), "abcdef");
    CHECK_STR(feed(p6, 2, NULL, 0, &stopped), "abcdef");
}

int main(void)
{
    RUN(test_greedy_and_ties);
    RUN(test_seed_determinism);
    RUN(test_temperature_distribution);
    RUN(test_top_k_top_p_min_p);
    RUN(test_repeat_penalty);
    RUN(test_presence_frequency_penalties);
    RUN(test_logit_bias);
    RUN(test_bad_params);
    RUN(test_stop_strings);
    return test_summary();
}
