/* test_monitor — the run's time series (bounded: halves its resolution when full) and the memory watchdog
 * acting on a real engine (stories260K), driven by a fake proc directory and a fake clock. */
#include "test.h"

#include <sys/stat.h>

#include "jobs/monitor.h"
#include "runtime/runtime.h"
#include "util/log.h"

static int write_proc(const char *root, double avg10, long long swapout)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pressure", root);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/pressure/memory", root);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "some avg10=%.2f avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            avg10);
    fclose(f);
    snprintf(path, sizeof path, "%s/vmstat", root);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "pswpin 0\npswpout %lld\n", swapout);
    fclose(f);
    return 0;
}

static int open_rt(struct runtime *rt, int32_t max_seqs)
{
    struct runtime_params p = runtime_default_params();
    p.model_path = test_shared("models/stories260K.gguf");
    p.kv_memory = 4 << 20;
    p.max_seqs = max_seqs;
    p.threads = 1;
    struct err e;
    return runtime_open(&p, rt, &e);
}

/* Adds n requests of a short prompt, greedy, long enough to stay running. */
static int add_reqs(engine *eng, int n)
{
    static const int32_t prompt[4] = {1, 20, 30, 40};
    struct err e;
    for (int i = 0; i < n; i++) {
        struct engine_request r = {.id = (uint64_t)i, .prompt = prompt, .n_prompt = 4, .max_tokens = 100,
                                   .sampling = sampler_default_params(), .ignore_eos = 1};
        if (engine_add(eng, &r, &e)) return -1;
    }
    return 0;
}

TEST(watchdog_lowers_the_engine_cap_and_raises_it_again)
{
    char root[] = "/tmp/ns_monitor_XXXXXX";
    CHECK(mkdtemp(root));
    struct runtime rt;
    CHECK(open_rt(&rt, 8) == 0);
    engine *eng = rt.eng;
    CHECK_EQ_INT(add_reqs(eng, 16), 0);
    struct monitor *mo = calloc(1, sizeof *mo);
    CHECK(mo);
    mo->proc_root = root;
    struct err e;
    double t = 100;
    CHECK_EQ_INT(write_proc(root, 0, 0), 0);
    monitor_start(mo, eng, 1.0, 8, 1, t);
    CHECK(mo->proc_root == root);
    CHECK_EQ_INT(engine_step(eng, &e), 0);
    monitor_tick(mo, eng, 0, 0, t);
    struct engine_stats st;
    engine_get_stats(eng, &st);
    CHECK_EQ_INT(st.n_running, 8);
    /* swapping: 5000 pages out since the last reading -> halved at once, then every backoff_s */
    CHECK_EQ_INT(write_proc(root, 0, 5000), 0);
    t += 2;
    monitor_tick(mo, eng, 0, 0, t);
    CHECK_EQ_INT(mo->wd.cap, 4);
    CHECK_EQ_INT(mo->n_ev, 1);
    CHECK_EQ_INT(mo->ev[0].from, 8);
    CHECK_EQ_INT(mo->ev[0].to, 4);
    for (int k = 0; k < 10; k++) {
        CHECK_EQ_INT(write_proc(root, 30, 5000 + 1000 * (k + 1)), 0);
        t += 2;
        monitor_tick(mo, eng, 0, 0, t);
    }
    CHECK_EQ_INT(mo->wd.cap, 1);
    /* the engine admits nobody new while more than the cap run; the running ones finish */
    for (int k = 0; k < 400 && engine_has_work(eng); k++) {
        CHECK_EQ_INT(engine_step(eng, &e), 0);
        struct engine_result r;
        while (engine_take(eng, &r)) engine_result_free(&r);
        engine_get_stats(eng, &st);
        if (st.n_running <= 1 && k > 150) break;
    }
    engine_get_stats(eng, &st);
    CHECK(st.n_running <= 1);
    /* calm: after calm_s without pressure, doubling every calm_s back to 8 */
    CHECK_EQ_INT(write_proc(root, 0, 20000), 0);
    t += 2;
    monitor_tick(mo, eng, 0, 0, t); /* the swap counter moved once more: still high */
    for (int k = 0; k < 100; k++) {
        t += 2;
        monitor_tick(mo, eng, 0, 0, t);
    }
    CHECK_EQ_INT(mo->wd.cap, 8);
    CHECK_EQ_INT(engine_set_max_seqs(eng, mo->wd.cap), 8);
    CHECK(mo->wd.n_raised == 3);
    CHECK_EQ_INT(engine_step(eng, &e), 0);
    engine_get_stats(eng, &st);
    CHECK(st.n_running > 1);
    CHECK_EQ_INT(monitor_check(mo), 0);
    json_t *w = monitor_watchdog_json(mo);
    CHECK(json_integer_value(json_object_get(w, "min_cap")) == 1);
    CHECK(json_array_size(json_object_get(w, "events")) == (size_t)mo->n_ev);
    json_decref(w);
    free(mo);
    runtime_close(&rt);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(timeline_is_bounded)
{
    struct runtime rt;
    CHECK(open_rt(&rt, 4) == 0);
    struct monitor *mo = calloc(1, sizeof *mo);
    CHECK(mo);
    mo->proc_root = "/nonexistent";
    monitor_start(mo, rt.eng, 1.0, 4, 0, 0);
    double t = 0;
    for (int i = 0; i < 5000; i++) {
        t += 0.5;
        monitor_tick(mo, rt.eng, i, 0, t);
    }
    monitor_finish(mo, rt.eng, 5000, 0, t + 0.1);
    CHECK(mo->n <= MONITOR_MAX_SAMPLES && mo->n > MONITOR_MAX_SAMPLES / 4);
    CHECK(mo->interval > 1.0);
    CHECK_EQ_INT(monitor_check(mo), 0);
    CHECK_EQ_INT(mo->s[mo->n - 1].done, 5000);
    CHECK(mo->s[mo->n - 1].psi == -1);
    CHECK_EQ_INT(mo->n_ev, 0); /* watchdog off */
    json_t *j = monitor_timeline_json(mo);
    CHECK(json_array_size(json_object_get(j, "samples")) == (size_t)mo->n);
    CHECK(json_array_size(json_object_get(j, "columns")) == 14);
    json_decref(j);
    free(mo);
    runtime_close(&rt);
}

int main(void)
{
    log_set_level(LOG_QUIET); /* the watchdog's log lines would interleave with the test lines */
    RUN(watchdog_lowers_the_engine_cap_and_raises_it_again);
    RUN(timeline_is_bounded);
    return test_summary();
}
