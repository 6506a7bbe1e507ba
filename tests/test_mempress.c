/* test_mempress — the PSI / vmstat parsers and the watchdog driven by a fake proc directory. */
#include "test.h"

#include <sys/stat.h>

#include "util/mempress.h"

static const char psi_fmt[] = "some avg10=%.2f avg60=0.00 avg300=0.00 total=123\n"
                              "full avg10=0.00 avg60=0.00 avg300=0.00 total=45\n";

TEST(parse)
{
    double v;
    CHECK_EQ_INT(mempress_parse_psi("some avg10=12.50 avg60=1.00 avg300=0.00 total=9\nfull avg10=3.00\n", &v), 0);
    CHECK(v == 12.5);
    CHECK_EQ_INT(mempress_parse_psi("full avg10=3.00\n", &v), -1);
    CHECK_EQ_INT(mempress_parse_psi("", &v), -1);
    int64_t in, out;
    CHECK_EQ_INT(mempress_parse_vmstat("nr_free_pages 5\npswpin 17\npswpout 42\npswpin_x 9\n", &in, &out), 0);
    CHECK_EQ_INT(in, 17);
    CHECK_EQ_INT(out, 42);
    CHECK_EQ_INT(mempress_parse_vmstat("pgpgin 1\n", &in, &out), -1);
}

/* The fake /proc: root/pressure/memory and root/vmstat. */
static int write_proc(const char *root, double avg10, long long swapin, long long swapout)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pressure", root);
    mkdir(root, 0700);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/pressure/memory", root);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, psi_fmt, avg10);
    fclose(f);
    snprintf(path, sizeof path, "%s/vmstat", root);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "nr_free_pages 1000\npswpin %lld\npswpout %lld\n", swapin, swapout);
    fclose(f);
    return 0;
}

TEST(read_fake_proc)
{
    char root[] = "/tmp/ns_mempress_XXXXXX";
    CHECK(mkdtemp(root));
    CHECK_EQ_INT(write_proc(root, 7.25, 3, 4), 0);
    struct mempress_sample s;
    mempress_read(root, &s);
    CHECK(s.some_avg10 == 7.25);
    CHECK_EQ_INT(s.pswpin, 3);
    CHECK_EQ_INT(s.pswpout, 4);
    setenv("NIGHTSHIFT_PROC_ROOT", root, 1);
    CHECK_STR(mempress_default_root(), root);
    mempress_read(NULL, &s);
    CHECK_EQ_INT(s.pswpout, 4);
    unsetenv("NIGHTSHIFT_PROC_ROOT");
    mempress_read("/nonexistent/proc", &s);
    CHECK(s.some_avg10 == -1 && s.pswpin == -1 && s.pswpout == -1);
}

TEST(watchdog_backs_off_and_recovers)
{
    char root[] = "/tmp/ns_mempress_XXXXXX";
    CHECK(mkdtemp(root));
    struct mempress_watchdog w;
    struct mempress_sample s;
    double t = 1000;
    mempress_watchdog_init(&w, 16, t);
    long long swin = 100, swout = 100;
    /* calm: the cap stays at max */
    for (int i = 0; i < 5; i++, t += 2) {
        CHECK_EQ_INT(write_proc(root, 0.5, swin, swout), 0);
        mempress_read(root, &s);
        CHECK_EQ_INT(mempress_watchdog_feed(&w, &s, t), 0);
    }
    CHECK_EQ_INT(w.cap, 16);
    /* swap storm: 1000 pages out between samples; halves at most every backoff_s (5 s) */
    int lowered = 0;
    for (int i = 0; i < 12; i++, t += 2) {
        swout += 1000;
        CHECK_EQ_INT(write_proc(root, 0.5, swin, swout), 0);
        mempress_read(root, &s);
        lowered += mempress_watchdog_feed(&w, &s, t) < 0;
    }
    CHECK_EQ_INT(lowered, 4);
    CHECK_EQ_INT(w.cap, 1);
    /* pressure alone (no swap) also counts as high */
    mempress_watchdog_init(&w, 8, t);
    CHECK_EQ_INT(write_proc(root, 40, swin, swout), 0);
    mempress_read(root, &s);
    CHECK_EQ_INT(mempress_watchdog_feed(&w, &s, t), -1);
    CHECK_EQ_INT(w.cap, 4);
    /* calm again: nothing for calm_s, then doubling once per calm_s up to max */
    int raised = 0;
    double t_high = t;
    for (t += 2; t < t_high + 29; t += 2) {
        CHECK_EQ_INT(write_proc(root, 1, swin, swout), 0);
        mempress_read(root, &s);
        CHECK_EQ_INT(mempress_watchdog_feed(&w, &s, t), 0);
    }
    for (; t < t_high + 200; t += 2) {
        CHECK_EQ_INT(write_proc(root, 1, swin, swout), 0);
        mempress_read(root, &s);
        raised += mempress_watchdog_feed(&w, &s, t) > 0;
    }
    CHECK_EQ_INT(raised, 1);
    CHECK_EQ_INT(w.cap, 8);
    CHECK(w.cap >= 1 && w.cap <= w.max);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ_INT(system(cmd), 0);
}

int main(void)
{
    RUN(parse);
    RUN(read_fake_proc);
    RUN(watchdog_backs_off_and_recovers);
    return test_summary();
}
