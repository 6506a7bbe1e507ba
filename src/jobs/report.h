/* report — one self-contained HTML page about a finished or interrupted run (`nightshift report`): built
 * from its run record (jobs/record, with jobs/monitor's time series), its result and error files, and a few
 * of its prompts read back from the backlog. Charts are inline SVG; the page loads nothing from elsewhere
 * and runs no script.
 *
 * Sections: the run at a glance (status, model, owner, re-test date, counts, throughput, energy);
 * throughput over time (sustained against the first minutes); KV use, running-sequence cap and preemptions
 * over time; latency distribution; prompt and generated token histograms; prefix-cache hit rate over
 * time; failures by reason; sample outputs beside their prompts. A section whose data the record does not
 * have (an old record without a time series) says so instead of drawing.
 */
#ifndef NS_JOBS_REPORT_H
#define NS_JOBS_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "util/err.h"

#define REPORT_MAX_SAMPLES 6

struct report_sample {
    char *id, *prompt, *output; /* malloc'd; prompt NULL when the backlog could not be read back */
};

struct report_data {
    json_t *record;                   /* owned */
    double *prompt_tokens, *gen_tokens; /* (n_results) per result line, from its usage */
    size_t n_results, cap_results;
    json_t *failures;                 /* {code: count} from the error file (owned) */
    struct report_sample samples[REPORT_MAX_SAMPLES];
    int n_samples;
    char *notes;                      /* what could not be read, for the page (malloc'd, or NULL) */
};

/* Reads the record at path into d (zeroed first), then its result and error files and the samples'
 * prompts from its backlog; a file path in the record that does not exist as given is looked for beside
 * the record. A missing result, error or backlog file is a note on the page, not a failure; an unreadable
 * or non-object record is. */
int report_load(const char *record_path, struct report_data *d, struct err *e);
void report_free(struct report_data *d);

/* The page. 0, or -1 on a write error. */
int report_write_html(FILE *f, const struct report_data *d);

/* Writes s with the XML/HTML specials escaped (shared by the charts; exposed for tests). */
void report_escape(FILE *f, const char *s);

#endif
