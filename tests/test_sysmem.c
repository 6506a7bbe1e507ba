/* test_sysmem — size parsing, /proc/meminfo and cgroup limit parsing, the --kv-memory auto rule, and
 * the live readers on this machine. */
#include "util/sysmem.h"

#include <stdint.h>

#include "test.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

TEST(sysmem_parse_size_units)
{
    struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"0", 0},           {"123", 123},        {"1K", 1024},          {"1k", 1024},       {"512M", 512 * MIB},
              {"2G", 2 * GIB},    {"2GiB", 2 * GIB},   {"2gb", 2 * GIB},      {"1.5G", 3 * GIB / 2}, {"1T", 1024 * GIB},
              {"100B", 100},      {"0.5k", 512},       {"64MiB", 64 * MIB}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        struct err e;
        CHECK_MSG(sysmem_parse_size(ok[i].s, &v, &e) == 0, "'%s': %.200s", ok[i].s, e.msg);
        CHECK_MSG(v == ok[i].v, "'%s' -> %llu", ok[i].s, (unsigned long long)v);
    }
    const char *bad[] = {"", "-1", "G", "1X", "12 G", "1GG", "abc", "1e9", "99999999999T", "1.5.2", "1Gx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        struct err e;
        e.msg[0] = '\0';
        CHECK_MSG(sysmem_parse_size(bad[i], &v, &e) != 0, "'%s' accepted", bad[i]);
        CHECK(e.msg[0] != '\0');
    }
}

TEST(sysmem_parse_meminfo_and_limits)
{
    uint64_t total = 0, avail = 0;
    CHECK(sysmem_parse_meminfo("MemTotal:       24683652 kB\nMemFree:  100 kB\nMemAvailable:   24393408 kB\n", &total,
                               &avail) == 0);
    CHECK_EQ_INT(total, 24683652ull * 1024);
    CHECK_EQ_INT(avail, 24393408ull * 1024);
    /* old kernels: no MemAvailable -> MemFree + Cached */
    CHECK(sysmem_parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 5 kB\nCached: 50 kB\n", &total, &avail) ==
          0);
    CHECK_EQ_INT(avail, 150 * 1024);
    CHECK(sysmem_parse_meminfo("nothing here\n", &total, &avail) != 0);
    CHECK_EQ_INT(sysmem_parse_limit("max\n"), 0);
    CHECK_EQ_INT(sysmem_parse_limit("9223372036854771712\n"), 0); /* v1 "unlimited" */
    CHECK_EQ_INT(sysmem_parse_limit("8589934592\n"), 8 * GIB);
    CHECK_EQ_INT(sysmem_parse_limit("garbage"), 0);
}

TEST(sysmem_auto_rule)
{
    struct sysmem_info mi = {.total_ram = 24 * GIB, .mem_available = 20 * GIB, .cgroup_limit = 0};
    /* headroom: 20% of RAM (4.8 GiB) */
    CHECK_EQ_INT(sysmem_default_headroom(&mi), 24 * GIB / 5);
    CHECK_EQ_INT(sysmem_auto_kv_bytes(&mi, 1 * GIB, 100 * MIB, UINT64_MAX),
                 20 * GIB - 1 * GIB - 100 * MIB - 24 * GIB / 5);
    /* explicit headroom */
    CHECK_EQ_INT(sysmem_auto_kv_bytes(&mi, 1 * GIB, 0, 3 * GIB), 16 * GIB);
    /* a cgroup limit below the RAM caps both the available memory and the headroom base; at least 2 GiB */
    mi.cgroup_limit = 8 * GIB;
    CHECK_EQ_INT(sysmem_available(&mi), 8 * GIB);
    CHECK_EQ_INT(sysmem_default_headroom(&mi), 2 * GIB);
    CHECK_EQ_INT(sysmem_auto_kv_bytes(&mi, 1 * GIB, 0, UINT64_MAX), 5 * GIB);
    /* nothing left: 0, never a wrapped-around huge number */
    CHECK_EQ_INT(sysmem_auto_kv_bytes(&mi, 7 * GIB, 0, UINT64_MAX), 0);
    CHECK_EQ_INT(sysmem_auto_kv_bytes(&mi, 9 * GIB, 0, 0), 0);
}

TEST(sysmem_live_readers)
{
    struct sysmem_info mi;
    struct err e;
    CHECK_MSG(sysmem_read(&mi, &e) == 0, "%.200s", e.msg);
    CHECK(mi.total_ram > 64 * MIB && mi.mem_available > 0 && mi.mem_available <= mi.total_ram);
    uint64_t rss = sysmem_rss_bytes(), peak = sysmem_peak_rss_bytes();
    CHECK(rss > 0 && peak >= rss);
    /* touching 64 MiB raises the peak; a reset brings it back near the current RSS */
    size_t n = 64 * MIB;
    char *p = malloc(n);
    CHECK(p != NULL);
    memset(p, 1, n);
    volatile unsigned sink = 0;
    for (size_t i = 0; i < n; i += 4096) sink = sink + (unsigned char)p[i]; /* keep the pages live */
    CHECK(sink != 0 || n == 0);
    uint64_t peak2 = sysmem_peak_rss_bytes();
    CHECK_MSG(peak2 >= rss + n / 2, "peak %llu, rss before %llu", (unsigned long long)peak2, (unsigned long long)rss);
    free(p);
    /* after a reset the peak is the current RSS (which, under ASan's quarantine, may still hold p) */
    if (sysmem_reset_peak_rss() == 0) CHECK(sysmem_peak_rss_bytes() < sysmem_rss_bytes() + n / 4);
}

int main(void)
{
    RUN(sysmem_parse_size_units);
    RUN(sysmem_parse_meminfo_and_limits);
    RUN(sysmem_auto_rule);
    RUN(sysmem_live_readers);
    return test_summary();
}
