/* Tests for server/batches without a runner (no batch runs here: tests/e2e_serve_batch.sh runs them through
 * a real server): create checks its fields and the input file (404 unknown, 400 wrong purpose, unknown
 * fields, endpoint, window, metadata), ids are the server's, list is newest first with after/limit, cancel
 * of a queued batch, the cap on batches, the invariant after every call, and everything read back by a
 * new open of the same directory (a batch that was cancelling comes back cancelled); one open per
 * directory. */
#include "server/batches.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "test.h"

static char dir[] = "/tmp/ns_test_batches_XXXXXX";
static char files_dir[300], batches_dir[300];
static files *fs;

static batches *open_batches(int32_t max)
{
    struct batches_params p = {batches_dir, max, NULL, NULL};
    batches *b = NULL;
    struct err e;
    if (batches_open(&p, fs, NULL, &b, &e)) fprintf(stderr, "%s\n", e.msg);
    return b;
}

static char *upload(const char *purpose)
{
    struct err e;
    files_upload *u;
    json_t *obj;
    if (files_upload_begin(fs, &u, &e) || files_upload_write(u, "x\n", 2, &e) ||
        files_upload_finish(fs, u, purpose, "in.jsonl", &obj, &e))
        return NULL;
    char *id = strdup(json_string_value(json_object_get(obj, "id")));
    json_decref(obj);
    return id;
}

/* Creates a batch from body (a printf format over the file id); returns the status (200 or the error's). */
static int create(batches *b, const char *file_id, const char *extra, json_t **obj)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"%s}",
             file_id, extra);
    struct openai_error err;
    *obj = NULL;
    return batches_create(b, body, strlen(body), obj, &err) ? err.status : 200;
}

static int checked(batches *b)
{
    struct err e;
    if (batches_check(b, &e) == 0) return 1;
    fprintf(stderr, "%s\n", e.msg);
    return 0;
}

TEST(batches_create_get_list_cancel)
{
    batches *b = open_batches(3);
    CHECK(b != NULL);
    if (!b) return;
    char *in = upload("batch"), *other = upload("fine-tune");
    json_t *o;
    CHECK_EQ_INT(create(b, "file-000000000000000000000000", "", &o), 404);
    CHECK_EQ_INT(create(b, "../../etc/passwd", "", &o), 404);
    CHECK_EQ_INT(create(b, other, "", &o), 400);
    CHECK_EQ_INT(create(b, in, ",\"endpoint2\":1", &o), 400);
    CHECK_EQ_INT(create(b, in, ",\"metadata\":{\"k\":1}", &o), 400);
    struct openai_error err;
    CHECK(batches_create(b, "{", 1, &o, &err) == 1 && err.status == 400);
    const char *bad_ep = "{\"input_file_id\":\"x\",\"endpoint\":\"/v1/embeddings\",\"completion_window\":\"24h\"}";
    CHECK(batches_create(b, bad_ep, strlen(bad_ep), &o, &err) == 1 && err.status == 400);
    char ids[3][64];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(create(b, in, ",\"metadata\":{\"n\":\"x\"}", &o), 200);
        CHECK(o && batches_valid_id(json_string_value(json_object_get(o, "id"))));
        CHECK_STR(json_string_value(json_object_get(o, "status")), "validating");
        snprintf(ids[i], sizeof ids[i], "%s", o ? json_string_value(json_object_get(o, "id")) : "");
        json_decref(o);
        CHECK(checked(b));
    }
    CHECK_EQ_INT(create(b, in, "", &o), 400); /* max_batches */
    CHECK(batches_get(b, ids[1], &o, &err) == 0);
    json_decref(o);
    CHECK(batches_get(b, "batch_000000000000000000000000", &o, &err) == 1 && err.status == 404);
    /* newest first; after and limit */
    CHECK(batches_list(b, NULL, "2", &o, &err) == 0);
    json_t *data = json_object_get(o, "data");
    CHECK(json_array_size(data) == 2 && json_is_true(json_object_get(o, "has_more")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(data, 0), "id")), ids[2]);
    json_decref(o);
    CHECK(batches_list(b, ids[1], NULL, &o, &err) == 0);
    data = json_object_get(o, "data");
    CHECK(json_array_size(data) == 1 && json_is_false(json_object_get(o, "has_more")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(data, 0), "id")), ids[0]);
    json_decref(o);
    CHECK(batches_list(b, NULL, "0", &o, &err) == 1 && err.status == 400);
    /* a queued batch is cancelled at once; again is no error */
    CHECK(batches_cancel(b, ids[0], &o, &err) == 0);
    CHECK_STR(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    CHECK(batches_cancel(b, ids[0], &o, &err) == 0);
    json_decref(o);
    CHECK(batches_cancel(b, "batch_000000000000000000000000", &o, &err) == 1 && err.status == 404);
    CHECK(checked(b));
    /* one server per directory */
    CHECK(open_batches(3) == NULL);
    batches_close(b);
    /* read back; a batch killed while cancelling comes back cancelled */
    char path[600];
    snprintf(path, sizeof path, "%s/%s/batch.json", batches_dir, ids[1]);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    json_object_set_new(json_object_get(doc, "batch"), "status", json_string("cancelling"));
    CHECK(doc && json_dump_file(doc, path, 0) == 0);
    json_decref(doc);
    b = open_batches(3);
    CHECK(b != NULL);
    if (!b) return;
    CHECK(checked(b));
    CHECK(batches_get(b, ids[0], &o, &err) == 0);
    CHECK_STR(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    CHECK(batches_get(b, ids[1], &o, &err) == 0);
    CHECK_STR(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    CHECK(batches_get(b, ids[2], &o, &err) == 0);
    CHECK_STR(json_string_value(json_object_get(o, "status")), "validating");
    CHECK_STR(json_string_value(json_object_get(json_object_get(o, "metadata"), "n")), "x");
    json_decref(o);
    CHECK(batches_list(b, NULL, NULL, &o, &err) == 0);
    CHECK(json_array_size(json_object_get(o, "data")) == 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 2), "id")), ids[0]);
    json_decref(o);
    batches_close(b);
    free(in);
    free(other);
}

int main(void)
{
    if (!mkdtemp(dir)) return 1;
    snprintf(files_dir, sizeof files_dir, "%s/files", dir);
    snprintf(batches_dir, sizeof batches_dir, "%s/batches", dir);
    struct files_params fp = {files_dir, 1 << 20, 100};
    struct err e;
    if (files_open(&fp, &fs, &e)) return 1;
    RUN(batches_create_get_list_cancel);
    files_close(fs);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}
