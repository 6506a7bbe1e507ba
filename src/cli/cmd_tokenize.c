/* nightshift tokenize — text on stdin -> token ids on stdout.
 *
 *   nightshift tokenize [-m MODEL] [--bos] [--special]
 *
 * All of stdin is one text (bytes as they are, trailing newline included). The ids are printed
 * space-separated on one line. No BOS unless --bos; special-token text is plain text unless --special.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

static const char tokenize_usage[] =
    "usage: nightshift tokenize [-m MODEL] [--bos] [--special]\n"
    "\n"
    "Reads all of stdin as one text and prints its token ids, space-separated, on one line.\n"
    "  -m, --model MODEL  GGUF file with the vocab (default: $NIGHTSHIFT_MODEL, the fetched SmolLM2,\n"
    "                     else ../shared/models/stories260K.gguf)\n"
    "  --bos              put the BOS token first (default: no BOS)\n"
    "  --special          text of control tokens (e.g. <|im_start|>) becomes those tokens\n";

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int bos = 0, special = 0;
    const struct cli_opt opts[] = {
        {.flag = "--model", .alias = "-m", .type = CLI_OPT_STRING, .dst = &model},
        {.flag = "--bos", .type = CLI_OPT_SET, .dst = &bos, .lo = 1},
        {.flag = "--special", .type = CLI_OPT_SET, .dst = &special, .lo = 1},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tokenize_usage, stdout);
            return 0;
        }
        int r = cli_opts_parse("tokenize", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cli_error("tokenize", "unknown argument '%s'", argv[i]);
            fputs(tokenize_usage, stderr);
            return 2;
        }
    }
    if (!model) model = cli_default_model();

    struct err e = {{0}};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    int rc = 1;
    if (cli_open_vocab("tokenize", model, &f, &v)) goto done;
    if (!(text = cli_read_all(stdin, &len))) {
        cli_error("tokenize", "cannot read stdin");
        goto done;
    }
    if (tok_encode(v, text, len, bos, special, &ids, &n, &e)) {
        cli_error("tokenize", "%s", e.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ids);
    free(text);
    tok_free(v);
    gguf_close(f);
    return rc;
}
