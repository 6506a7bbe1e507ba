/* nightshift generate — completes one prompt: one request through the same runtime and engine as `run`.
 *
 *   nightshift generate [-m MODEL] -p TEXT | -f FILE | --chat TEXT [-n N] [sampling flags] [--ids] [engine flags]
 *
 * Prints only the completion on stdout (no prompt echo; with --ids the completion's token ids,
 * space-separated, one final newline) and the backend, token counts and speeds on stderr. A newline is added
 * after the text only when stdout is a terminal (so that the shell prompt starts on a line of its own; a
 * pipe or file gets the completion byte for byte). --chat TEXT is one user message, rendered exactly as
 * `run` renders a chat line (jobs/ingest: the model's own template, else its family's, or --chat-template).
 * Special-token text in the prompt (e.g. "<|im_start|>") is parsed as those tokens unless --no-special.
 *
 * The request goes through engine_add / engine_step / engine_take on an engine with one sequence and,
 * unless --kv-memory is given, a KV pool of exactly the blocks this request needs; the prompt runs in
 * steps of up to --max-batch-tokens (also --batch) rows. The completion is the engine's result text (stop
 * strings cut it and are not printed), written once the request finishes. The KV cache defaults to f32.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "jobs/ingest.h"
#include "jobs/input.h"
#include "runtime/runtime.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

/* generate's defaults for the engine flags: f32 KV (the reference), one sequence */
static struct runtime_params gen_default_params(void)
{
    struct runtime_params p = runtime_default_params();
    p.kv_type = KV_TYPE_F32;
    p.max_seqs = 1;
    return p;
}

struct gen_opts {
    const char *prompt, *prompt_file, *chat, *chat_name;
    int32_t n_ctx;
    int no_bos, no_special, ids;
    struct gen_params gen;    /* the generation parameters (runtime/genparam), generate's defaults */
    struct runtime_params rp; /* the model path and the engine flags */
};

/* generate's defaults for the generation parameters: 128 tokens, greedy, seed 0 */
static struct gen_params gen_default_gen(void)
{
    struct gen_params g = genparam_defaults();
    g.max_tokens = 128;
    g.temperature = 0;
    g.has_seed = 1;
    g.seed = 0;
    return g;
}

/* The page: generate's own flags (opts), then the generation and engine flags with generate's defaults (what
 * o holds when help is asked for), each from its table. */
static void gen_usage(FILE *out, const struct cli_opt *opts, int n, const struct gen_opts *o)
{
    fprintf(out,
            "usage: nightshift generate [-m MODEL] (-p TEXT | -f FILE | --chat TEXT) [options]\n"
            "\n"
            "Completes one prompt; prints only the completion on stdout, statistics on stderr.\n"
            "A newline follows the text when stdout is a terminal.\n"
            "\n");
    cli_opts_usage(out, opts, n);
    fprintf(out, "Generation (as in run; -n is --max-tokens):\n");
    genparam_usage(out, &o->gen, NULL);
    fprintf(out, "Engine (--kv-memory auto: a pool of just what this request needs):\n");
    engine_flags_usage(out, &o->rp, NULL);
}

/* Returns 0 ok, 2 usage error (printed), 3 help printed. */
static int gen_parse(int argc, char **argv, struct gen_opts *o)
{
    o->gen = gen_default_gen();
    o->rp = gen_default_params();
    char chat_help[256];
    snprintf(chat_help, sizeof chat_help, "render --chat with nightshift's NAME renderer:\n%s\n"
             "(default: the model's own template)", chat_family_list());
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &o->rp.model_path, .metavar = "PATH",
         .help = "GGUF model"},
        {.flag = "--prompt", .alias = "-p", .type = CLI_OPT_STRING, .dst = &o->prompt, .metavar = "TEXT",
         .help = "prompt text"},
        {.flag = "--file", .alias = "-f", .type = CLI_OPT_STRING, .dst = &o->prompt_file, .metavar = "PATH",
         .help = "read the prompt from a file"},
        {.flag = "--chat", .type = CLI_OPT_STRING, .dst = &o->chat, .metavar = "TEXT",
         .help = "a chat message (role user), rendered with the model's chat template"},
        {.flag = "--chat-template", .type = CLI_OPT_STRING, .dst = &o->chat_name, .metavar = "NAME",
         .help = chat_help},
        {.flag = "--n-predict", .type = CLI_OPT_INT32, .dst = &o->gen.max_tokens, .lo = 1,
         .hi = GENPARAM_MAX_TOKENS_LIMIT, .help = "the same as --max-tokens"},
        {.flag = "--ctx", .alias = "-c", .type = CLI_OPT_INT32, .dst = &o->n_ctx, .lo = 1, .hi = 1 << 24,
         .help = "context length at most (default: the model's)"},
        {.flag = "--no-bos", .type = CLI_OPT_SET, .dst = &o->no_bos, .lo = 1,
         .help = "do not add BOS even when the model asks for it"},
        {.flag = "--no-special", .type = CLI_OPT_SET, .dst = &o->no_special, .lo = 1,
         .help = "treat special-token text in the prompt as plain text"},
        {.flag = "--ids", .type = CLI_OPT_SET, .dst = &o->ids, .lo = 1,
         .help = "print completion token ids instead of text"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (!o->rp.model_path) o->rp.model_path = cli_default_model(); /* shown as -m's default */
            gen_usage(stdout, opts, n_opts, o);
            return 3;
        }
        int r = engine_flags_parse(&o->rp, "generate", argc, argv, &i);
        if (!r) r = cli_opts_parse_gen("generate", &o->gen, argc, argv, &i);
        if (!r) r = cli_opts_parse("generate", opts, n_opts, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cli_error("generate", "unknown option '%s' (see --help)", a);
            return 2;
        }
    }
    struct err e;
    if (genparam_check(&o->gen, &e)) {
        cli_error("generate", "%s", e.msg);
        return 2;
    }
    if (o->gen.n != 1) {
        cli_error("generate", "--completions %d: generate makes one completion (run makes several per request)",
                  o->gen.n);
        return 2;
    }
    if (!!o->prompt + !!o->prompt_file + !!o->chat != 1) {
        cli_error("generate", "give exactly one of -p TEXT, -f FILE or --chat TEXT (see --help)");
        return 2;
    }
    enum chat_family f;
    if (o->chat_name && chat_family_parse(o->chat_name, &f)) {
        cli_error("generate", "--chat-template %s: expected one of %s", o->chat_name, chat_family_list());
        return 2;
    }
    if (!o->rp.model_path) o->rp.model_path = cli_default_model();
    return 0;
}

/* The prompt text: -p's (or --chat's), or -f's file read into *buf (caller frees). NULL after printing an
 * error. */
static const char *gen_read_prompt(const struct gen_opts *o, char **buf, size_t *len)
{
    *buf = NULL;
    if (!o->prompt_file) {
        const char *p = o->chat ? o->chat : o->prompt;
        *len = strlen(p);
        return p;
    }
    FILE *pf = fopen(o->prompt_file, "rb");
    if (!pf) {
        cli_error("generate", "cannot read prompt file %s: %s", o->prompt_file, strerror(errno));
        return NULL;
    }
    *buf = cli_read_all(pf, len);
    fclose(pf);
    if (!*buf) cli_error("generate", "cannot read prompt file %s", o->prompt_file);
    return *buf;
}

/* --chat: the message rendered and tokenized as run does a chat line (ingest_prompt); 0 ok, else printed. */
static int gen_tokenize_chat(const struct gen_opts *o, const struct runtime *rt, int32_t **ids, size_t *n_ids)
{
    struct job_model m;
    memset(&m, 0, sizeof m);
    m.hp = &rt->model->hp;
    m.vocab = rt->vocab;
    jinja_template *owned = NULL;
    cli_model_chat(o->chat_name, rt->gf, &owned, &m);
    struct input_msg msg = {"user", (char *)o->chat};
    struct input_item it;
    memset(&it, 0, sizeof it);
    it.kind = INPUT_KIND_CHAT;
    it.msgs = &msg;
    it.n_msgs = 1;
    const char *code = NULL;
    char why[512];
    struct err e;
    int32_t n = 0;
    int rc = ingest_prompt(&m, 1, &it, ids, &n, NULL, &code, why, sizeof why, &e);
    jinja_free(owned);
    *n_ids = (size_t)n;
    if (rc > 0) cli_error("generate", "--chat: %s", why);
    if (rc < 0) cli_error("generate", "--chat: %s", e.msg);
    return rc ? -1 : 0;
}

/* Tokenizes the prompt and checks it and -n against the context; 0 ok, else printed. */
static int gen_tokenize(const struct gen_opts *o, const struct runtime *rt, const char *prompt, size_t prompt_len,
                        int32_t **ids, size_t *n_ids)
{
    struct err e;
    const tok_vocab *v = rt->vocab;
    const struct model_hparams *hp = &rt->model->hp;
    int add_bos = !o->no_bos && tok_add_bos(v) && tok_bos(v) >= 0;
    if (o->chat) {
        if (gen_tokenize_chat(o, rt, ids, n_ids)) return -1;
    } else if (tok_encode(v, prompt, prompt_len, add_bos, !o->no_special, ids, n_ids, &e)) {
        cli_error("generate", "cannot tokenize the prompt: %s", e.msg);
        return -1;
    }
    if (*n_ids == 0) {
        cli_error("generate", "the prompt is empty (no tokens)");
        return -1;
    }
    long n_ctx = o->n_ctx > 0 ? o->n_ctx : hp->n_ctx_train;
    if (n_ctx > hp->n_ctx_train) {
        cli_error("generate", "-c %ld exceeds the model's context length of %d tokens", n_ctx, (int)hp->n_ctx_train);
        return -1;
    }
    if ((long)*n_ids + o->gen.max_tokens > n_ctx) {
        cli_error("generate", "the prompt (%zu tokens) plus -n %ld tokens exceeds the context of %ld tokens", *n_ids,
                  (long)o->gen.max_tokens, n_ctx);
        return -1;
    }
    return 0;
}

/* Opens the backend and an engine whose pool holds this one request (or --kv-memory); 0 ok, else printed. */
static int gen_open_engine(struct runtime *rt, int64_t n_total, struct err *e)
{
    if (runtime_open_backend(rt, e)) return -1;
    uint64_t kv_memory = rt->params.kv_memory;
    if (kv_memory == RUNTIME_AUTO) {
        int64_t blocks = (n_total + rt->ep.kv_block - 1) / rt->ep.kv_block;
        kv_memory =
            (uint64_t)blocks * (uint64_t)rt->ep.kv_block * model_kv_bytes_per_token(&rt->model->hp, rt->ep.kv_type);
    }
    if (runtime_plan_kv(rt, kv_memory, UINT64_MAX, e)) return -1;
    return runtime_new_engine(rt, &rt->ep, &rt->eng, e);
}

/* Runs the one request to its end; 0 with the result in *res, else the engine's error in e. */
static int gen_run(engine *eng, const struct engine_request *r, struct engine_result *res, struct err *e)
{
    if (engine_add(eng, r, e)) return -1;
    while (engine_has_work(eng))
        if (engine_step(eng, e)) return -1;
    if (!engine_take(eng, res)) return err_set(e, "the engine finished without a result (bug)");
    return 0;
}

/* Prints the completion (stdout) and the statistics (stderr). */
static void gen_print(const struct gen_opts *o, const struct runtime *rt, const struct engine_result *res, double t0)
{
    /* the end-of-generation token that stopped it is not part of the completion */
    int32_t n_gen = res->n_tokens;
    if (res->finish == ENGINE_FINISH_STOP && !o->gen.ignore_eos && n_gen > 0 &&
        tok_is_eog(rt->vocab, res->tokens[n_gen - 1]))
        n_gen--;
    if (o->ids) {
        for (int32_t i = 0; i < n_gen; i++) printf(i ? " %d" : "%d", (int)res->tokens[i]);
        printf("\n");
    } else {
        fwrite(res->text, 1, res->text_len, stdout);
        if (isatty(STDOUT_FILENO) && (res->text_len == 0 || res->text[res->text_len - 1] != '\n')) printf("\n");
    }
    fflush(stdout);
    double t1 = res->t_first_token > 0 ? res->t_first_token : res->t_finished, t2 = res->t_finished;
    int32_t n_decode = n_gen > 0 ? n_gen - 1 : 0; /* the first token comes from the prefill's logits */
    char desc[256];
    runtime_describe(rt, desc, sizeof desc);
    fprintf(stderr, "generate: %s\n", desc);
    fprintf(stderr, "generate: prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens, decode %.2f tok/s\n",
            (int)res->n_prompt, t1 - t0, (t1 - t0) > 0 ? res->n_prompt / (t1 - t0) : 0.0, (int)n_gen,
            (t2 - t1) > 0 && n_decode > 0 ? n_decode / (t2 - t1) : 0.0);
    if (rt->ep.lookup > 0 && rt->eng) {
        struct engine_stats st;
        engine_get_stats(rt->eng, &st);
        fprintf(stderr, "generate: lookup %d: %lld of %lld draft tokens accepted (%.0f%%), %.2f tokens per step\n",
                (int)rt->ep.lookup, (long long)st.draft_accepted, (long long)st.draft_tokens,
                st.draft_tokens ? 100.0 * (double)st.draft_accepted / (double)st.draft_tokens : 0.0,
                st.seq_steps ? (double)st.gen_tokens / (double)st.seq_steps : 0.0);
    }
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts o = {0};
    int prc = gen_parse(argc, argv, &o);
    if (prc) {
        genparam_free(&o.gen);
        return prc == 3 ? 0 : 2;
    }

    int rc = 1;
    struct err e = {{0}};
    struct runtime rt;
    struct engine_result res = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0, prompt_len = 0;
    char *prompt_buf = NULL;
    memset(&rt, 0, sizeof rt);

    const char *prompt = gen_read_prompt(&o, &prompt_buf, &prompt_len);
    if (!prompt) goto done;
    if (runtime_open_model(&o.rp, &rt, &e)) {
        cli_error("generate", "%s: %s", o.rp.model_path, e.msg);
        goto done;
    }
    if (gen_tokenize(&o, &rt, prompt, prompt_len, &ids, &n_ids)) goto done;
    if (gen_open_engine(&rt, (int64_t)n_ids + o.gen.max_tokens, &e)) {
        cli_error("generate", "%s", e.msg);
        goto done;
    }
    struct engine_request r = {
        .id = 0,
        .prompt = ids,
        .n_prompt = (int32_t)n_ids,
        .max_tokens = o.gen.max_tokens,
        .stop = (const char *const *)o.gen.stop,
        .n_stop = o.gen.n_stop,
        .ignore_eos = o.gen.ignore_eos,
        .constraint = o.gen.constraint.kind != CONSTRAINT_NONE ? &o.gen.constraint : NULL,
    };
    genparam_to_sampler(&o.gen, o.gen.seed, &r.sampling);
    double t0 = clock_now();
    if (gen_run(rt.eng, &r, &res, &e)) {
        cli_error("generate", "%s", e.msg);
        goto done;
    }
    if (res.finish == ENGINE_FINISH_ERROR) {
        cli_error("generate", "%s", res.error ? res.error : "the request failed");
        goto done;
    }
    gen_print(&o, &rt, &res, t0);
    rc = 0;
done:
    genparam_free(&o.gen);
    engine_result_free(&res);
    free(ids);
    free(prompt_buf);
    runtime_close(&rt);
    return rc;
}
