/* test.h — the tiny harness every tests/test_*.c uses.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ_INT(a, b); ... }
 *   int main(void) { RUN(name); ...; return test_summary(); }
 *
 * Each test prints "ok <name>" or "FAIL <name>: file:line: what"; a skipped test prints "skip <name>: why".
 * tests/run counts these lines over all binaries and scripts. Tests run from the repository root;
 * test_shared() resolves a path under ../shared (or $NIGHTSHIFT_SHARED). */
#ifndef NS_TEST_H
#define NS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int test_n_pass, test_n_fail, test_n_skip;
static int test_cur_failed, test_cur_skipped;
static char test_cur_msg[4096]; /* larger than any err.msg plus a file:line prefix */

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                                       \
    do {                                                                                                  \
        if (!(cond)) {                                                                                    \
            snprintf(test_cur_msg, sizeof test_cur_msg, "%s:%d: CHECK(%s)", __FILE__, __LINE__, #cond);   \
            test_cur_failed = 1;                                                                          \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                              \
    do {                                                                                                  \
        if (!(cond)) {                                                                                    \
            int n_ = snprintf(test_cur_msg, sizeof test_cur_msg, "%s:%d: ", __FILE__, __LINE__);          \
            snprintf(test_cur_msg + n_, sizeof test_cur_msg - (size_t)n_, __VA_ARGS__);                   \
            test_cur_failed = 1;                                                                          \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                                \
    do {                                                                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                                               \
        CHECK_MSG(a_ == b_, "%s == %s: %lld != %lld", #a, #b, a_, b_);                                    \
    } while (0)

#define CHECK_STR(a, b)                                                                                   \
    do {                                                                                                  \
        const char *a_ = (a), *b_ = (b);                                                                  \
        CHECK_MSG(a_ && b_ && strcmp(a_, b_) == 0, "%s == %s: \"%s\" != \"%s\"", #a, #b,                  \
                  a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                                \
    } while (0)

#define SKIP(...)                                                                                         \
    do {                                                                                                  \
        snprintf(test_cur_msg, sizeof test_cur_msg, __VA_ARGS__);                                         \
        test_cur_skipped = 1;                                                                             \
        return;                                                                                           \
    } while (0)

#define RUN(name) test_run(#name, name)

static inline void test_run(const char *name, void (*fn)(void))
{
    test_cur_failed = test_cur_skipped = 0;
    test_cur_msg[0] = '\0';
    fn();
    if (test_cur_failed) {
        printf("FAIL %s: %s\n", name, test_cur_msg);
        test_n_fail++;
    } else if (test_cur_skipped) {
        printf("skip %s: %s\n", name, test_cur_msg);
        test_n_skip++;
    } else {
        printf("ok %s\n", name);
        test_n_pass++;
    }
    fflush(stdout);
}

static inline int test_summary(void)
{
    return test_n_fail ? 1 : 0;
}

/* Path of a file under the shared folder; returns a static buffer (valid until the next call). */
static inline const char *test_shared(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("NIGHTSHIFT_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "../shared", rel);
    return buf;
}

/* Reads a whole file into a malloc'd, NUL-terminated buffer; NULL on failure. */
static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Writes n bytes of p to path (created or truncated); 0 ok. */
static inline int test_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Removes dir and everything under it (`rm -rf`, for the mkdtemp folders of test mains); 0 ok. */
static inline int test_rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
