/* threads — a small persistent pthread pool with one operation: parallel_for over n tasks.
 *
 * The calling thread takes part as thread 0; n_threads - 1 workers are started once by threads_init and
 * reused by every call (no allocation, no thread creation per call). Tasks are handed out dynamically (an
 * atomic counter), so which thread runs a task varies from call to call: a task's result must depend only
 * on its index, never on the thread that ran it (the `thread` argument is for picking per-thread scratch).
 *
 * The call returns as soon as every task has finished; it never waits for a worker that the OS has not
 * scheduled (that worker simply finds no task left when it runs).
 *
 * Between calls workers spin briefly (~20 us: a dispatch every few microseconds is the common case in a
 * forward step) and then sleep on a condition variable, so an idle pool costs no CPU.
 *
 * Adaptive: the pool measures, over windows of dispatches, how much task time the threads deliver per unit
 * of wall time; when the workers give no speed-up (a loaded machine: they only get a core when the owner
 * does not), dispatches run inline on the calling thread for a while, then the workers are tried again.
 * Results never depend on this (tasks never depend on the thread that runs them).
 *
 * Not reentrant: one parallel_for at a time per pool, called from the thread that owns the pool, and a
 * task must not call threads_parallel_for on the same pool.
 */
#ifndef NS_UTIL_THREADS_H
#define NS_UTIL_THREADS_H

#include <stdint.h>

#include "util/err.h"

typedef struct threads_pool threads_pool;

/* fn(arg, task, thread): task in [0, n_tasks), thread in [0, threads_count()). */
typedef void (*threads_task_fn)(void *arg, int64_t task, int thread);

/* Starts n_threads - 1 workers; n_threads <= 0 means one per online core. */
int threads_init(int n_threads, threads_pool **out, struct err *e);
/* Stops and joins the workers. NULL is fine. */
void threads_free(threads_pool *p);
int threads_count(const threads_pool *p);
/* Runs fn for every task index in [0, n_tasks) (n_tasks < 2^32) and returns when all have finished. */
void threads_parallel_for(threads_pool *p, int64_t n_tasks, threads_task_fn fn, void *arg);
/* Dispatches of >= 2 tasks that ran inline because the workers gave no speed-up (statistics). */
int64_t threads_inline_dispatches(const threads_pool *p);
/* Online cores (at least 1). */
int threads_online_cores(void);

#endif
