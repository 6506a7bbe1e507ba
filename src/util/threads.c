/* threads — persistent pool; see threads.h.
 *
 * Invariants:
 *  - Job g (g = the owner's call count) lives in jobs[g & 1]; `claim` = (g << 32) | next task index. A
 *    thread claims task i of job g only by a CAS of claim from (g, i) to (g, i + 1), after reading the job
 *    slot; a successful CAS proves the slot still held job g (the owner rewrites slot g & 1 only for job
 *    g + 2, after publishing g + 1, which changes claim). So a worker that wakes late, or stalls between
 *    reading and claiming, can never run a task of the wrong job.
 *  - The owner returns when n_done == n_tasks, i.e. when every task has finished, without waiting for
 *    workers to check in: a worker the OS has descheduled costs nothing unless it holds a task.
 *  - Sleep/wake: a job is announced by incrementing `generation` (seq_cst) after publishing `claim`; a
 *    worker that goes to sleep first increments n_sleeping and re-checks generation under the mutex, and the
 *    owner broadcasts (under the mutex) whenever it sees n_sleeping > 0 after the increment. With seq_cst
 *    on both sides one of the two sees the other, so no wake-up is lost.
 */
#include "util/threads.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define THREADS_PAUSE() _mm_pause()
#else
#define THREADS_PAUSE() ((void)0)
#endif

#define THREADS_SPIN_ITERS (1 << 14)

struct threads_worker {
    threads_pool *pool;
    int id;
    pthread_t tid;
};

struct threads_job {
    _Atomic(threads_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n_tasks;
};

struct threads_pool {
    int n_threads;
    struct threads_worker *workers; /* (n_threads - 1) */
    int n_started;

    uint32_t n_jobs;              /* owner only: jobs published so far */
    struct threads_job jobs[2];   /* job g in jobs[g & 1] */
    _Atomic uint64_t claim;       /* (g << 32) | next task */
    _Atomic int64_t n_done;       /* tasks of the current job finished */
    _Atomic uint64_t generation;  /* bumped per job, for waking workers */
    _Atomic int stop;

    _Atomic int n_sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int threads_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* Claims and runs tasks of whatever job `claim` names until it has none left. */
static void threads_run_claims(threads_pool *p, int thread)
{
    uint64_t c = atomic_load(&p->claim);
    for (;;) {
        const struct threads_job *j = &p->jobs[(c >> 32) & 1];
        int64_t n = atomic_load_explicit(&j->n_tasks, memory_order_relaxed);
        int64_t i = (int64_t)(uint32_t)c;
        if (i >= n) return;
        threads_task_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&j->arg, memory_order_relaxed);
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue; /* c reloaded */
        fn(arg, i, thread);
        atomic_fetch_add(&p->n_done, 1);
        c = atomic_load(&p->claim);
    }
}

static void *threads_worker_main(void *arg)
{
    struct threads_worker *w = arg;
    threads_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load(&p->generation);
        for (int i = 0; g == seen && i < THREADS_SPIN_ITERS; i++) {
            THREADS_PAUSE();
            g = atomic_load(&p->generation);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while ((g = atomic_load(&p->generation)) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load(&p->stop)) break;
        threads_run_claims(p, w->id);
    }
    return NULL;
}

static void threads_wake(threads_pool *p)
{
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

int threads_init(int n_threads, threads_pool **out, struct err *e)
{
    *out = NULL;
    if (n_threads <= 0) n_threads = threads_online_cores();
    if (n_threads > 1024) return err_set(e, "threads: %d threads is too many (at most 1024)", n_threads);
    threads_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "threads: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            threads_free(p);
            return err_set(e, "threads: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].id = i + 1;
            if (pthread_create(&p->workers[i].tid, NULL, threads_worker_main, &p->workers[i]) != 0) {
                threads_free(p);
                return err_set(e, "threads: cannot start worker thread %d of %d", i + 1, n_threads);
            }
            p->n_started++;
        }
    }
    *out = p;
    return 0;
}

void threads_free(threads_pool *p)
{
    if (!p) return;
    if (p->n_started > 0) {
        atomic_store(&p->stop, 1);
        threads_wake(p);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].tid, NULL);
    }
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int threads_count(const threads_pool *p)
{
    return p->n_threads;
}

void threads_parallel_for(threads_pool *p, int64_t n_tasks, threads_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n_started == 0 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    assert(n_tasks <= (int64_t)UINT32_MAX);
    uint32_t g = ++p->n_jobs;
    struct threads_job *j = &p->jobs[g & 1];
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&j->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store(&p->n_done, 0);
    atomic_store(&p->claim, (uint64_t)g << 32); /* publishes the slot (seq_cst includes release) */
    threads_wake(p);
    threads_run_claims(p, 0);
    for (long spins = 0; atomic_load(&p->n_done) < n_tasks; spins++) {
        if (spins < THREADS_SPIN_ITERS)
            THREADS_PAUSE();
        else
            sched_yield();
    }
}
