/* Tests for jobs/ledger on hand-made books (no model): folding and refs, a line's bytes reach its file only
 * after the commit that holds its row, a failed commit writes and stores nothing, --order input waits for
 * earlier lines, a line finished across two commits reads its first result back from the store, idle prompts
 * are dropped, and ledger_check catches each kind of corrupted state. */
#include "jobs/ledger.h"

#include <sqlite3.h>

#include <jansson.h>

#include "test.h"

static char tmp_dir[] = "/tmp/ns_test_ledger_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(path[k], sizeof path[k], "%s/%s", tmp_dir, name);
    return path[k];
}

/* A ledger with its store and files in the temp folder (prefix names them). */
struct book {
    ledger l;
    store *st;
    output_file *out[2];
    char db[512], paths[2][512];
};

/* What the test hook saw at "after_commit": the file sizes, and the committed rows read through a second
 * connection to the database. */
static struct {
    const char *db;
    const struct book *b;
    int n_calls;
    int64_t file_size[2];
    int64_t rows_end[2]; /* sum of the lengths of the committed scheduled rows, per file */
} seen;

static int64_t committed_end(const char *db, int file)
{
    sqlite3 *h;
    int64_t end = -1;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return -1;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(h, "SELECT coalesce(sum(length(text)), 0) FROM lines WHERE file = ? AND off IS NOT NULL",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int(q, 1, file);
        if (sqlite3_step(q) == SQLITE_ROW) end = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(h);
    return end;
}

static void hook(const char *point)
{
    if (strcmp(point, "after_commit") != 0 || !seen.b) return;
    seen.n_calls++;
    for (int f = 0; f < 2; f++) {
        seen.file_size[f] = output_size(seen.b->out[f]);
        seen.rows_end[f] = committed_end(seen.db, f);
    }
}

/* line_info of the test's books: line number no has id "r<no>" (or the one in changed_id, when set); a bad
 * line has no id and the message "not JSON". */
static char info_id[32];
static int64_t changed_no;

static int test_info(void *user, const ledger *l, uint32_t li, struct ledger_line_info *out, struct err *e)
{
    (void)user, (void)e;
    const struct ledger_line *L = &l->lines[li];
    memset(out, 0, sizeof *out);
    if (L->bad) {
        out->message = "not JSON";
        return 0;
    }
    snprintf(info_id, sizeof info_id, "r%u%s", L->no, (int64_t)L->no == changed_no ? "x" : "");
    out->custom_id = info_id;
    return 0;
}

static int book_open(struct book *b, const char *prefix, int order_input)
{
    struct err e;
    memset(b, 0, sizeof *b);
    snprintf(b->db, sizeof b->db, "%s", tmp_path(prefix));
    strcat(b->db, ".db");
    snprintf(b->paths[0], sizeof b->paths[0], "%s.out", tmp_path(prefix));
    snprintf(b->paths[1], sizeof b->paths[1], "%s.err", tmp_path(prefix));
    struct ledger_params p = {.model_name = "tiny", .order_input = order_input, .debug_checks = 1, .test_hook = hook};
    if (ledger_init(&b->l, &p, &e) || store_open(b->db, STORE_DURABILITY_NORMAL, &b->st, &e) ||
        output_open(b->paths[0], &b->out[0], &e) || output_open(b->paths[1], &b->out[1], &e)) {
        fprintf(stderr, "book_open: %s\n", e.msg);
        return -1;
    }
    b->l.st = b->st;
    b->l.out[0] = b->out[0];
    b->l.out[1] = b->out[1];
    b->l.line_info = test_info;
    seen.db = b->db;
    seen.b = b;
    seen.n_calls = 0;
    return 0;
}

static void book_close(struct book *b)
{
    ledger_free(&b->l);
    output_close(b->out[0]);
    output_close(b->out[1]);
    store_close(b->st);
    seen.b = NULL;
}

static void fake_key(uint8_t key[32], int k)
{
    memset(key, 0, 32);
    key[0] = (uint8_t)k;
    key[1] = 0x5a;
    key[31] = (uint8_t)(k * 3 + 1);
}

/* Line number no with id "r<no>" and n completions whose keys are fake_key(keys[i]); 0 ok. */
static int add_line(ledger *l, int64_t no, int n, const int *keys)
{
    struct err e;
    uint32_t li;
    if (ledger_add_line(l, no, no * 100, n, &li, &e)) return -1;
    uint8_t full[8][32];
    for (int k = 0; k < n; k++) {
        int folded;
        fake_key(full[k], keys[k]);
        int32_t prompt[] = {1, 2, (int32_t)no};
        if (ledger_add_work(l, li, k, full[k], plan_item_of(prompt, 3, 16), &folded, &e)) return -1;
    }
    char id[32];
    snprintf(id, sizeof id, "r%lld", (long long)no);
    uint8_t digest[32];
    ledger_digest_request(id, INPUT_KIND_COMPLETION, "tiny", n, (const uint8_t(*)[32])full, digest);
    l->lines[li].digest = ledger_digest_head(digest);
    return 0;
}

static int add_bad_line(ledger *l, int64_t no)
{
    struct err e;
    uint32_t li;
    if (ledger_add_line(l, no, no * 100, 0, &li, &e)) return -1;
    ledger_set_bad(l, li, "invalid_json");
    uint8_t digest[32];
    ledger_digest_bad(NULL, "invalid_json", "not JSON", digest);
    l->lines[li].digest = ledger_digest_head(digest);
    return 0;
}

static uint32_t work_of(const ledger *l, size_t li, int k)
{
    return ledger_line_work(l, &l->lines[li], k);
}

/* Hands in a result for the work of key k: done with text, or failed with text NULL. */
static int add_result(ledger *l, int k, const char *text)
{
    uint8_t key[32];
    fake_key(key, k);
    int64_t w = plan_keymap_find(l->keys, key);
    if (w < 0) return -1;
    struct store_result r;
    memset(&r, 0, sizeof r);
    r.status = text ? STORE_STATUS_DONE : STORE_STATUS_FAILED;
    r.finish = text ? 1 : 2;
    r.text = strdup(text ? text : "");
    r.text_len = text ? strlen(text) : 0;
    r.error = text ? NULL : strdup("can never fit");
    r.n_prompt = 3;
    r.n_gen = 2;
    memcpy(r.key, key, 32);
    struct err e;
    return ledger_add_result(l, (uint32_t)w, &r, &e);
}

/* The custom_ids of the lines of a file, space-separated, into out. */
static void file_ids(const char *path, char *out, size_t cap)
{
    char *text = test_read_file(path, NULL);
    out[0] = '\0';
    size_t off = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        const char *id = j ? json_string_value(json_object_get(j, "custom_id")) : "?";
        off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? " " : "", id ? id : "null");
        json_decref(j);
    }
    free(text);
}

TEST(folding_and_refs)
{
    struct book b;
    CHECK(book_open(&b, "fold", 0) == 0);
    int k1[] = {1}, k2[] = {2, 3}, k3[] = {1};
    CHECK(add_line(&b.l, 1, 1, k1) == 0 && add_line(&b.l, 2, 2, k2) == 0 && add_line(&b.l, 3, 1, k3) == 0);
    CHECK_EQ_INT(b.l.n_works, 3);
    CHECK_EQ_INT(work_of(&b.l, 2, 0), work_of(&b.l, 0, 0)); /* folded */
    CHECK_EQ_INT(b.l.works[work_of(&b.l, 0, 0)].owner, 0);
    CHECK_EQ_INT(b.l.works[work_of(&b.l, 1, 1)].index, 1);
    CHECK_EQ_INT(b.l.n_refs, 1); /* only the line that folded: owners are not refs */
    CHECK_EQ_INT(b.l.refs[0].line, 2);
    CHECK_EQ_INT(ledger_find_line(&b.l, 2), 1);
    CHECK_EQ_INT(ledger_find_line(&b.l, 7), -1);
    struct err e;
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    book_close(&b);
}

TEST(lines_reach_the_file_only_after_their_commit)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "commit", 0) == 0);
    int ka[] = {1}, kb[] = {2};
    CHECK(add_line(&b.l, 1, 1, ka) == 0 && add_line(&b.l, 2, 1, kb) == 0);
    CHECK(add_bad_line(&b.l, 3) == 0);
    CHECK(add_line(&b.l, 4, 1, ka) == 0);
    CHECK(ledger_queue_line(&b.l, 2, &e) == 0); /* the bad line (reconcile queues it in a run) */
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(seen.n_calls, 1);
    CHECK_EQ_INT(seen.file_size[1], 0);          /* at the commit, nothing written yet */
    CHECK(seen.rows_end[1] > 0);                 /* ... but the row is committed */
    CHECK_EQ_INT(output_size(b.out[1]), seen.rows_end[1]);

    CHECK(add_result(&b.l, 1, "hello") == 0);    /* finishes lines 1 and 4 */
    CHECK_EQ_INT(ledger_n_uncommitted(&b.l), 1);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(seen.file_size[0], 0);
    CHECK(seen.rows_end[0] > 0);
    CHECK_EQ_INT(output_size(b.out[0]), seen.rows_end[0]);
    CHECK_EQ_INT(ledger_n_uncommitted(&b.l), 0);
    CHECK_EQ_INT(store_n_results(b.st, STORE_STATUS_DONE), 1);

    int64_t before = output_size(b.out[1]);
    CHECK(add_result(&b.l, 2, NULL) == 0);       /* line 2 fails */
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(seen.file_size[1], before);
    CHECK_EQ_INT(output_size(b.out[1]), seen.rows_end[1]);
    CHECK(ledger_commit_and_write(&b.l, &e) == 0); /* nothing to do */
    CHECK_EQ_INT(seen.n_calls, 3);

    char ids[256];
    file_ids(b.paths[0], ids, sizeof ids);
    CHECK_STR(ids, "r1 r4"); /* as completed: a work credits its owner, then the lines that folded into it */
    file_ids(b.paths[1], ids, sizeof ids);
    CHECK_STR(ids, "null r2");
    char *text = test_read_file(b.paths[0], NULL);
    CHECK(text && strstr(text, "\"text\":\"hello\"") && strstr(text, "\"model\":\"tiny\""));
    /* r4 folded into r1's work: the same text, its own line, request and body ids */
    char *nl = text ? strchr(text, '\n') : NULL;
    CHECK(nl && strstr(nl, "\"text\":\"hello\""));
    static const char *const tags[] = {"\"id\":\"batch_req_", "\"request_id\":\"req_", "\"id\":\"cmpl-"};
    for (int k = 0; k < 3; k++) {
        const char *x = text ? strstr(text, tags[k]) : NULL, *y = nl ? strstr(nl, tags[k]) : NULL;
        CHECK_MSG(x && y && x < nl && strncmp(x, y, strlen(tags[k]) + 32), "%s", tags[k]);
    }
    free(text);
    text = test_read_file(b.paths[1], NULL);
    /* the engine's failure: a 500 response with a server_error object; the unreadable line: a top-level error */
    CHECK(text && strstr(text, "\"status_code\":500") && strstr(text, "\"type\":\"server_error\"") &&
          strstr(text, "\"code\":\"engine_error\"") && strstr(text, "can never fit"));
    CHECK(text && strstr(text, "\"custom_id\":null,\"response\":null,\"error\":{\"code\":"));
    free(text);
    int64_t ok, bad, engine_bad;
    ledger_count_lines(&b.l, &ok, &bad, &engine_bad);
    CHECK(ok == 2 && bad == 2 && engine_bad == 1);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    CHECK(store_check(b.st, &e) == 0);
    book_close(&b);
}

TEST(a_failed_commit_writes_and_stores_nothing)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "fail", 0) == 0);
    int ka[] = {1}, kb[] = {2};
    CHECK(add_line(&b.l, 1, 1, ka) == 0 && add_line(&b.l, 2, 1, kb) == 0);
    /* work 1 claims a result row that the store does not have */
    ledger_mark_stored(&b.l, work_of(&b.l, 0, 0), STORE_STATUS_DONE, 999);
    CHECK(ledger_credit_lines(&b.l, work_of(&b.l, 0, 0), 1, &e) == 0);
    CHECK(add_result(&b.l, 2, "fine") == 0);
    CHECK(ledger_commit_and_write(&b.l, &e) != 0);
    CHECK_MSG(strstr(e.msg, "missing") != NULL, "%s", e.msg);
    CHECK_EQ_INT(seen.n_calls, 0);
    CHECK_EQ_INT(output_size(b.out[0]) + output_size(b.out[1]), 0);
    CHECK_EQ_INT(store_n_results(b.st, STORE_STATUS_DONE), 0); /* rolled back */
    CHECK_EQ_INT(committed_end(b.db, 0), 0);
    book_close(&b);
}

TEST(order_input_waits_for_earlier_lines)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "order", 1) == 0);
    int k1[] = {1}, k2[] = {2}, k3[] = {3};
    CHECK(add_line(&b.l, 1, 1, k1) == 0 && add_line(&b.l, 2, 1, k2) == 0 && add_line(&b.l, 3, 1, k3) == 0);
    CHECK(add_result(&b.l, 3, "three") == 0 && add_result(&b.l, 2, "two") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(output_size(b.out[0]), 0);
    CHECK_EQ_INT(b.l.lines[1].state, LEDGER_LINE_READY);
    CHECK_EQ_INT(b.l.lines[2].state, LEDGER_LINE_READY);
    CHECK_EQ_INT(b.l.cursor, 0);
    CHECK(add_result(&b.l, 1, "one") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(b.l.cursor, 3);
    char ids[256];
    file_ids(b.paths[0], ids, sizeof ids);
    CHECK_STR(ids, "r1 r2 r3");
    CHECK(store_check(b.st, &e) == 0);
    book_close(&b);
}

TEST(a_line_across_two_commits_reads_back_its_first_result)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "two", 0) == 0);
    int k[] = {1, 2};
    CHECK(add_line(&b.l, 1, 2, k) == 0);
    CHECK(add_result(&b.l, 1, "first") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(output_size(b.out[0]), 0);
    CHECK_EQ_INT(b.l.lines[0].n_done, 1);
    CHECK(add_result(&b.l, 2, "second") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    char *text = test_read_file(b.paths[0], NULL);
    CHECK(text && strstr(text, "\"text\":\"first\"") && strstr(text, "\"text\":\"second\""));
    free(text);
    book_close(&b);
}

/* A line whose id (or anything its bytes are built from) is not what was read fails the commit, which
 * then writes nothing. */
TEST(a_changed_line_is_refused)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "changed", 0) == 0);
    int k1[] = {1};
    CHECK(add_line(&b.l, 1, 1, k1) == 0);
    CHECK(add_result(&b.l, 1, "one") == 0);
    changed_no = 1;
    int rc = ledger_commit_and_write(&b.l, &e);
    changed_no = 0;
    CHECK(rc != 0);
    CHECK_MSG(strstr(e.msg, "backlog line 1 changed"), "%s", e.msg);
    CHECK_EQ_INT(output_size(b.out[0]), 0);
    CHECK_EQ_INT(store_n_results(b.st, STORE_STATUS_DONE), 0);
    book_close(&b);
}

/* The book keeps no text: a one-completion line costs a fixed ~100 bytes whatever its id or prompt. */
TEST(bytes_per_line_are_fixed_and_small)
{
    struct book b;
    CHECK(book_open(&b, "bytes", 0) == 0);
    enum { N = 200000 };
    struct err e;
    for (int i = 0; i < N; i++) {
        uint32_t li;
        uint8_t key[32] = {0};
        memcpy(key, &i, sizeof i);
        key[4] = 0x77;
        key[8] = (uint8_t)(i * 7);
        int folded;
        int32_t prompt[] = {i, i + 1};
        CHECK(ledger_add_line(&b.l, i + 1, (int64_t)i * 10, 1, &li, &e) == 0);
        CHECK(ledger_add_work(&b.l, li, 0, key, plan_item_of(prompt, 2, 16), &folded, &e) == 0 && !folded);
    }
    double per_line = (double)ledger_bytes(&b.l) / N;
    CHECK_MSG(per_line <= 100.0, "%.1f bytes a line", per_line);
    CHECK_MSG(ledger_bytes_per_line(1) <= 100, "%zu", ledger_bytes_per_line(1));
    CHECK(per_line <= (double)ledger_bytes_per_line(1));
    book_close(&b);
}

/* Each corruption is caught, and the book passes again once it is undone. */
TEST(check_catches_corrupted_states)
{
    struct book b;
    struct err e;
    CHECK(book_open(&b, "corrupt", 1) == 0);
    int k1[] = {1}, k2[] = {2}, k3[] = {3, 4};
    CHECK(add_line(&b.l, 1, 1, k1) == 0 && add_line(&b.l, 2, 1, k2) == 0 && add_line(&b.l, 3, 2, k3) == 0);
    CHECK(add_bad_line(&b.l, 4) == 0);
    CHECK(add_line(&b.l, 5, 1, k1) == 0); /* folds into line 1's work */
    CHECK(ledger_queue_line(&b.l, 3, &e) == 0);
    CHECK(add_result(&b.l, 1, "one") == 0 && add_result(&b.l, 3, "three") == 0);
    CHECK_MSG(ledger_commit_and_write(&b.l, &e) == 0, "%s", e.msg);
    CHECK_MSG(ledger_check(&b.l, &e) == 0, "%s", e.msg);
    ledger *l = &b.l;
    struct ledger_line *L1 = &l->lines[0], *L3 = &l->lines[2], *L5 = &l->lines[4];
    struct ledger_work *W2 = &l->works[work_of(l, 1, 0)];
    CHECK_EQ_INT(L5->state, LEDGER_LINE_READY); /* held: line 2 is not done */
    CHECK_EQ_INT(l->n_held, 2);                 /* lines 4 (bad) and 5 */

    L5->state = LEDGER_LINE_SCHEDULED; /* held but not READY */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "held"));
    L5->state = LEDGER_LINE_READY;

    l->out_end[0]++; /* a byte the lines do not account for */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "out_end"));
    l->out_end[0]--;
    L3->n_done++; /* a credit without a result */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "counts"));
    L3->n_done--;
    L1->state = LEDGER_LINE_WAITING; /* finished, but neither queued nor written */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "not queued"));
    L1->state = LEDGER_LINE_SCHEDULED;
    W2->state = LEDGER_WORK_DONE; /* done without a result row */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "result row"));
    W2->state = LEDGER_WORK_PENDING;
    l->cursor = 3; /* line 3 is not scheduled */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "cursor"));
    l->cursor = 1;
    uint32_t saved = l->refs[0].line;
    l->refs[0].line = 1; /* a ref to a line that does not need the work */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "does not need it"));
    l->refs[0].line = saved;
    CHECK(ledger_queue_line(l, 0, &e) == 0); /* a line queued that is already written */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "queued"));
    l->n_ready = 0;
    CHECK(output_append(b.out[0], "x", 1, &e) == 0); /* a byte in the file that no line holds */
    CHECK(ledger_check(l, &e) != 0 && strstr(e.msg, "bytes"));
    book_close(&b);
    /* with debug_checks the commit itself reports it */
    CHECK(book_open(&b, "corrupt2", 0) == 0);
    CHECK(add_line(&b.l, 1, 1, k1) == 0);
    CHECK(add_result(&b.l, 1, "one") == 0);
    b.l.out_end[1] = 5;
    CHECK(ledger_commit_and_write(&b.l, &e) != 0);
    CHECK_MSG(strstr(e.msg, "after a commit: ledger_check") != NULL, "%s", e.msg);
    book_close(&b);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(folding_and_refs);
    RUN(lines_reach_the_file_only_after_their_commit);
    RUN(a_failed_commit_writes_and_stores_nothing);
    RUN(order_input_waits_for_earlier_lines);
    RUN(a_line_across_two_commits_reads_back_its_first_result);
    RUN(a_changed_line_is_refused);
    RUN(bytes_per_line_are_fixed_and_small);
    RUN(check_catches_corrupted_states);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
