/* threads — persistent pool; see threads.h.
 *
 * Invariants:
 *  - Job g (g = the owner's call count) lives in jobs[g & 1]; `claim` = (g << 32) | next task index. A
 *    thread claims task i of job g only by a CAS of claim from (g, i) to (g, i + 1), after reading the job
 *    slot; a successful CAS proves the slot still held job g (the owner rewrites slot g & 1 only for job
 *    g + 2, after publishing g + 1, which changes claim). So a worker that wakes late, or stalls between
 *    reading and claiming, can never run a task of the wrong job.
 *  - The owner returns when n_done == n_tasks, i.e. when every task has finished, without waiting for
 *    workers to check in: a worker the OS has descheduled costs nothing unless it holds a task. Waiting
 *    for a task in flight, the owner spins briefly and then sleeps on done_cv; the worker that completes
 *    the last task signals it when owner_waiting is set (seq_cst on n_done and owner_waiting, and the
 *    owner re-checks n_done under the mutex, so the signal cannot be lost).
 *  - Sleep/wake: a job is announced by incrementing `generation` (seq_cst) after publishing `claim`; a
 *    worker that goes to sleep first increments n_sleeping and re-checks generation under the mutex, and the
 *    owner broadcasts (under the mutex) whenever it sees n_sleeping > 0 after the increment. With seq_cst
 *    on both sides one of the two sees the other, so no wake-up is lost.
 *  - Adaptive inline mode (threads_adapt): solo_left > 0 means the next dispatches run on the owner alone;
 *    it is set only from timing measurements and changes where tasks run, never which tasks run.
 */
#include "util/threads.h"

#include <assert.h>
#include <stdalign.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <x86intrin.h>
#define THREADS_PAUSE() _mm_pause()
/* The time-stamp counter: a few ns per read, ~1-4 ticks per ns (the spin times below are approximate). */
static inline uint64_t threads_ticks(void)
{
    return __rdtsc();
}
#define THREADS_TICKS_PER_US 2500
#else
#define THREADS_PAUSE() ((void)0)
static inline uint64_t threads_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#define THREADS_TICKS_PER_US 1000
#endif

/* How long a thread spins for the next job (worker) or for tasks still running (owner) before it sleeps.
 * Long enough to cover the gaps between the dispatches of one forward step (a few us of serial work), short
 * enough that an idle or mostly-inline pool does not burn a core that other processes (or this process's
 * own owner thread, on a loaded machine) could use. */
#define THREADS_SPIN_US 20
#define THREADS_OWNER_SPIN_US 20

/* Adaptive use of the workers: see threads_adapt. */
#define THREADS_WINDOW 16         /* dispatches per window, at least */
#define THREADS_WINDOW_US 2000    /* wall time per window, at least */
#define THREADS_STRIKES 2         /* windows in a row without speed-up before running inline */
#define THREADS_MIN_SPEEDUP 1.15
#define THREADS_SOLO_MIN 64
#define THREADS_SOLO_MAX 4096

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
    /* the three hot counters on their own cache lines (workers spin on generation) */
    alignas(64) _Atomic uint64_t claim; /* (g << 32) | next task */
    alignas(64) _Atomic int64_t n_done; /* tasks of the current job finished */
    alignas(64) _Atomic uint64_t generation; /* bumped per job, for waking workers */
    alignas(64) _Atomic int stop;

    _Atomic int n_sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    _Atomic int owner_waiting; /* the owner sleeps on done_cv until n_done reaches n_tasks */
    pthread_cond_t done_cv;

    /* Adaptive use of the workers (see threads_parallel_for); owner only, except worker_busy. */
    alignas(64) _Atomic uint64_t worker_busy; /* ticks the workers spent inside tasks */
    uint64_t win_wall, win_busy;              /* over the current window of pool dispatches */
    int win_n;
    int strikes; /* windows in a row that showed no speed-up */
    int solo_left; /* dispatches still to run inline before the workers are tried again */
    int solo_len;  /* length of the next inline period */
    int64_t n_inline; /* statistics: dispatches of >= 2 tasks run inline */
};

int threads_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* Claims and runs tasks of whatever job `claim` names until it has none left; returns the ticks spent in
 * tasks (workers also add them to worker_busy, before counting the task done). */
static uint64_t threads_run_claims(threads_pool *p, int thread)
{
    uint64_t c = atomic_load(&p->claim), busy = 0;
    for (;;) {
        const struct threads_job *j = &p->jobs[(c >> 32) & 1];
        int64_t n = atomic_load_explicit(&j->n_tasks, memory_order_relaxed);
        int64_t i = (int64_t)(uint32_t)c;
        if (i >= n) return busy;
        threads_task_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&j->arg, memory_order_relaxed);
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue; /* c reloaded */
        const uint64_t t0 = threads_ticks();
        fn(arg, i, thread);
        const uint64_t dt = threads_ticks() - t0;
        busy += dt;
        if (thread != 0) atomic_fetch_add_explicit(&p->worker_busy, dt, memory_order_relaxed);
        if (atomic_fetch_add(&p->n_done, 1) + 1 == n && atomic_load(&p->owner_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
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
        if (g == seen) {
            const uint64_t t0 = threads_ticks();
            do {
                for (int i = 0; i < 16 && g == seen; i++) {
                    THREADS_PAUSE();
                    g = atomic_load(&p->generation);
                }
            } while (g == seen && threads_ticks() - t0 < (uint64_t)THREADS_SPIN_US * THREADS_TICKS_PER_US);
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
    threads_pool *p = NULL;
    if (posix_memalign((void **)&p, 64, sizeof *p) != 0) return err_set(e, "threads: out of memory");
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    p->solo_len = THREADS_SOLO_MIN;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
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
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

int threads_count(const threads_pool *p)
{
    return p->n_threads;
}

/* After a pool dispatch that took `wall` ticks, `busy` of them (summed over threads) inside tasks: over
 * windows of at least THREADS_WINDOW dispatches and THREADS_WINDOW_US of wall time, if the threads
 * together did less than THREADS_MIN_SPEEDUP times the work of one thread per unit of time in
 * THREADS_STRIKES windows in a row, the workers are not running beside the owner (a loaded machine: they
 * share its core or wait for one) and only add hand-off costs, so the next solo_len dispatches run inline;
 * solo_len doubles (up to THREADS_SOLO_MAX) while that stays true and resets when the workers help
 * again. The time floor and the strikes keep a short stall (a virtual CPU descheduled for a millisecond)
 * from sending a busy pool inline. Only where tasks run changes, never what they compute. */
static void threads_adapt(threads_pool *p, uint64_t wall, uint64_t busy)
{
    p->win_wall += wall;
    p->win_busy += busy;
    if (++p->win_n < THREADS_WINDOW || p->win_wall < (uint64_t)THREADS_WINDOW_US * THREADS_TICKS_PER_US) return;
    if ((double)p->win_busy < THREADS_MIN_SPEEDUP * (double)p->win_wall) {
        if (++p->strikes >= THREADS_STRIKES) {
            p->solo_left = p->solo_len;
            p->solo_len = p->solo_len * 2 > THREADS_SOLO_MAX ? THREADS_SOLO_MAX : p->solo_len * 2;
        }
    } else {
        p->strikes = 0;
        p->solo_len = THREADS_SOLO_MIN;
    }
    p->win_wall = p->win_busy = 0;
    p->win_n = 0;
}

void threads_parallel_for(threads_pool *p, int64_t n_tasks, threads_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n_started == 0 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    if (p->solo_left > 0) { /* the workers gave no speed-up lately: run inline (same results) */
        p->solo_left--;
        p->n_inline++;
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    const uint64_t t_start = threads_ticks(), wb_start = atomic_load_explicit(&p->worker_busy, memory_order_relaxed);
    assert(n_tasks <= (int64_t)UINT32_MAX);
    uint32_t g = ++p->n_jobs;
    struct threads_job *j = &p->jobs[g & 1];
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&j->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store(&p->n_done, 0);
    atomic_store(&p->claim, (uint64_t)g << 32); /* publishes the slot (seq_cst includes release) */
    threads_wake(p);
    const uint64_t owner_busy = threads_run_claims(p, 0);
    /* Spin briefly for tasks still running on workers, then sleep: a spinning owner would keep its core
     * busy while a preempted worker waits for a core; sleeping lets the scheduler run it here. */
    const uint64_t t0 = threads_ticks();
    for (int spins = 0; atomic_load(&p->n_done) < n_tasks; spins++) {
        if ((spins & 15) != 15 || threads_ticks() - t0 < (uint64_t)THREADS_OWNER_SPIN_US * THREADS_TICKS_PER_US) {
            THREADS_PAUSE();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->owner_waiting, 1);
        while (atomic_load(&p->n_done) < n_tasks) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->owner_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
    threads_adapt(p, threads_ticks() - t_start,
                  owner_busy + atomic_load_explicit(&p->worker_busy, memory_order_relaxed) - wb_start);
}

int64_t threads_inline_dispatches(const threads_pool *p)
{
    return p->n_inline;
}
