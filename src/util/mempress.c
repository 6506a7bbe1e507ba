/* mempress — see mempress.h. */
#include "util/mempress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mempress_default_root(void)
{
    const char *r = getenv("NIGHTSHIFT_PROC_ROOT");
    return r && *r ? r : "/proc";
}

/* Reads root/name into buf (cap bytes, NUL-terminated); 0 ok, -1 unreadable. */
static int read_small(const char *root, const char *name, char *buf, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

int mempress_parse_psi(const char *text, double *some_avg10)
{
    const char *p = strstr(text, "some ");
    if (!p || (p != text && p[-1] != '\n')) return -1;
    const char *a = strstr(p, "avg10=");
    const char *eol = strchr(p, '\n');
    if (!a || (eol && a > eol)) return -1;
    char *end;
    double v = strtod(a + 6, &end);
    if (end == a + 6) return -1;
    *some_avg10 = v;
    return 0;
}

/* The value of "name N" at the start of a line of text; -1 when absent. */
static int64_t vmstat_field(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, len) && p[len] == ' ') return strtoll(p + len + 1, NULL, 10);
    return -1;
}

int mempress_parse_vmstat(const char *text, int64_t *pswpin, int64_t *pswpout)
{
    *pswpin = vmstat_field(text, "pswpin");
    *pswpout = vmstat_field(text, "pswpout");
    return *pswpin >= 0 && *pswpout >= 0 ? 0 : -1;
}

void mempress_read(const char *root, struct mempress_sample *s)
{
    char buf[8192];
    if (!root) root = mempress_default_root();
    s->some_avg10 = -1;
    s->pswpin = s->pswpout = -1;
    if (read_small(root, "pressure/memory", buf, sizeof buf) == 0 && mempress_parse_psi(buf, &s->some_avg10))
        s->some_avg10 = -1;
    if (read_small(root, "vmstat", buf, sizeof buf) == 0 && mempress_parse_vmstat(buf, &s->pswpin, &s->pswpout))
        s->pswpin = s->pswpout = -1;
}

void mempress_watchdog_init(struct mempress_watchdog *w, int32_t max_seqs, double now)
{
    memset(w, 0, sizeof *w);
    w->psi_high = 10;
    w->swap_pages = 64;
    w->calm_s = 30;
    w->backoff_s = 5;
    w->max = w->cap = max_seqs < 1 ? 1 : max_seqs;
    w->last_high = w->last_change = now - 1e9;
}

/* 1 when s, against the previous sample, says the machine is short of memory. */
static int sample_high(const struct mempress_watchdog *w, const struct mempress_sample *s)
{
    if (s->some_avg10 >= 0 && s->some_avg10 >= w->psi_high) return 1;
    if (!w->have_prev || s->pswpin < 0 || w->prev.pswpin < 0) return 0;
    int64_t swapped = (s->pswpin - w->prev.pswpin) + (s->pswpout - w->prev.pswpout);
    return swapped > w->swap_pages;
}

int mempress_watchdog_feed(struct mempress_watchdog *w, const struct mempress_sample *s, double now)
{
    int high = sample_high(w, s), r = 0;
    w->prev = *s;
    w->have_prev = 1;
    if (high) {
        w->last_high = now;
        if (w->cap > 1 && now - w->last_change >= w->backoff_s) {
            w->cap = w->cap / 2 > 1 ? w->cap / 2 : 1;
            w->last_change = now;
            w->n_lowered++;
            r = -1;
        }
    } else if (w->cap < w->max && now - w->last_high >= w->calm_s && now - w->last_change >= w->calm_s) {
        w->cap = w->cap * 2 < w->max ? w->cap * 2 : w->max;
        w->last_change = now;
        w->n_raised++;
        r = 1;
    }
    return r;
}
