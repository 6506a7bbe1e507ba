/* settings — the run-wide settings a store is bound to: the model's sha256, the generation defaults (one
 * per row of runtime/genparam's table) and whatever else changes results (chat template, KV type,
 * parse_special, the key version). Each is one meta row ("default.temperature" -> "0.699999988"); the list
 * is settings_of in settings.c.
 *
 * A store made with other settings holds results that the keys of this run never ask for, and line rows
 * built from them: reusing it by accident would silently mix two runs, so it is refused unless --force.
 * A new store means the output files are rebuilt from it, so non-empty output files next to a new store
 * are refused too (unless --force).
 */
#ifndef NS_JOBS_SETTINGS_H
#define NS_JOBS_SETTINGS_H

#include "jobs/job.h"
#include "jobs/store.h"
#include "util/err.h"

/* Binds st to the settings of (c, m): a new store gets them (with model.path and nightshift.version);
 * a store made with other settings is refused, naming each difference, unless c->force (then it is
 * rebound to these settings and a warning names the differences); a new store next to non-empty output
 * files (c->output, c->errors) is refused unless c->force. defaults_used: bit i set when some line of the
 * backlog fell back to the default of genparam row i (ingest_stats.defaults_used; GENPARAM_ALL_ROWS when
 * unknown): a default that differs but that no line used changes no result, so it is not a difference
 * (and the store keeps the value it has). */
int settings_bind_store(store *st, const struct job_config *c, const struct job_model *m, uint64_t defaults_used,
                        struct err *e);

#endif
