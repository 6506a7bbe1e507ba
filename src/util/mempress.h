/* mempress — is the machine short of memory, and the watchdog that answers it by running fewer sequences.
 *
 * Readings come from a proc root (normally "/proc"; tests give a directory of their own, and
 * $NIGHTSHIFT_PROC_ROOT overrides the default): pressure/memory (Linux PSI: the "some avg10" percentage of
 * the last 10 s in which some task waited for memory) and vmstat (pswpin, pswpout: pages swapped in and out
 * since boot). A file that cannot be read leaves its fields unknown (-1).
 *
 * The watchdog holds the running-sequence cap between 1 and the configured max_seqs. A sample is "high"
 * when PSI some avg10 >= psi_high or more than swap_pages pages were swapped since the previous sample;
 * each high sample halves the cap (at most once per backoff_s). When no sample has been high for calm_s
 * the cap doubles (up to max), and the calm clock starts again. Invariant: 1 <= cap <= max.
 */
#ifndef NS_UTIL_MEMPRESS_H
#define NS_UTIL_MEMPRESS_H

#include <stdint.h>

struct mempress_sample {
    double some_avg10;       /* percent; -1 unknown */
    int64_t pswpin, pswpout; /* pages since boot; -1 unknown */
};

/* The proc root: $NIGHTSHIFT_PROC_ROOT when set and not empty, else "/proc". */
const char *mempress_default_root(void);
/* Reads root/pressure/memory and root/vmstat (root NULL: the default) into s; unknown fields are -1. */
void mempress_read(const char *root, struct mempress_sample *s);
/* Parsers over file contents (exposed for tests): 0 ok, -1 when the field is not there. */
int mempress_parse_psi(const char *text, double *some_avg10);
int mempress_parse_vmstat(const char *text, int64_t *pswpin, int64_t *pswpout);

struct mempress_watchdog {
    double psi_high;    /* default 10 (%) */
    int64_t swap_pages; /* default 64 pages between samples */
    double calm_s;      /* default 30 s without a high sample before raising */
    double backoff_s;   /* default 5 s between two halvings */
    int32_t max, cap;
    int have_prev;
    struct mempress_sample prev;
    double last_high, last_change; /* clock seconds */
    int64_t n_lowered, n_raised;
};

void mempress_watchdog_init(struct mempress_watchdog *w, int32_t max_seqs, double now);
/* Feeds one sample taken at now (seconds); returns -1 when it lowered the cap, +1 when it raised it, 0 when
 * the cap stays. */
int mempress_watchdog_feed(struct mempress_watchdog *w, const struct mempress_sample *s, double now);

#endif
