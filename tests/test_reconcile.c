/* Tests for jobs/reconcile on hand-made books (no model): a resumed run skips what the store holds, repairs a
 * torn result file and cuts bytes the store does not hold; rows of changed or vanished backlog lines are
 * dropped (and their lines cut from the file); --retry-failed runs failed keys again; a row left READY by
 * --order input is rebuilt. After every reconcile the ledger's invariants hold. */
#include "jobs/reconcile.h"

#include "test.h"
#include "util/log.h"

static char tmp_dir[] = "/tmp/ns_test_reconcile_XXXXXX";

/* One backlog line of a test: number, keys of its completions (n of them), or bad. */
struct spec {
    int64_t no;
    int n;
    int keys[2];
    int bad;
};

struct book {
    ledger l;
    store *st;
    output_file *out[2];
};

static char db[512], out_path[2][512];

static void fake_key(uint8_t key[32], int k)
{
    memset(key, 0, 32);
    key[0] = (uint8_t)k;
    key[1] = 0xa5;
}

/* line_info of the test's books: line no has id "r<no>"; a bad line's message is "bad". */
static char info_id[32];

static int test_info(void *user, const ledger *l, uint32_t li, struct ledger_line_info *out, struct err *e)
{
    (void)user, (void)e;
    const struct ledger_line *L = &l->lines[li];
    memset(out, 0, sizeof *out);
    snprintf(info_id, sizeof info_id, "r%u", L->no);
    out->custom_id = info_id;
    out->message = L->bad ? "bad" : NULL;
    return 0;
}

static int add_spec(ledger *l, const struct spec *s)
{
    struct err e;
    uint32_t li;
    char id[32];
    uint8_t keys[2][32], digest[32];
    snprintf(id, sizeof id, "r%lld", (long long)s->no);
    if (ledger_add_line(l, s->no, s->no * 10, s->bad ? 0 : s->n, &li, &e)) return -1;
    if (s->bad) {
        ledger_set_bad(l, li, "invalid_value");
        ledger_digest_bad(id, "invalid_value", "bad", digest);
        l->lines[li].digest = ledger_digest_head(digest);
        return 0;
    }
    for (int k = 0; k < s->n; k++) {
        int folded;
        int32_t prompt[] = {(int32_t)s->keys[k]};
        fake_key(keys[k], s->keys[k]);
        if (ledger_add_work(l, li, k, keys[k], plan_item_of(prompt, 1, 8), &folded, &e)) return -1;
    }
    /* the digest stands for what the line's bytes are built from: its id and keys */
    ledger_digest_request(id, INPUT_KIND_COMPLETION, "tiny", s->n, (const uint8_t(*)[32])keys, digest);
    l->lines[li].digest = ledger_digest_head(digest);
    return 0;
}

/* Opens the store and files of the test and fills a book with the backlog specs. */
static int book_open(struct book *b, const struct spec *specs, int n, int order_input)
{
    struct err e;
    memset(b, 0, sizeof *b);
    struct ledger_params p = {.model_name = "tiny", .order_input = order_input, .debug_checks = 1};
    if (ledger_init(&b->l, &p, &e) || store_open(db, STORE_DURABILITY_NORMAL, &b->st, &e) ||
        output_open(out_path[0], &b->out[0], &e) || output_open(out_path[1], &b->out[1], &e)) {
        fprintf(stderr, "book_open: %s\n", e.msg);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (add_spec(&b->l, &specs[i])) return -1;
    b->l.st = b->st;
    b->l.out[0] = b->out[0];
    b->l.out[1] = b->out[1];
    b->l.line_info = test_info;
    return 0;
}

static void book_close(struct book *b)
{
    ledger_free(&b->l);
    output_close(b->out[0]);
    output_close(b->out[1]);
    store_close(b->st);
}

static void fresh_files(const char *name)
{
    snprintf(db, sizeof db, "%s/%s.db", tmp_dir, name);
    snprintf(out_path[0], sizeof out_path[0], "%s/%s.out", tmp_dir, name);
    snprintf(out_path[1], sizeof out_path[1], "%s/%s.err", tmp_dir, name);
}

static int add_result(ledger *l, int k, const char *text)
{
    uint8_t key[32];
    fake_key(key, k);
    int64_t w = plan_keymap_find(l->keys, key);
    if (w < 0) return -1;
    struct store_result r;
    memset(&r, 0, sizeof r);
    r.status = text ? STORE_STATUS_DONE : STORE_STATUS_FAILED;
    r.text = strdup(text ? text : "");
    r.text_len = text ? strlen(text) : 0;
    r.error = text ? NULL : strdup("failed");
    memcpy(r.key, key, 32);
    struct err e;
    return ledger_add_result(l, (uint32_t)w, &r, &e);
}

/* A first run: reconcile (fresh store), the given results, one commit. */
static int first_run(const struct spec *specs, int n, int order_input, const int *keys, const char *const *texts,
                     int n_results)
{
    struct book b;
    struct reconcile_stats rs;
    struct err e;
    int rc = book_open(&b, specs, n, order_input);
    if (rc == 0) rc = reconcile_run(&b.l, 0, &rs, &e);
    for (int i = 0; rc == 0 && i < n_results; i++) rc = add_result(&b.l, keys[i], texts[i]);
    if (rc == 0) rc = ledger_commit_and_write(&b.l, &e);
    if (rc != 0) fprintf(stderr, "first_run: %s\n", e.msg);
    book_close(&b);
    return rc;
}

static int count_lines(const char *path)
{
    char *t = test_read_file(path, NULL);
    int n = 0;
    for (char *p = t; p && *p; p++) n += *p == '\n';
    free(t);
    return n;
}

TEST(resume_skips_done_work_and_repairs_the_files)
{
    fresh_files("resume");
    struct spec specs[] = {{1, 1, {1, 0}, 0}, {2, 1, {2, 0}, 0}, {3, 0, {0, 0}, 1}, {4, 2, {3, 4}, 0}};
    int keys[] = {1, 2, 3};
    const char *texts[] = {"one", "two", "three"};
    CHECK(first_run(specs, 4, 0, keys, texts, 3) == 0);
    size_t n_out = 0, n_err = 0;
    char *want_out = test_read_file(out_path[0], &n_out), *want_err = test_read_file(out_path[1], &n_err);
    CHECK(want_out && want_err && count_lines(out_path[0]) == 2 && count_lines(out_path[1]) == 1);
    /* a kill in the middle of a write, and bytes that no commit holds */
    CHECK(truncate(out_path[0], (off_t)(n_out - 10)) == 0);
    FILE *f = fopen(out_path[1], "a");
    CHECK(f && fputs("garbage", f) >= 0 && fclose(f) == 0);

    struct book b;
    struct reconcile_stats rs;
    struct err e;
    CHECK(book_open(&b, specs, 4, 0) == 0);
    CHECK_MSG(reconcile_run(&b.l, 0, &rs, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(rs.works_stored, 3);
    CHECK_EQ_INT(rs.stale_rows, 0);
    CHECK_EQ_INT(rs.files[0].lines_kept, 1);
    CHECK_EQ_INT(rs.files[0].lines_rewritten, 1);
    CHECK_EQ_INT(rs.files[1].bytes_cut, 7);
    size_t n;
    char *got = test_read_file(out_path[0], &n);
    CHECK(got && n == n_out && !memcmp(got, want_out, n));
    free(got);
    got = test_read_file(out_path[1], &n);
    CHECK(got && n == n_err && !memcmp(got, want_err, n));
    free(got);
    CHECK_EQ_INT(b.l.out_end[0], (int64_t)n_out);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(b.l.lines[i].state, LEDGER_LINE_SCHEDULED);
    CHECK_EQ_INT(b.l.lines[3].state, LEDGER_LINE_WAITING);
    CHECK_EQ_INT(b.l.lines[3].n_done, 1);
    CHECK_EQ_INT(b.l.n_ready, 0);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    /* the rest of the run: line 4 joins the file after the repaired lines */
    CHECK(add_result(&b.l, 4, "four") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(count_lines(out_path[0]), 3);
    book_close(&b);
    free(want_out);
    free(want_err);
}

TEST(rows_of_changed_or_vanished_lines_are_dropped)
{
    fresh_files("stale");
    struct spec before[] = {{1, 1, {1, 0}, 0}, {2, 1, {2, 0}, 0}, {9, 1, {9, 0}, 0}};
    int keys[] = {1, 2, 9};
    const char *texts[] = {"one", "two", "nine"};
    CHECK(first_run(before, 3, 0, keys, texts, 3) == 0);
    CHECK_EQ_INT(count_lines(out_path[0]), 3);

    /* the backlog changed: line 2 asks for something else, line 9 is gone */
    struct spec after[] = {{1, 1, {1, 0}, 0}, {2, 1, {5, 0}, 0}};
    struct book b;
    struct reconcile_stats rs;
    struct err e;
    CHECK(book_open(&b, after, 2, 0) == 0);
    CHECK_MSG(reconcile_run(&b.l, 0, &rs, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(rs.stale_rows, 2);
    CHECK_EQ_INT(rs.works_stored, 1);
    CHECK_EQ_INT(count_lines(out_path[0]), 1); /* lines that are not in the store any more are cut */
    char *got = test_read_file(out_path[0], NULL);
    CHECK(got && strstr(got, "\"custom_id\":\"r1\"") && !strstr(got, "r9"));
    free(got);
    CHECK_EQ_INT(b.l.lines[1].state, LEDGER_LINE_WAITING);
    CHECK_EQ_INT(b.l.works[ledger_line_work(&b.l, &b.l.lines[1], 0)].state, LEDGER_WORK_PENDING);
    CHECK(store_check(b.st, &e) == 0);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    book_close(&b);
}

TEST(retry_failed_runs_failed_keys_again)
{
    fresh_files("retry");
    struct spec specs[] = {{1, 1, {1, 0}, 0}, {2, 1, {2, 0}, 0}};
    int keys[] = {1, 2};
    const char *texts[] = {"one", NULL};
    CHECK(first_run(specs, 2, 0, keys, texts, 2) == 0);
    CHECK_EQ_INT(count_lines(out_path[1]), 1);

    struct book b;
    struct reconcile_stats rs;
    struct err e;
    CHECK(book_open(&b, specs, 2, 0) == 0); /* without retry: the failure stands */
    CHECK_MSG(reconcile_run(&b.l, 0, &rs, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(rs.works_stored, 2);
    CHECK_EQ_INT(b.l.lines[1].state, LEDGER_LINE_SCHEDULED);
    book_close(&b);

    CHECK(book_open(&b, specs, 2, 0) == 0);
    CHECK_MSG(reconcile_run(&b.l, 1, &rs, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(rs.failed_requeued, 1);
    CHECK_EQ_INT(rs.works_stored, 1);
    CHECK_EQ_INT(rs.stale_rows, 1);
    CHECK_EQ_INT(count_lines(out_path[1]), 0);
    CHECK_EQ_INT(b.l.works[ledger_line_work(&b.l, &b.l.lines[1], 0)].state, LEDGER_WORK_PENDING);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    json_t *j = reconcile_stats_json(&rs);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "failed_keys_requeued")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "stale_rows_dropped")), 1);
    CHECK(json_object_get(json_object_get(j, "errors"), "bytes_cut") != NULL);
    json_decref(j);
    book_close(&b);
}

TEST(a_row_left_ready_by_order_input_is_rebuilt)
{
    fresh_files("ready");
    struct spec specs[] = {{1, 1, {1, 0}, 0}, {2, 1, {2, 0}, 0}};
    int keys[] = {2};
    const char *texts[] = {"two"};
    CHECK(first_run(specs, 2, 1, keys, texts, 1) == 0); /* line 2 waits for line 1: READY */
    CHECK_EQ_INT(count_lines(out_path[0]), 0);

    struct book b;
    struct reconcile_stats rs;
    struct err e;
    CHECK(book_open(&b, specs, 2, 1) == 0);
    CHECK_MSG(reconcile_run(&b.l, 0, &rs, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(rs.stale_rows, 1);
    CHECK_EQ_INT(b.l.n_ready, 1); /* line 2 is finished: queued for the first commit */
    CHECK_EQ_INT(b.l.ready[0], 1);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    CHECK(add_result(&b.l, 1, "one") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    char *got = test_read_file(out_path[0], NULL);
    char *r1 = got ? strstr(got, "\"r1\"") : NULL, *r2 = got ? strstr(got, "\"r2\"") : NULL;
    CHECK(r1 && r2 && r1 < r2);
    free(got);
    book_close(&b);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    log_set_level(LOG_WARN); /* the repairs are reported at info level */
    RUN(resume_skips_done_work_and_repairs_the_files);
    RUN(rows_of_changed_or_vanished_lines_are_dropped);
    RUN(retry_failed_runs_failed_keys_again);
    RUN(a_row_left_ready_by_order_input_is_rebuilt);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
