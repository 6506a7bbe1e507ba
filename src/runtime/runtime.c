/* runtime — see runtime.h. The only code above src/backend/ that turns a backend name into a backend
 * (through backend_open) and the backend's memory into a KV pool size; everything it needs to know about
 * a backend comes from backend_ops.memory and backend_ops.caps. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "util/threads.h"

#define RUNTIME_GIB (1024ull * 1024ull * 1024ull)
#define RUNTIME_CTX_UNKNOWN 4096 /* context assumed for the KV cap when the model states none */

struct runtime_params runtime_default_params(void)
{
    const struct engine_params ep = engine_default_params(); /* the engine's defaults, one source */
    return (struct runtime_params){
        .model_path = NULL,
        .backend = NULL,
        .threads = 0,
        .device = 0,
        .kv_memory = RUNTIME_AUTO,
        .headroom = RUNTIME_AUTO,
        .reserve = 0,
        .kv_type = ep.kv_type,
        .kv_block = ep.kv_block,
        .max_batch_tokens = 0, /* the backend's default (caps), not the engine's */
        .max_seqs = ep.max_seqs,
        .prefix_cache = ep.prefix_cache,
        .lookup = ep.lookup,
        .lookup_adaptive = ep.lookup_adaptive,
        .debug_checks = ep.debug_checks,
    };
}

int runtime_open_model(const struct runtime_params *p, struct runtime *rt, struct err *e)
{
    memset(rt, 0, sizeof *rt);
    rt->params = *p;
    if (!p->model_path) return err_set(e, "no model file given");
    if (gguf_open(p->model_path, &rt->gf, e)) return -1;
    if (model_load(rt->gf, &rt->model, e)) return -1;
    if (tok_load(rt->gf, &rt->vocab, e)) return -1;
    if (tok_n_vocab(rt->vocab) > rt->model->hp.n_vocab)
        return err_set(e, "the vocabulary has %d tokens but token_embd has %d rows", (int)tok_n_vocab(rt->vocab),
                       (int)rt->model->hp.n_vocab);
    return 0;
}

/* The first weight matrix whose type the backend does not compute, or NULL. */
static const struct model_weight *runtime_find_unsupported(const struct model *m, uint64_t types)
{
    const struct model_weight *top[] = {&m->tok_embd, &m->output};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (top[i]->data && !(types >> top[i]->type & 1)) return top[i];
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (w[i]->data && !(types >> w[i]->type & 1)) return w[i];
    }
    return NULL;
}

int runtime_check_weight_types(const struct model *m, const struct backend_caps *caps, const char *backend_name,
                               struct err *e)
{
    const struct model_weight *w = runtime_find_unsupported(m, caps->weight_types);
    if (!w) return 0;
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)w->type);
    char list[256];
    gguf_dtype_names(caps->weight_types, list, sizeof list);
    return err_set(e, "tensor %s has type %s, which the %s backend does not compute (it computes: %s)", w->name,
                   ti ? ti->name : "unknown", backend_name, list);
}

/* rt's backend name and caps, from the backend just opened. */
static int runtime_read_caps(struct runtime *rt, struct err *e)
{
    rt->backend_name = rt->backend.ops->name;
    if (!rt->backend.ops->caps || !rt->backend.ops->memory)
        return err_set(e, "backend %s: no caps or memory op (every backend in the registry needs both)", rt->backend_name);
    rt->backend.ops->caps(rt->backend.ctx, &rt->caps);
    return 0;
}

/* 1 if a backend of these caps runs m: its architecture and every weight type. */
static int runtime_backend_runs(const struct model *m, const struct backend_caps *caps)
{
    return (caps->archs >> m->hp.arch & 1) && !runtime_find_unsupported(m, caps->weight_types);
}

int runtime_open_backend(struct runtime *rt, struct err *e)
{
    const struct runtime_params *p = &rt->params;
    rt->threads = p->threads > 0 ? p->threads : threads_online_cores();
    struct backend_config cfg = {.n_threads = rt->threads, .device = p->device};
    if (backend_open(p->backend, &cfg, &rt->backend, e)) return -1;
    if (runtime_read_caps(rt, e)) return -1;
    if ((!p->backend || !strcmp(p->backend, "auto")) && strcmp(rt->backend_name, "cpu") &&
        !runtime_backend_runs(rt->model, &rt->caps)) { /* auto: the model is not for this one, cpu runs everything */
        log_info("backend %s does not run this model (%s); using cpu", rt->backend_name, model_arch_name(rt->model->hp.arch));
        backend_free(&rt->backend);
        if (backend_open("cpu", &cfg, &rt->backend, e) || runtime_read_caps(rt, e)) return -1;
    }
    if (runtime_check_weight_types(rt->model, &rt->caps, rt->backend_name, e)) return -1;
    if (rt->backend.ops->load(rt->backend.ctx, rt->model, e)) return -1;

    rt->ep = engine_default_params();
    rt->ep.kv_type = p->kv_type;
    rt->ep.kv_block = p->kv_block;
    rt->ep.max_seqs = p->max_seqs;
    rt->ep.prefix_cache = p->prefix_cache;
    rt->ep.lookup = p->lookup;
    rt->ep.lookup_adaptive = p->lookup_adaptive;
    rt->ep.debug_checks = p->debug_checks;
    if (p->max_batch_tokens > 0) rt->ep.max_batch_tokens = p->max_batch_tokens;
    else if (rt->caps.default_max_batch_tokens > 0) rt->ep.max_batch_tokens = rt->caps.default_max_batch_tokens;
    rt->ep.kv_blocks = 0;
    return 0;
}

static double runtime_mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* a - b, or 0 when b >= a */
static uint64_t runtime_sub(uint64_t a, uint64_t b)
{
    return b >= a ? 0 : a - b;
}

/* available - weights - scratch - headroom - reserve, 0 when that is negative. */
static uint64_t runtime_kv_free(const struct runtime_budget *b)
{
    return runtime_sub(runtime_sub(runtime_sub(runtime_sub(b->available, b->weights), b->scratch), b->headroom),
                       b->reserve);
}

/* The figures of the budget from the backend's memory (b->kv_bytes not set). */
static int runtime_measure(const struct runtime *rt, struct runtime_budget *b, struct err *e)
{
    const struct backend *be = &rt->backend;
    struct backend_memory mem = {0};
    if (be->ops->memory(be->ctx, &mem, e)) return -1;
    b->total = mem.total;
    b->available = mem.available;
    b->weights = rt->caps.weights_mapped ? model_weight_bytes(rt->model) : 0;
    b->scratch = be->ops->scratch_bytes ? be->ops->scratch_bytes(be->ctx, rt->ep.max_batch_tokens) : 0;
    if (rt->params.headroom != RUNTIME_AUTO) b->headroom = rt->params.headroom;
    else if (mem.headroom) b->headroom = mem.headroom;
    else b->headroom = mem.total / 5 < 2 * RUNTIME_GIB ? 2 * RUNTIME_GIB : mem.total / 5;
    b->reserve = rt->caps.gpu ? 0 : rt->params.reserve;
    b->kv_free = runtime_kv_free(b);
    return 0;
}

int runtime_plan_kv(struct runtime *rt, uint64_t kv_memory, uint64_t cap, struct err *e)
{
    struct runtime_budget *b = &rt->budget;
    memset(b, 0, sizeof *b);
    b->automatic = kv_memory == RUNTIME_AUTO;
    if (runtime_measure(rt, b, e)) return -1;
    if (b->kv_free == 0)
        return err_set(e,
                       "KV memory: nothing is left for the KV cache on the %s backend (available %.0f MiB - weights "
                       "%.0f MiB - scratch %.0f MiB - headroom %.0f MiB - backlog %.0f MiB); use less headroom "
                       "(--headroom SIZE) or a machine with more memory",
                       rt->backend_name, runtime_mib(b->available), runtime_mib(b->weights), runtime_mib(b->scratch),
                       runtime_mib(b->headroom), runtime_mib(b->reserve));
    if (b->automatic) {
        b->kv_bytes = b->kv_free < cap ? b->kv_free : cap;
    } else if (kv_memory > b->kv_free) {
        log_warn("--kv-memory %.0f MiB is more than the %s backend has for the KV cache: capped at %.0f MiB "
                 "(available %.0f MiB - weights %.0f MiB - scratch %.0f MiB - headroom %.0f MiB - backlog %.0f MiB)",
                 runtime_mib(kv_memory), rt->backend_name, runtime_mib(b->kv_free), runtime_mib(b->available),
                 runtime_mib(b->weights), runtime_mib(b->scratch), runtime_mib(b->headroom), runtime_mib(b->reserve));
        b->kv_bytes = b->kv_free;
        b->capped = 1;
    } else {
        b->kv_bytes = kv_memory;
    }
    b->kv_blocks = engine_kv_blocks_for_budget(&rt->model->hp, rt->ep.kv_type, rt->ep.kv_block, b->kv_bytes);
    b->kv_tokens = b->kv_blocks * rt->ep.kv_block;
    rt->ep.kv_blocks = b->kv_blocks;
    return 0;
}

/* Bytes of KV that max_seqs sequences of the full context can use twice over (the prefix cache keeps
 * finished blocks): more is never touched. With params.seq_tokens (the workload's longest sequence, at most
 * the context): max_seqs sequences of that many tokens in whole blocks, one more block each, and a quarter
 * more for the prefix cache. UINT64_MAX (no cap) if the model's KV size is unknown. */
static uint64_t runtime_useful_kv_bytes(const struct runtime *rt)
{
    const struct model_hparams *hp = &rt->model->hp;
    uint64_t per_token = model_kv_bytes_per_token(hp, rt->ep.kv_type);
    uint64_t ctx = hp->n_ctx_train > 0 ? (uint64_t)hp->n_ctx_train : RUNTIME_CTX_UNKNOWN;
    uint64_t seqs = (uint64_t)rt->ep.max_seqs, block = (uint64_t)rt->ep.kv_block;
    uint64_t useful = per_token * ctx * seqs * 2;
    if (rt->params.seq_tokens > 0 && (uint64_t)rt->params.seq_tokens < ctx) {
        uint64_t blocks = seqs * ((uint64_t)rt->params.seq_tokens / block + 2);
        useful = per_token * block * (blocks + blocks / 4);
    }
    return useful ? useful : UINT64_MAX;
}

int runtime_new_engine(struct runtime *rt, const struct engine_params *ep, engine **out, struct err *e)
{
    return engine_init(rt->model, &rt->backend, rt->vocab, ep, out, e);
}

int runtime_open(const struct runtime_params *p, struct runtime *rt, struct err *e)
{
    if (runtime_open_model(p, rt, e) || runtime_open_backend(rt, e)) goto fail;
    if (runtime_plan_kv(rt, p->kv_memory, runtime_useful_kv_bytes(rt), e)) goto fail;
    if (runtime_new_engine(rt, &rt->ep, &rt->eng, e)) goto fail;
    if (p->debug_checks && runtime_check(rt, e)) goto fail;
    return 0;
fail:
    runtime_close(rt);
    return -1;
}

int runtime_check(const struct runtime *rt, struct err *e)
{
    if (!rt->model || !rt->vocab || !rt->gf) return err_set(e, "runtime check: the model is not open");
    if (!rt->backend.ops) return 0; /* only the model is open */
    if (!rt->backend_name || strcmp(rt->backend_name, rt->backend.ops->name))
        return err_set(e, "runtime check: backend_name '%s' is not the open backend's '%s'",
                       rt->backend_name ? rt->backend_name : "(null)", rt->backend.ops->name);
    if (runtime_check_weight_types(rt->model, &rt->caps, rt->backend_name, e)) return err_prefix(e, "runtime check");
    if (rt->ep.max_batch_tokens < 1 || rt->ep.kv_block < 1 || rt->ep.kv_blocks < 0)
        return err_set(e, "runtime check: engine params max_batch_tokens %d, kv_block %d, kv_blocks %lld",
                       (int)rt->ep.max_batch_tokens, (int)rt->ep.kv_block, (long long)rt->ep.kv_blocks);
    const struct runtime_budget *b = &rt->budget;
    if (b->kv_tokens != b->kv_blocks * rt->ep.kv_block || (b->kv_blocks && b->kv_blocks != rt->ep.kv_blocks))
        return err_set(e, "runtime check: budget of %lld blocks (%lld tokens) for a pool of %lld blocks x %d",
                       (long long)b->kv_blocks, (long long)b->kv_tokens, (long long)rt->ep.kv_blocks, (int)rt->ep.kv_block);
    if (b->kv_bytes && (b->kv_bytes > b->kv_free || b->kv_free != runtime_kv_free(b)))
        return err_set(e, "runtime check: a budget of %llu bytes does not follow from its figures",
                       (unsigned long long)b->kv_bytes);
    return 0;
}

void runtime_describe(const struct runtime *rt, char *out, size_t cap)
{
    const struct engine_params *ep = &rt->ep;
    uint64_t per_token = rt->model ? model_kv_bytes_per_token(&rt->model->hp, ep->kv_type) : 0;
    snprintf(out, cap, "%s backend, %d threads; KV pool %lld tokens (%lld blocks x %d, %s, %.1f MiB)",
             rt->backend_name ? rt->backend_name : "no", rt->threads, (long long)ep->kv_blocks * ep->kv_block,
             (long long)ep->kv_blocks, (int)ep->kv_block, model_kv_type_name(ep->kv_type),
             runtime_mib((uint64_t)ep->kv_blocks * (uint64_t)ep->kv_block * per_token));
}

void runtime_close(struct runtime *rt)
{
    engine_free(rt->eng);
    if (rt->backend.ops) backend_free(&rt->backend);
    tok_free(rt->vocab);
    model_free(rt->model);
    gguf_close(rt->gf);
    memset(rt, 0, sizeof *rt);
}
