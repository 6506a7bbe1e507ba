/* runparam — see runparam.h. The table is the whole definition of the engine and runtime flags; every
 * function below walks it and switches on the row's type only. */
#include "runtime/runparam.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/genparam.h"
#include "util/sysmem.h"

#define R(field) offsetof(struct runtime_params, field)

/* The KV types' names: model_kv_type_name's, as far as they are names (model_kv_type_parse reads them back). */
static const char *kv_type_name_of(int32_t t)
{
    enum kv_type back;
    const char *s = model_kv_type_name((enum kv_type)t);
    return t >= 0 && !model_kv_type_parse(s, &back) && (int32_t)back == t ? s : NULL;
}

/* The GPU weights' names (backend.h), for the NAMED row. */
static const char *gpu_weights_name_of(int32_t w)
{
    return w >= 0 && w < BACKEND_WEIGHTS_N ? backend_weights_name((enum backend_weights)w) : NULL;
}

/* Order is the run record's and --help's. */
const struct runparam runparam_table[] = {
    {.name = "backend", .flag = "--backend", .metavar = "NAME", .type = RUNPARAM_BACKEND, .offset = R(backend),
     .help = "auto (default: the best available) or one of:"},
    {.name = "device", .flag = "--device", .metavar = "N", .type = RUNPARAM_INT, .offset = R(device), .hi = 1023,
     .help = "GPU ordinal"},
    {.name = "gpu_weights", .flag = "--gpu-weights", .metavar = "W", .type = RUNPARAM_NAMED, .offset = R(gpu_weights),
     .name_of = gpu_weights_name_of,
     .help = "a GPU backend's weight matrices (auto: the file's own precision when it leaves\n"
             "room for the KV cache, else fp8):"},
    {.name = "threads", .flag = "--threads", .alias = "-t", .metavar = "N", .type = RUNPARAM_INT,
     .offset = R(threads), .lo = 1, .hi = 1024, .zero = "one per core", .help = "CPU threads"},
    {.name = "kv_memory", .flag = "--kv-memory", .metavar = "SIZE|auto", .type = RUNPARAM_SIZE,
     .offset = R(kv_memory), .auto_word = "auto",
     .help = "KV cache budget, e.g. 512M, 2G (default auto: what the backend's memory has\n"
             "left after weights and headroom, capped at what --max-seqs can use; a SIZE\n"
             "larger than what is left is capped there, with a warning)"},
    {.name = "headroom", .flag = "--headroom", .metavar = "SIZE", .type = RUNPARAM_SIZE, .offset = R(headroom),
     .auto_word = "default",
     .help = "memory left unused by the KV cache (default: the backend's; cpu 20% of RAM,\nat least 2G)"},
    {.name = "kv_type", .flag = "--kv-type", .metavar = "T", .type = RUNPARAM_NAMED, .offset = R(kv_type),
     .flags = RUNPARAM_ENGINE, .name_of = kv_type_name_of, .help = "KV cache element type:"},
    {.name = "kv_block", .flag = "--kv-block", .metavar = "N", .type = RUNPARAM_INT, .offset = R(kv_block),
     .flags = RUNPARAM_ENGINE, .help = "tokens per KV block, a power of two"},
    {.name = "max_batch_tokens", .flag = "--max-batch-tokens", .alias = "--batch", .metavar = "N",
     .type = RUNPARAM_INT, .offset = R(max_batch_tokens), .flags = RUNPARAM_ENGINE | RUNPARAM_ZERO_KEEPS,
     .zero = "the backend's, cpu 512", .help = "rows per engine step"},
    {.name = "max_seqs", .flag = "--max-seqs", .metavar = "N|auto", .type = RUNPARAM_INT, .offset = R(max_seqs),
     .flags = RUNPARAM_ENGINE | RUNPARAM_AUTO_ZERO, .auto_word = "auto",
     .help = "sequences running at once (auto: the backend's knee, fewer when their KV at\n"
             "the backlog's lengths would not fit the pool)"},
    {.name = "prefix_cache", .flag = "--no-prefix-cache", .type = RUNPARAM_OFF, .offset = R(prefix_cache),
     .flags = RUNPARAM_ENGINE, .help = "do not reuse KV of shared prompt prefixes"},
    {.name = "lookup", .flag = "--lookup", .metavar = "N", .type = RUNPARAM_INT, .offset = R(lookup),
     .flags = RUNPARAM_ENGINE,
     .help = "prompt-lookup decoding: verify up to N draft tokens copied from the prompt\n"
             "and output per sequence and step; same results, fewer steps; 0 = off"},
    {.name = "lookup_adaptive", .flag = "--lookup-always", .type = RUNPARAM_OFF, .offset = R(lookup_adaptive),
     .flags = RUNPARAM_ENGINE,
     .help = "verify all N draft tokens proposed, however often they are rejected and\n"
             "however busy the step (measuring acceptance; default: as many as pay off)"},
    {.name = "debug_checks", .type = RUNPARAM_NONE, .offset = R(debug_checks), .flags = RUNPARAM_ENGINE},
};
const int runparam_count = (int)(sizeof runparam_table / sizeof runparam_table[0]);

#undef R

static int32_t *int_at(struct runtime_params *p, const struct runparam *r)
{
    return (int32_t *)((char *)p + r->offset);
}
static int32_t cint_at(const struct runtime_params *p, const struct runparam *r)
{
    return *(const int32_t *)((const char *)p + r->offset);
}
static uint64_t csize_at(const struct runtime_params *p, const struct runparam *r)
{
    return *(const uint64_t *)((const char *)p + r->offset);
}
static const char *cstr_at(const struct runtime_params *p, const struct runparam *r)
{
    return *(const char *const *)((const char *)p + r->offset);
}

static const struct engine_param *engine_row(const struct runparam *r)
{
    return r->flags & RUNPARAM_ENGINE ? engine_param_find(r->name) : NULL;
}

void runparam_range(const struct runparam *r, int32_t *lo, int32_t *hi)
{
    const struct engine_param *er = engine_row(r);
    *lo = r->type != RUNPARAM_INT ? 0 : er ? er->lo : r->lo;
    *hi = r->type != RUNPARAM_INT ? 0 : er ? er->hi : r->hi;
}

int runparam_in(const struct runparam *row, const char *const *only)
{
    if (!only) return 1;
    for (; *only; only++)
        if (!strcmp(*only, row->name)) return 1;
    return 0;
}

void runparam_defaults(struct runtime_params *p)
{
    for (int i = 0; i < runparam_count; i++) {
        const struct runparam *r = &runparam_table[i];
        const struct engine_param *er = engine_row(r);
        switch (r->type) {
        case RUNPARAM_SIZE: *(uint64_t *)((char *)p + r->offset) = RUNTIME_AUTO; break;
        case RUNPARAM_BACKEND: *(const char **)((char *)p + r->offset) = NULL; break;
        default:
            *int_at(p, r) = r->flags & (RUNPARAM_ZERO_KEEPS | RUNPARAM_AUTO_ZERO) ? 0 : er ? er->def : r->def;
            break;
        }
    }
}

/* "f32, f16 or q8_0": a NAMED row's names. */
static void names_list(const struct runparam *r, char *buf, size_t cap)
{
    int n = 0;
    while (r->name_of(n)) n++;
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < n && off < cap; k++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ", r->name_of(k));
}

static int set_int(struct runtime_params *p, const struct runparam *r, const char *flag, const char *v,
                   struct err *e)
{
    int32_t lo, hi;
    runparam_range(r, &lo, &hi);
    if ((r->flags & RUNPARAM_AUTO_ZERO) && !strcmp(v, "auto")) {
        *int_at(p, r) = 0;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return err_set(e, "%s expects %san integer in [%d, %d], got '%s'", flag,
                       r->flags & RUNPARAM_AUTO_ZERO ? "auto or " : "", (int)lo, (int)hi, v);
    const struct engine_param *er = engine_row(r);
    if (er && (er->flags & ENGINE_PARAM_POW2) && (x & (x - 1)))
        return err_set(e, "%s %lld: must be a power of two", flag, x);
    *int_at(p, r) = (int32_t)x;
    return 0;
}

int runparam_set_flag(struct runtime_params *p, const struct runparam *r, const char *flag, const char *v,
                      struct err *e)
{
    uint64_t bytes = RUNTIME_AUTO;
    char list[128];
    switch (r->type) {
    case RUNPARAM_INT: return set_int(p, r, flag, v, e);
    case RUNPARAM_OFF: *int_at(p, r) = 0; return 0;
    case RUNPARAM_SIZE:
        if (strcmp(v, "auto") && sysmem_parse_size(v, &bytes, e)) return err_prefix(e, "%s", flag);
        *(uint64_t *)((char *)p + r->offset) = bytes;
        return 0;
    case RUNPARAM_BACKEND:
        if (backend_check_name(v, e)) return err_prefix(e, "%s", flag);
        *(const char **)((char *)p + r->offset) = v;
        return 0;
    case RUNPARAM_NAMED:
        for (int32_t k = 0; r->name_of(k); k++)
            if (!strcasecmp(v, r->name_of(k))) {
                *int_at(p, r) = k;
                return 0;
            }
        names_list(r, list, sizeof list);
        return err_set(e, "%s %s: expected %s", flag, v, list);
    case RUNPARAM_NONE: return err_set(e, "%s: %s has no flag", flag, r->name);
    }
    return 0;
}

/* "default 64" and the like for --help: d's value of r; NULL where the help text says it or there is none. */
static const char *usage_default(const struct runparam *r, const struct runtime_params *d, char *buf, size_t cap)
{
    if (strstr(r->help, "default")) return NULL;
    switch (r->type) {
    case RUNPARAM_INT:
        if (cint_at(d, r) == 0 && (r->zero || (r->flags & RUNPARAM_AUTO_ZERO)))
            snprintf(buf, cap, r->zero ? "default: %s" : "default %s", r->zero ? r->zero : "auto");
        else snprintf(buf, cap, "default %d", (int)cint_at(d, r));
        return buf;
    case RUNPARAM_SIZE:
        if (csize_at(d, r) == RUNTIME_AUTO) snprintf(buf, cap, "default %s", r->auto_word);
        else snprintf(buf, cap, "default %llu bytes", (unsigned long long)csize_at(d, r));
        return buf;
    case RUNPARAM_NAMED:
        snprintf(buf, cap, "default %s", r->name_of(cint_at(d, r)) ? r->name_of(cint_at(d, r)) : "?");
        return buf;
    case RUNPARAM_BACKEND:
        if (!cstr_at(d, r)) return NULL;
        snprintf(buf, cap, "default %s", cstr_at(d, r));
        return buf;
    default: return NULL;
    }
}

void runparam_usage(FILE *out, const struct runtime_params *d, const char *const *only)
{
    for (int i = 0; i < runparam_count; i++) {
        const struct runparam *r = &runparam_table[i];
        if (!r->flag || !runparam_in(r, only)) continue;
        int short_alias = r->alias && r->alias[1] != '-';
        char left[64], def[96], help[512];
        snprintf(left, sizeof left, "%s%s%s%s%s", short_alias ? r->alias : "", short_alias ? ", " : "", r->flag,
                 r->metavar ? " " : "", r->metavar ? r->metavar : "");
        const char *text = r->help;
        if (r->type == RUNPARAM_NAMED || r->type == RUNPARAM_BACKEND) { /* the names this build takes */
            char list[256];
            if (r->type == RUNPARAM_NAMED) names_list(r, list, sizeof list);
            snprintf(help, sizeof help, "%s %s", r->help, r->type == RUNPARAM_BACKEND ? backend_list() : list);
            text = help;
        }
        genparam_usage_line(out, left, text, usage_default(r, d, def, sizeof def), short_alias ? NULL : r->alias);
    }
}

json_t *runparam_to_json(const struct runtime_params *p)
{
    json_t *o = json_object();
    for (int i = 0; o && i < runparam_count; i++) {
        const struct runparam *r = &runparam_table[i];
        json_t *v = NULL;
        switch (r->type) {
        case RUNPARAM_INT:
            v = (r->flags & RUNPARAM_AUTO_ZERO) && cint_at(p, r) == 0 ? json_string(r->auto_word)
                                                                       : json_integer(cint_at(p, r));
            break;
        case RUNPARAM_OFF: v = json_boolean(cint_at(p, r)); break;
        case RUNPARAM_SIZE:
            v = csize_at(p, r) == RUNTIME_AUTO ? json_string(r->auto_word) : json_integer((json_int_t)csize_at(p, r));
            break;
        case RUNPARAM_BACKEND: v = json_string(cstr_at(p, r) ? cstr_at(p, r) : "auto"); break;
        case RUNPARAM_NAMED: v = json_string(r->name_of(cint_at(p, r)) ? r->name_of(cint_at(p, r)) : "?"); break;
        case RUNPARAM_NONE: continue;
        }
        if (json_object_set_new(o, r->name, v)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

void runparam_to_engine(const struct runtime_params *p, struct engine_params *ep)
{
    for (int i = 0; i < runparam_count; i++) {
        const struct runparam *r = &runparam_table[i];
        const struct engine_param *er = engine_row(r);
        if (!er || ((r->flags & (RUNPARAM_ZERO_KEEPS | RUNPARAM_AUTO_ZERO)) && cint_at(p, r) == 0)) continue;
        engine_param_set(ep, er, cint_at(p, r));
    }
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

int runparam_check_table(struct err *e)
{
    for (int i = 0; i < runparam_count; i++) {
        const struct runparam *r = &runparam_table[i];
        const struct engine_param *er = engine_row(r);
        if ((r->flags & RUNPARAM_ENGINE) && !er)
            return err_set(e, "runparam: %s has no engine row of its name", r->name);
        if (r->type == RUNPARAM_NAMED && (!r->name_of || !r->name_of(0)))
            return err_set(e, "runparam: %s: a NAMED row without names", r->name);
        if (er && r->type == RUNPARAM_SIZE)
            return err_set(e, "runparam: %s: a size cannot be an engine field", r->name);
        if (r->type == RUNPARAM_INT && !er && (r->def < r->lo || r->def > r->hi) && !(r->def == 0 && r->zero))
            return err_set(e, "runparam: %s's default %d is outside [%d, %d]", r->name, (int)r->def, (int)r->lo,
                           (int)r->hi);
        if ((r->type == RUNPARAM_NONE) != !r->flag || (r->flag && !r->help))
            return err_set(e, "runparam: %s: a flag without help, or a NONE row with a flag", r->name);
        if ((r->type == RUNPARAM_SIZE || (r->flags & RUNPARAM_AUTO_ZERO)) && !r->auto_word)
            return err_set(e, "runparam: %s: an automatic value needs its auto_word", r->name);
        for (int k = 0; k < i; k++) {
            const struct runparam *q = &runparam_table[k];
            if (same(r->name, q->name) || same(r->flag, q->flag) || same(r->flag, q->alias) ||
                same(r->alias, q->flag) || same(r->alias, q->alias))
                return err_set(e, "runparam: rows %s and %s share a name or flag", q->name, r->name);
        }
    }
    return 0;
}
