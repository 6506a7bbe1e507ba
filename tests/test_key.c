/* Tests for jobs/key: canonical encoding layout, what changes a key and what does not, seeds. */
#include "jobs/key.h"
#include "test.h"
#include "util/sha256.h"

static const uint8_t model_a[32] = {1, 2, 3};
static const uint8_t model_b[32] = {1, 2, 4};
static const int32_t prompt[] = {1, 403, 407, 261, 378};

/* Each key_params built by base() points at its own gen_params from this pool (tests make a few each). */
static struct gen_params gens[8];
static int n_gens;

static struct key_params base(void)
{
    struct key_params p;
    memset(&p, 0, sizeof p);
    struct gen_params *g = &gens[n_gens++ % 8];
    *g = genparam_defaults();
    g->max_tokens = 16;
    g->temperature = 0.8f;
    g->top_p = 0.95f;
    p.model_sha256 = model_a;
    p.kv_type = 1;
    p.gen = g;
    p.seed = 7;
    p.prompt = prompt;
    p.n_prompt = 5;
    return p;
}

static struct gen_params *gen_of(struct key_params *p) { return (struct gen_params *)p->gen; }

static void key_of(const struct key_params *p, uint8_t out[32])
{
    struct err e;
    if (key_compute(p, out, &e) != 0) memset(out, 0, 32);
}

TEST(encoding_layout)
{
    struct key_params p = base();
    char *stop[] = {"ab", "c"};
    gen_of(&p)->stop = stop;
    gen_of(&p)->n_stop = 2;
    struct logit_bias lb[2] = {{3, -1.0f}, {9, 2.0f}};
    gen_of(&p)->logit_bias = lb;
    gen_of(&p)->n_logit_bias = 2;
    p.index = 2;
    uint8_t buf[1024];
    size_t n = key_encode(&p, buf, sizeof buf);
    /* tag 18 + model 32 + kv 4 + genparam rows: 3 i32 (max_tokens, top_k, repeat_last_n) + 6 f32 + seed 8 +
     * n_stop 4 + (4+2) + (4+1) + n_bias 4 + 2*8 + ignore_eos 4; then n_prompt 4 + 5*4 + index 4 */
    CHECK_EQ_INT(n, 18 + 32 + 4 + 12 + 24 + 8 + 4 + 6 + 5 + 4 + 16 + 4 + 4 + 20 + 4);
    CHECK_EQ_INT(KEY_VERSION, 2);
    CHECK(!memcmp(buf, "nightshift-key-v2", 18)); /* the tag carries KEY_VERSION, NUL-terminated */
    CHECK(!memcmp(buf + 18, model_a, 32));
    CHECK_EQ_INT(buf[n - 4], 2); /* index, little-endian */
    CHECK_EQ_INT(buf[n - 8], 378 & 255);
    /* a short buffer reports the full length and the key is the sha256 of the encoding */
    uint8_t small[8];
    CHECK_EQ_INT(key_encode(&p, small, sizeof small), n);
    uint8_t k[32], d[32];
    key_of(&p, k);
    sha256_buf(buf, n, d);
    CHECK(!memcmp(k, d, 32));
}

TEST(what_changes_a_key)
{
    struct key_params p = base();
    uint8_t k0[32], k1[32];
    key_of(&p, k0);
    key_of(&p, k1);
    CHECK(!memcmp(k0, k1, 32)); /* deterministic */

    struct key_params q = base();
    q.model_sha256 = model_b;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    q.seed = 8;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    q.index = 1;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    gen_of(&q)->max_tokens = 17;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    q.n_prompt = 4;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    q.kv_type = 0;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
    q = base();
    gen_of(&q)->temperature = -0.0f + 0.8f;
    key_of(&q, k1);
    CHECK(!memcmp(k0, k1, 32));
    /* stop lists that concatenate to the same bytes differ */
    char *s1[] = {"ab", "c"}, *s2[] = {"a", "bc"};
    q = base();
    gen_of(&q)->stop = s1;
    gen_of(&q)->n_stop = 2;
    key_of(&q, k0);
    gen_of(&q)->stop = s2;
    key_of(&q, k1);
    CHECK(memcmp(k0, k1, 32));
}

/* The key of one request under KEY_VERSION 2, pinned (the value was computed independently from the layout
 * in key.h): it changes only with a deliberate version bump (then update it). The v1 key of the same
 * request was the sha256 of the same bytes with "v1" in the tag. */
TEST(version_pinned)
{
    struct key_params p = base();
    uint8_t buf[256], k[32], v1[32];
    char hex[65];
    size_t n = key_encode(&p, buf, sizeof buf);
    CHECK(n <= sizeof buf);
    key_of(&p, k);
    key_hex(k, hex);
    CHECK_STR(hex, "08d476697ed9c38ae29caebf02d09fbf59ca3149fbc33a388bcb3aa05734aaad");
    buf[16] = '1';
    sha256_buf(buf, n, v1);
    CHECK(memcmp(k, v1, 32) != 0);
}

TEST(greedy_ignores_sampling_knobs)
{
    struct key_params p = base(), q = base();
    gen_of(&p)->temperature = 0;
    gen_of(&q)->temperature = 0;
    q.seed = 12345;
    gen_of(&q)->top_k = 40;
    gen_of(&q)->top_p = 0.5f;
    gen_of(&q)->min_p = 0.1f;
    uint8_t a[32], b[32];
    key_of(&p, a);
    key_of(&q, b);
    CHECK(!memcmp(a, b, 32));
    gen_of(&q)->repetition_penalty = 1.2f; /* still matters when greedy */
    key_of(&q, b);
    CHECK(memcmp(a, b, 32));
}

TEST(seeds)
{
    CHECK(key_id_seed("a") == key_id_seed("a"));
    CHECK(key_id_seed("a") != key_id_seed("b"));
    CHECK(key_completion_seed(99, 0) == 99);
    CHECK(key_completion_seed(99, 1) != 99);
    CHECK(key_completion_seed(99, 1) != key_completion_seed(99, 2));
    CHECK(key_completion_seed(99, 1) == key_completion_seed(99, 1));
    char hex[65];
    uint8_t k[32] = {0xab, 0x01};
    key_hex(k, hex);
    CHECK(!strncmp(hex, "ab01", 4));
    CHECK_EQ_INT(strlen(hex), 64);
}

int main(void)
{
    RUN(encoding_layout);
    RUN(what_changes_a_key);
    RUN(version_pinned);
    RUN(greedy_ignores_sampling_knobs);
    RUN(seeds);
    return test_summary();
}
