/* sweep — the arithmetic and the files of `nightshift sweep` (the command itself is cli/cmd_sweep.c): which
 * backlog lines to sample, when to stop climbing, which setting to recommend, and the CSV, JSON and SVG that
 * show the points.
 *
 * Sampling is stratified by prompt length: the lines sorted by (length, index) are cut into k strata of
 * equal size and the middle line of each is taken, so the sample has the backlog's length distribution
 * (its short, median and long prompts) at any k, and the same backlog always gives the same sample.
 *
 * A point is one engine setting (max_seqs = concurrency, max_batch_tokens) measured over a window of whole
 * closed batches of c requests (cli/cmd_sweep.c), so its tokens have the requests' own mix of prompt rows
 * (several times cheaper per token than decode steps) and generated tokens. It is steady once
 * sweep_steady_need(c) requests have finished in it. A point is usable when it is steady, no request
 * failed and it kept the memory headroom (no swap-out, memory pressure below the threshold, peak RSS under
 * the limit). The recommendation is the smallest usable
 * setting (by concurrency, then token budget) whose total tok/s is within SWEEP_WITHIN of the best usable
 * point's; that point is also the knee drawn on the chart.
 */
#ifndef NS_JOBS_SWEEP_H
#define NS_JOBS_SWEEP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "util/err.h"

#define SWEEP_WITHIN 0.05 /* recommend within 5% of the best throughput */
#define SWEEP_FLAT 0.05   /* climbing stops when a point gains less than 5% over the best before it */
#define SWEEP_WINDOW_CAP 6 /* a window waits for steady state up to 6 x its planned length */

struct sweep_point {
    int32_t concurrency, max_batch_tokens;
    int32_t requests, failed;      /* finished in the window's whole batches; failed: of every request run */
    int64_t prompt_tokens, gen_tokens; /* computed in the window (prompt: rows at prompt positions) */
    int64_t preemptions, kv_blocks_peak, kv_blocks_total;
    double wall_s;
    double gen_tok_s, total_tok_s;
    double rel_cost;               /* cost per million tokens relative to the first point (1.0 there) */
    double p50_s, p95_s;           /* request latency (submission to result) */
    uint64_t peak_rss;             /* bytes */
    double psi_some_avg10;         /* /proc/pressure/memory "some" avg10 at the end; -1 unknown */
    int64_t pswpin, pswpout;       /* pages swapped during the point; -1 unknown */
    double energy_j;               /* joules during the point; -1 unknown */
    int over_headroom;             /* swapped, pressure past the threshold or RSS past the limit */
};

/* Picks k of the n lines (k <= n) with prompt lengths len, stratified by length; out[0..k) are line indices,
 * ascending by length. k > n is clamped to n; returns the number picked. */
size_t sweep_sample(const int32_t *len, size_t n, size_t k, size_t *out);

/* Fills p->gen_tok_s, total_tok_s, and rel_cost against base (NULL: p is the base, 1.0). */
void sweep_rates(struct sweep_point *p, const struct sweep_point *base);

/* Requests that must finish in a window at concurrency c before it is steady: one whole batch, and at
 * least 2. */
int32_t sweep_steady_need(int32_t concurrency);

/* 1 when p is usable: steady, no failure and not over the headroom. */
int sweep_usable(const struct sweep_point *p);

/* Why p is not usable ("" when it is), for the terminal. */
const char *sweep_unusable_reason(const struct sweep_point *p);

/* 1 when climbing should stop after the last of the n points (n >= 1): it is not usable, or it gains less
 * than SWEEP_FLAT over the best usable point before it (n >= 2). */
int sweep_should_stop(const struct sweep_point *pts, size_t n);

/* Seconds the first requests of a next level at next_c would take to finish (its time to steady state),
 * from the p95 latency of the last point and its growth per doubling of concurrency since prev (NULL: no
 * growth known, 0 returned). Latency grows about in proportion where the machine is compute-bound (a CPU)
 * and hardly at all where it is bound by memory bandwidth (a GPU at small batches). */
double sweep_predict_steady_s(const struct sweep_point *prev, const struct sweep_point *last, int32_t next_c);

/* The index of the recommended point (see the top), or -1 when no point is usable. *best (may be NULL):
 * the index of the best usable point. */
int sweep_recommend(const struct sweep_point *pts, size_t n, int *best);

/* The points as CSV (a header line, then one line per point), as JSON (array of objects; new reference),
 * and as a self-contained SVG chart: total and generation tok/s and peak RSS against concurrency, the
 * recommended point marked "knee" (rec < 0: none), title given. */
int sweep_write_csv(FILE *f, const struct sweep_point *pts, size_t n);
json_t *sweep_points_json(const struct sweep_point *pts, size_t n);
int sweep_write_svg(FILE *f, const char *title, const struct sweep_point *pts, size_t n, int rec);

#endif
