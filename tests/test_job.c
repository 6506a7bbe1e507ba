/* Tests for jobs/job (job_run) on stories260K, with the engine's and the ledger's debug checks on and a
 * commit after every engine step: every line ends in one file once; a second run computes nothing and leaves
 * the files as they are; a run stopped after a few steps and started again ends with the same results as an
 * uninterrupted one, in input order with --order input. */
#include "jobs/job.h"

#include <ctype.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "test.h"
#include "util/log.h"

static char tmp_dir[] = "/tmp/ns_test_job_XXXXXX";

static struct {
    gguf_file *f;
    struct model *m;
    tok_vocab *v;
    struct backend be;
    int loaded;
} stack;

static int load_stack(void)
{
    struct err e;
    const char *path = test_shared("models/stories260K.gguf");
    if (gguf_open(path, &stack.f, &e) || model_load(stack.f, &stack.m, &e) || tok_load(stack.f, &stack.v, &e) ||
        backend_cpu_init(&stack.be, 1, &e) || stack.be.ops->load(stack.be.ctx, stack.m, &e)) {
        fprintf(stderr, "load %s: %s\n", path, e.msg);
        return -1;
    }
    stack.loaded = 1;
    return 0;
}

static const char *tmp_path(const char *name)
{
    static char path[8][512];
    static int k;
    k = (k + 1) & 7;
    snprintf(path[k], sizeof path[k], "%s/%s", tmp_dir, name);
    return path[k];
}

static volatile sig_atomic_t stop_flag;
static int steps_before_stop; /* 0: never stop */
static int n_steps;
static int64_t kv_blocks = 128; /* the engine's pool for the next run_job */
static const char *backlog_name = "backlog.jsonl";

/* job_config.engine for the next run_job when use_ops: the run's own engine behind the calls, counted. */
static int use_ops;
static struct {
    engine *eng;
    int64_t adds, steps, takes;
} fwd;

static int fwd_add(void *ctx, const struct engine_request *r, struct err *e)
{
    (void)ctx;
    fwd.adds++;
    return engine_add(fwd.eng, r, e);
}
static int fwd_step(void *ctx, struct err *e)
{
    (void)ctx;
    fwd.steps++;
    return engine_step(fwd.eng, e);
}
static int fwd_has_work(void *ctx) { return (void)ctx, engine_has_work(fwd.eng); }
static int fwd_take(void *ctx, struct engine_result *out)
{
    (void)ctx;
    int got = engine_take(fwd.eng, out);
    fwd.takes += got;
    return got;
}
static void fwd_stats(void *ctx, struct engine_stats *st) { (void)ctx, engine_get_stats(fwd.eng, st); }
static const struct job_engine fwd_ops = {NULL, fwd_add, fwd_step, fwd_has_work, fwd_take, fwd_stats};

static void hook(const char *point)
{
    if (strcmp(point, "step") == 0 && ++n_steps == steps_before_stop) stop_flag = 1;
}

/* One job_run with a fresh engine on the test's backlog; outputs named after prefix. */
static int run_job(const char *prefix, int order_input, struct job_summary *s, struct err *e)
{
    char out[512], err_path[512], db[512], rec[512];
    snprintf(out, sizeof out, "%s.out", tmp_path(prefix));
    snprintf(err_path, sizeof err_path, "%s.err", tmp_path(prefix));
    snprintf(db, sizeof db, "%s.db", tmp_path(prefix));
    snprintf(rec, sizeof rec, "%s.record.json", tmp_path(prefix));
    struct job_config c = job_default_config();
    c.backlog = tmp_path(backlog_name);
    c.output = out;
    c.errors = err_path;
    c.store = db;
    c.record = rec;
    c.durability = STORE_DURABILITY_NORMAL;
    c.input.defaults.max_tokens = 6;
    c.order_input = order_input;
    c.commit_interval = 0;
    c.progress = PROGRESS_QUIET;
    c.stop = &stop_flag;
    c.test_hook = hook;
    c.version = "test";
    struct job_model m;
    memset(&m, 0, sizeof m);
    m.path = test_shared("models/stories260K.gguf");
    m.name = "stories260K";
    m.sha256[0] = 0x26;
    m.hp = &stack.m->hp;
    m.vocab = stack.v;
    m.chat = CHAT_CHATML;
    m.chat_source = "flag";
    m.backend = "cpu";
    m.threads = 1;
    m.ep = engine_default_params();
    m.ep.kv_blocks = kv_blocks;
    m.ep.max_seqs = 3;
    m.ep.debug_checks = 1;
    if (engine_init(stack.m, &stack.be, stack.v, &m.ep, &m.eng, e) != 0) return -1;
    if (use_ops) {
        memset(&fwd, 0, sizeof fwd);
        fwd.eng = m.eng;
        c.engine = &fwd_ops;
    }
    stop_flag = 0;
    n_steps = 0;
    int rc = job_run(&c, &m, s, e);
    engine_free(m.eng);
    return rc;
}

/* Zeroes the letters and digits after every occurrence of tag in l. */
static void blank_after(char *l, const char *tag)
{
    for (char *c = strstr(l, tag); c; c = strstr(c, tag))
        for (c += strlen(tag); isalnum((unsigned char)*c); c++) *c = '0';
}

/* The lines of a file with what differs between two runs of the same backlog zeroed (the "created" time, the
 * ids named from the run, cached_tokens: what the prefix cache held), sorted unless keep_order;
 * NULL-separated in one malloc'd string (compare with strcmp). */
static char *normalized(const char *path, int keep_order)
{
    char *text = test_read_file(path, NULL);
    if (!text) return NULL;
    char *lines[64];
    int n = 0;
    static const char *const tags[] = {"\"created\":", "batch_req_", "\"req_", "cmpl-", "\"cached_tokens\":"};
    for (char *l = strtok(text, "\n"); l && n < 64; l = strtok(NULL, "\n")) {
        for (size_t k = 0; k < sizeof tags / sizeof *tags; k++) blank_after(l, tags[k]);
        lines[n++] = l;
    }
    for (int i = 1; i < n && !keep_order; i++)
        for (int k = i; k > 0 && strcmp(lines[k - 1], lines[k]) > 0; k--) {
            char *t = lines[k];
            lines[k] = lines[k - 1];
            lines[k - 1] = t;
        }
    char *out = malloc(64 * 1024);
    size_t off = 0;
    for (int i = 0; i < n && out; i++) off += (size_t)snprintf(out + off, 64 * 1024 - off, "%s\n", lines[i]);
    free(text);
    return out;
}

TEST(run_and_resume)
{
    if (!stack.loaded) SKIP("no stories260K model");
    struct job_summary s;
    struct err e;
    CHECK_MSG(run_job("a", 0, &s, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(s.lines, 10);
    CHECK_EQ_INT(s.input_errors, 1);
    CHECK_EQ_INT(s.lines_ok + s.lines_failed, 10);
    CHECK_EQ_INT(s.folded_duplicates, 1);
    CHECK_EQ_INT(s.work_total, 10); /* 9 good lines, one with n = 3, one folded */
    CHECK_EQ_INT(s.work_computed, 10);
    CHECK(!s.interrupted);
    char *out1 = test_read_file(tmp_path("a.out"), NULL), *err1 = test_read_file(tmp_path("a.err"), NULL);
    json_t *rec = json_load_file(tmp_path("a.record.json"), 0, NULL);
    CHECK(out1 && err1 && rec);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(rec, "counts"), "lines")), 10);
    json_decref(rec);

    CHECK_MSG(run_job("a", 0, &s, &e) == 0, "%s", e.msg); /* again: nothing to do */
    CHECK_EQ_INT(s.work_computed, 0);
    CHECK_EQ_INT(s.work_skipped_done, 10);
    CHECK_EQ_INT(s.lines_ok + s.lines_failed, 10);
    char *out2 = test_read_file(tmp_path("a.out"), NULL), *err2 = test_read_file(tmp_path("a.err"), NULL);
    CHECK(out2 && err2 && !strcmp(out1, out2) && !strcmp(err1, err2));
    free(out1);
    free(err1);
    free(out2);
    free(err2);
}

/* job_config.engine: a run through the calls (here the run's own engine behind them) writes what the plain
 * run writes, and every engine call of the run goes through them. */
TEST(run_through_engine_calls)
{
    if (!stack.loaded) SKIP("no stories260K model");
    struct job_summary s;
    struct err e;
    use_ops = 1;
    int rc = run_job("ops", 0, &s, &e);
    use_ops = 0;
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK_EQ_INT(s.lines_ok + s.lines_failed, 10);
    CHECK_EQ_INT(fwd.adds, 10);
    CHECK_EQ_INT(fwd.takes, 10);
    CHECK(fwd.steps > 0);
    char *a = normalized(tmp_path("a.out"), 0), *b = normalized(tmp_path("ops.out"), 0);
    CHECK(a && b);
    CHECK_STR(a, b);
    free(a);
    free(b);
    a = normalized(tmp_path("a.err"), 0), b = normalized(tmp_path("ops.err"), 0);
    CHECK(a && b);
    CHECK_STR(a, b);
    free(a);
    free(b);
}

TEST(stopped_and_started_again_in_input_order)
{
    if (!stack.loaded) SKIP("no stories260K model");
    struct job_summary s;
    struct err e;
    steps_before_stop = 3;
    CHECK_MSG(run_job("b", 1, &s, &e) == 0, "%s", e.msg);
    steps_before_stop = 0;
    CHECK(s.interrupted);
    CHECK(s.work_computed < 10);
    int64_t first = s.work_computed;
    CHECK_MSG(run_job("b", 1, &s, &e) == 0, "%s", e.msg);
    CHECK(!s.interrupted);
    CHECK_EQ_INT(s.work_skipped_done, first);
    CHECK_EQ_INT(s.work_computed, 10 - first);
    CHECK_EQ_INT(s.lines_ok + s.lines_failed, 10);
    /* the same results as the uninterrupted run, and in input order */
    char *a = normalized(tmp_path("a.out"), 0), *b = normalized(tmp_path("b.out"), 0);
    CHECK(a && b);
    CHECK_STR(a, b);
    free(a);
    free(b);
    char *text = test_read_file(tmp_path("b.out"), NULL);
    CHECK(text);
    const char *ids[] = {"\"l1\"", "\"l2\"", "\"l3\"", "\"l5\"", "\"l6\"", "\"l7\"", "\"l8\"", "\"l9\"", "\"l10\""};
    const char *at = text;
    for (int i = 0; i < 9; i++) {
        const char *p = strstr(text, ids[i]);
        CHECK_MSG(p && p >= at, "%s out of order", ids[i]);
        at = p;
    }
    free(text);
}

/* A line the engine would refuse whatever happens (prompt + max_tokens over the whole KV pool) is a bad line
 * when the backlog is read ("request_too_large"), not an engine error stored as a failed key that
 * --retry-failed would retry in vain; a run with a pool that fits computes it (its error line is replaced). */
TEST(too_large_for_the_pool_is_refused_at_read_time)
{
    if (!stack.loaded) SKIP("no stories260K model");
    const char *backlog = "{\"id\":\"small\",\"prompt\":\"Once upon a time\",\"max_tokens\":4}\n"
                          "{\"id\":\"big\",\"prompt\":\"Once upon a time\",\"max_tokens\":100,\"ignore_eos\":true}\n";
    CHECK(test_write_file(tmp_path("pool.jsonl"), backlog, strlen(backlog)) == 0);
    backlog_name = "pool.jsonl";
    kv_blocks = 4; /* 64 tokens */
    struct job_summary s;
    struct err e;
    int rc = run_job("pool", 0, &s, &e);
    kv_blocks = 128;
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK_EQ_INT(s.lines_ok, 1);
    CHECK_EQ_INT(s.input_errors, 1);
    CHECK_EQ_INT(s.engine_errors, 0);
    CHECK_EQ_INT(s.work_computed, 1);
    char *err_text = test_read_file(tmp_path("pool.err"), NULL);
    CHECK(err_text);
    CHECK_MSG(err_text && strstr(err_text, "\"context_length_exceeded\"") && strstr(err_text, "\"big\"") &&
                  strstr(err_text, "KV blocks"),
              "%s", err_text ? err_text : "");
    free(err_text);
    rc = run_job("pool", 0, &s, &e); /* a pool that fits: the line runs now, without --retry-failed */
    backlog_name = "backlog.jsonl";
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK_EQ_INT(s.lines_ok, 2);
    CHECK_EQ_INT(s.lines_failed, 0);
    CHECK_EQ_INT(s.input_errors, 0);
    CHECK_EQ_INT(s.work_computed, 1);
    CHECK_EQ_INT(s.work_skipped_done, 1);
    err_text = test_read_file(tmp_path("pool.err"), NULL);
    CHECK(err_text && !*err_text);
    free(err_text);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    log_set_level(LOG_WARN);
    const char *backlog = "{\"id\":\"l1\",\"prompt\":\"Once upon a time\",\"temperature\":0}\n"
                          "{\"id\":\"l2\",\"prompt\":\"The little dog\"}\n"
                          "{\"id\":\"l3\",\"prompt\":\"Once upon a time\",\"temperature\":0}\n"
                          "{\"id\":\"l4\",\"prompt\":[1,999999]}\n"
                          "{\"id\":\"l5\",\"prompt\":\"Lily and Tom\",\"n\":3,\"temperature\":0.9}\n"
                          "{\"id\":\"l6\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}]}\n"
                          "{\"id\":\"l7\",\"prompt\":\"One day\",\"max_tokens\":12,\"stop\":[\".\"]}\n"
                          "{\"id\":\"l8\",\"prompt\":\"She was happy\",\"seed\":7}\n"
                          "{\"id\":\"l9\",\"prompt\":\"The sun\",\"top_k\":5}\n"
                          "{\"id\":\"l10\",\"prompt\":\"A big tree\",\"max_tokens\":3}\n";
    if (test_write_file(tmp_path("backlog.jsonl"), backlog, strlen(backlog)) != 0) return 1;
    if (load_stack() != 0) stack.loaded = 0;
    RUN(run_and_resume);
    RUN(run_through_engine_calls);
    RUN(stopped_and_started_again_in_input_order);
    RUN(too_large_for_the_pool_is_refused_at_read_time);
    if (stack.loaded) {
        backend_free(&stack.be);
        tok_free(stack.v);
        model_free(stack.m);
        gguf_close(stack.f);
    }
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
