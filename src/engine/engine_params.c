/* engine_params — the engine's parameters: their table (ranges and defaults), validation and the pool size
 * for a memory budget (the parts of engine.h that need no engine; split from engine.c). */
#include <stddef.h>
#include <string.h>

#include "engine/engine.h"

#define E(field) offsetof(struct engine_params, field)

const struct engine_param engine_param_table[] = {
    {"kv_block", ENGINE_PARAM_INT, 1, 1024, 16, ENGINE_PARAM_POW2, E(kv_block)},
    {"kv_type", ENGINE_PARAM_KV_TYPE, 0, 0, KV_TYPE_F16, 0, E(kv_type)},
    {"max_batch_tokens", ENGINE_PARAM_INT, 1, 65536, 512, 0, E(max_batch_tokens)},
    {"max_seqs", ENGINE_PARAM_INT, 1, 4096, 64, 0, E(max_seqs)},
    {"prefix_cache", ENGINE_PARAM_BOOL, 0, 1, 1, 0, E(prefix_cache)},
    {"lookup", ENGINE_PARAM_INT, 0, ENGINE_MAX_LOOKUP, ENGINE_DEFAULT_LOOKUP, 0, E(lookup)},
    {"lookup_adaptive", ENGINE_PARAM_BOOL, 0, 1, 1, 0, E(lookup_adaptive)},
    {"device_sampling", ENGINE_PARAM_BOOL, 0, 1, 1, 0, E(device_sampling)},
    {"debug_checks", ENGINE_PARAM_BOOL, 0, 1, 0, 0, E(debug_checks)},
};
const int engine_param_count = (int)(sizeof engine_param_table / sizeof engine_param_table[0]);

#undef E

_Static_assert(sizeof(enum kv_type) == sizeof(int32_t), "engine_param rows read every field as 32 bits");

const struct engine_param *engine_param_find(const char *name)
{
    for (int i = 0; i < engine_param_count; i++)
        if (!strcmp(engine_param_table[i].name, name)) return &engine_param_table[i];
    return NULL;
}

int32_t engine_param_get(const struct engine_params *p, const struct engine_param *row)
{
    return *(const int32_t *)((const char *)p + row->offset);
}

void engine_param_set(struct engine_params *p, const struct engine_param *row, int32_t v)
{
    *(int32_t *)((char *)p + row->offset) = v;
}

int engine_param_check(const struct engine_param *row, int32_t v, struct err *e)
{
    enum kv_type back;
    switch (row->type) {
    case ENGINE_PARAM_INT:
        if (v < row->lo || v > row->hi || ((row->flags & ENGINE_PARAM_POW2) && (v & (v - 1))))
            return err_set(e, "%s %d: must be %sin [%d, %d]", row->name, (int)v,
                           row->flags & ENGINE_PARAM_POW2 ? "a power of two " : "", (int)row->lo, (int)row->hi);
        return 0;
    case ENGINE_PARAM_KV_TYPE:
        if (model_kv_type_parse(model_kv_type_name((enum kv_type)v), &back) || (int32_t)back != v)
            return err_set(e, "unknown KV type %d", (int)v);
        return 0;
    case ENGINE_PARAM_BOOL: return 0;
    }
    return 0;
}

struct engine_params engine_default_params(void)
{
    struct engine_params p = {0};
    for (int i = 0; i < engine_param_count; i++)
        engine_param_set(&p, &engine_param_table[i], engine_param_table[i].def);
    return p;
}

int64_t engine_kv_blocks_for_budget(const struct model_hparams *hp, enum kv_type t, int32_t kv_block,
                                    uint64_t kv_bytes)
{
    if (kv_block < 1) return 0;
    uint64_t per_token = model_kv_bytes_per_token(hp, t);
    if (!per_token) return 0;
    uint64_t per_block = per_token * (uint64_t)kv_block;
    uint64_t n = kv_bytes / per_block;
    uint64_t cap = (uint64_t)INT32_MAX / (uint64_t)kv_block;
    return (int64_t)(n > cap ? cap : n);
}

int engine_check_params(const struct engine_params *p, struct err *e)
{
    for (int i = 0; i < engine_param_count; i++)
        if (engine_param_check(&engine_param_table[i], engine_param_get(p, &engine_param_table[i]), e)) return -1;
    if (p->kv_blocks < 1)
        return err_set(e, "KV pool of %lld blocks: the memory budget holds no block of %d tokens",
                       (long long)p->kv_blocks, (int)p->kv_block);
    if (p->kv_blocks > INT32_MAX / p->kv_block)
        return err_set(e, "KV pool of %lld blocks x %d tokens is over 2^31 tokens", (long long)p->kv_blocks,
                       (int)p->kv_block);
    return 0;
}
