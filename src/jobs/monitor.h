/* monitor — what a run looked like over time, and the memory watchdog that guards it.
 *
 * monitor_tick is called after every engine step. Every `interval` seconds it takes a sample (requests
 * done and failed, prompt and generated tokens, KV blocks in use, preemptions, running and waiting
 * sequences, the running-sequence cap, memory pressure and swap) into a bounded series: when the series
 * holds MONITOR_MAX_SAMPLES, every second sample is dropped and the interval doubles, so a week-long run
 * keeps an even, ever coarser, picture in fixed memory. A first sample is taken at the start and a last one
 * at monitor_finish.
 *
 * The watchdog (util/mempress) reads memory pressure at every sample (at least every 2 s): when swap
 * activity or PSI rises past its thresholds it halves the engine's running-sequence cap
 * (engine_set_max_seqs), and doubles it back once pressure has stayed low; each change is logged and kept
 * as an event for the record.
 *
 * Invariant: 1 <= n <= MONITOR_MAX_SAMPLES after monitor_start; samples in increasing t.
 */
#ifndef NS_JOBS_MONITOR_H
#define NS_JOBS_MONITOR_H

#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "util/mempress.h"

#define MONITOR_MAX_SAMPLES 512
#define MONITOR_MAX_EVENTS 64

struct monitor_sample {
    double t; /* seconds since monitor_start */
    int64_t done, failed, prompt_tokens, gen_tokens, prompt_cached, preemptions;
    int64_t kv_used, kv_total;
    int32_t running, waiting, seq_cap;
    double psi;          /* PSI some avg10, -1 unknown */
    int64_t swap_pages;  /* pswpin + pswpout since start, -1 unknown */
};

struct monitor_event {
    double t;
    int32_t from, to;
    double psi;
    int64_t swap_pages;
};

struct monitor {
    double t0, interval, next_sample, next_watch;
    const char *proc_root; /* NULL: mempress_default_root() */
    int watchdog;          /* 1: the watchdog acts */
    struct mempress_watchdog wd;
    struct mempress_sample m0, last;
    struct monitor_sample s[MONITOR_MAX_SAMPLES];
    int n;
    struct monitor_event ev[MONITOR_MAX_EVENTS];
    int n_ev, n_ev_dropped;
};

/* Starts at now with the first sample; interval > 0 seconds; max_seqs: the engine's (the watchdog's top). */
void monitor_start(struct monitor *mo, engine *eng, double interval, int32_t max_seqs, int watchdog, double now);
/* After every engine step: samples when due; runs the watchdog. done, failed: requests finished so far. */
void monitor_tick(struct monitor *mo, engine *eng, int64_t done, int64_t failed, double now);
/* The last sample (always taken). */
void monitor_finish(struct monitor *mo, engine *eng, int64_t done, int64_t failed, double now);
/* {"interval_s", "columns": [...], "samples": [[...], ...]} and {"enabled", "lowered", "raised",
 * "min_cap", "events": [...]} (new references). */
json_t *monitor_timeline_json(const struct monitor *mo);
json_t *monitor_watchdog_json(const struct monitor *mo);
/* Debug check of the invariant. 0 ok. */
int monitor_check(const struct monitor *mo);

#endif
