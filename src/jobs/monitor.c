/* monitor — see monitor.h. */
#include "jobs/monitor.h"

#include <string.h>

#include "util/log.h"

#define MONITOR_WATCH_S 2.0 /* the watchdog reads memory pressure at least this often */

static void take_sample(struct monitor *mo, engine *eng, int64_t done, int64_t failed, double now,
                        struct monitor_sample *s)
{
    struct engine_stats es;
    engine_get_stats(eng, &es);
    memset(s, 0, sizeof *s);
    s->t = now - mo->t0;
    s->done = done;
    s->failed = failed;
    s->prompt_tokens = es.prompt_tokens_computed + es.prompt_tokens_cached;
    s->prompt_cached = es.prompt_tokens_cached;
    s->gen_tokens = es.gen_tokens;
    s->preemptions = es.n_preemptions;
    s->kv_used = es.kv_blocks_used;
    s->kv_total = es.kv_blocks_total;
    s->running = es.n_running;
    s->waiting = es.n_waiting;
    s->seq_cap = mo->wd.cap;
    s->psi = mo->last.some_avg10;
    s->swap_pages = mo->last.pswpin >= 0 && mo->m0.pswpin >= 0
                        ? (mo->last.pswpin - mo->m0.pswpin) + (mo->last.pswpout - mo->m0.pswpout)
                        : -1;
}

/* Appends a sample; when full, keeps every second one (the newest included) and doubles the interval. */
static void push_sample(struct monitor *mo, const struct monitor_sample *s)
{
    if (mo->n == MONITOR_MAX_SAMPLES) {
        int k = 0;
        for (int i = 1; i < mo->n; i += 2) mo->s[k++] = mo->s[i];
        mo->n = k;
        mo->interval *= 2;
    }
    mo->s[mo->n++] = *s;
}

static void watch(struct monitor *mo, engine *eng, double now)
{
    mempress_read(mo->proc_root, &mo->last);
    if (!mo->watchdog) return;
    int32_t from = mo->wd.cap;
    int r = mempress_watchdog_feed(&mo->wd, &mo->last, now);
    if (!r) return;
    int32_t to = engine_set_max_seqs(eng, mo->wd.cap);
    int64_t swapped = mo->last.pswpin >= 0 && mo->m0.pswpin >= 0
                          ? (mo->last.pswpin - mo->m0.pswpin) + (mo->last.pswpout - mo->m0.pswpout)
                          : -1;
    if (r < 0)
        log_warn("memory watchdog: pressure %.1f%%, %lld pages swapped so far: running sequences capped at %d (was %d)",
                 mo->last.some_avg10, (long long)swapped, (int)to, (int)from);
    else
        log_info("memory watchdog: pressure low for %.0f s: running sequences capped at %d (was %d)", mo->wd.calm_s,
                 (int)to, (int)from);
    if (mo->n_ev == MONITOR_MAX_EVENTS) {
        mo->n_ev_dropped++;
        return;
    }
    mo->ev[mo->n_ev++] = (struct monitor_event){now - mo->t0, from, to, mo->last.some_avg10, swapped};
}

void monitor_start(struct monitor *mo, engine *eng, double interval, int32_t max_seqs, int watchdog, double now)
{
    const char *root = mo->proc_root;
    memset(mo, 0, sizeof *mo);
    mo->proc_root = root;
    mo->t0 = now;
    mo->interval = interval > 0 ? interval : 5;
    mo->watchdog = watchdog;
    mempress_watchdog_init(&mo->wd, max_seqs, now);
    mempress_read(mo->proc_root, &mo->m0);
    mo->last = mo->m0;
    mo->next_sample = now + mo->interval;
    mo->next_watch = now; /* the first step's tick reads again and feeds the watchdog */
    struct monitor_sample s;
    take_sample(mo, eng, 0, 0, now, &s);
    push_sample(mo, &s);
}

void monitor_tick(struct monitor *mo, engine *eng, int64_t done, int64_t failed, double now)
{
    if (now >= mo->next_watch) {
        watch(mo, eng, now);
        mo->next_watch = now + MONITOR_WATCH_S;
    }
    if (now < mo->next_sample) return;
    struct monitor_sample s;
    take_sample(mo, eng, done, failed, now, &s);
    push_sample(mo, &s);
    mo->next_sample = now + mo->interval;
}

void monitor_finish(struct monitor *mo, engine *eng, int64_t done, int64_t failed, double now)
{
    struct monitor_sample s;
    mempress_read(mo->proc_root, &mo->last);
    take_sample(mo, eng, done, failed, now, &s);
    if (mo->n && mo->s[mo->n - 1].t >= s.t) mo->n--; /* the same instant: the later reading wins */
    push_sample(mo, &s);
}

json_t *monitor_timeline_json(const struct monitor *mo)
{
    json_t *rows = json_array();
    for (int i = 0; rows && i < mo->n; i++) {
        const struct monitor_sample *s = &mo->s[i];
        json_array_append_new(rows, json_pack("[f, I, I, I, I, I, I, I, I, i, i, i, f, I]", s->t, (json_int_t)s->done,
                                              (json_int_t)s->failed, (json_int_t)s->prompt_tokens,
                                              (json_int_t)s->prompt_cached, (json_int_t)s->gen_tokens,
                                              (json_int_t)s->preemptions, (json_int_t)s->kv_used,
                                              (json_int_t)s->kv_total, (int)s->running, (int)s->waiting,
                                              (int)s->seq_cap, s->psi, (json_int_t)s->swap_pages));
    }
    return json_pack("{s:f, s:[s, s, s, s, s, s, s, s, s, s, s, s, s, s], s:o}", "interval_s", mo->interval, "columns",
                     "t_s", "done", "failed", "prompt_tokens", "prompt_cached", "gen_tokens", "preemptions", "kv_used",
                     "kv_total", "running", "waiting", "seq_cap", "psi_some_avg10", "swap_pages", "samples", rows);
}

json_t *monitor_watchdog_json(const struct monitor *mo)
{
    json_t *ev = json_array();
    int32_t min_cap = mo->wd.max;
    for (int i = 0; ev && i < mo->n_ev; i++) {
        const struct monitor_event *x = &mo->ev[i];
        if (x->to < min_cap) min_cap = x->to;
        json_array_append_new(ev,
                              json_pack("{s:f, s:i, s:i, s:f, s:I}", "t_s", x->t, "from", (int)x->from, "to",
                                        (int)x->to, "psi_some_avg10", x->psi, "swap_pages", (json_int_t)x->swap_pages));
    }
    return json_pack("{s:b, s:f, s:I, s:I, s:i, s:i, s:o, s:i}", "enabled", mo->watchdog, "psi_high", mo->wd.psi_high,
                     "swap_pages_high", (json_int_t)mo->wd.swap_pages, "lowered", (json_int_t)mo->wd.n_lowered,
                     "raised", (int)mo->wd.n_raised, "min_cap", (int)min_cap, "events", ev, "events_dropped",
                     mo->n_ev_dropped);
}

int monitor_check(const struct monitor *mo)
{
    if (mo->n < 1 || mo->n > MONITOR_MAX_SAMPLES) return -1;
    for (int i = 1; i < mo->n; i++)
        if (mo->s[i].t < mo->s[i - 1].t) return -1;
    return mo->wd.cap >= 1 && mo->wd.cap <= mo->wd.max ? 0 : -1;
}
