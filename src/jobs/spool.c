/* spool — see spool.h. One pass: read a chunk of src, decompress it when needed, write it to the temporary
 * file and hash it; then sync, compare with the spool already there, rename. */
#include "jobs/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include "util/sha256.h"

#define SPOOL_CHUNK (1 << 16)

/* Where the copy goes and what it has seen. */
struct spool_out {
    int fd;
    const char *src, *tmp;
    sha256_ctx *hash;
    uint64_t in_bytes; /* bytes read from src, for messages */
};

static enum spool_kind kind_of_magic(const unsigned char *b, size_t n)
{
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return SPOOL_GZIP;
    if (n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) return SPOOL_ZSTD;
    return SPOOL_NONE;
}

/* Reads up to n bytes (fewer only at the end of the stream): bytes read, or -1 with errno. */
static ssize_t read_full(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

enum spool_kind spool_kind_of(const char *path)
{
    if (!strcmp(path, "-")) return SPOOL_STDIN;
    struct stat st;
    if (stat(path, &st) != 0) return SPOOL_NONE;
    if (S_ISFIFO(st.st_mode)) return SPOOL_PIPE; /* never read a pipe's bytes here: spool_copy reads them once */
    if (!S_ISREG(st.st_mode)) return SPOOL_NONE;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return SPOOL_NONE;
    unsigned char b[4];
    ssize_t n = read_full(fd, b, sizeof b);
    close(fd);
    return n > 0 ? kind_of_magic(b, (size_t)n) : SPOOL_NONE;
}

static int out_write(struct spool_out *o, const void *p, size_t n, struct err *e)
{
    sha256_update(o->hash, p, n);
    for (size_t done = 0; done < n;) {
        ssize_t w = write(o->fd, (const char *)p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return err_set(e, "backlog %s: writing the spool %s: %s", o->src, o->tmp, strerror(errno));
        done += (size_t)w;
    }
    return 0;
}

/* The next chunk of src into buf (the first one already in it when *have > 0): bytes, 0 at the end, -1. */
static ssize_t in_read(int fd, struct spool_out *o, unsigned char *buf, size_t *have, struct err *e)
{
    if (*have) {
        ssize_t n = (ssize_t)*have;
        *have = 0;
        return n;
    }
    ssize_t n = read_full(fd, buf, SPOOL_CHUNK);
    if (n < 0) return err_set(e, "backlog %s: %s", o->src, strerror(errno));
    o->in_bytes += (uint64_t)n;
    return n;
}

static int copy_plain(int fd, struct spool_out *o, unsigned char *buf, size_t have, struct err *e)
{
    for (;;) {
        ssize_t n = in_read(fd, o, buf, &have, e);
        if (n <= 0) return (int)n;
        if (out_write(o, buf, (size_t)n, e) != 0) return -1;
    }
}

/* gzip: inflate with header detection; a member's end is followed by another member or the end. */
static int copy_gzip(int fd, struct spool_out *o, unsigned char *buf, size_t have, struct err *e)
{
    unsigned char out[SPOOL_CHUNK];
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) return err_set(e, "backlog %s: out of memory", o->src);
    int rc = -1, ended = 1;
    for (;;) {
        ssize_t n = in_read(fd, o, buf, &have, e);
        if (n < 0) goto done;
        if (n == 0) break;
        z.next_in = buf, z.avail_in = (uInt)n;
        while (z.avail_in > 0) {
            z.next_out = out, z.avail_out = sizeof out;
            int r = inflate(&z, Z_NO_FLUSH);
            if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
                err_set(e, "backlog %s: corrupt gzip data near byte %llu (%s)", o->src,
                        (unsigned long long)(o->in_bytes - z.avail_in), z.msg ? z.msg : "inflate failed");
                goto done;
            }
            if (out_write(o, out, sizeof out - z.avail_out, e) != 0) goto done;
            ended = r == Z_STREAM_END;
            if (ended && inflateReset(&z) != Z_OK) goto done; /* another member may follow */
        }
    }
    if (!ended) err_set(e, "backlog %s: the gzip data ends early (truncated file?)", o->src);
    else rc = 0;
done:
    inflateEnd(&z);
    return rc;
}

/* zstd: frames one after another; the last must be complete. */
static int copy_zstd(int fd, struct spool_out *o, unsigned char *buf, size_t have, struct err *e)
{
    unsigned char out[SPOOL_CHUNK];
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z) return err_set(e, "backlog %s: out of memory", o->src);
    int rc = -1;
    size_t left = 0; /* 0: at a frame boundary */
    for (;;) {
        ssize_t n = in_read(fd, o, buf, &have, e);
        if (n < 0) goto done;
        if (n == 0) break;
        ZSTD_inBuffer in = {buf, (size_t)n, 0};
        while (in.pos < in.size) {
            ZSTD_outBuffer ob = {out, sizeof out, 0};
            left = ZSTD_decompressStream(z, &ob, &in);
            if (ZSTD_isError(left)) {
                err_set(e, "backlog %s: corrupt zstd data near byte %llu (%s)", o->src,
                        (unsigned long long)(o->in_bytes - (in.size - in.pos)), ZSTD_getErrorName(left));
                goto done;
            }
            if (out_write(o, out, ob.pos, e) != 0) goto done;
        }
    }
    if (left) err_set(e, "backlog %s: the zstd data ends early (truncated file?)", o->src);
    else rc = 0;
done:
    ZSTD_freeDStream(z);
    return rc;
}

/* Copies src into o (its first chunk decides how). */
static int copy_any(int fd, struct spool_out *o, struct err *e)
{
    unsigned char *buf = malloc(SPOOL_CHUNK);
    if (!buf) return err_set(e, "backlog %s: out of memory", o->src);
    ssize_t n = read_full(fd, buf, SPOOL_CHUNK);
    int rc;
    if (n < 0) rc = err_set(e, "backlog %s: %s", o->src, strerror(errno));
    else {
        o->in_bytes = (uint64_t)n;
        enum spool_kind k = kind_of_magic(buf, (size_t)n);
        rc = k == SPOOL_GZIP   ? copy_gzip(fd, o, buf, (size_t)n, e)
             : k == SPOOL_ZSTD ? copy_zstd(fd, o, buf, (size_t)n, e)
                               : copy_plain(fd, o, buf, (size_t)n, e);
    }
    free(buf);
    return rc;
}

int spool_copy(const char *src, const char *dst, int *changed, struct err *e)
{
    char tmp[4200];
    *changed = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
    int in = strcmp(src, "-") ? open(src, O_RDONLY) : STDIN_FILENO;
    if (in < 0) return err_set(e, "backlog %s: %s", src, strerror(errno));
    struct spool_out o = {open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), strcmp(src, "-") ? src : "- (standard input)",
                          tmp, NULL, 0};
    if (o.fd < 0) {
        err_set(e, "backlog %s: cannot create the spool %s: %s", o.src, tmp, strerror(errno));
        goto fail_in;
    }
    if (!(o.hash = sha256_init())) {
        err_set(e, "out of memory");
        goto fail;
    }
    int rc = copy_any(in, &o, e);
    uint8_t now[SHA256_BYTES], before[SHA256_BYTES];
    sha256_final(o.hash, now);
    if (rc != 0) goto fail;
    if (fsync(o.fd) != 0 || close(o.fd) != 0) {
        o.fd = -1;
        err_set(e, "backlog %s: syncing the spool %s: %s", o.src, tmp, strerror(errno));
        goto fail;
    }
    o.fd = -1;
    if (access(dst, F_OK) == 0) *changed = sha256_file(dst, before, NULL) != 0 || memcmp(before, now, sizeof now);
    if (rename(tmp, dst) != 0) {
        err_set(e, "backlog %s: renaming the spool to %s: %s", o.src, dst, strerror(errno));
        goto fail;
    }
    if (in != STDIN_FILENO) close(in);
    return 0;
fail:
    if (o.fd >= 0) close(o.fd);
    unlink(tmp);
fail_in:
    if (in != STDIN_FILENO) close(in);
    return -1;
}
