/* record — the pieces of a run record (<output>.record.json) that are not the run's own counters:
 * the build's git commit, energy meters, latency percentiles, and writing the JSON atomically.
 * The record's fields are assembled by jobs/job; see job.h for the list.
 */
#ifndef NS_JOBS_RECORD_H
#define NS_JOBS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/err.h"

/* The git commit of the source tree the binary was built from: NS_GIT_COMMIT when defined at compile
 * time, else read from <repo>/.git (repo = two directories above /proc/self/exe), else "unknown". */
const char *record_git_commit(void);

/* Energy from the RAPL powercap counters (/sys/class/powercap/intel-rapl:N/energy_uj, every package;
 * counter wrap handled with max_energy_range_uj). Unreadable counters make the meter unavailable. */
struct record_energy {
    int available;
    int n_zones;
    uint64_t start_uj[8], max_uj[8];
    char zone[8][64];
};

void record_energy_start(struct record_energy *m);
/* Joules since start, or -1 when unavailable. */
double record_energy_joules(const struct record_energy *m);

/* p-th percentile (0..100, nearest rank) of v; sorts v in place. 0 for n == 0. */
double record_percentile(double *v, size_t n, double p);

/* ISO 8601 UTC time ("2026-11-30T12:34:56Z") of a unix time. */
void record_iso_time(int64_t unix_seconds, char out[32]);

/* Writes obj pretty-printed to path through a temporary file + rename (the old record, if any, stays
 * whole until the new one is complete). */
int record_write(const char *path, const json_t *obj, struct err *e);

#endif
