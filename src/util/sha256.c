/* sha256 — see sha256.h.
 *
 * Invariant: a cache entry is used only when path, size, mtime (ns) and inode all equal the file's
 * current stat(); the cache file is only ever replaced by rename() of a fully written temporary file.
 */
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

struct sha256_ctx {
    EVP_MD_CTX *md;
};

sha256_ctx *sha256_init(void)
{
    sha256_ctx *c = malloc(sizeof *c);
    if (!c) return NULL;
    c->md = EVP_MD_CTX_new();
    if (!c->md || EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c->md);
        free(c);
        return NULL;
    }
    return c;
}

void sha256_update(sha256_ctx *c, const void *p, size_t n)
{
    if (n) EVP_DigestUpdate(c->md, p, n);
}

void sha256_final(sha256_ctx *c, uint8_t out[SHA256_BYTES])
{
    unsigned int len = 0;
    EVP_DigestFinal_ex(c->md, out, &len);
    EVP_MD_CTX_free(c->md);
    free(c);
}

void sha256_abort(sha256_ctx *c)
{
    if (!c) return;
    EVP_MD_CTX_free(c->md);
    free(c);
}

void sha256_buf(const void *p, size_t n, uint8_t out[SHA256_BYTES])
{
    unsigned int len = 0;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

void sha256_hex(const uint8_t d[SHA256_BYTES], char out[2 * SHA256_BYTES + 1])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_BYTES; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * SHA256_BYTES] = '\0';
}

int sha256_file(const char *path, uint8_t out[SHA256_BYTES], struct err *e)
{
    enum { CHUNK = 1 << 20 };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, "%s: %s", path, strerror(errno));
    char *buf = malloc(CHUNK);
    sha256_ctx *c = sha256_init();
    if (!buf || !c) {
        err_set(e, "%s: out of memory", path);
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0) {
            if (errno == EINTR) continue;
            err_set(e, "%s: read: %s", path, strerror(errno));
            goto fail;
        }
        if (n == 0) break;
        sha256_update(c, buf, (size_t)n);
    }
    sha256_final(c, out);
    free(buf);
    close(fd);
    return 0;
fail:
    sha256_abort(c);
    free(buf);
    close(fd);
    return -1;
}

/* --- the digest cache --- */

static int cache_path(char *buf, size_t cap)
{
    const char *d = getenv("NIGHTSHIFT_CACHE_DIR");
    int n;
    if (d && *d) {
        n = snprintf(buf, cap, "%s", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && *d) {
        n = snprintf(buf, cap, "%s/nightshift", d);
    } else if ((d = getenv("HOME")) && *d) {
        n = snprintf(buf, cap, "%s/.cache/nightshift", d);
    } else {
        return -1;
    }
    return n > 0 && (size_t)n < cap - 16 ? n : -1;
}

/* mkdir -p of the directory (best effort). */
static void mkdirs(char *dir)
{
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    mkdir(dir, 0755);
}

static int hex_nibble(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

struct cache_id {
    char path[PATH_MAX];
    unsigned long long size, mtime_ns, ino;
};

/* Looks the file up in the cache text; 1 on a hit (digest in out). */
static int cache_lookup(const char *text, const struct cache_id *id, uint8_t out[SHA256_BYTES])
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[PATH_MAX + 256];
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = '\0';
            char hex[65], path[PATH_MAX];
            unsigned long long size, mtime, ino;
            if (sscanf(line, "%64[0-9a-f]\t%llu\t%llu\t%llu\t%4095[^\n]", hex, &size, &mtime, &ino, path) == 5 &&
                strlen(hex) == 64 && size == id->size && mtime == id->mtime_ns && ino == id->ino &&
                !strcmp(path, id->path)) {
                for (int i = 0; i < SHA256_BYTES; i++)
                    out[i] = (uint8_t)(hex_nibble(hex[2 * i]) << 4 | hex_nibble(hex[2 * i + 1]));
                return 1;
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    return 0;
}

static char *read_small(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20; /* the cache stays small; a bigger one is ignored rather than trusted */
    char *buf = malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

int sha256_file_cached(const char *path, uint8_t out[SHA256_BYTES], int *cached, struct err *e)
{
    if (cached) *cached = 0;
    struct stat st;
    if (stat(path, &st) != 0) return err_set(e, "%s: %s", path, strerror(errno));
    struct cache_id id;
    if (!realpath(path, id.path)) return err_set(e, "%s: %s", path, strerror(errno));
    id.size = (unsigned long long)st.st_size;
    id.mtime_ns = (unsigned long long)st.st_mtim.tv_sec * 1000000000ull + (unsigned long long)st.st_mtim.tv_nsec;
    id.ino = (unsigned long long)st.st_ino;

    char dir[PATH_MAX], file[PATH_MAX + 32], tmp[PATH_MAX + 64];
    int have_cache = cache_path(dir, sizeof dir) > 0;
    char *text = NULL;
    if (have_cache) {
        snprintf(file, sizeof file, "%s/sha256.tsv", dir);
        text = read_small(file);
        if (text && cache_lookup(text, &id, out)) {
            free(text);
            if (cached) *cached = 1;
            return 0;
        }
    }
    if (sha256_file(path, out, e) != 0) {
        free(text);
        return -1;
    }
    if (!have_cache) return 0;
    /* Rewrite: keep other files' entries (and drop stale ones for this path), then add ours. */
    mkdirs(dir);
    snprintf(tmp, sizeof tmp, "%s/sha256.tsv.%ld.tmp", dir, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f) {
        if (text) {
            for (char *p = text; *p;) {
                char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t)(nl - p) : strlen(p);
                /* the path is the last field; skip lines for our path */
                char *tab = memrchr(p, '\t', len);
                int ours = tab && (size_t)(p + len - tab - 1) == strlen(id.path) &&
                           !memcmp(tab + 1, id.path, strlen(id.path));
                if (!ours && nl) fwrite(p, 1, len + 1, f);
                if (!nl) break;
                p = nl + 1;
            }
        }
        char hex[65];
        sha256_hex(out, hex);
        fprintf(f, "%s\t%llu\t%llu\t%llu\t%s\n", hex, id.size, id.mtime_ns, id.ino, id.path);
        int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, file) != 0) unlink(tmp);
    }
    free(text);
    return 0;
}
