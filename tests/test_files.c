/* Tests for server/files: ids (only the server's shape reaches a path), uploads (bytes kept, the size cap,
 * aborted uploads leave nothing), objects read back, content, adoption by hard link, the cap on the number
 * of files, and partial uploads removed at open. */
#include "server/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

static char dir[] = "/tmp/ns_test_files_XXXXXX";

static int n_entries(const char *d, const char *suffix)
{
    DIR *dd = opendir(d);
    int n = 0;
    struct dirent *de;
    while (dd && (de = readdir(dd))) {
        size_t k = strlen(de->d_name), s = strlen(suffix);
        n += k > s && !strcmp(de->d_name + k - s, suffix);
    }
    if (dd) closedir(dd);
    return n;
}

static files *open_store(const char *sub, uint64_t max_bytes, int32_t max_files)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    struct files_params p = {path, max_bytes, max_files};
    files *f = NULL;
    struct err e;
    if (files_open(&p, &f, &e)) fprintf(stderr, "%s\n", e.msg);
    return f;
}

TEST(files_ids)
{
    CHECK(files_valid_id("file-0123456789abcdef01234567"));
    CHECK(!files_valid_id("file-0123456789abcdef0123456"));   /* short */
    CHECK(!files_valid_id("file-0123456789abcdef012345678")); /* long */
    CHECK(!files_valid_id("file-0123456789ABCDEF01234567"));  /* capitals */
    CHECK(!files_valid_id("file-../../../../etc/passwd0000"));
    CHECK(!files_valid_id("x"));
    CHECK(!files_valid_id(NULL));
}

TEST(files_upload_round_trip)
{
    files *f = open_store("a", 100, 10);
    CHECK(f != NULL);
    if (!f) return;
    struct err e;
    files_upload *u;
    CHECK(files_upload_begin(f, &u, &e) == 0);
    CHECK(files_upload_write(u, "{\"a\":1}\n", 8, &e) == 0);
    CHECK(files_upload_write(u, "{\"b\":2}\n", 8, &e) == 0);
    CHECK(files_upload_bytes(u) == 16);
    json_t *obj;
    CHECK(files_upload_finish(f, u, "batch", "x.jsonl", &obj, &e) == 0);
    const char *id = json_string_value(json_object_get(obj, "id"));
    CHECK(files_valid_id(id));
    CHECK_EQ_INT(json_integer_value(json_object_get(obj, "bytes")), 16);
    json_t *back;
    CHECK(files_get(f, id, &back) == 0 && json_equal(back, obj));
    json_decref(back);
    int fd;
    uint64_t size;
    CHECK(files_open_content(f, id, &fd, &size) == 0 && size == 16);
    char buf[32] = {0};
    CHECK(read(fd, buf, sizeof buf) == 16 && !memcmp(buf, "{\"a\":1}\n{\"b\":2}\n", 16));
    close(fd);
    CHECK(files_get(f, "file-000000000000000000000000", &back) == 1);
    CHECK(files_open_content(f, "file-000000000000000000000000", &fd, &size) == 1);
    /* adoption: a hard link under a new id */
    char src[300];
    snprintf(src, sizeof src, "%s/a/%s.jsonl", dir, id);
    json_t *ad;
    CHECK(files_adopt(f, src, "batch_output", "out.jsonl", &ad, &e) == 0);
    CHECK(strcmp(json_string_value(json_object_get(ad, "id")), id) != 0);
    CHECK_STR(json_string_value(json_object_get(ad, "purpose")), "batch_output");
    CHECK_EQ_INT(files_count(f), 2);
    json_decref(back);
    json_decref(ad);
    json_decref(obj);
    files_close(f);
}

TEST(files_caps)
{
    files *f = open_store("b", 10, 1);
    CHECK(f != NULL);
    if (!f) return;
    struct err e;
    files_upload *u;
    /* over max_bytes: refused, and the partial file goes away */
    CHECK(files_upload_begin(f, &u, &e) == 0);
    CHECK(files_upload_write(u, "0123456789", 10, &e) == 0);
    CHECK(files_upload_write(u, "x", 1, &e) == 1);
    CHECK(files_upload_write(u, "y", 1, &e) == 1);
    files_upload_abort(u);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/b", dir);
    CHECK_EQ_INT(n_entries(sub, ".part"), 0);
    /* max_files: the second file is refused */
    json_t *obj;
    CHECK(files_upload_begin(f, &u, &e) == 0);
    CHECK(files_upload_finish(f, u, "batch", "1", &obj, &e) == 0);
    json_decref(obj);
    CHECK(files_upload_begin(f, &u, &e) == 0);
    CHECK(files_upload_finish(f, u, "batch", "2", &obj, &e) == 1);
    CHECK_EQ_INT(files_count(f), 1);
    CHECK_EQ_INT(n_entries(sub, ".jsonl"), 1);
    /* a partial upload left by a crash is removed at open; the count is read back */
    CHECK(files_upload_begin(f, &u, &e) == 0);
    files_close(f);
    CHECK_EQ_INT(n_entries(sub, ".part"), 1);
    f = open_store("b", 10, 1);
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ_INT(n_entries(sub, ".part"), 0);
    CHECK_EQ_INT(files_count(f), 1);
    files_close(f);
    files_upload_abort(u); /* its file was removed by the open above */
}

int main(void)
{
    if (!mkdtemp(dir)) return 1;
    RUN(files_ids);
    RUN(files_upload_round_trip);
    RUN(files_caps);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}
