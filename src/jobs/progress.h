/* progress — what a run reports while it works.
 *
 * On a terminal: one line redrawn in place (at most 4 times a second). Otherwise (a log file, a pipe): one
 * line every `interval` seconds. Quiet: nothing. The line:
 *
 *   run 1234/5000 24.7% | prompt 1523 tok/s | gen 812 tok/s | ETA 3m12s | KV 43% | prefix hit 12% | failed 2
 *
 * With prompt-lookup decoding on, it ends "| lookup 81% acc, 3.4 tok/step" (draft tokens accepted, tokens
 * a sequence gains per step, over the run so far).
 *
 * Token rates are over the last few seconds (exponentially smoothed); the ETA is from the average request
 * rate since the start.
 */
#ifndef NS_JOBS_PROGRESS_H
#define NS_JOBS_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

struct progress_snapshot {
    int64_t done, total, failed; /* units of work (keys) of this run */
    int64_t prompt_tokens;       /* prompt tokens processed so far (computed + from the prefix cache) */
    int64_t gen_tokens;          /* generated tokens so far */
    double kv_use;               /* fraction of KV blocks in use now, [0, 1] */
    double prefix_hit;           /* prompt tokens served from the prefix cache / prompt tokens, [0, 1] */
    int lookup;                  /* prompt lookup on: the two figures below are shown */
    double draft_acceptance;     /* draft tokens accepted / verified, [0, 1] */
    double tokens_per_step;      /* generated tokens / sequence-steps (1 without drafts) */
};

enum progress_mode { PROGRESS_AUTO, PROGRESS_TTY, PROGRESS_LOG, PROGRESS_QUIET };

typedef struct progress progress;

/* out: where to draw (stderr usually). AUTO picks TTY when out is a terminal, else LOG. */
progress *progress_init(FILE *out, enum progress_mode mode, double interval, double now);
void progress_free(progress *p);
/* Draws if it is time to. Cheap when it is not (one comparison). */
void progress_update(progress *p, const struct progress_snapshot *s, double now);
/* Draws the last state and ends the line. */
void progress_finish(progress *p, const struct progress_snapshot *s, double now);
/* Formats the line (without newline) into buf; for tests. */
void progress_format(char *buf, size_t cap, const struct progress_snapshot *s, double prompt_rate, double gen_rate,
                     double eta_seconds);

#endif
