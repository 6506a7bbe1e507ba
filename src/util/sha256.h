/* sha256 — SHA-256 of buffers and files (OpenSSL EVP), and a cache of model-file digests.
 *
 * Hashing a multi-GB model takes seconds, so sha256_file_cached() remembers digests by
 * (absolute path, size, mtime in ns, inode) in a small text file:
 *
 *     $NIGHTSHIFT_CACHE_DIR/sha256.tsv           when that variable is set, else
 *     $XDG_CACHE_HOME/nightshift/sha256.tsv      else ~/.cache/nightshift/sha256.tsv
 *
 * one line per file: "<hex digest>\t<size>\t<mtime_ns>\t<inode>\t<absolute path>\n". The file is rewritten
 * whole through a temporary file + rename(), so a crash leaves the old or the new version, never a torn one;
 * a line that does not parse is ignored. A cache that cannot be read or written is not an error: the digest
 * is then simply computed. Any change of size, mtime or inode makes the entry stale.
 */
#ifndef NS_UTIL_SHA256_H
#define NS_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define SHA256_BYTES 32

/* Incremental hashing. sha256_init returns NULL on out-of-memory. */
typedef struct sha256_ctx sha256_ctx;
sha256_ctx *sha256_init(void);
void sha256_update(sha256_ctx *c, const void *p, size_t n);
/* Writes the digest and frees c. */
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_BYTES]);
/* Frees c without a digest (error paths). NULL is fine. */
void sha256_abort(sha256_ctx *c);

void sha256_buf(const void *p, size_t n, uint8_t out[SHA256_BYTES]);
/* Streams the file (O(size) time, 1 MiB of memory). */
int sha256_file(const char *path, uint8_t out[SHA256_BYTES], struct err *e);
/* As sha256_file, through the cache described above. *cached (may be NULL) says whether it was a hit. */
int sha256_file_cached(const char *path, uint8_t out[SHA256_BYTES], int *cached, struct err *e);

/* Lower-case hex, NUL-terminated (65 bytes). */
void sha256_hex(const uint8_t d[SHA256_BYTES], char out[2 * SHA256_BYTES + 1]);

#endif
