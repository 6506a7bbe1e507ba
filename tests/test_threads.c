/* test_threads — the persistent pool: every task runs exactly once per call, thread ids are in range,
 * the pool is reusable across many calls of different sizes, and a 1-thread pool runs inline. */
#include <stdatomic.h>
#include <string.h>

#include "test.h"
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

int main(void)
{
    RUN(test_pool_1_thread);
    RUN(test_pool_2_threads);
    RUN(test_pool_4_threads);
    RUN(test_pool_default_and_free);
    return test_summary();
}
