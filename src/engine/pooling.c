/* pooling — see pooling.h. */
#include "engine/pooling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pooling_supported(int32_t pooling)
{
    return pooling == MODEL_POOLING_MEAN || pooling == MODEL_POOLING_CLS || pooling == MODEL_POOLING_LAST;
}

int pooling_wants_row(int32_t pooling, int32_t pos, int32_t n_prompt)
{
    switch (pooling) {
    case MODEL_POOLING_MEAN: return pos >= 0 && pos < n_prompt;
    case MODEL_POOLING_CLS: return pos == 0;
    case MODEL_POOLING_LAST: return pos == n_prompt - 1;
    default: return 0;
    }
}

int pooling_init(struct pooling_acc *a, int32_t pooling, int32_t n_embd)
{
    memset(a, 0, sizeof *a);
    if (!pooling_supported(pooling) || n_embd < 1) return -1;
    a->sum = calloc((size_t)n_embd, sizeof *a->sum);
    if (!a->sum) return -1;
    a->pooling = pooling;
    a->n_embd = n_embd;
    return 0;
}

void pooling_reset(struct pooling_acc *a)
{
    if (a->sum) memset(a->sum, 0, (size_t)a->n_embd * sizeof *a->sum);
    a->n_rows = 0;
}

void pooling_add(struct pooling_acc *a, const float *row)
{
    for (int32_t k = 0; k < a->n_embd; k++) a->sum[k] += (double)row[k];
    a->n_rows++;
}

void pooling_normalize(float *v, int64_t n)
{
    double ss = 0.0;
    for (int64_t k = 0; k < n; k++) ss += (double)v[k] * (double)v[k];
    if (!(ss > 0.0)) return;
    double inv = 1.0 / sqrt(ss);
    for (int64_t k = 0; k < n; k++) v[k] = (float)((double)v[k] * inv);
}

int pooling_finish(const struct pooling_acc *a, float *out)
{
    if (a->n_rows < 1) return -1;
    for (int32_t k = 0; k < a->n_embd; k++) out[k] = (float)(a->sum[k] / (double)a->n_rows);
    pooling_normalize(out, a->n_embd);
    return 0;
}

void pooling_free(struct pooling_acc *a)
{
    free(a->sum);
    memset(a, 0, sizeof *a);
}

int pooling_check(const struct pooling_acc *a, struct err *e)
{
    if (!pooling_supported(a->pooling)) return err_set(e, "pooling: type %d is not supported", (int)a->pooling);
    if (!a->sum || a->n_embd < 1) return err_set(e, "pooling: no sum of %d values", (int)a->n_embd);
    if (a->n_rows < 0 || (a->pooling != MODEL_POOLING_MEAN && a->n_rows > 1))
        return err_set(e, "pooling: %d rows added for type %d", (int)a->n_rows, (int)a->pooling);
    return 0;
}
