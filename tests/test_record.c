/* Tests for jobs/record and jobs/progress: percentiles, time format, atomic record writes, the run record
 * built from its parts, the progress line and its pacing. */
#include <jansson.h>

#include "jobs/progress.h"
#include "jobs/record.h"
#include "test.h"

TEST(percentiles)
{
    double v[] = {5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
    CHECK(record_percentile(v, 10, 50) == 5);
    CHECK(record_percentile(v, 10, 95) == 10);
    CHECK(record_percentile(v, 10, 100) == 10);
    CHECK(record_percentile(v, 10, 0) == 1);
    CHECK(record_percentile(v, 0, 50) == 0);
    double one[] = {0.25};
    CHECK(record_percentile(one, 1, 95) == 0.25);
}

TEST(times_and_commit)
{
    char t[32];
    record_iso_time(0, t);
    CHECK_STR(t, "1970-01-01T00:00:00Z");
    record_iso_time(1796013249, t);
    CHECK_STR(t, "2026-11-30T04:34:09Z");
    const char *c = record_git_commit();
    CHECK(c && (!strcmp(c, "unknown") || strlen(c) == 40));
    struct record_energy m;
    record_energy_start(&m, 1);
    double cj, gj;
    record_energy_read(&m, &cj, &gj);
    CHECK(m.cpu_available ? cj >= 0 : cj == -1);
    CHECK(m.gpu_available ? gj >= 0 : gj == -1);
    record_energy_stop(&m);
    CHECK(!m.gpu_available && m.nvml == NULL);
}

TEST(write_is_atomic_json)
{
    char path[] = "/tmp/ns_test_record_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    json_t *o = json_pack("{s:s, s:f, s:[i,i]}", "a", "b", "x", 1.5, "l", 1, 2);
    struct err e;
    CHECK(record_write(path, o, &e) == 0);
    json_decref(o);
    json_error_t je;
    json_t *back = json_load_file(path, 0, &je);
    CHECK(back != NULL);
    CHECK_STR(json_string_value(json_object_get(back, "a")), "b");
    json_decref(back);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0); /* no temporary left behind */
    unlink(path);
    json_t *empty = json_object();
    int rc = record_write("/proc/nonexistent/x.json", empty, &e);
    json_decref(empty);
    CHECK(rc != 0);
}

TEST(progress_line)
{
    struct progress_snapshot s = {25, 100, 2, 1000, 500, 0.43, 0.12, 0, 0, 0};
    char buf[256];
    progress_format(buf, sizeof buf, &s, 1523.4, 812.2, 192);
    CHECK_STR(buf,
              "run 25/100 25.0% | prompt 1523 tok/s | gen 812 tok/s | ETA 3m12s | KV 43% | prefix hit 12% | failed 2");
    progress_format(buf, sizeof buf, &s, 0, 0, 7300);
    CHECK(strstr(buf, "ETA 2h01m") != NULL);
    s.lookup = 1;
    s.draft_acceptance = 0.814;
    s.tokens_per_step = 3.42;
    progress_format(buf, sizeof buf, &s, 1523.4, 812.2, 192);
    CHECK_STR(buf,
              "run 25/100 25.0% | prompt 1523 tok/s | gen 812 tok/s | ETA 3m12s | KV 43% | prefix hit 12% | failed 2 "
              "| lookup 81% acc, 3.4 tok/step");
    s.lookup = 0;

    /* log mode: one line per interval, not more */
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    progress *p = progress_init(f, PROGRESS_LOG, 10, 0.0);
    progress_update(p, &s, 1.0);  /* too early */
    progress_update(p, &s, 10.5); /* draws */
    progress_update(p, &s, 11.0); /* too early again */
    progress_finish(p, &s, 12.0); /* always draws */
    progress_free(p);
    fclose(f);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += mem[i] == '\n';
    CHECK_EQ_INT(lines, 2);
    CHECK(strstr(mem, "nightshift run: run 25/100") != NULL);
    free(mem);

    /* quiet draws nothing */
    f = open_memstream(&mem, &len);
    p = progress_init(f, PROGRESS_QUIET, 1, 0.0);
    progress_update(p, &s, 100.0);
    progress_finish(p, &s, 101.0);
    progress_free(p);
    fclose(f);
    CHECK_EQ_INT(len, 0);
    free(mem);
}

static json_int_t get_int(const json_t *o, const char *a, const char *b)
{
    return json_integer_value(json_object_get(json_object_get(o, a), b));
}

static double get_real(const json_t *o, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(o, a), b));
}

TEST(run_record_from_its_parts)
{
    struct job_config c = job_default_config();
    char *argv[] = {"nightshift", "run", "b.jsonl"};
    c.argc = 3;
    c.argv = argv;
    c.output = "o.jsonl";
    c.errors = "o.err";
    c.store = "o.db";
    c.version = "9.9";
    json_t *flags = json_pack("{s:i}", "threads", 3);
    c.settings = flags;
    struct job_model m;
    memset(&m, 0, sizeof m);
    m.path = "/m/tiny.gguf";
    m.name = "tiny.gguf";
    m.size = 1234;
    m.sha256[31] = 0x0f;
    m.chat = CHAT_CHATML;
    m.chat_source = "flag";
    m.backend = "cpu";
    m.threads = 3;
    m.ep = engine_default_params();
    m.ep.kv_block = 16;
    struct job_summary s;
    memset(&s, 0, sizeof s);
    s.lines = 10;
    s.lines_ok = 8;
    s.lines_failed = 2;
    s.input_errors = 1;
    s.engine_errors = 1;
    s.work_total = 9;
    s.work_computed = 7;
    s.work_failed = 1;
    s.work_skipped_done = 2;
    s.prompt_tokens = 300;
    s.gen_tokens = 100;
    s.wall_s = 2.0;
    s.t_store = 0.5;
    s.interrupted = 1;
    struct engine_stats es;
    memset(&es, 0, sizeof es);
    es.kv_blocks_total = 100;
    es.kv_blocks_peak = 25;
    es.prompt_tokens_computed = 150;
    es.prompt_tokens_cached = 50;
    es.gen_tokens = 100;
    es.seq_steps = 40;
    es.n_drafts = 10;
    es.draft_tokens = 40;
    es.draft_accepted = 30;
    double lat[] = {3, 1, 2};
    json_t *backlog = json_pack("{s:s}", "format", "openai");
    struct record_energy en;
    record_energy_start(&en, 0);
    struct record_run rr = {&c, &m, &s, &es, lat, 3, 3, backlog, NULL, 0, &en, 4096};
    json_t *r = record_build(&rr);
    record_energy_stop(&en);
    json_decref(flags);
    json_decref(backlog);
    CHECK(r != NULL);
    CHECK_STR(json_string_value(json_object_get(r, "status")), "interrupted");
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "nightshift"), "version")), "9.9");
    CHECK_EQ_INT(json_array_size(json_object_get(r, "command")), 3);
    CHECK_EQ_INT(get_int(r, "flags", "threads"), 3);
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "model"), "sha256")),
              "000000000000000000000000000000000000000000000000000000000000000f");
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "model"), "chat_template")), "chatml");
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "backlog"), "format")), "openai");
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "files"), "store")), "o.db");
    CHECK_EQ_INT(get_int(r, "counts", "lines"), 10);
    CHECK_EQ_INT(get_int(r, "counts", "results"), 8);
    CHECK_EQ_INT(get_int(r, "counts", "done"), 6);
    CHECK_EQ_INT(get_int(r, "counts", "skipped_already_done"), 2);
    CHECK_EQ_INT(get_int(r, "tokens", "prompt_computed"), 150);
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "time"), "start")), "1970-01-01T00:00:00Z");
    CHECK(get_real(r, "time", "store_and_plan_fraction") == 0.25);
    CHECK(get_real(r, "throughput", "gen_tok_s") == 50.0);
    CHECK(get_real(r, "latency_s", "p50") == 2.0 && get_real(r, "latency_s", "max") == 3.0);
    CHECK_EQ_INT(get_int(r, "memory", "backlog_bytes"), 4096);
    CHECK_EQ_INT(get_int(r, "kv", "capacity_tokens"), 1600);
    CHECK(get_real(r, "kv", "peak_use") == 0.25);
    CHECK(get_real(r, "prefix_cache", "hit_rate") == 0.25);
    CHECK_EQ_INT(get_int(r, "lookup", "draft_tokens"), 40);
    CHECK(get_real(r, "lookup", "acceptance_rate") == 0.75);
    CHECK(get_real(r, "lookup", "mean_accepted_length") == 3.0);
    CHECK(get_real(r, "lookup", "tokens_per_step") == 2.5);
    CHECK(json_is_null(json_object_get(r, "repair")));
    CHECK(json_object_get(r, "energy") != NULL);
    json_decref(r);
}

TEST(histogram)
{
    double v[6] = {1.0, 2.0, 2.5, 3.0, 5.0, 5.0};
    json_t *h = record_histogram_json(v, 6, 4);
    CHECK(json_real_value(json_object_get(h, "lo")) == 1.0);
    CHECK(json_real_value(json_object_get(h, "width")) == 1.0);
    const json_t *c = json_object_get(h, "counts");
    CHECK_EQ_INT(json_array_size(c), 4);
    long long want[4] = {1, 2, 1, 2}; /* [1,2) [2,3) [3,4) [4,5]: the maximum goes in the last */
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(json_integer_value(json_array_get(c, (size_t)i)), want[i]);
    json_decref(h);
    h = record_histogram_json(NULL, 0, 3);
    CHECK_EQ_INT(json_array_size(json_object_get(h, "counts")), 3);
    json_decref(h);
}

int main(void)
{
    RUN(percentiles);
    RUN(times_and_commit);
    RUN(write_is_atomic_json);
    RUN(run_record_from_its_parts);
    RUN(progress_line);
    RUN(histogram);
    return test_summary();
}
