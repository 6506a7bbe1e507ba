/* Tests for jobs/store and the file repair of jobs/output: schema, results, line rows and offsets, the
 * tiling invariant, locking, integrity check, and repair of torn / short / diverged / extended files. */
#include <fcntl.h>
#include <sys/stat.h>

#include <jansson.h>

#include "jobs/output.h"
#include "gguf/gguf.h"
#include "jobs/store.h"
#include "test.h"

static char tmp_dir[] = "/tmp/ns_test_store_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(path[k], sizeof path[k], "%s/%s", tmp_dir, name);
    return path[k];
}

static int64_t last_row;

static int put_line(store *s, int64_t line, int file, int64_t off, const char *text)
{
    struct store_line l;
    memset(&l, 0, sizeof l);
    l.line = line;
    l.digest[0] = (uint8_t)line;
    l.file = file;
    l.off = off;
    l.text = text;
    l.len = strlen(text);
    struct err e;
    return store_put_line(s, &l, &last_row, &e);
}

TEST(results_and_meta)
{
    const char *db = tmp_path("a.db");
    store *s;
    struct err e;
    CHECK_MSG(store_open(db, STORE_DURABILITY_FULL, &s, &e) == 0, "%.200s", e.msg);
    char *v;
    CHECK(store_meta_get(s, "model", &v, &e) == 0 && v == NULL);
    CHECK(store_meta_set(s, "model", "abc", &e) == 0);
    CHECK(store_meta_get(s, "model", &v, &e) == 0);
    CHECK_STR(v, "abc");
    free(v);

    CHECK(store_begin(s, &e) == 0);
    struct store_result r;
    memset(&r, 0, sizeof r);
    r.key[0] = 1;
    r.status = STORE_STATUS_DONE;
    r.finish = 1;
    r.text = "hello\0world";
    r.text_len = 11; /* binary safe */
    r.n_prompt = 5;
    r.n_gen = 3;
    r.created = 1700000000;
    int64_t id1, id2;
    CHECK(store_put_result(s, &r, &id1, &e) == 0);
    r.key[0] = 2;
    r.status = STORE_STATUS_FAILED;
    r.error = "can never fit";
    r.text = "";
    r.text_len = 0;
    CHECK(store_put_result(s, &r, &id2, &e) == 0);
    CHECK(id2 > id1);
    CHECK(store_commit(s, &e) == 0);

    struct store_result g;
    int found;
    CHECK(store_get_result(s, id1, &g, &found, &e) == 0 && found);
    CHECK_EQ_INT(g.key[0], 1);
    CHECK_EQ_INT(g.text_len, 11);
    CHECK(!memcmp(g.text, "hello\0world", 11));
    CHECK_EQ_INT(g.created, 1700000000);
    CHECK_EQ_INT(g.n_gen, 3);
    CHECK(g.error == NULL);
    free((char *)g.text);
    CHECK(store_get_result(s, id2 + 100, &g, &found, &e) == 0 && !found);
    CHECK_EQ_INT(store_n_results(s, STORE_STATUS_DONE), 1);
    CHECK_EQ_INT(store_n_results(s, STORE_STATUS_FAILED), 1);
    CHECK(store_check(s, &e) == 0);
    int64_t n;
    CHECK(store_delete_failed(s, &n, &e) == 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(store_n_results(s, STORE_STATUS_FAILED), 0);

    /* a second open of the same store is refused while the first holds it */
    store *s2;
    CHECK(store_open(db, STORE_DURABILITY_FULL, &s2, &e) != 0);
    CHECK(strstr(e.msg, "in use") != NULL);
    store_close(s);
    CHECK(store_open(db, STORE_DURABILITY_NORMAL, &s2, &e) == 0);
    CHECK_EQ_INT(store_n_results(s2, STORE_STATUS_DONE), 1);
    store_close(s2);

    char *res;
    CHECK_MSG(store_integrity_check(db, &res, &e) == 0, "%.300s", e.msg);
    CHECK_STR(res, "ok");
    free(res);
}

TEST(not_a_database)
{
    const char *p = tmp_path("junk.db");
    FILE *f = fopen(p, "wb");
    fputs("this is not an sqlite database, just text that is long enough to matter..........", f);
    fclose(f);
    store *s;
    struct err e;
    CHECK(store_open(p, STORE_DURABILITY_FULL, &s, &e) != 0);
    CHECK(strstr(e.msg, "junk.db") != NULL);
}

static int count_rows(void *user, const struct store_line *l)
{
    (void)l;
    (*(int *)user)++;
    return 0;
}

TEST(lines_offsets_and_check)
{
    store *s;
    struct err e;
    CHECK(store_open(tmp_path("b.db"), STORE_DURABILITY_FULL, &s, &e) == 0);
    CHECK(store_begin(s, &e) == 0);
    CHECK(put_line(s, 1, 0, 0, "one\n") == 0);
    CHECK(put_line(s, 2, 1, 0, "err\n") == 0);
    CHECK(put_line(s, 3, 0, 4, "three\n") == 0);
    CHECK(put_line(s, 4, 0, -1, "four\n") == 0); /* determined, not scheduled */
    int64_t row4 = last_row;
    CHECK(store_commit(s, &e) == 0);
    CHECK(store_check(s, &e) == 0);
    int n = 0;
    CHECK(store_foreach_line(s, count_rows, &n, &e) == 0);
    CHECK_EQ_INT(n, 4);
    n = 0;
    CHECK(store_foreach_emitted(s, 0, count_rows, &n, &e) == 0);
    CHECK_EQ_INT(n, 2);
    /* a gap breaks the invariant */
    CHECK(store_set_line_off(s, row4, 20, &e) == 0);
    CHECK(store_check(s, &e) != 0);
    CHECK(strstr(e.msg, "line 4") != NULL);
    /* deleting a row and compacting restores it */
    CHECK(store_set_line_off(s, row4, 10, &e) == 0);
    CHECK(store_check(s, &e) == 0);
    CHECK(store_delete_line(s, 1, &e) == 0); /* row id 1 = backlog line 1 here */
    CHECK(store_check(s, &e) != 0);
    int64_t end;
    CHECK(store_compact_offsets(s, 0, &end, &e) == 0);
    CHECK_EQ_INT(end, 11);
    CHECK(store_check(s, &e) == 0);
    store_close(s);
}

/* --- repair --- */

static char *slurp(const char *p, size_t *n)
{
    return test_read_file(p, n);
}

static const char *L1 = "{\"a\":1}\n", *L2 = "{\"b\":22}\n", *L3 = "{\"c\":333}\n";

static store *three_lines(const char *db)
{
    store *s;
    struct err e;
    if (store_open(db, STORE_DURABILITY_FULL, &s, &e) != 0) return NULL;
    store_begin(s, &e);
    put_line(s, 1, 0, 0, L1);
    put_line(s, 2, 0, (int64_t)strlen(L1), L2);
    put_line(s, 3, 0, (int64_t)(strlen(L1) + strlen(L2)), L3);
    store_commit(s, &e);
    return s;
}

static int repair_to(store *s, const char *path, struct output_repair_stats *st)
{
    output_file *f;
    struct err e;
    if (output_open(path, &f, &e) != 0) return -1;
    int rc = output_repair(f, s, 0, st, &e);
    if (rc == 0 && output_size(f) != (int64_t)(strlen(L1) + strlen(L2) + strlen(L3))) rc = -1;
    output_close(f);
    return rc;
}

static int file_is_three(const char *path)
{
    size_t n;
    char *c = slurp(path, &n);
    char want[64];
    snprintf(want, sizeof want, "%s%s%s", L1, L2, L3);
    int ok = c && n == strlen(want) && !memcmp(c, want, n);
    free(c);
    return ok;
}

TEST(repair_cases)
{
    store *s = three_lines(tmp_path("c.db"));
    CHECK(s != NULL);
    struct output_repair_stats st;
    const char *out = tmp_path("out.jsonl");

    /* missing file: rebuilt whole */
    unlink(out);
    CHECK(repair_to(s, out, &st) == 0);
    CHECK(file_is_three(out));
    CHECK_EQ_INT(st.lines_rewritten, 3);

    /* intact: nothing touched */
    CHECK(repair_to(s, out, &st) == 0);
    CHECK_EQ_INT(st.lines_kept, 3);
    CHECK_EQ_INT(st.lines_rewritten + st.bytes_cut, 0);

    /* torn last line (killed mid-write) */
    char buf[128];
    snprintf(buf, sizeof buf, "%s%s{\"c\":3", L1, L2);
    test_write_file(out, buf, strlen(buf));
    CHECK(repair_to(s, out, &st) == 0);
    CHECK(file_is_three(out));
    CHECK_EQ_INT(st.lines_kept, 2);
    CHECK_EQ_INT(st.lines_rewritten, 1);

    /* garbage after the last line (e.g. a line whose row was dropped) */
    snprintf(buf, sizeof buf, "%s%s%s{\"zz\":0}\n{\"y", L1, L2, L3);
    test_write_file(out, buf, strlen(buf));
    CHECK(repair_to(s, out, &st) == 0);
    CHECK(file_is_three(out));
    CHECK_EQ_INT(st.lines_kept, 3);
    CHECK(st.bytes_cut > 0);

    /* a different line in the middle: kept up to it, rewritten from there */
    snprintf(buf, sizeof buf, "%s{\"b\":99}\n%s", L1, L3);
    test_write_file(out, buf, strlen(buf));
    CHECK(repair_to(s, out, &st) == 0);
    CHECK(file_is_three(out));
    CHECK_EQ_INT(st.lines_kept, 1);
    CHECK_EQ_INT(st.lines_rewritten, 2);

    /* zeros where data should be (size extended without data) */
    memset(buf, 0, sizeof buf);
    memcpy(buf, L1, strlen(L1));
    test_write_file(out, buf, strlen(L1) + strlen(L2) + strlen(L3));
    CHECK(repair_to(s, out, &st) == 0);
    CHECK(file_is_three(out));

    /* appending after repair continues at the end */
    output_file *f;
    struct err e;
    CHECK(output_open(out, &f, &e) == 0);
    CHECK(output_repair(f, s, 0, &st, &e) == 0);
    CHECK(output_append(f, "x\n", 2, &e) == 0);
    CHECK(output_sync(f, &e) == 0);
    output_close(f);
    size_t n;
    char *c = slurp(out, &n);
    CHECK(c && n == strlen(L1) + strlen(L2) + strlen(L3) + 2 && c[n - 2] == 'x');
    free(c);
    store_close(s);
}

/* --- line builders --- */

TEST(lines_are_valid_json)
{
    struct output_buf b = {0};
    struct output_choice ch[2] = {{"caf\xc3\xa9 \"q\" \\ \n\t\x01 cut\xe2\x82", 20, "length", NULL, 0},
                                  {"", 0, "stop", NULL, 0}};
    struct output_ok o = {"run1", 3, "id-1", 1, "model", "fp_x", 1700000000, ch, 2, 5, 9, 4};
    output_ok_line(&b, &o);
    CHECK(b.n > 0 && b.p[b.n - 1] == '\n');
    CHECK(memchr(b.p, '\n', b.n) == b.p + b.n - 1);
    json_error_t je;
    json_t *j = json_loadb(b.p, b.n - 1, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(j != NULL, "%s", je.text);
    json_t *body = json_object_get(json_object_get(j, "response"), "body");
    CHECK_STR(json_string_value(json_object_get(body, "object")), "chat.completion");
    json_t *c0 = json_array_get(json_object_get(body, "choices"), 0);
    const char *content = json_string_value(json_object_get(json_object_get(c0, "message"), "content"));
    CHECK(content && !strncmp(content, "caf\xc3\xa9 \"q\" \\ \n\t\x01 cut\xef\xbf\xbd", 25));
    CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_t *usage = json_object_get(body, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(usage, "total_tokens")), 14);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens")),
                 4);
    CHECK(json_is_object(json_object_get(usage, "completion_tokens_details")));
    CHECK_STR(json_string_value(json_object_get(body, "system_fingerprint")), "fp_x");
    CHECK_STR(json_string_value(json_object_get(body, "model")), "model");
    CHECK(json_is_null(json_object_get(j, "error")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "response"), "status_code")), 200);
    char id3[80];
    snprintf(id3, sizeof id3, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);

    /* the same inputs give the same bytes */
    struct output_buf b2 = {0};
    output_ok_line(&b2, &o);
    CHECK(b2.n == b.n && !memcmp(b.p, b2.p, b.n));
    output_buf_free(&b);
    output_buf_free(&b2);

    /* another line, or the same line of another run: another id */
    for (int k = 0; k < 2; k++) {
        o.line = k ? 3 : 4;
        o.run_id = k ? "run2" : "run1";
        output_ok_line(&b2, &o);
        json_t *j2 = json_loadb(b2.p, b2.n - 1, 0, &je);
        CHECK_MSG(j2 != NULL, "%s", je.text);
        CHECK(strcmp(json_string_value(json_object_get(j2, "id")), id3));
        json_decref(j2);
        output_buf_free(&b2);
    }

    /* a failed request: status, the error object, top-level error null */
    struct output_fail f = {"run1", 5, "id-2", 400, "invalid_request_error", "unsupported_parameter", "tools", "no"};
    output_fail_line(&b, &f);
    j = json_loadb(b.p, b.n - 1, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(j != NULL, "%s", je.text);
    CHECK(json_is_null(json_object_get(j, "error")));
    json_t *resp = json_object_get(j, "response");
    CHECK_EQ_INT(json_integer_value(json_object_get(resp, "status_code")), 400);
    CHECK(!strncmp(json_string_value(json_object_get(resp, "request_id")), "req_", 4));
    json_t *eo = json_object_get(json_object_get(resp, "body"), "error");
    CHECK_STR(json_string_value(json_object_get(eo, "param")), "tools");
    CHECK_STR(json_string_value(json_object_get(eo, "code")), "unsupported_parameter");
    CHECK_STR(json_string_value(json_object_get(eo, "type")), "invalid_request_error");
    json_decref(j);
    output_buf_free(&b);

    output_error_line(&b, "run1", NULL, 12, "invalid_json", "not JSON: \xff");
    j = json_loadb(b.p, b.n - 1, 0, &je);
    CHECK_MSG(j != NULL, "%s", je.text);
    CHECK(json_is_null(json_object_get(j, "custom_id")));
    CHECK(json_is_null(json_object_get(j, "response")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "error"), "line")), 12);
    json_decref(j);
    output_buf_free(&b);
}

/* A result with logprobs: packed with its text (no endpoint), its text found again, rendered in either
 * endpoint's shape with the same values; every truncation and a token outside the vocabulary is refused. */
TEST(logprobs_pack_and_render)
{
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK)) SKIP("no stories260K");
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    struct err e;
    CHECK_MSG(gguf_open(path, &f, &e) == 0 && tok_load(f, &v, &e) == 0, "%s", e.msg);
    struct logprob_entry pr[2], gen[2];
    logprob_first(1, &pr[0]);
    pr[1] = (struct logprob_entry){.token = 400, .logprob = -0.125, .n_top = 1, .top = {{401, -0.0625}}};
    gen[0] =
        (struct logprob_entry){.token = 402, .logprob = -1.0 / 3.0, .n_top = 2, .top = {{402, -1.0 / 3.0}, {7, -2.5}}};
    gen[1] = (struct logprob_entry){.token = 2, .logprob = -3e-9, .n_top = 0};
    struct output_buf b = {0}, chat = {0}, comp = {0};
    output_logprobs_pack(&b, "Once xyz", 8, pr, 2, gen, 2, 1);
    const char *text;
    size_t len;
    CHECK(!b.oom && output_logprobs_unpack(b.p, b.n, &text, &len) == 0 && len == 8 && !memcmp(text, "Once xyz", 8));
    CHECK(output_logprobs_render(&chat, v, 1, b.p, b.n) == 0 && output_logprobs_render(&comp, v, 0, b.p, b.n) == 0);
    json_error_t je;
    json_t *c = json_loadb(chat.p, chat.n, 0, &je), *t = json_loadb(comp.p, comp.n, 0, &je);
    CHECK(c && t);
    json_t *content = json_object_get(c, "content"), *lps = json_object_get(t, "token_logprobs");
    CHECK(json_array_size(content) == 2 && json_array_size(lps) == 4); /* chat: generated only; echo: all */
    CHECK(json_is_null(json_array_get(lps, 0)) && json_real_value(json_array_get(lps, 2)) == -1.0 / 3.0);
    CHECK(json_real_value(json_object_get(json_array_get(content, 0), "logprob")) == -1.0 / 3.0);
    CHECK(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")) == 2);
    CHECK(json_is_null(json_array_get(json_object_get(t, "top_logprobs"), 0)));
    json_decref(c);
    json_decref(t);
    for (size_t cut = 0; cut < b.n; cut++) { /* hostile bytes: any truncation is refused */
        struct output_buf x = {0};
        CHECK_MSG(output_logprobs_render(&x, v, cut & 1, b.p, cut) == -1, "cut at %zu", cut);
        output_buf_free(&x);
    }
    b.p[b.n - 13 - 9] ^= 0x7f; /* the high byte of gen[0]'s last alternative's token: outside the vocabulary */
    struct output_buf x = {0};
    CHECK(output_logprobs_render(&x, v, 0, b.p, b.n) == -1);
    output_buf_free(&x);
    output_buf_free(&b);
    output_buf_free(&chat);
    output_buf_free(&comp);
    tok_free(v);
    gguf_close(f);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(results_and_meta);
    RUN(not_a_database);
    RUN(lines_offsets_and_check);
    RUN(repair_cases);
    RUN(lines_are_valid_json);
    RUN(logprobs_pack_and_render);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
