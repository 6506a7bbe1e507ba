/* Tests for util/sha256: known vectors, files, the digest cache (hit, stale on change, unwritable cache). */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "test.h"
#include "util/sha256.h"

static char tmp_dir[] = "/tmp/ns_test_sha256_XXXXXX";

TEST(known_vectors)
{
    uint8_t d[32];
    char hex[65];
    sha256_buf("abc", 3, d);
    sha256_hex(d, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha256_buf("", 0, d);
    sha256_hex(d, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_ctx *c = sha256_init();
    CHECK(c != NULL);
    sha256_update(c, "a", 1);
    sha256_update(c, "bc", 2);
    sha256_final(c, d);
    sha256_hex(d, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(file_and_cache)
{
    char path[600], cache[600];
    snprintf(path, sizeof path, "%s/model.bin", tmp_dir);
    snprintf(cache, sizeof cache, "%s/cache", tmp_dir);
    setenv("NIGHTSHIFT_CACHE_DIR", cache, 1);
    test_write_file(path, "abc", 3);
    uint8_t d[32], d2[32];
    char hex[65];
    struct err e;
    int cached = -1;
    CHECK(sha256_file_cached(path, d, &cached, &e) == 0);
    CHECK_EQ_INT(cached, 0);
    sha256_hex(d, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_file_cached(path, d2, &cached, &e) == 0);
    CHECK_EQ_INT(cached, 1);
    CHECK(!memcmp(d, d2, 32));
    /* the cache really is used: a forged entry with the file's identity is believed */
    char tsv[700];
    snprintf(tsv, sizeof tsv, "%s/sha256.tsv", cache);
    size_t n;
    char *text = test_read_file(tsv, &n);
    CHECK(text && n > 64);
    text[0] = text[0] == '0' ? '1' : '0';
    test_write_file(tsv, text, strlen(text));
    free(text);
    CHECK(sha256_file_cached(path, d2, &cached, &e) == 0);
    CHECK_EQ_INT(cached, 1);
    CHECK(memcmp(d, d2, 32) != 0);
    /* a change of the file (size and mtime) makes the entry stale */
    test_write_file(path, "abcd", 4);
    struct timespec ts[2] = {{0, UTIME_NOW}, {1000, 0}};
    utimensat(AT_FDCWD, path, ts, 0);
    CHECK(sha256_file_cached(path, d2, &cached, &e) == 0);
    CHECK_EQ_INT(cached, 0);
    sha256_hex(d2, hex);
    CHECK_STR(hex, "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589");
    /* an unusable cache directory is not an error */
    setenv("NIGHTSHIFT_CACHE_DIR", "/proc/nonexistent/cache", 1);
    CHECK(sha256_file_cached(path, d2, &cached, &e) == 0);
    CHECK_EQ_INT(cached, 0);
    unsetenv("NIGHTSHIFT_CACHE_DIR");
    /* a missing file is */
    snprintf(path, sizeof path, "%s/missing.bin", tmp_dir);
    CHECK(sha256_file(path, d, &e) != 0);
    CHECK(strstr(e.msg, "missing.bin") != NULL);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(known_vectors);
    RUN(file_and_cache);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
