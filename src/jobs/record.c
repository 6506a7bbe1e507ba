/* record — see record.h.
 *
 * Invariant: the record file on disk is always a complete JSON document (written via rename).
 */
#include "jobs/record.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/sha256.h"
#include "util/sysmem.h"

static int read_first_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)cap, f);
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

static int is_hex40(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 40;
}

const char *record_git_commit(void)
{
#ifdef NS_GIT_COMMIT
    return NS_GIT_COMMIT;
#else
    static char commit[64];
    if (commit[0]) return commit;
    snprintf(commit, sizeof commit, "unknown");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return commit;
    exe[n] = '\0';
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return commit;
        *slash = '\0';
    }
    char path[4400], head[256], ref[256];
    snprintf(path, sizeof path, "%s/.git/HEAD", exe);
    if (read_first_line(path, head, sizeof head) != 0) return commit;
    if (is_hex40(head)) {
        memcpy(commit, head, 41); /* 40 hex + NUL, checked */
        return commit;
    }
    if (strncmp(head, "ref: ", 5)) return commit;
    snprintf(ref, sizeof ref, "%s", head + 5);
    snprintf(path, sizeof path, "%s/.git/%s", exe, ref);
    char line[512];
    if (read_first_line(path, line, sizeof line) == 0 && is_hex40(line)) {
        memcpy(commit, line, 41);
        return commit;
    }
    snprintf(path, sizeof path, "%s/.git/packed-refs", exe);
    FILE *f = fopen(path, "r");
    if (!f) return commit;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        if (!strcmp(sp + 1, ref) && is_hex40(line)) {
            memcpy(commit, line, 41);
            break;
        }
    }
    fclose(f);
    return commit;
#endif
}

static int read_u64_file(const char *path, uint64_t *out)
{
    char buf[64];
    if (read_first_line(path, buf, sizeof buf) != 0) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf) return -1;
    *out = v;
    return 0;
}

void record_energy_start(struct record_energy *m, int use_gpu)
{
    memset(m, 0, sizeof *m);
    for (int z = 0; z < RECORD_MAX_ZONES; z++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/class/powercap/intel-rapl:%d/energy_uj", z);
        uint64_t v, max = 0;
        if (read_u64_file(path, &v) != 0) break;
        snprintf(path, sizeof path, "/sys/class/powercap/intel-rapl:%d/max_energy_range_uj", z);
        if (read_u64_file(path, &max) != 0) max = 0;
        m->start_uj[m->n_zones] = v;
        m->max_uj[m->n_zones] = max;
        snprintf(m->zone[m->n_zones], sizeof m->zone[0], "intel-rapl:%d", z);
        m->n_zones++;
    }
    m->cpu_available = m->n_zones > 0;
    if (!use_gpu) return;
    /* NVML through dlopen: the signatures are NVML's documented C API (nvmlReturn_t is an int, 0 = success) */
    m->nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->nvml) return;
    int (*init)(void) = (int (*)(void))dlsym(m->nvml, "nvmlInit_v2");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(m->nvml, "nvmlDeviceGetCount_v2");
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(m->nvml, "nvmlDeviceGetHandleByIndex_v2");
    int (*energy)(void *, unsigned long long *) =
        (int (*)(void *, unsigned long long *))dlsym(m->nvml, "nvmlDeviceGetTotalEnergyConsumption");
    unsigned n = 0;
    if (!init || !count || !handle || !energy || init() != 0 || count(&n) != 0 || n == 0) {
        record_energy_stop(m);
        return;
    }
    for (unsigned i = 0; i < n && m->n_gpus < RECORD_MAX_GPUS; i++) {
        void *h;
        unsigned long long mj;
        if (handle(i, &h) != 0 || energy(h, &mj) != 0) continue;
        m->gpu[m->n_gpus] = h;
        m->gpu_start_mj[m->n_gpus++] = mj;
    }
    m->gpu_available = m->n_gpus > 0;
    if (!m->gpu_available) record_energy_stop(m);
}

void record_energy_read(const struct record_energy *m, double *cpu_joules, double *gpu_joules)
{
    *cpu_joules = *gpu_joules = -1;
    if (m->cpu_available) {
        double total = 0;
        int ok = 1;
        for (int z = 0; z < m->n_zones && ok; z++) {
            char path[128];
            snprintf(path, sizeof path, "/sys/class/powercap/%s/energy_uj", m->zone[z]);
            uint64_t v;
            if (read_u64_file(path, &v) != 0) ok = 0;
            else {
                uint64_t d = v >= m->start_uj[z] ? v - m->start_uj[z]
                                                 : (m->max_uj[z] ? m->max_uj[z] - m->start_uj[z] + v : 0);
                total += (double)d * 1e-6;
            }
        }
        if (ok) *cpu_joules = total;
    }
    if (m->gpu_available && m->nvml) {
        int (*energy)(void *, unsigned long long *) =
            (int (*)(void *, unsigned long long *))dlsym(m->nvml, "nvmlDeviceGetTotalEnergyConsumption");
        double total = 0;
        int ok = energy != NULL;
        for (int i = 0; i < m->n_gpus && ok; i++) {
            unsigned long long mj;
            if (energy(m->gpu[i], &mj) != 0) ok = 0;
            else total += (double)(mj - m->gpu_start_mj[i]) * 1e-3;
        }
        if (ok) *gpu_joules = total;
    }
}

void record_energy_stop(struct record_energy *m)
{
    if (m->nvml) {
        int (*shutdown)(void) = (int (*)(void))dlsym(m->nvml, "nvmlShutdown");
        if (shutdown) shutdown();
        dlclose(m->nvml);
        m->nvml = NULL;
    }
    m->gpu_available = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double record_percentile(double *v, size_t n, double p)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    if (p <= 0) return v[0];
    if (p >= 100) return v[n - 1];
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999999); /* nearest rank, 1-based */
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

void record_iso_time(int64_t unix_seconds, char out[32])
{
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int record_write(const char *path, const json_t *obj, struct err *e)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return err_set(e, "%s: %s", tmp, strerror(errno));
    int rc = json_dumpf(obj, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (rc == 0) fputc('\n', f);
    int ok = rc == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int saved = errno;
        unlink(tmp);
        return err_set(e, "%s: cannot write the run record: %s", path, strerror(saved));
    }
    return 0;
}

json_t *record_histogram_json(const double *v, size_t n, int bins)
{
    double lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || v[i] < lo) lo = v[i];
        if (i == 0 || v[i] > hi) hi = v[i];
    }
    if (bins < 1) bins = 1;
    double w = hi > lo ? (hi - lo) / bins : 1.0;
    json_int_t *k = calloc((size_t)bins, sizeof *k);
    if (!k) return json_null();
    for (size_t i = 0; i < n; i++) {
        int at = (int)((v[i] - lo) / w);
        k[at >= bins ? bins - 1 : at]++;
    }
    json_t *counts = json_array();
    for (int b = 0; b < bins; b++) json_array_append_new(counts, json_integer(k[b]));
    free(k);
    return json_pack("{s:f, s:f, s:o}", "lo", lo, "width", w, "counts", counts);
}

/* --- the run record --- */

static double per_wall(double x, double wall)
{
    return wall > 0 ? x / wall : 0.0;
}

/* Prompt-lookup decoding: its setting, the drafts verified and accepted, and the tokens a sequence gained
 * per step it sampled in (1.0 without lookup). */
static json_t *lookup_json(const struct job_model *m, const struct engine_stats *es)
{
    return json_pack("{s:i, s:b, s:I, s:I, s:I, s:f, s:f, s:f}", "max_draft", m->ep.lookup, "adaptive",
                     m->ep.lookup_adaptive, "drafts", (json_int_t)es->n_drafts, "draft_tokens",
                     (json_int_t)es->draft_tokens, "draft_accepted", (json_int_t)es->draft_accepted, "acceptance_rate",
                     es->draft_tokens ? (double)es->draft_accepted / (double)es->draft_tokens : 0.0,
                     "mean_accepted_length", es->n_drafts ? (double)es->draft_accepted / (double)es->n_drafts : 0.0,
                     "tokens_per_step", es->seq_steps ? (double)es->gen_tokens / (double)es->seq_steps : 0.0);
}

/* When the run started and ended (ISO times) and where its time went, how fast it was, latency, memory, KV
 * pool and prefix cache. */
static void add_performance(json_t *out, const struct record_run *r, const char *t_start, const char *t_end)
{
    const struct job_summary *s = r->s;
    const struct job_model *m = r->m;
    const struct engine_stats *es = r->es;
    double wall = s->wall_s;
    double p50 = record_percentile(r->latency, r->n_latency, 50);
    double p95 = record_percentile(r->latency, r->n_latency, 95);
    double pmax = record_percentile(r->latency, r->n_latency, 100);
    int64_t pt = es->prompt_tokens_computed + es->prompt_tokens_cached;
    json_object_set_new(out, "time",
                        json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "start", t_start, "end", t_end,
                                  "wall_s", wall, "parse_s", s->t_parse, "plan_s", s->t_plan, "store_s", s->t_store,
                                  "output_s", s->t_output, "engine_s", s->t_engine, "store_and_plan_fraction",
                                  per_wall(s->t_plan + s->t_store + s->t_output, wall)));
    json_object_set_new(out, "throughput",
                        json_pack("{s:f, s:f, s:f, s:f}", "prompt_tok_s", per_wall((double)s->prompt_tokens, wall),
                                  "gen_tok_s", per_wall((double)s->gen_tokens, wall), "total_tok_s",
                                  per_wall((double)(s->prompt_tokens + s->gen_tokens), wall), "requests_s",
                                  per_wall((double)s->work_computed, wall)));
    int64_t n_req = r->n_requests > (int64_t)r->n_latency ? r->n_requests : (int64_t)r->n_latency;
    json_t *lat = json_pack("{s:f, s:f, s:f, s:I, s:o}", "p50", p50, "p95", p95, "max", pmax, "n", (json_int_t)n_req,
                            "histogram", record_histogram_json(r->latency, r->n_latency, 20));
    if (n_req > (int64_t)r->n_latency) json_object_set_new(lat, "sampled", json_integer((json_int_t)r->n_latency));
    json_object_set_new(out, "latency_s", lat);
    json_object_set_new(out, "memory", json_pack("{s:I, s:I}", "peak_rss_bytes", (json_int_t)sysmem_peak_rss_bytes(),
                                                 "backlog_bytes", (json_int_t)r->backlog_bytes));
    json_object_set_new(
        out, "kv",
        json_pack("{s:s, s:i, s:I, s:I, s:I, s:f, s:I}", "type", model_kv_type_name(m->ep.kv_type), "block_tokens",
                  m->ep.kv_block, "blocks", (json_int_t)es->kv_blocks_total, "capacity_tokens",
                  (json_int_t)(es->kv_blocks_total * m->ep.kv_block), "peak_blocks", (json_int_t)es->kv_blocks_peak,
                  "peak_use", es->kv_blocks_total ? (double)es->kv_blocks_peak / (double)es->kv_blocks_total : 0.0,
                  "preemptions", (json_int_t)es->n_preemptions));
    json_object_set_new(out, "prefix_cache", json_pack("{s:b, s:f, s:I}", "enabled", m->ep.prefix_cache, "hit_rate",
                                                       pt ? (double)es->prompt_tokens_cached / (double)pt : 0.0,
                                                       "cached_tokens", (json_int_t)es->prompt_tokens_cached));
    json_object_set_new(out, "lookup", lookup_json(m, es));
}

/* Joules since the meters started, or "unavailable" when no meter can be read. */
static json_t *energy_json(const struct record_energy *m, int64_t tokens)
{
    double cpu_j, gpu_j;
    record_energy_read(m, &cpu_j, &gpu_j);
    if (cpu_j < 0 && gpu_j < 0) return json_string("unavailable");
    double joules = (cpu_j > 0 ? cpu_j : 0) + (gpu_j > 0 ? gpu_j : 0);
    return json_pack("{s:f, s:o, s:o, s:s, s:f}", "joules", joules, "cpu_rapl_joules",
                     cpu_j >= 0 ? json_real(cpu_j) : json_string("unavailable"), "gpu_nvml_joules",
                     gpu_j >= 0 ? json_real(gpu_j) : json_string("unavailable"), "source",
                     cpu_j >= 0 && gpu_j >= 0 ? "rapl+nvml" : cpu_j >= 0 ? "rapl" : "nvml", "joules_per_1k_tokens",
                     tokens ? 1000.0 * joules / (double)tokens : 0.0);
}

json_t *record_build(const struct record_run *r)
{
    const struct job_config *c = r->c;
    const struct job_summary *s = r->s;
    const struct job_model *m = r->m;
    char hex[65], t0[32], t1[32];
    sha256_hex(m->sha256, hex);
    record_iso_time(r->t_start_unix, t0);
    record_iso_time((int64_t)time(NULL), t1);
    json_t *argv = json_array();
    for (int i = 0; i < c->argc; i++) json_array_append_new(argv, json_string(c->argv[i]));
    json_t *out = json_object();
    json_object_set_new(out, "nightshift", json_pack("{s:s, s:s}", "version", c->version ? c->version : "?",
                                                     "git_commit", record_git_commit()));
    json_object_set_new(out, "status", json_string(s->interrupted ? "interrupted" : "complete"));
    char retest[32];
    record_iso_time((int64_t)time(NULL) + (int64_t)c->retest_after_days * 86400, retest);
    json_object_set_new(out, "owner", c->owner ? json_string(c->owner) : json_null());
    json_object_set_new(out, "retest_after",
                        json_pack("{s:s, s:i}", "date", retest, "days", (int)c->retest_after_days));
    json_object_set_new(out, "command", argv);
    json_object_set_new(out, "flags", c->settings ? json_deep_copy(c->settings) : json_object());
    json_object_set_new(out, "model", json_pack("{s:s, s:s, s:I, s:s, s:s, s:s}", "path", m->path, "name", m->name,
                                                "size", (json_int_t)m->size, "sha256", hex, "chat_template",
                                                chat_template_name(m->chat, m->chat_jinja), "chat_template_source",
                                                m->chat_source));
    json_object_set_new(out, "backend", json_pack("{s:s, s:i}", "name", m->backend, "threads", m->threads));
    json_object_set_new(out, "backlog", r->backlog ? json_deep_copy(r->backlog) : json_null());
    json_object_set_new(out, "files", json_pack("{s:s, s:s, s:s}", "results", c->output, "errors", c->errors, "store",
                                                c->store));
    json_object_set_new(
        out, "counts",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "lines", (json_int_t)s->lines,
                  "requests", (json_int_t)s->requests, "distinct_requests", (json_int_t)s->distinct_requests,
                  "completions", (json_int_t)s->completions, "results",
                  (json_int_t)s->lines_ok, "errors", (json_int_t)s->lines_failed, "input_errors",
                  (json_int_t)s->input_errors, "engine_errors", (json_int_t)s->engine_errors, "unique_requests",
                  (json_int_t)s->work_total, "done", (json_int_t)(s->work_computed - s->work_failed), "failed",
                  (json_int_t)s->work_failed, "skipped_already_done", (json_int_t)s->work_skipped_done,
                  "folded_duplicates", (json_int_t)s->folded_duplicates));
    json_object_set_new(out, "tokens",
                        json_pack("{s:I, s:I, s:I, s:I}", "prompt", (json_int_t)s->prompt_tokens, "prompt_cached",
                                  (json_int_t)s->prompt_tokens_cached, "prompt_computed",
                                  (json_int_t)r->es->prompt_tokens_computed, "generated", (json_int_t)s->gen_tokens));
    add_performance(out, r, t0, t1);
    json_object_set_new(out, "repair", r->repair ? json_deep_copy(r->repair) : json_null());
    json_object_set_new(out, "energy", energy_json(r->energy, s->gen_tokens + s->prompt_tokens));
    return out;
}
