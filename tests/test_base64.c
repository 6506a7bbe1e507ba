/* test_base64 — RFC 4648's test vectors, a round trip of every length, and what decoding refuses. */
#include <stdint.h>

#include "test.h"
#include "util/base64.h"

TEST(base64_rfc4648_vectors)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16];
        size_t n = base64_encode(plain[i], strlen(plain[i]), out);
        CHECK_MSG(n == strlen(coded[i]) && !strcmp(out, coded[i]), "%s -> %s", plain[i], out);
        CHECK(base64_encoded_len(strlen(plain[i])) == n);
        uint8_t back[16];
        size_t m;
        CHECK(base64_decode(coded[i], n, back, &m) == 0 && m == strlen(plain[i]) && !memcmp(back, plain[i], m));
    }
    /* a float32 1.0 little-endian (00 00 80 3f), as OpenAI's base64 embeddings hold them */
    const uint8_t one[4] = {0x00, 0x00, 0x80, 0x3f};
    char out[16];
    base64_encode(one, 4, out);
    CHECK(!strcmp(out, "AACAPw=="));
}

TEST(base64_round_trip_and_refusals)
{
    uint8_t in[300], back[300];
    char out[404];
    for (int i = 0; i < 300; i++) in[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n <= 300; n++) {
        size_t len = base64_encode(in, n, out), m;
        CHECK(len == base64_encoded_len(n) && out[len] == '\0');
        CHECK(base64_decode(out, len, back, &m) == 0 && m == n && !memcmp(in, back, n));
    }
    size_t m;
    CHECK(base64_decode("Zm9", 3, back, &m) == -1);       /* not a multiple of 4 */
    CHECK(base64_decode("Zm9v*A==", 8, back, &m) == -1);  /* outside the alphabet */
    CHECK(base64_decode("Zg==Zg==", 8, back, &m) == -1);  /* padding in the middle */
    CHECK(base64_decode("Z=g=", 4, back, &m) == -1);      /* a '=' before a digit */
}

int main(void)
{
    RUN(base64_rfc4648_vectors);
    RUN(base64_round_trip_and_refusals);
    return test_summary();
}
