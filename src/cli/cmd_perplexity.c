/* nightshift perplexity — a model's perplexity on a text file (runtime/ppl: llama.cpp's windows, so the
 * numbers compare with its perplexity tool's).
 *
 *   nightshift perplexity [-m MODEL] (-f TEXT | TEXT) [--ctx N] [--stride S] [--max-batch-tokens N] [--backend NAME]
 *                         [--threads N] [--kv-type T] [--no-bos] [--json]
 *
 * The whole file is one text, tokenized as it is (BOS first when the model adds one; special-token text is
 * plain text). Opens the model and backend through the runtime (runtime_open_model, runtime_open_backend)
 * and scores through the engine (runtime/ppl: each window a scoring request, batched by the engine's step).
 *
 * stdout: a line saying what is scored, the running estimate after each window ("[1]12.3456,[2]..."),
 * the token counts and speed, and last "Final estimate: PPL = 18.2998 +/- 0.85947" (llama.cpp's form).
 * With --json stdout holds only one JSON object and the running estimates go to stderr.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "runtime/ppl.h"
#include "runtime/runtime.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

struct ppl_opts {
    const char *model, *text_path;
    int32_t ctx, stride;
    int no_bos, json;
    struct runtime_params rp; /* the engine flags perplexity takes (ppl_engine_flags) */
};

/* The engine flags (runtime/runparam) that mean something to a perplexity run. */
static const char *const ppl_engine_flags[] = {"backend",  "device",           "gpu_weights",
                                                "threads",  "kv_type",          "max_batch_tokens", NULL};

static void ppl_usage(FILE *out, const struct cli_opt *opts, int n, const struct runtime_params *rp)
{
    fprintf(out,
            "usage: nightshift perplexity [-m MODEL] (-f TEXT | TEXT) [options]\n"
            "\n"
            "Perplexity of MODEL on a text file, in windows of --ctx tokens as llama.cpp's perplexity tool\n"
            "counts it: side-by-side windows, each scoring the tokens of its second half (its first half is\n"
            "context only), with BOS at each window's start when the model adds BOS. Prints the running\n"
            "estimate per window and 'Final estimate: PPL = X +/- Y' (Y: the standard error).\n"
            "\n");
    cli_opts_usage(out, opts, n);
    fprintf(out, "Engine:\n");
    engine_flags_usage(out, rp, ppl_engine_flags);
}

/* Returns 0 ok, 2 usage error (printed), 3 help printed. */
static int ppl_parse(int argc, char **argv, struct ppl_opts *o)
{
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &o->model, .metavar = "PATH",
         .help = "GGUF model"},
        {.flag = "--file", .alias = "-f", .type = CLI_OPT_STRING, .dst = &o->text_path, .metavar = "PATH",
         .help = "the text (or give it as the one positional argument)"},
        {.flag = "--ctx", .alias = "-c", .type = CLI_OPT_INT32, .dst = &o->ctx, .lo = 3, .hi = 1 << 24,
         .help = "tokens per window (default 512, or the model's context if shorter)"},
        {.flag = "--stride", .type = CLI_OPT_INT32, .dst = &o->stride, .lo = 1, .hi = 1 << 24, .metavar = "S",
         .help = "windows every S tokens instead, each scoring its last S tokens: every token\n"
                 "after the first window's first ctx - S is scored once (1 <= S < ctx; default off)"},
        {.flag = "--no-bos", .type = CLI_OPT_SET, .dst = &o->no_bos, .lo = 1,
         .help = "do not put BOS at each window's start even when the model adds BOS"},
        {.flag = "--json", .type = CLI_OPT_SET, .dst = &o->json, .lo = 1,
         .help = "print one JSON object on stdout (running estimates on stderr)"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            if (!o->model) o->model = cli_default_model(); /* shown as -m's default */
            ppl_usage(stdout, opts, n_opts, &o->rp);
            return 3;
        }
        int r = engine_flags_parse_only(&o->rp, "perplexity", ppl_engine_flags, argc, argv, &i);
        if (!r) r = cli_opts_parse("perplexity", opts, n_opts, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 1) continue;
        if ((argv[i][0] == '-' && argv[i][1] != '\0') || o->text_path) {
            cli_error("perplexity", "unexpected argument '%s' (see --help)", argv[i]);
            return 2;
        }
        o->text_path = argv[i];
    }
    if (!o->text_path) {
        cli_error("perplexity", "give the text file (-f TEXT)");
        return 2;
    }
    return 0;
}

struct ppl_print {
    FILE *out;
    int32_t n_windows;
};

static void ppl_on_window(void *user, int32_t window, const struct ppl_stats *s)
{
    struct ppl_print *pp = user;
    fprintf(pp->out, "[%d]%.4f%s", (int)window + 1, ppl_stats_ppl(s), window + 1 == pp->n_windows ? "\n" : ",");
    fflush(pp->out);
}

/* The text's tokens (BOS first when the model adds one and --no-bos is not given). */
static int ppl_tokenize(const struct ppl_opts *o, const tok_vocab *v, int32_t **ids, size_t *n, struct err *e)
{
    FILE *fp = fopen(o->text_path, "rb");
    if (!fp) return err_set(e, "%s: cannot open", o->text_path);
    size_t len = 0;
    char *text = cli_read_all(fp, &len);
    fclose(fp);
    if (!text) return err_set(e, "%s: cannot read", o->text_path);
    int rc = tok_encode(v, text, len, tok_add_bos(v) && !o->no_bos, 0, ids, n, e);
    free(text);
    return rc ? err_prefix(e, "%s", o->text_path) : 0;
}

static void ppl_print_json(const struct ppl_opts *o, const struct runtime *rt, const struct ppl_params *p,
                           const struct ppl_plan *plan, size_t n_tokens, const struct ppl_stats *s, double seconds)
{
    const double rows = (double)plan->n_windows * (double)(p->ctx - 1);
    json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "model",
                          o->model, "text", o->text_path, "backend", rt->backend_name, "ctx", (int)p->ctx, "stride",
                          (int)p->stride, "windows", (int)plan->n_windows, "bos", p->bos >= 0, "tokens",
                          (json_int_t)n_tokens, "tokens_scored", (json_int_t)s->n, "mean_nll",
                          s->sum / (double)s->n, "ppl", ppl_stats_ppl(s), "ppl_error", ppl_stats_err(s), "seconds",
                          seconds, "tokens_per_second", seconds > 0 ? rows / seconds : 0.0);
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(j);
}

/* Opens the stack, tokenizes, scores and prints. Returns the exit status. */
static int ppl_main(struct ppl_opts *o)
{
    struct runtime_params rp = o->rp;
    rp.model_path = o->model;
    struct runtime rt;
    struct err e = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    if (runtime_open_model(&rp, &rt, &e) || runtime_open_backend(&rt, &e) || ppl_tokenize(o, rt.vocab, &ids, &n, &e))
        goto done;
    struct ppl_params p = ppl_default_params();
    const int32_t n_ctx = rt.model->hp.n_ctx_train;
    p.ctx = o->ctx ? o->ctx : (n_ctx > 0 && n_ctx < p.ctx ? n_ctx : p.ctx);
    p.stride = o->stride;
    p.bos = tok_add_bos(rt.vocab) && !o->no_bos ? tok_bos(rt.vocab) : -1;
    p.max_batch_tokens = rt.ep.max_batch_tokens; /* --max-batch-tokens, else the backend's */
    p.kv_type = rt.ep.kv_type;
    struct ppl_plan plan;
    if (ppl_plan(&p, (int64_t)n, n_ctx, &plan, &e)) goto done;
    FILE *out = o->json ? stderr : stdout;
    fprintf(out, "perplexity: %s on %s (%s backend): %zu tokens, %d windows of %d%s, scoring %d tokens of each\n",
            o->model, o->text_path, rt.backend_name, n, (int)plan.n_windows, (int)p.ctx,
            p.stride ? " every --stride tokens" : "", (int)plan.n_scored);
    struct ppl_print pp = {out, plan.n_windows};
    struct ppl_stats s;
    double t0 = clock_now();
    if (ppl_run(&rt.backend, rt.model, ids, (int64_t)n, &p, ppl_on_window, &pp, &s, NULL, &e)) goto done;
    double seconds = clock_now() - t0, rows = (double)plan.n_windows * (double)(p.ctx - 1);
    fprintf(out, "tokens scored: %lld; %.0f evaluated in %.2f s (%.1f tokens/s)\n", (long long)s.n, rows, seconds,
            seconds > 0 ? rows / seconds : 0.0);
    if (o->json) ppl_print_json(o, &rt, &p, &plan, n, &s, seconds);
    else printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl_stats_ppl(&s), ppl_stats_err(&s));
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    if (rc && e.msg[0]) cli_error("perplexity", "%s", e.msg);
    free(ids);
    runtime_close(&rt);
    return rc;
}

int cmd_perplexity(int argc, char **argv)
{
    struct ppl_opts o = {0};
    o.rp = runtime_default_params();
    int r = ppl_parse(argc, argv, &o);
    if (r) return r == 3 ? 0 : r;
    if (!o.model) o.model = cli_default_model();
    return ppl_main(&o);
}
