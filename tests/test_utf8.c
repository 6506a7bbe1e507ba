/* Tests for util/utf8: every class of invalid sequence, the boundaries between sequence lengths, an
 * exhaustive comparison against a reference written differently (decode the bits, then range-check the
 * code point), buffer validation with the offset of the first bad byte, and the partial-sequence helpers
 * that streaming detokenization relies on. */
#include "test.h"
#include "util/utf8.h"

#define U(s) ((const unsigned char *)(s))

/* The reference: decode by bit pattern, then reject overlongs, surrogates and values above U+10FFFF by the
 * code point itself. Length 1..4, or 0 when s[0..n) does not start with a valid sequence. */
static size_t ref_seq_len(const unsigned char *s, size_t n, uint32_t *cp_out)
{
    if (n == 0) return 0;
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) len = 1, cp = c, min = 0;
    else if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    if (cp_out) *cp_out = cp;
    return len;
}

TEST(lead_len_every_byte)
{
    for (unsigned c = 0; c < 256; c++) {
        size_t want = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        CHECK_MSG(utf8_lead_len((unsigned char)c) == want, "lead %02X: %zu, want %zu", c,
                  utf8_lead_len((unsigned char)c), want);
    }
}

/* Each boundary code point encodes to the expected bytes and decodes back; the values just past the
 * ranges (surrogates, U+110000) do not encode. */
TEST(boundaries)
{
    static const struct {
        uint32_t cp;
        const char *bytes; /* NULL: not encodable */
    } cases[] = {
        {0x0, "\x00"},
        {0x7F, "\x7F"},
        {0x80, "\xC2\x80"},
        {0x7FF, "\xDF\xBF"},
        {0x800, "\xE0\xA0\x80"},
        {0xD7FF, "\xED\x9F\xBF"},
        {0xD800, NULL},
        {0xDBFF, NULL},
        {0xDC00, NULL},
        {0xDFFF, NULL},
        {0xE000, "\xEE\x80\x80"},
        {0xFFFF, "\xEF\xBF\xBF"},
        {0x10000, "\xF0\x90\x80\x80"},
        {0xFFFFF, "\xF3\xBF\xBF\xBF"},
        {0x100000, "\xF4\x80\x80\x80"},
        {0x10FFFF, "\xF4\x8F\xBF\xBF"},
        {0x110000, NULL},
        {0xFFFFFFFF, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[UTF8_MAX_SEQ];
        size_t n = utf8_encode(cases[i].cp, out);
        if (!cases[i].bytes) {
            CHECK_MSG(n == 0, "U+%X encoded to %zu bytes", (unsigned)cases[i].cp, n);
            continue;
        }
        size_t want = cases[i].cp == 0 ? 1 : strlen(cases[i].bytes);
        CHECK_MSG(n == want && memcmp(out, cases[i].bytes, n) == 0, "U+%X: %zu bytes", (unsigned)cases[i].cp, n);
        size_t len = 0;
        CHECK_EQ_INT(utf8_decode(U(out), n, &len), cases[i].cp);
        CHECK_EQ_INT(len, n);
        CHECK_EQ_INT(utf8_seq_len(U(out), n), n);
        CHECK(utf8_valid(out, n, NULL));
    }
}

/* One example of every way a sequence can be invalid: each is rejected by seq_len, decode, valid. */
TEST(invalid_classes)
{
    static const struct {
        const char *bytes;
        size_t n;
        const char *what;
    } cases[] = {
        {"\x80", 1, "lone continuation 80"},
        {"\xBF", 1, "lone continuation BF"},
        {"\xC0\x80", 2, "overlong NUL (C0)"},
        {"\xC1\xBF", 2, "overlong U+7F (C1)"},
        {"\xE0\x80\x80", 3, "overlong 3-byte U+0"},
        {"\xE0\x9F\xBF", 3, "overlong 3-byte U+7FF"},
        {"\xF0\x80\x80\x80", 4, "overlong 4-byte U+0"},
        {"\xF0\x8F\xBF\xBF", 4, "overlong 4-byte U+FFFF"},
        {"\xED\xA0\x80", 3, "surrogate U+D800"},
        {"\xED\xAF\xBF", 3, "surrogate U+DBFF"},
        {"\xED\xB0\x80", 3, "surrogate U+DC00"},
        {"\xED\xBF\xBF", 3, "surrogate U+DFFF"},
        {"\xF4\x90\x80\x80", 4, "U+110000"},
        {"\xF4\xBF\xBF\xBF", 4, "U+13FFFF"},
        {"\xF5\x80\x80\x80", 4, "lead F5"},
        {"\xF7\xBF\xBF\xBF", 4, "lead F7"},
        {"\xF8\x88\x80\x80\x80", 5, "5-byte form"},
        {"\xFC\x84\x80\x80\x80\x80", 6, "6-byte form"},
        {"\xFE", 1, "FE"},
        {"\xFF", 1, "FF"},
        {"\xC3", 1, "truncated 2-byte"},
        {"\xE2\x82", 2, "truncated 3-byte"},
        {"\xE2", 1, "truncated 3-byte, lead only"},
        {"\xF0\x9F\x98", 3, "truncated 4-byte"},
        {"\xC3\x28", 2, "2-byte with ASCII second byte"},
        {"\xE2\x28\xA1", 3, "3-byte with bad second byte"},
        {"\xE2\x82\x28", 3, "3-byte with bad third byte"},
        {"\xF0\x9F\x98\x28", 4, "4-byte with bad fourth byte"},
        {"\xC3\xC3", 2, "lead followed by lead"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const unsigned char *s = U(cases[i].bytes);
        size_t n = cases[i].n, len = 9, at = 99;
        CHECK_MSG(utf8_seq_len(s, n) == 0, "%s: seq_len %zu", cases[i].what, utf8_seq_len(s, n));
        CHECK_MSG(utf8_char_len(s, n) == 1, "%s: char_len %zu", cases[i].what, utf8_char_len(s, n));
        CHECK_MSG(utf8_decode(s, n, &len) == -1 && len == 1, "%s: decoded", cases[i].what);
        CHECK_MSG(!utf8_valid(cases[i].bytes, n, &at) && at == 0, "%s: valid (at %zu)", cases[i].what, at);
    }
    size_t len = 9;
    CHECK(utf8_seq_len(U(""), 0) == 0);
    CHECK(utf8_decode(U(""), 0, &len) == -1 && len == 0);
}

/* Every 1-, 2- and 3-byte string, and every 4-byte string with lead F0..F7 (second byte any, the last two
 * from a set covering each byte class), agrees with the reference in length and code point. */
TEST(exhaustive_against_reference)
{
    unsigned char s[4];
    for (uint32_t x = 0; x < (1u << 24); x++) {
        s[0] = (unsigned char)(x >> 16), s[1] = (unsigned char)(x >> 8), s[2] = (unsigned char)x;
        for (size_t n = 1; n <= 3; n++) {
            if (n < 3 && (x & ((1u << (8 * (3 - n))) - 1))) continue; /* shorter strings: once each */
            uint32_t cp = 0;
            size_t want = ref_seq_len(s, n, &cp), got = utf8_seq_len(s, n), len;
            int32_t dec = utf8_decode(s, n, &len);
            CHECK_MSG(got == want, "%02X %02X %02X (n=%zu): %zu, want %zu", s[0], s[1], s[2], n, got, want);
            CHECK_MSG(want ? dec == (int32_t)cp && len == want : dec == -1 && len == 1, "decode %02X %02X %02X",
                      s[0], s[1], s[2]);
        }
    }
    static const unsigned char tails[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xF4, 0xFF};
    for (unsigned lead = 0xF0; lead <= 0xF7; lead++)
        for (unsigned b1 = 0; b1 < 256; b1++)
            for (size_t i = 0; i < sizeof tails; i++)
                for (size_t j = 0; j < sizeof tails; j++) {
                    s[0] = (unsigned char)lead, s[1] = (unsigned char)b1, s[2] = tails[i], s[3] = tails[j];
                    CHECK_MSG(utf8_seq_len(s, 4) == ref_seq_len(s, 4, NULL), "%02X %02X %02X %02X", s[0], s[1],
                              s[2], s[3]);
                }
}

/* Every scalar value round-trips through encode and decode; the encoding matches the reference. */
TEST(every_code_point_round_trips)
{
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        char out[UTF8_MAX_SEQ];
        size_t n = utf8_encode(cp, out), len = 0;
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            CHECK_MSG(n == 0, "surrogate U+%X encoded", (unsigned)cp);
            continue;
        }
        uint32_t ref = 0;
        CHECK_MSG(n >= 1 && ref_seq_len(U(out), n, &ref) == n && ref == cp, "U+%X: reference disagrees", (unsigned)cp);
        CHECK_MSG(utf8_decode(U(out), n, &len) == (int32_t)cp && len == n, "U+%X: decode", (unsigned)cp);
    }
}

TEST(valid_buffers)
{
    size_t at = 77;
    CHECK(utf8_valid("", 0, &at));
    CHECK(utf8_valid("abc", 3, &at));
    CHECK(utf8_valid("a\0b", 3, &at)); /* NUL is a character like any other */
    CHECK(utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, &at));
    CHECK_EQ_INT(at, 77); /* untouched when valid */
    CHECK(!utf8_valid("ab\xc0\xaf", 4, &at));
    CHECK_EQ_INT(at, 2);
    CHECK(!utf8_valid("x\xe2\x82", 3, &at)); /* truncated at the end */
    CHECK_EQ_INT(at, 1);
    CHECK(!utf8_valid("\xc3\xa9\xe2\x82\xac!\xed\xa0\x80", 9, &at)); /* after valid multi-byte ones */
    CHECK_EQ_INT(at, 6);
    CHECK(!utf8_valid("\xe2\x82\xac\x80", 4, &at)); /* a continuation byte too many */
    CHECK_EQ_INT(at, 3);
    CHECK(!utf8_valid("ok\xf4\x90\x80\x80", 6, NULL)); /* bad_at may be NULL */
    /* the length given is honoured: a sequence cut by n is invalid even if the bytes go on */
    CHECK(!utf8_valid("\xe2\x82\xac", 2, &at));
    CHECK_EQ_INT(at, 0);
}

TEST(char_len_steps_through_anything)
{
    const char s[] = "a\xc3\xa9\xff\xe2\x82\xac\xe2\x82" "b\xf0\x9f\x98\x80\x80";
    size_t n = sizeof s - 1;
    static const size_t want[] = {1, 2, 1, 3, 1, 1, 1, 4, 1};
    size_t i = 0, k = 0;
    while (i < n) {
        size_t l = utf8_char_len(U(s) + i, n - i);
        CHECK_MSG(k < sizeof want / sizeof want[0] && l == want[k], "step %zu at %zu: %zu", k, i, l);
        i += l;
        k++;
    }
    CHECK_EQ_INT(k, sizeof want / sizeof want[0]);
    CHECK_EQ_INT(utf8_char_len(U("\xf0\x9f\x98\x80"), 3), 1); /* cut by n: one byte at a time */
}

TEST(partial_sequences)
{
    CHECK(utf8_is_partial(U("\xc3"), 1));
    CHECK(utf8_is_partial(U("\xe2"), 1));
    CHECK(utf8_is_partial(U("\xe2\x82"), 2));
    CHECK(utf8_is_partial(U("\xf0\x9f\x98"), 3));
    CHECK(utf8_is_partial(U("\xf4\x8f"), 2));
    CHECK(!utf8_is_partial(U(""), 0));
    CHECK(!utf8_is_partial(U("A"), 1));           /* ASCII is complete */
    CHECK(!utf8_is_partial(U("\xe2\x82\xac"), 3)); /* complete */
    CHECK(!utf8_is_partial(U("\x80"), 1));        /* continuation byte */
    CHECK(!utf8_is_partial(U("\xc0"), 1));        /* can never be valid */
    CHECK(!utf8_is_partial(U("\xf5"), 1));
    CHECK(!utf8_is_partial(U("\xe0\x9f"), 2)); /* would be overlong */
    CHECK(!utf8_is_partial(U("\xed\xa0"), 2)); /* would be a surrogate */
    CHECK(!utf8_is_partial(U("\xf0\x8f"), 2)); /* would be overlong */
    CHECK(!utf8_is_partial(U("\xf4\x90"), 2)); /* would be above U+10FFFF */
    CHECK(!utf8_is_partial(U("\xe2\x28"), 2)); /* bad continuation */

    CHECK_EQ_INT(utf8_partial_tail(U(""), 0), 0);
    CHECK_EQ_INT(utf8_partial_tail(U("abc"), 3), 0);
    CHECK_EQ_INT(utf8_partial_tail(U("ab\xe2"), 3), 1);
    CHECK_EQ_INT(utf8_partial_tail(U("ab\xe2\x82"), 4), 2);
    CHECK_EQ_INT(utf8_partial_tail(U("ab\xe2\x82\xac"), 5), 0);
    CHECK_EQ_INT(utf8_partial_tail(U("\xf0\x9f\x98"), 3), 3);
    CHECK_EQ_INT(utf8_partial_tail(U("\xf0\x9f\x98\x80\xf0"), 5), 1);
    CHECK_EQ_INT(utf8_partial_tail(U("x\xed\xa0"), 3), 0);
    CHECK_EQ_INT(utf8_partial_tail(U("\x80\x80\x80"), 3), 0);
    CHECK_EQ_INT(utf8_partial_tail(U("\xf0\x80\x80\x80"), 4), 0); /* the lead is 4 back: not looked at */
    CHECK_EQ_INT(utf8_partial_tail(U("\xff\xc3"), 2), 1);
}

int main(void)
{
    RUN(lead_len_every_byte);
    RUN(boundaries);
    RUN(invalid_classes);
    RUN(exhaustive_against_reference);
    RUN(every_code_point_round_trips);
    RUN(valid_buffers);
    RUN(char_len_steps_through_anything);
    RUN(partial_sequences);
    return test_summary();
}
