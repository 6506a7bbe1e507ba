/* report — see report.h. Loading first (record, result and error files, prompts), then the charts, then the
 * page. */
#include "jobs/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/input.h"

/* ---- loading ---- */

static void add_note(struct report_data *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(struct report_data *d, const char *fmt, ...)
{
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t old = d->notes ? strlen(d->notes) : 0;
    char *n = realloc(d->notes, old + strlen(line) + 2);
    if (!n) return;
    memcpy(n + old, line, strlen(line) + 1);
    strcat(n, "\n");
    d->notes = n;
}

/* A file named in the record: as given when it exists, else beside the record; into out (cap bytes). */
static const char *resolve(const char *record_path, const char *p, char *out, size_t cap)
{
    if (!p) return NULL;
    if (p[0] == '/' || access(p, R_OK) == 0) return p;
    const char *slash = strrchr(record_path, '/');
    const char *base = strrchr(p, '/');
    snprintf(out, cap, "%.*s%s", slash ? (int)(slash - record_path + 1) : 0, record_path, base ? base + 1 : p);
    return out;
}

/* The completion text of a result body: choices[0].text or choices[0].message.content. */
static const char *result_text(const json_t *body)
{
    const json_t *c0 = json_array_get(json_object_get(body, "choices"), 0);
    const char *t = json_string_value(json_object_get(c0, "text"));
    return t ? t : json_string_value(json_object_get(json_object_get(c0, "message"), "content"));
}

static int push_tokens(struct report_data *d, double p, double g)
{
    if (d->n_results == d->cap_results) {
        size_t cap = d->cap_results ? 2 * d->cap_results : 1024;
        double *a = realloc(d->prompt_tokens, cap * sizeof *a);
        if (a) d->prompt_tokens = a;
        double *b = a ? realloc(d->gen_tokens, cap * sizeof *b) : NULL;
        if (!b) return -1;
        d->gen_tokens = b;
        d->cap_results = cap;
    }
    d->prompt_tokens[d->n_results] = p;
    d->gen_tokens[d->n_results++] = g;
    return 0;
}

/* Reads a JSONL file line by line into fn(d, object); lines that are not JSON objects are skipped. */
static int read_jsonl(const char *path, struct report_data *d, int (*fn)(struct report_data *, const json_t *))
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (json_is_object(o)) rc = fn(d, o);
        json_decref(o);
    }
    free(line);
    fclose(f);
    return rc;
}

static int take_result(struct report_data *d, const json_t *o)
{
    const json_t *body = json_object_get(json_object_get(o, "response"), "body");
    const json_t *u = json_object_get(body, "usage");
    if (!u) return 0;
    if (push_tokens(d, (double)json_integer_value(json_object_get(u, "prompt_tokens")),
                    (double)json_integer_value(json_object_get(u, "completion_tokens"))))
        return -1;
    const char *id = json_string_value(json_object_get(o, "custom_id")), *text = result_text(body);
    if (d->n_samples < REPORT_MAX_SAMPLES && id && text) {
        struct report_sample *s = &d->samples[d->n_samples++];
        s->id = strdup(id);
        s->output = strdup(text);
    }
    return 0;
}

/* An error-file line's code: a failed request's (response.body.error.code) or an unreadable line's (error.code). */
static int take_error(struct report_data *d, const json_t *o)
{
    const json_t *failed = json_object_get(json_object_get(json_object_get(o, "response"), "body"), "error");
    const char *code = json_string_value(json_object_get(failed ? failed : json_object_get(o, "error"), "code"));
    if (!code) code = "unknown";
    json_int_t k = json_integer_value(json_object_get(d->failures, code));
    return json_object_set_new(d->failures, code, json_integer(k + 1));
}

/* The prompt of an input item as one text: a completion's prompt, or the chat messages as "role: text". */
static char *item_prompt(const struct input_item *it)
{
    if (it->prompt) return strdup(it->prompt);
    if (it->prompt_ids) return strdup("(token ids)");
    size_t n = 1;
    for (size_t i = 0; i < it->n_msgs; i++) n += strlen(it->msgs[i].role) + strlen(it->msgs[i].content) + 4;
    char *s = malloc(n);
    if (!s) return NULL;
    s[0] = '\0';
    for (size_t i = 0; i < it->n_msgs; i++) {
        strcat(s, it->msgs[i].role);
        strcat(s, ": ");
        strcat(s, it->msgs[i].content);
        if (i + 1 < it->n_msgs) strcat(s, "\n");
    }
    return s;
}

/* Reads the backlog until every sample has its prompt. */
static void read_prompts(const char *path, struct report_data *d)
{
    struct input_opts o = input_default_opts();
    input_reader *r;
    struct err e;
    if (input_open(path, &o, &r, &e)) {
        add_note(d, "prompts: %s", e.msg);
        return;
    }
    struct input_item it;
    memset(&it, 0, sizeof it);
    int left = d->n_samples;
    while (left > 0) {
        input_item_free(&it); /* the previous line's */
        memset(&it, 0, sizeof it);
        if (input_next(r, &it, &e) != 1) break;
        if (it.code || !it.custom_id) continue;
        for (int i = 0; i < d->n_samples; i++)
            if (!d->samples[i].prompt && !strcmp(d->samples[i].id, it.custom_id)) {
                d->samples[i].prompt = item_prompt(&it);
                left--;
            }
    }
    input_item_free(&it);
    input_close(r);
}

int report_load(const char *record_path, struct report_data *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    json_error_t je;
    d->record = json_load_file(record_path, 0, &je);
    if (!d->record) return err_set(e, "%s: line %d: %s", record_path, je.line, je.text);
    if (!json_is_object(d->record) || !json_is_object(json_object_get(d->record, "counts")))
        return err_set(e, "%s: not a nightshift run record (no \"counts\")", record_path);
    d->failures = json_object();
    char buf[3][4096];
    const json_t *files = json_object_get(d->record, "files");
    const char *res = resolve(record_path, json_string_value(json_object_get(files, "results")), buf[0], sizeof buf[0]);
    const char *err = resolve(record_path, json_string_value(json_object_get(files, "errors")), buf[1], sizeof buf[1]);
    const json_t *backlog = json_object_get(d->record, "backlog");
    const char *bl = resolve(record_path, json_string_value(json_object_get(backlog, "path")), buf[2], sizeof buf[2]);
    if (!res || read_jsonl(res, d, take_result)) add_note(d, "results file %s could not be read", res ? res : "(none)");
    if (!err || read_jsonl(err, d, take_error)) add_note(d, "error file %s could not be read", err ? err : "(none)");
    if (d->n_samples && bl) read_prompts(bl, d);
    return 0;
}

void report_free(struct report_data *d)
{
    json_decref(d->record);
    json_decref(d->failures);
    free(d->prompt_tokens);
    free(d->gen_tokens);
    for (int i = 0; i < d->n_samples; i++)
        free(d->samples[i].id), free(d->samples[i].prompt), free(d->samples[i].output);
    free(d->notes);
    memset(d, 0, sizeof *d);
}

/* ---- charts ---- */

void report_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

#define CW 640
#define CH 300
#define CL 64
#define CR 20
#define CT 40
#define CB 48

struct chart_series {
    const char *name, *color;
    const double *y;
};

static double nice_top(double v)
{
    if (!(v > 0)) return 1;
    double m = pow(10, floor(log10(v)));
    return v <= m ? m : v <= 2 * m ? 2 * m : v <= 5 * m ? 5 * m : 10 * m;
}

/* The frame: title, a grid of 4 steps to ymax, x ticks at 0, xmax/2, xmax, the axis labels. */
static void chart_frame(FILE *f, const char *title, const char *xlabel, const char *ylabel, double xmax, double ymax)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\"><rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>"
               "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">",
            CW, CH, CW, CH);
    report_escape(f, title);
    fprintf(f, "</text><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#888\"/>\n", CL, CT,
            CW - CL - CR, CH - CT - CB);
    for (int k = 0; k <= 4; k++) {
        double y = CH - CB - (double)k / 4 * (CH - CT - CB);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" "
                   "text-anchor=\"end\">%g</text>\n",
                CL, CW - CR, y, y, CL - 5, y + 4, ymax * k / 4);
    }
    for (int k = 0; k <= 2; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.3g</text>\n",
                CL + (double)k / 2 * (CW - CL - CR), CH - CB + 16, xmax * k / 2);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (CW + CL) / 2, CH - 8);
    report_escape(f, xlabel);
    fprintf(f, "</text><text x=\"14\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">", CH / 2,
            CH / 2);
    report_escape(f, ylabel);
    fputs("</text>\n", f);
}

static void line_chart(FILE *f, const char *title, const char *xlabel, const char *ylabel, const double *x, size_t n,
                       const struct chart_series *s, int ns)
{
    double xmax = 0, ymax = 0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] > xmax) xmax = x[i];
        for (int k = 0; k < ns; k++)
            if (s[k].y[i] > ymax) ymax = s[k].y[i];
    }
    xmax = xmax > 0 ? xmax : 1;
    ymax = nice_top(ymax);
    chart_frame(f, title, xlabel, ylabel, xmax, ymax);
    for (int k = 0; k < ns; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", s[k].color);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", CL + x[i] / xmax * (CW - CL - CR), CH - CB - s[k].y[i] / ymax * (CH - CT - CB));
        fprintf(f, "\"/><text x=\"%d\" y=\"%d\" fill=\"%s\">&#9632; ", CL + 10 + 170 * k, CT + 16, s[k].color);
        report_escape(f, s[k].name);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
}

/* Bars of counts cnt (nb bins of width w from lo). */
static void bars(FILE *f, const char *title, const char *xlabel, double lo, double w, const double *cnt, int nb)
{
    double cmax = 0;
    for (int b = 0; b < nb; b++) cmax = cnt[b] > cmax ? cnt[b] : cmax;
    cmax = nice_top(cmax);
    chart_frame(f, title, xlabel, "count", 0, cmax);
    double bw = (double)(CW - CL - CR) / (nb > 0 ? nb : 1);
    for (int b = 0; b < nb; b++) {
        double h = cnt[b] / cmax * (CH - CT - CB);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f5fbf\"/>\n", CL + b * bw + 1,
                CH - CB - h, bw - 2, h);
    }
    /* the frame's x ticks are for a line chart: the bins' range instead */
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"18\" fill=\"white\"/><text x=\"%d\" y=\"%d\">%.4g</text>"
               "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text></svg>\n",
            CL - 30, CH - CB + 3, CW - CL - CR + 60, CL, CH - CB + 16, lo, CW - CR, CH - CB + 16, lo + w * nb);
}

/* A histogram of v (n values) in nb (<= 64) bins from its minimum to its maximum. */
static void histogram(FILE *f, const char *title, const char *xlabel, const double *v, size_t n, int nb)
{
    double lo = 0, hi = 0, cnt[64] = {0};
    if (nb > 64) nb = 64;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || v[i] < lo) lo = v[i];
        if (i == 0 || v[i] > hi) hi = v[i];
    }
    double w = hi > lo ? (hi - lo) / nb : 1;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((v[i] - lo) / w);
        cnt[b >= nb ? nb - 1 : b]++;
    }
    bars(f, title, xlabel, lo, w, cnt, nb);
}

/* ---- the page ---- */

/* The time series as columns: x (seconds) and the per-interval series the charts draw. */
struct series {
    size_t n;
    double *t, *total, *gen, *kv, *preempt, *cap, *running, *hit;
};

static double cell(const json_t *row, int col)
{
    return col < 0 ? 0 : json_number_value(json_array_get(row, (size_t)col));
}

static int column(const json_t *cols, const char *name)
{
    for (size_t i = 0; i < json_array_size(cols); i++)
        if (!strcmp(json_string_value(json_array_get(cols, i)) ? json_string_value(json_array_get(cols, i)) : "", name))
            return (int)i;
    return -1;
}

/* Rates between consecutive samples (point i: the interval ending at sample i; point 0 repeats point 1). */
static int series_build(const json_t *tl, struct series *S)
{
    const json_t *cols = json_object_get(tl, "columns"), *rows = json_object_get(tl, "samples");
    size_t n = json_array_size(rows);
    memset(S, 0, sizeof *S);
    if (n < 2) return -1;
    double *buf = calloc(8 * n, sizeof *buf);
    if (!buf) return -1;
    S->n = n;
    S->t = buf, S->total = buf + n, S->gen = buf + 2 * n, S->kv = buf + 3 * n, S->preempt = buf + 4 * n;
    S->cap = buf + 5 * n, S->running = buf + 6 * n, S->hit = buf + 7 * n;
    int ct = column(cols, "t_s"), cp = column(cols, "prompt_tokens"), cg = column(cols, "gen_tokens"),
        cc = column(cols, "prompt_cached"), ck = column(cols, "kv_used"), cK = column(cols, "kv_total"),
        cx = column(cols, "preemptions"), cs = column(cols, "seq_cap"), cr = column(cols, "running");
    for (size_t i = 0; i < n; i++) {
        const json_t *r = json_array_get(rows, i), *q = json_array_get(rows, i ? i - 1 : 0);
        S->t[i] = cell(r, ct);
        double dt = cell(r, ct) - cell(q, ct), dp = cell(r, cp) - cell(q, cp), dg = cell(r, cg) - cell(q, cg);
        S->total[i] = dt > 0 ? (dp + dg) / dt : 0;
        S->gen[i] = dt > 0 ? dg / dt : 0;
        S->hit[i] = dp > 0 ? 100.0 * (cell(r, cc) - cell(q, cc)) / dp : 0;
        S->kv[i] = cell(r, cK) > 0 ? 100.0 * cell(r, ck) / cell(r, cK) : 0;
        S->preempt[i] = cell(r, cx);
        S->cap[i] = cell(r, cs);
        S->running[i] = cell(r, cr);
    }
    S->total[0] = S->total[1], S->gen[0] = S->gen[1], S->hit[0] = S->hit[1];
    return 0;
}

/* Tokens per second over [0, t_cut] and over (t_cut, end] from the cumulative counters. */
static void sustained(const json_t *tl, double t_cut, double *first, double *rest)
{
    const json_t *cols = json_object_get(tl, "columns"), *rows = json_object_get(tl, "samples");
    int ct = column(cols, "t_s"), cp = column(cols, "prompt_tokens"), cg = column(cols, "gen_tokens");
    size_t n = json_array_size(rows), k = 0;
    while (k + 1 < n && cell(json_array_get(rows, k + 1), ct) <= t_cut) k++;
    const json_t *a = json_array_get(rows, 0), *m = json_array_get(rows, k), *z = json_array_get(rows, n - 1);
    double tm = cell(m, ct) - cell(a, ct), tz = cell(z, ct) - cell(m, ct);
    *first = tm > 0 ? (cell(m, cp) + cell(m, cg) - cell(a, cp) - cell(a, cg)) / tm : 0;
    *rest = tz > 0 ? (cell(z, cp) + cell(z, cg) - cell(m, cp) - cell(m, cg)) / tz : 0;
}

/* "key: value" rows of the summary table, from the record. */
static void summary_row(FILE *f, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void summary_row(FILE *f, const char *key, const char *fmt, ...)
{
    char v[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    fprintf(f, "<tr><th>%s</th><td>", key);
    report_escape(f, v);
    fputs("</td></tr>\n", f);
}

static const char *str_at(const json_t *r, const char *a, const char *b)
{
    const json_t *o = json_object_get(r, a);
    const char *s = json_string_value(b ? json_object_get(o, b) : o);
    return s ? s : "-";
}

static double num_at(const json_t *r, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(r, a), b));
}

static void page_summary(FILE *f, const json_t *r)
{
    fputs("<h2>The run</h2><table>\n", f);
    summary_row(f, "status", "%s", str_at(r, "status", NULL));
    summary_row(f, "model", "%s on %s (%d threads)", str_at(r, "model", "name"), str_at(r, "backend", "name"),
                (int)num_at(r, "backend", "threads"));
    summary_row(f, "owner", "%s", str_at(r, "owner", NULL));
    summary_row(f, "re-measure the settings after", "%s", str_at(r, "retest_after", "date"));
    summary_row(f, "time", "%s to %s (%.1f s)", str_at(r, "time", "start"), str_at(r, "time", "end"),
                num_at(r, "time", "wall_s"));
    summary_row(f, "lines", "%.0f: %.0f results, %.0f errors", num_at(r, "counts", "lines"),
                num_at(r, "counts", "results"), num_at(r, "counts", "errors"));
    summary_row(f, "throughput", "%.1f tok/s total, %.1f generated", num_at(r, "throughput", "total_tok_s"),
                num_at(r, "throughput", "gen_tok_s"));
    summary_row(f, "latency", "p50 %.3f s, p95 %.3f s, max %.3f s", num_at(r, "latency_s", "p50"),
                num_at(r, "latency_s", "p95"), num_at(r, "latency_s", "max"));
    summary_row(f, "prefix cache", "%.1f%% of prompt tokens", 100 * num_at(r, "prefix_cache", "hit_rate"));
    summary_row(f, "KV pool", "%.0f blocks, peak use %.0f%%, %.0f preemptions", num_at(r, "kv", "blocks"),
                100 * num_at(r, "kv", "peak_use"), num_at(r, "kv", "preemptions"));
    summary_row(f, "memory watchdog", "lowered %.0f times, raised %.0f times, lowest cap %.0f",
                num_at(r, "watchdog", "lowered"), num_at(r, "watchdog", "raised"), num_at(r, "watchdog", "min_cap"));
    const json_t *en = json_object_get(r, "energy");
    if (json_is_object(en))
        summary_row(f, "energy", "%.1f J (%.2f J per 1k tokens)", num_at(r, "energy", "joules"),
                    num_at(r, "energy", "joules_per_1k_tokens"));
    else
        summary_row(f, "energy", "unavailable on this machine");
    fputs("</table>\n", f);
}

static void page_timeline(FILE *f, const json_t *r)
{
    const json_t *tl = json_object_get(r, "timeline");
    struct series S;
    if (!tl || series_build(tl, &S)) {
        fputs("<h2>Over time</h2><p class=\"note\">The record has no time series (a run shorter than one sample, or "
              "an older nightshift).</p>\n",
              f);
        return;
    }
    double end = S.t[S.n - 1], cut = end / 5 < 120 ? end / 5 : 120, first, rest;
    sustained(tl, cut, &first, &rest);
    fprintf(f, "<h2>Throughput over time</h2><p>First %.3g s: %.1f tok/s; sustained after that: %.1f tok/s.</p>\n",
            cut, first, rest);
    struct chart_series thr[2] = {{"total tok/s", "#1f5fbf", S.total}, {"generated tok/s", "#7aa7e8", S.gen}};
    line_chart(f, "Throughput over time", "seconds", "tok/s", S.t, S.n, thr, 2);
    fputs("<h2>KV use and preemptions over time</h2>\n", f);
    struct chart_series kv[1] = {{"KV blocks in use (%)", "#2a8a2a", S.kv}};
    line_chart(f, "KV use over time", "seconds", "% of the pool", S.t, S.n, kv, 1);
    struct chart_series pre[3] = {{"preemptions (total)", "#c0392b", S.preempt},
                                  {"running sequences", "#1f5fbf", S.running},
                                  {"running-sequence cap", "#888888", S.cap}};
    line_chart(f, "Preemptions and running sequences over time", "seconds", "count", S.t, S.n, pre, 3);
    fputs("<h2>Prefix cache</h2>\n", f);
    struct chart_series hit[1] = {{"prompt tokens from the cache (%)", "#8e44ad", S.hit}};
    line_chart(f, "Prefix-cache hit rate over time", "seconds", "%", S.t, S.n, hit, 1);
    free(S.t);
}

static void page_distributions(FILE *f, const struct report_data *d)
{
    const json_t *h = json_object_get(json_object_get(d->record, "latency_s"), "histogram");
    const json_t *counts = json_object_get(h, "counts");
    fputs("<h2>Latency</h2>\n", f);
    if (json_array_size(counts) > 0 && json_array_size(counts) <= 64) {
        double cnt[64];
        for (size_t i = 0; i < json_array_size(counts); i++) cnt[i] = json_number_value(json_array_get(counts, i));
        bars(f, "Request latency (submission to result)", "seconds", num_at(json_object_get(d->record, "latency_s"),
                                                                            "histogram", "lo"),
             num_at(json_object_get(d->record, "latency_s"), "histogram", "width"), cnt, (int)json_array_size(counts));
    } else {
        fputs("<p class=\"note\">The record has no latency histogram.</p>\n", f);
    }
    fputs("<h2>Tokens per request</h2>\n", f);
    if (d->n_results) {
        histogram(f, "Prompt tokens per request", "tokens", d->prompt_tokens, d->n_results, 20);
        histogram(f, "Generated tokens per request", "tokens", d->gen_tokens, d->n_results, 20);
    } else {
        fputs("<p class=\"note\">No result lines to count.</p>\n", f);
    }
}

static void page_failures_and_samples(FILE *f, const struct report_data *d)
{
    fputs("<h2>Failures by reason</h2>\n", f);
    if (json_object_size(d->failures) == 0) fputs("<p>None.</p>\n", f);
    else {
        fputs("<table><tr><th>reason</th><th>lines</th></tr>\n", f);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)d->failures, k, v) {
            fputs("<tr><td>", f);
            report_escape(f, k);
            fprintf(f, "</td><td>%lld</td></tr>\n", (long long)json_integer_value(v));
        }
        fputs("</table>\n", f);
    }
    fputs("<h2>Sample outputs</h2>\n<table class=\"samples\"><tr><th>id</th><th>prompt</th><th>output</th></tr>\n", f);
    for (int i = 0; i < d->n_samples; i++) {
        const struct report_sample *s = &d->samples[i];
        fputs("<tr><td>", f);
        report_escape(f, s->id);
        fputs("</td><td><pre>", f);
        report_escape(f, s->prompt ? s->prompt : "(not found in the backlog)");
        fputs("</pre></td><td><pre>", f);
        report_escape(f, s->output);
        fputs("</pre></td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

int report_write_html(FILE *f, const struct report_data *d)
{
    const json_t *r = d->record;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>nightshift run report</title>\n"
          "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
          "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;"
          "vertical-align:top}pre{white-space:pre-wrap;margin:0;max-width:420px}.note{color:#a33}"
          "svg{display:block;margin:1em 0}</style></head><body>\n<h1>nightshift run report</h1>\n<p>",
          f);
    report_escape(f, str_at(r, "backlog", "path"));
    fputs(" &rarr; ", f);
    report_escape(f, str_at(r, "files", "results"));
    fputs("</p>\n", f);
    if (d->notes) {
        fputs("<pre class=\"note\">", f);
        report_escape(f, d->notes);
        fputs("</pre>\n", f);
    }
    page_summary(f, r);
    page_timeline(f, r);
    page_distributions(f, d);
    page_failures_and_samples(f, d);
    fputs("</body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
