/* sweep — see sweep.h. */
#include "jobs/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sampling ---- */

static int cmp_by_len(const void *pa, const void *pb, void *ctx)
{
    const int32_t *len = ctx;
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    if (len[a] != len[b]) return len[a] < len[b] ? -1 : 1;
    return (a > b) - (a < b);
}

size_t sweep_sample(const int32_t *len, size_t n, size_t k, size_t *out)
{
    if (k > n) k = n;
    if (k == 0) return 0;
    size_t *order = malloc(n * sizeof *order);
    if (!order) return 0;
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, cmp_by_len, (void *)len);
    /* stratum j is sorted positions [j n / k, (j + 1) n / k): its middle is (2j + 1) n / 2k, distinct for
     * distinct j because every stratum holds at least one position when k <= n */
    for (size_t j = 0; j < k; j++) out[j] = order[(2 * j + 1) * n / (2 * k)];
    free(order);
    return k;
}

/* ---- the points ---- */

void sweep_rates(struct sweep_point *p, const struct sweep_point *base)
{
    double w = p->wall_s > 0 ? p->wall_s : 1e-9;
    p->gen_tok_s = (double)p->gen_tokens / w;
    p->total_tok_s = (double)(p->prompt_tokens + p->gen_tokens) / w;
    /* cost per token is machine time per token: 1 / throughput */
    p->rel_cost = base && p->total_tok_s > 0 ? base->total_tok_s / p->total_tok_s : 1.0;
}

int32_t sweep_steady_need(int32_t concurrency)
{
    return concurrency > 2 ? concurrency : 2;
}

int sweep_usable(const struct sweep_point *p)
{
    return *sweep_unusable_reason(p) == '\0';
}

const char *sweep_unusable_reason(const struct sweep_point *p)
{
    if (p->failed) return "a request failed";
    if (p->over_headroom) return "over the memory headroom";
    if (p->requests < sweep_steady_need(p->concurrency)) return "no steady state (too few requests finished)";
    if (p->total_tok_s <= 0) return "no tokens";
    return "";
}

size_t sweep_schedule(int32_t l, int last, int32_t order[3])
{
    if (l == 0) {
        order[0] = order[1] = 0;
        return last ? 2 : 1;
    }
    order[0] = order[2] = l;
    order[1] = l - 1;
    return 3;
}

static double dmin(double a, double b)
{
    return a < b ? a : b;
}

static double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* Folds v into the range [*lo, *hi] (-1: unknown, skipped); first: the range is v alone. */
static void fold_range(double v, int first, double *lo, double *hi)
{
    if (first || *lo < 0) *lo = *hi = v;
    else if (v >= 0) *lo = dmin(*lo, v), *hi = dmax(*hi, v);
}

void sweep_merge(struct sweep_point *acc, const struct sweep_point *run)
{
    int first = acc->runs == 0;
    if (first) {
        *acc = *run;
        acc->runs = 0;
    } else {
        acc->requests = run->requests < acc->requests ? run->requests : acc->requests;
        acc->failed += run->failed;
        acc->prompt_tokens += run->prompt_tokens;
        acc->gen_tokens += run->gen_tokens;
        acc->preemptions += run->preemptions;
        acc->kv_blocks_peak = run->kv_blocks_peak > acc->kv_blocks_peak ? run->kv_blocks_peak : acc->kv_blocks_peak;
        acc->wall_s += run->wall_s;
        acc->p50_s = dmax(acc->p50_s, run->p50_s);
        acc->p95_s = dmax(acc->p95_s, run->p95_s);
        acc->peak_rss = run->peak_rss > acc->peak_rss ? run->peak_rss : acc->peak_rss;
        acc->psi_some_avg10 = dmax(acc->psi_some_avg10, run->psi_some_avg10);
        acc->pswpin = acc->pswpin < 0 || run->pswpin < 0 ? -1 : acc->pswpin + run->pswpin;
        acc->pswpout = acc->pswpout < 0 || run->pswpout < 0 ? -1 : acc->pswpout + run->pswpout;
        acc->energy_j = acc->energy_j < 0 || run->energy_j < 0 ? -1 : acc->energy_j + run->energy_j;
        acc->over_headroom |= run->over_headroom;
    }
    if (acc->runs < SWEEP_MAX_RUNS) acc->run_tok_s[acc->runs] = run->total_tok_s;
    acc->runs++;
    fold_range(run->cpu_share, first, &acc->cpu_share_lo, &acc->cpu_share_hi);
    fold_range(run->load1, first, &acc->load_lo, &acc->load_hi);
    acc->cpu_share = run->cpu_share;
    acc->load1 = run->load1;
    sweep_rates(acc, NULL);
    int kept = acc->runs < SWEEP_MAX_RUNS ? acc->runs : SWEEP_MAX_RUNS;
    acc->tok_s_lo = acc->tok_s_hi = acc->run_tok_s[0];
    for (int i = 1; i < kept; i++)
        acc->tok_s_lo = dmin(acc->tok_s_lo, acc->run_tok_s[i]), acc->tok_s_hi = dmax(acc->tok_s_hi, acc->run_tok_s[i]);
    acc->spread = acc->total_tok_s > 0 ? (acc->tok_s_hi - acc->tok_s_lo) / acc->total_tok_s : 0;
}

/* The noise band of a point: its spread, at least SWEEP_SPREAD_FLOOR. */
static double band(const struct sweep_point *p)
{
    return dmax(p->spread, SWEEP_SPREAD_FLOOR);
}

int sweep_step_flat(const struct sweep_point *ref, const struct sweep_point *p)
{
    if (!(ref->total_tok_s > 0)) return 0;
    double gain = p->total_tok_s / ref->total_tok_s - 1.0;
    return gain < SWEEP_FLAT && gain <= dmax(band(ref), band(p));
}

/* The best usable point among pts[0..n), or -1. */
static int best_of(const struct sweep_point *pts, size_t n)
{
    int b = -1;
    for (size_t i = 0; i < n; i++)
        if (sweep_usable(&pts[i]) && (b < 0 || pts[i].total_tok_s > pts[b].total_tok_s)) b = (int)i;
    return b;
}

enum sweep_stop sweep_should_stop(const struct sweep_point *pts, size_t n)
{
    if (!sweep_usable(&pts[n - 1])) return SWEEP_STOP_UNUSABLE;
    if (n < 3 || !sweep_usable(&pts[n - 2])) return SWEEP_GO_ON;
    int b1 = best_of(pts, n - 2), b2 = best_of(pts, n - 1);
    if (b1 < 0 || b2 < 0) return SWEEP_GO_ON;
    return sweep_step_flat(&pts[b1], &pts[n - 2]) && sweep_step_flat(&pts[b2], &pts[n - 1]) ? SWEEP_STOP_FLAT
                                                                                             : SWEEP_GO_ON;
}

double sweep_predict_steady_s(const struct sweep_point *prev, const struct sweep_point *last, int32_t next_c)
{
    if (!prev || prev->p95_s <= 0 || last->p95_s <= 0 || last->concurrency <= prev->concurrency) return 0;
    double per_doubling = log(last->p95_s / prev->p95_s) / log((double)last->concurrency / prev->concurrency);
    if (per_doubling < 0) per_doubling = 0;
    return last->p95_s * pow((double)next_c / last->concurrency, per_doubling);
}

/* 1 when a is a smaller setting than b: fewer sequences, then a smaller token budget. */
static int smaller_setting(const struct sweep_point *a, const struct sweep_point *b)
{
    if (a->concurrency != b->concurrency) return a->concurrency < b->concurrency;
    return a->max_batch_tokens < b->max_batch_tokens;
}

int sweep_recommend(const struct sweep_point *pts, size_t n, int *best)
{
    int b = best_of(pts, n);
    if (best) *best = b;
    if (b < 0) return -1;
    int rec = b;
    for (size_t i = 0; i < n; i++)
        if (sweep_usable(&pts[i]) && pts[i].total_tok_s >= pts[b].total_tok_s * (1.0 - SWEEP_WITHIN) &&
            smaller_setting(&pts[i], &pts[rec]))
            rec = (int)i;
    return rec;
}

int sweep_recommend_auto(const struct sweep_point *pts, size_t n, int best, int32_t auto_c)
{
    if (best < 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (pts[i].concurrency == auto_c && sweep_usable(&pts[i]) &&
            pts[i].total_tok_s >= pts[best].total_tok_s * (1.0 - SWEEP_WITHIN))
            return (int)i;
    return -1;
}

/* "c4", or "c4/256" when a's token budget differs from b's, into buf. */
static const char *point_name(const struct sweep_point *a, const struct sweep_point *b, char *buf, size_t cap)
{
    if (a->max_batch_tokens != b->max_batch_tokens)
        snprintf(buf, cap, "c%d/%d", (int)a->concurrency, (int)a->max_batch_tokens);
    else snprintf(buf, cap, "c%d", (int)a->concurrency);
    return buf;
}

int sweep_confidence(const struct sweep_point *pts, size_t n, int rec, int best, char *buf, size_t cap)
{
    char na[32], nb[32];
    int other = best; /* the point rec is compared with: the best, or when rec is the best the runner-up */
    if (rec == best) {
        other = -1;
        for (size_t i = 0; i < n; i++)
            if ((int)i != best && sweep_usable(&pts[i]) && (other < 0 || pts[i].total_tok_s > pts[other].total_tok_s))
                other = (int)i;
    }
    if (rec < 0 || other < 0) {
        snprintf(buf, cap, rec < 0 ? "no usable point" : "one usable point: nothing to compare it with");
        return 0;
    }
    const struct sweep_point *r = &pts[rec], *o = &pts[other];
    double b = dmax(band(r), band(o)), gap = fabs(r->total_tok_s / o->total_tok_s - 1.0);
    int runs = r->runs < o->runs ? r->runs : o->runs;
    point_name(r, o, na, sizeof na), point_name(o, r, nb, sizeof nb);
    int n_out;
    if (gap <= b)
        n_out = snprintf(buf, cap, "within the spread of %s and %s (%.1f%% apart, spread %.1f%%): choose %d", na, nb,
                         100 * gap, 100 * b, (int)r->concurrency);
    else if (rec == best)
        n_out = snprintf(buf, cap, "%s leads the next best (%s) by %.1f%%, outside the spread (%.1f%%)", na, nb,
                         100 * gap, 100 * b);
    else
        n_out = snprintf(buf, cap, "%s is %.1f%% below the best (%s), outside the spread (%.1f%%) but within %.0f%%",
                         na, 100 * gap, nb, 100 * b, 100 * SWEEP_WITHIN);
    int firm = runs >= 2 && b <= SWEEP_WITHIN;
    size_t at = n_out > 0 && (size_t)n_out < cap ? (size_t)n_out : 0;
    if (!firm && at)
        snprintf(buf + at, cap - at, runs < 2 ? "; one run: low confidence" :
                 "; the spread is wider than %.0f%%: low confidence, rerun on a quieter machine", 100 * SWEEP_WITHIN);
    return firm;
}

int sweep_load_note(const struct sweep_point *pts, size_t n, char *buf, size_t cap)
{
    int w = -1;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const struct sweep_point *p = &pts[i];
        if (p->runs < 2 || p->cpu_share_lo < 0) continue;
        if (w < 0 || p->cpu_share_hi - p->cpu_share_lo > pts[w].cpu_share_hi - pts[w].cpu_share_lo) w = (int)i;
    }
    if (w < 0 || pts[w].cpu_share_hi - pts[w].cpu_share_lo <= SWEEP_LOAD_CHANGE) return 0;
    const struct sweep_point *p = &pts[w];
    int at = snprintf(buf, cap, "the machine's load changed during the sweep: at concurrency %d this process got "
                      "%.0f%% to %.0f%% of its threads' CPU from one run to the next", (int)p->concurrency,
                      100 * p->cpu_share_lo, 100 * p->cpu_share_hi);
    if (at > 0 && (size_t)at < cap && p->load_lo >= 0 && p->load_hi > p->load_lo)
        snprintf(buf + at, cap - (size_t)at, " (1-minute load average %.2f to %.2f)", p->load_lo, p->load_hi);
    else if (at > 0 && (size_t)at < cap && p->load_lo >= 0)
        snprintf(buf + at, cap - (size_t)at, " (1-minute load average %.2f)", p->load_lo);
    return 1;
}

/* ---- files ---- */

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

int sweep_write_csv(FILE *f, const struct sweep_point *pts, size_t n)
{
    fprintf(f, "concurrency,max_batch_tokens,requests,failed,gen_tok_s,total_tok_s,rel_cost,p50_s,p95_s,peak_rss_mib,"
               "kv_blocks_peak,kv_blocks_total,preemptions,psi_some_avg10,pswpin,pswpout,energy_j,over_headroom,"
               "runs,total_tok_s_lo,total_tok_s_hi,spread,cpu_share_lo,cpu_share_hi,load_lo,load_hi\n");
    for (size_t i = 0; i < n; i++) {
        const struct sweep_point *p = &pts[i];
        fprintf(f, "%d,%d,%d,%d,%.2f,%.2f,%.4f,%.4f,%.4f,%.1f,%lld,%lld,%lld,%.2f,%lld,%lld,%.2f,%d,",
                (int)p->concurrency, (int)p->max_batch_tokens, (int)p->requests, (int)p->failed, p->gen_tok_s,
                p->total_tok_s, p->rel_cost, p->p50_s, p->p95_s, mib(p->peak_rss), (long long)p->kv_blocks_peak,
                (long long)p->kv_blocks_total, (long long)p->preemptions, p->psi_some_avg10, (long long)p->pswpin,
                (long long)p->pswpout, p->energy_j, p->over_headroom);
        fprintf(f, "%d,%.2f,%.2f,%.4f,%.3f,%.3f,%.2f,%.2f\n", (int)p->runs, p->tok_s_lo, p->tok_s_hi, p->spread,
                p->cpu_share_lo, p->cpu_share_hi, p->load_lo, p->load_hi);
    }
    return ferror(f) ? -1 : 0;
}

json_t *sweep_points_json(const struct sweep_point *pts, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const struct sweep_point *p = &pts[i];
        json_t *o = json_pack(
            "{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:b, s:b}",
            "concurrency", (int)p->concurrency, "max_batch_tokens", (int)p->max_batch_tokens, "requests",
            (int)p->requests, "failed", (int)p->failed, "gen_tok_s", p->gen_tok_s, "total_tok_s", p->total_tok_s,
            "rel_cost", p->rel_cost, "latency_p50_s", p->p50_s, "latency_p95_s", p->p95_s, "peak_rss_bytes",
            (json_int_t)p->peak_rss, "kv_blocks_peak", (json_int_t)p->kv_blocks_peak, "kv_blocks_total",
            (json_int_t)p->kv_blocks_total, "preemptions", (json_int_t)p->preemptions, "psi_some_avg10",
            p->psi_some_avg10, "pswpin", (json_int_t)p->pswpin, "pswpout", (json_int_t)p->pswpout, "energy_j",
            p->energy_j, "over_headroom", p->over_headroom, "usable", sweep_usable(p));
        json_t *runs = json_array();
        for (int32_t r = 0; runs && r < p->runs && r < SWEEP_MAX_RUNS; r++)
            json_array_append_new(runs, json_real(p->run_tok_s[r]));
        if (o && json_object_update_new(o, json_pack("{s:i, s:o*, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "runs",
                                                     (int)p->runs, "run_total_tok_s", runs, "total_tok_s_lo",
                                                     p->tok_s_lo, "total_tok_s_hi", p->tok_s_hi, "spread", p->spread,
                                                     "cpu_share_lo", p->cpu_share_lo, "cpu_share_hi", p->cpu_share_hi,
                                                     "load_lo", p->load_lo, "load_hi", p->load_hi))) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Writes s with the five XML specials escaped. */
static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A round axis maximum at or above v (1, 2, 5 x 10^k). */
static double nice_max(double v)
{
    if (!(v > 0)) return 1;
    double m = pow(10, floor(log10(v)));
    return v <= m ? m : v <= 2 * m ? 2 * m : v <= 5 * m ? 5 * m : 10 * m;
}

/* Chart geometry: the plot area inside the margins; points are spaced evenly (concurrency doubles). */
#define SVG_W 760
#define SVG_H 460
#define PL 70
#define PR 80
#define PT 84
#define PB 60

static double px(size_t i, size_t n)
{
    return PL + (n > 1 ? (double)i * (SVG_W - PL - PR) / (double)(n - 1) : (SVG_W - PL - PR) / 2.0);
}

static double py(double v, double vmax)
{
    return SVG_H - PB - v / vmax * (SVG_H - PT - PB);
}

/* One series as a polyline with dots; which: 0 total tok/s, 1 gen tok/s, 2 peak RSS MiB. */
static void svg_series(FILE *f, const struct sweep_point *pts, size_t n, int which, double vmax, const char *color)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"%s points=\"", color,
            which == 2 ? " stroke-dasharray=\"6,4\"" : "");
    for (size_t i = 0; i < n; i++) {
        double v = which == 0 ? pts[i].total_tok_s : which == 1 ? pts[i].gen_tok_s : mib(pts[i].peak_rss);
        fprintf(f, "%.1f,%.1f ", px(i, n), py(v, vmax));
    }
    fputs("\"/>\n", f);
    for (size_t i = 0; which == 0 && i < n; i++) /* the runs' range: slowest to fastest */
        if (pts[i].runs > 1)
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                    px(i, n), px(i, n), py(pts[i].tok_s_lo, vmax), py(pts[i].tok_s_hi, vmax), color);
    for (size_t i = 0; i < n; i++) {
        double v = which == 0 ? pts[i].total_tok_s : which == 1 ? pts[i].gen_tok_s : mib(pts[i].peak_rss);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", px(i, n), py(v, vmax), color);
    }
}

static void svg_axes(FILE *f, const struct sweep_point *pts, size_t n, double tmax, double mmax)
{
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#888\"/>\n", PL, PT,
            SVG_W - PL - PR, SVG_H - PT - PB);
    for (int k = 0; k <= 4; k++) {
        double y = py(tmax * k / 4, tmax);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PL, SVG_W - PR, y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\">%g</text>\n", PL - 6, y + 4,
                tmax * k / 4);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" fill=\"#a33\">%g</text>\n", SVG_W - PR + 6, y + 4,
                mmax * k / 4);
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">%d", px(i, n), SVG_H - PB + 18,
                (int)pts[i].concurrency);
        if (i && pts[i].max_batch_tokens != pts[0].max_batch_tokens) fprintf(f, "/%d", (int)pts[i].max_batch_tokens);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">concurrency (max_seqs)</text>\n",
            (SVG_W - PR + PL) / 2, SVG_H - 20);
    fprintf(f,
            "<text x=\"18\" y=\"%d\" font-size=\"13\" transform=\"rotate(-90 18 %d)\" "
            "text-anchor=\"middle\">tok/s</text>\n",
            SVG_H / 2, SVG_H / 2);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\" fill=\"#a33\" transform=\"rotate(90 %d %d)\" "
               "text-anchor=\"middle\">peak RSS (MiB)</text>\n",
            SVG_W - 20, SVG_H / 2, SVG_W - 20, SVG_H / 2);
}

int sweep_write_svg(FILE *f, const char *title, const struct sweep_point *pts, size_t n, int rec)
{
    double tmax = 0, mmax = 0;
    for (size_t i = 0; i < n; i++) {
        if (pts[i].total_tok_s > tmax) tmax = pts[i].total_tok_s;
        if (pts[i].runs > 1 && pts[i].tok_s_hi > tmax) tmax = pts[i].tok_s_hi;
        if (mib(pts[i].peak_rss) > mmax) mmax = mib(pts[i].peak_rss);
    }
    tmax = nice_max(tmax);
    mmax = nice_max(mmax);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    /* the title's parenthesis, if any, goes on a second line */
    const char *paren = strstr(title, " (");
    int main_len = paren ? (int)(paren - title) : (int)strlen(title);
    char head[512];
    snprintf(head, sizeof head, "%.*s", main_len, title);
    fputs("<text x=\"20\" y=\"26\" font-size=\"16\" font-weight=\"bold\">", f);
    svg_text(f, head);
    fputs("</text>\n<text x=\"20\" y=\"46\" font-size=\"12\" fill=\"#555\">", f);
    svg_text(f, paren ? paren + 1 : "");
    fputs("</text>\n", f);
    svg_axes(f, pts, n, tmax, mmax);
    if (rec >= 0 && (size_t)rec < n) {
        double x = px((size_t)rec, n);
        int last = n > 1 && (size_t)rec == n - 1; /* the label goes left of the line */
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#2a2\" stroke-width=\"2\" "
                   "stroke-dasharray=\"4,3\"/>\n<text x=\"%.1f\" y=\"%d\" font-size=\"13\" fill=\"#2a2\" "
                   "text-anchor=\"%s\">knee: %d</text>\n",
                x, x, PT, SVG_H - PB, last ? x - 5 : x + 5, PT + 16, last ? "end" : "start", (int)pts[rec].concurrency);
    }
    svg_series(f, pts, n, 0, tmax, "#1f5fbf");
    svg_series(f, pts, n, 1, tmax, "#7aa7e8");
    svg_series(f, pts, n, 2, mmax, "#c0392b");
    fprintf(f, "<g font-size=\"12\"><text x=\"%d\" y=\"%d\" fill=\"#1f5fbf\">&#9632; total tok/s</text>"
               "<text x=\"%d\" y=\"%d\" fill=\"#7aa7e8\">&#9632; generation tok/s</text>"
               "<text x=\"%d\" y=\"%d\" fill=\"#c0392b\">- - peak RSS</text></g>\n</svg>\n",
            PL, PT - 12, PL + 110, PT - 12, PL + 260, PT - 12);
    return ferror(f) ? -1 : 0;
}
