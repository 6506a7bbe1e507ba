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
 *
 * A busy machine moves throughput by more than a level's gain, so a point is measured at least twice,
 * interleaved with its neighbours (sweep_schedule: c1, c2, c1, c2, then c4, c2, c4, then c8, c4, c8, ...),
 * and its runs merged (sweep_merge: tokens and time summed, the runs' rates kept for the spread). A step is
 * flat when its gain over the best level before it is under SWEEP_FLAT and inside the measured spread (the
 * larger of the two points' spreads, at least SWEEP_SPREAD_FLOOR); climbing stops on flatness only when the
 * next level's step is flat too (it confirms), so a dip at one level does not end the sweep. Every rule here
 * is a pure function of the points, so tests drive it with a fake clock and fake throughputs.
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
#define SWEEP_SPREAD_FLOOR 0.02 /* two runs understate the noise: a spread counts as at least 2% */
#define SWEEP_LOAD_CHANGE 0.20  /* runs of one point whose CPU share differs by 20 points: the load changed */
#define SWEEP_MAX_RUNS 4        /* measurements kept per point */

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
    int32_t runs;                  /* measurements merged into the point (sweep_merge); 0 for one unmerged */
    double run_tok_s[SWEEP_MAX_RUNS]; /* total tok/s of each run (the first SWEEP_MAX_RUNS) */
    double tok_s_lo, tok_s_hi;     /* the slowest and the fastest run's total tok/s */
    double spread;                 /* (tok_s_hi - tok_s_lo) / total_tok_s; 0 with one run */
    double cpu_share, cpu_share_lo, cpu_share_hi; /* process CPU time / (wall x threads); -1 unknown */
    double load1, load_lo, load_hi; /* /proc/loadavg's 1-minute figure at the end of a run; -1 unknown */
};

/* Why climbing stops (sweep_should_stop). */
enum sweep_stop { SWEEP_GO_ON = 0, SWEEP_STOP_UNUSABLE, SWEEP_STOP_FLAT };

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

/* The levels to measure (indices, into order[0..3)) when level l is added, last: it is the last level;
 * returns their count. l 0: {0} ({0, 0} when it is also the last); l 1: {1, 0, 1}; l >= 2: {l, l-1, l}.
 * Each level so ends with at least two runs, each taken beside its neighbours'. */
size_t sweep_schedule(int32_t l, int last, int32_t order[3]);

/* Merges one measured run (its rates filled by sweep_rates) into acc (zeroed before the first): tokens,
 * time, preemptions, swap and energy summed; requests the fewest of a run; latencies, RSS, KV peak and
 * PSI the largest; failures and headroom from any run; rates, lo, hi, spread, CPU share and load again. */
void sweep_merge(struct sweep_point *acc, const struct sweep_point *run);

/* 1 when the step to p from ref (both usable) is flat: gain under SWEEP_FLAT and inside the measured
 * spread (see the top). */
int sweep_step_flat(const struct sweep_point *ref, const struct sweep_point *p);

/* Whether climbing stops after the last of the n levels' points (n >= 1; one point a level, merged):
 * SWEEP_STOP_UNUSABLE when it is not usable; SWEEP_STOP_FLAT when n >= 3 and both the step to level n-2
 * and the step to level n-1 (each from the best usable level before it) are flat; else SWEEP_GO_ON. */
enum sweep_stop sweep_should_stop(const struct sweep_point *pts, size_t n);

/* Seconds the first requests of a next level at next_c would take to finish (its time to steady state),
 * from the p95 latency of the last point and its growth per doubling of concurrency since prev (NULL: no
 * growth known, 0 returned). Latency grows about in proportion where the machine is compute-bound (a CPU)
 * and hardly at all where it is bound by memory bandwidth (a GPU at small batches). */
double sweep_predict_steady_s(const struct sweep_point *prev, const struct sweep_point *last, int32_t next_c);

/* The index of the recommended point (see the top), or -1 when no point is usable. *best (may be NULL):
 * the index of the best usable point. */
int sweep_recommend(const struct sweep_point *pts, size_t n, int *best);

/* The point that `--max-seqs auto` would run (concurrency auto_c, the backend's knee) when it was measured,
 * is usable and is within SWEEP_WITHIN of the best point's total tok/s; else -1. */
int sweep_recommend_auto(const struct sweep_point *pts, size_t n, int best, int32_t auto_c);

/* How sure the recommendation rec is, against best (both indices from sweep_recommend) and the runner-up,
 * in words into buf, e.g. "within the spread of c8 and c16: choose 8"; returns 1 when the choice is
 * firm (separated by more than the spread, or inside SWEEP_WITHIN), 0 when the spread leaves it open. */
int sweep_confidence(const struct sweep_point *pts, size_t n, int rec, int best, char *buf, size_t cap);

/* 1 when the machine's load changed during the sweep: some point's runs got CPU shares more than
 * SWEEP_LOAD_CHANGE apart; the note (which point, the shares, the load average) into buf. 0: no change
 * seen (or no CPU figures), buf "". */
int sweep_load_note(const struct sweep_point *pts, size_t n, char *buf, size_t cap);

/* The points as CSV (a header line, then one line per point), as JSON (array of objects; new reference),
 * and as a self-contained SVG chart: total and generation tok/s and peak RSS against concurrency, the
 * recommended point marked "knee" (rec < 0: none), title given. */
int sweep_write_csv(FILE *f, const struct sweep_point *pts, size_t n);
json_t *sweep_points_json(const struct sweep_point *pts, size_t n);
int sweep_write_svg(FILE *f, const char *title, const struct sweep_point *pts, size_t n, int rec);

#endif
