/* test_dtype — the table of tensor types (gguf_dtype_info, quant.c) row by row, so that a half-added type
 * fails here: the table's own invariant (quant_check_types), each row's geometry against gguf_row_bytes,
 * its row functions against that geometry (a row of several blocks converts as its blocks one at a time,
 * and writes exactly its bytes), round trips where the type quantizes, the answers derived from the
 * columns (quant_can_*, quant_dequantize_types, gguf_dtype_names), and the named targets of quantize
 * (gguf/qmix) against the types they write. */
#include <math.h>
#include <stdint.h>
#include <strings.h>

#include "gguf/qmix.h"
#include "gguf/quant.h"
#include "test.h"
#include "util/rng.h"

#define DT_BLOCKS 3 /* blocks per test row: more than one, so a wrong stride shows */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float dt_uniform(void)
{
    return (float)((rng_splitmix64(&rng_state) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

TEST(table_invariant_holds)
{
    struct err e;
    CHECK_MSG(quant_check_types(&e) == 0, "%s", e.msg);
}

TEST(every_row_matches_gguf_row_bytes)
{
    int n_known = 0;
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (!ti) {
            CHECK_MSG(gguf_row_bytes(t, 256) == 0 && !quant_can_dequantize((enum gguf_dtype)t) &&
                          !quant_can_quantize((enum gguf_dtype)t),
                      "unknown type id %u answers as a type", t);
            continue;
        }
        n_known++;
        CHECK_MSG(gguf_row_bytes(t, ti->block_size) == ti->block_bytes, "%s: one block is %llu bytes, not %u",
                  ti->name, (unsigned long long)gguf_row_bytes(t, ti->block_size), ti->block_bytes);
        CHECK_MSG(gguf_row_bytes(t, (uint64_t)DT_BLOCKS * ti->block_size) == (uint64_t)DT_BLOCKS * ti->block_bytes,
                  "%s: %d blocks", ti->name, DT_BLOCKS);
        CHECK_MSG(ti->block_size == 1 || gguf_row_bytes(t, ti->block_size + 1) == 0,
                  "%s: a row that is not whole blocks has bytes", ti->name);
        CHECK_MSG(quant_can_dequantize((enum gguf_dtype)t) == (ti->dequantize_row != NULL) &&
                      quant_can_quantize((enum gguf_dtype)t) == (ti->quantize_row != NULL),
                  "%s: quant_can_* disagree with the table's columns", ti->name);
        CHECK_MSG((quant_dequantize_types() >> t & 1) == (ti->dequantize_row != NULL), "%s: quant_dequantize_types",
                  ti->name);
    }
    CHECK(n_known == 31); /* ggml's ids 0-30 less the removed 4 and 5, and the ternary 34, 35 */
}

/* Names are unique ignoring case, and each names exactly its own row. */
TEST(names_are_unique_and_name_their_row)
{
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (!ti) continue;
        CHECK_MSG(ti->name[0] != '\0', "type id %u has an empty name", t);
        uint32_t found = GGUF_DTYPE_COUNT_MAX, n_found = 0;
        for (uint32_t u = 0; u < GGUF_DTYPE_COUNT_MAX; u++)
            if (gguf_dtype_info(u) && !strcasecmp(gguf_dtype_info(u)->name, ti->name)) found = u, n_found++;
        CHECK_MSG(n_found == 1 && found == t, "%s names %u rows", ti->name, n_found);
        char one[32];
        gguf_dtype_names(1ull << t, one, sizeof one);
        CHECK_STR(one, ti->name);
    }
    char list[64];
    gguf_dtype_names(1ull << GGUF_DTYPE_F32 | 1ull << GGUF_DTYPE_Q8_0 | 1ull << 4, list, sizeof list);
    CHECK_STR(list, "F32, Q8_0"); /* id order; an id with no row (4) is left out */
}

/* Every dequantizable row: a row of DT_BLOCKS blocks of random bytes (finite f16 scales: the bytes of the
 * quantized random values where the type quantizes, else raw bytes with every 16-bit word's exponent kept
 * below the top) converts as its blocks one at a time. */
TEST(dequantize_row_converts_block_by_block)
{
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (!ti || !ti->dequantize_row) continue;
        const int64_t n = (int64_t)DT_BLOCKS * ti->block_size;
        uint8_t src[DT_BLOCKS * 512];
        float whole[DT_BLOCKS * 256], part[DT_BLOCKS * 256];
        CHECK_MSG(ti->block_bytes <= 512 && ti->block_size <= 256, "%s: blocks larger than this test's buffers",
                  ti->name);
        for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)rng_splitmix64(&rng_state);
        for (size_t i = 1; i < sizeof src; i += 2) src[i] &= 0x3b; /* halves and bf16s: finite, moderate */
        CHECK_MSG(quant_dequantize_row((enum gguf_dtype)t, src, whole, n) == 0, "%s: %lld elements", ti->name,
                  (long long)n);
        for (int b = 0; b < DT_BLOCKS; b++)
            CHECK(quant_dequantize_row((enum gguf_dtype)t, src + (size_t)b * ti->block_bytes,
                                       part + (size_t)b * ti->block_size, ti->block_size) == 0);
        CHECK_MSG(!memcmp(whole, part, (size_t)n * sizeof(float)), "%s: a row of %d blocks is not its blocks",
                  ti->name, DT_BLOCKS);
        CHECK_MSG(quant_dequantize_row((enum gguf_dtype)t, src, whole, n + (ti->block_size > 1)) ==
                      (ti->block_size > 1 ? -1 : 0),
                  "%s: a row that is not whole blocks", ti->name);
    }
}

/* Every quantizable row: writes exactly DT_BLOCKS * block_bytes bytes (a canary after them survives), as its
 * blocks one at a time, and comes back close to its input. */
TEST(quantize_row_writes_its_bytes_and_round_trips)
{
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (!ti || !ti->quantize_row) continue;
        const int64_t n = (int64_t)DT_BLOCKS * ti->block_size;
        const size_t bytes = (size_t)DT_BLOCKS * ti->block_bytes;
        float x[DT_BLOCKS * 256], y[DT_BLOCKS * 256];
        uint8_t whole[DT_BLOCKS * 512 + 16], part[DT_BLOCKS * 512];
        CHECK(ti->block_bytes <= 512 && ti->block_size <= 256);
        for (int64_t i = 0; i < n; i++) x[i] = dt_uniform();
        memset(whole, 0xA5, sizeof whole);
        CHECK_MSG(quant_quantize_row((enum gguf_dtype)t, x, whole, n) == 0, "%s", ti->name);
        for (size_t i = bytes; i < bytes + 16; i++)
            CHECK_MSG(whole[i] == 0xA5, "%s: byte %zu written past the row's %zu", ti->name, i, bytes);
        for (int b = 0; b < DT_BLOCKS; b++)
            CHECK(quant_quantize_row((enum gguf_dtype)t, x + (size_t)b * ti->block_size,
                                     part + (size_t)b * ti->block_bytes, ti->block_size) == 0);
        CHECK_MSG(!memcmp(whole, part, bytes), "%s: a row of %d blocks is not its blocks", ti->name, DT_BLOCKS);
        CHECK(quant_dequantize_row((enum gguf_dtype)t, whole, y, n) == 0);
        double err = 0, sum = 0;
        for (int64_t i = 0; i < n; i++) {
            CHECK_MSG(isfinite(y[i]), "%s: element %lld is not finite", ti->name, (long long)i);
            err += (double)(y[i] - x[i]) * (y[i] - x[i]);
            sum += (double)x[i] * x[i];
        }
        /* the coarsest type, Q2_K, keeps about 0.3 of the rms; any type must keep its values' shape */
        CHECK_MSG(sqrt(err / sum) < 0.45, "%s: round trip rms error %.3f of the rms", ti->name, sqrt(err / sum));
        CHECK_MSG(quant_quantize_row((enum gguf_dtype)t, x, whole, n + (ti->block_size > 1)) ==
                      (ti->block_size > 1 ? -1 : 0),
                  "%s: a row that is not whole blocks", ti->name);
    }
}

/* The named targets of quantize write types the table quantizes; a plain target (no mix) is named as its
 * type; each type a target may fall back to is quantized too. */
TEST(quantize_targets_are_types_the_table_writes)
{
    for (size_t i = 0; i < qmix_n_types(); i++) {
        const struct qmix_type *q = qmix_type_at(i);
        const struct gguf_dtype_info *ti = gguf_dtype_info(q->base);
        CHECK_MSG(ti && quant_can_quantize(q->base), "target %s: base type %d is not written", q->name, (int)q->base);
        const size_t len = strlen(ti->name);
        CHECK_MSG(!strncasecmp(q->name, ti->name, len) && (q->name[len] == '\0' || q->name[len] == '_'),
                  "target %s is not named for its base type %s", q->name, ti->name);
        for (uint64_t ne0 = 1; ne0 <= 256; ne0 *= 2) {
            enum gguf_dtype f = qmix_fallback(q->base, ne0);
            CHECK_MSG(quant_can_quantize(f) && gguf_row_bytes((uint32_t)f, ne0) > 0,
                      "target %s, rows of %llu: fallback %d", q->name, (unsigned long long)ne0, (int)f);
        }
    }
}

int main(void)
{
    RUN(table_invariant_holds);
    RUN(every_row_matches_gguf_row_bytes);
    RUN(names_are_unique_and_name_their_row);
    RUN(dequantize_row_converts_block_by_block);
    RUN(quantize_row_writes_its_bytes_and_round_trips);
    RUN(quantize_targets_are_types_the_table_writes);
    return test_summary();
}
