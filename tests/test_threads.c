/* test_threads — the persistent pool: every task runs exactly once per call, thread ids are in range,
 * the pool is reusable across many calls of different sizes, and a 1-thread pool runs inline. */
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "test.h"
#include "util/clock.h"
#include "util/threads.h"

struct tally {
    _Atomic int hits[4096];
    _Atomic int bad_thread;
    int n_threads;
};

static void count_task(void *arg, int64_t task, int thread)
{
    struct tally *t = arg;
    atomic_fetch_add(&t->hits[task], 1);
    if (thread < 0 || thread >= t->n_threads) atomic_store(&t->bad_thread, 1);
}

static int run_pool(int n_threads, char *why, size_t why_n)
{
    threads_pool *p = NULL;
    struct err e;
    if (threads_init(n_threads, &p, &e)) return snprintf(why, why_n, "%.200s", e.msg), -1;
    static struct tally t;
    t.n_threads = threads_count(p);
    if (n_threads > 0 && t.n_threads != n_threads) return snprintf(why, why_n, "count"), -1;
    const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 4096, 5, 1000};
    for (int round = 0; round < 300; round++) {
        int64_t n = sizes[round % (sizeof sizes / sizeof sizes[0])];
        memset(&t.hits, 0, sizeof t.hits);
        atomic_store(&t.bad_thread, 0);
        threads_parallel_for(p, n, count_task, &t);
        for (int64_t i = 0; i < 4096; i++) {
            int want = i < n ? 1 : 0;
            if (atomic_load(&t.hits[i]) != want) {
                threads_free(p);
                return snprintf(why, why_n, "round %d n %lld: task %lld ran %d times", round, (long long)n,
                                (long long)i, atomic_load(&t.hits[i])), -1;
            }
        }
        if (atomic_load(&t.bad_thread)) {
            threads_free(p);
            return snprintf(why, why_n, "thread id out of range"), -1;
        }
        if (round == 150) usleep(20000); /* let workers fall asleep, then wake them */
    }
    threads_free(p);
    return 0;
}

TEST(test_pool_1_thread)
{
    char why[256] = "";
    CHECK_MSG(run_pool(1, why, sizeof why) == 0, "%s", why);
}

TEST(test_pool_2_threads)
{
    char why[256] = "";
    CHECK_MSG(run_pool(2, why, sizeof why) == 0, "%s", why);
}

TEST(test_pool_4_threads)
{
    char why[256] = "";
    CHECK_MSG(run_pool(4, why, sizeof why) == 0, "%s", why);
}

TEST(test_pool_default_and_free)
{
    threads_pool *p = NULL;
    CHECK(threads_init(0, &p, NULL) == 0);
    CHECK(threads_count(p) == threads_online_cores());
    threads_free(p);
    threads_free(NULL);
}

static void spin_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    struct tally *t = arg;
    double t0 = clock_now();
    while (clock_now() - t0 < 30e-6) {} /* 30 us of work */
    atomic_fetch_add(&t->hits[task], 1);
}

/* With every thread pinned to one CPU the workers cannot speed anything up: the pool notices and runs
 * dispatches inline (still every task exactly once). */
TEST(test_pool_goes_inline_without_speedup)
{
    cpu_set_t old, one;
    if (sched_getaffinity(0, sizeof old, &old) != 0) SKIP("sched_getaffinity failed");
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    if (sched_setaffinity(0, sizeof one, &one) != 0) SKIP("sched_setaffinity failed");
    threads_pool *p = NULL;
    int rc = threads_init(2, &p, NULL); /* the worker inherits the one-CPU mask */
    static struct tally t;
    int64_t inl = -1;
    int bad = 0;
    for (int round = 0; rc == 0 && round < 120 && !bad; round++) {
        memset(&t.hits, 0, sizeof t.hits);
        threads_parallel_for(p, 8, spin_task, &t);
        for (int i = 0; i < 8; i++) bad |= atomic_load(&t.hits[i]) != 1;
    }
    if (rc == 0) inl = threads_inline_dispatches(p);
    threads_free(p);
    sched_setaffinity(0, sizeof old, &old);
    CHECK(rc == 0);
    CHECK_MSG(!bad, "a task did not run exactly once");
    printf("# one CPU, 2 threads: %lld of 120 dispatches ran inline\n", (long long)inl);
    CHECK_MSG(inl >= 60, "only %lld of 120 dispatches ran inline", (long long)inl);
}

int main(void)
{
    RUN(test_pool_1_thread);
    RUN(test_pool_2_threads);
    RUN(test_pool_4_threads);
    RUN(test_pool_default_and_free);
    RUN(test_pool_goes_inline_without_speedup);
    return test_summary();
}
