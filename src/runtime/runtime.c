/* runtime — see runtime.h. The only code above src/backend/ that turns a backend name into a backend
 * (through backend_open) and the backend's memory into a KV pool size; everything it needs to know about
 * a backend comes from backend_ops.memory and backend_ops.caps. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

#include "engine/draft.h"
#include "runtime/runparam.h"
#include "util/log.h"
#include "util/threads.h"

#define RUNTIME_GIB (1024ull * 1024ull * 1024ull)
#define RUNTIME_CTX_UNKNOWN 4096 /* context assumed for the KV cap when the model states none */

struct runtime_params runtime_default_params(void)
{
    struct runtime_params p;
    memset(&p, 0, sizeof p); /* model_path NULL, reserve and seq_tokens 0: not flags */
    runparam_defaults(&p);   /* the flags' defaults: the engine's (engine_param_table) where they are its */
    return p;
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
        return err_set(e, "backend %s: no caps or memory op (every backend in the registry needs both)",
                       rt->backend_name);
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
    struct backend_config cfg = {.n_threads = rt->threads, .device = p->device, .weights = p->gpu_weights};
    if (backend_open(p->backend, &cfg, &rt->backend, e)) return -1;
    if (runtime_read_caps(rt, e)) return -1;
    if ((!p->backend || !strcmp(p->backend, "auto")) && strcmp(rt->backend_name, "cpu") &&
        !runtime_backend_runs(rt->model, &rt->caps)) { /* auto: the model is not for this one, cpu runs everything */
        log_info("backend %s does not run this model (%s); using cpu", rt->backend_name,
                 model_arch_name(rt->model->hp.arch));
        backend_free(&rt->backend);
        if (backend_open("cpu", &cfg, &rt->backend, e) || runtime_read_caps(rt, e)) return -1;
    }
    if (runtime_check_weight_types(rt->model, &rt->caps, rt->backend_name, e)) return -1;
    if (rt->caps.kv_types && !(rt->caps.kv_types >> p->kv_type & 1))
        return err_set(e, "--kv-type %s: backend %s has no %s KV cache", model_kv_type_name(p->kv_type),
                       rt->backend_name, model_kv_type_name(p->kv_type));
    if (p->gpu_weights != BACKEND_WEIGHTS_AUTO && !rt->caps.gpu)
        return err_set(e, "--gpu-weights %s: backend %s computes with the file's own weight types; %s weights need "
                          "a GPU backend (--backend cuda)",
                       backend_weights_name(p->gpu_weights), rt->backend_name, backend_weights_name(p->gpu_weights));
    if (rt->backend.ops->load(rt->backend.ctx, rt->model, e)) return -1;

    rt->ep = engine_default_params();
    if (rt->caps.default_max_batch_tokens > 0) rt->ep.max_batch_tokens = rt->caps.default_max_batch_tokens;
    runparam_to_engine(p, &rt->ep); /* every flag with an engine field; max_batch_tokens 0 keeps the backend's */
    if (p->max_seqs == RUNTIME_MAX_SEQS_AUTO) rt->ep.max_seqs = runtime_seq_knee(&rt->caps, rt->ep.max_batch_tokens);
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

int32_t runtime_seq_knee(const struct backend_caps *caps, int32_t max_batch_tokens)
{
    double rows = caps->step_knee_rows > 0 ? caps->step_knee_rows : DRAFT_PRIOR_KNEE;
    double knee = RUNTIME_KNEE_FACTOR * rows, most = max_batch_tokens < 4096 ? max_batch_tokens : 4096;
    return knee < 1 ? 1 : knee > most ? (int32_t)most : (int32_t)knee;
}

/* Tokens a sequence of the workload is counted at: params.seq_tokens, at most the model's context; the
 * context when 0. *basis says which. */
static int64_t runtime_seq_tokens(const struct runtime *rt, const char **basis)
{
    const struct model_hparams *hp = &rt->model->hp;
    int64_t ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : RUNTIME_CTX_UNKNOWN;
    *basis = "at the model's context";
    if (rt->params.seq_tokens <= 0 || rt->params.seq_tokens >= ctx) return ctx;
    *basis = "at the backlog's longest line";
    return rt->params.seq_tokens;
}

/* Blocks one sequence of seq_tokens can hold: whole blocks and one more. */
static int64_t runtime_seq_blocks(const struct runtime *rt, int64_t seq_tokens)
{
    return seq_tokens / rt->ep.kv_block + 2;
}

/* Bytes of KV that max_seqs sequences of runtime_seq_tokens each can use, in whole blocks and one more
 * block each, and a quarter more for the prefix cache (it keeps finished blocks): more is never touched.
 * UINT64_MAX (no cap) if the model's KV size is unknown. */
static uint64_t runtime_useful_kv_bytes(const struct runtime *rt)
{
    const char *basis;
    uint64_t per_token = model_kv_bytes_per_token(&rt->model->hp, rt->ep.kv_type);
    uint64_t blocks = (uint64_t)rt->ep.max_seqs * (uint64_t)runtime_seq_blocks(rt, runtime_seq_tokens(rt, &basis));
    uint64_t useful = per_token * (uint64_t)rt->ep.kv_block * (blocks + blocks / 4);
    return useful ? useful : UINT64_MAX;
}

void runtime_seqs_fit(struct runtime_seqs *s, int32_t n_fit, int64_t seq_tokens, const char *basis)
{
    s->n = n_fit < 1 ? 1 : n_fit < s->knee ? n_fit : s->knee;
    s->seq_tokens = seq_tokens;
    s->basis = basis;
}

/* rt->seqs after runtime_plan_kv: the given max_seqs, or auto's choice at runtime_seq_tokens a sequence. */
static void runtime_choose_seqs(struct runtime *rt)
{
    struct runtime_seqs *s = &rt->seqs;
    memset(s, 0, sizeof *s);
    s->automatic = rt->params.max_seqs == RUNTIME_MAX_SEQS_AUTO;
    s->n = s->knee = rt->ep.max_seqs;
    if (!s->automatic) return;
    const char *basis;
    int64_t tokens = runtime_seq_tokens(rt, &basis), fit = rt->ep.kv_blocks / runtime_seq_blocks(rt, tokens);
    runtime_seqs_fit(s, fit > INT32_MAX ? INT32_MAX : (int32_t)fit, tokens, basis);
}

/* n with thousands separated by commas ("1,324"). */
static void runtime_thousands(int64_t n, char *out, size_t cap)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)(n < 0 ? 0 : n)), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < cap; i++) {
        if (i && (len - i) % 3 == 0) out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

void runtime_describe_seqs(const struct runtime_seqs *s, const char *backend, uint64_t kv_bytes, char *out,
                           size_t cap)
{
    if (!s->automatic) {
        snprintf(out, cap, "max-seqs %d (given)", (int)s->n);
        return;
    }
    char tokens[32], size[32];
    runtime_thousands(s->seq_tokens, tokens, sizeof tokens);
    if (kv_bytes >= RUNTIME_GIB) snprintf(size, sizeof size, "%.1f GiB", (double)kv_bytes / (double)RUNTIME_GIB);
    else snprintf(size, sizeof size, "%.1f MiB", runtime_mib(kv_bytes));
    if (s->n < s->knee)
        snprintf(out, cap, "max-seqs %d (auto: KV for %d x %s tokens (%s) fits %s; %s knee %d)", (int)s->n, (int)s->n,
                 tokens, s->basis, size, backend, (int)s->knee);
    else
        snprintf(out, cap, "max-seqs %d (auto: %s knee %d; KV for %d x %s tokens (%s) fits %s)", (int)s->n, backend,
                 (int)s->knee, (int)s->n, tokens, s->basis, size);
}

int runtime_new_engine(struct runtime *rt, const struct engine_params *ep, engine **out, struct err *e)
{
    return engine_init(rt->model, &rt->backend, rt->vocab, ep, out, e);
}

int runtime_open(const struct runtime_params *p, struct runtime *rt, struct err *e)
{
    if (runtime_open_model(p, rt, e) || runtime_open_backend(rt, e)) goto fail;
    if (runtime_plan_kv(rt, p->kv_memory, runtime_useful_kv_bytes(rt), e)) goto fail;
    runtime_choose_seqs(rt);
    if (runtime_new_engine(rt, &rt->ep, &rt->eng, e)) goto fail;
    rt->seqs.n = engine_set_max_seqs(rt->eng, rt->seqs.n); /* the ceiling stays rt->ep.max_seqs */
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
                       (long long)b->kv_blocks, (long long)b->kv_tokens, (long long)rt->ep.kv_blocks,
                       (int)rt->ep.kv_block);
    const struct runtime_seqs *s = &rt->seqs;
    if (rt->eng && (s->n < 1 || s->n > rt->ep.max_seqs || (s->automatic && s->knee != rt->ep.max_seqs)))
        return err_set(e, "runtime check: %d running sequences for an engine of max_seqs %d (auto %d, knee %d)",
                       (int)s->n, (int)rt->ep.max_seqs, s->automatic, (int)s->knee);
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
