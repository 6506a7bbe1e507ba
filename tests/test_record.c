/* Tests for jobs/record and jobs/progress: percentiles, time format, atomic record writes, the progress
 * line and its pacing. */
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
    struct progress_snapshot s = {25, 100, 2, 1000, 500, 0.43, 0.12};
    char buf[256];
    progress_format(buf, sizeof buf, &s, 1523.4, 812.2, 192);
    CHECK_STR(buf, "run 25/100 25.0% | prompt 1523 tok/s | gen 812 tok/s | ETA 3m12s | KV 43% | prefix hit 12% | failed 2");
    progress_format(buf, sizeof buf, &s, 0, 0, 7300);
    CHECK(strstr(buf, "ETA 2h01m") != NULL);

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

int main(void)
{
    RUN(percentiles);
    RUN(times_and_commit);
    RUN(write_is_atomic_json);
    RUN(progress_line);
    return test_summary();
}
