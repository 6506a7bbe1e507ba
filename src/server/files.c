/* files — see files.h. */
#include "server/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct files {
    struct files_params p;
    char dir[4096];
    pthread_mutex_t mu;
    int32_t n_files; /* under mu: objects on disk + uploads reserved (begun, not finished) */
};

struct files_upload {
    char part[4200];
    int fd;
    uint64_t bytes, max_bytes;
    int too_big;
};

/* 24 random hex digits after prefix: a name nobody else has. */
static int random_name(const char *prefix, char *buf, size_t cap)
{
    uint8_t r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    int n = snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%02x", r[i]);
    return 0;
}

int files_valid_id(const char *id)
{
    size_t np = strlen(FILES_ID_PREFIX);
    if (!id || strlen(id) != FILES_ID_LEN || strncmp(id, FILES_ID_PREFIX, np)) return 0;
    for (const char *c = id + np; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return 0;
    return 1;
}

static void path_of(const files *f, const char *name, const char *ext, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s%s", f->dir, name, ext);
}

/* Counts the file objects and removes partial uploads. */
static int scan_dir(files *f, struct err *e)
{
    DIR *d = opendir(f->dir);
    if (!d) return err_set(e, "files %s: %s", f->dir, strerror(errno));
    struct dirent *de;
    char path[4400];
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > 5 && !strcmp(de->d_name + n - 5, ".part") && !strncmp(de->d_name, "upload-", 7)) {
            snprintf(path, sizeof path, "%s/%s", f->dir, de->d_name);
            unlink(path);
        } else if (n == FILES_ID_LEN + 5 && !strcmp(de->d_name + FILES_ID_LEN, ".json")) {
            f->n_files++;
        }
    }
    closedir(d);
    return 0;
}

int files_open(const struct files_params *p, files **out, struct err *e)
{
    *out = NULL;
    if (!p->dir || strlen(p->dir) >= 4000) return err_set(e, "files: no directory, or its path is too long");
    if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) return err_set(e, "files %s: %s", p->dir, strerror(errno));
    files *f = calloc(1, sizeof *f);
    if (!f) return err_set(e, "files: out of memory");
    f->p = *p;
    snprintf(f->dir, sizeof f->dir, "%s", p->dir);
    f->p.dir = f->dir;
    if (pthread_mutex_init(&f->mu, NULL)) {
        free(f);
        return err_set(e, "files: cannot create a lock");
    }
    if (scan_dir(f, e)) {
        files_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void files_close(files *f)
{
    if (!f) return;
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int32_t files_count(files *f)
{
    pthread_mutex_lock(&f->mu);
    int32_t n = f->n_files;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Reserves room for one more file: 1 when max_files is reached. */
static int reserve(files *f)
{
    pthread_mutex_lock(&f->mu);
    int full = f->n_files >= f->p.max_files;
    if (!full) f->n_files++;
    pthread_mutex_unlock(&f->mu);
    return full;
}

static void unreserve(files *f)
{
    pthread_mutex_lock(&f->mu);
    f->n_files--;
    pthread_mutex_unlock(&f->mu);
}

int files_upload_begin(files *f, files_upload **out, struct err *e)
{
    *out = NULL;
    files_upload *u = calloc(1, sizeof *u);
    if (!u) return err_set(e, "files: out of memory");
    char name[64];
    if (random_name("upload-", name, sizeof name)) {
        free(u);
        return err_set(e, "files: no random numbers from the system");
    }
    snprintf(u->part, sizeof u->part, "%s/%s.part", f->dir, name);
    u->max_bytes = f->p.max_bytes;
    u->fd = open(u->part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (u->fd < 0) {
        err_set(e, "files: creating an upload in %s: %s", f->dir, strerror(errno));
        free(u);
        return -1;
    }
    *out = u;
    return 0;
}

int files_upload_write(files_upload *u, const void *p, size_t n, struct err *e)
{
    if (u->too_big) return 1;
    if (n == 0) return 0;
    /* the cap: max_bytes - bytes without overflow (bytes <= max_bytes holds here) */
    if ((uint64_t)n > u->max_bytes - u->bytes) {
        u->too_big = 1;
        return 1;
    }
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(u->fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return err_set(e, "files: writing an upload: %s", w < 0 ? strerror(errno) : "short write");
        c += w;
        n -= (size_t)w;
        u->bytes += (uint64_t)w;
    }
    return 0;
}

uint64_t files_upload_bytes(const files_upload *u)
{
    return u->bytes;
}

void files_upload_abort(files_upload *u)
{
    if (!u) return;
    if (u->fd >= 0) close(u->fd);
    unlink(u->part);
    free(u);
}

/* Writes id's object atomically (ID.json.tmp, renamed), after its bytes are in place. */
static int write_object(files *f, const char *id, json_t *obj, struct err *e)
{
    char path[4400], tmp[4400];
    path_of(f, id, ".json", path, sizeof path);
    path_of(f, id, ".json.tmp", tmp, sizeof tmp);
    if (json_dump_file(obj, tmp, JSON_COMPACT) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return err_set(e, "files: writing %s: %s", path, strerror(errno));
    }
    return 0;
}

static json_t *file_object(const char *id, uint64_t bytes, const char *purpose, const char *filename)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:n}", "id", id, "object", "file", "bytes",
                     (json_int_t)bytes, "created_at", (json_int_t)time(NULL), "filename", filename, "purpose",
                     purpose, "status", "processed", "status_details");
}

int files_upload_finish(files *f, files_upload *u, const char *purpose, const char *filename, json_t **obj,
                        struct err *e)
{
    *obj = NULL;
    char id[64], path[4400];
    int rc = -1;
    if (reserve(f)) {
        files_upload_abort(u);
        return 1;
    }
    if (fsync(u->fd) != 0 || close(u->fd) != 0) {
        u->fd = -1;
        err_set(e, "files: saving an upload: %s", strerror(errno));
        goto fail;
    }
    u->fd = -1;
    if (random_name(FILES_ID_PREFIX, id, sizeof id)) {
        err_set(e, "files: no random numbers from the system");
        goto fail;
    }
    path_of(f, id, ".jsonl", path, sizeof path);
    if (rename(u->part, path) != 0) {
        err_set(e, "files: saving an upload as %s: %s", path, strerror(errno));
        goto fail;
    }
    json_t *o = file_object(id, u->bytes, purpose, filename);
    if (!o || write_object(f, id, o, e)) {
        if (!o) err_set(e, "files: out of memory");
        json_decref(o);
        unlink(path);
        goto fail;
    }
    *obj = o;
    free(u);
    return 0;
fail:
    unreserve(f);
    files_upload_abort(u);
    return rc;
}

int files_adopt(files *f, const char *src, const char *purpose, const char *filename, json_t **obj, struct err *e)
{
    *obj = NULL;
    char id[64], path[4400];
    struct stat st;
    if (stat(src, &st) != 0) return err_set(e, "files: %s: %s", src, strerror(errno));
    if (reserve(f)) return 1;
    if (random_name(FILES_ID_PREFIX, id, sizeof id)) {
        unreserve(f);
        return err_set(e, "files: no random numbers from the system");
    }
    path_of(f, id, ".jsonl", path, sizeof path);
    if (link(src, path) != 0) {
        unreserve(f);
        return err_set(e, "files: linking %s as %s: %s", src, path, strerror(errno));
    }
    json_t *o = file_object(id, (uint64_t)st.st_size, purpose, filename);
    if (!o || write_object(f, id, o, e)) {
        if (!o) err_set(e, "files: out of memory");
        json_decref(o);
        unlink(path);
        unreserve(f);
        return -1;
    }
    *obj = o;
    return 0;
}

int files_get(files *f, const char *id, json_t **obj)
{
    *obj = NULL;
    if (!files_valid_id(id)) return 1;
    char path[4400];
    path_of(f, id, ".json", path, sizeof path);
    json_error_t je;
    *obj = json_load_file(path, 0, &je);
    return *obj && json_is_object(*obj) ? 0 : (json_decref(*obj), *obj = NULL, 1);
}

int files_content_path(const files *f, const char *id, char *buf, size_t cap)
{
    if (!files_valid_id(id)) return 1;
    path_of(f, id, ".jsonl", buf, cap);
    return 0;
}

int files_open_content(files *f, const char *id, int *fd, uint64_t *size)
{
    char path[4400], meta[4400];
    struct stat st;
    if (files_content_path(f, id, path, sizeof path)) return 1;
    path_of(f, id, ".json", meta, sizeof meta);
    if (access(meta, F_OK) != 0) return 1; /* not whole yet (or none) */
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return 1;
    if (fstat(*fd, &st) != 0) {
        close(*fd);
        return 1;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}
