/* spool — a backlog that cannot be read again by offset made into one that can: standard input ("-"), a
 * named pipe or process substitution (`nightshift run <(zcat x.gz)`: /dev/fd/N, a FIFO) and gzip / zstd
 * compressed files are copied (decompressed) into a regular file beside the store, which the
 * run then reads like any backlog (jobs/ingest reads lines again by offset, a resumed run reads the whole
 * file again).
 *
 * What is compressed is told by the first bytes (gzip 1f 8b, zstd 28 b5 2f fd), not by the name: a
 * compressed stream on standard input is decompressed too. Several concatenated members / frames are read
 * as one stream, as gzip -d and zstd -d do.
 *
 * The spool is written to a temporary file beside it, synced and renamed over the spool path: a reader of
 * the previous spool (an open descriptor) keeps its file, a kill while spooling leaves the previous spool
 * (or none) and at worst a temporary file, never a half spool under the spool's name.
 */
#ifndef NS_JOBS_SPOOL_H
#define NS_JOBS_SPOOL_H

#include "util/err.h"

enum spool_kind {
    SPOOL_NONE,  /* a regular, uncompressed file: read as it is */
    SPOOL_STDIN, /* "-": standard input (itself maybe compressed) */
    SPOOL_PIPE,  /* a FIFO (a named pipe, /dev/fd/N of a process substitution), read once, like stdin */
    SPOOL_GZIP,  /* a gzip file */
    SPOOL_ZSTD,  /* a zstd file */
};

/* What path needs: SPOOL_STDIN for "-", SPOOL_PIPE for a FIFO, SPOOL_GZIP / SPOOL_ZSTD by a regular file's
 * first bytes, else SPOOL_NONE (also for a file that cannot be opened or is neither a regular file nor a
 * FIFO: the caller's own checks say why; a pipe's bytes are never read here, only by spool_copy). */
enum spool_kind spool_kind_of(const char *path);

/* Copies src ("-": standard input; a FIFO is opened and read once) to the regular file dst, decompressed when
 * its first bytes say gzip or zstd. *changed = 1 when dst existed before with other content (0 when it did
 * not exist or was the same). On failure dst is as it was and the temporary file is removed; the message
 * names src and what failed ("backlog x.gz: corrupt gzip data at byte 1234"). */
int spool_copy(const char *src, const char *dst, int *changed, struct err *e);

#endif
