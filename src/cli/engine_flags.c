/* engine_flags — see engine_flags.h. */
#include "cli/engine_flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/sysmem.h"

void engine_flags_usage(FILE *out, const struct runtime_params *d)
{
    fprintf(out,
            "  --backend NAME          auto (default: the best available) or one of: %s\n"
            "  --device N              GPU ordinal (default 0)\n"
            "  --gpu-weights W         auto, bf16 or fp8: a GPU's weight matrices (default auto: the file's own\n"
            "                          precision when it fits with room for the KV cache, else fp8)\n"
            "  -t, --threads N         CPU threads (default: one per core)\n"
            "  --kv-memory SIZE|auto   KV cache budget, e.g. 512M, 2G (default auto: what the backend's memory has\n"
            "                          left after weights and headroom, capped at what --max-seqs can use; a SIZE\n"
            "                          larger than what is left is capped there, with a warning)\n"
            "  --headroom SIZE         memory left unused by the KV cache (default: the backend's; cpu 20%% of RAM,\n"
            "                          at least 2G)\n"
            "  --kv-type T             f32, f16, q8_0 (default %s)\n"
            "  --kv-block N            tokens per KV block, a power of two (default %d)\n"
            "  --max-batch-tokens N    rows per engine step (default: the backend's, cpu 512)\n"
            "  --max-seqs N|auto       sequences running at once (default auto: the backend's knee, fewer when\n"
            "                          their KV at the backlog's lengths would not fit the pool)\n"
            "  --no-prefix-cache       do not reuse KV of shared prompt prefixes\n"
            "  --lookup N              prompt-lookup decoding: verify up to N draft tokens copied from the prompt\n"
            "                          and output per sequence and step; same results, fewer steps (0 = off,\n"
            "                          default %d)\n"
            "  --lookup-always         verify all N draft tokens proposed, however often they are rejected and\n"
            "                          however busy the step (measuring acceptance; default: as many as pay off)\n",
            backend_list(), model_kv_type_name(d->kv_type), (int)d->kv_block, (int)d->lookup);
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

/* The value v of flag a (one that takes a value); 0 ok, -1 printed. */
static int engine_flags_value(struct runtime_params *p, const char *cmd, const char *a, const char *v)
{
    long n;
    struct err e;
    if (!strcmp(a, "--backend")) {
        if (backend_check_name(v, &e)) {
            cli_error(cmd, "%s", e.msg);
            return -1;
        }
        p->backend = v;
    } else if (!strcmp(a, "--device")) {
        if (engine_flags_parse_long(cmd, a, v, 0, 1023, &n)) return -1;
        p->device = (int)n;
    } else if (!strcmp(a, "--gpu-weights")) {
        if (backend_weights_parse(v, &p->gpu_weights)) {
            cli_error(cmd, "--gpu-weights %s: expected auto, bf16 or fp8", v);
            return -1;
        }
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 1024, &n)) return -1;
        p->threads = (int)n;
    } else if (!strcmp(a, "--kv-memory") || !strcmp(a, "--headroom")) {
        uint64_t bytes = RUNTIME_AUTO;
        if (strcmp(v, "auto") && sysmem_parse_size(v, &bytes, &e)) {
            cli_error(cmd, "%s: %s", a, e.msg);
            return -1;
        }
        if (!strcmp(a, "--kv-memory")) p->kv_memory = bytes;
        else p->headroom = bytes;
    } else if (!strcmp(a, "--kv-type")) {
        if (model_kv_type_parse(v, &p->kv_type)) {
            cli_error(cmd, "--kv-type %s: expected f32, f16 or q8_0", v);
            return -1;
        }
    } else if (!strcmp(a, "--kv-block")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 1024, &n)) return -1;
        if (n & (n - 1)) {
            cli_error(cmd, "--kv-block %ld: must be a power of two", n);
            return -1;
        }
        p->kv_block = (int32_t)n;
    } else if (!strcmp(a, "--max-batch-tokens")) {
        if (engine_flags_parse_long(cmd, a, v, 1, 65536, &n)) return -1;
        p->max_batch_tokens = (int32_t)n;
    } else if (!strcmp(a, "--max-seqs")) {
        if (!strcmp(v, "auto")) n = RUNTIME_MAX_SEQS_AUTO;
        else if (engine_flags_parse_long(cmd, a, v, 1, 4096, &n)) return -1;
        p->max_seqs = (int32_t)n;
    } else if (!strcmp(a, "--lookup")) {
        if (engine_flags_parse_long(cmd, a, v, 0, ENGINE_MAX_LOOKUP, &n)) return -1;
        p->lookup = (int32_t)n;
    }
    return 0;
}

int engine_flags_parse(struct runtime_params *p, const char *cmd, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *eq = strchr(a, '='), *v = NULL;
    char name[32];
    if (eq && a[1] == '-' && (size_t)(eq - a) < sizeof name) { /* "--flag=value" */
        snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
        a = name;
        v = eq + 1;
    }
    if (!strcmp(a, "--no-prefix-cache")) {
        if (v) {
            cli_error(cmd, "%s takes no value", a);
            return -1;
        }
        p->prefix_cache = 0;
        return 1;
    }
    if (!strcmp(a, "--lookup-always")) {
        p->lookup_adaptive = 0;
        return 1;
    }
    static const char *const with_value[] = {"--backend",  "--device",   "--gpu-weights", "--threads",  "-t",
                                             "--kv-memory", "--headroom", "--kv-type",  "--kv-block",
                                             "--max-batch-tokens", "--max-seqs", "--lookup", NULL};
    int known = 0;
    for (const char *const *w = with_value; *w; w++) known |= !strcmp(a, *w);
    if (!known) return 0;
    if (!v && *i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", a);
        return -1;
    }
    if (!v) v = argv[++*i];
    return engine_flags_value(p, cmd, a, v) ? -1 : 1;
}

/* A size in bytes, or the string `none` for RUNTIME_AUTO. */
static json_t *engine_flags_size(uint64_t bytes, const char *none)
{
    return bytes == RUNTIME_AUTO ? json_string(none) : json_integer((json_int_t)bytes);
}

json_t *engine_flags_json(const struct runtime_params *p)
{
    json_t *max_seqs = p->max_seqs == RUNTIME_MAX_SEQS_AUTO ? json_string("auto") : json_integer(p->max_seqs);
    return json_pack("{s:s, s:i, s:s, s:i, s:o, s:o, s:s, s:i, s:i, s:o, s:b, s:i, s:b}", "backend",
                     p->backend ? p->backend : "auto", "device", p->device, "gpu_weights",
                     backend_weights_name(p->gpu_weights), "threads", p->threads, "kv_memory",
                     engine_flags_size(p->kv_memory, "auto"),
                     "headroom", engine_flags_size(p->headroom, "default"), "kv_type", model_kv_type_name(p->kv_type),
                     "kv_block", p->kv_block, "max_batch_tokens", p->max_batch_tokens, "max_seqs", max_seqs,
                     "prefix_cache", p->prefix_cache, "lookup", p->lookup, "lookup_adaptive", p->lookup_adaptive);
}
