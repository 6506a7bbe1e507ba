/* nightshift quantize — converts a GGUF model to another type (gguf/quantize, with gguf/qmix's rules).
 *
 *   nightshift quantize IN.gguf OUT.gguf TYPE [--pure] [--threads N]
 *
 * Prints on stdout what was done: the tensors per type before and after, and the sizes; on stderr the
 * tensors that fell back to another type because their rows are not whole blocks of the wanted one (the
 * first few of each kind by name, then a count), and progress when stderr is a terminal.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "gguf/quantize.h"
#include "util/clock.h"

#define QUANTIZE_NOTES_PER_KIND 3 /* fallback notes named per (wanted, used) pair; the rest are counted */

static void quantize_usage(FILE *out)
{
    fprintf(out,
            "usage: nightshift quantize IN.gguf OUT.gguf TYPE [--pure] [--threads N]\n"
            "\n"
            "Writes IN's model in another type: weight matrices are dequantized and quantized again (or copied\n"
            "when already in their type), norms and biases are copied, all metadata is kept (general.file_type\n"
            "updated). The K-quant mixes give some tensors more bits, as llama.cpp's do (output head Q6_K,\n"
            "attn_v and ffn_down in some layers); a tensor whose rows are not whole blocks of its type falls\n"
            "back to one that fits (noted on stderr). OUT is replaced atomically; it may not be IN.\n"
            "\n"
            "  TYPE           %s\n"
            "                 (f32 widens a quantized file, e.g. for comparisons)\n"
            "  --pure         every weight matrix in TYPE's base type: no mix (fallbacks still apply)\n"
            "  --threads N    threads converting rows (default: one per core)\n",
            qmix_names());
}

struct quantize_notes {
    struct {
        enum gguf_dtype wanted, used;
        uint64_t n;
    } kinds[16];
    int n_kinds;
    uint64_t n_unlisted; /* fallbacks of kinds beyond the table (never expected: few type pairs exist) */
    int progress;        /* 1: print progress on stderr (a terminal) */
};

static const char *quantize_tname(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti ? ti->name : "?";
}

static void quantize_on_fallback(void *user, const char *tensor, uint64_t ne0, enum gguf_dtype wanted,
                                 enum gguf_dtype used)
{
    struct quantize_notes *q = user;
    int k = 0;
    while (k < q->n_kinds && (q->kinds[k].wanted != wanted || q->kinds[k].used != used))
        k++;
    if (k == q->n_kinds) {
        if (k == (int)(sizeof q->kinds / sizeof q->kinds[0])) {
            q->n_unlisted++;
            return;
        }
        q->kinds[k].wanted = wanted;
        q->kinds[k].used = used;
        q->kinds[k].n = 0;
        q->n_kinds++;
    }
    if (q->kinds[k].n++ < QUANTIZE_NOTES_PER_KIND)
        fprintf(stderr, "note: %s: rows of %llu are not whole %u-element blocks of %s; written as %s\n", tensor,
                (unsigned long long)ne0, gguf_dtype_info((uint32_t)wanted)->block_size, quantize_tname(wanted),
                quantize_tname(used));
}

static void quantize_on_progress(void *user, uint64_t done, uint64_t total)
{
    struct quantize_notes *q = user;
    if (q->progress && total) fprintf(stderr, "\rconverting: %3.0f%%", 100.0 * (double)done / (double)total);
}

static double quantize_mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

static void quantize_print_report(const struct quantize_params *p, const struct quantize_report *r,
                                  const struct quantize_notes *notes, double seconds)
{
    for (int k = 0; k < notes->n_kinds; k++)
        if (notes->kinds[k].n > QUANTIZE_NOTES_PER_KIND)
            fprintf(stderr, "note: ... and %llu more tensors %s -> %s\n",
                    (unsigned long long)(notes->kinds[k].n - QUANTIZE_NOTES_PER_KIND),
                    quantize_tname(notes->kinds[k].wanted), quantize_tname(notes->kinds[k].used));
    printf("%s -> %s (%s%s)\n", p->in_path, p->out_path, p->type->name, p->pure ? ", pure" : "");
    printf("tensors: %llu: %llu converted, %llu copied as they are, %llu in a fallback type\n",
           (unsigned long long)r->n_tensors, (unsigned long long)r->n_converted, (unsigned long long)r->n_copied,
           (unsigned long long)r->n_fallback);
    printf("  %-6s %8s %8s\n", "type", "before", "after");
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++)
        if (r->in_types[t] || r->out_types[t])
            printf("  %-6s %8u %8u\n", quantize_tname((enum gguf_dtype)t), r->in_types[t], r->out_types[t]);
    printf("tensor data: %.2f MiB -> %.2f MiB; file: %.2f MiB -> %.2f MiB (%.1f%%) in %.1f s\n",
           quantize_mib(r->in_tensor_bytes), quantize_mib(r->out_tensor_bytes), quantize_mib(r->in_file_bytes),
           quantize_mib(r->out_file_bytes),
           r->in_file_bytes ? 100.0 * (double)r->out_file_bytes / (double)r->in_file_bytes : 0.0, seconds);
}

int cmd_quantize(int argc, char **argv)
{
    struct quantize_params p = {0};
    struct quantize_notes notes = {0};
    int32_t threads = 0;
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    const struct cli_opt opts[] = {
        {.flag = "--pure", .type = CLI_OPT_SET, .dst = &p.pure, .lo = 1},
        {.flag = "--threads", .alias = "-t", .type = CLI_OPT_INT32, .dst = &threads, .lo = 1, .hi = 1024},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            quantize_usage(stdout);
            return 0;
        }
        int r = cli_opts_parse("quantize", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) return 2;
        if (r == 1) continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("quantize", "unknown flag '%s' (see --help)", argv[i]);
            return 2;
        }
        if (n_pos == 3) {
            cli_error("quantize", "unexpected argument '%s': give IN.gguf OUT.gguf TYPE", argv[i]);
            return 2;
        }
        pos[n_pos++] = argv[i];
    }
    if (n_pos < 3) {
        cli_error("quantize", "give IN.gguf OUT.gguf TYPE");
        quantize_usage(stderr);
        return 2;
    }
    p.in_path = pos[0];
    p.out_path = pos[1];
    if (!(p.type = qmix_find(pos[2]))) {
        cli_error("quantize", "unknown type '%s' (types: %s)", pos[2], qmix_names());
        return 2;
    }
    p.threads = threads;
    p.on_fallback = quantize_on_fallback;
    p.on_progress = quantize_on_progress;
    p.user = &notes;
    notes.progress = isatty(STDERR_FILENO);
    struct quantize_report r;
    struct err e = {{0}};
    double t0 = clock_now();
    int rc = quantize_file(&p, &r, &e);
    if (notes.progress) fputc('\n', stderr);
    if (rc) {
        cli_error("quantize", "%s", e.msg);
        return 1;
    }
    quantize_print_report(&p, &r, &notes, clock_now() - t0);
    return fflush(stdout) == 0 ? 0 : 1;
}
