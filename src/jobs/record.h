/* record — the pieces of a run record (<output>.record.json) that are not the run's own counters:
 * the build's git commit, energy meters, latency percentiles, and writing the JSON atomically; and the
 * assembly of a `nightshift run` record from the run's parts (record_build).
 */
#ifndef NS_JOBS_RECORD_H
#define NS_JOBS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "jobs/job.h"
#include "util/err.h"

/* The git commit of the source tree the binary was built from: NS_GIT_COMMIT when defined at compile
 * time, else read from <repo>/.git (repo = two directories above /proc/self/exe), else "unknown". */
const char *record_git_commit(void);

/* Energy meters. CPU: the RAPL powercap counters (/sys/class/powercap/intel-rapl:N/energy_uj, every package;
 * counter wrap handled with max_energy_range_uj). GPU (when asked for): NVML's total energy counter of every
 * device (nvmlDeviceGetTotalEnergyConsumption, millijoules, Volta and later), with libnvidia-ml.so.1
 * loaded at run time (no build dependency). A meter that cannot be read is unavailable. */
#define RECORD_MAX_ZONES 8
#define RECORD_MAX_GPUS 16
struct record_energy {
    int cpu_available, gpu_available;
    int n_zones;
    uint64_t start_uj[RECORD_MAX_ZONES], max_uj[RECORD_MAX_ZONES];
    char zone[RECORD_MAX_ZONES][64];
    void *nvml;    /* dlopen handle */
    int n_gpus;
    void *gpu[RECORD_MAX_GPUS];
    uint64_t gpu_start_mj[RECORD_MAX_GPUS];
};

void record_energy_start(struct record_energy *m, int use_gpu);
/* Joules since start per meter, -1 where unavailable. */
void record_energy_read(const struct record_energy *m, double *cpu_joules, double *gpu_joules);
void record_energy_stop(struct record_energy *m); /* releases NVML */

/* p-th percentile (0..100, nearest rank) of v; sorts v in place. 0 for n == 0. */
double record_percentile(double *v, size_t n, double p);

/* {"lo", "width", "counts": [bins]}: v's values in bins equal bins from its minimum to its maximum (the
 * maximum in the last); new reference. O(n + bins). */
json_t *record_histogram_json(const double *v, size_t n, int bins);

/* ISO 8601 UTC time ("2026-11-30T12:34:56Z") of a unix time. */
void record_iso_time(int64_t unix_seconds, char out[32]);

/* Writes obj pretty-printed to path through a temporary file + rename (the old record, if any, stays
 * whole until the new one is complete). */
int record_write(const char *path, const json_t *obj, struct err *e);

/* What a run record is made of; everything is borrowed. */
struct record_run {
    const struct job_config *c;
    const struct job_model *m;
    const struct job_summary *s;        /* wall_s included */
    const struct engine_stats *es;      /* the engine's counters at the end of the run */
    double *latency;                    /* (n_latency) seconds from submission to result: every request's, or a
                                           uniform sample of them; sorted in place */
    size_t n_latency;
    int64_t n_requests;                 /* requests the latencies were measured on (>= n_latency) */
    const json_t *backlog;              /* facts about the backlog file (jobs/ingest), or NULL */
    const json_t *repair;               /* what reconcile did (jobs/reconcile), or NULL */
    int64_t t_start_unix;
    const struct record_energy *energy; /* started with the run; read here */
    uint64_t backlog_bytes;             /* what the book of the backlog holds (ledger and ingest) */
};

/* The run record (new reference): nightshift version and git commit, status, owner, retest_after (the date the
 * settings should be re-measured: now + c->retest_after_days), command, flags, model,
 * backend, backlog, files, counts, tokens, time by phase, throughput, latency percentiles, peak memory,
 * KV pool, prefix cache, prompt lookup (drafts, acceptance, tokens per step), repair and energy. */
json_t *record_build(const struct record_run *r);

#endif
