/* nightshift generate — completes one prompt with the CPU backend.
 *
 *   nightshift generate [-m MODEL] -p TEXT | -f FILE [-n N] [sampling flags] [--ids] ...
 *
 * Prints only the completion on stdout (no prompt echo, no added newline; with --ids the completion's
 * token ids, space-separated, one final newline) and the token counts and speeds on stderr. Special-token
 * text in the prompt (e.g. "<|im_start|>") is parsed as those tokens unless --no-special.
 *
 * Drives the backend the way the engine will, with one sequence: blocks 0..n-1 of 16 tokens, the prompt
 * in one step (in chunks of --batch rows when longer), only the last prompt row computing logits, then one
 * row per step. The completion text is the concatenation of each generated token's bytes as it follows
 * other text; stop strings (--stop) end it and are not printed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/engine_flags.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/clock.h"

#define GEN_KV_BLOCK 16
#define GEN_MAX_STOPS 16

static void gen_usage(FILE *out)
{
    fprintf(out,
            "usage: nightshift generate [-m MODEL] (-p TEXT | -f FILE) [options]\n"
            "\n"
            "Completes one prompt; prints only the completion on stdout, statistics on stderr.\n"
            "\n"
            "  -m, --model PATH        GGUF model (default: %s)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -f, --file PATH         read the prompt from a file\n"
            "  -n, --n-predict N       tokens to generate at most (default 128)\n"
            "  -c, --ctx N             context length (default: the model's context_length)\n"
            "      --temp T            temperature; <= 0 is greedy (default 0)\n"
            "      --top-k K           keep the K most likely tokens (default 0 = off)\n"
            "      --top-p P           nucleus sampling (default 1 = off)\n"
            "      --min-p P           drop tokens below P * the top probability (default 0 = off)\n"
            "      --repeat-penalty R  penalize the last --repeat-last-n tokens (default 1 = off)\n"
            "      --repeat-last-n N   window of the repeat penalty (default 64)\n"
            "      --presence-penalty P, --frequency-penalty P   OpenAI penalties (default 0)\n"
            "      --seed S            RNG seed (default 0)\n"
            "      --stop STR          stop string (repeatable, up to %d); not printed\n"
            "      --ignore-eos        do not stop at end-of-generation tokens\n"
            "      --no-bos            do not add BOS even when the model asks for it\n"
            "      --no-special        treat special-token text in the prompt as plain text\n"
            "      --ids               print completion token ids instead of text\n"
            "  -t, --threads N         CPU threads (default: one per core)\n"
            "      --kv-type T         KV cache type: f32, f16, q8_0 (default f32)\n"
            "      --batch N           prompt rows per step at most (default 512)\n"
            "  -h, --help              this help\n",
            cli_default_model(), GEN_MAX_STOPS);
}

#define parse_int(flag, s, lo, hi, out) engine_flags_parse_long("generate", flag, s, lo, hi, out)

static int gen_parse_float(const char *flag, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_error("generate", "%s expects a number, got '%s'", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

struct gen_opts {
    const char *model, *prompt, *prompt_file;
    long n_predict, n_ctx, n_threads, n_batch;
    int no_bos, no_special, ids, ignore_eos;
    enum kv_type kv_type;
    struct sampler_params sp;
    const char *stops[GEN_MAX_STOPS];
    int n_stops;
};

/* Returns 0 ok, 2 usage error, 3 help printed. */
static int gen_parse(int argc, char **argv, struct gen_opts *o)
{
    o->model = NULL;
    o->n_predict = 128;
    o->n_ctx = 0;
    o->n_threads = 0;
    o->n_batch = 512;
    o->kv_type = KV_TYPE_F32;
    o->sp = sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return 3;
        }
        int flag_only = !strcmp(a, "--no-bos") || !strcmp(a, "--no-special") || !strcmp(a, "--ids") ||
                        !strcmp(a, "--ignore-eos");
        if (flag_only) {
            if (!strcmp(a, "--no-bos")) o->no_bos = 1;
            else if (!strcmp(a, "--no-special")) o->no_special = 1;
            else if (!strcmp(a, "--ids")) o->ids = 1;
            else o->ignore_eos = 1;
            continue;
        }
        if (i + 1 >= argc) {
            cli_error("generate", "%s needs a value (or unknown option)", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->prompt_file = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) rc = parse_int(a, v, 0, 1L << 24, &o->n_predict);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) rc = parse_int(a, v, 1, 1L << 24, &o->n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = parse_int(a, v, 1, 1024, &o->n_threads);
        else if (!strcmp(a, "--batch")) rc = parse_int(a, v, 1, 1 << 16, &o->n_batch);
        else if (!strcmp(a, "--temp")) rc = gen_parse_float(a, v, &o->sp.temperature);
        else if (!strcmp(a, "--top-k")) {
            rc = parse_int(a, v, 0, 1L << 30, &n);
            o->sp.top_k = (int32_t)n;
        } else if (!strcmp(a, "--top-p")) rc = gen_parse_float(a, v, &o->sp.top_p);
        else if (!strcmp(a, "--min-p")) rc = gen_parse_float(a, v, &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty")) rc = gen_parse_float(a, v, &o->sp.repeat_penalty);
        else if (!strcmp(a, "--repeat-last-n")) {
            rc = parse_int(a, v, 0, 1L << 24, &n);
            o->sp.repeat_last_n = (int32_t)n;
        } else if (!strcmp(a, "--presence-penalty")) rc = gen_parse_float(a, v, &o->sp.presence_penalty);
        else if (!strcmp(a, "--frequency-penalty")) rc = gen_parse_float(a, v, &o->sp.frequency_penalty);
        else if (!strcmp(a, "--seed")) rc = engine_flags_parse_u64("generate", a, v, &o->sp.seed);
        else if (!strcmp(a, "--kv-type")) {
            if (model_kv_type_parse(v, &o->kv_type)) {
                cli_error("generate", "--kv-type must be f32, f16 or q8_0, got '%s'", v);
                return 2;
            }
        } else if (!strcmp(a, "--stop")) {
            if (o->n_stops == GEN_MAX_STOPS) {
                cli_error("generate", "at most %d --stop strings", GEN_MAX_STOPS);
                return 2;
            }
            o->stops[o->n_stops++] = v;
        } else {
            cli_error("generate", "unknown option '%s' (see --help)", a);
            return 2;
        }
        if (rc) return 2;
    }
    if (!o->prompt == !o->prompt_file) {
        cli_error("generate", "give exactly one of -p TEXT or -f FILE (see --help)");
        return 2;
    }
    if (!o->model) o->model = cli_default_model();
    return 0;
}

/* Appends bytes to a growing buffer. */
static int gen_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap * 2 : 256);
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return -1;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

/* One forward step of rows [start, start + n) of one sequence; logits of the last row when want_logits. */
static int gen_step(struct backend *be, const int32_t *tokens, int32_t start, int32_t n, const struct step_seq *sq,
                    int want_logits, float *logits, int32_t *pos, int32_t *seq, struct err *e)
{
    for (int32_t i = 0; i < n; i++) {
        pos[i] = start + i;
        seq[i] = 0;
    }
    int32_t last = n - 1;
    struct step_batch b = {
        .n_rows = n,
        .tokens = tokens + start,
        .pos = pos,
        .seq = seq,
        .n_seqs = 1,
        .seqs = sq,
        .n_logits = want_logits ? 1 : 0,
        .logit_rows = &last,
    };
    return be->ops->forward(be->ctx, &b, logits, e);
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts o = {0};
    int prc = gen_parse(argc, argv, &o);
    if (prc == 3) return 0;
    if (prc) return 2;

    int rc = 1;
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL;
    tok_vocab *v = NULL;
    struct backend be = {0};
    sampler *smp = NULL;
    int32_t *ids = NULL, *pos = NULL, *seq = NULL, *blocks = NULL, *out_ids = NULL;
    float *logits = NULL;
    char *text = NULL, *prompt_buf = NULL, piece[256];
    size_t n_ids = 0, text_len = 0, text_cap = 0, released = 0;

    const char *prompt = o.prompt;
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (o.prompt_file) {
        FILE *pf = fopen(o.prompt_file, "rb");
        if (!pf) {
            cli_error("generate", "cannot read prompt file %s: %s", o.prompt_file, strerror(errno));
            goto done;
        }
        prompt_buf = cli_read_all(pf, &prompt_len);
        fclose(pf);
        if (!prompt_buf) {
            cli_error("generate", "cannot read prompt file %s", o.prompt_file);
            goto done;
        }
        prompt = prompt_buf;
    }

    if (gguf_open(o.model, &f, &e)) {
        cli_error("generate", "cannot load model %s: %s", o.model, e.msg);
        goto done;
    }
    if (model_load(f, &m, &e)) {
        cli_error("generate", "model %s: %s", o.model, e.msg);
        goto done;
    }
    if (tok_load(f, &v, &e)) {
        cli_error("generate", "tokenizer of %s: %s", o.model, e.msg);
        goto done;
    }
    if (tok_n_vocab(v) > m->hp.n_vocab) {
        cli_error("generate", "model %s: the vocabulary has %d tokens but token_embd has %d rows", o.model,
                  (int)tok_n_vocab(v), (int)m->hp.n_vocab);
        goto done;
    }
    int add_bos = !o.no_bos && tok_add_bos(v) && tok_bos(v) >= 0;
    if (tok_encode(v, prompt, prompt_len, add_bos, !o.no_special, &ids, &n_ids, &e)) {
        cli_error("generate", "cannot tokenize the prompt: %s", e.msg);
        goto done;
    }
    if (n_ids == 0) {
        cli_error("generate", "the prompt is empty (no tokens)");
        goto done;
    }
    long n_ctx = o.n_ctx > 0 ? o.n_ctx : m->hp.n_ctx_train;
    if (n_ctx > m->hp.n_ctx_train) {
        cli_error("generate", "-c %ld exceeds the model's context length of %d tokens", n_ctx,
                  (int)m->hp.n_ctx_train);
        goto done;
    }
    if ((long)n_ids + o.n_predict > n_ctx) {
        cli_error("generate", "the prompt (%zu tokens) plus -n %ld tokens exceeds the context of %ld tokens", n_ids,
                  o.n_predict, n_ctx);
        goto done;
    }
    const int32_t n_prompt = (int32_t)n_ids;
    const int32_t n_total = n_prompt + (int32_t)o.n_predict;
    const int32_t n_blocks = (n_total + GEN_KV_BLOCK - 1) / GEN_KV_BLOCK;
    const int32_t n_vocab = m->hp.n_vocab;

    if (backend_cpu_init(&be, (int)o.n_threads, &e) || be.ops->load(be.ctx, m, &e) ||
        be.ops->kv_alloc(be.ctx, n_blocks, GEN_KV_BLOCK, o.kv_type, &e)) {
        cli_error("generate", "%s", e.msg);
        goto done;
    }
    /* sample only ids the tokenizer knows (token_embd may have padding rows beyond the vocabulary) */
    if (sampler_check_params(&o.sp, tok_n_vocab(v), &e) || sampler_init(tok_n_vocab(v), &smp, &e)) {
        cli_error("generate", "%s", e.msg);
        goto done;
    }
    int32_t n_batch = (int32_t)(o.n_batch < n_prompt ? o.n_batch : n_prompt);
    blocks = malloc((size_t)n_blocks * sizeof *blocks);
    pos = malloc((size_t)n_batch * sizeof *pos);
    seq = malloc((size_t)n_batch * sizeof *seq);
    logits = malloc((size_t)n_vocab * sizeof *logits);
    out_ids = malloc(((size_t)o.n_predict + 1) * sizeof *out_ids);
    int32_t *all = realloc(ids, (size_t)n_total * sizeof *ids); /* prompt + generated, for the steps */
    if (all) ids = all;
    if (!blocks || !pos || !seq || !logits || !out_ids || !all) {
        cli_error("generate", "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_blocks; i++) blocks[i] = i;
    struct step_seq sq = {.block_table = blocks, .n_blocks = n_blocks};

    double t0 = clock_now();
    for (int32_t start = 0; start < n_prompt; start += n_batch) {
        int32_t n = n_prompt - start < n_batch ? n_prompt - start : n_batch;
        if (gen_step(&be, ids, start, n, &sq, start + n == n_prompt, logits, pos, seq, &e)) {
            cli_error("generate", "forward: %s", e.msg);
            goto done;
        }
    }
    double t1 = clock_now();
    int32_t n_gen = 0;
    int stopped = 0;
    while (n_gen < o.n_predict) {
        int32_t tok = sampler_sample(smp, &o.sp, ids, n_prompt, n_gen, logits);
        if (!o.ignore_eos && tok_is_eog(v, tok)) break;
        out_ids[n_gen] = tok;
        ids[n_prompt + n_gen] = tok;
        n_gen++;
        int nb = tok_token_bytes(v, tok, 0, piece, sizeof piece);
        if (nb < 0) {
            cli_error("generate", "sampled token %d is outside the vocabulary", (int)tok);
            goto done;
        }
        const char *bytes = piece;
        char *big = NULL;
        if ((size_t)nb > sizeof piece) { /* a rare long piece */
            big = malloc((size_t)nb);
            if (big) tok_token_bytes(v, tok, 0, big, (size_t)nb);
            bytes = big;
        }
        int app = bytes ? gen_append(&text, &text_len, &text_cap, bytes, (size_t)nb) : -1;
        free(big);
        if (app) {
            cli_error("generate", "out of memory");
            goto done;
        }
        size_t upto;
        stopped = stop_scan(text, text_len, released, o.stops, o.n_stops, &upto);
        if (!o.ids && upto > released) {
            fwrite(text + released, 1, upto - released, stdout);
            fflush(stdout);
        }
        released = upto;
        if (stopped || n_gen == o.n_predict) break;
        if (gen_step(&be, ids, n_prompt + n_gen - 1, 1, &sq, 1, logits, pos, seq, &e)) {
            cli_error("generate", "forward: %s", e.msg);
            goto done;
        }
    }
    double t2 = clock_now();
    if (o.ids) {
        for (int32_t i = 0; i < n_gen; i++) printf(i ? " %d" : "%d", (int)out_ids[i]);
        printf("\n");
    } else if (!stopped && released < text_len) {
        fwrite(text + released, 1, text_len - released, stdout); /* a held-back tail that never completed */
    }
    fflush(stdout);
    int32_t n_decode = n_gen > 0 ? n_gen - 1 : 0; /* the first token comes from the prefill's logits */
    fprintf(stderr, "generate: prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens, decode %.2f tok/s\n",
            (int)n_prompt, t1 - t0, (t1 - t0) > 0 ? n_prompt / (t1 - t0) : 0.0, (int)n_gen,
            (t2 - t1) > 0 && n_decode > 0 ? n_decode / (t2 - t1) : 0.0);
    rc = 0;
done:
    free(prompt_buf);
    free(text);
    free(out_ids);
    free(logits);
    free(seq);
    free(pos);
    free(blocks);
    free(ids);
    sampler_free(smp);
    backend_free(&be);
    tok_free(v);
    model_free(m);
    gguf_close(f);
    return rc;
}
