/* nightshift detokenize — token ids on stdin -> text on stdout.
 *
 *   nightshift detokenize [-m MODEL] [--special]
 *
 * Reads whitespace-separated decimal ids and writes the text they stand for, with no newline added.
 * A non-numeric or out-of-range id is an error naming it and its position (0-based).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

static const char detokenize_usage[] =
    "usage: nightshift detokenize [-m MODEL] [--special]\n"
    "\n"
    "Reads whitespace-separated token ids from stdin and prints the text (no newline added).\n"
    "  -m, --model MODEL  GGUF file with the vocab (default: $NIGHTSHIFT_MODEL, the fetched SmolLM2,\n"
    "                     else ../shared/models/stories260K.gguf)\n"
    "  --special          show control tokens (BOS, EOS, <|im_end|>, ...) as their text\n";

/* The C locale's white space. */
static int detok_is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    int special = 0;
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &model},
        {.flag = "--special", .type = CLI_OPT_SET, .dst = &special, .lo = 1},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(detokenize_usage, stdout);
            return 0;
        }
        int r = cli_opts_parse("detokenize", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cli_error("detokenize", "unknown argument '%s'", argv[i]);
            fputs(detokenize_usage, stderr);
            return 2;
        }
    }
    if (!model) model = cli_default_model();

    struct err e = {{0}};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    char *text = NULL, word[64];
    size_t tlen = 0;
    int rc = 1;
    if (cli_open_vocab("detokenize", model, &f, &v)) goto done;
    for (;;) {
        int c;
        size_t wl = 0, wlen = 0; /* wlen: the word's full length (may exceed what fits in word) */
        while ((c = getchar()) != EOF && detok_is_space(c))
            ;
        if (c == EOF) break;
        do {
            if (wl + 1 < sizeof word) word[wl++] = (char)c;
            wlen++;
        } while ((c = getchar()) != EOF && !detok_is_space(c));
        word[wl] = '\0';
        char *end;
        errno = 0;
        long long x = strtoll(word, &end, 10);
        if (wlen != wl || *end != '\0' || end == word || errno) {
            cli_error("detokenize", "'%s%s' at position %zu is not a token id", word, wlen != wl ? "..." : "", n);
            goto done;
        }
        if (x < 0 || x >= tok_n_vocab(v)) {
            cli_error("detokenize", "token id %lld at position %zu is outside the vocab (%d tokens)", x, n,
                      (int)tok_n_vocab(v));
            goto done;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            int32_t *ni = realloc(ids, cap * sizeof *ni);
            if (!ni) {
                cli_error("detokenize", "out of memory");
                goto done;
            }
            ids = ni;
        }
        ids[n++] = (int32_t)x;
    }
    if (ferror(stdin)) {
        cli_error("detokenize", "cannot read stdin");
        goto done;
    }
    if (tok_decode_ex(v, ids, n, special, &text, &tlen, &e)) {
        cli_error("detokenize", "%s", e.msg);
        goto done;
    }
    if (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout) != 0) {
        cli_error("detokenize", "cannot write stdout");
        goto done;
    }
    rc = 0;
done:
    free(ids);
    free(text);
    tok_free(v);
    gguf_close(f);
    return rc;
}
