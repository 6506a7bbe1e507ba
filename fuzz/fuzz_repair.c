/* fuzz_repair — libFuzzer target for the output-file repair reader (jobs/output: output_repair against the
 * store's scheduled lines, as jobs/reconcile runs it on every start).
 *
 * Input: byte 0: how many line rows the store holds (0..15) and how the file is made (bits 4-5); then for
 * each row a length byte (0..63) and its bytes; the rest is file material. The file is: the rest as it is
 * (mode 0), or the rows' concatenation cut at a point (1), with one byte changed (2), or with the rest
 * appended (3): a torn tail, a diverged line, stray bytes. Whatever the file holds, output_repair must make
 * it exactly the concatenation of the rows (keeping the longest correct prefix) and leave the write
 * position at its end; the counts add up.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/output.h"
#include "jobs/store.h"
#include "util/log.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static store *st;
static char dir[64], db[256], path[256];

/* The store and file live in a temporary folder (on tmpfs when there is one: no disk per input), removed at
 * exit. */
static void cleanup(void)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char p[300];
    store_close(st);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", db, suffix[i]);
        unlink(p);
    }
    unlink(path);
    rmdir(dir);
}

static int collect(void *user, const struct store_line *l)
{
    int64_t *ids = user;
    if (ids[0] < 64) ids[1 + ids[0]++] = l->id;
    return 0;
}

/* The store's rows for file 0 become rows[0..n) (lengths len[i]), contiguous from offset 0. */
static void set_rows(const uint8_t *const *rows, const size_t *len, int n)
{
    struct err e;
    int64_t ids[65] = {0};
    REQUIRE(store_begin(st, &e) == 0);
    REQUIRE(store_foreach_line(st, collect, ids, &e) == 0);
    for (int64_t i = 0; i < ids[0]; i++) REQUIRE(store_delete_line(st, ids[1 + i], &e) == 0);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        struct store_line l = {0, i + 1, {0}, STORE_FILE_OUTPUT, off, (const char *)rows[i], len[i]};
        int64_t id;
        REQUIRE(store_put_line(st, &l, &id, &e) == 0);
        off += (int64_t)len[i];
    }
    REQUIRE(store_commit(st, &e) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e;
    if (!st) {
        log_set_level(LOG_QUIET);
        snprintf(dir, sizeof dir, "/dev/shm/ns_fuzz_repair_XXXXXX");
        if (!mkdtemp(dir)) {
            snprintf(dir, sizeof dir, "/tmp/ns_fuzz_repair_XXXXXX");
            REQUIRE(mkdtemp(dir) != NULL);
        }
        snprintf(db, sizeof db, "%s/s.db", dir);
        snprintf(path, sizeof path, "%s/out.jsonl", dir);
        REQUIRE(store_open(db, STORE_DURABILITY_NORMAL, &st, &e) == 0);
        atexit(cleanup);
    }
    if (size == 0) return 0;
    size_t at = 1;
    int n_rows = data[0] & 15, mode = data[0] >> 4 & 3;
    const uint8_t *rows[16];
    size_t len[16], total = 0;
    int n = 0;
    for (; n < n_rows && at < size; n++) {
        size_t k = data[at++] & 63;
        if (k > size - at) k = size - at;
        rows[n] = data + at;
        len[n] = k;
        total += k;
        at += k;
    }
    set_rows(rows, len, n);
    uint8_t *want = malloc(total + 1);
    REQUIRE(want);
    size_t off = 0;
    for (int i = 0; i < n; i++) memcpy(want + off, rows[i], len[i]), off += len[i];

    /* the file as found */
    const uint8_t *rest = data + at;
    size_t n_rest = size - at, cut = n_rest ? rest[0] % (total + 1) : total;
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    if (mode == 0) fwrite(rest, 1, n_rest, f);
    else if (mode == 1) fwrite(want, 1, cut, f);
    else if (mode == 2) {
        fwrite(want, 1, total, f);
        if (total) {
            REQUIRE(fseek(f, (long)(cut < total ? cut : total - 1), SEEK_SET) == 0);
            fputc(n_rest > 1 ? rest[1] : 'x', f);
        }
    } else {
        fwrite(want, 1, total, f);
        fwrite(rest, 1, n_rest, f);
    }
    REQUIRE(fclose(f) == 0);

    output_file *of = NULL;
    REQUIRE(output_open(path, &of, &e) == 0);
    struct output_repair_stats rs;
    REQUIRE(output_repair(of, st, STORE_FILE_OUTPUT, &rs, &e) == 0);
    REQUIRE(output_size(of) == (int64_t)total);
    REQUIRE(rs.lines_kept + rs.lines_rewritten == n);
    REQUIRE(output_append(of, "z", 1, &e) == 0); /* the write position is the end */
    output_close(of);
    size_t got_n = 0;
    f = fopen(path, "rb");
    REQUIRE(f);
    uint8_t *got = malloc(total + 2);
    REQUIRE(got);
    got_n = fread(got, 1, total + 2, f);
    fclose(f);
    REQUIRE(got_n == total + 1 && !memcmp(got, want, total) && got[total] == 'z');
    free(got);
    free(want);
    return 0;
}
