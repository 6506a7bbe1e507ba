/* engine_params — the engine's parameters: defaults, validation and the pool size for a memory budget (the
 * parts of engine.h that need no engine; split from engine.c). */
#include "engine/engine.h"

struct engine_params engine_default_params(void)
{
    return (struct engine_params){
        .kv_block = 16,
        .kv_blocks = 0,
        .kv_type = KV_TYPE_F16,
        .max_batch_tokens = 512,
        .max_seqs = 64,
        .prefix_cache = 1,
        .lookup = ENGINE_DEFAULT_LOOKUP,
        .lookup_adaptive = 1,
        .device_sampling = 1,
        .debug_checks = 0,
    };
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
    if (p->kv_block < 1 || p->kv_block > 1024 || (p->kv_block & (p->kv_block - 1)))
        return err_set(e, "kv block size %d: must be a power of two from 1 to 1024", (int)p->kv_block);
    if (p->kv_blocks < 1)
        return err_set(e, "KV pool of %lld blocks: the memory budget holds no block of %d tokens", (long long)p->kv_blocks,
                       (int)p->kv_block);
    if (p->kv_blocks > INT32_MAX / p->kv_block)
        return err_set(e, "KV pool of %lld blocks x %d tokens is over 2^31 tokens", (long long)p->kv_blocks, (int)p->kv_block);
    if (p->max_batch_tokens < 1 || p->max_batch_tokens > 65536)
        return err_set(e, "max_batch_tokens %d: must be in [1, 65536]", (int)p->max_batch_tokens);
    if (p->max_seqs < 1 || p->max_seqs > 4096) return err_set(e, "max_seqs %d: must be in [1, 4096]", (int)p->max_seqs);
    if (p->kv_type != KV_TYPE_F32 && p->kv_type != KV_TYPE_F16 && p->kv_type != KV_TYPE_Q8_0)
        return err_set(e, "unknown KV type %d", (int)p->kv_type);
    if (p->lookup < 0 || p->lookup > ENGINE_MAX_LOOKUP)
        return err_set(e, "lookup %d: must be in [0, %d]", (int)p->lookup, ENGINE_MAX_LOOKUP);
    return 0;
}
