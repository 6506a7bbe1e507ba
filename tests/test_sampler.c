/* test_sampler — the sampler (greedy, temperature, top-k/top-p/min-p, penalties, logit bias), its
 * position-keyed draw (pinned values, independence from call order and from other draws, uniformity), on
 * hand-made logits; and stop_scan (stop strings across token boundaries). */
#include <math.h>
#include <string.h>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "test.h"
#include "util/rng.h"

#define NV 8
#define MAX_POS 65536

static sampler *g_s;                    /* the scratch every test shares, as the engine does */
static int32_t g_zeros[MAX_POS + NV];   /* a history of token 0s (read only by the penalties) */

/* Samples at position pos with history tokens (n_prompt + pos), on a copy of logits. */
static int32_t draw(const struct sampler_params *p, const int32_t *tokens, int32_t n_prompt, int32_t pos,
                    const float *logits)
{
    float l[NV];
    memcpy(l, logits, sizeof l);
    return sampler_sample(g_s, p, tokens, n_prompt, pos, l);
}

/* Counts draws per token at positions 0 .. n-1 of fixed logits (no history). */
static void histogram(const struct sampler_params *p, const float *logits, int n, int *counts)
{
    memset(counts, 0, NV * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t t = draw(p, g_zeros, 0, i, logits);
        if (t >= 0 && t < NV) counts[t]++;
    }
}

TEST(test_greedy_and_ties)
{
    struct sampler_params p = sampler_default_params();
    float l1[NV] = {0, 3, 1, 3, -2, 0, 3, 1};
    CHECK_EQ_INT(sampler_sample(g_s, &p, g_zeros, 1, 0, l1), 1); /* lowest id among the tied maxima */
    float l2[NV] = {NAN, -1, -INFINITY, 5, 5.0001f, 0, 0, 0};
    CHECK_EQ_INT(sampler_sample(g_s, &p, g_zeros, 1, 0, l2), 4);
    float l3[NV] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(sampler_sample(g_s, &p, g_zeros, 1, 0, l3), 0);
    CHECK(sampler_check(g_s, NULL) == 0);
}

/* The draw is the formula in sampler.h: pinned values (a GPU backend checks its kernel against these), and
 * rng_at equals the splitmix64 stream it is defined by. */
TEST(test_draw_formula)
{
    CHECK(rng_at(0, 0) == 0xe220a8397b1dcdafull); /* splitmix64's first output from 0 (mix64(0) = 0) */
    CHECK(rng_at(42, 7) == 0x272404a0a3926552ull);
    CHECK(rng_at(UINT64_MAX, 1000000) == 0x37557ffeb5e86c53ull);
    CHECK(sampler_uniform(0, 0) == 14819496 * 0x1p-24f);
    CHECK(sampler_uniform(42, 7) == 2565124 * 0x1p-24f);
    CHECK(sampler_uniform(7, 0) == 8797065 * 0x1p-24f);
    CHECK(sampler_uniform(7, 1) == 5069051 * 0x1p-24f);
    const uint64_t keys[] = {0, 1, 7, 0x8000000000000000ull, UINT64_MAX};
    for (int k = 0; k < 5; k++) {
        uint64_t x = rng_mix64(keys[k]);
        for (uint64_t i = 0; i < 1000; i++) CHECK(rng_at(keys[k], i) == rng_splitmix64(&x));
    }
}

/* Chi-square statistic of n draws u(i) in 256 equal bins; mean in *mean. */
static double chi2_256(float (*u)(uint32_t), uint32_t n, double *mean)
{
    static int bins[256];
    memset(bins, 0, sizeof bins);
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        float x = u(i);
        if (!(x >= 0.0f && x < 1.0f)) return 1e30;
        sum += x;
        bins[(int)(x * 256.0f)]++;
    }
    *mean = sum / n;
    double want = n / 256.0, chi = 0;
    for (int b = 0; b < 256; b++) chi += (bins[b] - want) * (bins[b] - want) / want;
    return chi;
}

static float u_by_pos(uint32_t i) { return sampler_uniform(42, (int32_t)i); }
static float u_by_seed(uint32_t i) { return sampler_uniform(i, 0); }
static float u_by_seed_pos(uint32_t i) { return sampler_uniform(i & 255, (int32_t)(i >> 8)); }

/* 2^16 draws along positions, along consecutive seeds, and over a seed x position grid: every u in [0, 1),
 * mean within 0.005 of 1/2 (4.3 standard deviations of a mean of 2^16 uniforms), chi-square over 256 bins
 * below 350 (255 degrees of freedom: mean 255, sd 22.6; 350 is 4.2 sd). Adjacent positions: the pairs
 * (u(k), u(k+1)) in a 16 x 16 grid, chi-square below 350 too. */
TEST(test_draw_uniformity)
{
    float (*fs[3])(uint32_t) = {u_by_pos, u_by_seed, u_by_seed_pos};
    for (int f = 0; f < 3; f++) {
        double mean = 0, chi = chi2_256(fs[f], 1u << 16, &mean);
        CHECK_MSG(fabs(mean - 0.5) < 0.005 && chi < 350, "series %d: mean %.5f chi2 %.1f", f, mean, chi);
    }
    static int grid[256];
    memset(grid, 0, sizeof grid);
    for (int32_t k = 0; k < (1 << 16); k++) {
        int a = (int)(sampler_uniform(9, k) * 16.0f), b = (int)(sampler_uniform(9, k + 1) * 16.0f);
        grid[a * 16 + b]++;
    }
    double want = (1 << 16) / 256.0, chi = 0;
    for (int b = 0; b < 256; b++) chi += (grid[b] - want) * (grid[b] - want) / want;
    CHECK_MSG(chi < 350, "adjacent pairs: chi2 %.1f", chi);
}

TEST(test_seed_determinism)
{
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 7;
    float base[NV] = {1, 2, 0.5f, 1.5f, 0, 2, 1, 0.2f};
    int32_t a[64], b[64], c[64];
    for (int i = 0; i < 64; i++) a[i] = draw(&p, g_zeros, 0, i, base);
    for (int i = 0; i < 64; i++) b[i] = draw(&p, g_zeros, 0, i, base);
    p.seed = 8;
    for (int i = 0; i < 64; i++) c[i] = draw(&p, g_zeros, 0, i, base);
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

/* Same (seed, pos, history) -> same token, whatever was drawn before and in whatever order; with every
 * penalty on, so the history matters too. */
TEST(test_position_keyed)
{
    enum { N_PROMPT = 5, N_GEN = 48 };
    struct sampler_params p = sampler_default_params();
    p.temperature = 0.9f;
    p.top_k = 6;
    p.top_p = 0.95f;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 8;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    p.seed = 1234;
    float base[NV] = {1, 2, 0.5f, 1.5f, 0, 2, 1, 0.2f};
    /* generate N_GEN tokens in order, each fed back into the history */
    int32_t hist[N_PROMPT + N_GEN] = {3, 1, 4, 1, 5};
    for (int32_t k = 0; k < N_GEN; k++) hist[N_PROMPT + k] = draw(&p, hist, N_PROMPT, k, base);
    /* the same draws backwards, and in a scrambled order with unrelated draws (other seeds, other
     * positions, greedy) in between */
    for (int32_t k = N_GEN - 1; k >= 0; k--) CHECK_EQ_INT(draw(&p, hist, N_PROMPT, k, base), hist[N_PROMPT + k]);
    struct sampler_params q = p;
    for (int32_t i = 0; i < N_GEN; i++) {
        int32_t k = (int32_t)((i * 29 + 11) % N_GEN);
        q.seed = (uint64_t)i;
        draw(&q, hist, N_PROMPT, (k * 7) % N_GEN, base);
        q.temperature = 0;
        draw(&q, hist, N_PROMPT, N_GEN - 1, base);
        q.temperature = p.temperature;
        CHECK_EQ_INT(draw(&p, hist, N_PROMPT, k, base), hist[N_PROMPT + k]);
    }
    /* a draft token that is rejected leaves nothing behind: draw at pos k with a wrong token at k, then the
     * real one again */
    int32_t alt[N_PROMPT + N_GEN];
    memcpy(alt, hist, sizeof alt);
    alt[N_PROMPT + 10] = (hist[N_PROMPT + 10] + 1) % NV;
    draw(&p, alt, N_PROMPT, 11, base);
    CHECK_EQ_INT(draw(&p, hist, N_PROMPT, 11, base), hist[N_PROMPT + 11]);
    CHECK(sampler_check(g_s, NULL) == 0);
    /* the history matters: another token at position 10 changes some later draw's distribution */
    int differ = 0;
    for (int32_t k = 11; k < N_GEN; k++) {
        float l1[NV], l2[NV];
        memcpy(l1, base, sizeof l1);
        memcpy(l2, base, sizeof l2);
        p.temperature = 0; /* greedy shows the penalized logits' argmax; look at the logits instead */
        sampler_sample(g_s, &p, hist, N_PROMPT, k, l1);
        sampler_sample(g_s, &p, alt, N_PROMPT, k, l2);
        differ |= memcmp(l1, l2, sizeof l1) != 0;
    }
    CHECK(differ);
}

TEST(test_temperature_distribution)
{
    /* logits ln(1), ln(2), ln(3), ln(4) and -inf elsewhere: probabilities 0.1, 0.2, 0.3, 0.4 at T = 1 */
    float l[NV] = {0, logf(2), logf(3), logf(4), -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 123;
    int counts[NV];
    histogram(&p, l, 20000, counts);
    CHECK(counts[4] + counts[5] + counts[6] + counts[7] == 0);
    for (int t = 0; t < 4; t++) {
        double want = 0.1 * (t + 1) * 20000;
        CHECK_MSG(fabs(counts[t] - want) < 0.08 * want + 60, "token %d drawn %d times, want ~%.0f", t, counts[t], want);
    }
    /* a low temperature concentrates on the best */
    p.temperature = 0.05f;
    histogram(&p, l, 2000, counts);
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
    histogram(&p, l, 7000, counts);
    CHECK(counts[0] == 0 && counts[1] == 0);
    CHECK(abs(counts[3] - 4000) < 250 && abs(counts[2] - 3000) < 250);
    /* top-k 1 = greedy */
    p.top_k = 1;
    histogram(&p, l, 500, counts);
    CHECK_EQ_INT(counts[3], 500);
    /* top-p 0.65: smallest prefix with mass >= 0.65 is {3 (.4), 2 (.3)} */
    p.top_k = 0;
    p.top_p = 0.65f;
    histogram(&p, l, 7000, counts);
    CHECK(counts[0] == 0 && counts[1] == 0 && counts[2] > 2500 && counts[3] > 3500);
    /* top-p 0.75: adds token 1 (.4 + .3 = .7 < .75) */
    p.top_p = 0.75f;
    histogram(&p, l, 9000, counts);
    CHECK(counts[0] == 0 && counts[1] > 1500);
    /* min-p 0.5: keep p >= 0.5 * 0.4 = 0.2: tokens 1, 2, 3 */
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    histogram(&p, l, 9000, counts);
    CHECK(counts[0] == 0 && counts[1] > 1500 && counts[2] > 2500 && counts[3] > 3500);
    /* min-p 0.8: keep p >= 0.32: token 3 only */
    p.min_p = 0.8f;
    histogram(&p, l, 500, counts);
    CHECK_EQ_INT(counts[3], 500);
}

TEST(test_repeat_penalty)
{
    struct sampler_params p = sampler_default_params();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    /* prompt 1, 1; generated 2, 5: the window of 3 holds 1, 2, 5 (the first 1 fell out but the second is in) */
    int32_t hist[8] = {1, 1, 2, 5, 0, 0, 0};
    /* positive logits are divided, negative multiplied, each distinct token once */
    float l[NV] = {1.0f, 4.0f, -1.0f, 3.5f, 0, 3.9f, 0, 0};
    CHECK_EQ_INT(sampler_sample(g_s, &p, hist, 2, 2, l), 3);
    CHECK(l[1] == 2.0f && l[2] == -2.0f && l[5] == 1.95f && l[3] == 3.5f && l[0] == 1.0f);
    /* token 1 leaves the window after three more tokens (0, 0, 0) */
    float l2[NV] = {-1.0f, 4.0f, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(sampler_sample(g_s, &p, hist, 2, 5, l2), 1);
    CHECK(l2[1] == 4.0f && l2[0] == -2.0f);
    /* a history shorter than the window, and repeat_last_n 0 (off) */
    float l3[NV] = {0, 4.0f, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(sampler_sample(g_s, &p, hist, 1, 0, l3), 1);
    CHECK(l3[1] == 2.0f);
    p.repeat_last_n = 0;
    float l4[NV] = {0, 4.0f, 0, 0, 0, 0, 0, 0};
    sampler_sample(g_s, &p, hist, 2, 2, l4);
    CHECK(l4[1] == 4.0f);
    CHECK(sampler_check(g_s, NULL) == 0);
}

TEST(test_presence_frequency_penalties)
{
    struct sampler_params p = sampler_default_params();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    /* prompt 3 (prompt tokens do not count: OpenAI counts generated text only), generated 4, 4, 4, 6 and
     * 7 a hundred times */
    int32_t hist[1 + 104] = {3, 4, 4, 4, 6};
    for (int i = 0; i < 100; i++) hist[5 + i] = 7;
    float l[NV] = {0, 0, 0, 10, 10, 0, 10, 40};
    sampler_sample(g_s, &p, hist, 1, 104, l);
    CHECK(l[3] == 10.0f);
    CHECK(l[4] == 10.0f - 0.5f - 0.75f);
    CHECK(l[6] == 10.0f - 0.5f - 0.25f);
    CHECK(l[7] == 40.0f - 0.5f - 25.0f);
    CHECK(l[0] == 0.0f);
    CHECK(sampler_check(g_s, NULL) == 0);
    /* only the generated tokens before pos count: at pos 2 that is 4, 4 */
    float l2[NV] = {0, 0, 0, 10, 10, 0, 10, 40};
    sampler_sample(g_s, &p, hist, 1, 2, l2);
    CHECK(l2[4] == 10.0f - 0.5f - 0.5f && l2[6] == 10.0f && l2[7] == 40.0f);
    /* repetition and presence/frequency together, with ids outside the vocabulary ignored */
    p.repeat_penalty = 2.0f;
    int32_t odd[4] = {-1, 6, NV, 6};
    float l3[NV] = {0, 0, 0, 0, 0, 0, 10, 0};
    sampler_sample(g_s, &p, odd, 1, 3, l3);
    CHECK(l3[6] == 10.0f / 2.0f - 0.5f - 0.5f);
    CHECK(sampler_check(g_s, NULL) == 0);
}

TEST(test_logit_bias)
{
    struct logit_bias bias[2] = {{2, 100.0f}, {5, -INFINITY}};
    struct sampler_params p = sampler_default_params();
    p.n_logit_bias = 2;
    p.logit_bias = bias;
    CHECK(sampler_check_params(&p, NV, NULL) == 0);
    float l[NV] = {0, 5, 0, 1, 1, 50, 0, 0};
    CHECK_EQ_INT(draw(&p, g_zeros, 1, 0, l), 2);
    /* -inf bans a token even at temperature > 0 */
    struct logit_bias ban = {5, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    p.temperature = 1.0f;
    int counts[NV];
    float l2[NV] = {0, 0, 0, 0, 0, 20, 0, 0};
    histogram(&p, l2, 500, counts);
    CHECK_EQ_INT(counts[5], 0);
    /* a bias token outside the vocabulary is an error naming it */
    struct logit_bias bad = {NV, 1.0f};
    p.logit_bias = &bad;
    struct err e;
    CHECK(sampler_check_params(&p, NV, &e) != 0);
    CHECK(strstr(e.msg, "8") != NULL);
}

TEST(test_bad_params)
{
    struct err e;
    sampler *s = NULL;
    struct sampler_params p = sampler_default_params();
    p.top_p = 0.0f;
    CHECK(sampler_check_params(&p, NV, &e) != 0 && strstr(e.msg, "top_p"));
    p = sampler_default_params();
    p.repeat_penalty = 0.0f;
    CHECK(sampler_check_params(&p, NV, &e) != 0 && strstr(e.msg, "repeat_penalty"));
    p = sampler_default_params();
    p.temperature = NAN;
    CHECK(sampler_check_params(&p, NV, &e) != 0);
    p = sampler_default_params();
    CHECK(sampler_check_params(&p, 0, &e) != 0);
    CHECK(sampler_init(0, &s, &e) != 0 && s == NULL);
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

/* What a draw asks of a backend (sampler_uses, backend.h's SAMPLE_USE_*): nothing for plain greedy; a greedy
 * request's filters are never read; the window only with its penalty; each field its bit. */
TEST(test_uses)
{
    struct sampler_params p = sampler_default_params();
    CHECK_EQ_INT((int)sampler_uses(&p), 0);
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.1f;
    p.repeat_last_n = 8;
    CHECK_EQ_INT((int)sampler_uses(&p), 0); /* greedy: no filter is read, no penalty is on */
    p.temperature = 0.7f;
    CHECK_EQ_INT((int)sampler_uses(&p),
                 (int)(SAMPLE_USE_TEMPERATURE | SAMPLE_USE_TOP_K | SAMPLE_USE_TOP_P | SAMPLE_USE_MIN_P));
    p = sampler_default_params();
    p.repeat_penalty = 1.2f;
    CHECK_EQ_INT((int)sampler_uses(&p), (int)SAMPLE_USE_EDITS);
    p.repeat_last_n = 0;
    CHECK_EQ_INT((int)sampler_uses(&p), 0);
    p = sampler_default_params();
    p.frequency_penalty = 0.5f;
    CHECK_EQ_INT((int)sampler_uses(&p), (int)SAMPLE_USE_EDITS);
    const struct logit_bias b = {3, 1.0f};
    p = sampler_default_params();
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    CHECK_EQ_INT((int)sampler_uses(&p), (int)SAMPLE_USE_EDITS);
}

int main(void)
{
    struct err e;
    if (sampler_init(NV, &g_s, &e)) {
        printf("FAIL sampler_init: %s\n", e.msg);
        return 1;
    }
    RUN(test_greedy_and_ties);
    RUN(test_draw_formula);
    RUN(test_draw_uniformity);
    RUN(test_seed_determinism);
    RUN(test_position_keyed);
    RUN(test_temperature_distribution);
    RUN(test_top_k_top_p_min_p);
    RUN(test_repeat_penalty);
    RUN(test_presence_frequency_penalties);
    RUN(test_logit_bias);
    RUN(test_bad_params);
    RUN(test_stop_strings);
    RUN(test_uses);
    sampler_free(g_s);
    return test_summary();
}
