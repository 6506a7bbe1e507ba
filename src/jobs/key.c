/* key — see key.h. The encoding is the contract: changing it changes every key, so old stores stop
 * matching. Bump KEY_VERSION (key.h; the tag follows it) when the encoding or the meaning of a result
 * changes.
 *
 * Invariant: key_encode is a pure function of its arguments, writes fields in the documented order, and
 * its output length is determined by n_stop, stop lengths, n_logit_bias and n_prompt alone.
 */
#include "jobs/key.h"

#include <stdlib.h>
#include <string.h>

#include "util/rng.h"
#include "util/sha256.h"

#define KEY_STR_(x) #x
#define KEY_STR(x) KEY_STR_(x) /* KEY_STR(KEY_VERSION) = "2" */

/* Writes into buf up to cap; with a sha256 ctx, a full buffer is flushed into it instead (streaming). */
struct enc {
    uint8_t *buf;
    size_t cap, n, at;
    sha256_ctx *sha;
};

static void put(struct enc *w, const void *p, size_t n)
{
    const uint8_t *b = p;
    w->n += n;
    while (n) {
        if (w->at == w->cap) {
            if (!w->sha) return;
            sha256_update(w->sha, w->buf, w->at);
            w->at = 0;
        }
        size_t room = w->cap - w->at, k = n < room ? n : room;
        memcpy(w->buf + w->at, b, k);
        w->at += k;
        b += k;
        n -= k;
    }
}

static void put_u32(struct enc *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, b, 4);
}

static void put_any(void *w, const void *p, size_t n) { put(w, p, n); }

static void encode(struct enc *wp, const struct key_params *p)
{
    static const char tag[] = "nightshift-key-v" KEY_STR(KEY_VERSION);
    static const char embed_tag[] = "nightshift-embedding-v1";
    if (p->embed_pooling) put(wp, embed_tag, sizeof embed_tag);
    else put(wp, tag, sizeof tag); /* with the NUL */
    put(wp, p->model_sha256, 32);
    put_u32(wp, p->kv_type);
    if (p->embed_pooling) put_u32(wp, (uint32_t)p->embed_pooling);
    else genparam_key_encode(p->gen, p->seed, put_any, wp);
    put_u32(wp, (uint32_t)p->n_prompt);
    for (int32_t i = 0; i < p->n_prompt; i++) put_u32(wp, (uint32_t)p->prompt[i]);
    put_u32(wp, p->index);
}

size_t key_encode(const struct key_params *p, uint8_t *buf, size_t cap)
{
    struct enc w = {buf, cap, 0, 0, NULL};
    encode(&w, p);
    return w.n;
}

int key_compute(const struct key_params *p, uint8_t out[KEY_BYTES], struct err *e)
{
    uint8_t buf[4096];
    struct enc w = {buf, sizeof buf, 0, 0, sha256_init()};
    if (!w.sha) return err_set(e, "key: out of memory");
    encode(&w, p);
    sha256_update(w.sha, buf, w.at);
    sha256_final(w.sha, out);
    return 0;
}

uint64_t key_id_seed(const char *custom_id)
{
    static const char tag[] = "nightshift-seed";
    sha256_ctx *c = sha256_init();
    uint8_t d[32];
    if (!c) {
        /* fall back to a plain FNV-1a; only reached when out of memory */
        uint64_t h = 1469598103934665603ull;
        for (const char *p = custom_id; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
        return h;
    }
    sha256_update(c, tag, sizeof tag);
    sha256_update(c, custom_id, strlen(custom_id));
    sha256_final(c, d);
    uint64_t s = 0;
    for (int i = 7; i >= 0; i--) s = s << 8 | d[i];
    return s;
}

uint64_t key_completion_seed(uint64_t s, uint32_t index)
{
    if (index == 0) return s;
    return rng_mix64(s + 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1));
}

void key_hex(const uint8_t k[KEY_BYTES], char out[2 * KEY_BYTES + 1])
{
    sha256_hex(k, out);
}
