/* engine_flags — see engine_flags.h. */
#include "cli/engine_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/sysmem.h"
#include "util/threads.h"

void engine_flags_defaults(struct engine_flags *f)
{
    memset(f, 0, sizeof *f);
    f->kv_memory = "auto";
    f->kv_type = KV_TYPE_F16;
    f->kv_block = 16;
    f->max_seqs = 64;
    f->prefix_cache = 1;
}

void engine_flags_usage(FILE *out)
{
    fprintf(out,
            "  --backend NAME          cpu (default: best available)\n"
            "  -t, --threads N         CPU threads (default: one per core)\n"
            "  --kv-memory SIZE|auto   KV cache budget, e.g. 512M, 2G (default auto: what the machine has left\n"
            "                          after weights and headroom, capped at what --max-seqs can use)\n"
            "  --headroom SIZE         memory left to the OS by auto (default 20%% of RAM, at least 2G)\n"
            "  --kv-type T             f32, f16, q8_0 (default f16)\n"
            "  --kv-block N            tokens per KV block, a power of two (default 16)\n"
            "  --max-batch-tokens N    rows per engine step (default: backend's, cpu 512)\n"
            "  --max-seqs N            sequences running at once (default 64)\n"
            "  --no-prefix-cache       do not reuse KV of shared prompt prefixes\n");
}

int engine_flags_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int engine_flags_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_error(cmd, "%s expects a non-negative integer, got '%s'", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int engine_flags_parse(struct engine_flags *f, const char *cmd, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-prefix-cache")) {
        f->prefix_cache = 0;
        return 1;
    }
    static const char *const with_value[] = {"--backend",  "--threads",          "-t",          "--kv-memory",
                                             "--headroom", "--kv-type",          "--kv-block",  "--max-batch-tokens",
                                             "--max-seqs", NULL};
    int known = 0;
    for (const char *const *w = with_value; *w; w++) known |= !strcmp(a, *w);
    if (!known) return 0;
    if (*i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", a);
        return -1;
    }
    const char *v = argv[++*i];
    long n;
    if (!strcmp(a, "--backend")) {
        if (strcmp(v, "cpu")) {
            cli_error(cmd, "--backend %s: this build has only the cpu backend", v);
            return -1;
        }
        f->backend = v;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 1024, &n)) return -1;
        f->threads = (int)n;
    } else if (!strcmp(a, "--kv-memory") || !strcmp(a, "--headroom")) {
        uint64_t bytes;
        struct err e;
        if (strcmp(v, "auto") && sysmem_parse_size(v, &bytes, &e)) {
            cli_error(cmd, "%s: %s", a, e.msg);
            return -1;
        }
        if (!strcmp(a, "--kv-memory")) f->kv_memory = v;
        else f->headroom = v;
    } else if (!strcmp(a, "--kv-type")) {
        if (model_kv_type_parse(v, &f->kv_type)) {
            cli_error(cmd, "--kv-type %s: expected f32, f16 or q8_0", v);
            return -1;
        }
    } else if (!strcmp(a, "--kv-block")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 1024, &n)) return -1;
        if (n & (n - 1)) {
            cli_error(cmd, "--kv-block %ld: must be a power of two", n);
            return -1;
        }
        f->kv_block = (int32_t)n;
    } else if (!strcmp(a, "--max-batch-tokens")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 65536, &n)) return -1;
        f->max_batch_tokens = (int32_t)n;
    } else if (!strcmp(a, "--max-seqs")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 4096, &n)) return -1;
        f->max_seqs = (int32_t)n;
    }
    return 1;
}

json_t *engine_flags_json(const struct engine_flags *f)
{
    return json_pack("{s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:b}", "backend", f->backend ? f->backend : "auto",
                     "threads", f->threads, "kv_memory", f->kv_memory, "headroom", f->headroom ? f->headroom : "default",
                     "kv_type", model_kv_type_name(f->kv_type), "kv_block", f->kv_block, "max_batch_tokens",
                     f->max_batch_tokens, "max_seqs", f->max_seqs, "prefix_cache", f->prefix_cache);
}

int engine_stack_open_model(const char *model_path, struct engine_stack *s, struct err *e)
{
    memset(s, 0, sizeof *s);
    if (gguf_open(model_path, &s->gf, e)) return -1;
    if (model_load(s->gf, &s->model, e)) return -1;
    if (tok_load(s->gf, &s->vocab, e)) return -1;
    return 0;
}

int engine_stack_open_backend(const struct engine_flags *f, struct engine_stack *s, struct err *e)
{
    s->threads = f->threads > 0 ? f->threads : threads_online_cores();
    if (backend_cpu_init(&s->backend, s->threads, e)) return -1;
    s->backend_name = s->backend.ops->name;
    if (s->backend.ops->load(s->backend.ctx, s->model, e)) return -1;

    s->ep = engine_default_params();
    s->ep.kv_type = f->kv_type;
    s->ep.kv_block = f->kv_block;
    s->ep.max_seqs = f->max_seqs;
    s->ep.prefix_cache = f->prefix_cache;
    s->ep.max_batch_tokens = f->max_batch_tokens > 0 ? f->max_batch_tokens : engine_default_max_batch_tokens(s->backend_name);
    return 0;
}

int engine_stack_auto_budget(const struct engine_stack *s, const struct engine_flags *f, struct engine_stack_budget *a,
                             struct err *e)
{
    struct sysmem_info mi;
    if (sysmem_read(&mi, e)) return -1;
    uint64_t headroom = UINT64_MAX;
    if (f->headroom && sysmem_parse_size(f->headroom, &headroom, e)) return -1;
    a->available = sysmem_available(&mi);
    a->weights = model_weight_bytes(s->model);
    a->scratch = s->backend.ops->scratch_bytes ? s->backend.ops->scratch_bytes(s->backend.ctx, s->ep.max_batch_tokens) : 0;
    a->headroom = headroom == UINT64_MAX ? sysmem_default_headroom(&mi) : headroom;
    a->kv_bytes = sysmem_auto_kv_bytes(&mi, a->weights, a->scratch, headroom);
    return 0;
}

int engine_stack_open(const char *model_path, const struct engine_flags *f, struct engine_stack *s, struct err *e)
{
    if (engine_stack_open_model(model_path, s, e) || engine_stack_open_backend(f, s, e)) goto fail;
    const struct model_hparams *hp = &s->model->hp;
    if (!strcmp(f->kv_memory, "auto")) {
        struct engine_stack_budget a;
        if (engine_stack_auto_budget(s, f, &a, e)) goto fail;
        s->kv_bytes = a.kv_bytes;
        /* more than every running sequence at full context, twice over (prefix cache), is never used */
        uint64_t per_token = model_kv_bytes_per_token(hp, f->kv_type);
        uint64_t ctx = hp->n_ctx_train > 0 ? (uint64_t)hp->n_ctx_train : 4096;
        uint64_t useful = per_token * ctx * (uint64_t)s->ep.max_seqs * 2;
        if (useful && s->kv_bytes > useful) s->kv_bytes = useful;
        if (s->kv_bytes == 0) {
            err_set(e, "--kv-memory auto: no memory is left for the KV cache after the weights and the headroom; "
                       "pass --kv-memory SIZE or a smaller --headroom");
            goto fail;
        }
    } else if (sysmem_parse_size(f->kv_memory, &s->kv_bytes, e)) {
        goto fail;
    }
    s->ep.kv_blocks = engine_kv_blocks_for_budget(hp, f->kv_type, f->kv_block, s->kv_bytes);
    if (engine_init(s->model, &s->backend, s->vocab, &s->ep, &s->eng, e)) goto fail;
    return 0;
fail:
    engine_stack_close(s);
    return -1;
}

void engine_stack_close(struct engine_stack *s)
{
    engine_free(s->eng);
    if (s->backend.ops) backend_free(&s->backend);
    tok_free(s->vocab);
    model_free(s->model);
    gguf_close(s->gf);
    memset(s, 0, sizeof *s);
}
