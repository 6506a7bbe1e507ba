/* pooling — one embedding from the final hidden states of a prompt's rows (the engine's embedding requests).
 *
 * The model says how (enum model_pooling, GGUF <arch>.pooling_type): MEAN averages every row, CLS takes row 0
 * (the first token), LAST takes row n_prompt - 1. The rows arrive step by step, in position order (a prompt
 * longer than one step's rows comes in several prefill chunks); MEAN keeps their sum in double, added row by
 * row in that order, so the result does not depend on how the prompt was split. The embedding is then
 * L2-normalised (a zero vector stays zero).
 *
 * Invariant (pooling_check): 0 <= n_rows; n_rows <= 1 for CLS and LAST; sum holds n_embd values.
 */
#ifndef NS_ENGINE_POOLING_H
#define NS_ENGINE_POOLING_H

#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

struct pooling_acc {
    int32_t pooling; /* enum model_pooling: MEAN, CLS or LAST */
    int32_t n_embd;
    int32_t n_rows;  /* rows added since the last reset */
    double *sum;     /* (n_embd) the sum of the rows added; NULL before pooling_init */
};

/* 1 if pooling is one this module computes (MEAN, CLS, LAST); NONE and unknown values are not. */
int pooling_supported(int32_t pooling);
/* 1 if the row at position pos of a prompt of n_prompt tokens enters the embedding. */
int pooling_wants_row(int32_t pooling, int32_t pos, int32_t n_prompt);
/* Starts an empty accumulator; -1 when out of memory or pooling is not supported. */
int pooling_init(struct pooling_acc *a, int32_t pooling, int32_t n_embd);
/* Forgets every row added (a preempted request computes its prompt again). */
void pooling_reset(struct pooling_acc *a);
/* Adds one wanted row (n_embd floats), in position order. */
void pooling_add(struct pooling_acc *a, const float *row);
/* The embedding: the mean (MEAN) or the row (CLS, LAST), L2-normalised, into out (n_embd). -1 when no row
 * was added. */
int pooling_finish(const struct pooling_acc *a, float *out);
void pooling_free(struct pooling_acc *a);
/* Scales v (n floats) to unit L2 norm (norm computed in double); a zero vector is left as it is. */
void pooling_normalize(float *v, int64_t n);
/* Debug check of the invariant above. */
int pooling_check(const struct pooling_acc *a, struct err *e);

#endif
