/* faultio — an LD_PRELOAD shim for I/O fault injection (tests/e2e_run_faults.sh builds it with
 * `cc -shared -fPIC tests/faultio.c -o faultio.so -ldl`).
 *
 * It counts the write-class calls (write, pwrite, pwrite64, writev) and sync calls (fsync, fdatasync) made
 * on regular files (terminals and pipes are not counted: log lines are not the run's I/O), whoever makes
 * them: nightshift itself (output files, the run record, the model-hash cache) and SQLite (the database and
 * its WAL). Environment:
 *   FAULTIO_AT=N       the Nth counted call fails (once) with FAULTIO_ERRNO (default EIO; "ENOSPC" accepted)
 *   FAULTIO_COUNT=PATH at exit, the number of counted calls is written to PATH (a clean run's total, to sweep)
 *   FAULTIO_KIND=read  count (and fail) the read-class calls instead (read, pread, pread64, readv): the
 *                      backlog read and read again, the store's pages, the output files being repaired
 * Nothing else changes: every other call goes to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static long faultio_calls, faultio_at = -1;
static int faultio_errno = EIO, faultio_reads;

__attribute__((constructor)) static void faultio_init(void)
{
    const char *at = getenv("FAULTIO_AT"), *en = getenv("FAULTIO_ERRNO"), *kind = getenv("FAULTIO_KIND");
    if (at && *at) faultio_at = strtol(at, NULL, 10);
    if (en && !strcmp(en, "ENOSPC")) faultio_errno = ENOSPC;
    faultio_reads = kind && !strcmp(kind, "read");
}

/* 1 when this call on fd (a read when is_read) is the one to fail. */
static int faultio_hit(int fd, int is_read)
{
    struct stat st;
    if (is_read != faultio_reads || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    long n = __atomic_add_fetch(&faultio_calls, 1, __ATOMIC_SEQ_CST);
    if (n != faultio_at) return 0;
    errno = faultio_errno;
    return 1;
}

/* The C library's own function (the next definition after this shim's). */
#define REAL(name)                                                                                           \
    static __typeof__(name) *real_##name;                                                                    \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(write);
    return faultio_hit(fd, 0) ? -1 : real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite);
    return faultio_hit(fd, 0) ? -1 : real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    REAL(pwrite64);
    return faultio_hit(fd, 0) ? -1 : real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
    REAL(writev);
    return faultio_hit(fd, 0) ? -1 : real_writev(fd, iov, n);
}

int fsync(int fd)
{
    REAL(fsync);
    return faultio_hit(fd, 0) ? -1 : real_fsync(fd);
}

int fdatasync(int fd)
{
    REAL(fdatasync);
    return faultio_hit(fd, 0) ? -1 : real_fdatasync(fd);
}

ssize_t read(int fd, void *buf, size_t n)
{
    REAL(read);
    return faultio_hit(fd, 1) ? -1 : real_read(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    REAL(pread);
    return faultio_hit(fd, 1) ? -1 : real_pread(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    REAL(pread64);
    return faultio_hit(fd, 1) ? -1 : real_pread64(fd, buf, n, off);
}

ssize_t readv(int fd, const struct iovec *iov, int n)
{
    REAL(readv);
    return faultio_hit(fd, 1) ? -1 : real_readv(fd, iov, n);
}

__attribute__((destructor)) static void faultio_report(void)
{
    const char *path = getenv("FAULTIO_COUNT");
    if (!path || !*path) return;
    char line[32];
    int len = snprintf(line, sizeof line, "%ld\n", faultio_calls);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    REAL(write);
    if (real_write(fd, line, (size_t)len) < 0) { /* nothing to do: the count is only for the sweep */
    }
    close(fd);
}
