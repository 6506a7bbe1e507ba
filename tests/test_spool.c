/* Tests for jobs/spool: what needs a spool (by the first bytes, not the name); plain, gzip (two members)
 * and zstd copies byte-exact; *changed; truncated and corrupt input refused with dst untouched and no
 * temporary file left. */
#include <dirent.h>
#include <zlib.h>
#include <zstd.h>

#include "jobs/spool.h"
#include <sys/stat.h>

#include "test.h"

static char tmp_dir[] = "/tmp/ns_test_spool_XXXXXX";
static const char text[] = "{\"id\": \"a\", \"prompt\": \"Once\"}\n{\"id\": \"b\", \"prompt\": \"upon a time\"}\n";

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmp_dir, name); }

/* The whole file in a malloc'd buffer (NUL-terminated), *n its size. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 16);
    *n = fread(b, 1, (1 << 16) - 1, f);
    b[*n] = '\0';
    fclose(f);
    return b;
}

/* A gzip member of p (deflate with a gzip header). */
static size_t gzip_of(const char *p, size_t n, unsigned char *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (unsigned char *)p, z.avail_in = (uInt)n;
    z.next_out = out, z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    size_t got = cap - z.avail_out;
    deflateEnd(&z);
    return got;
}

static int n_tmp_files(void)
{
    int n = 0;
    DIR *d = opendir(tmp_dir);
    for (struct dirent *de; d && (de = readdir(d));) n += strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* Copies src to dst and checks dst holds text. */
static void check_copy(const char *src, const char *dst, int want_changed)
{
    struct err e;
    int changed = -1;
    CHECK_MSG(spool_copy(src, dst, &changed, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(changed, want_changed);
    size_t n;
    char *got = slurp(dst, &n);
    CHECK(got && n == strlen(text) && !memcmp(got, text, n));
    free(got);
}

TEST(plain_gzip_zstd)
{
    char plain[600], gz[600], zst[600], dst[600];
    path_of(plain, sizeof plain, "b.jsonl");
    path_of(gz, sizeof gz, "b.jsonl.gz");
    path_of(zst, sizeof zst, "weird-name");
    path_of(dst, sizeof dst, "run.db.backlog");
    test_write_file(plain, text, strlen(text));
    unsigned char buf[4096];
    size_t half = 20, n1 = gzip_of(text, half, buf, sizeof buf); /* two members: as `cat a.gz b.gz` */
    size_t n2 = gzip_of(text + half, strlen(text) - half, buf + n1, sizeof buf - n1);
    test_write_file(gz, buf, n1 + n2);
    size_t nz = ZSTD_compress(buf, sizeof buf, text, strlen(text), 3);
    CHECK(!ZSTD_isError(nz));
    test_write_file(zst, buf, nz);
    CHECK_EQ_INT(spool_kind_of(plain), SPOOL_NONE);
    CHECK_EQ_INT(spool_kind_of(gz), SPOOL_GZIP);
    CHECK_EQ_INT(spool_kind_of(zst), SPOOL_ZSTD); /* by the bytes, whatever the name */
    CHECK_EQ_INT(spool_kind_of("-"), SPOOL_STDIN);
    char fifo[512];
    path_of(fifo, sizeof fifo, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_INT(spool_kind_of(fifo), SPOOL_PIPE); /* by its type: no byte read (a read would block here) */
    CHECK_EQ_INT(spool_kind_of(tmp_dir), SPOOL_NONE);
    unlink(fifo);
    check_copy(plain, dst, 0);
    check_copy(gz, dst, 0);  /* same content: not changed */
    check_copy(zst, dst, 0);
    test_write_file(dst, "other\n", 6);
    check_copy(gz, dst, 1);  /* other content before */
    CHECK_EQ_INT(n_tmp_files(), 0);
}

TEST(bad_input_keeps_dst)
{
    char cut[600], bad[600], dst[600];
    path_of(cut, sizeof cut, "cut.gz");
    path_of(bad, sizeof bad, "bad.zst");
    path_of(dst, sizeof dst, "keep.backlog");
    test_write_file(dst, text, strlen(text));
    unsigned char buf[4096];
    size_t n = gzip_of(text, strlen(text), buf, sizeof buf);
    test_write_file(cut, buf, n - 6);
    struct err e;
    int changed;
    CHECK(spool_copy(cut, dst, &changed, &e) != 0);
    CHECK(strstr(e.msg, "cut.gz: the gzip data ends early") != NULL);
    buf[12] ^= 0xff; /* a corrupt deflate stream */
    test_write_file(cut, buf, n);
    CHECK(spool_copy(cut, dst, &changed, &e) != 0);
    CHECK_MSG(strstr(e.msg, "cut.gz: corrupt gzip data") != NULL, "%s", e.msg);
    test_write_file(bad, "\x28\xb5\x2f\xfd junk junk", 14);
    CHECK(spool_copy(bad, dst, &changed, &e) != 0);
    CHECK(strstr(e.msg, "bad.zst: corrupt zstd data") != NULL);
    char missing[600];
    path_of(missing, sizeof missing, "missing.gz");
    CHECK(spool_copy(missing, dst, &changed, &e) != 0);
    CHECK(strstr(e.msg, "missing.gz: No such file") != NULL);
    size_t m;
    char *got = slurp(dst, &m);
    CHECK(got && m == strlen(text) && !memcmp(got, text, m)); /* untouched */
    free(got);
    CHECK_EQ_INT(n_tmp_files(), 0);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(plain_gzip_zstd);
    RUN(bad_input_keeps_dst);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
