/* progress — see progress.h.
 *
 * Invariant: at most one draw per min_gap seconds (TTY 0.25 s, LOG `interval`); on a TTY the cursor is
 * always at the start of the progress line between draws ("\r" + line + clear-to-end-of-line).
 */
#include "jobs/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct progress {
    FILE *out;
    enum progress_mode mode;
    double min_gap;
    double t_start, t_last;
    int64_t last_prompt, last_gen;
    double prompt_rate, gen_rate; /* smoothed tok/s */
    int drawn;
};

progress *progress_init(FILE *out, enum progress_mode mode, double interval, double now)
{
    progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (mode == PROGRESS_AUTO) mode = isatty(fileno(out)) ? PROGRESS_TTY : PROGRESS_LOG;
    p->out = out;
    p->mode = mode;
    p->min_gap = mode == PROGRESS_TTY ? 0.25 : (interval > 0 ? interval : 10);
    p->t_start = p->t_last = now;
    return p;
}

void progress_free(progress *p)
{
    free(p);
}

static void fmt_duration(char *buf, size_t cap, double s)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void progress_format(char *buf, size_t cap, const struct progress_snapshot *s, double prompt_rate, double gen_rate,
                     double eta_seconds)
{
    char eta[32];
    fmt_duration(eta, sizeof eta, eta_seconds);
    double pct = s->total > 0 ? 100.0 * (double)s->done / (double)s->total : 100.0;
    int n = snprintf(buf, cap,
                     "run %lld/%lld %.1f%% | prompt %.0f tok/s | gen %.0f tok/s | ETA %s | KV %.0f%% | "
                     "prefix hit %.0f%% | failed %lld",
                     (long long)s->done, (long long)s->total, pct, prompt_rate, gen_rate, eta, 100.0 * s->kv_use,
                     100.0 * s->prefix_hit, (long long)s->failed);
    if (s->lookup && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " | lookup %.0f%% acc, %.1f tok/step", 100.0 * s->draft_acceptance,
                 s->tokens_per_step);
}

static void draw(progress *p, const struct progress_snapshot *s, double now, int final)
{
    double dt = now - p->t_last;
    if (dt > 0) {
        double pr = (double)(s->prompt_tokens - p->last_prompt) / dt;
        double gr = (double)(s->gen_tokens - p->last_gen) / dt;
        double a = p->drawn ? 0.3 : 1.0;
        p->prompt_rate = a * pr + (1 - a) * p->prompt_rate;
        p->gen_rate = a * gr + (1 - a) * p->gen_rate;
    }
    double elapsed = now - p->t_start;
    if (final && elapsed > 0) {
        /* the final line shows the averages of the whole run */
        p->prompt_rate = (double)s->prompt_tokens / elapsed;
        p->gen_rate = (double)s->gen_tokens / elapsed;
    }
    double eta = s->done > 0 ? elapsed / (double)s->done * (double)(s->total - s->done) : NAN;
    if (final) eta = 0;
    char line[256];
    progress_format(line, sizeof line, s, p->prompt_rate, p->gen_rate, eta);
    if (p->mode == PROGRESS_TTY) fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
    else fprintf(p->out, "nightshift run: %s\n", line);
    fflush(p->out);
    p->t_last = now;
    p->last_prompt = s->prompt_tokens;
    p->last_gen = s->gen_tokens;
    p->drawn = 1;
}

void progress_update(progress *p, const struct progress_snapshot *s, double now)
{
    if (!p || p->mode == PROGRESS_QUIET || now - p->t_last < p->min_gap) return;
    draw(p, s, now, 0);
}

void progress_finish(progress *p, const struct progress_snapshot *s, double now)
{
    if (!p || p->mode == PROGRESS_QUIET) return;
    draw(p, s, now, 1);
}
