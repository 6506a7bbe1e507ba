/* store — see store.h.
 *
 * Invariant (store_check): for each file, the `lines` rows with an offset, sorted by offset, start at 0
 * and each begins where the previous one ends (off + length(text)); every text ends in '\n'; every
 * result has status DONE or FAILED, and a FAILED one has an error message.
 *
 * Every SQLite call goes through SQL_OK(), which records the file:line of the failing call.
 */
#include "jobs/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <sqlite3.h>

#define STORE_SCHEMA "2"

struct store {
    sqlite3 *db;
    char *path;
    int lock_fd;
    sqlite3_stmt *st_begin, *st_commit, *st_rollback;
    sqlite3_stmt *st_meta_get, *st_meta_set;
    sqlite3_stmt *st_put_result, *st_get_result;
    sqlite3_stmt *st_put_line, *st_set_off, *st_del_line;
};

static int sql_fail(store *s, struct err *e, const char *what, int rc, const char *file, int line)
{
    return err_set(e, "%s: %s: %s (sqlite %d, %s:%d)", s->path, what, s->db ? sqlite3_errmsg(s->db) : "?", rc, file,
                   line);
}

/* rc must be one of the given success codes. */
#define SQL_OK(rc_expr, what)                                                                           \
    do {                                                                                                \
        int rc_ = (rc_expr);                                                                            \
        if (rc_ != SQLITE_OK && rc_ != SQLITE_DONE && rc_ != SQLITE_ROW)                                \
            return sql_fail(s, e, (what), rc_, __FILE__, __LINE__);                                     \
    } while (0)

/* Runs sql (no rows); a failure names what was being done ("what"), not the SQL text. */
static int exec(store *s, const char *what, const char *sql, struct err *e)
{
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        err_set(e, "%s: %s: %s", s->path, what, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int prep(store *s, sqlite3_stmt **st, const char *sql, struct err *e)
{
    SQL_OK(sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL), sql);
    return 0;
}

/* Runs a prepared statement that returns no rows, then resets it. */
static int step_done(store *s, sqlite3_stmt *st, const char *what, struct err *e)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) return sql_fail(s, e, what, rc, __FILE__, __LINE__);
    return 0;
}

int store_open(const char *path, enum store_durability d, store **out, struct err *e)
{
    *out = NULL;
    store *s = calloc(1, sizeof *s);
    if (!s) return err_set(e, "out of memory");
    s->lock_fd = -1;
    s->path = strdup(path);
    if (!s->path) {
        free(s);
        return err_set(e, "out of memory");
    }
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lock_fd < 0) {
        err_set(e, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        err_set(e, "%s: the store is in use by another nightshift process", path);
        goto fail;
    }
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        err_set(e, "%s: cannot open: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    /* A file that is not a database fails here with "file is not a database". */
    if (exec(s, "opening it in WAL mode", "PRAGMA journal_mode=WAL", e) != 0) goto fail;
    const char *sync = d == STORE_DURABILITY_FULL ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
    if (exec(s, "setting its durability", sync, e) != 0)
        goto fail;
    /* cache_size 2 MiB: rows are appended, and every cached page is resident (bench/NOTES.md, 2026-12-08) */
    if (exec(s, "creating its tables",
             "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-2048; PRAGMA wal_autocheckpoint=8192;"
             "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);"
             "CREATE TABLE IF NOT EXISTS results(id INTEGER PRIMARY KEY, key BLOB NOT NULL,"
             " status INTEGER NOT NULL, finish INTEGER NOT NULL, text BLOB NOT NULL, n_prompt INTEGER NOT NULL,"
             " n_gen INTEGER NOT NULL, n_cached INTEGER NOT NULL, created INTEGER NOT NULL, error TEXT);"
             "CREATE TABLE IF NOT EXISTS lines(id INTEGER PRIMARY KEY, line INTEGER NOT NULL,"
             " digest BLOB NOT NULL, file INTEGER NOT NULL, off INTEGER, text BLOB NOT NULL);"
             "CREATE INDEX IF NOT EXISTS lines_by_off ON lines(file, off) WHERE off IS NOT NULL;",
             e) != 0)
        goto fail;
    if (prep(s, &s->st_begin, "BEGIN IMMEDIATE", e) || prep(s, &s->st_commit, "COMMIT", e) ||
        prep(s, &s->st_rollback, "ROLLBACK", e) || prep(s, &s->st_meta_get, "SELECT v FROM meta WHERE k = ?", e) ||
        prep(s, &s->st_meta_set, "INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", e) ||
        prep(s, &s->st_put_result,
             "INSERT INTO results(key, status, finish, text, n_prompt, n_gen, n_cached, created, error)"
             " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
             e) ||
        prep(s, &s->st_get_result,
             "SELECT status, finish, text, n_prompt, n_gen, n_cached, created, error, key FROM results WHERE id = ?",
             e) ||
        prep(s, &s->st_put_line, "INSERT INTO lines(line, digest, file, off, text) VALUES (?, ?, ?, ?, ?)", e) ||
        prep(s, &s->st_set_off, "UPDATE lines SET off = ? WHERE id = ?", e) ||
        prep(s, &s->st_del_line, "DELETE FROM lines WHERE id = ?", e))
        goto fail;
    char *schema = NULL;
    if (store_meta_get(s, "schema", &schema, e) != 0) goto fail;
    if (schema && strcmp(schema, STORE_SCHEMA)) {
        err_set(e, "%s: store schema %s, this nightshift reads schema %s", path, schema, STORE_SCHEMA);
        free(schema);
        goto fail;
    }
    if (!schema && store_meta_set(s, "schema", STORE_SCHEMA, e) != 0) goto fail;
    free(schema);
    *out = s;
    return 0;
fail:
    store_close(s);
    return -1;
}

void store_close(store *s)
{
    if (!s) return;
    sqlite3_stmt *all[] = {s->st_begin,      s->st_commit,   s->st_rollback, s->st_meta_get, s->st_meta_set,
                           s->st_put_result, s->st_get_result, s->st_put_line, s->st_set_off,  s->st_del_line};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sqlite3_finalize(all[i]);
    if (s->db) sqlite3_close(s->db);
    /* closed only after SQLite has released its own (fcntl) locks on the same file */
    if (s->lock_fd >= 0) close(s->lock_fd);
    free(s->path);
    free(s);
}

int store_meta_get(store *s, const char *k, char **v, struct err *e)
{
    *v = NULL;
    sqlite3_bind_text(s->st_meta_get, 1, k, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->st_meta_get);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s->st_meta_get, 0);
        *v = strdup(t ? t : "");
    }
    sqlite3_reset(s->st_meta_get);
    sqlite3_clear_bindings(s->st_meta_get);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_fail(s, e, "meta get", rc, __FILE__, __LINE__);
    if (rc == SQLITE_ROW && !*v) return err_set(e, "out of memory");
    return 0;
}

int store_meta_set(store *s, const char *k, const char *v, struct err *e)
{
    sqlite3_bind_text(s->st_meta_set, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(s->st_meta_set, 2, v, -1, SQLITE_STATIC);
    return step_done(s, s->st_meta_set, "meta set", e);
}

int store_begin(store *s, struct err *e) { return step_done(s, s->st_begin, "BEGIN", e); }
int store_commit(store *s, struct err *e) { return step_done(s, s->st_commit, "COMMIT", e); }

void store_rollback(store *s)
{
    if (!sqlite3_get_autocommit(s->db)) {
        sqlite3_step(s->st_rollback);
        sqlite3_reset(s->st_rollback);
    }
}

int store_put_result(store *s, const struct store_result *r, int64_t *id, struct err *e)
{
    sqlite3_stmt *st = s->st_put_result;
    sqlite3_bind_blob(st, 1, r->key, 32, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->status);
    sqlite3_bind_int(st, 3, r->finish);
    sqlite3_bind_blob64(st, 4, r->text_len ? r->text : "", r->text_len, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, r->n_prompt);
    sqlite3_bind_int(st, 6, r->n_gen);
    sqlite3_bind_int(st, 7, r->n_cached);
    sqlite3_bind_int64(st, 8, r->created);
    if (r->error) sqlite3_bind_text(st, 9, r->error, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, 9);
    if (step_done(s, st, "put result", e)) return -1;
    if (id) *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_get_result(store *s, int64_t id, struct store_result *out, int *found, struct err *e)
{
    memset(out, 0, sizeof *out);
    *found = 0;
    sqlite3_stmt *st = s->st_get_result;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    int oom = 0;
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 8) == 32) memcpy(out->key, sqlite3_column_blob(st, 8), 32);
        out->status = sqlite3_column_int(st, 0);
        out->finish = sqlite3_column_int(st, 1);
        size_t n = (size_t)sqlite3_column_bytes(st, 2);
        const void *t = sqlite3_column_blob(st, 2);
        char *text = malloc(n + 1);
        if (text) {
            if (n) memcpy(text, t, n);
            text[n] = '\0';
        }
        out->text = text;
        out->text_len = n;
        out->n_prompt = sqlite3_column_int(st, 3);
        out->n_gen = sqlite3_column_int(st, 4);
        out->n_cached = sqlite3_column_int(st, 5);
        out->created = sqlite3_column_int64(st, 6);
        const char *er = (const char *)sqlite3_column_text(st, 7);
        out->error = er ? strdup(er) : NULL;
        oom = !text || (er && !out->error);
        *found = 1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_fail(s, e, "get result", rc, __FILE__, __LINE__);
    if (oom) {
        free((char *)out->text);
        free((char *)out->error);
        memset(out, 0, sizeof *out);
        *found = 0;
        return err_set(e, "out of memory");
    }
    return 0;
}

int store_foreach_status(store *s, store_status_fn cb, void *user, struct err *e)
{
    sqlite3_stmt *st;
    SQL_OK(sqlite3_prepare_v2(s->db, "SELECT id, key, status FROM results", -1, &st, NULL), "scan results");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 1) != 32) continue;
        cb(user, sqlite3_column_int64(st, 0), sqlite3_column_blob(st, 1), sqlite3_column_int(st, 2));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return sql_fail(s, e, "scan results", rc, __FILE__, __LINE__);
    return 0;
}

int store_delete_failed(store *s, int64_t *n, struct err *e)
{
    if (exec(s, "deleting the failed results", "DELETE FROM results WHERE status = 2", e) != 0) return -1;
    *n = sqlite3_changes64(s->db);
    return 0;
}

int64_t store_n_results(store *s, int status)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM results WHERE status = ?", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int(st, 1, status);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

int store_put_line(store *s, const struct store_line *l, int64_t *id, struct err *e)
{
    sqlite3_stmt *st = s->st_put_line;
    sqlite3_bind_int64(st, 1, l->line);
    sqlite3_bind_blob(st, 2, l->digest, 32, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, l->file);
    if (l->off >= 0) sqlite3_bind_int64(st, 4, l->off);
    else sqlite3_bind_null(st, 4);
    sqlite3_bind_blob64(st, 5, l->text, l->len, SQLITE_STATIC);
    if (step_done(s, st, "put line", e)) return -1;
    if (id) *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_set_line_off(store *s, int64_t id, int64_t off, struct err *e)
{
    sqlite3_stmt *st = s->st_set_off;
    if (off >= 0) sqlite3_bind_int64(st, 1, off);
    else sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, id);
    return step_done(s, st, "set line offset", e);
}

int store_delete_line(store *s, int64_t id, struct err *e)
{
    sqlite3_bind_int64(s->st_del_line, 1, id);
    return step_done(s, s->st_del_line, "delete line", e);
}

static int scan_lines(store *s, sqlite3_stmt *st, int with_text, store_line_fn cb, void *user, struct err *e)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_line l;
        memset(&l, 0, sizeof l);
        l.id = sqlite3_column_int64(st, 0);
        l.line = sqlite3_column_int64(st, 1);
        if (sqlite3_column_bytes(st, 2) == 32) memcpy(l.digest, sqlite3_column_blob(st, 2), 32);
        l.file = sqlite3_column_int(st, 3);
        l.off = sqlite3_column_type(st, 4) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 4);
        l.len = (size_t)sqlite3_column_int64(st, 5);
        if (with_text) {
            l.text = sqlite3_column_blob(st, 6);
            if (!l.text) l.text = "";
        }
        if (cb(user, &l) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return sql_fail(s, e, "scan lines", rc, __FILE__, __LINE__);
    return 0;
}

int store_foreach_line(store *s, store_line_fn cb, void *user, struct err *e)
{
    sqlite3_stmt *st;
    SQL_OK(sqlite3_prepare_v2(s->db, "SELECT id, line, digest, file, off, length(text) FROM lines", -1, &st, NULL),
           "scan lines");
    return scan_lines(s, st, 0, cb, user, e);
}

int store_foreach_emitted(store *s, int file, store_line_fn cb, void *user, struct err *e)
{
    sqlite3_stmt *st;
    SQL_OK(sqlite3_prepare_v2(s->db,
                              "SELECT id, line, digest, file, off, length(text), text FROM lines"
                              " WHERE file = ? AND off IS NOT NULL ORDER BY off",
                              -1, &st, NULL),
           "scan emitted lines");
    sqlite3_bind_int(st, 1, file);
    return scan_lines(s, st, 1, cb, user, e);
}

int store_compact_offsets(store *s, int file, int64_t *end, struct err *e)
{
    sqlite3_stmt *st;
    SQL_OK(sqlite3_prepare_v2(s->db,
                              "SELECT id, off, length(text) FROM lines WHERE file = ? AND off IS NOT NULL ORDER BY off",
                              -1, &st, NULL),
           "compact offsets");
    sqlite3_bind_int(st, 1, file);
    size_t n = 0, cap = 0;
    int64_t(*rows)[3] = NULL;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            void *nr = realloc(rows, cap * sizeof *rows);
            if (!nr) {
                sqlite3_finalize(st);
                free(rows);
                return err_set(e, "out of memory");
            }
            rows = nr;
        }
        rows[n][0] = sqlite3_column_int64(st, 0);
        rows[n][1] = sqlite3_column_int64(st, 1);
        rows[n][2] = sqlite3_column_int64(st, 2);
        n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(rows);
        return sql_fail(s, e, "compact offsets", rc, __FILE__, __LINE__);
    }
    int64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i][1] != off && store_set_line_off(s, rows[i][0], off, e) != 0) {
            free(rows);
            return -1;
        }
        off += rows[i][2];
    }
    free(rows);
    *end = off;
    return 0;
}

struct check_state {
    int64_t expect;
    int64_t bad_line;
    const char *why;
};

static int check_row(void *user, const struct store_line *l)
{
    struct check_state *c = user;
    if (l->off != c->expect) c->why = "offset gap or overlap";
    else if (l->len == 0 || l->text[l->len - 1] != '\n') c->why = "line text does not end in a newline";
    if (c->why) {
        c->bad_line = l->line;
        return 1;
    }
    c->expect += (int64_t)l->len;
    return 0;
}

int store_check(store *s, struct err *e)
{
    for (int file = 0; file < 2; file++) {
        struct check_state c = {0, 0, NULL};
        if (store_foreach_emitted(s, file, check_row, &c, e) != 0) return -1;
        if (c.why)
            return err_set(e, "%s: store_check: %s file, backlog line %lld: %s", s->path, file ? "errors" : "output",
                           (long long)c.bad_line, c.why);
    }
    sqlite3_stmt *st;
    SQL_OK(sqlite3_prepare_v2(s->db,
                              "SELECT count(*) FROM results WHERE status NOT IN (1, 2)"
                              " OR (status = 2 AND error IS NULL) OR length(key) != 32",
                              -1, &st, NULL),
           "check results");
    int64_t bad = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (bad != 0) return err_set(e, "%s: store_check: %lld malformed result rows", s->path, (long long)bad);
    return 0;
}

int store_integrity_check(const char *path, char **result, struct err *e)
{
    *result = NULL;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        err_set(e, "%s: cannot open: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL);
    size_t len = 0;
    char *acc = NULL;
    while (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        size_t n = t ? strlen(t) : 0;
        char *na = realloc(acc, len + n + 2);
        if (!na) break;
        acc = na;
        if (len) acc[len++] = '\n';
        memcpy(acc + len, t ? t : "", n);
        len += n;
        acc[len] = '\0';
    }
    if (rc != SQLITE_DONE) {
        err_set(e, "%s: integrity_check: %s", path, sqlite3_errmsg(db));
        free(acc);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return -1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    *result = acc ? acc : strdup("");
    return 0;
}
